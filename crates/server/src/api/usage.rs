//! `GET /v1/usage`: exact GPU-seconds and kWh from the log, grouped and windowed.

use super::auth::Caller;
use super::error::ApiError;
use super::AppState;
use actix_web::get;
use actix_web::{web, HttpResponse};
use gpuledger_core::usage::{Aggregator, GroupBy, UsageRow, Window};
use gpuledger_store::{access, usage};
use serde::{Deserialize, Serialize};

/// Query of `GET /v1/usage`.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UsageQuery {
    /// Tenant id. Tenant tokens may omit it (their own) and may not name another.
    #[param(value_type = Option<gpuledger_core::ids::IdString>, inline)]
    pub tenant: Option<String>,
    /// Start of the period (inclusive), `YYYY-MM-DDTHH:MM:SSZ`.
    #[param(value_type = gpuledger_core::time::Timestamp, inline)]
    pub from: String,
    /// End of the period (exclusive): after `from`, at most 400 days after it.
    #[param(value_type = gpuledger_core::time::Timestamp, inline)]
    pub to: String,
    /// Comma-separated: region, node, gpu_model, lease (a repeat counts once).
    #[param(
        pattern = "^(?:(?:region|node|gpu_model|lease)(?:,(?:region|node|gpu_model|lease))*)?$"
    )]
    pub group_by: Option<String>,
    /// hour, day or month.
    #[param(value_type = Option<gpuledger_core::usage::Window>)]
    pub window: Option<String>,
}

/// The answer: one row per group.
#[derive(Serialize, utoipa::ToSchema)]
pub struct UsageResponse {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    pub from: String,
    pub to: String,
    pub group_by: Vec<GroupBy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<Window>,
    /// Records belong to the window and period containing their interval's start.
    pub rows: Vec<UsageRow>,
}

/// Usage summed exactly from the log. Tenants see only their own; another tenant's id is 404.
#[utoipa::path(tag = "usage", params(UsageQuery),
    responses((status = 200, body = UsageResponse), (status = 400, body = super::error::Problem, content_type = "application/problem+json"), (status = 404, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[get("/usage")]
pub async fn get_usage(
    state: web::Data<AppState>,
    caller: Caller,
    q: web::Query<UsageQuery>,
) -> Result<HttpResponse, ApiError> {
    let q = q.into_inner();
    let tenant = caller.tenant_scope(q.tenant)?;
    let (from, to) = super::period(&q.from, &q.to)?;
    let mut group_by = Vec::new();
    for g in q
        .group_by
        .as_deref()
        .unwrap_or("")
        .split(',')
        .filter(|s| !s.is_empty())
    {
        let g = GroupBy::parse(g.trim()).ok_or_else(|| {
            ApiError::invalid_parameter(
                "group_by",
                format!("{g:?} is not one of region, node, gpu_model, lease"),
            )
        })?;
        if !group_by.contains(&g) {
            group_by.push(g);
        }
    }
    let window = q
        .window
        .as_deref()
        .map(|w| {
            Window::parse(w)
                .ok_or_else(|| ApiError::invalid_parameter("window", "must be hour, day or month"))
        })
        .transpose()?;
    let t = tenant.clone();
    let g = group_by.clone();
    let rows: Vec<UsageRow> = state
        .read(move |c| {
            if let Some(t) = &t {
                access::require_tenant(c, t)?;
            }
            let mut agg = Aggregator::new(from, to, g.clone(), window);
            usage::aggregate(c, t.as_deref(), from, to, &mut agg)?;
            Ok(agg.finish())
        })
        .await?;
    Ok(HttpResponse::Ok().json(UsageResponse {
        tenant,
        from: from.to_string(),
        to: to.to_string(),
        group_by,
        window,
        rows,
    }))
}
