//! Write transactions. Every write transaction starts by locking the log head row, so writers
//! in any number of processes are serialised and the log stays one linear sequence. Nothing
//! here returns an outcome before the transaction commits.

use super::conn::{per_backend, DbConn};
use super::error::StoreError;
use super::read;
use super::schema::*;
use diesel::prelude::*;
use gpuledger_core::admission;
use gpuledger_core::checkpoint::LogSigner;
use gpuledger_core::dispute::{check_exclusion, IssuedInvoice, NamedRecord};
use gpuledger_core::envelope::{Checked, Envelope};
use gpuledger_core::ids::LEDGER_SIGNER;
use gpuledger_core::keys;
use gpuledger_core::leaf::leaf_bytes;
use gpuledger_core::merkle::{self, Hash, MemoryHashes};
use gpuledger_core::outcome::{Outcome, SeqGap};
use gpuledger_core::record::{Body, KeyScope, Kind, Role, SignerKeyRegistered, SignerKeyRevoked};
use gpuledger_core::rejection::{Reason, Rejection};
use gpuledger_core::time::Timestamp;
use std::collections::HashMap;

/// Rows per multi-row INSERT (keeps bound parameters well under both backends' limits).
const INSERT_CHUNK: usize = 1_000;

/// An `entries` row to insert (what [`read::EntryRow`] reads back).
#[derive(Insertable)]
#[diesel(table_name = entries, treat_none_as_default_value = false)]
pub(crate) struct NewEntry {
    idx: i64,
    kind: String,
    signer: String,
    seq: i64,
    tenant: Option<String>,
    received_at: i64,
    content_hash: Vec<u8>,
    leaf: Vec<u8>,
    leaf_hash: Vec<u8>,
    stream: Option<String>,
    start_at: Option<i64>,
    end_at: Option<i64>,
    /// The record's rollup bucket and quantity, when the body was at hand (an append); a row
    /// copied by `recover` has none, and its leaf is parsed for it.
    #[diesel(skip_insertion)]
    rollup: Option<(
        gpuledger_core::usage::RollupKey,
        gpuledger_core::usage::Rollup,
    )>,
}

impl NewEntry {
    /// The row of entry `index` (leaf bytes `leaf`, leaf hash `hash`) holding the record `c`
    /// received at `received_at`: every column but the leaf derives from the record.
    pub(crate) fn derive(
        index: u64,
        received_at: Timestamp,
        c: &Checked,
        leaf: Vec<u8>,
        hash: &Hash,
    ) -> NewEntry {
        let (stream, start_at, end_at) = match &c.stream {
            Some((s, a, b)) => (Some(s.clone()), Some(a.unix()), Some(b.unix())),
            None => (None, None, None),
        };
        NewEntry {
            stream,
            start_at,
            end_at,
            idx: index as i64,
            kind: c.envelope.kind.clone(),
            signer: c.envelope.signer.clone(),
            seq: c.envelope.seq as i64,
            tenant: c.body.tenant().map(str::to_owned),
            received_at: received_at.unix(),
            content_hash: c.content_hash.to_vec(),
            leaf,
            leaf_hash: hash.0.to_vec(),
            rollup: gpuledger_core::usage::rollup_of(&c.body),
        }
    }
}

impl From<read::EntryRow> for NewEntry {
    fn from(r: read::EntryRow) -> NewEntry {
        NewEntry {
            idx: r.idx,
            kind: r.kind,
            signer: r.signer,
            seq: r.seq,
            tenant: r.tenant,
            received_at: r.received_at,
            content_hash: r.content_hash,
            leaf: r.leaf,
            leaf_hash: r.leaf_hash,
            stream: r.stream,
            start_at: r.start_at,
            end_at: r.end_at,
            rollup: None,
        }
    }
}

#[derive(Insertable)]
#[diesel(table_name = tree_hashes)]
struct NewTreeHash {
    id: i64,
    hash: Vec<u8>,
}

/// A `conflicts` row to insert (its id is the database's).
#[derive(Insertable, Clone)]
#[diesel(table_name = conflicts)]
pub(crate) struct NewConflict {
    pub signer: String,
    pub seq: i64,
    pub existing_idx: i64,
    pub received_at: i64,
    pub envelope: String,
}

/// Most OR terms in one query: SQLite refuses an expression tree deeper than 1,000.
const MAX_OR_TERMS: usize = 300;

/// Most conflicting records kept as evidence per (signer, seq). Past it (or past
/// [`MAX_CONFLICTS_PER_SIGNER_HOUR`]) a conflicting record is refused all the same, but only
/// counted (`gpuledger_conflicts_dropped_total`), and raises no event: a key that re-signs one
/// seq 50,000 times stores 10 rows, not 50,000.
pub const MAX_CONFLICTS_PER_SEQ: i64 = 10;

/// Most conflicting records kept as evidence per signer in any hour (by receive time).
pub const MAX_CONFLICTS_PER_SIGNER_HOUR: i64 = 100;

/// An open write transaction's view of the log: the head it locked and what it appends.
pub(crate) struct Appender {
    size: u64,
    head: Hash,
    /// When the entries are received: the transaction's clock reading, never behind the log's
    /// last entry (`stamp`).
    pub(crate) received_at: Timestamp,
    rows: Vec<NewEntry>,
    leaf_hashes: Vec<Hash>,
}

/// The time a transaction stamps its entries with, under the head lock
/// (`core::clock::stamp`): never behind the log's last `received_at`, which another process
/// may have written while this one waited for the lock. A reading further behind than
/// `core::clock::MAX_WRITER_LAG_SECONDS` is `ClockUnreliable`, except in builds with the
/// `test-clock` feature, whose tests set the ledger's clock back on purpose to write logs that
/// verifiers must refuse.
fn stamp(conn: &mut DbConn, reading: Timestamp) -> Result<Timestamp, StoreError> {
    let last = read::last_received_at(conn)?;
    match gpuledger_core::clock::stamp(reading, last) {
        Ok(t) => Ok(t),
        Err(_) if cfg!(feature = "test-clock") => Ok(reading),
        Err(e) => Err(StoreError::ClockUnreliable(e.to_string())),
    }
}

impl Appender {
    /// Locks the head row (first statement of the transaction) and reads it.
    pub(crate) fn lock(conn: &mut DbConn, received_at: Timestamp) -> Result<Appender, StoreError> {
        let n = diesel::update(log_head::table.find(1i64))
            .set(log_head::size.eq(log_head::size))
            .execute(conn)?;
        if n != 1 {
            return Err(StoreError::NotInitialised);
        }
        let (size, head) = read::head(conn)?;
        let received_at = stamp(conn, received_at)?;
        Ok(Appender {
            size,
            head,
            received_at,
            rows: Vec::new(),
            leaf_hashes: Vec::new(),
        })
    }

    /// The index the next appended entry gets.
    pub(crate) fn next_index(&self) -> u64 {
        self.size + self.rows.len() as u64
    }

    /// Appends a record whose checks have all passed; returns its index.
    pub(crate) fn push(&mut self, c: &Checked) -> u64 {
        let index = self.next_index();
        let prev = self.leaf_hashes.last().copied().unwrap_or(self.head);
        let leaf = leaf_bytes(
            index,
            self.received_at,
            &merkle::encode_hash(&prev),
            &c.canonical,
        );
        let h = merkle::leaf_hash(&leaf);
        self.rows
            .push(NewEntry::derive(index, self.received_at, c, leaf, &h));
        self.leaf_hashes.push(h);
        // The entry is the head's next index, and the head moves by exactly one.
        debug_assert_eq!(self.next_index(), index + 1);
        debug_assert_eq!(self.rows.len(), self.leaf_hashes.len());
        index
    }

    /// Writes the entries, their tree hashes and the new head.
    pub(crate) fn finish(self, conn: &mut DbConn) -> Result<(), StoreError> {
        store_entries(conn, self.size, &self.rows, &self.leaf_hashes)
    }
}

/// Writes `rows` (whose leaf hashes are `leaf_hashes`, in order) at the end of a log of `size`
/// entries whose head the caller has locked: the entries, the tree hashes they complete
/// (computed here from the leaf hashes), the new head and the usage rollups. The one place
/// entries are stored, for appends and for `gpuledger recover`.
pub(crate) fn store_entries(
    conn: &mut DbConn,
    size: u64,
    rows: &[NewEntry],
    leaf_hashes: &[Hash],
) -> Result<(), StoreError> {
    assert_eq!(rows.len(), leaf_hashes.len(), "one leaf hash per entry");
    let Some(head) = leaf_hashes.last() else {
        return Ok(());
    };
    let mut mem = MemoryHashes(read::hashes(conn, &merkle::root_indexes(size))?);
    let new = merkle::append_leaves(size, leaf_hashes, &mut mem)?;
    let base = merkle::stored_hash_index(0, size) as i64;
    let tree: Vec<NewTreeHash> = new
        .iter()
        .enumerate()
        .map(|(i, h)| NewTreeHash {
            id: base + i as i64,
            hash: h.0.to_vec(),
        })
        .collect();
    let new_size = size + rows.len() as u64;
    assert_eq!(
        base as u64 + tree.len() as u64,
        merkle::stored_hash_count(new_size),
        "stored hash count must match the tree size"
    );
    for chunk in rows.chunks(INSERT_CHUNK) {
        per_backend!(conn, |c| diesel::insert_into(entries::table)
            .values(chunk)
            .execute(c))?;
    }
    for chunk in tree.chunks(INSERT_CHUNK) {
        per_backend!(conn, |c| diesel::insert_into(tree_hashes::table)
            .values(chunk)
            .execute(c))?;
    }
    let n = diesel::update(log_head::table.find(1i64))
        .filter(log_head::size.eq(size as i64))
        .set((
            log_head::size.eq(new_size as i64),
            log_head::head_hash.eq(head.0.to_vec()),
        ))
        .execute(conn)?;
    if n != 1 {
        return Err(StoreError::Corrupt("log head moved while locked".into()));
    }
    // The usage rollups, in the same transaction (module `rollups`).
    let started = std::time::Instant::now();
    let mut sums = super::rollups::Sums::new();
    for r in rows {
        match &r.rollup {
            Some((key, r)) => super::rollups::add(&mut sums, key, r)?,
            None if r.start_at.is_some() => {
                super::rollups::add_body(&mut sums, &super::usage::parse_body(r.idx, &r.leaf)?)?
            }
            None => {}
        }
    }
    super::rollups::store(conn, &sums, size, new_size)?;
    super::rollups::count_upkeep(started);
    Ok(())
}

/// A record that passed every check that needs no transaction, including its signature.
pub(crate) struct Verified {
    pub checked: Checked,
}

/// What one append transaction knows about the records it is given, read once under the head
/// lock: revoked keys, the (signer, seq) pairs already logged, each signer's highest seq, the
/// streams' logged intervals, the policy in force; and what it has decided so far.
struct Group<'a> {
    now: Timestamp,
    /// Revoked keys among the group's, with the index of their revocation.
    revoked: HashMap<String, u64>,
    existing: HashMap<(String, u64), (Vec<u8>, u64)>,
    last_seq: HashMap<String, u64>,
    before: HashMap<String, u64>,
    streams: Streams,
    policy: gpuledger_core::record::LogPolicy,
    has_spot: bool,
    conflicts: Vec<NewConflict>,
    spots: &'a mut SpotCache,
}

/// The keys among the group's that are revoked: revocation is the only mutable key state, so
/// it is re-read under the lock.
fn revoked_keys(
    conn: &mut DbConn,
    batches: &[Vec<Verified>],
) -> Result<HashMap<String, u64>, StoreError> {
    let mut key_ids: Vec<&str> = batches
        .iter()
        .flatten()
        .map(|v| v.checked.envelope.key_id.as_str())
        .collect();
    key_ids.sort_unstable();
    key_ids.dedup();
    Ok(signer_keys::table
        .filter(signer_keys::key_id.eq_any(&key_ids))
        .filter(signer_keys::revoked_idx.is_not_null())
        .select((
            signer_keys::key_id,
            signer_keys::revoked_idx.assume_not_null(),
        ))
        .load::<(String, i64)>(conn)?
        .into_iter()
        .map(|(k, at)| (k, at as u64))
        .collect())
}

/// The group's (signer, seq) pairs already logged, with their content hash and index, in one
/// round trip: (signer = s1 AND seq IN ..) OR (signer = s2 ..); and each signer's highest seq.
#[allow(clippy::type_complexity)]
fn logged_seqs(
    conn: &mut DbConn,
    batches: &[Vec<Verified>],
) -> Result<(HashMap<(String, u64), (Vec<u8>, u64)>, HashMap<String, u64>), StoreError> {
    let mut by_signer: HashMap<&str, Vec<i64>> = HashMap::new();
    for v in batches.iter().flatten() {
        let env = &v.checked.envelope;
        by_signer
            .entry(env.signer.as_str())
            .or_default()
            .push(env.seq as i64);
    }
    let by_signer: Vec<(&str, Vec<i64>)> = by_signer.into_iter().collect();
    let mut existing = HashMap::new();
    // One OR term per signer: in chunks, since SQLite refuses an expression tree deeper than
    // 1,000 and a group may hold records of thousands of signers.
    for chunk in by_signer.chunks(MAX_OR_TERMS) {
        let mut q = entries::table
            .select((
                entries::signer,
                entries::seq,
                entries::content_hash,
                entries::idx,
            ))
            .into_boxed();
        for (signer, seqs) in chunk {
            q = q.or_filter(
                entries::signer
                    .eq(*signer)
                    .and(entries::seq.eq_any(seqs.clone())),
            );
        }
        existing.extend(
            q.load::<(String, i64, Vec<u8>, i64)>(conn)?
                .into_iter()
                .map(|(signer, seq, hash, idx)| ((signer, seq as u64), (hash, idx as u64))),
        );
    }
    let names: Vec<&str> = by_signer.iter().map(|(n, _)| *n).collect();
    let last_seq = signers::table
        .filter(signers::id.eq_any(&names))
        .select((signers::id, signers::last_seq))
        .load::<(String, i64)>(conn)?
        .into_iter()
        .map(|(id, s)| (id, s as u64))
        .collect();
    Ok((existing, last_seq))
}

impl<'a> Group<'a> {
    /// Reads what the group's records need under the lock `app` holds.
    fn load(
        conn: &mut DbConn,
        app: &Appender,
        batches: &[Vec<Verified>],
        cache: &StreamCache,
        spots: &'a mut SpotCache,
    ) -> Result<Self, StoreError> {
        let revoked = revoked_keys(conn, batches)?;
        let (existing, last_seq) = logged_seqs(conn, batches)?;
        let all = batches.iter().flatten();
        let streams = Streams::load(conn, all.filter_map(|v| v.checked.stream.as_ref()), cache)?;
        // The time rules use the time the entries are stamped with (`app.received_at`, never
        // behind the log) and the policy in force; spot prices also the spot prices and invoices logged so far.
        let policy = read::policy(conn, app.size)?;
        let has_spot = has_spot_group(batches);
        if has_spot {
            spots.catch_up(conn, app.size)?;
        }
        Ok(Group {
            now: app.received_at,
            revoked,
            existing,
            before: last_seq.clone(),
            last_seq,
            streams,
            policy,
            has_spot,
            conflicts: Vec::new(),
            spots,
        })
    }

    /// A record whose (signer, seq) is logged: a duplicate when it is the same record, else a
    /// conflict, refused and kept as evidence.
    fn repeated(&mut self, v: &Verified, hash: &[u8], idx: u64) -> Outcome {
        let env = &v.checked.envelope;
        if hash == &v.checked.content_hash[..] {
            return Outcome::Duplicate { index: idx };
        }
        self.conflicts.push(NewConflict {
            signer: env.signer.clone(),
            seq: env.seq as i64,
            existing_idx: idx as i64,
            received_at: self.now.unix(),
            envelope: String::from_utf8(v.checked.canonical.clone()).expect("JSON is UTF-8"),
        });
        Outcome::Rejected(Rejection::field(
            Reason::Conflict,
            "seq",
            format!(
                "{} of signer {} is already used by a different record at index {idx}; this record is kept as evidence",
                env.seq, env.signer
            ),
        ))
    }

    /// The rules that need the transaction: revocation, time, spot prices, overlaps.
    fn refusal(&self, app: &Appender, v: &Verified) -> Option<Rejection> {
        let env = &v.checked.envelope;
        let revoked_at = self.revoked.get(&env.key_id).copied();
        if let Err(r) = admission::check_not_revoked(&env.key_id, revoked_at) {
            return Some(r);
        }
        if let Err(r) = admission::check_time(&v.checked.body, self.now, &self.policy) {
            return Some(r);
        }
        if let Body::SpotPrice(_) = &v.checked.body {
            if let Err(r) = self.spots.history.check(app.next_index(), &v.checked.body) {
                return Some(r);
            }
        }
        self.streams.overlap(&v.checked)
    }

    /// Decides one record and, when accepted, appends it.
    fn admit(&mut self, app: &mut Appender, v: &Verified) -> Outcome {
        let env = &v.checked.envelope;
        let key = (env.signer.clone(), env.seq);
        if let Some((hash, idx)) = self.existing.get(&key).cloned() {
            return self.repeated(v, &hash, idx);
        }
        if let Some(r) = self.refusal(app, v) {
            return Outcome::Rejected(r);
        }
        let last = self.last_seq.get(&env.signer).copied().unwrap_or(0);
        let seq_gap = (env.seq > last + 1).then_some(SeqGap {
            from: last + 1,
            to: env.seq - 1,
        });
        if env.seq > last {
            self.last_seq.insert(env.signer.clone(), env.seq);
        }
        let index = app.push(&v.checked);
        if self.has_spot {
            self.spots.history.apply(index, &v.checked.body);
        }
        self.streams.claim(&v.checked, index);
        self.existing
            .insert(key, (v.checked.content_hash.to_vec(), index));
        Outcome::Accepted { index, seq_gap }
    }

    /// Writes the signers' new highest seqs and the conflicts kept as evidence.
    fn write(&self, conn: &mut DbConn) -> Result<(), StoreError> {
        let changed: Vec<(&String, u64)> = self
            .last_seq
            .iter()
            .filter(|(s, q)| self.before.get(*s) != Some(q))
            .map(|(s, q)| (s, *q))
            .collect();
        update_last_seqs(conn, &changed)?;
        let kept = within_bounds(conn, &self.conflicts, self.now.unix())?;
        let dropped = self.conflicts.len() - kept.len();
        if dropped > 0 {
            metrics::counter!("gpuledger_conflicts_dropped_total").increment(dropped as u64);
        }
        for chunk in kept.chunks(INSERT_CHUNK) {
            per_backend!(conn, |c| diesel::insert_into(conflicts::table)
                .values(chunk)
                .execute(c))?;
        }
        for c in &kept {
            // Webhooks: `record.conflict`, in the transaction that refused the record: one
            // per (signer, seq), to the tenant of the logged entry.
            super::webhooks::enqueue_conflict(
                conn,
                &c.signer,
                c.seq,
                c.existing_idx,
                &c.envelope,
                self.now,
            )?;
        }
        Ok(())
    }
}

/// The conflicts to keep as evidence, in order: those within [`MAX_CONFLICTS_PER_SEQ`] rows
/// of their (signer, seq) and [`MAX_CONFLICTS_PER_SIGNER_HOUR`] rows of their signer received
/// in the hour before `now`, counting the rows stored and those kept before them. Two indexed
/// counts, and only for a group that has conflicts.
fn within_bounds(
    conn: &mut DbConn,
    conflicts: &[NewConflict],
    now: i64,
) -> Result<Vec<NewConflict>, StoreError> {
    use diesel::dsl::count_star;
    if conflicts.is_empty() {
        return Ok(Vec::new());
    }
    let mut signers: Vec<&str> = conflicts.iter().map(|c| c.signer.as_str()).collect();
    signers.sort_unstable();
    signers.dedup();
    let seqs: Vec<i64> = conflicts.iter().map(|c| c.seq).collect();
    let mut per_seq: HashMap<(String, i64), i64> = conflicts::table
        .filter(conflicts::signer.eq_any(&signers))
        .filter(conflicts::seq.eq_any(&seqs))
        .group_by((conflicts::signer, conflicts::seq))
        .select((conflicts::signer, conflicts::seq, count_star()))
        .load::<(String, i64, i64)>(conn)?
        .into_iter()
        .map(|(s, q, n)| ((s, q), n))
        .collect();
    let mut per_hour: HashMap<String, i64> = conflicts::table
        .filter(conflicts::signer.eq_any(&signers))
        .filter(conflicts::received_at.gt(now - 3_600))
        .group_by(conflicts::signer)
        .select((conflicts::signer, count_star()))
        .load::<(String, i64)>(conn)?
        .into_iter()
        .collect();
    let mut kept = Vec::with_capacity(conflicts.len());
    for c in conflicts {
        let seq = per_seq.entry((c.signer.clone(), c.seq)).or_default();
        let hour = per_hour.entry(c.signer.clone()).or_default();
        if *seq < MAX_CONFLICTS_PER_SEQ && *hour < MAX_CONFLICTS_PER_SIGNER_HOUR {
            *seq += 1;
            *hour += 1;
            kept.push(c.clone());
        }
    }
    debug_assert!(kept.len() <= conflicts.len());
    Ok(kept)
}

/// Appends a group of batches in one transaction; returns one outcome list per batch.
pub(crate) fn append_group(
    conn: &mut DbConn,
    batches: &[Vec<Verified>],
    now: Timestamp,
    cache: &mut StreamCache,
    spots: &mut SpotCache,
) -> Result<Vec<Vec<Outcome>>, StoreError> {
    let result = conn.transaction(|conn| {
        let mut app = Appender::lock(conn, now)?;
        // The cache describes the log as this process last left it; if anyone else appended
        // since, it is stale.
        if cache.head_size != Some(app.size) {
            cache.clear();
        }
        let mut group = Group::load(conn, &app, batches, cache, spots)?;
        let out: Vec<Vec<Outcome>> = batches
            .iter()
            .map(|batch| batch.iter().map(|v| group.admit(&mut app, v)).collect())
            .collect();
        group.write(conn)?;
        let new_size = app.next_index();
        app.finish(conn)?;
        Ok((out, group.streams.latest, new_size))
    });
    match result {
        Ok((out, latest, new_size)) => {
            cache.committed(latest, new_size);
            if has_spot_group(batches) {
                spots.size = new_size;
            }
            Ok(out)
        }
        Err(e) => {
            cache.clear();
            // Spot prices of the failed group may have been taken in: start over.
            *spots = SpotCache::default();
            Err(e)
        }
    }
}

fn has_spot_group(batches: &[Vec<Verified>]) -> bool {
    batches
        .iter()
        .flatten()
        .any(|v| v.checked.kind == Kind::SpotPrice)
}

/// The spot prices and invoiced periods of the log below `size`, kept by the sequencer and
/// brought up to date incrementally (one indexed query for what was appended since, by any
/// process), so a spot price costs no scan of the whole price history.
#[derive(Default)]
pub(crate) struct SpotCache {
    history: admission::SpotHistory,
    size: u64,
}

impl SpotCache {
    /// Takes in the spot prices and invoices appended in [self.size, size).
    fn catch_up(&mut self, conn: &mut DbConn, size: u64) -> Result<(), StoreError> {
        for (i, b) in read::bodies_between(
            conn,
            &[Kind::SpotPrice, Kind::InvoiceIssued],
            self.size,
            size,
        )? {
            self.history.apply(i, &b);
        }
        self.size = size;
        Ok(())
    }
}

/// Most streams the sequencer remembers between transactions.
pub const MAX_CACHED_STREAMS: usize = 100_000;

/// The latest-starting interval of each recently seen stream, as of the log size this process
/// last committed. While nobody else appends, a record starting at or after its stream's
/// latest end cannot overlap anything (logged intervals of a stream never overlap), so the
/// common in-order case needs no query.
#[derive(Default)]
pub(crate) struct StreamCache {
    head_size: Option<u64>,
    last: HashMap<String, (i64, i64, u64)>,
}

impl StreamCache {
    fn clear(&mut self) {
        self.head_size = None;
        self.last.clear();
    }

    /// After a commit: `latest` holds the true latest interval of every stream the group
    /// touched (looked up, or known from the cache, then extended by what was accepted).
    fn committed(&mut self, latest: HashMap<String, (i64, i64, u64)>, new_size: u64) {
        if self.last.len() + latest.len() > MAX_CACHED_STREAMS {
            self.last.clear();
        }
        self.last.extend(latest);
        self.head_size = Some(new_size);
    }
}

/// The intervals found so far while loading [`Streams`]: per stream the logged ones near the
/// group's, and the latest-starting one.
#[derive(Default)]
struct Near {
    known: HashMap<String, Vec<(i64, i64, u64)>>,
    latest: HashMap<String, (i64, i64, u64)>,
}

impl Near {
    /// Takes from the cache the streams the group continues in order (each starting at or
    /// after the stream's cached latest interval ends); returns the span [lo, hi) of the group's
    /// intervals on every other stream, which must be looked up.
    fn take_cached<'a>(
        &mut self,
        streams: impl Iterator<Item = &'a (String, Timestamp, Timestamp)>,
        cache: &StreamCache,
    ) -> HashMap<String, (i64, i64)> {
        let mut span: HashMap<String, (i64, i64)> = HashMap::new();
        for (stream, start, end) in streams {
            let stream = stream.clone();
            let (s, e) = (start.unix(), end.unix());
            if !span.contains_key(&stream) {
                if let Some(last) = cache.last.get(&stream) {
                    if s >= last.1 {
                        // In order after the stream's latest interval: nothing to look up.
                        self.known
                            .entry(stream.clone())
                            .or_insert_with(|| vec![*last]);
                        self.latest.entry(stream).or_insert(*last);
                        continue;
                    }
                }
            }
            self.known.remove(&stream);
            self.latest.remove(&stream);
            let e2 = span.entry(stream).or_insert((s, e));
            e2.0 = e2.0.min(s);
            e2.1 = e2.1.max(e);
        }
        span
    }

    /// Adds a logged interval (start, end, index) of `stream`.
    fn add(&mut self, stream: String, iv: (i64, i64, u64)) {
        let l = self.latest.entry(stream.clone()).or_insert(iv);
        if iv.0 > l.0 {
            *l = iv;
        }
        self.known.entry(stream).or_default().push(iv);
    }

    /// Core's interval set of everything found, and the latest interval per stream.
    fn into_streams(self) -> Streams {
        let mut intervals = admission::Intervals::default();
        for (stream, ivs) in self.known {
            for (s, e, i) in ivs {
                if let (Some(s), Some(e)) = (Timestamp::from_unix(s), Timestamp::from_unix(e)) {
                    intervals.claim(&stream, s, e, i);
                }
            }
        }
        Streams {
            known: intervals,
            latest: self.latest,
        }
    }
}

/// Loads the logged intervals that can overlap each stream's span [lo, hi), and each
/// stream's latest interval overall. Logged intervals of one stream never overlap each other,
/// so the only ones that can overlap [lo, hi) are those starting inside it and the last one
/// starting before lo. All are index lookups on (stream, start_at).
fn load_near(
    conn: &mut DbConn,
    chunk: &[(String, (i64, i64))],
) -> Result<Vec<(String, i64, i64, i64)>, StoreError> {
    let before = diesel::alias!(entries as before);
    let mut q = entries::table
        .select((
            entries::stream.assume_not_null(),
            entries::start_at.assume_not_null(),
            entries::end_at.assume_not_null(),
            entries::idx,
        ))
        .into_boxed();
    for (stream, (lo, hi)) in chunk {
        let last_before = before
            .filter(before.field(entries::stream).eq(stream.clone()))
            .filter(before.field(entries::start_at).lt(*lo))
            .select(diesel::dsl::max(before.field(entries::start_at)))
            .single_value();
        q = q
            .or_filter(
                entries::stream
                    .eq(stream.clone())
                    .and(entries::start_at.ge(*lo))
                    .and(entries::start_at.lt(*hi)),
            )
            .or_filter(
                entries::stream
                    .eq(stream.clone())
                    .and(entries::start_at.eq(last_before))
                    .and(entries::end_at.gt(*lo)),
            );
        // The stream's latest interval overall, so the cache knows where it ends.
        let last_ever = before
            .filter(before.field(entries::stream).eq(stream.clone()))
            .select(diesel::dsl::max(before.field(entries::start_at)))
            .single_value();
        q = q.or_filter(
            entries::stream
                .eq(stream.clone())
                .and(entries::start_at.eq(last_ever)),
        );
    }
    Ok(q.load(conn)?)
}

/// The logged intervals of the streams a group touches, near the group's own intervals, plus
/// what the group adds. Loaded in one query; checked and extended in memory.
struct Streams {
    /// The logged intervals near the group's, and the group's accepted ones: core's rule.
    known: admission::Intervals,
    /// stream → its latest-starting interval (logged or accepted now), for the cache.
    latest: HashMap<String, (i64, i64, u64)>,
}

impl Streams {
    /// The logged intervals near the group's `streams` (stream, start, end), from the cache
    /// where the group continues a stream in order, else from one query per chunk of streams.
    fn load<'a>(
        conn: &mut DbConn,
        streams: impl Iterator<Item = &'a (String, Timestamp, Timestamp)>,
        cache: &StreamCache,
    ) -> Result<Streams, StoreError> {
        let mut near = Near::default();
        let span = near.take_cached(streams, cache);
        if !span.is_empty() {
            let span: Vec<_> = span.into_iter().collect();
            // Three OR terms per stream: in chunks, since SQLite refuses an expression tree
            // deeper than 1,000 and a group may start hundreds of new streams.
            for chunk in span.chunks(MAX_OR_TERMS / 3) {
                for (stream, s, e, i) in load_near(conn, chunk)? {
                    near.add(stream, (s, e, i as u64));
                }
            }
        }
        Ok(near.into_streams())
    }

    /// A rejection if the record's interval overlaps a logged or earlier-accepted one
    /// (`core::admission::Intervals`, the rule verifiers recheck).
    fn overlap(&self, c: &Checked) -> Option<Rejection> {
        let (stream, start, end) = c.stream.as_ref()?;
        self.known.check(c.kind, stream, *start, *end).err()
    }

    /// Records an accepted record's interval.
    fn claim(&mut self, c: &Checked, index: u64) {
        if let Some((stream, start, end)) = &c.stream {
            let iv = (start.unix(), end.unix(), index);
            self.known.claim(stream, *start, *end, index);
            let l = self.latest.entry(stream.clone()).or_insert(iv);
            if iv.0 >= l.0 {
                *l = iv;
            }
        }
    }
}

/// Sets `signers.last_seq` for many signers in one statement (`UPDATE … FROM (VALUES …)`, which
/// both SQLite ≥ 3.33 and PostgreSQL accept; only the placeholders differ).
fn update_last_seqs(conn: &mut DbConn, changed: &[(&String, u64)]) -> Result<(), StoreError> {
    use diesel::sql_types::{BigInt, Text};
    for part in changed.chunks(500) {
        let placeholders = |pg: bool| -> String {
            (0..part.len())
                .map(|i| {
                    if pg {
                        format!("(${}::text, ${}::bigint)", 2 * i + 1, 2 * i + 2)
                    } else {
                        "(?, ?)".to_owned()
                    }
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let sql = |pg: bool| {
            format!(
                "UPDATE signers SET last_seq = v.column2 FROM (VALUES {}) AS v WHERE signers.id = v.column1",
                placeholders(pg)
            )
        };
        macro_rules! run {
            ($c:expr, $pg:expr) => {{
                let mut q = diesel::sql_query(sql($pg)).into_boxed();
                for (signer, seq) in part {
                    q = q
                        .bind::<Text, _>(signer.as_str())
                        .bind::<BigInt, _>(*seq as i64);
                }
                q.execute($c)
            }};
        }
        match conn {
            DbConn::Sqlite(c) => run!(c, false),
            DbConn::Pg(c) => run!(c, true),
        }?;
    }
    Ok(())
}

/// Appends an entry written and signed by the ledger itself, with the next ledger seq.
pub(crate) fn push_ledger_entry(
    conn: &mut DbConn,
    app: &mut Appender,
    log: &LogSigner,
    body: &Body,
) -> Result<u64, StoreError> {
    let seq: i64 = signers::table
        .find(LEDGER_SIGNER)
        .select(signers::last_seq)
        .first(conn)?;
    let seq = seq as u64 + 1;
    admit_ledger_entry(conn, app, body)?;
    let env = Envelope::sign(
        log.origin(),
        body.kind(),
        LEDGER_SIGNER,
        log.key(),
        seq,
        body,
    );
    let checked = env
        .check(log.origin())
        .map_err(|r| StoreError::Refused(format!("the ledger entry would be invalid: {r}")))?;
    diesel::update(signers::table.find(LEDGER_SIGNER))
        .set(signers::last_seq.eq(seq as i64))
        .execute(conn)?;
    let index = app.push(&checked);
    // Webhooks: the event this entry causes, if any, in the entry's transaction.
    super::webhooks::enqueue_entry(conn, index, body, app.received_at)?;
    Ok(index)
}

/// The admission rules a ledger-written entry must pass (the same functions `verify-log`
/// rechecks): the tenant it names is registered, a tenant or lease is registered once, and
/// prices, parameters and plans only move forward, take effect at most the policy's skew in
/// the past and never inside an invoiced period. Read under the head lock.
fn admit_ledger_entry(conn: &mut DbConn, app: &Appender, body: &Body) -> Result<(), StoreError> {
    let size = app.next_index();
    let parties = read::DbParties::load(conn, size, body)?;
    admission::check_parties(body, u64::MAX, &parties).map_err(refusal)?;
    gpuledger_core::fleet::check_fleet(body, u64::MAX, &parties.fleet).map_err(refusal)?;
    admission::check_issued(body, app.received_at).map_err(refusal)?;
    if let Body::RecordExcluded(x) = body {
        // The dispute rules (core::dispute), on what the database holds below `size`.
        let excluded_at = read::exclusions(conn, &x.tenant, size)?
            .get(&x.entry)
            .map(|(at, _)| *at);
        let record = read::record_at(conn, x.entry, size)?;
        let invoices: Vec<IssuedInvoice> = super::invoices::issued_for(conn, &x.tenant, size)?
            .into_iter()
            .map(|(_, i)| IssuedInvoice {
                period: i.period,
                checkpoint_size: i.checkpoint_size,
            })
            .collect();
        let named = record.as_ref().map(|(tenant, start)| NamedRecord {
            tenant,
            start: *start,
        });
        check_exclusion(x, excluded_at, named, &invoices).map_err(refusal)?;
    }
    if let Some(tenant) = match body {
        Body::ContractRegistered(c) => Some(&c.tenant),
        Body::ContractAmended(a) => Some(&a.tenant),
        _ => None,
    } {
        // The contract rules (core::contract::ContractBook), on every contract and amendment
        // (ids are the log's) and the tenant's invoices below `size`. Contracts are few: one
        // per tenant and term.
        let mut book = gpuledger_core::contract::ContractBook::default();
        let kinds = [Kind::ContractRegistered, Kind::ContractAmended];
        for (index, old) in read::bodies_of(conn, &kinds, size)? {
            book.apply(index, &old);
        }
        for (_, issued) in super::invoices::issued_for(conn, tenant, size)? {
            book.invoiced(tenant, issued.period.to);
        }
        let policy = read::policy(conn, size)?;
        book.check(body, app.received_at, &policy)
            .map_err(refusal)?;
    }
    if let Body::Prepayment(p) = body {
        // The prepayment rules (core::prepaid::PrepaidBook) on the tenant's lots below
        // `size`. A reference sent again is the top-up recorded already: a conflict that
        // names its entry.
        let book = super::prepaid::book(conn, Some(&p.tenant), size)?;
        book.check(body, app.received_at)
            .map_err(|r| match r.reason {
                gpuledger_core::rejection::Reason::ReferenceUsed => {
                    StoreError::AlreadyExists(r.message)
                }
                _ => refusal(r),
            })?;
    }
    if let Some(from) = admission::price_effective_from(body) {
        // No price takes effect in the past (beyond the policy's skew) or inside an invoiced
        // period: the spot rules, for the ledger's own prices.
        let policy = read::policy(conn, size)?;
        admission::check_time(body, app.received_at, &policy).map_err(refusal)?;
        let mut history = admission::SpotHistory::default();
        for (index, tenant, pf, pt) in read::invoiced_periods_at(conn, from, size)? {
            history.invoiced(index, &tenant, pf, pt);
        }
        history.check(size, body).map_err(refusal)?;
        let mut prices = admission::PriceSeries::default();
        let kinds = [
            Kind::RateCard,
            Kind::RegionParams,
            Kind::VolumeTiers,
            Kind::TenantPlan,
        ];
        for (index, old) in read::bodies_of(conn, &kinds, size)? {
            prices.apply(index, &old);
        }
        prices.check(body).map_err(refusal)?;
    }
    Ok(())
}

/// A ledger entry refused by an admission rule, as the store error the API maps to HTTP.
fn refusal(r: Rejection) -> StoreError {
    match r.reason {
        Reason::AlreadyRegistered => StoreError::AlreadyExists(r.message),
        _ => StoreError::Rejected(r),
    }
}

/// Writes the default `log_policy` entry if the log has none (under the head lock, so two
/// processes opening one log write it once).
pub(crate) fn ensure_policy(
    conn: &mut DbConn,
    log: &LogSigner,
    now: Timestamp,
) -> Result<(), StoreError> {
    conn.transaction(|conn| {
        let mut app = Appender::lock(conn, now)?;
        let any: Option<i64> = entries::table
            .filter(entries::kind.eq(Kind::LogPolicy.as_str()))
            .select(entries::idx)
            .first(conn)
            .optional()?;
        if any.is_none() {
            let body = Body::LogPolicy(gpuledger_core::record::LogPolicy::default());
            push_ledger_entry(conn, &mut app, log, &body)?;
            app.finish(conn)?;
        }
        Ok(())
    })
}

/// The readiness probe's write: stamps the `write_probe` row of `meta` in its own transaction.
/// It writes no log entry and does not lock the head, but it goes through the same connection,
/// journal and fsync as an append, so a lost database or a full disk fails it.
pub(crate) fn probe(conn: &mut DbConn, now: Timestamp) -> Result<(), StoreError> {
    conn.transaction(|conn| {
        diesel::delete(meta::table.filter(meta::key.eq("write_probe"))).execute(conn)?;
        diesel::insert_into(meta::table)
            .values((meta::key.eq("write_probe"), meta::value.eq(now.to_string())))
            .execute(conn)?;
        Ok(())
    })
}

/// Registers `public_key` for `signer` with `role`, as a ledger-signed log entry.
pub(crate) fn register_key(
    conn: &mut DbConn,
    log: &LogSigner,
    signer: &str,
    role: Role,
    public_key: &str,
    scope: Option<KeyScope>,
    now: Timestamp,
) -> Result<(String, u64), StoreError> {
    gpuledger_core::ids::check_id(signer)
        .map_err(|m| StoreError::Refused(format!("signer id {m}")))?;
    if signer == LEDGER_SIGNER {
        return Err(StoreError::Refused(format!(
            "signer id {LEDGER_SIGNER:?} is reserved for the ledger"
        )));
    }
    if role == Role::Ledger {
        return Err(StoreError::Refused("role must be node or market".into()));
    }
    let key = keys::decode_public(public_key).map_err(|e| StoreError::Refused(e.to_string()))?;
    let key_id = keys::key_id(&key);
    conn.transaction(|conn| {
        let mut app = Appender::lock(conn, now)?;
        claim_signer(conn, signer, role)?;
        check_key_free(conn, &key_id)?;
        // A rotation without a scope keeps the scope of the signer's latest key.
        let scope = match scope {
            Some(s) => s,
            None => read::latest_scope(conn, signer)?.ok_or_else(|| {
                StoreError::Refused(format!(
                    "signer {signer} is new: give the nodes and regions its key may sign for"
                ))
            })?,
        };
        let body = Body::SignerKeyRegistered(SignerKeyRegistered {
            signer: signer.to_owned(),
            role,
            key_id: key_id.clone(),
            public_key: keys::encode_public(&key),
            nodes: scope.nodes,
            regions: scope.regions,
        });
        let index = push_ledger_entry(conn, &mut app, log, &body)?;
        diesel::insert_into(signer_keys::table)
            .values((
                signer_keys::key_id.eq(&key_id),
                signer_keys::signer_id.eq(signer),
                signer_keys::public_key.eq(key.as_bytes().to_vec()),
                signer_keys::registered_idx.eq(index as i64),
            ))
            .execute(conn)?;
        app.finish(conn)?;
        Ok((key_id.clone(), index))
    })
}

/// Records `signer` with `role` if it is new; refused if it is registered with another role.
fn claim_signer(conn: &mut DbConn, signer: &str, role: Role) -> Result<(), StoreError> {
    let existing_role: Option<String> = signers::table
        .find(signer)
        .select(signers::role)
        .first(conn)
        .optional()?;
    match existing_role {
        Some(r) if r != role.as_str() => Err(StoreError::Refused(format!(
            "signer {signer} is registered with role {r}, not {}",
            role.as_str()
        ))),
        Some(_) => Ok(()),
        None => {
            diesel::insert_into(signers::table)
                .values((
                    signers::id.eq(signer),
                    signers::role.eq(role.as_str()),
                    signers::last_seq.eq(0i64),
                ))
                .execute(conn)?;
            Ok(())
        }
    }
}

/// `AlreadyExists` if the key is registered already (to any signer).
fn check_key_free(conn: &mut DbConn, key_id: &str) -> Result<(), StoreError> {
    let taken: Option<String> = signer_keys::table
        .find(key_id)
        .select(signer_keys::signer_id)
        .first(conn)
        .optional()?;
    match taken {
        Some(owner) => Err(StoreError::AlreadyExists(format!(
            "key {key_id} is already registered (to signer {owner})"
        ))),
        None => Ok(()),
    }
}

/// Revokes a key, as a ledger-signed log entry; records after it signed by the key are refused.
pub(crate) fn revoke_key(
    conn: &mut DbConn,
    log: &LogSigner,
    signer: &str,
    key_id: &str,
    reason: Option<String>,
    now: Timestamp,
) -> Result<u64, StoreError> {
    conn.transaction(|conn| {
        let mut app = Appender::lock(conn, now)?;
        let row: Option<(String, Option<i64>)> = signer_keys::table
            .find(key_id)
            .select((signer_keys::signer_id, signer_keys::revoked_idx))
            .first(conn)
            .optional()?;
        match row {
            None => return Err(StoreError::NotFound(format!("key {key_id}"))),
            Some((owner, _)) if owner != signer => {
                return Err(StoreError::NotFound(format!(
                    "key {key_id} of signer {signer}"
                )))
            }
            Some((_, Some(idx))) => {
                return Err(StoreError::AlreadyExists(format!(
                    "key {key_id} was already revoked at index {idx}"
                )))
            }
            Some(_) => {}
        }
        let body = Body::SignerKeyRevoked(SignerKeyRevoked {
            signer: signer.to_owned(),
            key_id: key_id.to_owned(),
            reason: reason.clone(),
        });
        let index = push_ledger_entry(conn, &mut app, log, &body)?;
        diesel::update(signer_keys::table.find(key_id))
            .set(signer_keys::revoked_idx.eq(Some(index as i64)))
            .execute(conn)?;
        app.finish(conn)?;
        Ok(index)
    })
}

/// The sequencer's signing side: the log key and the high-water mark every checkpoint it
/// signs must extend. Dereferences to the [`LogSigner`], which signs everything else.
pub(crate) struct Signer {
    pub log: LogSigner,
    pub high_water: std::sync::Arc<super::high_water::HighWater>,
}

impl std::ops::Deref for Signer {
    type Target = LogSigner;
    fn deref(&self) -> &LogSigner {
        &self.log
    }
}

/// Signs and stores a checkpoint of the current head, unless the latest checkpoint already
/// covers it. Refuses to sign a tree that is not consistent with the latest checkpoint.
pub(crate) fn checkpoint(
    conn: &mut DbConn,
    log: &Signer,
    now: Timestamp,
) -> Result<(u64, String), StoreError> {
    conn.transaction(|conn| {
        let app = Appender::lock(conn, now)?;
        // Stamped under the lock: never behind the log (`core::clock::stamp`).
        let now = app.received_at;
        checkpoint_locked(conn, log, app.next_index(), now)
    })
}

/// Signs and stores a checkpoint of `size` entries (the caller holds the head lock and `size`
/// is the current size), unless the latest checkpoint has that size already. Refuses to sign
/// a tree that does not extend the latest checkpoint and the high-water mark
/// ([`super::high_water::HighWater::check_extends`]); the checkpoint signed becomes the mark
/// once the transaction commits.
pub(crate) fn checkpoint_locked(
    conn: &mut DbConn,
    log: &Signer,
    size: u64,
    now: Timestamp,
) -> Result<(u64, String), StoreError> {
    let latest = read::latest_checkpoint(conn)?;
    if let Some((s, _, note)) = &latest {
        if *s == size {
            return Ok((size, note.clone()));
        }
        if *s > size {
            return Err(StoreError::Corrupt(format!(
                "latest checkpoint has size {s}, above the log size {size}"
            )));
        }
    }
    let reader = read::DbHashReader::new(conn);
    let root = merkle::tree_hash(size, &reader)?;
    if let Some((old_size, old_root, _)) = &latest {
        if *old_size > 0 {
            let proof = merkle::prove_tree(size, *old_size, &reader)?;
            merkle::check_tree(&proof, size, root, *old_size, *old_root).map_err(|_| {
                StoreError::Corrupt(format!(
                    "the tree at size {size} is not consistent with the checkpoint at size {old_size}; refusing to sign"
                ))
            })?;
        }
    }
    log.high_water.check_extends(size, root, &reader)?;
    // A checkpoint is only ever signed for a tree larger than the latest one.
    debug_assert!(latest.as_ref().is_none_or(|(s, _, _)| *s < size));
    let note = log.sign_checkpoint(size, &root);
    log.high_water.stage(size, root, &note);
    diesel::insert_into(checkpoints::table)
        .values((
            checkpoints::size.eq(size as i64),
            checkpoints::root.eq(root.0.to_vec()),
            checkpoints::note.eq(&note),
            checkpoints::created_at.eq(now.unix()),
        ))
        .execute(conn)?;
    Ok((size, note))
}

/// Appends an entry written and signed by the ledger (rate card, region parameters, lease,
/// volume tiers, tenant plan, tenant registration, log policy, node registration or record
/// exclusion). Prices are never edited in place: a new price for a series (or tiers for a
/// plan's series, or a tenant's plan) must take effect after the latest one already logged for
/// it, a lease or tenant is registered once, and a record is excluded once, before it is
/// invoiced ([`admit_ledger_entry`]).
pub(crate) fn ledger_entry(
    conn: &mut DbConn,
    log: &LogSigner,
    body: &Body,
    now: Timestamp,
) -> Result<u64, StoreError> {
    if !matches!(
        body,
        Body::RateCard(_)
            | Body::RegionParams(_)
            | Body::LeaseRegistered(_)
            | Body::VolumeTiers(_)
            | Body::TenantPlan(_)
            | Body::TenantRegistered(_)
            | Body::LogPolicy(_)
            | Body::NodeRegistered(_)
            | Body::NodeUpdated(_)
            | Body::RecordExcluded(_)
            | Body::ContractRegistered(_)
            | Body::ContractAmended(_)
            | Body::Prepayment(_)
    ) {
        return Err(StoreError::Refused(format!(
            "{} entries are not written this way",
            body.kind().as_str()
        )));
    }
    conn.transaction(|conn| {
        let mut app = Appender::lock(conn, now)?;
        let index = push_ledger_entry(conn, &mut app, log, body)?;
        app.finish(conn)?;
        Ok(index)
    })
}
