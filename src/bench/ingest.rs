//! `gpuledger bench ingest`: M concurrent simulated agents post pre-signed batches over HTTP.
//! Reports accepted records/s, p50/p99 batch latency and, when it started the server itself,
//! the server's peak resident memory.

use super::round;
use super::server::{peak_rss_mb, Children};
use ed25519_dalek::SigningKey;
use gpuledger::core::keys;
use gpuledger::core::limits::MAX_LEASE_NODES;
use gpuledger::core::time::Timestamp;
use gpuledger::sample;
use gpuledger::store::{self, access};
use rayon::prelude::*;
use rust_decimal::Decimal;
use serde::Serialize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Settings.
#[derive(Debug, Clone)]
pub struct IngestBench {
    /// A running server; `None` starts one on a fresh SQLite file.
    pub url: Option<String>,
    /// Admin token for registering the agents' keys (required with `url`).
    pub token: Option<String>,
    pub agents: usize,
    pub batch: usize,
    pub seconds: u64,
    /// Total records signed in advance (the run ends early when all are sent).
    pub records: usize,
    /// Target total records/s (paced); `None` sends as fast as the server answers.
    pub rate: Option<f64>,
    /// Witnesses (C2SP tlog-witness, served in this process) attached to the server the
    /// benchmark starts; 0: none. Not with `url`.
    pub witnesses: usize,
    /// `--checkpoint-interval-seconds` of the server the benchmark starts (`None`: serve's
    /// default).
    pub checkpoint_interval_seconds: Option<u64>,
}

/// Results.
#[derive(Debug, Clone, Serialize)]
pub struct IngestResult {
    pub agents: usize,
    pub batch: usize,
    pub sent_records: u64,
    pub accepted_records: u64,
    pub seconds: f64,
    pub accepted_per_s: f64,
    pub target_rate: Option<f64>,
    pub batch_latency_p50_ms: f64,
    pub batch_latency_p99_ms: f64,
    pub batch_latency_max_ms: f64,
    /// Peak resident set of the server process (only when the benchmark started it).
    pub server_peak_rss_mb: Option<f64>,
    /// CPU seconds (all threads) the server used while the records were posted (only when the
    /// benchmark started it): less noisy than the rate on a shared machine.
    pub server_cpu_seconds: Option<f64>,
    /// `server_cpu_seconds` per accepted record, in µs.
    pub server_cpu_us_per_record: Option<f64>,
    /// Witnesses attached to the server.
    pub witnesses: usize,
    /// With witnesses: the smallest size any of them cosigned by the end of the run (each
    /// latest checkpoint, sent as soon as signed), and the log's size then.
    pub witness_cosigned_size: Option<u64>,
    pub log_size: Option<u64>,
}

/// Errors of the benchmark.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("http: {0}")]
    Http(String),
}

/// Starts a server on a fresh SQLite file of the sample log, with an admin token, and
/// `witnesses` witnesses in this process attached to it.
fn start_server(witnesses: usize, interval: Option<u64>) -> Result<Target, IngestError> {
    let dir = std::env::temp_dir().join(format!("gpuledger-ingest-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| IngestError::Setup(e.to_string()))?;
    let url = format!("sqlite://{}", dir.join("bench.db").display());
    let key_path = dir.join("log.key");
    let (key, _) = gpuledger::keyfile::read_or_create(&key_path)
        .map_err(|e| IngestError::Setup(e.to_string()))?;
    store::init(&url, &key, sample::ORIGIN)?;
    let mut conn = store::connect(&url)?;
    let (_, token) = access::create_token(&mut conn, access::ApiRole::Admin, None, "bench ingest")?;
    let log_vkey = gpuledger::core::checkpoint::verifier_key(sample::ORIGIN, &key.verifying_key());
    let mut local = Vec::new();
    let mut config = String::new();
    for i in 0..witnesses {
        let name = format!("bench-witness-{i}.gpuledger.local");
        let w = gpuledger::server::witnessing::LocalWitness::start(
            gpuledger::witness::WitnessSettings {
                listen: "127.0.0.1:0".parse().expect("an address"),
                name: name.clone(),
                key: sample::key(&name),
                state: dir.join(format!("{name}.db")),
                logs: gpuledger::witness::logs_from_vkeys([log_vkey.as_str()])
                    .map_err(|e| IngestError::Setup(e.to_string()))?,
                workers: 1,
            },
        )
        .map_err(IngestError::Setup)?;
        let s = w.setting();
        config.push_str(&format!(
            "[[witnesses]]\nname = {:?}\nvkey = {:?}\nurl = {:?}\n\n",
            s.name, s.vkey, s.url
        ));
        local.push(w);
    }
    let config_path = dir.join("serve.toml");
    std::fs::write(&config_path, config).map_err(|e| IngestError::Setup(e.to_string()))?;
    let interval = interval.map(|i| i.to_string());
    let mut extra = vec!["--config", config_path.to_str().unwrap_or_default()];
    if let Some(i) = &interval {
        extra.extend(["--checkpoint-interval-seconds", i.as_str()]);
    }
    let (child, base) =
        super::server::spawn_serve_with(&url, &key_path, &extra).map_err(IngestError::Setup)?;
    let kids = vec![child];
    Ok(Target {
        own: Some(Children { kids, dir }),
        witnesses: local,
        base,
        token,
    })
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

fn http_err(e: impl std::fmt::Display) -> IngestError {
    IngestError::Http(e.to_string())
}

/// Runs the benchmark; `progress` receives phase names.
pub fn run_ingest(
    cfg: &IngestBench,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<IngestResult, IngestError> {
    if cfg.agents == 0 || cfg.batch == 0 || cfg.records == 0 {
        return Err(IngestError::Setup(
            "--agents, --batch and --records must be above 0".into(),
        ));
    }
    let target = target_server(cfg, progress)?;
    let bodies = prepare(cfg, &target, progress)?;
    progress("posting");
    let server_pid = target.own.as_ref().map(|s| s.kids[0].id());
    let cpu_before = server_pid.and_then(cpu_seconds);
    let posted = post_all(cfg, &target.base, &bodies)?;
    let cpu_after = server_pid.and_then(cpu_seconds);
    let rss = server_pid.and_then(peak_rss_mb);
    let mut result = posted.result(cfg, rss);
    if let (Some(b), Some(a)) = (cpu_before, cpu_after) {
        result.server_cpu_seconds = Some(round(a - b, 2));
        if result.accepted_records > 0 {
            result.server_cpu_us_per_record =
                Some(round((a - b) * 1e6 / result.accepted_records as f64, 1));
        }
    }
    if !target.witnesses.is_empty() {
        let (cosigned, size) = witness_progress(&target)?;
        result.witness_cosigned_size = Some(cosigned);
        result.log_size = Some(size);
    }
    Ok(result)
}

/// CPU time (user + system, all threads) process `pid` used so far, in seconds, from
/// `/proc/<pid>/stat` (in clock ticks of 1/100 s, Linux's `USER_HZ`).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces), from field 3 on.
    let rest = stat.rsplit_once(") ")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// The smallest size the witnesses cosigned, from the server's metrics, and the log's size.
fn witness_progress(target: &Target) -> Result<(u64, u64), IngestError> {
    let http = agent();
    let text = http
        .get(format!("{}/metrics", target.base))
        .call()
        .map_err(http_err)?
        .body_mut()
        .read_to_string()
        .map_err(http_err)?;
    let cosigned = text
        .lines()
        .filter(|l| l.starts_with("gpuledger_witness_cosigned_size{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))))
        .unwrap_or(0.0);
    let log: serde_json::Value = http
        .get(format!("{}/v1/log", target.base))
        .call()
        .map_err(http_err)?
        .body_mut()
        .read_json()
        .map_err(http_err)?;
    Ok((cosigned as u64, log["size"].as_u64().unwrap_or(0)))
}

/// The server the benchmark posts to, with an admin token.
struct Target {
    /// The server the benchmark started itself (`None` with `--url`).
    own: Option<Children>,
    /// The witnesses attached to it (stopped after it).
    witnesses: Vec<gpuledger::server::witnessing::LocalWitness>,
    base: String,
    token: String,
}

/// The server of `--url` and `--token`, or else one started on a fresh SQLite file.
fn target_server(
    cfg: &IngestBench,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Target, IngestError> {
    match &cfg.url {
        Some(u) => {
            let token = cfg.token.clone().ok_or_else(|| {
                IngestError::Setup("--token (an admin token) is needed with --url".into())
            })?;
            let base = u.trim_end_matches('/').to_owned();
            if cfg.witnesses > 0 {
                return Err(IngestError::Setup(
                    "--witnesses attaches witnesses to the server the benchmark starts; not with --url".into(),
                ));
            }
            Ok(Target {
                own: None,
                witnesses: Vec::new(),
                base,
                token,
            })
        }
        None => {
            progress(&format!(
                "starting a server on a fresh SQLite file with {} witnesses",
                cfg.witnesses
            ));
            start_server(cfg.witnesses, cfg.checkpoint_interval_seconds)
        }
    }
}

/// Registers the tenant, its lease and the agents on the server, and signs every agent's
/// records: per agent, its batches as JSON bodies (not timed).
fn prepare(
    cfg: &IngestBench,
    target: &Target,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Vec<Vec<Vec<u8>>>, IngestError> {
    let http = agent();
    let run_id = format!("{:x}", Timestamp::now().unix() % 0xffff_ffff);
    let per_agent = cfg.records.div_ceil(cfg.agents);
    progress(&format!(
        "registering {} agents and signing {} records",
        cfg.agents,
        per_agent * cfg.agents
    ));
    check_origin(&http, &target.base)?;
    let admin = |path: &str, body: serde_json::Value| {
        http.post(format!("{}{path}", target.base))
            .header("Authorization", format!("Bearer {}", target.token))
            .send_json(&body)
            .map_err(http_err)
    };
    let mut agents = Vec::new();
    for i in 0..cfg.agents {
        let name = format!("bench-{run_id}-{i:03}");
        let key = sample::key(&name);
        let node = admin("/v1/nodes", sample::node(&name).to_value())?;
        if node.status() != 201 {
            return Err(IngestError::Http(format!(
                "registering node {name}: HTTP {}",
                node.status()
            )));
        }
        let body = serde_json::json!({"id": name, "role": "node", "public_key": keys::encode_public(&key.verifying_key()),
            "nodes": [name], "regions": [sample::REGION]});
        let resp = admin("/v1/signers", body)?;
        if resp.status() != 201 {
            return Err(IngestError::Http(format!(
                "registering {name}: HTTP {}",
                resp.status()
            )));
        }
        // A tenant of this run per 64 agents leases their nodes whole (a lease covers at most
        // `MAX_LEASE_NODES` nodes).
        let tenant = format!("bench-{run_id}-t{}", i / MAX_LEASE_NODES);
        agents.push((name, key, tenant));
    }
    for chunk in agents.chunks(MAX_LEASE_NODES) {
        let tenant = &chunk[0].2;
        admin(
            "/v1/tenants",
            serde_json::json!({"id": tenant, "name": "Benchmark tenant"}),
        )?;
        let nodes: Vec<&str> = chunk.iter().map(|(n, _, _)| n.as_str()).collect();
        let lease = sample::lease_on(&sample::lease(tenant), tenant, &nodes, sample::NODE_GPUS);
        let resp = admin("/v1/leases", lease.to_value())?;
        if resp.status() != 201 {
            return Err(IngestError::Http(format!(
                "registering the lease of {tenant}: HTTP {}",
                resp.status()
            )));
        }
    }
    Ok(sign_batches(&agents, per_agent, cfg.batch))
}

/// Refuses a server whose log is not the sample log: sample records are signed for its origin.
fn check_origin(http: &ureq::Agent, base: &str) -> Result<(), IngestError> {
    let log: serde_json::Value = http
        .get(format!("{base}/v1/log"))
        .call()
        .map_err(http_err)?
        .body_mut()
        .read_json()
        .map_err(http_err)?;
    if log["origin"] != sample::ORIGIN {
        return Err(IngestError::Setup(format!(
            "the server's log is {}, but the benchmark signs for {:?}; run it against a log initialised with that origin",
            log["origin"],
            sample::ORIGIN
        )));
    }
    Ok(())
}

/// `per_agent` usage records of each agent (10-second slots ending now), in JSON batches of
/// `batch`.
fn sign_batches(
    agents: &[(String, SigningKey, String)],
    per_agent: usize,
    batch: usize,
) -> Vec<Vec<Vec<u8>>> {
    let now = Timestamp::now();
    agents
        .par_iter()
        .map(|(name, key, tenant)| {
            (0..per_agent)
                .collect::<Vec<_>>()
                .chunks(batch)
                .map(|seqs| {
                    let recs: Vec<_> = seqs
                        .iter()
                        .map(|&s| {
                            let end = now.plus(-10 * (per_agent - s) as i64);
                            sample::usage(name, key, s as u64 + 1, tenant, Decimal::from(8), end)
                        })
                        .collect();
                    serde_json::to_vec(&recs).expect("serialises")
                })
                .collect()
        })
        .collect()
}

/// What the posting threads gather: each answered batch's latency (ms), and the records sent
/// and accepted.
#[derive(Default)]
struct Posted {
    latencies: Mutex<Vec<f64>>,
    totals: Mutex<(u64, u64)>,
    /// Wall time of the posting, seconds.
    elapsed: f64,
}

/// The timed phase: one thread per agent posts its batches, paced when `cfg.rate` is set,
/// until they are all sent or `cfg.seconds` have passed.
fn post_all(cfg: &IngestBench, base: &str, bodies: &[Vec<Vec<u8>>]) -> Result<Posted, IngestError> {
    let mut posted = Posted::default();
    let deadline = Instant::now() + Duration::from_secs(cfg.seconds);
    let pace = cfg
        .rate
        .map(|r| Duration::from_secs_f64(cfg.batch as f64 * cfg.agents as f64 / r));
    let started = Instant::now();
    let failure: Mutex<Option<String>> = Mutex::new(None);
    std::thread::scope(|s| {
        for batches in bodies {
            let (posted, failure) = (&posted, &failure);
            let url = format!("{base}/v1/records");
            s.spawn(move || {
                if let Err(e) = post_batches(&url, batches, deadline, pace, posted) {
                    *failure.lock().expect("lock") = Some(e);
                }
            });
        }
    });
    posted.elapsed = started.elapsed().as_secs_f64();
    if let Some(f) = failure.into_inner().expect("lock") {
        return Err(IngestError::Http(f));
    }
    Ok(posted)
}

/// One agent's thread: posts `batches` to `url` in order, until the deadline; stops at the
/// first failure.
fn post_batches(
    url: &str,
    batches: &[Vec<u8>],
    deadline: Instant,
    pace: Option<Duration>,
    posted: &Posted,
) -> Result<(), String> {
    let http = agent();
    let mut next = Instant::now();
    for body in batches {
        if Instant::now() >= deadline {
            break;
        }
        if let Some(p) = pace {
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            next += p;
        }
        let t = Instant::now();
        let resp = http
            .post(url)
            .header("Content-Type", "application/json")
            .send(&body[..]);
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        match resp {
            Ok(mut r) if r.status() == 200 => {
                let v: serde_json::Value = r.body_mut().read_json().map_err(|e| e.to_string())?;
                let acc = v["accepted"].as_u64().unwrap_or(0);
                let sent = v["outcomes"].as_array().map_or(0, |a| a.len() as u64);
                posted.latencies.lock().expect("lock").push(ms);
                let mut t = posted.totals.lock().expect("lock");
                t.0 += sent;
                t.1 += acc;
            }
            Ok(r) => return Err(format!("HTTP {}", r.status())),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

impl Posted {
    /// The figures, with `rss` the server's peak memory when measured.
    fn result(self, cfg: &IngestBench, rss: Option<f64>) -> IngestResult {
        let elapsed = self.elapsed;
        let mut lat = self.latencies.into_inner().expect("lock");
        lat.sort_by(|a, b| a.total_cmp(b));
        let pct = |p: f64| -> f64 {
            if lat.is_empty() {
                return 0.0;
            }
            let i = ((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1;
            round(lat[i], 1)
        };
        let (sent, accepted) = self.totals.into_inner().expect("lock");
        IngestResult {
            agents: cfg.agents,
            batch: cfg.batch,
            sent_records: sent,
            accepted_records: accepted,
            seconds: round(elapsed, 2),
            accepted_per_s: (accepted as f64 / elapsed).round(),
            target_rate: cfg.rate,
            batch_latency_p50_ms: pct(0.50),
            batch_latency_p99_ms: pct(0.99),
            batch_latency_max_ms: lat.last().map_or(0.0, |m| round(*m, 1)),
            server_peak_rss_mb: rss,
            server_cpu_seconds: None,
            server_cpu_us_per_record: None,
            witnesses: cfg.witnesses,
            witness_cosigned_size: None,
            log_size: None,
        }
    }
}

impl std::fmt::Display for IngestResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "agents × batch:         {} × {}",
            self.agents, self.batch
        )?;
        writeln!(
            f,
            "accepted:               {} of {} records in {} s",
            self.accepted_records, self.sent_records, self.seconds
        )?;
        writeln!(f, "accepted records/s:     {:.0}", self.accepted_per_s)?;
        if let Some(us) = self.server_cpu_us_per_record {
            writeln!(f, "server CPU per record:  {us} µs")?;
        }
        if let (Some(c), Some(s)) = (self.witness_cosigned_size, self.log_size) {
            writeln!(
                f,
                "witnesses:              {} (all cosigned size {c} of {s} at the end)",
                self.witnesses
            )?;
        }
        if let Some(t) = self.target_rate {
            writeln!(f, "target rate:            {t:.0} records/s")?;
        }
        writeln!(
            f,
            "batch latency p50/p99:  {} / {} ms (max {} ms)",
            self.batch_latency_p50_ms, self.batch_latency_p99_ms, self.batch_latency_max_ms
        )?;
        match self.server_peak_rss_mb {
            Some(m) => write!(f, "server peak RSS:        {m} MB"),
            None => write!(
                f,
                "server peak RSS:        not measured (server not started by the benchmark)"
            ),
        }
    }
}
