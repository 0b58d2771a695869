//! The HTTP API end to end: the real `gpuledger` binary serving on a random 127.0.0.1 port,
//! driven over real HTTP, on SQLite and PostgreSQL.
//!
//! - `every_endpoint`: each endpoint with a good request and its documented answer, checked
//!   against independent expectations (leaf hashes and Merkle roots recomputed here, proofs
//!   checked with the RFC 9162 algorithms, checkpoints verified with the published key, usage
//!   sums worked out by hand).
//! - `access_matrix`: role × endpoint → status, including cross-tenant attempts (404, never 403),
//!   with a row for every operation of the OpenAPI document (checked against it).
//! - `bad_inputs_change_nothing`: a table of bad requests, each with its status and problem type
//!   or per-record reason, and the log size unchanged after each.
//! - `sigkill_during_ingest`: SIGKILL of the server while a client streams batches; after a
//!   restart every acknowledged record is in the log exactly once and `verify-log` passes.
//! - `two_servers_one_database`: two `serve` processes on one database, agents posting to both
//!   at once, make one linear log.

mod common;

use base64::prelude::{Engine, BASE64_STANDARD};
use common::*;
use ed25519_dalek::{Signer as _, SigningKey};
use gpuledger::core::checkpoint::verify_checkpoint;
use gpuledger::core::envelope::Envelope;
use gpuledger::core::merkle::{self, check_record, check_tree, Hash};
use gpuledger::core::time::Timestamp;
use gpuledger::sample;
use rust_decimal::Decimal;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The origin the tests initialise their logs with.
const ORIGIN: &str = gpuledger::sample::ORIGIN;
/// Body and batch limits of `POST /v1/records` (docs/PROTOCOL.md, the OpenAPI document).
const MAX_BODY: usize = 8 * 1024 * 1024;
const MAX_RECORDS: usize = 10_000;

// ---------------------------------------------------------------------------------------------
// Records and hashes, computed here independently of the server
// ---------------------------------------------------------------------------------------------

/// 30 days ago at 00:00 UTC; record `seq` covers the 10 s ending at `base + 10 × seq`.
fn base() -> Timestamp {
    base_day()
}

fn end_of(seq: u64) -> Timestamp {
    base().plus(10 * seq as i64)
}

fn usage(signer: &str, key: &SigningKey, seq: u64, tenant: &str, count: &str) -> Envelope {
    sample::usage(signer, key, seq, tenant, dec(count), end_of(seq))
}

fn value(e: &Envelope) -> Value {
    serde_json::to_value(e).unwrap()
}

/// Signs an envelope given as JSON (any shape the `Envelope` type can hold) with `key`.
fn sign_value(mut v: Value, key: &SigningKey) -> Value {
    v["key_id"] = json!(key_id(key));
    v["sig"] = json!("");
    let env: Envelope = serde_json::from_value(v.clone()).unwrap();
    let sig = key.sign(&env.signed_message(gpuledger::sample::ORIGIN).unwrap());
    v["sig"] = json!(BASE64_STANDARD.encode(sig.to_bytes()));
    v
}

/// RFC 6962 leaf hash, SHA-256(0x00 ‖ leaf).
fn leaf_hash(leaf: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(leaf);
    Hash(h.finalize().into())
}

/// RFC 6962 §2.1 Merkle tree hash by direct recursion.
fn mth(leaves: &[Hash]) -> Hash {
    match leaves.len() {
        0 => Hash(Sha256::digest(b"").into()),
        1 => leaves[0],
        n => {
            let k = 1usize << (usize::BITS - (n - 1).leading_zeros() - 1);
            let mut h = Sha256::new();
            h.update([1u8]);
            h.update(mth(&leaves[..k]).0);
            h.update(mth(&leaves[k..]).0);
            Hash(h.finalize().into())
        }
    }
}

fn b64(h: &Hash) -> String {
    BASE64_STANDARD.encode(h.0)
}

fn unb64_hash(s: &Value) -> Hash {
    merkle::decode_hash(s.as_str().unwrap()).unwrap()
}

fn proof(v: &Value) -> Vec<Hash> {
    v["hashes"]
        .as_array()
        .unwrap()
        .iter()
        .map(unb64_hash)
        .collect()
}

/// The leaf hashes of `entries`, recomputed from their base64 leaf bytes.
fn leaf_hashes(entries: &[Value]) -> Vec<Hash> {
    entries
        .iter()
        .map(|e| leaf_hash(&BASE64_STANDARD.decode(e["leaf"].as_str().unwrap()).unwrap()))
        .collect()
}

/// The value of the Prometheus sample whose line starts with `name{` and holds every label.
fn metric(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .find(|l| labels.iter().all(|lab| l.contains(lab)))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

// ---------------------------------------------------------------------------------------------
// 1. Every endpoint
// ---------------------------------------------------------------------------------------------

/// Usage records of the endpoint test: (seq, tenant, gpu_count). Each covers 10 s.
const USAGE: &[(u64, &str, &str)] = &[
    (1, "tenant-a", "1"),
    (2, "tenant-a", "2"),
    (3, "tenant-b", "3"),
    (4, "tenant-a", "0.5"),
    (5, "tenant-b", "4"),
];
/// Energy records: (seq, tenant, kWh).
const ENERGY: &[(u64, Option<&str>, &str)] = &[
    (6, Some("tenant-a"), "0.1"),
    (7, Some("tenant-a"), "0.1"),
    (8, Some("tenant-a"), "0.000000001"),
    (9, None, "0.6"),
];
/// A later usage record of tenant-b, in the second hour of the day, after a gap in seq.
const LATE: (u64, &str, &str) = (400, "tenant-b", "8");

both_backends!(every_endpoint, |db: &TestDb| {
    let log = init(db);
    let srv = log.serve();
    let h = srv.http();
    let admin = Some(log.admin.as_str());

    // Operations.
    let r = h.get("/healthz", None);
    assert_eq!((r.status, r.text().as_str()), (200, "ok\n"));
    let r = h.get("/readyz", None);
    assert_eq!((r.status, r.text().as_str()), (200, "ready\n"));

    // The log's identity, from the key file init wrote.
    let log_key = gpuledger::keyfile::read(&log.key_path()).unwrap();
    let info = h.get("/v1/log", None).ok_json(200);
    assert_eq!(
        info,
        json!({
            "origin": ORIGIN,
            "public_key": public(&log_key),
            "verifier_key": gpuledger::core::checkpoint::verifier_key(ORIGIN, &log_key.verifying_key()),
            "size": 1,
        })
    );
    let verifier_key = info["verifier_key"].as_str().unwrap().to_owned();

    // Tenants.
    let now = Timestamp::now().unix();
    for (id, name) in [("tenant-b", "Tenant B"), ("tenant-a", "Tenant A")] {
        let t = h
            .post("/v1/tenants", admin, &json!({"id": id, "name": name}))
            .ok_json(201);
        assert_eq!(
            (t["id"].as_str(), t["name"].as_str()),
            (Some(id), Some(name))
        );
        let created = Timestamp::parse(t["created_at"].as_str().unwrap()).unwrap();
        assert!((created.unix() - now).abs() < 300, "created_at {created}");
    }
    h.post(
        "/v1/tenants",
        admin,
        &json!({"id": "tenant-a", "name": "again"}),
    )
    .assert_problem(409, "conflict", "duplicate tenant");
    let list = h.get("/v1/tenants", admin).ok_json(200);
    assert_eq!(
        each(&list, "/id"),
        vec![json!("tenant-a"), json!("tenant-b")],
        "by id"
    );

    // The fleet: node-1, a log entry of its own (a node key names only registered nodes, a
    // lease only registered nodes). Before it: the policy entry and the two tenants.
    let node_index = h.size();
    assert_eq!(node_index, 3);
    let node_1 = test_node("node-1").to_value();
    let n = h.post("/v1/nodes", admin, &node_1).ok_json(201);
    assert_eq!(n, json!({"index": node_index, "kind": "node_registered"}));
    h.post("/v1/nodes", admin, &node_1)
        .assert_problem(409, "conflict", "registering a node twice");
    let nodes = h.get("/v1/nodes", admin).ok_json(200);
    let mut listed = node_1.clone();
    listed["index"] = json!(node_index);
    listed["leases"] = json!([]);
    assert_eq!(nodes, json!({"nodes": [listed]}));

    // The tenants' sample leases (8 sample-model GPUs of node-1 each): node-1 lists them,
    // each whole with its index.
    h.parties(&log.admin, &["tenant-a", "tenant-b"]);
    let leases: Vec<Value> = ["tenant-a", "tenant-b"]
        .iter()
        .zip([node_index + 1, node_index + 2])
        .map(|(t, index)| {
            let mut l = sample::lease_on(&sample::lease(t), t, &["node-1"], 8).to_value();
            l["index"] = json!(index);
            l
        })
        .collect();
    listed["leases"] = json!(leases);
    let nodes = h.get("/v1/nodes", admin).ok_json(200);
    assert_eq!(nodes, json!({"nodes": [listed]}));
    assert_eq!(
        nodes["nodes"][0]["leases"][0]["nodes"],
        json!([{"node": "node-1", "gpu_model": sample::MODEL, "count": "8"}])
    );

    // Signers: a node and a market signer; each registration is a log entry.
    let first = h.size();
    assert_eq!(first, node_index + 3);
    let k1 = sample::key("api-node-1");
    let reg = h.register(&log.admin, "node-1", "node", &k1);
    assert_eq!(
        reg,
        json!({"signer": "node-1", "role": "node", "key_id": key_id(&k1),
               "public_key": public(&k1), "nodes": ["node-1"], "regions": [sample::REGION],
               "registered_index": first})
    );
    let km = sample::key("api-market-1");
    let reg_m = h.register(&log.admin, "market-1", "market", &km);
    assert_eq!(reg_m["registered_index"], json!(first + 1));
    assert_eq!(h.size(), first + 2);

    // Records: usage, energy (one without tenant), a spot price; all accepted in order.
    let mut posted: HashMap<u64, Value> = HashMap::new();
    let mut batch: Vec<Envelope> = USAGE
        .iter()
        .map(|&(seq, t, c)| usage("node-1", &k1, seq, t, c))
        .collect();
    batch.extend(
        ENERGY
            .iter()
            .map(|&(seq, t, kwh)| sample::energy("node-1", &k1, seq, t, dec(kwh), end_of(seq))),
    );
    batch.push(sample::spot(
        "market-1",
        &km,
        1,
        dec("21.5"),
        Timestamp::now(),
    ));
    // `application/json` with parameters is JSON too.
    let r = h.post_bytes(
        "/v1/records",
        Some("application/json; charset=utf-8"),
        &serde_json::to_vec(&batch).unwrap(),
    );
    let ans = r.ok_json(200);
    assert_eq!(
        (&ans["accepted"], &ans["duplicates"], &ans["rejected"]),
        (&json!(batch.len()), &json!(0), &json!(0))
    );
    for (i, (o, e)) in ans["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .zip(&batch)
        .enumerate()
    {
        let index = first + 2 + i as u64;
        assert_eq!(o, &json!({"status": "accepted", "index": index}));
        posted.insert(index, value(e));
    }
    // A gap in seq is accepted and reported.
    let late = usage("node-1", &k1, LATE.0, LATE.1, LATE.2);
    let ans = h.post_records(std::slice::from_ref(&late));
    let late_index = first + 2 + batch.len() as u64;
    assert_eq!(
        ans["outcomes"],
        json!([{"status": "accepted", "index": late_index,
                "seq_gap": {"from": ENERGY.last().unwrap().0 + 1, "to": LATE.0 - 1}}])
    );
    posted.insert(late_index, value(&late));

    // Rotation: a second key for node-1, then revocation of the first.
    let k2 = sample::key("api-node-1-rotated");
    let size = h.size();
    let added = h
        .post(
            "/v1/signers/node-1/keys",
            admin,
            &json!({"public_key": public(&k2)}),
        )
        .ok_json(201);
    assert_eq!(
        added,
        json!({"signer": "node-1", "role": "node", "key_id": key_id(&k2),
               "public_key": public(&k2), "nodes": ["node-1"], "regions": [sample::REGION],
               "registered_index": size})
    );
    h.post(
        "/v1/signers/node-404/keys",
        admin,
        &json!({"public_key": public(&sample::key("x"))}),
    )
    .assert_problem(404, "not_found", "key for an unknown signer");
    let rotated = usage("node-1", &k2, 401, "tenant-a", "1");
    let ans = h.post_records(std::slice::from_ref(&rotated));
    assert_eq!(
        ans["outcomes"],
        json!([{"status": "accepted", "index": size + 1}])
    );
    posted.insert(size + 1, value(&rotated));
    let revoked = h
        .post(
            &format!("/v1/signers/node-1/keys/{}/revoke", key_id(&k1)),
            admin,
            &json!({"reason": "rotated"}),
        )
        .ok_json(200);
    assert_eq!(
        revoked,
        json!({"signer": "node-1", "role": "node", "key_id": key_id(&k1),
               "public_key": public(&k1), "nodes": ["node-1"], "regions": [sample::REGION],
               "registered_index": first, "revoked_index": size + 2})
    );
    h.post(
        &format!("/v1/signers/node-1/keys/{}/revoke", key_id(&k1)),
        admin,
        &json!({}),
    )
    .assert_problem(409, "conflict", "revoking twice");
    let size = h.size();
    let stale = usage("node-1", &k1, 402, "tenant-a", "1");
    let ans = h.post_records(&[stale]);
    assert_eq!(ans["rejected"], json!(1));
    assert_eq!(ans["outcomes"][0]["status"], json!("rejected"));
    assert_eq!(ans["outcomes"][0]["reason"], json!("revoked_key"));
    assert_eq!(h.size(), size, "a refused record is not logged");
    let signers = h.get("/v1/signers", admin).ok_json(200);
    let mut signers = signers.as_array().unwrap().clone();
    signers.sort_by_key(|k| k["registered_index"].as_u64());
    assert_eq!(
        signers
            .iter()
            .map(|k| (k["key_id"].clone(), k.get("revoked_index").cloned()))
            .collect::<Vec<_>>(),
        vec![
            (json!(key_id(&k1)), Some(json!(size - 1))),
            (json!(key_id(&km)), None),
            (json!(key_id(&k2)), None),
        ]
    );

    // Entries one by one: leaf bytes rehash to leaf_hash; the parsed entry is the leaf; the
    // chain links each entry to the one before; posted envelopes come back unchanged.
    let mut entries = Vec::new();
    let mut prev = Hash([0; 32]);
    for i in 0..size {
        let e = h.get(&format!("/v1/entries/{i}"), admin).ok_json(200);
        let leaf = BASE64_STANDARD.decode(e["leaf"].as_str().unwrap()).unwrap();
        assert_eq!(e["index"], json!(i));
        assert_eq!(e["leaf_hash"], json!(b64(&leaf_hash(&leaf))), "entry {i}");
        let parsed: Value = serde_json::from_slice(&leaf).unwrap();
        assert_eq!(e["entry"], parsed, "entry {i}");
        assert_eq!(parsed["index"], json!(i));
        assert_eq!(parsed["prev"], json!(b64(&prev)), "hash chain at {i}");
        let received = Timestamp::parse(parsed["received_at"].as_str().unwrap()).unwrap();
        assert!((received.unix() - now).abs() < 600);
        if let Some(p) = posted.get(&i) {
            assert_eq!(&parsed["envelope"], p, "entry {i} holds what was posted");
        }
        prev = leaf_hash(&leaf);
        entries.push(e);
    }
    // The ledger's own entries: the node, the registrations and the revocation, signed by
    // "ledger".
    let env = &entries[node_index as usize]["entry"]["envelope"];
    assert_eq!(
        (&env["kind"], &env["signer"], &env["body"]),
        (&json!("node_registered"), &json!("ledger"), &node_1)
    );
    for (i, kind, kid) in [
        (first, "signer_key_registered", key_id(&k1)),
        (first + 1, "signer_key_registered", key_id(&km)),
        (size - 1, "signer_key_revoked", key_id(&k1)),
    ] {
        let env = &entries[i as usize]["entry"]["envelope"];
        assert_eq!(
            (&env["kind"], &env["signer"]),
            (&json!(kind), &json!("ledger"))
        );
        assert_eq!(env["body"]["key_id"], json!(kid));
    }
    let e404 = h.get(&format!("/v1/entries/{size}"), admin);
    e404.assert_problem(404, "not_found", "entry past the end");

    // Pages: the same entries.
    let page = h
        .get(&format!("/v1/entries?start=0&end={size}"), admin)
        .ok_json(200);
    assert_eq!(page, json!({"start": 0, "end": size, "entries": entries}));
    let page = h.get("/v1/entries?start=3&end=5", admin).ok_json(200);
    assert_eq!(page["entries"], json!(entries[3..5]));
    let page = h.get("/v1/entries", admin).ok_json(200);
    assert_eq!((&page["start"], &page["end"]), (&json!(0), &json!(1000)));
    assert_eq!(page["entries"], json!(entries));
    let page = h.get("/v1/entries?start=0&end=1000", admin).ok_json(200);
    assert_eq!(
        page["entries"].as_array().unwrap().len() as u64,
        size,
        "1000 is the edge"
    );

    // Checkpoint: verifies with the published verifier key, root = our own MTH.
    let leaves = leaf_hashes(&entries);
    let note = h.checkpoint_at(size, &verifier_key);
    let cp = verify_checkpoint(note.as_bytes(), &verifier_key).unwrap();
    assert_eq!((cp.origin(), cp.size()), (ORIGIN, size));
    assert_eq!(*cp.hash(), mth(&leaves));
    let other =
        gpuledger::core::checkpoint::verifier_key(ORIGIN, &sample::key("x").verifying_key());
    assert!(
        verify_checkpoint(note.as_bytes(), &other).is_err(),
        "another key does not verify it"
    );

    // Inclusion proofs, for every entry in the full tree and in a smaller one.
    let root = mth(&leaves);
    for i in 0..size {
        let p = h
            .get(
                &format!("/v1/proofs/inclusion?index={i}&size={size}"),
                admin,
            )
            .ok_json(200);
        assert_eq!(p["root"], json!(b64(&root)));
        let hashes = proof(&p);
        check_record(&hashes, size, root, i, leaves[i as usize])
            .unwrap_or_else(|e| panic!("inclusion of {i}: {e}"));
        let wrong = leaves[((i + 1) % size) as usize];
        assert!(check_record(&hashes, size, root, i, wrong).is_err());
        let m = i + 1 + (size - i - 1) / 2;
        let p = h
            .get(&format!("/v1/proofs/inclusion?index={i}&size={m}"), admin)
            .ok_json(200);
        let root_m = mth(&leaves[..m as usize]);
        assert_eq!(p["root"], json!(b64(&root_m)));
        check_record(&proof(&p), m, root_m, i, leaves[i as usize]).unwrap();
    }
    // Without size: the latest checkpoint's tree, which now covers everything.
    let p = h.get("/v1/proofs/inclusion?index=3", admin).ok_json(200);
    assert_eq!(p["root"], json!(b64(&root)));
    check_record(&proof(&p), size, root, 3, leaves[3]).unwrap();

    // Consistency proofs from every smaller size.
    for m in 1..=size {
        let p = h
            .get(&format!("/v1/proofs/consistency?from={m}&to={size}"), admin)
            .ok_json(200);
        assert_eq!(p["root"], json!(b64(&root)));
        let root_m = mth(&leaves[..m as usize]);
        check_tree(&proof(&p), size, root, m, root_m)
            .unwrap_or_else(|e| panic!("consistency {m} → {size}: {e}"));
        if m < size {
            let bogus = mth(&leaves[1..m as usize + 1]);
            assert!(check_tree(&proof(&p), size, root, m, bogus).is_err());
        }
    }

    // Usage: exact decimal strings, worked out by hand from USAGE, ENERGY and LATE (each
    // record is gpu_count × 10 s), plus the rotated-key record (tenant-a, 1 GPU, seq 401).
    let day = base();
    let period = format!("from={day}&to={}", day.plus(86_400));
    let u = h
        .get(&format!("/v1/usage?tenant=tenant-a&{period}"), admin)
        .ok_json(200);
    assert_eq!(
        u,
        json!({"tenant": "tenant-a", "from": day.to_string(), "to": day.plus(86_400).to_string(),
               "group_by": [], "rows": [{"gpu_seconds": "45", "kwh": "0.200000001",
               "usage_records": 4, "energy_records": 3}]})
    );
    let u = h
        .get(
            &format!("/v1/usage?tenant=tenant-b&{period}&window=hour&group_by=node,region"),
            admin,
        )
        .ok_json(200);
    assert_eq!(u["group_by"], json!(["node", "region"]));
    assert_eq!(u["window"], json!("hour"));
    assert_eq!(
        u["rows"],
        json!([
            {"window_start": day.to_string(), "region": "cn-north-imx", "node": "node-1",
             "gpu_seconds": "70", "kwh": "0", "usage_records": 2, "energy_records": 0},
            {"window_start": day.plus(3600).to_string(), "region": "cn-north-imx", "node": "node-1",
             "gpu_seconds": "80", "kwh": "0", "usage_records": 1, "energy_records": 0},
        ])
    );
    // All tenants (and the energy of no tenant), by day.
    let u = h
        .get(&format!("/v1/usage?{period}&window=day"), admin)
        .ok_json(200);
    assert!(u.get("tenant").is_none());
    assert_eq!(
        u["rows"],
        json!([{"window_start": day.to_string(), "gpu_seconds": "195", "kwh": "0.800000001",
                "usage_records": 7, "energy_records": 4}])
    );
    // The same sums from the records' own bodies, as a cross-check of the hand-worked figures.
    let gpu: Decimal = USAGE
        .iter()
        .map(|u| dec(u.2))
        .chain([dec(LATE.2), Decimal::ONE])
        .sum::<Decimal>()
        * Decimal::from(10);
    let kwh: Decimal = ENERGY.iter().map(|e| dec(e.2)).sum();
    assert_eq!((gpu, kwh), (dec("195"), dec("0.800000001")));
    // The period is [from, to): a day later holds nothing.
    let u = h
        .get(
            &format!(
                "/v1/usage?from={}&to={}",
                day.plus(86_400),
                day.plus(2 * 86_400)
            ),
            admin,
        )
        .ok_json(200);
    assert_eq!(u["rows"], json!([]));

    // Tokens: create (secret shown once), list (never secrets), use, revoke, refused after.
    let created = h.token(
        &log.admin,
        json!({"role": "auditor", "label": "audit 2026"}),
    );
    let secret = created["token"].as_str().unwrap().to_owned();
    let tid = created["info"]["id"].as_str().unwrap().to_owned();
    assert!(secret.starts_with(&format!("glt_{tid}_")), "{secret}");
    assert_eq!(
        (&created["info"]["role"], &created["info"]["label"]),
        (&json!("auditor"), &json!("audit 2026"))
    );
    assert!(Timestamp::parse(created["info"]["created_at"].as_str().unwrap()).is_ok());
    let tt = h.token(&log.admin, json!({"role": "tenant", "tenant": "tenant-a"}));
    assert_eq!(tt["info"]["tenant"], json!("tenant-a"));
    let listed = h.get("/v1/tokens", admin);
    let text = listed.text();
    assert!(
        !text.contains(&secret) && !text.contains(&log.admin),
        "no secrets listed"
    );
    let listed = listed.ok_json(200);
    let mut roles = each_str(&listed, "/role");
    roles.sort(); // oldest first, but tokens made in one second may come in any order
    assert_eq!(roles, ["admin", "auditor", "tenant"]);
    assert!(items(&listed).iter().all(|t| t.get("token").is_none()));
    h.get("/v1/tenants", Some(&secret)).ok_json(200);
    let r = h.delete(&format!("/v1/tokens/{tid}"), admin);
    assert_eq!((r.status, r.body.len()), (204, 0));
    h.get("/v1/tenants", Some(&secret))
        .assert_problem(401, "token_revoked", "revoked token");
    h.delete(&format!("/v1/tokens/{tid}"), admin)
        .assert_problem(404, "not_found", "revoking twice");
    let listed = h.get("/v1/tokens", admin).ok_json(200);
    let mine = items(&listed)
        .iter()
        .find(|t| t["id"] == json!(tid))
        .unwrap();
    assert!(Timestamp::parse(mine["revoked_at"].as_str().unwrap()).is_ok());

    // Metrics: requests by route and status, records by outcome, the log size.
    let m = h.get("/metrics", None);
    assert_eq!(m.status, 200);
    let m = m.text();
    assert!(
        metric(
            &m,
            "gpuledger_http_requests_total",
            &["route=\"/v1/records\"", "status=\"200\""]
        )
        .is_some_and(|n| n >= 4.0),
        "{m}"
    );
    let accepted = batch.len() + 2;
    assert_eq!(
        metric(&m, "gpuledger_records_total", &["outcome=\"accepted\""]),
        Some(accepted as f64),
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "gpuledger_records_total",
            &["outcome=\"rejected\"", "reason=\"revoked_key\""]
        ),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        metric(&m, "gpuledger_log_size", &[]),
        Some(size as f64),
        "{m}"
    );

    // The served OpenAPI document is the generated one (which tests/openapi.rs checks against
    // schemas/openapi.json and for every path); the docs page needs nothing from elsewhere.
    let doc = h.get("/openapi.json", None).ok_json(200);
    let generated: Value = serde_json::from_str(&gpuledger::api::openapi_json()).unwrap();
    assert!(
        doc == generated,
        "GET /openapi.json is not the generated document"
    );
    let docs = h.get("/docs", None);
    assert_eq!(docs.status, 200);
    assert!(docs.content_type.starts_with("text/html"));
    let html = docs.text();
    assert!(html.contains("/openapi.json"));
    for external in [
        "src=\"http",
        "href=\"http",
        "src=\"//",
        "@import",
        "url(http",
    ] {
        assert!(!html.contains(external), "docs page loads {external}…");
    }

    drop(srv);
    log.assert_verifies(size);
});

// ---------------------------------------------------------------------------------------------
// 2. Roles × endpoints
// ---------------------------------------------------------------------------------------------

/// A caller: a column of the access matrix.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Who {
    Admin,
    Auditor,
    TenantA,
    TenantB,
    Nobody,
    Revoked,
}

/// The columns of the matrix, in the order of each row's statuses.
const WHO: [Who; 6] = [
    Who::Admin,
    Who::Auditor,
    Who::TenantA,
    Who::TenantB,
    Who::Nobody,
    Who::Revoked,
];

/// A row of the access matrix: one request, and the status each caller gets for it.
struct Access {
    what: &'static str,
    method: &'static str,
    /// The path; `{name}` stands for a value known once the test's log is written (see
    /// [`fill`]).
    path: &'static str,
    /// A POST's body as the caller named (in lower case) sends it: each write row's body names
    /// the caller, so that no two callers create the same thing.
    body: Option<fn(&str) -> Value>,
    /// The status per caller, in the order of [`WHO`]; a 401, 403 or 404 must also be a problem
    /// of its own type.
    want: [u16; 6],
}

const fn get(what: &'static str, path: &'static str, want: [u16; 6]) -> Access {
    Access {
        what,
        method: "GET",
        path,
        body: None,
        want,
    }
}

const fn post(
    what: &'static str,
    path: &'static str,
    body: fn(&str) -> Value,
    want: [u16; 6],
) -> Access {
    Access {
        what,
        method: "POST",
        path,
        body: Some(body),
        want,
    }
}

/// A HEAD row: the status only (a HEAD answer has no body to hold a problem).
const fn head(what: &'static str, path: &'static str, want: [u16; 6]) -> Access {
    Access {
        what,
        method: "HEAD",
        path,
        body: None,
        want,
    }
}

const fn delete(what: &'static str, path: &'static str, want: [u16; 6]) -> Access {
    Access {
        what,
        method: "DELETE",
        path,
        body: None,
        want,
    }
}

/// The matrix. The placeholders: `ia`, `ib` (a usage record of tenant A, of tenant B), `ie`
/// (energy of no tenant), `size` (the log before the matrix runs), `period` (`from=…&to=…`,
/// the day of the records), `inv_a`, `inv_b`, `cert_a`, `cert_b` (each tenant's invoice and
/// certificate), `cn_a` (a credit note of A's invoice), `disposable_key` (a key id of node-1)
/// and `disposable_token` (a token id).
#[rustfmt::skip]
static ACCESS: &[Access] = &[
    // Columns: admin, auditor, tenant A, tenant B, no token, revoked token.
    //                                                                                             adm  aud  A    B    none rvkd
    get("log",                           "/v1/log",                                               [200, 200, 200, 200, 200, 200]),
    get("checkpoint",                    "/v1/checkpoint",                                        [200, 200, 200, 200, 200, 200]),
    post("records (signed, no token)",   "/v1/records", |_| json!([]),                            [200, 200, 200, 200, 200, 200]),
    get("A's entry",                     "/v1/entries/{ia}",                                      [200, 200, 200, 404, 401, 401]),
    get("B's entry",                     "/v1/entries/{ib}",                                      [200, 200, 404, 200, 401, 401]),
    get("a key registration entry",      "/v1/entries/0",                                         [200, 200, 404, 404, 401, 401]),
    get("energy of no tenant",           "/v1/entries/{ie}",                                      [200, 200, 404, 404, 401, 401]),
    get("entry past the end",            "/v1/entries/999999",                                    [404, 404, 404, 404, 401, 401]),
    get("entries page",                  "/v1/entries?start=0&end={size}",                        [200, 200, 200, 200, 401, 401]),
    get("inclusion of A's entry",        "/v1/proofs/inclusion?index={ia}&size={size}",           [200, 200, 200, 404, 401, 401]),
    get("inclusion of B's entry",        "/v1/proofs/inclusion?index={ib}&size={size}",           [200, 200, 404, 200, 401, 401]),
    get("inclusion of a ledger entry",   "/v1/proofs/inclusion?index=0&size={size}",              [200, 200, 404, 404, 401, 401]),
    get("consistency",                   "/v1/proofs/consistency?from=1&to={size}",               [200, 200, 200, 200, 200, 200]),
    get("usage (own, or all)",           "/v1/usage?{period}",                                    [200, 200, 200, 200, 401, 401]),
    get("A's usage",                     "/v1/usage?tenant=tenant-a&{period}",                    [200, 200, 200, 404, 401, 401]),
    get("B's usage",                     "/v1/usage?tenant=tenant-b&{period}",                    [200, 200, 404, 200, 401, 401]),
    get("unknown tenant's usage",        "/v1/usage?tenant=tenant-z&{period}",                    [404, 404, 404, 404, 401, 401]),
    post("create tenant",                "/v1/tenants", |w| json!({"id": format!("new-{w}"), "name": "n"}), [201, 403, 403, 403, 401, 401]),
    get("list tenants",                  "/v1/tenants",                                           [200, 200, 403, 403, 401, 401]),
    Access { what: "change tenant", method: "PATCH", path: "/v1/tenants/tenant-a", body: Some(|w| json!({"address": [format!("{w} street")]})), want: [200, 403, 403, 403, 401, 401] },
    // The fleet: admins register nodes (the admin's is the node its key names in the next
    // row); admins and auditors list them.
    post("register node",                "/v1/nodes", |w| test_node(&format!("node-{w}")).to_value(), [201, 403, 403, 403, 401, 401]),
    get("list nodes",                    "/v1/nodes",                                             [200, 200, 403, 403, 401, 401]),
    // Admins update nodes: here a replaced board of node-1 (a new UUID each time).
    post("update node",                  "/v1/node-updates", |w| json!({"node": "node-1", "gpus": [{"index": 0, "uuid": format!("GPU-replaced-{w}"), "model": test_node_model(0)}]}), [201, 403, 403, 403, 401, 401]),
    post("register signer",              "/v1/signers", |w| json!({"id": format!("node-{w}"), "role": "node", "public_key": public(&sample::key(w)), "nodes": [format!("node-{w}")], "regions": ["west"]}), [201, 403, 403, 403, 401, 401]),
    get("list signers",                  "/v1/signers",                                           [200, 200, 403, 403, 401, 401]),
    post("add key",                      "/v1/signers/node-1/keys", |w| json!({"public_key": public(&sample::key(&format!("extra-{w}")))}), [201, 403, 403, 403, 401, 401]),
    post("revoke key",                   "/v1/signers/node-1/keys/{disposable_key}/revoke", |_| json!({}), [200, 403, 403, 403, 401, 401]),
    post("create token",                 "/v1/tokens", |w| json!({"role": "auditor", "label": w}), [201, 403, 403, 403, 401, 401]),
    // Token metadata is administration, not ledger data: admins only.
    get("list tokens",                   "/v1/tokens",                                            [200, 403, 403, 403, 401, 401]),
    delete("revoke token",               "/v1/tokens/{disposable_token}",                         [204, 403, 403, 403, 401, 401]),
    get("checkpoints",                   "/v1/checkpoints",                                       [200, 200, 200, 200, 200, 200]),
    // The witnesses' state is operations, not ledger data: admins and auditors.
    get("witnesses",                     "/v1/witnesses",                                         [200, 200, 403, 403, 401, 401]),
    // Prices: admins write them; every caller with a token reads them.
    post("rate card",                    "/v1/rate-cards", |w| json!({"region": "cn-north-imx", "gpu_model": format!("gpu-{w}"), "lease_class": "on_demand", "currency": "CNY", "price_per_gpu_hour": "1", "effective_from": announced().to_string()}), [201, 403, 403, 403, 401, 401]),
    post("region parameters",            "/v1/region-params", |w| json!({"region": format!("region-{w}"), "currency": "CNY", "electricity_price_per_kwh": "0.5", "pue": "1.1", "carbon_g_per_kwh": "400", "effective_from": announced().to_string()}), [201, 403, 403, 403, 401, 401]),
    post("lease",                        "/v1/leases", |w| json!({"lease": format!("lease-{w}"), "tenant": "tenant-a", "class": "reserved", "from": announced().to_string(), "nodes": [{"node": "node-1", "gpu_model": sample::MODEL, "count": "8"}]}), [201, 403, 403, 403, 401, 401]),
    post("volume tiers",                 "/v1/volume-tiers", |w| json!({"plan": format!("plan-{w}"), "region": "cn-north-imx", "gpu_model": "H100-SXM-80G", "lease_class": "reserved", "currency": "CNY", "effective_from": announced().to_string(), "tiers": [{"up_to_gpu_hours": "1", "price_per_gpu_hour": "2"}, {"price_per_gpu_hour": "1"}]}), [201, 403, 403, 403, 401, 401]),
    post("tenant plan",                  "/v1/tenant-plans", |_| json!({"tenant": "new-admin", "plan": "plan-admin", "effective_from": announced().to_string()}), [201, 403, 403, 403, 401, 401]),
    get("prices",                        "/v1/prices",                                            [200, 200, 200, 200, 401, 401]),
    get("A's preview",                   "/v1/invoices/preview?tenant=tenant-a&{period}",         [200, 200, 200, 404, 401, 401]),
    get("own preview (admins name one)", "/v1/invoices/preview?{period}",                         [400, 400, 200, 200, 401, 401]),
    // Contracts: admins register them (for the tenant the admin created above); tenants read
    // their own, 404 for others'.
    post("contract",                     "/v1/contracts", |w| json!({"tenant": format!("new-{w}"), "contract": format!("C-{w}"), "currency": "CNY", "region": "west", "term_from": announced().to_string(), "term_to": announced().plus(86_400 * 365).to_string(), "billing_period": "month", "billing_anchor": "calendar", "commitment": "100"}), [201, 403, 403, 403, 401, 401]),
    post("contract amendment",           "/v1/contract-amendments", |w| json!({"tenant": format!("new-{w}"), "contract": format!("C-{w}"), "term_to": announced().plus(86_400 * 200).to_string(), "reason": "Ended early"}), [201, 403, 403, 403, 401, 401]),
    get("contracts (own, or all)",       "/v1/contracts",                                         [200, 200, 200, 200, 401, 401]),
    get("A's contracts",                 "/v1/contracts?tenant=tenant-a",                         [200, 200, 200, 404, 401, 401]),
    // Prepaid lots: admins record them (tenant A's, one reference per caller); tenants read
    // their own, 404 for others'.
    post("prepayment",                   "/v1/prepayments", |w| json!({"tenant": "tenant-a", "reference": format!("TOPUP-{w}"), "source": "purchase", "currency": "CNY", "amount": "1.00"}), [201, 403, 403, 403, 401, 401]),
    get("prepayments (own, or all)",     "/v1/prepayments",                                       [200, 200, 200, 200, 401, 401]),
    get("A's prepayments",               "/v1/prepayments?tenant=tenant-a",                       [200, 200, 200, 404, 401, 401]),
    Access { what: "set A's alerts", method: "PUT", path: "/v1/tenants/tenant-a/alerts", body: Some(|_| json!({"low_balance": {"CNY": "10.00"}})), want: [200, 403, 403, 403, 401, 401] },
    get("A's alerts",                    "/v1/tenants/tenant-a/alerts",                           [200, 200, 200, 404, 401, 401]),
    // Disputes: admins exclude a record (B's first, before B's invoice rates it).
    post("exclusion",                    "/v1/exclusions", |w| json!({"tenant": "tenant-b", "entry": MATRIX_IB, "reason": w}), [201, 403, 403, 403, 401, 401]),
    // Invoices: admins issue and settle; tenants read their own, 404 for others'.
    post("issue invoice",                "/v1/invoices", |_| json!({"tenant": "tenant-b", "from": base().to_string(), "to": base().plus(86_400).to_string()}), [201, 403, 403, 403, 401, 401]),
    get("invoices (own, or all)",        "/v1/invoices",                                          [200, 200, 200, 200, 401, 401]),
    get("A's invoices",                  "/v1/invoices?tenant=tenant-a",                          [200, 200, 200, 404, 401, 401]),
    get("A's invoice",                   "/v1/invoices/{inv_a}",                                  [200, 200, 200, 404, 401, 401]),
    get("B's invoice",                   "/v1/invoices/{inv_b}",                                  [200, 200, 404, 200, 401, 401]),
    get("unknown invoice",               "/v1/invoices/INV-999999",                               [404, 404, 404, 404, 401, 401]),
    get("A's invoice as JSON",           "/v1/invoices/{inv_a}/json",                             [200, 200, 200, 404, 401, 401]),
    get("A's invoice as CSV",            "/v1/invoices/{inv_a}/csv",                              [200, 200, 200, 404, 401, 401]),
    get("A's invoice as PDF",            "/v1/invoices/{inv_a}/pdf",                              [200, 200, 200, 404, 401, 401]),
    get("A's invoice account",           "/v1/invoices/{inv_a}/account",                          [200, 200, 200, 404, 401, 401]),
    get("B's invoice account",           "/v1/invoices/{inv_b}/account",                          [200, 200, 404, 200, 401, 401]),
    get("unknown invoice's account",     "/v1/invoices/INV-999999/account",                       [404, 404, 404, 404, 401, 401]),
    get("A's invoice bundle",            "/v1/invoices/{inv_a}/bundle",                           [200, 200, 200, 404, 401, 401]),
    get("B's invoice bundle",            "/v1/invoices/{inv_b}/bundle",                           [200, 200, 404, 200, 401, 401]),
    // The format is checked before the invoice is looked up: the same 400 for any number.
    get("an invoice in no format",       "/v1/invoices/{inv_a}/xml",                              [400, 400, 400, 400, 401, 401]),
    post("payment",                      "/v1/payments", |w| json!({"tenant": "tenant-a", "invoice": "INV-000001", "currency": "CNY", "amount": "0.01", "note": w}), [201, 403, 403, 403, 401, 401]),
    post("credit note",                  "/v1/credit-notes", |w| json!({"tenant": "tenant-a", "invoice": "INV-000001", "currency": "CNY", "amount": "0.01", "note": w}), [201, 403, 403, 403, 401, 401]),
    get("A's credit note",               "/v1/credit-notes/{cn_a}",                               [200, 200, 200, 404, 401, 401]),
    get("A's credit note as PDF",        "/v1/credit-notes/{cn_a}/pdf",                           [200, 200, 200, 404, 401, 401]),
    get("unknown credit note",           "/v1/credit-notes/CN-999999",                            [404, 404, 404, 404, 401, 401]),
    get("a usage record as credit note", "/v1/credit-notes/CN-{ia}",                              [404, 404, 404, 404, 401, 401]),
    // The number is checked before anything is looked up: the same 400 for anyone.
    get("malformed credit note number",  "/v1/credit-notes/CN-01",                                [400, 400, 400, 400, 401, 401]),
    get("A's balance",                   "/v1/balance?tenant=tenant-a",                           [200, 200, 200, 404, 401, 401]),
    get("own balance (admins name one)", "/v1/balance",                                           [400, 400, 200, 200, 401, 401]),
    get("FOCUS export (own, or all)",    "/v1/exports/focus?{period}",                            [200, 200, 200, 200, 401, 401]),
    get("A's FOCUS export",              "/v1/exports/focus?tenant=tenant-a&{period}",            [200, 200, 200, 404, 401, 401]),
    get("unknown tenant's FOCUS export", "/v1/exports/focus?tenant=tenant-z&{period}",            [404, 404, 404, 404, 401, 401]),
    // Certificates: a tenant for itself, an admin for anyone; auditors read, not issue.
    post("certificate for A",            "/v1/certificates", |_| json!({"tenant": "tenant-a", "from": base().to_string(), "to": base().plus(86_400).to_string()}), [201, 403, 201, 404, 401, 401]),
    post("own certificate (admins name one)", "/v1/certificates", |_| json!({"from": base().to_string(), "to": base().plus(86_400).to_string()}), [400, 403, 201, 201, 401, 401]),
    get("certificates (own, or all)",    "/v1/certificates",                                      [200, 200, 200, 200, 401, 401]),
    get("A's certificates",              "/v1/certificates?tenant=tenant-a",                      [200, 200, 200, 404, 401, 401]),
    get("A's certificate",               "/v1/certificates/{cert_a}",                             [200, 200, 200, 404, 401, 401]),
    get("B's certificate",               "/v1/certificates/{cert_b}",                             [200, 200, 404, 200, 401, 401]),
    get("unknown certificate",           "/v1/certificates/CERT-999999",                          [404, 404, 404, 404, 401, 401]),
    get("A's certificate bundle",        "/v1/certificates/{cert_a}/bundle",                      [200, 200, 200, 404, 401, 401]),
    get("B's certificate bundle",        "/v1/certificates/{cert_b}/bundle",                      [200, 200, 404, 200, 401, 401]),
    get("healthz",                       "/healthz",                                              [200, 200, 200, 200, 200, 200]),
    get("readyz",                        "/readyz",                                               [200, 200, 200, 200, 200, 200]),
    get("metrics",                       "/metrics",                                              [200, 200, 200, 200, 200, 200]),
    get("openapi",                       "/openapi.json",                                         [200, 200, 200, 200, 200, 200]),
    get("docs",                          "/docs",                                                 [200, 200, 200, 200, 200, 200]),
    get("docs: a file of the page",      "/docs/swagger-ui-bundle.js",                            [200, 200, 200, 200, 200, 200]),
    // C2SP tiles: the checkpoint and hash tiles are public; entry bundles (tenants' leaves)
    // are for admins and auditors.
    get("tiles: checkpoint",             "/checkpoint",                                           [200, 200, 200, 200, 200, 200]),
    get("tiles: partial hash tile",      "/tile/0/000.p/1",                                       [200, 200, 200, 200, 200, 200]),
    get("tiles: hash tile past the end", "/tile/0/999",                                           [404, 404, 404, 404, 404, 404]),
    get("tiles: partial entry bundle",   "/tile/entries/000.p/1",                                 [200, 200, 403, 403, 401, 401]),
    get("tiles: bundle past the end",    "/tile/entries/999",                                     [404, 404, 403, 403, 401, 401]),
    head("HEAD checkpoint",              "/v1/checkpoint",                                        [200, 200, 200, 200, 200, 200]),
    head("HEAD tiles: checkpoint",       "/checkpoint",                                           [200, 200, 200, 200, 200, 200]),
    head("HEAD tiles: hash tile",        "/tile/0/000.p/1",                                       [200, 200, 200, 200, 200, 200]),
    head("HEAD tiles: tile past the end","/tile/0/999",                                           [404, 404, 404, 404, 404, 404]),
    head("HEAD tiles: entry bundle",     "/tile/entries/000.p/1",                                 [200, 200, 403, 403, 401, 401]),
    head("HEAD tiles: bundle past end",  "/tile/entries/999",                                     [404, 404, 403, 403, 401, 401]),
    // Webhooks: admin only; the public key is public.
    get("webhooks: event types",         "/v1/webhooks/event-types",                              [200, 403, 403, 403, 401, 401]),
    get("webhooks: public key",          "/v1/webhooks/public-key",                               [200, 200, 200, 200, 200, 200]),
    post("webhooks: new endpoint",       "/v1/webhooks/endpoints", |_| json!({"url": "http://93.184.215.14/hook", "event_types": ["invoice.issued"]}), [201, 403, 403, 403, 401, 401]),
    get("webhooks: endpoints",           "/v1/webhooks/endpoints",                                [200, 403, 403, 403, 401, 401]),
    get("webhooks: unknown endpoint",    "/v1/webhooks/endpoints/ep_none",                        [404, 403, 403, 403, 401, 401]),
    Access { what: "webhooks: change endpoint", method: "PATCH", path: "/v1/webhooks/endpoints/ep_none", body: Some(|_| json!({"enabled": false})), want: [404, 403, 403, 403, 401, 401] },
    delete("webhooks: delete endpoint",  "/v1/webhooks/endpoints/ep_none",                        [404, 403, 403, 403, 401, 401]),
    get("webhooks: delivery log",        "/v1/webhooks/endpoints/ep_none/deliveries",             [404, 403, 403, 403, 401, 401]),
    post("webhooks: redeliver",          "/v1/webhooks/deliveries/msg_none/redeliver", |_| json!({}), [404, 403, 403, 403, 401, 401]),
];

/// `path` with each `{name}` of `values` replaced; every placeholder must be filled.
fn fill(path: &str, values: &[(&str, String)]) -> String {
    let mut out = path.to_owned();
    for (name, value) in values {
        out = out.replace(&format!("{{{name}}}"), value);
    }
    assert!(!out.contains('{'), "{path}: a placeholder is left in {out}");
    out
}

impl Access {
    /// The row's request as `who` makes it, on `path` (filled).
    fn send(&self, h: &Http, path: &str, who: Who, token: Option<&str>) -> Reply {
        match (self.method, self.body) {
            ("GET", None) => h.get(path, token),
            ("DELETE", None) => h.delete(path, token),
            ("HEAD", None) => {
                let mut req = h.agent.head(format!("{}{path}", h.base));
                if let Some(t) = token {
                    req = req.header("Authorization", &format!("Bearer {t}"));
                }
                Http::read(req.call()).unwrap_or_else(|e| panic!("HEAD {path}: {e}"))
            }
            ("POST", Some(body)) => h.post(path, token, &body(&format!("{who:?}").to_lowercase())),
            (m @ ("PATCH" | "PUT"), Some(body)) => {
                let bytes = serde_json::to_vec(&body(&format!("{who:?}").to_lowercase())).unwrap();
                h.try_request(m, path, token, Some("application/json"), &bytes)
                    .unwrap_or_else(|e| panic!("{m} {path}: {e}"))
            }
            (m, b) => panic!("{}: {m} with a body: {}", self.what, b.is_some()),
        }
    }

    /// Whether `r` is what this row wants for column `col`: `Err` says how it differs.
    fn check(&self, col: usize, r: &Reply) -> Result<(), String> {
        match self.want[col] {
            s if self.method == "HEAD" && r.status == s && r.body.is_empty() => Ok(()),
            s if self.method == "HEAD" => Err(format!(
                "status {} (not {s}), {} body bytes",
                r.status,
                r.body.len()
            )),
            // Column 5 is a revoked token, which its holder is told (issue #23).
            401 if col == 5 => r.problem(401, "token_revoked").map(drop),
            401 => r.problem(401, "unauthorized").map(drop),
            403 => r.problem(403, "forbidden").map(drop),
            404 => r.problem(404, "not_found").map(drop),
            s if r.status == s => Ok(()),
            s => Err(format!("status {} (not {s}): {}", r.status, r.lossy())),
        }
    }
}

/// The rules every row keeps, whatever its statuses: a tenant is never told that another
/// tenant's thing exists (where one tenant may and the other may not, the other gets 404, not
/// 403), and a revoked token is no token at all.
#[test]
fn access_matrix_rows_keep_the_rules() {
    let mut broken = Vec::new();
    for row in ACCESS {
        let [_, _, a, b, nobody, revoked] = row.want;
        let ok = |s: u16| (200..300).contains(&s);
        if ok(a) != ok(b) && !matches!((ok(a), b, a), (true, 404, _) | (false, _, 404)) {
            broken.push(format!("{}: tenant A {a}, tenant B {b}", row.what));
        }
        if nobody != revoked {
            broken.push(format!(
                "{}: no token {nobody}, revoked {revoked}",
                row.what
            ));
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

/// A served log with node-1, tenants A and B (each with its sample lease of 8 sample-model GPUs
/// of node-1) and node-1's key `node_key` names: the log, the server, a client and the key.
fn served_with_node<'a>(db: &'a TestDb, node_key: &str) -> (Log<'a>, Server, Http, SigningKey) {
    served(init(db), node_key)
}

/// [`served_with_node`] on the initialised `log` (which may hold entries written before any
/// server, see [`Log::write_at`]).
fn served<'a>(log: Log<'a>, node_key: &str) -> (Log<'a>, Server, Http, SigningKey) {
    let srv = log.serve();
    let h = srv.http();
    h.parties(&log.admin, &["tenant-a", "tenant-b"]);
    let k = sample::key(node_key);
    h.register(&log.admin, "node-1", "node", &k);
    (log, srv, h, k)
}

/// Tomorrow, 00:00 UTC: when the prices the matrix's own rows post take effect. They only
/// show who may write prices and price nothing; a price may be announced any time ahead, never
/// more than the policy's skew in the past.
fn announced() -> Timestamp {
    base().plus(31 * 86_400)
}

/// The index of B's first record in the access matrix's log (the exclusion row excludes it).
const MATRIX_IB: u64 = 11;

both_backends!(access_matrix, |db: &TestDb| {
    // The prices of the invoices below, logged first, when they take effect, a day before the
    // records (no price may take effect more than the policy's skew before it is logged, and
    // receive times never decrease): entries 1 and 2, after the policy entry.
    let log = init(db);
    let since = base().plus(-86_400);
    assert_eq!(log.write_at(since, sample_prices(since, "2.5")), [1, 2]);
    let (log, _srv, h, k) = served(log, "matrix-node");
    let admin = log.admin.clone();
    let a = Some(admin.as_str());
    // Disposable things for the admin's write rows to act on.
    let disposable_key = sample::key("matrix-disposable");
    h.post(
        "/v1/signers/node-1/keys",
        a,
        &json!({"public_key": public(&disposable_key)}),
    )
    .ok_json(201);
    let auditor = h.secret(&admin, json!({"role": "auditor"}));
    let tenant_a = h.secret(&admin, json!({"role": "tenant", "tenant": "tenant-a"}));
    let tenant_b = h.secret(&admin, json!({"role": "tenant", "tenant": "tenant-b"}));
    let gone = h.token(&admin, json!({"role": "admin", "label": "revoked"}));
    let revoked = gone["token"].as_str().unwrap().to_owned();
    assert_eq!(
        h.delete(
            &format!("/v1/tokens/{}", gone["info"]["id"].as_str().unwrap()),
            a
        )
        .status,
        204
    );
    let disposable_token = h.token(&admin, json!({"role": "auditor", "label": "to revoke"}))
        ["info"]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Records of both tenants, and energy of no tenant.
    let batch = vec![
        usage("node-1", &k, 1, "tenant-a", "1"),
        usage("node-1", &k, 2, "tenant-b", "2"),
        usage("node-1", &k, 3, "tenant-a", "3"),
        sample::energy("node-1", &k, 4, None, dec("0.5"), end_of(4)),
        usage("node-1", &k, 5, "tenant-b", "4"),
    ];
    let ans = h.post_records(&batch);
    let idx = each_u64(&ans["outcomes"], "/index");
    let (ia, ib, ie) = (idx[0], idx[1], idx[3]);
    // The exclusion row's body is a plain function: it names B's record by its index.
    assert_eq!(ib, MATRIX_IB);
    // A's registration and lease (entries 4 and 5, after the policy entry, the prices and
    // node-1, which a tenant does not see), then its records.
    let mut of_a: Vec<u64> = vec![4, 5, idx[0], idx[2]];
    let day = base();
    let period = format!("from={day}&to={}", day.plus(86_400));
    let (from, to) = (day.to_string(), day.plus(86_400).to_string());
    // An invoice and a certificate for each tenant (priced by the prices logged first), for
    // the rows that read them. A's invoice now; B's is issued by the matrix's own row, so it is the second.
    of_a.push(h.size()); // A's invoice_issued entry
    let issued = h
        .post(
            "/v1/invoices",
            a,
            &json!({"tenant": "tenant-a", "from": from, "to": to}),
        )
        .ok_json(201);
    let inv_a = issued[0]["number"].as_str().unwrap().to_owned();
    // The settlement rows' bodies are plain functions: they name A's invoice by its number.
    assert_eq!(inv_a, "INV-000001");
    let mut certificate_of = Vec::new();
    for t in ["tenant-a", "tenant-b"] {
        if t == "tenant-a" {
            of_a.push(h.size()); // A's certificate_issued entry
        }
        let cert = h
            .post(
                "/v1/certificates",
                a,
                &json!({"tenant": t, "from": from, "to": to}),
            )
            .ok_json(201);
        certificate_of.push(cert["id"].as_str().unwrap().to_owned());
    }
    // A credit note of A's invoice, for the rows that read one.
    of_a.push(h.size()); // A's credit_note entry
    let cn_a = h
        .post(
            "/v1/credit-notes",
            a,
            &json!({"tenant": "tenant-a", "invoice": "INV-000001", "currency": "CNY",
                    "amount": "0.01", "note": "matrix"}),
        )
        .ok_json(201)["number"]
        .as_str()
        .unwrap()
        .to_owned();
    let size = h.size();
    let values = [
        ("ia", ia.to_string()),
        ("ib", ib.to_string()),
        ("ie", ie.to_string()),
        ("size", size.to_string()),
        ("period", period.clone()),
        ("inv_a", inv_a),
        ("inv_b", "INV-000002".to_owned()),
        ("cert_a", certificate_of[0].clone()),
        ("cert_b", certificate_of[1].clone()),
        ("cn_a", cn_a),
        ("disposable_key", key_id(&disposable_key)),
        ("disposable_token", disposable_token),
    ];

    let token_of = |w: Who| -> Option<&str> {
        match w {
            Who::Admin => Some(&admin),
            Who::Auditor => Some(&auditor),
            Who::TenantA => Some(&tenant_a),
            Who::TenantB => Some(&tenant_b),
            Who::Nobody => None,
            Who::Revoked => Some(&revoked),
        }
    };
    let tokens_before = h
        .get("/v1/tokens", a)
        .ok_json(200)
        .as_array()
        .unwrap()
        .len();
    // Every cell is tried and every mismatch reported. The admin column last within a row, so
    // that its writes cannot change what the others meet.
    let order = [1, 2, 3, 4, 5, 0];
    let mut mismatches = Vec::new();
    for row in ACCESS {
        let path = fill(row.path, &values);
        for &col in &order {
            let who = WHO[col];
            let r = row.send(&h, &path, who, token_of(who));
            if let Err(e) = row.check(col, &r) {
                let e: String = e.chars().take(300).collect();
                mismatches.push(format!(
                    "{} {path} ({}) as {who:?}: {e}",
                    row.method, row.what
                ));
            }
        }
    }
    // Every operation of the OpenAPI document has a row (as the admin calls it).
    let doc = h.get("/openapi.json", None).ok_json(200);
    let called: Vec<(String, String)> = ACCESS
        .iter()
        .map(|row| {
            let path = fill(row.path, &values);
            (
                row.method.to_lowercase(),
                path.split('?').next().unwrap().to_owned(),
            )
        })
        .collect();
    let fits = |template: &str, path: &str| {
        let (t, p): (Vec<_>, Vec<_>) = (template.split('/').collect(), path.split('/').collect());
        t.len() == p.len()
            && t.iter()
                .zip(&p)
                .all(|(t, p)| t == p || (t.starts_with('{') && !p.is_empty()))
    };
    let mut operations = 0;
    for (template, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            operations += 1;
            if !called.iter().any(|(m, p)| m == method && fits(template, p)) {
                mismatches.push(format!(
                    "the access matrix has no row for {method} {template}"
                ));
            }
        }
    }
    // Every status a row wants is documented for its operation (the most literal template
    // its path fits; a tile path, whose last parameter spans segments, fits none).
    let paths = doc["paths"].as_object().unwrap();
    for (row, (method, path)) in ACCESS.iter().zip(&called) {
        let op = paths
            .iter()
            .filter(|(t, ops)| ops.get(method).is_some() && fits(t, path))
            .min_by_key(|(t, _)| t.matches('{').count())
            .map(|(_, ops)| &ops[method]);
        let Some(op) = op else { continue };
        for status in row.want.iter().collect::<std::collections::BTreeSet<_>>() {
            if op["responses"].get(status.to_string()).is_none() {
                mismatches.push(format!(
                    "{} ({method} {path}): {status} is not documented",
                    row.what
                ));
            }
        }
    }
    assert!(
        operations >= 30,
        "only {operations} operations in the OpenAPI document"
    );
    assert!(
        mismatches.is_empty(),
        "{} of {} cells differ, or operations lack a row:\n  {}",
        mismatches.len(),
        ACCESS.len() * WHO.len(),
        mismatches.join("\n  ")
    );

    // Only the admin's writes and the tenants' own certificates went into the log, in row
    // order (within a row the admin comes last).
    let added = h
        .get(&format!("/v1/entries?start={size}&end={}", h.size()), a)
        .ok_json(200);
    assert_eq!(
        each_str(&added["entries"], "/entry/envelope/kind"),
        [
            "tenant_registered",     // create tenant
            "node_registered",       // register node
            "node_updated",          // update node
            "signer_key_registered", // register signer
            "signer_key_registered", // add key
            "signer_key_revoked",
            "rate_card",
            "region_params",
            "lease_registered",
            "volume_tiers",
            "tenant_plan",
            "contract_registered",
            "contract_amended", // amend it
            "prepayment",
            "record_excluded",
            "invoice_issued",
            "payment",
            "credit_note",
            "certificate_issued", // A for itself
            "certificate_issued", // the admin for A
            "certificate_issued", // A's own
            "certificate_issued", // B's own
        ]
    );
    let tenants = h.get("/v1/tenants", a).ok_json(200);
    assert_eq!(
        each(&tenants, "/id"),
        vec![json!("new-admin"), json!("tenant-a"), json!("tenant-b")]
    );
    let signers = h.get("/v1/signers", a).ok_json(200);
    let names: BTreeSet<_> = each_str(&signers, "/signer").into_iter().collect();
    assert_eq!(
        names,
        BTreeSet::from(["node-1".to_owned(), "node-admin".to_owned()])
    );
    let tokens = h.get("/v1/tokens", a).ok_json(200);
    assert_eq!(tokens.as_array().unwrap().len(), tokens_before + 1);

    // What tenants see: only their own entries, and their own sums.
    let page = h
        .get(&format!("/v1/entries?start=0&end={size}"), Some(&tenant_a))
        .ok_json(200);
    assert_eq!(each_u64(&page["entries"], "/index"), of_a);
    for e in page["entries"].as_array().unwrap() {
        assert_eq!(e["entry"]["envelope"]["body"]["tenant"], json!("tenant-a"));
    }
    let all = h
        .get(&format!("/v1/entries?start=0&end={size}"), a)
        .ok_json(200);
    assert_eq!(all["entries"].as_array().unwrap().len() as u64, size);
    for (who, t, gpu) in [(&tenant_a, "tenant-a", "40"), (&tenant_b, "tenant-b", "60")] {
        let u = h
            .get(&format!("/v1/usage?{period}"), Some(who))
            .ok_json(200);
        assert_eq!(u["tenant"], json!(t));
        assert_eq!(
            u["rows"],
            json!([{"gpu_seconds": gpu, "kwh": "0", "usage_records": 2, "energy_records": 0}])
        );
    }
    // Whatever 404 a tenant gets for another tenant's data says nothing about that data.
    let r = h.get(&format!("/v1/entries/{ib}"), Some(&tenant_a));
    assert!(!r.text().contains("tenant-b"), "{}", r.text());

    // Other ways of not presenting a valid token.
    let mut wrong_secret = admin.clone();
    let last = wrong_secret.pop().unwrap();
    wrong_secret.push(if last == 'A' { 'B' } else { 'A' });
    for (label, header) in [
        ("wrong scheme", format!("Basic {admin}")),
        ("garbage", "Bearer garbage".to_owned()),
        ("unknown id", "Bearer glt_000000000000_AAAA".to_owned()),
        ("wrong secret", format!("Bearer {wrong_secret}")),
        ("empty", "Bearer ".to_owned()),
    ] {
        let r = h
            .agent
            .get(format!("{}/v1/tenants", h.base))
            .header("Authorization", &header)
            .call();
        Http::read(r)
            .unwrap()
            .assert_problem(401, "unauthorized", label);
    }
});

// ---------------------------------------------------------------------------------------------
// 3. Bad inputs
// ---------------------------------------------------------------------------------------------

/// What a bad request must get.
enum Want {
    /// This status and problem slug.
    Problem(u16, &'static str),
    /// This status and problem slug, its first `errors` item naming this field.
    Field(u16, &'static str, &'static str),
    /// 400 `refused` by an admission rule: its first `errors` item names this reason code and
    /// field (PROTOCOL §6.7), as a refused record's outcome would.
    Refused(&'static str, &'static str),
    /// 400 `invalid_field`: a body refused on its own (PROTOCOL §5), its first `errors` item
    /// naming this reason code and field.
    Invalid(&'static str, &'static str),
    /// 200, the single record rejected with this reason (and field, when given).
    Reason(&'static str, Option<&'static str>),
    /// 200, the single record a duplicate of this index.
    Duplicate(u64),
}

struct Bad {
    what: &'static str,
    method: &'static str,
    path: String,
    content_type: Option<&'static str>,
    body: Vec<u8>,
    want: Want,
}

/// The public key of a case of tests/vectors/ed25519/cases.json.
fn ed25519_case(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vectors/ed25519/cases.json");
    let table: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    table["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no case {name}"))["public_key"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn records(what: &'static str, body: Vec<u8>, want: Want) -> Bad {
    Bad {
        what,
        method: "POST",
        path: "/v1/records".into(),
        content_type: Some("application/json"),
        body,
        want,
    }
}

fn one(what: &'static str, record: Value, want: Want) -> Bad {
    records(what, serde_json::to_vec(&json!([record])).unwrap(), want)
}

fn query(what: &'static str, path: String, want: Want) -> Bad {
    Bad {
        what,
        method: "GET",
        path,
        content_type: None,
        body: Vec::new(),
        want,
    }
}

/// A `POST /v1/leases` body: lease `id` of `tenant` (reserved) from `from` (and to `to`),
/// covering `nodes`.
fn lease_json(
    id: &str,
    tenant: &str,
    from: Timestamp,
    to: Option<Timestamp>,
    nodes: Value,
) -> Value {
    let mut v = json!({"lease": id, "tenant": tenant, "class": "reserved",
                       "from": from.to_string(), "nodes": nodes});
    if let Some(to) = to {
        v["to"] = json!(to.to_string());
    }
    v
}

/// The start of the sample leases' terms.
fn lease_from() -> Timestamp {
    Timestamp::from_unix(sample::LEASE_FROM).unwrap()
}

/// `count` sample-model GPUs of `node`, as a lease's `nodes`.
fn sample_gpus(node: &str, count: &str) -> Value {
    json!([{"node": node, "gpu_model": sample::MODEL, "count": count}])
}

fn admin_post(what: &'static str, path: &str, body: Value, want: Want) -> Bad {
    Bad {
        what,
        method: "POST",
        path: path.into(),
        content_type: Some("application/json"),
        body: body.to_string().into_bytes(),
        want,
    }
}

both_backends!(bad_inputs_change_nothing, |db: &TestDb| {
    let (log, srv, h, k) = served_with_node(db, "bad-node");
    let admin = log.admin.clone();
    let a = Some(admin.as_str());
    let km = sample::key("bad-market");
    h.register(&admin, "market-1", "market", &km);
    let kr = sample::key("bad-node-revoked");
    h.register(&admin, "node-r", "node", &kr);
    h.post(
        &format!("/v1/signers/node-r/keys/{}/revoke", key_id(&kr)),
        a,
        &json!({}),
    )
    .ok_json(200);
    // Leases of A that do not fit the records below on node-1: one whose term starts the day
    // after them, one whose term ended when they start, one on node-r only (which the revoked
    // key's record names). With A's and B's sample leases, 24 of node-1's 32 sample-model
    // GPUs are leased at every instant from 2020 on but in the records' day (16).
    let records_day = base();
    for body in [
        lease_json(
            "lease-a-later",
            "tenant-a",
            records_day.plus(86_400),
            None,
            sample_gpus("node-1", "8"),
        ),
        lease_json(
            "lease-a-ended",
            "tenant-a",
            lease_from(),
            Some(records_day),
            sample_gpus("node-1", "8"),
        ),
        lease_json(
            "lease-a-node-r",
            "tenant-a",
            lease_from(),
            None,
            sample_gpus("node-r", "8"),
        ),
    ] {
        h.post("/v1/leases", a, &body).ok_json(201);
    }
    let original = usage("node-1", &k, 1, "tenant-a", "2");
    let ans = h.post_records(std::slice::from_ref(&original));
    let original_index = ans["outcomes"][0]["index"].as_u64().unwrap();
    let good = |seq: u64| value(&usage("node-1", &k, seq, "tenant-a", "1"));
    // A usage record of seq with body members replaced, signed again.
    let edited = |seq: u64, edits: &[(&str, &str)]| {
        let mut v = good(seq);
        for (field, val) in edits {
            v["body"][*field] = json!(val);
        }
        sign_value(v, &k)
    };
    let now = Timestamp::now();

    let mut bad_sig = good(10);
    let mut sig = BASE64_STANDARD
        .decode(bad_sig["sig"].as_str().unwrap())
        .unwrap();
    sig[5] ^= 0x01;
    bad_sig["sig"] = json!(BASE64_STANDARD.encode(sig));
    // Another GPU count, which node-1 and A's lease have room for: only the signature is
    // wrong. (Another model of node-1 is no longer that: A's lease covers only the sample
    // model, and the admission rules may be checked before the signature, PROTOCOL §6.6.)
    let mut changed_after = good(11);
    changed_after["body"]["gpu_count"] = json!("2");
    changed_after["body"]["gpu_seconds"] = json!("20");
    let mut not_b64 = good(12);
    not_b64["sig"] = json!("not base64!");
    let mut short_sig = good(13);
    short_sig["sig"] = json!(BASE64_STANDARD.encode([7u8; 63]));
    let mut extra_member = good(14);
    extra_member["extra"] = json!(1);
    let mut other_key_id = good(15);
    other_key_id["key_id"] = json!(key_id(&sample::key("never registered")));
    let ghost = sample::key("ghost");
    let energy = |seq: u64, kwh: &str| {
        let mut v = value(&sample::energy(
            "node-1",
            &k,
            seq,
            Some("tenant-a"),
            dec("1"),
            end_of(seq),
        ));
        v["body"]["kwh"] = json!(kwh);
        sign_value(v, &k)
    };
    let mut v1 = good(16);
    v1["v"] = json!(1);
    // A repeated member name inside the body: the last value would win in a lax reader.
    let repeated = {
        let text = good(35).to_string();
        let twice = text.replacen("\"body\":{", "\"body\":{\"tenant\":\"tenant-z\",", 1);
        assert_ne!(twice, text);
        format!("[{twice}]").into_bytes()
    };
    let mut staging = value(&usage("node-1", &k, 36, "tenant-a", "1"));
    {
        use ed25519_dalek::Signer;
        let env: Envelope = serde_json::from_value(staging.clone()).unwrap();
        let msg = env.signed_message("staging.gpuledger/log").unwrap();
        staging["sig"] = json!(BASE64_STANDARD.encode(k.sign(&msg).to_bytes()));
    }
    let mut unknown_kind = good(17);
    unknown_kind["kind"] = json!("gpu_rental");
    let mut seq0 = good(18);
    seq0["seq"] = json!(0);
    let mut no_sig = good(19);
    no_sig.as_object_mut().unwrap().remove("sig");
    let mut no_lease = good(48);
    no_lease["body"].as_object_mut().unwrap().remove("lease");
    let no_lease = sign_value(no_lease, &k);

    let over_count = MAX_RECORDS + 1;
    let many = format!("[{}]", vec!["{}"; over_count].join(","));
    let mut huge = vec![b' '; MAX_BODY + 1];
    huge[0] = b'[';
    huge[MAX_BODY] = b']';

    use Want::{Duplicate, Field, Invalid, Problem, Reason, Refused};
    let ct = |content_type: Option<&'static str>, b: Bad| Bad { content_type, ..b };
    let method = |method: &'static str, b: Bad| Bad { method, ..b };
    let future = |seq: u64| {
        let end = now.plus(3600);
        edited(
            seq,
            &[
                ("start", &end.plus(-10).to_string()),
                ("end", &end.to_string()),
            ],
        )
    };
    let empty_interval = edited(
        31,
        &[
            ("end", &end_of(31).plus(-10).to_string()),
            ("gpu_seconds", "0"),
        ],
    );
    let over_a_day = edited(
        32,
        &[
            ("start", &end_of(32).plus(-86_401).to_string()),
            ("gpu_seconds", "86401"),
        ],
    );
    let (day, next) = (base(), base().plus(60));
    #[rustfmt::skip]
    let cases = vec![
        // The body of POST /v1/records.
        records("malformed JSON",                    b"[{\"v\":1,".to_vec(),                Problem(400, "malformed_json")),
        records("empty body",                        Vec::new(),                            Problem(400, "malformed_json")),
        records("trailing garbage",                  b"[] []".to_vec(),                     Problem(400, "malformed_json")),
        ct(Some("text/plain"), records("wrong content type", b"[]".to_vec(),                Problem(415, "unsupported_media_type"))),
        ct(None, records("no content type",          b"[]".to_vec(),                        Problem(415, "unsupported_media_type"))),
        ct(Some("application/jsonx"), records("look-alike content type", b"[]".to_vec(),    Problem(415, "unsupported_media_type"))),
        records("body one byte over 8 MiB",          huge,                                  Problem(413, "body_too_large")),
        records("10001 records",                     many.into_bytes(),                     Problem(413, "too_many_records")),
        records("not an array: object",              b"{\"records\":[]}".to_vec(),          Problem(400, "not_an_array")),
        records("not an array: string",              b"\"[]\"".to_vec(),                    Problem(400, "not_an_array")),
        records("not an array: null",                b"null".to_vec(),                      Problem(400, "not_an_array")),
        // One record each, refused with its reason.
        one("element not an envelope",               json!({"hello": 1}),                   Reason("malformed", None)),
        one("element a number",                      json!(42),                             Reason("malformed", None)),
        one("envelope with an unknown member",       extra_member,                          Reason("malformed", None)),
        one("envelope without sig",                  no_sig,                                Reason("malformed", None)),
        one("sig not base64",                        not_b64,                               Reason("invalid_field", Some("sig"))),
        one("sig of 63 bytes",                       short_sig,                             Reason("invalid_field", Some("sig"))),
        one("signature with a flipped bit",          bad_sig,                               Reason("bad_signature", None)),
        one("body changed after signing",            changed_after,                         Reason("bad_signature", None)),
        one("unknown signer",                        value(&usage("node-ghost", &ghost, 1, "tenant-a", "1")), Reason("unknown_signer", None)),
        one("unknown key of a known signer",         other_key_id,                          Reason("unknown_key", None)),
        one("key of another signer",                 value(&usage("node-1", &km, 20, "tenant-a", "1")), Reason("key_signer_mismatch", None)),
        one("revoked key",                           value(&sample::usage_under("node-r", &kr, 1, ("tenant-a", "lease-a-node-r"), dec("1"), end_of(1))), Reason("revoked_key", None)),
        one("node signing a spot price",             value(&sample::spot("node-1", &k, 21, dec("1"), end_of(21))), Reason("role_not_allowed", None)),
        one("replay of an accepted record",          value(&original),                      Duplicate(original_index)),
        one("another record with the same seq",      value(&usage("node-1", &k, 1, "tenant-a", "3")), Reason("conflict", None)),
        one("negative gpu_count",                    edited(22, &[("gpu_count", "-1"), ("gpu_seconds", "-10")]), Reason("negative_quantity", Some("body.gpu_count"))),
        one("negative kWh",                          energy(23, "-0.5"),                    Reason("negative_quantity", Some("body.kwh"))),
        one("gpu_count one over 1024",               edited(24, &[("gpu_count", "1025"), ("gpu_seconds", "10250")]), Reason("quantity_out_of_range", Some("body.gpu_count"))),
        one("absurd gpu_count",                      edited(25, &[("gpu_count", "1000000000"), ("gpu_seconds", "10000000000")]), Reason("quantity_out_of_range", Some("body.gpu_count"))),
        one("kWh one over 100000",                   energy(26, "100001"),                  Reason("quantity_out_of_range", Some("body.kwh"))),
        one("zero GPUs",                             edited(27, &[("gpu_count", "0"), ("gpu_seconds", "0")]), Reason("quantity_out_of_range", Some("body.gpu_count"))),
        one("gpu_seconds not count × duration",      edited(28, &[("gpu_seconds", "11")]),  Reason("gpu_seconds_mismatch", Some("body.gpu_seconds"))),
        one("non-canonical decimal",                 edited(29, &[("gpu_count", "1.0"), ("gpu_seconds", "10.0")]), Reason("invalid_field", Some("body.gpu_count"))),
        one("interval in the future",                future(30),                            Reason("in_future", Some("body.end"))),
        one("empty interval",                        empty_interval,                        Reason("empty_interval", Some("body.end"))),
        one("interval over a day",                   over_a_day,                            Reason("interval_too_long", Some("body.end"))),
        one("bad timestamp",                         edited(33, &[("start", "yesterday")]), Reason("invalid_field", Some("body.start"))),
        one("bad tenant id",                         edited(34, &[("tenant", "tenant a")]), Reason("invalid_field", Some("body.tenant"))),
        one("envelope version 1 (retired)",          sign_value(v1, &k),                    Reason("unsupported_version", Some("v"))),
        records("a repeated member name in a body",  repeated,                              Reason("malformed", None)),
        one("signed for another log (replay)",       staging,                               Reason("bad_signature", None)),
        one("node outside the key's scope",          edited(37, &[("node", "node-elsewhere")]), Reason("node_not_allowed", Some("body.node"))),
        one("region outside the key's scope",        edited(38, &[("region", "eu-west")]), Reason("region_not_allowed", Some("body.region"))),
        one("unregistered tenant",                   edited(39, &[("tenant", "tenant-z")]), Reason("unknown_tenant", Some("body.tenant"))),
        one("unregistered lease",                    edited(40, &[("lease", "lease-z")]),   Reason("unknown_lease", Some("body.lease"))),
        one("another tenant's lease",                edited(41, &[("lease", "lease-tenant-b")]), Reason("lease_tenant_mismatch", Some("body.lease"))),
        one("older than the log's policy allows",    edited(42, &[("start", &now.plus(-40 * 86_400).to_string()), ("end", &now.plus(-40 * 86_400 + 10).to_string())]), Reason("too_old", Some("body.start"))),
        one("spot price in the past",                value(&sample::spot("market-1", &km, 2, dec("1"), now.plus(-3600))), Reason("price_in_past", Some("body.effective_from"))),
        one("unknown kind",                          sign_value(unknown_kind, &k),          Reason("unknown_kind", Some("kind"))),
        one("seq 0",                                 sign_value(seq0, &k),                  Reason("quantity_out_of_range", Some("seq"))),
        // The fleet (PROTOCOL §6.7): node-1 is a test node, 64 GPUs at 5000 W, 32 of them of
        // the sample model.
        one("1,024 GPUs on the node",                edited(43, &[("gpu_count", "1024"), ("gpu_seconds", "10240")]), Reason("over_capacity", Some("body.gpu_count"))),
        one("one GPU more than the node has",        edited(44, &[("gpu_count", "33"), ("gpu_seconds", "330")]), Reason("over_capacity", Some("body.gpu_count"))),
        one("a GPU model the node lacks",            edited(45, &[("gpu_model", "H200-SXM-141G")]), Reason("unknown_gpu_model", Some("body.gpu_model"))),
        // tenant-a's energy: within what its lease's 8 GPUs draw, 8 × 5000 W × 10 s + 5 % = 0.11666… kWh.
        one("energy above what the lease draws",     energy(46, "0.116667"),                Reason("energy_over_bound", Some("body.kwh"))),
        // The lease (PROTOCOL §6.7, leases): A's sample lease covers 8 sample-model GPUs of
        // node-1 from 2020 on, and nothing else.
        one("no lease",                              no_lease,                              Reason("lease_not_on_node", Some("body.lease"))),
        one("a model the node has, not the lease",   edited(49, &[("gpu_model", "A100")]),  Reason("lease_not_on_node", Some("body.lease"))),
        one("a lease on another node only",          edited(50, &[("lease", "lease-a-node-r")]), Reason("lease_not_on_node", Some("body.lease"))),
        one("before the lease's term",               edited(51, &[("lease", "lease-a-later")]), Reason("outside_lease_term", Some("body.start"))),
        one("after the lease's term",                edited(52, &[("lease", "lease-a-ended")]), Reason("outside_lease_term", Some("body.end"))),
        one("one GPU more than the lease covers",    edited(53, &[("gpu_count", "9"), ("gpu_seconds", "90")]), Reason("over_capacity", Some("body.gpu_count"))),
        // Query parameters.
        query("entries: start not a number",         "/v1/entries?start=x".into(),          Problem(400, "invalid_parameter")),
        query("entries: negative start",             "/v1/entries?start=-1".into(),         Problem(400, "invalid_parameter")),
        query("entries: end below start",            "/v1/entries?start=5&end=2".into(),    Problem(400, "invalid_parameter")),
        query("entries: 1001 per page",              "/v1/entries?start=0&end=1001".into(), Problem(400, "invalid_parameter")),
        query("entry: index not a number",           "/v1/entries/abc".into(),              Problem(400, "invalid_parameter")),
        query("entry: index beyond u64",             "/v1/entries/99999999999999999999".into(), Problem(400, "invalid_parameter")),
        query("usage: missing from",                 "/v1/usage".into(),                    Problem(400, "invalid_parameter")),
        query("usage: bad from",                     format!("/v1/usage?from=garbage&to={day}"), Problem(400, "invalid_parameter")),
        query("usage: inverted period",              format!("/v1/usage?from={next}&to={day}"), Problem(400, "invalid_parameter")),
        query("usage: empty period",                 format!("/v1/usage?from={day}&to={day}"), Problem(400, "invalid_parameter")),
        query("usage: period over 400 days",         format!("/v1/usage?from={day}&to={}", day.plus(400 * 86_400 + 1)), Problem(400, "invalid_parameter")),
        query("usage: unknown group_by",             format!("/v1/usage?from={day}&to={next}&group_by=region,colour"), Problem(400, "invalid_parameter")),
        query("usage: unknown window",               format!("/v1/usage?from={day}&to={next}&window=week"), Problem(400, "invalid_parameter")),
        query("inclusion: missing index",            "/v1/proofs/inclusion".into(),         Problem(400, "invalid_parameter")),
        query("inclusion: index not a number",       "/v1/proofs/inclusion?index=x".into(), Problem(400, "invalid_parameter")),
        query("inclusion: size 0",                   "/v1/proofs/inclusion?index=0&size=0".into(), Problem(400, "invalid_parameter")),
        query("inclusion: size beyond the log",      "/v1/proofs/inclusion?index=1&size=999999".into(), Problem(400, "invalid_parameter")),
        // No such entry is "not found", as for GET /v1/entries/999999 and for other tenants'.
        query("inclusion: index beyond the log",     "/v1/proofs/inclusion?index=999999".into(), Problem(404, "not_found")),
        query("consistency: missing to",             "/v1/proofs/consistency?from=1".into(), Problem(400, "invalid_parameter")),
        query("consistency: from 0",                 "/v1/proofs/consistency?from=0&to=1".into(), Problem(400, "invalid_parameter")),
        query("consistency: from after to",          "/v1/proofs/consistency?from=3&to=2".into(), Problem(400, "invalid_parameter")),
        query("consistency: to beyond the log",      "/v1/proofs/consistency?from=1&to=999999".into(), Problem(400, "invalid_parameter")),
        // Routes.
        query("unknown route",                       "/v1/nope".into(),                     Problem(404, "not_found")),
        query("unknown top-level route",             "/nope".into(),                        Problem(404, "not_found")),
        method("POST", query("POST to a GET route",  "/v1/log".into(),                      Problem(405, "method_not_allowed"))),
        method("DELETE", query("DELETE on a list",   "/v1/tenants".into(),                  Problem(405, "method_not_allowed"))),
        // Administration bodies.
        Bad { body: b"{\"id\":".to_vec(), ..admin_post("tenant: malformed JSON", "/v1/tenants", json!(null), Problem(400, "malformed_json")) },
        admin_post("tenant: unknown member",         "/v1/tenants", json!({"id": "t2", "name": "n", "x": 1}), Problem(400, "malformed_json")),
        admin_post("tenant: fields as an array",     "/v1/tenants", json!(["t6", "n"]), Problem(400, "malformed_json")),
        Bad { method: "PATCH", ..admin_post("tenant patch: array of nulls", "/v1/tenants/tenant-a", json!([null, null]), Problem(400, "malformed_json")) },
        Bad { body: br#"{"id":"t9","id":"t10","name":"n"}"#.to_vec(), ..admin_post("tenant: repeated member name", "/v1/tenants", json!(null), Problem(400, "malformed_json")) },
        Bad { body: br#"{"lease":"l9","tenant":"tenant-a","class":"reserved","class":"spot","from":"2020-01-01T00:00:00Z","nodes":[{"node":"node-1","gpus":[0]}]}"#.to_vec(), ..admin_post("lease: repeated member name", "/v1/leases", json!(null), Problem(400, "malformed_json")) },
        admin_post("lease: unregistered tenant",     "/v1/leases", lease_json("l10", "tenant-z", lease_from(), None, sample_gpus("node-1", "1")), Refused("unknown_tenant", "body.tenant")),
        // Leases (PROTOCOL §5.8, §6.7): 24 of node-1's 32 sample-model GPUs are leased from
        // 2020 on (see above); 9 more overbook it, as a count or as listed GPUs.
        admin_post("lease: 9 GPUs of the 8 left",    "/v1/leases", lease_json("l20", "tenant-a", lease_from(), None, sample_gpus("node-1", "9")), Refused("lease_overbooked", "body.nodes")),
        admin_post("lease: 9 listed GPUs of 8 left", "/v1/leases", lease_json("l21", "tenant-a", lease_from(), None, json!([{"node": "node-1", "gpus": [0, 1, 2, 3, 4, 5, 6, 7, 8]}])), Refused("lease_overbooked", "body.nodes")),
        admin_post("lease: a GPU the node lacks",    "/v1/leases", lease_json("l22", "tenant-a", lease_from(), None, json!([{"node": "node-1", "gpus": [63, 64]}])), Refused("unknown_gpu", "body.nodes[0].gpus")),
        admin_post("lease: a model the node lacks",  "/v1/leases", lease_json("l23", "tenant-a", lease_from(), None, json!([{"node": "node-1", "gpu_model": "H200-SXM-141G", "count": "1"}])), Refused("unknown_gpu_model", "body.nodes[0].gpu_model")),
        admin_post("lease: a node not registered",   "/v1/leases", lease_json("l24", "tenant-a", lease_from(), None, sample_gpus("node-z", "1")), Refused("unknown_node", "body.nodes[0].node")),
        admin_post("lease: GPUs and a count at once", "/v1/leases", lease_json("l25", "tenant-a", lease_from(), None, json!([{"node": "node-1", "gpus": [0], "gpu_model": sample::MODEL, "count": "1"}])), Invalid("invalid_field", "body.nodes[0]")),
        admin_post("lease: an item of neither form", "/v1/leases", lease_json("l26", "tenant-a", lease_from(), None, json!([{"node": "node-1"}])), Invalid("invalid_field", "body.nodes[0]")),
        admin_post("lease: no nodes",                "/v1/leases", lease_json("l27", "tenant-a", lease_from(), None, json!([])), Invalid("invalid_field", "body.nodes")),
        admin_post("lease: to at from",              "/v1/leases", lease_json("l28", "tenant-a", records_day, Some(records_day), sample_gpus("node-1", "1")), Invalid("empty_interval", "body.to")),
        admin_post("lease: to before from",          "/v1/leases", lease_json("l29", "tenant-a", records_day, Some(records_day.plus(-1)), sample_gpus("node-1", "1")), Invalid("empty_interval", "body.to")),
        admin_post("signer: a node not registered",  "/v1/signers", json!({"id": "n14", "role": "node", "public_key": public(&sample::key("n14")), "nodes": ["n14"], "regions": ["west"]}), Refused("unknown_node", "body.nodes")),
        admin_post("node: registered twice",         "/v1/nodes", test_node("node-1").to_value(), Problem(409, "conflict")),
        admin_post("signer: no regions",             "/v1/signers", json!({"id": "n9", "role": "node", "public_key": public(&sample::key("n9")), "nodes": ["node-1"]}), Problem(400, "refused")),
        admin_post("signer: node key without nodes", "/v1/signers", json!({"id": "n10", "role": "node", "public_key": public(&sample::key("n10")), "regions": ["west"]}), Problem(400, "refused")),
        admin_post("signer: mixed-order key",        "/v1/signers", json!({"id": "n11", "role": "node", "public_key": ed25519_case("a_mixed_order"), "nodes": ["n11"], "regions": ["west"]}), Problem(400, "refused")),
        admin_post("signer: non-canonical key",      "/v1/signers", json!({"id": "n12", "role": "node", "public_key": ed25519_case("a_non_canonical"), "nodes": ["n12"], "regions": ["west"]}), Problem(400, "refused")),
        admin_post("signer: small-order key",        "/v1/signers", json!({"id": "n13", "role": "node", "public_key": ed25519_case("a_small_order"), "nodes": ["n13"], "regions": ["west"]}), Problem(400, "refused")),
        ct(Some("text/plain"), admin_post("tenant: wrong content type", "/v1/tenants", json!({"id": "t3", "name": "n"}), Problem(415, "unsupported_media_type"))),
        admin_post("tenant: body over 64 KiB",       "/v1/tenants", json!({"id": "t4", "name": "x".repeat(64 * 1024)}), Problem(413, "body_too_large")),
        admin_post("tenant: bad id",                 "/v1/tenants", json!({"id": "bad id!", "name": "n"}), Field(400, "invalid_parameter", "id")),
        admin_post("tenant: name over 200 bytes",    "/v1/tenants", json!({"id": "t5", "name": "x".repeat(201)}), Field(400, "invalid_parameter", "name")),
        // Reserved ids (PROTOCOL §2.3) and text that spoofs people (issue #23).
        admin_post("tenant: the reserved id",        "/v1/tenants", json!({"id": "ledger", "name": "n"}), Field(400, "invalid_parameter", "id")),
        admin_post("lease: the reserved id",         "/v1/leases", lease_json("ledger", "tenant-a", lease_from(), None, sample_gpus("node-1", "1")), Field(400, "invalid_field", "body.lease")),
        admin_post("tenant: name with NUL",          "/v1/tenants", json!({"id": "t11", "name": "Acme\u{0}Ltd"}), Field(400, "invalid_parameter", "name")),
        admin_post("tenant: name with LF",           "/v1/tenants", json!({"id": "t12", "name": "Acme\nTotal due: 0.00"}), Field(400, "invalid_parameter", "name")),
        admin_post("tenant: name with RLO",          "/v1/tenants", json!({"id": "t13", "name": "Acme \u{202E}dtL"}), Field(400, "invalid_parameter", "name")),
        admin_post("tenant: name with an isolate",   "/v1/tenants", json!({"id": "t14", "name": "\u{2067}Acme"}), Field(400, "invalid_parameter", "name")),
        admin_post("tenant: name zero-width space",  "/v1/tenants", json!({"id": "t15", "name": "Ac\u{200B}me"}), Field(400, "invalid_parameter", "name")),
        admin_post("tenant: name only blanks",       "/v1/tenants", json!({"id": "t16", "name": "   "}), Field(400, "invalid_parameter", "name")),
        admin_post("tenant: address line with LRM",  "/v1/tenants", json!({"id": "t17", "name": "n", "address": ["1 Main St", "\u{200E}Berlin"]}), Field(400, "invalid_parameter", "address[1]")),
        admin_post("tenant: address line with CR",   "/v1/tenants", json!({"id": "t18", "name": "n", "address": ["1 Main St\rX"]}), Field(400, "invalid_parameter", "address[0]")),
        admin_post("tenant: nine address lines",     "/v1/tenants", json!({"id": "t19", "name": "n", "address": vec!["x"; 9]}), Field(400, "invalid_parameter", "address")),
        Bad { method: "PATCH", ..admin_post("tenant patch: name with PDF", "/v1/tenants/tenant-a", json!({"name": "Acme\u{202C}"}), Field(400, "invalid_parameter", "name")) },
        Bad { method: "PATCH", ..admin_post("tenant patch: address with BOM", "/v1/tenants/tenant-a", json!({"address": ["\u{FEFF}x"]}), Field(400, "invalid_parameter", "address[0]")) },
        admin_post("token: label with RLO",          "/v1/tokens", json!({"role": "auditor", "label": "ci\u{202E}nimda"}), Field(400, "invalid_parameter", "label")),
        admin_post("revoke: reason with ALM",        &format!("/v1/signers/node-1/keys/{}/revoke", key_id(&k)), json!({"reason": "rotated\u{061C}"}), Field(400, "invalid_parameter", "reason")),
        admin_post("tenant: duplicate",              "/v1/tenants", json!({"id": "tenant-a", "name": "n"}), Problem(409, "conflict")),
        admin_post("invoice: period not ended",      "/v1/invoices", json!({"tenant": "tenant-a", "from": "2099-01-01T00:00:00Z", "to": "2099-01-02T00:00:00Z"}), Problem(422, "period_not_ended")),
        admin_post("certificate: period not ended",  "/v1/certificates", json!({"tenant": "tenant-a", "from": "2099-01-01T00:00:00Z", "to": "2099-01-02T00:00:00Z"}), Problem(422, "period_not_ended")),
        admin_post("signer: unknown role",           "/v1/signers", json!({"id": "n2", "role": "boss", "public_key": public(&sample::key("n2"))}), Problem(400, "invalid_parameter")),
        admin_post("signer: key not base64",         "/v1/signers", json!({"id": "n3", "role": "node", "public_key": "not a key"}), Problem(400, "refused")),
        admin_post("signer: weak key",               "/v1/signers", json!({"id": "n4", "role": "node", "public_key": BASE64_STANDARD.encode([0u8; 32])}), Problem(400, "refused")),
        admin_post("signer: the reserved id",        "/v1/signers", json!({"id": "ledger", "role": "node", "public_key": public(&sample::key("n5"))}), Problem(400, "refused")),
        admin_post("signer: id over 128 bytes",      "/v1/signers", json!({"id": "n".repeat(129), "role": "node", "public_key": public(&sample::key("n8"))}), Problem(400, "refused")),
        admin_post("signer: key already registered", "/v1/signers", json!({"id": "n6", "role": "node", "public_key": public(&k)}), Problem(409, "conflict")),
        admin_post("signer: not its registered role", "/v1/signers", json!({"id": "node-1", "role": "market", "public_key": public(&sample::key("n7"))}), Problem(400, "refused")),
        admin_post("revoke: unknown key",            "/v1/signers/node-1/keys/0000000000000000/revoke", json!({}), Problem(404, "not_found")),
        admin_post("revoke: another signer's key",   &format!("/v1/signers/market-1/keys/{}/revoke", key_id(&k)), json!({}), Problem(404, "not_found")),
        admin_post("revoke: already revoked",        &format!("/v1/signers/node-r/keys/{}/revoke", key_id(&kr)), json!({}), Problem(409, "conflict")),
        admin_post("token: unknown role",            "/v1/tokens", json!({"role": "root"}), Problem(400, "invalid_parameter")),
        admin_post("token: tenant token, no tenant", "/v1/tokens", json!({"role": "tenant"}), Problem(400, "refused")),
        admin_post("token: admin token with tenant", "/v1/tokens", json!({"role": "admin", "tenant": "tenant-a"}), Problem(400, "refused")),
        admin_post("token: unknown tenant",          "/v1/tokens", json!({"role": "tenant", "tenant": "tenant-z"}), Problem(404, "not_found")),
        admin_post("token: label over 200 bytes",    "/v1/tokens", json!({"role": "auditor", "label": "x".repeat(201)}), Field(400, "invalid_parameter", "label")),
    ];

    let mut conn = gpuledger::store::connect(&db.url).unwrap();
    let size = h.size();
    let tenants = h.get("/v1/tenants", a).ok_json(200);
    let signers = h.get("/v1/signers", a).ok_json(200);
    let tokens = h.get("/v1/tokens", a).ok_json(200);
    let nodes = h.get("/v1/nodes", a).ok_json(200);
    for c in &cases {
        let conflicts = gpuledger::store::read::conflict_count(&mut conn).unwrap();
        let r = h
            .try_request(c.method, &c.path, a, c.content_type, &c.body)
            .unwrap_or_else(|e| panic!("{}: {e}", c.what));
        match c.want {
            Want::Problem(status, slug) => {
                r.assert_problem(status, slug, c.what);
            }
            Want::Field(status, slug, field) => {
                let p = r.assert_problem(status, slug, c.what);
                assert_eq!(p["errors"][0]["field"], json!(field), "{}: {p}", c.what);
            }
            Want::Invalid(reason, field) => {
                let p = r.assert_problem(400, "invalid_field", c.what);
                assert_eq!(
                    (&p["errors"][0]["reason"], &p["errors"][0]["field"]),
                    (&json!(reason), &json!(field)),
                    "{}: {p}",
                    c.what
                );
            }
            Want::Refused(reason, field) => {
                let p = r.assert_problem(400, "refused", c.what);
                assert_eq!(
                    (&p["errors"][0]["reason"], &p["errors"][0]["field"]),
                    (&json!(reason), &json!(field)),
                    "{}: {p}",
                    c.what
                );
            }
            Want::Reason(reason, field) => {
                let ans = r.ok_json(200);
                assert_eq!(
                    (&ans["accepted"], &ans["rejected"]),
                    (&json!(0), &json!(1)),
                    "{}: {ans}",
                    c.what
                );
                let o = &ans["outcomes"][0];
                assert_eq!(
                    (&o["status"], &o["reason"]),
                    (&json!("rejected"), &json!(reason)),
                    "{}: {o}",
                    c.what
                );
                assert!(
                    o["message"].as_str().is_some_and(|m| !m.is_empty()),
                    "{}: {o}",
                    c.what
                );
                if let Some(f) = field {
                    assert_eq!(o["field"], json!(f), "{}: {o}", c.what);
                }
            }
            Want::Duplicate(index) => {
                let ans = r.ok_json(200);
                assert_eq!(
                    ans["outcomes"],
                    json!([{"status": "duplicate", "index": index}]),
                    "{}",
                    c.what
                );
                assert_eq!(ans["duplicates"], json!(1));
            }
        }
        assert_eq!(h.size(), size, "{}: the log changed", c.what);
        let kept = gpuledger::store::read::conflict_count(&mut conn).unwrap();
        let is_conflict = matches!(c.want, Want::Reason("conflict", _));
        assert_eq!(
            kept,
            conflicts + u64::from(is_conflict),
            "{}: conflict evidence",
            c.what
        );
    }
    // Nothing else changed either.
    assert_eq!(h.get("/v1/tenants", a).ok_json(200), tenants);
    assert_eq!(h.get("/v1/signers", a).ok_json(200), signers);
    assert_eq!(h.get("/v1/tokens", a).ok_json(200), tokens);
    assert_eq!(h.get("/v1/nodes", a).ok_json(200), nodes);
    // The replayed and the conflicting record left the original in place.
    let e = h
        .get(&format!("/v1/entries/{original_index}"), a)
        .ok_json(200);
    assert_eq!(e["entry"]["envelope"], value(&original));

    // The limits at their edges are accepted: exactly 8 MiB, exactly 10000 records, all 8 GPUs
    // A's lease covers and the most energy (to the millionth) they draw in 10 s (8 × 5000 W ×
    // 10 s + 5 % = 0.11666… kWh), and a lease of the last 8 sample-model GPUs of node-1. (1024 GPUs,
    // the limit of a record, is more than a node has.)
    let mut edge = vec![b' '; MAX_BODY];
    edge[0] = b'[';
    edge[MAX_BODY - 1] = b']';
    let json = Some("application/json");
    let ans = h.post_bytes("/v1/records", json, &edge).ok_json(200);
    assert_eq!(ans["outcomes"], json!([]));
    let many = format!("[{}]", vec!["{}"; MAX_RECORDS].join(","));
    let ans = h
        .post_bytes("/v1/records", json, many.as_bytes())
        .ok_json(200);
    assert_eq!(ans["rejected"], json!(MAX_RECORDS));
    assert_eq!(h.size(), size);
    let ans = h
        .post(
            "/v1/records",
            None,
            &json!([
                value(&usage("node-1", &k, 40, "tenant-a", "8")),
                energy(47, "0.116666")
            ]),
        )
        .ok_json(200);
    assert_eq!(
        each(&ans["outcomes"], "/status"),
        vec![json!("accepted"), json!("accepted")],
        "{ans}"
    );
    // One bad record does not sink the batch: outcomes stay in order.
    let mixed = json!([good(41), json!({"nope": true}), good(42)]);
    let ans = h.post("/v1/records", None, &mixed).ok_json(200);
    assert_eq!(
        each(&ans["outcomes"], "/status"),
        vec![json!("accepted"), json!("rejected"), json!("accepted")]
    );
    assert_eq!(
        (&ans["outcomes"][0]["index"], &ans["outcomes"][2]["index"]),
        (&json!(size + 2), &json!(size + 3))
    );
    let last = lease_json(
        "l30",
        "tenant-b",
        lease_from(),
        None,
        sample_gpus("node-1", "8"),
    );
    let ans = h.post("/v1/leases", a, &last).ok_json(201);
    assert_eq!(ans, json!({"index": size + 4, "kind": "lease_registered"}));
    assert_eq!(h.size(), size + 5);
    drop(srv);
    log.assert_verifies(size + 5);
});

// ---------------------------------------------------------------------------------------------
// 4. SIGKILL during ingest
// ---------------------------------------------------------------------------------------------

/// Acknowledged (seq, index) pairs.
type Acks = Arc<Mutex<Vec<(u64, u64)>>>;

/// Posts batches of `signer`'s records from `from` on until the server stops answering or the
/// deadline passes; records every acknowledged (seq, index). Records are a pure function of
/// seq, so a record resent after a restart is the same bytes. Returns whether the server went
/// away (rather than the deadline passing).
fn ingest(h: Http, signer: &str, key: &SigningKey, from: u64, acks: Acks, mut rng: Rng) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seq = from;
    while Instant::now() < deadline {
        let len = 1 + rng.below(48);
        let batch: Vec<_> = (seq..seq + len)
            .map(|s| usage(signer, key, s, "tenant-k", &(1 + s % 8).to_string()))
            .collect();
        let Ok(r) = h.try_post_records(&batch) else {
            return true; // the server is gone
        };
        let ans = r.ok_json(200);
        let outcomes = ans["outcomes"].as_array().unwrap();
        assert_eq!(outcomes.len() as u64, len);
        let mut got = acks.lock().unwrap();
        for (i, o) in outcomes.iter().enumerate() {
            assert!(
                o["status"] == json!("accepted") || o["status"] == json!("duplicate"),
                "seq {}: {o}",
                seq + i as u64
            );
            got.push((seq + i as u64, o["index"].as_u64().unwrap()));
        }
        seq += len;
    }
    false
}

/// Checks that each acknowledged seq of `signer` is in `entries` once, at its index, that no
/// (signer, seq) is there twice, and that indexes are 0..n in order.
fn assert_acknowledged_once(entries: &[Value], signer: &str, acked: &HashMap<u64, u64>) {
    let mut at: HashMap<(String, u64), Vec<u64>> = HashMap::new();
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e["index"], json!(i), "entries are 0..n in order");
        let env = &e["entry"]["envelope"];
        at.entry((
            env["signer"].as_str().unwrap().to_owned(),
            env["seq"].as_u64().unwrap(),
        ))
        .or_default()
        .push(i as u64);
    }
    for (k, v) in &at {
        assert_eq!(v.len(), 1, "{k:?} is logged {} times", v.len());
    }
    for (seq, index) in acked {
        assert_eq!(
            at.get(&(signer.to_owned(), *seq)),
            Some(&vec![*index]),
            "acknowledged seq {seq} of {signer}"
        );
    }
}

both_backends!(sigkill_during_ingest, |db: &TestDb| {
    const ROUNDS: usize = 4;
    let log = init(db);
    let key = sample::key("node-kill");
    {
        let srv = log.serve();
        srv.http().register(&log.admin, "node-kill", "node", &key);
        srv.http()
            .parties_on(&log.admin, &["tenant-k"], &["node-kill"]);
    }
    let mut rng = Rng::from_clock("sigkill_during_ingest");
    let mut acked: HashMap<u64, u64> = HashMap::new();
    for round in 0..ROUNDS {
        let mut srv = log.serve();
        // Start a little before the last acknowledged seq, so some records are resent.
        let from = acked.keys().max().map_or(1, |m| m.saturating_sub(5).max(1));
        let acks: Acks = Arc::default();
        let client = {
            let (h, acks, key) = (srv.http(), acks.clone(), key.clone());
            let rng = Rng(rng.below(u64::MAX) | 1);
            std::thread::spawn(move || ingest(h, "node-kill", &key, from, acks, rng))
        };
        let started = Instant::now();
        while acks.lock().unwrap().is_empty() && started.elapsed() < START_TIMEOUT {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(50 + rng.below(600)));
        srv.kill();
        let cut_off = client.join().expect("the client thread");
        assert!(
            cut_off,
            "round {round}: the kill did not interrupt the stream"
        );
        let got = acks.lock().unwrap().clone();
        assert!(!got.is_empty(), "round {round}: nothing was acknowledged");
        for (seq, index) in got {
            if let Some(prev) = acked.insert(seq, index) {
                assert_eq!(prev, index, "seq {seq} acknowledged at two indexes");
            }
        }
    }
    // Restart on the same database: everything acknowledged is there, once.
    let srv = log.serve();
    let h = srv.http();
    let entries = h.all_entries(&log.admin);
    assert_acknowledged_once(&entries, "node-kill", &acked);
    eprintln!(
        "{ROUNDS} SIGKILLs on {}: {} acknowledged records, {} entries",
        db.backend,
        acked.len(),
        entries.len()
    );
    drop(srv);
    log.assert_verifies(entries.len() as u64);
});

// ---------------------------------------------------------------------------------------------
// 5. Two servers on one database
// ---------------------------------------------------------------------------------------------

both_backends!(two_servers_one_database, |db: &TestDb| {
    const AGENTS: usize = 4;
    const BATCHES: u64 = 30;
    const BATCH: u64 = 25;
    let log = init(db);
    let servers = [log.serve(), log.serve()];
    let https = [servers[0].http(), servers[1].http()];
    let keys: Vec<SigningKey> = (0..AGENTS)
        .map(|i| sample::key(&format!("agent-{i}")))
        .collect();
    for (i, k) in keys.iter().enumerate() {
        https[i % 2].register(&log.admin, &format!("agent-{i}"), "node", k);
    }
    // tenant-m's lease covers 8 sample-model GPUs of each agent's node.
    let nodes: Vec<String> = (0..AGENTS).map(|i| format!("agent-{i}")).collect();
    let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
    https[0].parties_on(&log.admin, &["tenant-m"], &nodes);
    let agents: Vec<_> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let (https, k) = (https.clone(), k.clone());
            std::thread::spawn(move || {
                let signer = format!("agent-{i}");
                let mut acks: HashMap<u64, u64> = HashMap::new();
                for j in 0..BATCHES {
                    let batch: Vec<_> = (j * BATCH + 1..=(j + 1) * BATCH)
                        .map(|s| usage(&signer, &k, s, "tenant-m", "1"))
                        .collect();
                    let via = (i + j as usize) % 2;
                    let ans = https[via].post_records(&batch);
                    for (o, e) in ans["outcomes"].as_array().unwrap().iter().zip(&batch) {
                        assert_eq!(o["status"], json!("accepted"), "{signer}: {o}");
                        acks.insert(e.seq, o["index"].as_u64().unwrap());
                    }
                    // Now and then the same batch again through the other server: duplicates,
                    // at the same indexes.
                    if j % 5 == 0 {
                        let again = https[1 - via].post_records(&batch);
                        for (o, e) in again["outcomes"].as_array().unwrap().iter().zip(&batch) {
                            assert_eq!(o, &json!({"status": "duplicate", "index": acks[&e.seq]}));
                        }
                    }
                }
                acks
            })
        })
        .collect();
    let acks: Vec<HashMap<u64, u64>> = agents.into_iter().map(|t| t.join().unwrap()).collect();

    let size = https[0].size();
    assert_eq!(https[1].size(), size);
    // The policy entry, tenant-m and its lease, then each agent's node, key and records.
    assert_eq!(size, 3 + AGENTS as u64 * (2 + BATCHES * BATCH));
    let entries = https[1].all_entries(&log.admin);
    assert_eq!(entries.len() as u64, size);
    let mut used: BTreeSet<u64> = BTreeSet::new();
    for (i, a) in acks.iter().enumerate() {
        assert_eq!(a.len() as u64, BATCHES * BATCH);
        assert_acknowledged_once(&entries, &format!("agent-{i}"), a);
        used.extend(a.values().copied());
    }
    // One linear log: records and the ledger's entries fill 0..size with nothing left over.
    for e in &entries {
        if e["entry"]["envelope"]["signer"] == json!("ledger") {
            assert!(used.insert(e["index"].as_u64().unwrap()));
        }
    }
    assert_eq!(used, (0..size).collect::<BTreeSet<_>>());
    // Both servers sign checkpoints of the same tree.
    let verifier_key = https[0].get("/v1/log", None).ok_json(200)["verifier_key"]
        .as_str()
        .unwrap()
        .to_owned();
    let root = mth(&leaf_hashes(&entries));
    for h in &https {
        let note = h.checkpoint_at(size, &verifier_key);
        let cp = verify_checkpoint(note.as_bytes(), &verifier_key).unwrap();
        assert_eq!(*cp.hash(), root);
    }
    drop(servers);
    log.assert_verifies(size);
});

// ---------------------------------------------------------------------------------------------
// Regressions: bugs once in src/ (see the notes on each)
// ---------------------------------------------------------------------------------------------

// Concurrent creations of one tenant: exactly one 201, every other a 409. Once
// `store::access::create_tenant` checked, then inserted, outside a transaction, and the losing
// insert's unique violation became a 500.
both_backends!(
    racing_tenant_creations_answer_201_once_then_409,
    |db: &TestDb| {
        let log = init(db);
        let srv = log.serve();
        let h = srv.http();
        for n in 0..10 {
            let racers: Vec<_> = (0..8)
                .map(|_| {
                    let (h, admin) = (h.clone(), log.admin.clone());
                    let body = json!({"id": format!("t{n}"), "name": "x"});
                    std::thread::spawn(move || h.post("/v1/tenants", Some(&admin), &body))
                })
                .collect();
            let mut created = 0;
            for r in racers {
                let r = r.join().unwrap();
                if r.status == 201 {
                    created += 1;
                } else {
                    r.assert_problem(409, "conflict", "the losers of the race");
                }
            }
            assert_eq!(created, 1, "tenant t{n}");
        }
    }
);

// A revocation reason long enough to push the ledger's own entry over the 8 KiB envelope
// limit is the caller's mistake (a 400 naming `reason`), not a 500; and nothing is logged.
both_backends!(a_long_revocation_reason_is_a_400, |db: &TestDb| {
    let log = init(db);
    let srv = log.serve();
    let h = srv.http();
    let k = sample::key("long-reason");
    h.register(&log.admin, "node-1", "node", &k);
    let size = h.size();
    let path = format!("/v1/signers/node-1/keys/{}/revoke", key_id(&k));
    let body = json!({"reason": "x".repeat(9000)});
    h.post(&path, Some(&log.admin), &body)
        .assert_problem(400, "invalid_parameter", "long reason");
    assert_eq!(h.size(), size);
});

// `/docs` (Swagger UI) is served on the console's origin: a strict Content-Security-Policy,
// no framing, no sniffing and no referrer on the page and each of its files (issue #23); and
// Swagger UI still renders the document under that policy in a real browser, with no policy
// violation while it is used.
#[test]
fn docs_are_locked_down_and_still_work() {
    let db = sqlite();
    let log = init(&db);
    let srv = log.serve();
    for path in [
        "/docs",
        "/docs/",
        "/docs/swagger-ui-bundle.js",
        "/docs/swagger-initializer.js",
        "/docs/swagger-ui.css",
    ] {
        let r = ureq::get(&format!("{}{path}", srv.base)).call().unwrap();
        let header = |name: &str| {
            r.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_else(|| panic!("{path}: no {name}"))
                .to_owned()
        };
        let csp = header("content-security-policy");
        for directive in [
            "default-src 'none'",
            "script-src 'self'",
            "frame-ancestors 'none'",
            "object-src 'none'",
            "base-uri 'none'",
            "connect-src 'self'",
        ] {
            assert!(csp.contains(directive), "{path}: {csp} lacks {directive}");
        }
        let script_src = csp
            .split(';')
            .map(str::trim)
            .find(|d| d.starts_with("script-src"))
            .unwrap();
        assert!(
            !script_src.contains("unsafe"),
            "{path}: scripts must not be inline or eval: {script_src}"
        );
        assert_eq!(header("x-frame-options"), "DENY", "{path}");
        assert_eq!(header("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(header("referrer-policy"), "no-referrer", "{path}");
    }
    // The page itself has no inline script or style element for the policy to refuse.
    let page = ureq::get(&format!("{}/docs", srv.base))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert!(!page.contains("<style"), "inline style element");
    for script in page.split("<script").skip(1) {
        assert!(
            script.trim_start().starts_with("src="),
            "inline script: {script}"
        );
    }

    let Some(b) = common::webdriver::Browser::start() else {
        return;
    };
    b.navigate(&format!("{}/docs", srv.base));
    b.execute(
        "window.__violations = [];
         document.addEventListener('securitypolicyviolation',
           e => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));",
        json!([]),
    );
    // Swagger UI fetched /openapi.json and rendered its operations.
    let op = b.wait_for("Swagger UI renders the operations", || {
        b.try_find(".opblock-summary")
    });
    assert!(b
        .try_find(".info .title")
        .is_some_and(|t| b.text(&t).contains("gpuledger")));
    // The one inline style Swagger UI renders (its logo's colours) is allowed by its hash:
    // refused, the logo would be black.
    let fill = b.execute(
        "const e = document.querySelector('.logo_small_svg__cls-3');
         return e ? getComputedStyle(e).fill : 'no logo';",
        json!([]),
    );
    assert_eq!(
        fill,
        json!("rgb(133, 234, 45)"),
        "Swagger UI's logo style was refused"
    );
    let csp = gpuledger::api::ops::DOCS_CONTENT_SECURITY_POLICY;
    assert!(csp.contains(gpuledger::api::ops::DOCS_LOGO_STYLE_SHA256));
    assert!(!csp.contains("unsafe"), "{csp}");
    // Open an operation and its "Try it out" form: no violation on the way.
    b.click(&op);
    let try_it = b.wait_for("Try it out", || b.try_find(".try-out__btn"));
    b.click(&try_it);
    b.wait_for("the form opens", || b.try_find(".execute"));
    let violations = b.execute("return window.__violations;", json!([]));
    assert_eq!(violations, json!([]), "CSP violations");
}
