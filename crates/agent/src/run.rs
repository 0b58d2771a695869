//! The agent: the measuring loop (collector → attribution → sign → spool) and the sender
//! thread, over one spool.
//!
//! Intervals are aligned to multiples of `interval_seconds` in Unix time, and contiguous while
//! the agent runs: each starts where the previous one ended. The first interval after a
//! start, a gap or a failed reading begins at that moment and ends at the next boundary.
//! What happens across a restart (docs/AGENT.md, "Restarts"):
//! - the end of the last spooled interval is the spool's cursor; the agent does not start an
//!   interval before it (if the clock is behind it, it waits), so nothing is counted twice;
//! - the time the agent was down is not recorded at all: no usage or energy is invented for it.

use super::attribution::{attribute, unleased_busy, EnergyMeter, Interval};
use super::collector::{self, Collector, Reading};
use super::config::AgentConfig;
use super::lease::{self, Lease};
use super::sender::{self, SenderConfig, Shared};
use super::spool::Spool;
use super::AgentError;
use ed25519_dalek::SigningKey;
use gpuledger_core::envelope::Envelope;
use gpuledger_core::keys;
use gpuledger_core::record::Body;
use gpuledger_core::time::Timestamp;
use gpuledger_shell::clock::monotonic_ms;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Prefix of the agent's spool cursor: `end:<unix seconds>`.
const CURSOR_PREFIX: &str = "end:";

/// A running producer (agent or market signer) and its sender.
pub struct Running {
    /// Shared with the threads: the spool, counters, stop flag.
    pub shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl Running {
    /// Starts `producer` and a sender over `spool`, reaching the ledger with `http`
    /// ([`super::tls::client`]).
    pub fn start(
        spool: Spool,
        sender_cfg: SenderConfig,
        http: ureq::Agent,
        name: &str,
        producer: impl FnOnce(Arc<Shared>) + Send + 'static,
    ) -> Result<Running, AgentError> {
        let shared = Shared::new(spool);
        let spawn_err = |e: std::io::Error| AgentError::Io {
            path: "thread".into(),
            source: e,
        };
        let s = shared.clone();
        let sender = std::thread::Builder::new()
            .name(format!("{name}-sender"))
            .spawn(move || sender::run(s, sender_cfg, http))
            .map_err(spawn_err)?;
        let s = shared.clone();
        let producer = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || producer(s))
            .map_err(spawn_err)?;
        Ok(Running {
            shared,
            threads: vec![producer, sender],
        })
    }

    /// Asks both threads to stop and waits for them.
    pub fn stop(self) {
        self.shared.request_stop();
        self.wait();
    }

    /// Waits for both threads (they run until stopped).
    pub fn wait(self) {
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// Options of an agent beyond its configuration.
#[derive(Clone, Copy, Default)]
pub struct AgentOptions {
    /// Print `spooled seq A-B interval START/END` on stdout after each fsynced append.
    pub print_spooled: bool,
}

/// Opens the spool and starts the agent's measuring and sending threads.
pub fn start_agent(
    mut cfg: AgentConfig,
    key: SigningKey,
    collector: Box<dyn Collector>,
    opts: AgentOptions,
) -> Result<Running, AgentError> {
    let (spool, sender_cfg, http) = open_signer(
        &cfg.server_url,
        &cfg.tls,
        &cfg.signer,
        cfg.origin.as_deref(),
        &cfg.spool_dir,
        &cfg.limits,
        |spool| {
            tracing::info!(
                signer = %cfg.signer,
                key_id = %keys::key_id(&key.verifying_key()),
                public_key = %keys::encode_public(&key.verifying_key()),
                pending = spool.pending(),
                next_seq = spool.next_seq(),
                "agent starting (register the public key with POST /v1/signers, role node)"
            )
        },
    )?;
    cfg.origin = Some(sender_cfg.origin.clone());
    let name = format!("agent-{}", cfg.node);
    Running::start(spool, sender_cfg, http, &name, move |shared| {
        let errors = shared.metrics.measurement_errors.clone();
        Measurer::new(cfg, key, collector, opts, errors).run(&shared)
    })
}

/// Builds a signer's HTTP client for the ledger (TLS as `tls` says, for `https://`; see
/// [`super::tls::client`]), opens its spool, says so through `announce` (before anything may
/// wait on the ledger), resolves the log it signs for (the pin, else the spool's, else the
/// ledger's; see [`super::origin::resolve`]) and builds its sender's settings. Shared by the
/// node agent and the market signer.
pub(crate) fn open_signer(
    server_url: &str,
    tls: &super::config::TlsConfig,
    signer: &str,
    pinned_origin: Option<&str>,
    spool_dir: &std::path::Path,
    limits: &super::config::Limits,
    announce: impl FnOnce(&Spool),
) -> Result<(Spool, SenderConfig, ureq::Agent), AgentError> {
    let http = super::tls::client(
        server_url,
        tls,
        Duration::from_secs(limits.request_timeout_seconds),
    )?;
    let spool = Spool::open(
        spool_dir,
        limits.max_spool_records,
        limits.compact_after_bytes,
    )?;
    announce(&spool);
    let origin = super::origin::resolve(&http, server_url, pinned_origin, spool_dir)?;
    let sender = SenderConfig::new(server_url, signer, &origin, limits);
    Ok((spool, sender, http))
}

/// The first aligned boundary strictly after `t`.
pub fn next_boundary(t: Timestamp, interval: i64) -> Timestamp {
    Timestamp::from_unix((t.unix().div_euclid(interval) + 1) * interval).unwrap_or(t)
}

/// A disagreement larger than this, in seconds, between the wall clock and the monotonic clock
/// over one wait is a step of the wall clock (an NTP step, a manual `date -s`, a VM resumed with
/// a wrong clock): reported, and the interval is recorded as the monotonic clock measured it.
pub const CLOCK_STEP_SECONDS: i64 = 5;

/// The wall clock, in milliseconds since the Unix epoch.
fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Sleeps `ms` milliseconds by the monotonic clock (which counts time suspended), or until
/// stop: a wall clock stepped back cannot stretch the wait, nor one stepped forward cut it.
fn sleep_monotonic(shared: &Shared, ms: i64) {
    let deadline = monotonic_ms() + ms.max(0) as u64;
    loop {
        let now = monotonic_ms();
        if now >= deadline || shared.stopping() {
            return;
        }
        shared.sleep(Duration::from_millis((deadline - now).min(1000)));
    }
}

struct Measurer {
    cfg: AgentConfig,
    key: SigningKey,
    collector: Box<dyn Collector>,
    opts: AgentOptions,
    leases: Vec<Lease>,
    meter: EnergyMeter,
    full: bool,
    /// Unleased GPUs running processes at the last warning (warned again only on a change).
    unleased_busy: Vec<(u32, u32)>,
    /// Whether the lease file was missing at the last read (warned again only on a change).
    lease_file_missing: Option<bool>,
    /// `gpuledger_agent_measurement_errors_total`.
    errors: metrics::Counter,
}

impl Measurer {
    fn new(
        cfg: AgentConfig,
        key: SigningKey,
        collector: Box<dyn Collector>,
        opts: AgentOptions,
        errors: metrics::Counter,
    ) -> Self {
        Measurer {
            cfg,
            key,
            collector,
            opts,
            leases: Vec::new(),
            meter: EnergyMeter::new(),
            full: false,
            unleased_busy: Vec::new(),
            lease_file_missing: None,
            errors,
        }
    }

    /// Logs each of `notes` as a warning of this node.
    fn warn(&self, notes: &[String]) {
        for n in notes {
            tracing::warn!(node = %self.cfg.node, "{n}");
        }
    }

    fn read(&mut self, at: Timestamp) -> Option<Reading> {
        match self.collector.read(at) {
            Ok(r) => {
                self.warn(&r.notes);
                Some(r)
            }
            Err(e) => {
                self.errors.increment(1);
                tracing::error!(node = %self.cfg.node, error = %e, "cannot read the GPUs; this interval is not recorded");
                None
            }
        }
    }

    fn reload_leases(&mut self) {
        let read = lease::read(&self.cfg.lease_file);
        let missing = matches!(read, Ok(None));
        if self.lease_file_missing != Some(missing) {
            if missing {
                tracing::warn!(
                    node = %self.cfg.node,
                    lease_file = %self.cfg.lease_file.display(),
                    "NO LEASE FILE: no GPU of this node is leased, so its GPU time is billed to nobody (energy is still recorded); create the file to bill tenants"
                );
            } else if self.lease_file_missing.is_some() {
                tracing::info!(node = %self.cfg.node, lease_file = %self.cfg.lease_file.display(), "lease file found");
            }
            self.lease_file_missing = Some(missing);
        }
        match read.map(Option::unwrap_or_default) {
            Ok(l) => {
                if l != self.leases {
                    tracing::info!(node = %self.cfg.node, leases = l.len(), "lease file read; it applies from this interval");
                    self.leases = l;
                }
            }
            Err(e) => tracing::error!(
                node = %self.cfg.node,
                error = %e,
                "lease file refused; the previous leases stay in force"
            ),
        }
    }

    /// Measures interval after interval until stop: each interval is waited for, read, and
    /// recorded (or skipped as a gap, or used as the energy baseline).
    fn run(mut self, shared: &Shared) {
        let interval = self.cfg.interval_seconds as i64;
        let last_end = last_recorded_end(shared);
        self.reload_leases();
        shared.metrics.interval.set(interval as f64);
        let mut at = self.resume(shared, last_end);
        while !shared.stopping() {
            if self.wait_for_wall_clock(shared, &mut at) {
                continue;
            }
            at.waiting_logged = false;
            let Some(waited) = self.wait_for_end(shared, &at, interval) else {
                break;
            };
            if waited.missed {
                self.skip_gap(&mut at, waited.now);
                continue;
            }
            shared
                .metrics
                .last_measurement
                .set(waited.now.unix() as f64);
            self.close(shared, &mut at, &waited);
        }
    }

    /// Where measuring starts: now, or the last recorded end when the clock is behind it (it
    /// stepped back; nothing is counted twice); the time the agent was down is not recorded.
    /// The reading taken then is the energy baseline.
    fn resume(&mut self, shared: &Shared, last_end: Option<Timestamp>) -> Position {
        let mut at = Position {
            start: Timestamp::now(),
            ahead_of_wall: false,
            baseline_needed: true,
            waiting_logged: false,
        };
        match last_end {
            Some(e) if at.start < e => {
                tracing::warn!(node = %self.cfg.node, last_end = %e, now = %at.start, "the clock is behind the last recorded interval (it stepped back); measuring goes on from that interval by the monotonic clock until the clock catches up");
                shared.metrics.clock_steps.increment(1);
                at.start = e;
                at.ahead_of_wall = true;
            }
            Some(e) if e < at.start => {
                tracing::info!(from = %e, to = %at.start, "not recording the time the agent was down");
            }
            _ => {}
        }
        if let Some(r) = self.read(at.start) {
            self.meter.baseline(&r.gpus);
            at.baseline_needed = false;
        }
        at
    }

    /// Behind the last recorded end, and the ledger's clock agrees with this one: the wall
    /// clock is right and the recorded times were ahead (a clock corrected back). Following
    /// the monotonic clock would keep every record ahead for good, refused `in_future`; so
    /// this waits (a second at a time) until the clock reaches the last end (logged, and
    /// GpuledgerAgentNotMeasuring fires if that is long). When the ledger disagrees, this
    /// clock is the wrong one: intervals follow the monotonic clock. `true` while waiting.
    fn wait_for_wall_clock(&self, shared: &Shared, at: &mut Position) -> bool {
        let ledger_agrees = || {
            let skew = shared.clock_skew.load(std::sync::atomic::Ordering::Relaxed);
            skew.abs() <= sender::CLOCK_SKEW_TOLERANCE_SECONDS
        };
        if !(at.ahead_of_wall && Timestamp::now() < at.start && ledger_agrees()) {
            return false;
        }
        if !at.waiting_logged {
            tracing::error!(node = %self.cfg.node, last_end = %at.start, now = %Timestamp::now(), "the clock is behind the last recorded interval and agrees with the ledger's: the recorded times were ahead; measuring waits until the clock reaches the last recorded end");
            at.waiting_logged = true;
        }
        shared.sleep(Duration::from_secs(1));
        if Timestamp::now() >= at.start {
            at.ahead_of_wall = false;
            at.baseline_needed = true;
            at.start = Timestamp::now();
        }
        true
    }

    /// Waits for the end of the interval from `at.start` (the next boundary; an interval
    /// later by the monotonic clock while the wall clock is behind), and says how both clocks
    /// saw the wait, warning of a step of the wall clock. `None` on stop.
    fn wait_for_end(&self, shared: &Shared, at: &Position, interval: i64) -> Option<Waited> {
        let end = if at.ahead_of_wall {
            at.start.plus(interval)
        } else {
            next_boundary(at.start, interval)
        };
        let (wall0, mono0) = (wall_ms(), monotonic_ms());
        let wait = if at.ahead_of_wall {
            interval * 1000
        } else {
            // Just after the boundary's second turns.
            end.unix() * 1000 - wall0 + 5
        };
        sleep_monotonic(shared, wait);
        if shared.stopping() {
            return None;
        }
        let (wall1, mono1) = (wall_ms(), monotonic_ms());
        let elapsed = (mono1 - mono0) as i64;
        let step = ((wall1 - wall0) - elapsed) / 1000;
        let now = Timestamp::from_unix(wall1.div_euclid(1000)).unwrap_or(end);
        if step.abs() > CLOCK_STEP_SECONDS {
            shared.metrics.clock_steps.increment(1);
            tracing::warn!(node = %self.cfg.node, step_seconds = step, from = %at.start, to = %end, now = %now, "the wall clock stepped against the monotonic clock; the interval is recorded as the monotonic clock measured it");
        }
        Some(Waited {
            end,
            now,
            step,
            missed: elapsed >= wait + interval * 1000,
        })
    }

    /// Suspended or stalled past a whole interval: a gap, not an invented interval. Measuring
    /// starts again `now`, from a new baseline.
    fn skip_gap(&mut self, at: &mut Position, now: Timestamp) {
        tracing::warn!(from = %at.start, to = %now, "missed interval boundaries; this time is not recorded");
        at.start = now;
        at.ahead_of_wall = false;
        at.baseline_needed = true;
        if let Some(r) = self.read(now) {
            self.meter.baseline(&r.gpus);
            at.baseline_needed = false;
        }
    }

    /// Reads the GPUs at the end of the interval `waited` closed and records it (or takes the
    /// reading as the baseline), then moves `at` to the next interval's start.
    fn close(&mut self, shared: &Shared, at: &mut Position, waited: &Waited) {
        let Some(reading) = self.read(waited.end) else {
            at.baseline_needed = true;
            at.start = waited.end;
            return;
        };
        if at.baseline_needed {
            self.meter.baseline(&reading.gpus);
            at.baseline_needed = false;
        } else {
            self.reload_leases();
            self.record(shared, at.start, waited.end, &reading);
        }
        at.start = waited.end;
        if waited.step > CLOCK_STEP_SECONDS && waited.now > waited.end {
            // Stepped forward: the time between did not pass; the next interval starts now.
            at.start = waited.now;
        }
        let behind = waited.now < at.start;
        if behind && !at.ahead_of_wall {
            tracing::warn!(node = %self.cfg.node, clock = %waited.now, last_end = %at.start, "the wall clock is behind the last recorded interval; intervals follow the monotonic clock until it catches up");
        } else if !behind && at.ahead_of_wall {
            tracing::info!(node = %self.cfg.node, "the wall clock has caught up; intervals are aligned to it again");
        }
        at.ahead_of_wall = behind;
    }

    /// Attributes, signs and spools the interval from `start` to `end` that `reading` closes,
    /// unless the spool is full.
    fn record(&mut self, shared: &Shared, start: Timestamp, end: Timestamp, reading: &Reading) {
        let bodies = self.bodies(start, end, reading);
        let mut spool = shared.spool.lock().expect("spool lock");
        if !self.has_room(shared, &spool, bodies.len() as u64, start) {
            return;
        }
        let first = spool.next_seq();
        let envelopes = self.sign(&bodies, first);
        match spool.append(&envelopes, &format!("{CURSOR_PREFIX}{}", end.unix())) {
            Ok(()) => {
                debug_assert_eq!(
                    spool.next_seq(),
                    first + envelopes.len() as u64,
                    "one seq per record, in order"
                );
                drop(spool);
                self.spooled(shared, first, envelopes.len() as u64, start, end);
            }
            Err(e) => {
                self.errors.increment(1);
                tracing::error!(node = %self.cfg.node, error = %e, "cannot write the spool; this interval is not recorded")
            }
        }
    }

    /// The record bodies of the interval: its energy from the meter, attributed to the leases;
    /// warns of the notes, and of GPUs no lease covers that run processes (on a change).
    fn bodies(&mut self, start: Timestamp, end: Timestamp, reading: &Reading) -> Vec<Body> {
        let (kwh, notes) = self
            .meter
            .interval_kwh(&reading.gpus, start.seconds_until(end));
        self.warn(&notes);
        let (bodies, notes) = attribute(&Interval {
            region: &self.cfg.region,
            node: &self.cfg.node,
            start,
            end,
            gpus: &reading.gpus,
            leases: &self.leases,
            kwh,
        });
        self.warn(&notes);
        let busy = unleased_busy(&reading.gpus, &self.leases);
        if busy != self.unleased_busy {
            for (gpu, processes) in &busy {
                tracing::warn!(node = %self.cfg.node, gpu, processes, "a GPU that no lease covers runs compute processes; nobody is billed for it");
            }
            self.unleased_busy = busy;
        }
        bodies
    }

    /// Whether `n` more records fit in `spool`; says so when measuring stops because it is
    /// full (from the interval at `start`), and when it resumes.
    fn has_room(&mut self, shared: &Shared, spool: &Spool, n: u64, start: Timestamp) -> bool {
        if !spool.has_room_for(n) {
            if !self.full {
                tracing::error!(
                    node = %self.cfg.node,
                    pending = spool.pending(),
                    limit = spool.max_pending(),
                    "SPOOL FULL: measuring stopped until the ledger acknowledges records; nothing is dropped, and the time until then is not recorded"
                );
                self.full = true;
                shared.metrics.spool_full.set(1.0);
            }
            return false;
        }
        if self.full {
            tracing::warn!(node = %self.cfg.node, from = %start, "spool has room again; measuring resumes");
            self.full = false;
            shared.metrics.spool_full.set(0.0);
        }
        true
    }

    /// Signs `bodies` as records of consecutive seqs from `first`.
    fn sign(&self, bodies: &[Body], first: u64) -> Vec<Envelope> {
        bodies
            .iter()
            .enumerate()
            .map(|(i, b)| {
                Envelope::sign(
                    self.cfg.origin.as_deref().expect("resolved at start-up"),
                    b.kind(),
                    &self.cfg.signer,
                    &self.key,
                    first + i as u64,
                    b,
                )
            })
            .collect()
    }

    /// After `count` records from seq `first` were fsynced: wakes the sender, counts them,
    /// and prints `spooled seq A-B interval START/END` when asked to.
    fn spooled(&self, shared: &Shared, first: u64, count: u64, start: Timestamp, end: Timestamp) {
        shared.wake.notify_all();
        shared.metrics.records_spooled.increment(count);
        if self.opts.print_spooled && count > 0 {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let _ = writeln!(
                out,
                "spooled seq {first}-{} interval {start}/{end}",
                first + count - 1
            );
            let _ = out.flush();
        }
    }
}

/// The end of the last interval in the spool, from its cursor (`end:<unix seconds>`).
fn last_recorded_end(shared: &Shared) -> Option<Timestamp> {
    shared
        .spool
        .lock()
        .expect("spool lock")
        .last_cursor()
        .and_then(|c| c.strip_prefix(CURSOR_PREFIX)?.parse::<i64>().ok())
        .and_then(Timestamp::from_unix)
}

/// Where the measuring loop stands between two intervals.
struct Position {
    /// The start of the next interval.
    start: Timestamp,
    /// The wall clock is behind `start` (it went back, before this start or during a wait):
    /// intervals follow the monotonic clock from the last recorded end until the wall clock
    /// has caught up, so measuring never waits silently, and no interval overlaps one already
    /// signed.
    ahead_of_wall: bool,
    /// The next reading only sets the energy baseline (after a start, a gap or a failed
    /// reading).
    baseline_needed: bool,
    /// The wait for the wall clock to reach `start` was logged.
    waiting_logged: bool,
}

/// One wait for an interval's end, as the two clocks saw it.
struct Waited {
    /// The interval's end.
    end: Timestamp,
    /// The wall clock when the wait ended.
    now: Timestamp,
    /// The wall clock's step against the monotonic clock over the wait, in whole seconds.
    step: i64,
    /// The wait overran by a whole interval or more (suspended or stalled).
    missed: bool,
}

/// `gpuledger agent --config FILE [--metrics-listen ADDR] [--ca-file PEM] [--pin-sha256 HEX]`:
/// reads the configuration and the key (refused unless 0600), starts (with the metrics
/// listener when `metrics_listen`, the flag over the file's key, names an address; with the
/// TLS settings of `tls_flags` over the file's `[tls]`), and runs until the process is stopped.
pub fn run_from_config(
    path: &std::path::Path,
    metrics_listen: Option<std::net::SocketAddr>,
    tls_flags: super::config::TlsConfig,
) -> Result<(), AgentError> {
    let mut cfg = AgentConfig::read(path)?;
    cfg.tls = cfg.tls.overridden_by(tls_flags);
    let key = gpuledger_shell::keyfile::read(&cfg.key_file)?;
    let collector = collector::from_config(&cfg.collector)?;
    let metrics_listen = metrics_listen.or(cfg.metrics_listen);
    let spool_dir = cfg.spool_dir.clone();
    let running = start_agent(
        cfg,
        key,
        collector,
        AgentOptions {
            print_spooled: true,
        },
    )?;
    let _listener = match metrics_listen {
        Some(addr) => {
            let server = super::metrics::serve(addr, running.shared.clone(), spool_dir)?;
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "metrics listening on http://{}", server.addr());
            let _ = out.flush();
            tracing::info!(addr = %server.addr(), "serving the agent's metrics at /metrics");
            Some(server)
        }
        None => None,
    };
    running.wait();
    Ok(())
}
