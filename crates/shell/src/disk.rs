//! Free space of the filesystems gpuledger writes to, for the `*_filesystem_available_bytes`
//! gauges: a full disk stops a ledger (or an agent's spool) cold, so it is worth an alert
//! before it happens.

use std::path::Path;

/// Bytes available to an unprivileged writer on the filesystem holding `path`, or `None`
/// when it cannot be read (the path does not exist yet, or the call is not supported).
pub fn available_bytes(path: &Path) -> Option<u64> {
    let s = rustix::fs::statvfs(path).ok()?;
    Some(s.f_bavail.saturating_mul(s.f_frsize))
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_temp_filesystem() {
        let dir = std::env::temp_dir();
        assert!(super::available_bytes(&dir).is_some());
        assert_eq!(
            super::available_bytes(std::path::Path::new("/no/such/dir/here")),
            None
        );
    }
}
