//! Read queries. None of these lock anything; each reads one consistent state per call.

use super::conn::DbConn;
use super::error::StoreError;
use super::schema::*;
use diesel::prelude::*;
use gpuledger_core::admission;
use gpuledger_core::fleet::FleetLog;
use gpuledger_core::merkle::{Hash, HashReader};
use gpuledger_core::record::{Body, KeyScope, Kind, LogPolicy, SignerKeyRegistered};
use gpuledger_core::time::Timestamp;
use std::cell::RefCell;
use std::collections::HashMap;

fn to_hash(b: Vec<u8>, what: &str) -> Result<Hash, StoreError> {
    b.try_into()
        .map(Hash)
        .map_err(|_| StoreError::Corrupt(format!("{what} is not 32 bytes")))
}

/// The log size and the leaf hash of its last entry (32 zero bytes when empty).
pub fn head(conn: &mut DbConn) -> Result<(u64, Hash), StoreError> {
    let row: Option<(i64, Vec<u8>)> = log_head::table
        .find(1i64)
        .select((log_head::size, log_head::head_hash))
        .first(conn)
        .optional()?;
    let (size, h) = row.ok_or(StoreError::NotInitialised)?;
    Ok((size as u64, to_hash(h, "log head hash")?))
}

/// Stored tree hashes by stored-hash index.
pub fn hashes(conn: &mut DbConn, ids: &[u64]) -> Result<HashMap<u64, Hash>, StoreError> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let ids_i: Vec<i64> = ids.iter().map(|&i| i as i64).collect();
    let rows: Vec<(i64, Vec<u8>)> = tree_hashes::table
        .filter(tree_hashes::id.eq_any(&ids_i))
        .select((tree_hashes::id, tree_hashes::hash))
        .load(conn)?;
    let map: HashMap<u64, Hash> = rows
        .into_iter()
        .map(|(i, h)| Ok((i as u64, to_hash(h, "tree hash")?)))
        .collect::<Result<_, StoreError>>()?;
    if let Some(missing) = ids.iter().find(|i| !map.contains_key(i)) {
        return Err(StoreError::Corrupt(format!(
            "tree hash {missing} is missing"
        )));
    }
    Ok(map)
}

/// The latest checkpoint: size, root and signed note.
pub fn latest_checkpoint(conn: &mut DbConn) -> Result<Option<(u64, Hash, String)>, StoreError> {
    let row: Option<(i64, Vec<u8>, String)> = checkpoints::table
        .order(checkpoints::size.desc())
        .select((checkpoints::size, checkpoints::root, checkpoints::note))
        .first(conn)
        .optional()?;
    row.map(|(s, r, n)| Ok((s as u64, to_hash(r, "checkpoint root")?, n)))
        .transpose()
}

/// A [`HashReader`] over the `tree_hashes` table, for proofs and roots in O(log n) reads.
pub struct DbHashReader<'a> {
    conn: RefCell<&'a mut DbConn>,
}

impl<'a> DbHashReader<'a> {
    /// A reader borrowing `conn`.
    pub fn new(conn: &'a mut DbConn) -> Self {
        Self {
            conn: RefCell::new(conn),
        }
    }
}

impl HashReader for DbHashReader<'_> {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog_tiles::Error> {
        let mut conn = self.conn.borrow_mut();
        let map = hashes(&mut conn, indexes)
            .map_err(|e| tlog_tiles::Error::InvalidInput(e.to_string()))?;
        Ok(indexes.iter().map(|i| map[i]).collect())
    }
}

/// The hashes of one C2SP hash tile, concatenated in tile order (32 bytes each), read in one
/// query. The tile must be within the stored tree; a missing hash is `Corrupt`.
pub fn tile_hashes(
    conn: &mut DbConn,
    tile: &gpuledger_core::tiles::TilePath,
) -> Result<Vec<u8>, StoreError> {
    let ids = tile.stored_hash_indexes();
    let map = hashes(conn, &ids)?;
    Ok(ids.iter().flat_map(|i| map[i].0).collect())
}

/// One stored entry, as the `entries` table holds it.
#[derive(Debug, Clone, Queryable)]
pub struct EntryRow {
    pub idx: i64,
    pub kind: String,
    pub signer: String,
    pub seq: i64,
    pub tenant: Option<String>,
    pub received_at: i64,
    pub content_hash: Vec<u8>,
    pub leaf: Vec<u8>,
    pub leaf_hash: Vec<u8>,
    /// Measurement stream of usage and energy entries (see `Body::stream`).
    pub stream: Option<String>,
    pub start_at: Option<i64>,
    pub end_at: Option<i64>,
}

/// Entries with `start <= idx < end`, in order.
pub fn entries_range(conn: &mut DbConn, start: u64, end: u64) -> Result<Vec<EntryRow>, StoreError> {
    Ok(entries::table
        .filter(entries::idx.ge(start as i64))
        .filter(entries::idx.lt(end as i64))
        .order(entries::idx.asc())
        .load::<EntryRow>(conn)?)
}

/// Stored tree hashes with `start <= id < end`, in order.
pub fn tree_hash_range(
    conn: &mut DbConn,
    start: u64,
    end: u64,
) -> Result<Vec<(i64, Vec<u8>)>, StoreError> {
    Ok(tree_hashes::table
        .filter(tree_hashes::id.ge(start as i64))
        .filter(tree_hashes::id.lt(end as i64))
        .order(tree_hashes::id.asc())
        .select((tree_hashes::id, tree_hashes::hash))
        .load(conn)?)
}

/// Every checkpoint: size, root, note; oldest first.
pub fn checkpoints_all(conn: &mut DbConn) -> Result<Vec<(i64, Vec<u8>, String)>, StoreError> {
    Ok(checkpoints::table
        .order(checkpoints::size.asc())
        .select((checkpoints::size, checkpoints::root, checkpoints::note))
        .load(conn)?)
}

/// One stored checkpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointRow {
    /// Tree size it commits to.
    pub size: u64,
    /// Root hash of the tree of `size` entries.
    pub root: Hash,
    /// The complete C2SP signed note, with the witnesses' cosignatures gathered for it.
    pub note: String,
    /// When it was signed, Unix seconds.
    pub created_at: i64,
}

/// Which page of checkpoints [`checkpoints_page`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointPage {
    /// The newest first.
    Newest,
    /// Sizes below this one, newest first.
    Before(u64),
    /// Sizes from this one up, oldest first.
    From(u64),
}

/// Up to `limit` stored checkpoints, in the order `page` names.
pub fn checkpoints_page(
    conn: &mut DbConn,
    page: CheckpointPage,
    limit: u64,
) -> Result<Vec<CheckpointRow>, StoreError> {
    let q = checkpoints::table
        .select((
            checkpoints::size,
            checkpoints::root,
            checkpoints::note,
            checkpoints::created_at,
        ))
        .limit(limit.min(i64::MAX as u64) as i64);
    let as_i64 = |s: u64| s.min(i64::MAX as u64) as i64;
    let rows: Vec<(i64, Vec<u8>, String, i64)> = match page {
        CheckpointPage::Newest => q.order(checkpoints::size.desc()).load(conn)?,
        CheckpointPage::Before(s) => q
            .filter(checkpoints::size.lt(as_i64(s)))
            .order(checkpoints::size.desc())
            .load(conn)?,
        CheckpointPage::From(s) => q
            .filter(checkpoints::size.ge(as_i64(s)))
            .order(checkpoints::size.asc())
            .load(conn)?,
    };
    // Each note with the witnesses' cosignatures gathered for it.
    let sizes: Vec<u64> = rows.iter().map(|r| r.0 as u64).collect();
    let mut lines = super::cosignatures::lines_for(conn, &sizes)?;
    rows.into_iter()
        .map(|(size, root, note, created_at)| {
            let size = size as u64;
            let lines = lines.remove(&size).unwrap_or_default();
            Ok(CheckpointRow {
                size,
                root: to_hash(root, "checkpoint root")?,
                note: super::cosignatures::attach(size, note, &lines)?,
                created_at,
            })
        })
        .collect()
}

/// A registered key with its signer's role.
#[derive(Debug, Clone)]
pub struct KeyRow {
    pub key_id: String,
    pub signer: String,
    pub role: String,
    pub public_key: Vec<u8>,
    pub registered_idx: i64,
    pub revoked_idx: Option<i64>,
}

/// Registered keys; all of them when `ids` is `None`.
pub fn keys(conn: &mut DbConn, ids: Option<&[&str]>) -> Result<Vec<KeyRow>, StoreError> {
    let q = signer_keys::table
        .inner_join(signers::table.on(signers::id.eq(signer_keys::signer_id)))
        .select((
            signer_keys::key_id,
            signer_keys::signer_id,
            signers::role,
            signer_keys::public_key,
            signer_keys::registered_idx,
            signer_keys::revoked_idx,
        ));
    type Row = (String, String, String, Vec<u8>, i64, Option<i64>);
    let rows: Vec<Row> = match ids {
        Some(ids) => q.filter(signer_keys::key_id.eq_any(ids)).load(conn)?,
        None => q.order(signer_keys::registered_idx.asc()).load(conn)?,
    };
    Ok(rows
        .into_iter()
        .map(
            |(key_id, signer, role, public_key, registered_idx, revoked_idx)| KeyRow {
                key_id,
                signer,
                role,
                public_key,
                registered_idx,
                revoked_idx,
            },
        )
        .collect())
}

/// Which of `ids` are registered signers.
pub fn known_signers(conn: &mut DbConn, ids: &[&str]) -> Result<Vec<String>, StoreError> {
    Ok(signers::table
        .filter(signers::id.eq_any(ids))
        .select(signers::id)
        .load(conn)?)
}

/// A value from the `meta` table.
pub fn meta(conn: &mut DbConn, key: &str) -> Result<Option<String>, StoreError> {
    Ok(meta::table
        .find(key)
        .select(meta::value)
        .first(conn)
        .optional()?)
}

/// Number of conflict evidence rows.
pub fn conflict_count(conn: &mut DbConn) -> Result<u64, StoreError> {
    let n: i64 = conflicts::table.count().get_result(conn)?;
    Ok(n as u64)
}

/// The bodies of the entries of `kinds` below `size`, in index order.
pub fn bodies_of(
    conn: &mut DbConn,
    kinds: &[Kind],
    size: u64,
) -> Result<Vec<(u64, Body)>, StoreError> {
    bodies_between(conn, kinds, 0, size)
}

/// The bodies of `tenant`'s entries of `kinds` below `size`, with their indexes, in log order.
/// `tenant`'s entries without an interval: every kind but usage and energy records (its
/// contracts, leases, invoices, payments, prepayments), which the partial index
/// `entries_tenant_kind` `(tenant, kind, idx) WHERE start_at IS NULL` finds whatever the number
/// of the tenant's records or of other tenants, and records never enter. A query by it must not
/// have the database order by `idx`: SQLite's planner would then walk the `(tenant, idx)` index
/// over every record of the tenant instead (7.6 s for a tenant of 10,000,000 records, `gpuledger
/// bench contract`); the callers sort what they read.
pub(crate) fn tenant_ledger_entries(
    tenant: &str,
) -> diesel::dsl::And<
    diesel::dsl::Eq<entries::tenant, String>,
    diesel::dsl::IsNull<entries::start_at>,
> {
    entries::tenant
        .eq(tenant.to_owned())
        .and(entries::start_at.is_null())
}

fn tenant_bodies(
    conn: &mut DbConn,
    kinds: &[Kind],
    tenant: &str,
    size: u64,
) -> Result<Vec<(u64, Body)>, StoreError> {
    let kinds: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
    let mut rows: Vec<(i64, Vec<u8>)> = entries::table
        .filter(entries::kind.eq_any(kinds))
        .filter(tenant_ledger_entries(tenant))
        .filter(entries::idx.lt(size.min(i64::MAX as u64) as i64))
        .select((entries::idx, entries::leaf))
        .load(conn)?;
    rows.sort_unstable_by_key(|(i, _)| *i);
    rows.into_iter()
        .map(|(i, leaf)| Ok((i as u64, super::usage::parse_body(i, &leaf)?)))
        .collect()
}

/// The contracts of `tenant` registered below `size` (docs/PROTOCOL.md §5.19), as amended
/// below `size` (§5.21, `core::contract::Contracts`), in log order.
pub fn contracts(
    conn: &mut DbConn,
    tenant: &str,
    size: u64,
) -> Result<Vec<gpuledger_core::record::ContractRegistered>, StoreError> {
    let kinds = [Kind::ContractRegistered, Kind::ContractAmended];
    let bodies = tenant_bodies(conn, &kinds, tenant, size)?;
    Ok(gpuledger_core::contract::Contracts::of(bodies).into_vec())
}

/// The leases of `tenant` registered below `size`, by id.
pub fn leases(
    conn: &mut DbConn,
    tenant: &str,
    size: u64,
) -> Result<std::collections::BTreeMap<String, gpuledger_core::record::LeaseRegistered>, StoreError>
{
    let bodies = tenant_bodies(conn, &[Kind::LeaseRegistered], tenant, size)?;
    Ok(bodies
        .into_iter()
        .filter_map(|(_, b)| match b {
            Body::LeaseRegistered(l) => Some((l.lease.clone(), l)),
            _ => None,
        })
        .collect())
}

/// What an invoice or preview of `tenant` for `period` at log size `size` measures beyond its
/// usage lines (`core::invoice::Measurement`): the leases its contracts' SLAs watch, with their
/// registrations, and the contract-priced records of its contracts' included hours.
pub fn measurement(
    conn: &mut DbConn,
    tenant: &str,
    contracts: &[gpuledger_core::record::ContractRegistered],
    period: gpuledger_core::invoice::Period,
    size: u64,
) -> Result<gpuledger_core::invoice::Measurement, StoreError> {
    let metering = gpuledger_core::allowance::Metering::new(contracts, period);
    if contracts.iter().all(|c| c.sla.is_none()) {
        return Ok(gpuledger_core::invoice::Measurement {
            presence: Default::default(),
            metering,
        });
    }
    let leases = leases(conn, tenant, size)?;
    Ok(gpuledger_core::invoice::Measurement {
        presence: gpuledger_core::sla::Presence::new(contracts, period, &|l| {
            leases.get(l).cloned()
        }),
        metering,
    })
}

/// The exclusions of `tenant`'s records logged below `size` (docs/PROTOCOL.md §5.17): excluded
/// entry → (index of the exclusion, reason), the first exclusion of an entry counting (the
/// ledger admits no second).
pub fn exclusions(
    conn: &mut DbConn,
    tenant: &str,
    size: u64,
) -> Result<std::collections::BTreeMap<u64, (u64, String)>, StoreError> {
    let rows: Vec<(i64, Vec<u8>)> = entries::table
        .filter(entries::kind.eq(Kind::RecordExcluded.as_str()))
        .filter(entries::tenant.eq(tenant))
        .filter(entries::idx.lt(size.min(i64::MAX as u64) as i64))
        .order(entries::idx.asc())
        .select((entries::idx, entries::leaf))
        .load(conn)?;
    let mut out = std::collections::BTreeMap::new();
    for (i, leaf) in rows {
        if let Body::RecordExcluded(x) = super::usage::parse_body(i, &leaf)? {
            out.entry(x.entry).or_insert((i as u64, x.reason));
        }
    }
    Ok(out)
}

/// The record at `entry` below `size` as an exclusion names it: its tenant and start, if it is
/// a `gpu_usage` record or an `energy` record with a tenant.
pub fn record_at(
    conn: &mut DbConn,
    entry: u64,
    size: u64,
) -> Result<Option<(String, Timestamp)>, StoreError> {
    if entry >= size {
        return Ok(None);
    }
    let row: Option<(String, Option<String>, Option<i64>)> = entries::table
        .find(entry.min(i64::MAX as u64) as i64)
        .select((entries::kind, entries::tenant, entries::start_at))
        .first(conn)
        .optional()?;
    Ok(match row {
        Some((kind, Some(tenant), Some(start)))
            if kind == Kind::GpuUsage.as_str() || kind == Kind::Energy.as_str() =>
        {
            let start = Timestamp::from_unix(start)
                .ok_or_else(|| StoreError::Corrupt(format!("entry {entry}: start")))?;
            Some((tenant, start))
        }
        _ => None,
    })
}

/// The bodies of the entries of `kinds` at `from <= index < to`, in index order (through the
/// `(kind, idx)` index).
pub(crate) fn bodies_between(
    conn: &mut DbConn,
    kinds: &[Kind],
    from: u64,
    to: u64,
) -> Result<Vec<(u64, Body)>, StoreError> {
    let kinds: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
    let rows: Vec<(i64, Vec<u8>)> = entries::table
        .filter(entries::kind.eq_any(kinds))
        .filter(entries::idx.ge(from as i64))
        .filter(entries::idx.lt(to as i64))
        .order(entries::idx.asc())
        .select((entries::idx, entries::leaf))
        .load(conn)?;
    rows.into_iter()
        .map(|(i, b)| Ok((i as u64, super::usage::parse_body(i, &b)?)))
        .collect()
}

/// The invoiced periods (entry index, tenant, from, to) that contain the instant `t`, of the
/// invoices logged below `size` (from the invoice table, a cache of the log).
pub(crate) fn invoiced_periods_at(
    conn: &mut DbConn,
    t: Timestamp,
    size: u64,
) -> Result<Vec<(u64, String, Timestamp, Timestamp)>, StoreError> {
    use super::schema::invoices;
    let rows: Vec<(i64, String, i64, i64)> = invoices::table
        .filter(invoices::period_from.le(t.unix()))
        .filter(invoices::period_to.gt(t.unix()))
        .filter(invoices::entry_idx.lt(size as i64))
        .select((
            invoices::entry_idx,
            invoices::tenant,
            invoices::period_from,
            invoices::period_to,
        ))
        .load(conn)?;
    rows.into_iter()
        .map(|(i, tenant, f, to)| {
            let ts = |s: i64| {
                Timestamp::from_unix(s)
                    .ok_or_else(|| StoreError::Corrupt(format!("invoice entry {i}: time {s}")))
            };
            Ok((i as u64, tenant, ts(f)?, ts(to)?))
        })
        .collect()
}

/// The admission policy in force for an entry appended at `size`: the latest `log_policy`
/// entry below it, or the defaults.
pub fn policy(conn: &mut DbConn, size: u64) -> Result<LogPolicy, StoreError> {
    let row: Option<(i64, Vec<u8>)> = entries::table
        .filter(entries::kind.eq(Kind::LogPolicy.as_str()))
        .filter(entries::idx.lt(size as i64))
        .order(entries::idx.desc())
        .select((entries::idx, entries::leaf))
        .first(conn)
        .optional()?;
    match row {
        None => Ok(LogPolicy::default()),
        Some((i, leaf)) => match super::usage::parse_body(i, &leaf)? {
            Body::LogPolicy(p) => Ok(p),
            _ => Err(StoreError::Corrupt(format!(
                "entry {i} is not a log policy"
            ))),
        },
    }
}

/// The scope of the latest key registered to `signer`, if any.
pub fn latest_scope(conn: &mut DbConn, signer: &str) -> Result<Option<KeyScope>, StoreError> {
    let idx: Option<i64> = signer_keys::table
        .filter(signer_keys::signer_id.eq(signer))
        .order(signer_keys::registered_idx.desc())
        .select(signer_keys::registered_idx)
        .first(conn)
        .optional()?;
    match idx {
        None => Ok(None),
        Some(i) => Ok(Some(KeyScope::of(&registration(conn, i as u64)?))),
    }
}

/// The `signer_key_registered` body at `index`.
pub fn registration(conn: &mut DbConn, index: u64) -> Result<SignerKeyRegistered, StoreError> {
    let leaf: Vec<u8> = entries::table
        .find(index as i64)
        .select(entries::leaf)
        .first(conn)?;
    match super::usage::parse_body(index as i64, &leaf)? {
        Body::SignerKeyRegistered(r) => Ok(r),
        _ => Err(StoreError::Corrupt(format!(
            "entry {index} is not a key registration"
        ))),
    }
}

/// The tenant and lease registrations a set of bodies names, read from the log (for
/// [`admission::check_parties`]). Tenants and leases are only ever added, so an answer read
/// before the head lock stays true under it.
#[derive(Debug, Default, Clone)]
pub struct DbParties {
    pub tenants: HashMap<String, u64>,
    /// The nodes and leases read so far (a node with every update below the size it was
    /// read at; leases are immutable once logged).
    pub fleet: FleetLog,
}

impl admission::Parties for DbParties {
    fn tenant(&self, tenant: &str) -> Option<u64> {
        self.tenants.get(tenant).copied()
    }
    fn lease(&self, lease: &str) -> Option<(String, u64)> {
        self.fleet
            .lease(lease)
            .map(|(l, at)| (l.tenant.clone(), at))
    }
}

impl DbParties {
    /// Adds what `other` holds that this lacks, and `other`'s nodes in place of these (read
    /// later, they hold every update these hold).
    pub fn merge(&mut self, other: DbParties) {
        self.tenants.extend(other.tenants);
        self.fleet.merge(other.fleet);
    }

    /// The registrations of the tenants and leases `body` names, below `size`.
    pub fn load(conn: &mut DbConn, size: u64, body: &Body) -> Result<DbParties, StoreError> {
        let mut p = DbParties::default();
        let tenants: Vec<&str> = body.tenant().into_iter().collect();
        let leases: Vec<&str> = match body {
            Body::GpuUsage(u) => u.lease.as_deref().into_iter().collect(),
            Body::LeaseRegistered(l) => vec![l.lease.as_str()],
            Body::ContractRegistered(c) => {
                c.fees().iter().filter_map(|f| f.lease.as_deref()).collect()
            }
            _ => Vec::new(),
        };
        p.fill(conn, size, &tenants, &leases)?;
        let nodes: Vec<&str> = match body {
            Body::NodeRegistered(n) => vec![n.node.as_str()],
            Body::NodeUpdated(u) => vec![u.node.as_str()],
            Body::LeaseRegistered(l) => l.nodes.iter().map(|n| n.node.as_str()).collect(),
            Body::SignerKeyRegistered(r) => r.nodes.iter().flatten().map(String::as_str).collect(),
            _ => Vec::new(),
        };
        p.fill_nodes(conn, size, &nodes)?;
        Ok(p)
    }

    /// Adds the registrations of `nodes` below `size`, each with its updates (one read of the
    /// `node_registered` and `node_updated` entries, whose ids are inside the bodies, when
    /// any is named).
    pub fn fill_nodes(
        &mut self,
        conn: &mut DbConn,
        size: u64,
        nodes: &[&str],
    ) -> Result<(), StoreError> {
        if nodes.is_empty() {
            return Ok(());
        }
        let mut read = FleetLog::default();
        for (i, b) in bodies_of(conn, &[Kind::NodeRegistered, Kind::NodeUpdated], size)? {
            read.apply(i, &b);
        }
        for node in read.nodes() {
            self.fleet.put_node(node.clone());
        }
        Ok(())
    }

    /// Adds the registrations of `tenants` and `leases` below `size`: one query for the
    /// tenants, and one for the leases (whose ids are inside the bodies) when any is named,
    /// which reads every lease (a lease registration checks the node's other leases).
    pub fn fill(
        &mut self,
        conn: &mut DbConn,
        size: u64,
        tenants: &[&str],
        leases: &[&str],
    ) -> Result<(), StoreError> {
        if !tenants.is_empty() {
            let rows: Vec<(String, i64)> = entries::table
                .filter(entries::kind.eq(Kind::TenantRegistered.as_str()))
                .filter(entries::tenant.eq_any(tenants))
                .filter(entries::idx.lt(size as i64))
                .select((entries::tenant.assume_not_null(), entries::idx))
                .load(conn)?;
            for (t, i) in rows {
                let e = self.tenants.entry(t).or_insert(i as u64);
                *e = (*e).min(i as u64);
            }
        }
        if !leases.is_empty() {
            self.fill_leases(conn, size)?;
        }
        Ok(())
    }

    /// Adds every lease registration below `size` (one read of the `lease_registered` entries).
    pub fn fill_leases(&mut self, conn: &mut DbConn, size: u64) -> Result<(), StoreError> {
        for (i, b) in bodies_of(conn, &[Kind::LeaseRegistered], size)? {
            if let Body::LeaseRegistered(l) = b {
                self.fleet.add_lease(l, i);
            }
        }
        Ok(())
    }
}

/// A tenant's entry logged while a draft waited for the head lock: index, kind, interval start.
pub type LoggedSince = (u64, String, Option<i64>);

/// The entries of `tenant` at indexes `since..size`, read under the head lock at log size
/// `size` to recheck a draft computed at size `since` (invoices and certificates): `None` when
/// nothing was logged since; a log that shrank is corrupt.
pub fn tenant_entries_since(
    conn: &mut DbConn,
    tenant: &str,
    since: u64,
    size: u64,
) -> Result<Option<Vec<LoggedSince>>, StoreError> {
    if size < since {
        return Err(StoreError::Corrupt(format!(
            "the log shrank from {since} to {size} entries"
        )));
    }
    if size == since {
        return Ok(None);
    }
    let rows: Vec<(i64, String, Option<i64>)> = entries::table
        .filter(entries::tenant.eq(tenant))
        .filter(entries::idx.ge(since as i64))
        .filter(entries::idx.lt(size as i64))
        .select((entries::idx, entries::kind, entries::start_at))
        .load(conn)?;
    Ok(Some(
        rows.into_iter()
            .map(|(idx, kind, start)| (idx as u64, kind, start))
            .collect(),
    ))
}

/// Issued invoices whose `invoice_issued` entry has `start <= idx < end`: number and JSON.
pub fn invoice_documents(
    conn: &mut DbConn,
    start: u64,
    end: u64,
) -> Result<Vec<(String, String)>, StoreError> {
    Ok(invoices::table
        .filter(invoices::entry_idx.ge(start as i64))
        .filter(invoices::entry_idx.lt(end as i64))
        .select((invoices::number, invoices::json))
        .load(conn)?)
}

/// Issued certificates whose `certificate_issued` entry has `start <= idx < end`: id and JSON.
pub fn certificate_documents(
    conn: &mut DbConn,
    start: u64,
    end: u64,
) -> Result<Vec<(String, String)>, StoreError> {
    Ok(certificates::table
        .filter(certificates::entry_idx.ge(start as i64))
        .filter(certificates::entry_idx.lt(end as i64))
        .select((certificates::id, certificates::json))
        .load(conn)?)
}

/// When the entry at `index` was received (`NotFound` beyond the log).
pub fn received_at(
    conn: &mut DbConn,
    index: u64,
) -> Result<gpuledger_core::time::Timestamp, StoreError> {
    let t: Option<i64> = entries::table
        .find(index.min(i64::MAX as u64) as i64)
        .select(entries::received_at)
        .first(conn)
        .optional()?;
    t.and_then(gpuledger_core::time::Timestamp::from_unix)
        .ok_or_else(|| StoreError::NotFound(format!("entry {index}")))
}

/// When the log's last entry was received, if it has any.
pub fn last_received_at(
    conn: &mut DbConn,
) -> Result<Option<gpuledger_core::time::Timestamp>, StoreError> {
    let t: Option<i64> = entries::table
        .order(entries::idx.desc())
        .select(entries::received_at)
        .first(conn)
        .optional()?;
    Ok(t.and_then(gpuledger_core::time::Timestamp::from_unix))
}
