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

use crate::store::read::{self, CheckpointPage};
use crate::store::{Ledger, StoreError};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
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
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PublishError + '_ {
    move |source| PublishError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Writes `bytes` to `path` atomically: temporary file in the same directory, fsync, rename,
/// fsync of the directory. The file ends with mode 0644.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), PublishError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    // The process id keeps two servers publishing into one shared directory apart.
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(io(&tmp))?;
    f.write_all(bytes).map_err(io(&tmp))?;
    // Set after creating, so a restrictive umask (the systemd unit's 0077) does not hide it.
    f.set_permissions(fs::Permissions::from_mode(0o644))
        .map_err(io(&tmp))?;
    f.sync_all().map_err(io(&tmp))?;
    drop(f);
    fs::rename(&tmp, path).map_err(io(path))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir))?;
    Ok(())
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
        Ok(Publisher {
            dir: dir.to_owned(),
            last_kept,
            latest: None,
            latest_note: None,
        })
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
        let rows = ledger.with_reader(|c| {
            read::checkpoints_page(c, CheckpointPage::From(from), MAX_PUBLISH_PER_ROUND)
        })?;
        let kept = self.dir.join(CHECKPOINTS_DIR);
        for r in &rows {
            write_atomic(&kept.join(r.size.to_string()), r.note.as_bytes())?;
            self.last_kept = Some(r.size);
        }
        if let Some((size, note)) = ledger.latest_checkpoint()? {
            if self.latest_note.as_deref() != Some(note.as_str()) {
                write_atomic(&self.dir.join(CHECKPOINT_FILE), note.as_bytes())?;
                self.latest = Some(size);
                self.latest_note = Some(note);
            }
        }
        Ok(self.latest)
    }
}
