//! Record kinds and their bodies, with validation.
//!
//! A body arrives as JSON inside an [`Envelope`](super::envelope::Envelope). Each kind is
//! defined once: its body struct, whose serde derives spell it on the wire, and its
//! `Record::check`, the rules it must pass on its own (docs/PROTOCOL.md §5). A body is first
//! read by serde in its *wire* form, unknown fields refused: the body itself, or, for kinds
//! with decimals, timestamps or lease classes, the twin that `body!` declares with it, whose
//! such fields are still the strings they arrived as. `check` then parses each field on its
//! own, in the order of §5, so that a refusal names the exact field and reason.
//! [`Body::to_value`] and [`Body::from_value`] dispatch on the kind through one table
//! (`bodies!`).

use super::decimal::{self, DecimalError};
use super::ids::check_new_id;
use super::keys;
use super::limits::*;
use super::rejection::{Reason, Rejection};
use super::time::Timestamp;
use rust_decimal::Decimal;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

/// Declares a closed set of wire words: the enum, its spelling and a reader that names the
/// field it refuses (`invalid_field`).
macro_rules! words {
    ($(#[$attr:meta])* pub enum $name:ident { $($(#[$vattr:meta])* $variant:ident = $wire:literal,)* }) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $($(#[$vattr])* $variant,)*
        }

        impl $name {
            /// Every word, in order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The wire word.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $wire,)*
                }
            }

            fn read(field: &str, s: &str) -> Result<Self, Rejection> {
                Self::ALL.iter().copied().find(|w| w.as_str() == s).ok_or_else(|| {
                    let words: Vec<&str> = Self::ALL.iter().map(|w| w.as_str()).collect();
                    Rejection::field(
                        Reason::InvalidField,
                        field,
                        format!("must be one of {}", words.join(", ")),
                    )
                })
            }
        }
    };
}

mod contract;
mod prepayment;
pub use contract::{
    BillingAnchor, BillingPeriod, ContractAmended, ContractFee, ContractRegistered, FeeCategory,
    FeeTiming, Included, Sla, SlaStep,
};
pub use prepayment::{Prepayment, PrepaymentSource};

/// How a lease is billed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum LeaseClass {
    OnDemand,
    Reserved,
    Spot,
}

impl LeaseClass {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseClass::OnDemand => "on_demand",
            LeaseClass::Reserved => "reserved",
            LeaseClass::Spot => "spot",
        }
    }
}

/// Every kind of entry the log holds. New kinds may be added in later versions; old leaves
/// never change meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// GPU time used by a tenant on a node (signed by a node).
    GpuUsage,
    /// Energy measured on a node (signed by a node).
    Energy,
    /// A spot price taking effect (signed by a market signer).
    SpotPrice,
    /// A signer's public key was registered (written and signed by the ledger).
    SignerKeyRegistered,
    /// A signer's public key was revoked (written and signed by the ledger).
    SignerKeyRevoked,
    /// A rate-card price took effect (written by the ledger).
    RateCard,
    /// A region's electricity price, PUE and carbon intensity took effect (written by the ledger).
    RegionParams,
    /// A lease was declared with its billing class (written by the ledger).
    LeaseRegistered,
    /// An invoice was issued; its SHA-256 is recorded (written by the ledger).
    InvoiceIssued,
    /// A payment was received against an invoice (written by the ledger).
    Payment,
    /// A credit note was granted against an invoice (written by the ledger).
    CreditNote,
    /// A compute-usage certificate was issued; its SHA-256 is recorded (written by the ledger).
    CertificateIssued,
    /// A plan's graduated volume tiers for one series took effect (written by the ledger).
    VolumeTiers,
    /// A tenant was put on a plan (written by the ledger).
    TenantPlan,
    /// A tenant was registered; records may name only registered tenants (written by the
    /// ledger).
    TenantRegistered,
    /// The log's admission policy (record age, clock skew) from this entry on (written by the
    /// ledger).
    LogPolicy,
    /// A GPU server of the fleet with its region and GPUs; node keys may name only registered
    /// nodes, and records must fit their node (written by the ledger).
    NodeRegistered,
    /// A logged record of a tenant is excluded from rating, with the reason (a dispute settled
    /// without billing; written by the ledger).
    RecordExcluded,
    /// Capacity added to a registered node: GPUs, a replaced board's UUID, a higher power
    /// limit (written by the ledger).
    NodeUpdated,
    /// A tenant's contract: fixed fees per billing period, one-off charges, a minimum spend
    /// (written by the ledger).
    ContractRegistered,
    /// Money a tenant paid ahead, or credit it was granted, that its invoices draw down
    /// (written by the ledger).
    Prepayment,
    /// A contract's term ends earlier or later than registered (written by the ledger).
    ContractAmended,
}

impl Kind {
    /// All kinds, in a fixed order.
    pub const ALL: [Kind; 22] = [
        Kind::GpuUsage,
        Kind::Energy,
        Kind::SpotPrice,
        Kind::SignerKeyRegistered,
        Kind::SignerKeyRevoked,
        Kind::RateCard,
        Kind::RegionParams,
        Kind::LeaseRegistered,
        Kind::InvoiceIssued,
        Kind::Payment,
        Kind::CreditNote,
        Kind::CertificateIssued,
        Kind::VolumeTiers,
        Kind::TenantPlan,
        Kind::TenantRegistered,
        Kind::LogPolicy,
        Kind::NodeRegistered,
        Kind::RecordExcluded,
        Kind::NodeUpdated,
        Kind::ContractRegistered,
        Kind::Prepayment,
        Kind::ContractAmended,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::GpuUsage => "gpu_usage",
            Kind::Energy => "energy",
            Kind::SpotPrice => "spot_price",
            Kind::SignerKeyRegistered => "signer_key_registered",
            Kind::SignerKeyRevoked => "signer_key_revoked",
            Kind::RateCard => "rate_card",
            Kind::RegionParams => "region_params",
            Kind::LeaseRegistered => "lease_registered",
            Kind::InvoiceIssued => "invoice_issued",
            Kind::Payment => "payment",
            Kind::CreditNote => "credit_note",
            Kind::CertificateIssued => "certificate_issued",
            Kind::VolumeTiers => "volume_tiers",
            Kind::TenantPlan => "tenant_plan",
            Kind::TenantRegistered => "tenant_registered",
            Kind::LogPolicy => "log_policy",
            Kind::NodeRegistered => "node_registered",
            Kind::RecordExcluded => "record_excluded",
            Kind::NodeUpdated => "node_updated",
            Kind::ContractRegistered => "contract_registered",
            Kind::Prepayment => "prepayment",
            Kind::ContractAmended => "contract_amended",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The only role whose keys may sign this kind.
    pub fn signed_by(self) -> Role {
        match self {
            Kind::GpuUsage | Kind::Energy => Role::Node,
            Kind::SpotPrice => Role::Market,
            Kind::SignerKeyRegistered
            | Kind::SignerKeyRevoked
            | Kind::RateCard
            | Kind::RegionParams
            | Kind::LeaseRegistered
            | Kind::InvoiceIssued
            | Kind::Payment
            | Kind::CreditNote
            | Kind::CertificateIssued
            | Kind::VolumeTiers
            | Kind::TenantPlan
            | Kind::TenantRegistered
            | Kind::LogPolicy
            | Kind::NodeRegistered
            | Kind::RecordExcluded
            | Kind::NodeUpdated
            | Kind::ContractRegistered
            | Kind::Prepayment
            | Kind::ContractAmended => Role::Ledger,
        }
    }
}

/// What a signer is allowed to sign.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A GPU server's agent: `gpu_usage` and `energy`.
    Node,
    /// A market signer: `spot_price`.
    Market,
    /// The ledger itself, with the log key.
    Ledger,
}

impl Role {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Node => "node",
            Role::Market => "market",
            Role::Ledger => "ledger",
        }
    }

    /// Parses a wire name.
    pub fn parse(s: &str) -> Option<Role> {
        [Role::Node, Role::Market, Role::Ledger]
            .into_iter()
            .find(|r| r.as_str() == s)
    }
}

/// Declares a body struct and its wire twin: the same members, with the same serde
/// attributes, read as they arrive ([`OnWire`]: decimals, timestamps and lease classes as
/// strings), unknown members refused. The twin keeps the name serde's messages give
/// (`expected struct GpuUsageWire`). The struct's own derives serialise it. A member's
/// `@schema(…)` is its OpenAPI `schema` attribute, given to the struct only (the twin derives
/// no schema).
macro_rules! body {
    (
        $(#[$attr:meta])*
        pub struct $name:ident, read as $wire:ident {
            $($(#[$fattr:meta])* $(@schema($($schema:tt)*))? pub $field:ident: $ty:ty,)*
        }
    ) => {
        $(#[$attr])*
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        pub struct $name {
            $(
                $(#[$fattr])*
                $(#[cfg_attr(feature = "openapi", schema($($schema)*))])?
                pub $field: $ty,
            )*
        }

        #[doc = concat!("[`", stringify!($name), "`] as serde reads it, before validation.")]
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct $wire {
            $($(#[$fattr])* $field: <$ty as OnWire>::Form,)*
        }
    };
}

/// How a body member is read before validation: the types that need more than serde's own
/// checks (canonical decimals, strict timestamps, a class with its own refusal) as strings.
trait OnWire {
    type Form;
}

impl OnWire for String {
    type Form = String;
}

impl OnWire for u64 {
    type Form = u64;
}

impl OnWire for Decimal {
    type Form = String;
}

impl OnWire for Timestamp {
    type Form = String;
}

impl OnWire for LeaseClass {
    type Form = String;
}

impl<T: OnWire> OnWire for Option<T> {
    type Form = Option<T::Form>;
}

impl OnWire for Vec<Tier> {
    type Form = Vec<TierWire>;
}

impl OnWire for Vec<NodeGpu> {
    type Form = Vec<NodeGpu>;
}

impl OnWire for Vec<u32> {
    type Form = Vec<u32>;
}

impl OnWire for Vec<LeaseNode> {
    type Form = Vec<LeaseNodeWire>;
}

body! {
    /// GPU time used: `gpu_count` GPUs of one model on one node for [start, end).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize)]
    pub struct GpuUsage, read as GpuUsageWire {
        pub tenant: String,
        #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
        pub lease: Option<String>,
        pub region: String,
        pub node: String,
        pub gpu_model: String,
        /// May be fractional for shared slices (MIG, time-slicing).
        #[serde(serialize_with = "decimal::serialize")]
        @schema(value_type = crate::decimal::DecimalString)
        pub gpu_count: Decimal,
        pub start: Timestamp,
        pub end: Timestamp,
        /// Exactly `gpu_count × (end − start)`.
        #[serde(serialize_with = "decimal::serialize")]
        @schema(value_type = crate::decimal::DecimalString)
        pub gpu_seconds: Decimal,
    }
}

body! {
    /// Energy measured on one node over [start, end), optionally attributed to a tenant.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize)]
    pub struct Energy, read as EnergyWire {
        #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
        pub tenant: Option<String>,
        pub region: String,
        pub node: String,
        pub start: Timestamp,
        pub end: Timestamp,
        #[serde(serialize_with = "decimal::serialize")]
        @schema(value_type = crate::decimal::DecimalString)
        pub kwh: Decimal,
    }
}

body! {
    /// A spot price per GPU-hour for one region and GPU model, in force from `effective_from`
    /// until the next spot price for the same region, model and currency.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize)]
    pub struct SpotPrice, read as SpotPriceWire {
        pub region: String,
        pub gpu_model: String,
        #[serde(serialize_with = "decimal::serialize")]
        @schema(value_type = crate::decimal::DecimalString)
        pub price_per_gpu_hour: Decimal,
        /// ISO 4217 code, three upper-case letters.
        pub currency: String,
        pub effective_from: Timestamp,
    }
}

/// The ledger registered `public_key` (base64, 32 bytes) as `key_id` of `signer`, for the
/// nodes and regions it may sign records of (docs/PROTOCOL.md §5.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignerKeyRegistered {
    pub signer: String,
    pub role: Role,
    pub key_id: String,
    pub public_key: String,
    /// Node ids a `node` key may name (sorted, distinct); absent for `market` keys.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub nodes: Option<Vec<String>>,
    /// Region ids the key may name (sorted, distinct).
    pub regions: Vec<String>,
}

/// What a key may sign records for: node ids (node keys only) and regions, each sorted and
/// without repeats as the protocol spells them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyScope {
    pub nodes: Option<Vec<String>>,
    pub regions: Vec<String>,
}

impl KeyScope {
    /// A scope from lists in any order, sorted and without repeats.
    pub fn new(nodes: Option<Vec<String>>, mut regions: Vec<String>) -> KeyScope {
        let nodes = nodes.map(|mut n| {
            n.sort_unstable();
            n.dedup();
            n
        });
        regions.sort_unstable();
        regions.dedup();
        KeyScope { nodes, regions }
    }

    /// The scope a registration grants.
    pub fn of(r: &SignerKeyRegistered) -> KeyScope {
        KeyScope {
            nodes: r.nodes.clone(),
            regions: r.regions.clone(),
        }
    }
}

/// A registered tenant: records may name it (docs/PROTOCOL.md §5.14).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantRegistered {
    pub tenant: String,
}

/// A logged record of `tenant` excluded from rating (docs/PROTOCOL.md §5.17): invoices
/// computed after this entry neither rate it nor count it, and list it as excluded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RecordExcluded {
    pub tenant: String,
    /// The log index of the excluded `gpu_usage` or `energy` record.
    pub entry: u64,
    /// Why, for people (the tenant reads it on the invoice): 1 to
    /// [`MAX_EXCLUSION_REASON_BYTES`] bytes, no control characters or surrounding spaces.
    pub reason: String,
}

/// The admission policy in force from this entry on (docs/PROTOCOL.md §5.15).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogPolicy {
    /// A record may start at most this long before it arrives.
    pub max_record_age_seconds: u64,
    /// A record may end (and a spot price take effect in the past) at most this far from the
    /// ledger clock.
    pub max_future_skew_seconds: u64,
}

impl Default for LogPolicy {
    fn default() -> Self {
        LogPolicy {
            max_record_age_seconds: DEFAULT_MAX_RECORD_AGE_SECONDS,
            max_future_skew_seconds: DEFAULT_MAX_FUTURE_SKEW_SECONDS,
        }
    }
}

/// The ledger revoked `key_id` of `signer`: no record signed with it is accepted after this
/// entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignerKeyRevoked {
    pub signer: String,
    pub key_id: String,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub reason: Option<String>,
}

body! {
    /// A rate-card price per GPU-hour for a region, GPU model and lease class (on-demand or
    /// reserved; spot usage is priced by `spot_price` entries), in force from `effective_from`
    /// until the next rate card for the same region, model and class.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize)]
    pub struct RateCard, read as RateCardWire {
        pub region: String,
        pub gpu_model: String,
        pub lease_class: LeaseClass,
        pub currency: String,
        #[serde(serialize_with = "decimal::serialize")]
        @schema(value_type = crate::decimal::DecimalString)
        pub price_per_gpu_hour: Decimal,
        pub effective_from: Timestamp,
    }
}

body! {
    /// A region's energy parameters from `effective_from` on.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize)]
    pub struct RegionParameters, read as RegionParamsWire {
        pub region: String,
        pub currency: String,
        #[serde(serialize_with = "decimal::serialize")]
        @schema(value_type = crate::decimal::DecimalString)
        pub electricity_price_per_kwh: Decimal,
        /// Power usage effectiveness, at least 1.
        #[serde(serialize_with = "decimal::serialize")]
        @schema(value_type = crate::decimal::DecimalString)
        pub pue: Decimal,
        /// Grid carbon intensity, gCO2e per kWh.
        #[serde(serialize_with = "decimal::serialize")]
        @schema(value_type = crate::decimal::DecimalString)
        pub carbon_g_per_kwh: Decimal,
        pub effective_from: Timestamp,
    }
}

body! {
    /// What a lease covers on one node (docs/PROTOCOL.md §5.8): either whole GPUs by index
    /// (`gpus`), or a share of each of them (`gpus` with `share`, e.g. `0.5`: a fractional or
    /// MIG slice), or up to `count` GPUs of `gpu_model`, whichever of the node's GPUs of that
    /// model (for schedulers that move pods and jobs between GPUs).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize)]
    pub struct LeaseNode, read as LeaseNodeWire {
        pub node: String,
        /// GPU indexes of the node, strictly increasing; with no `gpu_model` or `count`.
        #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
        pub gpus: Option<Vec<u32>>,
        /// The share of each GPU in `gpus`, above 0 and below 1; absent for whole GPUs.
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            serialize_with = "canonical_option",
            deserialize_with = "present"
        )]
        @schema(value_type = Option<crate::decimal::DecimalString>)
        pub share: Option<Decimal>,
        /// With `count`, and no `gpus`: a GPU model of the node.
        #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
        pub gpu_model: Option<String>,
        /// With `gpu_model`: how many of the node's GPUs of that model, above 0.
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            serialize_with = "canonical_option",
            deserialize_with = "present"
        )]
        @schema(value_type = Option<crate::decimal::DecimalString>)
        pub count: Option<Decimal>,
    }
}

body! {
    /// A lease of `tenant`, billed as `class`, over the GPUs of `nodes` for its term
    /// [`from`, `to`) (no `to`: open-ended). Usage is billed only under a lease that covers its
    /// node, model and interval (docs/PROTOCOL.md §6.7, fleet).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize)]
    pub struct LeaseRegistered, read as LeaseWire {
        pub lease: String,
        pub tenant: String,
        pub class: LeaseClass,
        pub from: Timestamp,
        #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
        pub to: Option<Timestamp>,
        /// 1 to `MAX_LEASE_NODES` items.
        pub nodes: Vec<LeaseNode>,
    }
}

impl LeaseRegistered {
    /// Whether the lease names `node` in any item.
    pub fn names_node(&self, node: &str) -> bool {
        self.nodes.iter().any(|n| n.node == node)
    }

    /// Whether [start, end) lies within the lease's term.
    pub fn term_holds(&self, start: Timestamp, end: Timestamp) -> bool {
        start >= self.from && self.to.is_none_or(|to| end <= to)
    }

    /// Whether the lease's term and `other`'s share an instant.
    pub fn term_overlaps(&self, other: &LeaseRegistered) -> bool {
        self.to.is_none_or(|to| other.from < to) && other.to.is_none_or(|to| self.from < to)
    }
}

body! {
    /// An issued invoice, by its hash: the full invoice is recomputable from the log entries
    /// below `checkpoint_size` (docs/RATING.md).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize)]
    pub struct InvoiceIssued, read as InvoiceIssuedWire {
        pub number: String,
        pub tenant: String,
        pub period_from: Timestamp,
        pub period_to: Timestamp,
        pub currency: String,
        #[serde(serialize_with = "money_string")]
        @schema(value_type = crate::decimal::DecimalString)
        pub total: Decimal,
        pub checkpoint_size: u64,
        /// Lower-case hex SHA-256 of the invoice's JSON rendering.
        pub invoice_sha256: String,
    }
}

body! {
    /// An issued compute-usage certificate, by its hash (docs/PROTOCOL.md §13).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize)]
    pub struct CertificateIssued, read as CertificateIssuedWire {
        pub id: String,
        pub tenant: String,
        pub period_from: Timestamp,
        pub period_to: Timestamp,
        pub checkpoint_size: u64,
        /// Lower-case hex SHA-256 of the certificate's RFC 8785 JSON, `sig` included.
        pub certificate_sha256: String,
    }
}

body! {
    /// Money received (`Payment`) or credited (`CreditNote`) against an invoice.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize)]
    pub struct Settlement, read as SettlementWire {
        pub tenant: String,
        pub invoice: String,
        pub currency: String,
        #[serde(serialize_with = "money_string")]
        @schema(value_type = crate::decimal::DecimalString)
        pub amount: Decimal,
        /// Payment reference or credit-note reason, for people.
        #[serde(default)]
        pub note: String,
        /// The payment's (or credit note's) reference in the provider's books or the bank's,
        /// unique per tenant and kind (`reference_used`), so that one sent twice is recorded
        /// once. 1 to 128 bytes without control characters or surrounding spaces.
        #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
        pub external_reference: Option<String>,
    }
}

body! {
    /// One tier of a graduated schedule: the GPU-hours of a series counted within an invoice
    /// period above the previous tier's bound and up to `up_to_gpu_hours` (the last tier has
    /// no bound) are priced at `price_per_gpu_hour`.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize)]
    pub struct Tier, read as TierWire {
        /// Cumulative bound in GPU-hours; `None` only for the last, open tier.
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            serialize_with = "canonical_option",
            deserialize_with = "present"
        )]
        @schema(value_type = Option<crate::decimal::DecimalString>)
        pub up_to_gpu_hours: Option<Decimal>,
        #[serde(serialize_with = "decimal::serialize")]
        @schema(value_type = crate::decimal::DecimalString)
        pub price_per_gpu_hour: Decimal,
    }
}

body! {
    /// A plan's graduated volume tiers for one series (region, GPU model, lease class), in
    /// force from `effective_from` until the next `volume_tiers` entry of the same plan and
    /// series. For tenants on the plan they replace the series' rate card (docs/RATING.md).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize)]
    pub struct VolumeTiers, read as VolumeTiersWire {
        pub plan: String,
        pub region: String,
        pub gpu_model: String,
        /// On-demand or reserved; spot usage is never tiered.
        pub lease_class: LeaseClass,
        pub currency: String,
        /// 1 to `MAX_VOLUME_TIERS` tiers with strictly increasing bounds; only the last is
        /// open.
        pub tiers: Vec<Tier>,
        pub effective_from: Timestamp,
    }
}

body! {
    /// `tenant` is on `plan` from `effective_from` until its next `tenant_plan` entry. A plan
    /// with no tiers for a series leaves that series on the rate card.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize)]
    pub struct TenantPlan, read as TenantPlanWire {
        pub tenant: String,
        pub plan: String,
        pub effective_from: Timestamp,
    }
}

/// One GPU of a registered node: its index on the node (as `nvidia-smi` numbers it), its UUID,
/// its model (the GPU model records name) and its MIG partition, if any.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NodeGpu {
    pub index: u32,
    /// 1 to 128 visible ASCII characters, e.g. `GPU-5f1c…`.
    pub uuid: String,
    pub model: String,
    /// Absent for a GPU used whole (or time-sliced: a lease's `share`); present for a GPU
    /// partitioned into MIG instances, which records name as `<model>/<profile>`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub mig: Option<MigLayout>,
}

/// A GPU's MIG partition (docs/PROTOCOL.md §5.16): its compute slices and the instances made
/// of them, by profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MigLayout {
    /// The GPU's compute slices, 1 to `MAX_MIG_SLICES` (7 on an A100, H100, H200 or B200).
    pub slices: u32,
    /// 1 to `MAX_MIG_SLICES` profiles, by increasing name, together at most `slices` slices.
    pub instances: Vec<MigInstances>,
}

/// `count` MIG instances of one profile (`1g.10gb`: 1 compute slice, 10 GB).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MigInstances {
    /// `<slices>g.<GB>gb`, as `nvidia-smi mig -lgip` names it.
    pub profile: String,
    /// 1 to `MAX_MIG_SLICES`.
    pub count: u32,
}

impl MigInstances {
    /// The compute slices one instance of the profile takes (its leading digit).
    pub fn slices(&self) -> u32 {
        mig_profile_slices(&self.profile).unwrap_or(0)
    }
}

/// The compute slices of a MIG profile name `<g>g.<GB>gb` (g 1 to `MAX_MIG_SLICES`, GB 1 to
/// 9999 without leading zero), or `None` when it is not one.
pub fn mig_profile_slices(profile: &str) -> Option<u32> {
    let (g, memory) = profile.split_once("g.")?;
    let gb = memory.strip_suffix("gb")?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if g.len() != 1 || !digits(g) || !digits(gb) || gb.len() > 4 || gb.starts_with('0') {
        return None;
    }
    let slices: u32 = g.parse().ok()?;
    (1..=MAX_MIG_SLICES).contains(&slices).then_some(slices)
}

impl NodeGpu {
    /// How many units of GPU model `model` this GPU is: unpartitioned, 1 when it is of that
    /// model; partitioned, the count of the profile's instances when `model` is
    /// `<its model>/<profile>`; otherwise 0.
    pub fn units_of(&self, model: &str) -> u32 {
        match &self.mig {
            None => u32::from(self.model == model),
            Some(layout) => model
                .strip_prefix(self.model.as_str())
                .and_then(|m| m.strip_prefix('/'))
                .and_then(|p| layout.instances.iter().find(|i| i.profile == p))
                .map_or(0, |i| i.count),
        }
    }

    /// What one unit of `model` on this GPU is, in [`GPU_UNITS`] of a GPU: the whole GPU when
    /// unpartitioned, an instance's slices of the GPU's slices when partitioned; 0 when the
    /// GPU has no unit of `model`.
    pub fn unit_share(&self, model: &str) -> u32 {
        if self.units_of(model) == 0 {
            return 0;
        }
        match &self.mig {
            None => GPU_UNITS,
            Some(layout) => {
                let profile = &model[self.model.len() + 1..];
                GPU_UNITS / layout.slices * mig_profile_slices(profile).unwrap_or(0)
            }
        }
    }

    /// The models this GPU's units are: its own, or one per MIG profile.
    pub fn unit_models(&self) -> Vec<String> {
        match &self.mig {
            None => vec![self.model.clone()],
            Some(layout) => layout
                .instances
                .iter()
                .map(|i| format!("{}/{}", self.model, i.profile))
                .collect(),
        }
    }
}

body! {
    /// A GPU server of the fleet (docs/PROTOCOL.md §5.16): its region, optional hub, its GPUs
    /// (by increasing index, UUIDs distinct), and the most power one GPU's share of the node
    /// may draw, which bounds the node's energy records.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize)]
    pub struct NodeRegistered, read as NodeWire {
        pub node: String,
        pub region: String,
        #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
        pub hub: Option<String>,
        /// 1 to `MAX_NODE_GPUS` GPUs.
        pub gpus: Vec<NodeGpu>,
        /// Watts, above 0 and at most `MAX_WATTS_PER_GPU`.
        #[serde(serialize_with = "decimal::serialize")]
        @schema(value_type = crate::decimal::DecimalString)
        pub max_watts_per_gpu: Decimal,
    }
}

body! {
    /// Capacity added to a registered node (docs/PROTOCOL.md §5.18): GPUs under new indexes,
    /// a replaced board (an index the node has, its model and partition, a new UUID), or a
    /// higher power limit. Nothing a node had is ever taken away, so no record or lease the
    /// log accepted before an update is judged otherwise after it.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize)]
    pub struct NodeUpdated, read as NodeUpdatedWire {
        pub node: String,
        /// 1 to `MAX_NODE_GPUS` GPUs, by increasing index, UUIDs distinct; absent when only
        /// the power limit rises.
        #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "present")]
        pub gpus: Option<Vec<NodeGpu>>,
        /// Watts, above the node's limit so far and at most `MAX_WATTS_PER_GPU`; absent when
        /// unchanged.
        #[serde(
            default,
            skip_serializing_if = "Option::is_none",
            serialize_with = "canonical_option",
            deserialize_with = "present"
        )]
        @schema(value_type = Option<crate::decimal::DecimalString>)
        pub max_watts_per_gpu: Option<Decimal>,
    }
}

/// Declares [`Body`], one variant per kind (named as the kind) holding its body type, and the
/// dispatchers that map a kind to its body type: [`Body::kind`], [`Body::to_value`] (serde)
/// and [`Body::from_value`] (serde, then the type's [`Record::check`]).
macro_rules! bodies {
    ($($kind:ident($ty:ty),)*) => {
        /// A validated body of any kind.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum Body {
            $($kind($ty),)*
        }

        impl Body {
            /// The body's kind.
            pub fn kind(&self) -> Kind {
                match self {
                    $(Body::$kind(_) => Kind::$kind,)*
                }
            }

            /// The wire JSON of this body (canonical decimals and timestamps).
            pub fn to_value(&self) -> Value {
                match self {
                    $(Body::$kind(b) => serde_json::to_value(b).expect("plain struct"),)*
                }
            }

            /// Reads and validates a body of `kind`: its shape and every rule that needs
            /// neither the log nor the clock (those are in [`crate::admission`]).
            pub fn from_value(kind: Kind, body: &Value) -> Result<Body, Rejection> {
                match kind {
                    $(Kind::$kind => read(body).map(Body::$kind),)*
                }
            }
        }
    };
}

bodies! {
    GpuUsage(GpuUsage),
    Energy(Energy),
    SpotPrice(SpotPrice),
    SignerKeyRegistered(SignerKeyRegistered),
    SignerKeyRevoked(SignerKeyRevoked),
    RateCard(RateCard),
    RegionParams(RegionParameters),
    LeaseRegistered(LeaseRegistered),
    InvoiceIssued(InvoiceIssued),
    Payment(Settlement),
    CreditNote(Settlement),
    CertificateIssued(CertificateIssued),
    VolumeTiers(VolumeTiers),
    TenantPlan(TenantPlan),
    TenantRegistered(TenantRegistered),
    LogPolicy(LogPolicy),
    NodeRegistered(NodeRegistered),
    RecordExcluded(RecordExcluded),
    NodeUpdated(NodeUpdated),
    ContractRegistered(ContractRegistered),
    Prepayment(Prepayment),
    ContractAmended(ContractAmended),
}

impl Body {
    /// The tenant the entry belongs to, if any (used for tenant-scoped queries).
    pub fn tenant(&self) -> Option<&str> {
        match self {
            Body::GpuUsage(u) => Some(&u.tenant),
            Body::Energy(e) => e.tenant.as_deref(),
            Body::LeaseRegistered(l) => Some(&l.tenant),
            Body::InvoiceIssued(i) => Some(&i.tenant),
            Body::Payment(p) | Body::CreditNote(p) => Some(&p.tenant),
            Body::CertificateIssued(c) => Some(&c.tenant),
            Body::TenantPlan(p) => Some(&p.tenant),
            Body::TenantRegistered(t) => Some(&t.tenant),
            Body::RecordExcluded(x) => Some(&x.tenant),
            Body::ContractRegistered(c) => Some(&c.tenant),
            Body::Prepayment(p) => Some(&p.tenant),
            Body::ContractAmended(a) => Some(&a.tenant),
            _ => None,
        }
    }

    /// The measurement stream and interval of a usage or energy record. Two records of one
    /// stream must never overlap in time, or the same GPU-seconds or kWh would be billed twice.
    /// Identifiers cannot contain `|`, so the stream key is unambiguous.
    pub fn stream(&self) -> Option<(String, Timestamp, Timestamp)> {
        match self {
            Body::GpuUsage(u) => Some((
                format!(
                    "gpu_usage|{}|{}|{}|{}",
                    u.node,
                    u.tenant,
                    u.lease.as_deref().unwrap_or(""),
                    u.gpu_model
                ),
                u.start,
                u.end,
            )),
            Body::Energy(e) => Some((
                format!("energy|{}|{}", e.node, e.tenant.as_deref().unwrap_or("")),
                e.start,
                e.end,
            )),
            _ => None,
        }
    }
}

/// A body of one kind: its serde derives spell it on the wire; [`Record::check`] is its
/// validation.
trait Record: Serialize + Sized {
    /// What serde reads: the body itself, or its wire twin (see [`body!`]).
    type Wire: DeserializeOwned;
    /// Every rule the body must pass on its own (docs/PROTOCOL.md §5), field by field in the
    /// order of its section: the body, or the first rejection.
    fn check(w: Self::Wire) -> Result<Self, Rejection>;
}

/// Reads a body of type `T`: serde (shape, `malformed`), then its validation.
fn read<T: Record>(body: &Value) -> Result<T, Rejection> {
    let w =
        T::Wire::deserialize(body).map_err(|e| Rejection::field(Reason::Malformed, "body", e))?;
    T::check(w)
}

impl Record for GpuUsage {
    type Wire = GpuUsageWire;
    fn check(w: GpuUsageWire) -> Result<Self, Rejection> {
        let tenant = id("body.tenant", &w.tenant)?;
        let lease = w
            .lease
            .as_deref()
            .map(|l| id("body.lease", l))
            .transpose()?;
        let region = id("body.region", &w.region)?;
        let node = id("body.node", &w.node)?;
        let gpu_model = id("body.gpu_model", &w.gpu_model)?;
        let gpu_count = quantity("body.gpu_count", &w.gpu_count, Decimal::from(MAX_GPU_COUNT))?;
        if gpu_count.is_zero() {
            return Err(Rejection::field(
                Reason::QuantityOutOfRange,
                "body.gpu_count",
                "must be above 0",
            ));
        }
        let (start, end) = interval(&w.start, &w.end)?;
        let max_seconds = Decimal::from(MAX_GPU_COUNT) * Decimal::from(MAX_INTERVAL_SECONDS);
        let gpu_seconds = quantity("body.gpu_seconds", &w.gpu_seconds, max_seconds)?;
        let expected = gpu_count * Decimal::from(start.seconds_until(end));
        if gpu_seconds != expected {
            return Err(Rejection::field(
                Reason::GpuSecondsMismatch,
                "body.gpu_seconds",
                format!(
                    "is {gpu_seconds}, but gpu_count × (end − start) = {} × {} = {}",
                    decimal::to_canonical(gpu_count),
                    start.seconds_until(end),
                    decimal::to_canonical(expected)
                ),
            ));
        }
        Ok(GpuUsage {
            tenant,
            lease,
            region,
            node,
            gpu_model,
            gpu_count,
            start,
            end,
            gpu_seconds,
        })
    }
}

impl Record for Energy {
    type Wire = EnergyWire;
    fn check(w: EnergyWire) -> Result<Self, Rejection> {
        let tenant = w
            .tenant
            .as_deref()
            .map(|t| id("body.tenant", t))
            .transpose()?;
        let region = id("body.region", &w.region)?;
        let node = id("body.node", &w.node)?;
        let (start, end) = interval(&w.start, &w.end)?;
        let kwh = quantity("body.kwh", &w.kwh, Decimal::from(MAX_KWH_PER_RECORD))?;
        Ok(Energy {
            tenant,
            region,
            node,
            start,
            end,
            kwh,
        })
    }
}

impl Record for SpotPrice {
    type Wire = SpotPriceWire;
    fn check(w: SpotPriceWire) -> Result<Self, Rejection> {
        Ok(SpotPrice {
            region: id("body.region", &w.region)?,
            gpu_model: id("body.gpu_model", &w.gpu_model)?,
            price_per_gpu_hour: quantity(
                "body.price_per_gpu_hour",
                &w.price_per_gpu_hour,
                Decimal::from(MAX_PRICE_PER_GPU_HOUR),
            )?,
            currency: currency("body.currency", &w.currency)?,
            effective_from: ts("body.effective_from", &w.effective_from)?,
        })
    }
}

impl Record for SignerKeyRegistered {
    type Wire = Self;
    fn check(r: Self) -> Result<Self, Rejection> {
        id("body.signer", &r.signer)?;
        key_id("body.key_id", &r.key_id)?;
        let key = keys::decode_public(&r.public_key)
            .map_err(|e| Rejection::field(Reason::InvalidField, "body.public_key", e))?;
        if keys::encode_public(&key) != r.public_key {
            return Err(Rejection::field(
                Reason::InvalidField,
                "body.public_key",
                "is not standard base64 of 32 bytes",
            ));
        }
        role_nodes(r.role, r.nodes.as_deref())?;
        id_list("body.regions", &r.regions, MAX_SIGNER_REGIONS)?;
        if keys::key_id(&key) != r.key_id {
            return Err(Rejection::field(
                Reason::InvalidField,
                "body.key_id",
                format!(
                    "is not the key id of body.public_key ({})",
                    keys::key_id(&key)
                ),
            ));
        }
        Ok(r)
    }
}

/// A registration's role and nodes: a node key names its nodes, a market key none, and the
/// ledger registers no ledger keys.
fn role_nodes(role: Role, nodes: Option<&[String]>) -> Result<(), Rejection> {
    match (role, nodes) {
        (Role::Node, Some(nodes)) => id_list("body.nodes", nodes, MAX_SIGNER_NODES),
        (Role::Node, None) => Err(Rejection::field(
            Reason::Malformed,
            "body.nodes",
            "is required for a node key",
        )),
        (Role::Market, None) => Ok(()),
        (Role::Market, Some(_)) => Err(Rejection::field(
            Reason::Malformed,
            "body.nodes",
            "must be absent for a market key",
        )),
        (Role::Ledger, _) => Err(Rejection::field(
            Reason::InvalidField,
            "body.role",
            "must be node or market: the ledger registers no ledger keys",
        )),
    }
}

impl Record for SignerKeyRevoked {
    type Wire = Self;
    fn check(r: Self) -> Result<Self, Rejection> {
        id("body.signer", &r.signer)?;
        key_id("body.key_id", &r.key_id)?;
        Ok(r)
    }
}

impl Record for TenantRegistered {
    type Wire = Self;
    fn check(t: Self) -> Result<Self, Rejection> {
        id("body.tenant", &t.tenant)?;
        Ok(t)
    }
}

impl Record for RecordExcluded {
    type Wire = Self;
    fn check(x: Self) -> Result<Self, Rejection> {
        id("body.tenant", &x.tenant)?;
        trimmed_text("body.reason", &x.reason, MAX_EXCLUSION_REASON_BYTES)?;
        Ok(x)
    }
}

impl Record for LogPolicy {
    type Wire = Self;
    fn check(p: Self) -> Result<Self, Rejection> {
        let (lo, hi) = POLICY_RECORD_AGE_SECONDS;
        if !(lo..=hi).contains(&p.max_record_age_seconds) {
            return Err(Rejection::field(
                Reason::QuantityOutOfRange,
                "body.max_record_age_seconds",
                format!("must be between {lo} and {hi}"),
            ));
        }
        let (lo, hi) = POLICY_FUTURE_SKEW_SECONDS;
        if !(lo..=hi).contains(&p.max_future_skew_seconds) {
            return Err(Rejection::field(
                Reason::QuantityOutOfRange,
                "body.max_future_skew_seconds",
                format!("must be between {lo} and {hi}"),
            ));
        }
        Ok(p)
    }
}

impl Record for RateCard {
    type Wire = RateCardWire;
    fn check(w: RateCardWire) -> Result<Self, Rejection> {
        let lease_class = priced_class(&w.lease_class)?;
        Ok(RateCard {
            region: id("body.region", &w.region)?,
            gpu_model: id("body.gpu_model", &w.gpu_model)?,
            lease_class,
            currency: currency("body.currency", &w.currency)?,
            price_per_gpu_hour: quantity(
                "body.price_per_gpu_hour",
                &w.price_per_gpu_hour,
                Decimal::from(MAX_PRICE_PER_GPU_HOUR),
            )?,
            effective_from: ts("body.effective_from", &w.effective_from)?,
        })
    }
}

impl Record for RegionParameters {
    type Wire = RegionParamsWire;
    fn check(w: RegionParamsWire) -> Result<Self, Rejection> {
        let pue = quantity("body.pue", &w.pue, Decimal::from(MAX_PUE))?;
        if pue < Decimal::ONE {
            return Err(Rejection::field(
                Reason::QuantityOutOfRange,
                "body.pue",
                "must be at least 1",
            ));
        }
        Ok(RegionParameters {
            region: id("body.region", &w.region)?,
            currency: currency("body.currency", &w.currency)?,
            electricity_price_per_kwh: quantity(
                "body.electricity_price_per_kwh",
                &w.electricity_price_per_kwh,
                Decimal::from(MAX_PRICE_PER_KWH),
            )?,
            pue,
            carbon_g_per_kwh: quantity(
                "body.carbon_g_per_kwh",
                &w.carbon_g_per_kwh,
                Decimal::from(MAX_CARBON_G_PER_KWH),
            )?,
            effective_from: ts("body.effective_from", &w.effective_from)?,
        })
    }
}

impl Record for LeaseRegistered {
    type Wire = LeaseWire;
    fn check(w: LeaseWire) -> Result<Self, Rejection> {
        let class = match w.class.as_str() {
            "on_demand" => LeaseClass::OnDemand,
            "reserved" => LeaseClass::Reserved,
            "spot" => LeaseClass::Spot,
            _ => {
                return Err(Rejection::field(
                    Reason::InvalidField,
                    "body.class",
                    "must be on_demand, reserved or spot",
                ))
            }
        };
        let lease = id("body.lease", &w.lease)?;
        let tenant = id("body.tenant", &w.tenant)?;
        let from = ts("body.from", &w.from)?;
        let to = w.to.as_deref().map(|t| ts("body.to", t)).transpose()?;
        if let Some(to) = to.filter(|to| *to <= from) {
            return Err(Rejection::field(
                Reason::EmptyInterval,
                "body.to",
                format!("({to}) is not after body.from ({from})"),
            ));
        }
        Ok(LeaseRegistered {
            lease,
            tenant,
            class,
            from,
            to,
            nodes: lease_nodes(w.nodes)?,
        })
    }
}

/// A lease's items: 1 to `MAX_LEASE_NODES`, each either GPUs (strictly increasing indexes, an
/// optional share strictly between 0 and 1) or a GPU model with a count above 0; no GPU of a
/// node and no model of a node's counts listed twice.
fn lease_nodes(wire: Vec<LeaseNodeWire>) -> Result<Vec<LeaseNode>, Rejection> {
    if wire.is_empty() || wire.len() > MAX_LEASE_NODES {
        return Err(Rejection::field(
            if wire.is_empty() {
                Reason::InvalidField
            } else {
                Reason::QuantityOutOfRange
            },
            "body.nodes",
            format!("a lease covers 1 to {MAX_LEASE_NODES} items"),
        ));
    }
    let mut seen: std::collections::HashSet<(String, Option<u32>, Option<String>)> =
        std::collections::HashSet::new();
    let mut out = Vec::with_capacity(wire.len());
    for (i, w) in wire.into_iter().enumerate() {
        let field = |m: &str| format!("body.nodes[{i}].{m}");
        let node = id(&field("node"), &w.node)?;
        let item = match (w.gpus, w.gpu_model, w.count) {
            (Some(gpus), None, None) => {
                if gpus.is_empty() || gpus.len() > MAX_NODE_GPUS {
                    return Err(Rejection::field(
                        Reason::QuantityOutOfRange,
                        &field("gpus"),
                        format!("lists 1 to {MAX_NODE_GPUS} GPUs"),
                    ));
                }
                if gpus.windows(2).any(|p| p[1] <= p[0]) {
                    return Err(Rejection::field(
                        Reason::InvalidField,
                        &field("gpus"),
                        "GPUs are listed by strictly increasing index",
                    ));
                }
                for g in &gpus {
                    if !seen.insert((node.clone(), Some(*g), None)) {
                        return Err(Rejection::field(
                            Reason::InvalidField,
                            &field("gpus"),
                            format!("GPU {g} of {node} is listed twice"),
                        ));
                    }
                }
                let share = w
                    .share
                    .as_deref()
                    .map(|s| quantity(&field("share"), s, Decimal::ONE))
                    .transpose()?;
                if share.is_some_and(|s| s.is_zero() || s == Decimal::ONE) {
                    return Err(Rejection::field(
                        Reason::QuantityOutOfRange,
                        &field("share"),
                        "is above 0 and below 1 (whole GPUs have no share)",
                    ));
                }
                LeaseNode {
                    node,
                    gpus: Some(gpus),
                    share,
                    gpu_model: None,
                    count: None,
                }
            }
            (None, Some(model), Some(count)) if w.share.is_none() => {
                let model = id(&field("gpu_model"), &model)?;
                let most = MAX_NODE_GPUS * MAX_MIG_SLICES as usize;
                let count = quantity(&field("count"), &count, Decimal::from(most))?;
                if count.is_zero() {
                    return Err(Rejection::field(
                        Reason::QuantityOutOfRange,
                        &field("count"),
                        "must be above 0",
                    ));
                }
                if !seen.insert((node.clone(), None, Some(model.clone()))) {
                    return Err(Rejection::field(
                        Reason::InvalidField,
                        &field("gpu_model"),
                        format!("{model} of {node} is listed twice"),
                    ));
                }
                LeaseNode {
                    node,
                    gpus: None,
                    share: None,
                    gpu_model: Some(model),
                    count: Some(count),
                }
            }
            _ => {
                return Err(Rejection::field(
                    Reason::InvalidField,
                    &format!("body.nodes[{i}]"),
                    "covers either gpus (with an optional share) or a gpu_model with a count",
                ))
            }
        };
        out.push(item);
    }
    Ok(out)
}

impl Record for InvoiceIssued {
    type Wire = InvoiceIssuedWire;
    fn check(w: InvoiceIssuedWire) -> Result<Self, Rejection> {
        sha256_hex("body.invoice_sha256", &w.invoice_sha256)?;
        Ok(InvoiceIssued {
            number: id("body.number", &w.number)?,
            tenant: id("body.tenant", &w.tenant)?,
            period_from: ts("body.period_from", &w.period_from)?,
            period_to: ts("body.period_to", &w.period_to)?,
            currency: currency("body.currency", &w.currency)?,
            total: money("body.total", &w.total)?,
            checkpoint_size: w.checkpoint_size,
            invoice_sha256: w.invoice_sha256,
        })
    }
}

impl Record for CertificateIssued {
    type Wire = CertificateIssuedWire;
    fn check(w: CertificateIssuedWire) -> Result<Self, Rejection> {
        sha256_hex("body.certificate_sha256", &w.certificate_sha256)?;
        if !super::ids::is_certificate_id(&w.id) {
            return Err(Rejection::field(
                Reason::InvalidField,
                "body.id",
                "must be CERT- and six or more digits",
            ));
        }
        let period_from = ts("body.period_from", &w.period_from)?;
        let period_to = ts("body.period_to", &w.period_to)?;
        if period_from >= period_to {
            return Err(Rejection::field(
                Reason::EmptyInterval,
                "body.period_to",
                "must be after period_from",
            ));
        }
        Ok(CertificateIssued {
            id: w.id,
            tenant: id("body.tenant", &w.tenant)?,
            period_from,
            period_to,
            checkpoint_size: w.checkpoint_size,
            certificate_sha256: w.certificate_sha256,
        })
    }
}

impl Record for Settlement {
    type Wire = SettlementWire;
    fn check(w: SettlementWire) -> Result<Self, Rejection> {
        let amount = money("body.amount", &w.amount)?;
        if amount <= Decimal::ZERO {
            return Err(Rejection::field(
                Reason::QuantityOutOfRange,
                "body.amount",
                "must be above 0",
            ));
        }
        if w.note.len() > 500 || w.note.chars().any(char::is_control) {
            return Err(Rejection::field(
                Reason::InvalidField,
                "body.note",
                "at most 500 bytes without control characters",
            ));
        }
        if let Some(r) = &w.external_reference {
            trimmed_text("body.external_reference", r, MAX_EXTERNAL_REFERENCE_BYTES)?;
        }
        Ok(Settlement {
            tenant: id("body.tenant", &w.tenant)?,
            invoice: id("body.invoice", &w.invoice)?,
            currency: currency("body.currency", &w.currency)?,
            amount,
            note: w.note,
            external_reference: w.external_reference,
        })
    }
}

impl Record for NodeRegistered {
    type Wire = NodeWire;
    fn check(w: NodeWire) -> Result<Self, Rejection> {
        let node = id("body.node", &w.node)?;
        let region = id("body.region", &w.region)?;
        let hub = w.hub.as_deref().map(|h| id("body.hub", h)).transpose()?;
        node_gpus(&w.gpus)?;
        Ok(NodeRegistered {
            node,
            region,
            hub,
            gpus: w.gpus,
            max_watts_per_gpu: watts(&w.max_watts_per_gpu)?,
        })
    }
}

impl Record for NodeUpdated {
    type Wire = NodeUpdatedWire;
    fn check(w: NodeUpdatedWire) -> Result<Self, Rejection> {
        let node = id("body.node", &w.node)?;
        if let Some(gpus) = &w.gpus {
            node_gpus(gpus)?;
        }
        let max_watts_per_gpu = w.max_watts_per_gpu.as_deref().map(watts).transpose()?;
        if w.gpus.is_none() && max_watts_per_gpu.is_none() {
            return Err(Rejection::field(
                Reason::InvalidField,
                "body.gpus",
                "an update adds GPUs, raises max_watts_per_gpu, or both",
            ));
        }
        Ok(NodeUpdated {
            node,
            gpus: w.gpus,
            max_watts_per_gpu,
        })
    }
}

/// A node's power limit per GPU: above 0 and at most `MAX_WATTS_PER_GPU`.
fn watts(s: &str) -> Result<Decimal, Rejection> {
    let field = "body.max_watts_per_gpu";
    let watts = quantity(field, s, Decimal::from(MAX_WATTS_PER_GPU))?;
    if watts.is_zero() {
        return Err(Rejection::field(
            Reason::QuantityOutOfRange,
            field,
            "must be above 0",
        ));
    }
    Ok(watts)
}

/// The GPUs of a `node_registered` or `node_updated` entry: 1 to `MAX_NODE_GPUS`, by strictly
/// increasing index, UUIDs of visible ASCII and distinct, models ids, MIG partitions whole.
fn node_gpus(gpus: &[NodeGpu]) -> Result<(), Rejection> {
    if gpus.is_empty() || gpus.len() > MAX_NODE_GPUS {
        return Err(Rejection::field(
            Reason::QuantityOutOfRange,
            "body.gpus",
            format!("lists 1 to {MAX_NODE_GPUS} GPUs"),
        ));
    }
    let mut uuids = std::collections::HashSet::new();
    for (i, g) in gpus.iter().enumerate() {
        if i > 0 && g.index <= gpus[i - 1].index {
            return Err(Rejection::field(
                Reason::InvalidField,
                &format!("body.gpus[{i}].index"),
                "GPUs are listed by strictly increasing index",
            ));
        }
        let visible = |c: char| c.is_ascii_graphic();
        if g.uuid.is_empty() || g.uuid.len() > MAX_ID_LEN || !g.uuid.chars().all(visible) {
            return Err(Rejection::field(
                Reason::InvalidField,
                &format!("body.gpus[{i}].uuid"),
                format!("1 to {MAX_ID_LEN} visible ASCII characters"),
            ));
        }
        if !uuids.insert(g.uuid.as_str()) {
            return Err(Rejection::field(
                Reason::InvalidField,
                &format!("body.gpus[{i}].uuid"),
                format!("{} is listed twice", g.uuid),
            ));
        }
        id(&format!("body.gpus[{i}].model"), &g.model)?;
        if let Some(layout) = &g.mig {
            mig_layout(&format!("body.gpus[{i}].mig"), &g.model, layout)?;
            if let Some(other) = gpus[..i].iter().find(|o| {
                o.model == g.model && o.mig.as_ref().is_some_and(|m| m.slices != layout.slices)
            }) {
                return Err(mig_slices_differ(i, g, other));
            }
        }
    }
    Ok(())
}

/// The refusal of GPU `i`, partitioned into other slices than `other`, a partitioned GPU of
/// the same model: one MIG profile of a model is one share of a GPU on a node (what a count of
/// its instances may draw, §6.7 fleet).
pub fn mig_slices_differ(i: usize, g: &NodeGpu, other: &NodeGpu) -> Rejection {
    Rejection::field(
        Reason::InvalidField,
        &format!("body.gpus[{i}].mig.slices"),
        format!(
            "GPU {} of model {} has {} slices, GPU {} of the node {}: a node's partitioned GPUs of one model have the same slices",
            g.index,
            g.model,
            g.mig.as_ref().map_or(0, |m| m.slices),
            other.index,
            other.mig.as_ref().map_or(0, |m| m.slices)
        ),
    )
}

/// A MIG partition: 1 to `MAX_MIG_SLICES` slices; 1 to `MAX_MIG_SLICES` profiles by strictly
/// increasing name, each `<g>g.<GB>gb` with g within the slices, `count` 1 to
/// `MAX_MIG_SLICES`, `<model>/<profile>` an id; the instances together within the slices.
fn mig_layout(field: &str, model: &str, layout: &MigLayout) -> Result<(), Rejection> {
    if !(1..=MAX_MIG_SLICES).contains(&layout.slices) {
        return Err(Rejection::field(
            Reason::InvalidField,
            &format!("{field}.slices"),
            format!("a GPU has 1 to {MAX_MIG_SLICES} compute slices"),
        ));
    }
    let n = layout.instances.len();
    if n == 0 || n > MAX_MIG_SLICES as usize {
        return Err(Rejection::field(
            Reason::InvalidField,
            &format!("{field}.instances"),
            format!("lists 1 to {MAX_MIG_SLICES} profiles"),
        ));
    }
    let mut used = 0;
    for (j, inst) in layout.instances.iter().enumerate() {
        let at = format!("{field}.instances[{j}]");
        let slices = mig_profile_slices(&inst.profile)
            .filter(|g| *g <= layout.slices)
            .ok_or_else(|| {
                Rejection::field(
                    Reason::InvalidField,
                    &format!("{at}.profile"),
                    format!(
                        "is not a MIG profile <g>g.<GB>gb of at most the GPU's {} slices",
                        layout.slices
                    ),
                )
            })?;
        if j > 0 && inst.profile <= layout.instances[j - 1].profile {
            return Err(Rejection::field(
                Reason::InvalidField,
                &format!("{at}.profile"),
                "profiles are listed once each, by increasing name",
            ));
        }
        if !(1..=MAX_MIG_SLICES).contains(&inst.count) {
            return Err(Rejection::field(
                Reason::InvalidField,
                &format!("{at}.count"),
                format!("1 to {MAX_MIG_SLICES} instances"),
            ));
        }
        id(
            &format!("{at}.profile"),
            &format!("{model}/{}", inst.profile),
        )?;
        used += slices * inst.count;
    }
    if used > layout.slices {
        return Err(Rejection::field(
            Reason::InvalidField,
            &format!("{field}.instances"),
            format!("take {used} compute slices of the GPU's {}", layout.slices),
        ));
    }
    Ok(())
}

impl Record for VolumeTiers {
    type Wire = VolumeTiersWire;
    fn check(w: VolumeTiersWire) -> Result<Self, Rejection> {
        Ok(VolumeTiers {
            plan: id("body.plan", &w.plan)?,
            region: id("body.region", &w.region)?,
            gpu_model: id("body.gpu_model", &w.gpu_model)?,
            lease_class: priced_class(&w.lease_class)?,
            currency: currency("body.currency", &w.currency)?,
            tiers: tiers(w.tiers)?,
            effective_from: ts("body.effective_from", &w.effective_from)?,
        })
    }
}

/// A schedule's tiers: 1 to `MAX_VOLUME_TIERS`, bounds strictly increasing, only the last
/// open.
fn tiers(wire: Vec<TierWire>) -> Result<Vec<Tier>, Rejection> {
    if wire.is_empty() || wire.len() > MAX_VOLUME_TIERS {
        return Err(Rejection::field(
            if wire.is_empty() {
                Reason::InvalidField
            } else {
                Reason::QuantityOutOfRange
            },
            "body.tiers",
            format!(
                "holds {} tiers; 1 to {MAX_VOLUME_TIERS} are allowed",
                wire.len()
            ),
        ));
    }
    let last = wire.len() - 1;
    let mut tiers = Vec::with_capacity(wire.len());
    let mut below = Decimal::ZERO;
    for (i, t) in wire.into_iter().enumerate() {
        let up_to_gpu_hours = tier_bound(i, t.up_to_gpu_hours, i == last, below)?;
        below = up_to_gpu_hours.unwrap_or(below);
        let price_per_gpu_hour = quantity(
            &format!("body.tiers[{i}].price_per_gpu_hour"),
            &t.price_per_gpu_hour,
            Decimal::from(MAX_PRICE_PER_GPU_HOUR),
        )?;
        tiers.push(Tier {
            up_to_gpu_hours,
            price_per_gpu_hour,
        });
    }
    Ok(tiers)
}

/// The bound of tier `i`: absent on the last tier, else present and above `below`, the
/// previous tier's bound (or 0).
fn tier_bound(
    i: usize,
    bound: Option<String>,
    last: bool,
    below: Decimal,
) -> Result<Option<Decimal>, Rejection> {
    let field = format!("body.tiers[{i}].up_to_gpu_hours");
    match (bound, last) {
        (None, true) => Ok(None),
        (Some(_), true) => Err(Rejection::field(
            Reason::InvalidField,
            &field,
            "must be absent: the last tier is open",
        )),
        (None, false) => Err(Rejection::field(
            Reason::InvalidField,
            &field,
            "is required on every tier but the last",
        )),
        (Some(b), false) => {
            let b = quantity(&field, &b, Decimal::from(MAX_TIER_BOUND_GPU_HOURS))?;
            if b <= below {
                return Err(Rejection::field(
                    Reason::InvalidField,
                    &field,
                    format!(
                        "is {}; bounds must increase strictly, above {}",
                        decimal::to_canonical(b),
                        decimal::to_canonical(below)
                    ),
                ));
            }
            Ok(Some(b))
        }
    }
}

impl Record for TenantPlan {
    type Wire = TenantPlanWire;
    fn check(w: TenantPlanWire) -> Result<Self, Rejection> {
        Ok(TenantPlan {
            tenant: id("body.tenant", &w.tenant)?,
            plan: id("body.plan", &w.plan)?,
            effective_from: ts("body.effective_from", &w.effective_from)?,
        })
    }
}

/// The class of a rate card or volume tiers: on-demand or reserved (spot has market prices).
fn priced_class(s: &str) -> Result<LeaseClass, Rejection> {
    match s {
        "on_demand" => Ok(LeaseClass::OnDemand),
        "reserved" => Ok(LeaseClass::Reserved),
        _ => Err(Rejection::field(
            Reason::InvalidField,
            "body.lease_class",
            "must be on_demand or reserved (spot is priced by spot_price entries)",
        )),
    }
}

/// 64 lower-case hex digits.
fn sha256_hex(field: &str, s: &str) -> Result<(), Rejection> {
    if s.len() != 64 || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(Rejection::field(
            Reason::InvalidField,
            field,
            "must be 64 lower-case hex digits",
        ));
    }
    Ok(())
}

/// A money amount: a plain non-negative decimal with at most 4 decimals (minor units), at most
/// `MAX_MONEY_AMOUNT`. Unlike quantities, amounts keep their trailing zeros (`148.00`).
fn money(field: &str, s: &str) -> Result<Decimal, Rejection> {
    let ok = s.len() <= 24
        && s.split_once('.').map_or(
            !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()),
            |(i, f)| {
                !i.is_empty()
                    && i.bytes().all(|b| b.is_ascii_digit())
                    && (1..=4).contains(&f.len())
                    && f.bytes().all(|b| b.is_ascii_digit())
            },
        )
        && (s == "0" || s.starts_with("0.") || !s.starts_with('0'));
    if s.starts_with('-') {
        return Err(Rejection::field(
            Reason::NegativeQuantity,
            field,
            "is negative",
        ));
    }
    if !ok {
        return Err(Rejection::field(
            Reason::InvalidField,
            field,
            "is not an amount (digits, at most 4 after the point)",
        ));
    }
    let d: Decimal = s
        .parse()
        .map_err(|_| Rejection::field(Reason::InvalidField, field, "is not an amount"))?;
    if d > Decimal::from(MAX_MONEY_AMOUNT) {
        return Err(Rejection::field(
            Reason::QuantityOutOfRange,
            field,
            format!("is above {MAX_MONEY_AMOUNT}"),
        ));
    }
    Ok(d)
}

fn currency(field: &str, c: &str) -> Result<String, Rejection> {
    if c.len() != 3 || !c.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(Rejection::field(
            Reason::InvalidField,
            field,
            "must be an ISO 4217 code of three upper-case letters",
        ));
    }
    Ok(c.to_owned())
}

/// A list of identifiers: 1 to `max`, sorted in byte order without repeats (one spelling).
fn id_list(field: &str, list: &[String], max: usize) -> Result<(), Rejection> {
    if list.is_empty() {
        return Err(Rejection::field(
            Reason::InvalidField,
            field,
            "must not be empty",
        ));
    }
    if list.len() > max {
        return Err(Rejection::field(
            Reason::QuantityOutOfRange,
            field,
            format!(
                "holds {} identifiers; at most {max} are allowed",
                list.len()
            ),
        ));
    }
    for (i, s) in list.iter().enumerate() {
        id(&format!("{field}[{i}]"), s)?;
        if i > 0 && list[i - 1].as_str() >= s.as_str() {
            return Err(Rejection::field(
                Reason::InvalidField,
                field,
                "must be sorted in byte order without repeats",
            ));
        }
    }
    Ok(())
}

/// A body's identifier: [`check_new_id`], so no body names a thing by a reserved id (§2.3;
/// only the envelope `signer` of the ledger's own entries is `ledger`).
fn id(field: &str, s: &str) -> Result<String, Rejection> {
    check_new_id(s).map_err(|m| Rejection::field(Reason::InvalidField, field, m))?;
    Ok(s.to_owned())
}

fn key_id(field: &str, s: &str) -> Result<(), Rejection> {
    if keys::is_key_id(s) {
        Ok(())
    } else {
        Err(Rejection::field(
            Reason::InvalidField,
            field,
            "must be 16 lower-case hex digits",
        ))
    }
}

fn ts(field: &str, s: &str) -> Result<Timestamp, Rejection> {
    Timestamp::parse(s).map_err(|e| Rejection::field(Reason::InvalidField, field, e))
}

/// One line of text for people (an external reference, an exclusion's reason): 1 to
/// `max` bytes, no control characters, no leading or trailing white space (`invalid_field`).
fn trimmed_text(field: &str, s: &str, max: usize) -> Result<(), Rejection> {
    if s.is_empty() || s.len() > max || s.trim() != s || s.chars().any(char::is_control) {
        return Err(Rejection::field(
            Reason::InvalidField,
            field,
            format!("1 to {max} bytes without control characters or surrounding spaces"),
        ));
    }
    Ok(())
}

fn quantity(field: &str, s: &str, max: Decimal) -> Result<Decimal, Rejection> {
    let d = decimal::parse_canonical(s).map_err(|e| {
        let reason = match e {
            DecimalError::Negative => Reason::NegativeQuantity,
            _ => Reason::InvalidField,
        };
        Rejection::field(reason, field, e)
    })?;
    if d > max {
        return Err(Rejection::field(
            Reason::QuantityOutOfRange,
            field,
            format!("is {d}, above the limit of {max}"),
        ));
    }
    Ok(d)
}

fn interval(start: &str, end: &str) -> Result<(Timestamp, Timestamp), Rejection> {
    let s = ts("body.start", start)?;
    let e = ts("body.end", end)?;
    if e <= s {
        return Err(Rejection::field(
            Reason::EmptyInterval,
            "body.end",
            format!("({e}) is not after body.start ({s})"),
        ));
    }
    let len = s.seconds_until(e);
    if len > MAX_INTERVAL_SECONDS {
        return Err(Rejection::field(
            Reason::IntervalTooLong,
            "body.end",
            format!("makes an interval of {len} s, above the limit of {MAX_INTERVAL_SECONDS} s"),
        ));
    }
    Ok((s, e))
}

/// An optional member: absent is `None`, and JSON `null` is refused rather than read as
/// absent, so that one body has one spelling (and one signature).
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// Serialises a money amount as it was written, trailing zeros kept (`148.00`).
fn money_string<S: Serializer>(d: &Decimal, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(d)
}

/// Serialises an optional decimal (present: canonical; absent members are skipped).
fn canonical_option<S: Serializer>(d: &Option<Decimal>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => decimal::serialize(d, s),
        None => s.serialize_none(),
    }
}
