//! The ledger's append contract on both databases: outcomes, idempotency, conflict evidence,
//! every rejection reason, keys and roles, and the stored tree against RFC 6962 by recursion.

mod common;

use common::*;
use gpuledger::core::envelope::Envelope;
use gpuledger::core::merkle::{self, Hash};
use gpuledger::core::outcome::{Outcome, SeqGap};
use gpuledger::core::record::{Body, Role};
use gpuledger::core::rejection::Reason;
use gpuledger::core::time::Timestamp;
use gpuledger::sample;
use gpuledger::store::{read, verify, StoreError};
use rust_decimal::Decimal;
use serde_json::json;

fn reason(o: &Outcome) -> Reason {
    match o {
        Outcome::Rejected(r) => r.reason,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

/// Appends each step's record alone, through its handle: accepted (`None`) or refused with the
/// reason given. Every step is tried; every one that differs is reported.
fn append_one_by_one<const N: usize>(
    steps: [(&str, &gpuledger::store::Ledger, Envelope, Option<Reason>); N],
) {
    let mut wrong = Vec::new();
    for (what, ledger, record, want) in steps {
        let out = ledger.append(vec![record]).unwrap();
        let got = match &out[0] {
            Outcome::Accepted { .. } => None,
            Outcome::Rejected(r) => Some(r.reason),
            other => panic!("{what}: {other:?}"),
        };
        if got != want {
            wrong.push(format!("{what}: {got:?}, not {want:?}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

fn assert_verifies(ledger: &gpuledger::store::Ledger) -> verify::Report {
    ledger
        .reads()
        .run(|c| Ok(verify::verify_log(c, None, &mut |_, _| {})))
        .unwrap()
        .unwrap_or_else(|e| panic!("verify-log failed: {e}"))
}

both_backends!(accepts_dedupes_and_keeps_conflicts, |db: &TestDb| {
    let ledger = open(db);
    let k = signer(&ledger, "node-1", Role::Node);
    parties(&ledger, &["t1", "t2", "t9"]);
    // Indexes below are relative to the entry before the first record.
    let b0 = ledger.reads().size().unwrap() - 1;
    let a = sample::usage("node-1", &k, 1, "t1", Decimal::from(8), slot(1));
    let b = sample::usage("node-1", &k, 2, "t1", Decimal::from(8), slot(2));
    let out = ledger.append(vec![a.clone(), b.clone()]).unwrap();
    assert_eq!(
        out,
        vec![
            Outcome::Accepted {
                index: b0 + 1,
                seq_gap: None
            },
            Outcome::Accepted {
                index: b0 + 2,
                seq_gap: None
            }
        ]
    );

    // The same record again: duplicate with the original index, nothing appended.
    let again = ledger.append(vec![b.clone(), a.clone()]).unwrap();
    assert_eq!(
        again,
        vec![
            Outcome::Duplicate { index: b0 + 2 },
            Outcome::Duplicate { index: b0 + 1 }
        ]
    );
    // Within one batch too.
    let c = sample::usage("node-1", &k, 3, "t1", Decimal::from(1), slot(3));
    let out = ledger.append(vec![c.clone(), c.clone()]).unwrap();
    assert_eq!(
        out,
        vec![
            Outcome::Accepted {
                index: b0 + 3,
                seq_gap: None
            },
            Outcome::Duplicate { index: b0 + 3 }
        ]
    );

    // A different record under seq 2: conflict, kept as evidence, log unchanged.
    let size_before = ledger.reads().head().unwrap().0;
    let other = sample::usage("node-1", &k, 2, "t2", Decimal::from(4), slot(2));
    let out = ledger.append(vec![other]).unwrap();
    assert_eq!(reason(&out[0]), Reason::Conflict);
    assert_eq!(ledger.reads().head().unwrap().0, size_before);
    assert_eq!(ledger.reads().run(read::conflict_count).unwrap(), 1);

    // Gaps are allowed and reported.
    let d = sample::usage("node-1", &k, 7, "t1", Decimal::from(1), slot(7));
    let out = ledger.append(vec![d]).unwrap();
    assert_eq!(
        out,
        vec![Outcome::Accepted {
            index: b0 + 4,
            seq_gap: Some(SeqGap { from: 4, to: 6 })
        }]
    );
    // A late record filling the gap is accepted without a new gap.
    let e = sample::usage("node-1", &k, 5, "t1", Decimal::from(1), slot(5));
    assert_eq!(
        ledger.append(vec![e]).unwrap(),
        vec![Outcome::Accepted {
            index: b0 + 5,
            seq_gap: None
        }]
    );

    // Overlapping intervals of one stream are refused; another tenant's stream may overlap.
    let same_slot = sample::usage("node-1", &k, 8, "t1", Decimal::from(2), slot(7));
    let half_overlap = sample::usage("node-1", &k, 9, "t1", Decimal::from(2), slot(7).plus(5));
    let other_tenant = sample::usage("node-1", &k, 10, "t9", Decimal::from(2), slot(7));
    let out = ledger
        .append(vec![same_slot, half_overlap, other_tenant])
        .unwrap();
    assert_eq!(reason(&out[0]), Reason::OverlappingInterval);
    assert_eq!(reason(&out[1]), Reason::OverlappingInterval);
    assert!(
        matches!(out[2], Outcome::Accepted { index, .. } if index == b0 + 6),
        "{:?}",
        out[2]
    );
    // Within one batch as well.
    let x = sample::usage("node-1", &k, 11, "t1", Decimal::ONE, slot(20));
    let y = sample::usage("node-1", &k, 12, "t1", Decimal::ONE, slot(20).plus(9));
    let out = ledger.append(vec![x, y]).unwrap();
    assert!(matches!(out[0], Outcome::Accepted { .. }));
    assert_eq!(reason(&out[1]), Reason::OverlappingInterval);

    let report = assert_verifies(&ledger);
    assert_eq!(report.size, b0 + 8);
});

/// Mutates a signed envelope's JSON and re-signs it with `key` so that only the mutation is wrong.
fn resigned(
    env: &Envelope,
    key: &ed25519_dalek::SigningKey,
    f: impl FnOnce(&mut serde_json::Value),
) -> Envelope {
    let mut v = serde_json::to_value(env).unwrap();
    f(&mut v);
    let mut e: Envelope = serde_json::from_value(v).unwrap();
    e.key_id = gpuledger::core::keys::key_id(&key.verifying_key());
    use base64::Engine;
    use ed25519_dalek::Signer;
    let msg = e.signed_message(gpuledger::sample::ORIGIN).unwrap();
    e.sig = base64::engine::general_purpose::STANDARD.encode(key.sign(&msg).to_bytes());
    e
}

both_backends!(every_rejection_reason_changes_nothing, |db: &TestDb| {
    let ledger = open(db);
    let k = signer(&ledger, "node-1", Role::Node);
    let m = signer(&ledger, "market-1", Role::Market);
    let stranger = sample::key("stranger");
    parties(&ledger, &["t1", "t2"]);
    let now = Timestamp::now();
    let good = sample::usage("node-1", &k, 10, "t1", Decimal::from(2), slot(10));
    // Leases of t1 that do not cover the good record: one of another node's GPUs, and one of
    // node-1's that ended as the record's interval starts.
    lease_with(
        &ledger,
        "lease-t1-node-2",
        "t1",
        gpuledger::core::rating::LeaseClass::OnDemand,
        &[("node-2", sample::MODEL, 8)],
    );
    let Body::LeaseRegistered(mut ended) = sample::lease_on("lease-t1-ended", "t1", &["node-1"], 8)
    else {
        unreachable!("lease_on makes a lease")
    };
    ended.to = Some(slot(10).plus(-10));
    ledger
        .append_ledger_entry(Body::LeaseRegistered(ended))
        .unwrap();
    // A spot price already logged, for the conflict case.
    let spot_at = now.plus(600);
    assert!(matches!(
        ledger
            .append(vec![sample::spot("market-1", &m, 1, Decimal::ONE, spot_at)])
            .unwrap()[0],
        Outcome::Accepted { .. }
    ));
    let old_start = now.plus(-40 * 86_400);
    let body = |f: &'static str, v: serde_json::Value| {
        let good = good.clone();
        let k = k.clone();
        move || resigned(&good, &k, |j| j["body"][f] = v)
    };
    let future_end = now.plus(3600).to_string();
    let cases: Vec<(&str, Envelope, Reason)> = vec![
        (
            "version",
            resigned(&good, &k, |j| j["v"] = json!(1)),
            Reason::UnsupportedVersion,
        ),
        (
            "kind",
            resigned(&good, &k, |j| j["kind"] = json!("gpu_usage_v9")),
            Reason::UnknownKind,
        ),
        (
            "unknown body field",
            resigned(&good, &k, |j| j["body"]["extra"] = json!("x")),
            Reason::Malformed,
        ),
        (
            "missing body field",
            resigned(&good, &k, |j| {
                j["body"].as_object_mut().unwrap().remove("region");
            }),
            Reason::Malformed,
        ),
        (
            "number for decimal",
            body("gpu_count", json!(2))(),
            Reason::Malformed,
        ),
        (
            "non-canonical decimal",
            body("gpu_count", json!("2.0"))(),
            Reason::InvalidField,
        ),
        (
            "negative",
            body("gpu_count", json!("-2"))(),
            Reason::NegativeQuantity,
        ),
        (
            "zero gpus",
            body("gpu_count", json!("0"))(),
            Reason::QuantityOutOfRange,
        ),
        (
            "absurd gpus",
            body("gpu_count", json!("100000"))(),
            Reason::QuantityOutOfRange,
        ),
        (
            "gpu seconds",
            body("gpu_seconds", json!("21"))(),
            Reason::GpuSecondsMismatch,
        ),
        (
            "bad timestamp",
            body("start", json!("2026-11-30 12:00:00"))(),
            Reason::InvalidField,
        ),
        (
            "empty interval",
            body("start", json!(now.to_string()))(),
            Reason::EmptyInterval,
        ),
        (
            "interval too long",
            resigned(&good, &k, |j| {
                j["body"]["start"] = json!(slot(10).plus(-200_000).to_string());
                j["body"]["gpu_seconds"] = json!("400000");
            }),
            Reason::IntervalTooLong,
        ),
        (
            "in the future",
            resigned(&good, &k, |j| {
                j["body"]["start"] = json!(now.plus(3590).to_string());
                j["body"]["end"] = json!(future_end.clone());
            }),
            Reason::InFuture,
        ),
        (
            "bad id",
            body("tenant", json!("t 1"))(),
            Reason::InvalidField,
        ),
        (
            "null lease",
            body("lease", json!(null))(),
            Reason::Malformed,
        ),
        (
            "seq 0",
            resigned(&good, &k, |j| j["seq"] = json!(0)),
            Reason::QuantityOutOfRange,
        ),
        (
            "id too long",
            body("lease", json!("x".repeat(129)))(),
            Reason::InvalidField,
        ),
        (
            "unknown signer",
            sample::usage("node-9", &stranger, 1, "t1", Decimal::ONE, slot(1)),
            Reason::UnknownSigner,
        ),
        (
            "unknown key",
            resigned(&good, &stranger, |_| {}),
            Reason::UnknownKey,
        ),
        (
            "key of another signer",
            resigned(&good, &m, |_| {}),
            Reason::KeySignerMismatch,
        ),
        (
            "role",
            sample::spot("node-1", &k, 11, Decimal::ONE, now),
            Reason::RoleNotAllowed,
        ),
        (
            "market signs usage",
            sample::usage("market-1", &m, 1, "t1", Decimal::ONE, slot(1)),
            Reason::RoleNotAllowed,
        ),
        (
            "bad signature",
            {
                let mut e = good.clone();
                e.seq = 12;
                e
            },
            Reason::BadSignature,
        ),
        (
            "node outside the key's scope",
            body("node", json!("node-elsewhere"))(),
            Reason::NodeNotAllowed,
        ),
        (
            "region outside the key's scope",
            body("region", json!("eu-west"))(),
            Reason::RegionNotAllowed,
        ),
        (
            "unregistered tenant",
            body("tenant", json!("t-nobody"))(),
            Reason::UnknownTenant,
        ),
        (
            "unregistered lease",
            body("lease", json!("lease-nobody"))(),
            Reason::UnknownLease,
        ),
        (
            "another tenant's lease",
            body("lease", json!("lease-t2"))(),
            Reason::LeaseTenantMismatch,
        ),
        (
            "no lease",
            resigned(&good, &k, |j| {
                j["body"].as_object_mut().unwrap().remove("lease");
            }),
            Reason::LeaseNotOnNode,
        ),
        (
            "a lease of another node",
            body("lease", json!("lease-t1-node-2"))(),
            Reason::LeaseNotOnNode,
        ),
        (
            "a lease ended before the interval",
            body("lease", json!("lease-t1-ended"))(),
            Reason::OutsideLeaseTerm,
        ),
        (
            "more GPUs than the lease covers",
            resigned(&good, &k, |j| {
                j["body"]["gpu_count"] = json!("9");
                j["body"]["gpu_seconds"] = json!("90");
            }),
            Reason::OverCapacity,
        ),
        (
            "older than the policy allows",
            resigned(&good, &k, |j| {
                j["body"]["start"] = json!(old_start.to_string());
                j["body"]["end"] = json!(old_start.plus(10).to_string());
                j["body"]["gpu_seconds"] = json!("20");
            }),
            Reason::TooOld,
        ),
        (
            "spot price re-pricing the past",
            sample::spot("market-1", &m, 2, Decimal::ONE, now.plus(-3600)),
            Reason::PriceInPast,
        ),
        (
            "two spot prices at one instant",
            sample::spot("market-1", &m, 3, Decimal::TWO, spot_at),
            Reason::PriceConflict,
        ),
        (
            "signed for another log",
            {
                let mut e = good.clone();
                use base64::Engine;
                use ed25519_dalek::Signer;
                let msg = e.signed_message("staging.gpuledger/log").unwrap();
                e.sig = base64::engine::general_purpose::STANDARD.encode(k.sign(&msg).to_bytes());
                e
            },
            Reason::BadSignature,
        ),
        (
            "bad sig encoding",
            {
                let mut e = good.clone();
                e.sig = "AAAA".into();
                e
            },
            Reason::InvalidField,
        ),
    ];
    let size = ledger.reads().head().unwrap().0;
    let (names, envs): (Vec<_>, Vec<_>) = cases.iter().map(|(n, e, _)| (*n, e.clone())).unzip();
    let outs = ledger.append(envs).unwrap();
    for ((name, (_, _, want)), out) in names.iter().zip(&cases).zip(&outs) {
        assert!(
            matches!(out, Outcome::Rejected(r) if r.reason == *want),
            "case {name}: want {want:?}, got {out:?}"
        );
    }
    assert_eq!(
        ledger.reads().head().unwrap().0,
        size,
        "rejections append nothing"
    );
    // The valid record still goes in after all that.
    assert!(matches!(
        ledger.append(vec![good]).unwrap()[0],
        Outcome::Accepted { .. }
    ));
    assert_verifies(&ledger);
});

both_backends!(revoked_keys_and_rotation, |db: &TestDb| {
    let ledger = open(db);
    let old = signer(&ledger, "node-1", Role::Node);
    parties(&ledger, &["t1"]);
    let r1 = sample::usage("node-1", &old, 1, "t1", Decimal::ONE, slot(1));
    assert!(matches!(
        ledger.append(vec![r1]).unwrap()[0],
        Outcome::Accepted { .. }
    ));
    // Rotate: register a new key for the same signer, revoke the old one.
    let new = gpuledger::sample::key("node-1-new");
    let (new_id, _) = ledger
        .register_key(
            "node-1",
            Role::Node,
            &gpuledger::core::keys::encode_public(&new.verifying_key()),
            None,
        )
        .unwrap();
    let old_id = gpuledger::core::keys::key_id(&old.verifying_key());
    ledger
        .revoke_key("node-1", &old_id, Some("rotated".into()))
        .unwrap();
    let r2 = sample::usage("node-1", &old, 2, "t1", Decimal::ONE, slot(2));
    assert_eq!(
        reason(&ledger.append(vec![r2]).unwrap()[0]),
        Reason::RevokedKey
    );
    let r3 = sample::usage("node-1", &new, 2, "t1", Decimal::ONE, slot(2));
    assert!(matches!(
        ledger.append(vec![r3]).unwrap()[0],
        Outcome::Accepted { .. }
    ));
    assert_ne!(new_id, old_id);
    // Registry refusals.
    assert!(matches!(
        ledger.revoke_key("node-1", &old_id, None),
        Err(StoreError::AlreadyExists(_))
    ));
    assert!(matches!(
        ledger.revoke_key("node-2", &new_id, None),
        Err(StoreError::NotFound(_))
    ));
    let pk = gpuledger::core::keys::encode_public(&new.verifying_key());
    assert!(matches!(
        ledger.register_key(
            "node-3",
            Role::Node,
            &pk,
            Some(sample::node_scope("node-3"))
        ),
        Err(StoreError::AlreadyExists(_))
    ));
    assert!(matches!(
        ledger.register_key("node-1", Role::Market, &pk, Some(sample::market_scope())),
        Err(StoreError::Refused(_))
    ));
    assert!(matches!(
        ledger.register_key(
            "ledger",
            Role::Node,
            &pk,
            Some(sample::node_scope("ledger"))
        ),
        Err(StoreError::Refused(_))
    ));
    let mut identity = [0u8; 32];
    identity[0] = 1;
    use base64::Engine;
    let weak = base64::engine::general_purpose::STANDARD.encode(identity);
    assert!(
        matches!(ledger.register_key("node-4", Role::Node, &weak, Some(sample::node_scope("node-4"))), Err(StoreError::Refused(m)) if m.contains("weak"))
    );
    // A second ledger handle (as another process would) sees the revocation too.
    drop(ledger);
    let again = gpuledger::store::Ledger::open(&db.url, log_key()).unwrap();
    let r4 = sample::usage("node-1", &old, 3, "t1", Decimal::ONE, slot(3));
    assert_eq!(
        reason(&again.append(vec![r4]).unwrap()[0]),
        Reason::RevokedKey
    );
    assert_verifies(&again);
});

both_backends!(batch_limit_is_enforced, |db: &TestDb| {
    use gpuledger::core::limits::MAX_APPEND_BATCH;
    let ledger = open(db);
    let k = signer(&ledger, "node-1", Role::Node);
    parties(&ledger, &["t"]);
    let base = ledger.reads().head().unwrap().0;
    let batch: Vec<_> = usage_run("node-1", &k, "t", 1..=MAX_APPEND_BATCH as u64 + 1);
    assert!(
        matches!(ledger.append(batch.clone()), Err(StoreError::BatchTooLarge(n, MAX_APPEND_BATCH)) if n == MAX_APPEND_BATCH + 1)
    );
    assert_eq!(ledger.reads().head().unwrap().0, base);
    let outs = ledger.append(batch[..MAX_APPEND_BATCH].to_vec()).unwrap();
    assert!(outs.iter().all(|o| matches!(o, Outcome::Accepted { .. })));
    assert_eq!(
        ledger.reads().head().unwrap().0,
        base + MAX_APPEND_BATCH as u64
    );
});

/// RFC 6962 §2.1 by recursion over leaf hashes.
fn mth(leaves: &[Hash]) -> Hash {
    match leaves.len() {
        0 => merkle::EMPTY_HASH,
        1 => leaves[0],
        n => {
            let k = 1usize << (usize::BITS - (n - 1).leading_zeros() - 1);
            merkle::node_hash(mth(&leaves[..k]), mth(&leaves[k..]))
        }
    }
}

both_backends!(stored_tree_matches_rfc6962_for_every_size, |db: &TestDb| {
    let ledger = open(db);
    let k = signer(&ledger, "node-1", Role::Node);
    parties(&ledger, &["t"]);
    // Appends of varying batch sizes, so group boundaries fall everywhere.
    let mut seq = 0u64;
    let mut sizes = vec![ledger.reads().size().unwrap()];
    for n in [1u64, 2, 3, 1, 7, 16, 1, 33, 64, 5, 100, 30] {
        ledger
            .append(usage_run("node-1", &k, "t", seq + 1..=seq + n))
            .unwrap();
        seq += n;
        sizes.push(ledger.reads().head().unwrap().0);
    }
    let size = ledger.reads().head().unwrap().0;
    let leaves: Vec<Hash> = ledger
        .reads()
        .entries(0, size)
        .unwrap()
        .iter()
        .map(|r| merkle::leaf_hash(&r.leaf))
        .collect();
    for n in 1..=size {
        let root = ledger.reads().root_at(n).unwrap();
        assert_eq!(root, mth(&leaves[..n as usize]), "root at size {n}");
        for i in [0, n / 2, n - 1] {
            let p = ledger.reads().inclusion_proof(i, n).unwrap();
            merkle::check_record(&p, n, root, i, leaves[i as usize]).unwrap();
        }
        for m in [1, n / 3 + 1, n] {
            let p = ledger.reads().consistency_proof(m, n).unwrap();
            merkle::check_tree(&p, n, root, m, mth(&leaves[..m as usize])).unwrap();
        }
    }
    assert!(sizes.windows(2).all(|w| w[0] < w[1]));
    assert!(ledger.reads().inclusion_proof(size, size).is_err());
    assert!(ledger.reads().consistency_proof(0, size).is_err());
    assert!(ledger.reads().consistency_proof(1, size + 1).is_err());
});

both_backends!(checkpoints_are_signed_and_consistent, |db: &TestDb| {
    let ledger = open(db);
    let k = signer(&ledger, "node-1", Role::Node);
    parties(&ledger, &["t"]);
    let (s1, note1) = ledger.checkpoint().unwrap();
    // The policy entry, the node, its key, the tenant and its lease.
    assert_eq!(s1, 5);
    // No new entries: the same checkpoint comes back.
    assert_eq!(ledger.checkpoint().unwrap(), (s1, note1.clone()));
    ledger.append(usage_run("node-1", &k, "t", 1..=10)).unwrap();
    let (s2, note2) = ledger.checkpoint().unwrap();
    assert_eq!(s2, s1 + 10);
    let vkey = ledger.info().verifier_key.clone();
    let c1 = gpuledger::core::checkpoint::verify_checkpoint(note1.as_bytes(), &vkey).unwrap();
    let c2 = gpuledger::core::checkpoint::verify_checkpoint(note2.as_bytes(), &vkey).unwrap();
    assert_eq!(c2.origin(), "test.gpuledger/log");
    let p = ledger.reads().consistency_proof(s1, s2).unwrap();
    merkle::check_tree(&p, s2, *c2.hash(), s1, *c1.hash()).unwrap();
    assert_eq!(
        ledger.reads().latest_checkpoint().unwrap(),
        Some((s2, note2))
    );
    let report = assert_verifies(&ledger);
    // The two signed here, and the one opening the log signed (of its log policy entry).
    assert_eq!(report.checkpoints, 3);
});

both_backends!(init_is_idempotent_and_refuses_another_key, |db: &TestDb| {
    let ledger = open(db);
    drop(ledger);
    gpuledger::store::init(&db.url, &log_key(), "test.gpuledger/log").unwrap();
    let other = sample::key("another-log");
    assert!(matches!(
        gpuledger::store::init(&db.url, &other, "test.gpuledger/log"),
        Err(StoreError::WrongLogKey { .. })
    ));
    assert!(matches!(
        gpuledger::store::Ledger::open(&db.url, other),
        Err(StoreError::WrongLogKey { .. })
    ));
    assert!(matches!(
        gpuledger::store::init(&db.url, &log_key(), "other/origin"),
        Err(StoreError::Refused(_))
    ));
});

both_backends!(
    overlap_checks_survive_late_records_and_other_writers,
    |db: &TestDb| {
        let ledger = open(db);
        let k = signer(&ledger, "node-1", Role::Node);
        parties(&ledger, &["t1"]);
        let rec =
            |seq: u64, at: u64| sample::usage("node-1", &k, seq, "t1", Decimal::ONE, slot(at));
        assert_accepted(
            &ledger
                .append(vec![rec(1, 1), rec(2, 2), rec(3, 10)])
                .unwrap(),
        );
        // Another process (another handle on the same database) appends to the stream; this
        // handle must notice and not trust what it remembers.
        let other = gpuledger::store::Ledger::open(&db.url, log_key()).unwrap();
        let overlap = Some(Reason::OverlappingInterval);
        #[rustfmt::skip]
        let steps = [
            // A late record filling the gap, then one after it: both fine.
            ("late", &ledger, rec(4, 7), None),
            ("after it", &ledger, rec(5, 8), None),
            // The stream's latest interval is still slot 10: a second claim on it is refused.
            ("slot 10 again", &ledger, rec(6, 10), overlap),
            ("slot 11", &ledger, rec(7, 11), None),
            ("slot 12 by the other", &other, rec(8, 12), None),
            ("slot 12 again", &ledger, rec(9, 12), overlap),
            ("slot 13", &ledger, rec(10, 13), None),
            ("slot 13 again, by the other", &other, rec(11, 13), overlap),
        ];
        append_one_by_one(steps);
        assert_verifies(&ledger);
    }
);

// verify-log checks one moment of the log: entries committed while it runs (by a live server,
// or by a killed server's database session finishing its last commit) are not "beyond the
// log size" it read at the start.
both_backends!(
    verify_log_reads_one_snapshot_of_a_live_log,
    |db: &TestDb| {
        let ledger = open(db);
        let k = signer(&ledger, "node-1", Role::Node);
        parties(&ledger, &["t1"]);
        let usage = |seq| sample::usage("node-1", &k, seq, "t1", Decimal::from(8), slot(seq));
        ledger.append(vec![usage(1), usage(2)]).unwrap();
        let size = ledger.reads().size().unwrap();
        let mut appended = 0;
        let report = ledger
            .reads()
            .run(|c| {
                Ok(verify::verify_log(c, None, &mut |_, _| {
                    // Between verify-log's pages: the ledger appends and commits.
                    let out = ledger.append(vec![usage(3 + appended)]).unwrap();
                    assert!(matches!(out[0], Outcome::Accepted { .. }), "{out:?}");
                    appended += 1;
                }))
            })
            .unwrap()
            .unwrap_or_else(|e| panic!("verify-log on a live log: {e}"));
        assert!(appended > 0);
        assert_eq!(report.size, size);
        assert_eq!(ledger.reads().size().unwrap(), size + appended);
        assert_eq!(assert_verifies(&ledger).size, size + appended);
    }
);

// The sequencer keeps the spot prices it has seen and catches up on what any process appended
// since: a second price for the same instant is refused whichever handle logged the first.
both_backends!(spot_conflicts_across_processes, |db: &TestDb| {
    let ledger = open(db);
    let m = signer(&ledger, "market-1", Role::Market);
    let other = gpuledger::store::Ledger::open(&db.url, log_key()).unwrap();
    let now = Timestamp::now();
    let spot = |seq: u64, at: i64| sample::spot("market-1", &m, seq, Decimal::ONE, now.plus(at));
    let conflict = Some(Reason::PriceConflict);
    #[rustfmt::skip]
    let steps = [
        ("a price at +60", &ledger, spot(1, 60), None),
        ("another at +60, by the other", &other, spot(2, 60), conflict),
        ("a price at +120, by the other", &other, spot(3, 120), None),
        ("another at +120", &ledger, spot(4, 120), conflict),
    ];
    append_one_by_one(steps);
    // Within one batch too, and the batch's other price goes in.
    let out = ledger.append(vec![spot(5, 180), spot(6, 180)]).unwrap();
    assert_accepted(&out[..1]);
    assert_eq!(reason(&out[1]), Reason::PriceConflict);
    assert_verifies(&ledger);
});

both_backends!(one_group_may_start_hundreds_of_streams, |db: &TestDb| {
    // 400 tenants, one record each from one node: 400 new streams in one transaction. The
    // overlap and duplicate lookups are chunked; in one query (three OR terms per stream)
    // SQLite refused it ("Expression tree is too large").
    let ledger = open(db);
    let k = signer(&ledger, "node-many", Role::Node);
    let tenants: Vec<String> = (0..400).map(|i| format!("t-{i:03}")).collect();
    let names: Vec<&str> = tenants.iter().map(String::as_str).collect();
    // Tenant i leases one GPU of the node for the 10 s of its record (slot i + 1): the node's
    // 32 GPUs of the sample model would not hold 400 leases at once.
    for (i, t) in names.iter().enumerate() {
        let [tenant, lease] = sample::parties(t, &["node-many"], 1);
        let Body::LeaseRegistered(mut lease) = lease else {
            unreachable!("sample::parties registers a lease")
        };
        lease.from = slot(i as u64 + 1).plus(-10);
        lease.to = Some(slot(i as u64 + 1));
        for body in [tenant, Body::LeaseRegistered(lease)] {
            ledger.append_ledger_entry(body).unwrap();
        }
    }
    let batch: Vec<Envelope> = names
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let seq = i as u64 + 1;
            sample::usage(
                "node-many",
                &k,
                seq,
                t,
                rust_decimal::Decimal::ONE,
                slot(seq),
            )
        })
        .collect();
    let outcomes = ledger.append(batch.clone()).unwrap();
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Outcome::Accepted { .. })),
        "{:?}",
        outcomes
            .iter()
            .find(|o| !matches!(o, Outcome::Accepted { .. }))
    );
    // Sent again: every one a duplicate (the chunked duplicate lookup finds them all).
    let again = ledger.append(batch).unwrap();
    assert!(
        again.iter().all(|o| matches!(o, Outcome::Duplicate { .. })),
        "{again:?}"
    );
    assert_verifies(&ledger);
});

// With no webhook endpoint subscribed, events write nothing: the outbox does not grow for
// nobody (a witness cosigns every checkpoint; a revocation, an invoice, a conflict happen).
both_backends!(events_without_subscribers_write_nothing, |db: &TestDb| {
    use diesel::prelude::*;
    use gpuledger::store::schema::{webhook_deliveries, webhook_events};
    let ledger = open(db);
    let k = signer(&ledger, "node-1", Role::Node);
    ledger
        .revoke_key(
            "node-1",
            &gpuledger::core::keys::key_id(&k.verifying_key()),
            None,
        )
        .unwrap();
    let (events, deliveries): (i64, i64) = ledger
        .reads()
        .run(|c| {
            Ok((
                webhook_events::table.count().get_result(c)?,
                webhook_deliveries::table.count().get_result(c)?,
            ))
        })
        .unwrap();
    assert_eq!((events, deliveries), (0, 0));
    assert_verifies(&ledger);
});

// An account write (a transaction that reads, then writes) overtaken by another connection's
// commit between its read and its write: on SQLite that is "database is locked" at once, with
// no busy wait (WAL cannot upgrade an outdated read snapshot). The ledger runs the
// transaction again instead of answering an outage (Schemathesis once got a 503 for
// PATCH /v1/tenants/{id} this way while the demo was ingesting).
both_backends!(
    an_account_write_overtaken_by_a_commit_is_run_again,
    |db: &TestDb| {
        use diesel::prelude::*;
        use gpuledger::store::schema::meta;
        let ledger = open(db);
        parties(&ledger, &["acme"]);
        let mut attempts = 0;
        let t = ledger
            .with_account_writer(|conn| {
                attempts += 1;
                conn.transaction(|conn| {
                    let before: i64 = meta::table.count().get_result(conn)?;
                    if attempts == 1 {
                        // Another connection commits between this transaction's read and
                        // its write.
                        let mut other = gpuledger::store::connect(&db.url).unwrap();
                        diesel::insert_into(meta::table)
                            .values((meta::key.eq("overtaker"), meta::value.eq("1")))
                            .execute(&mut other)
                            .unwrap();
                    }
                    diesel::insert_into(meta::table)
                        .values((
                            meta::key.eq(format!("account-write-{before}")),
                            meta::value.eq("x"),
                        ))
                        .execute(conn)?;
                    Ok(before)
                })
            })
            .expect("the account write succeeds");
        if db.backend == "sqlite" {
            assert_eq!(
                attempts, 2,
                "SQLite refused the first attempt, the second ran"
            );
        }
        assert!(t > 0);
    }
);

// The sequencer's queue is bounded: while the head is held (another transaction, a slow
// disk), writes past MAX_QUEUED_JOBS waiting are answered `Busy` at once instead of queueing
// without bound; every write that was not refused is committed once, and the log verifies.
both_backends!(
    a_full_write_queue_answers_busy_and_loses_nothing,
    |db: &TestDb| {
        use diesel::connection::SimpleConnection;
        use gpuledger::store::ledger::MAX_QUEUED_JOBS;
        let ledger = std::sync::Arc::new(open(db));
        let k = signer(&ledger, "node-1", Role::Node);
        parties(&ledger, &["t1"]);
        let before = ledger.reads().size().unwrap();
        // Hold the log's head: the sequencer's first transaction waits for it.
        let mut blocker = gpuledger::store::connect(&db.url).unwrap();
        let hold = if db.backend == "sqlite" {
            "BEGIN IMMEDIATE; UPDATE log_head SET size = size;"
        } else {
            "BEGIN; UPDATE log_head SET size = size;"
        };
        blocker.batch_execute(hold).unwrap();
        let first = Timestamp::now().plus(-40_000);
        let n = 2 * MAX_QUEUED_JOBS as u64;
        let handles: Vec<_> = (1..=n)
            .map(|seq| {
                let (l, k) = (ledger.clone(), k.clone());
                let rec = sample::usage(
                    "node-1",
                    &k,
                    seq,
                    "t1",
                    Decimal::ONE,
                    first.plus(10 * seq as i64),
                );
                std::thread::spawn(move || l.append(vec![rec]))
            })
            .collect();
        // Wait until the queue is full (the ledger says how many records wait), then let go.
        let t = std::time::Instant::now();
        while ledger.queue_depth() < MAX_QUEUED_JOBS {
            assert!(
                t.elapsed() < std::time::Duration::from_secs(60),
                "queue depth {}",
                ledger.queue_depth()
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // The rest are answered busy at once, or join the queue as it drains.
        std::thread::sleep(std::time::Duration::from_millis(500));
        blocker.batch_execute("ROLLBACK;").unwrap();
        let (mut accepted, mut busy) = (0u64, 0u64);
        for h in handles {
            match h.join().unwrap() {
                Ok(out) => {
                    assert_accepted(&out);
                    accepted += 1;
                }
                Err(StoreError::Busy(m)) => {
                    assert!(m.contains("waiting for the log"), "{m}");
                    busy += 1;
                }
                Err(e) => panic!("neither written nor busy: {e}"),
            }
        }
        assert!(busy >= 1, "nothing was answered busy ({accepted} accepted)");
        assert_eq!(accepted + busy, n);
        assert_eq!(
            ledger.reads().size().unwrap(),
            before + accepted,
            "each accepted write once"
        );
        assert_eq!(ledger.queue_depth(), 0);
        verified(&db.url);
    }
);

// Every read outside the sequencer runs on a read-only connection: the database itself refuses
// a write made through the read door, and nothing changes.
both_backends!(the_read_door_cannot_write, |db: &TestDb| {
    use diesel::connection::SimpleConnection;
    let ledger = open(db);
    parties(&ledger, &["t1"]);
    let before = ledger.reads().head().unwrap();
    for write in [
        "UPDATE log_head SET size = size + 1",
        "DELETE FROM entries",
        "CREATE TABLE sneaky (x INTEGER)",
    ] {
        let r = ledger.reads().run(|c| Ok(c.batch_execute(write)?));
        assert!(r.is_err(), "{write} succeeded on a read connection");
    }
    // A connection opened when the pool is empty is sealed too: nested reads each take
    // another connection.
    let refused = ledger
        .reads()
        .run(|_| {
            ledger.reads().run(|_| {
                ledger.reads().run(|c| {
                    Ok(c.batch_execute("UPDATE log_head SET size = size + 1")
                        .is_err())
                })
            })
        })
        .unwrap();
    assert!(refused, "a newly opened read connection wrote");
    assert_eq!(ledger.reads().head().unwrap(), before);
    // Writes through the sequencer still work.
    parties(&ledger, &["t2"]);
    assert!(ledger.reads().size().unwrap() > before.0);
});

// The evidence of conflicting records is bounded (#27, item 6): a key that re-signs one logged
// seq many times leaves at most MAX_CONFLICTS_PER_SEQ rows (and events) for it, and a signer
// at most MAX_CONFLICTS_PER_SIGNER_HOUR rows an hour; every variant is refused all the same,
// and the event goes to the tenant of the logged entry, not the one the variant names.
both_backends!(conflict_evidence_is_bounded, |db: &TestDb| {
    use diesel::prelude::*;
    use gpuledger::store::schema::{conflicts, webhook_events};
    use gpuledger::store::{MAX_CONFLICTS_PER_SEQ, MAX_CONFLICTS_PER_SIGNER_HOUR};
    let ledger = open(db);
    let k = signer(&ledger, "node-1", Role::Node);
    parties(&ledger, &["t1", "t2"]);
    // Seqs 1..=15 logged for t1.
    let logged: Vec<_> = (1..=15u64)
        .map(|s| sample::usage("node-1", &k, s, "t1", Decimal::ONE, slot(s)))
        .collect();
    assert_accepted(&ledger.append(logged).unwrap());
    // A webhook endpoint, so that events are kept.
    {
        let mut c = gpuledger::store::connect(&db.url).unwrap();
        let endpoint = gpuledger::store::webhooks::NewEndpoint {
            url: "https://hooks.example/x".into(),
            tenant: None,
            event_types: vec![gpuledger::store::webhooks::EventType::RecordConflict],
            secret: None,
            description: "conflicts".into(),
        };
        gpuledger::store::webhooks::create_endpoint(&mut c, &endpoint, Timestamp::now()).unwrap();
    }
    // 30 variants of seq 1 (other quantities, 1.01 to 1.3 GPUs: within the node's, tenant
    // t2): all refused as conflicts.
    let variants: Vec<_> = (0..30)
        .map(|i| sample::usage("node-1", &k, 1, "t2", Decimal::new(101 + i, 2), slot(1)))
        .collect();
    let out = ledger.append(variants).unwrap();
    assert!(out
        .iter()
        .all(|o| matches!(o, Outcome::Rejected(r) if r.reason == Reason::Conflict)));
    let mut c = gpuledger::store::connect(&db.url).unwrap();
    let rows = |c: &mut gpuledger::store::DbConn| -> i64 {
        conflicts::table.count().get_result(c).unwrap()
    };
    assert_eq!(rows(&mut c), MAX_CONFLICTS_PER_SEQ);
    let events: Vec<Option<String>> = webhook_events::table
        .filter(webhook_events::event_type.eq("record.conflict"))
        .select(webhook_events::tenant)
        .load(&mut c)
        .unwrap();
    // Coalesced: one event for the (signer, seq), however many variants.
    assert_eq!(events, [Some("t1".to_owned())]);
    // 20 variants of each of seqs 2..=15: per seq at most 10, per signer an hour at most 100.
    for s in 2..=15u64 {
        let variants: Vec<_> = (0..20)
            .map(|i| sample::usage("node-1", &k, s, "t2", Decimal::new(101 + i, 2), slot(s)))
            .collect();
        let out = ledger.append(variants).unwrap();
        assert!(out.iter().all(|o| matches!(o, Outcome::Rejected(_))));
    }
    assert_eq!(rows(&mut c), MAX_CONFLICTS_PER_SIGNER_HOUR);
    // One event per seq that kept evidence: seq 1 and the nine more that filled the hour's 100.
    let events: Vec<Option<String>> = webhook_events::table
        .filter(webhook_events::event_type.eq("record.conflict"))
        .select(webhook_events::tenant)
        .load(&mut c)
        .unwrap();
    let seqs_with_evidence = MAX_CONFLICTS_PER_SIGNER_HOUR / MAX_CONFLICTS_PER_SEQ;
    assert_eq!(events.len() as i64, seqs_with_evidence, "{events:?}");
    assert!(events.iter().all(|t| t.as_deref() == Some("t1")));
    verified(&db.url);
});
