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
    /// The checkpoint origin (also the signed-note key name), fixed at first init.
    #[arg(long, env = "GPULEDGER_ORIGIN", default_value = store::DEFAULT_ORIGIN)]
    origin: String,
}

/// Creates or migrates the database, creates the log key if absent, and the first admin token
/// if there is none (printed once).
pub fn init(args: InitArgs) -> Result<ExitCode> {
    let url = &args.db.database_url;
    let (key, created) = keyfile::read_or_create(&args.log_key)?;
    let info = store::init(url, &key, &args.origin)
        .with_context(|| format!("initialising {}", store::conn::redact(url)))?;
    if created {
        println!("created log key {} (mode 0600)", args.log_key.display());
    }
    println!("database:     {}", store::conn::redact(url));
    println!("origin:       {}", info.origin);
    println!("log key:      {}", info.public_key);
    println!("verifier key: {}", info.verifier_key);
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

/// `verify-log`'s arguments.
#[derive(Args)]
pub struct VerifyLogArgs {
    #[command(flatten)]
    db: DbArgs,
    /// The log public key you trust (base64); defaults to the one the database records.
    #[arg(long)]
    log_public_key: Option<String>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Re-checks every entry, hash, signature and checkpoint of the stored log: exit 0 when it
/// verifies, 1 with every failure listed when not.
pub fn verify_log(args: VerifyLogArgs) -> Result<ExitCode> {
    let mut conn = store::connect(&args.db.database_url)?;
    let bar = (!args.json && std::io::stderr().is_terminal()).then(progress_bar);
    let result = verify::verify_log(
        &mut conn,
        args.log_public_key.as_deref(),
        &mut |done, total| {
            if let Some(b) = &bar {
                b.set_length(total);
                b.set_position(done);
            }
        },
    );
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    match result {
        Ok(report) => {
            print_pass(&report, args.json);
            Ok(ExitCode::SUCCESS)
        }
        Err(verify::VerifyError::Store(e)) => Err(e.into()),
        Err(e) => {
            print_failure(&e, args.json);
            Ok(ExitCode::from(1))
        }
    }
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

fn print_pass(report: &verify::Report, json: bool) {
    if json {
        println!("{}", serde_json::json!({"ok": true, "report": report}));
    } else {
        println!(
            "PASS: {} entries, root {}, {} checkpoints (latest at size {}), {} keys",
            report.size,
            report.root,
            report.checkpoints,
            report
                .latest_checkpoint_size
                .map_or("none".into(), |s| s.to_string()),
            report.keys
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
