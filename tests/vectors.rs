//! Fixed test vectors that pin the public formats of docs/PROTOCOL.md byte for byte.
//!
//! `committed_vectors_match_the_code` rebuilds every file in tests/vectors/ from fixed keys and
//! bodies and compares it with the committed file; with `GPULEDGER_REGENERATE_VECTORS=1` it
//! rewrites the files instead (so they are produced by code, never by hand). The other tests
//! read the committed files and check them by independent means: a direct SHA-256, strict
//! Ed25519, RFC 6962 §2.1 recursion, the RFC 9162 proof-verification algorithms written out
//! below, and Go's golang.org/x/mod/sumdb/note example.

use base64::prelude::{Engine, BASE64_STANDARD};
use ed25519_dalek::{Signature, SigningKey, VerifyingKey};
use gpuledger::core::checkpoint::{self, verify_checkpoint, CheckpointError, LogSigner};
use gpuledger::core::envelope::{self, Envelope};
use gpuledger::core::ids::LEDGER_SIGNER;
use gpuledger::core::keys;
use gpuledger::core::leaf::{Leaf, GENESIS_PREV};
use gpuledger::core::merkle::{self, Hash, MemoryHashes};
use gpuledger::core::rating::LeaseClass;
use gpuledger::core::record::{
    BillingAnchor, BillingPeriod, Body, ContractAmended, ContractFee, ContractRegistered, Energy,
    FeeCategory, FeeTiming, GpuUsage, Included, LeaseNode, LeaseRegistered, LogPolicy,
    MigInstances, MigLayout, NodeGpu, NodeRegistered, NodeUpdated, Prepayment, PrepaymentSource,
    Role, SignerKeyRegistered, SignerKeyRevoked, Sla, SlaStep, SpotPrice, TenantRegistered,
};
use gpuledger::core::time::Timestamp;
use rust_decimal::Decimal;
use serde_json::{json, Value};
use sha2::{Digest, Sha256, Sha512};
use signed_note::{Note, StandardVerifier, VerifierList};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

mod common;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors");
const REGENERATE: &str = "GPULEDGER_REGENERATE_VECTORS";

/// The log's origin (checkpoint origin line and note key name).
const ORIGIN: &str = "gpuledger.example/vectors";
/// The fixed keys: seeds of 32 equal bytes.
const NODE_SEED: [u8; 32] = [0x01; 32];
const MARKET_SEED: [u8; 32] = [0x02; 32];
const LOG_SEED: [u8; 32] = [0x03; 32];
const NODE_SIGNER: &str = "node-imx-0001";
const MARKET_SIGNER: &str = "market-cn";

/// The record kinds that get a full set of per-step files, and their log index.
const DETAILED: [(&str, u64); 3] = [("gpu_usage", 7), ("energy", 8), ("spot_price", 9)];
/// The log index of the first `gpu_usage` record (whose message the negative signature vectors
/// are made over).
const GPU_USAGE_INDEX: usize = DETAILED[0].1 as usize;
/// Entries in the vector log.
const LOG_SIZE: u64 = 19;
/// Inclusion proofs (leaf index, tree size) and consistency proofs (old size, new size).
const INCLUSIONS: [(u64, u64); 3] = [(2, 7), (6, 7), (0, 1)];
const CONSISTENCIES: [(u64, u64); 3] = [(3, 7), (4, 7), (7, 7)];

fn ts(s: &str) -> Timestamp {
    Timestamp::parse(s).unwrap()
}

fn dec(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

fn key_entry(seed: &[u8; 32], signer: &str, role: Role) -> Value {
    let sk = SigningKey::from_bytes(seed);
    json!({
        "signer": signer,
        "role": role.as_str(),
        "seed_hex": hex::encode(seed),
        "secret": keys::encode_secret(&sk),
        "public_key": keys::encode_public(&sk.verifying_key()),
        "key_id": keys::key_id(&sk.verifying_key()),
    })
}

/// One log entry of the vector log: who signs it, its seq, body and arrival time.
struct EntrySpec {
    signer: &'static str,
    seed: [u8; 32],
    seq: u64,
    body: Body,
    received_at: &'static str,
}

fn log_specs() -> Vec<EntrySpec> {
    let node = SigningKey::from_bytes(&NODE_SEED).verifying_key();
    let market = SigningKey::from_bytes(&MARKET_SEED).verifying_key();
    let registered = |signer: &str, role: Role, key: &VerifyingKey| {
        Body::SignerKeyRegistered(SignerKeyRegistered {
            signer: signer.into(),
            role,
            key_id: keys::key_id(key),
            public_key: keys::encode_public(key),
            nodes: (role == Role::Node).then(|| vec![NODE_SIGNER.to_owned()]),
            regions: vec!["cn-nmg-1".into()],
        })
    };
    let ledger = |seq: u64, body: Body| EntrySpec {
        signer: LEDGER_SIGNER,
        seed: LOG_SEED,
        seq,
        body,
        received_at: "2026-11-30T11:00:00Z",
    };
    let tenant = |t: &str| Body::TenantRegistered(TenantRegistered { tenant: t.into() });
    // The node, registered before the key that signs for it (node keys name registered nodes
    // only): 9 GPUs of the model its records name, at most 5000 W each, so its 300 s energy
    // record of 3.125 kWh is within 9 × 5000 W × 300 s + 5 % = 3.9375 kWh.
    let node_registered = Body::NodeRegistered(NodeRegistered {
        node: NODE_SIGNER.into(),
        region: "cn-nmg-1".into(),
        hub: Some("hub-imx".into()),
        gpus: (0..9)
            .map(|i| NodeGpu {
                index: i,
                uuid: format!("GPU-00000000-0000-0000-0000-{:012x}", i + 1),
                model: "H100-SXM5-80GB".into(),
                mig: None,
            })
            .collect(),
        max_watts_per_gpu: dec("5000"),
    });
    vec![
        ledger(1, Body::LogPolicy(LogPolicy::default())),
        ledger(2, node_registered),
        ledger(3, registered(NODE_SIGNER, Role::Node, &node)),
        ledger(4, registered(MARKET_SIGNER, Role::Market, &market)),
        ledger(5, tenant("tenant-acme")),
        ledger(6, tenant("tenant-beta")),
        ledger(
            7,
            Body::LeaseRegistered(LeaseRegistered {
                lease: "lease-0042".into(),
                tenant: "tenant-acme".into(),
                class: LeaseClass::Reserved,
                from: Timestamp::parse("2026-11-01T00:00:00Z").unwrap(),
                to: Some(Timestamp::parse("2027-11-01T00:00:00Z").unwrap()),
                nodes: vec![LeaseNode {
                    node: NODE_SIGNER.into(),
                    gpus: Some((0..8).collect()),
                    share: None,
                    gpu_model: None,
                    count: None,
                }],
            }),
        ),
        EntrySpec {
            signer: NODE_SIGNER,
            seed: NODE_SEED,
            seq: 1,
            body: Body::GpuUsage(GpuUsage {
                tenant: "tenant-acme".into(),
                lease: Some("lease-0042".into()),
                region: "cn-nmg-1".into(),
                node: NODE_SIGNER.into(),
                gpu_model: "H100-SXM5-80GB".into(),
                gpu_count: dec("8"),
                start: ts("2026-11-30T12:00:00Z"),
                end: ts("2026-11-30T12:05:00Z"),
                gpu_seconds: dec("2400"),
            }),
            received_at: "2026-11-30T12:05:02Z",
        },
        EntrySpec {
            signer: NODE_SIGNER,
            seed: NODE_SEED,
            seq: 2,
            body: Body::Energy(Energy {
                tenant: Some("tenant-acme".into()),
                region: "cn-nmg-1".into(),
                node: NODE_SIGNER.into(),
                start: ts("2026-11-30T12:00:00Z"),
                end: ts("2026-11-30T12:05:00Z"),
                kwh: dec("3.125"),
            }),
            received_at: "2026-11-30T12:05:02Z",
        },
        EntrySpec {
            signer: MARKET_SIGNER,
            seed: MARKET_SEED,
            seq: 1,
            body: Body::SpotPrice(SpotPrice {
                region: "cn-nmg-1".into(),
                gpu_model: "H100-SXM5-80GB".into(),
                price_per_gpu_hour: dec("14.75"),
                currency: "CNY".into(),
                effective_from: ts("2026-11-30T13:00:00Z"),
            }),
            received_at: "2026-11-30T12:05:03Z",
        },
        // tenant-beta's lease of a quarter of GPU 8, registered just before its usage.
        EntrySpec {
            signer: LEDGER_SIGNER,
            seed: LOG_SEED,
            seq: 8,
            body: Body::LeaseRegistered(LeaseRegistered {
                lease: "lease-0043".into(),
                tenant: "tenant-beta".into(),
                class: LeaseClass::OnDemand,
                from: Timestamp::parse("2026-11-01T00:00:00Z").unwrap(),
                to: None,
                nodes: vec![LeaseNode {
                    node: NODE_SIGNER.into(),
                    gpus: Some(vec![8]),
                    share: Some(dec("0.25")),
                    gpu_model: None,
                    count: None,
                }],
            }),
            received_at: "2026-11-30T12:05:04Z",
        },
        EntrySpec {
            signer: NODE_SIGNER,
            seed: NODE_SEED,
            seq: 4,
            body: Body::GpuUsage(GpuUsage {
                tenant: "tenant-beta".into(),
                lease: Some("lease-0043".into()),
                region: "cn-nmg-1".into(),
                node: NODE_SIGNER.into(),
                gpu_model: "H100-SXM5-80GB".into(),
                gpu_count: dec("0.25"),
                start: ts("2026-11-30T12:00:00Z"),
                end: ts("2026-11-30T12:00:30Z"),
                gpu_seconds: dec("7.5"),
            }),
            received_at: "2026-11-30T12:05:04Z",
        },
        EntrySpec {
            signer: LEDGER_SIGNER,
            seed: LOG_SEED,
            seq: 9,
            body: Body::SignerKeyRevoked(SignerKeyRevoked {
                signer: MARKET_SIGNER.into(),
                key_id: keys::key_id(&market),
                reason: Some("rotated".into()),
            }),
            received_at: "2026-11-30T12:10:00Z",
        },
        // The node gains a tenth GPU, partitioned into MIG instances (§5.16, §5.18).
        EntrySpec {
            signer: LEDGER_SIGNER,
            seed: LOG_SEED,
            seq: 10,
            body: Body::NodeUpdated(NodeUpdated {
                node: NODE_SIGNER.into(),
                gpus: Some(vec![NodeGpu {
                    index: 9,
                    uuid: "GPU-00000000-0000-0000-0000-00000000000a".into(),
                    model: "H100-SXM5-80GB".into(),
                    mig: Some(MigLayout {
                        slices: 7,
                        instances: vec![
                            MigInstances {
                                profile: "1g.10gb".into(),
                                count: 3,
                            },
                            MigInstances {
                                profile: "3g.40gb".into(),
                                count: 1,
                            },
                        ],
                    }),
                }]),
                max_watts_per_gpu: None,
            }),
            received_at: "2026-11-30T12:11:00Z",
        },
        // tenant-acme's yearly contract, billed monthly on the calendar (§5.19).
        EntrySpec {
            signer: LEDGER_SIGNER,
            seed: LOG_SEED,
            seq: 11,
            body: Body::ContractRegistered(ContractRegistered {
                tenant: "tenant-acme".into(),
                contract: "C-acme-2027".into(),
                currency: "CNY".into(),
                region: "cn-nmg-1".into(),
                term_from: Timestamp::parse("2026-12-01T00:00:00Z").unwrap(),
                term_to: Timestamp::parse("2027-12-01T00:00:00Z").unwrap(),
                billing_period: BillingPeriod::Month,
                billing_anchor: BillingAnchor::Calendar,
                fees: Some(vec![
                    ContractFee {
                        name: "Bare-metal node, 8 × H100, monthly".into(),
                        amount: "120000".parse().unwrap(),
                        timing: FeeTiming::Advance,
                        category: FeeCategory::Compute,
                        lease: None,
                        included: None,
                    },
                    ContractFee {
                        name: "Rack setup".into(),
                        amount: "800".parse().unwrap(),
                        timing: FeeTiming::Once,
                        category: FeeCategory::Support,
                        lease: None,
                        included: None,
                    },
                ]),
                commitment: Some("5000".parse().unwrap()),
                sla: None,
            }),
            received_at: "2026-11-30T12:12:00Z",
        },
        // tenant-acme's top-up, to the end of 2027 (§5.20).
        EntrySpec {
            signer: LEDGER_SIGNER,
            seed: LOG_SEED,
            seq: 12,
            body: Body::Prepayment(Prepayment {
                tenant: "tenant-acme".into(),
                reference: "TOPUP-2027-0042".into(),
                source: PrepaymentSource::Purchase,
                currency: "CNY".into(),
                amount: "5000.00".parse().unwrap(),
                expires_at: Some(Timestamp::parse("2028-01-01T00:00:00Z").unwrap()),
            }),
            received_at: "2026-11-30T12:13:00Z",
        },
        // tenant-beta's contract for its share of GPU 8, with an SLA on that lease (§5.19).
        EntrySpec {
            signer: LEDGER_SIGNER,
            seed: LOG_SEED,
            seq: 13,
            body: Body::ContractRegistered(ContractRegistered {
                tenant: "tenant-beta".into(),
                contract: "C-beta-2027".into(),
                currency: "CNY".into(),
                region: "cn-nmg-1".into(),
                term_from: Timestamp::parse("2026-12-01T00:00:00Z").unwrap(),
                term_to: Timestamp::parse("2027-12-01T00:00:00Z").unwrap(),
                billing_period: BillingPeriod::Month,
                billing_anchor: BillingAnchor::Calendar,
                fees: Some(vec![ContractFee {
                    name: "A quarter of an H100, monthly".into(),
                    amount: "1500".parse().unwrap(),
                    timing: FeeTiming::Advance,
                    category: FeeCategory::Compute,
                    lease: Some("lease-0043".into()),
                    included: None,
                }]),
                commitment: None,
                sla: Some(Sla {
                    target: "99.9".parse().unwrap(),
                    credits: vec![
                        SlaStep {
                            below: "99.9".parse().unwrap(),
                            percent: "10".parse().unwrap(),
                        },
                        SlaStep {
                            below: "99".parse().unwrap(),
                            percent: "25".parse().unwrap(),
                        },
                    ],
                }),
            }),
            received_at: "2026-11-30T12:14:00Z",
        },
        // tenant-beta's next contract: the same lease with 180 GPU-hours a month included and
        // the hours above at 12.00 (§5.19, `fees[i].included`).
        EntrySpec {
            signer: LEDGER_SIGNER,
            seed: LOG_SEED,
            seq: 14,
            body: Body::ContractRegistered(ContractRegistered {
                tenant: "tenant-beta".into(),
                contract: "C-beta-2028".into(),
                currency: "CNY".into(),
                region: "cn-nmg-1".into(),
                term_from: Timestamp::parse("2027-12-01T00:00:00Z").unwrap(),
                term_to: Timestamp::parse("2028-12-01T00:00:00Z").unwrap(),
                billing_period: BillingPeriod::Month,
                billing_anchor: BillingAnchor::Calendar,
                fees: Some(vec![ContractFee {
                    name: "A quarter of an H100, monthly, 180 GPU-h included".into(),
                    amount: "1500".parse().unwrap(),
                    timing: FeeTiming::Advance,
                    category: FeeCategory::Compute,
                    lease: Some("lease-0043".into()),
                    included: Some(vec![Included {
                        gpu_model: "H100-SXM5-80GB".into(),
                        gpu_hours: "180".parse().unwrap(),
                        overage_rate: "12.00".parse().unwrap(),
                    }]),
                }]),
                commitment: None,
                sla: None,
            }),
            received_at: "2026-11-30T12:15:00Z",
        },
        // tenant-acme's contract ended early, on 1 June 2027 (§5.21).
        EntrySpec {
            signer: LEDGER_SIGNER,
            seed: LOG_SEED,
            seq: 15,
            body: Body::ContractAmended(ContractAmended {
                tenant: "tenant-acme".into(),
                contract: "C-acme-2027".into(),
                term_to: Timestamp::parse("2027-06-01T00:00:00Z").unwrap(),
                reason: "Ended early by mutual agreement".into(),
            }),
            received_at: "2026-11-30T12:16:00Z",
        },
    ]
}

/// RFC 6962 §2.1 MTH by direct recursion with SHA-256, independent of tlog's storage order.
fn mth(leaves: &[[u8; 32]]) -> [u8; 32] {
    match leaves.len() {
        0 => Sha256::digest([]).into(),
        1 => leaves[0],
        n => {
            let k = largest_power_of_two_below(n as u64) as usize;
            node(&mth(&leaves[..k]), &mth(&leaves[k..]))
        }
    }
}

fn largest_power_of_two_below(n: u64) -> u64 {
    let mut k = 1;
    while k * 2 < n {
        k *= 2;
    }
    k
}

fn node(l: &[u8; 32], r: &[u8; 32]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([0x01]);
    h.update(l);
    h.update(r);
    h.finalize().into()
}

fn leaf_hash(data: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update([0x00]);
    h.update(data);
    h.finalize().into()
}

/// RFC 9162 §2.1.3.2: verifying an inclusion proof.
fn verify_inclusion(
    index: u64,
    size: u64,
    leaf: [u8; 32],
    path: &[[u8; 32]],
    root: [u8; 32],
) -> bool {
    if index >= size {
        return false;
    }
    let (mut f, mut s) = (index, size - 1);
    let mut r = leaf;
    for p in path {
        if s == 0 {
            return false;
        }
        if f & 1 == 1 || f == s {
            r = node(p, &r);
            if f & 1 == 0 {
                while f & 1 == 0 && f != 0 {
                    f >>= 1;
                    s >>= 1;
                }
            }
        } else {
            r = node(&r, p);
        }
        f >>= 1;
        s >>= 1;
    }
    s == 0 && r == root
}

/// RFC 9162 §2.1.4.2: verifying a consistency proof (with the equal-sizes case of §2.1.4.1,
/// where the proof is empty).
fn verify_consistency(
    first: u64,
    second: u64,
    first_hash: [u8; 32],
    second_hash: [u8; 32],
    path: &[[u8; 32]],
) -> bool {
    if first == 0 || first > second {
        return false;
    }
    if first == second {
        return path.is_empty() && first_hash == second_hash;
    }
    if path.is_empty() {
        return false;
    }
    let mut path = path.to_vec();
    if first.is_power_of_two() {
        path.insert(0, first_hash);
    }
    let (mut f, mut s) = (first - 1, second - 1);
    while f & 1 == 1 {
        f >>= 1;
        s >>= 1;
    }
    let (mut fr, mut sr) = (path[0], path[0]);
    for c in &path[1..] {
        if s == 0 {
            return false;
        }
        if f & 1 == 1 || f == s {
            fr = node(c, &fr);
            sr = node(c, &sr);
            if f & 1 == 0 {
                while f & 1 == 0 && f != 0 {
                    f >>= 1;
                    s >>= 1;
                }
            }
        } else {
            sr = node(&sr, c);
        }
        f >>= 1;
        s >>= 1;
    }
    fr == first_hash && sr == second_hash && s == 0
}

/// A signature with R = the identity point (encoded 0x01 then 31 zero bytes) and
/// S = H(R ‖ A ‖ M)·a mod L, made with the secret scalar `a`. It satisfies the cofactorless
/// equation [S]B = R + [k]A, so RFC 8032 verification without the small-order check, and batch
/// verification, accept it; `verify_strict` (the contract) refuses it because R has small order.
fn small_order_r_signature(key: &SigningKey, message: &[u8]) -> Signature {
    fn scalar_from<T: From<u64>>(_like: &T, v: u64) -> T {
        T::from(v)
    }
    let mut r = [0u8; 32];
    r[0] = 1;
    let h = Sha512::new()
        .chain_update(r)
        .chain_update(key.verifying_key().as_bytes())
        .chain_update(message)
        .finalize();
    let a = key.to_scalar();
    // k = h (512-bit little-endian) mod L, by Horner's rule in the scalar field.
    let mut k = scalar_from(&a, 0);
    for byte in h.iter().rev() {
        k = k * scalar_from(&a, 256) + scalar_from(&a, u64::from(*byte));
    }
    let mut sig = [0u8; 64];
    sig[..32].copy_from_slice(&r);
    sig[32..].copy_from_slice(&(k * a).to_bytes());
    Signature::from_bytes(&sig)
}

/// Pretty JSON with sorted keys and a final newline (for the descriptive files; protocol
/// objects are stored as their exact canonical bytes).
fn pretty(mut v: Value) -> Vec<u8> {
    v.sort_all_objects();
    let mut s = serde_json::to_string_pretty(&v).unwrap();
    s.push('\n');
    s.into_bytes()
}

fn line(s: &str) -> Vec<u8> {
    format!("{s}\n").into_bytes()
}

/// Every vector file, by name, computed from the fixed keys and bodies.
fn build() -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let log_key = SigningKey::from_bytes(&LOG_SEED);
    let log = LogSigner::new(ORIGIN, log_key.clone()).unwrap();

    let mut keys_json = json!({
        "node": key_entry(&NODE_SEED, NODE_SIGNER, Role::Node),
        "market": key_entry(&MARKET_SEED, MARKET_SIGNER, Role::Market),
        "log": key_entry(&LOG_SEED, LEDGER_SIGNER, Role::Ledger),
    });
    keys_json["log"]["origin"] = json!(ORIGIN);
    keys_json["log"]["note_key_id"] = json!(format!(
        "{:08x}",
        checkpoint::note_key_id(ORIGIN, &log_key.verifying_key())
    ));
    keys_json["log"]["verifier_key"] = json!(log.verifier_key());
    files.insert("keys.json".into(), pretty(keys_json));

    // The log: each entry signed, checked against its arrival time, and chained.
    let mut prev = GENESIS_PREV;
    let mut leaves: Vec<Vec<u8>> = Vec::new();
    let mut envelopes = Vec::new();
    for (index, spec) in log_specs().into_iter().enumerate() {
        let key = SigningKey::from_bytes(&spec.seed);
        let env = Envelope::sign(
            ORIGIN,
            spec.body.kind(),
            spec.signer,
            &key,
            spec.seq,
            &spec.body,
        );
        let received_at = ts(spec.received_at);
        let checked = env
            .clone()
            .check(ORIGIN)
            .expect("vector records pass every check");
        assert!(checked.verify(&key.verifying_key()));
        let leaf = Leaf::new(index as u64, received_at, &prev, env.clone());
        prev = leaf.hash();
        leaves.push(leaf.to_bytes());
        envelopes.push(env);
    }
    let mut jsonl = Vec::new();
    for l in &leaves {
        jsonl.extend_from_slice(l);
        jsonl.push(b'\n');
    }
    files.insert("log.jsonl".into(), jsonl);

    for (name, index) in DETAILED {
        let env = &envelopes[index as usize];
        assert_eq!(env.kind, name);
        let message = env.signed_message(ORIGIN).unwrap();
        files.insert(
            format!("{name}.body.json"),
            serde_jcs::to_vec(&env.body).unwrap(),
        );
        files.insert(format!("{name}.message.hex"), line(&hex::encode(&message)));
        files.insert(format!("{name}.message.bin"), message);
        files.insert(format!("{name}.sig.b64"), line(&env.sig));
        files.insert(
            format!("{name}.envelope.json"),
            env.canonical_bytes().unwrap(),
        );
        let leaf = &leaves[index as usize];
        files.insert(format!("{name}.leaf.json"), leaf.clone());
        files.insert(
            format!("{name}.leaf_hash.hex"),
            line(&hex::encode(merkle::leaf_hash(leaf).0)),
        );
    }
    // A negative vector: a signature over the gpu_usage message that only lax verifiers accept.
    let forged = small_order_r_signature(
        &SigningKey::from_bytes(&NODE_SEED),
        &envelopes[GPU_USAGE_INDEX].signed_message(ORIGIN).unwrap(),
    );
    files.insert(
        "gpu_usage.small_order_r.sig.b64".into(),
        line(&BASE64_STANDARD.encode(forged.to_bytes())),
    );

    // The tree over the log's leaf hashes, through the core's tlog code.
    let hashes: Vec<Hash> = leaves.iter().map(|l| merkle::leaf_hash(l)).collect();
    let mut mem = MemoryHashes::default();
    merkle::append_leaves(0, &hashes, &mut mem).unwrap();
    let size = hashes.len() as u64;
    let root = merkle::tree_hash(size, &mem).unwrap();
    let inclusion: Vec<Value> = INCLUSIONS
        .iter()
        .map(|&(index, size)| {
            let proof = merkle::prove_record(size, index, &mem).unwrap();
            json!({
                "leaf_index": index,
                "tree_size": size,
                "leaf_hash": merkle::encode_hash(&hashes[index as usize]),
                "root": merkle::encode_hash(&merkle::tree_hash(size, &mem).unwrap()),
                "proof": merkle::encode_proof(&proof),
            })
        })
        .collect();
    let consistency: Vec<Value> = CONSISTENCIES
        .iter()
        .map(|&(old, new)| {
            let proof = merkle::prove_tree(new, old, &mem).unwrap();
            json!({
                "old_size": old,
                "new_size": new,
                "old_root": merkle::encode_hash(&merkle::tree_hash(old, &mem).unwrap()),
                "new_root": merkle::encode_hash(&merkle::tree_hash(new, &mem).unwrap()),
                "proof": merkle::encode_proof(&proof),
            })
        })
        .collect();
    files.insert(
        "tree.json".into(),
        pretty(json!({
            "size": size,
            "leaf_hashes": hashes.iter().map(merkle::encode_hash).collect::<Vec<_>>(),
            "root": merkle::encode_hash(&root),
            "root_hex": hex::encode(root.0),
            "inclusion": inclusion,
            "consistency": consistency,
        })),
    );
    files.insert(
        "checkpoint.txt".into(),
        log.sign_checkpoint(size, &root).into_bytes(),
    );
    files.insert(
        "ed25519/cases.json".into(),
        pretty(ed25519_cases(
            &envelopes[GPU_USAGE_INDEX].signed_message(ORIGIN).unwrap(),
        )),
    );
    files
}

fn read(name: &str) -> Vec<u8> {
    let p = Path::new(DIR).join(name);
    std::fs::read(&p).unwrap_or_else(|e| {
        panic!("cannot read {}: {e}; generate the vectors with {REGENERATE}=1 cargo test --test vectors", p.display())
    })
}

fn read_text(name: &str) -> String {
    String::from_utf8(read(name)).unwrap()
}

/// A one-line text file, without its final newline.
fn read_line(name: &str) -> String {
    let s = read_text(name);
    let body = s
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("{name} must end with one newline"));
    assert!(!body.contains('\n'), "{name} must be one line");
    body.to_owned()
}

fn read_json(name: &str) -> Value {
    serde_json::from_slice(&read(name)).unwrap_or_else(|e| panic!("{name} is not JSON: {e}"))
}

fn b64_32(s: &str) -> [u8; 32] {
    BASE64_STANDARD.decode(s).unwrap().try_into().unwrap()
}

fn log_lines() -> Vec<Vec<u8>> {
    let all = read("log.jsonl");
    let body = all
        .strip_suffix(b"\n")
        .expect("log.jsonl ends with a newline");
    body.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect()
}

fn public_key_of(keys_json: &Value, signer: &str) -> VerifyingKey {
    let entry = ["node", "market", "log"]
        .iter()
        .map(|k| &keys_json[*k])
        .find(|e| e["signer"] == signer)
        .unwrap_or_else(|| panic!("no key for signer {signer}"));
    VerifyingKey::from_bytes(&b64_32(entry["public_key"].as_str().unwrap())).unwrap()
}

#[test]
fn committed_vectors_match_the_code() {
    let files = build();
    let dir = PathBuf::from(DIR);
    if std::env::var(REGENERATE).as_deref() == Ok("1") {
        for (name, bytes) in &files {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, bytes).unwrap();
        }
        return;
    }
    let mut problems = Vec::new();
    for (name, bytes) in &files {
        match std::fs::read(dir.join(name)) {
            Ok(committed) if &committed == bytes => {}
            Ok(_) => problems.push(format!("{name}: differs from what the code produces now")),
            Err(e) => problems.push(format!("{name}: {e}")),
        }
    }
    let mut present = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if name == "cosignature" {
            // Witness cosignature vectors: generated and checked by tests/cosignature_vectors.rs.
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            for sub in std::fs::read_dir(entry.path()).unwrap() {
                present.push(format!(
                    "{name}/{}",
                    sub.unwrap().file_name().into_string().unwrap()
                ));
            }
        } else {
            present.push(name);
        }
    }
    for name in present {
        if name != "README.md" && name != ".gitattributes" && !files.contains_key(&name) {
            problems.push(format!("{name}: not produced by the generator (stale?)"));
        }
    }
    assert!(
        problems.is_empty(),
        "the formats changed or the vectors are stale:\n  {}\nA format change needs a new version tag (docs/PROTOCOL.md); \
         only then regenerate with {REGENERATE}=1 cargo test --test vectors",
        problems.join("\n  ")
    );
    // Every file is described in the README.
    let readme = read_text("README.md");
    for name in files.keys() {
        let pattern = name
            .split_once('.')
            .map(|(_, rest)| format!("<kind>.{rest}"));
        assert!(
            readme.contains(&format!("`{name}`"))
                || pattern.is_some_and(|p| readme.contains(&format!("`{p}`"))),
            "README.md does not describe {name}"
        );
    }
}

#[test]
fn keys_file_pins_key_ids_and_encodings() {
    let k = read_json("keys.json");
    for (entry, seed) in [
        ("node", NODE_SEED),
        ("market", MARKET_SEED),
        ("log", LOG_SEED),
    ] {
        let e = &k[entry];
        assert_eq!(e["seed_hex"], hex::encode(seed), "{entry}");
        let sk = SigningKey::from_bytes(&seed);
        let pk = sk.verifying_key();
        assert_eq!(
            b64_32(e["public_key"].as_str().unwrap()),
            pk.to_bytes(),
            "{entry}"
        );
        // key_id = lower-case hex of the first 8 bytes of SHA-256(public key).
        assert_eq!(
            e["key_id"],
            hex::encode(&Sha256::digest(pk.as_bytes())[..8]),
            "{entry}"
        );
        // The private-key text: fixed prefix, base64 of the 32-byte seed, one newline.
        let secret = e["secret"].as_str().unwrap();
        let b64 = secret
            .strip_prefix("gpuledger-ed25519-secret-v1:")
            .unwrap()
            .strip_suffix('\n')
            .unwrap();
        assert_eq!(BASE64_STANDARD.decode(b64).unwrap(), seed, "{entry}");
        assert_eq!(
            keys::decode_secret(secret).unwrap().to_bytes(),
            seed,
            "{entry}"
        );
    }
    let log = &k["log"];
    let pk = SigningKey::from_bytes(&LOG_SEED).verifying_key();
    // Note key id = first 4 bytes of SHA-256(name ‖ 0x0A ‖ 0x01 ‖ public key).
    let mut h = Sha256::new();
    h.update(ORIGIN.as_bytes());
    h.update([0x0a, 0x01]);
    h.update(pk.as_bytes());
    let id = hex::encode(&h.finalize()[..4]);
    assert_eq!(log["note_key_id"], id);
    let mut alg_key = vec![0x01];
    alg_key.extend_from_slice(pk.as_bytes());
    assert_eq!(
        log["verifier_key"],
        format!("{ORIGIN}+{id}+{}", BASE64_STANDARD.encode(&alg_key))
    );
    assert_eq!(log["origin"], ORIGIN);
}

#[test]
fn signed_records_verify_from_the_files_alone() {
    let k = read_json("keys.json");
    let leaves = log_lines();
    for (name, index) in DETAILED {
        let env_bytes = read(&format!("{name}.envelope.json"));
        let env_value: Value = serde_json::from_slice(&env_bytes).unwrap();
        // The stored envelope is canonical (RFC 8785).
        assert_eq!(serde_jcs::to_vec(&env_value).unwrap(), env_bytes, "{name}");
        assert_eq!(env_value["kind"], name);
        assert_eq!(env_value["v"], 3);

        // message = "gpuledger/v3/<kind>\n<origin>\n" ‖ JCS(envelope without sig)
        let message = read(&format!("{name}.message.bin"));
        let mut unsigned = env_value.clone();
        let sig_b64 = unsigned.as_object_mut().unwrap().remove("sig").unwrap();
        let mut expected = format!("gpuledger/v3/{name}\n{ORIGIN}\n").into_bytes();
        expected.extend(serde_jcs::to_vec(&unsigned).unwrap());
        assert_eq!(message, expected, "{name}: message bytes");
        assert_eq!(
            hex::decode(read_line(&format!("{name}.message.hex"))).unwrap(),
            message,
            "{name}: hex copy"
        );
        assert_eq!(
            message.iter().filter(|b| **b == b'\n').count(),
            2,
            "{name}: the tag's two newlines are the only ones"
        );

        // The signature: standard base64 of 64 bytes, strict Ed25519 over the message.
        assert_eq!(
            read_line(&format!("{name}.sig.b64")),
            sig_b64.as_str().unwrap(),
            "{name}"
        );
        let sig = Signature::from_bytes(
            &BASE64_STANDARD
                .decode(sig_b64.as_str().unwrap())
                .unwrap()
                .try_into()
                .unwrap(),
        );
        let signer = env_value["signer"].as_str().unwrap();
        let pk = public_key_of(&k, signer);
        assert_eq!(
            env_value["key_id"],
            hex::encode(&Sha256::digest(pk.as_bytes())[..8])
        );
        pk.verify_strict(&message, &sig)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        // Domain separation: the same bytes under another kind's tag do not verify.
        let mut other = format!("gpuledger/v3/energy\n{ORIGIN}\n").into_bytes();
        other.extend(serde_jcs::to_vec(&unsigned).unwrap());
        if name != "energy" {
            assert!(
                pk.verify_strict(&other, &sig).is_err(),
                "{name}: signature must be bound to its kind"
            );
        }
        // Nor under another log's origin (a staging record replayed into production).
        let mut staging = format!("gpuledger/v3/{name}\nstaging.example/log\n").into_bytes();
        staging.extend(serde_jcs::to_vec(&unsigned).unwrap());
        assert!(
            pk.verify_strict(&staging, &sig).is_err(),
            "{name}: signature must be bound to its log"
        );

        // The body file is the canonical body.
        assert_eq!(
            read(&format!("{name}.body.json")),
            serde_jcs::to_vec(&env_value["body"]).unwrap(),
            "{name}"
        );

        // Our reader agrees: the envelope passes every check at its arrival time and verifies.
        let leaf = Leaf::from_bytes(&leaves[index as usize]).unwrap();
        let env: Envelope = serde_json::from_slice(&env_bytes).unwrap();
        assert_eq!(
            leaf.envelope, env,
            "{name}: the leaf holds the envelope exactly"
        );
        let checked = env.check(ORIGIN).unwrap_or_else(|r| panic!("{name}: {r}"));
        assert_eq!(checked.message, message);
        assert_eq!(
            checked.content_hash,
            <[u8; 32]>::from(Sha256::digest(&message))
        );
        assert!(checked.verify(&pk));
        let mut tampered = checked.clone();
        tampered.message[20] ^= 1;
        assert!(
            !tampered.verify(&pk),
            "{name}: a changed message must not verify"
        );
    }
}

#[test]
fn leaves_hash_and_chain() {
    let k = read_json("keys.json");
    let lines = log_lines();
    assert_eq!(lines.len() as u64, LOG_SIZE);
    let mut prev = [0u8; 32];
    for (i, bytes) in lines.iter().enumerate() {
        let leaf = Leaf::from_bytes(bytes).unwrap_or_else(|e| panic!("entry {i}: {e}"));
        assert_eq!(leaf.v, 3);
        assert_eq!(leaf.index, i as u64);
        assert_eq!(
            b64_32(&leaf.prev),
            prev,
            "entry {i}: prev is the previous leaf hash"
        );
        // The leaf is JCS of {v, index, received_at, prev, envelope}: keys in sorted order.
        let v: Value = serde_json::from_slice(bytes).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, ["envelope", "index", "prev", "received_at", "v"]);
        assert!(
            bytes.starts_with(b"{\"envelope\":{\"body\":{"),
            "entry {i}: canonical member order"
        );
        // Every entry's envelope checks at its arrival time and verifies with its signer's key.
        let pk = public_key_of(&k, &leaf.envelope.signer);
        let checked = leaf
            .envelope
            .clone()
            .check(ORIGIN)
            .unwrap_or_else(|r| panic!("entry {i}: {r}"));
        assert!(checked.verify(&pk), "entry {i}");
        prev = leaf_hash(bytes);
        assert_eq!(leaf.hash().0, prev, "entry {i}");
    }
    assert_eq!(
        lines[0..7]
            .iter()
            .map(|l| Leaf::from_bytes(l).unwrap().envelope.kind)
            .collect::<Vec<_>>(),
        [
            "log_policy",
            "node_registered",
            "signer_key_registered",
            "signer_key_registered",
            "tenant_registered",
            "tenant_registered",
            "lease_registered"
        ]
    );
    // The whole vector log passes every rule of the protocol, rechecked from its entries.
    let mut checker =
        gpuledger::core::logcheck::LogChecker::new(ORIGIN, public_key_of(&k, LEDGER_SIGNER));
    for bytes in &lines {
        let (c, sigs) = checker.push(bytes);
        assert!(c.failure.is_none() && sigs.is_empty(), "{:?}", c.failure);
    }
    assert!(checker.finish_signatures().is_empty());
    for (name, index) in DETAILED {
        assert_eq!(
            read(&format!("{name}.leaf.json")),
            lines[index as usize],
            "{name}"
        );
        assert_eq!(
            read_line(&format!("{name}.leaf_hash.hex")),
            hex::encode(leaf_hash(&lines[index as usize])),
            "{name}"
        );
    }
    // Leaf index 0 carries 32 zero bytes as prev.
    assert_eq!(
        Leaf::from_bytes(&lines[0]).unwrap().prev,
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
    );
}

#[test]
fn tree_root_and_proofs_check_by_rfc9162() {
    let tree = read_json("tree.json");
    let leaves: Vec<[u8; 32]> = log_lines().iter().map(|l| leaf_hash(l)).collect();
    let listed: Vec<[u8; 32]> = tree["leaf_hashes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| b64_32(h.as_str().unwrap()))
        .collect();
    assert_eq!(listed, leaves);
    assert_eq!(tree["size"], LOG_SIZE);
    let root = mth(&leaves);
    assert_eq!(b64_32(tree["root"].as_str().unwrap()), root);
    assert_eq!(tree["root_hex"], hex::encode(root));
    let proof_of = |v: &Value| -> Vec<[u8; 32]> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|h| b64_32(h.as_str().unwrap()))
            .collect()
    };

    let inclusion = tree["inclusion"].as_array().unwrap();
    assert_eq!(inclusion.len(), INCLUSIONS.len());
    for case in inclusion {
        let index = case["leaf_index"].as_u64().unwrap();
        let size = case["tree_size"].as_u64().unwrap();
        let proof = proof_of(&case["proof"]);
        let root = mth(&leaves[..size as usize]);
        assert_eq!(b64_32(case["root"].as_str().unwrap()), root);
        assert_eq!(
            b64_32(case["leaf_hash"].as_str().unwrap()),
            leaves[index as usize]
        );
        assert!(
            verify_inclusion(index, size, leaves[index as usize], &proof, root),
            "inclusion {index} in {size}"
        );
        // The core's checker agrees, and a wrong leaf or proof fails in both.
        let core_proof: Vec<Hash> = proof.iter().map(|h| Hash(*h)).collect();
        merkle::check_record(
            &core_proof,
            size,
            Hash(root),
            index,
            Hash(leaves[index as usize]),
        )
        .unwrap();
        let other = leaves[(index as usize + 1) % 7];
        assert!(!verify_inclusion(index, size, other, &proof, root));
        if let Some(first) = proof.first() {
            let mut bad = proof.clone();
            bad[0] = node(first, first);
            assert!(!verify_inclusion(
                index,
                size,
                leaves[index as usize],
                &bad,
                root
            ));
        }
    }
    // The proof for leaf 2 of 7 is RFC 6962's PATH(2, D[0:7]) = [leaf 3, MTH(0..2), MTH(4..7)].
    let p = proof_of(&inclusion[0]["proof"]);
    assert_eq!(p, vec![leaves[3], mth(&leaves[0..2]), mth(&leaves[4..7])]);

    let consistency = tree["consistency"].as_array().unwrap();
    assert_eq!(consistency.len(), CONSISTENCIES.len());
    for case in consistency {
        let old = case["old_size"].as_u64().unwrap();
        let new = case["new_size"].as_u64().unwrap();
        let proof = proof_of(&case["proof"]);
        let (old_root, new_root) = (mth(&leaves[..old as usize]), mth(&leaves[..new as usize]));
        assert_eq!(b64_32(case["old_root"].as_str().unwrap()), old_root);
        assert_eq!(b64_32(case["new_root"].as_str().unwrap()), new_root);
        assert!(
            verify_consistency(old, new, old_root, new_root, &proof),
            "consistency {old} -> {new}"
        );
        let core_proof: Vec<Hash> = proof.iter().map(|h| Hash(*h)).collect();
        merkle::check_tree(&core_proof, new, Hash(new_root), old, Hash(old_root)).unwrap();
        if old < new {
            let wrong_old = mth(&leaves[1..old as usize + 1]);
            assert!(!verify_consistency(old, new, wrong_old, new_root, &proof));
        }
    }
    // RFC 6962 §2.1.2: PROOF(3, D[7]) = [leaf 2, leaf 3, MTH(0..2), MTH(4..7)].
    assert_eq!(
        proof_of(&consistency[0]["proof"]),
        vec![leaves[2], leaves[3], mth(&leaves[0..2]), mth(&leaves[4..7])]
    );
    // A power-of-two old size omits the old root: PROOF(4, D[7]) = [MTH(4..7)].
    assert_eq!(proof_of(&consistency[1]["proof"]), vec![mth(&leaves[4..7])]);
}

#[test]
fn checkpoint_verifies_and_other_keys_fail() {
    let k = read_json("keys.json");
    let vkey = k["log"]["verifier_key"].as_str().unwrap();
    let text = read_text("checkpoint.txt");
    let tree = read_json("tree.json");
    let root_b64 = tree["root"].as_str().unwrap();

    // The exact layout: origin, size, root, blank line, one signature line.
    let (body, sigs) = text.split_once("\n\n").unwrap();
    assert_eq!(body, format!("{ORIGIN}\n{LOG_SIZE}\n{root_b64}"));
    let sig_line = sigs.strip_suffix('\n').unwrap();
    let sig_b64 = sig_line
        .strip_prefix(&format!("\u{2014} {ORIGIN} "))
        .unwrap();
    let raw = BASE64_STANDARD.decode(sig_b64).unwrap();
    assert_eq!(raw.len(), 4 + 64);
    assert_eq!(
        hex::encode(&raw[..4]),
        k["log"]["note_key_id"].as_str().unwrap()
    );
    let pk = public_key_of(&k, LEDGER_SIGNER);
    let sig = Signature::from_bytes(&raw[4..].try_into().unwrap());
    pk.verify_strict(format!("{body}\n").as_bytes(), &sig)
        .unwrap();

    let cp = verify_checkpoint(text.as_bytes(), vkey).unwrap();
    assert_eq!(cp.origin(), ORIGIN);
    assert_eq!(cp.size(), LOG_SIZE);
    assert_eq!(cp.hash().0, b64_32(root_b64));
    assert_eq!(cp.extension(), "");

    // Signed by another key under the same name: refused.
    let other = LogSigner::new(ORIGIN, SigningKey::from_bytes(&[0x09; 32])).unwrap();
    let forged = other.sign_checkpoint(7, cp.hash());
    let err = verify_checkpoint(forged.as_bytes(), vkey).unwrap_err();
    // The refusal names both keys and the origin, so a wrong --log-key is told from a forgery.
    let msg = err.to_string();
    assert!(
        matches!(&err, CheckpointError::NotSignedByKey { found, origin: Some(o), .. }
            if found == &[format!("{ORIGIN}+{:08x}", checkpoint::note_key_id(ORIGIN, &other.key().verifying_key()))] && o == ORIGIN),
        "{err:?}"
    );
    assert!(
        msg.contains(&k["log"]["note_key_id"].as_str().unwrap().to_string()),
        "{msg}"
    );
    assert!(verify_checkpoint(forged.as_bytes(), &other.verifier_key()).is_ok());
    // A changed size under the original signature: refused.
    let altered = text.replacen(
        &format!("{ORIGIN}\n{LOG_SIZE}\n"),
        &format!("{ORIGIN}\n{}\n", LOG_SIZE + 1),
        1,
    );
    assert_ne!(altered, text);
    assert!(matches!(
        verify_checkpoint(altered.as_bytes(), vkey),
        Err(CheckpointError::Note(_))
    ));
    // A correctly signed note whose checkpoint names another origin: refused.
    let log = LogSigner::new(ORIGIN, SigningKey::from_bytes(&LOG_SEED)).unwrap();
    let mut note = Note::new(
        format!("other.example/log\n7\n{root_b64}\n").as_bytes(),
        &[],
    )
    .unwrap();
    note.add_sigs(&[&log]).unwrap();
    assert!(matches!(
        verify_checkpoint(&note.to_bytes(), vkey),
        Err(CheckpointError::WrongOrigin { .. })
    ));
    // Not a checkpoint at all.
    assert!(verify_checkpoint(b"hello\n", vkey).is_err());
}

/// The contract is strict Ed25519: a signature with a small-order R must be refused, even though
/// lax cofactorless verification accepts it; every path of the ledger must refuse it.
#[test]
fn small_order_r_signature_is_refused() {
    let message = read("gpu_usage.message.bin");
    let pk = public_key_of(&read_json("keys.json"), NODE_SIGNER);
    let raw = BASE64_STANDARD
        .decode(read_line("gpu_usage.small_order_r.sig.b64"))
        .unwrap();
    assert_eq!(
        raw[..32],
        [[1u8].as_slice(), &[0u8; 31]].concat()[..],
        "R is the identity point"
    );
    let forged = Signature::from_bytes(&raw.try_into().unwrap());
    let genuine = Signature::from_bytes(
        &BASE64_STANDARD
            .decode(read_line("gpu_usage.sig.b64"))
            .unwrap()
            .try_into()
            .unwrap(),
    );

    // The trap: lax verification accepts it.
    assert!(ed25519_dalek::Verifier::verify(&pk, &message, &forged).is_ok());
    // The contract refuses it, alone and among good signatures.
    assert!(pk.verify_strict(&message, &forged).is_err());
    assert!(pk.verify_strict(&message, &genuine).is_ok());
    let items = [
        (message.as_slice(), &genuine, &pk),
        (message.as_slice(), &forged, &pk),
        (message.as_slice(), &genuine, &pk),
    ];
    assert_eq!(envelope::verify_strict_many(&items), [true, false, true]);
    let env: Envelope = serde_json::from_slice(&read("gpu_usage.envelope.json")).unwrap();
    let mut checked = env.check(ORIGIN).unwrap();
    checked.signature = forged;
    assert!(!checked.verify(&pk));
}

/// golang.org/x/mod/sumdb/note's example key and note (note_test.go), checked both ways.
#[test]
fn go_sumdb_note_vector() {
    const SKEY: &str =
        "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz";
    const VKEY: &str = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW";
    const TEXT: &str = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n";
    const SIG_LINE: &str =
        "\u{2014} PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n";
    let signed = format!("{TEXT}\n{SIG_LINE}");

    // The Go private key: PRIVATE+KEY+<name>+<hex id>+base64(0x01 ‖ 32-byte seed).
    let encoded = BASE64_STANDARD
        .decode(
            SKEY.strip_prefix("PRIVATE+KEY+PeterNeumann+c74f20a3+")
                .unwrap(),
        )
        .unwrap();
    assert_eq!(encoded[0], 0x01);
    let seed: [u8; 32] = encoded[1..].try_into().unwrap();
    let key = SigningKey::from_bytes(&seed);

    // Our key id and verifier key string match Go's.
    assert_eq!(
        checkpoint::note_key_id("PeterNeumann", &key.verifying_key()),
        0xc74f20a3
    );
    assert_eq!(
        checkpoint::verifier_key("PeterNeumann", &key.verifying_key()),
        VKEY
    );

    // Our signer produces Go's signed note byte for byte.
    let signer = LogSigner::new("PeterNeumann", key).unwrap();
    assert_eq!(signer.verifier_key(), VKEY);
    let mut note = Note::new(TEXT.as_bytes(), &[]).unwrap();
    note.add_sigs(&[&signer]).unwrap();
    assert_eq!(String::from_utf8(note.to_bytes()).unwrap(), signed);

    // Go's note verifies with the verifier key, and strictly with the raw key.
    let parsed = Note::from_bytes(signed.as_bytes()).unwrap();
    let verifier = StandardVerifier::new(VKEY).unwrap();
    parsed
        .verify(&VerifierList::new(vec![Box::new(verifier)]))
        .unwrap();
    let raw = BASE64_STANDARD
        .decode(SIG_LINE.trim_end().rsplit_once(' ').unwrap().1)
        .unwrap();
    assert_eq!(raw[..4], [0xc7, 0x4f, 0x20, 0xa3]);
    let vk = VerifyingKey::from_bytes(
        &BASE64_STANDARD
            .decode(VKEY.rsplit_once('+').unwrap().1)
            .unwrap()[1..]
            .try_into()
            .unwrap(),
    )
    .unwrap();
    vk.verify_strict(
        TEXT.as_bytes(),
        &Signature::from_bytes(&raw[4..].try_into().unwrap()),
    )
    .unwrap();
    // It is not a checkpoint, so checkpoint verification refuses it after the signature checks.
    assert!(matches!(
        verify_checkpoint(signed.as_bytes(), VKEY),
        Err(CheckpointError::Body)
    ));
}

/// The adversarial Ed25519 table (tests/vectors/ed25519/cases.json): signatures and keys that
/// some verifiers accept and the protocol refuses, and one honest case, over `message` (the
/// vector gpu_usage message). Built with curve25519-dalek's group operations; each case says
/// why it is what it is.
fn ed25519_cases(message: &[u8]) -> Value {
    use common::forge::{self, challenge, nonce};
    use curve25519_dalek::constants::{ED25519_BASEPOINT_POINT as B, EIGHT_TORSION};
    use curve25519_dalek::edwards::CompressedEdwardsY;
    use ed25519_dalek::Signer;
    let sk = SigningKey::from_bytes(&NODE_SEED);
    let a = sk.to_scalar();
    let pk = sk.verifying_key().to_bytes();
    let honest = sk.sign(message).to_bytes();
    let sig = forge::join;
    let forged = |class: &str| forge::signature(class, &sk, message);
    // A mixed-order key aB + T8, and a signature by its holder that strict verification of the
    // key alone (no torsion check) accepts: a nonce whose challenge is a multiple of 8.
    let mixed = (B * a + EIGHT_TORSION[1]).compress().to_bytes();
    let mixed_sig = (0..)
        .find_map(|i| {
            let r = nonce("mixed", i);
            let big_r = (B * r).compress().to_bytes();
            let k = challenge(&big_r, &mixed, message);
            k.to_bytes()[0]
                .is_multiple_of(8)
                .then(|| sig(&big_r, &(r + k * a).to_bytes()))
        })
        .unwrap();
    // A small-order key, and a signature that lax verifiers accept for it.
    let weak = EIGHT_TORSION[1].compress().to_bytes();
    let weak_sig = (0..)
        .find_map(|i| {
            let r = nonce("weak", i);
            let big_r = (B * r).compress().to_bytes();
            let k = challenge(&big_r, &weak, message);
            k.to_bytes()[0]
                .is_multiple_of(8)
                .then(|| sig(&big_r, &r.to_bytes()))
        })
        .unwrap();
    // A non-canonical key encoding: y + p for the first small y that is on the curve.
    let non_canonical_a = (2u8..=18)
        .map(|y| {
            let mut e = [0xffu8; 32];
            e[0] = 0xed + y;
            e[31] = 0x7f;
            e
        })
        .find(|e| CompressedEdwardsY(*e).decompress().is_some())
        .expect("a small y on the curve");
    /// name, public key, signature, key valid, verdict, why.
    type Case<'a> = (&'a str, [u8; 32], [u8; 64], bool, &'a str, &'a str);
    let cases: Vec<Case> = vec![
        ("honest", pk, honest, true, "accept", "RFC 8032 signature by a valid key"),
        ("r_torsion_order_2", pk, forged("r_torsion_order_2"), true, "refuse",
         "R = rB + T with T of order 2: cofactored (ZIP-215) verifiers accept, strict ones refuse"),
        ("r_torsion_order_4", pk, forged("r_torsion_order_4"), true, "refuse",
         "R = rB + T with T of order 4"),
        ("r_torsion_order_8", pk, forged("r_torsion_order_8"), true, "refuse",
         "R = rB + T with T of order 8"),
        ("r_identity", pk, forged("r_identity"), true, "refuse",
         "R = identity (small order), S = k·a: cofactorless verifiers without the small-order check (OpenSSL) accept"),
        ("r_small_order_8", pk, forged("r_small_order_8"), true, "refuse",
         "R of order 8, S = k·a: cofactored verifiers accept"),
        ("r_non_canonical", pk, forged("r_non_canonical"), true, "refuse",
         "R = the identity encoded as y = p + 1 (non-canonical)"),
        ("r_negative_zero", pk, forged("r_negative_zero"), true, "refuse",
         "R = the identity with the sign bit set (x = 0, non-canonical)"),
        ("s_equals_l", pk, forged("s_equals_l"), true, "refuse", "S = L is not canonical (S < L)"),
        ("s_plus_l", pk, forged("s_plus_l"), true, "refuse",
         "the honest S plus L: the same scalar, not canonical"),
        ("a_mixed_order", mixed, mixed_sig, false, "refuse",
         "A = aB + T8 (not torsion-free); this signature passes verify_strict for that key, which is why such keys are refused at registration"),
        ("a_small_order", weak, weak_sig, false, "refuse",
         "A of order 8: lax verifiers accept signatures on anything for it"),
        ("a_non_canonical", non_canonical_a, honest, false, "refuse",
         "A encoded with y ≥ p (non-canonical)"),
    ];
    json!({
        "description": "Adversarial Ed25519 cases (docs/PROTOCOL.md §3). key_valid: the key passes §3.1; verdict: what every conforming verifier (and the ledger) decides for the signature by that key over the message.",
        "cases": cases.iter().map(|(name, key, s, valid, verdict, why)| json!({
            "name": name,
            "public_key": BASE64_STANDARD.encode(key),
            "message": hex::encode(message),
            "signature": BASE64_STANDARD.encode(s),
            "key_valid": valid,
            "verdict": verdict,
            "why": why,
        })).collect::<Vec<_>>(),
    })
}

/// Every case of the adversarial table gets the verdict it states from the key rule and strict
/// verification, alone and through the parallel verifier the ledger uses.
#[test]
fn ed25519_cases_have_one_verdict() {
    let table = read_json("ed25519/cases.json");
    let cases = table["cases"].as_array().unwrap();
    assert!(cases.len() >= 13);
    for c in cases {
        let name = c["name"].as_str().unwrap();
        let key_bytes = b64_32(c["public_key"].as_str().unwrap());
        let message = hex::decode(c["message"].as_str().unwrap()).unwrap();
        let sig = Signature::from_bytes(
            &BASE64_STANDARD
                .decode(c["signature"].as_str().unwrap())
                .unwrap()
                .try_into()
                .unwrap(),
        );
        let valid = keys::check_public(&key_bytes);
        assert_eq!(
            valid.is_ok(),
            c["key_valid"],
            "{name}: key rule ({valid:?})"
        );
        let accepted = valid.is_ok_and(|k| {
            let strict = k.verify_strict(&message, &sig).is_ok();
            assert_eq!(
                envelope::verify_strict_many(&[(&message, &sig, &k)]),
                [strict]
            );
            strict
        });
        assert_eq!(
            if accepted { "accept" } else { "refuse" },
            c["verdict"],
            "{name}"
        );
    }
}
