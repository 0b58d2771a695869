//! `gpuledger bench preview`: an invoice preview of one tenant-month of N usage records
//! (default 1,000,000) on a fresh SQLite log, with its time and the process's peak memory.
//! The log is filled through the normal append path first (not timed).

use super::round;
use ed25519_dalek::SigningKey;
use gpuledger::core::rating::{self, LeaseClass};
use gpuledger::core::record::{Body, RateCard};
use gpuledger::core::time::Timestamp;
use gpuledger::sample;
use gpuledger::store::{pricing, Ledger, StoreError};
use rayon::prelude::*;
use rust_decimal::Decimal;
use serde::Serialize;
use std::time::Instant;

/// Results.
#[derive(Debug, Clone, Serialize)]
pub struct PreviewResult {
    pub records: u64,
    pub fill_seconds: f64,
    pub preview_seconds: f64,
    pub records_per_s: f64,
    pub lines: usize,
    pub total: String,
    /// Peak resident set of this process over the whole run (filling included).
    pub peak_rss_mb: Option<f64>,
}

/// Fills a fresh SQLite log in `dir` with `records` usage records of one tenant within one
/// month (16 nodes, 8 GPUs each, contiguous 10-second slots) and times the preview.
pub fn run_preview(
    dir: &std::path::Path,
    records: u64,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<PreviewResult, StoreError> {
    let url = format!("sqlite://{}", dir.join("preview.db").display());
    // The month: the 28 days ending at the start of today (16 nodes × 241,920 slots fit 3.8M).
    let now = Timestamp::now().unix();
    let month_end = Timestamp::from_unix(now - now % 86_400).expect("in range");
    let month_start = month_end.plus(-28 * 86_400);
    // The nodes, tenant and rate card are received a day before the month (no price takes
    // effect in the past); the records at the system's clock.
    let since = month_start.plus(-86_400);
    let ledger = super::open_history_log(&url, "bench-preview-log", since)?;
    let nodes = super::sample_signers("preview-node", 16);
    super::register_nodes(&ledger, &nodes)?;
    let names: Vec<&str> = nodes.iter().map(|(n, _)| n.as_str()).collect();
    super::register_sample_parties(&ledger, "bench-tenant", &names)?;
    ledger.append_ledger_entry(Body::RateCard(RateCard {
        region: "cn-north-imx".into(),
        gpu_model: "H100-SXM-80G".into(),
        lease_class: LeaseClass::OnDemand,
        currency: "CNY".into(),
        price_per_gpu_hour: Decimal::new(185, 1),
        effective_from: since,
    }))?;
    super::real_clock(&ledger);
    progress(&format!("appending {records} usage records (not timed)"));
    let started = Instant::now();
    let per_node = fill(&ledger, &nodes, records, month_start)?;
    let fill_seconds = started.elapsed().as_secs_f64();
    let size = ledger.reads().head()?.0;
    progress("previewing");
    let started = Instant::now();
    let rated = ledger
        .reads()
        .run(|c| pricing::rate_period(c, "bench-tenant", month_start, month_end, size))?;
    let cny = super::cny_lines(rated)?;
    let preview_seconds = started.elapsed().as_secs_f64();
    let n = per_node * nodes.len() as u64;
    Ok(PreviewResult {
        records: n,
        fill_seconds: round(fill_seconds, 2),
        preview_seconds: round(preview_seconds, 3),
        records_per_s: (n as f64 / preview_seconds).round(),
        lines: cny.len(),
        total: rating::total(&cny).to_string(),
        peak_rss_mb: super::server::peak_rss_mb(std::process::id()),
    })
}

/// Appends `records` usage records (rounded up to a whole number per node) through the normal
/// append path: each node's contiguous 10-second slots from `month_start`; returns the records
/// per node.
fn fill(
    ledger: &Ledger,
    nodes: &[(String, SigningKey)],
    records: u64,
    month_start: Timestamp,
) -> Result<u64, StoreError> {
    let per_node = records.div_ceil(nodes.len() as u64);
    const CHUNK: u64 = 5_000;
    let mut seq = 0u64;
    while seq < per_node {
        let hi = (seq + CHUNK).min(per_node);
        let batch: Vec<_> = nodes
            .par_iter()
            .flat_map_iter(|(n, k)| {
                (seq..hi).map(move |s| {
                    let end = month_start.plus(10 * (s as i64 + 1));
                    // The sample records carry the tenant's lease (on-demand).
                    sample::usage(n, k, s + 1, "bench-tenant", Decimal::from(8), end)
                })
            })
            .collect();
        super::append_accepted(ledger, &batch)?;
        seq = hi;
    }
    Ok(per_node)
}

impl std::fmt::Display for PreviewResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "records in the month:   {}", self.records)?;
        writeln!(
            f,
            "filling the log:        {} s (not part of the preview)",
            self.fill_seconds
        )?;
        writeln!(
            f,
            "invoice preview:        {} s ({:.0} records/s), {} line(s), total {} CNY",
            self.preview_seconds, self.records_per_s, self.lines, self.total
        )?;
        match self.peak_rss_mb {
            Some(m) => write!(f, "peak RSS (whole run):   {m} MB"),
            None => write!(f, "peak RSS:               not available"),
        }
    }
}
