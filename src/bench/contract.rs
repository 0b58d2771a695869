//! `gpuledger bench contract`: a large tenant's year under a contract (issue #28, "fast at
//! contract scale"): N usage records (default 10,000,000) of one tenant over 364 days, from 16
//! nodes of 8 H100s, under a yearly contract by anniversary month (a monthly fee for the lease,
//! included GPU-hours with overage, a 99.9 % SLA), on an empty log (SQLite or PostgreSQL). It
//! times the invoice preview (`GET /v1/invoices/preview`'s work: rating, included hours, SLA
//! presence, contract lines) of the last whole billing period and of the whole term, both read
//! from the usage rollups, and, for comparison, the month rated record by record; the month's
//! rating both ways must agree exactly or the run fails.
//!
//! The log is filled through the normal append path first (not timed): records are signed in
//! parallel and appended in batches of the append limit, in time order.

use super::round;
use ed25519_dalek::SigningKey;
use gpuledger::core::contract::billing_periods;
use gpuledger::core::invoice::{InvoiceRating, InvoiceScope, Period, Rated, TaxTable};
use gpuledger::core::limits::{MAX_INTERVAL_SECONDS, POLICY_RECORD_AGE_SECONDS};
use gpuledger::core::rating::LeaseClass;
use gpuledger::core::record::{
    BillingAnchor, BillingPeriod, Body, ContractFee, ContractRegistered, FeeCategory, FeeTiming,
    Included, LogPolicy, RateCard, Sla, SlaStep,
};
use gpuledger::core::time::Timestamp;
use gpuledger::sample;
use gpuledger::store::{self, invoices, pricing, read, usage, DbConn, Ledger, StoreError};
use rayon::prelude::*;
use rust_decimal::Decimal;
use serde::Serialize;
use std::time::Instant;

/// The tenant measured.
const TENANT: &str = "bench-contract-tenant";
/// Nodes (8 H100s each) the tenant's lease covers.
const NODES: usize = 16;
/// Days of records, ending at today's midnight (UTC): within the longest record age a log
/// policy allows (365 days), with a day to spare for the run itself.
const DAYS: i64 = 364;
/// Records signed, then appended, per node at a time.
const CHUNK: u64 = 2_000;

/// Benchmark settings.
#[derive(Debug, Clone)]
pub struct ContractBench {
    /// The log: it must hold an empty log (or, with `reuse`, the log of an earlier run).
    pub database_url: String,
    /// Usage records of the tenant over the term so far.
    pub records: u64,
    /// Measure the log an earlier run with the same settings filled on the same day.
    pub reuse: bool,
}

/// Results.
#[derive(Debug, Clone, Serialize)]
pub struct ContractResult {
    pub backend: &'static str,
    pub records: u64,
    pub log_entries: u64,
    /// Seconds filling the log (not part of any preview); 0 with `--reuse`.
    pub fill_seconds: f64,
    /// The last whole billing period, `[from, to)`.
    pub month: Period,
    pub month_records: u64,
    /// Its preview from the rollups, in seconds, and its total.
    pub month_preview_seconds: f64,
    pub month_total: String,
    /// The same month's usage rated record by record (no contract lines), in seconds.
    pub month_by_records_seconds: f64,
    /// The whole term, `[from, to)`.
    pub term: Period,
    pub term_preview_seconds: f64,
    pub term_total: String,
    /// Peak resident set of this process over the whole run (filling included).
    pub peak_rss_mb: Option<f64>,
}

/// The tenant's contract over `term`: 60 000 CNY a month in advance for its lease, 50 000
/// H100-hours included a month at 15.00 above, 99.9 % availability (10 % credit below, 25 %
/// below 99 %).
fn contract(term: Period) -> ContractRegistered {
    ContractRegistered {
        tenant: TENANT.into(),
        contract: "C-bench-year".into(),
        currency: "CNY".into(),
        region: sample::REGION.into(),
        term_from: term.from,
        term_to: term.to,
        billing_period: BillingPeriod::Month,
        billing_anchor: BillingAnchor::Anniversary,
        fees: Some(vec![ContractFee {
            name: "16 × 8 H100, monthly".into(),
            amount: Decimal::from(60_000),
            timing: FeeTiming::Advance,
            category: FeeCategory::Compute,
            lease: Some(sample::lease(TENANT)),
            included: Some(vec![Included {
                gpu_model: sample::MODEL.into(),
                gpu_hours: Decimal::from(50_000),
                overage_rate: Decimal::from(15),
            }]),
        }]),
        commitment: None,
        sla: Some(Sla {
            target: Decimal::new(999, 1),
            credits: vec![
                SlaStep {
                    below: Decimal::new(999, 1),
                    percent: Decimal::from(10),
                },
                SlaStep {
                    below: Decimal::from(99),
                    percent: Decimal::from(25),
                },
            ],
        }),
    }
}

/// Fills (or, with `reuse`, opens) the log and times the previews.
pub fn run_contract(
    cfg: &ContractBench,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<ContractResult, StoreError> {
    if cfg.records == 0 {
        return Err(StoreError::Refused("--records must be above 0".into()));
    }
    let now = Timestamp::now().unix();
    let records_end = Timestamp::from_unix(now - now % 86_400).expect("in range");
    let term_from = records_end.plus(-DAYS * 86_400);
    let term = Period {
        from: term_from,
        to: term_from.plus(365 * 86_400),
    };
    let c = contract(term);
    let nodes = super::sample_signers("contract-node", NODES);
    let per_node = cfg.records.div_ceil(NODES as u64);
    // Contiguous records of each node, as long as the records asked for need to fill the
    // days (at most a day: few records cover fewer days).
    let slot = ((DAYS * 86_400) as u64 / per_node).clamp(1, MAX_INTERVAL_SECONDS as u64) as i64;
    let (ledger, fill_seconds) = if cfg.reuse {
        let log_key = sample::key("bench-contract-log");
        store::init(&cfg.database_url, &log_key, sample::ORIGIN)?;
        (Ledger::open(&cfg.database_url, log_key)?, 0.0)
    } else {
        let ledger = super::open_history_log(
            &cfg.database_url,
            "bench-contract-log",
            term_from.plus(-86_400),
        )?;
        register(&ledger, &nodes, &c)?;
        super::real_clock(&ledger);
        progress(&format!(
            "appending {} usage records of {slot} s (not timed)",
            per_node * NODES as u64
        ));
        let started = Instant::now();
        fill(&ledger, &nodes, per_node, (term_from, slot), progress)?;
        (ledger, started.elapsed().as_secs_f64())
    };
    let size = ledger.reads().head()?.0;
    // The last whole billing period the records reach into its end.
    let filled_to = term_from.plus(slot * per_node as i64).min(records_end);
    let month = billing_periods(&c)
        .into_iter()
        .map(|s| Period {
            from: s.from,
            to: s.to,
        })
        .rfind(|p| p.to <= filled_to)
        .ok_or_else(|| StoreError::Refused("the term has no whole billing period yet".into()))?;
    let taxes = TaxTable::default();
    let preview = |period: Period| -> Result<(f64, String), StoreError> {
        let started = Instant::now();
        let p = ledger
            .reads()
            .run(|conn| invoices::preview_period(conn, TENANT, period, size, &taxes))?;
        let seconds = started.elapsed().as_secs_f64();
        let total = p
            .currencies
            .iter()
            .map(|(c, l)| format!("{} {c}", l.totals.gross))
            .collect::<Vec<_>>()
            .join(", ");
        Ok((seconds, total))
    };
    progress("previewing the last whole billing period from the rollups");
    let (month_preview_seconds, month_total) = preview(month)?;
    progress("previewing the whole term from the rollups");
    let (term_preview_seconds, term_total) = preview(term)?;
    progress("rating the month record by record");
    let started = Instant::now();
    let (slow, month_records) = ledger.reads().run(|conn| by_records(conn, month, size))?;
    let month_by_records_seconds = started.elapsed().as_secs_f64();
    let fast = ledger.reads().run(|conn| {
        let contracts = read::contracts(conn, TENANT, size)?;
        let m = read::measurement(conn, TENANT, &contracts, month, size)?;
        invoices::preview(conn, TENANT, month, size, m)
    })?;
    if fast != slow {
        return Err(StoreError::Corrupt(format!(
            "the month rated from the rollups differs from its records: {fast:?} ≠ {slow:?}"
        )));
    }
    Ok(ContractResult {
        backend: if cfg.database_url.starts_with("postgres") {
            "PostgreSQL"
        } else {
            "SQLite"
        },
        records: per_node * NODES as u64,
        log_entries: size,
        fill_seconds: round(fill_seconds, 1),
        month,
        month_records,
        month_preview_seconds: round(month_preview_seconds, 3),
        month_total,
        month_by_records_seconds: round(month_by_records_seconds, 3),
        term,
        term_preview_seconds: round(term_preview_seconds, 3),
        term_total,
        peak_rss_mb: super::server::peak_rss_mb(std::process::id()),
    })
}

/// The month's usage rated record by record through the same core rule, and how many records
/// it read.
fn by_records(conn: &mut DbConn, month: Period, size: u64) -> Result<(Rated, u64), StoreError> {
    let contracts = read::contracts(conn, TENANT, size)?;
    let measurement = read::measurement(conn, TENANT, &contracts, month, size)?;
    let book = pricing::price_book(conn, size)?;
    let mut rating = InvoiceRating::new(InvoiceScope::new(month, [])).measuring(measurement);
    let idxs = usage::starting_in(conn, TENANT, month.from, month.to, size)?;
    usage::for_each_of(conn, Some(TENANT), &idxs, &mut |i, _, _, b| {
        rating.add(&book, i, b);
    })?;
    Ok((rating.finish(), idxs.len() as u64))
}

/// The log policy (records up to a year old), the nodes and their keys, the tenant and its
/// lease, the H100 rate card and the contract.
fn register(
    ledger: &Ledger,
    nodes: &[(String, SigningKey)],
    c: &ContractRegistered,
) -> Result<(), StoreError> {
    ledger.append_ledger_entry(Body::LogPolicy(LogPolicy {
        max_record_age_seconds: POLICY_RECORD_AGE_SECONDS.1,
        ..LogPolicy::default()
    }))?;
    super::register_nodes(ledger, nodes)?;
    let names: Vec<&str> = nodes.iter().map(|(n, _)| n.as_str()).collect();
    super::register_sample_parties(ledger, TENANT, &names)?;
    ledger.append_ledger_entry(Body::RateCard(RateCard {
        region: sample::REGION.into(),
        gpu_model: sample::MODEL.into(),
        lease_class: LeaseClass::OnDemand,
        currency: "CNY".into(),
        price_per_gpu_hour: Decimal::new(185, 1),
        effective_from: c.term_from.plus(-3_600),
    }))?;
    ledger.append_ledger_entry(Body::ContractRegistered(c.clone()))?;
    Ok(())
}

/// Appends `per_node` contiguous records of `slot` seconds from `from` on each node, all 8
/// GPUs, through the normal append path, in time order.
fn fill(
    ledger: &Ledger,
    nodes: &[(String, SigningKey)],
    per_node: u64,
    (from, slot): (Timestamp, i64),
    progress: &(dyn Fn(&str) + Sync),
) -> Result<(), StoreError> {
    let lease = sample::lease(TENANT);
    let mut seq = 0u64;
    let mut reported = 0u64;
    while seq < per_node {
        let hi = (seq + CHUNK).min(per_node);
        let batch: Vec<_> = (seq..hi)
            .into_par_iter()
            .flat_map_iter(|s| {
                let lease = &lease;
                nodes.iter().map(move |(n, k)| {
                    let start = from.plus(slot * s as i64);
                    sample::usage_over(
                        n,
                        k,
                        s + 1,
                        (TENANT, lease),
                        Decimal::from(sample::NODE_GPUS),
                        (start, start.plus(slot)),
                    )
                })
            })
            .collect();
        super::append_accepted(ledger, &batch)?;
        seq = hi;
        let done = seq * nodes.len() as u64;
        if done >= reported + 1_000_000 {
            reported = done;
            progress(&format!("{done} records appended"));
        }
    }
    Ok(())
}

impl std::fmt::Display for ContractResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{}: {} usage records of one tenant over its contract's term ({} entries)",
            self.backend, self.records, self.log_entries
        )?;
        writeln!(
            f,
            "filling the log:             {} s (not part of any preview)",
            self.fill_seconds
        )?;
        writeln!(
            f,
            "preview of the last month:   {} s from the rollups ({} records; record by \
             record: {} s), total {}",
            self.month_preview_seconds,
            self.month_records,
            self.month_by_records_seconds,
            self.month_total
        )?;
        writeln!(
            f,
            "preview of the whole term:   {} s from the rollups, total {}",
            self.term_preview_seconds, self.term_total
        )?;
        match self.peak_rss_mb {
            Some(m) => write!(f, "peak RSS (whole run):        {m} MB"),
            None => write!(f, "peak RSS:                    not available"),
        }
    }
}
