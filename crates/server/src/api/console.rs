//! The web console (`/console/`): plain HTML, CSS and JavaScript modules from `assets/console/`,
//! embedded in the binary at build time (rust-embed, with `debug-embed` so debug builds embed
//! them too), served with their content types, a strong `ETag` (a 304 for a matching
//! `If-None-Match`), `Cache-Control: no-cache` (revalidate every time: the names carry no
//! hash) and a strict Content-Security-Policy (`default-src 'self'`: nothing from another
//! host, no inline script or style). `GET /` redirects to `/console/`.
//!
//! These routes are not API operations: they are registered with plain actix routes (like
//! `/tile/...`'s fallback), so they stay out of the OpenAPI document. The console itself talks
//! to the server only through the public `/v1` API with the user's bearer token
//! (docs/CONSOLE.md).

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use rust_embed::RustEmbed;

/// The console's files, embedded from `assets/console/` (the verifier module in
/// `assets/console/verify/` among them).
#[derive(RustEmbed)]
#[folder = "../../assets/console/"]
struct Assets;

/// The Content-Security-Policy of every console answer: everything from this origin only, no
/// inline scripts or styles, no plugins, no framing, no `<base>`; downloads are `blob:` URLs
/// made by the page (which navigation, not CSP, governs).
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; worker-src 'self'; \
     object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Folders of `assets/console/` that are not served: the verifier's Node tests.
pub const NOT_SERVED: [&str; 1] = ["verify/test/"];

/// Where `/` and `/console` send a browser.
pub const CONSOLE_PATH: &str = "/console/";

/// Registers `/`, `/console` and `/console/{file}` (GET and HEAD) as plain routes, outside the
/// OpenAPI document.
pub fn register(cfg: &mut utoipa_actix_web::service_config::ServiceConfig) {
    let get_or_head = || {
        web::route()
            .guard(actix_web::guard::Any(actix_web::guard::Get()).or(actix_web::guard::Head()))
    };
    cfg.route("/", get_or_head().to(redirect))
        .route("/console", get_or_head().to(redirect))
        .route("/console/{file:.*}", get_or_head().to(file));
}

/// `GET /` and `GET /console`: 302 to `/console/`.
async fn redirect() -> HttpResponse {
    HttpResponse::Found()
        .insert_header((header::LOCATION, CONSOLE_PATH))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .finish()
}

/// `GET /console/{file}`: an embedded file (`index.html` for the empty name), or a 404 problem.
async fn file(
    req: HttpRequest,
    name: web::Path<String>,
) -> Result<HttpResponse, super::error::ApiError> {
    let name = name.into_inner();
    let name = if name.is_empty() {
        "index.html".to_owned()
    } else {
        name
    };
    // rust-embed resolves names inside its folder only; `..` and absolute names find nothing.
    let found = Assets::get(&name)
        .filter(|_| {
            !name
                .split('/')
                .any(|part| part.is_empty() || part == ".." || part == ".")
                && !NOT_SERVED.iter().any(|dir| name.starts_with(dir))
        })
        .ok_or_else(|| super::error::ApiError::NotFound(format!("console file {name}")))?;
    let etag = format!("\"{}\"", hex::encode(&found.metadata.sha256_hash()[..16]));
    let matches = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut response = if matches {
        HttpResponse::NotModified()
    } else {
        HttpResponse::Ok()
    };
    response
        .insert_header((header::ETAG, etag))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("Content-Security-Policy", CONTENT_SECURITY_POLICY))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"));
    if matches {
        return Ok(response.finish());
    }
    response.content_type(content_type(&name));
    Ok(match found.data {
        std::borrow::Cow::Borrowed(bytes) => response.body(bytes),
        std::borrow::Cow::Owned(bytes) => response.body(bytes),
    })
}

/// The content type of a console file, by its extension (the kinds the console ships).
pub fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("json") => "application/json",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("ico") => "image/x-icon",
        Some("wasm") => "application/wasm",
        Some("txt" | "md") => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}
