//! `gpuledger bench verify`: offline verification of a certificate whose bundle holds N records
//! (default 1,000,000), timed as `gpuledger verify` runs it: in a child process, whose peak
//! memory is read from `/proc` while it runs.
//!
//! The log, its checkpoint, the certificate and the bundle are built here with the core's
//! pieces (as the ledger would build them; not timed): 64 nodes' keys registered by the log key,
//! region parameters, and N records (7 in 8 `gpu_usage`, 1 in 8 `energy`) of one tenant.

use super::round;
use crate::core::bundle::{self, BundleSubject, Header};
use crate::core::certificate::{Certificate, CertificateRequest, Scope, Tally};
use crate::core::checkpoint::LogSigner;
use crate::core::envelope::Envelope;
use crate::core::ids::LEDGER_SIGNER;
use crate::core::invoice::Period;
use crate::core::keys;
use crate::core::leaf::{Leaf, GENESIS_PREV};
use crate::core::merkle::{self, MemoryHashes};
use crate::core::rating::{PriceBook, RegionParams};
use crate::core::record::{Body, Kind, RegionParameters, Role, SignerKeyRegistered};
use crate::core::time::Timestamp;
use crate::sample;
use ed25519_dalek::SigningKey;
use rayon::prelude::*;
use rust_decimal::Decimal;
use serde::Serialize;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Results.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyResult {
    pub records: u64,
    pub bundle_mb: f64,
    /// Building the log and writing the bundle (not part of the verification).
    pub prepare_seconds: f64,
    pub verify_seconds: f64,
    pub records_per_s: f64,
    /// Strict Ed25519 verification alone of the bundle's record signatures (up to 200,000 of
    /// them), on all cores, in this process: the bound `gpuledger verify` is compared with.
    pub strict_verify_per_s: f64,
    /// records_per_s / strict_verify_per_s (target ≥ 0.7 at 1,000,000 records).
    pub verify_vs_strict: f64,
    /// Peak resident set of the `gpuledger verify` process.
    pub verify_peak_rss_mb: Option<f64>,
    /// What `gpuledger verify` printed.
    pub verdict: String,
}

/// The sample records are signed for the sample log.
const ORIGIN: &str = sample::ORIGIN;
const NODES: u64 = 64;
/// The certificate's id.
const CERT_ID: &str = "CERT-000001";

fn io(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

/// Builds the files in `dir`, then runs `exe verify` on them; see the module docs.
pub fn run_verify_bench(
    dir: &Path,
    records: u64,
    exe: &Path,
    progress: &(dyn Fn(&str) + Sync),
) -> std::io::Result<VerifyResult> {
    let started = Instant::now();
    let log = LogSigner::new(ORIGIN, sample::key("bench-verify-log")).map_err(io)?;
    let window = window(records)?;
    let nodes = super::sample_signers("bench-node", NODES as usize);
    let (context, book) = context_entries(&log, &nodes, window.from);
    progress(&format!("signing {records} records (not timed)"));
    let signed = sign_records(&nodes, window.from, records);
    progress("building the log, its tree and the certificate (not timed)");
    let (built, tally) = build_log(context, signed, window.to, &book)?;
    let files = Files::in_dir(dir);
    let note = write_certificate(&log, &built, tally, &window, &files)?;
    progress("writing the bundle with an inclusion proof per entry (not timed)");
    write_bundle(&files.bundle, &note, &built)?;
    progress("strict verification alone of the records' signatures, on all cores");
    let strict_verify_per_s = strict_alone(&built.leaves, &nodes)?;
    drop(built);
    let prepare_seconds = started.elapsed().as_secs_f64();
    let bundle_mb = std::fs::metadata(&files.bundle)?.len() as f64 / 1e6;

    progress("verifying: gpuledger verify --certificate … --bundle … --log-key …");
    let run = run_verifier(exe, &files)?;
    let records_per_s = records as f64 / run.seconds;
    Ok(VerifyResult {
        records,
        bundle_mb: round(bundle_mb, 1),
        prepare_seconds: round(prepare_seconds, 1),
        verify_seconds: round(run.seconds, 3),
        records_per_s: records_per_s.round(),
        strict_verify_per_s: strict_verify_per_s.round(),
        verify_vs_strict: round(records_per_s / strict_verify_per_s, 2),
        verify_peak_rss_mb: run.peak_kb.map(super::server::mb),
        verdict: run.verdict,
    })
}

/// The certificate's period: the records' 10-second slots (N / 64 per node) end before today,
/// starting a day after `from`; `to` is the start of today, and every entry's `received_at`.
struct Window {
    from: Timestamp,
    to: Timestamp,
}

fn window(records: u64) -> std::io::Result<Window> {
    let now = Timestamp::now().unix();
    let day_start = now - now % 86_400;
    let slots = records.div_ceil(NODES) as i64;
    let from = Timestamp::from_unix(day_start - 10 * slots - 86_400).ok_or_else(|| io("time"))?;
    let to = Timestamp::from_unix(day_start).ok_or_else(|| io("time"))?;
    Ok(Window { from, to })
}

/// The log's context entries, signed by the log key: the nodes' key registrations, the
/// tenant's parties and the region's parameters (in force from a day before `from`); and the
/// price book those parameters make.
fn context_entries(
    log: &LogSigner,
    nodes: &[(String, SigningKey)],
    from: Timestamp,
) -> (Vec<Envelope>, PriceBook) {
    let mut ledger_seq = 0;
    let mut ledger_env = |body: Body| {
        ledger_seq += 1;
        Envelope::sign(
            ORIGIN,
            body.kind(),
            LEDGER_SIGNER,
            log.key(),
            ledger_seq,
            &body,
        )
    };
    let mut context: Vec<Envelope> = nodes
        .iter()
        .map(|(n, k)| {
            let scope = sample::node_scope(n);
            ledger_env(Body::SignerKeyRegistered(SignerKeyRegistered {
                signer: n.clone(),
                role: Role::Node,
                key_id: keys::key_id(&k.verifying_key()),
                public_key: keys::encode_public(&k.verifying_key()),
                nodes: scope.nodes,
                regions: scope.regions,
            }))
        })
        .collect();
    for body in sample::parties("bench-tenant") {
        context.push(ledger_env(body));
    }
    let params = RegionParameters {
        region: "cn-north-imx".into(),
        currency: "CNY".into(),
        electricity_price_per_kwh: Decimal::new(28, 2),
        pue: Decimal::new(108, 2),
        carbon_g_per_kwh: Decimal::from(550),
        effective_from: from.plus(-86_400),
    };
    context.push(ledger_env(Body::RegionParams(params.clone())));
    let mut book = PriceBook::default();
    book.add_region(
        &params.region,
        RegionParams {
            effective_from: params.effective_from,
            currency: params.currency.clone(),
            electricity_price_per_kwh: params.electricity_price_per_kwh,
            pue: params.pue,
            carbon_g_per_kwh: params.carbon_g_per_kwh,
        },
    );
    (context, book)
}

/// `records` records of the tenant, round-robin over `nodes` in 10-second slots from `from`:
/// 7 in 8 `gpu_usage`, 1 in 8 `energy`.
fn sign_records(nodes: &[(String, SigningKey)], from: Timestamp, records: u64) -> Vec<Envelope> {
    (0..records)
        .into_par_iter()
        .map(|i| {
            let (node, key) = &nodes[(i % NODES) as usize];
            let slot = (i / NODES) as i64;
            let end = from.plus(10 * (slot + 1));
            if i % 8 == 7 {
                sample::energy(
                    node,
                    key,
                    slot as u64 + 1,
                    Some("bench-tenant"),
                    Decimal::new(125, 4),
                    end,
                )
            } else {
                sample::usage(
                    node,
                    key,
                    slot as u64 + 1,
                    "bench-tenant",
                    Decimal::from(8),
                    end,
                )
            }
        })
        .collect()
}

/// The log built in memory: its leaves' bytes and its tree's stored hashes.
struct BuiltLog {
    leaves: Vec<Vec<u8>>,
    tree: MemoryHashes,
}

/// Appends `context`, then `signed`, as leaves all received at `received`; with the tally of
/// the usage and energy records.
fn build_log(
    context: Vec<Envelope>,
    signed: Vec<Envelope>,
    received: Timestamp,
    book: &PriceBook,
) -> std::io::Result<(BuiltLog, Tally)> {
    let mut tree = MemoryHashes::default();
    let mut leaves: Vec<Vec<u8>> = Vec::with_capacity(context.len() + signed.len());
    let mut prev = GENESIS_PREV;
    let mut tally = Tally::new();
    for env in context.into_iter().chain(signed) {
        let index = leaves.len() as u64;
        let body = if matches!(env.kind.as_str(), "gpu_usage" | "energy") {
            let kind = Kind::parse(&env.kind).expect("a known kind");
            Some(Body::from_value(kind, &env.body).map_err(io)?)
        } else {
            None
        };
        let bytes = Leaf::new(index, received, &prev, env).to_bytes();
        prev = merkle::leaf_hash(&bytes);
        merkle::append_leaves(index, &[prev], &mut tree).map_err(io)?;
        match &body {
            Some(Body::GpuUsage(u)) => tally.add_usage(index, &prev, u).map_err(io)?,
            Some(Body::Energy(e)) => tally.add_energy(index, &prev, e, book).map_err(io)?,
            _ => {}
        }
        leaves.push(bytes);
    }
    Ok((BuiltLog { leaves, tree }, tally))
}

/// The files `gpuledger verify` is given.
struct Files {
    cert: PathBuf,
    bundle: PathBuf,
    key: PathBuf,
}

impl Files {
    fn in_dir(dir: &Path) -> Files {
        Files {
            cert: dir.join("certificate.json"),
            bundle: dir.join("bundle.jsonl"),
            key: dir.join("verifier_key.txt"),
        }
    }
}

/// Signs the checkpoint of the whole log, issues the tenant's certificate for `window` with the
/// claims of `tally` on it,
/// and writes the certificate and the log's verifier key; returns the checkpoint note.
fn write_certificate(
    log: &LogSigner,
    built: &BuiltLog,
    tally: Tally,
    window: &Window,
    files: &Files,
) -> std::io::Result<String> {
    let size = built.leaves.len() as u64;
    let note = log.sign_checkpoint(size, &merkle::tree_hash(size, &built.tree).map_err(io)?);
    let claims = tally.finish().map_err(io)?;
    let req = CertificateRequest {
        tenant: "bench-tenant".into(),
        period: Period {
            from: window.from,
            to: window.to,
        },
        scope: Scope::default(),
    };
    let cert = Certificate::issue(CERT_ID.into(), &req, window.to, log, note.clone(), claims);
    std::fs::write(&files.cert, cert.to_canonical_json())?;
    std::fs::write(&files.key, log.verifier_key())?;
    Ok(note)
}

/// Writes the certificate's bundle: the header on `note`, every entry of the log with its
/// inclusion proof, the end line.
fn write_bundle(path: &Path, note: &str, built: &BuiltLog) -> std::io::Result<()> {
    let size = built.leaves.len() as u64;
    let mut out = BufWriter::with_capacity(1 << 22, std::fs::File::create(path)?);
    out.write_all(&bundle::header_line(&Header::new(
        ORIGIN,
        note,
        BundleSubject::Certificate(CERT_ID.into()),
    )))?;
    for chunk in (0..size).collect::<Vec<_>>().chunks(65_536) {
        let lines: Vec<Vec<u8>> = chunk
            .par_iter()
            .map(|&i| {
                let proof = merkle::prove_record(size, i, &built.tree).map_err(io)?;
                Ok(bundle::entry_line(i, &built.leaves[i as usize], &proof))
            })
            .collect::<std::io::Result<_>>()?;
        for l in lines {
            out.write_all(&l)?;
        }
    }
    out.write_all(&bundle::end_line(size))?;
    out.flush()
}

/// A timed run of `gpuledger verify`.
struct VerifierRun {
    /// From its start until it exits.
    seconds: f64,
    /// Its peak resident set, kB, as last read while it ran.
    peak_kb: Option<f64>,
    /// What it printed.
    verdict: String,
}

/// Runs `exe verify` on `files`, timed, reading its peak memory every 20 ms while it runs;
/// an error unless it passes.
fn run_verifier(exe: &Path, files: &Files) -> std::io::Result<VerifierRun> {
    let started = Instant::now();
    let mut child = std::process::Command::new(exe)
        .arg("verify")
        .arg("--certificate")
        .arg(&files.cert)
        .arg("--bundle")
        .arg(&files.bundle)
        .arg("--log-key")
        .arg(&files.key)
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut peak_kb = None;
    while child.try_wait()?.is_none() {
        if let Some(kb) = super::server::status_kb(child.id(), "VmHWM:") {
            peak_kb = Some(kb);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let seconds = started.elapsed().as_secs_f64();
    let output = child.wait_with_output()?;
    let verdict = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if !output.status.success() {
        return Err(io(format!("the verification failed: {verdict}")));
    }
    Ok(VerifierRun {
        seconds,
        peak_kb,
        verdict,
    })
}

/// Strict verification alone (records/s) of up to 200,000 record signatures of `leaves`.
fn strict_alone(
    leaves: &[Vec<u8>],
    nodes: &[(String, ed25519_dalek::SigningKey)],
) -> std::io::Result<f64> {
    use crate::core::leaf::Leaf;
    let keys: std::collections::HashMap<&str, ed25519_dalek::VerifyingKey> = nodes
        .iter()
        .map(|(n, k)| (n.as_str(), k.verifying_key()))
        .collect();
    let checked: Vec<_> = leaves
        .par_iter()
        .filter_map(|l| {
            let leaf = Leaf::from_bytes(l).ok()?;
            let key = *keys.get(leaf.envelope.signer.as_str())?;
            Some((leaf.envelope.check(ORIGIN).ok()?, key))
        })
        .take_any(200_000)
        .collect();
    let items: Vec<_> = checked
        .iter()
        .map(|(c, k)| (c.message.as_slice(), &c.signature, k))
        .collect();
    let started = Instant::now();
    let ok = crate::core::envelope::verify_strict_many(&items);
    let rate = items.len() as f64 / started.elapsed().as_secs_f64();
    if !ok.iter().all(|g| *g) {
        return Err(io("a sample signature does not verify"));
    }
    Ok(rate)
}

impl std::fmt::Display for VerifyResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "records in the bundle:  {} ({} MB)",
            self.records, self.bundle_mb
        )?;
        writeln!(
            f,
            "building it:            {} s (not part of the verification)",
            self.prepare_seconds
        )?;
        let label = "gpuledger verify:";
        writeln!(
            f,
            "{label:<23} {} s ({:.0} records/s)",
            self.verify_seconds, self.records_per_s
        )?;
        writeln!(
            f,
            "strict verification alone: {:.0} signatures/s; verify / that: {:.2} (target ≥ 0.7)",
            self.strict_verify_per_s, self.verify_vs_strict
        )?;
        match self.verify_peak_rss_mb {
            Some(m) => writeln!(f, "verifier peak RSS:      {m} MB")?,
            None => writeln!(f, "verifier peak RSS:      not available")?,
        }
        write!(f, "{}", self.verdict)
    }
}
