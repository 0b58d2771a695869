//! Rating: usage and energy records into exactly priced lines.
//!
//! Rules (docs/RATING.md states them for auditors):
//! - GPU time is priced per GPU-hour by the price in force for its region, GPU model and lease
//!   class, **second by second**: a record's interval is split at every price change inside it
//!   and each piece is priced on its own. Spot leases use the spot-price events of the region
//!   and GPU model; on-demand and reserved leases use rate cards. A record without a lease is
//!   on-demand.
//! - Energy is priced as kWh × PUE × the region's electricity price in force at the record's
//!   start.
//! - Quantities are exact. A line's amount is its exact value (for GPU time,
//!   Σ gpu_seconds × price ÷ 3600) rounded half-even to the currency's minor unit, once; an
//!   invoice total is the sum of its rounded lines.
//! - No price in force is never a price of zero: the uncovered seconds or kWh become an
//!   unpriced line that names what is missing.
//! - Graduated volume tiers: a tenant on a plan (`tenant_plan`) whose plan has tiers
//!   (`volume_tiers`) for a series (region, GPU model, on-demand or reserved) pays for that
//!   series by volume instead of the rate card. The plan and tiers are those in force at the
//!   period's start; the period's GPU-seconds of the series are counted together, the first
//!   `up_to_gpu_hours` at tier 1, the next at tier 2, and so on, split exactly at each bound.
//!   Since the tiers do not change within a period, which second falls in which tier does not
//!   change any amount, so records may arrive in any order ([`graduate`]). Spot is never tiered.

use super::record::{Body, Energy, GpuUsage, Tier};
use super::time::Timestamp;
use rust_decimal::{Decimal, RoundingStrategy};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

pub use super::record::LeaseClass;

/// Digits after the decimal point of a currency's minor unit (ISO 4217); 2 unless listed.
pub fn minor_units(currency: &str) -> u32 {
    match currency {
        "JPY" | "KRW" | "VND" | "CLP" | "ISK" | "UGX" => 0,
        "BHD" | "KWD" | "OMR" | "JOD" | "TND" | "IQD" | "LYD" => 3,
        _ => 2,
    }
}

/// An amount with at least the currency's minor-unit digits (`100.00`, not `100`): padded,
/// never rounded, so an amount with more digits keeps them all.
pub fn pad_amount(mut amount: Decimal, currency: &str) -> Decimal {
    let units = minor_units(currency);
    if amount.scale() < units {
        amount.rescale(units);
    }
    amount
}

/// Rounds an exact amount half-even to the currency's minor unit, keeping exactly that many
/// digits after the point (`148.00`, not `148`).
pub fn round_amount(amount: Decimal, currency: &str) -> Decimal {
    let units = minor_units(currency);
    let mut a = amount.round_dp_with_strategy(units, RoundingStrategy::MidpointNearestEven);
    a.rescale(units);
    a
}

/// A price that takes effect at a time and stays until the next one of its series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PricePoint {
    pub effective_from: Timestamp,
    pub currency: String,
    pub price: Decimal,
}

/// Electricity price, PUE and grid carbon intensity of a region from a time on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionParams {
    pub effective_from: Timestamp,
    pub currency: String,
    pub electricity_price_per_kwh: Decimal,
    pub pue: Decimal,
    pub carbon_g_per_kwh: Decimal,
}

/// A plan's graduated tiers for one series from a time on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierSchedule {
    pub effective_from: Timestamp,
    pub currency: String,
    /// Strictly increasing bounds; only the last tier is open (checked by `core::record`).
    pub tiers: Vec<Tier>,
}

/// A plan assignment of a tenant from a time on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PlanPoint {
    effective_from: Timestamp,
    plan: String,
}

/// (plan, region, GPU model, class): the series a tier schedule applies to.
type TierSeriesKey = (String, String, String, LeaseClass);

/// Every price the rating needs, as read from the log.
#[derive(Debug, Default, Clone)]
pub struct PriceBook {
    /// (region, gpu model, class) → rate-card prices per GPU-hour, sorted by time.
    rate_cards: HashMap<(String, String, LeaseClass), Vec<PricePoint>>,
    /// (region, gpu model) → spot prices per GPU-hour, sorted by time.
    spot: HashMap<(String, String), Vec<PricePoint>>,
    /// region → parameters, sorted by time.
    regions: HashMap<String, Vec<RegionParams>>,
    /// lease id → class.
    leases: HashMap<String, LeaseClass>,
    /// tenant → plan assignments, sorted by time.
    plans: HashMap<String, Vec<PlanPoint>>,
    /// (plan, region, gpu model, class) → tier schedules, sorted by time.
    tiers: HashMap<TierSeriesKey, Vec<TierSchedule>>,
}

fn insert_sorted<T>(v: &mut Vec<T>, item: T, at: impl Fn(&T) -> Timestamp) {
    let t = at(&item);
    let pos = v.partition_point(|x| at(x) <= t);
    v.insert(pos, item);
}

/// The point in force at `t` and where the series next changes.
fn in_force<T>(
    v: &[T],
    t: Timestamp,
    at: impl Fn(&T) -> Timestamp,
) -> (Option<&T>, Option<Timestamp>) {
    let pos = v.partition_point(|x| at(x) <= t);
    (pos.checked_sub(1).map(|i| &v[i]), v.get(pos).map(&at))
}

impl PriceBook {
    /// Adds what a pricing entry says (rate card, spot price, region parameters, lease, volume
    /// tiers, tenant plan); other kinds are ignored. Entries must come in log order.
    pub fn add_entry(&mut self, body: &Body) {
        match body {
            Body::RateCard(r) => self.add_rate_card(
                &r.region,
                &r.gpu_model,
                r.lease_class,
                PricePoint {
                    effective_from: r.effective_from,
                    currency: r.currency.clone(),
                    price: r.price_per_gpu_hour,
                },
            ),
            Body::SpotPrice(p) => self.add_spot(
                &p.region,
                &p.gpu_model,
                PricePoint {
                    effective_from: p.effective_from,
                    currency: p.currency.clone(),
                    price: p.price_per_gpu_hour,
                },
            ),
            Body::RegionParams(r) => self.add_region(
                &r.region,
                RegionParams {
                    effective_from: r.effective_from,
                    currency: r.currency.clone(),
                    electricity_price_per_kwh: r.electricity_price_per_kwh,
                    pue: r.pue,
                    carbon_g_per_kwh: r.carbon_g_per_kwh,
                },
            ),
            Body::LeaseRegistered(l) => self.add_lease(&l.lease, l.class),
            Body::VolumeTiers(v) => self.add_volume_tiers(
                &v.plan,
                &v.region,
                &v.gpu_model,
                v.lease_class,
                TierSchedule {
                    effective_from: v.effective_from,
                    currency: v.currency.clone(),
                    tiers: v.tiers.clone(),
                },
            ),
            Body::TenantPlan(p) => self.add_tenant_plan(&p.tenant, &p.plan, p.effective_from),
            _ => {}
        }
    }

    /// Adds a rate-card price (on-demand or reserved).
    pub fn add_rate_card(
        &mut self,
        region: &str,
        gpu_model: &str,
        class: LeaseClass,
        p: PricePoint,
    ) {
        let v = self
            .rate_cards
            .entry((region.to_owned(), gpu_model.to_owned(), class))
            .or_default();
        insert_sorted(v, p, |x| x.effective_from);
    }

    /// Adds a spot price.
    pub fn add_spot(&mut self, region: &str, gpu_model: &str, p: PricePoint) {
        let v = self
            .spot
            .entry((region.to_owned(), gpu_model.to_owned()))
            .or_default();
        insert_sorted(v, p, |x| x.effective_from);
    }

    /// Adds region parameters.
    pub fn add_region(&mut self, region: &str, p: RegionParams) {
        let v = self.regions.entry(region.to_owned()).or_default();
        insert_sorted(v, p, |x| x.effective_from);
    }

    /// Declares a lease's class.
    pub fn add_lease(&mut self, lease: &str, class: LeaseClass) {
        self.leases.insert(lease.to_owned(), class);
    }

    /// Puts a tenant on a plan from `effective_from` on.
    pub fn add_tenant_plan(&mut self, tenant: &str, plan: &str, effective_from: Timestamp) {
        let v = self.plans.entry(tenant.to_owned()).or_default();
        insert_sorted(
            v,
            PlanPoint {
                effective_from,
                plan: plan.to_owned(),
            },
            |x| x.effective_from,
        );
    }

    /// Adds a plan's tier schedule for a series (on-demand or reserved).
    pub fn add_volume_tiers(
        &mut self,
        plan: &str,
        region: &str,
        gpu_model: &str,
        class: LeaseClass,
        schedule: TierSchedule,
    ) {
        let v = self
            .tiers
            .entry((
                plan.to_owned(),
                region.to_owned(),
                gpu_model.to_owned(),
                class,
            ))
            .or_default();
        insert_sorted(v, schedule, |x| x.effective_from);
    }

    /// Whether any volume tiers are known (when none are, rating skips the plan lookups).
    pub fn has_tiers(&self) -> bool {
        !self.tiers.is_empty()
    }

    /// The plan `tenant` is on at `t`, if any.
    pub fn plan_at(&self, tenant: &str, t: Timestamp) -> Option<&str> {
        let v = self.plans.get(tenant)?;
        in_force(v, t, |x| x.effective_from)
            .0
            .map(|p| p.plan.as_str())
    }

    /// The plan and tiers that price `tenant`'s usage of a series in a period starting at
    /// `period_from`: those in force at the period's start. `None` (rate card or spot price)
    /// when the tenant has no plan then, the plan has no tiers for the series, or the class is
    /// spot.
    pub fn tiers_for(
        &self,
        tenant: &str,
        region: &str,
        gpu_model: &str,
        class: LeaseClass,
        period_from: Timestamp,
    ) -> Option<(&str, &TierSchedule)> {
        if class == LeaseClass::Spot || !self.has_tiers() {
            return None;
        }
        let plan = self.plan_at(tenant, period_from)?;
        let v = self.tiers.get(&(
            plan.to_owned(),
            region.to_owned(),
            gpu_model.to_owned(),
            class,
        ))?;
        let s = in_force(v, period_from, |x| x.effective_from).0?;
        Some((plan, s))
    }

    /// The class a usage record is billed as (no lease: on-demand; unknown lease: on-demand).
    pub fn class_of(&self, lease: Option<&str>) -> LeaseClass {
        lease
            .and_then(|l| self.leases.get(l))
            .copied()
            .unwrap_or(LeaseClass::OnDemand)
    }

    /// The region parameters in force at `t`.
    pub fn region_at(&self, region: &str, t: Timestamp) -> Option<&RegionParams> {
        in_force(self.regions.get(region).map_or(&[][..], |v| v), t, |x| {
            x.effective_from
        })
        .0
    }

    /// The price points of a series: spot prices for spot, else the class's rate cards.
    fn series(&self, region: &str, gpu_model: &str, class: LeaseClass) -> &[PricePoint] {
        let v = match class {
            LeaseClass::Spot => self.spot.get(&(region.to_owned(), gpu_model.to_owned())),
            c => self
                .rate_cards
                .get(&(region.to_owned(), gpu_model.to_owned(), c)),
        };
        v.map_or(&[], |v| v)
    }

    /// Splits a usage record at every price change inside it.
    pub fn rate_usage(&self, u: &GpuUsage) -> Vec<UsagePiece> {
        let class = self.class_of(u.lease.as_deref());
        let series = self.series(&u.region, &u.gpu_model, class);
        let mut out = Vec::new();
        let mut t = u.start;
        while t < u.end {
            let (point, next) = in_force(series, t, |x| x.effective_from);
            let piece_end = next.filter(|n| *n < u.end).unwrap_or(u.end);
            let gpu_seconds = u.gpu_count * Decimal::from(t.seconds_until(piece_end));
            out.push(UsagePiece {
                start: t,
                end: piece_end,
                class,
                gpu_seconds,
                price: point.map(|p| (p.currency.clone(), p.price)),
            });
            t = piece_end;
        }
        out
    }

    /// The one price (currency, per GPU-hour; `None`: no price) in force for a series over all
    /// of `[from, to)`, or `Err` when a price takes effect inside it: what prices every usage
    /// record of the series lying in that span as one piece ([`Self::rate_usage`]).
    #[allow(clippy::type_complexity)]
    pub fn price_throughout(
        &self,
        region: &str,
        gpu_model: &str,
        class: LeaseClass,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<Option<(&str, Decimal)>, Timestamp> {
        let (point, next) = in_force(self.series(region, gpu_model, class), from, |x| {
            x.effective_from
        });
        match next {
            Some(n) if n < to => Err(n),
            _ => Ok(point.map(|p| (p.currency.as_str(), p.price))),
        }
    }

    /// Whether the same region parameters (or none) are in force at every instant of
    /// `[from, to)`: what prices every energy record starting in it alike.
    pub fn region_throughout(&self, region: &str, from: Timestamp, to: Timestamp) -> bool {
        let v = self.regions.get(region).map_or(&[][..], |v| v);
        in_force(v, from, |x| x.effective_from)
            .1
            .is_none_or(|n| to <= n)
    }
}

/// A part of a usage record priced at one price (or at none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsagePiece {
    pub start: Timestamp,
    pub end: Timestamp,
    pub class: LeaseClass,
    pub gpu_seconds: Decimal,
    /// (currency, price per GPU-hour); `None` when no price was in force.
    pub price: Option<(String, Decimal)>,
}

/// Splits the volume between `from` and `to` GPU-seconds of a series' count in a period over
/// graduated tiers: `(tier index from 0, GPU-seconds in that tier)` for each tier the range
/// touches, in order. Exact: the parts sum to `to − from`. Tier `i` holds the GPU-seconds above
/// the previous bound and up to `up_to_gpu_hours × 3600`; the last tier is open.
pub fn graduate(tiers: &[Tier], from: Decimal, to: Decimal) -> Vec<(usize, Decimal)> {
    let mut out = Vec::new();
    let mut low = Decimal::ZERO;
    for (i, t) in tiers.iter().enumerate() {
        // The last tier is open whatever it says (validation makes it say so).
        let high = match t.up_to_gpu_hours {
            Some(h) if i + 1 < tiers.len() => Some(h * Decimal::from(3600)),
            _ => None,
        };
        let a = from.max(low);
        let b = high.map_or(to, |h| to.min(h));
        if b > a {
            out.push((i, b - a));
        }
        match high {
            Some(h) if h < to => low = h,
            _ => break,
        }
    }
    out
}

/// The plan and tier (numbered from 1) a graduated line is priced at.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TierRef {
    pub plan: String,
    pub tier: u32,
}

/// The OpenAPI schema of a flattened `Option<TierRef>`: the members `plan` and `tier`, both
/// present on a tier line and both absent on others (a nullable [`TierRef`] would require
/// them, or `null`, of every GPU line).
#[cfg(feature = "openapi")]
pub struct TierRefMembers;

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for TierRefMembers {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .description(Some(
                "Tier lines only, both together: the plan and its tier (numbered from 1).",
            ))
            .property("plan", ObjectBuilder::new().schema_type(Type::String))
            .property("tier", <u32 as utoipa::PartialSchema>::schema())
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for TierRefMembers {}

/// What a line is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LineKey {
    /// GPU time of one region, model and class at one unit price; for graduated volume, also
    /// of one plan's tier.
    Gpu {
        region: String,
        gpu_model: String,
        class: LeaseClass,
        /// Set on tier lines (`plan` and `tier` on the wire); absent on rate-card and spot lines.
        #[serde(flatten)]
        #[cfg_attr(feature = "openapi", schema(value_type = TierRefMembers))]
        tier: Option<TierRef>,
        #[serde(serialize_with = "super::decimal::serialize")]
        #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
        unit_price_per_gpu_hour: Decimal,
    },
    /// Energy of one region at one electricity price and PUE.
    Energy {
        region: String,
        #[serde(serialize_with = "super::decimal::serialize")]
        #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
        unit_price_per_kwh: Decimal,
        #[serde(serialize_with = "super::decimal::serialize")]
        #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
        pue: Decimal,
    },
}

/// A priced invoice line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Line {
    #[serde(flatten)]
    pub key: LineKey,
    pub currency: String,
    /// GPU lines: exact GPU-seconds. Energy lines: exact measured kWh.
    #[serde(serialize_with = "super::decimal::serialize")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub quantity: Decimal,
    /// The exact amount before rounding.
    #[serde(serialize_with = "super::decimal::serialize")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub exact_amount: Decimal,
    /// Rounded half-even to the currency's minor unit, with exactly that many decimals.
    #[serde(serialize_with = "serialize_amount")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub amount: Decimal,
    pub records: u64,
}

/// Usage that could not be priced, and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Unpriced {
    pub what: String,
    pub region: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<LeaseClass>,
    /// GPU-seconds or kWh left unpriced.
    #[serde(serialize_with = "super::decimal::serialize")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub quantity: Decimal,
    pub records: u64,
}

/// (what is missing, region, GPU model, class).
type UnpricedKey = (String, String, Option<String>, Option<LeaseClass>);

/// (currency, plan, region, GPU model, class): one graduated count.
type TieredKey = (String, String, String, String, LeaseClass);

/// The volume of one graduated series in the period.
#[derive(Debug)]
struct TieredVolume {
    tiers: Vec<Tier>,
    /// GPU-seconds already invoiced (adjustments continue the count after them).
    invoiced: Decimal,
    /// GPU-seconds to bill now.
    gpu_seconds: Decimal,
    records: u64,
}

/// A tenant's usage of one region, GPU model and lease (none: on-demand): what decides how a
/// usage record is priced, beside its interval.
#[derive(Debug, Clone, Copy)]
pub struct Series<'a> {
    pub tenant: &'a str,
    pub region: &'a str,
    pub gpu_model: &'a str,
    pub lease: Option<&'a str>,
}

impl<'a> Series<'a> {
    /// The series of a usage record.
    pub fn of(u: &'a GpuUsage) -> Self {
        Series {
            tenant: &u.tenant,
            region: &u.region,
            gpu_model: &u.gpu_model,
            lease: u.lease.as_deref(),
        }
    }
}

/// Accumulates a tenant's records of one period into invoice lines, one set per currency.
#[derive(Debug)]
pub struct Rater {
    /// Start of the period: selects the plan and tiers in force.
    period_from: Timestamp,
    /// (currency, key) → (quantity, exact numerator, records). GPU numerators are
    /// gpu_seconds × price (divided by 3600 once, at the end).
    lines: BTreeMap<(String, LineKey), (Decimal, Decimal, u64)>,
    unpriced: BTreeMap<UnpricedKey, (Decimal, u64)>,
    /// Graduated series, counted whole and split over their tiers at the end.
    tiered: BTreeMap<TieredKey, TieredVolume>,
}

impl Rater {
    /// A new, empty rater for the period starting at `period_from` (records are attributed
    /// by the caller; the start selects the plan and tiers in force).
    pub fn new(period_from: Timestamp) -> Self {
        Self {
            period_from,
            lines: BTreeMap::new(),
            unpriced: BTreeMap::new(),
            tiered: BTreeMap::new(),
        }
    }

    /// The graduated count of a series (the tenant's usage of a region, GPU model and lease),
    /// if the tenant's plan tiers it in this period.
    fn tiered_volume(&mut self, book: &PriceBook, s: &Series) -> Option<&mut TieredVolume> {
        if !book.has_tiers() {
            return None;
        }
        let class = book.class_of(s.lease);
        let (plan, t) = book.tiers_for(s.tenant, s.region, s.gpu_model, class, self.period_from)?;
        let key = (
            t.currency.clone(),
            plan.to_owned(),
            s.region.to_owned(),
            s.gpu_model.to_owned(),
            class,
        );
        Some(self.tiered.entry(key).or_insert_with(|| TieredVolume {
            tiers: t.tiers.clone(),
            invoiced: Decimal::ZERO,
            gpu_seconds: Decimal::ZERO,
            records: 0,
        }))
    }

    /// Adds a usage record that was already invoiced: it is not billed again, but a graduated
    /// series' count continues after it (used for late records' adjustment lines).
    pub fn add_invoiced_usage(&mut self, book: &PriceBook, u: &GpuUsage) {
        if let Some(v) = self.tiered_volume(book, &Series::of(u)) {
            v.invoiced += u.gpu_seconds;
        }
    }

    /// Whether any record added so far is in a graduated series.
    pub fn has_tiers(&self) -> bool {
        !self.tiered.is_empty()
    }

    /// Adds a usage record.
    pub fn add_usage(&mut self, book: &PriceBook, u: &GpuUsage) {
        let series = Series::of(u);
        if let Some(v) = self.tiered_volume(book, &series) {
            v.gpu_seconds += u.gpu_seconds;
            v.records += 1;
            return;
        }
        for p in book.rate_usage(u) {
            self.add_piece(&series, p.class, p.price, p.gpu_seconds, 1);
        }
    }

    /// Adds the `records` usage records of a series making `gpu_seconds`, all lying in
    /// `[from, to)`, exactly as [`Self::add_usage`] would add them one by one, when that is
    /// certain: the series is graduated (its count is a sum), or one price (or none) is in
    /// force throughout the span, so no record splits. Otherwise adds nothing and returns
    /// false (the caller adds the records one by one).
    pub fn add_usage_sum(
        &mut self,
        book: &PriceBook,
        series: &Series,
        (from, to): (Timestamp, Timestamp),
        gpu_seconds: Decimal,
        records: u64,
    ) -> bool {
        if let Some(v) = self.tiered_volume(book, series) {
            v.gpu_seconds += gpu_seconds;
            v.records += records;
            return true;
        }
        let class = book.class_of(series.lease);
        match book.price_throughout(series.region, series.gpu_model, class, from, to) {
            Ok(price) => {
                let price = price.map(|(c, p)| (c.to_owned(), p));
                self.add_piece(series, class, price, gpu_seconds, records);
                true
            }
            Err(_) => false,
        }
    }

    /// Adds `records` pieces of usage of a series making `gpu_seconds` at `price` (or to the
    /// unpriced usage).
    fn add_piece(
        &mut self,
        series: &Series,
        class: LeaseClass,
        price: Option<(String, Decimal)>,
        gpu_seconds: Decimal,
        records: u64,
    ) {
        match price {
            Some((currency, price)) => {
                let key = LineKey::Gpu {
                    region: series.region.to_owned(),
                    gpu_model: series.gpu_model.to_owned(),
                    class,
                    tier: None,
                    unit_price_per_gpu_hour: price.normalize(),
                };
                let e = self.lines.entry((currency, key)).or_default();
                e.0 += gpu_seconds;
                e.1 += gpu_seconds * price;
                e.2 += records;
            }
            None => {
                let what = match class {
                    LeaseClass::Spot => "no spot price in force",
                    _ => "no rate card in force",
                };
                let e = self
                    .unpriced
                    .entry((
                        what.to_owned(),
                        series.region.to_owned(),
                        Some(series.gpu_model.to_owned()),
                        Some(class),
                    ))
                    .or_default();
                e.0 += gpu_seconds;
                e.1 += records;
            }
        }
    }

    /// Adds an energy record.
    pub fn add_energy(&mut self, book: &PriceBook, e: &Energy) {
        self.add_energy_sum(book, &e.region, e.start, e.kwh, 1);
    }

    /// Adds `records` energy records of `region` making `kwh`, priced by the region parameters
    /// in force at `start` (each record's start, or an instant with the same parameters).
    pub fn add_energy_sum(
        &mut self,
        book: &PriceBook,
        region: &str,
        start: Timestamp,
        kwh: Decimal,
        records: u64,
    ) {
        match book.region_at(region, start) {
            Some(r) => {
                let key = LineKey::Energy {
                    region: region.to_owned(),
                    unit_price_per_kwh: r.electricity_price_per_kwh.normalize(),
                    pue: r.pue.normalize(),
                };
                let l = self.lines.entry((r.currency.clone(), key)).or_default();
                l.0 += kwh;
                l.1 += kwh * r.pue * r.electricity_price_per_kwh;
                l.2 += records;
            }
            None => {
                let u = self
                    .unpriced
                    .entry((
                        "no region parameters in force".to_owned(),
                        region.to_owned(),
                        None,
                        None,
                    ))
                    .or_default();
                u.0 += kwh;
                u.1 += records;
            }
        }
    }

    /// The lines per currency (each rounded once), and the unpriced usage.
    pub fn finish(mut self) -> (BTreeMap<String, Vec<Line>>, Vec<Unpriced>) {
        for ((currency, plan, region, gpu_model, class), v) in std::mem::take(&mut self.tiered) {
            let to = v.invoiced + v.gpu_seconds;
            for (i, quantity) in graduate(&v.tiers, v.invoiced, to) {
                let price = v.tiers[i].price_per_gpu_hour;
                let key = LineKey::Gpu {
                    region: region.clone(),
                    gpu_model: gpu_model.clone(),
                    class,
                    tier: Some(TierRef {
                        plan: plan.clone(),
                        tier: i as u32 + 1,
                    }),
                    unit_price_per_gpu_hour: price.normalize(),
                };
                let e = self.lines.entry((currency.clone(), key)).or_default();
                e.0 += quantity;
                e.1 += quantity * price;
                // Every record of the series makes up the volume that reaches each tier.
                e.2 += v.records;
            }
        }
        let mut by_currency: BTreeMap<String, Vec<Line>> = BTreeMap::new();
        for ((currency, key), (quantity, numerator, records)) in self.lines {
            let exact = match key {
                LineKey::Gpu { .. } => numerator / Decimal::from(3600),
                LineKey::Energy { .. } => numerator,
            };
            let amount = round_amount(exact, &currency);
            by_currency.entry(currency.clone()).or_default().push(Line {
                key,
                currency,
                quantity: quantity.normalize(),
                exact_amount: exact.normalize(),
                amount,
                records,
            });
        }
        let unpriced = self
            .unpriced
            .into_iter()
            .map(
                |((what, region, gpu_model, class), (quantity, records))| Unpriced {
                    what,
                    region,
                    gpu_model,
                    class,
                    quantity: quantity.normalize(),
                    records,
                },
            )
            .collect();
        (by_currency, unpriced)
    }
}

fn serialize_amount<S: serde::Serializer>(d: &Decimal, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(d)
}

/// The sum of rounded line amounts.
pub fn total(lines: &[Line]) -> Decimal {
    lines.iter().map(|l| l.amount).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap()
    }
    fn d(s: &str) -> Decimal {
        Decimal::from_str(s).unwrap()
    }
    fn usage(region: &str, lease: Option<&str>, count: &str, start: &str, end: &str) -> GpuUsage {
        let (start, end) = (ts(start), ts(end));
        GpuUsage {
            tenant: "acme".into(),
            lease: lease.map(str::to_owned),
            region: region.into(),
            node: "n1".into(),
            gpu_model: "H100".into(),
            gpu_count: d(count),
            start,
            end,
            gpu_seconds: d(count) * Decimal::from(start.seconds_until(end)),
        }
    }
    fn point(at: &str, cur: &str, price: &str) -> PricePoint {
        PricePoint {
            effective_from: ts(at),
            currency: cur.into(),
            price: d(price),
        }
    }

    /// Worked by hand (see docs/RATING.md): two regions, on-demand and spot with three spot
    /// changes inside one interval, energy with PUE.
    #[test]
    fn golden_scenario_to_the_last_digit() {
        let mut book = PriceBook::default();
        book.add_rate_card(
            "west",
            "H100",
            LeaseClass::OnDemand,
            point("2026-11-01T00:00:00Z", "CNY", "18.5"),
        );
        book.add_rate_card(
            "east",
            "H100",
            LeaseClass::OnDemand,
            point("2026-11-01T00:00:00Z", "CNY", "24"),
        );
        book.add_lease("spot-1", LeaseClass::Spot);
        book.add_spot("west", "H100", point("2026-11-10T00:00:00Z", "CNY", "9"));
        book.add_spot("west", "H100", point("2026-11-10T00:15:00Z", "CNY", "7.2"));
        book.add_spot(
            "west",
            "H100",
            point("2026-11-10T00:40:00Z", "CNY", "11.35"),
        );
        book.add_spot("west", "H100", point("2026-11-10T00:50:00Z", "CNY", "8"));
        book.add_region(
            "west",
            RegionParams {
                effective_from: ts("2026-11-01T00:00:00Z"),
                currency: "CNY".into(),
                electricity_price_per_kwh: d("0.28"),
                pue: d("1.08"),
                carbon_g_per_kwh: d("530"),
            },
        );
        let mut r = Rater::new(ts("2026-11-01T00:00:00Z"));
        // 8 GPUs for 1 h on-demand in west: 8 × 18.5 = 148.00
        r.add_usage(
            &book,
            &usage(
                "west",
                None,
                "8",
                "2026-11-10T00:00:00Z",
                "2026-11-10T01:00:00Z",
            ),
        );
        // 0.5 GPU for 10 min on-demand in east: 0.5 × 600 s × 24 / 3600 = 2.00
        r.add_usage(
            &book,
            &usage(
                "east",
                None,
                "0.5",
                "2026-11-10T00:00:00Z",
                "2026-11-10T00:10:00Z",
            ),
        );
        // 2 GPUs spot 00:05–00:55 in west, split at 00:15, 00:40, 00:50:
        //   600 s × 2 at 9     = 1200 GPU-s → 3.00
        //   1500 s × 2 at 7.2  = 3000 GPU-s → 6.00
        //   600 s × 2 at 11.35 = 1200 GPU-s → 3.7833… → 3.78
        //   300 s × 2 at 8     = 600 GPU-s  → 1.3333… → 1.33
        r.add_usage(
            &book,
            &usage(
                "west",
                Some("spot-1"),
                "2",
                "2026-11-10T00:05:00Z",
                "2026-11-10T00:55:00Z",
            ),
        );
        // 12.5 kWh in west: 12.5 × 1.08 × 0.28 = 3.78
        r.add_energy(
            &book,
            &Energy {
                tenant: Some("acme".into()),
                region: "west".into(),
                node: "n1".into(),
                start: ts("2026-11-10T00:00:00Z"),
                end: ts("2026-11-10T01:00:00Z"),
                kwh: d("12.5"),
            },
        );
        // East has no region parameters: unpriced, never zero.
        r.add_energy(
            &book,
            &Energy {
                tenant: Some("acme".into()),
                region: "east".into(),
                node: "n2".into(),
                start: ts("2026-11-10T00:00:00Z"),
                end: ts("2026-11-10T01:00:00Z"),
                kwh: d("1"),
            },
        );
        let (lines, unpriced) = r.finish();
        let cny = &lines["CNY"];
        let amounts: Vec<String> = cny.iter().map(|l| l.amount.to_string()).collect();
        // Lines sort by key: GPU lines by region, model, class, price; then energy lines.
        assert_eq!(
            amounts,
            ["2.00", "148.00", "6.00", "1.33", "3.00", "3.78", "3.78"]
        );
        assert_eq!(total(cny).to_string(), "167.89");
        assert_eq!(unpriced.len(), 1);
        assert_eq!(
            (unpriced[0].what.as_str(), unpriced[0].quantity),
            ("no region parameters in force", d("1"))
        );
    }

    #[test]
    fn no_price_is_unpriced_not_zero() {
        let book = PriceBook::default();
        let mut r = Rater::new(ts("2026-11-01T00:00:00Z"));
        r.add_usage(
            &book,
            &usage(
                "west",
                None,
                "1",
                "2026-11-10T00:00:00Z",
                "2026-11-10T00:00:10Z",
            ),
        );
        let (lines, unpriced) = r.finish();
        assert!(lines.is_empty());
        assert_eq!(unpriced[0].what, "no rate card in force");
        assert_eq!(unpriced[0].quantity, d("10"));
    }

    #[test]
    fn price_change_mid_interval_splits_on_demand_too() {
        let mut book = PriceBook::default();
        book.add_rate_card(
            "west",
            "H100",
            LeaseClass::OnDemand,
            point("2026-11-10T00:00:30Z", "CNY", "36"),
        );
        let pieces = book.rate_usage(&usage(
            "west",
            None,
            "1",
            "2026-11-10T00:00:00Z",
            "2026-11-10T00:01:00Z",
        ));
        assert_eq!(pieces.len(), 2);
        assert_eq!(pieces[0].price, None);
        assert_eq!(pieces[1].price, Some(("CNY".into(), d("36"))));
        assert_eq!(pieces[0].gpu_seconds + pieces[1].gpu_seconds, d("60"));
    }

    #[test]
    fn rounding_is_half_even_per_currency() {
        assert_eq!(round_amount(d("2.345"), "CNY").to_string(), "2.34");
        assert_eq!(round_amount(d("2.355"), "CNY").to_string(), "2.36");
        assert_eq!(round_amount(d("1234.5"), "JPY").to_string(), "1234");
        assert_eq!(round_amount(d("1.0005"), "KWD").to_string(), "1.000");
    }

    proptest::proptest! {
        /// Splitting an interval at any point changes the total by at most the rounding of one
        /// extra line per price (half a minor unit each), and never the exact amount.
        #[test]
        fn splitting_never_changes_the_exact_amount(split in 1i64..3600, count in 1u32..64, price_cents in 1u32..100_000) {
            let mut book = PriceBook::default();
            book.add_rate_card("west", "H100", LeaseClass::OnDemand, PricePoint {
                effective_from: ts("2026-11-01T00:00:00Z"), currency: "CNY".into(), price: Decimal::new(price_cents.into(), 2),
            });
            let whole = usage("west", None, &count.to_string(), "2026-11-10T00:00:00Z", "2026-11-10T01:00:00Z");
            let mut a = whole.clone();
            a.end = whole.start.plus(split);
            a.gpu_seconds = a.gpu_count * Decimal::from(split);
            let mut b = whole.clone();
            b.start = a.end;
            b.gpu_seconds = b.gpu_count * Decimal::from(3600 - split);
            let (mut r1, mut r2) = (Rater::new(ts("2026-11-01T00:00:00Z")), Rater::new(ts("2026-11-01T00:00:00Z")));
            r1.add_usage(&book, &whole);
            r2.add_usage(&book, &a);
            r2.add_usage(&book, &b);
            let (l1, _) = r1.finish();
            let (l2, _) = r2.finish();
            proptest::prop_assert_eq!(l1["CNY"][0].exact_amount, l2["CNY"][0].exact_amount);
            proptest::prop_assert_eq!(total(&l1["CNY"]), total(&l2["CNY"]));
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// The rater against a naive second-by-second recomputation: every GPU-second is
        /// priced at the price in force at that second, summed per price, and each sum rounded
        /// once. Totals and every line agree to the last digit.
        #[test]
        fn agrees_with_a_second_by_second_recomputation(
            changes in proptest::collection::btree_map(0i64..3600, 1u32..5000, 1..6),
            records in proptest::collection::vec((0i64..3500, 1i64..400, 1u32..9, 0u32..4), 1..12),
        ) {
            let mut book = PriceBook::default();
            book.add_lease("spot", LeaseClass::Spot);
            for (at, cents) in &changes {
                book.add_spot("west", "H100", PricePoint {
                    effective_from: ts("2026-11-10T00:00:00Z").plus(*at),
                    currency: "CNY".into(),
                    price: Decimal::new((*cents).into(), 2),
                });
            }
            let mut rater = Rater::new(ts("2026-11-01T00:00:00Z"));
            let mut naive: BTreeMap<Option<Decimal>, Decimal> = BTreeMap::new();
            for (i, (start, len, count, frac)) in records.iter().enumerate() {
                // Counts with a fraction (shared GPUs): count + frac/4.
                let c = Decimal::from(*count) + Decimal::new((*frac).into(), 0) / Decimal::from(4);
                let s = ts("2026-11-10T00:00:00Z").plus(*start);
                let e = s.plus(*len);
                let mut u = usage("west", Some("spot"), "1", "2026-11-10T00:00:00Z", "2026-11-10T00:00:01Z");
                u.node = format!("n{i}");
                u.gpu_count = c;
                u.start = s;
                u.end = e;
                u.gpu_seconds = c * Decimal::from(*len);
                rater.add_usage(&book, &u);
                for sec in *start..start + len {
                    let price = changes.range(..=sec).next_back().map(|(_, p)| Decimal::new((*p).into(), 2));
                    *naive.entry(price).or_default() += c;
                }
            }
            let (lines, unpriced) = rater.finish();
            let priced: Vec<(Decimal, Decimal)> = naive
                .iter()
                .filter_map(|(p, secs)| p.map(|p| (p, round_amount(*secs * p / Decimal::from(3600), "CNY"))))
                .collect();
            let got: Vec<(Decimal, Decimal)> = lines.get("CNY").map_or(vec![], |l| {
                let mut v: Vec<_> = l
                    .iter()
                    .map(|l| match &l.key {
                        LineKey::Gpu { unit_price_per_gpu_hour, .. } => (*unit_price_per_gpu_hour, l.amount),
                        _ => unreachable!("only GPU lines here"),
                    })
                    .collect();
                v.sort();
                v
            });
            let mut want: Vec<_> = priced.iter().map(|(p, a)| (p.normalize(), *a)).collect();
            want.sort();
            proptest::prop_assert_eq!(&got, &want);
            let unpriced_secs: Decimal = unpriced.iter().map(|u| u.quantity).sum();
            proptest::prop_assert_eq!(unpriced_secs, naive.get(&None).copied().unwrap_or_default());
        }
    }

    fn tiers(spec: &[(Option<&str>, &str)]) -> Vec<Tier> {
        spec.iter()
            .map(|(b, p)| Tier {
                up_to_gpu_hours: b.map(d),
                price_per_gpu_hour: d(p),
            })
            .collect()
    }

    /// Rate card for west and east; plan `volume` tiers west H100 on-demand as 20.5 up to
    /// 10 GPU-h, 17.25 up to 25 GPU-h, then 13.333; acme is on the plan; spot at 9.
    fn tiered_book() -> PriceBook {
        let mut book = PriceBook::default();
        for (region, price) in [("west", "18.5"), ("east", "24")] {
            book.add_rate_card(
                region,
                "H100",
                LeaseClass::OnDemand,
                point("2026-11-01T00:00:00Z", "CNY", price),
            );
        }
        book.add_volume_tiers(
            "volume",
            "west",
            "H100",
            LeaseClass::OnDemand,
            TierSchedule {
                effective_from: ts("2026-11-01T00:00:00Z"),
                currency: "CNY".into(),
                tiers: tiers(&[
                    (Some("10"), "20.5"),
                    (Some("25"), "17.25"),
                    (None, "13.333"),
                ]),
            },
        );
        book.add_tenant_plan("acme", "volume", ts("2026-11-01T00:00:00Z"));
        book.add_lease("spot-1", LeaseClass::Spot);
        book.add_spot("west", "H100", point("2026-11-01T00:00:00Z", "CNY", "9"));
        book
    }

    #[test]
    fn graduate_splits_exactly_at_each_bound() {
        let t = tiers(&[(Some("10"), "3"), (Some("25"), "2"), (None, "1")]);
        assert_eq!(
            graduate(&t, d("0"), d("91600")),
            [(0, d("36000")), (1, d("54000")), (2, d("1600"))]
        );
        assert_eq!(graduate(&t, d("40000"), d("50000")), [(1, d("10000"))]);
        assert_eq!(
            graduate(&t, d("89999.75"), d("90000.5")),
            [(1, d("0.25")), (2, d("0.5"))]
        );
        assert_eq!(graduate(&t, d("36000"), d("36000")), []);
        assert_eq!(graduate(&t, d("90000"), d("1E9")), [(2, d("999910000"))]);
        // One open tier is a flat price.
        assert_eq!(graduate(&t[2..], d("5"), d("7")), [(0, d("2"))]);
    }

    /// Worked by hand (docs/RATING.md, "Graduated volume tiers"): one record crosses two tier
    /// bounds; records arrive out of time order; east (no tiers in the plan) stays on the rate
    /// card and spot is never tiered.
    #[test]
    fn graduated_tiers_to_the_last_digit() {
        let book = tiered_book();
        let mut r = Rater::new(ts("2026-11-01T00:00:00Z"));
        // B: 2.5 GPUs × 28000 s = 70000 GPU-s, logged first but starting later than A.
        r.add_usage(
            &book,
            &usage(
                "west",
                None,
                "2.5",
                "2026-11-10T02:00:00Z",
                "2026-11-10T09:46:40Z",
            ),
        );
        // A: 3 GPUs × 7200 s = 21600 GPU-s.
        r.add_usage(
            &book,
            &usage(
                "west",
                None,
                "3",
                "2026-11-10T00:00:00Z",
                "2026-11-10T02:00:00Z",
            ),
        );
        r.add_usage(
            &book,
            &usage(
                "east",
                None,
                "1",
                "2026-11-10T00:00:00Z",
                "2026-11-10T01:00:00Z",
            ),
        );
        r.add_usage(
            &book,
            &usage(
                "west",
                Some("spot-1"),
                "2",
                "2026-11-10T00:00:00Z",
                "2026-11-10T00:30:00Z",
            ),
        );
        let (lines, unpriced) = r.finish();
        assert!(unpriced.is_empty());
        let cny = &lines["CNY"];
        // 91600 GPU-s of west on-demand: 36000 at 20.5 = 205; 54000 at 17.25 = 258.75;
        // 1600 at 13.333 = 21332.8 / 3600 = 5.925777… → 5.93. East 1 GPU-h at 24; spot 1 GPU-h
        // at 9.
        let got: Vec<(String, String, Option<u32>)> = cny
            .iter()
            .map(|l| {
                let tier = match &l.key {
                    LineKey::Gpu { tier, .. } => tier.as_ref().map(|t| t.tier),
                    LineKey::Energy { .. } => None,
                };
                (l.quantity.to_string(), l.amount.to_string(), tier)
            })
            .collect();
        let want = [
            ("3600", "24.00", None),
            ("36000", "205.00", Some(1)),
            ("54000", "258.75", Some(2)),
            ("1600", "5.93", Some(3)),
            ("3600", "9.00", None),
        ];
        assert_eq!(got, want.map(|(q, a, t)| (q.to_owned(), a.to_owned(), t)));
        assert_eq!(cny[3].exact_amount, d("21332.8") / d("3600"));
        assert_eq!(
            cny[1].key,
            LineKey::Gpu {
                region: "west".into(),
                gpu_model: "H100".into(),
                class: LeaseClass::OnDemand,
                tier: Some(TierRef {
                    plan: "volume".into(),
                    tier: 1
                }),
                unit_price_per_gpu_hour: d("20.5"),
            }
        );
        assert_eq!(cny[1].records, 2);
        assert_eq!(total(cny).to_string(), "502.68");
        // The wire form names the plan and tier; rate-card lines carry neither.
        let v = serde_json::to_value(&cny[1]).unwrap();
        assert_eq!(
            (v["type"].as_str(), v["plan"].as_str(), v["tier"].as_u64()),
            (Some("gpu"), Some("volume"), Some(1))
        );
        let v = serde_json::to_value(&cny[0]).unwrap();
        assert!(v.get("plan").is_none() && v.get("tier").is_none(), "{v}");
    }

    /// A late record continues the period's count after the GPU-seconds already invoiced.
    #[test]
    fn late_usage_continues_the_count() {
        let book = tiered_book();
        let mut r = Rater::new(ts("2026-11-01T00:00:00Z"));
        // Invoiced: 21600 GPU-s (6 GPU-h, tier 1). Late: 1 GPU × 5 h = 18000 GPU-s, from 21600
        // to 39600: 14400 at 20.5 = 82.00 and 3600 at 17.25 = 17.25.
        r.add_invoiced_usage(
            &book,
            &usage(
                "west",
                None,
                "3",
                "2026-11-10T00:00:00Z",
                "2026-11-10T02:00:00Z",
            ),
        );
        // Invoiced usage of a series without tiers changes nothing.
        r.add_invoiced_usage(
            &book,
            &usage(
                "east",
                None,
                "3",
                "2026-11-10T00:00:00Z",
                "2026-11-10T02:00:00Z",
            ),
        );
        assert!(r.has_tiers());
        r.add_usage(
            &book,
            &usage(
                "west",
                None,
                "1",
                "2026-11-11T00:00:00Z",
                "2026-11-11T05:00:00Z",
            ),
        );
        let (lines, _) = r.finish();
        let amounts: Vec<String> = lines["CNY"].iter().map(|l| l.amount.to_string()).collect();
        assert_eq!(amounts, ["82.00", "17.25"]);
    }

    /// The plan and tiers in force at the period's start apply to the whole period; a tenant
    /// without a plan, or a period starting before the plan, uses the rate card.
    #[test]
    fn tiers_in_force_at_the_period_start() {
        let mut book = tiered_book();
        book.add_tenant_plan("late-joiner", "volume", ts("2026-11-10T00:00:00Z"));
        let one_hour = |tenant: &str, from: &str| {
            let mut u = usage(
                "west",
                None,
                "1",
                "2026-11-20T00:00:00Z",
                "2026-11-20T01:00:00Z",
            );
            u.tenant = tenant.into();
            let mut r = Rater::new(ts(from));
            r.add_usage(&book, &u);
            r.finish().0["CNY"][0].amount.to_string()
        };
        assert_eq!(one_hour("acme", "2026-11-01T00:00:00Z"), "20.50");
        assert_eq!(one_hour("beta", "2026-11-01T00:00:00Z"), "18.50");
        assert_eq!(one_hour("late-joiner", "2026-11-01T00:00:00Z"), "18.50");
        assert_eq!(one_hour("late-joiner", "2026-11-15T00:00:00Z"), "20.50");
        // Reserved usage: the plan has no reserved tiers (and there is no reserved rate card).
        book.add_lease("r-1", LeaseClass::Reserved);
        let mut r = Rater::new(ts("2026-11-01T00:00:00Z"));
        r.add_usage(
            &book,
            &usage(
                "west",
                Some("r-1"),
                "1",
                "2026-11-20T00:00:00Z",
                "2026-11-20T01:00:00Z",
            ),
        );
        assert_eq!(r.finish().1[0].what, "no rate card in force");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// Graduated rating against a naive recomputation: walk the seconds in time order (ties
        /// by record), add each record's GPU-seconds of that second to a running count, and
        /// split the count at the tier bounds; sum per tier and round once. Lines and total
        /// agree to the last digit.
        #[test]
        fn tiers_agree_with_a_second_by_second_recomputation(
            bounds in proptest::collection::btree_set(1u32..3000, 0..4),
            prices in proptest::collection::vec(1u32..5000, 4),
            records in proptest::collection::vec((0i64..3000, 1i64..600, 1u32..9, 0u32..4), 1..10),
        ) {
            // Bounds in thousandths of a GPU-hour (3.6 GPU-s each), prices in cents.
            let mut spec: Vec<Tier> = bounds
                .iter()
                .map(|b| Tier { up_to_gpu_hours: Some(Decimal::new((*b).into(), 3)), price_per_gpu_hour: Decimal::ZERO })
                .collect();
            spec.push(Tier { up_to_gpu_hours: None, price_per_gpu_hour: Decimal::ZERO });
            for (t, p) in spec.iter_mut().zip(&prices) {
                t.price_per_gpu_hour = Decimal::new((*p).into(), 2);
            }
            let mut book = PriceBook::default();
            book.add_tenant_plan("acme", "p", ts("2026-11-01T00:00:00Z"));
            book.add_volume_tiers("p", "west", "H100", LeaseClass::OnDemand, TierSchedule {
                effective_from: ts("2026-11-01T00:00:00Z"), currency: "CNY".into(), tiers: spec.clone(),
            });
            let mut rater = Rater::new(ts("2026-11-10T00:00:00Z"));
            // second → [(record, count)], for the naive walk.
            let mut by_second: BTreeMap<i64, Vec<Decimal>> = BTreeMap::new();
            for (i, (start, len, count, frac)) in records.iter().enumerate() {
                let c = Decimal::from(*count) + Decimal::new((*frac).into(), 0) / Decimal::from(4);
                let mut u = usage("west", None, "1", "2026-11-10T00:00:00Z", "2026-11-10T00:00:01Z");
                u.node = format!("n{i}");
                u.gpu_count = c;
                u.start = ts("2026-11-10T00:00:00Z").plus(*start);
                u.end = u.start.plus(*len);
                u.gpu_seconds = c * Decimal::from(*len);
                rater.add_usage(&book, &u);
                for sec in *start..start + len {
                    by_second.entry(sec).or_default().push(c);
                }
            }
            let highs: Vec<Option<Decimal>> = spec.iter().map(|t| t.up_to_gpu_hours.map(|h| h * Decimal::from(3600))).collect();
            let mut per_tier = vec![Decimal::ZERO; spec.len()];
            let mut count = Decimal::ZERO;
            for cs in by_second.values() {
                for c in cs {
                    let mut left = *c;
                    let mut tier = highs.iter().position(|h| h.is_none_or(|h| count < h)).unwrap();
                    while left > Decimal::ZERO {
                        let room = highs[tier].map_or(left, |h| (h - count).min(left));
                        per_tier[tier] += room;
                        count += room;
                        left -= room;
                        tier += 1;
                    }
                }
            }
            let want: Vec<(u32, Decimal, Decimal)> = per_tier
                .iter()
                .enumerate()
                .filter(|(_, q)| !q.is_zero())
                .map(|(i, q)| (i as u32 + 1, q.normalize(), round_amount(*q * spec[i].price_per_gpu_hour / Decimal::from(3600), "CNY")))
                .collect();
            let (lines, unpriced) = rater.finish();
            proptest::prop_assert!(unpriced.is_empty());
            let got: Vec<(u32, Decimal, Decimal)> = lines["CNY"]
                .iter()
                .map(|l| match &l.key {
                    LineKey::Gpu { tier: Some(t), .. } => (t.tier, l.quantity, l.amount),
                    k => panic!("not a tier line: {k:?}"),
                })
                .collect();
            proptest::prop_assert_eq!(&got, &want);
            let want_total: Decimal = want.iter().map(|w| w.2).sum();
            proptest::prop_assert_eq!(total(&lines["CNY"]), want_total);
        }

        /// Splitting a record at any second never changes a tiered exact amount or total; moving
        /// the second part to a late adjustment (after the first was invoiced) changes the sum of
        /// the two invoices by at most half a minor unit per line of the adjustment.
        #[test]
        fn splitting_under_tiers_changes_only_rounding(split in 1i64..7200, count in 1u32..40, quarter in 0u32..4) {
            let book = tiered_book();
            let c = Decimal::from(count) + Decimal::from(quarter) / Decimal::from(4);
            let mut whole = usage("west", None, "1", "2026-11-10T00:00:00Z", "2026-11-10T02:00:00Z");
            whole.gpu_count = c;
            whole.gpu_seconds = c * Decimal::from(7200);
            let mut a = whole.clone();
            a.end = whole.start.plus(split);
            a.gpu_seconds = c * Decimal::from(split);
            let mut b = whole.clone();
            b.start = a.end;
            b.gpu_seconds = c * Decimal::from(7200 - split);
            let period = ts("2026-11-01T00:00:00Z");
            let (mut one, mut two) = (Rater::new(period), Rater::new(period));
            one.add_usage(&book, &whole);
            two.add_usage(&book, &b);
            two.add_usage(&book, &a);
            let (l1, _) = one.finish();
            let (l2, _) = two.finish();
            let exact = |l: &[Line]| l.iter().map(|l| l.exact_amount).collect::<Vec<_>>();
            proptest::prop_assert_eq!(exact(&l1["CNY"]), exact(&l2["CNY"]));
            proptest::prop_assert_eq!(total(&l1["CNY"]), total(&l2["CNY"]));
            // a invoiced first, b late.
            let mut first = Rater::new(period);
            first.add_usage(&book, &a);
            let mut late = Rater::new(period);
            late.add_invoiced_usage(&book, &a);
            late.add_usage(&book, &b);
            let (f, _) = first.finish();
            let (g, _) = late.finish();
            let exact_sum = |l: &[Line]| l.iter().map(|l| l.exact_amount).sum::<Decimal>();
            // Equal up to the 28-digit division by 3600 of each part.
            let gap = (exact_sum(&f["CNY"]) + exact_sum(&g["CNY"]) - exact_sum(&l1["CNY"])).abs();
            proptest::prop_assert!(gap < Decimal::new(1, 20), "gap {}", gap);
            let lines = f["CNY"].len() + g["CNY"].len() + l1["CNY"].len();
            let drift = (total(&f["CNY"]) + total(&g["CNY"]) - total(&l1["CNY"])).abs();
            proptest::prop_assert!(drift <= Decimal::new(5, 3) * Decimal::from(lines), "drift {}", drift);
        }
    }
}
