//! Real processes over real HTTP: a log initialised by `gpuledger init`, `gpuledger serve`
//! children on 127.0.0.1, and one HTTP client whose answers are read whole (a 4xx or 5xx is an
//! answer, not an error).

use super::TestDb;
use ed25519_dalek::SigningKey;
use gpuledger::core::envelope::Envelope;
use gpuledger::sample;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Longest wait for a server to print its address.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest wait for one HTTP exchange.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest wait for the periodic checkpoint to catch up with the log.
pub const CHECKPOINT_TIMEOUT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

/// Runs `gpuledger init` on `url` (origin [`sample::ORIGIN`]), writing the log key to `key`;
/// returns the first admin token it printed.
pub fn init_cli(url: &str, key: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuledger"))
        .args(["init", "--database-url", url, "--origin", sample::ORIGIN])
        .arg("--log-key")
        .arg(key)
        .env_remove("GPULEDGER_DATABASE_URL")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "gpuledger init failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("admin token:"))
        .unwrap_or_else(|| panic!("no `admin token:` line in {stdout}"))
        .trim()
        .to_owned()
}

/// An initialised log: its database, a directory with the log key and server logs, and the
/// first admin token printed by `gpuledger init`.
pub struct Log<'a> {
    pub db: &'a TestDb,
    pub dir: tempfile::TempDir,
    pub admin: String,
    servers_started: std::cell::Cell<u32>,
}

/// Initialises `db` with `gpuledger init`.
pub fn init(db: &TestDb) -> Log<'_> {
    let dir = tempfile::tempdir().unwrap();
    let admin = init_cli(&db.url, &dir.path().join("log.key"));
    Log {
        db,
        dir,
        admin,
        servers_started: std::cell::Cell::new(0),
    }
}

impl Log<'_> {
    pub fn key_path(&self) -> PathBuf {
        self.dir.path().join("log.key")
    }

    /// Appends ledger entries (tenants, leases, prices) received at `at`, before any server
    /// has written to the log (its receive times never decrease). A test whose records are
    /// days old writes the prices in force for them this way, as no price may take effect more
    /// than the policy's skew before it is logged (PROTOCOL §6.7). Returns their indexes.
    pub fn write_at(
        &self,
        at: gpuledger::core::time::Timestamp,
        bodies: impl IntoIterator<Item = gpuledger::core::record::Body>,
    ) -> Vec<u64> {
        let key = gpuledger::keyfile::read(&self.key_path()).unwrap();
        let ledger = gpuledger::store::Ledger::open_at(&self.db.url, key, at).unwrap();
        bodies
            .into_iter()
            .map(|b| ledger.append_ledger_entry(b).expect("ledger entry"))
            .collect()
    }

    /// Starts `gpuledger serve` on a free port, checkpointing every second.
    pub fn serve(&self) -> Server {
        self.serve_with(&[])
    }

    /// [`Log::serve`] with more arguments for `serve`.
    pub fn serve_with(&self, extra: &[&str]) -> Server {
        let n = self.servers_started.get();
        self.servers_started.set(n + 1);
        Server::start_with(&self.db.url, &self.key_path(), self.dir.path(), n, extra)
    }

    /// Runs `gpuledger verify-log`; returns its exit code and output.
    pub fn verify_log(&self) -> (Option<i32>, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_gpuledger"))
            .args(["verify-log", "--database-url", &self.db.url])
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

    pub fn assert_verifies(&self, size: u64) {
        let (code, out) = self.verify_log();
        assert_eq!(code, Some(0), "verify-log: {out}");
        assert!(
            out.starts_with(&format!("PASS: {size} entries")),
            "verify-log: {out}"
        );
    }
}

/// A `gpuledger serve` child process; SIGKILLed and reaped when dropped.
pub struct Server {
    child: Child,
    pub base: String,
}

impl Server {
    /// Starts `gpuledger serve` on `url` with the log key `key`, checkpointing every second;
    /// its stderr goes to `dir/serve-N.log`.
    pub fn start(url: &str, key: &Path, dir: &Path, n: u32) -> Server {
        Server::start_with(url, key, dir, n, &[])
    }

    /// [`Server::start`] with more arguments for `serve`.
    pub fn start_with(url: &str, key: &Path, dir: &Path, n: u32, extra: &[&str]) -> Server {
        Server::start_env(url, key, dir, n, extra, &[])
    }

    /// [`Server::start_with`] with more environment variables (a faked clock).
    pub fn start_env(
        url: &str,
        key: &Path,
        dir: &Path,
        n: u32,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> Server {
        let log_path = dir.join(format!("serve-{n}.log"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_gpuledger"))
            .args(["serve", "--listen", "127.0.0.1:0", "--database-url", url])
            .args(["--checkpoint-interval-seconds", "1", "--workers", "2"])
            .arg("--log-key")
            .arg(key)
            .args(extra)
            .env_remove("GPULEDGER_DATABASE_URL")
            .env_remove("GPULEDGER_CONFIG")
            .env("GPULEDGER_LOG", "warn")
            .envs(envs.iter().copied())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .unwrap();
        // Read the first line on a thread (with a timeout here), then keep draining stdout.
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = tx.send(lines.next());
            for _ in lines {}
        });
        let first = rx.recv_timeout(START_TIMEOUT);
        let base = match &first {
            Ok(Some(Ok(line))) => line.strip_prefix("listening on ").map(str::to_owned),
            _ => None,
        };
        match base {
            Some(base) => Server { child, base },
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "gpuledger serve did not start ({first:?}): {}",
                    std::fs::read_to_string(&log_path).unwrap_or_default()
                );
            }
        }
    }

    pub fn http(&self) -> Http {
        Http::new(&self.base)
    }

    /// SIGKILL, then reap.
    pub fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------------------------

/// An answer, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub content_type: String,
    pub www_authenticate: Option<String>,
    /// The `Retry-After` header, if any.
    pub retry_after: Option<String>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8(self.body.clone()).expect("UTF-8 body")
    }

    /// The body as text, however it is encoded (for messages).
    pub fn lossy(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.lossy()))
    }

    /// The JSON body, or `null` when there is none (or it is not JSON).
    pub fn json_or_null(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// Asserts this status and a JSON content type; returns the JSON body.
    pub fn ok_json(&self, status: u16) -> Value {
        assert_eq!(self.status, status, "body: {}", self.lossy());
        assert!(
            self.content_type.starts_with("application/json"),
            "content type {:?}",
            self.content_type
        );
        self.json()
    }

    /// Whether this is an RFC 9457 problem with this status and `urn:gpuledger:problem:<slug>`
    /// (with a title and a detail, and `WWW-Authenticate: Bearer` on a 401): the problem, or
    /// what is wrong.
    pub fn problem(&self, status: u16, slug: &str) -> Result<Value, String> {
        if self.status != status {
            return Err(format!(
                "status {} (not {status}): body {}",
                self.status,
                self.lossy()
            ));
        }
        if self.content_type != "application/problem+json" {
            return Err(format!("content type {:?}", self.content_type));
        }
        let p: Value = serde_json::from_slice(&self.body)
            .map_err(|e| format!("not JSON ({e}): {}", self.lossy()))?;
        if p["type"] != json!(format!("urn:gpuledger:problem:{slug}")) {
            return Err(format!("not a {slug} problem: {p}"));
        }
        if p["status"] != json!(status) {
            return Err(format!("status member: {p}"));
        }
        for member in ["title", "detail"] {
            if p[member].as_str().is_none_or(str::is_empty) {
                return Err(format!("problem without {member}: {p}"));
            }
        }
        // `Bearer`, or `Bearer error="invalid_token", …` for an expired or revoked token.
        let bearer = |w: &str| w == "Bearer" || w.starts_with("Bearer ");
        if status == 401 && !self.www_authenticate.as_deref().is_some_and(bearer) {
            return Err("401 without WWW-Authenticate: Bearer".into());
        }
        Ok(p)
    }

    /// Asserts [`Reply::problem`]; returns the problem.
    pub fn assert_problem(&self, status: u16, slug: &str, what: &str) -> Value {
        self.problem(status, slug)
            .unwrap_or_else(|e| panic!("{what}: {e}"))
    }

    /// Asserts [`Reply::problem`]; returns `reason field` of its first error (`errors[0]`,
    /// `-` for a missing member).
    pub fn first_error(&self, status: u16, slug: &str) -> String {
        let p = self.assert_problem(status, slug, "first_error");
        let member = |m: &str| p["errors"][0][m].as_str().unwrap_or("-").to_owned();
        format!("{} {}", member("reason"), member("field"))
    }
}

/// The answer `r` to `method path`, which must have come.
fn answered(method: &str, path: &str, r: Result<Reply, String>) -> Reply {
    r.unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// A client of one server (`base`, e.g. `http://127.0.0.1:PORT`).
#[derive(Clone)]
pub struct Http {
    pub agent: ureq::Agent,
    pub base: String,
}

impl Http {
    pub fn new(base: &str) -> Http {
        Http::with_timeout(base, HTTP_TIMEOUT)
    }

    /// A client whose exchanges each end after `timeout`.
    pub fn with_timeout(base: &str, timeout: Duration) -> Http {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .build()
            .into();
        Http {
            agent,
            base: base.to_owned(),
        }
    }

    /// Reads an answer whole (up to 64 MiB).
    pub fn read(r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Result<Reply, String> {
        let mut r = r.map_err(|e| e.to_string())?;
        let header = |name: &str| {
            r.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let content_type = header("content-type").unwrap_or_default();
        let www_authenticate = header("www-authenticate");
        let retry_after = header("retry-after");
        let status = r.status().as_u16();
        let body = r
            .body_mut()
            .with_config()
            .limit(64 * 1024 * 1024)
            .read_to_vec()
            .map_err(|e| e.to_string())?;
        Ok(Reply {
            status,
            content_type,
            www_authenticate,
            retry_after,
            body,
        })
    }

    /// `method path` with a bearer `token` and, for POST, `body` of `content_type`; an error
    /// only when no answer came.
    pub fn try_request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        content_type: Option<&str>,
        body: &[u8],
    ) -> Result<Reply, String> {
        let url = format!("{}{path}", self.base);
        let auth = token.map(|t| format!("Bearer {t}"));
        macro_rules! headers {
            ($b:expr) => {{
                let mut b = $b;
                if let Some(a) = &auth {
                    b = b.header("Authorization", a);
                }
                b
            }};
        }
        let r = match method {
            "GET" => headers!(self.agent.get(&url)).call(),
            "DELETE" => headers!(self.agent.delete(&url)).call(),
            "POST" => {
                let mut b = headers!(self.agent.post(&url));
                if let Some(ct) = content_type {
                    b = b.header("Content-Type", ct);
                }
                b.send(body)
            }
            "PATCH" => {
                let mut b = headers!(self.agent.patch(&url));
                if let Some(ct) = content_type {
                    b = b.header("Content-Type", ct);
                }
                b.send(body)
            }
            "PUT" => {
                let mut b = headers!(self.agent.put(&url));
                if let Some(ct) = content_type {
                    b = b.header("Content-Type", ct);
                }
                b.send(body)
            }
            m => panic!("method {m}"),
        };
        Self::read(r)
    }

    pub fn get(&self, path: &str, token: Option<&str>) -> Reply {
        answered("GET", path, self.try_request("GET", path, token, None, b""))
    }

    pub fn delete(&self, path: &str, token: Option<&str>) -> Reply {
        answered(
            "DELETE",
            path,
            self.try_request("DELETE", path, token, None, b""),
        )
    }

    /// `POST path` with a body of this content type.
    pub fn post_bytes(&self, path: &str, content_type: Option<&str>, body: &[u8]) -> Reply {
        answered(
            "POST",
            path,
            self.try_request("POST", path, None, content_type, body),
        )
    }

    /// `PUT path` with a JSON body.
    pub fn put(&self, path: &str, token: Option<&str>, body: &Value) -> Reply {
        let body = body.to_string();
        let r = self.try_request(
            "PUT",
            path,
            token,
            Some("application/json"),
            body.as_bytes(),
        );
        answered("PUT", path, r)
    }

    pub fn post(&self, path: &str, token: Option<&str>, body: &Value) -> Reply {
        let body = body.to_string();
        let r = self.try_request(
            "POST",
            path,
            token,
            Some("application/json"),
            body.as_bytes(),
        );
        answered("POST", path, r)
    }

    /// `GET path`, or `POST path` with `body` (`{}` when none): the status and the JSON body
    /// (`null` when there is none).
    pub fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let r = match method {
            "GET" => self.get(path, token),
            _ => self.post(path, token, &body.unwrap_or(json!({}))),
        };
        (r.status, r.json_or_null())
    }

    pub fn try_post_records(&self, batch: &[Envelope]) -> Result<Reply, String> {
        let body = serde_json::to_vec(batch).unwrap();
        self.try_request("POST", "/v1/records", None, Some("application/json"), &body)
    }

    /// Posts records and returns the 200 answer's JSON.
    pub fn post_records(&self, batch: &[Envelope]) -> Value {
        self.try_post_records(batch).unwrap().ok_json(200)
    }

    /// The log size from `GET /v1/log`.
    pub fn size(&self) -> u64 {
        self.get("/v1/log", None).ok_json(200)["size"]
            .as_u64()
            .unwrap()
    }

    /// Every entry, read page by page with `token`.
    pub fn all_entries(&self, token: &str) -> Vec<Value> {
        let size = self.size();
        let mut out = Vec::new();
        let mut start = 0;
        while start < size {
            let end = (start + 1000).min(size);
            let page = self
                .get(&format!("/v1/entries?start={start}&end={end}"), Some(token))
                .ok_json(200);
            out.extend(page["entries"].as_array().unwrap().iter().cloned());
            start = end;
        }
        out
    }

    /// Creates a token (`POST /v1/tokens` with `body`, as `admin`); returns the 201 answer.
    pub fn token(&self, admin: &str, body: Value) -> Value {
        self.post("/v1/tokens", Some(admin), &body).ok_json(201)
    }

    /// The secret of a new token (see [`Http::token`]).
    pub fn secret(&self, admin: &str, body: Value) -> String {
        self.token(admin, body)["token"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// A new token of tenant `tenant`'s role, issued by `admin`: its secret.
    pub fn tenant_secret(&self, admin: &str, tenant: &str) -> String {
        self.secret(admin, json!({"role": "tenant", "tenant": tenant}))
    }

    /// Registers node `node` as a [`super::test_node`] unless the log has it (201 or 409).
    pub fn node(&self, admin: &str, node: &str) {
        self.node_in(admin, node, sample::REGION)
    }

    /// [`Http::node`] in `region`.
    pub fn node_in(&self, admin: &str, node: &str, region: &str) {
        let body = super::test_node_in(node, region).to_value();
        let r = self.post("/v1/nodes", Some(admin), &body);
        assert!(matches!(r.status, 201 | 409), "node {node}: {}", r.lossy());
    }

    /// Registers a signer: a node key for node `signer` (registered first if it is not),
    /// either key for the sample region.
    pub fn register(&self, admin: &str, signer: &str, role: &str, key: &SigningKey) -> Value {
        let mut body = json!({"id": signer, "role": role, "public_key": super::public(key),
                              "regions": [sample::REGION]});
        if role == "node" {
            self.node(admin, signer);
            body["nodes"] = json!([signer]);
        }
        self.post("/v1/signers", Some(admin), &body).ok_json(201)
    }

    /// Registers each tenant (if new) and its sample lease (`lease-<tenant>`, which sample
    /// usage records name: 8 sample-model GPUs of `super::TEST_NODE`), so their records are
    /// admitted.
    pub fn parties(&self, admin: &str, tenants: &[&str]) {
        self.parties_on(admin, tenants, &[super::TEST_NODE]);
    }

    /// [`Http::parties`] with sample leases on each of `nodes` (registered first if they are
    /// not): at most four tenants' leases fit one node.
    pub fn parties_on(&self, admin: &str, tenants: &[&str], nodes: &[&str]) {
        for n in nodes {
            self.node(admin, n);
        }
        for t in tenants {
            let r = self.post("/v1/tenants", Some(admin), &json!({"id": t, "name": t}));
            assert!(matches!(r.status, 201 | 409), "tenant {t}: {}", r.lossy());
            let lease = sample::lease_on(&sample::lease(t), t, nodes, 8);
            self.post("/v1/leases", Some(admin), &lease.to_value())
                .ok_json(201);
        }
    }

    /// Posts `count`-GPU sample usage records of `node` (its sample key) for `tenant`, seqs
    /// `seqs` (10-second slots, `super::slot`), and asserts each was accepted.
    pub fn post_usage(&self, node: &str, tenant: &str, seqs: std::ops::Range<u64>, count: i64) {
        let key = sample::key(node);
        let batch: Vec<_> = seqs
            .map(|seq| {
                let n = rust_decimal::Decimal::from(count);
                sample::usage(node, &key, seq, tenant, n, super::slot(seq))
            })
            .collect();
        let r = self.post_records(&batch);
        for o in r["outcomes"].as_array().unwrap() {
            assert_eq!(o["status"], "accepted", "{r}");
        }
    }

    /// Waits until `GET /v1/checkpoint` covers `size` entries; returns the note.
    pub fn checkpoint_at(&self, size: u64, verifier_key: &str) -> String {
        use gpuledger::core::checkpoint::verify_checkpoint;
        let started = Instant::now();
        loop {
            let r = self.get("/v1/checkpoint", None);
            assert_eq!(r.status, 200);
            assert!(r.content_type.starts_with("text/plain"));
            let note = r.text();
            let cp = verify_checkpoint(note.as_bytes(), verifier_key)
                .unwrap_or_else(|e| panic!("checkpoint does not verify: {e}\n{note}"));
            assert!(cp.size() <= size, "checkpoint beyond the log");
            if cp.size() == size {
                return note;
            }
            assert!(
                started.elapsed() < CHECKPOINT_TIMEOUT,
                "no checkpoint of size {size} after {CHECKPOINT_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// JSON answers
// ---------------------------------------------------------------------------------------------

/// The elements of the JSON array `v`.
pub fn items(v: &serde_json::Value) -> &[serde_json::Value] {
    v.as_array().unwrap_or_else(|| panic!("not an array: {v}"))
}

/// The member at `pointer` (a JSON pointer, e.g. `/entry/envelope/kind`) of each element of
/// the JSON array `v` (`null` where there is none).
pub fn each(v: &serde_json::Value, pointer: &str) -> Vec<serde_json::Value> {
    items(v)
        .iter()
        .map(|e| e.pointer(pointer).cloned().unwrap_or_default())
        .collect()
}

/// Like [`each`], for members that are numbers.
pub fn each_u64(v: &serde_json::Value, pointer: &str) -> Vec<u64> {
    each(v, pointer)
        .iter()
        .map(|n| {
            n.as_u64()
                .unwrap_or_else(|| panic!("{pointer} not a number in {v}"))
        })
        .collect()
}

/// Like [`each`], for members that are strings.
pub fn each_str(v: &serde_json::Value, pointer: &str) -> Vec<String> {
    each(v, pointer)
        .iter()
        .map(|s| {
            s.as_str()
                .unwrap_or_else(|| panic!("{pointer} not a string in {v}"))
                .to_owned()
        })
        .collect()
}
