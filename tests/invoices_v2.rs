//! Invoices accounting accepts (issue #16 item 2), on both backends: version 2 documents
//! (GPU-hours, tax per region, issuer and bill-to, terms) recomputed from their bundles with
//! every forged figure named; version 1 documents still verified; payments above the open
//! balance refused unless their excess becomes credit; invoice numbers gapless when an issue
//! fails part-way and under concurrent issuance.

mod common;

use common::*;
use gpuledger::core::bundle;
use gpuledger::core::invoice::{from_json, InvoiceDoc, Issuer, Period, Tax, TaxTable};
use gpuledger::core::rating::LeaseClass;
use gpuledger::core::record::{Body, RateCard, Role, Settlement, TenantRegistered};
use gpuledger::core::time::Timestamp;
use gpuledger::store::invoices::{self, AccountStatus, InvoiceSettings};
use gpuledger::store::{access, Ledger, StoreError};

const NODES: [&str; 1] = ["node-1"];

fn day(n: i64) -> Period {
    Period {
        from: at(n * 86_400),
        to: at((n + 1) * 86_400),
    }
}

fn vat() -> InvoiceSettings {
    let mut taxes = TaxTable::default();
    taxes.by_region.insert(
        "west".into(),
        Tax {
            name: Some("VAT".into()),
            rate: dec("0.06"),
        },
    );
    InvoiceSettings {
        issuer: Issuer {
            name: "示例算力科技有限公司".into(),
            address: vec!["北京市海淀区中关村大街 1 号".into()],
            tax_id: Some("91110108000000000X".into()),
            email: None,
        },
        payment_terms_days: 14,
        taxes,
        public_url: Some("https://ledger.example.org".into()),
    }
}

/// GPUs of node-1's 16 H100s each tenant leases: six tenants' leases fit the node.
const LEASED_H100S: u32 = 2;

/// A ledger with tenants (accounts and log registrations, each with an on-demand lease
/// `lease-<tenant>` of [`LEASED_H100S`] H100s of node-1, which its records name), a west rate
/// card of 18.5/GPU-h and the node's key. The rate card is logged as it takes effect, a day
/// before the records (no price may take effect in the past); then the ledger's clock is the
/// real one.
fn ledger_with(db: &TestDb, tenants: &[&str]) -> (Ledger, ed25519_dalek::SigningKey) {
    let ledger = open_at(db, at(-86_400));
    ensure_node_in(&ledger, "node-1", "west");
    let node = signer_for(&ledger, "node-1", Role::Node, &NODES);
    for t in tenants {
        ledger
            .append_ledger_entry(Body::TenantRegistered(TenantRegistered {
                tenant: (*t).into(),
            }))
            .unwrap();
        lease_with(
            &ledger,
            &gpuledger::sample::lease(t),
            t,
            LeaseClass::OnDemand,
            &[("node-1", "H100", LEASED_H100S)],
        );
    }
    ledger
        .with_account_writer(|c| {
            for t in tenants {
                if access::get_tenant(c, t)?.is_none() {
                    access::create_tenant(c, t, t)?;
                }
            }
            Ok(())
        })
        .unwrap();
    ledger
        .append_ledger_entry(Body::RateCard(RateCard {
            region: "west".into(),
            gpu_model: "H100".into(),
            lease_class: LeaseClass::OnDemand,
            currency: "CNY".into(),
            price_per_gpu_hour: dec("18.5"),
            effective_from: at(-86_400),
        }))
        .unwrap();
    ledger.set_clock(None);
    (ledger, node)
}

/// `seconds` GPU-seconds of `tenant` on day `d` (one H100 under its lease), as record `seq`.
fn use_gpu(
    ledger: &Ledger,
    node: &ed25519_dalek::SigningKey,
    tenant: &str,
    seq: u64,
    d: i64,
    seconds: i64,
) {
    let start = d * 86_400 + seq as i64 * 1000;
    use_one_h100(ledger, node, (tenant, seq), start, start + seconds);
}

fn claim_mismatch(ledger: &Ledger, inv: &InvoiceDoc) -> String {
    let f = recompute_invoice(ledger, inv, |_| {}).unwrap_err();
    assert_eq!(f.reason, bundle::Reason::ClaimMismatch, "{f:?}");
    f.item
}

both_backends!(
    v2_invoice_is_taxed_addressed_and_recomputed,
    |db: &TestDb| {
        let (ledger, node) = ledger_with(db, &["acme"]);
        ledger.set_invoicing(vat());
        ledger
            .with_account_writer(|c| {
                access::update_tenant(
                    c,
                    "acme",
                    Some("蓝鳍实验室"),
                    Some(&["上海市浦东新区张江路 88 号".to_owned()]),
                )
            })
            .unwrap();
        // 656 GPU-seconds at 18.5 per GPU-hour: 0.182222 GPU-h, net 3.37, VAT 0.20, gross 3.57.
        use_gpu(&ledger, &node, "acme", 1, 0, 656);
        let issued = ledger.issuance().invoices("acme", day(0)).unwrap();
        let inv = &issued[0];
        assert_eq!(inv.format, "gpuledger-invoice/v2");
        let l = &inv.lines[0];
        assert_eq!(
            (
                l.quantity.to_string(),
                l.unit.as_str(),
                l.gpu_seconds.map(|s| s.to_string()),
                l.unit_price.to_string()
            ),
            (
                "0.182222".into(),
                "GPU-h",
                Some("656".into()),
                "18.5".into()
            )
        );
        assert_eq!(l.description, "GPU compute, H100, west, on-demand");
        assert_eq!(
            (
                l.net.to_string(),
                l.tax_name.as_deref(),
                l.tax_rate.to_string(),
                l.tax.to_string(),
                l.gross.to_string()
            ),
            (
                "3.37".into(),
                Some("VAT"),
                "0.06".into(),
                "0.20".into(),
                "3.57".into()
            )
        );
        assert_eq!(
            (
                inv.net_total.to_string(),
                inv.tax_total.to_string(),
                inv.total.to_string()
            ),
            ("3.37".into(), "0.20".into(), "3.57".into())
        );
        assert_eq!(inv.issuer.name, "示例算力科技有限公司");
        assert_eq!(
            (inv.bill_to.name.as_str(), inv.bill_to.address.len()),
            ("蓝鳍实验室", 1)
        );
        assert_eq!(inv.payment_terms_days, 14);
        assert_eq!(inv.due_at.unix() - inv.issued_at.unix(), 14 * 86_400);
        // The log's entry records the gross total; the stored JSON reads back as this document.
        let (_, json) = ledger
            .reads()
            .run(|c| invoices::get(c, &inv.number))
            .unwrap()
            .unwrap();
        let doc = from_json(&json).unwrap();
        assert_eq!(doc, InvoiceDoc::V2(inv.clone()));
        verified(&db.url);

        // The bundle recomputes it exactly; every forged figure is named.
        assert_eq!(recompute_invoice(&ledger, &doc, |_| {}), Ok(doc.clone()));
        let forge = |f: &dyn Fn(&mut gpuledger::core::invoice::Invoice)| {
            let mut i = inv.clone();
            f(&mut i);
            InvoiceDoc::V2(i)
        };
        assert_eq!(
            claim_mismatch(&ledger, &forge(&|i| i.lines[0].tax = dec("0.21"))),
            "lines[0].tax"
        );
        assert_eq!(
            claim_mismatch(&ledger, &forge(&|i| i.lines[0].gross = dec("3.58"))),
            "lines[0].gross"
        );
        assert_eq!(
            claim_mismatch(&ledger, &forge(&|i| i.lines[0].quantity = dec("656"))),
            "lines[0].quantity"
        );
        assert_eq!(
            claim_mismatch(&ledger, &forge(&|i| i.tax_total = dec("0.00"))),
            "tax_total"
        );
        assert_eq!(
            claim_mismatch(&ledger, &forge(&|i| i.net_total = dec("3.36"))),
            "net_total"
        );
        assert_eq!(
            claim_mismatch(&ledger, &forge(&|i| i.total = dec("3.37"))),
            "total"
        );
        assert_eq!(
            claim_mismatch(&ledger, &forge(&|i| i.due_at = i.issued_at)),
            "due_at"
        );
        // A declared rate is the issuer's: a consistent invoice at another rate recomputes.
        let mut other_rate = inv.clone();
        other_rate.lines[0].tax_rate = dec("0.13");
        other_rate.lines[0].tax = dec("0.44");
        other_rate.lines[0].gross = dec("3.81");
        other_rate.tax_total = dec("0.44");
        other_rate.total = dec("3.81");
        let other_rate = InvoiceDoc::V2(other_rate);
        assert_eq!(
            recompute_invoice(&ledger, &other_rate, |_| {}),
            Ok(other_rate.clone())
        );
    }
);

// Invoices issued before version 2 are in existing logs; they must keep verifying. A version
// 1 document of the same usage (GPU-seconds, `amount`, no tax) recomputes by the old rules.
both_backends!(version_1_invoices_still_verify, |db: &TestDb| {
    let (ledger, node) = ledger_with(db, &["acme"]);
    use_gpu(&ledger, &node, "acme", 1, 0, 656);
    let inv = ledger
        .issuance()
        .invoices("acme", day(0))
        .unwrap()
        .remove(0);
    let v1 = format!(
        r#"{{"checkpoint_root":"{}","checkpoint_size":{},"currency":"CNY","issued_at":"{}","lines":[{{"amount":"3.37","class":"on_demand","gpu_model":"H100","kind":"gpu","quantity":"656","records":1,"region":"west","unit":"GPU-s","unit_price":"18.5"}}],"log_origin":"{}","number":"{}","period":{{"from":"{}","to":"{}"}},"tenant":"acme","total":"3.37"}}"#,
        inv.checkpoint_root,
        inv.checkpoint_size,
        inv.issued_at,
        inv.log_origin,
        inv.number,
        inv.period.from,
        inv.period.to
    );
    let doc = from_json(&v1).unwrap();
    assert!(matches!(doc, InvoiceDoc::V1(_)));
    assert_eq!(recompute_invoice(&ledger, &doc, |_| {}), Ok(doc.clone()));
    let forged = from_json(&v1.replace("\"3.37\"", "\"3.38\"")).unwrap();
    assert_eq!(claim_mismatch(&ledger, &forged), "lines[0].amount");
});

both_backends!(
    overpayment_is_refused_unless_it_becomes_credit,
    |db: &TestDb| {
        let (ledger, node) = ledger_with(db, &["acme"]);
        use_gpu(&ledger, &node, "acme", 1, 0, 656);
        let inv = ledger
            .issuance()
            .invoices("acme", day(0))
            .unwrap()
            .remove(0);
        assert_eq!(inv.total.to_string(), "3.37");
        let pay = |amount: &str| {
            Body::Payment(Settlement {
                tenant: "acme".into(),
                invoice: inv.number.clone(),
                currency: "CNY".into(),
                amount: dec(amount),
                note: "wire 7731".into(),
                external_reference: None,
            })
        };
        let size = ledger.reads().head().unwrap().0;
        match ledger.issuance().settle(pay("148.00")) {
            Err(StoreError::Overpayment { open, .. }) => assert_eq!(open.to_string(), "3.37"),
            other => panic!("{other:?}"),
        }
        assert_eq!(ledger.reads().head().unwrap().0, size, "nothing written");
        ledger.issuance().settle(pay("1.00")).unwrap();
        let account = |l: &Ledger| {
            l.reads()
                .run(|c| invoices::account(c, &inv.number, l.now()))
                .unwrap()
        };
        let a = account(&ledger);
        assert_eq!(
            (a.paid.to_string(), a.balance_due.to_string(), a.status),
            ("1.00".into(), "2.37".into(), AccountStatus::Open)
        );
        // Above the open balance of 2.37: refused, naming it; with excess=credit recorded.
        assert!(matches!(
            ledger.issuance().settle(pay("2.38")),
            Err(StoreError::Overpayment { open, .. }) if open == dec("2.37")
        ));
        ledger
            .issuance()
            .settle_with_excess(pay("5.00"), true)
            .unwrap();
        let a = account(&ledger);
        assert_eq!(
            (
                a.paid.to_string(),
                a.balance_due.to_string(),
                a.excess.to_string(),
                a.status
            ),
            (
                "6.00".into(),
                "0.00".into(),
                "2.63".into(),
                AccountStatus::Overpaid
            )
        );
        assert_eq!(a.settlements.len(), 2);
        assert_eq!(a.settlements[1].note, "wire 7731");
        let b = ledger
            .reads()
            .run(|c| invoices::balances(c, "acme"))
            .unwrap();
        let cny = &b.by_currency["CNY"];
        assert_eq!(
            (cny.due.to_string(), cny.credit.to_string()),
            ("-2.63".into(), "2.63".into())
        );
        // An exact payment of the rest is fine, and then the invoice is paid.
        let inv2 = {
            use_gpu(&ledger, &node, "acme", 2, 1, 3600);
            ledger
                .issuance()
                .invoices("acme", day(1))
                .unwrap()
                .remove(0)
        };
        let pay2 = Body::Payment(Settlement {
            invoice: inv2.number.clone(),
            amount: inv2.total,
            ..match pay("1") {
                Body::Payment(s) => s,
                _ => unreachable!(),
            }
        });
        ledger.issuance().settle(pay2).unwrap();
        let a2 = ledger
            .reads()
            .run(|c| invoices::account(c, &inv2.number, ledger.now()))
            .unwrap();
        assert_eq!(a2.status, AccountStatus::Paid);
        let listed = ledger
            .reads()
            .run(|c| invoices::list(c, Some("acme")))
            .unwrap();
        assert_eq!(
            listed.iter().map(|s| s.status).collect::<Vec<_>>(),
            [AccountStatus::Overpaid, AccountStatus::Paid]
        );
        // The admin's list of every tenant reads the same accounts.
        let all = ledger.reads().run(|c| invoices::list(c, None)).unwrap();
        assert_eq!(
            all.iter()
                .map(|s| (s.number.clone(), s.paid, s.balance_due, s.status))
                .collect::<Vec<_>>(),
            listed
                .iter()
                .map(|s| (s.number.clone(), s.paid, s.balance_due, s.status))
                .collect::<Vec<_>>()
        );
        verified(&db.url);
    }
);

fn numbers(ledger: &Ledger) -> Vec<String> {
    ledger
        .reads()
        .run(|c| invoices::list(c, None))
        .unwrap()
        .into_iter()
        .map(|s| s.number)
        .collect()
}

fn expected(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("INV-{i:06}")).collect()
}

both_backends!(
    numbers_stay_gapless_when_an_issue_fails_part_way,
    |db: &TestDb| {
        let (ledger, node) = ledger_with(db, &["acme", "beta"]);
        use_gpu(&ledger, &node, "acme", 1, 0, 3600);
        use_gpu(&ledger, &node, "beta", 2, 0, 3600);
        // Fails inside the issuing transaction, after the head lock and the checkpoint: the due
        // date of these terms is past year 9999. Nothing is written, no number is used.
        let mut far = vat();
        far.payment_terms_days = u32::MAX;
        ledger.set_invoicing(far);
        let size = ledger.reads().head().unwrap().0;
        assert!(matches!(
            ledger.issuance().invoices("acme", day(0)),
            Err(StoreError::Refused(m)) if m.contains("9999")
        ));
        assert_eq!(ledger.reads().head().unwrap().0, size);
        ledger.set_invoicing(vat());
        // Between computing and issuing, another invoice is issued (the hook): the first attempt
        // is overtaken, recomputed, and takes the next number.
        let l2 = std::sync::Arc::new(ledger);
        let inner = l2.clone();
        invoices::set_issue_hook(Some(Box::new(move |attempt| {
            if attempt == 1 {
                invoices::set_issue_hook(None);
                inner.issuance().invoices("beta", day(0)).unwrap();
            }
        })));
        let acme = l2.issuance().invoices("acme", day(0)).unwrap();
        invoices::set_issue_hook(None);
        assert_eq!(acme[0].number, "INV-000002");
        // An issue refused (the period is invoiced already) uses no number either.
        assert!(matches!(
            l2.issuance().invoices("acme", day(0)),
            Err(StoreError::AlreadyExists(_))
        ));
        use_gpu(&l2, &node, "acme", 3, 1, 3600);
        assert_eq!(
            l2.issuance().invoices("acme", day(1)).unwrap()[0].number,
            "INV-000003"
        );
        assert_eq!(numbers(&l2), expected(3));
        // Each number's document names the number its log entry names.
        for n in expected(3) {
            let (_, json) = l2.reads().run(|c| invoices::get(c, &n)).unwrap().unwrap();
            assert_eq!(from_json(&json).unwrap().number(), n);
        }
        verified(&db.url);
    }
);

both_backends!(
    numbers_stay_gapless_under_concurrent_issuance,
    |db: &TestDb| {
        let tenants = ["t1", "t2", "t3", "t4", "t5", "t6"];
        let (ledger, node) = ledger_with(db, &tenants);
        for (i, t) in tenants.iter().enumerate() {
            use_gpu(&ledger, &node, t, i as u64 + 1, 0, 600);
        }
        let ledger = std::sync::Arc::new(ledger);
        let threads: Vec<_> = tenants
            .iter()
            .map(|t| {
                let l = ledger.clone();
                let t = t.to_string();
                std::thread::spawn(move || {
                    // Busy (the log kept changing) is an answer to retry, as clients do.
                    loop {
                        match l.issuance().invoices(&t, day(0)) {
                            Err(StoreError::Busy(_)) => continue,
                            r => break r.unwrap(),
                        }
                    }
                })
            })
            .collect();
        let mut got: Vec<String> = threads
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .map(|i| i.number)
            .collect();
        got.sort();
        assert_eq!(got, expected(tenants.len()));
        assert_eq!(numbers(&ledger), expected(tenants.len()));
        verified(&db.url);
    }
);

// An invoice is for a period that has closed (ended by the log policy's skew): one still open,
// or ended by less than the skew, is refused (and writes nothing), since its rest would arrive
// late and a spot price published on time inside it would be refused.
both_backends!(an_open_period_is_not_invoiced, |db: &TestDb| {
    let (ledger, node) = ledger_with(db, &["acme"]);
    use_gpu(&ledger, &node, "acme", 1, 0, 656);
    let now = Timestamp::now();
    let size = ledger.reads().size().unwrap();
    let open = Period {
        from: at(0),
        to: now.plus(3_600),
    };
    match ledger.issuance().invoices("acme", open) {
        Err(StoreError::PeriodNotEnded { to, .. }) => assert_eq!(to, open.to),
        other => panic!("an open period was invoiced: {other:?}"),
    }
    assert_eq!(ledger.reads().size().unwrap(), size, "nothing written");
    assert!(numbers(&ledger).is_empty());
    // Ended, but less than the policy's skew (300 s) ago: a spot price of its last minutes may
    // still be published on time, so it is not closed yet, and says from when it is.
    let ending = Period {
        from: at(0),
        to: ledger.now().plus(-299),
    };
    match ledger.issuance().invoices("acme", ending) {
        Err(StoreError::PeriodNotEnded { to, closes_at, .. }) => {
            assert_eq!(to, ending.to);
            assert_eq!(closes_at, ending.to.plus(300));
        }
        other => panic!("a period ended 299 s ago was invoiced: {other:?}"),
    }
    assert_eq!(ledger.reads().size().unwrap(), size, "nothing written");
    // Ended by the skew or more: closed.
    let closed = Period {
        from: at(0),
        to: ledger.now().plus(-300),
    };
    assert_eq!(ledger.issuance().invoices("acme", closed).unwrap().len(), 1);
    verified(&db.url);
});
