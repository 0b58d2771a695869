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
    /// Keep a private copy of the whole log in DIR (C2SP tiles, entry bundles, issued
    /// documents) for `gpuledger recover --from DIR` [default: none].
    #[arg(long, env = "GPULEDGER_MIRROR_DIR", value_name = "DIR")]
    mirror_dir: Option<PathBuf>,
    /// Where the largest signed checkpoint is kept outside the database; a database that does
    /// not hold it is not written to [default: the log key's path with `.high-water` appended].
    #[arg(long, env = "GPULEDGER_HIGH_WATER_FILE", value_name = "FILE")]
    high_water_file: Option<PathBuf>,
    /// Largest disagreement, in seconds, between the wall clock and the monotonic clock that
    /// is not a step of the ledger's clock [default: 30].
    #[arg(long, env = "GPULEDGER_CLOCK_STEP_SECONDS")]
    clock_step_seconds: Option<u64>,
    /// Seconds a stepped clock must run steadily, synchronised, before it is trusted again
    /// [default: 120].
    #[arg(long, env = "GPULEDGER_CLOCK_SETTLE_SECONDS")]
    clock_settle_seconds: Option<u64>,
    /// Seconds after its end before a period may be invoiced or certified, so that records
    /// and spot prices within the allowed clock skew land first [default: the log policy's
    /// max_future_skew_seconds, 300].
    #[arg(long, env = "GPULEDGER_INVOICE_CLOSE_SECONDS")]
    invoice_close_seconds: Option<u64>,
    /// Start on a PostgreSQL primary whose standbys are all asynchronous (acknowledged records
    /// may be lost in a failover) [default: refuse].
    #[arg(long, env = "GPULEDGER_ALLOW_ASYNC_STANDBYS")]
    allow_async_standbys: bool,
    /// Serve /metrics on this address alone, and answer 404 for it on --listen [default: none,
    /// /metrics on --listen].
    #[arg(long, env = "GPULEDGER_METRICS_LISTEN", value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// Longest wait for a request's headers, in seconds; 0: none [default: 5].
    #[arg(long, env = "GPULEDGER_CLIENT_REQUEST_TIMEOUT_SECONDS")]
    client_request_timeout_seconds: Option<u64>,
    /// Longest wait to finish a connection the server closes, in seconds; 0: none [default: 1].
    #[arg(long, env = "GPULEDGER_CLIENT_DISCONNECT_TIMEOUT_SECONDS")]
    client_disconnect_timeout_seconds: Option<u64>,
    /// Seconds an idle connection is kept open; 0: keep-alive off [default: 5].
    #[arg(long, env = "GPULEDGER_KEEP_ALIVE_SECONDS")]
    keep_alive_seconds: Option<u64>,
    /// Open connections per worker (the server takes workers × this); 0: actix's 25600
    /// [default: 1024].
    #[arg(long, env = "GPULEDGER_MAX_CONNECTIONS")]
    max_connections: Option<usize>,
    /// Longest wait for the next piece of a request body, in seconds; 0: none [default: 15].
    #[arg(long, env = "GPULEDGER_BODY_IDLE_TIMEOUT_SECONDS")]
    body_idle_timeout_seconds: Option<u64>,
    /// Longest time to read a whole request body, in seconds; 0: none [default: 60].
    #[arg(long, env = "GPULEDGER_BODY_TIMEOUT_SECONDS")]
    body_timeout_seconds: Option<u64>,
    /// POST /v1/records bodies received at once (503 busy past it); 0: no cap [default: 16].
    #[arg(long, env = "GPULEDGER_MAX_CONCURRENT_INGEST")]
    max_concurrent_ingest: Option<usize>,
    /// Requests per second under /v1, /checkpoint and /tile/ per client address (429 past it);
    /// 0: no limit [default: 1000].
    #[arg(long, env = "GPULEDGER_CLIENT_RATE_PER_SECOND")]
    client_rate_per_second: Option<u32>,
    /// Requests a client address may make at once [default: 5000].
    #[arg(long, env = "GPULEDGER_CLIENT_RATE_BURST")]
    client_rate_burst: Option<u32>,
    /// Accepted records per second per signer (429 past it); 0: no limit [default: 20000].
    #[arg(long, env = "GPULEDGER_SIGNER_RATE_PER_SECOND")]
    signer_rate_per_second: Option<u32>,
    /// Records a signer may send at once [default: 1000000].
    #[arg(long, env = "GPULEDGER_SIGNER_RATE_BURST")]
    signer_rate_burst: Option<u32>,
    /// POST /v1/certificates per minute per tenant token (429 past it); 0: no limit
    /// [default: 60].
    #[arg(long, env = "GPULEDGER_TENANT_CERTIFICATES_PER_MINUTE")]
    tenant_certificates_per_minute: Option<u32>,
    /// Cosignatures of the configured witnesses (`[[witnesses]]` in the settings file) an
    /// invoice's or certificate's checkpoint needs; 0: none [default: 0].
    #[arg(long, env = "GPULEDGER_WITNESS_QUORUM")]
    witness_quorum: Option<usize>,
    /// Seconds an issuance waits for a checkpoint to reach the witness quorum before answering
    /// 503 witnesses_behind [default: 10].
    #[arg(long, env = "GPULEDGER_WITNESS_WAIT_SECONDS")]
    witness_wait_seconds: Option<u64>,
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
        mirror_dir: args.mirror_dir,
        clock_step_seconds: args.clock_step_seconds,
        clock_settle_seconds: args.clock_settle_seconds,
        invoice_close_seconds: args.invoice_close_seconds,
        high_water_file: args.high_water_file,
        allow_async_standbys: args.allow_async_standbys.then_some(true),
        metrics_listen: args.metrics_listen,
        client_request_timeout_seconds: args.client_request_timeout_seconds,
        client_disconnect_timeout_seconds: args.client_disconnect_timeout_seconds,
        keep_alive_seconds: args.keep_alive_seconds,
        max_connections: args.max_connections,
        body_idle_timeout_seconds: args.body_idle_timeout_seconds,
        body_timeout_seconds: args.body_timeout_seconds,
        max_concurrent_ingest: args.max_concurrent_ingest,
        client_rate_per_second: args.client_rate_per_second,
        client_rate_burst: args.client_rate_burst,
        signer_rate_per_second: args.signer_rate_per_second,
        signer_rate_burst: args.signer_rate_burst,
        tenant_certificates_per_minute: args.tenant_certificates_per_minute,
        // The witness list is only read from the settings file.
        witnesses: None,
        witness_quorum: args.witness_quorum,
        witness_wait_seconds: args.witness_wait_seconds,
        // The invoice settings are only read from the settings file.
        issuer: None,
        payment_terms_days: None,
        tax: None,
        public_url: None,
        // The webhook settings are only read from the settings file.
        webhooks: None,
    };
    gpuledger_shell::logging::init();
    let http = flags.resolve_http(&file);
    let invoice_pdf = flags.resolve_invoice_pdf(&file);
    server::serve(flags.resolve(file), http, invoice_pdf)?;
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
    crate::demo::run(crate::demo::DemoOptions {
        dir: args.dir,
        fresh: args.fresh,
        listen: args.listen,
        interval_seconds: args.interval_seconds,
    })?;
    Ok(ExitCode::SUCCESS)
}
