//! The sender against a stand-in ledger (tiny_http on a thread) that refuses records for the
//! signer's registration or configuration: such records are held, not dead-lettered, they do
//! not hold back the other records, and they are delivered once the refusal stops (#23).

use gpuledger_agent::sender::{run, SenderConfig, Shared};
use gpuledger_agent::spool::{Spool, DEAD_LETTER_FILE};
use gpuledger_core::envelope::Envelope;
use gpuledger_core::sample;
use gpuledger_core::time::Timestamp;
use rust_decimal::Decimal;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SIGNER: &str = "node-refusals";

/// What the stand-in ledger refuses: `(reason, field)` for a record, or `None` to take it.
type Refuse = dyn Fn(&serde_json::Value) -> Option<(&'static str, &'static str)> + Send;

/// The stand-in ledger's state.
struct State {
    refuse: Box<Refuse>,
    /// The seqs it accepted.
    logged: BTreeSet<u64>,
}

/// Serves `GET /v1/log` and `POST /v1/records` until the test ends.
fn ledger(state: Arc<Mutex<State>>) -> String {
    let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
    let url = format!("http://{}", server.server_addr().to_ip().unwrap());
    std::thread::spawn(move || {
        for mut req in server.incoming_requests() {
            let answer = if req.url() == "/v1/log" {
                serde_json::json!({ "origin": sample::ORIGIN })
            } else {
                let mut body = String::new();
                req.as_reader().read_to_string(&mut body).unwrap();
                let batch: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
                let mut s = state.lock().unwrap();
                let outcomes: Vec<_> = batch
                    .iter()
                    .map(|e| {
                        let seq = e["seq"].as_u64().unwrap();
                        if let Some((reason, field)) = (s.refuse)(e) {
                            return serde_json::json!({"status": "rejected", "reason": reason,
                                "field": field, "message": format!("{field} is refused")});
                        }
                        if s.logged.insert(seq) {
                            serde_json::json!({"status": "accepted", "index": seq})
                        } else {
                            serde_json::json!({"status": "duplicate", "index": seq})
                        }
                    })
                    .collect();
                serde_json::json!({ "outcomes": outcomes })
            };
            let _ = req.respond(tiny_http::Response::from_string(answer.to_string()));
        }
    });
    url
}

/// A spool in `dir` holding `records`.
fn spool_of(dir: &Path, records: &[Envelope]) -> Arc<Shared> {
    let mut spool = Spool::open(dir, 1_000, 4096).unwrap();
    spool.append(records, "test").unwrap();
    Shared::new(spool)
}

fn client(url: &str) -> ureq::Agent {
    gpuledger_agent::tls::client(url, &Default::default(), Duration::from_secs(5)).unwrap()
}

fn config(url: &str, max_batch: usize) -> SenderConfig {
    SenderConfig {
        server_url: url.to_owned(),
        max_batch,
        max_backoff: Duration::from_millis(500),
        request_timeout: Duration::from_secs(5),
        signer: SIGNER.into(),
        origin: sample::ORIGIN.into(),
    }
}

/// Waits up to 20 s for `f`.
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn counts(shared: &Shared) -> (u64, u64) {
    let s = shared.spool.lock().unwrap();
    (s.pending(), s.held())
}

fn metric(shared: &Shared, dir: &Path, line: &str) -> f64 {
    let page = shared.metrics.render(shared, dir);
    page.lines()
        .find_map(|l| l.strip_prefix(line)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {line} in\n{page}"))
}

/// A region outside the key's scope refuses every record: they are held (nothing in the
/// dead-letter file), counted and retried, and delivered once the ledger takes them.
#[test]
fn scope_refusals_are_held_and_delivered_after_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let key = sample::key(SIGNER);
    let t = Timestamp::now();
    let records: Vec<_> = (1..=5)
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
    let state = Arc::new(Mutex::new(State {
        refuse: Box::new(|_| Some(("region_not_allowed", "body.region"))),
        logged: BTreeSet::new(),
    }));
    let url = ledger(state.clone());
    let shared = spool_of(dir.path(), &records);
    let sender = {
        let (s, cfg) = (shared.clone(), config(&url, 2));
        let http = client(&url);
        std::thread::spawn(move || run(s, cfg, http))
    };

    until("every record held", || counts(&shared) == (5, 5));
    // Retried while held, counted each time, and never dead-lettered.
    until("a retry", || {
        metric(
            &shared,
            dir.path(),
            "gpuledger_agent_refused_total{reason=\"region_not_allowed\"}",
        ) > 5.0
    });
    assert_eq!(
        metric(&shared, dir.path(), "gpuledger_agent_spool_held_records"),
        5.0
    );
    assert_eq!(
        metric(&shared, dir.path(), "gpuledger_agent_dead_letters_total"),
        0.0
    );
    assert!(!dir.path().join(DEAD_LETTER_FILE).exists());
    assert!(state.lock().unwrap().logged.is_empty());

    // The operator fixes the registration: the held records go through.
    state.lock().unwrap().refuse = Box::new(|_| None);
    until("the held records delivered", || counts(&shared) == (0, 0));
    assert_eq!(
        state.lock().unwrap().logged,
        (1..=5).collect::<BTreeSet<u64>>()
    );
    assert_eq!(
        metric(&shared, dir.path(), "gpuledger_agent_spool_held_records"),
        0.0
    );
    shared.request_stop();
    sender.join().unwrap();
}

/// One lease the ledger does not know yet holds back only its own records: the records of
/// the other leases (before and after it, in one batch and in later ones) are delivered.
#[test]
fn an_unregistered_lease_holds_back_only_its_own_records() {
    let dir = tempfile::tempdir().unwrap();
    let key = sample::key(SIGNER);
    let t = Timestamp::now();
    let tenants = [
        "tenant-a",
        "tenant-new",
        "tenant-b",
        "tenant-new",
        "tenant-a",
        "tenant-b",
    ];
    let records: Vec<_> = tenants
        .iter()
        .zip(1u64..)
        .map(|(tenant, q)| {
            sample::usage(SIGNER, &key, q, tenant, Decimal::ONE, t.plus(10 * q as i64))
        })
        .collect();
    let new_lease = sample::lease("tenant-new");
    let state = Arc::new(Mutex::new(State {
        refuse: Box::new(move |e| {
            (e["body"]["lease"] == new_lease.as_str()).then_some(("unknown_lease", "body.lease"))
        }),
        logged: BTreeSet::new(),
    }));
    let url = ledger(state.clone());
    let shared = spool_of(dir.path(), &records);
    let sender = {
        let (s, cfg) = (shared.clone(), config(&url, 3));
        let http = client(&url);
        std::thread::spawn(move || run(s, cfg, http))
    };

    until("the other leases' records delivered", || {
        state.lock().unwrap().logged == BTreeSet::from([1, 3, 5, 6])
    });
    until("the new lease's records held", || counts(&shared) == (2, 2));

    state.lock().unwrap().refuse = Box::new(|_| None);
    until("the held records delivered", || counts(&shared) == (0, 0));
    assert_eq!(
        state.lock().unwrap().logged,
        (1..=6).collect::<BTreeSet<u64>>()
    );
    assert!(!dir.path().join(DEAD_LETTER_FILE).exists());
    shared.request_stop();
    sender.join().unwrap();
}

/// A refusal for the record itself still goes to the dead-letter file, and the rest flows.
#[test]
fn a_refusal_for_the_record_itself_is_dead_lettered() {
    let dir = tempfile::tempdir().unwrap();
    let key = sample::key(SIGNER);
    let t = Timestamp::now();
    let records: Vec<_> = (1..=3)
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
    let state = Arc::new(Mutex::new(State {
        refuse: Box::new(|e| (e["seq"] == 2).then_some(("overlapping_interval", "body.start"))),
        logged: BTreeSet::new(),
    }));
    let url = ledger(state.clone());
    let shared = spool_of(dir.path(), &records);
    let left = gpuledger_agent::sender::drain_with(
        &shared,
        config(&url, 10),
        client(&url),
        Duration::from_secs(20),
    );
    assert_eq!(left, 0);
    assert_eq!(state.lock().unwrap().logged, BTreeSet::from([1, 3]));
    let dead = std::fs::read_to_string(dir.path().join(DEAD_LETTER_FILE)).unwrap();
    assert_eq!(dead.lines().count(), 1);
    assert!(dead.contains("overlapping_interval"), "{dead}");
}
