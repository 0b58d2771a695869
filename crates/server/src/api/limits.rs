//! What one client may take from the server: request rates per client address, accepted
//! records per signer, certificate issuances per tenant (token buckets answering 429 with
//! `Retry-After`), and a count of concurrent ingest bodies (503 `busy` past it).
//!
//! The token buckets are our own rather than `governor`'s: a batch of records names several
//! signers and is admitted only if every one of them has the budget (all or nothing, checked
//! under one lock; a batch with more records of one signer than its burst is refused whole),
//! and is charged afterwards for the records the ledger judged with a verified signature,
//! accepted or refused (duplicates excepted), so that forged records naming a signer cannot
//! spend that signer's budget and a validly signed flood of conflicts does; governor's keyed limiter
//! charges one key at a time, at the check, and cannot give tokens back. Here a bucket is two
//! numbers in a `HashMap` behind a mutex, pruned as it goes, with a hard cap on its keys so its
//! memory is bounded too.

use super::error::ApiError;
use super::AppState;
use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::{middleware, web, ResponseError};
use std::collections::HashMap;
use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most keys one rate limiter tracks (about 100 bytes each). Past it the buckets with the
/// most tokens left, the least limited callers, are forgotten first.
pub const MAX_TRACKED_KEYS: usize = 100_000;

/// How often a rate limiter drops the buckets that have filled up again (a full bucket is the
/// same as none).
pub const PRUNE_INTERVAL: Duration = Duration::from_secs(10);

/// The limits of `serve`, as resolved from its settings (docs/CONFIGURATION.md). A rate or a
/// count of 0 turns its limit off; a timeout of 0 waits for ever.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitSettings {
    /// Longest wait for the next piece of a request body.
    pub body_idle_timeout: Duration,
    /// Longest time to read a whole request body.
    pub body_timeout: Duration,
    /// Bodies of `POST /v1/records` read and processed at once; past it, 503 `busy`.
    pub max_concurrent_ingest: usize,
    /// Requests per second under `/v1` and to the tiles from one client address (IPv6: one
    /// /64).
    pub client_rate_per_second: u32,
    /// Requests one client address may make at once before its rate applies.
    pub client_rate_burst: u32,
    /// Accepted records per second of one signer.
    pub signer_rate_per_second: u32,
    /// Records one signer may send at once before its rate applies.
    pub signer_rate_burst: u32,
    /// `POST /v1/certificates` requests per minute of one tenant (with a tenant token).
    pub tenant_certificates_per_minute: u32,
}

/// Default [`LimitSettings::body_idle_timeout`]: 15 s.
pub const DEFAULT_BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(15);
/// Default [`LimitSettings::body_timeout`]: 60 s (8 MiB at about 1 Mbit/s).
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(60);
/// Default [`LimitSettings::max_concurrent_ingest`]: 16, so stalled or slow ingest bodies
/// hold at most 16 × 8 MiB.
pub const DEFAULT_MAX_CONCURRENT_INGEST: usize = 16;
/// Default [`LimitSettings::client_rate_per_second`].
pub const DEFAULT_CLIENT_RATE_PER_SECOND: u32 = 1_000;
/// Default [`LimitSettings::client_rate_burst`].
pub const DEFAULT_CLIENT_RATE_BURST: u32 = 5_000;
/// Default [`LimitSettings::signer_rate_per_second`]: above what one server appends, so it
/// limits a runaway signer only on a machine that could take more.
pub const DEFAULT_SIGNER_RATE_PER_SECOND: u32 = 20_000;
/// Default [`LimitSettings::signer_rate_burst`]: an agent draining a backlog of a million
/// records after an outage (what `gpuledger bench agent` does) is not slowed.
pub const DEFAULT_SIGNER_RATE_BURST: u32 = 1_000_000;
/// Default [`LimitSettings::tenant_certificates_per_minute`].
pub const DEFAULT_TENANT_CERTIFICATES_PER_MINUTE: u32 = 60;

impl Default for LimitSettings {
    fn default() -> Self {
        LimitSettings {
            body_idle_timeout: DEFAULT_BODY_IDLE_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_concurrent_ingest: DEFAULT_MAX_CONCURRENT_INGEST,
            client_rate_per_second: DEFAULT_CLIENT_RATE_PER_SECOND,
            client_rate_burst: DEFAULT_CLIENT_RATE_BURST,
            signer_rate_per_second: DEFAULT_SIGNER_RATE_PER_SECOND,
            signer_rate_burst: DEFAULT_SIGNER_RATE_BURST,
            tenant_certificates_per_minute: DEFAULT_TENANT_CERTIFICATES_PER_MINUTE,
        }
    }
}

/// The server's limiters, one set per process (in [`AppState`]).
pub struct Limits {
    pub settings: LimitSettings,
    ingest: Slots,
    clients: Option<RateLimiter<ClientKey>>,
    signers: Option<RateLimiter<String>>,
    tenants: Option<RateLimiter<String>>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits::new(LimitSettings::default())
    }
}

impl Limits {
    pub fn new(settings: LimitSettings) -> Self {
        Limits {
            ingest: Slots::new(settings.max_concurrent_ingest),
            clients: RateLimiter::new(
                f64::from(settings.client_rate_per_second),
                settings.client_rate_burst,
            ),
            signers: RateLimiter::new(
                f64::from(settings.signer_rate_per_second),
                settings.signer_rate_burst,
            ),
            tenants: RateLimiter::new(
                f64::from(settings.tenant_certificates_per_minute) / 60.0,
                settings.tenant_certificates_per_minute,
            ),
            settings,
        }
    }

    /// A slot for one ingest body, or 503 `busy` with `Retry-After` when all are taken.
    pub fn ingest_slot(&self) -> Result<Slot<'_>, ApiError> {
        self.ingest.try_acquire().ok_or_else(|| {
            metrics::counter!("gpuledger_ingest_busy_total").increment(1);
            ApiError::unavailable(
                "busy",
                format!(
                    "{} record batches are being received already; retry later",
                    self.settings.max_concurrent_ingest
                ),
                BUSY_RETRY_AFTER_SECONDS,
            )
        })
    }

    /// Whether every signer of a batch (`(signer, records)`) has the budget for its records
    /// now; 429 otherwise. Charges nothing: see [`Limits::charge_signers`].
    pub fn check_signers<'a>(
        &self,
        records: impl IntoIterator<Item = (&'a str, u64)>,
    ) -> Result<(), ApiError> {
        let Some(l) = &self.signers else {
            return Ok(());
        };
        let records: Vec<(&str, u64)> = records.into_iter().collect();
        // More records of one signer than its burst would never pass: refused whole at once.
        if let Some((signer, n)) = records.iter().find(|(_, n)| *n as f64 > l.burst()) {
            return Err(ApiError::TooLarge {
                slug: "too_many_records",
                detail: format!(
                    "{n} records of signer {signer} in one request; its rate burst is {} (signer_rate_burst): send smaller batches",
                    l.burst()
                ),
            });
        }
        l.check(records.into_iter().map(|(s, n)| (s.to_owned(), n)), false)
            .map_err(|w| refused("signer", w, "a signer of this batch sent more records than its rate allows; nothing was appended"))
    }

    /// Charges each signer for the records of it the ledger judged with a verified signature
    /// (accepted, or refused after verification), duplicates excepted.
    pub fn charge_signers<'a>(&self, accepted: impl IntoIterator<Item = (&'a str, u64)>) {
        if let Some(l) = &self.signers {
            l.charge(accepted.into_iter().map(|(s, n)| (s.to_owned(), n)));
        }
    }

    /// One certificate request of `tenant`, or 429.
    pub fn certificate(&self, tenant: &str) -> Result<(), ApiError> {
        let Some(l) = &self.tenants else {
            return Ok(());
        };
        l.check([(tenant.to_owned(), 1)], true).map_err(|w| {
            refused(
                "tenant",
                w,
                "this tenant asked for more certificates than its rate allows",
            )
        })
    }

    /// One request of the client at `addr`, or 429.
    pub fn client(&self, addr: IpAddr) -> Result<(), ApiError> {
        let Some(l) = &self.clients else {
            return Ok(());
        };
        l.check([(ClientKey::of(addr), 1)], true).map_err(|w| {
            refused(
                "client",
                w,
                "this client made more requests than its rate allows",
            )
        })
    }
}

/// `Retry-After` of a 503 `busy`, in seconds.
pub const BUSY_RETRY_AFTER_SECONDS: u64 = 1;

fn refused(limit: &'static str, w: Wait, detail: &str) -> ApiError {
    metrics::counter!("gpuledger_rate_limited_total", "limit" => limit).increment(1);
    ApiError::TooManyRequests {
        detail: format!("{detail}; retry after {} s", w.seconds),
        retry_after: w.seconds,
    }
}

/// Whether the per-client rate applies to requests for `path`: the API under `/v1` and the
/// C2SP tiles (`/checkpoint`, `/tile/...`).
pub fn rate_limited(path: &str) -> bool {
    path.starts_with("/v1/") || path == "/checkpoint" || path.starts_with("/tile/")
}

/// Applies the per-client rate to every request under `/v1` and to the tiles (middleware,
/// [`rate_limited`]): 429 with `Retry-After` past it, before the handler reads anything.
pub async fn per_client<B: MessageBody>(
    req: ServiceRequest,
    next: middleware::Next<B>,
) -> Result<ServiceResponse<EitherBody<B>>, actix_web::Error> {
    if rate_limited(req.path()) {
        let refusal = match (req.app_data::<web::Data<AppState>>(), req.peer_addr()) {
            (Some(state), Some(peer)) => state.limits.client(peer.ip()).err(),
            _ => None,
        };
        if let Some(e) = refusal {
            return Ok(req.into_response(e.error_response()).map_into_right_body());
        }
    }
    next.call(req)
        .await
        .map(ServiceResponse::map_into_left_body)
}

/// The key of a client address: an IPv4 address, or the /64 of an IPv6 address (one host
/// usually has a whole /64); an IPv4-mapped IPv6 address is its IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientKey {
    V4([u8; 4]),
    V6([u8; 8]),
}

impl ClientKey {
    pub fn of(addr: IpAddr) -> ClientKey {
        match addr {
            IpAddr::V4(a) => ClientKey::V4(a.octets()),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(v4) => ClientKey::V4(v4.octets()),
                None => ClientKey::V6(prefix64(a)),
            },
        }
    }
}

fn prefix64(a: Ipv6Addr) -> [u8; 8] {
    let o = a.octets();
    [o[0], o[1], o[2], o[3], o[4], o[5], o[6], o[7]]
}

// ---------------------------------------------------------------------------------------------
// Concurrent bodies
// ---------------------------------------------------------------------------------------------

/// A count of things in progress, at most `max` (0: no limit).
pub struct Slots {
    max: usize,
    used: AtomicUsize,
}

/// One taken slot, given back when dropped.
pub struct Slot<'a>(&'a Slots);

impl Slots {
    pub fn new(max: usize) -> Slots {
        Slots {
            max,
            used: AtomicUsize::new(0),
        }
    }

    /// A slot, or `None` when all are taken.
    pub fn try_acquire(&self) -> Option<Slot<'_>> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (self.max == 0 || n < self.max).then_some(n + 1)
            })
            .ok()?;
        metrics::gauge!("gpuledger_ingest_bodies_in_flight").increment(1.0);
        Some(Slot(self))
    }

    /// Slots taken now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.used.fetch_sub(1, Ordering::AcqRel);
        metrics::gauge!("gpuledger_ingest_bodies_in_flight").decrement(1.0);
    }
}

// ---------------------------------------------------------------------------------------------
// Token buckets
// ---------------------------------------------------------------------------------------------

/// How long to wait before the refused request would pass: whole seconds, at least 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    pub seconds: u64,
}

/// Token buckets by key: each key gains `rate` tokens a second up to `burst`; a request
/// costing `n` passes when its bucket holds `min(n, burst)` tokens (so a batch larger than the
/// burst passes when the bucket is full, rather than never), and takes `n`, which may leave the
/// bucket in debt: the long-run rate holds either way.
pub struct RateLimiter<K> {
    rate: f64,
    burst: f64,
    state: Mutex<State<K>>,
}

struct State<K> {
    buckets: HashMap<K, Bucket>,
    pruned: Instant,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn level(&self, now: Instant, rate: f64, burst: f64) -> f64 {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * rate;
        (self.tokens + refill).min(burst)
    }
}

impl<K: Hash + Eq + Clone> RateLimiter<K> {
    /// A limiter of `rate` tokens a second and `burst` at most (at least 1); `None` (no limit)
    /// when `rate` is 0.
    pub fn new(rate: f64, burst: u32) -> Option<Self> {
        (rate > 0.0).then(|| RateLimiter {
            rate,
            burst: f64::from(burst.max(1)),
            state: Mutex::new(State {
                buckets: HashMap::new(),
                pruned: Instant::now(),
            }),
        })
    }

    /// Most tokens a bucket holds.
    pub fn burst(&self) -> f64 {
        self.burst
    }

    /// Whether every key has the tokens for its cost now (costs of a repeated key add up);
    /// with `take`, takes them all when every key has them, and none otherwise.
    pub fn check(&self, costs: impl IntoIterator<Item = (K, u64)>, take: bool) -> Result<(), Wait> {
        self.check_at(costs, take, Instant::now())
    }

    /// Takes `costs` whatever the buckets hold (a bucket may go into debt).
    pub fn charge(&self, costs: impl IntoIterator<Item = (K, u64)>) {
        let now = Instant::now();
        let costs = totals(costs);
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.take(&mut s, costs, now);
    }

    fn check_at(
        &self,
        costs: impl IntoIterator<Item = (K, u64)>,
        take: bool,
        now: Instant,
    ) -> Result<(), Wait> {
        let costs = totals(costs);
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut wait: f64 = 0.0;
        for (k, cost) in &costs {
            let level = s
                .buckets
                .get(k)
                .map_or(self.burst, |b| b.level(now, self.rate, self.burst));
            let need = (*cost as f64).min(self.burst);
            if level < need {
                wait = wait.max((need - level) / self.rate);
            }
        }
        if wait > 0.0 {
            return Err(Wait {
                seconds: (wait.ceil() as u64).max(1),
            });
        }
        if take {
            self.take(&mut s, costs, now);
        }
        Ok(())
    }

    fn take(&self, s: &mut State<K>, costs: HashMap<K, u64>, now: Instant) {
        if now.saturating_duration_since(s.pruned) >= PRUNE_INTERVAL
            || s.buckets.len() + costs.len() > MAX_TRACKED_KEYS
        {
            self.prune(s, now, costs.len());
        }
        for (k, cost) in costs {
            let b = s.buckets.entry(k).or_insert(Bucket {
                tokens: self.burst,
                at: now,
            });
            b.tokens = b.level(now, self.rate, self.burst) - cost as f64;
            b.at = now;
        }
    }

    /// Drops full buckets; then, if fewer than `room` more keys would fit, the fullest half.
    fn prune(&self, s: &mut State<K>, now: Instant, room: usize) {
        s.pruned = now;
        let (rate, burst) = (self.rate, self.burst);
        s.buckets.retain(|_, b| b.level(now, rate, burst) < burst);
        if s.buckets.len() + room > MAX_TRACKED_KEYS {
            let mut levels: Vec<f64> = s
                .buckets
                .values()
                .map(|b| b.level(now, rate, burst))
                .collect();
            let keep = (MAX_TRACKED_KEYS / 2).saturating_sub(room);
            if keep < levels.len() {
                let (_, cut, _) = levels.select_nth_unstable_by(keep, f64::total_cmp);
                let cut = *cut;
                s.buckets.retain(|_, b| b.level(now, rate, burst) < cut);
            }
        }
    }

    /// Keys tracked now.
    pub fn tracked(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .buckets
            .len()
    }
}

fn totals<K: Hash + Eq>(costs: impl IntoIterator<Item = (K, u64)>) -> HashMap<K, u64> {
    let mut m = HashMap::new();
    for (k, n) in costs {
        *m.entry(k).or_insert(0u64) += n;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_refills_at_its_rate_up_to_its_burst() {
        let l = RateLimiter::new(2.0, 4).unwrap();
        let t0 = Instant::now();
        for _ in 0..4 {
            assert_eq!(l.check_at([("a", 1)], true, t0), Ok(()));
        }
        assert_eq!(l.check_at([("a", 1)], true, t0), Err(Wait { seconds: 1 }));
        // Another key is not touched.
        assert_eq!(l.check_at([("b", 4)], true, t0), Ok(()));
        // Half a second later one token is back, and only one.
        let t1 = t0 + Duration::from_millis(500);
        assert_eq!(l.check_at([("a", 1)], true, t1), Ok(()));
        assert!(l.check_at([("a", 1)], true, t1).is_err());
        // Long idle: full again, never more than the burst.
        let t2 = t0 + Duration::from_secs(3600);
        assert_eq!(l.check_at([("a", 4)], true, t2), Ok(()));
        assert!(l.check_at([("a", 1)], true, t2).is_err());
    }

    #[test]
    fn a_refused_batch_takes_nothing_from_any_key() {
        let l = RateLimiter::new(1.0, 10).unwrap();
        let t0 = Instant::now();
        assert_eq!(l.check_at([("a", 8)], true, t0), Ok(()));
        // b could pay, a cannot: nothing is taken from b.
        assert_eq!(
            l.check_at([("b", 5), ("a", 5)], true, t0),
            Err(Wait { seconds: 3 })
        );
        assert_eq!(l.check_at([("b", 10)], true, t0), Ok(()));
        // Costs of one key add up.
        assert_eq!(l.check_at([("c", 5)], true, t0), Ok(()));
        assert!(l.check_at([("c", 3), ("c", 3)], true, t0).is_err());
    }

    #[test]
    fn a_batch_over_the_burst_passes_on_a_full_bucket_and_leaves_a_debt() {
        let l = RateLimiter::new(10.0, 100).unwrap();
        let t0 = Instant::now();
        assert_eq!(l.check_at([("a", 1000)], true, t0), Ok(()));
        // 900 tokens in debt: 91 s until one passes again.
        assert_eq!(l.check_at([("a", 1)], true, t0), Err(Wait { seconds: 91 }));
    }

    #[test]
    fn check_without_take_then_charge() {
        let l = RateLimiter::new(1.0, 5).unwrap();
        let t0 = Instant::now();
        assert_eq!(l.check_at([("a", 5)], false, t0), Ok(()));
        assert_eq!(l.check_at([("a", 5)], false, t0), Ok(()));
        l.charge([("a", 5)]);
        assert!(l.check([("a", 1)], false).is_err());
    }

    #[test]
    fn zero_rate_is_no_limit() {
        assert!(RateLimiter::<String>::new(0.0, 10).is_none());
    }

    #[test]
    fn memory_is_bounded_by_the_key_cap() {
        let l = RateLimiter::new(1.0, 10).unwrap();
        let t0 = Instant::now();
        for i in 0..(MAX_TRACKED_KEYS as u64 + 5000) {
            l.check_at([(i, 1 + i % 3)], true, t0).unwrap();
        }
        assert!(l.tracked() <= MAX_TRACKED_KEYS, "{}", l.tracked());
        // Full buckets are pruned once they refill.
        let later = t0 + PRUNE_INTERVAL + Duration::from_secs(60);
        l.check_at([(u64::MAX, 1)], true, later).unwrap();
        assert_eq!(l.tracked(), 1);
    }

    #[test]
    fn client_keys() {
        let v4: IpAddr = "192.0.2.7".parse().unwrap();
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(ClientKey::of(v4), ClientKey::of(mapped));
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(ClientKey::of(a), ClientKey::of(b));
        assert_ne!(ClientKey::of(a), ClientKey::of(c));
    }

    #[test]
    fn slots_count_to_their_max() {
        let s = Slots::new(2);
        let a = s.try_acquire().unwrap();
        let _b = s.try_acquire().unwrap();
        assert!(s.try_acquire().is_none());
        drop(a);
        assert!(s.try_acquire().is_some());
        let unlimited = Slots::new(0);
        let held: Vec<_> = (0..100).map(|_| unlimited.try_acquire().unwrap()).collect();
        assert_eq!(unlimited.used(), held.len());
    }
}
