//! The sender: delivers the spool to `POST /v1/records` in batches, in seq order, and moves
//! the acknowledged prefix. Shared by the agent and the market signer.
//!
//! - `accepted` and `duplicate` acknowledge a record (a duplicate is a resend after a crash or
//!   a lost answer: the ledger already holds exactly this record).
//! - `rejected`: what follows is the reason's [`Disposition`] ([`disposition`], one row per
//!   reason of core's [`Reason`]):
//!   - [`Disposition::Retry`] (the interval is ahead of the ledger's clock) stops the batch
//!     there; it is retried with backoff.
//!   - [`Disposition::Hold`]: the refusal comes from the signer's registration or
//!     configuration (an unregistered signer, key, tenant or lease, a revoked key, a node or
//!     region outside the key's scope, a role that may not sign it). The record goes to the
//!     spool's held queue ([`Spool::hold`]) and the rest flows on: the ledger accepts a later
//!     seq while an earlier one is missing (PROTOCOL.md §6.4), so one unregistered lease does
//!     not hold back the node's other records. Held records are retried from the front of the
//!     queue, one batch at a time, with their own backoff (reset when a held record is
//!     delivered), so they are delivered once the operator fixes what the error log names.
//!     Each batch's refusals are logged at error level, one line per reason with a hint
//!     ([`hint`]), and counted in `gpuledger_agent_refused_total{reason}`.
//!   - [`Disposition::DeadLetter`]: the record itself is wrong or can never be logged; the
//!     record and the reason go to the dead-letter file, an error is logged, and the rest flows
//!     on. So does a reason this agent does not know (a newer ledger's).
//! - Network errors (TLS refusals among them), 5xx and other unexpected answers are retried
//!   with exponential backoff and jitter; 429, 503 and 507 ([`WAIT_STATUSES`]) wait for
//!   `Retry-After` when the server sends one.

use super::spool::{Pending, Spool};
use gpuledger_core::outcome::Outcome;
use gpuledger_core::rejection::{Reason, ReasonClass, Rejection};
use rand_core::RngCore;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What the sender does with a record the ledger refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Clears by itself (the clock): the batch stops there and is retried with backoff.
    Retry,
    /// Caused by the signer's registration or configuration, which the operator can fix: kept
    /// in the spool's held queue and retried with backoff, while the rest flows on.
    Hold,
    /// The record itself is wrong, or can never be logged: written to the dead-letter file.
    DeadLetter,
}

/// The reasons whose disposition is [`Disposition::Hold`], each with a
/// `gpuledger_agent_refused_total{reason}` counter.
pub const HELD_REASONS: [Reason; 12] = [
    Reason::UnknownSigner,
    Reason::UnknownKey,
    Reason::KeySignerMismatch,
    Reason::RevokedKey,
    Reason::RoleNotAllowed,
    Reason::NodeNotAllowed,
    Reason::RegionNotAllowed,
    Reason::UnknownTenant,
    Reason::UnknownLease,
    Reason::UnknownNode,
    Reason::UnknownGpuModel,
    Reason::EnergyOverBound,
];

/// Largest difference, in seconds, between this signer's clock and the ledger's (as its last
/// answer said) under which a clock-caused refusal is taken as the record's own fault.
pub const CLOCK_SKEW_TOLERANCE_SECONDS: i64 = 60;

/// The disposition of each rejection reason, from its class in core
/// ([`gpuledger_core::rejection::ReasonClass`], where every reason is classified once).
pub fn disposition(r: Reason) -> Disposition {
    match r.class() {
        ReasonClass::Transient => Disposition::Retry,
        ReasonClass::Registration => Disposition::Hold,
        ReasonClass::Final => Disposition::DeadLetter,
    }
}

/// What the operator should fix, for a reason whose disposition is [`Disposition::Hold`] (and
/// a few others that point at the configuration).
pub fn hint(r: Reason) -> &'static str {
    match r {
        Reason::UnknownSigner => "register this signer id with the ledger (POST /v1/signers), or fix `signer` in the config",
        Reason::UnknownKey => "register this key_file's public key for the signer (POST /v1/signers, or /v1/signers/{id}/keys), or point key_file at the registered key",
        Reason::KeySignerMismatch => "key_file holds the key of another signer: fix key_file or `signer`",
        Reason::RevokedKey => "the key was revoked: records signed with it stay held until you move the held queue aside; register a new key and point key_file at it (ops/runbooks/rotate-agent-key.md)",
        Reason::RoleNotAllowed => "the signer is registered with a role that may not sign this kind of record: register the node agent as role `node`, the market signer as `market`",
        Reason::NodeNotAllowed => "the record's `node` is outside the key's scope: fix `node` in the config, or register a new key whose `nodes` include it and point key_file at it; records already signed under this key and `node` are kept held (a key's scope never changes), see ops/runbooks/alerts.md#gpuledgeragentrecordsheld",
        Reason::RegionNotAllowed => "the record's `region` is outside the key's scope: fix `region` in the config, or register a new key whose `regions` include it and point key_file at it; records already signed under this key and `region` are kept held (a key's scope never changes), see ops/runbooks/alerts.md#gpuledgeragentrecordsheld",
        Reason::UnknownTenant => "register the tenant (POST /v1/tenants) before the lease file names it",
        Reason::UnknownLease => "register the lease for its tenant (POST /v1/leases) before the lease file names it",
        Reason::UnknownNode => "register the node with its GPUs (POST /v1/nodes) before a key is registered for it; records of a key registered for an unregistered node stay held",
        Reason::UnknownGpuModel | Reason::EnergyOverBound => "the record does not fit the node's registration (its GPU models, MIG profiles, power per GPU): add the GPUs the node has or raise its power limit (POST /v1/nodes/{id}/updates), or fix the collector's model ids; held records are sent again and accepted once it fits",
        Reason::OverCapacity => "the record bills more GPUs than its node has or its lease covers: add the node's GPUs (POST /v1/nodes/{id}/updates) or fix the lease file to match the registered lease",
        Reason::WrongRegion => "the record's `region` is not the region its node is registered in: fix `region` in the config",
        Reason::LeaseNotOnNode | Reason::OutsideLeaseTerm => "the lease file bills GPUs, or a time, that the lease's registration does not cover (its nodes, GPUs and term): fix the lease file to match the registered lease",
        Reason::LeaseTenantMismatch => "the lease file names this lease for another tenant than its registration: fix the lease file",
        Reason::Conflict => "another record holds this seq: was the spool directory deleted? register a new signer id and start with an empty spool",
        Reason::InFuture => "the node's clock is ahead of the ledger's: check NTP",
        _ => "see the dead-letter file",
    }
}
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
    /// This machine's clock minus the ledger's, in seconds, as the last answer said.
    pub clock_skew: std::sync::atomic::AtomicI64,
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
            clock_skew: std::sync::atomic::AtomicI64::new(0),
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

/// The queue of the spool a batch was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Queue {
    /// The records in seq order ([`Spool::peek`]).
    Spool,
    /// The held queue ([`Spool::peek_held`]).
    Held,
}

enum Attempt {
    /// Some or all records were resolved and nothing asks to wait: `delivered` of them were
    /// accepted or duplicates, `held` were put (back) in the held queue.
    Progress { delivered: u64, held: u64 },
    /// Wait, then try again: `Some` is the server's Retry-After.
    Retry(Option<Duration>),
}

/// Runs until [`Shared::request_stop`], reaching the ledger with `http`
/// ([`super::tls::client`]).
pub fn run(shared: Arc<Shared>, cfg: SenderConfig, http: ureq::Agent) {
    let url = format!("{}/v1/records", cfg.server_url.trim_end_matches('/'));
    let mut pace = Pacing::new();
    while !shared.stopping() {
        let Some((batch, queue, held_before)) = next_batch(&shared, &cfg, pace.held_due) else {
            continue;
        };
        if !pace.same_log && !pace.check_log(&shared, &http, &cfg, batch.len()) {
            continue;
        }
        let result = if pace.same_log {
            attempt(&http, &url, &shared, &batch, queue, &cfg)
        } else {
            Attempt::Retry(None)
        };
        match result {
            Attempt::Progress { delivered, held } => {
                pace.progressed(queue, held_before, delivered, held, &cfg)
            }
            Attempt::Retry(after) => pace.retry(&shared, after, &cfg),
        }
    }
}

/// The next batch to send, the queue it comes from, and how many records were held before
/// it: the spool's records in seq order, else the held queue's once `held_due` has come.
/// `None` after a wait when there is nothing to send yet (or the spool cannot be read).
fn next_batch(
    shared: &Shared,
    cfg: &SenderConfig,
    held_due: Instant,
) -> Option<(Vec<Pending>, Queue, u64)> {
    let spool = shared.spool.lock().expect("spool lock");
    let held_before = spool.held();
    let now = Instant::now();
    let next = match spool.peek(cfg.max_batch) {
        Ok(b) if b.is_empty() && held_before > 0 && now >= held_due => {
            spool.peek_held(cfg.max_batch).map(|b| (b, Queue::Held))
        }
        other => other.map(|b| (b, Queue::Spool)),
    };
    match next {
        Ok((b, _)) if b.is_empty() => {
            let mut wait = Duration::from_millis(500);
            if held_before > 0 {
                wait = wait.min(held_due.saturating_duration_since(now));
            }
            let _unused = shared.wake.wait_timeout(spool, wait).expect("spool lock");
            None
        }
        Ok((b, q)) => {
            debug_assert!(b.len() <= cfg.max_batch, "a batch holds at most max_batch");
            Some((b, q, held_before))
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot read the spool; retrying");
            drop(spool);
            shared.sleep(Duration::from_secs(1));
            None
        }
    }
}

/// The sender's waits between tries: its backoff, and when the held queue is tried next.
struct Pacing {
    /// The wait after a failed try (with jitter), doubled up to `max_backoff`.
    backoff: Duration,
    /// When the held queue is tried next.
    held_due: Instant,
    /// The wait after a try of the held queue that delivered none of it.
    held_backoff: Duration,
    /// Whether the ledger said it is our log since the last failed request.
    same_log: bool,
}

impl Pacing {
    fn new() -> Self {
        Pacing {
            backoff: INITIAL_BACKOFF,
            held_due: Instant::now(),
            held_backoff: INITIAL_BACKOFF,
            same_log: false,
        }
    }

    /// Asks the ledger whether it is the log the records are signed for. `false` when it is
    /// another log (nothing is sent; this waits a backoff first). When it does not answer
    /// (unreachable, or its certificate refused) that is said here, as nothing else says it,
    /// and the try goes on to back off as a failed one.
    fn check_log(
        &mut self,
        shared: &Shared,
        http: &ureq::Agent,
        cfg: &SenderConfig,
        pending: usize,
    ) -> bool {
        use super::origin::{check_ledger, LedgerOrigin};
        match check_ledger(http, &cfg.server_url, &cfg.origin) {
            LedgerOrigin::Same => self.same_log = true,
            LedgerOrigin::Other(o) => {
                tracing::error!(signer = %cfg.signer, ours = %cfg.origin, ledger = %o, "the ledger is another log than the one these records are signed for; nothing is sent (fix server_url, or start a new spool for the new log)");
                shared.sleep(jitter(self.backoff));
                self.backoff = doubled(self.backoff, cfg);
                return false;
            }
            LedgerOrigin::Unknown(e) => {
                tracing::warn!(signer = %cfg.signer, error = %e, pending, "ledger unreachable; will retry")
            }
        }
        true
    }

    /// After a try of `queue` (when `held_before` records were held) that resolved records:
    /// `delivered` of them delivered, `held` held. The backoff starts again; the first records
    /// held wait a backoff before their first retry; a held queue that delivered is tried
    /// again at once, one refused again waits longer.
    fn progressed(
        &mut self,
        queue: Queue,
        held_before: u64,
        delivered: u64,
        held: u64,
        cfg: &SenderConfig,
    ) {
        self.backoff = INITIAL_BACKOFF;
        match queue {
            Queue::Spool if held_before == 0 && held > 0 => {
                self.held_backoff = INITIAL_BACKOFF;
                self.held_due = Instant::now() + jitter(self.held_backoff);
            }
            Queue::Spool => {}
            Queue::Held if delivered > 0 => {
                self.held_backoff = INITIAL_BACKOFF;
                self.held_due = Instant::now();
            }
            Queue::Held => {
                self.held_backoff = doubled(self.held_backoff, cfg);
                self.held_due = Instant::now() + jitter(self.held_backoff);
                tracing::debug!(
                    held = held_before,
                    wait_ms = self.held_backoff.as_millis() as u64,
                    "held records refused again"
                );
            }
        }
    }

    /// After a failed try: waits the server's `Retry-After` (else the backoff, with jitter)
    /// and doubles the backoff; the ledger's log is asked again before the next try.
    fn retry(&mut self, shared: &Shared, after: Option<Duration>, cfg: &SenderConfig) {
        self.same_log = false;
        let wait = after.unwrap_or_else(|| jitter(self.backoff));
        tracing::debug!(wait_ms = wait.as_millis() as u64, "retrying");
        shared.sleep(wait);
        self.backoff = doubled(self.backoff, cfg);
    }
}

/// The next backoff after `d`: twice as long, at most `max_backoff`.
fn doubled(d: Duration, cfg: &SenderConfig) -> Duration {
    (d * 2).min(cfg.max_backoff)
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
    queue: Queue,
    cfg: &SenderConfig,
) -> Attempt {
    match post(http, url, shared, batch, cfg) {
        Ok(outcomes) => apply_outcomes(shared, batch, queue, &outcomes, cfg),
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
    // The ledger's clock, against this signer's: what tells a refusal this clock caused.
    if let Some(ledger_now) = answer["ledger_now"]
        .as_str()
        .and_then(|t| gpuledger_core::time::Timestamp::parse(t).ok())
    {
        let skew = gpuledger_core::time::Timestamp::now().unix() - ledger_now.unix();
        m.clock_skew.set(skew as f64);
        shared.clock_skew.store(skew, Ordering::Relaxed);
    }
    match answer["outcomes"].take() {
        serde_json::Value::Array(o) if o.len() == batch.len() => Ok(o),
        _ => {
            tracing::error!(signer = %cfg.signer, "answer does not hold one outcome per record; will retry");
            Err(Attempt::Retry(None))
        }
    }
}

/// Takes the ledger's answer into the spool: the records up to the first that must be retried
/// are acknowledged (delivered, held, or written to the dead-letter file when refused for good).
fn apply_outcomes(
    shared: &Shared,
    batch: &[Pending],
    queue: Queue,
    outcomes: &[serde_json::Value],
    cfg: &SenderConfig,
) -> Attempt {
    debug_assert_eq!(outcomes.len(), batch.len(), "one outcome per record");
    let mut spool = shared.spool.lock().expect("spool lock");
    let mut tally = Tally::default();
    let mut blocked = false;
    for (p, o) in batch.iter().zip(outcomes) {
        if !tally.take(&mut spool, shared, p, o, cfg) {
            blocked = true;
            break;
        }
    }
    if !tally.commit(&mut spool, shared, batch, queue) {
        return Attempt::Retry(None);
    }
    let held_now = spool.held();
    drop(spool);
    // Alive means records got in: a refusal is an answer, not a delivery.
    if tally.delivered > 0 {
        shared
            .metrics
            .last_success
            .set(gpuledger_core::time::Timestamp::now().unix() as f64);
    }
    let (delivered, held) = (tally.delivered, tally.hold.len() as u64);
    tally.log_refusals(cfg, held_now);
    if blocked {
        Attempt::Retry(None)
    } else {
        Attempt::Progress { delivered, held }
    }
}

/// What the ledger's answer did to a batch, outcome by outcome from its front.
#[derive(Default)]
struct Tally<'a> {
    /// Records resolved from the front of the batch: delivered, held or dead-lettered.
    done: usize,
    /// Of those, accepted or duplicates.
    delivered: u64,
    /// Of those, written to the dead-letter file.
    dead: u64,
    /// Of those, the records to hold, written together before the acknowledgement.
    hold: Vec<(&'a Pending, &'static str)>,
    /// The held records by reason: how many, and the first one's seq and message.
    refusals: BTreeMap<&'static str, (Reason, u64, u64, String)>,
}

impl<'a> Tally<'a> {
    /// Takes the outcome `o` of the record `p`: `false` when it must be retried, which stops
    /// the batch there.
    fn take(
        &mut self,
        spool: &mut Spool,
        shared: &Shared,
        p: &'a Pending,
        o: &serde_json::Value,
        cfg: &SenderConfig,
    ) -> bool {
        let m = &shared.metrics;
        let resolved = match serde_json::from_value::<Outcome>(o.clone()) {
            Ok(Outcome::Accepted { .. }) => {
                m.records_accepted.increment(1);
                self.delivered += 1;
                true
            }
            Ok(Outcome::Duplicate { .. }) => {
                m.records_duplicate.increment(1);
                self.delivered += 1;
                true
            }
            Ok(Outcome::Rejected(r)) => {
                m.records_rejected.increment(1);
                self.rejected(spool, shared, p, o, r, cfg)
            }
            // A status or reason this agent does not know: a rejection is kept in the
            // dead-letter file, as one refused for good; anything else is retried.
            Err(_) if o["status"] == "rejected" => {
                m.records_rejected.increment(1);
                self.dead_letter(spool, p, o, None, cfg)
            }
            Err(_) => {
                tracing::error!(signer = %cfg.signer, "unknown outcome {o}; will retry");
                false
            }
        };
        if resolved {
            self.done += 1;
        }
        debug_assert_eq!(
            self.done as u64,
            self.delivered + self.dead + self.hold.len() as u64,
            "each record resolved was delivered, held or dead-lettered"
        );
        resolved
    }

    /// Takes the rejection `r` of `p` as its disposition says: `false` when it must be retried.
    fn rejected(
        &mut self,
        spool: &mut Spool,
        shared: &Shared,
        p: &'a Pending,
        o: &serde_json::Value,
        r: Rejection,
        cfg: &SenderConfig,
    ) -> bool {
        match effective_disposition(shared, p, &r, cfg) {
            Disposition::Retry => {
                tracing::warn!(signer = %cfg.signer, seq = p.seq, reason = %r.reason, message = %r.message, hint = hint(r.reason), "record refused for now; will retry");
                false
            }
            Disposition::Hold => {
                shared.metrics.refused(r.reason);
                self.hold.push((p, r.reason.code()));
                self.refusals
                    .entry(r.reason.code())
                    .or_insert((r.reason, 0, p.seq, r.message))
                    .1 += 1;
                true
            }
            Disposition::DeadLetter => self.dead_letter(spool, p, o, Some(&r), cfg),
        }
    }

    /// A record refused for good: `true` once it is in the dead-letter file (and counted),
    /// `false` when that file cannot be written (it is retried).
    fn dead_letter(
        &mut self,
        spool: &mut Spool,
        p: &Pending,
        o: &serde_json::Value,
        r: Option<&Rejection>,
        cfg: &SenderConfig,
    ) -> bool {
        if let Err(e) = spool.dead_letter(p, o) {
            tracing::error!(error = %e, "cannot write the dead-letter file; will retry");
            return false;
        }
        let reason = r.map_or_else(|| o["reason"].to_string(), |r| r.reason.to_string());
        let hint = r.map_or("", |r| hint(r.reason));
        tracing::error!(signer = %cfg.signer, seq = p.seq, reason, message = %o["message"], hint, "record refused for good; written to the dead-letter file");
        self.dead += 1;
        true
    }

    /// Writes the records to hold, then acknowledges the resolved front of `batch` in `queue`
    /// and counts it. `false` when the spool could not be written: the batch is sent again.
    fn commit(&self, spool: &mut Spool, shared: &Shared, batch: &[Pending], queue: Queue) -> bool {
        if let Err(e) = spool.hold(&self.hold) {
            tracing::error!(error = %e, "cannot write the held queue; the batch will be sent again");
            return false;
        }
        if self.done == 0 {
            return true;
        }
        let (through, count) = (&batch[self.done - 1], self.done as u64);
        let acked = match queue {
            Queue::Spool => spool.ack(through, count),
            Queue::Held => spool.ack_held(through, count),
        };
        if let Err(e) = acked {
            tracing::error!(error = %e, "cannot record acknowledgements; they will be resent (the ledger answers duplicate)");
            return false;
        }
        shared
            .delivered
            .fetch_add(self.delivered, Ordering::Relaxed);
        shared.dead_lettered.fetch_add(self.dead, Ordering::Relaxed);
        shared.metrics.dead_letters.increment(self.dead);
        true
    }

    /// Logs the batch's refusals that held records, one line per reason with its hint;
    /// `held_now` records are held in all.
    fn log_refusals(self, cfg: &SenderConfig, held_now: u64) {
        for (code, (reason, records, seq, message)) in self.refusals {
            tracing::error!(
                signer = %cfg.signer,
                reason = code,
                records,
                seq,
                message = %message,
                held = held_now,
                "records refused because of this signer's registration or configuration; they are held in the spool and retried until the ledger accepts them. To fix: {}",
                hint(reason)
            );
        }
    }
}

/// The disposition of the rejection `r` of `p`: its reason's ([`disposition`]), except that a
/// refusal for good that depends on the clock is held while this signer's clock disagrees with
/// the ledger's: it says more about the clock than about the record. Kept and retried, never
/// dead-lettered; the skew gauge and its alert say why.
fn effective_disposition(
    shared: &Shared,
    p: &Pending,
    r: &Rejection,
    cfg: &SenderConfig,
) -> Disposition {
    let skew = shared.clock_skew.load(Ordering::Relaxed);
    match disposition(r.reason) {
        Disposition::DeadLetter
            if r.reason.depends_on_clock() && skew.abs() > CLOCK_SKEW_TOLERANCE_SECONDS =>
        {
            tracing::error!(signer = %cfg.signer, seq = p.seq, reason = %r.reason, skew_seconds = skew, "record refused while this machine's clock disagrees with the ledger's; it is held and retried, not dead-lettered: fix the clock (docs/AGENT.md, Clocks)");
            Disposition::Hold
        }
        d => d,
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use Disposition::*;

    /// Every rejection reason of the protocol, by its wire code, and what the agent does with
    /// it. A reason that core adds fails to compile in core's `Reason::class`; one renamed
    /// fails here.
    const TABLE: [(&str, Disposition); 43] = [
        ("malformed", DeadLetter),
        ("unsupported_version", DeadLetter),
        ("unknown_kind", DeadLetter),
        ("invalid_field", DeadLetter),
        ("negative_quantity", DeadLetter),
        ("quantity_out_of_range", DeadLetter),
        ("gpu_seconds_mismatch", DeadLetter),
        ("empty_interval", DeadLetter),
        ("interval_too_long", DeadLetter),
        ("in_future", Retry),
        ("too_large", DeadLetter),
        ("unknown_signer", Hold),
        ("unknown_key", Hold),
        ("key_signer_mismatch", Hold),
        ("revoked_key", Hold),
        ("role_not_allowed", Hold),
        ("bad_signature", DeadLetter),
        ("conflict", DeadLetter),
        ("overlapping_interval", DeadLetter),
        ("node_not_allowed", Hold),
        ("region_not_allowed", Hold),
        ("unknown_tenant", Hold),
        ("unknown_lease", Hold),
        ("unknown_node", Hold),
        ("lease_tenant_mismatch", DeadLetter),
        ("too_old", DeadLetter),
        ("price_in_past", DeadLetter),
        ("price_conflict", DeadLetter),
        ("price_in_invoiced_period", DeadLetter),
        ("price_not_forward", DeadLetter),
        ("already_registered", DeadLetter),
        ("unknown_invoice", DeadLetter),
        ("currency_mismatch", DeadLetter),
        ("credit_above_total", DeadLetter),
        ("reference_used", DeadLetter),
        ("unknown_gpu_model", Hold),
        ("over_capacity", DeadLetter),
        ("energy_over_bound", Hold),
        ("wrong_region", DeadLetter),
        ("unknown_gpu", DeadLetter),
        ("lease_overbooked", DeadLetter),
        ("lease_not_on_node", DeadLetter),
        ("outside_lease_term", DeadLetter),
    ];

    #[test]
    fn each_reason_is_retried_held_or_dead_lettered_as_the_table_says() {
        let mut held = Vec::new();
        for (code, want) in TABLE {
            let outcome: Outcome = serde_json::from_value(serde_json::json!(
                {"status": "rejected", "reason": code, "message": "m"}
            ))
            .unwrap_or_else(|e| panic!("{code}: {e}"));
            let Outcome::Rejected(r) = outcome else {
                panic!("{code}")
            };
            assert_eq!(r.reason.code(), code);
            assert_eq!(disposition(r.reason), want, "{code}");
            if want == Hold {
                held.push(r.reason);
                // Every held reason says what to fix.
                assert_ne!(hint(r.reason), hint(Reason::Malformed), "{code}");
            }
        }
        assert_eq!(held, HELD_REASONS, "one refusal counter per held reason");
    }

    /// An answer whose reason this agent does not know (a newer ledger's) is not an `Outcome`;
    /// [`apply_outcomes`] then dead-letters the record, as before there were dispositions.
    #[test]
    fn an_unknown_reason_is_not_read_as_a_known_one() {
        let o = serde_json::json!({"status": "rejected", "reason": "brand_new", "message": "m"});
        assert!(serde_json::from_value::<Outcome>(o).is_err());
    }
}
