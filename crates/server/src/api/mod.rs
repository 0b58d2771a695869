//! The HTTP API (actix-web): routes under /v1, one error shape (problem+json), roles and tenant
//! isolation, OpenAPI generated from the handlers' annotations.
//!
//! Handlers are small async functions, one area per file; database work runs on actix's
//! blocking pool through the [`Ledger`].

pub mod admin;
pub mod auth;
pub mod certificates;
pub mod console;
pub mod contracts;
pub mod credit_notes;
pub mod error;
pub mod exclusions;
pub mod exports;
pub mod fleet;
pub mod idempotency;
pub mod invoices;
pub mod limits;
pub mod log;
pub mod ops;
pub mod paging;
pub mod prepayments;
pub mod pricing;
pub mod records;
pub mod tiles;
pub mod usage;
pub mod webhooks;
pub mod witnesses;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::{middleware, web, HttpRequest};
use error::ApiError;
use futures_util::StreamExt;
use gpuledger_core::time::Timestamp;
use gpuledger_store::Ledger;
use metrics_exporter_prometheus::PrometheusHandle;
use serde::de::DeserializeOwned;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;
use utoipa::OpenApi;
use utoipa_actix_web::service_config::ServiceConfig;
use utoipa_actix_web::{scope, AppExt};

/// Largest JSON body accepted by the admin endpoints, in bytes.
pub const MAX_ADMIN_BODY_BYTES: usize = 64 * 1024;

/// Shared state of every handler.
pub struct AppState {
    pub ledger: Arc<Ledger>,
    pub metrics: PrometheusHandle,
    /// Body timeouts, the ingest cap and the rate limiters.
    pub limits: limits::Limits,
}

impl AppState {
    /// Runs `f` on one of the ledger's read-only connections (`Ledger::reads`), on actix's
    /// blocking pool (a store read blocks on the database): how a handler reads the store.
    /// Writes go through the ledger's sequencer instead (`Ledger::append`,
    /// `append_ledger_entry`, and `Ledger::issuance` for invoices, certificates, settlements).
    pub async fn read<T: Send + 'static>(
        &self,
        f: impl FnMut(&mut gpuledger_store::DbConn) -> Result<T, gpuledger_store::StoreError>
            + Send
            + 'static,
    ) -> Result<T, ApiError> {
        let ledger = self.ledger.clone();
        Ok(web::block(move || ledger.reads().run(f)).await??)
    }
}

/// The OpenAPI document's frame: title, security scheme and tags. The paths are collected from
/// the routes as [`routes`] registers them (utoipa-actix-web), so each route is written once,
/// next to its handler.
#[derive(OpenApi)]
#[openapi(
    info(title = "gpuledger", description = "Metering and settlement ledger for rented GPU compute: signed usage records in a verifiable RFC 6962 log."),
    modifiers(&BearerAuth),
    tags(
        (name = "records", description = "Signed records in"),
        (name = "log", description = "The log, its checkpoints and proofs"),
        (name = "usage", description = "Usage queries for billing"),
        (name = "pricing", description = "Rate cards, region parameters, leases, volume tiers, tenant plans and invoice previews"),
        (name = "invoices", description = "Issued invoices, downloads, payments, credit notes and balances"),
        (name = "certificates", description = "Compute-usage certificates and their evidence bundles"),
        (name = "exports", description = "FinOps FOCUS 1.2 cost-and-usage exports of issued invoices"),
        (name = "fleet", description = "The GPU servers (nodes) the log knows, with their regions and GPUs"),
        (name = "admin", description = "Tenants, signers and tokens"),
        (name = "webhooks", description = "Standard Webhooks: endpoints, delivery logs, redelivery, event types and the signing public key"),
        (name = "ops", description = "Health and metrics"),
        (name = "tiles", description = "C2SP tlog-tiles: the checkpoint and hash tiles (public), entry bundles (auditors)"),
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("glt_<id>_<secret>")
                    .build(),
            ),
        );
    }
}

/// The OpenAPI document as pretty JSON (what schemas/openapi.json holds).
pub fn openapi_json() -> String {
    openapi()
        .to_pretty_json()
        .expect("the OpenAPI document serialises")
        + "\n"
}

/// Refuses a request whose content type is not JSON.
pub fn require_json(req: &HttpRequest) -> Result<(), ApiError> {
    let ct = req
        .headers()
        .get("Content-Type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let essence = ct.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(ApiError::UnsupportedMediaType(format!(
            "Content-Type must be application/json (got {:?})",
            if ct.is_empty() { "nothing" } else { ct }
        )))
    }
}

/// Reads a body of at most `limit` bytes. A declared `Content-Length` over it is a 413 at
/// once, before anything is read (actix then closes the connection rather than read the
/// rest); a body that grows over it is a 413 as soon as it does. The body must keep coming:
/// a wait over the body idle timeout for its next piece, or over the body timeout in all, is
/// a 408 `body_timeout` (docs/CONFIGURATION.md). Memory grows with what arrived, never with
/// what was declared.
pub async fn read_body(
    req: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
) -> Result<Vec<u8>, ApiError> {
    let too_large = || ApiError::TooLarge {
        slug: "body_too_large",
        detail: format!("the body is over the limit of {limit} bytes"),
    };
    if declared_length(req).is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let settings = req
        .app_data::<web::Data<AppState>>()
        .map(|s| s.limits.settings.clone())
        .unwrap_or_default();
    let (idle, total) = (settings.body_idle_timeout, settings.body_timeout);
    let deadline = (!total.is_zero()).then(|| Instant::now() + total);
    // The pieces as they came (no copy, no growth by doubling), joined once at the end: a
    // stalled body holds what arrived and little more.
    let mut pieces: Vec<web::Bytes> = Vec::new();
    let mut len = 0usize;
    loop {
        // The sooner of the idle timeout and what is left of the body timeout.
        let wait = match (idle.is_zero(), deadline) {
            (true, None) => None,
            (false, None) => Some(idle),
            (idle_off, Some(d)) => {
                let left = d.saturating_duration_since(Instant::now());
                Some(if idle_off { left } else { left.min(idle) })
            }
        };
        let next = match wait {
            None => payload.next().await,
            Some(w) => match actix_web::rt::time::timeout(w, payload.next()).await {
                Ok(next) => next,
                Err(_) => {
                    metrics::counter!("gpuledger_body_timeouts_total").increment(1);
                    return Err(ApiError::RequestTimeout(format!(
                        "the body did not arrive in time ({} s between pieces, {} s in all); \
                             {} bytes came",
                        idle.as_secs(),
                        total.as_secs(),
                        len
                    )));
                }
            },
        };
        let Some(chunk) = next else { break };
        let chunk = chunk.map_err(|e| {
            // The cause (a broken connection, bad chunked framing) is logged, not echoed.
            tracing::debug!(error = %e, "reading a request body failed");
            ApiError::bad_request("bad_body", "the body could not be read to its end")
        })?;
        len += chunk.len();
        if len > limit {
            return Err(too_large());
        }
        pieces.push(chunk);
    }
    let mut body = Vec::with_capacity(len);
    for p in pieces {
        body.extend_from_slice(&p);
    }
    Ok(body)
}

/// Keeps each request's body stream alive until its answer has been sent (middleware), so that
/// actix closes the connection after answering a request whose body was not read to its end
/// (a 413, a 503 `busy`, a 429, a `body_timeout`, a 401 before the body), rather than read and
/// discard the rest: for a chunked body actix would otherwise keep the connection for as long
/// as the client trickles or stalls, with no timeout. A body read to its end changes nothing.
pub async fn close_unread_bodies<B: MessageBody + 'static>(
    mut req: ServiceRequest,
    next: middleware::Next<B>,
) -> Result<ServiceResponse<HeldBody>, actix_web::Error> {
    use actix_web::HttpMessage;
    let payload = match req.take_payload() {
        actix_web::dev::Payload::None => None,
        p => {
            let held = Rc::new(RefCell::new(p));
            req.set_payload(actix_web::dev::Payload::Stream {
                payload: Box::pin(SharedPayload(held.clone())),
            });
            Some(held)
        }
    };
    let res = next.call(req).await?;
    Ok(res.map_body(|_, body| HeldBody {
        body: actix_web::body::BoxBody::new(body),
        _payload: payload,
    }))
}

/// A request body shared between the handler and [`close_unread_bodies`].
struct SharedPayload(Rc<RefCell<actix_web::dev::Payload>>);

impl futures_util::Stream for SharedPayload {
    type Item = Result<web::Bytes, actix_web::error::PayloadError>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        std::pin::Pin::new(&mut *self.0.borrow_mut()).poll_next(cx)
    }
}

/// An answer's body that keeps its request's body stream until it is sent.
pub struct HeldBody {
    body: actix_web::body::BoxBody,
    _payload: Option<Rc<RefCell<actix_web::dev::Payload>>>,
}

impl MessageBody for HeldBody {
    type Error = Box<dyn std::error::Error>;

    fn size(&self) -> actix_web::body::BodySize {
        self.body.size()
    }

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<web::Bytes, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_next(cx)
    }
}

/// The request's `Content-Length`, if it has a valid one (actix refuses an invalid one
/// before any handler runs); a length too large for `u64` counts as `u64::MAX`.
pub fn declared_length(req: &HttpRequest) -> Option<u64> {
    let v = req.headers().get(actix_web::http::header::CONTENT_LENGTH)?;
    let s = v.to_str().ok()?.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.parse::<u64>().unwrap_or(u64::MAX))
}

/// Reads a small JSON body into `T`, with precise 4xx errors.
pub async fn json_body<T: DeserializeOwned>(
    req: &HttpRequest,
    payload: web::Payload,
) -> Result<T, ApiError> {
    require_json(req)?;
    let body = read_body(req, payload, MAX_ADMIN_BODY_BYTES).await?;
    json_from(&body)
}

/// Like [`json_body`], but an empty body (with or without a content type) means `T::default()`:
/// for requests whose fields are all optional.
pub async fn optional_json_body<T: DeserializeOwned + Default>(
    req: &HttpRequest,
    payload: web::Payload,
) -> Result<T, ApiError> {
    let body = read_body(req, payload, MAX_ADMIN_BODY_BYTES).await?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    require_json(req)?;
    json_from(&body)
}

/// Every admin body is read here: strictly (a repeated member name at any depth is refused,
/// docs/PROTOCOL.md §2.6), then into `T`; any failure is one `malformed_json` problem. Every
/// body is a JSON object: serde would otherwise read a struct from an array of its fields in
/// order (`["t1", "name"]` as a tenant, `[null, null]` as an empty patch).
fn json_from<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::bad_request(
            "malformed_json",
            "the body is not valid: it must be a JSON object",
        ));
    }
    gpuledger_core::json::from_slice_strict(body)
        .map_err(|e| ApiError::bad_request("malformed_json", format!("the body is not valid: {e}")))
}

/// Answers a list read with `list` for the tenant the caller may see: a tenant token its own
/// (naming another is refused by [`auth::Caller::tenant_scope`]), others the named tenant's or
/// everyone's.
pub async fn scoped_list<T: serde::Serialize + Send + 'static>(
    state: web::Data<AppState>,
    caller: auth::Caller,
    tenant: Option<String>,
    list: fn(
        &mut gpuledger_store::DbConn,
        Option<&str>,
    ) -> Result<Vec<T>, gpuledger_store::StoreError>,
) -> Result<actix_web::HttpResponse, ApiError> {
    let tenant = caller.tenant_scope(tenant)?;
    let rows = state.read(move |c| list(c, tenant.as_deref())).await?;
    Ok(actix_web::HttpResponse::Ok().json(rows))
}

/// Parses a non-negative integer parameter.
pub fn parse_u64(name: &str, s: &str) -> Result<u64, ApiError> {
    let max = gpuledger_core::limits::MAX_SEQ;
    s.parse::<u64>().ok().filter(|v| *v <= max).ok_or_else(|| {
        ApiError::invalid_parameter(name, format!("{s:?} is not an integer between 0 and {max}"))
    })
}

/// Longest period one usage query or invoice preview may cover, in seconds (400 days).
pub const MAX_PERIOD_SECONDS: i64 = 400 * 86_400;

/// Parses a `[from, to)` period from query parameters: strict timestamps, `to` after `from`,
/// at most [`MAX_PERIOD_SECONDS`].
pub fn period(from: &str, to: &str) -> Result<(Timestamp, Timestamp), ApiError> {
    let from =
        Timestamp::parse(from).map_err(|e| ApiError::invalid_parameter("from", e.to_string()))?;
    let to = Timestamp::parse(to).map_err(|e| ApiError::invalid_parameter("to", e.to_string()))?;
    if to <= from {
        return Err(ApiError::invalid_parameter("to", "must be after from"));
    }
    if from.seconds_until(to) > MAX_PERIOD_SECONDS {
        return Err(ApiError::invalid_parameter(
            "to",
            format!("the period may be at most {MAX_PERIOD_SECONDS} s"),
        ));
    }
    Ok((from, to))
}

/// The problem for a query string that does not deserialise, naming the parameter in
/// `errors` where serde says which (`missing field `from``, `unknown field `x``), else `query`.
fn query_problem(e: &actix_web::error::QueryPayloadError) -> ApiError {
    let text = match e {
        actix_web::error::QueryPayloadError::Deserialize(inner) => inner.to_string(),
        other => other.to_string(),
    };
    let named = |prefix: &str| {
        text.strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix('`'))
            .and_then(|rest| rest.split_once('`'))
            .map(|(name, _)| name.to_owned())
    };
    match (named("missing field "), named("unknown field ")) {
        (Some(name), _) => ApiError::invalid_parameter(&name, "is required"),
        (None, Some(name)) => {
            ApiError::invalid_parameter(&name, "is not a parameter of this operation")
        }
        (None, None) => ApiError::invalid_parameter("query", text),
    }
}

/// Registers every route, each with its OpenAPI operation (the handler's `#[utoipa::path]`
/// and its actix method and path attribute): the one list of routes the server serves and the
/// OpenAPI document describes. Order matters where paths overlap (`/invoices/preview` before
/// `/invoices/{number}`).
pub fn routes(cfg: &mut ServiceConfig) {
    served_routes(cfg, true);
}

/// [`routes`] as one listener serves them: without `/metrics` (which then answers 404 like
/// any unknown path) when the metrics have a listener of their own (`metrics_listen`).
pub fn served_routes(cfg: &mut ServiceConfig, with_metrics: bool) {
    // A query string that does not deserialise (missing or mistyped member) is a problem too.
    cfg.app_data(web::QueryConfig::default().error_handler(|e, _| query_problem(&e).into()));
    cfg.service(ops::healthz).service(ops::readyz);
    if with_metrics {
        cfg.service(ops::metrics);
    }
    // C2SP tlog-tiles at the root; entry bundles before hash tiles, whose pattern also matches.
    cfg.service(tiles::checkpoint)
        .service(tiles::entry_bundle)
        .service(tiles::hash_tile)
        .route(
            "/tile/{rest:.*}",
            web::route()
                .guard(actix_web::guard::Any(actix_web::guard::Get()).or(actix_web::guard::Head()))
                .to(tiles::malformed),
        );
    // The web console (`/`, `/console/...`): plain routes, not API operations.
    console::register(cfg);
    cfg.service(ops::openapi)
        .service(ops::docs)
        .service(ops::docs_file)
        .service(scope("/v1").configure(v1_routes))
        .default_service(web::to(error::no_route));
}

/// The operations under `/v1`, in the order they are matched.
fn v1_routes(cfg: &mut ServiceConfig) {
    cfg.service(records::post_records)
        .service(log::get_log)
        .service(log::get_checkpoint)
        .service(log::get_checkpoints)
        .service(log::get_entries)
        .service(log::get_entry)
        .service(log::get_inclusion)
        .service(log::get_consistency)
        .service(witnesses::get_witnesses)
        .service(usage::get_usage)
        .service(pricing::post_rate_card)
        .service(pricing::post_region_params)
        .service(pricing::post_lease)
        .service(fleet::post_node)
        .service(fleet::get_nodes)
        .service(fleet::post_node_update)
        .service(contracts::post_contract)
        .service(contracts::get_contracts)
        .service(contracts::post_contract_amendment)
        .service(prepayments::post_prepayment)
        .service(prepayments::get_prepayments)
        .service(prepayments::get_alerts)
        .service(prepayments::put_alerts)
        .service(pricing::post_volume_tiers)
        .service(pricing::post_tenant_plan)
        .service(pricing::get_prices)
        .service(pricing::get_preview)
        .service(invoices::issue)
        .service(invoices::list)
        .service(invoices::get)
        // Before `download`, whose `{format}` would take `account`.
        .service(invoices::account)
        .service(invoices::download)
        .service(invoices::payment)
        .service(exclusions::create)
        .service(credit_notes::create)
        .service(credit_notes::get)
        .service(credit_notes::download)
        .service(invoices::balance)
        .service(exports::focus_export)
        .service(certificates::issue)
        .service(certificates::list)
        .service(certificates::get)
        .service(certificates::bundle)
        .service(admin::create_tenant)
        .service(admin::list_tenants)
        .service(admin::update_tenant)
        .service(admin::create_signer)
        .service(admin::list_signers)
        .service(admin::add_key)
        .service(admin::revoke_key)
        .service(admin::create_token)
        .service(admin::list_tokens)
        .service(admin::revoke_token)
        .service(webhooks::list_event_types)
        .service(webhooks::public_key)
        .service(webhooks::create_endpoint)
        .service(webhooks::list_endpoints)
        .service(webhooks::get_endpoint)
        .service(webhooks::update_endpoint)
        .service(webhooks::delete_endpoint)
        .service(webhooks::list_deliveries)
        .service(webhooks::redeliver);
}

/// The OpenAPI document of the routes [`routes`] registers, in the frame of [`ApiDoc`].
pub fn openapi() -> utoipa::openapi::OpenApi {
    let (_, mut doc) = actix_web::App::new()
        .into_utoipa_app()
        .openapi(ApiDoc::openapi())
        .configure(routes)
        .split_for_parts();
    doc.info.version = env!("CARGO_PKG_VERSION").to_owned();
    document_head_operations(&mut doc);
    add_rate_limit_responses(&mut doc);
    idempotency::document(&mut doc);
    error::document_problems(&mut doc);
    doc
}

/// The routes that answer `HEAD` as well as `GET` (`#[route(.., method = "GET", method =
/// "HEAD")]`: the checkpoints and tiles) get from utoipa a copy of the `GET` operation; it is
/// made the `HEAD` operation here: an operation id of its own (OpenAPI wants them unique) and
/// a 200 without content.
fn document_head_operations(doc: &mut utoipa::openapi::OpenApi) {
    for item in doc.paths.paths.values_mut() {
        let Some(head) = item.head.as_mut() else {
            continue;
        };
        head.operation_id = head.operation_id.as_ref().map(|id| format!("{id}_head"));
        head.summary = Some("The `GET` answer's status and headers, without its body.".to_owned());
        if let Some(utoipa::openapi::RefOr::T(ok)) = head.responses.responses.get_mut("200") {
            ok.description = format!("{} (headers only)", ok.description);
            ok.content.clear();
        }
    }
}

/// Every operation under `/v1` and the tiles may answer 429: the per-client rate applies to all
/// of them ([`limits::per_client`]), so its response is documented here once rather than on each
/// handler (those with rates of their own describe them in their own 429).
fn add_rate_limit_responses(doc: &mut utoipa::openapi::OpenApi) {
    let response = error::problem_response(
        "The client's rate is exceeded (`client_rate_per_second`); see `Retry-After`",
    );
    for (_, item) in doc
        .paths
        .paths
        .iter_mut()
        .filter(|(p, _)| limits::rate_limited(p))
    {
        let operations = [
            &mut item.get,
            &mut item.head,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ];
        for op in operations.into_iter().flatten() {
            op.responses
                .responses
                .entry("429".to_owned())
                .or_insert_with(|| response.clone().into());
        }
    }
}

/// Request metrics by method, route pattern and status, with latency histograms. Every label
/// comes from a fixed set, so no request can add series: the method is one of
/// [`METRIC_METHODS`] or `other`, the route the matched pattern or `unmatched`, the status a
/// number actix chose.
pub async fn record_metrics<B: MessageBody>(
    req: ServiceRequest,
    next: middleware::Next<B>,
) -> Result<ServiceResponse<B>, actix_web::Error> {
    let started = std::time::Instant::now();
    let method = metric_method(req.method());
    let res = next.call(req).await?;
    let route = res
        .request()
        .match_pattern()
        .unwrap_or_else(|| "unmatched".into());
    let status = res.status().as_u16().to_string();
    metrics::counter!("gpuledger_http_requests_total", "method" => method, "route" => route.clone(), "status" => status)
        .increment(1);
    metrics::histogram!("gpuledger_http_request_seconds", "method" => method, "route" => route)
        .record(started.elapsed().as_secs_f64());
    Ok(res)
}

/// The methods that are their own `method` label; any other is `other`.
pub const METRIC_METHODS: [&str; 7] = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"];

/// The `method` label of a request.
pub fn metric_method(m: &actix_web::http::Method) -> &'static str {
    METRIC_METHODS
        .into_iter()
        .find(|k| *k == m.as_str())
        .unwrap_or("other")
}
