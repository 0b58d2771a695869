//! Witness cosignatures of the log's checkpoints (C2SP tlog-witness, tlog-cosignature).
//!
//! `serve` sends each new checkpoint to its witnesses (`server::witnessing`); every
//! `cosignature/v1` line a witness returns is checked against that witness's configured key
//! and stored here, keyed by (checkpoint size, witness), with the size each witness last
//! cosigned. Every checkpoint the log serves carries the lines gathered for it
//! ([`with_cosignatures`]); the log-signed note itself stays as signed in `checkpoints`.
//!
//! [`Witnessing`] is what the issuing side and the witness threads share in one process: the
//! witnesses' keys, the quorum, and two signals (a checkpoint was signed; a cosignature was
//! stored) so that an issuance waiting for a quorum and a witness thread waiting for work wake
//! at once rather than on a timer.

use super::conn::DbConn;
use super::error::StoreError;
use super::schema::{checkpoints, cosignatures, witness_state};
use diesel::prelude::*;
use gpuledger_core::cosignature::{self, WitnessKey};
use gpuledger_core::time::Timestamp;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// The most witnesses `serve` may be configured with: each costs a thread and a signature line
/// on every served checkpoint (a note holds at most 100 signature lines).
pub const MAX_WITNESSES: usize = 32;

/// A checkpoint that reached the quorum: its size and the log-signed note with the valid
/// cosignatures gathered for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Witnessed {
    /// The checkpoint's tree size.
    pub size: u64,
    /// The note, with its cosignature lines.
    pub note: String,
}

/// The witnesses of a log, its quorum, and the signals between the issuing side and the
/// witness threads of one process.
pub struct Witnessing {
    witnesses: Vec<WitnessKey>,
    quorum: usize,
    wait: Duration,
    signals: Mutex<Signals>,
    /// Notified when a checkpoint was signed or the witness threads must stop.
    checkpoint_signed: Condvar,
    /// Notified when a cosignature was stored.
    cosigned: Condvar,
    /// What each witness's sender last reported, by witness name.
    reports: Mutex<BTreeMap<String, WitnessReport>>,
}

/// Where a witness stands, as its sender last saw it (`GET /v1/witnesses`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WitnessReport {
    /// Its submission URL (`<url>/add-checkpoint`).
    pub endpoint: String,
    /// The size of the latest checkpoint it cosigned, if any.
    pub cosigned_size: Option<u64>,
    /// The latest checkpoint's size minus `cosigned_size`.
    pub lag_entries: u64,
    /// When it last cosigned (Unix seconds), in this process.
    pub last_cosigned_at: Option<i64>,
    /// The latest failure: its reason label, what happened, and when (Unix seconds).
    pub last_error: Option<(String, String, i64)>,
}

impl std::fmt::Debug for Witnessing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Witnessing")
            .field("witnesses", &self.witnesses)
            .field("quorum", &self.quorum)
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Signals {
    checkpoints: u64,
    cosignatures: u64,
    stopping: bool,
}

impl Witnessing {
    /// `quorum` of `witnesses` (0: none), an issuance waiting up to `wait` for it. Refused when
    /// the quorum is above the number of witnesses, two witnesses share a name, or there are
    /// more than [`MAX_WITNESSES`].
    pub fn new(
        witnesses: Vec<WitnessKey>,
        quorum: usize,
        wait: Duration,
    ) -> Result<Witnessing, StoreError> {
        if quorum > witnesses.len() {
            return Err(StoreError::Refused(format!(
                "witness_quorum is {quorum} but only {} witnesses are configured",
                witnesses.len()
            )));
        }
        if witnesses.len() > MAX_WITNESSES {
            return Err(StoreError::Refused(format!(
                "{} witnesses are configured; at most {MAX_WITNESSES} are allowed",
                witnesses.len()
            )));
        }
        let mut names: Vec<&str> = witnesses.iter().map(|w| w.name()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(StoreError::Refused(format!(
                "witness {} is configured twice",
                w[0]
            )));
        }
        Ok(Witnessing {
            witnesses,
            quorum,
            wait,
            signals: Mutex::new(Signals::default()),
            checkpoint_signed: Condvar::new(),
            cosigned: Condvar::new(),
            reports: Mutex::new(BTreeMap::new()),
        })
    }

    /// The witnesses' keys.
    pub fn witnesses(&self) -> &[WitnessKey] {
        &self.witnesses
    }

    /// The quorum (k of n; 0: issuance does not wait for witnesses).
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// How long an issuance waits for a checkpoint to reach the quorum.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    fn signals(&self) -> std::sync::MutexGuard<'_, Signals> {
        self.signals.lock().expect("witness signals lock")
    }

    /// Updates what is reported of witness `name`.
    pub fn report(&self, name: &str, update: impl FnOnce(&mut WitnessReport)) {
        let mut reports = self.reports.lock().expect("witness reports lock");
        update(reports.entry(name.to_owned()).or_default());
    }

    /// What each witness's sender last reported, by witness name.
    pub fn reports(&self) -> BTreeMap<String, WitnessReport> {
        self.reports.lock().expect("witness reports lock").clone()
    }

    /// Says that a checkpoint was signed: the witness threads wake and send it.
    pub fn checkpoint_signed(&self) {
        self.signals().checkpoints += 1;
        self.checkpoint_signed.notify_all();
    }

    /// Says that a cosignature was stored: issuances waiting for a quorum look again.
    pub fn cosignature_stored(&self) {
        self.signals().cosignatures += 1;
        self.cosigned.notify_all();
    }

    /// Tells the witness threads to stop.
    pub fn stop(&self) {
        self.signals().stopping = true;
        self.checkpoint_signed.notify_all();
    }

    /// How many checkpoints were signalled so far.
    pub fn checkpoints_signalled(&self) -> u64 {
        self.signals().checkpoints
    }

    /// Waits until a checkpoint after the `seen`th is signalled, the threads are told to stop,
    /// or `timeout` passes; returns whether to stop.
    pub fn wait_for_checkpoint(&self, seen: u64, timeout: Duration) -> bool {
        let guard = self.signals();
        let (guard, _) = self
            .checkpoint_signed
            .wait_timeout_while(guard, timeout, |s| s.checkpoints == seen && !s.stopping)
            .expect("witness signals lock");
        guard.stopping
    }

    /// Whether the witness threads were told to stop.
    pub fn stopping(&self) -> bool {
        self.signals().stopping
    }

    /// How many cosignatures were stored so far (for [`Witnessing::wait_for_cosignature`]).
    pub fn cosignatures_stored(&self) -> u64 {
        self.signals().cosignatures
    }

    /// Waits until a cosignature after the `seen`th is stored, or `timeout` passes.
    pub fn wait_for_cosignature(&self, seen: u64, timeout: Duration) {
        let guard = self.signals();
        let _ = self
            .cosigned
            .wait_timeout_while(guard, timeout, |s| s.cosignatures == seen)
            .expect("witness signals lock");
    }
}

/// Stores `witness`'s cosignature `line` (checked by the caller against its key) of the
/// checkpoint of `size`, and records `size` as the latest it cosigned.
pub fn store(
    conn: &mut DbConn,
    witness: &str,
    size: u64,
    line: &str,
    cosigned_at: u64,
    now: Timestamp,
) -> Result<(), StoreError> {
    let size = to_i64(size);
    conn.transaction(|c| {
        diesel::delete(cosignatures::table.find((size, witness))).execute(c)?;
        diesel::insert_into(cosignatures::table)
            .values((
                cosignatures::size.eq(size),
                cosignatures::witness.eq(witness),
                cosignatures::line.eq(line),
                cosignatures::cosigned_at.eq(to_i64(cosigned_at)),
                cosignatures::created_at.eq(now.unix()),
            ))
            .execute(c)?;
        // Webhooks: `checkpoint.cosigned`, once per checkpoint and witness.
        super::webhooks::enqueue_cosignature(c, size, witness, now)?;
        set_size(c, witness, size, now)
    })
}

/// Records that `witness` holds the log at `size` (the old size of the next `add-checkpoint`).
fn set_size(conn: &mut DbConn, witness: &str, size: i64, now: Timestamp) -> Result<(), StoreError> {
    let updated = diesel::update(witness_state::table.find(witness))
        .set((
            witness_state::cosigned_size.eq(size),
            witness_state::updated_at.eq(now.unix()),
        ))
        .execute(conn)?;
    if updated == 0 {
        diesel::insert_into(witness_state::table)
            .values((
                witness_state::witness.eq(witness),
                witness_state::cosigned_size.eq(size),
                witness_state::updated_at.eq(now.unix()),
            ))
            .execute(conn)?;
    }
    Ok(())
}

fn to_i64(n: u64) -> i64 {
    n.min(i64::MAX as u64) as i64
}

/// The latest size each witness cosigned, by witness name.
pub fn cosigned_sizes(conn: &mut DbConn) -> Result<HashMap<String, u64>, StoreError> {
    let rows: Vec<(String, i64)> = witness_state::table
        .select((witness_state::witness, witness_state::cosigned_size))
        .load(conn)?;
    Ok(rows.into_iter().map(|(w, s)| (w, s as u64)).collect())
}

/// The stored cosignature lines of the checkpoints of `sizes`, by size (witness name order).
pub fn lines_for(
    conn: &mut DbConn,
    sizes: &[u64],
) -> Result<BTreeMap<u64, Vec<String>>, StoreError> {
    let mut out: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    // Below every backend's bound-parameter limit.
    for part in sizes.chunks(1_000) {
        let ids: Vec<i64> = part.iter().map(|&s| to_i64(s)).collect();
        let rows: Vec<(i64, String)> = cosignatures::table
            .filter(cosignatures::size.eq_any(&ids))
            .order((cosignatures::size.asc(), cosignatures::witness.asc()))
            .select((cosignatures::size, cosignatures::line))
            .load(conn)?;
        for (s, line) in rows {
            out.entry(s as u64).or_default().push(line);
        }
    }
    Ok(out)
}

/// `note` (the log-signed checkpoint of `size`) with the cosignatures stored for it appended.
pub fn with_cosignatures(conn: &mut DbConn, size: u64, note: String) -> Result<String, StoreError> {
    let lines = lines_for(conn, &[size])?.remove(&size).unwrap_or_default();
    attach(size, note, &lines)
}

/// `note` with `lines` appended (unchanged when there are none).
pub fn attach(size: u64, note: String, lines: &[String]) -> Result<String, StoreError> {
    if lines.is_empty() {
        return Ok(note);
    }
    cosignature::with_signature_lines(&note, lines).map_err(|e| {
        StoreError::Corrupt(format!(
            "the cosignatures stored for the checkpoint of size {size}: {e}"
        ))
    })
}

/// The largest checkpoint of size `min_size` or more that carries at least `quorum` valid
/// cosignatures of `witnesses`, with them; `None` if there is none. The stored lines are
/// verified again here, against the keys configured now.
pub fn quorum_checkpoint(
    conn: &mut DbConn,
    witnesses: &[WitnessKey],
    quorum: usize,
    min_size: u64,
) -> Result<Option<Witnessed>, StoreError> {
    let names: Vec<&str> = witnesses.iter().map(|w| w.name()).collect();
    let rows: Vec<(i64, String)> = cosignatures::table
        .filter(cosignatures::size.ge(to_i64(min_size)))
        .filter(cosignatures::witness.eq_any(&names))
        .select((cosignatures::size, cosignatures::line))
        .load(conn)?;
    let mut by_size: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for (s, line) in rows {
        by_size.entry(s as u64).or_default().push(line);
    }
    for (size, lines) in by_size.into_iter().rev() {
        if lines.len() < quorum {
            continue;
        }
        let note: Option<String> = checkpoints::table
            .find(to_i64(size))
            .select(checkpoints::note)
            .first(conn)
            .optional()?;
        let Some(note) = note else { continue };
        let note = attach(size, note, &lines)?;
        if cosignature::valid_cosignatures(note.as_bytes(), witnesses).len() >= quorum {
            return Ok(Some(Witnessed { size, note }));
        }
    }
    Ok(None)
}

/// The largest checkpoint size with at least `quorum` stored cosignatures of `witnesses`
/// (0: none); counted from the stored lines, for reports and metrics.
pub fn quorum_size(
    conn: &mut DbConn,
    witnesses: &[WitnessKey],
    quorum: usize,
) -> Result<u64, StoreError> {
    let names: Vec<&str> = witnesses.iter().map(|w| w.name()).collect();
    let mut sizes: Vec<i64> = witness_state::table
        .filter(witness_state::witness.eq_any(&names))
        .select(witness_state::cosigned_size)
        .load(conn)?;
    if quorum == 0 || sizes.len() < quorum {
        return Ok(0);
    }
    // Each witness's cosigned size only grows, and a witness that cosigned size s cosigned a
    // checkpoint of s: the k-th largest of them is cosigned by k witnesses at or above it.
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let candidate = sizes[quorum - 1];
    let rows: Vec<(i64, String)> = cosignatures::table
        .filter(cosignatures::size.ge(candidate))
        .filter(cosignatures::witness.eq_any(&names))
        .select((cosignatures::size, cosignatures::witness))
        .load(conn)?;
    let mut count: BTreeMap<i64, usize> = BTreeMap::new();
    for (s, _) in rows {
        *count.entry(s).or_default() += 1;
    }
    Ok(count
        .into_iter()
        .rev()
        .find(|(_, n)| *n >= quorum)
        .map_or(0, |(s, _)| s as u64))
}
