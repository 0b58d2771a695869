//! `gpuledger-verify` (also `gpuledger verify`): offline checks of certificates, bundles, checkpoints and consistency
//! proofs (docs/PROTOCOL.md §15). It reads files and the verifier key only: no database,
//! network or server (the online consistency variant fetches one proof, nothing else).

pub mod cli;

use gpuledger_core::bundle::{self, Anchor, Failure, Header, NoSubject, Reason, Subject};
use gpuledger_core::certificate::{Certificate, CertificateCheck};
use gpuledger_core::merkle;
use serde::Serialize;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// The result of one verification, for people (`Display`) and machines (`Serialize`).
#[derive(Debug, Serialize)]
pub struct Report {
    /// `PASS` or `FAIL`.
    pub result: &'static str,
    pub reason: Option<&'static str>,
    pub item: Option<String>,
    pub message: String,
    pub summary: serde_json::Value,
}

impl Report {
    fn pass(message: String, summary: serde_json::Value) -> Report {
        Report {
            result: "PASS",
            reason: None,
            item: None,
            message,
            summary,
        }
    }

    fn fail(f: Failure) -> Report {
        Report {
            result: "FAIL",
            reason: Some(f.reason.code()),
            item: Some(f.item),
            message: f.message,
            summary: serde_json::Value::Null,
        }
    }

    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.result == "PASS"
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.reason, &self.item) {
            (Some(r), Some(i)) => write!(f, "FAIL: {r}: {i}: {}", self.message),
            _ => write!(f, "PASS: {}", self.message),
        }
    }
}

/// Reads a verifier key given as the key string itself or as a file holding it.
pub fn read_verifier_key(arg: &str) -> Result<String, String> {
    let s = if Path::new(arg).is_file() {
        std::fs::read_to_string(arg).map_err(|e| format!("reading {arg}: {e}"))?
    } else {
        arg.to_owned()
    };
    let s = s.trim().to_owned();
    bundle::verifier_public_key(&s).map_err(|e| {
        if gpuledger_core::keys::decode_public(&s).is_ok() {
            // The raw key alone names no origin, and a checkpoint is signed under its origin.
            format!(
                "--log-key: {s} is a raw public key; give the log's verifier key instead \
                 (<origin>+<key id>+<key>: `verifier_key` in GET /v1/log, or what \
                 `gpuledger init` printed)"
            )
        } else {
            format!("--log-key: {e}")
        }
    })?;
    Ok(s)
}

fn read_file(path: &Path, what: &str) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|e| {
        Failure::new(
            Reason::Malformed,
            what,
            format!("cannot read {}: {e}", path.display()),
        )
    })
}

/// The lines of a bundle file, with a progress bar on a terminal.
fn bundle_lines(
    path: &Path,
    progress: bool,
) -> Result<
    (
        impl Iterator<Item = std::io::Result<Vec<u8>>>,
        indicatif::ProgressBar,
    ),
    Failure,
> {
    let file = File::open(path).map_err(|e| {
        Failure::new(
            Reason::Malformed,
            "bundle",
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let bar = if progress {
        let b = indicatif::ProgressBar::new(len);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "verifying {bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
            )
            .expect("a valid template"),
        );
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    let reader: Box<dyn Read + Send> = Box::new(bar.wrap_read(file));
    Ok((BufReader::with_capacity(1 << 20, reader).split(b'\n'), bar))
}

fn summary_of(v: &bundle::Verified) -> serde_json::Value {
    serde_json::json!({
        "log_origin": v.anchor.checkpoint.origin(),
        "checkpoint_size": v.anchor.size(),
        "checkpoint_root": merkle::encode_hash(&v.anchor.root()),
        "entries": v.entries,
        "records": v.records,
        "bundle_format": v.anchor.format.name(),
        "multiproof_nodes": v.nodes,
    })
}

/// A bundle file to check, against which verifier key, and how.
pub struct BundleFile<'a> {
    pub path: &'a Path,
    /// The log's verifier key string.
    pub log_key: &'a str,
    /// Show a progress bar (on a terminal).
    pub progress: bool,
}

impl BundleFile<'_> {
    /// Verifies the bundle for the subject `make` builds from its header (§15).
    fn verify<S: Subject>(
        &self,
        make: impl FnOnce(&Header, &Anchor) -> Result<S, Failure>,
    ) -> Result<(bundle::Verified, S), Failure> {
        let (lines, bar) = bundle_lines(self.path, self.progress)?;
        let result = bundle::verify_bundle(lines, self.log_key, make, &mut |_| {});
        bar.finish_and_clear();
        result
    }
}

/// Checks a certificate with its bundle (§15).
pub fn certificate(cert: &Path, bundle_file: &BundleFile) -> Report {
    let run = || -> Result<Report, Failure> {
        let cert = Certificate::from_json(&read_file(cert, "certificate")?)
            .map_err(|e| Failure::new(Reason::Malformed, "certificate", e.to_string()))?;
        let (verified, check) =
            bundle_file.verify(|h, a| CertificateCheck::start(cert.clone(), h, a))?;
        let claims = check.finish()?;
        let mut summary = summary_of(&verified);
        summary["certificate"] = cert.id.clone().into();
        summary["tenant"] = cert.tenant.clone().into();
        summary["totals"] = serde_json::to_value(&claims.totals).expect("totals serialise");
        let t = &claims.totals;
        Ok(Report::pass(
            format!(
                "certificate {} of {} for [{}, {}): {} records, {} GPU-s, {} kWh ({} kWh with PUE, {} kgCO2e), all signed, registered, included in checkpoint {} of {}, and summed exactly",
                cert.id,
                cert.tenant,
                cert.period_from,
                cert.period_to,
                t.records,
                gpuledger_core::decimal::to_canonical(t.gpu_seconds),
                gpuledger_core::decimal::to_canonical(t.kwh),
                gpuledger_core::decimal::to_canonical(t.kwh_with_pue),
                gpuledger_core::decimal::to_canonical(t.carbon_kg),
                verified.anchor.size(),
                verified.anchor.checkpoint.origin(),
            ),
            summary,
        ))
    };
    run().unwrap_or_else(Report::fail)
}

/// That an `--invoice` file holds one invoice document, not the array `POST /v1/invoices`
/// answers (one invoice per currency): a usage error naming what to save instead.
pub fn invoice_file_shape(path: &Path) -> Result<(), String> {
    let Ok(bytes) = std::fs::read(path) else {
        return Ok(()); // the check itself reports an unreadable file
    };
    let Ok(serde_json::Value::Array(items)) = serde_json::from_slice(&bytes) else {
        return Ok(());
    };
    if items.len() == 1 {
        return Ok(()); // `invoice` reads the one document it holds
    }
    let numbers: Vec<&str> = items
        .iter()
        .filter_map(|i| i.get("number").and_then(|n| n.as_str()))
        .collect();
    Err(format!(
        "--invoice {}: this file is a JSON array of {} invoice(s) ({}), as `POST /v1/invoices` \
         answers; give one invoice document: save `GET /v1/invoices/NUMBER` (or `jq '.[0]'` of \
         this file) and its bundle `GET /v1/invoices/NUMBER/bundle`",
        path.display(),
        items.len(),
        if numbers.is_empty() {
            "no numbers".to_owned()
        } else {
            numbers.join(", ")
        }
    ))
}

/// The invoice document of an `--invoice` file: the document itself, or the one element of
/// an array of one (`POST /v1/invoices` answers an array, one invoice per currency). The whole
/// text is read strictly (repeated member names refused) before the element is taken out.
fn invoice_document(text: &str) -> Result<gpuledger_core::invoice::InvoiceDoc, String> {
    match gpuledger_core::json::parse_strict(text.as_bytes()) {
        Ok(serde_json::Value::Array(items)) if items.len() == 1 => {
            gpuledger_core::invoice::from_json(&items[0].to_string())
        }
        _ => gpuledger_core::invoice::from_json(text),
    }
}

/// Recomputes an invoice (as `GET /v1/invoices/{number}` serves it) from its bundle.
pub fn invoice(invoice_path: &Path, bundle_file: &BundleFile) -> Report {
    let run = || -> Result<Report, Failure> {
        let text = String::from_utf8(read_file(invoice_path, "invoice")?)
            .map_err(|_| Failure::new(Reason::Malformed, "invoice", "not UTF-8"))?;
        let inv =
            invoice_document(&text).map_err(|e| Failure::new(Reason::Malformed, "invoice", e))?;
        let (verified, check) = bundle_file
            .verify(|h, a| gpuledger_core::invoice::InvoiceCheck::start(inv.clone(), h, a))?;
        let inv = check.finish()?;
        let mut summary = summary_of(&verified);
        summary["invoice"] = inv.number().into();
        summary["total"] = inv.total().to_string().into();
        summary["currency"] = inv.currency().into();
        let format = match &inv {
            gpuledger_core::invoice::InvoiceDoc::V1(_) => "version 1".to_owned(),
            gpuledger_core::invoice::InvoiceDoc::V2(i) => {
                summary["net_total"] = i.net_total.to_string().into();
                summary["tax_total"] = i.tax_total.to_string().into();
                format!(
                    "net {}, tax {} at the rates it declares",
                    i.net_total, i.tax_total
                )
            }
        };
        summary["format"] = match &inv {
            gpuledger_core::invoice::InvoiceDoc::V1(_) => "gpuledger-invoice/v1",
            gpuledger_core::invoice::InvoiceDoc::V2(_) => {
                gpuledger_core::invoice::INVOICE_FORMAT_V2
            }
        }
        .into();
        Ok(Report::pass(
            format!(
                "invoice {} of {} for [{}, {}): {} lines, total {} {} ({format}), recomputed exactly from {} signed records and the prices in checkpoint {} of {}",
                inv.number(),
                inv.tenant(),
                inv.period().from,
                inv.period().to,
                inv.line_count(),
                inv.total(),
                inv.currency(),
                verified.records,
                verified.anchor.size(),
                verified.anchor.checkpoint.origin()
            ),
            summary,
        ))
    };
    run().unwrap_or_else(Report::fail)
}

/// Checks a bundle alone (§15 steps 1, 2 and 4).
pub fn bundle_only(bundle_file: &BundleFile) -> Report {
    let run = || -> Result<Report, Failure> {
        let (v, _) = bundle_file.verify(|_, _| Ok(NoSubject))?;
        Ok(Report::pass(
            format!(
                "bundle of {} entries ({} records), every one signed by a valid key and included in checkpoint {} of {}",
                v.entries,
                v.records,
                v.anchor.size(),
                v.anchor.checkpoint.origin()
            ),
            summary_of(&v),
        ))
    };
    run().unwrap_or_else(Report::fail)
}

fn read_anchor(path: &Path, what: &str, log_key: &str) -> Result<Anchor, Failure> {
    let text = String::from_utf8(read_file(path, what)?)
        .map_err(|_| Failure::new(Reason::Malformed, what, "not UTF-8"))?;
    bundle::anchor(&text, log_key).map_err(|mut f| {
        f.item = what.to_owned();
        f
    })
}

/// Checks a signed checkpoint note.
pub fn checkpoint(path: &Path, log_key: &str) -> Report {
    match read_anchor(path, "checkpoint", log_key) {
        Ok(a) => Report::pass(
            format!(
                "checkpoint of {} at size {}, root {}, signed by the log key",
                a.checkpoint.origin(),
                a.size(),
                merkle::encode_hash(&a.root())
            ),
            serde_json::json!({"size": a.size(), "root": merkle::encode_hash(&a.root())}),
        ),
        Err(f) => Report::fail(f),
    }
}

/// Reads a consistency proof file: a JSON array of base64 hashes, or an object with `hashes`
/// (what `GET /v1/proofs/consistency` answers).
pub fn parse_proof(bytes: &[u8]) -> Result<Vec<String>, Failure> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum ProofFile {
        List(Vec<String>),
        Object { hashes: Vec<String> },
    }
    match serde_json::from_slice::<ProofFile>(bytes) {
        Ok(ProofFile::List(h)) | Ok(ProofFile::Object { hashes: h }) => Ok(h),
        Err(e) => Err(Failure::new(
            Reason::Malformed,
            "proof",
            format!("not a JSON list of hashes: {e}"),
        )),
    }
}

/// Checks that the log only grew between two saved checkpoints (RFC 9162 §2.1.4.2).
pub fn consistency(old: &Path, new_note: &str, proof: &[String], log_key: &str) -> Report {
    let run = || -> Result<Report, Failure> {
        let old = read_anchor(old, "old checkpoint", log_key)?;
        let new = bundle::anchor(new_note, log_key).map_err(|mut f| {
            f.item = "new checkpoint".into();
            f
        })?;
        if old.size() > new.size() {
            return Err(Failure::new(
                Reason::Order,
                "old checkpoint",
                format!("size {} is above the new size {}", old.size(), new.size()),
            ));
        }
        let hashes = merkle::decode_proof(proof).ok_or_else(|| {
            Failure::new(
                Reason::Malformed,
                "proof",
                "hashes are not base64 of 32 bytes",
            )
        })?;
        let ok = if old.size() == 0 {
            hashes.is_empty()
        } else {
            merkle::check_tree(&hashes, new.size(), new.root(), old.size(), old.root()).is_ok()
        };
        if !ok {
            return Err(Failure::new(
                Reason::ConsistencyProof,
                "proof",
                format!(
                    "the tree of size {} is not an extension of the tree of size {}: the log was rewritten, or the proof is wrong",
                    new.size(),
                    old.size()
                ),
            ));
        }
        Ok(Report::pass(
            format!(
                "the log of {} only grew from size {} to size {}: nothing before entry {} was changed",
                new.checkpoint.origin(),
                old.size(),
                new.size(),
                old.size()
            ),
            serde_json::json!({"old_size": old.size(), "new_size": new.size()}),
        ))
    };
    run().unwrap_or_else(Report::fail)
}

/// The witnesses a verification asks for (`--witness`, `--quorum`; docs/PROTOCOL.md §16).
#[derive(Clone, Debug)]
pub struct WitnessPolicy {
    /// The trusted witnesses (distinct keys).
    pub witnesses: Vec<gpuledger_core::cosignature::WitnessKey>,
    /// How many distinct witnesses must have cosigned the checkpoint.
    pub quorum: usize,
}

/// The stable reason code of a checkpoint without enough valid cosignatures.
pub const WITNESS_QUORUM: &str = "witness_quorum";

/// The most bytes read of a bundle's first line (its header) to find the checkpoint.
const MAX_HEADER_LINE: u64 = 1 << 20;

/// The checkpoint note a verification is anchored to: a certificate's `checkpoint` field, else
/// the `checkpoint` of the bundle's header line, else the checkpoint file. `None` when it
/// cannot be read (the main check then reports why).
pub fn anchored_note(
    certificate: Option<&Path>,
    bundle: Option<&Path>,
    checkpoint: Option<&Path>,
) -> Option<String> {
    let field = |v: serde_json::Value| v.get("checkpoint")?.as_str().map(str::to_owned);
    if let Some(c) = certificate {
        return field(serde_json::from_slice(&std::fs::read(c).ok()?).ok()?);
    }
    if let Some(b) = bundle {
        let mut line = Vec::new();
        BufReader::new(File::open(b).ok()?.take(MAX_HEADER_LINE))
            .read_until(b'\n', &mut line)
            .ok()?;
        return field(serde_json::from_slice(&line).ok()?);
    }
    std::fs::read_to_string(checkpoint?).ok()
}

/// The witness rule: `note` must carry valid `cosignature/v1` lines from at least
/// `policy.quorum` distinct witnesses of `policy.witnesses`. Returns those found, or the
/// failing report (reason `witness_quorum`, naming found and required).
pub fn witness_quorum(
    note: Option<&str>,
    policy: &WitnessPolicy,
) -> Result<Vec<gpuledger_core::cosignature::Cosigned>, Report> {
    let found = note.map_or_else(Vec::new, |n| {
        gpuledger_core::cosignature::valid_cosignatures(n.as_bytes(), &policy.witnesses)
    });
    if found.len() >= policy.quorum {
        return Ok(found);
    }
    Err(Report {
        result: "FAIL",
        reason: Some(WITNESS_QUORUM),
        item: Some("checkpoint".into()),
        message: format!(
            "the checkpoint carries valid cosignatures from {} of the {} given witnesses, {} required{}",
            found.len(),
            policy.witnesses.len(),
            policy.quorum,
            if found.is_empty() {
                String::new()
            } else {
                format!(
                    " (cosigned by {})",
                    found.iter().map(|c| c.witness.as_str()).collect::<Vec<_>>().join(", ")
                )
            }
        ),
        summary: serde_json::json!({"found": found.len(), "required": policy.quorum}),
    })
}

/// What a passing verdict without any required witness adds to its message: the checkpoint is
/// signed by the log key alone, so nobody but the operator vouches that it is the history
/// everybody else was shown (docs/PROTOCOL.md §16).
pub const OPERATOR_ALONE: &str = "no witness was required, so only the log operator vouches \
     that this checkpoint is on the history everybody else sees; require independent \
     cosigners with --witness VKEY (and --quorum K)";

impl Report {
    /// A passing report that required no witness, saying so in the verdict itself (message and
    /// `summary.witnesses.required` = 0).
    pub fn operator_alone(mut self) -> Report {
        if !self.passed() {
            return self;
        }
        self.message.push_str("; ");
        self.message.push_str(OPERATOR_ALONE);
        let witnesses = serde_json::json!({"required": 0, "found": null, "operator_alone": true});
        if let serde_json::Value::Object(map) = &mut self.summary {
            map.insert("witnesses".into(), witnesses);
        } else {
            self.summary = serde_json::json!({ "witnesses": witnesses });
        }
        self
    }

    /// A passing report with the witnesses that cosigned its checkpoint added.
    pub fn with_witnesses(
        mut self,
        found: &[gpuledger_core::cosignature::Cosigned],
        policy: &WitnessPolicy,
    ) -> Report {
        if !self.passed() {
            return self;
        }
        self.message.push_str(&format!(
            "; checkpoint cosigned by {} of the {} given witnesses ({}; quorum {})",
            found.len(),
            policy.witnesses.len(),
            found
                .iter()
                .map(|c| c.witness.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            policy.quorum
        ));
        let witnesses = serde_json::json!({
            "required": policy.quorum,
            "found": found.len(),
            "cosigned_by": found.iter().map(|c| serde_json::json!({
                "name": c.witness,
                "key_id": format!("{:08x}", c.key_id),
                "timestamp": c.timestamp,
            })).collect::<Vec<_>>(),
        });
        if let serde_json::Value::Object(map) = &mut self.summary {
            map.insert("witnesses".into(), witnesses);
        } else {
            self.summary = serde_json::json!({ "witnesses": witnesses });
        }
        self
    }
}
