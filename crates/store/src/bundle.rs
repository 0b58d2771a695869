//! Evidence bundles written from the log (docs/PROTOCOL.md §14), page by page so a bundle of
//! any size streams in bounded memory: in version 3 (the default) the entries' leaves, then one
//! multi-proof for all of them in node lines, its nodes computed from the stored tree hashes a
//! few thousand at a time; in version 2 each entry with its own inclusion proof.
//! `certificates` and `invoices` choose which entries; this module writes them ([`Writer`]).

use super::conn::DbConn;
use super::error::StoreError;
use super::read;
use super::schema::entries;
use super::usage::parse_body;
use diesel::prelude::*;
use gpuledger_core::bundle::{self, Format, Header};
use gpuledger_core::merkle::{self, Hash, HashReader, MemoryHashes};
use gpuledger_core::multiproof;
use gpuledger_core::record::{Body, Kind};
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

/// A bundle being written: the header, then [`Writer::entries`] (context first, then records),
/// then [`Writer::finish`] (the multi-proof of v3 and the end line).
pub(crate) struct Writer<'s, 'a> {
    format: Format,
    size: u64,
    sink: &'s mut Sink<'a>,
    entries: u64,
    /// v3: every entry's index, for the multi-proof (8 bytes an entry).
    indexes: Vec<u64>,
}

impl<'s, 'a> Writer<'s, 'a> {
    /// Starts a bundle in `format` against the checkpoint of `size` that `header` carries:
    /// writes the header line.
    pub(crate) fn start(
        format: Format,
        header: Header,
        size: u64,
        sink: &'s mut Sink<'a>,
    ) -> Result<Self, StoreError> {
        sink(bundle::header_line(&header.with_format(format)))?;
        Ok(Writer {
            format,
            size,
            sink,
            entries: 0,
            indexes: Vec::new(),
        })
    }

    /// Writes the entries of `kinds` below the size (of `tenant`, if given) that `keep`
    /// selects, in index order (in v2 each with its inclusion proof); returns how many.
    pub(crate) fn entries(
        &mut self,
        conn: &mut DbConn,
        kinds: &[Kind],
        tenant: Option<&str>,
        keep: &mut dyn FnMut(u64, &Body) -> bool,
    ) -> Result<u64, StoreError> {
        let n = write_entries(
            conn,
            kinds,
            tenant,
            self.size,
            self.format,
            keep,
            &mut |i, l| {
                self.indexes.push(i);
                (self.sink)(l)
            },
        )?;
        self.entries += n;
        Ok(n)
    }

    /// Ends the bundle: in v3 the node lines of the multi-proof of every entry written, then
    /// the end line.
    pub(crate) fn finish(mut self, conn: &mut DbConn) -> Result<(), StoreError> {
        if self.format == Format::V2 {
            return (self.sink)(bundle::end_line(self.entries));
        }
        let mut indexes = std::mem::take(&mut self.indexes);
        indexes.sort_unstable();
        let nodes = write_nodes(conn, self.size, &indexes, self.sink)?;
        (self.sink)(bundle::end_line_v3(self.entries, nodes))
    }
}

/// Writes the multi-proof of `indexes` (sorted) in the tree of `size` as node lines, each of
/// [`bundle::MAX_NODES_PER_LINE`] nodes (the last one fewer): the nodes' ranges come from the
/// recursion ([`multiproof::Plan`]), their hashes from the stored hashes of the complete
/// subtrees they are made of ([`multiproof::subtree_indexes`]), read a line's worth at a time.
/// Returns how many nodes.
fn write_nodes(
    conn: &mut DbConn,
    size: u64,
    indexes: &[u64],
    sink: &mut Sink,
) -> Result<u64, StoreError> {
    let corrupt = |e: multiproof::MultiProofError| StoreError::Corrupt(format!("bundle: {e}"));
    let mut plan = multiproof::Plan::new(size);
    let mut at = 0;
    let mut ranges: Vec<(u64, u64)> = Vec::with_capacity(bundle::MAX_NODES_PER_LINE);
    let mut written = 0;
    loop {
        let step = plan.step(indexes.get(at).copied()).map_err(corrupt)?;
        match step {
            Some(multiproof::Step::Leaf(_)) => at += 1,
            Some(multiproof::Step::Node { lo, hi }) => ranges.push((lo, hi)),
            Some(multiproof::Step::Join) => {}
            None => {}
        }
        if ranges.len() == bundle::MAX_NODES_PER_LINE || (step.is_none() && !ranges.is_empty()) {
            let parts: Vec<Vec<u64>> = ranges
                .iter()
                .map(|&(lo, hi)| multiproof::subtree_indexes(lo, hi))
                .collect();
            let mut ids: Vec<u64> = parts.iter().flatten().copied().collect();
            ids.sort_unstable();
            ids.dedup();
            let mut stored = MemoryHashes::default();
            for part in ids.chunks(HASHES_PER_QUERY) {
                stored.0.extend(read::hashes(conn, part)?);
            }
            let hashes: Vec<Hash> = parts
                .iter()
                .map(|p| Ok(multiproof::combine(&stored.read_hashes(p)?)))
                .collect::<Result<_, StoreError>>()?;
            sink(bundle::nodes_line(&hashes))?;
            written += hashes.len() as u64;
            ranges.clear();
        }
        if step.is_none() {
            return Ok(written);
        }
    }
}

/// Writes the entries of `kinds` below `size` (of `tenant`, if given) that `keep` selects, in
/// `format` (in v2 with their inclusion proofs in the tree of `size`), handing each line to
/// `sink` with its index; returns how many were written.
fn write_entries(
    conn: &mut DbConn,
    kinds: &[Kind],
    tenant: Option<&str>,
    size: u64,
    format: Format,
    keep: &mut dyn FnMut(u64, &Body) -> bool,
    sink: &mut dyn FnMut(u64, Vec<u8>) -> Result<(), StoreError>,
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
        if format == Format::V3 {
            for (idx, leaf) in &kept {
                sink(*idx, bundle::entry_line_v3(*idx, leaf))?;
                written += 1;
            }
        } else {
            let indexes: Vec<u64> = kept.iter().map(|(i, _)| *i).collect();
            for ((idx, leaf), proof) in kept.iter().zip(proofs(conn, size, &indexes)?) {
                sink(*idx, bundle::entry_line(*idx, leaf, &proof))?;
                written += 1;
            }
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
    /// An invoice bundle also carries prices, plans, and the tenant's earlier invoices,
    /// exclusions, contracts and prepaid lots.
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
            Kind::NodeRegistered,
            Kind::NodeUpdated,
        ];
        if self.invoice {
            k.extend([
                Kind::RateCard,
                Kind::SpotPrice,
                Kind::VolumeTiers,
                Kind::TenantPlan,
                Kind::InvoiceIssued,
                Kind::RecordExcluded,
                Kind::ContractRegistered,
                Kind::ContractAmended,
                Kind::Prepayment,
            ]);
        }
        k
    }

    /// Whether a context entry of one of [`Context::kinds`] goes in: the tenant's own
    /// registration, leases, plans, invoices, exclusions, contracts, amendments and lots; the volume tiers of its plans; the rest
    /// (keys, policies, public prices and region parameters) whole.
    pub(crate) fn keep(&self, body: &Body) -> bool {
        match body {
            Body::TenantRegistered(t) => t.tenant == self.tenant,
            Body::LeaseRegistered(l) => l.tenant == self.tenant,
            Body::TenantPlan(p) => p.tenant == self.tenant,
            Body::InvoiceIssued(i) => i.tenant == self.tenant,
            Body::RecordExcluded(x) => x.tenant == self.tenant,
            Body::ContractRegistered(c) => c.tenant == self.tenant,
            Body::ContractAmended(a) => a.tenant == self.tenant,
            Body::Prepayment(p) => p.tenant == self.tenant,
            Body::VolumeTiers(v) => self.plans.contains(&v.plan),
            _ => true,
        }
    }

    /// Writes the context entries below the bundle's size; returns how many.
    pub(crate) fn write(&self, conn: &mut DbConn, w: &mut Writer) -> Result<u64, StoreError> {
        w.entries(conn, &self.kinds(), None, &mut |_, b| self.keep(b))
    }
}
