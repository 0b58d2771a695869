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

    fn read(&mut self, at: Timestamp) -> Option<Reading> {
        match self.collector.read(at) {
            Ok(r) => {
                for n in &r.notes {
                    tracing::warn!(node = %self.cfg.node, "{n}");
                }
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

    fn run(mut self, shared: &Shared) {
        let interval = self.cfg.interval_seconds as i64;
        let last_end = shared
            .spool
            .lock()
            .expect("spool lock")
            .last_cursor()
            .and_then(|c| c.strip_prefix(CURSOR_PREFIX)?.parse::<i64>().ok())
            .and_then(Timestamp::from_unix);
        self.reload_leases();
        shared.metrics.interval.set(interval as f64);
        let mut start = Timestamp::now();
        // After the wall clock went back (before this start, or during a wait), intervals follow
        // the monotonic clock from the last recorded end until the wall clock has caught up:
        // measuring never waits silently, and no interval overlaps one already signed.
        let mut ahead_of_wall = false;
        match last_end {
            Some(e) if start < e => {
                tracing::warn!(node = %self.cfg.node, last_end = %e, now = %start, "the clock is behind the last recorded interval (it stepped back); measuring goes on from that interval by the monotonic clock until the clock catches up");
                shared.metrics.clock_steps.increment(1);
                start = e;
                ahead_of_wall = true;
            }
            Some(e) if e < start => {
                tracing::info!(from = %e, to = %start, "not recording the time the agent was down");
            }
            _ => {}
        }
        let mut baseline_needed = match self.read(start) {
            Some(r) => {
                self.meter.baseline(&r.gpus);
                false
            }
            None => true,
        };
        let mut waiting_logged = false;
        while !shared.stopping() {
            // Behind the last recorded end, and the ledger's clock agrees with this one: the
            // wall clock is right and the recorded times were ahead (a clock corrected back).
            // Following the monotonic clock would keep every record ahead for good, refused
            // `in_future`; so wait until the clock reaches the last end (logged, and
            // GpuledgerAgentNotMeasuring fires if that is long). When the ledger disagrees,
            // this clock is the wrong one: follow the monotonic clock.
            if ahead_of_wall
                && Timestamp::now() < start
                && shared
                    .clock_skew
                    .load(std::sync::atomic::Ordering::Relaxed)
                    .abs()
                    <= sender::CLOCK_SKEW_TOLERANCE_SECONDS
            {
                if !waiting_logged {
                    tracing::error!(node = %self.cfg.node, last_end = %start, now = %Timestamp::now(), "the clock is behind the last recorded interval and agrees with the ledger's: the recorded times were ahead; measuring waits until the clock reaches the last recorded end");
                    waiting_logged = true;
                }
                shared.sleep(Duration::from_secs(1));
                if Timestamp::now() >= start {
                    ahead_of_wall = false;
                    baseline_needed = true;
                    start = Timestamp::now();
                }
                continue;
            }
            waiting_logged = false;
            let end = if ahead_of_wall {
                start.plus(interval)
            } else {
                next_boundary(start, interval)
            };
            let (wall0, mono0) = (wall_ms(), monotonic_ms());
            let wait = if ahead_of_wall {
                interval * 1000
            } else {
                // Just after the boundary's second turns.
                end.unix() * 1000 - wall0 + 5
            };
            sleep_monotonic(shared, wait);
            if shared.stopping() {
                break;
            }
            let (wall1, mono1) = (wall_ms(), monotonic_ms());
            let elapsed = (mono1 - mono0) as i64;
            let step = ((wall1 - wall0) - elapsed) / 1000;
            let now = Timestamp::from_unix(wall1.div_euclid(1000)).unwrap_or(end);
            if step.abs() > CLOCK_STEP_SECONDS {
                shared.metrics.clock_steps.increment(1);
                tracing::warn!(node = %self.cfg.node, step_seconds = step, from = %start, to = %end, now = %now, "the wall clock stepped against the monotonic clock; the interval is recorded as the monotonic clock measured it");
            }
            if elapsed >= wait + interval * 1000 {
                // Suspended or stalled past a whole interval: a gap, not an invented interval.
                tracing::warn!(from = %start, to = %now, "missed interval boundaries; this time is not recorded");
                start = now;
                ahead_of_wall = false;
                baseline_needed = true;
                if let Some(r) = self.read(now) {
                    self.meter.baseline(&r.gpus);
                    baseline_needed = false;
                }
                continue;
            }
            shared.metrics.last_measurement.set(now.unix() as f64);
            let Some(reading) = self.read(end) else {
                baseline_needed = true;
                start = end;
                continue;
            };
            if baseline_needed {
                self.meter.baseline(&reading.gpus);
                baseline_needed = false;
            } else {
                self.reload_leases();
                self.record(shared, start, end, &reading);
            }
            start = end;
            if step > CLOCK_STEP_SECONDS && now > end {
                // Stepped forward: the time between did not pass; the next interval starts now.
                start = now;
            }
            let behind = now < start;
            if behind && !ahead_of_wall {
                tracing::warn!(node = %self.cfg.node, clock = %now, last_end = %start, "the wall clock is behind the last recorded interval; intervals follow the monotonic clock until it catches up");
            } else if !behind && ahead_of_wall {
                tracing::info!(node = %self.cfg.node, "the wall clock has caught up; intervals are aligned to it again");
            }
            ahead_of_wall = behind;
        }
    }

    fn record(&mut self, shared: &Shared, start: Timestamp, end: Timestamp, reading: &Reading) {
        let (kwh, notes) = self
            .meter
            .interval_kwh(&reading.gpus, start.seconds_until(end));
        for n in notes {
            tracing::warn!(node = %self.cfg.node, "{n}");
        }
        let (bodies, notes) = attribute(&Interval {
            region: &self.cfg.region,
            node: &self.cfg.node,
            start,
            end,
            gpus: &reading.gpus,
            leases: &self.leases,
            kwh,
        });
        for n in notes {
            tracing::warn!(node = %self.cfg.node, "{n}");
        }
        let busy = unleased_busy(&reading.gpus, &self.leases);
        if busy != self.unleased_busy {
            for (gpu, processes) in &busy {
                tracing::warn!(node = %self.cfg.node, gpu, processes, "a GPU that no lease covers runs compute processes; nobody is billed for it");
            }
            self.unleased_busy = busy;
        }
        let mut spool = shared.spool.lock().expect("spool lock");
        if !spool.has_room_for(bodies.len() as u64) {
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
            return;
        }
        if self.full {
            tracing::warn!(node = %self.cfg.node, from = %start, "spool has room again; measuring resumes");
            self.full = false;
            shared.metrics.spool_full.set(0.0);
        }
        let first = spool.next_seq();
        let envelopes: Vec<Envelope> = bodies
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
            .collect();
        match spool.append(&envelopes, &format!("{CURSOR_PREFIX}{}", end.unix())) {
            Ok(()) => {
                drop(spool);
                shared.wake.notify_all();
                shared
                    .metrics
                    .records_spooled
                    .increment(envelopes.len() as u64);
                if self.opts.print_spooled && !envelopes.is_empty() {
                    use std::io::Write;
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(
                        out,
                        "spooled seq {first}-{} interval {start}/{end}",
                        first + envelopes.len() as u64 - 1
                    );
                    let _ = out.flush();
                }
            }
            Err(e) => {
                self.errors.increment(1);
                tracing::error!(node = %self.cfg.node, error = %e, "cannot write the spool; this interval is not recorded")
            }
        }
    }
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
