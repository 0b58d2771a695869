//! More of issue #4: nvidia-smi's process query on hand-written fixtures; the nvidia-smi
//! collector running a real program (a fixture shell script) in-process and inside a
//! `gpuledger agent` child; the `nvml` collector's configuration with and without the cargo
//! feature; the sender honouring 429 and 503 with `Retry-After` (a small fake proxy in front of
//! a real `gpuledger serve`); the market signer's CSV source end to end; and (#23) records
//! refused for the registration or configuration held while the rest flows. Everything runs
//! on 127.0.0.1 and is bounded in time.

mod common;

use common::*;
use gpuledger::agent::attribution::unleased_busy;
use gpuledger::agent::collector::{
    count_processes, parse_compute_apps, parse_nvidia_smi, Collector, CollectorError, NvidiaSmi,
};
use gpuledger::agent::lease;
use gpuledger::agent::sender::{self, Shared};
use gpuledger::agent::spool::DEAD_LETTER_FILE;
use gpuledger::core::record::Role;
use gpuledger::core::time::Timestamp;
use gpuledger::{keyfile, sample};
use rust_decimal::Decimal;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Pure: the process query.

#[test]
fn compute_apps_fixtures() {
    let (apps, notes) = parse_compute_apps(&fixture("apps-h100-8gpu.txt"));
    assert!(notes.is_empty(), "{notes:?}");
    assert_eq!(apps.len(), 8);
    assert_eq!(apps[1].pid, 48377);
    assert_eq!(apps[1].used_memory_mib, Some(1024));
    let mut r = parse_nvidia_smi(&fixture("h100-8gpu.txt"), &BTreeMap::new());
    count_processes(&mut r, &apps);
    let counts: Vec<Option<u32>> = r.gpus.iter().map(|g| g.compute_processes).collect();
    assert_eq!(
        counts,
        [2, 1, 1, 1, 1, 1, 0, 1].map(Some).to_vec(),
        "two on GPU 0, none on GPU 6"
    );
    assert!(r.notes.is_empty(), "{:?}", r.notes);

    let (apps, notes) = parse_compute_apps(&fixture("apps-none.txt"));
    assert!(apps.is_empty() && notes.is_empty(), "{apps:?} {notes:?}");
    assert_eq!(parse_compute_apps(""), (vec![], vec![]));

    let (apps, notes) = parse_compute_apps(&fixture("apps-malformed.txt"));
    // Kept: the good line, the [N/A] memory (unknown), the unknown GPU. Skipped: bad pid,
    // short line, bad UUID.
    assert_eq!(
        apps.iter().map(|a| a.pid).collect::<Vec<_>>(),
        vec![48213, 48214, 60001]
    );
    assert_eq!(apps[1].used_memory_mib, None);
    assert_eq!(notes.len(), 3, "{notes:?}");
    let mut r = parse_nvidia_smi(&fixture("h100-gpu-lost.txt"), &BTreeMap::new());
    let notes_before = r.notes.len();
    count_processes(&mut r, &apps);
    assert_eq!(r.notes.len(), notes_before + 1, "{:?}", r.notes);
    assert!(r.notes.last().unwrap().contains("60001"), "{:?}", r.notes);

    // An unleased GPU running processes is reported; a whole-node lease covers every GPU.
    let mut r = parse_nvidia_smi(&fixture("h100-8gpu.txt"), &BTreeMap::new());
    count_processes(
        &mut r,
        &parse_compute_apps(&fixture("apps-h100-8gpu.txt")).0,
    );
    let part =
        lease::parse("[[lease]]\nid = \"l\"\ntenant = \"t\"\ngpus = [0, 1, 2, 3, 4, 5]\n").unwrap();
    assert_eq!(unleased_busy(&r.gpus, &part), vec![(7, 1)]);
    let whole = lease::parse("[[lease]]\nid = \"l\"\ntenant = \"t\"\nwhole_node = true\n").unwrap();
    assert!(unleased_busy(&r.gpus, &whole).is_empty());
    assert_eq!(unleased_busy(&r.gpus, &[]).len(), 7);
}

// ---------------------------------------------------------------------------------------------
// The nvidia-smi collector running a program.

/// A copy of the fake nvidia-smi in a fresh directory, printing `gpus` and `apps` (fixture
/// names; `None` leaves that file out, so the query fails).
fn fake_smi(gpus: &str, apps: Option<&str>) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("fake-nvidia-smi.sh");
    std::fs::copy(fixtures().join("fake-nvidia-smi.sh"), &script).unwrap();
    std::fs::copy(fixtures().join(gpus), dir.path().join("h100-8gpu.txt")).unwrap();
    if let Some(a) = apps {
        std::fs::copy(fixtures().join(a), dir.path().join("apps-h100-8gpu.txt")).unwrap();
    }
    (dir, script)
}

#[test]
fn nvidia_smi_collector_runs_the_program() {
    let models: BTreeMap<String, String> = [(
        "NVIDIA H100 80GB HBM3".to_owned(),
        "H100-SXM-80G".to_owned(),
    )]
    .into();
    let at = Timestamp::now();

    let (_d, script) = fake_smi("h100-8gpu.txt", Some("apps-h100-8gpu.txt"));
    let mut c = NvidiaSmi {
        command: script.clone(),
        models: models.clone(),
        processes: true,
    };
    let r = c.read(at).unwrap();
    let mut want = parse_nvidia_smi(&fixture("h100-8gpu.txt"), &models);
    count_processes(
        &mut want,
        &parse_compute_apps(&fixture("apps-h100-8gpu.txt")).0,
    );
    assert_eq!(r, want, "the program's output, parsed");
    assert_eq!(r.gpus[0].model, "H100-SXM-80G");
    assert_eq!(r.gpus[0].compute_processes, Some(2));

    // Without the process query the counts stay unknown.
    c.processes = false;
    assert!(c
        .read(at)
        .unwrap()
        .gpus
        .iter()
        .all(|g| g.compute_processes.is_none()));

    // A failing process query is a note; the GPU reading stands.
    let (_d2, script2) = fake_smi("h100-gpu-lost.txt", None);
    let r = NvidiaSmi {
        command: script2,
        models: models.clone(),
        processes: true,
    }
    .read(at)
    .unwrap();
    assert_eq!(r.gpus.len(), 7, "GPU 3 fell off the bus");
    assert!(r.gpus.iter().all(|g| g.compute_processes.is_none()));
    assert!(
        r.notes.iter().any(|n| n.contains("process query failed")),
        "{:?}",
        r.notes
    );

    // No GPU read, and no program at all: errors that name the command.
    let (d3, script3) = fake_smi("apps-none.txt", None);
    match (NvidiaSmi {
        command: script3,
        models: models.clone(),
        processes: true,
    })
    .read(at)
    {
        Err(CollectorError::NoGpus { detail, .. }) => {
            assert!(detail.contains("No running processes"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
    let missing = d3.path().join("no-such-nvidia-smi");
    match (NvidiaSmi {
        command: missing,
        models,
        processes: true,
    })
    .read(at)
    {
        Err(e @ CollectorError::Spawn { .. }) => {
            assert!(e.to_string().contains("no-such-nvidia-smi"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Real processes.

/// `text` without ANSI colour sequences (the log may be coloured).
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn agent_with_the_nvidia_smi_collector_delivers_what_the_program_prints() {
    let db = sqlite();
    let s = setup(&db, &[("node-smi", Role::Node)]);
    let (_server, base) = s.serve(0);
    let (smi_dir, script) = fake_smi("h100-8gpu.txt", Some("apps-h100-8gpu.txt"));
    // The energy counters grow by 70 J per GPU every 100 ms (700 W) while the agent runs;
    // after `lost` is set, GPU 3 falls off the bus.
    let stop = Arc::new(AtomicBool::new(false));
    let lost = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, lost) = (stop.clone(), lost.clone());
        let gpu_file = smi_dir.path().join("h100-8gpu.txt");
        let template = fixture("h100-8gpu.txt");
        std::thread::spawn(move || {
            let mut step: u64 = 0;
            while !stop.load(Ordering::SeqCst) {
                let mut out = String::new();
                for line in template.lines() {
                    let (head, counter) = line.rsplit_once(", ").unwrap();
                    if lost.load(Ordering::SeqCst) && head.starts_with("3, ") {
                        continue;
                    }
                    let c: u64 = counter.parse().unwrap();
                    out.push_str(&format!("{head}, {}\n", c + 70_000 * step));
                }
                if lost.load(Ordering::SeqCst) {
                    out.push_str("Unable to determine the device handle for GPU0000:5D:00.0: GPU is lost.  Reboot the system to recover this GPU\n");
                }
                let tmp = gpu_file.with_extension("tmp");
                std::fs::write(&tmp, out).unwrap();
                std::fs::rename(&tmp, &gpu_file).unwrap();
                step += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    // GPUs 0-6 leased; GPU 7 runs a process but is not leased (a warning).
    let leases = "[[lease]]\nid = \"l-a\"\ntenant = \"tenant-a\"\ngpus = [0, 1, 2, 3, 4, 5, 6]\n";
    let collector = format!(
        r#"
[collector]
kind = "nvidia-smi"
command = "{}"
models = {{ "NVIDIA H100 80GB HBM3" = "H100-SXM-80G" }}

[limits]
max_backoff_seconds = 1
"#,
        script.display()
    );
    let d = s.dir.path().join("node-smi");
    let cfg = write_agent_config(&d, "node-smi", &base, "cn-north-imx", leases, &collector);
    let a = watched_config("agent", &cfg);
    a.wait_lines(2, Duration::from_secs(20));
    lost.store(true, Ordering::SeqCst);
    a.wait_lines(a.lines() + 3, Duration::from_secs(20));
    // Give the sender a moment to deliver the last append, then stop everything.
    let t = Instant::now();
    let last_seq = || -> u64 {
        let l = a.stdout.lock().unwrap();
        let last = l.last().unwrap();
        // "spooled seq A-B interval …"
        let range = last.split_whitespace().nth(2).unwrap();
        range.split_once('-').unwrap().1.parse().unwrap()
    };
    let want = last_seq();
    while logged(&s.url, "node-smi").len() < want as usize {
        assert!(t.elapsed() < Duration::from_secs(15), "not delivered");
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();
    let stderr = a.stderr.lock().unwrap().clone();
    drop(a);
    assert!(
        stderr.contains("no lease covers runs compute processes"),
        "{stderr}"
    );
    assert!(stderr.contains("GPU is lost"), "{stderr}");
    let rows = logged(&s.url, "node-smi");
    assert_seqs_once(&s.url, "node-smi", rows.len() as u64);
    let mut counts = Vec::new();
    let mut kwh = Decimal::ZERO;
    for (_, b) in &rows {
        if b.get("gpu_count").is_some() {
            assert_eq!(b["gpu_model"], "H100-SXM-80G", "{b}");
            assert_eq!(b["tenant"], "tenant-a");
            counts.push(b["gpu_count"].as_str().unwrap().to_owned());
        } else {
            kwh += dec(b["kwh"].as_str().unwrap());
        }
    }
    // 7 leased GPUs present, then 6 once GPU 3 is lost; never anything else.
    assert!(counts.first().is_some_and(|c| c == "7"), "{counts:?}");
    assert!(counts.last().is_some_and(|c| c == "6"), "{counts:?}");
    assert!(counts.iter().all(|c| c == "7" || c == "6"), "{counts:?}");
    assert!(kwh > Decimal::ZERO, "energy from the growing counters");
    assert!(
        !s.dir
            .path()
            .join("node-smi/spool")
            .join(DEAD_LETTER_FILE)
            .exists(),
        "nothing dead-lettered"
    );
}

fn nvml_agent_config(dir: &Path) -> PathBuf {
    keyfile::write_new(&dir.join("node.key"), &sample::key("node-nvml")).unwrap();
    let cfg = dir.join("agent.toml");
    std::fs::write(
        &cfg,
        r#"signer = "node-nvml"
key_file = "node.key"
server_url = "http://127.0.0.1:9"
region = "cn-north-imx"
node = "node-nvml"
lease_file = "leases.toml"
spool_dir = "spool"

[collector]
kind = "nvml"
models = { "NVIDIA H100 80GB HBM3" = "H100-SXM-80G" }
"#,
    )
    .unwrap();
    cfg
}

/// Built without the `nvml` feature, `kind = "nvml"` is a clear configuration error.
#[cfg(not(feature = "nvml"))]
#[test]
fn nvml_collector_is_refused_when_not_built() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = nvml_agent_config(dir.path());
    let err = agent_refused(&cfg);
    assert!(err.contains("agent.toml"), "{err}");
    assert!(err.contains("--features nvml"), "{err}");
    assert!(!dir.path().join("spool").exists(), "nothing was started");
}

/// Built with the `nvml` feature on a machine without the NVIDIA driver (as in CI), the agent
/// refuses to start and says why. On a machine with the driver, the agent starts; the test
/// then only checks that it keeps running.
#[cfg(feature = "nvml")]
#[test]
fn nvml_collector_says_when_the_driver_library_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = nvml_agent_config(dir.path());
    let mut child = bin()
        .args(["agent", "--config"])
        .arg(&cfg)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            assert_eq!(status.code(), Some(2), "{err}");
            assert!(err.contains("NVIDIA driver library"), "{err}");
            return;
        }
        if t.elapsed() > Duration::from_secs(5) {
            eprintln!("NVML initialised here (a driver is present); the agent runs");
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------------------------
// 429 and 503 with Retry-After.

/// What the fake proxy saw: per request, when it arrived and the status it answered.
type ProxyLog = Arc<Mutex<Vec<(Instant, u16)>>>;

/// Reads one HTTP/1.1 request (headers and a Content-Length body).
fn read_request(stream: &mut TcpStream) -> Option<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).ok()? == 0 {
            return None;
        }
        buf.push(byte[0]);
        if buf.len() > 64 * 1024 {
            return None;
        }
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).ok()?;
    let path = head.split_whitespace().nth(1)?.to_owned();
    Some((path, body))
}

/// A proxy on 127.0.0.1 that answers the first record posts with `busy` (status, Retry-After
/// seconds) and forwards the rest, and every `GET /v1/log`, to `upstream`, one request per
/// connection.
fn busy_proxy(upstream: String, busy: Vec<(u16, u64)>) -> (String, ProxyLog) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let log: ProxyLog = Arc::default();
    let l = log.clone();
    std::thread::spawn(move || {
        let upstream = Http::with_timeout(&upstream, Duration::from_secs(10));
        let mut busy = busy.into_iter();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let Some((path, body)) = read_request(&mut stream) else {
                continue;
            };
            if path == "/v1/log" {
                // The sender's check of which log this is: passed through, not counted.
                let r = upstream.get(&path, None);
                let text = r.text();
                let _ = write!(
                    stream,
                    "HTTP/1.1 {} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                    r.status,
                    text.len()
                );
                continue;
            }
            let at = Instant::now();
            let (status, extra, text) = match busy.next() {
                Some((status, after)) => (
                    status,
                    format!("Retry-After: {after}\r\n"),
                    r#"{"type":"about:blank","title":"busy"}"#.to_owned(),
                ),
                None => {
                    let r = upstream.post_bytes(&path, Some("application/json"), &body);
                    (r.status, String::new(), r.text())
                }
            };
            l.lock().unwrap().push((at, status));
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{text}",
                text.len()
            );
        }
    });
    (format!("http://{addr}"), log)
}

both_backends!(sender_honours_retry_after_on_429_and_503, |db: &TestDb| {
    let s = setup(db, &[("node-busy", Role::Node)]);
    let (_server, base) = s.serve(0);
    let t = Timestamp::now().plus(-3_600);
    let spool_dir = s.dir.path().join("spool");
    let spool = spool_of_energy_in(&spool_dir, "node-busy", 10, 1_000, t, dec("0.01"));
    let (proxy, log) = busy_proxy(base, vec![(429, 1), (503, 1), (503, 2)]);
    let shared = Shared::new(spool);
    let started = Instant::now();
    let left = sender::drain(
        &shared,
        sender_config(&proxy, "node-busy", 4),
        Duration::from_secs(30),
    );
    assert_eq!(left, 0, "the spool drained");
    let seen = log.lock().unwrap().clone();
    let statuses: Vec<u16> = seen.iter().map(|r| r.1).collect();
    // Three refusals, then three batches of at most 4 records.
    assert_eq!(statuses, vec![429, 503, 503, 200, 200, 200]);
    // Each retry waited at least the Retry-After (the backoff alone would wait ≤ 250 ms,
    // then ≤ 500 ms, then ≤ 1 s).
    for (i, want) in [(1, 1000), (2, 1000), (3, 2000)] {
        let gap = seen[i].0.duration_since(seen[i - 1].0);
        assert!(
            gap >= Duration::from_millis(want - 50),
            "request {i} came {gap:?} after a Retry-After of {want} ms"
        );
    }
    assert!(started.elapsed() < Duration::from_secs(15));
    assert_eq!(shared.delivered.load(Ordering::SeqCst), 10);
    assert_seqs_once(&s.url, "node-busy", 10);
    assert!(!spool_dir.join(DEAD_LETTER_FILE).exists());
});

// ---------------------------------------------------------------------------------------------
// The market signer's CSV source.

both_backends!(market_csv_prices_land_in_the_log, |db: &TestDb| {
    let s = setup(db, &[("market-csv", Role::Market)]);
    let (_server, base) = s.serve(0);
    let d = s.dir.path().join("market");
    std::fs::create_dir_all(&d).unwrap();
    keyfile::write_new(&d.join("market.key"), &sample::key("market-csv")).unwrap();
    let now = Timestamp::now();
    let at = |secs: i64| Timestamp::from_unix(now.unix() + secs).unwrap().to_string();
    let csv = d.join("prices.csv");
    std::fs::write(
        &csv,
        format!(
            "effective_from,region,gpu_model,price_per_gpu_hour,currency\n\
             # scheduled by the pricing desk\n\
             {},cn-north-imx,H100-SXM-80G,9.80,CNY\n\
             {},cn-east-sh,H20-96G,7.125,CNY\n\
             {},cn-north-imx,H100-SXM-80G,not-a-price,CNY\n\
             {},cn-north-imx,H100-SXM-80G,10.05,CNY\n\
             {},cn-north-imx,H100-SXM-80G,11,CNY\n",
            at(-120), // just published: within the log's clock skew
            at(60),
            at(90),
            at(3_600),
            at(8 * 86_400), // beyond the 7-day horizon: waits
        ),
    )
    .unwrap();
    let cfg = d.join("market.toml");
    std::fs::write(
        &cfg,
        format!(
            "signer = \"market-csv\"\nkey_file = \"market.key\"\nserver_url = \"{base}\"\n\
             spool_dir = \"spool\"\n\n[source]\nkind = \"csv\"\npath = \"prices.csv\"\n"
        ),
    )
    .unwrap();
    let mut cmd = bin();
    cmd.args(["market", "--config"])
        .arg(&cfg)
        .env("GPULEDGER_LOG", "info");
    let m = watched(cmd);
    let url = s.url.clone();
    let has = |n: usize| move |_: &Watched| logged(&url, "market-csv").len() >= n;
    m.wait_for("3 prices", Duration::from_secs(20), has(3));
    // Nothing beyond the horizon, and the bad row was named.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(logged(&s.url, "market-csv").len(), 3);
    let err = plain(&m.stderr.lock().unwrap());
    assert!(
        err.contains("price row skipped") && err.contains("line=5"),
        "{err}"
    );
    // Each price it publishes is said, not done in silence.
    let said: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("spot price signed"))
        .collect();
    assert_eq!(said.len(), 3, "{err}");
    assert!(
        said[1].contains("seq=2") && said[1].contains("price_per_gpu_hour=7.125"),
        "{err}"
    );
    drop(m);
    let rows = logged(&s.url, "market-csv");
    let got: Vec<(u64, String, String, String, String, String)> = rows
        .iter()
        .map(|(q, b)| {
            let f = |k: &str| b[k].as_str().unwrap().to_owned();
            (
                *q,
                f("effective_from"),
                f("region"),
                f("gpu_model"),
                f("price_per_gpu_hour"),
                f("currency"),
            )
        })
        .collect();
    let row = |q: u64, t: i64, r: &str, m: &str, p: &str| {
        (
            q,
            at(t),
            r.to_owned(),
            m.to_owned(),
            p.to_owned(),
            "CNY".to_owned(),
        )
    };
    assert_eq!(
        got,
        vec![
            row(1, -120, "cn-north-imx", "H100-SXM-80G", "9.8"),
            row(2, 60, "cn-east-sh", "H20-96G", "7.125"),
            row(3, 3_600, "cn-north-imx", "H100-SXM-80G", "10.05"),
        ]
    );
    assert_seqs_once(&s.url, "market-csv", 3);
});

// ---------------------------------------------------------------------------------------------
// The benchmark, at a small size: it runs and reports what it says it reports.

#[test]
fn bench_agent_runs_small() {
    let out = bin()
        .args([
            "bench",
            "agent",
            "--records",
            "2000",
            "--batch",
            "300",
            "--seconds",
            "3",
            "--interval-seconds",
            "1",
            "--json",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["drain"]["records"], 2000, "{v}");
    assert_eq!(v["drain"]["delivered"], 2000, "{v}");
    assert_eq!(v["drain"]["dead_lettered"], 0, "{v}");
    assert!(v["drain"]["records_per_s"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["steady"]["intervals"].as_u64().unwrap() >= 2, "{v}");
    assert!(v["steady"]["peak_rss_mb"].as_f64().unwrap() > 1.0, "{v}");
    assert!(v["steady"]["cpu_percent_of_one_core"].as_f64().unwrap() >= 0.0);
    assert!(v["server_peak_rss_mb"].as_f64().unwrap() > 1.0, "{v}");
}

// ---------------------------------------------------------------------------------------------
// #23: refusals for the registration or configuration are held, not dead-lettered.

/// Against a real ledger: records of a lease the log does not know yet wait alone in the
/// spool's held queue while the node's other records (before and after them) are logged, as the
/// ledger takes a later seq while an earlier one is missing; once the lease is registered they
/// follow without a restart of the agent. A record of a region outside the key's scope is held
/// too (loudly, counted), never dead-lettered.
#[test]
fn an_unregistered_lease_waits_alone_and_follows_once_registered() {
    use gpuledger::core::envelope::Envelope;
    use gpuledger::core::record::{Body, GpuUsage, Kind};
    const NODE: &str = "node-held";
    let db = sqlite();
    let s = setup(&db, &[(NODE, Role::Node)]);
    // The tenant is registered, its lease not yet.
    let [tenant, lease] = sample::parties("tenant-late", &[NODE], sample::NODE_GPUS);
    open(&db).append_ledger_entry(tenant).unwrap();
    let (server, base) = s.serve(0);
    let key = sample::key(NODE);
    let t = Timestamp::now().plus(-3_600);
    // (tenant, lease): `setup()`'s l-a and l-b, and tenant-late's sample lease, which all
    // cover 8 sample-model GPUs of the node.
    let late = sample::lease("tenant-late");
    let billed = [
        ("tenant-a", "l-a"),
        ("tenant-late", late.as_str()),
        ("tenant-b", "l-b"),
        ("tenant-late", late.as_str()),
        ("tenant-a", "l-a"),
    ];
    let mut records: Vec<_> = billed
        .iter()
        .zip(1u64..)
        .map(|(under, q)| {
            sample::usage_under(NODE, &key, q, *under, Decimal::ONE, t.plus(10 * q as i64))
        })
        .collect();
    let end = t.plus(100);
    let wrong_region = Body::GpuUsage(GpuUsage {
        tenant: "tenant-b".into(),
        lease: Some("l-b".into()),
        region: "eu-west".into(),
        node: NODE.into(),
        gpu_model: "H100-SXM-80G".into(),
        gpu_count: Decimal::ONE,
        start: end.plus(-10),
        end,
        gpu_seconds: Decimal::from(10),
    });
    records.push(Envelope::sign(
        sample::ORIGIN,
        Kind::GpuUsage,
        NODE,
        &key,
        6,
        &wrong_region,
    ));
    let dir = s.dir.path().join("spool");
    let mut spool = gpuledger::agent::spool::Spool::open(&dir, 1_000, 4096).unwrap();
    spool.append(&records, "test").unwrap();
    let shared = Shared::new(spool);
    let sender = {
        let (shared, cfg) = (shared.clone(), sender_config(&base, NODE, 2));
        let http =
            gpuledger::agent::tls::client(&base, &Default::default(), cfg.request_timeout).unwrap();
        std::thread::spawn(move || sender::run(shared, cfg, http))
    };
    let seqs = || logged(&s.url, NODE).iter().map(|r| r.0).collect::<Vec<_>>();
    let held = || shared.spool.lock().unwrap().held();
    let wait = |what: &str, f: &dyn Fn() -> bool| {
        let t = Instant::now();
        while !f() {
            assert!(t.elapsed() < Duration::from_secs(30), "timed out: {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait("the other leases' records logged", &|| seqs() == [1, 3, 5]);
    wait("the late lease's and the wrong region's held", &|| {
        held() == 3
    });

    // Register the lease (the ledger stopped meanwhile: the sender waits for it, on the same
    // port), and the held records of it follow.
    let port: u16 = base.rsplit(':').next().unwrap().parse().unwrap();
    drop(server);
    open(&db).append_ledger_entry(lease).unwrap();
    let (_server, again) = s.serve(port);
    assert_eq!(again, base);
    wait("the held records logged", &|| seqs().len() == 5);
    assert_seqs_once(&s.url, NODE, 5);
    wait("only the wrong region's record held", &|| held() == 1);
    let page = shared.metrics.render(&shared, &dir);
    for (line, at_least) in [
        (
            "gpuledger_agent_refused_total{reason=\"unknown_lease\"} ",
            2.0,
        ),
        (
            "gpuledger_agent_refused_total{reason=\"region_not_allowed\"} ",
            1.0,
        ),
        ("gpuledger_agent_spool_held_records ", 1.0),
    ] {
        let v: f64 = page
            .lines()
            .find_map(|l| l.strip_prefix(line)?.parse().ok())
            .unwrap_or_else(|| panic!("no {line} in {page}"));
        assert!(v >= at_least, "{line}{v}");
    }
    shared.request_stop();
    sender.join().unwrap();
    assert!(
        !dir.join(DEAD_LETTER_FILE).exists(),
        "nothing dead-lettered"
    );
}

// A market signer whose clock runs 10 minutes behind the ledger's signs a price the ledger
// finds in the past: the refusal is the clock's, not the price's, so the price is held and
// retried (never dead-lettered), the skew is measured, and the log says why.
both_backends!(
    a_market_signer_behind_the_ledger_holds_its_refused_prices,
    |db: &TestDb| {
        let s = setup(db, &[("market-late", Role::Market)]);
        let (_server, base) = s.serve(0);
        let d = s.dir.path().join("market");
        std::fs::create_dir_all(&d).unwrap();
        let offset = d.join("faketime");
        std::fs::write(&offset, "-10m\n").unwrap();
        let Some(env) = faketime_env(&offset) else {
            return;
        };
        keyfile::write_new(&d.join("market.key"), &sample::key("market-late")).unwrap();
        // 400 s before the ledger's now (past its 300 s skew), 200 s after the signer's.
        let effective = Timestamp::now().plus(-400);
        std::fs::write(
            d.join("prices.csv"),
            format!(
                "effective_from,region,gpu_model,price_per_gpu_hour,currency\n\
                 {effective},cn-north-imx,H100-SXM-80G,9.80,CNY\n"
            ),
        )
        .unwrap();
        let cfg = d.join("market.toml");
        std::fs::write(
            &cfg,
            format!(
                "signer = \"market-late\"\nkey_file = \"market.key\"\nserver_url = \"{base}\"\n\
                 spool_dir = \"spool\"\n\n[source]\nkind = \"csv\"\npath = \"prices.csv\"\n"
            ),
        )
        .unwrap();
        let mut cmd = bin();
        cmd.args(["market", "--config"]).arg(&cfg);
        cmd.envs(env.iter().map(|(k, v)| (*k, v.as_str())));
        cmd.env("GPULEDGER_LOG", "info");
        let m = watched(cmd);
        m.wait_for("the refusal held", Duration::from_secs(30), |w| {
            w.stderr.lock().unwrap().contains("clock disagrees")
        });
        drop(m);
        let spool = d.join("spool");
        assert!(
            !spool.join(DEAD_LETTER_FILE).exists(),
            "dead-lettered: {}",
            std::fs::read_to_string(spool.join(DEAD_LETTER_FILE)).unwrap_or_default()
        );
        let held = gpuledger::agent::spool::Spool::open(&spool, 1_000, 4096)
            .unwrap()
            .held();
        assert_eq!(held, 1, "the price is held for retry");
        assert!(logged(&s.url, "market-late").is_empty());
    }
);
