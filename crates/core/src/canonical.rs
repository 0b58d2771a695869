//! RFC 8785 (JSON Canonicalization Scheme) for the JSON this protocol uses.
//!
//! The protocol's JSON holds objects, arrays, strings, booleans, null and integers of magnitude
//! at most 2^53 − 1; floating-point numbers are not part of it. For that subset RFC 8785 is:
//! members sorted by the UTF-16 code units of their names, no whitespace, strings escaped with
//! the short escapes `\b \t \n \f \r \" \\` and `\u00xx` (lower-case hex) for other controls,
//! everything else literal UTF-8, integers in plain decimal. This writer is tested against the
//! general `serde_jcs` implementation.

use serde_json::Value;

/// Largest integer magnitude allowed in canonical JSON (2^53 − 1).
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// JSON that has no canonical form under this protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalError {
    #[error("floating-point numbers are not allowed")]
    Float,
    #[error("integer magnitude above 2^53 - 1")]
    BigInteger,
}

/// Appends the canonical form of `v` to `out`.
pub fn write_value(v: &Value, out: &mut Vec<u8>) -> Result<(), CanonicalError> {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                write_u64(u, out)?;
            } else if let Some(i) = n.as_i64() {
                if i.unsigned_abs() > MAX_SAFE_INTEGER {
                    return Err(CanonicalError::BigInteger);
                }
                out.extend_from_slice(i.to_string().as_bytes());
            } else {
                return Err(CanonicalError::Float);
            }
        }
        Value::String(s) => write_str(s, out),
        Value::Array(a) => {
            out.push(b'[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(x, out)?;
            }
            out.push(b']');
        }
        Value::Object(m) => {
            // Sorted here, whatever order the map keeps (serde_json's `preserve_order` feature
            // would make it insertion order). For ASCII names byte order is UTF-16 order.
            let mut keys: Vec<&String> = m.keys().collect();
            if keys.iter().all(|k| k.is_ascii()) {
                keys.sort_unstable();
            } else {
                keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
            }
            out.push(b'{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(k, out);
                out.push(b':');
                write_value(&m[k], out)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

/// Appends an integer, refusing magnitudes above 2^53 − 1.
pub fn write_u64(u: u64, out: &mut Vec<u8>) -> Result<(), CanonicalError> {
    if u > MAX_SAFE_INTEGER {
        return Err(CanonicalError::BigInteger);
    }
    out.extend_from_slice(u.to_string().as_bytes());
    Ok(())
}

/// Appends a string with RFC 8785 escaping.
pub fn write_str(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: Option<&[u8]> = match b {
            b'"' => Some(b"\\\""),
            b'\\' => Some(b"\\\\"),
            0x08 => Some(b"\\b"),
            0x09 => Some(b"\\t"),
            0x0a => Some(b"\\n"),
            0x0c => Some(b"\\f"),
            0x0d => Some(b"\\r"),
            0x00..=0x1f => None,
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        match esc {
            Some(e) => out.extend_from_slice(e),
            None => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// The canonical bytes of a JSON value.
pub fn to_vec(v: &Value) -> Result<Vec<u8>, CanonicalError> {
    let mut out = Vec::with_capacity(256);
    write_value(v, &mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-(MAX_SAFE_INTEGER as i64)..=MAX_SAFE_INTEGER as i64).prop_map(Value::from),
            ".{0,12}".prop_map(Value::String),
            "[\u{0}-\u{1f}\"\\\\a-z\u{e9}\u{20ac}\u{1F600}\u{FB01}]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map("[a-z\u{e9}\u{1F600}\u{FB01}_]{0,5}", inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn agrees_with_serde_jcs(v in json()) {
            prop_assert_eq!(to_vec(&v).unwrap(), serde_jcs::to_vec(&v).unwrap());
        }
    }

    #[test]
    fn refuses_what_the_protocol_excludes() {
        assert_eq!(to_vec(&serde_json::json!(1.5)), Err(CanonicalError::Float));
        assert_eq!(
            to_vec(&serde_json::json!(1u64 << 53)),
            Err(CanonicalError::BigInteger)
        );
        assert_eq!(
            to_vec(&serde_json::json!({"b": 1, "a": [true, null, "x\n"]})).unwrap(),
            br#"{"a":[true,null,"x\n"],"b":1}"#
        );
    }
}
