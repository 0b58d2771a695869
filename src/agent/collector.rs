//! Collectors: where GPU readings come from. One trait, two implementations chosen in
//! `agent.toml`: [`NvidiaSmi`] (a real node) and [`Simulated`] (demo, tests, benchmarks).
//!
//! The nvidia-smi output parser, [`parse_nvidia_smi`], is pure and tested on hand-written
//! outputs in `tests/fixtures/nvidia-smi/`.

use super::config::{CollectorConfig, SimulatedGpus};
use crate::core::ids::check_id;
use crate::core::time::Timestamp;
use rust_decimal::Decimal;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

/// The query the nvidia-smi collector runs.
pub const NVIDIA_SMI_QUERY: &str =
    "index,uuid,name,utilization.gpu,power.draw,total_energy_consumption";

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
    #[error("{command} read no GPU (exit status {status}): {detail}")]
    NoGpus {
        command: String,
        status: String,
        detail: String,
    },
}

/// A source of GPU readings.
pub trait Collector: Send {
    /// Reads every GPU at `at` (the wall-clock second the reading is taken).
    fn read(&mut self, at: Timestamp) -> Result<Reading, CollectorError>;
}

/// Builds the collector a configuration names.
pub fn from_config(c: &CollectorConfig) -> Box<dyn Collector> {
    match c {
        CollectorConfig::Simulated { seed, load, gpus } => {
            Box::new(Simulated::new(*seed, load, gpus))
        }
        CollectorConfig::NvidiaSmi { command, models } => Box::new(NvidiaSmi {
            command: command.clone(),
            models: models.clone(),
        }),
    }
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
        });
    }
    r.gpus.sort_by_key(|g| g.index);
    r
}

/// Runs nvidia-smi.
pub struct NvidiaSmi {
    /// The program.
    pub command: PathBuf,
    /// Name → model id.
    pub models: BTreeMap<String, String>,
}

impl Collector for NvidiaSmi {
    fn read(&mut self, _at: Timestamp) -> Result<Reading, CollectorError> {
        let command = self.command.display().to_string();
        let out = Command::new(&self.command)
            .arg(format!("--query-gpu={NVIDIA_SMI_QUERY}"))
            .arg("--format=csv,noheader,nounits")
            .output()
            .map_err(|source| CollectorError::Spawn {
                command: command.clone(),
                source,
            })?;
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push('\n');
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        let r = parse_nvidia_smi(&text, &self.models);
        if r.gpus.is_empty() {
            return Err(CollectorError::NoGpus {
                command,
                status: out.status.to_string(),
                detail: text.trim().chars().take(500).collect(),
            });
        }
        Ok(r)
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
