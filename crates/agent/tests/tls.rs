//! The sender against an `https://` ledger (issue #14): a CA and a certificate for
//! `localhost`/127.0.0.1 made at run time (rcgen), and a stand-in ledger on a thread (rustls
//! over a std `TcpListener`) that answers `GET /v1/log` and `POST /v1/records` as the ledger
//! does and remembers what it was sent. Each test checks what the ledger received and what
//! the spool still holds.

use gpuledger_agent::config::TlsConfig;
use gpuledger_agent::origin;
use gpuledger_agent::sender::{drain_with, SenderConfig, Shared};
use gpuledger_agent::spool::Spool;
use gpuledger_agent::tls::{self, Pin, SYSTEM_CA_BUNDLES};
use gpuledger_core::sample;
use gpuledger_core::time::Timestamp;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rust_decimal::Decimal;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const SIGNER: &str = "node-tls";

/// A test CA and the ledger's certificate, issued by it for `localhost` and 127.0.0.1.
struct Pki {
    _dir: tempfile::TempDir,
    /// The CA certificate, PEM.
    ca_file: PathBuf,
    /// The ledger's certificate, DER.
    leaf: CertificateDer<'static>,
    server: Arc<ServerConfig>,
}

impl Pki {
    fn new() -> Pki {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "gpuledger test CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca, ca_key);

        let leaf_key = KeyPair::generate().unwrap();
        let mut leaf =
            CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
        leaf.distinguished_name
            .push(DnType::CommonName, "ledger.test");
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let leaf_cert = leaf.signed_by(&leaf_key, &issuer).unwrap();

        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("ledger-ca.pem");
        std::fs::write(&ca_file, ca_cert.pem()).unwrap();
        let server =
            ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(
                    vec![leaf_cert.der().clone()],
                    PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
                )
                .unwrap();
        Pki {
            _dir: dir,
            ca_file,
            leaf: leaf_cert.der().clone(),
            server: Arc::new(server),
        }
    }

    /// `[tls]` trusting the test CA.
    fn trusting_ca(&self) -> TlsConfig {
        TlsConfig {
            ca_file: Some(self.ca_file.clone()),
            pin_sha256: None,
        }
    }

    /// The ledger certificate's fingerprint, as `sha256sum` prints it.
    fn pin(&self) -> String {
        Pin::of_certificate(self.leaf.as_ref()).to_string()
    }
}

/// One `POST /v1/records` the stand-in ledger answered.
#[derive(Debug, Clone)]
struct Post {
    status: u16,
    /// The seqs of the records in the body.
    seqs: Vec<u64>,
    at: Instant,
}

/// A stand-in ledger over TLS on 127.0.0.1. `POST /v1/records` is answered with the statuses
/// of `script` in turn (`Retry-After: 1` with each one that is not 200), then 200 for ever;
/// 200 accepts every record.
struct Ledger {
    addr: SocketAddr,
    /// Requests read, as `METHOD PATH`.
    requests: Arc<Mutex<Vec<String>>>,
    posts: Arc<Mutex<Vec<Post>>>,
    /// Connections whose TLS handshake failed (the client refused the server, or the reverse).
    failed_handshakes: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Ledger {
    fn start(server: Arc<ServerConfig>, script: Vec<u16>) -> Ledger {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let posts = Arc::new(Mutex::new(Vec::new()));
        let failed_handshakes = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (r, p, f, s) = (
            requests.clone(),
            posts.clone(),
            failed_handshakes.clone(),
            stop.clone(),
        );
        let thread = std::thread::spawn(move || {
            let mut script = script.into_iter();
            for tcp in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(tcp) = tcp else { continue };
                serve(&server, tcp, &mut script, &r, &p, &f);
            }
        });
        Ledger {
            addr,
            requests,
            posts,
            failed_handshakes,
            stop,
            thread: Some(thread),
        }
    }

    fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.addr.port())
    }

    fn posts(&self) -> Vec<Post> {
        self.posts.lock().unwrap().clone()
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }

    /// The seqs the ledger accepted (answered 200 for), in order.
    fn accepted_seqs(&self) -> Vec<u64> {
        self.posts()
            .iter()
            .filter(|p| p.status == 200)
            .flat_map(|p| p.seqs.clone())
            .collect()
    }
}

impl Drop for Ledger {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers one connection: one request, then `Connection: close`.
fn serve(
    config: &Arc<ServerConfig>,
    tcp: TcpStream,
    script: &mut impl Iterator<Item = u16>,
    requests: &Mutex<Vec<String>>,
    posts: &Mutex<Vec<Post>>,
    failed_handshakes: &AtomicUsize,
) {
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut tls = StreamOwned::new(ServerConnection::new(config.clone()).unwrap(), tcp);
    let Some((head, body)) = read_request(&mut tls, failed_handshakes) else {
        return;
    };
    let line = head.lines().next().unwrap_or("").to_owned();
    let mut words = line.split(' ');
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    requests.lock().unwrap().push(format!("{method} {path}"));
    let (status, extra, answer) = match (method, path) {
        ("GET", "/v1/log") => (200, "", format!(r#"{{"origin":"{}"}}"#, sample::ORIGIN)),
        ("POST", "/v1/records") => {
            let records: Vec<serde_json::Value> = serde_json::from_slice(&body).unwrap();
            let seqs: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
            let status = script.next().unwrap_or(200);
            posts.lock().unwrap().push(Post {
                status,
                seqs: seqs.clone(),
                at: Instant::now(),
            });
            if status == 200 {
                let outcomes: Vec<String> = (0..seqs.len())
                    .map(|i| format!(r#"{{"status":"accepted","index":{i}}}"#))
                    .collect();
                let answer = format!(
                    r#"{{"accepted":{},"duplicates":0,"rejected":0,"outcomes":[{}]}}"#,
                    seqs.len(),
                    outcomes.join(",")
                );
                (200, "", answer)
            } else {
                (
                    status,
                    "Retry-After: 1\r\n",
                    r#"{"error":"refused for now"}"#.to_owned(),
                )
            }
        }
        _ => (404, "", r#"{"error":"not found"}"#.to_owned()),
    };
    let reply = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{answer}",
        answer.len()
    );
    let _ = tls.write_all(reply.as_bytes());
    tls.conn.send_close_notify();
    let _ = tls.flush();
}

/// Reads one request's head and body (by `Content-Length`); `None` when the handshake or the
/// read failed.
fn read_request(
    tls: &mut StreamOwned<ServerConnection, TcpStream>,
    failed_handshakes: &AtomicUsize,
) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match tls.read(&mut chunk) {
            Ok(0) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(_) => {
                if tls.conn.is_handshaking() {
                    failed_handshakes.fetch_add(1, Ordering::SeqCst);
                }
                return None;
            }
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        match tls.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    Some((head, body))
}

/// A spool in `dir` holding `n` signed energy records of [`SIGNER`], seqs 1..=n.
fn spool_of(dir: &Path, n: u64) -> Arc<Shared> {
    let key = sample::key(SIGNER);
    let t = Timestamp::now();
    let mut spool = Spool::open(dir, 1_000, 4096).unwrap();
    let records: Vec<_> = (1..=n)
        .map(|q| {
            sample::energy(
                SIGNER,
                &key,
                q,
                None,
                Decimal::from(q),
                t.plus(10 * q as i64),
            )
        })
        .collect();
    spool.append(&records, "test").unwrap();
    Shared::new(spool)
}

fn sender_config(url: &str, max_batch: usize) -> SenderConfig {
    SenderConfig {
        server_url: url.to_owned(),
        max_batch,
        max_backoff: Duration::from_secs(1),
        request_timeout: Duration::from_secs(5),
        signer: SIGNER.into(),
        origin: sample::ORIGIN.into(),
    }
}

fn pending(shared: &Shared) -> u64 {
    shared.spool.lock().unwrap().pending()
}

/// Drains `shared` to `ledger` with `tls`; returns what is still pending.
fn drain(
    shared: &Arc<Shared>,
    ledger: &Ledger,
    tls: &TlsConfig,
    max_batch: usize,
    for_: Duration,
) -> u64 {
    let cfg = sender_config(&ledger.url(), max_batch);
    let http = tls::client(&ledger.url(), tls, cfg.request_timeout).unwrap();
    drain_with(shared, cfg, http, for_)
}

#[test]
fn records_are_delivered_over_https_to_a_ledger_of_the_configured_ca() {
    let pki = Pki::new();
    let ledger = Ledger::start(pki.server.clone(), vec![]);
    let dir = tempfile::tempdir().unwrap();
    let shared = spool_of(dir.path(), 5);
    let left = drain(
        &shared,
        &ledger,
        &pki.trusting_ca(),
        2,
        Duration::from_secs(30),
    );
    assert_eq!(left, 0, "the spool drained");
    assert_eq!(pending(&shared), 0);
    assert_eq!(shared.delivered.load(Ordering::SeqCst), 5);
    // Over TLS the ledger read the origin check, then three batches of at most two records.
    assert_eq!(ledger.accepted_seqs(), vec![1, 2, 3, 4, 5]);
    assert_eq!(ledger.posts().len(), 3);
    assert_eq!(ledger.requests()[0], "GET /v1/log");
    assert_eq!(ledger.failed_handshakes.load(Ordering::SeqCst), 0);
    // A name in the certificate works as well as its IP address.
    let by_name = format!("https://localhost:{}", ledger.addr.port());
    let http = tls::client(&by_name, &pki.trusting_ca(), Duration::from_secs(5)).unwrap();
    assert_eq!(origin::fetch(&http, &by_name).unwrap(), sample::ORIGIN);
}

#[test]
fn a_ledger_the_system_roots_do_not_trust_is_refused_and_nothing_is_delivered() {
    let pki = Pki::new();
    let ledger = Ledger::start(pki.server.clone(), vec![]);
    let dir = tempfile::tempdir().unwrap();
    let shared = spool_of(dir.path(), 3);
    let system = TlsConfig::default();
    let have_bundle = SYSTEM_CA_BUNDLES.iter().any(|p| Path::new(p).is_file());
    let http = match tls::client(&ledger.url(), &system, Duration::from_secs(5)) {
        Ok(http) => http,
        Err(e) => {
            // A machine without a CA bundle: refused before any connection, and says why.
            assert!(!have_bundle, "{e}");
            assert!(e.to_string().contains("no system CA bundle"), "{e}");
            return;
        }
    };
    let e = origin::fetch(&http, &ledger.url()).unwrap_err();
    assert!(
        e.contains("UnknownIssuer") && e.contains("does not chain to a trusted CA"),
        "{e}"
    );
    let left = drain_with(
        &shared,
        sender_config(&ledger.url(), 10),
        http,
        Duration::from_secs(2),
    );
    assert_eq!(left, 3, "nothing delivered");
    assert_eq!(pending(&shared), 3);
    assert_eq!(shared.delivered.load(Ordering::SeqCst), 0);
    assert!(ledger.requests().is_empty(), "{:?}", ledger.requests());
    assert!(ledger.failed_handshakes.load(Ordering::SeqCst) >= 2);
}

#[test]
fn a_pinned_certificate_is_required_on_top_of_a_trusted_chain() {
    let pki = Pki::new();
    let ledger = Ledger::start(pki.server.clone(), vec![]);

    // The right pin, in openssl's colon form: delivered.
    let colons = pki
        .pin()
        .as_bytes()
        .chunks(2)
        .map(|p| std::str::from_utf8(p).unwrap().to_uppercase())
        .collect::<Vec<_>>()
        .join(":");
    let pinned = TlsConfig {
        pin_sha256: Some(colons),
        ..pki.trusting_ca()
    };
    let dir = tempfile::tempdir().unwrap();
    let shared = spool_of(dir.path(), 4);
    assert_eq!(
        drain(&shared, &ledger, &pinned, 10, Duration::from_secs(30)),
        0
    );
    assert_eq!(ledger.accepted_seqs(), vec![1, 2, 3, 4]);

    // Another pin, the CA still trusted: refused, both fingerprints named, nothing sent.
    let wrong = Pin::of_certificate(b"another certificate").to_string();
    let mispinned = TlsConfig {
        pin_sha256: Some(wrong.clone()),
        ..pki.trusting_ca()
    };
    let http = tls::client(&ledger.url(), &mispinned, Duration::from_secs(5)).unwrap();
    let e = origin::fetch(&http, &ledger.url()).unwrap_err();
    assert!(
        e.contains("does not match [tls] pin_sha256")
            && e.contains(&format!("expected {wrong}"))
            && e.contains(&format!("found {}", pki.pin())),
        "{e}"
    );
    let requests_before = ledger.requests().len();
    let dir2 = tempfile::tempdir().unwrap();
    let refused = spool_of(dir2.path(), 2);
    let left = drain(&refused, &ledger, &mispinned, 10, Duration::from_secs(2));
    assert_eq!(left, 2, "nothing delivered");
    assert_eq!(refused.delivered.load(Ordering::SeqCst), 0);
    assert_eq!(
        ledger.requests().len(),
        requests_before,
        "no request reached the ledger"
    );
    assert_eq!(ledger.accepted_seqs(), vec![1, 2, 3, 4]);

    // The right pin does not stand in for the chain: without the CA, refused.
    let pin_only = TlsConfig {
        ca_file: None,
        pin_sha256: Some(pki.pin()),
    };
    if let Ok(http) = tls::client(&ledger.url(), &pin_only, Duration::from_secs(5)) {
        let e = origin::fetch(&http, &ledger.url()).unwrap_err();
        assert!(e.contains("UnknownIssuer"), "{e}");
    }
    assert_eq!(ledger.requests().len(), requests_before);
}

#[test]
fn a_ledger_out_of_disk_space_is_waited_for_and_then_delivered_to() {
    let pki = Pki::new();
    // 507 Insufficient Storage with Retry-After: 1, twice, then 200.
    let ledger = Ledger::start(pki.server.clone(), vec![507, 507]);
    let dir = tempfile::tempdir().unwrap();
    let shared = spool_of(dir.path(), 3);
    let left = drain(
        &shared,
        &ledger,
        &pki.trusting_ca(),
        10,
        Duration::from_secs(30),
    );
    assert_eq!(left, 0, "the spool drained");
    let posts = ledger.posts();
    let statuses: Vec<u16> = posts.iter().map(|p| p.status).collect();
    assert_eq!(statuses, vec![507, 507, 200]);
    // The same batch each time, and each retry waited the Retry-After second (the backoff
    // alone would have waited at most 250 ms, then 500 ms).
    assert!(posts.iter().all(|p| p.seqs == vec![1, 2, 3]), "{posts:?}");
    for w in posts.windows(2) {
        let waited = w[1].at - w[0].at;
        assert!(waited >= Duration::from_millis(950), "waited {waited:?}");
    }
    assert_eq!(ledger.accepted_seqs(), vec![1, 2, 3]);
    assert_eq!(shared.delivered.load(Ordering::SeqCst), 3);
    assert_eq!(pending(&shared), 0);
}

#[test]
fn another_refusal_is_retried_with_the_backoff_not_its_retry_after() {
    let pki = Pki::new();
    // 400 with Retry-After: 1 (as for every scripted refusal): not one of the statuses that
    // ask to wait, so the sender retries after its backoff (at most 250 ms the first time).
    let ledger = Ledger::start(pki.server.clone(), vec![400]);
    let dir = tempfile::tempdir().unwrap();
    let shared = spool_of(dir.path(), 2);
    assert_eq!(
        drain(
            &shared,
            &ledger,
            &pki.trusting_ca(),
            10,
            Duration::from_secs(30)
        ),
        0
    );
    let posts = ledger.posts();
    assert_eq!(
        posts.iter().map(|p| p.status).collect::<Vec<_>>(),
        vec![400, 200]
    );
    let waited = posts[1].at - posts[0].at;
    assert!(waited < Duration::from_millis(900), "waited {waited:?}");
    assert_eq!(ledger.accepted_seqs(), vec![1, 2]);
}
