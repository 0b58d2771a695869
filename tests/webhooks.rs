//! Standard Webhooks end to end (docs/WEBHOOKS.md), against the real `serve` binary and a local
//! receiver (tests/webhook_receiver.py) that checks every signature with independent
//! implementations: the `standardwebhooks` package for `v1` (HMAC), PyNaCl for `v1a`
//! (Ed25519). Without python3 and those packages the tests are skipped, loudly; under
//! `GPULEDGER_REQUIRE_PYTHON_VERIFIER=1` they fail.

mod common;

use common::http::{init, Http, Log};
use common::records::{base_day, dec, key_id, sample_prices};
use common::{Proc, TestDb};
use gpuledger::core::time::Timestamp;
use gpuledger::sample;
use serde_json::{json, Value};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Longest wait for deliveries to arrive.
const WAIT: Duration = Duration::from_secs(60);

fn receiver_ready() -> bool {
    let ready = std::process::Command::new("python3")
        .args(["-c", "import standardwebhooks, nacl"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ready {
        if std::env::var("GPULEDGER_REQUIRE_PYTHON_VERIFIER").as_deref() == Ok("1") {
            panic!("GPULEDGER_REQUIRE_PYTHON_VERIFIER=1 but python3 with standardwebhooks and pynacl is missing");
        }
        eprintln!("\n*** SKIPPED the webhook tests: run `python3 -m pip install standardwebhooks pynacl` ***");
    }
    ready
}

/// The receiver process and where it records.
struct Receiver {
    _proc: Proc,
    base: String,
    out: PathBuf,
    secrets: PathBuf,
}

impl Receiver {
    fn start(dir: &Path, public_key: &str) -> Receiver {
        let out = dir.join("received.jsonl");
        let secrets = dir.join("secrets");
        std::fs::create_dir_all(&secrets).unwrap();
        let mut child = std::process::Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/webhook_receiver.py"
            ))
            .arg(&out)
            .arg(public_key)
            .arg(&secrets)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap()
            .to_owned();
        Receiver {
            _proc: Proc(child),
            base: format!("http://127.0.0.1:{port}"),
            out,
            secrets,
        }
    }

    fn all(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// What `path` received, each with its parsed body.
    fn at(&self, path: &str) -> Vec<Value> {
        self.all()
            .into_iter()
            .filter(|r| r["path"] == path)
            .map(|mut r| {
                r["payload"] = serde_json::from_str(r["body"].as_str().unwrap()).unwrap();
                r
            })
            .collect()
    }

    /// Waits until `done` holds of what was received.
    fn wait_for(&self, what: &str, done: impl Fn(&Receiver) -> bool) {
        let start = Instant::now();
        while !done(self) {
            assert!(
                start.elapsed() < WAIT,
                "{what}: not received within {WAIT:?}; got {:#?}",
                self.all()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn types(rs: &[Value]) -> Vec<String> {
    let mut t: Vec<String> = rs
        .iter()
        .map(|r| r["payload"]["type"].as_str().unwrap().to_owned())
        .collect();
    t.sort();
    t.dedup();
    t
}

/// Starts `serve` with a `[webhooks]` table of `extra` lines.
fn serve(log: &Log<'_>, name: &str, webhooks: &str) -> (Proc, Http) {
    let config = log.dir.path().join(format!("{name}.toml"));
    std::fs::write(&config, format!("[webhooks]\n{webhooks}\n")).unwrap();
    let (child, base) = common::spawn_serve(
        &log.db.url,
        &log.key_path(),
        0,
        &[
            "--config",
            config.to_str().unwrap(),
            "--checkpoint-interval-seconds",
            "1",
        ],
    );
    (Proc(child), Http::new(&base))
}

const TEST_SETTINGS: &str =
    "allow_private_targets = true\nretry_schedule_seconds = [1, 1, 1]\ntimeout_seconds = 4";

fn endpoint(h: &Http, admin: &str, body: Value) -> Value {
    h.post("/v1/webhooks/endpoints", Some(admin), &body)
        .ok_json(201)
}

fn usage(
    k: &ed25519_dalek::SigningKey,
    seq: u64,
    tenant: &str,
    count: &str,
) -> gpuledger::core::envelope::Envelope {
    sample::usage(
        "node-1",
        k,
        seq,
        tenant,
        dec(count),
        base_day().plus(10 * seq as i64),
    )
}

/// Record `seq` of `tenant`: one GPU-hour, all 8 of node-1's H100-SXM-80G for the first 450 s
/// of the day (a node has no 360 GPUs to draw it in 10 s).
fn gpu_hour(
    k: &ed25519_dalek::SigningKey,
    seq: u64,
    tenant: &str,
) -> gpuledger::core::envelope::Envelope {
    use gpuledger::core::record::{Body, GpuUsage, Kind};
    let body = Body::GpuUsage(GpuUsage {
        tenant: tenant.into(),
        lease: Some(sample::lease(tenant)),
        region: sample::REGION.into(),
        node: "node-1".into(),
        gpu_model: "H100-SXM-80G".into(),
        gpu_count: dec("8"),
        start: base_day(),
        end: base_day().plus(450),
        gpu_seconds: dec("3600"),
    });
    gpuledger::core::envelope::Envelope::sign(
        sample::ORIGIN,
        Kind::GpuUsage,
        "node-1",
        k,
        seq,
        &body,
    )
}

both_backends!(events_arrive_signed_retried_and_scoped, |db: &TestDb| {
    if !receiver_ready() {
        return;
    }
    let log = init(db);
    // The prices of A's invoice below (1 GPU-hour at 2.5 CNY), logged first, when they take
    // effect, a day before the records (no price may take effect more than the policy's skew
    // before it is logged, and receive times never decrease).
    let since = base_day().plus(-86_400);
    log.write_at(since, sample_prices(since, "2.5"));
    let (_srv, h) = serve(&log, "serve", TEST_SETTINGS);
    let admin = log.admin.clone();
    let a = Some(admin.as_str());
    let pk = h.get("/v1/webhooks/public-key", None).ok_json(200);
    let pk = pk["public_key"].as_str().unwrap().to_owned();
    assert!(pk.starts_with("whpk_"), "{pk}");
    let rx = Receiver::start(log.dir.path(), &pk);
    let all: Vec<&str> = vec![
        "invoice.issued",
        "credit_note.created",
        "payment.recorded",
        "certificate.issued",
        "checkpoint.cosigned",
        "record.conflict",
        "record.excluded",
        "signer.revoked",
        "balance.low",
        "spend.threshold",
        "commitment.reached",
    ];
    let listed = h.get("/v1/webhooks/event-types", a).ok_json(200);
    assert_eq!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["type"].as_str().unwrap())
            .collect::<Vec<_>>(),
        all
    );
    h.parties(&admin, &["tenant-a", "tenant-b"]);
    let k = sample::key("wh-node");
    h.register(&admin, "node-1", "node", &k);

    let ok = endpoint(
        &h,
        &admin,
        json!({"url": format!("{}/ok", rx.base), "event_types": all}),
    );
    assert_eq!(ok["signing"], "ed25519");
    assert!(ok.get("secret").is_none());
    let hmac = endpoint(
        &h,
        &admin,
        json!({"url": format!("{}/hmac", rx.base),
        "event_types": ["signer.revoked", "record.conflict"], "signing": "hmac"}),
    );
    let secret = hmac["secret"].as_str().unwrap();
    assert!(secret.starts_with("whsec_"), "{secret}");
    std::fs::write(rx.secrets.join("hmac"), secret).unwrap();
    // The secret is shown once: never in a read.
    let read = h
        .get(
            &format!("/v1/webhooks/endpoints/{}", hmac["id"].as_str().unwrap()),
            a,
        )
        .ok_json(200);
    assert!(read.get("secret").is_none() && !read.to_string().contains(secret));
    let tenant_a = endpoint(
        &h,
        &admin,
        json!({"url": format!("{}/tenant-a", rx.base),
        "event_types": all, "tenant": "tenant-a"}),
    );
    let fail_once = endpoint(
        &h,
        &admin,
        json!({"url": format!("{}/fail-once", rx.base), "event_types": ["signer.revoked"]}),
    );
    let gone = endpoint(
        &h,
        &admin,
        json!({"url": format!("{}/gone", rx.base), "event_types": ["signer.revoked"]}),
    );
    let retry = endpoint(
        &h,
        &admin,
        json!({"url": format!("{}/retry-after", rx.base), "event_types": ["signer.revoked"]}),
    );
    // An unknown tenant, an unknown type, a bad signing: precise 4xx, nothing registered.
    h.post(
        "/v1/webhooks/endpoints",
        a,
        &json!({"url": rx.base, "event_types": all, "tenant": "nobody"}),
    )
    .assert_problem(404, "not_found", "unknown tenant");
    h.post(
        "/v1/webhooks/endpoints",
        a,
        &json!({"url": rx.base, "event_types": ["invoice.paid"]}),
    )
    .assert_problem(400, "invalid_parameter", "unknown type");
    h.post(
        "/v1/webhooks/endpoints",
        a,
        &json!({"url": rx.base, "event_types": all, "signing": "rsa"}),
    )
    .assert_problem(400, "invalid_parameter", "unknown signing");
    h.post(
        "/v1/webhooks/endpoints",
        a,
        &json!({"url": "ftp://example.org/", "event_types": all}),
    )
    .assert_problem(400, "invalid_parameter", "ftp");
    assert_eq!(
        h.get("/v1/webhooks/endpoints", a)
            .ok_json(200)
            .as_array()
            .unwrap()
            .len(),
        6
    );

    // Causes: two records, a conflicting record of each tenant, a certificate of A, a revoked key.
    let ans = h.post_records(&[gpu_hour(&k, 1, "tenant-a"), usage(&k, 2, "tenant-b", "4")]);
    assert_eq!(ans["accepted"], 2, "{ans}");
    let ia = ans["outcomes"][0]["index"].as_u64().unwrap();
    let ib = ans["outcomes"][1]["index"].as_u64().unwrap();
    let ans = h.post_records(&[usage(&k, 1, "tenant-a", "5"), usage(&k, 2, "tenant-b", "6")]);
    assert_eq!(ans["outcomes"][0]["reason"], "conflict", "{ans}");
    let cert = h
        .post(
            "/v1/certificates",
            a,
            &json!({"tenant": "tenant-a", "from": base_day().to_string(),
            "to": base_day().plus(86_400).to_string()}),
        )
        .ok_json(201);
    // An invoice of A (1 GPU-hour at 2.5 CNY: the prices logged first), a payment and a
    // credit note against it.
    let issued = h
        .post(
            "/v1/invoices",
            a,
            &json!({"tenant": "tenant-a", "from": base_day().to_string(),
            "to": base_day().plus(86_400).to_string()}),
        )
        .ok_json(201);
    let number = issued[0]["number"].as_str().unwrap().to_owned();
    h.post(
        "/v1/payments",
        a,
        &json!({"tenant": "tenant-a", "invoice": number, "currency": "CNY",
        "amount": "1.00", "note": "wire"}),
    )
    .ok_json(201);
    h.post(
        "/v1/credit-notes",
        a,
        &json!({"tenant": "tenant-a", "invoice": number, "currency": "CNY",
        "amount": "0.50", "note": "goodwill"}),
    )
    .ok_json(201);
    // A refused entry (a credit note above the invoice's total) is rolled back: no event.
    let refused = h.post(
        "/v1/credit-notes",
        a,
        &json!({"tenant": "tenant-a", "invoice": number,
        "currency": "CNY", "amount": "1000", "note": "too much"}),
    );
    assert!((400..500).contains(&refused.status), "{}", refused.lossy());
    // B's record excluded from rating: an event of B's (not on A's endpoint).
    h.post(
        "/v1/exclusions",
        a,
        &json!({"tenant": "tenant-b", "entry": ib, "reason": "disputed by B"}),
    )
    .ok_json(201);
    let kr = sample::key("wh-revoked");
    h.register(&admin, "node-r", "node", &kr);
    let revoked = h
        .post(
            &format!("/v1/signers/node-r/keys/{}/revoke", key_id(&kr)),
            a,
            &json!({}),
        )
        .ok_json(200);

    let want_ok = [
        "certificate.issued",
        "credit_note.created",
        "invoice.issued",
        "payment.recorded",
        "record.conflict",
        "record.excluded",
        "signer.revoked",
    ];
    rx.wait_for("the global endpoint's events", |r| {
        types(&r.at("/ok")) == want_ok && r.at("/ok").len() >= 8
    });
    rx.wait_for("the HMAC endpoint's events", |r| r.at("/hmac").len() >= 3);
    rx.wait_for("tenant A's events", |r| {
        types(&r.at("/tenant-a")) == want_ok[..5]
    });
    rx.wait_for("the retry after a 500", |r| r.at("/fail-once").len() >= 2);
    rx.wait_for("the retry after a 429", |r| r.at("/retry-after").len() >= 2);
    rx.wait_for("the 410", |r| !r.at("/gone").is_empty());

    // Every delivery verified by the independent implementation, with the scheme asked for.
    for r in rx.all() {
        assert!(r["error"].is_null(), "not verified: {r}");
        let want = if r["path"] == "/hmac" { "v1" } else { "v1a" };
        assert_eq!(r["scheme"], want, "{r}");
    }
    // Payloads: type, RFC 3339 timestamp, data with ids, the log index, decimals as strings,
    // the tenant.
    let ok_got = rx.at("/ok");
    let conflict_a = ok_got
        .iter()
        .find(|r| {
            r["payload"]["type"] == "record.conflict"
                && r["payload"]["data"]["tenant"] == "tenant-a"
        })
        .expect("A's conflict");
    assert_eq!(conflict_a["payload"]["data"]["log_index"], json!(ia));
    assert_eq!(conflict_a["payload"]["data"]["signer"], "node-1");
    assert_eq!(conflict_a["payload"]["data"]["seq"], 1);
    Timestamp::parse(conflict_a["payload"]["timestamp"].as_str().unwrap()).unwrap();
    let c = ok_got
        .iter()
        .find(|r| r["payload"]["type"] == "certificate.issued")
        .unwrap();
    assert_eq!(c["payload"]["data"]["id"], cert["id"], "{c}");
    assert_eq!(c["payload"]["data"]["tenant"], "tenant-a");
    assert!(c["payload"]["data"]["log_index"].is_u64());
    let of = |t: &str| {
        ok_got.iter().find(|r| r["payload"]["type"] == t).unwrap()["payload"]["data"].clone()
    };
    let credit_notes = ok_got
        .iter()
        .filter(|r| r["payload"]["type"] == "credit_note.created")
        .count();
    assert_eq!(credit_notes, 1, "the refused credit note caused an event");
    let inv = of("invoice.issued");
    assert_eq!(
        (inv["number"].as_str(), inv["tenant"].as_str()),
        (Some(number.as_str()), Some("tenant-a")),
        "{inv}"
    );
    assert_eq!(
        dec(inv["total"].as_str().unwrap()),
        dec(issued[0]["total"].as_str().unwrap()),
        "{inv}"
    );
    assert!(inv["log_index"].is_u64());
    for (t, amount) in [
        ("payment.recorded", "1.00"),
        ("credit_note.created", "0.50"),
    ] {
        let d = of(t);
        assert_eq!(d["invoice"].as_str(), Some(number.as_str()), "{d}");
        assert_eq!(
            dec(d["amount"].as_str().expect("amount as a decimal string")),
            dec(amount),
            "{d}"
        );
        assert!(d["log_index"].as_u64() > inv["log_index"].as_u64(), "{d}");
    }
    let rv = ok_got
        .iter()
        .find(|r| r["payload"]["type"] == "signer.revoked")
        .unwrap();
    assert_eq!(rv["payload"]["data"]["key_id"], json!(key_id(&kr)));
    assert_eq!(
        rv["payload"]["data"]["log_index"], revoked["revoked_index"],
        "{rv} {revoked}"
    );
    assert!(rv["payload"]["data"]["tenant"].is_null());
    let x = of("record.excluded");
    assert_eq!(
        (&x["tenant"], &x["entry"], &x["reason"]),
        (&json!("tenant-b"), &json!(ib), &json!("disputed by B")),
        "{x}"
    );
    assert!(x["log_index"].is_u64(), "{x}");
    // The tenant endpoint got only A's events; the HMAC one only its two types.
    for r in rx.at("/tenant-a") {
        assert_eq!(r["payload"]["data"]["tenant"], "tenant-a", "{r}");
    }
    assert_eq!(
        types(&rx.at("/hmac")),
        ["record.conflict", "signer.revoked"]
    );

    // 500 then 200: delivered, two attempts logged, one webhook-id.
    let f = rx.at("/fail-once");
    assert_eq!(f[0]["id"], f[1]["id"]);
    assert_eq!(f[0]["body"], f[1]["body"]);
    let path = |e: &Value| {
        format!(
            "/v1/webhooks/endpoints/{}/deliveries",
            e["id"].as_str().unwrap()
        )
    };
    let wait_state = |e: &Value, state: &str| -> Value {
        let start = Instant::now();
        loop {
            let d = h.get(&path(e), a).ok_json(200);
            if d[0]["state"] == state {
                return d;
            }
            assert!(start.elapsed() < WAIT, "{state}: {d}");
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let d = wait_state(&fail_once, "delivered");
    let attempts = d[0]["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{d}");
    assert_eq!(
        (
            attempts[0]["status"].as_u64(),
            attempts[1]["status"].as_u64()
        ),
        (Some(500), Some(200))
    );
    assert_eq!(d[0]["id"], f[0]["id"]);
    // 429 with Retry-After: 3 was honoured although the schedule says 1 s.
    let r = rx.at("/retry-after");
    let gap = r[1]["received"].as_f64().unwrap() - r[0]["received"].as_f64().unwrap();
    assert!(gap >= 2.9, "the retry came {gap} s after the 429");
    wait_state(&retry, "delivered");
    // 410: the delivery failed and the endpoint is disabled.
    let d = wait_state(&gone, "failed");
    assert_eq!(d[0]["attempts"].as_array().unwrap().len(), 1);
    let g = h
        .get(
            &format!("/v1/webhooks/endpoints/{}", gone["id"].as_str().unwrap()),
            a,
        )
        .ok_json(200);
    assert_eq!(
        (g["enabled"].as_bool(), g["disabled_reason"].as_str()),
        (Some(false), Some("gone"))
    );

    // Manual redelivery: the same webhook-id and payload again.
    let ok_deliveries = h.get(&path(&ok), a).ok_json(200);
    let first = ok_deliveries
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["event_type"] == "signer.revoked")
        .unwrap()
        .clone();
    let tenant_token = h.secret(&admin, json!({"role": "tenant", "tenant": "tenant-a"}));
    let redeliver = format!(
        "/v1/webhooks/deliveries/{}/redeliver",
        first["id"].as_str().unwrap()
    );
    h.post(&redeliver, Some(&tenant_token), &json!({}))
        .assert_problem(403, "forbidden", "tenant redelivers");
    h.get(&path(&tenant_a), Some(&tenant_token)).assert_problem(
        403,
        "forbidden",
        "tenant reads a log",
    );
    let before = rx.at("/ok").len();
    assert_eq!(h.post(&redeliver, a, &json!({})).status, 202);
    rx.wait_for("the redelivery", |r| r.at("/ok").len() > before);
    let again = rx.at("/ok").pop().unwrap();
    assert_eq!(again["id"], first["id"]);
    assert_eq!(
        again["body"].as_str().unwrap(),
        first["payload"].as_str().unwrap()
    );

    // An endpoint registered now does not receive older events.
    let late = endpoint(
        &h,
        &admin,
        json!({"url": format!("{}/late", rx.base), "event_types": all}),
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(h
        .get(&path(&late), a)
        .ok_json(200)
        .as_array()
        .unwrap()
        .is_empty());
    assert!(rx.at("/late").is_empty());

    // A usage alert, found by serve's run every checkpoint interval: tenant-a's spend this
    // calendar month (a 10 s record ending now, at 2.5 an hour: 0.01) reaches its threshold.
    let spend = endpoint(
        &h,
        &admin,
        json!({"url": format!("{}/spend", rx.base), "event_types": ["spend.threshold"]}),
    );
    assert_eq!(spend["event_types"], json!(["spend.threshold"]));
    h.put(
        "/v1/tenants/tenant-a/alerts",
        a,
        &json!({"low_balance": {}, "spend": {"CNY": ["0.01"]}}),
    )
    .ok_json(200);
    let (month, _) = gpuledger::store::alerts::month_so_far(Timestamp::now()).unwrap();
    // The record lies inside this month: in its first seconds, wait them out.
    if Timestamp::now().unix() - month.from.unix() < 12 {
        std::thread::sleep(Duration::from_secs(12));
    }
    let record = sample::usage(
        "node-1",
        &k,
        60,
        "tenant-a",
        dec("1"),
        Timestamp::now().plus(-1),
    );
    let ans = h.post_records(&[record]);
    assert_eq!(ans["accepted"], 1, "{ans}");
    rx.wait_for("the spend alert", |r| !r.at("/spend").is_empty());
    let got = &rx.at("/spend")[0]["payload"];
    assert_eq!(
        (
            got["type"].as_str(),
            got["data"]["tenant"].as_str(),
            got["data"]["currency"].as_str(),
            got["data"]["threshold"].as_str()
        ),
        (
            Some("spend.threshold"),
            Some("tenant-a"),
            Some("CNY"),
            Some("0.01")
        ),
        "{got}"
    );
    // Found again every second, delivered once.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(rx.at("/spend").len(), 1);
});

both_backends!(
    private_targets_are_refused_at_registration_and_delivery,
    |db: &TestDb| {
        if !receiver_ready() {
            return;
        }
        let log = init(db);
        let admin = log.admin.clone();
        let a = Some(admin.as_str());
        // Registered while private targets are allowed...
        let (mut srv, h) = serve(&log, "open", TEST_SETTINGS);
        let pk = h.get("/v1/webhooks/public-key", None).ok_json(200)["public_key"]
            .as_str()
            .unwrap()
            .to_owned();
        let rx = Receiver::start(log.dir.path(), &pk);
        let e = endpoint(
            &h,
            &admin,
            json!({"url": format!("{}/ok", rx.base), "event_types": ["signer.revoked"]}),
        );
        srv.0.kill().unwrap();
        srv.0.wait().unwrap();
        // ...then served without: registration refuses each kind of address with its reason.
        let (_srv, h) = serve(
            &log,
            "closed",
            "retry_schedule_seconds = [1, 1]\ntimeout_seconds = 4",
        );
        for (url, why) in [
            ("http://127.0.0.1:9/x", "loopback"),
            ("http://localhost:9/x", "loopback"),
            ("http://10.1.2.3/x", "private"),
            ("http://192.168.0.10/x", "private"),
            ("http://169.254.169.254/latest/meta-data", "metadata"),
            ("http://100.64.0.1/x", "CGNAT"),
            ("http://[::1]:9/x", "loopback"),
            ("http://[fd00::1]/x", "private"),
            ("http://0.0.0.0:9/x", "unspecified"),
            // Issue #23: ranges the first filter let through, and IPv4 inside IPv6.
            ("http://[::ffff:0:7f00:1]/x", "loopback"), // IPv4-translated 127.0.0.1
            ("http://[::ffff:0:808:808]/x", "IPv4-translated"),
            ("http://[::ffff:8.8.8.8]/x", "IPv4-mapped"),
            ("http://[64:ff9b:1::808:808]/x", "Globally Reachable False"),
            ("http://[2002:7f00:1::1]/x", "loopback"), // 6to4 of 127.0.0.1
            ("http://[2002:808:808::1]/x", "6to4"),
            ("http://[2001:0:808:808::f7f7:f7f7]/x", "Teredo"),
            ("http://[100::1]/x", "Discard-Only"),
            ("http://192.88.99.1/x", "6to4 Relay Anycast"),
            ("http://198.18.0.1/x", "benchmarking"),
            ("http://203.0.113.9/x", "documentation"),
            ("http://[2001:db8::1]/x", "documentation"),
            ("http://[3fff::1]/x", "documentation"),
        ] {
            let p = h
                .post(
                    "/v1/webhooks/endpoints",
                    a,
                    &json!({"url": url, "event_types": ["signer.revoked"]}),
                )
                .assert_problem(422, "forbidden_target", url);
            assert!(p["detail"].as_str().unwrap().contains(why), "{url}: {p}");
        }
        h.post(
            "/v1/webhooks/endpoints",
            a,
            &json!({"url": "http://user:pw@93.184.215.14/", "event_types": ["signer.revoked"]}),
        )
        .assert_problem(400, "invalid_parameter", "credentials");
        // A description is shown to people: no control, bidirectional or invisible characters.
        for bad in [
            "ops\nteam",
            "billing \u{202E}gnp.exe",
            "\u{2066}x",
            "a\u{200B}b",
        ] {
            let p = h
                .post(
                    "/v1/webhooks/endpoints",
                    a,
                    &json!({"url": "http://93.184.215.14/", "event_types": ["signer.revoked"], "description": bad}),
                )
                .assert_problem(400, "invalid_parameter", bad);
            assert_eq!(p["errors"][0]["field"], json!("description"), "{p}");
        }
        // And delivery to the loopback endpoint registered before is refused on the address.
        let kr = sample::key("wh-ssrf");
        h.register(&admin, "node-s", "node", &kr);
        h.post(
            &format!("/v1/signers/node-s/keys/{}/revoke", key_id(&kr)),
            a,
            &json!({}),
        )
        .ok_json(200);
        let path = format!(
            "/v1/webhooks/endpoints/{}/deliveries",
            e["id"].as_str().unwrap()
        );
        let start = Instant::now();
        loop {
            let d = h.get(&path, a).ok_json(200);
            if d[0]["state"] == "failed" {
                let errors: Vec<&str> = d[0]["attempts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x["error"].as_str().unwrap())
                    .collect();
                assert!(
                    errors
                        .iter()
                        .all(|e| e.contains("refused") && e.contains("loopback")),
                    "{d}"
                );
                break;
            }
            assert!(start.elapsed() < WAIT, "{d}");
            std::thread::sleep(Duration::from_millis(200));
        }
        assert!(rx.all().is_empty(), "{:?}", rx.all());
    }
);

both_backends!(
    kill_9_mid_delivery_delivers_again_with_the_same_id,
    |db: &TestDb| {
        if !receiver_ready() {
            return;
        }
        let log = init(db);
        let admin = log.admin.clone();
        let a = Some(admin.as_str());
        let (mut srv, h) = serve(&log, "first", TEST_SETTINGS);
        let pk = h.get("/v1/webhooks/public-key", None).ok_json(200)["public_key"]
            .as_str()
            .unwrap()
            .to_owned();
        let rx = Receiver::start(log.dir.path(), &pk);
        let e = endpoint(
            &h,
            &admin,
            json!({"url": format!("{}/slow", rx.base), "event_types": ["signer.revoked"]}),
        );
        let mut keys = Vec::new();
        for i in 0..3 {
            let kr = sample::key(&format!("wh-kill-{i}"));
            h.register(&admin, &format!("node-k{i}"), "node", &kr);
            keys.push((format!("node-k{i}"), kr));
        }
        for (signer, kr) in &keys {
            h.post(
                &format!("/v1/signers/{signer}/keys/{}/revoke", key_id(kr)),
                a,
                &json!({}),
            )
            .ok_json(200);
        }
        // The receiver holds each answer 3 s: kill -9 while the first attempts are in flight.
        rx.wait_for("an attempt in flight", |r| !r.at("/slow").is_empty());
        srv.0.kill().unwrap();
        srv.0.wait().unwrap();
        let first_ids: Vec<String> = rx
            .at("/slow")
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_owned())
            .collect();
        let (_srv, h) = serve(&log, "second", TEST_SETTINGS);
        // After the restart (and the lease's expiry) every event is delivered, each id again.
        let path = format!(
            "/v1/webhooks/endpoints/{}/deliveries",
            e["id"].as_str().unwrap()
        );
        let start = Instant::now();
        let d = loop {
            let d = h.get(&path, a).ok_json(200);
            let list = d.as_array().unwrap();
            if list.len() == 3 && list.iter().all(|x| x["state"] == "delivered") {
                break d;
            }
            assert!(start.elapsed() < Duration::from_secs(90), "{d}");
            std::thread::sleep(Duration::from_millis(300));
        };
        let got = rx.at("/slow");
        for x in d.as_array().unwrap() {
            let id = x["id"].as_str().unwrap();
            assert!(got.iter().any(|r| r["id"] == id), "{id} never received");
        }
        for id in &first_ids {
            assert!(
                got.iter().filter(|r| r["id"] == id.as_str()).count() >= 2,
                "{id}, in flight at the kill, was not delivered again with the same id: {got:#?}"
            );
        }
    }
);

/// A witness named `name` following the log of verifier key `log_vkey`, its state in `dir`.
fn witness(dir: &Path, name: &str, log_vkey: &str) -> gpuledger::server::witnessing::LocalWitness {
    gpuledger::server::witnessing::LocalWitness::start(gpuledger::witness::WitnessSettings {
        listen: "127.0.0.1:0".parse().unwrap(),
        name: name.into(),
        key: sample::key(name),
        state: dir.join(format!("{}.db", name.replace('/', "_"))),
        logs: gpuledger::witness::logs_from_vkeys([log_vkey]).unwrap(),
        workers: 1,
    })
    .unwrap()
}

both_backends!(
    checkpoint_cosigned_arrives_once_per_checkpoint_and_witness,
    |db: &TestDb| {
        use gpuledger::core::checkpoint::verify_checkpoint;
        use gpuledger::core::cosignature::valid_cosignatures;
        use std::collections::{BTreeMap, BTreeSet};
        if !receiver_ready() {
            return;
        }
        let log = init(db);
        let admin = log.admin.clone();
        let a = Some(admin.as_str());
        // Endpoints first, from a `serve` without witnesses: an endpoint receives only events
        // written after it, and here every cosignature is stored after it.
        let (mut srv, h) = serve(&log, "unwitnessed", TEST_SETTINGS);
        let pk = h.get("/v1/webhooks/public-key", None).ok_json(200)["public_key"]
            .as_str()
            .unwrap()
            .to_owned();
        let vkey = h.get("/v1/log", None).ok_json(200)["verifier_key"]
            .as_str()
            .unwrap()
            .to_owned();
        let rx = Receiver::start(log.dir.path(), &pk);
        h.parties(&admin, &["tenant-a"]);
        let k = sample::key("wh-node");
        h.register(&admin, "node-1", "node", &k);
        let cosigned = ["checkpoint.cosigned"];
        let global = endpoint(
            &h,
            &admin,
            json!({"url": format!("{}/ok", rx.base), "event_types": cosigned}),
        );
        endpoint(
            &h,
            &admin,
            json!({"url": format!("{}/fail-once", rx.base), "event_types": cosigned}),
        );
        // A tenant's endpoint gets none (an event of no tenant), but does get its tenant's
        // conflict: it is not just deaf.
        let tenant = endpoint(
            &h,
            &admin,
            json!({"url": format!("{}/tenant-a", rx.base), "tenant": "tenant-a",
            "event_types": ["checkpoint.cosigned", "record.conflict"]}),
        );
        srv.0.kill().unwrap();
        srv.0.wait().unwrap();

        // Two real witnesses: one event per checkpoint *and witness*.
        let dir = log.dir.path();
        let ws = [
            witness(dir, "witness.test/wh1", &vkey),
            witness(dir, "witness.test/wh2", &vkey),
        ];
        let keys: Vec<_> = ws.iter().map(|w| w.witness_key().clone()).collect();
        let mut settings = TEST_SETTINGS.to_owned();
        for w in &ws {
            let s = w.setting();
            settings.push_str(&format!(
                "\n[[witnesses]]\nname = {:?}\nvkey = {:?}\nurl = {:?}\n",
                s.name, s.vkey, s.url
            ));
        }
        let (_srv, h) = serve(&log, "witnessed", &settings);
        // Three rounds of records, each cosigned by both before the next: several sizes.
        let fully_cosigned = |h: &Http| -> u64 {
            let start = Instant::now();
            loop {
                let note = h.get("/v1/checkpoint", None).text();
                let cp = verify_checkpoint(note.as_bytes(), &vkey).unwrap();
                if cp.size() == h.size() && valid_cosignatures(note.as_bytes(), &keys).len() == 2 {
                    return cp.size();
                }
                assert!(start.elapsed() < WAIT, "not cosigned by both: {note}");
                std::thread::sleep(Duration::from_millis(100));
            }
        };
        let mut sizes = vec![fully_cosigned(&h)];
        for round in 0..3u64 {
            let batch: Vec<_> = (1..=2)
                .map(|i| usage(&k, round * 2 + i, "tenant-a", "1"))
                .collect();
            let ans = h.post_records(&batch);
            for o in ans["outcomes"].as_array().unwrap() {
                assert_eq!(o["status"], "accepted", "{ans}");
            }
            sizes.push(fully_cosigned(&h));
        }
        assert!(sizes.windows(2).all(|s| s[0] < s[1]), "{sizes:?}");
        let last = *sizes.last().unwrap();

        // What each witness really cosigned: the checkpoints whose served note carries its
        // valid line (the note's log signature checked too).
        let mut really: BTreeSet<(u64, String)> = BTreeSet::new();
        let listed = h.get("/v1/checkpoints?limit=1000", None).ok_json(200);
        assert!(listed["next"].is_null(), "{listed}");
        for c in listed["checkpoints"].as_array().unwrap() {
            let note = c["note"].as_str().unwrap();
            let size = verify_checkpoint(note.as_bytes(), &vkey).unwrap().size();
            assert_eq!(c["size"].as_u64(), Some(size));
            for v in valid_cosignatures(note.as_bytes(), &keys) {
                really.insert((size, v.witness.clone()));
            }
        }
        for s in &sizes {
            for w in &keys {
                assert!(
                    really.contains(&(*s, w.name().to_owned())),
                    "{s}: {really:?}"
                );
            }
        }

        // Every cosignature delivered once to the global endpoints, signed; retried with the
        // same id and bytes after a 500.
        let n = really.len();
        rx.wait_for("one event per cosignature", |r| r.at("/ok").len() >= n);
        rx.wait_for("every event retried after its 500", |r| {
            let got = r.at("/fail-once");
            let mut per_id: BTreeMap<String, usize> = BTreeMap::new();
            for x in &got {
                *per_id
                    .entry(x["id"].as_str().unwrap().to_owned())
                    .or_default() += 1;
            }
            per_id.len() >= n && per_id.values().all(|c| *c >= 2)
        });
        for r in rx.all() {
            assert!(r["error"].is_null(), "not verified: {r}");
            assert_eq!(r["scheme"], "v1a", "{r}");
        }
        let ok = rx.at("/ok");
        assert_eq!(ok.len(), n, "{ok:#?}");
        let mut events: BTreeSet<(u64, String)> = BTreeSet::new();
        for r in &ok {
            let p = &r["payload"];
            assert_eq!(p["type"], "checkpoint.cosigned", "{r}");
            Timestamp::parse(p["timestamp"].as_str().unwrap()).unwrap();
            let d = &p["data"];
            assert!(d["tenant"].is_null() && d["log_index"].is_null(), "{r}");
            assert!(
                d.get("tenant").is_some() && d.get("log_index").is_some(),
                "tenant and log_index are present, as null: {r}"
            );
            let size = d["checkpoint_size"].as_u64().expect("checkpoint_size");
            let w = d["witness"].as_str().expect("witness").to_owned();
            assert!(events.insert((size, w)), "twice: {r}");
        }
        assert_eq!(events, really, "the events are not the cosignatures");
        // The latest served checkpoint shows both lines of the last size, and both events came.
        let latest = h.get("/v1/checkpoint", None).text();
        assert_eq!(valid_cosignatures(latest.as_bytes(), &keys).len(), 2);
        for w in &keys {
            assert!(events.contains(&(last, w.name().to_owned())));
        }
        // Ids: one per delivery, distinct, the delivery log's, the same on the retry.
        let ids: BTreeSet<&str> = ok.iter().map(|r| r["id"].as_str().unwrap()).collect();
        assert_eq!(ids.len(), n);
        assert!(
            ids.iter().all(|i| i.starts_with("msg_") && i.len() == 36),
            "{ids:?}"
        );
        let log_of = |e: &Value| {
            h.get(
                &format!(
                    "/v1/webhooks/endpoints/{}/deliveries",
                    e["id"].as_str().unwrap()
                ),
                a,
            )
            .ok_json(200)
        };
        let start = Instant::now();
        let deliveries = loop {
            let d = log_of(&global);
            if d.as_array()
                .unwrap()
                .iter()
                .all(|x| x["state"] == "delivered")
            {
                break d;
            }
            assert!(start.elapsed() < WAIT, "{d}");
            std::thread::sleep(Duration::from_millis(200));
        };
        let logged: BTreeSet<&str> = deliveries
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["id"].as_str().unwrap())
            .collect();
        assert_eq!(logged, ids);
        let fail = rx.at("/fail-once");
        for id in fail.iter().map(|r| r["id"].as_str().unwrap()) {
            assert!(!ids.contains(id), "an id shared by two endpoints: {id}");
            let bodies: BTreeSet<&str> = fail
                .iter()
                .filter(|r| r["id"] == id)
                .map(|r| r["body"].as_str().unwrap())
                .collect();
            assert_eq!(bodies.len(), 1, "{id} sent with two bodies: {bodies:?}");
        }
        // Manual redelivery: the same id and bytes again.
        let first = &deliveries[0];
        let before = rx.at("/ok").len();
        let redeliver = format!(
            "/v1/webhooks/deliveries/{}/redeliver",
            first["id"].as_str().unwrap()
        );
        assert_eq!(h.post(&redeliver, a, &json!({})).status, 202);
        rx.wait_for("the redelivery", |r| r.at("/ok").len() > before);
        let again = rx.at("/ok").pop().unwrap();
        assert_eq!(again["id"], first["id"]);
        assert_eq!(again["body"].as_str(), first["payload"].as_str());

        // The tenant's endpoint: its tenant's conflict arrives, no cosignature ever did.
        let ans = h.post_records(&[usage(&k, 1, "tenant-a", "5")]);
        assert_eq!(ans["outcomes"][0]["reason"], "conflict", "{ans}");
        rx.wait_for("tenant A's conflict", |r| !r.at("/tenant-a").is_empty());
        assert_eq!(types(&rx.at("/tenant-a")), ["record.conflict"]);
        let tenant_log = log_of(&tenant);
        let logged: Vec<&str> = tenant_log
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["event_type"].as_str().unwrap())
            .collect();
        assert_eq!(logged, ["record.conflict"], "{tenant_log}");
    }
);

/// The Python `v1a` sample of docs/WEBHOOKS.md, run as written (with PyNaCl) on headers with
/// several signatures: a non-matching or malformed one must not stop the next from being
/// tried (PyNaCl's `verify` raises instead of returning false). Skipped, saying so, without
/// python3 and PyNaCl.
#[test]
fn the_python_v1a_sample_tries_every_signature() {
    use base64::prelude::{Engine, BASE64_STANDARD};
    use ed25519_dalek::Signer as _;
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/WEBHOOKS.md")).unwrap();
    let block = doc
        .split("```python\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a python block");
    let sample: String = block
        .lines()
        .skip_while(|l| !l.contains("v1a (Ed25519)"))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(sample.contains("ok = "), "{block}");
    let have_nacl = std::process::Command::new("python3")
        .args(["-c", "import nacl.signing"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_nacl {
        eprintln!("\n*** SKIPPED: python3 with PyNaCl is needed to run the WEBHOOKS.md sample ***");
        return;
    }
    let key = sample::key("doc-sample");
    let other = sample::key("doc-sample-old");
    let public = format!(
        "whpk_{}",
        BASE64_STANDARD.encode(key.verifying_key().to_bytes())
    );
    let (id, ts, body) = ("msg_0123", "1700000000", br#"{"type":"invoice.issued"}"#);
    let signed = [format!("{id}.{ts}.").as_bytes(), &body[..]].concat();
    let good = format!(
        "v1a,{}",
        BASE64_STANDARD.encode(key.sign(&signed).to_bytes())
    );
    let wrong_key = format!(
        "v1a,{}",
        BASE64_STANDARD.encode(other.sign(&signed).to_bytes())
    );
    let short = "v1a,AAAA".to_owned();
    let not_base64 = "v1a,!!!".to_owned();
    for (header, want) in [
        (vec![good.clone()], "True"),
        (vec![wrong_key.clone(), good.clone()], "True"),
        (
            vec![short.clone(), not_base64.clone(), good.clone()],
            "True",
        ),
        (vec!["v1,abc".to_owned(), good.clone()], "True"),
        (vec![wrong_key.clone()], "False"),
        (vec![short, not_base64], "False"),
        (vec![], "False"),
    ] {
        let program = format!(
            "public_key = {public:?}\nbody = {body:?}.encode()\nheaders = {{'webhook-id': {id:?}, \
             'webhook-timestamp': {ts:?}, 'webhook-signature': {sig:?}}}\n{sample}\nprint(ok)\n",
            body = std::str::from_utf8(body).unwrap(),
            sig = header.join(" "),
        );
        let out = std::process::Command::new("python3")
            .args(["-c", &program])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{header:?}: the sample raised:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            want,
            "{header:?}"
        );
    }
}
