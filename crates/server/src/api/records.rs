//! `POST /v1/records`: signed envelopes in, one outcome per record out, after commit.

use super::error::ApiError;
use super::{read_body, AppState};
use actix_web::post;
use actix_web::{web, HttpRequest, HttpResponse};
use gpuledger_core::envelope::Envelope;
use gpuledger_core::limits::MAX_APPEND_BATCH;
use gpuledger_core::outcome::Outcome;
use gpuledger_core::rejection::{Reason, Rejection};
use serde::Serialize;
use serde_json::value::RawValue;

/// Largest request body accepted on `POST /v1/records`, in bytes (8 MiB).
pub const MAX_RECORDS_BODY_BYTES: usize = 8 * 1024 * 1024;

/// The answer to a batch: counts and one outcome per record, in order.
#[derive(Serialize, utoipa::ToSchema)]
pub struct IngestResponse {
    pub accepted: usize,
    pub duplicates: usize,
    pub rejected: usize,
    /// `{"status":"accepted","index":N[,"seq_gap":{from,to}]}`,
    /// `{"status":"duplicate","index":N}` or
    /// `{"status":"rejected","reason":"…","field":"…","message":"…"}`.
    pub outcomes: Vec<Outcome>,
    /// The ledger's clock when it answered (§2.2 form): what a signer compares its own clock
    /// with, so that a refusal its clock caused (`too_old`, `in_future`, `price_in_past`) is
    /// told from one its record caused (docs/AGENT.md, "Clocks").
    #[schema(value_type = String, example = "2026-11-30T12:00:00Z")]
    pub ledger_now: gpuledger_core::time::Timestamp,
}

/// The body of `POST /v1/records` as the server reads it (docs/PROTOCOL.md §6.5): a JSON
/// array of at most [`MAX_APPEND_BATCH`] elements, each meant to be a signed [`Envelope`].
/// An element that is not one (another shape, or not an object at all) does not fail the
/// request: it is rejected `malformed` in its own outcome of the 200 answer. So the document
/// allows any element, naming the envelope as the one that can be accepted; only a body that
/// is not such an array is refused (400, 413). A schema only.
pub struct RecordBatch;

impl utoipa::PartialSchema for RecordBatch {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{AnyOfBuilder, ArrayBuilder, ObjectBuilder, SchemaType};
        use utoipa::ToSchema;
        let other = ObjectBuilder::new()
            .schema_type(SchemaType::AnyValue)
            .description(Some(
                "Any other JSON value: answered with a `rejected` outcome (`malformed`), the \
                 rest of the batch going on.",
            ));
        ArrayBuilder::new()
            .items(
                AnyOfBuilder::new()
                    .item(utoipa::openapi::Ref::from_schema_name(Envelope::name()))
                    .item(other),
            )
            .max_items(Some(MAX_APPEND_BATCH))
            .into()
    }
}

impl utoipa::ToSchema for RecordBatch {
    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        use utoipa::{PartialSchema, ToSchema};
        schemas.push((Envelope::name().into(), Envelope::schema()));
        <Envelope as ToSchema>::schemas(schemas);
    }
}

/// Appends signed records. Authenticated by the records' own signatures; the answer comes
/// only after the accepted records are committed.
///
/// Limits (docs/CONFIGURATION.md): a declared `Content-Length` over 8 MiB is refused at once
/// (413); at most `max_concurrent_ingest` bodies are received at once (503 `busy` with
/// `Retry-After` past it); a body must keep arriving (408 `body_timeout`); each client address
/// and each signer has a rate (429 with `Retry-After`; a batch over any of its signers'
/// budgets is refused whole and nothing is appended).
#[utoipa::path(tag = "records",
    request_body(content = inline(RecordBatch), content_type = "application/json", description = "A JSON array of signed envelopes (docs/PROTOCOL.md §4), at most 10000, body at most 8 MiB. An element that is not a signed envelope is rejected in its own outcome, not by failing the request."),
    responses(
        (status = 200, description = "One outcome per record, in order", body = IngestResponse),
        (status = 400, description = "Malformed JSON or not an array", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 408, description = "The body did not arrive in time (`body_timeout`)", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body (declared or read) or record count over its limit, or more records of one signer than its rate burst (`too_many_records`)", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "Content type is not application/json", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 429, description = "The client's or a signer's rate is exceeded; nothing was appended; see `Retry-After`", body = super::error::Problem, content_type = "application/problem+json"),
        (status = 503, description = "Too many batches are being received (`busy`), the database is unavailable, the log is rewound (`log_rewound`) or the ledger's clock is unreliable (`clock_unreliable`, ops/runbooks/clock.md): nothing was written; see `Retry-After`", body = super::error::Problem, content_type = "application/problem+json"),
    )
)]
#[post("/records")]
pub async fn post_records(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    super::require_json(&req)?;
    if super::declared_length(&req).is_some_and(|n| n > MAX_RECORDS_BODY_BYTES as u64) {
        // Refused before a slot is taken or anything is read.
        return Err(ApiError::TooLarge {
            slug: "body_too_large",
            detail: format!("the body is over the limit of {MAX_RECORDS_BODY_BYTES} bytes"),
        });
    }
    // Held until the answer: the body, its envelopes and the append of at most this many
    // batches are in memory at once.
    let _slot = state.limits.ingest_slot()?;
    let body = read_body(&req, payload, MAX_RECORDS_BODY_BYTES).await?;
    let (slots, envelopes) = read_envelopes(batch_elements(&body)?);
    let n = slots.len();
    // The envelopes own what they need: the body's memory goes back before the append.
    drop(body);
    state
        .limits
        .check_signers(per_signer(envelopes.iter().map(|e| e.signer.as_str())))?;
    let signers: Vec<String> = envelopes.iter().map(|e| e.signer.clone()).collect();
    let ledger = state.ledger.clone();
    let started = std::time::Instant::now();
    let judged = web::block(move || ledger.append_judged(envelopes)).await??;
    debug_assert_eq!(
        judged.outcomes.len(),
        signers.len(),
        "the ledger answers one outcome per envelope"
    );
    // Records whose signature verified spend their signer's budget, refused or not (a flood
    // of validly signed conflicts costs like accepted records); forged ones naming a signer
    // cannot, and a resent duplicate costs nothing.
    state.limits.charge_signers(per_signer(
        signers
            .iter()
            .zip(judged.outcomes.iter().zip(&judged.signed))
            .filter(|(_, (o, signed))| **signed && !matches!(o, Outcome::Duplicate { .. }))
            .map(|(s, _)| s.as_str()),
    ));
    let results = judged.outcomes;
    metrics::histogram!("gpuledger_append_seconds").record(started.elapsed().as_secs_f64());
    metrics::histogram!("gpuledger_ingest_batch_records").record(n as f64);
    let mut results = results.into_iter();
    let outcomes: Vec<Outcome> = slots
        .into_iter()
        .map(|s| s.unwrap_or_else(|| results.next().expect("one outcome per envelope")))
        .collect();
    Ok(HttpResponse::Ok().json(IngestResponse::count(outcomes, state.ledger.now())))
}

/// The elements of a batch body, each still raw (so one bad element is one rejection, not a
/// failed request): 400 when the body is not JSON or not an array, 413 over
/// [`MAX_APPEND_BATCH`] elements.
fn batch_elements(body: &[u8]) -> Result<Vec<&RawValue>, ApiError> {
    let values: Vec<&RawValue> = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => {
            return Err(
                match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
                    Ok(_) => ApiError::bad_request(
                        "not_an_array",
                        "the body must be a JSON array of signed envelopes",
                    ),
                    Err(_) => ApiError::bad_request(
                        "malformed_json",
                        format!("the body is not valid JSON: {e}"),
                    ),
                },
            )
        }
    };
    if values.len() > MAX_APPEND_BATCH {
        return Err(ApiError::TooLarge {
            slug: "too_many_records",
            detail: format!(
                "{} records in one request; the limit is {MAX_APPEND_BATCH}",
                values.len()
            ),
        });
    }
    Ok(values)
}

/// Each element read as an envelope: one slot per element, in order, `None` where an envelope
/// goes to the ledger (the envelopes, in order) and the `malformed` rejection of an element
/// that is not one.
fn read_envelopes(values: Vec<&RawValue>) -> (Vec<Option<Outcome>>, Vec<Envelope>) {
    let mut slots: Vec<Option<Outcome>> = Vec::with_capacity(values.len());
    let mut envelopes = Vec::with_capacity(values.len());
    for v in values {
        match serde_json::from_str::<Envelope>(v.get()) {
            Ok(e) => {
                slots.push(None);
                envelopes.push(e);
            }
            Err(e) => slots.push(Some(Outcome::Rejected(Rejection::new(
                Reason::Malformed,
                format!("not a signed envelope: {e}"),
            )))),
        }
    }
    (slots, envelopes)
}

impl IngestResponse {
    /// The answer to a batch of `outcomes`, counted (`gpuledger_records_total` too).
    fn count(outcomes: Vec<Outcome>, ledger_now: gpuledger_core::time::Timestamp) -> Self {
        let mut resp = IngestResponse {
            accepted: 0,
            duplicates: 0,
            rejected: 0,
            outcomes: Vec::new(),
            ledger_now,
        };
        for o in &outcomes {
            match o {
                Outcome::Accepted { .. } => resp.accepted += 1,
                Outcome::Duplicate { .. } => resp.duplicates += 1,
                Outcome::Rejected(r) => {
                    resp.rejected += 1;
                    metrics::counter!("gpuledger_records_total", "outcome" => "rejected", "reason" => r.reason.code())
                        .increment(1);
                }
            }
        }
        metrics::counter!("gpuledger_records_total", "outcome" => "accepted", "reason" => "")
            .increment(resp.accepted as u64);
        metrics::counter!("gpuledger_records_total", "outcome" => "duplicate", "reason" => "")
            .increment(resp.duplicates as u64);
        resp.outcomes = outcomes;
        resp
    }
}

/// Records per signer id, for the signer rate limit. Ids that are not valid ids are left out:
/// the ledger rejects their records, and they could not be a key of the limiter's table.
fn per_signer<'a>(signers: impl Iterator<Item = &'a str>) -> Vec<(&'a str, u64)> {
    let mut counts: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
    for s in signers.filter(|s| gpuledger_core::ids::check_id(s).is_ok()) {
        *counts.entry(s).or_insert(0) += 1;
    }
    counts.into_iter().collect()
}
