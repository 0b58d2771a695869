//! Prices on the log and invoice previews: the golden scenario rated from entries (both
//! databases), the rules for changing prices, and the HTTP endpoints with their access rules.

mod common;

use common::*;
use gpuledger::core::envelope::Envelope;
use gpuledger::core::outcome::Outcome;
use gpuledger::core::rating::{self, LeaseClass};
use gpuledger::core::record::{
    Body, Energy, GpuUsage, Kind, LeaseRegistered, RateCard, RegionParameters, Role, SpotPrice,
};
use gpuledger::core::time::Timestamp;
use gpuledger::store::{pricing, StoreError};
use rust_decimal::Decimal;
use std::str::FromStr;

fn d(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

/// A fixed day a few days back, so nothing is in the future.
fn day() -> Timestamp {
    let now = Timestamp::now().unix();
    Timestamp::from_unix(now - now % 86_400 - 3 * 86_400).unwrap()
}

fn at(secs: i64) -> Timestamp {
    day().plus(secs)
}

fn rate_card(region: &str, class: LeaseClass, price: &str, from: Timestamp) -> Body {
    Body::RateCard(RateCard {
        region: region.into(),
        gpu_model: "H100".into(),
        lease_class: class,
        currency: "CNY".into(),
        price_per_gpu_hour: d(price),
        effective_from: from,
    })
}

fn usage(
    node: &str,
    seq: u64,
    region: &str,
    lease: Option<&str>,
    count: &str,
    start: i64,
    end: i64,
) -> (u64, Body) {
    (
        seq,
        Body::GpuUsage(GpuUsage {
            tenant: "acme".into(),
            lease: lease.map(str::to_owned),
            region: region.into(),
            node: node.into(),
            gpu_model: "H100".into(),
            gpu_count: d(count),
            start: at(start),
            end: at(end),
            gpu_seconds: d(count) * Decimal::from(end - start),
        }),
    )
}

both_backends!(golden_scenario_rated_from_the_log, |db: &TestDb| {
    let ledger = open(db);
    let node = signer(&ledger, "node-1", Role::Node);
    let market = signer(&ledger, "market-1", Role::Market);
    for body in [
        rate_card("west", LeaseClass::OnDemand, "18.5", at(-86_400)),
        rate_card("east", LeaseClass::OnDemand, "24", at(-86_400)),
        Body::LeaseRegistered(LeaseRegistered {
            lease: "spot-1".into(),
            tenant: "acme".into(),
            class: LeaseClass::Spot,
        }),
        Body::RegionParams(RegionParameters {
            region: "west".into(),
            currency: "CNY".into(),
            electricity_price_per_kwh: d("0.28"),
            pue: d("1.08"),
            carbon_g_per_kwh: d("530"),
            effective_from: at(-86_400),
        }),
    ] {
        ledger.append_ledger_entry(body).unwrap();
    }
    // Three spot-price changes inside the spot interval (00:05–00:55).
    let spots: Vec<Envelope> = [(0, "9"), (900, "7.2"), (2400, "11.35"), (3000, "8")]
        .iter()
        .enumerate()
        .map(|(i, (t, p))| {
            let body = Body::SpotPrice(SpotPrice {
                region: "west".into(),
                gpu_model: "H100".into(),
                price_per_gpu_hour: d(p),
                currency: "CNY".into(),
                effective_from: at(*t),
            });
            Envelope::sign(Kind::SpotPrice, "market-1", &market, i as u64 + 1, &body)
        })
        .collect();
    assert!(ledger
        .append(spots)
        .unwrap()
        .iter()
        .all(|o| matches!(o, Outcome::Accepted { .. })));
    let mut records: Vec<(u64, Body)> = vec![
        usage("node-1", 1, "west", None, "8", 0, 3600),
        usage("node-e1", 2, "east", None, "0.5", 0, 600),
        usage("node-1", 3, "west", Some("spot-1"), "2", 300, 3300),
    ];
    records.push((
        4,
        Body::Energy(Energy {
            tenant: Some("acme".into()),
            region: "west".into(),
            node: "node-1".into(),
            start: at(0),
            end: at(3600),
            kwh: d("12.5"),
        }),
    ));
    let envs: Vec<Envelope> = records
        .iter()
        .map(|(s, b)| Envelope::sign(b.kind(), "node-1", &node, *s, b))
        .collect();
    let out = ledger.append(envs).unwrap();
    assert!(
        out.iter().all(|o| matches!(o, Outcome::Accepted { .. })),
        "{out:?}"
    );

    let size = ledger.head().unwrap().0;
    let rater = ledger
        .with_reader(|c| pricing::rate_period(c, "acme", at(0), at(86_400), size))
        .unwrap();
    let (lines, unpriced) = rater.finish();
    let cny = &lines["CNY"];
    // Hand-computed (docs/RATING.md): 2.00 east on-demand; 148.00 west on-demand; spot 6.00 at
    // 7.2, 1.33 at 8, 3.00 at 9, 3.78 at 11.35; energy 12.5 × 1.08 × 0.28 = 3.78.
    let amounts: Vec<String> = cny.iter().map(|l| l.amount.to_string()).collect();
    assert_eq!(
        amounts,
        ["2.00", "148.00", "6.00", "1.33", "3.00", "3.78", "3.78"]
    );
    assert_eq!(rating::total(cny).to_string(), "167.89");
    assert!(unpriced.is_empty(), "{unpriced:?}");
    // The total equals an independent recomputation: Σ exact amounts, each rounded.
    let recomputed: Decimal = cny
        .iter()
        .map(|l| rating::round_amount(l.exact_amount, "CNY"))
        .sum();
    assert_eq!(recomputed, rating::total(cny));
    // Prices as of an earlier log size (before the spot prices) leave the spot usage unpriced.
    let early = ledger
        .with_reader(|c| pricing::rate_period(c, "acme", at(0), at(86_400), 7))
        .unwrap();
    let (_, unpriced) = early.finish();
    assert!(
        unpriced.is_empty(),
        "usage entries after size 7 are not counted either: {unpriced:?}"
    );
});

both_backends!(prices_change_only_forward, |db: &TestDb| {
    let ledger = open(db);
    ledger
        .append_ledger_entry(rate_card("west", LeaseClass::OnDemand, "18.5", at(0)))
        .unwrap();
    let same_time =
        ledger.append_ledger_entry(rate_card("west", LeaseClass::OnDemand, "19", at(0)));
    assert!(
        matches!(same_time, Err(StoreError::Refused(m)) if m.contains("must take effect later"))
    );
    let earlier =
        ledger.append_ledger_entry(rate_card("west", LeaseClass::OnDemand, "19", at(-10)));
    assert!(matches!(earlier, Err(StoreError::Refused(_))));
    // Another series is independent; a later change is fine.
    ledger
        .append_ledger_entry(rate_card("west", LeaseClass::Reserved, "12", at(0)))
        .unwrap();
    ledger
        .append_ledger_entry(rate_card("west", LeaseClass::OnDemand, "19", at(3600)))
        .unwrap();
    let lease = Body::LeaseRegistered(LeaseRegistered {
        lease: "l-1".into(),
        tenant: "acme".into(),
        class: LeaseClass::Reserved,
    });
    ledger.append_ledger_entry(lease.clone()).unwrap();
    assert!(matches!(
        ledger.append_ledger_entry(lease),
        Err(StoreError::AlreadyExists(_))
    ));
    // Records of other kinds cannot be written this way, and nodes cannot sign prices.
    let k = signer(&ledger, "node-1", Role::Node);
    assert!(matches!(
        ledger.append_ledger_entry(usage("node-1", 1, "west", None, "1", 0, 10).1),
        Err(StoreError::Refused(_))
    ));
    let forged = Envelope::sign(
        Kind::RateCard,
        "node-1",
        &k,
        1,
        &rate_card("west", LeaseClass::OnDemand, "0.01", at(7200)),
    );
    let out = ledger.append(vec![forged]).unwrap();
    assert!(
        matches!(&out[0], Outcome::Rejected(r) if r.reason == gpuledger::core::rejection::Reason::RoleNotAllowed)
    );
    let size = ledger.head().unwrap().0;
    let mut conn = gpuledger::store::connect(&db.url).unwrap();
    gpuledger::store::verify::verify_log(&mut conn, None, &mut |_, _| {}).unwrap();
    assert_eq!(size, 5, "three rate cards, a lease and a key registration");
});

struct Server {
    child: std::process::Child,
    base: String,
    admin: String,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(db: &TestDb) -> Server {
    use std::io::BufRead;
    let bin = env!("CARGO_BIN_EXE_gpuledger");
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("log.key");
    let init = std::process::Command::new(bin)
        .args(["init", "--database-url", &db.url, "--log-key"])
        .arg(&key)
        .output()
        .unwrap();
    let out = String::from_utf8(init.stdout).unwrap();
    let admin = out
        .lines()
        .find_map(|l| l.strip_prefix("admin token:"))
        .unwrap()
        .trim()
        .to_owned();
    let mut child = std::process::Command::new(bin)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            &db.url,
            "--log-key",
        ])
        .arg(&key)
        .env("GPULEDGER_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_owned();
    Server {
        child,
        base,
        admin,
        _dir: dir,
    }
}

fn call(
    s: &Server,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let http: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let url = format!("{}{path}", s.base);
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut resp = match (method, body) {
        ("GET", _) => {
            let mut r = http.get(&url);
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            r.call().unwrap()
        }
        (_, b) => {
            let mut r = http.post(&url);
            if let Some(a) = &auth {
                r = r.header("Authorization", a);
            }
            r.send_json(b.unwrap_or(serde_json::json!({}))).unwrap()
        }
    };
    let status = resp.status().as_u16();
    (
        status,
        resp.body_mut()
            .read_json()
            .unwrap_or(serde_json::Value::Null),
    )
}

both_backends!(pricing_endpoints_and_preview, |db: &TestDb| {
    use serde_json::json;
    let s = serve(db);
    let admin = s.admin.clone();
    let token = |body: serde_json::Value| {
        call(&s, "POST", "/v1/tokens", Some(&admin), Some(body)).1["token"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    call(
        &s,
        "POST",
        "/v1/tenants",
        Some(&admin),
        Some(json!({"id": "acme", "name": "Acme"})),
    );
    call(
        &s,
        "POST",
        "/v1/tenants",
        Some(&admin),
        Some(json!({"id": "beta", "name": "Beta"})),
    );
    let acme = token(json!({"role": "tenant", "tenant": "acme"}));
    let auditor = token(json!({"role": "auditor"}));
    let card = json!({"region": "west", "gpu_model": "H100", "lease_class": "on_demand", "currency": "CNY",
                      "price_per_gpu_hour": "18.5", "effective_from": at(-86_400).to_string()});
    assert_eq!(
        call(
            &s,
            "POST",
            "/v1/rate-cards",
            Some(&admin),
            Some(card.clone())
        )
        .0,
        201
    );
    // Bad inputs: precise 400s and 409s; auditors and tenants may not write.
    let (st, p) = call(
        &s,
        "POST",
        "/v1/rate-cards",
        Some(&admin),
        Some(card.clone()),
    );
    assert_eq!(
        (st, p["type"].as_str().unwrap()),
        (400, "urn:gpuledger:problem:refused"),
        "{p}"
    );
    let mut spot = card.clone();
    spot["lease_class"] = json!("spot");
    let (st, p) = call(&s, "POST", "/v1/rate-cards", Some(&admin), Some(spot));
    assert_eq!(
        (st, p["errors"][0]["field"].as_str()),
        (400, Some("body.lease_class")),
        "{p}"
    );
    let mut neg = card.clone();
    neg["price_per_gpu_hour"] = json!("-1");
    neg["effective_from"] = json!(at(0).to_string());
    let (st, p) = call(&s, "POST", "/v1/rate-cards", Some(&admin), Some(neg));
    assert_eq!(
        (st, p["errors"][0]["reason"].as_str()),
        (400, Some("negative_quantity")),
        "{p}"
    );
    assert_eq!(
        call(
            &s,
            "POST",
            "/v1/rate-cards",
            Some(&auditor),
            Some(card.clone())
        )
        .0,
        403
    );
    assert_eq!(
        call(
            &s,
            "POST",
            "/v1/rate-cards",
            Some(&acme),
            Some(card.clone())
        )
        .0,
        403
    );
    assert_eq!(call(&s, "POST", "/v1/rate-cards", None, Some(card)).0, 401);
    let lease = json!({"lease": "l-1", "tenant": "acme", "class": "reserved"});
    assert_eq!(
        call(&s, "POST", "/v1/leases", Some(&admin), Some(lease.clone())).0,
        201
    );
    assert_eq!(
        call(&s, "POST", "/v1/leases", Some(&admin), Some(lease)).0,
        409
    );
    assert_eq!(
        call(
            &s,
            "POST",
            "/v1/leases",
            Some(&admin),
            Some(json!({"lease": "l-2", "tenant": "beta", "class": "spot"}))
        )
        .0,
        201
    );
    let (st, prices) = call(&s, "GET", "/v1/prices", Some(&acme), None);
    assert_eq!(st, 200);
    let kinds: Vec<&str> = prices
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["rate_card", "lease_registered"],
        "acme sees prices and its own lease only"
    );

    // Usage from a registered node, then a preview computed from the log.
    let node = gpuledger::sample::key("node-p");
    let pk = gpuledger::core::keys::encode_public(&node.verifying_key());
    call(
        &s,
        "POST",
        "/v1/signers",
        Some(&admin),
        Some(json!({"id": "node-p", "role": "node", "public_key": pk})),
    );
    let recs: Vec<Envelope> = [
        usage("node-p", 1, "west", None, "8", 0, 3600),
        usage("node-p", 2, "west", Some("l-1"), "1", 0, 3600),
    ]
    .iter()
    .map(|(q, b)| Envelope::sign(Kind::GpuUsage, "node-p", &node, *q, b))
    .collect();
    assert_eq!(
        call(
            &s,
            "POST",
            "/v1/records",
            None,
            Some(serde_json::to_value(&recs).unwrap())
        )
        .1["accepted"],
        2
    );
    let q = format!(
        "/v1/invoices/preview?tenant=acme&from={}&to={}",
        at(0),
        at(86_400)
    );
    let (st, preview) = call(&s, "GET", &q, Some(&acme), None);
    assert_eq!(st, 200, "{preview}");
    assert_eq!(preview["currencies"][0]["total"], "148.00");
    assert_eq!(preview["currencies"][0]["lines"][0]["quantity"], "28800");
    // The reserved lease has no rate card: unpriced and named, never zero.
    assert_eq!(preview["unpriced"][0]["what"], "no rate card in force");
    assert_eq!(preview["unpriced"][0]["class"], "reserved");
    assert_eq!(preview["unpriced"][0]["quantity"], "3600");
    // Isolation and bad parameters.
    let other = format!(
        "/v1/invoices/preview?tenant=beta&from={}&to={}",
        at(0),
        at(86_400)
    );
    assert_eq!(call(&s, "GET", &other, Some(&acme), None).0, 404);
    assert_eq!(call(&s, "GET", &other, Some(&auditor), None).0, 200);
    let inverted = format!(
        "/v1/invoices/preview?tenant=acme&from={}&to={}",
        at(10),
        at(0)
    );
    assert_eq!(call(&s, "GET", &inverted, Some(&admin), None).0, 400);
    let unknown = format!(
        "/v1/invoices/preview?tenant=nobody&from={}&to={}",
        at(0),
        at(10)
    );
    assert_eq!(call(&s, "GET", &unknown, Some(&admin), None).0, 404);
});
