//! Real processes: a child appends in a loop and prints every acknowledged index; it is killed
//! with SIGKILL at random moments, many times, and after each restart the log verifies and
//! every acknowledged record is present exactly once. And two processes appending to one
//! database at once produce one linear log.
//!
//! The child is this test binary itself, re-run with `--exact child_appender --ignored`.

mod common;

use common::*;
use gpuledger::core::record::Role;
use gpuledger::core::time::Timestamp;
use gpuledger::sample;
use gpuledger::store::Ledger;
use rust_decimal::Decimal;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The child: appends batches for `GPULEDGER_CHILD_SIGNER` from `GPULEDGER_CHILD_FROM` on,
/// printing `ACK <seq> <index>` after each batch returns, until killed or `..._UNTIL` is reached.
#[test]
#[ignore = "run by the process tests as a child"]
fn child_appender() {
    let url = std::env::var("GPULEDGER_CHILD_URL").expect("child env");
    let signer = std::env::var("GPULEDGER_CHILD_SIGNER").unwrap();
    let mut seq: u64 = std::env::var("GPULEDGER_CHILD_FROM")
        .unwrap()
        .parse()
        .unwrap();
    let until: u64 = std::env::var("GPULEDGER_CHILD_UNTIL")
        .unwrap()
        .parse()
        .unwrap();
    // Records are a pure function of seq, so a record resent after a restart is the same bytes.
    let base = Timestamp::from_unix(
        std::env::var("GPULEDGER_CHILD_BASE")
            .unwrap()
            .parse()
            .unwrap(),
    )
    .unwrap();
    let key = sample::key(&signer);
    let ledger = Ledger::open(&url, log_key()).unwrap();
    let mut out = std::io::stdout().lock();
    let mut n = 1u64;
    while seq <= until {
        n = n
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let len = 1 + (n >> 33) % 64;
        let batch: Vec<_> = (seq..(seq + len).min(until + 1))
            .map(|s| {
                sample::usage(
                    &signer,
                    &key,
                    s,
                    "t1",
                    Decimal::from(1 + s % 8),
                    base.plus(10 * s as i64),
                )
            })
            .collect();
        let outs = ledger.append(batch).unwrap();
        for (i, o) in outs.iter().enumerate() {
            let index = o.index().unwrap_or_else(|| panic!("not accepted: {o:?}"));
            writeln!(out, "ACK {} {index}", seq + i as u64).unwrap();
        }
        out.flush().unwrap();
        seq += outs.len() as u64;
    }
    writeln!(out, "DONE").unwrap();
}

fn spawn_child(url: &str, signer: &str, from: u64, until: u64) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_appender",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("GPULEDGER_CHILD_URL", url)
        .env("GPULEDGER_CHILD_SIGNER", signer)
        .env("GPULEDGER_CHILD_FROM", from.to_string())
        .env("GPULEDGER_CHILD_UNTIL", until.to_string())
        .env("GPULEDGER_CHILD_BASE", base_day().unix().to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Collects `ACK seq index` lines from a child's stdout on a thread.
/// Acknowledged (seq, index) pairs, filled by a reader thread.
type Acks = Arc<Mutex<Vec<(u64, u64)>>>;

fn collect(child: &mut std::process::Child) -> (Acks, std::thread::JoinHandle<bool>) {
    let acks = Arc::new(Mutex::new(Vec::new()));
    let a = acks.clone();
    let stdout = child.stdout.take().unwrap();
    let h = std::thread::spawn(move || {
        let mut done = false;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // libtest may print "test child_appender ... " before the first line.
            if let Some(rest) = line.find("ACK ").map(|at| &line[at + 4..]) {
                let (s, i) = rest.split_once(' ').unwrap();
                a.lock()
                    .unwrap()
                    .push((s.parse().unwrap(), i.parse().unwrap()));
            } else if line.contains("DONE") {
                done = true;
            }
        }
        done
    });
    (acks, h)
}

/// Every acknowledged (seq → index) of `signer` is in the log once, at that index.
fn assert_acks_present(db: &TestDb, signer: &str, acks: &HashMap<u64, u64>) {
    let rows = verified_rows(&db.url);
    let mut stored: HashMap<u64, Vec<u64>> = HashMap::new();
    for r in rows.iter().filter(|r| r.signer == signer) {
        stored.entry(r.seq as u64).or_default().push(r.idx as u64);
    }
    for (seq, index) in acks {
        assert_eq!(
            stored.get(seq),
            Some(&vec![*index]),
            "acknowledged seq {seq} of {signer}"
        );
    }
}

both_backends!(sigkill_at_random_moments_loses_nothing, |db: &TestDb| {
    let ledger = open(db);
    signer(&ledger, "node-crash", Role::Node);
    // t1's sample lease covers 8 GPUs of the node, the most a record of the child bills.
    parties_on(&ledger, &["t1"], &["node-crash"]);
    drop(ledger);
    let mut rng = Rng::from_clock("crash test");
    let mut acked: HashMap<u64, u64> = HashMap::new();
    let kills = 12;
    for round in 0..kills {
        // Restart a little before the last acknowledged seq, so some records are resent.
        let from = acked.keys().max().map_or(1, |m| m.saturating_sub(5).max(1));
        let mut child = spawn_child(&db.url, "node-crash", from, 200_000);
        let (acks, reader) = collect(&mut child);
        let wait = Duration::from_millis(150 + rng.below(400));
        let started = Instant::now();
        // Wait for the first acknowledgement (process start-up), then a random time more.
        while acks.lock().unwrap().is_empty() && started.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(wait);
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        reader.join().unwrap();
        let got = acks.lock().unwrap().clone();
        assert!(
            !got.is_empty(),
            "round {round}: the child acknowledged nothing"
        );
        for (seq, index) in got {
            if let Some(prev) = acked.insert(seq, index) {
                assert_eq!(prev, index, "seq {seq} acknowledged at two indexes");
            }
        }
        assert_acks_present(db, "node-crash", &acked);
    }
    eprintln!(
        "{kills} SIGKILLs, {} acknowledged records, all present once",
        acked.len()
    );
});

both_backends!(two_processes_append_one_linear_log, |db: &TestDb| {
    let ledger = open(db);
    signer(&ledger, "node-a", Role::Node);
    signer(&ledger, "node-b", Role::Node);
    // One lease of t1 covering 8 GPUs of each node, the most a record of a child bills.
    parties_on(&ledger, &["t1"], &["node-a", "node-b"]);
    drop(ledger);
    let per = 3_000;
    let mut a = spawn_child(&db.url, "node-a", 1, per);
    let mut b = spawn_child(&db.url, "node-b", 1, per);
    let (acks_a, ra) = collect(&mut a);
    let (acks_b, rb) = collect(&mut b);
    assert!(a.wait().unwrap().success() && b.wait().unwrap().success());
    assert!(
        ra.join().unwrap() && rb.join().unwrap(),
        "both children finished"
    );
    let acks_a: HashMap<u64, u64> = acks_a.lock().unwrap().iter().copied().collect();
    let acks_b: HashMap<u64, u64> = acks_b.lock().unwrap().iter().copied().collect();
    assert_eq!((acks_a.len(), acks_b.len()), (per as usize, per as usize));
    assert_acks_present(db, "node-a", &acks_a);
    assert_acks_present(db, "node-b", &acks_b);
    // One linear log: every index used once, none skipped.
    let mut all: Vec<u64> = acks_a.values().chain(acks_b.values()).copied().collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 2 * per as usize);
    // After the policy entry, two nodes and their keys, tenant t1 and its lease.
    assert_eq!(all, (7..7 + 2 * per).collect::<Vec<_>>());
    // The two processes really interleaved.
    let first_b = *acks_b.values().min().unwrap();
    let last_a = *acks_a.values().max().unwrap();
    assert!(
        first_b < last_a,
        "the processes ran one after the other, not at once"
    );
});
