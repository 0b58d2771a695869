//! `gpuledger-verify`: what an auditor installs to check gpuledger certificates, invoices,
//! evidence bundles, checkpoints and consistency proofs offline (docs/PROTOCOL.md §15). The
//! same command as `gpuledger verify`, without the server.

use clap::Parser;
use gpuledger_verify::cli::{self, VerifyArgs};
use std::process::ExitCode;

/// mimalloc instead of the system allocator: verification allocates many small, short-lived
/// values across threads, where glibc's allocator spent about a fifth of the time
/// (docs/BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "gpuledger-verify",
    version,
    about = "Verify gpuledger certificates, invoices, evidence bundles, checkpoints and consistency proofs offline"
)]
struct Cli {
    #[command(flatten)]
    verify: VerifyArgs,
}

fn main() -> ExitCode {
    match cli::run(Cli::parse().verify) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
