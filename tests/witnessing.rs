//! The log side of C2SP tlog-witness, end to end: `gpuledger serve` with `[[witnesses]]`
//! sends its checkpoints to a real witness (`gpuledger::witness`, served in this process),
//! stores the cosignatures and serves them with its checkpoints; a split view (a copy of the
//! database appending other entries with the same key) is refused by the witness and by
//! `gpuledger verify --witness .. --quorum 1`; with `witness_quorum` issuance waits for a
//! cosigned checkpoint, or answers 503 `witnesses_behind` and writes nothing; a log that lost
//! its witness state, or a witness that lost its own, resyncs through a 409.
//!
//! The split view and the store tests run on both backends (the copy is `VACUUM INTO` on
//! SQLite, `CREATE DATABASE .. TEMPLATE` on PostgreSQL); the quorum and resync tests on SQLite
//! (the witness protocol does not depend on the backend).

mod common;

use common::http::Http;
use common::{bin, setup, slot, spawn_serve, Proc, Setup, TestDb};
use gpuledger::core::checkpoint;
use gpuledger::core::cosignature::{valid_cosignatures, WitnessKey};
use gpuledger::core::record::Role;
use gpuledger::sample;
use gpuledger::server::witnessing::LocalWitness;
use gpuledger::store::{self, access};
use rust_decimal::Decimal;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const NODE: &str = "node-w1";
const TENANT: &str = "tenant-a";

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let t = Instant::now();
    while !ok() {
        assert!(t.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The tests' log verifier key.
fn log_vkey() -> String {
    checkpoint::verifier_key(sample::ORIGIN, &common::log_key().verifying_key())
}

/// A witness named `name` following the tests' log, its state in `dir/<name>.db`.
fn witness(dir: &Path, name: &str) -> LocalWitness {
    witness_at(dir, name, "127.0.0.1:0")
}

/// [`witness`] listening on `listen`.
fn witness_at(dir: &Path, name: &str, listen: &str) -> LocalWitness {
    LocalWitness::start(gpuledger::witness::WitnessSettings {
        listen: listen.parse().unwrap(),
        name: name.into(),
        key: sample::key(name),
        state: dir.join(format!("{}.db", name.replace('/', "_"))),
        logs: gpuledger::witness::logs_from_vkeys([log_vkey().as_str()]).unwrap(),
        workers: 1,
    })
    .unwrap()
}

/// Starts `serve` on `url` with `witnesses` (name, vkey, url) and `quorum`, issuances waiting
/// `wait` seconds; returns it and an HTTP client.
fn serve(
    s: &Setup,
    url: &str,
    witnesses: &[(String, String, String)],
    quorum: usize,
    wait: u64,
) -> (Proc, Http) {
    // Each database its own high-water file, as each server keeps its own: the fork below
    // is someone else's server on a copy, not this one failed over.
    let hw: String = url
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let hw = s.dir.path().join(format!("{hw}.high-water"));
    let mut cfg = format!(
        "witness_quorum = {quorum}\nwitness_wait_seconds = {wait}\nhigh_water_file = {:?}\n",
        hw.to_str().unwrap()
    );
    for (name, vkey, wurl) in witnesses {
        cfg.push_str(&format!(
            "\n[[witnesses]]\nname = {name:?}\nvkey = {vkey:?}\nurl = {wurl:?}\n"
        ));
    }
    let path = s.dir.path().join(format!(
        "serve-{}.toml",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::write(&path, cfg).unwrap();
    let (child, base) = spawn_serve(
        url,
        &s.log_key,
        0,
        &[
            "--checkpoint-interval-seconds",
            "1",
            "--workers",
            "1",
            "--config",
            path.to_str().unwrap(),
        ],
    );
    (Proc(child), Http::new(&base))
}

fn entry(w: &LocalWitness) -> (String, String, String) {
    let s = w.setting();
    (s.name, s.vkey, s.url)
}

/// A new admin token on the database at `url`.
fn admin(url: &str) -> String {
    let mut c = store::connect(url).unwrap();
    access::create_token(&mut c, access::ApiRole::Admin, None, "witnessing test")
        .unwrap()
        .1
}

/// The lease of [`TENANT`] that `setup` registers over the node's sample-model GPUs.
const LEASE: &str = "l-a";

/// A usage record of the node for seq `seq`, `count` GPUs under [`LEASE`].
fn usage(seq: u64, count: i64) -> gpuledger::core::envelope::Envelope {
    let key = sample::key(NODE);
    sample::usage_under(
        NODE,
        &key,
        seq,
        (TENANT, LEASE),
        Decimal::from(count),
        slot(seq),
    )
}

/// Usage records of the node for seqs `seqs`, `count` GPUs each, posted and accepted.
fn post_usage(h: &Http, seqs: std::ops::Range<u64>, count: i64) {
    let batch: Vec<_> = seqs.map(|seq| usage(seq, count)).collect();
    let r = h.post_records(&batch);
    for o in r["outcomes"].as_array().unwrap() {
        assert_eq!(o["status"], "accepted", "{r}");
    }
}

/// The served checkpoint: its size and the number of valid cosignatures of `w` on it.
fn served(h: &Http, w: &WitnessKey) -> (u64, usize, String) {
    let note = h.get("/v1/checkpoint", None).text();
    let size = checkpoint::unverified(&note).unwrap().size();
    let n = valid_cosignatures(note.as_bytes(), std::slice::from_ref(w)).len();
    (size, n, note)
}

/// Waits until the served checkpoint covers the whole log and carries `w`'s cosignature;
/// returns its size.
fn wait_cosigned(h: &Http, w: &WitnessKey) -> u64 {
    let mut size = 0;
    wait_for(
        "the witness's cosignature of the latest checkpoint",
        Duration::from_secs(30),
        || {
            let (s, n, _) = served(h, w);
            size = s;
            n == 1 && s == h.size()
        },
    );
    size
}

/// The sum of `gpuledger_witness_failures_total` for `reason` in `/metrics`.
fn failures(h: &Http, reason: &str) -> f64 {
    h.get("/metrics", None)
        .text()
        .lines()
        .filter(|l| l.starts_with("gpuledger_witness_failures_total{"))
        .filter(|l| l.contains(&format!("reason=\"{reason}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn period() -> (String, String) {
    let from = slot(0).unix() / 86_400 * 86_400;
    let t = |x| {
        gpuledger::core::time::Timestamp::from_unix(x)
            .unwrap()
            .to_string()
    };
    (t(from), t(from + 2 * 86_400))
}

/// Issues a certificate of the tenant over [`period`]; the answer.
fn certify(h: &Http, token: &str) -> common::http::Reply {
    let (from, to) = period();
    h.post(
        "/v1/certificates",
        Some(token),
        &json!({"tenant": TENANT, "from": from, "to": to}),
    )
}

/// Writes the certificate of a 201 answer and its bundle into `dir` as `<name>.json` and
/// `<name>.bundle`; returns their paths.
fn save_certificate(
    h: &Http,
    token: &str,
    r: &common::http::Reply,
    dir: &Path,
    name: &str,
) -> (PathBuf, PathBuf) {
    assert_eq!(r.status, 201, "{}", r.lossy());
    let id = r.json()["id"].as_str().unwrap().to_owned();
    let bundle = h.get(&format!("/v1/certificates/{id}/bundle"), Some(token));
    assert_eq!(bundle.status, 200, "{}", bundle.lossy());
    let (c, b) = (
        dir.join(format!("{name}.json")),
        dir.join(format!("{name}.bundle")),
    );
    std::fs::write(&c, &r.body).unwrap();
    std::fs::write(&b, &bundle.body).unwrap();
    (c, b)
}

/// `gpuledger verify --certificate C --bundle B --log-key .. [--witness W --quorum K] --json`:
/// the exit code and the JSON it printed.
fn verify(cert: &Path, bundle: &Path, witness: Option<(&WitnessKey, usize)>) -> (i32, Value) {
    verify_as("--certificate", cert, bundle, witness)
}

/// [`verify`] of `subject` given with `flag` (`--certificate` or `--invoice`).
fn verify_as(
    flag: &str,
    subject: &Path,
    bundle: &Path,
    witness: Option<(&WitnessKey, usize)>,
) -> (i32, Value) {
    let mut cmd = bin();
    cmd.arg("verify")
        .arg(flag)
        .arg(subject)
        .arg("--bundle")
        .arg(bundle)
        .args(["--log-key", &log_vkey(), "--json"]);
    if let Some((w, k)) = witness {
        cmd.args(["--witness", &w.vkey(), "--quorum", &k.to_string()]);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let v = serde_json::from_str(&text).unwrap_or_else(|_| {
        panic!(
            "verify printed {text:?}, {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), v)
}

fn ready(db: &TestDb) -> Setup {
    setup(db, &[(NODE, Role::Node)])
}

both_backends!(
    a_split_view_is_refused_by_the_witness_and_by_verify_with_a_quorum,
    |db: &TestDb| split_view(db)
);

fn split_view(db: &TestDb) {
    let s = ready(db);
    let token = admin(&s.url);
    let w = witness(s.dir.path(), "witness.test/w1");
    let wk = w.witness_key().clone();

    // The honest log, cosigned by the witness.
    let (honest, h) = serve(&s, &s.url, &[entry(&w)], 1, 10);
    post_usage(&h, 1..6, 1);
    let copied_at = wait_cosigned(&h, &wk);
    // Someone copies the database (and has the key)...
    drop(honest);
    let copy = db.copy();
    // ... while the honest log grows and the witness cosigns its new checkpoint.
    let (_honest, h) = serve(&s, &s.url, &[entry(&w)], 1, 10);
    assert_eq!(h.size(), copied_at);
    post_usage(&h, 6..9, 1);
    let honest_size = wait_cosigned(&h, &wk);
    assert!(honest_size > copied_at);
    let r = certify(&h, &token);
    let (honest_cert, honest_bundle) = save_certificate(&h, &token, &r, s.dir.path(), "honest");

    // The copy appends other entries, with the same key, then asks the same witness. (Had it
    // asked first, the witness's 409 naming a size above the copy's would have stopped its
    // writes: `log_rewound`, tests/high_water.rs.)
    let (fork, f) = serve(&s, &copy.url, &[], 0, 10);
    assert_eq!(f.size(), copied_at);
    post_usage(&f, 6..12, 3);
    assert!(f.size() > honest_size);
    drop(fork);
    let (_fork, f) = serve(&s, &copy.url, &[entry(&w)], 0, 10);
    wait_for(
        "the fork's witness failure",
        Duration::from_secs(30),
        || failures(&f, "unprocessable") + failures(&f, "conflict") >= 1.0,
    );
    let v = f.get("/v1/witnesses", Some(&token)).ok_json(200);
    let reason = v["witnesses"][0]["last_error"]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(reason == "unprocessable" || reason == "conflict", "{v}");
    // The fork's checkpoints carry no cosignature; the honest log's witness state is intact.
    let (fsize, n, _) = served(&f, &wk);
    assert_eq!((fsize, n), (f.size(), 0));
    assert_eq!(
        failures(&h, "unprocessable") + failures(&h, "conflict"),
        0.0
    );
    post_usage(&h, 9..10, 1);
    wait_cosigned(&h, &wk);

    // A certificate from the fork verifies against the log key alone, but not with a quorum.
    let r = certify(&f, &token);
    let (fork_cert, fork_bundle) = save_certificate(&f, &token, &r, s.dir.path(), "fork");
    let (code, v) = verify(&fork_cert, &fork_bundle, None);
    assert_eq!((code, v["result"].as_str()), (0, Some("PASS")), "{v}");
    let (code, v) = verify(&fork_cert, &fork_bundle, Some((&wk, 1)));
    assert_eq!(
        (code, v["result"].as_str(), v["reason"].as_str()),
        (1, Some("FAIL"), Some("witness_quorum")),
        "{v}"
    );
    // The honest one passes with the quorum.
    let (code, v) = verify(&honest_cert, &honest_bundle, Some((&wk, 1)));
    assert_eq!((code, v["result"].as_str()), (0, Some("PASS")), "{v}");

    // The same two verdicts from the Python verifier.
    if !common::python_verifier_ready() {
        return;
    }
    for (cert, bundle, passes) in [
        (&honest_cert, &honest_bundle, true),
        (&fork_cert, &fork_bundle, false),
    ] {
        let out = common::python_verifier()
            .arg("certificate")
            .arg("--certificate")
            .arg(cert)
            .arg("--bundle")
            .arg(bundle)
            .args([
                "--log-key",
                &log_vkey(),
                "--witness",
                &wk.vkey(),
                "--quorum",
                "1",
            ])
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.success(), passes, "{said}");
        if !passes {
            assert!(said.contains("witness_quorum"), "{said}");
        }
    }
}

#[test]
fn with_a_quorum_issuance_waits_for_a_cosigned_checkpoint_or_answers_witnesses_behind() {
    let db = common::sqlite();
    // A price for the sample records, so that the tenant can be invoiced: logged first, when it
    // takes effect, a day before them (no price may take effect more than the policy's skew
    // before it is logged, and receive times never decrease).
    {
        use gpuledger::core::record::{Body, RateCard};
        let since = slot(0).plus(-86_400);
        let ledger = common::open_at(&db, since);
        ledger
            .append_ledger_entry(Body::RateCard(RateCard {
                region: sample::REGION.into(),
                gpu_model: "H100-SXM-80G".into(),
                lease_class: gpuledger::core::rating::LeaseClass::OnDemand,
                currency: "CNY".into(),
                price_per_gpu_hour: Decimal::from(18),
                effective_from: since,
            }))
            .unwrap();
    }
    let s = ready(&db);
    let token = admin(&s.url);
    let w = witness(s.dir.path(), "witness.test/w2");
    let wk = w.witness_key().clone();
    let (_serve, h) = serve(&s, &s.url, &[entry(&w)], 1, 3);
    post_usage(&h, 1..4, 2);
    // Issued at once after the records, before the checkpoint loop signed one of them: the
    // issuance signs a checkpoint of the head and waits for its cosignature.
    let before = h.size();
    let r = certify(&h, &token);
    assert_eq!(r.status, 201, "{}", r.lossy());
    let cert = r.json();
    let note = cert["checkpoint"].as_str().unwrap();
    assert_eq!(checkpoint::unverified(note).unwrap().size(), before);
    assert_eq!(
        valid_cosignatures(note.as_bytes(), std::slice::from_ref(&wk)).len(),
        1,
        "{note}"
    );
    assert_eq!(cert["entries"]["count"], 3, "{cert}");
    let (c, b) = save_certificate(&h, &token, &r, s.dir.path(), "cosigned");
    let (code, v) = verify(&c, &b, Some((&wk, 1)));
    assert_eq!((code, v["result"].as_str()), (0, Some("PASS")), "{v}");
    // The certificate_issued entry was appended after the checkpoint it was issued against.
    assert_eq!(h.size(), before + 1);

    // An invoice too: issued against a cosigned checkpoint that covers its records, its
    // bundle's header carrying the note with the cosignature.
    let (from, to) = period();
    let r = h.post(
        "/v1/invoices",
        Some(&token),
        &json!({"tenant": TENANT, "from": from, "to": to}),
    );
    assert_eq!(r.status, 201, "{}", r.lossy());
    let invoice = r.json()[0].clone();
    let number = invoice["number"].as_str().unwrap();
    let at = invoice["checkpoint_size"].as_u64().unwrap();
    assert!(at > before, "{invoice}");
    let bundle = h.get(&format!("/v1/invoices/{number}/bundle"), Some(&token));
    assert_eq!(bundle.status, 200, "{}", bundle.lossy());
    let header: Value =
        serde_json::from_slice(bundle.body.split(|&b| b == b'\n').next().unwrap()).unwrap();
    let header_note = header["checkpoint"].as_str().unwrap();
    assert_eq!(checkpoint::unverified(header_note).unwrap().size(), at);
    assert_eq!(
        valid_cosignatures(header_note.as_bytes(), std::slice::from_ref(&wk)).len(),
        1,
        "{header}"
    );
    let (i, ib) = (
        s.dir.path().join("invoice.json"),
        s.dir.path().join("invoice.bundle"),
    );
    let served = h.get(&format!("/v1/invoices/{number}"), Some(&token));
    assert_eq!(served.status, 200, "{}", served.lossy());
    std::fs::write(&i, &served.body).unwrap();
    std::fs::write(&ib, &bundle.body).unwrap();
    let (code, v) = verify_as("--invoice", &i, &ib, Some((&wk, 1)));
    assert_eq!((code, v["result"].as_str()), (0, Some("PASS")), "{v}");

    // The witness goes away: issuance waits 3 s, then 503 witnesses_behind, nothing written.
    let addr = w.url().trim_start_matches("http://").to_owned();
    drop(w);
    post_usage(&h, 4..6, 2);
    let size = h.size();
    let started = Instant::now();
    let r = certify(&h, &token);
    let problem = r.assert_problem(503, "witnesses_behind", "witness down");
    assert!(started.elapsed() >= Duration::from_secs(3), "{problem}");
    assert!(r.retry_after.is_some(), "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains("witnesses are behind") && detail.contains(&format!("size {size} or more")),
        "{detail}"
    );
    assert_eq!(h.size(), size, "nothing written");
    let listed = h.get("/v1/certificates", Some(&token)).json();
    assert_eq!(common::http::items(&listed).len(), 1, "{listed}");
    let m = h.get("/metrics", None).text();
    assert!(
        m.lines().any(
            |l| l.starts_with("gpuledger_witness_quorum_timeouts_total ") && !l.ends_with(" 0")
        ),
        "{m}"
    );
    assert!(failures(&h, "unreachable") >= 1.0);
    // GET /v1/witnesses says the same.
    let v = h.get("/v1/witnesses", Some(&token)).ok_json(200);
    assert_eq!(v["quorum"], 1, "{v}");
    let seen = &v["witnesses"][0];
    assert_eq!(seen["vkey"].as_str(), Some(wk.vkey().as_str()), "{v}");
    assert_eq!(seen["last_error"]["reason"], "unreachable", "{v}");
    assert!(seen["cosigned_size"].as_u64().unwrap() >= before, "{v}");
    assert!(seen["lag_entries"].as_u64().unwrap() >= 2, "{v}");

    // It comes back (same key, state and address) behind by several checkpoints: it is sent
    // only the latest, with one consistency proof, and issuance works again.
    let cosigned_before = seen["cosigned_size"].as_u64().unwrap();
    for seq in 6..9 {
        post_usage(&h, seq..seq + 1, 2);
        // A checkpoint of each (one a second while the log grows).
        std::thread::sleep(Duration::from_millis(1_300));
    }
    let w = witness_at(s.dir.path(), "witness.test/w2", &addr);
    let caught_up = wait_cosigned(&h, &wk);
    assert!(caught_up > cosigned_before + 1);
    let page = h.get("/v1/checkpoints?limit=1000", None).json();
    let skipped: Vec<u64> = page["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            let size = c["size"].as_u64().unwrap();
            size > cosigned_before && size < caught_up
        })
        .map(|c| {
            let note = c["note"].as_str().unwrap();
            valid_cosignatures(note.as_bytes(), std::slice::from_ref(&wk)).len() as u64
        })
        .collect();
    assert!(
        !skipped.is_empty() && skipped.iter().all(|n| *n == 0),
        "{page}"
    );
    assert_eq!(certify(&h, &token).status, 201);
    drop(w);
}

#[test]
fn a_log_or_a_witness_that_lost_its_witness_state_resyncs_through_409() {
    let db = common::sqlite();
    let s = ready(&db);
    let w = witness(s.dir.path(), "witness.test/w3");
    let wk = w.witness_key().clone();
    {
        let (_serve, h) = serve(&s, &s.url, &[entry(&w)], 0, 10);
        post_usage(&h, 1..4, 1);
        wait_cosigned(&h, &wk);
    }
    // The log loses its witness state (a restore from an older backup, say).
    {
        let mut c = store::connect(&s.url).unwrap();
        use diesel::prelude::*;
        use gpuledger::store::schema::{cosignatures, witness_state};
        diesel::delete(witness_state::table)
            .execute(&mut c)
            .unwrap();
        diesel::delete(cosignatures::table).execute(&mut c).unwrap();
    }
    let (serve2, h) = serve(&s, &s.url, &[entry(&w)], 0, 10);
    post_usage(&h, 4..6, 1);
    // It sends from 0, gets 409 with the witness's size, and sends again from it.
    let size = wait_cosigned(&h, &wk);
    for reason in ["conflict", "unprocessable", "bad_response", "unreachable"] {
        assert_eq!(failures(&h, reason), 0.0, "{reason}");
    }
    drop(serve2);
    let sizes = {
        let mut c = store::connect(&s.url).unwrap();
        store::cosignatures::cosigned_sizes(&mut c).unwrap()
    };
    assert_eq!(sizes.get("witness.test/w3"), Some(&size));

    // The witness loses its state instead (same key, a fresh state file): the log's old size
    // is above what it holds (nothing), it answers 409 with 0, and the log sends from 0.
    drop(w);
    std::fs::remove_file(s.dir.path().join("witness.test_w3.db")).unwrap();
    for leftover in ["witness.test_w3.db-wal", "witness.test_w3.db-shm"] {
        let _ = std::fs::remove_file(s.dir.path().join(leftover));
    }
    let w = witness(s.dir.path(), "witness.test/w3");
    let (_serve3, h) = serve(&s, &s.url, &[entry(&w)], 0, 10);
    post_usage(&h, 6..8, 1);
    wait_cosigned(&h, &wk);
    assert_eq!(
        failures(&h, "conflict") + failures(&h, "unprocessable"),
        0.0
    );
}

both_backends!(
    cosignatures_are_stored_served_and_counted_for_the_quorum,
    |db: &TestDb| {
        use gpuledger::core::cosignature::{self, Cosigner};
        use gpuledger::core::time::Timestamp;
        use gpuledger::store::cosignatures::{self as cs, quorum_checkpoint, quorum_size};
        use gpuledger::store::read::{self, CheckpointPage};
        let ledger = common::open(db);
        let (size, note) = ledger.checkpoint().unwrap();
        let body = cosignature::note_body(note.as_bytes()).unwrap();
        let a = Cosigner::new("witness.test/a", sample::key("witness a")).unwrap();
        let b = Cosigner::new("witness.test/b", sample::key("witness b")).unwrap();
        // Someone else's key under b's name: its line must never count for b.
        let impostor = Cosigner::new("witness.test/b", sample::key("impostor")).unwrap();
        let keys = [a.witness_key(), b.witness_key()];
        let store = |name: &str, line: &str, t: u64| {
            ledger
                .with_account_writer(|c| cs::store(c, name, size, line, t, Timestamp::now()))
                .unwrap()
        };
        let quorum = |k: usize| {
            ledger
                .reads()
                .run(|c| quorum_checkpoint(c, &keys, k, size))
                .unwrap()
        };
        assert_eq!(quorum(1), None);
        store("witness.test/a", &a.cosign(&body, 1_000), 1_000);
        store("witness.test/b", &impostor.cosign(&body, 1_001), 1_001);
        // Served with the cosignatures: the log's signature still verifies, a's counts, the
        // impostor's does not.
        let (s, served) = ledger.reads().latest_checkpoint().unwrap().unwrap();
        assert_eq!(s, size);
        checkpoint::verify_checkpoint(served.as_bytes(), &log_vkey()).unwrap();
        let valid = valid_cosignatures(served.as_bytes(), &keys);
        assert_eq!(valid.len(), 1);
        assert_eq!(valid[0].witness, "witness.test/a");
        assert_eq!(quorum(1).map(|w| w.size), Some(size));
        assert_eq!(quorum(2), None);
        // b's own line replaces the impostor's; now 2 of 2.
        store("witness.test/b", &b.cosign(&body, 1_002), 1_002);
        let witnessed = quorum(2).expect("a quorum of 2");
        assert_eq!(
            cosignature::verify_witnessed(witnessed.note.as_bytes(), &log_vkey(), &keys, 2)
                .unwrap()
                .size(),
            size
        );
        assert_eq!(
            ledger.reads().run(|c| quorum_size(c, &keys, 2)).unwrap(),
            size
        );
        // A checkpoint above the one cosigned does not have the quorum.
        assert_eq!(
            ledger
                .reads()
                .run(|c| quorum_checkpoint(c, &keys, 1, size + 1))
                .unwrap(),
            None
        );
        // The stored sizes, and the listed checkpoints, carry the same.
        let sizes = ledger.reads().run(cs::cosigned_sizes).unwrap();
        assert_eq!(sizes.get("witness.test/a"), Some(&size));
        assert_eq!(sizes.get("witness.test/b"), Some(&size));
        let page = ledger
            .reads()
            .run(|c| read::checkpoints_page(c, CheckpointPage::Newest, 10))
            .unwrap();
        assert_eq!(page[0].note, witnessed.note);
        assert_eq!(valid_cosignatures(page[0].note.as_bytes(), &keys).len(), 2);
        // The stored log-signed note itself is unchanged: a later checkpoint is still checked
        // against it and signed.
        ledger.register_tenant("tenant-later").unwrap();
        let (later, _) = ledger.checkpoint().unwrap();
        assert_eq!(later, size + 1);
        let (_, latest) = ledger.reads().latest_checkpoint().unwrap().unwrap();
        assert_eq!(valid_cosignatures(latest.as_bytes(), &keys).len(), 0);
    }
);

both_backends!(
    a_witness_holding_more_than_the_database_stops_its_writes,
    |db: &TestDb| {
        // The log grows and is cosigned; the database is then replaced by an older copy of
        // itself, on a machine whose high-water file is gone (each URL gets its own file
        // here, so the copy's server has none): only the witness knows what was published.
        let s = ready(db);
        let w = witness(s.dir.path(), "witness.test/w4");
        let wk = w.witness_key().clone();
        let (log, h) = serve(&s, &s.url, &[entry(&w)], 0, 10);
        post_usage(&h, 1..3, 1);
        wait_cosigned(&h, &wk);
        drop(log);
        let old = db.copy();
        let (log, h) = serve(&s, &s.url, &[entry(&w)], 0, 10);
        post_usage(&h, 3..8, 1);
        let cosigned = wait_cosigned(&h, &wk);
        drop(log);

        let (_old_log, o) = serve(&s, &old.url, &[entry(&w)], 0, 10);
        assert!(o.size() < cosigned);
        let t = Instant::now();
        let r = loop {
            let r = o.get("/readyz", None);
            if r.lossy().contains("log_rewound") || t.elapsed() > Duration::from_secs(30) {
                break r;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let p = r.assert_problem(503, "log_rewound", "readyz of the old copy");
        let detail = p["detail"].as_str().unwrap();
        assert!(
            detail.contains(&format!("size {cosigned}")) && detail.contains("witness.test/w4"),
            "{detail}"
        );
        o.try_post_records(&[usage(8, 1)]).unwrap().assert_problem(
            503,
            "log_rewound",
            "a write to the old copy",
        );
    }
);
