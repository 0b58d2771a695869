//! The agent and the market signer as real processes: their files, children whose output is
//! watched, their spools and senders, and what they delivered to the log.

use super::{bin, Proc};
use gpuledger::store;
use rust_decimal::Decimal;
use std::path::{Path, PathBuf};

/// Runs `gpuledger agent --config CFG`, which must refuse to start (exit 2); its stderr.
pub fn agent_refused(cfg: &std::path::Path) -> String {
    let out = bin().args(["agent", "--config"]).arg(cfg).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    err
}

/// The folder of the nvidia-smi fixtures.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nvidia-smi")
}

/// An nvidia-smi fixture's text.
pub fn fixture(name: &str) -> String {
    std::fs::read_to_string(fixtures().join(name))
        .unwrap_or_else(|e| panic!("tests/fixtures/nvidia-smi/{name}: {e}"))
}

/// Entries of `signer` in the log at `url`, in log order: (seq, body JSON).
pub fn logged(url: &str, signer: &str) -> Vec<(u64, serde_json::Value)> {
    use gpuledger::store::read;
    let mut conn = store::connect(url).unwrap();
    let (size, _) = read::head(&mut conn).unwrap();
    let mut out = Vec::new();
    let mut start = 0;
    while start < size {
        let end = (start + 5_000).min(size);
        for r in read::entries_range(&mut conn, start, end).unwrap() {
            if r.signer == signer {
                let leaf: serde_json::Value = serde_json::from_slice(&r.leaf).unwrap();
                out.push((r.seq as u64, leaf["envelope"]["body"].clone()));
            }
        }
        start = end;
    }
    out
}

/// A child whose stdout lines and stderr are collected by threads; killed when dropped.
pub struct Watched {
    pub proc_: Proc,
    pub stdout: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    pub stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

/// Starts `cmd` (logging at `warn` unless `cmd` sets `GPULEDGER_LOG`) as a [`Watched`] child.
pub fn watched(mut cmd: std::process::Command) -> Watched {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    if !cmd.get_envs().any(|(k, _)| k == "GPULEDGER_LOG") {
        cmd.env("GPULEDGER_LOG", "warn");
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let (l, out) = (stdout.clone(), child.stdout.take().unwrap());
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            l.lock().unwrap().push(line);
        }
    });
    let (e, err) = (stderr.clone(), child.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let mut e = e.lock().unwrap();
            e.push_str(&line);
            e.push('\n');
        }
    });
    Watched {
        proc_: Proc(child),
        stdout,
        stderr,
    }
}

impl Watched {
    /// Waits until `done`, at most `limit` (then fails, showing stderr).
    pub fn wait_for(
        &self,
        what: &str,
        limit: std::time::Duration,
        done: impl Fn(&Watched) -> bool,
    ) {
        let t = std::time::Instant::now();
        while !done(self) {
            assert!(
                t.elapsed() < limit,
                "waited {limit:?} for {what}; stderr:\n{}",
                self.stderr.lock().unwrap()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// How many lines it printed.
    pub fn lines(&self) -> usize {
        self.stdout.lock().unwrap().len()
    }

    /// SIGKILL, then reap.
    pub fn kill(mut self) {
        self.proc_.0.kill().unwrap();
        self.proc_.0.wait().unwrap();
    }
}

impl Watched {
    /// Waits until it printed `n` lines (an agent prints one per spooled interval).
    pub fn wait_lines(&self, n: usize, limit: std::time::Duration) {
        self.wait_for(&format!("{n} lines"), limit, |w| w.lines() >= n);
    }
}

/// `gpuledger SUBCOMMAND --config CFG` (e.g. `agent`, `market`) as a [`Watched`] child.
pub fn watched_config(subcommand: &str, cfg: &Path) -> Watched {
    let mut cmd = bin();
    cmd.args([subcommand, "--config"]).arg(cfg);
    watched(cmd)
}

/// Writes, in `dir`: the sample key of `node` (`node.key`, unless there is one), `leases`
/// (`leases.toml`), and `agent.toml` for that node in `region`, measuring every second and
/// sending to `server` from its spool, followed by `rest` (its collector, limits and so on).
/// Returns the path of agent.toml.
pub fn write_agent_config(
    dir: &Path,
    node: &str,
    server: &str,
    region: &str,
    leases: &str,
    rest: &str,
) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let key = dir.join("node.key");
    if !key.exists() {
        gpuledger::keyfile::write_new(&key, &gpuledger::sample::key(node)).unwrap();
    }
    std::fs::write(dir.join("leases.toml"), leases).unwrap();
    let cfg = dir.join("agent.toml");
    let head = format!(
        "signer = \"{node}\"\nkey_file = \"node.key\"\nserver_url = \"{server}\"\n\
         interval_seconds = 1\nregion = \"{region}\"\nnode = \"{node}\"\n\
         lease_file = \"leases.toml\"\nspool_dir = \"spool\"\n"
    );
    std::fs::write(&cfg, head + rest).unwrap();
    cfg
}

/// The sender's settings for delivering `signer`'s spool to `server`, `max_batch` at a time.
pub fn sender_config(
    server: &str,
    signer: &str,
    max_batch: usize,
) -> gpuledger::agent::sender::SenderConfig {
    gpuledger::agent::sender::SenderConfig {
        server_url: server.into(),
        max_batch,
        max_backoff: std::time::Duration::from_secs(1),
        request_timeout: std::time::Duration::from_secs(5),
        signer: signer.into(),
        origin: gpuledger::sample::ORIGIN.into(),
    }
}

/// Asserts that the log at `url` holds seqs 1..=last of `signer`, each once; returns
/// [`logged`]'s rows.
pub fn assert_seqs_once(url: &str, signer: &str, last: u64) -> Vec<(u64, serde_json::Value)> {
    let rows = logged(url, signer);
    let seqs: Vec<u64> = rows.iter().map(|r| r.0).collect();
    let set: std::collections::BTreeSet<u64> = seqs.iter().copied().collect();
    assert_eq!(set.len(), seqs.len(), "a seq is logged twice: {seqs:?}");
    assert_eq!(
        set,
        (1..=last).collect::<std::collections::BTreeSet<_>>(),
        "every seq measured, once"
    );
    rows
}

/// A spool in `dir` with room for `capacity` records, holding `signer`'s energy records
/// 1..=n (record q: q kWh, ending 10 × q seconds after `t`), signed with its sample key.
pub fn spool_of_energy(
    dir: &Path,
    signer: &str,
    n: u64,
    capacity: u64,
    t: gpuledger::core::time::Timestamp,
) -> gpuledger::agent::spool::Spool {
    let key = gpuledger::sample::key(signer);
    let mut spool = gpuledger::agent::spool::Spool::open(dir, capacity, 4096).unwrap();
    let recs: Vec<_> = (1..=n)
        .map(|q| {
            let kwh = Decimal::from(q);
            gpuledger::sample::energy(signer, &key, q, None, kwh, t.plus(10 * q as i64))
        })
        .collect();
    spool.append(&recs, "test").unwrap();
    spool
}

/// Like [`spool_of_energy`], with energy a node can draw: record q is q × `unit` kWh (a test
/// node's 64 GPUs draw at most 0.9333… kWh in a record's 10 s, PROTOCOL §6.7 fleet).
pub fn spool_of_energy_in(
    dir: &Path,
    signer: &str,
    n: u64,
    capacity: u64,
    t: gpuledger::core::time::Timestamp,
    unit: Decimal,
) -> gpuledger::agent::spool::Spool {
    let key = gpuledger::sample::key(signer);
    let mut spool = gpuledger::agent::spool::Spool::open(dir, capacity, 4096).unwrap();
    let recs: Vec<_> = (1..=n)
        .map(|q| {
            let kwh = (Decimal::from(q) * unit).normalize();
            gpuledger::sample::energy(signer, &key, q, None, kwh, t.plus(10 * q as i64))
        })
        .collect();
    spool.append(&recs, "test").unwrap();
    spool
}
