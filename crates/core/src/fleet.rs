//! The fleet rules (docs/PROTOCOL.md §6.7, fleet): a node key names only registered nodes, a
//! node is registered once and updated only to add capacity, and a record fits the node it
//! names as the log held it when the record was appended: the node's region, a GPU model (or
//! MIG profile) the node has, at most as many GPUs (instances) of it as the node has, and no
//! more energy than the node's GPUs can draw (a tenant's energy: no more than what its leases
//! of the node cover, under a lease of the node in force). Leases bind tenants to GPUs: a
//! lease covers GPUs of registered nodes without overbooking any (at no instant of its term
//! more of a GPU, or of a model's GPUs, than the node has, counting the node's other leases),
//! and usage is billed only under a lease that covers its node and model during its interval,
//! for at most as many GPUs as it covers. One function, [`check_fleet`], applied by the ledger
//! at ingest (to its cache of the registered nodes and leases) and by `verify-log` and the
//! bundle verifiers (to the nodes and leases rebuilt from the log, `admission::Registry`).

mod inventory;

pub use inventory::{FleetLog, Node, NodeAt};

use super::limits::{ENERGY_BOUND_MARGIN_PERCENT, GPU_UNITS, MAX_NODE_GPUS};
use super::record::{
    mig_slices_differ, Body, Energy, GpuUsage, LeaseRegistered, NodeGpu, NodeUpdated,
};
use super::rejection::{Reason, Rejection};
use rust_decimal::Decimal;

/// The most kWh `units` ([`GPU_UNITS`] of a GPU) of a node whose GPUs draw at most `watts` may
/// draw in `seconds`: GPUs × watts × seconds, plus [`ENERGY_BOUND_MARGIN_PERCENT`], in kWh, for
/// people (the division may round in the 28th digit; [`within_energy_bound`] decides without
/// dividing).
pub fn energy_bound_kwh(units: Decimal, watts: Decimal, seconds: i64) -> Decimal {
    let watt_seconds = units * watts * Decimal::from(seconds) / Decimal::from(GPU_UNITS);
    let margin = Decimal::from(100 + ENERGY_BOUND_MARGIN_PERCENT) / Decimal::from(100);
    watt_seconds * margin / Decimal::from(3_600_000)
}

/// Whether `kwh` in `seconds` is within what `units` ([`GPU_UNITS`] of a GPU) drawing at most
/// `watts` per GPU draw, exactly: kWh × 3,600,000 × 100 × 840 ≤ units × W × seconds × (100 +
/// margin), compared in integers of 10⁻¹⁸ (every operand has at most 9 decimals; kWh ≤
/// 100,000, W ≤ 5,000, units ≤ 64 × 840, seconds ≤ 86,400: both sides below 10³⁵ < 2¹²⁷), as
/// the Python and browser verifiers compare.
pub fn within_energy_bound(units: Decimal, watts: Decimal, seconds: i64, kwh: Decimal) -> bool {
    let nano = |d: Decimal| -> i128 {
        let d = d.round_dp(9);
        d.mantissa() * 10i128.pow(9 - d.scale())
    };
    let used = nano(kwh)
        .saturating_mul(3_600_000 * 100 * i128::from(GPU_UNITS))
        .saturating_mul(1_000_000_000);
    let allowed = nano(units)
        .saturating_mul(nano(watts))
        .saturating_mul(i128::from(seconds))
        .saturating_mul(i128::from(100 + ENERGY_BOUND_MARGIN_PERCENT));
    used <= allowed
}

/// How many units of GPU model `model` (whole GPUs, or MIG instances of `<model>/<profile>`)
/// `lease` covers on `node`: for each item listing GPUs, its `share` × the units of `model` of
/// each listed GPU (a partitioned GPU listed covers its instances); plus the `count` of items
/// of that model.
pub fn lease_covers(lease: &LeaseRegistered, node: &NodeAt, model: &str) -> Decimal {
    lease
        .nodes
        .iter()
        .filter(|n| n.node == node.name())
        .map(|n| match (&n.gpus, &n.gpu_model, n.count) {
            (Some(gpus), _, _) => {
                let units: u32 = gpus
                    .iter()
                    .filter_map(|i| node.gpu(*i))
                    .map(|g| g.units_of(model))
                    .sum();
                Decimal::from(units) * n.share.unwrap_or(Decimal::ONE)
            }
            (None, Some(m), Some(count)) if m == model => count,
            _ => Decimal::ZERO,
        })
        .sum()
}

/// How much of `node` `lease` covers, every model, in [`GPU_UNITS`] of a GPU (what its
/// tenant's energy on the node is bounded by): each listed GPU's `share` of the whole GPU, and
/// each count of a model × what one unit of it is ([`crate::record::NodeGpu::unit_share`]; the
/// same on every GPU of the node that has the model, as its partitioned GPUs of one model have
/// the same slices).
pub fn lease_units_on(lease: &LeaseRegistered, node: &NodeAt) -> Decimal {
    lease
        .nodes
        .iter()
        .filter(|n| n.node == node.name())
        .map(|n| match (&n.gpus, &n.gpu_model, n.count) {
            (Some(gpus), _, _) => {
                let listed = gpus.iter().filter(|i| node.gpu(**i).is_some()).count();
                Decimal::from(listed) * n.share.unwrap_or(Decimal::ONE) * Decimal::from(GPU_UNITS)
            }
            (None, Some(model), Some(count)) => {
                let unit = node.gpus().map(|g| g.unit_share(model)).max().unwrap_or(0);
                count * Decimal::from(unit)
            }
            _ => Decimal::ZERO,
        })
        .sum()
}

/// The fleet rules for the entry at `index` (`u64::MAX` for one not yet appended).
pub fn check_fleet(body: &Body, index: u64, fleet: &FleetLog) -> Result<(), Rejection> {
    let registered = |node: &str, field: &str| {
        fleet
            .node(node)
            .filter(|n| n.registered_at() < index)
            .map(|n| n.at(index))
            .ok_or_else(|| {
                Rejection::field(
                    Reason::UnknownNode,
                    field,
                    format!("{node} is not a registered node"),
                )
            })
    };
    let in_region = |node: &NodeAt, region: &str| {
        if node.region() == region {
            Ok(())
        } else {
            Err(Rejection::field(
                Reason::WrongRegion,
                "body.region",
                format!(
                    "is {region}, but node {} is registered in {}",
                    node.name(),
                    node.region()
                ),
            ))
        }
    };
    match body {
        Body::NodeRegistered(n) => {
            if let Some(at) = fleet
                .node(&n.node)
                .map(|n| n.registered_at())
                .filter(|at| *at < index)
            {
                return Err(Rejection::field(
                    Reason::AlreadyRegistered,
                    "body.node",
                    format!("{} is already registered (entry {at})", n.node),
                ));
            }
        }
        Body::NodeUpdated(u) => {
            let node = registered(&u.node, "body.node")?;
            let listed = |uuid: &str| fleet.node(&u.node).and_then(|n| n.uuid_listed(uuid, index));
            check_node_update(u, &node, listed)?;
        }
        Body::SignerKeyRegistered(r) => {
            for node in r.nodes.iter().flatten() {
                registered(node, "body.nodes")?;
            }
        }
        Body::GpuUsage(u) => {
            let node = registered(&u.node, "body.node")?;
            in_region(&node, &u.region)?;
            let has = node.units_of(&u.gpu_model);
            if has == 0 {
                return Err(Rejection::field(
                    Reason::UnknownGpuModel,
                    "body.gpu_model",
                    format!("node {} has no {} GPU", u.node, u.gpu_model),
                ));
            }
            if u.gpu_count > Decimal::from(has) {
                return Err(Rejection::field(
                    Reason::OverCapacity,
                    "body.gpu_count",
                    format!(
                        "is {}, but node {} has {has} {} GPUs",
                        u.gpu_count, u.node, u.gpu_model
                    ),
                ));
            }
            check_usage_lease(u, &node, index, fleet)?;
        }
        Body::LeaseRegistered(l) => {
            for (i, item) in l.nodes.iter().enumerate() {
                let node = registered(&item.node, &format!("body.nodes[{i}].node"))?;
                for g in item.gpus.iter().flatten() {
                    if node.gpu(*g).is_none() {
                        return Err(Rejection::field(
                            Reason::UnknownGpu,
                            &format!("body.nodes[{i}].gpus"),
                            format!("node {} has no GPU {g}", item.node),
                        ));
                    }
                }
                if let Some(model) = &item.gpu_model {
                    if node.units_of(model) == 0 {
                        return Err(Rejection::field(
                            Reason::UnknownGpuModel,
                            &format!("body.nodes[{i}].gpu_model"),
                            format!("node {} has no {model} GPU", item.node),
                        ));
                    }
                }
            }
            let mut nodes: Vec<&str> = l.nodes.iter().map(|n| n.node.as_str()).collect();
            nodes.sort_unstable();
            nodes.dedup();
            for name in nodes {
                let node = registered(name, "body.nodes")?;
                let others: Vec<&LeaseRegistered> = fleet
                    .leases_on(name)
                    .filter(|(o, at)| *at < index && o.lease != l.lease && o.term_overlaps(l))
                    .map(|(o, _)| o)
                    .collect();
                check_not_overbooked(l, &node, &others)?;
            }
        }
        Body::Energy(e) => {
            let node = registered(&e.node, "body.node")?;
            in_region(&node, &e.region)?;
            let seconds = e.start.seconds_until(e.end);
            let (units, whose) = match &e.tenant {
                None => (
                    Decimal::from(node.gpu_count() as u64 * u64::from(GPU_UNITS)),
                    format!("node {}'s {} GPUs", e.node, node.gpu_count()),
                ),
                Some(tenant) => {
                    let units = energy_lease_cover(e, tenant, &node, index, fleet)?;
                    let text = format!(
                        "the {} GPUs {tenant} leases of node {}",
                        (units / Decimal::from(GPU_UNITS)).round_dp(6).normalize(),
                        e.node
                    );
                    (units, text)
                }
            };
            let watts = node.max_watts_per_gpu();
            if !within_energy_bound(units, watts, seconds, e.kwh) {
                let bound = energy_bound_kwh(units, watts, seconds);
                return Err(Rejection::field(
                    Reason::EnergyOverBound,
                    "body.kwh",
                    format!(
                        "is {} kWh, above what {whose} × {watts} W draw in {seconds} s (+{ENERGY_BOUND_MARGIN_PERCENT} %): {} kWh",
                        e.kwh,
                        bound.round_dp(9).normalize()
                    ),
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

/// An update adds capacity only: each GPU it lists is either new to the node (an index it has
/// not, partitioned, if at all, into the slices of the node's partitioned GPUs of its model;
/// the node then has at most `MAX_NODE_GPUS`) or a replaced board (an index it has, the
/// same model and partition), under a UUID no entry of the node listed before (`listed`); a
/// power limit rises above the node's.
fn check_node_update(
    u: &NodeUpdated,
    node: &NodeAt,
    listed: impl Fn(&str) -> Option<u64>,
) -> Result<(), Rejection> {
    let mut added = 0;
    for (i, g) in u.gpus.iter().flatten().enumerate() {
        if let Some(at) = listed(&g.uuid) {
            return Err(Rejection::field(
                Reason::InvalidField,
                &format!("body.gpus[{i}].uuid"),
                format!(
                    "{} was listed for node {} already (entry {at})",
                    g.uuid,
                    node.name()
                ),
            ));
        }
        match node.gpu(g.index) {
            None => {
                let differs = |o: &&NodeGpu| {
                    o.model == g.model
                        && o.mig
                            .as_ref()
                            .zip(g.mig.as_ref())
                            .is_some_and(|(a, b)| a.slices != b.slices)
                };
                if let Some(other) = node.gpus().find(differs) {
                    return Err(mig_slices_differ(i, g, other));
                }
                added += 1
            }
            Some(had) if had.model != g.model || had.mig != g.mig => {
                return Err(Rejection::field(
                    Reason::InvalidField,
                    &format!("body.gpus[{i}].model"),
                    format!(
                        "GPU {} of node {} is a {}{}: a replaced board keeps its model and partition (add a new board under a new index)",
                        g.index,
                        node.name(),
                        had.model,
                        if had.mig.is_some() { " partitioned into MIG instances" } else { "" }
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    if node.gpu_count() + added > MAX_NODE_GPUS {
        return Err(Rejection::field(
            Reason::QuantityOutOfRange,
            "body.gpus",
            format!(
                "would give node {} {} GPUs; a node has at most {MAX_NODE_GPUS}",
                node.name(),
                node.gpu_count() + added
            ),
        ));
    }
    if let Some(w) = u.max_watts_per_gpu {
        let had = node.max_watts_per_gpu();
        if w <= had {
            return Err(Rejection::field(
                Reason::InvalidField,
                "body.max_watts_per_gpu",
                format!(
                    "is {w} W, not above node {}'s {had} W: a power limit only rises (a node that draws less is registered anew)",
                    node.name()
                ),
            ));
        }
    }
    Ok(())
}

/// What of `node` a tenant's `energy` record may draw for, in [`GPU_UNITS`] of a GPU: what the
/// tenant's leases that name the node (registered before `index`) and whose terms hold the
/// record's whole interval cover of the node, every model ([`lease_units_on`]). None name the
/// node: `lease_not_on_node`; none holds the interval: `outside_lease_term`. Leases never
/// overbook a node, so the tenants' bounds together stay within the node's.
fn energy_lease_cover(
    e: &Energy,
    tenant: &str,
    node: &NodeAt,
    index: u64,
    fleet: &FleetLog,
) -> Result<Decimal, Rejection> {
    let mut leases: Vec<&LeaseRegistered> = fleet
        .leases_on(&e.node)
        .filter(|(l, at)| *at < index && l.tenant == tenant)
        .map(|(l, _)| l)
        .collect();
    if leases.is_empty() {
        return Err(Rejection::field(
            Reason::LeaseNotOnNode,
            "body.tenant",
            format!(
                "{tenant} has no lease on node {}: its energy is billed only under a lease of the node",
                e.node
            ),
        ));
    }
    leases.retain(|l| l.term_holds(e.start, e.end));
    if leases.is_empty() {
        return Err(Rejection::field(
            Reason::OutsideLeaseTerm,
            "body.start",
            format!(
                "[{}, {}) is not within the term of any lease of {tenant} on node {}",
                e.start, e.end, e.node
            ),
        ));
    }
    Ok(leases.iter().map(|l| lease_units_on(l, node)).sum())
}

/// The lease rules of a usage record on `node`: it names a lease (registered earlier, to its
/// tenant: `admission::check_parties`) that covers the node's GPUs of its model, for its whole
/// interval, and at least `gpu_count` of them. The lease's records of one node and model are
/// one stream (§6.7, overlap), whose intervals never overlap, so at any instant at most one of
/// them counts against what the lease covers there: the per-instant rule is this per-record one.
fn check_usage_lease(
    u: &GpuUsage,
    node: &NodeAt,
    index: u64,
    fleet: &FleetLog,
) -> Result<(), Rejection> {
    let Some(name) = &u.lease else {
        return Err(Rejection::field(
            Reason::LeaseNotOnNode,
            "body.lease",
            format!(
                "is absent: usage on node {} is billed under a lease that covers it",
                u.node
            ),
        ));
    };
    // An unregistered lease, or another tenant's, is check_parties' refusal.
    let Some((lease, _)) = fleet.lease(name).filter(|(_, at)| *at < index) else {
        return Ok(());
    };
    let covered = lease_covers(lease, node, &u.gpu_model);
    if covered.is_zero() {
        return Err(Rejection::field(
            Reason::LeaseNotOnNode,
            "body.lease",
            format!("{name} covers no {} GPU of node {}", u.gpu_model, u.node),
        ));
    }
    if !lease.term_holds(u.start, u.end) {
        let to = lease.to.map_or("open-ended".to_owned(), |t| t.to_string());
        return Err(Rejection::field(
            Reason::OutsideLeaseTerm,
            if u.start < lease.from {
                "body.start"
            } else {
                "body.end"
            },
            format!(
                "[{}, {}) is not within the term of {name}, [{}, {to})",
                u.start, u.end, lease.from
            ),
        ));
    }
    if u.gpu_count > covered {
        return Err(Rejection::field(
            Reason::OverCapacity,
            "body.gpu_count",
            format!(
                "is {}, but {name} covers {} {} GPUs of node {}",
                u.gpu_count,
                covered.normalize(),
                u.gpu_model,
                u.node
            ),
        ));
    }
    Ok(())
}

/// Whether `lease`, with the node's `others` whose terms overlap its own, leases at no instant
/// of its term more of `node` than it has: of each GPU at most all of it (the shares of the
/// leases listing it), and of each model at most its units (the shares of listed GPUs' units
/// of that model, a partitioned GPU's instances included, plus the counts of that model). The
/// load changes only where a term starts or ends, so it is evaluated at the start of the
/// lease's term and at every other lease's start or end inside it: O(k²) for the node's k
/// overlapping leases, no scan of usage.
pub fn check_not_overbooked(
    lease: &LeaseRegistered,
    node: &NodeAt,
    others: &[&LeaseRegistered],
) -> Result<(), Rejection> {
    let mut instants = vec![lease.from];
    for o in others {
        for t in std::iter::once(o.from).chain(o.to) {
            if t > lease.from && lease.to.is_none_or(|to| t < to) {
                instants.push(t);
            }
        }
    }
    instants.sort_unstable();
    instants.dedup();
    for t in instants {
        let active = others
            .iter()
            .filter(|o| o.from <= t && o.to.is_none_or(|to| t < to))
            .copied()
            .chain(std::iter::once(lease));
        let mut per_gpu: std::collections::BTreeMap<u32, Decimal> = Default::default();
        let mut per_model: std::collections::BTreeMap<String, Decimal> = Default::default();
        for l in active {
            for item in l.nodes.iter().filter(|n| n.node == node.name()) {
                if let (Some(model), Some(count)) = (&item.gpu_model, item.count) {
                    *per_model.entry(model.clone()).or_default() += count;
                }
                for g in item.gpus.iter().flatten() {
                    let share = item.share.unwrap_or(Decimal::ONE);
                    *per_gpu.entry(*g).or_default() += share;
                    if let Some(gpu) = node.gpu(*g) {
                        for model in gpu.unit_models() {
                            let units = Decimal::from(gpu.units_of(&model));
                            *per_model.entry(model).or_default() += share * units;
                        }
                    }
                }
            }
        }
        if let Some((g, load)) = per_gpu.iter().find(|(_, load)| **load > Decimal::ONE) {
            return Err(Rejection::field(
                Reason::LeaseOverbooked,
                "body.nodes",
                format!(
                    "would lease {} of GPU {g} of node {} at {t}, counting its other leases",
                    load.normalize(),
                    node.name()
                ),
            ));
        }
        for (model, load) in per_model {
            let has = node.units_of(&model);
            if load > Decimal::from(has) {
                return Err(Rejection::field(
                    Reason::LeaseOverbooked,
                    "body.nodes",
                    format!(
                        "would lease {} {model} GPUs of node {} at {t}, which has {has}, counting its other leases",
                        load.normalize(),
                        node.name()
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Energy, GpuUsage, LeaseNode, NodeGpu, NodeRegistered};
    use crate::time::Timestamp;
    use std::collections::HashMap;

    /// The fleet the entries make: the nodes, then the leases, each at its index.
    fn fleet_of(
        nodes: HashMap<String, (NodeRegistered, u64)>,
        leases: HashMap<String, (LeaseRegistered, u64)>,
    ) -> FleetLog {
        let mut entries: Vec<(u64, Body)> = nodes
            .into_values()
            .map(|(n, at)| (at, Body::NodeRegistered(n)))
            .chain(
                leases
                    .into_values()
                    .map(|(l, at)| (at, Body::LeaseRegistered(l))),
            )
            .collect();
        entries.sort_by_key(|(at, _)| *at);
        let mut fleet = FleetLog::default();
        for (at, body) in entries {
            fleet.apply(at, &body);
        }
        fleet
    }

    /// Lease `id` of acme over `items` for [from, to) (seconds after [`t`]'s origin).
    fn lease(id: &str, from: i64, to: Option<i64>, items: Vec<LeaseNode>) -> LeaseRegistered {
        LeaseRegistered {
            lease: id.into(),
            tenant: "acme".into(),
            class: crate::rating::LeaseClass::OnDemand,
            from: t(from),
            to: to.map(t),
            nodes: items,
        }
    }

    /// Whole GPUs (or a share of each) of a node.
    fn gpus(node: &str, gpus: &[u32], share: Option<&str>) -> LeaseNode {
        LeaseNode {
            node: node.into(),
            gpus: Some(gpus.to_vec()),
            share: share.map(|s| s.parse().unwrap()),
            gpu_model: None,
            count: None,
        }
    }

    /// Up to `count` GPUs of `model` of a node.
    fn count(node: &str, model: &str, count: &str) -> LeaseNode {
        LeaseNode {
            node: node.into(),
            gpus: None,
            share: None,
            gpu_model: Some(model.into()),
            count: Some(count.parse().unwrap()),
        }
    }

    fn n1() -> NodeRegistered {
        let mut gpus: Vec<NodeGpu> = (0..8)
            .map(|i| NodeGpu {
                index: i,
                uuid: format!("GPU-{i}"),
                model: "H100".into(),
                mig: None,
            })
            .collect();
        gpus.push(NodeGpu {
            index: 8,
            uuid: "GPU-8".into(),
            model: "L40S".into(),
            mig: None,
        });
        NodeRegistered {
            node: "n1".into(),
            region: "west".into(),
            hub: None,
            gpus,
            max_watts_per_gpu: Decimal::from(700),
        }
    }

    fn t(s: i64) -> Timestamp {
        Timestamp::from_unix(1_800_000_000 + s).unwrap()
    }

    fn usage(node: &str, region: &str, model: &str, count: &str) -> Body {
        let gpu_count: Decimal = count.parse().unwrap();
        Body::GpuUsage(GpuUsage {
            tenant: "acme".into(),
            lease: Some("L".into()),
            region: region.into(),
            node: node.into(),
            gpu_model: model.into(),
            gpu_count,
            start: t(0),
            end: t(3_600),
            gpu_seconds: gpu_count * Decimal::from(3_600),
        })
    }

    fn energy(kwh: &str) -> Body {
        energy_on("n1", 3_600, kwh)
    }

    fn energy_on(node: &str, seconds: i64, kwh: &str) -> Body {
        Body::Energy(Energy {
            tenant: None,
            region: "west".into(),
            node: node.into(),
            start: t(0),
            end: t(seconds),
            kwh: kwh.parse().unwrap(),
        })
    }

    /// The attack of issue #27 and the edges: a record fits its node or is refused with its own
    /// reason.
    #[test]
    fn a_record_fits_its_node() {
        let tiny = NodeRegistered {
            node: "tiny".into(),
            gpus: vec![NodeGpu {
                index: 0,
                uuid: "GPU-t".into(),
                model: "H100".into(),
                mig: None,
            }],
            max_watts_per_gpu: Decimal::ONE,
            ..n1()
        };
        let all_of_n1 = lease(
            "L",
            0,
            None,
            vec![gpus("n1", &[0, 1, 2, 3, 4, 5, 6, 7, 8], None)],
        );
        let fleet = fleet_of(
            HashMap::from([("n1".to_owned(), (n1(), 3)), ("tiny".to_owned(), (tiny, 3))]),
            HashMap::from([("L".to_owned(), (all_of_n1, 4))]),
        );
        // 9 GPUs × 700 W × 3600 s = 22,680,000 J = 6.3 kWh, + 5 % = 6.615 kWh.
        assert_eq!(
            energy_bound_kwh(Decimal::from(9 * GPU_UNITS), Decimal::from(700), 3_600),
            "6.615".parse::<Decimal>().unwrap()
        );
        for (name, body, want) in [
            ("all 8 H100s", usage("n1", "west", "H100", "8"), None),
            ("the L40S", usage("n1", "west", "L40S", "1"), None),
            ("half a GPU", usage("n1", "west", "L40S", "0.5"), None),
            (
                "1,024 GPUs on an 8-GPU node",
                usage("n1", "west", "H100", "1024"),
                Some((Reason::OverCapacity, "body.gpu_count")),
            ),
            (
                "one GPU more",
                usage("n1", "west", "H100", "8.000001"),
                Some((Reason::OverCapacity, "body.gpu_count")),
            ),
            (
                "a model the node lacks",
                usage("n1", "west", "NO-PRICE", "1"),
                Some((Reason::UnknownGpuModel, "body.gpu_model")),
            ),
            (
                "an unregistered node",
                usage("n9", "west", "H100", "1"),
                Some((Reason::UnknownNode, "body.node")),
            ),
            ("energy at the bound", energy("6.615"), None),
            (
                "a bound that is no finite decimal: 1 GPU-second at 1 W",
                energy_on("tiny", 1, "0.000000291"),
                None,
            ),
            (
                "a billionth of a kWh above it",
                energy_on("tiny", 1, "0.000000292"),
                Some((Reason::EnergyOverBound, "body.kwh")),
            ),
            (
                "energy above it",
                energy("6.615001"),
                Some((Reason::EnergyOverBound, "body.kwh")),
            ),
        ] {
            let got = check_fleet(&body, 10, &fleet)
                .err()
                .map(|r| (r.reason, r.field.unwrap_or_default()));
            assert_eq!(got, want.map(|(r, f)| (r, f.to_owned())), "{name}");
        }
        // A node registered after the record does not count; registered twice is refused.
        let r = check_fleet(&usage("n1", "west", "H100", "1"), 2, &fleet).unwrap_err();
        assert_eq!(r.reason, Reason::UnknownNode);
        let r = check_fleet(&Body::NodeRegistered(n1()), 10, &fleet).unwrap_err();
        assert_eq!(r.reason, Reason::AlreadyRegistered);
        assert!(check_fleet(&Body::NodeRegistered(n1()), 3, &fleet).is_ok());
        // A node key names registered nodes only.
        let key = |nodes: &[&str]| {
            Body::SignerKeyRegistered(crate::record::SignerKeyRegistered {
                signer: "n1".into(),
                role: crate::record::Role::Node,
                key_id: "k".into(),
                public_key: String::new(),
                nodes: Some(nodes.iter().map(|n| n.to_string()).collect()),
                regions: vec!["west".into()],
            })
        };
        assert!(check_fleet(&key(&["n1"]), 10, &fleet).is_ok());
        let r = check_fleet(&key(&["n1", "n2"]), 10, &fleet).unwrap_err();
        assert_eq!(
            (r.reason, r.field.as_deref()),
            (Reason::UnknownNode, Some("body.nodes"))
        );
    }

    fn n2() -> NodeRegistered {
        NodeRegistered {
            node: "n2".into(),
            ..n1()
        }
    }

    fn usage_under(
        lease: Option<&str>,
        node: &str,
        model: &str,
        count: &str,
        from: i64,
        to: i64,
    ) -> Body {
        let gpu_count: Decimal = count.parse().unwrap();
        Body::GpuUsage(GpuUsage {
            tenant: "acme".into(),
            lease: lease.map(str::to_owned),
            region: "west".into(),
            node: node.into(),
            gpu_model: model.into(),
            gpu_count,
            start: t(from),
            end: t(to),
            gpu_seconds: gpu_count * Decimal::from(to - from),
        })
    }

    fn tenant_energy(tenant: &str, node: &str, from: i64, to: i64, kwh: &str) -> Body {
        Body::Energy(Energy {
            tenant: Some(tenant.into()),
            region: "west".into(),
            node: node.into(),
            start: t(from),
            end: t(to),
            kwh: kwh.parse().unwrap(),
        })
    }

    /// A node key bills a tenant energy only under the tenant's leases of the node, for what
    /// they cover: not every tenant the node's whole draw.
    #[test]
    fn a_tenants_energy_is_bounded_by_its_leases() {
        let of = |tenant: &str, l: LeaseRegistered| LeaseRegistered {
            tenant: tenant.into(),
            ..l
        };
        let fleet = fleet_of(
            HashMap::from([("n1".to_owned(), (n1(), 1)), ("n2".to_owned(), (n2(), 2))]),
            HashMap::from([
                // acme: GPUs 0-3 of n1, open-ended, and half of GPUs 4 and 5 for 2 h.
                (
                    "L".to_owned(),
                    (
                        lease("L", 0, None, vec![gpus("n1", &[0, 1, 2, 3], None)]),
                        4,
                    ),
                ),
                (
                    "S".to_owned(),
                    (
                        lease("S", 0, Some(7_200), vec![gpus("n1", &[4, 5], Some("0.5"))]),
                        5,
                    ),
                ),
                // globex: any 2 H100s of n1; beta: the L40S from 1 h on.
                (
                    "G".to_owned(),
                    (
                        of(
                            "globex",
                            lease("G", 0, None, vec![count("n1", "H100", "2")]),
                        ),
                        6,
                    ),
                ),
                (
                    "B".to_owned(),
                    (
                        of(
                            "beta",
                            lease("B", 3_600, None, vec![gpus("n1", &[8], None)]),
                        ),
                        7,
                    ),
                ),
            ]),
        );
        let verdict = |body: &Body, index: u64| {
            check_fleet(body, index, &fleet)
                .err()
                .map(|r| (r.reason, r.field.unwrap_or_default()))
        };
        let refused = |r: Reason, f: &str| Some((r, f.to_owned()));
        // acme holds 4 + 2 × 0.5 = 5 GPUs for the first hour: 5 × 700 W × 3600 s + 5 % = 3.675 kWh.
        assert_eq!(
            energy_bound_kwh(Decimal::from(5 * GPU_UNITS), Decimal::from(700), 3_600),
            "3.675".parse::<Decimal>().unwrap()
        );
        for (name, body, index, want) in [
            (
                "acme at its bound",
                tenant_energy("acme", "n1", 0, 3_600, "3.675"),
                10,
                None,
            ),
            (
                "acme a billionth above",
                tenant_energy("acme", "n1", 0, 3_600, "3.675000001"),
                10,
                refused(Reason::EnergyOverBound, "body.kwh"),
            ),
            (
                "the node's whole draw billed to acme",
                tenant_energy("acme", "n1", 0, 3_600, "6.615"),
                10,
                refused(Reason::EnergyOverBound, "body.kwh"),
            ),
            (
                // The slices end at 2 h: across that end only GPUs 0-3 hold, 4 × 700 W × 300 s + 5 %.
                "a lease ending inside the interval does not count",
                tenant_energy("acme", "n1", 7_000, 7_300, "0.245"),
                10,
                None,
            ),
            (
                "above the lease that holds",
                tenant_energy("acme", "n1", 7_000, 7_300, "0.245000001"),
                10,
                refused(Reason::EnergyOverBound, "body.kwh"),
            ),
            (
                "globex's 2 counted H100s",
                tenant_energy("globex", "n1", 0, 3_600, "1.47"),
                10,
                None,
            ),
            (
                "globex above them",
                tenant_energy("globex", "n1", 0, 3_600, "1.470000001"),
                10,
                refused(Reason::EnergyOverBound, "body.kwh"),
            ),
            (
                "a tenant with no lease on the node",
                tenant_energy("nobody", "n1", 0, 3_600, "0.001"),
                10,
                refused(Reason::LeaseNotOnNode, "body.tenant"),
            ),
            (
                "acme on a node it does not lease",
                tenant_energy("acme", "n2", 0, 3_600, "0.001"),
                10,
                refused(Reason::LeaseNotOnNode, "body.tenant"),
            ),
            (
                "beta before its term",
                tenant_energy("beta", "n1", 3_000, 3_700, "0.001"),
                10,
                refused(Reason::OutsideLeaseTerm, "body.start"),
            ),
            (
                "beta within it",
                tenant_energy("beta", "n1", 3_600, 7_200, "0.735"),
                10,
                None,
            ),
            (
                "a lease registered after the record",
                tenant_energy("beta", "n1", 3_600, 7_200, "0.001"),
                7,
                refused(Reason::LeaseNotOnNode, "body.tenant"),
            ),
            ("no tenant: the node's bound", energy("6.615"), 10, None),
        ] {
            assert_eq!(verdict(&body, index), want, "{name}");
        }
    }

    /// Issue #27, leases: usage is billed only under a lease that covers its node, model and
    /// interval, for at most what it covers; and leases never overbook a node, at any instant.
    #[test]
    fn leases_bind_usage_to_gpus_and_never_overbook() {
        let fleet = fleet_of(
            HashMap::from([("n1".to_owned(), (n1(), 1)), ("n2".to_owned(), (n2(), 2))]),
            HashMap::from([
                // GPUs 0-3 of n1, open-ended.
                (
                    "L".to_owned(),
                    (
                        lease("L", 0, None, vec![gpus("n1", &[0, 1, 2, 3], None)]),
                        4,
                    ),
                ),
                // Half of GPUs 4 and 5 of n1 (MIG or fractional slices), for 2 h.
                (
                    "S".to_owned(),
                    (
                        lease("S", 0, Some(7_200), vec![gpus("n1", &[4, 5], Some("0.5"))]),
                        5,
                    ),
                ),
                // Any 4 H100s of n2 for [1 h, 3 h).
                (
                    "P".to_owned(),
                    (
                        lease("P", 3_600, Some(10_800), vec![count("n2", "H100", "4")]),
                        6,
                    ),
                ),
            ]),
        );
        let verdict = |body: &Body| {
            check_fleet(body, 10, &fleet)
                .err()
                .map(|r| (r.reason, r.field.unwrap_or_default()))
        };
        let refused = |r: Reason, f: &str| Some((r, f.to_owned()));
        for (name, body, want) in [
            (
                "the lease's 4 GPUs",
                usage_under(Some("L"), "n1", "H100", "4", 0, 3_600),
                None,
            ),
            (
                "one GPU more than the lease",
                usage_under(Some("L"), "n1", "H100", "4.000001", 0, 3_600),
                refused(Reason::OverCapacity, "body.gpu_count"),
            ),
            (
                "no lease",
                usage_under(None, "n1", "H100", "1", 0, 3_600),
                refused(Reason::LeaseNotOnNode, "body.lease"),
            ),
            (
                "a model the lease lacks on the node",
                usage_under(Some("L"), "n1", "L40S", "1", 0, 3_600),
                refused(Reason::LeaseNotOnNode, "body.lease"),
            ),
            (
                "another node",
                usage_under(Some("L"), "n2", "H100", "1", 0, 3_600),
                refused(Reason::LeaseNotOnNode, "body.lease"),
            ),
            (
                "two half GPUs make one",
                usage_under(Some("S"), "n1", "H100", "1", 0, 3_600),
                None,
            ),
            (
                "more than the halves",
                usage_under(Some("S"), "n1", "H100", "1.5", 0, 3_600),
                refused(Reason::OverCapacity, "body.gpu_count"),
            ),
            (
                "after the slices' term",
                usage_under(Some("S"), "n1", "H100", "1", 7_000, 7_201),
                refused(Reason::OutsideLeaseTerm, "body.end"),
            ),
            (
                "any 4 of n2",
                usage_under(Some("P"), "n2", "H100", "4", 3_600, 7_200),
                None,
            ),
            (
                "up to the term's end",
                usage_under(Some("P"), "n2", "H100", "4", 7_200, 10_800),
                None,
            ),
            (
                "before the term",
                usage_under(Some("P"), "n2", "H100", "1", 3_599, 4_000),
                refused(Reason::OutsideLeaseTerm, "body.start"),
            ),
            (
                "past the term",
                usage_under(Some("P"), "n2", "H100", "1", 10_000, 10_801),
                refused(Reason::OutsideLeaseTerm, "body.end"),
            ),
            // The node's own bound comes first: 1,024 GPUs on a 9-GPU node.
            (
                "1,024 GPUs",
                usage_under(Some("L"), "n1", "H100", "1024", 0, 3_600),
                refused(Reason::OverCapacity, "body.gpu_count"),
            ),
        ] {
            assert_eq!(verdict(&body), want, "{name}");
        }
        let register = |l: LeaseRegistered| Body::LeaseRegistered(l);
        for (name, body, want) in [
            (
                "the free GPUs 6 and 7",
                register(lease("F", 0, None, vec![gpus("n1", &[6, 7], None)])),
                None,
            ),
            (
                "a GPU leased whole already",
                register(lease("F", 0, None, vec![gpus("n1", &[3], None)])),
                refused(Reason::LeaseOverbooked, "body.nodes"),
            ),
            (
                "the other half of a sliced GPU",
                register(lease("F", 0, None, vec![gpus("n1", &[4], Some("0.5"))])),
                None,
            ),
            (
                "more than the other half",
                register(lease(
                    "F",
                    0,
                    None,
                    vec![gpus("n1", &[4], Some("0.500001"))],
                )),
                refused(Reason::LeaseOverbooked, "body.nodes"),
            ),
            (
                "more than half, from the slices' end",
                register(lease("F", 7_200, None, vec![gpus("n1", &[4], Some("0.6"))])),
                None,
            ),
            (
                "more than half, a second before it",
                register(lease("F", 7_199, None, vec![gpus("n1", &[4], Some("0.6"))])),
                refused(Reason::LeaseOverbooked, "body.nodes"),
            ),
            // n1's H100s: 4 (L) + 2 × 0.5 (S) leased; 3 more fill it, 4 overbook it until S ends.
            (
                "exactly full by count",
                register(lease("F", 0, None, vec![count("n1", "H100", "3")])),
                None,
            ),
            (
                "one GPU more by count",
                register(lease("F", 0, None, vec![count("n1", "H100", "4")])),
                refused(Reason::LeaseOverbooked, "body.nodes"),
            ),
            (
                "one more, once the slices end",
                register(lease("F", 7_200, None, vec![count("n1", "H100", "4")])),
                None,
            ),
            // n2: P holds 4 of 8 during [1 h, 3 h).
            (
                "5 ending where P starts",
                register(lease("F", 0, Some(3_600), vec![count("n2", "H100", "5")])),
                None,
            ),
            (
                "5 overlapping P by a second",
                register(lease("F", 0, Some(3_601), vec![count("n2", "H100", "5")])),
                refused(Reason::LeaseOverbooked, "body.nodes"),
            ),
            (
                "5 starting inside P",
                register(lease("F", 10_799, None, vec![count("n2", "H100", "5")])),
                refused(Reason::LeaseOverbooked, "body.nodes"),
            ),
            (
                "5 starting where P ends",
                register(lease("F", 10_800, None, vec![count("n2", "H100", "5")])),
                None,
            ),
            (
                "9 of an 8-H100 node on its own",
                register(lease("F", 20_000, None, vec![count("n2", "H100", "9")])),
                refused(Reason::LeaseOverbooked, "body.nodes"),
            ),
            (
                "a GPU the node lacks",
                register(lease("F", 0, None, vec![gpus("n1", &[9], None)])),
                refused(Reason::UnknownGpu, "body.nodes[0].gpus"),
            ),
            (
                "a model the node lacks",
                register(lease("F", 0, None, vec![count("n1", "A100", "1")])),
                refused(Reason::UnknownGpuModel, "body.nodes[0].gpu_model"),
            ),
            (
                "an unregistered node",
                register(lease("F", 0, None, vec![count("n9", "H100", "1")])),
                refused(Reason::UnknownNode, "body.nodes[0].node"),
            ),
        ] {
            assert_eq!(verdict(&body), want, "{name}");
        }
        // A lease registered after the record does not count for it.
        let r = check_fleet(
            &usage_under(Some("P"), "n2", "H100", "1", 3_600, 4_000),
            6,
            &fleet,
        );
        assert!(r.is_ok(), "left to the parties rule (unknown_lease)");
    }

    fn update(node: &str, gpus: Vec<NodeGpu>, watts: Option<&str>) -> Body {
        Body::NodeUpdated(NodeUpdated {
            node: node.into(),
            gpus: (!gpus.is_empty()).then_some(gpus),
            max_watts_per_gpu: watts.map(|w| w.parse().unwrap()),
        })
    }

    fn whole(index: u32, uuid: &str, model: &str) -> NodeGpu {
        NodeGpu {
            index,
            uuid: uuid.into(),
            model: model.into(),
            mig: None,
        }
    }

    fn partitioned(index: u32, slices: u32, profiles: &[(&str, u32)]) -> NodeGpu {
        NodeGpu {
            mig: Some(crate::record::MigLayout {
                slices,
                instances: profiles
                    .iter()
                    .map(|(p, c)| crate::record::MigInstances {
                        profile: (*p).into(),
                        count: *c,
                    })
                    .collect(),
            }),
            ..whole(index, &format!("GPU-m{index}"), "H100")
        }
    }

    fn verdict(body: &Body, index: u64, fleet: &FleetLog) -> Option<(Reason, String)> {
        check_fleet(body, index, fleet)
            .err()
            .map(|r| (r.reason, r.field.unwrap_or_default()))
    }

    fn refused(r: Reason, f: &str) -> Option<(Reason, String)> {
        Some((r, f.to_owned()))
    }

    /// A node's update adds capacity for the records appended after it, never before: a
    /// record is judged by the node as the entries before it made it.
    #[test]
    fn a_record_is_judged_by_its_node_as_of_its_index() {
        let mut fleet = fleet_of(
            HashMap::from([("n1".to_owned(), (n1(), 1))]),
            HashMap::from([(
                "L".to_owned(),
                (lease("L", 0, None, vec![count("n1", "H100", "8")]), 2),
            )]),
        );
        // At 10: GPU 9, an A100, and 1400 W; at 20, GPU 3 replaced by another H100.
        fleet.apply(
            10,
            &update("n1", vec![whole(9, "GPU-9", "A100")], Some("1400")),
        );
        fleet.apply(20, &update("n1", vec![whole(3, "GPU-3b", "H100")], None));
        let a100 = usage_under(Some("L"), "n1", "A100", "1", 0, 3_600);
        assert_eq!(
            verdict(&a100, 5, &fleet),
            refused(Reason::UnknownGpuModel, "body.gpu_model"),
            "before the update that adds it"
        );
        // After it, the A100 is the node's, but lease L covers none.
        assert_eq!(
            verdict(&a100, 11, &fleet),
            refused(Reason::LeaseNotOnNode, "body.lease")
        );
        // The node's 9 GPUs × 700 W (before) or 10 × 1400 W (after) for an hour, +5 %.
        let before = energy_bound_kwh(Decimal::from(9 * GPU_UNITS), Decimal::from(700), 3_600);
        let after = energy_bound_kwh(Decimal::from(10 * GPU_UNITS), Decimal::from(1_400), 3_600);
        assert_eq!((before, after), (dec("6.615"), dec("14.7")));
        let e = energy("14.7");
        assert_eq!(
            verdict(&e, 10, &fleet),
            refused(Reason::EnergyOverBound, "body.kwh"),
            "at the update's own index, it is not in force yet"
        );
        assert_eq!(verdict(&e, 11, &fleet), None);
        assert_eq!(verdict(&energy("6.615"), 5, &fleet), None);
        // A lease may list GPU 9 only after it was added.
        let l9 = Body::LeaseRegistered(lease("F", 0, None, vec![gpus("n1", &[9], None)]));
        assert_eq!(
            verdict(&l9, 9, &fleet),
            refused(Reason::UnknownGpu, "body.nodes[0].gpus")
        );
        assert_eq!(verdict(&l9, 11, &fleet), None);
        // What the fleet pages show: GPU 3's new UUID, GPU 9 added at 10, 1400 W.
        let node = fleet.node("n1").unwrap();
        let gpus = node.current_gpus();
        assert_eq!(
            (gpus[3].0.uuid.as_str(), gpus[9].1, gpus.len()),
            ("GPU-3b", 10, 10)
        );
        assert_eq!(node.at(u64::MAX).max_watts_per_gpu(), dec("1400"));
        assert_eq!(node.at(10).max_watts_per_gpu(), dec("700"));
        // Two reads of the log merged in either order keep the fresher node (the ingest
        // cache merges reads of concurrent batches).
        let older = fleet_of(
            HashMap::from([("n1".to_owned(), (n1(), 1))]),
            HashMap::new(),
        );
        for order in [[fleet.clone(), older.clone()], [older, fleet.clone()]] {
            let mut cache = FleetLog::default();
            for read in order {
                cache.merge(read);
            }
            assert_eq!(cache.node("n1").unwrap().at(u64::MAX).gpu_count(), 10);
        }
    }

    /// `node_updated` only adds capacity: new GPUs, a replaced board (same model and
    /// partition, a UUID the node never listed), a higher power limit.
    #[test]
    fn node_updates_only_add_capacity() {
        let mut fleet = fleet_of(
            HashMap::from([("n1".to_owned(), (n1(), 1))]),
            HashMap::new(),
        );
        fleet.apply(
            5,
            &update("n1", vec![partitioned(20, 7, &[("1g.10gb", 7)])], None),
        );
        let at = |body: Body| verdict(&body, 10, &fleet);
        for (name, body, want) in [
            (
                "a new GPU",
                update("n1", vec![whole(10, "GPU-10", "H100")], None),
                None,
            ),
            (
                "a replaced board",
                update("n1", vec![whole(2, "GPU-2b", "H100")], None),
                None,
            ),
            (
                "a higher limit",
                update("n1", Vec::new(), Some("701")),
                None,
            ),
            (
                "an unregistered node",
                update("n9", vec![whole(10, "GPU-10", "H100")], None),
                refused(Reason::UnknownNode, "body.node"),
            ),
            (
                "a UUID the node has",
                update("n1", vec![whole(10, "GPU-1", "H100")], None),
                refused(Reason::InvalidField, "body.gpus[0].uuid"),
            ),
            (
                "a replaced board of another model",
                update("n1", vec![whole(2, "GPU-2b", "A100")], None),
                refused(Reason::InvalidField, "body.gpus[0].model"),
            ),
            (
                "a whole GPU replaced by a partitioned one",
                update("n1", vec![partitioned(2, 7, &[("7g.80gb", 1)])], None),
                refused(Reason::InvalidField, "body.gpus[0].model"),
            ),
            (
                "a new H100 of other slices than the node's partitioned H100",
                update("n1", vec![partitioned(21, 4, &[("1g.10gb", 4)])], None),
                refused(Reason::InvalidField, "body.gpus[0].mig.slices"),
            ),
            (
                "one of the same slices",
                update("n1", vec![partitioned(21, 7, &[("3g.40gb", 2)])], None),
                None,
            ),
            (
                "65 GPUs",
                update(
                    "n1",
                    (30..85)
                        .map(|i| whole(i, &format!("GPU-{i}"), "H100"))
                        .collect(),
                    None,
                ),
                refused(Reason::QuantityOutOfRange, "body.gpus"),
            ),
            (
                "exactly 64",
                update(
                    "n1",
                    (30..84)
                        .map(|i| whole(i, &format!("GPU-{i}"), "H100"))
                        .collect(),
                    None,
                ),
                None,
            ),
            (
                "the same limit",
                update("n1", Vec::new(), Some("700")),
                refused(Reason::InvalidField, "body.max_watts_per_gpu"),
            ),
        ] {
            assert_eq!(at(body), want, "{name}");
        }
        // A replaced board's old UUID never comes back.
        fleet.apply(11, &update("n1", vec![whole(2, "GPU-2b", "H100")], None));
        assert_eq!(
            verdict(
                &update("n1", vec![whole(2, "GPU-2", "H100")], None),
                12,
                &fleet
            ),
            refused(Reason::InvalidField, "body.gpus[0].uuid")
        );
        assert_eq!(fleet.node("n1").unwrap().at(12).gpu_count(), 10);
    }

    /// MIG instances are units of `<model>/<profile>`: usage, leases, overbooking and the
    /// energy bound count them, and a partitioned GPU is no unit of its whole model.
    #[test]
    fn mig_instances_are_metered_as_their_profile() {
        let mut node = n1();
        // GPU 9: 2 × 3g.40gb + 1 × 1g.10gb (7 of 7 slices); GPU 10: 7 × 1g.10gb.
        node.gpus
            .push(partitioned(9, 7, &[("1g.10gb", 1), ("3g.40gb", 2)]));
        node.gpus.push(partitioned(10, 7, &[("1g.10gb", 7)]));
        let fleet = fleet_of(
            HashMap::from([("n1".to_owned(), (node, 1))]),
            HashMap::from([
                // L lists GPU 10 whole: its 7 instances; C counts 2 of the 3g.40gb.
                (
                    "L".to_owned(),
                    (lease("L", 0, None, vec![gpus("n1", &[10], None)]), 2),
                ),
                (
                    "C".to_owned(),
                    (
                        lease("C", 0, None, vec![count("n1", "H100/3g.40gb", "2")]),
                        3,
                    ),
                ),
            ]),
        );
        let n = fleet.node("n1").unwrap().at(10);
        assert_eq!(
            (
                n.units_of("H100"),
                n.units_of("H100/1g.10gb"),
                n.units_of("H100/3g.40gb")
            ),
            (8, 8, 2)
        );
        let v = |b: &Body| verdict(b, 10, &fleet);
        for (name, body, want) in [
            (
                "7 instances of the listed GPU",
                usage_under(Some("L"), "n1", "H100/1g.10gb", "7", 0, 60),
                None,
            ),
            (
                "8: one more than the lease's",
                usage_under(Some("L"), "n1", "H100/1g.10gb", "8", 0, 60),
                refused(Reason::OverCapacity, "body.gpu_count"),
            ),
            (
                "9: more than the node's",
                usage_under(Some("L"), "n1", "H100/1g.10gb", "9", 0, 60),
                refused(Reason::OverCapacity, "body.gpu_count"),
            ),
            (
                "the listed GPU whole",
                usage_under(Some("L"), "n1", "H100", "1", 0, 60),
                refused(Reason::LeaseNotOnNode, "body.lease"),
            ),
            (
                "2 × 3g.40gb by count",
                usage_under(Some("C"), "n1", "H100/3g.40gb", "2", 0, 60),
                None,
            ),
            (
                "a profile the node lacks",
                usage_under(Some("C"), "n1", "H100/2g.20gb", "1", 0, 60),
                refused(Reason::UnknownGpuModel, "body.gpu_model"),
            ),
            (
                "a lease of one more 1g.10gb than is left (8 − 7)",
                Body::LeaseRegistered(lease("F", 0, None, vec![count("n1", "H100/1g.10gb", "2")])),
                refused(Reason::LeaseOverbooked, "body.nodes"),
            ),
            (
                "the one left",
                Body::LeaseRegistered(lease("F", 0, None, vec![count("n1", "H100/1g.10gb", "1")])),
                None,
            ),
            (
                "GPU 9 whole, whose 3g.40gb are leased",
                Body::LeaseRegistered(lease("F", 0, None, vec![gpus("n1", &[9], None)])),
                refused(Reason::LeaseOverbooked, "body.nodes"),
            ),
            (
                "half of GPU 10, listed whole already",
                Body::LeaseRegistered(lease("F", 0, None, vec![gpus("n1", &[10], Some("0.5"))])),
                refused(Reason::LeaseOverbooked, "body.nodes"),
            ),
        ] {
            assert_eq!(v(&body), want, "{name}");
        }
        // acme's energy: GPU 10 whole (840 units) and 2 × 3/7 of a GPU (2 × 360): 1560 units
        // of 840, × 700 W × 3600 s × 1.05 / 3,600,000 = 1.365 kWh.
        let units = lease_units_on(fleet.lease("L").unwrap().0, &n)
            + lease_units_on(fleet.lease("C").unwrap().0, &n);
        assert_eq!(units, Decimal::from(1_560));
        assert_eq!(
            energy_bound_kwh(units, Decimal::from(700), 3_600),
            dec("1.365")
        );
        let e = |kwh: &str| tenant_energy("acme", "n1", 0, 3_600, kwh);
        assert_eq!(v(&e("1.365")), None);
        assert_eq!(
            v(&e("1.365000001")),
            refused(Reason::EnergyOverBound, "body.kwh")
        );
    }

    /// A record names its node's region: a key whose scope holds several regions cannot bill
    /// a node's GPUs at another region's prices.
    #[test]
    fn a_record_names_its_nodes_region() {
        let fleet = fleet_of(
            HashMap::from([("n1".to_owned(), (n1(), 1))]),
            HashMap::from([(
                "L".to_owned(),
                (lease("L", 0, None, vec![count("n1", "H100", "8")]), 2),
            )]),
        );
        let east = usage("n1", "east", "H100", "1");
        assert_eq!(
            verdict(&east, 10, &fleet),
            refused(Reason::WrongRegion, "body.region")
        );
        // Before the model and capacity rules: 1,024 GPUs in the wrong region is wrong_region.
        assert_eq!(
            verdict(&usage("n1", "east", "H100", "1024"), 10, &fleet),
            refused(Reason::WrongRegion, "body.region")
        );
        let mut e = energy("0.1");
        if let Body::Energy(e) = &mut e {
            e.region = "east".into();
        }
        assert_eq!(
            verdict(&e, 10, &fleet),
            refused(Reason::WrongRegion, "body.region")
        );
        assert_eq!(verdict(&usage("n1", "west", "H100", "1"), 10, &fleet), None);
    }

    fn dec(s: &str) -> Decimal {
        s.parse().unwrap()
    }
}
