//! Usage and energy records read from the log, re-parsed from their leaves and handed on in log
//! order.
//!
//! Reads cost what they return: usage queries, invoice previews, invoices and certificates
//! select the records whose interval *starts* in a period (the attribution rule of
//! `core::usage`, `core::invoice` and `core::certificate`) through the partial index
//! `entries_tenant_start (tenant, start_at, idx)`, an index-only range scan that yields their
//! log indexes, and then read those entries by index, a page at a time. A tenant-month costs the
//! same in a log of ten million entries as in a fresh one. The `tenant` and `start_at` columns
//! the selection uses are derived from each leaf and re-checked by verify-log.

use super::conn::DbConn;
use super::error::StoreError;
use super::schema::entries;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool};
use gpuledger_core::merkle::Hash;
use gpuledger_core::record::{Body, Kind};
use gpuledger_core::time::Timestamp;
use gpuledger_core::usage::Aggregator;

/// The parts of a leaf a usage reader needs; the rest (signature, chain link) is skipped.
#[derive(serde::Deserialize)]
struct BodyOnly<'a> {
    #[serde(borrow)]
    envelope: EnvelopeBody<'a>,
}

#[derive(serde::Deserialize)]
struct EnvelopeBody<'a> {
    kind: &'a str,
    body: serde_json::Value,
}

/// Receives each entry's index, leaf bytes, stored leaf hash and body.
pub type UsageVisitor<'a> = dyn FnMut(u64, &[u8], Hash, &Body) + 'a;

/// An entry row as read: index, leaf bytes, stored leaf hash, interval start and end.
type Row = (i64, Vec<u8>, Vec<u8>, Option<i64>, Option<i64>);

/// The columns of a [`Row`].
macro_rules! row_columns {
    () => {
        (
            entries::idx,
            entries::leaf,
            entries::leaf_hash,
            entries::start_at,
            entries::end_at,
        )
    };
}

/// Entries read per query: a page of a range, or a page of selected indexes (one bound
/// parameter each on SQLite, well below its limit of 32,766; one array on PostgreSQL).
const PAGE: usize = 5_000;

/// The largest index a query compares with (`i64` columns).
fn bound(size: u64) -> i64 {
    size.min(i64::MAX as u64) as i64
}

/// Feeds the usage and energy records starting in `[from, to)` (of `tenant`, if given; of every
/// tenant and of none otherwise) to `agg`: the whole hours inside the period from the usage
/// rollups (module `rollups`), the records of the partial hours at its ends one by one. The
/// same rows as [`aggregate_records`], which reads every record.
pub fn aggregate(
    conn: &mut DbConn,
    tenant: Option<&str>,
    from: Timestamp,
    to: Timestamp,
    agg: &mut Aggregator,
) -> Result<(), StoreError> {
    let hour = |t: i64, up: bool| {
        let down = t - t.rem_euclid(3600);
        Timestamp::from_unix(if up && down < t { down + 3600 } else { down })
    };
    match (hour(from.unix(), true), hour(to.unix(), false)) {
        (Some(first), Some(last)) if first < last => {
            super::rollups::add_to(conn, tenant, first, last, agg)?;
            for (a, b) in [(from, first), (last, to)] {
                if a < b {
                    aggregate_records(conn, tenant, a, b, agg)?;
                }
            }
            Ok(())
        }
        _ => aggregate_records(conn, tenant, from, to, agg),
    }
}

/// [`aggregate`] from every record, read one by one.
pub fn aggregate_records(
    conn: &mut DbConn,
    tenant: Option<&str>,
    from: Timestamp,
    to: Timestamp,
    agg: &mut Aggregator,
) -> Result<(), StoreError> {
    let size = super::read::head(conn)?.0;
    let selected = match tenant {
        Some(t) => starting_in(conn, t, from, to, size)?,
        None => every_starting_in(conn, from, to, size)?,
    };
    for_each_of(conn, tenant, &selected, &mut |_, _, _, b| agg.add(b))
}

/// A selected entry: its log index, and where its row is (SQLite: its rowid, which the
/// `entries_tenant_start` index holds, so reading it is one lookup; PostgreSQL: the index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Selected {
    pub idx: u64,
    row: i64,
}

/// The entries a query of `entries` selects, located: `(idx, rowid)` on SQLite, `(idx, idx)` on
/// PostgreSQL.
macro_rules! located {
    ($conn:expr, $query:expr) => {{
        let rows: Vec<(i64, i64)> = match $conn {
            DbConn::Sqlite(c) => $query
                .select((entries::idx, diesel::dsl::sql::<BigInt>("rowid")))
                .load(c)?,
            DbConn::Pg(c) => $query.select((entries::idx, entries::idx)).load(c)?,
        };
        rows
    }};
}

/// The usage and energy records below log size `size` of `tenant` whose interval starts in
/// `[from, to)`, ascending: exactly the entries whose `tenant` column is `tenant` and whose
/// `start_at` is in the range (only usage and energy entries have one). An index-only scan of
/// `entries_tenant_start`.
pub fn starting_in(
    conn: &mut DbConn,
    tenant: &str,
    from: Timestamp,
    to: Timestamp,
    size: u64,
) -> Result<Vec<Selected>, StoreError> {
    let rows = located!(
        conn,
        entries::table
            .filter(entries::tenant.eq(tenant))
            .filter(entries::start_at.ge(from.unix()))
            .filter(entries::start_at.lt(to.unix()))
    );
    Ok(sorted_below(rows, size))
}

/// Like [`starting_in`] for every tenant and for records of no tenant (energy a node measured
/// for no lease): the tenants are found by walking the `(tenant, …)` index one distinct value at
/// a time, so the cost is one index lookup per tenant plus the records returned.
pub fn every_starting_in(
    conn: &mut DbConn,
    from: Timestamp,
    to: Timestamp,
    size: u64,
) -> Result<Vec<Selected>, StoreError> {
    let mut rows = located!(
        conn,
        entries::table
            .filter(entries::tenant.is_null())
            .filter(entries::start_at.ge(from.unix()))
            .filter(entries::start_at.lt(to.unix()))
    );
    let mut after: Option<String> = None;
    loop {
        let mut q = entries::table
            .select(diesel::dsl::min(entries::tenant))
            .into_boxed();
        q = match &after {
            Some(a) => q.filter(entries::tenant.gt(a.clone())),
            None => q.filter(entries::tenant.is_not_null()),
        };
        let Some(tenant) = q.first::<Option<String>>(conn)? else {
            break;
        };
        rows.extend(located!(
            conn,
            entries::table
                .filter(entries::tenant.eq(&tenant))
                .filter(entries::start_at.ge(from.unix()))
                .filter(entries::start_at.lt(to.unix()))
        ));
        after = Some(tenant);
    }
    Ok(sorted_below(rows, size))
}

fn sorted_below(rows: Vec<(i64, i64)>, size: u64) -> Vec<Selected> {
    let mut out: Vec<Selected> = rows
        .into_iter()
        .map(|(i, row)| Selected { idx: i as u64, row })
        .filter(|s| s.idx < size)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// `tenant`'s usage and energy entries with index in `range`, with their interval starts, in
/// log order: the records logged since a given size (through the `(tenant, idx)` index).
pub fn logged_in(
    conn: &mut DbConn,
    tenant: &str,
    range: std::ops::Range<u64>,
) -> Result<Vec<(Selected, Timestamp)>, StoreError> {
    if range.is_empty() {
        return Ok(Vec::new());
    }
    let q = entries::table
        .filter(entries::tenant.eq(tenant))
        .filter(entries::idx.ge(bound(range.start)))
        .filter(entries::idx.lt(bound(range.end)));
    let rows: Vec<(i64, i64, Option<i64>)> = match conn {
        DbConn::Sqlite(c) => q
            .select((
                entries::idx,
                diesel::dsl::sql::<BigInt>("rowid"),
                entries::start_at,
            ))
            .load(c)?,
        DbConn::Pg(c) => q
            .select((entries::idx, entries::idx, entries::start_at))
            .load(c)?,
    };
    let mut out = rows
        .into_iter()
        .filter_map(|(i, row, s)| s.map(|s| (i, row, s)))
        .map(|(i, row, s)| {
            let start = Timestamp::from_unix(s)
                .ok_or_else(|| StoreError::Corrupt(format!("entry {i}: start_at")))?;
            Ok((Selected { idx: i as u64, row }, start))
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    out.sort_unstable();
    Ok(out)
}

/// A page of selected entries is read as one range of the table when it spans at most this many
/// times as many entries as it holds (the others in the range are read and dropped): a range
/// scan costs a fraction of a lookup per entry, on both backends. Sparser pages are read entry
/// by entry.
const DENSE_SPAN: u64 = 3;

/// Calls `f` with each of the `selected` entries (ascending), in that order, reading pages of
/// [`PAGE`] entries so memory stays bounded: a dense page as one range of rows ([`DENSE_SPAN`]),
/// another by where each of its rows is. Every one must be a stored entry, and `tenant`'s when
/// given (the database then drops the other tenants' rows of a range).
pub fn for_each_of(
    conn: &mut DbConn,
    tenant: Option<&str>,
    selected: &[Selected],
    f: &mut UsageVisitor,
) -> Result<(), StoreError> {
    debug_assert!(
        selected.windows(2).all(|w| w[0].idx < w[1].idx),
        "ascending"
    );
    let mut pages = selected.chunks(PAGE);
    stream(
        conn,
        move |conn| {
            let Some(page) = pages.next() else {
                return Ok(None);
            };
            Ok(Some(load_page(conn, tenant, page)?))
        },
        f,
    )
}

/// The rows of one page of selected entries, in log order: by row position (a range scan when
/// the page is dense, else the rows themselves), or by log index when a row moved since it was
/// selected (a SQLite VACUUM renumbers rowids).
fn load_page(
    conn: &mut DbConn,
    tenant: Option<&str>,
    page: &[Selected],
) -> Result<Vec<Row>, StoreError> {
    let (first, last) = (page[0], page[page.len() - 1]);
    let dense = last.idx - first.idx < DENSE_SPAN * page.len() as u64;
    let located: Vec<i64> = page.iter().map(|s| s.row).collect();
    // Where a row is: SQLite's rowid (the table's b-tree key), PostgreSQL's primary key.
    let position = diesel::dsl::sql::<BigInt>(match conn {
        DbConn::Sqlite(_) => "rowid",
        DbConn::Pg(_) => "idx",
    });
    let mut rows: Vec<Row> = if dense {
        entries::table
            .filter(position.between(first.row, last.row))
            .filter(
                entries::tenant
                    .eq(tenant)
                    .or(tenant.is_none().into_sql::<Bool>()),
            )
            .select(row_columns!())
            .load(conn)?
    } else {
        entries::table
            .filter(position.eq_any(&located))
            .select(row_columns!())
            .load(conn)?
    };
    rows.sort_unstable_by_key(|r| r.0);
    if dense {
        rows.retain(|r| page.binary_search_by_key(&(r.0 as u64), |s| s.idx).is_ok());
    }
    if rows
        .iter()
        .map(|r| r.0 as u64)
        .eq(page.iter().map(|s| s.idx))
    {
        return Ok(rows);
    }
    let wanted: Vec<i64> = page.iter().map(|s| s.idx as i64).collect();
    let rows: Vec<Row> = entries::table
        .filter(entries::idx.eq_any(&wanted))
        .order(entries::idx.asc())
        .select(row_columns!())
        .load(conn)?;
    if rows.len() != wanted.len() {
        return Err(StoreError::Corrupt(format!(
            "{} of {} selected entries were not found",
            wanted.len() - rows.len(),
            wanted.len()
        )));
    }
    Ok(rows)
}

/// Calls `f` with every usage and energy entry below log size `size` (of `tenant`, if given),
/// in log order, reading pages of [`PAGE`] entries so memory stays bounded. This reads the
/// whole history; the period reads above select by start instead.
pub fn for_each_usage(
    conn: &mut DbConn,
    tenant: Option<&str>,
    size: u64,
    f: &mut dyn FnMut(&Body),
) -> Result<(), StoreError> {
    for_each_usage_hashed(conn, tenant, 0..size, &mut |_, _, _, b| f(b))
}

/// Like [`for_each_usage`], for entries with index in `range`, with each entry's index, leaf
/// bytes and stored leaf hash.
pub fn for_each_usage_hashed(
    conn: &mut DbConn,
    tenant: Option<&str>,
    range: std::ops::Range<u64>,
    f: &mut UsageVisitor,
) -> Result<(), StoreError> {
    let kinds = [Kind::GpuUsage.as_str(), Kind::Energy.as_str()];
    let end = bound(range.end);
    let mut after = bound(range.start) - 1;
    let mut done = false;
    stream(
        conn,
        move |conn| {
            if done {
                return Ok(None);
            }
            let mut q = entries::table
                .filter(entries::idx.gt(after))
                .filter(entries::idx.lt(end))
                .filter(entries::kind.eq_any(kinds))
                .order(entries::idx.asc())
                .limit(PAGE as i64)
                .select(row_columns!())
                .into_boxed();
            if let Some(t) = tenant {
                q = q.filter(entries::tenant.eq(t));
            }
            let rows: Vec<Row> = q.load(conn)?;
            match rows.last() {
                Some(r) if rows.len() == PAGE => after = r.0,
                _ => done = true,
            }
            Ok((!rows.is_empty()).then_some(rows))
        },
        f,
    )
}

/// A reader thread fetches pages (`next_page` until it answers `None`) while this thread parses
/// them (on all cores) and hands the entries to `f` in order: reading and rating overlap. At
/// most two pages wait in the channel, so memory stays bounded.
fn stream(
    conn: &mut DbConn,
    mut next_page: impl FnMut(&mut DbConn) -> Result<Option<Vec<Row>>, StoreError> + Send,
    f: &mut UsageVisitor,
) -> Result<(), StoreError> {
    let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Vec<Row>, StoreError>>(2);
    std::thread::scope(|scope| {
        scope.spawn(move || loop {
            let page = match next_page(conn) {
                Ok(Some(rows)) => Ok(rows),
                Ok(None) => return,
                Err(e) => Err(e),
            };
            let failed = page.is_err();
            if tx.send(page).is_err() || failed {
                return;
            }
        });
        for page in rx {
            let rows = page?;
            // Leaves were checked canonical when written and are re-checked by verify-log, so
            // this read path only parses them.
            use rayon::prelude::*;
            let bodies: Vec<Result<Body, StoreError>> = rows
                .par_iter()
                .map(|(idx, bytes, _, start, end)| match (start, end) {
                    (Some(s), Some(e)) => match usage_body(bytes, *s, *e) {
                        Some(b) => Ok(b),
                        None => parse_body(*idx, bytes),
                    },
                    _ => parse_body(*idx, bytes),
                })
                .collect();
            for ((idx, leaf, hash, _, _), body) in rows.iter().zip(bodies) {
                let hash = Hash(hash.as_slice().try_into().map_err(|_| {
                    StoreError::Corrupt(format!("entry {idx}: stored leaf hash length"))
                })?);
                f(*idx as u64, leaf, hash, &body?);
            }
        }
        Ok(())
    })
}

/// The parts of a stored usage or energy leaf its body is made from, borrowed from the leaf's
/// bytes: no JSON tree is built.
#[derive(serde::Deserialize)]
struct UsageLeaf<'a> {
    #[serde(borrow)]
    envelope: UsageEnvelope<'a>,
}

#[derive(serde::Deserialize)]
struct UsageEnvelope<'a> {
    kind: &'a str,
    #[serde(borrow)]
    body: UsageWire<'a>,
}

/// The members of a `gpu_usage` or `energy` body (docs/PROTOCOL.md §5). Unknown members, or
/// strings with escapes (which cannot be borrowed), send the entry to [`parse_body`].
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct UsageWire<'a> {
    #[serde(default, deserialize_with = "present")]
    tenant: Option<&'a str>,
    #[serde(default, deserialize_with = "present")]
    lease: Option<&'a str>,
    region: &'a str,
    node: &'a str,
    #[serde(default, deserialize_with = "present")]
    gpu_model: Option<&'a str>,
    #[serde(default, deserialize_with = "present")]
    gpu_count: Option<&'a str>,
    #[serde(default, deserialize_with = "present")]
    gpu_seconds: Option<&'a str>,
    #[serde(default, deserialize_with = "present")]
    kwh: Option<&'a str>,
    #[allow(dead_code)]
    start: &'a str,
    #[allow(dead_code)]
    end: &'a str,
}

/// A member that, when present, must not be `null` (as the core reads bodies).
fn present<'de, D: serde::Deserializer<'de>, T: serde::Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// The body of a stored usage or energy entry whose interval is `[start, end)` (its `start_at`
/// and `end_at` columns, derived from the leaf and checked by verify-log, as the selection by
/// start already relies on): the fast path of the read paths, about twice as fast as
/// [`parse_body`], with no JSON tree and no re-formatting of timestamps. `None` for anything
/// else, which [`parse_body`] then reads; both give the same body (tested).
fn usage_body(bytes: &[u8], start: i64, end: i64) -> Option<Body> {
    use gpuledger_core::decimal::parse_canonical;
    use gpuledger_core::record::{Energy, GpuUsage};
    let leaf: UsageLeaf = serde_json::from_slice(bytes).ok()?;
    let b = leaf.envelope.body;
    let start = Timestamp::from_unix(start)?;
    let end = Timestamp::from_unix(end)?;
    match leaf.envelope.kind {
        "gpu_usage" if b.kwh.is_none() => Some(Body::GpuUsage(GpuUsage {
            tenant: b.tenant?.to_owned(),
            lease: b.lease.map(str::to_owned),
            region: b.region.to_owned(),
            node: b.node.to_owned(),
            gpu_model: b.gpu_model?.to_owned(),
            gpu_count: parse_canonical(b.gpu_count?).ok()?,
            start,
            end,
            gpu_seconds: parse_canonical(b.gpu_seconds?).ok()?,
        })),
        "energy"
            if b.lease.is_none()
                && b.gpu_model.is_none()
                && b.gpu_count.is_none()
                && b.gpu_seconds.is_none() =>
        {
            Some(Body::Energy(Energy {
                tenant: b.tenant.map(str::to_owned),
                region: b.region.to_owned(),
                node: b.node.to_owned(),
                start,
                end,
                kwh: parse_canonical(b.kwh?).ok()?,
            }))
        }
        _ => None,
    }
}

/// The body of a stored entry, parsed without re-checking the leaf: leaves were checked
/// canonical when written and are re-checked by verify-log, so read paths only parse them.
pub(crate) fn parse_body(idx: i64, bytes: &[u8]) -> Result<Body, StoreError> {
    let leaf: BodyOnly = serde_json::from_slice(bytes)
        .map_err(|e| StoreError::Corrupt(format!("entry {idx}: {e}")))?;
    let kind = Kind::parse(leaf.envelope.kind)
        .ok_or_else(|| StoreError::Corrupt(format!("entry {idx}: unknown kind")))?;
    Body::from_value(kind, &leaf.envelope.body)
        .map_err(|r| StoreError::Corrupt(format!("entry {idx}: {r}")))
}

/// Whether any entry names `tenant` (tenants need not be created before agents report them).
pub fn tenant_has_entries(conn: &mut DbConn, tenant: &str) -> Result<bool, StoreError> {
    let one: Option<i64> = entries::table
        .filter(entries::tenant.eq(tenant))
        .select(entries::idx)
        .first(conn)
        .optional()?;
    Ok(one.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuledger_core::envelope::Envelope;
    use gpuledger_core::leaf::leaf_bytes;
    use gpuledger_core::merkle::{encode_hash, Hash};
    use gpuledger_core::record::{Energy, GpuUsage, RateCard};
    use gpuledger_core::sample;
    use rust_decimal::Decimal;
    use std::str::FromStr;

    fn leaf(i: u64, body: &Body) -> Vec<u8> {
        let env = Envelope::sign(
            sample::ORIGIN,
            body.kind(),
            "node-1",
            &sample::key("node-1"),
            i + 1,
            body,
        );
        let checked = env.check(sample::ORIGIN).expect("a valid record");
        let at = Timestamp::parse("2026-11-30T12:00:00Z").unwrap();
        leaf_bytes(i, at, &encode_hash(&Hash([7; 32])), &checked.canonical)
    }

    #[test]
    fn the_fast_path_reads_what_the_core_reads() {
        let t = |s: &str| Timestamp::parse(s).unwrap();
        let d = |s: &str| Decimal::from_str(s).unwrap();
        let usage = |lease: Option<&str>, count: &str, seconds: &str| {
            Body::GpuUsage(GpuUsage {
                tenant: "acme".into(),
                lease: lease.map(str::to_owned),
                region: "west".into(),
                node: "node-1".into(),
                gpu_model: "H100".into(),
                gpu_count: d(count),
                start: t("2026-11-30T00:00:00Z"),
                end: t("2026-11-30T00:00:10Z"),
                gpu_seconds: d(seconds),
            })
        };
        let energy = |tenant: Option<&str>, kwh: &str| {
            Body::Energy(Energy {
                tenant: tenant.map(str::to_owned),
                region: "west".into(),
                node: "node-1".into(),
                start: t("2026-11-29T23:59:50Z"),
                end: t("2026-11-30T00:00:10Z"),
                kwh: d(kwh),
            })
        };
        let bodies = [
            usage(None, "8", "80"),
            usage(Some("lease-acme"), "0.25", "2.5"),
            usage(Some("l"), "1024", "10240"),
            energy(Some("acme"), "0.000125"),
            energy(None, "12"),
        ];
        for (i, body) in bodies.iter().enumerate() {
            let bytes = leaf(i as u64, body);
            let (_, start, end) = body.stream().expect("usage or energy");
            let fast = usage_body(&bytes, start.unix(), end.unix());
            assert_eq!(fast.as_ref(), Some(body), "fast path of {body:?}");
            assert_eq!(fast, Some(parse_body(i as i64, &bytes).unwrap()));
        }
        // Anything else is left to the full parse: another kind, or a member it does not know.
        let card = Body::RateCard(RateCard {
            region: "west".into(),
            gpu_model: "H100".into(),
            lease_class: gpuledger_core::rating::LeaseClass::OnDemand,
            currency: "CNY".into(),
            price_per_gpu_hour: d("18.5"),
            effective_from: t("2026-11-30T00:00:00Z"),
        });
        assert_eq!(usage_body(&leaf(9, &card), 0, 10), None);
        let bytes = leaf(0, &bodies[0]);
        let text = String::from_utf8(bytes).unwrap();
        let odd = text.replace("\"node\":", "\"zone\":\"z\",\"node\":");
        assert_ne!(odd, text);
        assert_eq!(usage_body(odd.as_bytes(), 0, 10), None);
        let escaped = text.replace("\"west\"", "\"w\\u0065st\"");
        assert_ne!(escaped, text);
        assert_eq!(usage_body(escaped.as_bytes(), 0, 10), None);
    }
}
