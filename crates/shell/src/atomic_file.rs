//! Replacing a small file atomically and durably: a reader (or a crash) sees the old content or
//! the new one, never part of one, and the new one survives a power loss once this returns.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Writes `bytes` to `path`: a temporary file in the same directory (named with the process
/// id, so two processes writing into one directory keep apart), fsync, permissions `mode`
/// (set after creating, so a restrictive umask does not change them), rename over `path`,
/// fsync of the directory. On an error, `path` is unchanged.
pub fn write(path: &Path, bytes: &[u8], mode: u32) -> Result<(), (std::path::PathBuf, io::Error)> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let at = |p: &Path| {
        let p = p.to_owned();
        move |e| (p, e)
    };
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(at(&tmp))?;
    f.write_all(bytes).map_err(at(&tmp))?;
    f.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(at(&tmp))?;
    f.sync_all().map_err(at(&tmp))?;
    drop(f);
    fs::rename(&tmp, path).map_err(at(path))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(at(dir))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_with_its_mode_and_leaves_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        write(&p, b"one", 0o600).unwrap();
        write(&p, b"two", 0o644).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o644
        );
        let names: Vec<_> = fs::read_dir(d.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_the_temporary() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("absent/f");
        let (at, _) = write(&p, b"x", 0o644).unwrap_err();
        assert!(at.starts_with(d.path().join("absent")), "{at:?}");
    }
}
