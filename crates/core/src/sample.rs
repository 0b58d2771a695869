//! Deterministic sample records, for the benchmark, the tests and (later) the simulated
//! agents. Real measurements come from the agent's collectors; these are clearly synthetic.

use crate::envelope::Envelope;
use crate::rating::LeaseClass;
use crate::record::{
    Body, Energy, GpuUsage, KeyScope, Kind, LeaseNode, LeaseRegistered, NodeGpu, NodeRegistered,
    SpotPrice, TenantRegistered,
};
use crate::time::Timestamp;
use ed25519_dalek::SigningKey;
use rust_decimal::Decimal;

/// The origin of the log sample records are signed for (tests and benchmarks initialise their
/// logs with it).
pub const ORIGIN: &str = "test.gpuledger/log";

/// The region of every sample record.
pub const REGION: &str = "cn-north-imx";

/// The lease sample usage records of `tenant` name.
pub fn lease(tenant: &str) -> String {
    format!("lease-{tenant}")
}

/// The scope a sample node key is registered with: its own node id, the sample region.
pub fn node_scope(node: &str) -> KeyScope {
    KeyScope::new(Some(vec![node.to_owned()]), vec![REGION.to_owned()])
}

/// The scope a sample market key is registered with: the sample region.
pub fn market_scope() -> KeyScope {
    KeyScope::new(None, vec![REGION.to_owned()])
}

/// The start of every sample lease's term: 2020-01-01 (sample leases are open-ended).
pub const LEASE_FROM: i64 = 1_577_836_800;

/// The ledger entries that let sample records of `tenant` on `nodes` (registered before, as
/// [`node`]s or larger) in: the tenant's registration and its sample lease (on-demand,
/// open-ended from [`LEASE_FROM`]), which covers `gpus` GPUs of the sample model on each of
/// `nodes` (any of them, as a scheduler would).
pub fn parties(tenant: &str, nodes: &[&str], gpus: u32) -> [Body; 2] {
    [
        Body::TenantRegistered(TenantRegistered {
            tenant: tenant.to_owned(),
        }),
        lease_on(&lease(tenant), tenant, nodes, gpus),
    ]
}

/// An on-demand lease `id` of `tenant`, open-ended from [`LEASE_FROM`], covering `gpus` GPUs
/// of the sample model on each of `nodes`.
pub fn lease_on(id: &str, tenant: &str, nodes: &[&str], gpus: u32) -> Body {
    Body::LeaseRegistered(LeaseRegistered {
        lease: id.to_owned(),
        tenant: tenant.to_owned(),
        class: LeaseClass::OnDemand,
        from: Timestamp::from_unix(LEASE_FROM).expect("a valid instant"),
        to: None,
        nodes: nodes
            .iter()
            .map(|n| LeaseNode {
                node: (*n).to_owned(),
                gpus: None,
                share: None,
                gpu_model: Some(MODEL.into()),
                count: Some(Decimal::from(gpus)),
            })
            .collect(),
    })
}

/// The GPU model of sample nodes and records.
pub const MODEL: &str = "H100-SXM-80G";

/// GPUs of a sample node.
pub const NODE_GPUS: u32 = 8;

/// The registration of sample node `node`: in the sample region, [`NODE_GPUS`] H100s (the
/// model sample records name) with synthetic UUIDs, at most 1,000 W each (a GPU's share of the
/// node's power, host included).
pub fn node(node: &str) -> Body {
    Body::NodeRegistered(NodeRegistered {
        node: node.to_owned(),
        region: REGION.into(),
        hub: None,
        gpus: (0..NODE_GPUS)
            .map(|i| NodeGpu {
                index: i,
                uuid: format!("GPU-sample-{node}-{i}"),
                model: "H100-SXM-80G".into(),
                mig: None,
            })
            .collect(),
        max_watts_per_gpu: Decimal::from(1_000),
    })
}

/// A deterministic signing key from a label (never use for real signers).
pub fn key(label: &str) -> SigningKey {
    use sha2::{Digest, Sha256};
    SigningKey::from_bytes(
        &Sha256::digest(format!("gpuledger sample key {label}").as_bytes()).into(),
    )
}

/// A signed `gpu_usage` record: `count` GPUs for 10 s ending `end`, seq `seq`, under the
/// tenant's sample lease ([`lease`]).
pub fn usage(
    node: &str,
    key: &SigningKey,
    seq: u64,
    tenant: &str,
    count: Decimal,
    end: Timestamp,
) -> Envelope {
    usage_under(node, key, seq, (tenant, &lease(tenant)), count, end)
}

/// [`usage`] under lease `lease` of `tenant`.
pub fn usage_under(
    node: &str,
    key: &SigningKey,
    seq: u64,
    (tenant, lease): (&str, &str),
    count: Decimal,
    end: Timestamp,
) -> Envelope {
    usage_over(node, key, seq, (tenant, lease), count, (end.plus(-10), end))
}

/// [`usage_under`] over `[start, end)`.
pub fn usage_over(
    node: &str,
    key: &SigningKey,
    seq: u64,
    (tenant, lease): (&str, &str),
    count: Decimal,
    (start, end): (Timestamp, Timestamp),
) -> Envelope {
    let body = Body::GpuUsage(GpuUsage {
        tenant: tenant.to_owned(),
        lease: Some(lease.to_owned()),
        region: REGION.into(),
        node: node.to_owned(),
        gpu_model: MODEL.into(),
        gpu_count: count,
        start,
        end,
        gpu_seconds: count * Decimal::from(start.seconds_until(end)),
    });
    Envelope::sign(ORIGIN, Kind::GpuUsage, node, key, seq, &body)
}

/// A signed `energy` record of `kwh` for 10 s ending `end`.
pub fn energy(
    node: &str,
    key: &SigningKey,
    seq: u64,
    tenant: Option<&str>,
    kwh: Decimal,
    end: Timestamp,
) -> Envelope {
    let body = Body::Energy(Energy {
        tenant: tenant.map(str::to_owned),
        region: REGION.into(),
        node: node.to_owned(),
        start: end.plus(-10),
        end,
        kwh,
    });
    Envelope::sign(ORIGIN, Kind::Energy, node, key, seq, &body)
}

/// A signed `spot_price` record.
pub fn spot(market: &str, key: &SigningKey, seq: u64, price: Decimal, from: Timestamp) -> Envelope {
    let body = Body::SpotPrice(SpotPrice {
        region: REGION.into(),
        gpu_model: "H100-SXM-80G".into(),
        price_per_gpu_hour: price,
        currency: "CNY".into(),
        effective_from: from,
    });
    Envelope::sign(ORIGIN, Kind::SpotPrice, market, key, seq, &body)
}
