//! The `gpuledger` binary: a thin CLI over the library. `anyhow` lives only here.

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use gpuledger::core::keys;
use gpuledger::store::{self, access, verify};
use gpuledger::{bench, keyfile, server};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

/// mimalloc instead of the system allocator: verification and ingest allocate many small,
/// short-lived values across threads, where glibc's allocator spent about a fifth of the
/// verifier's time (docs/BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "gpuledger",
    version,
    about = "Metering and settlement ledger for rented GPU compute"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone)]
struct DbArgs {
    /// Database URL: sqlite://PATH or postgres://USER@HOST/DB.
    #[arg(long, env = "GPULEDGER_DATABASE_URL", default_value = store::DEFAULT_DATABASE_URL)]
    database_url: String,
}

#[derive(Subcommand)]
enum Command {
    /// Generate an Ed25519 key pair: FILE (private, mode 0600) and FILE.pub.
    Keygen {
        /// Where to write the private key.
        #[arg(long, short)]
        out: PathBuf,
    },
    /// Create or migrate the database; create the log's signing key if absent.
    Init {
        #[command(flatten)]
        db: DbArgs,
        /// The log's private key file (created with mode 0600 if absent).
        #[arg(long, env = "GPULEDGER_LOG_KEY", default_value = "gpuledger-log.key")]
        log_key: PathBuf,
        /// The checkpoint origin (also the signed-note key name), fixed at first init.
        #[arg(long, env = "GPULEDGER_ORIGIN", default_value = store::DEFAULT_ORIGIN)]
        origin: String,
    },
    /// Re-check every entry, hash, signature and checkpoint of the stored log.
    VerifyLog {
        #[command(flatten)]
        db: DbArgs,
        /// The log public key you trust (base64); defaults to the one the database records.
        #[arg(long)]
        log_public_key: Option<String>,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Verify a certificate, an invoice or a bundle offline, or that the log only grew between
    /// two checkpoints (docs/PROTOCOL.md §15). Needs no database, network or server.
    Verify(VerifyArgs),
    /// Run the HTTP API (see docs/CONFIGURATION.md for every setting).
    Serve {
        /// Address to listen on [default: 127.0.0.1:8080; port 0 picks a free port].
        #[arg(long, env = "GPULEDGER_LISTEN")]
        listen: Option<std::net::SocketAddr>,
        /// Database URL [default: sqlite://gpuledger.db].
        #[arg(long, env = "GPULEDGER_DATABASE_URL")]
        database_url: Option<String>,
        /// The log's private key file [default: gpuledger-log.key].
        #[arg(long, env = "GPULEDGER_LOG_KEY")]
        log_key: Option<PathBuf>,
        /// Seconds between checkpoints while the log grows [default: 10].
        #[arg(long, env = "GPULEDGER_CHECKPOINT_INTERVAL_SECONDS")]
        checkpoint_interval_seconds: Option<u64>,
        /// HTTP worker threads [default: number of CPUs].
        #[arg(long, env = "GPULEDGER_WORKERS")]
        workers: Option<usize>,
        /// Write each new checkpoint to DIR/checkpoint and DIR/checkpoints/<size> [default: none].
        #[arg(long, env = "GPULEDGER_PUBLISH_DIR", value_name = "DIR")]
        publish_dir: Option<PathBuf>,
        /// A TOML file with any of the settings above (flags and environment win).
        #[arg(long, env = "GPULEDGER_CONFIG")]
        config: Option<PathBuf>,
    },
    /// API tokens, offline against the database.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Print the OpenAPI document (what schemas/openapi.json holds).
    Openapi,
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Run a node agent: measure GPUs, sign records, spool them durably, deliver them
    /// (see docs/AGENT.md).
    Agent {
        /// The agent's TOML file.
        #[arg(long, env = "GPULEDGER_AGENT_CONFIG", default_value = "agent.toml")]
        config: PathBuf,
        /// Serve the agent's Prometheus metrics at http://ADDR/metrics (wins over the file's
        /// `metrics_listen`) [default: none].
        #[arg(long, env = "GPULEDGER_AGENT_METRICS_LISTEN", value_name = "ADDR")]
        metrics_listen: Option<std::net::SocketAddr>,
    },
    /// Run a market signer: signed spot prices from a CSV schedule or a simulated walk.
    Market {
        /// The market signer's TOML file.
        #[arg(long, env = "GPULEDGER_MARKET_CONFIG", default_value = "market.toml")]
        config: PathBuf,
    },
    /// The demo: the service, simulated hubs and a market signer in one process, on a SQLite
    /// file under ./demo-data; serves until Ctrl-C.
    Demo {
        /// Delete the demo directory first and start a new log.
        #[arg(long)]
        fresh: bool,
        /// The demo directory.
        #[arg(long, default_value = "demo-data")]
        dir: PathBuf,
        /// Address to serve on (port 0 picks a free port).
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: std::net::SocketAddr,
        /// Measurement interval of the simulated agents, in seconds.
        #[arg(long, default_value_t = 5)]
        interval_seconds: u64,
    },
}

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
struct VerifyArgs {
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
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Accepted for scripts written for earlier versions: every signature is always verified
    /// on its own with strict Ed25519 (docs/PROTOCOL.md §3.3); there is no other mode.
    #[arg(long, hide = true)]
    strict: bool,
}

#[derive(Subcommand)]
enum VerifyCommand {
    /// Check that the log only grew between two checkpoints you saved (RFC 9162 consistency).
    Consistency {
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
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Create a token; the secret is printed once and stored only as a hash.
    Create {
        #[command(flatten)]
        db: DbArgs,
        /// admin, auditor or tenant.
        #[arg(long)]
        role: String,
        /// The tenant of a tenant token.
        #[arg(long)]
        tenant: Option<String>,
        /// A note to recognise the token by.
        #[arg(long, default_value = "")]
        label: String,
    },
    /// List tokens (never their secrets).
    List {
        #[command(flatten)]
        db: DbArgs,
    },
    /// Revoke a token by id.
    Revoke {
        #[command(flatten)]
        db: DbArgs,
        id: String,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// `gpuledger verify` on a certificate whose bundle holds N records (built first, not
    /// timed): records per second and the verifier's peak memory.
    Verify {
        /// Records in the bundle.
        #[arg(long, default_value_t = 1_000_000)]
        records: u64,
        /// Build the certificate, bundle and log key in DIR and keep them (to rerun or profile
        /// `gpuledger verify` on them); by default they go to a temporary folder, removed after.
        #[arg(long, value_name = "DIR")]
        keep: Option<PathBuf>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Invoice preview of one tenant-month of usage records on a fresh SQLite log.
    Preview {
        /// Usage records in the month.
        #[arg(long, default_value_t = 1_000_000)]
        records: u64,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// HTTP ingest: concurrent simulated agents post signed batches to a server.
    Ingest {
        /// A running server's base URL; without it a server is started on a fresh SQLite file.
        #[arg(long)]
        url: Option<String>,
        /// Admin token of that server (to register the agents' keys).
        #[arg(long, env = "GPULEDGER_TOKEN")]
        token: Option<String>,
        /// Concurrent agents.
        #[arg(long, default_value_t = 8)]
        agents: usize,
        /// Records per POST.
        #[arg(long, default_value_t = 500)]
        batch: usize,
        /// Longest run.
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// Records signed in advance (the run ends when all are sent).
        #[arg(long, default_value_t = 400_000)]
        records: usize,
        /// Pace the agents to this many records/s in total (default: as fast as possible).
        #[arg(long)]
        rate: Option<f64>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Append throughput against a raw-insert baseline in the same database.
    Append {
        /// Database to use; it must hold an empty log. Default: a fresh SQLite file in a
        /// temporary directory.
        #[arg(long)]
        database_url: Option<String>,
        /// Records per phase.
        #[arg(long, default_value_t = 200_000)]
        records: usize,
        /// Distinct signers.
        #[arg(long, default_value_t = 16)]
        signers: usize,
        /// Records per append call.
        #[arg(long, default_value_t = 1_000)]
        batch: usize,
        /// Threads submitting batches concurrently.
        #[arg(long, default_value_t = 2)]
        clients: usize,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// The node agent: drain a spool backlog into a local server, then the CPU and peak RSS
    /// of an agent child at steady state (simulated GPUs).
    Agent {
        /// Records in the backlog to drain (0 skips the drain).
        #[arg(long, default_value_t = 1_000_000)]
        records: u64,
        /// Records per POST while draining (the agent's max_batch).
        #[arg(long, default_value_t = 500)]
        batch: usize,
        /// Seconds the steady-state agent is measured (0 skips it).
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// Simulated GPUs of the steady-state agent.
        #[arg(long, default_value_t = 8)]
        gpus: u32,
        /// Measurement interval of the steady-state agent, in seconds.
        #[arg(long, default_value_t = 10)]
        interval_seconds: u64,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn print_report(report: &gpuledger::verifier::Report, json: bool) -> ExitCode {
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

fn run_verify(args: VerifyArgs) -> Result<ExitCode> {
    use gpuledger::verifier;
    let key = |k: Option<String>| -> Result<String> {
        let k = k.context("--log-key is required: the log's verifier key, or a file holding it")?;
        verifier::read_verifier_key(&k).map_err(anyhow::Error::msg)
    };
    let progress = !args.json && std::io::stderr().is_terminal();
    let _always_strict = args.strict;
    let report = match args.command {
        Some(VerifyCommand::Consistency {
            old,
            new,
            proof,
            url,
            token,
            log_key,
            json,
        }) => {
            let log_key = key(Some(log_key))?;
            let (new_note, hashes) = match (url, proof) {
                (Some(url), _) => {
                    let url = url.trim_end_matches('/').to_owned();
                    let get = |path: &str| -> Result<String> {
                        let mut req = ureq::get(&format!("{url}{path}"));
                        if let Some(t) = &token {
                            req = req.header("Authorization", &format!("Bearer {t}"));
                        }
                        let mut resp = req.call().with_context(|| format!("GET {url}{path}"))?;
                        Ok(resp.body_mut().read_to_string()?)
                    };
                    let new_note = match &new {
                        Some(p) => std::fs::read_to_string(p)
                            .with_context(|| format!("reading {}", p.display()))?,
                        None => get("/v1/checkpoint")?,
                    };
                    let size = |note: &str| -> Result<u64> {
                        gpuledger::core::checkpoint::unverified(note)
                            .map(|c| c.size())
                            .context("not a checkpoint note")
                    };
                    let old_note = std::fs::read_to_string(&old)
                        .with_context(|| format!("reading {}", old.display()))?;
                    let (m, n) = (size(&old_note)?, size(&new_note)?);
                    let hashes = if m == 0 || m > n {
                        Vec::new()
                    } else {
                        let body = get(&format!("/v1/proofs/consistency?from={m}&to={n}"))?;
                        verifier::parse_proof(body.as_bytes())
                            .map_err(|f| anyhow::anyhow!("{f}"))?
                    };
                    (new_note, hashes)
                }
                (None, Some(proof)) => {
                    let new = new.context("--new is required without --url")?;
                    let new_note = std::fs::read_to_string(&new)
                        .with_context(|| format!("reading {}", new.display()))?;
                    let bytes = std::fs::read(&proof)
                        .with_context(|| format!("reading {}", proof.display()))?;
                    let hashes =
                        verifier::parse_proof(&bytes).map_err(|f| anyhow::anyhow!("{f}"))?;
                    (new_note, hashes)
                }
                (None, None) => bail!("give --proof FILE, or --url to fetch the proof"),
            };
            return Ok(print_report(
                &verifier::consistency(&old, &new_note, &hashes, &log_key),
                json,
            ));
        }
        None => {
            let log_key = key(args.log_key)?;
            let file = |path| verifier::BundleFile {
                path,
                log_key: &log_key,
                progress,
            };
            match (args.certificate, args.invoice, args.bundle, args.checkpoint) {
                (Some(c), None, Some(b), _) => verifier::certificate(&c, &file(&b)),
                (None, Some(i), Some(b), _) => verifier::invoice(&i, &file(&b)),
                (None, None, Some(b), _) => verifier::bundle_only(&file(&b)),
                (None, None, None, Some(cp)) => verifier::checkpoint(&cp, &log_key),
                _ => bail!(
                    "give --certificate FILE --bundle FILE, --invoice FILE --bundle FILE, --bundle FILE, --checkpoint FILE, or `verify consistency`"
                ),
            }
        }
    };
    Ok(print_report(&report, args.json))
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Keygen { out } => {
            let key = keys::generate();
            let public = keyfile::write_new(&out, &key)?;
            println!("private key: {} (mode 0600)", out.display());
            println!("public key:  {} ", public.display());
            println!("key id:      {}", keys::key_id(&key.verifying_key()));
            println!("{}", keys::encode_public(&key.verifying_key()));
            Ok(ExitCode::SUCCESS)
        }
        Command::Init {
            db,
            log_key,
            origin,
        } => {
            let (key, created) = keyfile::read_or_create(&log_key)?;
            let info = store::init(&db.database_url, &key, &origin).with_context(|| {
                format!("initialising {}", store::conn::redact(&db.database_url))
            })?;
            if created {
                println!("created log key {} (mode 0600)", log_key.display());
            }
            println!("database:     {}", store::conn::redact(&db.database_url));
            println!("origin:       {}", info.origin);
            println!("log key:      {}", info.public_key);
            println!("verifier key: {}", info.verifier_key);
            let mut conn = store::connect(&db.database_url)?;
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
        Command::Verify(args) => run_verify(args),
        Command::VerifyLog {
            db,
            log_public_key,
            json,
        } => {
            let mut conn = store::connect(&db.database_url)?;
            let bar = (!json && std::io::stderr().is_terminal()).then(|| {
                let b = indicatif::ProgressBar::new(0);
                b.set_style(
                    indicatif::ProgressStyle::with_template(
                        "{bar:40} {pos}/{len} entries ({per_sec}, eta {eta})",
                    )
                    .expect("valid template"),
                );
                b
            });
            let result =
                verify::verify_log(&mut conn, log_public_key.as_deref(), &mut |done, total| {
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
                    if json {
                        println!("{}", serde_json::json!({"ok": true, "report": report}));
                    } else {
                        println!(
                            "PASS: {} entries, root {}, {} checkpoints (latest at size {}), {} keys",
                            report.size,
                            report.root,
                            report.checkpoints,
                            report.latest_checkpoint_size.map_or("none".into(), |s| s.to_string()),
                            report.keys
                        );
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(verify::VerifyError::Store(e)) => Err(e.into()),
                Err(verify::VerifyError::Bad(found)) => {
                    if json {
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
                    } else {
                        println!("FAIL: {found}");
                    }
                    Ok(ExitCode::from(1))
                }
                Err(e) => {
                    if json {
                        println!(
                            "{}",
                            serde_json::json!({"ok": false, "index": null, "error": e.to_string()})
                        );
                    } else {
                        println!("FAIL: {e}");
                    }
                    Ok(ExitCode::from(1))
                }
            }
        }
        Command::Serve {
            listen,
            database_url,
            log_key,
            checkpoint_interval_seconds,
            workers,
            publish_dir,
            config,
        } => {
            let file = match &config {
                Some(p) => server::read_config(p).map_err(anyhow::Error::msg)?,
                None => server::ServeSettings::default(),
            };
            let flags = server::ServeSettings {
                listen,
                database_url,
                log_key,
                checkpoint_interval_seconds,
                workers,
                publish_dir,
            };
            server::init_logging();
            server::serve(flags.resolve(file))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Token(cmd) => {
            match cmd {
                TokenCommand::Create {
                    db,
                    role,
                    tenant,
                    label,
                } => {
                    let role = access::ApiRole::parse(&role)
                        .context("--role must be admin, auditor or tenant")?;
                    let mut conn = store::connect(&db.database_url)?;
                    let (t, secret) =
                        access::create_token(&mut conn, role, tenant.as_deref(), &label)?;
                    println!("{secret}");
                    eprintln!(
                        "token {} ({}) created; the secret above is shown once",
                        t.id,
                        t.role.as_str()
                    );
                }
                TokenCommand::List { db } => {
                    let mut conn = store::connect(&db.database_url)?;
                    for t in access::list_tokens(&mut conn)? {
                        println!(
                            "{}  {:8} {:20} {}  {}{}",
                            t.id,
                            t.role.as_str(),
                            t.tenant.as_deref().unwrap_or("-"),
                            t.created_at,
                            t.label,
                            t.revoked_at
                                .map(|r| format!("  (revoked {r})"))
                                .unwrap_or_default()
                        );
                    }
                }
                TokenCommand::Revoke { db, id } => {
                    let mut conn = store::connect(&db.database_url)?;
                    access::revoke_token(&mut conn, &id)?;
                    println!("token {id} revoked");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Openapi => {
            print!("{}", gpuledger::api::openapi_json());
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::Verify {
            records,
            keep,
            json,
        }) => {
            if records == 0 {
                bail!("--records must be above 0");
            }
            let tmp = match &keep {
                Some(dir) => {
                    std::fs::create_dir_all(dir)
                        .with_context(|| format!("creating {}", dir.display()))?;
                    dir.clone()
                }
                None => tempdir_for_bench()?,
            };
            let exe = std::env::current_exe().context("finding this executable")?;
            let r = bench::verify::run_verify_bench(&tmp, records, &exe, &|phase| {
                if !json {
                    eprintln!("… {phase}");
                }
            });
            if keep.is_none() {
                let _ = std::fs::remove_dir_all(&tmp);
            }
            let r = r?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!("records in the bundle:  {} ({} MB)", r.records, r.bundle_mb);
                println!(
                    "building it:            {} s (not part of the verification)",
                    r.prepare_seconds
                );
                let label = "gpuledger verify:";
                println!(
                    "{label:<23} {} s ({:.0} records/s)",
                    r.verify_seconds, r.records_per_s
                );
                println!(
                    "strict verification alone: {:.0} signatures/s; verify / that: {:.2} (target ≥ 0.7)",
                    r.strict_verify_per_s, r.verify_vs_strict
                );
                match r.verify_peak_rss_mb {
                    Some(m) => println!("verifier peak RSS:      {m} MB"),
                    None => println!("verifier peak RSS:      not available"),
                }
                println!("{}", r.verdict);
                if let Some(dir) = &keep {
                    println!(
                        "kept:                   {0}/certificate.json {0}/bundle.jsonl {0}/verifier_key.txt",
                        dir.display()
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::Preview { records, json }) => {
            if records == 0 {
                bail!("--records must be above 0");
            }
            let tmp = tempdir_for_bench()?;
            let r = bench::preview::run_preview(&tmp, records, &|phase| {
                if !json {
                    eprintln!("… {phase}");
                }
            });
            let _ = std::fs::remove_dir_all(&tmp);
            let r = r?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!("records in the month:   {}", r.records);
                println!(
                    "filling the log:        {} s (not part of the preview)",
                    r.fill_seconds
                );
                println!(
                    "invoice preview:        {} s ({:.0} records/s), {} line(s), total {} CNY",
                    r.preview_seconds, r.records_per_s, r.lines, r.total
                );
                match r.peak_rss_mb {
                    Some(m) => println!("peak RSS (whole run):   {m} MB"),
                    None => println!("peak RSS:               not available"),
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::Ingest {
            url,
            token,
            agents,
            batch,
            seconds,
            records,
            rate,
            json,
        }) => {
            let cfg = bench::ingest::IngestBench {
                url,
                token,
                agents,
                batch,
                seconds,
                records,
                rate,
            };
            let r = bench::ingest::run_ingest(&cfg, &|phase| {
                if !json {
                    eprintln!("… {phase}");
                }
            })?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!("agents × batch:         {} × {}", r.agents, r.batch);
                println!(
                    "accepted:               {} of {} records in {} s",
                    r.accepted_records, r.sent_records, r.seconds
                );
                println!("accepted records/s:     {:.0}", r.accepted_per_s);
                if let Some(t) = r.target_rate {
                    println!("target rate:            {t:.0} records/s");
                }
                println!(
                    "batch latency p50/p99:  {} / {} ms (max {} ms)",
                    r.batch_latency_p50_ms, r.batch_latency_p99_ms, r.batch_latency_max_ms
                );
                match r.server_peak_rss_mb {
                    Some(m) => println!("server peak RSS:        {m} MB"),
                    None => println!("server peak RSS:        not measured (server not started by the benchmark)"),
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::Agent {
            records,
            batch,
            seconds,
            gpus,
            interval_seconds,
            json,
        }) => {
            let cfg = bench::agent::AgentBench {
                records,
                batch,
                seconds,
                gpus,
                interval_seconds,
            };
            let r = bench::agent::run_agent_bench(&cfg, &|phase| {
                if !json {
                    eprintln!("… {phase}");
                }
            })?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                if let Some(d) = &r.drain {
                    println!(
                        "spool drain:            {} records ({} MB spool, batches of {}) in {} s",
                        d.records, d.spool_mb, d.batch, d.drain_seconds
                    );
                    println!("drain rate:             {:.0} records/s", d.records_per_s);
                    println!(
                        "delivered / dead:       {} / {} (spool filled in {} s, not counted)",
                        d.delivered, d.dead_lettered, d.fill_seconds
                    );
                }
                if let Some(s) = &r.steady {
                    println!(
                        "steady agent:           {} GPUs, {} s interval, {} intervals in {} s",
                        s.gpus, s.interval_seconds, s.intervals, s.seconds
                    );
                    println!(
                        "agent CPU:              {} s = {:.3} % of one core ({} s since start)",
                        s.cpu_seconds, s.cpu_percent_of_one_core, s.cpu_seconds_total
                    );
                    println!(
                        "agent RSS:              peak {} MB, now {} MB",
                        s.peak_rss_mb, s.rss_mb
                    );
                }
                if let Some(m) = r.server_peak_rss_mb {
                    println!("server peak RSS:        {m} MB");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Agent {
            config,
            metrics_listen,
        } => {
            server::init_logging();
            gpuledger::agent::run::run_from_config(&config, metrics_listen)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Market { config } => {
            server::init_logging();
            gpuledger::agent::market::run_from_config(&config)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo {
            fresh,
            dir,
            listen,
            interval_seconds,
        } => {
            if !(1..=3600).contains(&interval_seconds) {
                bail!("--interval-seconds must be 1 to 3600");
            }
            quiet_logging_by_default();
            server::init_logging();
            gpuledger::agent::demo::run(gpuledger::agent::demo::DemoOptions {
                dir,
                fresh,
                listen,
                interval_seconds,
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::Append {
            database_url,
            records,
            signers,
            batch,
            clients,
            json,
        }) => {
            if records == 0 || signers == 0 || batch == 0 || clients == 0 {
                bail!("--records, --signers, --batch and --clients must be above 0");
            }
            let tmp = tempdir_for_bench()?;
            let url = database_url
                .unwrap_or_else(|| format!("sqlite://{}", tmp.join("bench.db").display()));
            let cfg = bench::AppendBench {
                database_url: url,
                records,
                signers,
                batch,
                clients,
            };
            let quiet = json;
            let rates = bench::run_append(&cfg, &|phase| {
                if !quiet {
                    eprintln!("… {phase}");
                }
            });
            let _ = std::fs::remove_dir_all(&tmp);
            let rates = rates?;
            if json {
                println!("{}", serde_json::to_string(&rates)?);
            } else {
                println!("backend:                          {}", rates.backend);
                println!(
                    "records per phase:                {} (batches of {})",
                    rates.records, rates.batch
                );
                println!(
                    "strict verification alone:        {:>10.0} records/s ({} threads)",
                    rates.strict_verify_per_s, rates.threads
                );
                println!(
                    "append without signature checks:  {:>10.0} records/s",
                    rates.append_without_signature_checks_per_s
                );
                println!(
                    "full append:                      {:>10.0} records/s",
                    rates.full_append_per_s
                );
                println!(
                    "raw insert baseline:              {:>10.0} records/s",
                    rates.raw_insert_baseline_per_s
                );
                println!(
                    "full append / raw baseline:       {:>10.2}",
                    rates.full_vs_raw
                );
                println!(
                    "full append / slower half:        {:>10.2} (target ≥ 0.65)",
                    rates.full_vs_bound
                );
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn quiet_logging_by_default() {
    if std::env::var_os("GPULEDGER_LOG").is_none() && std::env::var_os("RUST_LOG").is_none() {
        // Request lines would drown the demo's own output.
        std::env::set_var("GPULEDGER_LOG", "warn");
    }
}

fn tempdir_for_bench() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("gpuledger-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
