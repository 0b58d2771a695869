//! Witness cosignatures: C2SP tlog-cosignature (`cosignature/v1`, Ed25519, signature type
//! 0x04) and the body of the C2SP tlog-witness `add-checkpoint` call.
//!
//! A cosignature is a signed-note signature line on a checkpoint,
//! `— <witness name> base64(key id ‖ u64 BE timestamp ‖ Ed25519 signature)`, where the key id
//! is `SHA-256(name ‖ "\n" ‖ 0x04 ‖ public key)[:4]` and the signed message is
//! `"cosignature/v1\ntime <timestamp>\n"` followed by the whole checkpoint body (its final
//! newline included, no signature lines). Note parsing and signature lines are the
//! `signed_note` crate's; verification is ed25519-dalek's `verify_strict`, and witness keys
//! must pass [`crate::keys::check_public`].

use crate::checkpoint::{self, Checkpoint, CheckpointError};
use crate::keys::{self, KeyError};
use crate::merkle::{self, Hash};
use base64::prelude::{Engine, BASE64_STANDARD};
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use signed_note::{Note, Signature, Verifier};
use std::collections::BTreeSet;

/// The signature type byte of Ed25519 `cosignature/v1` keys (in vkeys and in the key id).
pub const COSIGNATURE_V1_ALG: u8 = 0x04;

/// The header line of the signed message (domain separation), without its newline.
pub const COSIGNATURE_V1_HEADER: &str = "cosignature/v1";

/// The most consistency-proof lines an `add-checkpoint` body may carry (C2SP tlog-witness).
pub const MAX_PROOF_LINES: usize = 63;

/// The largest `add-checkpoint` body accepted, in bytes: the old-size line, 63 proof lines of
/// 45 bytes, and a checkpoint note with up to 100 signature lines (the `signed_note` limit)
/// fit in well under this.
pub const MAX_ADD_CHECKPOINT_BODY: usize = 64 * 1024;

/// Length of the `timestamped_signature` of an Ed25519 cosignature: u64 timestamp + 64 bytes.
const TIMESTAMPED_SIGNATURE_LEN: usize = 8 + ed25519_dalek::SIGNATURE_LENGTH;

/// The largest timestamp the format allows (2^63 - 1).
pub const MAX_TIMESTAMP: u64 = i64::MAX as u64;

/// Why a witness key, a cosigned note or an `add-checkpoint` body was refused.
#[derive(Debug, thiserror::Error)]
pub enum CosignatureError {
    /// The vkey is not `<name>+<8 hex digits>+<base64>`.
    #[error("witness vkey is malformed: {0}")]
    VkeyFormat(&'static str),
    /// The vkey's key material is not of type 0x04 (Ed25519 cosignature/v1).
    #[error("witness vkey has signature type {0:#04x}, expected 0x04 (Ed25519 cosignature/v1)")]
    VkeyAlg(u8),
    /// The vkey's key id does not match its name and key.
    #[error("witness vkey key id is {found:08x}, but its name and key give {expected:08x}")]
    VkeyKeyId {
        /// The key id written in the vkey.
        found: u32,
        /// The key id computed from the name and key.
        expected: u32,
    },
    /// The witness name is not a valid note key name.
    #[error("witness name {0:?} is not a valid note key name (non-empty, no spaces, no '+')")]
    BadName(String),
    /// The witness public key fails the protocol's key rule.
    #[error("witness public key refused: {0}")]
    Key(#[from] KeyError),
    /// The note is not a well-formed signed note.
    #[error("malformed signed note")]
    Note,
    /// A signature line is not a well-formed note signature line.
    #[error("malformed signature line {0:?}")]
    SignatureLine(String),
    /// The log's signature on the checkpoint does not verify.
    #[error("checkpoint: {0}")]
    Checkpoint(#[from] CheckpointError),
    /// Fewer valid cosignatures from the given witnesses than the quorum requires.
    #[error("checkpoint carries {found} valid cosignature(s) from the given witnesses, {required} required")]
    QuorumNotMet {
        /// Distinct witnesses whose cosignature verified.
        found: usize,
        /// The quorum asked for.
        required: usize,
    },
    /// The `add-checkpoint` body is malformed.
    #[error("malformed add-checkpoint body: {0}")]
    Body(&'static str),
}

/// A witness's public identity: name, Ed25519 key, key id (C2SP tlog-cosignature, alg 0x04).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WitnessKey {
    name: String,
    key: VerifyingKey,
    key_id: u32,
}

/// The cosignature/v1 key id of `key` under `name`: `SHA-256(name ‖ "\n" ‖ 0x04 ‖ key)[:4]`.
pub fn key_id(name: &str, key: &VerifyingKey) -> u32 {
    signed_note::key_id(name, &alg_key(key))
}

/// `0x04 ‖ key`: the key material of a cosignature/v1 vkey.
fn alg_key(key: &VerifyingKey) -> Vec<u8> {
    let mut encoded = Vec::with_capacity(33);
    encoded.push(COSIGNATURE_V1_ALG);
    encoded.extend_from_slice(key.as_bytes());
    encoded
}

impl WitnessKey {
    /// Parses a vkey `<name>+<8 hex key id>+<base64(0x04 ‖ 32-byte key)>`. Surrounding
    /// whitespace is ignored. The key must pass [`keys::check_public`] and the key id must
    /// match the name and key.
    pub fn parse(vkey: &str) -> Result<WitnessKey, CosignatureError> {
        let vkey = vkey.trim();
        let (name, rest) = vkey
            .split_once('+')
            .ok_or(CosignatureError::VkeyFormat("no '+' after the name"))?;
        let (id16, key64) = rest
            .split_once('+')
            .ok_or(CosignatureError::VkeyFormat("no '+' after the key id"))?;
        if !signed_note::is_key_name_valid(name) {
            return Err(CosignatureError::BadName(name.to_owned()));
        }
        if id16.len() != 8 || !id16.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(CosignatureError::VkeyFormat("key id is not 8 hex digits"));
        }
        let found = u32::from_str_radix(id16, 16)
            .map_err(|_| CosignatureError::VkeyFormat("key id is not 8 hex digits"))?;
        let material = BASE64_STANDARD
            .decode(key64)
            .map_err(|_| CosignatureError::VkeyFormat("key is not standard base64"))?;
        let (&alg, public) = material
            .split_first()
            .ok_or(CosignatureError::VkeyFormat("empty key"))?;
        if alg != COSIGNATURE_V1_ALG {
            return Err(CosignatureError::VkeyAlg(alg));
        }
        let public: [u8; 32] = public
            .try_into()
            .map_err(|_| CosignatureError::VkeyFormat("key is not 32 bytes after its type"))?;
        let key = keys::check_public(&public)?;
        let expected = key_id(name, &key);
        if found != expected {
            return Err(CosignatureError::VkeyKeyId { found, expected });
        }
        Ok(WitnessKey {
            name: name.to_owned(),
            key,
            key_id: expected,
        })
    }

    /// The witness key for `name` and `key`; the key must pass [`keys::check_public`].
    pub fn new(name: &str, key: &VerifyingKey) -> Result<WitnessKey, CosignatureError> {
        if !signed_note::is_key_name_valid(name) {
            return Err(CosignatureError::BadName(name.to_owned()));
        }
        let key = keys::check_public(key.as_bytes())?;
        Ok(WitnessKey {
            name: name.to_owned(),
            key_id: key_id(name, &key),
            key,
        })
    }

    /// The witness name (the note key name of its signature lines).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key id, `SHA-256(name ‖ "\n" ‖ 0x04 ‖ key)[:4]` read big-endian.
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// The Ed25519 public key.
    pub fn public_key(&self) -> &VerifyingKey {
        &self.key
    }

    /// The vkey text: `<name>+<8 lower-case hex key id>+<base64(0x04 ‖ key)>`.
    pub fn vkey(&self) -> String {
        format!(
            "{}+{:08x}+{}",
            self.name,
            self.key_id,
            BASE64_STANDARD.encode(alg_key(&self.key))
        )
    }

    /// The timestamp of a cosignature `sig` (the bytes after the key id) on the note body
    /// `msg`, if it verifies strictly; `None` otherwise.
    pub fn verify_cosignature(&self, msg: &[u8], sig: &[u8]) -> Option<u64> {
        if sig.len() != TIMESTAMPED_SIGNATURE_LEN {
            return None;
        }
        let (ts, sig) = sig.split_at(8);
        let timestamp = u64::from_be_bytes(ts.try_into().ok()?);
        if timestamp > MAX_TIMESTAMP {
            return None;
        }
        let sig = ed25519_dalek::Signature::from_slice(sig).ok()?;
        self.key
            .verify_strict(&signed_message(msg, timestamp), &sig)
            .ok()
            .map(|()| timestamp)
    }
}

/// `signed_note` verification of cosignature lines: the message handed in is the note body,
/// the signature the `timestamped_signature` (timestamp and Ed25519 signature).
impl Verifier for WitnessKey {
    fn name(&self) -> &str {
        &self.name
    }
    fn key_id(&self) -> u32 {
        self.key_id
    }
    fn verify(&self, msg: &[u8], sig: &[u8]) -> bool {
        self.verify_cosignature(msg, sig).is_some()
    }
}

/// A witness's signing side.
pub struct Cosigner {
    witness: WitnessKey,
    key: SigningKey,
}

impl Cosigner {
    /// A cosigner named `name` signing with `key`.
    pub fn new(name: &str, key: SigningKey) -> Result<Cosigner, CosignatureError> {
        let witness = WitnessKey::new(name, &key.verifying_key())?;
        Ok(Cosigner { witness, key })
    }

    /// The public identity of this cosigner.
    pub fn witness_key(&self) -> WitnessKey {
        self.witness.clone()
    }

    /// One note signature line, `— <name> <base64(key id ‖ u64 BE timestamp ‖ Ed25519 sig)>\n`,
    /// over [`signed_message`]`(checkpoint_body, timestamp)`. `checkpoint_body` is the note
    /// body with its final newline and without signature lines.
    ///
    /// # Panics
    ///
    /// If `timestamp` exceeds 2^63 - 1 (the format forbids it; no clock reads that).
    pub fn cosign(&self, checkpoint_body: &[u8], timestamp: u64) -> String {
        assert!(
            timestamp <= MAX_TIMESTAMP,
            "cosignature timestamps are at most 2^63 - 1"
        );
        let sig = self.key.sign(&signed_message(checkpoint_body, timestamp));
        let mut timestamped = Vec::with_capacity(TIMESTAMPED_SIGNATURE_LEN);
        timestamped.extend_from_slice(&timestamp.to_be_bytes());
        timestamped.extend_from_slice(&sig.to_bytes());
        let line = Signature::new(self.witness.name.clone(), self.witness.key_id, timestamped)
            .expect("the name was validated")
            .to_bytes();
        String::from_utf8(line).expect("signature lines are UTF-8")
    }
}

/// `"cosignature/v1\ntime <t>\n"` ‖ checkpoint body (all its lines, final LF included).
pub fn signed_message(checkpoint_body: &[u8], timestamp: u64) -> Vec<u8> {
    let header = format!("{COSIGNATURE_V1_HEADER}\ntime {timestamp}\n");
    let mut msg = Vec::with_capacity(header.len() + checkpoint_body.len());
    msg.extend_from_slice(header.as_bytes());
    msg.extend_from_slice(checkpoint_body);
    msg
}

/// One valid cosignature found on a note.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cosigned {
    /// The witness's name.
    pub witness: String,
    /// The witness's key id.
    pub key_id: u32,
    /// The cosignature's timestamp (POSIX seconds).
    pub timestamp: u64,
    /// The full signature line, with its final LF.
    pub line: String,
}

/// A note split into its body (with the final LF) and its signature lines (without LF), both
/// checked by `signed_note` (at most 100 lines, each well formed).
fn split_note(note: &[u8]) -> Result<(Vec<u8>, Vec<&str>), CosignatureError> {
    let parsed = Note::from_bytes(note).map_err(|_| CosignatureError::Note)?;
    let text = std::str::from_utf8(note).map_err(|_| CosignatureError::Note)?;
    let (_, sigs) = text.rsplit_once("\n\n").ok_or(CosignatureError::Note)?;
    let sigs = sigs.strip_suffix('\n').ok_or(CosignatureError::Note)?;
    Ok((parsed.text().to_vec(), sigs.split('\n').collect()))
}

/// The body of a signed note (its text with the final LF, without signature lines).
pub fn note_body(note: &[u8]) -> Result<Vec<u8>, CosignatureError> {
    Ok(Note::from_bytes(note)
        .map_err(|_| CosignatureError::Note)?
        .text()
        .to_vec())
}

/// The valid cosignatures on a signed note's body, at most one per distinct witness of
/// `witnesses` (lines of unknown name/key id are ignored; a line naming a known witness
/// whose signature does not verify strictly is not counted). A malformed note has none.
pub fn valid_cosignatures(note: &[u8], witnesses: &[WitnessKey]) -> Vec<Cosigned> {
    let Ok((body, lines)) = split_note(note) else {
        return Vec::new();
    };
    let mut counted: BTreeSet<(&str, u32)> = BTreeSet::new();
    let mut found = Vec::new();
    for line in lines {
        let Ok(sig) = Signature::from_bytes(line.as_bytes()) else {
            continue;
        };
        let Some(witness) = witnesses
            .iter()
            .find(|w| w.name == sig.name() && w.key_id == sig.id())
        else {
            continue;
        };
        if counted.contains(&(witness.name.as_str(), witness.key_id)) {
            continue;
        }
        if let Some(timestamp) = witness.verify_cosignature(&body, sig.signature()) {
            counted.insert((witness.name.as_str(), witness.key_id));
            found.push(Cosigned {
                witness: witness.name.clone(),
                key_id: witness.key_id,
                timestamp,
                line: format!("{line}\n"),
            });
        }
    }
    found
}

/// The log's signature (checkpoint::verify_checkpoint with the log's vkey) and at least
/// `quorum` distinct valid cosignatures from `witnesses`; returns the checkpoint.
pub fn verify_witnessed(
    note: &[u8],
    log_vkey: &str,
    witnesses: &[WitnessKey],
    quorum: usize,
) -> Result<Checkpoint, CosignatureError> {
    let cp = checkpoint::verify_checkpoint(note, log_vkey)?;
    let found = valid_cosignatures(note, witnesses).len();
    if found < quorum {
        return Err(CosignatureError::QuorumNotMet {
            found,
            required: quorum,
        });
    }
    Ok(cp)
}

/// The note with extra signature lines appended after its own (a line already present is not
/// repeated). Each line is a note signature line, with or without its final LF; the result
/// must still be a valid note (at most 100 signature lines).
pub fn with_signature_lines(note: &str, lines: &[String]) -> Result<String, CosignatureError> {
    let (_, existing) = split_note(note.as_bytes())?;
    let mut present: BTreeSet<String> = existing.iter().map(|l| (*l).to_owned()).collect();
    let mut out = note.to_owned();
    for line in lines {
        let line = line.strip_suffix('\n').unwrap_or(line);
        if line.contains('\n') || Signature::from_bytes(line.as_bytes()).is_err() {
            return Err(CosignatureError::SignatureLine(line.to_owned()));
        }
        if present.insert(line.to_owned()) {
            out.push_str(line);
            out.push('\n');
        }
    }
    Note::from_bytes(out.as_bytes()).map_err(|_| CosignatureError::Note)?;
    Ok(out)
}

/// C2SP tlog-witness add-checkpoint request body.
#[derive(Clone, Debug, PartialEq)]
pub struct AddCheckpoint {
    /// The size of the checkpoint the client believes the witness last cosigned (0: none).
    pub old_size: u64,
    /// The RFC 6962 consistency proof from `old_size` to the checkpoint's size.
    pub proof: Vec<Hash>,
    /// The signed checkpoint note.
    pub checkpoint: Vec<u8>,
}

/// A decimal with no leading zeros (`0` itself allowed), as the witness texts write sizes.
fn parse_decimal(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

impl AddCheckpoint {
    /// The request body: `old <N>\n`, one base64 hash per line, an empty line, the note.
    pub fn to_body(&self) -> Vec<u8> {
        let mut body = format!("old {}\n", self.old_size).into_bytes();
        for h in &self.proof {
            body.extend_from_slice(merkle::encode_hash(h).as_bytes());
            body.push(b'\n');
        }
        body.push(b'\n');
        body.extend_from_slice(&self.checkpoint);
        body
    }

    /// Parses a request body. Checks its syntax only (sizes, at most 63 proof lines, each a
    /// base64 hash, a non-empty checkpoint after the empty line, at most
    /// [`MAX_ADD_CHECKPOINT_BODY`] bytes); the note is checked by whoever verifies it.
    pub fn parse(body: &[u8]) -> Result<AddCheckpoint, CosignatureError> {
        if body.len() > MAX_ADD_CHECKPOINT_BODY {
            return Err(CosignatureError::Body("body too large"));
        }
        let mut rest = body;
        let mut next_line = |what: &'static str| -> Result<&[u8], CosignatureError> {
            let end = rest
                .iter()
                .position(|&b| b == b'\n')
                .ok_or(CosignatureError::Body(what))?;
            let line = &rest[..end];
            rest = &rest[end + 1..];
            Ok(line)
        };
        let old = next_line("no old size line")?;
        let old_size = std::str::from_utf8(old)
            .ok()
            .and_then(|l| l.strip_prefix("old "))
            .and_then(parse_decimal)
            .ok_or(CosignatureError::Body(
                "first line is not `old <size>` (decimal, no leading zeros)",
            ))?;
        let mut proof = Vec::new();
        loop {
            let line = next_line("no empty line before the checkpoint")?;
            if line.is_empty() {
                break;
            }
            if proof.len() == MAX_PROOF_LINES {
                return Err(CosignatureError::Body(
                    "more than 63 consistency proof lines",
                ));
            }
            let hash = std::str::from_utf8(line)
                .ok()
                .and_then(merkle::decode_hash)
                .ok_or(CosignatureError::Body(
                    "a proof line is not a base64 32-byte hash",
                ))?;
            proof.push(hash);
        }
        let checkpoint = rest.to_vec();
        if checkpoint.is_empty() {
            return Err(CosignatureError::Body("no checkpoint after the empty line"));
        }
        Ok(AddCheckpoint {
            old_size,
            proof,
            checkpoint,
        })
    }
}

/// The body of a 409 answer (`text/x.tlog.size`): `"<size>\n"`.
pub fn size_body(size: u64) -> String {
    format!("{size}\n")
}

/// Parses the body of a 409 answer (`text/x.tlog.size`): `"<size>\n"` (decimal, no leading
/// zeros; the final LF is required).
pub fn parse_size_body(body: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(body).ok()?;
    parse_decimal(text.strip_suffix('\n')?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::LogSigner;

    fn cosigner() -> Cosigner {
        Cosigner::new("witness.example/w1", SigningKey::from_bytes(&[3; 32])).unwrap()
    }

    fn log_note(size: u64) -> (LogSigner, String) {
        let log = LogSigner::new("example.test/log", SigningKey::from_bytes(&[9; 32])).unwrap();
        let note = log.sign_checkpoint(size, &Hash([size as u8; 32]));
        (log, note)
    }

    #[test]
    fn vkey_round_trips_and_bad_vkeys_are_refused() {
        let w = cosigner().witness_key();
        let vkey = w.vkey();
        assert_eq!(WitnessKey::parse(&vkey).unwrap(), w);
        assert_eq!(WitnessKey::parse(&format!(" {vkey}\n")).unwrap(), w);
        // Another key id.
        let (name, rest) = vkey.split_once('+').unwrap();
        let (_, key) = rest.split_once('+').unwrap();
        assert!(matches!(
            WitnessKey::parse(&format!("{name}+00000000+{key}")),
            Err(CosignatureError::VkeyKeyId { .. })
        ));
        // The log's (type 0x01) vkey is not a witness key.
        let (log, _) = log_note(1);
        assert!(matches!(
            WitnessKey::parse(&log.verifier_key()),
            Err(CosignatureError::VkeyAlg(1))
        ));
        // A small-order key is refused even with a correct key id.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        let mut material = vec![COSIGNATURE_V1_ALG];
        material.extend_from_slice(&identity);
        let id = signed_note::key_id("w", &material);
        assert!(matches!(
            WitnessKey::parse(&format!("w+{id:08x}+{}", BASE64_STANDARD.encode(&material))),
            Err(CosignatureError::Key(KeyError::Weak))
        ));
        assert!(matches!(
            WitnessKey::parse("bad name+00000000+AA=="),
            Err(CosignatureError::VkeyFormat(_) | CosignatureError::BadName(_))
        ));
        assert!(WitnessKey::parse("w+0000000g+AA==").is_err());
        // The name has no '+'; the base64 may.
        let plus = (0u8..=255)
            .map(|b| Cosigner::new("w", SigningKey::from_bytes(&[b; 32])).unwrap())
            .map(|c| c.witness_key())
            .find(|w| {
                w.vkey()
                    .splitn(3, '+')
                    .nth(2)
                    .is_some_and(|k| k.contains('+'))
            })
            .unwrap();
        assert_eq!(WitnessKey::parse(&plus.vkey()).unwrap(), plus);
    }

    #[test]
    fn cosignature_verifies_and_counts_once() {
        let c = cosigner();
        let (log, note) = log_note(5);
        let body = note_body(note.as_bytes()).unwrap();
        let line = c.cosign(&body, 1_700_000_000);
        let witnessed = with_signature_lines(&note, &[line.clone(), line.clone()]).unwrap();
        assert_eq!(witnessed.matches(&line).count(), 1);
        let found = valid_cosignatures(witnessed.as_bytes(), &[c.witness_key()]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].timestamp, 1_700_000_000);
        assert_eq!(found[0].line, line);
        // A second line from the same witness (another time) still counts once.
        let twice = with_signature_lines(&witnessed, &[c.cosign(&body, 1_700_000_001)]).unwrap();
        assert_eq!(
            valid_cosignatures(twice.as_bytes(), &[c.witness_key()]).len(),
            1
        );
        let cp = verify_witnessed(
            witnessed.as_bytes(),
            &log.verifier_key(),
            &[c.witness_key()],
            1,
        )
        .unwrap();
        assert_eq!(cp.size(), 5);
        assert!(matches!(
            verify_witnessed(note.as_bytes(), &log.verifier_key(), &[c.witness_key()], 1),
            Err(CosignatureError::QuorumNotMet {
                found: 0,
                required: 1
            })
        ));
    }

    #[test]
    fn cosignature_on_another_checkpoint_or_key_does_not_count() {
        let c = cosigner();
        let (_, note5) = log_note(5);
        let (_, note6) = log_note(6);
        let line = c.cosign(&note_body(note5.as_bytes()).unwrap(), 10);
        let moved = with_signature_lines(&note6, &[line]).unwrap();
        assert!(valid_cosignatures(moved.as_bytes(), &[c.witness_key()]).is_empty());
        // Same name, another key: a different key id, so the line is ignored.
        let other = Cosigner::new("witness.example/w1", SigningKey::from_bytes(&[4; 32])).unwrap();
        let line = c.cosign(&note_body(note5.as_bytes()).unwrap(), 10);
        let signed = with_signature_lines(&note5, &[line]).unwrap();
        assert!(valid_cosignatures(signed.as_bytes(), &[other.witness_key()]).is_empty());
        assert_eq!(
            valid_cosignatures(signed.as_bytes(), &[c.witness_key()]).len(),
            1
        );
    }

    #[test]
    fn add_checkpoint_body_round_trips_and_is_strict() {
        let (_, note) = log_note(7);
        let req = AddCheckpoint {
            old_size: 3,
            proof: vec![Hash([1; 32]), Hash([2; 32])],
            checkpoint: note.clone().into_bytes(),
        };
        let body = req.to_body();
        assert!(body.starts_with(b"old 3\n"));
        assert_eq!(AddCheckpoint::parse(&body).unwrap(), req);
        let empty = AddCheckpoint {
            old_size: 0,
            proof: vec![],
            checkpoint: note.clone().into_bytes(),
        };
        assert_eq!(empty.to_body(), format!("old 0\n\n{note}").into_bytes());
        for bad in [
            format!("old 03\n\n{note}"),
            format!("old -1\n\n{note}"),
            format!("old 3\nnot base64\n\n{note}"),
            "old 3\n\n".to_owned(),
            "old 3\n".to_owned(),
            format!("new 3\n\n{note}"),
        ] {
            assert!(AddCheckpoint::parse(bad.as_bytes()).is_err(), "{bad:?}");
        }
        let too_long = AddCheckpoint {
            old_size: 1,
            proof: vec![Hash([0; 32]); 64],
            checkpoint: note.into_bytes(),
        };
        assert!(matches!(
            AddCheckpoint::parse(&too_long.to_body()),
            Err(CosignatureError::Body(_))
        ));
    }

    #[test]
    fn size_bodies() {
        assert_eq!(parse_size_body(b"42\n"), Some(42));
        assert_eq!(parse_size_body(size_body(0).as_bytes()), Some(0));
        assert_eq!(parse_size_body(b"42"), None);
        assert_eq!(parse_size_body(b"042\n"), None);
        assert_eq!(parse_size_body(b"x\n"), None);
    }
}
