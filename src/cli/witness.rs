//! `gpuledger witness`: `keygen` (a witness key and its vkey) and `serve` (a C2SP tlog-witness,
//! src/witness).

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use gpuledger::core::cosignature::WitnessKey;
use gpuledger::keyfile;
use gpuledger::witness::{self, WitnessConfigFile, WitnessSettings};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// Default listen address of `witness serve`.
const DEFAULT_LISTEN: &str = "127.0.0.1:7380";
/// Default HTTP worker threads of `witness serve`.
const DEFAULT_WORKERS: usize = 2;

/// `gpuledger witness …`.
#[derive(Subcommand)]
pub enum WitnessCommand {
    /// Create a witness key (FILE, mode 0600, and FILE.pub) and print its vkey.
    Keygen(KeygenArgs),
    /// Print the vkey of an existing witness key.
    Vkey(KeygenArgs),
    /// Serve a C2SP tlog-witness: POST /add-checkpoint, GET /logs, GET /metrics, GET /healthz.
    Serve(ServeArgs),
}

/// The witness's name and key file.
#[derive(Args)]
pub struct KeygenArgs {
    /// The witness name (its note key name), e.g. witness.example.org/w1.
    #[arg(long)]
    name: String,
    /// The private key file.
    #[arg(long)]
    key: PathBuf,
}

/// `witness serve`'s arguments (flags win over the --config file).
#[derive(Args)]
pub struct ServeArgs {
    /// Address to listen on [default: 127.0.0.1:7380; port 0 picks a free port].
    #[arg(long, env = "GPULEDGER_WITNESS_LISTEN")]
    listen: Option<SocketAddr>,
    /// The witness name (its note key name).
    #[arg(long, env = "GPULEDGER_WITNESS_NAME")]
    name: Option<String>,
    /// The witness's private key file (made by `witness keygen`).
    #[arg(long, env = "GPULEDGER_WITNESS_KEY")]
    key: Option<PathBuf>,
    /// The state file (SQLite; created when absent).
    #[arg(long, env = "GPULEDGER_WITNESS_STATE")]
    state: Option<PathBuf>,
    /// A log to cosign: its note verifier key (`<origin>+<key id>+<base64>`), or @FILE holding
    /// it. Repeatable; added to the config file's [[logs]].
    #[arg(long = "log", value_name = "VKEY")]
    logs: Vec<String>,
    /// HTTP worker threads [default: 2].
    #[arg(long)]
    workers: Option<usize>,
    /// Serve GET /metrics (Prometheus) on this address alone instead of on --listen
    /// [default: on --listen].
    #[arg(long, env = "GPULEDGER_WITNESS_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// A TOML settings file (listen, metrics_listen, name, key, state, workers, [[logs]] vkey
    /// = ...).
    #[arg(long, env = "GPULEDGER_WITNESS_CONFIG")]
    config: Option<PathBuf>,
}

/// Runs a `witness` command.
pub fn run(cmd: WitnessCommand) -> Result<ExitCode> {
    match cmd {
        WitnessCommand::Keygen(args) => {
            let key = keyfile::generate();
            let vkey = WitnessKey::new(&args.name, &key.verifying_key())?.vkey();
            keyfile::write_new(&args.key, &key)?;
            println!("{vkey}");
            Ok(ExitCode::SUCCESS)
        }
        WitnessCommand::Vkey(args) => {
            let key = keyfile::read(&args.key)?;
            println!(
                "{}",
                WitnessKey::new(&args.name, &key.verifying_key())?.vkey()
            );
            Ok(ExitCode::SUCCESS)
        }
        WitnessCommand::Serve(args) => serve(args),
    }
}

/// A vkey, or the first line of the file after `@`.
fn vkey_arg(arg: &str) -> Result<String> {
    match arg.strip_prefix('@') {
        Some(path) => Ok(std::fs::read_to_string(path)
            .with_context(|| format!("reading {path}"))?
            .trim()
            .to_owned()),
        None => Ok(arg.trim().to_owned()),
    }
}

fn serve(args: ServeArgs) -> Result<ExitCode> {
    let file = match &args.config {
        Some(p) => WitnessConfigFile::read(p)?,
        None => WitnessConfigFile::default(),
    };
    let name = args
        .name
        .or(file.name)
        .context("--name (or `name` in the config file) is required")?;
    let key_path = args
        .key
        .or(file.key)
        .context("--key (or `key` in the config file) is required")?;
    let state = args
        .state
        .or(file.state)
        .context("--state (or `state` in the config file) is required")?;
    let mut vkeys: Vec<String> = file.logs.iter().map(|l| l.vkey.trim().to_owned()).collect();
    for arg in &args.logs {
        vkeys.push(vkey_arg(arg)?);
    }
    let logs = witness::logs_from_vkeys(vkeys.iter().map(String::as_str))?;
    let settings = WitnessSettings {
        listen: args
            .listen
            .or(file.listen)
            .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("a valid address")),
        name,
        key: keyfile::read(&key_path)?,
        state,
        logs,
        workers: args.workers.or(file.workers).unwrap_or(DEFAULT_WORKERS),
    };
    let metrics_listen = args.metrics_listen.or(file.metrics_listen);
    gpuledger_shell::logging::init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(2)
        .build()?;
    rt.block_on(async move {
        let running = witness::start_with_metrics(settings, metrics_listen).await?;
        // One line on stdout (scripts read the address from it), and a second one for the
        // metrics listener; a closed stdout is no error.
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on {}", running.url()).and_then(|()| out.flush());
        if let Some(at) = running.metrics_addr() {
            let _ = writeln!(out, "metrics listening on http://{at}").and_then(|()| out.flush());
        }
        drop(out);
        let handle = running.handle();
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let stop = tokio::spawn(async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            tracing::info!("stopping the witness");
            handle.stop(true).await;
        });
        running.wait().await?;
        stop.abort();
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(ExitCode::SUCCESS)
}
