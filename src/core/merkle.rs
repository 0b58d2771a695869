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
}
