//! The checked-in OpenAPI document (schemas/openapi.json) is what the code generates.
//! Regenerate with `cargo run -- openapi > schemas/openapi.json`.
//!
//! And the document says what the server does: parameters where and as the handlers read
//! them, error answers of a running server valid against its `Problem` schema and documented
//! for their operation, 405 with `Allow` for a served path with another method.

mod common;

use actix_web::web;
use common::*;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use utoipa::IntoParams;

#[test]
fn checked_in_openapi_is_current() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/schemas/openapi.json");
    let on_disk = std::fs::read_to_string(path).expect("schemas/openapi.json exists");
    let generated = gpuledger::api::openapi_json();
    assert!(
        on_disk == generated,
        "schemas/openapi.json is stale: run `cargo run -- openapi > schemas/openapi.json`"
    );
    let doc: serde_json::Value = serde_json::from_str(&generated).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    for p in [
        "/v1/records",
        "/v1/checkpoint",
        "/v1/log",
        "/v1/entries/{index}",
        "/v1/entries",
        "/v1/proofs/inclusion",
        "/v1/proofs/consistency",
        "/v1/usage",
        "/v1/tenants",
        "/v1/signers",
        "/v1/signers/{id}/keys",
        "/v1/signers/{id}/keys/{key_id}/revoke",
        "/v1/tokens",
        "/v1/tokens/{id}",
        "/healthz",
        "/readyz",
        "/metrics",
        "/openapi.json",
        "/docs",
    ] {
        assert!(doc["paths"].get(p).is_some(), "{p} is documented");
    }
}

/// A parameter is `in: path` exactly when the path template names it: the query parameters of
/// the list and range endpoints were once documented as required path parameters.
#[test]
fn parameters_are_where_the_route_takes_them() {
    let doc: serde_json::Value = serde_json::from_str(&gpuledger::api::openapi_json()).unwrap();
    let mut wrong = Vec::new();
    let mut seen = 0;
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            for p in op["parameters"].as_array().into_iter().flatten() {
                seen += 1;
                let name = p["name"].as_str().unwrap();
                let in_template = path.contains(&format!("{{{name}}}"));
                let expected = if in_template { "path" } else { "query" };
                if p["in"] != expected || (in_template && p["required"] != true) {
                    wrong.push(format!("{method} {path}: {name} is {}", p["in"]));
                }
            }
        }
    }
    assert!(seen > 20, "only {seen} parameters documented");
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Every `{name}` of a path template is a documented, required `in: path` parameter (the other
/// direction of [`parameters_are_where_the_route_takes_them`]).
#[test]
fn path_templates_name_only_documented_path_parameters() {
    let doc: Value = serde_json::from_str(&gpuledger::api::openapi_json()).unwrap();
    let mut missing = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        let names: Vec<&str> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
            .collect();
        for (method, op) in ops.as_object().unwrap() {
            for name in &names {
                let documented = op["parameters"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|p| p["name"] == *name && p["in"] == "path" && p["required"] == true);
                if !documented {
                    missing.push(format!("{method} {path}: {{{name}}}"));
                }
            }
        }
    }
    assert!(missing.is_empty(), "{missing:#?}");
}

/// Each handler's query struct is documented on its operation as exactly its fields, each
/// `in: query`, and `required` exactly when the handler's extractor refuses a query string
/// without it (tried here through actix's own `web::Query`, not through the derive).
#[test]
fn query_structs_are_documented_as_the_handlers_read_them() {
    use gpuledger::api::{certificates, invoices, log, pricing, usage};
    fn fields<T: IntoParams>() -> Vec<String> {
        T::into_params(|| None)
            .into_iter()
            .map(|p| p.name)
            .collect()
    }
    /// Whether `T` reads a query string that has every field in `fields` but `left_out`.
    fn reads_without<T: DeserializeOwned>(fields: &[String], left_out: &str) -> bool {
        let qs: Vec<String> = fields
            .iter()
            .filter(|f| *f != left_out)
            .map(|f| format!("{f}=1"))
            .collect();
        web::Query::<T>::from_query(&qs.join("&")).is_ok()
    }
    type Check = (&'static str, Vec<String>, fn(&[String], &str) -> bool);
    macro_rules! row {
        ($path:expr, $t:ty) => {
            (
                $path,
                fields::<$t>(),
                reads_without::<$t> as fn(&[String], &str) -> bool,
            )
        };
    }
    let table: Vec<Check> = vec![
        row!("/v1/usage", usage::UsageQuery),
        row!("/v1/entries", log::RangeQuery),
        row!("/v1/checkpoints", log::CheckpointsQuery),
        row!("/v1/proofs/inclusion", log::InclusionQuery),
        row!("/v1/proofs/consistency", log::ConsistencyQuery),
        row!("/v1/invoices/preview", pricing::PreviewQuery),
        row!("/v1/invoices", invoices::ListQuery),
        row!("/v1/balance", invoices::ListQuery),
        row!("/v1/certificates", certificates::ListQuery),
        row!("/v1/certificates/{id}/bundle", certificates::BundleQuery),
        row!("/v1/invoices/{number}/{format}", certificates::BundleQuery),
    ];
    let doc: Value = serde_json::from_str(&gpuledger::api::openapi_json()).unwrap();
    let mut wrong = Vec::new();
    for (path, fields, reads_without) in &table {
        assert!(!fields.is_empty(), "{path}: a query struct without fields");
        let params = doc["paths"][path]["get"]["parameters"]
            .as_array()
            .unwrap_or_else(|| panic!("GET {path} has no parameters"));
        let query: Vec<&Value> = params.iter().filter(|p| p["in"] == "query").collect();
        let names: Vec<&str> = query.iter().map(|p| p["name"].as_str().unwrap()).collect();
        if names != fields.iter().map(String::as_str).collect::<Vec<_>>() {
            wrong.push(format!(
                "GET {path}: query {names:?}, the struct reads {fields:?}"
            ));
        }
        for p in query {
            let name = p["name"].as_str().unwrap();
            let required = !reads_without(fields, name);
            if p["required"].as_bool().unwrap_or(false) != required {
                wrong.push(format!(
                    "GET {path}: {name} documented required={}, read as required={required}",
                    p["required"]
                ));
            }
        }
        // All the fields read: the string the checks above build is one the handler takes.
        if !reads_without(fields, "") {
            wrong.push(format!("GET {path}: a query with every field is refused"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The `Problem` schema of the document, as a validator (its `ProblemItem` resolved within).
fn problem_validator(doc: &Value) -> jsonschema::Validator {
    let schema = json!({
        "$ref": "#/components/schemas/Problem",
        "components": doc["components"].clone(),
    });
    jsonschema::validator_for(&schema).expect("the Problem schema compiles")
}

/// What is wrong with `r` as a problem of `status` and `slug` that validates against the
/// document's `Problem` schema and is documented for `method template`; `None` if nothing.
fn problem_fault(
    doc: &Value,
    validator: &jsonschema::Validator,
    (method, template): (&str, &str),
    r: &Reply,
    (status, slug): (u16, &str),
) -> Option<String> {
    let p = match r.problem(status, slug) {
        Ok(p) => p,
        Err(e) => return Some(e),
    };
    let errors: Vec<String> = validator.iter_errors(&p).map(|e| e.to_string()).collect();
    if !errors.is_empty() {
        return Some(format!("{p} is not a Problem: {errors:?}"));
    }
    let responses = &doc["paths"][template][method.to_lowercase()]["responses"];
    if responses.get(status.to_string()).is_none() {
        return Some(format!("{status} is not documented"));
    }
    None
}

/// Real error answers of a running server are what the document says: each validates against
/// the `Problem` schema (with `errors` an array of items where it is served), and its status
/// is documented for its operation.
#[test]
fn served_problems_match_the_documented_schema_and_statuses() {
    let db = common::sqlite();
    let log = init(&db);
    let srv = log.serve();
    let h = srv.http();
    let admin = log.admin.clone();
    h.parties(&admin, &["tenant-a"]);
    let tenant = h.secret(&admin, json!({"role": "tenant", "tenant": "tenant-a"}));
    let (a, t) = (Some(admin.as_str()), Some(tenant.as_str()));
    let doc = h.get("/openapi.json", None).ok_json(200);
    let validator = problem_validator(&doc);
    let day = "from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z";

    struct Case<'a> {
        op: (&'a str, &'a str),
        path: String,
        token: Option<&'a str>,
        body: Option<(&'a str, Vec<u8>)>,
        want: (u16, &'a str),
        /// Whether the problem must carry `errors`.
        itemised: bool,
    }
    let case = |op, path: &str, token, body: Option<(&'static str, &str)>, want, itemised| Case {
        op,
        path: path.to_owned(),
        token,
        body: body.map(|(ct, b)| (ct, b.as_bytes().to_vec())),
        want,
        itemised,
    };
    let json = "application/json";
    #[rustfmt::skip]
    let cases = [
        case(("GET", "/v1/usage"), "/v1/usage?from=yesterday&to=2026-01-02T00:00:00Z", a, None, (400, "invalid_parameter"), true),
        case(("GET", "/v1/usage"), "/v1/usage?from=2026-01-01T00:00:00Z", a, None, (400, "invalid_parameter"), false),
        case(("GET", "/v1/entries"), "/v1/entries?start=x&end=2", a, None, (400, "invalid_parameter"), true),
        case(("GET", "/v1/certificates/{id}/bundle"), "/v1/certificates/CERT-000001/bundle?bundle_format=v9", a, None, (400, "invalid_parameter"), true),
        case(("POST", "/v1/rate-cards"), "/v1/rate-cards", a, Some((json, r#"{"region": "west", "gpu_model": "H100", "lease_class": "on_demand", "currency": "CNY", "price_per_gpu_hour": "-1", "effective_from": "2026-01-01T00:00:00Z"}"#)), (400, "invalid_field"), true),
        case(("POST", "/v1/tenants"), "/v1/tenants", a, Some((json, "{\"id\": ")), (400, "malformed_json"), false),
        case(("GET", "/v1/usage"), &format!("/v1/usage?{day}"), None, None, (401, "unauthorized"), false),
        case(("GET", "/v1/tenants"), "/v1/tenants", t, None, (403, "forbidden"), false),
        case(("POST", "/v1/rate-cards"), "/v1/rate-cards", t, Some((json, "{}")), (403, "forbidden"), false),
        case(("GET", "/v1/usage"), &format!("/v1/usage?tenant=tenant-z&{day}"), a, None, (404, "not_found"), false),
        case(("GET", "/v1/invoices/{number}"), "/v1/invoices/INV-999999", a, None, (404, "not_found"), false),
        case(("POST", "/v1/tenants"), "/v1/tenants", a, Some(("text/plain", "{}")), (415, "unsupported_media_type"), false),
        case(("POST", "/v1/records"), "/v1/records", None, Some(("text/plain", "[]")), (415, "unsupported_media_type"), false),
    ];
    let mut faults = Vec::new();
    let mut itemised = 0;
    for c in &cases {
        let r = match &c.body {
            None => h.get(&c.path, c.token),
            Some((ct, body)) => h
                .try_request("POST", &c.path, c.token, Some(ct), body)
                .unwrap(),
        };
        let what = format!("{} {}", c.op.0, c.path);
        if let Some(f) = problem_fault(&doc, &validator, c.op, &r, c.want) {
            faults.push(format!("{what}: {f}"));
            continue;
        }
        let errors = &r.json()["errors"];
        if c.itemised {
            if errors.as_array().is_none_or(Vec::is_empty) {
                faults.push(format!("{what}: no `errors` items: {}", r.lossy()));
            }
            itemised += 1;
        }
    }
    assert!(faults.is_empty(), "{faults:#?}");
    assert!(itemised >= 4);
}

/// A served path with a method it is not served for is a 405 problem with `Allow` naming the
/// methods it is; an unknown path stays a 404.
#[test]
fn wrong_methods_are_405_with_allow() {
    let db = common::sqlite();
    let log = init(&db);
    let srv = log.serve();
    let h = srv.http();
    let validator =
        problem_validator(&serde_json::from_str(&gpuledger::api::openapi_json()).unwrap());
    let cases: [(&str, &str, u16, Option<&str>); 11] = [
        ("DELETE", "/v1/records", 405, Some("POST")),
        ("POST", "/v1/checkpoint", 405, Some("GET, HEAD")),
        ("PUT", "/v1/tokens", 405, Some("GET, POST")),
        ("DELETE", "/v1/entries/3", 405, Some("GET")),
        ("GET", "/v1/tokens/tok-1", 405, Some("DELETE")),
        ("POST", "/healthz", 405, Some("GET")),
        ("POST", "/docs", 405, Some("GET")),
        ("PUT", "/openapi.json", 405, Some("GET")),
        ("POST", "/tile/0/000", 405, Some("GET, HEAD")),
        ("GET", "/nope", 404, None),
        ("DELETE", "/v1/nope", 404, None),
    ];
    let mut faults = Vec::new();
    for (method, path, status, allow) in cases {
        let url = format!("{}{path}", h.base);
        let answer = match method {
            "GET" => h.agent.get(&url).call(),
            "DELETE" => h.agent.delete(&url).call(),
            "POST" => h.agent.post(&url).send_empty(),
            "PUT" => h.agent.put(&url).send_empty(),
            m => panic!("method {m}"),
        };
        let mut answer = answer.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let got_allow = answer
            .headers()
            .get("Allow")
            .map(|v| v.to_str().unwrap().to_owned());
        let got = answer.status().as_u16();
        let body: Value =
            serde_json::from_slice(&answer.body_mut().read_to_vec().unwrap()).unwrap_or_default();
        let slug = if status == 405 {
            "method_not_allowed"
        } else {
            "not_found"
        };
        if got != status
            || got_allow.as_deref() != allow
            || body["type"] != format!("urn:gpuledger:problem:{slug}")
            || !validator.is_valid(&body)
        {
            faults.push(format!(
                "{method} {path}: {got}, Allow {got_allow:?}, {body} (want {status}, Allow {allow:?})"
            ));
        }
    }
    assert!(faults.is_empty(), "{faults:#?}");
}

/// Each operation has an `operationId` of its own (openapi-spec-validator refuses a repeated
/// one, and generated clients name their functions after them).
#[test]
fn operation_ids_are_unique() {
    let doc: Value = serde_json::from_str(&gpuledger::api::openapi_json()).unwrap();
    let mut seen = std::collections::BTreeMap::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            let id = op["operationId"]
                .as_str()
                .unwrap_or_else(|| panic!("{method} {path}"));
            if let Some(first) = seen.insert(id.to_owned(), format!("{method} {path}")) {
                panic!("operationId {id} of {method} {path} is also {first}'s");
            }
        }
    }
}
