//! `gpuledger witness`: a C2SP tlog-witness. It holds its own Ed25519 key, a list of logs
//! (origin and the log's note verifier key), and per log the latest checkpoint it cosigned
//! ([`state`], an SQLite file). `POST /add-checkpoint` cosigns a checkpoint only if it is
//! consistent with that one (an RFC 6962 consistency proof from the stored size), stores it
//! and commits before answering, and never rolls back ([`http`]).
//!
//! The decision itself is [`Witness::add_checkpoint`], independent of HTTP; its answers are
//! the spec's: 404 unknown origin, 403 no valid log signature, 400 malformed or old size above
//! the checkpoint's, 409 (with the stored size) when the old size is not the stored size or
//! the same size has another root, 422 when the proof does not verify, 200 with the
//! cosignature line. Refusals of a checkpoint that carries a valid log signature (409 on a
//! root, 422) are kept in the state file and logged at WARN: they may be evidence of a fork.

pub mod http;
pub mod metrics;
pub mod state;

use ed25519_dalek::SigningKey;
use gpuledger_core::checkpoint::{self, Checkpoint};
use gpuledger_core::cosignature::{AddCheckpoint, CosignatureError, Cosigner, WitnessKey};
use gpuledger_core::keys;
use gpuledger_core::merkle::{self, EMPTY_HASH};
use serde::Deserialize;
use signed_note::Note;
use state::{Decision, Latest, Refusal, StateError, WitnessState};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

pub use http::{start, start_with_metrics, RunningWitness};

/// Why a witness could not be configured or started.
#[derive(Debug, thiserror::Error)]
pub enum WitnessError {
    /// A log verifier key is malformed.
    #[error("log verifier key {vkey:?}: {detail}")]
    LogKey {
        /// The key as given.
        vkey: String,
        /// What is wrong with it.
        detail: String,
    },
    /// A `[[logs]]` entry names an origin other than its key's name.
    #[error("log {origin:?}: its verifier key is named {key_name:?} (the origin is the key name)")]
    OriginMismatch {
        /// The origin written in the configuration.
        origin: String,
        /// The name in the verifier key.
        key_name: String,
    },
    /// No log is configured.
    #[error("no log configured: give at least one --log VKEY or [[logs]] entry")]
    NoLogs,
    /// The witness name or key is refused.
    #[error("witness identity: {0}")]
    Identity(#[from] CosignatureError),
    /// The state file failed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The configuration file could not be read.
    #[error("{path}: {detail}")]
    Config {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        detail: String,
    },
    /// The listening socket could not be bound.
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    /// A required setting is missing.
    #[error("missing setting: {0}")]
    Missing(&'static str),
}

/// One log the witness follows: its origin and the note verifier key(s) it trusts for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    /// The checkpoint origin line (and the note key name of the log's signatures).
    pub origin: String,
    /// Signed-note verifier keys (`<origin>+<key id>+<base64(0x01 ‖ key)>`).
    pub vkeys: Vec<String>,
}

/// Checks a log's verifier key: a signed-note Ed25519 vkey whose key passes the protocol's key
/// rule; returns its name (the origin).
pub fn check_log_vkey(vkey: &str) -> Result<String, WitnessError> {
    let bad = |detail: String| WitnessError::LogKey {
        vkey: vkey.to_owned(),
        detail,
    };
    let verifier = signed_note::StandardVerifier::new(vkey).map_err(|e| bad(e.to_string()))?;
    // `<name>+<key id>+<base64>`: the name has no '+', the base64 may.
    let material = vkey
        .splitn(3, '+')
        .nth(2)
        .and_then(|b64| {
            use base64::prelude::{Engine, BASE64_STANDARD};
            BASE64_STANDARD.decode(b64).ok()
        })
        .ok_or_else(|| bad("key is not base64".into()))?;
    let public: [u8; 32] = material
        .get(1..)
        .and_then(|k| k.try_into().ok())
        .ok_or_else(|| bad("not an Ed25519 key".into()))?;
    keys::check_public(&public).map_err(|e| bad(e.to_string()))?;
    Ok(signed_note::Verifier::name(&verifier).to_owned())
}

/// Groups log verifier keys by origin (the key's name); an origin may have several keys.
pub fn logs_from_vkeys<'a>(
    vkeys: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<LogConfig>, WitnessError> {
    let mut by_origin: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for vkey in vkeys {
        let vkey = vkey.trim();
        let origin = check_log_vkey(vkey)?;
        let keys = by_origin.entry(origin).or_default();
        if !keys.iter().any(|k| k == vkey) {
            keys.push(vkey.to_owned());
        }
    }
    Ok(by_origin
        .into_iter()
        .map(|(origin, vkeys)| LogConfig { origin, vkeys })
        .collect())
}

/// Everything a witness needs to run.
pub struct WitnessSettings {
    /// Address to listen on (port 0: any free port).
    pub listen: SocketAddr,
    /// The witness's name (its note key name, e.g. `witness.example.org/w1`).
    pub name: String,
    /// The witness's signing key.
    pub key: SigningKey,
    /// The state file (SQLite).
    pub state: PathBuf,
    /// The logs it cosigns.
    pub logs: Vec<LogConfig>,
    /// HTTP worker threads.
    pub workers: usize,
}

/// The witness's settings file (TOML); flags win over it.
///
/// ```toml
/// listen = "127.0.0.1:7380"
/// metrics_listen = "127.0.0.1:9102"
/// name = "witness.example.org/w1"
/// key = "witness.key"
/// state = "witness.db"
/// [[logs]]
/// vkey = "ledger.example.org/log+1a2b3c4d+AU..."
/// ```
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WitnessConfigFile {
    /// Address to listen on.
    pub listen: Option<SocketAddr>,
    /// The witness's name.
    pub name: Option<String>,
    /// The private key file.
    pub key: Option<PathBuf>,
    /// The state file.
    pub state: Option<PathBuf>,
    /// HTTP worker threads.
    pub workers: Option<usize>,
    /// Serve `GET /metrics` on this address alone (not on `listen`).
    pub metrics_listen: Option<SocketAddr>,
    /// The logs.
    #[serde(default)]
    pub logs: Vec<LogFileEntry>,
}

/// One `[[logs]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogFileEntry {
    /// The origin (optional: the key's name is the origin; if given it must match).
    pub origin: Option<String>,
    /// The log's note verifier key.
    pub vkey: String,
}

impl WitnessConfigFile {
    /// Reads and parses a settings file.
    pub fn read(path: &Path) -> Result<WitnessConfigFile, WitnessError> {
        let err = |detail: String| WitnessError::Config {
            path: path.to_owned(),
            detail,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let file: WitnessConfigFile = toml::from_str(&text).map_err(|e| err(e.to_string()))?;
        for entry in &file.logs {
            if let Some(origin) = &entry.origin {
                let key_name = check_log_vkey(entry.vkey.trim())?;
                if &key_name != origin {
                    return Err(WitnessError::OriginMismatch {
                        origin: origin.clone(),
                        key_name,
                    });
                }
            }
        }
        Ok(file)
    }
}

/// The answer to one `add-checkpoint` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// 200: the cosignature line(s), each ending in LF.
    Cosigned(String),
    /// 400: malformed body or checkpoint, or old size above the checkpoint's size.
    BadRequest(String),
    /// 403: no signature from a trusted key of the origin verifies.
    Forbidden(String),
    /// 404: the origin is not a configured log.
    UnknownOrigin(String),
    /// 409: the old size is not the stored size, or the same size has another root; carries
    /// the stored size.
    Conflict(u64),
    /// 422: the consistency proof does not verify.
    BadProof(String),
}

impl Answer {
    /// The HTTP status of the answer.
    pub fn status(&self) -> u16 {
        match self {
            Answer::Cosigned(_) => 200,
            Answer::BadRequest(_) => 400,
            Answer::Forbidden(_) => 403,
            Answer::UnknownOrigin(_) => 404,
            Answer::Conflict(_) => 409,
            Answer::BadProof(_) => 422,
        }
    }
}

/// One witness: its cosigner, its logs, its state and its metrics.
pub struct Witness {
    cosigner: Cosigner,
    logs: BTreeMap<String, Vec<String>>,
    state: WitnessState,
    metrics: metrics::WitnessMetrics,
}

/// The current time in POSIX seconds.
pub fn now_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Witness {
    /// A witness named `name` with `key`, following `logs`, its state in `state`.
    pub fn open(
        name: &str,
        key: SigningKey,
        logs: &[LogConfig],
        state: &Path,
    ) -> Result<Witness, WitnessError> {
        if logs.is_empty() {
            return Err(WitnessError::NoLogs);
        }
        let cosigner = Cosigner::new(name, key)?;
        let mut by_origin: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for log in logs {
            for vkey in &log.vkeys {
                let key_name = check_log_vkey(vkey)?;
                if key_name != log.origin {
                    return Err(WitnessError::OriginMismatch {
                        origin: log.origin.clone(),
                        key_name,
                    });
                }
                by_origin
                    .entry(log.origin.clone())
                    .or_default()
                    .push(vkey.clone());
            }
        }
        let state = WitnessState::open(state)?;
        let metrics =
            metrics::WitnessMetrics::new(by_origin.keys().map(String::as_str), &state.all()?);
        Ok(Witness {
            cosigner,
            logs: by_origin,
            state,
            metrics,
        })
    }

    /// The witness's metrics (`GET /metrics`).
    pub fn metrics(&self) -> &metrics::WitnessMetrics {
        &self.metrics
    }

    /// The witness's public identity.
    pub fn witness_key(&self) -> WitnessKey {
        self.cosigner.witness_key()
    }

    /// The configured origins.
    pub fn origins(&self) -> impl Iterator<Item = &str> {
        self.logs.keys().map(String::as_str)
    }

    /// The state file.
    pub fn state(&self) -> &WitnessState {
        &self.state
    }

    /// Handles one `add-checkpoint` body at time `now` (POSIX seconds). An `Err` is a failure
    /// of the state file (the caller answers 500 and nothing was cosigned).
    pub fn add_checkpoint(&self, body: &[u8], now: u64) -> Result<Answer, StateError> {
        let submitted = match self.read_submission(body) {
            Ok(s) => s,
            Err(answer) => return Ok(answer),
        };
        let (origin, size) = (submitted.origin.clone(), submitted.size);
        let (answer, refused) = self.state.update(&origin, |stored| {
            let d = self.decide(&submitted, stored, body, now);
            let refused = d.refusal.is_some();
            Decision {
                store: d.store,
                refusal: d.refusal,
                answer: (d.answer, refused),
            }
        })?;
        // Committed: the metrics follow what the state file now holds.
        if refused {
            self.metrics.fork_evidence(&origin);
        }
        if matches!(answer, Answer::Cosigned(_)) {
            self.metrics.cosigned(&origin, size, now);
        }
        Ok(answer)
    }

    /// The request read and its checkpoint's log signature verified, before the stored state
    /// is looked at; `Err` is the answer to a request refused on its own (400, 403, 404).
    fn read_submission(&self, body: &[u8]) -> Result<Submission, Answer> {
        let req = AddCheckpoint::parse(body).map_err(|e| Answer::BadRequest(e.to_string()))?;
        let Ok(note) = Note::from_bytes(&req.checkpoint) else {
            return Err(Answer::BadRequest(
                "the checkpoint is not a signed note".into(),
            ));
        };
        let Ok(unverified) = Checkpoint::from_bytes(note.text()) else {
            return Err(Answer::BadRequest("the note is not a checkpoint".into()));
        };
        let origin = unverified.origin().to_owned();
        let Some(vkeys) = self.logs.get(&origin) else {
            return Err(Answer::UnknownOrigin(format!(
                "unknown log origin {origin:?}"
            )));
        };
        let Some(cp) = vkeys
            .iter()
            .find_map(|vkey| checkpoint::verify_checkpoint(&req.checkpoint, vkey).ok())
        else {
            return Err(Answer::Forbidden(format!(
                "no signature of a trusted key of {origin:?} verifies"
            )));
        };
        let (size, root) = (cp.size(), *cp.hash());
        if req.old_size > size {
            return Err(Answer::BadRequest(format!(
                "old size {} is above the checkpoint's size {size}",
                req.old_size
            )));
        }
        let note_text = String::from_utf8(req.checkpoint.clone()).expect("a parsed note is UTF-8");
        Ok(Submission {
            origin,
            size,
            root,
            note_text,
            body_text: note.text().to_vec(),
            req,
        })
    }

    /// The decision on a verified submission against what is `stored` for its log (`body`:
    /// the whole request, kept with a refusal): 409 on another root of the stored size or an
    /// old size that is not the stored size, 422 when the proof does not verify, else the
    /// cosignature (and the checkpoint stored where it grows the stored one).
    fn decide(
        &self,
        sub: &Submission,
        stored: Option<&Latest>,
        body: &[u8],
        now: u64,
    ) -> Decision<Answer> {
        let (origin, size, root) = (&sub.origin, sub.size, sub.root);
        // Never cosigned: the empty tree.
        let (stored_size, stored_root) = stored.map_or((0, EMPTY_HASH), |l| (l.size, l.root));
        let refuse = |status: u16, reason: String| Refusal {
            origin: origin.clone(),
            received_at: now,
            status,
            reason,
            old_size: sub.req.old_size,
            size,
            stored: stored.map(|l| (l.size, l.root)),
            request: body.to_vec(),
        };
        let conflict = |refusal: Option<Refusal>| Decision {
            store: None,
            refusal,
            answer: Answer::Conflict(stored_size),
        };
        // A checkpoint of the stored size with another root contradicts what was cosigned,
        // whatever old size the request names.
        if size == stored_size && root != stored_root {
            let reason = format!(
                "checkpoint of size {size} has root {}, the cosigned one has {}: a fork",
                merkle::encode_hash(&root),
                merkle::encode_hash(&stored_root)
            );
            tracing::warn!(%origin, size, %reason, "refused a validly signed checkpoint: possible fork");
            return conflict(Some(refuse(409, reason)));
        }
        if sub.req.old_size != stored_size {
            return conflict(None);
        }
        if size > stored_size && !sub.consistent_with(stored_size, stored_root) {
            let reason = format!(
                "consistency proof from the cosigned size {stored_size} to {size} does not verify"
            );
            tracing::warn!(%origin, size, stored_size, %reason, "refused a validly signed checkpoint: possible fork");
            return Decision {
                store: None,
                refusal: Some(refuse(422, reason.clone())),
                answer: Answer::BadProof(reason),
            };
        }
        // Cosign: the same checkpoint again, or consistent growth.
        let line = self.cosigner.cosign(&sub.body_text, now);
        let store = (size > stored_size || stored.is_none()).then(|| Latest {
            size,
            root,
            checkpoint: sub.note_text.clone(),
            updated_at: now,
        });
        debug_assert!(
            store.as_ref().is_none_or(|new| new.size >= stored_size),
            "a witness's stored checkpoint only grows"
        );
        Decision {
            store,
            refusal: None,
            answer: Answer::Cosigned(line),
        }
    }
}

/// An `add-checkpoint` request whose checkpoint a trusted key of its log signed, and whose old
/// size is not above the checkpoint's.
struct Submission {
    /// The checkpoint's origin (a configured log).
    origin: String,
    /// The checkpoint's tree size and root.
    size: u64,
    root: merkle::Hash,
    /// The signed note, as stored once cosigned.
    note_text: String,
    /// The note's text (what is cosigned).
    body_text: Vec<u8>,
    req: AddCheckpoint,
}

impl Submission {
    /// Whether the request's consistency proof leads from the stored tree (`stored_size`,
    /// below the checkpoint's size, and `stored_root`) to the checkpoint's: from the empty
    /// tree, the proof must be empty.
    fn consistent_with(&self, stored_size: u64, stored_root: merkle::Hash) -> bool {
        debug_assert!(
            stored_size < self.size,
            "a consistency proof only leads from a smaller tree to a larger one"
        );
        if stored_size == 0 {
            self.req.proof.is_empty()
        } else {
            merkle::check_tree(
                &self.req.proof,
                self.size,
                self.root,
                stored_size,
                stored_root,
            )
            .is_ok()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuledger_core::checkpoint::LogSigner;
    use gpuledger_core::cosignature;
    use gpuledger_core::merkle::{Hash, MemoryHashes};

    struct Fixture {
        _dir: tempfile::TempDir,
        witness: Witness,
        log: LogSigner,
        tree: MemoryHashes,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let log = LogSigner::new("log.test/a", SigningKey::from_bytes(&[7; 32])).unwrap();
        let logs = logs_from_vkeys([log.verifier_key().as_str()]).unwrap();
        let witness = Witness::open(
            "witness.test/w",
            SigningKey::from_bytes(&[8; 32]),
            &logs,
            &dir.path().join("w.db"),
        )
        .unwrap();
        let mut tree = MemoryHashes::default();
        let leaves: Vec<Hash> = (0..40u32)
            .map(|i| merkle::leaf_hash(&i.to_be_bytes()))
            .collect();
        merkle::append_leaves(0, &leaves, &mut tree).unwrap();
        Fixture {
            _dir: dir,
            witness,
            log,
            tree,
        }
    }

    impl Fixture {
        fn body(&self, old: u64, size: u64) -> Vec<u8> {
            let root = merkle::tree_hash(size, &self.tree).unwrap();
            let proof = if old == 0 || old >= size {
                vec![]
            } else {
                merkle::prove_tree(size, old, &self.tree).unwrap()
            };
            AddCheckpoint {
                old_size: old,
                proof,
                checkpoint: self.log.sign_checkpoint(size, &root).into_bytes(),
            }
            .to_body()
        }
    }

    #[test]
    fn config_files_are_strict() {
        let dir = tempfile::tempdir().unwrap();
        let log = LogSigner::new("log.test/a", SigningKey::from_bytes(&[7; 32])).unwrap();
        let write = |text: String| {
            let p = dir.path().join("w.toml");
            std::fs::write(&p, text).unwrap();
            WitnessConfigFile::read(&p)
        };
        let ok = write(format!(
            "name = \"w.test/w\"\nstate = \"s.db\"\n[[logs]]\norigin = \"log.test/a\"\nvkey = {:?}\n",
            log.verifier_key()
        ))
        .unwrap();
        assert_eq!(ok.logs.len(), 1);
        assert!(matches!(
            write(format!(
                "[[logs]]\norigin = \"log.test/b\"\nvkey = {:?}\n",
                log.verifier_key()
            )),
            Err(WitnessError::OriginMismatch { .. })
        ));
        assert!(matches!(
            write("nmae = \"typo\"\n".into()),
            Err(WitnessError::Config { .. })
        ));
        assert!(matches!(
            Witness::open(
                "w.test/w",
                SigningKey::from_bytes(&[1; 32]),
                &[],
                &dir.path().join("s.db")
            ),
            Err(WitnessError::NoLogs)
        ));
    }

    #[test]
    fn log_vkeys_whose_base64_holds_a_plus_are_read() {
        // Find a key whose vkey's base64 holds '+' (the name never does).
        let vkey = (0u8..=255)
            .map(|b| LogSigner::new("log.test/a", SigningKey::from_bytes(&[b; 32])).unwrap())
            .map(|l| l.verifier_key())
            .find(|v| v.splitn(3, '+').nth(2).is_some_and(|b| b.contains('+')))
            .unwrap();
        assert_eq!(check_log_vkey(&vkey).unwrap(), "log.test/a");
        assert!(check_log_vkey("log.test/a+00000000+AAAA").is_err());
    }

    #[test]
    fn cosigns_growth_and_answers_each_refusal_as_the_spec_says() {
        let f = fixture();
        let w = &f.witness;
        let Answer::Cosigned(line) = w.add_checkpoint(&f.body(0, 5), 100).unwrap() else {
            panic!()
        };
        let note = f
            .log
            .sign_checkpoint(5, &merkle::tree_hash(5, &f.tree).unwrap());
        let cosigned = cosignature::with_signature_lines(&note, &[line]).unwrap();
        assert_eq!(
            cosignature::valid_cosignatures(cosigned.as_bytes(), &[w.witness_key()]).len(),
            1
        );
        assert_eq!(
            w.add_checkpoint(&f.body(0, 9), 101).unwrap(),
            Answer::Conflict(5)
        );
        assert!(matches!(
            w.add_checkpoint(&f.body(5, 9), 102).unwrap(),
            Answer::Cosigned(_)
        ));
        // The same checkpoint again is cosigned again; an older one is a conflict.
        assert!(matches!(
            w.add_checkpoint(&f.body(9, 9), 103).unwrap(),
            Answer::Cosigned(_)
        ));
        assert_eq!(
            w.add_checkpoint(&f.body(5, 5), 104).unwrap(),
            Answer::Conflict(9)
        );
        assert!(matches!(
            w.add_checkpoint(&f.body(9, 5), 105).unwrap(),
            Answer::BadRequest(_)
        ));
        // A bad proof: 422, kept as evidence.
        let mut bad = AddCheckpoint::parse(&f.body(9, 20)).unwrap();
        bad.proof[0].0[0] ^= 1;
        assert!(matches!(
            w.add_checkpoint(&bad.to_body(), 106).unwrap(),
            Answer::BadProof(_)
        ));
        assert_eq!(w.state().refused("log.test/a").unwrap()[0].status, 422);
        assert_eq!(w.state().latest("log.test/a").unwrap().unwrap().size, 9);
        // Far behind: one proof from 9 to 40.
        assert!(matches!(
            w.add_checkpoint(&f.body(9, 40), 107).unwrap(),
            Answer::Cosigned(_)
        ));
        // Same size, another root: 409 and evidence.
        let forged = AddCheckpoint {
            old_size: 40,
            proof: vec![],
            checkpoint: f.log.sign_checkpoint(40, &Hash([1; 32])).into_bytes(),
        };
        assert_eq!(
            w.add_checkpoint(&forged.to_body(), 108).unwrap(),
            Answer::Conflict(40)
        );
        assert_eq!(w.state().refused("log.test/a").unwrap().len(), 2);
        // Unknown origin, bad signature, malformed.
        let other = LogSigner::new("log.test/b", SigningKey::from_bytes(&[7; 32])).unwrap();
        let unknown = AddCheckpoint {
            old_size: 0,
            proof: vec![],
            checkpoint: other.sign_checkpoint(1, &Hash([0; 32])).into_bytes(),
        };
        assert!(matches!(
            w.add_checkpoint(&unknown.to_body(), 109).unwrap(),
            Answer::UnknownOrigin(_)
        ));
        let impostor = LogSigner::new("log.test/a", SigningKey::from_bytes(&[6; 32])).unwrap();
        let forbidden = AddCheckpoint {
            old_size: 40,
            proof: vec![],
            checkpoint: impostor.sign_checkpoint(41, &Hash([0; 32])).into_bytes(),
        };
        assert!(matches!(
            w.add_checkpoint(&forbidden.to_body(), 110).unwrap(),
            Answer::Forbidden(_)
        ));
        assert!(matches!(
            w.add_checkpoint(b"old 1\n", 111).unwrap(),
            Answer::BadRequest(_)
        ));
        // A first checkpoint with a proof although old is 0: the proof must be empty.
        let f2 = fixture();
        let mut with_proof = AddCheckpoint::parse(&f2.body(0, 5)).unwrap();
        with_proof.proof.push(Hash([0; 32]));
        assert!(matches!(
            f2.witness.add_checkpoint(&with_proof.to_body(), 1).unwrap(),
            Answer::BadProof(_)
        ));
    }
}
