//! The API's one error type. Every error leaves as `application/problem+json` (RFC 9457) with a
//! stable `type`, a `title`, the `status`, a `detail`, and `errors` where per-field or
//! per-record reasons apply. Internal errors are logged with the request id and never shown.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, ResponseError};
use gpuledger_store::{Outage, StoreError};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::OnceLock;
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, RefOr, Response, ResponseBuilder};

/// `Retry-After` of a 503 `witnesses_behind`: witnesses are sent each new checkpoint at once,
/// so a quorum that was not reached in `witness_wait_seconds` is unlikely within a few more.
pub const WITNESSES_BEHIND_RETRY_AFTER_SECONDS: u64 = 30;

/// The body of every error response.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// Stable identifier of the problem kind, `urn:gpuledger:problem:<slug>`.
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    /// Per-field or per-item reasons, when they apply.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<Vec<ProblemItem>>,
}

/// One item of a problem's `errors`: the field or parameter it concerns and why.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ProblemItem {
    /// The field path (`body.gpu_count`) or query parameter.
    pub field: String,
    /// The rejection reason code (PROTOCOL §6.6) where the problem is a refused field: a bad
    /// record's, or an admin write's that an admission rule refused (problem `refused`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub message: String,
}

/// An error answered to an API caller.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400 with a problem slug such as `malformed_json` or `invalid_parameter`.
    #[error("{detail}")]
    BadRequest {
        slug: &'static str,
        detail: String,
        errors: Option<Vec<ProblemItem>>,
    },
    /// 401: no, malformed or unknown token (nothing is said about a token id alone).
    #[error("a valid bearer token is required")]
    Unauthorized,
    /// 401 `token_expired`: the whole token was presented, and it is past its expiry.
    #[error("the bearer token has expired; ask an admin for a new one")]
    TokenExpired,
    /// 401 `token_revoked`: the whole token was presented, and it was revoked.
    #[error("the bearer token has been revoked; ask an admin for a new one")]
    TokenRevoked,
    /// 403: authenticated, but the role may not do this (never used to hide tenants' data).
    #[error("{0}")]
    Forbidden(String),
    /// 404: unknown, or belonging to another tenant.
    #[error("{0} not found")]
    NotFound(String),
    /// 409: already exists or already done.
    #[error("{0}")]
    Conflict(String),
    /// 408: the request body did not arrive in time (`body_timeout`).
    #[error("{0}")]
    RequestTimeout(String),
    /// 413: body or batch over a named limit.
    #[error("{detail}")]
    TooLarge { slug: &'static str, detail: String },
    /// 405 with `Allow`: the path is served, but not for this method.
    #[error("{method} is not served at this path; it allows {}", allow.join(", "))]
    MethodNotAllowed {
        /// The request's method.
        method: String,
        /// The methods the path is served for, upper case.
        allow: Vec<String>,
    },
    /// 415: wrong content type.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 422: a well-formed request a business rule refuses (`overpayment`).
    #[error("{detail}")]
    Unprocessable { slug: &'static str, detail: String },
    /// 503 with `Retry-After`: the database is out of reach, the ledger is starting, stopping
    /// or not ready, or a capacity limit is reached. `slug` names which.
    #[error("{detail}")]
    Unavailable {
        slug: &'static str,
        detail: String,
        /// Seconds the caller should wait before trying again.
        retry_after: u64,
    },
    /// 507 with `Retry-After`: the database's disk is full; nothing was written.
    #[error("the ledger's storage is full; nothing was written; retry later")]
    InsufficientStorage { retry_after: u64 },
    /// 429 with `Retry-After`: a rate limit was reached.
    #[error("{detail}")]
    TooManyRequests { detail: String, retry_after: u64 },
    /// 500: a bug; the detail is logged, not shown.
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    /// A 400 with a slug and detail.
    pub fn bad_request(slug: &'static str, detail: impl Into<String>) -> Self {
        ApiError::BadRequest {
            slug,
            detail: detail.into(),
            errors: None,
        }
    }

    /// A 503 with a slug, a detail and `Retry-After` seconds.
    pub fn unavailable(slug: &'static str, detail: impl Into<String>, retry_after: u64) -> Self {
        ApiError::Unavailable {
            slug,
            detail: detail.into(),
            retry_after,
        }
    }

    /// The `Retry-After` seconds this answer carries, if any.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::Unavailable { retry_after, .. }
            | ApiError::InsufficientStorage { retry_after }
            | ApiError::TooManyRequests { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }

    /// The `WWW-Authenticate` challenge of a 401 (RFC 6750 §3): plain `Bearer` for a missing or
    /// unknown token, with `error="invalid_token"` and a description for an expired or revoked
    /// one.
    pub fn www_authenticate(&self) -> Option<&'static str> {
        match self {
            ApiError::Unauthorized => Some("Bearer"),
            ApiError::TokenExpired => Some(
                "Bearer error=\"invalid_token\", error_description=\"The access token expired\"",
            ),
            ApiError::TokenRevoked => Some(
                "Bearer error=\"invalid_token\", error_description=\"The access token was revoked\"",
            ),
            _ => None,
        }
    }

    /// A 400 about one query or body parameter.
    pub fn invalid_parameter(name: &str, detail: impl Into<String>) -> Self {
        let detail = detail.into();
        ApiError::BadRequest {
            slug: "invalid_parameter",
            errors: Some(vec![ProblemItem {
                field: name.to_owned(),
                reason: None,
                message: detail.clone(),
            }]),
            detail: format!("{name}: {detail}"),
        }
    }

    fn slug_title(&self) -> (&'static str, &'static str) {
        match self {
            ApiError::BadRequest { slug, .. } => (slug, "Bad request"),
            ApiError::Unauthorized => ("unauthorized", "Unauthorized"),
            ApiError::TokenExpired => ("token_expired", "Unauthorized"),
            ApiError::TokenRevoked => ("token_revoked", "Unauthorized"),
            ApiError::Forbidden(_) => ("forbidden", "Forbidden"),
            ApiError::NotFound(_) => ("not_found", "Not found"),
            ApiError::MethodNotAllowed { .. } => ("method_not_allowed", "Method not allowed"),
            ApiError::Conflict(_) => ("conflict", "Conflict"),
            ApiError::RequestTimeout(_) => ("body_timeout", "Request timeout"),
            ApiError::TooLarge { slug, .. } => (slug, "Payload too large"),
            ApiError::UnsupportedMediaType(_) => {
                ("unsupported_media_type", "Unsupported media type")
            }
            ApiError::Unprocessable { slug, .. } => (slug, "Unprocessable content"),
            ApiError::Unavailable { slug, .. } => (slug, "Service unavailable"),
            ApiError::InsufficientStorage { .. } => ("disk_full", "Insufficient storage"),
            ApiError::TooManyRequests { .. } => ("rate_limited", "Too many requests"),
            ApiError::Internal(_) => ("internal", "Internal server error"),
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized | ApiError::TokenExpired | ApiError::TokenRevoked => {
                StatusCode::UNAUTHORIZED
            }
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Unprocessable { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Unavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::InsufficientStorage { .. } => StatusCode::INSUFFICIENT_STORAGE,
            ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let status = self.status_code();
        if let ApiError::Internal(detail) = self {
            tracing::error!(%detail, "internal error");
        }
        let (slug, title) = self.slug_title();
        let errors = match self {
            ApiError::BadRequest { errors, .. } => errors.clone(),
            _ => None,
        };
        let body = Problem {
            kind: format!("urn:gpuledger:problem:{slug}"),
            title: title.to_owned(),
            status: status.as_u16(),
            detail: self.to_string(),
            errors,
        };
        let mut resp = HttpResponse::build(status);
        resp.content_type("application/problem+json");
        if let Some(challenge) = self.www_authenticate() {
            resp.insert_header(("WWW-Authenticate", challenge));
        }
        if let ApiError::MethodNotAllowed { allow, .. } = self {
            resp.insert_header(("Allow", allow.join(", ")));
        }
        if let Some(seconds) = self.retry_after() {
            resp.insert_header(("Retry-After", seconds.to_string()));
        }
        resp.json(body)
    }
}

/// `Retry-After` of a 503 for an unreachable database, in seconds: short, because writes
/// resume as soon as it is back.
pub const RETRY_AFTER_UNAVAILABLE_SECONDS: u64 = 2;
/// `Retry-After` of `clock_unreliable`: a stepped clock is back or settled in seconds to
/// minutes; agents keep their records meanwhile.
pub const RETRY_AFTER_CLOCK_SECONDS: u64 = 5;

/// `Retry-After` of a 507 for a full disk, in seconds: space is freed by a person or a job.
pub const RETRY_AFTER_DISK_FULL_SECONDS: u64 = 30;

impl ApiError {
    /// The answer to an outage: 503 `database_unavailable` or 507 `disk_full`, each with
    /// `Retry-After`, never the underlying error's text.
    pub fn outage(outage: Outage) -> Self {
        metrics::counter!("gpuledger_outage_answers_total", "kind" => outage_kind(outage))
            .increment(1);
        match outage {
            Outage::DatabaseUnavailable => ApiError::unavailable(
                "database_unavailable",
                "the ledger's database is unavailable; nothing was written; retry later",
                RETRY_AFTER_UNAVAILABLE_SECONDS,
            ),
            Outage::DiskFull => ApiError::InsufficientStorage {
                retry_after: RETRY_AFTER_DISK_FULL_SECONDS,
            },
        }
    }
}

/// The `kind` label of `gpuledger_outage_answers_total` (the problem slug of the answer).
pub fn outage_kind(outage: Outage) -> &'static str {
    match outage {
        Outage::DatabaseUnavailable => "database_unavailable",
        Outage::DiskFull => "disk_full",
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Refused(m) | StoreError::BadUrl(m) => ApiError::bad_request("refused", m),
            StoreError::AlreadyExists(m) => ApiError::Conflict(m),
            StoreError::NotFound(m) => ApiError::NotFound(m),
            e @ StoreError::Overpayment { .. } => ApiError::Unprocessable {
                slug: "overpayment",
                detail: e.to_string(),
            },
            // The admission rule's own reason code and field (PROTOCOL §6.6, §6.7), under the
            // same `refused` problem type as the store's other refusals.
            StoreError::Rejected(r) => ApiError::BadRequest {
                slug: "refused",
                errors: Some(vec![ProblemItem {
                    field: r.field.clone().unwrap_or_else(|| "body".to_owned()),
                    reason: Some(r.reason.code().to_owned()),
                    message: r.message.clone(),
                }]),
                detail: r.message,
            },
            StoreError::ContractPeriodSplit(detail) => ApiError::Unprocessable {
                slug: "contract_period_split",
                detail,
            },
            e @ StoreError::PeriodNotEnded { .. } => ApiError::Unprocessable {
                slug: "period_not_ended",
                detail: e.to_string(),
            },
            StoreError::BatchTooLarge(n, max) => ApiError::TooLarge {
                slug: "too_many_records",
                detail: format!("{n} records in one request; the limit is {max}"),
            },
            other => store_unavailable(other),
        }
    }
}

/// The answer to a store error that is not a refusal of the request: 503 while the ledger
/// cannot serve it (with the `Retry-After` of the cause), an outage (503, 507) or 500.
fn store_unavailable(e: StoreError) -> ApiError {
    match e {
        StoreError::NotInitialised => ApiError::unavailable(
            "not_initialised",
            "the ledger's database is not initialised",
            RETRY_AFTER_UNAVAILABLE_SECONDS,
        ),
        StoreError::Busy(m) => {
            ApiError::unavailable("busy", m, super::limits::BUSY_RETRY_AFTER_SECONDS)
        }
        e @ StoreError::WitnessesBehind { .. } => ApiError::unavailable(
            "witnesses_behind",
            e.to_string(),
            WITNESSES_BEHIND_RETRY_AFTER_SECONDS,
        ),
        e @ StoreError::HighWater(_) => {
            tracing::error!(error = %e, "answering high_water_unsaved");
            ApiError::unavailable(
                "high_water_unsaved",
                "the ledger cannot save its high-water mark; no checkpoint is signed until it can",
                RETRY_AFTER_UNAVAILABLE_SECONDS,
            )
        }
        e @ StoreError::ClockUnreliable(_) => {
            ApiError::unavailable("clock_unreliable", e.to_string(), RETRY_AFTER_CLOCK_SECONDS)
        }
        e @ StoreError::LogRewound(_) => ApiError::unavailable(
            "log_rewound",
            e.to_string(),
            RETRY_AFTER_UNAVAILABLE_SECONDS,
        ),
        StoreError::WriterStopped => ApiError::unavailable(
            "shutting_down",
            "the ledger is shutting down",
            RETRY_AFTER_UNAVAILABLE_SECONDS,
        ),
        other => match other.outage() {
            // The cause is logged; callers learn only what kind of outage it is.
            Some(outage) => {
                tracing::warn!(error = %other, "answering an outage");
                ApiError::outage(outage)
            }
            None => ApiError::Internal(other.to_string()),
        },
    }
}

impl From<actix_web::error::BlockingError> for ApiError {
    fn from(e: actix_web::error::BlockingError) -> Self {
        ApiError::Internal(format!("blocking task failed: {e}"))
    }
}

/// The answer to a request no route took: 405 `method_not_allowed` with `Allow` where its path
/// is served for other methods (the methods the OpenAPI document lists for the route pattern
/// the path matches), 404 `not_found` otherwise.
pub async fn no_route(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let allow = req
        .resource_map()
        .match_pattern(req.path())
        .and_then(|pattern| served_methods().get(&template_of(&pattern)));
    Err(match allow {
        Some(allow) => ApiError::MethodNotAllowed {
            method: req.method().as_str().to_owned(),
            allow: allow.clone(),
        },
        None => ApiError::NotFound("route".into()),
    })
}

/// The OpenAPI path template of an actix route pattern: `{name:regex}` is `{name}`.
fn template_of(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len());
    let (mut depth, mut in_regex) = (0usize, false);
    for c in pattern.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ':' if depth == 1 => in_regex = true,
            _ => {}
        }
        if in_regex && depth == 0 {
            in_regex = false;
        }
        if !in_regex {
            out.push(c);
        }
    }
    out
}

/// Route pattern → the methods it is served for, upper case, from the OpenAPI document (which
/// is collected from the routes as they are registered).
fn served_methods() -> &'static BTreeMap<String, Vec<String>> {
    static METHODS: OnceLock<BTreeMap<String, Vec<String>>> = OnceLock::new();
    METHODS.get_or_init(|| {
        super::openapi()
            .paths
            .paths
            .iter()
            .map(|(path, item)| (path.clone(), item_methods(item)))
            .collect()
    })
}

/// The methods of a path item's operations, upper case, in a fixed order.
fn item_methods(item: &utoipa::openapi::PathItem) -> Vec<String> {
    [
        ("GET", &item.get),
        ("HEAD", &item.head),
        ("POST", &item.post),
        ("PUT", &item.put),
        ("PATCH", &item.patch),
        ("DELETE", &item.delete),
        ("OPTIONS", &item.options),
    ]
    .into_iter()
    .filter(|(_, op)| op.is_some())
    .map(|(m, _)| m.to_owned())
    .collect()
}

/// A documented answer of `description` whose body is a [`Problem`].
pub fn problem_response(description: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/problem+json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("Problem")))
                .build(),
        )
        .build()
}

/// `responses(..., RoleForbidden)` in a handler's `#[utoipa::path]`: the 403 of an operation
/// that some roles with a valid token may not use (admin-only writes, operations reads). A
/// tenant naming another tenant's things gets 404, never 403, and is not this.
pub struct RoleForbidden;

impl utoipa::IntoResponses for RoleForbidden {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        BTreeMap::from([(
            "403".to_owned(),
            RefOr::T(problem_response(
                "The token is valid, but its role may not do this (`forbidden`)",
            )),
        )])
    }
}

/// Documents on every operation of `doc` the problem answers its shape implies, where the
/// handler's annotation does not already list them: 401 where it takes a bearer token; 400
/// where it takes parameters or a body; 404 where it takes a path parameter or a `tenant`
/// (unknown, or another tenant's: never 403); 408, 413 and 415 where it reads a JSON body
/// ([`super::read_body`], [`super::require_json`]); 503 where it reads the database (an outage,
/// [`ApiError::outage`], or `busy`), and 507 where it also writes (a full disk).
pub fn document_problems(doc: &mut OpenApi) {
    for (path, item) in doc.paths.paths.iter_mut() {
        // Everything but the process's own pages (health, metrics, the document and its
        // reference) reads the database, so an outage reaches it.
        let uses_database =
            path.starts_with("/v1/") || path == "/checkpoint" || path.starts_with("/tile/");
        let operations = [
            (&mut item.get, false),
            (&mut item.head, false),
            (&mut item.put, true),
            (&mut item.post, true),
            (&mut item.delete, true),
            (&mut item.patch, true),
        ];
        for (op, writes) in operations {
            let Some(op) = op else { continue };
            for (status, description) in implied_problems(op, uses_database, writes) {
                op.responses
                    .responses
                    .entry(status.to_owned())
                    .or_insert_with(|| problem_response(description).into());
            }
        }
    }
}

/// The problem answers (status, description) that the shape of `op` implies
/// ([`document_problems`]); `uses_database`: its path reads the database, `writes`: its
/// method writes.
fn implied_problems(
    op: &utoipa::openapi::path::Operation,
    uses_database: bool,
    writes: bool,
) -> Vec<(&'static str, &'static str)> {
    let params = op.parameters.as_deref().unwrap_or_default();
    let has_body = op.request_body.is_some();
    let json_body = op
        .request_body
        .as_ref()
        .is_some_and(|b| b.content.contains_key("application/json"));
    let by_tenant_or_path = params
        .iter()
        .any(|p| p.parameter_in == utoipa::openapi::path::ParameterIn::Path || p.name == "tenant");
    let secured = op.security.as_ref().is_some_and(|s| !s.is_empty());
    let mut implied: Vec<(&str, &str)> = Vec::new();
    if secured {
        implied.push((
            "401",
            "No bearer token, or one that is malformed or unknown (`unauthorized`, with \
             `WWW-Authenticate: Bearer`); the token has expired (`token_expired`) or \
             was revoked (`token_revoked`), each with `WWW-Authenticate: Bearer \
             error=\"invalid_token\"` and an `error_description`",
        ));
    }
    if !params.is_empty() || has_body {
        implied.push((
            "400",
            "A parameter or the body is invalid; `errors` names each field and why",
        ));
    }
    if by_tenant_or_path {
        implied.push(("404", "Not found, or not the caller's to see (`not_found`)"));
    }
    if json_body {
        implied.push(("408", "The body did not arrive in time (`body_timeout`)"));
        implied.push(("413", "The body is over its limit (`body_too_large`)"));
        implied.push((
            "415",
            "The body is not `application/json` (`unsupported_media_type`)",
        ));
    }
    if uses_database {
        implied.push((
            "503",
            "The database is unavailable (`database_unavailable`) or the service is busy \
             (`busy`); `Retry-After` says when to try again",
        ));
    }
    if uses_database && writes {
        implied.push((
            "507",
            "The database's disk is full (`disk_full`); nothing was written; \
             `Retry-After` says when to try again",
        ));
    }
    implied
}

#[cfg(test)]
mod tests {
    use super::template_of;

    #[test]
    fn route_patterns_read_as_openapi_templates() {
        for (pattern, template) in [
            ("/v1/entries/{index}", "/v1/entries/{index}"),
            ("/tile/{level}/{index:.*}", "/tile/{level}/{index}"),
            ("/a/{n:[0-9]{3}}/b/{m}", "/a/{n}/b/{m}"),
            ("/healthz", "/healthz"),
        ] {
            assert_eq!(template_of(pattern), template, "{pattern}");
        }
    }
}
