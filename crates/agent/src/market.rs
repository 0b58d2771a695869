//! The market signer: signed `spot_price` events from a CSV of scheduled prices or from a
//! simulated price walk, through the same spool and sender as the agent.
//!
//! The spool cursor records how far the source was published (`rows:N` for a CSV, the last
//! boundary and prices for a walk), in the same fsynced append as the records, so a restart
//! neither repeats nor skips a price.

use super::collector::mix;
use super::config::{check_id_setting, check_url, decimal_field, read_toml, Limits, TlsConfig};
use super::run::{next_boundary, Running};
use super::sender::Shared;
use super::AgentError;
use ed25519_dalek::SigningKey;
use gpuledger_core::decimal::MAX_SCALE;
use gpuledger_core::envelope::Envelope;
use gpuledger_core::keys;
use gpuledger_core::limits::{MAX_PRICE_PER_GPU_HOUR, MAX_SPOT_SCHEDULE_AHEAD_SECONDS};
use gpuledger_core::record::{Body, Kind, SpotPrice};
use gpuledger_core::time::Timestamp;
use rust_decimal::Decimal;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A scheduled price is published once it takes effect within this many seconds (a margin
/// under the ledger's 7-day limit).
pub const PUBLISH_AHEAD_SECONDS: i64 = MAX_SPOT_SCHEDULE_AHEAD_SECONDS - 3_600;
/// How often the CSV is re-read, in seconds.
pub const CSV_POLL_SECONDS: u64 = 5;
/// Most series in one walk.
pub const MAX_SERIES: usize = 256;

/// `market.toml`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MarketConfig {
    /// The signer id registered with the ledger (role `market`).
    pub signer: String,
    /// Its private key file (mode 0600).
    pub key_file: PathBuf,
    /// The ledger's base URL.
    pub server_url: String,
    /// Spool directory.
    pub spool_dir: PathBuf,
    /// Where prices come from.
    pub source: Source,
    /// Bounds.
    #[serde(default)]
    pub limits: Limits,
    /// The origin of the log to sign for (a pin); by default the ledger's, from `GET /v1/log`
    /// at start-up (docs/AGENT.md). After start-up it holds the origin in use.
    #[serde(default)]
    pub origin: Option<String>,
    /// How an `https://` ledger's certificate is checked (`[tls]`, as in `agent.toml`).
    #[serde(default)]
    pub tls: TlsConfig,
}

/// The `[source]` table.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Source {
    /// `effective_from,region,gpu_model,price_per_gpu_hour,currency` rows, published in file
    /// order once due; the file may grow while the signer runs.
    Csv {
        /// The CSV file.
        path: PathBuf,
    },
    /// A bounded random walk per series, one step per interval boundary.
    Walk {
        /// Seed of the walk.
        #[serde(default)]
        seed: u64,
        /// Seconds between steps.
        interval_seconds: u64,
        /// ISO 4217 currency of every series.
        currency: String,
        /// The series.
        series: Vec<Series>,
    },
}

/// One walked price series.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Series {
    pub region: String,
    pub gpu_model: String,
    /// First price.
    #[serde(deserialize_with = "decimal_field")]
    pub start: Decimal,
    /// Lowest price.
    #[serde(deserialize_with = "decimal_field")]
    pub min: Decimal,
    /// Highest price.
    #[serde(deserialize_with = "decimal_field")]
    pub max: Decimal,
    /// Size of one step up or down.
    #[serde(deserialize_with = "decimal_field")]
    pub step: Decimal,
}

fn price_ok(d: Decimal) -> bool {
    !d.is_sign_negative()
        && d <= Decimal::from(MAX_PRICE_PER_GPU_HOUR)
        && d.normalize().scale() <= MAX_SCALE
}

impl MarketConfig {
    /// Reads and validates `market.toml` (relative paths are relative to its directory).
    pub fn read(path: &Path) -> Result<MarketConfig, AgentError> {
        let mut c: MarketConfig = read_toml(path)?;
        let mut paths = vec![&mut c.key_file, &mut c.spool_dir];
        if let Source::Csv { path: p } = &mut c.source {
            paths.push(p);
        }
        paths.extend(c.tls.ca_file.as_mut());
        super::config::resolve_paths(path, paths);
        c.validate().map_err(super::config::in_file(path))?;
        Ok(c)
    }

    /// Checks every setting.
    pub fn validate(&self) -> Result<(), AgentError> {
        check_id_setting("signer", &self.signer)?;
        check_url(&self.server_url)?;
        self.tls.validate(&self.server_url)?;
        self.limits.validate().map_err(AgentError::Config)?;
        if let Source::Walk {
            interval_seconds,
            currency,
            series,
            ..
        } = &self.source
        {
            if !(1..=86_400).contains(interval_seconds) {
                return Err(AgentError::Config(
                    "source.interval_seconds must be 1 to 86400".into(),
                ));
            }
            if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_uppercase()) {
                return Err(AgentError::Config(format!(
                    "source.currency {currency:?} must be three upper-case letters"
                )));
            }
            if series.is_empty() || series.len() > MAX_SERIES {
                return Err(AgentError::Config(format!(
                    "source.series must hold 1 to {MAX_SERIES} series"
                )));
            }
            for s in series {
                check_id_setting("series.region", &s.region)?;
                check_id_setting("series.gpu_model", &s.gpu_model)?;
                let ok = [s.start, s.min, s.max, s.step].into_iter().all(price_ok)
                    && s.min <= s.start
                    && s.start <= s.max;
                if !ok {
                    return Err(AgentError::Config(format!(
                        "series {}/{}: need 0 <= min <= start <= max <= {MAX_PRICE_PER_GPU_HOUR}, step >= 0, at most {MAX_SCALE} decimals",
                        s.region, s.gpu_model
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Parses one CSV row `effective_from,region,gpu_model,price_per_gpu_hour,currency`.
pub fn parse_row(line: &str) -> Result<SpotPrice, String> {
    let f: Vec<&str> = line.split(',').map(str::trim).collect();
    if f.len() != 5 {
        return Err(format!("expected 5 fields, found {}", f.len()));
    }
    let effective_from = Timestamp::parse(f[0]).map_err(|e| format!("effective_from {e}"))?;
    for (name, v) in [("region", f[1]), ("gpu_model", f[2])] {
        gpuledger_core::ids::check_id(v).map_err(|m| format!("{name} {m}"))?;
    }
    let price = gpuledger_core::decimal::parse_lenient(f[3])
        .filter(|d| price_ok(*d))
        .ok_or_else(|| format!("price_per_gpu_hour {:?} is not a price", f[3]))?;
    if f[4].len() != 3 || !f[4].bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(format!(
            "currency {:?} is not three upper-case letters",
            f[4]
        ));
    }
    Ok(SpotPrice {
        region: f[1].to_owned(),
        gpu_model: f[2].to_owned(),
        price_per_gpu_hour: price.normalize(),
        currency: f[4].to_owned(),
        effective_from,
    })
}

/// One step of series `i` of a walk at boundary `t`: up, down or flat by `step`, clamped.
pub fn walk_step(seed: u64, i: usize, t: Timestamp, s: &Series, price: Decimal) -> Decimal {
    let r = mix(seed ^ ((i as u64) << 48) ^ t.unix() as u64) % 3;
    let p = match r {
        0 => price - s.step,
        1 => price,
        _ => price + s.step,
    };
    p.clamp(s.min, s.max).normalize()
}

/// Opens the spool and starts the market signer's threads.
pub fn start_market(mut cfg: MarketConfig, key: SigningKey) -> Result<Running, AgentError> {
    let (spool, sender_cfg, http) = super::run::open_signer(
        &cfg.server_url,
        &cfg.tls,
        &cfg.signer,
        cfg.origin.as_deref(),
        &cfg.spool_dir,
        &cfg.limits,
        |_| {
            tracing::info!(
                signer = %cfg.signer,
                key_id = %keys::key_id(&key.verifying_key()),
                public_key = %keys::encode_public(&key.verifying_key()),
                "market signer starting (register the public key with POST /v1/signers, role market)"
            )
        },
    )?;
    cfg.origin = Some(sender_cfg.origin.clone());
    let name = format!("market-{}", cfg.signer);
    Running::start(spool, sender_cfg, http, &name, move |shared| {
        match &cfg.source {
            Source::Csv { path } => csv_loop(&cfg, path, &key, &shared),
            Source::Walk {
                seed,
                interval_seconds,
                currency,
                series,
            } => walk_loop(
                &cfg,
                *seed,
                *interval_seconds as i64,
                currency,
                series,
                &key,
                &shared,
            ),
        }
    })
}

/// Signs `prices` with consecutive seqs and appends them with `cursor`. False when the spool
/// is full or failed (logged).
fn publish(
    cfg: &MarketConfig,
    key: &SigningKey,
    shared: &Shared,
    prices: &[SpotPrice],
    cursor: &str,
) -> bool {
    let mut spool = shared.spool.lock().expect("spool lock");
    if !spool.has_room_for(prices.len() as u64) {
        tracing::error!(signer = %cfg.signer, pending = spool.pending(), "SPOOL FULL: publishing paused until the ledger acknowledges records");
        return false;
    }
    let first = spool.next_seq();
    let envs: Vec<Envelope> = prices
        .iter()
        .enumerate()
        .map(|(i, p)| {
            Envelope::sign(
                cfg.origin.as_deref().expect("resolved at start-up"),
                Kind::SpotPrice,
                &cfg.signer,
                key,
                first + i as u64,
                &Body::SpotPrice(p.clone()),
            )
        })
        .collect();
    match spool.append(&envs, cursor) {
        Ok(()) => {
            drop(spool);
            shared.wake.notify_all();
            for (i, p) in prices.iter().enumerate() {
                tracing::info!(
                    signer = %cfg.signer,
                    seq = first + i as u64,
                    region = %p.region,
                    gpu_model = %p.gpu_model,
                    price_per_gpu_hour = %p.price_per_gpu_hour,
                    currency = %p.currency,
                    effective_from = %p.effective_from,
                    "spot price signed and queued for the ledger"
                );
            }
            true
        }
        Err(e) => {
            tracing::error!(signer = %cfg.signer, error = %e, "cannot write the spool");
            false
        }
    }
}

fn csv_loop(cfg: &MarketConfig, path: &Path, key: &SigningKey, shared: &Shared) {
    while !shared.stopping() {
        let done: usize = shared
            .spool
            .lock()
            .expect("spool lock")
            .last_cursor()
            .and_then(|c| c.strip_prefix("rows:")?.parse().ok())
            .unwrap_or(0);
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let horizon = Timestamp::now().plus(PUBLISH_AHEAD_SECONDS);
                let rows: Vec<&str> = text.lines().collect();
                let mut n = done;
                let mut batch = Vec::new();
                while n < rows.len() && batch.len() < cfg.limits.max_batch {
                    let line = rows[n].trim();
                    if n == 0 && line.starts_with("effective_from")
                        || line.is_empty()
                        || line.starts_with('#')
                    {
                        n += 1;
                        continue;
                    }
                    match parse_row(line) {
                        Ok(p) if p.effective_from > horizon => break,
                        Ok(p) => batch.push(p),
                        Err(e) => {
                            tracing::error!(file = %path.display(), line = n + 1, error = %e, "price row skipped")
                        }
                    }
                    n += 1;
                }
                if n > done && !publish(cfg, key, shared, &batch, &format!("rows:{n}")) {
                    shared.sleep(Duration::from_secs(CSV_POLL_SECONDS));
                    continue;
                }
                if n > done && n < rows.len() {
                    continue; // more rows due
                }
            }
            Err(e) => {
                tracing::error!(file = %path.display(), error = %e, "cannot read the price file")
            }
        }
        shared.sleep(Duration::from_secs(CSV_POLL_SECONDS));
    }
}

fn walk_loop(
    cfg: &MarketConfig,
    seed: u64,
    interval: i64,
    currency: &str,
    series: &[Series],
    key: &SigningKey,
    shared: &Shared,
) {
    // Cursor: walk:<boundary>:<price>,<price>,…
    let resumed = shared
        .spool
        .lock()
        .expect("spool lock")
        .last_cursor()
        .and_then(|c| {
            let (t, prices) = c.strip_prefix("walk:")?.split_once(':')?;
            let prices: Vec<Decimal> = prices
                .split(',')
                .map(|p| Decimal::from_str_exact(p).ok())
                .collect::<Option<_>>()?;
            (prices.len() == series.len())
                .then_some((Timestamp::from_unix(t.parse().ok()?)?, prices))
        });
    let (mut last, mut prices) = match resumed {
        Some((t, p)) => (t.max(Timestamp::now().plus(-interval)), p),
        None => (
            Timestamp::now().plus(-interval),
            series.iter().map(|s| s.start).collect(),
        ),
    };
    while !shared.stopping() {
        let t = next_boundary(last, interval);
        while Timestamp::now() < t && !shared.stopping() {
            shared.sleep(Duration::from_millis(200));
        }
        if shared.stopping() {
            break;
        }
        let next: Vec<Decimal> = series
            .iter()
            .enumerate()
            .map(|(i, s)| walk_step(seed, i, t, s, prices[i]))
            .collect();
        let events: Vec<SpotPrice> = series
            .iter()
            .zip(&next)
            .map(|(s, p)| SpotPrice {
                region: s.region.clone(),
                gpu_model: s.gpu_model.clone(),
                price_per_gpu_hour: *p,
                currency: currency.to_owned(),
                effective_from: t,
            })
            .collect();
        let cursor = format!(
            "walk:{}:{}",
            t.unix(),
            next.iter()
                .map(|p| p.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        if publish(cfg, key, shared, &events, &cursor) {
            prices = next;
        }
        last = t;
    }
}

/// `gpuledger market --config FILE [--ca-file PEM] [--pin-sha256 HEX]`: runs until the process
/// is stopped; the flags win over the file's `[tls]`.
pub fn run_from_config(path: &Path, tls_flags: TlsConfig) -> Result<(), AgentError> {
    let mut cfg = MarketConfig::read(path)?;
    cfg.tls = cfg.tls.overridden_by(tls_flags);
    let key = gpuledger_shell::keyfile::read(&cfg.key_file)?;
    start_market(cfg, key)?.wait();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_parse_exactly_and_bad_rows_are_named() {
        let p = parse_row("2026-11-30T12:00:00Z, cn-north-imx, H100-SXM-80G, 9.80, CNY").unwrap();
        assert_eq!(p.price_per_gpu_hour.to_string(), "9.8");
        assert!(parse_row("2026-11-30T12:00:00Z,cn-north-imx,H100,-1,CNY").is_err());
        assert!(parse_row("2026-11-30T12:00:00Z,cn-north-imx,H100,1,cny").is_err());
        assert!(parse_row("2026-11-30,cn-north-imx,H100,1,CNY").is_err());
    }

    #[test]
    fn walk_stays_in_bounds() {
        let s = Series {
            region: "r".into(),
            gpu_model: "m".into(),
            start: Decimal::new(98, 1),
            min: Decimal::new(95, 1),
            max: Decimal::from(10),
            step: Decimal::new(2, 1),
        };
        let mut p = s.start;
        for k in 0..1000 {
            p = walk_step(
                1,
                0,
                Timestamp::from_unix(1_800_000_000 + k * 60).unwrap(),
                &s,
                p,
            );
            assert!(p >= s.min && p <= s.max);
        }
    }

    #[test]
    fn tls_table_is_read_with_paths_relative_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("market.toml");
        let text = r#"
signer = "market-cn"
key_file = "m.key"
server_url = "https://ledger:8443"
spool_dir = "spool"
[source]
kind = "csv"
path = "prices.csv"
[tls]
ca_file = "ca.pem"
"#;
        std::fs::write(&file, text).unwrap();
        let c = MarketConfig::read(&file).unwrap();
        assert_eq!(c.tls.ca_file, Some(dir.path().join("ca.pem")));
        assert_eq!(c.tls.pin_sha256, None);
        std::fs::write(&file, text.replace("https://", "http://")).unwrap();
        let e = MarketConfig::read(&file).unwrap_err().to_string();
        assert!(e.contains("market.toml") && e.contains("https://"), "{e}");
    }
}
