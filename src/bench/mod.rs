//! Benchmarks behind `gpuledger bench`: figures come from these, never from timed tests.
//!
//! - [`append`]: library append throughput against a raw-insert baseline.
//! - [`ingest`]: HTTP ingest throughput and latency with concurrent simulated agents.
//! - [`verify`]: offline verification of a certificate with a bundle of N records.
//! - [`grow`]: a log grown to ten million records: append rate as it grows, and what a
//!   tenant-month's reads cost in it and in a fresh log.
//! - [`contract`]: a tenant-year of ten million records under a contract: the invoice preview
//!   of a month and of the term from the usage rollups.

pub mod agent;
pub mod append;
pub mod contract;
pub mod grow;
pub mod ingest;
pub mod preview;
pub mod server;
pub mod verify;

pub use append::{run_append, AppendBench};

use ed25519_dalek::SigningKey;
use gpuledger::core::keys;
use gpuledger::core::record::Role;
use gpuledger::core::time::Timestamp;
use gpuledger::sample;
use gpuledger::store::{Ledger, StoreError};

/// Registers a sample tenant and its lease on a benchmark's log, so its sample records are
/// admitted (docs/PROTOCOL.md §6.7): the lease covers all [`sample::NODE_GPUS`] GPUs of each of
/// `nodes` (registered before), from [`sample::LEASE_FROM`] on.
pub fn register_sample_parties(
    ledger: &Ledger,
    tenant: &str,
    nodes: &[&str],
) -> Result<(), StoreError> {
    for body in sample::parties(tenant, nodes, sample::NODE_GPUS) {
        ledger.append_ledger_entry(body)?;
    }
    Ok(())
}

/// `n` deterministic sample signers: `<prefix>-00`, `<prefix>-01`, …, each with the key
/// `sample::key("<prefix>-<i>")`.
pub fn sample_signers(prefix: &str, n: usize) -> Vec<(String, SigningKey)> {
    (0..n)
        .map(|i| {
            (
                format!("{prefix}-{i:02}"),
                sample::key(&format!("{prefix}-{i}")),
            )
        })
        .collect()
}

/// Registers each of `nodes` on a benchmark's log, in order: the node itself (8 sample H100s,
/// [`sample::node`]), then its key as a node signer with its sample scope
/// ([`sample::node_scope`]).
pub fn register_nodes<'a>(
    ledger: &Ledger,
    nodes: impl IntoIterator<Item = &'a (String, SigningKey)>,
) -> Result<(), StoreError> {
    for (name, key) in nodes {
        ledger.append_ledger_entry(sample::node(name))?;
        ledger.register_key(
            name,
            Role::Node,
            &keys::encode_public(&key.verifying_key()),
            Some(sample::node_scope(name)),
        )?;
    }
    Ok(())
}

/// Initialises and opens the log at `url` with the log key named `key_name`, refusing one that
/// holds more than the policy entry opening writes: anything more is someone else's log.
pub fn open_empty_log(url: &str, key_name: &str) -> Result<Ledger, StoreError> {
    open_empty_log_with(url, key_name, None)
}

/// [`open_empty_log`] with the ledger clock at `at` until [`real_clock`]: a benchmark whose
/// records are months old writes the prices in force for them first, received then (no price
/// may take effect in the past, PROTOCOL §6.7). Setting the clock needs a build with the
/// `test-clock` feature; without it this refuses, naming the feature.
pub fn open_history_log(url: &str, key_name: &str, at: Timestamp) -> Result<Ledger, StoreError> {
    open_empty_log_with(url, key_name, Some(at))
}

/// Back to the system clock after [`open_history_log`].
pub fn real_clock(ledger: &Ledger) {
    #[cfg(feature = "test-clock")]
    ledger.set_clock(None);
    #[cfg(not(feature = "test-clock"))]
    let _ = ledger;
}

fn open_empty_log_with(
    url: &str,
    key_name: &str,
    at: Option<Timestamp>,
) -> Result<Ledger, StoreError> {
    let log_key = sample::key(key_name);
    gpuledger::store::init(url, &log_key, sample::ORIGIN)?;
    let ledger = match at {
        None => Ledger::open(url, log_key)?,
        #[cfg(feature = "test-clock")]
        Some(at) => Ledger::open_at(url, log_key, at)?,
        #[cfg(not(feature = "test-clock"))]
        Some(_) => {
            return Err(StoreError::Refused(
                "this benchmark writes a history whose prices take effect months back, which \
                 needs a ledger clock set back: build with `--features test-clock`"
                    .into(),
            ))
        }
    };
    let (size, _) = ledger.reads().head()?;
    if size > 1 {
        return Err(StoreError::Refused(format!(
            "the benchmark needs an empty log; {} holds {size} entries",
            gpuledger::store::conn::redact(url)
        )));
    }
    Ok(ledger)
}

/// Appends a benchmark's signed records in batches of the append limit, refusing the run at the
/// first record not accepted (a benchmark that timed refused records once measured nothing).
pub fn append_accepted(
    ledger: &Ledger,
    records: &[gpuledger::core::envelope::Envelope],
) -> Result<(), StoreError> {
    for part in records.chunks(gpuledger::core::limits::MAX_APPEND_BATCH) {
        let outcomes = ledger.append(part.to_vec())?;
        if let Some(bad) = outcomes
            .iter()
            .find(|o| !matches!(o, gpuledger::core::outcome::Outcome::Accepted { .. }))
        {
            return Err(StoreError::Refused(format!(
                "a benchmark record was not accepted: {bad:?}"
            )));
        }
    }
    Ok(())
}

/// The CNY lines a benchmark's rating came to; refused if any of its usage was unpriced (the
/// benchmarks price everything they log).
pub fn cny_lines(
    rated: gpuledger::core::invoice::Rated,
) -> Result<Vec<gpuledger::core::rating::Line>, StoreError> {
    let (lines, unpriced) = rated.period_lines();
    if !unpriced.is_empty() {
        return Err(StoreError::Refused(format!(
            "benchmark usage was unpriced: {unpriced:?}"
        )));
    }
    Ok(lines.get("CNY").cloned().unwrap_or_default())
}

pub(crate) fn round(x: f64, digits: i32) -> f64 {
    let p = 10f64.powi(digits);
    (x * p).round() / p
}
