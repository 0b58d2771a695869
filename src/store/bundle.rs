//! Evidence bundles written from the log (docs/PROTOCOL.md §14): entries line by line, each with
//! its inclusion proof, page by page so a bundle of any size streams in bounded memory.
//! `certificates` and `invoices` choose which entries; this module writes them.

use super::conn::DbConn;
use super::error::StoreError;
use super::read;
use super::schema::entries;
use super::usage::parse_body;
use crate::core::bundle;
use crate::core::merkle::{self, Hash, HashReader, MemoryHashes};
use crate::core::record::{Body, Kind};
use diesel::prelude::*;
use std::cell::RefCell;
use std::collections::HashSet;

/// Where bundle lines go; an error stops the bundle (the reader went away).
pub type Sink<'a> = dyn FnMut(Vec<u8>) -> Result<(), StoreError> + 'a;

/// Entries read per query while writing a bundle.
const PAGE: i64 = 2_000;

/// Stored hashes fetched per query (below every backend's bound-parameter limit).
const HASHES_PER_QUERY: usize = 10_000;

/// Notes which stored hashes a proof reads, answering with placeholders: which hashes an RFC
/// 6962 proof needs depends on the positions only, never on the hashes' values.
#[derive(Default)]
struct Needed(RefCell<Vec<u64>>);

impl HashReader for Needed {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog_tiles::Error> {
        self.0.borrow_mut().extend_from_slice(indexes);
        Ok(vec![Hash([0; 32]); indexes.len()])
    }
}

/// The inclusion proofs of `indexes` in the tree of `size`, reading every stored hash they need
/// in a few queries rather than one query per proof.
fn proofs(conn: &mut DbConn, size: u64, indexes: &[u64]) -> Result<Vec<Vec<Hash>>, StoreError> {
    let needed = Needed::default();
    for &i in indexes {
        merkle::prove_record(size, i, &needed)?;
    }
    let mut ids = needed.0.into_inner();
    ids.sort_unstable();
    ids.dedup();
    let mut stored = MemoryHashes::default();
    for part in ids.chunks(HASHES_PER_QUERY) {
        stored.0.extend(read::hashes(conn, part)?);
    }
    indexes
        .iter()
        .map(|&i| Ok(merkle::prove_record(size, i, &stored)?))
        .collect()
}

/// Writes the entries of `kinds` below `size` (of `tenant`, if given) that `keep` selects, with
/// their inclusion proofs in the tree of `size`; returns how many were written.
pub(crate) fn write_entries(
    conn: &mut DbConn,
    kinds: &[Kind],
    tenant: Option<&str>,
    size: u64,
    keep: &mut dyn FnMut(u64, &Body) -> bool,
    sink: &mut Sink,
) -> Result<u64, StoreError> {
    let kinds: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
    let mut after = -1i64;
    let mut written = 0;
    loop {
        let mut q = entries::table
            .filter(entries::idx.gt(after))
            .filter(entries::idx.lt(size as i64))
            .filter(entries::kind.eq_any(&kinds))
            .order(entries::idx.asc())
            .limit(PAGE)
            .select((entries::idx, entries::leaf))
            .into_boxed();
        if let Some(t) = tenant {
            q = q.filter(entries::tenant.eq(t));
        }
        let rows: Vec<(i64, Vec<u8>)> = q.load(conn)?;
        let Some(last) = rows.last().map(|r| r.0) else {
            return Ok(written);
        };
        let full = rows.len() as i64 == PAGE;
        let mut kept = Vec::with_capacity(rows.len());
        for (idx, leaf) in rows {
            if keep(idx as u64, &parse_body(idx, &leaf)?) {
                kept.push((idx as u64, leaf));
            }
        }
        let indexes: Vec<u64> = kept.iter().map(|(i, _)| *i).collect();
        for ((idx, leaf), proof) in kept.iter().zip(proofs(conn, size, &indexes)?) {
            sink(bundle::entry_line(*idx, leaf, &proof))?;
            written += 1;
        }
        if !full {
            return Ok(written);
        }
        after = last;
    }
}

/// The context entries of a bundle about one tenant (docs/PROTOCOL.md §14): what a verifier
/// needs to recheck the records and the rating, and nothing of any other tenant.
pub(crate) struct Context {
    tenant: String,
    /// Plans the tenant was on below the bundle's size (their volume tiers are context).
    plans: HashSet<String>,
    /// An invoice bundle also carries prices, plans and the tenant's earlier invoices.
    invoice: bool,
}

impl Context {
    /// The context of a bundle about `tenant` at `size`; `invoice` for an invoice bundle.
    pub(crate) fn new(
        conn: &mut DbConn,
        tenant: &str,
        size: u64,
        invoice: bool,
    ) -> Result<Context, StoreError> {
        let rows: Vec<(i64, Vec<u8>)> = entries::table
            .filter(entries::kind.eq(Kind::TenantPlan.as_str()))
            .filter(entries::tenant.eq(tenant))
            .filter(entries::idx.lt(size as i64))
            .select((entries::idx, entries::leaf))
            .load(conn)?;
        let mut plans = HashSet::new();
        for (i, leaf) in rows {
            if let Body::TenantPlan(p) = parse_body(i, &leaf)? {
                plans.insert(p.plan);
            }
        }
        Ok(Context {
            tenant: tenant.to_owned(),
            plans,
            invoice,
        })
    }

    /// The kinds of context entries.
    pub(crate) fn kinds(&self) -> Vec<Kind> {
        let mut k = vec![
            Kind::LogPolicy,
            Kind::SignerKeyRegistered,
            Kind::SignerKeyRevoked,
            Kind::TenantRegistered,
            Kind::LeaseRegistered,
            Kind::RegionParams,
        ];
        if self.invoice {
            k.extend([
                Kind::RateCard,
                Kind::SpotPrice,
                Kind::VolumeTiers,
                Kind::TenantPlan,
                Kind::InvoiceIssued,
            ]);
        }
        k
    }

    /// Whether a context entry of one of [`Context::kinds`] goes in: the tenant's own
    /// registration, leases, plans and invoices; the volume tiers of its plans; the rest
    /// (keys, policies, public prices and region parameters) whole.
    pub(crate) fn keep(&self, body: &Body) -> bool {
        match body {
            Body::TenantRegistered(t) => t.tenant == self.tenant,
            Body::LeaseRegistered(l) => l.tenant == self.tenant,
            Body::TenantPlan(p) => p.tenant == self.tenant,
            Body::InvoiceIssued(i) => i.tenant == self.tenant,
            Body::VolumeTiers(v) => self.plans.contains(&v.plan),
            _ => true,
        }
    }

    /// Writes the context entries below `size`; returns how many.
    pub(crate) fn write(
        &self,
        conn: &mut DbConn,
        size: u64,
        sink: &mut Sink,
    ) -> Result<u64, StoreError> {
        write_entries(
            conn,
            &self.kinds(),
            None,
            size,
            &mut |_, b| self.keep(b),
            sink,
        )
    }
}
