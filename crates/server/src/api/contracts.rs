//! Contracts: `POST /v1/contracts` registers a tenant's contract (a `contract_registered`
//! entry, PROTOCOL §5.19: fixed fees per billing period, one-off charges, a minimum spend);
//! `POST /v1/contract-amendments` ends one's term earlier or later (a `contract_amended` entry,
//! §5.21); `GET /v1/contracts` lists a tenant's contracts as amended, with their billing
//! periods and amendments. What a contract charges an invoice is `core::contract`
//! (docs/RATING.md, "Contracts").

use super::auth::Caller;
use super::error::ApiError;
use super::AppState;
use actix_web::{get, post, web, HttpRequest, HttpResponse};
use gpuledger_core::contract::{billing_periods, Contracts};
use gpuledger_core::invoice::Period;
use gpuledger_core::record::{Body, ContractAmended, ContractRegistered, Kind};
use serde::{Deserialize, Serialize};

/// Registers a tenant's contract (admin): `{tenant, contract, currency, region, term_from,
/// term_to, billing_period: month|quarter|year, billing_anchor: calendar|anniversary,
/// fees?: [{name, amount, timing: advance|arrears|once, category, lease?}], commitment?,
/// sla?: {target, credits: [{below, percent}]}}`. A contract never starts in the past or inside
/// an invoiced period of its tenant, and a tenant has at most one contract in force at any
/// instant. A fee's `lease` is one of the tenant's leases; an `sla` holds those leases to an
/// availability per billing period, credited on the invoice (docs/RATING.md, "SLA credits").
#[utoipa::path(tag = "invoices", request_body = ContractRegistered,
    responses(super::error::RoleForbidden, (status = 201, body = super::pricing::Appended), (status = 400, description = "`malformed_json`, `invalid_parameter`, `invalid_field` (the body is not a valid contract) or `refused` (an admission rule refused it); `errors[0]` names the field and reason: `invalid_field`, `quantity_out_of_range`, `unknown_tenant`, `unknown_lease`, `lease_tenant_mismatch`, `price_in_past`, `price_in_invoiced_period`, `contract_overlap`", body = super::error::Problem, content_type = "application/problem+json"), (status = 409, description = "`conflict`: the contract id is registered already, or the first request with this `Idempotency-Key` is still running", body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[post("/contracts")]
pub async fn post_contract(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    super::pricing::append(state, caller, req, payload, Kind::ContractRegistered).await
}

/// Amends a tenant's contract (admin): `{tenant, contract, term_to, reason}` ends its term at
/// `term_to`, earlier (the contract ends early) or later (it is extended). Only what lies
/// ahead changes: the change starts no earlier than the ledger clock less the policy's skew,
/// not inside a billing period any invoice of the tenant holds, and an extension overlaps no
/// other contract of the tenant (docs/PROTOCOL.md §5.21, §6.7). To change fees or a
/// commitment, end the contract and register its successor from that instant.
#[utoipa::path(tag = "invoices", request_body = ContractAmended,
    responses(super::error::RoleForbidden, (status = 201, body = super::pricing::Appended), (status = 400, description = "`malformed_json`, `invalid_parameter`, `invalid_field` (the body is not a valid amendment) or `refused` (an admission rule refused it); `errors[0]` names the field and reason: `invalid_field`, `quantity_out_of_range`, `unknown_tenant`, `unknown_contract`, `price_in_past`, `price_in_invoiced_period`, `contract_overlap`", body = super::error::Problem, content_type = "application/problem+json"), (status = 409, description = "`conflict`: the first request with this `Idempotency-Key` is still running", body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[post("/contract-amendments")]
pub async fn post_contract_amendment(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    super::pricing::append(state, caller, req, payload, Kind::ContractAmended).await
}

/// Whose contracts to list.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ContractQuery {
    /// The tenant (admins and auditors; a tenant's token lists its own). Absent: every
    /// tenant's.
    #[param(value_type = Option<gpuledger_core::ids::IdString>, inline)]
    pub tenant: Option<String>,
}

/// A contract as amended (its `term_to` is the latest amendment's), the index of its entry, its
/// billing periods (clipped to the term) and its amendments.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ContractView {
    pub index: u64,
    #[serde(flatten)]
    pub contract: ContractRegistered,
    pub billing_periods: Vec<Period>,
    /// The contract's `contract_amended` entries, in log order.
    pub amendments: Vec<AmendmentView>,
}

/// One amendment of a contract: its entry, the term's end it set and why.
#[derive(Serialize, utoipa::ToSchema)]
pub struct AmendmentView {
    pub index: u64,
    pub term_to: gpuledger_core::time::Timestamp,
    pub reason: String,
}

/// The contracts, in log order.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ContractList {
    pub contracts: Vec<ContractView>,
}

/// Lists contracts with their billing periods: a tenant's own, or (admins and auditors) a
/// named tenant's or every tenant's.
#[utoipa::path(tag = "invoices", params(ContractQuery),
    responses((status = 200, body = ContractList), (status = 404, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[get("/contracts")]
pub async fn get_contracts(
    state: web::Data<AppState>,
    caller: Caller,
    q: web::Query<ContractQuery>,
) -> Result<HttpResponse, ApiError> {
    let tenant = caller.tenant_scope(q.into_inner().tenant)?;
    let t = tenant.clone();
    let bodies = state
        .read(move |c| {
            if let Some(t) = &t {
                gpuledger_store::access::require_tenant(c, t)?;
            }
            let size = gpuledger_store::read::head(c)?.0;
            let kinds = [Kind::ContractRegistered, Kind::ContractAmended];
            gpuledger_store::read::bodies_of(c, &kinds, size)
        })
        .await?;
    let mine = |b: &Body| {
        tenant
            .as_ref()
            .is_none_or(|t| Some(t.as_str()) == b.tenant())
    };
    let mut amendments: std::collections::HashMap<String, Vec<AmendmentView>> = Default::default();
    for (index, b) in bodies.iter().filter(|(_, b)| mine(b)) {
        if let Body::ContractAmended(a) = b {
            amendments
                .entry(a.contract.clone())
                .or_default()
                .push(AmendmentView {
                    index: *index,
                    term_to: a.term_to,
                    reason: a.reason.clone(),
                });
        }
    }
    let contracts = Contracts::of(bodies.into_iter().filter(|(_, b)| mine(b)))
        .entries()
        .into_iter()
        .map(|(index, c)| ContractView {
            index,
            billing_periods: billing_periods(&c)
                .iter()
                .map(|s| Period {
                    from: s.from,
                    to: s.to,
                })
                .collect(),
            amendments: amendments.remove(&c.contract).unwrap_or_default(),
            contract: c,
        })
        .collect();
    Ok(HttpResponse::Ok().json(ContractList { contracts }))
}
