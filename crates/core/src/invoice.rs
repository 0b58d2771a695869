//! Invoices: what an issued invoice says, in one currency, for one tenant and period. Built from
//! rated lines (`core::rating`); rendered as JSON, CSV and PDF by the server's `invoice_render`.
//!
//! Two document versions exist (docs/PROTOCOL.md §11, §15). The log's `invoice_issued` entry
//! holds only a document's SHA-256 and total, so a new document version needs no new protocol
//! version:
//! - **version 2** ([`Invoice`], `"format": "gpuledger-invoice/v2"`), issued from now on:
//!   issuer and bill-to, payment terms and due date, lines in the unit they are priced in
//!   (GPU-hours, kWh) with the measured quantity alongside, tax per line, net, tax and gross
//!   totals ([`apply_tax`], the one rule for them);
//! - **version 1** ([`InvoiceV1`], no `format` member): the documents issued before; read and
//!   recomputed exactly as they always were.
//!
//! [`InvoiceDoc`] is either; [`from_json`] reads both.

mod contract_lines;
mod v1;

use super::record::{ContractRegistered, FeeCategory, FeeTiming};
pub use contract_lines::{
    contract_lines, drawn, draws_down, Commitment, ContractLines, Measurement, SplitPeriod,
    PERIOD_SHARE_DECIMALS,
};
pub use v1::{legacy_lines, InvoiceV1, LegacyLine};

use super::rating::{round_amount, LeaseClass, Line, LineKey, PriceBook, Rater, Series, Unpriced};
use super::record::Body;
use super::time::Timestamp;
use super::usage::{rollup_of, Rollup, RollupKey};
use rust_decimal::{Decimal, RoundingStrategy};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The `format` member of a version 2 invoice document.
pub const INVOICE_FORMAT_V2: &str = "gpuledger-invoice/v2";

/// Decimal places of a GPU line's `quantity` in GPU-hours (GPU-seconds ÷ 3600, rounded
/// half-even). Only the displayed quantity is rounded: `net` is computed from the exact
/// GPU-seconds.
pub const GPU_HOURS_DECIMALS: u32 = 6;

/// Decimal places of an energy line's `quantity` in billed kWh (measured kWh × PUE, rounded
/// half-even): the product of a 9-place measurement and a PUE can have more places than a
/// decimal on the wire may (docs/PROTOCOL.md §2.1). Only the displayed quantity is rounded:
/// `net` is computed from the exact product, and `measured_kwh` and `pue` are exact.
pub const BILLED_KWH_DECIMALS: u32 = 6;

/// What a line is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum LineKind {
    /// GPU time, priced per GPU-hour.
    Gpu,
    /// Energy, priced per billed kWh (measured kWh × PUE).
    Energy,
    /// A contract's fixed fee for a billing period (or a one-off charge).
    Fee,
    /// A contract's minimum commitment, the shortfall of the usage below it.
    TrueUp,
    /// A credit (a negative net) for a lease whose availability fell below its contract's SLA
    /// over a billing period: a share of the fee that rents it (docs/RATING.md, "SLA credits").
    SlaCredit,
    /// GPU time of a lease a contract fee includes, up to the fee's included GPU-hours (net 0;
    /// docs/RATING.md, "Included GPU-hours and overage").
    Included,
    /// GPU time of a lease a contract fee includes, above its included GPU-hours, at the
    /// contract's `overage_rate`.
    Overage,
}

impl LineKind {
    /// The wire name (`gpu`, `energy`).
    pub fn as_str(self) -> &'static str {
        match self {
            LineKind::Gpu => "gpu",
            LineKind::Energy => "energy",
            LineKind::Fee => "fee",
            LineKind::TrueUp => "true_up",
            LineKind::SlaCredit => "sla_credit",
            LineKind::Included => "included",
            LineKind::Overage => "overage",
        }
    }
}

/// The unit a line's `quantity` and `unit_price` are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Unit {
    /// GPU-hours.
    #[serde(rename = "GPU-h")]
    GpuHour,
    /// Kilowatt-hours.
    #[serde(rename = "kWh")]
    Kwh,
    /// Billing periods (a contract's lines: the share of the period a fee is for).
    #[serde(rename = "period")]
    Period,
}

impl Unit {
    /// The wire spelling (`GPU-h`, `kWh`).
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::GpuHour => "GPU-h",
            Unit::Kwh => "kWh",
            Unit::Period => "period",
        }
    }
}

/// A lease class for people: `On-demand`, `Reserved`, `Spot`.
pub fn class_label(class: LeaseClass) -> &'static str {
    match class {
        LeaseClass::OnDemand => "On-demand",
        LeaseClass::Reserved => "Reserved",
        LeaseClass::Spot => "Spot",
    }
}

/// One line of an invoice (version 2), and of an invoice preview: the one line schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct InvoiceLine {
    pub kind: LineKind,
    /// For people, e.g. "GPU compute, H100, cn-east, on-demand" ([`describe`]).
    pub description: String,
    pub region: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub class: Option<LeaseClass>,
    /// Graduated volume lines: the tenant's plan and the tier (from 1) the line is priced at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<u32>,
    /// In the unit it is priced in: GPU-hours (GPU-seconds ÷ 3600 rounded half-even to
    /// [`GPU_HOURS_DECIMALS`] places) for `gpu` lines, billed kWh (measured kWh × PUE, exact)
    /// for `energy` lines.
    #[serde(with = "decimal_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub quantity: Decimal,
    /// `GPU-h` or `kWh`.
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub unit: Unit,
    /// `gpu` lines: the exact measured GPU-seconds.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "opt_decimal_str"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::decimal::DecimalString>))]
    pub gpu_seconds: Option<Decimal>,
    /// `energy` lines: the exact measured kWh (before PUE).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "opt_decimal_str"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::decimal::DecimalString>))]
    pub measured_kwh: Option<Decimal>,
    /// `energy` lines: the PUE applied.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "opt_decimal_str"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::decimal::DecimalString>))]
    pub pue: Option<Decimal>,
    /// Price per GPU-hour (`gpu`) or per kWh (`energy`), in the invoice's currency.
    #[serde(with = "decimal_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub unit_price: Decimal,
    /// The line's net amount: its exact value from the exact measured quantity, rounded
    /// half-even once to the currency's minor unit (docs/RATING.md).
    #[serde(with = "money_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub net: Decimal,
    /// The tax's name (e.g. `VAT`); absent where no tax is configured for the region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tax_name: Option<String>,
    /// The tax rate as a decimal fraction (`0.06` for 6 %); `0` where none is configured.
    #[serde(with = "decimal_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub tax_rate: Decimal,
    /// round_half_even(net × tax_rate) to the currency's minor unit ([`apply_tax`]).
    #[serde(with = "money_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub tax: Decimal,
    /// net + tax.
    #[serde(with = "money_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub gross: Decimal,
    /// How many records the line rates.
    pub records: u64,
    /// Set on adjustment lines: the earlier period the late records belong to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adjustment_for: Option<Period>,
    /// `fee`, `sla_credit` and `true_up` lines: the contract that bills them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<String>,
    /// `fee` and `sla_credit` lines: what the fee is for (its FOCUS `ServiceCategory`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<FeeCategory>,
    /// `fee` lines: when the fee is billed (`advance`, `arrears`, `once`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<FeeTiming>,
    /// `fee` and `sla_credit` lines: the billing period (clipped to the term) the fee or the
    /// credit is for; a one-off fee's is the term.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_period: Option<Period>,
}

/// Who issues the invoices (the server's `[issuer]` settings).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Issuer {
    pub name: String,
    /// Postal address, one line per element.
    #[serde(default)]
    pub address: Vec<String>,
    /// Tax registration number (e.g. a unified social credit code, a VAT id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tax_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
}

/// Whom an invoice is addressed to: the tenant, its display name and billing address (from the
/// tenant's account, not the log).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BillTo {
    pub tenant: String,
    pub name: String,
    #[serde(default)]
    pub address: Vec<String>,
}

/// A tax of a region: its name and rate (a decimal fraction).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tax {
    pub name: Option<String>,
    pub rate: Decimal,
}

impl Tax {
    /// No tax configured: rate 0, no name.
    pub fn none() -> Self {
        Tax {
            name: None,
            rate: Decimal::ZERO,
        }
    }
}

/// Tax rates per region, with an optional default (`region = "*"` in the settings).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaxTable {
    pub by_region: BTreeMap<String, Tax>,
    pub default: Option<Tax>,
}

impl TaxTable {
    /// The tax of `region`: its own entry, else the default, else none (rate 0, no name).
    pub fn for_region(&self, region: &str) -> Tax {
        self.by_region
            .get(region)
            .or(self.default.as_ref())
            .cloned()
            .unwrap_or_else(Tax::none)
    }
}

/// An invoice's three totals ([`apply_tax`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// Σ net.
    pub net: Decimal,
    /// Σ tax.
    pub tax: Decimal,
    /// Σ gross (= net + tax): what the `invoice_issued` entry records and balances use.
    pub gross: Decimal,
}

/// **The** rule for tax, gross and totals, used by the ledger to issue (and preview) and by
/// [`InvoiceCheck`] to recompute: for each line, `tax` = round_half_even(net × tax_rate) to the
/// currency's minor unit and `gross` = net + tax; then net, tax and gross totals are the exact
/// sums of the lines' (with exactly the minor unit's digits, also when there are no lines).
pub fn apply_tax(lines: &mut [InvoiceLine], currency: &str) -> Totals {
    let zero = round_amount(Decimal::ZERO, currency);
    let mut t = Totals {
        net: zero,
        tax: zero,
        gross: zero,
    };
    for l in lines.iter_mut() {
        l.tax = round_amount(l.net * l.tax_rate, currency);
        l.gross = round_amount(l.net + l.tax, currency);
        t.net += l.net;
        t.tax += l.tax;
        t.gross += l.gross;
    }
    assert_eq!(
        t.net + t.tax,
        t.gross,
        "gross total = net total + tax total"
    );
    debug_assert_eq!(
        (t.net, t.tax, t.gross),
        (
            lines.iter().map(|l| l.net).sum::<Decimal>(),
            lines.iter().map(|l| l.tax).sum::<Decimal>(),
            lines.iter().map(|l| l.gross).sum::<Decimal>(),
        ),
        "an invoice's totals are the sums of its lines"
    );
    t
}

/// The description of a line for people, e.g. "GPU compute, H100, cn-east, on-demand" or
/// "Electricity, cn-east, PUE 1.08"; tier lines name their plan and tier.
pub fn describe(key: &LineKey) -> String {
    match key {
        LineKey::Gpu {
            region,
            gpu_model,
            class,
            tier,
            ..
        } => {
            let mut s = format!(
                "GPU compute, {gpu_model}, {region}, {}",
                class_label(*class).to_lowercase()
            );
            if let Some(t) = tier {
                s.push_str(&format!(", volume tier {} of plan {}", t.tier, t.plan));
            }
            s
        }
        LineKey::Energy { region, pue, .. } => format!(
            "Electricity, {region}, PUE {}",
            super::decimal::to_canonical(*pue)
        ),
    }
}

/// GPU-seconds in GPU-hours, rounded half-even to [`GPU_HOURS_DECIMALS`] places.
pub fn gpu_hours(gpu_seconds: Decimal) -> Decimal {
    (gpu_seconds / Decimal::from(3600))
        .round_dp_with_strategy(GPU_HOURS_DECIMALS, RoundingStrategy::MidpointNearestEven)
        .normalize()
}

/// The billed kWh shown on an energy line: `measured_kwh` × `pue`, rounded half-even to
/// [`BILLED_KWH_DECIMALS`] places.
pub fn billed_kwh(measured_kwh: Decimal, pue: Decimal) -> Decimal {
    (measured_kwh * pue)
        .round_dp_with_strategy(BILLED_KWH_DECIMALS, RoundingStrategy::MidpointNearestEven)
        .normalize()
}

/// Version 2 lines from rated lines, taxed by `tax` per region (tax and gross still zero:
/// [`apply_tax`] sets them). A line whose measured quantity is zero is left out.
pub fn lines_v2(lines: Vec<RatedLine>, tax: &dyn Fn(&str) -> Tax) -> Vec<InvoiceLine> {
    lines
        .into_iter()
        .filter(|r| !r.line.quantity.is_zero())
        .map(|r| line_v2(r, tax))
        .collect()
}

/// One version 2 line from a rated line, taxed by `tax` of its region (tax and gross still
/// zero: [`apply_tax`] sets them): GPU lines in GPU-hours, energy lines in billed kWh.
fn line_v2(rated: RatedLine, tax: &dyn Fn(&str) -> Tax) -> InvoiceLine {
    let RatedLine {
        line: l,
        adjustment_for,
    } = rated;
    let description = describe(&l.key);
    let (quantity, net, records) = (l.quantity, l.amount, l.records);
    // The members every line has; each kind then sets what it measures and its price.
    let line = |kind: LineKind, unit: Unit, region: String| {
        let t = tax(&region);
        InvoiceLine {
            kind,
            description,
            region,
            gpu_model: None,
            class: None,
            plan: None,
            tier: None,
            quantity: Decimal::ZERO,
            unit,
            gpu_seconds: None,
            measured_kwh: None,
            pue: None,
            unit_price: Decimal::ZERO,
            net,
            tax_name: t.name,
            tax_rate: t.rate.normalize(),
            tax: Decimal::ZERO,
            gross: Decimal::ZERO,
            records,
            adjustment_for,
            contract: None,
            category: None,
            timing: None,
            service_period: None,
        }
    };
    match l.key {
        LineKey::Gpu {
            region,
            gpu_model,
            class,
            unit_price_per_gpu_hour,
            tier,
        } => {
            let (plan, tier) = tier.map_or((None, None), |t| (Some(t.plan), Some(t.tier)));
            InvoiceLine {
                gpu_model: Some(gpu_model),
                class: Some(class),
                plan,
                tier,
                quantity: gpu_hours(quantity),
                gpu_seconds: Some(quantity),
                unit_price: unit_price_per_gpu_hour,
                ..line(LineKind::Gpu, Unit::GpuHour, region)
            }
        }
        LineKey::Energy {
            region,
            unit_price_per_kwh,
            pue,
        } => InvoiceLine {
            quantity: billed_kwh(quantity, pue),
            measured_kwh: Some(quantity),
            pue: Some(pue),
            unit_price: unit_price_per_kwh,
            ..line(LineKind::Energy, Unit::Kwh, region)
        },
    }
}

/// A rated line and, on adjustment lines, the earlier period its late records belong to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RatedLine {
    pub line: Line,
    pub adjustment_for: Option<Period>,
}

/// A half-open period `[from, to)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Period {
    pub from: Timestamp,
    pub to: Timestamp,
}

impl Period {
    /// Whether `t` is in `[from, to)`.
    pub fn contains(&self, t: Timestamp) -> bool {
        (self.from..self.to).contains(&t)
    }

    /// Whether the two periods share an instant.
    pub fn overlaps(&self, other: &Period) -> bool {
        self.from < other.to && other.from < self.to
    }

    /// The parts of this period that none of `taken` covers, in order.
    pub fn uncovered(&self, taken: &[Period]) -> Vec<Period> {
        let mut cuts: Vec<&Period> = taken.iter().filter(|p| p.overlaps(self)).collect();
        cuts.sort_by_key(|p| p.from);
        let mut out = Vec::new();
        let mut at = self.from;
        for p in cuts {
            if at < p.from {
                out.push(Period {
                    from: at,
                    to: p.from,
                });
            }
            at = at.max(p.to);
        }
        if at < self.to {
            out.push(Period {
                from: at,
                to: self.to,
            });
        }
        out
    }
}

/// Which of a tenant's records an invoice for `period` rates, and how (docs/RATING.md, "Late
/// records"). The one rule the ledger issues invoices by, writes their bundles by, and the
/// verifier recomputes them by.
#[derive(Debug, Clone)]
pub struct InvoiceScope {
    /// The invoice's own period.
    pub period: Period,
    /// The tenant's invoices issued before this one: their periods.
    pub earlier: Vec<Period>,
    /// The log size of the last earlier invoice: records below it were invoiced already.
    pub since: u64,
    /// The records excluded from rating (the tenant's `record_excluded` entries below the
    /// invoice's checkpoint, docs/PROTOCOL.md §5.17): entry → reason.
    pub excluded: BTreeMap<u64, String>,
}

/// Where one of the tenant's records goes on an invoice ([`InvoiceScope::place`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// It starts in the invoice's period: a line of the invoice.
    Period,
    /// It starts in an earlier invoiced period and was logged after the last invoice: an
    /// adjustment line for that period.
    Late(Period),
    /// It starts in an earlier invoiced period and was invoiced already: it only counts toward
    /// that period's volume tiers, which late records continue from.
    Invoiced(Period),
    /// It would go on the invoice (`Period` or `Late`) but is excluded from rating: listed as
    /// excluded, rated nowhere.
    Excluded,
    /// It starts in no period the invoice covers (or it is excluded, and would only have
    /// continued an invoiced period's count).
    Outside,
}

impl InvoiceScope {
    /// The scope of an invoice for `period`, after earlier invoices given as (period, log size
    /// they were computed at).
    pub fn new(period: Period, earlier: impl IntoIterator<Item = (Period, u64)>) -> Self {
        let (earlier, sizes): (Vec<Period>, Vec<u64>) = earlier.into_iter().unzip();
        InvoiceScope {
            period,
            earlier,
            since: sizes.into_iter().max().unwrap_or(0),
            excluded: BTreeMap::new(),
        }
    }

    /// The scope with the records of `excluded` (entry, reason) excluded from rating.
    pub fn excluding(mut self, excluded: impl IntoIterator<Item = (u64, String)>) -> Self {
        self.excluded.extend(excluded);
        self
    }

    /// Where the record at log `index`, whose interval starts at `start`, goes.
    pub fn place(&self, index: u64, start: Timestamp) -> Placement {
        let placement = if self.period.contains(start) {
            Placement::Period
        } else {
            match self.earlier.iter().find(|p| p.contains(start)) {
                Some(p) if index >= self.since => Placement::Late(*p),
                Some(p) => Placement::Invoiced(*p),
                None => Placement::Outside,
            }
        };
        if !self.excluded.contains_key(&index) {
            return placement;
        }
        match placement {
            Placement::Period | Placement::Late(_) => Placement::Excluded,
            _ => Placement::Outside,
        }
    }

    /// Whether an invoice's evidence bundle holds the record: everything it rates, and, when
    /// volume tiers are logged (`tiered`), the invoiced records its adjustments count from.
    pub fn in_bundle(&self, index: u64, start: Timestamp, tiered: bool) -> bool {
        match self.place(index, start) {
            Placement::Period | Placement::Late(_) | Placement::Excluded => true,
            Placement::Invoiced(_) => tiered,
            Placement::Outside => false,
        }
    }
}

/// The interval start of a usage or energy record; `None` for other kinds.
pub fn record_start(body: &super::record::Body) -> Option<Timestamp> {
    match body {
        super::record::Body::GpuUsage(u) => Some(u.start),
        super::record::Body::Energy(e) => Some(e.start),
        _ => None,
    }
}

/// The rating of one invoice: the period's records and each earlier period's late records,
/// placed by an [`InvoiceScope`].
pub struct InvoiceRating {
    scope: InvoiceScope,
    /// The leases whose availability the invoice judges (SLAs), fed the period's records, and
    /// the contract-priced records (included GPU-hours), kept from the rate card.
    measurement: Measurement,
    main: Rater,
    late: BTreeMap<Period, Rater>,
    excluded: Vec<ExcludedRecord>,
    /// The rollup buckets holding a record excluded from rating (never rated whole).
    excluded_buckets: BTreeSet<RollupKey>,
}

/// What an [`InvoiceRating`] came to, per currency. Equal when every member is equal in value
/// (decimals compare by value, whatever their scale).
#[derive(Debug, PartialEq, Eq)]
pub struct Rated {
    /// The invoice period's lines.
    pub lines: BTreeMap<String, Vec<RatedLine>>,
    /// The adjustment lines of late records, per currency.
    pub adjustments: BTreeMap<String, Vec<RatedLine>>,
    /// Usage that no price in force priced (the invoice's period first, then late records).
    pub unpriced: Vec<(Option<Period>, Vec<Unpriced>)>,
    /// The records excluded from rating, by increasing entry.
    pub excluded: Vec<ExcludedRecord>,
    /// What the usage records show present of the leases watched, and the contract-priced
    /// records' GPU-seconds (not in `lines` nor `adjustments`).
    pub measurement: Measurement,
}

impl InvoiceRating {
    /// Starts rating an invoice of `scope`.
    pub fn new(scope: InvoiceScope) -> Self {
        InvoiceRating {
            main: Rater::new(scope.period.from),
            measurement: Default::default(),
            scope,
            late: BTreeMap::new(),
            excluded: Vec::new(),
            excluded_buckets: BTreeSet::new(),
        }
    }

    /// Notes the bodies of the scope's excluded records (any order, any subset holding those
    /// in the period): their rollup buckets are never rated whole ([`Self::add_bucket`]).
    pub fn excluded_bodies<'a>(mut self, bodies: impl IntoIterator<Item = &'a Body>) -> Self {
        self.excluded_buckets.extend(
            bodies
                .into_iter()
                .filter_map(|b| rollup_of(b).map(|(k, _)| k)),
        );
        self
    }

    /// Rates the records of a rollup bucket (`key`, `sums`: docs/ARCHITECTURE.md, the usage
    /// rollups) whole, exactly as [`Self::add`] would rate them one by one, when that is
    /// certain: its hour lies inside the invoice's period (every record of it is placed in the
    /// period, whatever its index), none of its records is excluded ([`Self::excluded_bodies`]),
    /// and all of them are measured alike ([`Measurement::measures_alike`]: one SLA span, one
    /// included entry and billing period) and priced alike ([`Rater::add_usage_sum`]: one
    /// price throughout; energy: one set of region parameters through the hour). Returns true
    /// when rated; false, having changed nothing, when the caller must add its records one by
    /// one.
    pub fn add_bucket(&mut self, book: &PriceBook, key: &RollupKey, sums: &Rollup) -> bool {
        let Some((from, to)) = key.hour_span() else {
            return false;
        };
        let period = self.scope.period;
        if from < period.from || period.to < to || self.excluded_buckets.contains(key) {
            return false;
        }
        if key.kind == "energy" {
            if !book.region_throughout(&key.region, from, to) {
                return false;
            }
            self.main
                .add_energy_sum(book, &key.region, from, sums.quantity, sums.records);
            return true;
        }
        let series = Series {
            tenant: &key.tenant,
            region: &key.region,
            gpu_model: &key.gpu_model,
            lease: key.lease(),
        };
        let Some(by_contract) = self
            .measurement
            .measures_alike(&series, (from, to), sums.last_end)
        else {
            return false;
        };
        if !by_contract
            && !self.main.add_usage_sum(
                book,
                &series,
                (from, sums.last_end),
                sums.quantity,
                sums.records,
            )
        {
            return false;
        }
        self.measurement
            .add_sum(&series, from, sums.quantity, sums.records);
        true
    }

    /// Measures what `measurement` watches (built for the scope's period from the tenant's
    /// contracts): the usage records the invoice rates in its own period count toward the
    /// availability of the leases its presence watches, and the records its metering finds
    /// contract-priced are priced by their contracts, not by the rate card.
    pub fn measuring(mut self, measurement: Measurement) -> Self {
        self.measurement = measurement;
        self
    }

    /// The scope the records are placed by.
    pub fn scope(&self) -> &InvoiceScope {
        &self.scope
    }

    /// Rates the tenant's record at log `index` where [`InvoiceScope::place`] puts it, with the
    /// prices of `book`; returns the placement (`Outside` adds nothing).
    pub fn add(&mut self, book: &PriceBook, index: u64, body: &super::record::Body) -> Placement {
        use super::record::Body;
        let Some(start) = record_start(body) else {
            return Placement::Outside;
        };
        let placement = self.scope.place(index, start);
        let rater = match placement {
            Placement::Period => &mut self.main,
            Placement::Late(p) | Placement::Invoiced(p) => {
                self.late.entry(p).or_insert_with(|| Rater::new(p.from))
            }
            Placement::Excluded => {
                self.excluded.push(ExcludedRecord {
                    entry: index,
                    reason: self.scope.excluded[&index].clone(),
                });
                return placement;
            }
            Placement::Outside => return placement,
        };
        match (placement, body) {
            // A contract-priced record counts toward no volume tier.
            (Placement::Invoiced(_), Body::GpuUsage(u)) if self.measurement.metering.prices(u) => {}
            (Placement::Invoiced(_), Body::GpuUsage(u)) => rater.add_invoiced_usage(book, u),
            (Placement::Invoiced(_), _) => {}
            (_, Body::GpuUsage(u)) => {
                let late = match placement {
                    Placement::Late(p) => Some(p),
                    _ => None,
                };
                if !self.measurement.add(u, late) {
                    rater.add_usage(book, u)
                }
            }
            (_, Body::Energy(e)) => rater.add_energy(book, e),
            _ => {}
        }
        placement
    }

    /// The rated lines per currency (rounded once per line, docs/RATING.md).
    pub fn finish(self) -> Rated {
        let (main, unpriced) = self.main.finish();
        let mut rated = Rated {
            lines: main
                .into_iter()
                .map(|(c, l)| (c, rated_lines(l, None)))
                .collect(),
            adjustments: BTreeMap::new(),
            unpriced: Vec::new(),
            excluded: self.excluded,
            measurement: self.measurement,
        };
        rated.excluded.sort_by_key(|x| x.entry);
        rated.excluded.dedup_by_key(|x| x.entry);
        if !unpriced.is_empty() {
            rated.unpriced.push((None, unpriced));
        }
        for (p, r) in self.late {
            let (lines, unpriced) = r.finish();
            if !unpriced.is_empty() {
                rated.unpriced.push((Some(p), unpriced));
            }
            for (currency, l) in lines {
                let adj = rated.adjustments.entry(currency).or_default();
                adj.extend(rated_lines(l, Some(p)));
            }
        }
        rated
    }
}

impl Rated {
    /// The invoice period's lines per currency (adjustments left out) and its unpriced usage:
    /// what a preview of the period shows.
    pub fn period_lines(self) -> (BTreeMap<String, Vec<Line>>, Vec<Unpriced>) {
        let lines = self
            .lines
            .into_iter()
            .map(|(c, l)| (c, l.into_iter().map(|r| r.line).collect()))
            .collect();
        let unpriced = self
            .unpriced
            .into_iter()
            .filter(|(p, _)| p.is_none())
            .flat_map(|(_, u)| u)
            .collect();
        (lines, unpriced)
    }
}

/// An issued invoice, document version 2 (`"format": "gpuledger-invoice/v2"`). Immutable once
/// issued: the SHA-256 of its RFC 8785 JSON, and its `total`, are recorded in the log's
/// `invoice_issued` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Invoice {
    /// `gpuledger-invoice/v2`.
    pub format: String,
    pub number: String,
    pub tenant: String,
    pub period: Period,
    pub currency: String,
    pub issued_at: Timestamp,
    /// The log's origin and the checkpoint (size and base64 root) the invoice was computed at.
    pub log_origin: String,
    pub checkpoint_size: u64,
    pub checkpoint_root: String,
    pub issuer: Issuer,
    pub bill_to: BillTo,
    /// Days from `issued_at` to `due_at`.
    pub payment_terms_days: u32,
    /// `issued_at` + `payment_terms_days` days.
    pub due_at: Timestamp,
    /// Lines of the period, then adjustment lines for earlier periods.
    pub lines: Vec<InvoiceLine>,
    /// Σ net of the lines.
    #[serde(with = "money_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub net_total: Decimal,
    /// Σ tax of the lines.
    #[serde(with = "money_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub tax_total: Decimal,
    /// Σ gross of the lines: what the `invoice_issued` entry records and balances use.
    #[serde(with = "money_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub total: Decimal,
    /// The records the invoice would have rated but that are excluded from rating (disputes,
    /// docs/PROTOCOL.md §5.17), by increasing entry; absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excluded: Vec<ExcludedRecord>,
    /// The commitments of the tenant's contracts over the period (docs/RATING.md,
    /// "Contracts"); absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commitments: Vec<Commitment>,
    /// The availability of the leases of the tenant's contracts with an SLA over the billing
    /// periods the invoice holds (docs/RATING.md, "SLA credits"); absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub availability: Vec<crate::sla::Availability>,
    /// The included GPU-hours of the tenant's contracts over the billing periods the invoice
    /// holds, used and above (docs/RATING.md, "Included GPU-hours and overage"); absent when
    /// none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowances: Vec<crate::allowance::Allowance>,
    /// What the tenant's prepaid lots paid of `total`, in drawing order (docs/RATING.md,
    /// "Prepaid balances"); absent when nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prepaid: Vec<crate::prepaid::PrepaidDraw>,
    /// `total` − Σ `prepaid`: what is left to pay; absent when nothing was drawn.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::decimal::money_str_option"
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::decimal::DecimalString>))]
    pub amount_due: Option<Decimal>,
}

/// A record left out of an invoice by a `record_excluded` entry: its log index and the
/// exclusion's reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ExcludedRecord {
    pub entry: u64,
    pub reason: String,
}

impl Invoice {
    /// The totals its lines add up to ([`apply_tax`] recomputed on a copy).
    pub fn sum_of_lines(&self) -> Totals {
        let mut lines = self.lines.clone();
        apply_tax(&mut lines, &self.currency)
    }

    /// Whether the three totals, each line's tax and gross, and `due_at` are what the rules
    /// make of the lines.
    pub fn is_consistent(&self) -> bool {
        let mut lines = self.lines.clone();
        let t = apply_tax(&mut lines, &self.currency);
        lines == self.lines
            && (t.net, t.tax, t.gross) == (self.net_total, self.tax_total, self.total)
            && due_at(self.issued_at, self.payment_terms_days) == Some(self.due_at)
    }
}

/// `issued_at` + `days` whole days (`None` past the timestamp range).
pub fn due_at(issued_at: Timestamp, days: u32) -> Option<Timestamp> {
    Timestamp::from_unix(issued_at.unix().checked_add(i64::from(days) * 86_400)?)
}

/// What every invoice document says about where it sits in the log: enough to write and
/// check its evidence bundle. Implemented by both versions and by [`InvoiceDoc`].
pub trait InvoiceHeader {
    /// `INV-nnnnnn`.
    fn number(&self) -> &str;
    /// The tenant invoiced.
    fn tenant(&self) -> &str;
    /// The invoiced period.
    fn period(&self) -> Period;
    /// The log's origin.
    fn log_origin(&self) -> &str;
    /// The log size the invoice was computed at.
    fn checkpoint_size(&self) -> u64;
}

macro_rules! invoice_header {
    ($t:ty) => {
        impl InvoiceHeader for $t {
            fn number(&self) -> &str {
                &self.number
            }
            fn tenant(&self) -> &str {
                &self.tenant
            }
            fn period(&self) -> Period {
                self.period
            }
            fn log_origin(&self) -> &str {
                &self.log_origin
            }
            fn checkpoint_size(&self) -> u64 {
                self.checkpoint_size
            }
        }
    };
}
invoice_header!(Invoice);
invoice_header!(InvoiceV1);

impl InvoiceHeader for InvoiceDoc {
    fn number(&self) -> &str {
        InvoiceDoc::number(self)
    }
    fn tenant(&self) -> &str {
        InvoiceDoc::tenant(self)
    }
    fn period(&self) -> Period {
        InvoiceDoc::period(self)
    }
    fn log_origin(&self) -> &str {
        InvoiceDoc::log_origin(self)
    }
    fn checkpoint_size(&self) -> u64 {
        InvoiceDoc::checkpoint_size(self)
    }
}

impl From<Invoice> for InvoiceDoc {
    fn from(i: Invoice) -> Self {
        InvoiceDoc::V2(i)
    }
}

impl From<InvoiceV1> for InvoiceDoc {
    fn from(i: InvoiceV1) -> Self {
        InvoiceDoc::V1(i)
    }
}

/// The label of version 1 documents (which have no `format` member) in views of them.
pub const INVOICE_FORMAT_V1: &str = "gpuledger-invoice/v1";

/// An invoice document of either version, as stored and served.
// One document is held at a time (per request, per verification); boxing would only add an
// allocation and a dereference to every use.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InvoiceDoc {
    /// Issued before version 2 (no `format` member).
    V1(InvoiceV1),
    /// `gpuledger-invoice/v2`.
    V2(Invoice),
}

impl InvoiceDoc {
    pub fn number(&self) -> &str {
        match self {
            InvoiceDoc::V1(i) => &i.number,
            InvoiceDoc::V2(i) => &i.number,
        }
    }
    pub fn tenant(&self) -> &str {
        match self {
            InvoiceDoc::V1(i) => &i.tenant,
            InvoiceDoc::V2(i) => &i.tenant,
        }
    }
    pub fn period(&self) -> Period {
        match self {
            InvoiceDoc::V1(i) => i.period,
            InvoiceDoc::V2(i) => i.period,
        }
    }
    pub fn currency(&self) -> &str {
        match self {
            InvoiceDoc::V1(i) => &i.currency,
            InvoiceDoc::V2(i) => &i.currency,
        }
    }
    /// What the `invoice_issued` entry records: the sum of the amounts (v1) or of the gross
    /// amounts (v2).
    pub fn total(&self) -> Decimal {
        match self {
            InvoiceDoc::V1(i) => i.total,
            InvoiceDoc::V2(i) => i.total,
        }
    }
    pub fn issued_at(&self) -> Timestamp {
        match self {
            InvoiceDoc::V1(i) => i.issued_at,
            InvoiceDoc::V2(i) => i.issued_at,
        }
    }
    pub fn log_origin(&self) -> &str {
        match self {
            InvoiceDoc::V1(i) => &i.log_origin,
            InvoiceDoc::V2(i) => &i.log_origin,
        }
    }
    pub fn checkpoint_size(&self) -> u64 {
        match self {
            InvoiceDoc::V1(i) => i.checkpoint_size,
            InvoiceDoc::V2(i) => i.checkpoint_size,
        }
    }
    pub fn checkpoint_root(&self) -> &str {
        match self {
            InvoiceDoc::V1(i) => &i.checkpoint_root,
            InvoiceDoc::V2(i) => &i.checkpoint_root,
        }
    }
    pub fn line_count(&self) -> usize {
        match self {
            InvoiceDoc::V1(i) => i.lines.len(),
            InvoiceDoc::V2(i) => i.lines.len(),
        }
    }

    /// The document as a version 2 view, for rendering and exports (never for hashing): a
    /// version 2 document as it is; a version 1 document with its lines in the version 2
    /// schema (GPU-hours with the GPU-seconds alongside, billed kWh with the measured kWh and
    /// PUE, `net` = its amount, no tax), `format` [`INVOICE_FORMAT_V1`], no issuer (empty
    /// name), the tenant id as bill-to name, and no payment terms (`due_at` = `issued_at`).
    pub fn view(&self) -> std::borrow::Cow<'_, Invoice> {
        match self {
            InvoiceDoc::V2(i) => std::borrow::Cow::Borrowed(i),
            InvoiceDoc::V1(i) => std::borrow::Cow::Owned(i.view()),
        }
    }

    /// The version 2 document, if it is one.
    pub fn into_v2(self) -> Option<Invoice> {
        match self {
            InvoiceDoc::V2(i) => Some(i),
            InvoiceDoc::V1(_) => None,
        }
    }

    /// The document's JSON value, exactly as it serialises.
    pub fn to_value(&self) -> serde_json::Value {
        match self {
            InvoiceDoc::V1(i) => serde_json::to_value(i),
            InvoiceDoc::V2(i) => serde_json::to_value(i),
        }
        .expect("invoices serialise: string keys, strings and integers only")
    }
}

/// Reads an invoice document of either version back from its JSON (as stored and served):
/// with `"format": "gpuledger-invoice/v2"` version 2 (unknown members refused); without a
/// `format` member version 1, read exactly as before; any other `format` refused.
pub fn from_json(json: &str) -> Result<InvoiceDoc, String> {
    let value: serde_json::Value =
        crate::json::parse_strict(json.as_bytes()).map_err(|e| e.to_string())?;
    match value.get("format") {
        None => v1::from_value(value).map(InvoiceDoc::V1),
        Some(serde_json::Value::String(f)) if f == INVOICE_FORMAT_V2 => {
            let inv: Invoice = serde_json::from_value(value).map_err(|e| e.to_string())?;
            Ok(InvoiceDoc::V2(inv))
        }
        Some(f) => Err(format!(
            "unknown invoice format {f}; this verifier reads {INVOICE_FORMAT_V2} and version 1"
        )),
    }
}

/// Canonical decimal strings (`core::decimal`), read strictly.
pub(crate) mod decimal_str {
    use rust_decimal::Decimal;
    pub fn serialize<S: serde::Serializer>(d: &Decimal, s: S) -> Result<S::Ok, S::Error> {
        crate::decimal::serialize(d, s)
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Decimal, D::Error> {
        let s: String = serde::Deserialize::deserialize(d)?;
        crate::decimal::parse_canonical(&s).map_err(serde::de::Error::custom)
    }
}

/// Optional canonical decimal strings.
pub(crate) mod opt_decimal_str {
    use rust_decimal::Decimal;
    pub fn serialize<S: serde::Serializer>(d: &Option<Decimal>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => crate::decimal::serialize(d, s),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Decimal>, D::Error> {
        let s: Option<String> = serde::Deserialize::deserialize(d)?;
        s.map(|s| crate::decimal::parse_canonical(&s).map_err(serde::de::Error::custom))
            .transpose()
    }
}

use crate::decimal::money_str;

/// Rated lines of one group (the period's, or one earlier period's late records).
fn rated_lines(lines: Vec<Line>, adjustment_for: Option<Period>) -> Vec<RatedLine> {
    lines
        .into_iter()
        .map(|line| RatedLine {
            line,
            adjustment_for,
        })
        .collect()
}

/// Recomputes an issued invoice (either version) from an evidence bundle (docs/PROTOCOL.md
/// §15, last paragraph): prices from the context's pricing entries, the tenant's earlier
/// invoices from its `invoice_issued` entries, lines from the records, exactly as the ledger
/// rated them; for version 2, then each line's declared tax rate applied by [`apply_tax`].
pub struct InvoiceCheck {
    invoice: InvoiceDoc,
    book: PriceBook,
    earlier: Vec<(Period, u64)>,
    /// The tenant's exclusions in the context: entry → reason.
    excluded: BTreeMap<u64, String>,
    /// The tenant's contracts in the context, as amended there.
    contracts: crate::contract::Contracts,
    /// The tenant's leases in the context (for the SLAs' leased GPU-seconds).
    leases: BTreeMap<String, crate::record::LeaseRegistered>,
    /// The tenant's prepaid lots and what its earlier invoices drew from them.
    prepaid: crate::prepaid::PrepaidBook,
    /// Set by the first record: the scope is known once the context (the earlier invoices)
    /// has been read.
    rating: Option<InvoiceRating>,
}

impl InvoiceCheck {
    /// Checks that the bundle is the invoice's (subject, checkpoint size and root) and starts.
    pub fn start(
        invoice: impl Into<InvoiceDoc>,
        header: &super::bundle::Header,
        anchor: &super::bundle::Anchor,
    ) -> Result<Self, super::bundle::Failure> {
        use super::bundle::{BundleSubject, Failure, Reason};
        let invoice = invoice.into();
        let mismatch = |m: &str| Err(Failure::new(Reason::CheckpointMismatch, "invoice", m));
        if header.subject != BundleSubject::Invoice(invoice.number().to_owned()) {
            return mismatch("the bundle is not for this invoice");
        }
        if invoice.checkpoint_size() != anchor.size()
            || invoice.checkpoint_root() != super::merkle::encode_hash(&anchor.root())
            || invoice.log_origin() != anchor.checkpoint.origin()
        {
            return mismatch("its checkpoint is not the bundle's");
        }
        Ok(InvoiceCheck {
            invoice,
            book: Default::default(),
            earlier: Vec::new(),
            excluded: BTreeMap::new(),
            contracts: Default::default(),
            leases: BTreeMap::new(),
            prepaid: Default::default(),
            rating: None,
        })
    }

    /// The invoice's lines and totals, recomputed, must equal the invoice's; `claim_mismatch`
    /// names the first field that differs (`lines[3].tax`, `tax_total`, `due_at`, ...).
    pub fn finish(mut self) -> Result<InvoiceDoc, super::bundle::Failure> {
        use super::bundle::{Failure, Reason};
        let fail = |item: String, m: &str| Failure::new(Reason::ClaimMismatch, item, m);
        let rating = self.rating.take().unwrap_or_else(|| self.start_rating());
        let mut rated = rating.finish();
        if rated.unpriced.first().is_some_and(|(p, _)| p.is_none()) {
            return Err(fail(
                "invoice".into(),
                "the bundle's prices leave some of the period's usage unpriced",
            ));
        }
        let c = self.invoice.currency().to_owned();
        let period_lines = rated.lines.remove(&c).unwrap_or_default();
        let adjustments = rated.adjustments.remove(&c).unwrap_or_default();
        let recomputed = match &self.invoice {
            InvoiceDoc::V1(inv) => {
                let mut lines = period_lines;
                lines.extend(adjustments);
                InvoiceDoc::V1(inv.recomputed(lines))
            }
            InvoiceDoc::V2(inv) => {
                let mut lines = lines_v2(period_lines, &|_| Tax::none());
                let contract = contract_lines(
                    self.contracts.all(),
                    inv.period,
                    &c,
                    &lines,
                    &rated.measurement,
                    &|_| Tax::none(),
                    true,
                )
                .map_err(|e| fail("period".into(), &e.to_string()))?;
                lines.extend(contract.lines);
                lines.extend(lines_v2(adjustments, &|_| Tax::none()));
                // The rates are the issuer's declaration; the log proves usage and net prices.
                // A rate is a fraction from 0 to 1 (as `serve` accepts them), so the tax of any
                // line stays within the decimals' range: a crafted rate is named, not computed.
                for (i, (l, claimed)) in lines.iter_mut().zip(&inv.lines).enumerate() {
                    if !(Decimal::ZERO..=Decimal::ONE).contains(&claimed.tax_rate) {
                        return Err(fail(
                            format!("lines[{i}].tax_rate"),
                            "a tax rate is a fraction from 0 to 1",
                        ));
                    }
                    l.tax_name.clone_from(&claimed.tax_name);
                    l.tax_rate = claimed.tax_rate;
                }
                let t = apply_tax(&mut lines, &c);
                let prepaid = self.prepaid.draws(
                    &inv.tenant,
                    &c,
                    t.gross,
                    inv.checkpoint_size,
                    inv.issued_at,
                );
                let recomputed = Invoice {
                    amount_due: crate::prepaid::amount_due(t.gross, &prepaid, &c),
                    prepaid,
                    lines,
                    excluded: std::mem::take(&mut rated.excluded),
                    commitments: contract.commitments,
                    availability: contract.availability,
                    allowances: contract.allowances,
                    net_total: t.net,
                    tax_total: t.tax,
                    total: t.gross,
                    due_at: due_at(inv.issued_at, inv.payment_terms_days).ok_or_else(|| {
                        fail("due_at".into(), "the payment terms run past year 9999")
                    })?,
                    format: INVOICE_FORMAT_V2.to_owned(),
                    ..inv.clone()
                };
                debug_assert!(
                    recomputed.is_consistent(),
                    "a recomputed invoice's totals are the sums of its lines"
                );
                InvoiceDoc::V2(recomputed)
            }
        };
        let (claimed, computed) = (self.invoice.to_value(), recomputed.to_value());
        if let Some(item) = first_difference(&claimed, &computed) {
            return Err(fail(
                item,
                "the invoice differs from what the bundle recomputes",
            ));
        }
        Ok(recomputed)
    }
}

/// The path of the first member where two invoice values differ: at the first position i
/// where the lines differ, `lines[i].member`, or `lines[i]` (one side has no line there, or a
/// line is not an object); else the first differing top-level member.
fn first_difference(a: &serde_json::Value, b: &serde_json::Value) -> Option<String> {
    use serde_json::Value;
    if a == b {
        return None;
    }
    let empty = Vec::new();
    let lines = |v: &Value| v["lines"].as_array().unwrap_or(&empty).clone();
    let (la, lb) = (lines(a), lines(b));
    if let Some(i) = (0..la.len().max(lb.len())).find(|&i| la.get(i) != lb.get(i)) {
        return Some(match (la.get(i), lb.get(i)) {
            (Some(Value::Object(x)), Some(Value::Object(y))) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                keys.into_iter()
                    .find(|k| x.get(*k) != y.get(*k))
                    .map_or(format!("lines[{i}]"), |k| format!("lines[{i}].{k}"))
            }
            _ => format!("lines[{i}]"),
        });
    }
    // Totals first (the fields the rules compute), then any other member.
    let order = [
        "net_total",
        "tax_total",
        "total",
        "due_at",
        "prepaid",
        "amount_due",
    ];
    let (Value::Object(x), Value::Object(y)) = (a, b) else {
        return Some("invoice".into());
    };
    let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
    order
        .iter()
        .map(|k| k.to_string())
        .find(|k| x.get(k) != y.get(k))
        .or_else(|| keys.into_iter().find(|k| x.get(*k) != y.get(*k)).cloned())
}

impl InvoiceCheck {
    fn start_rating(&self) -> InvoiceRating {
        let period = self.invoice.period();
        let presence = crate::sla::Presence::new(self.contracts.all(), period, &|l| {
            self.leases.get(l).cloned()
        });
        InvoiceRating::new(
            InvoiceScope::new(period, self.earlier.iter().copied())
                .excluding(self.excluded.clone()),
        )
        .measuring(Measurement {
            presence,
            metering: crate::allowance::Metering::new(self.contracts.all(), period),
        })
    }
}

impl super::bundle::Subject for InvoiceCheck {
    fn tenant(&self) -> Option<&str> {
        Some(self.invoice.tenant())
    }

    fn context(
        &mut self,
        index: u64,
        received_at: Timestamp,
        body: &super::record::Body,
    ) -> Result<(), super::bundle::Failure> {
        use super::record::Body;
        match body {
            Body::InvoiceIssued(i)
                if i.tenant == self.invoice.tenant() && i.number != self.invoice.number() =>
            {
                self.prepaid.apply(index, received_at, body);
                let p = Period {
                    from: i.period_from,
                    to: i.period_to,
                };
                self.earlier.push((p, i.checkpoint_size));
            }
            Body::RecordExcluded(x) if x.tenant == self.invoice.tenant() => {
                self.excluded.entry(x.entry).or_insert(x.reason.clone());
            }
            Body::ContractRegistered(ContractRegistered { tenant, .. })
            | Body::ContractAmended(crate::record::ContractAmended { tenant, .. })
                if tenant == self.invoice.tenant() =>
            {
                self.contracts.apply(index, body);
            }
            Body::Prepayment(p) if p.tenant == self.invoice.tenant() => {
                self.prepaid.apply(index, received_at, body);
            }
            Body::LeaseRegistered(l) => {
                if l.tenant == self.invoice.tenant() {
                    self.leases.insert(l.lease.clone(), l.clone());
                }
                self.book.add_entry(body);
            }
            b => self.book.add_entry(b),
        }
        Ok(())
    }

    fn record(
        &mut self,
        index: u64,
        _leaf_hash: &super::merkle::Hash,
        body: &super::record::Body,
    ) -> Result<(), super::bundle::Failure> {
        use super::bundle::{Failure, Reason};
        use super::record::Body;
        let tenant = match body {
            Body::GpuUsage(u) => Some(u.tenant.as_str()),
            Body::Energy(e) => e.tenant.as_deref(),
            _ => return Ok(()),
        };
        if tenant != Some(self.invoice.tenant()) {
            return Err(Failure::new(
                Reason::WrongTenant,
                format!("entry {index}"),
                format!("the record is not {}'s", self.invoice.tenant()),
            ));
        }
        if self.rating.is_none() {
            self.rating = Some(self.start_rating());
        }
        let rating = self.rating.as_mut().expect("started above");
        if rating.add(&self.book, index, body) == Placement::Outside {
            return Err(Failure::new(
                Reason::OutsidePeriod,
                format!("entry {index}"),
                "the record is in neither the invoice's period nor an invoiced one",
            ));
        }
        Ok(())
    }
}

/// What a credit note's number starts with.
pub const CREDIT_NOTE_PREFIX: &str = "CN-";

/// The `format` member of a credit-note document.
pub const CREDIT_NOTE_FORMAT_V1: &str = "gpuledger-credit-note/v1";

/// A credit note's number: `CN-` and the log index of its `credit_note` entry (`CN-197`). A
/// credit note is a log entry and nothing else, so its number is derived from the log, never
/// stored: the API, the FOCUS export (`InvoiceId`) and a verifier name it the same way.
pub fn credit_note_number(index: u64) -> String {
    format!("{CREDIT_NOTE_PREFIX}{index}")
}

/// The log index a credit-note number names: `CN-` (upper case) and the index in decimal, no
/// sign, no leading zero, at most [`super::limits::MAX_SEQ`]. Exactly the strings
/// [`credit_note_number`] writes, so each credit note has one number.
pub fn parse_credit_note_number(s: &str) -> Option<u64> {
    let digits = s.strip_prefix(CREDIT_NOTE_PREFIX)?;
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    if !canonical || digits.len() > 16 {
        return None;
    }
    digits
        .parse::<u64>()
        .ok()
        .filter(|i| *i <= super::limits::MAX_SEQ)
}

/// A credit note as a document (`GET /v1/credit-notes/{number}`): its `credit_note` entry
/// (amount, reason, the time the ledger recorded it) with its number, and what the credited
/// invoice says that the entry does not (its period, total and log). Everything in it comes from
/// the log and the immutable invoice, so it never changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreditNoteDoc {
    /// `gpuledger-credit-note/v1`.
    pub format: String,
    /// `CN-<log index>` ([`credit_note_number`]).
    #[cfg_attr(feature = "openapi", schema(example = "CN-197"))]
    pub number: String,
    /// The log index of its `credit_note` entry.
    pub index: u64,
    pub tenant: String,
    /// The number of the invoice it credits.
    pub invoice: String,
    pub currency: String,
    /// What is credited, with the currency's minor digits.
    #[serde(with = "money_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub amount: Decimal,
    /// The reason given for it, for people (the entry's `note`).
    pub note: String,
    /// When the ledger recorded the entry (its leaf's `received_at`).
    pub recorded_at: Timestamp,
    /// The credited invoice's period.
    pub invoice_period: Period,
    /// The credited invoice's total (gross).
    #[serde(with = "money_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub invoice_total: Decimal,
    /// The credited invoice's issue time.
    pub invoice_issued_at: Timestamp,
    /// The log the entry is in (its origin).
    pub log_origin: String,
}

impl CreditNoteDoc {
    /// The document of the `credit_note` entry at `index`, recorded at `recorded_at`, against
    /// `invoice` (`None` when the entry credits another invoice, or another tenant's).
    pub fn new(
        index: u64,
        recorded_at: Timestamp,
        entry: &super::record::Settlement,
        invoice: &Invoice,
    ) -> Option<CreditNoteDoc> {
        if entry.invoice != invoice.number || entry.tenant != invoice.tenant {
            return None;
        }
        Some(CreditNoteDoc {
            format: CREDIT_NOTE_FORMAT_V1.to_owned(),
            number: credit_note_number(index),
            index,
            tenant: entry.tenant.clone(),
            invoice: entry.invoice.clone(),
            currency: entry.currency.clone(),
            amount: entry.amount,
            note: entry.note.clone(),
            recorded_at,
            invoice_period: invoice.period,
            invoice_total: invoice.total,
            invoice_issued_at: invoice.issued_at,
            log_origin: invoice.log_origin.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    #[test]
    fn uncovered_parts_of_a_period_are_its_gaps_in_order() {
        let t = |s: i64| Timestamp::from_unix(1_800_000_000 + s).unwrap();
        let p = |from: i64, to: i64| Period {
            from: t(from),
            to: t(to),
        };
        let month = p(0, 100);
        assert_eq!(month.uncovered(&[]), [month]);
        assert_eq!(month.uncovered(&[p(-50, 0), p(100, 200)]), [month]);
        assert_eq!(month.uncovered(&[p(0, 40)]), [p(40, 100)]);
        assert_eq!(
            month.uncovered(&[p(70, 80), p(-10, 20), p(30, 40)]),
            [p(20, 30), p(40, 70), p(80, 100)]
        );
        assert_eq!(month.uncovered(&[p(-10, 200)]), []);
    }

    /// An excluded record that the invoice would rate (in its period, or late) is placed
    /// `Excluded`; one that would only continue an invoiced period's tier count counts for
    /// nothing (`Outside`); records not excluded are placed as before.
    #[test]
    fn exclusions_take_records_out_of_rating_only() {
        let t = |s: i64| Timestamp::from_unix(1_800_000_000 + s).unwrap();
        let p = |from: i64, to: i64| Period {
            from: t(from),
            to: t(to),
        };
        // The invoice of [1 h, 2 h), after one of [0, 1 h) computed at log size 10.
        let scope = InvoiceScope::new(p(3_600, 7_200), [(p(0, 3_600), 10)]);
        let excluding = scope.clone().excluding([
            (5, "a".to_owned()),
            (11, "b".to_owned()),
            (12, "c".to_owned()),
        ]);
        for (index, start, before, after) in [
            (12, 4_000, Placement::Period, Placement::Excluded),
            (11, 60, Placement::Late(p(0, 3_600)), Placement::Excluded),
            (5, 60, Placement::Invoiced(p(0, 3_600)), Placement::Outside),
            (13, 4_000, Placement::Period, Placement::Period),
            (12, 9_000, Placement::Outside, Placement::Outside),
        ] {
            assert_eq!(scope.place(index, t(start)), before, "{index}");
            assert_eq!(excluding.place(index, t(start)), after, "{index}");
        }
        assert!(
            excluding.in_bundle(12, t(4_000), false),
            "listed, so in the bundle"
        );
        assert!(!excluding.in_bundle(5, t(60), true), "counts for nothing");
    }

    #[test]
    fn credit_note_numbers_round_trip_and_only_canonical_ones_parse() {
        for i in [0, 1, 197, crate::limits::MAX_SEQ] {
            assert_eq!(parse_credit_note_number(&credit_note_number(i)), Some(i));
        }
        assert_eq!(credit_note_number(197), "CN-197");
        for bad in [
            "",
            "CN-",
            "CN-01",
            "CN-+1",
            "CN--1",
            "cn-1",
            "CN 1",
            "CN-1 ",
            "CN-1a",
            "INV-000001",
            "CN-9007199254740992",
            "CN-99999999999999999999",
            "CN-١",
        ] {
            assert_eq!(parse_credit_note_number(bad), None, "{bad:?}");
        }
    }

    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }

    fn line(net: &str, rate: &str) -> InvoiceLine {
        InvoiceLine {
            kind: LineKind::Gpu,
            description: "GPU compute, H100, cn-east, on-demand".into(),
            region: "cn-east".into(),
            gpu_model: Some("H100".into()),
            class: Some(LeaseClass::OnDemand),
            plan: None,
            tier: None,
            quantity: d("1"),
            unit: Unit::GpuHour,
            gpu_seconds: Some(d("3600")),
            measured_kwh: None,
            pue: None,
            unit_price: d(net),
            net: d(net),
            tax_name: Some("VAT".into()),
            tax_rate: d(rate),
            tax: Decimal::ZERO,
            gross: Decimal::ZERO,
            records: 1,
            adjustment_for: None,
            contract: None,
            category: None,
            timing: None,
            service_period: None,
        }
    }

    #[test]
    fn tax_is_rounded_half_even_per_line_and_totals_are_exact_sums() {
        // 0.25 × 0.06 = 0.015 → 0.02 (half-even: 1 is odd), 0.75 × 0.06 = 0.045 → 0.04.
        let mut lines = vec![
            line("0.25", "0.06"),
            line("0.75", "0.06"),
            line("10.00", "0"),
        ];
        let t = apply_tax(&mut lines, "CNY");
        let taxes: Vec<String> = lines.iter().map(|l| l.tax.to_string()).collect();
        assert_eq!(taxes, ["0.02", "0.04", "0.00"]);
        assert_eq!(lines[0].gross.to_string(), "0.27");
        assert_eq!(
            (t.net.to_string(), t.tax.to_string(), t.gross.to_string()),
            ("11.00".into(), "0.06".into(), "11.06".into())
        );
        let t = apply_tax(&mut [], "JPY");
        assert_eq!(t.gross.to_string(), "0");
        let t = apply_tax(&mut [], "CNY");
        assert_eq!(t.gross.to_string(), "0.00");
    }

    /// Lines in the unit they are priced in, with the measured quantities alongside; a
    /// zero-quantity line (an energy record of 0 kWh) is left out.
    #[test]
    fn lines_are_priced_in_their_units_and_zero_lines_are_left_out() {
        let rated = |key: LineKey, quantity: &str, amount: &str| RatedLine {
            line: Line {
                key,
                currency: "CNY".into(),
                quantity: d(quantity),
                exact_amount: d(amount),
                amount: d(amount),
                records: 1,
            },
            adjustment_for: None,
        };
        let energy = LineKey::Energy {
            region: "west".into(),
            unit_price_per_kwh: d("0.28"),
            pue: d("1.08"),
        };
        let gpu = LineKey::Gpu {
            region: "west".into(),
            gpu_model: "H100".into(),
            class: LeaseClass::OnDemand,
            tier: None,
            unit_price_per_gpu_hour: d("18.5"),
        };
        let lines = lines_v2(
            vec![
                rated(gpu, "656", "3.37"),
                rated(energy.clone(), "12.5", "3.78"),
                rated(energy, "0", "0.00"),
            ],
            &|_| Tax::none(),
        );
        assert_eq!(lines.len(), 2, "no zero line");
        assert_eq!(
            (lines[0].quantity, lines[0].unit, lines[0].gpu_seconds),
            (d("0.182222"), Unit::GpuHour, Some(d("656")))
        );
        assert_eq!(lines[0].description, "GPU compute, H100, west, on-demand");
        assert_eq!(
            (lines[1].quantity, lines[1].unit, lines[1].measured_kwh),
            (d("13.5"), Unit::Kwh, Some(d("12.5")))
        );
        assert_eq!(lines[1].description, "Electricity, west, PUE 1.08");
        assert_eq!(lines[1].tax_name, None);
    }

    #[test]
    fn billed_kwh_rounds_half_even_to_six_places_and_always_parses_back() {
        // 9 places × 2 places = 11 places: more than a wire decimal may have.
        let q = billed_kwh(d("0.123456789"), d("1.35"));
        assert_eq!(q.to_string(), "0.166667");
        assert_eq!(crate::decimal::parse_canonical(&q.to_string()), Ok(q));
        assert_eq!(billed_kwh(d("2"), d("1.5")).to_string(), "3");
        // 0.0000025 half-even is 0.000002.
        assert_eq!(billed_kwh(d("0.0000025"), d("1")).to_string(), "0.000002");
    }

    #[test]
    fn gpu_hours_round_half_even_to_six_places() {
        assert_eq!(gpu_hours(d("656")).to_string(), "0.182222");
        assert_eq!(gpu_hours(d("3600")).to_string(), "1");
        // 0.0000005 h = 0.0018 s: half-even to 0.
        assert_eq!(gpu_hours(d("0.0018")).to_string(), "0");
        assert_eq!(gpu_hours(d("0.0054")).to_string(), "0.000002");
    }

    #[test]
    fn taxes_per_region_fall_back_to_the_default_then_to_none() {
        let vat = Tax {
            name: Some("VAT".into()),
            rate: d("0.06"),
        };
        let mut t = TaxTable::default();
        assert_eq!(t.for_region("cn-east"), Tax::none());
        t.by_region.insert("cn-east".into(), vat.clone());
        assert_eq!(t.for_region("cn-east"), vat);
        assert_eq!(t.for_region("eu-west"), Tax::none());
        t.default = Some(Tax {
            name: Some("GST".into()),
            rate: d("0.1"),
        });
        assert_eq!(t.for_region("eu-west").name.as_deref(), Some("GST"));
    }

    #[test]
    fn first_difference_names_the_field() {
        let a = serde_json::json!({"lines": [{"net": "1.00", "tax": "0.06"}], "total": "1.06"});
        let mut b = a.clone();
        b["lines"][0]["tax"] = "0.07".into();
        assert_eq!(first_difference(&a, &b).as_deref(), Some("lines[0].tax"));
        let mut b = a.clone();
        b["total"] = "1.07".into();
        assert_eq!(first_difference(&a, &b).as_deref(), Some("total"));
        assert_eq!(first_difference(&a, &a), None);
    }
}
