//! `gpuledger init` and `gpuledger verify-log`: the log's database and key, and the full
//! re-check of a stored log.

use super::DbArgs;
use anyhow::{Context, Result};
use clap::Args;
use gpuledger::keyfile;
use gpuledger::store::{self, access, verify};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

/// `init`'s arguments.
#[derive(Args)]
pub struct InitArgs {
    #[command(flatten)]
    db: DbArgs,
    /// The log's private key file (created with mode 0600 if absent).
    #[arg(long, env = "GPULEDGER_LOG_KEY", default_value = "gpuledger-log.key")]
    log_key: PathBuf,
    /// The checkpoint origin (also the signed-note key name), fixed at first init: the
    /// recorded one on an initialised log; the placeholder `gpuledger.local/log`, with a
    /// warning, on a new log when not given.
    #[arg(long, env = "GPULEDGER_ORIGIN")]
    origin: Option<String>,
}

/// Creates or migrates the database, creates the log key if absent, and the first admin token
/// if there is none (printed once).
pub fn init(args: InitArgs) -> Result<ExitCode> {
    let url = &args.db.database_url;
    let (key, created) = keyfile::read_or_create(&args.log_key)?;
    let origin = match args.origin {
        Some(o) => o,
        None => recorded_origin(url).unwrap_or_else(|| store::DEFAULT_ORIGIN.to_owned()),
    };
    let info = store::init(url, &key, &origin)
        .with_context(|| format!("initialising {}", store::conn::redact(url)))?;
    if created {
        println!("created log key {} (mode 0600)", args.log_key.display());
    }
    println!("database:     {}", store::conn::redact(url));
    println!("origin:       {}", info.origin);
    println!("log key:      {}", info.public_key);
    println!("verifier key: {}", info.verifier_key);
    if info.origin == store::DEFAULT_ORIGIN {
        // Not fixed silently: every signature in the log names the origin, for good.
        eprintln!(
            "warning: the origin is the placeholder {:?}. Every signature in this log names it, \
             and it can never change. For a log you will keep, start again on a new database \
             with `gpuledger init --origin <your domain>/<log name>` (e.g. \
             ledger.example.com/gpu-log).",
            store::DEFAULT_ORIGIN
        );
    }
    let mut conn = store::connect(url)?;
    if access::list_tokens(&mut conn)?.is_empty() {
        let (t, secret) = access::create_token(
            &mut conn,
            access::ApiRole::Admin,
            None,
            "first admin (gpuledger init)",
        )?;
        println!("admin token:  {secret}");
        println!(
            "              (id {}; shown once, stored only as a hash; keep it secret)",
            t.id
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The origin an initialised log records, if `url` holds one.
fn recorded_origin(url: &str) -> Option<String> {
    let mut conn = store::connect(url).ok()?;
    store::read::meta(&mut conn, "origin").ok().flatten()
}

/// `verify-log`'s arguments.
#[derive(Args)]
pub struct VerifyLogArgs {
    #[command(flatten)]
    db: DbArgs,
    /// The log key you trust, in the form `gpuledger verify --log-key` takes: the verifier key
    /// (`<origin>+<key id>+<key>`, as `init` and `GET /v1/log` print it) or a file holding
    /// it; the raw base64 public key is accepted too. Defaults to the key the database
    /// records (which then proves only that the log is consistent with itself).
    #[arg(
        long = "log-key",
        visible_alias = "log-public-key",
        value_name = "VKEY|FILE|BASE64"
    )]
    log_key: Option<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Re-checks every entry, hash, signature and checkpoint of the stored log: exit 0 when it
/// verifies, 1 with every failure listed when not.
pub fn verify_log(args: VerifyLogArgs) -> Result<ExitCode> {
    let mut conn = store::connect(&args.db.database_url)?;
    let trusted = match &args.log_key {
        Some(k) => Some(trusted_public_key(
            k,
            &store::ledger::log_info(&mut conn)?.origin,
        )?),
        None => {
            eprintln!("WARNING: {SELF_KEY_CAVEAT}");
            None
        }
    };
    let bar = (!args.json && std::io::stderr().is_terminal()).then(progress_bar);
    let result = verify::verify_log(&mut conn, trusted.as_deref(), &mut |done, total| {
        if let Some(b) = &bar {
            b.set_length(total);
            b.set_position(done);
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    match result {
        Ok(report) => {
            print_pass(&report, args.json, trusted.is_some());
            Ok(ExitCode::SUCCESS)
        }
        Err(verify::VerifyError::Store(e)) => Err(e.into()),
        Err(e) => {
            print_failure(&e, args.json);
            Ok(ExitCode::from(1))
        }
    }
}

/// The base64 public key of `--log-key`: a verifier key (text or file) whose name must be the
/// log's `origin`, or a raw base64 public key.
fn trusted_public_key(arg: &str, origin: &str) -> Result<String> {
    use gpuledger::core::{bundle, keys};
    if keys::decode_public(arg).is_ok() {
        return Ok(arg.trim().to_owned());
    }
    let vkey = gpuledger::verifier::read_verifier_key(arg).map_err(anyhow::Error::msg)?;
    let name = vkey.split('+').next().unwrap_or_default();
    if name != origin {
        anyhow::bail!(
            "--log-key is the verifier key of {name:?}, but this database is the log {origin:?}"
        );
    }
    let public = bundle::verifier_public_key(&vkey).map_err(anyhow::Error::msg)?;
    Ok(keys::encode_public(&public))
}

fn progress_bar() -> indicatif::ProgressBar {
    let b = indicatif::ProgressBar::new(0);
    b.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:40} {pos}/{len} entries ({per_sec}, eta {eta})",
        )
        .expect("valid template"),
    );
    b
}

/// What `verify-log` says when no `--log-key` was given: it then checks the checkpoints
/// against the key the database itself records, which whoever controls the database controls.
const SELF_KEY_CAVEAT: &str = "no --log-key given: the checkpoints are checked against the \
    log key this database records, which proves only that the log is consistent with itself; \
    give --log-key with the verifier key the operator published";

fn print_pass(report: &verify::Report, json: bool, key_given: bool) {
    if json {
        let key = if key_given { "given" } else { "database" };
        println!(
            "{}",
            serde_json::json!({"ok": true, "log_key": key, "report": report})
        );
    } else {
        println!(
            "PASS: {} entries, root {}, {} checkpoints (latest at size {}), {} keys{}",
            report.size,
            report.root,
            report.checkpoints,
            report
                .latest_checkpoint_size
                .map_or("none".into(), |s| s.to_string()),
            report.keys,
            if key_given {
                String::new()
            } else {
                format!(" (UNANCHORED: {SELF_KEY_CAVEAT})")
            }
        );
    }
}

fn print_failure(e: &verify::VerifyError, json: bool) {
    match (e, json) {
        (verify::VerifyError::Bad(found), true) => {
            let first = found.first();
            println!(
                "{}",
                serde_json::json!({
                    "ok": false,
                    "index": first.index,
                    "reason": first.reason,
                    "error": first.to_string(),
                    "total": found.total,
                    "failures": found.failures,
                })
            );
        }
        (verify::VerifyError::Bad(found), false) => println!("FAIL: {found}"),
        (e, true) => println!(
            "{}",
            serde_json::json!({"ok": false, "index": null, "error": e.to_string()})
        ),
        (e, false) => println!("FAIL: {e}"),
    }
}
