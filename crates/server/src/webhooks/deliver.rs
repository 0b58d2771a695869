//! The delivery worker `serve` runs: one thread that claims due deliveries (a lease of the
//! attempt's timeout plus [`LEASE_MARGIN`]; `store::webhooks::claim`), attempts up to
//! `concurrency` of them at once, and records every attempt with its consequence.
//!
//! An attempt is a `POST` of the event's payload with the Standard Webhooks headers, to an
//! address checked by [`super::ssrf`] (pinned: the DNS is asked once, and only checked
//! addresses are connected to), with no redirects and no proxy, within the timeout.
//!
//! - 2xx: delivered.
//! - 410 Gone: the delivery fails and the endpoint is disabled (`disabled_reason` `gone`).
//! - 429 and 503 with `Retry-After` (seconds or an HTTP date): the next attempt waits at least
//!   that long, capped at `max_retry_after_seconds`.
//! - anything else, or no answer: the next retry of the schedule, plus 0–20 % jitter; after
//!   the last one the delivery is `failed`.

use super::sign::{self, Signing};
use super::ssrf::{self, PinnedResolver};
use super::{EventType, WebhookSettings, JITTER_PERCENT};
use ed25519_dalek::SigningKey;
use gpuledger_core::time::Timestamp;
use gpuledger_store::webhooks::{self as outbox, After, AttemptRecord, Claimed};
use gpuledger_store::{self as store, DbConn};
use rand_core::RngCore;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};
use ureq::unversioned::transport::{Connector, TcpConnector};

/// How often the worker looks for due deliveries when it found none.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// A claim lasts the attempt's timeout plus this.
pub const LEASE_MARGIN: Duration = Duration::from_secs(5);
/// How often the queue gauges are refreshed.
pub const QUEUE_GAUGE_INTERVAL: Duration = Duration::from_secs(5);
/// Longest error text kept for an attempt, in bytes.
pub const MAX_ERROR_BYTES: usize = 500;
/// The `User-Agent` of deliveries.
pub const USER_AGENT: &str = concat!("gpuledger-webhooks/", env!("CARGO_PKG_VERSION"));

/// The outcome labels of `gpuledger_webhook_attempts_total`.
pub const OUTCOMES: [&str; 4] = ["delivered", "retry", "failed", "gone"];

/// The running worker.
pub struct Worker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Stops claiming, finishes the attempts in flight and records them, then returns.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Starts the worker on its own connections to `database_url`.
pub fn start(
    database_url: &str,
    key: SigningKey,
    settings: WebhookSettings,
) -> Result<Worker, String> {
    describe_metrics();
    for outcome in OUTCOMES {
        for t in EventType::ALL {
            metrics::counter!("gpuledger_webhook_attempts_total", "outcome" => outcome, "event_type" => t.as_str())
                .absolute(0);
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut owner = [0u8; 8];
    rand_core::OsRng.fill_bytes(&mut owner);
    let ctx = Context {
        url: database_url.to_owned(),
        key,
        settings,
        owner: format!("w_{}", hex::encode(owner)),
        stop: stop.clone(),
    };
    let thread = std::thread::Builder::new()
        .name("webhooks".into())
        .spawn(move || ctx.run())
        .map_err(|e| format!("cannot start the webhook worker: {e}"))?;
    Ok(Worker {
        stop,
        thread: Some(thread),
    })
}

struct Context {
    url: String,
    key: SigningKey,
    settings: WebhookSettings,
    owner: String,
    stop: Arc<AtomicBool>,
}

impl Context {
    fn run(self) {
        let mut conn: Option<DbConn> = None;
        let mut gauges_at = Instant::now() - QUEUE_GAUGE_INTERVAL;
        let lease = (self.settings.timeout + LEASE_MARGIN).as_secs() as i64;
        while !self.stop.load(Ordering::SeqCst) {
            let c = match conn.as_mut() {
                Some(c) => c,
                None => match store::connect(&self.url) {
                    Ok(c) => conn.insert(c),
                    Err(e) => {
                        tracing::warn!(error = %e, "webhook worker cannot reach the database");
                        self.pause(Duration::from_secs(2));
                        continue;
                    }
                },
            };
            if gauges_at.elapsed() >= QUEUE_GAUGE_INTERVAL {
                gauges_at = Instant::now();
                if let Ok((depth, oldest)) = outbox::queue(c) {
                    metrics::gauge!("gpuledger_webhook_queue_depth").set(depth as f64);
                    let age = oldest.map_or(0, |o| (Timestamp::now().unix() - o).max(0));
                    metrics::gauge!("gpuledger_webhook_oldest_pending_age_seconds").set(age as f64);
                }
            }
            let claimed = match outbox::claim(
                c,
                &self.owner,
                Timestamp::now(),
                lease,
                self.settings.concurrency as i64,
            ) {
                Ok(v) => v,
                Err(e) => {
                    tracing::warn!(error = %e, "claiming webhook deliveries failed");
                    conn = None;
                    self.pause(Duration::from_secs(1));
                    continue;
                }
            };
            if claimed.is_empty() {
                self.pause(POLL_INTERVAL);
                continue;
            }
            let this = &self;
            let results: Vec<(Claimed, AttemptRecord, After)> = std::thread::scope(|s| {
                let handles: Vec<_> = claimed
                    .into_iter()
                    .map(|d| {
                        s.spawn(move || {
                            let (rec, after) = this.attempt(&d);
                            (d, rec, after)
                        })
                    })
                    .collect();
                handles.into_iter().filter_map(|h| h.join().ok()).collect()
            });
            for (d, rec, after) in results {
                self.record(&mut conn, &d, &rec, after);
            }
        }
    }

    fn pause(&self, d: Duration) {
        let until = Instant::now() + d;
        while !self.stop.load(Ordering::SeqCst) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50).min(d));
        }
    }

    fn record(&self, conn: &mut Option<DbConn>, d: &Claimed, rec: &AttemptRecord, after: After) {
        let outcome = match after {
            After::Delivered => "delivered",
            After::Retry(_) => "retry",
            After::Failed => "failed",
            After::Gone => "gone",
        };
        let event_type = EventType::parse(&d.event_type).map_or("other", EventType::as_str);
        metrics::counter!("gpuledger_webhook_attempts_total", "outcome" => outcome, "event_type" => event_type)
            .increment(1);
        metrics::histogram!("gpuledger_webhook_attempt_seconds")
            .record(rec.duration_ms as f64 / 1000.0);
        match after {
            After::Delivered => {
                tracing::debug!(webhook_id = %d.id, endpoint = %d.endpoint_id, "webhook delivered")
            }
            _ => tracing::warn!(
                webhook_id = %d.id,
                endpoint = %d.endpoint_id,
                status = ?rec.status,
                error = rec.error.as_deref().unwrap_or(""),
                outcome,
                "webhook attempt not delivered"
            ),
        }
        // Recorded with a fresh connection if needed; a failure leaves the lease to expire, and
        // the delivery is attempted again (at least once, same id).
        for _ in 0..3 {
            let c = match conn.as_mut() {
                Some(c) => c,
                None => match store::connect(&self.url) {
                    Ok(c) => conn.insert(c),
                    Err(_) => {
                        self.pause(Duration::from_millis(500));
                        continue;
                    }
                },
            };
            match outbox::record_attempt(c, d, &self.owner, rec, after, Timestamp::now()) {
                Ok(_) => return,
                Err(e) => {
                    tracing::warn!(error = %e, webhook_id = %d.id, "recording a webhook attempt failed");
                    *conn = None;
                }
            }
        }
    }

    /// One attempt: sign, check the target's addresses, POST, classify the answer.
    fn attempt(&self, d: &Claimed) -> (AttemptRecord, After) {
        let started_at = Timestamp::now();
        let clock = Instant::now();
        let result = self.post(d, started_at.unix());
        let duration_ms = clock.elapsed().as_millis() as u64;
        let (status, error, after) = match result {
            Ok((status, retry_after)) => {
                let after = match status {
                    200..=299 => After::Delivered,
                    410 => After::Gone,
                    429 | 503 => self.retry(d, retry_after),
                    _ => self.retry(d, None),
                };
                let error =
                    (!(200..=299).contains(&status)).then(|| format!("answered HTTP {status}"));
                (Some(status), error, after)
            }
            Err(e) => (None, Some(truncate(e)), self.retry(d, None)),
        };
        (
            AttemptRecord {
                started_at,
                duration_ms,
                status,
                error,
            },
            after,
        )
    }

    /// When to retry: the schedule's next wait with jitter, at least a `Retry-After` (capped);
    /// `Failed` when the schedule is exhausted.
    fn retry(&self, d: &Claimed, retry_after: Option<Duration>) -> After {
        let Some(wait) = self.settings.retry_schedule.get(d.schedule_step as usize) else {
            return After::Failed;
        };
        let secs = wait.as_secs();
        let jitter = rand_core::OsRng.next_u64() % (secs * JITTER_PERCENT / 100 + 1);
        let mut delay = secs + jitter;
        if let Some(ra) = retry_after {
            delay = delay.max(ra.min(self.settings.max_retry_after).as_secs());
        }
        // Rounded up to the next whole second, so a wait is never shorter than asked.
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        After::Retry((now + Duration::from_secs(delay)).as_secs() as i64 + 1)
    }

    /// POSTs the payload; the status and any `Retry-After`, or why no answer came.
    fn post(&self, d: &Claimed, timestamp: i64) -> Result<(u16, Option<Duration>), String> {
        let target = ssrf::parse_url(&d.url)?;
        let addrs = ssrf::allowed_addresses(
            &target.host,
            target.port,
            self.settings.allow_private_targets,
        )
        .map_err(|e| format!("refused: {e}"))?;
        let signing = match &d.secret {
            Some(s) => Signing::Hmac(s),
            None => Signing::Ed25519(&self.key),
        };
        let signature = sign::signature(&signing, &d.id, timestamp, d.payload.as_bytes());
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(self.settings.timeout))
            .max_redirects(0)
            .proxy(None)
            .user_agent(USER_AGENT)
            .build();
        let resolver = PinnedResolver { addrs };
        let agent = if target.url.starts_with("https://") {
            let tls = super::tls::client_config()?;
            let connector = ().chain(TcpConnector::default()).chain(super::tls::connector(tls));
            ureq::Agent::with_parts(config, connector, resolver)
        } else {
            ureq::Agent::with_parts(config, ().chain(TcpConnector::default()), resolver)
        };
        let resp = agent
            .post(&target.url)
            .header("content-type", "application/json")
            .header("webhook-id", &d.id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .send(d.payload.as_bytes())
            .map_err(|e| e.to_string())?;
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        Ok((resp.status().as_u16(), retry_after))
    }
}

/// A `Retry-After` value: delay seconds, or an HTTP date (a date in the past is no wait).
pub fn parse_retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let date: actix_web::http::header::HttpDate = v.parse().ok()?;
    let at: SystemTime = date.into();
    Some(at.duration_since(SystemTime::now()).unwrap_or_default())
}

fn truncate(mut s: String) -> String {
    if s.len() > MAX_ERROR_BYTES {
        let mut end = MAX_ERROR_BYTES;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

fn describe_metrics() {
    metrics::describe_counter!(
        "gpuledger_webhook_attempts_total",
        "Webhook delivery attempts by outcome (delivered, retry, failed, gone) and event type"
    );
    metrics::describe_histogram!(
        "gpuledger_webhook_attempt_seconds",
        "Time of one webhook delivery attempt, connection and answer included"
    );
    metrics::describe_gauge!(
        "gpuledger_webhook_queue_depth",
        "Pending webhook deliveries of enabled endpoints"
    );
    metrics::describe_gauge!(
        "gpuledger_webhook_oldest_pending_age_seconds",
        "Age of the oldest pending webhook delivery of an enabled endpoint (0: none)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        assert_eq!(parse_retry_after("3"), Some(Duration::from_secs(3)));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(Duration::ZERO)
        );
        let later = SystemTime::now() + Duration::from_secs(120);
        let text = actix_web::http::header::HttpDate::from(later).to_string();
        let d = parse_retry_after(&text).unwrap();
        assert!(
            d > Duration::from_secs(100) && d <= Duration::from_secs(120),
            "{d:?}"
        );
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[test]
    fn the_default_schedule_spans_more_than_three_days() {
        let total: u64 = super::super::DEFAULT_RETRY_SCHEDULE_SECONDS.iter().sum();
        assert!(total >= 3 * 86_400, "{total}");
    }
}
