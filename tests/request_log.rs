//! What `serve` writes to its log for requests: a client's mistake (4xx) is not a warning, and
//! lines written to a file carry no terminal colour codes.

mod common;

use common::*;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

#[test]
fn refused_requests_are_debug_lines_without_colours() {
    let db = sqlite();
    let log = init(&db);
    let mut child = Command::new(env!("CARGO_BIN_EXE_gpuledger"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            &db.url,
        ])
        .arg("--log-key")
        .arg(log.key_path())
        .env_remove("GPULEDGER_DATABASE_URL")
        .env_remove("GPULEDGER_CONFIG")
        .env_remove("NO_COLOR")
        .env(
            "GPULEDGER_LOG",
            "info,gpuledger_server::server::request_log=debug",
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let base = first
        .trim()
        .strip_prefix("listening on ")
        .expect(&first)
        .to_owned();
    let http = Http::new(&base);
    // Three refusals a client can cause: no token, an unknown invoice, a missing parameter.
    http.get("/v1/invoices", None)
        .assert_problem(401, "unauthorized", "no token");
    http.get("/v1/invoices/INV-999999", Some(&log.admin))
        .assert_problem(404, "not_found", "unknown invoice");
    let p = http
        .get(
            "/v1/invoices/preview?tenant=t&to=2026-01-02T00:00:00Z",
            Some(&log.admin),
        )
        .assert_problem(400, "invalid_parameter", "no from");
    assert_eq!(p["errors"][0]["field"], "from", "{p}");
    child.kill().unwrap();
    child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(
        !err.contains('\x1b'),
        "colour codes in a redirected log:\n{err}"
    );
    assert!(!err.contains(" WARN "), "a 4xx logged as a warning:\n{err}");
    let refused = err
        .lines()
        .filter(|l| l.contains("DEBUG") && l.contains("request refused"))
        .count();
    assert_eq!(refused, 3, "one DEBUG line per refusal:\n{err}");
    assert!(err.contains("status=404"), "{err}");
}
