//! The checked-in OpenAPI document (schemas/openapi.json) is what the code generates.
//! Regenerate with `cargo run -- openapi > schemas/openapi.json`.

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
