//! `verify-log`: re-checks everything stored against everything derivable. Every leaf is
//! re-hashed and re-checked by the pure [`LogChecker`]; every derived column of every entry,
//! every stored tree hash, the head, every checkpoint and the key registry tables are compared
//! with what the leaves imply. The first problem is reported with the entry index it concerns.

use super::conn::DbConn;
use super::error::StoreError;
use super::ledger::log_info;
use super::read;
use crate::core::checkpoint::verify_checkpoint;
use crate::core::keys;
use crate::core::logcheck::{Failure, LogChecker};
use crate::core::merkle::{self, Hash};
use diesel::prelude::*;
use serde::Serialize;

/// Entries read per query.
pub const PAGE: u64 = 5_000;

/// A log that verified.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub size: u64,
    /// Base64 Merkle root.
    pub root: String,
    pub checkpoints: usize,
    pub keys: usize,
    pub latest_checkpoint_size: Option<u64>,
}

/// Why verification stopped.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("{0}")]
    Bad(Failure),
    #[error("{0}")]
    Log(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn bad(index: u64, what: impl Into<String>) -> VerifyError {
    VerifyError::Bad(Failure {
        index,
        what: what.into(),
    })
}

impl From<diesel::result::Error> for VerifyError {
    fn from(e: diesel::result::Error) -> Self {
        VerifyError::Store(e.into())
    }
}

/// Verifies the whole log. `log_key` overrides the public key recorded in the database (an
/// auditor should pass the key they trust). `progress(done, total)` is called after each page.
///
/// Everything is read in one read-only transaction, so the check is of one moment of the log:
/// a server may keep appending meanwhile (and a killed server's database session may still be
/// finishing its last commit) without entries past the head looking stored "beyond the log
/// size". PostgreSQL gets a REPEATABLE READ snapshot; SQLite's WAL mode gives a read
/// transaction one snapshot from its first read.
pub fn verify_log(
    conn: &mut DbConn,
    log_key: Option<&str>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Report, VerifyError> {
    conn.transaction(|conn| {
        if matches!(conn, DbConn::Pg(_)) {
            diesel::sql_query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                .execute(conn)?;
        }
        verify_snapshot(conn, log_key, progress)
    })
}

/// [`verify_log`] inside its transaction.
fn verify_snapshot(
    conn: &mut DbConn,
    log_key: Option<&str>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Report, VerifyError> {
    let info = log_info(conn)?;
    let key_text = log_key.unwrap_or(&info.public_key);
    let key =
        keys::decode_public(key_text).map_err(|e| VerifyError::Log(format!("log key: {e}")))?;
    if keys::encode_public(&key) != info.public_key {
        return Err(VerifyError::Log(format!(
            "the database records log key {}, not the trusted key {}",
            info.public_key,
            keys::encode_public(&key)
        )));
    }
    let vkey = crate::core::checkpoint::verifier_key(&info.origin, &key);
    let (size, head_hash) = read::head(conn)?;
    let cps = read::checkpoints_all(conn)?;
    let mut cp_iter = cps.iter().peekable();
    let mut checker = LogChecker::new(key);
    let check_cp = |checker: &LogChecker, cp: &(i64, Vec<u8>, String)| -> Result<(), VerifyError> {
        let (cp_size, cp_root, note) = cp;
        let at = (*cp_size as u64).saturating_sub(1);
        let root = checker.root();
        let parsed = verify_checkpoint(note.as_bytes(), &vkey)
            .map_err(|e| bad(at, format!("checkpoint at size {cp_size}: {e}")))?;
        if parsed.size() != *cp_size as u64 || parsed.hash() != &root || cp_root[..] != root.0[..] {
            return Err(bad(
                at,
                format!("checkpoint at size {cp_size} does not match the tree's root at that size"),
            ));
        }
        Ok(())
    };
    while let Some(cp) = cp_iter.next_if(|c| c.0 == 0) {
        check_cp(&checker, cp)?;
    }
    let mut start = 0u64;
    while start < size {
        let end = (start + PAGE).min(size);
        let rows = read::entries_range(conn, start, end)?;
        let hashes = read::tree_hash_range(
            conn,
            merkle::stored_hash_index(0, start),
            merkle::stored_hash_index(0, end),
        )?;
        let mut stored = hashes.into_iter();
        for (i, row) in rows.iter().enumerate() {
            let index = start + i as u64;
            if row.idx as u64 != index {
                return Err(bad(
                    index,
                    format!("entry is missing: the next stored index is {}", row.idx),
                ));
            }
            let c = checker.push(&row.leaf).map_err(VerifyError::Bad)?;
            let env = &c.checked.envelope;
            let column_ok = [
                ("kind", row.kind == env.kind),
                ("signer", row.signer == env.signer),
                ("seq", row.seq as u64 == env.seq),
                ("tenant", row.tenant.as_deref() == c.checked.body.tenant()),
                ("received_at", row.received_at == c.leaf.received_at.unix()),
                (
                    "content_hash",
                    row.content_hash[..] == c.checked.content_hash[..],
                ),
                ("leaf_hash", row.leaf_hash[..] == c.leaf_hash.0[..]),
                (
                    "stream, start_at, end_at",
                    (row.stream.clone(), row.start_at, row.end_at)
                        == c.checked
                            .body
                            .stream()
                            .map_or((None, None, None), |(s, a, b)| {
                                (Some(s), Some(a.unix()), Some(b.unix()))
                            }),
                ),
            ];
            if let Some((col, _)) = column_ok.iter().find(|(_, ok)| !ok) {
                return Err(bad(
                    index,
                    format!("stored column {col} does not match the leaf"),
                ));
            }
            let base = merkle::stored_hash_index(0, index);
            for (j, h) in c.new_hashes.iter().enumerate() {
                match stored.next() {
                    Some((id, bytes)) if id as u64 == base + j as u64 && bytes[..] == h.0[..] => {}
                    _ => {
                        return Err(bad(
                            index,
                            format!(
                                "stored tree hash {} (written with this entry) is wrong or missing",
                                base + j as u64
                            ),
                        ))
                    }
                }
            }
            while let Some(cp) = cp_iter.next_if(|c| c.0 as u64 == index + 1) {
                checker.finish_signatures().map_err(VerifyError::Bad)?;
                check_cp(&checker, cp)?;
            }
        }
        if rows.len() as u64 != end - start {
            return Err(bad(start + rows.len() as u64, "entry is missing"));
        }
        checker.finish_signatures().map_err(VerifyError::Bad)?;
        progress(end, size);
        start = end;
    }
    if let Some(cp) = cp_iter.next() {
        return Err(VerifyError::Log(format!(
            "a checkpoint claims size {}, beyond the log size {size}",
            cp.0
        )));
    }
    let last = size.saturating_sub(1);
    if head_hash != checker.head() {
        return Err(bad(
            last,
            "the log head hash is not the last entry's leaf hash",
        ));
    }
    let beyond = read::entries_range(conn, size, u64::MAX >> 1)?;
    if let Some(r) = beyond.first() {
        return Err(bad(
            r.idx as u64,
            format!("entry stored beyond the log size {size}"),
        ));
    }
    let key_rows = read::keys(conn, None)?;
    let recorded = checker.keys();
    for r in &key_rows {
        let ok = recorded.get(&r.key_id).is_some_and(|k| {
            k.signer == r.signer
                && k.role.as_str() == r.role
                && k.key.as_bytes()[..] == r.public_key[..]
                && k.registered_idx as i64 == r.registered_idx
                && k.revoked_idx.map(|i| i as i64) == r.revoked_idx
        });
        if !ok {
            return Err(bad(
                r.registered_idx.max(0) as u64,
                format!("key table row for {} does not match the log", r.key_id),
            ));
        }
    }
    if key_rows.len() != recorded.len() {
        return Err(VerifyError::Log(format!(
            "the key table holds {} keys, the log registers {}",
            key_rows.len(),
            recorded.len()
        )));
    }
    let root: Hash = checker.root();
    Ok(Report {
        size,
        root: merkle::encode_hash(&root),
        checkpoints: cps.len(),
        keys: key_rows.len(),
        latest_checkpoint_size: cps.last().map(|c| c.0 as u64),
    })
}
