//! `GET /v1/exports/focus`: the FinOps FOCUS 1.2 cost-and-usage dataset of the issued invoices
//! whose periods overlap `[from, to)`, as CSV (docs/FOCUS.md). The rows are made by
//! [`crate::focus`]; this module only reads what they are made from.

use super::auth::Caller;
use super::error::ApiError;
use super::AppState;
use crate::focus::{self, Context, Covering, CreditNote, RegionEntry};
use actix_web::get;
use actix_web::{web, HttpResponse};
use gpuledger_core::certificate::Certificate;
use gpuledger_core::invoice::{self, InvoiceDoc, Period};
use gpuledger_core::record::{Body, Kind};
use gpuledger_store::{access, certificates, invoices, read, DbConn, StoreError};
use serde::Deserialize;
use std::collections::BTreeMap;

/// Most invoices one export may hold; a larger export is refused (413 `export_too_large`):
/// name a tenant or a shorter period. The CSV is built in memory, about 1 KiB per row.
pub const MAX_EXPORT_INVOICES: usize = 10_000;

/// Query of `GET /v1/exports/focus`.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FocusQuery {
    /// Start of the period (inclusive), `YYYY-MM-DDTHH:MM:SSZ`: invoices whose period overlaps
    /// `[from, to)` are exported.
    #[param(value_type = gpuledger_core::time::Timestamp, inline)]
    pub from: String,
    /// End of the period (exclusive): after `from`, at most 400 days after it.
    #[param(value_type = gpuledger_core::time::Timestamp, inline)]
    pub to: String,
    /// Tenant id. Tenant tokens may omit it (their own) and may not name another; admins and
    /// auditors omit it for every tenant.
    #[param(value_type = Option<gpuledger_core::ids::IdString>, inline)]
    pub tenant: Option<String>,
}

/// The FOCUS 1.2 cost-and-usage dataset (CSV) of the issued invoices whose periods overlap
/// `[from, to)`: one `Usage` row per invoice line (late records as `Correction`s), a `Tax` row
/// per taxed line, a `Credit` row per credit note against those invoices; `BilledCost` summed
/// per `InvoiceId` is the invoice's total. Usage not yet invoiced is not in it. Tenants see only
/// their own; another tenant's id is 404.
#[utoipa::path(operation_id = "export_focus", tag = "exports", params(FocusQuery),
    responses((status = 200, description = "FOCUS 1.2 CSV: a header of the column names, then one row per charge (docs/FOCUS.md)", body = String, content_type = "text/csv"),
              (status = 400, body = super::error::Problem, content_type = "application/problem+json"),
              (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
              (status = 413, description = "`export_too_large`: more than 10,000 invoices; name a tenant or a shorter period", body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[get("/exports/focus")]
pub async fn focus_export(
    state: web::Data<AppState>,
    caller: Caller,
    q: web::Query<FocusQuery>,
) -> Result<HttpResponse, ApiError> {
    let q = q.into_inner();
    let (from, to) = super::period(&q.from, &q.to)?;
    if let Some(t) = &q.tenant {
        gpuledger_core::ids::check_id(t).map_err(|m| ApiError::invalid_parameter("tenant", m))?;
    }
    let tenant = caller.tenant_scope(q.tenant)?;
    let period = Period { from, to };
    let t = tenant.clone();
    let csv = state
        .read(move |c| export(c, t.as_deref(), period))
        .await??;
    let name = format!(
        "focus-{}-{}-{}.csv",
        tenant.as_deref().unwrap_or("all"),
        from.to_string().get(..10).unwrap_or_default(),
        to.to_string().get(..10).unwrap_or_default()
    );
    Ok(HttpResponse::Ok()
        .content_type("text/csv; charset=utf-8")
        .insert_header((
            "Content-Disposition",
            format!("attachment; filename=\"{name}\""),
        ))
        .body(csv))
}

/// The export of `tenant` (or every tenant) for `period`, as CSV; the outer error is the
/// database's, the inner one the request's.
fn export(
    c: &mut DbConn,
    tenant: Option<&str>,
    period: Period,
) -> Result<Result<Vec<u8>, ApiError>, StoreError> {
    if let Some(t) = tenant {
        // Not found reaches the caller as 404, as any store error would.
        access::require_tenant(c, t)?;
    }
    let numbers = invoices::overlapping(c, tenant, period)?;
    if numbers.len() > MAX_EXPORT_INVOICES {
        return Ok(Err(ApiError::TooLarge {
            slug: "export_too_large",
            detail: format!(
                "{} invoices overlap the period; one export holds at most {MAX_EXPORT_INVOICES}: \
                 name a tenant or a shorter period",
                numbers.len()
            ),
        }));
    }
    let mut docs = Vec::with_capacity(numbers.len());
    for n in &numbers {
        let (_, json) = invoices::get(c, n)?
            .ok_or_else(|| StoreError::Corrupt(format!("invoice {n} is listed but not stored")))?;
        let doc = invoice::from_json(&json)
            .map_err(|e| StoreError::Corrupt(format!("invoice {n}: {e}")))?;
        docs.push(doc);
    }
    let ctx = context(c, tenant, &docs)?;
    let mut credits: BTreeMap<String, Vec<CreditNote>> = BTreeMap::new();
    let size = read::head(c)?.0;
    for (index, body) in read::bodies_of(c, &[Kind::CreditNote], size)? {
        if let Body::CreditNote(body) = body {
            credits
                .entry(body.invoice.clone())
                .or_default()
                .push(CreditNote { index, body });
        }
    }
    let mut rows = Vec::new();
    for doc in &docs {
        let inv = doc.view();
        let corrupt = |e: focus::FocusError| StoreError::Corrupt(e.to_string());
        rows.extend(focus::invoice_rows(&inv, &ctx).map_err(corrupt)?);
        for note in credits.get(&inv.number).into_iter().flatten() {
            rows.push(focus::credit_row(&inv, note).map_err(corrupt)?);
        }
    }
    let mut out = Vec::new();
    focus::write_csv(rows, &mut out)
        .map_err(|e| StoreError::Corrupt(format!("writing the FOCUS CSV: {e}")))?;
    Ok(Ok(out))
}

/// The certificates of the invoices' tenants and the logged region parameters.
fn context(
    c: &mut DbConn,
    tenant: Option<&str>,
    docs: &[InvoiceDoc],
) -> Result<Context, StoreError> {
    let mut ctx = Context::default();
    if docs.is_empty() {
        return Ok(ctx);
    }
    let tenants: std::collections::BTreeSet<&str> = docs.iter().map(|d| d.tenant()).collect();
    for s in certificates::list(c, tenant)? {
        if !tenants.contains(s.tenant.as_str()) {
            continue;
        }
        let Some((_, json)) = certificates::get(c, &s.id)? else {
            continue;
        };
        let cert = Certificate::from_json(json.as_bytes())
            .map_err(|e| StoreError::Corrupt(format!("certificate {}: {e}", s.id)))?;
        ctx.certificates
            .extend(Covering::of(&cert, s.checkpoint_size));
    }
    let below = docs.iter().map(|d| d.checkpoint_size()).max().unwrap_or(0);
    for (index, body) in read::bodies_of(c, &[Kind::RegionParams], below)? {
        if let Body::RegionParams(params) = body {
            ctx.regions.push(RegionEntry { index, params });
        }
    }
    Ok(ctx)
}
