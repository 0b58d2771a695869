//! Disputes settled without billing: an admin excludes one logged record of a tenant from
//! rating (`record_excluded`, docs/PROTOCOL.md §5.17). Invoices and previews then list it as
//! excluded and rate it nowhere.

use super::auth::Caller;
use super::error::ApiError;
use super::pricing::{append, Appended};
use super::AppState;
use actix_web::{post, web, HttpRequest, HttpResponse};
use gpuledger_core::record::Kind;

/// Excludes a logged record from rating (admin): `{tenant, entry, reason}`, `entry` the log
/// index of a `gpu_usage` or `energy` record of `tenant` that no issued invoice rated yet. The
/// record stays in the log; every invoice computed after this entry leaves it out and lists it
/// under `excluded` with the reason, and `gpuledger verify --invoice` rechecks that. A record
/// already invoiced is credited instead (`POST /v1/credit-notes`).
#[utoipa::path(tag = "invoices", request_body = gpuledger_core::record::RecordExcluded,
    responses(super::error::RoleForbidden, (status = 201, body = Appended),
              (status = 400, description = "`malformed_json`, `invalid_parameter`, or `refused`: an admission rule refused the entry (PROTOCOL §6.7, disputes); `errors[0]` names its reason code (`unknown_record`: not a usage or energy record of the tenant; `already_excluded`; `record_invoiced`: an issued invoice rated it; `unknown_tenant`; `invalid_field`) and field; nothing written", body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[post("/exclusions")]
pub async fn create(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    append(state, caller, req, payload, Kind::RecordExcluded).await
}
