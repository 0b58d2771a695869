//! Identifiers: bounded, printable, unambiguous.

use super::limits::MAX_ID_LEN;

/// The signer id the ledger itself uses for entries it writes and signs with the log key.
pub const LEDGER_SIGNER: &str = "ledger";

/// Identifiers reserved for the ledger itself (docs/PROTOCOL.md §2.3): no tenant, signer,
/// lease, region, node, GPU model or other named thing may take one. The ledger's own entries
/// still carry [`LEDGER_SIGNER`] as their envelope `signer`.
pub const RESERVED_IDS: &[&str] = &[LEDGER_SIGNER];

/// [`check_id`]'s grammar as an ECMA-262 regular expression (docs/PROTOCOL.md §2.3): the
/// `pattern` of every id the OpenAPI document describes ([`IdString`]), so the document and
/// the check say one thing. `{0,127}` is [`MAX_ID_LEN`] − 1 (asserted in the tests).
pub const ID_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$";

/// [`check_new_id`]'s grammar: [`ID_PATTERN`] without the [`RESERVED_IDS`] (the lookahead
/// names each of them), the `pattern` of an id that names a new thing ([`NewIdString`]).
pub const NEW_ID_PATTERN: &str = "^(?!ledger$)[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$";

/// The OpenAPI schema of an id ([`check_id`], component `Id`): a string of [`ID_PATTERN`].
/// A schema only; values stay `String`.
#[cfg(feature = "openapi")]
pub struct IdString;

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for IdString {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(ID_PATTERN))
            .description(Some(
                "An identifier (docs/PROTOCOL.md §2.3): 1 to 128 bytes of A-Z a-z 0-9 . _ : / -, \
                 starting with a letter or digit.",
            ))
            .examples(["acme-ai"])
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for IdString {
    fn name() -> std::borrow::Cow<'static, str> {
        "Id".into()
    }
}

/// The OpenAPI schema of the id of a thing being named ([`check_new_id`], component `NewId`):
/// a string of [`NEW_ID_PATTERN`].
#[cfg(feature = "openapi")]
pub struct NewIdString;

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for NewIdString {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .pattern(Some(NEW_ID_PATTERN))
            .description(Some(
                "The identifier of a new thing (docs/PROTOCOL.md §2.3): an `Id` that is not \
                 reserved for the ledger itself (`ledger`).",
            ))
            .examples(["acme-ai"])
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for NewIdString {
    fn name() -> std::borrow::Cow<'static, str> {
        "NewId".into()
    }
}

/// Whether `s` is a reserved identifier ([`RESERVED_IDS`]).
pub fn is_reserved_id(s: &str) -> bool {
    RESERVED_IDS.contains(&s)
}

/// Checks the id of a thing being named (a tenant, signer, lease, region, node, GPU model…):
/// [`check_id`], and not one of the [`RESERVED_IDS`].
pub fn check_new_id(s: &str) -> Result<(), String> {
    check_id(s)?;
    if is_reserved_id(s) {
        return Err(format!("{s:?} is reserved for the ledger itself"));
    }
    Ok(())
}

/// Why `c` may not appear in text shown to people (a display name, an address line, a label),
/// or `None` when it may. Refused are control characters (Unicode general category Cc, which
/// includes NUL, CR, LF and TAB), the line and paragraph separators, the bidirectional
/// controls (marks, embeddings, overrides and isolates), and the invisible format characters
/// that make two different strings look alike or hide text: soft hyphen, zero-width space,
/// word joiner and invisible operators, the deprecated format controls, the byte-order mark,
/// the interlinear annotation controls, the Hangul fillers and the tag characters. The zero-width
/// joiner and non-joiner (U+200D, U+200C) are allowed: Persian, Indic scripts and emoji need
/// them to be written correctly.
pub fn display_char_refusal(c: char) -> Option<&'static str> {
    Some(match c {
        c if c.is_control() => "a control character",
        '\u{2028}' | '\u{2029}' => "a line or paragraph separator",
        '\u{061C}' | '\u{200E}' | '\u{200F}' => "a bidirectional mark",
        '\u{202A}'..='\u{202E}' => "a bidirectional embedding or override",
        '\u{2066}'..='\u{2069}' => "a bidirectional isolate",
        '\u{00AD}' | '\u{034F}' | '\u{180E}' | '\u{200B}' | '\u{2060}'..='\u{2064}' => {
            "an invisible format character"
        }
        '\u{206A}'..='\u{206F}' => "a deprecated format character",
        '\u{FEFF}' => "a byte-order mark (zero-width no-break space)",
        '\u{FFF9}'..='\u{FFFB}' => "an interlinear annotation character",
        '\u{115F}' | '\u{1160}' | '\u{3164}' | '\u{FFA0}' => "a Hangul filler",
        '\u{E0000}'..='\u{E007F}' => "a tag character",
        _ => return None,
    })
}

/// Checks text shown to people: a display name, an address line, a label or a description.
/// It must not be empty or only white space, must be at most `max_bytes` bytes, and must hold
/// no character [`display_char_refusal`] refuses. The error names the first such character by
/// its code point, for a message about the field.
pub fn check_display_text(s: &str, max_bytes: usize) -> Result<(), String> {
    if s.trim().is_empty() {
        return Err("must not be empty or only white space".into());
    }
    if s.len() > max_bytes {
        return Err(format!("is longer than {max_bytes} bytes"));
    }
    check_display_chars(s)
}

/// The characters rule of [`check_display_text`] alone (for text that may be empty).
pub fn check_display_chars(s: &str) -> Result<(), String> {
    for (i, c) in s.chars().enumerate() {
        if let Some(why) = display_char_refusal(c) {
            return Err(format!(
                "character {} is U+{:04X}, {why}, which is not allowed in text shown to people",
                i + 1,
                c as u32
            ));
        }
    }
    Ok(())
}

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

    #[test]
    fn the_patterns_state_the_checks_limits() {
        assert!(ID_PATTERN.ends_with(&format!("{{0,{}}}$", MAX_ID_LEN - 1)));
        assert!(NEW_ID_PATTERN.ends_with(&ID_PATTERN[1..]));
        for r in RESERVED_IDS {
            assert!(NEW_ID_PATTERN.contains(&format!("(?!{r}$)")), "{r}");
        }
    }

    #[test]
    fn reserved_ids_are_refused_for_new_things() {
        assert!(check_id("ledger").is_ok(), "still an identifier");
        assert!(is_reserved_id("ledger"));
        let e = check_new_id("ledger").unwrap_err();
        assert!(e.contains("reserved"), "{e}");
        for ok in ["ledger2", "Ledger", "my-ledger", "ledger.example"] {
            assert!(check_new_id(ok).is_ok(), "{ok}");
        }
        assert!(check_new_id("").is_err());
    }

    #[test]
    fn display_text_refuses_controls_bidi_and_invisibles() {
        // (text, refused?) — every refused class at its edges, and what people do write.
        let table: &[(&str, bool)] = &[
            ("Acme GPU Ltd", false),
            ("北京算力科技有限公司", false),
            ("Müller & Söhne GmbH", false),
            ("شرکت\u{200C}ها", false), // Persian needs the zero-width non-joiner
            ("क्\u{200D}ष", false),     // Indic conjuncts need the zero-width joiner
            ("👩\u{200D}💻 Lab", false),
            ("Straße 1, 10115 Berlin", false),
            ("\u{00A0}No-break space", false),
            ("a\u{0}b", true),
            ("a\nb", true),
            ("a\rb", true),
            ("a\tb", true),
            ("a\u{1F}b", true),
            ("a\u{7F}b", true),
            ("a\u{80}b", true),
            ("a\u{9F}b", true),
            ("a\u{2028}b", true),
            ("a\u{2029}b", true),
            ("a\u{061C}b", true),
            ("a\u{200E}b", true),
            ("a\u{200F}b", true),
            ("a\u{202A}b", true),
            ("a\u{202B}b", true),
            ("a\u{202C}b", true),
            ("a\u{202D}b", true),
            ("evil\u{202E}fdp.exe", true),
            ("a\u{2066}b", true),
            ("a\u{2067}b", true),
            ("a\u{2068}b", true),
            ("a\u{2069}b", true),
            ("a\u{00AD}b", true),
            ("a\u{034F}b", true),
            ("a\u{180E}b", true),
            ("a\u{200B}b", true),
            ("a\u{2060}b", true),
            ("a\u{2064}b", true),
            ("a\u{206A}b", true),
            ("a\u{206F}b", true),
            ("a\u{FEFF}b", true),
            ("a\u{FFF9}b", true),
            ("a\u{FFFB}b", true),
            ("\u{3164}", true),
            ("a\u{115F}b", true),
            ("a\u{FFA0}b", true),
            ("a\u{E0001}b", true),
            ("a\u{E007F}b", true),
        ];
        for (text, refused) in table {
            let got = check_display_text(text, 200);
            assert_eq!(got.is_err(), *refused, "{text:?}: {got:?}");
        }
        // The neighbours of the refused ranges stay allowed.
        for c in [
            '\u{A0}', '\u{2027}', '\u{202F}', '\u{2065}', '\u{2070}', '\u{FFFC}',
        ] {
            assert_eq!(display_char_refusal(c), None, "U+{:04X}", c as u32);
        }
        let e = check_display_text("ab\u{202E}c", 200).unwrap_err();
        assert!(e.contains("character 3") && e.contains("U+202E"), "{e}");
        assert!(check_display_text("", 200).is_err());
        assert!(check_display_text("   ", 200).is_err());
        assert!(check_display_text(&"a".repeat(201), 200).is_err());
        assert!(check_display_text(&"a".repeat(200), 200).is_ok());
        assert!(check_display_chars("").is_ok());
    }
}
