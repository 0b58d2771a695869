//! Test support: a fresh database per test on each backend, ledgers with their signers,
//! tenants and leases, real `gpuledger` processes, and the helpers in `agent` (agent and market
//! processes), `http` (served logs and an HTTP client) and `records` (records, times, numbers).
//!
//! SQLite always runs. PostgreSQL runs when `GPULEDGER_TEST_DATABASE_URL` names a server (an
//! admin URL such as `postgres://postgres@127.0.0.1:5432/postgres`); each test creates its own
//! database there and drops it afterwards. Without it the PostgreSQL half is skipped with a
//! loud message, and with `GPULEDGER_REQUIRE_POSTGRES=1` a skip is a failure.
#![allow(dead_code)]

pub mod agent;
pub mod billing;
pub mod cluster;
pub mod forge;
pub mod http;
pub mod records;
pub mod webdriver;

#[allow(unused_imports)]
pub use agent::*;
#[allow(unused_imports)]
pub use http::*;
#[allow(unused_imports)]
pub use records::*;

use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection};
use ed25519_dalek::SigningKey;
use gpuledger::core::keys;
use gpuledger::core::record::Role;
use gpuledger::store::{self, Ledger};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A database that exists for one test.
pub struct TestDb {
    pub url: String,
    pub backend: &'static str,
    drop_pg: Option<(String, String)>,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some((admin, name)) = self.drop_pg.take() {
            if let Ok(mut c) = PgConnection::establish(&admin) {
                let _ = c.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
            }
        }
    }
}

pub fn sqlite() -> TestDb {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("test.db").display());
    TestDb {
        url,
        backend: "sqlite",
        drop_pg: None,
        _dir: Some(dir),
    }
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A fresh PostgreSQL database, or `None` (after saying so loudly) when none is configured.
pub fn postgres() -> Option<TestDb> {
    let admin = match std::env::var("GPULEDGER_TEST_DATABASE_URL") {
        Ok(u) if !u.is_empty() => u,
        _ => {
            if std::env::var("GPULEDGER_REQUIRE_POSTGRES").as_deref() == Ok("1") {
                panic!("GPULEDGER_REQUIRE_POSTGRES=1 but GPULEDGER_TEST_DATABASE_URL is not set");
            }
            // Written straight to stderr so the test harness does not swallow it.
            let _ = writeln!(
                std::io::stderr(),
                "\n*** SKIPPED the PostgreSQL half of this test: set GPULEDGER_TEST_DATABASE_URL \
                 (e.g. postgres://postgres@127.0.0.1:5432/postgres) to run it ***"
            );
            return None;
        }
    };
    let name = format!(
        "gpuledger_t_{}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    let mut c = PgConnection::establish(&admin)
        .unwrap_or_else(|e| panic!("cannot reach PostgreSQL at {admin}: {e}"));
    c.batch_execute(&format!("CREATE DATABASE {name}"))
        .expect("create test database");
    let base = admin
        .rsplit_once('/')
        .map(|(b, _)| b)
        .expect("URL has a database path");
    Some(TestDb {
        url: format!("{base}/{name}"),
        backend: "postgres",
        drop_pg: Some((admin, name)),
        _dir: None,
    })
}

impl TestDb {
    /// A copy of this database as it is now (`VACUUM INTO` on SQLite, `CREATE DATABASE ..
    /// TEMPLATE` on PostgreSQL, which needs no other session on it: a killed server's sessions
    /// end a moment after its sockets close, so this retries for a few seconds), dropped or
    /// deleted with the copy. A snapshot: a standby that fell behind, an old backup, a fork.
    pub fn copy(&self) -> TestDb {
        if self.backend == "sqlite" {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("copy.db");
            let mut c = gpuledger::store::connect(&self.url).unwrap();
            let gpuledger::store::DbConn::Sqlite(sq) = &mut c else {
                unreachable!("a SQLite test database")
            };
            diesel::RunQueryDsl::execute(
                diesel::sql_query(format!("VACUUM INTO '{}'", path.display())),
                sq,
            )
            .unwrap();
            return TestDb {
                url: format!("sqlite://{}", path.display()),
                backend: "sqlite",
                drop_pg: None,
                _dir: Some(dir),
            };
        }
        let (admin, name) = self.drop_pg.clone().expect("a PostgreSQL test database");
        let copy = format!("{name}_c{}", COUNTER.fetch_add(1, Ordering::Relaxed));
        let mut c = PgConnection::establish(&admin).unwrap();
        let mut tries = 0;
        while let Err(e) = c.batch_execute(&format!("CREATE DATABASE {copy} TEMPLATE {name}")) {
            tries += 1;
            assert!(tries < 100, "cannot copy the database: {e}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let base = self.url.rsplit_once('/').map(|(b, _)| b).unwrap();
        TestDb {
            url: format!("{base}/{copy}"),
            backend: "postgres",
            drop_pg: Some((admin, copy)),
            _dir: None,
        }
    }
}

/// Defines `NAME_sqlite` and `NAME_postgres` tests that call `body(&TestDb)`.
#[macro_export]
macro_rules! both_backends {
    ($name:ident, $body:expr) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            #[test]
            fn sqlite() {
                let db = $crate::common::sqlite();
                ($body)(&db);
            }
            #[test]
            fn postgres() {
                if let Some(db) = $crate::common::postgres() {
                    ($body)(&db);
                }
            }
        }
    };
}

/// The end of a 10-second measurement slot for `seq`: slots of one signer never overlap, and
/// the same seq always gives the same record (the base is fixed for the test process).
pub fn slot(seq: u64) -> gpuledger::core::time::Timestamp {
    use gpuledger::core::time::Timestamp;
    static BASE: std::sync::OnceLock<Timestamp> = std::sync::OnceLock::new();
    let base = *BASE.get_or_init(|| Timestamp::now().plus(-5 * 86_400));
    base.plus(10 * seq as i64)
}

/// The fixed log key of the tests.
pub fn log_key() -> SigningKey {
    gpuledger::sample::key("test-log")
}

/// Initialises `db` (origin [`gpuledger::sample::ORIGIN`]) and opens it. Opening writes the
/// log's policy entry, so the log starts with 1 entry.
pub fn open(db: &TestDb) -> Ledger {
    store::init(&db.url, &log_key(), gpuledger::sample::ORIGIN).expect("init");
    Ledger::open(&db.url, log_key()).expect("open")
}

/// [`open`] with the ledger clock at `now` from the first entry on (the log's receive times
/// never decrease, so a log whose entries a test dates in the past starts there).
#[allow(dead_code)]
pub fn open_at(db: &TestDb, now: gpuledger::core::time::Timestamp) -> Ledger {
    store::init(&db.url, &log_key(), gpuledger::sample::ORIGIN).expect("init");
    Ledger::open_at(&db.url, log_key(), now).expect("open")
}

/// The regions test keys are registered for.
pub const TEST_REGIONS: [&str; 4] = ["cn-east-sh", "cn-north-imx", "east", "west"];

/// Registers `name` with a deterministic key and role, for node `name` (node keys) and the
/// [`TEST_REGIONS`]; returns the key.
pub fn signer(ledger: &Ledger, name: &str, role: Role) -> SigningKey {
    signer_for(ledger, name, role, &[name])
}

/// The test fleet's node: every GPU model the tests' records name, 8 of each (64 GPUs), each
/// drawing at most `MAX_WATTS_PER_GPU`, in the sample region.
pub fn test_node(node: &str) -> gpuledger::core::record::Body {
    test_node_in(node, gpuledger::sample::REGION)
}

/// A [`test_node`] in `region` (a record names its node's region, PROTOCOL §6.7 fleet).
pub fn test_node_in(node: &str, region: &str) -> gpuledger::core::record::Body {
    use gpuledger::core::record::{Body, NodeGpu, NodeRegistered};
    Body::NodeRegistered(NodeRegistered {
        node: node.into(),
        region: region.into(),
        hub: None,
        gpus: (0..64)
            .map(|i| NodeGpu {
                index: i,
                uuid: format!("GPU-test-{node}-{i}"),
                model: test_node_model(i).into(),
                mig: None,
            })
            .collect(),
        max_watts_per_gpu: rust_decimal::Decimal::from(gpuledger::core::limits::MAX_WATTS_PER_GPU),
    })
}

/// The GPU models of a [`test_node`] (64 GPUs, the most a node may have): 32 of the sample
/// model, so that four tenants' [`parties`] leases (8 each) fit one node, 16 H100s, 4 H20-96G
/// and 4 H100-SXM5-80GB, and 2 of each other model tests name.
pub fn test_node_model(index: u32) -> &'static str {
    match index {
        0..32 => gpuledger::sample::MODEL,
        32..48 => "H100",
        48..52 => "H20-96G",
        52..56 => "H100-SXM5-80GB",
        56..58 => "L40S-48G",
        58..60 => "A100-SXM-80G",
        60..62 => "A100",
        _ => "L4",
    }
}

/// A lease body: `id` of `tenant`, billed as `class`, open-ended from
/// [`gpuledger::sample::LEASE_FROM`], covering on each `(node, model, count)` up to `count`
/// GPUs of `model` of `node`.
pub fn lease_body(
    id: &str,
    tenant: &str,
    class: gpuledger::core::rating::LeaseClass,
    items: &[(&str, &str, u32)],
) -> gpuledger::core::record::Body {
    use gpuledger::core::record::{Body, LeaseNode, LeaseRegistered};
    Body::LeaseRegistered(LeaseRegistered {
        lease: id.into(),
        tenant: tenant.into(),
        class,
        from: gpuledger::core::time::Timestamp::from_unix(gpuledger::sample::LEASE_FROM).unwrap(),
        to: None,
        nodes: items
            .iter()
            .map(|(node, model, count)| LeaseNode {
                node: (*node).into(),
                gpus: None,
                share: None,
                gpu_model: Some((*model).into()),
                count: Some((*count).into()),
            })
            .collect(),
    })
}

/// Registers [`lease_body`]`(id, tenant, class, items)`, its nodes first as [`test_node`]s
/// where they are not registered.
pub fn lease_with(
    ledger: &Ledger,
    id: &str,
    tenant: &str,
    class: gpuledger::core::rating::LeaseClass,
    items: &[(&str, &str, u32)],
) {
    for (node, _, _) in items {
        ensure_node(ledger, node);
    }
    ledger
        .append_ledger_entry(lease_body(id, tenant, class, items))
        .expect("register lease");
}

/// The node [`parties`] leases each tenant 8 sample-model GPUs on (registered first, as a
/// [`test_node`], if it is not); [`parties_on`] names others.
pub const TEST_NODE: &str = "node-1";

/// Registers `node` as a [`test_node`] unless the log has it (node keys name registered nodes
/// only).
pub fn ensure_node(ledger: &Ledger, node: &str) {
    ensure_node_in(ledger, node, gpuledger::sample::REGION)
}

/// Registers each of `nodes` (node, region) as a [`test_node_in`] its region unless the log
/// has it: before the keys that name them, for tests whose records are in other regions than
/// the sample region.
pub fn ensure_nodes_in(ledger: &Ledger, nodes: &[(&str, &str)]) {
    for (node, region) in nodes {
        ensure_node_in(ledger, node, region);
    }
}

/// [`ensure_node`] in `region`.
pub fn ensure_node_in(ledger: &Ledger, node: &str, region: &str) {
    match ledger.append_ledger_entry(test_node_in(node, region)) {
        Ok(_) | Err(gpuledger::store::StoreError::AlreadyExists(_)) => {}
        Err(e) => panic!("register node {node}: {e}"),
    }
}

/// Like [`signer`], for the node ids `nodes` (node keys only), which are registered first as
/// [`test_node`]s if they are not.
pub fn signer_for(ledger: &Ledger, name: &str, role: Role, nodes: &[&str]) -> SigningKey {
    if role == Role::Node {
        for n in nodes {
            ensure_node(ledger, n);
        }
    }
    let k = gpuledger::sample::key(name);
    let nodes = (role == Role::Node).then(|| nodes.iter().map(|n| n.to_string()).collect());
    let scope = gpuledger::core::record::KeyScope::new(
        nodes,
        TEST_REGIONS.iter().map(|r| r.to_string()).collect(),
    );
    ledger
        .register_key(
            name,
            role,
            &keys::encode_public(&k.verifying_key()),
            Some(scope),
        )
        .expect("register");
    k
}

/// Registers lease `id` of `tenant` (on-demand, open-ended), covering 8 sample-model GPUs of
/// [`TEST_NODE`] (registered first if it is not).
pub fn lease(ledger: &Ledger, id: &str, tenant: &str) {
    ensure_node(ledger, TEST_NODE);
    ledger
        .append_ledger_entry(gpuledger::sample::lease_on(id, tenant, &[TEST_NODE], 8))
        .expect("register lease");
}

/// Registers `tenants` and their sample leases (`lease-<tenant>`, which sample usage records
/// name: 8 sample-model GPUs of [`TEST_NODE`]), so that their records are admitted.
pub fn parties(ledger: &Ledger, tenants: &[&str]) {
    parties_on(ledger, tenants, &[TEST_NODE]);
}

/// [`parties`] with sample leases on each of `nodes` (registered first, as [`test_node`]s, if
/// they are not): at most four tenants' leases fit one node.
pub fn parties_on(ledger: &Ledger, tenants: &[&str], nodes: &[&str]) {
    for n in nodes {
        ensure_node(ledger, n);
    }
    for t in tenants {
        for body in gpuledger::sample::parties(t, nodes, 8) {
            ledger
                .append_ledger_entry(body)
                .expect("register tenant and lease");
        }
    }
}

/// Starts `gpuledger serve --listen 127.0.0.1:PORT --database-url URL --log-key KEY [EXTRA…]`
/// (port 0: any free port) and waits until it listens; returns the child and its base URL.
pub fn spawn_serve(
    url: &str,
    log_key: &std::path::Path,
    port: u16,
    extra: &[&str],
) -> (std::process::Child, String) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_gpuledger"))
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--database-url",
            url,
            "--log-key",
        ])
        .arg(log_key)
        .args(extra)
        .env("GPULEDGER_LOG", "error")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let base = listening(&mut child, "serve");
    (child, base)
}

/// The base URL a just-spawned `serve` or `witness serve` (stdout piped) announces in its
/// first line, `listening on <URL>`; waits for it.
pub fn listening(child: &mut std::process::Child, what: &str) -> String {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout piped"))
        .read_line(&mut line)
        .unwrap();
    line.trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("{what} said {line:?}"))
        .to_owned()
}

/// A child process that is killed and reaped however the test ends.
pub struct Proc(pub std::process::Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `gpuledger` binary under test.
pub fn bin() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_gpuledger"))
}

/// A ledger ready for real processes: initialised, `signers` registered, the log key in a file.
pub struct Setup {
    pub dir: tempfile::TempDir,
    pub url: String,
    pub log_key: std::path::PathBuf,
}

/// The tenants and leases the agent tests' lease files name: (lease, tenant).
pub const AGENT_LEASES: [(&str, &str); 3] = [
    ("l-a", "tenant-a"),
    ("l-b", "tenant-b"),
    ("l-c", "tenant-c"),
];

/// Initialises `db`, registers `signers` and the [`AGENT_LEASES`] (and their tenants; each
/// lease covers 8 sample-model GPUs of every node signer, and of [`TEST_NODE`]), and writes the
/// log key (0600) into a fresh directory. (The tenants' sample leases are not registered:
/// [`parties`] would refuse them, as a fourth and fifth lease of 8 overbook a node.)
pub fn setup(db: &TestDb, signers: &[(&str, Role)]) -> Setup {
    let ledger = open(db);
    for (s, r) in signers {
        signer(&ledger, s, *r);
    }
    let mut nodes: Vec<&str> = signers
        .iter()
        .filter(|(_, r)| *r == Role::Node)
        .map(|(s, _)| *s)
        .collect();
    if !nodes.contains(&TEST_NODE) {
        nodes.push(TEST_NODE);
    }
    for n in &nodes {
        ensure_node(&ledger, n);
    }
    for (l, t) in AGENT_LEASES {
        ledger
            .append_ledger_entry(gpuledger::core::record::Body::TenantRegistered(
                gpuledger::core::record::TenantRegistered { tenant: t.into() },
            ))
            .expect("register tenant");
        ledger
            .append_ledger_entry(gpuledger::sample::lease_on(l, t, &nodes, 8))
            .expect("register lease");
    }
    drop(ledger);
    let dir = tempfile::tempdir().expect("tempdir");
    Setup {
        log_key: log_key_file(dir.path()),
        dir,
        url: db.url.clone(),
    }
}

/// Whether python3 with the Python verifier's packages is here. Without them the caller's
/// Python half is skipped, loudly; under `GPULEDGER_REQUIRE_PYTHON_VERIFIER=1` it fails.
pub fn python_verifier_ready() -> bool {
    let ready = std::process::Command::new("python3")
        .args(["-c", "import cryptography, nacl, rfc8785"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ready {
        if std::env::var("GPULEDGER_REQUIRE_PYTHON_VERIFIER").as_deref() == Ok("1") {
            panic!("GPULEDGER_REQUIRE_PYTHON_VERIFIER=1 but python3 with cryptography and rfc8785 is missing");
        }
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED the Python verifier half: run `pip install -r verifiers/python/requirements.txt` ***"
        );
    }
    ready
}

/// `python3 verifiers/python/gpuledger_verify.py`, ready for its arguments (check
/// [`python_verifier_ready`] first).
pub fn python_verifier() -> std::process::Command {
    let mut c = std::process::Command::new("python3");
    c.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/verifiers/python/gpuledger_verify.py"
    ));
    c
}

impl Setup {
    /// Starts `gpuledger serve` on `port` (0: any) for this ledger, checkpointing every
    /// second with one worker; returns it and its base URL.
    pub fn serve(&self, port: u16) -> (Proc, String) {
        let (child, base) = spawn_serve(
            &self.url,
            &self.log_key,
            port,
            &["--checkpoint-interval-seconds", "1", "--workers", "1"],
        );
        (Proc(child), base)
    }
}

/// Writes the tests' log key (0600) as `dir/log.key`; returns its path.
pub fn log_key_file(dir: &Path) -> PathBuf {
    let path = dir.join("log.key");
    gpuledger::keyfile::write_new(&path, &log_key()).expect("log key file");
    path
}

/// Runs verify-log's checks on the database at `url`, which must pass; its report.
pub fn verified(url: &str) -> store::verify::Report {
    let mut conn = store::connect(url).unwrap();
    store::verify::verify_log(&mut conn, None, &mut |_, _| {})
        .unwrap_or_else(|e| panic!("verify-log: {e}"))
}

/// Every entry row of the log at `url`, once verify-log's checks passed on it.
pub fn verified_rows(url: &str) -> Vec<gpuledger::store::read::EntryRow> {
    let size = verified(url).size;
    let mut conn = store::connect(url).unwrap();
    store::read::entries_range(&mut conn, 0, size).unwrap()
}

/// Runs `gpuledger verify ARGS --log-key LOG_KEY` in `dir` and asserts that it passes,
/// saying `says` (`PASS…`) at the start.
pub fn assert_verify_passes(dir: &Path, args: &[&str], log_key: &str, says: &str) {
    let out = bin()
        .arg("verify")
        .args(args)
        .args(["--log-key", log_key])
        .current_dir(dir)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.starts_with(says),
        "gpuledger verify {args:?}: {said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The long flags (`--name`) a `--help` text lists, `--help` itself left out.
pub fn help_flags(help: &str) -> Vec<&str> {
    help.split_whitespace()
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric() && c != '-'))
        .filter(|w| *w != "--help")
        .collect()
}

/// Those of `words` that `doc` does not name in backticks (`` `word` ``).
pub fn not_in_backticks<'a>(doc: &str, words: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    words
        .into_iter()
        .filter(|w| !doc.contains(&format!("`{w}`")))
        .collect()
}

/// libfaketime's library (Debian `libfaketime`).
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The environment that gives a spawned process the wall clock the file `offset` says
/// (libfaketime's `+40d`, `-1h`, `+0`, re-read at most every second), its monotonic clocks
/// real; `None`, after saying loudly that the test is skipped, without libfaketime (which
/// `GPULEDGER_REQUIRE_FAKETIME=1`, set by `.ci/run`, turns into a failure).
#[allow(dead_code)]
pub fn faketime_env(offset: &Path) -> Option<Vec<(&'static str, String)>> {
    if !Path::new(LIBFAKETIME).exists() {
        if std::env::var("GPULEDGER_REQUIRE_FAKETIME").as_deref() == Ok("1") {
            panic!("GPULEDGER_REQUIRE_FAKETIME=1 but {LIBFAKETIME} is missing (apt-get install libfaketime)");
        }
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIPPED a faked-clock test: {LIBFAKETIME} is missing (apt-get install libfaketime) ***"
        );
        return None;
    }
    Some(vec![
        ("LD_PRELOAD", LIBFAKETIME.to_owned()),
        ("FAKETIME_TIMESTAMP_FILE", offset.display().to_string()),
        ("FAKETIME_CACHE_DURATION", "1".to_owned()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
        ("FAKETIME_DONT_RESET", "1".to_owned()),
    ])
}

/// Every file under `dir`, recursively, sorted.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The invoice recomputed from its evidence bundle (version 3, as the ledger writes it for a
/// log of the sample origin and [`log_key`]), as `gpuledger verify --invoice` does; `edit` may
/// alter the bundle's lines first (a tampering test).
#[allow(dead_code)]
pub fn recompute_invoice(
    ledger: &Ledger,
    inv: &gpuledger::core::invoice::InvoiceDoc,
    edit: impl Fn(&mut Vec<Vec<u8>>),
) -> Result<gpuledger::core::invoice::InvoiceDoc, gpuledger::core::bundle::Failure> {
    use gpuledger::core::bundle;
    let mut lines = Vec::new();
    ledger
        .reads()
        .run(|c| {
            store::invoices::write_invoice_bundle_as(c, inv, bundle::Format::V3, &mut |mut l| {
                l.pop();
                lines.push(l);
                Ok(())
            })
        })
        .unwrap();
    edit(&mut lines);
    let vkey = gpuledger::core::checkpoint::LogSigner::new(gpuledger::sample::ORIGIN, log_key())
        .unwrap()
        .verifier_key();
    let (_, check) = bundle::verify_bundle(
        lines.into_iter().map(Ok),
        &vkey,
        |h, a| gpuledger::core::invoice::InvoiceCheck::start(inv.clone(), h, a),
        &mut |_| {},
    )?;
    check.finish()
}
