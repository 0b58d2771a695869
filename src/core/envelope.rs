//! The signed envelope: `{v, kind, signer, key_id, seq, body, sig}`.
//!
//! The signature is Ed25519 (strict verification) over
//! `"gpuledger/v1/<kind>\n" ‖ JCS({v, kind, signer, key_id, seq, body})`, where JCS is the
//! RFC 8785 canonical form. The tag binds the signature to one kind of object.

use super::canonical::{self, CanonicalError};
use super::ids::check_id;
use super::keys;
use super::limits::{MAX_ENVELOPE_BYTES, MAX_SEQ};
use super::record::{Body, Kind};
use super::rejection::{Reason, Rejection};
use super::signature_batch;
use super::time::Timestamp;
use base64::prelude::{Engine, BASE64_STANDARD};
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The only envelope version this code writes and reads.
pub const ENVELOPE_VERSION: u32 = 1;

/// A signed record as it travels on the wire and sits inside a leaf.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    pub v: u32,
    pub kind: String,
    pub signer: String,
    pub key_id: String,
    pub seq: u64,
    pub body: Value,
    /// Standard base64 of the 64-byte Ed25519 signature.
    pub sig: String,
}

/// An envelope whose shape, body and limits were checked; its signature is not yet verified.
#[derive(Debug, Clone)]
pub struct Checked {
    pub envelope: Envelope,
    pub kind: Kind,
    pub body: Body,
    /// The exact bytes the signature covers: domain tag ‖ canonical unsigned envelope.
    pub message: Vec<u8>,
    pub signature: Signature,
    /// SHA-256 of `message`: equal for the same record sent twice.
    pub content_hash: [u8; 32],
    /// The RFC 8785 bytes of the whole envelope, signature included (as it goes in the leaf).
    pub canonical: Vec<u8>,
    /// The measurement stream and interval (`Body::stream`), computed once here, in the
    /// caller's threads, for the sequencer's overlap checks and entry columns.
    pub stream: Option<(String, Timestamp, Timestamp)>,
}

impl Envelope {
    /// The bytes a signature covers, `"gpuledger/v1/<kind>\n" ‖ JCS(envelope without sig)`,
    /// and the canonical bytes of the whole envelope, `JCS(envelope)`.
    pub fn canonical_parts(&self) -> Result<(Vec<u8>, Vec<u8>), CanonicalError> {
        let mut body = Vec::with_capacity(256);
        canonical::write_value(&self.body, &mut body)?;
        // Members in RFC 8785 order: body, key_id, kind, seq, [sig,] signer, v.
        let mut head = Vec::with_capacity(body.len() + 128);
        head.extend_from_slice(b"{\"body\":");
        head.extend_from_slice(&body);
        head.extend_from_slice(b",\"key_id\":");
        canonical::write_str(&self.key_id, &mut head);
        head.extend_from_slice(b",\"kind\":");
        canonical::write_str(&self.kind, &mut head);
        head.extend_from_slice(b",\"seq\":");
        canonical::write_u64(self.seq, &mut head)?;
        let mut tail = Vec::with_capacity(self.signer.len() + 24);
        tail.extend_from_slice(b",\"signer\":");
        canonical::write_str(&self.signer, &mut tail);
        tail.extend_from_slice(b",\"v\":");
        canonical::write_u64(u64::from(self.v), &mut tail)?;
        tail.push(b'}');

        let mut message = format!("gpuledger/v1/{}\n", self.kind).into_bytes();
        message.extend_from_slice(&head);
        message.extend_from_slice(&tail);
        let mut full = head;
        full.extend_from_slice(b",\"sig\":");
        canonical::write_str(&self.sig, &mut full);
        full.extend_from_slice(&tail);
        Ok((message, full))
    }

    /// The bytes a signature covers (see [`Envelope::canonical_parts`]).
    pub fn signed_message(&self) -> Result<Vec<u8>, CanonicalError> {
        self.canonical_parts().map(|p| p.0)
    }

    /// Builds and signs an envelope.
    pub fn sign(kind: Kind, signer: &str, key: &SigningKey, seq: u64, body: &Body) -> Envelope {
        let mut env = Envelope {
            v: ENVELOPE_VERSION,
            kind: kind.as_str().to_owned(),
            signer: signer.to_owned(),
            key_id: keys::key_id(&key.verifying_key()),
            seq,
            body: body.to_value(),
            sig: String::new(),
        };
        let sig = key.sign(
            &env.signed_message()
                .expect("bodies built from records are canonical"),
        );
        env.sig = BASE64_STANDARD.encode(sig.to_bytes());
        env
    }

    /// The RFC 8785 canonical bytes of the whole envelope, signature included.
    pub fn canonical_bytes(&self) -> Result<Vec<u8>, CanonicalError> {
        self.canonical_parts().map(|p| p.1)
    }

    /// Checks everything that needs no registry: version, kind, identifiers, sequence number,
    /// body, limits, signature encoding and size. `now` is the ledger's clock.
    pub fn check(self, now: Timestamp) -> Result<Checked, Rejection> {
        if self.v != ENVELOPE_VERSION {
            return Err(Rejection::field(
                Reason::UnsupportedVersion,
                "v",
                format!(
                    "is {}; this ledger speaks version {ENVELOPE_VERSION}",
                    self.v
                ),
            ));
        }
        let kind = Kind::parse(&self.kind).ok_or_else(|| {
            Rejection::field(
                Reason::UnknownKind,
                "kind",
                format!("{:?} is not a record kind", self.kind),
            )
        })?;
        check_id(&self.signer).map_err(|m| Rejection::field(Reason::InvalidField, "signer", m))?;
        if !keys::is_key_id(&self.key_id) {
            return Err(Rejection::field(
                Reason::InvalidField,
                "key_id",
                "must be 16 lower-case hex digits",
            ));
        }
        if self.seq == 0 || self.seq > MAX_SEQ {
            return Err(Rejection::field(
                Reason::QuantityOutOfRange,
                "seq",
                format!("must be between 1 and {MAX_SEQ}"),
            ));
        }
        let body = Body::from_value(kind, &self.body, now)?;
        let sig_bytes: [u8; 64] = BASE64_STANDARD
            .decode(&self.sig)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| {
                Rejection::field(
                    Reason::InvalidField,
                    "sig",
                    "is not standard base64 of 64 bytes",
                )
            })?;
        let signature = Signature::from_bytes(&sig_bytes);
        let (message, canonical) = self
            .canonical_parts()
            .map_err(|e| Rejection::field(Reason::Malformed, "body", e))?;
        if canonical.len() > MAX_ENVELOPE_BYTES {
            return Err(Rejection::new(
                Reason::TooLarge,
                format!(
                    "the canonical envelope is {} bytes, above the limit of {MAX_ENVELOPE_BYTES}",
                    canonical.len()
                ),
            ));
        }
        let content_hash = Sha256::digest(&message).into();
        let stream = body.stream();
        Ok(Checked {
            envelope: self,
            kind,
            body,
            message,
            signature,
            content_hash,
            canonical,
            stream,
        })
    }
}

impl Checked {
    /// Strict Ed25519 verification against `key`.
    pub fn verify(&self, key: &VerifyingKey) -> bool {
        key.verify_strict(&self.message, &self.signature).is_ok()
    }
}

/// Verifies many signatures at once: batch verification over both cores, and one-by-one strict
/// verification for any chunk whose batch fails, to find exactly which records are bad.
/// Returns one bool per item. Keys must have been checked for weakness at registration.
pub fn verify_many(items: &[(&[u8], &Signature, &VerifyingKey)]) -> Vec<bool> {
    use rayon::prelude::*;
    items
        .par_chunks(BATCH)
        .flat_map_iter(|chunk| {
            // Batch verification does not refuse a small-order R as verify_strict does (with
            // R = identity and S = H(R‖A‖M)·a a batch always passes), so a chunk holding one
            // goes to the strict one-by-one check.
            let ok = chunk.iter().all(|(_, s, _)| r_has_large_order(s))
                && signature_batch::verify_batch(chunk);
            let per: Vec<bool> = if ok {
                vec![true; chunk.len()]
            } else {
                chunk
                    .iter()
                    .map(|(m, s, k)| k.verify_strict(m, s).is_ok())
                    .collect()
            };
            per.into_iter()
        })
        .collect()
}

/// Signatures per batch in [`verify_many`]: large enough that the multiscalar multiplication
/// amortises its buckets, small enough that both cores get work from a few thousand.
const BATCH: usize = 512;

/// Verifies each signature on its own with strict Ed25519 (RFC 8032 with canonical S and
/// refusal of small-order R and keys), over both cores. This is the contract's exact rule;
/// auditors' checks use it. Batch verification ([`verify_many`]) can accept a few signatures
/// this refuses (an R with a torsion component, which only the key's holder can make).
pub fn verify_strict_many(items: &[(&[u8], &Signature, &VerifyingKey)]) -> Vec<bool> {
    use rayon::prelude::*;
    items
        .par_iter()
        .map(|(m, s, k)| k.verify_strict(m, s).is_ok())
        .collect()
}

/// Whether the signature's R is not one of the encodings of a small-order point (the eight
/// points of order 1, 2, 4 and 8, with either sign bit, and the non-canonical encodings of
/// y = p − 1, p, p + 1). A byte comparison, so batches need no extra point decompression; an
/// R that is not a point at all fails the batch itself.
fn r_has_large_order(sig: &Signature) -> bool {
    let r = sig.r_bytes();
    let mut y = *r;
    y[31] &= 0x7f;
    !SMALL_ORDER_Y.contains(&y)
}

/// The y encodings (sign bit cleared) of the small-order points of edwards25519.
const SMALL_ORDER_Y: [[u8; 32]; 7] = {
    let zero = [0u8; 32];
    let mut one = [0u8; 32];
    one[0] = 1;
    let mut p_minus_1 = [0xff; 32];
    p_minus_1[0] = 0xec;
    p_minus_1[31] = 0x7f;
    let mut p = p_minus_1;
    p[0] = 0xed;
    let mut p_plus_1 = p_minus_1;
    p_plus_1[0] = 0xee;
    [
        zero,
        one,
        [
            0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef,
            0x98, 0xf0, 0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88,
            0x6d, 0x53, 0xfc, 0x05,
        ],
        [
            0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10,
            0x67, 0x0f, 0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77,
            0x92, 0xac, 0x03, 0x7a,
        ],
        p_minus_1,
        p,
        p_plus_1,
    ]
};

#[cfg(test)]
mod small_order_tests {
    use super::*;
    use curve25519_dalek::edwards::CompressedEdwardsY;

    /// The byte list agrees with decompression on every small-order point and on a sample of
    /// ordinary points.
    #[test]
    fn the_small_order_list_is_exactly_the_small_order_points() {
        for y in SMALL_ORDER_Y {
            for sign in [0u8, 0x80] {
                let mut enc = y;
                enc[31] |= sign;
                let sig = Signature::from_components(enc, [0; 32]);
                assert!(!r_has_large_order(&sig));
                if let Some(pt) = CompressedEdwardsY(enc).decompress() {
                    assert!(pt.is_small_order(), "{enc:?}");
                }
            }
        }
        // Every small-order point compresses to one of them.
        let t = curve25519_dalek::constants::EIGHT_TORSION;
        for pt in t {
            let sig = Signature::from_components(pt.compress().to_bytes(), [0; 32]);
            assert!(!r_has_large_order(&sig), "{:?}", pt.compress());
        }
        for i in 0..64u8 {
            let k = crate::sample::key(&format!("r{i}"));
            let sig = k.sign(b"m");
            assert!(r_has_large_order(&sig));
        }
    }
}
