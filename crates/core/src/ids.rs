//! Identifiers: bounded, printable, unambiguous.

use super::limits::MAX_ID_LEN;

/// The signer id the ledger itself uses for entries it writes and signs with the log key.
pub const LEDGER_SIGNER: &str = "ledger";

/// Checks an identifier: 1..=[`MAX_ID_LEN`] bytes of `A-Z a-z 0-9 . _ : / -`, starting with a
/// letter or digit.
pub fn check_id(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("is empty".into());
    }
    if s.len() > MAX_ID_LEN {
        return Err(format!("is longer than {MAX_ID_LEN} bytes"));
    }
    if !s.as_bytes()[0].is_ascii_alphanumeric() {
        return Err("must start with a letter or digit".into());
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '/' | '-')))
    {
        return Err(format!("contains {c:?}; allowed are A-Z a-z 0-9 . _ : / -"));
    }
    Ok(())
}

/// `CERT-` and six or more digits.
pub fn is_certificate_id(s: &str) -> bool {
    s.strip_prefix("CERT-")
        .is_some_and(|d| d.len() >= 6 && d.len() <= 20 && d.bytes().all(|b| b.is_ascii_digit()))
}

/// The certificate id of the `n`-th certificate (1-based).
pub fn certificate_id(n: u64) -> String {
    format!("CERT-{n:06}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_at_their_edges() {
        assert!(check_id("node-a1").is_ok());
        assert!(check_id("cn-north/imx:h100_80g.1").is_ok());
        assert!(check_id(&"a".repeat(MAX_ID_LEN)).is_ok());
        assert!(check_id(&"a".repeat(MAX_ID_LEN + 1)).is_err());
        assert!(check_id("").is_err());
        assert!(check_id("-x").is_err());
        assert!(check_id("a b").is_err());
        assert!(check_id("é").is_err());
    }
}
