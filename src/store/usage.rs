//! Usage queries read from the log: every `gpu_usage` and `energy` entry of a tenant (or of
//! all tenants), re-parsed from its leaf and summed exactly.

use super::conn::DbConn;
use super::error::StoreError;
use super::schema::entries;
use crate::core::merkle::Hash;
use crate::core::record::{Body, Kind};
use crate::core::usage::Aggregator;
use diesel::prelude::*;

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

/// An entry row as read: index, leaf bytes, stored leaf hash.
type Row = (i64, Vec<u8>, Vec<u8>);

/// Entries read per query.
const PAGE: i64 = 5_000;

/// Feeds every usage and energy entry (of `tenant`, if given) to `agg`, in log order.
pub fn aggregate(
    conn: &mut DbConn,
    tenant: Option<&str>,
    agg: &mut Aggregator,
) -> Result<(), StoreError> {
    for_each_usage(conn, tenant, u64::MAX >> 12, &mut |b| agg.add(b))
}

/// Calls `f` with every usage and energy entry below log size `size` (of `tenant`, if given),
/// in log order, reading pages of [`PAGE`] entries so memory stays bounded.
pub fn for_each_usage(
    conn: &mut DbConn,
    tenant: Option<&str>,
    size: u64,
    f: &mut dyn FnMut(&Body),
) -> Result<(), StoreError> {
    for_each_usage_in(conn, tenant, 0..size, &mut |_, b| f(b))
}

/// Like [`for_each_usage`], for entries with index in `range`, with each entry's index.
pub fn for_each_usage_in(
    conn: &mut DbConn,
    tenant: Option<&str>,
    range: std::ops::Range<u64>,
    f: &mut dyn FnMut(u64, &Body),
) -> Result<(), StoreError> {
    for_each_usage_hashed(conn, tenant, range, &mut |i, _, _, b| f(i, b))
}

/// Like [`for_each_usage_in`], also with each entry's leaf bytes and stored leaf hash.
pub fn for_each_usage_hashed(
    conn: &mut DbConn,
    tenant: Option<&str>,
    range: std::ops::Range<u64>,
    f: &mut UsageVisitor,
) -> Result<(), StoreError> {
    // A reader thread fetches pages from the database while this thread parses (on both
    // cores) and hands bodies to `f` in log order: reading and rating overlap. At most two
    // pages wait in the channel, so memory stays bounded.
    let size = range.end;
    let start = range.start;
    let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Vec<Row>, StoreError>>(2);
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let kinds = [Kind::GpuUsage.as_str(), Kind::Energy.as_str()];
            let mut after = start as i64 - 1;
            loop {
                let mut q = entries::table
                    .filter(entries::idx.gt(after))
                    .filter(entries::idx.lt(size.min(i64::MAX as u64) as i64))
                    .filter(entries::kind.eq_any(kinds))
                    .order(entries::idx.asc())
                    .limit(PAGE)
                    .select((entries::idx, entries::leaf, entries::leaf_hash))
                    .into_boxed();
                if let Some(t) = tenant {
                    q = q.filter(entries::tenant.eq(t));
                }
                let page: Result<Vec<Row>, StoreError> = q.load(conn).map_err(Into::into);
                let next = match &page {
                    Ok(rows) if rows.len() as i64 == PAGE => rows.last().map(|r| r.0),
                    _ => None,
                };
                if tx.send(page).is_err() {
                    return;
                }
                match next {
                    Some(i) => after = i,
                    None => return,
                }
            }
        });
        for page in rx {
            let rows = page?;
            // Leaves were checked canonical when written and are re-checked by verify-log, so
            // this read path only parses them.
            use rayon::prelude::*;
            let bodies: Vec<Result<Body, StoreError>> = rows
                .par_iter()
                .map(|(idx, bytes, _)| parse_body(*idx, bytes))
                .collect();
            for ((idx, leaf, hash), body) in rows.iter().zip(bodies) {
                let hash = Hash(hash.as_slice().try_into().map_err(|_| {
                    StoreError::Corrupt(format!("entry {idx}: stored leaf hash length"))
                })?);
                f(*idx as u64, leaf, hash, &body?);
            }
        }
        Ok(())
    })
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
