//! gpuledger: a metering and settlement ledger for rented GPU compute.
//!
//! [`core`] is pure (no I/O); [`store`] persists the log with diesel on SQLite or PostgreSQL;
//! [`keyfile`] reads and writes key files; [`verify`] re-checks a whole stored log;
//! [`bench`] measures append throughput. See ARCHITECTURE.md.

pub mod agent;
pub mod api;
pub mod bench;
pub mod core;
pub mod invoice_render;
pub mod keyfile;
pub mod sample;
pub mod server;
pub mod store;
pub mod verifier;
