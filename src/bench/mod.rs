//! Benchmarks behind `gpuledger bench`: figures come from these, never from timed tests.
//!
//! - [`append`]: library append throughput against a raw-insert baseline.
//! - [`ingest`]: HTTP ingest throughput and latency with concurrent simulated agents.

pub mod agent;
pub mod append;
pub mod ingest;
pub mod preview;
pub mod server;

pub use append::{run_append, AppendBench, AppendRates};
