//! The fleet rules (docs/PROTOCOL.md §6.7, fleet): a node key names only registered nodes, a
//! node is registered once, and a record fits the node it names: a GPU model the node has, at
//! most as many GPUs of that model as the node has, and no more energy than the node's GPUs
//! can draw. (A record's region is bounded by its key's scope, §6.7 scope; the node's own
//! region is not yet a rule.) One function, [`check_fleet`], applied by the ledger at ingest (to its
//! cache of the registered nodes) and by `verify-log` and the bundle verifiers (to the nodes
//! rebuilt from the log, `admission::Registry`).

use super::limits::ENERGY_BOUND_MARGIN_PERCENT;
use super::record::{Body, NodeRegistered};
use super::rejection::{Reason, Rejection};
use rust_decimal::Decimal;

/// Where the log registered nodes.
pub trait Fleet {
    /// The node's registration and the index of its `node_registered` entry.
    fn node(&self, node: &str) -> Option<(&NodeRegistered, u64)>;
}

/// The most kWh `node`'s GPUs may draw in `seconds`: GPUs × `max_watts_per_gpu` × seconds,
/// plus [`ENERGY_BOUND_MARGIN_PERCENT`], in kWh, for people (the division may round in the
/// 28th digit; [`within_energy_bound`] decides without dividing).
pub fn energy_bound_kwh(node: &NodeRegistered, seconds: i64) -> Decimal {
    let watt_seconds =
        Decimal::from(node.gpus.len()) * node.max_watts_per_gpu * Decimal::from(seconds);
    let margin = Decimal::from(100 + ENERGY_BOUND_MARGIN_PERCENT) / Decimal::from(100);
    watt_seconds * margin / Decimal::from(3_600_000)
}

/// Whether `kwh` in `seconds` is within `node`'s bound, exactly: kWh × 3,600,000 × 100 ≤
/// GPUs × W × seconds × (100 + margin), every product exact (kWh ≤ 100,000 and W ≤ 5,000 with at
/// most 9 decimals, seconds ≤ 86,400, GPUs ≤ 64: at most 23 digits), as the Python and browser
/// verifiers compare.
pub fn within_energy_bound(node: &NodeRegistered, seconds: i64, kwh: Decimal) -> bool {
    let used = kwh * Decimal::from(3_600_000) * Decimal::from(100);
    let allowed = Decimal::from(node.gpus.len())
        * node.max_watts_per_gpu
        * Decimal::from(seconds)
        * Decimal::from(100 + ENERGY_BOUND_MARGIN_PERCENT);
    used <= allowed
}

/// The fleet rules for the entry at `index` (`u64::MAX` for one not yet appended).
pub fn check_fleet(body: &Body, index: u64, fleet: &dyn Fleet) -> Result<(), Rejection> {
    let registered = |node: &str, field: &str| {
        fleet
            .node(node)
            .filter(|(_, at)| *at < index)
            .map(|(n, _)| n)
            .ok_or_else(|| {
                Rejection::field(
                    Reason::UnknownNode,
                    field,
                    format!("{node} is not a registered node"),
                )
            })
    };
    match body {
        Body::NodeRegistered(n) => {
            if let Some((_, at)) = fleet.node(&n.node).filter(|(_, at)| *at < index) {
                return Err(Rejection::field(
                    Reason::AlreadyRegistered,
                    "body.node",
                    format!("{} is already registered (entry {at})", n.node),
                ));
            }
        }
        Body::SignerKeyRegistered(r) => {
            for node in r.nodes.iter().flatten() {
                registered(node, "body.nodes")?;
            }
        }
        Body::GpuUsage(u) => {
            let node = registered(&u.node, "body.node")?;
            let has = node.gpus_of(&u.gpu_model);
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
        }
        Body::Energy(e) => {
            let node = registered(&e.node, "body.node")?;
            let seconds = e.start.seconds_until(e.end);
            if !within_energy_bound(node, seconds, e.kwh) {
                let bound = energy_bound_kwh(node, seconds);
                return Err(Rejection::field(
                    Reason::EnergyOverBound,
                    "body.kwh",
                    format!(
                        "is {} kWh, above what node {}'s {} GPUs × {} W draw in {} s (+{ENERGY_BOUND_MARGIN_PERCENT} %): {} kWh",
                        e.kwh,
                        e.node,
                        node.gpus.len(),
                        node.max_watts_per_gpu,
                        seconds,
                        bound.round_dp(9).normalize()
                    ),
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Energy, GpuUsage, NodeGpu};
    use crate::time::Timestamp;
    use std::collections::HashMap;

    struct Nodes(HashMap<String, (NodeRegistered, u64)>);
    impl Fleet for Nodes {
        fn node(&self, node: &str) -> Option<(&NodeRegistered, u64)> {
            self.0.get(node).map(|(n, at)| (n, *at))
        }
    }

    fn n1() -> NodeRegistered {
        let mut gpus: Vec<NodeGpu> = (0..8)
            .map(|i| NodeGpu {
                index: i,
                uuid: format!("GPU-{i}"),
                model: "H100".into(),
            })
            .collect();
        gpus.push(NodeGpu {
            index: 8,
            uuid: "GPU-8".into(),
            model: "L40S".into(),
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
            lease: None,
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
            }],
            max_watts_per_gpu: Decimal::ONE,
            ..n1()
        };
        let fleet = Nodes(HashMap::from([
            ("n1".to_owned(), (n1(), 3)),
            ("tiny".to_owned(), (tiny, 3)),
        ]));
        // 9 GPUs × 700 W × 3600 s = 22,680,000 J = 6.3 kWh, + 5 % = 6.615 kWh.
        assert_eq!(
            energy_bound_kwh(&n1(), 3_600),
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
}
