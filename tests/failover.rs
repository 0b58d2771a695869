//! A PostgreSQL failover under `serve` (issue #24), with two private clusters streaming from
//! one to the other (`tests/common/cluster.rs`) and `serve` on a libpq multi-host URL
//! (`target_session_attrs=read-write`), so it follows the promotion by itself:
//!
//! - **asynchronous, the standby stalled** (its WAL receiver stopped with SIGSTOP, as a link
//!   between two sites stalls, then killed with what it had buffered): `serve` refuses to start on such a primary unless told
//!   `--allow-async-standbys`; told so, after the primary is killed (`-m immediate`) and the
//!   standby promoted, `serve` finds the promoted database behind its high-water mark and says
//!   `log_rewound`: no write, no checkpoint signed or served. `gpuledger recover` restores
//!   from the old primary's data every acknowledged record into the promoted standby, under
//!   the published root, and writes resume there.
//! - **synchronous** (`synchronous_standby_names = '*'`): nothing acknowledged is lost, no
//!   refusal, writes back within 5 s of the promotion; the old primary, revived as a primary
//!   and first in the URL, is never written to again (`log_rewound`).
//!
//! Needs the PostgreSQL server binaries and, as root, the `postgres` user; skipped loudly
//! elsewhere, mandatory under `GPULEDGER_REQUIRE_OUTAGE_TESTS=1` (`.ci/run`).

mod common;

use common::cluster::{skip, PrivatePostgres};
use common::*;
use gpuledger::sample;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const SIGNER: &str = "node-failover";
const TENANT: &str = "t1";
/// Longest time from the promotion to the first committed write (synchronous case).
const WRITES_BACK_WITHIN: Duration = Duration::from_secs(5);

/// Both clusters' URL, writable host first found.
fn multi_host(a: &PrivatePostgres, b: &PrivatePostgres) -> String {
    format!(
        "postgres://postgres@{},{}/postgres?target_session_attrs=read-write&connect_timeout=2",
        a.host(),
        b.host()
    )
}

/// The primary and a streaming standby of it, or `None` after skipping.
fn pair(conf: &str) -> Option<(PrivatePostgres, PrivatePostgres)> {
    let primary = match PrivatePostgres::start_with(conf) {
        Ok(p) => p,
        Err(why) => {
            skip("the failover test", &why);
            return None;
        }
    };
    match PrivatePostgres::standby_of(&primary) {
        Ok(s) => Some((primary, s)),
        Err(why) => {
            skip("the failover test", &why);
            None
        }
    }
}

/// Waits until the standby has replayed everything the primary wrote.
fn caught_up(primary: &PrivatePostgres, standby: &PrivatePostgres) {
    let target = primary.query("SELECT pg_current_wal_lsn()");
    let t = Instant::now();
    loop {
        let ok = standby.query(&format!(
            "SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn"
        ));
        if ok == "t" {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the standby did not catch up"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Posts `SIGNER`'s records `seqs` and returns their indexes.
fn post(h: &Http, seqs: std::ops::Range<u64>) -> Vec<u64> {
    let records = usage_run(SIGNER, &sample::key(SIGNER), TENANT, seqs);
    let v = h.post_records(&records);
    v["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            assert_eq!(o["status"], "accepted", "{o}");
            o["index"].as_u64().unwrap()
        })
        .collect()
}

fn wait_status(h: &Http, path: &str, status: u16, limit: Duration) -> Reply {
    let t = Instant::now();
    loop {
        let r = h.get(path, None);
        if r.status == status {
            return r;
        }
        assert!(
            t.elapsed() < limit,
            "{path} still {} after {limit:?}: {}",
            r.status,
            r.lossy()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The seqs of `SIGNER`'s records in the database at `url`.
fn logged_seqs(url: &str) -> std::collections::BTreeSet<u64> {
    logged(url, SIGNER).into_iter().map(|(s, _)| s).collect()
}

#[test]
fn an_asynchronous_standby_that_was_behind_is_never_signed_on_and_nothing_acknowledged_is_lost() {
    let Some((primary, standby)) = pair("") else {
        return;
    };
    let url = multi_host(&primary, &standby);
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("log.key");
    let admin = init_cli(&url, &key);

    // Only asynchronous standbys: serve refuses to start, saying why.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpuledger"))
        .args(["serve", "--listen", "127.0.0.1:0", "--database-url", &url])
        .arg("--log-key")
        .arg(&key)
        .env_remove("GPULEDGER_DATABASE_URL")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "serve started: {said}");
    assert!(said.contains("none is synchronous"), "{said}");

    let server = Server::start_with(&url, &key, dir.path(), 0, &["--allow-async-standbys"]);
    let h = server.http();
    h.register(&admin, SIGNER, "node", &sample::key(SIGNER));
    h.parties_on(&admin, &[TENANT], &[SIGNER]);
    let vk = h.get("/v1/log", None).ok_json(200)["verifier_key"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut acked = post(&h, 1..51);
    h.checkpoint_at(h.size(), &vk);
    caught_up(&primary, &standby);
    let on_standby = h.size();

    // The link stalls; the primary goes on acknowledging and publishing.
    standby.signal_wal_receiver("STOP");
    acked.extend(post(&h, 51..151));
    let published = h.size();
    h.checkpoint_at(published, &vk);
    std::thread::sleep(Duration::from_millis(300));
    primary.stop_immediate();
    // What the stalled receiver holds in its socket never reaches the standby's WAL.
    standby.signal_wal_receiver("KILL");
    standby.wait_accepting();
    standby.promote();

    // serve reaches the promoted standby (database_unavailable until then), which is behind
    // what it published: log_rewound.
    let t = Instant::now();
    let r = loop {
        let r = h.get("/readyz", None);
        if r.lossy().contains("log_rewound") || t.elapsed() > Duration::from_secs(30) {
            break r;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!(
        "failover (asynchronous): log_rewound {:?} after the promotion",
        t.elapsed()
    );
    let p = r.assert_problem(503, "log_rewound", "readyz after the failover");
    let detail = p["detail"].as_str().unwrap();
    assert!(detail.contains(&format!("size {published}")), "{detail}");
    let rec = usage_run(SIGNER, &sample::key(SIGNER), TENANT, 151..152);
    h.try_post_records(&rec).unwrap().assert_problem(
        503,
        "log_rewound",
        "a write after the failover",
    );
    for path in ["/checkpoint", "/v1/checkpoint"] {
        h.get(path, None).assert_problem(503, "log_rewound", path);
    }
    // Nothing was written or signed on the promoted database.
    let promoted: u64 = standby.query("SELECT size FROM log_head").parse().unwrap();
    assert!(
        promoted < published,
        "the standby had {promoted} of {published}"
    );
    assert!(promoted >= on_standby);
    let signed: u64 = standby
        .query("SELECT coalesce(max(size), 0) FROM checkpoints")
        .parse()
        .unwrap();
    assert!(signed <= promoted, "a checkpoint beyond the promoted log");
    drop(server);

    // Recovery (`gpuledger recover`): the old primary's data, started again on its own port
    // as a source only, restores what the promoted standby lacks, checked against the
    // published checkpoint; then the old primary is fenced (stopped for good) and serve
    // follows the URL to the promoted standby, which now holds every acknowledged record.
    primary.start_again().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpuledger"))
        .args([
            "recover",
            "--database-url",
            &standby.url(),
            "--from",
            &primary.url(),
        ])
        .arg("--log-key")
        .arg(&key)
        .env_remove("GPULEDGER_DATABASE_URL")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "recover: {said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains(&format!("restored {} entries", published - promoted)),
        "{said}"
    );
    primary.stop_immediate();
    let server = Server::start_with(&url, &key, dir.path(), 1, &["--allow-async-standbys"]);
    let h = server.http();
    wait_status(&h, "/readyz", 200, Duration::from_secs(20));
    let logged = logged_seqs(&standby.url());
    assert_eq!(logged.len(), 150, "every acknowledged record");
    assert_eq!(acked.len(), 150);
    post(&h, 151..161);
    // Signed only because it extends the high-water mark (the published checkpoint).
    h.checkpoint_at(h.size(), &vk);
}

#[test]
fn a_synchronous_standby_loses_nothing_and_the_old_primary_is_never_written_again() {
    let Some((primary, standby)) = pair("synchronous_standby_names = '*'\n") else {
        return;
    };
    let url = multi_host(&primary, &standby);
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("log.key");
    let admin = init_cli(&url, &key);
    let server = Server::start(&url, &key, dir.path(), 0);
    let h = server.http();
    h.register(&admin, SIGNER, "node", &sample::key(SIGNER));
    h.parties_on(&admin, &[TENANT], &[SIGNER]);

    // An agent-like client posts batches in order, retrying one until it is acknowledged.
    let stop = AtomicBool::new(false);
    let acked = Mutex::new(Vec::<(u64, Instant)>::new());
    let base = server.base.clone();
    let back_after = std::thread::scope(|s| {
        s.spawn(|| {
            let h = Http::with_timeout(&base, Duration::from_secs(30));
            let key = sample::key(SIGNER);
            let mut seq = 1;
            while !stop.load(Ordering::Relaxed) {
                let records = usage_run(SIGNER, &key, TENANT, seq..seq + 20);
                match h.try_post_records(&records) {
                    Ok(r) if r.status == 200 => {
                        let now = Instant::now();
                        let mut a = acked.lock().unwrap();
                        a.extend((seq..seq + 20).map(|q| (q, now)));
                        seq += 20;
                    }
                    _ => std::thread::sleep(Duration::from_millis(100)),
                }
            }
        });
        std::thread::sleep(Duration::from_secs(2));
        primary.stop_immediate();
        std::thread::sleep(Duration::from_secs(2));
        standby.promote();
        let promoted = Instant::now();
        // The promoted primary has no standby of its own yet: it must not wait for one (its
        // configuration, copied from the old primary, names '*'), as a cluster manager
        // would set it.
        standby.query("ALTER SYSTEM SET synchronous_standby_names = ''");
        standby.query("SELECT pg_reload_conf()");
        let t = Instant::now();
        let back = loop {
            if let Some(at) = acked
                .lock()
                .unwrap()
                .iter()
                .map(|a| a.1)
                .find(|at| *at > promoted)
            {
                break at.duration_since(promoted);
            }
            if t.elapsed() > Duration::from_secs(30) {
                stop.store(true, Ordering::Relaxed);
                panic!("no write succeeded within 30 s of the promotion");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::Relaxed);
        back
    });
    eprintln!("failover (synchronous): writes back {back_after:?} after the promotion");
    assert!(
        back_after <= WRITES_BACK_WITHIN,
        "writes back only {back_after:?} after the promotion"
    );
    // Readiness follows once the reads' connections are made again.
    wait_status(&h, "/readyz", 200, Duration::from_secs(10));
    let acked: std::collections::BTreeSet<u64> = acked
        .into_inner()
        .unwrap()
        .into_iter()
        .map(|a| a.0)
        .collect();
    let logged = logged_seqs(&standby.url());
    assert!(
        acked.is_subset(&logged),
        "acknowledged records missing after the failover: {:?}",
        acked.difference(&logged).take(5).collect::<Vec<_>>()
    );
    // What the promoted database now holds is published (and marked).
    let vk = h.get("/v1/log", None).ok_json(200)["verifier_key"]
        .as_str()
        .unwrap()
        .to_owned();
    h.checkpoint_at(h.size(), &vk);
    drop(server);

    // The old primary comes back as a primary (an automatic restart would do that) and is
    // first in the URL: serve reaches it, finds it behind, and writes nothing there.
    primary.start_again().unwrap();
    let before: u64 = primary.query("SELECT size FROM log_head").parse().unwrap();
    let server = Server::start(&url, &key, dir.path(), 1);
    let h = server.http();
    wait_status(&h, "/readyz", 503, Duration::from_secs(20)).assert_problem(
        503,
        "log_rewound",
        "readyz on the revived old primary",
    );
    let rec = usage_run(SIGNER, &sample::key(SIGNER), TENANT, 100_000..100_001);
    h.try_post_records(&rec).unwrap().assert_problem(
        503,
        "log_rewound",
        "a write to the revived old primary",
    );
    let after: u64 = primary.query("SELECT size FROM log_head").parse().unwrap();
    assert_eq!(before, after, "the revived old primary was written to");
}
