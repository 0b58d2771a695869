//! Compute-usage certificates and evidence bundles: issued from the log on both databases,
//! verified offline, and a tamper matrix in which every case fails with its own reason
//! (docs/PROTOCOL.md §13–§15). Cases that need a log the ledger would never write (a record
//! signed after its key's revocation, a bad signature inside the tree) are built by hand with
//! the core's pieces and the log key, as a dishonest key holder could.

mod common;

use base64::prelude::{Engine, BASE64_STANDARD};
use common::*;
use ed25519_dalek::SigningKey;
use gpuledger::core::bundle::{self, NoSubject, Reason};
use gpuledger::core::certificate::{self, Certificate, CertificateCheck, Scope, Tally};
use gpuledger::core::checkpoint::LogSigner;
use gpuledger::core::envelope::Envelope;
use gpuledger::core::ids::LEDGER_SIGNER;
use gpuledger::core::invoice::Period;
use gpuledger::core::keys;
use gpuledger::core::leaf::{Leaf, GENESIS_PREV};
use gpuledger::core::merkle::{self, Hash, MemoryHashes};
use gpuledger::core::record::{
    Body, Kind, RegionParameters, Role, SignerKeyRegistered, SignerKeyRevoked, TenantRegistered,
};
use gpuledger::core::time::Timestamp;
use gpuledger::store::certificates::{self as store_certs, CertificateRequest};
use gpuledger::store::{Ledger, StoreError};
use rust_decimal::Decimal;

const ORIGIN: &str = "test.gpuledger/log";

fn period() -> Period {
    Period {
        from: at(0),
        to: at(7200),
    }
}

/// The log of [`scenario`], opened on `db`.
fn scenario_log(db: &TestDb) -> Ledger {
    scenario_with(db, false)
}

/// A log with acme's usage in two regions, energy with region parameters, another tenant's
/// record and an acme record after the period; with `rate_cards`, also H100 on-demand rate
/// cards for both regions. The prices take effect a day before the period and are received
/// then (no price takes effect in the past): the log's clock starts there and is the
/// system's again for the records.
fn scenario_with(db: &TestDb, rate_cards: bool) -> Ledger {
    let ledger = open_at(db, at(-86_400));
    scenario(&ledger, rate_cards);
    ledger
}

fn scenario(ledger: &Ledger, rate_cards: bool) {
    ensure_nodes_in(ledger, &WEST_EAST_NODES);
    let n1 = signer(ledger, "node-1", Role::Node);
    let n2 = signer_for(ledger, "node-2", Role::Node, &["node-2", "node-3"]);
    parties(ledger, &["acme", "globex"]);
    acme_globex_h100_leases(ledger);
    ledger
        .append_ledger_entry(Body::RegionParams(RegionParameters {
            region: "west".into(),
            currency: "CNY".into(),
            electricity_price_per_kwh: dec("0.28"),
            pue: dec("1.08"),
            carbon_g_per_kwh: dec("550"),
            effective_from: at(-86_400),
        }))
        .unwrap();
    // An invoice of acme for the certificate's period needs rate cards for both regions it used.
    for region in ["west", "east"].into_iter().filter(|_| rate_cards) {
        ledger
            .append_ledger_entry(Body::RateCard(gpuledger::core::record::RateCard {
                region: region.into(),
                gpu_model: "H100".into(),
                lease_class: gpuledger::core::rating::LeaseClass::OnDemand,
                currency: "CNY".into(),
                price_per_gpu_hour: dec("18.5"),
                effective_from: at(-86_400),
            }))
            .unwrap();
    }
    ledger.set_clock(None);
    #[rustfmt::skip]
    let records = [
        ("node-1", &n1, 1, h100_usage("acme", "node-1", "west", Some("h100-acme"), "8", 0, 3600)),
        ("node-2", &n2, 1, h100_usage("acme", "node-3", "east", Some("h100-acme"), "0.5", 0, 600)),
        ("node-1", &n1, 2, h100_usage("acme", "node-1", "west", Some("l1"), "2", 3600, 7200)),
        ("node-1", &n1, 3, acme_energy("node-1", "12.5", 0, 3600)),
        ("node-2", &n2, 2, h100_usage("globex", "node-2", "west", Some("h100-globex"), "1", 0, 60)),
        ("node-1", &n1, 4, h100_usage("acme", "node-1", "west", Some("h100-acme"), "1", 7200, 7260)),
    ];
    let envs: Vec<Envelope> = records
        .iter()
        .map(|(s, k, seq, b)| signed(s, k, *seq, b))
        .collect();
    let out = ledger.append(envs).unwrap();
    assert_accepted(&out);
}

fn request(scope: Scope) -> CertificateRequest {
    CertificateRequest {
        tenant: "acme".into(),
        period: period(),
        scope,
    }
}

fn bundle_of(ledger: &Ledger, cert: &Certificate) -> Vec<Vec<u8>> {
    let mut lines = Vec::new();
    ledger
        .reads()
        .run(|c| {
            store_certs::write_certificate_bundle(c, cert, &mut |l| {
                lines.push(l);
                Ok(())
            })
        })
        .unwrap();
    lines
        .into_iter()
        .map(|mut l| {
            assert_eq!(l.pop(), Some(b'\n'), "every line ends with LF");
            l
        })
        .collect()
}

fn verifier_key() -> String {
    LogSigner::new(ORIGIN, log_key()).unwrap().verifier_key()
}

/// Verifies a certificate and its bundle lines as `gpuledger verify` does.
fn verify(cert: &Certificate, lines: &[Vec<u8>]) -> Result<certificate::Claims, bundle::Failure> {
    let (_, check) = bundle::verify_bundle(
        lines.iter().cloned().map(Ok),
        &verifier_key(),
        |h, a| CertificateCheck::start(cert.clone(), h, a),
        &mut |_| {},
    )?;
    check.finish()
}

both_backends!(
    a_certificate_is_issued_logged_and_verifies_offline,
    |db: &TestDb| {
        let ledger = scenario_log(db);
        let size_before = ledger.reads().size().unwrap();
        let cert = ledger
            .issuance()
            .certificate(request(Scope::default()))
            .unwrap();
        assert_eq!(cert.id, "CERT-000001");
        // 8 × 3600 + 2 × 3600 west; 0.5 × 600 east; 12.5 kWh × 1.08 = 13.5; × 550 g = 7.425 kg.
        assert_eq!(cert.entries.count, 4);
        let gpu: Vec<(&str, String, u64)> = cert
            .gpu
            .iter()
            .map(|l| {
                (
                    l.region.as_str(),
                    gpuledger::core::decimal::to_canonical(l.gpu_seconds),
                    l.records,
                )
            })
            .collect();
        assert_eq!(
            gpu,
            [
                ("east", "300".to_owned(), 1),
                ("west", "36000".to_owned(), 2)
            ]
        );
        assert_eq!(cert.totals.gpu_seconds, dec("36300"));
        assert_eq!(cert.totals.kwh, dec("12.5"));
        assert_eq!(cert.totals.kwh_with_pue, dec("13.5"));
        assert_eq!(cert.totals.carbon_kg, dec("7.425"));
        assert_eq!(cert.totals.kwh_without_region_params, Decimal::ZERO);
        assert_eq!(cert.energy[0].pue, Some(dec("1.08")));
        // The checkpoint is of the log before the certificate_issued entry, which holds its hash.
        let anchor = bundle::anchor(&cert.checkpoint, &verifier_key()).unwrap();
        assert_eq!(anchor.size(), size_before);
        let entry = &ledger
            .reads()
            .entries(size_before, size_before + 1)
            .unwrap()[0];
        assert_eq!(entry.kind, "certificate_issued");
        let leaf = Leaf::from_bytes(&entry.leaf).unwrap();
        assert_eq!(leaf.envelope.body["certificate_sha256"], cert.sha256_hex());
        assert_eq!(leaf.envelope.body["id"], "CERT-000001");
        // Served JSON reads back to the same certificate.
        let (tenant, json) = ledger
            .reads()
            .run(|c| store_certs::get(c, "CERT-000001"))
            .unwrap()
            .unwrap();
        assert_eq!(tenant, "acme");
        assert_eq!(Certificate::from_json(json.as_bytes()).unwrap(), cert);

        let lines = bundle_of(&ledger, &cert);
        // Header; the policy, 3 node registrations, 2 key registrations, acme's registration
        // and its three leases (its sample lease, h100-acme and l1), region parameters (nothing
        // of globex); 4 records; end.
        assert_eq!(lines.len(), 1 + 11 + 4 + 1);
        let claims = verify(&cert, &lines).unwrap();
        assert_eq!(claims, cert.claims());
        let (v, _) = bundle::verify_bundle(
            lines.iter().cloned().map(Ok),
            &verifier_key(),
            |_, _| Ok(NoSubject),
            &mut |_| {},
        )
        .unwrap();
        assert_eq!((v.entries, v.records), (15, 4));
        // The log with the new kind still verifies end to end.
        verified(&db.url);
    }
);

both_backends!(
    scopes_narrow_a_certificate_and_empty_ones_are_refused,
    |db: &TestDb| {
        let ledger = scenario_log(db);
        let lease = ledger
            .issuance()
            .certificate(request(Scope {
                lease: Some("l1".into()),
                ..Scope::default()
            }))
            .unwrap();
        assert_eq!(
            (lease.entries.count, lease.totals.gpu_seconds),
            (1, dec("7200"))
        );
        assert!(
            lease.energy.is_empty(),
            "energy is not attributed to leases"
        );
        verify(&lease, &bundle_of(&ledger, &lease)).unwrap();
        let nodes = ledger
            .issuance()
            .certificate(request(Scope {
                nodes: Some(vec!["node-3".into()]),
                ..Scope::default()
            }))
            .unwrap();
        assert_eq!(
            (nodes.entries.count, nodes.totals.gpu_seconds),
            (1, dec("300"))
        );
        let region = ledger
            .issuance()
            .certificate(request(Scope {
                region: Some("west".into()),
                ..Scope::default()
            }))
            .unwrap();
        assert_eq!((region.entries.count, region.totals.kwh), (3, dec("12.5")));
        verify(&region, &bundle_of(&ledger, &region)).unwrap();
        let size = ledger.reads().size().unwrap();
        let nothing = ledger.issuance().certificate(request(Scope {
            region: Some("north".into()),
            ..Scope::default()
        }));
        assert!(
            matches!(nothing, Err(StoreError::Refused(_))),
            "{nothing:?}"
        );
        assert_eq!(
            ledger.reads().size().unwrap(),
            size,
            "a refused certificate changes nothing"
        );
        let list = ledger
            .reads()
            .run(|c| store_certs::list(c, Some("acme")))
            .unwrap();
        assert_eq!(list.len(), 3);
        assert!(ledger
            .reads()
            .run(|c| store_certs::list(c, Some("globex")))
            .unwrap()
            .is_empty());
    }
);

/// Lines of a bundle as JSON values, and back.
fn parse(line: &[u8]) -> serde_json::Value {
    serde_json::from_slice(line).unwrap()
}

fn unparse(v: &serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap()
}

fn resign(mut c: Certificate, key: &SigningKey) -> Certificate {
    c.sign(key);
    c
}

fn reason(r: Result<certificate::Claims, bundle::Failure>) -> (Reason, String) {
    let f = r.expect_err("the tampered certificate must fail");
    (f.reason, f.item)
}

fn record_lines(lines: &[Vec<u8>]) -> Vec<usize> {
    (0..lines.len())
        .filter(|&i| {
            let v = parse(&lines[i]);
            v["type"] == "entry" && {
                let leaf = BASE64_STANDARD.decode(v["leaf"].as_str().unwrap()).unwrap();
                let l = Leaf::from_bytes(&leaf).unwrap();
                matches!(l.envelope.kind.as_str(), "gpu_usage" | "energy")
            }
        })
        .collect()
}

fn set_end(lines: &mut [Vec<u8>]) {
    let n = lines.iter().filter(|l| parse(l)["type"] == "entry").count();
    let last = lines.len() - 1;
    lines[last] = bundle::end_line(n as u64)[..]
        .strip_suffix(b"\n")
        .unwrap()
        .to_vec();
}

/// The line of entry `index` of the ledger, with its proof in the tree of `size`.
fn line_of(ledger: &Ledger, index: u64, size: u64) -> Vec<u8> {
    let row = &ledger.reads().entries(index, index + 1).unwrap()[0];
    let proof = ledger.reads().inclusion_proof(index, size).unwrap();
    let mut l = bundle::entry_line(index, &row.leaf, &proof);
    l.pop();
    l
}

#[test]
fn tamper_matrix_each_case_fails_with_its_own_reason() {
    let db = sqlite();
    let ledger = scenario_log(&db);
    let cert = ledger
        .issuance()
        .certificate(request(Scope::default()))
        .unwrap();
    let lines = bundle_of(&ledger, &cert);
    let key = log_key();
    let size = bundle::anchor(&cert.checkpoint, &verifier_key())
        .unwrap()
        .size();
    assert!(verify(&cert, &lines).is_ok());
    let records = record_lines(&lines);
    assert_eq!(records.len(), 4);

    // Any claimed total or line, changed: the signature breaks; re-signed by the key holder,
    // the recomputation names the member.
    let claims = serde_json::to_value(&cert).unwrap();
    let mut members = Vec::new();
    for part in ["totals"] {
        for k in claims[part].as_object().unwrap().keys() {
            members.push(format!("{part}.{k}"));
        }
    }
    for (i, l) in claims["gpu"].as_array().unwrap().iter().enumerate() {
        for k in l.as_object().unwrap().keys() {
            members.push(format!("gpu[{i}].{k}"));
        }
    }
    for k in claims["energy"][0].as_object().unwrap().keys() {
        members.push(format!("energy[0].{k}"));
    }
    assert!(members.len() >= 18, "{members:?}");
    for m in &members {
        let mut v = claims.clone();
        let (part, rest) = m.split_once('.').unwrap();
        let target = match part.split_once('[') {
            Some((p, i)) => &mut v[p][i.trim_end_matches(']').parse::<usize>().unwrap()],
            None => &mut v[part],
        };
        let slot = &mut target[rest];
        *slot = match slot {
            serde_json::Value::Number(n) => (n.as_u64().unwrap() + 1).into(),
            serde_json::Value::String(s) if m.ends_with("region") || m.ends_with("gpu_model") => {
                format!("{s}x").into()
            }
            serde_json::Value::String(s) => (dec(s) + Decimal::ONE).to_string().into(),
            _ => unreachable!(),
        };
        let forged: Certificate = serde_json::from_value(v).unwrap();
        assert_eq!(
            reason(verify(&forged, &lines)).0,
            Reason::CertificateSignature,
            "{m} unsigned"
        );
        let (r, item) = reason(verify(&resign(forged, &key), &lines));
        assert_eq!(
            (r, item.as_str()),
            (Reason::ClaimMismatch, m.as_str()),
            "{m} re-signed"
        );
    }
    // The entry count and commitment.
    let mut c = cert.clone();
    c.entries.count += 1;
    assert_eq!(
        reason(verify(&resign(c, &key), &lines)),
        (Reason::EntriesMismatch, "entries.count".into())
    );
    let mut c = cert.clone();
    c.entries.commitment = merkle::encode_hash(&Hash([7; 32]));
    assert_eq!(
        reason(verify(&resign(c, &key), &lines)).0,
        Reason::EntriesMismatch
    );

    // Any field of any record, and any byte of a signature: the leaf no longer hashes to what
    // the checkpoint commits to.
    for &i in &records {
        let v = parse(&lines[i]);
        let leaf_bytes = BASE64_STANDARD.decode(v["leaf"].as_str().unwrap()).unwrap();
        let leaf: serde_json::Value = serde_json::from_slice(&leaf_bytes).unwrap();
        let fields: Vec<String> = leaf["envelope"]["body"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        let mut variants: Vec<serde_json::Value> = fields
            .iter()
            .map(|f| {
                let mut l = leaf.clone();
                let s = l["envelope"]["body"][f].as_str().unwrap().to_owned();
                let changed = s.replacen(|c: char| c.is_ascii_digit(), "9", 1);
                let changed = if changed == s {
                    format!("{s}1")
                } else {
                    changed
                };
                l["envelope"]["body"][f] = changed.into();
                l
            })
            .collect();
        let mut sig = leaf.clone();
        let s = sig["envelope"]["sig"].as_str().unwrap().to_owned();
        let mut raw = BASE64_STANDARD.decode(&s).unwrap();
        raw[10] ^= 1;
        sig["envelope"]["sig"] = BASE64_STANDARD.encode(raw).into();
        variants.push(sig);
        for changed in variants {
            let bytes = gpuledger::core::canonical::to_vec(&changed).unwrap();
            let mut t = lines.clone();
            let mut line = v.clone();
            line["leaf"] = BASE64_STANDARD.encode(bytes).into();
            t[i] = unparse(&line);
            assert_eq!(
                reason(verify(&cert, &t)).0,
                Reason::InclusionProof,
                "{changed}"
            );
        }
        // A flipped byte of a proof hash.
        let mut t = lines.clone();
        let mut line = v.clone();
        let p = line["proof"][0].as_str().unwrap().to_owned();
        let mut raw = BASE64_STANDARD.decode(p).unwrap();
        raw[0] ^= 0x80;
        line["proof"][0] = BASE64_STANDARD.encode(raw).into();
        t[i] = unparse(&line);
        assert_eq!(reason(verify(&cert, &t)).0, Reason::InclusionProof);
    }

    // Edits of the bundle's lines, each refused with its own reason (and item, where given).
    type Edit<'a> = Box<dyn Fn(&mut Vec<Vec<u8>>) + 'a>;
    #[rustfmt::skip]
    let edits: Vec<(&str, Edit, Reason, Option<&str>)> = vec![
        // A dropped record: the bundle is truncated (end line left alone), or the commitment
        // no longer matches.
        ("a dropped record",        Box::new(|t| { t.remove(records[1]); }),                Reason::Truncated, None),
        ("a dropped record, ended", Box::new(|t| { t.remove(records[1]); set_end(t); }),    Reason::EntriesMismatch, Some("entries.count")),
        // Another tenant's record (entry 18, globex's), genuinely in the log.
        ("another tenant's record", Box::new(|t| { t.insert(records[3] + 1, line_of(&ledger, 18, size)); set_end(t); }), Reason::WrongTenant, Some("entry 18")),
        // The tenant's own record from after the period (entry 19).
        ("a record after the period", Box::new(|t| { t.insert(records[3] + 1, line_of(&ledger, 19, size)); set_end(t); }), Reason::OutsidePeriod, Some("entry 19")),
        ("reordered records",       Box::new(|t| t.swap(records[0], records[1])),           Reason::Order, None),
        ("no end line",             Box::new(|t| { t.pop(); }),                             Reason::Truncated, None),
        // The region parameters (line 11) among the records.
        ("a context entry among the records", Box::new(|t| { let ctx = t.remove(11); t.insert(records[3] - 1, ctx); }), Reason::Order, None),
        ("a malformed line",        Box::new(|t| t[2] = b"{\"type\":\"entry\"".to_vec()),  Reason::Malformed, None),
    ];
    let mut wrong = Vec::new();
    for (what, edit, want, item) in &edits {
        let mut t = lines.clone();
        edit(&mut t);
        let (got, got_item) = reason(verify(&cert, &t));
        if got != *want || item.is_some_and(|i| i != got_item) {
            wrong.push(format!(
                "{what}: {got:?} {got_item:?}, not {want:?} {item:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // Pointed at an older checkpoint (re-signed by the key holder): later records are not in it.
    let signer = LogSigner::new(ORIGIN, key.clone()).unwrap();
    let old_size = 14;
    let old_note = signer.sign_checkpoint(old_size, &ledger.reads().root_at(old_size).unwrap());
    let mut c = cert.clone();
    c.checkpoint = old_note.clone();
    let c = resign(c, &key);
    // The bundle rebuilt honestly for that checkpoint: proofs to its size where they exist.
    let mut t: Vec<Vec<u8>> = lines
        .iter()
        .map(|l| {
            let v = parse(l);
            match v["index"].as_u64() {
                Some(i) if i < old_size => line_of(&ledger, i, old_size),
                _ => l.clone(),
            }
        })
        .collect();
    let mut h = parse(&t[0]);
    h["checkpoint"] = old_note.clone().into();
    t[0] = unparse(&h);
    assert_eq!(
        reason(verify(&c, &t)),
        (Reason::NotInCheckpoint, "entry 14".into())
    );
    // ... and the certificate's checkpoint differs from the bundle's.
    assert_eq!(reason(verify(&cert, &t)).0, Reason::CheckpointMismatch);

    // Signed with another key: the certificate, the checkpoint.
    let other = gpuledger::sample::key("not-the-log");
    assert_eq!(
        reason(verify(&resign(cert.clone(), &other), &lines)).0,
        Reason::CertificateSignature
    );
    let forged_note = LogSigner::new(ORIGIN, other)
        .unwrap()
        .sign_checkpoint(size, &ledger.reads().root_at(size).unwrap());
    let mut t = lines.clone();
    let mut h = parse(&t[0]);
    h["checkpoint"] = forged_note.into();
    t[0] = unparse(&h);
    assert_eq!(reason(verify(&cert, &t)).0, Reason::CheckpointSignature);
}

/// A log written by hand with the log key, as a dishonest key holder could: entry by entry,
/// with the chain, the tree, a checkpoint and proofs.
struct HandLog {
    signer: LogSigner,
    leaves: Vec<Vec<u8>>,
    hashes: MemoryHashes,
    ledger_seq: u64,
    /// The latest receive time so far: the ledger's own entries are received then (receive
    /// times never decrease, PROTOCOL §7).
    received: Option<Timestamp>,
}

impl HandLog {
    /// A log whose entry 0 registers tenant acme (every certificate's context holds it).
    fn new() -> Self {
        let mut log = HandLog {
            signer: LogSigner::new(ORIGIN, log_key()).unwrap(),
            leaves: Vec::new(),
            hashes: MemoryHashes::default(),
            ledger_seq: 0,
            received: None,
        };
        log.ledger(Body::TenantRegistered(TenantRegistered {
            tenant: "acme".into(),
        }));
        log
    }

    fn push(&mut self, env: Envelope, received_at: Timestamp) -> u64 {
        let index = self.leaves.len() as u64;
        let prev = self
            .leaves
            .last()
            .map(|l| merkle::leaf_hash(l))
            .unwrap_or(GENESIS_PREV);
        let bytes = Leaf::new(index, received_at, &prev, env).to_bytes();
        self.received = self.received.max(Some(received_at));
        merkle::append_leaves(index, &[merkle::leaf_hash(&bytes)], &mut self.hashes).unwrap();
        self.leaves.push(bytes);
        index
    }

    fn ledger(&mut self, body: Body) -> u64 {
        self.ledger_seq += 1;
        let env = signed(LEDGER_SIGNER, &log_key(), self.ledger_seq, &body);
        self.push(env, self.received.unwrap_or(at(0)))
    }

    fn note(&self) -> String {
        let n = self.leaves.len() as u64;
        self.signer
            .sign_checkpoint(n, &merkle::tree_hash(n, &self.hashes).unwrap())
    }

    fn line(&self, index: u64) -> Vec<u8> {
        let n = self.leaves.len() as u64;
        let proof = merkle::prove_record(n, index, &self.hashes).unwrap();
        let mut l = bundle::entry_line(index, &self.leaves[index as usize], &proof);
        l.pop();
        l
    }

    /// A certificate of acme over `records` (all in the period) and its bundle, whose context
    /// is entry 0 (acme's registration), every `node_registered` entry (as the service's
    /// bundles carry them all), every `lease_registered` entry (all acme's) and `context`.
    fn certificate(&self, context: &[u64], records: &[u64]) -> (Certificate, Vec<Vec<u8>>) {
        let mut tally = Tally::new();
        let book = gpuledger::core::rating::PriceBook::default();
        for &i in records {
            let leaf = Leaf::from_bytes(&self.leaves[i as usize]).unwrap();
            let kind = Kind::parse(&leaf.envelope.kind).unwrap();
            let h = merkle::leaf_hash(&self.leaves[i as usize]);
            match Body::from_value(kind, &leaf.envelope.body).unwrap() {
                Body::GpuUsage(u) => tally.add_usage(i, &h, &u).unwrap(),
                Body::Energy(e) => tally.add_energy(i, &h, &e, &book).unwrap(),
                _ => unreachable!(),
            }
        }
        let claims = tally.finish().unwrap();
        let note = self.note();
        let req = CertificateRequest {
            tenant: "acme".into(),
            period: period(),
            scope: Scope::default(),
        };
        let cert = Certificate::issue(
            "CERT-000042".into(),
            &req,
            at(7300),
            &self.signer,
            note.clone(),
            claims,
        );
        let header = bundle::Header::new(
            ORIGIN,
            &note,
            bundle::BundleSubject::Certificate(cert.id.clone()),
        );
        let mut lines = vec![bundle::header_line(&header)];
        lines[0].pop();
        let nodes = (0..self.leaves.len() as u64).filter(|&i| {
            let kind = Leaf::from_bytes(&self.leaves[i as usize])
                .unwrap()
                .envelope
                .kind;
            kind == "node_registered" || kind == "lease_registered"
        });
        let mut context: Vec<u64> = std::iter::once(0)
            .chain(nodes)
            .chain(context.iter().copied())
            .collect();
        context.sort_unstable();
        context.dedup();
        for &i in context.iter().chain(records) {
            lines.push(self.line(i));
        }
        let mut end = bundle::end_line((context.len() + records.len()) as u64);
        end.pop();
        lines.push(end);
        (cert, lines)
    }
}

/// Registers node `name` (a [`test_node`]) and a node key for it in the test regions: the key
/// registration's index.
/// Registers node `name` (a test node), acme's lease `h100-<name>` of 8 of its H100s, and
/// `key` for it; returns the index of the key's registration.
fn register(log: &mut HandLog, name: &str, key: &SigningKey) -> u64 {
    log.ledger(test_node_in(name, "west"));
    log.ledger(lease_body(
        &format!("h100-{name}"),
        "acme",
        gpuledger::core::rating::LeaseClass::OnDemand,
        &[(name, "H100", 8)],
    ));
    log.ledger(Body::SignerKeyRegistered(SignerKeyRegistered {
        signer: name.into(),
        role: Role::Node,
        key_id: keys::key_id(&key.verifying_key()),
        public_key: keys::encode_public(&key.verifying_key()),
        nodes: Some(vec![name.into()]),
        regions: TEST_REGIONS.iter().map(|r| r.to_string()).collect(),
    }))
}

#[test]
fn records_signed_after_revocation_or_with_bad_signatures_are_named() {
    let node = gpuledger::sample::key("hand-node");
    let mut log = HandLog::new();
    let reg = register(&mut log, "node-h", &node);
    let u1 = h100_usage("acme", "node-h", "west", Some("h100-node-h"), "1", 0, 600);
    let r1 = log.push(signed("node-h", &node, 1, &u1), at(600));
    let rev = log.ledger(Body::SignerKeyRevoked(SignerKeyRevoked {
        signer: "node-h".into(),
        key_id: keys::key_id(&node.verifying_key()),
        reason: Some("stolen".into()),
    }));
    let u2 = h100_usage(
        "acme",
        "node-h",
        "west",
        Some("h100-node-h"),
        "1",
        600,
        1200,
    );
    let r2 = log.push(signed("node-h", &node, 2, &u2), at(1200));
    // A record whose signature is bad, written into the tree anyway.
    let u3 = h100_usage(
        "acme",
        "node-h",
        "west",
        Some("h100-node-h"),
        "1",
        1200,
        1800,
    );
    let mut bad = signed("node-h", &node, 3, &u3);
    let mut raw = BASE64_STANDARD.decode(&bad.sig).unwrap();
    raw[5] ^= 1;
    bad.sig = BASE64_STANDARD.encode(raw);
    // Before the revocation in the log order is what counts, so put it first in a fresh log.
    let mut log2 = HandLog::new();
    let reg2 = register(&mut log2, "node-h", &node);
    let b = log2.push(bad, at(1800));

    let (cert, lines) = log.certificate(&[reg, rev], &[r1]);
    verify(&cert, &lines).unwrap();
    let (cert, lines) = log.certificate(&[reg, rev], &[r1, r2]);
    assert_eq!(
        reason(verify(&cert, &lines)),
        (Reason::KeyRevoked, format!("entry {r2}"))
    );
    let (cert, lines) = log.certificate(&[], &[r1]);
    assert_eq!(
        reason(verify(&cert, &lines)),
        (Reason::UnknownKey, format!("entry {r1}"))
    );
    let (cert, lines) = log2.certificate(&[reg2], &[b]);
    assert_eq!(
        reason(verify(&cert, &lines)),
        (Reason::EntrySignature, format!("entry {b}"))
    );
}

/// The bundle `write` produces, as its file's bytes (each line ends with LF).
fn bundle_file(
    ledger: &Ledger,
    write: impl FnOnce(
        &mut gpuledger::store::DbConn,
        &mut gpuledger::store::bundle::Sink,
    ) -> Result<(), StoreError>,
) -> Vec<u8> {
    let mut file = Vec::new();
    ledger
        .reads()
        .run_once(|c| {
            write(c, &mut |l| {
                assert_eq!(l.last(), Some(&b'\n'), "every line ends with LF");
                file.extend_from_slice(&l);
                Ok(())
            })
        })
        .unwrap();
    file
}

/// Writes a certificate, its bundle and the files around them as auditors receive them: what
/// both verifiers are run on (verifiers/python/tests/test_rust_artefacts.py names the layout).
/// The certificate's bundle in both formats (`bundle.ndjson` v2, `bundle.v3.ndjson` v3), and an
/// invoice of the same tenant and period with its bundle in both formats.
fn write_artefacts(dir: &std::path::Path) {
    use gpuledger::core::bundle::Format;
    use gpuledger::store::invoices as store_invoices;
    let db = sqlite();
    let ledger = scenario_with(&db, true);
    let old = ledger.checkpoint().unwrap().1;
    let cert = ledger
        .issuance()
        .certificate(request(Scope::default()))
        .unwrap();
    let lines = bundle_of(&ledger, &cert);
    std::fs::create_dir_all(dir.join("consistency")).unwrap();
    std::fs::write(dir.join("certificate.json"), cert.to_canonical_json()).unwrap();
    let mut bundle = Vec::new();
    for l in &lines {
        bundle.extend_from_slice(l);
        bundle.push(b'\n');
    }
    assert_eq!(
        bundle,
        bundle_file(&ledger, |c, s| store_certs::write_certificate_bundle_as(
            c,
            &cert,
            Format::V2,
            s
        ))
    );
    std::fs::write(dir.join("bundle.ndjson"), bundle).unwrap();
    let v3 = bundle_file(&ledger, |c, s| {
        store_certs::write_certificate_bundle_as(c, &cert, Format::V3, s)
    });
    std::fs::write(dir.join("bundle.v3.ndjson"), v3).unwrap();
    // An invoice of acme for the certificate's period (the scenario's rate cards price it).
    let invoices = ledger.issuance().invoices("acme", period()).unwrap();
    assert_eq!(invoices.len(), 1, "one currency, one invoice");
    let invoice = &invoices[0];
    let (json, _) = store_invoices::invoice_json(invoice).unwrap();
    std::fs::write(dir.join("invoice.json"), json).unwrap();
    for (format, name) in [
        (Format::V2, "invoice_bundle.ndjson"),
        (Format::V3, "invoice_bundle.v3.ndjson"),
    ] {
        let file = bundle_file(&ledger, |c, s| {
            store_invoices::write_invoice_bundle_as(c, invoice, format, s)
        });
        std::fs::write(dir.join(name), file).unwrap();
    }
    std::fs::write(dir.join("verifier_key.txt"), verifier_key() + "\n").unwrap();
    // The tests' fixed log key: a test artefact, so that tamper tests can re-sign as a key
    // holder would. Never a real key.
    std::fs::write(
        dir.join("log_key.seed.b64"),
        BASE64_STANDARD.encode(log_key().to_bytes()) + "\n",
    )
    .unwrap();
    let signer = LogSigner::new(ORIGIN, log_key()).unwrap();
    let older = signer.sign_checkpoint(6, &ledger.reads().root_at(6).unwrap());
    std::fs::write(dir.join("older_checkpoint.txt"), older).unwrap();
    let (new_size, new) = ledger.checkpoint().unwrap();
    let old_size = bundle::anchor(&old, &verifier_key()).unwrap().size();
    let proof = merkle::encode_proof(
        &ledger
            .reads()
            .consistency_proof(old_size, new_size)
            .unwrap(),
    );
    std::fs::write(dir.join("consistency/old.txt"), old).unwrap();
    std::fs::write(dir.join("consistency/new.txt"), new).unwrap();
    std::fs::write(
        dir.join("consistency/proof.json"),
        serde_json::to_vec(&proof).unwrap(),
    )
    .unwrap();
}

/// A version-3 bundle file with one bit of its first node hash flipped (the line stays
/// canonical JSON, so only the multi-proof can refuse it).
fn flip_a_node_hash(file: &[u8]) -> Vec<u8> {
    let mut lines: Vec<Vec<u8>> = file.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    let pos = lines
        .iter()
        .position(|l| l.starts_with(br#"{"hashes":"#))
        .expect("a version-3 bundle with a nodes line");
    let mut nodes = parse(&lines[pos]);
    let first = nodes["hashes"][0].as_str().unwrap();
    let mut raw = BASE64_STANDARD.decode(first).unwrap();
    raw[0] ^= 1;
    nodes["hashes"][0] = BASE64_STANDARD.encode(raw).into();
    lines[pos] = gpuledger::core::canonical::to_vec(&nodes).unwrap();
    lines.join(&b'\n')
}

fn gpuledger(args: &[&str]) -> (i32, String) {
    let out = bin().args(args).output().unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn both_verifiers_pass_the_services_artefacts_and_fail_a_tampered_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write_artefacts(d);
    if let Ok(out) = std::env::var("GPULEDGER_WRITE_ARTEFACTS") {
        // Refreshes the checked-in copy: GPULEDGER_WRITE_ARTEFACTS=tests/fixtures/certificate
        write_artefacts(std::path::Path::new(&out));
    }
    let p = |f: &str| d.join(f).to_str().unwrap().to_owned();
    let key = p("verifier_key.txt");
    let files = [
        "--certificate",
        "certificate.json",
        "--bundle",
        "bundle.ndjson",
    ];
    assert_verify_passes(d, &files, &key, "PASS: certificate CERT-000001 of acme");
    // Without --witness, the PASS itself says that only the operator vouches for the history,
    // in text and in JSON.
    let verify = |extra: &[&str]| {
        let out = common::bin()
            .arg("verify")
            .args(files)
            .args(["--log-key", &key])
            .args(extra)
            .current_dir(d)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let said = verify(&[]);
    assert!(
        said.starts_with("PASS") && said.contains("only the log operator vouches"),
        "{said}"
    );
    let json: serde_json::Value = serde_json::from_str(&verify(&["--json"])).unwrap();
    assert_eq!(
        json["summary"]["witnesses"]["operator_alone"], true,
        "{json}"
    );
    assert_eq!(json["summary"]["witnesses"]["required"], 0, "{json}");
    // The same certificate with its version-3 bundle, and the invoice's bundles in both formats.
    let v3 = [
        "--certificate",
        "certificate.json",
        "--bundle",
        "bundle.v3.ndjson",
    ];
    assert_verify_passes(d, &v3, &key, "PASS: certificate CERT-000001 of acme");
    for b in ["invoice_bundle.ndjson", "invoice_bundle.v3.ndjson"] {
        assert_verify_passes(d, &["--bundle", b], &key, "PASS");
    }
    // A version-3 file with one byte of its multi-proof changed: the entries no longer lead to
    // the checkpoint's root.
    for (file, cert) in [
        ("bundle.v3.ndjson", Some("certificate.json")),
        ("invoice_bundle.v3.ndjson", None),
    ] {
        let tampered = flip_a_node_hash(&std::fs::read(p(file)).unwrap());
        std::fs::write(p("tampered.v3.ndjson"), tampered).unwrap();
        let mut args = vec!["verify"];
        let cert_path = cert.map(p);
        if let Some(c) = &cert_path {
            args.extend(["--certificate", c]);
        }
        let bundle_path = p("tampered.v3.ndjson");
        args.extend(["--bundle", &bundle_path, "--log-key", &key, "--json"]);
        let (code, out) = gpuledger(&args);
        assert_eq!(code, 1, "{file}: {out}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            (v["result"].as_str(), v["reason"].as_str()),
            (Some("FAIL"), Some("inclusion_proof")),
            "{file}: {out}"
        );
    }
    let (code, out) = gpuledger(&[
        "verify",
        "consistency",
        "--old",
        &p("consistency/old.txt"),
        "--new",
        &p("consistency/new.txt"),
        "--proof",
        &p("consistency/proof.json"),
        "--log-key",
        &key,
        "--json",
    ]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&out).unwrap()["result"],
        "PASS"
    );
    // The old and new checkpoints swapped: not a consistent growth.
    let (code, out) = gpuledger(&[
        "verify",
        "consistency",
        "--old",
        &p("consistency/new.txt"),
        "--new",
        &p("consistency/old.txt"),
        "--proof",
        &p("consistency/proof.json"),
        "--log-key",
        &key,
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(out.starts_with("FAIL: order"), "{out}");
    // A claim changed in the file: FAIL naming the reason, exit 1, and JSON for machines.
    let mut cert: serde_json::Value =
        serde_json::from_slice(&std::fs::read(p("certificate.json")).unwrap()).unwrap();
    cert["totals"]["gpu_seconds"] = "99999".into();
    std::fs::write(p("forged.json"), serde_json::to_vec(&cert).unwrap()).unwrap();
    let (code, out) = gpuledger(&[
        "verify",
        "--certificate",
        &p("forged.json"),
        "--bundle",
        &p("bundle.ndjson"),
        "--log-key",
        &key,
        "--json",
    ]);
    assert_eq!(code, 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["result"].as_str(), v["reason"].as_str()),
        (Some("FAIL"), Some("certificate_signature"))
    );
    let (code, out) = gpuledger(&["verify", "--bundle", &p("bundle.ndjson"), "--log-key", &key]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = gpuledger(&[
        "verify",
        "--checkpoint",
        &p("older_checkpoint.txt"),
        "--log-key",
        &key,
    ]);
    assert_eq!(code, 0, "{out}");
    let other = LogSigner::new(ORIGIN, gpuledger::sample::key("x"))
        .unwrap()
        .verifier_key();
    let (code, out) = gpuledger(&[
        "verify",
        "--checkpoint",
        &p("older_checkpoint.txt"),
        "--log-key",
        &other,
    ]);
    assert_eq!(
        (code, out.starts_with("FAIL: checkpoint_signature")),
        (1, true),
        "{out}"
    );

    // The independent Python verifier, on the same files, with its own tamper matrix.
    if !python_verifier_ready() {
        return;
    }
    let out = std::process::Command::new("python3")
        .args([
            "-m",
            "unittest",
            "discover",
            "-s",
            "verifiers/python/tests",
            "-p",
            "test_rust_artefacts.py",
        ])
        .env("GPULEDGER_ARTEFACTS_DIR", d)
        .env("GPULEDGER_REQUIRE_ARTEFACTS", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the Python verifier failed:\n{err}");
    assert!(!err.contains("SKIPPED"), "{err}");
    let out = python_verifier()
        .arg("certificate")
        .args(files)
        .args(["--log-key", &key])
        .current_dir(d)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.starts_with("PASS"), "{text}");
}

both_backends!(
    certificate_endpoints_with_their_access_rules,
    |db: &TestDb| {
        use gpuledger::store::access::{self, ApiRole};
        let dir = tempfile::tempdir().unwrap();
        let key_path = log_key_file(dir.path());
        let (admin, acme, globex, auditor) = {
            let ledger = scenario_log(db);
            ledger
                .with_account_writer(|c| {
                    access::create_tenant(c, "acme", "Acme")?;
                    access::create_tenant(c, "globex", "Globex")?;
                    let t = |c: &mut _, r, t| access::create_token(c, r, t, "test").map(|x| x.1);
                    Ok((
                        t(c, ApiRole::Admin, None)?,
                        t(c, ApiRole::Tenant, Some("acme"))?,
                        t(c, ApiRole::Tenant, Some("globex"))?,
                        t(c, ApiRole::Auditor, None)?,
                    ))
                })
                .unwrap()
        };
        let (child, base) = spawn_serve(&db.url, &key_path, 0, &[]);
        let _server = Proc(child);
        let h = Http::new(&base);
        let order = |tenant: Option<&str>| {
            let mut o = serde_json::json!({"from": period().from.to_string(), "to": period().to.to_string()});
            if let Some(t) = tenant {
                o["tenant"] = t.into();
            }
            o
        };
        let certify =
            |token: &str, body: &serde_json::Value| h.post("/v1/certificates", Some(token), body);
        // A tenant certifies itself; the answer is the signed certificate.
        let r = certify(&acme, &order(None));
        assert_eq!(
            (r.status, r.content_type.as_str()),
            (201, "application/json"),
            "{}",
            r.lossy()
        );
        let cert = Certificate::from_json(&r.body).unwrap();
        assert_eq!((cert.tenant.as_str(), cert.entries.count), ("acme", 4));
        // ... and not another tenant (404, as if it did not exist); auditors do not issue.
        let before = h.size();
        certify(&globex, &order(Some("acme"))).assert_problem(404, "not_found", "globex for acme");
        assert_eq!(certify(&auditor, &order(Some("acme"))).status, 403);
        // Bad input: a precise 4xx, nothing appended.
        let mut inverted = order(Some("acme"));
        inverted["to"] = period().from.to_string().into();
        let with = |member: &str, value: serde_json::Value| {
            let mut o = order(Some("acme"));
            o[member] = value;
            o
        };
        for (body, status) in [
            (order(None), 400),
            (inverted, 400),
            (
                serde_json::json!({"tenant": "acme", "from": "yesterday", "to": "today"}),
                400,
            ),
            (with("extra", 1.into()), 400),
            (with("scope", serde_json::json!({"nodes": []})), 400),
            (order(Some("nobody")), 404),
            (with("scope", serde_json::json!({"region": "north"})), 400),
        ] {
            let r = certify(&admin, &body);
            assert_eq!(r.status, status, "{body}: {}", r.lossy());
            assert_eq!(r.content_type, "application/problem+json");
        }
        assert_eq!(h.size(), before, "refused certificates change nothing");
        // An admin certifies any tenant, narrowed to nodes.
        let r = certify(
            &admin,
            &with("scope", serde_json::json!({"nodes": ["node-3"]})),
        );
        assert_eq!(r.status, 201);
        assert_eq!(r.json()["id"], "CERT-000002");
        // Reading: own and all; others' ids are 404.
        for (path, token, status) in [
            ("/v1/certificates/CERT-000001", &acme, 200),
            ("/v1/certificates/CERT-000001", &auditor, 200),
            ("/v1/certificates/CERT-000001", &globex, 404),
            ("/v1/certificates/CERT-000001/bundle", &globex, 404),
            ("/v1/certificates/CERT-999999", &admin, 404),
            ("/v1/certificates?tenant=acme", &globex, 404),
        ] {
            assert_eq!(h.get(path, Some(token)).status, status, "{path}");
        }
        assert_eq!(
            h.get("/v1/certificates", Some(&globex)).json(),
            serde_json::json!([])
        );
        assert_eq!(
            h.get("/v1/certificates", Some(&acme))
                .json()
                .as_array()
                .unwrap()
                .len(),
            2
        );
        // The downloaded bundle verifies offline with the downloaded certificate.
        let r = h.get("/v1/certificates/CERT-000001", Some(&acme));
        assert_eq!(
            (r.status, Certificate::from_json(&r.body).unwrap()),
            (200, cert.clone())
        );
        let r = h.get("/v1/certificates/CERT-000001/bundle", Some(&acme));
        assert_eq!(
            (r.status, r.content_type.as_str()),
            (200, "application/x-ndjson")
        );
        // The OpenAPI document declares that type (Schemathesis found `text/plain` there).
        let doc: serde_json::Value = serde_json::from_str(&gpuledger::api::openapi_json()).unwrap();
        let content =
            &doc["paths"]["/v1/certificates/{id}/bundle"]["get"]["responses"]["200"]["content"];
        assert_eq!(
            content.as_object().map(|c| c.keys().collect::<Vec<_>>()),
            Some(vec![&"application/x-ndjson".to_string()])
        );
        let lines: Vec<Vec<u8>> = r
            .body
            .strip_suffix(b"\n")
            .unwrap()
            .split(|b| *b == b'\n')
            .map(<[u8]>::to_vec)
            .collect();
        assert_eq!(verify(&cert, &lines).unwrap(), cert.claims());
    }
);

/// Past the first chunk of lines (4,096) the records' signatures are checked in the parallel
/// stage against the completed key registry; a bad one there is still named by its entry.
#[test]
fn signatures_checked_in_the_parallel_stage_are_named_too() {
    let node = gpuledger::sample::key("many-node");
    let mut log = HandLog::new();
    let reg = register(&mut log, "node-m", &node);
    let mut records = Vec::new();
    let mut bad_index = 0;
    for i in 0..5_000u64 {
        let u = h100_usage(
            "acme",
            "node-m",
            "west",
            Some("h100-node-m"),
            "1",
            i as i64,
            i as i64 + 1,
        );
        let mut env = signed("node-m", &node, i + 1, &u);
        if i == 4_500 {
            let mut raw = BASE64_STANDARD.decode(&env.sig).unwrap();
            raw[7] ^= 1;
            env.sig = BASE64_STANDARD.encode(raw);
        }
        let idx = log.push(env, at(7_000));
        if i == 4_500 {
            bad_index = idx;
        }
        records.push(idx);
    }
    let (cert, lines) = log.certificate(&[reg], &records[..4_400]);
    assert_eq!(verify(&cert, &lines).unwrap().entries.count, 4_400);
    let (cert, lines) = log.certificate(&[reg], &records);
    assert_eq!(
        reason(verify(&cert, &lines)),
        (Reason::EntrySignature, format!("entry {bad_index}"))
    );
}
