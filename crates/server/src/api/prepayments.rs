//! Prepaid balances: `POST /v1/prepayments` records a tenant's top-up or grant (a `prepayment`
//! entry, PROTOCOL §5.20); `GET /v1/prepayments` shows its lots, what each invoice drew from
//! them and its position per currency, as of any log size. The rule is `core::prepaid`
//! (docs/RATING.md, "Prepaid balances"); nothing here is stored apart from the log.

use super::auth::Caller;
use super::error::ApiError;
use super::AppState;
use actix_web::{get, post, put, web, HttpRequest, HttpResponse};
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
    /// Per tenant (in id order) and currency.
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
            Ok(Ok((size, as_of, book)))
        })
        .await?;
    let (size, as_of, book) = view.map_err(|head| {
        ApiError::invalid_parameter("size", format!("is above the log's size {head}"))
    })?;
    // The tenants with lots, in id order (a set: an auditor's view may hold many lots).
    let mut tenants = std::collections::BTreeSet::new();
    let prepayments: Vec<LotView> = book
        .all_lots()
        .filter(|l| tenant.as_ref().is_none_or(|t| *t == l.prepayment.tenant))
        .map(|l| {
            let p = &l.prepayment;
            tenants.insert(p.tenant.clone());
            LotView {
                index: l.index,
                logged_at: l.logged_at,
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

/// A tenant's alerts (docs/WEBHOOKS.md), each raised once per crossing. Account data, not the
/// log.
#[derive(Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Alerts {
    /// Per currency, the prepaid balance below which an invoice's draws raise `balance.low`
    /// (`{"CNY": "1000.00"}`); `{}` removes every threshold.
    #[schema(value_type = std::collections::BTreeMap<String, gpuledger_core::decimal::DecimalString>)]
    pub low_balance: std::collections::BTreeMap<String, String>,
    /// Per currency, 1 to 8 strictly increasing amounts of a calendar month's spend (the
    /// preview's total so far) that raise `spend.threshold` (`{"CNY": ["10000.00"]}`); absent
    /// or `{}`: none.
    #[serde(default)]
    #[schema(value_type = std::collections::BTreeMap<String, Vec<gpuledger_core::decimal::DecimalString>>)]
    pub spend: std::collections::BTreeMap<String, Vec<String>>,
    /// At most 8 strictly increasing percentages (above 0, at most 1000) of a contract's
    /// commitment whose draw-down over its billing period raises `commitment.reached`; absent
    /// or `[]`: 100.
    #[serde(default)]
    #[schema(value_type = Vec<gpuledger_core::decimal::DecimalString>)]
    pub commitment_percent: Vec<String>,
}

/// The alerts of a tenant: its own, or (admins and auditors) any tenant's; another tenant's
/// is 404.
#[utoipa::path(tag = "invoices", params(("id" = inline(gpuledger_core::ids::IdString), Path)),
    responses((status = 200, body = Alerts), (status = 404, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[get("/tenants/{id}/alerts")]
pub async fn get_alerts(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let id = caller
        .tenant_scope(Some(path.into_inner()))?
        .unwrap_or_default();
    let (thresholds, usage) = state
        .read(move |c| {
            Ok((
                gpuledger_store::access::low_balance(c, &id)?,
                gpuledger_store::access::usage_alerts(c, &id)?,
            ))
        })
        .await?;
    Ok(HttpResponse::Ok().json(alerts_of(&thresholds, &usage)))
}

/// Replaces a tenant's alerts (admin): `{"low_balance": {"CNY": "1000.00"}, "spend": {"CNY":
/// ["10000.00", "50000.00"]}, "commitment_percent": ["80", "100"]}`, at most 16 currencies.
/// When an invoice's prepaid draws take the tenant's available balance in a currency from at or
/// above its `low_balance` threshold to under it, a `balance.low` event is enqueued in the
/// invoice's transaction (a top-up lifting it back arms the next crossing; an expiry is no
/// crossing: the lot's `expires_at` is known when it is recorded). Every checkpoint interval,
/// `serve` enqueues `spend.threshold` for each `spend` threshold the calendar month's preview
/// total has reached, and `commitment.reached` for each percentage of a contract's commitment
/// its current billing period's draw-down has reached: each once per month or billing period.
#[utoipa::path(tag = "invoices", params(("id" = inline(gpuledger_core::ids::IdString), Path)), request_body = Alerts,
    responses(super::error::RoleForbidden, (status = 200, body = Alerts), (status = 400, description = "`malformed_json` or `invalid_parameter` (`low_balance`: a code that is not ISO 4217, an amount that is not one, negative or with more digits than the currency's minor unit, more than 16 currencies; `spend`: the same, or 0 or not 1 to 8 strictly increasing amounts; `commitment_percent`: more than 8, not strictly increasing, not above 0 and at most 1000 with at most 4 decimals)", body = super::error::Problem, content_type = "application/problem+json"), (status = 404, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[put("/tenants/{id}/alerts")]
pub async fn put_alerts(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    req: HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    caller.require_admin()?;
    let id = path.into_inner();
    gpuledger_core::ids::check_id(&id).map_err(|e| ApiError::invalid_parameter("id", e))?;
    let asked: Alerts = super::json_body(&req, body).await?;
    let bad = |m: String| ApiError::invalid_parameter("low_balance", m);
    let mut thresholds = std::collections::BTreeMap::new();
    for (c, a) in asked.low_balance {
        let d = plain_decimal(&a).ok_or_else(|| bad(format!("{c}: {a:?} is not an amount")))?;
        thresholds.insert(c, d);
    }
    gpuledger_store::access::check_low_balance(&thresholds).map_err(bad)?;
    let mut usage = gpuledger_store::access::UsageAlerts::default();
    for (c, amounts) in asked.spend {
        let parsed = amounts
            .iter()
            .map(|a| plain_decimal(a).ok_or_else(|| format!("{c}: {a:?} is not an amount")))
            .collect::<Result<Vec<Decimal>, String>>()
            .map_err(|m| ApiError::invalid_parameter("spend", m))?;
        usage.spend.insert(c, parsed);
    }
    usage.commitment_percent = asked
        .commitment_percent
        .iter()
        .map(|p| plain_decimal(p).ok_or_else(|| format!("{p:?} is not a percentage")))
        .collect::<Result<Vec<Decimal>, String>>()
        .map_err(|m| ApiError::invalid_parameter("commitment_percent", m))?;
    usage
        .check()
        .map_err(|(member, m)| ApiError::invalid_parameter(member, m))?;
    let ledger = state.ledger.clone();
    let (kept, kept_usage) = (thresholds.clone(), usage.clone());
    web::block(move || {
        ledger.with_account_writer(|c| {
            gpuledger_store::access::set_low_balance(c, &id, &kept)?;
            gpuledger_store::access::set_usage_alerts(c, &id, &kept_usage)
        })
    })
    .await??;
    Ok(HttpResponse::Ok().json(alerts_of(&thresholds, &usage)))
}

/// A plain decimal as the API writes amounts and percentages (digits and at most one point, at
/// most 24 characters); `None` otherwise.
fn plain_decimal(a: &str) -> Option<Decimal> {
    let plain =
        !a.is_empty() && a.len() <= 24 && a.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    a.parse().ok().filter(|_| plain)
}

/// The thresholds as the API spells them (amounts padded to the currency's minor unit,
/// percentages canonical).
fn alerts_of(
    thresholds: &std::collections::BTreeMap<String, Decimal>,
    usage: &gpuledger_store::access::UsageAlerts,
) -> Alerts {
    Alerts {
        low_balance: thresholds
            .iter()
            .map(|(c, a)| (c.clone(), pad_amount(*a, c).to_string()))
            .collect(),
        spend: usage
            .spend
            .iter()
            .map(|(c, v)| {
                (
                    c.clone(),
                    v.iter().map(|a| pad_amount(*a, c).to_string()).collect(),
                )
            })
            .collect(),
        commitment_percent: usage
            .commitment_percent
            .iter()
            .map(|p| p.normalize().to_string())
            .collect(),
    }
}
