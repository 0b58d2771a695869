//! `gpuledger serve`: settings, logging, the actix server, periodic checkpoints and graceful
//! shutdown (stop accepting, finish and commit what is in flight, then stop the sequencer).

use crate::api::{self, AppState};
use crate::keyfile;
use crate::store::{self, Ledger, StoreError};
use actix_web::{middleware, web, App, HttpServer};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Settings of `serve`. Precedence: command-line flag, then `GPULEDGER_*` environment
/// variable, then the TOML file given by `--config`, then the default. docs/CONFIGURATION.md
/// lists them all.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServeSettings {
    /// `listen`: address to bind; default 127.0.0.1:8080. Port 0 picks a free port.
    pub listen: Option<SocketAddr>,
    /// `database_url`: default sqlite://gpuledger.db.
    pub database_url: Option<String>,
    /// `log_key`: the log's private key file; default gpuledger-log.key.
    pub log_key: Option<PathBuf>,
    /// `checkpoint_interval_seconds`: how often a new checkpoint is signed when the log grew;
    /// default 10.
    pub checkpoint_interval_seconds: Option<u64>,
    /// `workers`: HTTP worker threads; default the number of CPUs.
    pub workers: Option<usize>,
}

/// Resolved settings.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub listen: SocketAddr,
    pub database_url: String,
    pub log_key: PathBuf,
    pub checkpoint_interval: Duration,
    pub workers: usize,
}

/// Reads a TOML settings file.
pub fn read_config(path: &Path) -> Result<ServeSettings, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

impl ServeSettings {
    /// `self` (flags and environment) over `file` over defaults.
    pub fn resolve(self, file: ServeSettings) -> Resolved {
        Resolved {
            listen: self
                .listen
                .or(file.listen)
                .unwrap_or_else(|| "127.0.0.1:8080".parse().expect("valid")),
            database_url: self
                .database_url
                .or(file.database_url)
                .unwrap_or_else(|| store::DEFAULT_DATABASE_URL.to_owned()),
            log_key: self
                .log_key
                .or(file.log_key)
                .unwrap_or_else(|| PathBuf::from("gpuledger-log.key")),
            checkpoint_interval: Duration::from_secs(
                self.checkpoint_interval_seconds
                    .or(file.checkpoint_interval_seconds)
                    .unwrap_or(10)
                    .max(1),
            ),
            workers: self
                .workers
                .or(file.workers)
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
        }
    }
}

/// Errors that stop the server from starting.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Key(#[from] keyfile::KeyFileError),
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error("server: {0}")]
    Io(#[from] std::io::Error),
    #[error("metrics: {0}")]
    Metrics(String),
}

/// Starts logging to stderr: `GPULEDGER_LOG` (or `RUST_LOG`) filters, default `info`;
/// `GPULEDGER_LOG_FORMAT=json` for JSON lines.
pub fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("GPULEDGER_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if std::env::var("GPULEDGER_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// Runs the server until SIGTERM or Ctrl-C. Prints `listening on http://ADDR` once bound.
pub fn serve(settings: Resolved) -> Result<(), ServeError> {
    let key = keyfile::read(&settings.log_key)?;
    let ledger = Arc::new(Ledger::open(&settings.database_url, key)?);
    serve_ledger(ledger, &settings, |addrs| {
        for a in addrs {
            println!("listening on http://{a}");
        }
        use std::io::Write;
        let _ = std::io::stdout().flush();
    })
}

/// Serves an already open ledger until SIGTERM or Ctrl-C (`settings.database_url` and
/// `settings.log_key` are not used to open anything here). `on_bound` runs once, with the
/// bound addresses, before requests are served. Shuts down gracefully, then drops this
/// handle of the ledger (the sequencer stops when the caller drops the last one).
pub fn serve_ledger(
    ledger: Arc<Ledger>,
    settings: &Resolved,
    on_bound: impl FnOnce(&[SocketAddr]),
) -> Result<(), ServeError> {
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(&[
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
        ])
        .map_err(|e| ServeError::Metrics(e.to_string()))?
        .install_recorder()
        .map_err(|e| ServeError::Metrics(e.to_string()))?;
    let state = web::Data::new(AppState {
        ledger: ledger.clone(),
        metrics,
    });

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(2)
        .build()?;
    let serving = ledger.clone();
    rt.block_on(async move {
        let ledger = serving;
        let server = HttpServer::new(move || {
            App::new()
                .app_data(state.clone())
                .wrap(middleware::from_fn(api::record_metrics))
                .wrap(tracing_actix_web::TracingLogger::default())
                .configure(api::routes)
        })
        .workers(settings.workers)
        .shutdown_timeout(30)
        .bind(settings.listen)
        .map_err(|e| ServeError::Bind(settings.listen, e))?;
        let addrs = server.addrs();
        let running = server.run();
        on_bound(&addrs);
        tracing::info!(
            database = %store::conn::redact(&settings.database_url),
            origin = %ledger.info().origin,
            "gpuledger serving on {:?}",
            addrs
        );
        let checkpointer = tokio::spawn(checkpoint_loop(
            ledger.clone(),
            settings.checkpoint_interval,
        ));
        running.await?;
        checkpointer.abort();
        tracing::info!("stopped accepting; in-flight requests finished");
        Ok::<_, ServeError>(())
    })?;
    // Dropping the last handle stops the sequencer after it has committed what was queued.
    drop(ledger);
    tracing::info!("ledger closed");
    Ok(())
}

async fn checkpoint_loop(ledger: Arc<Ledger>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let l = ledger.clone();
        match tokio::task::spawn_blocking(move || l.checkpoint()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "signing a checkpoint failed"),
            Err(e) => tracing::error!(error = %e, "checkpoint task failed"),
        }
    }
}
