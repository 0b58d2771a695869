//! `gpuledger witness`: a C2SP tlog-witness, run as the real binary (and once in-process
//! through `gpuledger::witness::start`). The checkpoints come from
//! `gpuledger::core::checkpoint::LogSigner` over trees of `gpuledger::core::merkle`; every
//! cosignature answered is verified with `cosignature::valid_cosignatures`. The last tests
//! check `gpuledger verify --witness … --quorum K` on checkpoints, bundles and certificates.

mod common;

use ed25519_dalek::SigningKey;
use gpuledger::core::checkpoint::LogSigner;
use gpuledger::core::cosignature::{self, AddCheckpoint, WitnessKey};
use gpuledger::core::merkle::{self, Hash, MemoryHashes};
use gpuledger::witness::state::WitnessState;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const ORIGIN: &str = "ledger.test/witnessed";
const WITNESS_NAME: &str = "witness.test/w1";
/// Leaves in the test tree (the largest checkpoint the tests sign).
const LEAVES: u64 = 1000;

/// A child process killed (SIGKILL) and reaped however the test ends.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gpuledger"))
}

/// A log: its signer and a tree of [`LEAVES`] leaves.
struct Log {
    signer: LogSigner,
    tree: MemoryHashes,
}

impl Log {
    fn new(seed: u8) -> Log {
        let signer = LogSigner::new(ORIGIN, SigningKey::from_bytes(&[seed; 32])).unwrap();
        let mut tree = MemoryHashes::default();
        let leaves: Vec<Hash> = (0..LEAVES)
            .map(|i| merkle::leaf_hash(format!("entry {i}").as_bytes()))
            .collect();
        merkle::append_leaves(0, &leaves, &mut tree).unwrap();
        Log { signer, tree }
    }

    fn root(&self, size: u64) -> Hash {
        merkle::tree_hash(size, &self.tree).unwrap()
    }

    fn note(&self, size: u64) -> String {
        self.signer.sign_checkpoint(size, &self.root(size))
    }

    /// The add-checkpoint request from `old` to `size` with the right proof.
    fn request(&self, old: u64, size: u64) -> AddCheckpoint {
        let proof = if old == 0 || old >= size {
            vec![]
        } else {
            merkle::prove_tree(size, old, &self.tree).unwrap()
        };
        AddCheckpoint {
            old_size: old,
            proof,
            checkpoint: self.note(size).into_bytes(),
        }
    }
}

/// One answer, read whole.
struct Reply {
    status: u16,
    content_type: String,
    body: String,
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

fn read(r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Reply {
    let mut r = r.expect("an answer");
    let content_type = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    Reply {
        status: r.status().as_u16(),
        content_type,
        body: r.body_mut().read_to_string().unwrap(),
    }
}

fn post(base: &str, body: &[u8]) -> Reply {
    read(agent().post(format!("{base}/add-checkpoint")).send(body))
}

fn get(base: &str, path: &str) -> Reply {
    read(agent().get(format!("{base}{path}")).call())
}

/// `witness keygen` into `dir/witness.key`; returns the key file and the printed vkey.
fn keygen(dir: &Path) -> (PathBuf, WitnessKey) {
    let key = dir.join("witness.key");
    let out = bin()
        .args(["witness", "keygen", "--name", WITNESS_NAME, "--key"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let vkey = String::from_utf8(out.stdout).unwrap();
    (key, WitnessKey::parse(&vkey).unwrap())
}

/// Starts `gpuledger witness serve --listen 127.0.0.1:0 ARGS…` and waits until it listens;
/// returns it and its base URL.
fn serve(args: &[&std::ffi::OsStr]) -> (Proc, String) {
    let mut child = bin()
        .args(["witness", "serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .env("GPULEDGER_LOG", "error")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let base = common::listening(&mut child, "witness");
    (Proc(child), base)
}

/// A witness following `log` (its key from `witness keygen`), state in `dir/state.db`.
struct Running {
    proc: Proc,
    base: String,
    key: WitnessKey,
    key_file: PathBuf,
    state: PathBuf,
}

fn start(dir: &Path, log: &Log) -> Running {
    let (key_file, key) = keygen(dir);
    let state = dir.join("state.db");
    let (proc, base) = serve(&[
        "--name".as_ref(),
        WITNESS_NAME.as_ref(),
        "--key".as_ref(),
        key_file.as_os_str(),
        "--state".as_ref(),
        state.as_os_str(),
        "--log".as_ref(),
        log.signer.verifier_key().as_ref(),
    ]);
    Running {
        proc,
        base,
        key,
        key_file,
        state,
    }
}

/// Asserts a 200 whose body is one valid cosignature line of `key` on `log`'s checkpoint of
/// `size`.
fn assert_cosigned(reply: &Reply, log: &Log, size: u64, key: &WitnessKey) {
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(
        reply.content_type.starts_with("text/plain"),
        "{}",
        reply.content_type
    );
    assert!(reply.body.starts_with("— witness.test/w1 ") && reply.body.ends_with('\n'));
    let note =
        cosignature::with_signature_lines(&log.note(size), std::slice::from_ref(&reply.body))
            .unwrap();
    let found = cosignature::valid_cosignatures(note.as_bytes(), std::slice::from_ref(key));
    assert_eq!(
        found.len(),
        1,
        "the answered line does not verify: {}",
        reply.body
    );
    cosignature::verify_witnessed(
        note.as_bytes(),
        &log.signer.verifier_key(),
        std::slice::from_ref(key),
        1,
    )
    .unwrap();
}

fn assert_conflict(reply: &Reply, size: u64) {
    assert_eq!(reply.status, 409, "{}", reply.body);
    assert_eq!(reply.content_type, "text/x.tlog.size");
    assert_eq!(
        cosignature::parse_size_body(reply.body.as_bytes()),
        Some(size)
    );
}

fn logs(base: &str) -> Value {
    let r = get(base, "/logs");
    assert_eq!(r.status, 200);
    serde_json::from_str(&r.body).unwrap()
}

#[test]
fn cosigns_consistent_growth_and_a_client_resyncs_from_the_409_size() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::new(1);
    let w = start(dir.path(), &log);
    assert_eq!(get(&w.base, "/healthz").status, 200);
    assert_eq!(logs(&w.base)[0]["size"], 0);

    assert_cosigned(
        &post(&w.base, &log.request(0, 5).to_body()),
        &log,
        5,
        &w.key,
    );
    assert_cosigned(
        &post(&w.base, &log.request(5, 9).to_body()),
        &log,
        9,
        &w.key,
    );
    // A client that lost track sends old 0: 409 with the stored size, then resends from it.
    let r = post(&w.base, &log.request(0, 20).to_body());
    assert_conflict(&r, 9);
    let size = cosignature::parse_size_body(r.body.as_bytes()).unwrap();
    assert_cosigned(
        &post(&w.base, &log.request(size, 20).to_body()),
        &log,
        20,
        &w.key,
    );
    // A wrong old size that is not zero is a 409 too.
    assert_conflict(&post(&w.base, &log.request(9, 30).to_body()), 20);
    // The same checkpoint again is cosigned again (no change).
    assert_cosigned(
        &post(&w.base, &log.request(20, 20).to_body()),
        &log,
        20,
        &w.key,
    );

    let l = logs(&w.base);
    assert_eq!(l[0]["origin"], ORIGIN);
    assert_eq!(l[0]["size"], 20);
    assert_eq!(l[0]["root"], merkle::encode_hash(&log.root(20)));
    assert!(l[0]["updated"].as_str().unwrap().ends_with('Z'));
    drop(w.proc);
}

#[test]
fn refusals_answer_the_spec_status_codes_and_keep_fork_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::new(1);
    let w = start(dir.path(), &log);
    assert_cosigned(
        &post(&w.base, &log.request(0, 8).to_body()),
        &log,
        8,
        &w.key,
    );

    // Same size, another root, validly signed by the log: 409, kept as evidence.
    let forged = AddCheckpoint {
        old_size: 8,
        proof: vec![],
        checkpoint: log
            .signer
            .sign_checkpoint(8, &Hash([0x55; 32]))
            .into_bytes(),
    };
    assert_conflict(&post(&w.base, &forged.to_body()), 8);

    // A proof that does not verify: 422 (problem+json), kept as evidence.
    let mut bad = log.request(8, 13);
    bad.proof[0].0[3] ^= 0x80;
    let r = post(&w.base, &bad.to_body());
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(r.content_type, "application/problem+json");
    let problem: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(
        problem["type"],
        "urn:gpuledger:problem:inconsistent_checkpoint"
    );
    // A fork: a validly signed checkpoint of size 13 that does not extend the cosigned 8.
    let mut fork = MemoryHashes::default();
    let leaves: Vec<Hash> = (0..13u64)
        .map(|i| merkle::leaf_hash(format!("other {i}").as_bytes()))
        .collect();
    merkle::append_leaves(0, &leaves, &mut fork).unwrap();
    let forked = AddCheckpoint {
        old_size: 8,
        proof: merkle::prove_tree(13, 8, &fork).unwrap(),
        checkpoint: log
            .signer
            .sign_checkpoint(13, &merkle::tree_hash(13, &fork).unwrap())
            .into_bytes(),
    };
    assert_eq!(post(&w.base, &forked.to_body()).status, 422);

    // Unknown origin: 404.
    let stranger = LogSigner::new("ledger.test/other", SigningKey::from_bytes(&[1; 32])).unwrap();
    let unknown = AddCheckpoint {
        old_size: 0,
        proof: vec![],
        checkpoint: stranger.sign_checkpoint(3, &log.root(3)).into_bytes(),
    };
    assert_eq!(post(&w.base, &unknown.to_body()).status, 404);

    // The right origin signed by another key: 403.
    let impostor = Log::new(2);
    assert_eq!(
        post(&w.base, &impostor.request(8, 13).to_body()).status,
        403
    );
    // A tampered log signature: 403.
    let mut tampered = log.request(8, 13);
    let text = String::from_utf8(tampered.checkpoint.clone()).unwrap();
    let (head, sig) = text.rsplit_once(' ').unwrap();
    let mut raw = base64_decode(sig.trim());
    raw[10] ^= 1;
    tampered.checkpoint = format!("{head} {}\n", base64_encode(&raw)).into_bytes();
    assert_eq!(post(&w.base, &tampered.to_body()).status, 403);

    // Old size above the checkpoint's: 400. Malformed bodies: 400. Oversized: 413.
    assert_eq!(post(&w.base, &log.request(13, 8).to_body()).status, 400);
    assert_eq!(post(&w.base, b"old 08\n\nx\n").status, 400);
    assert_eq!(post(&w.base, b"nonsense").status, 400);
    let mut huge = log.request(8, 13).to_body();
    huge.extend(std::iter::repeat_n(
        b'a',
        cosignature::MAX_ADD_CHECKPOINT_BODY,
    ));
    assert_eq!(post(&w.base, &huge).status, 413);

    // Nothing moved: the witness still stands at 8 and the good request still works.
    assert_eq!(logs(&w.base)[0]["size"], 8);
    assert_cosigned(
        &post(&w.base, &log.request(8, 13).to_body()),
        &log,
        13,
        &w.key,
    );

    // The evidence: the 409 root conflict, the bad proof and the fork, with their requests.
    let refused = WitnessState::open(&w.state)
        .unwrap()
        .refused(ORIGIN)
        .unwrap();
    let statuses: Vec<u16> = refused.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [409, 422, 422]);
    assert_eq!(refused[0].request, forged.to_body());
    assert_eq!(refused[2].request, forged_body(&forked));
    assert!(refused.iter().all(|r| r.stored == Some((8, log.root(8)))));

    // GET /metrics counted every answer by outcome (the 413 included, answered before the
    // handler), the fork evidence per origin, and the cosigned size and time.
    let m = get(&w.base, "/metrics");
    assert_eq!(m.status, 200);
    assert!(
        m.content_type.starts_with("text/plain"),
        "{}",
        m.content_type
    );
    for (outcome, n) in [
        ("cosigned", 2),
        ("conflict", 1),
        ("unprocessable", 2),
        ("forbidden", 2),
        ("not_found", 1),
        ("bad_request", 3),
        ("too_large", 1),
        ("error", 0),
    ] {
        let series = format!("gpuledger_witness_server_requests_total{{outcome=\"{outcome}\"}}");
        assert_eq!(
            metric(&m.body, &series),
            Some(n as f64),
            "{series} in\n{}",
            m.body
        );
    }
    let origin = |name: &str| format!("{name}{{origin=\"{ORIGIN}\"}}");
    assert_eq!(
        metric(
            &m.body,
            &origin("gpuledger_witness_server_fork_evidence_total")
        ),
        Some(3.0)
    );
    assert_eq!(
        metric(&m.body, &origin("gpuledger_witness_server_cosigned_size")),
        Some(13.0)
    );
    let last = metric(
        &m.body,
        &origin("gpuledger_witness_server_last_cosignature_timestamp_seconds"),
    )
    .unwrap();
    assert!(
        (gpuledger::witness::now_seconds() as f64 - last).abs() < 120.0,
        "{last}"
    );
    // The unknown origin got no series of its own.
    assert!(!m.body.contains("ledger.test/other"), "{}", m.body);
}

/// The value of the sample `series` (name and labels exactly) in a Prometheus text page.
fn metric(page: &str, series: &str) -> Option<f64> {
    page.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

fn forged_body(r: &AddCheckpoint) -> Vec<u8> {
    r.to_body()
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::prelude::{Engine, BASE64_STANDARD};
    BASE64_STANDARD.decode(s).unwrap()
}

fn base64_encode(b: &[u8]) -> String {
    use base64::prelude::{Engine, BASE64_STANDARD};
    BASE64_STANDARD.encode(b)
}

#[test]
fn a_witness_far_behind_catches_up_with_one_consistency_proof() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::new(1);
    let w = start(dir.path(), &log);
    assert_cosigned(
        &post(&w.base, &log.request(0, 3).to_body()),
        &log,
        3,
        &w.key,
    );
    let catch_up = log.request(3, LEAVES);
    assert!(catch_up.proof.len() <= cosignature::MAX_PROOF_LINES);
    assert_cosigned(&post(&w.base, &catch_up.to_body()), &log, LEAVES, &w.key);
    assert_eq!(logs(&w.base)[0]["size"], LEAVES);
}

#[test]
fn a_restarted_witness_keeps_its_state_and_never_rolls_back() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::new(1);
    let w = start(dir.path(), &log);
    assert_cosigned(
        &post(&w.base, &log.request(0, 9).to_body()),
        &log,
        9,
        &w.key,
    );
    assert_cosigned(
        &post(&w.base, &log.request(9, 12).to_body()),
        &log,
        12,
        &w.key,
    );
    // Killed for real (SIGKILL): no clean shutdown.
    let mut proc = w.proc;
    proc.0.kill().unwrap();
    proc.0.wait().unwrap();

    // Started again on the same state, this time from a config file.
    let config = dir.path().join("witness.toml");
    std::fs::write(
        &config,
        format!(
            "name = {WITNESS_NAME:?}\nkey = {:?}\nstate = {:?}\n\n[[logs]]\norigin = {ORIGIN:?}\nvkey = {:?}\n",
            w.key_file,
            w.state,
            log.signer.verifier_key()
        ),
    )
    .unwrap();
    let (_proc, base) = serve(&["--config".as_ref(), config.as_os_str()]);
    assert_eq!(logs(&base)[0]["size"], 12);
    // The metrics start from the state file: the cosigned size and when it was stored; the
    // counters from zero.
    let m = get(&base, "/metrics").body;
    let origin = |name: &str| format!("{name}{{origin=\"{ORIGIN}\"}}");
    assert_eq!(
        metric(&m, &origin("gpuledger_witness_server_cosigned_size")),
        Some(12.0)
    );
    assert!(
        metric(
            &m,
            &origin("gpuledger_witness_server_last_cosignature_timestamp_seconds")
        )
        .unwrap()
            > 0.0
    );
    assert_eq!(
        metric(
            &m,
            "gpuledger_witness_server_requests_total{outcome=\"cosigned\"}"
        ),
        Some(0.0)
    );
    // A log that lost its witness state asks from 0 and learns 12.
    assert_conflict(&post(&base, &log.request(0, 15).to_body()), 12);
    // Rollbacks are refused: an older checkpoint from its own size, or from the stored size.
    assert_conflict(&post(&base, &log.request(9, 9).to_body()), 12);
    assert_eq!(post(&base, &log.request(12, 9).to_body()).status, 400);
    assert_eq!(logs(&base)[0]["size"], 12);
    // Growth from the stored size goes on, cosigned with the same key.
    assert_cosigned(
        &post(&base, &log.request(12, 15).to_body()),
        &log,
        15,
        &w.key,
    );
}

#[test]
fn keygen_writes_a_private_key_and_vkey_prints_the_same_identity() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (key_file, key) = keygen(dir.path());
    assert_eq!(
        std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(key.name(), WITNESS_NAME);
    let out = bin()
        .args(["witness", "vkey", "--name", WITNESS_NAME, "--key"])
        .arg(&key_file)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), key.vkey());
    // Never overwrites a key.
    let again = bin()
        .args(["witness", "keygen", "--name", WITNESS_NAME, "--key"])
        .arg(&key_file)
        .output()
        .unwrap();
    assert!(!again.status.success());
    // A log key that is not a valid verifier key is refused at start.
    let bad = bin()
        .args([
            "witness",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--name",
            WITNESS_NAME,
        ])
        .arg("--key")
        .arg(&key_file)
        .arg("--state")
        .arg(dir.path().join("s.db"))
        .args(["--log", "not-a-vkey"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not-a-vkey"));
    // --log @FILE reads the log's verifier key from a file.
    let log = Log::new(1);
    let vkey_file = dir.path().join("log.vkey");
    std::fs::write(&vkey_file, format!("{}\n", log.signer.verifier_key())).unwrap();
    let at_file = format!("@{}", vkey_file.display());
    let state = dir.path().join("s.db");
    let (_proc, base) = serve(&[
        "--name".as_ref(),
        WITNESS_NAME.as_ref(),
        "--key".as_ref(),
        key_file.as_os_str(),
        "--state".as_ref(),
        state.as_os_str(),
        "--log".as_ref(),
        at_file.as_ref(),
    ]);
    assert_eq!(logs(&base)[0]["origin"], ORIGIN);
    assert_cosigned(&post(&base, &log.request(0, 2).to_body()), &log, 2, &key);
}

/// The library entry point the demo and benchmarks use: bound on port 0, answering, stopped.
#[test]
fn starts_in_process_on_a_free_port() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::new(1);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let settings = gpuledger::witness::WitnessSettings {
        listen: "127.0.0.1:0".parse().unwrap(),
        name: WITNESS_NAME.into(),
        key: SigningKey::from_bytes(&[9; 32]),
        state: dir.path().join("w.db"),
        logs: gpuledger::witness::logs_from_vkeys([log.signer.verifier_key().as_str()]).unwrap(),
        workers: 1,
    };
    let running = rt.block_on(gpuledger::witness::start(settings)).unwrap();
    assert_ne!(running.addr().port(), 0);
    let key = running.witness_key().clone();
    let base = running.url();
    let reply = post(&base, &log.request(0, 4).to_body());
    assert_cosigned(&reply, &log, 4, &key);
    rt.block_on(running.stop());
    assert!(agent().get(format!("{base}/healthz")).call().is_err());
}

/// The check and the update are one atomic step: of many requests from the same old size sent
/// at once, exactly one is cosigned and every other learns the new size (409).
#[test]
fn concurrent_requests_from_the_same_size_cosign_exactly_one() {
    let dir = tempfile::tempdir().unwrap();
    let log = std::sync::Arc::new(Log::new(1));
    let w = start(dir.path(), &log);
    assert_cosigned(
        &post(&w.base, &log.request(0, 5).to_body()),
        &log,
        5,
        &w.key,
    );
    let answers: Vec<(u64, Reply)> = std::thread::scope(|s| {
        let handles: Vec<_> = (6..30u64)
            .map(|size| {
                let (log, base) = (log.clone(), w.base.clone());
                s.spawn(move || (size, post(&base, &log.request(5, size).to_body())))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let won: Vec<u64> = answers
        .iter()
        .filter(|(_, r)| r.status == 200)
        .map(|(size, _)| *size)
        .collect();
    assert_eq!(won.len(), 1, "{won:?}");
    for (_, r) in answers.iter().filter(|(_, r)| r.status != 200) {
        assert_conflict(r, won[0]);
    }
    assert_eq!(logs(&w.base)[0]["size"], won[0]);
}

// ---------------------------------------------------------------------------------------------
// `gpuledger verify --witness VKEY --quorum K`
// ---------------------------------------------------------------------------------------------

/// Runs `gpuledger verify ARGS --json` in `dir`; returns the exit code and the JSON report
/// (Null when it printed none: a usage error).
fn verify(dir: &Path, args: &[&str]) -> (i32, Value) {
    let out = bin()
        .arg("verify")
        .args(args)
        .arg("--json")
        .current_dir(dir)
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap(), report)
}

/// A certificate, its bundle and the log's verifier key, written into `dir` from a real ledger
/// (SQLite), with no witness attached.
fn certificate_files(dir: &Path) -> (String, String) {
    use common::records::*;
    use gpuledger::core::certificate::Scope;
    use gpuledger::core::invoice::Period;
    use gpuledger::core::record::Role;
    use gpuledger::store::certificates::{self as store_certs, CertificateRequest};
    let db = common::sqlite();
    let ledger = common::open(&db);
    common::ensure_node_in(&ledger, "node-1", "west");
    let node = common::signer(&ledger, "node-1", Role::Node);
    common::parties(&ledger, &["acme"]);
    // The usage is of node-1's H100s: a lease of acme covers 8 of them.
    common::lease_with(
        &ledger,
        "acme-h100",
        "acme",
        gpuledger::core::rating::LeaseClass::OnDemand,
        &[("node-1", "H100", 8)],
    );
    let usage = h100_usage("acme", "node-1", "west", Some("acme-h100"), "8", 0, 3600);
    assert_accepted(
        &ledger
            .append(vec![signed("node-1", &node, 1, &usage)])
            .unwrap(),
    );
    let cert = ledger
        .issuance()
        .certificate(CertificateRequest {
            tenant: "acme".into(),
            period: Period {
                from: at(0),
                to: at(7200),
            },
            scope: Scope::default(),
        })
        .unwrap();
    let mut bundle = Vec::new();
    ledger
        .reads()
        .run(|c| {
            store_certs::write_certificate_bundle(c, &cert, &mut |l| {
                bundle.extend_from_slice(&l);
                Ok(())
            })
        })
        .unwrap();
    std::fs::write(dir.join("bundle.jsonl"), &bundle).unwrap();
    std::fs::write(dir.join("cert.json"), serde_json::to_vec(&cert).unwrap()).unwrap();
    let log_key = LogSigner::new(gpuledger::sample::ORIGIN, common::log_key())
        .unwrap()
        .verifier_key();
    (log_key, cert.checkpoint.clone())
}

/// The bundle file with its header's checkpoint replaced by `note`.
fn with_header_checkpoint(bundle: &[u8], old: &str, note: &str) -> Vec<u8> {
    let text = String::from_utf8(bundle.to_vec()).unwrap();
    let (header, rest) = text.split_once('\n').unwrap();
    let (from, to) = (
        serde_json::to_string(old).unwrap(),
        serde_json::to_string(note).unwrap(),
    );
    assert!(header.contains(&from), "the header carries the checkpoint");
    format!("{}\n{rest}", header.replacen(&from, &to, 1)).into_bytes()
}

#[test]
fn verify_counts_valid_cosignatures_of_the_given_witnesses() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (log_key, note) = certificate_files(d);
    let w1 =
        cosignature::Cosigner::new("witness.test/w1", SigningKey::from_bytes(&[21; 32])).unwrap();
    let w2 =
        cosignature::Cosigner::new("witness.test/w2", SigningKey::from_bytes(&[22; 32])).unwrap();
    let (v1, v2) = (w1.witness_key().vkey(), w2.witness_key().vkey());
    let body = cosignature::note_body(note.as_bytes()).unwrap();
    let line1 = w1.cosign(&body, 1_800_000_000);
    let cosigned = cosignature::with_signature_lines(&note, std::slice::from_ref(&line1)).unwrap();

    // A checkpoint file.
    std::fs::write(d.join("cp.note"), &cosigned).unwrap();
    std::fs::write(d.join("plain.note"), &note).unwrap();
    let lk = ["--log-key", log_key.as_str()];
    let cp = |file: &str, extra: &[&str]| {
        let mut a = vec!["--checkpoint", file];
        a.extend_from_slice(&lk);
        a.extend_from_slice(extra);
        verify(d, &a)
    };
    let (code, r) = cp("cp.note", &["--witness", &v1]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["summary"]["witnesses"]["found"], 1);
    assert_eq!(
        r["summary"]["witnesses"]["cosigned_by"][0]["name"],
        "witness.test/w1"
    );
    assert_eq!(
        r["summary"]["witnesses"]["cosigned_by"][0]["timestamp"],
        1_800_000_000u64
    );
    // Quorum 2 of w1 and w2: only w1 cosigned.
    let (code, r) = cp(
        "cp.note",
        &["--witness", &v1, "--witness", &v2, "--quorum", "2"],
    );
    assert_eq!(code, 1);
    assert_eq!(r["reason"], "witness_quorum");
    assert_eq!(r["summary"]["found"], 1);
    assert_eq!(r["summary"]["required"], 2);
    // Quorum 1 of w1 and w2 (the default) is met; w2 alone is not.
    assert_eq!(cp("cp.note", &["--witness", &v1, "--witness", &v2]).0, 0);
    let (code, r) = cp("cp.note", &["--witness", &v2]);
    assert_eq!((code, r["reason"].as_str()), (1, Some("witness_quorum")));
    // A tampered cosignature does not count.
    let b64 = line1.trim_end().rsplit_once(' ').unwrap().1;
    let mut raw = base64_decode(b64);
    raw[40] ^= 1;
    std::fs::write(
        d.join("bad.note"),
        cosigned.replace(b64, &base64_encode(&raw)),
    )
    .unwrap();
    assert_eq!(
        cp("bad.note", &["--witness", &v1]).1["reason"],
        "witness_quorum"
    );
    // Without witnesses the plain checkpoint passes; with one it does not.
    assert_eq!(cp("plain.note", &[]).0, 0);
    assert_eq!(
        cp("plain.note", &["--witness", &v1]).1["reason"],
        "witness_quorum"
    );
    // Witnesses from a file, one vkey a line.
    std::fs::write(d.join("witnesses.txt"), format!("# trusted\n{v2}\n{v1}\n")).unwrap();
    assert_eq!(cp("cp.note", &["--witness", "@witnesses.txt"]).0, 0);
    // Usage errors: exit 2.
    assert_eq!(cp("cp.note", &["--quorum", "1"]).0, 2);
    assert_eq!(cp("cp.note", &["--witness", &v1, "--quorum", "2"]).0, 2);
    assert_eq!(cp("cp.note", &["--witness", &v1, "--quorum", "0"]).0, 2);
    assert_eq!(cp("cp.note", &["--witness", &log_key]).0, 2);

    // A bundle whose header checkpoint carries the cosignature passes; the plain one does not.
    let bundle = std::fs::read(d.join("bundle.jsonl")).unwrap();
    std::fs::write(
        d.join("cosigned.jsonl"),
        with_header_checkpoint(&bundle, &note, &cosigned),
    )
    .unwrap();
    let (code, r) = verify(
        d,
        &[
            "--bundle",
            "cosigned.jsonl",
            "--log-key",
            &log_key,
            "--witness",
            &v1,
        ],
    );
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["summary"]["witnesses"]["found"], 1);
    let (code, r) = verify(
        d,
        &[
            "--bundle",
            "bundle.jsonl",
            "--log-key",
            &log_key,
            "--witness",
            &v1,
        ],
    );
    assert_eq!((code, r["reason"].as_str()), (1, Some("witness_quorum")));

    // A certificate is judged by its own checkpoint: issued without witnesses, it fails the
    // quorum, and passes without one.
    let cert_args = [
        "--certificate",
        "cert.json",
        "--bundle",
        "bundle.jsonl",
        "--log-key",
        &log_key,
    ];
    assert_eq!(verify(d, &cert_args).0, 0);
    let mut with_w = cert_args.to_vec();
    with_w.extend(["--witness", v1.as_str()]);
    let (code, r) = verify(d, &with_w);
    assert_eq!((code, r["reason"].as_str()), (1, Some("witness_quorum")));
    assert_eq!(r["summary"]["found"], 0);

    // The Python verifier gives the same verdicts.
    if common::python_verifier_ready() {
        let py = |args: &[&str]| {
            let out = common::python_verifier()
                .args(args)
                .arg("--json")
                .current_dir(d)
                .output()
                .unwrap();
            let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            (out.status.code().unwrap(), report)
        };
        let (code, r) = py(&[
            "bundle",
            "--bundle",
            "cosigned.jsonl",
            "--log-key",
            &log_key,
            "--witness",
            &v1,
        ]);
        assert_eq!(code, 0, "{r}");
        assert_eq!(r["summary"]["witnesses"]["found"], 1);
        let (code, r) = py(&[
            "bundle",
            "--bundle",
            "bundle.jsonl",
            "--log-key",
            &log_key,
            "--witness",
            &v1,
        ]);
        assert_eq!((code, r["reason"].as_str()), (1, Some("witness_quorum")));
        let (code, r) = py(&[
            "checkpoint",
            "--checkpoint",
            "cp.note",
            "--log-key",
            &log_key,
            "--witness",
            &v1,
            "--witness",
            &v2,
            "--quorum",
            "2",
        ]);
        assert_eq!((code, r["reason"].as_str()), (1, Some("witness_quorum")));
        let (code, r) = py(&[
            "certificate",
            "--certificate",
            "cert.json",
            "--bundle",
            "bundle.jsonl",
            "--log-key",
            &log_key,
            "--witness",
            &v1,
        ]);
        assert_eq!((code, r["reason"].as_str()), (1, Some("witness_quorum")));
        assert_eq!(
            py(&[
                "checkpoint",
                "--checkpoint",
                "cp.note",
                "--log-key",
                &log_key,
                "--quorum",
                "1"
            ])
            .0,
            2
        );
    }
}

/// `gpuledger verify consistency --witness … --quorum K`: the NEW checkpoint must carry the
/// quorum (the old one is the verifier's own, saved earlier). The cosignature comes from a real
/// `gpuledger witness serve` that followed the log from 5 to 13.
#[test]
fn verify_consistency_requires_the_quorum_on_the_new_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let log = Log::new(1);
    let w = start(d, &log);
    let first = post(&w.base, &log.request(0, 5).to_body());
    assert_cosigned(&first, &log, 5, &w.key);
    let second = post(&w.base, &log.request(5, 13).to_body());
    assert_cosigned(&second, &log, 13, &w.key);
    let old_cosigned =
        cosignature::with_signature_lines(&log.note(5), std::slice::from_ref(&first.body)).unwrap();
    let new_cosigned =
        cosignature::with_signature_lines(&log.note(13), std::slice::from_ref(&second.body))
            .unwrap();
    std::fs::write(d.join("old.note"), log.note(5)).unwrap();
    std::fs::write(d.join("old-cosigned.note"), &old_cosigned).unwrap();
    std::fs::write(d.join("new.note"), log.note(13)).unwrap();
    std::fs::write(d.join("new-cosigned.note"), &new_cosigned).unwrap();
    let proof: Vec<String> = merkle::prove_tree(13, 5, &log.tree)
        .unwrap()
        .iter()
        .map(merkle::encode_hash)
        .collect();
    std::fs::write(d.join("proof.json"), serde_json::to_vec(&proof).unwrap()).unwrap();
    let mut bad_proof = proof.clone();
    bad_proof.swap(0, 1);
    std::fs::write(d.join("bad.json"), serde_json::to_vec(&bad_proof).unwrap()).unwrap();
    let vk = log.signer.verifier_key();
    let v1 = w.key.vkey();
    let v2 = cosignature::Cosigner::new("witness.test/w2", SigningKey::from_bytes(&[22; 32]))
        .unwrap()
        .witness_key()
        .vkey();
    let consistency = |old: &str, new: &str, proof: &str, extra: &[&str]| {
        let mut a = vec![
            "consistency",
            "--old",
            old,
            "--new",
            new,
            "--proof",
            proof,
            "--log-key",
            vk.as_str(),
        ];
        a.extend_from_slice(extra);
        verify(d, &a)
    };

    // Without witnesses it passes, and says that only the operator vouches for the history.
    let (code, r) = consistency("old.note", "new.note", "proof.json", &[]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["summary"]["witnesses"]["operator_alone"], true, "{r}");
    assert_eq!(r["summary"]["witnesses"]["required"], 0, "{r}");
    // The new checkpoint cosigned by the witness: passes, and says who cosigned.
    let (code, r) = consistency(
        "old.note",
        "new-cosigned.note",
        "proof.json",
        &["--witness", &v1],
    );
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["summary"]["new_size"], 13);
    assert_eq!(r["summary"]["witnesses"]["found"], 1);
    assert_eq!(r["summary"]["witnesses"]["required"], 1);
    assert_eq!(
        r["summary"]["witnesses"]["cosigned_by"][0]["name"],
        WITNESS_NAME
    );
    // Only the new checkpoint counts: a cosigned old one does not make up for a plain new one.
    let (code, r) = consistency(
        "old-cosigned.note",
        "new.note",
        "proof.json",
        &["--witness", &v1],
    );
    assert_eq!(
        (code, r["reason"].as_str()),
        (1, Some("witness_quorum")),
        "{r}"
    );
    assert_eq!(r["item"], "new checkpoint");
    assert_eq!(r["summary"]["found"], 0);
    // Quorum 2 of w1 and w2: only w1 cosigned. A witness the log never used: 0 of 1.
    let (code, r) = consistency(
        "old.note",
        "new-cosigned.note",
        "proof.json",
        &["--witness", &v1, "--witness", &v2, "--quorum", "2"],
    );
    assert_eq!(
        (code, r["reason"].as_str()),
        (1, Some("witness_quorum")),
        "{r}"
    );
    assert_eq!(
        (
            r["summary"]["found"].as_u64(),
            r["summary"]["required"].as_u64()
        ),
        (Some(1), Some(2))
    );
    let (code, r) = consistency(
        "old.note",
        "new-cosigned.note",
        "proof.json",
        &["--witness", &v2],
    );
    assert_eq!(
        (code, r["reason"].as_str()),
        (1, Some("witness_quorum")),
        "{r}"
    );
    // The quorum met does not excuse a proof that does not verify.
    let (code, r) = consistency(
        "old.note",
        "new-cosigned.note",
        "bad.json",
        &["--witness", &v1],
    );
    assert_eq!(
        (code, r["reason"].as_str()),
        (1, Some("consistency_proof")),
        "{r}"
    );
    // Usage errors: a quorum without witnesses, or above their number (no report).
    let (code, r) = consistency(
        "old.note",
        "new-cosigned.note",
        "proof.json",
        &["--quorum", "1"],
    );
    assert!(code != 0 && code != 1 && r.is_null(), "{code} {r}");
    let (code, r) = consistency(
        "old.note",
        "new-cosigned.note",
        "proof.json",
        &["--witness", &v1, "--quorum", "2"],
    );
    assert!(code != 0 && code != 1 && r.is_null(), "{code} {r}");
}
