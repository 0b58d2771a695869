//! The store layer's one error type.

use crate::core::checkpoint::CheckpointError;

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
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    AlreadyExists(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("the ledger's writer has stopped")]
    WriterStopped,
}

impl From<tlog_tiles::Error> for StoreError {
    fn from(e: tlog_tiles::Error) -> Self {
        StoreError::Corrupt(format!("tree: {e}"))
    }
}
