//! Compute-usage certificates (docs/PROTOCOL.md §13) and evidence bundles (§14).
//!
//! A certificate is computed outside the head lock ([`draft`]): on a read connection at the
//! log's size N, the tenant's covered records below N (those starting in the period, selected
//! through the `entries_tenant_start` index) are summed by `core::certificate::Tally`. Then,
//! under the head lock at the log's size S ≥ N ([`issue`]), if nothing logged at N..S changes
//! the tally, a checkpoint of S is signed, the certificate is signed with the log key and its
//! SHA-256 goes into a `certificate_issued` entry: exactly what a computation at S would give.
//! Otherwise the caller computes again. Bundles are rebuilt from the log on request and written
//! line by line, so a bundle of any size streams in bounded memory.

use super::bundle::Sink;
use super::conn::DbConn;
use super::cosignatures::Witnessed;
use super::error::StoreError;
use super::schema::certificates;
use super::write::{checkpoint_locked, push_ledger_entry, Appender};
use super::{pricing, read, usage};
use diesel::prelude::*;
use gpuledger_core::bundle::{self, BundleSubject, Header};
use gpuledger_core::certificate::{self, coverage, Certificate, Claims, Coverage, Tally};
use gpuledger_core::invoice::Period;
use gpuledger_core::record::{Body, CertificateIssued, Kind};
use gpuledger_core::time::Timestamp;

pub use gpuledger_core::certificate::CertificateRequest;

/// A certificate as listed.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct CertificateSummary {
    pub id: String,
    pub tenant: String,
    #[schema(value_type = String)]
    pub period_from: Timestamp,
    #[schema(value_type = String)]
    pub period_to: Timestamp,
    pub checkpoint_size: u64,
    /// Index of its `certificate_issued` entry.
    pub entry_index: u64,
}

/// Whether a certificate of `req` counts `body` ([`coverage`], the verifier's rule too).
fn covers(req: &CertificateRequest, body: &Body) -> bool {
    coverage(&req.tenant, &req.period, &req.scope, body) == Coverage::Covered
}

/// A certificate's claims computed outside the head lock at log size `size`; [`issue`] issues
/// it under the head lock if nothing relevant was logged since.
pub(crate) struct Draft {
    req: CertificateRequest,
    size: u64,
    claims: Claims,
    /// The latest end of a covered energy record: region parameters (PUE, carbon) taking
    /// effect at or after it apply to none of them (they are looked up at a record's start).
    energy_horizon: Option<Timestamp>,
    /// With a witness quorum: the cosigned checkpoint of `size` the certificate is issued
    /// against (the records it counts are those below it, whatever is logged later).
    witnessed: Option<Witnessed>,
}

/// Sums the covered records of `req` at the log's current size, on a read connection (no
/// lock). A record is covered only if it starts in the period ([`coverage`]), so the records
/// read are the tenant's records starting in the period: a superset of the covered ones, each
/// then put to [`coverage`], the one rule. Refused when none is covered. With `witnessed` (a
/// checkpoint that reached the witness quorum), at that checkpoint's size instead.
pub(crate) fn draft(
    conn: &mut DbConn,
    req: &CertificateRequest,
    witnessed: Option<Witnessed>,
) -> Result<Draft, StoreError> {
    let size = match &witnessed {
        Some(w) => w.size,
        None => read::head(conn)?.0,
    };
    let book = pricing::price_book(conn, size)?;
    let idxs = usage::starting_in(conn, &req.tenant, req.period.from, req.period.to, size)?;
    let mut tally = Tally::new();
    let mut failed = None;
    let mut energy_horizon = None;
    usage::for_each_of(conn, Some(&req.tenant), &idxs, &mut |idx, _, h, body| {
        if failed.is_some() || !covers(req, body) {
            return;
        }
        let r = match body {
            Body::GpuUsage(u) => tally.add_usage(idx, &h, u),
            Body::Energy(e) => {
                energy_horizon = energy_horizon.max(Some(e.end));
                tally.add_energy(idx, &h, e, &book)
            }
            _ => Ok(()),
        };
        failed = r.err();
    })?;
    if let Some(e) = failed {
        return Err(StoreError::Refused(e.to_string()));
    }
    let claims = tally
        .finish()
        .map_err(|e| StoreError::Refused(e.to_string()))?;
    if claims.entries.count == 0 {
        return Err(StoreError::Refused(format!(
            "{} has no usage or energy records starting in [{}, {}) within the scope; nothing to certify",
            req.tenant, req.period.from, req.period.to
        )));
    }
    Ok(Draft {
        req: req.clone(),
        size,
        claims,
        energy_horizon,
        witnessed,
    })
}

impl Draft {
    /// Whether an entry at `self.size..size` changes the claims, read under the head lock at
    /// log size `size`: a usage or energy record of the tenant starting in the period (it may
    /// be covered), or region parameters taking effect before the end of a covered energy
    /// record. Nothing else enters a tally: other tenants' records are never covered, and prices
    /// are not part of a certificate.
    fn changed(&self, conn: &mut DbConn, size: u64) -> Result<bool, StoreError> {
        let Some(logged) = read::tenant_entries_since(conn, &self.req.tenant, self.size, size)?
        else {
            return Ok(false);
        };
        let period = self.req.period;
        if logged
            .into_iter()
            .filter_map(|(_, _, start)| start)
            .any(|s| (period.from.unix()..period.to.unix()).contains(&s))
        {
            return Ok(true);
        }
        let Some(horizon) = self.energy_horizon else {
            return Ok(false);
        };
        Ok(
            read::bodies_between(conn, &[Kind::RegionParams], self.size, size)?
                .iter()
                .any(|(_, b)| matches!(b, Body::RegionParams(r) if r.effective_from < horizon)),
        )
    }
}

/// Issues a [`draft`] under the head lock; `None`, writing nothing, when an entry logged since
/// the draft's size changes it. Certificate ids are numbered gaplessly under the lock. A draft
/// at a witnessed checkpoint is issued against that checkpoint (its note with the
/// cosignatures, which the certificate's signature then covers): what was logged since is not
/// in it.
pub(crate) fn issue(
    conn: &mut DbConn,
    log: &super::write::Signer,
    draft: &Draft,
    now: Timestamp,
) -> Result<Option<Certificate>, StoreError> {
    conn.transaction(|conn| {
        let mut app = Appender::lock(conn, now)?;
        // Stamped under the lock: never behind the log (`core::clock::stamp`).
        let now = app.received_at;
        let (size, note) = match &draft.witnessed {
            Some(w) => (w.size, w.note.clone()),
            None => {
                let size = app.next_index();
                if draft.changed(conn, size)? {
                    return Ok(None);
                }
                checkpoint_locked(conn, log, size, now)?
            }
        };
        let count: i64 = certificates::table.count().get_result(conn)?;
        let id = certificate::certificate_id(count as u64 + 1);
        let cert = Certificate::issue(id, &draft.req, now, log, note, draft.claims.clone());
        let body = Body::CertificateIssued(CertificateIssued {
            id: cert.id.clone(),
            tenant: cert.tenant.clone(),
            period_from: cert.period_from,
            period_to: cert.period_to,
            checkpoint_size: size,
            certificate_sha256: cert.sha256_hex(),
        });
        let idx = push_ledger_entry(conn, &mut app, log, &body)?;
        let json = String::from_utf8(cert.to_canonical_json()).expect("JSON is UTF-8");
        diesel::insert_into(certificates::table)
            .values((
                certificates::id.eq(&cert.id),
                certificates::tenant.eq(&cert.tenant),
                certificates::period_from.eq(cert.period_from.unix()),
                certificates::period_to.eq(cert.period_to.unix()),
                certificates::checkpoint_size.eq(size as i64),
                certificates::entry_idx.eq(idx as i64),
                certificates::json.eq(&json),
            ))
            .execute(conn)?;
        app.finish(conn)?;
        Ok(Some(cert))
    })
}

/// A certificate by id: its tenant and signed JSON.
pub fn get(conn: &mut DbConn, id: &str) -> Result<Option<(String, String)>, StoreError> {
    Ok(certificates::table
        .find(id)
        .select((certificates::tenant, certificates::json))
        .first(conn)
        .optional()?)
}

/// Certificates, oldest first (of `tenant`, if given).
pub fn list(
    conn: &mut DbConn,
    tenant: Option<&str>,
) -> Result<Vec<CertificateSummary>, StoreError> {
    list_page(conn, tenant, (None, None), None, usize::MAX)
}

/// One page of certificates in issue order (their `certificate_issued` entry's index), of
/// `tenant` if given: at most `limit` whose entry index is above `after` and whose period
/// overlaps `[from, to)` (either bound may be open).
pub fn list_page(
    conn: &mut DbConn,
    tenant: Option<&str>,
    (from, to): (Option<Timestamp>, Option<Timestamp>),
    after: Option<u64>,
    limit: usize,
) -> Result<Vec<CertificateSummary>, StoreError> {
    let mut q = certificates::table
        .order(certificates::entry_idx.asc())
        .select((
            certificates::id,
            certificates::tenant,
            certificates::period_from,
            certificates::period_to,
            certificates::checkpoint_size,
            certificates::entry_idx,
        ))
        .limit(i64::try_from(limit).unwrap_or(i64::MAX))
        .into_boxed();
    if let Some(t) = tenant {
        q = q.filter(certificates::tenant.eq(t));
    }
    if let Some(a) = after {
        q = q.filter(certificates::entry_idx.gt(a as i64));
    }
    if let Some(f) = from {
        q = q.filter(certificates::period_to.gt(f.unix()));
    }
    if let Some(t) = to {
        q = q.filter(certificates::period_from.lt(t.unix()));
    }
    let rows: Vec<(String, String, i64, i64, i64, i64)> = q.load(conn)?;
    rows.into_iter()
        .map(|(id, tenant, f, t, s, e)| {
            let ts = |x: i64| {
                Timestamp::from_unix(x)
                    .ok_or_else(|| StoreError::Corrupt(format!("certificate {id} period")))
            };
            Ok(CertificateSummary {
                period_from: ts(f)?,
                period_to: ts(t)?,
                id: id.clone(),
                tenant,
                checkpoint_size: s as u64,
                entry_index: e as u64,
            })
        })
        .collect()
}

/// Writes the evidence bundle of a certificate (§14).
///
/// In version 2, the format before issue #15 (an inclusion proof per entry); see
/// [`write_certificate_bundle_as`].
pub fn write_certificate_bundle(
    conn: &mut DbConn,
    cert: &Certificate,
    sink: &mut Sink,
) -> Result<(), StoreError> {
    write_certificate_bundle_as(conn, cert, bundle::Format::V2, sink)
}

/// Writes the evidence bundle of a certificate (§14) in `format`.
pub fn write_certificate_bundle_as(
    conn: &mut DbConn,
    cert: &Certificate,
    format: bundle::Format,
    sink: &mut Sink,
) -> Result<(), StoreError> {
    let size = gpuledger_core::checkpoint::unverified(&cert.checkpoint)
        .ok_or_else(|| StoreError::Corrupt(format!("certificate {} checkpoint", cert.id)))?
        .size();
    let header = Header::new(
        &cert.log_origin,
        &cert.checkpoint,
        BundleSubject::Certificate(cert.id.clone()),
    );
    let mut w = super::bundle::Writer::start(format, header, size, sink)?;
    super::bundle::Context::new(conn, &cert.tenant, size, false)?.write(conn, &mut w)?;
    let req = CertificateRequest {
        tenant: cert.tenant.clone(),
        period: Period {
            from: cert.period_from,
            to: cert.period_to,
        },
        scope: cert.scope.clone(),
    };
    w.entries(
        conn,
        &[Kind::GpuUsage, Kind::Energy],
        Some(&cert.tenant),
        &mut |_, b| covers(&req, b),
    )?;
    w.finish(conn)
}
