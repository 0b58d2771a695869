//! `verify-log`: re-checks everything stored against everything derivable. Every leaf is
//! re-hashed and re-checked by the pure [`LogChecker`]; every derived column of every entry,
//! every stored tree hash, the head, every checkpoint and the key registry tables are compared
//! with what the leaves imply. Every problem is reported (up to
//! [`MAX_REPORTED_FAILURES`]) with the entry index it concerns and a stable reason code.

use super::conn::DbConn;
use super::error::StoreError;
use super::ledger::log_info;
use super::read;
use diesel::prelude::*;
use ed25519_dalek::VerifyingKey;
use gpuledger_core::checkpoint::verify_checkpoint;
use gpuledger_core::envelope::Checked;
use gpuledger_core::keys;
use gpuledger_core::leaf::Leaf;
use gpuledger_core::logcheck::{Failure, LogChecker, MAX_REPORTED_FAILURES};
use gpuledger_core::merkle::{self, Hash};
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

/// The failures of a log that did not verify: the first [`MAX_REPORTED_FAILURES`], in index
/// order, and how many there were in all.
#[derive(Debug, Clone, Serialize)]
pub struct Failures {
    pub failures: Vec<Failure>,
    pub total: u64,
}

impl Failures {
    fn push(&mut self, f: Failure) {
        self.total += 1;
        if self.failures.len() < MAX_REPORTED_FAILURES {
            self.failures.push(f);
        }
    }

    /// The first failure (in the order found: by entry, signatures at the end of each page).
    pub fn first(&self) -> &Failure {
        &self.failures[0]
    }
}

impl std::fmt::Display for Failures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failure(s)", self.total)?;
        if self.total > self.failures.len() as u64 {
            write!(f, " (the first {} listed)", self.failures.len())?;
        }
        for x in &self.failures {
            write!(f, "\n  {x}")?;
        }
        Ok(())
    }
}

/// Why verification did not pass.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The log does not verify: every problem found.
    #[error("{0}")]
    Bad(Failures),
    /// The log could not be checked at all (wrong key, unreadable metadata).
    #[error("{0}")]
    Log(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn bad(index: u64, reason: &'static str, what: impl Into<String>) -> Failure {
    Failure::new(index, reason, what)
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

/// A stored checkpoint row: size, root, note.
type CheckpointRow = (i64, Vec<u8>, String);

/// The state of one `verify-log` run: the pure checker fed leaf by leaf, the stored
/// checkpoints still to compare, and what was found so far.
struct Run<'a> {
    checker: LogChecker,
    vkey: String,
    checkpoints: std::iter::Peekable<std::slice::Iter<'a, CheckpointRow>>,
    found: Failures,
    /// The usage rollups the leaves imply, with the last entry of each bucket.
    rollups: super::rollups::Sums,
    rollup_last: std::collections::BTreeMap<gpuledger_core::usage::RollupKey, u64>,
}

/// [`verify_log`] inside its transaction (also run by `recover` inside its own).
pub(crate) fn verify_snapshot(
    conn: &mut DbConn,
    log_key: Option<&str>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Report, VerifyError> {
    let info = log_info(conn)?;
    let key = trusted_key(&info.public_key, log_key)?;
    let (size, head_hash) = read::head(conn)?;
    let cps = read::checkpoints_all(conn)?;
    let mut run = Run {
        vkey: gpuledger_core::checkpoint::verifier_key(&info.origin, &key),
        checker: LogChecker::new(&info.origin, key),
        checkpoints: cps.iter().peekable(),
        found: Failures {
            failures: Vec::new(),
            total: 0,
        },
        rollups: Default::default(),
        rollup_last: Default::default(),
    };
    run.checkpoints_at(0);
    let mut start = 0u64;
    while start < size {
        let end = (start + PAGE).min(size);
        run.page(conn, start, end)?;
        progress(end, size);
        start = end;
    }
    if let Some(cp) = run.checkpoints.next() {
        return Err(VerifyError::Log(format!(
            "a checkpoint claims size {}, beyond the log size {size}",
            cp.0
        )));
    }
    run.tail(conn, size, &head_hash)?;
    let keys = run.key_table(conn, size.saturating_sub(1))?;
    // The rollups are derived from the leaves: compared only when the leaves themselves
    // verify (a broken leaf would be blamed again, on its bucket, as a rollup difference).
    if run.found.total == 0 {
        run.rollups(conn, size)?;
    }
    let mut found = run.found;
    if found.total > 0 || !found.failures.is_empty() {
        found.total = found.total.max(found.failures.len() as u64);
        found.failures.sort_by_key(|f| f.index);
        return Err(VerifyError::Bad(found));
    }
    let root: Hash = run.checker.root();
    Ok(Report {
        size,
        root: merkle::encode_hash(&root),
        checkpoints: cps.len(),
        keys,
        latest_checkpoint_size: cps.last().map(|c| c.0 as u64),
    })
}

/// The log key to verify with: `log_key` when given (an auditor's), which must be the one the
/// database records.
fn trusted_key(recorded: &str, log_key: Option<&str>) -> Result<VerifyingKey, VerifyError> {
    let key = keys::decode_public(log_key.unwrap_or(recorded))
        .map_err(|e| VerifyError::Log(format!("log key: {e}")))?;
    if keys::encode_public(&key) != recorded {
        return Err(VerifyError::Log(format!(
            "the database records log key {recorded}, not the trusted key {}",
            keys::encode_public(&key)
        )));
    }
    Ok(key)
}

/// Which derived column of a stored entry disagrees with its leaf, if any.
fn wrong_column(
    row: &read::EntryRow,
    leaf: &Leaf,
    checked: &Checked,
    leaf_hash: &Hash,
) -> Option<&'static str> {
    let env = &checked.envelope;
    let stream = checked
        .body
        .stream()
        .map_or((None, None, None), |(s, a, b)| {
            (Some(s), Some(a.unix()), Some(b.unix()))
        });
    let column_ok = [
        ("kind", row.kind == env.kind),
        ("signer", row.signer == env.signer),
        ("seq", row.seq as u64 == env.seq),
        ("tenant", row.tenant.as_deref() == checked.body.tenant()),
        ("received_at", row.received_at == leaf.received_at.unix()),
        (
            "content_hash",
            row.content_hash[..] == checked.content_hash[..],
        ),
        ("leaf_hash", row.leaf_hash[..] == leaf_hash.0[..]),
        (
            "stream, start_at, end_at",
            (row.stream.clone(), row.start_at, row.end_at) == stream,
        ),
    ];
    column_ok.iter().find(|(_, ok)| !ok).map(|(col, _)| *col)
}

impl Run<'_> {
    /// Compares the checkpoints stored for log size `size` with the tree so far.
    fn checkpoints_at(&mut self, size: u64) {
        while let Some(cp) = self.checkpoints.next_if(|c| c.0 as u64 == size) {
            let (cp_size, cp_root, note) = cp;
            let at = size.saturating_sub(1);
            let root = self.checker.root();
            match verify_checkpoint(note.as_bytes(), &self.vkey) {
                Err(e) => self.found.push(bad(
                    at,
                    "checkpoint",
                    format!("checkpoint at size {cp_size}: {e}"),
                )),
                Ok(p) if p.size() != size || p.hash() != &root || cp_root[..] != root.0[..] => {
                    self.found.push(bad(
                        at,
                        "checkpoint",
                        format!(
                            "checkpoint at size {cp_size} does not match the tree's root at that size"
                        ),
                    ))
                }
                Ok(_) => {}
            }
        }
    }

    /// Checks the entries `start..end`: each leaf (through the checker), its derived columns,
    /// the tree hashes stored with it, and the checkpoints along the way.
    fn page(&mut self, conn: &mut DbConn, start: u64, end: u64) -> Result<(), VerifyError> {
        let rows = read::entries_range(conn, start, end)?;
        let hashes = read::tree_hash_range(
            conn,
            merkle::stored_hash_index(0, start),
            merkle::stored_hash_index(0, end),
        )?;
        let mut stored = hashes.into_iter().peekable();
        let mut rows_iter = rows.iter().peekable();
        for index in start..end {
            let Some(row) = rows_iter.next_if(|r| r.idx as u64 == index) else {
                // A missing entry: the tree and chain cannot go on past it meaningfully.
                self.found
                    .push(bad(index, "missing_entry", "entry is missing"));
                return Err(VerifyError::Bad(std::mem::replace(
                    &mut self.found,
                    Failures {
                        failures: Vec::new(),
                        total: 0,
                    },
                )));
            };
            self.entry(index, row, &mut stored);
            if self
                .checkpoints
                .peek()
                .is_some_and(|c| c.0 as u64 == index + 1)
            {
                for f in self.checker.finish_signatures() {
                    self.found.push(f);
                }
                self.checkpoints_at(index + 1);
            }
        }
        for f in self.checker.finish_signatures() {
            self.found.push(f);
        }
        Ok(())
    }

    /// Checks one stored entry: its leaf, its derived columns and the tree hashes it completed.
    fn entry(
        &mut self,
        index: u64,
        row: &read::EntryRow,
        stored: &mut std::iter::Peekable<std::vec::IntoIter<(i64, Vec<u8>)>>,
    ) {
        let (mut c, sig_failures) = self.checker.push(&row.leaf);
        for f in sig_failures.into_iter().chain(c.failure.take()) {
            self.found.push(f);
        }
        if let Some((leaf, checked)) = &c.entry {
            if let Some((key, r)) = gpuledger_core::usage::rollup_of(&checked.body) {
                if let Err(e) = super::rollups::add(&mut self.rollups, &key, &r) {
                    self.found.push(bad(index, "rollup", e.to_string()));
                }
                self.rollup_last.insert(key, index);
            }
            if let Some(col) = wrong_column(row, leaf, checked, &c.leaf_hash) {
                self.found.push(bad(
                    index,
                    "stored_column",
                    format!("stored column {col} does not match the leaf"),
                ));
            }
        }
        let base = merkle::stored_hash_index(0, index);
        for (j, h) in c.new_hashes.iter().enumerate() {
            let want = base + j as u64;
            while stored.next_if(|(id, _)| (*id as u64) < want).is_some() {}
            match stored.next_if(|(id, _)| *id as u64 == want) {
                Some((_, bytes)) if bytes[..] == h.0[..] => {}
                _ => self.found.push(bad(
                    index,
                    "tree",
                    format!(
                        "stored tree hash {want} (written with this entry) is wrong or missing"
                    ),
                )),
            }
        }
    }

    /// The head row is the last leaf's hash, and nothing is stored beyond the log size.
    /// The stored usage rollups against the ones the leaves imply: every bucket that differs,
    /// is missing or should not be there, named at the last entry of the bucket (or the last
    /// entry of the log, for a row no entry implies).
    /// A database not rolled up yet (from before the rollups, or rolled up to entry 0 with
    /// no rows while it holds entries) is not checked: the ledger rolls it up when it opens.
    fn rollups(&mut self, conn: &mut DbConn, size: u64) -> Result<(), VerifyError> {
        let Some(state) = super::rollups::rolled_up_to(conn)? else {
            return Ok(());
        };
        let mut stored = super::rollups::stored(conn)?;
        if state == 0 && stored.is_empty() {
            return Ok(());
        }
        let describe = |k: &gpuledger_core::usage::RollupKey| {
            format!(
                "usage rollup of tenant {:?}, hour {}, {} on node {} ({} {}, lease {:?})",
                k.tenant, k.hour, k.kind, k.node, k.region, k.gpu_model, k.lease
            )
        };
        for (key, want) in std::mem::take(&mut self.rollups) {
            let at = self.rollup_last.get(&key).copied().unwrap_or(0);
            match stored.remove(&key) {
                Some(got) if got == want => {}
                Some(got) => self.found.push(bad(
                    at,
                    "rollup",
                    format!(
                        "stored {} is {} (10^-9) over {} records ending by {}; the leaves give \
                         {} over {} ending by {}",
                        describe(&key),
                        got.0,
                        got.1,
                        got.2,
                        want.0,
                        want.1,
                        want.2
                    ),
                )),
                None => self.found.push(bad(
                    at,
                    "rollup",
                    format!("the {} is missing", describe(&key)),
                )),
            }
        }
        for key in stored.keys() {
            self.found.push(bad(
                size.saturating_sub(1),
                "rollup",
                format!("the stored {} matches no record", describe(key)),
            ));
        }
        if state != size {
            self.found.push(bad(
                size.saturating_sub(1),
                "rollup",
                format!("the usage rollups say they hold {state} entries, the log has {size}"),
            ));
        }
        Ok(())
    }

    fn tail(&mut self, conn: &mut DbConn, size: u64, head_hash: &Hash) -> Result<(), VerifyError> {
        if *head_hash != self.checker.head() {
            self.found.push(bad(
                size.saturating_sub(1),
                "chain_broken",
                "the log head hash is not the last entry's leaf hash",
            ));
        }
        let beyond = read::entries_range(conn, size, u64::MAX >> 1)?;
        if let Some(r) = beyond.first() {
            self.found.push(bad(
                r.idx as u64,
                "missing_entry",
                format!("entry stored beyond the log size {size}"),
            ));
        }
        Ok(())
    }

    /// Every row of the key table is a key the log registers, as the log registers it (the
    /// table is a cache of the log). Returns how many rows there are.
    fn key_table(&mut self, conn: &mut DbConn, last: u64) -> Result<usize, VerifyError> {
        let key_rows = read::keys(conn, None)?;
        let recorded = self.checker.keys();
        for r in &key_rows {
            let ok = recorded.get(&r.key_id).is_some_and(|k| {
                k.signer() == r.signer
                    && k.role().as_str() == r.role
                    && k.key.as_bytes()[..] == r.public_key[..]
                    && k.registered_idx as i64 == r.registered_idx
                    && k.revoked_idx.map(|i| i as i64) == r.revoked_idx
            });
            if !ok {
                self.found.push(bad(
                    r.registered_idx.max(0) as u64,
                    "key_table",
                    format!("key table row for {} does not match the log", r.key_id),
                ));
            }
        }
        if key_rows.len() != recorded.len() {
            let what = format!(
                "the key table holds {} keys, the log registers {}",
                key_rows.len(),
                recorded.len()
            );
            self.found.push(bad(last, "key_table", what));
        }
        Ok(key_rows.len())
    }
}
