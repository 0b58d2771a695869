//! `gpuledger bench verify`: offline verification of a certificate whose bundle holds N records
//! (default 1,000,000), timed as `gpuledger verify` runs it: in a child process, whose peak
//! memory is read from `/proc` while it runs.
//!
//! The log, its checkpoint, the certificate and the bundle are built here with the core's
//! pieces (as the ledger would build them; not timed): 64 nodes' keys registered by the log key,
//! region parameters, and N records (7 in 8 `gpu_usage`, 1 in 8 `energy`) of one tenant.

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
use rayon::prelude::*;
use rust_decimal::Decimal;
use serde::Serialize;
use std::io::{BufWriter, Write};
use std::path::Path;
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
    let now = Timestamp::now().unix();
    let day_start = now - now % 86_400;
    // Records are 10-second slots per node ending before today: N / 64 slots per node.
    let slots = records.div_ceil(NODES) as i64;
    let from = Timestamp::from_unix(day_start - 10 * slots - 86_400).ok_or_else(|| io("time"))?;
    let to = Timestamp::from_unix(day_start).ok_or_else(|| io("time"))?;
    let received = to;
    let nodes: Vec<(String, ed25519_dalek::SigningKey)> = (0..NODES)
        .map(|i| {
            (
                format!("bench-node-{i:02}"),
                sample::key(&format!("bench-node-{i}")),
            )
        })
        .collect();
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
    progress(&format!("signing {records} records (not timed)"));
    let signed: Vec<Envelope> = (0..records)
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
        .collect();
    progress("building the log, its tree and the certificate (not timed)");
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
            Some(Body::Energy(e)) => tally.add_energy(index, &prev, e, &book).map_err(io)?,
            _ => {}
        }
        leaves.push(bytes);
    }
    let size = leaves.len() as u64;
    let note = log.sign_checkpoint(size, &merkle::tree_hash(size, &tree).map_err(io)?);
    let claims = tally.finish().map_err(io)?;
    let req = CertificateRequest {
        tenant: "bench-tenant".into(),
        period: Period { from, to },
        scope: Scope::default(),
    };
    let cert = Certificate::issue(
        "CERT-000001".into(),
        &req,
        received,
        &log,
        note.clone(),
        claims,
    );
    let cert_path = dir.join("certificate.json");
    let bundle_path = dir.join("bundle.jsonl");
    let key_path = dir.join("verifier_key.txt");
    std::fs::write(&cert_path, cert.to_canonical_json())?;
    std::fs::write(&key_path, log.verifier_key())?;
    progress("writing the bundle with an inclusion proof per entry (not timed)");
    let mut out = BufWriter::with_capacity(1 << 22, std::fs::File::create(&bundle_path)?);
    out.write_all(&bundle::header_line(&Header::new(
        ORIGIN,
        &note,
        BundleSubject::Certificate(cert.id.clone()),
    )))?;
    for chunk in (0..size).collect::<Vec<_>>().chunks(65_536) {
        let lines: Vec<Vec<u8>> = chunk
            .par_iter()
            .map(|&i| {
                let proof = merkle::prove_record(size, i, &tree).map_err(io)?;
                Ok(bundle::entry_line(i, &leaves[i as usize], &proof))
            })
            .collect::<std::io::Result<_>>()?;
        for l in lines {
            out.write_all(&l)?;
        }
    }
    out.write_all(&bundle::end_line(size))?;
    out.flush()?;
    drop(out);
    progress("strict verification alone of the records' signatures, on all cores");
    let strict_verify_per_s = strict_alone(&leaves, &nodes)?;
    drop(leaves);
    drop(tree);
    let prepare_seconds = started.elapsed().as_secs_f64();
    let bundle_mb = std::fs::metadata(&bundle_path)?.len() as f64 / 1e6;

    progress("verifying: gpuledger verify --certificate … --bundle … --log-key …");
    let started = Instant::now();
    let mut child = std::process::Command::new(exe)
        .arg("verify")
        .arg("--certificate")
        .arg(&cert_path)
        .arg("--bundle")
        .arg(&bundle_path)
        .arg("--log-key")
        .arg(&key_path)
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut peak = None;
    while child.try_wait()?.is_none() {
        if let Some(kb) = super::server::status_kb(child.id(), "VmHWM:") {
            peak = Some(kb);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let verify_seconds = started.elapsed().as_secs_f64();
    let output = child.wait_with_output()?;
    let verdict = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    if !output.status.success() {
        return Err(io(format!("the verification failed: {verdict}")));
    }
    Ok(VerifyResult {
        records,
        bundle_mb: (bundle_mb * 10.0).round() / 10.0,
        prepare_seconds: (prepare_seconds * 10.0).round() / 10.0,
        verify_seconds: (verify_seconds * 1000.0).round() / 1000.0,
        records_per_s: (records as f64 / verify_seconds).round(),
        strict_verify_per_s: strict_verify_per_s.round(),
        verify_vs_strict: ((records as f64 / verify_seconds) / strict_verify_per_s * 100.0).round()
            / 100.0,
        verify_peak_rss_mb: peak.map(|kb| (kb / 1024.0 * 10.0).round() / 10.0),
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
