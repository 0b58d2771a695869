//! The fleet: `POST /v1/nodes` registers a GPU server with its region and GPUs (a
//! `node_registered` entry; node keys may then be registered for it, and its records must fit
//! it, PROTOCOL §6.7 fleet); `POST /v1/node-updates` adds capacity to one (a `node_updated`
//! entry: GPUs, a replaced board, a higher power limit); `GET /v1/nodes` lists the registered
//! nodes as their entries made them, with the leases on each (admins and auditors).

use super::auth::Caller;
use super::error::ApiError;
use super::AppState;
use actix_web::{get, post, web, HttpRequest, HttpResponse};
use gpuledger_core::fleet::FleetLog;
use gpuledger_core::record::{Body, Kind, LeaseRegistered, NodeRegistered, NodeUpdated};
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

/// Adds capacity to a registered node (admin): `{node, gpus?: [{index, uuid, model, mig?}],
/// max_watts_per_gpu?}`. A GPU under an index the node lacks is added; one under an index it
/// has is a replaced board (same model and partition, a UUID the node never listed); a power
/// limit only rises. Records logged before the update are judged, by every verifier, by the
/// node as it was when they were logged.
#[utoipa::path(tag = "fleet", request_body = gpuledger_core::record::NodeUpdated,
    responses(super::error::RoleForbidden, (status = 201, body = super::pricing::Appended), (status = 400, description = "`malformed_json`, `invalid_parameter`, or `refused`: the body is not a valid update of a registered node (`errors[0]` names the field and reason: `unknown_node`, `invalid_field`, `quantity_out_of_range`)", body = super::error::Problem, content_type = "application/problem+json"), (status = 409, description = "`conflict`: the first request with this `Idempotency-Key` is still running", body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[post("/node-updates")]
pub async fn post_node_update(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse, ApiError> {
    super::pricing::append(state, caller, req, payload, Kind::NodeUpdated).await
}

/// A registered node as its entries made it: its registration's id, region and hub, its GPUs
/// now (each replaced board with its latest UUID) and its power limit now; the index of its
/// `node_registered` entry, its updates, and the leases that name it.
#[derive(Serialize, utoipa::ToSchema)]
pub struct NodeView {
    pub index: u64,
    #[serde(flatten)]
    pub node: NodeRegistered,
    /// The leases naming the node, by index (each whole: a lease may cover several nodes).
    pub leases: Vec<LeaseView>,
    /// The node's `node_updated` entries, by index; absent when it has none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub updates: Vec<UpdateView>,
}

/// A `node_updated` entry and its index.
#[derive(Serialize, utoipa::ToSchema)]
pub struct UpdateView {
    pub index: u64,
    #[serde(flatten)]
    pub update: NodeUpdated,
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

/// Lists the registered nodes with their GPUs now, their updates and the leases on each
/// (admins and auditors).
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
                &[
                    Kind::NodeRegistered,
                    Kind::NodeUpdated,
                    Kind::LeaseRegistered,
                ],
                size,
            )
        })
        .await?;
    let mut fleet = FleetLog::default();
    let mut updates: std::collections::HashMap<&str, Vec<UpdateView>> = Default::default();
    for (i, b) in &bodies {
        fleet.apply(*i, b);
        if let Body::NodeUpdated(u) = b {
            // The admitted ones only: an update of a node registered before it.
            if fleet.node(&u.node).is_some_and(|n| n.registered_at() < *i) {
                updates.entry(&u.node).or_default().push(UpdateView {
                    index: *i,
                    update: u.clone(),
                });
            }
        }
    }
    let mut nodes: Vec<NodeView> = fleet
        .nodes()
        .map(|n| {
            let name = &n.registration().node;
            let now = n.at(u64::MAX);
            let mut leases: Vec<LeaseView> = fleet
                .leases_on(name)
                .map(|(l, i)| LeaseView {
                    index: i,
                    lease: l.clone(),
                })
                .collect();
            leases.sort_by_key(|l| l.index);
            NodeView {
                index: n.registered_at(),
                node: NodeRegistered {
                    gpus: n.current_gpus().iter().map(|(g, _)| g.clone()).collect(),
                    max_watts_per_gpu: now.max_watts_per_gpu(),
                    ..n.registration().clone()
                },
                leases,
                updates: updates.remove(name.as_str()).unwrap_or_default(),
            }
        })
        .collect();
    nodes.sort_by(|a, b| a.node.node.cmp(&b.node.node));
    Ok(HttpResponse::Ok().json(NodeList { nodes }))
}
