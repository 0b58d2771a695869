//! `gpuledger bench`: the benchmarks of docs/BENCHMARKS.md. Each prints its figures as text, or
//! as one JSON object with `--json`; progress goes to stderr.

use super::print_json;
use crate::bench;
use anyhow::{bail, Context, Result};
use clap::Subcommand;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `bench`'s subcommands.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// `gpuledger verify` on a certificate whose bundle holds N records (built first, not
    /// timed): records per second and the verifier's peak memory.
    Verify {
        /// Records in the bundle.
        #[arg(long, default_value_t = 1_000_000)]
        records: u64,
        /// Put a record of another tenant after every K of the bundle's records in the log
        /// (not in the bundle), as in a log tenants share; 0: the log holds the bundle only.
        #[arg(long, value_name = "K", default_value_t = 0)]
        interleave: u64,
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
    /// A large tenant's year under a contract: N usage records over its term on an empty log,
    /// then the invoice preview of its last whole billing period and of the whole term from
    /// the usage rollups (and the month record by record, which must agree).
    Contract {
        /// Usage records of the tenant (a multiple of 16 nodes).
        #[arg(long, default_value_t = 10_000_000)]
        records: u64,
        /// Database of the log; it must hold an empty log. Default: a fresh SQLite file in a
        /// temporary directory (removed after).
        #[arg(long)]
        database_url: Option<String>,
        /// Measure the log an earlier run with the same settings filled on the same day (kept
        /// with --database-url) instead of filling it.
        #[arg(long)]
        reuse: bool,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// HTTP ingest: concurrent simulated agents post signed batches to a server.
    Ingest(IngestArgs),
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
    /// Grows a log to N usage records of many tenants over a year, one tenant with M records in
    /// the measured month: append rate of the first and the last million, that tenant-month's
    /// invoice preview, certificate and one-day usage query (also in a fresh log holding only
    /// that tenant-month), and the database's bytes per entry.
    Grow {
        /// Usage records to append (a multiple of 50,000).
        #[arg(long, default_value_t = 10_000_000)]
        entries: u64,
        /// Records of the measured tenant in the measured month (default: a tenth of
        /// --entries, at most 1,000,000).
        #[arg(long)]
        month_records: Option<u64>,
        /// Tenants, the measured one included.
        #[arg(long, default_value_t = 100)]
        tenants: usize,
        /// Database of the log to grow; it must hold an empty log. Default: a fresh SQLite file
        /// in a temporary directory (removed after).
        #[arg(long)]
        database_url: Option<String>,
        /// Database of the fresh log compared with; it must hold an empty log. Default: a fresh
        /// SQLite file in a temporary directory (removed after).
        #[arg(long)]
        fresh_database_url: Option<String>,
        /// Measure logs grown by an earlier run with the same settings, on the same day, and
        /// kept with --database-url and --fresh-database-url, instead of growing them.
        #[arg(long)]
        reuse: bool,
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

/// `gpuledger bench append`: a SQLite file in a temporary directory unless a database is named.
fn append(
    database_url: Option<String>,
    records: usize,
    signers: usize,
    batch: usize,
    clients: usize,
    json: bool,
) -> Result<ExitCode> {
    if records == 0 || signers == 0 || batch == 0 || clients == 0 {
        bail!("--records, --signers, --batch and --clients must be above 0");
    }
    in_temp_dir(|tmp| {
        let cfg = bench::AppendBench {
            database_url: database_url
                .unwrap_or_else(|| format!("sqlite://{}", tmp.join("bench.db").display())),
            records,
            signers,
            batch,
            clients,
        };
        Ok(bench::run_append(&cfg, &progress(json))?)
    })
    .and_then(|r| report(r, json))
}

/// `gpuledger bench grow`: SQLite files in a temporary directory unless databases are named.
fn grow(
    (database_url, fresh_database_url): (Option<String>, Option<String>),
    entries: u64,
    month_records: Option<u64>,
    tenants: usize,
    reuse: bool,
    json: bool,
) -> Result<ExitCode> {
    in_temp_dir(|tmp| {
        let sqlite = |name: &str| format!("sqlite://{}", tmp.join(name).display());
        let cfg = bench::grow::GrowBench {
            database_url: database_url.unwrap_or_else(|| sqlite("grow.db")),
            fresh_database_url: fresh_database_url.unwrap_or_else(|| sqlite("fresh.db")),
            entries,
            month_records: month_records.unwrap_or((entries / 10).min(1_000_000)),
            tenants,
            reuse,
        };
        Ok(bench::grow::run_grow(&cfg, &progress(json))?)
    })
    .and_then(|r| report(r, json))
}

/// Flags of `gpuledger bench ingest`.
#[derive(clap::Args)]
pub struct IngestArgs {
    /// A running server's base URL; without it a server is started on a fresh SQLite file.
    #[arg(long)]
    pub url: Option<String>,
    /// Admin token of that server (to register the agents' keys).
    #[arg(long, env = "GPULEDGER_TOKEN")]
    pub token: Option<String>,
    /// Concurrent agents.
    #[arg(long, default_value_t = 8)]
    pub agents: usize,
    /// Records per POST.
    #[arg(long, default_value_t = 500)]
    pub batch: usize,
    /// Longest run.
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// Records signed in advance (the run ends when all are sent).
    #[arg(long, default_value_t = 400_000)]
    pub records: usize,
    /// Pace the agents to this many records/s in total (default: as fast as possible).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Attach this many witnesses (served in this process) to the server it starts.
    #[arg(long, default_value_t = 0)]
    pub witnesses: usize,
    /// Checkpoint interval of the server it starts [default: serve's, 10].
    #[arg(long)]
    pub checkpoint_interval_seconds: Option<u64>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

impl IngestArgs {
    fn run(self) -> Result<ExitCode> {
        let json = self.json;
        let cfg = bench::ingest::IngestBench {
            url: self.url,
            token: self.token,
            agents: self.agents,
            batch: self.batch,
            seconds: self.seconds,
            records: self.records,
            rate: self.rate,
            witnesses: self.witnesses,
            checkpoint_interval_seconds: self.checkpoint_interval_seconds,
        };
        report(bench::ingest::run_ingest(&cfg, &progress(json))?, json)
    }
}

/// Runs one benchmark.
pub fn run(cmd: BenchCommand) -> Result<ExitCode> {
    match cmd {
        BenchCommand::Verify {
            records,
            interleave,
            keep,
            json,
        } => verify(records, interleave, keep, json),
        BenchCommand::Preview { records, json } => preview(records, json),
        BenchCommand::Contract {
            records,
            database_url,
            reuse,
            json,
        } => in_temp_dir(|tmp| {
            let cfg = bench::contract::ContractBench {
                database_url: database_url
                    .unwrap_or_else(|| format!("sqlite://{}", tmp.join("contract.db").display())),
                records,
                reuse,
            };
            Ok(bench::contract::run_contract(&cfg, &progress(json))?)
        })
        .and_then(|r| report(r, json)),
        BenchCommand::Ingest(args) => args.run(),
        BenchCommand::Append {
            database_url,
            records,
            signers,
            batch,
            clients,
            json,
        } => append(database_url, records, signers, batch, clients, json),
        BenchCommand::Grow {
            entries,
            month_records,
            tenants,
            database_url,
            fresh_database_url,
            reuse,
            json,
        } => grow(
            (database_url, fresh_database_url),
            entries,
            month_records,
            tenants,
            reuse,
            json,
        ),
        BenchCommand::Agent {
            records,
            batch,
            seconds,
            gpus,
            interval_seconds,
            json,
        } => report(
            bench::agent::run_agent_bench(
                &bench::agent::AgentBench {
                    records,
                    batch,
                    seconds,
                    gpus,
                    interval_seconds,
                },
                &progress(json),
            )?,
            json,
        ),
    }
}

/// Progress lines on stderr, unless the output is JSON.
fn progress(json: bool) -> impl Fn(&str) + Sync {
    move |phase: &str| {
        if !json {
            eprintln!("… {phase}");
        }
    }
}

/// Prints a result as one JSON object or as its text.
fn report(r: impl serde::Serialize + std::fmt::Display, json: bool) -> Result<ExitCode> {
    if json {
        print_json(&r)?;
    } else {
        println!("{}", r.to_string().trim_end());
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `f` in a fresh temporary directory, removed after.
fn in_temp_dir<T>(f: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
    let dir = std::env::temp_dir().join(format!("gpuledger-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let r = f(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    r
}

fn verify(records: u64, interleave: u64, keep: Option<PathBuf>, json: bool) -> Result<ExitCode> {
    if records == 0 {
        bail!("--records must be above 0");
    }
    let exe = std::env::current_exe().context("finding this executable")?;
    let run = |dir: &Path| {
        Ok(bench::verify::run_verify_bench(
            dir,
            records,
            interleave,
            &exe,
            &progress(json),
        )?)
    };
    let r = match &keep {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            run(dir)?
        }
        None => in_temp_dir(run)?,
    };
    report(&r, json)?;
    if let (Some(dir), false) = (&keep, json) {
        println!(
            "kept:                   {0}/certificate.json {0}/bundle.jsonl {0}/bundle.v3.jsonl {0}/verifier_key.txt",
            dir.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn preview(records: u64, json: bool) -> Result<ExitCode> {
    if records == 0 {
        bail!("--records must be above 0");
    }
    let r = in_temp_dir(|dir| Ok(bench::preview::run_preview(dir, records, &progress(json))?))?;
    report(r, json)
}
