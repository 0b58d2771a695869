//! Outages under load, with real processes: a private PostgreSQL stopped with `-m immediate`
//! while an agent-like client posts, and a SQLite database whose filesystem fills up. During
//! the outage every write answers 503 (database) or 507 (disk) with `Retry-After` and a stable
//! problem type, `/readyz` says not ready, `/healthz` stays up; once the database or the space
//! is back, writes succeed again without restarting `serve`, readiness follows, checkpoints
//! resume, and every acknowledged record is in the log exactly once and the log verifies.
//!
//! The PostgreSQL test needs `initdb` and `pg_ctl` (Debian's PostgreSQL server package) and, as
//! root, the `postgres` user; the disk test needs to mount a tmpfs (root). Each is skipped
//! loudly when it cannot run, and fails instead under `GPULEDGER_REQUIRE_OUTAGE_TESTS=1`
//! (set by `.ci/run`).

mod common;

use common::*;
use gpuledger::sample;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Longest time from the database (or the space) being back to the first committed write.
const RESUME_WITHIN: Duration = Duration::from_secs(2);
/// Longest time for `/readyz` to follow the write path (the probe runs every second).
const READY_FOLLOWS_WITHIN: Duration = Duration::from_secs(6);

use common::cluster::{run, skip, PrivatePostgres};

// ---------------------------------------------------------------------------------------------
// The client: posts batches in order, retrying the same batch until it is acknowledged
// ---------------------------------------------------------------------------------------------

/// What the client saw.
#[derive(Default)]
struct Seen {
    /// (seq, index) of every acknowledged record.
    acked: Vec<(u64, u64)>,
    /// Outage answers: (status, problem type, Retry-After).
    outages: Vec<(u16, String, Option<String>)>,
    /// When each successful batch was answered.
    successes: Vec<Instant>,
    /// Anything else (a bare 500, a malformed answer): must stay empty.
    unexpected: Vec<String>,
}

/// Posts `signer`'s records in batches of `batch` until `stop`; an outage answer makes it
/// retry the same batch after 200 ms (faster than `Retry-After`, to measure recovery).
fn client(base: &str, signer: &str, batch: u64, stop: &AtomicBool, seen: &Mutex<Seen>) {
    let key = sample::key(signer);
    let h = Http::with_timeout(base, Duration::from_secs(30));
    let mut seq = 1u64;
    while !stop.load(Ordering::Relaxed) {
        let records = usage_run(signer, &key, "t1", seq..seq + batch);
        match h.try_post_records(&records) {
            Ok(r) if r.status == 200 => {
                let v = r.json();
                let mut s = seen.lock().unwrap();
                for (i, o) in v["outcomes"].as_array().unwrap().iter().enumerate() {
                    // A batch whose commit was answered with an outage may have committed:
                    // resent, its records are duplicates with their original index.
                    match (o["status"].as_str(), o["index"].as_u64()) {
                        (Some("accepted" | "duplicate"), Some(index)) => {
                            s.acked.push((seq + i as u64, index))
                        }
                        _ => s.unexpected.push(format!("outcome {o}")),
                    }
                }
                s.successes.push(Instant::now());
                seq += batch;
            }
            Ok(r) if matches!(r.status, 503 | 507) => {
                let p = r.json_or_null();
                seen.lock().unwrap().outages.push((
                    r.status,
                    p["type"].as_str().unwrap_or_default().to_owned(),
                    r.retry_after.clone(),
                ));
                std::thread::sleep(Duration::from_millis(200));
            }
            Ok(r) => {
                seen.lock()
                    .unwrap()
                    .unexpected
                    .push(format!("status {}: {}", r.status, r.lossy()));
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => {
                seen.lock()
                    .unwrap()
                    .unexpected
                    .push(format!("no answer: {e}"));
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// Tells the client to stop when dropped, so a failed assertion does not leave the scope
/// waiting for it forever.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Waits until `/readyz` answers `status`; returns how long it took, or panics after `limit`.
fn wait_ready(h: &Http, status: u16, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let r = h.get("/readyz", None);
        if r.status == status {
            if status == 503 {
                assert!(r.retry_after.is_some(), "not ready without Retry-After");
            }
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "/readyz still {} after {limit:?}: {}",
            r.status,
            r.lossy()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits for the first successful batch answered after `since`; returns how long after.
fn first_success_after(seen: &Mutex<Seen>, since: Instant, limit: Duration) -> Duration {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(t) = seen.lock().unwrap().successes.iter().find(|t| **t >= since) {
            return t.duration_since(since);
        }
        assert!(
            Instant::now() < deadline,
            "no write succeeded within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every acknowledged record is in the log once, at the index it was acknowledged with, and
/// nothing of the signer's is there that was not acknowledged... except a last batch that was
/// committed but whose answer was lost in the outage, which the resend saw as duplicates.
fn assert_acked_once(url: &str, signer: &str, seen: &Seen) {
    let logged = logged(url, signer);
    let seqs: Vec<u64> = logged.iter().map(|r| r.0).collect();
    let set: std::collections::BTreeSet<u64> = seqs.iter().copied().collect();
    assert_eq!(set.len(), seqs.len(), "a seq is logged twice");
    for (seq, _) in &seen.acked {
        assert!(
            set.contains(seq),
            "acknowledged seq {seq} is not in the log"
        );
    }
    let acked: std::collections::BTreeSet<u64> = seen.acked.iter().map(|a| a.0).collect();
    let max_acked = acked.iter().max().copied().unwrap_or(0);
    assert!(
        set.iter().all(|s| acked.contains(s) || *s > max_acked),
        "a record is logged that was never acknowledged, below the last acknowledged one"
    );
}

fn verify_log(url: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuledger"))
        .args(["verify-log", "--database-url", url])
        .env_remove("GPULEDGER_DATABASE_URL")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.starts_with("PASS"),
        "verify-log: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `gpuledger init` and `serve` on `url`, with node `signer` and tenant `t1` registered (t1's
/// lease covering the node), once ready; the directory holds the log key and the server's log.
fn serve_with_node(url: &str, signer: &str) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("log.key");
    let admin = init_cli(url, &key);
    let server = Server::start(url, &key, dir.path(), 0);
    let h = server.http();
    h.register(&admin, signer, "node", &sample::key(signer));
    h.parties_on(&admin, &["t1"], &[signer]);
    wait_ready(&h, 200, READY_FOLLOWS_WITHIN);
    (dir, server)
}

/// Every answer the client got was a success or an outage of this status and problem slug,
/// with `Retry-After`; and there was at least one outage answer.
fn assert_outages_were(seen: &Seen, status: u16, slug: &str) {
    assert!(
        seen.unexpected.is_empty(),
        "unexpected answers: {:?}",
        seen.unexpected
    );
    assert!(!seen.outages.is_empty(), "the client saw no outage answer");
    for (got, kind, retry_after) in &seen.outages {
        assert_eq!(*got, status, "an outage answer of the wrong status");
        assert_eq!(kind, &format!("urn:gpuledger:problem:{slug}"));
        assert!(retry_after.is_some(), "{status} without Retry-After");
    }
}

// ---------------------------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------------------------

#[test]
fn postgres_stopped_immediately_during_ingest_recovers_without_restart() {
    let pg = match PrivatePostgres::start() {
        Ok(pg) => pg,
        Err(why) => return skip("the PostgreSQL restart test", &why),
    };
    let url = pg.url();
    let signer = "node-pg-outage";
    let (_dir, server) = serve_with_node(&url, signer);
    let h = server.http();

    let stop = AtomicBool::new(false);
    let seen = Mutex::new(Seen::default());
    std::thread::scope(|s| {
        s.spawn(|| client(&server.base, signer, 50, &stop, &seen));
        let _stop = StopOnDrop(&stop);
        for outage in [Duration::from_secs(3), Duration::from_secs(8)] {
            std::thread::sleep(Duration::from_secs(1));
            let before = seen.lock().unwrap().acked.len();
            assert!(before > 0, "nothing acknowledged before the outage");
            pg.stop_immediate();
            wait_ready(&h, 503, READY_FOLLOWS_WITHIN);
            assert_eq!(
                h.get("/healthz", None).status,
                200,
                "/healthz during the outage"
            );
            std::thread::sleep(outage.saturating_sub(Duration::from_secs(1)));
            pg.start_again().unwrap();
            let back = Instant::now();
            let resumed = first_success_after(&seen, back, Duration::from_secs(30));
            eprintln!(
                "outage of {outage:?}: writes resumed {resumed:?} after the database was back"
            );
            assert!(
                resumed <= RESUME_WITHIN,
                "writes resumed only {resumed:?} after the database was back"
            );
            wait_ready(&h, 200, READY_FOLLOWS_WITHIN);
        }
        std::thread::sleep(Duration::from_millis(500));
    });
    let seen = seen.into_inner().unwrap();
    assert_outages_were(&seen, 503, "database_unavailable");
    // Checkpoints resumed: one covers everything acknowledged.
    let size = h.size();
    let log_info = {
        let mut c = gpuledger::store::connect(&url).unwrap();
        gpuledger::store::ledger::log_info(&mut c).unwrap()
    };
    h.checkpoint_at(size, &log_info.verifier_key);
    drop(server);
    assert_acked_once(&url, signer, &seen);
    verify_log(&url);
}

/// A tmpfs mounted for one test, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(bytes: u64) -> Result<SmallDisk, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        run(Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={bytes}"),
                "gpuledger-test",
            ])
            .arg(dir.path()))?;
        Ok(SmallDisk { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .output();
    }
}

/// Fills the filesystem of `dir` with a ballast file until a write fails for lack of space.
fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let path = dir.join("ballast");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    loop {
        if f.write_all(&chunk).is_err() {
            break;
        }
    }
    // Smaller writes take what the big ones left.
    while f.write_all(&[0u8; 512]).is_ok() {}
    let _ = f.sync_all();
    path
}

#[test]
fn sqlite_on_a_full_disk_answers_507_and_recovers_when_space_is_freed() {
    let disk = match SmallDisk::mount(16 * 1024 * 1024) {
        Ok(d) => d,
        Err(why) => return skip("the disk-full test", &why),
    };
    let url = format!("sqlite://{}", disk.path().join("ledger.db").display());
    let signer = "node-disk-full";
    let (_dir, server) = serve_with_node(&url, signer);
    let h = server.http();

    let stop = AtomicBool::new(false);
    let seen = Mutex::new(Seen::default());
    std::thread::scope(|s| {
        s.spawn(|| client(&server.base, signer, 50, &stop, &seen));
        let _stop = StopOnDrop(&stop);
        std::thread::sleep(Duration::from_secs(1));
        let ballast = fill(disk.path());
        // Writes fail once SQLite needs a page it cannot get: wait for the first refusal.
        let deadline = Instant::now() + Duration::from_secs(60);
        while seen.lock().unwrap().outages.is_empty() {
            assert!(Instant::now() < deadline, "no write failed on a full disk");
            std::thread::sleep(Duration::from_millis(50));
        }
        let r = h.get("/readyz", None);
        let ready = wait_ready(&h, 503, READY_FOLLOWS_WITHIN);
        eprintln!(
            "/readyz said not ready {ready:?} after the first refused write ({})",
            r.status
        );
        assert_eq!(
            h.get("/healthz", None).status,
            200,
            "/healthz on a full disk"
        );
        std::thread::sleep(Duration::from_secs(2));
        std::fs::remove_file(&ballast).unwrap();
        let freed = Instant::now();
        let resumed = first_success_after(&seen, freed, Duration::from_secs(30));
        eprintln!("writes resumed {resumed:?} after space was freed");
        assert!(
            resumed <= RESUME_WITHIN,
            "writes resumed only after {resumed:?}"
        );
        wait_ready(&h, 200, READY_FOLLOWS_WITHIN);
        std::thread::sleep(Duration::from_millis(500));
    });
    let seen = seen.into_inner().unwrap();
    assert_outages_were(&seen, 507, "disk_full");
    drop(server);
    assert_acked_once(&url, signer, &seen);
    verify_log(&url);
}
