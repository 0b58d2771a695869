//! Prices on the log and invoice previews: the golden scenario rated from entries (both
//! databases), the rules for changing prices, and the HTTP endpoints with their access rules.

mod common;

use base64::prelude::{Engine, BASE64_STANDARD};

use common::*;
use gpuledger::core::bundle;
use gpuledger::core::envelope::Envelope;
use gpuledger::core::invoice::{Invoice, InvoiceCheck};
use gpuledger::core::outcome::Outcome;
use gpuledger::core::rating::{self, LeaseClass};
use gpuledger::core::record::{
    Body, RateCard, RegionParameters, Role, SpotPrice, TenantPlan, Tier, VolumeTiers,
};
use gpuledger::core::rejection::Reason;
use gpuledger::core::time::Timestamp;
use gpuledger::store::{pricing, StoreError};
use rust_decimal::Decimal;

/// A payment or credit note body of acme's for `amount` CNY against `invoice`.
fn settle(invoice: &str, amount: &str) -> gpuledger::core::record::Settlement {
    gpuledger::core::record::Settlement {
        tenant: "acme".into(),
        invoice: invoice.into(),
        currency: "CNY".into(),
        amount: dec(amount),
        note: "test".into(),
        external_reference: None,
    }
}

/// Day `n` after [`recent_day`] (day 0 is that day itself), as an invoice period.
fn day_period(n: i64) -> gpuledger::core::invoice::Period {
    gpuledger::core::invoice::Period {
        from: at(n * 86_400),
        to: at((n + 1) * 86_400),
    }
}

/// Appends `signer`'s `records` (seq, body), signed with `key`; every one must be accepted.
fn append_signed(
    ledger: &gpuledger::store::Ledger,
    signer: &str,
    key: &ed25519_dalek::SigningKey,
    records: &[(u64, Body)],
) {
    let envs = records.iter().map(|(q, b)| signed(signer, key, *q, b));
    assert_accepted(&ledger.append(envs.collect()).unwrap());
}

/// Registers node-p (a test node) and its key (for east and west) over HTTP, then posts its
/// `records` (seq, body), which must all be accepted.
fn post_node_p_records(h: &Http, admin: &str, records: &[(u64, Body)]) {
    h.node_in(admin, "node-p", "west");
    let node = gpuledger::sample::key("node-p");
    let body = serde_json::json!({"id": "node-p", "role": "node", "public_key": public(&node),
                                  "nodes": ["node-p"], "regions": ["east", "west"]});
    h.post("/v1/signers", Some(admin), &body).ok_json(201);
    let envs: Vec<Envelope> = records
        .iter()
        .map(|(q, b)| signed("node-p", &node, *q, b))
        .collect();
    let ans = h.post_records(&envs);
    assert_eq!(ans["accepted"], records.len(), "{ans}");
}

/// The body of `POST /v1/leases` for lease `id` of `tenant`, billed as `class` (`on_demand`,
/// `reserved` or `spot`), open-ended from [`gpuledger::sample::LEASE_FROM`], covering up to
/// `count` of node-p's H100s.
fn node_p_lease(id: &str, tenant: &str, class: &str, count: u32) -> serde_json::Value {
    let from = Timestamp::from_unix(gpuledger::sample::LEASE_FROM).unwrap();
    serde_json::json!({"lease": id, "tenant": tenant, "class": class, "from": from.to_string(),
                       "nodes": [{"node": "node-p", "gpu_model": "H100", "count": count.to_string()}]})
}

/// Registers node-p (a test node, if it is not) and acme's on-demand lease `od-acme` of 8 of
/// its H100s over HTTP: the lease acme's on-demand usage on node-p names.
fn od_acme_on_node_p(h: &Http, admin: &str) {
    h.node_in(admin, "node-p", "west");
    h.post(
        "/v1/leases",
        Some(admin),
        &node_p_lease("od-acme", "acme", "on_demand", 8),
    )
    .ok_json(201);
}

/// The invoice preview path of `tenant` for [at(from), at(to)).
fn preview_of(tenant: &str, from: i64, to: i64) -> String {
    format!(
        "/v1/invoices/preview?tenant={tenant}&from={}&to={}",
        at(from),
        at(to)
    )
}

/// The nodes the tests' node-1 key may sign for.
const NODES: [&str; 5] = ["node-1", "node-b", "node-e", "node-e1", "node-2"];

/// The [`NODES`] with their regions (a record names its node's region), and node-e2, where
/// node-2's key bills east.
const NODE_REGIONS: [(&str, &str); 6] = [
    ("node-1", "west"),
    ("node-b", "west"),
    ("node-e", "east"),
    ("node-e1", "east"),
    ("node-2", "west"),
    ("node-e2", "east"),
];

/// acme's on-demand lease `od-acme`, which its on-demand usage names: 8 H100s of each of the
/// nodes but node-b (half of each node's 16 H100s, the other half left to spot or reserved
/// leases).
const OD_ACME: [(&str, &str, u32); 5] = [
    ("node-1", "H100", 8),
    ("node-e", "H100", 8),
    ("node-e1", "H100", 8),
    ("node-2", "H100", 8),
    ("node-e2", "H100", 8),
];

fn rate_card(region: &str, class: LeaseClass, price: &str, from: Timestamp) -> Body {
    Body::RateCard(RateCard {
        region: region.into(),
        gpu_model: "H100".into(),
        lease_class: class,
        currency: "CNY".into(),
        price_per_gpu_hour: dec(price),
        effective_from: from,
    })
}

/// Record `seq`: acme's usage of `count` H100s on `node` (see [`h100_usage`]).
fn usage(
    node: &str,
    seq: u64,
    region: &str,
    lease: Option<&str>,
    count: &str,
    start: i64,
    end: i64,
) -> (u64, Body) {
    let body = h100_usage("acme", node, region, lease, count, start, end);
    (seq, body)
}

/// The golden day's line amounts, hand-computed (docs/RATING.md): 2.00 east on-demand; 148.00
/// west on-demand; spot 6.00 at 7.2, 1.33 at 8, 3.00 at 9, 3.78 at 11.35; energy 12.5 × 1.08
/// × 0.28 = 3.78. And their total.
const GOLDEN_AMOUNTS: [&str; 7] = ["2.00", "148.00", "6.00", "1.33", "3.00", "3.78", "3.78"];
const GOLDEN_TOTAL: &str = "167.89";

/// The golden scenario's prices and records (docs/RATING.md): rate cards in two regions, a spot
/// lease with four spot prices (three changes inside its interval), west region parameters,
/// and the four records of day 1: a fresh log of `db` holding them.
fn golden_log(db: &TestDb) -> gpuledger::store::Ledger {
    // Set up when the first prices take effect, a day before the records: no price may take
    // effect before it is logged (beyond the policy's skew), and receive times never decrease.
    let log = open_at(db, at(-86_400));
    let ledger = &log;
    ensure_nodes_in(ledger, &NODE_REGIONS);
    let node = signer_for(ledger, "node-1", Role::Node, &NODES);
    let market = signer(ledger, "market-1", Role::Market);
    // beta is registered too, so that invoice bundles have another tenant's entries to leave out.
    parties(ledger, &["acme", "beta"]);
    for body in [
        rate_card("west", LeaseClass::OnDemand, "18.5", at(-86_400)),
        rate_card("east", LeaseClass::OnDemand, "24", at(-86_400)),
        // Usage is billed under a lease covering its node and model: acme's on-demand H100s
        // and its spot H100s, on the nodes of the golden day and of the late records (node-2).
        lease_body("od-acme", "acme", LeaseClass::OnDemand, &OD_ACME),
        lease_body(
            "spot-1",
            "acme",
            LeaseClass::Spot,
            &[("node-1", "H100", 8), ("node-2", "H100", 8)],
        ),
        Body::RegionParams(RegionParameters {
            region: "west".into(),
            currency: "CNY".into(),
            electricity_price_per_kwh: dec("0.28"),
            pue: dec("1.08"),
            carbon_g_per_kwh: dec("530"),
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
                price_per_gpu_hour: dec(p),
                currency: "CNY".into(),
                effective_from: at(*t),
            });
            signed("market-1", &market, i as u64 + 1, &body)
        })
        .collect();
    // The prices were published as they took effect: the ledger's clock at the first of them.
    ledger.set_clock(Some(at(0)));
    let out = ledger.append(spots).unwrap();
    ledger.set_clock(None);
    assert_accepted(&out);
    let records = [
        usage("node-1", 1, "west", Some("od-acme"), "8", 0, 3600),
        usage("node-e1", 2, "east", Some("od-acme"), "0.5", 0, 600),
        usage("node-1", 3, "west", Some("spot-1"), "2", 300, 3300),
        (4, acme_energy("node-1", "12.5", 0, 3600)),
    ];
    append_signed(ledger, "node-1", &node, &records);
    log
}

both_backends!(golden_scenario_rated_from_the_log, |db: &TestDb| {
    let ledger = golden_log(db);
    let size = ledger.reads().head().unwrap().0;
    let rater = ledger
        .reads()
        .run(|c| pricing::rate_period(c, "acme", at(0), at(86_400), size))
        .unwrap();
    let (lines, unpriced) = rater.period_lines();
    let cny = &lines["CNY"];
    let amounts: Vec<String> = cny.iter().map(|l| l.amount.to_string()).collect();
    assert_eq!(amounts, GOLDEN_AMOUNTS);
    assert_eq!(rating::total(cny).to_string(), GOLDEN_TOTAL);
    assert!(unpriced.is_empty(), "{unpriced:?}");
    // The total equals an independent recomputation: Σ exact amounts, each rounded.
    let recomputed: Decimal = cny
        .iter()
        .map(|l| rating::round_amount(l.exact_amount, "CNY"))
        .sum();
    assert_eq!(recomputed, rating::total(cny));
    // Prices as of an earlier log size (before the spot prices) leave the spot usage unpriced.
    let early = ledger
        .reads()
        .run(|c| pricing::rate_period(c, "acme", at(0), at(86_400), 7))
        .unwrap();
    // As of log size 7 no usage had been logged yet: a bound that leaked would rate it.
    let (lines, unpriced) = early.period_lines();
    assert!(
        lines.is_empty() && unpriced.is_empty(),
        "{lines:?} {unpriced:?}"
    );
});

both_backends!(prices_change_only_forward, |db: &TestDb| {
    // The ledger's clock a day before the prices take effect: announced ahead, as prices are.
    let ledger = open_at(db, at(-86_400));
    parties(&ledger, &["acme"]);
    ledger
        .append_ledger_entry(rate_card("west", LeaseClass::OnDemand, "18.5", at(0)))
        .unwrap();
    let same_time =
        ledger.append_ledger_entry(rate_card("west", LeaseClass::OnDemand, "19", at(0)));
    assert!(
        matches!(&same_time, Err(StoreError::Rejected(r)) if r.reason == Reason::PriceNotForward && r.field.as_deref() == Some("body.effective_from") && r.message.contains("prices change only forward")),
        "{same_time:?}"
    );
    let earlier =
        ledger.append_ledger_entry(rate_card("west", LeaseClass::OnDemand, "19", at(-10)));
    assert!(
        matches!(&earlier, Err(StoreError::Rejected(r)) if r.reason == Reason::PriceNotForward),
        "{earlier:?}"
    );
    // Another series is independent; a later change is fine.
    ledger
        .append_ledger_entry(rate_card("west", LeaseClass::Reserved, "12", at(0)))
        .unwrap();
    ledger
        .append_ledger_entry(rate_card("west", LeaseClass::OnDemand, "19", at(3600)))
        .unwrap();
    let lease = lease_body(
        "l-1",
        "acme",
        LeaseClass::Reserved,
        &[("node-1", "H100", 8)],
    );
    ledger.append_ledger_entry(lease.clone()).unwrap();
    assert!(matches!(
        ledger.append_ledger_entry(lease),
        Err(StoreError::AlreadyExists(_))
    ));
    // Records of other kinds cannot be written this way, and nodes cannot sign prices.
    let k = signer(&ledger, "node-1", Role::Node);
    assert!(matches!(
        ledger.append_ledger_entry(usage("node-1", 1, "west", Some("l-1"), "1", 0, 10).1),
        Err(StoreError::Refused(_))
    ));
    let forged = signed(
        "node-1",
        &k,
        1,
        &rate_card("west", LeaseClass::OnDemand, "0.01", at(7200)),
    );
    let out = ledger.append(vec![forged]).unwrap();
    assert!(
        matches!(&out[0], Outcome::Rejected(r) if r.reason == gpuledger::core::rejection::Reason::RoleNotAllowed)
    );
    let size = ledger.reads().head().unwrap().0;
    verified(&db.url);
    assert_eq!(
        size, 9,
        "the policy, node-1, acme and its lease, three rate cards, a lease, node-1's key"
    );
});

both_backends!(pricing_endpoints_and_preview, |db: &TestDb| {
    use serde_json::json;
    let log = init(db);
    // The prices in force for the records of days 0 and 1, logged a day before day 0 as they
    // took effect (no price may take effect in the past): west on-demand from then, and west
    // reserved announced from day 1 on, so that day 0's reserved usage has no price.
    log.write_at(
        at(-86_400),
        [
            rate_card("west", LeaseClass::OnDemand, "18.5", at(-86_400)),
            rate_card("west", LeaseClass::Reserved, "12", at(86_400)),
        ],
    );
    let srv = log.serve();
    let h = srv.http();
    let admin = log.admin.clone();
    let token = |body: serde_json::Value| h.secret(&admin, body);
    h.call(
        "POST",
        "/v1/tenants",
        Some(&admin),
        Some(json!({"id": "acme", "name": "Acme"})),
    );
    h.call(
        "POST",
        "/v1/tenants",
        Some(&admin),
        Some(json!({"id": "beta", "name": "Beta"})),
    );
    let acme = token(json!({"role": "tenant", "tenant": "acme"}));
    let auditor = token(json!({"role": "auditor"}));
    // A change announced for tomorrow: it prices none of the records below.
    let tomorrow = Timestamp::now().plus(86_400);
    let card = json!({"region": "west", "gpu_model": "H100", "lease_class": "on_demand", "currency": "CNY",
                      "price_per_gpu_hour": "18.5", "effective_from": tomorrow.to_string()});
    assert_eq!(
        h.call("POST", "/v1/rate-cards", Some(&admin), Some(card.clone()))
            .0,
        201
    );
    // Bad inputs: precise 400s and 409s; auditors and tenants may not write.
    let (st, p) = h.call("POST", "/v1/rate-cards", Some(&admin), Some(card.clone()));
    assert_eq!(
        (st, p["type"].as_str().unwrap()),
        (400, "urn:gpuledger:problem:refused"),
        "{p}"
    );
    let mut spot = card.clone();
    spot["lease_class"] = json!("spot");
    let (st, p) = h.call("POST", "/v1/rate-cards", Some(&admin), Some(spot));
    assert_eq!(
        (st, p["errors"][0]["field"].as_str()),
        (400, Some("body.lease_class")),
        "{p}"
    );
    let mut neg = card.clone();
    neg["price_per_gpu_hour"] = json!("-1");
    neg["effective_from"] = json!(tomorrow.plus(60).to_string());
    let (st, p) = h.call("POST", "/v1/rate-cards", Some(&admin), Some(neg));
    assert_eq!(
        (st, p["errors"][0]["reason"].as_str()),
        (400, Some("negative_quantity")),
        "{p}"
    );
    assert_eq!(
        h.call("POST", "/v1/rate-cards", Some(&auditor), Some(card.clone()))
            .0,
        403
    );
    assert_eq!(
        h.call("POST", "/v1/rate-cards", Some(&acme), Some(card.clone()))
            .0,
        403
    );
    assert_eq!(h.call("POST", "/v1/rate-cards", None, Some(card)).0, 401);
    // Leases cover GPUs of registered nodes: 4 of node-p's 16 H100s each.
    h.node_in(&admin, "node-p", "west");
    let lease = node_p_lease("l-1", "acme", "reserved", 4);
    assert_eq!(
        h.call("POST", "/v1/leases", Some(&admin), Some(lease.clone()))
            .0,
        201
    );
    assert_eq!(
        h.call("POST", "/v1/leases", Some(&admin), Some(lease)).0,
        409
    );
    assert_eq!(
        h.call(
            "POST",
            "/v1/leases",
            Some(&admin),
            Some(node_p_lease("l-2", "beta", "spot", 4))
        )
        .0,
        201
    );
    let (st, prices) = h.call("GET", "/v1/prices", Some(&acme), None);
    assert_eq!(st, 200);
    let kinds: Vec<&str> = prices
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["rate_card", "rate_card", "rate_card", "lease_registered"],
        "acme sees prices (the two logged before the server, and tomorrow's) and its own lease only"
    );

    // Usage from a registered node on days 0 and 1 (the on-demand usage under acme's
    // on-demand lease, registered now), then a preview computed from the log.
    od_acme_on_node_p(&h, &admin);
    let records = [
        usage("node-p", 1, "west", Some("od-acme"), "8", 0, 3600),
        usage("node-p", 2, "west", Some("l-1"), "1", 0, 3600),
        usage("node-p", 3, "west", Some("od-acme"), "8", 86_400, 90_000),
        usage("node-p", 4, "west", Some("l-1"), "1", 86_400, 90_000),
    ];
    post_node_p_records(&h, &admin, &records);
    let (st, preview) = h.call("GET", &preview_of("acme", 0, 86_400), Some(&acme), None);
    assert_eq!(st, 200, "{preview}");
    assert_eq!(preview["currencies"][0]["total"], "148.00");
    // The same line objects as an issued invoice's: GPU-hours with the GPU-seconds alongside.
    assert_eq!(preview["currencies"][0]["lines"][0]["quantity"], "8");
    assert_eq!(preview["currencies"][0]["lines"][0]["unit"], "GPU-h");
    assert_eq!(preview["currencies"][0]["lines"][0]["gpu_seconds"], "28800");
    assert_eq!(preview["currencies"][0]["lines"][0]["net"], "148.00");
    assert!(preview["currencies"][0]["lines"][0].get("type").is_none());
    // The reserved lease has no rate card: unpriced and named, never zero.
    assert_eq!(preview["unpriced"][0]["what"], "no rate card in force");
    assert_eq!(preview["unpriced"][0]["class"], "reserved");
    assert_eq!(preview["unpriced"][0]["quantity"], "3600");
    // Isolation and bad parameters.
    for (path, token, status) in [
        (preview_of("beta", 0, 86_400), &acme, 404),
        (preview_of("beta", 0, 86_400), &auditor, 200),
        (preview_of("acme", 10, 0), &admin, 400),
        (preview_of("nobody", 0, 10), &admin, 404),
    ] {
        assert_eq!(h.get(&path, Some(token)).status, status, "{path}");
    }

    // Issuing is refused while usage is unpriced (the reserved lease), and changes nothing.
    let period = json!({"tenant": "acme", "from": at(0).to_string(), "to": at(86_400).to_string()});
    let before = h.size();
    let (st, p) = h.call("POST", "/v1/invoices", Some(&admin), Some(period.clone()));
    assert_eq!(
        (st, p["type"].as_str()),
        (400, Some("urn:gpuledger:problem:refused")),
        "{p}"
    );
    assert!(p["detail"]
        .as_str()
        .unwrap()
        .contains("no rate card in force"));
    assert_eq!(h.size(), before);
    // Nor can a price written now reach back to day 0: usage once measured unpriced stays so.
    let reserved = json!({"region": "west", "gpu_model": "H100", "lease_class": "reserved", "currency": "CNY",
                          "price_per_gpu_hour": "12", "effective_from": at(-86_400).to_string()});
    let (st, p) = h.call("POST", "/v1/rate-cards", Some(&admin), Some(reserved));
    assert_eq!(
        (st, p["errors"][0]["reason"].as_str()),
        (400, Some("price_in_past")),
        "{p}"
    );
    assert_eq!(h.size(), before);
    // Day 1, when the reserved card is in force, is priced whole: 148.00 + 12.00.
    let period =
        json!({"tenant": "acme", "from": at(86_400).to_string(), "to": at(2 * 86_400).to_string()});
    let (st, issued) = h.call("POST", "/v1/invoices", Some(&admin), Some(period.clone()));
    assert_eq!(st, 201, "{issued}");
    let number = issued[0]["number"].as_str().unwrap().to_owned();
    assert_eq!(issued[0]["total"], "160.00");
    assert_eq!(
        h.call("POST", "/v1/invoices", Some(&admin), Some(period)).0,
        409,
        "issuing twice"
    );
    let small = json!({"tenant": "acme", "from": at(0).to_string(), "to": at(10).to_string()});
    assert_eq!(
        h.call("POST", "/v1/invoices", Some(&acme), Some(small)).0,
        403
    );
    // Downloads: JSON, CSV and PDF agree on the total; other tenants get 404.
    let beta = token(json!({"role": "tenant", "tenant": "beta"}));
    assert_eq!(
        h.call("GET", &format!("/v1/invoices/{number}"), Some(&beta), None)
            .0,
        404
    );
    assert_eq!(
        h.call(
            "GET",
            &format!("/v1/invoices/{number}/pdf"),
            Some(&beta),
            None
        )
        .0,
        404
    );
    let (st, inv) = h.call("GET", &format!("/v1/invoices/{number}"), Some(&acme), None);
    assert_eq!((st, inv["total"].as_str()), (200, Some("160.00")));
    let fetch = |fmt: &str| {
        let r = h.get(&format!("/v1/invoices/{number}/{fmt}"), Some(&acme));
        assert_eq!(r.status, 200, "{fmt}");
        r.body
    };
    let csv = String::from_utf8(fetch("csv")).unwrap();
    assert!(csv.lines().count() >= 3 && csv.contains("160.00"), "{csv}");
    let pdf = fetch("pdf");
    assert!(pdf.starts_with(b"%PDF"));
    // The evidence bundle: the invoice recomputes offline with `gpuledger verify --invoice`.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("inv.json"), fetch("json")).unwrap();
    std::fs::write(dir.path().join("inv.bundle"), fetch("bundle")).unwrap();
    let vkey = h.call("GET", "/v1/log", None, None).1["verifier_key"]
        .as_str()
        .unwrap()
        .to_owned();
    let files = ["--invoice", "inv.json", "--bundle", "inv.bundle"];
    assert_verify_passes(dir.path(), &files, &vkey, "PASS: invoice");
    // The answer of POST /v1/invoices (an array) holding that one invoice verifies too; an
    // array of two is a usage error (exit 2) naming both numbers, not a FAIL of the evidence.
    let one: serde_json::Value = serde_json::from_slice(&fetch("json")).unwrap();
    let array = |n: usize| serde_json::Value::Array(vec![one.clone(); n]).to_string();
    std::fs::write(dir.path().join("issued.json"), array(1)).unwrap();
    let files = ["--invoice", "issued.json", "--bundle", "inv.bundle"];
    assert_verify_passes(dir.path(), &files, &vkey, "PASS: invoice");
    std::fs::write(dir.path().join("two.json"), array(2)).unwrap();
    let out = common::bin()
        .args(["verify", "--invoice", "two.json", "--bundle", "inv.bundle"])
        .args(["--log-key", &vkey])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("array of 2 invoice(s)") && err.contains(&format!("{number}, {number}")),
        "{err}"
    );
    assert_eq!(
        h.call(
            "GET",
            &format!("/v1/invoices/{number}/bundle"),
            Some(&beta),
            None
        )
        .0,
        404
    );
    assert_eq!(
        h.call(
            "GET",
            &format!("/v1/invoices/{number}/docx"),
            Some(&acme),
            None
        )
        .0,
        400
    );
    // Settlement: bad inputs are precise 4xx; the balance follows the log.
    let pay = |amount: &str, invoice: &str| json!({"tenant": "acme", "invoice": invoice, "currency": "CNY", "amount": amount, "note": "wire"});
    let (st, p) = h.call(
        "POST",
        "/v1/payments",
        Some(&admin),
        Some(pay("-5", &number)),
    );
    assert_eq!(
        (st, p["errors"][0]["reason"].as_str()),
        (400, Some("negative_quantity")),
        "{p}"
    );
    assert_eq!(
        h.call(
            "POST",
            "/v1/payments",
            Some(&admin),
            Some(pay("5", "INV-424242"))
        )
        .0,
        404
    );
    assert_eq!(
        h.call(
            "POST",
            "/v1/payments",
            Some(&admin),
            Some(pay("60.00", &number))
        )
        .0,
        201
    );
    let (st, bal) = h.call("GET", "/v1/balance", Some(&acme), None);
    assert_eq!(
        (st, bal["currencies"]["CNY"]["due"].as_str()),
        (200, Some("100.00")),
        "{bal}"
    );
    // Every figure with the currency's two digits, as accounts write them (not `0`).
    let cny = &bal["currencies"]["CNY"];
    for (k, v) in [("credited", "0.00"), ("credit", "0.00"), ("paid", "60.00")] {
        assert_eq!(cny[k].as_str(), Some(v), "{k}: {bal}");
    }
    assert_eq!(
        h.call("GET", "/v1/balance?tenant=beta", Some(&acme), None)
            .0,
        404
    );
});

both_backends!(
    invoice_lifecycle_with_late_record_and_credit_note,
    |db: &TestDb| {
        // The rate card is logged as it takes effect, a day before the records; then the
        // ledger's clock is the real one again for the records.
        let ledger = open_at(db, at(-86_400));
        ensure_nodes_in(&ledger, &NODE_REGIONS);
        ensure_nodes_in(&ledger, &NODE_REGIONS);
        let node = signer_for(&ledger, "node-1", Role::Node, &NODES);
        parties(&ledger, &["acme"]);
        ledger
            .append_ledger_entry(rate_card("west", LeaseClass::OnDemand, "18.5", at(-86_400)))
            .unwrap();
        ledger
            .append_ledger_entry(lease_body(
                "od-acme",
                "acme",
                LeaseClass::OnDemand,
                &OD_ACME,
            ))
            .unwrap();
        ledger.set_clock(None);
        let day1 = day_period(0);
        let day2 = day_period(1);
        let rec = |seq: u64, start: i64, count: &str| {
            let (_, b) = usage(
                "node-1",
                seq,
                "west",
                Some("od-acme"),
                count,
                start,
                start + 3600,
            );
            signed("node-1", &node, seq, &b)
        };
        // Not in the past? day2 must end before now: recent_day() is 3 days back, so both days are past.
        assert_accepted(&ledger.append(vec![rec(1, 0, "8")]).unwrap());
        let first = ledger.issuance().invoices("acme", day1).unwrap();
        assert_eq!(first.len(), 1);
        let inv1 = &first[0];
        assert_eq!(
            (inv1.number.as_str(), inv1.total.to_string().as_str()),
            ("INV-000001", "148.00")
        );
        assert_eq!(inv1.total, inv1.sum_of_lines().gross);
        // The issued invoice is in the log, by hash, and the log still verifies.
        let (json, hash) = gpuledger::store::invoices::invoice_json(inv1).unwrap();
        let stored = ledger
            .reads()
            .run(|c| gpuledger::store::invoices::get(c, "INV-000001"))
            .unwrap()
            .unwrap();
        assert_eq!(stored.1, json);
        let size = ledger.reads().head().unwrap().0;
        let entries = ledger.reads().entries(0, size).unwrap();
        let issued = entries.iter().find(|e| e.kind == "invoice_issued").unwrap();
        assert!(String::from_utf8_lossy(&issued.leaf).contains(&hash));
        // Issuing an overlapping period again is refused.
        assert!(matches!(
            ledger.issuance().invoices("acme", day1),
            Err(StoreError::AlreadyExists(_))
        ));
        // A late record for day 1 and usage on day 2: the next invoice has both, the late one as an
        // adjustment naming day 1.
        assert_accepted(
            &ledger
                .append(vec![rec(2, 7200, "2"), rec(3, 86_400, "1")])
                .unwrap(),
        );
        let second = ledger.issuance().invoices("acme", day2).unwrap();
        let inv2 = &second[0];
        assert_eq!(inv2.number, "INV-000002");
        assert_eq!(inv2.lines.len(), 2);
        assert_eq!(
            (inv2.lines[0].net.to_string(), inv2.lines[0].adjustment_for),
            ("18.50".to_owned(), None)
        );
        assert_eq!(
            (inv2.lines[1].net.to_string(), inv2.lines[1].adjustment_for),
            ("37.00".to_owned(), Some(day1))
        );
        assert_eq!(inv2.total.to_string(), "55.50");
        // Payments and credit notes, and the balance derived from them.
        for body in [
            Body::Payment(settle("INV-000001", "100.00")),
            Body::CreditNote(settle("INV-000001", "48.00")),
        ] {
            ledger.issuance().settle(body).unwrap();
        }
        assert!(
            matches!(
                ledger.issuance().settle(Body::CreditNote(settle("INV-000001", "100.01"))),
                Err(StoreError::Rejected(r)) if r.reason == Reason::CreditAboveTotal && r.field.as_deref() == Some("body.amount")
            ),
            "credits above the total"
        );
        assert!(matches!(
            ledger
                .issuance()
                .settle(Body::Payment(settle("INV-999999", "1"))),
            Err(StoreError::NotFound(_))
        ));
        let mut wrong = settle("INV-000002", "1");
        wrong.currency = "USD".into();
        assert!(matches!(
            ledger.issuance().settle(Body::Payment(wrong)),
            Err(StoreError::Rejected(r)) if r.reason == Reason::CurrencyMismatch
        ));
        let b = ledger
            .reads()
            .run(|c| gpuledger::store::invoices::balances(c, "acme"))
            .unwrap();
        let cny = &b.by_currency["CNY"];
        assert_eq!(
            (cny.invoiced, cny.paid, cny.credited, cny.due),
            (dec("203.50"), dec("100.00"), dec("48.00"), dec("55.50"))
        );
        // Usage with no price cannot be invoiced; nothing changes.
        let (_, east) = usage(
            "node-e",
            4,
            "east",
            Some("od-acme"),
            "1",
            2 * 86_400,
            2 * 86_400 + 60,
        );
        assert_accepted(
            &ledger
                .append(vec![signed("node-1", &node, 4, &east)])
                .unwrap(),
        );
        let before = ledger.reads().head().unwrap().0;
        let day3 = day_period(2);
        assert!(
            matches!(ledger.issuance().invoices("acme", day3), Err(StoreError::Refused(m)) if m.contains("no rate card in force"))
        );
        assert_eq!(verified(&db.url).size, before, "nothing was logged");
    }
);

// The whole story on one log, to the last digit: the golden day (two regions,
// on-demand and spot with three spot-price changes inside one interval, energy with PUE) is
// invoiced; late records of that day (on-demand, spot across a price change, energy) arrive
// with day 2's usage, so the next invoice carries adjustment lines naming day 1; then a
// credit note and payments, and the balance.
both_backends!(
    golden_story_invoice_late_record_credit_note_balance,
    |db: &TestDb| {
        let ledger = golden_log(db);
        let day1 = day_period(0);
        let day2 = day_period(1);
        let first = ledger.issuance().invoices("acme", day1).unwrap();
        assert_eq!(first.len(), 1);
        let amounts = |inv: &gpuledger::core::invoice::Invoice| {
            inv.lines
                .iter()
                .map(|l| (l.net.to_string(), l.adjustment_for))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            amounts(&first[0]),
            GOLDEN_AMOUNTS.map(|a| (a.to_owned(), None))
        );
        assert_eq!(
            (first[0].number.as_str(), first[0].total.to_string()),
            ("INV-000001", GOLDEN_TOTAL.to_owned())
        );
        // Late for day 1, from another node: 1 GPU west on-demand 02:00–02:30 (1800 GPU-s × 18.5 =
        // 9.25); 3 GPUs on the spot lease 00:48:20–00:51:40, across the change to 8 at 00:50
        // (300 GPU-s × 11.35 = 0.9458… → 0.95, and 300 GPU-s × 8 = 0.666… → 0.67); 2 kWh in west
        // (2 × 1.08 × 0.28 = 0.6048 → 0.60). Day 2: 1 GPU east for an hour, 24.00.
        let node2 = signer_for(&ledger, "node-2", Role::Node, &["node-2", "node-e2"]);
        let late = [
            usage("node-2", 1, "west", Some("od-acme"), "1", 7200, 9000),
            usage("node-2", 2, "west", Some("spot-1"), "3", 2900, 3100),
            (3, acme_energy("node-2", "2", 0, 3600)),
            usage("node-e2", 4, "east", Some("od-acme"), "1", 86_400, 90_000),
        ];
        append_signed(&ledger, "node-2", &node2, &late);
        let second = ledger.issuance().invoices("acme", day2).unwrap();
        let inv2 = &second[0];
        assert_eq!(inv2.number, "INV-000002");
        assert_eq!(
            amounts(inv2),
            [
                ("24.00", None),
                ("9.25", Some(day1)),
                ("0.67", Some(day1)),
                ("0.95", Some(day1)),
                ("0.60", Some(day1)),
            ]
            .map(|(a, p)| (a.to_owned(), p))
        );
        assert_eq!(
            (inv2.lines[3].gpu_seconds, inv2.lines[3].unit_price),
            (Some(dec("300")), dec("11.35"))
        );
        assert_eq!(inv2.total.to_string(), "35.47");
        assert_eq!(inv2.total, inv2.sum_of_lines().gross);
        // The late records are adjusted once: day 3's invoice has nothing of day 1.
        let (_, east) = usage(
            "node-e2",
            5,
            "east",
            Some("od-acme"),
            "1",
            2 * 86_400,
            2 * 86_400 + 3600,
        );
        ledger
            .append(vec![signed("node-2", &node2, 5, &east)])
            .unwrap();
        let day3 = day_period(2);
        let third = ledger.issuance().invoices("acme", day3).unwrap();
        assert_eq!(amounts(&third[0]), [("24.00".to_owned(), None)]);
        // Each invoice recomputes offline from its evidence bundle; a changed amount does not.
        for inv in [&first[0], &second[0], &third[0]] {
            assert_eq!(recomputed(&ledger, inv), Ok(inv.clone()), "{}", inv.number);
        }
        let mut forged = second[0].clone();
        forged.lines[1].net += Decimal::new(1, 2);
        forged.lines[1].gross += Decimal::new(1, 2);
        forged.net_total += Decimal::new(1, 2);
        forged.total += Decimal::new(1, 2);
        let f = recomputed(&ledger, &forged).unwrap_err();
        assert_eq!(
            (f.reason, f.item.as_str()),
            (bundle::Reason::ClaimMismatch, "lines[1].gross")
        );
        // A credit note on the first invoice and payments on both, then the balance.
        for body in [
            Body::CreditNote(settle("INV-000001", "17.89")),
            Body::Payment(settle("INV-000001", "150.00")),
            Body::Payment(settle("INV-000002", "30.00")),
        ] {
            ledger.issuance().settle(body).unwrap();
        }
        let b = ledger
            .reads()
            .run(|c| gpuledger::store::invoices::balances(c, "acme"))
            .unwrap();
        let cny = &b.by_currency["CNY"];
        // Invoiced 167.89 + 35.47 + 24.00 = 227.36; paid 180.00; credited 17.89; due 29.47.
        assert_eq!(
            [cny.invoiced, cny.paid, cny.credited, cny.due].map(|x| x.to_string()),
            ["227.36", "180.00", "17.89", "29.47"]
        );
        verified(&db.url);
    }
);

fn volume_tiers(plan: &str, spec: &[(Option<&str>, &str)], from: Timestamp) -> Body {
    Body::VolumeTiers(VolumeTiers {
        plan: plan.into(),
        region: "west".into(),
        gpu_model: "H100".into(),
        lease_class: LeaseClass::OnDemand,
        currency: "CNY".into(),
        tiers: spec
            .iter()
            .map(|(b, p)| Tier {
                up_to_gpu_hours: b.map(dec),
                price_per_gpu_hour: dec(p),
            })
            .collect(),
        effective_from: from,
    })
}

fn tenant_plan(tenant: &str, plan: &str, from: Timestamp) -> Body {
    Body::TenantPlan(TenantPlan {
        tenant: tenant.into(),
        plan: plan.into(),
        effective_from: from,
    })
}

// The graduated example of docs/RATING.md from log entries: one record crosses two tier
// bounds, records arrive out of time order, east and spot are not tiered, a tenant without
// the plan pays the rate card; then the invoice, and a late record that continues the
// period's count at tier 3.
both_backends!(graduated_tiers_from_the_log, |db: &TestDb| {
    use gpuledger::core::invoice::Period;
    use gpuledger::core::rating::LineKey;
    // Set up before the spot price takes effect (receive times never decrease).
    let ledger = open_at(db, at(-90_000));
    ensure_nodes_in(&ledger, &NODE_REGIONS);
    let node = signer_for(&ledger, "node-1", Role::Node, &NODES);
    let market = signer(&ledger, "market-1", Role::Market);
    parties(&ledger, &["acme", "beta"]);
    for body in [
        rate_card("west", LeaseClass::OnDemand, "18.5", at(-86_400)),
        rate_card("east", LeaseClass::OnDemand, "24", at(-86_400)),
        volume_tiers(
            "volume",
            &[
                (Some("10"), "20.5"),
                (Some("25"), "17.25"),
                (None, "13.333"),
            ],
            at(-86_400),
        ),
        tenant_plan("acme", "volume", at(-86_400)),
        lease_body("spot-1", "acme", LeaseClass::Spot, &[("node-1", "H100", 8)]),
        // The on-demand usage is billed under on-demand leases of H100s: acme's, and beta's
        // on node-b.
        lease_body("od-acme", "acme", LeaseClass::OnDemand, &OD_ACME),
        lease_body(
            "od-beta",
            "beta",
            LeaseClass::OnDemand,
            &[("node-b", "H100", 8)],
        ),
    ] {
        ledger.append_ledger_entry(body).unwrap();
    }
    let spot = Body::SpotPrice(SpotPrice {
        region: "west".into(),
        gpu_model: "H100".into(),
        price_per_gpu_hour: dec("9"),
        currency: "CNY".into(),
        effective_from: at(-86_400),
    });
    // Published when it took effect.
    ledger.set_clock(Some(at(-86_400)));
    let out = ledger
        .append(vec![signed("market-1", &market, 1, &spot)])
        .unwrap();
    ledger.set_clock(None);
    assert_accepted(&out);
    let mut records = vec![
        // 2.5 GPUs × 28000 s = 70000 GPU-s, logged before the earlier 3-GPU record.
        usage("node-1", 1, "west", Some("od-acme"), "2.5", 7200, 35_200),
        usage("node-1", 2, "west", Some("od-acme"), "3", 0, 7200),
        usage("node-e", 3, "east", Some("od-acme"), "1", 0, 3600),
        usage("node-1", 4, "west", Some("spot-1"), "2", 0, 1800),
    ];
    // beta has no plan: west at the rate card.
    let (_, mut beta) = usage("node-b", 5, "west", Some("od-beta"), "1", 0, 3600);
    if let Body::GpuUsage(u) = &mut beta {
        u.tenant = "beta".into();
    }
    records.push((5, beta));
    append_signed(&ledger, "node-1", &node, &records);
    let size = ledger.reads().head().unwrap().0;
    let rate = |tenant: &str| {
        let r = ledger
            .reads()
            .run(|c| pricing::rate_period(c, tenant, at(0), at(86_400), size))
            .unwrap();
        let (lines, unpriced) = r.period_lines();
        assert!(unpriced.is_empty(), "{unpriced:?}");
        lines["CNY"]
            .iter()
            .map(|l| {
                let tier = match &l.key {
                    LineKey::Gpu { tier, .. } => tier.as_ref().map(|t| (t.plan.clone(), t.tier)),
                    LineKey::Energy { .. } => None,
                };
                (l.quantity.to_string(), l.amount.to_string(), tier)
            })
            .collect::<Vec<_>>()
    };
    let tier = |n| Some(("volume".to_owned(), n));
    assert_eq!(
        rate("acme"),
        [
            ("3600", "24.00", None),
            ("36000", "205.00", tier(1)),
            ("54000", "258.75", tier(2)),
            ("1600", "5.93", tier(3)),
            ("3600", "9.00", None),
        ]
        .map(|(q, a, t)| (q.to_owned(), a.to_owned(), t))
    );
    assert_eq!(
        rate("beta"),
        [("3600".to_owned(), "18.50".to_owned(), None)]
    );
    // Issue day 1 (502.68), then a late record of day 1: 1 GPU for an hour continues the count
    // from 91600 GPU-s, all at tier 3: 3600 × 13.333 ÷ 3600 = 13.333 → 13.33.
    let day1 = day_period(0);
    let first = ledger.issuance().invoices("acme", day1).unwrap();
    assert_eq!(first[0].total.to_string(), "502.68");
    assert_eq!(first[0].lines.len(), 5);
    let late = usage("node-2", 6, "west", Some("od-acme"), "1", 36_000, 39_600);
    let next = usage("node-e", 7, "east", Some("od-acme"), "1", 86_400, 90_000);
    append_signed(&ledger, "node-1", &node, &[late, next]);
    let day2 = day_period(1);
    let second = ledger.issuance().invoices("acme", day2).unwrap();
    let lines: Vec<(String, Decimal, Option<Period>)> = second[0]
        .lines
        .iter()
        .map(|l| (l.net.to_string(), l.unit_price, l.adjustment_for))
        .collect();
    assert_eq!(
        lines,
        [
            ("24.00".to_owned(), dec("24"), None),
            ("13.33".to_owned(), dec("13.333"), Some(day1)),
        ]
    );
    assert_eq!(second[0].total.to_string(), "37.33");
    // Both invoices, the tiered adjustment included, recompute offline from their bundles.
    assert_eq!(recomputed(&ledger, &first[0]), Ok(first[0].clone()));
    assert_eq!(recomputed(&ledger, &second[0]), Ok(second[0].clone()));
    verified(&db.url);
});

// Volume tiers and plans change only forward, per plan and series and per tenant.
both_backends!(tiers_and_plans_change_only_forward, |db: &TestDb| {
    // The ledger's clock a day before the prices take effect: announced ahead, as prices are.
    let ledger = open_at(db, at(-86_400));
    parties(&ledger, &["acme", "beta"]);
    let t = |from| volume_tiers("volume", &[(Some("10"), "20"), (None, "15")], from);
    ledger.append_ledger_entry(t(at(0))).unwrap();
    for from in [at(0), at(-1)] {
        assert!(
            matches!(ledger.append_ledger_entry(t(from)), Err(StoreError::Rejected(r)) if r.reason == Reason::PriceNotForward && r.message.contains("prices change only forward"))
        );
    }
    // Another plan is another series; a later change is fine.
    ledger
        .append_ledger_entry(volume_tiers("other", &[(None, "15")], at(0)))
        .unwrap();
    ledger.append_ledger_entry(t(at(60))).unwrap();
    ledger
        .append_ledger_entry(tenant_plan("acme", "volume", at(0)))
        .unwrap();
    assert!(matches!(
        ledger.append_ledger_entry(tenant_plan("acme", "other", at(0))),
        Err(StoreError::Rejected(r)) if r.reason == Reason::PriceNotForward
    ));
    // A plan nobody has defined tiers for is a plan whose series all use the rate card.
    ledger
        .append_ledger_entry(tenant_plan("beta", "no-tiers-yet", at(0)))
        .unwrap();
    ledger
        .append_ledger_entry(tenant_plan("acme", "other", at(1)))
        .unwrap();
    // The policy, node-1, two tenants with a lease each on it, then the six entries of this
    // test.
    assert_eq!(ledger.reads().head().unwrap().0, 6 + 6);
    verified(&db.url);
});

// The tier and plan endpoints: admin only; bad tiers are precise 400 problems that leave the
// log unchanged; tenants see tiers and their own plan only; the preview names plan and tier.
both_backends!(volume_tier_endpoints, |db: &TestDb| {
    use serde_json::json;
    let log = init(db);
    // The tiers and plans in force for day 0's record, logged a day before it as they took
    // effect (no price may take effect in the past); the tenants first, whom plans name.
    let day_before = at(-86_400);
    log.write_at(
        day_before,
        [
            Body::TenantRegistered(gpuledger::core::record::TenantRegistered {
                tenant: "acme".into(),
            }),
            Body::TenantRegistered(gpuledger::core::record::TenantRegistered {
                tenant: "beta".into(),
            }),
            volume_tiers("volume", &[(Some("1"), "20"), (None, "10")], day_before),
            tenant_plan("acme", "volume", day_before),
            tenant_plan("beta", "plain", day_before),
        ],
    );
    let srv = log.serve();
    let h = srv.http();
    let admin = log.admin.clone();
    for id in ["acme", "beta"] {
        h.call(
            "POST",
            "/v1/tenants",
            Some(&admin),
            Some(json!({"id": id, "name": id})),
        );
    }
    let acme = h.secret(&admin, json!({"role": "tenant", "tenant": "acme"}));
    // Changes announced for tomorrow, which price none of the records below.
    let tomorrow = Timestamp::now().plus(86_400);
    let tiers = json!({"plan": "volume", "region": "west", "gpu_model": "H100", "lease_class": "on_demand",
        "currency": "CNY", "effective_from": tomorrow.to_string(),
        "tiers": [{"up_to_gpu_hours": "1", "price_per_gpu_hour": "20"}, {"price_per_gpu_hour": "10"}]});
    let (st, p) = h.call(
        "POST",
        "/v1/volume-tiers",
        Some(&admin),
        Some(tiers.clone()),
    );
    assert_eq!(st, 201, "{p}");
    assert_eq!(p["kind"], "volume_tiers");
    let before = h.size();
    let bad = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut b = tiers.clone();
        b["effective_from"] = json!(tomorrow.plus(60).to_string());
        edit(&mut b);
        let (st, p) = h.call("POST", "/v1/volume-tiers", Some(&admin), Some(b));
        assert_eq!(st, 400, "{p}");
        assert_eq!(
            p["type"]
                .as_str()
                .map(|t| t.starts_with("urn:gpuledger:problem:")),
            Some(true),
            "{p}"
        );
        (
            p["errors"][0]["field"].as_str().unwrap_or("").to_owned(),
            p["errors"][0]["reason"].as_str().unwrap_or("").to_owned(),
        )
    };
    let field = |f: &str, r: &str| (f.to_owned(), r.to_owned());
    assert_eq!(
        bad(
            &|b| b["tiers"] = json!([{"up_to_gpu_hours": "2", "price_per_gpu_hour": "20"},
            {"up_to_gpu_hours": "2", "price_per_gpu_hour": "15"}, {"price_per_gpu_hour": "10"}])
        ),
        field("body.tiers[1].up_to_gpu_hours", "invalid_field"),
        "bounds must increase strictly"
    );
    assert_eq!(
        bad(&|b| b["tiers"] = json!([])),
        field("body.tiers", "invalid_field")
    );
    assert_eq!(
        bad(&|b| b["tiers"][1]["price_per_gpu_hour"] = json!("-1")),
        field("body.tiers[1].price_per_gpu_hour", "negative_quantity")
    );
    assert_eq!(
        bad(&|b| b["tiers"][1]["up_to_gpu_hours"] = json!("5")),
        field("body.tiers[1].up_to_gpu_hours", "invalid_field"),
        "the last tier is open"
    );
    assert_eq!(
        bad(&|b| b["tiers"][0]["up_to_gpu_hours"] = json!(null)),
        field("body", "malformed")
    );
    assert_eq!(
        bad(&|b| b["lease_class"] = json!("spot")),
        field("body.lease_class", "invalid_field")
    );
    // Not later than the series' latest: refused, as for rate cards.
    let (st, p) = h.call(
        "POST",
        "/v1/volume-tiers",
        Some(&admin),
        Some(tiers.clone()),
    );
    assert_eq!(
        (st, p["type"].as_str()),
        (400, Some("urn:gpuledger:problem:refused")),
        "{p}"
    );
    assert_eq!(h.size(), before, "nothing refused was logged");
    assert_eq!(
        h.call("POST", "/v1/volume-tiers", Some(&acme), Some(tiers.clone()))
            .0,
        403
    );
    assert_eq!(h.call("POST", "/v1/volume-tiers", None, Some(tiers)).0, 401);
    // Plans: acme on `volume`, beta on a plan without tiers (as since the day before, from
    // tomorrow too).
    for (tenant, plan) in [("acme", "volume"), ("beta", "plain")] {
        let body = json!({"tenant": tenant, "plan": plan, "effective_from": tomorrow.to_string()});
        assert_eq!(
            h.call("POST", "/v1/tenant-plans", Some(&admin), Some(body))
                .0,
            201
        );
    }
    let again = json!({"tenant": "acme", "plan": "plain", "effective_from": tomorrow.to_string()});
    assert_eq!(
        h.call(
            "POST",
            "/v1/tenant-plans",
            Some(&admin),
            Some(again.clone())
        )
        .0,
        400
    );
    assert_eq!(
        h.call("POST", "/v1/tenant-plans", Some(&acme), Some(again))
            .0,
        403
    );
    let (_, prices) = h.call("GET", "/v1/prices", Some(&acme), None);
    let seen: Vec<(&str, Option<&str>)> = prices
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["kind"].as_str().unwrap(), p["body"]["tenant"].as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            ("volume_tiers", None),
            ("tenant_plan", Some("acme")),
            ("volume_tiers", None),
            ("tenant_plan", Some("acme"))
        ],
        "acme sees tiers and its own plans only (the day before's and tomorrow's)"
    );
    // A preview over 2 GPU-hours: 1 at 20 and 1 at 10, named by plan and tier (under acme's
    // on-demand lease, registered now).
    od_acme_on_node_p(&h, &admin);
    let record = usage("node-p", 1, "west", Some("od-acme"), "2", 0, 3600);
    post_node_p_records(&h, &admin, &[record]);
    let (st, preview) = h.call("GET", &preview_of("acme", 0, 86_400), Some(&acme), None);
    assert_eq!(st, 200, "{preview}");
    let lines = &preview["currencies"][0]["lines"];
    assert_eq!(
        (&lines[0]["plan"], &lines[0]["tier"], &lines[0]["net"]),
        (&json!("volume"), &json!(1), &json!("20.00"))
    );
    assert_eq!(
        (
            &lines[1]["tier"],
            &lines[1]["gpu_seconds"],
            &lines[1]["net"]
        ),
        (&json!(2), &json!("3600"), &json!("10.00"))
    );
    assert_eq!(preview["currencies"][0]["total"], "30.00");
});

// The attack the admission rule stops (PROTOCOL §6.7), over HTTP: the operator re-prices usage
// measured hours ago with a rate card, region parameters, volume tiers or a tenant plan taking
// effect 6 h back. Each is refused `price_in_past` and changes neither the log nor what the
// usage costs; a price taking effect now is fine; and no price takes effect inside a period
// already invoiced (`price_in_invoiced_period`), even one within the skew.
both_backends!(
    no_price_takes_effect_in_the_past_over_http,
    |db: &TestDb| {
        use serde_json::json;
        let log = init(db);
        // West on-demand at 18.5, logged a day before the records as it took effect.
        log.write_at(
            at(-86_400),
            [rate_card("west", LeaseClass::OnDemand, "18.5", at(-86_400))],
        );
        // Periods may be invoiced as soon as they end, so that one can end within the skew.
        let srv = Server::start_with(
            &db.url,
            &log.key_path(),
            log.dir.path(),
            0,
            &["--invoice-close-seconds", "0"],
        );
        let h = srv.http();
        let admin = log.admin.clone();
        h.post(
            "/v1/tenants",
            Some(&admin),
            &json!({"id": "acme", "name": "Acme"}),
        )
        .ok_json(201);
        // 8 GPUs from 7 h to 5 h ago, under acme's on-demand lease: 16 GPU-h at 18.5.
        od_acme_on_node_p(&h, &admin);
        let now = Timestamp::now();
        let (_, mut record) = usage("node-p", 1, "west", Some("od-acme"), "8", 0, 7200);
        if let Body::GpuUsage(u) = &mut record {
            (u.start, u.end) = (now.plus(-7 * 3600), now.plus(-5 * 3600));
        }
        post_node_p_records(&h, &admin, &[(1, record)]);
        let (from, to) = (now.plus(-8 * 3600), now.plus(-60));
        let preview = format!("/v1/invoices/preview?tenant=acme&from={from}&to={to}");
        let total = || h.get(&preview, Some(&admin)).ok_json(200)["currencies"][0]["total"].clone();
        assert_eq!(total(), "296.00");
        let size = h.size();
        let six_hours_ago = now.plus(-6 * 3600).to_string();
        let card = |from: &str| {
            json!({"region": "west", "gpu_model": "H100", "lease_class": "on_demand",
        "currency": "CNY", "price_per_gpu_hour": "1", "effective_from": from})
        };
        let params = |from: &str| {
            json!({"region": "west", "currency": "CNY", "electricity_price_per_kwh": "9",
        "pue": "2", "carbon_g_per_kwh": "500", "effective_from": from})
        };
        for (path, body) in [
            ("/v1/rate-cards", card(&six_hours_ago)),
            ("/v1/region-params", params(&six_hours_ago)),
            (
                "/v1/volume-tiers",
                json!({"plan": "cheap", "region": "west", "gpu_model": "H100", "lease_class": "on_demand",
                   "currency": "CNY", "tiers": [{"price_per_gpu_hour": "1"}], "effective_from": six_hours_ago}),
            ),
            (
                "/v1/tenant-plans",
                json!({"tenant": "acme", "plan": "cheap", "effective_from": six_hours_ago}),
            ),
        ] {
            let (st, p) = h.call("POST", path, Some(&admin), Some(body));
            assert_eq!(
                (
                    st,
                    p["errors"][0]["reason"].as_str(),
                    p["errors"][0]["field"].as_str()
                ),
                (400, Some("price_in_past"), Some("body.effective_from")),
                "{path}: {p}"
            );
            assert_eq!(h.size(), size, "{path}: nothing refused is logged");
            assert_eq!(total(), "296.00", "{path}: the usage costs what it cost");
        }
        // Taking effect now: logged, and the usage measured before still costs the same.
        let (st, p) = h.call(
            "POST",
            "/v1/rate-cards",
            Some(&admin),
            Some(card(&Timestamp::now().to_string())),
        );
        assert_eq!(st, 201, "{p}");
        assert_eq!(total(), "296.00");
        // Invoiced up to a minute ago: parameters taking effect 90 s ago are within the skew, but
        // inside the invoiced period.
        let period = json!({"tenant": "acme", "from": from.to_string(), "to": to.to_string()});
        let issued = h.post("/v1/invoices", Some(&admin), &period).ok_json(201);
        assert_eq!(issued[0]["total"], "296.00");
        let size = h.size();
        let (st, p) = h.call(
            "POST",
            "/v1/region-params",
            Some(&admin),
            Some(params(&now.plus(-90).to_string())),
        );
        assert_eq!(
            (st, p["errors"][0]["reason"].as_str()),
            (400, Some("price_in_invoiced_period")),
            "{p}"
        );
        assert_eq!(h.size(), size);
    }
);

/// An issued invoice recomputed from its evidence bundle, as `gpuledger verify --invoice` does.
fn recomputed(
    ledger: &gpuledger::store::Ledger,
    inv: &Invoice,
) -> Result<Invoice, bundle::Failure> {
    let mut lines = Vec::new();
    ledger
        .reads()
        .run(|c| {
            gpuledger::store::invoices::write_invoice_bundle(c, inv, &mut |mut l| {
                l.pop();
                lines.push(l);
                Ok(())
            })
        })
        .unwrap();
    // The bundle shows the invoice's tenant and the provider's public side, nothing of any
    // other tenant (its registration, leases, plans, invoices or records).
    for l in &lines[1..lines.len() - 1] {
        let line: serde_json::Value = serde_json::from_slice(l).unwrap();
        let leaf = gpuledger::core::leaf::Leaf::from_bytes(
            &BASE64_STANDARD
                .decode(line["leaf"].as_str().unwrap())
                .unwrap(),
        )
        .unwrap();
        if let Some(t) = leaf.envelope.body.get("tenant") {
            assert_eq!(
                t,
                inv.tenant.as_str(),
                "{} in {}'s bundle",
                leaf.envelope.kind,
                inv.tenant
            );
        }
    }
    let vkey = gpuledger::core::checkpoint::LogSigner::new("test.gpuledger/log", log_key())
        .unwrap()
        .verifier_key();
    let (_, check) = bundle::verify_bundle(
        lines.into_iter().map(Ok),
        &vkey,
        |h, a| InvoiceCheck::start(inv.clone(), h, a),
        &mut |_| {},
    )?;
    Ok(check.finish()?.into_v2().expect("a version 2 invoice"))
}
