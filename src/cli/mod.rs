//! The `gpuledger` binary's commands, one module per group, each a few short functions over the
//! library (and over the agent's and the verifier's own command lines, shared with
//! `gpuledger-agent` and `gpuledger-verify`). `anyhow` lives only here, at the binary's edge.

pub mod bench;
pub mod log;
pub mod recover;
pub mod serve;
pub mod token;
pub mod witness;

use clap::Args;
use gpuledger::store;

/// The database a command works on.
#[derive(Args, Clone)]
pub struct DbArgs {
    /// Database URL: sqlite://PATH or postgres://USER@HOST/DB.
    #[arg(long, env = "GPULEDGER_DATABASE_URL", default_value = store::DEFAULT_DATABASE_URL)]
    pub database_url: String,
}

/// Prints `value` as one JSON line.
pub fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string(value)?);
    Ok(())
}
