//! The `gpuledger` binary: a dispatcher over the library; each command is a short function in
//! `cli`. `anyhow` lives only here and in `cli`.

// The benchmarks and the demo are commands of this binary, not part of the server library.
mod bench;
mod cli;
mod demo;

use anyhow::Result;
use clap::{Parser, Subcommand};
use gpuledger::agent;
use std::process::ExitCode;

/// mimalloc instead of the system allocator: verification and ingest allocate many small,
/// short-lived values across threads, where glibc's allocator spent about a fifth of the
/// verifier's time (docs/BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "gpuledger",
    version,
    about = "Metering and settlement ledger for rented GPU compute"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate an Ed25519 key pair: FILE (private, mode 0600) and FILE.pub.
    Keygen(agent::cli::KeygenArgs),
    /// Create or migrate the database; create the log's signing key if absent.
    Init(cli::log::InitArgs),
    /// Re-check every entry, hash, signature and checkpoint of the stored log.
    VerifyLog(cli::log::VerifyLogArgs),
    /// Verify a certificate, an invoice or a bundle offline, or that the log only grew between
    /// two checkpoints (docs/PROTOCOL.md §15). Needs no database, network or server.
    Verify(gpuledger_verify::cli::VerifyArgs),
    /// Restore into a database that lost entries (a standby promoted while behind) what
    /// another copy of the log holds, checked against the largest published checkpoint
    /// (ops/runbooks/log-rewound.md).
    Recover(cli::recover::RecoverArgs),
    /// Run the HTTP API (see docs/CONFIGURATION.md for every setting).
    Serve(cli::serve::ServeArgs),
    /// API tokens, offline against the database.
    #[command(subcommand)]
    Token(cli::token::TokenCommand),
    /// Print the OpenAPI document (what schemas/openapi.json holds).
    Openapi,
    /// Benchmarks.
    #[command(subcommand)]
    Bench(cli::bench::BenchCommand),
    /// Run a node agent: measure GPUs, sign records, spool them durably, deliver them
    /// (see docs/AGENT.md). The same as `gpuledger-agent`.
    Agent(agent::cli::AgentArgs),
    /// Run a market signer: signed spot prices from a CSV schedule or a simulated walk.
    Market(agent::cli::MarketArgs),
    /// The demo: the service, simulated hubs and a market signer in one process, on a SQLite
    /// file under ./demo-data; serves until Ctrl-C.
    Demo(cli::serve::DemoArgs),
    /// A C2SP tlog-witness: cosigns a log's checkpoints only if they are consistent with what
    /// it cosigned before (docs/PROTOCOL.md §16, ops/runbooks/witness.md).
    #[command(subcommand)]
    Witness(cli::witness::WitnessCommand),
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// One function per command; each lives with its arguments in `cli`.
fn run(parsed: Cli) -> Result<ExitCode> {
    match parsed.command {
        Command::Keygen(args) => done(agent::cli::keygen(args)),
        Command::Init(args) => cli::log::init(args),
        Command::Verify(args) => gpuledger_verify::cli::run(args),
        Command::VerifyLog(args) => cli::log::verify_log(args),
        Command::Recover(args) => cli::recover::run(args),
        Command::Serve(args) => cli::serve::serve(args),
        Command::Token(cmd) => cli::token::run(cmd),
        Command::Openapi => {
            // A reader that stops early (`| head`, `| diff -q`) is not an error of ours.
            use std::io::Write as _;
            match std::io::stdout().write_all(gpuledger::api::openapi_json().as_bytes()) {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
                _ => Ok(ExitCode::SUCCESS),
            }
        }
        Command::Bench(cmd) => cli::bench::run(cmd),
        Command::Agent(args) => done(agent::cli::agent(args)),
        Command::Market(args) => done(agent::cli::market(args)),
        Command::Demo(args) => cli::serve::demo(args),
        Command::Witness(cmd) => cli::witness::run(cmd),
    }
}

/// Exit 0 after a command that returns nothing, its error otherwise.
fn done<E: std::error::Error + Send + Sync + 'static>(r: Result<(), E>) -> Result<ExitCode> {
    r?;
    Ok(ExitCode::SUCCESS)
}
