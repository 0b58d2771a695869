//! Invoices: issue (admin), list, get, download as JSON, CSV or PDF; payments and credit notes
//! (admin); balances. Tenants see only their own; others' invoice numbers answer 404.

use super::auth::Caller;
use super::error::ApiError;
use super::{json_body, AppState};
use actix_web::{get, post};
use gpuledger_core::invoice::{self, Invoice, InvoiceDoc, Period};
use gpuledger_core::record::Kind;

use actix_web::{web, HttpRequest, HttpResponse};
use gpuledger_store::invoices::{self as store_invoices, Balance, InvoiceAccount, InvoiceSummary};
use gpuledger_store::Ledger;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Body of `POST /v1/invoices`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IssueRequest {
    #[schema(value_type = gpuledger_core::ids::IdString)]
    pub tenant: String,
    /// Start of the period (inclusive), `YYYY-MM-DDTHH:MM:SSZ`.
    #[schema(value_type = gpuledger_core::time::Timestamp)]
    pub from: String,
    /// End of the period (exclusive): after `from`, at most 400 days after it.
    #[schema(value_type = gpuledger_core::time::Timestamp)]
    pub to: String,
}

/// Issues a tenant's invoices for a period, one per currency (admin). Refused while any usage
/// is unpriced, for a period overlapping an invoiced one, for a period that has not closed, and
/// for one that splits a billing period of a contract with a commitment. A tenant without a billing address is invoiced all the same, with a `Warning: 299` header
/// saying so (and a note on the PDF).
#[utoipa::path(operation_id = "issue_invoice", tag = "invoices", request_body = IssueRequest,
    responses(super::error::RoleForbidden, (status = 201, description = "The issued invoices", body = Vec<Invoice>),
              (status = 400, body = super::error::Problem, content_type = "application/problem+json"),
              (status = 404, description = "The tenant is not registered", body = super::error::Problem, content_type = "application/problem+json"),
              (status = 409, body = super::error::Problem, content_type = "application/problem+json"),
              (status = 422, description = "`period_not_ended`: the period has not closed (ended by the log policy max_future_skew_seconds, 300 s by default); the problem names when it closes. `contract_period_split`: the period holds part, not all, of a billing period of the tenant's contract with a commitment (docs/RATING.md, Contracts); the problem names it", body = super::error::Problem, content_type = "application/problem+json"),
              (status = 503, description = "`busy`: the log changed under the computation three times; `witnesses_behind`: with `witness_quorum`, no checkpoint reached the quorum within `witness_wait_seconds` (nothing written); or `database_unavailable`; see `Retry-After`", body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[post("/invoices")]
pub async fn issue(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    caller.require_admin()?;
    let r: IssueRequest = json_body(&req, payload).await?;
    let (from, to) = super::period(&r.from, &r.to)?;
    gpuledger_core::ids::check_id(&r.tenant)
        .map_err(|m| ApiError::invalid_parameter("tenant", m))?;
    let tenant = r.tenant.clone();
    let t = tenant.clone();
    state
        .read(move |c| gpuledger_store::access::require_tenant(c, &t))
        .await?;
    let issued = web::block(move || {
        state
            .ledger
            .issuance()
            .invoices(&tenant, Period { from, to })
    })
    .await??;
    let mut response = HttpResponse::Created();
    // Issued all the same (the account may get its address later), but said: an invoice
    // without the buyer's address may not serve as a tax invoice. The PDF says it too.
    if issued
        .iter()
        .any(|i| i.bill_to.address.iter().all(|l| l.trim().is_empty()))
    {
        response.insert_header((
            "Warning",
            format!(
                "299 gpuledger \"tenant {} has no billing address: the invoice names none                  (PATCH /v1/tenants/{} to add one before issuing)\"",
                r.tenant, r.tenant
            ),
        ));
    }
    Ok(response.json(issued))
}

/// Query of the list.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Tenant id: required of admins and auditors; tenant tokens may omit it (their own).
    #[param(value_type = Option<gpuledger_core::ids::IdString>, inline)]
    pub tenant: Option<String>,
}

/// Lists invoices in issue order, oldest first (tenants: their own), a page at a time: the
/// body is a JSON array of at most `limit` invoices; when more follow, `Link` (rel="next") and
/// `X-Next-Cursor` say how to get them.
#[utoipa::path(operation_id = "list_invoices", tag = "invoices", params(super::paging::PeriodListQuery),
    responses((status = 200, body = Vec<InvoiceSummary>, headers(
                  ("Link" = String, description = "`<…>; rel=\"next\"` (RFC 8288): the next page, when there is one"),
                  ("X-Next-Cursor" = String, description = "The `cursor` of the next page, when there is one")))),
    security(("bearer" = [])))]
#[get("/invoices")]
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
            "invoices",
            (store_invoices::list_page, |d| d.entry_index),
        )
        .await
}

async fn load(
    state: web::Data<AppState>,
    caller: &Caller,
    number: String,
) -> Result<(InvoiceDoc, String), ApiError> {
    let n = number.clone();
    let row = state.read(move |c| store_invoices::get(c, &n)).await?;
    let json = caller.visible(row, || format!("invoice {number}"))?;
    let inv = invoice::from_json(&json)
        .map_err(|e| ApiError::Internal(format!("invoice {number}: {e}")))?;
    Ok((inv, json))
}

/// One invoice as JSON (its SHA-256 is in the log's `invoice_issued` entry): version 2
/// (`"format": "gpuledger-invoice/v2"`) for invoices issued now; invoices issued before are
/// served as they were issued (version 1, no `format` member).
#[utoipa::path(operation_id = "get_invoice", tag = "invoices", params(("number" = String, Path, pattern = "^INV-[0-9]{6,20}$", description = "`INV-` and 6 or more digits")),
    responses((status = 200, body = Invoice), (status = 404, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[get("/invoices/{number}")]
pub async fn get(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let (_, json) = load(state, &caller, path.into_inner()).await?;
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(json))
}

/// Query of the downloads.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DownloadQuery {
    /// The bundle format: `v3` (the default: leaves as JSON, one multi-proof) or `v2` (an
    /// inclusion proof per entry, for verifiers that read only version 2). docs/PROTOCOL.md §14.
    pub bundle_format: Option<String>,
    /// The PDF's language: `en` or `zh-CN` (also `zh`, `zh-Hans`). Default: the invoice's
    /// own, Chinese when the bill-to name or address is written in Chinese characters, else
    /// English (docs/RATING.md, "Downloads").
    pub lang: Option<String>,
}

/// Downloads an invoice as `json`, `csv` or `pdf`, or its evidence `bundle` (version 3 by
/// default, version 2 with `?bundle_format=v2`). Gzip-compressed when the request accepts it
/// (`Accept-Encoding: gzip`). Every download of an issued invoice is the same bytes (for the
/// PDF: per language, while the `[issuer]` settings it shows stay the same); payments and the
/// balance are `GET /v1/invoices/{number}/account`.
#[utoipa::path(tag = "invoices",
    params(("number" = String, Path), ("format" = String, Path, description = "json, csv, pdf, or bundle: the evidence bundle (JSON Lines, docs/PROTOCOL.md §14) to recompute it offline"), DownloadQuery),
    responses((status = 200, description = "The document"), (status = 400, body = super::error::Problem, content_type = "application/problem+json"), (status = 404, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[get(
    "/invoices/{number}/{format}",
    wrap = "actix_web::middleware::Compress::default()"
)]
pub async fn download(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(String, String)>,
    q: web::Query<DownloadQuery>,
) -> Result<HttpResponse, ApiError> {
    let (number, format) = path.into_inner();
    let q = q.into_inner();
    let bundle_format = super::certificates::BundleQuery {
        bundle_format: q.bundle_format,
    }
    .format()?;
    let lang = q
        .lang
        .map(|l| {
            crate::invoice_render::Lang::parse(&l)
                .ok_or_else(|| ApiError::invalid_parameter("lang", "must be en or zh-CN"))
        })
        .transpose()?;
    if !matches!(format.as_str(), "json" | "csv" | "pdf" | "bundle") {
        return Err(ApiError::invalid_parameter(
            "format",
            "must be json, csv, pdf or bundle",
        ));
    }
    let ledger = state.ledger.clone();
    let (inv, _) = load(state.clone(), &caller, number.clone()).await?;
    if format == "bundle" {
        return Ok(super::certificates::stream_lines(
            &format!("{number}.bundle.jsonl"),
            move |sink| {
                ledger.reads().run_once(|c| {
                    store_invoices::write_invoice_bundle_as(c, &inv, bundle_format, sink)
                })
            },
        ));
    }
    let (ctype, body) = match format.as_str() {
        "json" => ("application/json", crate::invoice_render::to_json(&inv)),
        "csv" => (
            "text/csv; charset=utf-8",
            crate::invoice_render::to_csv(&inv),
        ),
        _ => ("application/pdf", render_pdf(ledger, inv, lang).await?),
    };
    Ok(HttpResponse::Ok()
        .content_type(ctype)
        .insert_header((
            "Content-Disposition",
            format!("attachment; filename=\"{number}.{format}\""),
        ))
        .body(body))
}

/// The PDF of an issued invoice in `lang` (else its own), with what the `[issuer]` settings
/// add; 413 `too_many_lines` for an invoice over the PDF's line limit.
async fn render_pdf(
    ledger: std::sync::Arc<Ledger>,
    inv: InvoiceDoc,
    lang: Option<crate::invoice_render::Lang>,
) -> Result<Vec<u8>, ApiError> {
    web::block(move || {
        // Nothing that changes after the issue (the clock, payments) goes in: the
        // same invoice is the same bytes on every download.
        let settings = ledger.invoicing();
        let pdf = ledger.invoice_pdf();
        let notes = crate::invoice_render::PdfNotes {
            lang,
            buyer_tax_id: pdf.bill_to_tax_ids.get(inv.tenant()).cloned(),
            payment_instructions: pdf.payment_instructions.clone(),
            public_url: settings.public_url.clone(),
            verifier_key: ledger.info().verifier_key.clone(),
        };
        crate::invoice_render::to_pdf(&inv, &notes)
    })
    .await?
    .map_err(|e| match e {
        crate::invoice_render::RenderError::TooManyLines { .. } => ApiError::TooLarge {
            slug: "too_many_lines",
            detail: e.to_string(),
        },
        e => ApiError::Internal(format!("pdf: {e}")),
    })
}

/// The payments and balance of one invoice: total, paid, credited, balance due, status
/// (`open`, `paid`, `overpaid`) and the payment and credit-note entries. Tenants: their own
/// invoices (others' answer 404).
#[utoipa::path(operation_id = "get_invoice_account", tag = "invoices", params(("number" = String, Path, pattern = "^INV-[0-9]{6,20}$", description = "`INV-` and 6 or more digits")),
    responses((status = 200, body = InvoiceAccount), (status = 404, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[get("/invoices/{number}/account")]
pub async fn account(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let number = path.into_inner();
    let n = number.clone();
    let now = state.ledger.now();
    let found = state
        .read(move |c| match store_invoices::account(c, &n, now) {
            Ok(a) => Ok(Some(a)),
            Err(gpuledger_store::StoreError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        })
        .await?;
    match found {
        Some(a) if caller.may_see(Some(&a.tenant)) => Ok(HttpResponse::Ok().json(a)),
        _ => Err(ApiError::NotFound(format!("invoice {number}"))),
    }
}

/// Query of `POST /v1/payments`.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PaymentQuery {
    /// `credit`: a payment above the invoice's open balance is accepted and the excess
    /// becomes the tenant's credit (`GET /v1/balance`). Without it such a payment is refused
    /// with 422 `overpayment`.
    #[param(pattern = "^credit$")]
    pub excess: Option<String>,
}

/// Records a payment against an invoice (admin): `{tenant, invoice, currency, amount, note,
/// external_reference}`. An `external_reference` (the bank's or the books' reference) is
/// unique per tenant: a payment sent again with it is refused 409, naming the entry that
/// recorded it. A payment above the invoice's open balance (total − paid − credited) is refused with 422
/// `overpayment`, naming the open balance, unless the query says `excess=credit`.
#[utoipa::path(tag = "invoices", request_body = gpuledger_core::record::Settlement, params(PaymentQuery),
    responses(super::error::RoleForbidden, (status = 201, body = super::pricing::Appended), (status = 400, body = super::error::Problem, content_type = "application/problem+json"), (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
              (status = 409, description = "`conflict`: an earlier payment of the tenant carries this `external_reference` (the detail names its entry; nothing written), or the first request with this `Idempotency-Key` is still running", body = super::error::Problem, content_type = "application/problem+json"),
              (status = 422, description = "`overpayment`: above the open balance without `excess=credit`; nothing written", body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[post("/payments")]
pub async fn payment(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    let q = web::Query::<PaymentQuery>::from_query(req.query_string())
        .map_err(|e| ApiError::invalid_parameter("excess", e.to_string()))?;
    let op: fn(&Ledger, gpuledger_core::record::Body) -> Result<u64, gpuledger_store::StoreError> =
        match q.excess.as_deref() {
            None => |l, b| l.issuance().settle(b),
            Some("credit") => |l, b| l.issuance().settle_with_excess(b, true),
            Some(_) => {
                return Err(ApiError::invalid_parameter(
                    "excess",
                    "must be `credit` (the excess becomes the tenant's credit)",
                ))
            }
        };
    super::pricing::append_entry(state, caller, req, payload, Kind::Payment, op).await
}

// Credit notes (`POST /v1/credit-notes` and their documents) are `super::credit_notes`.

/// A tenant's balances per currency.
#[derive(Serialize, utoipa::ToSchema)]
pub struct BalanceView {
    pub tenant: String,
    pub currencies: BTreeMap<String, Balance>,
}

/// The balance of a tenant, derived from its invoice, payment and credit-note entries.
#[utoipa::path(tag = "invoices", params(ListQuery),
    responses((status = 200, body = BalanceView), (status = 404, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[get("/balance")]
pub async fn balance(
    state: web::Data<AppState>,
    caller: Caller,
    q: web::Query<ListQuery>,
) -> Result<HttpResponse, ApiError> {
    let tenant = caller
        .tenant_scope(q.into_inner().tenant)?
        .ok_or_else(|| ApiError::invalid_parameter("tenant", "is required"))?;
    let t = tenant.clone();
    let b = state.read(move |c| store_invoices::balances(c, &t)).await?;
    Ok(HttpResponse::Ok().json(BalanceView {
        tenant,
        currencies: b.by_currency,
    }))
}
