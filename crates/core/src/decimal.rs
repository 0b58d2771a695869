//! Exact decimal quantities on the wire.
//!
//! Every quantity and price travels as a *canonical decimal string*: digits, an optional
//! fraction without trailing zeros, no sign, no exponent, no leading zeros
//! (`0`, `12`, `0.125`, `80.5`). One value therefore has exactly one spelling, so equal values
//! have equal bytes and equal signatures. Inside the program they are `rust_decimal::Decimal`.

use rust_decimal::Decimal;
use std::str::FromStr;

/// Longest decimal string accepted, in bytes.
pub const MAX_DECIMAL_LEN: usize = 40;
/// Most digits after the decimal point in any quantity or price.
pub const MAX_SCALE: u32 = 9;

/// The shape of every decimal string the API writes or reads, as a regular expression (the
/// OpenAPI `pattern` of [`DecimalString`]): an optional minus (balances may be negative), digits,
/// an optional fraction. Canonical record members are narrower still (no sign, no leading or
/// trailing zeros); money amounts keep their currency's decimals (`3.30`).
pub const DECIMAL_PATTERN: &str = r"^-?[0-9]+(\.[0-9]+)?$";

/// The OpenAPI schema of an exact decimal carried as a string (component `Decimal`): what
/// handlers' `Decimal` members are documented as, so generated clients never read money or
/// quantities as floats. A schema only; values stay `rust_decimal::Decimal`.
#[cfg(feature = "openapi")]
pub struct DecimalString;

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for DecimalString {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(DECIMAL_PATTERN))
            .description(Some(
                "An exact decimal number written as a JSON string (money, prices, GPU-seconds, \
                 GPU-hours, kWh, PUE, carbon), never as a JSON number: read it with a decimal \
                 type, not a float.",
            ))
            .examples(["12.5"])
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for DecimalString {
    fn name() -> std::borrow::Cow<'static, str> {
        "Decimal".into()
    }
}

/// Why a decimal string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecimalError {
    #[error("is negative")]
    Negative,
    #[error("is not a canonical decimal string (digits, optional fraction without trailing zeros, no sign, exponent or leading zeros)")]
    NotCanonical,
    #[error("has more than {MAX_SCALE} digits after the decimal point")]
    TooPrecise,
    #[error("is longer than {MAX_DECIMAL_LEN} characters")]
    TooLong,
}

/// Parses a canonical, non-negative decimal string exactly.
pub fn parse_canonical(s: &str) -> Result<Decimal, DecimalError> {
    if s.len() > MAX_DECIMAL_LEN {
        return Err(DecimalError::TooLong);
    }
    if let Some(magnitude) = s.strip_prefix('-') {
        // Report the sign precisely when the rest is otherwise a number.
        return match parse_canonical(magnitude) {
            Ok(_) | Err(DecimalError::TooPrecise) => Err(DecimalError::Negative),
            Err(e) => Err(e),
        };
    }
    let (int, frac) = match s.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (s, None),
    };
    let int_ok = !int.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && (int == "0" || !int.starts_with('0'));
    if !int_ok {
        return Err(DecimalError::NotCanonical);
    }
    if let Some(f) = frac {
        if f.is_empty() || !f.bytes().all(|b| b.is_ascii_digit()) || f.ends_with('0') {
            return Err(DecimalError::NotCanonical);
        }
        if f.len() > MAX_SCALE as usize {
            return Err(DecimalError::TooPrecise);
        }
    }
    Decimal::from_str_exact(s).map_err(|_| DecimalError::TooLong)
}

/// The canonical spelling of a non-negative decimal (trailing zeros removed).
pub fn to_canonical(d: Decimal) -> String {
    let n = d.normalize();
    if n.is_zero() {
        "0".to_owned()
    } else {
        n.to_string()
    }
}

/// Parses any decimal spelling (used for human input such as CLI flags), not the wire.
pub fn parse_lenient(s: &str) -> Option<Decimal> {
    Decimal::from_str(s.trim()).ok()
}

/// Serialises a non-negative decimal as its canonical string (for `#[serde(serialize_with)]`).
pub fn serialize<S: serde::Serializer>(d: &Decimal, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&to_canonical(*d))
}

/// Amounts: every digit of the currency's minor unit (`148.00`), read with their scale.
pub mod money_str {
    use rust_decimal::Decimal;
    /// Writes the amount as it is (its scale kept).
    pub fn serialize<S: serde::Serializer>(d: &Decimal, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(d)
    }
    /// Reads an amount string, keeping its scale.
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Decimal, D::Error> {
        let s: String = serde::Deserialize::deserialize(d)?;
        if s.is_empty()
            || !s
                .bytes()
                .all(|b| b.is_ascii_digit() || b == b'.' || b == b'-')
        {
            return Err(serde::de::Error::custom(format!("not an amount: {s:?}")));
        }
        s.parse::<Decimal>().map_err(serde::de::Error::custom)
    }
}

/// An optional amount as [`money_str`] spells it (absent members are skipped by the field's
/// `skip_serializing_if`).
pub mod money_str_option {
    use rust_decimal::Decimal;
    /// Writes the amount as it is (its scale kept).
    pub fn serialize<S: serde::Serializer>(d: &Option<Decimal>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::money_str::serialize(d, s),
            None => s.serialize_none(),
        }
    }
    /// Reads an amount string, keeping its scale.
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Decimal>, D::Error> {
        super::money_str::deserialize(d).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_only_canonical_spellings() {
        for ok in ["0", "1", "80", "0.5", "12.125", "1000000", "0.000000001"] {
            let d = parse_canonical(ok).unwrap();
            assert_eq!(to_canonical(d), ok);
        }
        for bad in [
            "", "01", "1.", ".5", "1.50", "+1", "1e3", " 1", "1 ", "0.0", "00", "1,5", "NaN",
        ] {
            assert_eq!(
                parse_canonical(bad),
                Err(DecimalError::NotCanonical),
                "{bad:?}"
            );
        }
        assert_eq!(parse_canonical("-1"), Err(DecimalError::Negative));
        assert_eq!(parse_canonical("-0.5"), Err(DecimalError::Negative));
        assert_eq!(
            parse_canonical("0.0000000001"),
            Err(DecimalError::TooPrecise)
        );
        assert_eq!(parse_canonical(&"9".repeat(41)), Err(DecimalError::TooLong));
    }

    #[test]
    fn canonical_form_strips_trailing_zeros() {
        assert_eq!(to_canonical(Decimal::from_str("1.500").unwrap()), "1.5");
        assert_eq!(to_canonical(Decimal::from_str("-0.00").unwrap()), "0");
        assert_eq!(to_canonical(Decimal::from_str("100").unwrap()), "100");
    }
}
