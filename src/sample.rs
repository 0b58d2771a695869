//! Deterministic sample records, for the benchmark, the tests and (later) the simulated
//! agents. Real measurements come from the agent's collectors; these are clearly synthetic.

use crate::core::envelope::Envelope;
use crate::core::record::{Body, Energy, GpuUsage, Kind, SpotPrice};
use crate::core::time::Timestamp;
use ed25519_dalek::SigningKey;
use rust_decimal::Decimal;

/// A deterministic signing key from a label (never use for real signers).
pub fn key(label: &str) -> SigningKey {
    use sha2::{Digest, Sha256};
    SigningKey::from_bytes(
        &Sha256::digest(format!("gpuledger sample key {label}").as_bytes()).into(),
    )
}

/// A signed `gpu_usage` record: `count` GPUs for 10 s ending `end`, seq `seq`.
pub fn usage(
    node: &str,
    key: &SigningKey,
    seq: u64,
    tenant: &str,
    count: Decimal,
    end: Timestamp,
) -> Envelope {
    let start = end.plus(-10);
    let body = Body::GpuUsage(GpuUsage {
        tenant: tenant.to_owned(),
        lease: Some(format!("lease-{tenant}")),
        region: "cn-north-imx".into(),
        node: node.to_owned(),
        gpu_model: "H100-SXM-80G".into(),
        gpu_count: count,
        start,
        end,
        gpu_seconds: count * Decimal::from(10),
    });
    Envelope::sign(Kind::GpuUsage, node, key, seq, &body)
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
        region: "cn-north-imx".into(),
        node: node.to_owned(),
        start: end.plus(-10),
        end,
        kwh,
    });
    Envelope::sign(Kind::Energy, node, key, seq, &body)
}

/// A signed `spot_price` record.
pub fn spot(market: &str, key: &SigningKey, seq: u64, price: Decimal, from: Timestamp) -> Envelope {
    let body = Body::SpotPrice(SpotPrice {
        region: "cn-north-imx".into(),
        gpu_model: "H100-SXM-80G".into(),
        price_per_gpu_hour: price,
        currency: "CNY".into(),
        effective_from: from,
    });
    Envelope::sign(Kind::SpotPrice, market, key, seq, &body)
}
