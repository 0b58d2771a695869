//! `agent.toml` and the settings shared with the market signer. Every key is documented in
//! docs/AGENT.md and docs/CONFIGURATION.md.

use super::AgentError;
use gpuledger_core::ids::check_id;
use gpuledger_core::limits::MAX_APPEND_BATCH;
use rust_decimal::Decimal;
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Default measurement interval, in seconds.
pub const DEFAULT_INTERVAL_SECONDS: u64 = 10;
/// Longest measurement interval accepted, in seconds (one hour; records allow a day).
pub const MAX_INTERVAL_SECONDS: u64 = 3_600;
/// Default bound on unacknowledged records in the spool.
pub const DEFAULT_MAX_SPOOL_RECORDS: u64 = 1_000_000;
/// Largest spool bound accepted.
pub const MAX_SPOOL_RECORDS: u64 = 100_000_000;
/// Default records per `POST /v1/records`.
pub const DEFAULT_MAX_BATCH: usize = 500;
/// Most records per `POST /v1/records` the agent sends: 1,000 envelopes of at most 8 KiB stay
/// under the ledger's 8 MiB body limit.
pub const MAX_BATCH: usize = 1_000;
/// Default ceiling of the retry backoff, in seconds.
pub const DEFAULT_MAX_BACKOFF_SECONDS: u64 = 60;
/// Default HTTP timeout of one request, in seconds.
pub const DEFAULT_REQUEST_TIMEOUT_SECONDS: u64 = 30;
/// Default acknowledged prefix, in bytes, after which the spool file is compacted.
pub const DEFAULT_COMPACT_AFTER_BYTES: u64 = 16 * 1024 * 1024;

const _: () = assert!(MAX_BATCH <= MAX_APPEND_BATCH);

/// The `[limits]` table, shared by the agent and the market signer.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Most unacknowledged records the spool holds; when reached, measuring stops.
    pub max_spool_records: u64,
    /// Records per POST (1 to [`MAX_BATCH`]).
    pub max_batch: usize,
    /// Ceiling of the exponential backoff between retries, in seconds.
    pub max_backoff_seconds: u64,
    /// Timeout of one HTTP request, in seconds.
    pub request_timeout_seconds: u64,
    /// Compact the spool file once its acknowledged prefix is this many bytes.
    pub compact_after_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_spool_records: DEFAULT_MAX_SPOOL_RECORDS,
            max_batch: DEFAULT_MAX_BATCH,
            max_backoff_seconds: DEFAULT_MAX_BACKOFF_SECONDS,
            request_timeout_seconds: DEFAULT_REQUEST_TIMEOUT_SECONDS,
            compact_after_bytes: DEFAULT_COMPACT_AFTER_BYTES,
        }
    }
}

impl Limits {
    /// Checks every limit is within its bounds.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=MAX_SPOOL_RECORDS).contains(&self.max_spool_records) {
            return Err(format!(
                "limits.max_spool_records must be 1 to {MAX_SPOOL_RECORDS}"
            ));
        }
        if !(1..=MAX_BATCH).contains(&self.max_batch) {
            return Err(format!("limits.max_batch must be 1 to {MAX_BATCH}"));
        }
        if !(1..=3_600).contains(&self.max_backoff_seconds) {
            return Err("limits.max_backoff_seconds must be 1 to 3600".into());
        }
        if !(1..=600).contains(&self.request_timeout_seconds) {
            return Err("limits.request_timeout_seconds must be 1 to 600".into());
        }
        if self.compact_after_bytes == 0 {
            return Err("limits.compact_after_bytes must be above 0".into());
        }
        Ok(())
    }
}

/// The `[tls]` table, shared by the agent and the market signer: how the ledger's certificate
/// is checked when `server_url` is `https://` ([`super::tls`], docs/AGENT.md "TLS").
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// A PEM file of the CA certificates to trust instead of the system's; by default the
    /// system's CA bundle.
    pub ca_file: Option<PathBuf>,
    /// The SHA-256 of the ledger's certificate (its DER bytes, in hex): the ledger must present
    /// exactly that certificate, besides a chain to a trusted CA; by default no pin.
    pub pin_sha256: Option<String>,
}

impl TlsConfig {
    /// Checks the settings against the ledger's URL; returns the pin, if one is set. TLS
    /// settings with an `http://` URL are refused: they would protect nothing.
    pub fn validate(&self, server_url: &str) -> Result<Option<super::tls::Pin>, AgentError> {
        if !server_url.starts_with("https://") && *self != TlsConfig::default() {
            return Err(AgentError::Config(format!(
                "[tls] ca_file and pin_sha256 apply to an https:// server_url only; server_url is {server_url:?}"
            )));
        }
        self.pin_sha256
            .as_deref()
            .map(|p| {
                super::tls::Pin::parse(p)
                    .map_err(|e| AgentError::Config(format!("[tls] pin_sha256 {e}")))
            })
            .transpose()
    }

    /// These settings with each one that `flags` sets replaced by it (the command line's
    /// settings win over the file's).
    pub fn overridden_by(self, flags: TlsConfig) -> TlsConfig {
        TlsConfig {
            ca_file: flags.ca_file.or(self.ca_file),
            pin_sha256: flags.pin_sha256.or(self.pin_sha256),
        }
    }
}

/// `agent.toml`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// The signer id registered with the ledger (role `node`).
    pub signer: String,
    /// The signer's private key file (mode 0600, as `gpuledger keygen` writes it).
    pub key_file: PathBuf,
    /// The ledger's base URL, e.g. `http://ledger.internal:8080`.
    pub server_url: String,
    /// Measurement interval in seconds; intervals are aligned to multiples of it (Unix time).
    #[serde(default = "default_interval")]
    pub interval_seconds: u64,
    /// Region id written in every record.
    pub region: String,
    /// Node id written in every record.
    pub node: String,
    /// The lease file, re-read at every interval boundary.
    pub lease_file: PathBuf,
    /// Directory of the spool, its acknowledgement marker and the dead-letter file.
    pub spool_dir: PathBuf,
    /// Which collector measures the GPUs.
    pub collector: CollectorConfig,
    /// Bounds.
    #[serde(default)]
    pub limits: Limits,
    /// Address of the agent's Prometheus `/metrics` listener, e.g. `127.0.0.1:9101`; none by
    /// default (`gpuledger agent --metrics-listen` wins over it).
    #[serde(default)]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// The origin of the log to sign for (a pin); by default the ledger's, from `GET /v1/log`
    /// at start-up (docs/AGENT.md). After start-up it holds the origin in use.
    #[serde(default)]
    pub origin: Option<String>,
    /// How an `https://` ledger's certificate is checked (`[tls]`).
    #[serde(default)]
    pub tls: TlsConfig,
}

fn default_interval() -> u64 {
    DEFAULT_INTERVAL_SECONDS
}

/// The `[collector]` table.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum CollectorConfig {
    /// Deterministic simulated GPUs (demo, tests, benchmarks).
    Simulated {
        /// Seed of the load pattern.
        #[serde(default)]
        seed: u64,
        /// `training`, `inference` or `idle`.
        #[serde(default = "default_load")]
        load: String,
        /// GPU groups, in index order.
        gpus: Vec<SimulatedGpus>,
    },
    /// Runs `nvidia-smi --query-gpu=… --format=csv,noheader,nounits`.
    NvidiaSmi {
        /// The program to run; default `nvidia-smi`.
        #[serde(default = "default_nvidia_smi")]
        command: PathBuf,
        /// GPU name as nvidia-smi prints it → GPU model id in records. Names not listed get
        /// a derived id (see docs/AGENT.md).
        #[serde(default)]
        models: BTreeMap<String, String>,
        /// Also run the process query (`--query-compute-apps`) to count compute processes
        /// per GPU; default on.
        #[serde(default = "default_true")]
        processes: bool,
    },
    /// Reads the GPUs through NVML, the NVIDIA driver library. Needs a binary built with the
    /// `nvml` cargo feature; otherwise the configuration is refused.
    Nvml {
        /// As for `nvidia-smi`: GPU name → GPU model id.
        #[serde(default)]
        models: BTreeMap<String, String>,
        /// Count compute processes per GPU; default on.
        #[serde(default = "default_true")]
        processes: bool,
    },
}

fn default_true() -> bool {
    true
}

fn default_load() -> String {
    "training".into()
}

fn default_nvidia_smi() -> PathBuf {
    PathBuf::from("nvidia-smi")
}

/// A group of identical simulated GPUs.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SimulatedGpus {
    /// GPU model id, e.g. `H100-SXM-80G`.
    pub model: String,
    /// How many.
    pub count: u32,
    /// Power at 0 % utilisation, watts (a decimal string or integer).
    #[serde(deserialize_with = "decimal_field")]
    pub idle_watts: Decimal,
    /// Power at 100 % utilisation, watts.
    #[serde(deserialize_with = "decimal_field")]
    pub max_watts: Decimal,
}

/// Reads a decimal from a TOML string or integer, never through a float.
pub fn decimal_field<'de, D: Deserializer<'de>>(d: D) -> Result<Decimal, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum StrOrInt {
        S(String),
        I(i64),
    }
    match StrOrInt::deserialize(d)? {
        StrOrInt::S(s) => Decimal::from_str_exact(s.trim())
            .map_err(|_| serde::de::Error::custom(format!("{s:?} is not a decimal"))),
        StrOrInt::I(i) => Ok(Decimal::from(i)),
    }
}

/// Makes the relative `paths` of a configuration file relative to the file's folder.
pub fn resolve_paths<'a>(file: &Path, paths: impl IntoIterator<Item = &'a mut PathBuf>) {
    let base = file.parent().unwrap_or(Path::new(""));
    for p in paths {
        if p.is_relative() {
            *p = base.join(&*p);
        }
    }
}

/// Whether a program setting is a relative path (it holds a `/`) rather than a bare name,
/// which `std::process::Command` looks up in `PATH`.
fn is_relative_path(program: &Path) -> bool {
    program.is_relative() && program.as_os_str().as_encoded_bytes().contains(&b'/')
}

/// A configuration error naming its file.
pub fn in_file(file: &Path) -> impl FnOnce(AgentError) -> AgentError + '_ {
    move |e| AgentError::Config(format!("{}: {e}", file.display()))
}

/// Reads a TOML file into `T`, naming the file in every error.
pub fn read_toml<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, AgentError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| AgentError::Config(format!("{}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| AgentError::Config(format!("{}: {e}", path.display())))
}

/// Checks an identifier setting.
pub fn check_id_setting(name: &str, v: &str) -> Result<(), AgentError> {
    check_id(v).map_err(|m| AgentError::Config(format!("{name} {v:?} {m}")))
}

/// Checks a server URL setting.
pub fn check_url(v: &str) -> Result<(), AgentError> {
    if v.starts_with("http://") || v.starts_with("https://") {
        Ok(())
    } else {
        Err(AgentError::Config(format!(
            "server_url {v:?} must start with http:// or https://"
        )))
    }
}

impl AgentConfig {
    /// Reads and validates `agent.toml`. Relative paths in it are taken relative to the
    /// file's directory; so is `[collector] command` when it is a relative path (it holds a
    /// `/`, as `bin/nvidia-smi` or `./nvidia-smi` do), while a bare program name such as
    /// `nvidia-smi` stays a name looked up in `PATH`.
    pub fn read(path: &Path) -> Result<AgentConfig, AgentError> {
        let mut c: AgentConfig = read_toml(path)?;
        let command = match &mut c.collector {
            CollectorConfig::NvidiaSmi { command, .. } if is_relative_path(command) => {
                Some(command)
            }
            _ => None,
        };
        resolve_paths(
            path,
            [&mut c.key_file, &mut c.lease_file, &mut c.spool_dir]
                .into_iter()
                .chain(c.tls.ca_file.as_mut())
                .chain(command),
        );
        c.validate().map_err(in_file(path))?;
        Ok(c)
    }

    /// Checks every setting.
    pub fn validate(&self) -> Result<(), AgentError> {
        check_id_setting("signer", &self.signer)?;
        check_id_setting("region", &self.region)?;
        check_id_setting("node", &self.node)?;
        check_url(&self.server_url)?;
        self.tls.validate(&self.server_url)?;
        if !(1..=MAX_INTERVAL_SECONDS).contains(&self.interval_seconds) {
            return Err(AgentError::Config(format!(
                "interval_seconds must be 1 to {MAX_INTERVAL_SECONDS}"
            )));
        }
        self.limits.validate().map_err(AgentError::Config)?;
        match &self.collector {
            CollectorConfig::Simulated { load, gpus, .. } => {
                if !["training", "inference", "idle"].contains(&load.as_str()) {
                    return Err(AgentError::Config(format!(
                        "collector.load {load:?} must be training, inference or idle"
                    )));
                }
                let total: u32 = gpus.iter().map(|g| g.count).sum();
                if total == 0 || total > 1024 {
                    return Err(AgentError::Config(
                        "collector.gpus must hold 1 to 1024 GPUs".into(),
                    ));
                }
                for g in gpus {
                    check_id_setting("collector.gpus.model", &g.model)?;
                    if g.idle_watts.is_sign_negative() || g.max_watts < g.idle_watts {
                        return Err(AgentError::Config(
                            "collector.gpus: need 0 <= idle_watts <= max_watts".into(),
                        ));
                    }
                }
            }
            CollectorConfig::NvidiaSmi { models, .. } => {
                for id in models.values() {
                    check_id_setting("collector.models", id)?;
                }
            }
            CollectorConfig::Nvml { models, .. } => {
                if !cfg!(feature = "nvml") {
                    return Err(AgentError::Config(super::collector::NVML_NOT_BUILT.into()));
                }
                for id in models.values() {
                    check_id_setting("collector.models", id)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_collectors_and_refuses_unknown_keys() {
        let c: AgentConfig = toml::from_str(
            r#"
signer = "node-a"
key_file = "k"
server_url = "http://127.0.0.1:8080"
region = "cn-north-imx"
node = "node-a"
lease_file = "leases.toml"
spool_dir = "spool"
[collector]
kind = "simulated"
gpus = [{ model = "H100-SXM-80G", count = 8, idle_watts = 70, max_watts = "700.5" }]
"#,
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.interval_seconds, 10);
        assert_eq!(c.limits, Limits::default());
        match &c.collector {
            CollectorConfig::Simulated { gpus, .. } => {
                assert_eq!(gpus[0].max_watts, Decimal::new(7005, 1))
            }
            _ => panic!(),
        }
        let bad = toml::from_str::<AgentConfig>(
            r#"
signer = "node-a"
key_file = "k"
server_url = "http://x"
region = "r"
node = "n"
lease_file = "l"
spool_dir = "s"
[collector]
kind = "nvidia-smi"
colour = "blue"
"#,
        );
        assert!(bad.unwrap_err().to_string().contains("colour"));
    }

    const TLS_AGENT: &str = r#"
signer = "node-a"
key_file = "k"
server_url = "URL"
region = "cn-north-imx"
node = "node-a"
lease_file = "leases.toml"
spool_dir = "spool"
[collector]
kind = "simulated"
gpus = [{ model = "H100-SXM-80G", count = 1, idle_watts = 70, max_watts = 700 }]
"#;

    fn read_agent(dir: &Path, url: &str, tls: &str) -> Result<AgentConfig, AgentError> {
        let file = dir.join("agent.toml");
        std::fs::write(&file, format!("{}{tls}", TLS_AGENT.replace("URL", url))).unwrap();
        AgentConfig::read(&file)
    }

    /// `[collector] command` is relative to the file like the other paths, unless it is a bare
    /// name, which is looked up in `PATH`.
    #[test]
    fn a_relative_collector_command_is_relative_to_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("agent.toml");
        let command = |setting: &str| {
            let text = TLS_AGENT.replace("URL", "http://ledger:8080").replace(
                "kind = \"simulated\"\ngpus = [{ model = \"H100-SXM-80G\", count = 1, idle_watts = 70, max_watts = 700 }]",
                &format!("kind = \"nvidia-smi\"\n{setting}"),
            );
            std::fs::write(&file, text).unwrap();
            match AgentConfig::read(&file).unwrap().collector {
                CollectorConfig::NvidiaSmi { command, .. } => command,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(
            command("command = \"bin/fake-smi\""),
            dir.path().join("bin/fake-smi")
        );
        assert_eq!(
            command("command = \"./fake-smi\""),
            dir.path().join("./fake-smi")
        );
        assert_eq!(
            command("command = \"nvidia-smi\""),
            PathBuf::from("nvidia-smi")
        );
        assert_eq!(command(""), PathBuf::from("nvidia-smi"));
        assert_eq!(
            command("command = \"/usr/bin/nvidia-smi\""),
            PathBuf::from("/usr/bin/nvidia-smi")
        );
    }

    #[test]
    fn tls_settings_are_read_checked_and_overridden_by_flags() {
        let dir = tempfile::tempdir().unwrap();
        let pin = "ab".repeat(32);
        // None by default: the system's CAs, no pin.
        let c = read_agent(dir.path(), "https://ledger:8443", "").unwrap();
        assert_eq!(c.tls, TlsConfig::default());
        // A relative ca_file is relative to the file, like the other paths.
        let c = read_agent(
            dir.path(),
            "https://ledger:8443",
            &format!("[tls]\nca_file = \"ca.pem\"\npin_sha256 = \"{pin}\"\n"),
        )
        .unwrap();
        assert_eq!(
            c.tls.ca_file.as_deref(),
            Some(dir.path().join("ca.pem").as_path())
        );
        assert_eq!(
            c.tls.validate(&c.server_url).unwrap().unwrap().to_string(),
            pin
        );
        // The command line's settings win, one by one.
        let flags = TlsConfig {
            ca_file: Some(PathBuf::from("/etc/other-ca.pem")),
            pin_sha256: None,
        };
        let t = c.tls.clone().overridden_by(flags);
        assert_eq!(t.ca_file.as_deref(), Some(Path::new("/etc/other-ca.pem")));
        assert_eq!(t.pin_sha256.as_deref(), Some(pin.as_str()));
        // A malformed pin, an unknown key, and TLS settings for an http:// ledger are refused,
        // naming the file.
        let e = read_agent(dir.path(), "https://l", "[tls]\npin_sha256 = \"abc\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("agent.toml") && e.contains("pin_sha256"), "{e}");
        let e = read_agent(dir.path(), "https://l", "[tls]\npin = \"abc\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field"), "{e}");
        let e = read_agent(dir.path(), "http://l", "[tls]\nca_file = \"ca.pem\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("agent.toml") && e.contains("https://"), "{e}");
    }
}
