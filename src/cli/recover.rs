//! `gpuledger recover`: restores into a database that lost entries (a promoted standby that was
//! behind) what another copy of the log holds, checked against the largest checkpoint the log
//! published (ops/runbooks/log-rewound.md; the checks are `store::recover`'s).

use super::DbArgs;
use anyhow::{bail, Context, Result};
use clap::Args;
use gpuledger::core::{checkpoint, keys};
use gpuledger::keyfile;
use gpuledger::server::{mirror, publish};
use gpuledger::store::{self, high_water::HighWater, recover};
use std::path::PathBuf;
use std::process::ExitCode;

/// `recover`'s arguments.
#[derive(Args)]
pub struct RecoverArgs {
    /// The database to restore into (the one `serve` says `log_rewound` on).
    #[command(flatten)]
    db: DbArgs,
    /// The copy that still holds the published tree, only read: a database (the old primary
    /// started on a private port, a restored backup: sqlite://PATH or postgres://…) or the
    /// mirror directory `serve --mirror-dir` keeps.
    #[arg(long, value_name = "URL|DIR")]
    from: String,
    /// The log's private key file, as `serve` uses it (only its public half is used, to check
    /// notes and the databases) [default: gpuledger-log.key].
    #[arg(long, env = "GPULEDGER_LOG_KEY", default_value = "gpuledger-log.key")]
    log_key: PathBuf,
    /// The high-water file `serve` keeps [default: the log key's path with `.high-water`
    /// appended].
    #[arg(long, env = "GPULEDGER_HIGH_WATER_FILE", value_name = "FILE")]
    high_water_file: Option<PathBuf>,
    /// `serve`'s publish directory: its `checkpoint` is a published checkpoint too.
    #[arg(long, env = "GPULEDGER_PUBLISH_DIR", value_name = "DIR")]
    publish_dir: Option<PathBuf>,
    /// A checkpoint note published by this log (from a witness's operator, an auditor, a
    /// client that kept it); may be repeated. The largest of all known is the one restored.
    #[arg(long, value_name = "NOTE_FILE")]
    checkpoint: Vec<PathBuf>,
    /// Check everything and say what would be restored, then write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Restores what `--from` holds beyond the database: exit 0 when done (or nothing to do), 1
/// when refused (nothing written), 2 on an error.
pub fn run(args: RecoverArgs) -> Result<ExitCode> {
    let key = keyfile::read(&args.log_key)?;
    let url = &args.db.database_url;
    let mut target = store::connect(url).with_context(|| store::conn::redact(url))?;
    let info = store::ledger::log_info(&mut target)?;
    let public = keys::encode_public(&key.verifying_key());
    let vkey = checkpoint::verifier_key(&info.origin, &key.verifying_key());
    let required = published(&args, &vkey)?;
    let result = if store::conn::backend_of(&args.from).is_ok() {
        let mut source =
            store::connect(&args.from).with_context(|| store::conn::redact(&args.from))?;
        recover::recover(&mut target, &mut source, &public, &required, args.dry_run)
    } else {
        let mirror = mirror::MirrorReader::open(std::path::Path::new(&args.from))
            .map_err(anyhow::Error::msg)
            .context("--from is neither a database URL nor a mirror directory")?;
        recover::recover_from_copy(&mut target, &mirror, &public, &required, args.dry_run)
    };
    match result {
        Ok(r) => {
            if args.json {
                super::print_json(&serde_json::json!({"ok": true, "recovered": r}))?;
            } else {
                print_done(&r, &required);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(recover::RecoverError::Store(e)) => Err(e.into()),
        Err(e) => {
            if args.json {
                super::print_json(&serde_json::json!({"ok": false, "error": e.to_string()}))?;
            } else {
                println!("REFUSED: {e}");
            }
            Ok(ExitCode::from(1))
        }
    }
}

/// The largest checkpoint known to be published: the high-water file's, the publish
/// directory's, and every `--checkpoint`, each verified under the log key. Two roots for one
/// size among them is a fork: refused.
fn published(args: &RecoverArgs, vkey: &str) -> Result<recover::Required> {
    let file = args
        .high_water_file
        .clone()
        .unwrap_or_else(|| store::high_water::default_file(&args.log_key));
    // Read-only: the mark is gathered in memory, and the file is left as serve keeps it.
    let mark = HighWater::load(None, vkey)?;
    let mut sources: Vec<(String, String)> = Vec::new();
    match std::fs::read_to_string(&file) {
        Ok(note) => sources.push((note, format!("high-water file {}", file.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| file.display().to_string()),
    }
    if let Some(dir) = &args.publish_dir {
        let path = dir.join(publish::CHECKPOINT_FILE);
        let note = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
        sources.push((note, format!("publish directory {}", dir.display())));
    }
    for path in &args.checkpoint {
        let note = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
        sources.push((note, format!("checkpoint {}", path.display())));
    }
    let mut from = String::new();
    for (note, source) in &sources {
        let before = mark.mark();
        mark.raise(note, source)?;
        if mark.mark() != before {
            from.clone_from(source);
        }
    }
    if let Some(fork) = mark.rewound() {
        bail!("two roots for one size among the published checkpoints: {fork}");
    }
    let Some((size, root)) = mark.mark() else {
        bail!(
            "no published checkpoint found (no high-water file at {}, no --publish-dir, no \
             --checkpoint): give the largest checkpoint this log published with --checkpoint",
            file.display()
        );
    };
    Ok(recover::Required {
        size,
        root,
        source: from,
    })
}

fn print_done(r: &recover::Recovered, required: &recover::Required) {
    let verb = if r.dry_run {
        "would restore"
    } else {
        "restored"
    };
    if r.entries == 0 && r.from_size >= required.size {
        println!(
            "nothing to restore: the database holds the published checkpoint (size {}, {}) and \
             every entry the source holds",
            required.size, required.source
        );
        return;
    }
    println!(
        "{} {} entries ({} to {}), root {}; the published checkpoint of size {} ({}) is held",
        verb, r.entries, r.from_size, r.to_size, r.root, required.size, required.source
    );
    println!(
        "  with {} checkpoints, {} cosignatures, {} keys registered and {} revoked, {} invoices, \
         {} certificates, {} conflicts, {} webhook events ({} deliveries); accounts: {} tenants, \
         {} tokens ({} revocations), {} webhook endpoints",
        r.checkpoints,
        r.cosignatures,
        r.keys_registered,
        r.keys_revoked,
        r.invoices,
        r.certificates,
        r.conflicts,
        r.webhook_events,
        r.webhook_deliveries,
        r.tenants,
        r.tokens,
        r.tokens_revoked,
        r.webhook_endpoints
    );
    if r.dry_run {
        println!("dry run: nothing was written");
    } else {
        println!(
            "verify-log passes on the database; a `serve` on it resumes writes (its next write \
             checks the database again), or start it now"
        );
    }
}
