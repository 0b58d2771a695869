//! The `gpuledger-agent` binary: what an operator installs on GPU nodes, without the server.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

fn agent(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gpuledger-agent"))
        .args(args)
        .output()
        .expect("gpuledger-agent runs")
}

/// An `agent.toml` of node-a posting to `server_url`, with `gpus` simulated H100s.
fn agent_toml(server_url: &str, gpus: u32) -> String {
    format!(
        r#"
signer = "node-a"
key_file = "node.key"
server_url = "{server_url}"
region = "cn-north-imx"
node = "node-a"
lease_file = "leases.toml"
spool_dir = "spool"
[collector]
kind = "simulated"
gpus = [{{ model = "H100-SXM-80G", count = {gpus}, idle_watts = 70, max_watts = 700 }}]
"#
    )
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
    std::fs::write(&config, agent_toml("https://127.0.0.1:9", 1)).unwrap();
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

/// `leases` prints each lease of the lease file as the body its registration needs: a
/// whole-node lease covers every GPU the collector reads, whole GPUs and slices keep their
/// shares, and a bad term is refused as the ledger would refuse it.
#[test]
fn leases_prints_the_registration_each_lease_needs() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.toml");
    let write = |leases: &str| {
        std::fs::write(dir.path().join("leases.toml"), leases).unwrap();
        std::fs::write(&config, agent_toml("http://127.0.0.1:9", 4)).unwrap();
    };
    let run = |extra: &[&str]| {
        let mut args = vec!["leases", "--config", config.to_str().unwrap()];
        args.extend_from_slice(extra);
        agent(&args)
    };
    let lines = |o: &std::process::Output| -> Vec<serde_json::Value> {
        assert!(o.status.success(), "{o:?}");
        String::from_utf8(o.stdout.clone())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    write("[[lease]]\nid = \"l-whole\"\ntenant = \"acme\"\nwhole_node = true\n");
    let from = "2026-12-01T00:00:00Z";
    let got = lines(&run(&["--from", from, "--class", "reserved"]));
    assert_eq!(
        got,
        [
            serde_json::json!({"class": "reserved", "from": from, "lease": "l-whole", "tenant": "acme",
                            "nodes": [{"node": "node-a", "gpus": [0, 1, 2, 3]}]})
        ]
    );
    write(
        "[[lease]]\nid = \"l-a\"\ntenant = \"acme\"\ngpus = [0, 1]\nslices = [{ gpu = 2, fraction = \"0.5\" }, { gpu = 3, fraction = \"0.25\" }]\n\
         [[lease]]\nid = \"l-b\"\ntenant = \"beta\"\nslices = [{ gpu = 2, fraction = \"0.5\" }]\n",
    );
    let got = lines(&run(&["--from", from, "--to", "2027-01-01T00:00:00Z"]));
    let nodes = |v: &serde_json::Value| v["nodes"].clone();
    assert_eq!(
        nodes(&got[0]),
        serde_json::json!([{"node": "node-a", "gpus": [0, 1]},
                           {"node": "node-a", "gpus": [2], "share": "0.5"},
                           {"node": "node-a", "gpus": [3], "share": "0.25"}])
    );
    assert_eq!(
        nodes(&got[1]),
        serde_json::json!([{"node": "node-a", "gpus": [2], "share": "0.5"}])
    );
    assert_eq!(got[1]["to"], "2027-01-01T00:00:00Z");
    assert_eq!(got[1]["class"], "on_demand");
    // A term that ends before it starts, or a class the ledger does not know: refused here.
    let o = run(&["--from", from, "--to", from]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("empty_interval"),
        "{o:?}"
    );
    let o = run(&["--from", from, "--class", "monthly"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
}
