//! The ledger's clock is checked, not trusted (issue #25): `serve` runs under libfaketime with
//! a faked wall clock the test moves (the monotonic clock left real, as an NTP step or a VM
//! resumed with a wrong clock leaves it), and nothing it writes or signs may use a clock that
//! stepped or is behind the log:
//! - forward 40 days for a few seconds: writes, invoices and certificates answer 503
//!   `clock_unreliable` with `Retry-After`, `/readyz` says so, the metrics count the step;
//!   nothing is stamped in the future; back to normal, writes resume by themselves;
//! - back one hour: the same, so `received_at` never decreases;
//! - started with a clock behind the log's last entry: it serves reads, writes nothing.
//!
//! Needs libfaketime (Debian `libfaketime`); skipped loudly without it, mandatory under
//! `GPULEDGER_REQUIRE_FAKETIME=1` (`.ci/run`).

mod common;

use common::http::{init, Http, Log, Server};
use common::TestDb;
use gpuledger::sample;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const NODE: &str = "node-clock";
const TENANT: &str = "tenant-clock";
/// A `serve` whose wall clock is what the file `offset` says, or `None` (skipped) without
/// libfaketime.
fn serve_faked(log: &Log, db: &TestDb, n: u32, offset: &Path) -> Option<(Server, Http)> {
    let env = common::faketime_env(offset)?;
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let s = Server::start_env(&db.url, &log.key_path(), log.dir.path(), n, &[], &env);
    let h = s.http();
    Some((s, h))
}

fn set_offset(file: &Path, offset: &str) {
    std::fs::write(file, format!("{offset}\n")).unwrap();
}

/// Waits until `/readyz` answers `status` (and, when not 200, `clock_unreliable`).
fn ready_becomes(h: &Http, status: u16) {
    let t = Instant::now();
    loop {
        let r = h.get("/readyz", None);
        if r.status == status && (status == 200 || r.lossy().contains("clock_unreliable")) {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "/readyz still {}: {}",
            r.status,
            r.lossy()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Every write path answers 503 `clock_unreliable` with `Retry-After`, and nothing is added.
fn writes_refused(h: &Http, admin: &str, seq: u64) {
    let before = h.size();
    let rec = sample::usage(
        NODE,
        &sample::key(NODE),
        seq,
        TENANT,
        rust_decimal::Decimal::ONE,
        common::slot(seq),
    );
    let r = h.try_post_records(&[rec]).unwrap();
    r.assert_problem(503, "clock_unreliable", "POST /v1/records");
    assert_eq!(r.retry_after.as_deref(), Some("5"), "Retry-After");
    let today = gpuledger::core::time::Timestamp::now();
    let body = serde_json::json!({"tenant": TENANT, "from": today.plus(-7_200).to_string(), "to": today.plus(-3_600).to_string()});
    h.post("/v1/invoices", Some(admin), &body).assert_problem(
        503,
        "clock_unreliable",
        "POST /v1/invoices",
    );
    h.post("/v1/certificates", Some(admin), &body)
        .assert_problem(503, "clock_unreliable", "POST /v1/certificates");
    assert_eq!(h.size(), before, "nothing appended");
}

/// The log's `received_at`, in index order, never decreases and is never ahead of now.
fn received_at_sane(db: &TestDb) {
    let rows = common::verified_rows(&db.url);
    let now = gpuledger::core::time::Timestamp::now().unix();
    for w in rows.windows(2) {
        assert!(
            w[1].received_at >= w[0].received_at,
            "entry {} goes back in time",
            w[1].idx
        );
    }
    for r in &rows {
        assert!(
            r.received_at <= now + 2,
            "entry {} is stamped in the future",
            r.idx
        );
    }
}

fn metric(h: &Http, name: &str) -> f64 {
    let text = h.get("/metrics", None).text();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} not served"))
}

both_backends!(
    a_stepped_ledger_clock_stops_writes_until_it_is_back,
    |db: &TestDb| {
        let log = init(db);
        let offset: PathBuf = log.dir.path().join("faketime");
        set_offset(&offset, "+0");
        let Some((_srv, h)) = serve_faked(&log, db, 0, &offset) else {
            return;
        };
        h.parties_on(&log.admin, &[TENANT], &[NODE]);
        h.register(&log.admin, NODE, "node", &sample::key(NODE));
        h.post_usage(NODE, TENANT, 1..3, 1);
        ready_becomes(&h, 200);

        // Forward 40 days.
        set_offset(&offset, "+40d");
        ready_becomes(&h, 503);
        writes_refused(&h, &log.admin, 3);
        assert_eq!(metric(&h, "gpuledger_clock_unreliable"), 1.0);
        assert!(metric(&h, "gpuledger_clock_steps_total") >= 1.0);
        set_offset(&offset, "+0");
        ready_becomes(&h, 200);
        h.post_usage(NODE, TENANT, 3..5, 1);
        assert_eq!(metric(&h, "gpuledger_clock_unreliable"), 0.0);

        // Back one hour.
        set_offset(&offset, "-1h");
        ready_becomes(&h, 503);
        writes_refused(&h, &log.admin, 5);
        set_offset(&offset, "+0");
        ready_becomes(&h, 200);
        h.post_usage(NODE, TENANT, 5..7, 1);
        received_at_sane(db);
    }
);

both_backends!(
    a_ledger_started_with_a_clock_behind_its_log_writes_nothing,
    |db: &TestDb| {
        let log = init(db);
        let offset: PathBuf = log.dir.path().join("faketime");
        set_offset(&offset, "+0");
        let Some((srv, h)) = serve_faked(&log, db, 0, &offset) else {
            return;
        };
        h.parties_on(&log.admin, &[TENANT], &[NODE]);
        h.register(&log.admin, NODE, "node", &sample::key(NODE));
        h.post_usage(NODE, TENANT, 1..3, 1);
        drop(srv);
        set_offset(&offset, "-1h");
        let (_srv, h) = serve_faked(&log, db, 1, &offset).expect("libfaketime is there");
        ready_becomes(&h, 503);
        writes_refused(&h, &log.admin, 3);
        // Reads go on.
        h.get("/v1/log", None).ok_json(200);
        set_offset(&offset, "+0");
        ready_becomes(&h, 200);
        h.post_usage(NODE, TENANT, 3..4, 1);
        received_at_sane(db);
    }
);
