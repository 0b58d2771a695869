//! Never fork (issue #24): `serve` keeps the largest checkpoint it signed outside the database
//! (`<log key>.high-water`) and refuses to write or sign on a database that does not hold it.
//!
//! The failover is played with snapshots of real databases (`TestDb::copy`: `VACUUM INTO` on
//! SQLite, `CREATE DATABASE .. TEMPLATE` on PostgreSQL) and real `serve` processes killed
//! with SIGKILL: the snapshot is the standby that fell behind, or an old backup, or another
//! history signed with the same key.
//! - behind: `/readyz` 503 `log_rewound`, a write 503 `log_rewound` (nothing appended), no
//!   checkpoint served, `gpuledger_log_rewound 1`, the log line naming both sizes; the
//!   database that holds the published tree takes writes again;
//! - another history past the mark's size: refused the same way, naming both roots;
//! - a publish directory that holds a larger checkpoint than the high-water file raises it;
//!   the publisher never replaces a published checkpoint with a contradicting one.

mod common;

use common::http::{init, Http, Log, Server};
use common::{slot, TestDb};
use gpuledger::core::checkpoint;
use gpuledger::sample;
use rust_decimal::Decimal;
use std::path::Path;

const NODE: &str = "node-hw";
const TENANT: &str = "tenant-hw";
/// The node a signer added later runs, and the lease of [`TENANT`] that covers it.
const NODE2: &str = "node-hw2";
const LEASE2: &str = "lease-hw2";

fn post_usage(h: &Http, seqs: std::ops::Range<u64>, count: i64) {
    h.post_usage(NODE, TENANT, seqs, count);
}

/// Registers [`NODE2`] and its key, and [`LEASE2`]: 8 sample-model GPUs of it for [`TENANT`].
fn register_node2(h: &Http, admin: &str) {
    h.register(admin, NODE2, "node", &sample::key(NODE2));
    let lease = sample::lease_on(LEASE2, TENANT, &[NODE2], 8);
    h.post("/v1/leases", Some(admin), &lease.to_value())
        .ok_json(201);
}

/// One GPU for each of `seqs` on [`NODE2`], under [`LEASE2`]; every record accepted.
fn post_usage2(h: &Http, seqs: std::ops::Range<u64>) {
    let key = sample::key(NODE2);
    let batch: Vec<_> = seqs
        .map(|seq| sample::usage_under(NODE2, &key, seq, (TENANT, LEASE2), Decimal::ONE, slot(seq)))
        .collect();
    let r = h.post_records(&batch);
    for o in r["outcomes"].as_array().unwrap() {
        assert_eq!(o["status"], "accepted", "{r}");
    }
}

/// The verifier key of the log.
fn vkey(h: &Http) -> String {
    h.get("/v1/log", None).ok_json(200)["verifier_key"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Serves `db` with the log's key (and so its high-water file), plus `extra` arguments.
fn serve_on(log: &Log, db: &TestDb, n: u32, extra: &[&str]) -> (Server, Http) {
    let s = Server::start_with(&db.url, &log.key_path(), log.dir.path(), n, extra);
    let h = s.http();
    (s, h)
}

/// The size of the note in the high-water file beside the log key.
fn marked_size(log: &Log) -> u64 {
    let path = gpuledger::store::high_water::default_file(&log.key_path());
    let note = std::fs::read_to_string(&path).expect("the high-water file is written");
    checkpoint::unverified(&note).unwrap().size()
}

/// What a rewound server answers: every check the issue names.
fn assert_rewound(h: &Http, log: &Log, n: u32, wants: &[&str]) {
    // Found at start, or by the write probe (every second) after the mark was raised.
    let t = std::time::Instant::now();
    let r = loop {
        let r = h.get("/readyz", None);
        if r.status != 200 || t.elapsed().as_secs() > 15 {
            break r;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let p = r.assert_problem(503, "log_rewound", "readyz");
    let detail = p["detail"].as_str().unwrap().to_owned();
    for w in wants {
        assert!(detail.contains(w), "{w:?} not in {detail}");
    }
    // A write changes nothing.
    let before = h.size();
    let key = sample::key(NODE);
    let rec = sample::usage(NODE, &key, 900, TENANT, Decimal::ONE, slot(900));
    let r = h.try_post_records(&[rec]).unwrap();
    r.assert_problem(503, "log_rewound", "POST /v1/records");
    assert_eq!(h.size(), before, "nothing appended");
    // No checkpoint is served: the database's is behind what was published, or another's.
    for path in ["/checkpoint", "/v1/checkpoint"] {
        h.get(path, None).assert_problem(503, "log_rewound", path);
    }
    let metrics = h.get("/metrics", None).text();
    assert!(
        metrics.lines().any(|l| l == "gpuledger_log_rewound 1"),
        "{metrics}"
    );
    let said = std::fs::read_to_string(log.dir.path().join(format!("serve-{n}.log"))).unwrap();
    assert!(said.contains("log rewound"), "{said}");
}

both_backends!(
    a_database_behind_the_published_checkpoint_is_not_written_to,
    |db: &TestDb| {
        let log = init(db);
        let (srv, h) = serve_on(&log, db, 0, &[]);
        h.parties_on(&log.admin, &[TENANT], &[NODE]);
        h.register(&log.admin, NODE, "node", &sample::key(NODE));
        post_usage(&h, 1..4, 1);
        let vk = vkey(&h);
        let behind_size = h.size();
        h.checkpoint_at(behind_size, &vk);
        drop(srv);
        // The standby that stops receiving here.
        let standby = db.copy();
        let (srv, h) = serve_on(&log, db, 1, &[]);
        post_usage(&h, 4..9, 2);
        let published = h.size();
        h.checkpoint_at(published, &vk);
        // The mark is saved before the checkpoint's signer is answered; the periodic checkpoint
        // has no caller, so wait for the file too.
        let t = std::time::Instant::now();
        while marked_size(&log) != published {
            assert!(
                t.elapsed().as_secs() < 30,
                "the mark did not reach {published}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        drop(srv);

        // Failover to the standby that was behind.
        let (srv, h) = serve_on(&log, &standby, 2, &[]);
        assert_eq!(h.size(), behind_size);
        assert_rewound(
            &h,
            &log,
            2,
            &[
                &format!("size {published}"),
                &format!("holds only {behind_size} entries"),
            ],
        );
        drop(srv);
        // Reads still work there (`verify-log` would pass: it cannot know what was published).
        // The database that holds the published tree takes writes again, and the mark grows.
        let (_srv, h) = serve_on(&log, db, 3, &[]);
        let r = h.get("/readyz", None);
        assert_eq!(r.status, 200, "{}", r.lossy());
        post_usage(&h, 9..11, 1);
        h.checkpoint_at(published + 2, &vk);
    }
);

both_backends!(
    another_history_past_the_mark_is_refused_naming_both_roots,
    |db: &TestDb| {
        let log = init(db);
        let (srv, h) = serve_on(&log, db, 0, &[]);
        h.parties_on(&log.admin, &[TENANT], &[NODE]);
        h.register(&log.admin, NODE, "node", &sample::key(NODE));
        let vk = vkey(&h);
        let base = h.size();
        h.checkpoint_at(base, &vk);
        drop(srv);
        let other = db.copy();
        let (srv, h) = serve_on(&log, db, 1, &[]);
        post_usage(&h, 1..4, 1);
        let published = h.size();
        let note = h.checkpoint_at(published, &vk);
        drop(srv);
        let root = note.lines().nth(2).unwrap().to_owned();

        // The copy grows other entries past the published size, under a server that keeps its
        // mark elsewhere (or none: someone else's server with the same key).
        let elsewhere = log.dir.path().join("elsewhere.high-water");
        let (srv, h) = serve_on(
            &log,
            &other,
            2,
            &["--high-water-file", elsewhere.to_str().unwrap()],
        );
        post_usage(&h, 1..7, 3);
        assert!(h.size() > published);
        h.checkpoint_at(h.size(), &vk);
        drop(srv);

        // This server, on that database, refuses it: another root at the published size.
        let (_srv, h) = serve_on(&log, &other, 3, &[]);
        assert_rewound(
            &h,
            &log,
            3,
            &[&format!("size {published} with root {root}")],
        );
    }
);

/// The note `checkpoint` in `dir`.
fn published_at(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("checkpoint")).unwrap()
}

#[test]
fn the_publish_directory_raises_the_mark_and_is_never_contradicted() {
    let db = common::sqlite();
    let log = init(&db);
    let publish = log.dir.path().join("public");
    let pd = publish.to_str().unwrap();
    let (srv, h) = serve_on(&log, &db, 0, &["--publish-dir", pd]);
    h.parties_on(&log.admin, &[TENANT], &[NODE]);
    h.register(&log.admin, NODE, "node", &sample::key(NODE));
    let vk = vkey(&h);
    let behind_size = h.size();
    h.checkpoint_at(behind_size, &vk);
    drop(srv);
    let standby = db.copy();
    let (srv, h) = serve_on(&log, &db, 1, &["--publish-dir", pd]);
    post_usage(&h, 1..5, 1);
    let published = h.size();
    h.checkpoint_at(published, &vk);
    let t = std::time::Instant::now();
    while checkpoint::unverified(&published_at(&publish)).map(|c| c.size()) != Some(published) {
        assert!(t.elapsed().as_secs() < 30, "not published");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    drop(srv);
    let kept = published_at(&publish);

    // The high-water file is lost (a new machine, the key restored from its backup): the
    // publish directory still knows what was published.
    std::fs::remove_file(gpuledger::store::high_water::default_file(&log.key_path())).unwrap();
    let (srv, h) = serve_on(&log, &standby, 2, &["--publish-dir", pd]);
    assert_rewound(
        &h,
        &log,
        2,
        &[&format!("size {published}"), "publish directory"],
    );
    drop(srv);
    assert_eq!(
        published_at(&publish),
        kept,
        "the published checkpoint stays"
    );
    for e in std::fs::read_dir(publish.join("checkpoints")).unwrap() {
        let e = e.unwrap();
        let size: u64 = e.file_name().to_str().unwrap().parse().unwrap();
        assert!(size <= published);
    }
}

/// Runs `gpuledger recover` into `target` from `from` with the log's key (and so its
/// high-water file); returns the exit code and what it printed.
fn recover(log: &Log, target: &TestDb, from: &TestDb, extra: &[&str]) -> (Option<i32>, String) {
    recover_from(log, target, &from.url, extra)
}

/// [`recover`] from `from`, a database URL or a mirror directory.
fn recover_from(log: &Log, target: &TestDb, from: &str, extra: &[&str]) -> (Option<i32>, String) {
    let out = common::bin()
        .args(["recover", "--database-url", &target.url, "--from", from])
        .arg("--log-key")
        .arg(log.key_path())
        .args(extra)
        .env_remove("GPULEDGER_DATABASE_URL")
        .output()
        .unwrap();
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The size of the log in `db`.
fn size_of(db: &TestDb) -> u64 {
    let mut c = gpuledger::store::connect(&db.url).unwrap();
    gpuledger::store::read::head(&mut c).unwrap().0
}

both_backends!(
    recover_restores_what_a_promoted_copy_lost_and_nothing_else,
    |db: &TestDb| {
        let log = init(db);
        let (srv, h) = serve_on(&log, db, 0, &[]);
        h.parties_on(&log.admin, &[TENANT], &[NODE]);
        h.register(&log.admin, NODE, "node", &sample::key(NODE));
        post_usage(&h, 1..4, 1);
        let old_token = h.token(
            &log.admin,
            serde_json::json!({"role": "tenant", "tenant": TENANT, "label": "before"}),
        );
        let vk = vkey(&h);
        let behind = h.size();
        h.checkpoint_at(behind, &vk);
        drop(srv);
        // The standby stops receiving here; `fork` will be another history from the same point.
        let standby = db.copy();
        let fork = db.copy();
        let behind_too = db.copy();
        let (srv, h) = serve_on(&log, db, 1, &[]);
        // What only the old primary then gets: records, a new signer, a revoked token and a
        // new one, a checkpoint published.
        post_usage(&h, 4..9, 2);
        // Conflict evidence: another record under a (signer, seq) already logged.
        let other = sample::usage(
            NODE,
            &sample::key(NODE),
            4,
            TENANT,
            Decimal::from(3),
            common::slot(4),
        );
        let r = h.post_records(&[other]);
        assert_eq!(r["outcomes"][0]["reason"], "conflict", "{r}");
        register_node2(&h, &log.admin);
        post_usage2(&h, 1..3);
        let old_id = old_token["info"]["id"].as_str().unwrap().to_owned();
        let old_secret = old_token["token"].as_str().unwrap().to_owned();
        assert_eq!(
            h.delete(&format!("/v1/tokens/{old_id}"), Some(&log.admin))
                .status,
            204
        );
        let new_secret = h.secret(
            &log.admin,
            serde_json::json!({"role": "tenant", "tenant": TENANT, "label": "after"}),
        );
        let published = h.size();
        h.checkpoint_at(published, &vk);
        let t = std::time::Instant::now();
        while marked_size(&log) != published {
            assert!(
                t.elapsed().as_secs() < 30,
                "the mark did not reach {published}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        // Acknowledged after the last checkpoint: restored too.
        post_usage(&h, 9..11, 1);
        let acknowledged = h.size();
        drop(srv);

        // The fork grows other entries past the published size under another server's mark.
        let elsewhere = log.dir.path().join("elsewhere.high-water");
        let (srv, h) = serve_on(
            &log,
            &fork,
            2,
            &["--high-water-file", elsewhere.to_str().unwrap()],
        );
        // Ten records: as many entries past `behind` as the published log has (5 records,
        // node-hw2's registration, key and lease, 2 of its records).
        post_usage(&h, 4..14, 3);
        assert_eq!(h.size(), published);
        h.checkpoint_at(h.size(), &vk);
        drop(srv);

        // Serve on the promoted standby: rewound, and it stays running through the recovery.
        let (_srv, h) = serve_on(&log, &standby, 3, &[]);
        assert_rewound(&h, &log, 3, &[&format!("size {published}")]);

        // Refused, nothing written: a source that is another history, a source that is behind.
        let (code, said) = recover(&log, &standby, &fork, &[]);
        assert_eq!(code, Some(1), "{said}");
        assert!(said.contains("another history"), "{said}");
        let (code, said) = recover(&log, &standby, &behind_too, &[]);
        assert_eq!(code, Some(1), "{said}");
        assert!(
            said.contains("fewer than the published checkpoint"),
            "{said}"
        );
        // A source whose stored leaf was changed (its stored tree hashes left as they were):
        // the leaves no longer make the published root.
        let tampered = db.copy();
        {
            let mut c = gpuledger::store::connect(&tampered.url).unwrap();
            // One more byte (a space after the JSON) in one leaf.
            let sql = format!(
                "UPDATE entries SET leaf = leaf || {} WHERE idx = {}",
                if tampered.backend == "sqlite" {
                    "X'20'"
                } else {
                    "'\\x20'::bytea"
                },
                behind + 1
            );
            let n = diesel::RunQueryDsl::execute(diesel::sql_query(sql), &mut c).unwrap();
            assert_eq!(n, 1);
        }
        let (code, said) = recover(&log, &standby, &tampered, &[]);
        assert_eq!(code, Some(1), "{said}");
        assert!(
            said.contains("does not verify") || said.contains("not the published"),
            "{said}"
        );
        assert_eq!(
            size_of(&standby),
            behind,
            "nothing written by a refused recovery"
        );
        // A dry run checks everything and writes nothing.
        let (code, said) = recover(&log, &standby, db, &["--dry-run"]);
        assert_eq!(code, Some(0), "{said}");
        assert!(
            said.contains(&format!("would restore {} entries", acknowledged - behind)),
            "{said}"
        );
        assert_eq!(size_of(&standby), behind, "a dry run writes nothing");

        // The real one: every acknowledged entry at its index, the published root, verify-log
        // passes with the published key, and the running serve resumes writes by itself.
        let (code, said) = recover(&log, &standby, db, &[]);
        assert_eq!(code, Some(0), "{said}");
        assert!(
            said.contains(&format!("restored {} entries", acknowledged - behind)),
            "{said}"
        );
        assert_eq!(size_of(&standby), acknowledged);
        // Run again: nothing left to restore.
        let (code, said) = recover(&log, &standby, db, &[]);
        assert_eq!(code, Some(0), "{said}");
        assert!(said.contains("nothing to restore"), "{said}");
        // The conflict evidence came along, once, and a second run copied it no more.
        let conflicts = |d: &TestDb| {
            let mut c = gpuledger::store::connect(&d.url).unwrap();
            gpuledger::store::read::conflict_count(&mut c).unwrap()
        };
        assert_eq!(conflicts(&standby), conflicts(db));
        assert_eq!(conflicts(db), 1);
        assert_eq!(
            common::verified_rows(&standby.url)
                .iter()
                .map(|r| r.leaf.clone())
                .collect::<Vec<_>>(),
            common::verified_rows(&db.url)
                .iter()
                .map(|r| r.leaf.clone())
                .collect::<Vec<_>>(),
            "the same entries at the same indices"
        );
        let out = common::bin()
            .args([
                "verify-log",
                "--database-url",
                &standby.url,
                "--log-key",
                &vk,
            ])
            .output()
            .unwrap();
        let v = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && v.starts_with(&format!("PASS: {acknowledged} entries")),
            "{v}"
        );
        let t = std::time::Instant::now();
        while h.get("/readyz", None).status != 200 {
            assert!(
                t.elapsed().as_secs() < 15,
                "serve did not resume after recovery"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        // The token revoked on the old primary stays revoked; the one made there works.
        h.get("/v1/invoices", Some(&old_secret))
            .assert_problem(401, "token_revoked", "old token");
        h.get("/v1/invoices", Some(&new_secret)).ok_json(200);
        // The restored signer's seqs go on; new writes extend the published checkpoint.
        post_usage2(&h, 3..4);
        post_usage(&h, 11..12, 1);
        h.checkpoint_at(acknowledged + 2, &vk);
    }
);

both_backends!(
    a_mirror_directory_restores_the_log_when_no_database_holds_it,
    |db: &TestDb| {
        use std::os::unix::fs::PermissionsExt;
        let log = init(db);
        let mirror = log.dir.path().join("mirror");
        let md = mirror.to_str().unwrap();
        let (srv, h) = serve_on(&log, db, 0, &["--mirror-dir", md]);
        h.parties_on(&log.admin, &[TENANT], &[NODE]);
        h.register(&log.admin, NODE, "node", &sample::key(NODE));
        post_usage(&h, 1..4, 1);
        let vk = vkey(&h);
        let behind = h.size();
        h.checkpoint_at(behind, &vk);
        drop(srv);
        let standby = db.copy();
        let (srv, h) = serve_on(&log, db, 1, &["--mirror-dir", md]);
        // Past two full tiles, a new signer, and a certificate (whose document the log holds
        // only by its hash).
        post_usage(&h, 4..300, 1);
        post_usage(&h, 300..600, 1);
        register_node2(&h, &log.admin);
        post_usage2(&h, 1..3);
        let from = common::slot(0).plus(-3_600).to_string();
        let to = common::slot(0).plus(86_400).to_string();
        let cert = h
            .post(
                "/v1/certificates",
                Some(&log.admin),
                &serde_json::json!({"tenant": TENANT, "from": from, "to": to}),
            )
            .ok_json(201);
        let cert_id = cert["id"].as_str().unwrap().to_owned();
        let published = h.size();
        h.checkpoint_at(published, &vk);
        let t = std::time::Instant::now();
        let mirrored = |m: &Path| {
            std::fs::read_to_string(m.join("checkpoint"))
                .ok()
                .and_then(|n| checkpoint::unverified(&n).map(|c| c.size()))
        };
        while mirrored(&mirror) != Some(published) {
            assert!(t.elapsed().as_secs() < 30, "not mirrored up to {published}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        drop(srv);

        // Private, full tiles kept, the partial ones they replaced gone.
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&mirror), 0o700);
        assert_eq!(mode(&mirror.join("tile/entries/000")), 0o600);
        assert!(mirror.join("tile/entries/001").is_file());
        assert!(
            !mirror.join("tile/entries/000.p").exists(),
            "superseded partials are deleted"
        );
        let doc = mirror.join(format!("documents/certificates/{cert_id}.json"));
        assert!(doc.is_file());

        // A document changed in the copy: refused, nothing written.
        let kept = std::fs::read(&doc).unwrap();
        std::fs::write(
            &doc,
            String::from_utf8_lossy(&kept).replace(TENANT, "tenant-xx"),
        )
        .unwrap();
        let (code, said) = recover_from(&log, &standby, md, &[]);
        assert_eq!(code, Some(1), "{said}");
        assert!(said.contains("is not the one entry"), "{said}");
        std::fs::write(&doc, &kept).unwrap();
        // An entry changed in a bundle: refused.
        let bundle = mirror.join("tile/entries/001");
        let good = std::fs::read(&bundle).unwrap();
        let mut bad = good.clone();
        let at = bad.len() / 2;
        bad[at] ^= 1;
        std::fs::write(&bundle, &bad).unwrap();
        let (code, said) = recover_from(&log, &standby, md, &[]);
        assert_eq!(code, Some(1), "{said}");
        std::fs::write(&bundle, &good).unwrap();
        assert_eq!(
            size_of(&standby),
            behind,
            "nothing written by a refused recovery"
        );

        // Restored from the mirror alone: the same entries at the same indices, the
        // certificate, the new signer's key, and the log goes on from there.
        let (code, said) = recover_from(&log, &standby, md, &[]);
        assert_eq!(code, Some(0), "{said}");
        assert!(
            said.contains(&format!("restored {} entries", published - behind)),
            "{said}"
        );
        assert_eq!(
            common::verified_rows(&standby.url)
                .iter()
                .map(|r| r.leaf.clone())
                .collect::<Vec<_>>(),
            common::verified_rows(&db.url)[..published as usize]
                .iter()
                .map(|r| r.leaf.clone())
                .collect::<Vec<_>>(),
        );
        let (_srv, h) = serve_on(&log, &standby, 2, &["--mirror-dir", md]);
        let r = h.get("/readyz", None);
        assert_eq!(r.status, 200, "{}", r.lossy());
        let got = h
            .get(&format!("/v1/certificates/{cert_id}"), Some(&log.admin))
            .ok_json(200);
        assert_eq!(got["id"], cert["id"]);
        post_usage2(&h, 3..4);
        post_usage(&h, 600..601, 1);
        h.checkpoint_at(published + 2, &vk);
    }
);
