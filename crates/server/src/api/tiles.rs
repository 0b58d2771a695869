//! The C2SP tlog-tiles view of the log, at the server root (docs/PROTOCOL.md §17): the latest
//! checkpoint at `/checkpoint`, hash tiles at `/tile/<L>/<N>[.p/<W>]`, both public, and entry
//! bundles at `/tile/entries/<N>[.p/<W>]`, for auditors and admins only (the leaves are
//! tenants' records). A tile is served once the latest checkpoint covers it
//! ([`TilePath::within`]); full tiles never change and are cached for a year.
//!
//! Each answers `HEAD` as it answers `GET`, with the same status and headers (`Content-Length`
//! included) and no body (actix-http leaves the body out), for caches and monitors that check
//! for a new checkpoint or a tile without fetching it.

use super::auth::Caller;
use super::error::ApiError;
use super::AppState;
use actix_web::http::header::{CACHE_CONTROL, VARY};
use actix_web::{route, web, HttpRequest, HttpResponse};
use gpuledger_core::tiles::{self, TileKind, TilePath};
use gpuledger_store::reads::TileData;

/// `Cache-Control` of `/checkpoint`: it changes with every checkpoint, so caches keep it for
/// a few seconds at most (C2SP tlog-tiles).
pub const CHECKPOINT_CACHE_CONTROL: &str = "public, max-age=2";
/// `Cache-Control` of a full hash tile: its bytes never change.
pub const FULL_TILE_CACHE_CONTROL: &str = "public, max-age=31536000, immutable";
/// `Cache-Control` of a partial hash tile: its bytes never change either, but a client should
/// move on to the wider tile of a newer checkpoint, so caches keep it for a minute.
pub const PARTIAL_TILE_CACHE_CONTROL: &str = "public, max-age=60";
/// `Cache-Control` of a full entry bundle: immutable, but only for the authorised client's
/// own cache (shared caches must not keep an answer given to a token).
pub const FULL_BUNDLE_CACHE_CONTROL: &str = "private, max-age=31536000, immutable";
/// `Cache-Control` of a partial entry bundle.
pub const PARTIAL_BUNDLE_CACHE_CONTROL: &str = "private, max-age=60";

/// The latest signed checkpoint (C2SP tlog-checkpoint signed note) at the server root, where
/// C2SP tlog-tiles clients and witnesses look for it. Public, no token; `Cache-Control`
/// allows a few seconds.
#[utoipa::path(tag = "tiles", operation_id = "tiles_checkpoint",
    responses((status = 200, description = "C2SP signed note", content_type = "text/plain; charset=utf-8", body = String),
              (status = 503, description = "`no_checkpoint`: none has been signed yet; `log_rewound`: the database does not hold the largest checkpoint this log published (ops/runbooks/log-rewound.md)", body = super::error::Problem, content_type = "application/problem+json")))]
#[route("/checkpoint", method = "GET", method = "HEAD")]
pub async fn checkpoint(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let note = super::log::latest_note(&state).await?;
    Ok(HttpResponse::Ok()
        .content_type("text/plain; charset=utf-8")
        .insert_header((CACHE_CONTROL, CHECKPOINT_CACHE_CONTROL))
        .body(note))
}

/// The tile the request's path names, refusing a malformed or non-canonical one with 400.
fn requested_tile(req: &HttpRequest) -> Result<TilePath, ApiError> {
    let path = req.path().strip_prefix('/').unwrap_or_default();
    TilePath::parse(path).map_err(|e| ApiError::bad_request("malformed_tile_path", e.to_string()))
}

/// Any other path under `/tile/` (a level without an index, `/tile/` itself): 400
/// `malformed_tile_path`, like every path that names no tile. Not in the OpenAPI document.
pub async fn malformed(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    requested_tile(&req)?;
    // Every path that parses is routed to `hash_tile` or `entry_bundle` first.
    Err(ApiError::NotFound("route".into()))
}

/// Reads `tile` if the latest checkpoint covers it; 404 if it does not (yet).
async fn read_tile(state: &web::Data<AppState>, tile: TilePath) -> Result<TileData, ApiError> {
    let ledger = state.ledger.clone();
    web::block(move || ledger.reads().tile(&tile))
        .await??
        .ok_or_else(|| ApiError::NotFound(tile.path()))
}

/// A C2SP hash tile: the Merkle tree hashes `MTH(D[(N·256 + i)·256^L : (N·256 + i + 1)·256^L])`
/// for `i` below the width, 32 bytes each (C2SP tlog-tiles, height 8). Public, no token.
/// `<N>` is written in three-digit elements, all but the last prefixed with `x`
/// (`x001/x234/067`); `.p/<W>` names a partial tile of width 1 to 255. Served once the
/// latest checkpoint covers every hash it holds: a full tile with `Cache-Control: public,
/// max-age=31536000, immutable`, a partial one for 60 seconds. A malformed or non-canonical
/// path is 400 `malformed_tile_path`; a tile the latest checkpoint does not cover, 404.
#[utoipa::path(tag = "tiles", operation_id = "hash_tile",
    params(("level" = String, Path, pattern = "^(?:[0-9]|[1-5][0-9]|6[0-3])$", description = "`<L>`, 0 to 63 without leading zeros, e.g. `0`"),
           ("index" = String, Path, pattern = "^[0-9]{3}$", description = "`<N>` of a tile below 1000, e.g. `005`. The server also serves the forms with several segments (`x001/234`) and partial tiles (`005.p/17`), which hold a `/` and so cannot be one path parameter")),
    responses((status = 200, description = "The tile's hashes, 32 bytes each", content_type = "application/octet-stream"),
              (status = 400, description = "`malformed_tile_path`", body = super::error::Problem, content_type = "application/problem+json"),
              (status = 404, description = "The latest checkpoint does not cover this tile", body = super::error::Problem, content_type = "application/problem+json")))]
#[route("/tile/{level}/{index:.*}", method = "GET", method = "HEAD")]
pub async fn hash_tile(
    state: web::Data<AppState>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let tile = requested_tile(&req)?;
    let TileData::Hashes(bytes) = read_tile(&state, tile).await? else {
        return Err(ApiError::Internal(format!(
            "{} did not read as hashes",
            tile.path()
        )));
    };
    debug_assert_eq!(bytes.len(), tile.width() as usize * tiles::HASH_BYTES);
    let cache = if tile.is_full() {
        FULL_TILE_CACHE_CONTROL
    } else {
        PARTIAL_TILE_CACHE_CONTROL
    };
    Ok(HttpResponse::Ok()
        .content_type("application/octet-stream")
        .insert_header((CACHE_CONTROL, cache))
        .body(bytes))
}

/// A C2SP entry bundle: the leaves `D[N·256 : N·256 + W]`, each as a big-endian `uint16`
/// length and the leaf bytes; each leaf hashes (`SHA-256(0x00 ‖ leaf)`) to the matching hash
/// of level-0 tile `N`. The leaves are tenants' records, so only admin and auditor tokens may
/// read them (401 without a token, 403 with a tenant's); anyone can check them against the
/// public hash tiles. Every leaf fits the `uint16` length: an envelope is at most 8 KiB.
/// Served once the latest checkpoint covers it, with `Cache-Control: private`; gzip-compressed
/// when the client accepts it (C2SP: bundles SHOULD be compressed at the HTTP layer).
#[utoipa::path(tag = "tiles", operation_id = "entry_bundle",
    params(("index" = String, Path, pattern = "^[0-9]{3}$", description = "`<N>` of a bundle below 1000, e.g. `005`. The server also serves the forms with several segments (`x001/234`) and partial bundles (`005.p/17`), which hold a `/` and so cannot be one path parameter")),
    responses((status = 200, description = "Length-prefixed leaves", content_type = "application/octet-stream"),
              (status = 400, description = "`malformed_tile_path`", body = super::error::Problem, content_type = "application/problem+json"),
              (status = 401, description = "No valid token", body = super::error::Problem, content_type = "application/problem+json"),
              (status = 403, description = "A tenant's token", body = super::error::Problem, content_type = "application/problem+json"),
              (status = 404, description = "The latest checkpoint does not cover this bundle", body = super::error::Problem, content_type = "application/problem+json")),
    security(("bearer" = [])))]
#[route(
    "/tile/entries/{index:.*}",
    method = "GET",
    method = "HEAD",
    wrap = "actix_web::middleware::Compress::default()"
)]
pub async fn entry_bundle(
    state: web::Data<AppState>,
    caller: Caller,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    caller.require_reader_of_all()?;
    let tile = requested_tile(&req)?;
    debug_assert_eq!(tile.kind(), TileKind::Entries);
    let TileData::Leaves(leaves) = read_tile(&state, tile).await? else {
        return Err(ApiError::Internal(format!(
            "{} did not read as leaves",
            tile.path()
        )));
    };
    // Cannot fail while envelopes are at most MAX_ENVELOPE_BYTES (asserted in core::tiles);
    // a leaf over 65,535 bytes would be a corrupt log, and is said so rather than cut.
    let bytes = tiles::encode_bundle(leaves.iter().map(Vec::as_slice))
        .map_err(|e| ApiError::Internal(format!("{}: {e}", tile.path())))?;
    let cache = if tile.is_full() {
        FULL_BUNDLE_CACHE_CONTROL
    } else {
        PARTIAL_BUNDLE_CACHE_CONTROL
    };
    Ok(HttpResponse::Ok()
        .content_type("application/octet-stream")
        .insert_header((CACHE_CONTROL, cache))
        .insert_header((VARY, "Authorization"))
        .body(bytes))
}
