//! The sender: delivers the spool to `POST /v1/records` in batches, in seq order, and moves
//! the acknowledged prefix. Shared by the agent and the market signer.
//!
//! - `accepted` and `duplicate` acknowledge a record (a duplicate is a resend after a crash or
//!   a lost answer: the ledger already holds exactly this record).
//! - `rejected` with a reason that can clear by itself ([`TRANSIENT_REASONS`]: the signer,
//!   key, tenant or lease is not registered yet, the interval is ahead of the ledger's clock)
//!   stops the batch
//!   there; it is retried with backoff. Any other rejection is permanent: the record and the
//!   reason go to the dead-letter file, an error is logged, and the rest flows on.
//! - Network errors (TLS refusals among them), 5xx and other unexpected answers are retried
//!   with exponential backoff and jitter; 429, 503 and 507 ([`WAIT_STATUSES`]) wait for
//!   `Retry-After` when the server sends one.

use super::spool::{Pending, Spool};
use rand_core::RngCore;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Rejection reasons that may clear without a change to the record: retried, not dead-lettered.
/// A registration the ledger lacks (the signer's key, the tenant, the lease) is the operator's
/// to add; the record waits for it rather than being lost.
pub const TRANSIENT_REASONS: [&str; 5] = [
    "unknown_signer",
    "unknown_key",
    "unknown_tenant",
    "unknown_lease",
    "in_future",
];
/// First retry delay.
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(250);
/// Longest `Retry-After` honoured, in seconds; a longer one waits this long.
pub const MAX_RETRY_AFTER_SECONDS: u64 = 300;
/// Answers that ask the sender to wait and send the same batch again, for `Retry-After` when
/// given: 429 Too Many Requests, 503 Service Unavailable, 507 Insufficient Storage (the
/// ledger's disk is full). Other answers but 200 are retried with the backoff alone.
pub const WAIT_STATUSES: [u16; 3] = [429, 503, 507];

/// State shared by the producer (agent or market loop) and the sender thread.
pub struct Shared {
    /// The spool.
    pub spool: Mutex<Spool>,
    /// Signalled after an append and on stop.
    pub wake: Condvar,
    /// Set to stop both loops.
    pub stop: AtomicBool,
    /// Records acknowledged as accepted or duplicate since start.
    pub delivered: AtomicU64,
    /// Records dead-lettered since start.
    pub dead_lettered: AtomicU64,
    /// Prometheus metrics (served when the agent has a metrics listener).
    pub metrics: super::metrics::AgentMetrics,
}

impl Shared {
    /// Wraps an open spool.
    pub fn new(spool: Spool) -> Arc<Shared> {
        Arc::new(Shared {
            spool: Mutex::new(spool),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            delivered: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
            metrics: super::metrics::AgentMetrics::new(),
        })
    }

    /// Asks both loops to stop.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.wake.notify_all();
    }

    /// Whether stop was asked.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Sleeps up to `d`, returning early on stop.
    pub fn sleep(&self, d: Duration) {
        let until = Instant::now() + d;
        while !self.stopping() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(100)));
        }
    }
}

/// Sender settings.
#[derive(Debug, Clone)]
pub struct SenderConfig {
    /// The ledger's base URL.
    pub server_url: String,
    /// Records per POST.
    pub max_batch: usize,
    /// Ceiling of the backoff.
    pub max_backoff: Duration,
    /// Timeout of one request.
    pub request_timeout: Duration,
    /// Signer id, for log lines.
    pub signer: String,
    /// The origin of the log the records are signed for: the sender sends only to a ledger
    /// that says it is that log (`GET /v1/log`).
    pub origin: String,
}

impl SenderConfig {
    /// The sender settings of a signer of `origin` at `server_url`, with the agent's limits.
    pub fn new(
        server_url: &str,
        signer: &str,
        origin: &str,
        limits: &super::config::Limits,
    ) -> Self {
        SenderConfig {
            server_url: server_url.to_owned(),
            max_batch: limits.max_batch,
            max_backoff: Duration::from_secs(limits.max_backoff_seconds),
            request_timeout: Duration::from_secs(limits.request_timeout_seconds),
            signer: signer.to_owned(),
            origin: origin.to_owned(),
        }
    }
}

enum Attempt {
    /// Some or all records were resolved and nothing asks to wait.
    Progress,
    /// Wait, then try again: `Some` is the server's Retry-After.
    Retry(Option<Duration>),
}

/// Runs until [`Shared::request_stop`], reaching the ledger with `http`
/// ([`super::tls::client`]).
pub fn run(shared: Arc<Shared>, cfg: SenderConfig, http: ureq::Agent) {
    let url = format!("{}/v1/records", cfg.server_url.trim_end_matches('/'));
    let mut backoff = INITIAL_BACKOFF;
    // Whether the ledger said it is our log since the last failed request.
    let mut same_log = false;
    while !shared.stopping() {
        let batch = {
            let spool = shared.spool.lock().expect("spool lock");
            match spool.peek(cfg.max_batch) {
                Ok(b) if b.is_empty() => {
                    let _unused = shared
                        .wake
                        .wait_timeout(spool, Duration::from_millis(500))
                        .expect("spool lock");
                    continue;
                }
                Ok(b) => b,
                Err(e) => {
                    tracing::error!(error = %e, "cannot read the spool; retrying");
                    drop(spool);
                    shared.sleep(Duration::from_secs(1));
                    continue;
                }
            }
        };
        if !same_log {
            use super::origin::{check_ledger, LedgerOrigin};
            match check_ledger(&http, &cfg.server_url, &cfg.origin) {
                LedgerOrigin::Same => same_log = true,
                LedgerOrigin::Other(o) => {
                    tracing::error!(signer = %cfg.signer, ours = %cfg.origin, ledger = %o, "the ledger is another log than the one these records are signed for; nothing is sent (fix server_url, or start a new spool for the new log)");
                    shared.sleep(jitter(backoff));
                    backoff = (backoff * 2).min(cfg.max_backoff);
                    continue;
                }
                // Not answering (unreachable, or its certificate refused): nothing is sent, and
                // the loop backs off below. Said here, as nothing else says it.
                LedgerOrigin::Unknown(e) => {
                    tracing::warn!(signer = %cfg.signer, error = %e, pending = batch.len(), "ledger unreachable; will retry")
                }
            }
        }
        let result = if same_log {
            attempt(&http, &url, &shared, &batch, &cfg)
        } else {
            Attempt::Retry(None)
        };
        match result {
            Attempt::Progress => backoff = INITIAL_BACKOFF,
            Attempt::Retry(after) => {
                same_log = false;
                let wait = after.unwrap_or_else(|| jitter(backoff));
                tracing::debug!(wait_ms = wait.as_millis() as u64, "retrying");
                shared.sleep(wait);
                backoff = (backoff * 2).min(cfg.max_backoff);
            }
        }
    }
}

/// A random delay in [d/2, d].
fn jitter(d: Duration) -> Duration {
    let half = d.as_millis() as u64 / 2;
    Duration::from_millis(half + rand_core::OsRng.next_u64() % (half + 1))
}

fn retry_after(r: &ureq::http::Response<ureq::Body>) -> Option<Duration> {
    let v = r.headers().get("Retry-After")?.to_str().ok()?;
    let secs: u64 = v.trim().parse().ok()?;
    Some(Duration::from_secs(secs.min(MAX_RETRY_AFTER_SECONDS)))
}

/// The batch as one JSON array of the spooled envelopes, byte for byte.
fn batch_body(batch: &[Pending]) -> String {
    let mut body =
        String::with_capacity(batch.iter().map(|p| p.envelope.len() + 1).sum::<usize>() + 2);
    body.push('[');
    for (i, p) in batch.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&p.envelope);
    }
    body.push(']');
    body
}

/// Posts one batch and applies the answer to the spool.
fn attempt(
    http: &ureq::Agent,
    url: &str,
    shared: &Shared,
    batch: &[Pending],
    cfg: &SenderConfig,
) -> Attempt {
    match post(http, url, shared, batch, cfg) {
        Ok(outcomes) => apply_outcomes(shared, batch, &outcomes, cfg),
        Err(retry) => {
            shared.metrics.send_failures.increment(1);
            retry
        }
    }
}

/// Posts one batch; `Ok` with one outcome per record, or how to retry.
fn post(
    http: &ureq::Agent,
    url: &str,
    shared: &Shared,
    batch: &[Pending],
    cfg: &SenderConfig,
) -> Result<Vec<serde_json::Value>, Attempt> {
    let m = &shared.metrics;
    m.records_sent.increment(batch.len() as u64);
    let started = Instant::now();
    let resp = http
        .post(url)
        .header("Content-Type", "application/json")
        .send(batch_body(batch).as_bytes());
    m.send_seconds.record(started.elapsed().as_secs_f64());
    let mut resp = resp.map_err(|e| {
        tracing::warn!(signer = %cfg.signer, error = %e, pending = batch.len(), "ledger unreachable; will retry");
        Attempt::Retry(None)
    })?;
    let status = resp.status().as_u16();
    if WAIT_STATUSES.contains(&status) {
        let after = retry_after(&resp);
        let why = if status == 507 {
            "the ledger's disk is full"
        } else {
            "ledger busy"
        };
        tracing::warn!(signer = %cfg.signer, status, retry_after_s = after.map(|d| d.as_secs()), "{why}; will retry");
        return Err(Attempt::Retry(after));
    }
    if status != 200 {
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        tracing::error!(signer = %cfg.signer, status, body = %text.chars().take(300).collect::<String>(), "unexpected answer to POST /v1/records; will retry");
        return Err(Attempt::Retry(None));
    }
    let mut answer: serde_json::Value = resp.body_mut().read_json().map_err(|e| {
        tracing::error!(signer = %cfg.signer, error = %e, "unreadable answer; will retry");
        Attempt::Retry(None)
    })?;
    match answer["outcomes"].take() {
        serde_json::Value::Array(o) if o.len() == batch.len() => Ok(o),
        _ => {
            tracing::error!(signer = %cfg.signer, "answer does not hold one outcome per record; will retry");
            Err(Attempt::Retry(None))
        }
    }
}

/// Takes the ledger's answer into the spool: the records up to the first that must be retried
/// are acknowledged (delivered, or written to the dead-letter file when refused for good).
fn apply_outcomes(
    shared: &Shared,
    batch: &[Pending],
    outcomes: &[serde_json::Value],
    cfg: &SenderConfig,
) -> Attempt {
    let m = &shared.metrics;
    m.last_success
        .set(gpuledger_core::time::Timestamp::now().unix() as f64);
    let mut spool = shared.spool.lock().expect("spool lock");
    let (mut done, mut delivered, mut dead) = (0usize, 0u64, 0u64);
    let mut blocked = false;
    for (p, o) in batch.iter().zip(outcomes) {
        match o["status"].as_str() {
            Some("accepted") => {
                m.records_accepted.increment(1);
                delivered += 1
            }
            Some("duplicate") => {
                m.records_duplicate.increment(1);
                delivered += 1
            }
            Some("rejected") => {
                m.records_rejected.increment(1);
                if !refused(&mut spool, p, o, cfg) {
                    blocked = true;
                    break;
                }
                dead += 1;
            }
            _ => {
                tracing::error!(signer = %cfg.signer, "unknown outcome {o}; will retry");
                blocked = true;
                break;
            }
        }
        done += 1;
    }
    if done > 0 {
        if let Err(e) = spool.ack(&batch[done - 1], done as u64) {
            tracing::error!(error = %e, "cannot record acknowledgements; they will be resent (the ledger answers duplicate)");
            return Attempt::Retry(None);
        }
        shared.delivered.fetch_add(delivered, Ordering::Relaxed);
        shared.dead_lettered.fetch_add(dead, Ordering::Relaxed);
        m.dead_letters.increment(dead);
    }
    drop(spool);
    if blocked {
        Attempt::Retry(None)
    } else {
        Attempt::Progress
    }
}

/// A record the ledger refused: `false` when it must be retried (a reason that may pass later,
/// or a dead-letter file that cannot be written), `true` once it is in the dead-letter file.
fn refused(spool: &mut Spool, p: &Pending, o: &serde_json::Value, cfg: &SenderConfig) -> bool {
    let reason = o["reason"].as_str().unwrap_or("");
    if TRANSIENT_REASONS.contains(&reason) {
        tracing::warn!(signer = %cfg.signer, seq = p.seq, reason, message = %o["message"], "record refused for now; will retry");
        return false;
    }
    if let Err(e) = spool.dead_letter(p, o) {
        tracing::error!(error = %e, "cannot write the dead-letter file; will retry");
        return false;
    }
    tracing::error!(signer = %cfg.signer, seq = p.seq, reason, message = %o["message"], "record refused for good; written to the dead-letter file");
    true
}

/// Drains the spool once, synchronously, until it is empty or `deadline` passes; for tests and
/// tools. Returns the records still pending. An `https://` ledger is reached trusting the
/// system's CAs; [`drain_with`] takes a client of other TLS settings.
pub fn drain(shared: &Arc<Shared>, cfg: SenderConfig, deadline: Duration) -> u64 {
    let tls = super::config::TlsConfig::default();
    match super::tls::client(&cfg.server_url, &tls, cfg.request_timeout) {
        Ok(http) => drain_with(shared, cfg, http, deadline),
        Err(e) => {
            tracing::error!(error = %e, "cannot reach the ledger; nothing sent");
            shared.spool.lock().expect("spool lock").pending()
        }
    }
}

/// [`drain`] with the client `http` ([`super::tls::client`]).
pub fn drain_with(
    shared: &Arc<Shared>,
    cfg: SenderConfig,
    http: ureq::Agent,
    deadline: Duration,
) -> u64 {
    let s = shared.clone();
    let t = std::thread::spawn(move || run(s, cfg, http));
    let until = Instant::now() + deadline;
    loop {
        let pending = shared.spool.lock().expect("spool lock").pending();
        if pending == 0 || Instant::now() >= until {
            shared.request_stop();
            let _ = t.join();
            return pending;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
