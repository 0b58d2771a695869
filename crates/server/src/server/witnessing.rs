//! The log side of C2SP tlog-witness: one thread per configured witness sends each new
//! checkpoint with `add-checkpoint` (the old size the log believes the witness holds, the
//! consistency proof from it, the log-signed note) and stores the `cosignature/v1` lines it
//! answers, after checking them against that witness's key.
//!
//! - 200: every returned line that is a valid cosignature of the witness is stored
//!   (`store::cosignatures`); anything else in the answer is ignored.
//! - 409 (`text/x.tlog.size`): the witness holds another size; the checkpoint is sent again,
//!   once, from that size. A log that lost its witness state resyncs this way. A 409 the log
//!   cannot resolve (the witness is ahead of the log's latest checkpoint, or answers 409 again)
//!   means the witness saw another history of this log: a possible fork, logged at ERROR.
//! - 422 (the proof does not verify against what the witness cosigned): a possible fork, ERROR.
//! - 403 (the witness does not know this log or key), 404 (wrong URL): ERROR; anything else,
//!   or no answer: WARN. Each failure counts in `gpuledger_witness_failures_total` by reason,
//!   and the witness is tried again with exponential backoff.
//!
//! A witness far behind is sent only the latest checkpoint, with one consistency proof from its
//! size. The threads only read the log and write cosignatures, never through the sequencer,
//! so a slow or failing witness never holds up ingest.

use gpuledger_core::cosignature::{self, AddCheckpoint, WitnessKey};
use gpuledger_core::time::Timestamp;
use gpuledger_store::cosignatures::{self, Witnessing};
use gpuledger_store::{read, Ledger, StoreError};
use serde::Deserialize;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often a witness thread looks for a new checkpoint when none was signalled.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Longest time one `add-checkpoint` request may take, connection included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// First wait after a failure; doubled after each further failure, up to [`MAX_BACKOFF`].
pub const MIN_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait between two attempts at a failing witness.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// Largest witness answer read, in bytes (a few signature lines, or a size).
pub const MAX_ANSWER_BYTES: u64 = 16 * 1024;
/// Default `witness_wait_seconds`.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// One `[[witnesses]]` entry of the settings file.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct WitnessSetting {
    /// The witness's name: the name in its vkey.
    pub name: String,
    /// The witness's C2SP vkey, `<name>+<key id>+<base64(0x04 ‖ key)>`.
    pub vkey: String,
    /// Its submission prefix: checkpoints are sent to `<url>/add-checkpoint`.
    pub url: String,
}

/// The witnesses of `serve`, resolved.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WitnessSettings {
    /// The witnesses.
    pub witnesses: Vec<WitnessSetting>,
    /// Cosignatures an invoice's or certificate's checkpoint needs (0: none).
    pub quorum: usize,
    /// How long an issuance waits for the quorum.
    pub wait: Duration,
}

/// A witness ready to be sent checkpoints.
#[derive(Debug, Clone)]
pub struct Witness {
    /// Its key (the name is the key's).
    pub key: WitnessKey,
    /// `<url>/add-checkpoint`.
    pub endpoint: String,
}

/// Why the witness settings cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("witness settings: {0}")]
pub struct WitnessConfigError(pub String);

impl WitnessSettings {
    /// Checks every witness (its vkey parses and names it, its URL is `http(s)://`) and the
    /// quorum (at most the number of witnesses); returns the witnesses and the shared state.
    pub fn prepare(&self) -> Result<(Vec<Witness>, Witnessing), WitnessConfigError> {
        let mut out = Vec::new();
        for w in &self.witnesses {
            let key = WitnessKey::parse(&w.vkey)
                .map_err(|e| WitnessConfigError(format!("witness {:?}: vkey: {e}", w.name)))?;
            if key.name() != w.name {
                return Err(WitnessConfigError(format!(
                    "witness {:?}: its vkey names {:?}",
                    w.name,
                    key.name()
                )));
            }
            if !(w.url.starts_with("http://") || w.url.starts_with("https://")) {
                return Err(WitnessConfigError(format!(
                    "witness {:?}: url must start with http:// or https://, not {:?}",
                    w.name, w.url
                )));
            }
            out.push(Witness {
                key,
                endpoint: format!("{}/add-checkpoint", w.url.trim_end_matches('/')),
            });
        }
        let witnessing = Witnessing::new(
            out.iter().map(|w| w.key.clone()).collect(),
            self.quorum,
            self.wait,
        )
        .map_err(|e| WitnessConfigError(e.to_string()))?;
        Ok((out, witnessing))
    }
}

/// Why an `add-checkpoint` round failed: the `reason` label of
/// `gpuledger_witness_failures_total` (a fixed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// 409 the log cannot resolve: the witness holds a size the log cannot prove from.
    Conflict,
    /// 403: the witness does not know this log, or not this key.
    Forbidden,
    /// 404: no witness at that URL.
    NotFound,
    /// 422: the consistency proof does not verify against what the witness cosigned.
    Unprocessable,
    /// No answer (connection, timeout) or the witness is unavailable (5xx, 429).
    Unreachable,
    /// An answer that is none of the above, or a 200 without a valid cosignature.
    BadResponse,
}

impl Failure {
    /// Every reason, for the counters' zero values.
    pub const ALL: [Failure; 6] = [
        Failure::Conflict,
        Failure::Forbidden,
        Failure::NotFound,
        Failure::Unprocessable,
        Failure::Unreachable,
        Failure::BadResponse,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Failure::Conflict => "conflict",
            Failure::Forbidden => "forbidden",
            Failure::NotFound => "not_found",
            Failure::Unprocessable => "unprocessable",
            Failure::Unreachable => "unreachable",
            Failure::BadResponse => "bad_response",
        }
    }
}

/// Help text of the witness metrics.
pub fn describe_metrics() {
    metrics::describe_gauge!(
        "gpuledger_witness_cosigned_size",
        "Tree size of the latest checkpoint the witness cosigned"
    );
    metrics::describe_gauge!(
        "gpuledger_witness_lag_entries",
        "Latest checkpoint size minus the size the witness cosigned"
    );
    metrics::describe_counter!(
        "gpuledger_witness_failures_total",
        "add-checkpoint rounds that failed, by witness and reason (conflict, forbidden, not_found, unprocessable, unreachable, bad_response); conflict and unprocessable mean the witness saw another history"
    );
    metrics::describe_gauge!(
        "gpuledger_witness_quorum",
        "Cosignatures an invoice's or certificate's checkpoint needs (witness_quorum; 0: none)"
    );
    metrics::describe_gauge!(
        "gpuledger_witness_quorum_lag_entries",
        "Latest checkpoint size minus the largest size cosigned by witness_quorum witnesses (0 without a quorum)"
    );
    metrics::describe_counter!(
        "gpuledger_witness_quorum_timeouts_total",
        "Issuances answered 503 witnesses_behind: no checkpoint reached the quorum in witness_wait_seconds"
    );
}

/// The running witness threads; [`Running::stop`] ends them.
pub struct Running {
    witnessing: Arc<Witnessing>,
    threads: Vec<JoinHandle<()>>,
}

impl Running {
    /// Tells the threads to stop and waits for them (at most one request's timeout).
    pub fn stop(self) {
        self.witnessing.stop();
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Attaches `settings`' witnesses to `ledger` and starts one thread per witness. Every
/// witness's metrics start at their zero values, so alerts see them from the start.
pub fn start(ledger: &Arc<Ledger>, settings: &WitnessSettings) -> Result<Running, StartError> {
    let (witnesses, witnessing) = settings.prepare()?;
    let witnessing = Arc::new(witnessing);
    ledger.attach_witnessing(witnessing.clone())?;
    describe_metrics();
    metrics::gauge!("gpuledger_witness_quorum").set(settings.quorum as f64);
    metrics::counter!("gpuledger_witness_quorum_timeouts_total").absolute(0);
    let mut threads = Vec::new();
    for w in witnesses {
        let name = w.key.name().to_owned();
        for f in Failure::ALL {
            metrics::counter!("gpuledger_witness_failures_total", "witness" => name.clone(), "reason" => f.label())
                .absolute(0);
        }
        let http = gpuledger_agent::tls::client(&w.endpoint, &Default::default(), REQUEST_TIMEOUT)
            .map_err(|e| WitnessConfigError(format!("witness {name}: {e}")))?;
        let sender = Sender {
            ledger: ledger.clone(),
            witnessing: witnessing.clone(),
            witness: w,
            http,
            believed: 0,
            cosigned: None,
            probed: false,
        };
        let t = std::thread::Builder::new()
            .name(format!("witness-{name}"))
            .spawn(move || sender.run())
            .map_err(|e| WitnessConfigError(format!("cannot start a witness thread: {e}")))?;
        threads.push(t);
    }
    if !threads.is_empty() {
        tracing::info!(
            witnesses = threads.len(),
            quorum = settings.quorum,
            "sending checkpoints to witnesses"
        );
    }
    Ok(Running {
        witnessing,
        threads,
    })
}

/// Why the witness threads did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] WitnessConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One witness's sender: what it believes the witness holds, and what it has stored.
struct Sender {
    ledger: Arc<Ledger>,
    witnessing: Arc<Witnessing>,
    witness: Witness,
    http: ureq::Agent,
    /// The size the log believes the witness holds (the next old size).
    believed: u64,
    /// The size of the latest checkpoint of which a cosignature by this witness is stored.
    cosigned: Option<u64>,
    /// Whether a round reached the witness since start. The first round sends the latest
    /// checkpoint even when its cosignature is stored: a witness that holds more than this
    /// database (restored or failed over behind what was published) says so at once, with a
    /// 409 that stops writes (`log_rewound`), before anything is signed on it.
    probed: bool,
}

/// An answer to one `add-checkpoint`.
enum Answer {
    /// Cosignature lines (200).
    Cosigned(String),
    /// The witness holds this size (409).
    Holds(u64),
    /// A failure, with what to log.
    Failed(Failure, String),
}

impl Sender {
    fn name(&self) -> &str {
        self.witness.key.name()
    }

    fn run(mut self) {
        let endpoint = self.witness.endpoint.clone();
        self.witnessing
            .report(self.name(), |r| r.endpoint = endpoint);
        let mut backoff: Option<Duration> = None;
        let mut loaded = false;
        loop {
            let seen = self.witnessing.checkpoints_signalled();
            if !loaded {
                loaded = self.load();
            }
            if loaded {
                match self.round() {
                    Ok(()) => backoff = None,
                    Err((failure, message)) => {
                        let next = backoff.map_or(MIN_BACKOFF, |b| (b * 2).min(MAX_BACKOFF));
                        self.failed(failure, &message, next);
                        backoff = Some(next);
                    }
                }
            }
            // After a failure wait out the backoff whatever is signed meanwhile; otherwise wake
            // for the next checkpoint signed in this process, or poll.
            let stop = match backoff {
                Some(b) => self.sleep(b),
                None => self.witnessing.wait_for_checkpoint(seen, POLL_INTERVAL),
            };
            if stop {
                return;
            }
        }
    }

    /// Reads the size of the latest checkpoint this witness's cosignature of is stored (what
    /// it is believed to hold); returns whether it was read (else a warning is logged).
    fn load(&mut self) -> bool {
        match self
            .ledger
            .reads()
            .run(cosignatures::cosigned_sizes)
            .map(|m| m.get(self.name()).copied())
        {
            Ok(size) => {
                self.believed = size.unwrap_or(0);
                self.cosigned = size;
                true
            }
            Err(e) => {
                tracing::warn!(witness = %self.name(), error = %e, "cannot read the witness state; will retry");
                false
            }
        }
    }

    /// Counts, reports and logs a failed round; the next is tried in `next`.
    fn failed(&self, failure: Failure, message: &str, next: Duration) {
        metrics::counter!("gpuledger_witness_failures_total", "witness" => self.name().to_owned(), "reason" => failure.label()).increment(1);
        self.witnessing.report(self.name(), |r| {
            r.last_error = Some((
                failure.label().to_owned(),
                message.to_owned(),
                Timestamp::now().unix(),
            ))
        });
        match failure {
            Failure::Conflict | Failure::Unprocessable => tracing::error!(
                witness = %self.name(),
                reason = failure.label(),
                retry_in_s = next.as_secs(),
                "the witness refused the checkpoint: it saw another history of this log (possible fork; investigate, see ops/runbooks/witness.md): {message}"
            ),
            Failure::Forbidden | Failure::NotFound => tracing::error!(
                witness = %self.name(),
                reason = failure.label(),
                retry_in_s = next.as_secs(),
                "the witness refused the checkpoint (check its configuration and ours): {message}"
            ),
            Failure::Unreachable | Failure::BadResponse => tracing::warn!(
                witness = %self.name(),
                reason = failure.label(),
                retry_in_s = next.as_secs(),
                "sending the checkpoint to the witness failed; will retry: {message}"
            ),
        }
    }

    /// Sleeps `d` unless told to stop; returns whether to stop.
    fn sleep(&self, d: Duration) -> bool {
        let until = std::time::Instant::now() + d;
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return self.witnessing.stopping();
            }
            let seen = self.witnessing.checkpoints_signalled();
            if self.witnessing.wait_for_checkpoint(seen, left) {
                return true;
            }
        }
    }

    /// Sends the latest checkpoint unless this witness's cosignature of it is stored.
    fn round(&mut self) -> Result<(), (Failure, String)> {
        let store = |e: StoreError| (Failure::BadResponse, format!("store: {e}"));
        let latest = self
            .ledger
            .reads()
            .run(read::latest_checkpoint)
            .map_err(|e| {
                (
                    Failure::Unreachable,
                    format!("reading the latest checkpoint: {e}"),
                )
            })?;
        let Some((size, _, note)) = latest else {
            return Ok(());
        };
        self.report_lag(size);
        if self.probed && self.cosigned == Some(size) {
            return Ok(());
        }
        let mut old = self.believed;
        let mut resent = false;
        loop {
            let answer = self.send(old, size, &note)?;
            match answer {
                Answer::Cosigned(text) => {
                    let found = self.accept(size, &note, &text).map_err(store)?;
                    if !found {
                        return Err((
                            Failure::BadResponse,
                            format!(
                                "200 without a valid cosignature of {} for size {size}",
                                self.name()
                            ),
                        ));
                    }
                    self.believed = size;
                    self.cosigned = Some(size);
                    self.probed = true;
                    self.report_lag(size);
                    return Ok(());
                }
                Answer::Holds(held) if !resent && held <= size => {
                    tracing::info!(witness = %self.name(), believed = old, held, "the witness holds another size; sending again from it");
                    old = held;
                    resent = true;
                }
                Answer::Holds(held) => {
                    // A witness that cosigned more than the database's latest checkpoint:
                    // the database lost checkpoints that were published.
                    if held > size {
                        self.ledger.high_water().witness_holds(self.name(), held);
                    }
                    return Err((
                        Failure::Conflict,
                        format!("the witness holds size {held}; the log's latest checkpoint has size {size} (sent from {old})"),
                    ));
                }
                Answer::Failed(f, m) => return Err((f, m)),
            }
        }
    }

    /// One `add-checkpoint` of the checkpoint `note` of `size`, from `old`.
    fn send(&self, old: u64, size: u64, note: &str) -> Result<Answer, (Failure, String)> {
        let proof = if old == 0 || old == size {
            Vec::new()
        } else {
            self.ledger
                .reads()
                .consistency_proof(old, size)
                .map_err(|e| {
                    (
                        Failure::Unreachable,
                        format!("consistency proof {old} → {size}: {e}"),
                    )
                })?
        };
        let body = AddCheckpoint {
            old_size: old,
            proof,
            checkpoint: note.as_bytes().to_vec(),
        }
        .to_body();
        let resp = self
            .http
            .post(&self.witness.endpoint)
            .header("Content-Type", "text/plain; charset=utf-8")
            .send(&body[..]);
        let mut resp = match resp {
            Ok(r) => r,
            Err(e) => {
                return Ok(Answer::Failed(
                    Failure::Unreachable,
                    format!("{}: {e}", self.witness.endpoint),
                ))
            }
        };
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_string()
            .unwrap_or_default();
        let short = || text.chars().take(200).collect::<String>();
        Ok(match status {
            200 => Answer::Cosigned(text),
            409 => match cosignature::parse_size_body(text.as_bytes()) {
                Some(held) => Answer::Holds(held),
                None => Answer::Failed(
                    Failure::BadResponse,
                    format!("409 without a size: {:?}", short()),
                ),
            },
            403 => Answer::Failed(Failure::Forbidden, format!("403: {}", short())),
            404 => Answer::Failed(Failure::NotFound, format!("404: {}", short())),
            422 => Answer::Failed(Failure::Unprocessable, format!("422: {}", short())),
            429 | 500..=599 => {
                Answer::Failed(Failure::Unreachable, format!("{status}: {}", short()))
            }
            other => Answer::Failed(Failure::BadResponse, format!("{other}: {}", short())),
        })
    }

    /// Stores the valid cosignatures of this witness among the lines of a 200 answer; returns
    /// whether there was one.
    fn accept(&self, size: u64, note: &str, answer: &str) -> Result<bool, StoreError> {
        let lines: Vec<String> = answer
            .split_inclusive('\n')
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect();
        // A line that is not a signature line at all makes the whole set unusable: keep those
        // that are, one at a time.
        let mut found = Vec::new();
        for line in lines {
            let Ok(with) = cosignature::with_signature_lines(note, std::slice::from_ref(&line))
            else {
                continue;
            };
            found.extend(
                cosignature::valid_cosignatures(
                    with.as_bytes(),
                    std::slice::from_ref(&self.witness.key),
                )
                .into_iter()
                .filter(|c| c.witness == self.name()),
            );
        }
        let Some(c) = found.into_iter().max_by_key(|c| c.timestamp) else {
            return Ok(false);
        };
        let now = Timestamp::now();
        self.ledger.with_account_writer(|conn| {
            cosignatures::store(conn, self.name(), size, &c.line, c.timestamp, now)
        })?;
        self.witnessing.cosignature_stored();
        self.witnessing
            .report(self.name(), |r| r.last_cosigned_at = Some(now.unix()));
        metrics::gauge!("gpuledger_witness_cosigned_size", "witness" => self.name().to_owned())
            .set(size as f64);
        Ok(true)
    }

    /// Sets the lag gauges against the latest checkpoint of `size`.
    fn report_lag(&self, size: u64) {
        self.witnessing.report(self.name(), |r| {
            r.cosigned_size = self.cosigned;
            r.lag_entries = size.saturating_sub(self.cosigned.unwrap_or(0));
        });
        let cosigned = self.cosigned.unwrap_or(0);
        metrics::gauge!("gpuledger_witness_cosigned_size", "witness" => self.name().to_owned())
            .set(cosigned as f64);
        metrics::gauge!("gpuledger_witness_lag_entries", "witness" => self.name().to_owned())
            .set(size.saturating_sub(cosigned) as f64);
        let w = &self.witnessing;
        let quorum_lag = if w.quorum() == 0 {
            Ok(0)
        } else {
            self.ledger
                .reads()
                .run(|c| cosignatures::quorum_size(c, w.witnesses(), w.quorum()))
                .map(|q| size.saturating_sub(q))
        };
        if let Ok(lag) = quorum_lag {
            metrics::gauge!("gpuledger_witness_quorum_lag_entries").set(lag as f64);
        }
    }
}

/// A witness (`crate::witness`) served in this process, on a thread and runtime of its own:
/// the demo's, the ingest benchmark's and the tests'. Stopped when dropped.
pub struct LocalWitness {
    url: String,
    key: WitnessKey,
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl LocalWitness {
    /// Starts the witness of `settings` (port 0: any free port); returns once it listens.
    pub fn start(settings: crate::witness::WitnessSettings) -> Result<LocalWitness, String> {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("local-witness".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("witness runtime: {e}")));
                        return;
                    }
                };
                rt.block_on(async move {
                    let running = match crate::witness::start(settings).await {
                        Ok(w) => w,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.to_string()));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok((running.url(), running.witness_key().clone())));
                    let _ = tokio::task::spawn_blocking(move || stop_rx.recv()).await;
                    running.stop().await;
                });
            })
            .map_err(|e| format!("cannot start the witness thread: {e}"))?;
        let (url, key) = ready_rx
            .recv()
            .map_err(|_| "the witness thread ended before it listened".to_owned())??;
        Ok(LocalWitness {
            url,
            key,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// `http://<addr>`: its submission prefix.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Its public identity.
    pub fn witness_key(&self) -> &WitnessKey {
        &self.key
    }

    /// The `[[witnesses]]` entry that attaches it to a `serve`.
    pub fn setting(&self) -> WitnessSetting {
        WitnessSetting {
            name: self.key.name().to_owned(),
            vkey: self.key.vkey(),
            url: self.url.clone(),
        }
    }
}

impl Drop for LocalWitness {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
