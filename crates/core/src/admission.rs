//! Admission to the log (docs/PROTOCOL.md §6): who may sign what, for which node, region,
//! tenant and lease, when, and how prices may move. Each rule is one function here; the
//! ledger applies them at ingest (fed from its database), and `verify-log` and the bundle
//! verifier apply the same functions to a [`Registry`] rebuilt from the log's own entries, so a
//! log the ledger wrote passes them, and one it could not have written does not.

use super::envelope::Checked;
use super::fleet::FleetLog;
use super::ids::LEDGER_SIGNER;
use super::keys;
use super::limits::MAX_SPOT_SCHEDULE_AHEAD_SECONDS;
use super::record::{Body, Kind, LogPolicy, Role, SignerKeyRegistered};
use super::rejection::{Reason, Rejection};
use super::time::Timestamp;
use ed25519_dalek::VerifyingKey;
use rust_decimal::Decimal;
use std::collections::HashMap;

/// A key as the log records it: its registration (signer, role, scope) and when it was
/// registered and revoked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyState {
    pub registration: SignerKeyRegistered,
    pub key: VerifyingKey,
    pub registered_idx: u64,
    pub revoked_idx: Option<u64>,
}

impl KeyState {
    /// The signer the key belongs to.
    pub fn signer(&self) -> &str {
        &self.registration.signer
    }
    /// The signer's role.
    pub fn role(&self) -> Role {
        self.registration.role
    }
}

/// Whether a key (as registered) may sign a record of this kind as this signer, at this
/// position: the signer, the role, and revocation. `revoked_at` is the index of a revocation
/// of the key that precedes the record, if there is one.
pub fn check_key(
    registration: &SignerKeyRegistered,
    kind: Kind,
    signer: &str,
    revoked_at: Option<u64>,
) -> Result<(), Rejection> {
    if registration.signer != signer {
        return Err(Rejection::field(
            Reason::KeySignerMismatch,
            "key_id",
            format!(
                "{} belongs to signer {}, not {signer}",
                registration.key_id, registration.signer
            ),
        ));
    }
    if registration.role != kind.signed_by() {
        return Err(Rejection::field(
            Reason::RoleNotAllowed,
            "kind",
            format!(
                "{} may not be signed by {signer} (role {})",
                kind.as_str(),
                registration.role.as_str()
            ),
        ));
    }
    check_not_revoked(&registration.key_id, revoked_at)
}

/// A key signs nothing after its revocation (§6.2): `revoked_at` is the index of a revocation
/// of `key_id` that precedes the record, if there is one. The ledger applies it under the write
/// lock (after the duplicate check, so a record logged before the revocation still answers
/// `duplicate`); verifiers through [`check_key`].
pub fn check_not_revoked(key_id: &str, revoked_at: Option<u64>) -> Result<(), Rejection> {
    match revoked_at {
        Some(r) => Err(Rejection::field(
            Reason::RevokedKey,
            "key_id",
            format!("{key_id} was revoked at entry {r}"),
        )),
        None => Ok(()),
    }
}

/// A submitted record of a kind only the ledger writes.
pub fn ledger_kind_submitted(kind: Kind) -> Rejection {
    Rejection::field(
        Reason::RoleNotAllowed,
        "kind",
        format!("{} entries are written by the ledger itself", kind.as_str()),
    )
}

/// The node and region a record names are within its key's registration (§6.7, scope).
pub fn check_scope(registration: &SignerKeyRegistered, body: &Body) -> Result<(), Rejection> {
    let (node, region) = match body {
        Body::GpuUsage(u) => (Some(&u.node), &u.region),
        Body::Energy(e) => (Some(&e.node), &e.region),
        Body::SpotPrice(p) => (None, &p.region),
        _ => return Ok(()),
    };
    if let Some(node) = node {
        let nodes = registration.nodes.as_deref().unwrap_or_default();
        if nodes.binary_search(node).is_err() {
            return Err(Rejection::field(
                Reason::NodeNotAllowed,
                "body.node",
                format!(
                    "{node} is not a node key {} is registered for",
                    registration.key_id
                ),
            ));
        }
    }
    if registration.regions.binary_search(region).is_err() {
        return Err(Rejection::field(
            Reason::RegionNotAllowed,
            "body.region",
            format!(
                "{region} is not a region key {} is registered for",
                registration.key_id
            ),
        ));
    }
    Ok(())
}

/// Where the log registered tenants and leases (the index of each registration).
pub trait Parties {
    /// The index of the tenant's `tenant_registered` entry.
    fn tenant(&self, tenant: &str) -> Option<u64>;
    /// The tenant and index of the lease's `lease_registered` entry.
    fn lease(&self, lease: &str) -> Option<(String, u64)>;
}

/// The tenant a record names is registered before it, and its lease, if any, is registered
/// before it to that tenant (§6.7, parties). `index` is the record's position (`u64::MAX` for
/// a record not yet appended).
pub fn check_parties(body: &Body, index: u64, parties: &dyn Parties) -> Result<(), Rejection> {
    let tenant = match body {
        Body::GpuUsage(u) => Some(&u.tenant),
        Body::Energy(e) => e.tenant.as_ref(),
        Body::LeaseRegistered(l) => Some(&l.tenant),
        Body::TenantPlan(p) => Some(&p.tenant),
        Body::InvoiceIssued(i) => Some(&i.tenant),
        Body::Payment(p) | Body::CreditNote(p) => Some(&p.tenant),
        Body::CertificateIssued(c) => Some(&c.tenant),
        Body::RecordExcluded(x) => Some(&x.tenant),
        Body::ContractRegistered(c) => Some(&c.tenant),
        Body::Prepayment(p) => Some(&p.tenant),
        Body::ContractAmended(a) => Some(&a.tenant),
        _ => None,
    };
    if let Some(t) = tenant {
        if parties.tenant(t).is_none_or(|at| at >= index) {
            return Err(Rejection::field(
                Reason::UnknownTenant,
                "body.tenant",
                format!("{t} is not a registered tenant"),
            ));
        }
    }
    match body {
        Body::GpuUsage(u) => {
            if let Some(lease) = &u.lease {
                match parties.lease(lease).filter(|(_, at)| *at < index) {
                    None => {
                        return Err(Rejection::field(
                            Reason::UnknownLease,
                            "body.lease",
                            format!("{lease} is not a registered lease"),
                        ))
                    }
                    Some((owner, _)) if owner != u.tenant => {
                        return Err(Rejection::field(
                            Reason::LeaseTenantMismatch,
                            "body.lease",
                            format!("{lease} is not a lease of tenant {}", u.tenant),
                        ))
                    }
                    Some(_) => {}
                }
            }
        }
        Body::ContractRegistered(c) => {
            // The leases its fees rent (an SLA is measured on them) are the tenant's.
            for (i, lease) in c
                .fees()
                .iter()
                .enumerate()
                .filter_map(|(i, f)| Some((i, f.lease.as_ref()?)))
            {
                let field = format!("body.fees[{i}].lease");
                match parties.lease(lease).filter(|(_, at)| *at < index) {
                    None => {
                        return Err(Rejection::field(
                            Reason::UnknownLease,
                            &field,
                            format!("{lease} is not a registered lease"),
                        ))
                    }
                    Some((owner, _)) if owner != c.tenant => {
                        return Err(Rejection::field(
                            Reason::LeaseTenantMismatch,
                            &field,
                            format!("{lease} is not a lease of tenant {}", c.tenant),
                        ))
                    }
                    Some(_) => {}
                }
            }
        }
        Body::LeaseRegistered(l) => {
            if let Some((_, at)) = parties.lease(&l.lease).filter(|(_, at)| *at < index) {
                return Err(Rejection::field(
                    Reason::AlreadyRegistered,
                    "body.lease",
                    format!("{} is already registered (entry {at})", l.lease),
                ));
            }
        }
        Body::TenantRegistered(t) => {
            if let Some(at) = parties.tenant(&t.tenant).filter(|at| *at < index) {
                return Err(Rejection::field(
                    Reason::AlreadyRegistered,
                    "body.tenant",
                    format!("{} is already registered (entry {at})", t.tenant),
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

/// An invoice or a certificate is issued only for a period that has ended (§6.7, time): its
/// `period_to` is not after the entry's `received_at` (`now`). The ledger refuses to issue one
/// otherwise (its clock checked first, `store::clock`), and every verifier rechecks it.
pub fn check_issued(body: &Body, now: Timestamp) -> Result<(), Rejection> {
    let to = match body {
        Body::InvoiceIssued(b) => b.period_to,
        Body::CertificateIssued(b) => b.period_to,
        _ => return Ok(()),
    };
    if to > now {
        return Err(Rejection::field(
            Reason::InFuture,
            "body.period_to",
            format!(
                "the period ends at {to}, after the entry was received ({now}): it had not ended when it was issued"
            ),
        ));
    }
    Ok(())
}

/// The intervals each measurement stream has claimed (PROTOCOL §6.4a): a `gpu_usage` or
/// `energy` record's `[start, end)` may not intersect an interval of an earlier entry of the
/// same stream (`Body::stream`). The ledger loads the intervals near a group's own from the
/// database (`store::write`), `Registry` keeps every admitted one; both ask [`Intervals::check`].
/// Intervals of one stream never overlap each other, so they are kept ordered by start and a
/// new one is compared with its neighbour only: O(log n) per record, 24 bytes per interval,
/// and an append at the end for records that arrive in order (nearly all of them).
#[derive(Debug, Clone, Default)]
pub struct Intervals {
    /// stream → (start, end, index) ordered by start, in Unix seconds.
    by_stream: HashMap<String, Vec<(i64, i64, u64)>>,
}

impl Intervals {
    /// `overlapping_interval` (field `body.start`) if `[start, end)` of a record of `kind` in
    /// `stream` intersects an interval claimed before, naming that entry. Adjacent intervals
    /// (one's end the other's start) do not intersect.
    pub fn check(
        &self,
        kind: Kind,
        stream: &str,
        start: Timestamp,
        end: Timestamp,
    ) -> Result<(), Rejection> {
        let Some(claimed) = self.by_stream.get(stream) else {
            return Ok(());
        };
        let (s, e) = (start.unix(), end.unix());
        // The claimed interval starting last before `end` ends last of those that could
        // intersect (they are disjoint); if it ends by `start`, none does.
        let before_end = claimed.partition_point(|iv| iv.0 < e);
        match before_end.checked_sub(1).map(|i| claimed[i]) {
            Some((_, claimed_end, idx)) if claimed_end > s => Err(Rejection::field(
                Reason::OverlappingInterval,
                "body.start",
                format!(
                    "[{start}, {end}) overlaps the interval of entry {idx} for the same {} stream",
                    kind.as_str()
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Records that the entry at `index` claimed `[start, end)` of `stream`.
    pub fn claim(&mut self, stream: &str, start: Timestamp, end: Timestamp, index: u64) {
        let claimed = match self.by_stream.get_mut(stream) {
            Some(c) => c,
            None => self.by_stream.entry(stream.to_owned()).or_default(),
        };
        let (s, e) = (start.unix(), end.unix());
        match claimed.last() {
            Some(last) if last.0 > s => {
                let at = claimed.partition_point(|iv| iv.0 < s);
                claimed.insert(at, (s, e, index));
            }
            _ => claimed.push((s, e, index)),
        }
    }
}

/// What settlement needs to know of one issued invoice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedInvoice {
    pub tenant: String,
    pub currency: String,
    /// The invoice's total (gross).
    pub total: Decimal,
    /// Σ the credit notes on it so far.
    pub credited: Decimal,
}

/// The settlement rules (PROTOCOL §5.10): a `payment` or `credit_note` names an invoice issued
/// earlier to its tenant (`unknown_invoice`), in its currency (`currency_mismatch`), and credit
/// notes on an invoice never total more than the invoice (`credit_above_total`); an
/// `external_reference` is carried by one payment (one credit note) of a tenant at most
/// (`reference_used`). The ledger loads the one invoice a settlement names, and the tenant's
/// earlier settlements when it carries a reference (`store::invoices::settle`); `Registry`
/// keeps every invoice and reference of the log, so `verify-log` rechecks each settlement. (Bundles hold no settlements.)
/// A payment above the open balance is not a log rule: the excess may become the tenant's credit.
#[derive(Debug, Clone, Default)]
pub struct Settlements {
    invoices: HashMap<String, IssuedInvoice>,
    /// (tenant, kind, external reference) → the index of the settlement that carries it.
    references: HashMap<(String, Kind, String), u64>,
}

impl Settlements {
    /// Settlements of one invoice, as the ledger reads it under the head lock.
    pub fn of(number: &str, account: IssuedInvoice) -> Self {
        Settlements {
            invoices: HashMap::from([(number.to_owned(), account)]),
            references: HashMap::new(),
        }
    }

    /// Takes in that the settlement at `index` carries its external reference, if it does (as
    /// the ledger reads the earlier settlements of the reference's tenant).
    pub fn reference(&mut self, index: u64, body: &Body) {
        if let Some(key) = reference_key(body) {
            self.references.entry(key).or_insert(index);
        }
    }

    /// Whether a payment or credit note may be written after what was applied so far.
    pub fn check(&self, body: &Body) -> Result<(), Rejection> {
        let (s, credit) = match body {
            Body::Payment(s) => (s, false),
            Body::CreditNote(s) => (s, true),
            _ => return Ok(()),
        };
        let Some(inv) = self
            .invoices
            .get(&s.invoice)
            .filter(|i| i.tenant == s.tenant)
        else {
            return Err(Rejection::field(
                Reason::UnknownInvoice,
                "body.invoice",
                format!("{} is not an invoice issued to {}", s.invoice, s.tenant),
            ));
        };
        if inv.currency != s.currency {
            return Err(Rejection::field(
                Reason::CurrencyMismatch,
                "body.currency",
                format!(
                    "invoice {} is in {}, not {}",
                    s.invoice, inv.currency, s.currency
                ),
            ));
        }
        if let Some(at) = reference_key(body).and_then(|k| self.references.get(&k)) {
            return Err(Rejection::field(
                Reason::ReferenceUsed,
                "body.external_reference",
                format!(
                    "{} of {} already carries {:?} (entry {at})",
                    body.kind().as_str(),
                    s.tenant,
                    s.external_reference.as_deref().unwrap_or_default()
                ),
            ));
        }
        if credit && inv.credited + s.amount > inv.total {
            return Err(Rejection::field(
                Reason::CreditAboveTotal,
                "body.amount",
                format!(
                    "credit notes on {} would total {}, above its total {}",
                    s.invoice,
                    inv.credited + s.amount,
                    inv.total
                ),
            ));
        }
        Ok(())
    }

    /// Takes in the admitted entry at `index`: an issued invoice opens an account, a credit
    /// note adds to it, a settlement's external reference is used from then on.
    pub fn apply(&mut self, index: u64, body: &Body) {
        self.reference(index, body);
        match body {
            Body::InvoiceIssued(i) => {
                self.invoices
                    .entry(i.number.clone())
                    .or_insert_with(|| IssuedInvoice {
                        tenant: i.tenant.clone(),
                        currency: i.currency.clone(),
                        total: i.total,
                        credited: Decimal::ZERO,
                    });
            }
            Body::CreditNote(s) => {
                if let Some(a) = self.invoices.get_mut(&s.invoice) {
                    a.credited += s.amount;
                }
            }
            _ => {}
        }
    }
}

/// The key under which a payment's or credit note's external reference is unique: its tenant,
/// its kind, the reference.
fn reference_key(body: &Body) -> Option<(String, Kind, String)> {
    match body {
        Body::Payment(s) | Body::CreditNote(s) => s
            .external_reference
            .clone()
            .map(|r| (s.tenant.clone(), body.kind(), r)),
        _ => None,
    }
}

/// When the ledger may issue an invoice or certificate of a period ending at `period_to`:
/// `close_seconds` after it (`serve`'s `invoice_close_seconds`), by default the log policy's
/// `max_future_skew_seconds` (§6.7, time). Until then a spot price taking effect inside the
/// period may still be published within the allowed skew, and a record ending in it may still
/// arrive on time from a signer whose clock is within the skew; issuing earlier would refuse
/// the first (`price_in_invoiced_period`) and turn the second into a late adjustment. This is
/// the ledger's issuing policy: a log only promises the weaker [`check_issued`], which is what
/// verifiers recheck (logs written before the margin, or with another, stay valid).
pub fn period_closes_at(
    period_to: Timestamp,
    policy: &LogPolicy,
    close_seconds: Option<u64>,
) -> Timestamp {
    let margin = close_seconds.unwrap_or(policy.max_future_skew_seconds);
    period_to.plus(i64::try_from(margin).unwrap_or(i64::MAX))
}

/// When a price entry of any kind takes effect: spot prices, rate cards, region parameters,
/// volume tiers and tenant plans; `None` for every other kind.
pub fn price_effective_from(body: &Body) -> Option<Timestamp> {
    match body {
        Body::SpotPrice(p) => Some(p.effective_from),
        Body::RateCard(r) => Some(r.effective_from),
        Body::RegionParams(r) => Some(r.effective_from),
        Body::VolumeTiers(v) => Some(v.effective_from),
        Body::TenantPlan(p) => Some(p.effective_from),
        _ => None,
    }
}

/// The time rules against the ledger clock `now` (the entry's `received_at`) and the policy in
/// force (§6.7, time): a record may start at most `max_record_age_seconds` before `now` and end
/// at most `max_future_skew_seconds` after it; a price of any kind (spot, rate card, region
/// parameters, volume tiers, tenant plan) may take effect at most the skew before `now`, so no
/// price re-prices usage already measured, and a spot price at most 7 days after it; an invoice
/// or certificate covers an ended period ([`check_issued`]).
pub fn check_time(body: &Body, now: Timestamp, policy: &LogPolicy) -> Result<(), Rejection> {
    check_issued(body, now)?;
    let skew = i64::try_from(policy.max_future_skew_seconds).unwrap_or(i64::MAX);
    let max_age = i64::try_from(policy.max_record_age_seconds).unwrap_or(i64::MAX);
    if let Some(from) = price_effective_from(body) {
        return check_price_time(body, from, now, skew);
    }
    let (start, end) = match body {
        Body::GpuUsage(u) => (u.start, u.end),
        Body::Energy(e) => (e.start, e.end),
        _ => return Ok(()),
    };
    let age = start.seconds_until(now);
    if age > max_age {
        return Err(Rejection::field(
            Reason::TooOld,
            "body.start",
            format!(
                "({start}) is {age} s before the ledger's clock ({now}); the log's policy allows {max_age} s"
            ),
        ));
    }
    let ahead = now.seconds_until(end);
    if ahead > skew {
        return Err(Rejection::field(
            Reason::InFuture,
            "body.end",
            format!(
                "({end}) is {ahead} s after the ledger's clock ({now}); the log's policy allows {skew} s"
            ),
        ));
    }
    Ok(())
}

/// A price taking effect at `from`, received at `now`: at most `skew` seconds in the past
/// (`price_in_past`); a spot price, signed by a market signer, also at most
/// `MAX_SPOT_SCHEDULE_AHEAD_SECONDS` ahead (`in_future`). Ledger-written prices may be
/// scheduled any time ahead: the operator announces them.
fn check_price_time(
    body: &Body,
    from: Timestamp,
    now: Timestamp,
    skew: i64,
) -> Result<(), Rejection> {
    let ahead = now.seconds_until(from);
    let spot = matches!(body, Body::SpotPrice(_));
    if spot && ahead > MAX_SPOT_SCHEDULE_AHEAD_SECONDS {
        return Err(Rejection::field(
            Reason::InFuture,
            "body.effective_from",
            format!(
                "is {ahead} s after the ledger's clock; prices may be scheduled at most {MAX_SPOT_SCHEDULE_AHEAD_SECONDS} s ahead"
            ),
        ));
    }
    if -ahead > skew {
        return Err(Rejection::field(
            Reason::PriceInPast,
            "body.effective_from",
            format!(
                "({from}) is {} s before the ledger's clock ({now}); a {} may take effect at most {skew} s in the past",
                -ahead,
                body.kind().as_str()
            ),
        ));
    }
    Ok(())
}

/// The spot prices and invoiced periods logged before a price (§6.7, price series).
#[derive(Debug, Default, Clone)]
pub struct SpotHistory {
    /// (region, GPU model, effective_from) → index of the spot price.
    instants: HashMap<(String, String, Timestamp), u64>,
    /// Invoiced periods [from, to) with the index of their `invoice_issued` entry and their
    /// tenant.
    invoiced: Vec<(u64, String, Timestamp, Timestamp)>,
}

impl SpotHistory {
    /// Takes in a logged entry (spot prices and issued invoices matter).
    pub fn apply(&mut self, index: u64, body: &Body) {
        match body {
            Body::SpotPrice(p) => {
                self.instants
                    .entry((p.region.clone(), p.gpu_model.clone(), p.effective_from))
                    .or_insert(index);
            }
            Body::InvoiceIssued(i) => self.invoiced(index, &i.tenant, i.period_from, i.period_to),
            _ => {}
        }
    }

    /// Takes in the period [from, to) invoiced to `tenant` by the entry at `index` (as the
    /// ledger reads it from its invoice table).
    pub fn invoiced(&mut self, index: u64, tenant: &str, from: Timestamp, to: Timestamp) {
        self.invoiced.push((index, tenant.to_owned(), from, to));
    }

    /// A price at `index`: a spot price takes effect not at the instant of an earlier price of
    /// its series (region, GPU model); no price of any kind takes effect inside a period
    /// already invoiced (any tenant's, as every tenant may be billed at it; a tenant plan, its
    /// own tenant's).
    pub fn check(&self, index: u64, body: &Body) -> Result<(), Rejection> {
        let Some(from) = price_effective_from(body) else {
            return Ok(());
        };
        if let Body::SpotPrice(p) = body {
            let key = (p.region.clone(), p.gpu_model.clone(), p.effective_from);
            if let Some(at) = self.instants.get(&key).filter(|at| **at < index) {
                return Err(Rejection::field(
                    Reason::PriceConflict,
                    "body.effective_from",
                    format!(
                        "a spot price for {} {} already takes effect at {} (entry {at})",
                        p.region, p.gpu_model, p.effective_from
                    ),
                ));
            }
        }
        let only = match body {
            Body::TenantPlan(p) => Some(p.tenant.as_str()),
            _ => None,
        };
        if let Some((at, _, pf, pt)) = self.invoiced.iter().find(|(at, tenant, pf, pt)| {
            *at < index && *pf <= from && from < *pt && only.is_none_or(|t| t == tenant)
        }) {
            return Err(Rejection::field(
                Reason::PriceInInvoicedPeriod,
                "body.effective_from",
                format!("({from}) is inside the period [{pf}, {pt}) invoiced at entry {at}"),
            ));
        }
        Ok(())
    }
}

/// The latest `effective_from` of each ledger-written price series (§6.7, prices only move
/// forward): rate cards per (region, GPU model, class), region parameters per region, volume
/// tiers per (plan, region, GPU model, class), tenant plans per tenant.
#[derive(Debug, Default, Clone)]
pub struct PriceSeries {
    latest: HashMap<String, (Timestamp, u64)>,
}

/// The series a ledger-written pricing entry belongs to, and when it takes effect.
fn series(body: &Body) -> Option<(String, Timestamp)> {
    match body {
        Body::RateCard(r) => Some((
            format!(
                "rate_card|{}|{}|{}",
                r.region,
                r.gpu_model,
                r.lease_class.as_str()
            ),
            r.effective_from,
        )),
        Body::RegionParams(r) => Some((format!("region_params|{}", r.region), r.effective_from)),
        Body::VolumeTiers(v) => Some((
            format!(
                "volume_tiers|{}|{}|{}|{}",
                v.plan,
                v.region,
                v.gpu_model,
                v.lease_class.as_str()
            ),
            v.effective_from,
        )),
        Body::TenantPlan(p) => Some((format!("tenant_plan|{}", p.tenant), p.effective_from)),
        _ => None,
    }
}

impl PriceSeries {
    /// Takes in a logged entry.
    pub fn apply(&mut self, index: u64, body: &Body) {
        if let Some((key, at)) = series(body) {
            let e = self.latest.entry(key).or_insert((at, index));
            if at > e.0 {
                *e = (at, index);
            }
        }
    }

    /// A new price of a series takes effect strictly after the series' latest.
    pub fn check(&self, body: &Body) -> Result<(), Rejection> {
        let Some((key, at)) = series(body) else {
            return Ok(());
        };
        match self.latest.get(&key) {
            Some((latest, index)) if at <= *latest => Err(Rejection::field(
                Reason::PriceNotForward,
                "body.effective_from",
                format!(
                    "({at}) is not after {latest}, when the {} series already takes effect (entry {index}); prices change only forward",
                    body.kind().as_str()
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// The log's state that admission depends on, rebuilt from its entries in order: keys with
/// their scopes, tenants, leases, policies, spot prices, invoiced periods and price series.
/// `verify-log` feeds it every entry; a bundle verifier feeds it the bundle's context first.
#[derive(Debug, Clone)]
pub struct Registry {
    log_key: VerifyingKey,
    log_key_id: String,
    keys: HashMap<String, KeyState>,
    tenants: HashMap<String, u64>,
    /// The nodes and leases registered so far.
    fleet: FleetLog,
    policies: Vec<(u64, LogPolicy)>,
    spot: SpotHistory,
    prices: PriceSeries,
    intervals: Intervals,
    settlements: Settlements,
    disputes: super::dispute::Disputes,
    contracts: super::contract::ContractBook,
    /// The lots and what the invoices drew, for the prepayment rules.
    prepaid: super::prepaid::PrepaidBook,
}

impl Parties for Registry {
    fn tenant(&self, tenant: &str) -> Option<u64> {
        self.tenants.get(tenant).copied()
    }
    fn lease(&self, lease: &str) -> Option<(String, u64)> {
        self.fleet
            .lease(lease)
            .map(|(l, at)| (l.tenant.clone(), at))
    }
}

impl Registry {
    /// An empty registry for a log whose ledger entries are signed by `log_key`.
    pub fn new(log_key: VerifyingKey) -> Self {
        Registry {
            log_key_id: keys::key_id(&log_key),
            log_key,
            keys: HashMap::new(),
            tenants: HashMap::new(),
            fleet: FleetLog::default(),
            policies: Vec::new(),
            spot: SpotHistory::default(),
            prices: PriceSeries::default(),
            intervals: Intervals::default(),
            settlements: Settlements::default(),
            disputes: super::dispute::Disputes::whole_log(),
            contracts: Default::default(),
            prepaid: Default::default(),
        }
    }

    /// A registry for a bundle (§14), whose records follow its context: the dispute rules
    /// that need the record an exclusion names are left to `verify-log` (§6.7, disputes).
    pub fn for_bundle(log_key: VerifyingKey) -> Self {
        Registry {
            disputes: super::dispute::Disputes::bundle(),
            ..Registry::new(log_key)
        }
    }

    /// The nodes and leases registered so far.
    pub fn fleet(&self) -> &FleetLog {
        &self.fleet
    }

    /// The keys registered so far, by key id.
    pub fn keys(&self) -> &HashMap<String, KeyState> {
        &self.keys
    }

    /// The policy in force at `index`: the latest `log_policy` entry before it, or the
    /// defaults.
    pub fn policy_at(&self, index: u64) -> LogPolicy {
        self.policies
            .iter()
            .rev()
            .find(|(at, _)| *at < index)
            .map(|(_, p)| *p)
            .unwrap_or_default()
    }

    /// Which key must have signed the entry at `index`, and whether it may: the log key for
    /// ledger kinds; otherwise a key registered before `index` to this signer, with a role that
    /// may sign the kind, not revoked before `index`.
    pub fn signing_key(
        &self,
        index: u64,
        kind: Kind,
        signer: &str,
        key_id: &str,
    ) -> Result<(VerifyingKey, Option<&KeyState>), Rejection> {
        if kind.signed_by() == Role::Ledger {
            if signer != LEDGER_SIGNER || key_id != self.log_key_id {
                return Err(Rejection::field(
                    Reason::RoleNotAllowed,
                    "key_id",
                    format!("{} entries are signed by the log key only", kind.as_str()),
                ));
            }
            return Ok((self.log_key, None));
        }
        let k = self
            .keys
            .get(key_id)
            .filter(|k| k.registered_idx < index)
            .ok_or_else(|| {
                let reason = if self.keys.values().any(|k| k.signer() == signer) {
                    Reason::UnknownKey
                } else {
                    Reason::UnknownSigner
                };
                Rejection::field(
                    reason,
                    "key_id",
                    format!("{key_id} has no registration before entry {index}"),
                )
            })?;
        check_key(
            &k.registration,
            kind,
            signer,
            k.revoked_idx.filter(|r| *r < index),
        )?;
        Ok((k.key, Some(k)))
    }

    /// Every admission rule for the checked entry at `index`, received at `received_at`, except
    /// the signature: returns the key to verify it with.
    pub fn admit(
        &self,
        index: u64,
        checked: &Checked,
        received_at: Timestamp,
    ) -> Result<VerifyingKey, Rejection> {
        let (kind, body, env) = (checked.kind, &checked.body, &checked.envelope);
        let (key, state) = self.signing_key(index, kind, &env.signer, &env.key_id)?;
        if let Some(k) = state {
            check_scope(&k.registration, body)?;
        }
        check_parties(body, index, self)?;
        super::fleet::check_fleet(body, index, &self.fleet)?;
        let policy = self.policy_at(index);
        check_time(body, received_at, &policy)?;
        self.contracts.check(body, received_at, &policy)?;
        self.prepaid.check(body, received_at)?;
        self.spot.check(index, body)?;
        // The stream was computed once, when the envelope was checked.
        if let Some((stream, start, end)) = &checked.stream {
            self.intervals.check(kind, stream, *start, *end)?;
        }
        self.prices.check(body)?;
        self.settlements.check(body)?;
        self.disputes.check(body)?;
        self.check_registry_entry(index, body)?;
        Ok(key)
    }

    /// Registrations and revocations are consistent with the keys before them.
    fn check_registry_entry(&self, index: u64, body: &Body) -> Result<(), Rejection> {
        match body {
            Body::SignerKeyRegistered(r) => {
                if let Some(k) = self
                    .keys
                    .get(&r.key_id)
                    .filter(|k| k.registered_idx < index)
                {
                    return Err(Rejection::field(
                        Reason::AlreadyRegistered,
                        "body.key_id",
                        format!(
                            "{} is already registered (entry {})",
                            r.key_id, k.registered_idx
                        ),
                    ));
                }
                if let Some(other) = self.keys.values().find(|k| {
                    k.signer() == r.signer && k.role() != r.role && k.registered_idx < index
                }) {
                    return Err(Rejection::field(
                        Reason::InvalidField,
                        "body.role",
                        format!(
                            "signer {} is registered with role {} already",
                            r.signer,
                            other.role().as_str()
                        ),
                    ));
                }
            }
            Body::SignerKeyRevoked(r) => {
                let k = self
                    .keys
                    .get(&r.key_id)
                    .filter(|k| k.registered_idx < index)
                    .ok_or_else(|| {
                        Rejection::field(
                            Reason::UnknownKey,
                            "body.key_id",
                            format!("revokes {}, which is not registered before", r.key_id),
                        )
                    })?;
                if k.signer() != r.signer || k.revoked_idx.is_some_and(|at| at < index) {
                    return Err(Rejection::field(
                        Reason::InvalidField,
                        "body.key_id",
                        format!(
                            "revocation of {} is inconsistent with its registration",
                            r.key_id
                        ),
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Takes in the checked entry at `index`, received at `received_at` (after it was
    /// admitted), in increasing index order.
    pub fn apply(&mut self, index: u64, received_at: Timestamp, checked: &Checked) {
        let body = &checked.body;
        if let Some((stream, start, end)) = &checked.stream {
            self.intervals.claim(stream, *start, *end, index);
        }
        match body {
            Body::SignerKeyRegistered(r) => {
                if let Ok(key) = keys::decode_public(&r.public_key) {
                    self.keys.entry(r.key_id.clone()).or_insert(KeyState {
                        registration: r.clone(),
                        key,
                        registered_idx: index,
                        revoked_idx: None,
                    });
                }
            }
            Body::SignerKeyRevoked(r) => {
                if let Some(k) = self.keys.get_mut(&r.key_id) {
                    k.revoked_idx.get_or_insert(index);
                }
            }
            Body::TenantRegistered(t) => {
                self.tenants.entry(t.tenant.clone()).or_insert(index);
            }
            Body::LogPolicy(p) => self.policies.push((index, *p)),
            _ => {}
        }
        self.fleet.apply(index, body);
        self.spot.apply(index, body);
        self.contracts.apply(index, body);
        self.prepaid.apply(index, received_at, body);
        self.prices.apply(index, body);
        self.settlements.apply(index, body);
        self.disputes.apply(index, body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{CertificateIssued, InvoiceIssued, SpotPrice};

    fn t(s: i64) -> Timestamp {
        Timestamp::from_unix(1_800_000_000 + s).unwrap()
    }

    /// An invoice or certificate whose period ends at `to`, received at 0: issued only once the
    /// period has ended; other kinds are not concerned.
    #[test]
    fn issued_only_for_ended_periods() {
        let invoice = |to: i64| {
            Body::InvoiceIssued(InvoiceIssued {
                number: "INV-000001".into(),
                tenant: "acme".into(),
                period_from: t(-3_600),
                period_to: t(to),
                currency: "CNY".into(),
                total: rust_decimal::Decimal::ONE,
                checkpoint_size: 1,
                invoice_sha256: "00".repeat(32),
            })
        };
        let certificate = |to: i64| {
            Body::CertificateIssued(CertificateIssued {
                id: "CERT-000001".into(),
                tenant: "acme".into(),
                period_from: t(-3_600),
                period_to: t(to),
                checkpoint_size: 1,
                certificate_sha256: "00".repeat(32),
            })
        };
        for (name, body, ok) in [
            ("invoice, ended before", invoice(-1), true),
            ("invoice, ends as received", invoice(0), true),
            ("invoice, ends a second later", invoice(1), false),
            ("certificate, ended", certificate(-60), true),
            ("certificate, ends an hour later", certificate(3_600), false),
            (
                "a tenant registration",
                Body::TenantRegistered(crate::record::TenantRegistered {
                    tenant: "acme".into(),
                }),
                true,
            ),
        ] {
            let r = check_issued(&body, t(0));
            assert_eq!(r.is_ok(), ok, "{name}: {r:?}");
            if let Err(e) = r {
                assert_eq!(e.reason, Reason::InFuture, "{name}");
                assert_eq!(e.field.as_deref(), Some("body.period_to"), "{name}");
            }
            // check_time applies it too, whatever the policy.
            assert_eq!(
                check_time(&body, t(0), &LogPolicy::default()).is_ok(),
                ok,
                "{name}"
            );
        }
    }

    /// Every kind of price, at the skew's edge and one second past it; the operator's own
    /// prices may be announced far ahead, a spot price at most 7 days.
    #[test]
    fn no_price_of_any_kind_takes_effect_in_the_past() {
        use crate::record::{RateCard, RegionParameters, TenantPlan, Tier, VolumeTiers};
        let dec = |s: &str| s.parse::<Decimal>().unwrap();
        let kinds = |from: Timestamp| -> Vec<Body> {
            vec![
                Body::SpotPrice(SpotPrice {
                    region: "west".into(),
                    gpu_model: "H100".into(),
                    price_per_gpu_hour: dec("2"),
                    currency: "CNY".into(),
                    effective_from: from,
                }),
                Body::RateCard(RateCard {
                    region: "west".into(),
                    gpu_model: "H100".into(),
                    lease_class: crate::record::LeaseClass::OnDemand,
                    currency: "CNY".into(),
                    price_per_gpu_hour: dec("2"),
                    effective_from: from,
                }),
                Body::RegionParams(RegionParameters {
                    region: "west".into(),
                    currency: "CNY".into(),
                    electricity_price_per_kwh: dec("0.5"),
                    pue: dec("1.2"),
                    carbon_g_per_kwh: dec("500"),
                    effective_from: from,
                }),
                Body::VolumeTiers(VolumeTiers {
                    plan: "p".into(),
                    region: "west".into(),
                    gpu_model: "H100".into(),
                    lease_class: crate::record::LeaseClass::Reserved,
                    currency: "CNY".into(),
                    tiers: vec![Tier {
                        up_to_gpu_hours: None,
                        price_per_gpu_hour: dec("1"),
                    }],
                    effective_from: from,
                }),
                Body::TenantPlan(TenantPlan {
                    tenant: "acme".into(),
                    plan: "p".into(),
                    effective_from: from,
                }),
            ]
        };
        let policy = LogPolicy::default();
        let skew = policy.max_future_skew_seconds as i64;
        for (name, from, spot_ok, ledger_ok) in [
            ("now", 0, true, true),
            ("at the skew", -skew, true, true),
            ("a second past the skew", -skew - 1, false, false),
            ("six hours back (the attack)", -6 * 3_600, false, false),
            ("7 days ahead", MAX_SPOT_SCHEDULE_AHEAD_SECONDS, true, true),
            ("a year ahead", 365 * 86_400, false, true),
        ] {
            for body in kinds(t(from)) {
                let ok = if matches!(body, Body::SpotPrice(_)) {
                    spot_ok
                } else {
                    ledger_ok
                };
                let kind = body.kind().as_str();
                let r = check_time(&body, t(0), &policy);
                assert_eq!(r.is_ok(), ok, "{kind}, {name}: {r:?}");
                if let Err(r) = r {
                    let want = if from < 0 {
                        Reason::PriceInPast
                    } else {
                        Reason::InFuture
                    };
                    assert_eq!(r.reason, want, "{kind}, {name}");
                    assert_eq!(r.field.as_deref(), Some("body.effective_from"));
                }
            }
        }
        // Inside an invoiced period: refused for every kind; a tenant plan only inside its own
        // tenant's period.
        let mut h = SpotHistory::default();
        h.invoiced(5, "beta", t(-7_200), t(-3_600));
        for body in kinds(t(-5_000)) {
            let r = h.check(9, &body);
            let own_only = matches!(body, Body::TenantPlan(_));
            assert_eq!(r.is_ok(), own_only, "{}: {r:?}", body.kind().as_str());
            if let Err(r) = r {
                assert_eq!(r.reason, Reason::PriceInInvoicedPeriod);
                assert!(r.message.contains("entry 5"), "{}", r.message);
            }
            // The same period, logged after the price: no refusal.
            assert!(h.check(5, &body).is_ok());
        }
        // The period's end is outside it.
        for body in kinds(t(-3_600)) {
            assert!(h.check(9, &body).is_ok(), "{}", body.kind().as_str());
        }
        h.invoiced(6, "acme", t(-7_200), t(-3_600));
        for body in kinds(t(-5_000)) {
            assert!(h.check(9, &body).is_err(), "{}", body.kind().as_str());
        }
    }

    #[test]
    fn a_period_closes_the_policy_skew_after_it_ends() {
        let p = |skew| LogPolicy {
            max_record_age_seconds: 3_600,
            max_future_skew_seconds: skew,
        };
        let default = crate::limits::DEFAULT_MAX_FUTURE_SKEW_SECONDS;
        for (name, skew, configured, closes) in [
            ("the default skew", default, None, t(300)),
            ("no skew", 0, None, t(0)),
            ("a day of skew", 86_400, None, t(86_400)),
            ("configured: at once", default, Some(0), t(0)),
            ("configured: an hour", default, Some(3_600), t(3_600)),
        ] {
            assert_eq!(
                period_closes_at(t(0), &p(skew), configured),
                closes,
                "{name}"
            );
        }
        // Beyond the end of time it saturates rather than wrapping into the past.
        let end = Timestamp::parse("9999-12-31T23:59:59Z").unwrap();
        assert_eq!(period_closes_at(end, &p(u64::MAX), None), end);
        assert_eq!(period_closes_at(end, &p(0), Some(u64::MAX)), end);
    }

    #[test]
    fn a_key_signs_only_as_its_signer_in_its_role_until_revoked() {
        let reg = SignerKeyRegistered {
            signer: "node-1".into(),
            role: crate::record::Role::Node,
            key_id: "k1".into(),
            public_key: String::new(),
            nodes: Some(vec!["node-1".into()]),
            regions: vec!["west".into()],
        };
        for (name, kind, signer, revoked_at, want) in [
            ("its own record", Kind::GpuUsage, "node-1", None, None),
            ("energy too", Kind::Energy, "node-1", None, None),
            (
                "as another signer",
                Kind::GpuUsage,
                "node-2",
                None,
                Some((Reason::KeySignerMismatch, "key_id")),
            ),
            (
                "a market kind",
                Kind::SpotPrice,
                "node-1",
                None,
                Some((Reason::RoleNotAllowed, "kind")),
            ),
            (
                "after its revocation",
                Kind::GpuUsage,
                "node-1",
                Some(7),
                Some((Reason::RevokedKey, "key_id")),
            ),
        ] {
            let got = check_key(&reg, kind, signer, revoked_at)
                .err()
                .map(|r| (r.reason, r.field.unwrap_or_default()));
            let want = want.map(|(r, f)| (r, f.to_owned()));
            assert_eq!(got, want, "{name}");
        }
        // The store's check under the lock is the same rule, with the same reason and field.
        let r = check_not_revoked("k1", Some(7)).unwrap_err();
        assert_eq!(
            (r.reason, r.field.as_deref()),
            (Reason::RevokedKey, Some("key_id"))
        );
        assert!(r.message.contains("entry 7"), "{}", r.message);
        assert!(check_not_revoked("k1", None).is_ok());
    }

    #[test]
    fn a_stream_never_claims_a_second_twice() {
        let mut iv = Intervals::default();
        iv.claim("s", t(100), t(200), 5);
        iv.claim("s", t(300), t(400), 9);
        for (name, stream, start, end, overlaps) in [
            ("before all", "s", 0, 100, None),
            ("between, touching both", "s", 200, 300, None),
            ("after all", "s", 400, 500, None),
            ("inside the first", "s", 150, 160, Some(5)),
            ("across the first's end", "s", 199, 250, Some(5)),
            ("across the second's start", "s", 250, 301, Some(9)),
            ("covering both", "s", 0, 1_000, Some(9)),
            ("the same interval", "s", 300, 400, Some(9)),
            ("another stream", "t", 150, 160, None),
        ] {
            let got = iv.check(Kind::GpuUsage, stream, t(start), t(end)).err();
            match overlaps {
                None => assert!(got.is_none(), "{name}: {got:?}"),
                Some(idx) => {
                    let r = got.unwrap_or_else(|| panic!("{name}: accepted"));
                    assert_eq!(r.reason, Reason::OverlappingInterval, "{name}");
                    assert_eq!(r.field.as_deref(), Some("body.start"), "{name}");
                    assert!(
                        r.message.contains(&format!("entry {idx}")),
                        "{name}: {}",
                        r.message
                    );
                }
            }
        }
    }

    #[test]
    fn a_settlement_names_an_issued_invoice_of_its_tenant_in_its_currency() {
        use crate::record::Settlement;
        let mut st = Settlements::default();
        st.apply(
            1,
            &Body::InvoiceIssued(InvoiceIssued {
                number: "INV-000001".into(),
                tenant: "acme".into(),
                period_from: t(-3_600),
                period_to: t(0),
                currency: "CNY".into(),
                total: Decimal::new(10_000, 2),
                checkpoint_size: 1,
                invoice_sha256: "00".repeat(32),
            }),
        );
        let s = |tenant: &str, invoice: &str, currency: &str, cents: i64| Settlement {
            tenant: tenant.into(),
            invoice: invoice.into(),
            currency: currency.into(),
            amount: Decimal::new(cents, 2),
            note: String::new(),
            external_reference: None,
        };
        for (name, body, want) in [
            (
                "a payment",
                Body::Payment(s("acme", "INV-000001", "CNY", 5_000)),
                None,
            ),
            (
                "a payment above the total (excess credit)",
                Body::Payment(s("acme", "INV-000001", "CNY", 20_000)),
                None,
            ),
            (
                "a credit of the whole total",
                Body::CreditNote(s("acme", "INV-000001", "CNY", 10_000)),
                None,
            ),
            (
                "an unknown invoice",
                Body::Payment(s("acme", "INV-000002", "CNY", 1)),
                Some((Reason::UnknownInvoice, "body.invoice")),
            ),
            (
                "another tenant's invoice",
                Body::CreditNote(s("beta", "INV-000001", "CNY", 1)),
                Some((Reason::UnknownInvoice, "body.invoice")),
            ),
            (
                "another currency",
                Body::Payment(s("acme", "INV-000001", "USD", 1)),
                Some((Reason::CurrencyMismatch, "body.currency")),
            ),
            (
                "a credit above the total",
                Body::CreditNote(s("acme", "INV-000001", "CNY", 10_001)),
                Some((Reason::CreditAboveTotal, "body.amount")),
            ),
        ] {
            let got = st
                .check(&body)
                .err()
                .map(|r| (r.reason, r.field.unwrap_or_default()));
            assert_eq!(got, want.map(|(r, f)| (r, f.to_owned())), "{name}");
        }
        // Credits add up: 60.00 then 40.00 is the whole total, one cent more is not.
        st.apply(2, &Body::CreditNote(s("acme", "INV-000001", "CNY", 6_000)));
        assert!(st
            .check(&Body::CreditNote(s("acme", "INV-000001", "CNY", 4_000)))
            .is_ok());
        st.apply(3, &Body::CreditNote(s("acme", "INV-000001", "CNY", 4_000)));
        let r = st
            .check(&Body::CreditNote(s("acme", "INV-000001", "CNY", 1)))
            .unwrap_err();
        assert_eq!(r.reason, Reason::CreditAboveTotal);
        // Payments never count as credit.
        st.apply(4, &Body::Payment(s("acme", "INV-000001", "CNY", 10_000)));
        assert!(st
            .check(&Body::Payment(s("acme", "INV-000001", "CNY", 1)))
            .is_ok());
        // An external reference is used once per tenant and kind.
        let with_ref = |r: &str| Settlement {
            external_reference: Some(r.into()),
            ..s("acme", "INV-000001", "CNY", 100)
        };
        st.apply(5, &Body::Payment(with_ref("BANK-1")));
        let r = st.check(&Body::Payment(with_ref("BANK-1"))).unwrap_err();
        assert_eq!(
            (r.reason, r.field.as_deref()),
            (Reason::ReferenceUsed, Some("body.external_reference"))
        );
        assert!(r.message.contains("entry 5"), "{}", r.message);
        assert!(st.check(&Body::Payment(with_ref("BANK-2"))).is_ok());
        // A credit note may carry the same reference as a payment; and another tenant may.
        let credit = Body::CreditNote(Settlement {
            amount: Decimal::ZERO,
            ..with_ref("BANK-1")
        });
        assert!(st.check(&credit).is_ok());
        let beta_invoice = IssuedInvoice {
            tenant: "beta".into(),
            currency: "CNY".into(),
            total: Decimal::ONE,
            credited: Decimal::ZERO,
        };
        let mut other = Settlements::of("INV-000002", beta_invoice);
        other.reference(5, &Body::Payment(with_ref("BANK-1")));
        let beta = Body::Payment(Settlement {
            tenant: "beta".into(),
            invoice: "INV-000002".into(),
            ..with_ref("BANK-1")
        });
        assert!(other.check(&beta).is_ok());
    }
}
