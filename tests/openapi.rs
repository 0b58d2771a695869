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
                let expected = if in_template {
                    "path"
                } else if name == "Idempotency-Key" {
                    "header"
                } else {
                    "query"
                };
                if p["in"] != expected || (in_template && p["required"] != true) {
                    wrong.push(format!("{method} {path}: {name} is {}", p["in"]));
                }
            }
        }
    }
    assert!(seen > 20, "only {seen} parameters documented");
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// Every admin `POST` documents `Idempotency-Key` and its answers (docs/PROTOCOL.md §6.8),
/// and the ones that take none (records, and those answering a secret shown once) do not.
#[test]
fn admin_posts_document_their_idempotency_key() {
    let doc: Value = serde_json::from_str(&gpuledger::api::openapi_json()).unwrap();
    let mut posts = 0;
    for (path, ops) in doc["paths"].as_object().unwrap() {
        let Some(op) = ops.get("post") else { continue };
        let has_key = op["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|p| p["name"] == "Idempotency-Key" && p["in"] == "header");
        let excluded =
            ["/v1/records", "/v1/tokens", "/v1/webhooks/endpoints"].contains(&path.as_str());
        assert_eq!(has_key, !excluded, "POST {path}");
        if has_key {
            posts += 1;
            for status in ["400", "409", "422"] {
                assert!(
                    op["responses"].get(status).is_some(),
                    "POST {path}: no {status}"
                );
            }
        }
    }
    assert!(posts >= 14, "only {posts} POSTs take a key");
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
        row!("/v1/invoices", gpuledger::api::paging::PeriodListQuery),
        row!("/v1/prices", pricing::PricesQuery),
        row!("/v1/tenants", gpuledger::api::admin::TenantListQuery),
        row!("/v1/balance", invoices::ListQuery),
        row!("/v1/certificates", gpuledger::api::paging::PeriodListQuery),
        row!("/v1/certificates/{id}/bundle", certificates::BundleQuery),
        row!("/v1/invoices/{number}/{format}", invoices::DownloadQuery),
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

/// An outage reaches every operation that reads the database: each documents 503
/// (`database_unavailable`, `busy`), and each that writes also 507 (`disk_full`), as the
/// server answers them (tests/outage.rs); no other operation documents 507.
#[test]
fn outage_answers_are_documented_where_the_database_is_used() {
    let doc: Value = serde_json::from_str(&gpuledger::api::openapi_json()).unwrap();
    let mut missing = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        let database =
            path.starts_with("/v1/") || path == "/checkpoint" || path.starts_with("/tile/");
        for (method, op) in ops.as_object().unwrap() {
            let writes = matches!(method.as_str(), "post" | "put" | "patch" | "delete");
            let has = |status: &str| op["responses"].get(status).is_some();
            if database && !has("503") {
                missing.push(format!("{method} {path}: no 503"));
            }
            if has("507") != (database && writes) {
                missing.push(format!("{method} {path}: 507 documented: {}", has("507")));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
    assert!(doc["paths"]["/v1/records"]["post"]["responses"]["507"].is_object());
}

/// Bodies the document deliberately leaves as a bare `object`, with the reason.
const UNTYPED_BODIES: &[(&str, &str, &str)] = &[(
    "GET",
    "/openapi.json",
    "the OpenAPI document itself (its schema is the OpenAPI 3.1 specification's)",
)];

/// Members of component schemas deliberately left a bare `object`, with the reason.
const UNTYPED_MEMBERS: &[(&str, &str, &str)] = &[(
    "Envelope",
    "body",
    "a signed record's body: its members depend on the envelope's `kind` (docs/PROTOCOL.md \
     §5, sixteen kinds, record and ledger ones) and POST /v1/records checks each against its \
     kind, answering a rejection per record rather than a schema error",
)];

/// Whether `schema` (after following `$ref`s to components) is an `object` that says nothing
/// about its members: no `properties`, no typed `additionalProperties`, no composition.
fn is_bare_object(doc: &Value, schema: &Value) -> bool {
    let s = resolve(doc, schema);
    let object = s["type"] == "object"
        || s["type"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t == "object"));
    object
        && s.get("properties").is_none()
        && s["additionalProperties"].as_object().is_none()
        && ["oneOf", "anyOf", "allOf"]
            .iter()
            .all(|k| s.get(k).is_none())
}

/// Every request body and every 2xx JSON body of the document has a real schema: none is a
/// bare `object` (but the listed exceptions), an array's items included; and no member of a
/// component schema is one either, so a generated client has a type for everything.
#[test]
fn no_body_is_a_bare_object() {
    let doc: Value = serde_json::from_str(&gpuledger::api::openapi_json()).unwrap();
    let mut bare = Vec::new();
    let mut bodies = 0;
    let mut check = |what: String, schema: &Value, exempt: bool| {
        bodies += 1;
        let items = &schema["items"];
        let bare_here =
            is_bare_object(&doc, schema) || (items.is_object() && is_bare_object(&doc, items));
        if bare_here != exempt {
            bare.push(format!("{what} (listed as an exception: {exempt})"));
        }
    };
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            let exempt = UNTYPED_BODIES
                .iter()
                .any(|(m, p, _)| m.eq_ignore_ascii_case(method) && p == path);
            for (ct, c) in op["requestBody"]["content"]
                .as_object()
                .into_iter()
                .flatten()
            {
                check(format!("{method} {path} request {ct}"), &c["schema"], false);
            }
            for (status, r) in op["responses"].as_object().unwrap() {
                if !status.starts_with('2') {
                    continue;
                }
                for (ct, c) in r["content"].as_object().into_iter().flatten() {
                    if ct.contains("json") {
                        check(
                            format!("{method} {path} {status} {ct}"),
                            &c["schema"],
                            exempt,
                        );
                    }
                }
            }
        }
    }
    for (name, s) in doc["components"]["schemas"].as_object().unwrap() {
        for (member, m) in s["properties"].as_object().into_iter().flatten() {
            let exempt = UNTYPED_MEMBERS
                .iter()
                .any(|(n, f, _)| n == name && f == member);
            if is_bare_object(&doc, m) != exempt {
                bare.push(format!(
                    "component {name}.{member} (listed as an exception: {exempt})"
                ));
            }
        }
    }
    assert!(bodies > 40, "only {bodies} bodies");
    assert!(bare.is_empty(), "{bare:#?}");
}

/// Money, prices and quantities are exact decimal strings: every such member of the
/// component schemas says so with the decimal pattern, so a client never reads them as floats.
#[test]
fn decimals_are_documented_as_decimal_strings() {
    let doc: Value = serde_json::from_str(&gpuledger::api::openapi_json()).unwrap();
    let decimal_members = [
        ("Balance", "due"),
        ("Balance", "invoiced"),
        ("CurrencyLines", "total"),
        ("Invoice", "total"),
        ("InvoiceLine", "net"),
        ("InvoiceLine", "tax"),
        ("InvoiceLine", "gross"),
        ("InvoiceLine", "tax_rate"),
        ("InvoiceLine", "quantity"),
        ("InvoiceLine", "unit_price"),
        ("InvoiceAccount", "balance_due"),
        ("RateCard", "price_per_gpu_hour"),
        ("RegionParameters", "pue"),
        ("Settlement", "amount"),
        ("Tier", "price_per_gpu_hour"),
        ("Totals", "gpu_seconds"),
        ("UsageRow", "gpu_seconds"),
        ("UsageRow", "kwh"),
        ("GpuClaim", "gpu_seconds"),
        ("EnergyClaim", "kwh"),
        ("Unpriced", "quantity"),
        ("InvoiceLine", "gpu_seconds"),
        ("InvoiceLine", "measured_kwh"),
        ("Balance", "credit"),
        ("Balance", "paid"),
        ("Balance", "credited"),
        ("Totals", "carbon_kg"),
        ("EnergyClaim", "pue"),
        ("RegionParameters", "electricity_price_per_kwh"),
        ("SpotPrice", "price_per_gpu_hour"),
        ("Tier", "up_to_gpu_hours"),
        ("Settlement", "amount"),
    ];
    let pattern = regex_lite_decimal();
    let mut wrong = Vec::new();
    for (schema, member) in decimal_members {
        let m = resolve(&doc, member_of(&doc, schema, member));
        let is_string = m["type"] == "string"
            || m["type"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t == "string"));
        if !is_string || m["pattern"].as_str() != Some(pattern) {
            wrong.push(format!("{schema}.{member}: {m}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // The pattern takes what the server writes and refuses floats' forms.
    let v = jsonschema::validator_for(&json!({"type": "string", "pattern": pattern})).unwrap();
    for ok in ["0", "12.5", "-3.37", "86400", "0.000001"] {
        assert!(v.is_valid(&json!(ok)), "{ok}");
    }
    for bad in ["1e3", "1.", ".5", "+1", "NaN", "1,5", " 1"] {
        assert!(!v.is_valid(&json!(bad)), "{bad}");
    }
}

/// `schema` with its `$ref` followed, and of a nullable `oneOf`, the alternative not `null`.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.trim_start_matches("#/components/schemas/");
        return resolve(doc, &doc["components"]["schemas"][name]);
    }
    if let Some(alternatives) = schema["oneOf"].as_array() {
        let not_null: Vec<&Value> = alternatives
            .iter()
            .filter(|a| a["type"] != "null")
            .collect();
        if let [one] = not_null[..] {
            return resolve(doc, one);
        }
    }
    schema
}

/// The schema of member `member` of component `schema`, its own or one of its `allOf`
/// parts' (`Null` if none has it).
fn member_of<'a>(doc: &'a Value, schema: &str, member: &str) -> &'a Value {
    let s = &doc["components"]["schemas"][schema];
    std::iter::once(s)
        .chain(s["allOf"].as_array().into_iter().flatten())
        .map(|part| &part["properties"][member])
        .find(|m| !m.is_null())
        .unwrap_or(&Value::Null)
}

/// The pattern of a decimal string, as the document states it.
fn regex_lite_decimal() -> &'static str {
    gpuledger::core::decimal::DECIMAL_PATTERN
}

/// `GET /v1/prices` documents one alternative per pricing kind, each with its body's schema.
#[test]
fn price_entries_have_one_alternative_per_pricing_kind() {
    let doc: Value = serde_json::from_str(&gpuledger::api::openapi_json()).unwrap();
    let items = &doc["paths"]["/v1/prices"]["get"]["responses"]["200"]["content"]
        ["application/json"]["schema"]["items"];
    let entry = resolve(&doc, items);
    let kinds: Vec<String> = entry["oneOf"]
        .as_array()
        .expect("PricingEntry is a oneOf")
        .iter()
        .map(|alt| {
            let body = &alt["properties"]["body"];
            assert!(!is_bare_object(&doc, body), "{alt}");
            assert!(resolve(&doc, body)["properties"].is_object(), "{alt}");
            alt["properties"]["kind"]["enum"][0]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let want: Vec<String> = gpuledger::store::pricing::PRICING_KINDS
        .iter()
        .map(|k| k.as_str().to_owned())
        .collect();
    assert_eq!(kinds, want);
}

/// A validator for the schema `schema` of the document (its `$ref`s to components resolved
/// within the document).
fn validator_of(doc: &Value, schema: &Value) -> jsonschema::Validator {
    let mut root = schema.clone();
    root["components"] = doc["components"].clone();
    jsonschema::validator_for(&root).unwrap_or_else(|e| panic!("the schema {schema} compiles: {e}"))
}

/// Tenant A and the prices of [`served_answers_match_their_documented_schemas`], in force from
/// `since`: an H100 on-demand rate card and region parameters in the sample region, volume
/// tiers of plan `p` for reserved leases, and A on plan `p`.
fn priced_from(since: gpuledger::core::time::Timestamp) -> Vec<gpuledger::core::record::Body> {
    use gpuledger::core::rating::LeaseClass;
    use gpuledger::core::record::{
        Body, RateCard, RegionParameters, TenantPlan, TenantRegistered, Tier, VolumeTiers,
    };
    let (region, gpu_model) = ("cn-north-imx", "H100-SXM-80G");
    vec![
        Body::TenantRegistered(TenantRegistered {
            tenant: "tenant-a".into(),
        }),
        Body::RateCard(RateCard {
            region: region.into(),
            gpu_model: gpu_model.into(),
            lease_class: LeaseClass::OnDemand,
            currency: "CNY".into(),
            price_per_gpu_hour: records::dec("18.5"),
            effective_from: since,
        }),
        Body::RegionParams(RegionParameters {
            region: region.into(),
            currency: "CNY".into(),
            electricity_price_per_kwh: records::dec("0.5"),
            pue: records::dec("1.2"),
            carbon_g_per_kwh: records::dec("500"),
            effective_from: since,
        }),
        Body::VolumeTiers(VolumeTiers {
            plan: "p".into(),
            region: region.into(),
            gpu_model: gpu_model.into(),
            lease_class: LeaseClass::Reserved,
            currency: "CNY".into(),
            tiers: vec![
                Tier {
                    up_to_gpu_hours: Some(records::dec("1")),
                    price_per_gpu_hour: records::dec("2"),
                },
                Tier {
                    up_to_gpu_hours: None,
                    price_per_gpu_hour: records::dec("1"),
                },
            ],
            effective_from: since,
        }),
        Body::TenantPlan(TenantPlan {
            tenant: "tenant-a".into(),
            plan: "p".into(),
            effective_from: since,
        }),
    ]
}

/// Real 2xx answers of a running server, with records, prices, an invoice and a certificate
/// in the log, validate against the schema the document gives their operation and status.
#[test]
fn served_answers_match_their_documented_schemas() {
    use gpuledger::sample;
    let db = common::sqlite();
    let log = init(&db);
    let day = records::base_day();
    // The prices (and the tenant its plan names), logged first, when they take effect, a day
    // before the records: no price may take effect more than the policy's skew before it is
    // logged, and receive times never decrease.
    let since = day.plus(-86_400);
    log.write_at(since, priced_from(since));
    let srv = log.serve();
    let h = srv.http();
    let admin = log.admin.clone();
    let a = Some(admin.as_str());
    // The node, registered here so that its answer is checked below (`parties` and
    // `register` then find it registered).
    let node = h
        .post("/v1/nodes", a, &test_node("node-1").to_value())
        .ok_json(201);
    // Its account (the tenant is in the log already) and its sample lease on node-1.
    h.parties(&admin, &["tenant-a"]);
    let k = sample::key("openapi-node");
    h.register(&admin, "node-1", "node", &k);
    let tenant = h.secret(&admin, json!({"role": "tenant", "tenant": "tenant-a"}));
    let end = |seq: u64| day.plus(600 * seq as i64);
    let batch = vec![
        sample::usage("node-1", &k, 1, "tenant-a", records::dec("2"), end(1)),
        sample::usage("node-1", &k, 2, "tenant-a", records::dec("0.5"), end(2)),
        sample::energy(
            "node-1",
            &k,
            3,
            Some("tenant-a"),
            // 9 places × PUE 1.2: billed kWh of 10 places, shown rounded to 6 (the invoice
            // read back below once answered 500 for a quantity of more places than 9). At
            // most what tenant-a's leased 8 GPUs draw in 10 s (0.11666… kWh).
            records::dec("0.114567891"),
            end(3),
        ),
    ];
    let ans = h.post_records(&batch);
    assert_eq!(ans["accepted"], 3, "{ans}");
    let (from, to) = (day.to_string(), day.plus(86_400).to_string());
    h.post(
        "/v1/leases",
        a,
        &json!({"lease": "lease-x", "tenant": "tenant-a", "class": "reserved",
                "from": day.to_string(), "to": day.plus(86_400).to_string(),
                "nodes": [{"node": "node-1", "gpu_model": sample::MODEL, "count": "8"},
                          {"node": "node-1", "gpus": [32, 33], "share": "0.5"}]}),
    )
    .ok_json(201);
    let preview_path = format!("/v1/invoices/preview?tenant=tenant-a&from={from}&to={to}");
    let issued = h
        .post(
            "/v1/invoices",
            a,
            &json!({"tenant": "tenant-a", "from": from, "to": to}),
        )
        .ok_json(201);
    let number = issued[0]["number"].as_str().unwrap().to_owned();
    let energy: Vec<&Value> = issued[0]["lines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["kind"] == "energy")
        .collect();
    assert_eq!(energy.len(), 1, "{issued}");
    assert_eq!(
        (&energy[0]["measured_kwh"], &energy[0]["quantity"]),
        (&json!("0.114567891"), &json!("0.137481")),
        "{issued}"
    );
    h.post(
        "/v1/payments",
        a,
        &json!({"tenant": "tenant-a", "invoice": number, "currency": "CNY", "amount": "0.20"}),
    )
    .ok_json(201);
    let cert = h
        .post(
            "/v1/certificates",
            a,
            &json!({"tenant": "tenant-a", "from": from, "to": to}),
        )
        .ok_json(201);
    let cert_id = cert["id"].as_str().unwrap().to_owned();
    let size = h.size();

    let doc = h.get("/openapi.json", None).ok_json(200);
    let t = Some(tenant.as_str());
    let cases: Vec<(&str, String, Option<&str>)> = vec![
        ("/v1/usage", format!("/v1/usage?tenant=tenant-a&from={from}&to={to}&group_by=region,gpu_model&window=hour"), a),
        ("/v1/usage", format!("/v1/usage?from={from}&to={to}"), t),
        ("/v1/invoices", "/v1/invoices".into(), a),
        ("/v1/invoices/{number}", format!("/v1/invoices/{number}"), t),
        ("/v1/invoices/{number}/account", format!("/v1/invoices/{number}/account"), t),
        ("/v1/invoices/preview", preview_path, a),
        ("/v1/certificates", "/v1/certificates".into(), a),
        ("/v1/certificates/{id}", format!("/v1/certificates/{cert_id}"), t),
        ("/v1/balance", "/v1/balance?tenant=tenant-a".into(), a),
        ("/v1/checkpoints", "/v1/checkpoints".into(), None),
        ("/v1/entries", format!("/v1/entries?start=0&end={size}"), a),
        ("/v1/entries/{index}", "/v1/entries/0".into(), a),
        ("/v1/signers", "/v1/signers".into(), a),
        ("/v1/nodes", "/v1/nodes".into(), a),
        ("/v1/tenants", "/v1/tenants".into(), a),
        ("/v1/prices", "/v1/prices".into(), t),
        ("/v1/log", "/v1/log".into(), None),
        ("/v1/tokens", "/v1/tokens".into(), a),
        ("/v1/witnesses", "/v1/witnesses".into(), a),
        ("/v1/proofs/inclusion", format!("/v1/proofs/inclusion?index=1&size={size}"), a),
        ("/v1/proofs/consistency", format!("/v1/proofs/consistency?from=1&to={size}"), None),
    ];
    let mut faults = Vec::new();
    for (template, path, token) in &cases {
        let body = h.get(path, *token).ok_json(200);
        let schema = &doc["paths"][template]["get"]["responses"]["200"]["content"]
            ["application/json"]["schema"];
        assert!(schema.is_object(), "GET {template}: no 200 JSON schema");
        let v = validator_of(&doc, schema);
        let errors: Vec<String> = v.iter_errors(&body).map(|e| e.to_string()).collect();
        if !errors.is_empty() {
            faults.push(format!("GET {path}: {errors:#?}"));
        }
    }
    // The bodies of the 2xx answers to the writes above, against their documented schemas.
    for (template, status, body) in [
        ("/v1/invoices", "201", &issued),
        ("/v1/certificates", "201", &cert),
        ("/v1/records", "200", &ans),
        ("/v1/nodes", "201", &node),
    ] {
        let schema = &doc["paths"][template]["post"]["responses"][status]["content"]
            ["application/json"]["schema"];
        let errors: Vec<String> = validator_of(&doc, schema)
            .iter_errors(body)
            .map(|e| e.to_string())
            .collect();
        if !errors.is_empty() {
            faults.push(format!("POST {template}: {errors:#?}"));
        }
    }
    assert!(faults.is_empty(), "{faults:#?}");
    // The checks above can fail: a line whose amount is a JSON number is refused.
    let mut wrong = issued[0].clone();
    wrong["lines"][0]["amount"] = json!(3.37);
    let schema = &doc["paths"]["/v1/invoices/{number}"]["get"]["responses"]["200"]["content"]
        ["application/json"]["schema"];
    assert!(!validator_of(&doc, schema).is_valid(&wrong));
}

/// Every kind of outcome the server answers to a batch (accepted, duplicate, rejected) is valid
/// against the documented `IngestResponse`, and matches the one `Outcome` alternative that its
/// `status` names: one flat object each, which client generators can read (the rejected
/// alternative was once an `allOf` that openapi-python-client dropped, and with it the answer).
#[test]
fn served_outcomes_match_their_documented_alternatives() {
    use gpuledger::sample;
    let db = common::sqlite();
    let log = init(&db);
    let srv = log.serve();
    let h = srv.http();
    h.parties(&log.admin, &["tenant-a"]);
    let k = sample::key("openapi-node");
    h.register(&log.admin, "node-1", "node", &k);
    let end = records::base_day().plus(600);
    let first = sample::usage("node-1", &k, 1, "tenant-a", records::dec("2"), end);
    let second = sample::usage(
        "node-1",
        &k,
        2,
        "tenant-a",
        records::dec("1"),
        end.plus(600),
    );
    assert_eq!(h.post_records(std::slice::from_ref(&first))["accepted"], 1);
    // The seq of a signed record changed: its signature no longer verifies.
    let mut forged = serde_json::to_value(&second).unwrap();
    forged["seq"] = json!(3);
    let batch = json!([second, first, forged]);
    let ans = h.post("/v1/records", None, &batch).ok_json(200);
    let statuses: Vec<&str> = ans["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["accepted", "duplicate", "rejected"], "{ans}");
    assert_eq!(ans["outcomes"][2]["reason"], "bad_signature", "{ans}");

    let doc: Value = serde_json::from_str(&gpuledger::api::openapi_json()).unwrap();
    let schema = &doc["paths"]["/v1/records"]["post"]["responses"]["200"]["content"]
        ["application/json"]["schema"];
    let errors: Vec<String> = validator_of(&doc, schema)
        .iter_errors(&ans)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    let alternatives = doc["components"]["schemas"]["Outcome"]["oneOf"]
        .as_array()
        .expect("Outcome is a oneOf");
    assert_eq!(alternatives.len(), 3);
    for (outcome, status) in ans["outcomes"].as_array().unwrap().iter().zip(&statuses) {
        for alt in alternatives {
            assert_eq!(
                alt["type"], "object",
                "a flat object, not a composition: {alt}"
            );
            let named = alt["properties"]["status"]["enum"] == json!([status]);
            assert_eq!(
                validator_of(&doc, alt).is_valid(outcome),
                named,
                "{outcome} against {}",
                alt["title"]
            );
        }
    }
}

/// Whether `s` matches the document's `pattern` `pattern` (as a JSON Schema validator reads
/// it: ECMA-262).
fn matches_pattern(pattern: &str, s: &str) -> bool {
    jsonschema::validator_for(&json!({"type": "string", "pattern": pattern}))
        .expect("the pattern compiles")
        .is_valid(&json!(s))
}

/// The id patterns the document states are the checks the server makes: every id a request
/// may carry is documented by [`gpuledger::core::ids::ID_PATTERN`] or, naming a new thing,
/// [`gpuledger::core::ids::NEW_ID_PATTERN`], which refuses the reserved ids.
#[test]
fn id_patterns_are_the_id_checks() {
    use gpuledger::core::ids::{check_id, check_new_id, ID_PATTERN, NEW_ID_PATTERN};
    let longest = "a".repeat(128);
    let too_long = "a".repeat(129);
    let samples = [
        "acme-ai",
        "a",
        "0",
        "cn-north/imx:h100_80g.1",
        "ledger",
        "Ledger",
        "ledger2",
        "my-ledger",
        "ledger.x",
        "ledger\n",
        "",
        "-a",
        ".a",
        "a b",
        "a\n",
        "é",
        "a\u{0}",
        "a%2F",
        "a?b",
        &longest,
        &too_long,
    ];
    for s in samples {
        assert_eq!(matches_pattern(ID_PATTERN, s), check_id(s).is_ok(), "{s:?}");
        assert_eq!(
            matches_pattern(NEW_ID_PATTERN, s),
            check_new_id(s).is_ok(),
            "{s:?}"
        );
    }
    for r in gpuledger::core::ids::RESERVED_IDS {
        assert!(matches_pattern(ID_PATTERN, r) && !matches_pattern(NEW_ID_PATTERN, r));
    }
}

/// The timestamp pattern accepts exactly what the server parses: every day of the months of
/// a leap year, a century that is not one, one that is, and the range's first and last years.
#[test]
fn the_timestamp_pattern_is_the_parser() {
    use gpuledger::core::time::{Timestamp, TIMESTAMP_PATTERN};
    let re = jsonschema::validator_for(&json!({"type": "string", "pattern": TIMESTAMP_PATTERN}))
        .unwrap();
    let agree = |s: &str| {
        assert_eq!(re.is_valid(&json!(s)), Timestamp::parse(s).is_ok(), "{s:?}");
    };
    for year in [1999, 2000, 2023, 2024, 2100, 2400, 9996, 9999] {
        for month in 0..=13 {
            for day in 0..=32 {
                agree(&format!("{year:04}-{month:02}-{day:02}T12:00:00Z"));
            }
        }
    }
    for s in [
        "2026-11-01T00:00:00Z",
        "2026-11-01T23:59:59Z",
        "2026-11-01T24:00:00Z",
        "2026-11-01T23:60:00Z",
        "2026-11-01T23:59:60Z",
        "2026-11-01T00:00:00.5Z",
        "2026-11-01T00:00:00+00:00",
        "2026-11-01t00:00:00z",
        "2026-11-01 00:00:00Z",
        "2026-11-01T00:00:00Z\n",
        "12026-11-01T00:00:00Z",
        "",
    ] {
        agree(s);
    }
}

/// Every path parameter states its grammar (a `pattern`, an `enum` or an integer type), and
/// so does every `tenant` query parameter: a request the document calls valid is one the
/// server reads, and one it calls invalid is refused.
#[test]
fn path_and_tenant_parameters_state_their_grammar() {
    let doc: Value = serde_json::from_str(&gpuledger::api::openapi_json()).unwrap();
    let mut loose = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for p in op["parameters"].as_array().into_iter().flatten() {
                let (name, place) = (p["name"].as_str().unwrap(), p["in"].as_str().unwrap());
                if place != "path" && !(place == "query" && name == "tenant") {
                    continue;
                }
                let s = resolve(&doc, &p["schema"]);
                let stated =
                    s["pattern"].is_string() || s["enum"].is_array() || s["type"] == "integer";
                if !stated {
                    loose.push(format!("{method} {path} {name}"));
                }
            }
        }
    }
    loose.sort();
    // Left for their handlers' owners: the download's path, the docs' file names and the
    // paged lists' tenants.
    let known = [
        "get /docs/{file} file",
        "get /v1/certificates tenant",
        "get /v1/invoices tenant",
        "get /v1/invoices/{number}/{format} format",
        "get /v1/invoices/{number}/{format} number",
    ];
    let loose: Vec<&str> = loose
        .iter()
        .map(String::as_str)
        .filter(|l| !known.contains(l))
        .collect();
    assert!(loose.is_empty(), "parameters without a grammar: {loose:?}");
}
