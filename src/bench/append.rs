//! `gpuledger bench append`: append throughput, measured against a raw-insert baseline in the
//! same database and run. Four rates: signature verification alone, append without signature
//! checks, the full append, and the same rows inserted raw (no hashing, no checks).

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use ed25519_dalek::SigningKey;
use gpuledger::core::envelope::{self, Envelope};
use gpuledger::core::outcome::Outcome;
use gpuledger::core::time::Timestamp;
use gpuledger::sample;
use gpuledger::store::conn::per_backend;
use gpuledger::store::{self, Ledger, StoreError};
use rayon::prelude::*;
use rust_decimal::Decimal;
use serde::Serialize;
use std::sync::Mutex;
use std::time::Instant;

/// Benchmark settings.
#[derive(Debug, Clone)]
pub struct AppendBench {
    pub database_url: String,
    pub records: usize,
    pub signers: usize,
    pub batch: usize,
    /// Threads submitting batches at once.
    pub clients: usize,
}

/// Measured rates, records per second.
#[derive(Debug, Clone, Serialize)]
pub struct AppendRates {
    pub backend: String,
    pub records: usize,
    pub batch: usize,
    /// Threads the strict verification ran on (all cores).
    pub threads: usize,
    /// Strict Ed25519 verification alone (`verify_strict` on every signature), on all cores.
    pub strict_verify_per_s: f64,
    /// `Ledger::append` with signatures trusted; `None` unless built with the
    /// `bench-unchecked-append` feature (the production API has no such append).
    pub append_without_signature_checks_per_s: Option<f64>,
    pub full_append_per_s: f64,
    pub raw_insert_baseline_per_s: f64,
    /// full_append / raw_insert_baseline.
    pub full_vs_raw: f64,
    /// full_append / min(strict_verify, append_without_signature_checks): the share of the
    /// slower of its two halves that the whole keeps (target ≥ 0.65, docs/BENCHMARKS.md);
    /// `None` when the append without signature checks was not measured.
    pub full_vs_bound: Option<f64>,
}

diesel::table! {
    bench_raw (idx) {
        idx -> BigInt,
        kind -> Text,
        signer -> Text,
        seq -> BigInt,
        tenant -> Nullable<Text>,
        received_at -> BigInt,
        content_hash -> Binary,
        leaf -> Binary,
        leaf_hash -> Binary,
        stream -> Nullable<Text>,
        start_at -> Nullable<BigInt>,
        end_at -> Nullable<BigInt>,
    }
}

#[derive(Insertable)]
#[diesel(table_name = bench_raw, treat_none_as_default_value = false)]
struct RawRow {
    idx: i64,
    kind: String,
    signer: String,
    seq: i64,
    tenant: Option<String>,
    received_at: i64,
    content_hash: Vec<u8>,
    leaf: Vec<u8>,
    leaf_hash: Vec<u8>,
    stream: Option<String>,
    start_at: Option<i64>,
    end_at: Option<i64>,
}

fn generate(
    prefix: &str,
    signers: usize,
    records: usize,
    progress: &(dyn Fn(&str) + Sync),
) -> (Vec<(String, SigningKey)>, Vec<Envelope>) {
    let keys = super::sample_signers(prefix, signers);
    if records > 0 {
        progress(&format!("signing {records} records for {prefix}"));
    }
    // Each signer measures contiguous 10-second slots ending now: records never overlap.
    let now = Timestamp::now();
    let per_signer = records.div_ceil(signers) as i64;
    let envs = (0..records)
        .into_par_iter()
        .map(|i| {
            let (name, key) = &keys[i % signers];
            let seq = (i / signers) as u64 + 1;
            let count = Decimal::from(1 + (i % 8) as i64);
            sample::usage(
                name,
                key,
                seq,
                &tenant_of(i % signers, signers),
                count,
                now.plus(-10 * (per_signer - seq as i64)),
            )
        })
        .collect();
    (keys, envs)
}

/// The tenant of signer `j` of `signers`: five tenants, or more where five would each lease
/// more than [`gpuledger::core::limits::MAX_LEASE_NODES`] nodes (each signer is a node that
/// serves one tenant).
fn tenant_of(j: usize, signers: usize) -> String {
    let tenants = 5.max(signers.div_ceil(gpuledger::core::limits::MAX_LEASE_NODES / 2));
    format!("tenant-{}", j % tenants)
}

/// What one client calls per batch: [`Ledger::append`], or the bench-only unchecked append.
type AppendFn<'a> = dyn Fn(&Ledger, Vec<Envelope>) -> Result<Vec<Outcome>, StoreError> + Sync + 'a;

fn run_clients(
    ledger: &Ledger,
    envs: Vec<Envelope>,
    batch: usize,
    clients: usize,
    append: &AppendFn,
) -> Result<f64, StoreError> {
    let total = envs.len();
    let batches: Mutex<std::vec::IntoIter<Vec<Envelope>>> = Mutex::new(
        envs.chunks(batch)
            .map(|c| c.to_vec())
            .collect::<Vec<_>>()
            .into_iter(),
    );
    let started = Instant::now();
    let result: Mutex<Result<(), StoreError>> = Mutex::new(Ok(()));
    std::thread::scope(|s| {
        for _ in 0..clients {
            s.spawn(|| loop {
                let next = batches.lock().expect("lock").next();
                let Some(b) = next else { break };
                match append(ledger, b) {
                    Ok(outs) => {
                        if let Some(bad) =
                            outs.iter().find(|o| !matches!(o, Outcome::Accepted { .. }))
                        {
                            *result.lock().expect("lock") = Err(StoreError::Refused(format!(
                                "bench record not accepted: {bad:?}"
                            )));
                            break;
                        }
                    }
                    Err(e) => {
                        *result.lock().expect("lock") = Err(e);
                        break;
                    }
                }
            });
        }
    });
    result.into_inner().expect("lock")?;
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

/// Runs the benchmark; `progress` receives human-readable phase names.
pub fn run_append(
    cfg: &AppendBench,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<AppendRates, StoreError> {
    let ledger = super::open_empty_log(&cfg.database_url, "bench-log")?;
    let records = prepare(&ledger, cfg, progress)?;
    let sig_rate = strict_verify_rate(&records.envs_b, &records.keys_b, progress);
    let no_sig = unchecked_append_rate(&ledger, cfg, records.envs_a, progress)?;
    progress("full append");
    let full = run_clients(
        &ledger,
        records.envs_b.clone(),
        cfg.batch,
        cfg.clients,
        &Ledger::append,
    )?;

    progress("raw insert baseline");
    let raw = raw_baseline(&cfg.database_url, &records.envs_b, cfg.batch)?;
    let backend = match store::conn::backend_of(&cfg.database_url)? {
        store::conn::Backend::Sqlite => "sqlite",
        store::conn::Backend::Postgres => "postgres",
    };
    Ok(AppendRates {
        backend: backend.into(),
        records: cfg.records,
        batch: cfg.batch,
        threads: rayon::current_num_threads(),
        strict_verify_per_s: sig_rate.round(),
        append_without_signature_checks_per_s: no_sig.map(f64::round),
        full_append_per_s: full.round(),
        raw_insert_baseline_per_s: raw.round(),
        full_vs_raw: super::round(full / raw, 2),
        full_vs_bound: no_sig.map(|n| super::round(full / sig_rate.min(n), 2)),
    })
}

/// The two record sets of a run, each signed by its own signers: set A for the append without
/// signature checks, set B for strict verification, the full append and the raw baseline.
struct Records {
    envs_a: Vec<Envelope>,
    keys_b: Vec<(String, SigningKey)>,
    envs_b: Vec<Envelope>,
}

/// Signs both record sets and registers their signers, tenants and leases on `ledger`.
fn prepare(
    ledger: &Ledger,
    cfg: &AppendBench,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Records, StoreError> {
    // The records of the unchecked phase, only where that phase runs.
    let records_a = if cfg!(feature = "bench-unchecked-append") {
        cfg.records
    } else {
        0
    };
    let (keys_a, envs_a) = generate("bench-a", cfg.signers, records_a, progress);
    let (keys_b, envs_b) = generate("bench-b", cfg.signers, cfg.records, progress);
    super::register_nodes(ledger, keys_a.iter().chain(&keys_b))?;
    // Each tenant leases the whole nodes of its signers (of both phases).
    let mut by_tenant: std::collections::BTreeMap<String, Vec<&str>> = Default::default();
    for (j, (name, _)) in keys_a.iter().enumerate().chain(keys_b.iter().enumerate()) {
        by_tenant
            .entry(tenant_of(j, cfg.signers))
            .or_default()
            .push(name.as_str());
    }
    for (tenant, nodes) in &by_tenant {
        super::register_sample_parties(ledger, tenant, nodes)?;
    }
    Ok(Records {
        envs_a,
        keys_b,
        envs_b,
    })
}

/// Strict Ed25519 verification alone of every signature of `envs`, on all cores (records/s);
/// the envelope checks and key look-ups before it are not timed.
fn strict_verify_rate(
    envs: &[Envelope],
    keys: &[(String, SigningKey)],
    progress: &(dyn Fn(&str) + Sync),
) -> f64 {
    progress("strict signature verification alone, on all cores");
    let checked: Vec<_> = envs
        .par_iter()
        .map(|e| {
            e.clone()
                .check(sample::ORIGIN)
                .expect("sample records are valid")
        })
        .collect();
    let key_of = |signer: &str| {
        keys.iter()
            .find(|(n, _)| n == signer)
            .map(|(_, k)| k.verifying_key())
            .expect("known")
    };
    let vks: Vec<_> = checked.iter().map(|c| key_of(&c.envelope.signer)).collect();
    let started = Instant::now();
    let items: Vec<_> = checked
        .iter()
        .zip(&vks)
        .map(|(c, k)| (c.message.as_slice(), &c.signature, k))
        .collect();
    let ok = envelope::verify_strict_many(&items);
    let rate = envs.len() as f64 / started.elapsed().as_secs_f64();
    assert!(ok.iter().all(|b| *b), "sample signatures verify");
    rate
}

/// The append without signature checks of `envs` (records/s): `None`, not measured, unless
/// built with the `bench-unchecked-append` feature (the production API has no such append).
fn unchecked_append_rate(
    ledger: &Ledger,
    cfg: &AppendBench,
    envs: Vec<Envelope>,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<Option<f64>, StoreError> {
    #[cfg(feature = "bench-unchecked-append")]
    let rate = {
        progress("append without signature checks");
        let unchecked: &AppendFn = &|l: &Ledger, b| l.append_unchecked_signatures(b);
        Some(run_clients(
            ledger,
            envs,
            cfg.batch,
            cfg.clients,
            unchecked,
        )?)
    };
    #[cfg(not(feature = "bench-unchecked-append"))]
    let rate = {
        let _ = (ledger, cfg);
        drop(envs);
        progress("append without signature checks: not measured (a build without the bench-unchecked-append feature)");
        None
    };
    Ok(rate)
}

/// The same rows, one transaction per batch, no hashing and no checks.
fn raw_baseline(url: &str, envs: &[Envelope], batch: usize) -> Result<f64, StoreError> {
    let mut conn = store::connect(url)?;
    let blob = if matches!(conn, store::DbConn::Pg(_)) {
        "BYTEA"
    } else {
        "BLOB"
    };
    conn.batch_execute(&format!(
        "DROP TABLE IF EXISTS bench_raw;
         CREATE TABLE bench_raw (idx BIGINT PRIMARY KEY NOT NULL, kind TEXT NOT NULL, signer TEXT NOT NULL,
           seq BIGINT NOT NULL, tenant TEXT, received_at BIGINT NOT NULL, content_hash {blob} NOT NULL,
           leaf {blob} NOT NULL, leaf_hash {blob} NOT NULL, stream TEXT, start_at BIGINT, end_at BIGINT,
           UNIQUE (signer, seq));
         CREATE INDEX bench_raw_stream ON bench_raw (stream, start_at);"
    ))?;
    let now = Timestamp::now().unix();
    let rows: Vec<RawRow> = envs
        .iter()
        .enumerate()
        .map(|(i, e)| RawRow {
            idx: i as i64,
            kind: e.kind.clone(),
            signer: e.signer.clone(),
            seq: e.seq as i64,
            tenant: e
                .body
                .get("tenant")
                .and_then(|t| t.as_str())
                .map(str::to_owned),
            received_at: now,
            content_hash: vec![0; 32],
            leaf: serde_json::to_vec(e).expect("serialises"),
            leaf_hash: vec![0; 32],
            stream: Some(format!("{}|{}", e.signer, i % 5)),
            start_at: Some(now - 10 * i as i64),
            end_at: Some(now - 10 * i as i64 + 10),
        })
        .collect();
    let started = Instant::now();
    for chunk in rows.chunks(batch) {
        conn.transaction(|c| {
            for part in chunk.chunks(1000) {
                per_backend!(c, |c| diesel::insert_into(bench_raw::table)
                    .values(part)
                    .execute(c))?;
            }
            Ok::<_, StoreError>(())
        })?;
    }
    let rate = envs.len() as f64 / started.elapsed().as_secs_f64();
    conn.batch_execute("DROP TABLE bench_raw")?;
    Ok(rate)
}

impl std::fmt::Display for AppendRates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let not_measured = "not measured (build with --features bench-unchecked-append)";
        writeln!(f, "backend:                          {}", self.backend)?;
        writeln!(
            f,
            "records per phase:                {} (batches of {})",
            self.records, self.batch
        )?;
        writeln!(
            f,
            "strict verification alone:        {:>10.0} records/s ({} threads)",
            self.strict_verify_per_s, self.threads
        )?;
        match self.append_without_signature_checks_per_s {
            Some(r) => writeln!(f, "append without signature checks:  {r:>10.0} records/s")?,
            None => writeln!(f, "append without signature checks:  {not_measured}")?,
        }
        writeln!(
            f,
            "full append:                      {:>10.0} records/s",
            self.full_append_per_s
        )?;
        writeln!(
            f,
            "raw insert baseline:              {:>10.0} records/s",
            self.raw_insert_baseline_per_s
        )?;
        writeln!(
            f,
            "full append / raw baseline:       {:>10.2}",
            self.full_vs_raw
        )?;
        match self.full_vs_bound {
            Some(r) => write!(
                f,
                "full append / slower half:        {r:>10.2} (target ≥ 0.65)"
            ),
            None => write!(f, "full append / slower half:        {not_measured}"),
        }
    }
}
