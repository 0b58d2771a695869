//! Included GPU-hours and overage (docs/RATING.md, "Included GPU-hours and overage"): a
//! contract fee that rents a lease and includes GPU-hours of GPU models prices that lease's
//! GPU time of those models instead of the rate card.
//!
//! One rule, used by the ledger to issue and preview invoices and by `gpuledger verify
//! --invoice` to recompute them from a bundle:
//! - a usage record is **contract-priced** when a fee of one of its tenant's contracts rents
//!   its lease and includes its model, and it starts in that contract's term
//!   ([`Metering::prices`]); such a record makes no rate-card line;
//! - per billing period B, fee and included entry, the **allowance** is the entry's GPU-hours
//!   prorated to B ([`allowance_seconds`]), **used** is Σ `gpu_seconds` of the contract-priced
//!   records the invoice rates in its own period that start in B, and what is above the
//!   allowance is billed at the entry's `overage_rate` ([`judge`]);
//! - a contract-priced record an invoice rates as late counts toward no allowance: its
//!   GPU-seconds are overage of the earlier period ([`late`]).

use crate::contract::{billing_periods, BillingSpan};
use crate::invoice::Period;
use crate::record::{ContractRegistered, GpuUsage};
use crate::sla::span_at;
use crate::time::Timestamp;
use rust_decimal::{Decimal, RoundingStrategy};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Places an allowance in GPU-seconds is rounded to, half-even.
pub const ALLOWANCE_DECIMALS: u32 = 6;

/// An included entry of a contract: (contract id, fee index, entry index).
type EntryKey = (String, usize, usize);

/// The term `[from, to)` of a contract and which of its included entries prices a lease and
/// model over it.
type PricedTerm = (Timestamp, Timestamp, EntryKey);

/// GPU-seconds and how many records make them up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Used {
    pub gpu_seconds: Decimal,
    pub records: u64,
}

impl Used {
    fn add(&mut self, u: &GpuUsage) {
        self.gpu_seconds += u.gpu_seconds;
        self.records += 1;
    }
}

/// One included entry's use over one billing period, as an invoice states it (its
/// `allowances` member).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Allowance {
    pub contract: String,
    pub lease: String,
    pub gpu_model: String,
    /// The billing period (clipped to the term).
    pub period: Period,
    /// The entry's GPU-hours × 3600 × used ÷ full seconds of the period, rounded half-even to
    /// 6 places.
    #[serde(with = "crate::invoice::decimal_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub included_gpu_seconds: Decimal,
    /// Σ `gpu_seconds` of the contract-priced records the invoice rates that start in the
    /// period.
    #[serde(with = "crate::invoice::decimal_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub used_gpu_seconds: Decimal,
    /// max(0, used − included): billed at the entry's `overage_rate`.
    #[serde(with = "crate::invoice::decimal_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub overage_gpu_seconds: Decimal,
}

/// One judged billing period of one included entry ([`judge`]): the invoice's row, the span,
/// the entry (fee and place in its `included`), what it covered and how many records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    pub span: BillingSpan,
    pub fee: usize,
    pub entry: usize,
    pub row: Allowance,
    /// min(used, included).
    pub covered: Decimal,
    pub records: u64,
}

/// The contract-priced GPU-seconds an invoice rates, per included entry: in its own period by
/// judged billing period, and late by the earlier invoiced period they belong to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metering {
    /// (lease, model) → the terms that price it, each with its entry.
    priced: BTreeMap<(String, String), Vec<PricedTerm>>,
    /// Entry → the billing periods watched (by start), with what the records used in each.
    own: BTreeMap<EntryKey, Vec<(Period, Used)>>,
    /// Entry → earlier invoiced period → what its late records used.
    late: BTreeMap<EntryKey, BTreeMap<Period, Used>>,
}

impl Metering {
    /// The metering of an invoice (or preview) of `period` for a tenant whose contracts (every
    /// currency) are `contracts`: every included entry prices its lease and model over its
    /// contract's term; the billing periods overlapping `period` are watched.
    pub fn new<'a>(
        contracts: impl IntoIterator<Item = &'a ContractRegistered>,
        period: Period,
    ) -> Self {
        let mut out = Metering::default();
        for c in contracts {
            let mut spans: Option<Vec<Period>> = None;
            for (i, f) in c.fees().iter().enumerate() {
                let Some(lease) = &f.lease else { continue };
                for (j, e) in f.included().iter().enumerate() {
                    let key: EntryKey = (c.contract.clone(), i, j);
                    out.priced
                        .entry((lease.clone(), e.gpu_model.clone()))
                        .or_default()
                        .push((c.term_from, c.term_to, key.clone()));
                    let spans = spans.get_or_insert_with(|| watched_spans(c, period));
                    out.own
                        .insert(key, spans.iter().map(|p| (*p, Used::default())).collect());
                }
            }
        }
        out
    }

    /// Whether nothing is contract-priced.
    pub fn is_empty(&self) -> bool {
        self.priced.is_empty()
    }

    /// The included entry that prices `u`, if any: its lease and model are included by a fee
    /// of a contract whose term holds its start.
    fn entry(&self, u: &GpuUsage) -> Option<&EntryKey> {
        self.entry_at(u.lease.as_deref()?, &u.gpu_model, u.start)
    }

    /// The included entry that prices usage of `lease` and `gpu_model` starting at `t`.
    fn entry_at(&self, lease: &str, gpu_model: &str, t: Timestamp) -> Option<&EntryKey> {
        self.terms(lease, gpu_model)
            .iter()
            .find(|(from, to, _)| *from <= t && t < *to)
            .map(|(_, _, k)| k)
    }

    /// The terms that price `lease` and `gpu_model`.
    fn terms(&self, lease: &str, gpu_model: &str) -> &[PricedTerm] {
        self.priced
            .get(&(lease.to_owned(), gpu_model.to_owned()))
            .map_or(&[], |v| v)
    }

    /// Whether `u` is contract-priced (it makes no rate-card line).
    pub fn prices(&self, u: &GpuUsage) -> bool {
        self.entry(u).is_some()
    }

    /// Counts a contract-priced record the invoice rates in its own period (`late`: `None`) or
    /// as a late record of the earlier period `late`; false (nothing counted) when `u` is not
    /// contract-priced.
    pub fn add(&mut self, u: &GpuUsage, late: Option<Period>) -> bool {
        let Some(key) = self.entry(u).cloned() else {
            return false;
        };
        match late {
            Some(p) => self
                .late
                .entry(key)
                .or_default()
                .entry(p)
                .or_default()
                .add(u),
            None => {
                let spans = self.own.entry(key).or_default();
                if let Some(i) = span_at(spans, u.start) {
                    spans[i].1.add(u);
                }
            }
        }
        true
    }

    /// Whether the usage records of `lease` and `gpu_model` starting in `[from, to)` are
    /// metered alike: the same included entry (or none) prices them all, and they fall in one
    /// of its watched billing periods (or in none). `Some(priced)` then, `None` otherwise.
    pub fn meters_alike(
        &self,
        lease: Option<&str>,
        gpu_model: &str,
        (from, to): (Timestamp, Timestamp),
    ) -> Option<bool> {
        let inside = |t: Timestamp| from < t && t < to;
        let Some(lease) = lease else {
            return Some(false);
        };
        let terms = self.terms(lease, gpu_model);
        if terms.iter().any(|(a, b, _)| inside(*a) || inside(*b)) {
            return None;
        }
        let Some(key) = self.entry_at(lease, gpu_model, from) else {
            return Some(false);
        };
        let spans = self.own.get(key).map_or(&[][..], |v| v);
        if spans.iter().any(|(p, _)| inside(p.from) || inside(p.to)) {
            return None;
        }
        Some(true)
    }

    /// Counts `records` contract-priced usage records of `lease` and `gpu_model` that
    /// [`Self::meters_alike`] found metered alike, starting at or after `from`, making
    /// `gpu_seconds`, in the invoice's own period: as [`Self::add`] would count them one by one.
    pub fn add_sum(
        &mut self,
        lease: &str,
        gpu_model: &str,
        from: Timestamp,
        gpu_seconds: Decimal,
        records: u64,
    ) {
        let Some(key) = self.entry_at(lease, gpu_model, from).cloned() else {
            return;
        };
        let spans = self.own.entry(key).or_default();
        if let Some(i) = span_at(spans, from) {
            spans[i].1.gpu_seconds += gpu_seconds;
            spans[i].1.records += records;
        }
    }

    fn own(&self, key: &EntryKey, span: Period) -> Used {
        self.own
            .get(key)
            .and_then(|s| s.iter().find(|(p, _)| *p == span))
            .map_or_else(Used::default, |(_, u)| *u)
    }
}

/// The billing periods of `c` (clipped to the term) that overlap `period`.
fn watched_spans(c: &ContractRegistered, period: Period) -> Vec<Period> {
    billing_periods(c)
        .into_iter()
        .map(|s| Period {
            from: s.from,
            to: s.to,
        })
        .filter(|p| p.overlaps(&period))
        .collect()
}

/// The allowance of `gpu_hours` over billing period `span`, in GPU-seconds: `gpu_hours` × 3600
/// × used ÷ full seconds, rounded half-even to [`ALLOWANCE_DECIMALS`] places.
pub fn allowance_seconds(gpu_hours: Decimal, span: &BillingSpan) -> Decimal {
    let used = Decimal::from(span.from.seconds_until(span.to));
    let full = Decimal::from(span.full_from.seconds_until(span.full_to));
    (gpu_hours * Decimal::from(3600) * used / full)
        .round_dp_with_strategy(ALLOWANCE_DECIMALS, RoundingStrategy::MidpointNearestEven)
        .normalize()
}

/// The included entries of `c` judged by an invoice (or preview) of `period`: per billing
/// period of `c` overlapping `period` (an invoice holds them whole), fee with a lease and
/// included entry, in that order, the allowance, what `metering` counted and the overage.
pub fn judge(c: &ContractRegistered, period: Period, metering: &Metering) -> Vec<Judged> {
    let mut out = Vec::new();
    for span in billing_periods(c) {
        let p = Period {
            from: span.from,
            to: span.to,
        };
        if !p.overlaps(&period) {
            continue;
        }
        for (i, f) in c.fees().iter().enumerate() {
            let Some(lease) = &f.lease else { continue };
            for (j, e) in f.included().iter().enumerate() {
                let used = metering.own(&(c.contract.clone(), i, j), p);
                let included = allowance_seconds(e.gpu_hours, &span);
                let covered = used.gpu_seconds.min(included);
                out.push(Judged {
                    span,
                    fee: i,
                    entry: j,
                    covered,
                    records: used.records,
                    row: Allowance {
                        contract: c.contract.clone(),
                        lease: lease.clone(),
                        gpu_model: e.gpu_model.clone(),
                        period: p,
                        included_gpu_seconds: included,
                        used_gpu_seconds: used.gpu_seconds.normalize(),
                        overage_gpu_seconds: (used.gpu_seconds - covered).normalize(),
                    },
                });
            }
        }
    }
    out
}

/// The late contract-priced records of `c`'s included entries: per earlier invoiced period
/// (ascending), fee and entry, (period, fee, entry, what they used).
pub fn late(c: &ContractRegistered, metering: &Metering) -> Vec<(Period, usize, usize, Used)> {
    let mut out: Vec<(Period, usize, usize, Used)> = metering
        .late
        .iter()
        .filter(|((contract, _, _), _)| *contract == c.contract)
        .flat_map(|((_, i, j), periods)| periods.iter().map(|(p, u)| (*p, *i, *j, *u)))
        .collect();
    out.sort_by_key(|(p, i, j, _)| (*p, *i, *j));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{
        BillingAnchor, BillingPeriod, ContractFee, FeeCategory, FeeTiming, Included,
    };

    fn t(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap()
    }

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    fn contract(from: &str, to: &str) -> ContractRegistered {
        ContractRegistered {
            tenant: "acme".into(),
            contract: "C-1".into(),
            currency: "CNY".into(),
            region: "west".into(),
            term_from: t(from),
            term_to: t(to),
            billing_period: BillingPeriod::Month,
            billing_anchor: BillingAnchor::Calendar,
            fees: Some(vec![ContractFee {
                name: "GPU".into(),
                amount: d("1000"),
                timing: FeeTiming::Advance,
                category: FeeCategory::Compute,
                lease: Some("L".into()),
                included: Some(vec![Included {
                    gpu_model: "H100".into(),
                    gpu_hours: d("10"),
                    overage_rate: d("9.50"),
                }]),
            }]),
            commitment: None,
            sla: None,
        }
    }

    fn usage(model: &str, start: &str, seconds: i64) -> GpuUsage {
        GpuUsage {
            tenant: "acme".into(),
            lease: Some("L".into()),
            region: "west".into(),
            node: "n".into(),
            gpu_model: model.into(),
            gpu_count: Decimal::ONE,
            start: t(start),
            end: t(start).plus(seconds),
            gpu_seconds: Decimal::from(seconds),
        }
    }

    #[test]
    fn a_partial_period_prorates_the_allowance_by_the_second() {
        // 10 GPU-h over 15.5 of January's 31 days: 36000 × 1339200 ÷ 2678400 = 18000 s.
        let c = contract("2027-01-16T12:00:00Z", "2027-03-01T00:00:00Z");
        let spans = billing_periods(&c);
        assert_eq!(allowance_seconds(d("10"), &spans[0]), d("18000"));
        assert_eq!(allowance_seconds(d("10"), &spans[1]), d("36000"));
        // A third of a second is rounded at the sixth place, half-even.
        let third = BillingSpan {
            from: t("2027-01-01T00:00:00Z"),
            to: t("2027-01-01T00:00:01Z"),
            full_from: t("2027-01-01T00:00:00Z"),
            full_to: t("2027-01-01T00:00:03Z"),
        };
        assert_eq!(allowance_seconds(d("0.0001"), &third), d("0.12"));
        assert_eq!(allowance_seconds(d("0.0000"), &third), d("0"));
    }

    #[test]
    fn only_the_included_model_inside_the_term_is_contract_priced() {
        let c = contract("2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z");
        let jan = Period {
            from: c.term_from,
            to: c.term_to,
        };
        let mut m = Metering::new([&c], jan);
        assert!(m.add(&usage("H100", "2027-01-05T00:00:00Z", 30_000), None));
        assert!(m.add(&usage("H100", "2027-01-31T23:00:00Z", 7_200), None));
        assert!(!m.add(&usage("A100", "2027-01-05T00:00:00Z", 3600), None));
        assert!(!m.prices(&usage("H100", "2027-02-01T00:00:00Z", 3600)));
        let mut other = usage("H100", "2027-01-05T00:00:00Z", 3600);
        other.lease = Some("M".into());
        assert!(!m.prices(&other));
        let judged = judge(&c, jan, &m);
        assert_eq!(judged.len(), 1);
        let row = &judged[0].row;
        // 37200 used (the record running past the term counts whole where it starts), 36000
        // included, 1200 over.
        assert_eq!(row.used_gpu_seconds, d("37200"));
        assert_eq!(row.included_gpu_seconds, d("36000"));
        assert_eq!(row.overage_gpu_seconds, d("1200"));
        assert_eq!((judged[0].covered, judged[0].records), (d("36000"), 2));
    }

    #[test]
    fn late_records_are_kept_per_earlier_period() {
        let c = contract("2027-01-01T00:00:00Z", "2027-03-01T00:00:00Z");
        let feb = Period {
            from: t("2027-02-01T00:00:00Z"),
            to: c.term_to,
        };
        let jan = Period {
            from: c.term_from,
            to: feb.from,
        };
        let mut m = Metering::new([&c], feb);
        assert!(m.add(&usage("H100", "2027-01-05T00:00:00Z", 600), Some(jan)));
        assert!(m.add(&usage("H100", "2027-01-06T00:00:00Z", 600), Some(jan)));
        let late = late(&c, &m);
        assert_eq!(late.len(), 1);
        assert_eq!(
            (late[0].0, late[0].3.gpu_seconds, late[0].3.records),
            (jan, d("1200"), 2)
        );
        // The late records counted toward no allowance of February.
        assert_eq!(judge(&c, feb, &m)[0].row.used_gpu_seconds, d("0"));
    }
}
