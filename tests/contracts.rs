//! Issue #28, contracts (first slice), on SQLite and PostgreSQL, with the ledger's clock set:
//! a yearly contract billed monthly on the calendar, started mid-month, with a monthly fee in
//! advance, public IPs in arrears, a one-off setup fee and a minimum spend. Each invoice's
//! lines are recomputed here to the cent by integer arithmetic of its own (not the crate's
//! rating), and by `gpuledger verify --invoice`'s check from the invoice's bundle; an invoice
//! that hides the true-up, or a bundle whose contract was altered, fails with a named reason;
//! an invoice that would split a committed month is refused; a contract that overlaps another,
//! starts in the past or inside an invoiced period, or names no tenant is refused and writes
//! nothing; verify-log passes the whole log.

mod common;

use common::billing::{
    acme_on_h100, assert_altered_entry_fails, assert_split_refused, cents, invoice_fixture, money,
    period, refused, size_of, t, use_h100,
};
use common::*;
use gpuledger::core::invoice::{Invoice, InvoiceDoc, LineKind, Period};
use gpuledger::core::record::{
    BillingAnchor, BillingPeriod, Body, ContractFee, ContractRegistered, FeeCategory, FeeTiming,
};
use gpuledger::core::time::Timestamp;
use gpuledger::store::{access, Ledger, StoreError};

/// acme's contract: 2027-01-15 12:00 to 2028-01-15 12:00, calendar months; a bare-metal fee of
/// 3100 a month in advance, public IPs at 10 a month in arrears, a setup fee of 500 once, and
/// a minimum spend of 1000 a month.
fn contract() -> ContractRegistered {
    let fee = |name: &str, amount: &str, timing, category| ContractFee {
        name: name.into(),
        amount: dec(amount),
        timing,
        category,
        lease: None,
        included: None,
    };
    ContractRegistered {
        tenant: "acme".into(),
        contract: "C-acme-2027".into(),
        currency: "CNY".into(),
        region: "west".into(),
        term_from: t("2027-01-15T12:00:00Z"),
        term_to: t("2028-01-15T12:00:00Z"),
        billing_period: BillingPeriod::Month,
        billing_anchor: BillingAnchor::Calendar,
        fees: Some(vec![
            fee(
                "Bare-metal node, 2 × H100, monthly",
                "3100",
                FeeTiming::Advance,
                FeeCategory::Compute,
            ),
            fee(
                "Public IPs",
                "10",
                FeeTiming::Arrears,
                FeeCategory::Networking,
            ),
            fee("Rack setup", "500", FeeTiming::Once, FeeCategory::Support),
        ]),
        commitment: Some(dec("1000")),
        sla: None,
    }
}

fn lines_of(inv: &Invoice) -> Vec<(&'static str, String, String)> {
    inv.lines
        .iter()
        .map(|l| (l.kind.as_str(), l.description.clone(), l.net.to_string()))
        .collect()
}

both_backends!(
    a_yearly_contract_bills_fees_and_its_commitment,
    |db: &TestDb| {
        let ledger = open_at(db, t("2027-01-01T00:00:00Z"));
        let node = acme_on_h100(&ledger);
        ledger
            .with_account_writer(|c| access::create_tenant(c, "acme", "acme").map(|_| ()))
            .unwrap();

        // Refused, each with its reason, writing nothing.
        let size = size_of(&ledger);
        let mut ghost = contract();
        ghost.tenant = "ghost".into();
        assert_eq!(
            refused(ledger.append_ledger_entry(Body::ContractRegistered(ghost))),
            "unknown_tenant body.tenant"
        );
        let mut past = contract();
        past.term_from = t("2026-12-31T23:54:59Z");
        assert_eq!(
            refused(ledger.append_ledger_entry(Body::ContractRegistered(past))),
            "price_in_past body.term_from"
        );
        assert_eq!(size_of(&ledger), size);

        let contract_entry = ledger
            .append_ledger_entry(Body::ContractRegistered(contract()))
            .expect("the contract");
        let mut overlapping = contract();
        overlapping.contract = "C-acme-2".into();
        overlapping.term_from = t("2028-01-15T11:59:59Z");
        overlapping.term_to = t("2029-01-01T00:00:00Z");
        assert_eq!(
            refused(ledger.append_ledger_entry(Body::ContractRegistered(overlapping))),
            "contract_overlap body.term_from"
        );
        let mut again = contract();
        again.term_from = t("2029-01-01T00:00:00Z");
        again.term_to = t("2030-01-01T00:00:00Z");
        assert!(
            refused(ledger.append_ledger_entry(Body::ContractRegistered(again)))
                .starts_with("conflict")
        );

        // January: 10 H100-hours at 18.5 = 185.00, below the prorated commitment.
        use_h100(&ledger, &node, 1, "2027-01-20T00:00:00Z", 10);
        // February: 100 H100-hours = 1850.00, above it.
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

        // A half-month invoice would split a committed month: refused, nothing written.
        assert_split_refused(
            &ledger,
            "2027-02-01T00:00:00Z",
            "2027-02-15T00:00:00Z",
            "C-acme-2027",
        );

        // The test's own arithmetic, in cents. January 2027 has 2678400 s; the term holds
        // 1425600 s of it (16.5 days).
        let (jan_used, jan_full) = (1_425_600, 2_678_400);
        let usage_jan = cents(10 * 1850 * 100, 100); // 10 h × 18.50
        let rent_jan = cents(310_000 * jan_used, jan_full);
        let ips_jan = cents(1_000 * jan_used, jan_full);
        let committed_jan = cents(100_000 * jan_used, jan_full);
        let true_up_jan = (committed_jan - usage_jan).max(0);
        assert_eq!(
            (rent_jan, ips_jan, committed_jan),
            (165_000, 532, 53_226),
            "the arithmetic itself"
        );

        let jan = ledger
            .issuance()
            .invoices(
                "acme",
                period("2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z"),
            )
            .unwrap();
        assert_eq!(jan.len(), 1);
        let inv = &jan[0];
        assert_eq!(
            lines_of(inv),
            [
                (
                    "gpu",
                    "GPU compute, H100, west, on-demand".into(),
                    money(usage_jan)
                ),
                ("fee", "Rack setup".into(), money(50_000)),
                (
                    "fee",
                    "Bare-metal node, 2 × H100, monthly".into(),
                    money(rent_jan)
                ),
                ("fee", "Public IPs".into(), money(ips_jan)),
                (
                    "true_up",
                    "Minimum commitment true-up, contract C-acme-2027".into(),
                    money(true_up_jan)
                ),
            ]
        );
        let total = usage_jan + 50_000 + rent_jan + ips_jan + true_up_jan;
        assert_eq!(inv.total.to_string(), money(total));
        assert_eq!(inv.total.to_string(), "2687.58");
        let rent = &inv.lines[2];
        assert_eq!(
            (
                rent.quantity.to_string(),
                rent.unit.as_str(),
                rent.unit_price.to_string(),
                rent.service_period
            ),
            (
                "0.532258".into(),
                "period",
                "3100".into(),
                Some(period("2027-01-15T12:00:00Z", "2027-02-01T00:00:00Z"))
            )
        );
        assert_eq!(
            serde_json::to_value(&inv.commitments).unwrap(),
            serde_json::json!([{"contract": "C-acme-2027", "committed": money(committed_jan),
                                "drawn": money(usage_jan), "true_up": money(true_up_jan)}])
        );

        // February: its rent in advance and its IPs in arrears; no setup; usage above the
        // commitment, so no true-up.
        let feb = ledger
            .issuance()
            .invoices(
                "acme",
                period("2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z"),
            )
            .unwrap();
        let inv2 = &feb[0];
        let kinds: Vec<LineKind> = inv2.lines.iter().map(|l| l.kind).collect();
        assert_eq!(kinds, [LineKind::Gpu, LineKind::Fee, LineKind::Fee]);
        assert_eq!(
            (
                inv2.total.to_string(),
                inv2.commitments[0].true_up.to_string()
            ),
            (money(185_000 + 310_000 + 1_000), "0.00".into())
        );

        // The January invoice and its bundle are the committed fixture that verifiers/python
        // rechecks the contract lines of (tests/fixtures/contract; the same bytes on either
        // database: a set clock and fixed keys). GPULEDGER_WRITE_ARTEFACTS=<dir> rewrites it.
        invoice_fixture(&ledger, inv, "tests/fixtures/contract");

        // The FOCUS export writes the commitment with FOCUS 1.2's commitment-discount
        // columns: the usage row draws it down (Used, its net), the true-up row is what was
        // left unused (a Usage row, Unused, its net); the fee rows are no part of it.
        let ctx = gpuledger::focus::Context {
            certificates: Vec::new(),
            regions: Vec::new(),
        };
        let rows = gpuledger::focus::invoice_rows(inv, &ctx).unwrap();
        let commitment: Vec<String> = rows
            .iter()
            .map(|r| {
                let cell = |c: &Option<String>| c.clone().unwrap_or_else(|| "-".into());
                format!(
                    "{} {} {} {}",
                    r.charge_category,
                    cell(&r.commitment_discount_id),
                    cell(&r.commitment_discount_status),
                    cell(&r.commitment_discount_quantity.map(|q| q.to_string()))
                )
            })
            .collect();
        let id = "contract/C-acme-2027/commitment";
        assert_eq!(
            commitment,
            [
                format!("Usage {id} Used {}", money(usage_jan)),
                "Purchase - - -".into(),
                "Purchase - - -".into(),
                "Purchase - - -".into(),
                format!("Usage {id} Unused {}", money(true_up_jan)),
            ]
        );
        assert!(rows.iter().all(|r| r.commitment_discount_id.is_none()
            || (r.commitment_discount_category.as_deref() == Some("Spend")
                && r.commitment_discount_unit.as_deref() == Some("CNY"))));

        // Offline: each recomputes from its bundle, which carries the contract.
        for inv in [inv, inv2] {
            let doc = InvoiceDoc::from(inv.clone());
            assert_eq!(recompute_invoice(&ledger, &doc, |_| {}).unwrap(), doc);
        }
        // An invoice that hides the true-up is named at the first line that differs.
        let mut hidden = inv.clone();
        let t_up = hidden.lines.pop().unwrap();
        hidden.net_total -= t_up.net;
        hidden.total -= t_up.gross;
        let f = recompute_invoice(&ledger, &InvoiceDoc::from(hidden), |_| {}).unwrap_err();
        assert_eq!(
            (f.reason.code(), f.item.as_str()),
            ("claim_mismatch", "lines[4]"),
            "{f:?}"
        );
        // A bundle whose contract was altered (a smaller commitment) does not verify: named at
        // the contract's own entry, whose signature no longer verifies.
        assert_altered_entry_fails(
            &ledger,
            inv,
            (
                "contract_registered",
                r#""commitment":"1000""#,
                r#""commitment":"10""#,
            ),
            contract_entry,
        );

        // A contract cannot start in what is past by then.
        ledger.set_clock(Some(t("2027-03-02T00:00:00Z")));
        let mut inside = contract();
        inside.tenant = "acme".into();
        inside.contract = "C-acme-inside".into();
        inside.term_from = t("2027-02-28T00:00:00Z");
        inside.term_to = t("2027-03-01T00:00:00Z");
        let r = ledger.append_ledger_entry(Body::ContractRegistered(inside));
        assert!(
            matches!(&r, Err(StoreError::Rejected(x)) if x.reason.code() == "price_in_past"),
            "{r:?}"
        );
        // Scheduled issuance (serve runs it on a timer): once April has closed, March and
        // April are invoiced, each once: the same run again, or after a restart, issues
        // nothing. Each is 3100 rent + 10 IPs + a true-up of the whole 1000 (no usage).
        ledger.set_clock(Some(t("2027-05-01T01:00:00Z")));
        let run = ledger.issuance().due_contract_invoices().unwrap();
        assert!(run.failed.is_empty(), "{:?}", run.failed);
        let periods: Vec<(String, String)> = run
            .issued
            .iter()
            .map(|i| (i.period.from.to_string(), i.total.to_string()))
            .collect();
        assert_eq!(
            periods,
            [
                (
                    "2027-03-01T00:00:00Z".into(),
                    money(310_000 + 1_000 + 100_000)
                ),
                (
                    "2027-04-01T00:00:00Z".into(),
                    money(310_000 + 1_000 + 100_000)
                ),
            ]
        );
        let again = ledger.issuance().due_contract_invoices().unwrap();
        assert!(again.issued.is_empty() && again.failed.is_empty());
        drop(ledger);
        let ledger = Ledger::open_at(&db.url, log_key(), t("2027-05-01T02:00:00Z")).unwrap();
        let after_restart = ledger.issuance().due_contract_invoices().unwrap();
        assert!(after_restart.issued.is_empty() && after_restart.failed.is_empty());
        for inv in &run.issued {
            let doc = InvoiceDoc::from(inv.clone());
            assert_eq!(recompute_invoice(&ledger, &doc, |_| {}).unwrap(), doc);
        }
        let size = size_of(&ledger);
        assert_eq!(verified(&db.url).size, size, "verify-log passes the log");
    }
);

both_backends!(
    an_interim_invoice_leaves_the_rest_of_its_period_to_the_scheduled_run,
    |db: &TestDb| {
        let ledger = open_at(db, t("2027-01-01T00:00:00Z"));
        let node = acme_on_h100(&ledger);
        // acme's contract without a commitment: the rent in advance, the IPs in arrears.
        let mut c = contract();
        c.contract = "C-interim".into();
        c.commitment = None;
        c.term_from = t("2027-03-01T00:00:00Z");
        c.term_to = t("2027-06-01T00:00:00Z");
        c.fees
            .as_mut()
            .unwrap()
            .retain(|f| f.timing != FeeTiming::Once);
        ledger
            .append_ledger_entry(Body::ContractRegistered(c))
            .unwrap();
        use_h100(&ledger, &node, 1, "2027-03-05T00:00:00Z", 10);
        use_h100(&ledger, &node, 2, "2027-03-20T00:00:00Z", 10);
        // An interim invoice of March so far, by hand (a spend alert fired, say): the usage
        // of its first half and the rent, anchored on 1 March.
        ledger.set_clock(Some(t("2027-03-21T00:00:00Z")));
        let interim = ledger
            .issuance()
            .invoices(
                "acme",
                period("2027-03-01T00:00:00Z", "2027-03-16T00:00:00Z"),
            )
            .unwrap()
            .remove(0);
        assert_eq!(
            lines_of(&interim)
                .into_iter()
                .map(|(k, _, net)| (k, net))
                .collect::<Vec<_>>(),
            [("gpu", money(18_500)), ("fee", money(310_000))]
        );
        // Once March has closed, the scheduled run issues the rest of it (its usage and the
        // IPs in arrears), once; April is not closed yet.
        ledger.set_clock(Some(t("2027-04-01T01:00:00Z")));
        let run = ledger.issuance().due_contract_invoices().unwrap();
        assert!(run.failed.is_empty(), "{:?}", run.failed);
        let rest: Vec<(Period, String)> = run
            .issued
            .iter()
            .map(|i| (i.period, i.total.to_string()))
            .collect();
        assert_eq!(
            rest,
            [(
                period("2027-03-16T00:00:00Z", "2027-04-01T00:00:00Z"),
                money(18_500 + 1_000)
            )]
        );
        let again = ledger.issuance().due_contract_invoices().unwrap();
        assert!(again.issued.is_empty() && again.failed.is_empty());
        for inv in [&interim, &run.issued[0]] {
            let doc = InvoiceDoc::from(inv.clone());
            assert_eq!(recompute_invoice(&ledger, &doc, |_| {}).unwrap(), doc);
        }
        let size = size_of(&ledger);
        assert_eq!(verified(&db.url).size, size, "verify-log passes the log");
    }
);

both_backends!(
    serve_issues_each_closed_billing_period_once_across_restarts,
    |db: &TestDb| {
        let log = init(db);
        let srv = log.serve_with(&["--invoice-close-seconds", "0"]);
        let h = srv.http();
        let admin = log.admin.clone();
        let a = Some(admin.as_str());
        h.parties(&admin, &["acme"]);
        // A short contract that has just ended (its one billing period, the whole term,
        // closes at once with a close margin of 0): a setup fee once.
        let now = Timestamp::now();
        let body = serde_json::json!({
            "tenant": "acme", "contract": "C-short", "currency": "CNY", "region": "west",
            "term_from": now.plus(-120).to_string(), "term_to": now.plus(2).to_string(),
            "billing_period": "month", "billing_anchor": "calendar",
            "fees": [{"name": "Setup", "amount": "500", "timing": "once", "category": "support"}]
        });
        h.post("/v1/contracts", a, &body).ok_json(201);
        let invoices = || {
            h.get("/v1/invoices?tenant=acme", a)
                .ok_json(200)
                .as_array()
                .unwrap()
                .clone()
        };
        let started = std::time::Instant::now();
        while invoices().is_empty() {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "serve issued no contract invoice"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        let issued = invoices();
        assert_eq!(issued.len(), 1, "{issued:?}");
        assert_eq!(issued[0]["total"], "500.00", "{issued:?}");
        // Restarted, the server issues nothing more.
        drop(srv);
        let srv = log.serve_with(&["--invoice-close-seconds", "0"]);
        let h = srv.http();
        std::thread::sleep(std::time::Duration::from_secs(3));
        let again = h
            .get("/v1/invoices?tenant=acme", a)
            .ok_json(200)
            .as_array()
            .unwrap()
            .len();
        assert_eq!(again, 1);
        let size = h.size();
        drop(srv);
        log.assert_verifies(size);
    }
);
