//! The benchmarks' own server: `gpuledger serve` as a child process (so its CPU and memory are
//! its own) on a database the benchmark prepared, and a reading of a process's memory.

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Starts the current executable's `serve` on `database_url` with the log key at `key_path`,
/// on a free loopback port; returns the child and its base URL once it is listening.
pub fn spawn_serve(database_url: &str, key_path: &Path) -> Result<(Child, String), String> {
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

/// A `kB` field of `/proc/<pid>/status` (such as `VmHWM:`), in kB.
pub fn status_kb(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
