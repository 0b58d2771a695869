//! `gpuledger serve`: settings, logging, the actix server, periodic checkpoints and graceful
//! shutdown (stop accepting, finish and commit what is in flight, then stop the sequencer).
//! [`publish`] writes each new checkpoint to `--publish-dir`; [`crate::disk`] reads free space for
//! the filesystem gauges.

pub mod publish;

use crate::api::{self, AppState};
use crate::keyfile;
use crate::store::{self, Ledger, StoreError};
use actix_web::{middleware, web, App, HttpServer};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use utoipa_actix_web::AppExt;

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
    /// `publish_dir`: a directory each new checkpoint is written to (`checkpoint`, and
    /// `checkpoints/<size>`); default none.
    pub publish_dir: Option<PathBuf>,
}

/// Resolved settings.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub listen: SocketAddr,
    pub database_url: String,
    pub log_key: PathBuf,
    pub checkpoint_interval: Duration,
    pub workers: usize,
    /// Where checkpoints are published, if anywhere.
    pub publish_dir: Option<PathBuf>,
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
            publish_dir: self.publish_dir.or(file.publish_dir),
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
    #[error(transparent)]
    Publish(#[from] publish::PublishError),
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
    describe_metrics();
    // A publish directory that cannot be created stops the start, rather than a silent gap.
    let publisher = settings
        .publish_dir
        .as_deref()
        .map(publish::Publisher::open)
        .transpose()?;
    if let Some(p) = &publisher {
        metrics::counter!("gpuledger_checkpoint_publish_errors_total").absolute(0);
        tracing::info!(dir = %p.dir().display(), "publishing checkpoints");
    }
    let mut watched = Vec::new();
    if let Some(path) = sqlite_path(&settings.database_url) {
        watched.push((
            "database",
            path.parent().unwrap_or(Path::new(".")).to_owned(),
        ));
    }
    if let Some(p) = &publisher {
        watched.push(("publish_dir", p.dir().to_owned()));
    }
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
                .into_utoipa_app()
                .configure(api::routes)
                .into_app()
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
            publisher,
            watched,
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

/// The file of a `sqlite://PATH` URL (`None` for PostgreSQL), as `store::conn` reads it.
fn sqlite_path(url: &str) -> Option<PathBuf> {
    let rest = url.strip_prefix("sqlite:")?;
    let path = Path::new(rest.strip_prefix("//").unwrap_or(rest));
    Some(if path.parent().is_some_and(|p| p.as_os_str().is_empty()) {
        Path::new(".").join(path)
    } else {
        path.to_owned()
    })
}

/// Help text of the metrics this module sets.
fn describe_metrics() {
    metrics::describe_gauge!(
        "gpuledger_checkpoint_published_size",
        "Tree size of the latest checkpoint written to the publish directory"
    );
    metrics::describe_counter!(
        "gpuledger_checkpoint_publish_errors_total",
        "Rounds in which writing checkpoints to the publish directory failed"
    );
    metrics::describe_gauge!(
        "gpuledger_filesystem_available_bytes",
        "Bytes free on the filesystem of the SQLite database (volume=database) or of the publish directory (volume=publish_dir)"
    );
}

/// Every `every`: signs a checkpoint if the log grew, publishes new checkpoints when a
/// publish directory is set, and refreshes the free-space gauges of `watched` directories.
async fn checkpoint_loop(
    ledger: Arc<Ledger>,
    every: Duration,
    mut publisher: Option<publish::Publisher>,
    watched: Vec<(&'static str, PathBuf)>,
) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let l = ledger.clone();
        match tokio::task::spawn_blocking(move || l.checkpoint()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "signing a checkpoint failed"),
            Err(e) => tracing::error!(error = %e, "checkpoint task failed"),
        }
        if let Some(mut p) = publisher.take() {
            let l = ledger.clone();
            let done = tokio::task::spawn_blocking(move || {
                let r = p.publish(&l);
                (p, r)
            })
            .await;
            match done {
                Ok((p, r)) => {
                    match r {
                        Ok(Some(size)) => {
                            metrics::gauge!("gpuledger_checkpoint_published_size").set(size as f64)
                        }
                        Ok(None) => {}
                        Err(e) => {
                            metrics::counter!("gpuledger_checkpoint_publish_errors_total")
                                .increment(1);
                            tracing::error!(error = %e, "publishing checkpoints failed; will retry");
                        }
                    }
                    publisher = Some(p);
                }
                Err(e) => tracing::error!(error = %e, "publish task failed; publishing stopped"),
            }
        }
        for (volume, dir) in &watched {
            if let Some(free) = crate::disk::available_bytes(dir) {
                metrics::gauge!("gpuledger_filesystem_available_bytes", "volume" => *volume)
                    .set(free as f64);
            }
        }
    }
}
