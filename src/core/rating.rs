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

use super::record::{Energy, GpuUsage};
use super::time::Timestamp;
use rust_decimal::{Decimal, RoundingStrategy};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// How a lease is billed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseClass {
    OnDemand,
    Reserved,
    Spot,
}

impl LeaseClass {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseClass::OnDemand => "on_demand",
            LeaseClass::Reserved => "reserved",
            LeaseClass::Spot => "spot",
        }
    }
}

/// Digits after the decimal point of a currency's minor unit (ISO 4217); 2 unless listed.
pub fn minor_units(currency: &str) -> u32 {
    match currency {
        "JPY" | "KRW" | "VND" | "CLP" | "ISK" | "UGX" => 0,
        "BHD" | "KWD" | "OMR" | "JOD" | "TND" | "IQD" | "LYD" => 3,
        _ => 2,
    }
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

    /// Splits a usage record at every price change inside it.
    pub fn rate_usage(&self, u: &GpuUsage) -> Vec<UsagePiece> {
        let class = self.class_of(u.lease.as_deref());
        let series: &[PricePoint] = match class {
            LeaseClass::Spot => self
                .spot
                .get(&(u.region.clone(), u.gpu_model.clone()))
                .map_or(&[], |v| v),
            c => self
                .rate_cards
                .get(&(u.region.clone(), u.gpu_model.clone(), c))
                .map_or(&[], |v| v),
        };
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

/// What a line is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LineKey {
    /// GPU time of one region, model and class at one unit price.
    Gpu {
        region: String,
        gpu_model: String,
        class: LeaseClass,
        #[serde(serialize_with = "super::decimal::serialize")]
        unit_price_per_gpu_hour: Decimal,
    },
    /// Energy of one region at one electricity price and PUE.
    Energy {
        region: String,
        #[serde(serialize_with = "super::decimal::serialize")]
        unit_price_per_kwh: Decimal,
        #[serde(serialize_with = "super::decimal::serialize")]
        pue: Decimal,
    },
}

/// A priced invoice line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Line {
    #[serde(flatten)]
    pub key: LineKey,
    pub currency: String,
    /// GPU lines: exact GPU-seconds. Energy lines: exact measured kWh.
    #[serde(serialize_with = "super::decimal::serialize")]
    pub quantity: Decimal,
    /// The exact amount before rounding.
    #[serde(serialize_with = "super::decimal::serialize")]
    pub exact_amount: Decimal,
    /// Rounded half-even to the currency's minor unit, with exactly that many decimals.
    #[serde(serialize_with = "serialize_amount")]
    pub amount: Decimal,
    pub records: u64,
}

/// Usage that could not be priced, and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Unpriced {
    pub what: String,
    pub region: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<LeaseClass>,
    /// GPU-seconds or kWh left unpriced.
    #[serde(serialize_with = "super::decimal::serialize")]
    pub quantity: Decimal,
    pub records: u64,
}

/// (what is missing, region, GPU model, class).
type UnpricedKey = (String, String, Option<String>, Option<LeaseClass>);

/// Accumulates a tenant's records into invoice lines, one set per currency.
#[derive(Debug, Default)]
pub struct Rater {
    /// (currency, key) → (quantity, exact numerator, records). GPU numerators are
    /// gpu_seconds × price (divided by 3600 once, at the end).
    lines: BTreeMap<(String, LineKey), (Decimal, Decimal, u64)>,
    unpriced: BTreeMap<UnpricedKey, (Decimal, u64)>,
}

impl Rater {
    /// A new, empty rater.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a usage record.
    pub fn add_usage(&mut self, book: &PriceBook, u: &GpuUsage) {
        for p in book.rate_usage(u) {
            match p.price {
                Some((currency, price)) => {
                    let key = LineKey::Gpu {
                        region: u.region.clone(),
                        gpu_model: u.gpu_model.clone(),
                        class: p.class,
                        unit_price_per_gpu_hour: price.normalize(),
                    };
                    let e = self.lines.entry((currency, key)).or_default();
                    e.0 += p.gpu_seconds;
                    e.1 += p.gpu_seconds * price;
                    e.2 += 1;
                }
                None => {
                    let what = match p.class {
                        LeaseClass::Spot => "no spot price in force",
                        _ => "no rate card in force",
                    };
                    let e = self
                        .unpriced
                        .entry((
                            what.to_owned(),
                            u.region.clone(),
                            Some(u.gpu_model.clone()),
                            Some(p.class),
                        ))
                        .or_default();
                    e.0 += p.gpu_seconds;
                    e.1 += 1;
                }
            }
        }
    }

    /// Adds an energy record.
    pub fn add_energy(&mut self, book: &PriceBook, e: &Energy) {
        match book.region_at(&e.region, e.start) {
            Some(r) => {
                let key = LineKey::Energy {
                    region: e.region.clone(),
                    unit_price_per_kwh: r.electricity_price_per_kwh.normalize(),
                    pue: r.pue.normalize(),
                };
                let l = self.lines.entry((r.currency.clone(), key)).or_default();
                l.0 += e.kwh;
                l.1 += e.kwh * r.pue * r.electricity_price_per_kwh;
                l.2 += 1;
            }
            None => {
                let u = self
                    .unpriced
                    .entry((
                        "no region parameters in force".to_owned(),
                        e.region.clone(),
                        None,
                        None,
                    ))
                    .or_default();
                u.0 += e.kwh;
                u.1 += 1;
            }
        }
    }

    /// The lines per currency (each rounded once), and the unpriced usage.
    pub fn finish(self) -> (BTreeMap<String, Vec<Line>>, Vec<Unpriced>) {
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
        let mut r = Rater::new();
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
        let mut r = Rater::new();
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
            let (mut r1, mut r2) = (Rater::new(), Rater::new());
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
            let mut rater = Rater::new();
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
}
