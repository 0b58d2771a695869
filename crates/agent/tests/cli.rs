//! The `gpuledger-agent` binary: what an operator installs on GPU nodes, without the server.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

fn agent(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gpuledger-agent"))
        .args(args)
        .output()
        .expect("gpuledger-agent runs")
}

#[test]
fn keygen_writes_a_private_key_only_its_owner_reads() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("node.key");
    let o = agent(&["keygen", "--out", key.to_str().unwrap()]);
    assert!(o.status.success(), "{o:?}");
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let out = String::from_utf8(o.stdout).unwrap();
    let secret = std::fs::read_to_string(&key).unwrap();
    assert!(
        !out.contains(secret.trim()),
        "the private key is never printed"
    );
    let public = std::fs::read_to_string(dir.path().join("node.key.pub")).unwrap();
    assert!(out.contains(public.trim()), "{out}");
    // Never overwrites a key.
    let again = agent(&["keygen", "--out", key.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(2), "{again:?}");
    assert_eq!(std::fs::read_to_string(&key).unwrap(), secret);
}

#[test]
fn a_missing_configuration_stops_the_agent_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("agent.toml");
    let o = agent(&["--config", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("agent.toml"),
        "{o:?}"
    );
    let o = agent(&["market", "--config", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
}

#[test]
fn tls_settings_that_cannot_work_stop_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("node.key");
    assert!(agent(&["keygen", "--out", key.to_str().unwrap()])
        .status
        .success());
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        r#"
signer = "node-a"
key_file = "node.key"
server_url = "https://127.0.0.1:9"
region = "cn-north-imx"
node = "node-a"
lease_file = "leases.toml"
spool_dir = "spool"
[collector]
kind = "simulated"
gpus = [{ model = "H100-SXM-80G", count = 1, idle_watts = 70, max_watts = 700 }]
"#,
    )
    .unwrap();
    let config = config.to_str().unwrap();
    // A CA file that is not there, given on the command line: refused before any connection.
    let o = agent(&[
        "--config",
        config,
        "--ca-file",
        "/nonexistent/ledger-ca.pem",
    ]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("/nonexistent/ledger-ca.pem"),
        "{o:?}"
    );
    // A malformed pin from the environment.
    let o = Command::new(env!("CARGO_BIN_EXE_gpuledger-agent"))
        .args(["--config", config])
        .env("GPULEDGER_AGENT_PIN_SHA256", "not-a-fingerprint")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("pin_sha256"),
        "{o:?}"
    );
    // Nothing was spooled: the start stopped before the spool was opened.
    assert!(!dir.path().join("spool").exists());
}
