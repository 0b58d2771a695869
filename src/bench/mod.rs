//! Benchmarks behind `gpuledger bench`: figures come from these, never from timed tests.
//!
//! - [`append`]: library append throughput against a raw-insert baseline.
//! - [`ingest`]: HTTP ingest throughput and latency with concurrent simulated agents.
//! - [`verify`]: offline verification of a certificate with a bundle of N records.

pub mod agent;
pub mod append;
pub mod ingest;
pub mod preview;
pub mod server;
pub mod verify;

pub use append::{run_append, AppendBench, AppendRates};

/// Registers sample tenants and their leases on a benchmark's log, so its sample records are
/// admitted (docs/PROTOCOL.md §6.7).
pub fn register_sample_parties(
    ledger: &crate::store::Ledger,
    tenants: &[&str],
) -> Result<(), crate::store::StoreError> {
    for t in tenants {
        for body in crate::sample::parties(t) {
            ledger.append_ledger_entry(body)?;
        }
    }
    Ok(())
}
