//! The RFC 6962 Merkle tree, through `tlog_tiles` (Cloudflare's port of Go's sumdb/tlog).
//!
//! The tree's hashes are kept in the "stored hash" order of tlog: each appended leaf adds its
//! leaf hash and the roots of the subtrees it completes, so the root of any size and every
//! proof need O(log n) stored hashes. This module adds base64 proof encoding and an in-memory
//! [`HashReader`] used by writers and verifiers.

use base64::prelude::{Engine, BASE64_STANDARD};
use std::collections::HashMap;
pub use tlog_tiles::{
    check_record, check_tree, node_hash, prove_record, prove_tree, record_hash as leaf_hash,
    stored_hash_count, stored_hash_index, stored_hashes_for_record_hash, tree_hash, Hash,
    HashReader, RecordProof, TreeProof, EMPTY_HASH,
};

/// Standard base64 of a hash.
pub fn encode_hash(h: &Hash) -> String {
    BASE64_STANDARD.encode(h.0)
}

/// Decodes a standard base64 hash.
pub fn decode_hash(s: &str) -> Option<Hash> {
    let b = BASE64_STANDARD.decode(s).ok()?;
    Some(Hash(b.try_into().ok()?))
}

/// Encodes a proof as a list of base64 hashes.
pub fn encode_proof(p: &[Hash]) -> Vec<String> {
    p.iter().map(encode_hash).collect()
}

/// Decodes a list of base64 hashes; `None` if any is malformed.
pub fn decode_proof(p: &[String]) -> Option<Vec<Hash>> {
    p.iter().map(|s| decode_hash(s)).collect()
}

/// Stored hashes held in memory, by stored-hash index.
#[derive(Debug, Default, Clone)]
pub struct MemoryHashes(pub HashMap<u64, Hash>);

impl HashReader for MemoryHashes {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog_tiles::Error> {
        indexes
            .iter()
            .map(|i| {
                self.0
                    .get(i)
                    .copied()
                    .ok_or(tlog_tiles::Error::IndexesNotInTree)
            })
            .collect()
    }
}

/// The stored indexes an append at tree size `n` reads: the roots of the complete subtrees
/// on the right edge that the new leaf completes.
pub fn frontier_indexes(n: u64) -> Vec<u64> {
    let m = (n + 1).trailing_zeros() as u8;
    (0..m).map(|i| stored_hash_index(i, (n >> i) - 1)).collect()
}

/// The stored indexes needed for the root of a tree of size `n` (its complete subtrees).
pub fn root_indexes(n: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut lo = 0u64;
    for level in (0..64u8).rev() {
        let width = 1u64 << level;
        if n - lo >= width {
            out.push(stored_hash_index(level, lo >> level));
            lo += width;
        }
    }
    out
}

/// Appends leaves to a tree held partly in `hashes` (which must contain at least the frontier
/// of size `n`), returning the new stored hashes in stored order, starting at
/// `stored_hash_index(0, n)`.
pub fn append_leaves(
    n: u64,
    leaf_hashes: &[Hash],
    hashes: &mut MemoryHashes,
) -> Result<Vec<Hash>, tlog_tiles::Error> {
    let mut out = Vec::with_capacity(leaf_hashes.len() * 2);
    for (i, h) in leaf_hashes.iter().enumerate() {
        let idx = n + i as u64;
        let new = stored_hashes_for_record_hash(idx, *h, hashes)?;
        let base = stored_hash_index(0, idx);
        for (j, nh) in new.iter().enumerate() {
            hashes.0.insert(base + j as u64, *nh);
        }
        out.extend(new);
    }
    Ok(out)
}

/// Forgets every stored hash that no later append or root computation will need, keeping
/// the frontier of size `n` only.
pub fn keep_frontier(n: u64, hashes: &mut MemoryHashes) {
    let keep: std::collections::HashSet<u64> = root_indexes(n).into_iter().collect();
    hashes.0.retain(|k, _| keep.contains(k));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 6962 §2.1 by direct recursion, independent of tlog's storage order.
    fn mth(leaves: &[Hash]) -> Hash {
        match leaves.len() {
            0 => EMPTY_HASH,
            1 => leaves[0],
            n => {
                let k = 1usize << (usize::BITS - (n - 1).leading_zeros() - 1);
                node_hash(mth(&leaves[..k]), mth(&leaves[k..]))
            }
        }
    }

    #[test]
    fn incremental_roots_match_the_recursive_definition() {
        let mut mem = MemoryHashes::default();
        let mut all = MemoryHashes::default();
        let mut leaves = Vec::new();
        for n in 0..300u64 {
            let h = leaf_hash(format!("leaf {n}").as_bytes());
            let new = append_leaves(n, &[h], &mut mem).unwrap();
            let base = stored_hash_index(0, n);
            for (j, nh) in new.iter().enumerate() {
                all.0.insert(base + j as u64, *nh);
            }
            leaves.push(h);
            assert_eq!(
                tree_hash(n + 1, &all).unwrap(),
                mth(&leaves),
                "size {}",
                n + 1
            );
            // Roots need only the frontier.
            keep_frontier(n + 1, &mut mem);
            assert_eq!(tree_hash(n + 1, &mem).unwrap(), mth(&leaves));
        }
        assert_eq!(stored_hash_count(300) as usize, all.0.len());
    }

    fn tree_of(n: u64) -> (MemoryHashes, Vec<Hash>) {
        let leaves: Vec<Hash> = (0..n).map(|i| leaf_hash(&i.to_be_bytes())).collect();
        let mut all = MemoryHashes::default();
        let mut frontier = MemoryHashes::default();
        for (i, h) in leaves.iter().enumerate() {
            let new = append_leaves(i as u64, &[*h], &mut frontier).unwrap();
            let base = stored_hash_index(0, i as u64);
            for (j, nh) in new.into_iter().enumerate() {
                all.0.insert(base + j as u64, nh);
            }
        }
        (all, leaves)
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Every inclusion and consistency proof verifies; changing any one hash of it, or
        /// asking about another leaf, makes it fail.
        #[test]
        fn proofs_verify_and_tampered_proofs_do_not(n in 1u64..700, a in 0u64..700, b in 1u64..700, flip in 0usize..64) {
            let (all, leaves) = tree_of(n);
            let root = tree_hash(n, &all).unwrap();
            proptest::prop_assert_eq!(root, mth(&leaves));
            let i = a % n;
            let proof = prove_record(n, i, &all).unwrap();
            proptest::prop_assert!(check_record(&proof, n, root, i, leaves[i as usize]).is_ok());
            if !proof.is_empty() {
                let mut bad = proof.clone();
                let k = flip % bad.len();
                bad[k].0[flip % 32] ^= 0x80;
                proptest::prop_assert!(check_record(&bad, n, root, i, leaves[i as usize]).is_err());
                let other = (i + 1) % n;
                proptest::prop_assert!(check_record(&proof, n, root, other, leaves[i as usize]).is_err());
            }
            let m = 1 + (b - 1) % n;
            let old_root = mth(&leaves[..m as usize]);
            let cproof = prove_tree(n, m, &all).unwrap();
            proptest::prop_assert!(check_tree(&cproof, n, root, m, old_root).is_ok());
            if !cproof.is_empty() {
                let mut bad = cproof.clone();
                let k = flip % bad.len();
                bad[k].0[(flip * 7) % 32] ^= 0x01;
                proptest::prop_assert!(check_tree(&bad, n, root, m, old_root).is_err());
            }
            if m < n {
                // An old root that is not the prefix's root is refused.
                proptest::prop_assert!(check_tree(&cproof, n, root, m, leaf_hash(b"forged")).is_err());
            }
        }
    }
}
