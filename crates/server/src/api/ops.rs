//! Operations endpoints: liveness, readiness, Prometheus metrics, the OpenAPI document and the
//! API reference (Swagger UI, embedded in the binary: it loads nothing from any other host).

use super::error::{self, ApiError};
use super::AppState;
use actix_web::get;
use actix_web::{web, HttpResponse};
use gpuledger_store::{Outage, WriteState};

/// Process is up.
#[utoipa::path(tag = "ops", responses((status = 200, description = "ok", body = String)))]
#[get("/healthz")]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain").body("ok\n")
}

/// Ready to take writes: the database answers reads with current migrations, and the write
/// path's latest transaction (the server probes it every second, see `serve`) did not fail.
/// Not ready answers 503 with `Retry-After` and says which: `log_rewound` (the database does
/// not hold the largest checkpoint this server signed or found published: nothing is written
/// or signed, see ops/runbooks/log-rewound.md), `clock_unreliable` (the ledger's clock stepped
/// or is behind the log, see ops/runbooks/clock.md), `database_unavailable`, `disk_full`,
/// `write_failing` or `migrations_pending`. Reads only; never writes.
#[utoipa::path(tag = "ops", responses((status = 200, description = "ready", body = String), (status = 503, body = super::error::Problem, content_type = "application/problem+json")))]
#[get("/readyz")]
pub async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let ledger = state.ledger.clone();
    let current = web::block(move || ledger.migrations_current()).await?;
    let not_ready = |slug, detail: &str| {
        ApiError::unavailable(slug, detail, error::RETRY_AFTER_UNAVAILABLE_SECONDS)
    };
    match current {
        Ok(true) => {}
        Ok(false) => {
            return Err(not_ready(
                "migrations_pending",
                "database migrations are not current",
            ))
        }
        Err(e) => {
            tracing::warn!(error = %e, "readiness: the database does not answer reads");
            return Err(not_ready(
                "database_unavailable",
                "the ledger's database is unavailable",
            ));
        }
    }
    if let Some(r) = state.ledger.rewound() {
        return Err(not_ready("log_rewound", &r.to_string()));
    }
    if let Some(u) = state.ledger.clock_fault() {
        return Err(ApiError::unavailable(
            "clock_unreliable",
            u.to_string(),
            error::RETRY_AFTER_CLOCK_SECONDS,
        ));
    }
    match state.ledger.write_state() {
        Some(WriteState::Failed(Some(Outage::DiskFull))) => Err(ApiError::unavailable(
            "disk_full",
            "the ledger's storage is full; writes fail",
            error::RETRY_AFTER_DISK_FULL_SECONDS,
        )),
        Some(WriteState::Failed(Some(Outage::DatabaseUnavailable))) => Err(not_ready(
            "database_unavailable",
            "the ledger's database is unavailable for writes",
        )),
        Some(WriteState::Failed(None)) => Err(not_ready(
            "write_failing",
            "the ledger's latest write failed",
        )),
        Some(WriteState::Ok) | None => Ok(HttpResponse::Ok()
            .content_type("text/plain")
            .body("ready\n")),
    }
}

/// Prometheus text exposition.
#[utoipa::path(tag = "ops", responses((status = 200, description = "Prometheus text format", body = String)))]
#[get("/metrics")]
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    let ledger = state.ledger.clone();
    if let Ok(Ok((size, _))) = web::block(move || ledger.reads().head()).await {
        ::metrics::gauge!("gpuledger_log_size").set(size as f64);
    }
    ::metrics::gauge!("gpuledger_sequencer_queue_depth").set(state.ledger.queue_depth() as f64);
    let rewound = state.ledger.rewound().is_some();
    ::metrics::gauge!("gpuledger_log_rewound").set(if rewound { 1.0 } else { 0.0 });
    let unreliable = state.ledger.clock_fault().is_some();
    ::metrics::gauge!("gpuledger_clock_unreliable").set(if unreliable { 1.0 } else { 0.0 });
    ::metrics::counter!("gpuledger_clock_steps_total").absolute(state.ledger.clock_steps());
    let ledger = state.ledger.clone();
    if let Ok(Ok(Some(age))) =
        web::block(move || ledger.reads().latest_checkpoint_age_seconds()).await
    {
        ::metrics::gauge!("gpuledger_checkpoint_age_seconds").set(age as f64);
    }
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(state.metrics.render())
}

/// The OpenAPI 3.1 document (this one).
#[utoipa::path(tag = "ops", responses((status = 200, description = "The OpenAPI document", content_type = "application/json", body = Object)))]
#[get("/openapi.json")]
pub async fn openapi() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(super::openapi_json())
}

/// The API reference page (Swagger UI).
///
/// Swagger UI rendering /openapi.json; its files are served from the binary under /docs/, and
/// nothing is loaded from any other host.
#[utoipa::path(tag = "ops", responses((status = 200, description = "The API reference page", content_type = "text/html", body = String)))]
#[get("/docs")]
pub async fn docs() -> HttpResponse {
    docs_page()
}

/// A file of the API reference page.
///
/// Swagger UI's scripts, style sheets, icons and source maps (`text/plain`) as its release
/// ships them, and `swagger-initializer.js`, its settings (the document it renders is
/// /openapi.json; no online validator). `/docs/` is the page itself. Gzip-compressed when the
/// request accepts it (Swagger UI's script is 1.4 MB, 0.5 MB compressed).
#[utoipa::path(tag = "ops",
    params(("file" = String, Path, description = "A file name, e.g. `swagger-ui-bundle.js`, `swagger-ui.css` or `swagger-initializer.js`")),
    responses((status = 200, description = "The file, with the content type of its name", content(
                  (String = "text/javascript"), (String = "text/css"), (String = "text/html"),
                  ("image/png"), (String = "text/plain"))),
              (status = 404, description = "No such file (`not_found`)", body = super::error::Problem, content_type = "application/problem+json")))]
#[get("/docs/{file:.*}", wrap = "actix_web::middleware::Compress::default()")]
pub async fn docs_file(file: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let file = file.into_inner();
    if file.is_empty() {
        return Ok(docs_page());
    }
    let found = utoipa_swagger_ui::serve(&file, swagger_ui_config()).map_err(|e| {
        ApiError::Internal(format!("docs: Swagger UI's {file} did not render: {e}"))
    })?;
    let found = found.ok_or_else(|| ApiError::NotFound("file".into()))?;
    let mut response = HttpResponse::Ok();
    docs_headers(&mut response);
    response.content_type(found.content_type);
    // Embedded files (release builds) are served from the binary without a copy.
    Ok(match found.bytes {
        std::borrow::Cow::Borrowed(bytes) => response.body(bytes),
        std::borrow::Cow::Owned(bytes) => response.body(bytes),
    })
}

/// The page that loads Swagger UI from /docs/ (absolute paths: the same page answers `/docs`
/// and `/docs/`).
fn docs_page() -> HttpResponse {
    let mut response = HttpResponse::Ok();
    docs_headers(&mut response);
    response
        .content_type("text/html; charset=utf-8")
        .body(include_str!("docs.html"))
}

/// The Content-Security-Policy of the API reference and its files. The page is served on the
/// console's origin, so it may do no more than Swagger UI needs: its scripts and style sheets
/// from this origin only (the page has no inline script; its settings are the file
/// `swagger-initializer.js`), one inline style element allowed by its hash (the `<style>` of
/// the Swagger logo SVG that Swagger UI renders, [`DOCS_LOGO_STYLE_SHA256`]), the `data:` SVG
/// icons of its style sheet, requests to this origin only (the document and "Try it out"), no
/// plugins, no `<base>`, no form posts and no framing. Style attributes in markup (as opposed
/// to styles its scripts set) stay refused.
pub const DOCS_CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self' 'sha256-RL3ie0nH+Lzz2YNqQN83mnU0J1ot4QL7b99vMdIX99w='; \
     img-src 'self' data:; font-src 'self'; connect-src 'self'; manifest-src 'self'; \
     object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// SHA-256 (base64) of the one inline style element Swagger UI renders, the colours of its
/// logo: `.logo_small_svg__cls-2{fill:#fff}.logo_small_svg__cls-3{fill:#85ea2d}…` in the
/// vendored Swagger UI 5 of utoipa-swagger-ui 9. A new Swagger UI may change it: the browser
/// test in tests/api.rs (`docs_are_locked_down_and_still_work`) checks the logo is coloured.
pub const DOCS_LOGO_STYLE_SHA256: &str = "RL3ie0nH+Lzz2YNqQN83mnU0J1ot4QL7b99vMdIX99w=";

/// The security headers of every `/docs` answer: [`DOCS_CONTENT_SECURITY_POLICY`], no
/// framing (`X-Frame-Options` for browsers without `frame-ancestors`), no content sniffing,
/// and no referrer to other hosts.
fn docs_headers(response: &mut actix_web::HttpResponseBuilder) {
    use actix_web::http::header;
    response
        .insert_header((
            header::CONTENT_SECURITY_POLICY,
            DOCS_CONTENT_SECURITY_POLICY,
        ))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"));
}

/// Swagger UI's settings, written into `swagger-initializer.js`: the document at
/// /openapi.json, and no online validator (Swagger UI would otherwise have browsers send the
/// document's address to validator.swagger.io).
fn swagger_ui_config() -> std::sync::Arc<utoipa_swagger_ui::Config<'static>> {
    static CONFIG: std::sync::OnceLock<std::sync::Arc<utoipa_swagger_ui::Config<'static>>> =
        std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            std::sync::Arc::new(
                utoipa_swagger_ui::Config::new(["/openapi.json"]).validator_url("none"),
            )
        })
        .clone()
}
