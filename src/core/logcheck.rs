//! Re-checks a log from its leaves alone, in order: canonical leaf bytes, indexes, the hash
//! chain, each envelope's validity at its receive time, the key registry as the log itself
//! records it (ledger-signed registrations and revocations), roles, every signature, and the
//! Merkle tree. Pure: callers feed it leaf bytes from wherever they keep them.

use super::envelope::{self, Checked};
use super::ids::LEDGER_SIGNER;
use super::keys;
use super::leaf::{Leaf, GENESIS_PREV};
use super::merkle::{self, Hash, MemoryHashes};
use super::record::{Body, Role};
use ed25519_dalek::VerifyingKey;
use std::collections::HashMap;
use std::fmt;

/// The first problem found, at the index of the entry it concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub index: u64,
    pub what: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "entry {}: {}", self.index, self.what)
    }
}

/// A key as the log records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyState {
    pub signer: String,
    pub role: Role,
    pub key: VerifyingKey,
    pub registered_idx: u64,
    pub revoked_idx: Option<u64>,
}

/// What the checker learnt about one leaf.
pub struct Checked1 {
    pub leaf: Leaf,
    pub leaf_hash: Hash,
    pub checked: Checked,
    /// The stored tree hashes this leaf adds, starting at `stored_hash_index(0, index)`.
    pub new_hashes: Vec<Hash>,
}

/// Streaming checker; see the module docs.
pub struct LogChecker {
    log_key: VerifyingKey,
    log_key_id: String,
    size: u64,
    prev: Hash,
    tree: MemoryHashes,
    keys: HashMap<String, KeyState>,
    max_seq: HashMap<String, u64>,
    seen: HashMap<(String, u64), u64>,
    pending: Vec<(u64, Vec<u8>, ed25519_dalek::Signature, VerifyingKey)>,
}

/// Signatures queued before a batch verification.
const SIGNATURE_BATCH: usize = 4096;

impl LogChecker {
    /// A checker for a log whose ledger entries are signed by `log_key`.
    pub fn new(log_key: VerifyingKey) -> Self {
        Self {
            log_key_id: keys::key_id(&log_key),
            log_key,
            size: 0,
            prev: GENESIS_PREV,
            tree: MemoryHashes::default(),
            keys: HashMap::new(),
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
        &self.keys
    }

    /// Highest seq seen per signer.
    pub fn max_seqs(&self) -> &HashMap<String, u64> {
        &self.max_seq
    }

    /// Checks the next leaf. Signatures are verified in batches: call [`LogChecker::finish_signatures`]
    /// before trusting the result.
    pub fn push(&mut self, leaf_bytes: &[u8]) -> Result<Checked1, Failure> {
        let index = self.size;
        let fail = |what: String| Failure { index, what };
        let leaf = Leaf::from_bytes(leaf_bytes).map_err(fail)?;
        if leaf.index != index {
            return Err(fail(format!(
                "leaf says index {}, expected {index}",
                leaf.index
            )));
        }
        if leaf.prev_hash() != Some(self.prev) {
            return Err(fail(
                "hash chain broken: prev is not the previous entry's leaf hash".into(),
            ));
        }
        let checked = leaf
            .envelope
            .clone()
            .check(leaf.received_at)
            .map_err(|r| fail(format!("envelope invalid at its receive time: {r}")))?;
        let env = &checked.envelope;
        let role = checked.kind.signed_by();
        let key = if role == Role::Ledger {
            if env.signer != LEDGER_SIGNER || env.key_id != self.log_key_id {
                return Err(fail(format!(
                    "{} entry not signed by the log key",
                    env.kind
                )));
            }
            self.log_key
        } else {
            let k = self.keys.get(&env.key_id).ok_or_else(|| {
                fail(format!(
                    "key {} was not registered before this entry",
                    env.key_id
                ))
            })?;
            if k.signer != env.signer {
                return Err(fail(format!(
                    "key {} belongs to {}, not {}",
                    env.key_id, k.signer, env.signer
                )));
            }
            if k.role != role {
                return Err(fail(format!(
                    "signer {} (role {}) may not sign {}",
                    env.signer,
                    k.role.as_str(),
                    env.kind
                )));
            }
            if let Some(r) = k.revoked_idx {
                return Err(fail(format!("key {} was revoked at entry {r}", env.key_id)));
            }
            k.key
        };
        if let Some(first) = self.seen.insert((env.signer.clone(), env.seq), index) {
            return Err(fail(format!(
                "seq {} of {} already used at entry {first}",
                env.seq, env.signer
            )));
        }
        let m = self.max_seq.entry(env.signer.clone()).or_insert(0);
        *m = (*m).max(env.seq);
        self.apply_registry(index, &checked.body).map_err(fail)?;
        self.pending
            .push((index, checked.message.clone(), checked.signature, key));
        if self.pending.len() >= SIGNATURE_BATCH {
            self.finish_signatures()?;
        }
        let leaf_hash = merkle::leaf_hash(leaf_bytes);
        let new_hashes = merkle::append_leaves(index, &[leaf_hash], &mut self.tree)
            .map_err(|e| fail(format!("tree: {e}")))?;
        self.size += 1;
        self.prev = leaf_hash;
        if self.size.is_multiple_of(1024) {
            merkle::keep_frontier(self.size, &mut self.tree);
        }
        Ok(Checked1 {
            leaf,
            leaf_hash,
            checked,
            new_hashes,
        })
    }

    fn apply_registry(&mut self, index: u64, body: &Body) -> Result<(), String> {
        match body {
            Body::SignerKeyRegistered(r) => {
                let key = keys::decode_public(&r.public_key)
                    .map_err(|e| format!("registered key: {e}"))?;
                if keys::key_id(&key) != r.key_id {
                    return Err(format!(
                        "registered key id {} does not match its public key",
                        r.key_id
                    ));
                }
                if self.keys.contains_key(&r.key_id) {
                    return Err(format!("key {} registered twice", r.key_id));
                }
                if let Some(other) = self
                    .keys
                    .values()
                    .find(|k| k.signer == r.signer && k.role != r.role)
                {
                    return Err(format!(
                        "signer {} registered with role {} and {}",
                        r.signer,
                        other.role.as_str(),
                        r.role.as_str()
                    ));
                }
                self.keys.insert(
                    r.key_id.clone(),
                    KeyState {
                        signer: r.signer.clone(),
                        role: r.role,
                        key,
                        registered_idx: index,
                        revoked_idx: None,
                    },
                );
            }
            Body::SignerKeyRevoked(r) => {
                let k = self
                    .keys
                    .get_mut(&r.key_id)
                    .ok_or_else(|| format!("revokes unknown key {}", r.key_id))?;
                if k.signer != r.signer || k.revoked_idx.is_some() {
                    return Err(format!("revocation of key {} is inconsistent", r.key_id));
                }
                k.revoked_idx = Some(index);
            }
            _ => {}
        }
        Ok(())
    }

    /// Verifies every queued signature; names the first entry whose signature is bad.
    pub fn finish_signatures(&mut self) -> Result<(), Failure> {
        let pending = std::mem::take(&mut self.pending);
        let items: Vec<_> = pending
            .iter()
            .map(|(_, m, s, k)| (m.as_slice(), s, k))
            .collect();
        let ok = envelope::verify_strict_many(&items);
        match pending.iter().zip(ok).find(|(_, good)| !good) {
            Some(((index, ..), _)) => Err(Failure {
                index: *index,
                what: "signature does not verify".into(),
            }),
            None => Ok(()),
        }
    }
}
