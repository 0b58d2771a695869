//! docs/CONFIGURATION.md keeps step with the code: every flag of `serve` and of
//! `witness serve` (from their --help) and every TOML key of their settings files is
//! documented, and the documented example files parse.

mod common;

use common::{bin, help_flags, not_in_backticks};
use gpuledger::server::{read_config, ServeSettings};

fn doc() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/CONFIGURATION.md"
    ))
    .unwrap()
}

#[test]
fn every_serve_flag_and_env_var_is_documented() {
    let out = bin().args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let doc = doc();
    let flags = help_flags(&help);
    assert!(flags.len() >= 6, "parsed flags from --help: {flags:?}");
    let missing = not_in_backticks(&doc, flags);
    assert!(
        missing.is_empty(),
        "docs/CONFIGURATION.md does not document {missing:?}"
    );
    for env in help
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("GPULEDGER_"))
    {
        assert!(
            doc.contains(env),
            "docs/CONFIGURATION.md does not document {env}"
        );
    }
}

#[test]
fn documented_example_file_sets_every_key() {
    let doc = doc();
    let start = doc.find("```toml\n").expect("an example file") + 8;
    let end = start + doc[start..].find("```").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.toml");
    std::fs::write(&path, &doc[start..end]).unwrap();
    let s = read_config(&path).unwrap();
    // Every field is set by the example, so a new setting without documentation fails here.
    let ServeSettings {
        listen,
        database_url,
        log_key,
        checkpoint_interval_seconds,
        workers,
        publish_dir,
        mirror_dir,
        clock_step_seconds,
        clock_settle_seconds,
        invoice_close_seconds,
        high_water_file,
        allow_async_standbys,
        metrics_listen,
        client_request_timeout_seconds,
        client_disconnect_timeout_seconds,
        keep_alive_seconds,
        max_connections,
        body_idle_timeout_seconds,
        body_timeout_seconds,
        max_concurrent_ingest,
        client_rate_per_second,
        client_rate_burst,
        signer_rate_per_second,
        signer_rate_burst,
        tenant_certificates_per_minute,
        witnesses,
        witness_quorum,
        witness_wait_seconds,
        issuer,
        payment_terms_days,
        tax,
        public_url,
        webhooks,
    } = s.clone();
    assert!(listen.is_some() && database_url.is_some() && log_key.is_some());
    assert!(checkpoint_interval_seconds.is_some() && workers.is_some());
    assert!(publish_dir.is_some() && metrics_listen.is_some() && mirror_dir.is_some());
    assert!(high_water_file.is_some() && allow_async_standbys.is_some());
    assert!(clock_step_seconds.is_some() && clock_settle_seconds.is_some());
    assert!(invoice_close_seconds.is_some());
    assert!(
        client_request_timeout_seconds.is_some() && client_disconnect_timeout_seconds.is_some()
    );
    assert!(keep_alive_seconds.is_some() && max_connections.is_some());
    assert!(body_idle_timeout_seconds.is_some() && body_timeout_seconds.is_some());
    assert!(max_concurrent_ingest.is_some());
    assert!(client_rate_per_second.is_some() && client_rate_burst.is_some());
    assert!(signer_rate_per_second.is_some() && signer_rate_burst.is_some());
    assert!(tenant_certificates_per_minute.is_some());
    assert!(witness_quorum.is_some() && witness_wait_seconds.is_some());
    assert!(issuer.is_some() && payment_terms_days.is_some());
    assert!(tax.is_some() && public_url.is_some());
    // The example's [webhooks] table sets every key and resolves.
    let webhooks = webhooks.expect("the example has a [webhooks] table");
    let gpuledger::webhooks::WebhookSettingsFile {
        enabled,
        signing_key,
        allow_private_targets,
        timeout_seconds,
        retry_schedule_seconds,
        max_retry_after_seconds,
        concurrency,
    } = webhooks.clone();
    assert!(enabled.is_some() && signing_key.is_some() && allow_private_targets.is_some());
    assert!(timeout_seconds.is_some() && retry_schedule_seconds.is_some());
    assert!(max_retry_after_seconds.is_some() && concurrency.is_some());
    webhooks
        .resolve(std::path::Path::new("/var/lib/gpuledger/log.key"))
        .expect("the example's [webhooks] settings");
    // The example's witness is usable: its vkey parses and names it.
    let witnesses = witnesses.expect("the example lists a witness");
    assert_eq!(witnesses.len(), 1);
    let settings = gpuledger::server::witnessing::WitnessSettings {
        witnesses: witnesses.clone(),
        quorum: witness_quorum.unwrap(),
        wait: std::time::Duration::from_secs(witness_wait_seconds.unwrap()),
    };
    let (prepared, _) = settings.prepare().expect("the example's witness settings");
    assert_eq!(prepared[0].key.name(), witnesses[0].name);
    assert_eq!(
        prepared[0].endpoint,
        "https://witness.example.org/add-checkpoint"
    );
    // A vkey naming another witness, or a quorum above the witnesses, is refused.
    let mut wrong = settings.clone();
    wrong.witnesses[0].name = "other.example.org".into();
    assert!(wrong.prepare().unwrap_err().to_string().contains("names"));
    let mut wrong = settings.clone();
    wrong.quorum = 2;
    assert!(wrong.prepare().is_err());
    // Flags win over the file; the file wins over defaults.
    let r = ServeSettings {
        workers: Some(1),
        ..Default::default()
    }
    .resolve(s);
    assert_eq!(r.workers, 1);
    assert_eq!(r.witnesses.quorum, 1);
    assert_eq!(r.witnesses.witnesses.len(), 1);
    assert_eq!(
        ServeSettings::default()
            .resolve(ServeSettings::default())
            .witnesses
            .quorum,
        0
    );
    assert_eq!(r.listen.to_string(), "0.0.0.0:8080");
    // Unknown keys are refused with the file name in the message.
    std::fs::write(&path, "listen = \"127.0.0.1:1\"\nlisten_port = 3\n").unwrap();
    let err = read_config(&path).unwrap_err();
    assert!(
        err.contains("serve.toml") && err.contains("listen_port"),
        "{err}"
    );
}

/// The `gpuledger witness serve` section: every flag and environment variable of its --help is
/// in it, and its example file sets every key and is accepted by the witness.
#[test]
fn witness_serve_flags_env_vars_and_file_are_documented() {
    use gpuledger::witness::{self, WitnessConfigFile};
    let doc = doc();
    let start = doc
        .find("## `gpuledger witness serve`")
        .expect("a section for `gpuledger witness serve`");
    let end = doc[start + 3..]
        .find("\n## ")
        .map_or(doc.len(), |e| start + 3 + e);
    let section = &doc[start..end];

    let out = bin().args(["witness", "serve", "--help"]).output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let flags = help_flags(&help);
    assert!(flags.len() >= 8, "parsed flags from --help: {flags:?}");
    let missing = not_in_backticks(section, flags);
    assert!(
        missing.is_empty(),
        "the witness section of docs/CONFIGURATION.md does not document {missing:?}"
    );
    let envs: Vec<&str> = help
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("GPULEDGER_"))
        .collect();
    assert!(envs.len() >= 6, "{envs:?}");
    for env in envs {
        assert!(
            section.contains(&format!("`{env}`")),
            "the witness section does not document {env}"
        );
    }

    let at = section.find("```toml\n").expect("an example file") + 8;
    let example = &section[at..at + section[at..].find("```").unwrap()];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("witness.toml");
    std::fs::write(&path, example).unwrap();
    // Every key is set by the example, so a new key without documentation fails here.
    let WitnessConfigFile {
        listen,
        name,
        key,
        state,
        workers,
        metrics_listen,
        logs,
    } = WitnessConfigFile::read(&path).unwrap();
    assert!(listen.is_some() && name.is_some() && key.is_some() && state.is_some());
    assert!(workers.is_some() && metrics_listen.is_some());
    for k in [
        "listen",
        "metrics_listen",
        "name",
        "key",
        "state",
        "workers",
        "vkey",
        "origin",
    ] {
        assert!(
            section.contains(&format!("`{k}`")),
            "the witness section does not document the key {k}"
        );
    }
    // The example's log key is a real one: it parses, passes the key rule and names the origin.
    assert_eq!(logs.len(), 1);
    let parsed = witness::logs_from_vkeys([logs[0].vkey.as_str()]).unwrap();
    assert_eq!(Some(&parsed[0].origin), logs[0].origin.as_ref());
    // Unknown keys are refused with the file name in the message.
    std::fs::write(&path, "listen = \"127.0.0.1:1\"\nmetrics_port = 3\n").unwrap();
    let err = WitnessConfigFile::read(&path).unwrap_err().to_string();
    assert!(
        err.contains("witness.toml") && err.contains("metrics_port"),
        "{err}"
    );
}
