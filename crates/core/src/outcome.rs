//! What happened to each record handed to the ledger.

use super::rejection::Rejection;
use serde::{Deserialize, Serialize};

/// Sequence numbers skipped by a signer: `[from, to]` were never seen before this record.
/// Gaps are allowed (a lost record may still arrive later) and reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SeqGap {
    pub from: u64,
    pub to: u64,
}

/// The outcome of one record, in the order the records were given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// Appended at `index`; committed before this outcome was returned.
    Accepted {
        index: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seq_gap: Option<SeqGap>,
    },
    /// The same record (same signer, seq and signed content) is already at `index`.
    Duplicate { index: u64 },
    /// Refused; nothing was appended.
    Rejected(Rejection),
}

impl Outcome {
    /// The log index for accepted and duplicate records.
    pub fn index(&self) -> Option<u64> {
        match self {
            Outcome::Accepted { index, .. } | Outcome::Duplicate { index } => Some(*index),
            Outcome::Rejected(_) => None,
        }
    }
}
