//! Webhooks (docs/WEBHOOKS.md): endpoints, their delivery logs, manual redelivery (admin
//! only), the event types, and the public key deliveries are signed with (public).

use super::auth::Caller;
use super::error::ApiError;
use super::{json_body, AppState};
use crate::webhooks::{sign, ssrf, EventType, WebhookApi};
use actix_web::{delete, get, patch, post};
use actix_web::{web, HttpRequest, HttpResponse};
use gpuledger_core::time::Timestamp;
use gpuledger_store::access;
use gpuledger_store::webhooks::{self as outbox, Delivery, Endpoint, NewEndpoint};
use serde::{Deserialize, Serialize};

/// Longest endpoint description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 500;

/// Body of `POST /v1/webhooks/endpoints`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewEndpointBody {
    /// `http` or `https` URL; its host must resolve to public addresses only (unless
    /// `[webhooks] allow_private_targets`), and it may carry no user name or password.
    pub url: String,
    /// The event types it receives (`GET /v1/webhooks/event-types`), at least one.
    pub event_types: Vec<String>,
    /// Only this tenant's events; absent: every tenant's and the global ones.
    #[serde(default)]
    pub tenant: Option<String>,
    /// `ed25519` (default: header `v1a`, the service's key, `GET /v1/webhooks/public-key`)
    /// or `hmac` (header `v1`, a `whsec_` secret generated for it and shown once).
    #[serde(default)]
    pub signing: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
}

/// Body of `PATCH /v1/webhooks/endpoints/{id}`: what to change.
#[derive(Deserialize, Default, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EndpointChange {
    /// Enable or disable (re-enabling an endpoint disabled by a 410 too).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// The new event types (at least one).
    #[serde(default)]
    pub event_types: Option<Vec<String>>,
    #[serde(default)]
    pub description: Option<String>,
}

/// A registered endpoint, with its HMAC secret on creation only.
#[derive(Serialize, utoipa::ToSchema)]
pub struct EndpointCreated {
    #[serde(flatten)]
    pub endpoint: Endpoint,
    /// The `whsec_` secret of an `hmac` endpoint: shown here once, never again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

/// An event type.
#[derive(Serialize, utoipa::ToSchema)]
pub struct EventTypeView {
    /// Its name (`invoice.issued`).
    #[serde(rename = "type")]
    pub kind: String,
    pub description: String,
    /// Whether its events belong to a tenant (and reach that tenant's endpoints); the others
    /// reach global endpoints only.
    pub per_tenant: bool,
}

/// The key `v1a` signatures are made with.
#[derive(Serialize, utoipa::ToSchema)]
pub struct PublicKeyView {
    /// `whpk_` and the base64 of the 32-byte Ed25519 public key.
    pub public_key: String,
    /// `v1a`.
    pub signature_version: String,
}

fn event_types(field: &str, names: &[String]) -> Result<Vec<EventType>, ApiError> {
    if names.is_empty() {
        return Err(ApiError::invalid_parameter(
            field,
            "name at least one event type",
        ));
    }
    names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            EventType::parse(n).ok_or_else(|| {
                ApiError::invalid_parameter(
                    &format!("{field}[{i}]"),
                    format!("{n:?} is not an event type (see GET /v1/webhooks/event-types)"),
                )
            })
        })
        .collect()
}

fn description(d: Option<String>) -> Result<Option<String>, ApiError> {
    match d {
        Some(d) if d.chars().count() > MAX_DESCRIPTION_CHARS => Err(ApiError::invalid_parameter(
            "description",
            format!("at most {MAX_DESCRIPTION_CHARS} characters"),
        )),
        // Shown to people in the console: no control, bidirectional or invisible characters.
        Some(d) => match gpuledger_core::ids::check_display_chars(&d) {
            Ok(()) => Ok(Some(d)),
            Err(m) => Err(ApiError::invalid_parameter("description", m)),
        },
        None => Ok(None),
    }
}

fn allow_private(api: &Option<web::Data<WebhookApi>>) -> bool {
    api.as_ref().is_some_and(|a| a.allow_private_targets)
}

/// The event types an endpoint may subscribe to (admin).
#[utoipa::path(tag = "webhooks", responses(super::error::RoleForbidden, (status = 200, body = Vec<EventTypeView>)), security(("bearer" = [])))]
#[get("/webhooks/event-types")]
pub async fn list_event_types(caller: Caller) -> Result<HttpResponse, ApiError> {
    caller.require_admin()?;
    let list: Vec<EventTypeView> = EventType::ALL
        .into_iter()
        .map(|t| EventTypeView {
            kind: t.as_str().into(),
            description: t.description().into(),
            per_tenant: t.per_tenant(),
        })
        .collect();
    Ok(HttpResponse::Ok().json(list))
}

/// The Ed25519 public key `v1a` signatures verify with (public: no token needed).
#[utoipa::path(tag = "webhooks", responses((status = 200, body = PublicKeyView), (status = 404, body = super::error::Problem, content_type = "application/problem+json")))]
#[get("/webhooks/public-key")]
pub async fn public_key(api: Option<web::Data<WebhookApi>>) -> Result<HttpResponse, ApiError> {
    let key = api
        .as_ref()
        .and_then(|a| a.public_key.clone())
        .ok_or_else(|| ApiError::NotFound("a webhook signing key on this server".into()))?;
    Ok(HttpResponse::Ok().json(PublicKeyView {
        public_key: key,
        signature_version: "v1a".into(),
    }))
}

/// Registers an endpoint (admin). Its URL is refused with 422 when its host resolves to a
/// loopback, private, link-local, CGNAT, multicast, unspecified or metadata address.
#[utoipa::path(tag = "webhooks", request_body = NewEndpointBody,
    responses(super::error::RoleForbidden, (status = 201, body = EndpointCreated),
        (status = 422, description = "The URL's host resolves to an address webhooks may not call (`forbidden_target`)", body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[post("/webhooks/endpoints")]
pub async fn create_endpoint(
    state: web::Data<AppState>,
    api: Option<web::Data<WebhookApi>>,
    caller: Caller,
    req: HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    caller.require_admin()?;
    let b: NewEndpointBody = json_body(&req, body).await?;
    let types = event_types("event_types", &b.event_types)?;
    let description = description(b.description)?.unwrap_or_default();
    let secret = match b.signing.as_deref() {
        None | Some("ed25519") => None,
        Some("hmac") => Some(sign::new_hmac_secret()),
        Some(other) => {
            return Err(ApiError::invalid_parameter(
                "signing",
                format!("{other:?} must be ed25519 or hmac"),
            ))
        }
    };
    ssrf::parse_url(&b.url).map_err(|e| ApiError::invalid_parameter("url", e))?;
    let private = allow_private(&api);
    let url = b.url.clone();
    // The lookup may take a while: on the blocking pool.
    let target = web::block(move || ssrf::check_registration(&url, private))
        .await?
        .map_err(|e| ApiError::Unprocessable {
            slug: "forbidden_target",
            detail: format!("url: {e}"),
        })?;
    let shown = secret.clone();
    let ledger = state.ledger.clone();
    let created = web::block(move || -> Result<Endpoint, ApiError> {
        if let Some(t) = &b.tenant {
            let known = ledger
                .reads()
                .run(access::list_tenants)?
                .iter()
                .any(|x| &x.id == t);
            if !known {
                return Err(ApiError::NotFound(format!("tenant {t}")));
            }
        }
        let new = NewEndpoint {
            url: target.url,
            tenant: b.tenant,
            event_types: types,
            secret,
            description,
        };
        Ok(ledger.with_account_writer(|c| outbox::create_endpoint(c, &new, Timestamp::now()))?)
    })
    .await??;
    Ok(HttpResponse::Created().json(EndpointCreated {
        endpoint: created,
        secret: shown,
    }))
}

/// Lists the endpoints (admin).
#[utoipa::path(tag = "webhooks", responses(super::error::RoleForbidden, (status = 200, body = Vec<Endpoint>)), security(("bearer" = [])))]
#[get("/webhooks/endpoints")]
pub async fn list_endpoints(
    state: web::Data<AppState>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    caller.require_admin()?;
    let list = state.read(outbox::list_endpoints).await?;
    Ok(HttpResponse::Ok().json(list))
}

/// One endpoint (admin).
#[utoipa::path(tag = "webhooks", params(("id" = String, Path, pattern = "^ep_[0-9a-f]{32}$", description = "`ep_` and 32 lower-case hex digits")),
    responses(super::error::RoleForbidden, (status = 200, body = Endpoint)), security(("bearer" = [])))]
#[get("/webhooks/endpoints/{id}")]
pub async fn get_endpoint(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    caller.require_admin()?;
    let id = path.into_inner();
    let i = id.clone();
    let found = state.read(move |c| outbox::get_endpoint(c, &i)).await?;
    let e = found.ok_or_else(|| ApiError::NotFound(format!("webhook endpoint {id}")))?;
    Ok(HttpResponse::Ok().json(e))
}

/// Changes an endpoint (admin): enable or disable it, its event types, its description.
#[utoipa::path(tag = "webhooks", params(("id" = String, Path, pattern = "^ep_[0-9a-f]{32}$", description = "`ep_` and 32 lower-case hex digits")), request_body = EndpointChange,
    responses(super::error::RoleForbidden, (status = 200, body = Endpoint)), security(("bearer" = [])))]
#[patch("/webhooks/endpoints/{id}")]
pub async fn update_endpoint(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    req: HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    caller.require_admin()?;
    let ch: EndpointChange = json_body(&req, body).await?;
    let types = match &ch.event_types {
        Some(t) => Some(event_types("event_types", t)?),
        None => None,
    };
    let description = description(ch.description)?;
    let id = path.into_inner();
    let ledger = state.ledger.clone();
    let found = {
        let id = id.clone();
        web::block(move || {
            ledger.with_account_writer(|c| {
                outbox::update_endpoint(
                    c,
                    &id,
                    ch.enabled,
                    types.as_deref(),
                    description.as_deref(),
                    Timestamp::now(),
                )
            })
        })
        .await??
    };
    let e = found.ok_or_else(|| ApiError::NotFound(format!("webhook endpoint {id}")))?;
    Ok(HttpResponse::Ok().json(e))
}

/// Deletes an endpoint with its delivery log (admin).
#[utoipa::path(tag = "webhooks", params(("id" = String, Path, pattern = "^ep_[0-9a-f]{32}$", description = "`ep_` and 32 lower-case hex digits")),
    responses(super::error::RoleForbidden, (status = 204, description = "Deleted")), security(("bearer" = [])))]
#[delete("/webhooks/endpoints/{id}")]
pub async fn delete_endpoint(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    caller.require_admin()?;
    let id = path.into_inner();
    let ledger = state.ledger.clone();
    let existed = {
        let id = id.clone();
        web::block(move || ledger.with_account_writer(|c| outbox::delete_endpoint(c, &id)))
            .await??
    };
    if !existed {
        return Err(ApiError::NotFound(format!("webhook endpoint {id}")));
    }
    Ok(HttpResponse::NoContent().finish())
}

/// An endpoint's delivery log, newest first, each delivery with every attempt (admin).
#[utoipa::path(tag = "webhooks", params(("id" = String, Path, pattern = "^ep_[0-9a-f]{32}$", description = "`ep_` and 32 lower-case hex digits")),
    responses(super::error::RoleForbidden, (status = 200, body = Vec<Delivery>)), security(("bearer" = [])))]
#[get("/webhooks/endpoints/{id}/deliveries")]
pub async fn list_deliveries(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    caller.require_admin()?;
    let id = path.into_inner();
    let found = {
        let id = id.clone();
        state
            .read(move |c| match outbox::get_endpoint(c, &id)? {
                Some(_) => Ok(Some(outbox::deliveries(c, &id)?)),
                None => Ok(None),
            })
            .await?
    };
    let list = found.ok_or_else(|| ApiError::NotFound(format!("webhook endpoint {id}")))?;
    Ok(HttpResponse::Ok().json(list))
}

/// Sends a delivery again, with the same `webhook-id` and payload, its retry schedule
/// restarted (admin).
#[utoipa::path(tag = "webhooks", params(("id" = String, Path, pattern = "^msg_[0-9a-f]{32}$", description = "The delivery's `webhook-id`: `msg_` and 32 lower-case hex digits")),
    responses(super::error::RoleForbidden, (status = 202, body = Delivery)), security(("bearer" = [])))]
#[post("/webhooks/deliveries/{id}/redeliver")]
pub async fn redeliver(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    caller.require_admin()?;
    let id = path.into_inner();
    let ledger = state.ledger.clone();
    let found = {
        let id = id.clone();
        web::block(move || {
            ledger.with_account_writer(|c| outbox::redeliver(c, &id, Timestamp::now()))
        })
        .await??
    };
    let d = found.ok_or_else(|| ApiError::NotFound(format!("webhook delivery {id}")))?;
    Ok(HttpResponse::Accepted().json(d))
}
