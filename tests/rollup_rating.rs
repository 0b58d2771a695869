//! Issue #28, rating from the usage rollups, on SQLite and PostgreSQL: an invoice preview read
//! from the rollups' whole buckets (and the records of the others) is exactly the preview of
//! every record one by one, lines, unpriced usage, exclusions, SLA presence and included hours
//! alike, at the head and at an earlier log size (records stored since are taken out of their
//! buckets again); the buckets a price change, a contract's term, an SLA's billing period, an
//! exclusion or a change of region parameters cuts are rated record by record, the others
//! whole; and an invoice issued from them recomputes from its bundle's records.

mod common;

use common::billing::{acme_invoice, acme_on_h100, acme_usage, acme_usage_logged_at, sla_99_9, t};
use common::*;
use gpuledger::core::invoice::{InvoiceDoc, InvoiceRating, InvoiceScope, Period, Rated};
use gpuledger::core::record::{
    BillingAnchor, BillingPeriod, Body, ContractFee, ContractRegistered, Energy, FeeCategory,
    FeeTiming, Included, RateCard, RecordExcluded, RegionParameters,
};
use gpuledger::core::time::Timestamp;
use gpuledger::core::usage::RollupKey;
use gpuledger::store::{invoices, pricing, read, rollups, usage, Ledger};
use std::collections::BTreeMap;

/// acme's contract from 1 January 2027 05:05 for two months by anniversary month: 20 000 a
/// month for its lease of two H100s, 1 000 H100-hours included (9.50 above), 99.9 % SLA.
fn contract() -> ContractRegistered {
    ContractRegistered {
        tenant: "acme".into(),
        contract: "C-rollups".into(),
        currency: "CNY".into(),
        region: "west".into(),
        term_from: t("2027-01-01T05:05:00Z"),
        term_to: t("2027-03-01T05:05:00Z"),
        billing_period: BillingPeriod::Month,
        billing_anchor: BillingAnchor::Anniversary,
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
        sla: Some(sla_99_9()),
    }
}

/// The scope of a preview of `period` at `size`, and the measurement of acme's contracts.
fn scope_and_measurement(
    c: &mut gpuledger::store::DbConn,
    period: Period,
    size: u64,
) -> Result<(InvoiceScope, gpuledger::core::invoice::Measurement), gpuledger::store::StoreError> {
    let contracts = read::contracts(c, "acme", size)?;
    let measurement = read::measurement(c, "acme", &contracts, period, size)?;
    let excluded = read::exclusions(c, "acme", size)?
        .into_iter()
        .map(|(entry, (_, reason))| (entry, reason));
    Ok((
        InvoiceScope::new(period, []).excluding(excluded),
        measurement,
    ))
}

/// acme's preview of `period` at log size `size` both ways: the ledger's (rollups), and every
/// record one by one through the same core rule. Decimals compare by value: a sum read from
/// the rollups has 9 places where the records' sum may have fewer, and documents write every
/// decimal normalized (`core::decimal`).
fn both(ledger: &Ledger, period: Period, size: u64) -> (Rated, Rated) {
    ledger
        .reads()
        .run(|c| {
            let (scope, measurement) = scope_and_measurement(c, period, size)?;
            let fast = invoices::preview(c, "acme", period, size, measurement.clone())?;
            let book = pricing::price_book(c, size)?;
            let mut slow = InvoiceRating::new(scope).measuring(measurement);
            let idxs = usage::starting_in(c, "acme", period.from, period.to, size)?;
            usage::for_each_of(c, Some("acme"), &idxs, &mut |i, _, _, b| {
                slow.add(&book, i, b);
            })?;
            Ok((fast, slow.finish()))
        })
        .unwrap()
}

/// Per bucket of acme's in `period` at `size`: whether the rating takes it whole.
fn taken_whole(ledger: &Ledger, period: Period, size: u64) -> BTreeMap<RollupKey, bool> {
    ledger
        .reads()
        .run(|c| {
            let (scope, measurement) = scope_and_measurement(c, period, size)?;
            let book = pricing::price_book(c, size)?;
            let excluded: Vec<Body> = scope
                .excluded
                .keys()
                .map(|i| {
                    let mut body = None;
                    let sel = usage::logged_in(c, "acme", *i..*i + 1).unwrap();
                    usage::for_each_of(c, Some("acme"), &[sel[0].0], &mut |_, _, _, b| {
                        body = Some(b.clone())
                    })
                    .unwrap();
                    body.unwrap()
                })
                .collect();
            let mut rating = InvoiceRating::new(scope)
                .measuring(measurement)
                .excluded_bodies(&excluded);
            let buckets = rollups::buckets_at(c, "acme", period.from, period.to, size)?
                .expect("the rollups hold the log");
            Ok(buckets
                .into_iter()
                .map(|(k, s)| {
                    let whole = rating.add_bucket(&book, &k, &s);
                    (k, whole)
                })
                .collect())
        })
        .unwrap()
}

/// Whether the bucket of `kind` of the hour starting at `hour` was taken whole.
fn whole_at(taken: &BTreeMap<RollupKey, bool>, kind: &str, hour: &str) -> bool {
    let h = t(hour).unix();
    let found: Vec<bool> = taken
        .iter()
        .filter(|(k, _)| k.hour == h && k.kind == kind)
        .map(|(_, w)| *w)
        .collect();
    assert_eq!(found.len(), 1, "one {kind} bucket at {hour}: {taken:?}");
    found[0]
}

both_backends!(
    previews_and_invoices_from_the_rollups_are_those_of_the_records,
    |db: &TestDb| {
        let ledger = open_at(db, t("2027-01-01T00:00:00Z"));
        let node = acme_on_h100(&ledger);
        // The H100 costs 20.00 from 03:30 on the first day; electricity changes at 12:15 on the
        // third.
        ledger
            .append_ledger_entry(Body::RateCard(RateCard {
                region: "west".into(),
                gpu_model: "H100".into(),
                lease_class: gpuledger::core::rating::LeaseClass::OnDemand,
                currency: "CNY".into(),
                price_per_gpu_hour: dec("20"),
                effective_from: t("2027-01-01T03:30:00Z"),
            }))
            .unwrap();
        for (price, from) in [
            ("0.28", "2027-01-01T00:00:00Z"),
            ("0.31", "2027-01-03T12:15:00Z"),
        ] {
            ledger
                .append_ledger_entry(Body::RegionParams(RegionParameters {
                    region: "west".into(),
                    currency: "CNY".into(),
                    electricity_price_per_kwh: dec(price),
                    pue: dec("1.08"),
                    carbon_g_per_kwh: dec("550"),
                    effective_from: t(from),
                }))
                .unwrap();
        }
        ledger
            .append_ledger_entry(Body::ContractRegistered(contract()))
            .unwrap();

        // Both GPUs in 50-minute records from 1 January to 2 February, but for six hours on
        // 12 January (logged late, at the end); energy every 10 minutes around 12:15 on the 3rd.
        let (gap_from, gap_to) = (t("2027-01-12T00:00:00Z"), t("2027-01-12T06:00:00Z"));
        let mut seq = 0;
        let mut at = t("2027-01-01T00:00:00Z");
        let mut excluded_start = None;
        let energy_from = t("2027-01-03T11:40:00Z");
        let mut energy_at = energy_from;
        while at < t("2027-02-02T00:00:00Z") {
            let end = at.plus(3000);
            while energy_at.plus(600) <= end && energy_at < energy_from.plus(6 * 600) {
                ledger.set_clock(Some(energy_at.plus(600)));
                seq += 1;
                let body = Body::Energy(Energy {
                    tenant: Some("acme".into()),
                    region: "west".into(),
                    node: "node-1".into(),
                    start: energy_at,
                    end: energy_at.plus(600),
                    kwh: dec("0.123456789"),
                });
                assert_accepted(
                    &ledger
                        .append(vec![signed("node-1", &node, seq, &body)])
                        .unwrap(),
                );
                energy_at = energy_at.plus(600);
            }
            if end <= gap_from || at >= gap_to {
                seq += 1;
                acme_usage(&ledger, &node, seq, at, end, 2);
                if excluded_start.is_none() && at >= t("2027-01-20T00:00:00Z") {
                    excluded_start = Some((at, ledger.reads().head().unwrap().0 - 1));
                }
            }
            at = end;
        }
        let (excluded_at, excluded_entry) = excluded_start.unwrap();
        ledger
            .append_ledger_entry(Body::RecordExcluded(RecordExcluded {
                tenant: "acme".into(),
                entry: excluded_entry,
                reason: "counted twice".into(),
            }))
            .unwrap();
        let before_late = ledger.reads().head().unwrap().0;
        // The gap's records, late: the eight 50-minute slots from 23:20 to 06:00.
        let mut gap_at = t("2027-01-11T23:20:00Z");
        while gap_at < gap_to {
            seq += 1;
            let end = gap_at.plus(3000);
            acme_usage_logged_at(
                &ledger,
                &node,
                seq,
                (gap_at, end),
                2,
                t("2027-02-02T01:00:00Z"),
            );
            gap_at = end;
        }
        let head = ledger.reads().head().unwrap().0;

        // The anniversary month (SLA and included hours judged), a month of calendar days,
        // hours off the hour, and the first hours before the term.
        let periods = [
            ("2027-01-01T05:05:00Z", "2027-02-01T05:05:00Z"),
            ("2027-01-01T00:00:00Z", "2027-02-02T00:00:00Z"),
            ("2027-01-01T00:00:00Z", "2027-01-01T07:00:00Z"),
            ("2027-01-03T11:17:00Z", "2027-01-12T03:01:01Z"),
        ];
        for size in [head, before_late, before_late - 40] {
            for (from, to) in periods {
                let period = Period {
                    from: t(from),
                    to: t(to),
                };
                let (fast, slow) = both(&ledger, period, size);
                assert_eq!(fast, slow, "[{from}, {to}) at size {size}");
            }
        }

        // Which buckets were taken whole: not those a change cuts.
        let month = Period {
            from: t("2027-01-01T00:00:00Z"),
            to: t("2027-02-02T00:00:00Z"),
        };
        let taken = taken_whole(&ledger, month, head);
        assert!(whole_at(&taken, "gpu_usage", "2027-01-01T02:00:00Z"));
        // The record 03:20–04:10 crosses the price change at 03:30.
        assert!(!whole_at(&taken, "gpu_usage", "2027-01-01T03:00:00Z"));
        // The term, its billing period and the SLA's start at 05:05.
        assert!(!whole_at(&taken, "gpu_usage", "2027-01-01T05:00:00Z"));
        assert!(whole_at(&taken, "gpu_usage", "2027-01-01T06:00:00Z"));
        assert!(whole_at(&taken, "gpu_usage", "2027-01-12T01:00:00Z"));
        let excluded_hour = excluded_at.unix() - excluded_at.unix().rem_euclid(3600);
        let excluded_hour = Timestamp::from_unix(excluded_hour).unwrap().to_string();
        assert!(!whole_at(&taken, "gpu_usage", &excluded_hour));
        // The next billing period starts at 05:05 on 1 February, which the record 04:20–05:10
        // runs past: the SLA counts it only to 05:05.
        assert!(!whole_at(&taken, "gpu_usage", "2027-02-01T05:00:00Z"));
        assert!(!whole_at(&taken, "gpu_usage", "2027-02-01T04:00:00Z"));
        assert!(whole_at(&taken, "gpu_usage", "2027-02-01T03:00:00Z"));
        assert!(whole_at(&taken, "energy", "2027-01-03T11:00:00Z"));
        assert!(!whole_at(&taken, "energy", "2027-01-03T12:00:00Z"));
        let whole = taken.values().filter(|w| **w).count();
        assert!(
            whole * 100 >= taken.len() * 95,
            "{whole} of {} buckets taken whole",
            taken.len()
        );

        // January's anniversary month issued from the rollups recomputes from its bundle.
        let inv = acme_invoice(
            &ledger,
            "2027-02-02T02:00:00Z",
            ("2027-01-01T05:05:00Z", "2027-02-01T05:05:00Z"),
        );
        assert!(inv
            .availability
            .iter()
            .any(|a| a.lease == gpuledger::sample::lease("acme")));
        let doc = InvoiceDoc::from(inv.clone());
        assert_eq!(recompute_invoice(&ledger, &doc, |_| {}).unwrap(), doc);
    }
);
