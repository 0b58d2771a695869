//! The JSON Schemas in schemas/ against the vectors and against the Rust types.
//!
//! 1. Every schema is a valid draft 2020-12 schema, and every vector JSON validates.
//! 2. For a table of mutated envelopes, bodies and leaves, the schema accepts exactly what the
//!    Rust reader (`Envelope` deserialisation + `Envelope::check`) accepts, and the Rust reader
//!    refuses with the expected reason.
//! 3. Rules the schemas cannot express ("beyond the schema" in docs/PROTOCOL.md: gpu_seconds =
//!    gpu_count × duration, interval and clock limits, per-field upper limits, real dates, the
//!    size limit, key/key-id agreement, integer spelling) are shown to be schema-valid and are
//!    refused by Rust with their expected reason.
//! 4. The shared string patterns agree with the Rust parsers on generated strings.

use gpuledger::core::admission;
use gpuledger::core::decimal;
use gpuledger::core::envelope::Envelope;
use gpuledger::core::ids::check_id;
use gpuledger::core::keys;
use gpuledger::core::leaf::Leaf;
use gpuledger::core::limits::{MAX_ENVELOPE_BYTES, MAX_ID_LEN};
use gpuledger::core::record::LogPolicy;
use gpuledger::core::rejection::Reason;
use gpuledger::core::time::Timestamp;
use jsonschema::{Resource, Validator};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const ID_BASE: &str = "https://gpuledger.example/schemas/";

/// The ledger clock for the tables: later than every fixture, so the clock-skew rules pass.
fn now() -> Timestamp {
    Timestamp::parse("2030-01-01T00:00:00Z").unwrap()
}

fn schema_files() -> &'static BTreeMap<String, Value> {
    static FILES: OnceLock<BTreeMap<String, Value>> = OnceLock::new();
    FILES.get_or_init(|| {
        let mut out = BTreeMap::new();
        for entry in std::fs::read_dir(Path::new(ROOT).join("schemas")).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_owned();
            // Protocol schemas are versioned (`*.v3.json`); openapi.json is the HTTP API's
            // document and has its own test (tests/openapi.rs).
            if name.ends_with(".v3.json") {
                let v: Value = serde_json::from_slice(&std::fs::read(&path).unwrap())
                    .unwrap_or_else(|e| panic!("schemas/{name} is not JSON: {e}"));
                out.insert(name, v);
            }
        }
        out
    })
}

/// A validator for `schemas/<name>` (or any URI under the schemas' base), with every schema
/// file registered so that references resolve offline.
fn validator(reference: &str) -> Validator {
    let uri = if reference.contains("://") {
        reference.to_owned()
    } else {
        format!("{ID_BASE}{reference}")
    };
    let resources = schema_files().iter().map(|(name, v)| {
        (
            format!("{ID_BASE}{name}"),
            Resource::from_contents(v.clone()),
        )
    });
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft202012)
        .with_resources(resources)
        .build(&json!({ "$ref": uri }))
        .unwrap_or_else(|e| panic!("cannot build a validator for {uri}: {e}"))
}

fn validators() -> &'static BTreeMap<&'static str, Validator> {
    static V: OnceLock<BTreeMap<&'static str, Validator>> = OnceLock::new();
    V.get_or_init(|| {
        let mut m = BTreeMap::new();
        m.insert("envelope", validator("envelope.v3.json"));
        m.insert("leaf", validator("leaf.v3.json"));
        // One body schema for each kind of record the Rust reader knows.
        for k in gpuledger::core::record::Kind::ALL.map(|k| k.as_str()) {
            m.insert(k, validator(&format!("{k}.v3.json")));
        }
        m
    })
}

fn schema_valid(which: &str, v: &Value) -> bool {
    validators()[which].is_valid(v)
}

/// The envelope's own checks, and the clock-skew rules with the default policy against `now`.
/// The rules that bound how far in the past a record or price may lie (`too_old`,
/// `price_in_past`) depend on when it arrived, which these tables do not model: they are
/// tested against real arrivals in tests/ledger.rs and tests/api.rs.
fn rust_envelope(v: &Value, now: Timestamp) -> Result<(), Reason> {
    let env: Envelope = serde_json::from_value(v.clone()).map_err(|_| Reason::Malformed)?;
    let checked = env.check(gpuledger::sample::ORIGIN).map_err(|r| r.reason)?;
    skew_rules(&checked.body, now)
}

fn skew_rules(body: &gpuledger::core::record::Body, now: Timestamp) -> Result<(), Reason> {
    match admission::check_time(body, now, &LogPolicy::default()) {
        Err(r) if !matches!(r.reason, Reason::TooOld | Reason::PriceInPast) => Err(r.reason),
        _ => Ok(()),
    }
}

/// What a verifier reading a leaf does with the core: canonical leaf bytes of version 1, a
/// well-formed `prev`, and an envelope that passes every check at its `received_at`.
fn rust_leaf(v: &Value) -> Result<(), Reason> {
    let bytes = serde_jcs::to_vec(v).unwrap();
    let leaf = Leaf::from_bytes(&bytes).map_err(|_| Reason::Malformed)?;
    leaf.prev_hash().ok_or(Reason::InvalidField)?;
    let checked = leaf
        .envelope
        .check(gpuledger::sample::ORIGIN)
        .map_err(|r| r.reason)?;
    skew_rules(&checked.body, leaf.received_at)
}

fn vector(name: &str) -> Vec<u8> {
    std::fs::read(Path::new(ROOT).join("tests/vectors").join(name))
        .unwrap_or_else(|e| panic!("tests/vectors/{name}: {e}; generate with GPULEDGER_REGENERATE_VECTORS=1 cargo test --test vectors"))
}

fn vector_json(name: &str) -> Value {
    serde_json::from_slice(&vector(name)).unwrap()
}

fn log_leaves() -> Vec<Value> {
    let all = vector("log.jsonl");
    all.split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

#[test]
fn schemas_are_valid_2020_12_and_named_by_their_id() {
    let files = schema_files();
    let expected = [
        "certificate_issued.v3.json",
        "contract_amended.v3.json",
        "contract_registered.v3.json",
        "credit_note.v3.json",
        "defs.v3.json",
        "energy.v3.json",
        "envelope.v3.json",
        "gpu_usage.v3.json",
        "invoice_issued.v3.json",
        "leaf.v3.json",
        "lease_registered.v3.json",
        "log_policy.v3.json",
        "node_registered.v3.json",
        "node_updated.v3.json",
        "payment.v3.json",
        "prepayment.v3.json",
        "rate_card.v3.json",
        "record_excluded.v3.json",
        "region_params.v3.json",
        "signer_key_registered.v3.json",
        "signer_key_revoked.v3.json",
        "spot_price.v3.json",
        "tenant_plan.v3.json",
        "tenant_registered.v3.json",
        "volume_tiers.v3.json",
    ];
    assert_eq!(
        files.keys().map(String::as_str).collect::<Vec<_>>(),
        expected
    );
    for (name, schema) in files {
        assert_eq!(
            schema["$schema"], "https://json-schema.org/draft/2020-12/schema",
            "{name}"
        );
        assert_eq!(schema["$id"], format!("{ID_BASE}{name}"), "{name}");
        jsonschema::meta::validate(schema)
            .unwrap_or_else(|e| panic!("{name} is not a valid schema: {e}"));
        if name != "defs.v3.json" {
            assert_eq!(schema["additionalProperties"], false, "{name}");
            assert_eq!(schema["type"], "object", "{name}");
        }
    }
}

#[test]
fn every_vector_validates() {
    let mut seen = 0;
    for entry in std::fs::read_dir(Path::new(ROOT).join("tests/vectors")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let Some((stem, rest)) = name.split_once('.') else {
            continue;
        };
        let which = match rest {
            "body.json" => stem,
            "envelope.json" => "envelope",
            "leaf.json" => "leaf",
            _ => continue,
        };
        let v = vector_json(&name);
        let errors: Vec<String> = validators()[which]
            .iter_errors(&v)
            .map(|e| e.to_string())
            .collect();
        assert!(errors.is_empty(), "{name}: {errors:?}");
        seen += 1;
    }
    assert_eq!(seen, 9, "three kinds × body, envelope, leaf");
    let leaves = log_leaves();
    assert_eq!(leaves.len(), 19);
    for (i, leaf) in leaves.iter().enumerate() {
        assert!(schema_valid("leaf", leaf), "log entry {i}");
        assert!(schema_valid("envelope", &leaf["envelope"]), "log entry {i}");
        let kind = leaf["envelope"]["kind"].as_str().unwrap();
        assert!(
            schema_valid(kind, &leaf["envelope"]["body"]),
            "log entry {i}"
        );
        assert_eq!(rust_leaf(leaf), Ok(()), "log entry {i}");
    }
}

/// A base object from the vectors.
#[derive(Clone, Copy, Debug)]
enum Base {
    Gpu,
    Energy,
    Spot,
    Registered,
    Revoked,
}

fn base(b: Base) -> Value {
    match b {
        Base::Gpu => vector_json("gpu_usage.envelope.json"),
        Base::Energy => vector_json("energy.envelope.json"),
        Base::Spot => vector_json("spot_price.envelope.json"),
        Base::Registered => log_leaves()[2]["envelope"].clone(),
        Base::Revoked => log_leaves()[12]["envelope"].clone(),
    }
}

/// An edit to a JSON object at a dotted path.
enum Edit {
    Set(&'static str, Value),
    Remove(&'static str),
}
use Edit::{Remove, Set};

fn apply(mut v: Value, edits: &[Edit]) -> Value {
    for e in edits {
        let (path, new) = match e {
            Set(p, n) => (p, Some(n.clone())),
            Remove(p) => (p, None),
        };
        let mut parts: Vec<&str> = path.split('.').collect();
        let last = parts.pop().unwrap();
        let mut target = &mut v;
        for p in parts {
            target = &mut target[p];
        }
        let obj = target
            .as_object_mut()
            .unwrap_or_else(|| panic!("{path}: not inside an object"));
        match new {
            Some(n) => {
                obj.insert(last.to_owned(), n);
            }
            None => assert!(obj.remove(last).is_some(), "{path}: nothing to remove"),
        }
    }
    v
}

struct Case {
    name: &'static str,
    base: Base,
    edits: Vec<Edit>,
    expect: Result<(), Reason>,
}

fn case(name: &'static str, base: Base, edits: Vec<Edit>, expect: Result<(), Reason>) -> Case {
    Case {
        name,
        base,
        edits,
        expect,
    }
}

const MALFORMED: Result<(), Reason> = Err(Reason::Malformed);
const INVALID: Result<(), Reason> = Err(Reason::InvalidField);

/// Cases the schemas can express: the schema must accept exactly what Rust accepts.
fn shape_cases() -> Vec<Case> {
    use Base::*;
    let id128 = "n".repeat(MAX_ID_LEN);
    let id129 = "n".repeat(MAX_ID_LEN + 1);
    let sig = |bytes: usize| json!(base64_of(&vec![0u8; bytes]));
    #[rustfmt::skip]
    let cases = vec![
        // Unchanged vectors.
        case("gpu_usage as is",                           Gpu, vec![], Ok(())),
        case("energy as is",                              Energy, vec![], Ok(())),
        case("spot_price as is",                          Spot, vec![], Ok(())),
        case("signer_key_registered as is",               Registered, vec![], Ok(())),
        case("signer_key_revoked as is",                  Revoked, vec![], Ok(())),
        // Envelope shape.
        case("unknown envelope field",                    Gpu, vec![Set("extra", json!(1))], MALFORMED),
        case("missing sig",                               Gpu, vec![Remove("sig")], MALFORMED),
        case("missing body",                              Gpu, vec![Remove("body")], MALFORMED),
        case("missing seq",                               Gpu, vec![Remove("seq")], MALFORMED),
        case("body is an array",                          Gpu, vec![Set("body", json!([]))], MALFORMED),
        case("body is null",                              Gpu, vec![Set("body", Value::Null)], MALFORMED),
        case("v = 1 (retired before deployment)",         Gpu, vec![Set("v", json!(1))], Err(Reason::UnsupportedVersion)),
        case("v = 0",                                     Gpu, vec![Set("v", json!(0))], Err(Reason::UnsupportedVersion)),
        case("v as a string",                             Gpu, vec![Set("v", json!("1"))], MALFORMED),
        case("unknown kind",                              Gpu, vec![Set("kind", json!("gpu-usage"))], Err(Reason::UnknownKind)),
        case("kind as a number",                          Gpu, vec![Set("kind", json!(5))], MALFORMED),
        case("kind names another body",                   Gpu, vec![Set("kind", json!("energy"))], MALFORMED),
        // Identifiers.
        case("signer empty",                              Gpu, vec![Set("signer", json!(""))], INVALID),
        case("signer of 128 bytes",                       Gpu, vec![Set("signer", json!(id128))], Ok(())),
        case("signer of 129 bytes",                       Gpu, vec![Set("signer", json!(id129))], INVALID),
        case("signer starting with '-'",                  Gpu, vec![Set("signer", json!("-node"))], INVALID),
        case("signer with a space",                       Gpu, vec![Set("signer", json!("node a"))], INVALID),
        case("signer with a final newline",               Gpu, vec![Set("signer", json!("node\n"))], INVALID),
        case("signer not ASCII",                          Gpu, vec![Set("signer", json!("nöde"))], INVALID),
        case("signer with all allowed punctuation",       Gpu, vec![Set("signer", json!("a._:/-Z9"))], Ok(())),
        case("tenant too long",                           Gpu, vec![Set("body.tenant", json!(id129))], INVALID),
        case("gpu_model with a space",                    Gpu, vec![Set("body.gpu_model", json!("H100 SXM"))], INVALID),
        case("region with '+'",                           Spot, vec![Set("body.region", json!("cn+1"))], INVALID),
        // key_id, seq, sig.
        case("key_id upper-case",                         Gpu, vec![Set("key_id", json!("34750F98BD59FCFC"))], INVALID),
        case("key_id of 15 digits",                       Gpu, vec![Set("key_id", json!("34750f98bd59fcf"))], INVALID),
        case("key_id of 17 digits",                       Gpu, vec![Set("key_id", json!("34750f98bd59fcfc0"))], INVALID),
        case("seq 0",                                     Gpu, vec![Set("seq", json!(0))], Err(Reason::QuantityOutOfRange)),
        case("seq 2^53 - 1",                              Gpu, vec![Set("seq", json!(9_007_199_254_740_991u64))], Ok(())),
        case("seq 2^53",                                  Gpu, vec![Set("seq", json!(9_007_199_254_740_992u64))], Err(Reason::QuantityOutOfRange)),
        case("seq negative",                              Gpu, vec![Set("seq", json!(-1))], MALFORMED),
        case("seq as a string",                           Gpu, vec![Set("seq", json!("1"))], MALFORMED),
        case("seq with a fraction",                       Gpu, vec![Set("seq", json!(1.5))], MALFORMED),
        case("sig of 63 bytes",                           Gpu, vec![Set("sig", sig(63))], INVALID),
        case("sig of 65 bytes",                           Gpu, vec![Set("sig", sig(65))], INVALID),
        case("sig without padding",                       Gpu, vec![Set("sig", json!(base64_of(&[0u8; 64]).trim_end_matches('=')))], INVALID),
        case("sig with non-zero unused bits",             Gpu, vec![Set("sig", json!(format!("{}B==", "A".repeat(85))))], INVALID),
        case("sig in URL-safe base64",                    Gpu, vec![Set("sig", json!(format!("{}-A==", "A".repeat(84))))], INVALID),
        case("sig as a number",                           Gpu, vec![Set("sig", json!(7))], MALFORMED),
        // Body shape.
        case("unknown body field",                        Gpu, vec![Set("body.color", json!("red"))], MALFORMED),
        case("missing gpu_seconds",                       Gpu, vec![Remove("body.gpu_seconds")], MALFORMED),
        case("missing tenant in gpu_usage",               Gpu, vec![Remove("body.tenant")], MALFORMED),
        case("lease absent",                              Gpu, vec![Remove("body.lease")], Ok(())),
        case("lease null",                                Gpu, vec![Set("body.lease", Value::Null)], MALFORMED),
        case("lease as a number",                         Gpu, vec![Set("body.lease", json!(42))], MALFORMED),
        case("tenant null",                               Gpu, vec![Set("body.tenant", Value::Null)], MALFORMED),
        // Decimals.
        case("gpu_count as a JSON number",                Gpu, vec![Set("body.gpu_count", json!(8))], MALFORMED),
        case("gpu_count 8.0",                             Gpu, vec![Set("body.gpu_count", json!("8.0"))], INVALID),
        case("gpu_count 1.50",                            Gpu, vec![Set("body.gpu_count", json!("1.50"))], INVALID),
        case("gpu_count -1",                              Gpu, vec![Set("body.gpu_count", json!("-1"))], Err(Reason::NegativeQuantity)),
        case("gpu_count 1e3",                             Gpu, vec![Set("body.gpu_count", json!("1e3"))], INVALID),
        case("gpu_count 08",                              Gpu, vec![Set("body.gpu_count", json!("08"))], INVALID),
        case("gpu_count .5",                              Gpu, vec![Set("body.gpu_count", json!(".5"))], INVALID),
        case("gpu_count 8.",                              Gpu, vec![Set("body.gpu_count", json!("8."))], INVALID),
        case("gpu_count +8",                              Gpu, vec![Set("body.gpu_count", json!("+8"))], INVALID),
        case("gpu_count with a space",                    Gpu, vec![Set("body.gpu_count", json!(" 8"))], INVALID),
        case("gpu_count with 10 fraction digits",         Gpu, vec![Set("body.gpu_count", json!("0.0000000001"))], INVALID),
        case("gpu_count with 9 fraction digits",          Gpu, vec![Set("body.gpu_count", json!("0.000000001")), Set("body.gpu_seconds", json!("0.0000003"))], Ok(())),
        case("gpu_seconds of 41 characters",              Gpu, vec![Set("body.gpu_seconds", json!(format!("1{}", "0".repeat(40))))], INVALID),
        case("kwh 3.1250",                                Energy, vec![Set("body.kwh", json!("3.1250"))], INVALID),
        case("kwh as a JSON number",                      Energy, vec![Set("body.kwh", json!(3.125))], MALFORMED),
        case("kwh 0",                                     Energy, vec![Set("body.kwh", json!("0"))], Ok(())),
        case("price -14.75",                              Spot, vec![Set("body.price_per_gpu_hour", json!("-14.75"))], Err(Reason::NegativeQuantity)),
        case("price 14,75",                               Spot, vec![Set("body.price_per_gpu_hour", json!("14,75"))], INVALID),
        // Timestamps.
        case("start without Z",                           Gpu, vec![Set("body.start", json!("2026-11-30T12:00:00"))], INVALID),
        case("start with fractional seconds",             Gpu, vec![Set("body.start", json!("2026-11-30T12:00:00.000Z"))], INVALID),
        case("start with a space",                        Gpu, vec![Set("body.start", json!("2026-11-30 12:00:00Z"))], INVALID),
        case("start with an offset",                      Gpu, vec![Set("body.start", json!("2026-11-30T12:00:00+00:00"))], INVALID),
        case("start in lower case",                       Gpu, vec![Set("body.start", json!("2026-11-30t12:00:00z"))], INVALID),
        case("start as Unix seconds",                     Gpu, vec![Set("body.start", json!(1_796_040_000))], MALFORMED),
        case("effective_from without seconds",            Spot, vec![Set("body.effective_from", json!("2026-11-30T13:00Z"))], INVALID),
        // Optional fields of energy and spot_price.
        case("energy without tenant",                     Energy, vec![Remove("body.tenant")], Ok(())),
        case("energy tenant null",                        Energy, vec![Set("body.tenant", Value::Null)], MALFORMED),
        case("energy without kwh",                        Energy, vec![Remove("body.kwh")], MALFORMED),
        case("currency in lower case",                    Spot, vec![Set("body.currency", json!("cny"))], INVALID),
        case("currency of four letters",                  Spot, vec![Set("body.currency", json!("CNYX"))], INVALID),
        case("currency missing",                          Spot, vec![Remove("body.currency")], MALFORMED),
        // Ledger-written bodies.
        case("role admin",                                Registered, vec![Set("body.role", json!("admin"))], MALFORMED),
        case("role market",                               Registered, vec![Set("body.role", json!("market")), Remove("body.nodes")], Ok(())),
        case("public_key of 31 bytes",                    Registered, vec![Set("body.public_key", json!(base64_of(&[7u8; 31])))], INVALID),
        case("public_key with a space",                   Registered, vec![Set("body.public_key", json!(" iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w="))], INVALID),
        case("registered key_id upper-case",              Registered, vec![Set("body.key_id", json!("34750F98BD59FCFC"))], INVALID),
        case("registered with an extra field",            Registered, vec![Set("body.note", json!("x"))], MALFORMED),
        case("registered without role",                   Registered, vec![Remove("body.role")], MALFORMED),
        case("revoked without reason",                    Revoked, vec![Remove("body.reason")], Ok(())),
        case("revoked reason null",                       Revoked, vec![Set("body.reason", Value::Null)], MALFORMED),
        case("revoked reason as a number",                Revoked, vec![Set("body.reason", json!(5))], MALFORMED),
        case("revoked key_id too short",                  Revoked, vec![Set("body.key_id", json!("abc"))], INVALID),
        case("revoked signer with a space",               Revoked, vec![Set("body.signer", json!("market cn"))], INVALID),
    ];
    cases
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::prelude::{Engine, BASE64_STANDARD};
    BASE64_STANDARD.encode(bytes)
}

/// How the schema and Rust judged a case, when that is not what the case expects: Rust must
/// give `expect`; the schema must accept exactly what Rust accepts where the schema can express
/// the rule (`expressed`), and accept everything where it cannot.
fn disagreement(
    name: &str,
    schema: bool,
    rust: Result<(), Reason>,
    expect: Result<(), Reason>,
    expressed: bool,
) -> Option<String> {
    let schema_ok = if expressed {
        schema == rust.is_ok()
    } else {
        schema
    };
    (!schema_ok || rust != expect)
        .then(|| format!("{name}: schema valid = {schema}, rust = {rust:?}, expected {expect:?}"))
}

/// Fails listing every case that disagrees.
fn assert_all_agree(failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} cases disagree:\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
}

/// Runs envelope cases (see [`disagreement`]).
fn assert_envelope_cases(cases: Vec<Case>, expressed: bool) {
    let failures: Vec<String> = cases
        .into_iter()
        .filter_map(|c| {
            let v = apply(base(c.base), &c.edits);
            let schema = schema_valid("envelope", &v);
            disagreement(
                c.name,
                schema,
                rust_envelope(&v, now()),
                c.expect,
                expressed,
            )
        })
        .collect();
    assert_all_agree(&failures);
}

#[test]
fn schema_accepts_exactly_what_rust_accepts() {
    let cases = shape_cases();
    assert!(cases.len() >= 40);
    assert_envelope_cases(cases, true);
}

/// Rules beyond the schema: every case here is schema-valid, and Rust decides.
fn semantic_cases() -> Vec<Case> {
    use Base::*;
    // 300 s intervals that end exactly 300 s after `now`, and one second later.
    let future = |start: &'static str, end: &'static str| {
        vec![
            Set("body.start", json!(start)),
            Set("body.end", json!(end)),
            Set("body.gpu_seconds", json!("2400")),
        ]
    };
    let interval = |end: &'static str, gpu_seconds: &'static str| {
        vec![
            Set("body.start", json!("2026-11-30T12:00:00Z")),
            Set("body.end", json!(end)),
            Set("body.gpu_seconds", json!(gpu_seconds)),
        ]
    };
    let weak_key = {
        let mut identity = [0u8; 32];
        identity[0] = 1;
        base64_of(&identity)
    };
    #[rustfmt::skip]
    let cases = vec![
        case("gpu_seconds one off",                       Gpu, vec![Set("body.gpu_seconds", json!("2401"))], Err(Reason::GpuSecondsMismatch)),
        case("gpu_seconds for another count",             Gpu, vec![Set("body.gpu_count", json!("4"))], Err(Reason::GpuSecondsMismatch)),
        case("end equal to start",                        Gpu, interval("2026-11-30T12:00:00Z", "0"), Err(Reason::EmptyInterval)),
        case("end before start",                          Gpu, interval("2026-11-30T11:59:59Z", "0"), Err(Reason::EmptyInterval)),
        case("interval of 86400 s",                       Gpu, interval("2026-12-01T12:00:00Z", "691200"), Ok(())),
        case("interval of 86401 s",                       Gpu, interval("2026-12-01T12:00:01Z", "691208"), Err(Reason::IntervalTooLong)),
        case("end 300 s after now",                       Gpu, future("2030-01-01T00:00:00Z", "2030-01-01T00:05:00Z"), Ok(())),
        case("end 301 s after now",                       Gpu, future("2030-01-01T00:00:01Z", "2030-01-01T00:05:01Z"), Err(Reason::InFuture)),
        case("energy end 301 s after now",                Energy, vec![Set("body.start", json!("2030-01-01T00:00:00Z")), Set("body.end", json!("2030-01-01T00:05:01Z"))], Err(Reason::InFuture)),
        case("gpu_count 0",                               Gpu, vec![Set("body.gpu_count", json!("0")), Set("body.gpu_seconds", json!("0"))], Err(Reason::QuantityOutOfRange)),
        case("gpu_count 1024",                            Gpu, vec![Set("body.gpu_count", json!("1024")), Set("body.gpu_seconds", json!("307200"))], Ok(())),
        case("gpu_count 1024.5",                          Gpu, vec![Set("body.gpu_count", json!("1024.5")), Set("body.gpu_seconds", json!("307350"))], Err(Reason::QuantityOutOfRange)),
        case("kwh 100000",                                Energy, vec![Set("body.kwh", json!("100000"))], Ok(())),
        case("kwh 100000.000000001",                      Energy, vec![Set("body.kwh", json!("100000.000000001"))], Err(Reason::QuantityOutOfRange)),
        case("price 1000000",                             Spot, vec![Set("body.price_per_gpu_hour", json!("1000000"))], Ok(())),
        case("price 1000000.01",                          Spot, vec![Set("body.price_per_gpu_hour", json!("1000000.01"))], Err(Reason::QuantityOutOfRange)),
        case("price 0",                                   Spot, vec![Set("body.price_per_gpu_hour", json!("0"))], Ok(())),
        case("price beyond rust_decimal",                 Spot, vec![Set("body.price_per_gpu_hour", json!("9".repeat(30)))], INVALID),
        case("effective_from 7 days ahead",               Spot, vec![Set("body.effective_from", json!("2030-01-08T00:00:00Z"))], Ok(())),
        case("effective_from 7 days and 1 s ahead",       Spot, vec![Set("body.effective_from", json!("2030-01-08T00:00:01Z"))], Err(Reason::InFuture)),
        case("30 February",                               Gpu, vec![Set("body.start", json!("2026-02-30T12:00:00Z"))], INVALID),
        case("hour 24",                                   Gpu, vec![Set("body.end", json!("2026-11-30T24:00:00Z"))], INVALID),
        case("second 60",                                 Gpu, vec![Set("body.end", json!("2026-11-30T12:04:60Z"))], INVALID),
        case("before 2000",                               Spot, vec![Set("body.effective_from", json!("1999-12-31T23:59:59Z"))], INVALID),
        case("year 0000",                                 Spot, vec![Set("body.effective_from", json!("0000-01-01T00:00:00Z"))], INVALID),
        case("currency not checked against ISO 4217 beyond its shape", Spot, vec![Set("body.currency", json!("ZZZ"))], Ok(())),
        case("registered key_id of another key",          Registered, vec![Set("body.key_id", json!("0000000000000000"))], INVALID),
        case("registered weak public key",                Registered, vec![Set("body.public_key", json!(weak_key))], INVALID),
        case("seq written as 1.0",                        Gpu, vec![Set("seq", json!(1.0))], MALFORMED),
        case("v written as 3.0",                          Gpu, vec![Set("v", json!(3.0))], MALFORMED),
    ];
    cases
}

#[test]
fn rules_beyond_the_schema_are_refused_by_rust() {
    assert_envelope_cases(semantic_cases(), false);
}

/// The size limit is on the canonical envelope (signature included), at its exact edge.
#[test]
fn size_limit_at_its_edge() {
    let revoked = base(Base::Revoked);
    let reason_len = revoked["body"]["reason"].as_str().unwrap().len();
    let env: Envelope = serde_json::from_value(revoked.clone()).unwrap();
    let len = env.canonical_bytes().unwrap().len();
    let fits = reason_len + (MAX_ENVELOPE_BYTES - len);
    for (reason, expect) in [(fits, Ok(())), (fits + 1, Err(Reason::TooLarge))] {
        let v = apply(
            revoked.clone(),
            &[Set("body.reason", json!("x".repeat(reason)))],
        );
        let env: Envelope = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(
            env.canonical_bytes().unwrap().len(),
            MAX_ENVELOPE_BYTES + reason - fits
        );
        assert!(schema_valid("envelope", &v));
        assert_eq!(
            rust_envelope(&v, now()),
            expect,
            "canonical length {}",
            env.canonical_bytes().unwrap().len()
        );
    }
}

#[test]
fn leaf_schema_agrees_with_the_leaf_reader() {
    let leaf = log_leaves()[7].clone();
    let zero_prev = json!(base64_of(&[0u8; 32]));
    #[rustfmt::skip]
    let cases: Vec<(&str, Vec<Edit>, bool)> = vec![
        ("as is",                           vec![], true),
        ("genesis prev",                    vec![Set("prev", zero_prev)], true),
        ("v 1",                             vec![Set("v", json!(1))], false),
        ("unknown field",                   vec![Set("extra", json!(true))], false),
        ("missing prev",                    vec![Remove("prev")], false),
        ("index negative",                  vec![Set("index", json!(-1))], false),
        ("index as a string",               vec![Set("index", json!("2"))], false),
        ("received_at with an offset",      vec![Set("received_at", json!("2026-11-30T12:05:02+00:00"))], false),
        ("prev of 31 bytes",                vec![Set("prev", json!(base64_of(&[1u8; 31])))], false),
        ("prev with non-zero unused bits",  vec![Set("prev", json!(format!("{}B=", "A".repeat(42))))], false),
        ("envelope with an unknown field",  vec![Set("envelope.extra", json!(1))], false),
        ("envelope with a bad decimal",     vec![Set("envelope.body.gpu_count", json!("8.0"))], false),
    ];
    for (name, edits, ok) in cases {
        let v = apply(leaf.clone(), &edits);
        assert_eq!(schema_valid("leaf", &v), ok, "{name}: schema");
        assert_eq!(
            rust_leaf(&v).is_ok(),
            ok,
            "{name}: rust ({:?})",
            rust_leaf(&v)
        );
    }
    // Beyond the schema: the envelope is checked against the clock at received_at.
    let early = apply(leaf, &[Set("received_at", json!("2026-11-30T11:00:00Z"))]);
    assert!(schema_valid("leaf", &early));
    assert_eq!(rust_leaf(&early), Err(Reason::InFuture));
}

/// The ledger-written pricing bodies of graduated tiers: for shape cases the body schema (and
/// the envelope schema selecting it by kind) accepts exactly what `Body::from_value` accepts;
/// for rules beyond the schema the schema accepts and Rust refuses with the expected reason.
#[test]
fn volume_tiers_and_tenant_plan_schemas_agree_with_rust() {
    use gpuledger::core::record::{Body, Kind};
    let tiers = json!({"plan": "volume", "region": "west", "gpu_model": "H100", "lease_class": "on_demand",
        "currency": "CNY", "effective_from": "2026-11-01T00:00:00Z",
        "tiers": [{"up_to_gpu_hours": "10", "price_per_gpu_hour": "20.5"},
                  {"up_to_gpu_hours": "25", "price_per_gpu_hour": "17.25"},
                  {"price_per_gpu_hour": "13.333"}]});
    let plan =
        json!({"tenant": "acme", "plan": "volume", "effective_from": "2026-11-01T00:00:00Z"});
    let tier = |b: Option<&str>, p: &str| match b {
        Some(b) => json!({"up_to_gpu_hours": b, "price_per_gpu_hour": p}),
        None => json!({"price_per_gpu_hour": p}),
    };
    let with = |base: &Value, k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        b
    };
    let without = |base: &Value, k: &str| {
        let mut b = base.clone();
        b.as_object_mut().unwrap().remove(k);
        b
    };
    let seventeen: Vec<Value> = (1..=16)
        .map(|i| tier(Some(&i.to_string()), "1"))
        .chain([tier(None, "1")])
        .collect();
    let sixteen: Vec<Value> = seventeen[1..].to_vec();
    // (name, kind, body, expected, schema expresses the rule)
    type BodyCase = (&'static str, Kind, Value, Result<(), Reason>, bool);
    #[rustfmt::skip]
    let cases: Vec<BodyCase> = vec![
        ("tiers as is",                 Kind::VolumeTiers, tiers.clone(), Ok(()), true),
        ("plan as is",                  Kind::TenantPlan, plan.clone(), Ok(()), true),
        ("one open tier",               Kind::VolumeTiers, with(&tiers, "tiers", json!([tier(None, "12")])), Ok(()), true),
        ("16 tiers",                    Kind::VolumeTiers, with(&tiers, "tiers", json!(sixteen)), Ok(()), true),
        ("17 tiers",                    Kind::VolumeTiers, with(&tiers, "tiers", json!(seventeen)), Err(Reason::QuantityOutOfRange), true),
        ("no tiers",                    Kind::VolumeTiers, with(&tiers, "tiers", json!([])), INVALID, true),
        ("tiers not an array",          Kind::VolumeTiers, with(&tiers, "tiers", json!("12")), MALFORMED, true),
        ("tiers missing",               Kind::VolumeTiers, without(&tiers, "tiers"), MALFORMED, true),
        ("plan missing",                Kind::VolumeTiers, without(&tiers, "plan"), MALFORMED, true),
        ("extra member",                Kind::VolumeTiers, with(&tiers, "note", json!("x")), MALFORMED, true),
        ("extra tier member",           Kind::VolumeTiers, with(&tiers, "tiers", json!([{"price_per_gpu_hour": "1", "x": "1"}])), MALFORMED, true),
        ("null bound",                  Kind::VolumeTiers, with(&tiers, "tiers", json!([{"up_to_gpu_hours": null, "price_per_gpu_hour": "1"}, tier(None, "1")])), MALFORMED, true),
        ("tier price missing",          Kind::VolumeTiers, with(&tiers, "tiers", json!([{"up_to_gpu_hours": "1"}, tier(None, "1")])), MALFORMED, true),
        ("no open tier",                Kind::VolumeTiers, with(&tiers, "tiers", json!([tier(Some("1"), "2"), tier(Some("2"), "1")])), INVALID, true),
        ("two open tiers",              Kind::VolumeTiers, with(&tiers, "tiers", json!([tier(None, "2"), tier(None, "1")])), INVALID, true),
        ("spot tiers",                  Kind::VolumeTiers, with(&tiers, "lease_class", json!("spot")), INVALID, true),
        ("bound spelled 10.0",          Kind::VolumeTiers, with(&tiers, "tiers", json!([tier(Some("10.0"), "2"), tier(None, "1")])), INVALID, true),
        ("negative price",              Kind::VolumeTiers, with(&tiers, "tiers", json!([tier(None, "-1")])), Err(Reason::NegativeQuantity), true),
        ("lower-case currency",         Kind::VolumeTiers, with(&tiers, "currency", json!("cny")), INVALID, true),
        ("plan id with a space",        Kind::TenantPlan, with(&plan, "plan", json!("a b")), INVALID, true),
        ("plan without tenant",         Kind::TenantPlan, without(&plan, "tenant"), MALFORMED, true),
        ("plan with tiers",             Kind::TenantPlan, with(&plan, "tiers", json!([])), MALFORMED, true),
        // Beyond the schema.
        ("open tier first",             Kind::VolumeTiers, with(&tiers, "tiers", json!([tier(None, "2"), tier(Some("1"), "1")])), INVALID, false),
        ("equal bounds",                Kind::VolumeTiers, with(&tiers, "tiers", json!([tier(Some("1"), "3"), tier(Some("1"), "2"), tier(None, "1")])), INVALID, false),
        ("decreasing bounds",           Kind::VolumeTiers, with(&tiers, "tiers", json!([tier(Some("2"), "3"), tier(Some("1"), "2"), tier(None, "1")])), INVALID, false),
        ("zero bound",                  Kind::VolumeTiers, with(&tiers, "tiers", json!([tier(Some("0"), "2"), tier(None, "1")])), INVALID, false),
        ("bound at the limit",          Kind::VolumeTiers, with(&tiers, "tiers", json!([tier(Some("1000000000"), "2"), tier(None, "1")])), Ok(()), true),
        ("bound above the limit",       Kind::VolumeTiers, with(&tiers, "tiers", json!([tier(Some("1000000000.5"), "2"), tier(None, "1")])), Err(Reason::QuantityOutOfRange), false),
        ("price above the limit",       Kind::VolumeTiers, with(&tiers, "tiers", json!([tier(None, "1000000.1")])), Err(Reason::QuantityOutOfRange), false),
        ("not a real date",             Kind::TenantPlan, with(&plan, "effective_from", json!("2026-02-30T00:00:00Z")), INVALID, false),
    ];
    let mut failures = Vec::new();
    for (name, kind, body, expect, expressed) in cases {
        let schema = schema_valid(kind.as_str(), &body);
        let rust = Body::from_value(kind, &body)
            .map(|_| ())
            .map_err(|r| r.reason);
        // The envelope schema selects the body schema by kind.
        let env = json!({"v": 3, "kind": kind.as_str(), "signer": "ledger", "key_id": "0123456789abcdef",
                         "seq": 1, "body": body, "sig": base64_of(&[0u8; 64])});
        if schema_valid("envelope", &env) != schema {
            failures.push(format!("{name}: the envelope schema says {}", !schema));
        }
        failures.extend(disagreement(name, schema, rust, expect, expressed));
    }
    assert_all_agree(&failures);
    // A valid body round-trips through the Rust type to the same JSON.
    let b = Body::from_value(Kind::VolumeTiers, &tiers).unwrap();
    assert_eq!(b.to_value(), tiers);
    let p = Body::from_value(Kind::TenantPlan, &plan).unwrap();
    assert_eq!(p.to_value(), plan);
}

/// The ledger-written `record_excluded` body (docs/PROTOCOL.md §5.17): the schema and
/// `Body::from_value` agree on its shape, and on the reason's length and spaces; control
/// characters are beyond the schema.
#[test]
fn record_excluded_bodies_agree_with_their_schema() {
    use gpuledger::core::record::{Body, Kind};
    let x = json!({"tenant": "acme", "entry": 12, "reason": "node-7 counted twice"});
    let with = |k: &str, v: Value| {
        let mut b = x.clone();
        b[k] = v;
        b
    };
    let without = |k: &str| {
        let mut b = x.clone();
        b.as_object_mut().unwrap().remove(k);
        b
    };
    type BodyCase = (&'static str, Value, Result<(), Reason>, bool);
    #[rustfmt::skip]
    let cases: Vec<BodyCase> = vec![
        ("valid exclusion",            x.clone(), Ok(()), true),
        ("entry 0",                    with("entry", json!(0)), Ok(()), true),
        ("500-byte reason",            with("reason", json!("r".repeat(500))), Ok(()), true),
        ("501-byte reason",            with("reason", json!("r".repeat(501))), INVALID, true),
        ("empty reason",               with("reason", json!("")), INVALID, true),
        ("reason with a leading space", with("reason", json!(" late")), INVALID, true),
        ("reason with a trailing space", with("reason", json!("late ")), INVALID, true),
        ("entry as a string",          with("entry", json!("12")), MALFORMED, true),
        ("negative entry",             with("entry", json!(-1)), MALFORMED, true),
        ("reason null",                with("reason", Value::Null), MALFORMED, true),
        ("no entry",                   without("entry"), MALFORMED, true),
        ("an extra member",            with("lines", json!([])), MALFORMED, true),
        ("tenant not an id",           with("tenant", json!("a b")), INVALID, true),
        // Beyond the schema.
        ("reason with a control character", with("reason", json!("bell\u{7}ring")), INVALID, false),
    ];
    let mut failures = Vec::new();
    for (name, body, expect, expressed) in cases {
        let schema = schema_valid("record_excluded", &body);
        let rust = Body::from_value(Kind::RecordExcluded, &body)
            .map(|_| ())
            .map_err(|r| r.reason);
        let env = json!({"v": 3, "kind": "record_excluded", "signer": "ledger", "key_id": "0123456789abcdef",
                         "seq": 1, "body": body, "sig": base64_of(&[0u8; 64])});
        if schema_valid("envelope", &env) != schema {
            failures.push(format!("{name}: the envelope schema says {}", !schema));
        }
        failures.extend(disagreement(name, schema, rust, expect, expressed));
    }
    assert_all_agree(&failures);
    let b = Body::from_value(Kind::RecordExcluded, &x).unwrap();
    assert_eq!(b.to_value(), x);
}

/// The ledger-written `contract_registered` body (docs/PROTOCOL.md §5.19): the schema and
/// `Body::from_value` agree on its shape, enums, amounts' grammar and list lengths; the term's
/// order and length, a zero amount, a name of refused characters and "fees or a commitment"
/// are beyond the schema.
#[test]
fn contract_registered_bodies_agree_with_their_schema() {
    use gpuledger::core::record::{Body, Kind};
    let fee =
        json!({"name": "Bare metal", "amount": "3100", "timing": "advance", "category": "compute"});
    let c = json!({"tenant": "acme", "contract": "C-1", "currency": "CNY", "region": "west",
                   "term_from": "2027-01-15T12:00:00Z", "term_to": "2028-01-15T12:00:00Z",
                   "billing_period": "month", "billing_anchor": "calendar",
                   "fees": [fee.clone()], "commitment": "1000"});
    let with = |k: &str, v: Value| {
        let mut b = c.clone();
        b[k] = v;
        b
    };
    let without = |k: &str| {
        let mut b = c.clone();
        b.as_object_mut().unwrap().remove(k);
        b
    };
    let fee_with = |k: &str, v: Value| {
        let mut f = fee.clone();
        f[k] = v;
        with("fees", json!([f]))
    };
    const RANGE: Result<(), Reason> = Err(Reason::QuantityOutOfRange);
    type BodyCase = (&'static str, Value, Result<(), Reason>, bool);
    #[rustfmt::skip]
    let cases: Vec<BodyCase> = vec![
        ("valid contract",              c.clone(), Ok(()), true),
        ("fees only",                   without("commitment"), Ok(()), true),
        ("commitment only",             without("fees"), Ok(()), true),
        ("16 fees",                     with("fees", json!(vec![fee.clone(); 16])), Ok(()), true),
        ("17 fees",                     with("fees", json!(vec![fee.clone(); 17])), RANGE, true),
        ("no fees listed",              with("fees", json!([])), INVALID, true),
        ("quarterly on anniversaries",  with("billing_period", json!("quarter")), Ok(()), true),
        ("weekly",                      with("billing_period", json!("week")), INVALID, true),
        ("anchor on the 1st",           with("billing_anchor", json!("first")), INVALID, true),
        ("timing monthly",              fee_with("timing", json!("monthly")), INVALID, true),
        ("category gpu",                fee_with("category", json!("gpu")), INVALID, true),
        ("amount with 5 decimals",      fee_with("amount", json!("1.00001")), INVALID, true),
        ("amount as a number",          fee_with("amount", json!(3100)), MALFORMED, true),
        ("101-byte name",               fee_with("name", json!("n".repeat(101))), INVALID, true),
        ("empty name",                  fee_with("name", json!("")), INVALID, true),
        ("a fee member too many",       fee_with("sku", json!("x")), MALFORMED, true),
        ("no term_to",                  without("term_to"), MALFORMED, true),
        ("an extra member",             with("leases", json!([])), MALFORMED, true),
        ("currency in lower case",      with("currency", json!("cny")), INVALID, true),
        ("commitment null",             with("commitment", Value::Null), MALFORMED, true),
        // Beyond the schema.
        ("term_to before term_from",    with("term_to", json!("2027-01-01T00:00:00Z")), INVALID, false),
        ("a term of 3661 days",         with("term_to", json!("2037-01-27T12:00:00Z")), RANGE, false),
        ("zero commitment",             with("commitment", json!("0")), RANGE, false),
        ("amount above 10^12",          fee_with("amount", json!("1000000000001")), RANGE, false),
        ("a name of spaces",            fee_with("name", json!("   ")), INVALID, false),
        ("neither fees nor commitment", without("fees").as_object().map(|o| {
            let mut o = o.clone();
            o.remove("commitment");
            Value::Object(o)
        }).unwrap(), INVALID, false),
    ];
    let mut failures = Vec::new();
    for (name, body, expect, expressed) in cases {
        let schema = schema_valid("contract_registered", &body);
        let rust = Body::from_value(Kind::ContractRegistered, &body)
            .map(|_| ())
            .map_err(|r| r.reason);
        let env = json!({"v": 3, "kind": "contract_registered", "signer": "ledger", "key_id": "0123456789abcdef",
                         "seq": 1, "body": body, "sig": base64_of(&[0u8; 64])});
        if schema_valid("envelope", &env) != schema {
            failures.push(format!("{name}: the envelope schema says {}", !schema));
        }
        failures.extend(disagreement(name, schema, rust, expect, expressed));
    }
    assert_all_agree(&failures);
    let b = Body::from_value(Kind::ContractRegistered, &c).unwrap();
    assert_eq!(b.to_value(), c);
}

/// The ledger-written `prepayment` body (docs/PROTOCOL.md §5.20): the schema and
/// `Body::from_value` agree on its shape, source words, the amount's grammar and the
/// reference's length; a zero amount, one above 10^12 and more digits than the currency's
/// minor unit are beyond the schema.
#[test]
fn prepayment_bodies_agree_with_their_schema() {
    use gpuledger::core::record::{Body, Kind};
    let p = json!({"tenant": "acme", "reference": "TOPUP-2027-0042", "source": "purchase",
                   "currency": "CNY", "amount": "5000.00", "expires_at": "2028-01-01T00:00:00Z"});
    let with = |k: &str, v: Value| {
        let mut b = p.clone();
        b[k] = v;
        b
    };
    let without = |k: &str| {
        let mut b = p.clone();
        b.as_object_mut().unwrap().remove(k);
        b
    };
    const RANGE: Result<(), Reason> = Err(Reason::QuantityOutOfRange);
    type BodyCase = (&'static str, Value, Result<(), Reason>, bool);
    #[rustfmt::skip]
    let cases: Vec<BodyCase> = vec![
        ("valid top-up",               p.clone(), Ok(()), true),
        ("never expires",              without("expires_at"), Ok(()), true),
        ("a grant",                    with("source", json!("grant")), Ok(()), true),
        ("a gift",                     with("source", json!("gift")), INVALID, true),
        ("no reference",               without("reference"), MALFORMED, true),
        ("empty reference",            with("reference", json!("")), INVALID, true),
        ("129-byte reference",         with("reference", json!("r".repeat(129))), INVALID, true),
        ("reference with a space",     with("reference", json!(" TOPUP")), INVALID, true),
        ("amount with 5 decimals",     with("amount", json!("1.00001")), INVALID, true),
        ("amount as a number",         with("amount", json!(5000)), MALFORMED, true),
        ("expires_at null",            with("expires_at", Value::Null), MALFORMED, true),
        ("an extra member",            with("contract", json!("C-1")), MALFORMED, true),
        ("currency in lower case",     with("currency", json!("cny")), INVALID, true),
        // Beyond the schema.
        ("zero amount",                with("amount", json!("0")), RANGE, false),
        ("amount above 10^12",         with("amount", json!("1000000000001")), RANGE, false),
        ("3 decimals in CNY",          with("amount", json!("10.001")), INVALID, false),
        ("2 decimals in JPY",          with("currency", json!("JPY")), INVALID, false),
    ];
    let mut failures = Vec::new();
    for (name, body, expect, expressed) in cases {
        let schema = schema_valid("prepayment", &body);
        let rust = Body::from_value(Kind::Prepayment, &body)
            .map(|_| ())
            .map_err(|r| r.reason);
        let env = json!({"v": 3, "kind": "prepayment", "signer": "ledger", "key_id": "0123456789abcdef",
                         "seq": 1, "body": body, "sig": base64_of(&[0u8; 64])});
        if schema_valid("envelope", &env) != schema {
            failures.push(format!("{name}: the envelope schema says {}", !schema));
        }
        failures.extend(disagreement(name, schema, rust, expect, expressed));
    }
    assert_all_agree(&failures);
    let b = Body::from_value(Kind::Prepayment, &p).unwrap();
    assert_eq!(b.to_value(), p);
}

/// The ledger-written `contract_amended` body (docs/PROTOCOL.md §5.21): the schema and
/// `Body::from_value` agree on its shape, the term's end and the reason's length; the reason's
/// control characters are beyond the schema's pattern only where it cannot see them.
#[test]
fn contract_amended_bodies_agree_with_their_schema() {
    use gpuledger::core::record::{Body, Kind};
    let a = json!({"tenant": "acme", "contract": "C-acme-2027", "term_to": "2027-07-01T00:00:00Z",
                   "reason": "Ended early by mutual agreement"});
    let with = |k: &str, v: Value| {
        let mut b = a.clone();
        b[k] = v;
        b
    };
    let without = |k: &str| {
        let mut b = a.clone();
        b.as_object_mut().unwrap().remove(k);
        b
    };
    type BodyCase = (&'static str, Value, Result<(), Reason>, bool);
    #[rustfmt::skip]
    let cases: Vec<BodyCase> = vec![
        ("valid amendment",            a.clone(), Ok(()), true),
        ("no reason",                  without("reason"), MALFORMED, true),
        ("no term_to",                 without("term_to"), MALFORMED, true),
        ("no contract",                without("contract"), MALFORMED, true),
        ("empty reason",               with("reason", json!("")), INVALID, true),
        ("501-byte reason",            with("reason", json!("r".repeat(501))), INVALID, true),
        ("reason with a space",        with("reason", json!("ended ")), INVALID, true),
        ("term_to without a zone",     with("term_to", json!("2027-07-01T00:00:00")), INVALID, true),
        ("term_to as a number",        with("term_to", json!(1814400000)), MALFORMED, true),
        ("contract with a space",      with("contract", json!("C 1")), INVALID, true),
        ("an extra member",            with("term_from", json!("2027-01-01T00:00:00Z")), MALFORMED, true),
        // Beyond the schema.
        ("February 30th",              with("term_to", json!("2027-02-30T00:00:00Z")), INVALID, false),
    ];
    let mut failures = Vec::new();
    for (name, body, expect, expressed) in cases {
        let schema = schema_valid("contract_amended", &body);
        let rust = Body::from_value(Kind::ContractAmended, &body)
            .map(|_| ())
            .map_err(|r| r.reason);
        let env = json!({"v": 3, "kind": "contract_amended", "signer": "ledger", "key_id": "0123456789abcdef",
                         "seq": 1, "body": body, "sig": base64_of(&[0u8; 64])});
        if schema_valid("envelope", &env) != schema {
            failures.push(format!("{name}: the envelope schema says {}", !schema));
        }
        failures.extend(disagreement(name, schema, rust, expect, expressed));
    }
    assert_all_agree(&failures);
    let b = Body::from_value(Kind::ContractAmended, &a).unwrap();
    assert_eq!(b.to_value(), a);
}

/// The ledger-written `node_registered` body (docs/PROTOCOL.md §5.16): for shape cases the body
/// schema (and the envelope schema selecting it by kind) accepts exactly what
/// `Body::from_value` accepts; for rules beyond the schema (increasing index, distinct UUIDs,
/// the power's bounds) the schema accepts and Rust refuses with the expected reason.
#[test]
fn node_registered_bodies_agree_with_their_schema() {
    use gpuledger::core::record::{Body, Kind};
    let gpu = |index: u64, uuid: &str| json!({"index": index, "uuid": uuid, "model": "H100"});
    let mig = |index: u64, slices: u64, instances: Value| {
        let instances: Vec<Value> = instances
            .as_array()
            .unwrap()
            .iter()
            .map(|p| json!({"profile": p[0], "count": p[1]}))
            .collect();
        json!({"index": index, "uuid": format!("GPU-{index}"), "model": "H100",
               "mig": {"slices": slices, "instances": instances}})
    };
    let gpus = |n: u64| -> Value { (0..n).map(|i| gpu(i, &format!("GPU-{i}"))).collect() };
    let node = json!({"node": "n1", "region": "west", "hub": "hub-1", "gpus": gpus(8),
                      "max_watts_per_gpu": "1000"});
    let with = |k: &str, v: Value| {
        let mut b = node.clone();
        b[k] = v;
        b
    };
    // (name, body, expected, schema expresses the rule)
    type BodyCase = (&'static str, Value, Result<(), Reason>, bool);
    #[rustfmt::skip]
    let cases: Vec<BodyCase> = vec![
        ("valid node",                  node.clone(), Ok(()), true),
        ("64 gpus",                     with("gpus", gpus(64)), Ok(()), true),
        ("5000 watts",                  with("max_watts_per_gpu", json!("5000")), Ok(()), true),
        ("empty gpus",                  with("gpus", json!([])), Err(Reason::QuantityOutOfRange), true),
        ("65 gpus",                     with("gpus", gpus(65)), Err(Reason::QuantityOutOfRange), true),
        ("bad uuid",                    with("gpus", json!([gpu(0, "GPU 0")])), INVALID, true),
        ("empty uuid",                  with("gpus", json!([gpu(0, "")])), INVALID, true),
        ("watts as a JSON number",      with("max_watts_per_gpu", json!(1000)), MALFORMED, true),
        // Beyond the schema.
        ("decreasing index",            with("gpus", json!([gpu(1, "GPU-1"), gpu(0, "GPU-0")])), INVALID, false),
        ("repeated index",              with("gpus", json!([gpu(0, "GPU-0"), gpu(0, "GPU-1")])), INVALID, false),
        ("repeated uuid",               with("gpus", json!([gpu(0, "GPU-0"), gpu(1, "GPU-0")])), INVALID, false),
        ("zero watts",                  with("max_watts_per_gpu", json!("0")), Err(Reason::QuantityOutOfRange), false),
        ("5001 watts",                  with("max_watts_per_gpu", json!("5001")), Err(Reason::QuantityOutOfRange), false),
        // MIG layouts.
        ("a MIG layout",                with("gpus", json!([mig(0, 7, json!([["1g.10gb", 3], ["3g.40gb", 1]]))])), Ok(()), true),
        ("8 slices of 1g",              with("gpus", json!([mig(0, 8, json!([["1g.10gb", 8]]))])), Ok(()), true),
        ("0 slices",                    with("gpus", json!([mig(0, 0, json!([["1g.10gb", 1]]))])), INVALID, true),
        ("9 slices",                    with("gpus", json!([mig(0, 9, json!([["1g.10gb", 1]]))])), INVALID, true),
        ("no instances",                with("gpus", json!([mig(0, 7, json!([]))])), INVALID, true),
        ("a profile that is no profile",with("gpus", json!([mig(0, 7, json!([["1g.10GB", 1]]))])), INVALID, true),
        ("a profile of 9 slices",       with("gpus", json!([mig(0, 8, json!([["9g.80gb", 1]]))])), INVALID, true),
        ("count 0",                     with("gpus", json!([mig(0, 7, json!([["1g.10gb", 0]]))])), INVALID, true),
        ("count 9",                     with("gpus", json!([mig(0, 8, json!([["1g.10gb", 9]]))])), INVALID, true),
        ("an unknown layout member",    with("gpus", json!([{"index": 0, "uuid": "GPU-0", "model": "H100", "mig": {"slices": 7, "instances": [], "mode": "x"}}])), MALFORMED, true),
        ("more slices than the GPU's",  with("gpus", json!([mig(0, 7, json!([["3g.40gb", 2], ["2g.20gb", 1]]))])), INVALID, false),
        ("a profile above the slices",  with("gpus", json!([mig(0, 4, json!([["7g.80gb", 1]]))])), INVALID, false),
        ("profiles out of order",       with("gpus", json!([mig(0, 7, json!([["3g.40gb", 1], ["1g.10gb", 1]]))])), INVALID, false),
        ("a profile twice",             with("gpus", json!([mig(0, 7, json!([["1g.10gb", 1], ["1g.10gb", 1]]))])), INVALID, false),
        ("one model, other slices",     with("gpus", json!([mig(0, 7, json!([["1g.10gb", 7]])), mig(1, 4, json!([["1g.10gb", 4]]))])), INVALID, false),
    ];
    let mut failures = Vec::new();
    for (name, body, expect, expressed) in cases {
        let schema = schema_valid("node_registered", &body);
        let rust = Body::from_value(Kind::NodeRegistered, &body)
            .map(|_| ())
            .map_err(|r| r.reason);
        // The envelope schema selects the body schema by kind.
        let env = json!({"v": 3, "kind": "node_registered", "signer": "ledger", "key_id": "0123456789abcdef",
                         "seq": 1, "body": body, "sig": base64_of(&[0u8; 64])});
        if schema_valid("envelope", &env) != schema {
            failures.push(format!("{name}: the envelope schema says {}", !schema));
        }
        failures.extend(disagreement(name, schema, rust, expect, expressed));
    }
    assert_all_agree(&failures);
    // A valid body round-trips through the Rust type to the same JSON.
    let b = Body::from_value(Kind::NodeRegistered, &node).unwrap();
    assert_eq!(b.to_value(), node);
}

/// `node_updated` bodies (PROTOCOL §5.18): the schema and the Rust type agree; what needs the
/// node (a reused UUID, a changed model, a power limit that does not rise) is an admission rule.
#[test]
fn node_updated_bodies_agree_with_their_schema() {
    use gpuledger::core::record::{Body, Kind};
    let gpu = |index: u64, uuid: &str| json!({"index": index, "uuid": uuid, "model": "H100"});
    let both = json!({"node": "n1", "gpus": [gpu(8, "GPU-8")], "max_watts_per_gpu": "800"});
    // (name, body, expected, schema expresses the rule)
    type BodyCase = (&'static str, Value, Result<(), Reason>, bool);
    #[rustfmt::skip]
    let cases: Vec<BodyCase> = vec![
        ("GPUs and watts",           both.clone(), Ok(()), true),
        ("GPUs only",                json!({"node": "n1", "gpus": [gpu(8, "GPU-8")]}), Ok(()), true),
        ("watts only",               json!({"node": "n1", "max_watts_per_gpu": "800"}), Ok(()), true),
        ("no node",                  json!({"max_watts_per_gpu": "800"}), MALFORMED, true),
        ("empty gpus",               json!({"node": "n1", "gpus": []}), Err(Reason::QuantityOutOfRange), true),
        ("65 gpus",                  json!({"node": "n1", "gpus": (0..65).map(|i| gpu(i, &format!("G{i}"))).collect::<Vec<_>>()}), Err(Reason::QuantityOutOfRange), true),
        ("null watts",               json!({"node": "n1", "max_watts_per_gpu": null}), MALFORMED, true),
        ("an unknown member",        json!({"node": "n1", "max_watts_per_gpu": "800", "region": "east"}), MALFORMED, true),
        // Beyond the schema.
        ("nothing to change",        json!({"node": "n1"}), INVALID, false),
        ("zero watts",               json!({"node": "n1", "max_watts_per_gpu": "0"}), Err(Reason::QuantityOutOfRange), false),
        ("repeated uuid",            json!({"node": "n1", "gpus": [gpu(8, "G"), gpu(9, "G")]}), INVALID, false),
    ];
    let mut failures = Vec::new();
    for (name, body, expect, expressed) in cases {
        let schema = schema_valid("node_updated", &body);
        let rust = Body::from_value(Kind::NodeUpdated, &body)
            .map(|_| ())
            .map_err(|r| r.reason);
        let env = json!({"v": 3, "kind": "node_updated", "signer": "ledger", "key_id": "0123456789abcdef",
                         "seq": 1, "body": body, "sig": base64_of(&[0u8; 64])});
        if schema_valid("envelope", &env) != schema {
            failures.push(format!("{name}: the envelope schema says {}", !schema));
        }
        failures.extend(disagreement(name, schema, rust, expect, expressed));
    }
    assert_all_agree(&failures);
    let b = Body::from_value(Kind::NodeUpdated, &both).unwrap();
    assert_eq!(b.to_value(), both);
}

fn def_validator(def: &str) -> &'static Validator {
    static V: OnceLock<BTreeMap<String, Validator>> = OnceLock::new();
    let all = V.get_or_init(|| {
        ["decimal", "id", "timestamp", "key_id"]
            .iter()
            .map(|d| {
                (
                    d.to_string(),
                    validator(&format!("defs.v3.json#/$defs/{d}")),
                )
            })
            .collect()
    });
    &all[def]
}

proptest! {
    /// The decimal pattern is `decimal::parse_canonical` (below rust_decimal's 28 digits).
    #[test]
    fn decimal_pattern_matches_the_parser(s in "[-+.e 0-9]{0,12}|(0|[1-9][0-9]{0,6})\\.[0-9]{0,11}") {
        let schema = def_validator("decimal").is_valid(&json!(s));
        let rust = decimal::parse_canonical(&s);
        prop_assert_eq!(schema, rust.is_ok(), "{:?}: rust {:?}", s, rust);
    }

    /// The identifier pattern is `ids::check_id`.
    #[test]
    fn id_pattern_matches_check_id(s in "[A-Za-z0-9._:/ +é\n-]{0,3}|[a-z0-9][a-z0-9._:/-]{120,130}") {
        prop_assert_eq!(def_validator("id").is_valid(&json!(s)), check_id(&s).is_ok(), "{:?}", s);
    }

    /// Every timestamp Rust accepts matches the pattern; the pattern admits more (beyond it:
    /// real dates in 2000..=9999).
    #[test]
    fn timestamp_pattern_contains_the_parser(secs in 946_684_800i64..=253_402_300_799, junk in "[0-9TZ:-]{20}") {
        let t = Timestamp::from_unix(secs).unwrap().to_string();
        prop_assert!(def_validator("timestamp").is_valid(&json!(t)));
        if Timestamp::parse(&junk).is_ok() {
            prop_assert!(def_validator("timestamp").is_valid(&json!(junk)));
        }
    }

    /// The key-id pattern is `keys::is_key_id`.
    #[test]
    fn key_id_pattern_matches(s in "[0-9a-fA-G]{14,18}") {
        prop_assert_eq!(def_validator("key_id").is_valid(&json!(s)), keys::is_key_id(&s));
    }
}

#[test]
fn certificate_issued_bodies_agree_with_their_schema() {
    use gpuledger::core::record::{Body, Kind};
    let good = json!({
        "id": "CERT-000001", "tenant": "acme",
        "period_from": "2026-11-01T00:00:00Z", "period_to": "2026-12-01T00:00:00Z",
        "checkpoint_size": 12, "certificate_sha256": "ab".repeat(32),
    });
    let with = |k: &str, v: Value| {
        let mut b = good.clone();
        b[k] = v;
        b
    };
    let mut extra = good.clone();
    extra["note"] = json!("x");
    let mut missing = good.clone();
    missing.as_object_mut().unwrap().remove("tenant");
    let cases = [
        (good.clone(), true),
        (with("id", json!("CERT-1")), false),
        (with("id", json!("INV-000001")), false),
        (with("certificate_sha256", json!("AB".repeat(32))), false),
        (with("certificate_sha256", json!("ab".repeat(31))), false),
        (with("checkpoint_size", json!("12")), false),
        (with("checkpoint_size", json!(-1)), false),
        (with("tenant", json!("a b")), false),
        (with("period_to", json!("2026-12-01")), false),
        (extra, false),
        (missing, false),
    ];
    for (body, ok) in cases {
        let rust = Body::from_value(Kind::CertificateIssued, &body).is_ok();
        let schema = schema_valid("certificate_issued", &body);
        assert_eq!((rust, schema), (ok, ok), "{body}");
    }
}
