//! `gpuledger bench grow`: grows a log to N usage records (default 10,000,000) over a year of
//! many tenants, one of which (`grow-tenant-000`) has M records (default 1,000,000) in the
//! measured month and a share of every other month, and reports what the log's size costs:
//! the append rate of the first and the last million, the invoice preview, the certificate and
//! a one-day usage query of that tenant-month (also in a fresh log holding only that
//! tenant-month), and the database's bytes per entry (issue #14).
//!
//! The year is twelve 28-day months ending at today's midnight (UTC); the measured month is
//! the seventh, so the log holds history both before and after it. Records are appended in time
//! order, each of 64 nodes measuring one 10-second interval per tick for the measured tenant or
//! for the one other tenant it serves that month.
//! Records are signed before the clock starts and appended by two client threads in batches of
//! 1,000 (without signature checks in a build with the `bench-unchecked-append` feature, the
//! full append otherwise); only the appends are timed.

use super::round;
use diesel::prelude::*;
use ed25519_dalek::SigningKey;
use gpuledger::core::certificate::Scope;
use gpuledger::core::envelope::Envelope;
use gpuledger::core::invoice::Period;
use gpuledger::core::limits::POLICY_RECORD_AGE_SECONDS;
use gpuledger::core::outcome::Outcome;
use gpuledger::core::rating::{self, LeaseClass};
use gpuledger::core::record::{Body, LogPolicy, RateCard};
use gpuledger::core::time::Timestamp;
use gpuledger::core::usage::{Aggregator, Window};
use gpuledger::sample;
use gpuledger::store::certificates::CertificateRequest;
use gpuledger::store::{self, invoices, usage, Ledger, StoreError};
use rayon::prelude::*;
use rust_decimal::Decimal;
use serde::Serialize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// Nodes (signers) measuring; each records at most one interval per tick.
const NODES: usize = 64;
/// Months in the year of records, and the one measured (from 0).
const MONTHS: usize = 12;
const MEASURED_MONTH: usize = 6;
/// Days in a month, and 10-second slots in it.
const MONTH_DAYS: i64 = 28;
const SLOTS: u64 = (MONTH_DAYS * 8_640) as u64;
/// Records signed, then appended (timed), at a time; divides a million.
const CHUNK: usize = 50_000;
/// Records per append call, and threads appending at once.
const BATCH: usize = 1_000;
const CLIENTS: usize = 2;
/// The measured tenant.
const TENANT: &str = "grow-tenant-000";

/// Benchmark settings.
#[derive(Debug, Clone)]
pub struct GrowBench {
    /// The log to grow: it must hold an empty log.
    pub database_url: String,
    /// The fresh log for the comparison: it must hold an empty log.
    pub fresh_database_url: String,
    /// Usage records to append (a multiple of [`CHUNK`]).
    pub entries: u64,
    /// Records of the measured tenant in the measured month.
    pub month_records: u64,
    /// Tenants, the measured one included.
    pub tenants: usize,
    /// Measure logs grown by an earlier run with the same settings on the same day (kept with
    /// `--database-url` and `--fresh-database-url`) instead of growing them.
    pub reuse: bool,
}

/// What one log answers for the measured tenant-month.
#[derive(Debug, Clone, Serialize)]
pub struct Reads {
    /// The log's size when measured.
    pub log_entries: u64,
    pub preview_seconds: f64,
    pub preview_total: String,
    pub certificate_seconds: f64,
    pub certificate_records: u64,
    /// The usage of one day by hour, from the rollups (whole hours), and read record by record
    /// (how it was read before the rollups), with the same rows.
    pub usage_day_seconds: f64,
    pub usage_day_records_seconds: f64,
    pub usage_day_records: u64,
    /// The parts of a read of the tenant-month: selecting the records by start (an index-only
    /// scan), then reading and parsing them with nothing done with them.
    pub select_seconds: f64,
    pub fetch_and_parse_seconds: f64,
}

/// Results.
#[derive(Debug, Clone, Serialize)]
pub struct GrowResult {
    pub backend: String,
    pub signatures_checked: bool,
    pub records: u64,
    pub tenants: usize,
    pub month_records: u64,
    /// The measured tenant's records in the whole year.
    pub tenant_records: u64,
    /// Append rate of each million records appended (records/s, appends only); empty when the
    /// logs were reused.
    pub rate_per_million: Vec<f64>,
    pub first_million_per_s: Option<f64>,
    pub last_million_per_s: Option<f64>,
    /// (last − first) / first, in percent.
    pub last_vs_first_percent: Option<f64>,
    pub append_seconds: f64,
    /// Of `append_seconds`, the time spent keeping the usage rollups (in the same transactions).
    pub rollup_upkeep_seconds: f64,
    pub sign_seconds: f64,
    /// The reads in the grown log, and the same reads again at once (its pages then cached).
    pub grown: Reads,
    pub grown_again: Reads,
    pub fresh: Reads,
    pub fresh_again: Reads,
    /// Reading the tenant's whole year (every usage record of it), as every one of these reads
    /// did before issue #14: seconds, and records read.
    pub whole_history_seconds: f64,
    pub whole_history_records: u64,
    pub database_bytes: u64,
    pub bytes_per_entry: f64,
    pub peak_rss_mb: Option<f64>,
}

/// How many records of the measured tenant and of the others each month holds.
#[derive(Debug, Clone, Copy)]
struct Month {
    tenant: u64,
    others: u64,
}

fn plan(cfg: &GrowBench) -> Vec<Month> {
    let rest = cfg.entries - cfg.month_records;
    // The measured tenant has a quarter of its measured month in every other month, as far as
    // half the rest allows; the other tenants share the rest evenly over the year.
    let other_months = (MONTHS - 1) as u64;
    let tenant_other = (cfg.month_records / 4).min(rest / 2 / other_months);
    let others = rest - tenant_other * other_months;
    (0..MONTHS)
        .map(|m| {
            let share = others / MONTHS as u64 + u64::from((m as u64) < others % MONTHS as u64);
            Month {
                tenant: if m == MEASURED_MONTH {
                    cfg.month_records
                } else {
                    tenant_other
                },
                others: share,
            }
        })
        .collect()
}

/// One record to sign: node, seq, tenant, end of its 10-second interval, month.
type Planned = (usize, u64, usize, Timestamp, usize);

/// The records of the year in log order, a chunk at a time.
struct Records {
    months: Vec<Month>,
    year_start: Timestamp,
    tenants: usize,
    month: usize,
    /// Next record within the month.
    j: u64,
    seqs: Vec<u64>,
    /// Only the measured tenant's records (the others' are skipped, their times left empty).
    only_measured: bool,
}

impl Records {
    fn next_chunk(&mut self, n: usize) -> Vec<Planned> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n && self.month < self.months.len() {
            let m = self.months[self.month];
            let k = m.tenant + m.others;
            if self.j >= k {
                self.month += 1;
                self.j = 0;
                continue;
            }
            let ticks = k.div_ceil(NODES as u64);
            let (tick, node) = (self.j / NODES as u64, (self.j % NODES as u64) as usize);
            let slot = tick * SLOTS / ticks;
            let start = self.year_start.unix() + self.month as i64 * MONTH_DAYS * 86_400;
            let end = Timestamp::from_unix(start + 10 * (slot as i64 + 1)).expect("in range");
            // The measured tenant's records spread evenly among the others'; otherwise each node
            // serves one other tenant a month (a node measures a few tenants, not all of them,
            // and a group of appends starts at most a few hundred new streams).
            let tenant = if (self.j + 1) * m.tenant / k > self.j * m.tenant / k {
                0
            } else {
                1 + (node + 7 * self.month) % (self.tenants - 1)
            };
            self.j += 1;
            if self.only_measured && tenant != 0 {
                continue;
            }
            self.seqs[node] += 1;
            out.push((node, self.seqs[node], tenant, end, self.month));
        }
        out
    }
}

fn tenant_name(i: usize) -> String {
    format!("grow-tenant-{i:03}")
}

/// Initialises and opens an empty log at `url`, with a policy that admits a year-old record,
/// the nodes, tenants and a rate card in force from a day before `from`, all received then
/// (no price takes effect in the past); the clock is the system's again for the records.
fn open_log(
    url: &str,
    nodes: &[(String, SigningKey)],
    tenants: usize,
    from: Timestamp,
) -> Result<Ledger, StoreError> {
    let since = from.plus(-86_400);
    let ledger = super::open_history_log(url, "bench-grow-log", since)?;
    ledger.append_ledger_entry(Body::LogPolicy(LogPolicy {
        max_record_age_seconds: POLICY_RECORD_AGE_SECONDS.1,
        ..LogPolicy::default()
    }))?;
    super::register_nodes(&ledger, nodes)?;
    let names: Vec<String> = (0..tenants).map(tenant_name).collect();
    register_leases(&ledger, nodes, &names, from)?;
    ledger.append_ledger_entry(Body::RateCard(RateCard {
        region: sample::REGION.into(),
        gpu_model: "H100-SXM-80G".into(),
        lease_class: LeaseClass::OnDemand,
        currency: "CNY".into(),
        price_per_gpu_hour: Decimal::new(185, 1),
        effective_from: since,
    }))?;
    super::real_clock(&ledger);
    Ok(ledger)
}

fn sign(planned: &[Planned], nodes: &[(String, SigningKey)], tenants: &[String]) -> Vec<Envelope> {
    planned
        .par_iter()
        .map(|&(n, seq, t, end, month)| {
            let (name, key) = &nodes[n];
            let lease = lease_of(&tenants[t], t, month);
            let count = Decimal::from(GPUS_PER_LEASE);
            sample::usage_under(name, key, seq, (&tenants[t], &lease), count, end)
        })
        .collect()
}

/// GPUs each lease covers on each of its nodes: half of a sample node, so that the measured
/// tenant (all year, on every node) and the tenant a node serves in a month share it.
const GPUS_PER_LEASE: u32 = sample::NODE_GPUS / 2;

/// The lease tenant `t` (named `name`) bills under in `month`: the measured tenant's one lease,
/// or another tenant's lease of that month.
fn lease_of(name: &str, t: usize, month: usize) -> String {
    if t == 0 {
        sample::lease(name)
    } else {
        format!("{}-m{month:02}", sample::lease(name))
    }
}

/// Registers the tenants and their leases: the measured tenant's on every node all year, and
/// per other tenant and month one lease of the nodes that serve it that month (as
/// [`Records::next_chunk`] lays them out), for that month.
fn register_leases(
    ledger: &Ledger,
    nodes: &[(String, SigningKey)],
    names: &[String],
    year_start: Timestamp,
) -> Result<(), StoreError> {
    let all: Vec<&str> = nodes.iter().map(|(n, _)| n.as_str()).collect();
    for body in sample::parties(&names[0], &all, GPUS_PER_LEASE) {
        ledger.append_ledger_entry(body)?;
    }
    for name in &names[1..] {
        ledger.append_ledger_entry(Body::TenantRegistered(
            gpuledger::core::record::TenantRegistered {
                tenant: name.clone(),
            },
        ))?;
    }
    for month in 0..MONTHS {
        let mut served: std::collections::BTreeMap<usize, Vec<&str>> = Default::default();
        for (n, node) in all.iter().enumerate() {
            served
                .entry(1 + (n + 7 * month) % (names.len() - 1))
                .or_default()
                .push(node);
        }
        let from = year_start.plus(month as i64 * MONTH_DAYS * 86_400);
        for (t, nodes) in served {
            let Body::LeaseRegistered(mut lease) = sample::lease_on(
                &lease_of(&names[t], t, month),
                &names[t],
                &nodes,
                GPUS_PER_LEASE,
            ) else {
                unreachable!("lease_on makes a lease")
            };
            lease.from = from;
            lease.to = Some(from.plus(MONTH_DAYS * 86_400));
            ledger.append_ledger_entry(Body::LeaseRegistered(lease))?;
        }
    }
    Ok(())
}

/// Appends `envs` from [`CLIENTS`] threads in batches of [`BATCH`]; every record must be
/// accepted. Returns the seconds it took.
fn append(ledger: &Ledger, envs: Vec<Envelope>) -> Result<f64, StoreError> {
    let batches: Vec<Vec<Envelope>> = envs.chunks(BATCH).map(<[Envelope]>::to_vec).collect();
    let batches: Vec<Mutex<Option<Vec<Envelope>>>> =
        batches.into_iter().map(|b| Mutex::new(Some(b))).collect();
    let next = AtomicUsize::new(0);
    let failed: Mutex<Option<StoreError>> = Mutex::new(None);
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..CLIENTS {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(slot) = batches.get(i) else { return };
                let batch = slot.lock().expect("batch lock").take().expect("taken once");
                match append_one(ledger, batch) {
                    Ok(outcomes) => {
                        if let Some(bad) = outcomes
                            .iter()
                            .find(|o| !matches!(o, Outcome::Accepted { .. }))
                        {
                            *failed.lock().expect("lock") = Some(StoreError::Refused(format!(
                                "a benchmark record was not accepted: {bad:?}"
                            )));
                            return;
                        }
                    }
                    Err(e) => {
                        *failed.lock().expect("lock") = Some(e);
                        return;
                    }
                }
            });
        }
    });
    match failed.into_inner().expect("lock") {
        Some(e) => Err(e),
        None => Ok(started.elapsed().as_secs_f64()),
    }
}

#[cfg(feature = "bench-unchecked-append")]
fn append_one(ledger: &Ledger, batch: Vec<Envelope>) -> Result<Vec<Outcome>, StoreError> {
    ledger.append_unchecked_signatures(batch)
}

#[cfg(not(feature = "bench-unchecked-append"))]
fn append_one(ledger: &Ledger, batch: Vec<Envelope>) -> Result<Vec<Outcome>, StoreError> {
    ledger.append(batch)
}

/// Grows `ledger` by `entries` records of `records`, signed a chunk at a time (not timed) and
/// appended (timed); returns the append rate of each million, and the seconds spent signing
/// and appending.
fn grow(
    ledger: &Ledger,
    mut records: Records,
    entries: u64,
    nodes: &[(String, SigningKey)],
    tenants: &[String],
    progress: &(dyn Fn(&str) + Sync),
) -> Result<(Vec<f64>, f64, f64), StoreError> {
    let (mut appended, mut sign_seconds, mut append_seconds) = (0u64, 0.0, 0.0);
    let mut million_seconds = 0.0;
    let mut rate_per_million = Vec::new();
    let whole = Instant::now();
    while appended < entries {
        let started = Instant::now();
        let planned = records.next_chunk(CHUNK);
        let envs = sign(&planned, nodes, tenants);
        sign_seconds += started.elapsed().as_secs_f64();
        let secs = append(ledger, envs)?;
        append_seconds += secs;
        million_seconds += secs;
        appended += planned.len() as u64;
        if appended.is_multiple_of(1_000_000) || appended == entries {
            let n = (appended - 1) % 1_000_000 + 1;
            let rate = (n as f64 / million_seconds).round();
            rate_per_million.push(rate);
            million_seconds = 0.0;
            let left =
                whole.elapsed().as_secs_f64() / appended as f64 * (entries - appended) as f64;
            progress(&format!(
                "{appended} records appended; this million at {rate} records/s; about {left:.0} s left"
            ));
        }
    }
    Ok((rate_per_million, sign_seconds, append_seconds))
}

/// Opens a log grown by an earlier run (`--reuse`).
fn open_existing(url: &str) -> Result<Ledger, StoreError> {
    let log_key = sample::key("bench-grow-log");
    store::init(url, &log_key, sample::ORIGIN)?;
    Ledger::open(url, log_key)
}

/// Times the reads of the measured tenant-month on `ledger`.
fn reads(ledger: &Ledger, month: Period) -> Result<Reads, StoreError> {
    let size = ledger.reads().size()?;
    let started = Instant::now();
    let rated = ledger
        .reads()
        .run(|c| invoices::preview(c, TENANT, month, size, Default::default()))?;
    let cny = super::cny_lines(rated)?;
    let preview_seconds = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let cert = ledger.issuance().certificate(CertificateRequest {
        tenant: TENANT.into(),
        period: month,
        scope: Scope::default(),
    })?;
    let certificate_seconds = started.elapsed().as_secs_f64();
    // A day in the middle of the month, by hour.
    let day = month.from.plus(14 * 86_400);
    let started = Instant::now();
    let rows = ledger.reads().run(|c| {
        let mut agg = Aggregator::new(day, day.plus(86_400), Vec::new(), Some(Window::Hour));
        usage::aggregate(c, Some(TENANT), day, day.plus(86_400), &mut agg)?;
        Ok(agg.finish())
    })?;
    let usage_day_seconds = started.elapsed().as_secs_f64();
    let started = Instant::now();
    let by_record = ledger.reads().run(|c| {
        let mut agg = Aggregator::new(day, day.plus(86_400), Vec::new(), Some(Window::Hour));
        usage::aggregate_records(c, Some(TENANT), day, day.plus(86_400), &mut agg)?;
        Ok(agg.finish())
    })?;
    let usage_day_records_seconds = started.elapsed().as_secs_f64();
    if by_record != rows {
        return Err(StoreError::Corrupt(
            "the usage of a day from the rollups differs from its records".into(),
        ));
    }
    let (select_seconds, fetch_and_parse_seconds) = ledger.reads().run(|c| {
        let started = Instant::now();
        let idxs = usage::starting_in(c, TENANT, month.from, month.to, size)?;
        let selected = started.elapsed().as_secs_f64();
        let started = Instant::now();
        usage::for_each_of(c, Some(TENANT), &idxs, &mut |_, _, _, _| {})?;
        Ok((selected, started.elapsed().as_secs_f64()))
    })?;
    Ok(Reads {
        select_seconds: round(select_seconds, 3),
        fetch_and_parse_seconds: round(fetch_and_parse_seconds, 3),
        log_entries: size,
        preview_seconds: round(preview_seconds, 3),
        preview_total: rating::total(&cny).to_string(),
        certificate_seconds: round(certificate_seconds, 3),
        certificate_records: cert.entries.count,
        usage_day_seconds: round(usage_day_seconds, 4),
        usage_day_records_seconds: round(usage_day_records_seconds, 3),
        usage_day_records: rows.iter().map(|r| r.usage_records).sum(),
    })
}

/// The database's size in bytes: the SQLite file with its WAL, or PostgreSQL's
/// `pg_database_size`.
fn database_bytes(url: &str) -> Result<u64, StoreError> {
    match store::conn::backend_of(url)? {
        store::conn::Backend::Sqlite => {
            let path = url.trim_start_matches("sqlite:").trim_start_matches("//");
            Ok(["", "-wal"]
                .iter()
                .filter_map(|s| std::fs::metadata(format!("{path}{s}")).ok())
                .map(|m| m.len())
                .sum())
        }
        store::conn::Backend::Postgres => {
            let mut c = store::connect(url)?;
            let n: i64 = diesel::select(diesel::dsl::sql::<diesel::sql_types::BigInt>(
                "pg_database_size(current_database())",
            ))
            .get_result(&mut c)?;
            Ok(n as u64)
        }
    }
}

/// Refuses sizes the benchmark cannot lay out.
fn check(cfg: &GrowBench) -> Result<(), StoreError> {
    if cfg.entries == 0 || !cfg.entries.is_multiple_of(CHUNK as u64) {
        return Err(StoreError::Refused(format!(
            "--entries must be a positive multiple of {CHUNK}"
        )));
    }
    if cfg.month_records == 0 || cfg.month_records > cfg.entries / 2 || cfg.tenants < 2 {
        return Err(StoreError::Refused(
            "--month-records must be above 0 and at most half of --entries, --tenants at least 2"
                .into(),
        ));
    }
    Ok(())
}

/// Reads every usage record of the measured tenant in the whole history (no selection by
/// period): how many, and in how many seconds.
fn whole_history(ledger: &Ledger) -> Result<(u64, f64), StoreError> {
    let started = Instant::now();
    let mut records = 0u64;
    ledger
        .reads()
        .run(|c| usage::for_each_usage(c, Some(TENANT), u64::MAX >> 2, &mut |_| records += 1))?;
    Ok((records, started.elapsed().as_secs_f64()))
}

/// Appends to `ledger` the measured month laid out exactly as in the grown log, with the other
/// months' records left out: the same records at the same times on the same nodes.
fn fill_measured_month(
    ledger: &Ledger,
    cfg: &GrowBench,
    measured: Month,
    month_from: Timestamp,
    (nodes, tenants): (&[(String, SigningKey)], &[String]),
) -> Result<(), StoreError> {
    let mut only = Records {
        months: vec![measured],
        year_start: month_from,
        tenants: cfg.tenants,
        month: 0,
        j: 0,
        seqs: vec![0; NODES],
        only_measured: true,
    };
    loop {
        let planned = only.next_chunk(CHUNK);
        if planned.is_empty() {
            return Ok(());
        }
        append(ledger, sign(&planned, nodes, tenants))?;
    }
}

/// Refuses a reused log whose measured month is not the one this configuration lays out.
fn check_grown(cfg: &GrowBench, grown: &Reads) -> Result<(), StoreError> {
    if grown.certificate_records == cfg.month_records {
        return Ok(());
    }
    Err(StoreError::Refused(format!(
        "the measured month of {} holds {} records, not {}: grown on another day or with other settings",
        store::conn::redact(&cfg.database_url),
        grown.certificate_records,
        cfg.month_records
    )))
}

/// `sqlite` or `postgres`, for the report.
fn backend_name(url: &str) -> Result<&'static str, StoreError> {
    Ok(match store::conn::backend_of(url)? {
        store::conn::Backend::Sqlite => "sqlite",
        store::conn::Backend::Postgres => "postgres",
    })
}

/// Where the benchmark's records fall: the months' plan, the year and the measured month, the
/// signing nodes and the tenants.
struct Layout<'a> {
    months: &'a [Month],
    year_start: Timestamp,
    month_from: Timestamp,
    nodes: &'a [(String, SigningKey)],
    tenants: &'a [String],
}

impl Layout<'_> {
    /// The grown log (reused as it is with `reuse`), with the append rate per million records,
    /// and the seconds spent signing and appending.
    fn grown(
        &self,
        cfg: &GrowBench,
        progress: &(dyn Fn(&str) + Sync),
    ) -> Result<(Ledger, Vec<f64>, f64, f64), StoreError> {
        if cfg.reuse {
            return Ok((open_existing(&cfg.database_url)?, Vec::new(), 0.0, 0.0));
        }
        progress("opening the log to grow");
        let ledger = open_log(&cfg.database_url, self.nodes, cfg.tenants, self.year_start)?;
        let records = Records {
            months: self.months.to_vec(),
            year_start: self.year_start,
            tenants: cfg.tenants,
            month: 0,
            j: 0,
            seqs: vec![0; NODES],
            only_measured: false,
        };
        let (rates, sign, append) = grow(
            &ledger,
            records,
            cfg.entries,
            self.nodes,
            self.tenants,
            progress,
        )?;
        Ok((ledger, rates, sign, append))
    }

    /// The fresh log holding only the measured month (reused as it is with `reuse`).
    fn fresh(
        &self,
        cfg: &GrowBench,
        progress: &(dyn Fn(&str) + Sync),
    ) -> Result<Ledger, StoreError> {
        if cfg.reuse {
            return open_existing(&cfg.fresh_database_url);
        }
        progress("filling a fresh log with the measured tenant-month only");
        let fresh = open_log(
            &cfg.fresh_database_url,
            self.nodes,
            cfg.tenants,
            self.year_start,
        )?;
        fill_measured_month(
            &fresh,
            cfg,
            self.months[MEASURED_MONTH],
            self.month_from,
            (self.nodes, self.tenants),
        )?;
        Ok(fresh)
    }
}

/// Runs the benchmark; `progress` receives human-readable phase names.
pub fn run_grow(
    cfg: &GrowBench,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<GrowResult, StoreError> {
    check(cfg)?;
    let now = Timestamp::now().unix();
    let year_end = Timestamp::from_unix(now - now % 86_400).expect("in range");
    let year_start = year_end.plus(-(MONTHS as i64) * MONTH_DAYS * 86_400);
    let month_from = year_start.plus(MEASURED_MONTH as i64 * MONTH_DAYS * 86_400);
    let month = Period {
        from: month_from,
        to: month_from.plus(MONTH_DAYS * 86_400),
    };
    let nodes = super::sample_signers("grow-node", NODES);
    let tenants: Vec<String> = (0..cfg.tenants).map(tenant_name).collect();
    let months = plan(cfg);
    let tenant_records: u64 = months.iter().map(|m| m.tenant).sum();

    let layout = Layout {
        months: &months,
        year_start,
        month_from,
        nodes: &nodes,
        tenants: &tenants,
    };
    let upkeep_before = gpuledger::store::rollups::upkeep_seconds();
    let (ledger, rate_per_million, sign_seconds, append_seconds) = layout.grown(cfg, progress)?;
    let rollup_upkeep_seconds = gpuledger::store::rollups::upkeep_seconds() - upkeep_before;
    progress("measuring the grown log");
    let grown = reads(&ledger, month)?;
    let grown_again = reads(&ledger, month)?;
    check_grown(cfg, &grown)?;
    let (whole_history_records, whole_history_seconds) = whole_history(&ledger)?;
    let database_bytes = database_bytes(&cfg.database_url)?;
    let size = ledger.reads().size()?;
    drop(ledger);

    let fresh_ledger = layout.fresh(cfg, progress)?;
    progress("measuring the fresh log");
    let fresh = reads(&fresh_ledger, month)?;
    let fresh_again = reads(&fresh_ledger, month)?;
    let first = rate_per_million.first().copied();
    let last = rate_per_million.last().copied();
    Ok(GrowResult {
        backend: backend_name(&cfg.database_url)?.into(),
        signatures_checked: !cfg!(feature = "bench-unchecked-append"),
        records: cfg.entries,
        tenants: cfg.tenants,
        month_records: cfg.month_records,
        tenant_records,
        first_million_per_s: first,
        last_million_per_s: last,
        last_vs_first_percent: first.zip(last).map(|(f, l)| round((l - f) / f * 100.0, 1)),
        rate_per_million,
        append_seconds: round(append_seconds, 1),
        rollup_upkeep_seconds: round(rollup_upkeep_seconds, 1),
        sign_seconds: round(sign_seconds, 1),
        grown,
        grown_again,
        fresh,
        fresh_again,
        whole_history_seconds: round(whole_history_seconds, 3),
        whole_history_records,
        database_bytes,
        bytes_per_entry: round(database_bytes as f64 / size as f64, 1),
        peak_rss_mb: super::server::peak_rss_mb(std::process::id()),
    })
}

/// The reads measured on one log, for the report.
fn write_reads(f: &mut std::fmt::Formatter<'_>, name: &str, r: &Reads) -> std::fmt::Result {
    writeln!(f, "{name} ({} entries):", r.log_entries)?;
    writeln!(
        f,
        "  invoice preview:      {} s, total {} CNY",
        r.preview_seconds, r.preview_total
    )?;
    writeln!(
        f,
        "  certificate:          {} s, {} records",
        r.certificate_seconds, r.certificate_records
    )?;
    writeln!(
        f,
        "  usage of one day:     {} s from the rollups, {} s record by record, {} records",
        r.usage_day_seconds, r.usage_day_records_seconds, r.usage_day_records
    )?;
    writeln!(
        f,
        "  the month's records:  selected in {} s, read and parsed in {} s",
        r.select_seconds, r.fetch_and_parse_seconds
    )
}

impl std::fmt::Display for GrowResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let checks = if self.signatures_checked {
            "full append"
        } else {
            "append without signature checks"
        };
        writeln!(
            f,
            "backend:                {} ({checks}, {CLIENTS} clients × batches of {BATCH})",
            self.backend
        )?;
        writeln!(
            f,
            "records:                {} of {} tenants; {} of {TENANT} ({} in the measured month)",
            self.records, self.tenants, self.tenant_records, self.month_records
        )?;
        if let (Some(first), Some(last), Some(change)) = (
            self.first_million_per_s,
            self.last_million_per_s,
            self.last_vs_first_percent,
        ) {
            writeln!(f, "append, first million:  {first} records/s")?;
            writeln!(f, "append, last million:   {last} records/s ({change:+}%)")?;
            writeln!(f, "append, each million:   {:?}", self.rate_per_million)?;
            writeln!(
                f,
                "time appending:         {} s (signing, not timed: {} s)",
                self.append_seconds, self.sign_seconds
            )?;
            writeln!(
                f,
                "rollup upkeep:          {} s of the time appending ({:.1} %)",
                self.rollup_upkeep_seconds,
                100.0 * self.rollup_upkeep_seconds / self.append_seconds.max(1e-9)
            )?;
        } else {
            writeln!(f, "append:                 not measured (logs reused)")?;
        }
        for (name, r) in [
            ("grown log", &self.grown),
            ("grown log, again", &self.grown_again),
            ("fresh log", &self.fresh),
            ("fresh log, again", &self.fresh_again),
        ] {
            write_reads(f, name, r)?;
        }
        writeln!(
            f,
            "whole-history read:     {} s for {} records of {TENANT} (what these reads cost before)",
            self.whole_history_seconds, self.whole_history_records
        )?;
        writeln!(
            f,
            "database:               {} bytes, {} bytes per entry",
            self.database_bytes, self.bytes_per_entry
        )?;
        match self.peak_rss_mb {
            Some(m) => write!(f, "peak RSS:               {m} MB"),
            None => write!(f, "peak RSS:               not available"),
        }
    }
}
