//! Evidence bundles (docs/PROTOCOL.md §14) and their verification (§15), pure.
//!
//! A bundle is JSON Lines: a header with the signed checkpoint, context entries, record entries,
//! and an end line. Two formats are read, the header's `format` says which ([`Format`]):
//! `gpuledger-bundle/v2` gives each entry its base64 leaf and its own inclusion proof;
//! `gpuledger-bundle/v3` gives each leaf as its JSON object (the line canonical, so the object's
//! text is the leaf bytes) and proves all of them at once with one multi-proof
//! ([`crate::multiproof`]) in node lines before the end line. Checking one entry
//! ([`prepare_entry`]: canonical leaf, in v2 its inclusion proof, envelope rules) needs nothing
//! but the checkpoint, so callers run it on many lines in parallel; in v3 the checker keeps each
//! entry's index and leaf hash (40 bytes) and recomputes the root from them and the nodes as the
//! node lines stream by; [`BundleChecker`] then takes the prepared entries in order for what is sequential
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
use super::multiproof::{MultiProofError, RootBuilder};
use super::record::{Body, Kind};
use super::rejection;
use super::time::Timestamp;
use super::{canonical, json};
use base64::prelude::{Engine, BASE64_STANDARD};
use ed25519_dalek::{Signature, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

/// The `format` of a version-2 bundle header: each entry with its own inclusion proof.
pub const BUNDLE_FORMAT: &str = "gpuledger-bundle/v2";

/// The `format` of a version-3 bundle header: leaves as JSON objects, one multi-proof.
pub const BUNDLE_FORMAT_V3: &str = "gpuledger-bundle/v3";

/// Most hashes one node line of a version-3 bundle holds (at least one).
pub const MAX_NODES_PER_LINE: usize = 4096;

/// A bundle format (docs/PROTOCOL.md §14).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum Format {
    /// `gpuledger-bundle/v2`: base64 leaves, an inclusion proof per entry.
    V2,
    /// `gpuledger-bundle/v3`: leaves as canonical JSON objects, one multi-proof (the default).
    #[default]
    V3,
}

impl Format {
    /// The header's `format` string.
    pub fn name(self) -> &'static str {
        match self {
            Format::V2 => BUNDLE_FORMAT,
            Format::V3 => BUNDLE_FORMAT_V3,
        }
    }

    /// The format a header names, if known.
    pub fn parse(name: &str) -> Option<Format> {
        match name {
            BUNDLE_FORMAT => Some(Format::V2),
            BUNDLE_FORMAT_V3 => Some(Format::V3),
            _ => None,
        }
    }
}

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
    /// An entry's `received_at` is before that of an entry earlier in the log (§7).
    ReceivedAtDecreased,
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
            Reason::ReceivedAtDecreased => super::leaf::RECEIVED_AT_DECREASED,
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
    /// A version-2 header for `subject` against the signed checkpoint `note` (see
    /// [`Header::with_format`]).
    pub fn new(log_origin: &str, note: &str, subject: BundleSubject) -> Header {
        Header {
            ty: "header".into(),
            format: BUNDLE_FORMAT.into(),
            log_origin: log_origin.into(),
            checkpoint: note.into(),
            subject,
        }
    }

    /// The header with `format` instead.
    pub fn with_format(mut self, format: Format) -> Header {
        self.format = format.name().into();
        self
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

/// The JSON line of the header (with its LF); canonical (RFC 8785) in a version-3 bundle,
/// where every line is.
pub fn header_line(h: &Header) -> Vec<u8> {
    let mut out = if Format::parse(&h.format) == Some(Format::V3) {
        let v = serde_json::to_value(h).expect("headers serialise");
        super::canonical::to_vec(&v).expect("headers hold strings only")
    } else {
        serde_json::to_vec(h).expect("headers serialise")
    };
    out.push(b'\n');
    out
}

/// The JSON line of the end of a version-2 bundle (with its LF).
pub fn end_line(entries: u64) -> Vec<u8> {
    format!("{{\"entries\":{entries},\"type\":\"end\"}}\n").into_bytes()
}

/// The JSON line of one entry of a version-3 bundle (with its LF): `leaf_bytes`, canonical
/// JSON, are written as they are, so the line is canonical too.
pub fn entry_line_v3(index: u64, leaf_bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(leaf_bytes.len() + 48);
    write_entry_v3(index, leaf_bytes, &mut out);
    out.push(b'\n');
    out
}

/// `{"index":N,"leaf":<leaf bytes>,"type":"entry"}`, without LF.
fn write_entry_v3(index: u64, leaf_bytes: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"index\":");
    out.extend_from_slice(index.to_string().as_bytes());
    out.extend_from_slice(b",\"leaf\":");
    out.extend_from_slice(leaf_bytes);
    out.extend_from_slice(b",\"type\":\"entry\"}");
}

/// The JSON line of some nodes of a version-3 bundle's multi-proof (1 to
/// [`MAX_NODES_PER_LINE`] of them; with its LF).
pub fn nodes_line(hashes: &[Hash]) -> Vec<u8> {
    assert!(
        !hashes.is_empty() && hashes.len() <= MAX_NODES_PER_LINE,
        "a node line holds 1 to {MAX_NODES_PER_LINE} hashes"
    );
    let mut out = nodes_line_text(hashes.iter().map(merkle::encode_hash));
    out.push(b'\n');
    out
}

/// `{"hashes":[...],"type":"nodes"}`, without LF.
fn nodes_line_text<S: AsRef<str>>(hashes: impl Iterator<Item = S>) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + 47 * MAX_NODES_PER_LINE);
    out.extend_from_slice(b"{\"hashes\":[");
    for (i, h) in hashes.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(h.as_ref().as_bytes());
        out.push(b'"');
    }
    out.extend_from_slice(b"],\"type\":\"nodes\"}");
    out
}

/// The JSON line of the end of a version-3 bundle (with its LF).
pub fn end_line_v3(entries: u64, nodes: u64) -> Vec<u8> {
    format!("{{\"entries\":{entries},\"nodes\":{nodes},\"type\":\"end\"}}\n").into_bytes()
}

/// Any line, before its type is known; every member optional so one parse serves all.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLine<'a> {
    #[serde(rename = "type", borrow)]
    ty: Cow<'a, str>,
    index: Option<u64>,
    /// A base64 string in v2, the leaf's JSON object in v3.
    #[serde(borrow)]
    leaf: Option<&'a RawValue>,
    #[serde(borrow)]
    proof: Option<Vec<Cow<'a, str>>>,
    #[serde(borrow)]
    hashes: Option<Vec<Cow<'a, str>>>,
    entries: Option<u64>,
    nodes: Option<u64>,
    format: Option<String>,
    log_origin: Option<String>,
    checkpoint: Option<String>,
    subject: Option<BundleSubject>,
}

/// The checkpoint every proof of a bundle is against, and the bundle's format.
#[derive(Debug)]
pub struct Anchor {
    pub note: String,
    pub checkpoint: Checkpoint,
    pub log_key: VerifyingKey,
    /// The format the bundle's header names (v2 for an anchor read outside a bundle).
    pub format: Format,
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

/// Whether `line` is exactly the canonical form (RFC 8785) of the JSON it holds.
fn is_canonical(line: &[u8]) -> bool {
    json::parse_strict(line)
        .ok()
        .and_then(|v| canonical::to_vec(&v).ok())
        .is_some_and(|c| c == line)
}

/// Parses the header line and checks its checkpoint against the verifier key (§15 steps 1–2).
pub fn read_header(line: &[u8], verifier_key: &str) -> Result<(Header, Anchor), Failure> {
    let malformed = |m: String| Failure::new(Reason::Malformed, "line 1", m);
    let h: Header = serde_json::from_slice(line)
        .map_err(|e| malformed(format!("the first line is not a bundle header: {e}")))?;
    if h.ty != "header" {
        return Err(malformed("the first line is not a bundle header".into()));
    }
    let format = Format::parse(&h.format)
        .ok_or_else(|| malformed(format!("unknown bundle format {:?}", h.format)))?;
    if format == Format::V3 && !is_canonical(line) {
        return Err(malformed(
            "a version-3 line must be canonical JSON (RFC 8785)".into(),
        ));
    }
    let mut anchor = anchor(&h.checkpoint, verifier_key)?;
    anchor.format = format;
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
        format: Format::V2,
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
    /// Some nodes of a version-3 bundle's multi-proof.
    Nodes(Vec<Hash>),
    /// The end line: its entry count, and in v3 its node count.
    End {
        entries: u64,
        nodes: Option<u64>,
    },
}

/// An entry whose leaf, proof and envelope rules have been checked.
pub struct PreparedEntry {
    pub index: u64,
    pub leaf_hash: Hash,
    /// The leaf's `prev`: the leaf hash of entry `index − 1` (§7).
    pub prev: Hash,
    /// The leaf's `received_at`: the clock of the entry's time rules.
    pub received_at: Timestamp,
    pub checked: Checked,
}

/// Checks one line alone (§15 steps 1 and 4 up to key validity); `line_no` is 1-based. The
/// line is read in the format of `anchor` (its header's).
pub fn prepare_line(line_no: u64, line: &[u8], anchor: &Anchor) -> Result<Prepared, Failure> {
    let malformed = |m: String| Failure::new(Reason::Malformed, format!("line {line_no}"), m);
    let raw: RawLine =
        serde_json::from_slice(line).map_err(|e| malformed(format!("not a bundle line: {e}")))?;
    let line = LineCheck {
        line_no,
        bytes: line,
        v3: anchor.format == Format::V3,
        raw,
    };
    match line.raw.ty.as_ref() {
        "header" => Ok(Prepared::Header),
        "end" => line.end(),
        "nodes" if line.v3 => line.nodes(),
        "entry" => line.entry(anchor),
        other => Err(malformed(format!("unknown line type {other:?}"))),
    }
}

/// One line of a bundle being checked alone: its number (1-based), its bytes, its members,
/// and whether the bundle is version 3 (whose lines must be canonical JSON).
struct LineCheck<'a> {
    line_no: u64,
    bytes: &'a [u8],
    v3: bool,
    raw: RawLine<'a>,
}

impl LineCheck<'_> {
    /// A `malformed` failure of this line.
    fn malformed(&self, m: String) -> Failure {
        Failure::new(Reason::Malformed, format!("line {}", self.line_no), m)
    }

    /// `Ok` when `ok` (the line has only the members of its type).
    fn only(&self, ok: bool) -> Result<(), Failure> {
        if ok {
            Ok(())
        } else {
            Err(self.malformed(format!("members do not fit a {:?} line", self.raw.ty)))
        }
    }

    /// The failure of a version-3 line that is not in its canonical form.
    fn not_canonical(&self) -> Failure {
        self.malformed("a version-3 line must be canonical JSON (RFC 8785)".into())
    }

    /// Whether the line has none of the header's members.
    fn no_header_members(&self) -> bool {
        let raw = &self.raw;
        raw.format.is_none()
            && raw.log_origin.is_none()
            && raw.checkpoint.is_none()
            && raw.subject.is_none()
    }

    /// The end line: its entry count, and in v3 its node count.
    fn end(&self) -> Result<Prepared, Failure> {
        let raw = &self.raw;
        self.only(
            self.no_header_members()
                && raw.index.is_none()
                && raw.leaf.is_none()
                && raw.proof.is_none()
                && raw.hashes.is_none()
                && (self.v3 || raw.nodes.is_none()),
        )?;
        let entries = raw
            .entries
            .ok_or_else(|| self.malformed("the end line has no entry count".into()))?;
        if self.v3 {
            let nodes = raw
                .nodes
                .ok_or_else(|| self.malformed("the end line has no node count".into()))?;
            if end_line_v3(entries, nodes).strip_suffix(b"\n") != Some(self.bytes) {
                return Err(self.not_canonical());
            }
        }
        Ok(Prepared::End {
            entries,
            nodes: raw.nodes,
        })
    }

    /// A node line of a version-3 bundle: some nodes of its multi-proof.
    fn nodes(&self) -> Result<Prepared, Failure> {
        let raw = &self.raw;
        self.only(
            self.no_header_members()
                && raw.index.is_none()
                && raw.leaf.is_none()
                && raw.proof.is_none()
                && raw.entries.is_none()
                && raw.nodes.is_none(),
        )?;
        let hashes = raw
            .hashes
            .as_ref()
            .ok_or_else(|| self.malformed("a node line needs hashes".into()))?;
        if hashes.is_empty() || hashes.len() > MAX_NODES_PER_LINE {
            return Err(self.malformed(format!(
                "a node line holds 1 to {MAX_NODES_PER_LINE} hashes, not {}",
                hashes.len()
            )));
        }
        if nodes_line_text(hashes.iter()) != self.bytes {
            return Err(self.not_canonical());
        }
        let decoded: Option<Vec<Hash>> = hashes.iter().map(|h| merkle::decode_hash(h)).collect();
        decoded
            .map(Prepared::Nodes)
            .ok_or_else(|| self.malformed("node hashes are not base64 of 32 bytes".into()))
    }

    /// An entry line, checked alone in the bundle's format ([`prepare_entry_v3`],
    /// [`prepare_entry`]).
    fn entry(&self, anchor: &Anchor) -> Result<Prepared, Failure> {
        let raw = &self.raw;
        self.only(
            self.no_header_members()
                && raw.entries.is_none()
                && raw.nodes.is_none()
                && raw.hashes.is_none()
                && (!self.v3 || raw.proof.is_none()),
        )?;
        let (Some(index), Some(leaf)) = (raw.index, raw.leaf) else {
            return Err(self.malformed("an entry needs index and leaf".into()));
        };
        if self.v3 {
            if !leaf.get().starts_with('{') {
                return Err(self.malformed("a version-3 leaf is a JSON object".into()));
            }
            let mut canonical_line = Vec::with_capacity(self.bytes.len());
            write_entry_v3(index, leaf.get().as_bytes(), &mut canonical_line);
            if canonical_line != self.bytes {
                return Err(self.not_canonical());
            }
            return prepare_entry_v3(index, leaf.get().as_bytes(), anchor)
                .map(|e| Prepared::Entry(Box::new(e)));
        }
        let Some(proof) = &raw.proof else {
            return Err(self.malformed("an entry needs index, leaf and proof".into()));
        };
        let leaf: Cow<str> = serde_json::from_str(leaf.get())
            .map_err(|_| self.malformed("a version-2 leaf is a base64 string".into()))?;
        prepare_entry(index, &leaf, proof, anchor).map(|e| Prepared::Entry(Box::new(e)))
    }
}

/// Checks one entry of a version-2 bundle alone: in the checkpoint, canonical leaf of that
/// index, inclusion proof, envelope valid at its receive time.
pub fn prepare_entry<S: AsRef<str>>(
    index: u64,
    leaf_b64: &str,
    proof: &[S],
    anchor: &Anchor,
) -> Result<PreparedEntry, Failure> {
    let fail = |r: Reason, m: &str| Failure::new(r, format!("entry {index}"), m);
    in_checkpoint(index, anchor)?;
    let bytes = BASE64_STANDARD
        .decode(leaf_b64)
        .map_err(|_| fail(Reason::Malformed, "leaf is not base64"))?;
    let leaf = leaf_at(index, &bytes)?;
    let proof: Option<Vec<Hash>> = proof
        .iter()
        .map(|h| merkle::decode_hash(h.as_ref()))
        .collect();
    let proof =
        proof.ok_or_else(|| fail(Reason::Malformed, "proof hashes are not base64 of 32 bytes"))?;
    let leaf_hash = merkle::leaf_hash(&bytes);
    debug_assert!(
        index < anchor.size(),
        "an inclusion proof is checked only for an entry inside the checkpoint's tree"
    );
    merkle::check_record(&proof, anchor.size(), anchor.root(), index, leaf_hash).map_err(|_| {
        fail(
            Reason::InclusionProof,
            "the inclusion proof does not lead to the checkpoint's root",
        )
    })?;
    checked_entry(index, leaf, leaf_hash, anchor)
}

/// Checks one entry of a version-3 bundle alone: in the checkpoint, canonical leaf of that
/// index, envelope valid at its receive time. Its inclusion is proven with all the others by
/// the multi-proof ([`BundleChecker`]).
pub fn prepare_entry_v3(
    index: u64,
    leaf_bytes: &[u8],
    anchor: &Anchor,
) -> Result<PreparedEntry, Failure> {
    in_checkpoint(index, anchor)?;
    let leaf = leaf_at(index, leaf_bytes).map_err(|f| {
        if is_canonical(leaf_bytes) {
            f
        } else {
            // Not even canonical JSON: the line is not a version-3 line.
            Failure::new(
                Reason::Malformed,
                format!("entry {index}"),
                "a version-3 line must be canonical JSON (RFC 8785)",
            )
        }
    })?;
    checked_entry(index, leaf, merkle::leaf_hash(leaf_bytes), anchor)
}

/// `not_in_checkpoint` unless `index` is below the checkpoint's size.
fn in_checkpoint(index: u64, anchor: &Anchor) -> Result<(), Failure> {
    if index >= anchor.size() {
        return Err(Failure::new(
            Reason::NotInCheckpoint,
            format!("entry {index}"),
            format!("index is not below the checkpoint's size {}", anchor.size()),
        ));
    }
    Ok(())
}

/// The canonical version-2 leaf of `bytes`, which must say `index`.
fn leaf_at(index: u64, bytes: &[u8]) -> Result<Leaf, Failure> {
    let fail = |m: String| Failure::new(Reason::LeafInvalid, format!("entry {index}"), m);
    let leaf = Leaf::from_bytes(bytes).map_err(fail)?;
    if leaf.index != index {
        return Err(fail(format!("the leaf says index {}", leaf.index)));
    }
    Ok(leaf)
}

/// The entry with its envelope checked (§4, §5) for the checkpoint's origin.
fn checked_entry(
    index: u64,
    leaf: Leaf,
    leaf_hash: Hash,
    anchor: &Anchor,
) -> Result<PreparedEntry, Failure> {
    let received_at = leaf.received_at;
    let prev = leaf.prev_hash().ok_or_else(|| {
        Failure::new(
            Reason::LeafInvalid,
            format!("entry {index}"),
            "prev is not base64 of 32 bytes",
        )
    })?;
    let checked = leaf
        .envelope
        .check(anchor.checkpoint.origin())
        .map_err(|r| {
            Failure::new(
                Reason::LeafInvalid,
                format!("entry {index}"),
                format!("envelope invalid: {r}"),
            )
        })?;
    Ok(PreparedEntry {
        index,
        leaf_hash,
        prev,
        received_at,
        checked,
    })
}

/// What a bundle is checked for: receives context entries, then records, in order.
pub trait Subject {
    /// A context entry (every kind but `gpu_usage` and `energy`), received at `received_at`,
    /// after its key and signature.
    fn context(&mut self, index: u64, received_at: Timestamp, body: &Body) -> Result<(), Failure>;
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
    fn context(&mut self, _: u64, _: Timestamp, _: &Body) -> Result<(), Failure> {
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
    format: Format,
    size: u64,
    root: Hash,
    /// v3: each entry's index and leaf hash, until the node lines start.
    leaves: Vec<(u64, Hash)>,
    /// v3: the root being recomputed, from the first node line (or the end line) on.
    proof: Option<RootBuilder>,
    /// v3: node hashes read.
    nodes: u64,
    /// v3: the multi-proof's failure at a node line (more nodes than the tree needs), reported
    /// at the end line once its counts are checked, as a verifier that counts first would.
    proof_failure: Option<Failure>,
    /// The context entries' leaf hashes, and the last record's index and leaf hash: the hash
    /// chain is checked where the bundle holds the entry before (§15 step 4).
    context_hashes: HashMap<u64, Hash>,
    last_record: Option<(u64, Hash)>,
    /// The context entries' receive times by index, and the last record's: the receive times
    /// of the entries the bundle holds must not decrease in index order.
    context_times: std::collections::BTreeMap<u64, Timestamp>,
    last_record_time: Option<(u64, Timestamp)>,
}

impl BundleChecker {
    /// A checker for entries proven against `anchor`.
    pub fn new(anchor: &Anchor) -> Self {
        BundleChecker {
            registry: Registry::for_bundle(anchor.log_key),
            subject_tenant: None,
            last_index: None,
            in_records: false,
            entries: 0,
            records: 0,
            ended: false,
            format: anchor.format,
            size: anchor.size(),
            root: anchor.root(),
            leaves: Vec::new(),
            proof: None,
            nodes: 0,
            proof_failure: None,
            context_hashes: HashMap::new(),
            last_record: None,
            context_times: std::collections::BTreeMap::new(),
            last_record_time: None,
        }
    }

    /// Node hashes read (v3).
    pub fn nodes(&self) -> u64 {
        self.nodes
    }

    /// v3: the multi-proof's recomputation, started when the entries are over: the leaves in
    /// index order (context and records merged), every index once.
    fn proof(&mut self, line_no: u64) -> Result<&mut RootBuilder, Failure> {
        if self.proof.is_none() {
            let mut leaves = std::mem::take(&mut self.leaves);
            leaves.sort_unstable_by_key(|l| l.0);
            let builder = RootBuilder::new(self.size, leaves).map_err(|e| match e {
                MultiProofError::Order(i) => Failure::new(
                    Reason::Order,
                    format!("entry {i}"),
                    "an index appears twice in the bundle",
                ),
                e => Failure::new(
                    Reason::NotInCheckpoint,
                    format!("line {line_no}"),
                    e.to_string(),
                ),
            })?;
            self.proof = Some(builder);
        }
        Ok(self.proof.as_mut().expect("set above"))
    }

    /// v3: takes a node line's hashes.
    fn take_nodes(&mut self, line_no: u64, hashes: &[Hash]) -> Result<(), Failure> {
        self.nodes += hashes.len() as u64;
        if self.proof_failure.is_some() {
            return Ok(());
        }
        let proof = self.proof(line_no)?;
        for h in hashes {
            if let Err(e) = proof.push_node(*h) {
                self.proof_failure = Some(Failure::new(
                    Reason::InclusionProof,
                    format!("line {line_no}"),
                    format!("the multi-proof does not fit the bundle's entries: {e}"),
                ));
                break;
            }
        }
        Ok(())
    }

    /// v3: the root from the entries and every node, which must be the checkpoint's.
    fn check_root(&mut self, line_no: u64) -> Result<(), Failure> {
        self.proof(line_no)?;
        if let Some(f) = self.proof_failure.take() {
            return Err(f);
        }
        let fail = |m: String| Failure::new(Reason::InclusionProof, "multi-proof", m);
        let root = self
            .proof
            .take()
            .expect("set above")
            .finish()
            .map_err(|e| {
                fail(format!(
                    "the multi-proof does not fit the bundle's entries: {e}"
                ))
            })?;
        if root != self.root {
            return Err(fail(
                "the entries and the multi-proof do not lead to the checkpoint's root".into(),
            ));
        }
        Ok(())
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
        self.chain(e)?;
        self.received_in_order(e)?;
        let key = self.admit(e)?;
        if e.checked.kind.signed_by() == super::record::Role::Ledger {
            // Context that changes the registry counts only once its signature holds.
            if !e.checked.verify(&key) {
                return Err(bad_signature(e.index));
            }
            self.registry.apply(e.index, e.received_at, &e.checked);
            return Ok(None);
        }
        self.registry.apply(e.index, e.received_at, &e.checked);
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
            Prepared::End { entries: n, nodes } => {
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
                if self.format == Format::V3 {
                    let m = nodes.expect("a v3 end line has a node count");
                    if m != self.nodes {
                        return Err(Failure::new(
                            Reason::Truncated,
                            at(),
                            format!(
                                "the end line counts {m} nodes, the bundle has {}",
                                self.nodes
                            ),
                        ));
                    }
                    self.check_root(line_no)?;
                }
                self.ended = true;
                Ok(None)
            }
            Prepared::Nodes(hashes) => {
                self.take_nodes(line_no, hashes)?;
                Ok(None)
            }
            Prepared::Entry(e) => {
                if self.proof.is_some() {
                    return Err(Failure::new(
                        Reason::Order,
                        at(),
                        "an entry after the node lines",
                    ));
                }
                Ok(Some(e))
            }
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
        if self.format == Format::V3 {
            self.leaves.push((index, e.leaf_hash));
        }
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

    /// The hash chain (§7): the entry's `prev` is the leaf hash of entry `index − 1` where the
    /// bundle holds that entry (32 zero bytes for entry 0). Notes the entry for those after it.
    fn chain(&mut self, e: &PreparedEntry) -> Result<(), Failure> {
        let expected = match e.index.checked_sub(1) {
            None => Some(super::leaf::GENESIS_PREV),
            Some(before) => match self.last_record {
                Some((i, h)) if i == before => Some(h),
                _ => self.context_hashes.get(&before).copied(),
            },
        };
        if expected.is_some_and(|h| h != e.prev) {
            return Err(Failure::new(
                Reason::LeafInvalid,
                format!("entry {}", e.index),
                match e.index {
                    0 => "the first entry's prev is not 32 zero bytes".to_owned(),
                    i => format!("prev is not the leaf hash of entry {}", i - 1),
                },
            ));
        }
        if is_record_kind(e.checked.kind) {
            self.last_record = Some((e.index, e.leaf_hash));
        } else {
            self.context_hashes.insert(e.index, e.leaf_hash);
        }
        Ok(())
    }

    /// The receive times never decrease (§7, `leaf::check_received_in_order`): the entry's is
    /// not before that of the entry the bundle holds just before it in the log, nor after that
    /// of the one just after it (context comes first, so a record's only later neighbours are
    /// context entries).
    fn received_in_order(&mut self, e: &PreparedEntry) -> Result<(), Failure> {
        let context_before = self.context_times.range(..e.index).next_back();
        let before = match (context_before, self.last_record_time) {
            (Some((&i, &t)), Some((r, _))) if i > r => Some((i, t)),
            (_, Some(r)) if r.0 < e.index => Some(r),
            (Some((&i, &t)), _) => Some((i, t)),
            (None, _) => None,
        };
        super::leaf::check_received_in_order(before, e.received_at).map_err(|m| {
            Failure::new(Reason::ReceivedAtDecreased, format!("entry {}", e.index), m)
        })?;
        if let Some((&i, &t)) = self.context_times.range(e.index + 1..).next() {
            super::leaf::check_received_in_order(Some((e.index, e.received_at)), t)
                .map_err(|m| Failure::new(Reason::ReceivedAtDecreased, format!("entry {i}"), m))?;
        }
        if is_record_kind(e.checked.kind) {
            self.last_record_time = Some((e.index, e.received_at));
        } else {
            self.context_times.insert(e.index, e.received_at);
        }
        Ok(())
    }

    /// Every admission rule at the entry's index (§15 step 4): the key to verify it with.
    fn admit(&self, e: &PreparedEntry) -> Result<VerifyingKey, Failure> {
        let body = &e.checked.body;
        self.registry
            .admit(e.index, &e.checked, e.received_at)
            .map_err(|r| {
                // A registration or revocation inconsistent with the keys before it: the leaf
                // itself is wrong (§15 step 4). A key naming an unregistered node breaks the
                // fleet rule, named as such (§6.7, fleet), as verify-log names it.
                let registry_entry =
                    matches!(
                        body,
                        Body::SignerKeyRegistered(_) | Body::SignerKeyRevoked(_)
                    ) && r.field.as_deref().is_some_and(|f| f.starts_with("body."))
                        && r.reason != super::rejection::Reason::UnknownNode;
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
            subject.context(e.index, e.received_at, &e.checked.body)
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
    /// The nodes of a version-3 bundle's multi-proof (0 in v2).
    pub nodes: u64,
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
            nodes: checker.nodes(),
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
