//! `gpuledger bench agent`: the node agent's two speed figures (issue #4).
//!
//! 1. **Spool drain**: a spool holding N signed records (a backlog after an outage) is
//!    delivered by the agent's sender into a local server, started by the benchmark as a child
//!    process (`gpuledger serve` on a fresh SQLite file). Reports records/s and the drain time.
//! 2. **Steady state**: a `gpuledger agent` child with the simulated collector (8 GPUs by
//!    default, 10-second intervals) runs against that server for a while; the benchmark reads
//!    the child's CPU time (utime + stime in `/proc/<pid>/stat`) and peak resident set
//!    (`VmHWM` in `/proc/<pid>/status`). A child process is measured alone, without the
//!    benchmark's or the server's memory and threads. Linux only (it reads `/proc`).

use super::round;
use super::server::{mb, Children};
use gpuledger::agent::config::{DEFAULT_MAX_BATCH, MAX_BATCH};
use gpuledger::agent::sender::{self, SenderConfig, Shared};
use gpuledger::agent::spool::Spool;
use gpuledger::core::envelope::Envelope;
use gpuledger::core::time::Timestamp;
use gpuledger::sample;
use gpuledger::store::{self, Ledger};
use rayon::prelude::*;
use rust_decimal::Decimal;
use serde::Serialize;
use std::io::BufRead;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Records signed and appended to the spool per fsynced append while filling it.
const FILL_CHUNK: usize = 1_000;
/// Longest drain the benchmark waits for.
const MAX_DRAIN: Duration = Duration::from_secs(3 * 3_600);

/// Settings.
#[derive(Debug, Clone)]
pub struct AgentBench {
    /// Records in the spool to drain (0 skips the drain phase).
    pub records: u64,
    /// Records per POST while draining (the agent's `max_batch`).
    pub batch: usize,
    /// Length of the steady-state phase (0 skips it).
    pub seconds: u64,
    /// Simulated GPUs of the steady-state agent.
    pub gpus: u32,
    /// Its measurement interval.
    pub interval_seconds: u64,
}

impl Default for AgentBench {
    fn default() -> Self {
        AgentBench {
            records: 1_000_000,
            batch: DEFAULT_MAX_BATCH,
            seconds: 60,
            gpus: 8,
            interval_seconds: 10,
        }
    }
}

/// Spool-drain figures.
#[derive(Debug, Clone, Serialize)]
pub struct DrainResult {
    pub records: u64,
    pub batch: usize,
    /// Size of the spool file before draining.
    pub spool_mb: f64,
    /// Signing and fsynced appends of the backlog (not part of the drain).
    pub fill_seconds: f64,
    pub drain_seconds: f64,
    pub records_per_s: f64,
    /// Records acknowledged as accepted or duplicate (must equal `records`).
    pub delivered: u64,
    /// Records refused for good (must be 0).
    pub dead_lettered: u64,
}

/// Steady-state figures of the agent child.
#[derive(Debug, Clone, Serialize)]
pub struct SteadyResult {
    pub gpus: u32,
    pub interval_seconds: u64,
    /// Wall time measured, from the first spooled interval to the end.
    pub seconds: f64,
    /// Intervals spooled within that time.
    pub intervals: u64,
    /// CPU time (user + system) of the agent within that time.
    pub cpu_seconds: f64,
    /// `cpu_seconds / seconds`, in % of one core.
    pub cpu_percent_of_one_core: f64,
    /// CPU time from process start to the end, start-up included.
    pub cpu_seconds_total: f64,
    /// Peak resident set (VmHWM) of the agent process.
    pub peak_rss_mb: f64,
    /// Resident set (VmRSS) at the end.
    pub rss_mb: f64,
}

/// Results.
#[derive(Debug, Clone, Serialize)]
pub struct AgentBenchResult {
    pub drain: Option<DrainResult>,
    pub steady: Option<SteadyResult>,
    /// Peak resident set of the server child.
    pub server_peak_rss_mb: Option<f64>,
}

/// Errors of the benchmark.
#[derive(Debug, thiserror::Error)]
pub enum AgentBenchError {
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error(transparent)]
    Agent(#[from] gpuledger::agent::AgentError),
    #[error(transparent)]
    Spool(#[from] gpuledger::agent::spool::SpoolError),
}

fn setup_err(what: &str) -> impl FnOnce(std::io::Error) -> AgentBenchError + '_ {
    move |e| AgentBenchError::Setup(format!("{what}: {e}"))
}

/// Clock ticks per second of `/proc/<pid>/stat` (USER_HZ).
fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime + stime of `pid`, in seconds.
fn cpu_seconds(pid: u32, ticks: f64) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: split after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat are at 11 and 12 after the name and state.
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / ticks)
}

/// Initialises a fresh SQLite ledger in `dir`, registers `nodes`, and starts `gpuledger serve`
/// on it; returns the child and the base URL.
fn start_server(dir: &Path, nodes: &[&str]) -> Result<(Child, String), AgentBenchError> {
    let url = format!("sqlite://{}", dir.join("ledger.db").display());
    let key_path = dir.join("log.key");
    let (key, _) = gpuledger::keyfile::read_or_create(&key_path)
        .map_err(|e| AgentBenchError::Setup(e.to_string()))?;
    store::init(&url, &key, sample::ORIGIN)?;
    let ledger = Ledger::open(&url, key)?;
    let nodes: Vec<_> = nodes
        .iter()
        .map(|n| (n.to_string(), sample::key(n)))
        .collect();
    super::register_nodes(&ledger, &nodes)?;
    // The drained spool's records name the sample lease, on the first node; the steady
    // agent's lease file names `lease-bench`, the second node whole.
    super::register_sample_parties(
        &ledger,
        "bench-tenant",
        &nodes[..1]
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>(),
    )?;
    let steady: Vec<&str> = nodes[1..].iter().map(|(n, _)| n.as_str()).collect();
    ledger.append_ledger_entry(gpuledger::sample::lease_on(
        "lease-bench",
        "bench-tenant",
        &steady,
        sample::NODE_GPUS,
    ))?;
    drop(ledger);
    super::server::spawn_serve(&url, &key_path).map_err(AgentBenchError::Setup)
}

/// Signs `records` records as one bare-metal agent would (per 10-second interval a
/// `gpu_usage` and an `energy` record, intervals ending before now) and appends them to a
/// spool in fsynced chunks.
fn fill_spool(dir: &Path, node: &str, records: u64) -> Result<Spool, AgentBenchError> {
    let mut spool = Spool::open(
        dir,
        records.max(1),
        gpuledger::agent::config::DEFAULT_COMPACT_AFTER_BYTES,
    )?;
    let key = sample::key(node);
    let intervals = records.div_ceil(2) as i64;
    let first_end = Timestamp::now().plus(-10 * intervals - 60);
    let mut seq = 1u64;
    while seq <= records {
        let n = (records - seq + 1).min(FILL_CHUNK as u64);
        let envs: Vec<Envelope> = (seq..seq + n)
            .into_par_iter()
            .map(|q| {
                let end = first_end.plus(10 * ((q - 1) / 2) as i64);
                if q % 2 == 1 {
                    sample::usage(node, &key, q, "bench-tenant", Decimal::from(8), end)
                } else {
                    sample::energy(
                        node,
                        &key,
                        q,
                        Some("bench-tenant"),
                        Decimal::new(19_440, 6),
                        end,
                    )
                }
            })
            .collect();
        spool.append(&envs, &format!("end:{}", first_end.unix()))?;
        seq += n;
    }
    Ok(spool)
}

fn drain_phase(
    cfg: &AgentBench,
    dir: &Path,
    base: &str,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<DrainResult, AgentBenchError> {
    let node = "bench-drain-node";
    let spool_dir = dir.join("drain-spool");
    progress(&format!("signing and spooling {} records", cfg.records));
    let t = Instant::now();
    let spool = fill_spool(&spool_dir, node, cfg.records)?;
    let fill_seconds = t.elapsed().as_secs_f64();
    let spool_bytes: u64 = std::fs::read_dir(&spool_dir)
        .map_err(setup_err("spool dir"))?
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    progress(&format!(
        "draining {} records ({:.0} MB) into the server",
        cfg.records,
        spool_bytes as f64 / 1e6
    ));
    let shared = Shared::new(spool);
    let t = Instant::now();
    let left = sender::drain(
        &shared,
        SenderConfig {
            server_url: base.to_owned(),
            max_batch: cfg.batch,
            max_backoff: Duration::from_secs(5),
            request_timeout: Duration::from_secs(60),
            signer: node.into(),
            origin: gpuledger::sample::ORIGIN.into(),
        },
        MAX_DRAIN,
    );
    let drain_seconds = t.elapsed().as_secs_f64();
    if left > 0 {
        return Err(AgentBenchError::Setup(format!(
            "{left} records still pending after {drain_seconds:.0} s"
        )));
    }
    Ok(DrainResult {
        records: cfg.records,
        batch: cfg.batch,
        spool_mb: round(spool_bytes as f64 / 1_048_576.0, 1),
        fill_seconds: round(fill_seconds, 2),
        drain_seconds: round(drain_seconds, 2),
        records_per_s: (cfg.records as f64 / drain_seconds).round(),
        delivered: shared.delivered.load(Ordering::SeqCst),
        dead_lettered: shared.dead_lettered.load(Ordering::SeqCst),
    })
}

/// The steady-state phase: a `gpuledger agent` child against the server at `base`, measured
/// from its first spooled interval for `cfg.seconds`.
fn steady_phase(
    cfg: &AgentBench,
    dir: &Path,
    base: &str,
    kids: &mut Children,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<SteadyResult, AgentBenchError> {
    let node = "bench-steady-node";
    let d = dir.join("steady");
    write_agent_files(cfg, &d, node, base)?;
    let exe = std::env::current_exe().map_err(setup_err("current exe"))?;
    let mut child = Command::new(exe)
        .args(["agent", "--config"])
        .arg(d.join("agent.toml"))
        .env("GPULEDGER_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(setup_err("cannot start the agent"))?;
    let pid = child.id();
    let out = child.stdout.take().expect("piped");
    kids.kids.push(child);
    let spooled = SpooledLines::count(out);
    progress(&format!(
        "agent running ({} simulated GPUs, {} s interval); waiting for its first interval",
        cfg.gpus, cfg.interval_seconds
    ));
    spooled
        .first
        .recv_timeout(Duration::from_secs(2 * cfg.interval_seconds + 30))
        .map_err(|_| AgentBenchError::Setup("the agent spooled no interval".into()))?;
    measure_agent(cfg, pid, &spooled.count, progress)
}

/// Writes the steady-state agent's directory `d`: its key, a lease file leasing the whole node
/// to the bench tenant, and its `agent.toml` (simulated H100s, spool in `d/spool`).
fn write_agent_files(
    cfg: &AgentBench,
    d: &Path,
    node: &str,
    base: &str,
) -> Result<(), AgentBenchError> {
    std::fs::create_dir_all(d).map_err(setup_err("agent dir"))?;
    gpuledger::keyfile::write_new(&d.join("node.key"), &sample::key(node))
        .map_err(|e| AgentBenchError::Setup(e.to_string()))?;
    std::fs::write(
        d.join("leases.toml"),
        "[[lease]]\nid = \"lease-bench\"\ntenant = \"bench-tenant\"\nwhole_node = true\n",
    )
    .map_err(setup_err("lease file"))?;
    let gpus = format!(
        "[{{ model = \"H100-SXM-80G\", count = {}, idle_watts = 70, max_watts = 700 }}]",
        cfg.gpus
    );
    std::fs::write(
        d.join("agent.toml"),
        format!(
            "signer = \"{node}\"\nkey_file = \"node.key\"\nserver_url = \"{base}\"\n\
             interval_seconds = {}\nregion = \"cn-north-imx\"\nnode = \"{node}\"\n\
             lease_file = \"leases.toml\"\nspool_dir = \"spool\"\n\n[collector]\n\
             kind = \"simulated\"\nseed = 1\nload = \"training\"\n\
             gpus = {gpus}\n",
            cfg.interval_seconds
        ),
    )
    .map_err(setup_err("agent.toml"))
}

/// The agent's "spooled seq …" lines, counted by a thread reading its standard output.
struct SpooledLines {
    count: Arc<AtomicU64>,
    /// Receives once, when the first line arrives.
    first: Receiver<()>,
}

impl SpooledLines {
    fn count(out: ChildStdout) -> SpooledLines {
        let count = Arc::new(AtomicU64::new(0));
        let (first_tx, first) = std::sync::mpsc::channel::<()>();
        let s = count.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if line.starts_with("spooled seq") && s.fetch_add(1, Ordering::SeqCst) == 0 {
                    let _ = first_tx.send(());
                }
            }
        });
        SpooledLines { count, first }
    }
}

/// The timed part of the steady state: the agent `pid`'s CPU time and the intervals it spooled
/// (`spooled`) over `cfg.seconds`, then its memory.
fn measure_agent(
    cfg: &AgentBench,
    pid: u32,
    spooled: &AtomicU64,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<SteadyResult, AgentBenchError> {
    let ticks = clock_ticks();
    let cpu0 = cpu_seconds(pid, ticks)
        .ok_or_else(|| AgentBenchError::Setup("cannot read /proc/<pid>/stat".into()))?;
    let n0 = spooled.load(Ordering::SeqCst);
    let t0 = Instant::now();
    progress(&format!("measuring for {} s", cfg.seconds));
    std::thread::sleep(Duration::from_secs(cfg.seconds));
    let seconds = t0.elapsed().as_secs_f64();
    let cpu1 = cpu_seconds(pid, ticks)
        .ok_or_else(|| AgentBenchError::Setup("the agent ended early".into()))?;
    let peak = super::server::status_kb(pid, "VmHWM:").unwrap_or(0.0);
    let rss = super::server::status_kb(pid, "VmRSS:").unwrap_or(0.0);
    let cpu = cpu1 - cpu0;
    Ok(SteadyResult {
        gpus: cfg.gpus,
        interval_seconds: cfg.interval_seconds,
        seconds: round(seconds, 1),
        intervals: spooled.load(Ordering::SeqCst) - n0,
        cpu_seconds: round(cpu, 2),
        cpu_percent_of_one_core: round(100.0 * cpu / seconds, 3),
        cpu_seconds_total: round(cpu1, 2),
        peak_rss_mb: mb(peak),
        rss_mb: mb(rss),
    })
}

/// Runs the benchmark; `progress` receives phase names.
pub fn run_agent_bench(
    cfg: &AgentBench,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<AgentBenchResult, AgentBenchError> {
    if !(1..=MAX_BATCH).contains(&cfg.batch) {
        return Err(AgentBenchError::Setup(format!(
            "--batch must be 1 to {MAX_BATCH}"
        )));
    }
    if cfg.gpus == 0 || cfg.gpus > 1024 || !(1..=3_600).contains(&cfg.interval_seconds) {
        return Err(AgentBenchError::Setup(
            "--gpus must be 1 to 1024 and --interval-seconds 1 to 3600".into(),
        ));
    }
    let dir = std::env::temp_dir().join(format!("gpuledger-agent-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(setup_err("temporary directory"))?;
    let mut kids = Children {
        kids: Vec::new(),
        dir: dir.clone(),
    };
    progress("starting a server on a fresh SQLite file");
    let (server, base) = start_server(&dir, &["bench-drain-node", "bench-steady-node"])?;
    let server_pid = server.id();
    kids.kids.push(server);
    let drain = if cfg.records > 0 {
        Some(drain_phase(cfg, &dir, &base, progress)?)
    } else {
        None
    };
    let steady = if cfg.seconds > 0 {
        Some(steady_phase(cfg, &dir, &base, &mut kids, progress)?)
    } else {
        None
    };
    Ok(AgentBenchResult {
        drain,
        steady,
        server_peak_rss_mb: super::server::peak_rss_mb(server_pid),
    })
}

impl std::fmt::Display for AgentBenchResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(d) = &self.drain {
            writeln!(
                f,
                "spool drain:            {} records ({} MB spool, batches of {}) in {} s",
                d.records, d.spool_mb, d.batch, d.drain_seconds
            )?;
            writeln!(
                f,
                "drain rate:             {:.0} records/s",
                d.records_per_s
            )?;
            writeln!(
                f,
                "delivered / dead:       {} / {} (spool filled in {} s, not counted)",
                d.delivered, d.dead_lettered, d.fill_seconds
            )?;
        }
        if let Some(s) = &self.steady {
            writeln!(
                f,
                "steady agent:           {} GPUs, {} s interval, {} intervals in {} s",
                s.gpus, s.interval_seconds, s.intervals, s.seconds
            )?;
            writeln!(
                f,
                "agent CPU:              {} s = {:.3} % of one core ({} s since start)",
                s.cpu_seconds, s.cpu_percent_of_one_core, s.cpu_seconds_total
            )?;
            writeln!(
                f,
                "agent RSS:              peak {} MB, now {} MB",
                s.peak_rss_mb, s.rss_mb
            )?;
        }
        if let Some(m) = self.server_peak_rss_mb {
            writeln!(f, "server peak RSS:        {m} MB")?;
        }
        Ok(())
    }
}
