//! Standard Webhooks (https://www.standardwebhooks.com; docs/WEBHOOKS.md): events caused by
//! log entries, delivered signed to the endpoints admins registered.
//!
//! - [`EventType`]: the seven event types and what causes each.
//! - [`sign`]: the service's Ed25519 signing key (`whsk_`/`whpk_`, header `v1a`), per-endpoint
//!   HMAC secrets (`whsec_`, header `v1`), the signed content `{id}.{timestamp}.{body}`.
//! - [`ssrf`]: which targets may be called: URL rules, the forbidden address ranges, and the
//!   resolver that pins a delivery to the addresses it checked.
//! - [`deliver`]: the delivery worker `serve` runs: claims due deliveries (a lease; `FOR UPDATE
//!   SKIP LOCKED` on PostgreSQL), POSTs them, records every attempt, retries on a schedule.
//! - [`tls`]: `https://` targets through rustls (ring provider, the system's CAs).
//!
//! The outbox itself (endpoints, events, deliveries, attempts) is `store::webhooks`: an event
//! is written in the transaction of the log entry that causes it, so it exists if and only if
//! its cause committed.

pub mod deliver;
pub mod sign;
pub mod ssrf;
pub mod tls;

// The event vocabulary and the endpoint cap belong to the outbox (`store::webhooks`), which
// writes events in the transaction of their cause; the worker here delivers them.
pub use gpuledger_store::webhooks::{EventType, MAX_ENDPOINTS};

use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The default retry schedule: the wait before each retry after a failed attempt, in seconds
/// (5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h, 14 h, 14 h, 14 h, 14 h: 83.6 h in all, so a
/// delivery is tried for more than 3 days; twelve attempts). Each wait gets 0 to
/// [`JITTER_PERCENT`] % more at random, never less.
pub const DEFAULT_RETRY_SCHEDULE_SECONDS: [u64; 11] = [
    5, 300, 1_800, 7_200, 18_000, 36_000, 36_000, 50_400, 50_400, 50_400, 50_400,
];

/// Random extra wait added to each scheduled retry, at most this percentage of it.
pub const JITTER_PERCENT: u64 = 20;

/// Default time one delivery attempt may take, connection and answer included.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Default cap on a `Retry-After` (429, 503) honoured: 24 hours.
pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(86_400);

/// Default number of deliveries one process attempts at once.
pub const DEFAULT_CONCURRENCY: usize = 8;

/// Most deliveries one process may attempt at once (`concurrency`).
pub const MAX_CONCURRENCY: usize = 64;

/// Longest retry schedule accepted (`retry_schedule_seconds`), in retries.
pub const MAX_RETRIES: usize = 50;

/// Default file name of the webhook signing key, next to the log key.
pub const DEFAULT_KEY_FILE: &str = "gpuledger-webhook.key";

/// The `[webhooks]` table of `serve`'s settings file (docs/CONFIGURATION.md).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct WebhookSettingsFile {
    /// `enabled`: run the delivery worker in this process; default true. Events are written
    /// to the outbox either way.
    pub enabled: Option<bool>,
    /// `signing_key`: the Ed25519 webhook signing key file (`whsk_…`, 0600), created on first
    /// start; default `gpuledger-webhook.key` in the log key's directory.
    pub signing_key: Option<PathBuf>,
    /// `allow_private_targets`: UNSAFE; let endpoints resolve to loopback, private, link-local,
    /// CGNAT or metadata addresses; default false. For tests and closed networks only.
    pub allow_private_targets: Option<bool>,
    /// `timeout_seconds`: longest time one attempt may take; default 10.
    pub timeout_seconds: Option<u64>,
    /// `retry_schedule_seconds`: the wait before each retry; default
    /// [`DEFAULT_RETRY_SCHEDULE_SECONDS`].
    pub retry_schedule_seconds: Option<Vec<u64>>,
    /// `max_retry_after_seconds`: cap on a `Retry-After` honoured; default 86400.
    pub max_retry_after_seconds: Option<u64>,
    /// `concurrency`: deliveries attempted at once by this process; default 8.
    pub concurrency: Option<usize>,
}

/// The webhook settings of `serve`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookSettings {
    /// Whether this process runs the delivery worker.
    pub enabled: bool,
    /// The signing key file.
    pub signing_key: PathBuf,
    /// Whether private targets are allowed (unsafe).
    pub allow_private_targets: bool,
    /// Longest time of one attempt.
    pub timeout: Duration,
    /// Waits before each retry.
    pub retry_schedule: Vec<Duration>,
    /// Cap on a `Retry-After` honoured.
    pub max_retry_after: Duration,
    /// Deliveries attempted at once.
    pub concurrency: usize,
}

impl WebhookSettingsFile {
    /// The settings, with defaults; the key file defaults to the directory of `log_key`.
    pub fn resolve(&self, log_key: &Path) -> Result<WebhookSettings, String> {
        let schedule = self
            .retry_schedule_seconds
            .clone()
            .unwrap_or_else(|| DEFAULT_RETRY_SCHEDULE_SECONDS.to_vec());
        if schedule.len() > MAX_RETRIES {
            return Err(format!(
                "[webhooks] retry_schedule_seconds has {} retries; at most {MAX_RETRIES}",
                schedule.len()
            ));
        }
        let concurrency = self.concurrency.unwrap_or(DEFAULT_CONCURRENCY);
        if concurrency == 0 || concurrency > MAX_CONCURRENCY {
            return Err(format!(
                "[webhooks] concurrency must be between 1 and {MAX_CONCURRENCY}"
            ));
        }
        let timeout = self
            .timeout_seconds
            .map_or(DEFAULT_TIMEOUT, Duration::from_secs);
        if timeout.is_zero() {
            return Err("[webhooks] timeout_seconds must be at least 1".into());
        }
        Ok(WebhookSettings {
            enabled: self.enabled.unwrap_or(true),
            signing_key: self.signing_key.clone().unwrap_or_else(|| {
                log_key
                    .parent()
                    .unwrap_or(Path::new(""))
                    .join(DEFAULT_KEY_FILE)
            }),
            allow_private_targets: self.allow_private_targets.unwrap_or(false),
            timeout,
            retry_schedule: schedule.into_iter().map(Duration::from_secs).collect(),
            max_retry_after: self
                .max_retry_after_seconds
                .map_or(DEFAULT_MAX_RETRY_AFTER, Duration::from_secs),
            concurrency,
        })
    }
}

/// What the API needs of the webhook settings: whether private targets are allowed, and the
/// public key to publish. Registered as app data by `serve`; absent (in-process test servers,
/// the demo), private targets are refused and the public key is read from the ledger's
/// default location.
#[derive(Debug, Clone)]
pub struct WebhookApi {
    /// Whether private targets are allowed (unsafe).
    pub allow_private_targets: bool,
    /// The `whpk_` public key deliveries are signed with, if a key is configured.
    pub public_key: Option<String>,
}
