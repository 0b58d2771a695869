//! Log entries and their leaf bytes.
//!
//! A leaf is `JCS({v, index, received_at, prev, envelope})`: the accepted envelope exactly as
//! signed, plus what the ledger adds. `prev` is the base64 leaf hash of entry `index − 1`
//! (32 zero bytes for entry 0), which makes the log a hash chain as well as a Merkle tree.
//! The Merkle leaf hash is RFC 6962's `SHA-256(0x00 ‖ leaf bytes)`.

use super::envelope::Envelope;
use super::merkle::{leaf_hash, Hash};
use super::time::Timestamp;
use base64::prelude::{Engine, BASE64_STANDARD};
use serde::{Deserialize, Serialize};

/// The leaf format version written by this code.
pub const LEAF_VERSION: u32 = 1;

/// The `prev` of entry 0.
pub const GENESIS_PREV: Hash = Hash([0; 32]);

/// One entry of the log, as hashed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Leaf {
    pub v: u32,
    pub index: u64,
    pub received_at: Timestamp,
    /// Standard base64 of the previous entry's leaf hash.
    pub prev: String,
    pub envelope: Envelope,
}

impl Leaf {
    /// A new leaf.
    pub fn new(index: u64, received_at: Timestamp, prev: &Hash, envelope: Envelope) -> Leaf {
        Leaf { v: LEAF_VERSION, index, received_at, prev: BASE64_STANDARD.encode(prev.0), envelope }
    }

    /// The canonical leaf bytes (RFC 8785).
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_jcs::to_vec(self).expect("JSON values always serialise")
    }

    /// Parses leaf bytes and requires them to be canonical: parsing and re-encoding must give
    /// the same bytes, so one entry has exactly one leaf hash.
    pub fn from_bytes(bytes: &[u8]) -> Result<Leaf, String> {
        let leaf: Leaf = serde_json::from_slice(bytes).map_err(|e| format!("leaf is not a valid entry: {e}"))?;
        if leaf.v != LEAF_VERSION {
            return Err(format!("leaf version {} is unknown", leaf.v));
        }
        if leaf.to_bytes() != bytes {
            return Err("leaf bytes are not canonical (RFC 8785)".into());
        }
        Ok(leaf)
    }

    /// The decoded `prev` hash.
    pub fn prev_hash(&self) -> Option<Hash> {
        let b = BASE64_STANDARD.decode(&self.prev).ok()?;
        Some(Hash(b.try_into().ok()?))
    }

    /// This leaf's RFC 6962 leaf hash.
    pub fn hash(&self) -> Hash {
        leaf_hash(&self.to_bytes())
    }
}
