//! Every limit the core enforces, as a named constant. Each is documented in
//! docs/PROTOCOL.md and tested at its edge.

/// Longest identifier (signer, tenant, region, node, GPU model, lease), in bytes.
pub const MAX_ID_LEN: usize = 128;
/// Most GPUs one `gpu_usage` record may claim.
pub const MAX_GPU_COUNT: u32 = 1024;
/// Longest measurement interval of one record, in seconds (one day).
pub const MAX_INTERVAL_SECONDS: i64 = 86_400;
/// The default `log_policy.max_future_skew_seconds`: how far a record's `end` may be past the
/// ledger clock, and how far before it a spot price may take effect.
pub const DEFAULT_MAX_FUTURE_SKEW_SECONDS: u64 = 300;
/// The default `log_policy.max_record_age_seconds` (35 days): how long before its arrival a
/// record may start.
pub const DEFAULT_MAX_RECORD_AGE_SECONDS: u64 = 35 * 86_400;
/// Bounds of `log_policy.max_record_age_seconds` (1 hour to 365 days).
pub const POLICY_RECORD_AGE_SECONDS: (u64, u64) = (3_600, 365 * 86_400);
/// Bounds of `log_policy.max_future_skew_seconds` (0 to 1 hour).
pub const POLICY_FUTURE_SKEW_SECONDS: (u64, u64) = (0, 3_600);
/// Most node ids one node key may be registered for.
pub const MAX_SIGNER_NODES: usize = 256;
/// Most regions one key may be registered for.
pub const MAX_SIGNER_REGIONS: usize = 64;
/// Most kWh one `energy` record may claim.
pub const MAX_KWH_PER_RECORD: u32 = 100_000;
/// Highest spot price per GPU-hour accepted.
pub const MAX_PRICE_PER_GPU_HOUR: u32 = 1_000_000;
/// How far ahead of the ledger's clock a spot price may be scheduled, in seconds (7 days).
pub const MAX_SPOT_SCHEDULE_AHEAD_SECONDS: i64 = 7 * 86_400;
/// Largest per-signer sequence number: the largest integer JSON carries exactly (2^53 - 1).
pub const MAX_SEQ: u64 = (1 << 53) - 1;
/// Largest canonical envelope, in bytes.
pub const MAX_ENVELOPE_BYTES: usize = 8 * 1024;
/// Most records in one call to `Ledger::append`.
pub const MAX_APPEND_BATCH: usize = 10_000;
/// Highest electricity price per kWh accepted in region parameters.
pub const MAX_PRICE_PER_KWH: u32 = 1_000;
/// Highest power usage effectiveness accepted (PUE is at least 1).
pub const MAX_PUE: u32 = 5;
/// Highest grid carbon intensity accepted, gCO2e per kWh.
pub const MAX_CARBON_G_PER_KWH: u32 = 5_000;
/// Largest money amount (invoice total, payment, credit note) accepted.
pub const MAX_MONEY_AMOUNT: u64 = 1_000_000_000_000;
/// Most tiers in one `volume_tiers` entry.
pub const MAX_VOLUME_TIERS: usize = 16;
/// Highest tier bound (`up_to_gpu_hours`) accepted, in GPU-hours.
pub const MAX_TIER_BOUND_GPU_HOURS: u32 = 1_000_000_000;

/// Longest `external_reference` of a payment or credit note, in bytes.
pub const MAX_EXTERNAL_REFERENCE_BYTES: usize = 128;

/// Longest `reason` of a `record_excluded` entry, in bytes.
pub const MAX_EXCLUSION_REASON_BYTES: usize = 500;

/// Most GPUs one `node_registered` entry lists, and most GPUs a node has after its
/// `node_updated` entries (an entry is at most `MAX_ENVELOPE_BYTES`).
pub const MAX_NODE_GPUS: usize = 64;

/// Most compute slices a MIG-partitioned GPU has (A100, H100, H200, B200: 7; A30: 4).
pub const MAX_MIG_SLICES: u32 = 8;

/// A GPU in these units when shares of GPUs of different partitions are added up exactly (the
/// energy bound of a tenant's leases): 840 is the least common multiple of 1 to
/// [`MAX_MIG_SLICES`], so every MIG instance is a whole number of units.
pub const GPU_UNITS: u32 = 840;

/// Most items (node, GPUs or a GPU model's count) one `lease_registered` entry covers.
pub const MAX_LEASE_NODES: usize = 64;

/// Highest `max_watts_per_gpu` a node may declare.
pub const MAX_WATTS_PER_GPU: u32 = 5_000;

/// The margin, in percent, a node's energy record may exceed its GPUs × `max_watts_per_gpu` ×
/// seconds by (meter error and rounding): 5 %.
pub const ENERGY_BOUND_MARGIN_PERCENT: u32 = 5;

/// Longest term of a `contract_registered` entry, in seconds (3660 days: ten years and leap
/// days).
pub const MAX_CONTRACT_TERM_SECONDS: i64 = 3_660 * 86_400;

/// Most fees one `contract_registered` entry lists.
pub const MAX_CONTRACT_FEES: usize = 16;

/// Longest `name` of a contract's fee (its invoice line's description), in bytes.
pub const MAX_FEE_NAME_BYTES: usize = 100;

/// The most steps an SLA's credit schedule may have.
pub const MAX_SLA_STEPS: usize = 8;

/// The most GPU models one contract fee may include hours of (`fees[i].included`).
pub const MAX_INCLUDED_MODELS: usize = 8;
