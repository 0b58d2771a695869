//! `gpuledger serve`: settings, logging, the actix server, periodic checkpoints and graceful
//! shutdown (stop accepting, finish and commit what is in flight, then stop the sequencer).
//! [`publish`] writes each new checkpoint to `--publish-dir`; [`gpuledger_shell::disk`] reads free space for
//! the filesystem gauges.

pub mod mirror;
pub mod publish;
pub mod request_log;
pub mod witnessing;

use crate::api::{self, AppState};
use actix_web::{middleware, web, App, HttpServer};
use gpuledger_shell::keyfile;
use gpuledger_store::{self as store, Ledger, StoreError};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use utoipa_actix_web::AppExt;

/// Settings of `serve`. Precedence: command-line flag, then `GPULEDGER_*` environment
/// variable, then the TOML file given by `--config`, then the default. docs/CONFIGURATION.md
/// lists them all.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ServeSettings {
    /// `listen`: address to bind; default 127.0.0.1:8080. Port 0 picks a free port.
    pub listen: Option<SocketAddr>,
    /// `database_url`: default sqlite://gpuledger.db.
    pub database_url: Option<String>,
    /// `log_key`: the log's private key file; default gpuledger-log.key.
    pub log_key: Option<PathBuf>,
    /// `checkpoint_interval_seconds`: how often a new checkpoint is signed when the log grew;
    /// default 10.
    pub checkpoint_interval_seconds: Option<u64>,
    /// `workers`: HTTP worker threads; default the number of CPUs.
    pub workers: Option<usize>,
    /// `publish_dir`: a directory each new checkpoint is written to (`checkpoint`, and
    /// `checkpoints/<size>`); default none.
    pub publish_dir: Option<PathBuf>,
    /// `mirror_dir`: a private copy of the whole log (C2SP tiles, entry bundles, issued
    /// documents) kept up to date as checkpoints are signed, for `gpuledger recover --from
    /// DIR` (module `server::mirror`); default none.
    pub mirror_dir: Option<PathBuf>,
    /// `high_water_file`: where the largest signed checkpoint is kept outside the database
    /// (module `store::high_water`); default the log key's path with `.high-water` appended.
    pub high_water_file: Option<PathBuf>,
    /// `clock_step_seconds`: the largest disagreement between the wall clock and the monotonic
    /// clock that is not a step of the ledger's clock (`store::clock`); default 30.
    pub clock_step_seconds: Option<u64>,
    /// `clock_settle_seconds`: how long a stepped clock must run steadily, synchronised,
    /// before it is trusted again; default 120.
    pub clock_settle_seconds: Option<u64>,
    /// `invoice_close_seconds`: how long after its end a period may be invoiced or certified;
    /// default the log policy's `max_future_skew_seconds` (300).
    pub invoice_close_seconds: Option<u64>,
    /// `allow_async_standbys`: start on a PostgreSQL primary that has standbys none of which
    /// is synchronous (an acknowledged record may then be lost in a failover); default false.
    pub allow_async_standbys: Option<bool>,
    /// `metrics_listen`: serve `/metrics` on this address alone (and answer 404 for it on
    /// `listen`); default none (`/metrics` on `listen`).
    pub metrics_listen: Option<SocketAddr>,
    /// `client_request_timeout_seconds`: longest wait for a request's headers; default 5.
    pub client_request_timeout_seconds: Option<u64>,
    /// `client_disconnect_timeout_seconds`: how long a connection is kept to finish sending an
    /// answer after the server decided to close it; default 1.
    pub client_disconnect_timeout_seconds: Option<u64>,
    /// `keep_alive_seconds`: how long an idle connection is kept open; default 5 (0: closed
    /// after each answer).
    pub keep_alive_seconds: Option<u64>,
    /// `max_connections`: open connections per worker; default 1024 (0: actix's 25,600).
    pub max_connections: Option<usize>,
    /// `body_idle_timeout_seconds`: longest wait for the next piece of a request body;
    /// default 15 (0: none).
    pub body_idle_timeout_seconds: Option<u64>,
    /// `body_timeout_seconds`: longest time to read a whole request body; default 60 (0: none).
    pub body_timeout_seconds: Option<u64>,
    /// `max_concurrent_ingest`: `POST /v1/records` bodies received and processed at once;
    /// default 16 (0: no cap).
    pub max_concurrent_ingest: Option<usize>,
    /// `client_rate_per_second`: requests per second per client address under `/v1` and to the
    /// C2SP tiles (`/checkpoint`, `/tile/...`; `api::limits::rate_limited`); default 1000 (0: no
    /// limit).
    pub client_rate_per_second: Option<u32>,
    /// `client_rate_burst`: requests a client address may make at once; default 5000.
    pub client_rate_burst: Option<u32>,
    /// `signer_rate_per_second`: accepted records per second per signer; default 20000 (0: no
    /// limit).
    pub signer_rate_per_second: Option<u32>,
    /// `signer_rate_burst`: records a signer may send at once; default 1000000.
    pub signer_rate_burst: Option<u32>,
    /// `tenant_certificates_per_minute`: `POST /v1/certificates` per minute per tenant token's
    /// tenant; default 60 (0: no limit).
    pub tenant_certificates_per_minute: Option<u32>,
    /// `[[witnesses]]` (settings file only): the witnesses each new checkpoint is sent to
    /// (C2SP tlog-witness), each with `name`, `vkey` and `url`; default none.
    pub witnesses: Option<Vec<witnessing::WitnessSetting>>,
    /// `witness_quorum`: cosignatures (of distinct configured witnesses) the checkpoint of an
    /// invoice or certificate needs; default 0 (none: issued at once, as without witnesses).
    pub witness_quorum: Option<usize>,
    /// `witness_wait_seconds`: how long an issuance waits for a checkpoint to reach the
    /// quorum before answering 503 `witnesses_behind`; default 10.
    pub witness_wait_seconds: Option<u64>,
    /// `[issuer]` (settings file only): who issues the invoices (`name`, `address` lines,
    /// `tax_id`, `email`), how to pay them (`payment_instructions`) and the buyers' tax ids
    /// (`[issuer.bill_to_tax_ids]`); default none (the log's origin names the issuer).
    pub issuer: Option<IssuerSetting>,
    /// `payment_terms_days`: an invoice is due this many days after it is issued; default 30.
    pub payment_terms_days: Option<u32>,
    /// `[[tax]]` (settings file only): the tax of each region (`region`, `name`, `rate` as a
    /// decimal string; `region = "*"` for every other region); default none (rate 0).
    pub tax: Option<Vec<TaxSetting>>,
    /// `public_url`: the service's base URL as tenants reach it, for the links in invoice PDFs;
    /// default none.
    pub public_url: Option<String>,
    /// `[webhooks]` (settings file only): the webhook delivery worker, its signing key, retry
    /// schedule and target rule (docs/WEBHOOKS.md); default: on, with the defaults.
    pub webhooks: Option<crate::webhooks::WebhookSettingsFile>,
}

/// The `[issuer]` table: the invoice document's `issuer` block, and what invoice PDFs show
/// besides the document.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct IssuerSetting {
    pub name: String,
    /// Postal address, one line per element.
    #[serde(default)]
    pub address: Vec<String>,
    /// Tax registration number (e.g. a unified social credit code, a VAT id).
    pub tax_id: Option<String>,
    pub email: Option<String>,
    /// How to pay, one line per element (bank, account name and number, SWIFT/BIC), shown on
    /// invoice PDFs; at most [`MAX_PAYMENT_INSTRUCTION_LINES`] lines of at most
    /// [`MAX_SETTING_LINE_CHARS`] characters.
    #[serde(default)]
    pub payment_instructions: Vec<String>,
    /// The buyers' tax registration numbers, tenant id = tax id, shown in the bill-to block of
    /// their invoice PDFs.
    #[serde(default)]
    pub bill_to_tax_ids: std::collections::BTreeMap<String, String>,
}

/// Most lines of `[issuer]` `payment_instructions`.
pub const MAX_PAYMENT_INSTRUCTION_LINES: usize = 12;
/// Most characters of one payment instruction line or buyer tax id.
pub const MAX_SETTING_LINE_CHARS: usize = 200;

/// Longest `invoice_close_seconds` accepted (a day); larger values are clamped to it.
pub const MAX_INVOICE_CLOSE_SECONDS: u64 = 86_400;

impl IssuerSetting {
    /// The document's `issuer` block.
    pub fn issuer(&self) -> gpuledger_core::invoice::Issuer {
        gpuledger_core::invoice::Issuer {
            name: self.name.clone(),
            address: self.address.clone(),
            tax_id: self.tax_id.clone(),
            email: self.email.clone(),
        }
    }
}

/// What invoice PDFs show besides the document, from `[issuer]`; refused when there are more
/// than [`MAX_PAYMENT_INSTRUCTION_LINES`] instruction lines, a line or tax id is longer than
/// [`MAX_SETTING_LINE_CHARS`], or a tax id names no valid tenant id or is empty.
pub fn invoice_pdf_settings(
    issuer: Option<&IssuerSetting>,
) -> Result<store::invoices::InvoicePdfSettings, String> {
    let Some(i) = issuer else {
        return Ok(Default::default());
    };
    if i.payment_instructions.len() > MAX_PAYMENT_INSTRUCTION_LINES {
        return Err(format!(
            "[issuer] payment_instructions has {} lines; at most {MAX_PAYMENT_INSTRUCTION_LINES}",
            i.payment_instructions.len()
        ));
    }
    let long = |s: &String| s.chars().count() > MAX_SETTING_LINE_CHARS;
    for l in &i.payment_instructions {
        shown_text("[issuer] payment_instructions line", l)?;
    }
    for id in i.bill_to_tax_ids.values() {
        shown_text("[issuer.bill_to_tax_ids] tax id", id)?;
    }
    if let Some(l) = i.payment_instructions.iter().find(|l| long(l)) {
        return Err(format!(
            "[issuer] payment_instructions line {l:?} is longer than {MAX_SETTING_LINE_CHARS} characters"
        ));
    }
    for (tenant, id) in &i.bill_to_tax_ids {
        gpuledger_core::ids::check_id(tenant)
            .map_err(|m| format!("[issuer.bill_to_tax_ids] tenant {tenant:?}: {m}"))?;
        if id.trim().is_empty() || long(id) {
            return Err(format!(
                "[issuer.bill_to_tax_ids] tenant {tenant:?}: the tax id must be 1 to {MAX_SETTING_LINE_CHARS} characters"
            ));
        }
    }
    Ok(store::invoices::InvoicePdfSettings {
        payment_instructions: i.payment_instructions.clone(),
        bill_to_tax_ids: i.bill_to_tax_ids.clone(),
    })
}

/// A setting printed on invoices (PDF, CSV, the console): refused when it holds a control,
/// bidi or invisible format character (`core::ids::check_display_chars`, the rule tenant names
/// and addresses follow), which could make one text read as another.
fn shown_text(what: &str, s: &str) -> Result<(), String> {
    gpuledger_core::ids::check_display_chars(s).map_err(|m| format!("{what} {s:?}: {m}"))
}

/// One `[[tax]]` entry of the settings file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TaxSetting {
    /// A region id, or `*`: every region without an entry of its own.
    pub region: String,
    /// The tax's name printed on invoices (`VAT`).
    pub name: String,
    /// The rate as a decimal fraction in a string (`"0.06"` for 6 %), from 0 to 1.
    pub rate: String,
}

/// The invoice settings of `issuer`, `payment_terms_days`, `[[tax]]` and `public_url`; refused
/// when a tax rate is not a decimal from 0 to 1, a region is listed twice, or the URL is not
/// `http(s)://`.
pub fn invoice_settings(
    issuer: Option<IssuerSetting>,
    payment_terms_days: Option<u32>,
    tax: Option<Vec<TaxSetting>>,
    public_url: Option<String>,
) -> Result<store::invoices::InvoiceSettings, String> {
    use gpuledger_core::invoice::{Tax, TaxTable};
    let mut taxes = TaxTable::default();
    for t in tax.unwrap_or_default() {
        let rate = gpuledger_core::decimal::parse_lenient(&t.rate)
            .filter(|r| *r >= rust_decimal::Decimal::ZERO && *r <= rust_decimal::Decimal::ONE)
            .ok_or_else(|| {
                format!(
                    "[[tax]] region {:?}: rate {:?} must be a decimal fraction from 0 to 1 (\"0.06\" for 6 %)",
                    t.region, t.rate
                )
            })?;
        if t.name.trim().is_empty() {
            return Err(format!("[[tax]] region {:?}: name is empty", t.region));
        }
        shown_text("[[tax]] name", &t.name)?;
        let tax = Tax {
            name: Some(t.name),
            rate: rate.normalize(),
        };
        let dup = if t.region == "*" {
            taxes.default.replace(tax).is_some()
        } else {
            taxes.by_region.insert(t.region.clone(), tax).is_some()
        };
        if dup {
            return Err(format!("[[tax]] region {:?} is listed twice", t.region));
        }
    }
    if let Some(u) = &public_url {
        if !(u.starts_with("http://") || u.starts_with("https://")) {
            return Err(format!(
                "public_url {u:?} must start with http:// or https://"
            ));
        }
    }
    if let Some(i) = &issuer {
        shown_text("[issuer] name", &i.name)?;
        for line in &i.address {
            shown_text("[issuer] address line", line)?;
        }
        for (what, v) in [("[issuer] tax_id", &i.tax_id), ("[issuer] email", &i.email)] {
            if let Some(v) = v {
                shown_text(what, v)?;
            }
        }
    }
    let days = payment_terms_days.unwrap_or(store::invoices::DEFAULT_PAYMENT_TERMS_DAYS);
    if days > 3650 {
        return Err(format!("payment_terms_days {days} is above 3650"));
    }
    Ok(store::invoices::InvoiceSettings {
        issuer: issuer.map(|i| i.issuer()).unwrap_or_default(),
        payment_terms_days: days,
        taxes,
        public_url: public_url.map(|u| u.trim_end_matches('/').to_owned()),
    })
}

/// Resolved settings.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub listen: SocketAddr,
    pub database_url: String,
    pub log_key: PathBuf,
    pub checkpoint_interval: Duration,
    pub workers: usize,
    /// Where checkpoints are published, if anywhere.
    pub publish_dir: Option<PathBuf>,
    /// Where the log is mirrored, if anywhere.
    pub mirror_dir: Option<PathBuf>,
    /// The high-water file (`store::high_water`).
    pub high_water_file: PathBuf,
    /// The ledger clock's check.
    pub clock: gpuledger_core::clock::ClockPolicy,
    /// Whether a primary with only asynchronous standbys is accepted.
    pub allow_async_standbys: bool,
    /// The witnesses checkpoints are sent to, and the quorum issuances wait for.
    pub witnesses: witnessing::WitnessSettings,
    /// Issuer, payment terms, taxes and public URL of the invoices.
    pub invoicing: store::invoices::InvoiceSettings,
}

/// How the HTTP server treats its clients: timeouts, connection limits, body and rate limits,
/// and where `/metrics` is served. Resolved apart from [`Resolved`] so the demo, which serves
/// with the defaults, builds its [`Resolved`] as before.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpSettings {
    /// `/metrics` on its own listener, if set.
    pub metrics_listen: Option<SocketAddr>,
    /// Longest wait for a request's headers (0: none).
    pub client_request_timeout: Duration,
    /// Longest wait to finish a connection the server is closing (0: none).
    pub client_disconnect_timeout: Duration,
    /// Idle connections kept this long (0: keep-alive off).
    pub keep_alive: Duration,
    /// Open connections per worker (0: actix's default of 25,600); the server as a whole
    /// takes `workers` × this many.
    pub max_connections: usize,
    /// Body timeouts, the ingest cap and the rates.
    pub limits: api::limits::LimitSettings,
    /// The `[webhooks]` settings (the delivery worker runs next to the HTTP server).
    pub webhooks: crate::webhooks::WebhookSettingsFile,
}

/// Default [`HttpSettings::client_request_timeout`].
pub const DEFAULT_CLIENT_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Default [`HttpSettings::client_disconnect_timeout`].
pub const DEFAULT_CLIENT_DISCONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Default [`HttpSettings::keep_alive`].
pub const DEFAULT_KEEP_ALIVE: Duration = Duration::from_secs(5);
/// Default [`HttpSettings::max_connections`], per worker.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            metrics_listen: None,
            client_request_timeout: DEFAULT_CLIENT_REQUEST_TIMEOUT,
            client_disconnect_timeout: DEFAULT_CLIENT_DISCONNECT_TIMEOUT,
            keep_alive: DEFAULT_KEEP_ALIVE,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            limits: api::limits::LimitSettings::default(),
            webhooks: Default::default(),
        }
    }
}

/// Reads a TOML settings file.
pub fn read_config(path: &Path) -> Result<ServeSettings, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let s: ServeSettings = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    // The invoice settings are checked here, so a bad tax rate stops the start.
    invoice_settings(
        s.issuer.clone(),
        s.payment_terms_days,
        s.tax.clone(),
        s.public_url.clone(),
    )
    .map_err(|e| format!("{}: {e}", path.display()))?;
    invoice_pdf_settings(s.issuer.as_ref()).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(s)
}

impl ServeSettings {
    /// `self` (flags and environment) over `file` over defaults.
    pub fn resolve(self, file: ServeSettings) -> Resolved {
        let log_key = self
            .log_key
            .clone()
            .or(file.log_key.clone())
            .unwrap_or_else(|| PathBuf::from("gpuledger-log.key"));
        let clock = self.resolve_clock(&file);
        Resolved {
            listen: self
                .listen
                .or(file.listen)
                .unwrap_or_else(|| "127.0.0.1:8080".parse().expect("valid")),
            database_url: self
                .database_url
                .or(file.database_url)
                .unwrap_or_else(|| store::DEFAULT_DATABASE_URL.to_owned()),
            log_key: log_key.clone(),
            checkpoint_interval: Duration::from_secs(
                self.checkpoint_interval_seconds
                    .or(file.checkpoint_interval_seconds)
                    .unwrap_or(10)
                    .max(1),
            ),
            workers: self
                .workers
                .or(file.workers)
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get())),
            publish_dir: self.publish_dir.or(file.publish_dir),
            mirror_dir: self.mirror_dir.or(file.mirror_dir),
            clock,
            high_water_file: self
                .high_water_file
                .or(file.high_water_file)
                .unwrap_or_else(|| store::high_water::default_file(&log_key)),
            allow_async_standbys: self
                .allow_async_standbys
                .or(file.allow_async_standbys)
                .unwrap_or(false),
            // Checked by `read_config`; settings built in code that break a rule are reported
            // and replaced by the defaults.
            invoicing: invoice_settings(
                self.issuer.or(file.issuer),
                self.payment_terms_days.or(file.payment_terms_days),
                self.tax.or(file.tax),
                self.public_url.or(file.public_url),
            )
            .unwrap_or_else(|e| {
                tracing::error!(error = %e, "invoice settings refused; using the defaults");
                Default::default()
            }),
            witnesses: witnessing::WitnessSettings {
                witnesses: self.witnesses.or(file.witnesses).unwrap_or_default(),
                quorum: self.witness_quorum.or(file.witness_quorum).unwrap_or(0),
                wait: self
                    .witness_wait_seconds
                    .or(file.witness_wait_seconds)
                    .map_or(witnessing::DEFAULT_WAIT, Duration::from_secs),
            },
        }
    }

    /// The clock policy of `self` over `file` over the defaults: a step of 1 s to a day, a
    /// settle time of at most a day, an invoice close time of at most
    /// [`MAX_INVOICE_CLOSE_SECONDS`].
    fn resolve_clock(&self, file: &ServeSettings) -> gpuledger_core::clock::ClockPolicy {
        gpuledger_core::clock::ClockPolicy {
            step_seconds: self
                .clock_step_seconds
                .or(file.clock_step_seconds)
                .map_or(gpuledger_core::clock::DEFAULT_STEP_SECONDS, |s| {
                    s.clamp(1, 86_400) as i64
                }),
            settle_seconds: self
                .clock_settle_seconds
                .or(file.clock_settle_seconds)
                .map_or(gpuledger_core::clock::DEFAULT_SETTLE_SECONDS, |s| {
                    s.min(86_400) as i64
                }),
            close_seconds: self
                .invoice_close_seconds
                .or(file.invoice_close_seconds)
                .map(|s| s.min(MAX_INVOICE_CLOSE_SECONDS)),
        }
    }

    /// What invoice PDFs show besides the document (`[issuer]`, settings file only). Checked
    /// by `read_config`; settings built in code that break a rule are reported and replaced by
    /// the defaults.
    pub fn resolve_invoice_pdf(&self, file: &ServeSettings) -> store::invoices::InvoicePdfSettings {
        invoice_pdf_settings(self.issuer.as_ref().or(file.issuer.as_ref())).unwrap_or_else(|e| {
            tracing::error!(error = %e, "invoice PDF settings refused; using the defaults");
            Default::default()
        })
    }

    /// The HTTP settings of `self` (flags and environment) over `file` over defaults.
    pub fn resolve_http(&self, file: &ServeSettings) -> HttpSettings {
        let d = HttpSettings::default();
        let l = d.limits.clone();
        let secs = |flag: Option<u64>, file: Option<u64>, default: Duration| {
            flag.or(file).map_or(default, Duration::from_secs)
        };
        HttpSettings {
            metrics_listen: self.metrics_listen.or(file.metrics_listen),
            client_request_timeout: secs(
                self.client_request_timeout_seconds,
                file.client_request_timeout_seconds,
                d.client_request_timeout,
            ),
            client_disconnect_timeout: secs(
                self.client_disconnect_timeout_seconds,
                file.client_disconnect_timeout_seconds,
                d.client_disconnect_timeout,
            ),
            keep_alive: secs(
                self.keep_alive_seconds,
                file.keep_alive_seconds,
                d.keep_alive,
            ),
            max_connections: self
                .max_connections
                .or(file.max_connections)
                .unwrap_or(d.max_connections),
            limits: api::limits::LimitSettings {
                body_idle_timeout: secs(
                    self.body_idle_timeout_seconds,
                    file.body_idle_timeout_seconds,
                    l.body_idle_timeout,
                ),
                body_timeout: secs(
                    self.body_timeout_seconds,
                    file.body_timeout_seconds,
                    l.body_timeout,
                ),
                max_concurrent_ingest: self
                    .max_concurrent_ingest
                    .or(file.max_concurrent_ingest)
                    .unwrap_or(l.max_concurrent_ingest),
                client_rate_per_second: self
                    .client_rate_per_second
                    .or(file.client_rate_per_second)
                    .unwrap_or(l.client_rate_per_second),
                client_rate_burst: self
                    .client_rate_burst
                    .or(file.client_rate_burst)
                    .unwrap_or(l.client_rate_burst),
                signer_rate_per_second: self
                    .signer_rate_per_second
                    .or(file.signer_rate_per_second)
                    .unwrap_or(l.signer_rate_per_second),
                signer_rate_burst: self
                    .signer_rate_burst
                    .or(file.signer_rate_burst)
                    .unwrap_or(l.signer_rate_burst),
                tenant_certificates_per_minute: self
                    .tenant_certificates_per_minute
                    .or(file.tenant_certificates_per_minute)
                    .unwrap_or(l.tenant_certificates_per_minute),
            },
            webhooks: self
                .webhooks
                .clone()
                .or_else(|| file.webhooks.clone())
                .unwrap_or_default(),
        }
    }
}

/// Errors that stop the server from starting.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Key(#[from] keyfile::KeyFileError),
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    #[error("server: {0}")]
    Io(#[from] std::io::Error),
    #[error("metrics: {0}")]
    Metrics(String),
    #[error(transparent)]
    Publish(#[from] publish::PublishError),
    #[error(transparent)]
    Witness(#[from] witnessing::StartError),
    #[error("webhooks: {0}")]
    Webhooks(String),
}

/// Runs the server until SIGTERM or Ctrl-C. Prints `listening on http://ADDR` once bound, then
/// `metrics on http://ADDR/metrics` when `/metrics` has its own listener.
/// `invoice_pdf`: what invoice PDFs show besides the document
/// ([`ServeSettings::resolve_invoice_pdf`]).
pub fn serve(
    settings: Resolved,
    http: HttpSettings,
    invoice_pdf: store::invoices::InvoicePdfSettings,
) -> Result<(), ServeError> {
    let key = keyfile::read(&settings.log_key)?;
    if !settings.allow_async_standbys {
        store::replication::refuse_async_standbys(&settings.database_url)?;
    }
    let ledger = Arc::new(Ledger::open_with_high_water(
        &settings.database_url,
        key,
        Some(settings.high_water_file.clone()),
        settings.clock,
    )?);
    if let Some(u) = ledger.clock_fault() {
        tracing::error!(reason = %u, "the ledger's clock is unreliable: serving reads only until it is");
    }
    if let Some(r) = ledger.rewound() {
        tracing::error!(%r, "serving reads only");
    }
    ledger.set_invoice_pdf(invoice_pdf);
    serve_ledger_with(ledger, &settings, &http, |addrs, metrics_addrs| {
        for a in addrs {
            println!("listening on http://{a}");
        }
        for a in metrics_addrs {
            println!("metrics on http://{a}/metrics");
        }
        use std::io::Write;
        let _ = std::io::stdout().flush();
    })
}

/// [`serve_ledger_with`] with the default [`HttpSettings`] (the demo's).
pub fn serve_ledger(
    ledger: Arc<Ledger>,
    settings: &Resolved,
    on_bound: impl FnOnce(&[SocketAddr]),
) -> Result<(), ServeError> {
    serve_ledger_with(ledger, settings, &HttpSettings::default(), |addrs, _| {
        on_bound(addrs)
    })
}

/// Serves an already open ledger until SIGTERM or Ctrl-C (`settings.database_url` and
/// `settings.log_key` are not used to open anything here). `on_bound` runs once, with the
/// bound addresses of the API and of the metrics listener (none without one), before requests
/// are served. Shuts down gracefully, then drops this handle of the ledger (the sequencer
/// stops when the caller drops the last one).
pub fn serve_ledger_with(
    ledger: Arc<Ledger>,
    settings: &Resolved,
    http: &HttpSettings,
    on_bound: impl FnOnce(&[SocketAddr], &[SocketAddr]),
) -> Result<(), ServeError> {
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(&[
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
        ])
        .map_err(|e| ServeError::Metrics(e.to_string()))?
        .install_recorder()
        .map_err(|e| ServeError::Metrics(e.to_string()))?;
    describe_metrics();
    ledger.set_invoicing(settings.invoicing.clone());
    // Witness settings that cannot be used stop the start; the threads run until shutdown.
    let witnesses = witnessing::start(&ledger, &settings.witnesses)?;
    let (webhook_api, webhooks) = match start_webhooks(&ledger, settings, http) {
        Ok(started) => started,
        Err(e) => {
            witnesses.stop();
            return Err(e);
        }
    };
    let served = serve_with_witnesses(
        ledger.clone(),
        settings,
        http,
        metrics,
        webhook_api,
        on_bound,
    );
    if let Some(w) = webhooks {
        w.stop();
    }
    witnesses.stop();
    served?;
    // Dropping the last handle stops the sequencer after it has committed what was queued.
    drop(ledger);
    tracing::info!("ledger closed");
    Ok(())
}

/// What [`start_webhooks`] starts: the API's view of the settings and the worker, if enabled.
type Webhooks = (
    web::Data<crate::webhooks::WebhookApi>,
    Option<crate::webhooks::deliver::Worker>,
);

/// The webhook signing key (read, or created on first start, 0600; never logged), what the API
/// publishes of it, and the delivery worker when `[webhooks] enabled` (the default).
fn start_webhooks(
    ledger: &Ledger,
    settings: &Resolved,
    http: &HttpSettings,
) -> Result<Webhooks, ServeError> {
    let w = http
        .webhooks
        .resolve(&settings.log_key)
        .map_err(ServeError::Webhooks)?;
    let (key, created) = crate::webhooks::sign::read_or_create_key(&w.signing_key)
        .map_err(|e| ServeError::Webhooks(e.to_string()))?;
    if created {
        tracing::info!(path = %w.signing_key.display(), "created the webhook signing key");
    }
    if w.allow_private_targets {
        tracing::warn!("[webhooks] allow_private_targets is set: endpoints may reach loopback and private addresses (unsafe)");
    }
    let api = web::Data::new(crate::webhooks::WebhookApi {
        allow_private_targets: w.allow_private_targets,
        public_key: Some(crate::webhooks::sign::public_key_text(&key)),
    });
    let worker = if w.enabled {
        Some(
            crate::webhooks::deliver::start(ledger.database_url(), key, w)
                .map_err(ServeError::Webhooks)?,
        )
    } else {
        None
    };
    Ok((api, worker))
}

/// The rest of [`serve_ledger_with`], once the metrics recorder is installed and the witness
/// threads run.
fn serve_with_witnesses(
    ledger: Arc<Ledger>,
    settings: &Resolved,
    http: &HttpSettings,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
    webhook_api: web::Data<crate::webhooks::WebhookApi>,
    on_bound: impl FnOnce(&[SocketAddr], &[SocketAddr]),
) -> Result<(), ServeError> {
    let outputs = Outputs::open(&ledger, settings)?;
    let state = web::Data::new(AppState {
        ledger: ledger.clone(),
        metrics,
        limits: api::limits::Limits::new(http.limits.clone()),
    });
    let metrics_here = http.metrics_listen.is_none();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(2)
        .build()?;
    let serving = ledger.clone();
    rt.block_on(async move {
        let ledger = serving;
        let api_state = state.clone();
        let server = HttpServer::new(move || {
            App::new()
                .app_data(api_state.clone())
                .app_data(webhook_api.clone())
                .wrap(middleware::from_fn(api::idempotency::idempotent))
                .wrap(middleware::from_fn(api::limits::per_client))
                .wrap(middleware::from_fn(api::close_unread_bodies))
                .wrap(middleware::from_fn(api::record_metrics))
                .wrap(tracing_actix_web::TracingLogger::<request_log::RequestSpan>::new())
                .into_utoipa_app()
                .configure(|c| api::served_routes(c, metrics_here))
                .into_app()
        })
        .workers(settings.workers)
        .shutdown_timeout(30)
        .client_request_timeout(http.client_request_timeout)
        .client_disconnect_timeout(http.client_disconnect_timeout)
        .keep_alive(http.keep_alive())
        .max_connections(http.connections_per_worker())
        .bind(settings.listen)
        .map_err(|e| ServeError::Bind(settings.listen, e))?;
        let addrs = server.addrs();
        let (metrics_addrs, metrics_handle) = start_metrics_listener(http, &state)?;
        let running = server.run();
        on_bound(&addrs, &metrics_addrs);
        log_serving(&ledger, settings, http, &addrs, &metrics_addrs);
        let prober = tokio::spawn(probe_loop(ledger.clone()));
        let contracts = tokio::spawn(contract_invoice_loop(
            ledger.clone(),
            settings.checkpoint_interval,
        ));
        let checkpointer = tokio::spawn(checkpoint_loop(
            ledger.clone(),
            settings.checkpoint_interval,
            outputs.publisher,
            outputs.mirror,
            outputs.watched,
        ));
        running.await?;
        if let Some(h) = metrics_handle {
            h.stop(true).await;
        }
        checkpointer.abort();
        contracts.abort();
        prober.abort();
        tracing::info!("stopped accepting; in-flight requests finished");
        Ok::<_, ServeError>(())
    })
}

/// What the checkpoint loop writes besides the database, and the directories whose free space
/// it watches.
struct Outputs {
    publisher: Option<publish::Publisher>,
    mirror: Option<mirror::Mirror>,
    /// `(name, directory)`: the database's (SQLite), the publish directory, the mirror.
    watched: Vec<(&'static str, PathBuf)>,
}

impl Outputs {
    /// Opens the publish directory and the mirror of `settings`, when set (what was published
    /// raises the ledger's high-water mark), and lists the directories to watch.
    fn open(ledger: &Ledger, settings: &Resolved) -> Result<Outputs, ServeError> {
        // A publish directory that cannot be created stops the start, rather than a silent gap.
        let publisher = settings
            .publish_dir
            .as_deref()
            .map(publish::Publisher::open)
            .transpose()?;
        if let Some(p) = &publisher {
            metrics::counter!("gpuledger_checkpoint_publish_errors_total").absolute(0);
            tracing::info!(dir = %p.dir().display(), "publishing checkpoints");
            // What was published is what the database must hold: the high-water mark learns it,
            // so a database restored or failed over behind it is noticed before the next write.
            if let Some(note) = p.published_note() {
                let source = format!("publish directory {}", p.dir().display());
                ledger.high_water().raise(&note, &source)?;
            }
        }
        let mirror = settings
            .mirror_dir
            .as_deref()
            .map(mirror::Mirror::open)
            .transpose()?;
        if let Some(m) = &mirror {
            metrics::counter!("gpuledger_mirror_errors_total").absolute(0);
            tracing::info!(dir = %m.dir().display(), "mirroring the log");
        }
        let mut watched = Vec::new();
        if let Some(path) = sqlite_path(&settings.database_url) {
            watched.push((
                "database",
                path.parent().unwrap_or(Path::new(".")).to_owned(),
            ));
        }
        if let Some(p) = &publisher {
            watched.push(("publish_dir", p.dir().to_owned()));
        }
        if let Some(m) = &mirror {
            watched.push(("mirror_dir", m.dir().to_owned()));
        }
        Ok(Outputs {
            publisher,
            mirror,
            watched,
        })
    }
}

/// Starts the metrics listener on `http.metrics_listen`, when set (`GET /metrics` only; any
/// other path answers 404), on the current runtime: its bound addresses (none without one) and
/// the handle that stops it.
fn start_metrics_listener(
    http: &HttpSettings,
    state: &web::Data<AppState>,
) -> Result<(Vec<SocketAddr>, Option<actix_web::dev::ServerHandle>), ServeError> {
    let Some(at) = http.metrics_listen else {
        return Ok((Vec::new(), None));
    };
    let state = state.clone();
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            .service(api::ops::metrics)
            .default_service(web::to(|| async {
                Err::<actix_web::HttpResponse, _>(api::error::ApiError::NotFound("route".into()))
            }))
    })
    .workers(1)
    .disable_signals()
    .shutdown_timeout(1)
    .client_request_timeout(http.client_request_timeout)
    .client_disconnect_timeout(http.client_disconnect_timeout)
    .keep_alive(http.keep_alive())
    .max_connections(http.connections_per_worker())
    .bind(at)
    .map_err(|e| ServeError::Bind(at, e))?;
    let addrs = server.addrs();
    let running = server.run();
    let handle = running.handle();
    tokio::spawn(running);
    Ok((addrs, Some(handle)))
}

/// Logs where the API (and the metrics, on a listener of their own) are served, and with what
/// limits.
fn log_serving(
    ledger: &Ledger,
    settings: &Resolved,
    http: &HttpSettings,
    addrs: &[SocketAddr],
    metrics_addrs: &[SocketAddr],
) {
    tracing::info!(
        database = %store::conn::redact(&settings.database_url),
        origin = %ledger.info().origin,
        max_connections = settings.workers * http.connections_per_worker(),
        max_concurrent_ingest = http.limits.max_concurrent_ingest,
        "gpuledger serving on {:?}",
        addrs
    );
    if !metrics_addrs.is_empty() {
        tracing::info!("metrics on {:?}", metrics_addrs);
    }
}

/// Connections per worker when `max_connections` is 0: actix's own default.
const ACTIX_MAX_CONNECTIONS: usize = 25_600;

impl HttpSettings {
    /// The keep-alive setting of the actix servers.
    fn keep_alive(&self) -> actix_web::http::KeepAlive {
        if self.keep_alive.is_zero() {
            actix_web::http::KeepAlive::Disabled
        } else {
            actix_web::http::KeepAlive::Timeout(self.keep_alive)
        }
    }

    /// Connections per worker of the actix servers.
    fn connections_per_worker(&self) -> usize {
        match self.max_connections {
            0 => ACTIX_MAX_CONNECTIONS,
            n => n,
        }
    }
}

/// The file of a `sqlite://PATH` URL (`None` for PostgreSQL), as `store::conn` reads it.
fn sqlite_path(url: &str) -> Option<PathBuf> {
    let rest = url.strip_prefix("sqlite:")?;
    let path = Path::new(rest.strip_prefix("//").unwrap_or(rest));
    Some(if path.parent().is_some_and(|p| p.as_os_str().is_empty()) {
        Path::new(".").join(path)
    } else {
        path.to_owned()
    })
}

/// Help text of the metrics this module sets.
fn describe_metrics() {
    metrics::describe_gauge!(
        "gpuledger_log_rewound",
        "1 while the database does not hold the largest checkpoint this server signed or found published (log_rewound: no writes, no signatures)"
    );
    metrics::describe_gauge!(
        "gpuledger_write_path_up",
        "1 while the write probe (a small transaction every second) succeeds, 0 while it fails"
    );
    metrics::describe_counter!(
        "gpuledger_rate_limited_total",
        "Requests answered 429 by a rate limit (limit=client, signer or tenant)"
    );
    metrics::describe_counter!(
        "gpuledger_conflicts_dropped_total",
        "Conflicting records refused past the evidence bounds (10 per signer and seq, 100 per signer an hour): counted, not kept"
    );
    metrics::describe_counter!(
        "gpuledger_ingest_busy_total",
        "POST /v1/records answered 503 busy: max_concurrent_ingest bodies were being received"
    );
    metrics::describe_gauge!(
        "gpuledger_ingest_bodies_in_flight",
        "POST /v1/records bodies being received or processed now"
    );
    metrics::describe_counter!(
        "gpuledger_body_timeouts_total",
        "Request bodies that did not arrive within the body idle timeout or the body timeout"
    );
    metrics::describe_gauge!(
        "gpuledger_checkpoint_published_size",
        "Tree size of the latest checkpoint written to the publish directory"
    );
    metrics::describe_counter!(
        "gpuledger_checkpoint_publish_errors_total",
        "Rounds in which writing checkpoints to the publish directory failed"
    );
    metrics::describe_gauge!(
        "gpuledger_clock_unreliable",
        "1 while the ledger's clock is unreliable (stepped, or behind the log): nothing is written, signed or invoiced"
    );
    metrics::describe_counter!(
        "gpuledger_clock_steps_total",
        "Steps of the ledger's wall clock against its monotonic clock"
    );
    metrics::describe_gauge!(
        "gpuledger_clock_synchronized",
        "1 when the kernel says the wall clock is synchronised (adjtimex), 0 when not"
    );
    metrics::describe_gauge!(
        "gpuledger_mirror_size",
        "Tree size whose tiles, entry bundles and documents the mirror directory holds"
    );
    metrics::describe_counter!(
        "gpuledger_mirror_errors_total",
        "Rounds in which mirroring the log to the mirror directory failed"
    );
    metrics::describe_gauge!(
        "gpuledger_filesystem_available_bytes",
        "Bytes free on the filesystem of the SQLite database (volume=database), of the publish directory (volume=publish_dir) or of the mirror directory (volume=mirror_dir)"
    );
}

/// How often the write path is probed for `/readyz`.
pub const WRITE_PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Every [`WRITE_PROBE_INTERVAL`]: one small write transaction through the sequencer
/// (`Ledger::probe_write`), so readiness follows the write path even while nobody writes, and
/// the sequencer reconnects as soon as the database is back.
async fn probe_loop(ledger: Arc<Ledger>) {
    ::metrics::describe_gauge!(
        "gpuledger_write_path_up",
        "1 while the write probe (a small transaction every second) succeeds, 0 while it fails"
    );
    ::metrics::describe_counter!(
        "gpuledger_outage_answers_total",
        "Requests answered 503 database_unavailable or 507 disk_full, by kind"
    );
    for outage in [
        gpuledger_store::Outage::DatabaseUnavailable,
        gpuledger_store::Outage::DiskFull,
    ] {
        ::metrics::counter!("gpuledger_outage_answers_total", "kind" => api::error::outage_kind(outage))
            .absolute(0);
    }
    let mut tick = tokio::time::interval(WRITE_PROBE_INTERVAL);
    let mut failing = false;
    loop {
        tick.tick().await;
        let l = ledger.clone();
        let r = tokio::task::spawn_blocking(move || l.probe_write()).await;
        match r {
            Ok(Ok(())) if failing => {
                failing = false;
                tracing::info!("the write probe succeeds again");
            }
            Ok(Ok(())) => {}
            Ok(Err(e)) if !failing => {
                failing = true;
                tracing::error!(error = %e, "the write probe failed; not ready until it succeeds");
            }
            Ok(Err(_)) => {}
            Err(e) => tracing::error!(error = %e, "write probe task failed"),
        }
        ::metrics::gauge!("gpuledger_write_path_up").set(if failing { 0.0 } else { 1.0 });
    }
}

/// Every `every`: signs a checkpoint if the log grew, publishes new checkpoints when a
/// publish directory is set, mirrors the log when a mirror directory is set, and refreshes the
/// free-space gauges of `watched` directories.
async fn checkpoint_loop(
    ledger: Arc<Ledger>,
    every: Duration,
    mut publisher: Option<publish::Publisher>,
    mut mirror: Option<mirror::Mirror>,
    watched: Vec<(&'static str, PathBuf)>,
) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        let l = ledger.clone();
        match tokio::task::spawn_blocking(move || l.checkpoint()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "signing a checkpoint failed"),
            Err(e) => tracing::error!(error = %e, "checkpoint task failed"),
        }
        let l = ledger.clone();
        match off_thread(&mut publisher, move |p| p.publish(&l)).await {
            Some(Ok(Some(size))) => {
                metrics::gauge!("gpuledger_checkpoint_published_size").set(size as f64)
            }
            Some(Ok(None)) | None => {}
            Some(Err(e)) => {
                metrics::counter!("gpuledger_checkpoint_publish_errors_total").increment(1);
                tracing::error!(error = %e, "publishing checkpoints failed; will retry");
            }
        }
        let l = ledger.clone();
        match off_thread(&mut mirror, move |m| m.mirror(&l)).await {
            Some(Ok(size)) => metrics::gauge!("gpuledger_mirror_size").set(size as f64),
            None => {}
            Some(Err(e)) => {
                metrics::counter!("gpuledger_mirror_errors_total").increment(1);
                tracing::error!(error = %e, "mirroring the log failed; will retry");
            }
        }
        for (volume, dir) in &watched {
            if let Some(free) = gpuledger_shell::disk::available_bytes(dir) {
                metrics::gauge!("gpuledger_filesystem_available_bytes", "volume" => *volume)
                    .set(free as f64);
            }
        }
    }
}

/// Every `every` (the checkpoint interval): issues the contract invoices that are due
/// (`Issuance::due_contract_invoices`: each billing period once, after it closes), then
/// enqueues the usage alerts crossed (`Issuance::usage_alerts`). A billing period that cannot
/// be invoiced is said in the log once, and tried again on every tick.
async fn contract_invoice_loop(ledger: Arc<Ledger>, every: Duration) {
    ::metrics::describe_counter!(
        "gpuledger_contract_invoices_issued_total",
        "Invoices issued by the scheduled contract run (one per currency per billing period)"
    );
    let mut tick = tokio::time::interval(every);
    let mut reported = std::collections::BTreeSet::new();
    loop {
        tick.tick().await;
        let l = ledger.clone();
        match tokio::task::spawn_blocking(move || l.issuance().due_contract_invoices()).await {
            Ok(Ok(run)) => {
                for inv in &run.issued {
                    ::metrics::counter!("gpuledger_contract_invoices_issued_total").increment(1);
                    tracing::info!(
                        invoice = %inv.number,
                        tenant = %inv.tenant,
                        from = %inv.period.from,
                        to = %inv.period.to,
                        total = %inv.total,
                        currency = %inv.currency,
                        "issued a contract invoice"
                    );
                }
                for (tenant, period, e) in run.failed {
                    if reported.insert((tenant.clone(), period)) {
                        tracing::warn!(
                            %tenant, from = %period.from, to = %period.to, error = %e,
                            "a contract's billing period could not be invoiced; will retry"
                        );
                    }
                }
            }
            // The clock or the database: the probe and the checkpoint loop say so.
            Ok(Err(e)) => tracing::debug!(error = %e, "the contract invoice run did not run"),
            Err(e) => tracing::error!(error = %e, "contract invoice task failed"),
        }
        // Then the usage alerts (spend thresholds, commitment draw-downs), each crossing once.
        let l = ledger.clone();
        match tokio::task::spawn_blocking(move || l.issuance().usage_alerts()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::debug!(error = %e, "the usage alert run did not run"),
            Err(e) => tracing::error!(error = %e, "usage alert task failed"),
        }
    }
}

/// Runs `f` on the value in `slot` on a blocking thread and puts the value back; `None` when
/// the slot is empty, or (said in the log) when the task panicked, which empties the slot.
async fn off_thread<T: Send + 'static, R: Send + 'static>(
    slot: &mut Option<T>,
    f: impl FnOnce(&mut T) -> R + Send + 'static,
) -> Option<R> {
    let mut value = slot.take()?;
    match tokio::task::spawn_blocking(move || {
        let r = f(&mut value);
        (value, r)
    })
    .await
    {
        Ok((value, r)) => {
            *slot = Some(value);
            Some(r)
        }
        Err(e) => {
            tracing::error!(error = %e, "a checkpoint side task failed; it is stopped");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issuer(name: &str) -> IssuerSetting {
        IssuerSetting {
            name: name.into(),
            address: vec![],
            tax_id: None,
            email: None,
            payment_instructions: vec![],
            bill_to_tax_ids: Default::default(),
        }
    }

    /// Every issuer text printed on invoices refuses spoofing characters, as tenant names do.
    #[test]
    fn issuer_settings_refuse_control_and_bidi_characters() {
        assert!(invoice_settings(Some(issuer("算力云 Compute Ltd")), None, None, None).is_ok());
        for bad in [
            "Evil\u{202E}dL",
            "two\nlines",
            "nul\u{0}",
            "zero\u{200B}width",
        ] {
            let e = invoice_settings(Some(issuer(bad)), None, None, None).unwrap_err();
            assert!(e.starts_with("[issuer] name"), "{bad:?}: {e}");
            let mut i = issuer("ok");
            i.address = vec!["line 1".into(), bad.into()];
            assert!(
                invoice_settings(Some(i), None, None, None).is_err(),
                "{bad:?}"
            );
            let mut i = issuer("ok");
            i.payment_instructions = vec![bad.into()];
            let e = invoice_pdf_settings(Some(&i)).unwrap_err();
            assert!(e.contains("payment_instructions"), "{bad:?}: {e}");
            let tax = TaxSetting {
                region: "*".into(),
                name: bad.into(),
                rate: "0.06".into(),
            };
            assert!(
                invoice_settings(None, None, Some(vec![tax]), None).is_err(),
                "{bad:?}"
            );
        }
    }
}
