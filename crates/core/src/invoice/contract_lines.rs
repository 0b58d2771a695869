//! An invoice's contract lines (docs/RATING.md, "Contracts"): each contract's fees the period
//! bills ([`crate::contract::charges`]), its included GPU-hours and overage
//! ([`crate::allowance`]), the SLA credits of its billing periods ([`crate::sla`]) and the
//! true-up of its commitment, as invoice lines. Used to issue, to preview and by
//! [`super::InvoiceCheck`] to recompute.

use super::{gpu_hours, money_str, InvoiceLine, LineKind, Period, Tax, Unit};
use crate::allowance::{Allowance, Metering};
use crate::contract::{charges, BillingSpan};
use crate::rating::{round_amount, Series};
use crate::record::{ContractRegistered, FeeTiming};
use crate::sla::{judge, Availability, Presence};
use crate::time::Timestamp;
use rust_decimal::{Decimal, RoundingStrategy};
use serde::{Deserialize, Serialize};

/// Places a fee line's `quantity` (the share of its billing period) is rounded to, half-even.
pub const PERIOD_SHARE_DECIMALS: u32 = 6;

/// A contract's commitment on one invoice: what the billing periods the invoice holds commit
/// to, what the invoice period's usage lines drew, and the true-up billed for the shortfall.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Commitment {
    pub contract: String,
    /// Σ over the billing periods wholly inside the invoice period of the commitment × used ÷
    /// full seconds, each rounded half-even once.
    #[serde(with = "money_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub committed: Decimal,
    /// Σ net of the invoice's usage lines of its own period (not adjustment lines).
    #[serde(with = "money_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub drawn: Decimal,
    /// max(0, committed − drawn): the `true_up` line's net.
    #[serde(with = "money_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub true_up: Decimal,
}

/// The contract lines of an invoice, its commitments, the availability its SLAs judged and
/// its included GPU-hours.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContractLines {
    /// Contract by contract in order of term: fee lines, `included` and `overage` lines, late
    /// `overage` lines, `sla_credit` lines, the `true_up` line.
    pub lines: Vec<InvoiceLine>,
    pub commitments: Vec<Commitment>,
    /// Per contract with an SLA, billing period wholly inside the invoice's, and lease its
    /// fees rent (in that order): what the records show.
    pub availability: Vec<Availability>,
    /// Per contract, billing period, fee and included entry (in that order).
    pub allowances: Vec<Allowance>,
}

/// What the records an invoice rates show beyond its usage lines: the presence of the leases
/// its contracts' SLAs watch, and the contract-priced GPU-seconds of their included hours.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Measurement {
    pub presence: Presence,
    pub metering: Metering,
}

impl Measurement {
    /// Takes in a usage record the invoice rates in its own period (`late`: `None`) or as a
    /// late record of the earlier period `late`: its presence (own period only) and, when it
    /// is contract-priced, its GPU-seconds. True when contract-priced: the rate card does not
    /// rate it.
    pub fn add(&mut self, u: &crate::record::GpuUsage, late: Option<Period>) -> bool {
        if late.is_none() {
            self.presence.add(u);
        }
        self.metering.add(u, late)
    }
}

impl Measurement {
    /// Whether the usage records of `series` starting in `span` and ending by `last_end`, in
    /// the invoice's own period, are measured alike: `Some(contract_priced)` when
    /// [`Self::add_sum`] counts them exactly as [`Self::add`] would one by one, `None` when not.
    pub fn measures_alike(
        &self,
        series: &Series,
        span: (Timestamp, Timestamp),
        last_end: Timestamp,
    ) -> Option<bool> {
        if !self.presence.counts_alike(series.lease, span, last_end) {
            return None;
        }
        self.metering
            .meters_alike(series.lease, series.gpu_model, span)
    }

    /// Counts `records` usage records of `series` making `gpu_seconds`, starting at or after
    /// `from`, that [`Self::measures_alike`] found measured alike.
    pub fn add_sum(
        &mut self,
        series: &Series,
        from: Timestamp,
        gpu_seconds: Decimal,
        records: u64,
    ) {
        self.presence.add_sum(series.lease, from, gpu_seconds);
        if let Some(lease) = series.lease {
            self.metering
                .add_sum(lease, series.gpu_model, from, gpu_seconds, records);
        }
    }
}

/// An invoice period that holds part, not all, of a billing period of a contract with a
/// commitment or an SLA: no invoice could judge it, so none is issued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the period splits the billing period [{}, {}) of contract {contract}, which has a commitment or an SLA: invoice whole billing periods", span.from, span.to)]
pub struct SplitPeriod {
    pub contract: String,
    pub span: BillingSpan,
}

/// The contract lines of an invoice of `period` in `currency` (tax and gross still zero:
/// [`super::apply_tax`] sets them) from the tenant's `contracts` (any order; those in other
/// currencies make nothing), the invoice's `usage` lines and what its records show
/// (`measured`: presence for SLAs, contract-priced GPU-seconds); the taxes of each contract's
/// region by `tax`. With `whole` (an invoice), refused when the period splits a billing period
/// of a contract with a commitment, an SLA or included hours; without (a preview of a period
/// so far), the commitment and the SLA judge the whole billing periods the period holds only,
/// the included hours each billing period so far.
pub fn contract_lines(
    contracts: &[ContractRegistered],
    period: Period,
    currency: &str,
    usage: &[InvoiceLine],
    measured: &Measurement,
    tax: &dyn Fn(&str) -> Tax,
    whole: bool,
) -> Result<ContractLines, SplitPeriod> {
    let mut ordered: Vec<&ContractRegistered> = contracts
        .iter()
        .filter(|c| c.currency == currency)
        .collect();
    ordered.sort_by(|a, b| (a.term_from, &a.contract).cmp(&(b.term_from, &b.contract)));
    let mut metered = Vec::with_capacity(ordered.len());
    for c in &ordered {
        let ch = charges(c, period.from, period.to);
        if let Some(span) = ch.split.filter(|_| whole) {
            return Err(SplitPeriod {
                contract: c.contract.clone(),
                span,
            });
        }
        metered.push((
            ch,
            metered_lines(c, period, &measured.metering, &tax(&c.region)),
        ));
    }
    // An amount like every other, with the currency's minor digits (0.00 without usage).
    let drawn = drawn(
        usage
            .iter()
            .chain(metered.iter().flat_map(|(_, (lines, _))| lines)),
        currency,
    );
    let mut out = ContractLines::default();
    for (c, (ch, (metered, allowances))) in ordered.into_iter().zip(metered) {
        let t = tax(&c.region);
        let line = |kind: LineKind, description: String, net: Decimal| InvoiceLine {
            kind,
            description,
            region: c.region.clone(),
            gpu_model: None,
            class: None,
            plan: None,
            tier: None,
            quantity: Decimal::ONE,
            unit: Unit::Period,
            gpu_seconds: None,
            measured_kwh: None,
            pue: None,
            unit_price: net,
            net,
            tax_name: t.name.clone(),
            tax_rate: t.rate.normalize(),
            tax: Decimal::ZERO,
            gross: Decimal::ZERO,
            records: 0,
            adjustment_for: None,
            contract: Some(c.contract.clone()),
            category: None,
            timing: None,
            service_period: None,
        };
        for f in &ch.fees {
            let fee = &c.fees()[f.fee];
            out.lines.push(InvoiceLine {
                quantity: f
                    .share
                    .round_dp_with_strategy(
                        PERIOD_SHARE_DECIMALS,
                        RoundingStrategy::MidpointNearestEven,
                    )
                    .normalize(),
                unit_price: fee.amount,
                category: Some(fee.category),
                timing: Some(fee.timing),
                service_period: Some(Period {
                    from: f.from,
                    to: f.to,
                }),
                ..line(LineKind::Fee, fee.name.clone(), f.net)
            });
        }
        out.lines.extend(metered);
        out.allowances.extend(allowances);
        for (span, a) in judge(c, period, &measured.presence) {
            if let Some(percent) = a.credit_percent {
                let share = (percent / Decimal::ONE_HUNDRED).normalize();
                let renting = c.fees().iter().filter(|f| {
                    f.lease.as_deref() == Some(a.lease.as_str()) && f.timing != FeeTiming::Once
                });
                for fee in renting {
                    // The fee's amount for the billing period, as its own line has it.
                    let base = span.prorate(fee.amount, &c.currency);
                    let credit = round_amount(base * share, currency);
                    // A credit that rounds to nothing makes no line (as a true-up of 0).
                    if credit.is_zero() {
                        continue;
                    }
                    let description = format!(
                        "SLA credit {} %: {}, lease {}, availability {} % (target {} %)",
                        percent.normalize(),
                        fee.name,
                        a.lease,
                        a.availability,
                        a.target.normalize()
                    );
                    out.lines.push(InvoiceLine {
                        quantity: share,
                        unit_price: base,
                        category: Some(fee.category),
                        service_period: Some(a.period),
                        ..line(LineKind::SlaCredit, description, -credit)
                    });
                }
            }
            out.availability.push(a);
        }
        if let Some(committed) = ch.committed {
            let true_up = (committed - drawn).max(Decimal::ZERO);
            let true_up = round_amount(true_up, currency);
            out.commitments.push(Commitment {
                contract: c.contract.clone(),
                committed,
                drawn,
                true_up,
            });
            if !true_up.is_zero() {
                out.lines.push(line(
                    LineKind::TrueUp,
                    format!("Minimum commitment true-up, contract {}", c.contract),
                    true_up,
                ));
            }
        }
    }
    Ok(out)
}

/// Whether `line` draws a commitment down (docs/RATING.md, "Contracts"): a usage line (`gpu`,
/// `energy`) or an `overage` line of the invoice's own period (not an adjustment line).
pub fn draws_down(line: &InvoiceLine) -> bool {
    matches!(
        line.kind,
        LineKind::Gpu | LineKind::Energy | LineKind::Overage
    ) && line.adjustment_for.is_none()
}

/// A commitment's *drawn* over `lines` in `currency`: Σ net of those that draw it down
/// ([`draws_down`]), with the currency's minor digits (0.00 when none does).
pub fn drawn<'a>(lines: impl IntoIterator<Item = &'a InvoiceLine>, currency: &str) -> Decimal {
    round_amount(
        lines
            .into_iter()
            .filter(|l| draws_down(l))
            .map(|l| l.net)
            .sum(),
        currency,
    )
}

/// The `included` and `overage` lines of contract `c` on an invoice of `period`, taxed by `t`
/// (tax and gross still zero), and its `allowances` rows: per judged billing period, fee and
/// entry, then the late records' overage per earlier period, fee and entry
/// ([`crate::allowance`]).
fn metered_lines(
    c: &ContractRegistered,
    period: Period,
    metering: &Metering,
    t: &Tax,
) -> (Vec<InvoiceLine>, Vec<Allowance>) {
    let mut lines = Vec::new();
    let mut rows = Vec::new();
    let line = |kind: LineKind, fee: usize, entry: usize, gpu_seconds: Decimal, records: u64| {
        let f = &c.fees()[fee];
        let e = &f.included()[entry];
        let unit_price = match kind {
            LineKind::Overage => e.overage_rate,
            _ => Decimal::ZERO,
        };
        InvoiceLine {
            kind,
            description: String::new(),
            region: c.region.clone(),
            gpu_model: Some(e.gpu_model.clone()),
            class: None,
            plan: None,
            tier: None,
            quantity: gpu_hours(gpu_seconds),
            unit: Unit::GpuHour,
            gpu_seconds: Some(gpu_seconds.normalize()),
            measured_kwh: None,
            pue: None,
            unit_price,
            net: round_amount(gpu_seconds * unit_price / Decimal::from(3600), &c.currency),
            tax_name: t.name.clone(),
            tax_rate: t.rate.normalize(),
            tax: Decimal::ZERO,
            gross: Decimal::ZERO,
            records,
            adjustment_for: None,
            contract: Some(c.contract.clone()),
            category: Some(f.category),
            timing: None,
            service_period: None,
        }
    };
    for j in crate::allowance::judge(c, period, metering) {
        let f = &c.fees()[j.fee];
        let (model, lease) = (&j.row.gpu_model, &j.row.lease);
        let span = Some(j.row.period);
        if !j.covered.is_zero() {
            lines.push(InvoiceLine {
                description: format!(
                    "Included GPU-hours, {model}, lease {lease}: {} of {} GPU-h ({})",
                    gpu_hours(j.row.used_gpu_seconds),
                    gpu_hours(j.row.included_gpu_seconds),
                    f.name
                ),
                service_period: span,
                ..line(LineKind::Included, j.fee, j.entry, j.covered, j.records)
            });
        }
        if !j.row.overage_gpu_seconds.is_zero() {
            lines.push(InvoiceLine {
                description: format!(
                    "Overage above {} included GPU-h, {model}, lease {lease} ({})",
                    gpu_hours(j.row.included_gpu_seconds),
                    f.name
                ),
                service_period: span,
                ..line(
                    LineKind::Overage,
                    j.fee,
                    j.entry,
                    j.row.overage_gpu_seconds,
                    j.records,
                )
            });
        }
        rows.push(j.row);
    }
    for (p, fee, entry, used) in crate::allowance::late(c, metering) {
        let f = &c.fees()[fee];
        let model = &f.included()[entry].gpu_model;
        lines.push(InvoiceLine {
            description: format!(
                "Overage (late records), {model}, lease {} ({})",
                f.lease.as_deref().unwrap_or_default(),
                f.name
            ),
            adjustment_for: Some(p),
            ..line(
                LineKind::Overage,
                fee,
                entry,
                used.gpu_seconds,
                used.records,
            )
        });
    }
    (lines, rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{
        BillingAnchor, BillingPeriod, ContractFee, FeeCategory, GpuUsage, LeaseClass, LeaseNode,
        LeaseRegistered, Sla, SlaStep,
    };
    use crate::time::Timestamp;

    fn t(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap()
    }

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    /// A month of one whole GPU, 3600 s of it absent; the fee `amount`, 10 % below 99.9.
    fn credit_lines(amount: &str) -> ContractLines {
        let jan = Period {
            from: t("2027-01-01T00:00:00Z"),
            to: t("2027-02-01T00:00:00Z"),
        };
        let c = ContractRegistered {
            tenant: "acme".into(),
            contract: "C-1".into(),
            currency: "CNY".into(),
            region: "west".into(),
            term_from: jan.from,
            term_to: jan.to,
            billing_period: BillingPeriod::Month,
            billing_anchor: BillingAnchor::Calendar,
            fees: Some(vec![ContractFee {
                name: "GPU".into(),
                amount: d(amount),
                timing: FeeTiming::Arrears,
                category: FeeCategory::Compute,
                lease: Some("L".into()),
                included: None,
            }]),
            commitment: None,
            sla: Some(Sla {
                target: d("99.90"),
                credits: vec![SlaStep {
                    below: d("99.90"),
                    percent: d("10.0"),
                }],
            }),
        };
        let lease = LeaseRegistered {
            lease: "L".into(),
            tenant: "acme".into(),
            class: LeaseClass::Reserved,
            from: jan.from,
            to: None,
            nodes: vec![LeaseNode {
                node: "n".into(),
                gpus: Some(vec![0]),
                share: None,
                gpu_model: None,
                count: None,
            }],
        };
        let mut presence = Presence::new([&c], jan, &|_| Some(lease.clone()));
        presence.add(&GpuUsage {
            tenant: "acme".into(),
            lease: Some("L".into()),
            region: "west".into(),
            node: "n".into(),
            gpu_model: "H100".into(),
            gpu_count: Decimal::ONE,
            start: jan.from.plus(3600),
            end: jan.to,
            gpu_seconds: Decimal::from(2_678_400 - 3600),
        });
        let measured = Measurement {
            presence,
            metering: Metering::default(),
        };
        contract_lines(&[c], jan, "CNY", &[], &measured, &|_| Tax::none(), true).unwrap()
    }

    #[test]
    fn a_credit_is_a_share_of_its_fee_written_canonically() {
        let out = credit_lines("3100");
        // 1 − 3600 / 2678400 = 99.86559…% → 99.8655 < 99.9: 10 % of 3100.00.
        assert_eq!(out.availability[0].availability, d("99.8655"));
        assert_eq!(out.availability[0].target.to_string(), "99.90");
        let credit = &out.lines[1];
        assert_eq!(credit.kind, LineKind::SlaCredit);
        assert_eq!(credit.net, d("-310.00"));
        assert_eq!(
            credit.description,
            "SLA credit 10 %: GPU, lease L, availability 99.8655 % (target 99.9 %)"
        );
    }

    #[test]
    fn a_credit_that_rounds_to_nothing_makes_no_line() {
        // 10 % of 0.01 is 0.001, 0.00 at the minor unit: the row says 10 %, no line is made
        // (never a "-0.00").
        let out = credit_lines("0.01");
        assert_eq!(out.availability[0].credit_percent, Some(d("10.0")));
        let kinds: Vec<LineKind> = out.lines.iter().map(|l| l.kind).collect();
        assert_eq!(kinds, [LineKind::Fee]);
    }
}
