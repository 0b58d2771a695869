//! `--publish-dir DIR`: every checkpoint the ledger signs is written under DIR, for a web
//! server, a bucket sync or witnesses to pick up:
//!
//! - `DIR/checkpoint`: the latest signed checkpoint (a C2SP signed note), replaced as new
//!   ones are signed and as the witnesses' cosignatures of it arrive;
//! - `DIR/checkpoints/<size>`: every stored checkpoint, by tree size, written once and kept.
//!
//! Every file is written to a temporary name in the same directory, fsynced, renamed over the
//! final name and the directory fsynced: a reader sees the old file or the new one, never part
//! of one. Files are mode 0644 (they are public), and directories this module creates 0755.
//!
//! What is published is never contradicted: `checkpoints/<size>` is never replaced by a note
//! with another root, and `checkpoint` only by a larger checkpoint proven consistent with it
//! (a consistency proof from the store, checked here) or by the same one with more
//! cosignatures. A store that would make it do otherwise (a database rewound by a failover)
//! gets [`PublishError::Contradicts`], and the published checkpoint raises the ledger's
//! high-water mark at start (`serve`).

use gpuledger_core::checkpoint;
use gpuledger_core::merkle::{self, Hash};
use gpuledger_store::read::{self, CheckpointPage};
use gpuledger_store::{Ledger, StoreError};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The latest checkpoint, under the publish directory.
pub const CHECKPOINT_FILE: &str = "checkpoint";
/// The folder of every checkpoint by size, under the publish directory.
pub const CHECKPOINTS_DIR: &str = "checkpoints";
/// Most checkpoints written to `checkpoints/` in one round; a long history is back-filled a
/// page per round, so one round never holds the checkpoint task for long.
pub const MAX_PUBLISH_PER_ROUND: u64 = 1_000;

/// Why publishing failed.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// A file or directory could not be written.
    #[error("publish directory: {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What went wrong.
        source: std::io::Error,
    },
    /// The checkpoints could not be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The store's checkpoint contradicts one already published: not written.
    #[error("publish directory: {0}; not published")]
    Contradicts(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PublishError + '_ {
    move |source| PublishError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Writes `bytes` to `path` atomically (`gpuledger_shell::atomic_file`): the file ends with
/// mode 0644, whatever the umask (the systemd unit's 0077).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), PublishError> {
    gpuledger_shell::atomic_file::write(path, bytes, 0o644)
        .map_err(|(path, source)| PublishError::Io { path, source })
}

/// The size and root of a note (signed here or by this log earlier).
fn size_root(note: &str) -> Option<(u64, Hash)> {
    checkpoint::unverified(note).map(|c| (c.size(), *c.hash()))
}

fn b64(h: &Hash) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(h.0)
}

/// Writes new checkpoints to a publish directory; remembers what it wrote.
#[derive(Debug)]
pub struct Publisher {
    dir: PathBuf,
    /// The largest size written to `checkpoints/`, if any.
    last_kept: Option<u64>,
    /// The size last written to `checkpoint`.
    latest: Option<u64>,
    /// The note last written to `checkpoint`: rewritten when the witnesses' cosignatures of
    /// the same checkpoint arrive.
    latest_note: Option<String>,
    /// The size and root of what `checkpoint` holds (from an earlier run, or written here).
    published: Option<(u64, Hash)>,
}

impl Publisher {
    /// Creates `dir` and `dir/checkpoints` if needed and finds what an earlier run already
    /// published there (the largest `checkpoints/<size>`), so it is not written again.
    pub fn open(dir: &Path) -> Result<Publisher, PublishError> {
        let kept = dir.join(CHECKPOINTS_DIR);
        for d in [dir, kept.as_path()] {
            if !d.is_dir() {
                fs::create_dir_all(d).map_err(io(d))?;
                // Readable by the web server or sync job, whatever the process umask is.
                fs::set_permissions(d, fs::Permissions::from_mode(0o755)).map_err(io(d))?;
            }
        }
        let mut last_kept = None;
        for e in fs::read_dir(&kept).map_err(io(&kept))? {
            let e = e.map_err(io(&kept))?;
            if let Some(size) = e.file_name().to_str().and_then(|n| n.parse::<u64>().ok()) {
                last_kept = last_kept.max(Some(size));
            }
        }
        let published = match fs::read_to_string(dir.join(CHECKPOINT_FILE)) {
            Ok(note) => size_root(&note),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io(&dir.join(CHECKPOINT_FILE))(e)),
        };
        Ok(Publisher {
            dir: dir.to_owned(),
            last_kept,
            latest: None,
            latest_note: None,
            published,
        })
    }

    /// The note `checkpoint` holds, if any: what this directory has published, which the
    /// ledger's database must hold (`serve` raises the high-water mark with it).
    pub fn published_note(&self) -> Option<String> {
        fs::read_to_string(self.dir.join(CHECKPOINT_FILE)).ok()
    }

    /// Refuses a note of `size` and `root` for `checkpoint` unless it extends what is there.
    fn extends_published(
        &self,
        ledger: &Ledger,
        size: u64,
        root: Hash,
    ) -> Result<(), PublishError> {
        let Some((old, old_root)) = self.published else {
            return Ok(());
        };
        let consistent = if size < old {
            false
        } else if size == old {
            root == old_root
        } else if old == 0 {
            true
        } else {
            debug_assert!(
                0 < old && old < size,
                "a consistency proof leads from a smaller, non-empty tree to a larger one"
            );
            let proof = ledger.reads().consistency_proof(old, size)?;
            merkle::check_tree(&proof, size, root, old, old_root).is_ok()
        };
        if consistent {
            Ok(())
        } else {
            Err(PublishError::Contradicts(format!(
                "the store's latest checkpoint (size {size}, root {}) does not extend the published                  one (size {old}, root {})",
                b64(&root),
                b64(&old_root)
            )))
        }
    }

    /// The directory published to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes up to [`MAX_PUBLISH_PER_ROUND`] stored checkpoints not yet in `checkpoints/`
    /// (oldest first), then the latest one to `checkpoint` if it changed. Returns the size of
    /// the latest published checkpoint, if there is one.
    pub fn publish(&mut self, ledger: &Ledger) -> Result<Option<u64>, PublishError> {
        let from = self.last_kept.map_or(0, |s| s + 1);
        let rows = ledger.reads().run(|c| {
            read::checkpoints_page(c, CheckpointPage::From(from), MAX_PUBLISH_PER_ROUND)
        })?;
        let kept = self.dir.join(CHECKPOINTS_DIR);
        for r in &rows {
            let path = kept.join(r.size.to_string());
            match fs::read_to_string(&path) {
                // Kept from an earlier run: the same checkpoint or a contradiction.
                Ok(there) => {
                    if size_root(&there).map(|(_, h)| h) != size_root(&r.note).map(|(_, h)| h) {
                        return Err(PublishError::Contradicts(format!(
                            "{} holds another root for size {}",
                            path.display(),
                            r.size
                        )));
                    }
                }
                Err(_) => write_atomic(&path, r.note.as_bytes())?,
            }
            self.last_kept = Some(r.size);
        }
        if let Some((size, note)) = ledger.reads().latest_checkpoint()? {
            if self.latest_note.as_deref() != Some(note.as_str()) {
                let (s, root) = size_root(&note).ok_or_else(|| {
                    PublishError::Contradicts(format!(
                        "the store's checkpoint of size {size} does not parse"
                    ))
                })?;
                self.extends_published(ledger, s, root)?;
                write_atomic(&self.dir.join(CHECKPOINT_FILE), note.as_bytes())?;
                self.latest = Some(size);
                self.latest_note = Some(note);
                self.published = Some((s, root));
            }
        }
        Ok(self.latest)
    }
}
