//! The benchmarks' own server: `gpuledger serve` as a child process (so its CPU and memory are
//! its own) on a database the benchmark prepared, and a reading of a process's memory.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A benchmark's child processes, killed (and waited for) on drop, and then its temporary
/// directory, removed.
pub struct Children {
    pub kids: Vec<Child>,
    pub dir: PathBuf,
}

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.kids {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts the current executable's `serve` on `database_url` with the log key at `key_path`,
/// on a free loopback port; returns the child and its base URL once it is listening.
pub fn spawn_serve(database_url: &str, key_path: &Path) -> Result<(Child, String), String> {
    spawn_serve_with(database_url, key_path, &[])
}

/// [`spawn_serve`] with `extra` arguments.
pub fn spawn_serve_with(
    database_url: &str,
    key_path: &Path,
    extra: &[&str],
) -> Result<(Child, String), String> {
    let exe = std::env::current_exe().map_err(|e| format!("current executable: {e}"))?;
    let mut child = Command::new(exe)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            database_url,
            "--log-key",
        ])
        .arg(key_path)
        .args(extra)
        .env("GPULEDGER_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start the server: {e}"))?;
    let mut line = String::new();
    let read = std::io::BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line);
    match (read, line.trim().strip_prefix("listening on ")) {
        (Ok(_), Some(base)) => Ok((child, base.to_owned())),
        _ => {
            let _ = child.kill();
            let _ = child.wait();
            Err(format!("unexpected server output: {line:?}"))
        }
    }
}

/// kB (as `/proc` counts them) in MB of 1024 kB, to one decimal.
pub fn mb(kb: f64) -> f64 {
    super::round(kb / 1024.0, 1)
}

/// The peak resident set (`VmHWM`) of process `pid`, in MB to one decimal.
pub fn peak_rss_mb(pid: u32) -> Option<f64> {
    status_kb(pid, "VmHWM:").map(mb)
}

/// A `kB` field of `/proc/<pid>/status` (such as `VmHWM:`), in kB.
pub fn status_kb(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
