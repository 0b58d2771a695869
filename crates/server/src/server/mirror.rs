//! `--mirror-dir DIR`: an off-site copy of the whole log, kept by `serve` as it checkpoints, for
//! `gpuledger recover --from DIR` to restore from when every database copy lost entries
//! (ops/runbooks/log-rewound.md). It is laid out as C2SP tlog-tiles serves the log:
//!
//! - `DIR/tile/<L>/<N>[.p/<W>]`: hash tiles; `DIR/tile/entries/<N>[.p/<W>]`: entry bundles;
//!   a full tile is written once and never changes; a partial one is replaced by the wider or
//!   full tile of a later checkpoint (and then deleted);
//! - `DIR/documents/invoices/<number>.json` and `DIR/documents/certificates/<id>.json`: the
//!   issued documents whose SHA-256 the log's `invoice_issued` and `certificate_issued`
//!   entries hold (the log holds only their hashes);
//! - `DIR/checkpoint`: the latest checkpoint whose tree the directory holds completely,
//!   written last, after every tile and document of it.
//!
//! The entries are tenants' records, so unlike the publish directory this one is private:
//! directories 0700, files 0600. Every file is written atomically (temporary file, fsync,
//! rename, directory fsync); a crash leaves the previous `checkpoint` describing what is there.
//! Copy the directory off the machine (rsync, a bucket sync): full tiles never change, so a
//! sync moves only what is new.

use super::publish::PublishError;
use gpuledger_core::checkpoint;
use gpuledger_core::tiles::{self, TilePath};
use gpuledger_store::reads::TileData;
use gpuledger_store::recover::{DocumentKind, EntrySource};
use gpuledger_store::{read, Ledger};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The latest checkpoint the directory holds completely.
pub const CHECKPOINT_FILE: &str = "checkpoint";
/// Where issued documents are kept.
pub const DOCUMENTS_DIR: &str = "documents";
/// Entries mirrored per round at most (whole level-0 tiles): a long history is back-filled over
/// several rounds, so one round never holds the checkpoint task for long.
pub const MAX_ENTRIES_PER_ROUND: u64 = 64 * 256;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PublishError + '_ {
    move |source| PublishError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Creates `dir` (and parents) with mode 0700 if missing.
fn private_dir(dir: &Path) -> Result<(), PublishError> {
    if !dir.is_dir() {
        fs::create_dir_all(dir).map_err(io(dir))?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io(dir))?;
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically, mode 0600, creating its directory.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), PublishError> {
    if let Some(parent) = path.parent() {
        private_dir(parent)?;
    }
    gpuledger_shell::atomic_file::write(path, bytes, 0o600)
        .map_err(|(path, source)| PublishError::Io { path, source })
}

/// The file of a document.
fn document_path(dir: &Path, kind: DocumentKind, name: &str) -> PathBuf {
    let sub = match kind {
        DocumentKind::Invoice => "invoices",
        DocumentKind::Certificate => "certificates",
    };
    dir.join(DOCUMENTS_DIR)
        .join(sub)
        .join(format!("{name}.json"))
}

/// Keeps the mirror directory up to date with the ledger's checkpoints.
#[derive(Debug)]
pub struct Mirror {
    dir: PathBuf,
    /// The tree size whose tiles, bundles and documents the directory holds.
    size: u64,
}

impl Mirror {
    /// Creates `dir` (0700) if needed and reads how far an earlier run got (its `checkpoint`).
    pub fn open(dir: &Path) -> Result<Mirror, PublishError> {
        private_dir(dir)?;
        let size = match fs::read_to_string(dir.join(CHECKPOINT_FILE)) {
            Ok(note) => checkpoint::unverified(&note).map_or(0, |c| c.size()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(io(&dir.join(CHECKPOINT_FILE))(e)),
        };
        Ok(Mirror {
            dir: dir.to_owned(),
            size,
        })
    }

    /// The directory mirrored to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes what the latest checkpoint adds (at most [`MAX_ENTRIES_PER_ROUND`] entries a
    /// round): the tiles and bundles it grew, the documents its entries issued, then its note
    /// as `checkpoint` once all of it is there. Returns the size the directory holds.
    pub fn mirror(&mut self, ledger: &Ledger) -> Result<u64, PublishError> {
        let Some((latest, note)) = ledger.reads().latest_checkpoint()? else {
            return Ok(self.size);
        };
        if latest <= self.size {
            // Nothing new (or a database behind the mirror: never shrink the copy).
            return Ok(self.size);
        }
        let full = u64::from(tiles::FULL_WIDTH);
        let to = latest.min((self.size / full) * full + MAX_ENTRIES_PER_ROUND);
        for tile in tiles::tiles_grown(self.size, to) {
            let bytes = match ledger.reads().tile(&tile)? {
                Some(TileData::Hashes(b)) => b,
                Some(TileData::Leaves(leaves)) => {
                    tiles::encode_bundle(leaves.iter().map(Vec::as_slice)).map_err(|e| {
                        PublishError::Contradicts(format!("entry bundle {}: {e}", tile.path()))
                    })?
                }
                None => {
                    return Err(PublishError::Contradicts(format!(
                        "tile {} is not within the latest checkpoint",
                        tile.path()
                    )))
                }
            };
            write_private(&self.dir.join(tile.path()), &bytes)?;
            self.drop_narrower(&tile)?;
        }
        let (invoices, certificates) = ledger.reads().run(|c| {
            Ok((
                read::invoice_documents(c, self.size, to)?,
                read::certificate_documents(c, self.size, to)?,
            ))
        })?;
        for (number, json) in invoices {
            write_private(
                &document_path(&self.dir, DocumentKind::Invoice, &number),
                json.as_bytes(),
            )?;
        }
        for (id, json) in certificates {
            write_private(
                &document_path(&self.dir, DocumentKind::Certificate, &id),
                json.as_bytes(),
            )?;
        }
        if to == latest {
            write_private(&self.dir.join(CHECKPOINT_FILE), note.as_bytes())?;
        }
        self.size = to;
        Ok(to)
    }

    /// Deletes the partial tiles of `tile`'s position narrower than it (C2SP: a partial tile
    /// may go once a wider one exists), and once it is full, their whole directory.
    fn drop_narrower(&self, tile: &TilePath) -> Result<(), PublishError> {
        let full_path = self.dir.join(tile_full_path(tile));
        let partials = PathBuf::from(format!("{}.p", full_path.display()));
        let Ok(list) = fs::read_dir(&partials) else {
            return Ok(());
        };
        for e in list {
            let e = e.map_err(io(&partials))?;
            let width: Option<u32> = e.file_name().to_str().and_then(|w| w.parse().ok());
            if width.is_some_and(|w| w < tile.width()) {
                fs::remove_file(e.path()).map_err(io(&e.path()))?;
            }
        }
        if tile.is_full() {
            // Everything left there is superseded, a temporary file of a write that a killed
            // server never finished included (which would keep the directory alive).
            fs::remove_dir_all(&partials).map_err(io(&partials))?;
        }
        Ok(())
    }
}

/// The path of the full tile at `tile`'s position.
fn tile_full_path(tile: &TilePath) -> String {
    let p = tile.path();
    match p.find(".p/") {
        Some(at) => p[..at].to_owned(),
        None => p,
    }
}

/// A mirror directory read back, for `gpuledger recover --from DIR`.
pub struct MirrorReader {
    dir: PathBuf,
}

impl MirrorReader {
    /// Reads the mirror at `dir` (which must hold a `checkpoint`).
    pub fn open(dir: &Path) -> Result<MirrorReader, String> {
        if !dir.join(CHECKPOINT_FILE).is_file() {
            return Err(format!(
                "{} is not a mirror directory (no {CHECKPOINT_FILE} in it)",
                dir.display()
            ));
        }
        Ok(MirrorReader {
            dir: dir.to_owned(),
        })
    }

    /// The bundle of entries at level-0 position `index` holding at least `width` entries:
    /// the full one, or the widest partial one.
    fn bundle(&self, index: u64, width: u32) -> Result<Vec<Vec<u8>>, String> {
        let full = TilePath::entries(index, tiles::FULL_WIDTH).ok_or("no such bundle")?;
        let full_path = self.dir.join(full.path());
        let bytes = match fs::read(&full_path) {
            Ok(b) => b,
            Err(_) => {
                let partials = PathBuf::from(format!("{}.p", full_path.display()));
                let widest = fs::read_dir(&partials)
                    .map_err(|e| format!("{}: {e}", partials.display()))?
                    .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                    .max()
                    .ok_or_else(|| format!("no entry bundle at {}", full_path.display()))?;
                fs::read(partials.join(widest.to_string()))
                    .map_err(|e| format!("{}: {e}", partials.display()))?
            }
        };
        let leaves: Vec<Vec<u8>> = tiles::decode_bundle(&bytes)
            .map_err(|e| format!("{}: {e}", full_path.display()))?
            .into_iter()
            .map(<[u8]>::to_vec)
            .collect();
        if leaves.len() < width as usize {
            return Err(format!(
                "the entry bundle at {} holds {} entries, not {width}",
                full_path.display(),
                leaves.len()
            ));
        }
        Ok(leaves)
    }
}

impl EntrySource for MirrorReader {
    fn checkpoint(&self) -> Result<String, String> {
        let path = self.dir.join(CHECKPOINT_FILE);
        fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
    }

    fn leaves(&self, start: u64, end: u64) -> Result<Vec<Vec<u8>>, String> {
        let full = u64::from(tiles::FULL_WIDTH);
        let mut out = Vec::with_capacity((end - start) as usize);
        let mut at = start;
        while at < end {
            let index = at / full;
            let upto = end.min((index + 1) * full);
            let bundle = self.bundle(index, (upto - index * full) as u32)?;
            let from = (at - index * full) as usize;
            out.extend(bundle[from..(upto - index * full) as usize].iter().cloned());
            at = upto;
        }
        Ok(out)
    }

    fn document(&self, kind: DocumentKind, name: &str) -> Result<Option<String>, String> {
        let path = document_path(&self.dir, kind, name);
        match fs::read_to_string(&path) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full tile takes the place of its partial ones, and of what a killed server left among
    /// them (a temporary file of a write it never finished), so no stale partial directory
    /// outlives it.
    #[test]
    fn a_full_tile_removes_its_partials_and_leftovers() {
        let dir = tempfile::tempdir().unwrap();
        let m = Mirror::open(dir.path()).unwrap();
        let partial = TilePath::entries(0, 3).unwrap();
        write_private(&dir.path().join(partial.path()), b"three").unwrap();
        let partials = dir.path().join("tile/entries/000.p");
        std::fs::write(partials.join(".5.4242.tmp"), b"half").unwrap();
        let wider = TilePath::entries(0, 5).unwrap();
        write_private(&dir.path().join(wider.path()), b"five").unwrap();
        m.drop_narrower(&wider).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(&partials)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [".5.4242.tmp", "5"],
            "a wider partial drops the narrower"
        );
        let full = TilePath::entries(0, tiles::FULL_WIDTH).unwrap();
        write_private(&dir.path().join(full.path()), b"full").unwrap();
        m.drop_narrower(&full).unwrap();
        assert!(!partials.exists(), "the partials' directory is gone");
        assert!(dir.path().join("tile/entries/000").is_file());
    }
}
