//! `gpuledger bench ingest`: M concurrent simulated agents post pre-signed batches over HTTP.
//! Reports accepted records/s, p50/p99 batch latency and, when it started the server itself,
//! the server's peak resident memory.

use crate::core::keys;
use crate::core::time::Timestamp;
use crate::sample;
use crate::store::{self, access};
use rayon::prelude::*;
use rust_decimal::Decimal;
use serde::Serialize;
use std::path::PathBuf;
use std::process::Child;
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

struct OwnServer {
    child: Child,
    dir: PathBuf,
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn peak_rss_mb(pid: u32) -> Option<f64> {
    let kb = super::server::status_kb(pid, "VmHWM:")?;
    Some((kb / 1024.0 * 10.0).round() / 10.0)
}

fn start_server() -> Result<(OwnServer, String, String), IngestError> {
    let dir = std::env::temp_dir().join(format!("gpuledger-ingest-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| IngestError::Setup(e.to_string()))?;
    let url = format!("sqlite://{}", dir.join("bench.db").display());
    let key_path = dir.join("log.key");
    let (key, _) =
        crate::keyfile::read_or_create(&key_path).map_err(|e| IngestError::Setup(e.to_string()))?;
    store::init(&url, &key, sample::ORIGIN)?;
    let mut conn = store::connect(&url)?;
    let (_, token) = access::create_token(&mut conn, access::ApiRole::Admin, None, "bench ingest")?;
    let (child, base) = super::server::spawn_serve(&url, &key_path).map_err(IngestError::Setup)?;
    Ok((OwnServer { child, dir }, base, token))
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
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
    let (own, base, token) = match &cfg.url {
        Some(u) => {
            let t = cfg.token.clone().ok_or_else(|| {
                IngestError::Setup("--token (an admin token) is needed with --url".into())
            })?;
            (None, u.trim_end_matches('/').to_owned(), t)
        }
        None => {
            progress("starting a server on a fresh SQLite file");
            let (s, b, t) = start_server()?;
            (Some(s), b, t)
        }
    };
    let http = agent();
    let run_id = format!("{:x}", Timestamp::now().unix() % 0xffff_ffff);
    let per_agent = cfg.records.div_ceil(cfg.agents);
    progress(&format!(
        "registering {} agents and signing {} records",
        cfg.agents,
        per_agent * cfg.agents
    ));
    // Sample records are signed for the sample log's origin.
    let log: serde_json::Value = http
        .get(format!("{base}/v1/log"))
        .call()
        .map_err(|e| IngestError::Http(e.to_string()))?
        .body_mut()
        .read_json()
        .map_err(|e| IngestError::Http(e.to_string()))?;
    if log["origin"] != sample::ORIGIN {
        return Err(IngestError::Setup(format!(
            "the server's log is {}, but the benchmark signs for {:?}; run it against a log initialised with that origin",
            log["origin"],
            sample::ORIGIN
        )));
    }
    let admin = |path: &str, body: serde_json::Value| -> Result<u16, IngestError> {
        http.post(format!("{base}{path}"))
            .header("Authorization", format!("Bearer {token}"))
            .send_json(&body)
            .map(|r| r.status().as_u16())
            .map_err(|e| IngestError::Http(e.to_string()))
    };
    admin(
        "/v1/tenants",
        serde_json::json!({"id": "bench-tenant", "name": "Benchmark tenant"}),
    )?;
    admin(
        "/v1/leases",
        serde_json::json!({"lease": sample::lease("bench-tenant"), "tenant": "bench-tenant", "class": "on_demand"}),
    )?;
    let mut agents = Vec::new();
    for i in 0..cfg.agents {
        let name = format!("bench-{run_id}-{i:03}");
        let key = sample::key(&name);
        let body = serde_json::json!({"id": name, "role": "node", "public_key": keys::encode_public(&key.verifying_key()),
            "nodes": [name], "regions": [sample::REGION]});
        let resp = http
            .post(format!("{base}/v1/signers"))
            .header("Authorization", format!("Bearer {token}"))
            .send_json(&body)
            .map_err(|e| IngestError::Http(e.to_string()))?;
        if resp.status() != 201 {
            return Err(IngestError::Http(format!(
                "registering {name}: HTTP {}",
                resp.status()
            )));
        }
        agents.push((name, key));
    }
    let now = Timestamp::now();
    let bodies: Vec<Vec<Vec<u8>>> = agents
        .par_iter()
        .map(|(name, key)| {
            (0..per_agent)
                .collect::<Vec<_>>()
                .chunks(cfg.batch)
                .map(|seqs| {
                    let recs: Vec<_> = seqs
                        .iter()
                        .map(|&s| {
                            let end = now.plus(-10 * (per_agent - s) as i64);
                            sample::usage(
                                name,
                                key,
                                s as u64 + 1,
                                "bench-tenant",
                                Decimal::from(8),
                                end,
                            )
                        })
                        .collect();
                    serde_json::to_vec(&recs).expect("serialises")
                })
                .collect()
        })
        .collect();

    progress("posting");
    let latencies = Mutex::new(Vec::<f64>::new());
    let totals = Mutex::new((0u64, 0u64));
    let deadline = Instant::now() + Duration::from_secs(cfg.seconds);
    let pace = cfg
        .rate
        .map(|r| Duration::from_secs_f64(cfg.batch as f64 * cfg.agents as f64 / r));
    let started = Instant::now();
    let failure: Mutex<Option<String>> = Mutex::new(None);
    std::thread::scope(|s| {
        for batches in &bodies {
            let (latencies, totals, failure) = (&latencies, &totals, &failure);
            let url = format!("{base}/v1/records");
            s.spawn(move || {
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
                        .post(&url)
                        .header("Content-Type", "application/json")
                        .send(&body[..]);
                    let ms = t.elapsed().as_secs_f64() * 1000.0;
                    match resp {
                        Ok(mut r) if r.status() == 200 => {
                            let v: serde_json::Value = match r.body_mut().read_json() {
                                Ok(v) => v,
                                Err(e) => {
                                    *failure.lock().expect("lock") = Some(e.to_string());
                                    return;
                                }
                            };
                            let acc = v["accepted"].as_u64().unwrap_or(0);
                            let sent = v["outcomes"].as_array().map_or(0, |a| a.len() as u64);
                            latencies.lock().expect("lock").push(ms);
                            let mut t = totals.lock().expect("lock");
                            t.0 += sent;
                            t.1 += acc;
                        }
                        Ok(r) => {
                            *failure.lock().expect("lock") = Some(format!("HTTP {}", r.status()));
                            return;
                        }
                        Err(e) => {
                            *failure.lock().expect("lock") = Some(e.to_string());
                            return;
                        }
                    }
                }
            });
        }
    });
    let elapsed = started.elapsed().as_secs_f64();
    if let Some(f) = failure.into_inner().expect("lock") {
        return Err(IngestError::Http(f));
    }
    let mut lat = latencies.into_inner().expect("lock");
    lat.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return 0.0;
        }
        let i = ((lat.len() as f64 * p).ceil() as usize).clamp(1, lat.len()) - 1;
        (lat[i] * 10.0).round() / 10.0
    };
    let (sent, accepted) = totals.into_inner().expect("lock");
    let rss = own.as_ref().and_then(|s| peak_rss_mb(s.child.id()));
    Ok(IngestResult {
        agents: cfg.agents,
        batch: cfg.batch,
        sent_records: sent,
        accepted_records: accepted,
        seconds: (elapsed * 100.0).round() / 100.0,
        accepted_per_s: (accepted as f64 / elapsed).round(),
        target_rate: cfg.rate,
        batch_latency_p50_ms: pct(0.50),
        batch_latency_p99_ms: pct(0.99),
        batch_latency_max_ms: lat.last().map_or(0.0, |m| (m * 10.0).round() / 10.0),
        server_peak_rss_mb: rss,
    })
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
