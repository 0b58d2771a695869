//! `gpuledger serve` under hostile clients: stalled and slow bodies time out, an oversized
//! `Content-Length` is refused at once, ingest bodies past the cap are answered 503 `busy`,
//! memory stays within the stated bound (docs/CONFIGURATION.md, "Bounded under hostile
//! clients"), `/healthz` answers throughout and the log does not change; metrics labels come
//! from a fixed set and `/metrics` may have its own listener; each rate limit answers 429 with
//! `Retry-After`, changes nothing in the ledger and leaves other clients, signers and tenants
//! alone.

mod common;

use common::*;
use gpuledger::api::records::MAX_RECORDS_BODY_BYTES;
use gpuledger::core::record::Role;
use gpuledger::store::{self, access};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// A server with settings of the test's own, and raw HTTP
// ---------------------------------------------------------------------------------------------

/// A `gpuledger serve` child, its API's and (if any) its metrics listener's base URLs.
struct Served {
    proc: Proc,
    base: String,
    metrics: Option<String>,
}

impl Served {
    fn pid(&self) -> u32 {
        self.proc.0.id()
    }

    /// The server's resident set (`VmRSS`), in KiB.
    fn rss_kb(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .expect("VmRSS")
    }

    fn http(&self) -> Http {
        Http::with_timeout(&self.base, Duration::from_secs(30))
    }

    /// `host:port` of the API listener.
    fn addr(&self) -> String {
        self.base.trim_start_matches("http://").to_owned()
    }
}

/// A log with node signers `signers` and tenants `tenants` (on the log, with their sample
/// leases, each covering 8 sample-model GPUs of every signer's node, and as tenants of the
/// API); returns its directory and log key file.
fn prepared(db: &TestDb, signers: &[&str], tenants: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let ledger = open(db);
    for s in signers {
        signer(&ledger, s, Role::Node);
    }
    parties_on(&ledger, tenants, signers);
    drop(ledger);
    let mut c = store::connect(&db.url).unwrap();
    for t in tenants {
        access::create_tenant(&mut c, t, t).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let key = log_key_file(dir.path());
    (dir, key)
}

/// Starts `gpuledger serve --listen LISTEN` with `extra` flags; stderr goes to
/// `dir/serve.log`.
fn serve(db: &TestDb, key: &Path, dir: &Path, listen: &str, extra: &[&str]) -> Served {
    let log = dir.join("serve.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpuledger"))
        .args(["serve", "--listen", listen, "--database-url", &db.url])
        .args(["--checkpoint-interval-seconds", "1", "--workers", "2"])
        .arg("--log-key")
        .arg(key)
        .args(extra)
        .env_remove("GPULEDGER_DATABASE_URL")
        .env_remove("GPULEDGER_CONFIG")
        .env("GPULEDGER_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let proc = Proc(child);
    let first = rx.recv_timeout(START_TIMEOUT).unwrap_or_else(|_| {
        panic!(
            "serve did not start: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        )
    });
    let base = first
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("serve said {first:?}"))
        .to_owned();
    let metrics = if extra.contains(&"--metrics-listen") {
        let line = rx.recv_timeout(START_TIMEOUT).expect("metrics line");
        let m = line
            .strip_prefix("metrics on ")
            .and_then(|m| m.strip_suffix("/metrics"))
            .unwrap_or_else(|| panic!("serve said {line:?}"));
        Some(m.to_owned())
    } else {
        None
    };
    Served {
        proc,
        base,
        metrics,
    }
}

/// An answer read off a raw connection.
#[derive(Debug)]
struct RawReply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// When the head had arrived, from the start of the read.
    head_after: Duration,
    /// Whether the server closed the connection (rather than the read timing out).
    closed: bool,
}

impl RawReply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The problem's slug (`urn:gpuledger:problem:<slug>`), if the body is one.
    fn slug(&self) -> String {
        serde_json::from_slice::<Value>(&self.body)
            .ok()
            .and_then(|p| p["type"].as_str().map(str::to_owned))
            .and_then(|t| t.strip_prefix("urn:gpuledger:problem:").map(str::to_owned))
            .unwrap_or_default()
    }
}

/// Reads what the server sends until it closes the connection (or `limit` passes), and parses
/// the first answer. A reset after the answer arrived is the end too.
fn read_reply(s: &mut TcpStream, limit: Duration) -> Result<RawReply, String> {
    s.set_read_timeout(Some(limit)).unwrap();
    let started = Instant::now();
    let mut head_after = None;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let closed = loop {
        match s.read(&mut chunk) {
            Ok(0) => break true,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if buf.is_empty() => return Err(format!("no answer: {e}")),
            Err(e) => {
                break !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                )
            }
        }
        if head_after.is_none() && buf.windows(4).any(|w| w == b"\r\n\r\n") {
            head_after = Some(started.elapsed());
        }
    };
    let text = String::from_utf8_lossy(&buf);
    let (head, _) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no complete head in {text:?}"))?;
    let body_at = head.len() + 4;
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("status line of {head:?}"))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Ok(RawReply {
        status,
        headers,
        body: buf[body_at..].to_vec(),
        head_after: head_after.unwrap_or_else(|| started.elapsed()),
        closed,
    })
}

/// The head of a `POST path` declaring `length` body bytes.
fn post_head(path: &str, length: u64) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n\
         Content-Length: {length}\r\n\r\n"
    )
}

// ---------------------------------------------------------------------------------------------
// 1. Stalled bodies, the ingest cap, memory, oversized Content-Length
// ---------------------------------------------------------------------------------------------

/// The cap of the stalled-upload test.
const CAP: usize = 4;
/// Connections of the stalled-upload test, holders and refused ones together.
const CONNECTIONS: usize = 32;
/// The body idle timeout and body timeout of the stalled-upload test, in seconds.
const IDLE_TIMEOUT_S: u64 = 4;
const BODY_TIMEOUT_S: u64 = 8;
/// Bytes each holder sends before it stalls: just under the body limit.
const STALLED_BYTES: usize = MAX_RECORDS_BODY_BYTES - 400 * 1024;

/// The stated bound (docs/CONFIGURATION.md, "Memory"), in KiB over the resident set at
/// rest: per ingest slot 12 MiB while its body arrives (`stalled`) or 96 MiB while a full
/// batch is checked and appended, 160 KiB per open connection, and 64 MiB for the rest
/// (allocator slack, the rate limiters' tables).
fn stated_bound_kb(slots: usize, stalled: bool, connections: usize) -> u64 {
    let per_slot_mib = if stalled { 12 } else { 96 };
    (slots * per_slot_mib * 1024 + connections * 160 + 64 * 1024) as u64
}

#[test]
fn stalled_uploads_are_bounded_and_timed_out() {
    let db = sqlite();
    let (dir, key) = prepared(&db, &[], &[]);
    let srv = serve(
        &db,
        &key,
        dir.path(),
        "127.0.0.1:0",
        &[
            "--max-concurrent-ingest",
            &CAP.to_string(),
            "--body-idle-timeout-seconds",
            &IDLE_TIMEOUT_S.to_string(),
            "--body-timeout-seconds",
            &BODY_TIMEOUT_S.to_string(),
            "--client-request-timeout-seconds",
            "2",
            "--max-connections",
            "256",
        ],
    );
    let h = srv.http();
    // Warm up every path the attack uses, then take the baseline.
    for _ in 0..20 {
        assert_eq!(h.get("/healthz", None).status, 200);
        h.post_bytes("/v1/records", Some("application/json"), b"[]");
    }
    let size = h.size();
    std::thread::sleep(Duration::from_secs(1));
    let before = srv.rss_kb();

    // The holders: each sends headers and a body just under the limit, then stalls.
    let addr = srv.addr();
    let (sent_tx, sent_rx) = mpsc::channel();
    let holders: Vec<_> = (0..CAP)
        .map(|_| {
            let (addr, sent_tx) = (addr.clone(), sent_tx.clone());
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(&addr).unwrap();
                s.write_all(post_head("/v1/records", MAX_RECORDS_BODY_BYTES as u64 - 1).as_bytes())
                    .unwrap();
                let mut body = vec![b' '; STALLED_BYTES];
                body[0] = b'[';
                s.write_all(&body).unwrap();
                drop(body);
                let stalled_at = Instant::now();
                sent_tx.send(()).unwrap();
                let r = read_reply(&mut s, Duration::from_secs(120));
                (r, stalled_at.elapsed())
            })
        })
        .collect();
    for _ in 0..CAP {
        sent_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("a holder's body was not read");
    }

    // Past the cap: 503 busy with Retry-After, at once, whatever the body.
    let refused: Vec<_> = (CAP..CONNECTIONS)
        .map(|_| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(&addr).unwrap();
                s.write_all(post_head("/v1/records", MAX_RECORDS_BODY_BYTES as u64 - 1).as_bytes())
                    .unwrap();
                let _ = s.write_all(&[b' '; 64 * 1024]);
                read_reply(&mut s, Duration::from_secs(30))
            })
        })
        .collect();
    // A connection that never finishes its headers.
    let mut slow_head = TcpStream::connect(&addr).unwrap();
    slow_head
        .write_all(b"POST /v1/records HTTP/1.1\r\nHost: test\r\n")
        .unwrap();
    let slow_head_started = Instant::now();

    // Meanwhile the server answers, and holds no more than the bound.
    assert_eq!(
        h.get("/healthz", None).status,
        200,
        "/healthz while stalled"
    );
    let during = srv.rss_kb();
    for r in refused {
        let r = r.join().unwrap().unwrap();
        assert_eq!(r.status, 503, "past the cap: {r:?}");
        assert_eq!(r.slug(), "busy", "{r:?}");
        assert!(
            r.header("Retry-After")
                .is_some_and(|v| v.parse::<u64>().is_ok()),
            "{r:?}"
        );
    }
    assert_eq!(
        h.get("/healthz", None).status,
        200,
        "/healthz while stalled"
    );
    let bound = stated_bound_kb(CAP, true, CONNECTIONS + 2);
    eprintln!(
        "RSS before {before} KiB, with {CAP} stalled bodies of {STALLED_BYTES} bytes and \
         {} refused {during} KiB (+{} KiB; bound +{bound} KiB)",
        CONNECTIONS - CAP,
        during.saturating_sub(before)
    );
    assert!(
        during <= before + bound,
        "RSS grew from {before} to {during} KiB, over the stated bound of +{bound} KiB"
    );

    // The stalled bodies time out: after the idle timeout, within the body timeout (plus
    // generous slack for a loaded machine), with a problem and a closed connection.
    for hd in holders {
        let (r, waited) = hd.join().unwrap();
        let r = r.unwrap();
        assert_eq!(
            (r.status, r.slug().as_str()),
            (408, "body_timeout"),
            "{r:?}"
        );
        assert!(
            waited >= Duration::from_secs(IDLE_TIMEOUT_S - 1),
            "answered {waited:?} after the body stalled, before the idle timeout"
        );
        assert!(
            waited <= Duration::from_secs(BODY_TIMEOUT_S + 30),
            "answered {waited:?} after the body stalled"
        );
    }
    // The unfinished head is answered (408) or closed after the request timeout.
    let r = read_reply(&mut slow_head, Duration::from_secs(60));
    assert!(
        slow_head_started.elapsed() < Duration::from_secs(40),
        "an unfinished head was held {:?}: {r:?}",
        slow_head_started.elapsed()
    );
    if let Ok(r) = r {
        assert_eq!(r.status, 408, "{r:?}");
    }

    // Afterwards: still serving, nothing written, memory given back.
    assert_eq!(h.get("/healthz", None).status, 200);
    assert_eq!(h.size(), size, "the log changed");
    std::thread::sleep(Duration::from_secs(2));
    let after = srv.rss_kb();
    eprintln!(
        "RSS 2 s after the attack {after} KiB (+{} KiB over before)",
        after.saturating_sub(before)
    );
    assert!(
        after <= before + bound,
        "RSS after the attack {after} KiB, over the bound (+{bound} KiB over {before})"
    );
    // Ingest works again.
    let r = h.post_bytes("/v1/records", Some("application/json"), b"[]");
    assert_eq!(r.status, 200, "{}", r.lossy());
}

#[test]
fn an_oversized_content_length_is_refused_at_once() {
    let db = sqlite();
    let (dir, key) = prepared(&db, &[], &[]);
    // Long body timeouts: an answer that waited for the body would come after a minute.
    let srv = serve(
        &db,
        &key,
        dir.path(),
        "127.0.0.1:0",
        &[
            "--body-idle-timeout-seconds",
            "60",
            "--body-timeout-seconds",
            "120",
        ],
    );
    let admin = {
        let mut c = store::connect(&db.url).unwrap();
        access::create_token(&mut c, access::ApiRole::Admin, None, "t")
            .unwrap()
            .1
    };
    let size = srv.http().size();
    for (path, length, auth) in [
        ("/v1/records", 107_374_182_400u64, None),
        ("/v1/records", MAX_RECORDS_BODY_BYTES as u64 + 1, None),
        (
            "/v1/tenants",
            gpuledger::api::MAX_ADMIN_BODY_BYTES as u64 + 1,
            Some(&admin),
        ),
        ("/v1/tenants", 107_374_182_400u64, Some(&admin)),
    ] {
        let mut s = TcpStream::connect(srv.addr()).unwrap();
        let mut head = post_head(path, length);
        if let Some(t) = auth {
            head = head.replacen("\r\n", &format!("\r\nAuthorization: Bearer {t}\r\n"), 1);
        }
        s.write_all(head.as_bytes()).unwrap();
        // No body is sent: only an answer that does not wait for it can come. (The server
        // closes the connection afterwards, after `client_disconnect_timeout`.)
        let r = read_reply(&mut s, Duration::from_secs(30)).unwrap();
        let took = r.head_after;
        eprintln!(
            "{path} with Content-Length {length}: {} in {took:?}",
            r.status
        );
        assert_eq!(
            (r.status, r.slug().as_str()),
            (413, "body_too_large"),
            "{r:?}"
        );
        assert!(
            took < Duration::from_secs(5),
            "{path}: the 413 took {took:?}"
        );
    }
    assert_eq!(srv.http().size(), size);
    assert_eq!(srv.http().get("/healthz", None).status, 200);
}

/// The server's peak resident set (`VmHWM`), in KiB.
fn peak_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmHWM")
}

/// Full batches (10,000 records each) from more clients than there are ingest slots: those
/// past the cap are answered 503 `busy` and retried, every record is accepted, and the peak
/// resident set stays within the stated bound.
#[test]
fn full_batches_stay_within_the_bound() {
    use gpuledger::core::limits::MAX_APPEND_BATCH;
    const CLIENTS: u64 = 4;
    const SLOTS: usize = 2;
    let db = sqlite();
    let (dir, key) = prepared(&db, &["node-a"], &["t1"]);
    let srv = serve(
        &db,
        &key,
        dir.path(),
        "127.0.0.1:0",
        &["--max-concurrent-ingest", &SLOTS.to_string()],
    );
    let ka = gpuledger::sample::key("node-a");
    let batch = MAX_APPEND_BATCH as u64;
    let bodies: Vec<Vec<u8>> = (0..CLIENTS)
        .map(|c| {
            serde_json::to_vec(&usage_run(
                "node-a",
                &ka,
                "t1",
                1 + c * batch..1 + (c + 1) * batch,
            ))
            .unwrap()
        })
        .collect();
    let h = srv.http();
    h.post_bytes("/v1/records", Some("application/json"), b"[]");
    let size = h.size();
    std::thread::sleep(Duration::from_secs(1));
    let rest = srv.rss_kb();
    let busy: u32 = std::thread::scope(|s| {
        let handles: Vec<_> = bodies
            .iter()
            .map(|b| {
                let h = h.clone();
                s.spawn(move || {
                    let mut busy = 0;
                    loop {
                        let r = h
                            .try_request("POST", "/v1/records", None, Some("application/json"), b)
                            .unwrap();
                        if r.status == 503 {
                            r.assert_problem(503, "busy", "past the cap");
                            assert!(r.retry_after.is_some());
                            busy += 1;
                            std::thread::sleep(Duration::from_millis(200));
                            continue;
                        }
                        assert_eq!(r.ok_json(200)["accepted"], batch, "{}", r.lossy());
                        return busy;
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert_eq!(h.size(), size + CLIENTS * batch);
    let peak = peak_kb(srv.pid());
    let bound = stated_bound_kb(SLOTS, false, CLIENTS as usize + 2);
    eprintln!(
        "{CLIENTS} batches of {} bytes through {SLOTS} slots ({busy} busy answers): RSS at rest \
         {rest} KiB, peak {peak} KiB (+{} KiB; bound +{bound} KiB)",
        bodies[0].len(),
        peak.saturating_sub(rest)
    );
    assert!(
        peak <= rest + bound,
        "peak RSS {peak} KiB, over the stated bound (+{bound} KiB over {rest})"
    );
}

/// A chunked body is not read on after its answer: the connection is closed (actix would
/// otherwise drain a dropped chunked body for as long as the client trickles or stalls).
#[test]
fn chunked_bodies_are_closed_after_their_answer() {
    let db = sqlite();
    let (dir, key) = prepared(&db, &[], &[]);
    let srv = serve(
        &db,
        &key,
        dir.path(),
        "127.0.0.1:0",
        &[
            "--body-idle-timeout-seconds",
            "2",
            "--body-timeout-seconds",
            "4",
            "--max-concurrent-ingest",
            "1",
        ],
    );
    let chunked = |first: &[u8]| {
        let mut s = TcpStream::connect(srv.addr()).unwrap();
        s.write_all(
            b"POST /v1/records HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n\
              Transfer-Encoding: chunked\r\n\r\n",
        )
        .unwrap();
        s.write_all(format!("{:x}\r\n", first.len()).as_bytes())
            .unwrap();
        s.write_all(first).unwrap();
        s.write_all(b"\r\n").unwrap();
        s
    };
    // A stalled one holds the one slot, then times out.
    let mut stalled = chunked(b"[");
    std::thread::sleep(Duration::from_millis(500));
    // The next is refused busy at once, and closed though its body is unread.
    let mut refused = chunked(b"[ ");
    let r = read_reply(&mut refused, Duration::from_secs(30)).unwrap();
    assert_eq!((r.status, r.slug().as_str()), (503, "busy"), "{r:?}");
    assert!(
        r.closed,
        "a refused chunked body kept its connection: {r:?}"
    );
    let r = read_reply(&mut stalled, Duration::from_secs(30)).unwrap();
    assert_eq!(
        (r.status, r.slug().as_str()),
        (408, "body_timeout"),
        "{r:?}"
    );
    assert!(
        r.closed,
        "a timed-out chunked body kept its connection: {r:?}"
    );
    // A chunked body read to its end is answered, and its connection kept.
    let mut whole = chunked(b"[]");
    whole.write_all(b"0\r\n\r\n").unwrap();
    let r = read_reply(&mut whole, Duration::from_secs(3)).unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        !r.closed,
        "a chunked body read to its end lost its connection"
    );
}

// ---------------------------------------------------------------------------------------------
// 2. Metrics
// ---------------------------------------------------------------------------------------------

/// `(name, labels)` of every sample line of `name` in a Prometheus text.
fn series(text: &str, name: &str) -> Vec<Vec<(String, String)>> {
    text.lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
        .map(|l| {
            let labels = l.split_once('}').map_or("", |(a, _)| a);
            labels
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.trim_matches('"').to_owned()))
                .collect()
        })
        .collect()
}

#[test]
fn metrics_labels_come_from_a_fixed_set() {
    let db = sqlite();
    let (dir, key) = prepared(&db, &[], &[]);
    let srv = serve(&db, &key, dir.path(), "127.0.0.1:0", &[]);
    let mut rng = Rng::from_clock("metrics_labels_come_from_a_fixed_set");
    let token = |rng: &mut Rng, n: u64| -> String {
        (0..4 + rng.below(n))
            .map(|_| (b'A' + rng.below(26) as u8) as char)
            .collect()
    };
    for i in 0..500 {
        let method = match i % 10 {
            0 => "GET".to_owned(),
            1 => "DELETE".to_owned(),
            _ => token(&mut rng, 12),
        };
        let path = match i % 3 {
            0 => "/v1/log".to_owned(),
            1 => format!("/{}", token(&mut rng, 20).to_lowercase()),
            _ => format!("/v1/entries/{}", rng.below(1_000_000)),
        };
        let mut s = TcpStream::connect(srv.addr()).unwrap();
        s.write_all(
            format!("{method} {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .unwrap();
        read_reply(&mut s, Duration::from_secs(30)).unwrap();
    }
    let text = srv.http().get("/metrics", None).text();
    let methods: BTreeSet<&str> = gpuledger::api::METRIC_METHODS
        .iter()
        .copied()
        .chain(["other"])
        .collect();
    let requests = series(&text, "gpuledger_http_requests_total");
    assert!(!requests.is_empty(), "{text}");
    let mut seen_routes = BTreeSet::new();
    for labels in requests
        .iter()
        .chain(&series(&text, "gpuledger_http_request_seconds_count"))
    {
        for (k, v) in labels {
            match k.as_str() {
                "method" => assert!(methods.contains(v.as_str()), "method label {v:?}"),
                "route" => {
                    assert!(
                        v == "unmatched" || v.starts_with("/v1/") || v.starts_with("/metrics"),
                        "route label {v:?}"
                    );
                    seen_routes.insert(v.clone());
                }
                "status" => assert!(v.parse::<u16>().is_ok(), "status label {v:?}"),
                other => panic!("label {other}"),
            }
        }
    }
    // 500 random requests made a handful of series, not hundreds.
    assert!(
        seen_routes.len() <= 4,
        "routes {seen_routes:?}: a random path became a route label"
    );
    assert!(
        requests.len() <= 3 * methods.len() * 4,
        "{} series",
        requests.len()
    );
}

#[test]
fn metrics_may_have_their_own_listener() {
    let db = sqlite();
    let (dir, key) = prepared(&db, &[], &[]);
    let srv = serve(
        &db,
        &key,
        dir.path(),
        "127.0.0.1:0",
        &["--metrics-listen", "127.0.0.1:0"],
    );
    let main = srv.http();
    main.get("/metrics", None)
        .assert_problem(404, "not_found", "/metrics on the API listener");
    assert_eq!(main.get("/healthz", None).status, 200);
    assert_eq!(main.get("/v1/log", None).status, 200);
    let m = Http::with_timeout(srv.metrics.as_deref().unwrap(), Duration::from_secs(30));
    let r = m.get("/metrics", None);
    assert_eq!(r.status, 200);
    assert!(
        r.text().contains("gpuledger_http_requests_total"),
        "{}",
        r.text()
    );
    m.get("/v1/log", None)
        .assert_problem(404, "not_found", "the API on the metrics listener");
}

// ---------------------------------------------------------------------------------------------
// 3. Rate limits
// ---------------------------------------------------------------------------------------------

/// Asserts a 429 `rate_limited` problem with a `Retry-After` of 1 to `max` seconds.
fn assert_limited(r: &Reply, max: u64, what: &str) {
    r.assert_problem(429, "rate_limited", what);
    let after: u64 = r
        .retry_after
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{what}: no Retry-After"));
    assert!((1..=max).contains(&after), "{what}: Retry-After {after}");
}

/// Outcomes' statuses of a 200 answer to a batch.
fn statuses(r: &Reply) -> Vec<String> {
    each_str(&r.ok_json(200)["outcomes"], "/status")
}

both_backends!(rate_limits_answer_429_and_change_nothing, |db: &TestDb| {
    let (dir, key) = prepared(db, &["node-a", "node-b"], &["t1", "t2"]);
    let ka = gpuledger::sample::key("node-a");
    let kb = gpuledger::sample::key("node-b");

    // Per client address: on an address of both families, so that 127.0.0.1 and ::1 are two
    // clients.
    let v6 = std::net::TcpListener::bind("[::1]:0").is_ok();
    if !v6 {
        eprintln!(
            "\n*** no IPv6 loopback here: the second client of the per-client test is skipped ***"
        );
    }
    {
        let listen = if v6 { "[::]:0" } else { "127.0.0.1:0" };
        let srv = serve(
            db,
            &key,
            dir.path(),
            listen,
            &["--client-rate-per-second", "1", "--client-rate-burst", "5"],
        );
        let port = srv.base.rsplit(':').next().unwrap().to_owned();
        let one = Http::with_timeout(&format!("http://127.0.0.1:{port}"), Duration::from_secs(30));
        let size = one.size();
        let mut passed = 1;
        let limited = loop {
            let r = one.get("/v1/log", None);
            if r.status != 200 {
                break r;
            }
            passed += 1;
            assert!(passed < 100, "never limited");
        };
        assert!(
            passed >= 5,
            "limited after {passed} requests, under the burst"
        );
        assert_limited(&limited, 1, "per client");
        // A batch from the limited client is refused before it is read: nothing appended.
        let r = one
            .try_post_records(&usage_run("node-a", &ka, "t1", 1..=3))
            .unwrap();
        assert_limited(&r, 1, "per client, records");
        // Outside /v1 the client is not limited.
        assert_eq!(one.get("/healthz", None).status, 200);
        if v6 {
            let other =
                Http::with_timeout(&format!("http://[::1]:{port}"), Duration::from_secs(30));
            assert_eq!(other.get("/v1/log", None).status, 200, "another client");
            assert_eq!(other.size(), size, "the log changed");
        }
    }

    // Per signer: 10 records at once, then 1 a second.
    {
        let srv = serve(
            db,
            &key,
            dir.path(),
            "127.0.0.1:0",
            &["--signer-rate-per-second", "1", "--signer-rate-burst", "10"],
        );
        let h = srv.http();
        let ok = h
            .try_post_records(&usage_run("node-a", &ka, "t1", 1..=10))
            .unwrap();
        assert_eq!(statuses(&ok), vec!["accepted"; 10]);
        let size = h.size();
        // node-a has spent its burst: 10 more records are refused whole.
        let r = h
            .try_post_records(&usage_run("node-a", &ka, "t1", 11..=20))
            .unwrap();
        assert_limited(&r, 10, "per signer");
        // A batch of both signers is refused whole, though node-b has the budget.
        let mut both = usage_run("node-b", &kb, "t2", 1..=3);
        both.extend(usage_run("node-a", &ka, "t1", 11..=20));
        let r = h.try_post_records(&both).unwrap();
        assert_limited(&r, 10, "per signer, mixed batch");
        assert_eq!(h.size(), size, "a refused batch appended something");
        // node-b alone is not limited.
        let r = h
            .try_post_records(&usage_run("node-b", &kb, "t2", 1..=3))
            .unwrap();
        assert_eq!(statuses(&r), vec!["accepted"; 3]);
        // Forged records naming node-b (as many as its budget, so the batch is admitted) are
        // rejected and spend none of it.
        let mallory = gpuledger::sample::key("mallory");
        let r = h
            .try_post_records(&usage_run("node-b", &mallory, "t2", 100..=106))
            .unwrap();
        assert_eq!(statuses(&r), vec!["rejected"; 7]);
        let r = h
            .try_post_records(&usage_run("node-b", &kb, "t2", 4..=10))
            .unwrap();
        assert_eq!(
            statuses(&r),
            vec!["accepted"; 7],
            "node-b's budget was spent by forgeries"
        );
    }

    // Per signer, validly signed refusals (#27): node-a's seqs 1..=10 are logged (above), so
    // re-signed variants of them (another tenant) are refused as conflicts, and they spend
    // node-a's budget like accepted records; a batch with more records of one signer than
    // its burst is refused whole (413), and a resent duplicate spends nothing.
    {
        let srv = serve(
            db,
            &key,
            dir.path(),
            "127.0.0.1:0",
            &["--signer-rate-per-second", "1", "--signer-rate-burst", "10"],
        );
        let h = srv.http();
        let size = h.size();
        let r = h
            .try_post_records(&usage_run("node-b", &kb, "t2", 1..=5))
            .unwrap();
        assert_eq!(statuses(&r), vec!["duplicate"; 5]);
        let r = h
            .try_post_records(&usage_run("node-a", &ka, "t2", 1..=10))
            .unwrap();
        assert_eq!(statuses(&r), vec!["rejected"; 10]);
        assert_eq!(
            each_str(&r.ok_json(200)["outcomes"], "/reason"),
            vec!["conflict"; 10]
        );
        let r = h
            .try_post_records(&usage_run("node-a", &ka, "t1", 11..=12))
            .unwrap();
        assert_limited(&r, 10, "per signer, after a flood of conflicts");
        let r = h
            .try_post_records(&usage_run("node-b", &kb, "t2", 11..=21))
            .unwrap();
        r.assert_problem(413, "too_many_records", "a batch over the signer's burst");
        // node-b's duplicates spent nothing: its whole burst is still there.
        let r = h
            .try_post_records(&usage_run("node-b", &kb, "t2", 11..=20))
            .unwrap();
        assert_eq!(statuses(&r), vec!["accepted"; 10]);
        assert_eq!(h.size(), size + 10, "only node-b's ten were appended");
    }

    // Per tenant: 2 certificates a minute for a tenant token; admins are not limited.
    {
        let srv = serve(
            db,
            &key,
            dir.path(),
            "127.0.0.1:0",
            &["--tenant-certificates-per-minute", "2"],
        );
        let h = srv.http();
        let token = |role, tenant| {
            let mut c = store::connect(&db.url).unwrap();
            access::create_token(&mut c, role, tenant, "t").unwrap().1
        };
        let (t1, t2) = (
            token(access::ApiRole::Tenant, Some("t1")),
            token(access::ApiRole::Tenant, Some("t2")),
        );
        let admin = token(access::ApiRole::Admin, None);
        let (from, to) = (
            slot(0).plus(-86_400).to_string(),
            slot(0).plus(86_400).to_string(),
        );
        let order = json!({"from": from, "to": to});
        for _ in 0..2 {
            let r = h.post("/v1/certificates", Some(&t1), &order);
            assert_eq!(r.status, 201, "{}", r.lossy());
        }
        let size = h.size();
        let r = h.post("/v1/certificates", Some(&t1), &order);
        assert_limited(&r, 60, "per tenant");
        assert_eq!(h.size(), size, "a refused certificate was issued");
        let r = h.post("/v1/certificates", Some(&t2), &order);
        assert_eq!(r.status, 201, "another tenant: {}", r.lossy());
        let r = h.post(
            "/v1/certificates",
            Some(&admin),
            &json!({"tenant": "t1", "from": from, "to": to}),
        );
        assert_eq!(r.status, 201, "an admin for t1: {}", r.lossy());
    }
});
