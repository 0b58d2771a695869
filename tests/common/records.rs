//! Records, times and numbers the tests write: decimals, keys, signed envelopes, usage and
//! energy bodies at fixed times, and a seeded random generator.

use super::slot;
use ed25519_dalek::SigningKey;
use gpuledger::core::envelope::Envelope;
use gpuledger::core::keys;
use gpuledger::core::outcome::Outcome;
use gpuledger::core::record::Body;
use gpuledger::core::time::Timestamp;
use rust_decimal::Decimal;
use std::str::FromStr;

/// A decimal from its text.
pub fn dec(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

/// The base64 public key of `key`.
pub fn public(key: &SigningKey) -> String {
    keys::encode_public(&key.verifying_key())
}

/// The key id of `key`.
pub fn key_id(key: &SigningKey) -> String {
    keys::key_id(&key.verifying_key())
}

/// `body` signed by `signer` with `key` as record `seq` of the tests' log.
pub fn signed(signer: &str, key: &SigningKey, seq: u64, body: &Body) -> Envelope {
    Envelope::sign(
        gpuledger::sample::ORIGIN,
        body.kind(),
        signer,
        key,
        seq,
        body,
    )
}

/// Asserts that every outcome of an append is an acceptance.
pub fn assert_accepted(out: &[Outcome]) {
    assert!(
        out.iter().all(|o| matches!(o, Outcome::Accepted { .. })),
        "{out:?}"
    );
}

/// 00:00 UTC 30 days ago, fixed for the test process: a base for record times that are
/// neither in the future nor too old.
pub fn base_day() -> Timestamp {
    static BASE: std::sync::OnceLock<Timestamp> = std::sync::OnceLock::new();
    *BASE.get_or_init(|| {
        let now = Timestamp::now().unix();
        Timestamp::from_unix(now - now % 86_400 - 30 * 86_400).unwrap()
    })
}

/// 00:00 UTC three days back, so that a day or two after it is still in the past.
pub fn recent_day() -> Timestamp {
    let now = Timestamp::now().unix();
    Timestamp::from_unix(now - now % 86_400 - 3 * 86_400).unwrap()
}

/// `secs` seconds after [`recent_day`].
pub fn at(secs: i64) -> Timestamp {
    recent_day().plus(secs)
}

/// A usage body of `count` H100 GPUs of `tenant` on `node` in `region` (under `lease`, if any),
/// for [at(start), at(end)).
pub fn h100_usage(
    tenant: &str,
    node: &str,
    region: &str,
    lease: Option<&str>,
    count: &str,
    start: i64,
    end: i64,
) -> Body {
    Body::GpuUsage(gpuledger::core::record::GpuUsage {
        tenant: tenant.into(),
        lease: lease.map(str::to_owned),
        region: region.into(),
        node: node.into(),
        gpu_model: "H100".into(),
        gpu_count: dec(count),
        start: at(start),
        end: at(end),
        gpu_seconds: dec(count) * Decimal::from(end - start),
    })
}

/// An energy body of acme: `kwh` on `node` in west, for [at(start), at(end)).
pub fn acme_energy(node: &str, kwh: &str, start: i64, end: i64) -> Body {
    Body::Energy(gpuledger::core::record::Energy {
        tenant: Some("acme".into()),
        region: "west".into(),
        node: node.into(),
        start: at(start),
        end: at(end),
        kwh: dec(kwh),
    })
}

/// Sample usage records of node `signer` for `tenant`, one GPU each: record `seq` for each of
/// `seqs`, in [`slot`]`(seq)`.
pub fn usage_run(
    signer: &str,
    key: &SigningKey,
    tenant: &str,
    seqs: impl IntoIterator<Item = u64>,
) -> Vec<Envelope> {
    seqs.into_iter()
        .map(|s| gpuledger::sample::usage(signer, key, s, tenant, Decimal::ONE, slot(s)))
        .collect()
}

/// A small xorshift generator seeded from the clock (the seed is printed).
pub struct Rng(pub u64);

impl Rng {
    pub fn from_clock(what: &str) -> Rng {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            | 1;
        eprintln!("{what}: seed {seed}");
        Rng(seed)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The sample region's prices in force from `since`: an on-demand H100-SXM-80G rate card at
/// `per_gpu_hour` CNY and region parameters (0.5 CNY/kWh, PUE 1.2, 500 gCO2e/kWh). A test
/// writes them received at `since` (`Log::write_at`, `open_at`): no price may take effect more
/// than the policy's skew before it is logged.
pub fn sample_prices(since: Timestamp, per_gpu_hour: &str) -> [Body; 2] {
    use gpuledger::core::rating::LeaseClass;
    use gpuledger::core::record::{RateCard, RegionParameters};
    [
        Body::RateCard(RateCard {
            region: gpuledger::sample::REGION.into(),
            gpu_model: "H100-SXM-80G".into(),
            lease_class: LeaseClass::OnDemand,
            currency: "CNY".into(),
            price_per_gpu_hour: dec(per_gpu_hour),
            effective_from: since,
        }),
        Body::RegionParams(RegionParameters {
            region: gpuledger::sample::REGION.into(),
            currency: "CNY".into(),
            electricity_price_per_kwh: dec("0.5"),
            pue: dec("1.2"),
            carbon_g_per_kwh: dec("500"),
            effective_from: since,
        }),
    ]
}

/// The nodes of [`acme_globex_h100_leases`] with their regions: node-1 and node-2 in west,
/// node-3 in east (where node-2's key bills acme's east usage). Register them before the keys
/// that name them (a record names its node's region).
pub const WEST_EAST_NODES: [(&str, &str); 3] =
    [("node-1", "west"), ("node-2", "west"), ("node-3", "east")];

/// The H100 leases of the two-node scenarios (tests/certificates.rs, tests/tamper.rs): acme
/// leases 8 of the 16 H100s of node-1 and of node-2 (`h100-acme`) and 8 more of node-1 (`l1`);
/// globex the other 8 of node-2 (`h100-globex`). All on-demand and open-ended.
pub fn acme_globex_h100_leases(ledger: &gpuledger::store::Ledger) {
    for (lease, tenant, nodes) in [
        ("h100-acme", "acme", &["node-1", "node-2", "node-3"][..]),
        ("l1", "acme", &["node-1"][..]),
        ("h100-globex", "globex", &["node-2"][..]),
    ] {
        let items: Vec<(&str, &str, u32)> = nodes.iter().map(|n| (*n, "H100", 8)).collect();
        super::lease_with(
            ledger,
            lease,
            tenant,
            gpuledger::core::rating::LeaseClass::OnDemand,
            &items,
        );
    }
}

/// Appends, and asserts accepted, record `seq` of node-1 (key `node`): one west H100 of
/// `tenant` under its lease `lease-<tenant>` for [at(start), at(end)).
pub fn use_one_h100(
    ledger: &gpuledger::store::Ledger,
    node: &SigningKey,
    (tenant, seq): (&str, u64),
    start: i64,
    end: i64,
) {
    let lease = gpuledger::sample::lease(tenant);
    let body = h100_usage(tenant, "node-1", "west", Some(&lease), "1", start, end);
    assert_accepted(
        &ledger
            .append(vec![signed("node-1", node, seq, &body)])
            .unwrap(),
    );
}
