//! Key files on disk. Private keys are created with mode 0600 and refused when group or
//! others can read them; their contents are never logged or printed.

use ed25519_dalek::SigningKey;
use gpuledger_core::keys::{self, KeyError};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a key file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Format { path: PathBuf, source: KeyError },
    #[error("{path} is readable by group or others (mode {mode:o}); run `chmod 600 {path}`")]
    Permissions { path: PathBuf, mode: u32 },
    #[error("{0} already exists; refusing to overwrite a key")]
    Exists(PathBuf),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> KeyFileError + '_ {
    move |source| KeyFileError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Writes a new private key file with mode 0600 (never overwriting) and the public key next to
/// it as `<path>.pub`.
pub fn write_new(path: &Path, key: &SigningKey) -> Result<PathBuf, KeyFileError> {
    if path.exists() {
        return Err(KeyFileError::Exists(path.to_owned()));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).map_err(io(dir))?;
    }
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io(path))?;
    f.write_all(keys::encode_secret(key).as_bytes())
        .map_err(io(path))?;
    f.sync_all().map_err(io(path))?;
    let public = public_path(path);
    fs::write(
        &public,
        format!("{}\n", keys::encode_public(&key.verifying_key())),
    )
    .map_err(io(&public))?;
    Ok(public)
}

/// `<path>.pub`.
pub fn public_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".pub");
    PathBuf::from(s)
}

/// Reads a private key file, refusing one that group or others may read.
pub fn read(path: &Path) -> Result<SigningKey, KeyFileError> {
    let meta = fs::metadata(path).map_err(io(path))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyFileError::Permissions {
            path: path.to_owned(),
            mode,
        });
    }
    let text = fs::read_to_string(path).map_err(io(path))?;
    keys::decode_secret(&text).map_err(|source| KeyFileError::Format {
        path: path.to_owned(),
        source,
    })
}

/// A fresh key from the operating system's random source.
pub fn generate() -> SigningKey {
    SigningKey::generate(&mut rand_core::OsRng)
}

/// Reads the key at `path`, or creates it (0600) when absent. Returns the key and whether it
/// was created.
pub fn read_or_create(path: &Path) -> Result<(SigningKey, bool), KeyFileError> {
    if path.exists() {
        return Ok((read(path)?, false));
    }
    let key = generate();
    write_new(path, &key)?;
    Ok((key, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_keys_are_0600_and_loose_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("k/node.key");
        let (k, created) = read_or_create(&p).unwrap();
        assert!(created);
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(read(&p).unwrap().to_bytes(), k.to_bytes());
        let pubtext = fs::read_to_string(public_path(&p)).unwrap();
        assert_eq!(pubtext.trim(), keys::encode_public(&k.verifying_key()));
        assert!(matches!(write_new(&p, &k), Err(KeyFileError::Exists(_))));
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            read(&p),
            Err(KeyFileError::Permissions { mode: 0o644, .. })
        ));
    }
}
