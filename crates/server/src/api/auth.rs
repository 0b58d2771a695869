//! Bearer-token authentication and the role rules.

use super::error::ApiError;
use super::AppState;
use actix_web::{dev::Payload, web, FromRequest, HttpRequest};
use gpuledger_store::access::{self, ApiRole, Authentication, Principal};
use std::future::Future;
use std::pin::Pin;

/// An authenticated caller (any role). Extracting it answers 401 without a valid token:
/// `token_expired` or `token_revoked` to the holder of a whole token that expired or was
/// revoked, `unauthorized` for anything else.
pub struct Caller(pub Principal);

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let token = req
            .headers()
            .get("Authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim().to_owned());
        let state = req.app_data::<web::Data<AppState>>().cloned();
        Box::pin(async move {
            let token = token.ok_or(ApiError::Unauthorized)?;
            let state = state.ok_or_else(|| ApiError::Internal("no app state".into()))?;
            let found = state
                .read(move |c| access::authenticate_token(c, &token))
                .await?;
            match found {
                Authentication::Valid(p) => Ok(Caller(p)),
                Authentication::Expired => Err(ApiError::TokenExpired),
                Authentication::Revoked => Err(ApiError::TokenRevoked),
                Authentication::Unknown => Err(ApiError::Unauthorized),
            }
        })
    }
}

impl Caller {
    /// Admins only.
    pub fn require_admin(&self) -> Result<(), ApiError> {
        match self.0.role {
            ApiRole::Admin => Ok(()),
            _ => Err(ApiError::Forbidden("this needs an admin token".into())),
        }
    }

    /// Admins and auditors.
    pub fn require_reader_of_all(&self) -> Result<(), ApiError> {
        match self.0.role {
            ApiRole::Admin | ApiRole::Auditor => Ok(()),
            ApiRole::Tenant => Err(ApiError::Forbidden(
                "this needs an admin or auditor token".into(),
            )),
        }
    }

    /// The tenant this caller is confined to, if any.
    pub fn confined_to(&self) -> Option<&str> {
        match self.0.role {
            ApiRole::Tenant => self.0.tenant.as_deref(),
            _ => None,
        }
    }

    /// The tenant a tenant-scoped query is about: a tenant caller's own (another tenant's id is
    /// 404, as if it did not exist); for admins and auditors the one asked for, if any.
    pub fn tenant_scope(&self, asked: Option<String>) -> Result<Option<String>, ApiError> {
        // A tenant that is no identifier (`tenant=`) names nothing: 400, never an empty view.
        if let Some(t) = &asked {
            gpuledger_core::ids::check_id(t)
                .map_err(|e| ApiError::invalid_parameter("tenant", e.to_string()))?;
        }
        match (self.confined_to(), asked) {
            (Some(own), Some(t)) if t != own => Err(ApiError::NotFound(format!("tenant {t}"))),
            (Some(own), _) => Ok(Some(own.to_owned())),
            (None, t) => Ok(t),
        }
    }

    /// Whether the caller may see data of `tenant` (`None`: data of no tenant, which tenant
    /// callers may not see).
    pub fn may_see(&self, tenant: Option<&str>) -> bool {
        match self.confined_to() {
            None => true,
            Some(own) => tenant == Some(own),
        }
    }

    /// A stored document of a tenant, `(tenant, json)`, if the caller may see it: another
    /// tenant's answers 404 (`what` not found), exactly like one that does not exist.
    pub fn visible(
        &self,
        row: Option<(String, String)>,
        what: impl FnOnce() -> String,
    ) -> Result<String, ApiError> {
        match row {
            Some((tenant, json)) if self.may_see(Some(&tenant)) => Ok(json),
            _ => Err(ApiError::NotFound(what())),
        }
    }
}
