//! Issue #28's golden scenario, on SQLite and PostgreSQL, with the ledger's clock set: every
//! contract rule at once. acme rents its lease of two H100s on node-1 under a yearly contract
//! billed by the calendar month, started mid-month (2027-01-15 12:00): 20 000 a month in
//! advance, 1 000 H100-hours included and 9.50 per hour above, a minimum spend of 13 000 a
//! month, an SLA of 99.9 % (10 % below it, 25 % below 99 %). It tops up 20 000.00 that expires
//! on 15 February. Its node loses a GPU for 3 hours on 20 January. The contract is amended
//! mid-term: it ends on 10 March, and its successor (15 000 a month, nothing included) runs
//! from then, so March's later usage is the rate card's again.
//!
//! Every line, total, draw and availability of the January, February and March invoices is
//! recomputed here by integer arithmetic of the test's own (cents, micro-seconds), and from
//! each invoice's bundle by `gpuledger verify --invoice`'s check; January and March are the
//! fixtures tests/fixtures/golden-jan and golden-mar, which verifiers/python recomputes with
//! exact fractions (tests/test_contract_golden.py) and checks against its own Fraction
//! arithmetic of the same scenario.

mod common;

use common::billing::{
    acme_invoice, acme_on_h100, acme_present, cents, invoice_fixture, money, sla_99_9, t,
};
use common::*;
use gpuledger::core::invoice::{Invoice, InvoiceDoc};
use gpuledger::core::record::{
    BillingAnchor, BillingPeriod, Body, ContractAmended, ContractFee, ContractRegistered,
    FeeCategory, FeeTiming, Included, Prepayment, PrepaymentSource,
};

const LEASE_GPUS: i128 = 2;
/// January 2027 has 2 678 400 s; the term holds 1 425 600 s of it (16.5 days).
const JAN: (i128, i128) = (1_425_600, 2_678_400);

fn golden() -> ContractRegistered {
    ContractRegistered {
        tenant: "acme".into(),
        contract: "C-gold".into(),
        currency: "CNY".into(),
        region: "west".into(),
        term_from: t("2027-01-15T12:00:00Z"),
        term_to: t("2028-01-15T12:00:00Z"),
        billing_period: BillingPeriod::Month,
        billing_anchor: BillingAnchor::Calendar,
        fees: Some(vec![ContractFee {
            name: "2 × H100 on node-1, monthly".into(),
            amount: dec("20000"),
            timing: FeeTiming::Advance,
            category: FeeCategory::Compute,
            lease: Some(gpuledger::sample::lease("acme")),
            included: Some(vec![Included {
                gpu_model: "H100".into(),
                gpu_hours: dec("1000"),
                overage_rate: dec("9.50"),
            }]),
        }]),
        commitment: Some(dec("13000")),
        sla: Some(sla_99_9()),
    }
}

fn successor() -> ContractRegistered {
    ContractRegistered {
        contract: "C-gold-2".into(),
        term_from: t("2027-03-10T00:00:00Z"),
        fees: Some(vec![ContractFee {
            name: "2 × H100 on node-1, monthly (renewed)".into(),
            amount: dec("15000"),
            timing: FeeTiming::Advance,
            category: FeeCategory::Compute,
            lease: Some(gpuledger::sample::lease("acme")),
            included: None,
        }]),
        commitment: None,
        sla: None,
        ..golden()
    }
}

fn nets(inv: &Invoice) -> Vec<(&'static str, String)> {
    inv.lines
        .iter()
        .map(|l| (l.kind.as_str(), l.net.to_string()))
        .collect()
}

/// The allowance of `hours` per whole period over `used` of `full` seconds, in micro-seconds,
/// rounded half-even (6 decimals of a second, RATING.md).
fn allowance_us(hours: i128, (used, full): (i128, i128)) -> i128 {
    cents(hours * 3_600 * 1_000_000 * used, full)
}

/// The overage net in cents of `used_s` seconds above an allowance of `allowance_us`, at
/// `rate_cents` an hour.
fn overage_cents(used_s: i128, allowance_us: i128, rate_cents: i128) -> i128 {
    let over_us = used_s * 1_000_000 - allowance_us;
    cents(over_us * rate_cents, 3_600 * 1_000_000)
}

both_backends!(the_golden_contract_scenario, |db: &TestDb| {
    let ledger = open_at(db, t("2027-01-01T00:00:00Z"));
    let node = acme_on_h100(&ledger);
    ledger
        .append_ledger_entry(Body::ContractRegistered(golden()))
        .expect("the contract");
    ledger
        .append_ledger_entry(Body::Prepayment(Prepayment {
            tenant: "acme".into(),
            reference: "TOPUP-GOLD".into(),
            source: PrepaymentSource::Purchase,
            currency: "CNY".into(),
            amount: dec("20000.00"),
            expires_at: Some(t("2027-02-15T00:00:00Z")),
        }))
        .expect("the top-up");

    // January from the term's start: both GPUs, but one lost on the 20th from 00:00 to 03:00.
    let mut seq = 0;
    for (from, to, count) in [
        ("2027-01-15T12:00:00Z", "2027-01-20T00:00:00Z", 2),
        ("2027-01-20T00:00:00Z", "2027-01-20T03:00:00Z", 1),
        ("2027-01-20T03:00:00Z", "2027-02-01T00:00:00Z", 2),
    ] {
        acme_present(&ledger, &node, &mut seq, (from, to), count);
    }
    let jan = acme_invoice(
        &ledger,
        "2027-02-01T01:00:00Z",
        ("2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z"),
    );

    // The test's own arithmetic. Fee: 20 000 × 16.5 / 31.
    let fee_jan = cents(2_000_000 * JAN.0, JAN.1);
    // Used: 2 GPUs over the term's part of January, less one GPU for 3 hours.
    let used_jan_s = LEASE_GPUS * JAN.0 - 3 * 3_600;
    let allowance_jan = allowance_us(1_000, JAN);
    let overage_jan = overage_cents(used_jan_s, allowance_jan, 950);
    // Availability 100 × 2 840 400 / 2 851 200 = 99.6212 %: below 99.9, not below 99: 10 %.
    let credit_jan = cents(fee_jan * 10, 100);
    let committed_jan = cents(1_300_000 * JAN.0, JAN.1);
    let true_up_jan = committed_jan - overage_jan;
    assert_eq!(
        (
            fee_jan,
            allowance_jan,
            overage_jan,
            credit_jan,
            committed_jan
        ),
        (1_064_516, 1_916_129_032_258, 243_905, 106_452, 691_935),
        "the arithmetic itself"
    );
    assert_eq!(
        nets(&jan),
        [
            ("fee", money(fee_jan)),
            ("included", "0.00".into()),
            ("overage", money(overage_jan)),
            ("sla_credit", money(-credit_jan)),
            ("true_up", money(true_up_jan)),
        ]
    );
    let total_jan = fee_jan + overage_jan - credit_jan + true_up_jan;
    assert_eq!(jan.total.to_string(), money(total_jan));
    let availability = serde_json::to_value(&jan.availability).unwrap();
    assert_eq!(
        (
            &availability[0]["availability"],
            &availability[0]["present_gpu_seconds"],
            &availability[0]["credit_percent"]
        ),
        (
            &serde_json::json!("99.6212"),
            &serde_json::json!(used_jan_s.to_string()),
            &serde_json::json!("10")
        ),
        "{availability}"
    );
    // The top-up pays all of it; 20 000.00 − the total is left, until 15 February.
    let draws: Vec<(String, String)> = jan
        .prepaid
        .iter()
        .map(|d| (d.prepayment.clone(), d.amount.to_string()))
        .collect();
    assert_eq!(draws, [("TOPUP-GOLD".to_string(), money(total_jan))]);
    assert_eq!(jan.amount_due.map(|a| a.to_string()), Some("0.00".into()));

    // February whole, March to the 20th, both GPUs throughout; amended mid-term on 10
    // February: C-gold ends on 10 March, C-gold-2 follows.
    acme_present(
        &ledger,
        &node,
        &mut seq,
        ("2027-02-01T00:00:00Z", "2027-02-10T00:00:00Z"),
        2,
    );
    ledger
        .append_ledger_entry(Body::ContractAmended(ContractAmended {
            tenant: "acme".into(),
            contract: "C-gold".into(),
            term_to: t("2027-03-10T00:00:00Z"),
            reason: "Renewed at a new price from 10 March".into(),
        }))
        .expect("the amendment");
    ledger
        .append_ledger_entry(Body::ContractRegistered(successor()))
        .expect("the successor");
    acme_present(
        &ledger,
        &node,
        &mut seq,
        ("2027-02-10T00:00:00Z", "2027-03-01T00:00:00Z"),
        2,
    );
    let feb = acme_invoice(
        &ledger,
        "2027-03-01T01:00:00Z",
        ("2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z"),
    );
    // 28 days × 48 GPU-hours = 1 344 h: 344 above the 1 000 included; available 100 %; the
    // top-up expired on the 15th (3 500.01 of it forfeit), so nothing is drawn.
    let overage_feb = overage_cents(2 * 28 * 86_400, 1_000 * 3_600 * 1_000_000, 950);
    let true_up_feb = 1_300_000 - overage_feb;
    assert_eq!(
        nets(&feb),
        [
            ("fee", money(2_000_000)),
            ("included", "0.00".into()),
            ("overage", money(overage_feb)),
            ("true_up", money(true_up_feb)),
        ]
    );
    assert_eq!(overage_feb, 326_800);
    assert!(
        feb.prepaid.is_empty() && feb.amount_due.is_none(),
        "{feb:?}"
    );

    acme_present(
        &ledger,
        &node,
        &mut seq,
        ("2027-03-01T00:00:00Z", "2027-03-20T00:00:00Z"),
        2,
    );
    let mar = acme_invoice(
        &ledger,
        "2027-04-01T01:00:00Z",
        ("2027-03-01T00:00:00Z", "2027-04-01T00:00:00Z"),
    );
    // C-gold's last period is 1–10 March (9 of 31 days): its rent, 9/31 of the included hours,
    // the overage of 9 days × 48 h above them, no credit (all present), and its commitment
    // drawn by that overage and the rate card's usage. From the 10th the rate card prices the
    // lease again (10 days × 48 h at 18.50), and C-gold-2's rent covers 22 of 31 days.
    const MAR: (i128, i128) = (9 * 86_400, 31 * 86_400);
    let fee_mar = cents(2_000_000 * MAR.0, MAR.1);
    let allowance_mar = allowance_us(1_000, MAR);
    let overage_mar = overage_cents(2 * 9 * 86_400, allowance_mar, 950);
    let usage_mar = 2 * 10 * 24 * 1_850;
    let committed_mar = cents(1_300_000 * MAR.0, MAR.1);
    assert!(
        usage_mar + overage_mar > committed_mar,
        "no true-up in March"
    );
    let fee_renewed = cents(1_500_000 * 22, 31);
    assert_eq!(
        (fee_mar, overage_mar, fee_renewed),
        (580_645, 134_594, 1_064_516),
        "the arithmetic itself"
    );
    assert_eq!(
        nets(&mar),
        [
            ("gpu", money(usage_mar)),
            ("fee", money(fee_mar)),
            ("included", "0.00".into()),
            ("overage", money(overage_mar)),
            ("fee", money(fee_renewed)),
        ]
    );
    assert_eq!(
        mar.total.to_string(),
        money(usage_mar + fee_mar + overage_mar + fee_renewed)
    );

    // Offline: each recomputes from its bundle; January and March are the fixtures
    // verifiers/python recomputes (GPULEDGER_WRITE_ARTEFACTS=<dir> rewrites one: run the test
    // once per directory).
    for inv in [&jan, &feb, &mar] {
        let doc = InvoiceDoc::from(inv.clone());
        assert_eq!(recompute_invoice(&ledger, &doc, |_| {}).unwrap(), doc);
    }
    let write = std::env::var("GPULEDGER_WRITE_ARTEFACTS").unwrap_or_default();
    if write.is_empty() || write.ends_with("golden-jan") {
        invoice_fixture(&ledger, &jan, "tests/fixtures/golden-jan");
    }
    if write.is_empty() || write.ends_with("golden-mar") {
        invoice_fixture(&ledger, &mar, "tests/fixtures/golden-mar");
    }
    let size = common::billing::size_of(&ledger);
    assert_eq!(verified(&db.url).size, size, "verify-log passes the log");
});
