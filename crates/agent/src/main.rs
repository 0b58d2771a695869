//! `gpuledger-agent`: what an operator installs on GPU nodes. It measures the GPUs, signs
//! usage records, spools them durably and delivers them (docs/AGENT.md); `market` runs a
//! market signer; `keygen` makes a node's key. The same commands as `gpuledger agent`,
//! `gpuledger market` and `gpuledger keygen`, without the server.

use clap::{Parser, Subcommand};
use gpuledger_agent::cli::{self, AgentArgs, KeygenArgs, LeasesArgs, MarketArgs};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "gpuledger-agent",
    version,
    about = "The gpuledger node agent: measure GPUs, sign usage records, spool them durably, deliver them",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    agent: AgentArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Run the node agent (what `gpuledger-agent` with no subcommand does).
    Run(AgentArgs),
    /// Run a market signer: signed spot prices from a CSV schedule or a simulated walk.
    Market(MarketArgs),
    /// Create an Ed25519 key pair (private key 0600).
    Keygen(KeygenArgs),
    /// Print the `POST /v1/leases` body of each lease of the node's lease file (what the
    /// ledger must register before the agent bills under it).
    Leases(LeasesArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        None => cli::agent(cli.agent).map_err(|e| e.to_string()),
        Some(Command::Run(args)) => cli::agent(args).map_err(|e| e.to_string()),
        Some(Command::Market(args)) => cli::market(args).map_err(|e| e.to_string()),
        Some(Command::Keygen(args)) => cli::keygen(args).map_err(|e| e.to_string()),
        Some(Command::Leases(args)) => cli::leases(args).map_err(|e| e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
