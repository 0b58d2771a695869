//! Credit notes: granted (admin) as `credit_note` log entries, and read back as numbered
//! documents, `CN-<log index>` (`core::invoice::credit_note_number`, the number the FOCUS
//! export writes as the credit's `InvoiceId`), as JSON, CSV and PDF. Tenants see only their
//! own; another tenant's number answers 404, exactly like one that does not exist; a string
//! that is no credit-note number answers 400.

use super::auth::Caller;
use super::error::ApiError;
use super::{json_body, AppState};
use crate::invoice_render::{self, Lang, PdfNotes};
use actix_web::{get, post, web, HttpRequest, HttpResponse};
use gpuledger_core::invoice::{self, CreditNoteDoc, Invoice};
use gpuledger_core::record::{Body, Kind};
use gpuledger_store::invoices as store_invoices;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The answer to `POST /v1/credit-notes`: the entry's index and kind (as every admin append
/// answers) and the credit note's number.
#[derive(Serialize, utoipa::ToSchema)]
pub struct CreditNoteCreated {
    /// The log index of the `credit_note` entry.
    pub index: u64,
    /// `credit_note`.
    pub kind: String,
    /// `CN-<index>`: `GET /v1/credit-notes/{number}`, and the credit's `InvoiceId` in the
    /// FOCUS export.
    #[schema(example = "CN-197")]
    pub number: String,
}

/// Grants a credit note against an invoice (admin); credits may not exceed the invoice total.
/// Answers the entry's `index` and `kind` and the credit note's `number` (`CN-<index>`), with
/// `Location: /v1/credit-notes/{number}`.
#[utoipa::path(operation_id = "credit_note", tag = "invoices", request_body = gpuledger_core::record::Settlement,
    responses(super::error::RoleForbidden, (status = 201, body = CreditNoteCreated, headers(("Location" = String, description = "`/v1/credit-notes/{number}`"))),
              (status = 400, body = super::error::Problem, content_type = "application/problem+json"), (status = 404, body = super::error::Problem, content_type = "application/problem+json"),
              (status = 409, description = "`conflict`: an earlier credit note of the tenant carries this `external_reference` (the detail names its entry; nothing written), or the first request with this `Idempotency-Key` is still running", body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[post("/credit-notes")]
pub async fn create(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    caller.require_admin()?;
    let v: Value = json_body(&req, payload).await?;
    let body = Body::from_value(Kind::CreditNote, &v).map_err(super::pricing::rejection)?;
    let index = web::block(move || state.ledger.issuance().settle(body)).await??;
    let number = invoice::credit_note_number(index);
    Ok(HttpResponse::Created()
        .insert_header(("Location", format!("/v1/credit-notes/{number}")))
        .json(CreditNoteCreated {
            index,
            kind: Kind::CreditNote.as_str().into(),
            number,
        }))
}

/// The log index `number` names, or a 400 naming the parameter.
fn index_of(number: &str) -> Result<u64, ApiError> {
    invoice::parse_credit_note_number(number).ok_or_else(|| {
        ApiError::invalid_parameter(
            "number",
            format!(
                "{number:?} is not a credit-note number: `{}` and a log index, as `CN-197`",
                invoice::CREDIT_NOTE_PREFIX
            ),
        )
    })
}

/// The credit note `number` and the invoice it credits, if the caller may see them.
async fn load(
    state: &web::Data<AppState>,
    caller: &Caller,
    number: &str,
) -> Result<(CreditNoteDoc, Invoice), ApiError> {
    let index = index_of(number)?;
    let found = state
        .read(move |c| store_invoices::credit_note(c, index))
        .await?;
    let not_found = || ApiError::NotFound(format!("credit note {number}"));
    let (recorded_at, entry, json) = found
        .filter(|(_, s, _)| caller.may_see(Some(&s.tenant)))
        .ok_or_else(not_found)?;
    let doc = invoice::from_json(&json)
        .map_err(|e| ApiError::Internal(format!("invoice {}: {e}", entry.invoice)))?;
    let inv: Invoice = doc.view().into_owned();
    let note = CreditNoteDoc::new(index, recorded_at, &entry, &inv).ok_or_else(|| {
        ApiError::Internal(format!(
            "credit note {number} is not against invoice {} of {}",
            inv.number, inv.tenant
        ))
    })?;
    Ok((note, inv))
}

/// One credit note as JSON: its number (`CN-<log index>`), the log index of its `credit_note`
/// entry, the tenant, the invoice it credits (and that invoice's period and total), currency,
/// amount, reason (`note`) and the time the ledger recorded it. It never changes: the same
/// bytes on every request. Tenants: their own (others' answer 404).
#[utoipa::path(operation_id = "get_credit_note", tag = "invoices",
    params(("number" = String, Path, pattern = "^CN-(?:0|[1-9][0-9]{0,15})$", description = "`CN-` and the log index of the `credit_note` entry", example = "CN-197")),
    responses((status = 200, body = CreditNoteDoc),
              (status = 400, description = "`invalid_parameter`: `number` is not `CN-` and a log index", body = super::error::Problem, content_type = "application/problem+json"),
              (status = 404, description = "No credit note has this number, or it is another tenant's", body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[get("/credit-notes/{number}")]
pub async fn get(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let (note, _) = load(&state, &caller, &path.into_inner()).await?;
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(invoice_render::credit_note_to_json(&note)))
}

/// Query of the credit-note downloads.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CreditNoteDownloadQuery {
    /// The PDF's language: `en` or `zh-CN` (also `zh`, `zh-Hans`). Default: that of the
    /// invoice it credits, Chinese when the bill-to name or address is written in Chinese
    /// characters, else English (docs/RATING.md, "Credit notes").
    pub lang: Option<String>,
}

/// Downloads a credit note as `json`, `csv` or `pdf`. The PDF is rendered as invoice PDFs are
/// (embedded fonts, English or Chinese labels, the credited invoice's issuer and bill-to), with
/// how to verify the entry in the log. Every download is the same bytes (for the PDF: per
/// language, while the settings it shows stay the same). Gzip-compressed when the request
/// accepts it.
#[utoipa::path(operation_id = "download_credit_note", tag = "invoices",
    params(("number" = String, Path, pattern = "^CN-(?:0|[1-9][0-9]{0,15})$", description = "`CN-` and the log index of the `credit_note` entry", example = "CN-197"),
           ("format" = String, Path, pattern = "^(?:json|csv|pdf)$", description = "json, csv or pdf"), CreditNoteDownloadQuery),
    responses((status = 200, description = "The document"),
              (status = 400, description = "`invalid_parameter`: `number` is not a credit-note number, `format` or `lang` is not one of those served", body = super::error::Problem, content_type = "application/problem+json"),
              (status = 404, description = "No credit note has this number, or it is another tenant's", body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[get(
    "/credit-notes/{number}/{format}",
    wrap = "actix_web::middleware::Compress::default()"
)]
pub async fn download(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(String, String)>,
    q: web::Query<CreditNoteDownloadQuery>,
) -> Result<HttpResponse, ApiError> {
    let (number, format) = path.into_inner();
    index_of(&number)?;
    if !matches!(format.as_str(), "json" | "csv" | "pdf") {
        return Err(ApiError::invalid_parameter(
            "format",
            "must be json, csv or pdf",
        ));
    }
    let lang = q
        .into_inner()
        .lang
        .map(|l| {
            Lang::parse(&l)
                .ok_or_else(|| ApiError::invalid_parameter("lang", "must be en or zh-CN"))
        })
        .transpose()?;
    let (note, inv) = load(&state, &caller, &number).await?;
    let (ctype, body) = match format.as_str() {
        "json" => (
            "application/json",
            invoice_render::credit_note_to_json(&note),
        ),
        "csv" => (
            "text/csv; charset=utf-8",
            invoice_render::credit_note_to_csv(&note),
        ),
        _ => {
            let ledger = state.ledger.clone();
            let pdf = web::block(move || {
                // What the invoice PDF shows of the settings, and nothing that changes with
                // time: the same credit note is the same bytes on every download.
                let settings = ledger.invoicing();
                let notes = PdfNotes {
                    lang,
                    buyer_tax_id: ledger
                        .invoice_pdf()
                        .bill_to_tax_ids
                        .get(&inv.tenant)
                        .cloned(),
                    payment_instructions: Vec::new(),
                    public_url: settings.public_url.clone(),
                    verifier_key: ledger.info().verifier_key.clone(),
                };
                invoice_render::credit_note_to_pdf(&note, &inv, &notes)
            })
            .await?;
            ("application/pdf", pdf)
        }
    };
    Ok(HttpResponse::Ok()
        .content_type(ctype)
        .insert_header((
            "Content-Disposition",
            format!("attachment; filename=\"{number}.{format}\""),
        ))
        .body(body))
}
