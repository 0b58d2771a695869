//! The node agent and the market signer (issue #4): measure, sign, spool durably, deliver
//! exactly once.
//!
//! ```text
//!  Collector ──► attribution ──► sign (seq) ──► Spool (fsynced JSONL) ──► Sender ──► POST /v1/records
//!  (simulated,    (pure: leases,                 the commit point:          batches, backoff,
//!   nvidia-smi,    energy split)                 seq + cursor + record      acks, dead letters
//!   nvml)
//! ```
//!
//! Invariants:
//! - A record is sent only after the line holding it is fsynced in the spool, so a record the
//!   ledger has seen is always in the spool (or acknowledged), and its seq is never reused.
//! - The acknowledged prefix only grows: it moves past a record when the ledger answered
//!   `accepted` or `duplicate`, or after the record was fsynced to the dead-letter file or to
//!   the held queue (refused for the registration or configuration; retried from there until
//!   accepted, see [`sender::disposition`]).
//! - When the spool holds its bound of unacknowledged records the agent stops measuring (and
//!   says so at error level); it never drops a record to make room.
//! - Intervals never overlap, across restarts too: an interval starts no earlier than the end
//!   of the last interval in the spool (docs/AGENT.md, "Restarts").
//!
//! [`attribution`], [`lease`] and the nvidia-smi parser in [`collector`] are pure; the rest is
//! the shell around them. See docs/AGENT.md.

pub mod attribution;
pub mod cli;
pub mod collector;
pub mod config;
pub mod lease;
pub mod market;
pub mod metrics;
pub mod origin;
pub mod run;
pub mod sender;
pub mod spool;
pub mod tls;

/// Errors of the agent and the market signer.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The configuration file could not be read or is invalid.
    #[error("{0}")]
    Config(String),
    /// The signing key could not be used.
    #[error(transparent)]
    Key(#[from] gpuledger_shell::keyfile::KeyFileError),
    /// The spool failed.
    #[error(transparent)]
    Spool(#[from] spool::SpoolError),
    /// A collector failed in a way that stops the agent.
    #[error(transparent)]
    Collector(#[from] collector::CollectorError),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
}
