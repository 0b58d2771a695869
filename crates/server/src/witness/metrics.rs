//! The witness's Prometheus metrics, served at `GET /metrics` on its own listener.
//!
//! They live in a recorder owned by each [`Witness`](super::Witness), not in the process-wide
//! one: `serve`'s process (the demo, the ingest benchmark, the tests) runs witnesses in-process
//! (`server::witnessing::LocalWitness`) next to the ledger, whose metrics use the global
//! recorder, and two witnesses in one process must not add into each other's series. Every
//! series is registered at start, so a counter that has not moved shows as 0 rather than being
//! absent. Label values are bounded: origins come from the witness's configuration, outcomes
//! from [`Outcome`].
//!
//! The log side's view of its witnesses is `gpuledger_witness_*` on `serve`; the witness's own
//! series are `gpuledger_witness_server_*`, so both can live in one Prometheus.

use super::state::Latest;
use metrics::{Counter, Gauge, Key, KeyName, Label, Level, Metadata, Recorder, SharedString};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};
use std::collections::BTreeMap;

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// `gpuledger_witness_server_requests_total{outcome}`: `add-checkpoint` requests by answer.
pub const REQUESTS: &str = "gpuledger_witness_server_requests_total";
/// `gpuledger_witness_server_cosigned_size{origin}`: the latest cosigned tree size per log.
pub const COSIGNED_SIZE: &str = "gpuledger_witness_server_cosigned_size";
/// `gpuledger_witness_server_last_cosignature_timestamp_seconds{origin}`.
pub const LAST_COSIGNATURE: &str = "gpuledger_witness_server_last_cosignature_timestamp_seconds";
/// `gpuledger_witness_server_fork_evidence_total{origin}`: refusals of a validly signed
/// checkpoint.
pub const FORK_EVIDENCE: &str = "gpuledger_witness_server_fork_evidence_total";

/// The answer an `add-checkpoint` request got: the `outcome` label (a fixed set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// 200: cosigned.
    Cosigned,
    /// 409: the old size is not the stored size, or the stored size has another root.
    Conflict,
    /// 422: the consistency proof does not verify.
    Unprocessable,
    /// 403: no valid signature of a trusted key of the origin.
    Forbidden,
    /// 404: the origin is not a configured log.
    NotFound,
    /// 400: malformed.
    BadRequest,
    /// 413: the body is over `MAX_ADD_CHECKPOINT_BODY`.
    TooLarge,
    /// 500: the state file failed; nothing was cosigned.
    Error,
}

impl Outcome {
    /// Every outcome, in label order.
    pub const ALL: [Outcome; 8] = [
        Outcome::Cosigned,
        Outcome::Conflict,
        Outcome::Unprocessable,
        Outcome::Forbidden,
        Outcome::NotFound,
        Outcome::BadRequest,
        Outcome::TooLarge,
        Outcome::Error,
    ];

    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Cosigned => "cosigned",
            Outcome::Conflict => "conflict",
            Outcome::Unprocessable => "unprocessable",
            Outcome::Forbidden => "forbidden",
            Outcome::NotFound => "not_found",
            Outcome::BadRequest => "bad_request",
            Outcome::TooLarge => "too_large",
            Outcome::Error => "error",
        }
    }

    /// The outcome of an HTTP status answered to `add-checkpoint`; `None` for statuses that
    /// are not an answer to a submission (405 for another method).
    pub fn of_status(status: u16) -> Option<Outcome> {
        Some(match status {
            200 => Outcome::Cosigned,
            409 => Outcome::Conflict,
            422 => Outcome::Unprocessable,
            403 => Outcome::Forbidden,
            404 => Outcome::NotFound,
            400 => Outcome::BadRequest,
            413 => Outcome::TooLarge,
            500..=599 => Outcome::Error,
            _ => return None,
        })
    }
}

/// The series of one configured log.
struct OriginMetrics {
    size: Gauge,
    last: Gauge,
    forks: Counter,
}

impl OriginMetrics {
    /// Registers the series of `origin` in `recorder`, set from its `latest` cosigned
    /// checkpoint (0 without one); its fork counter at 0.
    fn register(recorder: &PrometheusRecorder, origin: &str, latest: Option<&Latest>) -> Self {
        let size = recorder.register_gauge(
            &labelled(COSIGNED_SIZE, "origin", origin.to_owned()),
            &METADATA,
        );
        size.set(latest.map_or(0.0, |l| l.size as f64));
        let last = recorder.register_gauge(
            &labelled(LAST_COSIGNATURE, "origin", origin.to_owned()),
            &METADATA,
        );
        last.set(latest.map_or(0.0, |l| l.updated_at as f64));
        let forks = recorder.register_counter(
            &labelled(FORK_EVIDENCE, "origin", origin.to_owned()),
            &METADATA,
        );
        forks.absolute(0);
        OriginMetrics { size, last, forks }
    }
}

/// The key of series `name` with one label.
fn labelled(name: &'static str, label: &'static str, value: String) -> Key {
    Key::from_parts(name, vec![Label::new(label, value)])
}

/// The help text of every series, in `recorder`.
fn describe(recorder: &PrometheusRecorder) {
    let describe_counter = |name: &'static str, help: &'static str| {
        recorder.describe_counter(
            KeyName::from_const_str(name),
            None,
            SharedString::const_str(help),
        )
    };
    let describe_gauge = |name: &'static str, help: &'static str| {
        recorder.describe_gauge(
            KeyName::from_const_str(name),
            None,
            SharedString::const_str(help),
        )
    };
    describe_counter(
        REQUESTS,
        "add-checkpoint requests by answer (cosigned, conflict, unprocessable, forbidden, \
         not_found, bad_request, too_large, error)",
    );
    describe_gauge(
        COSIGNED_SIZE,
        "The latest tree size the witness cosigned, per log origin (0: none yet)",
    );
    describe_gauge(
        LAST_COSIGNATURE,
        "Unix time of the last cosignature per log origin (at start: when the stored \
         checkpoint was stored; 0: none yet)",
    );
    describe_counter(
        FORK_EVIDENCE,
        "Refusals of a checkpoint validly signed by the log (409 on another root, 422): \
         possible evidence of a fork, kept in the state file",
    );
}

/// One witness's metrics; updated from any thread.
pub struct WitnessMetrics {
    recorder: PrometheusRecorder,
    requests: BTreeMap<Outcome, Counter>,
    origins: BTreeMap<String, OriginMetrics>,
}

impl WitnessMetrics {
    /// Registers every series for `origins` at zero, then sets the per-log gauges from what the
    /// state file holds (`stored`: origin and latest cosigned checkpoint).
    pub fn new<'a>(
        origins: impl IntoIterator<Item = &'a str>,
        stored: &[(String, Latest)],
    ) -> WitnessMetrics {
        let recorder = PrometheusBuilder::new().build_recorder();
        describe(&recorder);
        let requests = Outcome::ALL
            .into_iter()
            .map(|o| {
                let c = recorder.register_counter(
                    &labelled(REQUESTS, "outcome", o.label().to_owned()),
                    &METADATA,
                );
                c.absolute(0);
                (o, c)
            })
            .collect();
        let origins = origins
            .into_iter()
            .map(|origin| {
                let latest = stored.iter().find(|(o, _)| o == origin).map(|(_, l)| l);
                let series = OriginMetrics::register(&recorder, origin, latest);
                (origin.to_owned(), series)
            })
            .collect();
        WitnessMetrics {
            recorder,
            requests,
            origins,
        }
    }

    /// Counts one `add-checkpoint` answer.
    pub fn request(&self, outcome: Outcome) {
        if let Some(c) = self.requests.get(&outcome) {
            c.increment(1);
        }
    }

    /// Records a cosignature of `origin` at `size`, at time `now` (POSIX seconds).
    pub fn cosigned(&self, origin: &str, size: u64, now: u64) {
        if let Some(m) = self.origins.get(origin) {
            m.size.set(size as f64);
            m.last.set(now as f64);
        }
    }

    /// Counts one refusal of a validly signed checkpoint of `origin`.
    pub fn fork_evidence(&self, origin: &str) {
        if let Some(m) = self.origins.get(origin) {
            m.forks.increment(1);
        }
    }

    /// Every series as Prometheus text.
    pub fn render(&self) -> String {
        self.recorder.handle().render()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuledger_core::merkle::Hash;

    #[test]
    fn series_are_registered_seeded_and_kept_apart() {
        let stored = vec![(
            "log.test/a".to_owned(),
            Latest {
                size: 41,
                root: Hash([1; 32]),
                checkpoint: String::new(),
                updated_at: 1_700_000_000,
            },
        )];
        let m = WitnessMetrics::new(["log.test/a", "log.test/b"], &stored);
        let other = WitnessMetrics::new(["log.test/a"], &[]);
        let text = m.render();
        for o in Outcome::ALL {
            let line = format!("{REQUESTS}{{outcome=\"{}\"}} 0", o.label());
            assert!(text.contains(&line), "{line} in\n{text}");
        }
        assert!(text.contains(&format!("{COSIGNED_SIZE}{{origin=\"log.test/a\"}} 41")));
        assert!(text.contains(&format!("{COSIGNED_SIZE}{{origin=\"log.test/b\"}} 0")));
        assert!(text.contains(&format!(
            "{LAST_COSIGNATURE}{{origin=\"log.test/a\"}} 1700000000"
        )));
        assert!(text.contains(&format!("{FORK_EVIDENCE}{{origin=\"log.test/b\"}} 0")));

        m.request(Outcome::TooLarge);
        m.cosigned("log.test/b", 7, 1_800_000_000);
        m.fork_evidence("log.test/a");
        // An origin not configured adds no series.
        m.cosigned("log.test/z", 9, 1);
        m.fork_evidence("log.test/z");
        let text = m.render();
        assert!(text.contains(&format!("{REQUESTS}{{outcome=\"too_large\"}} 1")));
        assert!(text.contains(&format!("{COSIGNED_SIZE}{{origin=\"log.test/b\"}} 7")));
        assert!(text.contains(&format!(
            "{LAST_COSIGNATURE}{{origin=\"log.test/b\"}} 1800000000"
        )));
        assert!(text.contains(&format!("{FORK_EVIDENCE}{{origin=\"log.test/a\"}} 1")));
        assert!(!text.contains("log.test/z"), "{text}");
        // The other witness's recorder did not move.
        let other = other.render();
        assert!(other.contains(&format!("{REQUESTS}{{outcome=\"too_large\"}} 0")));
        assert!(other.contains(&format!("{FORK_EVIDENCE}{{origin=\"log.test/a\"}} 0")));
    }

    #[test]
    fn statuses_map_to_outcomes() {
        assert_eq!(Outcome::of_status(200), Some(Outcome::Cosigned));
        assert_eq!(Outcome::of_status(413), Some(Outcome::TooLarge));
        assert_eq!(Outcome::of_status(503), Some(Outcome::Error));
        assert_eq!(Outcome::of_status(405), None);
        let labels: std::collections::BTreeSet<_> =
            Outcome::ALL.iter().map(|o| o.label()).collect();
        assert_eq!(labels.len(), Outcome::ALL.len());
    }
}
