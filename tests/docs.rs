//! The API reference at `/docs`: Swagger UI, served by gpuledger from its own binary. The page
//! and every file it loads come from the server itself (no other host, no CDN), each with the
//! content type of what it is, and Swagger UI is set to render this server's /openapi.json.

mod common;

use common::*;

/// The values of the `src="…"` and `href="…"` attributes of an HTML page.
fn references(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    for attribute in ["src=\"", "href=\""] {
        let mut rest = html;
        while let Some(at) = rest.find(attribute) {
            let value = &rest[at + attribute.len()..];
            let end = value.find('"').expect("attribute value is closed");
            out.push(value[..end].to_owned());
            rest = &value[end..];
        }
    }
    out
}

/// The content type a file of the page must be served with, by its name.
fn expected_type(path: &str) -> &'static str {
    match path.rsplit('.').next() {
        Some("js") => "text/javascript",
        Some("css") => "text/css",
        Some("png") => "image/png",
        Some("json") => "application/json",
        _ => panic!("{path}: a reference of unexpected kind"),
    }
}

/// The `http://` and `https://` URLs in `text` that name a script or style sheet, which the
/// code could load from another host (XML namespaces, licence links and the like are not).
fn remote_code_urls(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for scheme in ["http://", "https://"] {
        let mut rest = text;
        while let Some(at) = rest.find(scheme) {
            let url: String = rest[at..]
                .chars()
                .take_while(|c| !matches!(c, '"' | '\'' | '`' | ' ' | ')' | '\n' | '<' | '>'))
                .collect();
            let path = url.split(['?', '#']).next().unwrap_or_default();
            if [".js", ".mjs", ".css"].iter().any(|e| path.ends_with(e)) {
                out.push(url.clone());
            }
            rest = &rest[at + scheme.len()..];
        }
    }
    out
}

/// The status of `GET path`, the path sent byte for byte as given.
fn raw_status(base: &str, path: &str) -> u16 {
    use std::io::{Read, Write};
    let host = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(host).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer);
    answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{path}: no status in {answer}"))
}

#[test]
fn docs_is_swagger_ui_served_from_this_server_only() {
    let db = common::sqlite();
    let log = init(&db);
    let srv = log.serve();
    let h = srv.http();

    let page = h.get("/docs", None);
    assert_eq!(page.status, 200, "{}", page.lossy());
    assert!(
        page.content_type.starts_with("text/html"),
        "{}",
        page.content_type
    );
    let html = page.text();
    // `/docs/` is the same page (its references are absolute: they resolve the same from both).
    let slash = h.get("/docs/", None);
    assert_eq!(slash.status, 200);
    assert!(slash.content_type.starts_with("text/html"));
    assert_eq!(slash.text(), html);

    // Nothing on the page names another host, and it loads Swagger UI's script and style.
    for external in [
        "http://",
        "https://",
        "src=\"//",
        "href=\"//",
        "@import",
        "url(",
    ] {
        assert!(
            !html.contains(external),
            "the page holds {external:?}:\n{html}"
        );
    }
    let refs = references(&html);
    for must in [
        "/docs/swagger-ui-bundle.js",
        "/docs/swagger-ui-standalone-preset.js",
        "/docs/swagger-initializer.js",
        "/docs/swagger-ui.css",
    ] {
        assert!(
            refs.iter().any(|r| r == must),
            "the page does not load {must}: {refs:?}"
        );
    }

    // Every reference is a path on this server, served 200 with the type of what it is; no
    // script or style sheet it loads names another host's script or style sheet, and no
    // style sheet imports or loads anything but inline data.
    let mut scripts = 0;
    for r in &refs {
        assert!(
            r.starts_with('/') && !r.starts_with("//"),
            "{r} is not a path on this server"
        );
        let file = h.get(r, None);
        assert_eq!(file.status, 200, "{r}: {}", file.lossy());
        assert_eq!(file.content_type, expected_type(r), "{r}");
        assert!(!file.body.is_empty(), "{r} is empty");
        if r.ends_with(".js") || r.ends_with(".css") {
            let text = file.text();
            let remote = remote_code_urls(&text);
            assert!(
                remote.is_empty(),
                "{r} names code on another host: {remote:?}"
            );
            scripts += usize::from(r.ends_with(".js"));
        }
        if r.ends_with(".css") {
            let text = file.text();
            assert!(!text.contains("@import"), "{r} imports a style sheet");
            let mut rest = text.as_str();
            while let Some(at) = rest.find("url(") {
                rest = &rest[at + 4..];
                let target = rest.trim_start_matches(['"', '\'']);
                assert!(
                    target.starts_with("data:"),
                    "{r} loads {}",
                    &target[..target.len().min(60)]
                );
            }
        }
    }
    assert_eq!(scripts, 3);

    // Swagger UI is the real one (its bundle defines `SwaggerUIBundle`), and its settings point
    // it at this server's document, with the online validator (another host) turned off.
    let bundle = h.get("/docs/swagger-ui-bundle.js", None).text();
    assert!(bundle.len() > 500_000 && bundle.contains("SwaggerUIBundle"));
    let init = h.get("/docs/swagger-initializer.js", None).text();
    let settings: serde_json::Value = {
        let start = init
            .find("SwaggerUIBundle({")
            .expect("the initializer calls SwaggerUIBundle")
            + 16;
        let end = init[start..]
            .find("\n    presets:")
            .expect("Swagger UI's presets follow")
            + start;
        serde_json::from_str(&format!(
            "{}}}",
            init[start..end].trim_end().trim_end_matches(',')
        ))
        .unwrap_or_else(|e| panic!("settings are not JSON ({e}):\n{init}"))
    };
    assert_eq!(settings["url"], "/openapi.json", "{init}");
    assert_eq!(settings["validatorUrl"], "none", "{init}");
    assert_eq!(settings["dom_id"], "#swagger-ui", "{init}");
    assert!(html.contains("id=\"swagger-ui\""));
    for external in ["http://", "https://"] {
        assert!(
            !init.contains(external),
            "the initializer names {external}:\n{init}"
        );
    }
    // The document it renders is served, to everyone (the page is public).
    assert_eq!(
        h.get("/openapi.json", None).ok_json(200)["openapi"],
        "3.1.0"
    );

    // Compressed for browsers that accept it, to the same bytes.
    let mut gzipped = h
        .agent
        .get(format!("{}/docs/swagger-ui-bundle.js", h.base))
        .header("Accept-Encoding", "gzip")
        .call()
        .unwrap();
    assert_eq!(gzipped.headers().get("Content-Encoding").unwrap(), "gzip");
    let compressed = gzipped.body_mut().read_to_vec().unwrap();
    let mut unzipped = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(&compressed[..]),
        &mut unzipped,
    )
    .unwrap();
    assert!(unzipped == bundle, "the gzip answer is not the bundle");
    assert!(
        compressed.len() < bundle.len() / 2,
        "{} bytes",
        compressed.len()
    );
    eprintln!(
        "swagger-ui-bundle.js: {} bytes, {} gzipped",
        bundle.len(),
        compressed.len()
    );

    // A file Swagger UI does not ship is a 404 problem; another method a 405.
    h.get("/docs/nope.js", None)
        .problem(404, "not_found")
        .unwrap();
    h.get("/docs/dist/../Cargo.toml", None)
        .problem(404, "not_found")
        .unwrap();
    // Nor does a path that climbs out of Swagger UI's files reach anything else (sent as is:
    // HTTP clients would resolve the dots themselves).
    for climb in [
        "/docs/../Cargo.toml",
        "/docs/..%2fCargo.toml",
        "/docs/%2e%2e/%2e%2e/Cargo.toml",
        "/docs//etc/passwd",
    ] {
        let status = raw_status(&h.base, climb);
        assert!(status == 404, "{climb}: {status}");
    }
    let post = h.post_bytes("/docs/swagger-ui.css", Some("application/json"), b"{}");
    assert_eq!(post.status, 405, "{}", post.lossy());
}
