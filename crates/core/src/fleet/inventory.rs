//! What the log says the fleet is: each node as registered and updated, and the leases on it.
//! Every answer is as of a log index ([`Node::at`]), so a verifier that has read entries past
//! a record (a bundle's context, §14) judges the record as the log did when it was appended.

use crate::record::{Body, LeaseRegistered, NodeGpu, NodeRegistered, NodeUpdated};
use rust_decimal::Decimal;
use std::collections::HashMap;

/// A node as the log holds it: its registration and what its `node_updated` entries added,
/// each GPU, UUID and power limit with the index of the entry that brought it.
#[derive(Debug, Clone)]
pub struct Node {
    registration: NodeRegistered,
    registered_at: u64,
    /// Each GPU (index, model and partition never change; the UUID is the latest listed),
    /// with the index of the entry that added it, by increasing GPU index.
    gpus: Vec<(NodeGpu, u64)>,
    /// Every UUID the node's entries listed, with the index of the entry.
    uuids: Vec<(String, u64)>,
    /// The power limits, increasing, with the index of the entry that set each.
    watts: Vec<(Decimal, u64)>,
    /// The index of the latest entry taken in (its registration or an update).
    last_at: u64,
}

impl Node {
    /// The node registered by the entry at `at`.
    pub fn new(registration: NodeRegistered, at: u64) -> Node {
        Node {
            gpus: registration.gpus.iter().map(|g| (g.clone(), at)).collect(),
            uuids: registration
                .gpus
                .iter()
                .map(|g| (g.uuid.clone(), at))
                .collect(),
            watts: vec![(registration.max_watts_per_gpu, at)],
            registration,
            registered_at: at,
            last_at: at,
        }
    }

    /// Takes in the update at `at` (after `fleet::check_fleet` admitted it).
    pub fn apply(&mut self, update: &NodeUpdated, at: u64) {
        for g in update.gpus.iter().flatten() {
            self.uuids.push((g.uuid.clone(), at));
            match self.gpus.binary_search_by_key(&g.index, |(h, _)| h.index) {
                Ok(i) => self.gpus[i].0.uuid = g.uuid.clone(),
                Err(i) => self.gpus.insert(i, (g.clone(), at)),
            }
        }
        if let Some(w) = update.max_watts_per_gpu {
            self.watts.push((w, at));
        }
        self.last_at = self.last_at.max(at);
    }

    /// The node's registration entry (its id, region and hub, and the GPUs it was registered
    /// with).
    pub fn registration(&self) -> &NodeRegistered {
        &self.registration
    }

    /// The index of the node's `node_registered` entry.
    pub fn registered_at(&self) -> u64 {
        self.registered_at
    }

    /// The node as the entries before `index` made it (`u64::MAX`: every entry so far).
    pub fn at(&self, index: u64) -> NodeAt<'_> {
        NodeAt { node: self, index }
    }

    /// The index of the latest entry that listed `uuid` before `index`, if any.
    pub fn uuid_listed(&self, uuid: &str, index: u64) -> Option<u64> {
        self.uuids
            .iter()
            .rev()
            .find(|(u, at)| u == uuid && *at < index)
            .map(|(_, at)| *at)
    }

    /// Each GPU with its latest UUID, and the index of the entry that added it: what the
    /// fleet pages show.
    pub fn current_gpus(&self) -> &[(NodeGpu, u64)] {
        &self.gpus
    }
}

/// A node as of a log index: the GPUs and the power limit the entries before it gave it.
#[derive(Debug, Clone, Copy)]
pub struct NodeAt<'a> {
    node: &'a Node,
    index: u64,
}

impl<'a> NodeAt<'a> {
    /// The node's id.
    pub fn name(&self) -> &'a str {
        &self.node.registration.node
    }

    /// The node's region.
    pub fn region(&self) -> &'a str {
        &self.node.registration.region
    }

    /// Its GPUs, by increasing index.
    pub fn gpus(&self) -> impl Iterator<Item = &'a NodeGpu> + 'a {
        let index = self.index;
        self.node
            .gpus
            .iter()
            .filter(move |(_, at)| *at < index)
            .map(|(g, _)| g)
    }

    /// How many GPUs it has.
    pub fn gpu_count(&self) -> usize {
        self.gpus().count()
    }

    /// Its GPU at `index` (as `nvidia-smi` numbers it).
    pub fn gpu(&self, index: u32) -> Option<&'a NodeGpu> {
        let gpus = &self.node.gpus;
        gpus.binary_search_by_key(&index, |(g, _)| g.index)
            .ok()
            .map(|i| &gpus[i])
            .filter(|(_, at)| *at < self.index)
            .map(|(g, _)| g)
    }

    /// How many units of GPU model `model` it has: its unpartitioned GPUs of that model, or
    /// the MIG instances of `<model>/<profile>` ([`NodeGpu::units_of`]).
    pub fn units_of(&self, model: &str) -> u32 {
        self.gpus().map(|g| g.units_of(model)).sum()
    }

    /// Its power limit per GPU.
    pub fn max_watts_per_gpu(&self) -> Decimal {
        let index = self.index;
        self.node
            .watts
            .iter()
            .rev()
            .find(|(_, at)| *at < index)
            .map_or(self.node.registration.max_watts_per_gpu, |(w, _)| *w)
    }
}

/// The nodes and leases of a log, as its entries registered them: what the fleet rules
/// (`fleet::check_fleet`) judge records by, kept by `verify-log` and the bundle verifiers
/// (`admission::Registry`) and by the ledger's ingest cache.
#[derive(Debug, Clone, Default)]
pub struct FleetLog {
    nodes: HashMap<String, Node>,
    leases: HashMap<String, (LeaseRegistered, u64)>,
    /// node → the leases naming it, so a node's leases are found without a scan of all.
    leases_by_node: HashMap<String, Vec<String>>,
}

impl FleetLog {
    /// The node, if a `node_registered` entry names it.
    pub fn node(&self, node: &str) -> Option<&Node> {
        self.nodes.get(node)
    }

    /// Every node, in no order.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.nodes.values()
    }

    /// The lease's registration and the index of its `lease_registered` entry.
    pub fn lease(&self, lease: &str) -> Option<(&LeaseRegistered, u64)> {
        self.leases.get(lease).map(|(l, at)| (l, *at))
    }

    /// The registrations of the leases that name `node`, with their indexes, in any order.
    pub fn leases_on(&self, node: &str) -> impl Iterator<Item = (&LeaseRegistered, u64)> {
        self.leases_by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|id| self.leases.get(id))
            .map(|(l, at)| (l, *at))
    }

    /// Takes in the admitted entry at `index`: a node's registration or update, a lease's
    /// registration (the first of an id counts); other kinds change nothing.
    pub fn apply(&mut self, index: u64, body: &Body) {
        match body {
            Body::NodeRegistered(n) => {
                self.nodes
                    .entry(n.node.clone())
                    .or_insert_with(|| Node::new(n.clone(), index));
            }
            Body::NodeUpdated(u) => {
                if let Some(node) = self.nodes.get_mut(&u.node) {
                    node.apply(u, index);
                }
            }
            Body::LeaseRegistered(l) => self.add_lease(l.clone(), index),
            _ => {}
        }
    }

    /// Adds a lease registered at `index` (the first registration of an id counts).
    pub fn add_lease(&mut self, lease: LeaseRegistered, index: u64) {
        if self.leases.contains_key(&lease.lease) {
            return;
        }
        let mut nodes: Vec<&String> = lease.nodes.iter().map(|n| &n.node).collect();
        nodes.sort_unstable();
        nodes.dedup();
        for n in nodes {
            self.leases_by_node
                .entry(n.clone())
                .or_default()
                .push(lease.lease.clone());
        }
        self.leases.insert(lease.lease.clone(), (lease, index));
    }

    /// Puts `node` in place of what this holds of it, unless this holds it as of a later
    /// entry: two reads of the log merged in either order keep the fresher node (a node only
    /// gains capacity, so an older one could only refuse what the log accepts).
    pub fn put_node(&mut self, node: Node) {
        match self.nodes.get(&node.registration.node) {
            Some(held) if held.last_at > node.last_at => {}
            _ => {
                self.nodes.insert(node.registration.node.clone(), node);
            }
        }
    }

    /// Adds what `other` holds that this lacks, and `other`'s nodes where they are as of a
    /// later entry than these ([`FleetLog::put_node`]).
    pub fn merge(&mut self, other: FleetLog) {
        for (_, node) in other.nodes {
            self.put_node(node);
        }
        for (_, (l, at)) in other.leases {
            self.add_lease(l, at);
        }
    }
}
