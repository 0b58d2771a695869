//! The node agent, the market signer and the demo (issue #4): the nvidia-smi parser on
//! hand-written fixtures, attribution and lease switching, and real processes — `gpuledger
//! serve` and `gpuledger agent` children on 127.0.0.1 — for delivery through outages, SIGKILLs,
//! permanent rejections and a full spool. Every test is bounded in time.

mod common;

use common::*;
use gpuledger::agent::attribution::{attribute, EnergyMeter, Interval};
use gpuledger::agent::collector::{parse_nvidia_smi, GpuSample};
use gpuledger::agent::lease;
use gpuledger::agent::sender::{self, Shared};
use gpuledger::agent::spool::{Spool, DEAD_LETTER_FILE};
use gpuledger::core::record::{Body, Role};
use gpuledger::core::time::Timestamp;
use gpuledger::sample;
use rust_decimal::Decimal;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

#[test]
fn nvidia_smi_fixtures() {
    let none = BTreeMap::new();
    let r = parse_nvidia_smi(&fixture("h100-8gpu.txt"), &none);
    assert!(r.notes.is_empty(), "{:?}", r.notes);
    assert_eq!(r.gpus.len(), 8);
    assert_eq!(r.gpus[6].index, 6);
    assert_eq!(r.gpus[6].model, "H100-80GB-HBM3");
    assert_eq!(r.gpus[6].power_watts, Some(dec("699.52")));
    assert_eq!(r.gpus[6].energy_mj, Some(dec("1832007718")));
    assert_eq!(r.gpus[6].utilization_pct, Some(dec("99")));

    let mut models = BTreeMap::new();
    models.insert("NVIDIA H200".to_owned(), "H200-SXM-141G".to_owned());
    let r = parse_nvidia_smi(&fixture("h200-na-fields.txt"), &models);
    assert_eq!(r.gpus.len(), 8, "a field not available keeps the GPU");
    assert!(r.gpus.iter().all(|g| g.model == "H200-SXM-141G"));
    assert_eq!(r.gpus[1].power_watts, None);
    assert_eq!(r.gpus[2].energy_mj, None);
    assert_eq!(r.gpus[4].energy_mj, None);
    assert_eq!(
        (
            r.gpus[6].utilization_pct,
            r.gpus[6].power_watts,
            r.gpus[6].energy_mj
        ),
        (None, None, None)
    );
    assert_eq!(r.notes.len(), 7, "{:?}", r.notes);

    let r = parse_nvidia_smi(&fixture("malformed.txt"), &none);
    let idx: Vec<u32> = r.gpus.iter().map(|g| g.index).collect();
    // 1 (short), 2 (extra field), x (index), 4 (uuid), garbage: skipped; 5 and 6 keep the
    // GPU with the bad field unknown.
    assert_eq!(idx, vec![0, 5, 6]);
    assert_eq!(r.gpus[1].power_watts, None);
    assert_eq!(r.gpus[2].power_watts, None);
    assert_eq!(r.notes.len(), 7, "{:?}", r.notes);

    let r = parse_nvidia_smi(&fixture("h100-gpu-lost.txt"), &none);
    assert_eq!(
        r.gpus.iter().map(|g| g.index).collect::<Vec<_>>(),
        vec![0, 1, 2, 4, 5, 6, 7]
    );
    assert_eq!(r.notes.len(), 1);
    assert!(r.notes[0].contains("GPU is lost"), "{:?}", r.notes);
}

fn gpus(n: u32, model: &str) -> Vec<GpuSample> {
    (0..n)
        .map(|i| GpuSample {
            index: i,
            uuid: format!("GPU-test-{i:04}"),
            model: model.into(),
            utilization_pct: None,
            power_watts: Some(dec("700")),
            energy_mj: None,
            compute_processes: None,
        })
        .collect()
}

#[test]
fn attribution_splits_exactly() {
    let t0 = Timestamp::from_unix(1_800_000_000).unwrap();
    let g = gpus(8, "H100-SXM-80G");
    let leases = lease::parse(
        "[[lease]]\nid = \"l-a\"\ntenant = \"a\"\ngpus = [0, 1, 2]\nslices = [{ gpu = 7, fraction = \"0.333333333\" }]\n\
         [[lease]]\nid = \"l-b\"\ntenant = \"b\"\ngpus = [3]\nslices = [{ gpu = 7, fraction = \"0.333333333\" }]\n",
    )
    .unwrap();
    // 0.000000010 kWh over 8 GPUs: a = 3.333333333/8, b = 1.333333333/8, rest = 3.333333334/8.
    let (bodies, notes) = attribute(&Interval {
        region: "r",
        node: "n",
        start: t0,
        end: t0.plus(10),
        gpus: &g,
        leases: &leases,
        kwh: dec("0.00000001"),
    });
    assert!(notes.is_empty());
    let mut usage = Vec::new();
    let mut energy = Vec::new();
    for b in &bodies {
        match b {
            Body::GpuUsage(u) => usage.push((u.tenant.clone(), u.gpu_count, u.gpu_seconds)),
            Body::Energy(e) => energy.push((e.tenant.clone(), e.kwh)),
            _ => panic!(),
        }
    }
    assert_eq!(
        usage,
        vec![
            ("a".into(), dec("3.333333333"), dec("33.33333333")),
            ("b".into(), dec("1.333333333"), dec("13.33333333")),
        ]
    );
    let total: Decimal = energy.iter().map(|e| e.1).sum();
    assert_eq!(total, dec("0.00000001"), "the parts sum exactly");
    // Quotas in units: a 4.1666…, b 1.6666…, none 4.1666…: floors 4+1+4 = 9, the one unit
    // left goes to the largest remainder (b: 0.666…).
    assert_eq!(
        energy,
        vec![
            (Some("a".into()), dec("0.000000004")),
            (Some("b".into()), dec("0.000000002")),
            (None, dec("0.000000004")),
        ]
    );

    // Bare metal: all energy to the tenant; a lost GPU is not counted.
    let bm =
        lease::parse("[[lease]]\nid = \"l-bm\"\ntenant = \"acme\"\nwhole_node = true\n").unwrap();
    let seven: Vec<GpuSample> = g.iter().filter(|x| x.index != 5).cloned().collect();
    let (bodies, _) = attribute(&Interval {
        region: "r",
        node: "n",
        start: t0,
        end: t0.plus(10),
        gpus: &seven,
        leases: &bm,
        kwh: dec("0.0194"),
    });
    match (&bodies[0], &bodies[1]) {
        (Body::GpuUsage(u), Body::Energy(e)) => {
            assert_eq!((u.gpu_count, u.gpu_seconds), (dec("7"), dec("70")));
            assert_eq!((e.tenant.as_deref(), e.kwh), (Some("acme"), dec("0.0194")));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(bodies.len(), 2);

    // Energy from counters, carried below 10⁻⁹ kWh (3.6 mJ) so nothing is lost across intervals.
    let mut m = EnergyMeter::new();
    let mut g1 = gpus(1, "m");
    g1[0].energy_mj = Some(dec("1000"));
    m.baseline(&g1);
    let mut sum = Decimal::ZERO;
    for step in 1..=10 {
        g1[0].energy_mj = Some(Decimal::from(1000 + 5 * step));
        sum += m.interval_kwh(&g1, 10).0;
    }
    // 50 mJ = 13.88… units of 10⁻⁹ kWh: 13 reported, the rest carried.
    assert_eq!(sum, dec("0.000000013"));
    // A counter that went backwards (driver reload) falls back to power × time.
    g1[0].energy_mj = Some(dec("10"));
    assert_eq!(m.interval_kwh(&g1, 36).0, dec("0.007"));
}

// ---------------------------------------------------------------------------------------------
// Real processes.

/// A port nothing listens on now (bound and released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Writes agent.toml (1-second intervals, 8 simulated GPUs) and the node's key in the
/// setup's folder for `node`; returns the config path. The simulated GPUs are indexes 0..8 of
/// the sample model, which a test node has there and `setup()`'s leases l-a/l-b/l-c cover (8
/// each), so what a lease file bills of them is billed under a lease that covers it.
fn agent_files(s: &Setup, node: &str, server: &str, max_spool: u64, leases: &str) -> PathBuf {
    let rest = format!(
        r#"origin = "test.gpuledger/log"

[collector]
kind = "simulated"
seed = 3
load = "inference"
gpus = [{{ model = "H100-SXM-80G", count = 8, idle_watts = 60, max_watts = "400" }}]

[limits]
max_spool_records = {max_spool}
max_batch = 7
max_backoff_seconds = 1
request_timeout_seconds = 5
compact_after_bytes = 4096
"#
    );
    let dir = s.dir.path().join(node);
    write_agent_config(&dir, node, server, gpuledger::sample::REGION, leases, &rest)
}

/// A ledger with `node` registered and served, and the files of that node's agent (sending to
/// it, leasing [`SHARED_LEASES`]): the setup, the server, its base URL and agent.toml.
fn served_node(db: &TestDb, node: &str) -> (Setup, Proc, String, PathBuf) {
    let s = setup(db, &[(node, Role::Node)]);
    let (server, base) = s.serve(0);
    let cfg = agent_files(&s, node, &base, 100_000, SHARED_LEASES);
    (s, server, base, cfg)
}

const SHARED_LEASES: &str = "[[lease]]\nid = \"l-a\"\ntenant = \"tenant-a\"\ngpus = [0, 1, 2, 3]\n\n[[lease]]\nid = \"l-b\"\ntenant = \"tenant-b\"\ngpus = [4, 5]\nslices = [{ gpu = 6, fraction = \"0.5\" }]\n";

/// Delivers what is left in the node's spool (the same sender code), after its agent stopped.
fn drain_spool(s: &Setup, node: &str, server: &str) -> u64 {
    let spool = Spool::open(&s.dir.path().join(node).join("spool"), 1_000_000, 4096).unwrap();
    let last = spool.next_seq() - 1;
    let shared = Shared::new(spool);
    let left = sender::drain(
        &shared,
        sender_config(server, node, 100),
        Duration::from_secs(30),
    );
    assert_eq!(left, 0, "the spool drained");
    last
}

/// The log holds seqs 1..=last of `node` exactly once each, no interval of one stream
/// overlaps another, and nothing was dead-lettered.
fn assert_exactly_once(s: &Setup, node: &str, last: u64) {
    let rows = assert_seqs_once(&s.url, node, last);
    let mut streams: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for (_, b) in &rows {
        let key = format!("{}|{}|{}", b["tenant"], b["lease"], b["gpu_model"]);
        streams.entry(key).or_default().push((
            b["start"].as_str().unwrap().into(),
            b["end"].as_str().unwrap().into(),
        ));
    }
    for (k, mut iv) in streams {
        iv.sort();
        for w in iv.windows(2) {
            assert!(
                w[1].0 >= w[0].1,
                "stream {k}: {:?} overlaps {:?}",
                w[0],
                w[1]
            );
        }
    }
    let dl = s.dir.path().join(node).join("spool").join(DEAD_LETTER_FILE);
    assert!(
        !dl.exists(),
        "dead letters: {}",
        std::fs::read_to_string(&dl).unwrap_or_default()
    );
}

both_backends!(
    server_down_then_back_delivers_exactly_once,
    |db: &TestDb| {
        let (s, server, base, cfg) = served_node(db, "node-down");
        let port: u16 = base.rsplit(':').next().unwrap().parse().unwrap();
        let a = watched_config("agent", &cfg);
        a.wait_lines(2, Duration::from_secs(20));
        drop(server); // SIGKILL: the ledger is down
        let before = a.lines();
        a.wait_lines(before + 3, Duration::from_secs(20)); // measuring goes on into the spool
        let (server, base2) = s.serve(port);
        assert_eq!(base, base2);
        a.wait_lines(before + 5, Duration::from_secs(20));
        a.kill();
        let last = drain_spool(&s, "node-down", &base);
        assert!(last >= 5 * 5, "at least 5 records per interval, got {last}");
        assert_exactly_once(&s, "node-down", last);
        drop(server);
    }
);

both_backends!(sigkill_mid_send_loses_and_doubles_nothing, |db: &TestDb| {
    let (s, server, base, cfg) = served_node(db, "node-kill");
    let mut rng = Rng::from_clock("agent kill");
    for _ in 0..6 {
        let a = watched_config("agent", &cfg);
        a.wait_lines(1, Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(rng.below(1500)));
        a.kill();
    }
    let last = drain_spool(&s, "node-kill", &base);
    assert_exactly_once(&s, "node-kill", last);
    drop(server);
});

both_backends!(lease_change_applies_from_next_interval, |db: &TestDb| {
    let (s, server, base, cfg) = served_node(db, "node-lease");
    let a = watched_config("agent", &cfg);
    a.wait_lines(2, Duration::from_secs(20));
    // The provider rewrites the file (temp + rename): the whole node to tenant-c.
    let lf = cfg.parent().unwrap().join("leases.toml");
    let tmp = lf.with_extension("new");
    std::fs::write(
        &tmp,
        "[[lease]]\nid = \"l-c\"\ntenant = \"tenant-c\"\nwhole_node = true\n",
    )
    .unwrap();
    std::fs::rename(&tmp, &lf).unwrap();
    let changed = Timestamp::now();
    let n = a.lines();
    a.wait_lines(n + 3, Duration::from_secs(20));
    a.kill();
    let last = drain_spool(&s, "node-lease", &base);
    assert_exactly_once(&s, "node-lease", last);
    // Per interval, one lease set only: either the old (a, b, unattributed) or the new (c).
    let mut by_interval: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (_, b) in logged(&s.url, "node-lease") {
        by_interval
            .entry(b["end"].as_str().unwrap().to_owned())
            .or_default()
            .insert(b["tenant"].as_str().unwrap_or("-").to_owned());
    }
    let old: BTreeSet<String> = ["tenant-a", "tenant-b", "-"].map(String::from).into();
    let new: BTreeSet<String> = ["tenant-c"].map(String::from).into();
    let mut saw_new = false;
    for (end, tenants) in &by_interval {
        let end = Timestamp::parse(end).unwrap();
        if tenants == &new {
            saw_new = true;
            assert!(
                end > changed,
                "tenant-c billed for an interval ending {end}, before the change at {changed}"
            );
        } else {
            assert_eq!(tenants, &old, "interval ending {end}");
            assert!(!saw_new, "old leases after the new ones");
            assert!(
                end <= changed.plus(1),
                "old leases for an interval ending {end}, after the change at {changed}"
            );
        }
    }
    assert!(saw_new);
    drop(server);
});

both_backends!(
    permanent_rejection_goes_to_dead_letter_and_the_rest_flows,
    |db: &TestDb| {
        let s = setup(db, &[("node-dl", Role::Node)]);
        let key = sample::key("node-dl");
        let t = Timestamp::now().plus(-3_600);
        // Seq 3 is already logged with other content: resending seq 3 is a conflict (permanent).
        let ledger = gpuledger::store::Ledger::open(&s.url, log_key()).unwrap();
        // (Record q of the spool is q/100 kWh in 10 s, within what the node draws.)
        let other = sample::energy("node-dl", &key, 3, None, dec("0.9"), t.plus(-100));
        assert_accepted(&ledger.append(vec![other]).unwrap());
        drop(ledger);
        let spool_dir = s.dir.path().join("node-dl").join("spool");
        drop(spool_of_energy_in(
            &spool_dir,
            "node-dl",
            6,
            100,
            t,
            dec("0.01"),
        ));
        let (server, base) = s.serve(0);
        let last = drain_spool(&s, "node-dl", &base);
        assert_eq!(last, 6);
        let dl = std::fs::read_to_string(spool_dir.join(DEAD_LETTER_FILE)).unwrap();
        let lines: Vec<serde_json::Value> = dl
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 1, "{dl}");
        assert_eq!(lines[0]["seq"], 3);
        assert_eq!(lines[0]["outcome"]["reason"], "conflict");
        assert_eq!(lines[0]["envelope"]["body"]["kwh"], "0.03");
        let rows = logged(&s.url, "node-dl");
        let kwh: Vec<(u64, String)> = rows
            .iter()
            .map(|(q, b)| (*q, b["kwh"].as_str().unwrap().to_owned()))
            .collect();
        assert_eq!(
            kwh,
            vec![
                (3, "0.9".into()),
                (1, "0.01".into()),
                (2, "0.02".into()),
                (4, "0.04".into()),
                (5, "0.05".into()),
                (6, "0.06".into())
            ]
        );
        drop(server);
    }
);

both_backends!(
    spool_full_stops_measuring_and_drops_nothing,
    |db: &TestDb| {
        let s = setup(db, &[("node-full", Role::Node)]);
        let port = free_port();
        let base = format!("http://127.0.0.1:{port}");
        // 5 records per interval, room for 12: two intervals fit, the third does not.
        let cfg = agent_files(&s, "node-full", &base, 12, SHARED_LEASES);
        let a = watched_config("agent", &cfg);
        a.wait_lines(2, Duration::from_secs(20));
        let t = Instant::now();
        while !a.stderr.lock().unwrap().contains("SPOOL FULL") {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "no spool-full error; stderr:\n{}",
                a.stderr.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_secs(2));
        assert_eq!(a.lines(), 2, "nothing spooled while full");
        let (server, base2) = s.serve(port);
        assert_eq!(base, base2);
        a.wait_lines(4, Duration::from_secs(20)); // measuring resumed
        assert!(a.stderr.lock().unwrap().contains("measuring resumes"));
        a.kill();
        let last = drain_spool(&s, "node-full", &base);
        assert_exactly_once(&s, "node-full", last);
        drop(server);
    }
);

/// Records are signed for one log (its origin is in the signed message): an agent whose spool
/// is signed for another log sends nothing to this one, and says why; a restart with a
/// configured origin that contradicts its spool's is refused.
#[test]
fn agent_sends_nothing_to_another_log() {
    let db = sqlite();
    let (s, _server, _base, cfg) = served_node(&db, "node-elsewhere");
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "origin = \"test.gpuledger/log\"",
        "origin = \"staging.gpuledger/log\"",
    );
    std::fs::write(&cfg, text).unwrap();
    let a = watched_config("agent", &cfg);
    a.wait_lines(3, Duration::from_secs(20));
    std::thread::sleep(Duration::from_secs(1));
    assert!(logged(&s.url, "node-elsewhere").is_empty());
    let err = a.stderr.lock().unwrap().clone();
    assert!(err.contains("another log"), "{err}");
    a.kill();
    // The spool remembers the log it was signed for.
    let spool = cfg.parent().unwrap().join("spool");
    assert_eq!(
        std::fs::read_to_string(spool.join("origin")).unwrap(),
        "staging.gpuledger/log\n"
    );
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "origin = \"staging.gpuledger/log\"",
        "origin = \"test.gpuledger/log\"",
    );
    std::fs::write(&cfg, text).unwrap();
    let err = agent_refused(&cfg);
    assert!(err.contains("never sent to another"), "{err}");
    assert!(logged(&s.url, "node-elsewhere").is_empty());
}

#[test]
fn agent_refuses_a_key_readable_by_others() {
    use std::os::unix::fs::PermissionsExt;
    let db = sqlite();
    let s = setup(&db, &[]);
    let cfg = agent_files(&s, "node-perm", "http://127.0.0.1:9", 10, "");
    let key = cfg.parent().unwrap().join("node.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = agent_refused(&cfg);
    assert!(err.contains("chmod 600"), "{err}");
}

#[test]
fn demo_starts_accepts_records_and_serves_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = bin()
        .args(["demo", "--listen", "127.0.0.1:0", "--interval-seconds", "1"])
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut text = String::new();
    let base = loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "demo ended early: {text}"
        );
        text.push_str(&line);
        if let Some(b) = line.trim().strip_prefix("listening on ") {
            break b.to_owned();
        }
    };
    let _guard = Proc(child);
    assert!(text.contains("started a fresh demo log"), "{text}");
    let h = Http::new(&base);
    let t = Instant::now();
    loop {
        let r = h.get("/v1/checkpoint", None);
        let note = r.lossy();
        let size: u64 = note
            .lines()
            .nth(1)
            .and_then(|l| l.parse().ok())
            .unwrap_or(0);
        // 7 key registrations, then records from six nodes and the market signer.
        if r.status == 200 && size >= 40 {
            assert!(note.starts_with("demo.gpuledger.local/log\n"), "{note}");
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(40), "checkpoint: {note}");
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(dir.path().join("demo-data/ledger.db").exists());

    // The certificate the demo's printed commands ask for, verified by both verifiers.
    while !text.contains("Ctrl-C stops.") {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "{text}");
        text.push_str(&line);
    }
    let token = text
        .lines()
        .find_map(|l| l.strip_prefix("admin token: "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_owned();
    let quoted = |flag: &str| {
        text.lines()
            .find_map(|l| l.split(&format!("{flag} '")).nth(1))
            .and_then(|rest| rest.split('\'').next())
            .unwrap_or_else(|| panic!("no {flag} in {text}"))
            .to_owned()
    };
    // The first screen sends people to the console, with a token for each role, that work.
    assert!(text.contains(&format!("{base}/console/")), "{text}");
    let after = |prefix: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(prefix))
            .map(|t| t.trim().to_owned())
            .unwrap_or_else(|| panic!("no {prefix} in {text}"))
    };
    let tenant_token = after("sign in as tenant acme-ai:");
    let auditor_token = after("sign in as auditor:");
    h.get("/v1/invoices", Some(&tenant_token)).ok_json(200);
    // bluefin-labs rents a bare-metal node by the month: its contract, with its billing
    // periods, is listed to an admin, not to another tenant.
    let contracts = h
        .get("/v1/contracts?tenant=bluefin-labs", Some(&token))
        .ok_json(200);
    assert_eq!(
        contracts["contracts"][0]["contract"], "C-bluefin-baremetal",
        "{contracts}"
    );
    // Its monthly fee rents lease bluefin-c-101, held to a 99.9 % SLA.
    assert_eq!(
        (
            &contracts["contracts"][0]["fees"][0]["lease"],
            &contracts["contracts"][0]["sla"]["target"]
        ),
        (
            &serde_json::json!("bluefin-c-101"),
            &serde_json::json!("99.9")
        ),
        "{contracts}"
    );
    assert!(
        contracts["contracts"][0]["billing_periods"]
            .as_array()
            .unwrap()
            .len()
            >= 12
    );
    h.get("/v1/contracts?tenant=bluefin-labs", Some(&tenant_token))
        .assert_problem(404, "not_found", "another tenant's contracts");
    // acme-ai is a prepaid cloud-GPU tenant: it sees its top-up and welcome grant.
    let prepaid = h.get("/v1/prepayments", Some(&tenant_token)).ok_json(200);
    let references: Vec<&str> = prepaid["prepayments"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l["reference"].as_str())
        .collect();
    assert_eq!(references, ["DEMO-TOPUP-0001", "DEMO-WELCOME"], "{prepaid}");
    h.get("/v1/invoices?tenant=bluefin-labs", Some(&tenant_token))
        .assert_problem(404, "not_found", "another tenant's invoices");
    h.get("/v1/entries?start=0&end=5", Some(&auditor_token))
        .ok_json(200);
    // Commands that run as printed: no bare `gpuledger`, and an invoice only for a closed hour.
    assert!(!text.contains("  gpuledger "), "{text}");
    assert!(
        text.contains("cargo run -q --release -- verify-log"),
        "{text}"
    );
    let vkey = quoted("--log-key");
    // The demo's witness: its cosignature is on the certificate's checkpoint (quorum 1).
    let wkey = quoted("--witness");
    assert!(text.contains(&format!("witness vkey: {wkey}")), "{text}");
    // The printed command's body is in double quotes (its `to` is `$(date …)`, the moment the
    // command runs), so its inner quotes are escaped.
    let from_to = text
        .lines()
        .find(|l| l.contains("/v1/certificates") && l.contains("\\\"from\\\""))
        .unwrap();
    let field = |k: &str| from_to.split(&format!("\\\"{k}\\\":\\\"")).nth(1).unwrap();
    assert!(
        field("to").starts_with("$(date -u +%Y-%m-%dT%H:%M:%SZ)"),
        "{from_to}"
    );
    let now = gpuledger::core::time::Timestamp::now().to_string();
    let body = serde_json::json!({"tenant": "acme-ai", "from": &field("from")[..20], "to": now});
    let r = h.post("/v1/certificates", Some(&token), &body);
    assert_eq!(r.status, 201, "{}", r.lossy());
    let id = r.json()["id"].as_str().unwrap().to_owned();
    let bundle = h.get(&format!("/v1/certificates/{id}/bundle"), Some(&token));
    assert_eq!(bundle.status, 200, "{}", bundle.lossy());
    std::fs::write(dir.path().join("cert.json"), &r.body).unwrap();
    std::fs::write(dir.path().join("bundle.jsonl"), &bundle.body).unwrap();
    let files = ["--certificate", "cert.json", "--bundle", "bundle.jsonl"];
    assert_verify_passes(dir.path(), &files, &vkey, "PASS: certificate");
    let witnessed = [&files[..], &["--witness", &wkey, "--quorum", "1"]].concat();
    assert_verify_passes(dir.path(), &witnessed, &vkey, "PASS: certificate");
    if !python_verifier_ready() {
        return;
    }
    let python = python_verifier()
        .arg("certificate")
        .args(witnessed)
        .args(["--log-key", &vkey])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&python.stdout);
    assert!(
        python.status.success() && said.starts_with("PASS"),
        "{said}{}",
        String::from_utf8_lossy(&python.stderr)
    );
}

/// An agent whose lease file is missing bills nobody for its GPUs: it says so loudly, once,
/// not in silence; and says so again when the file appears.
#[test]
fn a_missing_lease_file_is_said_once() {
    let db = sqlite();
    let (_s, _server, _base, cfg) = served_node(&db, "node-nolease");
    let leases = cfg.parent().unwrap().join("leases.toml");
    std::fs::remove_file(&leases).unwrap();
    let mut cmd = bin();
    cmd.args(["agent", "--config"])
        .arg(&cfg)
        .env("GPULEDGER_LOG", "info");
    let a = watched(cmd);
    a.wait_lines(3, Duration::from_secs(20));
    std::fs::write(&leases, SHARED_LEASES).unwrap();
    a.wait_lines(a.lines() + 2, Duration::from_secs(20));
    let err = a.stderr.lock().unwrap().clone();
    drop(a);
    assert_eq!(err.matches("NO LEASE FILE").count(), 1, "{err}");
    assert!(err.contains("billed to nobody"), "{err}");
    assert!(err.contains("lease file found"), "{err}");
}

// An agent whose wall clock steps back an hour mid-run (libfaketime on the agent alone, its
// monotonic clock real) keeps measuring: intervals follow the monotonic clock from the last
// recorded end, the step is logged, nothing overlaps, nothing is dead-lettered.
both_backends!(
    an_agent_whose_clock_steps_back_keeps_measuring,
    |db: &TestDb| {
        let (s, _server, base, cfg) = served_node(db, "node-clock");
        let offset = s.dir.path().join("faketime");
        std::fs::write(&offset, "+0\n").unwrap();
        let Some(env) = faketime_env(&offset) else {
            return;
        };
        let mut cmd = bin();
        cmd.args(["agent", "--config"]).arg(&cfg);
        cmd.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
        cmd.env("GPULEDGER_LOG", "info");
        let a = watched(cmd);
        a.wait_lines(3, Duration::from_secs(30));
        std::fs::write(&offset, "-1h\n").unwrap();
        let before = a.lines();
        // Before the fix it waited an hour for the wall clock, silently.
        a.wait_lines(before + 4, Duration::from_secs(30));
        a.wait_for("the step in the log", Duration::from_secs(10), |w| {
            w.stderr.lock().unwrap().contains("stepped")
        });
        a.kill();
        let last = drain_spool(&s, "node-clock", &base);
        assert_exactly_once(&s, "node-clock", last);
    }
);

/// Starts the agent of `cfg` with its wall clock at `offset` (libfaketime's syntax, e.g.
/// `+10m`) and its metrics on a listener of their own; the child and that listener's base URL.
/// `None` (said loudly) without libfaketime.
fn agent_with_clock(s: &Setup, cfg: &std::path::Path, offset: &str) -> Option<(Watched, String)> {
    let file = s.dir.path().join("faketime");
    std::fs::write(&file, format!("{offset}\n")).unwrap();
    let env = faketime_env(&file)?;
    let mut cmd = bin();
    cmd.args(["agent", "--config"])
        .arg(cfg)
        .args(["--metrics-listen", "127.0.0.1:0"]);
    cmd.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    cmd.env("GPULEDGER_LOG", "info");
    let a = watched(cmd);
    let listening = |w: &Watched| {
        w.stdout
            .lock()
            .unwrap()
            .iter()
            .find_map(|l| l.strip_prefix("metrics listening on ").map(str::to_owned))
    };
    a.wait_for("the metrics listener", Duration::from_secs(30), |w| {
        listening(w).is_some()
    });
    let base = listening(&a).unwrap();
    Some((a, base))
}

/// The value of the sample `name` (with its labels, if any) on a Prometheus page.
fn sample_value(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} on the page:\n{page}"))
}

// An agent whose clock runs 10 minutes ahead of the ledger's signs intervals that end in the
// ledger's future: they are refused `in_future`, which is not final, so they stay in the spool
// and are sent again (never dead-lettered); the skew is measured, and a refusal is not counted
// as a delivery, so the not-delivering alert can fire.
#[test]
fn an_agent_ahead_of_the_ledger_keeps_its_records_and_is_not_counted_alive() {
    let db = sqlite();
    let (s, _server, _base, cfg) = served_node(&db, "node-ahead");
    let Some((a, metrics)) = agent_with_clock(&s, &cfg, "+10m") else {
        return;
    };
    a.wait_for("an in_future refusal", Duration::from_secs(30), |w| {
        w.stderr.lock().unwrap().contains("in_future")
    });
    a.wait_lines(4, Duration::from_secs(30));
    let page = Http::new(&metrics).get("/metrics", None).text();
    let skew = sample_value(&page, "gpuledger_agent_clock_skew_seconds");
    assert!((590.0..=610.0).contains(&skew), "skew {skew}");
    assert_eq!(
        sample_value(&page, "gpuledger_agent_last_success_timestamp_seconds"),
        0.0,
        "a refusal is not a delivery"
    );
    assert!(sample_value(&page, "gpuledger_agent_records_total{outcome=\"rejected\"}") >= 1.0);
    assert!(sample_value(&page, "gpuledger_agent_spool_pending_records") >= 1.0);
    a.kill();
    let spool = s.dir.path().join("node-ahead").join("spool");
    assert!(
        !spool.join(DEAD_LETTER_FILE).exists(),
        "nothing dead-lettered"
    );
    assert!(
        logged(&db.url, "node-ahead").is_empty(),
        "nothing accepted early"
    );
}

// An agent whose clock runs steadily 2 hours behind the ledger's is within every rule (a record
// may arrive late), so its records are accepted with times 2 hours early; what must not happen
// is that nobody notices: the skew gauge says -7200 (the GpuledgerAgentClockSkew alert), and
// the times logged are the agent's, not silently shifted.
#[test]
fn an_agent_behind_the_ledger_is_accepted_and_its_skew_is_seen() {
    let db = sqlite();
    let (s, _server, _base, cfg) = served_node(&db, "node-behind");
    let Some((a, metrics)) = agent_with_clock(&s, &cfg, "-2h") else {
        return;
    };
    a.wait_lines(4, Duration::from_secs(30));
    let http = Http::new(&metrics);
    a.wait_for("a delivery", Duration::from_secs(30), |_| {
        let page = http.get("/metrics", None).text();
        sample_value(&page, "gpuledger_agent_last_success_timestamp_seconds") > 0.0
    });
    let page = http.get("/metrics", None).text();
    let skew = sample_value(&page, "gpuledger_agent_clock_skew_seconds");
    assert!((-7210.0..=-7190.0).contains(&skew), "skew {skew}");
    a.kill();
    let rows = logged(&db.url, "node-behind");
    assert!(!rows.is_empty());
    let now = Timestamp::now();
    for (_, b) in &rows {
        let end = Timestamp::parse(b["end"].as_str().unwrap()).unwrap();
        let early = end.seconds_until(now);
        assert!(
            (7_100..7_300).contains(&early),
            "an end {early} s before now"
        );
    }
}
