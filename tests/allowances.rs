//! Issue #28, included GPU-hours and overage, on SQLite and PostgreSQL, with the ledger's clock
//! set: acme rents its lease of two H100s on node-1 by the month for January and February
//! 2027 at 20 000 a month, 1 000 H100-hours included, 9.50 per H100-hour above. The node's
//! signed records show 1 200 GPU-hours in January, 240 in February, a late January record
//! logged after January's invoice, and March (after the term) at the rate card. Each invoice's
//! lines and `allowances` are recomputed here by integer arithmetic of the test's own, and from
//! the invoice's bundle by `gpuledger verify --invoice`'s check; an invoice that bills less
//! overage or claims fewer GPU-hours used fails with a named reason; contracts that include
//! hours without a lease or a model twice are refused and write nothing; the preview of part
//! of January shows the month's allowance used so far; verify-log passes the whole log.

mod common;

use common::billing::{
    acme_on_h100, acme_present, acme_usage_logged_at, assert_split_refused, invoice_fixture, money,
    period, refused, refused_contract, size_of, t,
};
use common::*;
use gpuledger::core::invoice::{Invoice, InvoiceDoc, LineKind};
use gpuledger::core::record::{
    BillingAnchor, BillingPeriod, Body, ContractFee, ContractRegistered, FeeCategory, FeeTiming,
    Included,
};

/// acme's contract for January and February 2027, calendar months: 20 000 a month in advance
/// for its lease of two H100s, 1 000 H100-hours included, 9.50 an hour above.
fn contract() -> ContractRegistered {
    ContractRegistered {
        tenant: "acme".into(),
        contract: "C-acme-inc".into(),
        currency: "CNY".into(),
        region: "west".into(),
        term_from: t("2027-01-01T00:00:00Z"),
        term_to: t("2027-03-01T00:00:00Z"),
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
        commitment: None,
        sla: None,
    }
}

fn kinds(inv: &Invoice) -> Vec<(LineKind, String)> {
    inv.lines
        .iter()
        .map(|l| (l.kind, l.net.to_string()))
        .collect()
}

/// Removes line `i` of `inv`, keeping its totals the sums of its lines.
fn without_line(inv: &Invoice, i: usize) -> Invoice {
    let mut out = inv.clone();
    let l = out.lines.remove(i);
    out.net_total -= l.net;
    out.tax_total -= l.tax;
    out.total -= l.gross;
    out
}

both_backends!(
    included_hours_and_overage_come_from_the_signed_records,
    |db: &TestDb| {
        let ledger = open_at(db, t("2027-01-01T00:00:00Z"));
        let node = acme_on_h100(&ledger);

        // Refused, each with its reason and field, writing nothing.
        let size = size_of(&ledger);
        let refused_body =
            |edit: &dyn Fn(&mut serde_json::Value)| refused_contract(contract(), edit);
        assert_eq!(
            refused_body(&|v| {
                v["fees"][0].as_object_mut().unwrap().remove("lease");
            }),
            "invalid_field body.fees[0].included"
        );
        assert_eq!(
            refused_body(&|v| {
                let again = v["fees"][0]["included"][0].clone();
                v["fees"][0]["included"].as_array_mut().unwrap().push(again);
            }),
            "invalid_field body.fees[0].included[1].gpu_model"
        );
        assert_eq!(
            refused_body(&|v| {
                let mut second = v["fees"][0].clone();
                second["name"] = "again".into();
                v["fees"].as_array_mut().unwrap().push(second);
            }),
            "invalid_field body.fees[1].included[0].gpu_model"
        );
        assert_eq!(
            refused_body(&|v| v["fees"][0]["included"] = serde_json::json!([])),
            "invalid_field body.fees[0].included"
        );
        assert_eq!(
            refused_body(&|v| v["fees"][0]["included"][0]["overage_rate"] = "-1".into()),
            "negative_quantity body.fees[0].included[0].overage_rate"
        );
        assert_eq!(
            refused_body(&|v| v["fees"][0]["included"][0]["gpu_hours"] = "1.00001".into()),
            "invalid_field body.fees[0].included[0].gpu_hours"
        );
        assert_eq!(
            refused_body(&|v| {
                v["fees"][0]["included"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("overage_rate");
            }),
            "malformed body"
        );
        assert_eq!(size_of(&ledger), size);
        // An included entry of another tenant's lease is refused as the fee's lease is.
        let mut ghost = contract();
        ghost.fees.as_mut().unwrap()[0].lease = Some("lease-ghost".into());
        assert_eq!(
            refused(ledger.append_ledger_entry(Body::ContractRegistered(ghost))),
            "unknown_lease body.fees[0].lease"
        );
        ledger
            .append_ledger_entry(Body::ContractRegistered(contract()))
            .expect("the contract");

        // January: both GPUs from 1 to 26 January (25 days: 1 200 GPU-hours). February: one GPU
        // from 1 to 11 February (240 GPU-hours). March, after the term: one GPU for 5 hours.
        let mut seq = 0;
        acme_present(
            &ledger,
            &node,
            &mut seq,
            ("2027-01-01T00:00:00Z", "2027-01-26T00:00:00Z"),
            2,
        );

        // The preview of 1 to 20 January: the month's whole allowance, 19 days of both GPUs used.
        let so_far = period("2027-01-01T00:00:00Z", "2027-01-20T00:00:00Z");
        let preview = ledger
            .reads()
            .run(|c| {
                let size = gpuledger::store::read::head(c)?.0;
                gpuledger::store::invoices::preview_period(
                    c,
                    "acme",
                    so_far,
                    size,
                    &Default::default(),
                )
            })
            .unwrap();
        assert_eq!(preview.currencies.len(), 1);
        let preview = &preview.currencies[0].1;
        let used_so_far = 19 * 2 * 86_400;
        assert_eq!(
            serde_json::to_value(&preview.allowances).unwrap(),
            serde_json::json!([{
                "contract": "C-acme-inc", "lease": "lease-acme", "gpu_model": "H100",
                "period": {"from": "2027-01-01T00:00:00Z", "to": "2027-02-01T00:00:00Z"},
                "included_gpu_seconds": "3600000",
                "used_gpu_seconds": used_so_far.to_string(),
                "overage_gpu_seconds": "0"
            }])
        );
        // No rate-card line: the contract prices the lease's H100 time.
        assert_eq!(
            preview.lines.iter().map(|l| l.kind).collect::<Vec<_>>(),
            [LineKind::Fee, LineKind::Included]
        );

        ledger.set_clock(Some(t("2027-02-01T01:00:00Z")));
        // An invoice that would split January is refused, writing nothing.
        assert_split_refused(
            &ledger,
            "2027-01-01T00:00:00Z",
            "2027-01-16T00:00:00Z",
            "C-acme-inc",
        );
        let invoice = |from: &str, to: &str| {
            let mut v = ledger
                .issuance()
                .invoices("acme", period(from, to))
                .unwrap();
            assert_eq!(v.len(), 1);
            v.remove(0)
        };
        let jan = invoice("2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z");

        // The test's own arithmetic, in GPU-seconds and cents.
        let jan_used: i128 = 25 * 2 * 86_400;
        let included: i128 = 1000 * 3600;
        let jan_over = jan_used - included;
        // 200 GPU-hours at 9.50.
        let jan_overage = jan_over * 950 / 3600;
        assert_eq!(jan_overage, 190_000);
        let fee = 2_000_000;
        assert_eq!(
            kinds(&jan),
            [
                (LineKind::Fee, money(fee)),
                (LineKind::Included, money(0)),
                (LineKind::Overage, money(jan_overage)),
            ]
        );
        assert_eq!(jan.total.to_string(), money(fee + jan_overage));
        let (inc, over) = (&jan.lines[1], &jan.lines[2]);
        assert_eq!(
        (
            inc.quantity.to_string(),
            inc.gpu_seconds.map(|s| s.to_string()),
            inc.records,
            inc.description.as_str()
        ),
        (
            "1000".into(),
            Some(included.to_string()),
            25,
            "Included GPU-hours, H100, lease lease-acme: 1200 of 1000 GPU-h (2 × H100 on node-1, \
             monthly)"
        )
    );
        assert_eq!(
            (
                over.quantity.to_string(),
                over.unit_price.to_string(),
                over.gpu_model.as_deref(),
                over.service_period,
                over.description.as_str()
            ),
            (
                "200".into(),
                "9.50".into(),
                Some("H100"),
                Some(period("2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z")),
                "Overage above 1000 included GPU-h, H100, lease lease-acme (2 × H100 on node-1, \
             monthly)"
            )
        );
        assert_eq!(
            serde_json::to_value(&jan.allowances).unwrap(),
            serde_json::json!([{
                "contract": "C-acme-inc", "lease": "lease-acme", "gpu_model": "H100",
                "period": {"from": "2027-01-01T00:00:00Z", "to": "2027-02-01T00:00:00Z"},
                "included_gpu_seconds": included.to_string(),
                "used_gpu_seconds": jan_used.to_string(),
                "overage_gpu_seconds": jan_over.to_string()
            }])
        );

        // A late January record (one GPU for 2 hours on 28 January) logged after January's
        // invoice, then February's usage and March's.
        seq += 1;
        acme_usage_logged_at(
            &ledger,
            &node,
            seq,
            (t("2027-01-28T00:00:00Z"), t("2027-01-28T02:00:00Z")),
            1,
            t("2027-02-01T02:00:00Z"),
        );
        acme_present(
            &ledger,
            &node,
            &mut seq,
            ("2027-02-01T00:00:00Z", "2027-02-11T00:00:00Z"),
            1,
        );
        acme_present(
            &ledger,
            &node,
            &mut seq,
            ("2027-03-01T00:00:00Z", "2027-03-01T05:00:00Z"),
            1,
        );
        ledger.set_clock(Some(t("2027-04-01T01:00:00Z")));
        let feb = invoice("2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z");
        // February: 240 of 1 000 GPU-hours, nothing above; the late record is overage of January
        // at the contract's rate: 2 GPU-hours at 9.50.
        let late = 2 * 950;
        assert_eq!(
            kinds(&feb),
            [
                (LineKind::Fee, money(fee)),
                (LineKind::Included, money(0)),
                (LineKind::Overage, money(late)),
            ]
        );
        assert_eq!(
            (
                feb.lines[2].adjustment_for,
                feb.lines[2].service_period,
                feb.lines[2].description.as_str()
            ),
            (
                Some(period("2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z")),
                None,
                "Overage (late records), H100, lease lease-acme (2 × H100 on node-1, monthly)"
            )
        );
        assert_eq!(
            feb.allowances[0].used_gpu_seconds.to_string(),
            (10 * 86_400).to_string()
        );
        // March is after the term: the rate card's 18.50 an H100-hour.
        let mar = invoice("2027-03-01T00:00:00Z", "2027-04-01T00:00:00Z");
        assert_eq!(kinds(&mar), [(LineKind::Gpu, money(5 * 1850))]);
        assert!(mar.allowances.is_empty());

        // FOCUS: the overage is a Usage row at the contract's price, drawing nothing it has no
        // commitment for, and the rows add up to the invoice's total (invoice_rows checks it).
        let ctx = gpuledger::focus::Context {
            certificates: Vec::new(),
            regions: Vec::new(),
        };
        let rows = gpuledger::focus::invoice_rows(&jan, &ctx).unwrap();
        let row = rows
            .iter()
            .find(|r| r.sku_price_id.as_deref() == Some("contract/C-acme-inc/overage/H100"))
            .unwrap();
        assert_eq!(
            (
                row.charge_category.as_str(),
                row.billed_cost.to_string(),
                row.consumed_quantity.map(|q| q.to_string()),
                row.sku_id.as_deref()
            ),
            (
                "Usage",
                money(jan_overage),
                Some(jan_over.to_string()),
                Some("gpu/H100")
            )
        );

        // February's invoice (its late overage included) and its bundle are the committed fixture
        // verifiers/python and the console recheck (tests/fixtures/allowances).
        // GPULEDGER_WRITE_ARTEFACTS=<dir> rewrites it.
        invoice_fixture(&ledger, &feb, "tests/fixtures/allowances");

        // Offline: each recomputes from its bundle.
        for inv in [&jan, &feb, &mar] {
            let doc = InvoiceDoc::from(inv.clone());
            assert_eq!(recompute_invoice(&ledger, &doc, |_| {}).unwrap(), doc);
        }
        // An invoice that drops its overage is named at the line.
        let f = recompute_invoice(&ledger, &InvoiceDoc::from(without_line(&jan, 2)), |_| {})
            .unwrap_err();
        assert_eq!(
            (f.reason.code(), f.item.as_str()),
            ("claim_mismatch", "lines[2]"),
            "{f:?}"
        );
        // One that bills the overage at a lower rate is named at the line's net.
        let mut cheap = jan.clone();
        cheap.lines[2].net = dec("1800.00");
        cheap.net_total -= dec("100");
        cheap.total -= dec("100");
        let f = recompute_invoice(&ledger, &InvoiceDoc::from(cheap), |_| {}).unwrap_err();
        assert_eq!(
            (f.reason.code(), f.item.as_str()),
            ("claim_mismatch", "lines[2].net"),
            "{f:?}"
        );
        // One that claims fewer GPU-hours used is named at `allowances`.
        let mut fewer = jan.clone();
        fewer.allowances[0].used_gpu_seconds = dec("3600000");
        fewer.allowances[0].overage_gpu_seconds = dec("0");
        let f = recompute_invoice(&ledger, &InvoiceDoc::from(fewer), |_| {}).unwrap_err();
        assert_eq!(
            (f.reason.code(), f.item.as_str()),
            ("claim_mismatch", "allowances"),
            "{f:?}"
        );
        // One that also bills the contract-priced records at the rate card is named at the line.
        let mut twice = jan.clone();
        let mut gpu = jan.lines[2].clone();
        gpu.kind = LineKind::Gpu;
        gpu.net = dec("22200.00");
        twice.lines.insert(0, gpu);
        let f = recompute_invoice(&ledger, &InvoiceDoc::from(twice), |_| {}).unwrap_err();
        assert_eq!(
            (f.reason.code(), f.item.as_str()),
            ("claim_mismatch", "lines[0].description"),
            "{f:?}"
        );

        // The log verifies as a whole.
        verified(&db.url);
    }
);

both_backends!(included_hours_over_http, |db: &TestDb| {
    let log = init(db);
    let srv = log.serve();
    let h = srv.http();
    let admin = log.admin.clone();
    let a = Some(admin.as_str());
    h.parties(&admin, &["acme", "beta"]);
    let now = gpuledger::core::time::Timestamp::now();
    let body = |fee: serde_json::Value| {
        serde_json::json!({
            "tenant": "acme", "contract": "C-acme-inc", "currency": "CNY", "region": "west",
            "term_from": now.plus(120).to_string(), "term_to": now.plus(120 + 365 * 86_400).to_string(),
            "billing_period": "month", "billing_anchor": "calendar",
            "fees": [fee]
        })
    };
    let included =
        serde_json::json!([{"gpu_model": "H100", "gpu_hours": "1000", "overage_rate": "9.50"}]);
    let size = h.size();
    for (fee, reason, field) in [
        (
            serde_json::json!({"name": "GPUs", "amount": "20000", "timing": "advance",
                               "category": "compute", "included": included}),
            "invalid_field",
            "body.fees[0].included",
        ),
        (
            serde_json::json!({"name": "GPUs", "amount": "20000", "timing": "advance",
                               "category": "compute", "lease": "lease-acme",
                               "included": [{"gpu_model": "H100", "gpu_hours": "1e3",
                                             "overage_rate": "9.50"}]}),
            "invalid_field",
            "body.fees[0].included[0].gpu_hours",
        ),
    ] {
        assert_eq!(
            h.post("/v1/contracts", a, &body(fee.clone()))
                .first_error(400, "invalid_field"),
            format!("{reason} {field}"),
            "{fee}"
        );
    }
    assert_eq!(h.size(), size);
    let fee = serde_json::json!({"name": "GPUs", "amount": "20000", "timing": "advance",
                                 "category": "compute", "lease": "lease-acme",
                                 "included": included});
    h.post("/v1/contracts", a, &body(fee)).ok_json(201);
    let acme = h.tenant_secret(&admin, "acme");
    let listed = h.get("/v1/contracts", Some(acme.as_str())).ok_json(200);
    assert_eq!(
        listed["contracts"][0]["fees"][0]["included"], included,
        "{listed}"
    );
    let size = h.size();
    drop(srv);
    log.assert_verifies(size);
});
