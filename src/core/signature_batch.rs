//! Batch verification of Ed25519 signatures: one multiscalar multiplication checks a whole
//! batch, with one term per distinct key rather than one per signature.
//!
//! For signatures (Rᵢ, sᵢ) on messages Mᵢ under keys Aᵢ, with hᵢ = SHA-512(Rᵢ ‖ Aᵢ ‖ Mᵢ) and
//! 128-bit coefficients zᵢ, a batch passes when
//!
//! ```text
//! [−Σ zᵢ·sᵢ]B + Σ [zᵢ]Rᵢ + Σ over distinct keys A of [Σ_{i: Aᵢ = A} zᵢ·hᵢ]A = identity
//! ```
//!
//! This is the equation ed25519-dalek's `verify_batch` checks (cofactorless, canonical sᵢ,
//! coefficients derived from a hash of the whole batch, so a verdict is reproducible), with the
//! A terms gathered per key: bundles and ingest batches hold many records from a few dozen
//! nodes, so the multiplication has about n + k + 1 terms instead of 2n + 1.
//!
//! If every signature passes cofactorless verification the batch passes. A batch holding a
//! signature that fails passes only with probability about 2⁻¹²⁸, unless the failure is a
//! torsion component of R, which the key's holder alone can make (PROTOCOL.md §3.3); callers
//! refuse small-order R before the batch and fall back to strict verification one by one to
//! name a bad signature.

use curve25519_dalek::constants::ED25519_BASEPOINT_POINT;
use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
use curve25519_dalek::scalar::Scalar;
use curve25519_dalek::traits::{IsIdentity, VartimeMultiscalarMul};
use ed25519_dalek::{Signature, VerifyingKey};
use sha2::{Digest, Sha512};
use std::collections::HashMap;
use std::iter::once;

/// Domain tag of the hash the coefficients are derived from.
const COEFFICIENT_DOMAIN: &[u8] = b"gpuledger/ed25519-batch/v1";

/// Whether every signature in the batch verifies (see the module docs); `true` when empty.
pub fn verify_batch(items: &[(&[u8], &Signature, &VerifyingKey)]) -> bool {
    let n = items.len();
    if n == 0 {
        return true;
    }
    // hᵢ and sᵢ, and the transcript that fixes the coefficients.
    let mut transcript = Sha512::new();
    transcript.update(COEFFICIENT_DOMAIN);
    transcript.update((n as u64).to_le_bytes());
    let mut hs = Vec::with_capacity(n);
    let mut ss = Vec::with_capacity(n);
    for (message, sig, key) in items {
        let Some(s) = Option::<Scalar>::from(Scalar::from_canonical_bytes(*sig.s_bytes())) else {
            return false;
        };
        let hram: [u8; 64] = Sha512::new()
            .chain_update(sig.r_bytes())
            .chain_update(key.as_bytes())
            .chain_update(message)
            .finalize()
            .into();
        transcript.update(hram);
        transcript.update(sig.s_bytes());
        hs.push(Scalar::from_bytes_mod_order_wide(&hram));
        ss.push(s);
    }
    let zs = coefficients(&transcript.finalize().into(), n);

    let mut b_coefficient = Scalar::ZERO;
    let mut keys: Vec<(EdwardsPoint, Scalar)> = Vec::new();
    let mut slot_of: HashMap<&[u8; 32], usize> = HashMap::new();
    for (((_, _, key), z), (h, s)) in items.iter().zip(&zs).zip(hs.iter().zip(&ss)) {
        b_coefficient -= z * s;
        let slot = *slot_of.entry(key.as_bytes()).or_insert_with(|| {
            keys.push((key.to_edwards(), Scalar::ZERO));
            keys.len() - 1
        });
        keys[slot].1 += z * h;
    }
    let rs = items
        .iter()
        .map(|(_, sig, _)| CompressedEdwardsY(*sig.r_bytes()).decompress());
    let sum = EdwardsPoint::optional_multiscalar_mul(
        once(b_coefficient)
            .chain(zs.iter().copied())
            .chain(keys.iter().map(|(_, c)| *c)),
        once(Some(ED25519_BASEPOINT_POINT))
            .chain(rs)
            .chain(keys.iter().map(|(a, _)| Some(*a))),
    );
    // An R that is not a point fails the batch.
    sum.is_some_and(|p| p.is_identity())
}

/// n 128-bit coefficients from the batch's transcript hash, four per SHA-512 block.
fn coefficients(seed: &[u8; 64], n: usize) -> Vec<Scalar> {
    let mut zs = Vec::with_capacity(n);
    for block_no in 0..n.div_ceil(4) as u64 {
        let block: [u8; 64] = Sha512::new()
            .chain_update(seed)
            .chain_update(block_no.to_le_bytes())
            .finalize()
            .into();
        for z in block.chunks_exact(16) {
            let mut bytes = [0u8; 32];
            bytes[..16].copy_from_slice(z);
            zs.push(Scalar::from_bytes_mod_order(bytes));
        }
    }
    zs.truncate(n);
    zs
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};

    fn signed(keys: &[SigningKey], n: usize) -> Vec<(Vec<u8>, Signature, VerifyingKey)> {
        (0..n)
            .map(|i| {
                let k = &keys[i % keys.len()];
                let m = format!("record {i} of a batch").into_bytes();
                let s = k.sign(&m);
                (m, s, k.verifying_key())
            })
            .collect()
    }

    fn items(v: &[(Vec<u8>, Signature, VerifyingKey)]) -> Vec<(&[u8], &Signature, &VerifyingKey)> {
        v.iter().map(|(m, s, k)| (m.as_slice(), s, k)).collect()
    }

    fn keys(n: usize) -> Vec<SigningKey> {
        (0..n)
            .map(|i| crate::sample::key(&format!("batch-key-{i}")))
            .collect()
    }

    #[test]
    fn good_batches_pass_at_every_size_and_key_mix() {
        assert!(verify_batch(&[]));
        for (nkeys, n) in [(1, 1), (1, 2), (3, 7), (5, 64), (64, 300), (300, 300)] {
            let v = signed(&keys(nkeys), n);
            assert!(verify_batch(&items(&v)), "{nkeys} keys, {n} signatures");
        }
    }

    #[test]
    fn any_bad_signature_fails_the_batch() {
        let ks = keys(4);
        let good = signed(&ks, 40);
        for victim in [0, 17, 39] {
            // Another message.
            let mut v = good.clone();
            v[victim].0.push(b'!');
            assert!(!verify_batch(&items(&v)), "message of {victim}");
            // Another key (one that is in the batch, and one that is not).
            let mut v = good.clone();
            v[victim].2 = ks[(victim + 1) % 4].verifying_key();
            assert!(!verify_batch(&items(&v)), "key of {victim}");
            let mut v = good.clone();
            v[victim].2 = crate::sample::key("stranger").verifying_key();
            assert!(!verify_batch(&items(&v)), "stranger key of {victim}");
            // Every bit of R and of s.
            for byte in 0..64 {
                for bit in [0, 3, 7] {
                    let mut v = good.clone();
                    let mut raw = v[victim].1.to_bytes();
                    raw[byte] ^= 1 << bit;
                    v[victim].1 = Signature::from_bytes(&raw);
                    assert!(
                        !verify_batch(&items(&v)),
                        "byte {byte} bit {bit} of {victim}"
                    );
                }
            }
        }
        // Two signatures swapped between messages of the same key.
        let mut v = good.clone();
        let s0 = v[0].1;
        v[0].1 = v[4].1;
        v[4].1 = s0;
        assert!(!verify_batch(&items(&v)));
    }

    /// s + ℓ passes the group equation but is not canonical: refused, as strict verification
    /// refuses it.
    #[test]
    fn non_canonical_s_is_refused() {
        let v = signed(&keys(2), 6);
        let mut bad = v.clone();
        let raw = bad[3].1.to_bytes();
        let s = Scalar::from_canonical_bytes(raw[32..].try_into().unwrap()).unwrap();
        // ℓ as a little-endian integer, added to s (which is below ℓ, so the sum fits 256 bits).
        const L: [u8; 32] = [
            0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9,
            0xde, 0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
        ];
        let mut sum = [0u8; 32];
        let mut carry = 0u16;
        for i in 0..32 {
            let t = s.as_bytes()[i] as u16 + L[i] as u16 + carry;
            sum[i] = t as u8;
            carry = t >> 8;
        }
        assert_eq!(carry, 0);
        let mut raw2 = raw;
        raw2[32..].copy_from_slice(&sum);
        bad[3].1 = Signature::from_bytes(&raw2);
        assert!(bad[3].2.verify_strict(&bad[3].0, &bad[3].1).is_err());
        assert!(verify_batch(&items(&v)));
        assert!(!verify_batch(&items(&bad)));
    }

    /// One signature alone: the batch agrees with ed25519-dalek's own verification.
    #[test]
    fn single_signatures_agree_with_ed25519_dalek() {
        let ks = keys(3);
        let good = signed(&ks, 12);
        for (i, (m, s, k)) in good.iter().enumerate() {
            let mut raw = s.to_bytes();
            if i % 2 == 1 {
                raw[i] ^= 0x20;
            }
            let s = Signature::from_bytes(&raw);
            assert_eq!(
                verify_batch(&[(m.as_slice(), &s, k)]),
                k.verify_strict(m, &s).is_ok(),
                "signature {i}"
            );
        }
    }

    #[test]
    fn coefficients_are_128_bit_and_distinct() {
        let zs = coefficients(&[7u8; 64], 10);
        assert_eq!(zs.len(), 10);
        for z in &zs {
            assert_eq!(z.as_bytes()[16..], [0u8; 16]);
            assert_ne!(*z, Scalar::ZERO);
        }
        let distinct: std::collections::HashSet<_> = zs.iter().map(|z| z.to_bytes()).collect();
        assert_eq!(distinct.len(), 10);
        // Another transcript, other coefficients.
        assert_ne!(coefficients(&[8u8; 64], 1), coefficients(&[7u8; 64], 1));
    }
}
