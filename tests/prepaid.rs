//! Issue #28, prepaid balances, on SQLite and PostgreSQL, with the ledger's clock set: a
//! tenant tops up, is granted credit (one grant expiring before any invoice may draw on it),
//! and its January and February invoices draw on the lots in the stated order (grants first,
//! earliest expiry first, then purchases). Every draw is recomputed here with integer cents of
//! the test's own, and by `gpuledger verify --invoice`'s check from the invoice's bundle; an
//! invoice that hides or inflates a draw, or a bundle whose top-up was altered, fails with a
//! named reason; a top-up sent twice, for an unknown tenant or already expired is refused and
//! writes nothing; the accounts and the balance count the draws, as of any log size; and
//! verify-log passes the whole log. Over HTTP: the API's answers and who may see them.

mod common;

use common::billing::{
    acme_on_h100, assert_altered_entry_fails, invoice_fixture, money, payloads, period, refused,
    size_of, t, use_h100,
};
use common::*;
use gpuledger::core::invoice::{Invoice, InvoiceDoc};
use gpuledger::core::record::{Body, Prepayment, PrepaymentSource};
use gpuledger::store::StoreError;

/// A lot of acme in CNY.
fn lot(reference: &str, source: PrepaymentSource, amount: &str, expires: Option<&str>) -> Body {
    Body::Prepayment(Prepayment {
        tenant: "acme".into(),
        reference: reference.into(),
        source,
        currency: "CNY".into(),
        amount: dec(amount),
        expires_at: expires.map(t),
    })
}

/// The draws of an invoice as (lot, cents).
fn draws(inv: &Invoice) -> Vec<(String, String)> {
    inv.prepaid
        .iter()
        .map(|d| (d.prepayment.clone(), d.amount.to_string()))
        .collect()
}

/// The test's own drawing rule, in cents: lots as (name, is_grant, expires, cents left) in log
/// order; grants first, earliest expiry first (none last), log order; only lots that have
/// not expired when the invoice is issued.
fn draw_cents(
    lots: &mut [(&str, bool, Option<i64>, i64)],
    total: i64,
    issued_at: i64,
) -> Vec<(String, String)> {
    let mut order: Vec<usize> = (0..lots.len()).collect();
    order.sort_by_key(|&i| {
        let (_, grant, exp, _) = lots[i];
        (!grant, exp.is_none(), exp, i)
    });
    let mut left = total.max(0);
    let mut out = Vec::new();
    for i in order {
        let (name, _, exp, have) = lots[i];
        if left == 0 || have == 0 || exp.is_some_and(|e| e <= issued_at) {
            continue;
        }
        let take = have.min(left);
        lots[i].3 -= take;
        left -= take;
        out.push((name.to_owned(), money(take)));
    }
    out
}

both_backends!(invoices_draw_on_prepaid_lots_in_order, |db: &TestDb| {
    let ledger = open_at(db, t("2027-01-01T00:00:00Z"));
    let node = acme_on_h100(&ledger);
    // acme's account wants a balance.low event when its yuan balance falls under 1000.00, and
    // an endpoint subscribes to it.
    let endpoint = {
        let mut c = gpuledger::store::connect(&db.url).unwrap();
        gpuledger::store::access::create_tenant(&mut c, "acme", "Acme").unwrap();
        let low = std::collections::BTreeMap::from([("CNY".to_owned(), dec("1000.00"))]);
        gpuledger::store::access::set_low_balance(&mut c, "acme", &low).unwrap();
        let endpoint = gpuledger::store::webhooks::NewEndpoint {
            url: "https://hooks.example/balance".into(),
            tenant: None,
            event_types: vec![gpuledger::store::webhooks::EventType::BalanceLow],
            secret: None,
            description: "low balances".into(),
        };
        gpuledger::store::webhooks::create_endpoint(&mut c, &endpoint, t("2027-01-01T00:00:00Z"))
            .unwrap()
            .id
    };

    use PrepaymentSource::{Grant, Purchase};
    // Refused, each with its reason, writing nothing.
    let size = size_of(&ledger);
    let mut ghost = Prepayment {
        tenant: "ghost".into(),
        reference: "X".into(),
        source: Purchase,
        currency: "CNY".into(),
        amount: dec("1.00"),
        expires_at: None,
    };
    assert_eq!(
        refused(ledger.append_ledger_entry(Body::Prepayment(ghost.clone()))),
        "unknown_tenant body.tenant"
    );
    ghost.tenant = "acme".into();
    ghost.expires_at = Some(t("2027-01-01T00:00:00Z"));
    assert_eq!(
        refused(ledger.append_ledger_entry(Body::Prepayment(ghost))),
        "invalid_field body.expires_at"
    );
    assert_eq!(size_of(&ledger), size);

    // The lots, in log order: a top-up of 1000.00 that never expires; a grant of 200.00
    // to mid-March; a welcome grant of 50.00 to 10 February; a grant of 500.00 that expires
    // on 20 January, before any monthly invoice is issued.
    let topup = ledger
        .append_ledger_entry(lot("TOPUP-1", Purchase, "1000.00", None))
        .unwrap();
    for l in [
        lot("PROMO-2027", Grant, "200.00", Some("2027-03-15T00:00:00Z")),
        lot("WELCOME", Grant, "50.00", Some("2027-02-10T00:00:00Z")),
        lot("FLASH", Grant, "500.00", Some("2027-01-20T00:00:00Z")),
    ] {
        ledger.append_ledger_entry(l).unwrap();
    }
    // The same top-up sent again is recorded once: a conflict naming its entry.
    let size = size_of(&ledger);
    let again = refused(ledger.append_ledger_entry(lot("TOPUP-1", Purchase, "1000.00", None)));
    assert!(
        again.starts_with("conflict") && again.contains(&format!("entry {topup}")),
        "{again}"
    );
    assert_eq!(size_of(&ledger), size);

    // The test's own ledger of the lots, in cents.
    // Each month's invoice is issued an hour after the month ends.
    let jan_issued = t("2027-02-01T01:00:00Z").unix();
    let feb_issued = t("2027-03-01T01:00:00Z").unix();
    let mut mine = [
        ("TOPUP-1", false, None, 100_000),
        (
            "PROMO-2027",
            true,
            Some(t("2027-03-15T00:00:00Z").unix()),
            20_000,
        ),
        (
            "WELCOME",
            true,
            Some(t("2027-02-10T00:00:00Z").unix()),
            5_000,
        ),
        (
            "FLASH",
            true,
            Some(t("2027-01-20T00:00:00Z").unix()),
            50_000,
        ),
    ];

    // January: 10 H100-hours at 18.50 = 185.00 (no tax configured).
    use_h100(&ledger, &node, 1, "2027-01-21T00:00:00Z", 10);
    ledger.set_clock(Some(t("2027-02-01T01:00:00Z")));
    let jan = ledger
        .issuance()
        .invoices(
            "acme",
            period("2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z"),
        )
        .unwrap();
    let jan = &jan[0];
    assert_eq!(jan.total.to_string(), money(18_500));
    let expected = draw_cents(&mut mine, 18_500, jan_issued);
    assert_eq!(draws(jan), expected);
    assert_eq!(
        expected,
        [
            ("WELCOME".to_owned(), "50.00".to_owned()),
            ("PROMO-2027".to_owned(), "135.00".to_owned())
        ],
        "the arithmetic itself: the welcome grant ends first, FLASH has expired"
    );
    assert_eq!(jan.amount_due.unwrap().to_string(), "0.00");
    let size_after_jan = size_of(&ledger);

    // February: 100 H100-hours = 1850.00: the rest of the promotion, then the top-up.
    for (i, day) in ["02", "03", "04", "05", "06"].iter().enumerate() {
        use_h100(
            &ledger,
            &node,
            2 + i as u64,
            &format!("2027-02-{day}T00:00:00Z"),
            20,
        );
    }
    ledger.set_clock(Some(t("2027-03-01T01:00:00Z")));
    let feb = ledger
        .issuance()
        .invoices(
            "acme",
            period("2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z"),
        )
        .unwrap();
    let feb = &feb[0];
    let expected = draw_cents(&mut mine, 185_000, feb_issued);
    assert_eq!(draws(feb), expected);
    assert_eq!(
        expected,
        [
            ("PROMO-2027".to_owned(), "65.00".to_owned()),
            ("TOPUP-1".to_owned(), "1000.00".to_owned())
        ]
    );
    assert_eq!(
        feb.amount_due.unwrap().to_string(),
        money(185_000 - 6_500 - 100_000)
    );
    // The draws pay the invoice; they do not discount it.
    assert_eq!(feb.total.to_string(), "1850.00");

    // Offline: each invoice recomputes from its bundle, which carries the lots.
    for inv in [jan, feb] {
        let doc = InvoiceDoc::from(inv.clone());
        assert_eq!(recompute_invoice(&ledger, &doc, |_| {}).unwrap(), doc);
    }
    // An invoice that inflates a draw, or hides one, is named.
    let mut inflated = feb.clone();
    inflated.prepaid[1].amount = dec("1100.00");
    inflated.amount_due = Some(dec("685.00"));
    let f = recompute_invoice(&ledger, &InvoiceDoc::from(inflated), |_| {}).unwrap_err();
    assert_eq!(
        (f.reason.code(), f.item.as_str()),
        ("claim_mismatch", "prepaid"),
        "{f:?}"
    );
    let mut hidden = feb.clone();
    hidden.prepaid.clear();
    hidden.amount_due = None;
    let f = recompute_invoice(&ledger, &InvoiceDoc::from(hidden), |_| {}).unwrap_err();
    assert_eq!(
        (f.reason.code(), f.item.as_str()),
        ("claim_mismatch", "prepaid"),
        "{f:?}"
    );
    let mut due = feb.clone();
    due.amount_due = Some(dec("0.00"));
    let f = recompute_invoice(&ledger, &InvoiceDoc::from(due), |_| {}).unwrap_err();
    assert_eq!(
        (f.reason.code(), f.item.as_str()),
        ("claim_mismatch", "amount_due"),
        "{f:?}"
    );
    // A bundle whose top-up was altered (a bigger lot) fails at the top-up's own entry.
    assert_altered_entry_fails(
        &ledger,
        feb,
        ("TOPUP-1", r#""amount":"1000.00""#, r#""amount":"9000.00""#),
        topup,
    );

    // Accounts count the draws as paid by the balance: February's open balance is what
    // is left to pay, and a payment above it is refused as an overpayment.
    let account = ledger
        .reads()
        .run(|c| gpuledger::store::invoices::account(c, &feb.number, t("2027-03-02T00:00:00Z")))
        .unwrap();
    assert_eq!(
        (account.prepaid.to_string(), account.balance_due.to_string()),
        ("1065.00".into(), "785.00".into())
    );
    let jan_account = ledger
        .reads()
        .run(|c| gpuledger::store::invoices::account(c, &jan.number, t("2027-03-02T00:00:00Z")))
        .unwrap();
    assert_eq!(
        jan_account.status,
        gpuledger::store::invoices::AccountStatus::Paid
    );
    let pay = |amount: &str| {
        Body::Payment(gpuledger::core::record::Settlement {
            tenant: "acme".into(),
            invoice: feb.number.clone(),
            currency: "CNY".into(),
            amount: dec(amount),
            note: String::new(),
            external_reference: None,
        })
    };
    let over = ledger.issuance().settle(pay("785.01"));
    assert!(
        matches!(over, Err(StoreError::Overpayment { .. })),
        "{over:?}"
    );
    ledger.issuance().settle(pay("785.00")).unwrap();
    let balance = ledger
        .reads()
        .run(|c| gpuledger::store::invoices::balances(c, "acme"))
        .unwrap();
    let cny = &balance.by_currency["CNY"];
    assert_eq!(
        (
            cny.invoiced.to_string(),
            cny.prepaid.to_string(),
            cny.paid.to_string(),
            cny.due.to_string()
        ),
        (
            "2035.00".into(),
            "1250.00".into(),
            "785.00".into(),
            "0.00".into()
        )
    );

    // The balance as of any log size: after January's invoice, and now.
    let positions = |size: u64, at: &str| {
        ledger
            .reads()
            .run(|c| gpuledger::store::prepaid::book(c, Some("acme"), size))
            .unwrap()
            .positions("acme", t(at))
    };
    let then = &positions(size_after_jan, "2027-02-01T01:00:00Z")[0];
    assert_eq!(
        (
            then.drawn.to_string(),
            then.expired.to_string(),
            then.available.to_string()
        ),
        ("185.00".into(), "500.00".into(), "1065.00".into())
    );
    // balance.low, once: January left 1065.00 (of 1250.00 unexpired), at or above the
    // threshold; February's draws took it to 0.00, under it.
    let low = payloads(&ledger, &endpoint);
    assert_eq!(low.len(), 1, "{low:?}");
    assert_eq!(low[0]["type"], "balance.low");
    let data = &low[0]["data"];
    assert_eq!(
        (
            &data["invoice"],
            &data["available"],
            &data["below"],
            &data["tenant"]
        ),
        (
            &serde_json::json!(feb.number),
            &serde_json::json!("0.00"),
            &serde_json::json!("1000.00"),
            &serde_json::json!("acme")
        ),
        "{data}"
    );
    let now = &positions(size_of(&ledger), "2027-03-02T00:00:00Z")[0];
    assert_eq!(
        (
            now.purchased.to_string(),
            now.granted.to_string(),
            now.drawn.to_string(),
            now.expired.to_string(),
            now.available.to_string()
        ),
        (
            "1000.00".into(),
            "750.00".into(),
            "1250.00".into(),
            "500.00".into(),
            "0.00".into()
        )
    );

    // February's invoice and its bundle are the committed fixture that verifiers/python
    // recomputes the draws of (tests/fixtures/prepaid; the same bytes on either database:
    // a set clock and fixed keys). GPULEDGER_WRITE_ARTEFACTS=<dir> rewrites it.
    invoice_fixture(&ledger, feb, "tests/fixtures/prepaid");

    assert_eq!(
        verified(&db.url).size,
        size_of(&ledger),
        "verify-log passes the log"
    );
});

both_backends!(prepayments_over_http, |db: &TestDb| {
    let log = init(db);
    let srv = log.serve_with(&["--invoice-close-seconds", "0"]);
    let h = srv.http();
    let admin = log.admin.clone();
    let a = Some(admin.as_str());
    h.parties(&admin, &["acme", "beta"]);
    let body = |reference: &str, amount: &str| {
        serde_json::json!({"tenant": "acme", "reference": reference, "source": "purchase",
                               "currency": "CNY", "amount": amount})
    };
    let size = h.size();
    // Bad input: each refused with its field, nothing written.
    for (b, slug, reason, field) in [
        (
            body("R-1", "10.001"),
            "invalid_field",
            "invalid_field",
            "body.amount",
        ),
        (
            body("R-1", "0"),
            "invalid_field",
            "quantity_out_of_range",
            "body.amount",
        ),
        (
            body(" R-1", "10"),
            "invalid_field",
            "invalid_field",
            "body.reference",
        ),
        (
            serde_json::json!({"tenant": "acme", "reference": "R-1", "source": "gift",
                                   "currency": "CNY", "amount": "10"}),
            "invalid_field",
            "invalid_field",
            "body.source",
        ),
        (
            serde_json::json!({"tenant": "acme", "reference": "R-1", "source": "grant",
                                   "currency": "CNY", "amount": "10",
                                   "expires_at": "2000-01-01T00:00:00Z"}),
            "refused",
            "invalid_field",
            "body.expires_at",
        ),
    ] {
        assert_eq!(
            h.post("/v1/prepayments", a, &b).first_error(400, slug),
            format!("{reason} {field}"),
            "{b}"
        );
    }
    assert_eq!(h.size(), size);
    h.post("/v1/prepayments", a, &body("R-1", "300.00"))
        .ok_json(201);
    let p = h
        .post("/v1/prepayments", a, &body("R-1", "300.00"))
        .problem(409, "conflict")
        .unwrap();
    assert!(
        p["detail"].as_str().unwrap_or_default().contains("R-1"),
        "{p}"
    );

    let acme = h.tenant_secret(&admin, "acme");
    let beta = h.tenant_secret(&admin, "beta");
    let view = h.get("/v1/prepayments", Some(acme.as_str())).ok_json(200);
    assert_eq!(view["positions"][0]["available"], "300.00", "{view}");
    assert_eq!(view["prepayments"][0]["reference"], "R-1", "{view}");
    // Another tenant sees none of it, and cannot ask for it.
    let theirs = h.get("/v1/prepayments", Some(beta.as_str())).ok_json(200);
    assert_eq!(theirs["prepayments"], serde_json::json!([]), "{theirs}");
    h.get("/v1/prepayments?tenant=acme", Some(beta.as_str()))
        .problem(404, "not_found")
        .unwrap();
    // As of a size before the top-up: nothing yet; beyond the log: 400.
    let before = h
        .get(&format!("/v1/prepayments?tenant=acme&size={size}"), a)
        .ok_json(200);
    assert_eq!(before["prepayments"], serde_json::json!([]), "{before}");
    h.get(&format!("/v1/prepayments?size={}", h.size() + 1), a)
        .problem(400, "invalid_parameter")
        .unwrap();
    // Alerts: an admin sets acme's threshold, acme reads its own, beta cannot; bad ones are
    // named.
    let alerts = serde_json::json!({"low_balance": {"CNY": "250"}});
    let set = h.put("/v1/tenants/acme/alerts", a, &alerts).ok_json(200);
    assert_eq!(
        set,
        serde_json::json!({"low_balance": {"CNY": "250.00"}, "spend": {}, "commitment_percent": []})
    );
    let own = h
        .get("/v1/tenants/acme/alerts", Some(acme.as_str()))
        .ok_json(200);
    assert_eq!(own, set);
    h.get("/v1/tenants/acme/alerts", Some(beta.as_str()))
        .problem(404, "not_found")
        .unwrap();
    h.put("/v1/tenants/acme/alerts", Some(acme.as_str()), &alerts)
        .problem(403, "forbidden")
        .unwrap();
    for bad in [
        serde_json::json!({"low_balance": {"cny": "1"}}),
        serde_json::json!({"low_balance": {"CNY": "1.001"}}),
        serde_json::json!({"low_balance": {"CNY": "-1"}}),
        serde_json::json!({"low_balance": {"CNY": "1e3"}}),
    ] {
        let p = h
            .put("/v1/tenants/acme/alerts", a, &bad)
            .problem(400, "invalid_parameter")
            .unwrap();
        assert!(p.to_string().contains("low_balance"), "{bad}: {p}");
    }
    h.put("/v1/tenants/ghost/alerts", a, &alerts)
        .problem(404, "not_found")
        .unwrap();
    let size = h.size();
    drop(srv);
    log.assert_verifies(size);
});
