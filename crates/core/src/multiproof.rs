//! Multi-proofs: the tree nodes that, with a set of leaves, give the root of an RFC 6962 tree,
//! each node given once (docs/PROTOCOL.md §14.2). A bundle of version 3 proves all its entries
//! with one multi-proof instead of one inclusion proof each.
//!
//! The node list is defined by a recursion over the subtrees `[lo, hi)` of the tree of size
//! `n`, split as RFC 6962 §2.1 splits them (at `k`, the largest power of two below `hi − lo`):
//! a subtree holding no leaf of the set contributes one node, its MTH; a one-leaf subtree whose
//! leaf is in the set contributes nothing; any other subtree recurses into its left half, then
//! its right half. The nodes are listed in the order the recursion meets them.
//!
//! [`Plan`] walks that recursion with an explicit stack (memory O(log n)), asking its caller
//! for the next index of the set as it goes; the writer ([`subtree_indexes`], [`combine`])
//! and the verifier ([`RootBuilder`]) both follow it, so they cannot disagree about the order.
//! Nothing here reads storage: the writer turns each node's range into stored hashes itself.

use super::merkle::{node_hash, stored_hash_index, Hash, HashReader, EMPTY_HASH};

/// Why a multi-proof does not lead to a root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MultiProofError {
    /// A leaf's index is not below the tree size.
    #[error("index {index} is not below the tree size {size}")]
    OutOfRange { index: u64, size: u64 },
    /// The leaves' indexes are not strictly increasing (one repeats or goes back).
    #[error("index {0} repeats or is out of order")]
    Order(u64),
    /// The recursion needs a node that the proof does not give.
    #[error("the proof has too few nodes")]
    MissingNode,
    /// The proof gives a node that the recursion does not use.
    #[error("the proof has more nodes than the tree needs")]
    ExtraNode,
    /// A stored hash a node needs could not be read.
    #[error("a stored hash could not be read: {0}")]
    Storage(&'static str),
}

/// One step of the recursion, in the order it is met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The leaf at this index, which is the set's next index (the caller moves past it).
    Leaf(u64),
    /// A subtree `[lo, hi)` with no leaf of the set: the next node of the proof is its MTH.
    Node { lo: u64, hi: u64 },
    /// The last two hashes computed are the left and right children of a node.
    Join,
}

#[derive(Debug, Clone, Copy)]
enum Frame {
    Visit(u64, u64),
    Join,
}

/// The recursion of the module docs over a tree of `size`, one step at a time.
#[derive(Debug, Clone)]
pub struct Plan {
    stack: Vec<Frame>,
}

/// The largest power of two strictly below `n` (n ≥ 2): RFC 6962's split point.
fn split(n: u64) -> u64 {
    debug_assert!(n >= 2);
    1 << (63 - (n - 1).leading_zeros())
}

impl Plan {
    /// The recursion over the tree of `size` (nothing at all for size 0, whose root is
    /// SHA-256 of the empty string).
    pub fn new(size: u64) -> Plan {
        let mut stack = Vec::with_capacity(130);
        if size > 0 {
            stack.push(Frame::Visit(0, size));
        }
        Plan { stack }
    }

    /// The next step, given the set's next index not yet consumed (`None` when all are);
    /// `None` when the recursion is done. After [`Step::Leaf`] the caller must move past that
    /// index. An index below the subtree being visited (a repeat, or the set unsorted) is
    /// [`MultiProofError::Order`].
    pub fn step(&mut self, next: Option<u64>) -> Result<Option<Step>, MultiProofError> {
        loop {
            let Some(frame) = self.stack.pop() else {
                return Ok(None);
            };
            let (lo, hi) = match frame {
                Frame::Join => return Ok(Some(Step::Join)),
                Frame::Visit(lo, hi) => (lo, hi),
            };
            match next {
                Some(i) if i < lo => return Err(MultiProofError::Order(i)),
                Some(i) if i < hi => {
                    if hi - lo == 1 {
                        return Ok(Some(Step::Leaf(lo)));
                    }
                    let k = split(hi - lo);
                    self.stack.push(Frame::Join);
                    self.stack.push(Frame::Visit(lo + k, hi));
                    self.stack.push(Frame::Visit(lo, lo + k));
                }
                _ => return Ok(Some(Step::Node { lo, hi })),
            }
        }
    }
}

/// The node ranges `[lo, hi)` of the multi-proof of `indexes` (strictly increasing, each below
/// `size`) in the tree of `size`, in proof order.
pub fn node_ranges(size: u64, indexes: &[u64]) -> Result<Vec<(u64, u64)>, MultiProofError> {
    check_indexes(size, indexes.iter().copied())?;
    let mut plan = Plan::new(size);
    let mut at = 0;
    let mut out = Vec::new();
    while let Some(step) = plan.step(indexes.get(at).copied())? {
        match step {
            Step::Leaf(_) => at += 1,
            Step::Node { lo, hi } => out.push((lo, hi)),
            Step::Join => {}
        }
    }
    Ok(out)
}

/// Requires strictly increasing indexes, all below `size`.
fn check_indexes(size: u64, indexes: impl Iterator<Item = u64>) -> Result<(), MultiProofError> {
    let mut last: Option<u64> = None;
    for i in indexes {
        if last.is_some_and(|l| l >= i) {
            return Err(MultiProofError::Order(i));
        }
        if i >= size {
            return Err(MultiProofError::OutOfRange { index: i, size });
        }
        last = Some(i);
    }
    Ok(())
}

/// The stored-hash indexes (tlog's layout, [`stored_hash_index`]) of the complete subtrees that
/// make up `[lo, hi)`, left to right: one for a complete aligned subtree, several for a subtree
/// on the right edge of the tree. [`combine`] makes its MTH from their hashes.
pub fn subtree_indexes(lo: u64, hi: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut at = lo;
    while at < hi {
        // The widest complete subtree that starts at `at` (aligned) and ends by `hi`.
        let mut level = if at == 0 { 63 } else { at.trailing_zeros() };
        while level > 0 && (1u64 << level) > hi - at {
            level -= 1;
        }
        out.push(stored_hash_index(level as u8, at >> level));
        at += 1 << level;
    }
    out
}

/// The MTH of a subtree from the hashes of its complete parts ([`subtree_indexes`], left to
/// right): RFC 6962 splits off the widest left part first, so the parts fold from the right.
pub fn combine(parts: &[Hash]) -> Hash {
    match parts.split_last() {
        None => EMPTY_HASH,
        Some((last, rest)) => rest.iter().rev().fold(*last, |r, l| node_hash(*l, r)),
    }
}

/// The MTH of `[lo, hi)` read from stored hashes (in memory or through any [`HashReader`]).
pub fn subtree_hash(lo: u64, hi: u64, reader: &impl HashReader) -> Result<Hash, MultiProofError> {
    let parts = reader
        .read_hashes(&subtree_indexes(lo, hi))
        .map_err(|_| MultiProofError::Storage("a subtree's stored hash is missing"))?;
    Ok(combine(&parts))
}

/// The multi-proof of `indexes` in the tree of `size` from stored hashes: its nodes in order.
pub fn prove(
    size: u64,
    indexes: &[u64],
    reader: &impl HashReader,
) -> Result<Vec<Hash>, MultiProofError> {
    node_ranges(size, indexes)?
        .into_iter()
        .map(|(lo, hi)| subtree_hash(lo, hi, reader))
        .collect()
}

/// Recomputes a root from leaves (index and leaf hash, strictly increasing indexes) and the
/// nodes of their multi-proof, which arrive one at a time ([`RootBuilder::push_node`]) so a
/// verifier reading them from a file holds none of them. Memory: the leaves, plus O(log n).
#[derive(Debug)]
pub struct RootBuilder {
    plan: Plan,
    leaves: Vec<(u64, Hash)>,
    next: usize,
    stack: Vec<Hash>,
    /// The recursion stopped at a [`Step::Node`] whose hash has not arrived.
    awaiting: bool,
    nodes: u64,
}

impl RootBuilder {
    /// A builder for the tree of `size` over `leaves`, whose indexes must strictly increase and
    /// be below `size`.
    pub fn new(size: u64, leaves: Vec<(u64, Hash)>) -> Result<RootBuilder, MultiProofError> {
        check_indexes(size, leaves.iter().map(|l| l.0))?;
        Ok(RootBuilder {
            plan: Plan::new(size),
            leaves,
            next: 0,
            stack: Vec::with_capacity(130),
            awaiting: false,
            nodes: 0,
        })
    }

    /// Runs the recursion up to the next node it needs: `true` if it needs one, `false` if it
    /// is done.
    fn advance(&mut self) -> Result<bool, MultiProofError> {
        loop {
            let next = self.leaves.get(self.next).map(|l| l.0);
            match self.plan.step(next)? {
                None => return Ok(false),
                Some(Step::Leaf(_)) => {
                    self.stack.push(self.leaves[self.next].1);
                    self.next += 1;
                }
                Some(Step::Join) => {
                    let right = self.stack.pop().expect("a join follows two hashes");
                    let left = self.stack.pop().expect("a join follows two hashes");
                    self.stack.push(node_hash(left, right));
                }
                Some(Step::Node { .. }) => return Ok(true),
            }
        }
    }

    /// The next node of the proof.
    pub fn push_node(&mut self, node: Hash) -> Result<(), MultiProofError> {
        if !self.awaiting && !self.advance()? {
            return Err(MultiProofError::ExtraNode);
        }
        self.stack.push(node);
        self.awaiting = false;
        self.nodes += 1;
        Ok(())
    }

    /// Nodes taken so far.
    pub fn nodes(&self) -> u64 {
        self.nodes
    }

    /// The root, once every node has arrived; [`MultiProofError::MissingNode`] if the
    /// recursion needs more.
    pub fn finish(mut self) -> Result<Hash, MultiProofError> {
        if self.awaiting || self.advance()? {
            return Err(MultiProofError::MissingNode);
        }
        debug_assert_eq!(self.next, self.leaves.len());
        Ok(match self.stack.as_slice() {
            [] => EMPTY_HASH,
            [root] => *root,
            _ => unreachable!("the recursion ends with one hash"),
        })
    }
}

/// The root that `leaves` (strictly increasing indexes) and `nodes` give for a tree of `size`.
pub fn root(size: u64, leaves: Vec<(u64, Hash)>, nodes: &[Hash]) -> Result<Hash, MultiProofError> {
    let mut b = RootBuilder::new(size, leaves)?;
    for n in nodes {
        b.push_node(*n)?;
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merkle::{self, leaf_hash, prove_record, tree_hash, MemoryHashes};
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// RFC 6962 §2.1 by direct recursion, independent of tlog's stored layout.
    fn mth(leaves: &[Hash]) -> Hash {
        match leaves.len() {
            0 => EMPTY_HASH,
            1 => leaves[0],
            n => {
                let k = split(n as u64) as usize;
                node_hash(mth(&leaves[..k]), mth(&leaves[k..]))
            }
        }
    }

    /// The multi-proof by the definition, recursing over the leaves themselves.
    fn nodes_by_definition(leaves: &[Hash], lo: u64, set: &BTreeSet<u64>, out: &mut Vec<Hash>) {
        let hi = lo + leaves.len() as u64;
        if set.range(lo..hi).next().is_none() {
            out.push(mth(leaves));
        } else if leaves.len() > 1 {
            let k = split(leaves.len() as u64) as usize;
            nodes_by_definition(&leaves[..k], lo, set, out);
            nodes_by_definition(&leaves[k..], lo + k as u64, set, out);
        }
    }

    fn tree_of(n: u64) -> (MemoryHashes, Vec<Hash>) {
        let leaves: Vec<Hash> = (0..n).map(|i| leaf_hash(&i.to_le_bytes())).collect();
        let mut all = MemoryHashes::default();
        let mut frontier = MemoryHashes::default();
        for (i, h) in leaves.iter().enumerate() {
            let new = merkle::append_leaves(i as u64, &[*h], &mut frontier).unwrap();
            let base = merkle::stored_hash_index(0, i as u64);
            for (j, nh) in new.into_iter().enumerate() {
                all.0.insert(base + j as u64, nh);
            }
            merkle::keep_frontier(i as u64 + 1, &mut frontier);
        }
        (all, leaves)
    }

    /// A tree, a set of its indexes, and a number to pick what to tamper with.
    fn case() -> impl Strategy<Value = (u64, Vec<u64>, usize)> {
        (1u64..600).prop_flat_map(|n| {
            (
                Just(n),
                prop::collection::btree_set(0..n, 0..(n as usize).min(40)),
                any::<usize>(),
            )
                .prop_map(|(n, s, pick)| (n, s.into_iter().collect(), pick))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// The nodes from stored hashes are the definition's; with the leaves they give the
        /// root, which is also what each leaf's own inclusion proof proves.
        #[test]
        fn proves_the_root((n, idx, _) in case()) {
            let (all, leaves) = tree_of(n);
            let root = tree_hash(n, &all).unwrap();
            prop_assert_eq!(root, mth(&leaves));
            let set: BTreeSet<u64> = idx.iter().copied().collect();
            let mut expected = Vec::new();
            nodes_by_definition(&leaves, 0, &set, &mut expected);
            let nodes = prove(n, &idx, &all).unwrap();
            prop_assert_eq!(&nodes, &expected);
            let with: Vec<(u64, Hash)> = idx.iter().map(|&i| (i, leaves[i as usize])).collect();
            prop_assert_eq!(super::root(n, with.clone(), &nodes).unwrap(), root);
            for &(i, h) in &with {
                let p = prove_record(n, i, &all).unwrap();
                prop_assert!(merkle::check_record(&p, n, root, i, h).is_ok());
            }
            // Never more nodes than the per-leaf proofs together hold.
            let per_leaf: usize = idx.iter().map(|&i| prove_record(n, i, &all).unwrap().len()).sum();
            prop_assert!(nodes.len() <= per_leaf.max(1));
        }

        /// Tampering with any node, any leaf hash, the count of nodes, or any index gives
        /// another root or an error.
        #[test]
        fn tampering_fails((n, idx, pick) in case()) {
            let (all, leaves) = tree_of(n);
            let root = tree_hash(n, &all).unwrap();
            let nodes = prove(n, &idx, &all).unwrap();
            let with: Vec<(u64, Hash)> = idx.iter().map(|&i| (i, leaves[i as usize])).collect();
            let gives_root = |l: Vec<(u64, Hash)>, ns: &[Hash]| super::root(n, l, ns) == Ok(root);
            if !nodes.is_empty() {
                let mut bad = nodes.clone();
                bad[pick % nodes.len()].0[pick % 32] ^= 1;
                prop_assert!(!gives_root(with.clone(), &bad), "a changed node");
                let mut fewer = nodes.clone();
                fewer.remove(pick % nodes.len());
                prop_assert!(!gives_root(with.clone(), &fewer), "a node removed");
            }
            let mut more = nodes.clone();
            more.insert(pick % (nodes.len() + 1), leaf_hash(b"extra"));
            prop_assert!(!gives_root(with.clone(), &more), "a node added");
            if !with.is_empty() {
                let k = pick % with.len();
                let mut bad = with.clone();
                bad[k].1 .0[pick % 32] ^= 0x40;
                prop_assert!(!gives_root(bad, &nodes), "a changed leaf");
                let mut fewer = with.clone();
                fewer.remove(k);
                prop_assert!(!gives_root(fewer, &nodes), "a leaf removed");
                // The same leaf hash claimed at another index not in the set.
                let other = (with[k].0 + 1 + pick as u64 % n) % n;
                if !set_has(&idx, other) {
                    let mut moved = with.clone();
                    moved[k].0 = other;
                    moved.sort_by_key(|l| l.0);
                    prop_assert!(!gives_root(moved, &nodes), "a leaf moved to {}", other);
                }
            }
            // A leaf added that the proof does not expect.
            let extra = pick as u64 % n;
            if !set_has(&idx, extra) {
                let mut added = with.clone();
                added.push((extra, leaves[extra as usize]));
                added.sort_by_key(|l| l.0);
                prop_assert!(!gives_root(added, &nodes), "a leaf added at {}", extra);
            }
            // The same proof does not prove the leaves in the next tree, against its root
            // (the checkpoint binds the size to its root).
            let (bigger, _) = tree_of(n + 1);
            let bigger_root = tree_hash(n + 1, &bigger).unwrap();
            prop_assert!(super::root(n + 1, with.clone(), &nodes) != Ok(bigger_root));
        }
    }

    fn set_has(idx: &[u64], i: u64) -> bool {
        idx.binary_search(&i).is_ok()
    }

    #[test]
    fn edge_cases() {
        let (all, leaves) = tree_of(13);
        let root = tree_hash(13, &all).unwrap();
        // No leaves: the one node is the root itself.
        assert_eq!(prove(13, &[], &all).unwrap(), vec![root]);
        assert_eq!(super::root(13, vec![], &[root]), Ok(root));
        // Every leaf: no node.
        let every: Vec<u64> = (0..13).collect();
        assert!(prove(13, &every, &all).unwrap().is_empty());
        let with: Vec<(u64, Hash)> = every.iter().map(|&i| (i, leaves[i as usize])).collect();
        assert_eq!(super::root(13, with, &[]), Ok(root));
        // One leaf: the hashes of its inclusion proof, in the recursion's order (left to
        // right) rather than the proof's (leaf to root).
        let single = prove(13, &[5], &all).unwrap();
        let path = prove_record(13, 5, &all).unwrap();
        assert_eq!(single, vec![path[2], path[0], path[1], path[3]]);
        // Repeats, disorder and out-of-range indexes are refused before any hashing.
        assert_eq!(
            super::root(13, vec![(3, root), (3, root)], &[]),
            Err(MultiProofError::Order(3))
        );
        assert_eq!(
            super::root(13, vec![(13, root)], &[]),
            Err(MultiProofError::OutOfRange {
                index: 13,
                size: 13
            })
        );
        assert_eq!(
            super::root(13, vec![], &[]),
            Err(MultiProofError::MissingNode)
        );
        assert_eq!(
            super::root(13, vec![], &[root, root]),
            Err(MultiProofError::ExtraNode)
        );
        // Size 0: no nodes, the empty root.
        assert_eq!(super::root(0, vec![], &[]), Ok(EMPTY_HASH));
        assert_eq!(node_ranges(0, &[]).unwrap(), vec![]);
        // The stored parts of a right-edge subtree.
        assert_eq!(
            subtree_indexes(8, 13),
            vec![
                merkle::stored_hash_index(2, 2),
                merkle::stored_hash_index(0, 12)
            ]
        );
    }
}
