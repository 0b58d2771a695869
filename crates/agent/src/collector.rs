//! Collectors: where GPU readings come from. One trait, implementations chosen in
//! `agent.toml`: [`NvidiaSmi`] (a real node, through the `nvidia-smi` program), `nvml::Nvml`
//! (a real node, through the driver library; only with the `nvml` cargo feature) and
//! [`Simulated`] (demo, tests, benchmarks).
//!
//! The nvidia-smi output parsers, [`parse_nvidia_smi`] and [`parse_compute_apps`], are pure
//! and tested on hand-written outputs in `tests/fixtures/nvidia-smi/`.

use super::config::{CollectorConfig, SimulatedGpus};
use gpuledger_core::ids::check_id;
use gpuledger_core::time::Timestamp;
use rust_decimal::Decimal;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

/// The query the nvidia-smi collector runs.
pub const NVIDIA_SMI_QUERY: &str =
    "index,uuid,name,utilization.gpu,power.draw,total_energy_consumption";
/// The process query the nvidia-smi collector runs (when `processes` is on).
pub const NVIDIA_SMI_APPS_QUERY: &str = "gpu_uuid,pid,used_memory";
/// Most bytes of a collector program's output parsed (stdout and stderr each); the rest is
/// ignored. 1,024 GPUs at about 120 bytes a line fit well within it.
pub const MAX_COMMAND_OUTPUT_BYTES: usize = 1024 * 1024;

/// One GPU at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuSample {
    /// Index as the driver numbers it (what leases name).
    pub index: u32,
    /// Stable identity (nvidia-smi's `GPU-…` UUID).
    pub uuid: String,
    /// GPU model id used in records.
    pub model: String,
    /// Utilisation in percent, when known.
    pub utilization_pct: Option<Decimal>,
    /// Power draw in watts, when known.
    pub power_watts: Option<Decimal>,
    /// Energy counter since the driver loaded, in millijoules, when known.
    pub energy_mj: Option<Decimal>,
    /// Compute processes running on the GPU, when the collector asked (nvidia-smi's process
    /// query, NVML's running compute processes). Informational: attribution follows the
    /// leases, not processes; the agent warns about an unleased GPU that runs processes.
    pub compute_processes: Option<u32>,
}

/// What a collector read: the GPUs present, and notes on GPUs or lines it could not read
/// (a GPU lost from the bus, a malformed line, a field not available).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reading {
    pub gpus: Vec<GpuSample>,
    pub notes: Vec<String>,
}

/// Why a collector could not read at all.
#[derive(Debug, thiserror::Error)]
pub enum CollectorError {
    #[error("cannot run {command}: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("{command} read no GPU ({status}): {detail}")]
    NoGpus {
        command: String,
        /// How the reading ended, as said in full: `exit status: 1` (a program's exit status
        /// as the standard library writes it), `0 devices`.
        status: String,
        detail: String,
    },
    /// The collector cannot work in this binary or on this machine (e.g. `nvml` in a build
    /// without the feature, or no NVIDIA driver library).
    #[error("{0}")]
    Unavailable(String),
}

/// The message for `kind = "nvml"` in a binary built without the `nvml` feature.
/// The command is the lean agent's (`-p gpuledger-agent`), as docs/AGENT.md gives it.
pub const NVML_NOT_BUILT: &str = "collector kind \"nvml\" is not in this build of gpuledger: \
     rebuild with `cargo build --release -p gpuledger-agent --features nvml` (or, for \
     `gpuledger agent`, `cargo build --release --features nvml`), or use kind = \"nvidia-smi\"";

/// A source of GPU readings.
pub trait Collector: Send {
    /// Reads every GPU at `at` (the wall-clock second the reading is taken).
    fn read(&mut self, at: Timestamp) -> Result<Reading, CollectorError>;
}

/// Builds the collector a configuration names. Fails for `nvml` when the binary was built
/// without the `nvml` feature or the driver library cannot be loaded.
pub fn from_config(c: &CollectorConfig) -> Result<Box<dyn Collector>, CollectorError> {
    Ok(match c {
        CollectorConfig::Simulated { seed, load, gpus } => {
            Box::new(Simulated::new(*seed, load, gpus))
        }
        CollectorConfig::NvidiaSmi {
            command,
            models,
            processes,
        } => Box::new(NvidiaSmi {
            command: command.clone(),
            models: models.clone(),
            processes: *processes,
        }),
        #[cfg(feature = "nvml")]
        CollectorConfig::Nvml { models, processes } => {
            Box::new(nvml::Nvml::new(models.clone(), *processes)?)
        }
        #[cfg(not(feature = "nvml"))]
        CollectorConfig::Nvml { .. } => {
            return Err(CollectorError::Unavailable(NVML_NOT_BUILT.into()))
        }
    })
}

/// The GPU model id for a name nvidia-smi prints: the configured mapping, else the name
/// without a leading `NVIDIA `, with every character outside the identifier alphabet replaced
/// by `-` (`NVIDIA H100 80GB HBM3` → `H100-80GB-HBM3`).
pub fn model_id(name: &str, models: &BTreeMap<String, String>) -> String {
    if let Some(m) = models.get(name) {
        return m.clone();
    }
    let base = name.strip_prefix("NVIDIA ").unwrap_or(name);
    let id: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let id = id.trim_matches('-').to_owned();
    if check_id(&id).is_ok() {
        id
    } else {
        "unknown-gpu".to_owned()
    }
}

fn field(v: &str, name: &str, idx: &str, notes: &mut Vec<String>) -> Option<Decimal> {
    let v = v.trim();
    if v.starts_with('[') || v == "N/A" {
        notes.push(format!("GPU {idx}: {name} is {v}"));
        return None;
    }
    match Decimal::from_str_exact(v) {
        Ok(d) if !d.is_sign_negative() => Some(d),
        _ => {
            notes.push(format!("GPU {idx}: {name} {v:?} is not a number"));
            None
        }
    }
}

/// Parses the output of `nvidia-smi --query-gpu=index,uuid,name,utilization.gpu,power.draw,
/// total_energy_consumption --format=csv,noheader,nounits` (stdout and stderr together).
///
/// A line of six fields is a GPU; `[N/A]`, `[Not Supported]` and other bracketed values make
/// that field unknown (with a note). A line saying the driver cannot reach a GPU ("Unable to
/// determine the device handle for GPU…: GPU is lost…") is a note: that GPU is absent from
/// the reading. Any other line is a malformed-line note. A line whose index or UUID cannot be
/// read is skipped, never guessed.
pub fn parse_nvidia_smi(output: &str, models: &BTreeMap<String, String>) -> Reading {
    let mut r = Reading::default();
    for line in output.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line.starts_with("Unable to determine the device handle for")
            || line.contains("GPU is lost")
        {
            r.notes.push(format!("GPU unreachable: {line}"));
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != 6 {
            r.notes.push(format!("malformed nvidia-smi line: {line:?}"));
            continue;
        }
        let Ok(index) = f[0].parse::<u32>() else {
            r.notes
                .push(format!("malformed GPU index in line: {line:?}"));
            continue;
        };
        if !f[1].starts_with("GPU-") || f[1].len() < 8 {
            r.notes
                .push(format!("malformed GPU UUID in line: {line:?}"));
            continue;
        }
        let idx = index.to_string();
        let utilization_pct = field(f[3], "utilization.gpu", &idx, &mut r.notes);
        let power_watts = field(f[4], "power.draw", &idx, &mut r.notes);
        let energy_mj = field(f[5], "total_energy_consumption", &idx, &mut r.notes);
        if r.gpus.iter().any(|g: &GpuSample| g.index == index) {
            r.notes.push(format!(
                "GPU index {index} appears twice; the first line counts"
            ));
            continue;
        }
        r.gpus.push(GpuSample {
            index,
            uuid: f[1].to_owned(),
            model: model_id(f[2], models),
            utilization_pct,
            power_watts,
            energy_mj,
            compute_processes: None,
        });
    }
    r.gpus.sort_by_key(|g| g.index);
    r
}

/// One compute process as nvidia-smi's process query lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComputeApp {
    /// The GPU it runs on (nvidia-smi's `GPU-…` UUID).
    pub gpu_uuid: String,
    /// Its process id (in the host's PID namespace).
    pub pid: u32,
    /// GPU memory it uses in MiB, when nvidia-smi may say (`[N/A]` in some containers).
    pub used_memory_mib: Option<u64>,
}

/// Parses the output of `nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory
/// --format=csv,noheader,nounits` (stdout and stderr together): one line of three fields per
/// process; no lines, or "No running processes found", when there are none. A line whose UUID
/// or pid cannot be read is skipped with a note; an unreadable memory field (`[N/A]`) keeps
/// the process with the memory unknown. Returns the processes and the notes.
pub fn parse_compute_apps(output: &str) -> (Vec<ComputeApp>, Vec<String>) {
    let mut apps = Vec::new();
    let mut notes = Vec::new();
    for line in output.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with("No running processes found") {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != 3 {
            notes.push(format!("malformed nvidia-smi process line: {line:?}"));
            continue;
        }
        if !f[0].starts_with("GPU-") || f[0].len() < 8 {
            notes.push(format!("malformed GPU UUID in process line: {line:?}"));
            continue;
        }
        let Ok(pid) = f[1].parse::<u32>() else {
            notes.push(format!("malformed pid in process line: {line:?}"));
            continue;
        };
        apps.push(ComputeApp {
            gpu_uuid: f[0].to_owned(),
            pid,
            used_memory_mib: f[2].parse().ok(),
        });
    }
    (apps, notes)
}

/// Sets every GPU's `compute_processes` from the process list (0 where none runs); notes a
/// process on a GPU that is not in the reading.
pub fn count_processes(reading: &mut Reading, apps: &[ComputeApp]) {
    for g in &mut reading.gpus {
        g.compute_processes = Some(apps.iter().filter(|a| a.gpu_uuid == g.uuid).count() as u32);
    }
    for a in apps {
        if !reading.gpus.iter().any(|g| g.uuid == a.gpu_uuid) {
            reading.notes.push(format!(
                "process {} runs on GPU {}, which is not in the reading",
                a.pid, a.gpu_uuid
            ));
        }
    }
}

/// Runs nvidia-smi.
pub struct NvidiaSmi {
    /// The program.
    pub command: PathBuf,
    /// Name → model id.
    pub models: BTreeMap<String, String>,
    /// Also run the process query and fill [`GpuSample::compute_processes`].
    pub processes: bool,
}

/// Runs `command --query-…=fields --format=csv,noheader,nounits`; returns stdout then
/// stderr as text (each cut at [`MAX_COMMAND_OUTPUT_BYTES`]) and the exit status.
fn run_query(
    command: &std::path::Path,
    query: &str,
) -> Result<(String, std::process::ExitStatus), CollectorError> {
    let out = Command::new(command)
        .arg(query)
        .arg("--format=csv,noheader,nounits")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|source| CollectorError::Spawn {
            command: command.display().to_string(),
            source,
        })?;
    let cut = |b: &[u8]| {
        String::from_utf8_lossy(&b[..b.len().min(MAX_COMMAND_OUTPUT_BYTES)]).into_owned()
    };
    let mut text = cut(&out.stdout);
    text.push('\n');
    text.push_str(&cut(&out.stderr));
    Ok((text, out.status))
}

impl Collector for NvidiaSmi {
    fn read(&mut self, _at: Timestamp) -> Result<Reading, CollectorError> {
        let (text, status) = run_query(&self.command, &format!("--query-gpu={NVIDIA_SMI_QUERY}"))?;
        let mut r = parse_nvidia_smi(&text, &self.models);
        if r.gpus.is_empty() {
            return Err(CollectorError::NoGpus {
                command: self.command.display().to_string(),
                status: status.to_string(),
                detail: text.trim().chars().take(500).collect(),
            });
        }
        if self.processes {
            // The GPU reading stands without it: a failed process query is a note, and the
            // process counts stay unknown.
            match run_query(
                &self.command,
                &format!("--query-compute-apps={NVIDIA_SMI_APPS_QUERY}"),
            ) {
                Ok((text, status)) if status.success() => {
                    let (apps, notes) = parse_compute_apps(&text);
                    r.notes.extend(notes);
                    count_processes(&mut r, &apps);
                }
                Ok((text, status)) => r.notes.push(format!(
                    "process query failed ({status}): {}",
                    text.trim().chars().take(300).collect::<String>()
                )),
                Err(e) => r.notes.push(format!("process query failed: {e}")),
            }
        }
        Ok(r)
    }
}

/// The NVML collector: the same readings as [`NvidiaSmi`], from the NVIDIA driver library
/// (`libnvidia-ml.so.1`, loaded when the agent starts) instead of a program per reading.
#[cfg(feature = "nvml")]
pub mod nvml {
    use super::{model_id, Collector, CollectorError, GpuSample, Reading};
    use gpuledger_core::time::Timestamp;
    use nvml_wrapper::error::NvmlError;
    use rust_decimal::Decimal;
    use std::collections::BTreeMap;

    /// Reads every GPU through NVML.
    pub struct Nvml {
        nvml: nvml_wrapper::Nvml,
        models: BTreeMap<String, String>,
        processes: bool,
    }

    impl Nvml {
        /// Loads and initialises the driver library; a clear error where there is none.
        pub fn new(
            models: BTreeMap<String, String>,
            processes: bool,
        ) -> Result<Nvml, CollectorError> {
            let nvml = nvml_wrapper::Nvml::init().map_err(|e| {
                CollectorError::Unavailable(format!(
                    "collector nvml: cannot load and initialise the NVIDIA driver library \
                     (libnvidia-ml.so): {e}; is the NVIDIA driver installed and loaded?"
                ))
            })?;
            Ok(Nvml {
                nvml,
                models,
                processes,
            })
        }
    }

    impl Nvml {
        /// Reads the GPU at `index`; `None` (and a note) when its handle or identity cannot be
        /// read: as with nvidia-smi, a GPU that fell off the bus is absent from the reading,
        /// never guessed. A field that cannot be read is unknown (and a note).
        fn sample(&self, index: u32, notes: &mut Vec<String>) -> Option<GpuSample> {
            let dev = match self.nvml.device_by_index(index) {
                Ok(d) => d,
                Err(e) => {
                    notes.push(format!("GPU unreachable: GPU {index}: {e}"));
                    return None;
                }
            };
            let (uuid, name) = match (dev.uuid(), dev.name()) {
                (Ok(u), Ok(n)) => (u, n),
                (Err(e), _) | (_, Err(e)) => {
                    notes.push(format!("GPU {index}: cannot read its UUID or name: {e}"));
                    return None;
                }
            };
            let utilization_pct = known(
                notes,
                index,
                "utilization.gpu",
                dev.utilization_rates().map(|u| Decimal::from(u.gpu)),
            );
            // NVML reports milliwatts.
            let power_watts = known(
                notes,
                index,
                "power.draw",
                dev.power_usage()
                    .map(|mw| Decimal::new(i64::from(mw), 3).normalize()),
            );
            let energy_mj = known(
                notes,
                index,
                "total_energy_consumption",
                dev.total_energy_consumption().map(Decimal::from),
            );
            let compute_processes = if self.processes {
                known(
                    notes,
                    index,
                    "the process list",
                    dev.running_compute_processes().map(|p| p.len() as u32),
                )
            } else {
                None
            };
            Some(GpuSample {
                index,
                uuid,
                model: model_id(&name, &self.models),
                utilization_pct,
                power_watts,
                energy_mj,
                compute_processes,
            })
        }
    }

    /// `Some` of a field's `value`, or `None` and a note that the field `what` of the GPU at
    /// `index` is unknown.
    fn known<T>(
        notes: &mut Vec<String>,
        index: u32,
        what: &str,
        value: Result<T, NvmlError>,
    ) -> Option<T> {
        value
            .map_err(|e| notes.push(format!("GPU {index}: {what} is unknown: {e}")))
            .ok()
    }

    impl Collector for Nvml {
        fn read(&mut self, _at: Timestamp) -> Result<Reading, CollectorError> {
            let count = self
                .nvml
                .device_count()
                .map_err(|e| CollectorError::NoGpus {
                    command: "nvml".into(),
                    status: "device count failed".into(),
                    detail: e.to_string(),
                })?;
            let mut r = Reading::default();
            for index in 0..count {
                if let Some(g) = self.sample(index, &mut r.notes) {
                    r.gpus.push(g);
                }
            }
            if r.gpus.is_empty() {
                return Err(CollectorError::NoGpus {
                    command: "nvml".into(),
                    status: format!("{count} devices"),
                    detail: r.notes.join("; "),
                });
            }
            Ok(r)
        }
    }
}

/// Deterministic simulated GPUs: utilisation from a seed, the time and the GPU index (a load
/// pattern), power linear in utilisation between idle and maximum watts, and an energy counter
/// that integrates that power between readings. Clearly synthetic; for the demo and tests.
pub struct Simulated {
    seed: u64,
    load: String,
    gpus: Vec<(String, Decimal, Decimal)>,
    counters_mj: Vec<Decimal>,
    last: Option<Timestamp>,
}

/// A 64-bit mixing function (splitmix64's finaliser) for deterministic simulations.
pub(crate) fn mix(mut x: u64) -> u64 {
    // splitmix64 finaliser
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl Simulated {
    /// GPUs in index order from the configured groups.
    pub fn new(seed: u64, load: &str, groups: &[SimulatedGpus]) -> Self {
        let gpus: Vec<_> = groups
            .iter()
            .flat_map(|g| (0..g.count).map(|_| (g.model.clone(), g.idle_watts, g.max_watts)))
            .collect();
        let counters_mj = (0..gpus.len())
            .map(|i| Decimal::from(mix(seed ^ i as u64) % 1_000_000_000))
            .collect();
        Simulated {
            seed,
            load: load.to_owned(),
            gpus,
            counters_mj,
            last: None,
        }
    }

    /// Utilisation in whole percent of GPU `i` at `t`.
    pub fn utilization(&self, i: usize, t: Timestamp) -> u32 {
        let noise = (mix(self.seed ^ ((i as u64) << 40) ^ t.unix() as u64) % 100) as u32;
        match self.load.as_str() {
            "idle" => noise % 4,
            "inference" => {
                // A daily triangle peaking at 14:00 UTC, from 20 % to 80 %, plus noise.
                let hour = ((t.unix().rem_euclid(86_400)) / 3_600) as u32;
                let dist = hour.abs_diff(14).min(24 - hour.abs_diff(14));
                20 + 60 * (12 - dist) / 12 + noise % 15
            }
            _ => 90 + noise % 11,
        }
        .min(100)
    }
}

impl Collector for Simulated {
    fn read(&mut self, at: Timestamp) -> Result<Reading, CollectorError> {
        let dt = self.last.map_or(0, |l| l.seconds_until(at).max(0));
        self.last = Some(at);
        let mut r = Reading::default();
        for i in 0..self.gpus.len() {
            let (model, idle, max) = self.gpus[i].clone();
            let util = self.utilization(i, at);
            let watts = idle + (max - idle) * Decimal::from(util) / Decimal::from(100);
            self.counters_mj[i] += watts * Decimal::from(dt) * Decimal::from(1000);
            r.gpus.push(GpuSample {
                index: i as u32,
                uuid: format!(
                    "GPU-5137{:04x}-{:04x}-4000-8000-{:012x}",
                    self.seed % 0x1_0000,
                    i,
                    mix(self.seed ^ i as u64) & 0xffff_ffff_ffff
                ),
                model,
                utilization_pct: Some(Decimal::from(util)),
                power_watts: Some(watts.normalize()),
                energy_mj: Some(self.counters_mj[i].normalize()),
                compute_processes: None,
            });
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_ids_are_derived_or_mapped() {
        let mut m = BTreeMap::new();
        assert_eq!(model_id("NVIDIA H100 80GB HBM3", &m), "H100-80GB-HBM3");
        m.insert("NVIDIA H100 80GB HBM3".into(), "H100-SXM-80G".into());
        assert_eq!(model_id("NVIDIA H100 80GB HBM3", &m), "H100-SXM-80G");
        assert_eq!(model_id("  ", &m), "unknown-gpu");
    }

    /// The exit status is said once: `(exit status: 1)`, not `(exit status exit status: 1)`.
    #[test]
    fn a_failed_program_names_its_exit_status_once() {
        let e = NvidiaSmi {
            command: PathBuf::from("false"),
            models: BTreeMap::new(),
            processes: false,
        }
        .read(Timestamp::from_unix(1_800_000_000).unwrap())
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("false read no GPU (exit status: 1)"), "{e}");
        assert!(!e.contains("exit status exit status"), "{e}");
    }

    /// The nvml refusal gives the lean agent's build command, the one docs/AGENT.md gives.
    #[test]
    fn the_nvml_refusal_gives_the_agents_build_command() {
        let command = "cargo build --release -p gpuledger-agent --features nvml";
        assert!(
            NVML_NOT_BUILT.contains(&format!("`{command}`")),
            "{NVML_NOT_BUILT}"
        );
        let docs = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/AGENT.md"),
        )
        .unwrap();
        assert!(docs.contains(&format!("`{command}`")));
    }

    #[test]
    fn simulated_is_deterministic() {
        let g = [SimulatedGpus {
            model: "H100-SXM-80G".into(),
            count: 2,
            idle_watts: Decimal::from(70),
            max_watts: Decimal::from(700),
        }];
        let t = Timestamp::from_unix(1_800_000_000).unwrap();
        let mut a = Simulated::new(7, "training", &g);
        let mut b = Simulated::new(7, "training", &g);
        for s in [0, 10, 20] {
            assert_eq!(a.read(t.plus(s)).unwrap(), b.read(t.plus(s)).unwrap());
        }
        let r = a.read(t.plus(30)).unwrap();
        assert!(r
            .gpus
            .iter()
            .all(|g| g.utilization_pct.unwrap() >= Decimal::from(90)));
    }
}
