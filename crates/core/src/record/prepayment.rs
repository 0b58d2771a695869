//! The `prepayment` body (docs/PROTOCOL.md §5.20): money a tenant paid ahead (a purchase) or
//! was given (a grant), in one currency, that its invoices draw down until it is spent or
//! expires. How invoices draw it is [`crate::prepaid`] (docs/RATING.md, "Prepaid balances").

use super::contract::positive_money;
use super::{currency, id, trimmed_text, ts, Record};
use crate::limits::MAX_EXTERNAL_REFERENCE_BYTES;
use crate::rejection::{Reason, Rejection};
use crate::time::Timestamp;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

words! {
    /// Where a prepayment's money came from; grants are drawn before purchases.
    pub enum PrepaymentSource {
        /// Credit given by the provider (a promotion, a goodwill grant): drawn first.
        Grant = "grant",
        /// Money the tenant paid ahead (a top-up, 充值).
        Purchase = "purchase",
    }
}

/// A tenant's prepaid lot (docs/PROTOCOL.md §5.20).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Prepayment {
    pub tenant: String,
    /// The top-up's reference in the provider's books or the bank's: unique per tenant, so a
    /// top-up sent twice is recorded once (`reference_used`), and the lot's name on invoices.
    /// 1 to 128 bytes without control characters or surrounding spaces.
    pub reference: String,
    pub source: PrepaymentSource,
    pub currency: String,
    /// Above 0, with at most the currency's minor-unit digits (docs/RATING.md).
    #[serde(serialize_with = "super::money_string")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub amount: Decimal,
    /// From this instant the lot pays nothing more: it pays invoices issued before it; what is
    /// left then is forfeit. Absent: it never expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Timestamp>,
}

/// [`Prepayment`] as serde reads it, before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PrepaymentWire {
    tenant: String,
    reference: String,
    source: String,
    currency: String,
    amount: String,
    #[serde(default, deserialize_with = "super::present")]
    expires_at: Option<String>,
}

impl Record for Prepayment {
    type Wire = PrepaymentWire;
    fn check(w: PrepaymentWire) -> Result<Self, Rejection> {
        let tenant = id("body.tenant", &w.tenant)?;
        trimmed_text("body.reference", &w.reference, MAX_EXTERNAL_REFERENCE_BYTES)?;
        let source = PrepaymentSource::read("body.source", &w.source)?;
        let currency = currency("body.currency", &w.currency)?;
        let amount = positive_money("body.amount", &w.amount)?;
        if amount.scale() > crate::rating::minor_units(&currency) {
            return Err(Rejection::field(
                Reason::InvalidField,
                "body.amount",
                format!(
                    "has more decimal places than {currency}'s minor unit ({})",
                    crate::rating::minor_units(&currency)
                ),
            ));
        }
        let expires_at = w
            .expires_at
            .as_deref()
            .map(|t| ts("body.expires_at", t))
            .transpose()?;
        Ok(Prepayment {
            tenant,
            reference: w.reference,
            source,
            currency,
            amount,
            expires_at,
        })
    }
}
