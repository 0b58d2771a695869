//! The pure core: records, validation, canonical bytes, signatures, leaves, the Merkle tree and
//! checkpoints. Nothing here does I/O, reads a clock it is not handed, or knows a database.

pub mod admission;
pub mod bundle;
pub mod canonical;
pub mod certificate;
pub mod checkpoint;
pub mod decimal;
pub mod envelope;
pub mod ids;
pub mod invoice;
pub mod json;
pub mod keys;
pub mod leaf;
pub mod limits;
pub mod logcheck;
pub mod merkle;
pub mod outcome;
pub mod rating;
pub mod record;
pub mod rejection;
pub mod time;
pub mod usage;
