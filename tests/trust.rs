//! One verdict on every signature (issue #12): forged signatures of each class in
//! tests/vectors/ed25519/cases.json, made by a key's holder, are refused at ingest over HTTP;
//! and a log or bundle that holds one anyway (written around the ledger) is named by
//! verify-log's checker, by `gpuledger verify` and by verifiers/python, each with its reason.

mod common;

use base64::prelude::{Engine, BASE64_STANDARD};
use common::*;
use gpuledger::core::bundle::{self, BundleSubject, Header};
use gpuledger::core::checkpoint::LogSigner;
use gpuledger::core::envelope::Envelope;
use gpuledger::core::ids::LEDGER_SIGNER;
use gpuledger::core::keys;
use gpuledger::core::leaf::{Leaf, GENESIS_PREV};
use gpuledger::core::logcheck::LogChecker;
use gpuledger::core::merkle::{self, MemoryHashes};
use gpuledger::core::record::{
    Body, InvoiceIssued, Kind, LogPolicy, NodeGpu, NodeUpdated, RecordExcluded, Role, Settlement,
    SignerKeyRegistered, TenantRegistered,
};
use gpuledger::core::time::Timestamp;
use gpuledger::sample;
use rust_decimal::Decimal;

/// `env` with its signature replaced by a forgery of `class` by `key`.
fn forged(env: &Envelope, class: &str, key: &ed25519_dalek::SigningKey) -> Envelope {
    let mut e = env.clone();
    let message = e.signed_message(sample::ORIGIN).unwrap();
    e.sig = BASE64_STANDARD.encode(forge::signature(class, key, &message));
    e
}

both_backends!(forged_signatures_are_refused_over_http, |db: &TestDb| {
    let s = setup(db, &[("node-f", Role::Node)]);
    let ledger = gpuledger::store::Ledger::open(&db.url, log_key()).unwrap();
    parties_on(&ledger, &["t1"], &["node-f"]);
    drop(ledger);
    let (child, base) = spawn_serve(&s.url, &s.log_key, 0, &[]);
    let _server = Proc(child);
    let key = sample::key("node-f");
    let h = Http::new(&base);
    let before = h.size();
    // The honest records of seqs 1..=N, and a forgery of each class of each in turn.
    let honest = usage_run("node-f", &key, "t1", 1..=forge::CLASSES.len() as u64);
    let batch: Vec<Envelope> = forge::CLASSES
        .iter()
        .zip(&honest)
        .map(|(class, env)| forged(env, class, &key))
        .collect();
    let ans = h.post_records(&batch);
    for (class, o) in forge::CLASSES
        .iter()
        .zip(ans["outcomes"].as_array().unwrap())
    {
        assert_eq!(o["reason"], "bad_signature", "{class}: {o}");
    }
    assert_eq!(h.size(), before, "nothing forged was logged");
    // The honest records of the same seqs go in afterwards.
    let ans = h.post_records(&honest);
    assert_eq!(ans["accepted"], forge::CLASSES.len(), "{ans}");
});

/// Signs ledger entries with the log key, with consecutive seqs.
fn ledger_signer() -> impl FnMut(Body) -> Envelope {
    let mut seq = 0;
    move |body: Body| {
        seq += 1;
        signed(LEDGER_SIGNER, &log_key(), seq, &body)
    }
}

/// The registration of `key` as `name`'s, with the sample scope of its role.
fn registration(name: &str, role: Role, key: &ed25519_dalek::SigningKey) -> Body {
    let scope = match role {
        Role::Node => sample::node_scope(name),
        _ => sample::market_scope(),
    };
    Body::SignerKeyRegistered(SignerKeyRegistered {
        signer: name.into(),
        role,
        key_id: keys::key_id(&key.verifying_key()),
        public_key: keys::encode_public(&key.verifying_key()),
        nodes: scope.nodes,
        regions: scope.regions,
    })
}

/// A log built around the ledger: the policy, a node and its key, a tenant and its lease, then
/// an honest record and one forged record. Returns the leaves and the forged record's index.
fn forged_log(class: &str) -> (Vec<Vec<u8>>, u64) {
    let node = sample::key("node-f");
    let now = Timestamp::now();
    let mut ledger = ledger_signer();
    let mut envs = vec![
        ledger(Body::LogPolicy(LogPolicy::default())),
        ledger(sample::node("node-f")),
        ledger(registration("node-f", Role::Node, &node)),
    ];
    for b in sample::parties("t1", &["node-f"], sample::NODE_GPUS) {
        envs.push(ledger(b));
    }
    let end = now.plus(-60);
    envs.push(sample::usage(
        "node-f",
        &node,
        1,
        "t1",
        Decimal::ONE,
        end.plus(-10),
    ));
    let bad = sample::usage("node-f", &node, 2, "t1", Decimal::ONE, end);
    envs.push(forged(&bad, class, &node));
    let mut prev = GENESIS_PREV;
    let leaves = envs
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let bytes = Leaf::new(i as u64, now, &prev, e).to_bytes();
            prev = merkle::leaf_hash(&bytes);
            bytes
        })
        .collect::<Vec<_>>();
    let n = leaves.len() as u64;
    (leaves, n - 1)
}

/// A bare bundle of the whole forged log (every entry, its proof, the checkpoint).
fn bundle_of(leaves: &[Vec<u8>]) -> Vec<u8> {
    let signer = LogSigner::new(sample::ORIGIN, log_key()).unwrap();
    let mut tree = MemoryHashes::default();
    let hashes: Vec<_> = leaves.iter().map(|l| merkle::leaf_hash(l)).collect();
    merkle::append_leaves(0, &hashes, &mut tree).unwrap();
    let n = leaves.len() as u64;
    let note = signer.sign_checkpoint(n, &merkle::tree_hash(n, &tree).unwrap());
    let header = Header::new(
        sample::ORIGIN,
        &note,
        BundleSubject::Certificate("CERT-000001".into()),
    );
    let mut out = bundle::header_line(&header);
    // The context entries first, then the records, each part in index order (§14).
    let is_record = |l: &[u8]| {
        Leaf::from_bytes(l)
            .ok()
            .and_then(|l| Kind::parse(&l.envelope.kind))
            .is_some_and(bundle::is_record_kind)
    };
    let (records, context): (Vec<_>, Vec<_>) =
        leaves.iter().enumerate().partition(|(_, l)| is_record(l));
    for (i, l) in context.into_iter().chain(records) {
        let proof = merkle::prove_record(n, i as u64, &tree).unwrap();
        out.extend(bundle::entry_line(i as u64, l, &proof));
    }
    out.extend(bundle::end_line(n));
    out
}

#[test]
fn a_forged_signature_in_a_log_or_bundle_is_named_by_every_verifier() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = verifier_key_file(dir.path());
    let python = python_verifier_ready();
    let browser = browser_verifier_ready();
    for class in forge::CLASSES {
        let (leaves, bad) = forged_log(class);
        // verify-log's checker: the forged entry is named, with its reason, and nothing else.
        let failures = checker_failures(&leaves);
        assert_eq!(failures.len(), 1, "{class}: {failures:?}");
        assert_eq!(
            (failures[0].index, failures[0].reason),
            (bad, "bad_signature"),
            "{class}"
        );
        // The same entries as a bundle: gpuledger verify and verifiers/python name it.
        let path = dir.path().join(format!("{class}.ndjson"));
        std::fs::write(&path, bundle_of(&leaves)).unwrap();
        let (code, v) = verify_json(bin().arg("verify"), &path, &key_file);
        assert_eq!(code, Some(1), "{class}");
        assert_eq!(v["reason"], "entry_signature", "{class}: {v}");
        assert_eq!(v["item"], format!("entry {bad}"), "{class}: {v}");
        if python {
            let (code, v) = verify_json(python_verifier().arg("bundle"), &path, &key_file);
            assert_eq!(code, Some(1), "{class}: {v}");
            assert_eq!(v["reason"], "entry_signature", "{class}: {v}");
        }
        if browser {
            let v = browser_verdict(&path, &key_file);
            assert_eq!(
                (&v["reason"], &v["item"]),
                (&"entry_signature".into(), &format!("entry {bad}").into()),
                "{class}, the console: {v}"
            );
        }
    }
}

/// Whether the console's verifier can be run under Node here (it needs Node 20+); when it
/// cannot, a loud line says what was not tested, and with `GPULEDGER_REQUIRE_NODE=1` (CI)
/// the test fails instead.
fn browser_verifier_ready() -> bool {
    let major = std::process::Command::new("node")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            let v = String::from_utf8_lossy(&o.stdout).into_owned();
            v.trim()
                .trim_start_matches('v')
                .split('.')
                .next()?
                .parse::<u32>()
                .ok()
        });
    let ready = major.is_some_and(|m| m >= 20);
    if !ready {
        assert!(
            std::env::var("GPULEDGER_REQUIRE_NODE").as_deref() != Ok("1"),
            "GPULEDGER_REQUIRE_NODE=1 but Node.js 20+ cannot be run"
        );
        eprintln!("\n*** SKIPPED: the console's verifier was not asked (no Node.js 20+) ***\n");
    }
    ready
}

/// The console verifier's verdict on the bundle at `path` (assets/console/verify, under Node):
/// `{"result", "reason", "item", "message"}` as `gpuledger verify --json` names them.
fn browser_verdict(path: &std::path::Path, key_file: &std::path::Path) -> serde_json::Value {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("assets/console/verify/test/verdict.mjs");
    let out = std::process::Command::new("node")
        .arg(script)
        .arg(path)
        .arg(key_file)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "verdict.mjs: {e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Every failure verify-log's checker finds in `leaves`.
fn checker_failures(leaves: &[Vec<u8>]) -> Vec<gpuledger::core::logcheck::Failure> {
    let mut checker = LogChecker::new(sample::ORIGIN, log_key().verifying_key());
    let mut failures = Vec::new();
    for l in leaves {
        let (c, sigs) = checker.push(l);
        failures.extend(c.failure);
        failures.extend(sigs);
    }
    failures.extend(checker.finish_signatures());
    failures
}

/// Runs a verifier (`gpuledger verify`, or verifiers/python's `bundle`) with `--json --bundle
/// PATH --log-key KEY_FILE`: its exit code and JSON answer.
fn verify_json(
    verifier: &mut std::process::Command,
    path: &std::path::Path,
    key_file: &std::path::Path,
) -> (Option<i32>, serde_json::Value) {
    let out = verifier
        .args(["--json", "--bundle"])
        .arg(path)
        .arg("--log-key")
        .arg(key_file)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), v)
}

/// A file holding the tests' verifier key, in `dir`.
fn verifier_key_file(dir: &std::path::Path) -> std::path::PathBuf {
    let vkey = LogSigner::new(sample::ORIGIN, log_key())
        .unwrap()
        .verifier_key();
    let key_file = dir.join("verifier_key.txt");
    std::fs::write(&key_file, vkey).unwrap();
    key_file
}

/// `env` with its body edited and signed again, honestly, by `key` (for this log).
fn edited(
    env: &Envelope,
    key: &ed25519_dalek::SigningKey,
    edit: impl FnOnce(&mut serde_json::Value),
) -> Envelope {
    use ed25519_dalek::Signer;
    let mut e = env.clone();
    edit(&mut e.body);
    let message = e.signed_message(sample::ORIGIN).unwrap();
    e.sig = BASE64_STANDARD.encode(key.sign(&message).to_bytes());
    e
}

/// The leaves of a log of `envs` in order, all received at `now`.
fn leaves_of(envs: Vec<Envelope>, now: Timestamp) -> Vec<Vec<u8>> {
    let mut prev = GENESIS_PREV;
    envs.into_iter()
        .enumerate()
        .map(|(i, e)| {
            let bytes = Leaf::new(i as u64, now, &prev, e).to_bytes();
            prev = merkle::leaf_hash(&bytes);
            bytes
        })
        .collect()
}

/// [`sample::node`] `node` in `region`.
fn node_in(node: &str, region: &str) -> Body {
    let mut n = sample::node(node);
    if let Body::NodeRegistered(n) = &mut n {
        n.region = region.into();
    }
    n
}

/// A whole GPU of a node.
fn gpu(index: u32, uuid: &str, model: &str) -> NodeGpu {
    NodeGpu {
        index,
        uuid: uuid.into(),
        model: model.into(),
        mig: None,
    }
}

/// A `node_updated` body: `gpus` (none: absent) and a power limit.
fn update(node: &str, gpus: Vec<NodeGpu>, watts: Option<Decimal>) -> Body {
    Body::NodeUpdated(NodeUpdated {
        node: node.into(),
        gpus: (!gpus.is_empty()).then_some(gpus),
        max_watts_per_gpu: watts,
    })
}

/// Every admission rule, broken by an honestly signed last entry of a log the ledger would not
/// have written: verify-log's checker, `gpuledger verify`, verifiers/python and the console's
/// verifier (under Node) each name that entry with the rule's own reason, and nothing else.
/// Records that fit their node exactly (all its GPUs, energy at its bound) pass all four.
#[test]
fn a_broken_admission_rule_is_named_by_every_verifier() {
    use gpuledger::core::rating::LeaseClass;
    use gpuledger::core::record::RateCard;
    let node = sample::key("node-f");
    let market = sample::key("market-f");
    let now = Timestamp::now();
    let mut ledger = ledger_signer();
    let card = |from: Timestamp| {
        Body::RateCard(RateCard {
            region: sample::REGION.into(),
            gpu_model: "H100-SXM-80G".into(),
            lease_class: LeaseClass::OnDemand,
            currency: "CNY".into(),
            price_per_gpu_hour: Decimal::from(18),
            effective_from: from,
        })
    };
    let params = |from: Timestamp| {
        Body::RegionParams(gpuledger::core::record::RegionParameters {
            region: sample::REGION.into(),
            currency: "CNY".into(),
            electricity_price_per_kwh: Decimal::new(5, 1),
            pue: Decimal::new(12, 1),
            carbon_g_per_kwh: Decimal::from(500),
            effective_from: from,
        })
    };
    let node_w = sample::key("node-w");
    // node-f is a sample node: 8 H100-SXM-80G GPUs of at most 1000 W each.
    let mut context = vec![
        ledger(Body::LogPolicy(LogPolicy::default())),
        ledger(sample::node("node-f")),
        ledger(registration("node-f", Role::Node, &node)),
        ledger(registration("market-f", Role::Market, &market)),
    ];
    for t in ["t1", "t2"] {
        for b in sample::parties(t, &["node-f"], sample::NODE_GPUS / 2) {
            context.push(ledger(b));
        }
    }
    // t3: a tenant with no lease on node-f.
    context.push(ledger(Body::TenantRegistered(TenantRegistered {
        tenant: "t3".into(),
    })));
    // A 60 s energy record of t1 ending `end`: the bound of t1's 4 leased GPUs for 60 s is
    // 4 × 1000 W × 60 s × 1.05 / 3,600,000 = 0.07 kWh (the node's, 8 GPUs, 0.14 kWh).
    let energy = |seq: u64, kwh: &str, end: Timestamp| {
        let e = sample::energy("node-f", &node, seq, Some("t1"), Decimal::ONE, end);
        edited(&e, &node, |b| {
            b["start"] = end.plus(-60).to_string().into();
            b["kwh"] = kwh.into();
        })
    };
    context.push(ledger(card(now)));
    // An invoice of t1 for an hour that ended an hour ago, 100.00 CNY, for the settlement rules.
    context.push(ledger(Body::InvoiceIssued(InvoiceIssued {
        number: "INV-000001".into(),
        tenant: "t1".into(),
        period_from: now.plus(-7_200),
        period_to: now.plus(-3_600),
        currency: "CNY".into(),
        total: Decimal::new(10_000, 2),
        checkpoint_size: 1,
        invoice_sha256: "00".repeat(32),
    })));
    let settlement = |invoice: &str, currency: &str, cents: i64| Settlement {
        tenant: "t1".into(),
        invoice: invoice.into(),
        currency: currency.into(),
        amount: Decimal::new(cents, 2),
        note: String::new(),
        external_reference: None,
    };
    let spot_at = now.plus(600);
    let good_spot = sample::spot("market-f", &market, 1, Decimal::ONE, spot_at);
    let usage = sample::usage("node-f", &node, 1, "t1", Decimal::ONE, now.plus(-60));
    // The index of a case's first entry, and an exclusion of t1's record there.
    let first_tail = context.len() as u64;
    let exclusion = |entry: u64| {
        Body::RecordExcluded(RecordExcluded {
            tenant: "t1".into(),
            entry,
            reason: "counted twice".into(),
        })
    };
    let set = |k: &'static str, v: String| move |b: &mut serde_json::Value| b[k] = v.into();
    let old = now.plus(-40 * 86_400);
    let cases: Vec<(&str, Vec<Envelope>)> = vec![
        (
            "node_not_allowed",
            vec![edited(&usage, &node, set("node", "node-x".into()))],
        ),
        (
            "region_not_allowed",
            vec![edited(&usage, &node, set("region", "eu-west".into()))],
        ),
        (
            "unknown_tenant",
            vec![edited(&usage, &node, set("tenant", "t9".into()))],
        ),
        (
            "unknown_lease",
            vec![edited(&usage, &node, set("lease", "lease-zz".into()))],
        ),
        (
            "lease_tenant_mismatch",
            vec![edited(&usage, &node, set("lease", "lease-t2".into()))],
        ),
        (
            "too_old",
            vec![edited(&usage, &node, |b| {
                b["start"] = old.to_string().into();
                b["end"] = old.plus(10).to_string().into();
            })],
        ),
        (
            "in_future",
            vec![edited(&usage, &node, |b| {
                b["start"] = now.plus(3_590).to_string().into();
                b["end"] = now.plus(3_600).to_string().into();
            })],
        ),
        (
            "price_in_past",
            vec![sample::spot(
                "market-f",
                &market,
                1,
                Decimal::ONE,
                now.plus(-3_600),
            )],
        ),
        (
            "price_conflict",
            vec![
                good_spot.clone(),
                sample::spot("market-f", &market, 2, Decimal::TWO, spot_at),
            ],
        ),
        (
            // The operator re-pricing usage measured 5 h ago with a card logged now.
            "price_in_past",
            vec![ledger(card(now.plus(-6 * 3_600)))],
        ),
        ("price_in_past", vec![ledger(params(now.plus(-301)))]),
        (
            // t2's hour that ended as the invoice was logged; parameters a minute inside it.
            "price_in_invoiced_period",
            vec![
                ledger(Body::InvoiceIssued(InvoiceIssued {
                    number: "INV-000002".into(),
                    tenant: "t2".into(),
                    period_from: now.plus(-3_600),
                    period_to: now,
                    currency: "CNY".into(),
                    total: Decimal::ONE,
                    checkpoint_size: 1,
                    invoice_sha256: "00".repeat(32),
                })),
                ledger(params(now.plus(-60))),
            ],
        ),
        ("price_not_forward", vec![ledger(card(now))]),
        (
            "unknown_invoice",
            vec![ledger(Body::Payment(settlement("INV-000009", "CNY", 100)))],
        ),
        (
            "currency_mismatch",
            vec![ledger(Body::Payment(settlement("INV-000001", "USD", 100)))],
        ),
        (
            "credit_above_total",
            vec![
                ledger(Body::CreditNote(settlement("INV-000001", "CNY", 6_000))),
                ledger(Body::CreditNote(settlement("INV-000001", "CNY", 4_001))),
            ],
        ),
        (
            // The same bank line recorded twice for t1.
            "reference_used",
            vec![
                ledger(Body::Payment(Settlement {
                    external_reference: Some("CMB-0001".into()),
                    ..settlement("INV-000001", "CNY", 100)
                })),
                ledger(Body::Payment(Settlement {
                    external_reference: Some("CMB-0001".into()),
                    ..settlement("INV-000001", "CNY", 200)
                })),
            ],
        ),
        // The fleet (§6.7): a record fits the node it names, and a node key names only
        // registered nodes.
        (
            "over_capacity",
            vec![sample::usage(
                "node-f",
                &node,
                1,
                "t1",
                Decimal::from(sample::NODE_GPUS + 1),
                now.plus(-60),
            )],
        ),
        (
            // Issue #27's attack: 1,024 GPUs billed on an 8-GPU node.
            "over_capacity",
            vec![sample::usage(
                "node-f",
                &node,
                1,
                "t1",
                Decimal::from(1_024),
                now.plus(-60),
            )],
        ),
        (
            "unknown_gpu_model",
            vec![edited(&usage, &node, set("gpu_model", "L40S-48G".into()))],
        ),
        // Leases (§6.7): t1 and t2 each lease 4 of node-f's 8 GPUs.
        (
            // One GPU more than t1's lease covers, within the node's 8.
            "over_capacity",
            vec![sample::usage(
                "node-f",
                &node,
                1,
                "t1",
                Decimal::from(sample::NODE_GPUS / 2 + 1),
                now.plus(-60),
            )],
        ),
        (
            // Issue #27's attack: the same usage with no lease at all.
            "lease_not_on_node",
            vec![edited(&usage, &node, |b| {
                b.as_object_mut().unwrap().remove("lease");
            })],
        ),
        (
            // Usage before t1's lease began (the fleet rules come before the time rules).
            "outside_lease_term",
            vec![edited(&usage, &node, |b| {
                let from = Timestamp::from_unix(sample::LEASE_FROM).unwrap();
                b["start"] = from.plus(-10).to_string().into();
                b["end"] = from.to_string().into();
            })],
        ),
        (
            // A third lease of node-f: 4 + 4 + 1 of its 8 GPUs.
            "lease_overbooked",
            vec![ledger(sample::lease_on(
                "lease-t1-more",
                "t1",
                &["node-f"],
                1,
            ))],
        ),
        (
            "unknown_gpu",
            vec![ledger({
                let mut l = sample::lease_on("lease-t1-more", "t1", &["node-f"], 1);
                if let Body::LeaseRegistered(l) = &mut l {
                    l.nodes[0].gpu_model = None;
                    l.nodes[0].count = None;
                    l.nodes[0].gpus = Some(vec![sample::NODE_GPUS]);
                }
                l
            })],
        ),
        (
            // 0.000001 kWh above t1's 0.07 kWh bound (one exactly at it passes, below).
            "energy_over_bound",
            vec![energy(1, "0.070001", now.plus(-60))],
        ),
        (
            // The node's whole draw billed to t1, which leases half of it.
            "energy_over_bound",
            vec![energy(1, "0.14", now.plus(-60))],
        ),
        (
            // Energy billed to a tenant with no lease on the node.
            "lease_not_on_node",
            vec![edited(&energy(1, "0.001", now.plus(-60)), &node, |b| {
                b["tenant"] = "t3".into()
            })],
        ),
        (
            // Over 7 s t1's bound is 4 × 1000 W × 7 s × 1.05 / 3,600,000 = 0.0081666… kWh,
            // no finite decimal: every verifier compares without dividing.
            "energy_over_bound",
            vec![edited(
                &energy(1, "0.008166667", now.plus(-60)),
                &node,
                |b| b["start"] = now.plus(-67).to_string().into(),
            )],
        ),
        ("already_registered", vec![ledger(sample::node("node-f"))]),
        (
            // A node in another region, and a key for it whose scope holds the sample region:
            // its usage billed at the sample region's prices.
            "wrong_region",
            vec![
                ledger(node_in("node-w", "cn-west-x")),
                ledger(registration("node-w", Role::Node, &node_w)),
                sample::usage("node-w", &node_w, 1, "t1", Decimal::ONE, now.plus(-60)),
            ],
        ),
        (
            "wrong_region",
            vec![
                ledger(node_in("node-w", "cn-west-x")),
                ledger(registration("node-w", Role::Node, &node_w)),
                sample::energy(
                    "node-w",
                    &node_w,
                    1,
                    None,
                    Decimal::new(1, 3),
                    now.plus(-60),
                ),
            ],
        ),
        // Node updates only add capacity (§5.18).
        (
            "unknown_node",
            vec![ledger(update(
                "node-x",
                vec![gpu(8, "GPU-new-8", "H100-SXM-80G")],
                None,
            ))],
        ),
        (
            // A UUID node-f was registered with, under a new index.
            "invalid_field",
            vec![ledger(update(
                "node-f",
                vec![gpu(8, "GPU-sample-node-f-0", "H100-SXM-80G")],
                None,
            ))],
        ),
        (
            // GPU 0 "replaced" by a board of another model.
            "invalid_field",
            vec![ledger(update(
                "node-f",
                vec![gpu(0, "GPU-new-0", "L40S")],
                None,
            ))],
        ),
        (
            // 8 + 57 GPUs.
            "quantity_out_of_range",
            vec![ledger(update(
                "node-f",
                (8..65)
                    .map(|i| gpu(i, &format!("GPU-new-{i}"), "H100-SXM-80G"))
                    .collect(),
                None,
            ))],
        ),
        (
            // The power limit does not rise.
            "invalid_field",
            vec![ledger(update(
                "node-f",
                Vec::new(),
                Some(Decimal::from(1_000)),
            ))],
        ),
        (
            // One record excluded from rating twice (the rule a bundle can check: its
            // records follow the exclusions, PROTOCOL §6.7 disputes).
            "already_excluded",
            vec![
                usage.clone(),
                ledger(exclusion(first_tail)),
                ledger(exclusion(first_tail)),
            ],
        ),
        (
            // Five seconds of the first record's stream claimed again (§6.4a).
            "overlapping_interval",
            vec![
                usage.clone(),
                sample::usage("node-f", &node, 2, "t1", Decimal::ONE, now.plus(-55)),
            ],
        ),
        (
            // A node key for a node the log has not registered. A rule of §6.7, so every
            // verifier names it by its code (§15 step 4), as it does a node registered twice;
            // `leaf_invalid` is for keys inconsistent with the keys before them.
            "unknown_node",
            vec![ledger(registration(
                "node-g",
                Role::Node,
                &sample::key("node-g"),
            ))],
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let key_file = verifier_key_file(dir.path());
    let python = python_verifier_ready();
    let browser = browser_verifier_ready();
    // Records that fit the node and lease exactly pass every verifier: all 4 GPUs of t1's
    // lease, all 4 of t2's, and energy at the bound.
    let mut envs = context.clone();
    envs.extend([
        sample::usage(
            "node-f",
            &node,
            1,
            "t1",
            Decimal::from(sample::NODE_GPUS / 2),
            now.plus(-60),
        ),
        sample::usage(
            "node-f",
            &node,
            3,
            "t2",
            Decimal::from(sample::NODE_GPUS / 2),
            now.plus(-60),
        ),
        energy(2, "0.07", now.plus(-60)),
    ]);
    let leaves = leaves_of(envs, now);
    let failures = checker_failures(&leaves);
    assert!(failures.is_empty(), "records that fit: {failures:?}");
    let path = dir.path().join("fits.ndjson");
    std::fs::write(&path, bundle_of(&leaves)).unwrap();
    let (code, v) = verify_json(bin().arg("verify"), &path, &key_file);
    assert_eq!((code, &v["result"]), (Some(0), &"PASS".into()), "{v}");
    if python {
        let (code, v) = verify_json(python_verifier().arg("bundle"), &path, &key_file);
        assert_eq!(
            (code, &v["result"]),
            (Some(0), &"PASS".into()),
            "python: {v}"
        );
    }
    if browser {
        let v = browser_verdict(&path, &key_file);
        assert_eq!(v["result"], "PASS", "the console: {v}");
    }
    for (code, tail) in cases {
        let mut envs = context.clone();
        envs.extend(tail);
        let bad = envs.len() as u64 - 1;
        let leaves = leaves_of(envs, now);
        let failures = checker_failures(&leaves);
        assert_eq!(failures.len(), 1, "{code}: {failures:?}");
        assert_eq!(
            (failures[0].index, failures[0].reason),
            (bad, code),
            "{code}"
        );
        let path = dir.path().join(format!("{code}.ndjson"));
        std::fs::write(&path, bundle_of(&leaves)).unwrap();
        let (_, v) = verify_json(bin().arg("verify"), &path, &key_file);
        assert_eq!(
            (&v["reason"], &v["item"]),
            (&code.into(), &format!("entry {bad}").into()),
            "{v}"
        );
        if python {
            let (_, v) = verify_json(python_verifier().arg("bundle"), &path, &key_file);
            assert_eq!(v["reason"], code, "python: {v}");
        }
        if browser {
            let v = browser_verdict(&path, &key_file);
            assert_eq!(
                (&v["reason"], &v["item"]),
                (&code.into(), &format!("entry {bad}").into()),
                "the console: {v}"
            );
        }
    }
}

/// A record is judged by its node as the log held it when the record was appended (issue #27,
/// node updates): a bundle's context holds every `node_updated` entry, later ones too, and
/// every verifier (verify-log's checker, `gpuledger verify`, verifiers/python, the console)
/// refuses a record that claims a GPU model, or energy, the node had only after it; the same
/// records after the update pass all four.
#[test]
fn a_record_is_judged_by_its_node_as_it_was_when_logged() {
    let node = sample::key("node-f");
    let now = Timestamp::now();
    let mut ledger = ledger_signer();
    let mut context = vec![
        ledger(Body::LogPolicy(LogPolicy::default())),
        ledger(sample::node("node-f")),
        ledger(registration("node-f", Role::Node, &node)),
    ];
    for b in sample::parties("t1", &["node-f"], sample::NODE_GPUS) {
        context.push(ledger(b));
    }
    // An L40S added as GPU 8, and the power limit raised from 1000 W to 2000 W.
    let added = || {
        ledger_signer_at(
            context_len(&context),
            update(
                "node-f",
                vec![gpu(8, "GPU-added-8", "L40S")],
                Some(Decimal::from(2_000)),
            ),
        )
    };
    // t1's lease of the L40S (registered after the update).
    let l40s_lease = |seq: u64| {
        ledger_signer_at(
            seq,
            Body::LeaseRegistered(gpuledger::core::record::LeaseRegistered {
                lease: "lease-t1-l40s".into(),
                tenant: "t1".into(),
                class: gpuledger::core::rating::LeaseClass::OnDemand,
                from: Timestamp::from_unix(sample::LEASE_FROM).unwrap(),
                to: None,
                nodes: vec![gpuledger::core::record::LeaseNode {
                    node: "node-f".into(),
                    gpus: Some(vec![8]),
                    share: None,
                    gpu_model: None,
                    count: None,
                }],
            }),
        )
    };
    let l40s = |seq: u64, lease: &str| {
        edited(
            &sample::usage("node-f", &node, seq, "t1", Decimal::ONE, now.plus(-60)),
            &node,
            |b| {
                b["gpu_model"] = "L40S".into();
                b["lease"] = lease.into();
            },
        )
    };
    // The node's 8 GPUs for 10 s at 1000 W: 8 × 1000 × 10 × 1.05 / 3,600,000 = 0.02333… kWh;
    // at 2000 W, twice that. 0.03 kWh fits only after the update.
    let energy = |seq: u64| {
        sample::energy(
            "node-f",
            &node,
            seq,
            None,
            Decimal::new(3, 2),
            now.plus(-30),
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let key_file = verifier_key_file(dir.path());
    let python = python_verifier_ready();
    let browser = browser_verifier_ready();
    let n = context.len() as u64;
    // (name, the entries after the context, the verdict: PASS, or a reason at an index)
    type Case<'a> = (&'a str, Vec<Envelope>, Option<(&'a str, u64)>);
    let cases: Vec<Case> = vec![
        (
            "after the update",
            vec![
                added(),
                l40s_lease(n + 2),
                l40s(1, "lease-t1-l40s"),
                energy(2),
            ],
            None,
        ),
        (
            // The sample lease covers H100s only; the node had no L40S when it was logged.
            "an L40S before the update",
            vec![l40s(1, &sample::lease("t1")), added()],
            Some(("unknown_gpu_model", n)),
        ),
        (
            "energy at the new limit before the update",
            vec![energy(1), added()],
            Some(("energy_over_bound", n)),
        ),
    ];
    for (name, tail, want) in cases {
        let mut envs = context.clone();
        envs.extend(tail);
        let leaves = leaves_of(envs, now);
        let failures = checker_failures(&leaves);
        let got = failures.first().map(|f| (f.reason, f.index));
        assert_eq!(got, want, "{name}: {failures:?}");
        let path = dir
            .path()
            .join(format!("{}.ndjson", name.replace(' ', "-")));
        std::fs::write(&path, bundle_of(&leaves)).unwrap();
        let (_, v) = verify_json(bin().arg("verify"), &path, &key_file);
        let verdict = |v: &serde_json::Value| match want {
            None => v["result"] == "PASS",
            Some((code, at)) => v["reason"] == code && v["item"] == format!("entry {at}"),
        };
        assert!(verdict(&v), "{name}: gpuledger verify: {v}");
        if python {
            let (_, v) = verify_json(python_verifier().arg("bundle"), &path, &key_file);
            let ok = match want {
                None => v["result"] == "PASS",
                Some((code, _)) => v["reason"] == code,
            };
            assert!(ok, "{name}: python: {v}");
        }
        if browser {
            let v = browser_verdict(&path, &key_file);
            assert!(verdict(&v), "{name}: the console: {v}");
        }
    }
}

/// The number of entries so far: the seq the ledger gives its next entry is one more.
fn context_len(context: &[Envelope]) -> u64 {
    context.len() as u64 + 1
}

/// A ledger entry with seq `seq` (the ledger's seqs count its entries from 1).
fn ledger_signer_at(seq: u64, body: Body) -> Envelope {
    signed(LEDGER_SIGNER, &log_key(), seq, &body)
}

/// A registration the log key did not sign registers nothing: verify-log's checker names it
/// (bad signature) and the records signed with the key it claims to register (an unknown signer).
#[test]
fn a_forged_registration_admits_nothing_after_it() {
    let node = sample::key("node-f");
    let (mut leaves, record) = forged_log("s_plus_l");
    // Re-sign the key's registration (entry 2, after the node's) with a key that is not the
    // log's, and the record honestly, then rebuild the chain.
    let mut envs: Vec<Envelope> = leaves
        .drain(..)
        .map(|l| Leaf::from_bytes(&l).unwrap().envelope)
        .collect();
    let impostor = sample::key("not-the-log");
    envs[2] = edited(&envs[2], &impostor, |_| {});
    envs[record as usize] = edited(&envs[record as usize], &node, |_| {});
    let leaves = leaves_of(envs, Timestamp::now());
    let failures = checker_failures(&leaves);
    let named: Vec<(u64, &str)> = failures.iter().map(|f| (f.index, f.reason)).collect();
    assert_eq!(
        named,
        [
            (2, "bad_signature"),
            (record - 1, "unknown_signer"),
            (record, "unknown_signer")
        ]
    );
}

/// The dispute rules that need the record an exclusion names (PROTOCOL §6.7, disputes):
/// verify-log's checker names an exclusion of another tenant's record, of an entry that is no
/// record, of one not below it, and of a record an invoice rated; the bundle verifiers, whose
/// records follow the exclusions, cannot tell and pass the same log (as PROTOCOL says), while
/// an exclusion of an uninvoiced record of the tenant, late or not, passes everywhere.
#[test]
fn exclusions_the_log_cannot_support_are_named_by_verify_log() {
    let node = sample::key("node-f");
    let now = Timestamp::now();
    let mut ledger = ledger_signer();
    let mut base = vec![
        ledger(Body::LogPolicy(LogPolicy::default())),
        ledger(sample::node("node-f")),
        ledger(registration("node-f", Role::Node, &node)),
    ];
    for t in ["t1", "t2"] {
        for b in sample::parties(t, &["node-f"], sample::NODE_GPUS / 2) {
            base.push(ledger(b));
        }
    }
    // An invoice of t1's hour [−2 h, −1 h), then t1's record in that hour (late: logged after
    // the invoice), and t1's and t2's records of the last minute.
    let invoice = |from: i64, to: i64, size: usize| {
        Body::InvoiceIssued(InvoiceIssued {
            number: format!("INV-{size:06}"),
            tenant: "t1".into(),
            period_from: now.plus(from),
            period_to: now.plus(to),
            currency: "CNY".into(),
            total: Decimal::new(100, 2),
            checkpoint_size: size as u64,
            invoice_sha256: "00".repeat(32),
        })
    };
    let size = base.len();
    base.push(ledger(invoice(-7_200, -3_600, size)));
    // Each appended at the next index, which it returns.
    let mut record = |seq: u64, tenant: &str, end: i64| {
        base.push(sample::usage(
            "node-f",
            &node,
            seq,
            tenant,
            Decimal::ONE,
            now.plus(end),
        ));
        base.len() as u64 - 1
    };
    let late = record(1, "t1", -7_000);
    let t1 = record(2, "t1", -60);
    let t2 = record(3, "t2", -60);
    let exclude = |entry: u64| {
        Body::RecordExcluded(RecordExcluded {
            tenant: "t1".into(),
            entry,
            reason: "disputed".into(),
        })
    };
    let dir = tempfile::tempdir().unwrap();
    let key_file = verifier_key_file(dir.path());
    let python = python_verifier_ready();
    let browser = browser_verifier_ready();
    let passes = |name: &str, leaves: &[Vec<u8>]| {
        let path = dir
            .path()
            .join(format!("{}.ndjson", name.replace(' ', "-")));
        std::fs::write(&path, bundle_of(leaves)).unwrap();
        let (_, v) = verify_json(bin().arg("verify"), &path, &key_file);
        assert_eq!(v["result"], "PASS", "{name}: {v}");
        if python {
            let (_, v) = verify_json(python_verifier().arg("bundle"), &path, &key_file);
            assert_eq!(v["result"], "PASS", "{name}, python: {v}");
        }
        if browser {
            let v = browser_verdict(&path, &key_file);
            assert_eq!(v["result"], "PASS", "{name}, the console: {v}");
        }
    };
    // The late record and the last minute's are not invoiced yet: both may be excluded.
    let mut good = base.clone();
    good.push(ledger(exclude(late)));
    good.push(ledger(exclude(t1)));
    let leaves = leaves_of(good, now);
    let failures = checker_failures(&leaves);
    assert!(failures.is_empty(), "{failures:?}");
    passes("good", &leaves);
    // An invoice computed after the late record was logged rated it.
    let mut invoiced = base.clone();
    let size = invoiced.len();
    invoiced.push(ledger(invoice(-3_600, -1_800, size)));
    let cases = [
        (
            "another tenant's record",
            base.clone(),
            t2,
            "unknown_record",
        ),
        (
            "an entry that is no record",
            base.clone(),
            0,
            "unknown_record",
        ),
        (
            "an entry not below it",
            base.clone(),
            base.len() as u64,
            "unknown_record",
        ),
        (
            "a record an invoice rated",
            invoiced,
            late,
            "record_invoiced",
        ),
    ];
    for (name, mut log, entry, reason) in cases {
        let bad = log.len() as u64;
        log.push(ledger(exclude(entry)));
        let leaves = leaves_of(log, now);
        let failures = checker_failures(&leaves);
        let named: Vec<(u64, &str)> = failures.iter().map(|f| (f.index, f.reason)).collect();
        assert_eq!(named, [(bad, reason)], "{name}");
        passes(name, &leaves);
    }
}
