//! Usage rollups (issue #28, "rollups"): per bucket (`core::usage::RollupKey`: tenant, start
//! hour, kind, region, node, GPU model, lease), the GPU-seconds or kWh and the number of the
//! usage and energy records that start in it. They are written in the same transaction as the
//! records ([`store`], called by the one place entries are stored), so they never lag the log;
//! they are never a second source of truth: `verify-log` recomputes every bucket from the
//! leaves and names any row that differs ([`stored`]). Usage queries read the whole hours of a
//! period from them ([`add_to`]) instead of every record.
//!
//! Quantities are kept in units of 10⁻⁹ (a quantity has at most 9 decimals) as integers, so
//! both databases add them exactly. A bucket lies inside one measurement stream, whose records
//! never overlap: its sums stay far below `i64` (at most 1024 GPUs × 25 hours of seconds).

use super::conn::DbConn;
use super::error::StoreError;
use super::schema::{entries, rollup_state, usage_rollups};
use diesel::prelude::*;
use diesel::upsert::excluded;
use gpuledger_core::record::{Body, Kind};
use gpuledger_core::time::Timestamp;
use gpuledger_core::usage::{rollup_of, Aggregator, Rollup, RollupKey};
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;
use std::collections::BTreeMap;

/// A bucket's sums as stored: the quantity in units of 10⁻⁹, the number of records and the
/// latest end of their intervals (Unix seconds).
pub type Sum = (i64, i64, i64);

/// Per bucket, its [`Sum`].
pub type Sums = BTreeMap<RollupKey, Sum>;

/// Time this process spent keeping the rollups while storing entries, in nanoseconds (what
/// `bench grow` weighs against the time appending).
static UPKEEP_NANOS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Seconds this process has spent keeping the rollups while storing entries.
pub fn upkeep_seconds() -> f64 {
    UPKEEP_NANOS.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1e9
}

/// Counts `since`'s elapsed time as rollup upkeep.
pub(crate) fn count_upkeep(since: std::time::Instant) {
    let n = since.elapsed().as_nanos().min(u64::MAX as u128) as u64;
    UPKEEP_NANOS.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
}

/// Entries read per page when rolling up a log from before the rollups.
const PAGE: i64 = 5_000;

/// `q` in units of 10⁻⁹.
fn nanos(q: Decimal) -> Result<i64, StoreError> {
    let n = q * Decimal::from(1_000_000_000i64);
    if !n.fract().is_zero() {
        return Err(StoreError::Corrupt(format!(
            "the quantity {q} has more than 9 decimals"
        )));
    }
    n.to_i64()
        .ok_or_else(|| StoreError::Corrupt(format!("the quantity {q} is out of range")))
}

/// Adds what records add to their bucket (`core::usage::rollup_of`) to `sums` (the key is
/// copied only for a new bucket).
pub fn add(sums: &mut Sums, key: &RollupKey, r: &Rollup) -> Result<(), StoreError> {
    let (q, n, end) = (nanos(r.quantity)?, r.records as i64, r.last_end.unix());
    match sums.get_mut(key) {
        Some(s) => *s = (s.0 + q, s.1 + n, s.2.max(end)),
        None => {
            sums.insert(key.clone(), (q, n, end));
        }
    }
    Ok(())
}

/// Adds `body` (a usage or energy record; anything else adds nothing) to `sums`.
pub fn add_body(sums: &mut Sums, body: &Body) -> Result<(), StoreError> {
    match rollup_of(body) {
        Some((key, r)) => add(sums, &key, &r),
        None => Ok(()),
    }
}

/// Buckets upserted per statement (10 parameters each, well below either database's limit).
const UPSERT_CHUNK: usize = 1_000;

/// A bucket's row as inserted.
#[derive(Insertable)]
#[diesel(table_name = usage_rollups)]
struct NewRollup<'a> {
    tenant: &'a str,
    hour: i64,
    kind: &'a str,
    region: &'a str,
    node: &'a str,
    gpu_model: &'a str,
    lease: &'a str,
    quantity_nanos: i64,
    records: i64,
    last_end: i64,
}

/// Adds `sums` to the stored rollups and records that the entries below `new_size` are rolled
/// up; the rollups held the entries below `size` (else the log is corrupt). Inside the
/// transaction that stores those entries.
pub(crate) fn store(
    conn: &mut DbConn,
    sums: &Sums,
    size: u64,
    new_size: u64,
) -> Result<(), StoreError> {
    use usage_rollups::dsl as r;
    let rows: Vec<NewRollup> = sums
        .iter()
        .map(|(k, (q, n, end))| NewRollup {
            tenant: &k.tenant,
            hour: k.hour,
            kind: k.kind,
            region: &k.region,
            node: &k.node,
            gpu_model: &k.gpu_model,
            lease: &k.lease,
            quantity_nanos: *q,
            records: *n,
            last_end: *end,
        })
        .collect();
    let conflict = (
        r::tenant,
        r::hour,
        r::kind,
        r::region,
        r::node,
        r::gpu_model,
        r::lease,
    );
    // The latest end: GREATEST on PostgreSQL, the two-argument max() on SQLite.
    let add = |latest: &'static str| {
        (
            r::quantity_nanos.eq(r::quantity_nanos + excluded(r::quantity_nanos)),
            r::records.eq(r::records + excluded(r::records)),
            r::last_end.eq(diesel::dsl::sql::<diesel::sql_types::BigInt>(latest)),
        )
    };
    match conn {
        // One statement per chunk: a round trip per bucket would cost more than the records.
        DbConn::Pg(c) => {
            for chunk in rows.chunks(UPSERT_CHUNK) {
                diesel::insert_into(usage_rollups::table)
                    .values(chunk)
                    .on_conflict(conflict)
                    .do_update()
                    .set(add("GREATEST(usage_rollups.last_end, excluded.last_end)"))
                    .execute(c)?;
            }
        }
        // diesel writes no multi-row upsert for SQLite; its statements cost no round trip.
        DbConn::Sqlite(c) => {
            for row in &rows {
                diesel::insert_into(usage_rollups::table)
                    .values(row)
                    .on_conflict(conflict)
                    .do_update()
                    .set(add("max(usage_rollups.last_end, excluded.last_end)"))
                    .execute(c)?;
            }
        }
    }
    let moved = diesel::update(rollup_state::table.find(1i64))
        .filter(rollup_state::size.eq(size as i64))
        .set(rollup_state::size.eq(new_size as i64))
        .execute(conn)?;
    if moved != 1 {
        return Err(StoreError::Corrupt(format!(
            "the usage rollups do not hold the log's {size} entries"
        )));
    }
    Ok(())
}

/// Rolls up the entries the rollups do not hold yet (a log written before them), under the
/// log's write lock, once; returns how many entries were read. Called when a ledger opens.
pub fn catch_up(conn: &mut DbConn) -> Result<u64, StoreError> {
    // Read first: a log rolled up writes nothing (a database that must not be written, a
    // rewound old primary or a read-only standby, is only read).
    let done: i64 = rollup_state::table
        .find(1i64)
        .select(rollup_state::size)
        .first(conn)?;
    if done as u64 >= super::read::head(conn)?.0 {
        return Ok(0);
    }
    conn.transaction(|conn| {
        // The head row is the log's write lock (`write::Appender::lock`).
        diesel::update(super::schema::log_head::table.find(1i64))
            .set(super::schema::log_head::size.eq(super::schema::log_head::size))
            .execute(conn)?;
        let head = super::read::head(conn)?.0;
        let done: i64 = rollup_state::table
            .find(1i64)
            .select(rollup_state::size)
            .first(conn)?;
        let done = done as u64;
        if done >= head {
            return Ok(0);
        }
        let mut sums = Sums::new();
        let kinds = [Kind::GpuUsage.as_str(), Kind::Energy.as_str()];
        let mut from = done as i64;
        while from < head as i64 {
            let to = (from + PAGE).min(head as i64);
            let rows: Vec<(i64, Vec<u8>)> = entries::table
                .filter(entries::idx.ge(from).and(entries::idx.lt(to)))
                .filter(entries::kind.eq_any(kinds))
                .select((entries::idx, entries::leaf))
                .load(conn)?;
            for (idx, leaf) in rows {
                add_body(&mut sums, &super::usage::parse_body(idx, &leaf)?)?;
            }
            from = to;
        }
        store(conn, &sums, done, head)?;
        Ok(head - done)
    })
}

/// How many entries the stored rollups hold; `None` for a database from before them (not
/// migrated yet: the ledger migrates it and rolls it up when it opens).
pub fn rolled_up_to(conn: &mut DbConn) -> Result<Option<u64>, StoreError> {
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let query = match conn {
        DbConn::Sqlite(_) => {
            "SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table' AND name = 'rollup_state'"
        }
        DbConn::Pg(_) => {
            "SELECT COUNT(*) AS n FROM information_schema.tables WHERE table_name = 'rollup_state' \
             AND table_schema = current_schema()"
        }
    };
    let tables: Count = diesel::sql_query(query).get_result(conn)?;
    if tables.n == 0 {
        return Ok(None);
    }
    let size: i64 = rollup_state::table
        .find(1i64)
        .select(rollup_state::size)
        .first(conn)?;
    Ok(Some(size as u64))
}

/// A stored rollup row: the bucket's columns, the quantity (10⁻⁹) and the record count.
type Row = (
    String,
    i64,
    String,
    String,
    String,
    String,
    String,
    i64,
    i64,
    i64,
);

/// The columns of a [`Row`].
macro_rules! row_columns {
    () => {
        (
            usage_rollups::tenant,
            usage_rollups::hour,
            usage_rollups::kind,
            usage_rollups::region,
            usage_rollups::node,
            usage_rollups::gpu_model,
            usage_rollups::lease,
            usage_rollups::quantity_nanos,
            usage_rollups::records,
            usage_rollups::last_end,
        )
    };
}

/// A stored row as its bucket and sums.
fn bucket(
    (tenant, hour, kind, region, node, gpu_model, lease, q, n, end): Row,
) -> Result<(RollupKey, Sum), StoreError> {
    let kind = match kind.as_str() {
        "gpu_usage" => "gpu_usage",
        "energy" => "energy",
        other => {
            return Err(StoreError::Corrupt(format!(
                "a usage rollup of kind {other:?}"
            )))
        }
    };
    let key = RollupKey {
        tenant,
        hour,
        kind,
        region,
        node,
        gpu_model,
        lease,
    };
    Ok((key, (q, n, end)))
}

/// The stored rollups, every row.
pub fn stored(conn: &mut DbConn) -> Result<Sums, StoreError> {
    let rows: Vec<Row> = usage_rollups::table.select(row_columns!()).load(conn)?;
    rows.into_iter().map(bucket).collect()
}

/// Feeds `agg` the buckets of the hours `[from, to)` (whole hours), of `tenant` if given, of
/// every tenant and of none otherwise.
pub fn add_to(
    conn: &mut DbConn,
    tenant: Option<&str>,
    from: Timestamp,
    to: Timestamp,
    agg: &mut Aggregator,
) -> Result<(), StoreError> {
    use usage_rollups::dsl as r;
    let hours = r::hour.ge(from.unix()).and(r::hour.lt(to.unix()));
    let rows: Vec<Row> = match tenant {
        Some(t) => usage_rollups::table
            .filter(r::tenant.eq(t))
            .filter(hours)
            .select(row_columns!())
            .load(conn)?,
        None => usage_rollups::table
            .filter(hours)
            .select(row_columns!())
            .load(conn)?,
    };
    for row in rows {
        let (key, (q, n, _)) = bucket(row)?;
        agg.add_rollup(&key, Decimal::new(q, 9), n as u64);
    }
    Ok(())
}

/// How many times [`buckets_at`] reads the rollups again when entries were stored while it
/// read them.
const CONSISTENT_READS: usize = 3;

/// `tenant`'s buckets of the hours `[from, to)` holding exactly the log's entries below `size`
/// (ascending by key), for rating a period from them; `None` when the rollups cannot say (they
/// hold fewer entries, or entries kept being stored while they were read): the caller rates
/// the records one by one.
///
/// The rows and the size they hold are read so that they agree (the size read before and
/// after the rows is the same; every transaction that stores entries moves it). Records of the
/// tenant stored at or after `size` are then taken out of their buckets again: the quantity
/// and count exactly; a bucket's latest end may stay later than its records' (an
/// overestimate only ever makes a bucket rated record by record).
pub fn buckets_at(
    conn: &mut DbConn,
    tenant: &str,
    from: Timestamp,
    to: Timestamp,
    size: u64,
) -> Result<Option<Vec<(RollupKey, Rollup)>>, StoreError> {
    use usage_rollups::dsl as r;
    let state = |conn: &mut DbConn| -> Result<u64, StoreError> {
        let s: i64 = rollup_state::table
            .find(1i64)
            .select(rollup_state::size)
            .first(conn)?;
        Ok(s as u64)
    };
    let mut read = None;
    for _ in 0..CONSISTENT_READS {
        let before = state(conn)?;
        if before < size {
            return Ok(None);
        }
        let rows: Vec<Row> = usage_rollups::table
            .filter(r::tenant.eq(tenant))
            .filter(r::hour.ge(from.unix()).and(r::hour.lt(to.unix())))
            .select(row_columns!())
            .load(conn)?;
        if state(conn)? == before {
            read = Some((before, rows));
            break;
        }
    }
    let Some((held, rows)) = read else {
        return Ok(None);
    };
    let mut sums = Sums::new();
    for row in rows {
        let (key, sum) = bucket(row)?;
        sums.insert(key, sum);
    }
    // The tenant's records stored since `size`, out of their buckets again.
    let later: Vec<super::usage::Selected> = super::usage::logged_in(conn, tenant, size..held)?
        .into_iter()
        .filter(|(_, start)| from <= *start && *start < to)
        .map(|(s, _)| s)
        .collect();
    let mut failed = None;
    super::usage::for_each_of(conn, Some(tenant), &later, &mut |_, _, _, body| {
        let Some((key, r)) = rollup_of(body) else {
            return;
        };
        let taken = nanos(r.quantity).ok().and_then(|q| {
            let s = sums.get_mut(&key)?;
            (s.0 >= q && s.1 >= 1).then(|| *s = (s.0 - q, s.1 - 1, s.2))
        });
        if taken.is_none() {
            failed.get_or_insert_with(|| describe_missing(&key));
        }
    })?;
    if let Some(e) = failed {
        return Err(StoreError::Corrupt(e));
    }
    let mut out = Vec::with_capacity(sums.len());
    for (key, (q, n, end)) in sums {
        if n == 0 {
            continue;
        }
        let last_end = Timestamp::from_unix(end).ok_or_else(|| {
            StoreError::Corrupt(format!("a usage rollup ends out of range at {end}"))
        })?;
        let sums = Rollup {
            quantity: Decimal::new(q, 9),
            records: n as u64,
            last_end,
        };
        out.push((key, sums));
    }
    Ok(Some(out))
}

/// The error of a record stored below the rollups' size that its bucket does not hold.
fn describe_missing(key: &RollupKey) -> String {
    format!(
        "the usage rollup of tenant {:?}, hour {}, {} on node {} does not hold a record stored \
         in it",
        key.tenant, key.hour, key.kind, key.node
    )
}
