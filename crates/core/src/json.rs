//! Strict JSON reading: repeated member names are refused at every depth (docs/PROTOCOL.md
//! §2.6). serde_json keeps the last of repeated names, so two parsers could read two different
//! records from one text; everything the ledger reads from outside goes through here.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// Parses one JSON text into a [`Value`], refusing repeated member names in any object.
pub fn parse_strict(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let v = StrictValue.deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

/// Parses one JSON text into `T` through [`parse_strict`], so that `T`'s free-form members
/// (a `Value`, a map) cannot hide a repeated name either.
pub fn from_slice_strict<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
) -> Result<T, serde_json::Error> {
    serde_json::from_value(parse_strict(bytes)?)
}

/// `deserialize_with` for a `Value` member: the value is read strictly.
pub fn strict_value<'de, D: Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
    StrictValue.deserialize(d)
}

/// A seed that reads any JSON value and refuses repeated member names.
struct StrictValue;

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        StrictValue.deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(v) = seq.next_element_seed(StrictValue)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!(
                    "repeated member name {key:?} (member names must not repeat)"
                )));
            }
            let v = map.next_value_seed(StrictValue)?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_names_are_refused_at_every_depth() {
        assert!(parse_strict(br#"{"a":1,"b":{"c":[{"d":1}]}}"#).is_ok());
        for bad in [
            &br#"{"a":1,"a":1}"#[..],
            br#"{"a":{"b":1,"b":2}}"#,
            br#"[{"x":[{"y":1,"y":1}]}]"#,
        ] {
            let e = parse_strict(bad).unwrap_err().to_string();
            assert!(e.contains("repeated member name"), "{e}");
        }
        assert!(parse_strict(b"{} x").is_err());
    }
}
