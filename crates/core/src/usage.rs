//! Exact usage aggregation: GPU-seconds and kWh summed with `Decimal`, grouped by any of
//! region, node, GPU model and lease, and windowed by hour, day or month (UTC).
//!
//! Attribution rule: a record belongs to the window, and to the query period, that contains
//! its interval's `start`. Records are never split, so every sum is a sum of whole signed
//! quantities and can be recomputed from the log exactly.

use super::record::Body;
use super::time::Timestamp;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use time::OffsetDateTime;

/// A dimension to group by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    Region,
    Node,
    GpuModel,
    Lease,
}

impl GroupBy {
    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<GroupBy> {
        match s {
            "region" => Some(GroupBy::Region),
            "node" => Some(GroupBy::Node),
            "gpu_model" => Some(GroupBy::GpuModel),
            "lease" => Some(GroupBy::Lease),
            _ => None,
        }
    }
}

/// A window size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Window {
    Hour,
    Day,
    Month,
}

impl Window {
    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Window> {
        match s {
            "hour" => Some(Window::Hour),
            "day" => Some(Window::Day),
            "month" => Some(Window::Month),
            _ => None,
        }
    }

    /// The start of the window containing `t`.
    pub fn start_of(self, t: Timestamp) -> Timestamp {
        let s = t.unix();
        match self {
            Window::Hour => Timestamp::from_unix(s - s.rem_euclid(3600)).unwrap_or(t),
            Window::Day => Timestamp::from_unix(s - s.rem_euclid(86_400)).unwrap_or(t),
            Window::Month => {
                let d = OffsetDateTime::from_unix_timestamp(s).expect("timestamps are in range");
                let first = d
                    .replace_day(1)
                    .expect("day 1 exists")
                    .replace_time(time::Time::MIDNIGHT);
                Timestamp::from_unix(first.unix_timestamp()).unwrap_or(t)
            }
        }
    }
}

/// One group's totals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageRow {
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub window_start: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
    /// Exact decimal string.
    #[serde(serialize_with = "super::decimal::serialize")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString, example = "86400"))]
    pub gpu_seconds: Decimal,
    /// Exact decimal string.
    #[serde(serialize_with = "super::decimal::serialize")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString, example = "12.5"))]
    pub kwh: Decimal,
    pub usage_records: u64,
    pub energy_records: u64,
}

type Key = (
    Option<Timestamp>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// The rollup bucket of usage and energy records (issue #28, "rollups"): the records of one
/// tenant (none: `""`), one kind, region, node, GPU model (energy: `""`) and lease (none: `""`)
/// whose interval starts in one UTC hour. A bucket is a subset of one measurement stream, whose
/// records never overlap, so its sums stay small.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RollupKey {
    pub tenant: String,
    /// The start of the hour, Unix seconds.
    pub hour: i64,
    /// `gpu_usage` or `energy`.
    pub kind: &'static str,
    pub region: String,
    pub node: String,
    pub gpu_model: String,
    pub lease: String,
}

impl RollupKey {
    /// The bucket's hour `[start, start + 1 h)`; `None` out of the timestamps' range.
    pub fn hour_span(&self) -> Option<(Timestamp, Timestamp)> {
        Some((
            Timestamp::from_unix(self.hour)?,
            Timestamp::from_unix(self.hour.checked_add(3600)?)?,
        ))
    }

    /// The bucket's lease (`None` for `""`).
    pub fn lease(&self) -> Option<&str> {
        (!self.lease.is_empty()).then_some(self.lease.as_str())
    }
}

/// What the records of a rollup bucket add up to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rollup {
    /// GPU-seconds (usage) or kWh (energy).
    pub quantity: Decimal,
    pub records: u64,
    /// The latest end of the records' intervals (what a price change must not fall before
    /// for the bucket to be priced whole).
    pub last_end: Timestamp,
}

impl Rollup {
    /// Adds `other`'s records.
    pub fn add(&mut self, other: &Rollup) {
        self.quantity += other.quantity;
        self.records += other.records;
        self.last_end = self.last_end.max(other.last_end);
    }
}

/// What one record adds to its bucket: the key, and its GPU-seconds (usage) or kWh (energy) as
/// one record ending at its end. Other kinds add nothing. The one rule the ledger keeps its
/// rollups by and `verify-log` recomputes them by.
pub fn rollup_of(body: &Body) -> Option<(RollupKey, Rollup)> {
    let hour = |t: Timestamp| t.unix() - t.unix().rem_euclid(3600);
    let one = |quantity, last_end| Rollup {
        quantity,
        records: 1,
        last_end,
    };
    match body {
        Body::GpuUsage(u) => Some((
            RollupKey {
                tenant: u.tenant.clone(),
                hour: hour(u.start),
                kind: "gpu_usage",
                region: u.region.clone(),
                node: u.node.clone(),
                gpu_model: u.gpu_model.clone(),
                lease: u.lease.clone().unwrap_or_default(),
            },
            one(u.gpu_seconds, u.end),
        )),
        Body::Energy(e) => Some((
            RollupKey {
                tenant: e.tenant.clone().unwrap_or_default(),
                hour: hour(e.start),
                kind: "energy",
                region: e.region.clone(),
                node: e.node.clone(),
                gpu_model: String::new(),
                lease: String::new(),
            },
            one(e.kwh, e.end),
        )),
        _ => None,
    }
}

/// Accumulates records into groups.
#[derive(Debug)]
pub struct Aggregator {
    from: Timestamp,
    to: Timestamp,
    group_by: Vec<GroupBy>,
    window: Option<Window>,
    groups: BTreeMap<Key, UsageRow>,
}

impl Aggregator {
    /// An aggregator for records starting in `[from, to)`.
    pub fn new(
        from: Timestamp,
        to: Timestamp,
        group_by: Vec<GroupBy>,
        window: Option<Window>,
    ) -> Self {
        Self {
            from,
            to,
            group_by,
            window,
            groups: BTreeMap::new(),
        }
    }

    fn key(
        &self,
        start: Timestamp,
        region: &str,
        node: &str,
        model: Option<&str>,
        lease: Option<&str>,
    ) -> Key {
        let pick = |g: GroupBy, v: Option<&str>| {
            self.group_by
                .contains(&g)
                .then(|| v.unwrap_or("").to_owned())
        };
        (
            self.window.map(|w| w.start_of(start)),
            pick(GroupBy::Region, Some(region)),
            pick(GroupBy::Node, Some(node)),
            pick(GroupBy::GpuModel, model),
            pick(GroupBy::Lease, lease),
        )
    }

    fn row(&mut self, key: Key) -> &mut UsageRow {
        self.groups.entry(key.clone()).or_insert_with(|| UsageRow {
            window_start: key.0,
            region: key.1,
            node: key.2,
            gpu_model: key.3,
            lease: key.4,
            gpu_seconds: Decimal::ZERO,
            kwh: Decimal::ZERO,
            usage_records: 0,
            energy_records: 0,
        })
    }

    /// Adds a rollup bucket (`quantity` GPU-seconds or kWh over `records` records) exactly as
    /// its records would add one by one: every record of a bucket starts in its hour, so a
    /// bucket whose hour lies wholly inside the period counts whole; any other is ignored
    /// (the caller reads those records themselves).
    pub fn add_rollup(&mut self, key: &RollupKey, quantity: Decimal, records: u64) {
        let Some((start, end)) = key.hour_span() else {
            return;
        };
        if start < self.from || self.to < end {
            return;
        }
        let non_empty = |s: &str| (!s.is_empty()).then_some(s.to_owned());
        let (model, lease) = (non_empty(&key.gpu_model), non_empty(&key.lease));
        let k = self.key(
            start,
            &key.region,
            &key.node,
            model.as_deref(),
            lease.as_deref(),
        );
        let row = self.row(k);
        if key.kind == "energy" {
            row.kwh += quantity;
            row.energy_records += records;
        } else {
            row.gpu_seconds += quantity;
            row.usage_records += records;
        }
    }

    /// Adds one record's body; other kinds and records outside the period are ignored.
    pub fn add(&mut self, body: &Body) {
        match body {
            Body::GpuUsage(u) if (self.from..self.to).contains(&u.start) => {
                let key = self.key(
                    u.start,
                    &u.region,
                    &u.node,
                    Some(&u.gpu_model),
                    u.lease.as_deref(),
                );
                let row = self.row(key);
                row.gpu_seconds += u.gpu_seconds;
                row.usage_records += 1;
            }
            Body::Energy(e) if (self.from..self.to).contains(&e.start) => {
                let key = self.key(e.start, &e.region, &e.node, None, None);
                let row = self.row(key);
                row.kwh += e.kwh;
                row.energy_records += 1;
            }
            _ => {}
        }
    }

    /// The groups in key order, decimals normalised.
    pub fn finish(self) -> Vec<UsageRow> {
        self.groups
            .into_values()
            .map(|mut r| {
                r.gpu_seconds = r.gpu_seconds.normalize();
                r.kwh = r.kwh.normalize();
                r
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Energy, GpuUsage};

    fn usage(start: &str, secs: i64, count: i64, region: &str) -> Body {
        let start = Timestamp::parse(start).unwrap();
        Body::GpuUsage(GpuUsage {
            tenant: "t".into(),
            lease: None,
            region: region.into(),
            node: "n".into(),
            gpu_model: "H100".into(),
            gpu_count: Decimal::from(count),
            start,
            end: start.plus(secs),
            gpu_seconds: Decimal::from(count * secs),
        })
    }

    #[test]
    fn sums_exactly_by_window_and_group() {
        let from = Timestamp::parse("2026-11-01T00:00:00Z").unwrap();
        let to = Timestamp::parse("2026-12-01T00:00:00Z").unwrap();
        let mut a = Aggregator::new(from, to, vec![GroupBy::Region], Some(Window::Day));
        a.add(&usage("2026-11-30T23:59:50Z", 10, 8, "west"));
        a.add(&usage("2026-11-30T00:00:00Z", 10, 1, "west"));
        a.add(&usage("2026-11-30T00:00:00Z", 10, 2, "east"));
        a.add(&usage("2026-12-01T00:00:00Z", 10, 2, "east")); // outside [from, to)
        a.add(&Body::Energy(Energy {
            tenant: Some("t".into()),
            region: "west".into(),
            node: "n".into(),
            start: Timestamp::parse("2026-11-30T01:00:00Z").unwrap(),
            end: Timestamp::parse("2026-11-30T01:00:10Z").unwrap(),
            kwh: Decimal::new(1, 3),
        }));
        let rows = a.finish();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].region.as_deref(), Some("east"));
        assert_eq!(rows[0].gpu_seconds, Decimal::from(20));
        assert_eq!(rows[1].gpu_seconds, Decimal::from(90));
        assert_eq!(rows[1].kwh.to_string(), "0.001");
        assert_eq!(
            rows[1].window_start.unwrap().to_string(),
            "2026-11-30T00:00:00Z"
        );
        assert_eq!(
            Window::Month
                .start_of(Timestamp::parse("2026-02-28T13:00:00Z").unwrap())
                .to_string(),
            "2026-02-01T00:00:00Z"
        );
    }
}
