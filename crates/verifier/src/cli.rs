//! The command line of the verifier, shared by `gpuledger-verify` and `gpuledger verify`.
//! `anyhow` is used here only: this is the binaries' edge.

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `verify`'s arguments: what to check, and the log's verifier key.
#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct VerifyArgs {
    #[command(subcommand)]
    command: Option<VerifyCommand>,
    /// A certificate (JSON, as `GET /v1/certificates/{id}` serves it); needs --bundle.
    #[arg(long, requires = "bundle")]
    certificate: Option<PathBuf>,
    /// An invoice (JSON, as `GET /v1/invoices/{number}` serves it) to recompute; needs --bundle
    /// (`GET /v1/invoices/{number}/bundle`).
    #[arg(long, requires = "bundle", conflicts_with = "certificate")]
    invoice: Option<PathBuf>,
    /// An evidence bundle (JSON Lines, as `GET /v1/certificates/{id}/bundle` serves it).
    #[arg(long)]
    bundle: Option<PathBuf>,
    /// A signed checkpoint note to check on its own.
    #[arg(long, conflicts_with_all = ["certificate", "bundle"])]
    checkpoint: Option<PathBuf>,
    /// The log's verifier key (`<origin>+<id>+<key>`, as `gpuledger init` and `GET /v1/log`
    /// print it), or a file holding it. Get it from the provider's publication, not from a
    /// bundle.
    #[arg(long)]
    log_key: Option<String>,
    /// A witness whose cosignature counts (its vkey, `<name>+<key id>+<base64(0x04 ‖ key)>`),
    /// or @FILE holding one vkey a line. Repeatable. The checkpoint must then carry --quorum
    /// valid cosignatures (docs/PROTOCOL.md §16).
    #[arg(long = "witness", value_name = "VKEY|@FILE")]
    witnesses: Vec<String>,
    /// Distinct given witnesses that must have cosigned the checkpoint [default: 1 with
    /// --witness]; at most the number of witnesses.
    #[arg(long, value_name = "K")]
    quorum: Option<usize>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Accepted for scripts written for earlier versions: every signature is always verified
    /// on its own with strict Ed25519 (docs/PROTOCOL.md §3.3); there is no other mode.
    #[arg(long, hide = true)]
    strict: bool,
}

/// `verify`'s subcommands.
#[derive(Subcommand)]
pub enum VerifyCommand {
    /// Check that the log only grew between two checkpoints you saved (RFC 9162 consistency).
    Consistency(ConsistencyArgs),
}

/// `verify consistency`'s arguments.
#[derive(Args)]
pub struct ConsistencyArgs {
    /// The older checkpoint note.
    #[arg(long)]
    old: PathBuf,
    /// The newer checkpoint note; with --url and without --new, the service's latest.
    #[arg(long)]
    new: Option<PathBuf>,
    /// The consistency proof: a JSON list of base64 hashes, or the answer of
    /// `GET /v1/proofs/consistency`.
    #[arg(long, conflicts_with = "url")]
    proof: Option<PathBuf>,
    /// Fetch the proof (and the latest checkpoint) from a running service instead.
    #[arg(long)]
    url: Option<String>,
    /// Bearer token for --url.
    #[arg(long, env = "GPULEDGER_TOKEN")]
    token: Option<String>,
    /// The log's verifier key, or a file holding it.
    #[arg(long)]
    log_key: String,
    /// A witness whose cosignature counts (its vkey), or @FILE holding one vkey a line.
    /// Repeatable. The NEW checkpoint must then carry --quorum valid cosignatures (the old one
    /// is yours, saved earlier; docs/PROTOCOL.md §16.6).
    #[arg(long = "witness", value_name = "VKEY|@FILE")]
    witnesses: Vec<String>,
    /// Distinct given witnesses that must have cosigned the new checkpoint [default: 1 with
    /// --witness]; at most the number of witnesses.
    #[arg(long, value_name = "K")]
    quorum: Option<usize>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Prints `report` as text or one JSON line; exit status 0 when it passed, 1 when not.
pub fn print_report(report: &crate::Report, json: bool) -> ExitCode {
    if json {
        println!(
            "{}",
            serde_json::to_string(report).expect("reports serialise")
        );
    } else {
        println!("{report}");
    }
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Runs `verify` (or `verify consistency`) and prints its report.
pub fn run(args: VerifyArgs) -> Result<ExitCode> {
    let _always_strict = args.strict;
    match args.command {
        Some(VerifyCommand::Consistency(c)) => consistency(c),
        None => files(args),
    }
}

/// The verifier key from `--log-key`: the key itself, or a file holding it.
fn key(k: Option<String>) -> Result<String> {
    let k = k.context("--log-key is required: the log's verifier key, or a file holding it")?;
    crate::read_verifier_key(&k).map_err(anyhow::Error::msg)
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// The witnesses and quorum of `--witness` and `--quorum`, if any; usage errors otherwise.
fn witness_policy(
    witnesses: &[String],
    quorum: Option<usize>,
) -> Result<Option<crate::WitnessPolicy>> {
    let mut keys: Vec<gpuledger_core::cosignature::WitnessKey> = Vec::new();
    for arg in witnesses {
        let text = match arg.strip_prefix('@') {
            Some(path) => {
                std::fs::read_to_string(path).with_context(|| format!("reading --witness {arg}"))?
            }
            None => arg.clone(),
        };
        for vkey in text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let key = gpuledger_core::cosignature::WitnessKey::parse(vkey)
                .with_context(|| format!("--witness {vkey}"))?;
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
    }
    match (keys.len(), quorum) {
        (0, None) if witnesses.is_empty() => Ok(None),
        (0, _) => bail!("--quorum needs at least one --witness"),
        (n, Some(k)) if k == 0 || k > n => {
            bail!("--quorum {k} must be between 1 and the number of distinct witnesses ({n})")
        }
        (_, k) => Ok(Some(crate::WitnessPolicy {
            witnesses: keys,
            quorum: k.unwrap_or(1),
        })),
    }
}

/// That every named input file can be read: a missing or unreadable file is a usage error
/// (exit 2), not a verification failure (exit 1), which would say the evidence is bad.
fn readable(inputs: &[(&str, Option<&Path>)]) -> Result<()> {
    for (flag, path) in inputs {
        if let Some(path) = path {
            std::fs::File::open(path)
                .with_context(|| format!("{flag} {}: cannot read it", path.display()))?;
        }
    }
    Ok(())
}

/// A certificate, an invoice, a bundle or a checkpoint, from files.
fn files(args: VerifyArgs) -> Result<ExitCode> {
    readable(&[
        ("--certificate", args.certificate.as_deref()),
        ("--invoice", args.invoice.as_deref()),
        ("--bundle", args.bundle.as_deref()),
        ("--checkpoint", args.checkpoint.as_deref()),
    ])?;
    let log_key = key(args.log_key)?;
    let policy = witness_policy(&args.witnesses, args.quorum)?;
    // The quorum is checked first: without it nothing else matters, and it is cheap.
    let cosigned = match &policy {
        Some(p) => {
            let note = crate::anchored_note(
                args.certificate.as_deref(),
                args.bundle.as_deref(),
                args.checkpoint.as_deref(),
            );
            match crate::witness_quorum(note.as_deref(), p) {
                Ok(found) => Some((found, p)),
                Err(report) => return Ok(print_report(&report, args.json)),
            }
        }
        None => None,
    };
    let progress = !args.json && std::io::stderr().is_terminal();
    let file = |path| crate::BundleFile {
        path,
        log_key: &log_key,
        progress,
    };
    let report = match (args.certificate, args.invoice, args.bundle, args.checkpoint) {
        (Some(c), None, Some(b), _) => crate::certificate(&c, &file(&b)),
        (None, Some(i), Some(b), _) => {
            crate::invoice_file_shape(&i).map_err(anyhow::Error::msg)?;
            crate::invoice(&i, &file(&b))
        }
        (None, None, Some(b), _) => crate::bundle_only(&file(&b)),
        (None, None, None, Some(cp)) => crate::checkpoint(&cp, &log_key),
        _ => bail!(
            "give --certificate FILE --bundle FILE, --invoice FILE --bundle FILE, --bundle FILE, --checkpoint FILE, or `verify consistency`"
        ),
    };
    let report = match cosigned {
        Some((found, p)) => report.with_witnesses(&found, p),
        None => report.operator_alone(),
    };
    Ok(print_report(&report, args.json))
}

/// That the log only grew from `--old` to `--new` (or the service's latest).
fn consistency(args: ConsistencyArgs) -> Result<ExitCode> {
    readable(&[
        ("--old", Some(args.old.as_path())),
        ("--new", args.new.as_deref()),
        ("--proof", args.proof.as_deref()),
    ])?;
    let log_key = key(Some(args.log_key.clone()))?;
    let policy = witness_policy(&args.witnesses, args.quorum)?;
    let (new_note, hashes) = match (&args.url, &args.proof) {
        (Some(url), _) => fetch_proof(url, &args)?,
        (None, Some(proof)) => {
            let new = args
                .new
                .as_ref()
                .context("--new is required without --url")?;
            let bytes =
                std::fs::read(proof).with_context(|| format!("reading {}", proof.display()))?;
            let hashes = crate::parse_proof(&bytes).map_err(|f| anyhow::anyhow!("{f}"))?;
            (read_text(new)?, hashes)
        }
        (None, None) => bail!("give --proof FILE, or --url to fetch the proof"),
    };
    // As for the other modes, the quorum is checked first, on the new checkpoint: the one a
    // witness vouches for being on the history everybody else saw.
    let cosigned = match &policy {
        Some(p) => match crate::witness_quorum(Some(&new_note), p) {
            Ok(found) => Some((found, p)),
            Err(mut report) => {
                report.item = Some("new checkpoint".into());
                return Ok(print_report(&report, args.json));
            }
        },
        None => None,
    };
    let report = crate::consistency(&args.old, &new_note, &hashes, &log_key);
    let report = match cosigned {
        Some((found, p)) => report.with_witnesses(&found, p),
        None => report.operator_alone(),
    };
    Ok(print_report(&report, args.json))
}

/// The newer checkpoint (`--new`, or the service's latest) and the consistency proof from the
/// older one to it, fetched from the service at `url`.
fn fetch_proof(url: &str, args: &ConsistencyArgs) -> Result<(String, Vec<String>)> {
    let url = url.trim_end_matches('/');
    let get = |path: &str| -> Result<String> {
        let mut req = ureq::get(&format!("{url}{path}"));
        if let Some(t) = &args.token {
            req = req.header("Authorization", &format!("Bearer {t}"));
        }
        let mut resp = req.call().with_context(|| format!("GET {url}{path}"))?;
        Ok(resp.body_mut().read_to_string()?)
    };
    let new_note = match &args.new {
        Some(p) => read_text(p)?,
        None => get("/v1/checkpoint")?,
    };
    let size = |note: &str| -> Result<u64> {
        gpuledger_core::checkpoint::unverified(note)
            .map(|c| c.size())
            .context("not a checkpoint note")
    };
    let (m, n) = (size(&read_text(&args.old)?)?, size(&new_note)?);
    let hashes = if m == 0 || m > n {
        Vec::new()
    } else {
        let body = get(&format!("/v1/proofs/consistency?from={m}&to={n}"))?;
        crate::parse_proof(body.as_bytes()).map_err(|f| anyhow::anyhow!("{f}"))?
    };
    Ok((new_note, hashes))
}
