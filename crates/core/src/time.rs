//! Timestamps on the wire: RFC 3339 in UTC with whole seconds, exactly
//! `YYYY-MM-DDTHH:MM:SSZ`. One instant has one spelling.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use time::{
    format_description::BorrowedFormatItem, macros::format_description, OffsetDateTime,
    PrimitiveDateTime,
};

const WIRE_FORMAT: &[BorrowedFormatItem<'static>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");

/// Earliest timestamp accepted anywhere (2000-01-01T00:00:00Z).
pub const MIN_UNIX: i64 = 946_684_800;
/// Latest timestamp accepted anywhere (9999-12-31T23:59:59Z).
pub const MAX_UNIX: i64 = 253_402_300_799;

/// Seconds since the Unix epoch, UTC, within [`MIN_UNIX`, `MAX_UNIX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

/// What [`Timestamp::parse`] accepts, as an ECMA-262 regular expression (the OpenAPI
/// `pattern` of a timestamp): `YYYY-MM-DDTHH:MM:SSZ` from 2000 to 9999, each month with its
/// own days and 29 February only in leap years, so that a request the document calls valid
/// is one the server reads.
pub const TIMESTAMP_PATTERN: &str = concat!(
    "^(?:[2-9][0-9]{3}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])",
    "|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))",
    "|(?:[2-9][0-9](?:0[48]|[2468][048]|[13579][26])|(?:[2468][048]|[3579][26])00)-02-29)",
    "T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]Z$"
);

/// On the wire a timestamp is a string `YYYY-MM-DDTHH:MM:SSZ` (RFC 3339, whole seconds, UTC).
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Timestamp {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(TIMESTAMP_PATTERN))
            .examples(["2026-11-01T00:00:00Z"])
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Timestamp {}

/// A timestamp string that is not in the wire format or out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("is not a UTC timestamp of the form YYYY-MM-DDTHH:MM:SSZ between 2000 and 9999")]
pub struct TimestampError;

impl Timestamp {
    /// From Unix seconds; `None` when out of range.
    pub fn from_unix(secs: i64) -> Option<Self> {
        (MIN_UNIX..=MAX_UNIX).contains(&secs).then_some(Self(secs))
    }

    /// The current time, truncated to whole seconds.
    pub fn now() -> Self {
        Self(OffsetDateTime::now_utc().unix_timestamp())
    }

    /// Unix seconds.
    pub fn unix(self) -> i64 {
        self.0
    }

    /// Parses the strict wire form.
    pub fn parse(s: &str) -> Result<Self, TimestampError> {
        if s.len() != 20 {
            return Err(TimestampError);
        }
        let t = PrimitiveDateTime::parse(s, WIRE_FORMAT).map_err(|_| TimestampError)?;
        let ts = Self::from_unix(t.assume_utc().unix_timestamp()).ok_or(TimestampError)?;
        // Reject anything that does not format back to the very same bytes.
        if ts.to_string() != s {
            return Err(TimestampError);
        }
        Ok(ts)
    }

    /// Seconds from `self` to `later` (negative when `later` is earlier).
    pub fn seconds_until(self, later: Timestamp) -> i64 {
        later.0 - self.0
    }

    /// This instant plus `secs` seconds, clamped into range.
    pub fn plus(self, secs: i64) -> Self {
        Self(self.0.saturating_add(secs).clamp(MIN_UNIX, MAX_UNIX))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = OffsetDateTime::from_unix_timestamp(self.0).map_err(|_| fmt::Error)?;
        let s = t.format(WIRE_FORMAT).map_err(|_| fmt::Error)?;
        f.write_str(&s)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Timestamp::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_is_strict() {
        let t = Timestamp::parse("2026-11-30T12:00:10Z").unwrap();
        assert_eq!(t.unix(), 1_796_040_010);
        assert_eq!(t.to_string(), "2026-11-30T12:00:10Z");
        for bad in [
            "2026-11-30T12:00:10",
            "2026-11-30T12:00:10.5Z",
            "2026-11-30 12:00:10Z",
            "2026-11-30T12:00:10+00:00",
            "2026-13-30T12:00:10Z",
            "2026-02-30T12:00:10Z",
            "1999-12-31T23:59:59Z",
            "2026-11-30T12:00:60Z",
        ] {
            assert!(Timestamp::parse(bad).is_err(), "{bad}");
        }
    }
}
