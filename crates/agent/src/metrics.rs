//! The agent's own Prometheus metrics, and the small HTTP listener that serves them at
//! `GET /metrics` when `metrics_listen` (or `--metrics-listen`) is set.
//!
//! The metrics live in a recorder owned by the agent rather than in the process-wide one:
//! `gpuledger demo` runs agents and the ledger in one process, and the ledger's service
//! metrics use the global recorder. Every metric is registered at start, so a counter that has
//! not moved yet shows as 0 instead of being absent.
//!
//! The listener is `tiny_http` on one thread of its own: a node agent needs no async runtime
//! or web framework to answer a scrape, and it leaves signal handling to the agent.

use super::sender::Shared;
use super::AgentError;
use metrics::{
    Counter, Gauge, Histogram, Key, KeyName, Label, Level, Metadata, Recorder, SharedString, Unit,
};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// Buckets of `gpuledger_agent_send_seconds`, in seconds.
const SEND_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The agent's metrics; cheap handles to update from any thread.
pub struct AgentMetrics {
    recorder: PrometheusRecorder,
    /// Records signed and fsynced to the spool.
    pub records_spooled: Counter,
    /// Records put in a `POST /v1/records` (resends count again).
    pub records_sent: Counter,
    /// Records the ledger answered `accepted`.
    pub records_accepted: Counter,
    /// Records the ledger answered `duplicate` (a resend of a record it holds).
    pub records_duplicate: Counter,
    /// Records the ledger answered `rejected` (for now or for good).
    pub records_rejected: Counter,
    /// Records written to the dead-letter file.
    pub dead_letters: Counter,
    /// POSTs that got no usable answer (unreachable, 429/503/507, other statuses, bad bodies).
    pub send_failures: Counter,
    /// Intervals not recorded because the GPUs could not be read or the spool not written.
    pub measurement_errors: Counter,
    /// Unix time of the last POST whose answer accepted (or found duplicate) a record.
    pub last_success: Gauge,
    /// This machine's clock minus the ledger's, in seconds, as the last answer said.
    pub clock_skew: Gauge,
    /// Steps of this machine's wall clock against its monotonic clock.
    pub clock_steps: Counter,
    /// Unix time of the last interval the measurer closed (recorded or not).
    pub last_measurement: Gauge,
    /// The measurement interval, in seconds.
    pub interval: Gauge,
    /// Time of one POST, in seconds.
    pub send_seconds: Histogram,
    spool_pending: Gauge,
    spool_max: Gauge,
    /// 1 while measuring is stopped because the spool is full.
    pub spool_full: Gauge,
    spool_available: Gauge,
    spool_held: Gauge,
    /// `gpuledger_agent_refused_total{reason}`, one counter per reason that holds a record.
    refused: Vec<(gpuledger_core::rejection::Reason, Counter)>,
}

/// The kinds of metric, for their `# HELP` text.
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// A metric family the agent serves: its kind, name, unit and `# HELP` text, stated once.
struct Family {
    kind: Kind,
    name: &'static str,
    unit: Option<Unit>,
    help: &'static str,
}

/// A counter family without a unit.
const fn counter(name: &'static str, help: &'static str) -> Family {
    Family {
        kind: Kind::Counter,
        name,
        unit: None,
        help,
    }
}

/// A gauge family.
const fn gauge(name: &'static str, unit: Option<Unit>, help: &'static str) -> Family {
    Family {
        kind: Kind::Gauge,
        name,
        unit,
        help,
    }
}

// The agent's metric families, in the order of [`AgentMetrics`]' fields.

const RECORDS_SPOOLED: Family = counter(
    "gpuledger_agent_records_spooled_total",
    "Records signed and fsynced to the spool",
);
const RECORDS_SENT: Family = counter(
    "gpuledger_agent_records_sent_total",
    "Records put in a POST /v1/records (resends count again)",
);
/// One counter per `outcome` label.
const RECORDS: Family = counter(
    "gpuledger_agent_records_total",
    "Records the ledger answered, by outcome (accepted, duplicate, rejected)",
);
const DEAD_LETTERS: Family = counter(
    "gpuledger_agent_dead_letters_total",
    "Records refused for good and written to the dead-letter file",
);
const SEND_FAILURES: Family = counter(
    "gpuledger_agent_send_failures_total",
    "POSTs with no usable answer (unreachable, 429/503/507, other statuses, bad bodies)",
);
const MEASUREMENT_ERRORS: Family = counter(
    "gpuledger_agent_measurement_errors_total",
    "Intervals not recorded: the GPUs could not be read or the spool not written",
);
const LAST_SUCCESS: Family = gauge(
    "gpuledger_agent_last_success_timestamp_seconds",
    Some(Unit::Seconds),
    "Unix time of the last POST whose answer accepted a record or found it a duplicate (0: none yet); refusals do not count",
);
const CLOCK_SKEW: Family = gauge(
    "gpuledger_agent_clock_skew_seconds",
    Some(Unit::Seconds),
    "This machine's clock minus the ledger's (its answer's ledger_now), in seconds",
);
const CLOCK_STEPS: Family = counter(
    "gpuledger_agent_clock_steps_total",
    "Steps of this machine's wall clock against its monotonic clock seen while measuring",
);
const LAST_MEASUREMENT: Family = gauge(
    "gpuledger_agent_last_measurement_timestamp_seconds",
    Some(Unit::Seconds),
    "Unix time of the last measurement interval the agent closed (0: none yet)",
);
const INTERVAL: Family = gauge(
    "gpuledger_agent_interval_seconds",
    Some(Unit::Seconds),
    "The agent's measurement interval, in seconds",
);
const SEND_SECONDS: Family = Family {
    kind: Kind::Histogram,
    name: "gpuledger_agent_send_seconds",
    unit: Some(Unit::Seconds),
    help: "Time of one POST /v1/records, in seconds",
};
const SPOOL_PENDING: Family = gauge(
    "gpuledger_agent_spool_pending_records",
    None,
    "Records in the spool not yet acknowledged by the ledger",
);
const SPOOL_MAX: Family = gauge(
    "gpuledger_agent_spool_max_records",
    None,
    "The spool's bound (limits.max_spool_records); measuring stops when it is reached",
);
const SPOOL_FULL: Family = gauge(
    "gpuledger_agent_spool_full",
    None,
    "1 while measuring is stopped because the spool is full",
);
const SPOOL_AVAILABLE: Family = gauge(
    "gpuledger_agent_spool_filesystem_available_bytes",
    Some(Unit::Bytes),
    "Bytes free on the spool's filesystem",
);
const SPOOL_HELD: Family = gauge(
    "gpuledger_agent_spool_held_records",
    None,
    "Records held in the spool because the ledger refused them for the signer's registration or configuration; retried until accepted",
);
/// One counter per `reason` label.
const REFUSED: Family = counter(
    "gpuledger_agent_refused_total",
    "Refusals of a record because of the signer's registration or configuration, by reason; the record is held and retried (a retry refused again counts again)",
);

/// Registers metrics in the agent's recorder: counters and gauges at zero, so they show before they move.
struct Registrar<'a>(&'a PrometheusRecorder);

impl Registrar<'_> {
    /// Writes the `# HELP` (and unit) of `f`.
    fn describe(&self, f: &Family) {
        let (k, h) = (
            KeyName::from_const_str(f.name),
            SharedString::const_str(f.help),
        );
        match f.kind {
            Kind::Counter => self.0.describe_counter(k, f.unit, h),
            Kind::Gauge => self.0.describe_gauge(k, f.unit, h),
            Kind::Histogram => self.0.describe_histogram(k, f.unit, h),
        }
    }

    /// Describes the counter family `f` and registers its one counter, at 0.
    fn counter(&self, f: &Family) -> Counter {
        self.describe(f);
        self.at_zero(&Key::from_static_name(f.name))
    }

    /// The counter of `f` whose label `label` is `value`, at 0 (`f` is described once, apart).
    fn labelled(&self, f: &Family, label: &'static str, value: &'static str) -> Counter {
        self.at_zero(&Key::from_parts(
            f.name,
            vec![Label::from_static_parts(label, value)],
        ))
    }

    /// Registers the counter `key` and sets it to 0, so that it shows before it moves.
    fn at_zero(&self, key: &Key) -> Counter {
        let c = self.0.register_counter(key, &METADATA);
        c.absolute(0);
        c
    }

    /// Describes the gauge family `f` and registers its gauge, at 0.
    fn gauge(&self, f: &Family) -> Gauge {
        self.describe(f);
        let g = self
            .0
            .register_gauge(&Key::from_static_name(f.name), &METADATA);
        g.set(0.0);
        g
    }

    /// Describes the histogram family `f` and registers its histogram.
    fn histogram(&self, f: &Family) -> Histogram {
        self.describe(f);
        self.0
            .register_histogram(&Key::from_static_name(f.name), &METADATA)
    }

    /// `gpuledger_agent_refused_total{reason}`: one counter per reason that holds a record.
    fn refused(&self) -> Vec<(gpuledger_core::rejection::Reason, Counter)> {
        self.describe(&REFUSED);
        super::sender::HELD_REASONS
            .iter()
            .map(|r| (*r, self.labelled(&REFUSED, "reason", r.code())))
            .collect()
    }
}

impl AgentMetrics {
    /// Registers every metric of the agent at zero.
    pub fn new() -> AgentMetrics {
        let recorder = PrometheusBuilder::new()
            .set_buckets(&SEND_BUCKETS)
            .expect("the bucket list is not empty")
            .build_recorder();
        let r = Registrar(&recorder);
        r.describe(&RECORDS);
        let refused = r.refused();
        let send_seconds = r.histogram(&SEND_SECONDS);
        let outcome = |value| r.labelled(&RECORDS, "outcome", value);
        AgentMetrics {
            records_spooled: r.counter(&RECORDS_SPOOLED),
            records_sent: r.counter(&RECORDS_SENT),
            records_accepted: outcome("accepted"),
            records_duplicate: outcome("duplicate"),
            records_rejected: outcome("rejected"),
            dead_letters: r.counter(&DEAD_LETTERS),
            send_failures: r.counter(&SEND_FAILURES),
            measurement_errors: r.counter(&MEASUREMENT_ERRORS),
            last_success: r.gauge(&LAST_SUCCESS),
            clock_skew: r.gauge(&CLOCK_SKEW),
            clock_steps: r.counter(&CLOCK_STEPS),
            last_measurement: r.gauge(&LAST_MEASUREMENT),
            interval: r.gauge(&INTERVAL),
            send_seconds,
            spool_pending: r.gauge(&SPOOL_PENDING),
            spool_max: r.gauge(&SPOOL_MAX),
            spool_full: r.gauge(&SPOOL_FULL),
            spool_available: r.gauge(&SPOOL_AVAILABLE),
            spool_held: r.gauge(&SPOOL_HELD),
            refused,
            recorder,
        }
    }

    /// Counts one refusal for `reason` in `gpuledger_agent_refused_total` (a reason that does
    /// not hold a record has no counter there).
    pub fn refused(&self, reason: gpuledger_core::rejection::Reason) {
        if let Some((_, c)) = self.refused.iter().find(|(r, _)| *r == reason) {
            c.increment(1);
        }
    }

    /// The name of every metric family the agent serves.
    pub fn names(&self) -> Vec<String> {
        self.recorder
            .handle()
            .render()
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next())
            .map(str::to_owned)
            .collect()
    }

    /// Sets the spool gauges from `shared` and renders every metric as Prometheus text.
    pub fn render(&self, shared: &Shared, spool_dir: &std::path::Path) -> String {
        if let Ok(spool) = shared.spool.lock() {
            self.spool_pending.set(spool.pending() as f64);
            self.spool_held.set(spool.held() as f64);
            self.spool_max.set(spool.max_pending() as f64);
        }
        if let Some(free) = gpuledger_shell::disk::available_bytes(spool_dir) {
            self.spool_available.set(free as f64);
        }
        self.recorder.handle().render()
    }
}

impl Default for AgentMetrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The running metrics listener.
pub struct MetricsServer {
    addr: SocketAddr,
    server: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MetricsServer {
    /// The bound address (the real port when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the listener and waits for its thread.
    pub fn stop(mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers one request: `GET /metrics` renders the metrics, `GET /healthz` says ok.
fn answer(request: tiny_http::Request, shared: &Shared, spool_dir: &std::path::Path) {
    use tiny_http::{Header, Method, Response};
    let text_type = |v: &str| Header::from_bytes("Content-Type", v).expect("a valid header");
    let path = request.url().split('?').next().unwrap_or("");
    let response = match (request.method(), path) {
        (Method::Get, "/metrics") => {
            Response::from_string(shared.metrics.render(shared, spool_dir))
                .with_header(text_type("text/plain; version=0.0.4"))
        }
        (Method::Get, "/healthz") => {
            Response::from_string("ok\n").with_header(text_type("text/plain"))
        }
        (Method::Get, _) => Response::from_string("not found\n").with_status_code(404),
        _ => Response::from_string("method not allowed\n").with_status_code(405),
    };
    if let Err(e) = request.respond(response) {
        tracing::debug!(error = %e, "a metrics scrape went away before its answer");
    }
}

/// Binds `addr` and serves `GET /metrics` (and `GET /healthz`) from `shared` on a thread of
/// its own. A bind failure is returned here, so a wrong address stops the agent at start.
pub fn serve(
    addr: SocketAddr,
    shared: Arc<Shared>,
    spool_dir: PathBuf,
) -> Result<MetricsServer, AgentError> {
    let server = tiny_http::Server::http(addr)
        .map_err(|e| AgentError::Config(format!("metrics_listen {addr}: {e}")))?;
    let bound = server.server_addr().to_ip().unwrap_or(addr);
    let server = Arc::new(server);
    let listener = Arc::clone(&server);
    let thread = std::thread::Builder::new()
        .name("agent-metrics".into())
        .spawn(move || {
            // `incoming_requests` ends when `MetricsServer::stop` unblocks the server.
            for request in listener.incoming_requests() {
                answer(request, &shared, &spool_dir);
            }
        })
        .map_err(|e| AgentError::Io {
            path: "thread".into(),
            source: e,
        })?;
    Ok(MetricsServer {
        addr: bound,
        server,
        thread: Some(thread),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::{Duration, Instant};

    /// One raw HTTP/1.0 exchange; the whole answer as text.
    fn exchange(addr: SocketAddr, request: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(request.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    /// Scrapes are answered while other clients stall (connected and silent, or stopped half
    /// way through their headers), unknown paths and methods get 404 and 405, and stop returns.
    #[test]
    fn stalled_clients_do_not_block_scrapes() {
        let dir = tempfile::tempdir().unwrap();
        let spool = crate::spool::Spool::open(dir.path(), 100, 1 << 20).unwrap();
        let shared = crate::sender::Shared::new(spool);
        let server = serve("127.0.0.1:0".parse().unwrap(), shared, dir.path().into()).unwrap();
        let addr = server.addr();
        let _silent = TcpStream::connect(addr).unwrap();
        let mut half = TcpStream::connect(addr).unwrap();
        half.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            .unwrap();

        let started = Instant::now();
        let page = exchange(addr, "GET /metrics HTTP/1.0\r\n\r\n");
        assert!(
            page.starts_with("HTTP/1.1 200") || page.starts_with("HTTP/1.0 200"),
            "{page}"
        );
        assert!(
            page.contains("gpuledger_agent_records_spooled_total 0"),
            "{page}"
        );
        assert!(
            page.contains("gpuledger_agent_spool_pending_records 0"),
            "{page}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        let health = exchange(addr, "GET /healthz HTTP/1.0\r\n\r\n");
        assert!(
            health.contains(" 200 ") && health.ends_with("ok\n"),
            "{health}"
        );
        let missing = exchange(addr, "GET /nothing HTTP/1.0\r\n\r\n");
        assert!(missing.contains(" 404 "), "{missing}");
        let post = exchange(addr, "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n");
        assert!(post.contains(" 405 "), "{post}");

        let stopping = Instant::now();
        server.stop();
        assert!(stopping.elapsed() < Duration::from_secs(5));
    }
}
