//! The fleet: `POST /v1/nodes` registers a GPU server with its region and GPUs (a
//! `node_registered` entry; node keys may then be registered for it, and its records must fit
//! it, PROTOCOL §6.7 fleet); `GET /v1/nodes` lists the registered nodes with the leases on
//! each (admins and auditors).

use super::auth::Caller;
use super::error::ApiError;
use super::AppState;
use actix_web::{get, post, web, HttpRequest, HttpResponse};
use gpuledger_core::record::{Body, Kind, LeaseRegistered, NodeRegistered};
use serde::Serialize;

/// Registers a node (admin): `{node, region, hub?, gpus: [{index, uuid, model}],
/// max_watts_per_gpu}`. A node is registered once; node keys name only registered nodes, and a
/// node's records must name its region, a model it has, at most as many GPUs of it as it has,
/// and no more energy than its GPUs draw (`max_watts_per_gpu`, +5 %).
#[utoipa::path(tag = "fleet", request_body = gpuledger_core::record::NodeRegistered,
    responses(super::error::RoleForbidden, (status = 201, body = super::pricing::Appended), (status = 400, description = "`malformed_json`, `invalid_parameter`, or `refused`: the body is not a valid node (`errors[0]` names the field and reason)", body = super::error::Problem, content_type = "application/problem+json"), (status = 409, description = "`conflict`: the node is registered already, or the first request with this `Idempotency-Key` is still running", body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[post("/nodes")]
pub async fn post_node(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    super::pricing::append_entry(
        state,
        caller,
        req,
        payload,
        Kind::NodeRegistered,
        gpuledger_store::Ledger::append_ledger_entry,
    )
    .await
}

/// A registered node and the index of its entry, with the leases that name it.
#[derive(Serialize, utoipa::ToSchema)]
pub struct NodeView {
    pub index: u64,
    #[serde(flatten)]
    pub node: NodeRegistered,
    /// The leases naming the node, by index (each whole: a lease may cover several nodes).
    pub leases: Vec<LeaseView>,
}

/// A lease registration and the index of its entry.
#[derive(Serialize, utoipa::ToSchema)]
pub struct LeaseView {
    pub index: u64,
    #[serde(flatten)]
    pub lease: LeaseRegistered,
}

/// The registered nodes, by node id.
#[derive(Serialize, utoipa::ToSchema)]
pub struct NodeList {
    pub nodes: Vec<NodeView>,
}

/// Lists the registered nodes with their GPUs and the leases on each (admins and auditors).
#[utoipa::path(tag = "fleet",
    responses((status = 200, body = NodeList), super::error::RoleForbidden),
    security(("bearer" = [])))]
#[get("/nodes")]
pub async fn get_nodes(
    state: web::Data<AppState>,
    caller: Caller,
) -> Result<HttpResponse, ApiError> {
    caller.require_reader_of_all()?;
    let bodies = state
        .read(|c| {
            let size = gpuledger_store::read::head(c)?.0;
            gpuledger_store::read::bodies_of(
                c,
                &[Kind::NodeRegistered, Kind::LeaseRegistered],
                size,
            )
        })
        .await?;
    let leases: Vec<(u64, &LeaseRegistered)> = bodies
        .iter()
        .filter_map(|(i, b)| match b {
            Body::LeaseRegistered(l) => Some((*i, l)),
            _ => None,
        })
        .collect();
    let mut nodes: Vec<NodeView> = bodies
        .iter()
        .filter_map(|(index, b)| match b {
            Body::NodeRegistered(node) => Some(NodeView {
                index: *index,
                node: node.clone(),
                leases: leases
                    .iter()
                    .filter(|(_, l)| l.names_node(&node.node))
                    .map(|(i, l)| LeaseView {
                        index: *i,
                        lease: (*l).clone(),
                    })
                    .collect(),
            }),
            _ => None,
        })
        .collect();
    nodes.sort_by(|a, b| a.node.node.cmp(&b.node.node));
    Ok(HttpResponse::Ok().json(NodeList { nodes }))
}
