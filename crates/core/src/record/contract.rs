//! The `contract_registered` body (docs/PROTOCOL.md §5.19): a tenant's contract with fixed
//! fees per billing period, one-off charges and a minimum spend. What it charges is
//! [`crate::contract`]; the rules that need the log are [`crate::contract::ContractBook`].

use super::{currency, id, money, ts, Record};
use crate::ids::check_display_text;
use crate::limits::{
    MAX_CONTRACT_FEES, MAX_CONTRACT_TERM_SECONDS, MAX_EXCLUSION_REASON_BYTES, MAX_FEE_NAME_BYTES,
    MAX_INCLUDED_MODELS, MAX_SLA_STEPS,
};
use crate::rejection::{Reason, Rejection};
use crate::time::Timestamp;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

words! {
    /// How long a contract's billing period is.
    pub enum BillingPeriod {
        /// A month.
        Month = "month",
        /// Three months.
        Quarter = "quarter",
        /// Twelve months.
        Year = "year",
    }
}

impl BillingPeriod {
    /// The period in months.
    pub fn months(self) -> u32 {
        match self {
            BillingPeriod::Month => 1,
            BillingPeriod::Quarter => 3,
            BillingPeriod::Year => 12,
        }
    }
}

words! {
    /// Where a contract's billing periods begin.
    pub enum BillingAnchor {
        /// On the calendar: the first of the month (of January, April, July, October for a
        /// quarter; of January for a year), 00:00 UTC.
        Calendar = "calendar",
        /// On the term's start: every period starts on its day of the month and time of day.
        Anniversary = "anniversary",
    }
}

words! {
    /// When a fee is billed.
    pub enum FeeTiming {
        /// At the start of each billing period.
        Advance = "advance",
        /// At the end of each billing period.
        Arrears = "arrears",
        /// Once, at the start of the term, not prorated (setup, an installation).
        Once = "once",
    }
}

words! {
    /// What a fee is for (its FOCUS `ServiceCategory`, docs/FOCUS.md).
    pub enum FeeCategory {
        /// GPU servers, bare metal, reserved capacity.
        Compute = "compute",
        /// Bandwidth, public IPs.
        Networking = "networking",
        /// Disks, object storage.
        Storage = "storage",
        /// Support, setup, remote hands.
        Support = "support",
        /// Anything else.
        Other = "other",
    }
}

/// One fixed fee of a contract.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ContractFee {
    /// The invoice line's description: 1 to [`MAX_FEE_NAME_BYTES`] bytes of text for people.
    pub name: String,
    /// Per whole billing period (`once`: the whole fee), in the contract's currency.
    #[serde(serialize_with = "super::money_string")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub amount: Decimal,
    pub timing: FeeTiming,
    pub category: FeeCategory,
    /// The lease the fee rents (a periodic fee only): the contract's SLA is measured on it and
    /// credits a share of this fee (docs/RATING.md, "SLA credits"); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
    /// GPU-hours of GPU models the fee includes per billing period, and the rate above them
    /// (a fee with a `lease` only): the contract prices that lease's GPU time of those models
    /// (docs/RATING.md, "Included GPU-hours and overage"); absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub included: Option<Vec<Included>>,
}

impl ContractFee {
    /// The included GPU-hours, none when absent.
    pub fn included(&self) -> &[Included] {
        self.included.as_deref().unwrap_or_default()
    }
}

/// GPU-hours of one GPU model a fee includes per whole billing period, and the price of each
/// GPU-hour above them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Included {
    /// The model, as `gpu_usage.gpu_model` names it.
    pub gpu_model: String,
    /// GPU-hours per whole billing period (prorated for a partial one); 0 allowed.
    #[serde(serialize_with = "super::money_string")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub gpu_hours: Decimal,
    /// Per GPU-hour above the included hours, in the contract's currency; 0 allowed.
    #[serde(serialize_with = "super::money_string")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub overage_rate: Decimal,
}

/// One step of an SLA's credit schedule: when a lease's availability over a billing period
/// is below `below` (a percentage), the credit is `percent` % of the fee that rents it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SlaStep {
    /// A percentage above 0, at most the target, with at most 4 decimals.
    #[serde(serialize_with = "crate::decimal::serialize")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub below: Decimal,
    /// The credit, a percentage of the fee above 0 and at most 100, with at most 4 decimals.
    #[serde(serialize_with = "crate::decimal::serialize")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub percent: Decimal,
}

/// A contract's service-level agreement (docs/RATING.md, "SLA credits"): the availability
/// each billing period of every lease its fees rent is held to, and the credit schedule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Sla {
    /// The availability promised, a percentage above 0 and below 100, at most 4 decimals.
    #[serde(serialize_with = "crate::decimal::serialize")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub target: Decimal,
    /// 1 to [`MAX_SLA_STEPS`] steps, `below` strictly decreasing from at most `target`,
    /// `percent` strictly increasing: the lowest `below` the availability is under applies.
    pub credits: Vec<SlaStep>,
}

/// A tenant's contract (docs/PROTOCOL.md §5.19): fixed fees per billing period of its term,
/// one-off charges, and a minimum spend per billing period.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ContractRegistered {
    pub tenant: String,
    /// The contract's id, registered once in a log.
    pub contract: String,
    /// The currency of every line the contract makes.
    pub currency: String,
    /// The region whose tax its lines take.
    pub region: String,
    /// The term `[term_from, term_to)`.
    pub term_from: Timestamp,
    pub term_to: Timestamp,
    pub billing_period: BillingPeriod,
    pub billing_anchor: BillingAnchor,
    /// 1 to [`MAX_CONTRACT_FEES`] fees; absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fees: Option<Vec<ContractFee>>,
    /// The minimum spend per whole billing period; absent when none.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "money_option"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::decimal::DecimalString>))]
    pub commitment: Option<Decimal>,
    /// The availability the leases its fees rent are held to; absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sla: Option<Sla>,
}

impl ContractRegistered {
    /// The fees, none when absent.
    pub fn fees(&self) -> &[ContractFee] {
        self.fees.as_deref().unwrap_or_default()
    }
}

fn money_option<S: serde::Serializer>(d: &Option<Decimal>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => super::money_string(d, s),
        None => s.serialize_none(),
    }
}

/// An amendment of a tenant's contract (docs/PROTOCOL.md §5.21): the term ends at a new
/// instant, earlier (ended early) or later (extended). Only what lies ahead changes: the rules
/// that need the log are [`crate::contract::ContractBook`]; a contract as amended is
/// [`crate::contract::Contracts`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ContractAmended {
    /// The contract's tenant.
    pub tenant: String,
    /// The contract amended, registered earlier.
    pub contract: String,
    /// The term's new end: the term is `[term_from, term_to)` from this entry on.
    pub term_to: Timestamp,
    /// Why, for people (the invoice and the console show it): 1 to
    /// [`MAX_EXCLUSION_REASON_BYTES`] bytes without control characters or surrounding spaces.
    pub reason: String,
}

/// [`ContractAmended`] as serde reads it, before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ContractAmendedWire {
    tenant: String,
    contract: String,
    term_to: String,
    reason: String,
}

impl Record for ContractAmended {
    type Wire = ContractAmendedWire;
    fn check(w: ContractAmendedWire) -> Result<Self, Rejection> {
        let tenant = id("body.tenant", &w.tenant)?;
        let contract = id("body.contract", &w.contract)?;
        let term_to = ts("body.term_to", &w.term_to)?;
        super::trimmed_text("body.reason", &w.reason, MAX_EXCLUSION_REASON_BYTES)?;
        Ok(ContractAmended {
            tenant,
            contract,
            term_to,
            reason: w.reason,
        })
    }
}

/// [`ContractFee`] as serde reads it, before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ContractFeeWire {
    name: String,
    amount: String,
    timing: String,
    category: String,
    #[serde(default, deserialize_with = "super::present")]
    lease: Option<String>,
    #[serde(default, deserialize_with = "super::present")]
    included: Option<Vec<IncludedWire>>,
}

/// [`Included`] as serde reads it, before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct IncludedWire {
    gpu_model: String,
    gpu_hours: String,
    overage_rate: String,
}

/// [`SlaStep`] as serde reads it, before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SlaStepWire {
    below: String,
    percent: String,
}

/// [`Sla`] as serde reads it, before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SlaWire {
    target: String,
    credits: Vec<SlaStepWire>,
}

/// [`ContractRegistered`] as serde reads it, before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ContractWire {
    tenant: String,
    contract: String,
    currency: String,
    region: String,
    term_from: String,
    term_to: String,
    billing_period: String,
    billing_anchor: String,
    #[serde(default, deserialize_with = "super::present")]
    fees: Option<Vec<ContractFeeWire>>,
    #[serde(default, deserialize_with = "super::present")]
    commitment: Option<String>,
    #[serde(default, deserialize_with = "super::present")]
    sla: Option<SlaWire>,
}

/// An amount above 0 (`quantity_out_of_range` at 0).
pub(super) fn positive_money(field: &str, s: &str) -> Result<Decimal, Rejection> {
    let d = money(field, s)?;
    if d.is_zero() {
        return Err(Rejection::field(
            Reason::QuantityOutOfRange,
            field,
            "must be above 0",
        ));
    }
    Ok(d)
}

impl Record for ContractRegistered {
    type Wire = ContractWire;
    fn check(w: ContractWire) -> Result<Self, Rejection> {
        let tenant = id("body.tenant", &w.tenant)?;
        let contract = id("body.contract", &w.contract)?;
        let currency = currency("body.currency", &w.currency)?;
        let region = id("body.region", &w.region)?;
        let term_from = ts("body.term_from", &w.term_from)?;
        let term_to = ts("body.term_to", &w.term_to)?;
        if term_to <= term_from {
            return Err(Rejection::field(
                Reason::InvalidField,
                "body.term_to",
                "must be after term_from",
            ));
        }
        if term_from.seconds_until(term_to) > MAX_CONTRACT_TERM_SECONDS {
            return Err(Rejection::field(
                Reason::QuantityOutOfRange,
                "body.term_to",
                format!(
                    "the term is longer than {} days",
                    MAX_CONTRACT_TERM_SECONDS / 86_400
                ),
            ));
        }
        let billing_period = BillingPeriod::read("body.billing_period", &w.billing_period)?;
        let billing_anchor = BillingAnchor::read("body.billing_anchor", &w.billing_anchor)?;
        let fees = match w.fees {
            None => None,
            Some(list) => Some(fees(list)?),
        };
        let commitment = w
            .commitment
            .as_deref()
            .map(|c| positive_money("body.commitment", c))
            .transpose()?;
        if fees.is_none() && commitment.is_none() {
            return Err(Rejection::field(
                Reason::InvalidField,
                "body.fees",
                "a contract has fees, a commitment or both",
            ));
        }
        let sla = w.sla.map(sla).transpose()?;
        if sla.is_some() && !fees.iter().flatten().any(|f| f.lease.is_some()) {
            return Err(Rejection::field(
                Reason::InvalidField,
                "body.sla",
                "an SLA credits the fees of leases: name the lease of at least one periodic fee",
            ));
        }
        Ok(ContractRegistered {
            tenant,
            contract,
            currency,
            region,
            term_from,
            term_to,
            billing_period,
            billing_anchor,
            fees,
            commitment,
            sla,
        })
    }
}

/// A percentage: an amount (at most 4 decimals) above 0 and at most 100.
fn percent(field: &str, s: &str) -> Result<Decimal, Rejection> {
    let d = positive_money(field, s)?;
    if d > Decimal::ONE_HUNDRED {
        return Err(Rejection::field(
            Reason::QuantityOutOfRange,
            field,
            "is a percentage, at most 100",
        ));
    }
    Ok(d)
}

fn sla(w: SlaWire) -> Result<Sla, Rejection> {
    let target = percent("body.sla.target", &w.target)?;
    if target == Decimal::ONE_HUNDRED {
        return Err(Rejection::field(
            Reason::QuantityOutOfRange,
            "body.sla.target",
            "must be below 100: no measurement proves every second",
        ));
    }
    if w.credits.is_empty() || w.credits.len() > MAX_SLA_STEPS {
        return Err(Rejection::field(
            Reason::InvalidField,
            "body.sla.credits",
            format!(
                "lists {} steps; 1 to {MAX_SLA_STEPS} are allowed",
                w.credits.len()
            ),
        ));
    }
    let mut credits: Vec<SlaStep> = Vec::with_capacity(w.credits.len());
    for (i, step) in w.credits.into_iter().enumerate() {
        let field = |m: &str| format!("body.sla.credits[{i}].{m}");
        let below = percent(&field("below"), &step.below)?;
        let percent = percent(&field("percent"), &step.percent)?;
        let ceiling = credits.last().map_or(target, |p| p.below);
        let strict = !credits.is_empty();
        if below > ceiling || (strict && below == ceiling) {
            return Err(Rejection::field(
                Reason::InvalidField,
                &field("below"),
                if strict {
                    "must be below the step before it"
                } else {
                    "must be at most the target"
                },
            ));
        }
        if credits.last().is_some_and(|p| percent <= p.percent) {
            return Err(Rejection::field(
                Reason::InvalidField,
                &field("percent"),
                "must be above the step before it: a lower availability credits more",
            ));
        }
        credits.push(SlaStep { below, percent });
    }
    Ok(Sla { target, credits })
}

fn fees(list: Vec<ContractFeeWire>) -> Result<Vec<ContractFee>, Rejection> {
    if list.is_empty() {
        return Err(Rejection::field(
            Reason::InvalidField,
            "body.fees",
            "must not be empty (leave it out when there are no fees)",
        ));
    }
    if list.len() > MAX_CONTRACT_FEES {
        return Err(Rejection::field(
            Reason::QuantityOutOfRange,
            "body.fees",
            format!(
                "lists {} fees; at most {MAX_CONTRACT_FEES} are allowed",
                list.len()
            ),
        ));
    }
    // (lease, model) pairs included by the fees before.
    let mut seen: Vec<(String, String)> = Vec::new();
    list.into_iter()
        .enumerate()
        .map(|(i, f)| {
            let field = |m: &str| format!("body.fees[{i}].{m}");
            check_display_text(&f.name, MAX_FEE_NAME_BYTES)
                .map_err(|m| Rejection::field(Reason::InvalidField, &field("name"), m))?;
            let amount = positive_money(&field("amount"), &f.amount)?;
            let timing = FeeTiming::read(&field("timing"), &f.timing)?;
            let category = FeeCategory::read(&field("category"), &f.category)?;
            let lease = f
                .lease
                .as_deref()
                .map(|l| id(&field("lease"), l))
                .transpose()?;
            if lease.is_some() && timing == FeeTiming::Once {
                return Err(Rejection::field(
                    Reason::InvalidField,
                    &field("lease"),
                    "a one-off fee rents no lease over a period",
                ));
            }
            let included = match f.included {
                None => None,
                Some(list) => Some(included(i, lease.as_deref(), list, &seen)?),
            };
            for e in included.iter().flatten() {
                seen.push((lease.clone().unwrap_or_default(), e.gpu_model.clone()));
            }
            Ok(ContractFee {
                amount,
                timing,
                category,
                name: f.name,
                lease,
                included,
            })
        })
        .collect()
}

/// Fee `i`'s `included` entries: only with a `lease`, 1 to [`MAX_INCLUDED_MODELS`], each
/// (lease, model) at most once in the contract (`seen`: those of the fees before).
fn included(
    i: usize,
    lease: Option<&str>,
    list: Vec<IncludedWire>,
    seen: &[(String, String)],
) -> Result<Vec<Included>, Rejection> {
    let at = format!("body.fees[{i}].included");
    let Some(lease) = lease else {
        return Err(Rejection::field(
            Reason::InvalidField,
            &at,
            "included GPU-hours are of the lease a fee rents: name the fee's lease",
        ));
    };
    if list.is_empty() || list.len() > MAX_INCLUDED_MODELS {
        return Err(Rejection::field(
            Reason::InvalidField,
            &at,
            format!(
                "lists {} entries; 1 to {MAX_INCLUDED_MODELS} are allowed",
                list.len()
            ),
        ));
    }
    let mut out: Vec<Included> = Vec::with_capacity(list.len());
    for (j, e) in list.into_iter().enumerate() {
        let field = |m: &str| format!("{at}[{j}].{m}");
        let gpu_model = id(&field("gpu_model"), &e.gpu_model)?;
        let gpu_hours = money(&field("gpu_hours"), &e.gpu_hours)?;
        let overage_rate = money(&field("overage_rate"), &e.overage_rate)?;
        let twice = seen.iter().any(|(l, m)| l == lease && *m == gpu_model)
            || out.iter().any(|x| x.gpu_model == gpu_model);
        if twice {
            return Err(Rejection::field(
                Reason::InvalidField,
                &field("gpu_model"),
                format!("{gpu_model} of lease {lease} is already included in this contract"),
            ));
        }
        out.push(Included {
            gpu_model,
            gpu_hours,
            overage_rate,
        });
    }
    Ok(out)
}
