//! gpuledger: the library behind the `gpuledger` binary, which re-exports the workspace's crates
//! under the module names they had when this was one crate. (The demo and the benchmarks are
//! commands of the binary, `src/demo.rs` and `src/bench/`, not part of this library.)
//!
//! The workspace's other crates are re-exported under the names they had when this was one
//! crate, so `gpuledger::core::…` still reads as before:
//! [`core`] (`gpuledger-core`: pure, no I/O), [`agent`] (`gpuledger-agent`), [`verifier`]
//! (`gpuledger-verify`), [`keyfile`] and [`disk`] (`gpuledger-shell`), [`store`]
//! (`gpuledger-store`: the log on SQLite or PostgreSQL, diesel), and from `gpuledger-server`
//! [`api`] (actix-web), [`server`], [`webhooks`], [`invoice_render`], [`focus`] and [`witness`]
//! (a C2SP tlog-witness). See ARCHITECTURE.md.

pub use gpuledger_agent as agent;
pub use gpuledger_core as core;
pub use gpuledger_core::sample;
pub use gpuledger_shell::{disk, keyfile};
pub use gpuledger_store as store;
pub use gpuledger_verify as verifier;

pub use gpuledger_server::{api, focus, invoice_render, server, webhooks, witness};
