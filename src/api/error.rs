//! The API's one error type. Every error leaves as `application/problem+json` (RFC 9457) with a
//! stable `type`, a `title`, the `status`, a `detail`, and `errors` where per-field or
//! per-record reasons apply. Internal errors are logged with the request id and never shown.

use crate::store::StoreError;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;
use serde_json::Value;

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
    #[schema(value_type = Option<Vec<ProblemItem>>)]
    pub errors: Option<Value>,
}

/// One item of a problem's `errors`: the field or parameter it concerns and why.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ProblemItem {
    /// The field path (`body.gpu_count`) or query parameter.
    pub field: String,
    /// The rejection reason code, where the problem is a refused field.
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
        errors: Option<Value>,
    },
    /// 401: no, malformed, unknown or revoked token.
    #[error("a valid bearer token is required")]
    Unauthorized,
    /// 403: authenticated, but the role may not do this (never used to hide tenants' data).
    #[error("{0}")]
    Forbidden(String),
    /// 404: unknown, or belonging to another tenant.
    #[error("{0} not found")]
    NotFound(String),
    /// 409: already exists or already done.
    #[error("{0}")]
    Conflict(String),
    /// 413: body or batch over a named limit.
    #[error("{detail}")]
    TooLarge { slug: &'static str, detail: String },
    /// 415: wrong content type.
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// 503: database unreachable or not initialised.
    #[error("{0}")]
    Unavailable(String),
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

    /// A 400 about one query or body parameter.
    pub fn invalid_parameter(name: &str, detail: impl Into<String>) -> Self {
        let detail = detail.into();
        ApiError::BadRequest {
            slug: "invalid_parameter",
            errors: Some(serde_json::json!([{ "field": name, "message": detail }])),
            detail: format!("{name}: {detail}"),
        }
    }

    fn slug_title(&self) -> (&'static str, &'static str) {
        match self {
            ApiError::BadRequest { slug, .. } => (slug, "Bad request"),
            ApiError::Unauthorized => ("unauthorized", "Unauthorized"),
            ApiError::Forbidden(_) => ("forbidden", "Forbidden"),
            ApiError::NotFound(_) => ("not_found", "Not found"),
            ApiError::Conflict(_) => ("conflict", "Conflict"),
            ApiError::TooLarge { slug, .. } => (slug, "Payload too large"),
            ApiError::UnsupportedMediaType(_) => {
                ("unsupported_media_type", "Unsupported media type")
            }
            ApiError::Unavailable(_) => ("unavailable", "Service unavailable"),
            ApiError::Internal(_) => ("internal", "Internal server error"),
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
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
        if matches!(self, ApiError::Unauthorized) {
            resp.insert_header(("WWW-Authenticate", "Bearer"));
        }
        resp.json(body)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Refused(m) | StoreError::BadUrl(m) => ApiError::bad_request("refused", m),
            StoreError::AlreadyExists(m) => ApiError::Conflict(m),
            StoreError::NotFound(m) => ApiError::NotFound(m),
            StoreError::BatchTooLarge(n, max) => ApiError::TooLarge {
                slug: "too_many_records",
                detail: format!("{n} records in one request; the limit is {max}"),
            },
            StoreError::Connect(m) => ApiError::Unavailable(format!("database unavailable: {m}")),
            StoreError::NotInitialised => ApiError::Unavailable(e.to_string()),
            StoreError::WriterStopped => {
                ApiError::Unavailable("the ledger is shutting down".into())
            }
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<actix_web::error::BlockingError> for ApiError {
    fn from(e: actix_web::error::BlockingError) -> Self {
        ApiError::Internal(format!("blocking task failed: {e}"))
    }
}
