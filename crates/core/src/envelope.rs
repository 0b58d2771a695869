//! The signed envelope: `{v, kind, signer, key_id, seq, body, sig}`.
//!
//! The signature is Ed25519 (strict verification) over
//! `"gpuledger/v3/<kind>\n<origin>\n" ‖ JCS({v, kind, signer, key_id, seq, body})`, where JCS
//! is the RFC 8785 canonical form. The tag binds the signature to one kind of object and one
//! log (its checkpoint origin), so it can be replayed neither as another kind nor into another
//! log.

use super::canonical::{self, CanonicalError};
use super::ids::check_id;
use super::keys;
use super::limits::{MAX_ENVELOPE_BYTES, MAX_SEQ};
use super::record::{Body, Kind};
use super::rejection::{Reason, Rejection};
use super::time::Timestamp;
use base64::prelude::{Engine, BASE64_STANDARD};
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The only envelope version this code writes and reads.
pub const ENVELOPE_VERSION: u32 = 3;

/// A signed record as it travels on the wire and sits inside a leaf.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    /// The envelope version: 2.
    pub v: u32,
    /// The record kind (docs/PROTOCOL.md §5): `gpu_usage`, `energy`, `spot_price`, ….
    pub kind: String,
    pub signer: String,
    pub key_id: String,
    pub seq: u64,
    /// The kind's body (docs/PROTOCOL.md §5). Read strictly: a repeated member name at any
    /// depth is refused.
    #[serde(deserialize_with = "super::json::strict_value")]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
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
    /// The bytes a signature covers for the log named `origin`,
    /// `"gpuledger/v3/<kind>\n<origin>\n" ‖ JCS(envelope without sig)`, and the canonical bytes
    /// of the whole envelope, `JCS(envelope)`.
    pub fn canonical_parts(&self, origin: &str) -> Result<(Vec<u8>, Vec<u8>), CanonicalError> {
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

        let mut message = signing_prefix(&self.kind, origin);
        message.extend_from_slice(&head);
        message.extend_from_slice(&tail);
        let mut full = head;
        full.extend_from_slice(b",\"sig\":");
        canonical::write_str(&self.sig, &mut full);
        full.extend_from_slice(&tail);
        Ok((message, full))
    }

    /// The bytes a signature covers in the log `origin` (see [`Envelope::canonical_parts`]).
    pub fn signed_message(&self, origin: &str) -> Result<Vec<u8>, CanonicalError> {
        self.canonical_parts(origin).map(|p| p.0)
    }

    /// Builds and signs an envelope for the log named `origin`.
    pub fn sign(
        origin: &str,
        kind: Kind,
        signer: &str,
        key: &SigningKey,
        seq: u64,
        body: &Body,
    ) -> Envelope {
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
            &env.signed_message(origin)
                .expect("bodies built from records are canonical"),
        );
        env.sig = BASE64_STANDARD.encode(sig.to_bytes());
        env
    }

    /// The RFC 8785 canonical bytes of the whole envelope, signature included.
    pub fn canonical_bytes(&self) -> Result<Vec<u8>, CanonicalError> {
        // The origin only enters the signed message, not the envelope's own bytes.
        self.canonical_parts("").map(|p| p.1)
    }

    /// Checks everything that needs neither the registry nor the clock: version, kind,
    /// identifiers, sequence number, body, limits, signature encoding and size; and builds the
    /// message signed for the log `origin`. Time rules need the log's policy and are
    /// [`crate::admission::check_time`]'s.
    pub fn check(self, origin: &str) -> Result<Checked, Rejection> {
        let kind = self.check_members()?;
        let body = Body::from_value(kind, &self.body)?;
        let signature = self.signature()?;
        let (message, canonical) = self
            .canonical_parts(origin)
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

    /// The envelope's own members, before its body: version, kind, signer and key
    /// identifiers, and sequence number. Returns the kind.
    fn check_members(&self) -> Result<Kind, Rejection> {
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
        Ok(kind)
    }

    /// The signature, which must be standard base64 of 64 bytes.
    fn signature(&self) -> Result<Signature, Rejection> {
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
        Ok(Signature::from_bytes(&sig_bytes))
    }
}

/// The domain-separation prefix of a signed message: `gpuledger/v3/<kind>\n<origin>\n`.
/// An origin holds no whitespace (docs/PROTOCOL.md §9), so the prefix reads back one way.
fn signing_prefix(kind: &str, origin: &str) -> Vec<u8> {
    let mut m = Vec::with_capacity(16 + kind.len() + origin.len() + 512);
    m.extend_from_slice(b"gpuledger/v3/");
    m.extend_from_slice(kind.as_bytes());
    m.push(b'\n');
    m.extend_from_slice(origin.as_bytes());
    m.push(b'\n');
    m
}

impl Checked {
    /// Strict Ed25519 verification against `key`.
    pub fn verify(&self, key: &VerifyingKey) -> bool {
        key.verify_strict(&self.message, &self.signature).is_ok()
    }
}

/// Verifies each signature on its own with strict Ed25519 (ed25519-dalek's `verify_strict`:
/// canonical S, R and key not of small order, the cofactorless equation with R's bytes
/// compared), spread over all cores. This is the only signature rule (docs/PROTOCOL.md §3.3):
/// ingest, `verify-log` and `gpuledger verify` all call it, so they give one verdict.
pub fn verify_strict_many(items: &[(&[u8], &Signature, &VerifyingKey)]) -> Vec<bool> {
    use rayon::prelude::*;
    items
        .par_iter()
        .with_min_len(64)
        .map(|(m, s, k)| k.verify_strict(m, s).is_ok())
        .collect()
}
