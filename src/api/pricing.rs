//! Prices and previews: rate cards, region parameters, leases, volume tiers and tenant plans
//! are appended to the log as ledger-signed entries; an invoice preview rates a tenant's period
//! from the log.

use super::auth::Caller;
use super::error::ApiError;
use super::{json_body, AppState};
use crate::core::rating::Unpriced;
use crate::core::record::{Body, Kind};
use crate::core::rejection::Rejection;
use actix_web::{get, post};

use crate::store::{pricing, Ledger, StoreError};
use actix_web::{web, HttpRequest, HttpResponse};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};

/// A refused entry body as a 400 naming the field and the reason code.
pub(super) fn rejection(r: Rejection) -> ApiError {
    let field = r.field.clone().unwrap_or_else(|| "body".into());
    ApiError::BadRequest {
        slug: "invalid_field",
        detail: r.message.clone(),
        errors: Some(vec![super::error::ProblemItem {
            field,
            reason: Some(r.reason.code().to_owned()),
            message: r.message,
        }]),
    }
}

/// The index and kind of an entry appended by an admin request.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Appended {
    pub index: u64,
    pub kind: String,
}

/// Appends one admin-written entry of `kind` from the request body through `op` (the ledger's
/// append for prices and leases, its settlement for payments and credit notes): admin only,
/// the body strict and valid for its kind, 201 with the entry's index.
pub(super) async fn append_entry(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    payload: web::Payload,
    kind: Kind,
    op: fn(&Ledger, Body) -> Result<u64, StoreError>,
) -> Result<HttpResponse, ApiError> {
    caller.require_admin()?;
    let v: Value = json_body(&req, payload).await?;
    let body = Body::from_value(kind, &v).map_err(rejection)?;
    let index = web::block(move || op(&state.ledger, body)).await??;
    Ok(HttpResponse::Created().json(Appended {
        index,
        kind: kind.as_str().into(),
    }))
}

async fn append(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    payload: web::Payload,
    kind: Kind,
) -> Result<HttpResponse, ApiError> {
    append_entry(
        state,
        caller,
        req,
        payload,
        kind,
        Ledger::append_ledger_entry,
    )
    .await
}

/// Appends a rate card (admin): `{region, gpu_model, lease_class: on_demand|reserved, currency,
/// price_per_gpu_hour, effective_from}`; a change must take effect after the series' latest.
#[utoipa::path(tag = "pricing", request_body = crate::core::record::RateCard,
    responses(super::error::RoleForbidden, (status = 201, body = Appended), (status = 400, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[post("/rate-cards")]
pub async fn post_rate_card(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    append(state, caller, req, payload, Kind::RateCard).await
}

/// Appends region parameters (admin): `{region, currency, electricity_price_per_kwh, pue,
/// carbon_g_per_kwh, effective_from}`.
#[utoipa::path(tag = "pricing", request_body = crate::core::record::RegionParameters,
    responses(super::error::RoleForbidden, (status = 201, body = Appended), (status = 400, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[post("/region-params")]
pub async fn post_region_params(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    append(state, caller, req, payload, Kind::RegionParams).await
}

/// Declares a lease and its billing class (admin): `{lease, tenant, class: on_demand|reserved|spot}`.
#[utoipa::path(tag = "pricing", request_body = crate::core::record::LeaseRegistered,
    responses(super::error::RoleForbidden, (status = 201, body = Appended), (status = 400, body = super::error::Problem, content_type = "application/problem+json"), (status = 409, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[post("/leases")]
pub async fn post_lease(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    append(state, caller, req, payload, Kind::LeaseRegistered).await
}

/// Appends a plan's graduated volume tiers for one series (admin): `{plan, region, gpu_model,
/// lease_class: on_demand|reserved, currency, tiers: [{up_to_gpu_hours, price_per_gpu_hour},
/// ..., {price_per_gpu_hour}], effective_from}`. Bounds are cumulative GPU-hours within an
/// invoice period and increase strictly; the last tier has no bound. For tenants on the plan
/// the tiers replace the series' rate card; a change must take effect after the latest tiers
/// of the same plan and series.
#[utoipa::path(tag = "pricing", request_body = crate::core::record::VolumeTiers,
    responses(super::error::RoleForbidden, (status = 201, body = Appended), (status = 400, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[post("/volume-tiers")]
pub async fn post_volume_tiers(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    append(state, caller, req, payload, Kind::VolumeTiers).await
}

/// Puts a tenant on a plan (admin): `{tenant, plan, effective_from}`. A plan without tiers for
/// a series leaves that series on the rate card, so a plan may be assigned before (or without)
/// its tiers; a change must take effect after the tenant's latest plan.
#[utoipa::path(tag = "pricing", request_body = crate::core::record::TenantPlan,
    responses(super::error::RoleForbidden, (status = 201, body = Appended), (status = 400, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[post("/tenant-plans")]
pub async fn post_tenant_plan(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    append(state, caller, req, payload, Kind::TenantPlan).await
}

/// One pricing entry: its log index, its kind and that kind's body. Documented as one
/// alternative per kind of [`pricing::PRICING_KINDS`], each naming its body's schema.
#[derive(Serialize)]
pub struct PricingEntry {
    pub index: u64,
    pub kind: String,
    pub body: Value,
}

/// Named schemas, as utoipa collects them for the document's components.
type Components = Vec<(String, RefOr<Schema>)>;

/// Each pricing kind with the schema name of its body, and that schema with those it names.
fn pricing_bodies() -> Vec<(Kind, String, Components)> {
    use crate::core::record as r;
    fn named<T: ToSchema>() -> (String, Components) {
        let mut schemas = vec![(T::name().into_owned(), T::schema())];
        T::schemas(&mut schemas);
        (T::name().into_owned(), schemas)
    }
    pricing::PRICING_KINDS
        .iter()
        .map(|&kind| {
            let (name, schemas) = match kind {
                Kind::RateCard => named::<r::RateCard>(),
                Kind::RegionParams => named::<r::RegionParameters>(),
                Kind::LeaseRegistered => named::<r::LeaseRegistered>(),
                Kind::SpotPrice => named::<r::SpotPrice>(),
                Kind::VolumeTiers => named::<r::VolumeTiers>(),
                Kind::TenantPlan => named::<r::TenantPlan>(),
                other => unreachable!("{} is not a pricing kind", other.as_str()),
            };
            (kind, name, schemas)
        })
        .collect()
}

impl PartialSchema for PricingEntry {
    fn schema() -> RefOr<Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Type};
        use utoipa::openapi::Ref;
        let mut one_of = OneOfBuilder::new().description(Some(
            "One pricing entry: its log index, its kind and that kind's body (one alternative \
             per kind).",
        ));
        for (kind, name, _) in pricing_bodies() {
            one_of = one_of.item(
                ObjectBuilder::new()
                    .property("index", u64::schema())
                    .required("index")
                    .property(
                        "kind",
                        ObjectBuilder::new()
                            .schema_type(Type::String)
                            .enum_values(Some([kind.as_str()])),
                    )
                    .required("kind")
                    .property("body", Ref::from_schema_name(name))
                    .required("body"),
            );
        }
        one_of.into()
    }
}

impl ToSchema for PricingEntry {
    fn schemas(out: &mut Vec<(String, RefOr<Schema>)>) {
        for (_, _, schemas) in pricing_bodies() {
            out.extend(schemas);
        }
    }
}

/// Every rate card, region parameter set, spot price, lease, volume tiers and tenant plan in
/// the log, oldest first. Tenants see prices and tiers, and their own leases and plans only.
#[utoipa::path(tag = "pricing", responses((status = 200, body = Vec<PricingEntry>)), security(("bearer" = [])))]
#[get("/prices")]
pub async fn get_prices(
    state: web::Data<AppState>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    let entries = web::block(move || {
        state.ledger.with_reader(|c| {
            let size = crate::store::read::head(c)?.0;
            pricing::pricing_entries(c, size)
        })
    })
    .await??;
    let list: Vec<PricingEntry> = entries
        .into_iter()
        .filter(|(_, b)| {
            !matches!(b, Body::LeaseRegistered(_) | Body::TenantPlan(_))
                || caller.may_see(b.tenant())
        })
        .map(|(index, b)| PricingEntry {
            index,
            kind: b.kind().as_str().into(),
            body: b.to_value(),
        })
        .collect();
    Ok(HttpResponse::Ok().json(list))
}

/// Query of the preview.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PreviewQuery {
    /// Tenant id (tenant tokens: their own, and may omit it).
    pub tenant: Option<String>,
    /// Start of the period (inclusive).
    pub from: String,
    /// End of the period (exclusive).
    pub to: String,
}

/// The lines of one currency: the same line objects as an issued invoice's
/// (`InvoiceLine`), taxed by the configured rates, and the invoice's three totals.
#[derive(Serialize, utoipa::ToSchema)]
pub struct CurrencyLines {
    pub currency: String,
    pub lines: Vec<crate::core::invoice::InvoiceLine>,
    /// Σ net.
    #[schema(value_type = crate::core::decimal::DecimalString)]
    pub net_total: String,
    /// Σ tax.
    #[schema(value_type = crate::core::decimal::DecimalString)]
    pub tax_total: String,
    /// Σ gross: what the invoice's total would be.
    #[schema(value_type = crate::core::decimal::DecimalString)]
    pub total: String,
}

/// A draft invoice computed live from the log.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Preview {
    pub tenant: String,
    pub from: String,
    pub to: String,
    /// The log size the preview was computed at.
    pub log_size: u64,
    pub currencies: Vec<CurrencyLines>,
    /// Usage no price was in force for; an invoice cannot be issued while this is not empty.
    pub unpriced: Vec<Unpriced>,
}

/// A draft invoice for a tenant and period, rated from the log (records belong to the period
/// containing their interval's start). Tenants may preview only their own.
#[utoipa::path(tag = "pricing", params(PreviewQuery),
    responses((status = 200, body = Preview), (status = 400, body = super::error::Problem, content_type = "application/problem+json"), (status = 404, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[get("/invoices/preview")]
pub async fn get_preview(
    state: web::Data<AppState>,
    caller: Caller,
    q: web::Query<PreviewQuery>,
) -> Result<HttpResponse, ApiError> {
    let q = q.into_inner();
    let tenant = caller
        .tenant_scope(q.tenant)?
        .ok_or_else(|| ApiError::invalid_parameter("tenant", "is required"))?;
    let (from, to) = super::period(&q.from, &q.to)?;
    let t = tenant.clone();
    let settings = state.ledger.invoicing();
    let (size, rater) = web::block(move || {
        state.ledger.with_reader(|c| {
            if !crate::store::access::tenant_exists(c, &t)?
                && !crate::store::usage::tenant_has_entries(c, &t)?
            {
                return Err(crate::store::StoreError::NotFound(format!("tenant {t}")));
            }
            let size = crate::store::read::head(c)?.0;
            Ok((size, pricing::rate_period(c, &t, from, to, size)?))
        })
    })
    .await??;
    let (by_currency, unpriced) = rater.finish();
    let currencies = by_currency
        .into_iter()
        .filter_map(|(currency, lines)| {
            let rated = lines
                .into_iter()
                .map(|line| crate::core::invoice::RatedLine {
                    line,
                    adjustment_for: None,
                })
                .collect();
            let (lines, t) =
                crate::store::invoices::priced_lines(rated, &currency, &settings.taxes);
            // A currency whose lines all have zero quantity would make no invoice.
            (!lines.is_empty()).then(|| CurrencyLines {
                net_total: t.net.to_string(),
                tax_total: t.tax.to_string(),
                total: t.gross.to_string(),
                currency,
                lines,
            })
        })
        .collect();
    Ok(HttpResponse::Ok().json(Preview {
        tenant,
        from: from.to_string(),
        to: to.to_string(),
        log_size: size,
        currencies,
        unpriced,
    }))
}
