//! Why a record was refused: a machine-readable reason, the field it concerns, and a message
//! for people. The reason codes are part of the public contract (docs/PROTOCOL.md).

use serde::{Deserialize, Serialize};
use std::fmt;

/// Machine-readable rejection reasons. Their snake_case names are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Not a JSON object of the right shape: missing, unknown or mistyped fields.
    Malformed,
    /// Envelope `v` is not a version this ledger speaks.
    UnsupportedVersion,
    /// `kind` names no record kind.
    UnknownKind,
    /// A field has a bad value (identifier, timestamp, decimal spelling, base64, ...).
    InvalidField,
    /// A quantity or price is below zero.
    NegativeQuantity,
    /// A quantity, price or sequence number is beyond its named limit, or zero where it must not be.
    QuantityOutOfRange,
    /// `gpu_seconds` is not exactly `gpu_count × (end − start)`.
    GpuSecondsMismatch,
    /// `end` is not after `start`.
    EmptyInterval,
    /// The interval is longer than the named limit.
    IntervalTooLong,
    /// The interval ends, or the price takes effect, too far past the ledger's clock.
    InFuture,
    /// The canonical envelope is larger than the named limit.
    TooLarge,
    /// The signer id is not registered.
    UnknownSigner,
    /// The key id is not registered.
    UnknownKey,
    /// The key id belongs to another signer.
    KeySignerMismatch,
    /// The key was revoked before this record arrived.
    RevokedKey,
    /// The signer's role may not sign this kind of record.
    RoleNotAllowed,
    /// The signature does not verify (strict Ed25519) over the canonical bytes.
    BadSignature,
    /// Another, different record already holds this (signer, seq); kept as evidence.
    Conflict,
    /// The interval overlaps one already logged for the same stream (same node, tenant,
    /// lease and GPU model for usage; same node and tenant for energy).
    OverlappingInterval,
    /// The record names a node its key is not registered for.
    NodeNotAllowed,
    /// The record names a region its key is not registered for.
    RegionNotAllowed,
    /// The record names another region than its node's registration.
    WrongRegion,
    /// The record names a tenant the log has not registered.
    UnknownTenant,
    /// The record names a lease the log has not registered.
    UnknownLease,
    /// The record's lease belongs to another tenant.
    LeaseTenantMismatch,
    /// The record starts longer before its arrival than the log's policy allows.
    TooOld,
    /// A price of any kind takes effect before its arrival minus the policy's skew.
    PriceInPast,
    /// A spot price of the same series already takes effect at that instant.
    PriceConflict,
    /// A price takes effect inside a period already invoiced.
    PriceInInvoicedPeriod,
    /// A price, parameter or plan does not take effect after the latest of its series.
    PriceNotForward,
    /// A contract's term overlaps the term of an earlier contract of the same tenant.
    ContractOverlap,
    /// A contract amendment names no earlier contract of its tenant.
    UnknownContract,
    /// A tenant or lease registered a second time.
    AlreadyRegistered,
    /// A payment or credit note names no invoice issued earlier to its tenant.
    UnknownInvoice,
    /// A payment or credit note is in another currency than its invoice.
    CurrencyMismatch,
    /// Credit notes on an invoice would total more than the invoice.
    CreditAboveTotal,
    /// A payment or credit note carries the external reference of an earlier one of its
    /// tenant and kind.
    ReferenceUsed,
    /// The record, or a node key's registration, names a node the log has not registered.
    UnknownNode,
    /// The record's GPU model is not a model of its node's GPUs.
    UnknownGpuModel,
    /// The record claims more GPUs of its model than its node has.
    OverCapacity,
    /// The energy record claims more than its node's GPUs can draw in its interval.
    EnergyOverBound,
    /// A lease names a GPU index its node does not have.
    UnknownGpu,
    /// A lease would lease more of a node (a GPU, or a model's GPUs) than it has, at some
    /// instant of its term, counting the node's other leases.
    LeaseOverbooked,
    /// The usage record names no lease, or one that covers none of its node's GPUs of its
    /// model.
    LeaseNotOnNode,
    /// The usage record's interval is not within its lease's term.
    OutsideLeaseTerm,
    /// An exclusion names no earlier `gpu_usage` or tenant `energy` record of its tenant.
    UnknownRecord,
    /// An exclusion names a record an earlier exclusion excludes already.
    AlreadyExcluded,
    /// An exclusion names a record an issued invoice has rated.
    RecordInvoiced,
}

impl Reason {
    /// The stable snake_case code.
    pub fn code(self) -> &'static str {
        match self {
            Reason::Malformed => "malformed",
            Reason::UnsupportedVersion => "unsupported_version",
            Reason::UnknownKind => "unknown_kind",
            Reason::InvalidField => "invalid_field",
            Reason::NegativeQuantity => "negative_quantity",
            Reason::QuantityOutOfRange => "quantity_out_of_range",
            Reason::GpuSecondsMismatch => "gpu_seconds_mismatch",
            Reason::EmptyInterval => "empty_interval",
            Reason::IntervalTooLong => "interval_too_long",
            Reason::InFuture => "in_future",
            Reason::TooLarge => "too_large",
            Reason::UnknownSigner => "unknown_signer",
            Reason::UnknownKey => "unknown_key",
            Reason::KeySignerMismatch => "key_signer_mismatch",
            Reason::RevokedKey => "revoked_key",
            Reason::RoleNotAllowed => "role_not_allowed",
            Reason::BadSignature => "bad_signature",
            Reason::Conflict => "conflict",
            Reason::OverlappingInterval => "overlapping_interval",
            Reason::NodeNotAllowed => "node_not_allowed",
            Reason::RegionNotAllowed => "region_not_allowed",
            Reason::WrongRegion => "wrong_region",
            Reason::UnknownTenant => "unknown_tenant",
            Reason::UnknownLease => "unknown_lease",
            Reason::LeaseTenantMismatch => "lease_tenant_mismatch",
            Reason::TooOld => "too_old",
            Reason::PriceInPast => "price_in_past",
            Reason::PriceConflict => "price_conflict",
            Reason::PriceInInvoicedPeriod => "price_in_invoiced_period",
            Reason::PriceNotForward => "price_not_forward",
            Reason::ContractOverlap => "contract_overlap",
            Reason::UnknownContract => "unknown_contract",
            Reason::AlreadyRegistered => "already_registered",
            Reason::UnknownInvoice => "unknown_invoice",
            Reason::CurrencyMismatch => "currency_mismatch",
            Reason::CreditAboveTotal => "credit_above_total",
            Reason::ReferenceUsed => "reference_used",
            Reason::UnknownNode => "unknown_node",
            Reason::UnknownGpuModel => "unknown_gpu_model",
            Reason::OverCapacity => "over_capacity",
            Reason::EnergyOverBound => "energy_over_bound",
            Reason::UnknownGpu => "unknown_gpu",
            Reason::LeaseOverbooked => "lease_overbooked",
            Reason::LeaseNotOnNode => "lease_not_on_node",
            Reason::OutsideLeaseTerm => "outside_lease_term",
            Reason::UnknownRecord => "unknown_record",
            Reason::AlreadyExcluded => "already_excluded",
            Reason::RecordInvoiced => "record_invoiced",
        }
    }
}

/// What a refusal says about the record, for a signer deciding what to do with it (the agent,
/// the market signer, any client written from docs/PROTOCOL.md §6.6). Every reason has exactly
/// one class; a reason added later must be classified here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasonClass {
    /// Not final: the same record may be accepted later without change (`in_future`: once the
    /// ledger's clock has caught up).
    Transient,
    /// The signer's registration (its key, scope, role, the tenant or lease it names) does not
    /// cover the record yet; an operator can register what is missing, and the same record is
    /// then accepted.
    Registration,
    /// The record itself can never be logged as it is.
    Final,
}

impl Reason {
    /// Its class (see [`ReasonClass`]).
    pub fn class(self) -> ReasonClass {
        use ReasonClass::*;
        match self {
            Reason::InFuture => Transient,
            Reason::UnknownSigner
            | Reason::UnknownKey
            | Reason::KeySignerMismatch
            | Reason::RevokedKey
            | Reason::RoleNotAllowed
            | Reason::NodeNotAllowed
            | Reason::RegionNotAllowed
            | Reason::UnknownTenant
            | Reason::UnknownLease
            | Reason::UnknownNode
            // A node's update adds the GPU model, or raises its power limit (§5.18).
            | Reason::UnknownGpuModel
            | Reason::EnergyOverBound => Registration,
            Reason::Malformed
            | Reason::UnsupportedVersion
            | Reason::UnknownKind
            | Reason::InvalidField
            | Reason::NegativeQuantity
            | Reason::QuantityOutOfRange
            | Reason::GpuSecondsMismatch
            | Reason::EmptyInterval
            | Reason::IntervalTooLong
            | Reason::TooLarge
            | Reason::BadSignature
            | Reason::Conflict
            | Reason::OverlappingInterval
            // A lease is registered once, for one tenant: a record naming it for another
            // tenant can never be logged, whatever is registered next.
            | Reason::LeaseTenantMismatch
            | Reason::TooOld
            | Reason::PriceInPast
            | Reason::PriceConflict
            | Reason::PriceInInvoicedPeriod
            | Reason::PriceNotForward
            // Contracts are the ledger's own; no signer sends them.
            | Reason::ContractOverlap
            | Reason::UnknownContract
            | Reason::AlreadyRegistered
            // Settlement entries are the ledger's own; no signer sends them.
            | Reason::UnknownInvoice
            | Reason::CurrencyMismatch
            | Reason::CreditAboveTotal
            | Reason::ReferenceUsed
            // A node's region never changes. More GPUs than the node has is as often more
            // than the lease covers, which never changes either.
            | Reason::WrongRegion
            | Reason::OverCapacity
            // Leases are registered once: a record outside its lease never fits it.
            | Reason::UnknownGpu
            | Reason::LeaseOverbooked
            | Reason::LeaseNotOnNode
            | Reason::OutsideLeaseTerm
            // Exclusions are the ledger's own; no signer sends them.
            | Reason::UnknownRecord
            | Reason::AlreadyExcluded
            | Reason::RecordInvoiced => Final,
        }
    }

    /// Not final: the same record may be sent again and accepted ([`ReasonClass::Transient`]).
    pub fn is_transient(self) -> bool {
        self.class() == ReasonClass::Transient
    }

    /// A refusal the record's times against the ledger's receive time decide (§6.7, time), so
    /// a wrong clock (the signer's, or the ledger's) can cause it: a signer whose clock
    /// disagrees with the ledger's `ledger_now` should keep such a record, not drop it.
    pub fn depends_on_clock(self) -> bool {
        matches!(
            self,
            Reason::TooOld | Reason::InFuture | Reason::PriceInPast
        )
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// A refused record: reason, optional field path (such as `body.gpu_count`), message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Rejection {
    pub reason: Reason,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    pub message: String,
}

impl Rejection {
    /// A rejection that concerns no single field.
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            reason,
            field: None,
            message: message.into(),
        }
    }

    /// A rejection about one field; the message is prefixed with the field's path.
    pub fn field(reason: Reason, field: &str, message: impl fmt::Display) -> Self {
        Self {
            reason,
            field: Some(field.to_owned()),
            message: format!("{field} {message}"),
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason, self.message)
    }
}
