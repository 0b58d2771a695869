//! Read queries. None of these lock anything; each reads one consistent state per call.

use super::conn::DbConn;
use super::error::StoreError;
use super::schema::*;
use crate::core::merkle::{Hash, HashReader};
use diesel::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;

fn to_hash(b: Vec<u8>, what: &str) -> Result<Hash, StoreError> {
    b.try_into()
        .map(Hash)
        .map_err(|_| StoreError::Corrupt(format!("{what} is not 32 bytes")))
}

/// The log size and the leaf hash of its last entry (32 zero bytes when empty).
pub fn head(conn: &mut DbConn) -> Result<(u64, Hash), StoreError> {
    let row: Option<(i64, Vec<u8>)> = log_head::table
        .find(1i64)
        .select((log_head::size, log_head::head_hash))
        .first(conn)
        .optional()?;
    let (size, h) = row.ok_or(StoreError::NotInitialised)?;
    Ok((size as u64, to_hash(h, "log head hash")?))
}

/// Stored tree hashes by stored-hash index.
pub fn hashes(conn: &mut DbConn, ids: &[u64]) -> Result<HashMap<u64, Hash>, StoreError> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let ids_i: Vec<i64> = ids.iter().map(|&i| i as i64).collect();
    let rows: Vec<(i64, Vec<u8>)> = tree_hashes::table
        .filter(tree_hashes::id.eq_any(&ids_i))
        .select((tree_hashes::id, tree_hashes::hash))
        .load(conn)?;
    let map: HashMap<u64, Hash> = rows
        .into_iter()
        .map(|(i, h)| Ok((i as u64, to_hash(h, "tree hash")?)))
        .collect::<Result<_, StoreError>>()?;
    if let Some(missing) = ids.iter().find(|i| !map.contains_key(i)) {
        return Err(StoreError::Corrupt(format!(
            "tree hash {missing} is missing"
        )));
    }
    Ok(map)
}

/// The latest checkpoint: size, root and signed note.
pub fn latest_checkpoint(conn: &mut DbConn) -> Result<Option<(u64, Hash, String)>, StoreError> {
    let row: Option<(i64, Vec<u8>, String)> = checkpoints::table
        .order(checkpoints::size.desc())
        .select((checkpoints::size, checkpoints::root, checkpoints::note))
        .first(conn)
        .optional()?;
    row.map(|(s, r, n)| Ok((s as u64, to_hash(r, "checkpoint root")?, n)))
        .transpose()
}

/// A [`HashReader`] over the `tree_hashes` table, for proofs and roots in O(log n) reads.
pub struct DbHashReader<'a> {
    conn: RefCell<&'a mut DbConn>,
}

impl<'a> DbHashReader<'a> {
    /// A reader borrowing `conn`.
    pub fn new(conn: &'a mut DbConn) -> Self {
        Self {
            conn: RefCell::new(conn),
        }
    }
}

impl HashReader for DbHashReader<'_> {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog_tiles::Error> {
        let mut conn = self.conn.borrow_mut();
        let map = hashes(&mut conn, indexes)
            .map_err(|e| tlog_tiles::Error::InvalidInput(e.to_string()))?;
        Ok(indexes.iter().map(|i| map[i]).collect())
    }
}

/// One stored entry, as the `entries` table holds it.
#[derive(Debug, Clone, Queryable)]
pub struct EntryRow {
    pub idx: i64,
    pub kind: String,
    pub signer: String,
    pub seq: i64,
    pub tenant: Option<String>,
    pub received_at: i64,
    pub content_hash: Vec<u8>,
    pub leaf: Vec<u8>,
    pub leaf_hash: Vec<u8>,
    /// Measurement stream of usage and energy entries (see `Body::stream`).
    pub stream: Option<String>,
    pub start_at: Option<i64>,
    pub end_at: Option<i64>,
}

/// Entries with `start <= idx < end`, in order.
pub fn entries_range(conn: &mut DbConn, start: u64, end: u64) -> Result<Vec<EntryRow>, StoreError> {
    Ok(entries::table
        .filter(entries::idx.ge(start as i64))
        .filter(entries::idx.lt(end as i64))
        .order(entries::idx.asc())
        .load::<EntryRow>(conn)?)
}

/// Stored tree hashes with `start <= id < end`, in order.
pub fn tree_hash_range(
    conn: &mut DbConn,
    start: u64,
    end: u64,
) -> Result<Vec<(i64, Vec<u8>)>, StoreError> {
    Ok(tree_hashes::table
        .filter(tree_hashes::id.ge(start as i64))
        .filter(tree_hashes::id.lt(end as i64))
        .order(tree_hashes::id.asc())
        .select((tree_hashes::id, tree_hashes::hash))
        .load(conn)?)
}

/// Every checkpoint: size, root, note; oldest first.
pub fn checkpoints_all(conn: &mut DbConn) -> Result<Vec<(i64, Vec<u8>, String)>, StoreError> {
    Ok(checkpoints::table
        .order(checkpoints::size.asc())
        .select((checkpoints::size, checkpoints::root, checkpoints::note))
        .load(conn)?)
}

/// One stored checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointRow {
    /// Tree size it commits to.
    pub size: u64,
    /// Root hash of the tree of `size` entries.
    pub root: Hash,
    /// The complete C2SP signed note.
    pub note: String,
    /// When it was signed, Unix seconds.
    pub created_at: i64,
}

/// Which page of checkpoints [`checkpoints_page`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointPage {
    /// The newest first.
    Newest,
    /// Sizes below this one, newest first.
    Before(u64),
    /// Sizes from this one up, oldest first.
    From(u64),
}

/// Up to `limit` stored checkpoints, in the order `page` names.
pub fn checkpoints_page(
    conn: &mut DbConn,
    page: CheckpointPage,
    limit: u64,
) -> Result<Vec<CheckpointRow>, StoreError> {
    let q = checkpoints::table
        .select((
            checkpoints::size,
            checkpoints::root,
            checkpoints::note,
            checkpoints::created_at,
        ))
        .limit(limit.min(i64::MAX as u64) as i64);
    let as_i64 = |s: u64| s.min(i64::MAX as u64) as i64;
    let rows: Vec<(i64, Vec<u8>, String, i64)> = match page {
        CheckpointPage::Newest => q.order(checkpoints::size.desc()).load(conn)?,
        CheckpointPage::Before(s) => q
            .filter(checkpoints::size.lt(as_i64(s)))
            .order(checkpoints::size.desc())
            .load(conn)?,
        CheckpointPage::From(s) => q
            .filter(checkpoints::size.ge(as_i64(s)))
            .order(checkpoints::size.asc())
            .load(conn)?,
    };
    rows.into_iter()
        .map(|(size, root, note, created_at)| {
            Ok(CheckpointRow {
                size: size as u64,
                root: to_hash(root, "checkpoint root")?,
                note,
                created_at,
            })
        })
        .collect()
}

/// A registered key with its signer's role.
#[derive(Debug, Clone)]
pub struct KeyRow {
    pub key_id: String,
    pub signer: String,
    pub role: String,
    pub public_key: Vec<u8>,
    pub registered_idx: i64,
    pub revoked_idx: Option<i64>,
}

/// Registered keys; all of them when `ids` is `None`.
pub fn keys(conn: &mut DbConn, ids: Option<&[&str]>) -> Result<Vec<KeyRow>, StoreError> {
    let q = signer_keys::table
        .inner_join(signers::table.on(signers::id.eq(signer_keys::signer_id)))
        .select((
            signer_keys::key_id,
            signer_keys::signer_id,
            signers::role,
            signer_keys::public_key,
            signer_keys::registered_idx,
            signer_keys::revoked_idx,
        ));
    type Row = (String, String, String, Vec<u8>, i64, Option<i64>);
    let rows: Vec<Row> = match ids {
        Some(ids) => q.filter(signer_keys::key_id.eq_any(ids)).load(conn)?,
        None => q.order(signer_keys::registered_idx.asc()).load(conn)?,
    };
    Ok(rows
        .into_iter()
        .map(
            |(key_id, signer, role, public_key, registered_idx, revoked_idx)| KeyRow {
                key_id,
                signer,
                role,
                public_key,
                registered_idx,
                revoked_idx,
            },
        )
        .collect())
}

/// Which of `ids` are registered signers.
pub fn known_signers(conn: &mut DbConn, ids: &[&str]) -> Result<Vec<String>, StoreError> {
    Ok(signers::table
        .filter(signers::id.eq_any(ids))
        .select(signers::id)
        .load(conn)?)
}

/// A value from the `meta` table.
pub fn meta(conn: &mut DbConn, key: &str) -> Result<Option<String>, StoreError> {
    Ok(meta::table
        .find(key)
        .select(meta::value)
        .first(conn)
        .optional()?)
}

/// Number of conflict evidence rows.
pub fn conflict_count(conn: &mut DbConn) -> Result<u64, StoreError> {
    let n: i64 = conflicts::table.count().get_result(conn)?;
    Ok(n as u64)
}
