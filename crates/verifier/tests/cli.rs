//! The `gpuledger-verify` binary on the certificate fixture the service produced
//! (tests/fixtures/certificate at the workspace root): what an auditor runs, without the server.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/certificate")
        .join(name)
}

fn verify(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gpuledger-verify"))
        .args(args)
        .output()
        .expect("gpuledger-verify runs")
}

fn key() -> String {
    std::fs::read_to_string(fixture("verifier_key.txt"))
        .expect("fixture key")
        .trim()
        .to_owned()
}

#[test]
fn passes_the_service_certificate_and_fails_a_changed_one() {
    let (cert, bundle) = (fixture("certificate.json"), fixture("bundle.ndjson"));
    let args = |c: &Path| {
        vec![
            "--certificate".to_owned(),
            c.display().to_string(),
            "--bundle".to_owned(),
            bundle.display().to_string(),
            "--log-key".to_owned(),
            key(),
            "--json".to_owned(),
        ]
    };
    let run = |c: &Path| {
        let a = args(c);
        verify(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let ok = run(&cert);
    let report: serde_json::Value = serde_json::from_slice(&ok.stdout).expect("one JSON report");
    assert_eq!(report["result"], "PASS", "{report}");
    assert_eq!(ok.status.code(), Some(0));

    // One claimed figure changed: the verifier recomputes it and refuses.
    let mut changed: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&cert).unwrap()).unwrap();
    assert_eq!(changed["totals"]["gpu_seconds"], "36300");
    changed["totals"]["gpu_seconds"] = "36301".into();
    let dir = tempfile::tempdir().unwrap();
    let forged = dir.path().join("certificate.json");
    std::fs::write(&forged, serde_json::to_vec(&changed).unwrap()).unwrap();
    let bad = run(&forged);
    let report: serde_json::Value = serde_json::from_slice(&bad.stdout).expect("one JSON report");
    assert_eq!(report["result"], "FAIL", "{report}");
    assert_eq!(bad.status.code(), Some(1));
}

#[test]
fn usage_errors_exit_2() {
    let o = verify(&["--certificate", "x.json"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let o = verify(&["--bundle", "/no/such/bundle", "--log-key", &key()]);
    assert_ne!(o.status.code(), Some(0), "{o:?}");
}

#[test]
fn consistency_between_two_saved_checkpoints() {
    let dir = fixture("consistency");
    let path = |n: &str| dir.join(n).display().to_string();
    let key = key();
    let o = verify(&[
        "consistency",
        "--old",
        &path("old.txt"),
        "--new",
        &path("new.txt"),
        "--proof",
        &path("proof.json"),
        "--log-key",
        &key,
    ]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with("PASS"),
        "{o:?}"
    );
    // The same checkpoints the wrong way round are not a growth of the log.
    let o = verify(&[
        "consistency",
        "--old",
        &path("new.txt"),
        "--new",
        &path("old.txt"),
        "--proof",
        &path("proof.json"),
        "--log-key",
        &key,
    ]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
}

/// The service's invoice passes; a declared tax rate no issuer could configure (above 1, or the
/// largest decimal, whose tax overflowed and crashed the verifier) is named, never computed:
/// exit 1 with `claim_mismatch` on that line's `tax_rate`.
#[test]
fn an_invoice_with_a_crafted_tax_rate_is_named_not_computed() {
    let bundle = fixture("invoice_bundle.v3.ndjson");
    let dir = tempfile::tempdir().unwrap();
    let run = |invoice: &Path| {
        let o = verify(&[
            "--invoice",
            &invoice.display().to_string(),
            "--bundle",
            &bundle.display().to_string(),
            "--log-key",
            &key(),
            "--json",
        ]);
        let report: serde_json::Value =
            serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {o:?}"));
        (o.status.code(), report)
    };
    let (code, report) = run(&fixture("invoice.json"));
    assert_eq!(
        (code, &report["result"]),
        (Some(0), &"PASS".into()),
        "{report}"
    );
    let original: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture("invoice.json")).unwrap()).unwrap();
    for (rate, reason, item) in [
        (
            "79228162514264337593543950335",
            "claim_mismatch",
            "lines[0].tax_rate",
        ),
        ("1.0001", "claim_mismatch", "lines[0].tax_rate"),
        // A negative amount is refused as the invoice is read.
        ("-0.06", "malformed", "invoice"),
    ] {
        let mut inv = original.clone();
        inv["lines"][0]["tax_rate"] = rate.into();
        let path = dir.path().join("invoice.json");
        std::fs::write(&path, serde_json::to_vec(&inv).unwrap()).unwrap();
        let (code, report) = run(&path);
        assert_eq!(code, Some(1), "{rate}: {report}");
        assert_eq!(
            (&report["reason"], &report["item"]),
            (&reason.into(), &item.into()),
            "{rate}: {report}"
        );
    }
}
