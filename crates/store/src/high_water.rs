//! The log's high-water mark: the largest checkpoint this server has signed (or found
//! published), kept outside the database, so a database that lost entries (a failover to a
//! standby that was behind, a restore from an old backup) is noticed before anything is written
//! or signed on top of it. Without it the server would sign a second root for a size it had
//! already published: a fork, the one thing a transparency log must never do.
//!
//! The mark is a checkpoint note signed by the log key, in a file (`high_water_file`, by
//! default beside the log key) replaced atomically and fsynced after each checkpoint commits
//! and before the checkpoint's signer answers. Every new write connection, and every
//! checkpoint before it is signed, is checked against it: the database must hold the marked
//! tree (at least that many entries, and the same root at that size through its stored tree
//! hashes). If it does not, the log is **rewound**: no write and no signature until a check
//! passes again (after recovery), `/readyz` says `log_rewound`, the gauge
//! `gpuledger_log_rewound` is 1, and the log line names both roots (ops/runbooks/log-rewound.md).
//! A witness that holds a larger size than the database's checkpoints is the same finding.

use super::conn::DbConn;
use super::read::{self, DbHashReader};
use super::StoreError;
use base64::Engine;
use gpuledger_core::checkpoint;
use gpuledger_core::merkle::{self, Hash};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The file name suffix of the default high-water file: `<log key file>.high-water`.
pub const DEFAULT_SUFFIX: &str = ".high-water";

/// The default high-water file of a log key file: beside it, `<name>.high-water`.
pub fn default_file(log_key: &Path) -> PathBuf {
    let mut name = log_key.file_name().unwrap_or_default().to_owned();
    name.push(DEFAULT_SUFFIX);
    log_key.with_file_name(name)
}

/// A checkpoint the database must hold: its size, root and signed note.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    pub size: u64,
    pub root: Hash,
    /// The signed note (what the file holds).
    pub note: String,
}

/// What the rewound state says: what was published, where that is known from, and what the
/// database holds instead.
#[derive(Debug, Clone, PartialEq)]
pub struct Rewound {
    /// The size the database must reach.
    pub size: u64,
    /// The root it must have there, when known (a witness's 409 names only a size).
    pub root: Option<Hash>,
    /// Where the requirement comes from: the high-water file, the publish directory, a
    /// witness.
    pub source: String,
    /// The database's log size.
    pub found_size: u64,
    /// The database's root at `size`, when it has that many entries.
    pub found_root: Option<Hash>,
}

fn b64(h: &Hash) -> String {
    base64::engine::general_purpose::STANDARD.encode(h.0)
}

impl std::fmt::Display for Rewound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let published = match &self.root {
            Some(r) => format!("a checkpoint of size {} with root {}", self.size, b64(r)),
            None => format!("size {}", self.size),
        };
        let found = match &self.found_root {
            Some(r) => format!(
                "holds {} entries, and its root at size {} is {}",
                self.found_size,
                self.size,
                b64(r)
            ),
            None => format!("holds only {} entries", self.found_size),
        };
        write!(
            f,
            "the database no longer holds the log this server published: {published} ({}), but \
             the database {found}; writes and checkpoint signing are stopped until it holds that \
             tree again (ops/runbooks/log-rewound.md)",
            self.source
        )
    }
}

#[derive(Default)]
struct State {
    mark: Option<Mark>,
    /// Where `mark` came from.
    mark_source: String,
    /// A checkpoint signed in the transaction under way: the mark once it commits.
    pending: Option<Mark>,
    /// A committed checkpoint whose mark could not be written yet: nothing is signed until
    /// it is.
    unsaved: Option<Mark>,
    /// The largest size a witness holds, with its name (a size without a root).
    witness_floor: Option<(u64, String)>,
    /// Two roots for one size, both signed by the log key (the mark's and a published
    /// note's): a fork already out. Unlike a database that is behind, no database can mend
    /// it, so it stays until the operator resolves it and restarts (log-rewound.md).
    fork: Option<Rewound>,
    rewound: Option<Rewound>,
}

/// The high-water mark of one ledger: shared by its sequencer (which checks and raises it)
/// and its readers (`/readyz`, the publisher, the witnesses).
pub struct HighWater {
    file: Option<PathBuf>,
    verifier_key: String,
    state: Mutex<State>,
    /// Set when the mark was raised from outside the sequencer (publish directory, witness):
    /// the next write checks the database again.
    recheck: AtomicBool,
}

impl HighWater {
    /// The mark in `file` (a checkpoint note that must verify under `verifier_key`), or none
    /// when the file does not exist yet; `file` `None` keeps the mark in memory only (it then
    /// guards the process's lifetime, not its restarts). A file that is there but unreadable
    /// or not such a note is an error: the server does not start on a mark it cannot read.
    pub fn load(file: Option<PathBuf>, verifier_key: &str) -> Result<HighWater, StoreError> {
        let mut state = State::default();
        if let Some(path) = &file {
            match std::fs::read_to_string(path) {
                Ok(note) => {
                    state.mark =
                        Some(parse(&note, verifier_key).map_err(|e| {
                            StoreError::HighWater(format!("{}: {e}", path.display()))
                        })?);
                    state.mark_source = format!("high-water file {}", path.display());
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::HighWater(format!("{}: {e}", path.display()))),
            }
        }
        Ok(HighWater {
            file,
            verifier_key: verifier_key.to_owned(),
            state: Mutex::new(state),
            recheck: AtomicBool::new(false),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("high-water lock")
    }

    /// The current mark's size and root, if there is one.
    pub fn mark(&self) -> Option<(u64, Hash)> {
        self.state().mark.as_ref().map(|m| (m.size, m.root))
    }

    /// Whether the database must be checked again before the next write (and clears it).
    pub fn take_recheck(&self) -> bool {
        self.recheck.swap(false, Ordering::AcqRel)
    }

    /// Why the log is rewound, if it is.
    pub fn rewound(&self) -> Option<Rewound> {
        let s = self.state();
        s.fork.clone().or_else(|| s.rewound.clone())
    }

    /// Raises the mark to the checkpoint `note` (which must verify under the log's key) if
    /// it is larger, saving it; `source` says where it was found (the publish directory). The
    /// next check compares the database with it.
    pub fn raise(&self, note: &str, source: &str) -> Result<(), StoreError> {
        let m = parse(note, &self.verifier_key)
            .map_err(|e| StoreError::HighWater(format!("{source}: {e}")))?;
        let mut s = self.state();
        if let Some(cur) = &s.mark {
            if cur.size >= m.size {
                if cur.size == m.size && cur.root != m.root {
                    // Two roots for one size, both signed by the log key: a fork already
                    // published. Nothing is signed from here on.
                    let r = Rewound {
                        size: cur.size,
                        root: Some(cur.root),
                        source: s.mark_source.clone(),
                        found_size: m.size,
                        found_root: Some(m.root),
                    };
                    tracing::error!(%r, other = source, "two roots for one size");
                    s.fork = Some(r.clone());
                    set_rewound(&mut s, Some(r));
                }
                return Ok(());
            }
        }
        self.save(&m)?;
        s.mark = Some(m);
        s.mark_source = source.to_owned();
        self.recheck.store(true, Ordering::Release);
        Ok(())
    }

    /// A witness holds `size`: if that is above every checkpoint the mark knows, the database
    /// lost checkpoints the witness cosigned, and it must hold at least `size` entries again.
    pub fn witness_holds(&self, witness: &str, size: u64) {
        let mut s = self.state();
        let known = s.mark.as_ref().map_or(0, |m| m.size);
        if size > known && s.witness_floor.as_ref().is_none_or(|(f, _)| size > *f) {
            tracing::error!(
                witness,
                size,
                known,
                "a witness holds a larger checkpoint than the database has"
            );
            s.witness_floor = Some((size, witness.to_owned()));
            self.recheck.store(true, Ordering::Release);
            let r = Rewound {
                size,
                root: None,
                source: format!("cosigned by witness {witness}"),
                found_size: known,
                found_root: None,
            };
            set_rewound(&mut s, Some(r));
        }
    }

    /// Checks that the database holds the marked tree (and the witnesses' sizes); the
    /// sequencer calls it on every new write connection and, while rewound, before every
    /// write. When it holds and its latest checkpoint is larger than the mark, that checkpoint
    /// becomes the mark (a checkpoint committed just before a crash, whose mark was not yet
    /// written). `Err(LogRewound)` when it does not.
    pub fn check(&self, conn: &mut DbConn) -> Result<(), StoreError> {
        let (mark, floor) = {
            let s = self.state();
            if let Some(f) = &s.fork {
                return Err(StoreError::LogRewound(Box::new(f.clone())));
            }
            (s.mark.clone(), s.witness_floor.clone())
        };
        let (size, _) = read::head(conn)?;
        let mut found = None;
        if let Some(m) = &mark {
            if size < m.size {
                found = Some(Rewound {
                    size: m.size,
                    root: Some(m.root),
                    source: self.state().mark_source.clone(),
                    found_size: size,
                    found_root: None,
                });
            } else {
                let root = merkle::tree_hash(m.size, &DbHashReader::new(conn))?;
                if root != m.root {
                    found = Some(Rewound {
                        size: m.size,
                        root: Some(m.root),
                        source: self.state().mark_source.clone(),
                        found_size: size,
                        found_root: Some(root),
                    });
                }
            }
        }
        if found.is_none() {
            if let Some((f, w)) = floor.filter(|(f, _)| size < *f) {
                found = Some(Rewound {
                    size: f,
                    root: None,
                    source: format!("cosigned by witness {w}"),
                    found_size: size,
                    found_root: None,
                });
            }
        }
        if let Some(r) = found {
            let mut s = self.state();
            if s.rewound.as_ref() != Some(&r) {
                tracing::error!(%r, "log rewound");
            }
            set_rewound(&mut s, Some(r.clone()));
            return Err(StoreError::LogRewound(Box::new(r)));
        }
        {
            let mut s = self.state();
            if s.rewound.is_some() {
                tracing::warn!("the database holds the published tree again; writes resume");
                set_rewound(&mut s, None);
            }
        }
        if let Some((_, _, note)) = read::latest_checkpoint(conn)? {
            if mark
                .as_ref()
                .is_none_or(|m| checkpoint::unverified(&note).is_some_and(|c| c.size() > m.size))
            {
                self.raise(&note, "the database's latest checkpoint")?;
            }
        }
        Ok(())
    }

    /// Refuses to sign a checkpoint of `size` with `root` unless it extends the mark: at
    /// least the mark's size, the same root at that size, proven by a consistency proof from
    /// the stored tree hashes. Also refuses while a committed checkpoint's mark is unsaved.
    pub fn check_extends(
        &self,
        size: u64,
        root: Hash,
        reader: &DbHashReader<'_>,
    ) -> Result<(), StoreError> {
        let (mark, unsaved) = {
            let s = self.state();
            (s.mark.clone(), s.unsaved.is_some())
        };
        if unsaved {
            return Err(StoreError::HighWater(
                "the high-water mark of the last checkpoint could not be saved; no checkpoint is \
                 signed until it is"
                    .into(),
            ));
        }
        let Some(m) = mark else { return Ok(()) };
        let consistent = size >= m.size
            && (size == m.size && root == m.root
                || size > m.size && {
                    let proof = merkle::prove_tree(size, m.size, reader)?;
                    merkle::check_tree(&proof, size, root, m.size, m.root).is_ok()
                });
        if consistent {
            return Ok(());
        }
        let r = Rewound {
            size: m.size,
            root: Some(m.root),
            source: self.state().mark_source.clone(),
            found_size: size,
            found_root: (size >= m.size)
                .then(|| merkle::tree_hash(m.size, reader))
                .transpose()?,
        };
        tracing::error!(%r, "refusing to sign a checkpoint that does not extend the high-water mark");
        set_rewound(&mut self.state(), Some(r.clone()));
        Err(StoreError::LogRewound(Box::new(r)))
    }

    /// Records the checkpoint the transaction under way signed; it becomes the mark when the
    /// transaction commits ([`HighWater::commit`]).
    pub fn stage(&self, size: u64, root: Hash, note: &str) {
        self.state().pending = Some(Mark {
            size,
            root,
            note: note.to_owned(),
        });
    }

    /// After a transaction: `committed`, the checkpoint it signed (if any) becomes the mark,
    /// saved before the caller is answered; otherwise it is forgotten. A mark that cannot be
    /// saved is kept to be saved again (and no checkpoint is signed meanwhile); also retried
    /// here. Returns the error of a failed save.
    pub fn settle(&self, committed: bool) -> Result<(), StoreError> {
        let mut s = self.state();
        let staged = s.pending.take();
        let next = match (committed, staged) {
            (true, Some(m)) => Some(m),
            _ => s.unsaved.take(),
        };
        let Some(m) = next else { return Ok(()) };
        match self.save(&m) {
            Ok(()) => {
                if s.mark.as_ref().is_none_or(|cur| m.size > cur.size) {
                    s.mark = Some(m);
                    s.mark_source = match &self.file {
                        Some(p) => format!("high-water file {}", p.display()),
                        None => "a checkpoint this server signed".into(),
                    };
                }
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot save the high-water mark");
                s.unsaved = Some(m);
                Err(e)
            }
        }
    }

    fn save(&self, m: &Mark) -> Result<(), StoreError> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        gpuledger_shell::atomic_file::write(path, m.note.as_bytes(), 0o644)
            .map_err(|(at, e)| StoreError::HighWater(format!("{}: {e}", at.display())))
    }
}

fn set_rewound(s: &mut State, r: Option<Rewound>) {
    metrics::gauge!("gpuledger_log_rewound").set(if r.is_some() { 1.0 } else { 0.0 });
    s.rewound = r;
}

/// The mark a note carries, after checking its signature by the log key.
fn parse(note: &str, verifier_key: &str) -> Result<Mark, String> {
    let cp = checkpoint::verify_checkpoint(note.as_bytes(), verifier_key)
        .map_err(|e| format!("not a checkpoint signed by the log key: {e}"))?;
    Ok(Mark {
        size: cp.size(),
        root: *cp.hash(),
        note: note.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuledger_core::checkpoint::LogSigner;

    fn signer() -> LogSigner {
        LogSigner::new(
            "test.example/log",
            gpuledger_core::sample::key("high-water test"),
        )
        .unwrap()
    }

    #[test]
    fn two_roots_for_one_size_stay_refused_whatever_the_database_holds() {
        let log = signer();
        let hw = HighWater::load(None, &log.verifier_key()).unwrap();
        hw.raise(&log.sign_checkpoint(5, &Hash([1; 32])), "here")
            .unwrap();
        assert!(hw.rewound().is_none());
        hw.raise(&log.sign_checkpoint(5, &Hash([2; 32])), "publish directory")
            .unwrap();
        let r = hw.rewound().expect("a fork is found");
        assert_eq!((r.size, r.found_root), (5, Some(Hash([2; 32]))));
        // The check refuses before it reads the database: no database mends a fork.
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("x.db").display());
        let mut conn = crate::connect(&url).unwrap();
        assert!(matches!(
            hw.check(&mut conn),
            Err(StoreError::LogRewound(_))
        ));
        assert!(hw.rewound().is_some(), "still refused");
    }

    #[test]
    fn a_note_not_signed_by_the_log_key_is_refused() {
        let log = signer();
        let other =
            LogSigner::new("test.example/log", gpuledger_core::sample::key("another")).unwrap();
        let hw = HighWater::load(None, &log.verifier_key()).unwrap();
        let e = hw
            .raise(
                &other.sign_checkpoint(3, &Hash([1; 32])),
                "publish directory",
            )
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("not a checkpoint signed by the log key"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("log.key.high-water");
        std::fs::write(&file, other.sign_checkpoint(3, &Hash([1; 32]))).unwrap();
        assert!(matches!(
            HighWater::load(Some(file), &log.verifier_key()),
            Err(StoreError::HighWater(_))
        ));
    }
}
