//! Operations endpoints: liveness, readiness, Prometheus metrics, the OpenAPI document and an
//! offline docs page.

use super::error::ApiError;
use super::AppState;
use crate::store::conn;
use actix_web::get;
use actix_web::{web, HttpResponse};

/// Process is up.
#[utoipa::path(tag = "ops", responses((status = 200, description = "ok", body = String)))]
#[get("/healthz")]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("ok\n")
}

/// Database reachable and migrations current.
#[utoipa::path(tag = "ops", responses((status = 200, description = "ready", body = String), (status = 503, body = super::error::Problem, content_type = "application/problem+json")))]
#[get("/readyz")]
pub async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let ledger = state.ledger.clone();
    let current = web::block(move || ledger.with_reader(conn::migrations_current))
        .await
        .map_err(|e| ApiError::Unavailable(format!("readiness check failed: {e}")))?;
    match current {
        Ok(true) => Ok(HttpResponse::Ok()
            .content_type("text/plain")
            .body("ready\n")),
        Ok(false) => Err(ApiError::Unavailable(
            "database migrations are not current".into(),
        )),
        Err(e) => Err(ApiError::Unavailable(format!("database unreachable: {e}"))),
    }
}

/// Prometheus text exposition.
#[utoipa::path(tag = "ops", responses((status = 200, description = "Prometheus text format", body = String)))]
#[get("/metrics")]
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    let ledger = state.ledger.clone();
    if let Ok(Ok((size, _))) = web::block(move || ledger.head()).await {
        ::metrics::gauge!("gpuledger_log_size").set(size as f64);
    }
    ::metrics::gauge!("gpuledger_sequencer_queue_depth").set(state.ledger.queue_depth() as f64);
    let ledger = state.ledger.clone();
    if let Ok(Ok(Some(age))) = web::block(move || ledger.latest_checkpoint_age_seconds()).await {
        ::metrics::gauge!("gpuledger_checkpoint_age_seconds").set(age as f64);
    }
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.metrics.render())
}

/// The OpenAPI 3.1 document.
pub async fn openapi() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(super::openapi_json())
}

/// A self-contained HTML page listing the API from /openapi.json (no external assets).
pub async fn docs() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .body(include_str!("docs.html"))
}
