//! The witness's state: one SQLite file (WAL, `synchronous = FULL`) holding, per log origin,
//! the latest checkpoint it cosigned, and the refused requests that carried a valid log
//! signature (possible evidence of a fork). Every check-and-update runs under one mutex in one
//! `BEGIN IMMEDIATE` transaction, committed (and so fsynced) before the caller answers.

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Binary, Integer, Nullable, Text};
use gpuledger_core::merkle::Hash;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The most refused requests kept per origin; older ones are deleted first.
pub const MAX_REFUSED_PER_ORIGIN: i64 = 10_000;

/// Milliseconds a connection waits for another process's lock on the file.
const BUSY_TIMEOUT_MS: u32 = 5_000;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS witness_logs (
    origin TEXT PRIMARY KEY NOT NULL,
    size BIGINT NOT NULL CHECK (size >= 0),
    root BLOB NOT NULL CHECK (length(root) = 32),
    checkpoint TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS witness_refused (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    origin TEXT NOT NULL,
    received_at BIGINT NOT NULL,
    status INTEGER NOT NULL,
    reason TEXT NOT NULL,
    old_size BIGINT NOT NULL,
    size BIGINT NOT NULL,
    stored_size BIGINT,
    stored_root BLOB,
    request BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS witness_refused_origin ON witness_refused (origin, id);
";

/// Why the state file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The file could not be opened or created.
    #[error("witness state {path}: {detail}")]
    Open {
        /// The state file.
        path: PathBuf,
        /// What went wrong.
        detail: String,
    },
    /// A query failed.
    #[error("witness state: {0}")]
    Query(#[from] diesel::result::Error),
    /// A decision asked to store a smaller tree than the stored one; nothing was written.
    #[error("refused to roll back from size {stored} to {proposed}")]
    Rollback {
        /// The stored size.
        stored: u64,
        /// The size the decision asked for.
        proposed: u64,
    },
    /// A stored row breaks an invariant (a size that does not fit, a root that is not 32 bytes).
    #[error("witness state is corrupt: {0}")]
    Corrupt(String),
}

/// The latest checkpoint cosigned for one origin.
#[derive(Clone, Debug, PartialEq)]
pub struct Latest {
    /// Its tree size.
    pub size: u64,
    /// Its root hash.
    pub root: Hash,
    /// The signed note as received (the log's signatures included).
    pub checkpoint: String,
    /// When it was stored (POSIX seconds).
    pub updated_at: u64,
}

/// A refused request kept as evidence: it carried a valid signature of a configured log key.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    /// The checkpoint's origin.
    pub origin: String,
    /// When it was refused (POSIX seconds).
    pub received_at: u64,
    /// The HTTP status answered (409 or 422).
    pub status: u16,
    /// Why, in words.
    pub reason: String,
    /// The request's old size.
    pub old_size: u64,
    /// The checkpoint's size.
    pub size: u64,
    /// The stored state at the time, when there was one.
    pub stored: Option<(u64, Hash)>,
    /// The whole request body.
    pub request: Vec<u8>,
}

/// What a check decided: the new latest checkpoint to store (if any), a refusal to keep (if
/// any), and the answer to give.
pub struct Decision<T> {
    /// Replaces the stored checkpoint; its size is never below the stored one.
    pub store: Option<Latest>,
    /// Kept in the `witness_refused` table.
    pub refusal: Option<Refusal>,
    /// Handed back to the caller once committed.
    pub answer: T,
}

#[derive(QueryableByName)]
struct LogRow {
    #[diesel(sql_type = Text)]
    origin: String,
    #[diesel(sql_type = BigInt)]
    size: i64,
    #[diesel(sql_type = Binary)]
    root: Vec<u8>,
    #[diesel(sql_type = Text)]
    checkpoint: String,
    #[diesel(sql_type = BigInt)]
    updated_at: i64,
}

#[derive(QueryableByName)]
struct RefusedRow {
    #[diesel(sql_type = Text)]
    origin: String,
    #[diesel(sql_type = BigInt)]
    received_at: i64,
    #[diesel(sql_type = Integer)]
    status: i32,
    #[diesel(sql_type = Text)]
    reason: String,
    #[diesel(sql_type = BigInt)]
    old_size: i64,
    #[diesel(sql_type = BigInt)]
    size: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    stored_size: Option<i64>,
    #[diesel(sql_type = Nullable<Binary>)]
    stored_root: Option<Vec<u8>>,
    #[diesel(sql_type = Binary)]
    request: Vec<u8>,
}

fn to_i64(v: u64) -> Result<i64, StateError> {
    i64::try_from(v)
        .map_err(|_| StateError::Corrupt(format!("{v} does not fit a signed 64-bit column")))
}

fn to_u64(v: i64) -> Result<u64, StateError> {
    u64::try_from(v).map_err(|_| StateError::Corrupt(format!("negative value {v}")))
}

fn to_hash(v: Vec<u8>) -> Result<Hash, StateError> {
    Ok(Hash(v.try_into().map_err(|_| {
        StateError::Corrupt("a stored root is not 32 bytes".into())
    })?))
}

impl TryFrom<LogRow> for Latest {
    type Error = StateError;
    fn try_from(r: LogRow) -> Result<Self, StateError> {
        let _ = r.origin;
        Ok(Latest {
            size: to_u64(r.size)?,
            root: to_hash(r.root)?,
            checkpoint: r.checkpoint,
            updated_at: to_u64(r.updated_at)?,
        })
    }
}

/// The state file, behind one mutex (one writer: the check and the update are atomic).
pub struct WitnessState {
    conn: Mutex<SqliteConnection>,
    path: PathBuf,
}

impl WitnessState {
    /// Opens (creating with mode 0600 when absent) the state file at `path`.
    pub fn open(path: &Path) -> Result<WitnessState, StateError> {
        let open_err = |detail: String| StateError::Open {
            path: path.to_owned(),
            detail,
        };
        if !path.exists() {
            use std::os::unix::fs::OpenOptionsExt;
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| open_err(e.to_string()))?;
            }
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
            {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(open_err(e.to_string())),
            }
        }
        let url = path
            .to_str()
            .ok_or_else(|| open_err("path is not UTF-8".into()))?;
        let mut conn = SqliteConnection::establish(url).map_err(|e| open_err(e.to_string()))?;
        conn.batch_execute(&format!(
            "PRAGMA busy_timeout = {BUSY_TIMEOUT_MS};
             PRAGMA journal_mode = WAL;
             PRAGMA synchronous = FULL;"
        ))
        .map_err(|e| open_err(e.to_string()))?;
        conn.batch_execute(SCHEMA)
            .map_err(|e| open_err(e.to_string()))?;
        Ok(WitnessState {
            conn: Mutex::new(conn),
            path: path.to_owned(),
        })
    }

    /// The state file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SqliteConnection> {
        // A panic while holding the lock left no half-done write behind: every write is one
        // transaction, rolled back when it did not commit.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads the latest checkpoint of `origin`, runs `decide` on it, and stores what it
    /// decided, all in one transaction under the mutex; returns its answer once committed.
    /// A decision to store a smaller tree than the stored one (a rollback) writes nothing and
    /// is [`StateError::Rollback`].
    pub fn update<T>(
        &self,
        origin: &str,
        decide: impl FnOnce(Option<&Latest>) -> Decision<T>,
    ) -> Result<T, StateError> {
        let mut conn = self.lock();
        conn.immediate_transaction(|c| {
            let stored = latest_in(c, origin)?;
            let decision = decide(stored.as_ref());
            if let Some(new) = &decision.store {
                if let Some(old) = stored.as_ref().filter(|old| new.size < old.size) {
                    return Err(StateError::Rollback {
                        stored: old.size,
                        proposed: new.size,
                    });
                }
                diesel::sql_query(
                    "INSERT INTO witness_logs (origin, size, root, checkpoint, updated_at)
                     VALUES (?, ?, ?, ?, ?)
                     ON CONFLICT (origin) DO UPDATE SET size = excluded.size,
                         root = excluded.root, checkpoint = excluded.checkpoint,
                         updated_at = excluded.updated_at",
                )
                .bind::<Text, _>(origin)
                .bind::<BigInt, _>(to_i64(new.size)?)
                .bind::<Binary, _>(new.root.0.to_vec())
                .bind::<Text, _>(&new.checkpoint)
                .bind::<BigInt, _>(to_i64(new.updated_at)?)
                .execute(c)?;
            }
            if let Some(r) = &decision.refusal {
                insert_refusal(c, r)?;
            }
            Ok::<_, StateError>(decision.answer)
        })
    }

    /// The latest checkpoint cosigned for `origin`, if any.
    pub fn latest(&self, origin: &str) -> Result<Option<Latest>, StateError> {
        latest_in(&mut self.lock(), origin)
    }

    /// Every origin's latest checkpoint, by origin.
    pub fn all(&self) -> Result<Vec<(String, Latest)>, StateError> {
        let rows: Vec<LogRow> = diesel::sql_query(
            "SELECT origin, size, root, checkpoint, updated_at FROM witness_logs ORDER BY origin",
        )
        .load(&mut *self.lock())?;
        rows.into_iter()
            .map(|r| Ok((r.origin.clone(), Latest::try_from(r)?)))
            .collect()
    }

    /// The refused requests kept for `origin`, oldest first.
    pub fn refused(&self, origin: &str) -> Result<Vec<Refusal>, StateError> {
        let rows: Vec<RefusedRow> = diesel::sql_query(
            "SELECT origin, received_at, status, reason, old_size, size, stored_size,
                    stored_root, request
             FROM witness_refused WHERE origin = ? ORDER BY id",
        )
        .bind::<Text, _>(origin)
        .load(&mut *self.lock())?;
        rows.into_iter()
            .map(|r| {
                let stored = match (r.stored_size, r.stored_root) {
                    (Some(s), Some(h)) => Some((to_u64(s)?, to_hash(h)?)),
                    _ => None,
                };
                Ok(Refusal {
                    origin: r.origin,
                    received_at: to_u64(r.received_at)?,
                    status: u16::try_from(r.status)
                        .map_err(|_| StateError::Corrupt("status".into()))?,
                    reason: r.reason,
                    old_size: to_u64(r.old_size)?,
                    size: to_u64(r.size)?,
                    stored,
                    request: r.request,
                })
            })
            .collect()
    }
}

fn latest_in(c: &mut SqliteConnection, origin: &str) -> Result<Option<Latest>, StateError> {
    let row: Option<LogRow> = diesel::sql_query(
        "SELECT origin, size, root, checkpoint, updated_at FROM witness_logs WHERE origin = ?",
    )
    .bind::<Text, _>(origin)
    .get_result(c)
    .optional()?;
    row.map(Latest::try_from).transpose()
}

fn insert_refusal(c: &mut SqliteConnection, r: &Refusal) -> Result<(), StateError> {
    diesel::sql_query(
        "INSERT INTO witness_refused (origin, received_at, status, reason, old_size, size,
             stored_size, stored_root, request)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind::<Text, _>(&r.origin)
    .bind::<BigInt, _>(to_i64(r.received_at)?)
    .bind::<Integer, _>(i32::from(r.status))
    .bind::<Text, _>(&r.reason)
    .bind::<BigInt, _>(to_i64(r.old_size)?)
    .bind::<BigInt, _>(to_i64(r.size)?)
    .bind::<Nullable<BigInt>, _>(r.stored.map(|(s, _)| to_i64(s)).transpose()?)
    .bind::<Nullable<Binary>, _>(r.stored.map(|(_, h)| h.0.to_vec()))
    .bind::<Binary, _>(&r.request)
    .execute(c)?;
    // Bounded: only the newest MAX_REFUSED_PER_ORIGIN are kept.
    diesel::sql_query(
        "DELETE FROM witness_refused WHERE origin = ? AND id <= (
             SELECT id FROM witness_refused WHERE origin = ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
    )
    .bind::<Text, _>(&r.origin)
    .bind::<Text, _>(&r.origin)
    .bind::<BigInt, _>(MAX_REFUSED_PER_ORIGIN)
    .execute(c)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn latest(size: u64, b: u8) -> Latest {
        Latest {
            size,
            root: Hash([b; 32]),
            checkpoint: format!("o\n{size}\n"),
            updated_at: 1,
        }
    }

    #[test]
    fn updates_commit_and_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        {
            let s = WitnessState::open(&path).unwrap();
            assert_eq!(s.latest("o").unwrap(), None);
            let answer = s
                .update("o", |stored| {
                    assert!(stored.is_none());
                    Decision {
                        store: Some(latest(5, 1)),
                        refusal: Some(Refusal {
                            origin: "o".into(),
                            received_at: 2,
                            status: 422,
                            reason: "r".into(),
                            old_size: 3,
                            size: 5,
                            stored: Some((3, Hash([9; 32]))),
                            request: b"body".to_vec(),
                        }),
                        answer: 7,
                    }
                })
                .unwrap();
            assert_eq!(answer, 7);
        }
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let s = WitnessState::open(&path).unwrap();
        assert_eq!(s.latest("o").unwrap(), Some(latest(5, 1)));
        assert_eq!(s.all().unwrap().len(), 1);
        let refused = s.refused("o").unwrap();
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].stored, Some((3, Hash([9; 32]))));
        assert_eq!(refused[0].request, b"body");
    }

    #[test]
    fn a_rollback_is_refused_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let s = WitnessState::open(&dir.path().join("w.db")).unwrap();
        s.update("o", |_| Decision {
            store: Some(latest(9, 1)),
            refusal: None,
            answer: (),
        })
        .unwrap();
        let r = s.update("o", |_| Decision {
            store: Some(latest(4, 2)),
            refusal: None,
            answer: (),
        });
        assert!(matches!(
            r,
            Err(StateError::Rollback {
                stored: 9,
                proposed: 4
            })
        ));
        assert_eq!(s.latest("o").unwrap(), Some(latest(9, 1)));
    }
}
