//! Attribution: from one interval's GPU readings, energy and leases to record bodies. Pure.
//!
//! Rules (docs/AGENT.md, "Attribution"):
//! - `gpu_usage`: one record per lease and GPU model per interval, `gpu_count` = the lease's
//!   share of the GPUs that are present (not lost) at the sample closing the interval, and
//!   `gpu_seconds` = `gpu_count × (end − start)` exactly. A lease with no present GPU gives no
//!   record.
//! - `energy`: the node's energy for the interval, in kWh at 9 decimal places. With a
//!   whole-node lease all of it goes to that tenant. Otherwise each present GPU weighs 1; a
//!   tenant's weight is the sum of its shares of present GPUs, and the weight no lease holds
//!   goes to an unattributed record (no `tenant`). The kWh is split by largest remainder in
//!   units of 10⁻⁹ kWh, so the parts sum exactly to the node's kWh; ties go to the earlier
//!   part (tenants in id order, the unattributed part last).

use super::collector::GpuSample;
use super::lease::{Lease, Scope};
use gpuledger_core::record::{Body, Energy, GpuUsage};
use gpuledger_core::time::Timestamp;
use rust_decimal::Decimal;
use std::collections::{BTreeMap, HashMap};

/// 10⁻⁹ kWh in millijoules: 1 kWh = 3.6 × 10⁹ mJ.
const MJ_PER_NANO_KWH: Decimal = Decimal::from_parts(36, 0, 0, false, 1);
/// Units of 10⁻⁹ in one.
const NANO: i128 = 1_000_000_000;

/// Turns per-GPU energy counters (or power, where the counter is missing) into kWh per
/// interval, carrying the sub-10⁻⁹-kWh remainder to the next interval so that the sum of the
/// reported intervals equals the measured energy to within one unit.
#[derive(Debug, Default)]
pub struct EnergyMeter {
    counters: HashMap<String, Decimal>,
    carry_mj: Decimal,
}

impl EnergyMeter {
    /// A meter with no baseline.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the baseline from the sample that opens the first interval (after start-up or a
    /// gap); what was used before it is not counted.
    pub fn baseline(&mut self, gpus: &[GpuSample]) {
        self.counters = gpus
            .iter()
            .filter_map(|g| Some((g.uuid.clone(), g.energy_mj?)))
            .collect();
        self.carry_mj = Decimal::ZERO;
    }

    /// Energy of the interval that `gpus` (sampled at its end) closes, `seconds` long, in kWh
    /// with at most 9 decimals; with notes on GPUs whose energy was estimated or unknown.
    ///
    /// Per GPU: the counter's increase when the counter is present at both ends and did not go
    /// backwards; otherwise power draw × seconds; otherwise nothing (and a note).
    pub fn interval_kwh(&mut self, gpus: &[GpuSample], seconds: i64) -> (Decimal, Vec<String>) {
        let mut total_mj = Decimal::ZERO;
        let mut notes = Vec::new();
        let mut next = HashMap::with_capacity(gpus.len());
        for g in gpus {
            let prev = self.counters.get(&g.uuid).copied();
            let delta = match (prev, g.energy_mj) {
                (Some(p), Some(now)) if now >= p => Some(now - p),
                _ => None,
            };
            let mj = match (delta, g.power_watts) {
                (Some(d), _) => d,
                (None, Some(w)) => {
                    notes.push(format!(
                        "GPU {} ({}): energy estimated from power draw",
                        g.index, g.uuid
                    ));
                    w * Decimal::from(seconds) * Decimal::from(1000)
                }
                (None, None) => {
                    notes.push(format!(
                        "GPU {} ({}): no energy counter and no power draw; its energy is not counted",
                        g.index, g.uuid
                    ));
                    Decimal::ZERO
                }
            };
            total_mj += mj;
            if let Some(c) = g.energy_mj {
                next.insert(g.uuid.clone(), c);
            }
        }
        self.counters = next;
        let with_carry = total_mj + self.carry_mj;
        let units = (with_carry / MJ_PER_NANO_KWH).floor();
        self.carry_mj = with_carry - units * MJ_PER_NANO_KWH;
        let units = units.mantissa() / 10i128.pow(units.scale());
        (Decimal::from_i128_with_scale(units, 9).normalize(), notes)
    }
}

/// One interval to attribute.
pub struct Interval<'a> {
    pub region: &'a str,
    pub node: &'a str,
    pub start: Timestamp,
    pub end: Timestamp,
    /// GPUs present at the sample closing the interval.
    pub gpus: &'a [GpuSample],
    /// As [`super::lease::parse`] validated them: a whole-node lease is the only lease, and
    /// no GPU is leased more than once over.
    pub leases: &'a [Lease],
    /// The node's energy over the interval, at most 9 decimals.
    pub kwh: Decimal,
}

/// The bodies for one interval, in a fixed order: `gpu_usage` by lease (file order) then
/// model, then `energy` by tenant id, then the unattributed part. Also notes on leased GPUs
/// that are not present.
pub fn attribute(iv: &Interval<'_>) -> (Vec<Body>, Vec<String>) {
    let mut a = Attribution::new(iv);
    for lease in iv.leases {
        a.add_lease(lease);
    }
    a.finish()
}

/// One interval's attribution as it is built, lease by lease.
struct Attribution<'a> {
    iv: &'a Interval<'a>,
    /// The GPUs present, by index.
    present: BTreeMap<u32, &'a GpuSample>,
    bodies: Vec<Body>,
    notes: Vec<String>,
    /// tenant → weight in units of 10⁻⁹ GPU (leases of [`Scope::Gpus`] with a GPU present).
    weights: BTreeMap<&'a str, i128>,
    /// The tenant of a whole-node lease, which takes all of the node's energy.
    whole_node_tenant: Option<&'a str>,
}

impl<'a> Attribution<'a> {
    fn new(iv: &'a Interval<'a>) -> Self {
        Attribution {
            iv,
            present: iv.gpus.iter().map(|g| (g.index, g)).collect(),
            bodies: Vec::new(),
            notes: Vec::new(),
            weights: BTreeMap::new(),
            whole_node_tenant: None,
        }
    }

    /// The `gpu_usage` bodies of one lease, one per GPU model it holds, with `gpu_seconds` =
    /// `gpu_count × (end − start)` exactly.
    fn add_lease(&mut self, lease: &'a Lease) {
        let iv = self.iv;
        let seconds = Decimal::from(iv.start.seconds_until(iv.end));
        for (model, count) in self.gpus_of(lease) {
            let count = count.normalize();
            self.bodies.push(Body::GpuUsage(GpuUsage {
                tenant: lease.tenant.clone(),
                lease: Some(lease.id.clone()),
                region: iv.region.to_owned(),
                node: iv.node.to_owned(),
                gpu_model: model.to_owned(),
                gpu_count: count,
                start: iv.start,
                end: iv.end,
                gpu_seconds: (count * seconds).normalize(),
            }));
        }
    }

    /// The present GPUs `lease` holds, by model (a GPU counted at the lease's share of it);
    /// adds the lease's weight to its tenant's, and a note for each of its GPUs not present.
    fn gpus_of(&mut self, lease: &'a Lease) -> BTreeMap<&'a str, Decimal> {
        let mut by_model: BTreeMap<&'a str, Decimal> = BTreeMap::new();
        match &lease.scope {
            Scope::WholeNode => {
                debug_assert_eq!(self.iv.leases.len(), 1, "a whole-node lease is alone");
                self.whole_node_tenant = Some(lease.tenant.as_str());
                for g in self.iv.gpus {
                    *by_model.entry(&g.model).or_default() += Decimal::ONE;
                }
            }
            Scope::Gpus(shares) => {
                for (idx, share) in shares {
                    match self.present.get(idx) {
                        Some(g) => {
                            *by_model.entry(&g.model).or_default() += *share;
                            *self.weights.entry(&lease.tenant).or_default() += units(*share);
                        }
                        None => self.notes.push(format!(
                            "lease {}: GPU {idx} is not present; not counted",
                            lease.id
                        )),
                    }
                }
            }
        }
        by_model
    }

    /// An `energy` body of this interval.
    fn energy(&self, tenant: Option<&str>, kwh: Decimal) -> Body {
        Body::Energy(Energy {
            tenant: tenant.map(str::to_owned),
            region: self.iv.region.to_owned(),
            node: self.iv.node.to_owned(),
            start: self.iv.start,
            end: self.iv.end,
            kwh: kwh.normalize(),
        })
    }

    /// Adds the `energy` bodies: all of it to a whole-node lease's tenant, else split by
    /// weight ([`Attribution::energy_parts`]) by largest remainder.
    fn finish(mut self) -> (Vec<Body>, Vec<String>) {
        if let Some(t) = self.whole_node_tenant {
            self.bodies.push(self.energy(Some(t), self.iv.kwh));
            return (self.bodies, self.notes);
        }
        let parts = self.energy_parts();
        let split = largest_remainder(
            units(self.iv.kwh),
            &parts.iter().map(|p| p.1).collect::<Vec<_>>(),
        );
        for ((tenant, _), u) in parts.iter().zip(split) {
            let body = self.energy(*tenant, Decimal::from_i128_with_scale(u, 9));
            self.bodies.push(body);
        }
        (self.bodies, self.notes)
    }

    /// The weights the energy is split by: each tenant's (in tenant id order), then the
    /// weight no lease holds, unattributed, when there is any; one unattributed part when
    /// nothing has weight (no GPU present).
    fn energy_parts(&self) -> Vec<(Option<&'a str>, i128)> {
        let total_weight = self.iv.gpus.len() as i128 * NANO;
        let leased: i128 = self.weights.values().sum();
        debug_assert!(
            leased <= total_weight,
            "no present GPU is leased more than once over"
        );
        let mut parts: Vec<(Option<&'a str>, i128)> =
            self.weights.iter().map(|(t, w)| (Some(*t), *w)).collect();
        if total_weight > leased {
            parts.push((None, total_weight - leased));
        }
        if parts.is_empty() {
            parts.push((None, 1));
        }
        parts
    }
}

/// A decimal with at most 9 decimals in units of 10⁻⁹.
fn units(d: Decimal) -> i128 {
    let d = d.round_dp(9);
    d.mantissa() * 10i128.pow(9 - d.scale())
}

/// GPUs that run compute processes (as far as the collector counted them) but that no lease
/// covers: `(index, processes)` in index order. Nobody is billed for them; the agent warns.
pub fn unleased_busy(gpus: &[GpuSample], leases: &[Lease]) -> Vec<(u32, u32)> {
    if leases.iter().any(|l| l.scope == Scope::WholeNode) {
        return Vec::new();
    }
    gpus.iter()
        .filter_map(|g| {
            let n = g.compute_processes.filter(|&n| n > 0)?;
            let leased = leases
                .iter()
                .any(|l| matches!(&l.scope, Scope::Gpus(m) if m.contains_key(&g.index)));
            (!leased).then_some((g.index, n))
        })
        .collect()
}

/// Splits `total` units in proportion to `weights` (all ≥ 0, sum > 0) by largest remainder:
/// each part gets ⌊total × w / Σw⌋, and the units left over go one each to the parts with the
/// largest remainders, the earlier part first on a tie. The parts sum exactly to `total`.
pub fn largest_remainder(total: i128, weights: &[i128]) -> Vec<i128> {
    let sum: i128 = weights.iter().sum();
    assert!(sum > 0 && total >= 0, "weights must sum above 0");
    let mut parts: Vec<i128> = weights.iter().map(|w| total * w / sum).collect();
    let mut order: Vec<(usize, i128)> = weights
        .iter()
        .enumerate()
        .map(|(i, w)| (i, total * w % sum))
        .collect();
    order.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let left = total - parts.iter().sum::<i128>();
    for (i, _) in order.iter().take(left as usize) {
        parts[*i] += 1;
    }
    debug_assert_eq!(parts.iter().sum::<i128>(), total);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn largest_remainder_sums_exactly() {
        assert_eq!(largest_remainder(10, &[1, 1, 1]), vec![4, 3, 3]);
        assert_eq!(largest_remainder(2, &[1, 1, 1]), vec![1, 1, 0]);
        assert_eq!(largest_remainder(0, &[5, 3]), vec![0, 0]);
        assert_eq!(largest_remainder(7, &[0, 1]), vec![0, 7]);
        let p = largest_remainder(1_000_000_007, &[333, 333, 334, 1]);
        assert_eq!(p.iter().sum::<i128>(), 1_000_000_007);
    }
}
