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
pub const LEAF_VERSION: u32 = 3;

/// The `prev` of entry 0.
pub const GENESIS_PREV: Hash = Hash([0; 32]);

/// One entry of the log, as hashed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Leaf {
    /// The leaf format version: 2.
    pub v: u32,
    /// The entry's index in the log.
    pub index: u64,
    /// When the ledger accepted the record.
    pub received_at: Timestamp,
    /// Standard base64 of the previous entry's leaf hash.
    pub prev: String,
    pub envelope: Envelope,
}

impl Leaf {
    /// A new leaf.
    pub fn new(index: u64, received_at: Timestamp, prev: &Hash, envelope: Envelope) -> Leaf {
        Leaf {
            v: LEAF_VERSION,
            index,
            received_at,
            prev: BASE64_STANDARD.encode(prev.0),
            envelope,
        }
    }

    /// The canonical leaf bytes (RFC 8785).
    pub fn to_bytes(&self) -> Vec<u8> {
        let envelope = self
            .envelope
            .canonical_bytes()
            .expect("envelopes in leaves are canonical JSON");
        leaf_bytes(self.index, self.received_at, &self.prev, &envelope)
    }

    /// Parses leaf bytes and requires them to be canonical: parsing and re-encoding must give
    /// the same bytes, so one entry has exactly one leaf hash.
    pub fn from_bytes(bytes: &[u8]) -> Result<Leaf, String> {
        let leaf: Leaf =
            serde_json::from_slice(bytes).map_err(|e| format!("leaf is not a valid entry: {e}"))?;
        if leaf.v != LEAF_VERSION {
            return Err(format!("leaf version {} is unknown", leaf.v));
        }
        if leaf.envelope.canonical_bytes().is_err() || leaf.to_bytes() != bytes {
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

/// The reason code of an entry received before an entry earlier in the log.
pub const RECEIVED_AT_DECREASED: &str = "received_at_decreased";

/// The log's receive times never decrease (§7): an entry's `received_at` is not before that of
/// any entry earlier in the log. `earlier` is the latest (largest) receive time of the entries
/// before it that the checker has seen, with that entry's index. The ledger guarantees it by
/// checking its clock (`store::clock`); `verify-log` and the bundle verifiers recheck it here.
pub fn check_received_in_order(
    earlier: Option<(u64, Timestamp)>,
    received_at: Timestamp,
) -> Result<(), String> {
    match earlier {
        Some((index, t)) if received_at < t => Err(format!(
            "received_at {received_at} is before {t}, the received_at of entry {index}: the \
             log's receive times never decrease"
        )),
        _ => Ok(()),
    }
}

/// Leaf bytes from the canonical envelope, without re-serialising it. RFC 8785 orders the
/// members `envelope, index, prev, received_at, v`; every value but the envelope is ASCII that
/// needs no escaping, so concatenation gives exactly the canonical form.
pub fn leaf_bytes(
    index: u64,
    received_at: Timestamp,
    prev_b64: &str,
    canonical_envelope: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(canonical_envelope.len() + 128);
    out.extend_from_slice(b"{\"envelope\":");
    out.extend_from_slice(canonical_envelope);
    out.extend_from_slice(
        format!(",\"index\":{index},\"prev\":\"{prev_b64}\",\"received_at\":\"{received_at}\",\"v\":{LEAF_VERSION}}}").as_bytes(),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merkle::Hash;

    #[test]
    fn receive_times_never_decrease() {
        let t = |s: i64| Timestamp::from_unix(1_800_000_000 + s).unwrap();
        assert!(check_received_in_order(None, t(0)).is_ok());
        assert!(check_received_in_order(Some((4, t(0))), t(0)).is_ok());
        assert!(check_received_in_order(Some((4, t(0))), t(1)).is_ok());
        let e = check_received_in_order(Some((4, t(10))), t(9)).unwrap_err();
        assert!(e.contains("entry 4"), "{e}");
    }

    #[test]
    fn fast_leaf_bytes_equal_the_generic_canonical_form() {
        let key = crate::sample::key("leaf-test");
        let end = Timestamp::parse("2026-11-30T12:00:10Z").unwrap();
        for (i, count) in ["1", "0.125", "8"].iter().enumerate() {
            let env = crate::sample::usage(
                "node-\u{1}x",
                &key,
                i as u64 + 1,
                "t\"1",
                count.parse().unwrap(),
                end,
            );
            let leaf = Leaf::new(1 << 40 | i as u64, end, &Hash([i as u8; 32]), env);
            assert_eq!(leaf.to_bytes(), serde_jcs::to_vec(&leaf).unwrap());
            assert_eq!(Leaf::from_bytes(&leaf.to_bytes()).unwrap(), leaf);
        }
    }
}
