//! Issue #28, spend and commitment alerts, on SQLite and PostgreSQL, with the ledger's clock
//! set: acme (an on-demand H100 at 18.50 an hour) has a contract committing 1000.00 a month,
//! spend thresholds of 500.00 and 2000.00 a month and commitment alerts at 50 % and 100 %.
//! Each run of `Issuance::usage_alerts` enqueues the crossings its usage so far has made, each
//! once however often it runs, again in the next month; a tenant without thresholds gets the
//! default 100 % only; the thresholds are set and read over HTTP, bad ones refused with the
//! member named, another tenant's 404.

mod common;

use common::billing::{acme_on_h100, acme_usage, money, payloads, t, use_h100};
use common::*;
use gpuledger::core::record::{BillingAnchor, BillingPeriod, Body, ContractRegistered};
use gpuledger::store::access::UsageAlerts;
use gpuledger::store::webhooks::{EventType, NewEndpoint};
use gpuledger::store::Ledger;

/// acme's contract for the first quarter of 2027: 1000.00 a calendar month committed.
fn contract() -> ContractRegistered {
    ContractRegistered {
        tenant: "acme".into(),
        contract: "C-acme-min".into(),
        currency: "CNY".into(),
        region: "west".into(),
        term_from: t("2027-01-01T00:00:00Z"),
        term_to: t("2027-04-01T00:00:00Z"),
        billing_period: BillingPeriod::Month,
        billing_anchor: BillingAnchor::Calendar,
        fees: None,
        commitment: Some(dec("1000")),
        sla: None,
    }
}

/// The events delivered to `endpoint` so far, as (type, the member that names the crossing,
/// spend or drawn), sorted.
fn delivered(ledger: &Ledger, endpoint: &str) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = payloads(ledger, endpoint)
        .into_iter()
        .map(|v| {
            let data = &v["data"];
            let (what, amount) = match v["type"].as_str().unwrap() {
                "spend.threshold" => (
                    format!("{} {}", data["month"]["from"], data["threshold"]),
                    data["spend"].clone(),
                ),
                _ => (
                    format!("{} {}", data["period"]["from"], data["percent"]),
                    data["drawn"].clone(),
                ),
            };
            (
                v["type"].as_str().unwrap().to_owned(),
                what.replace('"', ""),
                amount.as_str().unwrap().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

both_backends!(
    spend_and_commitment_alerts_fire_once_per_crossing,
    |db: &TestDb| {
        let ledger = open_at(db, t("2027-01-01T00:00:00Z"));
        let node = acme_on_h100(&ledger);
        ledger
            .append_ledger_entry(Body::ContractRegistered(contract()))
            .unwrap();
        let endpoint = {
            let mut c = gpuledger::store::connect(&db.url).unwrap();
            gpuledger::store::access::create_tenant(&mut c, "acme", "Acme").unwrap();
            let alerts = UsageAlerts {
                spend: [("CNY".to_owned(), vec![dec("500.00"), dec("2000.00")])].into(),
                commitment_percent: vec![dec("50"), dec("100")],
            };
            gpuledger::store::access::set_usage_alerts(&mut c, "acme", &alerts).unwrap();
            assert_eq!(
                gpuledger::store::access::usage_alerts(&mut c, "acme").unwrap(),
                alerts
            );
            let endpoint = NewEndpoint {
                url: "https://hooks.example/usage".into(),
                tenant: None,
                event_types: vec![EventType::SpendThreshold, EventType::CommitmentReached],
                secret: None,
                description: "usage".into(),
            };
            gpuledger::store::webhooks::create_endpoint(
                &mut c,
                &endpoint,
                t("2027-01-01T00:00:00Z"),
            )
            .unwrap()
            .id
        };
        let run = |at: &str| {
            ledger.set_clock(Some(t(at)));
            ledger.issuance().usage_alerts().unwrap()
        };

        // 20 H100-hours: 370.00, under 500.00 and under half the commitment.
        use_h100(&ledger, &node, 1, "2027-01-02T00:00:00Z", 20);
        assert_eq!(run("2027-01-03T00:00:00Z"), 0);
        assert!(delivered(&ledger, &endpoint).is_empty());

        // 10 more: 555.00 crosses 500.00 and half the commitment (500.00).
        use_h100(&ledger, &node, 2, "2027-01-04T00:00:00Z", 10);
        let spent = money(30 * 1850);
        assert_eq!(spent, "555.00");
        assert_eq!(run("2027-01-05T00:00:00Z"), 2);
        let first = delivered(&ledger, &endpoint);
        assert_eq!(
            first,
            [
                (
                    "commitment.reached".to_owned(),
                    "2027-01-01T00:00:00Z 50".to_owned(),
                    spent.clone()
                ),
                (
                    "spend.threshold".to_owned(),
                    "2027-01-01T00:00:00Z 500.00".to_owned(),
                    spent.clone()
                ),
            ]
        );
        // Found again by every later run, enqueued no more.
        assert_eq!(run("2027-01-06T00:00:00Z"), 2);
        assert_eq!(delivered(&ledger, &endpoint), first);

        // 30 more (two GPUs for 15 hours): 1110.00 reaches the whole commitment, not 2000.00.
        acme_usage(
            &ledger,
            &node,
            3,
            t("2027-01-10T00:00:00Z"),
            t("2027-01-10T15:00:00Z"),
            2,
        );
        assert_eq!(run("2027-01-12T00:00:00Z"), 3);
        let jan = delivered(&ledger, &endpoint);
        assert_eq!(jan.len(), 3);
        assert!(
            jan.contains(&(
                "commitment.reached".to_owned(),
                "2027-01-01T00:00:00Z 100".to_owned(),
                money(60 * 1850)
            )),
            "{jan:?}"
        );

        // February starts again: 30 hours cross 500.00 and 50 % of February's commitment.
        acme_usage(
            &ledger,
            &node,
            4,
            t("2027-02-02T00:00:00Z"),
            t("2027-02-02T15:00:00Z"),
            2,
        );
        assert_eq!(run("2027-02-03T00:00:00Z"), 2);
        let all = delivered(&ledger, &endpoint);
        assert_eq!(all.len(), 5, "{all:?}");
        assert!(all.contains(&(
            "spend.threshold".to_owned(),
            "2027-02-01T00:00:00Z 500.00".to_owned(),
            money(30 * 1850)
        )));

        // The payload names the contract, its billing period, what was committed and drawn.
        let payloads = payloads(&ledger, &endpoint);
        let reached = payloads
            .iter()
            .find(|p| p["type"] == "commitment.reached" && p["data"]["percent"] == "100")
            .unwrap();
        assert_eq!(
            (
                &reached["data"]["tenant"],
                &reached["data"]["contract"],
                &reached["data"]["period"]["to"],
                &reached["data"]["committed"],
                &reached["data"]["currency"]
            ),
            (
                &serde_json::json!("acme"),
                &serde_json::json!("C-acme-min"),
                &serde_json::json!("2027-02-01T00:00:00Z"),
                &serde_json::json!("1000.00"),
                &serde_json::json!("CNY")
            )
        );
        verified(&db.url);
    }
);

both_backends!(usage_alerts_over_http, |db: &TestDb| {
    let log = init(db);
    let srv = log.serve();
    let h = srv.http();
    let admin = log.admin.clone();
    let a = Some(admin.as_str());
    h.parties(&admin, &["acme", "beta"]);
    let body = serde_json::json!({
        "low_balance": {"CNY": "100.00"},
        "spend": {"CNY": ["500", "2000.5"]},
        "commitment_percent": ["50", "100.0"]
    });
    let set = h.put("/v1/tenants/acme/alerts", a, &body).ok_json(200);
    assert_eq!(
        set,
        serde_json::json!({
            "low_balance": {"CNY": "100.00"},
            "spend": {"CNY": ["500.00", "2000.50"]},
            "commitment_percent": ["50", "100"]
        })
    );
    let acme = h.tenant_secret(&admin, "acme");
    let beta = h.tenant_secret(&admin, "beta");
    assert_eq!(
        h.get("/v1/tenants/acme/alerts", Some(acme.as_str()))
            .ok_json(200),
        set
    );
    h.get("/v1/tenants/acme/alerts", Some(beta.as_str()))
        .assert_problem(404, "not_found", "another tenant's alerts");
    for (bad, member) in [
        (
            serde_json::json!({"low_balance": {}, "spend": {"CNY": ["2000", "500"]}}),
            "spend",
        ),
        (
            serde_json::json!({"low_balance": {}, "spend": {"CNY": ["0"]}}),
            "spend",
        ),
        (
            serde_json::json!({"low_balance": {}, "spend": {"CNY": []}}),
            "spend",
        ),
        (
            serde_json::json!({"low_balance": {}, "spend": {"CNY": ["0.001"]}}),
            "spend",
        ),
        (
            serde_json::json!({"low_balance": {}, "spend": {"cny": ["1"]}}),
            "spend",
        ),
        (
            serde_json::json!({"low_balance": {}, "commitment_percent": ["1001"]}),
            "commitment_percent",
        ),
        (
            serde_json::json!({"low_balance": {}, "commitment_percent": ["100", "50"]}),
            "commitment_percent",
        ),
        (
            serde_json::json!({"low_balance": {}, "commitment_percent": ["-5"]}),
            "commitment_percent",
        ),
    ] {
        let p = h
            .put("/v1/tenants/acme/alerts", a, &bad)
            .problem(400, "invalid_parameter")
            .unwrap();
        assert!(p.to_string().contains(member), "{bad}: {p}");
    }
    // Nothing changed by the refusals; `{}`s remove them.
    assert_eq!(h.get("/v1/tenants/acme/alerts", a).ok_json(200), set);
    let cleared = h
        .put(
            "/v1/tenants/acme/alerts",
            a,
            &serde_json::json!({"low_balance": {}}),
        )
        .ok_json(200);
    assert_eq!(
        cleared,
        serde_json::json!({"low_balance": {}, "spend": {}, "commitment_percent": []})
    );
    h.put("/v1/tenants/acme/alerts", Some(acme.as_str()), &body)
        .assert_problem(403, "forbidden", "a tenant setting its alerts");
});
