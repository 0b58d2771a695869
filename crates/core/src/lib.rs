//! gpuledger's pure core: records, validation, canonical bytes, signatures, leaves, the Merkle
//! tree, checkpoints, the admission rules, rating, invoices, certificates and evidence bundles.
//! Nothing here does I/O, reads a clock it is not handed, or knows a database or HTTP; the
//! crate's dependencies are the proof (ARCHITECTURE.md). Features: `openapi` adds utoipa
//! schemas for the server's API; `sample` adds deterministic synthetic records for tests,
//! benchmarks and the demo.

pub mod admission;
pub mod allowance;
pub mod bundle;
pub mod canonical;
pub mod certificate;
pub mod checkpoint;
pub mod clock;
pub mod contract;
pub mod cosignature;
pub mod decimal;
pub mod dispute;
pub mod envelope;
pub mod fleet;
pub mod ids;
pub mod invoice;
pub mod json;
pub mod keys;
pub mod leaf;
pub mod limits;
pub mod logcheck;
pub mod merkle;
pub mod multiproof;
pub mod outcome;
pub mod prepaid;
pub mod rating;
pub mod record;
pub mod rejection;
#[cfg(any(test, feature = "sample"))]
pub mod sample;
pub mod sla;
pub mod tiles;
pub mod time;
pub mod usage;
