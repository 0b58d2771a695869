//! `Idempotency-Key` on the admin writes (every `POST` under `/v1` but those in [`EXCLUDED`]):
//! a client that retries a request after a timeout
//! sends the same key, and the request is done once. The first answer of a 2xx is kept
//! ([`gpuledger_store::idempotency`], at least 35 days) and given again, byte for byte, with
//! `Idempotent-Replayed: true`; the same key with another request is 422
//! `idempotency_key_reused`; while the first is still running, 409 `conflict`.
//! A refused or failed request keeps nothing: it may be corrected and sent again under its key.
//! Keys are per bearer token (its SHA-256), so two callers' keys never meet.

use super::error::ApiError;
use super::AppState;
use actix_web::body::{BoxBody, EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use actix_web::{middleware, web, HttpResponse};
use gpuledger_store::idempotency::{self, Claim};
use sha2::{Digest, Sha256};

/// The request header.
pub const HEADER: &str = "Idempotency-Key";

/// Longest key, in bytes (visible ASCII only).
pub const MAX_KEY_BYTES: usize = 255;

/// Largest body of a request sent with a key (admin bodies are small); a larger one is 413.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// The `POST`s that take no key: records (their `(signer, seq)` is their key), and the two
/// whose answer holds a secret shown once (a token, a webhook signing secret), which would
/// otherwise be kept in the clear with the key.
pub const EXCLUDED: [&str; 3] = ["/v1/records", "/v1/tokens", "/v1/webhooks/endpoints"];

/// Whether a request to `path` with `method` takes an idempotency key.
pub fn applies(method: &actix_web::http::Method, path: &str) -> bool {
    method == actix_web::http::Method::POST && path.starts_with("/v1/") && !EXCLUDED.contains(&path)
}

/// The middleware (`serve` wraps the API in it).
pub async fn idempotent<B: MessageBody + 'static>(
    req: ServiceRequest,
    next: middleware::Next<B>,
) -> Result<ServiceResponse<EitherBody<B, BoxBody>>, actix_web::Error> {
    let key = match req.headers().get(HEADER) {
        Some(k) if applies(req.method(), req.path()) => k.clone(),
        _ => return Ok(next.call(req).await?.map_into_left_body()),
    };
    Ok(run_once(req, next, &key).await?.map_into_right_body())
}

/// A request with a key: claimed, then run, replayed or refused.
async fn run_once<B: MessageBody + 'static>(
    mut req: ServiceRequest,
    next: middleware::Next<B>,
    key: &HeaderValue,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let (key, scope) = match checked(key, &req) {
        Ok(found) => found,
        Err(e) => return Ok(req.error_response(e).map_into_boxed_body()),
    };
    let payload = req.extract::<web::Payload>().await?;
    let body = match super::read_body(req.request(), payload, MAX_BODY_BYTES).await {
        Ok(b) => web::Bytes::from(b),
        Err(e) => return Ok(req.error_response(e).map_into_boxed_body()),
    };
    let fingerprint = fingerprint(&req, &body);
    let state = req
        .app_data::<web::Data<AppState>>()
        .cloned()
        .ok_or_else(|| ApiError::Internal("no app state".into()))?;
    let now = state.ledger.now().unix();
    let claim = {
        let (ledger, scope, key, fp) = (
            state.ledger.clone(),
            scope.clone(),
            key.clone(),
            fingerprint.clone(),
        );
        web::block(move || {
            ledger.with_account_writer(|c| idempotency::claim(c, &scope, &key, &fp, now))
        })
        .await
        .map_err(ApiError::from)?
        .map_err(ApiError::from)?
    };
    match claim {
        Claim::Run => {}
        Claim::Replay {
            status,
            content_type,
            body,
        } => return Ok(req.into_response(replayed(status, content_type, body))),
        Claim::Reused => {
            let e = ApiError::Unprocessable {
                slug: "idempotency_key_reused",
                detail: format!("this {HEADER} was used for another request (method, path, query or body); send a new key"),
            };
            return Ok(req.error_response(e).map_into_boxed_body());
        }
        Claim::InFlight => {
            let e = ApiError::Conflict(format!(
                "the first request with this {HEADER} is still running; retry in a moment"
            ));
            return Ok(req.error_response(e).map_into_boxed_body());
        }
    }
    req.set_payload(actix_web::dev::Payload::from(body));
    let res = next.call(req).await?;
    keep(&state, scope, key, res).await
}

/// The key if it is 1 to [`MAX_KEY_BYTES`] visible ASCII characters, and the caller's scope
/// (the SHA-256 of its `Authorization` header).
fn checked(key: &HeaderValue, req: &ServiceRequest) -> Result<(String, String), ApiError> {
    let key = key
        .to_str()
        .ok()
        .filter(|k| !k.is_empty() && k.len() <= MAX_KEY_BYTES)
        .filter(|k| k.bytes().all(|b| b.is_ascii_graphic()))
        .ok_or_else(|| {
            ApiError::invalid_parameter(
                HEADER,
                format!("must be 1 to {MAX_KEY_BYTES} visible ASCII characters"),
            )
        })?;
    let auth = req
        .headers()
        .get(actix_web::http::header::AUTHORIZATION)
        .map_or(&b""[..], |v| v.as_bytes());
    Ok((key.to_owned(), hex::encode(Sha256::digest(auth))))
}

/// What makes two requests the same: method, path, query and body.
fn fingerprint(req: &ServiceRequest, body: &[u8]) -> String {
    let mut h = Sha256::new();
    for part in [
        req.method().as_str().as_bytes(),
        req.path().as_bytes(),
        req.query_string().as_bytes(),
    ] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    h.update(body);
    hex::encode(h.finalize())
}

/// Keeps a 2xx answer for the key, or releases the key; answers the response as it was.
async fn keep<B: MessageBody + 'static>(
    state: &web::Data<AppState>,
    scope: String,
    key: String,
    res: ServiceResponse<B>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let (req, res) = res.into_parts();
    let status = res.status();
    let content_type = res
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let (head, body) = res.into_parts();
    let bytes = actix_web::body::to_bytes(body)
        .await
        .map_err(|_| ApiError::Internal("the answer's body could not be read".into()))?;
    let ledger = state.ledger.clone();
    let kept = bytes.clone();
    let done = web::block(move || {
        ledger.with_account_writer(|c| {
            if status.is_success() {
                idempotency::complete(
                    c,
                    &scope,
                    &key,
                    status.as_u16(),
                    content_type.as_deref(),
                    &kept,
                )
            } else {
                idempotency::release(c, &scope, &key)
            }
        })
    })
    .await;
    if let Err(e) = done
        .map_err(ApiError::from)
        .and_then(|r| r.map_err(ApiError::from))
    {
        // The request was done; only its key could not be kept: a retry with the key would
        // be answered 409 until the key is taken as abandoned.
        tracing::error!(error = %e, "the answer of an idempotent request could not be kept");
    }
    Ok(ServiceResponse::new(
        req,
        head.set_body(bytes).map_into_boxed_body(),
    ))
}

/// A kept answer, again.
fn replayed(status: u16, content_type: Option<String>, body: Vec<u8>) -> HttpResponse {
    let mut res = HttpResponse::build(
        actix_web::http::StatusCode::from_u16(status).unwrap_or(actix_web::http::StatusCode::OK),
    );
    if let Some(ct) = content_type {
        res.insert_header((CONTENT_TYPE, ct));
    }
    res.insert_header((
        HeaderName::from_static("idempotent-replayed"),
        HeaderValue::from_static("true"),
    ));
    res.body(body)
}

/// Adds the header and its answers to every operation it applies to in the OpenAPI document.
pub fn document(openapi: &mut utoipa::openapi::OpenApi) {
    {
        use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
        use utoipa::openapi::{ObjectBuilder, Required, ResponseBuilder, Type};
        for (path, item) in openapi.paths.paths.iter_mut() {
            let Some(op) = item.post.as_mut() else {
                continue;
            };
            if !applies(&actix_web::http::Method::POST, path) {
                continue;
            }
            let param = ParameterBuilder::new()
                .name(HEADER)
                .parameter_in(ParameterIn::Header)
                .required(Required::False)
                .description(Some(
                    "Makes the request safe to retry: sent again with the same key and the same request, it is not done twice and gets the first answer again (`Idempotent-Replayed: true`). 1 to 255 visible ASCII characters, per bearer token, kept at least 35 days (docs/PROTOCOL.md §6.8).",
                ))
                .schema(Some(
                    ObjectBuilder::new()
                        .schema_type(Type::String)
                        .min_length(Some(1))
                        .max_length(Some(MAX_KEY_BYTES))
                        .pattern(Some("^[!-~]+$")),
                ))
                .build();
            op.parameters.get_or_insert_with(Vec::new).push(param);
            let problem = |d: &str| {
                ResponseBuilder::new()
                    .description(d)
                    .content(
                        "application/problem+json",
                        utoipa::openapi::ContentBuilder::new()
                            .schema(Some(utoipa::openapi::Ref::from_schema_name("Problem")))
                            .build(),
                    )
                    .build()
            };
            let responses = &mut op.responses.responses;
            responses.entry("400".into()).or_insert_with(|| {
                problem("`invalid_parameter`: the `Idempotency-Key` is not 1 to 255 visible ASCII characters").into()
            });
            responses.entry("409".into()).or_insert_with(|| {
                problem(
                    "`conflict`: the first request with this `Idempotency-Key` is still running",
                )
                .into()
            });
            responses.entry("422".into()).or_insert_with(|| {
                problem(
                    "`idempotency_key_reused`: this `Idempotency-Key` was used for another request",
                )
                .into()
            });
        }
    }
}
