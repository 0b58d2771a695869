//! The store layer's one error type.

use gpuledger_core::checkpoint::CheckpointError;

/// Everything that can go wrong below the API: database, configuration, corruption, and
/// refused administrative operations.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("bad database URL: {0}")]
    BadUrl(String),
    #[error("cannot connect to the database: {0}")]
    Connect(String),
    #[error("database error: {0}")]
    Database(#[from] diesel::result::Error),
    #[error("migration failed: {0}")]
    Migration(String),
    #[error("the database is not initialised; run `gpuledger init` first")]
    NotInitialised,
    #[error("the log key does not match the database: it was initialised with public key {expected}, the key file holds {found}")]
    WrongLogKey { expected: String, found: String },
    #[error("stored data is inconsistent: {0}")]
    Corrupt(String),
    #[error("batch of {0} records is over the limit of {1}")]
    BatchTooLarge(usize, usize),
    /// A write the store refuses for a reason of its own (a malformed id, a limit): nothing
    /// written.
    #[error("{0}")]
    Refused(String),
    /// A ledger-written entry an admission rule of core refuses (PROTOCOL §6.7): its reason
    /// code and field reach the client as they are. Nothing written.
    #[error("{}", .0.message)]
    Rejected(gpuledger_core::rejection::Rejection),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("not found: {0}")]
    NotFound(String),
    /// A payment above the invoice's open balance, without `excess=credit`: nothing written.
    #[error("a payment of {amount} {currency} is above the open balance of invoice {invoice} ({open} {currency}); pay at most the open balance, or say that the excess becomes the tenant's credit (`?excess=credit`)")]
    Overpayment {
        invoice: String,
        amount: rust_decimal::Decimal,
        open: rust_decimal::Decimal,
        currency: String,
    },
    /// An invoice or certificate for a period that has not closed yet (ended by the log
    /// policy's skew, `core::admission::period_closes_at`): records of its rest would all
    /// arrive late (as adjustments of the next invoice), a spot price published within the
    /// allowed skew would be refused, and a certificate would read like a final total that is
    /// not one.
    #[error("the period ends at {to} and closes at {closes_at} (the log policy's max_future_skew_seconds later), after now ({now}); {what} is issued only for a closed period: retry from {closes_at}")]
    PeriodNotEnded {
        /// "an invoice" or "a certificate".
        what: &'static str,
        to: gpuledger_core::time::Timestamp,
        closes_at: gpuledger_core::time::Timestamp,
        now: gpuledger_core::time::Timestamp,
    },
    /// An invoice period that holds part, not all, of a billing period of a contract with a
    /// commitment (`core::invoice::SplitPeriod`).
    #[error("{0}")]
    ContractPeriodSplit(String),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The database no longer holds the tree of the high-water mark (the largest checkpoint
    /// this server signed or found published): nothing is written or signed until it does.
    #[error("{0}")]
    LogRewound(Box<super::high_water::Rewound>),
    /// The ledger's clock stepped or is behind what the log already used
    /// (`store::clock`): nothing is written, signed or invoiced until it is reliable again.
    #[error("{0}")]
    ClockUnreliable(String),
    /// The high-water file cannot be read or written.
    #[error("high-water mark: {0}")]
    HighWater(String),
    #[error("the ledger's writer has stopped")]
    WriterStopped,
    /// A bug: answered as an internal error, logged, never shown.
    #[error("internal: {0}")]
    Internal(String),
    /// The log kept changing under a computation that must see it unchanged (an invoice or a
    /// certificate recomputed `invoices::MAX_ISSUE_ATTEMPTS` times): nothing was written; the
    /// caller should retry shortly.
    #[error("{0}")]
    Busy(String),
    /// `witness_quorum` is set and no checkpoint at or above the size an issuance needs
    /// reached it within `witness_wait_seconds`: nothing was written; retry later.
    #[error("witnesses are behind: the largest checkpoint cosigned by {quorum} witnesses has size {cosigned}, the issuance needs one of size {needed} or more; nothing was issued")]
    WitnessesBehind {
        /// The largest checkpoint size that reached the quorum (0: none).
        cosigned: u64,
        /// The size of the checkpoint the issuance signed.
        needed: u64,
        /// The quorum (k).
        quorum: usize,
    },
}

/// An error that is an outage rather than a refusal or a bug: the caller should retry later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outage {
    /// The database cannot be reached, its connection broke, or it is starting or stopping.
    DatabaseUnavailable,
    /// The database's disk (or the SQLite file's filesystem) is full.
    DiskFull,
}

/// Substrings of database error messages that mean the disk is full: SQLite's `SQLITE_FULL`
/// and the I/O error it reports when a write or fsync fails, and PostgreSQL's ENOSPC text
/// (SQLSTATE 53100, which diesel does not expose).
const DISK_FULL_MESSAGES: &[&str] = &[
    "database or disk is full",
    "disk i/o error",
    "no space left on device",
    "disk full",
];

/// Substrings of database error messages that mean the database is (for now) out of reach:
/// libpq's broken-connection texts, the server's shutdown and start-up refusals (SQLSTATE
/// 57P01-57P03), and SQLite's lock timeout.
const UNAVAILABLE_MESSAGES: &[&str] = &[
    "server closed the connection",
    "terminating connection",
    "no connection to the server",
    "connection to server",
    "could not receive data",
    "could not send data",
    "the database system is",
    "canceling statement due to",
    "ssl syscall",
    "database is locked",
    "cannot connect",
    "connection refused",
];

impl StoreError {
    /// Whether this error is an outage (database unavailable, disk full) and which; `None`
    /// for refusals and for bugs. The one classification the API, the readiness probe and the
    /// sequencer's reconnect use.
    pub fn outage(&self) -> Option<Outage> {
        use diesel::result::{DatabaseErrorKind, Error};
        let message = match self {
            StoreError::Connect(_) | StoreError::WriterStopped => {
                return Some(Outage::DatabaseUnavailable)
            }
            StoreError::Database(Error::BrokenTransactionManager)
            | StoreError::Database(Error::DatabaseError(DatabaseErrorKind::ClosedConnection, _)) => {
                return Some(Outage::DatabaseUnavailable)
            }
            StoreError::Database(Error::DatabaseError(_, info)) => info.message().to_lowercase(),
            StoreError::Database(other) => other.to_string().to_lowercase(),
            _ => return None,
        };
        if DISK_FULL_MESSAGES.iter().any(|m| message.contains(m)) {
            Some(Outage::DiskFull)
        } else if UNAVAILABLE_MESSAGES.iter().any(|m| message.contains(m)) {
            Some(Outage::DatabaseUnavailable)
        } else {
            None
        }
    }

    /// Whether this is SQLite's `SQLITE_BUSY` ("database is locked"): another connection held
    /// or took the write lock; the transaction may simply be run again.
    pub fn is_sqlite_busy(&self) -> bool {
        use diesel::result::Error;
        match self {
            StoreError::Database(Error::DatabaseError(_, info)) => {
                info.message().to_lowercase().contains("database is locked")
            }
            _ => false,
        }
    }

    /// Whether the connection that returned this error must be discarded and a new one made:
    /// any database-level failure (a connection is cheap to re-make; a broken one, reused,
    /// fails every later call).
    pub fn discards_connection(&self) -> bool {
        matches!(self, StoreError::Database(_) | StoreError::Migration(_))
            || self.outage().is_some()
    }
}

impl From<tlog_tiles::Error> for StoreError {
    fn from(e: tlog_tiles::Error) -> Self {
        StoreError::Corrupt(format!("tree: {e}"))
    }
}
