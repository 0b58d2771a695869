//! Re-checks a log from its leaves alone, in order: canonical leaf bytes, indexes, the hash
//! chain, each envelope's validity, every admission rule against the registry the log itself
//! records ([`Registry`]: keys and their scopes, tenants, leases, policy, prices), every
//! signature (strict), and the Merkle tree. It does not stop at the first bad entry: each
//! entry's problem is reported and the check goes on. Pure: callers feed it leaf bytes from
//! wherever they keep them.

use super::admission::{KeyState, Registry};
use super::envelope::{self, Checked};
use super::leaf::{Leaf, GENESIS_PREV};
use super::merkle::{self, Hash, MemoryHashes};
use super::record::Role;
use ed25519_dalek::VerifyingKey;
use serde::Serialize;
use std::collections::HashMap;
use std::fmt;

/// Most failures a report lists; later ones are counted, not listed.
pub const MAX_REPORTED_FAILURES: usize = 100;

/// A problem found, at the index of the entry it concerns, with a stable reason code: the
/// ingest rejection code where the entry breaks an admission rule (docs/PROTOCOL.md §6.6),
/// otherwise one of `leaf_invalid`, `index_mismatch`, `chain_broken`, `received_at_decreased`, `duplicate_seq`,
/// `bad_signature`, `tree`, `checkpoint`, `stored_column`, `missing_entry`, `key_table`, `rollup`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    pub index: u64,
    pub reason: &'static str,
    #[serde(rename = "message")]
    pub what: String,
}

impl Failure {
    /// A failure of the entry at `index`.
    pub fn new(index: u64, reason: &'static str, what: impl Into<String>) -> Self {
        Failure {
            index,
            reason,
            what: what.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "entry {} [{}]: {}", self.index, self.reason, self.what)
    }
}

/// What the checker learnt about one leaf. The tree and chain always advance (by the leaf
/// bytes' hash), so the entries after a bad one are still checked.
pub struct Checked1 {
    pub leaf_hash: Hash,
    /// The stored tree hashes this leaf adds, starting at `stored_hash_index(0, index)`.
    pub new_hashes: Vec<Hash>,
    /// The leaf and its envelope, when they parse and pass their own checks.
    pub entry: Option<(Leaf, Checked)>,
    /// The first problem of this entry, if any (signatures are reported later, by
    /// [`LogChecker::finish_signatures`]).
    pub failure: Option<Failure>,
}

/// Streaming checker; see the module docs.
pub struct LogChecker {
    origin: String,
    size: u64,
    prev: Hash,
    /// The latest `received_at` so far, with its entry's index.
    received: Option<(u64, crate::time::Timestamp)>,
    tree: MemoryHashes,
    registry: Registry,
    max_seq: HashMap<String, u64>,
    seen: HashMap<(String, u64), u64>,
    pending: Vec<(u64, Vec<u8>, ed25519_dalek::Signature, VerifyingKey)>,
}

/// Signatures queued before a parallel verification.
const SIGNATURE_CHUNK: usize = 4096;

impl LogChecker {
    /// A checker for the log named `origin` whose ledger entries are signed by `log_key`.
    pub fn new(origin: &str, log_key: VerifyingKey) -> Self {
        Self {
            origin: origin.to_owned(),
            size: 0,
            prev: GENESIS_PREV,
            received: None,
            tree: MemoryHashes::default(),
            registry: Registry::new(log_key),
            max_seq: HashMap::new(),
            seen: HashMap::new(),
            pending: Vec::new(),
        }
    }

    /// Entries checked so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The leaf hash of the last entry (32 zero bytes before any).
    pub fn head(&self) -> Hash {
        self.prev
    }

    /// The Merkle root of the entries checked so far.
    pub fn root(&self) -> Hash {
        merkle::tree_hash(self.size, &self.tree).expect("the frontier is kept")
    }

    /// The key registry as recorded by the entries checked so far.
    pub fn keys(&self) -> &HashMap<String, KeyState> {
        self.registry.keys()
    }

    /// Highest seq seen per signer.
    pub fn max_seqs(&self) -> &HashMap<String, u64> {
        &self.max_seq
    }

    /// Checks the next leaf. Signatures are verified in parallel chunks: call
    /// [`LogChecker::finish_signatures`] before trusting the result.
    pub fn push(&mut self, leaf_bytes: &[u8]) -> (Checked1, Vec<Failure>) {
        let index = self.size;
        let leaf_hash = merkle::leaf_hash(leaf_bytes);
        let (entry, failure) = self.check_entry(index, leaf_bytes);
        let new_hashes = merkle::append_leaves(index, &[leaf_hash], &mut self.tree)
            .expect("appending the next leaf to an in-memory tree");
        self.size += 1;
        self.prev = leaf_hash;
        if self.size.is_multiple_of(1024) {
            merkle::keep_frontier(self.size, &mut self.tree);
        }
        let sigs = if self.pending.len() >= SIGNATURE_CHUNK {
            self.finish_signatures()
        } else {
            Vec::new()
        };
        (
            Checked1 {
                leaf_hash,
                new_hashes,
                entry,
                failure,
            },
            sigs,
        )
    }

    /// The entry's leaf and envelope when they parse, and its first problem, if any.
    fn check_entry(
        &mut self,
        index: u64,
        leaf_bytes: &[u8],
    ) -> (Option<(Leaf, Checked)>, Option<Failure>) {
        let (leaf, checked, chained) = match self.read_entry(index, leaf_bytes) {
            Ok(read) => read,
            Err(f) => return (None, Some(f)),
        };
        let failure = if chained {
            self.admit_entry(index, &leaf, &checked).err()
        } else {
            let what = "hash chain broken: prev is not the previous entry's leaf hash".to_owned();
            Some(Failure::new(index, "chain_broken", what))
        };
        (Some((leaf, checked)), failure)
    }

    /// The entry's leaf (of index `index`) and its envelope checked alone, and whether the
    /// leaf's `prev` is the previous entry's leaf hash.
    fn read_entry(&self, index: u64, leaf_bytes: &[u8]) -> Result<(Leaf, Checked, bool), Failure> {
        let leaf =
            Leaf::from_bytes(leaf_bytes).map_err(|m| Failure::new(index, "leaf_invalid", m))?;
        if leaf.index != index {
            let what = format!("leaf says index {}, expected {index}", leaf.index);
            return Err(Failure::new(index, "index_mismatch", what));
        }
        let chained = leaf.prev_hash() == Some(self.prev);
        let checked =
            leaf.envelope.clone().check(&self.origin).map_err(|r| {
                Failure::new(index, r.reason.code(), format!("envelope invalid: {r}"))
            })?;
        Ok((leaf, checked, chained))
    }

    /// The rules of a chained entry against the entries before it: received times in order,
    /// the key registry, one entry per signer and seq, and (for the ledger's own entries) the
    /// signature; then the entry counts (its seq, its registry changes). Records' signatures
    /// are queued for [`LogChecker::finish_signatures`].
    fn admit_entry(&mut self, index: u64, leaf: &Leaf, checked: &Checked) -> Result<(), Failure> {
        let fail = |reason: &'static str, what: String| Failure::new(index, reason, what);
        let earlier = self.received;
        if earlier.is_none_or(|(_, t)| leaf.received_at >= t) {
            self.received = Some((index, leaf.received_at));
        }
        crate::leaf::check_received_in_order(earlier, leaf.received_at)
            .map_err(|what| fail(crate::leaf::RECEIVED_AT_DECREASED, what))?;
        let env = &checked.envelope;
        let key = self
            .registry
            .admit(index, checked, leaf.received_at)
            .map_err(|r| fail(r.reason.code(), r.to_string()))?;
        if let Some(first) = self.seen.get(&(env.signer.clone(), env.seq)) {
            let what = format!(
                "seq {} of {} already used at entry {first}",
                env.seq, env.signer
            );
            return Err(fail("duplicate_seq", what));
        }
        self.seen.insert((env.signer.clone(), env.seq), index);
        let m = self.max_seq.entry(env.signer.clone()).or_insert(0);
        *m = (*m).max(env.seq);
        if checked.kind.signed_by() == Role::Ledger {
            // The ledger's entries change the registry: verified before they count, so a
            // forged registration admits nothing after it (they are few; records wait for
            // the parallel check).
            if !checked.verify(&key) {
                let what =
                    "signature does not verify (strict Ed25519) over the message for this log";
                return Err(fail("bad_signature", what.into()));
            }
        } else {
            self.pending
                .push((index, checked.message.clone(), checked.signature, key));
        }
        self.registry.apply(index, leaf.received_at, checked);
        Ok(())
    }

    /// Verifies every queued signature (strictly, in parallel); one failure per bad one.
    pub fn finish_signatures(&mut self) -> Vec<Failure> {
        let pending = std::mem::take(&mut self.pending);
        let items: Vec<_> = pending
            .iter()
            .map(|(_, m, s, k)| (m.as_slice(), s, k))
            .collect();
        let ok = envelope::verify_strict_many(&items);
        pending
            .iter()
            .zip(ok)
            .filter(|(_, good)| !good)
            .map(|((index, ..), _)| {
                Failure::new(
                    *index,
                    "bad_signature",
                    "signature does not verify (strict Ed25519) over the message for this log",
                )
            })
            .collect()
    }
}
