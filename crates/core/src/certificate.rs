//! Compute-usage certificates (docs/PROTOCOL.md §13): the log's signed statement of a tenant's
//! GPU-seconds, energy and carbon over a period, computed from the entries of one checkpoint.
//!
//! Pure: [`Tally`] sums covered records into [`Claims`] exactly (nothing is rounded), the same
//! code for the ledger that issues a certificate and for `gpuledger verify` that recomputes it.

use super::bundle::{Anchor, BundleSubject, Failure, Header, Reason, Subject};
use super::canonical;
use super::ids;
use super::merkle::{self, Hash, MemoryHashes};
use super::rating::PriceBook;
use super::record::{Body, Energy, GpuUsage};
use super::time::Timestamp;
use base64::prelude::{Engine, BASE64_STANDARD};
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::str::FromStr;

/// The domain-separation tag of a certificate signature.
pub const CERTIFICATE_TAG: &[u8] = b"gpuledger-certificate/v1\n";

/// The certificate format version.
pub const CERTIFICATE_VERSION: u32 = 1;

/// At most this many nodes in a scope.
pub const MAX_SCOPE_NODES: usize = 1000;

/// Why a certificate could not be computed, read or checked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertificateError {
    #[error("certificate is malformed: {0}")]
    Malformed(String),
    #[error("an exact value does not fit in 28 significant digits: {0}")]
    Inexact(String),
}

/// Optional narrowing of a certificate to a lease, a set of nodes or a region (§13.1).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Scope {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
    /// Sorted, without repeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

impl Scope {
    /// Checks the identifiers and puts `nodes` in canonical order (sorted, no repeats).
    pub fn normalise(mut self) -> Result<Scope, String> {
        for (what, v) in [("scope.lease", &self.lease), ("scope.region", &self.region)] {
            if let Some(id) = v {
                ids::check_id(id).map_err(|e| format!("{what}: {e}"))?;
            }
        }
        if let Some(nodes) = &mut self.nodes {
            if nodes.is_empty() || nodes.len() > MAX_SCOPE_NODES {
                return Err(format!(
                    "scope.nodes must name 1 to {MAX_SCOPE_NODES} nodes"
                ));
            }
            for n in nodes.iter() {
                ids::check_id(n).map_err(|e| format!("scope.nodes: {e}"))?;
            }
            nodes.sort();
            nodes.dedup();
        }
        Ok(self)
    }

    /// Whether the scope is in canonical form (what a verifier requires of a signed one).
    pub fn is_normal(&self) -> bool {
        self.clone().normalise().as_ref() == Ok(self)
    }

    fn node_ok(&self, node: &str) -> bool {
        self.nodes
            .as_ref()
            .is_none_or(|n| n.binary_search_by(|x| x.as_str().cmp(node)).is_ok())
    }

    /// Whether a `gpu_usage` record is within the scope.
    pub fn covers_usage(&self, u: &GpuUsage) -> bool {
        self.lease
            .as_ref()
            .is_none_or(|l| u.lease.as_ref() == Some(l))
            && self.region.as_ref().is_none_or(|r| *r == u.region)
            && self.node_ok(&u.node)
    }

    /// Whether an `energy` record is within the scope (never under a lease scope: energy is
    /// not attributed to leases).
    pub fn covers_energy(&self, e: &Energy) -> bool {
        self.lease.is_none()
            && self.region.as_ref().is_none_or(|r| *r == e.region)
            && self.node_ok(&e.node)
    }
}

/// The covered entries: how many, and their commitment (§13.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EntriesClaim {
    pub count: u64,
    /// Base64 Merkle tree hash over `uint64be(index) ‖ leaf hash` of each covered entry.
    pub commitment: String,
}

/// GPU time of one region and GPU model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GpuClaim {
    pub region: String,
    pub gpu_model: String,
    #[serde(with = "exact")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub gpu_seconds: Decimal,
    pub records: u64,
}

/// Energy of one region under one set of region parameters (or none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EnergyClaim {
    pub region: String,
    /// Measured kWh.
    #[serde(with = "exact")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub kwh: Decimal,
    pub records: u64,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "exact_opt")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::decimal::DecimalString>))]
    pub pue: Option<Decimal>,
    #[serde(default, skip_serializing_if = "Option::is_none", with = "exact_opt")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::decimal::DecimalString>))]
    pub carbon_g_per_kwh: Option<Decimal>,
    /// `kwh × pue`.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "exact_opt")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::decimal::DecimalString>))]
    pub kwh_with_pue: Option<Decimal>,
    /// `kwh_with_pue × carbon_g_per_kwh ÷ 1000`, kgCO2e.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "exact_opt")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<crate::decimal::DecimalString>))]
    pub carbon_kg: Option<Decimal>,
}

/// Sums over the lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Totals {
    pub records: u64,
    #[serde(with = "exact")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub gpu_seconds: Decimal,
    #[serde(with = "exact")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub kwh: Decimal,
    #[serde(with = "exact")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub kwh_with_pue: Decimal,
    #[serde(with = "exact")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub carbon_kg: Decimal,
    #[serde(with = "exact")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub kwh_without_region_params: Decimal,
}

/// What a certificate claims, recomputable from its covered entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    pub entries: EntriesClaim,
    pub gpu: Vec<GpuClaim>,
    pub energy: Vec<EnergyClaim>,
    pub totals: Totals,
}

/// A compute-usage certificate (§13.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Certificate {
    pub v: u32,
    pub id: String,
    pub tenant: String,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub period_from: Timestamp,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub period_to: Timestamp,
    pub scope: Scope,
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub issued_at: Timestamp,
    pub log_origin: String,
    /// The complete signed checkpoint note the certificate was computed at.
    pub checkpoint: String,
    pub entries: EntriesClaim,
    pub gpu: Vec<GpuClaim>,
    pub energy: Vec<EnergyClaim>,
    pub totals: Totals,
    /// Base64 Ed25519 signature by the log key over [`Certificate::signed_message`].
    pub sig: String,
}

impl Certificate {
    /// The claims part.
    pub fn claims(&self) -> Claims {
        Claims {
            entries: self.entries.clone(),
            gpu: self.gpu.clone(),
            energy: self.energy.clone(),
            totals: self.totals.clone(),
        }
    }

    fn value_without_sig(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).expect("certificates serialise");
        v.as_object_mut().expect("an object").remove("sig");
        v
    }

    /// `"gpuledger-certificate/v1\n" ‖ JCS(certificate without sig)`.
    pub fn signed_message(&self) -> Vec<u8> {
        let mut out = CERTIFICATE_TAG.to_vec();
        canonical::write_value(&self.value_without_sig(), &mut out)
            .expect("certificates hold no floats");
        out
    }

    /// Signs with the log key, replacing `sig`.
    pub fn sign(&mut self, key: &SigningKey) {
        self.sig = BASE64_STANDARD.encode(key.sign(&self.signed_message()).to_bytes());
    }

    /// Whether `sig` is a valid strict Ed25519 signature by `key`.
    pub fn signature_valid(&self, key: &VerifyingKey) -> bool {
        let Ok(bytes) = BASE64_STANDARD.decode(&self.sig) else {
            return false;
        };
        let Ok(sig) = Signature::from_slice(&bytes) else {
            return false;
        };
        key.verify_strict(&self.signed_message(), &sig).is_ok()
    }

    /// The RFC 8785 JSON of the whole certificate, `sig` included: what is served and hashed.
    pub fn to_canonical_json(&self) -> Vec<u8> {
        let v = serde_json::to_value(self).expect("certificates serialise");
        canonical::to_vec(&v).expect("certificates hold no floats")
    }

    /// Hex SHA-256 of [`Certificate::to_canonical_json`] (the `certificate_sha256` logged).
    pub fn sha256_hex(&self) -> String {
        use sha2::{Digest, Sha256};
        hex::encode(Sha256::digest(self.to_canonical_json()))
    }

    /// Reads a certificate from JSON and checks its form (not its signature or claims).
    pub fn from_json(bytes: &[u8]) -> Result<Certificate, CertificateError> {
        let c: Certificate = serde_json::from_slice(bytes)
            .map_err(|e| CertificateError::Malformed(e.to_string()))?;
        let bad = |m: &str| Err(CertificateError::Malformed(m.to_owned()));
        if c.v != CERTIFICATE_VERSION {
            return bad("unknown certificate version");
        }
        if !is_certificate_id(&c.id) {
            return bad("id is not CERT- and digits");
        }
        if ids::check_id(&c.tenant).is_err() {
            return bad("tenant is not an identifier");
        }
        if c.period_from >= c.period_to {
            return bad("period_from is not before period_to");
        }
        if !c.scope.is_normal() {
            return bad("scope is not in canonical form");
        }
        Ok(c)
    }
}

/// What to certify: a tenant, a period, and an optional narrowing.
#[derive(Debug, Clone)]
pub struct CertificateRequest {
    pub tenant: String,
    pub period: super::invoice::Period,
    pub scope: Scope,
}

/// Where a record stands for a certificate ([`coverage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coverage {
    /// The certificate counts it.
    Covered,
    /// Not a usage or energy record of the certificate's tenant.
    OtherTenant,
    /// It starts outside the certificate's period.
    OutsidePeriod,
    /// It is outside the certificate's scope (lease, region, nodes).
    OutsideScope,
}

/// Whether a certificate of `tenant` for `period` and `scope` counts `body` (§13.1): a usage
/// or energy record of the tenant, starting in the period, within the scope. The one rule the
/// ledger issues certificates and writes their bundles by, and the verifier checks them by.
pub fn coverage(
    tenant: &str,
    period: &super::invoice::Period,
    scope: &Scope,
    body: &Body,
) -> Coverage {
    let (owner, start, in_scope) = match body {
        Body::GpuUsage(u) => (Some(u.tenant.as_str()), u.start, scope.covers_usage(u)),
        Body::Energy(e) => (e.tenant.as_deref(), e.start, scope.covers_energy(e)),
        _ => return Coverage::OtherTenant,
    };
    if owner != Some(tenant) {
        Coverage::OtherTenant
    } else if !period.contains(start) {
        Coverage::OutsidePeriod
    } else if !in_scope {
        Coverage::OutsideScope
    } else {
        Coverage::Covered
    }
}

impl Certificate {
    /// The certificate `id` of `req`'s claims at the signed checkpoint `checkpoint`, signed by
    /// the log.
    pub fn issue(
        id: String,
        req: &CertificateRequest,
        issued_at: Timestamp,
        log: &super::checkpoint::LogSigner,
        checkpoint: String,
        claims: Claims,
    ) -> Certificate {
        let mut cert = Certificate {
            v: CERTIFICATE_VERSION,
            id,
            tenant: req.tenant.clone(),
            period_from: req.period.from,
            period_to: req.period.to,
            scope: req.scope.clone(),
            issued_at,
            log_origin: log.origin().to_owned(),
            checkpoint,
            entries: claims.entries,
            gpu: claims.gpu,
            energy: claims.energy,
            totals: claims.totals,
            sig: String::new(),
        };
        cert.sign(log.key());
        cert
    }
}

pub use super::ids::{certificate_id, is_certificate_id};

/// The commitment item of entry `index`: `uint64be(index) ‖ leaf hash`.
pub fn commitment_item(index: u64, leaf_hash: &Hash) -> [u8; 40] {
    let mut item = [0u8; 40];
    item[..8].copy_from_slice(&index.to_be_bytes());
    item[8..].copy_from_slice(&leaf_hash.0);
    item
}

/// Streaming RFC 6962 tree hash over commitment items.
#[derive(Default)]
struct Commitment {
    n: u64,
    hashes: MemoryHashes,
}

impl Commitment {
    fn push(&mut self, index: u64, leaf_hash: &Hash) {
        let h = merkle::leaf_hash(&commitment_item(index, leaf_hash));
        merkle::append_leaves(self.n, &[h], &mut self.hashes).expect("the frontier is kept");
        self.n += 1;
        if self.n.is_multiple_of(1024) {
            merkle::keep_frontier(self.n, &mut self.hashes);
        }
    }

    fn root(&self) -> Hash {
        merkle::tree_hash(self.n, &self.hashes).expect("the frontier is kept")
    }
}

/// Region parameters of an energy line: `(pue, carbon_g_per_kwh)`, or none in force.
type EnergyKey = (String, Option<(Decimal, Decimal)>);

/// Sums covered records into claims, exactly; see the module docs.
#[derive(Default)]
pub struct Tally {
    gpu: BTreeMap<(String, String), (Decimal, u64)>,
    energy: BTreeMap<EnergyKey, (Decimal, u64)>,
    commitment: Commitment,
    last_index: Option<u64>,
}

impl Tally {
    /// An empty tally.
    pub fn new() -> Self {
        Self::default()
    }

    fn commit(&mut self, index: u64, leaf_hash: &Hash) -> Result<(), CertificateError> {
        if self.last_index.is_some_and(|l| l >= index) {
            return Err(CertificateError::Malformed(format!(
                "entry {index} is not after the entry before it"
            )));
        }
        self.last_index = Some(index);
        self.commitment.push(index, leaf_hash);
        Ok(())
    }

    /// Adds a covered `gpu_usage` entry (the caller has checked it is covered).
    pub fn add_usage(
        &mut self,
        index: u64,
        leaf_hash: &Hash,
        u: &GpuUsage,
    ) -> Result<(), CertificateError> {
        self.commit(index, leaf_hash)?;
        let e = self
            .gpu
            .entry((u.region.clone(), u.gpu_model.clone()))
            .or_default();
        e.0 = add(e.0, u.gpu_seconds)?;
        e.1 += 1;
        Ok(())
    }

    /// Adds a covered `energy` entry with the region parameters of `book` in force at its start.
    pub fn add_energy(
        &mut self,
        index: u64,
        leaf_hash: &Hash,
        e: &Energy,
        book: &PriceBook,
    ) -> Result<(), CertificateError> {
        self.commit(index, leaf_hash)?;
        let params = book
            .region_at(&e.region, e.start)
            .map(|p| (p.pue, p.carbon_g_per_kwh));
        let line = self.energy.entry((e.region.clone(), params)).or_default();
        line.0 = add(line.0, e.kwh)?;
        line.1 += 1;
        Ok(())
    }

    /// The claims: lines in §13.2 order and their totals.
    pub fn finish(self) -> Result<Claims, CertificateError> {
        let gpu: Vec<GpuClaim> = self
            .gpu
            .into_iter()
            .map(|((region, gpu_model), (gpu_seconds, records))| GpuClaim {
                region,
                gpu_model,
                gpu_seconds,
                records,
            })
            .collect();
        // BTreeMap order on (region, Option<(pue, carbon)>) is §13.2's: None first, then by
        // number (Decimal orders numerically).
        let mut energy = Vec::with_capacity(self.energy.len());
        for ((region, params), (kwh, records)) in self.energy {
            let mut line = EnergyClaim {
                region,
                kwh,
                records,
                pue: None,
                carbon_g_per_kwh: None,
                kwh_with_pue: None,
                carbon_kg: None,
            };
            if let Some((pue, carbon)) = params {
                let with_pue = mul(kwh, pue)?;
                let carbon_kg = mul(with_pue, carbon)?
                    .checked_div(Decimal::ONE_THOUSAND)
                    .ok_or_else(|| CertificateError::Inexact("carbon_kg".into()))?;
                line.pue = Some(pue);
                line.carbon_g_per_kwh = Some(carbon);
                line.kwh_with_pue = Some(with_pue);
                line.carbon_kg = Some(carbon_kg);
            }
            energy.push(line);
        }
        let mut totals = Totals {
            records: self.commitment.n,
            gpu_seconds: Decimal::ZERO,
            kwh: Decimal::ZERO,
            kwh_with_pue: Decimal::ZERO,
            carbon_kg: Decimal::ZERO,
            kwh_without_region_params: Decimal::ZERO,
        };
        for l in &gpu {
            totals.gpu_seconds = add(totals.gpu_seconds, l.gpu_seconds)?;
        }
        for l in &energy {
            totals.kwh = add(totals.kwh, l.kwh)?;
            match (l.kwh_with_pue, l.carbon_kg) {
                (Some(w), Some(c)) => {
                    totals.kwh_with_pue = add(totals.kwh_with_pue, w)?;
                    totals.carbon_kg = add(totals.carbon_kg, c)?;
                }
                _ => {
                    totals.kwh_without_region_params = add(totals.kwh_without_region_params, l.kwh)?
                }
            }
        }
        Ok(Claims {
            entries: EntriesClaim {
                count: self.commitment.n,
                commitment: merkle::encode_hash(&self.commitment.root()),
            },
            gpu,
            energy,
            totals,
        })
    }
}

fn add(a: Decimal, b: Decimal) -> Result<Decimal, CertificateError> {
    let s = a
        .checked_add(b)
        .ok_or_else(|| CertificateError::Inexact("a sum".into()))?;
    // rust_decimal rounds away fraction digits when the integer part grows past 28 digits.
    if s.scale() < a.scale().max(b.scale()) {
        return Err(CertificateError::Inexact("a sum".into()));
    }
    Ok(s)
}

fn mul(a: Decimal, b: Decimal) -> Result<Decimal, CertificateError> {
    let (a, b) = (a.normalize(), b.normalize());
    let p = a
        .checked_mul(b)
        .ok_or_else(|| CertificateError::Inexact("a product".into()))?;
    if a.scale() + b.scale() > 28 || p.scale() != a.scale() + b.scale() {
        return Err(CertificateError::Inexact("a product".into()));
    }
    Ok(p)
}

/// Compares recomputed claims with a certificate's; names the first member that differs
/// (`gpu[0].gpu_seconds`, `totals.kwh`, ...). Decimals compare as numbers.
pub fn first_difference(claimed: &Claims, computed: &Claims) -> Option<String> {
    if claimed.entries != computed.entries {
        return Some(if claimed.entries.count != computed.entries.count {
            "entries.count".into()
        } else {
            "entries.commitment".into()
        });
    }
    let json =
        |c: &Claims| serde_json::json!({"gpu": c.gpu, "energy": c.energy, "totals": c.totals});
    diff_values("", &json(claimed), &json(computed))
}

fn diff_values(path: &str, a: &serde_json::Value, b: &serde_json::Value) -> Option<String> {
    use serde_json::Value;
    let join = |k: &str| {
        if path.is_empty() {
            k.to_owned()
        } else {
            format!("{path}.{k}")
        }
    };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter().find_map(|k| match (x.get(k), y.get(k)) {
                (Some(p), Some(q)) => diff_values(&join(k), p, q),
                _ => Some(join(k)),
            })
        }
        (Value::Array(x), Value::Array(y)) => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                if let Some(d) = diff_values(&format!("{path}[{i}]"), p, q) {
                    return Some(d);
                }
            }
            (x.len() != y.len()).then(|| format!("{path} (length)"))
        }
        (Value::String(p), Value::String(q)) => {
            let same = match (Decimal::from_str(p), Decimal::from_str(q)) {
                (Ok(d), Ok(e)) => d == e,
                _ => p == q,
            };
            (!same).then(|| path.to_owned())
        }
        _ => (a != b).then(|| path.to_owned()),
    }
}

/// Checks a certificate's records and recomputes its claims from a bundle (§15 steps 5–7).
pub struct CertificateCheck {
    cert: Certificate,
    book: PriceBook,
    tally: Tally,
}

impl CertificateCheck {
    /// Checks the certificate's signature and that the bundle's header is the certificate's
    /// (§15 step 3), then starts the recomputation.
    pub fn start(cert: Certificate, header: &Header, anchor: &Anchor) -> Result<Self, Failure> {
        if !cert.signature_valid(&anchor.log_key) {
            return Err(Failure::new(
                Reason::CertificateSignature,
                "certificate",
                "the signature does not verify with the log key",
            ));
        }
        let mismatch = |m: &str| Err(Failure::new(Reason::CheckpointMismatch, "certificate", m));
        if cert.checkpoint != anchor.note {
            return mismatch("its checkpoint is not the bundle's");
        }
        if cert.log_origin != anchor.checkpoint.origin() {
            return mismatch("its log_origin is not the checkpoint's origin");
        }
        if header.subject != BundleSubject::Certificate(cert.id.clone()) {
            return mismatch("the bundle is not for this certificate");
        }
        Ok(CertificateCheck {
            cert,
            book: PriceBook::default(),
            tally: Tally::new(),
        })
    }

    /// Recomputes the claims and requires them to equal the certificate's.
    pub fn finish(self) -> Result<Claims, Failure> {
        let computed = self
            .tally
            .finish()
            .map_err(|e| Failure::new(Reason::ClaimMismatch, "certificate", e.to_string()))?;
        let claimed = self.cert.claims();
        if let Some(member) = first_difference(&claimed, &computed) {
            let (c, r) = (&claimed.entries, &computed.entries);
            let (reason, message) = match member.as_str() {
                "entries.count" => (
                    Reason::EntriesMismatch,
                    format!(
                        "the certificate claims {} entries, the bundle holds {} covered records",
                        c.count, r.count
                    ),
                ),
                "entries.commitment" => (
                    Reason::EntriesMismatch,
                    format!(
                        "the certificate's entries commitment is {}, the bundle's records give {}",
                        c.commitment, r.commitment
                    ),
                ),
                _ => (
                    Reason::ClaimMismatch,
                    "the certificate's claim differs from the value recomputed from the bundle"
                        .to_owned(),
                ),
            };
            return Err(Failure::new(reason, member, message));
        }
        Ok(computed)
    }
}

impl Subject for CertificateCheck {
    fn tenant(&self) -> Option<&str> {
        Some(&self.cert.tenant)
    }

    fn context(&mut self, _index: u64, _: Timestamp, body: &Body) -> Result<(), Failure> {
        if let Body::RegionParams(_) = body {
            self.book.add_entry(body);
        }
        Ok(())
    }

    fn record(&mut self, index: u64, leaf_hash: &Hash, body: &Body) -> Result<(), Failure> {
        let c = &self.cert;
        let item = || format!("entry {index}");
        let period = super::invoice::Period {
            from: c.period_from,
            to: c.period_to,
        };
        let fail = |reason, message: String| Err(Failure::new(reason, item(), message));
        match coverage(&c.tenant, &period, &c.scope, body) {
            Coverage::Covered => {}
            Coverage::OtherTenant => {
                return fail(
                    Reason::WrongTenant,
                    format!("the record is not {}'s", c.tenant),
                )
            }
            Coverage::OutsidePeriod => {
                let start = super::invoice::record_start(body).expect("a record");
                return fail(
                    Reason::OutsidePeriod,
                    format!("the record starts at {start}, outside the period"),
                );
            }
            Coverage::OutsideScope => {
                return fail(
                    Reason::OutsideScope,
                    "the record is outside the certificate's scope".into(),
                )
            }
        }
        let r = match body {
            Body::GpuUsage(u) => self.tally.add_usage(index, leaf_hash, u),
            Body::Energy(e) => self.tally.add_energy(index, leaf_hash, e, &self.book),
            _ => Ok(()),
        };
        r.map_err(|e| Failure::new(Reason::ClaimMismatch, item(), e.to_string()))
    }
}

/// Exact decimals (§13.2): the spelling of §2.1 without its fraction and length limits.
mod exact {
    use rust_decimal::Decimal;
    use serde::Deserialize;

    pub fn serialize<S: serde::Serializer>(d: &Decimal, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::decimal::to_canonical(*d))
    }

    pub fn parse(s: &str) -> Option<Decimal> {
        let (int, frac) = s.split_once('.').unwrap_or((s, ""));
        let int_ok = int == "0"
            || (!int.is_empty()
                && !int.starts_with('0')
                && int.bytes().all(|b| b.is_ascii_digit()));
        let frac_ok = !s.contains('.')
            || (!frac.is_empty()
                && frac.bytes().all(|b| b.is_ascii_digit())
                && !frac.ends_with('0'));
        if !(int_ok && frac_ok) {
            return None;
        }
        Decimal::from_str_exact(s).ok()
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Decimal, D::Error> {
        let s = String::deserialize(d)?;
        parse(&s).ok_or_else(|| serde::de::Error::custom(format!("{s:?} is not an exact decimal")))
    }
}

mod exact_opt {
    use rust_decimal::Decimal;
    use serde::Deserialize;

    pub fn serialize<S: serde::Serializer>(d: &Option<Decimal>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => super::exact::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Decimal>, D::Error> {
        let s = String::deserialize(d)?;
        super::exact::parse(&s)
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom(format!("{s:?} is not an exact decimal")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rating::RegionParams;

    fn usage(region: &str, node: &str, lease: Option<&str>, secs: &str) -> GpuUsage {
        let start = Timestamp::parse("2026-11-30T00:00:00Z").unwrap();
        GpuUsage {
            tenant: "t".into(),
            lease: lease.map(str::to_owned),
            region: region.into(),
            node: node.into(),
            gpu_model: "H100".into(),
            gpu_count: Decimal::ONE,
            start,
            end: start,
            gpu_seconds: secs.parse().unwrap(),
        }
    }

    fn energy(region: &str, at: &str, kwh: &str) -> Energy {
        let start = Timestamp::parse(at).unwrap();
        Energy {
            tenant: Some("t".into()),
            region: region.into(),
            node: "n1".into(),
            start,
            end: start,
            kwh: kwh.parse().unwrap(),
        }
    }

    #[test]
    fn claims_are_exact_sums_with_pue_and_carbon_by_parameters_in_force() {
        let mut book = PriceBook::default();
        book.add_region(
            "west",
            RegionParams {
                effective_from: Timestamp::parse("2026-11-30T06:00:00Z").unwrap(),
                currency: "CNY".into(),
                electricity_price_per_kwh: "0.28".parse().unwrap(),
                pue: "1.08".parse().unwrap(),
                carbon_g_per_kwh: "550".parse().unwrap(),
            },
        );
        let mut t = Tally::new();
        let h = |i: u8| Hash([i; 32]);
        t.add_usage(3, &h(3), &usage("west", "n1", None, "2400"))
            .unwrap();
        t.add_usage(5, &h(5), &usage("west", "n1", None, "0.125"))
            .unwrap();
        t.add_usage(6, &h(6), &usage("east", "n2", None, "30"))
            .unwrap();
        // Before the parameters take effect, then after them.
        t.add_energy(
            7,
            &h(7),
            &energy("west", "2026-11-30T05:00:00Z", "2"),
            &book,
        )
        .unwrap();
        t.add_energy(
            8,
            &h(8),
            &energy("west", "2026-11-30T07:00:00Z", "1.5"),
            &book,
        )
        .unwrap();
        t.add_energy(
            9,
            &h(9),
            &energy("west", "2026-11-30T08:00:00Z", "0.25"),
            &book,
        )
        .unwrap();
        assert!(t
            .add_usage(9, &h(9), &usage("west", "n1", None, "1"))
            .is_err());
        let c = t.finish().unwrap();
        assert_eq!(c.entries.count, 6);
        assert_eq!(c.gpu.len(), 2);
        assert_eq!(
            (c.gpu[0].region.as_str(), c.gpu[0].gpu_seconds),
            ("east", "30".parse().unwrap())
        );
        assert_eq!(c.gpu[1].gpu_seconds, "2400.125".parse().unwrap());
        assert_eq!(c.gpu[1].records, 2);
        assert_eq!(c.energy.len(), 2);
        assert_eq!(c.energy[0].pue, None);
        assert_eq!(c.energy[0].kwh, Decimal::TWO);
        // 1.75 kWh × 1.08 = 1.89; × 550 g / 1000 = 1.0395 kg.
        assert_eq!(c.energy[1].kwh_with_pue, Some("1.89".parse().unwrap()));
        assert_eq!(c.energy[1].carbon_kg, Some("1.0395".parse().unwrap()));
        assert_eq!(c.totals.kwh, "3.75".parse().unwrap());
        assert_eq!(c.totals.kwh_without_region_params, Decimal::TWO);
        assert_eq!(c.totals.gpu_seconds, "2430.125".parse().unwrap());
        assert_eq!(c.totals.records, 6);
    }

    #[test]
    fn the_commitment_is_the_rfc6962_root_of_index_and_leaf_hash_items() {
        let mut t = Tally::new();
        let items = [
            (2u64, Hash([2; 32])),
            (9, Hash([9; 32])),
            (10, Hash([7; 32])),
        ];
        for (i, h) in &items {
            t.add_usage(*i, h, &usage("w", "n", None, "1")).unwrap();
        }
        let l: Vec<Hash> = items
            .iter()
            .map(|(i, h)| merkle::leaf_hash(&commitment_item(*i, h)))
            .collect();
        let root = merkle::node_hash(merkle::node_hash(l[0], l[1]), l[2]);
        assert_eq!(
            t.finish().unwrap().entries.commitment,
            merkle::encode_hash(&root)
        );
        assert_eq!(
            Tally::new().finish().unwrap().entries.commitment,
            merkle::encode_hash(&merkle::EMPTY_HASH)
        );
    }

    #[test]
    fn scopes_narrow_and_normalise() {
        let s = Scope {
            lease: None,
            nodes: Some(vec!["n2".into(), "n1".into(), "n2".into()]),
            region: None,
        }
        .normalise()
        .unwrap();
        assert_eq!(
            s.nodes.as_deref(),
            Some(&["n1".to_owned(), "n2".to_owned()][..])
        );
        assert!(s.covers_usage(&usage("w", "n2", None, "1")));
        assert!(!s.covers_usage(&usage("w", "n3", None, "1")));
        let lease = Scope {
            lease: Some("l1".into()),
            ..Scope::default()
        };
        assert!(lease.covers_usage(&usage("w", "n", Some("l1"), "1")));
        assert!(!lease.covers_usage(&usage("w", "n", None, "1")));
        assert!(!lease.covers_energy(&energy("w", "2026-11-30T00:00:00Z", "1")));
        assert!(Scope {
            nodes: Some(vec![]),
            ..Scope::default()
        }
        .normalise()
        .is_err());
    }

    #[test]
    fn exact_decimals_have_one_spelling_and_no_limit_of_nine_digits() {
        for ok in ["0", "7", "0.0000000000001", "123.45"] {
            assert!(exact::parse(ok).is_some(), "{ok}");
        }
        for bad in ["1.0", "01", ".5", "-1", "1e3", "", "1.", " 1"] {
            assert!(exact::parse(bad).is_none(), "{bad}");
        }
        assert!(mul(
            "0.000000000000001".parse().unwrap(),
            "0.00000000000001".parse().unwrap()
        )
        .is_err());
    }

    #[test]
    fn claims_differences_are_named_by_member() {
        let mut t = Tally::new();
        t.add_usage(1, &Hash([1; 32]), &usage("w", "n", None, "10"))
            .unwrap();
        let c = t.finish().unwrap();
        let mut d = c.clone();
        d.gpu[0].gpu_seconds = "10.0".parse().unwrap();
        assert_eq!(first_difference(&c, &d), None, "numbers, not spellings");
        d.gpu[0].gpu_seconds = "11".parse().unwrap();
        assert_eq!(
            first_difference(&c, &d).as_deref(),
            Some("gpu[0].gpu_seconds")
        );
        let mut d = c.clone();
        d.totals.kwh = Decimal::ONE;
        assert_eq!(first_difference(&c, &d).as_deref(), Some("totals.kwh"));
        let mut d = c.clone();
        d.entries.count = 2;
        assert_eq!(first_difference(&c, &d).as_deref(), Some("entries.count"));
    }
}
