//! `gpuledger serve` and `gpuledger demo`.

use anyhow::{bail, Result};
use clap::Args;
use gpuledger::server;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// `serve`'s arguments (docs/CONFIGURATION.md has every setting).
#[derive(Args)]
pub struct ServeArgs {
    /// Address to listen on [default: 127.0.0.1:8080; port 0 picks a free port].
    #[arg(long, env = "GPULEDGER_LISTEN")]
    listen: Option<SocketAddr>,
    /// Database URL [default: sqlite://gpuledger.db].
    #[arg(long, env = "GPULEDGER_DATABASE_URL")]
    database_url: Option<String>,
    /// The log's private key file [default: gpuledger-log.key].
    #[arg(long, env = "GPULEDGER_LOG_KEY")]
    log_key: Option<PathBuf>,
    /// Seconds between checkpoints while the log grows [default: 10].
    #[arg(long, env = "GPULEDGER_CHECKPOINT_INTERVAL_SECONDS")]
    checkpoint_interval_seconds: Option<u64>,
    /// HTTP worker threads [default: number of CPUs].
    #[arg(long, env = "GPULEDGER_WORKERS")]
    workers: Option<usize>,
    /// Write each new checkpoint to DIR/checkpoint and DIR/checkpoints/<size> [default: none].
    #[arg(long, env = "GPULEDGER_PUBLISH_DIR", value_name = "DIR")]
    publish_dir: Option<PathBuf>,
    /// A TOML file with any of the settings above (flags and environment win).
    #[arg(long, env = "GPULEDGER_CONFIG")]
    config: Option<PathBuf>,
}

/// Runs the HTTP API until SIGTERM or Ctrl-C (flag > environment > TOML > default).
pub fn serve(args: ServeArgs) -> Result<ExitCode> {
    let file = match &args.config {
        Some(p) => server::read_config(p).map_err(anyhow::Error::msg)?,
        None => server::ServeSettings::default(),
    };
    let flags = server::ServeSettings {
        listen: args.listen,
        database_url: args.database_url,
        log_key: args.log_key,
        checkpoint_interval_seconds: args.checkpoint_interval_seconds,
        workers: args.workers,
        publish_dir: args.publish_dir,
    };
    gpuledger_shell::logging::init();
    server::serve(flags.resolve(file))?;
    Ok(ExitCode::SUCCESS)
}

/// `demo`'s arguments.
#[derive(Args)]
pub struct DemoArgs {
    /// Delete the demo directory first and start a new log.
    #[arg(long)]
    fresh: bool,
    /// The demo directory.
    #[arg(long, default_value = "demo-data")]
    dir: PathBuf,
    /// Address to serve on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Measurement interval of the simulated agents, in seconds.
    #[arg(long, default_value_t = 5)]
    interval_seconds: u64,
}

/// Runs the demo until Ctrl-C.
pub fn demo(args: DemoArgs) -> Result<ExitCode> {
    if !(1..=3600).contains(&args.interval_seconds) {
        bail!("--interval-seconds must be 1 to 3600");
    }
    if std::env::var_os("GPULEDGER_LOG").is_none() && std::env::var_os("RUST_LOG").is_none() {
        // Request lines would drown the demo's own output.
        std::env::set_var("GPULEDGER_LOG", "warn");
    }
    gpuledger_shell::logging::init();
    gpuledger::demo::run(gpuledger::demo::DemoOptions {
        dir: args.dir,
        fresh: args.fresh,
        listen: args.listen,
        interval_seconds: args.interval_seconds,
    })?;
    Ok(ExitCode::SUCCESS)
}
