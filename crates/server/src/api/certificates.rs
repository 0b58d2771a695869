//! Compute-usage certificates: issue (a tenant for itself, an admin for any tenant), list, get,
//! and the evidence bundle, streamed. Tenants see only their own; others' ids answer 404.

use super::auth::Caller;
use super::error::ApiError;
use super::{json_body, AppState};
use actix_web::{get, post};
use actix_web::{web, HttpRequest, HttpResponse};
use gpuledger_core::bundle::Format as BundleFormat;
use gpuledger_core::certificate::{Certificate, Scope};
use gpuledger_core::invoice::Period;
use gpuledger_store::access::ApiRole;
use gpuledger_store::certificates::{self as store_certs, CertificateRequest, CertificateSummary};
use gpuledger_store::StoreError;
use serde::Deserialize;

/// Body of `POST /v1/certificates`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CertificateOrder {
    /// The tenant; a tenant token may leave it out (it can only certify itself).
    #[schema(value_type = Option<gpuledger_core::ids::IdString>)]
    pub tenant: Option<String>,
    /// Start of the period (inclusive), `YYYY-MM-DDTHH:MM:SSZ`.
    #[schema(value_type = gpuledger_core::time::Timestamp)]
    pub from: String,
    /// End of the period (exclusive): after `from`, at most 400 days after it.
    #[schema(value_type = gpuledger_core::time::Timestamp)]
    pub to: String,
    /// Optional narrowing to a lease, nodes or a region.
    #[serde(default)]
    pub scope: Option<Scope>,
}

/// Issues a compute-usage certificate over the tenant's records starting in `[from, to)`
/// (docs/PROTOCOL.md §13), signed by the log key and recorded in a `certificate_issued` entry.
#[utoipa::path(operation_id = "issue_certificate", tag = "certificates", request_body = CertificateOrder,
    responses(super::error::RoleForbidden, (status = 201, description = "The signed certificate", body = Certificate),
              (status = 400, body = super::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
              (status = 422, description = "`period_not_ended`: the period has not closed (ended by the log policy max_future_skew_seconds, 300 s by default); a certificate states final totals, so it is issued only for a closed period", body = super::error::Problem, content_type = "application/problem+json"),
              (status = 429, description = "The tenant asked for more certificates than `tenant_certificates_per_minute` allows; see `Retry-After`", body = super::error::Problem, content_type = "application/problem+json"),
              (status = 503, description = "`busy`: the log changed under the computation three times; `witnesses_behind`: with `witness_quorum`, no checkpoint reached the quorum within `witness_wait_seconds` (nothing written); or `database_unavailable`; see `Retry-After`", body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[post("/certificates")]
pub async fn issue(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    if caller.0.role == ApiRole::Auditor {
        return Err(ApiError::Forbidden(
            "certificates are issued by a tenant for itself or by an admin".into(),
        ));
    }
    if let Some(tenant) = caller.confined_to() {
        // Per tenant, before anything is read or computed; admins are not limited.
        state.limits.certificate(tenant)?;
    }
    let order: CertificateOrder = json_body(&req, payload).await?;
    let (from, to) = super::period(&order.from, &order.to)?;
    let tenant = caller
        .tenant_scope(order.tenant)?
        .ok_or_else(|| ApiError::invalid_parameter("tenant", "an admin must name the tenant"))?;
    gpuledger_core::ids::check_id(&tenant).map_err(|m| ApiError::invalid_parameter("tenant", m))?;
    let scope = order
        .scope
        .unwrap_or_default()
        .normalise()
        .map_err(|m| ApiError::invalid_parameter("scope", m))?;
    let t = tenant.clone();
    state
        .read(move |c| gpuledger_store::access::require_tenant(c, &t))
        .await?;
    let request = CertificateRequest {
        tenant,
        period: Period { from, to },
        scope,
    };
    let cert = web::block(move || state.ledger.issuance().certificate(request)).await??;
    Ok(HttpResponse::Created()
        .content_type("application/json")
        .body(cert.to_canonical_json()))
}

/// Lists certificates in issue order, oldest first (tenants: their own), a page at a time: the
/// body is a JSON array of at most `limit` certificates; when more follow, `Link` (rel="next")
/// and `X-Next-Cursor` say how to get them.
#[utoipa::path(operation_id = "list_certificates", tag = "certificates", params(super::paging::PeriodListQuery),
    responses((status = 200, body = Vec<CertificateSummary>, headers(
                  ("Link" = String, description = "`<…>; rel=\"next\"` (RFC 8288): the next page, when there is one"),
                  ("X-Next-Cursor" = String, description = "The `cursor` of the next page, when there is one")))),
    security(("bearer" = [])))]
#[get("/certificates")]
pub async fn list(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    q: web::Query<super::paging::PeriodListQuery>,
) -> Result<HttpResponse, ApiError> {
    q.into_inner()
        .answer(
            &state,
            &caller,
            &req,
            "certificates",
            (store_certs::list_page, |d| d.entry_index),
        )
        .await
}

async fn load(
    state: &web::Data<AppState>,
    caller: &Caller,
    id: String,
) -> Result<(Certificate, String), ApiError> {
    let i = id.clone();
    let row = state.read(move |c| store_certs::get(c, &i)).await?;
    let json = caller.visible(row, || format!("certificate {id}"))?;
    let cert = Certificate::from_json(json.as_bytes())
        .map_err(|e| ApiError::Internal(format!("certificate {id}: {e}")))?;
    Ok((cert, json))
}

/// One certificate, its signed JSON exactly as issued (its SHA-256 is in the log).
#[utoipa::path(operation_id = "get_certificate", tag = "certificates", params(("id" = String, Path, pattern = "^CERT-[0-9]{6,20}$", description = "`CERT-` and 6 to 20 digits")),
    responses((status = 200, body = Certificate), (status = 404, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[get("/certificates/{id}")]
pub async fn get(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let (_, json) = load(&state, &caller, path.into_inner()).await?;
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(json))
}

/// Query of the bundle downloads. (Not `format`: the invoice download's path already has a
/// `{format}`, which is `bundle` there.)
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct BundleQuery {
    /// The bundle format: `v3` (the default: leaves as JSON, one multi-proof) or `v2` (an
    /// inclusion proof per entry, for verifiers that read only version 2). docs/PROTOCOL.md §14.
    #[param(pattern = "^v[23]$")]
    pub bundle_format: Option<String>,
}

impl BundleQuery {
    /// The format asked for.
    pub(super) fn format(&self) -> Result<BundleFormat, ApiError> {
        match self.bundle_format.as_deref() {
            None | Some("v3") => Ok(BundleFormat::V3),
            Some("v2") => Ok(BundleFormat::V2),
            Some(_) => Err(ApiError::invalid_parameter(
                "bundle_format",
                "must be v2 or v3",
            )),
        }
    }
}

/// The certificate's evidence bundle (docs/PROTOCOL.md §14), streamed as JSON Lines: version 3
/// by default, version 2 with `?bundle_format=v2`; gzip-compressed when the request accepts it
/// (`Accept-Encoding: gzip`).
#[utoipa::path(tag = "certificates", params(("id" = String, Path, pattern = "^CERT-[0-9]{6,20}$", description = "`CERT-` and 6 to 20 digits"), BundleQuery),
    responses((status = 200, description = "JSON Lines", body = String, content_type = "application/x-ndjson"),
              (status = 400, body = super::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[get(
    "/certificates/{id}/bundle",
    wrap = "actix_web::middleware::Compress::default()"
)]
pub async fn bundle(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    q: web::Query<BundleQuery>,
) -> Result<HttpResponse, ApiError> {
    let format = q.format()?;
    let id = path.into_inner();
    let (cert, _) = load(&state, &caller, id.clone()).await?;
    let ledger = state.ledger.clone();
    Ok(stream_lines(&format!("{id}.bundle.jsonl"), move |sink| {
        ledger
            .reads()
            .run_once(|c| store_certs::write_certificate_bundle_as(c, &cert, format, sink))
    }))
}

/// Streams the lines a blocking writer produces; the writer stops when the client goes away.
pub(super) fn stream_lines(
    filename: &str,
    write: impl FnOnce(&mut gpuledger_store::bundle::Sink) -> Result<(), StoreError> + Send + 'static,
) -> HttpResponse {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<web::Bytes, ApiError>>(64);
    std::thread::spawn(move || {
        let mut sink = |line: Vec<u8>| {
            tx.blocking_send(Ok(web::Bytes::from(line)))
                .map_err(|_| StoreError::Refused("the client went away".into()))
        };
        if let Err(e) = write(&mut sink) {
            tracing::error!(error = %e, "writing a bundle failed");
            // Ends the body early: a bundle without its end line is refused as truncated.
            let _ = tx.blocking_send(Err(ApiError::Internal(e.to_string())));
        }
    });
    let body = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    HttpResponse::Ok()
        .content_type("application/x-ndjson")
        .insert_header((
            "Content-Disposition",
            format!("attachment; filename=\"{filename}\""),
        ))
        .streaming(body)
}
