//! Graceful shutdown: SIGTERM while agents are posting. The server stops accepting, answers
//! what is in flight after committing it, exits 0, and every acknowledged record is in the
//! log, which verifies.

mod common;

use common::*;
use gpuledger::core::record::Role;
use gpuledger::sample;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

both_backends!(
    sigterm_commits_in_flight_and_exits_cleanly,
    |db: &TestDb| {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("log.key");
        init_cli(&db.url, &key);
        // Register the node and its key directly in the database before the server starts.
        let ledger =
            gpuledger::store::Ledger::open(&db.url, gpuledger::keyfile::read(&key).unwrap())
                .unwrap();
        ensure_node(&ledger, "node-term");
        let node = sample::key("node-term");
        ledger
            .register_key(
                "node-term",
                Role::Node,
                &public(&node),
                Some(sample::node_scope("node-term")),
            )
            .unwrap();
        // t1's lease covers the node its records come from.
        parties_on(&ledger, &["t1"], &["node-term"]);
        drop(ledger);

        let (mut server, base) = spawn_serve(&db.url, &key, 0, &[]);

        let acked: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let client = s.spawn(|| {
                let h = Http::with_timeout(&base, Duration::from_secs(30));
                let mut seq = 1u64;
                let started = Instant::now();
                while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(30) {
                    let batch: Vec<_> = usage_run("node-term", &node, "t1", seq..seq + 200);
                    match h.try_post_records(&batch) {
                        Ok(r) if r.status == 200 => {
                            let v = r.json();
                            let mut a = acked.lock().unwrap();
                            for (i, o) in v["outcomes"].as_array().unwrap().iter().enumerate() {
                                assert_eq!(o["status"], "accepted", "{o}");
                                a.push((seq + i as u64, o["index"].as_u64().unwrap()));
                            }
                            seq += 200;
                        }
                        // Once the server stops accepting, connections are refused: that is the end.
                        _ => break,
                    }
                }
            });
            // Let some batches through, then ask the server to stop.
            let t = Instant::now();
            while acked.lock().unwrap().len() < 2_000 && t.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_millis(10));
            }
            let kill = Command::new("kill")
                .args(["-TERM", &server.id().to_string()])
                .status()
                .unwrap();
            assert!(kill.success());
            let status = server.wait().unwrap();
            stop.store(true, Ordering::Relaxed);
            client.join().unwrap();
            assert!(status.success(), "graceful shutdown exits 0, got {status}");
        });

        let acked = acked.into_inner().unwrap();
        assert!(acked.len() >= 2_000);
        let rows = verified_rows(&db.url);
        for (seq, index) in &acked {
            let row = &rows[*index as usize];
            assert_eq!(
                (row.signer.as_str(), row.seq as u64),
                ("node-term", *seq),
                "acknowledged seq {seq} at {index}"
            );
        }
    }
);
