//! Forged Ed25519 signatures of the classes in tests/vectors/ed25519/cases.json, made with
//! curve25519-dalek's group operations by the holder of `key`: each satisfies some verifier's
//! equation (cofactored, or cofactorless without the small-order and canonical checks) and
//! none passes strict verification.

use curve25519_dalek::constants::{ED25519_BASEPOINT_POINT as B, EIGHT_TORSION};
use curve25519_dalek::Scalar;
use ed25519_dalek::SigningKey;
use sha2::{Digest, Sha512};

/// The group order L, little-endian.
pub const ORDER_L: [u8; 32] = [
    0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
];

/// The signature classes [`signature`] forges.
pub const CLASSES: [&str; 9] = [
    "r_torsion_order_2",
    "r_torsion_order_4",
    "r_torsion_order_8",
    "r_identity",
    "r_small_order_8",
    "r_non_canonical",
    "r_negative_zero",
    "s_equals_l",
    "s_plus_l",
];

/// `a + b` for little-endian 256-bit integers (no overflow for the values used here).
pub fn add_le(a: &[u8; 32], b: &[u8; 32]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut carry = 0u16;
    for i in 0..32 {
        let v = u16::from(a[i]) + u16::from(b[i]) + carry;
        out[i] = v as u8;
        carry = v >> 8;
    }
    out
}

/// The Ed25519 challenge k = SHA-512(R ‖ A ‖ M) mod L.
pub fn challenge(r: &[u8; 32], a: &[u8; 32], m: &[u8]) -> Scalar {
    let h: [u8; 64] = Sha512::new()
        .chain_update(r)
        .chain_update(a)
        .chain_update(m)
        .finalize()
        .into();
    Scalar::from_bytes_mod_order_wide(&h)
}

/// A deterministic nonce scalar.
pub fn nonce(label: &str, i: u32) -> Scalar {
    let h: [u8; 64] = Sha512::new()
        .chain_update(format!("gpuledger ed25519 vector nonce {label} {i}"))
        .finalize()
        .into();
    Scalar::from_bytes_mod_order_wide(&h)
}

/// `R ‖ S` as 64 bytes.
pub fn join(r: &[u8; 32], s: &[u8; 32]) -> [u8; 64] {
    let mut out = [0u8; 64];
    out[..32].copy_from_slice(r);
    out[32..].copy_from_slice(s);
    out
}

/// A signature of class `class` (one of [`CLASSES`]) over `message` by `key`.
pub fn signature(class: &str, key: &SigningKey, message: &[u8]) -> [u8; 64] {
    use ed25519_dalek::Signer;
    let a = key.to_scalar();
    let pk = key.verifying_key().to_bytes();
    // R = [r]B + T, S = r + k·a: the cofactored equation holds, the cofactorless one does not.
    let torsion_r = |t: curve25519_dalek::EdwardsPoint, label: &str| {
        let r = nonce(label, 0);
        let big_r = (B * r + t).compress().to_bytes();
        let k = challenge(&big_r, &pk, message);
        join(&big_r, &(r + k * a).to_bytes())
    };
    // A small-order R with S = k·a: [S]B − [k]A is the identity.
    let small_r = |r_bytes: [u8; 32]| {
        let k = challenge(&r_bytes, &pk, message);
        join(&r_bytes, &(k * a).to_bytes())
    };
    let mut identity = [0u8; 32];
    identity[0] = 1;
    let honest = key.sign(message).to_bytes();
    let (honest_r, honest_s): ([u8; 32], [u8; 32]) = (
        honest[..32].try_into().unwrap(),
        honest[32..].try_into().unwrap(),
    );
    match class {
        "r_torsion_order_2" => torsion_r(EIGHT_TORSION[4], "t2"),
        "r_torsion_order_4" => torsion_r(EIGHT_TORSION[2], "t4"),
        "r_torsion_order_8" => torsion_r(EIGHT_TORSION[1], "t8"),
        "r_identity" => small_r(identity),
        "r_small_order_8" => small_r(EIGHT_TORSION[1].compress().to_bytes()),
        "r_non_canonical" => {
            // The identity encoded as y = p + 1.
            let mut e = [0xffu8; 32];
            e[0] = 0xee;
            e[31] = 0x7f;
            small_r(e)
        }
        "r_negative_zero" => {
            let mut e = identity;
            e[31] |= 0x80;
            small_r(e)
        }
        "s_equals_l" => join(&honest_r, &ORDER_L),
        "s_plus_l" => join(&honest_r, &add_le(&honest_s, &ORDER_L)),
        other => panic!("no forgery class {other}"),
    }
}
