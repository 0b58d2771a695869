//! The lease file: which tenant leases which GPUs of this node. The provider's systems may
//! rewrite it at any time (write a temporary file and rename it over); the agent re-reads it at
//! every interval boundary, so a change takes effect from the next interval.
//!
//! ```toml
//! [[lease]]                      # bare metal: the whole node
//! id = "lease-acme-0001"
//! tenant = "acme-ai"
//! whole_node = true
//!
//! [[lease]]                      # cloud: whole GPUs and fractions of GPUs
//! id = "lease-bluefin-7"
//! tenant = "bluefin-labs"
//! gpus = [0, 1]
//! slices = [{ gpu = 2, fraction = "0.5" }]
//! ```

use gpuledger_core::decimal::MAX_SCALE;
use gpuledger_core::ids::check_id;
use rust_decimal::Decimal;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

/// Highest GPU index a lease may name.
pub const MAX_GPU_INDEX: u32 = 1023;
/// Most leases in one lease file.
pub const MAX_LEASES: usize = 1024;
/// Largest lease file read, in bytes.
pub const MAX_LEASE_FILE_BYTES: u64 = 1024 * 1024;

/// What a lease covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every GPU of the node (bare metal).
    WholeNode,
    /// GPU index → share of that GPU, 0 < share ≤ 1 (cloud).
    Gpus(BTreeMap<u32, Decimal>),
}

/// One validated lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Lease id, written in `gpu_usage` records.
    pub id: String,
    /// The tenant billed.
    pub tenant: String,
    /// Which GPUs.
    pub scope: Scope,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    lease: Vec<LeaseWire>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LeaseWire {
    id: String,
    tenant: String,
    #[serde(default)]
    whole_node: bool,
    #[serde(default)]
    gpus: Vec<u32>,
    #[serde(default)]
    slices: Vec<SliceWire>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SliceWire {
    gpu: u32,
    fraction: String,
}

/// Parses and validates a lease file's text. The whole file is refused if any lease is bad,
/// with a message naming it.
pub fn parse(text: &str) -> Result<Vec<Lease>, String> {
    let f: File = toml::from_str(text).map_err(|e| e.to_string())?;
    if f.lease.len() > MAX_LEASES {
        return Err(format!("more than {MAX_LEASES} leases"));
    }
    let mut ids = BTreeSet::new();
    let mut taken: BTreeMap<u32, Decimal> = BTreeMap::new();
    let mut out = Vec::with_capacity(f.lease.len());
    let whole = f.lease.iter().filter(|l| l.whole_node).count();
    if whole > 0 && f.lease.len() > 1 {
        return Err("a whole_node lease must be the only lease of the node".into());
    }
    for l in f.lease {
        let name = format!("lease {:?}", l.id);
        check_id(&l.id).map_err(|m| format!("{name}: id {m}"))?;
        check_id(&l.tenant).map_err(|m| format!("{name}: tenant {m}"))?;
        if !ids.insert(l.id.clone()) {
            return Err(format!("{name} appears twice"));
        }
        let scope = if l.whole_node {
            if !l.gpus.is_empty() || !l.slices.is_empty() {
                return Err(format!("{name}: whole_node excludes gpus and slices"));
            }
            Scope::WholeNode
        } else {
            let mut m: BTreeMap<u32, Decimal> = BTreeMap::new();
            let parts = l.gpus.iter().map(|g| Ok((*g, Decimal::ONE))).chain(
                l.slices
                    .iter()
                    .map(|s| parse_fraction(&s.fraction).map(|f| (s.gpu, f))),
            );
            for p in parts {
                let (gpu, share) = p.map_err(|e| format!("{name}: {e}"))?;
                if gpu > MAX_GPU_INDEX {
                    return Err(format!("{name}: GPU index {gpu} is above {MAX_GPU_INDEX}"));
                }
                if m.insert(gpu, share).is_some() {
                    return Err(format!("{name}: GPU {gpu} is listed twice"));
                }
                let t = taken.entry(gpu).or_default();
                *t += share;
                if *t > Decimal::ONE {
                    return Err(format!("{name}: GPU {gpu} is leased more than once over"));
                }
            }
            if m.is_empty() {
                return Err(format!("{name}: needs whole_node = true, gpus or slices"));
            }
            Scope::Gpus(m)
        };
        out.push(Lease {
            id: l.id,
            tenant: l.tenant,
            scope,
        });
    }
    Ok(out)
}

impl Lease {
    /// What this lease covers of `node`, whose GPU indexes are `node_gpus`, as the items of its
    /// `lease_registered` entry (docs/PROTOCOL.md §5.8): the whole GPUs in one item, and the
    /// GPUs leased by the same share in one item each. The ledger bills usage only under a
    /// registered lease that covers it, so a lease file and the lease's registration agree.
    pub fn registration_items(
        &self,
        node: &str,
        node_gpus: &[u32],
    ) -> Vec<gpuledger_core::record::LeaseNode> {
        let mut by_share: BTreeMap<Decimal, Vec<u32>> = BTreeMap::new();
        match &self.scope {
            Scope::WholeNode => {
                let mut all = node_gpus.to_vec();
                all.sort_unstable();
                all.dedup();
                by_share.insert(Decimal::ONE, all);
            }
            Scope::Gpus(m) => {
                for (gpu, share) in m {
                    by_share.entry(share.normalize()).or_default().push(*gpu);
                }
            }
        }
        by_share
            .into_iter()
            .rev()
            .filter(|(_, gpus)| !gpus.is_empty())
            .map(|(share, gpus)| gpuledger_core::record::LeaseNode {
                node: node.to_owned(),
                gpus: Some(gpus),
                share: (share != Decimal::ONE).then_some(share),
                gpu_model: None,
                count: None,
            })
            .collect()
    }
}

fn parse_fraction(s: &str) -> Result<Decimal, String> {
    let d = Decimal::from_str_exact(s.trim())
        .map_err(|_| format!("fraction {s:?} is not a decimal"))?;
    if d <= Decimal::ZERO || d > Decimal::ONE {
        return Err(format!("fraction {s} must be above 0 and at most 1"));
    }
    if d.normalize().scale() > MAX_SCALE {
        return Err(format!(
            "fraction {s} has more than {MAX_SCALE} digits after the point"
        ));
    }
    Ok(d.normalize())
}

/// Reads the lease file at `path`: `None` when there is no such file (which means no leases;
/// the caller says so, since then nobody is billed for this node's GPUs).
pub fn read(path: &std::path::Path) -> Result<Option<Vec<Lease>>, String> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{}: {e}", path.display())),
        Ok(m) if m.len() > MAX_LEASE_FILE_BYTES => {
            return Err(format!(
                "{}: larger than {MAX_LEASE_FILE_BYTES} bytes",
                path.display()
            ))
        }
        Ok(_) => {}
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&text)
        .map(Some)
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bare_metal_and_cloud_and_refuses_overlaps() {
        let l = parse("[[lease]]\nid = \"l1\"\ntenant = \"acme\"\nwhole_node = true\n").unwrap();
        assert_eq!(l[0].scope, Scope::WholeNode);
        let l = parse(
            "[[lease]]\nid = \"l1\"\ntenant = \"a\"\ngpus = [0, 1]\nslices = [{ gpu = 2, fraction = \"0.50\" }]\n\
             [[lease]]\nid = \"l2\"\ntenant = \"b\"\nslices = [{ gpu = 2, fraction = \"0.5\" }]\n",
        )
        .unwrap();
        match &l[0].scope {
            Scope::Gpus(m) => assert_eq!(m[&2].to_string(), "0.5"),
            _ => panic!(),
        }
        for bad in [
            "[[lease]]\nid = \"l1\"\ntenant = \"a\"\ngpus = [0]\n[[lease]]\nid = \"l2\"\ntenant = \"b\"\ngpus = [0]\n",
            "[[lease]]\nid = \"l1\"\ntenant = \"a\"\nwhole_node = true\n[[lease]]\nid = \"l2\"\ntenant = \"b\"\ngpus = [1]\n",
            "[[lease]]\nid = \"l1\"\ntenant = \"a b\"\ngpus = [0]\n",
            "[[lease]]\nid = \"l1\"\ntenant = \"a\"\n",
            "[[lease]]\nid = \"l1\"\ntenant = \"a\"\nslices = [{ gpu = 0, fraction = \"1.5\" }]\n",
            "[[lease]]\nid = \"l1\"\ntenant = \"a\"\ngpus = [0]\ncolour = 1\n",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_missing_file_is_told_apart_from_an_empty_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("leases.toml");
        assert_eq!(read(&path), Ok(None));
        std::fs::write(&path, "").unwrap();
        assert_eq!(read(&path), Ok(Some(Vec::new())));
    }
}
