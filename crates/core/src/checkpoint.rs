//! Checkpoints: the C2SP tlog-checkpoint body (origin, tree size, base64 root hash), signed as
//! a C2SP signed note with the log's Ed25519 key. The note key name is the log's origin; the
//! key id is the first 4 bytes of SHA-256(name ‖ 0x0A ‖ 0x01 ‖ public key), big-endian.

use super::merkle::Hash;
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use signed_note::{Note, Signer as NoteSigner, StandardVerifier, VerifierList};
pub use tlog_tiles::Checkpoint;

/// The algorithm byte for Ed25519 in signed-note keys.
const ALG_ED25519: u8 = 1;

/// Why a checkpoint or origin was refused.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("origin {0:?} is not a valid note key name (non-empty, no spaces, no '+')")]
    BadOrigin(String),
    #[error("malformed signed note: {0}")]
    Note(String),
    #[error("malformed checkpoint body")]
    Body,
    #[error("checkpoint origin is {found:?}, expected {expected:?}")]
    WrongOrigin { found: String, expected: String },
    #[error("verifier key is malformed: {0}")]
    VerifierKey(String),
    /// The note is well formed but none of its signatures is by the given key: the key ids
    /// and names, so a reader sees at once whether the key or the note is the wrong one.
    #[error(
        "no signature by the given key {expected} (key id {expected_id:08x}); the note is signed by {} (checkpoint origin {})",
        if found.is_empty() { "nobody".to_owned() } else { found.join(", ") },
        origin.as_deref().map_or_else(|| "unreadable".to_owned(), |o| format!("{o:?}"))
    )]
    NotSignedByKey {
        /// The given key's name.
        expected: String,
        /// The given key's id.
        expected_id: u32,
        /// `<name>+<key id>` of each signature line of the note.
        found: Vec<String>,
        /// The origin line of the note's checkpoint body, when it has one.
        origin: Option<String>,
    },
}

/// The log's signing identity: its origin (also the note key name) and Ed25519 key.
#[derive(Clone)]
pub struct LogSigner {
    origin: String,
    key: SigningKey,
    note_key_id: u32,
}

impl LogSigner {
    /// A signer for `origin` with `key`.
    pub fn new(origin: &str, key: SigningKey) -> Result<Self, CheckpointError> {
        if !signed_note::is_key_name_valid(origin) {
            return Err(CheckpointError::BadOrigin(origin.to_owned()));
        }
        let note_key_id = note_key_id(origin, &key.verifying_key());
        Ok(Self {
            origin: origin.to_owned(),
            key,
            note_key_id,
        })
    }

    /// The origin line of every checkpoint.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The Ed25519 signing key (also used for the ledger's own envelopes).
    pub fn key(&self) -> &SigningKey {
        &self.key
    }

    /// The signed-note verifier key string: `<name>+<hex key id>+<base64(0x01 ‖ public key)>`.
    pub fn verifier_key(&self) -> String {
        verifier_key(&self.origin, &self.key.verifying_key())
    }

    /// Signs a checkpoint for `size` and `root`, returning the complete signed note text.
    pub fn sign_checkpoint(&self, size: u64, root: &Hash) -> String {
        let cp = Checkpoint::new(&self.origin, size, *root, "").expect("origin was validated");
        let mut note =
            Note::new(&cp.to_bytes(), &[]).expect("checkpoint text is a valid note text");
        note.add_sigs(&[self]).expect("origin is a valid key name");
        String::from_utf8(note.to_bytes()).expect("notes are UTF-8")
    }
}

impl NoteSigner for LogSigner {
    fn name(&self) -> &str {
        &self.origin
    }
    fn key_id(&self) -> u32 {
        self.note_key_id
    }
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, signature::Error> {
        Ok(self.key.sign(msg).to_bytes().to_vec())
    }
}

/// The signed-note key id of `public` under `name`.
pub fn note_key_id(name: &str, public: &VerifyingKey) -> u32 {
    let mut encoded = vec![ALG_ED25519];
    encoded.extend_from_slice(public.as_bytes());
    signed_note::key_id(name, &encoded)
}

/// The signed-note verifier key string for `public` under `name`.
pub fn verifier_key(name: &str, public: &VerifyingKey) -> String {
    signed_note::new_ed25519_verifier_key(name, public)
}

/// Verifies a signed checkpoint note against a verifier key string and returns its body.
/// The checkpoint's origin must equal the key's name.
pub fn verify_checkpoint(
    note_text: &[u8],
    verifier_key: &str,
) -> Result<Checkpoint, CheckpointError> {
    let verifier = StandardVerifier::new(verifier_key)
        .map_err(|e| CheckpointError::VerifierKey(e.to_string()))?;
    let name = signed_note::Verifier::name(&verifier).to_owned();
    let expected_id = signed_note::Verifier::key_id(&verifier);
    let note = Note::from_bytes(note_text).map_err(|e| CheckpointError::Note(e.to_string()))?;
    note.verify(&VerifierList::new(vec![Box::new(verifier)]))
        .map_err(|e| match e {
            signed_note::NoteError::UnverifiedNote => CheckpointError::NotSignedByKey {
                expected: name.clone(),
                expected_id,
                found: signers(note_text),
                origin: Checkpoint::from_bytes(note.text())
                    .ok()
                    .map(|c| c.origin().to_owned()),
            },
            e => CheckpointError::Note(e.to_string()),
        })?;
    let cp = Checkpoint::from_bytes(note.text()).map_err(|_| CheckpointError::Body)?;
    if cp.origin() != name {
        return Err(CheckpointError::WrongOrigin {
            found: cp.origin().to_owned(),
            expected: name,
        });
    }
    Ok(cp)
}

/// `<name>+<key id>` of every signature line of a signed note (read with the `signed_note`
/// crate's own line parser), for saying who signed a note that the given key did not.
fn signers(note_text: &[u8]) -> Vec<String> {
    let Some(at) = note_text.windows(2).position(|w| w == b"\n\n") else {
        return Vec::new();
    };
    note_text[at + 2..]
        .split(|b| *b == b'\n')
        .filter_map(|line| signed_note::Signature::from_bytes(line).ok())
        .map(|s| format!("{}+{:08x}", s.name(), s.id()))
        .collect()
}

/// The checkpoint a signed note carries, parsed without checking any signature: for reading
/// the size of a note that is verified elsewhere (or was signed here).
pub fn unverified(note: &str) -> Option<Checkpoint> {
    let body = note.find("\n\n").map(|i| &note.as_bytes()[..=i])?;
    Checkpoint::from_bytes(body).ok()
}
