//! Prepaid balances: `POST /v1/prepayments` records a tenant's top-up or grant (a `prepayment`
//! entry, PROTOCOL §5.20); `GET /v1/prepayments` shows its lots, what each invoice drew from
//! them and its position per currency, as of any log size. The rule is `core::prepaid`
//! (docs/RATING.md, "Prepaid balances"); nothing here is stored apart from the log.

use super::auth::Caller;
use super::error::ApiError;
use super::AppState;
use actix_web::{get, post, web, HttpRequest, HttpResponse};
use gpuledger_core::prepaid::Position;
use gpuledger_core::rating::pad_amount;
use gpuledger_core::record::{Kind, Prepayment};
use gpuledger_core::time::Timestamp;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

/// Records a tenant's prepaid lot (admin): `{tenant, reference, source: grant|purchase,
/// currency, amount, expires_at?}`. The reference is the top-up's in the provider's books:
/// sent again, it is answered 409 and nothing is recorded twice. Every invoice issued to the
/// tenant afterwards draws on its lots (docs/RATING.md, "Prepaid balances").
#[utoipa::path(tag = "invoices", request_body = Prepayment,
    responses(super::error::RoleForbidden, (status = 201, body = super::pricing::Appended), (status = 400, description = "`malformed_json`, `invalid_parameter`, or `refused`: the body is not a valid prepayment or an admission rule refused it (`errors[0]` names the field and reason: `unknown_tenant`, `invalid_field` (an `expires_at` not after now, an amount with more digits than the currency's minor unit), `quantity_out_of_range`, `negative_quantity`)", body = super::error::Problem, content_type = "application/problem+json"), (status = 409, description = "`conflict`: a prepayment of the tenant already carries this reference (the message names its entry), or the first request with this `Idempotency-Key` is still running", body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[post("/prepayments")]
pub async fn post_prepayment(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    super::pricing::append(state, caller, req, payload, Kind::Prepayment).await
}

/// Whose lots to show, and as of which log size.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PrepaymentQuery {
    /// The tenant (admins and auditors; a tenant's token shows its own). Absent: every
    /// tenant's.
    #[param(value_type = Option<gpuledger_core::ids::IdString>, inline)]
    pub tenant: Option<String>,
    /// The log size to answer as of (lots and invoices below it; expiry judged at the time of
    /// entry `size − 1`), at most the log's size. Absent: the head, expiry judged now.
    pub size: Option<u64>,
}

/// One invoice's draw on a lot.
#[derive(Serialize, utoipa::ToSchema)]
pub struct LotDraw {
    pub invoice: String,
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub amount: Decimal,
}

/// A lot: its entry, what was drawn from it and what is left.
#[derive(Serialize, utoipa::ToSchema)]
pub struct LotView {
    /// The index of its `prepayment` entry.
    pub index: u64,
    /// When the ledger logged it.
    #[schema(value_type = String, example = "2027-01-03T10:00:00Z")]
    pub logged_at: Timestamp,
    #[serde(flatten)]
    pub prepayment: Prepayment,
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub drawn: Decimal,
    /// amount − drawn (forfeit when `expired`).
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub remaining: Decimal,
    /// Whether its `expires_at` is at or before `as_of`.
    pub expired: bool,
    /// The invoices that drew on it, in log order.
    pub draws: Vec<LotDraw>,
}

/// A tenant's position in one currency.
#[derive(Serialize, utoipa::ToSchema)]
pub struct TenantPosition {
    pub tenant: String,
    #[serde(flatten)]
    pub position: Position,
}

/// Prepaid lots and positions as of a log size.
#[derive(Serialize, utoipa::ToSchema)]
pub struct PrepaidView {
    /// The log size the view is of.
    pub log_size: u64,
    /// The instant expiry is judged at.
    #[schema(value_type = String, example = "2027-02-01T00:00:00Z")]
    pub as_of: Timestamp,
    /// Per tenant and currency.
    pub positions: Vec<TenantPosition>,
    /// Every lot, in log order.
    pub prepayments: Vec<LotView>,
}

/// A tenant's prepaid lots, what each invoice drew from them, and its position per currency
/// (`available` = purchased + granted − drawn − expired), as of the head or `?size=`.
#[utoipa::path(tag = "invoices", params(PrepaymentQuery),
    responses((status = 200, body = PrepaidView), (status = 400, description = "`invalid_parameter`: `tenant` is not an id, or `size` is above the log's size", body = super::error::Problem, content_type = "application/problem+json"), (status = 404, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[get("/prepayments")]
pub async fn get_prepayments(
    state: web::Data<AppState>,
    caller: Caller,
    q: web::Query<PrepaymentQuery>,
) -> Result<HttpResponse, ApiError> {
    let q = q.into_inner();
    let tenant = caller.tenant_scope(q.tenant)?;
    let now = state.ledger.now();
    let t = tenant.clone();
    let asked = q.size;
    let view = state
        .read(move |c| {
            if let Some(t) = &t {
                gpuledger_store::access::require_tenant(c, t)?;
            }
            let head = gpuledger_store::read::head(c)?.0;
            let size = asked.unwrap_or(head);
            if size > head {
                return Ok(Err(head));
            }
            let as_of = match asked {
                None => now,
                // Before any entry: nothing has expired.
                Some(0) => Timestamp::from_unix(0).unwrap_or(now),
                Some(s) => gpuledger_store::read::received_at(c, s - 1)?,
            };
            let book = gpuledger_store::prepaid::book(c, t.as_deref(), size)?;
            let logged = gpuledger_store::prepaid::logged_at(c, t.as_deref(), size)?;
            Ok(Ok((size, as_of, book, logged)))
        })
        .await?;
    let (size, as_of, book, logged) = view.map_err(|head| {
        ApiError::invalid_parameter("size", format!("is above the log's size {head}"))
    })?;
    let mut tenants: Vec<String> = Vec::new();
    let prepayments: Vec<LotView> = book
        .all_lots()
        .filter(|l| tenant.as_ref().is_none_or(|t| *t == l.prepayment.tenant))
        .map(|l| {
            let p = &l.prepayment;
            if !tenants.contains(&p.tenant) {
                tenants.push(p.tenant.clone());
            }
            LotView {
                index: l.index,
                logged_at: logged.get(&l.index).copied().unwrap_or(as_of),
                drawn: pad_amount(l.drawn(), &p.currency),
                remaining: pad_amount(l.remaining(), &p.currency),
                expired: l.expired_at(as_of),
                draws: l
                    .draws
                    .iter()
                    .map(|(invoice, amount)| LotDraw {
                        invoice: invoice.clone(),
                        amount: *amount,
                    })
                    .collect(),
                prepayment: p.clone(),
            }
        })
        .collect();
    let positions = tenants
        .iter()
        .flat_map(|t| {
            book.positions(t, as_of)
                .into_iter()
                .map(|position| TenantPosition {
                    tenant: t.clone(),
                    position,
                })
        })
        .collect();
    Ok(HttpResponse::Ok().json(PrepaidView {
        log_size: size,
        as_of,
        positions,
        prepayments,
    }))
}
