//! Issue #28, contract amendments (docs/PROTOCOL.md §5.21, §6.7), on SQLite and PostgreSQL:
//! a yearly contract is ended early in March and its successor starts that instant; the March
//! invoice bills both, each prorated by the second, recomputed here to the cent by integer
//! arithmetic of the test's own and by `gpuledger verify --invoice`'s check from its bundle;
//! the January invoice, issued before the amendment, still recomputes to its own lines; an
//! altered amendment fails at its signature. Every rule that keeps an amendment to the
//! uninvoiced future refuses with its reason and writes nothing, over HTTP too; the scheduled
//! run bills nothing of the ended contract after its end; verify-log passes the log.

mod common;

use common::billing::{
    acme_invoice, acme_on_h100, assert_altered_entry_fails, cents, invoice_fixture, money, period,
    refused, size_of, t, use_h100,
};
use common::http::init;
use common::*;
use gpuledger::core::invoice::{Invoice, InvoiceDoc};
use gpuledger::core::record::{
    BillingAnchor, BillingPeriod, Body, ContractAmended, ContractFee, ContractRegistered,
    FeeCategory, FeeTiming, TenantRegistered,
};
use gpuledger::core::time::Timestamp;

/// A contract of acme over `[from, to)`, calendar months, one fee of `rent` a month in
/// advance and, if any, a minimum spend a month.
fn monthly(
    id: &str,
    (from, to): (&str, &str),
    rent: &str,
    commitment: Option<&str>,
) -> ContractRegistered {
    ContractRegistered {
        tenant: "acme".into(),
        contract: id.into(),
        currency: "CNY".into(),
        region: "west".into(),
        term_from: t(from),
        term_to: t(to),
        billing_period: BillingPeriod::Month,
        billing_anchor: BillingAnchor::Calendar,
        fees: Some(vec![ContractFee {
            name: format!("Bare-metal node, {id}"),
            amount: dec(rent),
            timing: FeeTiming::Advance,
            category: FeeCategory::Compute,
            lease: None,
            included: None,
        }]),
        commitment: commitment.map(dec),
        sla: None,
    }
}

/// An amendment of `contract` of `tenant`, ending its term at `to`.
fn amend(tenant: &str, contract: &str, to: &str) -> Body {
    Body::ContractAmended(ContractAmended {
        tenant: tenant.into(),
        contract: contract.into(),
        term_to: t(to),
        reason: "Ended early by mutual agreement".into(),
    })
}

fn lines_of(inv: &Invoice) -> Vec<(String, String)> {
    inv.lines
        .iter()
        .map(|l| (l.description.clone(), l.net.to_string()))
        .collect()
}

both_backends!(
    a_contract_ended_early_bills_its_last_month_prorated_and_its_successor_from_then,
    |db: &TestDb| {
        let ledger = open_at(db, t("2027-01-01T00:00:00Z"));
        let node = acme_on_h100(&ledger);
        ledger
            .append_ledger_entry(Body::TenantRegistered(TenantRegistered {
                tenant: "beta".into(),
            }))
            .unwrap();
        let first = monthly(
            "C-1",
            ("2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"),
            "3100",
            Some("1000"),
        );
        ledger
            .append_ledger_entry(Body::ContractRegistered(first.clone()))
            .unwrap();
        // January: no usage, so its true-up is the whole commitment.
        let jan = acme_invoice(
            &ledger,
            "2027-02-01T01:00:00Z",
            ("2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z"),
        );
        assert_eq!(jan.total.to_string(), money(310_000 + 100_000));

        // The successor cannot start while C-1 runs.
        ledger.set_clock(Some(t("2027-02-10T00:00:00Z")));
        let successor = monthly(
            "C-2",
            ("2027-03-20T00:00:00Z", "2027-12-31T00:00:00Z"),
            "2000",
            None,
        );
        assert_eq!(
            refused(ledger.append_ledger_entry(Body::ContractRegistered(successor.clone()))),
            "contract_overlap body.term_from"
        );

        // Amendments the rules refuse, each with its reason, writing nothing.
        let size = size_of(&ledger);
        for (body, why) in [
            (
                amend("acme", "C-none", "2027-03-20T00:00:00Z"),
                "unknown_contract body.contract",
            ),
            (
                amend("beta", "C-1", "2027-03-20T00:00:00Z"),
                "unknown_contract body.contract",
            ),
            (
                amend("ghost", "C-1", "2027-03-20T00:00:00Z"),
                "unknown_tenant body.tenant",
            ),
            (
                amend("acme", "C-1", "2028-01-01T00:00:00Z"),
                "invalid_field body.term_to",
            ),
            (
                amend("acme", "C-1", "2026-12-31T00:00:00Z"),
                "invalid_field body.term_to",
            ),
            (
                amend("acme", "C-1", "2037-02-01T00:00:00Z"),
                "quantity_out_of_range body.term_to",
            ),
            // Ending it before today amends the past.
            (
                amend("acme", "C-1", "2027-02-09T23:54:59Z"),
                "price_in_past body.term_to",
            ),
        ] {
            assert_eq!(refused(ledger.append_ledger_entry(body)), why);
        }
        // Ending it inside invoiced January: with the clock back there (so the past rule
        // stays out of the way), the invoiced-period rule refuses it.
        ledger.set_clock(Some(t("2027-01-20T00:00:00Z")));
        assert_eq!(
            refused(ledger.append_ledger_entry(amend("acme", "C-1", "2027-01-25T00:00:00Z"))),
            "price_in_invoiced_period body.term_to"
        );
        ledger.set_clock(Some(t("2027-02-10T00:00:00Z")));
        assert_eq!(size_of(&ledger), size);

        // Ended on 20 March; the successor from that instant; C-1 can no longer be extended
        // into it.
        let amendment = ledger
            .append_ledger_entry(amend("acme", "C-1", "2027-03-20T00:00:00Z"))
            .expect("the amendment");
        ledger
            .append_ledger_entry(Body::ContractRegistered(successor))
            .expect("the successor");
        assert_eq!(
            refused(ledger.append_ledger_entry(amend("acme", "C-1", "2027-03-21T00:00:00Z"))),
            "contract_overlap body.term_to"
        );

        // February is C-1's whole; March: 10 H100-hours at 18.50 on the 25th.
        let feb = acme_invoice(
            &ledger,
            "2027-03-01T01:00:00Z",
            ("2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z"),
        );
        assert_eq!(feb.total.to_string(), money(310_000 + 100_000));
        use_h100(&ledger, &node, 1, "2027-03-25T00:00:00Z", 10);
        let mar = acme_invoice(
            &ledger,
            "2027-04-01T01:00:00Z",
            ("2027-03-01T00:00:00Z", "2027-04-01T00:00:00Z"),
        );
        // The test's own arithmetic, in cents: March has 31 days; C-1 holds 19 of them, C-2
        // the other 12. C-1's commitment is drawn by the month's usage (185.00) and trued up.
        let usage = cents(10 * 1850 * 100, 100);
        let rent_1 = cents(310_000 * 19, 31);
        let committed_1 = cents(100_000 * 19, 31);
        let rent_2 = cents(200_000 * 12, 31);
        assert_eq!(
            (rent_1, committed_1, rent_2),
            (190_000, 61_290, 77_419),
            "the arithmetic itself"
        );
        let true_up = committed_1 - usage;
        assert_eq!(
            lines_of(&mar),
            [
                ("GPU compute, H100, west, on-demand".into(), money(usage)),
                ("Bare-metal node, C-1".into(), money(rent_1)),
                (
                    "Minimum commitment true-up, contract C-1".into(),
                    money(true_up)
                ),
                ("Bare-metal node, C-2".into(), money(rent_2)),
            ]
        );
        assert_eq!(
            mar.total.to_string(),
            money(usage + rent_1 + true_up + rent_2)
        );
        assert_eq!(
            mar.lines[1].service_period,
            Some(period("2027-03-01T00:00:00Z", "2027-03-20T00:00:00Z"))
        );

        // Offline: January (before the amendment) and March (after) each recompute from their
        // bundles to their own lines.
        for inv in [&jan, &feb, &mar] {
            let doc = InvoiceDoc::from(inv.clone());
            assert_eq!(recompute_invoice(&ledger, &doc, |_| {}).unwrap(), doc);
        }
        // The March invoice and its bundle are the fixture verifiers/python rechecks the
        // amended term with (GPULEDGER_WRITE_ARTEFACTS=<dir> rewrites it).
        invoice_fixture(&ledger, &mar, "tests/fixtures/amendment");
        // A bundle whose amendment was moved (C-1 billed to the 25th) fails at its signature.
        assert_altered_entry_fails(
            &ledger,
            &mar,
            (
                "contract_amended",
                "2027-03-20T00:00:00Z",
                "2027-03-25T00:00:00Z",
            ),
            amendment,
        );

        // The scheduled run bills April from C-2 alone: C-1 ended.
        ledger.set_clock(Some(t("2027-05-01T01:00:00Z")));
        let run = ledger.issuance().due_contract_invoices().unwrap();
        assert!(run.failed.is_empty(), "{:?}", run.failed);
        let issued: Vec<(String, Vec<(String, String)>)> = run
            .issued
            .iter()
            .map(|i| (i.period.from.to_string(), lines_of(i)))
            .collect();
        assert_eq!(
            issued,
            [(
                "2027-04-01T00:00:00Z".into(),
                vec![("Bare-metal node, C-2".into(), money(200_000))]
            )]
        );
        let size = size_of(&ledger);
        drop(ledger);
        assert_eq!(verified(&db.url).size, size, "verify-log passes the log");
    }
);

both_backends!(amendments_over_http, |db: &TestDb| {
    let log = init(db);
    let srv = log.serve();
    let h = srv.http();
    let admin = log.admin.clone();
    let a = Some(admin.as_str());
    h.parties(&admin, &["acme", "beta"]);
    let now = Timestamp::now();
    let from = now.plus(3600);
    let body = serde_json::json!({
        "tenant": "acme", "contract": "C-http", "currency": "CNY", "region": "west",
        "term_from": from.to_string(), "term_to": from.plus(90 * 86_400).to_string(),
        "billing_period": "month", "billing_anchor": "anniversary",
        "fees": [{"name": "Rent", "amount": "3000", "timing": "advance", "category": "compute"}]
    });
    h.post("/v1/contracts", a, &body).ok_json(201);
    let amendment = |tenant: &str, contract: &str, to: Timestamp| {
        serde_json::json!({"tenant": tenant, "contract": contract, "term_to": to.to_string(),
                           "reason": "Ended early by mutual agreement"})
    };
    let size = h.size();
    let mut extra = amendment("acme", "C-http", from.plus(86_400));
    extra["term_from"] = serde_json::json!(from.to_string());
    for (b, slug, why) in [
        (
            amendment("acme", "C-nope", from.plus(86_400)),
            "refused",
            "unknown_contract body.contract",
        ),
        (
            amendment("beta", "C-http", from.plus(86_400)),
            "refused",
            "unknown_contract body.contract",
        ),
        (
            amendment("acme", "C-http", from),
            "refused",
            "invalid_field body.term_to",
        ),
        (
            amendment("acme", "C-http", now.plus(-3600)),
            "refused",
            "invalid_field body.term_to",
        ),
        (extra, "invalid_field", "malformed body"),
    ] {
        assert_eq!(
            h.post("/v1/contract-amendments", a, &b)
                .first_error(400, slug),
            why,
            "{b}"
        );
    }
    assert_eq!(h.size(), size, "a refused amendment writes nothing");
    let acme = h.tenant_secret(&admin, "acme");
    let beta = h.tenant_secret(&admin, "beta");
    // Only an admin amends.
    h.post(
        "/v1/contract-amendments",
        Some(acme.as_str()),
        &amendment("acme", "C-http", from.plus(86_400)),
    )
    .assert_problem(403, "forbidden", "a tenant amending its contract");
    let end = from.plus(20 * 86_400);
    h.post(
        "/v1/contract-amendments",
        a,
        &amendment("acme", "C-http", end),
    )
    .ok_json(201);
    // The tenant reads its contract as amended, with the amendment; another tenant sees none.
    let listed = h.get("/v1/contracts", Some(acme.as_str())).ok_json(200);
    let c = &listed["contracts"][0];
    assert_eq!(c["term_to"], serde_json::json!(end.to_string()), "{listed}");
    assert_eq!(
        (
            c["amendments"][0]["term_to"].clone(),
            c["amendments"][0]["reason"].clone(),
            c["billing_periods"].as_array().map(Vec::len)
        ),
        (
            serde_json::json!(end.to_string()),
            serde_json::json!("Ended early by mutual agreement"),
            Some(1)
        ),
        "{listed}"
    );
    let theirs = h.get("/v1/contracts", Some(beta.as_str())).ok_json(200);
    assert_eq!(theirs["contracts"], serde_json::json!([]), "{theirs}");
    let size = h.size();
    drop(srv);
    log.assert_verifies(size);
});
