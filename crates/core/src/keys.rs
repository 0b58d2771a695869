//! Ed25519 keys: key ids, the text encodings of public and private keys, and weak-key checks.
//! Reading and writing key *files* is the shell's job (see the `gpuledger-shell` crate).

use base64::prelude::{Engine, BASE64_STANDARD};
use ed25519_dalek::{SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

/// Prefix of the private-key text encoding.
pub const SECRET_PREFIX: &str = "gpuledger-ed25519-secret-v1:";

/// A key id: lower-case hex of the first 8 bytes of SHA-256(public key).
pub fn key_id(public: &VerifyingKey) -> String {
    hex::encode(&Sha256::digest(public.as_bytes())[..8])
}

/// Whether `s` has the form of a key id: exactly 16 lower-case hex digits.
pub fn is_key_id(s: &str) -> bool {
    s.len() == 16 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The public key as the registration API takes it: standard base64 of its 32 bytes.
pub fn encode_public(public: &VerifyingKey) -> String {
    BASE64_STANDARD.encode(public.as_bytes())
}

/// Why a public key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("public key is not standard base64 of 32 bytes")]
    Encoding,
    #[error("public key is not a valid Ed25519 point")]
    NotAPoint,
    #[error("public key is weak (a point of small order) and could sign anything")]
    Weak,
    #[error("public key is not canonically encoded (its point re-encodes to other bytes)")]
    NonCanonical,
    #[error("public key is not torsion-free (a mixed-order point: strict and cofactored verifiers would disagree on its signatures)")]
    Torsion,
    #[error("private key is not `{SECRET_PREFIX}<base64 of 32 bytes>`")]
    SecretEncoding,
}

/// Decodes a base64 public key and refuses every key that is not a valid signing key for this
/// protocol (docs/PROTOCOL.md §3.1): see [`check_public`].
pub fn decode_public(s: &str) -> Result<VerifyingKey, KeyError> {
    let bytes = BASE64_STANDARD
        .decode(s.trim())
        .map_err(|_| KeyError::Encoding)?;
    let arr: [u8; 32] = bytes.try_into().map_err(|_| KeyError::Encoding)?;
    check_public(&arr)
}

/// The one key rule (docs/PROTOCOL.md §3.1): 32 bytes that decode to a point of edwards25519,
/// canonically encoded (the point re-encodes to the same bytes), not of small order, and
/// torsion-free. With such keys strict verification (`verify_strict`), OpenSSL, libsodium,
/// Go and cofactored (ZIP-215) verifiers all agree on every signature the ledger accepts.
/// The point operations are curve25519-dalek's, used as its authors intend.
pub fn check_public(bytes: &[u8; 32]) -> Result<VerifyingKey, KeyError> {
    let point = curve25519_dalek::edwards::CompressedEdwardsY(*bytes)
        .decompress()
        .ok_or(KeyError::NotAPoint)?;
    if point.compress().as_bytes() != bytes {
        return Err(KeyError::NonCanonical);
    }
    if point.is_small_order() {
        return Err(KeyError::Weak);
    }
    if !point.is_torsion_free() {
        return Err(KeyError::Torsion);
    }
    VerifyingKey::from_bytes(bytes).map_err(|_| KeyError::NotAPoint)
}

/// The private-key text: `gpuledger-ed25519-secret-v1:<base64 seed>` and a newline.
pub fn encode_secret(key: &SigningKey) -> String {
    format!(
        "{SECRET_PREFIX}{}\n",
        BASE64_STANDARD.encode(key.to_bytes())
    )
}

/// Parses the private-key text.
pub fn decode_secret(s: &str) -> Result<SigningKey, KeyError> {
    let b64 = s
        .trim()
        .strip_prefix(SECRET_PREFIX)
        .ok_or(KeyError::SecretEncoding)?;
    let bytes = BASE64_STANDARD
        .decode(b64)
        .map_err(|_| KeyError::SecretEncoding)?;
    let seed: [u8; 32] = bytes.try_into().map_err(|_| KeyError::SecretEncoding)?;
    Ok(SigningKey::from_bytes(&seed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_round_trips_and_weak_keys_are_refused() {
        let k = SigningKey::from_bytes(&[7; 32]);
        assert_eq!(
            decode_secret(&encode_secret(&k)).unwrap().to_bytes(),
            k.to_bytes()
        );
        assert_eq!(
            decode_public(&encode_public(&k.verifying_key())).unwrap(),
            k.verifying_key()
        );
        // The identity point (small order) encodes as 0x01 followed by zeros.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        assert_eq!(
            decode_public(&BASE64_STANDARD.encode(identity)),
            Err(KeyError::Weak)
        );
        assert_eq!(decode_public("AAAA"), Err(KeyError::Encoding));
        assert!(decode_secret("nonsense").is_err());
    }
}
