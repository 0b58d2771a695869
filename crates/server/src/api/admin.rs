//! Administration: tenants, signers (registration, rotation and revocation are log entries),
//! and API tokens.

use super::auth::Caller;
use super::error::ApiError;
use super::{json_body, AppState};
use actix_web::{delete, get, patch, post};
use actix_web::{web, HttpRequest, HttpResponse};
use gpuledger_core::record::{KeyScope, Role};
use gpuledger_core::time::Timestamp;
use gpuledger_store::access::{self, ApiRole, Tenant, TokenInfo};
use gpuledger_store::read;
use serde::{Deserialize, Serialize};

/// Body of `POST /v1/tenants`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewTenant {
    /// The tenant's id, not one reserved for the ledger (`ledger`).
    #[schema(value_type = gpuledger_core::ids::NewIdString)]
    pub id: String,
    /// Display name: the bill-to name of its invoices.
    pub name: String,
    /// Billing address, one line per element (at most 8 lines of 200 bytes); default none.
    #[serde(default)]
    pub address: Vec<String>,
}

/// Body of `PATCH /v1/tenants/{id}`: the members given change, the others stay.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantChange {
    /// New display name.
    pub name: Option<String>,
    /// New billing address (`[]` removes it).
    pub address: Option<Vec<String>>,
}

/// Creates a tenant (admin).
#[utoipa::path(tag = "admin", request_body = NewTenant,
    responses(super::error::RoleForbidden, (status = 201, body = Tenant), (status = 409, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[post("/tenants")]
pub async fn create_tenant(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    caller.require_admin()?;
    let t: NewTenant = json_body(&req, body).await?;
    gpuledger_core::ids::check_new_id(&t.id).map_err(|m| ApiError::invalid_parameter("id", m))?;
    check_tenant_fields(Some(&t.name), Some(&t.address))?;
    let ledger = state.ledger.clone();
    let tenant = web::block(move || -> Result<Tenant, ApiError> {
        // The log registers the tenant first (a `tenant_registered` entry, which records
        // need); a retry after a failure below finds it registered and goes on.
        match ledger.register_tenant(&t.id) {
            Ok(_) | Err(gpuledger_store::StoreError::AlreadyExists(_)) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(ledger.with_account_writer(|c| {
            access::create_tenant_with_address(c, &t.id, &t.name, &t.address)
        })?)
    })
    .await??;
    Ok(HttpResponse::Created().json(tenant))
}

/// Changes a tenant's display name or billing address (admin). Account data, not the log:
/// invoices issued before keep what they say; later ones use the new values.
#[utoipa::path(tag = "admin", params(("id" = inline(gpuledger_core::ids::IdString), Path)), request_body = TenantChange,
    responses(super::error::RoleForbidden, (status = 200, body = Tenant), (status = 400, body = super::error::Problem, content_type = "application/problem+json"), (status = 404, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[patch("/tenants/{id}")]
pub async fn update_tenant(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    req: HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    caller.require_admin()?;
    let id = path.into_inner();
    let t: TenantChange = json_body(&req, body).await?;
    check_tenant_fields(t.name.as_deref(), t.address.as_deref())?;
    let ledger = state.ledger.clone();
    let tenant = web::block(move || {
        ledger.with_account_writer(|c| {
            access::update_tenant(c, &id, t.name.as_deref(), t.address.as_deref())
        })
    })
    .await??;
    Ok(HttpResponse::Ok().json(tenant))
}

/// A tenant's display name and address lines, as given: a 400 `invalid_parameter` naming the
/// field (`name`, `address`, `address[i]`) and why. The rules are the store's
/// ([`access::check_tenant_name`], [`access::check_address`]), which checks them again.
fn check_tenant_fields(name: Option<&str>, address: Option<&[String]>) -> Result<(), ApiError> {
    if let Some(n) = name {
        access::check_tenant_name(n).map_err(|m| ApiError::invalid_parameter("name", m))?;
    }
    if let Some(a) = address {
        if a.len() > access::MAX_ADDRESS_LINES {
            return Err(ApiError::invalid_parameter(
                "address",
                format!(
                    "has {} lines; at most {}",
                    a.len(),
                    access::MAX_ADDRESS_LINES
                ),
            ));
        }
        for (i, l) in a.iter().enumerate() {
            gpuledger_core::ids::check_display_text(l, access::MAX_ADDRESS_LINE_BYTES)
                .map_err(|m| ApiError::invalid_parameter(&format!("address[{i}]"), m))?;
        }
    }
    Ok(())
}

/// Query of the tenant list: a date filter and paging.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TenantListQuery {
    /// Only tenants created at or after this instant (`YYYY-MM-DDTHH:MM:SSZ`).
    pub from: Option<String>,
    /// Only tenants created before this instant.
    pub to: Option<String>,
    /// Page size, from 1 to 1000 (`paging::MAX_LIMIT`); 100 if left out.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub limit: Option<String>,
    /// Where to continue: the previous page's `X-Next-Cursor`, as is.
    pub cursor: Option<String>,
}

/// Lists tenants by id (admin, auditor), a page at a time: the body is a JSON array of at most
/// `limit` tenants; when more follow, `Link` (rel="next") and `X-Next-Cursor` say how to get
/// them.
#[utoipa::path(tag = "admin", params(TenantListQuery),
    responses(super::error::RoleForbidden, (status = 200, body = Vec<Tenant>, headers(
                  ("Link" = String, description = "`<…>; rel=\"next\"` (RFC 8288): the next page, when there is one"),
                  ("X-Next-Cursor" = String, description = "The `cursor` of the next page, when there is one")))),
    security(("bearer" = [])))]
#[get("/tenants")]
pub async fn list_tenants(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    q: web::Query<TenantListQuery>,
) -> Result<HttpResponse, ApiError> {
    caller.require_reader_of_all()?;
    let q = q.into_inner();
    let created = super::paging::date_range(q.from.as_deref(), q.to.as_deref())?;
    let page =
        super::paging::Paging::parse("tenants", None, q.limit.as_deref(), q.cursor.as_deref())?;
    let (after, fetch) = (page.after.clone(), page.fetch());
    let list = state
        .read(move |c| access::list_tenants_page(c, created, after.as_deref(), fetch))
        .await?;
    Ok(page.respond(&req, list, |t| t.id.clone()))
}

/// Body of `POST /v1/signers`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewSigner {
    /// The signer's id, not one reserved for the ledger (`ledger`).
    #[schema(value_type = gpuledger_core::ids::NewIdString)]
    pub id: String,
    /// `node` or `market`.
    #[schema(value_type = String, pattern = "^(?:node|market)$")]
    pub role: String,
    /// Standard base64 of the 32-byte Ed25519 public key (as `gpuledger keygen` prints it).
    pub public_key: String,
    /// Node ids a node key may sign records for (required for `node`, absent for `market`).
    #[serde(default)]
    pub nodes: Option<Vec<String>>,
    /// Regions the key may sign records or prices for (at least one).
    #[serde(default)]
    pub regions: Vec<String>,
}

/// Body of `POST /v1/signers/{id}/keys`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewKey {
    pub public_key: String,
    /// Node ids the new key may sign for; with `regions` absent too, the signer's latest
    /// key's scope is kept.
    #[serde(default)]
    pub nodes: Option<Vec<String>>,
    /// Regions the new key may sign for (see `nodes`).
    #[serde(default)]
    pub regions: Option<Vec<String>>,
}

/// A registered key.
#[derive(Serialize, utoipa::ToSchema)]
pub struct KeyView {
    pub signer: String,
    pub role: String,
    pub key_id: String,
    pub public_key: String,
    /// Node ids the key may sign for (node keys).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<String>>,
    /// Regions the key may sign for.
    pub regions: Vec<String>,
    /// Index of the `signer_key_registered` entry.
    pub registered_index: u64,
    /// Index of the `signer_key_revoked` entry, if revoked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoked_index: Option<u64>,
}

fn register(
    state: &AppState,
    signer: String,
    role: Role,
    public_key: String,
    scope: Option<KeyScope>,
) -> Result<KeyView, ApiError> {
    let (key_id, index) = state
        .ledger
        .register_key(&signer, role, &public_key, scope)?;
    let scope = state
        .ledger
        .reads()
        .run(|c| read::registration(c, index))
        .map(|r| KeyScope::of(&r))?;
    Ok(KeyView {
        signer,
        role: role.as_str().into(),
        key_id,
        public_key,
        nodes: scope.nodes,
        regions: scope.regions,
        registered_index: index,
        revoked_index: None,
    })
}

/// Registers a node or market signer with its first key (admin). The registration is a
/// ledger-signed log entry.
#[utoipa::path(tag = "admin", request_body = NewSigner,
    responses(super::error::RoleForbidden, (status = 201, body = KeyView), (status = 400, body = super::error::Problem, content_type = "application/problem+json"), (status = 409, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[post("/signers")]
pub async fn create_signer(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    caller.require_admin()?;
    let s: NewSigner = json_body(&req, body).await?;
    let role = match s.role.as_str() {
        "node" => Role::Node,
        "market" => Role::Market,
        _ => {
            return Err(ApiError::invalid_parameter(
                "role",
                "must be node or market",
            ))
        }
    };
    let scope = KeyScope::new(s.nodes, s.regions);
    let view =
        web::block(move || register(&state, s.id, role, s.public_key, Some(scope))).await??;
    Ok(HttpResponse::Created().json(view))
}

/// Adds a key to an existing signer, for rotation (admin); revoke the old key afterwards.
#[utoipa::path(tag = "admin", request_body = NewKey,
    params(("id" = inline(gpuledger_core::ids::IdString), Path)),
    responses(super::error::RoleForbidden, (status = 201, body = KeyView), (status = 404, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[post("/signers/{id}/keys")]
pub async fn add_key(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
    req: HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    caller.require_admin()?;
    let k: NewKey = json_body(&req, body).await?;
    let signer = path.into_inner();
    let role = state
        .read(move |c| read::keys(c, None))
        .await?
        .into_iter()
        .find(|r| r.signer == signer)
        .map(|r| r.role)
        .ok_or_else(|| ApiError::NotFound(format!("signer {signer}")))?;
    let role = Role::parse(&role).ok_or_else(|| ApiError::Internal(format!("role {role}")))?;
    let scope = match (k.nodes, k.regions) {
        (None, None) => None,
        (nodes, regions) => Some(KeyScope::new(nodes, regions.unwrap_or_default())),
    };
    let view = web::block(move || register(&state, signer, role, k.public_key, scope)).await??;
    Ok(HttpResponse::Created().json(view))
}

/// Longest revocation reason, in bytes.
pub const MAX_REVOCATION_REASON_BYTES: usize = 500;

/// Body of the revocation (optional; an empty body revokes without a reason).
#[derive(Deserialize, utoipa::ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct Revocation {
    pub reason: Option<String>,
}

/// Revokes a key (admin): records signed with it are refused from the next entry on.
#[utoipa::path(tag = "admin", request_body = Revocation,
    params(("id" = inline(gpuledger_core::ids::IdString), Path), ("key_id" = String, Path, pattern = "^[0-9a-f]{16}$", description = "16 lower-case hex digits")),
    responses(super::error::RoleForbidden, (status = 200, body = KeyView), (status = 404, body = super::error::Problem, content_type = "application/problem+json"), (status = 409, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[post("/signers/{id}/keys/{key_id}/revoke")]
pub async fn revoke_key(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    caller.require_admin()?;
    let r: Revocation = super::optional_json_body(&req, body).await?;
    if let Some(reason) = &r.reason {
        if reason.len() > MAX_REVOCATION_REASON_BYTES {
            return Err(ApiError::invalid_parameter(
                "reason",
                format!("is longer than {MAX_REVOCATION_REASON_BYTES} bytes"),
            ));
        }
        // New revocations only: the log's own rule for `reason` is unchanged (§5).
        gpuledger_core::ids::check_display_chars(reason)
            .map_err(|m| ApiError::invalid_parameter("reason", m))?;
    }
    let (signer, key_id) = path.into_inner();
    let view = web::block(move || -> Result<KeyView, ApiError> {
        state.ledger.revoke_key(&signer, &key_id, r.reason)?;
        list_keys(&state)?
            .into_iter()
            .find(|k| k.key_id == key_id)
            .ok_or_else(|| ApiError::NotFound(format!("key {key_id}")))
    })
    .await??;
    Ok(HttpResponse::Ok().json(view))
}

fn list_keys(state: &AppState) -> Result<Vec<KeyView>, ApiError> {
    use base64::prelude::{Engine, BASE64_STANDARD};
    state
        .ledger
        .reads()
        .run(|c| {
            read::keys(c, None)?
                .into_iter()
                .map(|r| {
                    let scope = KeyScope::of(&read::registration(c, r.registered_idx as u64)?);
                    Ok(KeyView {
                        signer: r.signer,
                        role: r.role,
                        key_id: r.key_id,
                        public_key: BASE64_STANDARD.encode(&r.public_key),
                        nodes: scope.nodes,
                        regions: scope.regions,
                        registered_index: r.registered_idx as u64,
                        revoked_index: r.revoked_idx.map(|i| i as u64),
                    })
                })
                .collect::<Result<Vec<_>, gpuledger_store::StoreError>>()
        })
        .map_err(Into::into)
}

/// Lists every signer key with its registration and revocation entries (admin, auditor).
#[utoipa::path(tag = "admin", responses(super::error::RoleForbidden, (status = 200, body = Vec<KeyView>)), security(("bearer" = [])))]
#[get("/signers")]
pub async fn list_signers(
    state: web::Data<AppState>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    caller.require_reader_of_all()?;
    let keys = web::block(move || list_keys(&state)).await??;
    Ok(HttpResponse::Ok().json(keys))
}

/// Body of `POST /v1/tokens`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewToken {
    /// `admin`, `auditor` or `tenant`.
    #[schema(value_type = String, pattern = "^(?:admin|auditor|tenant)$")]
    pub role: String,
    /// Required for, and only for, tenant tokens.
    pub tenant: Option<String>,
    #[serde(default)]
    pub label: String,
    /// When the token stops working (`YYYY-MM-DDTHH:MM:SSZ`, in the future); absent, it does
    /// not expire. An expired token is answered 401 `token_expired`.
    #[serde(default)]
    #[schema(example = "2027-01-01T00:00:00Z")]
    pub expires_at: Option<String>,
}

/// A new token: the secret is shown this once and stored only as a hash.
#[derive(Serialize, utoipa::ToSchema)]
pub struct CreatedToken {
    pub token: String,
    pub info: TokenInfo,
}

/// Creates an API token (admin), optionally expiring at `expires_at`. A tenant token names a
/// tenant with an account (`POST /v1/tenants`); another is 404 `not_found`.
#[utoipa::path(tag = "admin", request_body = NewToken,
    responses(super::error::RoleForbidden, (status = 201, body = CreatedToken), (status = 400, body = super::error::Problem, content_type = "application/problem+json"), (status = 404, description = "`not_found`: the tenant has no account", body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[post("/tokens")]
pub async fn create_token(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    body: web::Payload,
) -> Result<HttpResponse, ApiError> {
    caller.require_admin()?;
    let t: NewToken = json_body(&req, body).await?;
    access::check_token_label(&t.label).map_err(|m| ApiError::invalid_parameter("label", m))?;
    let role = ApiRole::parse(&t.role)
        .ok_or_else(|| ApiError::invalid_parameter("role", "must be admin, auditor or tenant"))?;
    let expires_at = t
        .expires_at
        .as_deref()
        .map(Timestamp::parse)
        .transpose()
        .map_err(|e| ApiError::invalid_parameter("expires_at", e.to_string()))?;
    let (info, token) = web::block(move || {
        state.ledger.with_account_writer(|c| {
            access::create_token_expiring(c, role, t.tenant.as_deref(), &t.label, expires_at)
        })
    })
    .await??;
    Ok(HttpResponse::Created().json(CreatedToken { token, info }))
}

/// Lists API tokens, without secrets (admin).
#[utoipa::path(tag = "admin", responses(super::error::RoleForbidden, (status = 200, body = Vec<TokenInfo>)), security(("bearer" = [])))]
#[get("/tokens")]
pub async fn list_tokens(
    state: web::Data<AppState>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    caller.require_admin()?;
    let list = state.read(access::list_tokens).await?;
    Ok(HttpResponse::Ok().json(list))
}

/// Revokes an API token (admin).
#[utoipa::path(tag = "admin", params(("id" = String, Path, pattern = "^[0-9a-f]{12}$", description = "The token's id: the 12 lower-case hex digits after `glt_`")),
    responses(super::error::RoleForbidden, (status = 204), (status = 404, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[delete("/tokens/{id}")]
pub async fn revoke_token(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    caller.require_admin()?;
    let id = path.into_inner();
    web::block(move || {
        state
            .ledger
            .with_account_writer(|c| access::revoke_token(c, &id))
    })
    .await??;
    Ok(HttpResponse::NoContent().finish())
}
