//! The console's in-browser verifier (`assets/console/verify/`, issue #17) run under Node:
//! `node assets/console/verify/test/run.mjs` checks it against the committed certificate
//! artefacts, tampered copies and the protocol vectors, and compares every verdict with this
//! build's `gpuledger verify` (through `GPULEDGER_BIN`). The test fails when that script fails.
//!
//! Without `node` (version 20 or later, for WebCrypto's Ed25519) the test is skipped with a
//! loud message, unless `GPULEDGER_REQUIRE_NODE=1`, which CI sets: then it fails.

use std::io::Write;
use std::path::Path;
use std::process::Command;

/// The oldest Node major version whose WebCrypto has Ed25519 without flags.
const MIN_NODE_MAJOR: u32 = 20;

/// Whether a missing or too old `node` must fail the test rather than skip it.
fn node_required() -> bool {
    std::env::var("GPULEDGER_REQUIRE_NODE").is_ok_and(|v| v == "1")
}

/// Skips (or, when Node is required, fails) with `why`.
fn skip_or_fail(why: &str) {
    assert!(
        !node_required(),
        "GPULEDGER_REQUIRE_NODE=1 but {why}: install Node.js {MIN_NODE_MAJOR} or later"
    );
    // Straight to stderr: the test harness captures `eprintln!` of passing tests.
    let _ = writeln!(
        std::io::stderr(),
        "\n*** SKIPPED console_verify: {why}; the in-browser verifier was NOT tested. \
         Install Node.js {MIN_NODE_MAJOR}+ (or set GPULEDGER_REQUIRE_NODE=1 to make this fail). ***\n"
    );
}

/// The major version of `node`, or why it cannot be run.
fn node_major() -> Result<u32, String> {
    let out = Command::new("node")
        .arg("--version")
        .output()
        .map_err(|e| format!("`node` cannot be run ({e})"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .trim_start_matches('v')
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .ok_or_else(|| format!("`node --version` printed {text:?}"))
}

/// Whether `node` is there and recent enough; if not, the test is skipped (or fails).
fn node_ready() -> bool {
    match node_major() {
        Err(why) => skip_or_fail(&why),
        Ok(major) if major < MIN_NODE_MAJOR => {
            skip_or_fail(&format!("node is version {major}"));
        }
        Ok(_) => return true,
    }
    false
}

#[test]
fn browser_verifier_passes_its_tests_under_node() {
    if !node_ready() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("node")
        .arg(root.join("assets/console/verify/test/run.mjs"))
        .current_dir(root)
        .env("GPULEDGER_BIN", env!("CARGO_BIN_EXE_gpuledger"))
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    assert!(
        out.status.success(),
        "the in-browser verifier's tests failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("verdicts compared with"),
        "the verdicts were not compared with gpuledger verify:\n{stdout}"
    );
}

/// Runs one of the console verifier's Node suites (`assets/console/verify/test/<file>`, no
/// binary needed) and requires every test in it to pass; `what` names it in the failure.
fn node_suite(file: &str, what: &str) {
    if !node_ready() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("node")
        .arg(root.join("assets/console/verify/test").join(file))
        .current_dir(root)
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(" passed, 0 failed"),
        "the console's {what} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `node assets/console/verify/test/contracts.mjs`: the console's checks of `contract_registered`
/// and `contract_amended` bodies and their admission rules (PROTOCOL §5.19, §5.21, §6.7
/// contracts and amendments) and its billing periods, each with the reason and field the ledger
/// names.
#[test]
fn browser_verifier_checks_contracts_under_node() {
    node_suite("contracts.mjs", "contract checks");
}

/// `node assets/console/verify/test/prepaid.mjs`: the console's checks of a `prepayment` body
/// and its admission rules (PROTOCOL §5.20, §6.7 prepayments), each with the reason and field
/// the ledger names.
#[test]
fn browser_verifier_checks_prepayments_under_node() {
    node_suite("prepaid.mjs", "prepayment checks");
}

/// `node assets/console/verify/test/invoices.mjs`: the console recomputes the Rust-made invoice
/// fixtures (tests/fixtures) from their bundles (PASS) and names the first difference in forged
/// copies, each verdict compared with `gpuledger verify --invoice`'s (issue #28: invoices are
/// recomputed by every verifier).
#[test]
fn browser_verifier_recomputes_invoices_as_gpuledger_verify_does() {
    if !node_ready() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("node")
        .arg(root.join("assets/console/verify/test/invoices.mjs"))
        .current_dir(root)
        .env("GPULEDGER_BIN", env!("CARGO_BIN_EXE_gpuledger"))
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && stdout.contains(" passed, 0 failed")
            && stdout.contains("verdicts compared with"),
        "the console's invoice checks failed or were not compared ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
