//! `gpuledger recover`: restores, into a database that lost entries (a promoted standby that was
//! behind, a backup restored from before them), what another copy of the same log still holds
//! (the old primary's data, a later backup), without a fork.
//!
//! What is restored is checked before anything is committed:
//! - both databases are the same log (origin and log key) and the key is the one given;
//! - the source holds the published checkpoint (its root at that size is the published root,
//!   computed from its stored tree hashes), so it is not another history;
//! - the target is a prefix of the source (the same root at the target's size): nothing the
//!   target holds is dropped or overwritten, entries are only added at their indices;
//! - the entries are written through the store's one append path, which recomputes every tree
//!   hash from the leaves (the source's stored hashes are not copied), and then the whole
//!   target is re-checked by `verify-log`'s own run ([`super::verify`]) inside the same
//!   transaction, and its root at the published size compared with the published root. Any
//!   failure rolls everything back.
//!
//! Besides the entries it restores what derives from them (the key registry, the signers'
//! sequence numbers, invoices and certificates with their documents, checkpoints and their
//! cosignatures, the conflict evidence, the webhook events of the restored entries and their
//! deliveries) and the account rows the source holds and the target lacks (tenants, tokens,
//! webhook endpoints). A token revoked on the source stays revoked. Rows both hold are left as
//! the target has them.

use super::conn::DbConn;
use super::error::StoreError;
use super::ledger::log_info;
use super::read::{self, DbHashReader};
use super::schema::*;
use super::verify::{self, Failures};
use super::write::{self, NewConflict, NewEntry};
use diesel::prelude::*;
use gpuledger_core::merkle::{self, Hash};
use gpuledger_core::time::Timestamp;
use serde::Serialize;
use std::collections::HashSet;

/// Entries copied per query.
pub const PAGE: u64 = 5_000;

/// The checkpoint the recovered database must hold: the largest one published.
#[derive(Debug, Clone, PartialEq)]
pub struct Required {
    pub size: u64,
    pub root: Hash,
    /// Where it is known from (the high-water file, the publish directory, a note given).
    pub source: String,
}

/// What a recovery restored (or, on a dry run, would restore).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Recovered {
    /// Whether nothing was committed (`--dry-run`).
    pub dry_run: bool,
    /// The target's log size before and after.
    pub from_size: u64,
    pub to_size: u64,
    /// The published checkpoint's size, which the target now holds.
    pub published_size: u64,
    /// Base64 root of the target's tree after recovery.
    pub root: String,
    pub entries: u64,
    pub checkpoints: u64,
    pub cosignatures: u64,
    pub keys_registered: u64,
    pub keys_revoked: u64,
    pub signers: u64,
    pub invoices: u64,
    pub certificates: u64,
    pub conflicts: u64,
    pub webhook_events: u64,
    pub webhook_deliveries: u64,
    pub tenants: u64,
    pub tokens: u64,
    pub tokens_revoked: u64,
    pub webhook_endpoints: u64,
}

/// Why a recovery did not happen. Nothing was written in any case.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    /// The databases or the checkpoint do not allow it; the message says why and what to do.
    #[error("{0}")]
    Refused(String),
    /// The restored log did not verify (rolled back): every failure `verify-log` found.
    #[error("the restored log does not verify, nothing was written: {0}")]
    Verify(Failures),
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn refused(m: impl Into<String>) -> RecoverError {
    RecoverError::Refused(m.into())
}

fn b64(h: &Hash) -> String {
    merkle::encode_hash(h)
}

/// The root of the tree of `size` entries stored in `conn` (the empty tree's for 0).
fn root_at(conn: &mut DbConn, size: u64) -> Result<Hash, StoreError> {
    Ok(merkle::tree_hash(size, &DbHashReader::new(conn))?)
}

/// Restores into `target` what `source` holds beyond it, as the module says; `log_key` is the
/// log's base64 public key (the one the operator trusts), `required` the largest published
/// checkpoint. On `dry_run` everything is done and checked, then rolled back.
pub fn recover(
    target: &mut DbConn,
    source: &mut DbConn,
    log_key: &str,
    required: &Required,
    dry_run: bool,
) -> Result<Recovered, RecoverError> {
    for (conn, which) in [(&mut *target, "database"), (&mut *source, "source")] {
        if !super::conn::migrations_current(conn)? {
            return Err(refused(format!(
                "the {which}'s schema is not this version's: run `gpuledger init` on it first"
            )));
        }
    }
    let (t_info, s_info) = (log_info(target)?, log_info(source)?);
    if t_info.public_key != log_key || s_info.public_key != log_key {
        return Err(refused(format!(
            "both databases must be this log's (log key {log_key}): the database records {}, \
             the source {}",
            t_info.public_key, s_info.public_key
        )));
    }
    if t_info.origin != s_info.origin {
        return Err(refused(format!(
            "the database is the log {:?}, the source {:?}",
            t_info.origin, s_info.origin
        )));
    }
    let (n, _) = read::head(target)?;
    let (m, _) = read::head(source)?;
    let published = required.size;
    if m < published {
        return Err(refused(format!(
            "the source holds {m} entries, fewer than the published checkpoint's {published} \
             ({}): it cannot restore it; look for another copy (ops/runbooks/log-rewound.md)",
            required.source
        )));
    }
    let source_root = root_at(source, published)?;
    if source_root != required.root {
        return Err(refused(format!(
            "the source's root at size {published} is {}, not the published {} ({}): it is \
             another history",
            b64(&source_root),
            b64(&required.root),
            required.source
        )));
    }
    let common = n.min(m);
    if common > 0 && root_at(target, common)? != root_at(source, common)? {
        return Err(refused(format!(
            "the database's first {common} entries are not the source's (another root at size \
             {common}): the histories part before that, and restoring would drop entries; \
             nothing was written"
        )));
    }
    committed_unless(target, dry_run, |conn| {
        restore(conn, source, log_key, required, n, m)
    })
}

/// Runs `restore` in one transaction of `target`: committed, or on `dry_run` rolled back after
/// everything was done and checked, with the report marked `dry_run`.
fn committed_unless(
    target: &mut DbConn,
    dry_run: bool,
    restore: impl FnOnce(&mut DbConn) -> Result<Recovered, RecoverError>,
) -> Result<Recovered, RecoverError> {
    let result = target.transaction::<_, DryRunOr, _>(|conn| {
        let report = restore(conn)?;
        if dry_run {
            return Err(DryRunOr::DryRun(Box::new(report)));
        }
        Ok(report)
    });
    match result {
        Ok(r) => Ok(r),
        Err(DryRunOr::DryRun(r)) => Ok(Recovered {
            dry_run: true,
            ..*r
        }),
        Err(DryRunOr::Err(e)) => Err(e),
    }
}

/// The recovery transaction's error: a dry run's report (returned as an error so that the
/// transaction rolls back) or a real failure.
enum DryRunOr {
    DryRun(Box<Recovered>),
    Err(RecoverError),
}

impl From<diesel::result::Error> for RecoverError {
    fn from(e: diesel::result::Error) -> Self {
        RecoverError::Store(e.into())
    }
}

impl From<diesel::result::Error> for DryRunOr {
    fn from(e: diesel::result::Error) -> Self {
        DryRunOr::Err(StoreError::from(e).into())
    }
}

impl From<RecoverError> for DryRunOr {
    fn from(e: RecoverError) -> Self {
        DryRunOr::Err(e)
    }
}

/// Inside the target's transaction: locks the head, copies the entries and what derives from
/// them, then verifies the result.
fn restore(
    conn: &mut DbConn,
    source: &mut DbConn,
    log_key: &str,
    required: &Required,
    n: u64,
    m: u64,
) -> Result<Recovered, RecoverError> {
    let app = write::Appender::lock(conn, Timestamp::now())?;
    if app.next_index() != n {
        return Err(refused(
            "the database grew while recovery was checking it: is a server writing to it? \
             Stop it (or check that it says log_rewound) and run recover again",
        ));
    }
    let mut r = Recovered {
        from_size: n,
        published_size: required.size,
        ..Recovered::default()
    };
    let mut size = n;
    while size < m {
        let end = (size + PAGE).min(m);
        let rows = read::entries_range(source, size, end)?;
        if rows.len() as u64 != end - size
            || rows.iter().zip(size..).any(|(row, i)| row.idx as u64 != i)
        {
            return Err(refused(format!(
                "the source is missing entries between {size} and {end}"
            )));
        }
        // The leaf hashes from the leaves themselves; verify-log below checks every column.
        let hashes: Vec<Hash> = rows.iter().map(|r| merkle::leaf_hash(&r.leaf)).collect();
        let rows: Vec<NewEntry> = rows.into_iter().map(NewEntry::from).collect();
        write::store_entries(conn, size, &rows, &hashes)?;
        size = end;
    }
    r.entries = m.saturating_sub(n);
    r.to_size = n.max(m);
    copy_derived(conn, source, n, &mut r)?;
    copy_accounts(conn, source, n, &mut r)?;
    r.root = verified(
        conn,
        log_key,
        &[(required.size, required.root, "the published")],
    )?;
    Ok(r)
}

/// The last check before a recovery commits: `verify-log`'s run over the whole database (in
/// the recovery's transaction) and the roots it must have at `roots`' sizes; the report's
/// root.
fn verified(
    conn: &mut DbConn,
    log_key: &str,
    roots: &[(u64, Hash, &str)],
) -> Result<String, RecoverError> {
    let report = match verify::verify_snapshot(conn, Some(log_key), &mut |_, _| {}) {
        Ok(report) => report,
        Err(verify::VerifyError::Bad(f)) => return Err(RecoverError::Verify(f)),
        Err(verify::VerifyError::Log(m)) => return Err(refused(m)),
        Err(verify::VerifyError::Store(e)) => return Err(e.into()),
    };
    for (size, root, whose) in roots {
        let ours = root_at(conn, *size)?;
        if ours != *root {
            return Err(refused(format!(
                "after recovery the root at size {size} is {}, not {whose} {}: the database and \
                 the source are not one history; nothing was written",
                b64(&ours),
                b64(root)
            )));
        }
    }
    Ok(report.root)
}

#[derive(Queryable, Insertable)]
#[diesel(table_name = invoices)]
struct InvoiceRow {
    number: String,
    tenant: String,
    currency: String,
    period_from: i64,
    period_to: i64,
    checkpoint_size: i64,
    entry_idx: i64,
    json: String,
}

#[derive(Queryable, Insertable)]
#[diesel(table_name = certificates)]
struct CertificateRow {
    id: String,
    tenant: String,
    period_from: i64,
    period_to: i64,
    checkpoint_size: i64,
    entry_idx: i64,
    json: String,
}

#[derive(Queryable, Insertable)]
#[diesel(table_name = checkpoints)]
struct CheckpointRow {
    size: i64,
    root: Vec<u8>,
    note: String,
    created_at: i64,
}

#[derive(Queryable, Insertable)]
#[diesel(table_name = cosignatures)]
struct CosignatureRow {
    size: i64,
    witness: String,
    line: String,
    cosigned_at: i64,
    created_at: i64,
}

#[derive(Queryable, Insertable)]
#[diesel(table_name = signer_keys)]
struct SignerKeyRow {
    key_id: String,
    signer_id: String,
    public_key: Vec<u8>,
    registered_idx: i64,
    revoked_idx: Option<i64>,
}

#[derive(Queryable)]
struct ConflictRow {
    _id: i64,
    signer: String,
    seq: i64,
    existing_idx: i64,
    received_at: i64,
    envelope: String,
}

/// The key registry, the signers' seqs, invoices, certificates, checkpoints, cosignatures,
/// witness state and conflict evidence that `source` holds for the entries from `n` on.
fn copy_derived(
    conn: &mut DbConn,
    source: &mut DbConn,
    n: u64,
    r: &mut Recovered,
) -> Result<(), RecoverError> {
    let n = n as i64;
    copy_signers(conn, source, r)?;
    copy_keys(conn, source, n, r)?;
    copy_documents(conn, source, n, r)?;
    copy_checkpoints(conn, source, r)?;
    copy_cosignatures(conn, source, r)?;
    copy_witness_state(conn, source)?;
    copy_conflicts(conn, source, r)
}

/// The signers the source knows: new ones, and seqs that moved on.
fn copy_signers(
    conn: &mut DbConn,
    source: &mut DbConn,
    r: &mut Recovered,
) -> Result<(), RecoverError> {
    // Signers: new ones, and seqs that moved on (a seq never goes back).
    let theirs: Vec<(String, String, i64)> = signers::table
        .select((signers::id, signers::role, signers::last_seq))
        .load(source)?;
    for (id, role, last_seq) in theirs {
        let ours: Option<(String, i64)> = signers::table
            .find(&id)
            .select((signers::role, signers::last_seq))
            .first(conn)
            .optional()?;
        match ours {
            None => {
                diesel::insert_into(signers::table)
                    .values((
                        signers::id.eq(&id),
                        signers::role.eq(&role),
                        signers::last_seq.eq(last_seq),
                    ))
                    .execute(conn)?;
                r.signers += 1;
            }
            Some((our_role, _)) if our_role != role => {
                return Err(refused(format!(
                    "signer {id} has role {our_role} in the database, {role} in the source"
                )))
            }
            Some((_, ours)) if ours < last_seq => {
                diesel::update(signers::table.find(&id))
                    .set(signers::last_seq.eq(last_seq))
                    .execute(conn)?;
                r.signers += 1;
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Keys registered or revoked by the restored entries (from index `n`).
fn copy_keys(
    conn: &mut DbConn,
    source: &mut DbConn,
    n: i64,
    r: &mut Recovered,
) -> Result<(), RecoverError> {
    // Keys registered or revoked by the restored entries.
    let keys: Vec<SignerKeyRow> = signer_keys::table
        .filter(
            signer_keys::registered_idx
                .ge(n)
                .or(signer_keys::revoked_idx.ge(n)),
        )
        .load(source)?;
    for k in keys {
        if k.registered_idx >= n {
            diesel::insert_into(signer_keys::table)
                .values(&k)
                .execute(conn)?;
            r.keys_registered += 1;
        }
        if let Some(at) = k.revoked_idx.filter(|at| *at >= n) {
            diesel::update(signer_keys::table.find(&k.key_id))
                .set(signer_keys::revoked_idx.eq(Some(at)))
                .execute(conn)?;
            r.keys_revoked += 1;
        }
    }
    Ok(())
}

/// Invoices and certificates issued by the restored entries (from index `n`).
fn copy_documents(
    conn: &mut DbConn,
    source: &mut DbConn,
    n: i64,
    r: &mut Recovered,
) -> Result<(), RecoverError> {
    // Documents issued by the restored entries.
    let invs: Vec<InvoiceRow> = invoices::table
        .filter(invoices::entry_idx.ge(n))
        .load(source)?;
    r.invoices = invs.len() as u64;
    for row in &invs {
        diesel::insert_into(invoices::table)
            .values(row)
            .execute(conn)?;
    }
    let certs: Vec<CertificateRow> = certificates::table
        .filter(certificates::entry_idx.ge(n))
        .load(source)?;
    r.certificates = certs.len() as u64;
    for row in &certs {
        diesel::insert_into(certificates::table)
            .values(row)
            .execute(conn)?;
    }
    Ok(())
}

/// Checkpoints the target lacks.
fn copy_checkpoints(
    conn: &mut DbConn,
    source: &mut DbConn,
    r: &mut Recovered,
) -> Result<(), RecoverError> {
    // Checkpoints the target lacks (verify-log below checks each against the tree and key).
    let ours_latest: i64 = read::latest_checkpoint(conn)?.map_or(-1, |(s, _, _)| s as i64);
    let cps: Vec<CheckpointRow> = checkpoints::table
        .filter(checkpoints::size.gt(ours_latest))
        .order(checkpoints::size.asc())
        .load(source)?;
    r.checkpoints = cps.len() as u64;
    for cp in &cps {
        diesel::insert_into(checkpoints::table)
            .values(cp)
            .execute(conn)?;
    }
    Ok(())
}

/// Witness cosignatures the target lacks.
fn copy_cosignatures(
    conn: &mut DbConn,
    source: &mut DbConn,
    r: &mut Recovered,
) -> Result<(), RecoverError> {
    let have: HashSet<(i64, String)> = cosignatures::table
        .select((cosignatures::size, cosignatures::witness))
        .load::<(i64, String)>(conn)?
        .into_iter()
        .collect();
    let cosigs: Vec<CosignatureRow> = cosignatures::table.load(source)?;
    for c in cosigs
        .iter()
        .filter(|c| !have.contains(&(c.size, c.witness.clone())))
    {
        diesel::insert_into(cosignatures::table)
            .values(c)
            .execute(conn)?;
        r.cosignatures += 1;
    }
    Ok(())
}

/// Each witness's cosigned size, where the source's is further.
fn copy_witness_state(conn: &mut DbConn, source: &mut DbConn) -> Result<(), RecoverError> {
    let states: Vec<(String, i64, i64)> = witness_state::table
        .select((
            witness_state::witness,
            witness_state::cosigned_size,
            witness_state::updated_at,
        ))
        .load(source)?;
    for (witness, size, at) in states {
        let ours: Option<i64> = witness_state::table
            .find(&witness)
            .select(witness_state::cosigned_size)
            .first(conn)
            .optional()?;
        match ours {
            None => {
                diesel::insert_into(witness_state::table)
                    .values((
                        witness_state::witness.eq(&witness),
                        witness_state::cosigned_size.eq(size),
                        witness_state::updated_at.eq(at),
                    ))
                    .execute(conn)?;
            }
            Some(s) if s < size => {
                diesel::update(witness_state::table.find(&witness))
                    .set((
                        witness_state::cosigned_size.eq(size),
                        witness_state::updated_at.eq(at),
                    ))
                    .execute(conn)?;
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Conflict evidence received since the target's latest.
fn copy_conflicts(
    conn: &mut DbConn,
    source: &mut DbConn,
    r: &mut Recovered,
) -> Result<(), RecoverError> {
    // Conflict evidence received since the target's latest: kept once, with new row ids (ids
    // are not comparable between the two databases; the evidence itself is).
    let since: i64 = conflicts::table
        .select(diesel::dsl::max(conflicts::received_at))
        .first::<Option<i64>>(conn)?
        .unwrap_or(i64::MIN);
    let seen: HashSet<(String, i64, String, i64)> = conflicts::table
        .filter(conflicts::received_at.ge(since))
        .select((
            conflicts::signer,
            conflicts::seq,
            conflicts::envelope,
            conflicts::received_at,
        ))
        .load::<(String, i64, String, i64)>(conn)?
        .into_iter()
        .collect();
    let theirs: Vec<ConflictRow> = conflicts::table
        .filter(conflicts::received_at.ge(since))
        .order(conflicts::id.asc())
        .load(source)?;
    for c in theirs {
        if seen.contains(&(c.signer.clone(), c.seq, c.envelope.clone(), c.received_at)) {
            continue;
        }
        let row = NewConflict {
            signer: c.signer,
            seq: c.seq,
            existing_idx: c.existing_idx,
            received_at: c.received_at,
            envelope: c.envelope,
        };
        diesel::insert_into(conflicts::table)
            .values(&row)
            .execute(conn)?;
        r.conflicts += 1;
    }
    Ok(())
}

#[derive(Queryable, Insertable)]
#[diesel(table_name = tenants)]
struct TenantRow {
    id: String,
    name: String,
    created_at: i64,
    billing_address: Option<String>,
    low_balance: Option<String>,
    usage_alerts: Option<String>,
}

#[derive(Queryable, Insertable)]
#[diesel(table_name = api_tokens)]
struct TokenRow {
    id: String,
    token_hash: Vec<u8>,
    role: String,
    tenant: Option<String>,
    label: String,
    created_at: i64,
    revoked_at: Option<i64>,
    expires_at: Option<i64>,
}

#[derive(Queryable, Insertable)]
#[diesel(table_name = webhook_endpoints)]
struct EndpointRow {
    id: String,
    url: String,
    tenant: Option<String>,
    event_types: String,
    signing: String,
    secret: Option<String>,
    description: String,
    enabled: bool,
    disabled_reason: Option<String>,
    created_at: i64,
    updated_at: i64,
}

#[derive(Queryable, Insertable)]
#[diesel(table_name = webhook_events)]
struct EventRow {
    id: String,
    event_type: String,
    tenant: Option<String>,
    log_index: Option<i64>,
    dedupe: String,
    payload: String,
    created_at: i64,
}

#[derive(Queryable, Insertable)]
#[diesel(table_name = webhook_deliveries)]
struct DeliveryRow {
    id: String,
    event_id: String,
    endpoint_id: String,
    state: String,
    attempts: i64,
    schedule_step: i64,
    next_attempt_at: i64,
    lease_owner: Option<String>,
    lease_until: Option<i64>,
    last_status: Option<i64>,
    last_error: Option<String>,
    created_at: i64,
    updated_at: i64,
}

#[derive(Queryable, Insertable)]
#[diesel(table_name = webhook_attempts)]
struct AttemptRow {
    delivery_id: String,
    attempt: i64,
    started_at: i64,
    duration_ms: i64,
    status: Option<i64>,
    error: Option<String>,
}

/// Inserts the rows of `theirs` whose id `ours` lacks; returns how many.
macro_rules! copy_missing {
    ($conn:expr, $table:ident, $theirs:expr) => {{
        let ours: HashSet<String> = $table::table
            .select($table::id)
            .load::<String>($conn)?
            .into_iter()
            .collect();
        let mut added = 0u64;
        for row in $theirs.iter().filter(|row| !ours.contains(&row.id)) {
            diesel::insert_into($table::table)
                .values(row)
                .execute($conn)?;
            added += 1;
        }
        added
    }};
}

/// Account rows (not on the log) that the source holds and the target lacks, the source's
/// token revocations, and the webhook events of the restored entries with their deliveries.
fn copy_accounts(
    conn: &mut DbConn,
    source: &mut DbConn,
    n: u64,
    r: &mut Recovered,
) -> Result<(), RecoverError> {
    let tenants: Vec<TenantRow> = tenants::table.load(source)?;
    r.tenants = copy_missing!(conn, tenants, tenants);
    let tokens: Vec<TokenRow> = api_tokens::table.load(source)?;
    r.tokens = copy_missing!(conn, api_tokens, tokens);
    // A revocation is never undone by a failover.
    for t in tokens.iter().filter(|t| t.revoked_at.is_some()) {
        r.tokens_revoked += diesel::update(api_tokens::table.find(&t.id))
            .filter(api_tokens::revoked_at.is_null())
            .set(api_tokens::revoked_at.eq(t.revoked_at))
            .execute(conn)? as u64;
    }
    let endpoints: Vec<EndpointRow> = webhook_endpoints::table.load(source)?;
    r.webhook_endpoints = copy_missing!(conn, webhook_endpoints, endpoints);
    let events: Vec<EventRow> = webhook_events::table
        .filter(webhook_events::log_index.ge(n as i64))
        .load(source)?;
    r.webhook_events = copy_missing!(conn, webhook_events, events);
    let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
    for part in ids.chunks(500) {
        let deliveries: Vec<DeliveryRow> = webhook_deliveries::table
            .filter(webhook_deliveries::event_id.eq_any(part))
            .load(source)?;
        let added = copy_missing!(conn, webhook_deliveries, deliveries);
        r.webhook_deliveries += added;
        let dids: Vec<&str> = deliveries.iter().map(|d| d.id.as_str()).collect();
        let attempts: Vec<AttemptRow> = webhook_attempts::table
            .filter(webhook_attempts::delivery_id.eq_any(&dids))
            .load(source)?;
        let have: HashSet<(String, i64)> = webhook_attempts::table
            .filter(webhook_attempts::delivery_id.eq_any(&dids))
            .select((webhook_attempts::delivery_id, webhook_attempts::attempt))
            .load::<(String, i64)>(conn)?
            .into_iter()
            .collect();
        for a in attempts
            .iter()
            .filter(|a| !have.contains(&(a.delivery_id.clone(), a.attempt)))
        {
            diesel::insert_into(webhook_attempts::table)
                .values(a)
                .execute(conn)?;
        }
    }
    Ok(())
}

/// What kind of issued document a copy holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocumentKind {
    /// An invoice, by number.
    Invoice,
    /// A certificate, by id.
    Certificate,
}

/// A copy of the log kept outside any database: the mirror directory `serve` writes
/// (`server::mirror`). Errors are messages for the operator.
pub trait EntrySource {
    /// The signed checkpoint note whose every entry the copy holds.
    fn checkpoint(&self) -> Result<String, String>;
    /// The leaf bytes of entries `start..end`, in order.
    fn leaves(&self, start: u64, end: u64) -> Result<Vec<Vec<u8>>, String>;
    /// An issued document by its number or id, if the copy holds it.
    fn document(&self, kind: DocumentKind, name: &str) -> Result<Option<String>, String>;
}

/// Restores into `target` the entries a copy outside the database holds beyond it, as
/// [`recover`] does from a database: the copy's checkpoint must be signed by the log key and
/// reach the published checkpoint, the entries are written through the one append path, and
/// `verify-log`'s run and both roots (the published one, the copy's) are checked before the
/// commit. What derives from the entries is derived from them: the key registry, the signers'
/// sequence numbers, invoices and certificates (their documents from the copy, each checked
/// against the SHA-256 its entry holds), the copy's checkpoint, and the webhook events of the
/// restored entries. Account rows and conflict evidence are not in such a copy.
pub fn recover_from_copy(
    target: &mut DbConn,
    copy: &dyn EntrySource,
    log_key: &str,
    required: &Required,
    dry_run: bool,
) -> Result<Recovered, RecoverError> {
    if !super::conn::migrations_current(target)? {
        return Err(refused(
            "the database's schema is not this version's: run `gpuledger init` on it first",
        ));
    }
    let info = log_info(target)?;
    if info.public_key != log_key {
        return Err(refused(format!(
            "the database records log key {}, not {log_key}",
            info.public_key
        )));
    }
    let note = copy.checkpoint().map_err(refused)?;
    let cp = gpuledger_core::checkpoint::verify_checkpoint(note.as_bytes(), &info.verifier_key)
        .map_err(|e| refused(format!("the copy's checkpoint: {e}")))?;
    let (m, copy_root) = (cp.size(), *cp.hash());
    if m < required.size {
        return Err(refused(format!(
            "the copy holds {m} entries, fewer than the published checkpoint's {} ({}): it \
             cannot restore it",
            required.size, required.source
        )));
    }
    if m == required.size && copy_root != required.root {
        return Err(refused(format!(
            "the copy's root at size {m} is {}, not the published {}: it is another history",
            b64(&copy_root),
            b64(&required.root)
        )));
    }
    let (n, _) = read::head(target)?;
    let copied = CopyCheckpoint {
        size: m,
        root: copy_root,
        note,
    };
    committed_unless(target, dry_run, |conn| {
        restore_copy(conn, copy, &info.origin, log_key, required, n, &copied)
    })
}

/// The copy's own checkpoint: its tree must be what the restored entries make.
struct CopyCheckpoint {
    size: u64,
    root: Hash,
    note: String,
}

/// Inside the target's transaction: the entries `n..` of the copy and what derives from them.
fn restore_copy(
    conn: &mut DbConn,
    copy: &dyn EntrySource,
    origin: &str,
    log_key: &str,
    required: &Required,
    n: u64,
    cp: &CopyCheckpoint,
) -> Result<Recovered, RecoverError> {
    let app = write::Appender::lock(conn, Timestamp::now())?;
    if app.next_index() != n {
        return Err(refused(
            "the database grew while recovery was checking it: is a server writing to it?",
        ));
    }
    let mut r = Recovered {
        from_size: n,
        to_size: n.max(cp.size),
        published_size: required.size,
        entries: cp.size.saturating_sub(n),
        ..Recovered::default()
    };
    let mut last_seq: std::collections::HashMap<String, u64> = Default::default();
    let events_before: i64 = webhook_events::table.count().get_result(conn)?;
    let mut size = n;
    while size < cp.size {
        let end = (size + PAGE).min(cp.size);
        restore_page(conn, copy, origin, size..end, &mut last_seq, &mut r)?;
        size = end;
    }
    let events_after: i64 = webhook_events::table.count().get_result(conn)?;
    r.webhook_events = (events_after - events_before) as u64;
    raise_last_seqs(conn, last_seq)?;
    if read::latest_checkpoint(conn)?.is_none_or(|(s, _, _)| s < cp.size) {
        store_checkpoint(conn, cp)?;
        r.checkpoints = 1;
    }
    r.root = verified(
        conn,
        log_key,
        &[
            (required.size, required.root, "the published"),
            (cp.size, cp.root, "the copy's checkpoint's"),
        ],
    )?;
    Ok(r)
}

/// Restores the copy's entries `range` (at the end of the database's log, whose head the caller
/// holds): each leaf checked as a log entry, stored with its tree hashes, and the rows and
/// webhook event it implies derived; each signer's highest seq noted in `last_seq`.
fn restore_page(
    conn: &mut DbConn,
    copy: &dyn EntrySource,
    origin: &str,
    range: std::ops::Range<u64>,
    last_seq: &mut std::collections::HashMap<String, u64>,
    r: &mut Recovered,
) -> Result<(), RecoverError> {
    use gpuledger_core::leaf::Leaf;
    let (size, end) = (range.start, range.end);
    let leaves = copy.leaves(size, end).map_err(refused)?;
    if leaves.len() as u64 != end - size {
        return Err(refused(format!(
            "the copy holds {} of the entries {size}..{end}",
            leaves.len()
        )));
    }
    let mut rows = Vec::with_capacity(leaves.len());
    let mut hashes = Vec::with_capacity(leaves.len());
    let mut records = Vec::with_capacity(leaves.len());
    for (index, bytes) in (size..).zip(leaves) {
        let bad = |m: String| refused(format!("entry {index} in the copy: {m}"));
        let leaf = Leaf::from_bytes(&bytes).map_err(bad)?;
        if leaf.index != index {
            return Err(bad(format!("its leaf says index {}", leaf.index)));
        }
        let checked = leaf
            .envelope
            .check(origin)
            .map_err(|e| bad(e.to_string()))?;
        let hash = merkle::leaf_hash(&bytes);
        rows.push(NewEntry::derive(
            index,
            leaf.received_at,
            &checked,
            bytes,
            &hash,
        ));
        hashes.push(hash);
        let seq = last_seq.entry(checked.envelope.signer.clone()).or_default();
        *seq = (*seq).max(checked.envelope.seq);
        records.push((index, leaf.received_at, checked.body));
    }
    write::store_entries(conn, size, &rows, &hashes)?;
    for (index, at, body) in &records {
        derive_from_body(conn, copy, *index, *at, body, r)?;
    }
    Ok(())
}

/// Raises each signer's last seq to the highest one restored (never lowers it).
fn raise_last_seqs(
    conn: &mut DbConn,
    last_seq: std::collections::HashMap<String, u64>,
) -> Result<(), RecoverError> {
    for (signer, seq) in last_seq {
        diesel::update(signers::table.find(&signer))
            .filter(signers::last_seq.lt(seq as i64))
            .set(signers::last_seq.eq(seq as i64))
            .execute(conn)?;
    }
    Ok(())
}

/// Stores the copy's checkpoint (verified against the log key and the entries afterwards).
fn store_checkpoint(conn: &mut DbConn, cp: &CopyCheckpoint) -> Result<(), RecoverError> {
    diesel::insert_into(checkpoints::table)
        .values((
            checkpoints::size.eq(cp.size as i64),
            checkpoints::root.eq(cp.root.0.to_vec()),
            checkpoints::note.eq(&cp.note),
            checkpoints::created_at.eq(Timestamp::now().unix()),
        ))
        .execute(conn)?;
    Ok(())
}

/// The copy's document `name` of `kind`, which entry `index` issued with SHA-256 `sha256`;
/// refused if the copy lacks it or holds other bytes.
fn copied_document(
    copy: &dyn EntrySource,
    kind: DocumentKind,
    name: &str,
    sha256: &str,
    index: u64,
) -> Result<String, RecoverError> {
    use sha2::{Digest, Sha256};
    let doc = copy.document(kind, name).map_err(refused)?.ok_or_else(|| {
        refused(format!(
            "the copy lacks the document of {name} (entry {index})"
        ))
    })?;
    if hex::encode(Sha256::digest(doc.as_bytes())) != sha256 {
        return Err(refused(format!(
            "the copy's document of {name} is not the one entry {index} issued (SHA-256)"
        )));
    }
    Ok(doc)
}

/// The signer (if new) and key rows of a restored `signer_key_registered` entry.
fn restore_key(
    conn: &mut DbConn,
    k: &gpuledger_core::record::SignerKeyRegistered,
    index: u64,
    r: &mut Recovered,
) -> Result<(), RecoverError> {
    let key = gpuledger_core::keys::decode_public(&k.public_key)
        .map_err(|e| refused(format!("entry {index}: {e}")))?;
    let known: Option<String> = signers::table
        .find(&k.signer)
        .select(signers::id)
        .first(conn)
        .optional()?;
    if known.is_none() {
        diesel::insert_into(signers::table)
            .values((
                signers::id.eq(&k.signer),
                signers::role.eq(k.role.as_str()),
                signers::last_seq.eq(0i64),
            ))
            .execute(conn)?;
        r.signers += 1;
    }
    diesel::insert_into(signer_keys::table)
        .values((
            signer_keys::key_id.eq(&k.key_id),
            signer_keys::signer_id.eq(&k.signer),
            signer_keys::public_key.eq(key.as_bytes().to_vec()),
            signer_keys::registered_idx.eq(index as i64),
        ))
        .execute(conn)?;
    r.keys_registered += 1;
    Ok(())
}

/// The rows an entry restored from a copy implies (what `write` stores beside the entry when
/// it is appended), and its webhook event.
fn derive_from_body(
    conn: &mut DbConn,
    copy: &dyn EntrySource,
    index: u64,
    at: Timestamp,
    body: &gpuledger_core::record::Body,
    r: &mut Recovered,
) -> Result<(), RecoverError> {
    use gpuledger_core::record::Body;
    let document =
        |kind, name: &str, sha256: &str| copied_document(copy, kind, name, sha256, index);
    match body {
        Body::SignerKeyRegistered(k) => restore_key(conn, k, index, r)?,
        Body::SignerKeyRevoked(k) => {
            diesel::update(signer_keys::table.find(&k.key_id))
                .set(signer_keys::revoked_idx.eq(Some(index as i64)))
                .execute(conn)?;
            r.keys_revoked += 1;
        }
        Body::InvoiceIssued(b) => {
            let json = document(DocumentKind::Invoice, &b.number, &b.invoice_sha256)?;
            diesel::insert_into(invoices::table)
                .values(&InvoiceRow {
                    number: b.number.clone(),
                    tenant: b.tenant.clone(),
                    currency: b.currency.clone(),
                    period_from: b.period_from.unix(),
                    period_to: b.period_to.unix(),
                    checkpoint_size: b.checkpoint_size as i64,
                    entry_idx: index as i64,
                    json,
                })
                .execute(conn)?;
            r.invoices += 1;
        }
        Body::CertificateIssued(b) => {
            let json = document(DocumentKind::Certificate, &b.id, &b.certificate_sha256)?;
            diesel::insert_into(certificates::table)
                .values(&CertificateRow {
                    id: b.id.clone(),
                    tenant: b.tenant.clone(),
                    period_from: b.period_from.unix(),
                    period_to: b.period_to.unix(),
                    checkpoint_size: b.checkpoint_size as i64,
                    entry_idx: index as i64,
                    json,
                })
                .execute(conn)?;
            r.certificates += 1;
        }
        _ => {}
    }
    super::webhooks::enqueue_entry(conn, index, body, at)?;
    Ok(())
}
