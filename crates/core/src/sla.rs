//! SLA availability and credits (docs/RATING.md, "SLA credits"): how available a contract's
//! leased GPUs were over each billing period, measured from the node's signed usage records
//! alone, and the credit its schedule gives.
//!
//! One rule, used by the ledger to issue and preview invoices and by `gpuledger verify
//! --invoice` to recompute them from a bundle:
//! - a lease's **leased GPU-seconds** over a billing period are its GPUs ([`leased_gpus`]) ×
//!   the seconds of its term inside the period;
//! - its **present GPU-seconds** are, over the lease's usage records the invoice rates whose
//!   interval starts in the period, Σ `gpu_count` × (min(`end`, period end) − `start`): the
//!   agent signs a lease's GPUs that are present, so a lost GPU lowers `gpu_count`, and an
//!   interval it could not measure (a down node, a failed reading) has no record;
//! - **availability** is 100 × present ÷ leased, at most 100, truncated to 4 decimals
//!   ([`availability_percent`]); the credit step is the one with the lowest `below` that the
//!   availability is under ([`credit_percent`]).

use crate::contract::{billing_periods, BillingSpan};
use crate::invoice::Period;
use crate::record::{ContractRegistered, GpuUsage, LeaseRegistered, Sla};
use crate::time::Timestamp;
use rust_decimal::{Decimal, RoundingStrategy};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Places an availability percentage is given to (truncated, so that "below" holds of the
/// shown figure exactly when it holds of the exact ratio: steps have at most 4 decimals).
pub const AVAILABILITY_DECIMALS: u32 = 4;

/// How many GPUs a lease rents: Σ over its items of the GPUs it names × their share (whole
/// GPUs: 1), or the `count` of a model.
pub fn leased_gpus(l: &LeaseRegistered) -> Decimal {
    l.nodes
        .iter()
        .map(|n| match (&n.gpus, n.count) {
            (Some(gpus), _) => Decimal::from(gpus.len()) * n.share.unwrap_or(Decimal::ONE),
            (None, Some(count)) => count,
            (None, None) => Decimal::ZERO,
        })
        .sum()
}

/// The lease's GPU-seconds over `[from, to)`: its GPUs × the seconds of its term inside.
pub fn leased_gpu_seconds(
    l: &LeaseRegistered,
    from: crate::time::Timestamp,
    to: crate::time::Timestamp,
) -> Decimal {
    let start = from.max(l.from);
    let end = l.to.map_or(to, |t| t.min(to));
    if end <= start {
        return Decimal::ZERO;
    }
    leased_gpus(l) * Decimal::from(start.seconds_until(end))
}

/// 100 × `present` ÷ `leased`, at most 100, truncated to [`AVAILABILITY_DECIMALS`] places;
/// `None` when nothing was leased.
pub fn availability_percent(leased: Decimal, present: Decimal) -> Option<Decimal> {
    if leased <= Decimal::ZERO {
        return None;
    }
    let ratio = (present * Decimal::ONE_HUNDRED / leased).min(Decimal::ONE_HUNDRED);
    Some(
        ratio
            .round_dp_with_strategy(AVAILABILITY_DECIMALS, RoundingStrategy::ToZero)
            .normalize(),
    )
}

/// The credit, a percentage of the fee, that `availability` earns under `sla`: the `percent`
/// of the step with the lowest `below` that the availability is under; `None` when it is
/// under none.
pub fn credit_percent(sla: &Sla, availability: Decimal) -> Option<Decimal> {
    sla.credits
        .iter()
        .filter(|s| availability < s.below)
        .map(|s| s.percent)
        .next_back()
}

/// One lease's availability over one billing period of a contract with an SLA, as an invoice
/// states it (its `availability` member).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Availability {
    pub contract: String,
    pub lease: String,
    /// The billing period (clipped to the term).
    pub period: Period,
    /// The lease's GPUs × the seconds of its term in the period.
    #[serde(with = "crate::invoice::decimal_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub leased_gpu_seconds: Decimal,
    /// What its usage records show present in the period (module docs).
    #[serde(with = "crate::invoice::decimal_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub present_gpu_seconds: Decimal,
    /// 100 × present ÷ leased, at most 100, truncated to 4 decimals.
    #[serde(with = "crate::invoice::decimal_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub availability: Decimal,
    /// The SLA's target.
    #[serde(with = "crate::invoice::decimal_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub target: Decimal,
    /// The credit step that applies, a percentage of each fee renting the lease; absent when
    /// none does.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::invoice::opt_decimal_str"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::decimal::DecimalString>))]
    pub credit_percent: Option<Decimal>,
}

/// The availability an invoice of `period` states for contract `c` (its `availability` rows),
/// each with the billing period it is for: per billing period of `c` wholly inside `period`
/// ([`judged_spans`]), per lease its fees rent ([`rented_leases`]), in that order; none for a
/// lease `presence` cannot measure (not watched, not registered) or not in force then. Empty
/// without an SLA.
pub fn judge(
    c: &ContractRegistered,
    period: Period,
    presence: &Presence,
) -> Vec<(BillingSpan, Availability)> {
    let Some(sla) = &c.sla else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for span in judged_spans(c, period) {
        let p = Period {
            from: span.from,
            to: span.to,
        };
        for lease in rented_leases(c) {
            let Some((leased, present)) = presence.of(lease, p) else {
                continue;
            };
            let Some(availability) = availability_percent(leased, present) else {
                continue;
            };
            let row = Availability {
                contract: c.contract.clone(),
                lease: lease.to_owned(),
                period: p,
                leased_gpu_seconds: leased.normalize(),
                present_gpu_seconds: present.normalize(),
                availability,
                target: sla.target,
                credit_percent: credit_percent(sla, availability),
            };
            out.push((span, row));
        }
    }
    out
}

/// The billing periods of `c` wholly inside `period` whose availability an invoice of
/// `period` judges: none without an SLA.
pub fn judged_spans(c: &ContractRegistered, period: Period) -> Vec<BillingSpan> {
    if c.sla.is_none() {
        return Vec::new();
    }
    billing_periods(c)
        .into_iter()
        .filter(|s| period.from <= s.from && s.to <= period.to)
        .collect()
}

/// The leases `c`'s fees rent, each once, in the order of the fees.
pub fn rented_leases(c: &ContractRegistered) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for l in c.fees().iter().filter_map(|f| f.lease.as_deref()) {
        if !out.contains(&l) {
            out.push(l);
        }
    }
    out
}

/// The GPU-seconds present per lease and judged billing period, gathered from the usage
/// records an invoice rates in its own period ([`Presence::add`]), with the registrations of
/// the leases watched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Presence {
    /// Lease → what is watched of it.
    leases: BTreeMap<String, Watched>,
}

/// One watched lease: its registration (`None`: not found), and the judged spans by start
/// with the GPU-seconds present in each so far.
type Watched = (Option<LeaseRegistered>, Vec<(Period, Decimal)>);

impl Presence {
    /// Watches, for an invoice of `period`, the leases the fees of each contract with an SLA
    /// rent over its billing periods wholly inside `period`; `lease` finds a registration.
    pub fn new<'a>(
        contracts: impl IntoIterator<Item = &'a ContractRegistered>,
        period: Period,
        lease: &dyn Fn(&str) -> Option<LeaseRegistered>,
    ) -> Self {
        let mut out = Presence::default();
        for c in contracts {
            let spans = judged_spans(c, period);
            if spans.is_empty() {
                continue;
            }
            for l in rented_leases(c) {
                let (_, watched) = out
                    .leases
                    .entry(l.to_owned())
                    .or_insert_with(|| (lease(l), Vec::new()));
                for s in &spans {
                    let p = Period {
                        from: s.from,
                        to: s.to,
                    };
                    if !watched.iter().any(|(w, _)| *w == p) {
                        watched.push((p, Decimal::ZERO));
                    }
                }
                watched.sort_by_key(|(p, _)| *p);
            }
        }
        out
    }

    /// Whether no lease is watched.
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// Counts a usage record the invoice rates in its own period: `gpu_count` × the seconds
    /// from its start to its end or the end of the judged span it starts in.
    pub fn add(&mut self, u: &GpuUsage) {
        let Some(lease) = &u.lease else { return };
        let Some((_, spans)) = self.leases.get_mut(lease) else {
            return;
        };
        if let Some((p, present)) = span_at(spans, u.start).map(|i| &mut spans[i]) {
            let end = u.end.min(p.to);
            *present += u.gpu_count * Decimal::from(u.start.seconds_until(end));
        }
    }

    /// Whether the usage records of `lease` starting in `[from, to)` and ending by `last_end`
    /// are counted alike: all in one judged span, none crossing its end (so each counts its
    /// GPU-seconds whole), or all in none. What [`Self::add_sum`] requires.
    pub fn counts_alike(
        &self,
        lease: Option<&str>,
        (from, to): (Timestamp, Timestamp),
        last_end: Timestamp,
    ) -> bool {
        let Some((_, spans)) = lease.and_then(|l| self.leases.get(l)) else {
            return true;
        };
        let inside = |t: Timestamp| from < t && t < to;
        if spans.iter().any(|(p, _)| inside(p.from) || inside(p.to)) {
            return false;
        }
        span_at(spans, from).is_none_or(|i| last_end <= spans[i].0.to)
    }

    /// Counts usage records of `lease` that [`Self::counts_alike`] found counted alike, starting
    /// at or after `from`, making `gpu_seconds`: as [`Self::add`] would count them one by one.
    pub fn add_sum(&mut self, lease: Option<&str>, from: Timestamp, gpu_seconds: Decimal) {
        let Some((_, spans)) = lease.and_then(|l| self.leases.get_mut(l)) else {
            return;
        };
        if let Some(i) = span_at(spans, from) {
            spans[i].1 += gpu_seconds;
        }
    }

    /// The lease's (leased, present) GPU-seconds over the judged span `span`; `None` when it
    /// is not watched or its registration is unknown.
    pub fn of(&self, lease: &str, span: Period) -> Option<(Decimal, Decimal)> {
        let (reg, spans) = self.leases.get(lease)?;
        let present = spans.iter().find(|(p, _)| *p == span)?.1;
        let leased = leased_gpu_seconds(reg.as_ref()?, span.from, span.to);
        Some((leased, present))
    }
}

/// The place in `spans` (sorted by start, apart) of the span holding `t`, if any.
pub(crate) fn span_at<T>(spans: &[(Period, T)], t: Timestamp) -> Option<usize> {
    let i = spans.partition_point(|(p, _)| p.from <= t).checked_sub(1)?;
    (t < spans[i].0.to).then_some(i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{
        BillingAnchor, BillingPeriod, ContractFee, FeeCategory, FeeTiming, LeaseClass, LeaseNode,
        SlaStep,
    };
    use crate::time::Timestamp;

    fn t(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap()
    }

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    fn sla() -> Sla {
        Sla {
            target: d("99.9"),
            credits: vec![
                SlaStep {
                    below: d("99.9"),
                    percent: d("10"),
                },
                SlaStep {
                    below: d("99"),
                    percent: d("25"),
                },
            ],
        }
    }

    fn lease(gpus: Vec<u32>, from: &str, to: Option<&str>) -> LeaseRegistered {
        LeaseRegistered {
            lease: "L-1".into(),
            tenant: "acme".into(),
            class: LeaseClass::Reserved,
            from: t(from),
            to: to.map(t),
            nodes: vec![LeaseNode {
                node: "n1".into(),
                gpus: Some(gpus),
                share: None,
                gpu_model: None,
                count: None,
            }],
        }
    }

    fn usage(start: &str, end: &str, count: &str) -> GpuUsage {
        let (s, e) = (t(start), t(end));
        GpuUsage {
            tenant: "acme".into(),
            lease: Some("L-1".into()),
            region: "cn-east".into(),
            node: "n1".into(),
            gpu_model: "H100".into(),
            gpu_count: d(count),
            start: s,
            end: e,
            gpu_seconds: d(count) * Decimal::from(s.seconds_until(e)),
        }
    }

    fn contract() -> ContractRegistered {
        ContractRegistered {
            tenant: "acme".into(),
            contract: "C-1".into(),
            currency: "CNY".into(),
            region: "cn-east".into(),
            term_from: t("2027-01-01T00:00:00Z"),
            term_to: t("2027-04-01T00:00:00Z"),
            billing_period: BillingPeriod::Month,
            billing_anchor: BillingAnchor::Calendar,
            fees: Some(vec![ContractFee {
                name: "8 x H100".into(),
                amount: d("96000"),
                timing: FeeTiming::Advance,
                category: FeeCategory::Compute,
                lease: Some("L-1".into()),
                included: None,
            }]),
            commitment: None,
            sla: Some(sla()),
        }
    }

    #[test]
    fn the_lowest_step_under_which_availability_falls_applies() {
        let s = sla();
        assert_eq!(credit_percent(&s, d("99.9")), None);
        assert_eq!(credit_percent(&s, d("99.8999")), Some(d("10")));
        assert_eq!(credit_percent(&s, d("99")), Some(d("10")));
        assert_eq!(credit_percent(&s, d("98.9999")), Some(d("25")));
        assert_eq!(credit_percent(&s, d("0")), Some(d("25")));
    }

    #[test]
    fn availability_is_truncated_and_capped() {
        // 2 of 3 seconds: 66.66666… → 66.6666 (never rounded up past a step's bound).
        assert_eq!(availability_percent(d("3"), d("2")), Some(d("66.6666")));
        assert_eq!(
            availability_percent(d("1000000"), d("999000.5")),
            Some(d("99.9"))
        );
        assert_eq!(
            availability_percent(d("1000000"), d("998999.99")),
            Some(d("99.8999"))
        );
        assert_eq!(availability_percent(d("10"), d("12")), Some(d("100")));
        assert_eq!(availability_percent(d("0"), d("0")), None);
    }

    #[test]
    fn leased_seconds_are_the_gpus_over_the_term_inside_the_period() {
        let l = lease(
            vec![0, 1, 2, 3],
            "2027-01-10T00:00:00Z",
            Some("2027-01-20T00:00:00Z"),
        );
        let jan = (t("2027-01-01T00:00:00Z"), t("2027-02-01T00:00:00Z"));
        assert_eq!(leased_gpus(&l), d("4"));
        assert_eq!(leased_gpu_seconds(&l, jan.0, jan.1), d("3456000"));
        let feb = (t("2027-02-01T00:00:00Z"), t("2027-03-01T00:00:00Z"));
        assert_eq!(leased_gpu_seconds(&l, feb.0, feb.1), Decimal::ZERO);
        let mut half = lease(vec![0, 1], "2027-01-01T00:00:00Z", None);
        half.nodes[0].share = Some(d("0.5"));
        assert_eq!(leased_gpus(&half), d("1"));
    }

    #[test]
    fn presence_counts_records_from_their_start_to_the_span_end() {
        let c = contract();
        let q1 = Period {
            from: t("2027-01-01T00:00:00Z"),
            to: t("2027-04-01T00:00:00Z"),
        };
        let reg = lease((0..8).collect(), "2027-01-01T00:00:00Z", None);
        let mut p = Presence::new([&c], q1, &|l| (l == "L-1").then(|| reg.clone()));
        // January: 8 GPUs all month but 3 hours with 7.
        p.add(&usage("2027-01-01T00:00:00Z", "2027-01-10T00:00:00Z", "8"));
        p.add(&usage("2027-01-10T00:00:00Z", "2027-01-10T03:00:00Z", "7"));
        p.add(&usage("2027-01-10T03:00:00Z", "2027-02-01T00:00:00Z", "8"));
        // A record across the end of February counts up to it; one of another lease is not
        // watched.
        p.add(&usage("2027-02-28T23:00:00Z", "2027-03-01T01:00:00Z", "8"));
        let mut other = usage("2027-01-05T00:00:00Z", "2027-01-05T01:00:00Z", "8");
        other.lease = Some("L-2".into());
        p.add(&other);
        let jan = Period {
            from: t("2027-01-01T00:00:00Z"),
            to: t("2027-02-01T00:00:00Z"),
        };
        let (leased, present) = p.of("L-1", jan).unwrap();
        assert_eq!(leased, d("8") * d("2678400"));
        assert_eq!(present, leased - d("10800"));
        // 1 − 10800 / 21427200 = 99.94959…% → 99.9495: no credit.
        let a = availability_percent(leased, present).unwrap();
        assert_eq!(a, d("99.9495"));
        assert_eq!(credit_percent(c.sla.as_ref().unwrap(), a), None);
        let feb = Period {
            from: t("2027-02-01T00:00:00Z"),
            to: t("2027-03-01T00:00:00Z"),
        };
        assert_eq!(p.of("L-1", feb).unwrap().1, d("28800"));
        assert!(p.of("L-2", jan).is_none());
        // Only billing periods wholly inside the invoice's are judged.
        let part = Period {
            from: t("2027-01-01T00:00:00Z"),
            to: t("2027-01-15T00:00:00Z"),
        };
        assert!(Presence::new([&c], part, &|_| Some(reg.clone())).is_empty());
    }
}
