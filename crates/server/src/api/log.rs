//! The log: its identity, checkpoints, entries and proofs.

use super::auth::Caller;
use super::error::ApiError;
use super::{parse_u64, AppState};
use actix_web::{get, route};
use actix_web::{web, HttpResponse};
use base64::prelude::{Engine, BASE64_STANDARD};
use gpuledger_core::leaf::Leaf;
use gpuledger_core::merkle;
use gpuledger_core::time::Timestamp;
use gpuledger_store::read::{self, CheckpointPage, EntryRow};
use gpuledger_store::StoreError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Most entries one `GET /v1/entries` page returns.
pub const MAX_ENTRIES_PAGE: u64 = 1_000;

/// The log's public identity.
#[derive(Serialize, utoipa::ToSchema)]
pub struct LogInfoView {
    /// Checkpoint origin line, also the signed-note key name.
    pub origin: String,
    /// Standard base64 of the log's Ed25519 public key.
    pub public_key: String,
    /// Signed-note verifier key: `<origin>+<key id hex>+<base64(0x01 ‖ key)>`.
    pub verifier_key: String,
    /// Current number of entries.
    pub size: u64,
}

/// Origin, public key and verifier key of the log (public).
#[utoipa::path(tag = "log", responses((status = 200, body = LogInfoView)))]
#[get("/log")]
pub async fn get_log(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let ledger = state.ledger.clone();
    let size = web::block(move || ledger.reads().size()).await??;
    let info = state.ledger.info();
    Ok(HttpResponse::Ok().json(LogInfoView {
        origin: info.origin.clone(),
        public_key: info.public_key.clone(),
        verifier_key: info.verifier_key.clone(),
        size,
    }))
}

/// The latest signed checkpoint as a C2SP signed note (public, `text/plain`); `HEAD` gives its
/// headers only.
#[utoipa::path(tag = "log", responses((status = 200, description = "C2SP signed note", content_type = "text/plain", body = String),
    (status = 503, description = "`no_checkpoint`: none has been signed yet; `log_rewound`: the database does not hold the largest checkpoint this log published (ops/runbooks/log-rewound.md)", body = super::error::Problem, content_type = "application/problem+json")))]
#[route("/checkpoint", method = "GET", method = "HEAD")]
pub async fn get_checkpoint(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    Ok(HttpResponse::Ok()
        .content_type("text/plain; charset=utf-8")
        .body(latest_note(&state).await?))
}

/// The latest checkpoint's signed note with the cosignatures gathered for it (here and at the
/// root's `/checkpoint`). A public GET only reads: the ledger signs its first checkpoint when
/// it opens.
pub(crate) async fn latest_note(state: &web::Data<AppState>) -> Result<String, ApiError> {
    // A rewound database's latest checkpoint is older than what was published (or of another
    // history): the log serves no checkpoint until it holds the published tree again.
    if let Some(r) = state.ledger.rewound() {
        return Err(StoreError::LogRewound(Box::new(r)).into());
    }
    let ledger = state.ledger.clone();
    let (_, note) = web::block(move || ledger.reads().latest_checkpoint())
        .await??
        .ok_or_else(|| {
            ApiError::unavailable("no_checkpoint", "no checkpoint has been signed yet", 1)
        })?;
    Ok(note)
}

/// Most checkpoints one `GET /v1/checkpoints` page returns.
pub const MAX_CHECKPOINTS_PAGE: u64 = 1_000;
/// Checkpoints per page when `limit` is not given.
pub const DEFAULT_CHECKPOINTS_PAGE: u64 = 100;

/// One stored checkpoint.
#[derive(Serialize, utoipa::ToSchema)]
pub struct CheckpointView {
    /// Tree size the checkpoint commits to.
    pub size: u64,
    /// Standard base64 of the root hash of the tree of `size` entries.
    pub root: String,
    /// The complete C2SP signed note (checkpoint body, blank line, signature lines): the log's
    /// signature, then the `cosignature/v1` lines of the witnesses gathered for it; verify it
    /// with the log's verifier key (and the witnesses' keys).
    pub note: String,
    /// When the ledger signed it (`YYYY-MM-DDTHH:MM:SSZ`).
    pub signed_at: String,
}

/// A page of stored checkpoints.
#[derive(Serialize, utoipa::ToSchema)]
pub struct CheckpointsPage {
    /// Newest first, or oldest first with `after`.
    pub checkpoints: Vec<CheckpointView>,
    /// The request for the next page in the same order, when this page is full (it may then
    /// be empty).
    pub next: Option<String>,
}

/// Query of `GET /v1/checkpoints`.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CheckpointsQuery {
    /// Only checkpoints with a size above this one, oldest first (for following the log).
    #[param(value_type = Option<u64>, maximum = 9007199254740991.0)]
    pub after: Option<String>,
    /// Only checkpoints with a size below this one, newest first (for paging back in time).
    /// Not together with `after`.
    #[param(value_type = Option<u64>, maximum = 9007199254740991.0)]
    pub before: Option<String>,
    /// Checkpoints per page, 1 to 1000; default 100.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub limit: Option<String>,
}

/// Stored signed checkpoints (public). Without `after` or `before`: the newest first.
/// `before=S`: sizes below S, newest first. `after=S`: sizes above S, oldest first.
#[utoipa::path(tag = "log", params(CheckpointsQuery),
    responses((status = 200, body = CheckpointsPage), (status = 400, body = super::error::Problem, content_type = "application/problem+json")))]
#[get("/checkpoints")]
pub async fn get_checkpoints(
    state: web::Data<AppState>,
    q: web::Query<CheckpointsQuery>,
) -> Result<HttpResponse, ApiError> {
    let limit = match q.limit.as_deref() {
        Some(l) => parse_u64("limit", l)?,
        None => DEFAULT_CHECKPOINTS_PAGE,
    };
    if !(1..=MAX_CHECKPOINTS_PAGE).contains(&limit) {
        return Err(ApiError::invalid_parameter(
            "limit",
            format!("must be 1 to {MAX_CHECKPOINTS_PAGE}"),
        ));
    }
    let page = match (q.after.as_deref(), q.before.as_deref()) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid_parameter(
                "before",
                "give after or before, not both",
            ))
        }
        (Some(a), None) => CheckpointPage::From(parse_u64("after", a)? + 1),
        (None, Some(b)) => CheckpointPage::Before(parse_u64("before", b)?),
        (None, None) => CheckpointPage::Newest,
    };
    let rows = state
        .read(move |c| read::checkpoints_page(c, page, limit))
        .await?;
    let next = match (rows.last(), rows.len() as u64 == limit) {
        (Some(last), true) => Some(match page {
            CheckpointPage::From(_) => {
                format!("/v1/checkpoints?after={}&limit={limit}", last.size)
            }
            _ => format!("/v1/checkpoints?before={}&limit={limit}", last.size),
        }),
        _ => None,
    };
    let checkpoints = rows
        .into_iter()
        .map(|r| CheckpointView {
            size: r.size,
            root: merkle::encode_hash(&r.root),
            note: r.note,
            signed_at: Timestamp::from_unix(r.created_at)
                .map(|t| t.to_string())
                .unwrap_or_default(),
        })
        .collect();
    Ok(HttpResponse::Ok().json(CheckpointsPage { checkpoints, next }))
}

/// One stored entry, with its leaf bytes so a client can rehash it.
#[derive(Serialize, utoipa::ToSchema)]
pub struct EntryView {
    pub index: u64,
    /// Standard base64 of the canonical leaf bytes.
    pub leaf: String,
    /// Standard base64 of SHA-256(0x00 ‖ leaf).
    pub leaf_hash: String,
    /// The leaf parsed: `{v, index, received_at, prev, envelope}`.
    #[schema(value_type = Leaf)]
    pub entry: Value,
}

fn view(row: &EntryRow) -> Result<EntryView, ApiError> {
    let leaf = Leaf::from_bytes(&row.leaf)
        .map_err(|e| ApiError::Internal(format!("entry {}: {e}", row.idx)))?;
    Ok(EntryView {
        index: row.idx as u64,
        leaf: BASE64_STANDARD.encode(&row.leaf),
        leaf_hash: merkle::encode_hash(&merkle::leaf_hash(&row.leaf)),
        entry: serde_json::to_value(&leaf).map_err(|e| ApiError::Internal(e.to_string()))?,
    })
}

/// One entry. Tenants see only their own entries; others' are 404.
#[utoipa::path(tag = "log",
    params(("index" = u64, Path, maximum = 9007199254740991.0, description = "Entry index")),
    responses((status = 200, body = EntryView), (status = 404, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[get("/entries/{index}")]
pub async fn get_entry(
    state: web::Data<AppState>,
    caller: Caller,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let index = parse_u64("index", &path)?;
    let ledger = state.ledger.clone();
    let rows = web::block(move || ledger.reads().entries(index, index.saturating_add(1))).await??;
    let row = rows
        .first()
        .filter(|r| caller.may_see(r.tenant.as_deref()))
        .ok_or_else(|| ApiError::NotFound(format!("entry {index}")))?;
    Ok(HttpResponse::Ok().json(view(row)?))
}

/// A page of entries.
#[derive(Serialize, utoipa::ToSchema)]
pub struct EntriesPage {
    pub start: u64,
    pub end: u64,
    /// For tenants, only their own entries within [start, end).
    pub entries: Vec<EntryView>,
}

/// Query of `GET /v1/entries`.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RangeQuery {
    /// First index (inclusive).
    #[param(value_type = Option<u64>, maximum = 9007199254740991.0)]
    pub start: Option<String>,
    /// Last index (exclusive); at most start + 1000.
    #[param(value_type = Option<u64>, maximum = 9007199254740991.0)]
    pub end: Option<String>,
}

/// Entries with start <= index < end (at most 1000 at a time).
#[utoipa::path(tag = "log", params(RangeQuery),
    responses((status = 200, body = EntriesPage), (status = 400, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[get("/entries")]
pub async fn get_entries(
    state: web::Data<AppState>,
    caller: Caller,
    q: web::Query<RangeQuery>,
) -> Result<HttpResponse, ApiError> {
    let start = parse_u64("start", q.start.as_deref().unwrap_or("0"))?;
    let end = match q.end.as_deref() {
        Some(e) => parse_u64("end", e)?,
        None => start.saturating_add(MAX_ENTRIES_PAGE),
    };
    if end < start {
        return Err(ApiError::invalid_parameter(
            "end",
            "must not be below start",
        ));
    }
    if end - start > MAX_ENTRIES_PAGE {
        return Err(ApiError::invalid_parameter(
            "end",
            format!("at most {MAX_ENTRIES_PAGE} entries per page"),
        ));
    }
    let ledger = state.ledger.clone();
    let rows = web::block(move || ledger.reads().entries(start, end)).await??;
    let entries = rows
        .iter()
        .filter(|r| caller.may_see(r.tenant.as_deref()))
        .map(view)
        .collect::<Result<_, _>>()?;
    Ok(HttpResponse::Ok().json(EntriesPage {
        start,
        end,
        entries,
    }))
}

/// An RFC 6962 proof, hashes in standard base64.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ProofView {
    pub hashes: Vec<String>,
    /// Root of the tree of `size` (for inclusion) or `to` (for consistency) entries.
    pub root: String,
}

/// Query of the inclusion proof.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct InclusionQuery {
    /// Entry index.
    #[param(value_type = u64, maximum = 9007199254740991.0)]
    pub index: String,
    /// Tree size; defaults to the latest checkpoint's.
    #[param(value_type = Option<u64>, maximum = 9007199254740991.0)]
    pub size: Option<String>,
}

/// Inclusion proof of entry `index` in the tree of `size` entries (RFC 6962 §2.1.1).
/// Tenants only for their own entries.
#[utoipa::path(tag = "log", params(InclusionQuery),
    responses((status = 200, body = ProofView), (status = 400, body = super::error::Problem, content_type = "application/problem+json"), (status = 404, body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[get("/proofs/inclusion")]
pub async fn get_inclusion(
    state: web::Data<AppState>,
    caller: Caller,
    q: web::Query<InclusionQuery>,
) -> Result<HttpResponse, ApiError> {
    let index = parse_u64("index", &q.index)?;
    let size = q
        .size
        .as_deref()
        .map(|s| parse_u64("size", s))
        .transpose()?;
    let ledger = state.ledger.clone();
    let (proof, root) = web::block(move || -> Result<_, ApiError> {
        let rows = ledger.reads().entries(index, index.saturating_add(1))?;
        let row = rows
            .first()
            .filter(|r| caller.may_see(r.tenant.as_deref()))
            .ok_or_else(|| ApiError::NotFound(format!("entry {index}")))?;
        let size = match size {
            Some(s) => s,
            None => ledger
                .reads()
                .latest_checkpoint()?
                .map(|c| c.0)
                .unwrap_or(0),
        };
        if row.idx as u64 >= size {
            return Err(ApiError::invalid_parameter(
                "size",
                format!("entry {index} is not in a tree of {size} entries"),
            ));
        }
        let proof = ledger
            .reads()
            .inclusion_proof(index, size)
            .map_err(|e| match e {
                StoreError::Refused(m) => ApiError::invalid_parameter("size", m),
                other => other.into(),
            })?;
        Ok((proof, ledger.reads().root_at(size)?))
    })
    .await??;
    Ok(HttpResponse::Ok().json(ProofView {
        hashes: merkle::encode_proof(&proof),
        root: merkle::encode_hash(&root),
    }))
}

/// Query of the consistency proof.
#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ConsistencyQuery {
    /// The earlier tree size.
    #[param(value_type = u64, maximum = 9007199254740991.0)]
    pub from: String,
    /// The later tree size, at most the latest checkpoint's.
    #[param(value_type = u64, maximum = 9007199254740991.0)]
    pub to: String,
}

/// Consistency proof between tree sizes `from` and `to` (RFC 6962 §2.1.2). Public, no token:
/// it reveals only hashes of the tree, which the public tiles (`/tile/...`) reveal anyway, so
/// a witness or monitor without an account can check the log's growth.
#[utoipa::path(tag = "log", params(ConsistencyQuery),
    responses((status = 200, body = ProofView), (status = 400, body = super::error::Problem, content_type = "application/problem+json")))]
#[get("/proofs/consistency")]
pub async fn get_consistency(
    state: web::Data<AppState>,
    q: web::Query<ConsistencyQuery>,
) -> Result<HttpResponse, ApiError> {
    let from = parse_u64("from", &q.from)?;
    let to = parse_u64("to", &q.to)?;
    let ledger = state.ledger.clone();
    let (proof, root) = web::block(move || -> Result<_, ApiError> {
        let proof = ledger
            .reads()
            .consistency_proof(from, to)
            .map_err(|e| match e {
                StoreError::Refused(m) => ApiError::invalid_parameter("to", m),
                other => other.into(),
            })?;
        Ok((proof, ledger.reads().root_at(to)?))
    })
    .await??;
    Ok(HttpResponse::Ok().json(ProofView {
        hashes: merkle::encode_proof(&proof),
        root: merkle::encode_hash(&root),
    }))
}
