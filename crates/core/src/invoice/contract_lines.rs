//! An invoice's contract lines (docs/RATING.md, "Contracts"): each contract's fees the period
//! bills ([`crate::contract::charges`]) and the true-up of its commitment, as invoice lines.
//! Used to issue, to preview and by [`super::InvoiceCheck`] to recompute.

use super::{money_str, InvoiceLine, LineKind, Period, Tax, Unit};
use crate::contract::{charges, BillingSpan};
use crate::rating::round_amount;
use crate::record::ContractRegistered;
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

/// The contract lines of an invoice and its commitments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContractLines {
    /// Fee lines, then each contract's `true_up` line, contract by contract in order of term.
    pub lines: Vec<InvoiceLine>,
    pub commitments: Vec<Commitment>,
}

/// An invoice period that holds part, not all, of a billing period of a contract with a
/// commitment: its commitment could be met by no invoice, so none is issued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the period splits the billing period [{}, {}) of contract {contract}, which has a commitment: invoice whole billing periods", span.from, span.to)]
pub struct SplitPeriod {
    pub contract: String,
    pub span: BillingSpan,
}

/// The contract lines of an invoice of `period` in `currency` (tax and gross still zero:
/// [`super::apply_tax`] sets them) from the tenant's `contracts` (any order; those in other
/// currencies make nothing) and the invoice's `usage` lines; the taxes of each contract's
/// region by `tax`. With `whole` (an invoice), refused when the period splits a committed
/// billing period; without (a preview of a period so far), the commitment counts the whole
/// billing periods the period holds only.
pub fn contract_lines(
    contracts: &[ContractRegistered],
    period: Period,
    currency: &str,
    usage: &[InvoiceLine],
    tax: &dyn Fn(&str) -> Tax,
    whole: bool,
) -> Result<ContractLines, SplitPeriod> {
    let mut ordered: Vec<&ContractRegistered> = contracts
        .iter()
        .filter(|c| c.currency == currency)
        .collect();
    ordered.sort_by(|a, b| (a.term_from, &a.contract).cmp(&(b.term_from, &b.contract)));
    // An amount like every other, with the currency's minor digits (0.00 without usage).
    let drawn = round_amount(
        usage
            .iter()
            .filter(|l| l.adjustment_for.is_none())
            .map(|l| l.net)
            .sum(),
        currency,
    );
    let mut out = ContractLines::default();
    for c in ordered {
        let ch = charges(c, period.from, period.to);
        if let Some(span) = ch.split.filter(|_| whole) {
            return Err(SplitPeriod {
                contract: c.contract.clone(),
                span,
            });
        }
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
