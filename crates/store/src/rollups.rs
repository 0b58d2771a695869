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
use gpuledger_core::usage::{rollup_of, Aggregator, RollupKey};
use rust_decimal::prelude::ToPrimitive;
use rust_decimal::Decimal;
use std::collections::BTreeMap;

/// Per bucket: the quantity in units of 10⁻⁹ and the number of records.
pub type Sums = BTreeMap<RollupKey, (i64, i64)>;

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

/// Adds one record's bucket and quantity to `sums` (the key is copied only for a new bucket).
pub fn add(sums: &mut Sums, key: &RollupKey, quantity: Decimal) -> Result<(), StoreError> {
    let n = nanos(quantity)?;
    match sums.get_mut(key) {
        Some(s) => *s = (s.0 + n, s.1 + 1),
        None => {
            sums.insert(key.clone(), (n, 1));
        }
    }
    Ok(())
}

/// Adds `body` (a usage or energy record; anything else adds nothing) to `sums`.
pub fn add_body(sums: &mut Sums, body: &Body) -> Result<(), StoreError> {
    match rollup_of(body) {
        Some((key, q)) => add(sums, &key, q),
        None => Ok(()),
    }
}

/// Buckets upserted per statement (9 parameters each, well below either database's limit).
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
        .map(|(k, (q, n))| NewRollup {
            tenant: &k.tenant,
            hour: k.hour,
            kind: k.kind,
            region: &k.region,
            node: &k.node,
            gpu_model: &k.gpu_model,
            lease: &k.lease,
            quantity_nanos: *q,
            records: *n,
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
    let add = (
        r::quantity_nanos.eq(r::quantity_nanos + excluded(r::quantity_nanos)),
        r::records.eq(r::records + excluded(r::records)),
    );
    match conn {
        // One statement per chunk: a round trip per bucket would cost more than the records.
        DbConn::Pg(c) => {
            for chunk in rows.chunks(UPSERT_CHUNK) {
                diesel::insert_into(usage_rollups::table)
                    .values(chunk)
                    .on_conflict(conflict)
                    .do_update()
                    .set(add)
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
                    .set(add)
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
        )
    };
}

/// A stored row as its bucket and sums.
fn bucket(
    (tenant, hour, kind, region, node, gpu_model, lease, q, n): Row,
) -> Result<(RollupKey, (i64, i64)), StoreError> {
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
    Ok((key, (q, n)))
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
        let (key, (q, n)) = bucket(row)?;
        agg.add_rollup(&key, Decimal::new(q, 9), n as u64);
    }
    Ok(())
}
