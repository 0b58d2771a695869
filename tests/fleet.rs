//! Issue #27 attacked over HTTP, on SQLite and PostgreSQL: a key registered for node `n1` (8
//! GPUs) tries to bill, for one and the same hour, the honest 8 GPUs under lease L-acme-1, the
//! same hour with no lease, under acme's other lease, 1,024 GPUs for the next hour, and the same
//! hour to a second tenant, and the node's energy to a tenant that leases none of it or above
//! what the tenant's GPUs draw. Every attack is refused with its own reason and the tenant's preview
//! is what the honest record makes; a lease that would overbook n1 is refused at registration.
//! (The same records in a hand-built log are named by every verifier: tests/trust.rs.)

mod common;

use common::*;
use ed25519_dalek::SigningKey;
use gpuledger::core::envelope::Envelope;
use gpuledger::core::record::{Body, Energy, GpuUsage, Kind};
use gpuledger::core::time::Timestamp;
use gpuledger::sample;
use serde_json::{json, Value};

/// A `gpu_usage` record of n1 for [start, end), signed with `key`.
fn record(
    key: &SigningKey,
    seq: u64,
    (tenant, lease): (&str, Option<&str>),
    count: &str,
    (start, end): (Timestamp, Timestamp),
) -> Envelope {
    let body = Body::GpuUsage(GpuUsage {
        tenant: tenant.into(),
        lease: lease.map(str::to_owned),
        region: sample::REGION.into(),
        node: "n1".into(),
        gpu_model: sample::MODEL.into(),
        gpu_count: dec(count),
        start,
        end,
        gpu_seconds: dec(count) * rust_decimal::Decimal::from(start.seconds_until(end)),
    });
    Envelope::sign(sample::ORIGIN, Kind::GpuUsage, "n1", key, seq, &body)
}

/// An `energy` record of n1 for [start, end), billed to `tenant`, signed with `key`.
fn energy(
    key: &SigningKey,
    seq: u64,
    tenant: &str,
    kwh: &str,
    span: (Timestamp, Timestamp),
) -> Envelope {
    energy_of(key, seq, Some(tenant), kwh, span)
}

/// An `energy` record of n1 for [start, end), billed to `tenant` if any, signed with `key`.
fn energy_of(
    key: &SigningKey,
    seq: u64,
    tenant: Option<&str>,
    kwh: &str,
    (start, end): (Timestamp, Timestamp),
) -> Envelope {
    let body = Body::Energy(Energy {
        tenant: tenant.map(str::to_owned),
        region: sample::REGION.into(),
        node: "n1".into(),
        start,
        end,
        kwh: dec(kwh),
    });
    Envelope::sign(sample::ORIGIN, Kind::Energy, "n1", key, seq, &body)
}

/// A lease body covering `items` (`{node, gpus}` or `{node, gpu_model, count}` objects) from
/// the sample lease start on.
fn lease(id: &str, tenant: &str, items: Value) -> Value {
    json!({"lease": id, "tenant": tenant, "class": "on_demand",
           "from": Timestamp::from_unix(sample::LEASE_FROM).unwrap().to_string(), "nodes": items})
}

/// The reason and field of a refused outcome, or "accepted".
fn verdict(outcome: &Value) -> String {
    match outcome["status"].as_str() {
        Some("rejected") => format!(
            "{} {}",
            outcome["reason"].as_str().unwrap_or("?"),
            outcome["field"].as_str().unwrap_or("-")
        ),
        Some(s) => s.to_owned(),
        None => panic!("no status in {outcome}"),
    }
}

both_backends!(
    a_node_key_bills_only_the_gpus_its_tenants_lease,
    |db: &TestDb| {
        let log = init(db);
        let since = base_day().plus(-86_400);
        log.write_at(since, sample_prices(since, "2"));
        let srv = log.serve();
        let h = srv.http();
        let admin = log.admin.clone();
        let a = Some(admin.as_str());
        for n in ["n1", "n2"] {
            h.post("/v1/nodes", a, &sample::node(n).to_value())
                .ok_json(201);
        }
        for t in ["acme", "beta"] {
            h.post("/v1/tenants", a, &json!({"id": t, "name": t}))
                .ok_json(201);
        }
        // acme leases all of n1, and 4 H100s of n2; beta the other 4 of n2.
        let leases = [
            lease(
                "L-acme-1",
                "acme",
                json!([{"node": "n1", "gpus": [0, 1, 2, 3, 4, 5, 6, 7]}]),
            ),
            lease(
                "L-acme-2",
                "acme",
                json!([{"node": "n2", "gpu_model": sample::MODEL, "count": "4"}]),
            ),
            lease(
                "L-beta-1",
                "beta",
                json!([{"node": "n2", "gpu_model": sample::MODEL, "count": "4"}]),
            ),
        ];
        for l in &leases {
            h.post("/v1/leases", a, l).ok_json(201);
        }
        // Leasing n1 to beta too is refused at registration, by GPU or by count, and logs nothing.
        let size = h.size();
        for items in [
            json!([{"node": "n1", "gpus": [7]}]),
            json!([{"node": "n1", "gpus": [7], "share": "0.5"}]),
            json!([{"node": "n1", "gpu_model": sample::MODEL, "count": "1"}]),
            json!([{"node": "n2", "gpu_model": sample::MODEL, "count": "0.5"}]),
        ] {
            let r = h.post("/v1/leases", a, &lease("L-beta-2", "beta", items.clone()));
            assert_eq!(r.status, 400, "{items}: {}", r.lossy());
            let p = r.json();
            assert_eq!(p["errors"][0]["reason"], "lease_overbooked", "{items}: {p}");
            assert_eq!(p["errors"][0]["field"], "body.nodes", "{p}");
        }
        let r = h.post(
            "/v1/leases",
            a,
            &lease("L-beta-2", "beta", json!([{"node": "n1", "gpus": [8]}])),
        );
        assert_eq!(
            r.json()["errors"][0]["reason"],
            "unknown_gpu",
            "{}",
            r.lossy()
        );
        assert_eq!(h.size(), size, "refused leases log nothing");

        let key = sample::key("n1");
        h.register(&admin, "n1", "node", &key);
        let hour = (base_day(), base_day().plus(3_600));
        let next = (hour.1, hour.1.plus(3_600));
        let honest = record(&key, 1, ("acme", Some("L-acme-1")), "8", hour);
        let ans = h.post_records(std::slice::from_ref(&honest));
        assert_eq!(verdict(&ans["outcomes"][0]), "accepted", "{ans}");
        let period = format!("tenant=acme&from={}&to={}", hour.0, next.1);
        let preview = |h: &Http| {
            h.get(&format!("/v1/invoices/preview?{period}"), a)
                .ok_json(200)
        };
        let before = preview(&h);
        assert_eq!(
            before["currencies"][0]["total"], "16.00",
            "8 GPU-h at 2: {before}"
        );

        let size = h.size();
        let attacks = [
            (
                "the same hour with no lease",
                record(&key, 2, ("acme", None), "8", hour),
                "lease_not_on_node body.lease",
            ),
            (
                "the same hour under acme's other lease",
                record(&key, 3, ("acme", Some("L-acme-2")), "8", hour),
                "lease_not_on_node body.lease",
            ),
            (
                "1,024 GPUs on the 8-GPU node",
                record(&key, 4, ("acme", Some("L-acme-1")), "1024", next),
                "over_capacity body.gpu_count",
            ),
            (
                "9 GPUs of an 8-GPU lease",
                record(&key, 5, ("acme", Some("L-acme-1")), "9", next),
                "over_capacity body.gpu_count",
            ),
            (
                "the same hour to a second tenant",
                record(&key, 6, ("beta", Some("L-beta-1")), "8", hour),
                "lease_not_on_node body.lease",
            ),
            (
                "the same hour to a second tenant, under acme's lease",
                record(&key, 7, ("beta", Some("L-acme-1")), "8", hour),
                "lease_tenant_mismatch body.lease",
            ),
            (
                "the same hour again under the same lease",
                record(&key, 8, ("acme", Some("L-acme-1")), "8", hour),
                "overlapping_interval body.start",
            ),
            (
                "before the lease's term",
                record(
                    &key,
                    9,
                    ("acme", Some("L-acme-1")),
                    "8",
                    (
                        Timestamp::from_unix(sample::LEASE_FROM - 3_600).unwrap(),
                        Timestamp::from_unix(sample::LEASE_FROM).unwrap(),
                    ),
                ),
                "outside_lease_term body.start",
            ),
            (
                // n1: 8 GPUs of at most 1000 W, 8 × 1000 W × 3600 s + 5 % = 8.4 kWh an hour.
                "the node's energy billed to beta, which leases none of it",
                energy(&key, 11, "beta", "8.4", hour),
                "lease_not_on_node body.tenant",
            ),
            (
                "more energy than acme's 8 leased GPUs draw",
                energy(&key, 12, "acme", "8.400001", hour),
                "energy_over_bound body.kwh",
            ),
        ];
        let batch: Vec<Envelope> = attacks.iter().map(|(_, e, _)| e.clone()).collect();
        let ans = h.post_records(&batch);
        for (i, (what, _, want)) in attacks.iter().enumerate() {
            assert_eq!(
                &verdict(&ans["outcomes"][i]),
                want,
                "{what}: {}",
                ans["outcomes"][i]
            );
        }
        assert_eq!(h.size(), size, "no attack reached the log");
        // Without n1's key, nothing is learnt of leases: a forged copy of each attack (its
        // signature's last byte flipped) is answered bad_signature, whatever else is wrong.
        let forged: Vec<Envelope> = attacks
            .iter()
            .enumerate()
            .map(|(i, (_, e, _))| {
                use base64::prelude::{Engine, BASE64_STANDARD};
                let mut e = e.clone();
                e.seq = 100 + i as u64;
                let mut sig = BASE64_STANDARD.decode(&e.sig).unwrap();
                *sig.last_mut().unwrap() ^= 1;
                e.sig = BASE64_STANDARD.encode(sig);
                e
            })
            .collect();
        let ans = h.post_records(&forged);
        for (i, (what, _, _)) in attacks.iter().enumerate() {
            assert_eq!(
                verdict(&ans["outcomes"][i]),
                "bad_signature sig",
                "forged {what}"
            );
        }
        // Nor of the key's scope: a record for n2 signed with n1's key is node_not_allowed,
        // its forgery bad_signature.
        let other = record(&key, 200, ("acme", Some("L-acme-2")), "1", hour);
        let mut body = other.body.clone();
        body["node"] = "n2".into();
        let body = Body::from_value(Kind::GpuUsage, &body).unwrap();
        let honest_other = Envelope::sign(sample::ORIGIN, Kind::GpuUsage, "n1", &key, 200, &body);
        let mut forged_other = honest_other.clone();
        forged_other.seq = 201;
        let ans = h.post_records(&[honest_other, forged_other]);
        assert_eq!(
            verdict(&ans["outcomes"][0]),
            "node_not_allowed body.node",
            "{ans}"
        );
        assert_eq!(verdict(&ans["outcomes"][1]), "bad_signature sig", "{ans}");
        assert_eq!(
            preview(&h),
            before,
            "acme's preview is the honest record's alone"
        );
        // The honest next hour is still accepted: the refusals consumed nothing.
        let ans = h.post_records(&[record(&key, 10, ("acme", Some("L-acme-1")), "8", next)]);
        assert_eq!(verdict(&ans["outcomes"][0]), "accepted", "{ans}");
        // The fleet page's source lists each node's leases.
        let nodes = h.get("/v1/nodes", a).ok_json(200);
        let on = |n: &str| -> Vec<String> {
            nodes["nodes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["node"] == n)
                .unwrap()["leases"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l["lease"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(on("n1"), ["L-acme-1"]);
        assert_eq!(on("n2"), ["L-acme-2", "L-beta-1"]);
    }
);

// A lease's term bounds its usage at the second: a record may end exactly where the term ends,
// not a second later, and start exactly where it starts.
both_backends!(usage_stays_within_its_lease_term, |db: &TestDb| {
    let log = init(db);
    let srv = log.serve();
    let h = srv.http();
    let admin = log.admin.clone();
    let a = Some(admin.as_str());
    h.post("/v1/nodes", a, &sample::node("n1").to_value())
        .ok_json(201);
    h.post("/v1/tenants", a, &json!({"id": "acme", "name": "acme"}))
        .ok_json(201);
    let (from, to) = (base_day(), base_day().plus(7_200));
    h.post(
        "/v1/leases",
        a,
        &json!({"lease": "L-2h", "tenant": "acme", "class": "on_demand", "from": from.to_string(),
                "to": to.to_string(), "nodes": [{"node": "n1", "gpus": [0, 1], "share": "0.5"}]}),
    )
    .ok_json(201);
    let key = sample::key("n1");
    h.register(&admin, "n1", "node", &key);
    let l = ("acme", Some("L-2h"));
    let cases = [
        (record(&key, 1, l, "1", (from, from.plus(60))), "accepted"),
        (
            record(&key, 2, l, "1.000001", (from.plus(60), from.plus(120))),
            "over_capacity body.gpu_count",
        ),
        (record(&key, 4, l, "1", (to.plus(-60), to)), "accepted"),
        (
            record(&key, 5, l, "1", (to.plus(-1), to.plus(1))),
            "outside_lease_term body.end",
        ),
        (
            record(&key, 6, l, "1", (from.plus(-60), from)),
            "outside_lease_term body.start",
        ),
    ];
    let batch: Vec<Envelope> = cases.iter().map(|(e, _)| e.clone()).collect();
    let want: Vec<&str> = cases.iter().map(|(_, w)| *w).collect();
    let ans = h.post_records(&batch);
    let got: Vec<String> = ans["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .map(verdict)
        .collect();
    assert_eq!(got, want, "{ans}");
});

// A tenant's energy names no lease: a lease registered after the server's cache of leases was
// filled (by a usage record naming another lease) still bills that tenant's energy, and only
// within it; a tenant with no lease on the node is still refused.
both_backends!(
    energy_sees_a_lease_registered_after_the_cache,
    |db: &TestDb| {
        let log = init(db);
        let srv = log.serve();
        let h = srv.http();
        let admin = log.admin.clone();
        let a = Some(admin.as_str());
        h.post("/v1/nodes", a, &sample::node("n1").to_value())
            .ok_json(201);
        for t in ["acme", "beta", "gamma"] {
            h.post("/v1/tenants", a, &json!({"id": t, "name": t}))
                .ok_json(201);
        }
        h.post(
            "/v1/leases",
            a,
            &lease(
                "L-acme",
                "acme",
                json!([{"node": "n1", "gpus": [0, 1, 2, 3]}]),
            ),
        )
        .ok_json(201);
        let key = sample::key("n1");
        h.register(&admin, "n1", "node", &key);
        let hour = (base_day(), base_day().plus(3_600));
        // The cache now holds every lease there is: acme's.
        let ans = h.post_records(&[record(&key, 1, ("acme", Some("L-acme")), "4", hour)]);
        assert_eq!(verdict(&ans["outcomes"][0]), "accepted", "{ans}");
        h.post(
            "/v1/leases",
            a,
            &lease(
                "L-beta",
                "beta",
                json!([{"node": "n1", "gpus": [4, 5, 6, 7]}]),
            ),
        )
        .ok_json(201);
        // beta's 4 GPUs × 1000 W × 3600 s + 5 % = 4.2 kWh; each record alone in its batch.
        for (seq, tenant, kwh, want) in [
            (2, "beta", "4.2", "accepted"),
            (3, "gamma", "0.1", "lease_not_on_node body.tenant"),
            (4, "acme", "4.200001", "energy_over_bound body.kwh"),
        ] {
            let ans = h.post_records(&[energy(&key, seq, tenant, kwh, hour)]);
            assert_eq!(verdict(&ans["outcomes"][0]), want, "{tenant}: {ans}");
        }
    }
);

/// An `energy` record of n1's own (no tenant) for [start, end), signed with `key`.
fn node_energy(key: &SigningKey, seq: u64, kwh: &str, span: (Timestamp, Timestamp)) -> Envelope {
    energy_of(key, seq, None, kwh, span)
}

// Issue #27, node updates: an update adds capacity for the records appended after it. A record
// refused because the node lacked a GPU model or power is accepted when sent again after the
// update (the agent holds such records), though the ledger's cache had read the node before;
// an update that would take capacity away, or reuse a UUID, is refused and logs nothing; the
// fleet listing shows the node as its entries made it; the log verifies.
both_backends!(a_node_update_adds_capacity_from_then_on, |db: &TestDb| {
    let log = init(db);
    let srv = log.serve();
    let h = srv.http();
    let admin = log.admin.clone();
    let a = Some(admin.as_str());
    let n1 = h
        .post("/v1/nodes", a, &sample::node("n1").to_value())
        .ok_json(201);
    h.post("/v1/tenants", a, &json!({"id": "acme", "name": "acme"}))
        .ok_json(201);
    h.post(
        "/v1/leases",
        a,
        &lease(
            "L-acme-1",
            "acme",
            json!([{"node": "n1", "gpus": [0, 1, 2, 3, 4, 5, 6, 7]}]),
        ),
    )
    .ok_json(201);
    let key = sample::key("n1");
    h.register(&admin, "n1", "node", &key);
    let hour = (base_day(), base_day().plus(3_600));
    // The ledger's cache reads n1 for this record.
    let ans = h.post_records(&[record(&key, 1, ("acme", Some("L-acme-1")), "8", hour)]);
    assert_eq!(verdict(&ans["outcomes"][0]), "accepted", "{ans}");
    // n1's 8 GPUs × 1000 W for an hour, +5 %: 8.4 kWh. 10 kWh is above it.
    let heavy = node_energy(&key, 2, "10", hour);
    let ans = h.post_records(std::slice::from_ref(&heavy));
    assert_eq!(
        verdict(&ans["outcomes"][0]),
        "energy_over_bound body.kwh",
        "{ans}"
    );
    let l40s = |seq: u64, lease: &str| {
        let mut body = record(&key, seq, ("acme", Some(lease)), "1", hour).body;
        body["gpu_model"] = "L40S".into();
        let body = Body::from_value(Kind::GpuUsage, &body).unwrap();
        Envelope::sign(sample::ORIGIN, Kind::GpuUsage, "n1", &key, seq, &body)
    };
    let ans = h.post_records(&[l40s(3, "L-acme-1")]);
    assert_eq!(
        verdict(&ans["outcomes"][0]),
        "unknown_gpu_model body.gpu_model",
        "{ans}"
    );

    // Updates that would take capacity away, or name what the log lacks, log nothing.
    let size = h.size();
    let gpu8 = |uuid: &str, model: &str| json!({"index": 8, "uuid": uuid, "model": model});
    for (body, reason, field) in [
        (
            json!({"node": "n9", "max_watts_per_gpu": "1200"}),
            "unknown_node",
            "body.node",
        ),
        (
            json!({"node": "n1", "gpus": [gpu8("GPU-sample-n1-0", "L40S")]}),
            "invalid_field",
            "body.gpus[0].uuid",
        ),
        (
            json!({"node": "n1", "gpus": [{"index": 0, "uuid": "GPU-n1-0b", "model": "L40S"}]}),
            "invalid_field",
            "body.gpus[0].model",
        ),
        (
            json!({"node": "n1", "max_watts_per_gpu": "1000"}),
            "invalid_field",
            "body.max_watts_per_gpu",
        ),
        (json!({"node": "n1"}), "invalid_field", "body.gpus"),
    ] {
        let r = h.post("/v1/node-updates", a, &body);
        assert_eq!(r.status, 400, "{body}: {}", r.lossy());
        let p = r.json();
        assert_eq!(
            (
                p["errors"][0]["reason"].as_str(),
                p["errors"][0]["field"].as_str()
            ),
            (Some(reason), Some(field)),
            "{body}: {p}"
        );
    }
    assert_eq!(h.size(), size, "refused updates log nothing");
    // GPU 8, an L40S, and 1200 W; then GPU 0 replaced by another board of its model.
    let up = h
        .post(
            "/v1/node-updates",
            a,
            &json!({"node": "n1", "gpus": [gpu8("GPU-n1-8", "L40S")], "max_watts_per_gpu": "1200"}),
        )
        .ok_json(201);
    assert_eq!(up, json!({"index": size, "kind": "node_updated"}));
    h.post(
        "/v1/node-updates",
        a,
        &json!({"node": "n1", "gpus": [{"index": 0, "uuid": "GPU-n1-0b", "model": sample::MODEL}]}),
    )
    .ok_json(201);

    // The held energy, sent again: 9 GPUs × 1200 W for an hour, +5 %, is 11.34 kWh.
    let ans = h.post_records(std::slice::from_ref(&heavy));
    assert_eq!(verdict(&ans["outcomes"][0]), "accepted", "{ans}");
    // The L40S is n1's now, but acme's lease does not cover it; a lease of it does.
    let ans = h.post_records(&[l40s(3, "L-acme-1")]);
    assert_eq!(
        verdict(&ans["outcomes"][0]),
        "lease_not_on_node body.lease",
        "{ans}"
    );
    h.post(
        "/v1/leases",
        a,
        &lease("L-acme-2", "acme", json!([{"node": "n1", "gpus": [8]}])),
    )
    .ok_json(201);
    let ans = h.post_records(&[l40s(3, "L-acme-2")]);
    assert_eq!(verdict(&ans["outcomes"][0]), "accepted", "{ans}");

    // The fleet as its entries made it.
    let nodes = h.get("/v1/nodes", a).ok_json(200);
    let node = &nodes["nodes"][0];
    assert_eq!(node["index"], n1["index"], "{node}");
    assert_eq!(node["max_watts_per_gpu"], "1200", "{node}");
    assert_eq!(node["gpus"].as_array().unwrap().len(), 9, "{node}");
    assert_eq!(node["gpus"][0]["uuid"], "GPU-n1-0b", "{node}");
    assert_eq!(node["gpus"][8], gpu8("GPU-n1-8", "L40S"), "{node}");
    assert_eq!(node["updates"][0]["index"], size, "{node}");
    assert_eq!(node["updates"].as_array().unwrap().len(), 2, "{node}");
    assert_eq!(node["leases"].as_array().unwrap().len(), 2, "{node}");
    verified(&db.url);
});
