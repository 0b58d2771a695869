//! `gpuledger bench verify`: offline verification of a certificate whose bundle holds N records
//! (default 1,000,000), timed as `gpuledger verify` runs it: in a child process, whose peak
//! memory is read from `/proc` while it runs. The same bundle is written and verified in both
//! formats, `gpuledger-bundle/v2` (an inclusion proof per entry) and `gpuledger-bundle/v3`
//! (one multi-proof, what the service writes by default), and v3's size gzip-compressed as the
//! service serves it is measured too (docs/PROTOCOL.md §14).
//!
//! The log, its checkpoint, the certificate and the bundles are built here with the core's
//! pieces (as the ledger would build them; not timed): 64 nodes' keys registered by the log key,
//! region parameters, and N records (7 in 8 `gpu_usage`, 1 in 8 `energy`) of one tenant. With
//! `interleave` K > 0, a record of another tenant follows every K of the tenant's in the log
//! (not in the bundle), so the multi-proof has nodes to give, as in a log many tenants share.

use super::round;
use ed25519_dalek::SigningKey;
use gpuledger::core::bundle::{self, BundleSubject, Format, Header};
use gpuledger::core::certificate::{Certificate, CertificateRequest, Scope, Tally};
use gpuledger::core::checkpoint::LogSigner;
use gpuledger::core::envelope::Envelope;
use gpuledger::core::ids::LEDGER_SIGNER;
use gpuledger::core::invoice::Period;
use gpuledger::core::keys;
use gpuledger::core::leaf::{Leaf, GENESIS_PREV};
use gpuledger::core::merkle::{self, MemoryHashes};
use gpuledger::core::multiproof;
use gpuledger::core::rating::{PriceBook, RegionParams};
use gpuledger::core::record::{Body, Kind, RegionParameters, Role, SignerKeyRegistered};
use gpuledger::core::time::Timestamp;
use gpuledger::sample;
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
    /// Entries of the log (the bundle's, plus the other tenant's with `interleave`).
    pub log_entries: u64,
    /// A record of another tenant after every `interleave` of the tenant's (0: none).
    pub interleave: u64,
    /// Building the log and writing the bundles (not part of the verification).
    pub prepare_seconds: f64,
    /// Strict Ed25519 verification alone of the bundle's record signatures (up to 200,000 of
    /// them), on all cores, in this process: the bound `gpuledger verify` is compared with.
    pub strict_verify_per_s: f64,
    /// The bundle in `gpuledger-bundle/v2`: an inclusion proof per entry (before issue #15).
    pub v2: FormatRun,
    /// The bundle in `gpuledger-bundle/v3`: one multi-proof (the default since issue #15).
    pub v3: FormatRun,
    /// The v3 bundle gzip-compressed (level "fast", as the service's `Compress` serves it).
    pub v3_gzip_mb: f64,
    pub v3_gzip_bytes_per_record: f64,
    /// v2 bytes / v3 bytes, and v2 bytes / v3 gzip bytes.
    pub v3_smaller: f64,
    pub v3_gzip_smaller: f64,
    /// v3 records/s / v2 records/s.
    pub v3_speed_vs_v2: f64,
    /// What `gpuledger verify` printed (v3).
    pub verdict: String,
}

/// One format's bundle and its verification.
#[derive(Debug, Clone, Serialize)]
pub struct FormatRun {
    pub bundle_mb: f64,
    pub bytes_per_record: f64,
    /// Hashes of proofs in the bundle: every entry's inclusion proofs (v2), the multi-proof (v3).
    pub proof_hashes: u64,
    pub verify_seconds: f64,
    pub records_per_s: f64,
    /// records_per_s / strict_verify_per_s (target ≥ 0.7 at 1,000,000 records).
    pub verify_vs_strict: f64,
    /// Peak resident set of the `gpuledger verify` process.
    pub verify_peak_rss_mb: Option<f64>,
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
    interleave: u64,
    exe: &Path,
    progress: &(dyn Fn(&str) + Sync),
) -> std::io::Result<VerifyResult> {
    let started = Instant::now();
    let log = LogSigner::new(ORIGIN, sample::key("bench-verify-log")).map_err(io)?;
    let window = window(records)?;
    let nodes = super::sample_signers("bench-node", NODES as usize);
    let (context, book) = context_entries(&log, &nodes, window.from);
    progress(&format!("signing {records} records (not timed)"));
    let signed = sign_records(&nodes, window.from, records, interleave);
    progress("building the log, its tree and the certificate (not timed)");
    let (built, tally) = build_log(
        context,
        signed,
        (window.from.plus(-86_400), window.to),
        &book,
    )?;
    let files = Files::in_dir(dir);
    let note = write_certificate(&log, &built, tally, &window, &files)?;
    progress("writing the bundle in v2, an inclusion proof per entry (not timed)");
    let v2_hashes = write_bundle(&files.bundle_v2, &note, &built, Format::V2)?;
    progress("writing the bundle in v3, one multi-proof (not timed)");
    let v3_hashes = write_bundle(&files.bundle, &note, &built, Format::V3)?;
    progress("compressing the v3 bundle with gzip (not timed)");
    let gzip_bytes = gzip_size(&files.bundle)?;
    progress("strict verification alone of the records' signatures, on all cores");
    let strict_verify_per_s = strict_alone(&built.leaves, &nodes)?;
    let log_entries = built.leaves.len() as u64;
    drop(built);
    let prepare_seconds = started.elapsed().as_secs_f64();

    let measure = Measure {
        exe,
        files: &files,
        records,
        strict_verify_per_s,
        progress,
    };
    let (v2, _) = measure.run(&files.bundle_v2, v2_hashes, "v2")?;
    let (v3, verdict) = measure.run(&files.bundle, v3_hashes, "v3")?;
    let v2_bytes = std::fs::metadata(&files.bundle_v2)?.len() as f64;
    let v3_bytes = std::fs::metadata(&files.bundle)?.len() as f64;
    Ok(VerifyResult {
        records,
        log_entries,
        interleave,
        prepare_seconds: round(prepare_seconds, 1),
        strict_verify_per_s: strict_verify_per_s.round(),
        v3_gzip_mb: round(gzip_bytes as f64 / 1e6, 1),
        v3_gzip_bytes_per_record: (gzip_bytes as f64 / records as f64).round(),
        v3_smaller: round(v2_bytes / v3_bytes, 2),
        v3_gzip_smaller: round(v2_bytes / gzip_bytes as f64, 2),
        v3_speed_vs_v2: round(v3.records_per_s / v2.records_per_s, 2),
        v2,
        v3,
        verdict,
    })
}

/// What one verification of a bundle is measured against.
struct Measure<'a> {
    exe: &'a Path,
    files: &'a Files,
    records: u64,
    strict_verify_per_s: f64,
    progress: &'a (dyn Fn(&str) + Sync),
}

impl Measure<'_> {
    /// Runs `gpuledger verify` on `bundle` (of `hashes` proof hashes); its figures and verdict.
    fn run(&self, bundle: &Path, hashes: u64, label: &str) -> std::io::Result<(FormatRun, String)> {
        (self.progress)(&format!(
            "verifying the {label} bundle: gpuledger verify --certificate … --bundle … --log-key …"
        ));
        let bytes = std::fs::metadata(bundle)?.len() as f64;
        let run = run_verifier(self.exe, self.files, bundle)?;
        let records = self.records as f64;
        let records_per_s = records / run.seconds;
        Ok((
            FormatRun {
                bundle_mb: round(bytes / 1e6, 1),
                bytes_per_record: (bytes / records).round(),
                proof_hashes: hashes,
                verify_seconds: round(run.seconds, 3),
                records_per_s: records_per_s.round(),
                verify_vs_strict: round(records_per_s / self.strict_verify_per_s, 2),
                verify_peak_rss_mb: run.peak_kb.map(super::server::mb),
            },
            run.verdict,
        ))
    }
}

/// The size of `path` gzip-compressed at level "fast" (what actix-web's `Compress` uses).
fn gzip_size(path: &Path) -> std::io::Result<u64> {
    struct Count(u64);
    impl Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len() as u64;
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut gz = flate2::write::GzEncoder::new(Count(0), flate2::Compression::fast());
    std::io::copy(
        &mut std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(path)?),
        &mut gz,
    )?;
    Ok(gz.finish()?.0)
}

/// The certificate's period: the records' 10-second slots (N / 64 per node) end before today,
/// starting a day after `from`; `to` is the start of today, and every record's `received_at`
/// (the context's is a day before `from`, when its region parameters take effect).
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
        .map(|(n, _)| ledger_env(sample::node(n)))
        .collect();
    context.extend(nodes.iter().map(|(n, k)| {
        let scope = sample::node_scope(n);
        ledger_env(Body::SignerKeyRegistered(SignerKeyRegistered {
            signer: n.clone(),
            role: Role::Node,
            key_id: keys::key_id(&k.verifying_key()),
            public_key: keys::encode_public(&k.verifying_key()),
            nodes: scope.nodes,
            regions: scope.regions,
        }))
    }));
    let names: Vec<&str> = nodes.iter().map(|(n, _)| n.as_str()).collect();
    for body in sample::parties("bench-tenant", &names, sample::NODE_GPUS) {
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

/// The tenant whose records are interleaved with the bundle's in the log.
const OTHER_TENANT: &str = "bench-other-tenant";

/// `records` records of the tenant, round-robin over `nodes` in 10-second slots from `from`:
/// 7 in 8 `gpu_usage`, 1 in 8 `energy`; with `interleave` K > 0, after every K of them a
/// `gpu_usage` record of another tenant from the same node (seqs kept apart).
fn sign_records(
    nodes: &[(String, SigningKey)],
    from: Timestamp,
    records: u64,
    interleave: u64,
) -> Vec<Envelope> {
    let total = records + records.checked_div(interleave).unwrap_or(0);
    (0..total)
        .into_par_iter()
        .map(|j| {
            // Position j holds the tenant's record i, or another tenant's after group g (a
            // group: `interleave` of the tenant's, then one other).
            let (i, other) = match interleave {
                0 => (j, false),
                k => {
                    let (g, r) = (j / (k + 1), j % (k + 1));
                    if r == k {
                        (g, true)
                    } else {
                        (g * k + r, false)
                    }
                }
            };
            let (node, key) = &nodes[(i % NODES) as usize];
            let slot = (i / NODES) as i64;
            let end = from.plus(10 * (slot + 1));
            if other {
                return sample::usage(
                    node,
                    key,
                    (1 << 40) + j,
                    OTHER_TENANT,
                    Decimal::from(1),
                    end,
                );
            }
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
    /// The indexes of the bundle's entries: the context, then the tenant's records.
    in_bundle: Vec<u64>,
}

/// Appends `context`, then `signed`, as leaves all received at `received`; with the tally of
/// the usage and energy records.
fn build_log(
    context: Vec<Envelope>,
    signed: Vec<Envelope>,
    (context_received, received): (Timestamp, Timestamp),
    book: &PriceBook,
) -> std::io::Result<(BuiltLog, Tally)> {
    let context_len = context.len() as u64;
    let mut tree = MemoryHashes::default();
    let mut leaves: Vec<Vec<u8>> = Vec::with_capacity(context.len() + signed.len());
    let mut prev = GENESIS_PREV;
    let mut tally = Tally::new();
    let mut in_bundle = Vec::new();
    for env in context.into_iter().chain(signed) {
        let index = leaves.len() as u64;
        let others = env.body.get("tenant").and_then(|t| t.as_str()) == Some(OTHER_TENANT);
        if !others {
            in_bundle.push(index);
        }
        let body = if matches!(env.kind.as_str(), "gpu_usage" | "energy") && !others {
            let kind = Kind::parse(&env.kind).expect("a known kind");
            Some(Body::from_value(kind, &env.body).map_err(io)?)
        } else {
            None
        };
        // The context when its region parameters take effect (no price in the past), the
        // records at the end of the period.
        let at = if index < context_len {
            context_received
        } else {
            received
        };
        let bytes = Leaf::new(index, at, &prev, env).to_bytes();
        prev = merkle::leaf_hash(&bytes);
        merkle::append_leaves(index, &[prev], &mut tree).map_err(io)?;
        match &body {
            Some(Body::GpuUsage(u)) => tally.add_usage(index, &prev, u).map_err(io)?,
            Some(Body::Energy(e)) => tally.add_energy(index, &prev, e, book).map_err(io)?,
            _ => {}
        }
        leaves.push(bytes);
        debug_assert_eq!(leaves.len() as u64, index + 1);
    }
    Ok((
        BuiltLog {
            leaves,
            tree,
            in_bundle,
        },
        tally,
    ))
}

/// The files `gpuledger verify` is given.
struct Files {
    cert: PathBuf,
    /// The bundle in v3 (the default format).
    bundle: PathBuf,
    bundle_v2: PathBuf,
    key: PathBuf,
}

impl Files {
    fn in_dir(dir: &Path) -> Files {
        Files {
            cert: dir.join("certificate.json"),
            bundle: dir.join("bundle.jsonl"),
            bundle_v2: dir.join("bundle.v3.jsonl"),
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

/// Writes the certificate's bundle in `format`: the header on `note`, every entry of the
/// tenant (the context, then the records; in v2 each with its inclusion proof), in v3 the
/// multi-proof's node lines, the end line. Returns how many proof hashes it holds.
fn write_bundle(path: &Path, note: &str, built: &BuiltLog, format: Format) -> std::io::Result<u64> {
    let size = built.leaves.len() as u64;
    let mut out = BufWriter::with_capacity(1 << 22, std::fs::File::create(path)?);
    let header = Header::new(ORIGIN, note, BundleSubject::Certificate(CERT_ID.into()));
    out.write_all(&bundle::header_line(&header.with_format(format)))?;
    let mut hashes = 0u64;
    for chunk in built.in_bundle.chunks(65_536) {
        let lines: Vec<(Vec<u8>, u64)> = chunk
            .par_iter()
            .map(|&i| {
                let leaf = &built.leaves[i as usize];
                if format == Format::V3 {
                    return Ok((bundle::entry_line_v3(i, leaf), 0));
                }
                let proof = merkle::prove_record(size, i, &built.tree).map_err(io)?;
                Ok((bundle::entry_line(i, leaf, &proof), proof.len() as u64))
            })
            .collect::<std::io::Result<_>>()?;
        for (l, h) in lines {
            out.write_all(&l)?;
            hashes += h;
        }
    }
    let entries = built.in_bundle.len() as u64;
    if format == Format::V3 {
        let nodes = multiproof::prove(size, &built.in_bundle, &built.tree).map_err(io)?;
        for part in nodes.chunks(bundle::MAX_NODES_PER_LINE) {
            out.write_all(&bundle::nodes_line(part))?;
        }
        hashes = nodes.len() as u64;
        out.write_all(&bundle::end_line_v3(entries, hashes))?;
    } else {
        out.write_all(&bundle::end_line(entries))?;
    }
    out.flush()?;
    Ok(hashes)
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
fn run_verifier(exe: &Path, files: &Files, bundle: &Path) -> std::io::Result<VerifierRun> {
    let started = Instant::now();
    let mut child = std::process::Command::new(exe)
        .arg("verify")
        .arg("--certificate")
        .arg(&files.cert)
        .arg("--bundle")
        .arg(bundle)
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
    use gpuledger::core::leaf::Leaf;
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
    let ok = gpuledger::core::envelope::verify_strict_many(&items);
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
            "records in the bundle:  {} (log of {} entries{})",
            self.records,
            self.log_entries,
            if self.interleave == 0 {
                String::new()
            } else {
                format!(", another tenant's record after every {}", self.interleave)
            }
        )?;
        writeln!(
            f,
            "building it:            {} s (not part of the verification)",
            self.prepare_seconds
        )?;
        writeln!(
            f,
            "strict verification alone: {:.0} signatures/s",
            self.strict_verify_per_s
        )?;
        for (label, r) in [
            ("v2 (proof per entry)", &self.v2),
            ("v3 (multi-proof)", &self.v3),
        ] {
            writeln!(
                f,
                "{label:<21} {} MB, {} bytes/record, {} proof hashes; gpuledger verify {} s ({:.0} records/s, {:.2} of strict alone), peak RSS {}",
                r.bundle_mb,
                r.bytes_per_record,
                r.proof_hashes,
                r.verify_seconds,
                r.records_per_s,
                r.verify_vs_strict,
                r.verify_peak_rss_mb
                    .map_or("not available".to_owned(), |m| format!("{m} MB")),
            )?;
        }
        writeln!(
            f,
            "v3 gzip (fast)        {} MB, {} bytes/record",
            self.v3_gzip_mb, self.v3_gzip_bytes_per_record
        )?;
        writeln!(
            f,
            "v3 is {}x smaller than v2 ({}x gzip-compressed); verifies at {}x v2's rate",
            self.v3_smaller, self.v3_gzip_smaller, self.v3_speed_vs_v2
        )?;
        write!(f, "{}", self.verdict)
    }
}
