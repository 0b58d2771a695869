//! Prices read from the log: rate cards, region parameters, lease classes, spot prices, volume
//! tiers and tenant plans, all as entries, so every amount can be recomputed from the log alone.

use super::conn::DbConn;
use super::error::StoreError;
use super::schema::entries;
use diesel::prelude::*;
use gpuledger_core::rating::PriceBook;
use gpuledger_core::record::{Body, Kind, LeaseClass};
use gpuledger_core::time::Timestamp;
use std::collections::HashMap;

/// The kinds that carry prices or billing classes.
pub const PRICING_KINDS: [Kind; 6] = [
    Kind::RateCard,
    Kind::RegionParams,
    Kind::LeaseRegistered,
    Kind::SpotPrice,
    Kind::VolumeTiers,
    Kind::TenantPlan,
];

/// Every pricing entry below log size `size`, in log order, as (index, body).
pub fn pricing_entries(conn: &mut DbConn, size: u64) -> Result<Vec<(u64, Body)>, StoreError> {
    super::read::bodies_of(conn, &PRICING_KINDS, size)
}

/// Entries read from the database at a time by [`pricing_page`] and [`in_force`], so a
/// request holds at most this many bodies besides its answer, whatever the log's size.
pub const PRICING_BATCH: usize = 1000;

/// Which pricing entries a list asks for. Each field left out matches every entry; one that is
/// given matches only the entries that have that member with that value (a `region` filter
/// leaves out leases and tenant plans, which name no region). `lease_class` matches a rate
/// card's or volume tiers' `lease_class`, a lease's `class`, and `spot` every spot price.
#[derive(Debug, Clone, Default)]
pub struct PriceFilter {
    /// The kinds to read (empty: all of [`PRICING_KINDS`]).
    pub kinds: Vec<Kind>,
    pub region: Option<String>,
    pub gpu_model: Option<String>,
    pub lease_class: Option<LeaseClass>,
    /// `effective_from` at or after this instant (leases, which have none, are left out).
    pub from: Option<Timestamp>,
    /// `effective_from` before this instant (leases are left out).
    pub to: Option<Timestamp>,
}

/// A pricing body's region, GPU model, lease class and effective instant, where it has them.
fn members(
    b: &Body,
) -> (
    Option<&str>,
    Option<&str>,
    Option<LeaseClass>,
    Option<Timestamp>,
) {
    match b {
        Body::RateCard(r) => (
            Some(&r.region),
            Some(&r.gpu_model),
            Some(r.lease_class),
            Some(r.effective_from),
        ),
        Body::SpotPrice(p) => (
            Some(&p.region),
            Some(&p.gpu_model),
            Some(LeaseClass::Spot),
            Some(p.effective_from),
        ),
        Body::RegionParams(r) => (Some(&r.region), None, None, Some(r.effective_from)),
        Body::VolumeTiers(v) => (
            Some(&v.region),
            Some(&v.gpu_model),
            Some(v.lease_class),
            Some(v.effective_from),
        ),
        Body::LeaseRegistered(l) => (None, None, Some(l.class), None),
        Body::TenantPlan(p) => (None, None, None, Some(p.effective_from)),
        _ => (None, None, None, None),
    }
}

/// The series a pricing body belongs to, as the price book keys them (`core::rating`): one
/// entry of a series is in force at a time.
fn series(b: &Body) -> String {
    let k = b.kind().as_str();
    match b {
        Body::RateCard(r) => format!(
            "{k}|{}|{}|{}",
            r.region,
            r.gpu_model,
            r.lease_class.as_str()
        ),
        Body::SpotPrice(p) => format!("{k}|{}|{}", p.region, p.gpu_model),
        Body::RegionParams(r) => format!("{k}|{}", r.region),
        Body::VolumeTiers(v) => format!(
            "{k}|{}|{}|{}|{}",
            v.plan,
            v.region,
            v.gpu_model,
            v.lease_class.as_str()
        ),
        Body::LeaseRegistered(l) => format!("{k}|{}", l.lease),
        Body::TenantPlan(p) => format!("{k}|{}", p.tenant),
        _ => format!("{k}|"),
    }
}

impl PriceFilter {
    fn kinds(&self) -> Vec<&'static str> {
        let kinds: &[Kind] = if self.kinds.is_empty() {
            &PRICING_KINDS
        } else {
            &self.kinds
        };
        kinds.iter().map(|k| k.as_str()).collect()
    }

    /// Whether `b` matches the series members (`region`, `gpu_model`, `lease_class`).
    fn series_match(&self, b: &Body) -> bool {
        let (region, model, class, _) = members(b);
        self.region.as_deref().is_none_or(|r| region == Some(r))
            && self.gpu_model.as_deref().is_none_or(|m| model == Some(m))
            && self.lease_class.is_none_or(|c| class == Some(c))
    }

    /// Whether `b`'s effective instant is in `[from, to)`.
    fn time_match(&self, b: &Body) -> bool {
        if self.from.is_none() && self.to.is_none() {
            return true;
        }
        let Some(at) = members(b).3 else {
            return false;
        };
        self.from.is_none_or(|f| at >= f) && self.to.is_none_or(|t| at < t)
    }
}

/// Up to [`PRICING_BATCH`] pricing entries of `filter`'s kinds at `after < index < size`, in
/// log order, those of tenants other than `tenant` (if given) left out; and whether the batch
/// was full (more may follow).
fn batch(
    conn: &mut DbConn,
    filter: &PriceFilter,
    tenant: Option<&str>,
    after: Option<u64>,
    size: u64,
) -> Result<(Vec<(u64, Body)>, bool), StoreError> {
    let mut q = entries::table
        .filter(entries::kind.eq_any(filter.kinds()))
        .filter(entries::idx.lt(size as i64))
        .order(entries::idx.asc())
        .select((entries::idx, entries::leaf))
        .limit(PRICING_BATCH as i64)
        .into_boxed();
    if let Some(a) = after {
        q = q.filter(entries::idx.gt(a as i64));
    }
    if let Some(t) = tenant {
        q = q.filter(
            entries::tenant
                .is_null()
                .or(entries::tenant.eq(t.to_owned())),
        );
    }
    let rows: Vec<(i64, Vec<u8>)> = q.load(conn)?;
    let full = rows.len() == PRICING_BATCH;
    let mut out = Vec::with_capacity(rows.len());
    for (i, leaf) in rows {
        let body = super::usage::parse_body(i, &leaf)?;
        // The column says whose an entry is; the body is checked as well.
        if tenant.is_none() || body.tenant().is_none_or(|t| Some(t) == tenant) {
            out.push((i as u64, body));
        }
    }
    Ok((out, full))
}

/// The pricing entries below log size `size` that match `filter`, in log order: at most
/// `limit` after index `after`. With `tenant`, other tenants' leases and plans are left out.
pub fn pricing_page(
    conn: &mut DbConn,
    filter: &PriceFilter,
    tenant: Option<&str>,
    mut after: Option<u64>,
    size: u64,
    limit: usize,
) -> Result<Vec<(u64, Body)>, StoreError> {
    let mut out = Vec::new();
    loop {
        let (rows, full) = batch(conn, filter, tenant, after, size)?;
        after = rows.last().map(|(i, _)| *i).or(after);
        for (i, b) in rows {
            if filter.series_match(&b) && filter.time_match(&b) {
                out.push((i, b));
                if out.len() == limit {
                    return Ok(out);
                }
            }
        }
        if !full {
            return Ok(out);
        }
    }
}

/// The entry of each series of `filter` in force at `as_of` in the log below size `size`
/// (the latest `effective_from` at or before it; of two at the same instant, the later in the
/// log, as rating takes them; every lease, which has no effective instant), in log order: at
/// most `limit` after index `after`. With `tenant`, other tenants' leases and plans are left
/// out. `filter.from` and `filter.to` are not used.
pub fn in_force(
    conn: &mut DbConn,
    filter: &PriceFilter,
    tenant: Option<&str>,
    as_of: Timestamp,
    after: Option<u64>,
    size: u64,
    limit: usize,
) -> Result<Vec<(u64, Body)>, StoreError> {
    let mut latest: HashMap<String, (Option<Timestamp>, u64, Body)> = HashMap::new();
    let mut cursor = None;
    loop {
        let (rows, full) = batch(conn, filter, tenant, cursor, size)?;
        cursor = rows.last().map(|(i, _)| *i).or(cursor);
        for (i, b) in rows {
            if !filter.series_match(&b) {
                continue;
            }
            let at = members(&b).3;
            if at.is_some_and(|t| t > as_of) {
                continue;
            }
            let key = series(&b);
            // Rows come in log order: a later one at the same instant replaces an earlier.
            let replaces = latest.get(&key).is_none_or(|(prev, _, _)| at >= *prev);
            if replaces {
                latest.insert(key, (at, i, b));
            }
        }
        if !full {
            break;
        }
    }
    let mut out: Vec<(u64, Body)> = latest
        .into_values()
        .map(|(_, i, b)| (i, b))
        .filter(|(i, _)| after.is_none_or(|a| *i > a))
        .collect();
    out.sort_by_key(|(i, _)| *i);
    out.truncate(limit);
    Ok(out)
}

/// The price book of the log as of size `size`.
pub fn price_book(conn: &mut DbConn, size: u64) -> Result<PriceBook, StoreError> {
    let mut book = PriceBook::default();
    for (_, body) in pricing_entries(conn, size)? {
        book.add_entry(&body);
    }
    Ok(book)
}

/// Rates a tenant's usage and energy records whose intervals start in `[from, to)`, with the
/// prices of the log as of size `size` (and the plan and volume tiers in force at `from`), as
/// an invoice of the period that no earlier invoice precedes: the records excluded from rating
/// (disputes) are left out and listed. No contract is measured.
pub fn rate_period(
    conn: &mut DbConn,
    tenant: &str,
    from: Timestamp,
    to: Timestamp,
    size: u64,
) -> Result<gpuledger_core::invoice::Rated, StoreError> {
    // The tenant-month's rollups and records (`store::invoices::preview`), not the tenant's
    // whole history.
    super::invoices::preview(
        conn,
        tenant,
        gpuledger_core::invoice::Period { from, to },
        size,
        Default::default(),
    )
}
