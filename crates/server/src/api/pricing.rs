//! Prices and previews: rate cards, region parameters, leases, volume tiers and tenant plans
//! are appended to the log as ledger-signed entries; an invoice preview rates a tenant's period
//! from the log.

use super::auth::Caller;
use super::error::ApiError;
use super::{json_body, AppState};
use actix_web::{get, post};
use gpuledger_core::rating::Unpriced;
use gpuledger_core::record::{Body, Kind};
use gpuledger_core::rejection::Rejection;

use actix_web::{web, HttpRequest, HttpResponse};
use gpuledger_store::{pricing, Ledger, StoreError};
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

/// [`append_entry`] through the ledger's append of its own entries (prices, leases, exclusions).
pub(super) async fn append(
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
#[utoipa::path(tag = "pricing", request_body = gpuledger_core::record::RateCard,
    responses(super::error::RoleForbidden, (status = 201, body = Appended), (status = 400, description = "`malformed_json`, `invalid_parameter`, or `refused`: an admission rule refused the entry (PROTOCOL §6.7); `errors[0]` names its reason code (`price_not_forward`, `unknown_tenant`, …) and field", body = super::error::Problem, content_type = "application/problem+json")),
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
#[utoipa::path(tag = "pricing", request_body = gpuledger_core::record::RegionParameters,
    responses(super::error::RoleForbidden, (status = 201, body = Appended), (status = 400, description = "`malformed_json`, `invalid_parameter`, or `refused`: an admission rule refused the entry (PROTOCOL §6.7); `errors[0]` names its reason code (`price_not_forward`, `unknown_tenant`, …) and field", body = super::error::Problem, content_type = "application/problem+json")),
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

/// Declares a lease (admin): `{lease, tenant, class: on_demand|reserved|spot, from, to?, nodes:
/// [{node, gpus: [index…], share?} | {node, gpu_model, count}]}`: which GPUs of which nodes the
/// tenant rents for the term [from, to), billed as `class`. A node's leases never lease more of
/// it than it has (`lease_overbooked`), and usage is billed only under a lease that covers it
/// (PROTOCOL §5.8, §6.7 fleet).
#[utoipa::path(tag = "pricing", request_body = gpuledger_core::record::LeaseRegistered,
    responses(super::error::RoleForbidden, (status = 201, body = Appended), (status = 400, description = "`malformed_json`, `invalid_parameter`, or `refused`: an admission rule refused the entry (PROTOCOL §6.7); `errors[0]` names its reason code (`price_not_forward`, `unknown_tenant`, …) and field", body = super::error::Problem, content_type = "application/problem+json"), (status = 409, body = super::error::Problem, content_type = "application/problem+json")),
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
#[utoipa::path(tag = "pricing", request_body = gpuledger_core::record::VolumeTiers,
    responses(super::error::RoleForbidden, (status = 201, body = Appended), (status = 400, description = "`malformed_json`, `invalid_parameter`, or `refused`: an admission rule refused the entry (PROTOCOL §6.7); `errors[0]` names its reason code (`price_not_forward`, `unknown_tenant`, …) and field", body = super::error::Problem, content_type = "application/problem+json")),
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
#[utoipa::path(tag = "pricing", request_body = gpuledger_core::record::TenantPlan,
    responses(super::error::RoleForbidden, (status = 201, body = Appended), (status = 400, description = "`malformed_json`, `invalid_parameter`, or `refused`: an admission rule refused the entry (PROTOCOL §6.7); `errors[0]` names its reason code (`price_not_forward`, `unknown_tenant`, …) and field", body = super::error::Problem, content_type = "application/problem+json")),
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
    use gpuledger_core::record as r;
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

/// Query of `GET /v1/prices`: the series filters, a date filter or an instant, and paging.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PricesQuery {
    /// Only entries of these kinds, comma-separated: `rate_card`, `region_params`,
    /// `lease_registered`, `spot_price`, `volume_tiers`, `tenant_plan`.
    pub kind: Option<String>,
    /// Only entries of this region (rate cards, spot prices, region parameters, volume tiers).
    pub region: Option<String>,
    /// Only entries of this GPU model (rate cards, spot prices, volume tiers).
    pub gpu_model: Option<String>,
    /// Only entries of this lease class, `on_demand`, `reserved` or `spot`: rate cards' and
    /// volume tiers' `lease_class`, leases' `class`; `spot` takes every spot price.
    pub lease_class: Option<String>,
    /// Only entries in force at this instant (`YYYY-MM-DDTHH:MM:SSZ`): of each series (a rate
    /// card's region, GPU model and lease class; a spot price's region and GPU model; a
    /// region's parameters; a plan's tiers for a series; a tenant's plan) the one with the
    /// latest `effective_from` at or before it, and every lease. Not with `from` or `to`.
    pub as_of: Option<String>,
    /// Only entries whose `effective_from` is at or after this instant (leases, which have
    /// none, are left out).
    pub from: Option<String>,
    /// Only entries whose `effective_from` is before this instant.
    pub to: Option<String>,
    /// Page size, from 1 to 1000 (`paging::MAX_LIMIT`); 100 if left out.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub limit: Option<String>,
    /// Where to continue: the previous page's `X-Next-Cursor`, as is.
    pub cursor: Option<String>,
}

impl PricesQuery {
    /// The filter the query names, and its instant.
    fn filter(
        &self,
    ) -> Result<
        (
            pricing::PriceFilter,
            Option<gpuledger_core::time::Timestamp>,
        ),
        ApiError,
    > {
        use gpuledger_core::record::LeaseClass;
        let mut kinds = Vec::new();
        if let Some(list) = &self.kind {
            for name in list.split(',') {
                let kind = Kind::parse(name)
                    .filter(|k| pricing::PRICING_KINDS.contains(k))
                    .ok_or_else(|| {
                        ApiError::invalid_parameter(
                            "kind",
                            format!("{name:?} is not a pricing kind"),
                        )
                    })?;
                if !kinds.contains(&kind) {
                    kinds.push(kind);
                }
            }
        }
        let lease_class = match self.lease_class.as_deref() {
            None => None,
            Some(s) => Some(
                [LeaseClass::OnDemand, LeaseClass::Reserved, LeaseClass::Spot]
                    .into_iter()
                    .find(|c| c.as_str() == s)
                    .ok_or_else(|| {
                        ApiError::invalid_parameter(
                            "lease_class",
                            format!("{s:?} is not on_demand, reserved or spot"),
                        )
                    })?,
            ),
        };
        let (from, to) = super::paging::date_range(self.from.as_deref(), self.to.as_deref())?;
        let as_of = super::paging::timestamp("as_of", self.as_of.as_deref())?;
        if as_of.is_some() && (from.is_some() || to.is_some()) {
            return Err(ApiError::invalid_parameter(
                "as_of",
                "is an instant: leave out from and to with it",
            ));
        }
        let filter = pricing::PriceFilter {
            kinds,
            region: self.region.clone(),
            gpu_model: self.gpu_model.clone(),
            lease_class,
            from,
            to,
        };
        Ok((filter, as_of))
    }
}

/// Rate cards, region parameter sets, spot prices, leases, volume tiers and tenant plans of
/// the log, oldest first, a page at a time; tenants see prices and tiers, and their own leases
/// and plans only. The body is a JSON array of at most `limit` entries; when more follow,
/// `Link` (rel="next") and `X-Next-Cursor` say how to get them. Filters narrow it to series
/// (`kind`, `region`, `gpu_model`, `lease_class`), to effective instants (`from`, `to`), or to
/// the entries in force at one instant (`as_of`: one entry per series).
#[utoipa::path(tag = "pricing", params(PricesQuery),
    responses((status = 200, body = Vec<PricingEntry>, headers(
                  ("Link" = String, description = "`<…>; rel=\"next\"` (RFC 8288): the next page, when there is one"),
                  ("X-Next-Cursor" = String, description = "The `cursor` of the next page, when there is one")))),
    security(("bearer" = [])))]
#[get("/prices")]
pub async fn get_prices(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    q: web::Query<PricesQuery>,
) -> Result<HttpResponse, ApiError> {
    let q = q.into_inner();
    let (filter, as_of) = q.filter()?;
    let tenant = caller.confined_to().map(str::to_owned);
    let page = super::paging::Paging::parse(
        "prices",
        tenant.as_deref(),
        q.limit.as_deref(),
        q.cursor.as_deref(),
    )?;
    let (after, fetch) = (page.after_index()?, page.fetch());
    let entries = state
        .read(move |c| {
            let size = gpuledger_store::read::head(c)?.0;
            let t = tenant.as_deref();
            match as_of {
                Some(at) => pricing::in_force(c, &filter, t, at, after, size, fetch),
                None => pricing::pricing_page(c, &filter, t, after, size, fetch),
            }
        })
        .await?;
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
    Ok(page.respond(&req, list, |e| e.index.to_string()))
}

/// Query of the preview.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PreviewQuery {
    /// Tenant id: required of admins and auditors; tenant tokens may omit it (their own).
    #[param(value_type = Option<gpuledger_core::ids::IdString>, inline)]
    pub tenant: Option<String>,
    /// Start of the period (inclusive).
    #[param(value_type = gpuledger_core::time::Timestamp, inline)]
    pub from: String,
    /// End of the period (exclusive): after `from`, at most 400 days after it.
    #[param(value_type = gpuledger_core::time::Timestamp, inline)]
    pub to: String,
}

/// The lines of one currency: the same line objects as an issued invoice's
/// (`InvoiceLine`), taxed by the configured rates, and the invoice's three totals.
#[derive(Serialize, utoipa::ToSchema)]
pub struct CurrencyLines {
    pub currency: String,
    pub lines: Vec<gpuledger_core::invoice::InvoiceLine>,
    /// Σ net.
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub net_total: String,
    /// Σ tax.
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub tax_total: String,
    /// Σ gross: what the invoice's total would be.
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub total: String,
    /// The commitments of the tenant's contracts in this currency over the billing periods
    /// the period wholly holds (docs/RATING.md, "Contracts"); empty when none.
    pub commitments: Vec<gpuledger_core::invoice::Commitment>,
    /// The availability of the leases of the tenant's contracts with an SLA over the billing
    /// periods the period wholly holds (docs/RATING.md, "SLA credits"); absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub availability: Vec<gpuledger_core::sla::Availability>,
    /// The included GPU-hours of the tenant's contracts in this currency over each billing
    /// period the period overlaps, used so far (docs/RATING.md, "Included GPU-hours and
    /// overage"); absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allowances: Vec<gpuledger_core::allowance::Allowance>,
    /// What the tenant's prepaid lots would pay of `total` if the invoice were issued now, at
    /// this log size (docs/RATING.md, "Prepaid balances"); absent when nothing.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub prepaid: Vec<gpuledger_core::prepaid::PrepaidDraw>,
    /// `total` − Σ `prepaid`; absent when nothing would be drawn.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<gpuledger_core::decimal::DecimalString>)]
    pub amount_due: Option<String>,
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
    /// The period's records excluded from rating (disputes, `POST /v1/exclusions`), by
    /// increasing entry: an invoice lists them as excluded and rates them nowhere.
    pub excluded: Vec<gpuledger_core::invoice::ExcludedRecord>,
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
    // Were the invoice issued now: the lots that have not expired by now pay it.
    let now = state.ledger.now();
    let period = gpuledger_core::invoice::Period { from, to };
    let taxes = settings.taxes.clone();
    let (size, preview, lots) = state
        .read(move |c| {
            gpuledger_store::access::require_tenant(c, &t)?;
            let size = gpuledger_store::read::head(c)?.0;
            let preview = gpuledger_store::invoices::preview_period(c, &t, period, size, &taxes)?;
            let lots = gpuledger_store::prepaid::book(c, Some(&t), size)?;
            Ok((size, preview, lots))
        })
        .await?;
    let gpuledger_store::invoices::PeriodPreview {
        currencies: priced,
        unpriced,
        excluded,
        ..
    } = preview;
    let mut currencies = Vec::new();
    for (currency, p) in priced {
        let prepaid = lots.draws(&tenant, &currency, p.totals.gross, size, now);
        let amount_due = gpuledger_core::prepaid::amount_due(p.totals.gross, &prepaid, &currency)
            .map(|d| d.to_string());
        currencies.push(CurrencyLines {
            prepaid,
            amount_due,
            net_total: p.totals.net.to_string(),
            tax_total: p.totals.tax.to_string(),
            total: p.totals.gross.to_string(),
            currency,
            lines: p.lines,
            commitments: p.commitments,
            availability: p.availability,
            allowances: p.allowances,
        });
    }
    Ok(HttpResponse::Ok().json(Preview {
        tenant,
        from: from.to_string(),
        to: to.to_string(),
        log_size: size,
        currencies,
        unpriced,
        excluded,
    }))
}
