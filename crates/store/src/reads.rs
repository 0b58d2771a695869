//! Every read of the log outside the sequencer goes through [`Reads`]: a pool of read-only
//! connections ([`ReadConn`]: the database refuses a write on them) and the log's public
//! reads (size, head, checkpoints, proofs, tiles). Handlers reach it as
//! [`Ledger::reads`](crate::Ledger::reads); the query functions of `store::read`,
//! `store::invoices`, `store::usage` and the rest run inside [`Reads::run`].

use crate::conn::{self, ReadConn};
use crate::error::StoreError;
use crate::read::{self, DbHashReader, EntryRow};
use diesel::prelude::*;
use gpuledger_core::merkle::{self, Hash};
use gpuledger_core::time::Timestamp;
use std::sync::{Condvar, Mutex, MutexGuard};

/// Idle read connections kept open per ledger.
pub const MAX_IDLE_READERS: usize = 8;

/// Most read connections open at once per ledger; a read past it waits for one to be given
/// back. A burst of thousands of concurrent requests opens at most this many database
/// connections (PostgreSQL refuses clients past its `max_connections`, 100 by default).
pub const MAX_OPEN_READERS: usize = 32;

/// Longest a read waits for a connection while [`MAX_OPEN_READERS`] are in use; then it is
/// answered [`StoreError::Busy`] (503 `busy`).
pub const READER_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// The read door of a ledger: a bounded pool of read-only connections.
pub struct Reads {
    url: String,
    pool: Mutex<Pool>,
    /// Signalled when a connection is given back or closed.
    freed: Condvar,
}

/// The idle connections, and how many are open (idle or in use).
struct Pool {
    idle: Vec<ReadConn>,
    open: usize,
}

impl Reads {
    /// A pool for `url`, starting with `first` (the connection that opened the ledger).
    pub(crate) fn new(url: &str, first: ReadConn) -> Reads {
        Reads {
            url: url.to_owned(),
            pool: Mutex::new(Pool {
                idle: vec![first],
                open: 1,
            }),
            freed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Pool> {
        self.pool.lock().expect("reader pool lock")
    }

    /// Runs `f` with a read-only connection ([`ReadConn`]) from the pool (opened on demand;
    /// at most [`MAX_IDLE_READERS`] are kept idle). A connection whose database call failed is
    /// dropped, and when the failure says the database was unreachable, every idle one with it
    /// (they were opened to the same server). When the connection came from the pool and
    /// failed so, `f` is run once more on a fresh connection: an idle connection that died
    /// while the database restarted costs no failed read once the database is back.
    pub fn run<T>(
        &self,
        mut f: impl FnMut(&mut crate::DbConn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let (mut conn, pooled) = self.take(true)?;
        let r = f(conn.db());
        if self.give_back(conn, &r) && pooled {
            let (mut fresh, _) = self.take(false)?;
            let again = f(fresh.db());
            self.give_back(fresh, &again);
            return again;
        }
        r
    }

    /// [`Reads::run`] without the second try, for an `f` whose effects outside the database
    /// must happen once (a download streamed while it is read).
    pub fn run_once<T>(
        &self,
        f: impl FnOnce(&mut crate::DbConn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let (mut conn, _) = self.take(true)?;
        let r = f(conn.db());
        self.give_back(conn, &r);
        r
    }

    /// An idle connection (and `true`) when `idle_ok` and there is one, else a new one, once
    /// fewer than [`MAX_OPEN_READERS`] are open (waiting until then, at most [`READER_WAIT`]).
    fn take(&self, idle_ok: bool) -> Result<(ReadConn, bool), StoreError> {
        let deadline = std::time::Instant::now() + READER_WAIT;
        let mut pool = self.lock();
        loop {
            if idle_ok {
                if let Some(c) = pool.idle.pop() {
                    return Ok((c, true));
                }
            }
            if pool.open < MAX_OPEN_READERS {
                break;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(StoreError::Busy(format!(
                    "all {MAX_OPEN_READERS} read connections stayed in use for {} s; retry",
                    READER_WAIT.as_secs()
                )));
            }
            pool = self
                .freed
                .wait_timeout(pool, left)
                .expect("reader pool lock")
                .0;
        }
        pool.open += 1;
        drop(pool);
        conn::connect_read_only(&self.url)
            .map(|c| (c, false))
            .inspect_err(|_| self.closed(1))
    }

    /// Counts `n` connections closed, and wakes the reads waiting for one.
    fn closed(&self, n: usize) {
        let mut pool = self.lock();
        pool.open -= n;
        self.freed.notify_all();
    }

    /// Keeps `conn` for the next read unless its result `r` failed in the database, or
    /// [`MAX_IDLE_READERS`] are idle already. Returns whether the database was unreachable,
    /// in which case every idle connection is closed too.
    fn give_back<T>(&self, conn: ReadConn, r: &Result<T, StoreError>) -> bool {
        let mut pool = self.lock();
        let unreachable = matches!(r, Err(e) if e.outage().is_some());
        let closed = if unreachable {
            let idle = std::mem::take(&mut pool.idle);
            1 + idle.len()
        } else if matches!(r, Err(e) if e.discards_connection())
            || pool.idle.len() >= MAX_IDLE_READERS
        {
            1
        } else {
            pool.idle.push(conn);
            0
        };
        pool.open -= closed;
        debug_assert!(pool.idle.len() <= MAX_IDLE_READERS && pool.open <= MAX_OPEN_READERS);
        debug_assert!(pool.idle.len() <= pool.open);
        self.freed.notify_all();
        unreachable
    }

    /// The log size.
    pub fn size(&self) -> Result<u64, StoreError> {
        self.run(|c| Ok(read::head(c)?.0))
    }

    /// The log size and its root hash.
    pub fn head(&self) -> Result<(u64, Hash), StoreError> {
        self.run(|c| {
            let (size, _) = read::head(c)?;
            Ok((size, merkle::tree_hash(size, &DbHashReader::new(c))?))
        })
    }

    /// The latest checkpoint's size and signed note, if any, with the witnesses'
    /// cosignatures gathered for it appended.
    pub fn latest_checkpoint(&self) -> Result<Option<(u64, String)>, StoreError> {
        self.run(|c| {
            read::latest_checkpoint(c)?
                .map(|(s, _, n)| Ok((s, crate::cosignatures::with_cosignatures(c, s, n)?)))
                .transpose()
        })
    }

    /// Seconds since the latest checkpoint was signed, if there is one.
    pub fn latest_checkpoint_age_seconds(&self) -> Result<Option<i64>, StoreError> {
        use super::schema::checkpoints;
        let created: Option<i64> = self.run(|c| {
            Ok(checkpoints::table
                .order(checkpoints::size.desc())
                .select(checkpoints::created_at)
                .first(c)
                .optional()?)
        })?;
        Ok(created.map(|t| Timestamp::now().unix() - t))
    }

    /// Stored entries `start <= index < end`.
    pub fn entries(&self, start: u64, end: u64) -> Result<Vec<EntryRow>, StoreError> {
        self.run(|c| read::entries_range(c, start, end))
    }

    /// RFC 6962 inclusion proof of entry `index` in the tree of `size` entries.
    pub fn inclusion_proof(&self, index: u64, size: u64) -> Result<Vec<Hash>, StoreError> {
        self.run(|c| {
            let (head, _) = read::head(c)?;
            if index >= size || size > head {
                return Err(StoreError::Refused(format!(
                    "need index < size <= log size (index {index}, size {size}, log size {head})"
                )));
            }
            Ok(merkle::prove_record(size, index, &DbHashReader::new(c))?)
        })
    }

    /// RFC 6962 consistency proof between tree sizes `from` and `to`.
    pub fn consistency_proof(&self, from: u64, to: u64) -> Result<Vec<Hash>, StoreError> {
        self.run(|c| {
            let (head, _) = read::head(c)?;
            if from == 0 || from > to || to > head {
                return Err(StoreError::Refused(format!(
                    "need 0 < from <= to <= log size (from {from}, to {to}, log size {head})"
                )));
            }
            Ok(merkle::prove_tree(to, from, &DbHashReader::new(c))?)
        })
    }

    /// The root hash of the tree of `size` entries.
    pub fn root_at(&self, size: u64) -> Result<Hash, StoreError> {
        self.run(|c| Ok(merkle::tree_hash(size, &DbHashReader::new(c))?))
    }

    /// A C2SP tile (docs/PROTOCOL.md §17) if the latest checkpoint covers it
    /// ([`TilePath::within`](gpuledger_core::tiles::TilePath::within)), else `None`: a hash tile's
    /// hashes concatenated (one query), or an entry bundle's leaves in order. The checkpoint
    /// and the tile are read on one connection.
    pub fn tile(
        &self,
        tile: &gpuledger_core::tiles::TilePath,
    ) -> Result<Option<TileData>, StoreError> {
        use gpuledger_core::tiles::TileKind;
        self.run(|c| {
            let size = read::latest_checkpoint(c)?.map_or(0, |(s, _, _)| s);
            if !tile.within(size) {
                return Ok(None);
            }
            Ok(Some(match tile.kind() {
                TileKind::Hashes { .. } => TileData::Hashes(read::tile_hashes(c, tile)?),
                TileKind::Entries => {
                    let (start, end) = tile.start().zip(tile.end()).ok_or_else(|| {
                        StoreError::Corrupt(format!("tile {} has no range", tile.path()))
                    })?;
                    let rows = read::entries_range(c, start, end)?;
                    if rows.len() as u64 != end - start {
                        return Err(StoreError::Corrupt(format!(
                            "entries {start}..{end} of a checkpointed tree are missing"
                        )));
                    }
                    TileData::Leaves(rows.into_iter().map(|r| r.leaf).collect())
                }
            }))
        })
    }
}

/// What [`Reads::tile`] read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TileData {
    /// A hash tile's bytes: its hashes, 32 bytes each, in order.
    Hashes(Vec<u8>),
    /// An entry bundle's leaves, in index order.
    Leaves(Vec<Vec<u8>>),
}
