//! Record kinds and their bodies, with validation.
//!
//! A body arrives as JSON inside an [`Envelope`](super::envelope::Envelope). It is first read
//! into a *wire* struct of strings (unknown fields refused), then each field is parsed on its
//! own so that a refusal names the exact field and reason.

use super::decimal::{self, DecimalError};
use super::ids::check_id;
use super::keys;
use super::limits::*;
use super::rejection::{Reason, Rejection};
use super::time::Timestamp;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How a lease is billed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
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
}

impl Kind {
    /// All kinds, in a fixed order.
    pub const ALL: [Kind; 16] = [
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
            | Kind::LogPolicy => Role::Ledger,
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

/// GPU time used: `gpu_count` GPUs of one model on one node for [start, end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuUsage {
    pub tenant: String,
    pub lease: Option<String>,
    pub region: String,
    pub node: String,
    pub gpu_model: String,
    /// May be fractional for shared slices (MIG, time-slicing).
    pub gpu_count: Decimal,
    pub start: Timestamp,
    pub end: Timestamp,
    /// Exactly `gpu_count × (end − start)`.
    pub gpu_seconds: Decimal,
}

/// Energy measured on one node over [start, end), optionally attributed to a tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Energy {
    pub tenant: Option<String>,
    pub region: String,
    pub node: String,
    pub start: Timestamp,
    pub end: Timestamp,
    pub kwh: Decimal,
}

/// A spot price per GPU-hour for one region and GPU model, in force from `effective_from`
/// until the next spot price for the same region, model and currency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpotPrice {
    pub region: String,
    pub gpu_model: String,
    pub price_per_gpu_hour: Decimal,
    /// ISO 4217 code, three upper-case letters.
    pub currency: String,
    pub effective_from: Timestamp,
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
        deserialize_with = "present_list"
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
        deserialize_with = "present_string"
    )]
    pub reason: Option<String>,
}

/// A rate-card price per GPU-hour for a region, GPU model and lease class (on-demand or
/// reserved; spot usage is priced by `spot_price` entries), in force from `effective_from`
/// until the next rate card for the same region, model and class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateCard {
    pub region: String,
    pub gpu_model: String,
    pub lease_class: LeaseClass,
    pub currency: String,
    pub price_per_gpu_hour: Decimal,
    pub effective_from: Timestamp,
}

/// A region's energy parameters from `effective_from` on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionParameters {
    pub region: String,
    pub currency: String,
    pub electricity_price_per_kwh: Decimal,
    /// Power usage effectiveness, at least 1.
    pub pue: Decimal,
    /// Grid carbon intensity, gCO2e per kWh.
    pub carbon_g_per_kwh: Decimal,
    pub effective_from: Timestamp,
}

/// A lease of `tenant`, billed as `class`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRegistered {
    pub lease: String,
    pub tenant: String,
    pub class: LeaseClass,
}

/// An issued invoice, by its hash: the full invoice is recomputable from the log entries below
/// `checkpoint_size` (docs/RATING.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvoiceIssued {
    pub number: String,
    pub tenant: String,
    pub period_from: Timestamp,
    pub period_to: Timestamp,
    pub currency: String,
    pub total: Decimal,
    pub checkpoint_size: u64,
    /// Lower-case hex SHA-256 of the invoice's JSON rendering.
    pub invoice_sha256: String,
}

/// An issued compute-usage certificate, by its hash (docs/PROTOCOL.md §13).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertificateIssued {
    pub id: String,
    pub tenant: String,
    pub period_from: Timestamp,
    pub period_to: Timestamp,
    pub checkpoint_size: u64,
    /// Lower-case hex SHA-256 of the certificate's RFC 8785 JSON, `sig` included.
    pub certificate_sha256: String,
}

/// Money received (`Payment`) or credited (`CreditNote`) against an invoice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    pub tenant: String,
    pub invoice: String,
    pub currency: String,
    pub amount: Decimal,
    /// Payment reference or credit-note reason, for people.
    pub note: String,
}

/// One tier of a graduated schedule: the GPU-hours of a series counted within an invoice
/// period above the previous tier's bound and up to `up_to_gpu_hours` (the last tier has no
/// bound) are priced at `price_per_gpu_hour`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tier {
    /// Cumulative bound in GPU-hours; `None` only for the last, open tier.
    pub up_to_gpu_hours: Option<Decimal>,
    pub price_per_gpu_hour: Decimal,
}

/// A plan's graduated volume tiers for one series (region, GPU model, lease class), in force
/// from `effective_from` until the next `volume_tiers` entry of the same plan and series. For
/// tenants on the plan they replace the series' rate card (docs/RATING.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeTiers {
    pub plan: String,
    pub region: String,
    pub gpu_model: String,
    /// On-demand or reserved; spot usage is never tiered.
    pub lease_class: LeaseClass,
    pub currency: String,
    /// 1 to `MAX_VOLUME_TIERS` tiers with strictly increasing bounds; only the last is open.
    pub tiers: Vec<Tier>,
    pub effective_from: Timestamp,
}

/// `tenant` is on `plan` from `effective_from` until its next `tenant_plan` entry. A plan
/// with no tiers for a series leaves that series on the rate card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantPlan {
    pub tenant: String,
    pub plan: String,
    pub effective_from: Timestamp,
}

/// A validated body of any kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
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
}

impl Body {
    /// The body's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Body::GpuUsage(_) => Kind::GpuUsage,
            Body::Energy(_) => Kind::Energy,
            Body::SpotPrice(_) => Kind::SpotPrice,
            Body::SignerKeyRegistered(_) => Kind::SignerKeyRegistered,
            Body::SignerKeyRevoked(_) => Kind::SignerKeyRevoked,
            Body::RateCard(_) => Kind::RateCard,
            Body::RegionParams(_) => Kind::RegionParams,
            Body::LeaseRegistered(_) => Kind::LeaseRegistered,
            Body::InvoiceIssued(_) => Kind::InvoiceIssued,
            Body::Payment(_) => Kind::Payment,
            Body::CreditNote(_) => Kind::CreditNote,
            Body::CertificateIssued(_) => Kind::CertificateIssued,
            Body::VolumeTiers(_) => Kind::VolumeTiers,
            Body::TenantPlan(_) => Kind::TenantPlan,
            Body::TenantRegistered(_) => Kind::TenantRegistered,
            Body::LogPolicy(_) => Kind::LogPolicy,
        }
    }

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

    /// The wire JSON of this body (canonical decimals and timestamps).
    pub fn to_value(&self) -> Value {
        let mut m = serde_json::Map::new();
        let mut put = |k: &str, v: String| {
            m.insert(k.to_owned(), Value::String(v));
        };
        match self {
            Body::GpuUsage(u) => {
                put("tenant", u.tenant.clone());
                if let Some(l) = &u.lease {
                    put("lease", l.clone());
                }
                put("region", u.region.clone());
                put("node", u.node.clone());
                put("gpu_model", u.gpu_model.clone());
                put("gpu_count", decimal::to_canonical(u.gpu_count));
                put("start", u.start.to_string());
                put("end", u.end.to_string());
                put("gpu_seconds", decimal::to_canonical(u.gpu_seconds));
            }
            Body::Energy(e) => {
                if let Some(t) = &e.tenant {
                    put("tenant", t.clone());
                }
                put("region", e.region.clone());
                put("node", e.node.clone());
                put("start", e.start.to_string());
                put("end", e.end.to_string());
                put("kwh", decimal::to_canonical(e.kwh));
            }
            Body::SpotPrice(p) => {
                put("region", p.region.clone());
                put("gpu_model", p.gpu_model.clone());
                put(
                    "price_per_gpu_hour",
                    decimal::to_canonical(p.price_per_gpu_hour),
                );
                put("currency", p.currency.clone());
                put("effective_from", p.effective_from.to_string());
            }
            Body::RateCard(r) => {
                put("region", r.region.clone());
                put("gpu_model", r.gpu_model.clone());
                put("lease_class", r.lease_class.as_str().to_owned());
                put("currency", r.currency.clone());
                put(
                    "price_per_gpu_hour",
                    decimal::to_canonical(r.price_per_gpu_hour),
                );
                put("effective_from", r.effective_from.to_string());
            }
            Body::RegionParams(r) => {
                put("region", r.region.clone());
                put("currency", r.currency.clone());
                put(
                    "electricity_price_per_kwh",
                    decimal::to_canonical(r.electricity_price_per_kwh),
                );
                put("pue", decimal::to_canonical(r.pue));
                put(
                    "carbon_g_per_kwh",
                    decimal::to_canonical(r.carbon_g_per_kwh),
                );
                put("effective_from", r.effective_from.to_string());
            }
            Body::LeaseRegistered(l) => {
                put("lease", l.lease.clone());
                put("tenant", l.tenant.clone());
                put("class", l.class.as_str().to_owned());
            }
            Body::InvoiceIssued(i) => {
                put("number", i.number.clone());
                put("tenant", i.tenant.clone());
                put("period_from", i.period_from.to_string());
                put("period_to", i.period_to.to_string());
                put("currency", i.currency.clone());
                put("total", i.total.to_string());
                put("invoice_sha256", i.invoice_sha256.clone());
                m.insert("checkpoint_size".to_owned(), Value::from(i.checkpoint_size));
            }
            Body::Payment(p) | Body::CreditNote(p) => {
                put("tenant", p.tenant.clone());
                put("invoice", p.invoice.clone());
                put("currency", p.currency.clone());
                put("amount", p.amount.to_string());
                put("note", p.note.clone());
            }
            Body::CertificateIssued(c) => {
                put("id", c.id.clone());
                put("tenant", c.tenant.clone());
                put("period_from", c.period_from.to_string());
                put("period_to", c.period_to.to_string());
                put("certificate_sha256", c.certificate_sha256.clone());
                m.insert("checkpoint_size".to_owned(), Value::from(c.checkpoint_size));
            }
            Body::VolumeTiers(v) => {
                put("plan", v.plan.clone());
                put("region", v.region.clone());
                put("gpu_model", v.gpu_model.clone());
                put("lease_class", v.lease_class.as_str().to_owned());
                put("currency", v.currency.clone());
                put("effective_from", v.effective_from.to_string());
                let tiers = v
                    .tiers
                    .iter()
                    .map(|t| {
                        let mut o = serde_json::Map::new();
                        if let Some(b) = t.up_to_gpu_hours {
                            o.insert("up_to_gpu_hours".into(), decimal::to_canonical(b).into());
                        }
                        o.insert(
                            "price_per_gpu_hour".into(),
                            decimal::to_canonical(t.price_per_gpu_hour).into(),
                        );
                        Value::Object(o)
                    })
                    .collect();
                m.insert("tiers".to_owned(), Value::Array(tiers));
            }
            Body::TenantPlan(p) => {
                put("tenant", p.tenant.clone());
                put("plan", p.plan.clone());
                put("effective_from", p.effective_from.to_string());
            }
            Body::SignerKeyRegistered(r) => return serde_json::to_value(r).expect("plain struct"),
            Body::SignerKeyRevoked(r) => return serde_json::to_value(r).expect("plain struct"),
            Body::TenantRegistered(t) => return serde_json::to_value(t).expect("plain struct"),
            Body::LogPolicy(p) => return serde_json::to_value(p).expect("plain struct"),
        }
        Value::Object(m)
    }

    /// Reads and validates a body of `kind`: its shape and every rule that needs neither the
    /// log nor the clock (those are in [`crate::admission`]).
    pub fn from_value(kind: Kind, body: &Value) -> Result<Body, Rejection> {
        match kind {
            Kind::GpuUsage => {
                let w: GpuUsageWire = wire(body)?;
                Ok(Body::GpuUsage(w.validate()?))
            }
            Kind::Energy => {
                let w: EnergyWire = wire(body)?;
                Ok(Body::Energy(w.validate()?))
            }
            Kind::SpotPrice => {
                let w: SpotPriceWire = wire(body)?;
                Ok(Body::SpotPrice(w.validate()?))
            }
            Kind::TenantRegistered => {
                let t: TenantRegistered = wire(body)?;
                id("body.tenant", &t.tenant)?;
                Ok(Body::TenantRegistered(t))
            }
            Kind::LogPolicy => {
                let p: LogPolicy = wire(body)?;
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
                Ok(Body::LogPolicy(p))
            }
            Kind::SignerKeyRegistered => {
                let r: SignerKeyRegistered = wire(body)?;
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
                match (r.role, &r.nodes) {
                    (Role::Node, Some(nodes)) => id_list("body.nodes", nodes, MAX_SIGNER_NODES)?,
                    (Role::Node, None) => {
                        return Err(Rejection::field(
                            Reason::Malformed,
                            "body.nodes",
                            "is required for a node key",
                        ))
                    }
                    (Role::Market, None) => {}
                    (Role::Market, Some(_)) => {
                        return Err(Rejection::field(
                            Reason::Malformed,
                            "body.nodes",
                            "must be absent for a market key",
                        ))
                    }
                    (Role::Ledger, _) => {
                        return Err(Rejection::field(
                            Reason::InvalidField,
                            "body.role",
                            "must be node or market: the ledger registers no ledger keys",
                        ))
                    }
                }
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
                Ok(Body::SignerKeyRegistered(r))
            }
            Kind::SignerKeyRevoked => {
                let r: SignerKeyRevoked = wire(body)?;
                id("body.signer", &r.signer)?;
                key_id("body.key_id", &r.key_id)?;
                Ok(Body::SignerKeyRevoked(r))
            }
            Kind::RateCard => {
                let w: RateCardWire = wire(body)?;
                let lease_class = priced_class(&w.lease_class)?;
                Ok(Body::RateCard(RateCard {
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
                }))
            }
            Kind::RegionParams => {
                let w: RegionParamsWire = wire(body)?;
                let pue = quantity("body.pue", &w.pue, Decimal::from(MAX_PUE))?;
                if pue < Decimal::ONE {
                    return Err(Rejection::field(
                        Reason::QuantityOutOfRange,
                        "body.pue",
                        "must be at least 1",
                    ));
                }
                Ok(Body::RegionParams(RegionParameters {
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
                }))
            }
            Kind::InvoiceIssued => {
                let w: InvoiceIssuedWire = wire(body)?;
                sha256_hex("body.invoice_sha256", &w.invoice_sha256)?;
                Ok(Body::InvoiceIssued(InvoiceIssued {
                    number: id("body.number", &w.number)?,
                    tenant: id("body.tenant", &w.tenant)?,
                    period_from: ts("body.period_from", &w.period_from)?,
                    period_to: ts("body.period_to", &w.period_to)?,
                    currency: currency("body.currency", &w.currency)?,
                    total: money("body.total", &w.total)?,
                    checkpoint_size: w.checkpoint_size,
                    invoice_sha256: w.invoice_sha256,
                }))
            }
            Kind::CertificateIssued => {
                let w: CertificateIssuedWire = wire(body)?;
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
                Ok(Body::CertificateIssued(CertificateIssued {
                    id: w.id,
                    tenant: id("body.tenant", &w.tenant)?,
                    period_from,
                    period_to,
                    checkpoint_size: w.checkpoint_size,
                    certificate_sha256: w.certificate_sha256,
                }))
            }
            Kind::Payment | Kind::CreditNote => {
                let w: SettlementWire = wire(body)?;
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
                let s = Settlement {
                    tenant: id("body.tenant", &w.tenant)?,
                    invoice: id("body.invoice", &w.invoice)?,
                    currency: currency("body.currency", &w.currency)?,
                    amount,
                    note: w.note,
                };
                Ok(if kind == Kind::Payment {
                    Body::Payment(s)
                } else {
                    Body::CreditNote(s)
                })
            }
            Kind::VolumeTiers => {
                let w: VolumeTiersWire = wire(body)?;
                Ok(Body::VolumeTiers(w.validate()?))
            }
            Kind::TenantPlan => {
                let w: TenantPlanWire = wire(body)?;
                Ok(Body::TenantPlan(TenantPlan {
                    tenant: id("body.tenant", &w.tenant)?,
                    plan: id("body.plan", &w.plan)?,
                    effective_from: ts("body.effective_from", &w.effective_from)?,
                }))
            }
            Kind::LeaseRegistered => {
                let w: LeaseWire = wire(body)?;
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
                Ok(Body::LeaseRegistered(LeaseRegistered {
                    lease: id("body.lease", &w.lease)?,
                    tenant: id("body.tenant", &w.tenant)?,
                    class,
                }))
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RateCardWire {
    region: String,
    gpu_model: String,
    lease_class: String,
    currency: String,
    price_per_gpu_hour: String,
    effective_from: String,
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TierWire {
    #[serde(default, deserialize_with = "present_string")]
    up_to_gpu_hours: Option<String>,
    price_per_gpu_hour: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VolumeTiersWire {
    plan: String,
    region: String,
    gpu_model: String,
    lease_class: String,
    currency: String,
    tiers: Vec<TierWire>,
    effective_from: String,
}

impl VolumeTiersWire {
    fn validate(self) -> Result<VolumeTiers, Rejection> {
        let plan = id("body.plan", &self.plan)?;
        let region = id("body.region", &self.region)?;
        let gpu_model = id("body.gpu_model", &self.gpu_model)?;
        let lease_class = priced_class(&self.lease_class)?;
        let currency = currency("body.currency", &self.currency)?;
        if self.tiers.is_empty() || self.tiers.len() > MAX_VOLUME_TIERS {
            return Err(Rejection::field(
                if self.tiers.is_empty() {
                    Reason::InvalidField
                } else {
                    Reason::QuantityOutOfRange
                },
                "body.tiers",
                format!(
                    "holds {} tiers; 1 to {MAX_VOLUME_TIERS} are allowed",
                    self.tiers.len()
                ),
            ));
        }
        let last = self.tiers.len() - 1;
        let mut tiers = Vec::with_capacity(self.tiers.len());
        let mut below = Decimal::ZERO;
        for (i, t) in self.tiers.into_iter().enumerate() {
            let field = |m: &str| format!("body.tiers[{i}].{m}");
            let up_to_gpu_hours = match (t.up_to_gpu_hours, i == last) {
                (None, true) => None,
                (Some(_), true) => {
                    return Err(Rejection::field(
                        Reason::InvalidField,
                        &field("up_to_gpu_hours"),
                        "must be absent: the last tier is open",
                    ))
                }
                (None, false) => {
                    return Err(Rejection::field(
                        Reason::InvalidField,
                        &field("up_to_gpu_hours"),
                        "is required on every tier but the last",
                    ))
                }
                (Some(b), false) => {
                    let f = field("up_to_gpu_hours");
                    let b = quantity(&f, &b, Decimal::from(MAX_TIER_BOUND_GPU_HOURS))?;
                    if b <= below {
                        return Err(Rejection::field(
                            Reason::InvalidField,
                            &f,
                            format!(
                                "is {}; bounds must increase strictly, above {}",
                                decimal::to_canonical(b),
                                decimal::to_canonical(below)
                            ),
                        ));
                    }
                    below = b;
                    Some(b)
                }
            };
            let price_per_gpu_hour = quantity(
                &field("price_per_gpu_hour"),
                &t.price_per_gpu_hour,
                Decimal::from(MAX_PRICE_PER_GPU_HOUR),
            )?;
            tiers.push(Tier {
                up_to_gpu_hours,
                price_per_gpu_hour,
            });
        }
        Ok(VolumeTiers {
            plan,
            region,
            gpu_model,
            lease_class,
            currency,
            tiers,
            effective_from: ts("body.effective_from", &self.effective_from)?,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantPlanWire {
    tenant: String,
    plan: String,
    effective_from: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RegionParamsWire {
    region: String,
    currency: String,
    electricity_price_per_kwh: String,
    pue: String,
    carbon_g_per_kwh: String,
    effective_from: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LeaseWire {
    lease: String,
    tenant: String,
    class: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InvoiceIssuedWire {
    number: String,
    tenant: String,
    period_from: String,
    period_to: String,
    currency: String,
    total: String,
    checkpoint_size: u64,
    invoice_sha256: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CertificateIssuedWire {
    id: String,
    tenant: String,
    period_from: String,
    period_to: String,
    checkpoint_size: u64,
    certificate_sha256: String,
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SettlementWire {
    tenant: String,
    invoice: String,
    currency: String,
    amount: String,
    #[serde(default)]
    note: String,
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

fn wire<T: for<'de> Deserialize<'de>>(body: &Value) -> Result<T, Rejection> {
    T::deserialize(body).map_err(|e| Rejection::field(Reason::Malformed, "body", e))
}

/// An optional string field: absent is `None`, and JSON `null` is refused rather than read as
/// absent, so that one body has one spelling (and one signature).
fn present_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    String::deserialize(d).map(Some)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuUsageWire {
    tenant: String,
    #[serde(default, deserialize_with = "present_string")]
    lease: Option<String>,
    region: String,
    node: String,
    gpu_model: String,
    gpu_count: String,
    start: String,
    end: String,
    gpu_seconds: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EnergyWire {
    #[serde(default, deserialize_with = "present_string")]
    tenant: Option<String>,
    region: String,
    node: String,
    start: String,
    end: String,
    kwh: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SpotPriceWire {
    region: String,
    gpu_model: String,
    price_per_gpu_hour: String,
    currency: String,
    effective_from: String,
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

/// An optional list member: absent is `None`; `null` is refused (one spelling).
fn present_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    Vec::<String>::deserialize(d).map(Some)
}

fn id(field: &str, s: &str) -> Result<String, Rejection> {
    check_id(s).map_err(|m| Rejection::field(Reason::InvalidField, field, m))?;
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

impl GpuUsageWire {
    fn validate(self) -> Result<GpuUsage, Rejection> {
        let tenant = id("body.tenant", &self.tenant)?;
        let lease = self
            .lease
            .as_deref()
            .map(|l| id("body.lease", l))
            .transpose()?;
        let region = id("body.region", &self.region)?;
        let node = id("body.node", &self.node)?;
        let gpu_model = id("body.gpu_model", &self.gpu_model)?;
        let gpu_count = quantity(
            "body.gpu_count",
            &self.gpu_count,
            Decimal::from(MAX_GPU_COUNT),
        )?;
        if gpu_count.is_zero() {
            return Err(Rejection::field(
                Reason::QuantityOutOfRange,
                "body.gpu_count",
                "must be above 0",
            ));
        }
        let (start, end) = interval(&self.start, &self.end)?;
        let max_seconds = Decimal::from(MAX_GPU_COUNT) * Decimal::from(MAX_INTERVAL_SECONDS);
        let gpu_seconds = quantity("body.gpu_seconds", &self.gpu_seconds, max_seconds)?;
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

impl EnergyWire {
    fn validate(self) -> Result<Energy, Rejection> {
        let tenant = self
            .tenant
            .as_deref()
            .map(|t| id("body.tenant", t))
            .transpose()?;
        let region = id("body.region", &self.region)?;
        let node = id("body.node", &self.node)?;
        let (start, end) = interval(&self.start, &self.end)?;
        let kwh = quantity("body.kwh", &self.kwh, Decimal::from(MAX_KWH_PER_RECORD))?;
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

impl SpotPriceWire {
    fn validate(self) -> Result<SpotPrice, Rejection> {
        let region = id("body.region", &self.region)?;
        let gpu_model = id("body.gpu_model", &self.gpu_model)?;
        let price_per_gpu_hour = quantity(
            "body.price_per_gpu_hour",
            &self.price_per_gpu_hour,
            Decimal::from(MAX_PRICE_PER_GPU_HOUR),
        )?;
        if self.currency.len() != 3 || !self.currency.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(Rejection::field(
                Reason::InvalidField,
                "body.currency",
                "must be an ISO 4217 code of three upper-case letters",
            ));
        }
        let effective_from = ts("body.effective_from", &self.effective_from)?;
        Ok(SpotPrice {
            region,
            gpu_model,
            price_per_gpu_hour,
            currency: self.currency,
            effective_from,
        })
    }
}
