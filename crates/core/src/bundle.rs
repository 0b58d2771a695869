//! Evidence bundles (docs/PROTOCOL.md §14) and their verification (§15), pure.
//!
//! A bundle is JSON Lines: a header with the signed checkpoint, context entries, record entries,
//! and an end line. Checking one entry ([`prepare_entry`]: base64, canonical leaf, inclusion
//! proof, envelope rules) needs nothing but the checkpoint, so callers run it on many lines in
//! parallel; [`BundleChecker`] then takes the prepared entries in order for what is sequential
//! (order, key validity by position) and hands each record to a [`Subject`] (a certificate's
//! tally, an invoice's rating). [`verify_bundle`] runs the whole: every signature is verified
//! strictly, in parallel, in the parallel stage once the key registry is complete, otherwise
//! over [`BundleChecker::accept`]'s output ([`first_bad_signature`]). The admission rules are
//! [`Registry`]'s, the same functions the ledger and `verify-log` apply.

use super::admission::Registry;
use super::checkpoint::{self, Checkpoint};
use super::envelope::{self, Checked};
use super::keys;
use super::leaf::Leaf;
use super::merkle::{self, Hash};
use super::record::{Body, Kind};
use super::rejection;
use super::time::Timestamp;
use base64::prelude::{Engine, BASE64_STANDARD};
use ed25519_dalek::{Signature, VerifyingKey};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

/// The `format` of a bundle header (protocol version 2).
pub const BUNDLE_FORMAT: &str = "gpuledger-bundle/v2";

/// Why a verification failed: the stable reason codes of §15.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Malformed,
    Truncated,
    Order,
    CheckpointSignature,
    CertificateSignature,
    CheckpointMismatch,
    NotInCheckpoint,
    LeafInvalid,
    InclusionProof,
    UnknownKey,
    KeyRevoked,
    KeyNotAllowed,
    EntrySignature,
    WrongTenant,
    OutsidePeriod,
    OutsideScope,
    EntriesMismatch,
    ClaimMismatch,
    ConsistencyProof,
    /// An entry breaks an admission rule (§6.7); the code is the ledger's rejection code
    /// (`node_not_allowed`, `unknown_tenant`, `too_old`, `price_conflict`, ...).
    Admission(rejection::Reason),
}

impl Serialize for Reason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.code())
    }
}

impl Reason {
    /// The bundle reason for a rejection by the admission rules: key validity keeps the
    /// bundle's own codes (§15 step 4), every other rule its ingest code.
    pub fn of_rejection(r: rejection::Reason) -> Reason {
        use rejection::Reason as R;
        match r {
            R::UnknownKey | R::UnknownSigner => Reason::UnknownKey,
            R::RevokedKey => Reason::KeyRevoked,
            R::KeySignerMismatch | R::RoleNotAllowed => Reason::KeyNotAllowed,
            R::BadSignature => Reason::EntrySignature,
            other => Reason::Admission(other),
        }
    }
}

impl Reason {
    /// The wire code.
    pub fn code(self) -> &'static str {
        match self {
            Reason::Malformed => "malformed",
            Reason::Truncated => "truncated",
            Reason::Order => "order",
            Reason::CheckpointSignature => "checkpoint_signature",
            Reason::CertificateSignature => "certificate_signature",
            Reason::CheckpointMismatch => "checkpoint_mismatch",
            Reason::NotInCheckpoint => "not_in_checkpoint",
            Reason::LeafInvalid => "leaf_invalid",
            Reason::InclusionProof => "inclusion_proof",
            Reason::UnknownKey => "unknown_key",
            Reason::KeyRevoked => "key_revoked",
            Reason::KeyNotAllowed => "key_not_allowed",
            Reason::EntrySignature => "entry_signature",
            Reason::WrongTenant => "wrong_tenant",
            Reason::OutsidePeriod => "outside_period",
            Reason::OutsideScope => "outside_scope",
            Reason::EntriesMismatch => "entries_mismatch",
            Reason::ClaimMismatch => "claim_mismatch",
            Reason::ConsistencyProof => "consistency_proof",
            Reason::Admission(r) => r.code(),
        }
    }
}

/// A failed check: the reason, the item it concerns (`entry 17`, `line 3`, `certificate`,
/// `gpu[0].gpu_seconds`) and a message for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub reason: Reason,
    pub item: String,
    pub message: String,
}

impl Failure {
    /// A failure.
    pub fn new(reason: Reason, item: impl Into<String>, message: impl Into<String>) -> Self {
        Failure {
            reason,
            item: item.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.reason.code(), self.item, self.message)
    }
}

/// What a bundle is evidence for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum BundleSubject {
    Certificate(String),
    Invoice(String),
}

/// The first line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    #[serde(rename = "type")]
    pub ty: String,
    pub format: String,
    pub log_origin: String,
    pub checkpoint: String,
    pub subject: BundleSubject,
}

impl Header {
    /// A header for `subject` against the signed checkpoint `note`.
    pub fn new(log_origin: &str, note: &str, subject: BundleSubject) -> Header {
        Header {
            ty: "header".into(),
            format: BUNDLE_FORMAT.into(),
            log_origin: log_origin.into(),
            checkpoint: note.into(),
            subject,
        }
    }
}

/// The JSON line of one entry (with its LF).
pub fn entry_line(index: u64, leaf_bytes: &[u8], proof: &[Hash]) -> Vec<u8> {
    let mut out = Vec::with_capacity(leaf_bytes.len() * 4 / 3 + proof.len() * 47 + 64);
    out.extend_from_slice(b"{\"index\":");
    out.extend_from_slice(index.to_string().as_bytes());
    out.extend_from_slice(b",\"leaf\":\"");
    out.extend_from_slice(BASE64_STANDARD.encode(leaf_bytes).as_bytes());
    out.extend_from_slice(b"\",\"proof\":[");
    for (i, h) in proof.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(merkle::encode_hash(h).as_bytes());
        out.push(b'"');
    }
    out.extend_from_slice(b"],\"type\":\"entry\"}\n");
    out
}

/// The JSON line of the header (with its LF).
pub fn header_line(h: &Header) -> Vec<u8> {
    let mut out = serde_json::to_vec(h).expect("headers serialise");
    out.push(b'\n');
    out
}

/// The JSON line of the end (with its LF).
pub fn end_line(entries: u64) -> Vec<u8> {
    format!("{{\"entries\":{entries},\"type\":\"end\"}}\n").into_bytes()
}

/// Any line, before its type is known; every member optional so one parse serves all.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLine<'a> {
    #[serde(rename = "type", borrow)]
    ty: Cow<'a, str>,
    index: Option<u64>,
    #[serde(borrow)]
    leaf: Option<Cow<'a, str>>,
    #[serde(borrow)]
    proof: Option<Vec<Cow<'a, str>>>,
    entries: Option<u64>,
    format: Option<String>,
    log_origin: Option<String>,
    checkpoint: Option<String>,
    subject: Option<BundleSubject>,
}

/// The checkpoint every proof of a bundle is against.
#[derive(Debug)]
pub struct Anchor {
    pub note: String,
    pub checkpoint: Checkpoint,
    pub log_key: VerifyingKey,
}

impl Anchor {
    /// The tree size.
    pub fn size(&self) -> u64 {
        self.checkpoint.size()
    }
    /// The root hash.
    pub fn root(&self) -> Hash {
        *self.checkpoint.hash()
    }
}

/// Parses the header line and checks its checkpoint against the verifier key (§15 steps 1–2).
pub fn read_header(line: &[u8], verifier_key: &str) -> Result<(Header, Anchor), Failure> {
    let malformed = |m: String| Failure::new(Reason::Malformed, "line 1", m);
    let h: Header = serde_json::from_slice(line)
        .map_err(|e| malformed(format!("the first line is not a bundle header: {e}")))?;
    if h.ty != "header" {
        return Err(malformed("the first line is not a bundle header".into()));
    }
    if h.format != BUNDLE_FORMAT {
        return Err(malformed(format!("unknown bundle format {:?}", h.format)));
    }
    let anchor = anchor(&h.checkpoint, verifier_key)?;
    if anchor.checkpoint.origin() != h.log_origin {
        return Err(Failure::new(
            Reason::CheckpointMismatch,
            "header",
            "log_origin is not the checkpoint's origin",
        ));
    }
    Ok((h, anchor))
}

/// Verifies a signed checkpoint note with a verifier key string.
pub fn anchor(note: &str, verifier_key: &str) -> Result<Anchor, Failure> {
    let log_key = verifier_public_key(verifier_key)
        .map_err(|m| Failure::new(Reason::Malformed, "log key", m))?;
    let checkpoint = checkpoint::verify_checkpoint(note.as_bytes(), verifier_key)
        .map_err(|e| Failure::new(Reason::CheckpointSignature, "checkpoint", e.to_string()))?;
    Ok(Anchor {
        note: note.to_owned(),
        checkpoint,
        log_key,
    })
}

/// The Ed25519 public key inside a signed-note verifier key `<name>+<id>+<base64(0x01 ‖ key)>`.
pub fn verifier_public_key(verifier_key: &str) -> Result<VerifyingKey, String> {
    // The name has no '+'; the base64 key may.
    let b64 = verifier_key
        .trim()
        .splitn(3, '+')
        .nth(2)
        .ok_or("not a verifier key (<name>+<key id>+<key>)")?;
    let bytes = BASE64_STANDARD
        .decode(b64)
        .map_err(|_| "the verifier key's key is not base64")?;
    match bytes.split_first() {
        Some((1, key)) => VerifyingKey::from_bytes(
            key.try_into()
                .map_err(|_| "the verifier key's key is not 32 bytes")?,
        )
        .map_err(|_| "the verifier key's key is not an Ed25519 point".into()),
        _ => Err("the verifier key is not an Ed25519 (algorithm 1) key".into()),
    }
}

/// One line, checked as far as it can be alone.
pub enum Prepared {
    Header,
    Entry(Box<PreparedEntry>),
    End(u64),
}

/// An entry whose leaf, proof and envelope rules have been checked.
pub struct PreparedEntry {
    pub index: u64,
    pub leaf_hash: Hash,
    /// The leaf's `received_at`: the clock of the entry's time rules.
    pub received_at: Timestamp,
    pub checked: Checked,
}

/// Checks one line alone (§15 steps 1 and 4 up to key validity); `line_no` is 1-based.
pub fn prepare_line(line_no: u64, line: &[u8], anchor: &Anchor) -> Result<Prepared, Failure> {
    let at = || format!("line {line_no}");
    let raw: RawLine = serde_json::from_slice(line)
        .map_err(|e| Failure::new(Reason::Malformed, at(), format!("not a bundle line: {e}")))?;
    let only = |ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(Failure::new(
                Reason::Malformed,
                at(),
                format!("members do not fit a {:?} line", raw.ty),
            ))
        }
    };
    match raw.ty.as_ref() {
        "header" => Ok(Prepared::Header),
        "end" => {
            only(raw.index.is_none() && raw.leaf.is_none() && raw.proof.is_none())?;
            let n = raw.entries.ok_or_else(|| {
                Failure::new(Reason::Malformed, at(), "the end line has no entry count")
            })?;
            Ok(Prepared::End(n))
        }
        "entry" => {
            only(
                raw.entries.is_none()
                    && raw.format.is_none()
                    && raw.log_origin.is_none()
                    && raw.checkpoint.is_none()
                    && raw.subject.is_none(),
            )?;
            let (Some(index), Some(leaf), Some(proof)) = (raw.index, raw.leaf, raw.proof) else {
                return Err(Failure::new(
                    Reason::Malformed,
                    at(),
                    "an entry needs index, leaf and proof",
                ));
            };
            prepare_entry(index, &leaf, &proof, anchor).map(|e| Prepared::Entry(Box::new(e)))
        }
        other => Err(Failure::new(
            Reason::Malformed,
            at(),
            format!("unknown line type {other:?}"),
        )),
    }
}

/// Checks one entry alone: in the checkpoint, canonical leaf of that index, inclusion proof,
/// envelope valid at its receive time.
pub fn prepare_entry<S: AsRef<str>>(
    index: u64,
    leaf_b64: &str,
    proof: &[S],
    anchor: &Anchor,
) -> Result<PreparedEntry, Failure> {
    let item = || format!("entry {index}");
    let fail = |r: Reason, m: String| Failure::new(r, item(), m);
    if index >= anchor.size() {
        return Err(fail(
            Reason::NotInCheckpoint,
            format!("index is not below the checkpoint's size {}", anchor.size()),
        ));
    }
    let bytes = BASE64_STANDARD
        .decode(leaf_b64)
        .map_err(|_| fail(Reason::Malformed, "leaf is not base64".into()))?;
    let leaf = Leaf::from_bytes(&bytes).map_err(|m| fail(Reason::LeafInvalid, m))?;
    if leaf.index != index {
        return Err(fail(
            Reason::LeafInvalid,
            format!("the leaf says index {}", leaf.index),
        ));
    }
    let proof: Option<Vec<Hash>> = proof
        .iter()
        .map(|h| merkle::decode_hash(h.as_ref()))
        .collect();
    let proof = proof.ok_or_else(|| {
        fail(
            Reason::Malformed,
            "proof hashes are not base64 of 32 bytes".into(),
        )
    })?;
    let leaf_hash = merkle::leaf_hash(&bytes);
    merkle::check_record(&proof, anchor.size(), anchor.root(), index, leaf_hash).map_err(|_| {
        fail(
            Reason::InclusionProof,
            "the inclusion proof does not lead to the checkpoint's root".into(),
        )
    })?;
    let received_at = leaf.received_at;
    let checked = leaf
        .envelope
        .check(anchor.checkpoint.origin())
        .map_err(|r| fail(Reason::LeafInvalid, format!("envelope invalid: {r}")))?;
    Ok(PreparedEntry {
        index,
        leaf_hash,
        received_at,
        checked,
    })
}

/// What a bundle is checked for: receives context entries, then records, in order.
pub trait Subject {
    /// A context entry (every kind but `gpu_usage` and `energy`), after its key and signature.
    fn context(&mut self, index: u64, body: &Body) -> Result<(), Failure>;
    /// A record entry (`gpu_usage` or `energy`).
    fn record(&mut self, index: u64, leaf_hash: &Hash, body: &Body) -> Result<(), Failure>;
    /// The tenant the bundle is about, if any: a record of another tenant is `wrong_tenant`
    /// (§15 step 5) before any rule that needs its tenant's registrations, which a bundle about
    /// one tenant does not carry.
    fn tenant(&self) -> Option<&str> {
        None
    }
}

/// A bundle checked for itself only (§15 steps 1, 2 and 4).
pub struct NoSubject;

impl Subject for NoSubject {
    fn context(&mut self, _: u64, _: &Body) -> Result<(), Failure> {
        Ok(())
    }
    fn record(&mut self, _: u64, _: &Hash, _: &Body) -> Result<(), Failure> {
        Ok(())
    }
}

/// Whether a kind is a record (the second part of a bundle).
pub fn is_record_kind(k: Kind) -> bool {
    matches!(k, Kind::GpuUsage | Kind::Energy)
}

/// A signature to verify, and the entry it belongs to (borrowed from the prepared entry).
pub struct PendingSignature<'a> {
    pub index: u64,
    pub message: &'a [u8],
    pub signature: &'a Signature,
    pub key: VerifyingKey,
}

/// The sequential part of bundle verification; see the module docs.
pub struct BundleChecker {
    registry: Registry,
    subject_tenant: Option<String>,
    last_index: Option<u64>,
    in_records: bool,
    entries: u64,
    records: u64,
    ended: bool,
}

impl BundleChecker {
    /// A checker for entries proven against `anchor`.
    pub fn new(anchor: &Anchor) -> Self {
        BundleChecker {
            registry: Registry::new(anchor.log_key),
            subject_tenant: None,
            last_index: None,
            in_records: false,
            entries: 0,
            records: 0,
            ended: false,
        }
    }

    /// Entry lines seen.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// The tenant the bundle is about (see [`Subject::tenant`]).
    pub fn set_subject_tenant(&mut self, tenant: Option<&str>) {
        self.subject_tenant = tenant.map(str::to_owned);
    }

    /// Record entries seen.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Takes the next prepared line: order, the end line, and every admission rule at the
    /// entry's index against the context seen so far (key validity, scope, parties, time,
    /// prices). Returns the signature the caller must verify before handing the entry to the
    /// subject with [`BundleChecker::apply`].
    pub fn accept<'a>(
        &mut self,
        line_no: u64,
        p: &'a Prepared,
    ) -> Result<Option<PendingSignature<'a>>, Failure> {
        let Some(e) = self.entry_of(line_no, p)? else {
            return Ok(None);
        };
        self.place(e)?;
        let key = self.admit(e)?;
        if e.checked.kind.signed_by() == super::record::Role::Ledger {
            // Context that changes the registry counts only once its signature holds.
            if !e.checked.verify(&key) {
                return Err(bad_signature(e.index));
            }
            self.registry.apply(e.index, &e.checked.body);
            return Ok(None);
        }
        self.registry.apply(e.index, &e.checked.body);
        Ok(Some(PendingSignature {
            index: e.index,
            message: &e.checked.message,
            signature: &e.checked.signature,
            key,
        }))
    }

    /// The entry a line holds, or `None` for the end line (whose count is checked here). A
    /// line after the end line, or a second header, fails.
    fn entry_of<'a>(
        &mut self,
        line_no: u64,
        p: &'a Prepared,
    ) -> Result<Option<&'a PreparedEntry>, Failure> {
        let at = || format!("line {line_no}");
        if self.ended {
            return Err(Failure::new(
                Reason::Malformed,
                at(),
                "a line after the end line",
            ));
        }
        match p {
            Prepared::Header => Err(Failure::new(Reason::Order, at(), "a second header")),
            Prepared::End(n) => {
                if *n != self.entries {
                    return Err(Failure::new(
                        Reason::Truncated,
                        at(),
                        format!(
                            "the end line counts {n} entries, the bundle has {}",
                            self.entries
                        ),
                    ));
                }
                self.ended = true;
                Ok(None)
            }
            Prepared::Entry(e) => Ok(Some(e)),
        }
    }

    /// The entry's place in the bundle: context before records, indexes increasing within
    /// each part, records of the subject's tenant only. Counts it.
    fn place(&mut self, e: &PreparedEntry) -> Result<(), Failure> {
        let index = e.index;
        let item = || format!("entry {index}");
        let kind = e.checked.kind;
        let record = is_record_kind(kind);
        if record {
            self.in_records = true;
        } else if self.in_records {
            return Err(Failure::new(
                Reason::Order,
                item(),
                format!("a {kind:?} context entry after the records"),
            ));
        }
        if record && self.records == 0 {
            // The records start: indexes increase again from here.
            self.last_index = None;
        }
        if self.last_index.is_some_and(|l| l >= index) {
            return Err(Failure::new(
                Reason::Order,
                item(),
                "indexes must increase within each part of the bundle",
            ));
        }
        self.last_index = Some(index);
        self.entries += 1;
        if record {
            self.records += 1;
        }
        if let Some(t) = self.subject_tenant.as_deref() {
            if record && e.checked.body.tenant() != Some(t) {
                return Err(Failure::new(
                    Reason::WrongTenant,
                    item(),
                    format!("the record is not {t}'s"),
                ));
            }
        }
        Ok(())
    }

    /// Every admission rule at the entry's index (§15 step 4): the key to verify it with.
    fn admit(&self, e: &PreparedEntry) -> Result<VerifyingKey, Failure> {
        let env = &e.checked.envelope;
        let body = &e.checked.body;
        self.registry
            .admit(
                e.index,
                e.checked.kind,
                &env.signer,
                &env.key_id,
                body,
                e.received_at,
            )
            .map_err(|r| {
                // A registration or revocation inconsistent with the keys before it: the leaf
                // itself is wrong (§15 step 4).
                let registry_entry =
                    matches!(
                        body,
                        Body::SignerKeyRegistered(_) | Body::SignerKeyRevoked(_)
                    ) && r.field.as_deref().is_some_and(|f| f.starts_with("body."));
                let reason = if registry_entry {
                    Reason::LeafInvalid
                } else {
                    Reason::of_rejection(r.reason)
                };
                Failure::new(reason, format!("entry {}", e.index), r.to_string())
            })
    }

    /// The public keys registered in the context, by key id (the log key included).
    fn signing_keys(&self, log_key: VerifyingKey) -> HashMap<String, VerifyingKey> {
        let mut m: HashMap<String, VerifyingKey> = self
            .registry
            .keys()
            .iter()
            .map(|(id, k)| (id.clone(), k.key))
            .collect();
        m.insert(keys::key_id(&log_key), log_key);
        m
    }

    /// Hands a checked entry (key and signature good) to the subject.
    pub fn apply(&self, e: &PreparedEntry, subject: &mut dyn Subject) -> Result<(), Failure> {
        if is_record_kind(e.checked.kind) {
            subject.record(e.index, &e.leaf_hash, &e.checked.body)
        } else {
            subject.context(e.index, &e.checked.body)
        }
    }

    /// Requires the end line.
    pub fn finish(&self) -> Result<(), Failure> {
        if self.ended {
            Ok(())
        } else {
            Err(Failure::new(
                Reason::Truncated,
                "end",
                "the bundle has no end line",
            ))
        }
    }
}

/// Verifies pending signatures strictly, in parallel, one bool each.
fn verify_pending(pending: &[PendingSignature]) -> Vec<bool> {
    let items: Vec<_> = pending
        .iter()
        .map(|p| (p.message, p.signature, &p.key))
        .collect();
    envelope::verify_strict_many(&items)
}

/// The failure of entry `index` whose signature does not verify.
fn bad_signature(index: u64) -> Failure {
    Failure::new(
        Reason::EntrySignature,
        format!("entry {index}"),
        "the signature does not verify (Ed25519)",
    )
}

/// Verifies pending signatures in parallel; the index of the first bad one.
pub fn first_bad_signature(pending: &[PendingSignature]) -> Option<u64> {
    pending
        .iter()
        .zip(verify_pending(pending))
        .find(|(_, good)| !good)
        .map(|(p, _)| p.index)
}

/// What a verified bundle held.
#[derive(Debug)]
pub struct Verified {
    pub header: Header,
    pub anchor: Anchor,
    pub entries: u64,
    pub records: u64,
}

/// Lines checked in parallel at a time.
const CHUNK: usize = 4096;

/// Lines with their 1-based numbers, as the reader passes them on.
type Chunk = Vec<(u64, Vec<u8>)>;

/// A chunk checked in parallel: its lines, what each is alone, and, when the registry was
/// frozen, whether each entry's signature verified.
type CheckedChunk = (Chunk, Vec<Result<Prepared, Failure>>, Option<Vec<bool>>);

/// The signing keys once every context entry has been applied (set by the sequential stage,
/// read by the parallel one).
type Frozen = std::sync::OnceLock<HashMap<String, VerifyingKey>>;

/// Verifies a whole bundle from its lines (each without its LF), in order, reporting the first
/// failure in line order (§15), verifying every signature strictly. `make_subject` sees
/// the verified header first (to check the subject and checkpoint against a certificate or
/// invoice); `progress` gets the lines done.
///
/// Three stages overlap: a reader thread splits lines into chunks (`read_chunks`); each
/// chunk is checked in parallel (`check_chunks`: lines alone, then, once the context is
/// complete and the key registry can no longer change, the records' signatures in batches);
/// and a sequential stage (`apply_chunks`) applies order, key validity and the subject, in
/// line order.
pub fn verify_bundle<S: Subject>(
    lines: impl Iterator<Item = std::io::Result<Vec<u8>>> + Send,
    verifier_key: &str,
    make_subject: impl FnOnce(&Header, &Anchor) -> Result<S, Failure>,
    progress: &mut dyn FnMut(u64),
) -> Result<(Verified, S), Failure> {
    use std::sync::mpsc::sync_channel;
    let mut lines = lines.enumerate().map(|(i, l)| {
        l.map(|l| (i as u64 + 1, l))
            .map_err(|e| Failure::new(Reason::Malformed, format!("line {}", i + 1), e.to_string()))
    });
    let (_, first) = lines
        .next()
        .ok_or_else(|| Failure::new(Reason::Truncated, "line 1", "the bundle is empty"))??;
    let (header, anchor) = read_header(&first, verifier_key)?;
    let mut subject = make_subject(&header, &anchor)?;
    let mut checker = BundleChecker::new(&anchor);
    checker.set_subject_tenant(subject.tenant());
    let (chunk_tx, chunk_rx) = sync_channel::<Result<Chunk, Failure>>(2);
    let (checked_tx, checked_rx) = sync_channel::<CheckedChunk>(2);
    let frozen = Frozen::new();
    let anchor_ref = &anchor;
    std::thread::scope(|scope| {
        scope.spawn(move || read_chunks(lines, chunk_tx));
        let frozen = &frozen;
        scope.spawn(move || check_chunks(chunk_rx, checked_tx, anchor_ref, frozen));
        // The receiver is dropped when this returns, which stops the other stages early on a
        // failure.
        apply_chunks(
            checked_rx,
            &mut checker,
            &mut subject,
            frozen,
            anchor_ref.log_key,
            progress,
        )
    })?;
    Ok((
        Verified {
            header,
            entries: checker.entries(),
            records: checker.records(),
            anchor,
        },
        subject,
    ))
}

/// The reader stage: numbered lines, `CHUNK` at a time; a read failure is passed on and ends
/// the reading.
fn read_chunks(
    lines: impl Iterator<Item = Result<(u64, Vec<u8>), Failure>>,
    chunk_tx: std::sync::mpsc::SyncSender<Result<Chunk, Failure>>,
) {
    let mut chunk = Vec::with_capacity(CHUNK);
    for l in lines {
        match l {
            Ok(l) => chunk.push(l),
            Err(f) => {
                let _ = chunk_tx.send(Err(f));
                return;
            }
        }
        if chunk.len() == CHUNK && chunk_tx.send(Ok(std::mem::take(&mut chunk))).is_err() {
            return;
        }
    }
    if !chunk.is_empty() {
        let _ = chunk_tx.send(Ok(chunk));
    }
}

/// The parallel stage: each line of a chunk checked alone, and the signatures verified when
/// the registry is frozen. A read failure is passed on as a chunk of one failed line.
fn check_chunks(
    chunk_rx: std::sync::mpsc::Receiver<Result<Chunk, Failure>>,
    checked_tx: std::sync::mpsc::SyncSender<CheckedChunk>,
    anchor: &Anchor,
    frozen: &Frozen,
) {
    use rayon::prelude::*;
    for chunk in chunk_rx {
        let chunk = match chunk {
            Ok(c) => c,
            Err(f) => {
                let _ = checked_tx.send((vec![(0, Vec::new())], vec![Err(f)], None));
                return;
            }
        };
        let prepared: Vec<Result<Prepared, Failure>> = chunk
            .par_iter()
            .map(|(no, l)| prepare_line(*no, l, anchor))
            .collect();
        let sigs = frozen.get().map(|keys| frozen_signatures(&prepared, keys));
        if checked_tx.send((chunk, prepared, sigs)).is_err() {
            return;
        }
    }
}

/// Whether the signature of each prepared line verifies with the frozen registry's `keys`
/// (`true` for lines that are not entries). Entries whose key is unknown fail key validity in
/// the sequential stage, before their signature counts; only the others are verified, and the
/// results are put back at their lines.
fn frozen_signatures(
    prepared: &[Result<Prepared, Failure>],
    keys: &HashMap<String, VerifyingKey>,
) -> Vec<bool> {
    let (lines, pending): (Vec<usize>, Vec<PendingSignature>) = prepared
        .iter()
        .enumerate()
        .filter_map(|(line, p)| match p {
            Ok(Prepared::Entry(e)) => keys.get(&e.checked.envelope.key_id).map(|key| {
                let p = PendingSignature {
                    index: e.index,
                    message: &e.checked.message,
                    signature: &e.checked.signature,
                    key: *key,
                };
                (line, p)
            }),
            _ => None,
        })
        .unzip();
    let mut ok = vec![true; prepared.len()];
    for (line, good) in lines.into_iter().zip(verify_pending(&pending)) {
        ok[line] = good;
    }
    ok
}

/// The sequential stage, in line order: each chunk's lines accepted, their pending signatures
/// verified, the good entries handed to the subject; the registry frozen once the records
/// start. `progress` gets the lines done after each chunk.
fn apply_chunks<S: Subject>(
    checked_rx: std::sync::mpsc::Receiver<CheckedChunk>,
    checker: &mut BundleChecker,
    subject: &mut S,
    frozen: &Frozen,
    log_key: VerifyingKey,
    progress: &mut dyn FnMut(u64),
) -> Result<(), Failure> {
    let mut done = 1u64;
    for (chunk, prepared, sigs) in checked_rx {
        let (pending, ok_upto, stop) = accept_chunk(checker, &chunk, &prepared, sigs.as_deref());
        let bad_sig = first_bad_signature(&pending);
        for p in prepared[..ok_upto].iter() {
            if let Ok(Prepared::Entry(e)) = p {
                if bad_sig == Some(e.index) {
                    return Err(bad_signature(e.index));
                }
                checker.apply(e, subject)?;
            }
        }
        if let Some(f) = stop {
            return Err(f);
        }
        if checker.in_records && frozen.get().is_none() {
            let _ = frozen.set(checker.signing_keys(log_key));
        }
        done += chunk.len() as u64;
        progress(done);
    }
    checker.finish()
}

/// Accepts a chunk's lines in order ([`BundleChecker::accept`]) up to the first failure: the
/// signatures left to verify (none when `sigs`, the frozen stage's verdicts, are given), how
/// many lines were accepted, and the failure that stopped it, if any.
fn accept_chunk<'a>(
    checker: &mut BundleChecker,
    chunk: &Chunk,
    prepared: &'a [Result<Prepared, Failure>],
    sigs: Option<&[bool]>,
) -> (Vec<PendingSignature<'a>>, usize, Option<Failure>) {
    let mut pending = Vec::new();
    let mut ok_upto = 0;
    for (i, ((no, _), p)) in chunk.iter().zip(prepared).enumerate() {
        let r = p
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|p| checker.accept(*no, p));
        match r {
            Ok(Some(sig)) => match sigs {
                Some(ok) if !ok[i] => return (pending, ok_upto, Some(bad_signature(sig.index))),
                Some(_) => {}
                None => pending.push(sig),
            },
            Ok(None) => {}
            Err(f) => return (pending, ok_upto, Some(f)),
        }
        ok_upto += 1;
    }
    (pending, ok_upto, None)
}
