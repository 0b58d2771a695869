//! The binary as a user runs it: keygen, init, verify-log (text, JSON, exit codes), and the
//! append benchmark's JSON output.

mod common;

use common::*;
use diesel::prelude::*;
use gpuledger::core::record::Role;
use gpuledger::sample;
use gpuledger::store::schema::entries;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

fn gpuledger(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gpuledger"))
        .args(args)
        .current_dir(dir)
        .env_remove("GPULEDGER_DATABASE_URL")
        .env_remove("GPULEDGER_LOG_KEY")
        .output()
        .unwrap()
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn keygen_writes_0600_and_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let o = gpuledger(dir.path(), &["keygen", "--out", "keys/node-a1.key"]);
    assert!(o.status.success(), "{}", text(&o));
    let mode = std::fs::metadata(dir.path().join("keys/node-a1.key"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    let public = std::fs::read_to_string(dir.path().join("keys/node-a1.key.pub")).unwrap();
    assert!(
        text(&o).contains(public.trim()),
        "the public key is printed for registration"
    );
    let secret = std::fs::read_to_string(dir.path().join("keys/node-a1.key")).unwrap();
    assert!(
        !text(&o).contains(secret.trim()),
        "the private key is never printed"
    );
    let again = gpuledger(dir.path(), &["keygen", "--out", "keys/node-a1.key"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(text(&again).contains("refusing to overwrite"));
}

#[test]
fn init_defaults_then_verify_log_passes_and_names_a_tampered_entry() {
    let dir = tempfile::tempdir().unwrap();
    // The sample records below are signed for the sample log's origin.
    let o = gpuledger(dir.path(), &["init", "--origin", sample::ORIGIN]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        dir.path().join("gpuledger.db").exists(),
        "default database is ./gpuledger.db"
    );
    let key = dir.path().join("gpuledger-log.key");
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // Running init again is harmless.
    assert!(gpuledger(dir.path(), &["init", "--origin", sample::ORIGIN])
        .status
        .success());

    // Fill the log through the library, with the CLI's key.
    let url = format!("sqlite://{}", dir.path().join("gpuledger.db").display());
    let log_key = gpuledger::keyfile::read(&key).unwrap();
    let ledger = gpuledger::store::Ledger::open(&url, log_key).unwrap();
    let k = signer(&ledger, "node-1", Role::Node);
    parties(&ledger, &["t"]);
    ledger.append(usage_run("node-1", &k, "t", 1..=20)).unwrap();
    ledger.checkpoint().unwrap();
    drop(ledger);

    let o = gpuledger(dir.path(), &["verify-log"]);
    assert!(o.status.success(), "{}", text(&o));
    // The policy entry, node-1, its key, tenant t and its lease, 20 records.
    assert!(text(&o).starts_with("PASS: 25 entries"), "{}", text(&o));
    // Without --log-key the PASS is against the database's own key, and says so.
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        text(&o).contains("(UNANCHORED: no --log-key given")
            && stderr.contains("WARNING: no --log-key given"),
        "{}{stderr}",
        text(&o)
    );
    let o = gpuledger(dir.path(), &["verify-log", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["log_key"], "database");
    assert_eq!(v["report"]["size"], 25);
    let vkey = gpuledger::store::Ledger::open(&url, gpuledger::keyfile::read(&key).unwrap())
        .unwrap()
        .info()
        .verifier_key
        .clone();
    let o = gpuledger(dir.path(), &["verify-log", "--log-key", &vkey]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        !text(&o).contains("UNANCHORED") && !String::from_utf8_lossy(&o.stderr).contains("WARNING"),
        "{}",
        text(&o)
    );

    // Entry 7 is the third usage record (entries 5 to 24).
    let mut conn = gpuledger::store::connect(&url).unwrap();
    diesel::update(entries::table.find(7i64))
        .set(entries::tenant.eq(Some("someone-else")))
        .execute(&mut conn)
        .unwrap();
    let o = gpuledger(dir.path(), &["verify-log", "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["ok"].clone(), v["index"].clone(), v["reason"].clone()),
        (
            serde_json::json!(false),
            serde_json::json!(7),
            serde_json::json!("stored_column")
        )
    );
    assert_eq!(v["failures"].as_array().unwrap().len(), 1);
    let o = gpuledger(dir.path(), &["verify-log"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("entry 7 [stored_column]: stored column tenant"),
        "{}",
        text(&o)
    );

    // A trusted key other than the log's is refused.
    let other = gpuledger::core::keys::encode_public(&sample::key("x").verifying_key());
    let o = gpuledger(dir.path(), &["verify-log", "--log-public-key", &other]);
    assert_eq!(o.status.code(), Some(1));
    let o = gpuledger(dir.path(), &["verify-log", "--log-key", &other]);
    assert_eq!(o.status.code(), Some(1));
}

/// `verify-log --log-key` takes what `verify --log-key` takes: the verifier key, or a file
/// holding it (and still the raw base64 key); a verifier key of another origin is a usage error.
#[test]
fn verify_log_takes_the_verifier_key_like_verify() {
    let dir = tempfile::tempdir().unwrap();
    let o = gpuledger(
        dir.path(),
        &["init", "--origin", "ledger.example.com/gpu-log"],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(!text(&o).contains("placeholder"), "{}", text(&o));
    let out = String::from_utf8(o.stdout).unwrap();
    let field = |name: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {out}"))
            .trim()
            .to_owned()
    };
    let (vkey, raw) = (field("verifier key:"), field("log key:"));
    // init again without --origin keeps the recorded one (and does not call it a placeholder).
    let o = gpuledger(dir.path(), &["init"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("origin:       ledger.example.com/gpu-log"),
        "{}",
        text(&o)
    );
    assert!(!text(&o).contains("placeholder"), "{}", text(&o));

    let file = dir.path().join("vkey.txt");
    std::fs::write(&file, format!("{vkey}\n")).unwrap();
    for key in [vkey.as_str(), file.to_str().unwrap(), raw.as_str()] {
        let o = gpuledger(dir.path(), &["verify-log", "--log-key", key]);
        assert!(o.status.success(), "{key}: {}", text(&o));
    }
    // The same key under another origin's name is not this log's verifier key.
    let public = gpuledger::core::keys::decode_public(&raw).unwrap();
    let elsewhere = gpuledger::core::checkpoint::verifier_key("staging.example.com/log", &public);
    let o = gpuledger(dir.path(), &["verify-log", "--log-key", &elsewhere]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("staging.example.com/log"), "{}", text(&o));
}

/// A new log with the placeholder origin is not created silently.
#[test]
fn init_warns_about_the_placeholder_origin() {
    let dir = tempfile::tempdir().unwrap();
    let o = gpuledger(dir.path(), &["init"]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("placeholder \"gpuledger.local/log\"") && err.contains("--origin"),
        "{err}"
    );
}

#[test]
fn bad_database_urls_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let o = gpuledger(dir.path(), &["init", "--database-url", "gpuledger.db"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).contains("must start with sqlite:// or postgres://"),
        "{}",
        text(&o)
    );
    let o = gpuledger(
        dir.path(),
        &["verify-log", "--database-url", "sqlite://missing-dir/x.db"],
    );
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn bench_append_prints_four_rates() {
    let dir = tempfile::tempdir().unwrap();
    let o = gpuledger(
        dir.path(),
        &[
            "bench",
            "append",
            "--records",
            "2000",
            "--signers",
            "4",
            "--batch",
            "250",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for k in [
        "strict_verify_per_s",
        "full_append_per_s",
        "raw_insert_baseline_per_s",
    ] {
        assert!(v[k].as_f64().unwrap() > 0.0, "{k} in {v}");
    }
    // The unchecked append exists only in builds with the bench-unchecked-append feature; the
    // ratio that needs it is given exactly when it was measured.
    let unchecked = &v["append_without_signature_checks_per_s"];
    let bound = &v["full_vs_bound"];
    match (unchecked.as_f64(), bound.as_f64()) {
        (Some(u), Some(b)) => assert!(u > 0.0 && b > 0.0, "{v}"),
        (None, None) => assert!(unchecked.is_null() && bound.is_null(), "{v}"),
        _ => panic!("full_vs_bound without its measurement, or the other way round: {v}"),
    }
    assert_eq!(v["records"], 2000);
}

/// The preview benchmark rates a month it really filled: every record accepted, priced into a
/// line with a total above zero (it once timed an empty month, every record refused unseen).
#[test]
fn bench_preview_prices_the_month_it_fills() {
    let dir = tempfile::tempdir().unwrap();
    let o = gpuledger(
        dir.path(),
        &["bench", "preview", "--records", "320", "--json"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["records"], 320, "{v}");
    assert!(v["lines"].as_u64().unwrap() >= 1, "{v}");
    let total: rust_decimal::Decimal = v["total"].as_str().unwrap().parse().unwrap();
    assert!(total > rust_decimal::Decimal::ZERO, "{v}");
}

/// The contract benchmark previews the term it filled: every record accepted, the month rated
/// from the rollups exactly as record by record (else it fails), totals above zero.
#[test]
fn bench_contract_previews_the_term_it_fills() {
    let dir = tempfile::tempdir().unwrap();
    let o = gpuledger(
        dir.path(),
        &["bench", "contract", "--records", "3200", "--json"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["records"], 3200, "{v}");
    assert!(v["month_records"].as_u64().unwrap() > 0, "{v}");
    for total in ["month_total", "term_total"] {
        let (amount, currency) = v[total].as_str().unwrap().split_once(' ').unwrap();
        let amount: rust_decimal::Decimal = amount.parse().unwrap();
        assert!(
            amount > rust_decimal::Decimal::ZERO && currency == "CNY",
            "{v}"
        );
    }
}

/// The verification benchmark builds a log the verifiers pass: `gpuledger verify` says PASS on
/// its bundle (it once built one whose region parameters took effect before they were logged,
/// which the no-price-in-the-past rule refuses, and only a run by hand showed it).
#[test]
fn bench_verify_passes_the_log_it_builds() {
    let dir = tempfile::tempdir().unwrap();
    let o = gpuledger(
        dir.path(),
        &["bench", "verify", "--records", "640", "--json"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["records"], 640, "{v}");
    assert!(v["verdict"].as_str().unwrap().starts_with("PASS"), "{v}");
}

/// `verify` as a new user meets it: a missing file is a usage error (exit 2), not a FAIL; a
/// wrong key names the key ids and origins on both sides; a raw public key gets a hint.
#[test]
fn verify_says_what_is_wrong_with_the_inputs() {
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/certificate");
    let vkey = std::fs::read_to_string(fixtures.join("verifier_key.txt")).unwrap();
    let vkey = vkey.trim();
    let checkpoint = fixtures.join("older_checkpoint.txt");
    let dir = tempfile::tempdir().unwrap();
    let verify = |args: &[&str]| {
        let mut all = vec!["verify"];
        all.extend_from_slice(args);
        gpuledger(dir.path(), &all)
    };

    let o = verify(&[
        "--checkpoint",
        checkpoint.to_str().unwrap(),
        "--log-key",
        vkey,
    ]);
    assert!(o.status.success(), "{}", text(&o));

    let o = verify(&["--checkpoint", "no-such-file.txt", "--log-key", vkey]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("--checkpoint no-such-file.txt"),
        "{}",
        text(&o)
    );

    // Another key under another name: the refusal names both.
    let other = sample::key("someone-else").verifying_key();
    let wrong = gpuledger::core::checkpoint::verifier_key("other.example/log", &other);
    let wrong_id = format!(
        "{:08x}",
        gpuledger::core::checkpoint::note_key_id("other.example/log", &other)
    );
    let o = verify(&[
        "--checkpoint",
        checkpoint.to_str().unwrap(),
        "--log-key",
        &wrong,
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let origin = vkey.split('+').next().unwrap();
    let id = vkey.split('+').nth(1).unwrap();
    for want in [wrong_id.as_str(), "other.example/log", origin, id] {
        assert!(text(&o).contains(want), "no {want} in {}", text(&o));
    }

    // The raw public key (what `init` prints as "log key:") is not the verifier key.
    let raw = gpuledger::core::keys::encode_public(
        &gpuledger::core::bundle::verifier_public_key(vkey).unwrap(),
    );
    let o = verify(&[
        "--checkpoint",
        checkpoint.to_str().unwrap(),
        "--log-key",
        &raw,
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("raw public key"), "{}", text(&o));
}
