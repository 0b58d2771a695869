//! The ledger handle: validation and signature checks in the caller's threads, then one
//! sequencer thread per process that commits everything queued in one transaction (group
//! commit) and answers only after the commit.

use super::clock::ClockGuard;
use super::conn::{self, DbConn, ReadConn};
use super::error::StoreError;
use super::high_water::HighWater;
use super::issuance::Issuance;
use super::read;
use super::reads::Reads;
use super::schema::*;
use super::write::{self, Verified};
use diesel::prelude::*;
use ed25519_dalek::{SigningKey, VerifyingKey};
use gpuledger_core::admission;
use gpuledger_core::checkpoint::LogSigner;
use gpuledger_core::clock::ClockPolicy;
use gpuledger_core::envelope::{self, Checked, Envelope};
use gpuledger_core::ids::LEDGER_SIGNER;
use gpuledger_core::keys;
use gpuledger_core::limits::MAX_APPEND_BATCH;

use gpuledger_core::outcome::Outcome;
use gpuledger_core::record::{Body, KeyScope, Role, SignerKeyRegistered};
use gpuledger_core::rejection::{Reason, Rejection};
use gpuledger_core::time::Timestamp;
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, RwLock};
use std::thread::JoinHandle;

/// Most records the sequencer commits in one transaction.
pub const MAX_GROUP_RECORDS: usize = 20_000;

/// Most write jobs waiting for the sequencer (each an append batch of at most
/// [`MAX_APPEND_BATCH`] records, or one ledger entry, issuance or checkpoint). Past it a write
/// is refused at once with [`StoreError::Busy`] (503 `busy`) instead of queueing without
/// bound; `serve` caps concurrent ingest well below it (`max_concurrent_ingest`).
pub const MAX_QUEUED_JOBS: usize = 1_024;

/// The checkpoint origin used when `init` is given none.
pub const DEFAULT_ORIGIN: &str = "gpuledger.local/log";

pub(crate) type Reply<T> = mpsc::SyncSender<Result<T, StoreError>>;

pub(crate) enum Job {
    Append(Vec<Verified>, Reply<Vec<Outcome>>),
    Register {
        signer: String,
        role: Role,
        public_key: String,
        scope: Option<KeyScope>,
        reply: Reply<(String, u64)>,
    },
    EnsurePolicy(Reply<()>),
    /// A cheap write transaction that touches no log entry: the readiness probe.
    Probe(Reply<()>),
    Revoke {
        signer: String,
        key_id: String,
        reason: Option<String>,
        reply: Reply<u64>,
    },
    Checkpoint(Reply<(u64, String)>),
    LedgerEntry(Box<gpuledger_core::record::Body>, Reply<u64>),
    /// Issues an invoice computed outside the lock (`None`: the log changed under it).
    Issue(
        Box<super::invoices::Draft>,
        Reply<Option<Vec<gpuledger_core::invoice::Invoice>>>,
    ),
    /// A payment or credit note; `true`: a payment's excess becomes the tenant's credit.
    Settle(Box<gpuledger_core::record::Body>, bool, Reply<u64>),
    /// Issues a certificate computed outside the lock (`None`: the log changed under it).
    Certify(
        Box<super::certificates::Draft>,
        Reply<Option<gpuledger_core::certificate::Certificate>>,
    ),
}

impl Job {
    fn records(&self) -> usize {
        match self {
            Job::Append(v, _) => v.len(),
            _ => 1,
        }
    }
}

/// A registered key as the ingest path needs it: its registration (signer, role, scope) and
/// the key. Registrations never change; revocation is read under the head lock.
#[derive(Clone)]
struct CachedKey {
    registration: SignerKeyRegistered,
    key: VerifyingKey,
}

/// Facts about the opened log.
#[derive(Debug, Clone)]
pub struct LogInfo {
    /// Checkpoint origin and note key name.
    pub origin: String,
    /// Base64 Ed25519 public key of the log.
    pub public_key: String,
    /// The signed-note verifier key string.
    pub verifier_key: String,
}

/// The ledger clock: the system clock, or (in tests built with the `test-clock` feature) a
/// time a test set.
#[derive(Clone, Default)]
struct Clock(Arc<Mutex<Option<Timestamp>>>);

impl Clock {
    fn now(&self) -> Timestamp {
        self.fixed().unwrap_or_else(Timestamp::now)
    }

    /// The time a test set, if one did.
    fn fixed(&self) -> Option<Timestamp> {
        *self.0.lock().expect("clock lock")
    }

    /// The time to use, judged by `guard` (a time a test set is used as it is).
    fn checked(&self, guard: &ClockGuard) -> Result<Timestamp, StoreError> {
        match self.fixed() {
            Some(t) => Ok(t),
            None => guard.check(),
        }
    }
}

/// Times an account write is run again after SQLite's "database is locked" (a read-then-write
/// transaction overtaken by a commit of the sequencer).
const ACCOUNT_WRITE_RETRIES: u32 = 5;

/// An open ledger. Cheap to share between threads (`Arc<Ledger>`).
pub struct Ledger {
    // Read by `set_clock` (test builds); the sequencer holds its own handle.
    #[cfg_attr(not(feature = "test-clock"), allow(dead_code))]
    clock: Clock,
    info: LogInfo,
    jobs: Option<mpsc::SyncSender<Job>>,
    writer: Option<JoinHandle<()>>,
    reads: Reads,
    /// The connection for writes outside the log (tenant accounts, API tokens), opened on
    /// first use; the reader pool only ever reads.
    account_writer: Mutex<Option<DbConn>>,
    keys: RwLock<HashMap<String, CachedKey>>,
    /// Tenant and lease registrations seen so far (they are only ever added).
    parties: RwLock<read::DbParties>,
    queued: Arc<AtomicUsize>,
    health: Arc<WriteHealth>,
    url: String,
    /// The witnesses and quorum of `serve`, once attached ([`Ledger::attach_witnessing`]).
    witnessing: std::sync::OnceLock<Arc<super::cosignatures::Witnessing>>,
    /// Issuer, payment terms and taxes of the invoices issued ([`Ledger::set_invoicing`]).
    invoicing: RwLock<Arc<super::invoices::InvoiceSettings>>,
    /// What invoice PDFs show besides the document ([`Ledger::set_invoice_pdf`]).
    invoice_pdf: RwLock<Arc<super::invoices::InvoicePdfSettings>>,
    /// The largest checkpoint signed or found published, which the database must hold.
    high_water: Arc<HighWater>,
    pub(crate) guard: Arc<ClockGuard>,
}

/// Creates or migrates the database and records the log's origin and public key. Idempotent:
/// on an initialised database it checks that `key` and `origin` match what was recorded.
pub fn init(url: &str, key: &SigningKey, origin: &str) -> Result<LogInfo, StoreError> {
    let signer = LogSigner::new(origin, key.clone())?;
    let mut c = conn::connect(url)?;
    conn::migrate(&mut c)?;
    let public = keys::encode_public(&key.verifying_key());
    c.transaction(|c| {
        match read::meta(c, "log_public_key")? {
            Some(existing) if existing != public => {
                return Err(StoreError::WrongLogKey {
                    expected: existing,
                    found: public.clone(),
                })
            }
            Some(_) => {
                let o = read::meta(c, "origin")?.unwrap_or_default();
                if o != origin {
                    return Err(StoreError::Refused(format!(
                        "the log was initialised with origin {o:?}, not {origin:?}"
                    )));
                }
            }
            None => {
                for (k, v) in [("log_public_key", public.as_str()), ("origin", origin)] {
                    diesel::insert_into(meta::table)
                        .values((meta::key.eq(k), meta::value.eq(v)))
                        .execute(c)?;
                }
                diesel::insert_into(log_head::table)
                    .values((
                        log_head::id.eq(1i64),
                        log_head::size.eq(0i64),
                        log_head::head_hash.eq(vec![0u8; 32]),
                    ))
                    .execute(c)?;
                diesel::insert_into(signers::table)
                    .values((
                        signers::id.eq(LEDGER_SIGNER),
                        signers::role.eq("ledger"),
                        signers::last_seq.eq(0i64),
                    ))
                    .execute(c)?;
            }
        }
        Ok(())
    })?;
    Ok(LogInfo {
        origin: origin.to_owned(),
        public_key: public,
        verifier_key: signer.verifier_key(),
    })
}

/// Reads the origin and log public key recorded by `init`.
pub fn log_info(conn: &mut DbConn) -> Result<LogInfo, StoreError> {
    let origin = read::meta(conn, "origin")?.ok_or(StoreError::NotInitialised)?;
    let public_key = read::meta(conn, "log_public_key")?.ok_or(StoreError::NotInitialised)?;
    let key = keys::decode_public(&public_key)
        .map_err(|e| StoreError::Corrupt(format!("log public key: {e}")))?;
    let verifier_key = gpuledger_core::checkpoint::verifier_key(&origin, &key);
    Ok(LogInfo {
        origin,
        public_key,
        verifier_key,
    })
}

impl Ledger {
    /// Opens an initialised database with the log's private key, runs pending migrations, and
    /// starts the sequencer thread. The high-water mark is kept in memory only: it guards
    /// this handle's lifetime ([`Ledger::open_with_high_water`] keeps it in a file).
    pub fn open(url: &str, key: SigningKey) -> Result<Ledger, StoreError> {
        Ledger::open_with_high_water(url, key, None, ClockPolicy::default())
    }

    /// [`Ledger::open`] with the high-water mark in `high_water_file` (module
    /// [`super::high_water`]): read at start (a file that is there must be a checkpoint signed
    /// by this log's key), replaced after every checkpoint signed. A database that does not
    /// hold the marked tree opens, for reads, but is not written to: writes answer
    /// [`StoreError::LogRewound`] and [`Ledger::rewound`] says why. The ledger's clock is
    /// judged under `clock` (module [`super::clock`]); a log opened while it is unreliable
    /// opens too, for reads, and writes wait for it.
    pub fn open_with_high_water(
        url: &str,
        key: SigningKey,
        high_water_file: Option<std::path::PathBuf>,
        clock: ClockPolicy,
    ) -> Result<Ledger, StoreError> {
        Ledger::open_inner(url, key, high_water_file, clock, None)
    }

    /// [`Ledger::open`] with the ledger clock set to `now` from the start, so even the
    /// entries written on opening (the default policy) are received then. Tests only.
    #[cfg(feature = "test-clock")]
    pub fn open_at(url: &str, key: SigningKey, now: Timestamp) -> Result<Ledger, StoreError> {
        Ledger::open_inner(url, key, None, ClockPolicy::default(), Some(now))
    }

    fn open_inner(
        url: &str,
        key: SigningKey,
        high_water_file: Option<std::path::PathBuf>,
        clock: ClockPolicy,
        fixed: Option<Timestamp>,
    ) -> Result<Ledger, StoreError> {
        let mut reader = conn::connect(url)?;
        conn::migrate(&mut reader)?;
        let info = log_info(&mut reader)?;
        // A log written before the usage rollups is rolled up once.
        super::rollups::catch_up(&mut reader)?;
        check_log_key(&info, &key)?;
        let high_water = Arc::new(HighWater::load(high_water_file, &info.verifier_key)?);
        let guard = Arc::new(ClockGuard::new(clock, read::last_received_at(&mut reader)?));
        let log = write::Signer {
            log: LogSigner::new(&info.origin, key)?,
            high_water: high_water.clone(),
        };
        let clock = Clock(Arc::new(Mutex::new(fixed)));
        let health = Arc::new(WriteHealth::default());
        let w = Writer {
            url: url.to_owned(),
            conn: Some(conn::connect(url)?),
            clock: clock.clone(),
            caches: Default::default(),
            health: health.clone(),
            high_water: high_water.clone(),
            checked: false,
            guard: guard.clone(),
            clock_fault: None,
        };
        let (tx, writer, queued) = start_sequencer(w, log)?;
        Ok(Ledger {
            clock,
            info,
            jobs: Some(tx),
            writer: Some(writer),
            reads: Reads::new(url, ReadConn::seal(reader)?),
            account_writer: Mutex::new(None),
            keys: RwLock::new(HashMap::new()),
            parties: RwLock::new(read::DbParties::default()),
            queued,
            health,
            url: url.to_owned(),
            witnessing: std::sync::OnceLock::new(),
            invoicing: RwLock::new(Arc::default()),
            invoice_pdf: RwLock::new(Arc::default()),
            high_water,
            guard,
        })
        .and_then(|l| {
            // A log without a policy entry gets the defaults written down, so verifiers read
            // them from the log rather than from this code.
            // And a checkpoint of it, so there always is one: public reads never sign.
            // A rewound log opens all the same (for reads, `/readyz` and recovery).
            match l
                .submit(Job::EnsurePolicy)
                .and_then(|_| l.submit(Job::Checkpoint))
            {
                Ok(_) | Err(StoreError::LogRewound(_)) | Err(StoreError::ClockUnreliable(_)) => {
                    Ok(l)
                }
                Err(e) => Err(e),
            }
        })
    }

    /// Sets the ledger clock (`None`: the system clock again). Tests only: the receive times
    /// it gives entries are what the log's time rules are checked against.
    #[cfg(feature = "test-clock")]
    pub fn set_clock(&self, now: Option<Timestamp>) {
        *self.clock.0.lock().expect("clock lock") = now;
    }

    /// Attaches the witnesses, once: from now on checkpoints signed through this handle are
    /// signalled to the witness threads, and with a quorum above 0 invoices and certificates
    /// are issued against a checkpoint that reached it.
    pub fn attach_witnessing(
        &self,
        w: Arc<super::cosignatures::Witnessing>,
    ) -> Result<(), StoreError> {
        self.witnessing
            .set(w)
            .map_err(|_| StoreError::Refused("witnesses are already attached".into()))
    }

    /// The attached witnesses, if any.
    pub fn witnessing(&self) -> Option<&Arc<super::cosignatures::Witnessing>> {
        self.witnessing.get()
    }

    /// The ledger clock's time now (the system clock unless a test set it), unchecked: for
    /// what only reads (a balance as of now).
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// The ledger clock's time now, judged reliable ([`super::clock`]): what every time rule
    /// and every write uses. [`StoreError::ClockUnreliable`] when it is not.
    pub fn checked_now(&self) -> Result<Timestamp, StoreError> {
        self.clock.checked(&self.guard)
    }

    /// Why the ledger's clock was unreliable at its last check, if it was.
    pub fn clock_fault(&self) -> Option<gpuledger_core::clock::Unreliable> {
        self.guard.fault()
    }

    /// Steps of the ledger's clock seen since it opened.
    pub fn clock_steps(&self) -> u64 {
        self.guard.steps()
    }

    /// Sets the issuer, payment terms, taxes and public URL of the invoices issued from now on
    /// (`serve`'s settings; without them: no issuer name, which issuance replaces by the log's
    /// origin, 30 days, no tax).
    pub fn set_invoicing(&self, settings: super::invoices::InvoiceSettings) {
        *self.invoicing.write().expect("invoicing lock") = Arc::new(settings);
    }

    /// Sets what invoice PDFs show besides the document (payment instructions, buyers' tax
    /// ids); the default: nothing.
    pub fn set_invoice_pdf(&self, settings: super::invoices::InvoicePdfSettings) {
        *self.invoice_pdf.write().expect("invoice_pdf lock") = Arc::new(settings);
    }

    /// What invoice PDFs show besides the document.
    pub fn invoice_pdf(&self) -> Arc<super::invoices::InvoicePdfSettings> {
        self.invoice_pdf.read().expect("invoice_pdf lock").clone()
    }

    /// The issuing door: invoices, certificates and settlements, each drafted outside the
    /// head lock and rechecked by the sequencer ([`Issuance`]).
    pub fn issuance(&self) -> Issuance<'_> {
        Issuance { ledger: self }
    }

    /// The invoice settings in force.
    pub fn invoicing(&self) -> Arc<super::invoices::InvoiceSettings> {
        self.invoicing.read().expect("invoicing lock").clone()
    }

    /// Tells the witness threads that a checkpoint may have been signed.
    pub(crate) fn signal_checkpoint(&self) {
        if let Some(w) = self.witnessing.get() {
            w.checkpoint_signed();
        }
    }

    /// Origin, public key and verifier key of this log.
    pub fn info(&self) -> &LogInfo {
        &self.info
    }

    /// The database URL this ledger was opened with.
    pub fn database_url(&self) -> &str {
        &self.url
    }

    /// Records waiting for the sequencer (a gauge for metrics).
    pub fn queue_depth(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    pub(crate) fn submit<T>(&self, make: impl FnOnce(Reply<T>) -> Job) -> Result<T, StoreError> {
        let (tx, rx) = mpsc::sync_channel(1);
        let job = make(tx);
        let records = job.records();
        self.queued.fetch_add(records, Ordering::Relaxed);
        let sent = match self.jobs.as_ref() {
            None => Err(StoreError::WriterStopped),
            Some(jobs) => jobs.try_send(job).map_err(|e| match e {
                mpsc::TrySendError::Full(_) => StoreError::Busy(format!(
                    "{MAX_QUEUED_JOBS} writes are already waiting for the log; nothing was written; retry"
                )),
                mpsc::TrySendError::Disconnected(_) => StoreError::WriterStopped,
            }),
        };
        if let Err(e) = sent {
            self.queued.fetch_sub(records, Ordering::Relaxed);
            return Err(e);
        }
        // The sequencer dropped the reply without answering: the job panicked.
        rx.recv()
            .map_err(|_| StoreError::Internal("the write job failed unexpectedly".into()))?
    }

    /// Appends a batch of signed envelopes. Returns one outcome per envelope, in order, after
    /// the accepted ones are committed. A batch over [`MAX_APPEND_BATCH`] is refused whole.
    pub fn append(&self, batch: Vec<Envelope>) -> Result<Vec<Outcome>, StoreError> {
        Ok(self.append_inner(batch, true)?.outcomes)
    }

    /// [`Ledger::append`], also saying which records' signatures verified (those the
    /// sequencer judged, accepted or refused, and those refused before it by the scope, party
    /// or fleet rules): what a signer's rate limit charges, so that
    /// forged records naming a signer cannot spend its budget, and a validly signed flood of
    /// refusals (conflicting re-signed variants, overlaps) does.
    pub fn append_judged(&self, batch: Vec<Envelope>) -> Result<Appended, StoreError> {
        self.append_inner(batch, true)
    }

    /// Like [`Ledger::append`] but trusts every signature. Compiled only with the
    /// `bench-unchecked-append` cargo feature (off in every release build), so that
    /// `gpuledger bench append` can measure what the signature checks cost.
    #[cfg(feature = "bench-unchecked-append")]
    pub fn append_unchecked_signatures(
        &self,
        batch: Vec<Envelope>,
    ) -> Result<Vec<Outcome>, StoreError> {
        Ok(self.append_inner(batch, false)?.outcomes)
    }

    fn append_inner(&self, batch: Vec<Envelope>, verify: bool) -> Result<Appended, StoreError> {
        if batch.len() > MAX_APPEND_BATCH {
            return Err(StoreError::BatchTooLarge(batch.len(), MAX_APPEND_BATCH));
        }
        if batch.is_empty() {
            return Ok(Appended::default());
        }
        let origin = self.info.origin.as_str();
        let checked: Vec<Result<Checked, Rejection>> =
            batch.into_par_iter().map(|e| e.check(origin)).collect();
        let mut outcomes: Vec<Option<Outcome>> = vec![None; checked.len()];
        let cache = self.keys_for(&checked)?;
        let Authorised {
            mut pending,
            unknown_keys,
            out_of_scope,
        } = authorise_all(checked, &cache, &mut outcomes);
        self.refuse_unknown_keys(unknown_keys, &mut outcomes)?;
        let mut refused = self.check_parties(&mut pending)?;
        refused.extend(out_of_scope);
        let mut signed = vec![false; outcomes.len()];
        // A scope, party or fleet refusal is given only for a record whose signature verifies:
        // otherwise anyone could learn, without a key, which nodes a key may name and which
        // tenants, leases and GPUs a node has (a forgery is answered `bad_signature`).
        if !refused.is_empty() {
            let (refused, reasons): (Vec<Pending>, Vec<Rejection>) = refused.into_iter().unzip();
            let at: Vec<usize> = refused.iter().map(|(i, _, _)| *i).collect();
            let (good, _) = verify_signatures(refused, verify, &mut outcomes);
            let reasons: HashMap<usize, Rejection> = at.into_iter().zip(reasons).collect();
            for i in good {
                outcomes[i] = Some(Outcome::Rejected(reasons[&i].clone()));
                signed[i] = true;
            }
        }
        let (positions, verified) = verify_signatures(pending, verify, &mut outcomes);
        if !verified.is_empty() {
            let committed = self.submit(|reply| Job::Append(verified, reply))?;
            debug_assert_eq!(
                committed.len(),
                positions.len(),
                "one outcome per record sent"
            );
            for (i, o) in positions.into_iter().zip(committed) {
                outcomes[i] = Some(o);
                signed[i] = true;
            }
        }
        Ok(Appended {
            outcomes: outcomes
                .into_iter()
                .map(|o| o.expect("every record has an outcome"))
                .collect(),
            signed,
        })
    }

    /// Answers the records whose key is not registered: `unknown_signer` when their signer
    /// has no key at all, else `unknown_key`. One query for all their distinct signer ids, so
    /// a batch from strangers costs one lookup, not one per record.
    fn refuse_unknown_keys(
        &self,
        unknown_keys: Vec<(usize, Rejection, String)>,
        outcomes: &mut [Option<Outcome>],
    ) -> Result<(), StoreError> {
        if unknown_keys.is_empty() {
            return Ok(());
        }
        let mut signers: Vec<&str> = unknown_keys.iter().map(|(_, _, s)| s.as_str()).collect();
        signers.sort_unstable();
        signers.dedup();
        let known: std::collections::HashSet<String> = self
            .reads
            .run(|c| read::known_signers(c, &signers))?
            .into_iter()
            .collect();
        for (i, r, signer) in unknown_keys {
            outcomes[i] = Some(Outcome::Rejected(if known.contains(&signer) {
                r
            } else {
                Rejection::field(
                    Reason::UnknownSigner,
                    "signer",
                    format!("{signer} is not a registered signer"),
                )
            }));
        }
        Ok(())
    }

    /// Takes from `pending` the records the party rules (`admission::check_parties`: tenant
    /// and lease registered) or the fleet rules (`fleet::check_fleet`: node, lease coverage)
    /// refuse, with their refusals. Tenants, leases and nodes are looked up only for records
    /// whose key may sign them, so a stranger's records cost no database work here.
    fn check_parties(
        &self,
        pending: &mut Vec<Pending>,
    ) -> Result<Vec<(Pending, Rejection)>, StoreError> {
        self.load_parties(pending.iter().map(|(_, c, _)| c))?;
        // The refusals first, by position; then the refused records taken out in one pass.
        let judge = |pending: &[Pending]| {
            let parties = self.parties.read().expect("parties cache lock");
            let mut reasons: Vec<(usize, Rejection)> = Vec::new();
            for (at, (_, c, _)) in pending.iter().enumerate() {
                // A stale node or lease can only refuse what the log accepts, never the
                // reverse (below).
                let r = admission::check_parties(&c.body, u64::MAX, &*parties).and_then(|()| {
                    gpuledger_core::fleet::check_fleet(&c.body, u64::MAX, &parties.fleet)
                });
                if let Err(r) = r {
                    reasons.push((at, r));
                }
            }
            reasons
        };
        let mut reasons = judge(pending);
        // The cache may be stale: a node updated since it was read (GPUs added, a higher
        // power limit), or a lease of a tenant registered since (a tenant's energy names no
        // lease). Nodes only gain capacity and leases are only ever added, and more never
        // refuses what less accepted: a fleet refusal is judged again, once a batch, after
        // the refused records' nodes (and, for a tenant's energy, every lease) are read afresh.
        let stale = |(at, r): &(usize, Rejection)| {
            matches!(
                r.reason,
                Reason::UnknownGpuModel
                    | Reason::OverCapacity
                    | Reason::EnergyOverBound
                    | Reason::LeaseNotOnNode
                    | Reason::OutsideLeaseTerm
            ) && matches!(&pending[*at].1.body, Body::GpuUsage(_) | Body::Energy(_))
        };
        if reasons.iter().any(stale) {
            let mut nodes: Vec<&str> = reasons
                .iter()
                .filter(|r| stale(r))
                .filter_map(|(at, _)| match &pending[*at].1.body {
                    Body::GpuUsage(u) => Some(u.node.as_str()),
                    Body::Energy(e) => Some(e.node.as_str()),
                    _ => None,
                })
                .collect();
            nodes.sort_unstable();
            nodes.dedup();
            // A usage record names its lease, which the cache holds as logged.
            let leases = reasons.iter().filter(|r| stale(r)).any(
                |(at, _)| matches!(&pending[*at].1.body, Body::Energy(e) if e.tenant.is_some()),
            );
            self.refresh_parties(|c, found| {
                if leases {
                    found.fill_leases(c, u64::MAX >> 1)?;
                }
                found.fill_nodes(c, u64::MAX >> 1, &nodes)
            })?;
            reasons = judge(pending);
        }
        if reasons.is_empty() {
            return Ok(Vec::new());
        }
        let mut refused_at = reasons.iter().map(|(i, _)| *i).peekable();
        let mut taken = Vec::with_capacity(reasons.len());
        let mut kept = Vec::with_capacity(pending.len() - reasons.len());
        for (at, p) in pending.drain(..).enumerate() {
            if refused_at.peek() == Some(&at) {
                refused_at.next();
                taken.push(p);
            } else {
                kept.push(p);
            }
        }
        *pending = kept;
        Ok(taken
            .into_iter()
            .zip(reasons.into_iter().map(|(_, r)| r))
            .collect())
    }

    /// The cached keys for a batch, loading any missing ones from the database.
    fn keys_for(
        &self,
        checked: &[Result<Checked, Rejection>],
    ) -> Result<HashMap<String, Option<CachedKey>>, StoreError> {
        let mut out: HashMap<String, Option<CachedKey>> = HashMap::new();
        let mut missing: Vec<&str> = Vec::new();
        {
            let cache = self.keys.read().expect("key cache lock");
            for c in checked.iter().flatten() {
                let id = c.envelope.key_id.as_str();
                if out.contains_key(id) {
                    continue;
                }
                match cache.get(id) {
                    Some(k) => {
                        out.insert(id.to_owned(), Some(k.clone()));
                    }
                    None => {
                        out.insert(id.to_owned(), None);
                        missing.push(id);
                    }
                }
            }
        }
        if missing.is_empty() {
            return Ok(out);
        }
        let rows = self.reads.run(|c| read::keys(c, Some(&missing)))?;
        let mut cache = self.keys.write().expect("key cache lock");
        for r in rows {
            let key = VerifyingKey::from_bytes(
                &r.public_key
                    .as_slice()
                    .try_into()
                    .map_err(|_| StoreError::Corrupt(format!("key {} length", r.key_id)))?,
            )
            .map_err(|_| StoreError::Corrupt(format!("key {} is not a point", r.key_id)))?;
            let registration = self
                .reads
                .run(|c| read::registration(c, r.registered_idx as u64))?;
            if registration.key_id != r.key_id || registration.signer != r.signer {
                return Err(StoreError::Corrupt(format!(
                    "key {} does not match its registration entry",
                    r.key_id
                )));
            }
            let k = CachedKey { registration, key };
            cache.insert(r.key_id.clone(), k.clone());
            out.insert(r.key_id, Some(k));
        }
        Ok(out)
    }

    /// Adds to the cache the registrations of the tenants and leases `records` name that it
    /// lacks: one query for the tenants, one for the leases, only when some are missing.
    fn load_parties<'a>(
        &self,
        records: impl Iterator<Item = &'a Checked>,
    ) -> Result<(), StoreError> {
        let (mut tenants, mut leases): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
        let mut nodes: Vec<&str> = Vec::new();
        {
            let known = self.parties.read().expect("parties cache lock");
            for c in records {
                if let Some(t) = c.body.tenant().filter(|t| !known.tenants.contains_key(*t)) {
                    tenants.push(t);
                }
                let node = match &c.body {
                    gpuledger_core::record::Body::GpuUsage(u) => Some(u.node.as_str()),
                    gpuledger_core::record::Body::Energy(e) => Some(e.node.as_str()),
                    _ => None,
                };
                if let Some(n) = node.filter(|n| known.fleet.node(n).is_none()) {
                    nodes.push(n);
                }
                if let gpuledger_core::record::Body::GpuUsage(u) = &c.body {
                    if let Some(l) = u
                        .lease
                        .as_deref()
                        .filter(|l| known.fleet.lease(l).is_none())
                    {
                        leases.push(l);
                    }
                }
            }
        }
        if tenants.is_empty() && leases.is_empty() && nodes.is_empty() {
            return Ok(());
        }
        tenants.sort_unstable();
        tenants.dedup();
        self.refresh_parties(|c, found| {
            found.fill(c, u64::MAX >> 1, &tenants, &leases)?;
            found.fill_nodes(c, u64::MAX >> 1, &nodes)
        })
    }

    /// Reads registrations from the log with `fill` (on one read connection) and merges them
    /// into the parties cache ([`read::DbParties::merge`]: a node read earlier never replaces
    /// one read later).
    fn refresh_parties(
        &self,
        mut fill: impl FnMut(&mut DbConn, &mut read::DbParties) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let found = self.reads.run(|c| {
            let mut found = read::DbParties::default();
            fill(c, &mut found)?;
            Ok(found)
        })?;
        self.parties
            .write()
            .expect("parties cache lock")
            .merge(found);
        Ok(())
    }

    /// Registers a node or market signer's public key (base64) for the nodes and regions of
    /// `scope` (`None`: the scope of the signer's latest key, for a rotation); returns its key
    /// id and the index of the `signer_key_registered` entry.
    pub fn register_key(
        &self,
        signer: &str,
        role: Role,
        public_key: &str,
        scope: Option<KeyScope>,
    ) -> Result<(String, u64), StoreError> {
        self.submit(|reply| Job::Register {
            signer: signer.to_owned(),
            role,
            public_key: public_key.to_owned(),
            scope,
            reply,
        })
    }

    /// Registers a tenant (a `tenant_registered` entry); returns its index.
    pub fn register_tenant(&self, tenant: &str) -> Result<u64, StoreError> {
        self.append_ledger_entry(gpuledger_core::record::Body::TenantRegistered(
            gpuledger_core::record::TenantRegistered {
                tenant: tenant.to_owned(),
            },
        ))
    }

    /// Revokes a key; returns the index of the `signer_key_revoked` entry.
    pub fn revoke_key(
        &self,
        signer: &str,
        key_id: &str,
        reason: Option<String>,
    ) -> Result<u64, StoreError> {
        self.submit(|reply| Job::Revoke {
            signer: signer.to_owned(),
            key_id: key_id.to_owned(),
            reason,
            reply,
        })
    }

    /// Appends a rate card, region parameters or a lease declaration as an entry signed by the
    /// log key; returns its index.
    pub fn append_ledger_entry(
        &self,
        body: gpuledger_core::record::Body,
    ) -> Result<u64, StoreError> {
        self.submit(|reply| Job::LedgerEntry(Box::new(body), reply))
    }

    /// Runs the write probe: a small transaction through the sequencer that writes no log
    /// entry (it stamps the `write_probe` meta row), so readiness follows the write path.
    pub fn probe_write(&self) -> Result<(), StoreError> {
        self.submit(Job::Probe)
    }

    /// The result of the latest write transaction (`None` before the first).
    pub fn write_state(&self) -> Option<WriteState> {
        self.health.latest()
    }

    /// Signs a checkpoint of the current head if the latest one does not cover it; returns the
    /// size and signed note of the latest checkpoint.
    pub fn checkpoint(&self) -> Result<(u64, String), StoreError> {
        let signed = self.submit(Job::Checkpoint)?;
        self.signal_checkpoint();
        Ok(signed)
    }

    /// The read door: read-only connections and the log's public reads.
    pub fn reads(&self) -> &Reads {
        &self.reads
    }

    /// Why the log is rewound (the database does not hold the high-water mark's tree), if it
    /// is: no write or signature is made meanwhile.
    pub fn rewound(&self) -> Option<super::high_water::Rewound> {
        self.high_water.rewound()
    }

    /// The high-water mark: raise it from a published checkpoint, learn a witness's size.
    pub fn high_water(&self) -> &HighWater {
        &self.high_water
    }

    /// Whether every embedded migration has been applied (for `/readyz`). Not on the read
    /// door: diesel's check first makes sure its migrations table exists (`CREATE TABLE IF
    /// NOT EXISTS`), which a read-only PostgreSQL session refuses even when the table is there.
    pub fn migrations_current(&self) -> Result<bool, StoreError> {
        self.with_account_writer(conn::migrations_current)
    }

    /// Runs `f` on the connection for writes outside the log: tenant accounts and API tokens
    /// (`store::access`), which are not log entries. One at a time; a connection whose database
    /// call failed is reopened next time.
    pub fn with_account_writer<T>(
        &self,
        mut f: impl FnMut(&mut DbConn) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut slot = self.account_writer.lock().expect("account writer lock");
        let mut attempt = 0;
        loop {
            let conn = match slot.as_mut() {
                Some(c) => c,
                None => slot.insert(conn::connect(&self.url)?),
            };
            let r = f(conn);
            // SQLite in WAL mode answers "database is locked" at once, without waiting, when a
            // transaction that read first then writes finds that another connection (the
            // sequencer) committed since its read: the whole transaction is run again.
            if attempt < ACCOUNT_WRITE_RETRIES && matches!(&r, Err(e) if e.is_sqlite_busy()) {
                attempt += 1;
                std::thread::sleep(std::time::Duration::from_millis(20 * attempt as u64));
                continue;
            }
            if matches!(&r, Err(e) if e.discards_connection()) {
                *slot = None;
            }
            return r;
        }
    }
}

/// A record that passed its checks so far: its position in the batch, the checked envelope and
/// the key to verify it with.
type Pending = (usize, Checked, VerifyingKey);

/// Sorts a checked batch: records refused by their checks or by [`authorise`] get their
/// outcome; those whose key is not cached come back apart (position, rejection, signer) for
/// [`Ledger::refuse_unknown_keys`]; the rest are pending, with their key.
fn authorise_all(
    checked: Vec<Result<Checked, Rejection>>,
    cache: &HashMap<String, Option<CachedKey>>,
    outcomes: &mut [Option<Outcome>],
) -> Authorised {
    let mut out = Authorised {
        pending: Vec::with_capacity(checked.len()),
        ..Authorised::default()
    };
    for (i, c) in checked.into_iter().enumerate() {
        let c = match c {
            Ok(c) => c,
            Err(r) => {
                outcomes[i] = Some(Outcome::Rejected(r));
                continue;
            }
        };
        match authorise(&c, cache) {
            Ok((key, None)) => out.pending.push((i, c, key)),
            Ok((key, Some(r))) => out.out_of_scope.push(((i, c, key), r)),
            Err(r) if r.reason == Reason::UnknownKey => {
                out.unknown_keys.push((i, r, c.envelope.signer))
            }
            Err(r) => outcomes[i] = Some(Outcome::Rejected(r)),
        }
    }
    out
}

/// A batch sorted by [`authorise_all`].
#[derive(Default)]
struct Authorised {
    /// Records whose key may sign them.
    pending: Vec<Pending>,
    /// Records whose key is not registered: (position, rejection, signer).
    unknown_keys: Vec<(usize, Rejection, String)>,
    /// Records outside their key's scope, with the refusal given if their signature verifies.
    out_of_scope: Vec<(Pending, Rejection)>,
}

/// Verifies the pending records' signatures (in parallel; all trusted when `verify` is false,
/// the benchmark's build only); answers `bad_signature` for those that fail and returns the
/// others with their positions in the batch.
fn verify_signatures(
    pending: Vec<Pending>,
    verify: bool,
    outcomes: &mut [Option<Outcome>],
) -> (Vec<usize>, Vec<Verified>) {
    let ok = if verify {
        let items: Vec<(&[u8], &ed25519_dalek::Signature, &VerifyingKey)> = pending
            .iter()
            .map(|(_, c, k)| (c.message.as_slice(), &c.signature, k))
            .collect();
        envelope::verify_strict_many(&items)
    } else {
        vec![true; pending.len()]
    };
    debug_assert_eq!(ok.len(), pending.len());
    let mut positions = Vec::with_capacity(pending.len());
    let mut verified = Vec::with_capacity(pending.len());
    for ((i, c, _), good) in pending.into_iter().zip(ok) {
        if good {
            positions.push(i);
            verified.push(Verified { checked: c });
        } else {
            outcomes[i] = Some(Outcome::Rejected(Rejection::field(
                Reason::BadSignature,
                "sig",
                format!(
                    "does not verify with key {} over the canonical bytes",
                    c.envelope.key_id
                ),
            )));
        }
    }
    (positions, verified)
}

/// `WrongLogKey` unless `key` is the log key recorded at `init`.
fn check_log_key(info: &LogInfo, key: &SigningKey) -> Result<(), StoreError> {
    let found = keys::encode_public(&key.verifying_key());
    if found != info.public_key {
        return Err(StoreError::WrongLogKey {
            expected: info.public_key.clone(),
            found,
        });
    }
    Ok(())
}

/// A started sequencer: its queue's sender, its thread, and the gauge of records waiting.
type Started = (mpsc::SyncSender<Job>, JoinHandle<()>, Arc<AtomicUsize>);

/// Starts the sequencer thread with its bounded queue ([`MAX_QUEUED_JOBS`]); returns the
/// queue's sender, the thread and the gauge of records waiting.
fn start_sequencer(w: Writer, log: write::Signer) -> Result<Started, StoreError> {
    let (tx, rx) = mpsc::sync_channel::<Job>(MAX_QUEUED_JOBS);
    let queued = Arc::new(AtomicUsize::new(0));
    let q = queued.clone();
    let writer = std::thread::Builder::new()
        .name("gpuledger-sequencer".into())
        .spawn(move || sequencer(w, &log, rx, &q))
        .map_err(|e| StoreError::Refused(format!("cannot start the sequencer thread: {e}")))?;
    Ok((tx, writer, queued))
}

/// The outcomes of an append, one per record in order, and for each whether its signature
/// verified ([`Ledger::append_judged`]).
#[derive(Debug, Default)]
pub struct Appended {
    pub outcomes: Vec<Outcome>,
    pub signed: Vec<bool>,
}

/// Checks the signer, key, role and scope of a record against the registry (the rules of
/// [`admission::check_key`] and [`admission::check_scope`]). Revocation is checked only under
/// the write lock, after the duplicate check, so that resending a record logged before its key
/// was revoked still answers `duplicate`. Returns the key to verify with, and the scope
/// refusal to give if the signature verifies (a forgery is not told which nodes and regions
/// the key may name).
fn authorise(
    c: &Checked,
    cache: &HashMap<String, Option<CachedKey>>,
) -> Result<(VerifyingKey, Option<Rejection>), Rejection> {
    let env = &c.envelope;
    if c.kind.signed_by() == Role::Ledger {
        return Err(admission::ledger_kind_submitted(c.kind));
    }
    let k = match cache.get(&env.key_id).cloned().flatten() {
        Some(k) => k,
        None => return Err(unknown(env)),
    };
    admission::check_key(&k.registration, c.kind, &env.signer, None)?;
    Ok((
        k.key,
        admission::check_scope(&k.registration, &c.body).err(),
    ))
}

/// The key is not registered; `append_inner` turns this into `unknown_signer` when the signer
/// id is not registered either.
fn unknown(env: &Envelope) -> Rejection {
    Rejection::field(
        Reason::UnknownKey,
        "key_id",
        format!("{} is not a registered key", env.key_id),
    )
}

impl Drop for Ledger {
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

/// A queued append: its verified records and where its outcomes go.
type QueuedAppend = (Vec<write::Verified>, Reply<Vec<Outcome>>);

/// The write thread: takes queued jobs in groups (up to [`MAX_GROUP_RECORDS`] records), runs
/// each non-append job in its own transaction, and every append of the group in one.
fn sequencer(mut w: Writer, log: &write::Signer, rx: mpsc::Receiver<Job>, queued: &AtomicUsize) {
    while let Ok(first) = rx.recv() {
        let mut n = first.records();
        let mut jobs = vec![first];
        while n < MAX_GROUP_RECORDS {
            match rx.try_recv() {
                Ok(j) => {
                    n += j.records();
                    jobs.push(j);
                }
                Err(_) => break,
            }
        }
        // A group stops taking jobs at MAX_GROUP_RECORDS; the last one taken is at most a batch.
        debug_assert!(n < MAX_GROUP_RECORDS + MAX_APPEND_BATCH.max(1));
        // Every job of the group is stamped with one reading of the clock, judged first: while
        // it is unreliable every job is answered `ClockUnreliable` (Writer::run).
        let (now, fault) = match w.clock.checked(&w.guard) {
            Ok(t) => (t, None),
            Err(e) => (w.clock.now(), Some(e.to_string())),
        };
        w.clock_fault = fault;
        // A panic (a bug) fails the jobs of this group only: their callers get an internal
        // error, the connection and caches are discarded, and the sequencer goes on.
        let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let appends: Vec<QueuedAppend> = jobs
                .into_iter()
                .filter_map(|job| run_job(&mut w, log, job, now))
                .collect();
            if !appends.is_empty() {
                append_queued(&mut w, appends, n, now);
            }
        }));
        if done.is_err() {
            tracing::error!(
                "a write job panicked; its callers were answered with an internal error"
            );
            w.conn = None;
            w.caches = Default::default();
        }
        queued.fetch_sub(n, Ordering::Relaxed);
    }
}

/// The sequencer's side of the database: its one write connection, made again after any
/// database failure (a restarted PostgreSQL, a broken transaction), the caches that describe
/// the log as it last committed, and the write health it reports.
struct Writer {
    url: String,
    conn: Option<DbConn>,
    clock: Clock,
    caches: (write::StreamCache, write::SpotCache),
    health: Arc<WriteHealth>,
    high_water: Arc<HighWater>,
    /// Whether the connection was checked against the high-water mark.
    checked: bool,
    /// The ledger clock's guard, and why the current group's reading was refused, if it was.
    guard: Arc<ClockGuard>,
    clock_fault: Option<String>,
}

impl Writer {
    /// Runs one write on the connection, opening one first if the last was discarded; a
    /// result that says the connection is broken discards it (and the caches) so the next
    /// write starts afresh. Every outcome is reported to the write health. A new connection
    /// (and, while the log is rewound, every write) is first checked against the high-water
    /// mark: a database that does not hold the marked tree is not written to.
    fn run<T>(
        &mut self,
        f: impl FnOnce(
            &mut DbConn,
            &mut (write::StreamCache, write::SpotCache),
        ) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if let Some(why) = &self.clock_fault {
            return Err(StoreError::ClockUnreliable(why.clone()));
        }
        let conn = match self.conn.as_mut() {
            Some(c) => c,
            None => match conn::connect(&self.url) {
                Ok(c) => {
                    self.checked = false;
                    self.conn.insert(c)
                }
                Err(e) => {
                    self.health.record(Err(&e));
                    return Err(e);
                }
            },
        };
        if !self.checked || self.high_water.take_recheck() || self.high_water.rewound().is_some() {
            if let Err(e) = self.high_water.check(conn) {
                if e.discards_connection() {
                    self.conn = None;
                }
                self.health.record(Err(&e));
                return Err(e);
            }
            self.checked = true;
        }
        let r = f(conn, &mut self.caches);
        // The checkpoint this write signed (if it committed) becomes the mark, saved before
        // its caller is answered.
        let saved = self.high_water.settle(r.is_ok());
        let r = match (r, saved) {
            (Ok(v), Ok(())) => Ok(v),
            // Committed, so answered as done: the unsaved mark stops the next signature.
            (Ok(v), Err(_)) => Ok(v),
            (Err(e), _) => Err(e),
        };
        match &r {
            Err(e) if e.discards_connection() => {
                tracing::warn!(error = %e, "write failed; the sequencer will reconnect");
                self.conn = None;
                self.caches = Default::default();
                self.health.record(Err(e));
            }
            // A refusal is the write path working.
            _ => self.health.record(Ok(())),
        }
        r
    }
}

/// What the write path last did: the readiness probe's source. Updated by the sequencer after
/// every transaction, failed or committed.
#[derive(Default)]
pub struct WriteHealth {
    state: Mutex<Option<WriteState>>,
}

/// The latest write's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteState {
    /// The latest write committed (or was refused for a reason that is not an outage).
    Ok,
    /// The latest write failed: an outage when it is one, `None` for another failure.
    Failed(Option<super::error::Outage>),
}

impl WriteHealth {
    fn record(&self, r: Result<(), &StoreError>) {
        let state = match r {
            Ok(()) => WriteState::Ok,
            Err(e) => WriteState::Failed(e.outage()),
        };
        *self.state.lock().expect("write health lock") = Some(state);
    }

    /// The latest write's result; `None` before the first write.
    pub fn latest(&self) -> Option<WriteState> {
        *self.state.lock().expect("write health lock")
    }
}

/// Runs one job that is not an append and answers it; an append is handed back to be grouped.
fn run_job(w: &mut Writer, log: &write::Signer, job: Job, now: Timestamp) -> Option<QueuedAppend> {
    match job {
        Job::Append(v, reply) => return Some((v, reply)),
        Job::Register {
            signer,
            role,
            public_key,
            scope,
            reply,
        } => {
            let r =
                w.run(|c, _| write::register_key(c, log, &signer, role, &public_key, scope, now));
            let _ = reply.send(r);
        }
        Job::EnsurePolicy(reply) => {
            let _ = reply.send(w.run(|c, _| write::ensure_policy(c, log, now)));
        }
        Job::Probe(reply) => {
            let _ = reply.send(w.run(|c, _| write::probe(c, now)));
        }
        Job::Revoke {
            signer,
            key_id,
            reason,
            reply,
        } => {
            let r = w.run(|c, _| write::revoke_key(c, log, &signer, &key_id, reason, now));
            let _ = reply.send(r);
        }
        Job::LedgerEntry(body, reply) => {
            let _ = reply.send(w.run(|c, _| write::ledger_entry(c, log, &body, now)));
        }
        Job::Issue(draft, reply) => {
            let _ = reply.send(w.run(|c, _| super::invoices::issue(c, log, &draft, now)));
        }
        Job::Certify(draft, reply) => {
            let _ = reply.send(w.run(|c, _| super::certificates::issue(c, log, &draft, now)));
        }
        Job::Settle(body, excess, reply) => {
            let _ = reply.send(w.run(|c, _| super::invoices::settle(c, log, &body, excess, now)));
        }
        Job::Checkpoint(reply) => {
            let _ = reply.send(w.run(|c, _| write::checkpoint(c, log, now)));
        }
    }
    None
}

/// Appends the group's queued batches in one transaction and answers each after the commit;
/// when the group fails, retries each batch alone so one bad batch fails only itself (after an
/// outage each retry fails fast and answers its batch with the outage).
fn append_queued(w: &mut Writer, appends: Vec<QueuedAppend>, records: usize, now: Timestamp) {
    let (batches, replies): (Vec<_>, Vec<_>) = appends.into_iter().unzip();
    let started = std::time::Instant::now();
    let result = w.run(|c, (streams, spots)| write::append_group(c, &batches, now, streams, spots));
    metrics::histogram!("gpuledger_commit_seconds").record(started.elapsed().as_secs_f64());
    metrics::histogram!("gpuledger_commit_group_records").record(records as f64);
    match result {
        Ok(outs) => {
            for (o, r) in outs.into_iter().zip(replies) {
                let _ = r.send(Ok(o));
            }
        }
        Err(_) if batches.len() > 1 => {
            for (b, r) in batches.into_iter().zip(replies) {
                let res = w
                    .run(|c, (streams, spots)| {
                        write::append_group(c, std::slice::from_ref(&b), now, streams, spots)
                    })
                    .map(|mut o| o.pop().unwrap_or_default());
                let _ = r.send(res);
            }
        }
        Err(e) => {
            let _ = replies.into_iter().next().map(|r| r.send(Err(e)));
        }
    }
}
