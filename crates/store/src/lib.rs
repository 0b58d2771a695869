//! The store shell: the log persisted with diesel on SQLite or PostgreSQL through one code path.
//!
//! - [`conn`]: connections, backend from the URL scheme, migrations.
//! - [`ledger`]: the [`Ledger`] handle with its sequencer (group commit).
//! - [`issuance`]: the issuing door, [`issuance::Issuance`]: invoices, certificates,
//!   settlements (one draft-and-recheck loop).
//! - [`write`]: write transactions (append, key registry, checkpoints), each locking the head.
//! - [`read`]: queries and a database-backed `HashReader`.
//! - [`reads`]: the read door, [`reads::Reads`]: a pool of read-only connections.
//! - [`high_water`]: the largest signed checkpoint, kept outside the database; a database
//!   that no longer holds it is not written to (a failover that lost entries).

pub mod access;
pub mod alerts;
pub mod bundle;
pub mod certificates;
pub mod clock;
pub mod conn;
pub mod cosignatures;
pub mod error;
pub mod high_water;
pub mod idempotency;
pub mod invoices;
pub mod issuance;
pub mod ledger;
pub mod prepaid;
pub mod pricing;
pub mod read;
pub mod reads;
pub mod recover;
pub mod replication;
pub mod rollups;
pub mod schema;
pub mod usage;
pub mod verify;
pub mod webhooks;
mod write;

pub use conn::{connect, DbConn, ReadConn, DEFAULT_DATABASE_URL};
pub use error::{Outage, StoreError};
pub use ledger::{init, Ledger, LogInfo, WriteState, DEFAULT_ORIGIN};
pub use write::{MAX_CONFLICTS_PER_SEQ, MAX_CONFLICTS_PER_SIGNER_HOUR};
