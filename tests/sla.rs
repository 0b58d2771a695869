//! Issue #28, SLA credits, on SQLite and PostgreSQL, with the ledger's clock set: acme rents
//! its lease of two H100s on node-1 by the month under a contract with an SLA of 99.9 % (10 %
//! of the month's fee below it, 25 % below 99 %). The node's signed records show one GPU lost
//! for 3 hours in January and the node down for 10 hours in February; March is whole. Each
//! invoice's availability and credit are recomputed here by integer arithmetic of the test's
//! own, and from the invoice's bundle by `gpuledger verify --invoice`'s check; an invoice that
//! hides its credit or claims a better availability, and a bundle whose SLA was altered, fail
//! with a named reason; contracts that name another tenant's lease, an unknown lease, or an SLA
//! with no lease are refused and write nothing; verify-log passes the whole log.

mod common;

use common::billing::{
    acme_on_h100, acme_present, assert_altered_entry_fails, assert_split_refused, edit_bundle_line,
    invoice_fixture, money, period, refused, refused_contract, size_of, sla_99_9, t,
};
use common::*;
use gpuledger::core::invoice::{Invoice, InvoiceDoc, LineKind};
use gpuledger::core::record::{
    BillingAnchor, BillingPeriod, Body, ContractFee, ContractRegistered, FeeCategory, FeeTiming,
    TenantRegistered,
};
use gpuledger::core::time::Timestamp;

/// acme's contract for the first quarter of 2027, calendar months: 3000 a month in advance for
/// its lease of two H100s, with the SLA.
fn contract() -> ContractRegistered {
    ContractRegistered {
        tenant: "acme".into(),
        contract: "C-acme-sla".into(),
        currency: "CNY".into(),
        region: "west".into(),
        term_from: t("2027-01-01T00:00:00Z"),
        term_to: t("2027-04-01T00:00:00Z"),
        billing_period: BillingPeriod::Month,
        billing_anchor: BillingAnchor::Calendar,
        fees: Some(vec![ContractFee {
            name: "2 × H100 on node-1, monthly".into(),
            amount: dec("3000"),
            timing: FeeTiming::Advance,
            category: FeeCategory::Compute,
            lease: Some(gpuledger::sample::lease("acme")),
            included: None,
        }]),
        commitment: None,
        sla: Some(sla_99_9()),
    }
}

/// 100 × present ÷ leased truncated to 4 decimals, by integer arithmetic.
fn percent4(present: i128, leased: i128) -> String {
    let q = present * 1_000_000 / leased;
    let s = format!("{}.{:04}", q / 10_000, q % 10_000);
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

fn kinds(inv: &Invoice) -> Vec<(LineKind, String)> {
    inv.lines
        .iter()
        .map(|l| (l.kind, l.net.to_string()))
        .collect()
}

both_backends!(sla_credits_come_from_the_signed_records, |db: &TestDb| {
    let ledger = open_at(db, t("2027-01-01T00:00:00Z"));
    let node = acme_on_h100(&ledger);
    ledger
        .append_ledger_entry(Body::TenantRegistered(TenantRegistered {
            tenant: "beta".into(),
        }))
        .unwrap();
    lease_with(
        &ledger,
        "lease-beta",
        "beta",
        gpuledger::core::rating::LeaseClass::OnDemand,
        &[("node-1", "H100", 1)],
    );

    // Refused, each with its reason, writing nothing.
    let size = size_of(&ledger);
    let with_lease = |lease: &str| {
        let mut c = contract();
        c.fees.as_mut().unwrap()[0].lease = Some(lease.into());
        Body::ContractRegistered(c)
    };
    assert_eq!(
        refused(ledger.append_ledger_entry(with_lease("lease-beta"))),
        "lease_tenant_mismatch body.fees[0].lease"
    );
    assert_eq!(
        refused(ledger.append_ledger_entry(with_lease("lease-ghost"))),
        "unknown_lease body.fees[0].lease"
    );
    let refused_body = |edit: &dyn Fn(&mut serde_json::Value)| refused_contract(contract(), edit);
    assert_eq!(
        refused_body(&|v| {
            v["fees"][0].as_object_mut().unwrap().remove("lease");
        }),
        "invalid_field body.sla"
    );
    assert_eq!(
        refused_body(&|v| v["fees"][0]["timing"] = "once".into()),
        "invalid_field body.fees[0].lease"
    );
    assert_eq!(
        refused_body(&|v| v["sla"]["credits"][1]["below"] = "99.9".into()),
        "invalid_field body.sla.credits[1].below"
    );
    assert_eq!(
        refused_body(&|v| v["sla"]["credits"][1]["percent"] = "5".into()),
        "invalid_field body.sla.credits[1].percent"
    );
    assert_eq!(
        refused_body(&|v| v["sla"]["target"] = "100".into()),
        "quantity_out_of_range body.sla.target"
    );
    assert_eq!(
        refused_body(&|v| v["sla"]["credits"][0]["below"] = "99.95".into()),
        "invalid_field body.sla.credits[0].below"
    );
    assert_eq!(
        refused_body(&|v| v["sla"]["credits"][0]["percent"] = "100.5".into()),
        "quantity_out_of_range body.sla.credits[0].percent"
    );
    assert_eq!(size_of(&ledger), size);
    let contract_entry = ledger
        .append_ledger_entry(Body::ContractRegistered(contract()))
        .expect("the contract");

    // January: both GPUs present but one lost from 10 Jan 00:00 to 03:00. February: the node
    // down from 14 Feb 10:00 to 20:00 (no record). March: whole.
    let mut seq = 0;
    acme_present(
        &ledger,
        &node,
        &mut seq,
        ("2027-01-01T00:00:00Z", "2027-01-10T00:00:00Z"),
        2,
    );
    acme_present(
        &ledger,
        &node,
        &mut seq,
        ("2027-01-10T00:00:00Z", "2027-01-10T03:00:00Z"),
        1,
    );
    acme_present(
        &ledger,
        &node,
        &mut seq,
        ("2027-01-10T03:00:00Z", "2027-02-14T10:00:00Z"),
        2,
    );
    acme_present(
        &ledger,
        &node,
        &mut seq,
        ("2027-02-14T20:00:00Z", "2027-04-01T00:00:00Z"),
        2,
    );
    ledger.set_clock(Some(t("2027-04-01T01:00:00Z")));

    // An invoice that would split a month of the SLA is refused, writing nothing.
    assert_split_refused(
        &ledger,
        "2027-01-01T00:00:00Z",
        "2027-01-16T00:00:00Z",
        "C-acme-sla",
    );

    // The test's own arithmetic, in GPU-seconds and cents.
    let (jan_s, feb_s) = (2_678_400_i128, 2_419_200_i128);
    let jan_leased = 2 * jan_s;
    let jan_present = jan_leased - 3 * 3600;
    let feb_leased = 2 * feb_s;
    let feb_present = feb_leased - 2 * 10 * 3600;
    assert_eq!(percent4(jan_present, jan_leased), "99.7983");
    assert_eq!(percent4(feb_present, feb_leased), "98.5119");
    // Usage at 18.50 an H100-hour: January 2 × 744 h − 3 h; February 2 × 672 h − 20 h.
    let usage_jan = (2 * 744 - 3) * 1850;
    let usage_feb = (2 * 672 - 20) * 1850;
    let (fee, credit_jan, credit_feb) = (300_000, -30_000, -75_000);

    let invoice = |from: &str, to: &str| {
        let mut v = ledger
            .issuance()
            .invoices("acme", period(from, to))
            .unwrap();
        assert_eq!(v.len(), 1);
        v.remove(0)
    };
    let jan = invoice("2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z");
    assert_eq!(
        kinds(&jan),
        [
            (LineKind::Gpu, money(usage_jan)),
            (LineKind::Fee, money(fee)),
            (LineKind::SlaCredit, money(credit_jan)),
        ]
    );
    assert_eq!(jan.total.to_string(), money(usage_jan + fee + credit_jan));
    let credit = &jan.lines[2];
    assert_eq!(
        (
            credit.quantity.to_string(),
            credit.unit_price.to_string(),
            credit.contract.as_deref(),
            credit.service_period,
            credit.description.as_str()
        ),
        (
            "0.1".into(),
            "3000.00".into(),
            Some("C-acme-sla"),
            Some(period("2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z")),
            "SLA credit 10 %: 2 × H100 on node-1, monthly, lease lease-acme, availability \
             99.7983 % (target 99.9 %)"
        )
    );
    assert_eq!(
        serde_json::to_value(&jan.availability).unwrap(),
        serde_json::json!([{
            "contract": "C-acme-sla", "lease": "lease-acme",
            "period": {"from": "2027-01-01T00:00:00Z", "to": "2027-02-01T00:00:00Z"},
            "leased_gpu_seconds": jan_leased.to_string(),
            "present_gpu_seconds": jan_present.to_string(),
            "availability": "99.7983", "target": "99.9", "credit_percent": "10"
        }])
    );
    let feb = invoice("2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z");
    assert_eq!(
        kinds(&feb),
        [
            (LineKind::Gpu, money(usage_feb)),
            (LineKind::Fee, money(fee)),
            (LineKind::SlaCredit, money(credit_feb)),
        ]
    );
    assert_eq!(
        (
            feb.availability[0].present_gpu_seconds.to_string(),
            feb.availability[0].credit_percent.map(|p| p.to_string())
        ),
        (feb_present.to_string(), Some("25".into()))
    );
    let mar = invoice("2027-03-01T00:00:00Z", "2027-04-01T00:00:00Z");
    assert_eq!(
        mar.lines.iter().map(|l| l.kind).collect::<Vec<_>>(),
        [LineKind::Gpu, LineKind::Fee]
    );
    assert_eq!(
        (
            mar.availability[0].availability.to_string(),
            mar.availability[0].credit_percent
        ),
        ("100".into(), None)
    );

    // FOCUS: the credit is a Credit row of its own cost (no unit price or pricing quantity),
    // and the invoice's rows still add up to its total (invoice_rows checks it).
    let ctx = gpuledger::focus::Context {
        certificates: Vec::new(),
        regions: Vec::new(),
    };
    let rows = gpuledger::focus::invoice_rows(&jan, &ctx).unwrap();
    let credit_row = rows.iter().find(|r| r.charge_category == "Credit").unwrap();
    assert_eq!(
        (
            credit_row.billed_cost.to_string(),
            credit_row.list_cost.to_string(),
            credit_row.pricing_quantity,
            credit_row.charge_period_end,
            credit_row.sku_price_id.as_deref()
        ),
        (
            money(credit_jan),
            money(credit_jan),
            None,
            t("2027-02-01T00:00:00Z"),
            Some("contract/C-acme-sla/sla-credit")
        )
    );

    // The January invoice and its bundle are the committed fixture verifiers/python and the
    // console recheck (tests/fixtures/sla). GPULEDGER_WRITE_ARTEFACTS=<dir> rewrites it.
    invoice_fixture(&ledger, &jan, "tests/fixtures/sla");

    // Offline: each recomputes from its bundle, which carries the lease, the contract and the
    // records the availability is measured on.
    for inv in [&jan, &feb, &mar] {
        let doc = InvoiceDoc::from(inv.clone());
        assert_eq!(recompute_invoice(&ledger, &doc, |_| {}).unwrap(), doc);
    }
    // An invoice that hides its credit is named at the line.
    let mut hidden = jan.clone();
    let c = hidden.lines.pop().unwrap();
    hidden.net_total -= c.net;
    hidden.tax_total -= c.tax;
    hidden.total -= c.gross;
    let f = recompute_invoice(&ledger, &InvoiceDoc::from(hidden), |_| {}).unwrap_err();
    assert_eq!(
        (f.reason.code(), f.item.as_str()),
        ("claim_mismatch", "lines[2]"),
        "{f:?}"
    );
    // One that claims the lost GPU was there (no credit, 100 %) is named at `availability`.
    let mut rosy = jan.clone();
    let c = rosy.lines.pop().unwrap();
    rosy.net_total -= c.net;
    rosy.tax_total -= c.tax;
    rosy.total -= c.gross;
    rosy.availability[0].present_gpu_seconds = rosy.availability[0].leased_gpu_seconds;
    rosy.availability[0].availability = dec("100");
    rosy.availability[0].credit_percent = None;
    let f = recompute_invoice(&ledger, &InvoiceDoc::from(rosy), |_| {}).unwrap_err();
    assert_eq!(f.reason.code(), "claim_mismatch", "{f:?}");
    // A bundle whose SLA credits less does not verify: the contract's signature fails.
    assert_altered_entry_fails(
        &ledger,
        &jan,
        (
            "contract_registered",
            r#""percent":"10""#,
            r#""percent":"5""#,
        ),
        contract_entry,
    );
    // A bundle whose degraded record was made whole does not verify either.
    let f = recompute_invoice(&ledger, &InvoiceDoc::from(jan.clone()), |lines| {
        edit_bundle_line(
            lines,
            "2027-01-10T03:00:00Z",
            r#""gpu_count":"1""#,
            r#""gpu_count":"2""#,
        );
        edit_bundle_line(
            lines,
            "2027-01-10T03:00:00Z",
            r#""gpu_seconds":"10800""#,
            r#""gpu_seconds":"21600""#,
        );
    })
    .unwrap_err();
    assert_eq!(f.reason.code(), "entry_signature", "{f:?}");

    // The log verifies as a whole, contract and credits included.
    verified(&db.url);
});

both_backends!(sla_contracts_over_http, |db: &TestDb| {
    let log = init(db);
    let srv = log.serve();
    let h = srv.http();
    let admin = log.admin.clone();
    let a = Some(admin.as_str());
    h.parties(&admin, &["acme", "beta"]);
    let now = Timestamp::now();
    let body = |lease: &str, sla: serde_json::Value| {
        serde_json::json!({
            "tenant": "acme", "contract": "C-acme-sla", "currency": "CNY", "region": "west",
            "term_from": now.plus(120).to_string(), "term_to": now.plus(120 + 365 * 86_400).to_string(),
            "billing_period": "month", "billing_anchor": "calendar",
            "fees": [{"name": "GPUs, monthly", "amount": "3000", "timing": "advance",
                      "category": "compute", "lease": lease}],
            "sla": sla
        })
    };
    let sla = serde_json::json!({"target": "99.9", "credits": [
        {"below": "99.9", "percent": "10"}, {"below": "99", "percent": "25"}]});
    // Refused with the reason and field, in the one problem shape, writing nothing.
    let size = h.size();
    for (b, slug, reason, field) in [
        (
            body("lease-beta", sla.clone()),
            "refused",
            "lease_tenant_mismatch",
            "body.fees[0].lease",
        ),
        (
            body("lease-ghost", sla.clone()),
            "refused",
            "unknown_lease",
            "body.fees[0].lease",
        ),
        (
            body(
                "lease-acme",
                serde_json::json!({"target": "99.9", "credits": [
                    {"below": "99", "percent": "10"}, {"below": "99.5", "percent": "25"}]}),
            ),
            "invalid_field",
            "invalid_field",
            "body.sla.credits[1].below",
        ),
        (
            body(
                "lease-acme",
                serde_json::json!({"target": "100", "credits": []}),
            ),
            "invalid_field",
            "quantity_out_of_range",
            "body.sla.target",
        ),
    ] {
        assert_eq!(
            h.post("/v1/contracts", a, &b).first_error(400, slug),
            format!("{reason} {field}"),
            "{b}"
        );
    }
    assert_eq!(h.size(), size);
    h.post("/v1/contracts", a, &body("lease-acme", sla.clone()))
        .ok_json(201);
    // The tenant reads its contract with its SLA; another tenant gets 404 for it.
    let acme = h.tenant_secret(&admin, "acme");
    let beta = h.tenant_secret(&admin, "beta");
    let listed = h.get("/v1/contracts", Some(acme.as_str())).ok_json(200);
    let c = &listed["contracts"][0];
    assert_eq!(
        (&c["sla"], &c["fees"][0]["lease"]),
        (&sla, &serde_json::json!("lease-acme")),
        "{listed}"
    );
    h.get("/v1/contracts?tenant=acme", Some(beta.as_str()))
        .assert_problem(404, "not_found", "another tenant's contracts");
    let size = h.size();
    drop(srv);
    log.assert_verifies(size);
});
