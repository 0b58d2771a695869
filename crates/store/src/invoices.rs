//! Issuing invoices, settling them, and balances. An invoice is computed at a log size S (a
//! checkpoint of S is signed in the same transaction), rated with the prices of the log as of S,
//! recorded as an `invoice_issued` entry holding its SHA-256, and kept as rendered JSON for
//! download. Records that arrive after a period was invoiced become adjustment lines of the
//! tenant's next invoice, naming the period they belong to; in a graduated (volume-tiered)
//! series they continue the period's count after the GPU-seconds already invoiced.
//!
//! The rating is computed outside the head lock, on a read connection at the log's size N then
//! ([`draft`]), so ingest never waits for it. Only the append goes through the sequencer
//! ([`issue`]): under the head lock, at the log's size S ≥ N, it checks that nothing logged
//! at N..S changes the rating (see [`Draft::changed`]), and then issues exactly what a
//! computation at S would give; otherwise the caller computes again, at most
//! [`MAX_ISSUE_ATTEMPTS`] times.
//!
//! Which records are read: those [`InvoiceScope::place`] can put on the invoice, selected by
//! start through an index ([`selection`]), never the tenant's whole history.

use super::conn::DbConn;
use super::cosignatures::{with_cosignatures, Witnessed};
use super::error::StoreError;
use super::schema::{entries, invoices};
use super::usage::{self, Selected};
use super::write::{checkpoint_locked, push_ledger_entry, Appender};
use super::{pricing, read, rollups};
use diesel::prelude::*;
use gpuledger_core::admission;
use gpuledger_core::canonical;
use gpuledger_core::checkpoint::LogSigner;
use gpuledger_core::invoice::{
    self as core_invoice, record_start, BillTo, Invoice, InvoiceDoc, InvoiceLine, InvoiceRating,
    InvoiceScope, Issuer, Period, Placement, Rated, TaxTable, INVOICE_FORMAT_V2,
};
use gpuledger_core::leaf::Leaf;
use gpuledger_core::rating::{self, PriceBook};
use gpuledger_core::record::{Body, ContractRegistered, InvoiceIssued, Kind, Settlement};
use gpuledger_core::rejection::Reason;
use gpuledger_core::time::Timestamp;
use rust_decimal::Decimal;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// How many times an invoice or a certificate is computed outside the head lock before the
/// request is answered busy ([`StoreError::Busy`]): each attempt after the first follows a
/// change in the log, at the size it was computed at, that would change the result.
pub const MAX_ISSUE_ATTEMPTS: u32 = 3;

/// Default [`InvoiceSettings::payment_terms_days`].
pub const DEFAULT_PAYMENT_TERMS_DAYS: u32 = 30;

/// What the server's configuration says about the invoices it issues (docs/CONFIGURATION.md,
/// "Invoices"): the issuer, the payment terms, the tax of each region, and the public base URL
/// the PDF's verification note links to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvoiceSettings {
    /// `[issuer]`. An empty name is replaced by the log's origin when an invoice is issued.
    pub issuer: Issuer,
    /// `payment_terms_days`: `due_at` = `issued_at` + this many days.
    pub payment_terms_days: u32,
    /// `[[tax]]`: the tax rate per region (none configured: rate 0, no tax name).
    pub taxes: TaxTable,
    /// `public_url`: the service's base URL as tenants reach it (no trailing slash).
    pub public_url: Option<String>,
}

/// What an invoice PDF shows besides the document (`[issuer]` `payment_instructions` and
/// `[issuer.bill_to_tax_ids]`): read when a PDF is rendered, never part of the document or its
/// hash.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InvoicePdfSettings {
    /// How to pay, one line each (bank, account, SWIFT/BIC, a payment link).
    pub payment_instructions: Vec<String>,
    /// The buyers' tax registration numbers, by tenant id.
    pub bill_to_tax_ids: std::collections::BTreeMap<String, String>,
}

impl Default for InvoiceSettings {
    fn default() -> Self {
        InvoiceSettings {
            issuer: Issuer::default(),
            payment_terms_days: DEFAULT_PAYMENT_TERMS_DAYS,
            taxes: TaxTable::default(),
            public_url: None,
        }
    }
}

/// The lines of one currency of an invoice (or preview) of `period`, taxed per region by
/// `taxes`, with tax, gross and the totals set by [`core_invoice::apply_tax`] (the rule the
/// verifier recomputes by): the period's usage lines, then the lines of the tenant's
/// `contracts` in the currency ([`core_invoice::contract_lines`]), then the adjustment lines.
/// Used to issue and to preview, so both serve the same line objects.
pub struct PricedLines {
    pub lines: Vec<InvoiceLine>,
    pub totals: core_invoice::Totals,
    pub commitments: Vec<core_invoice::Commitment>,
    pub availability: Vec<gpuledger_core::sla::Availability>,
    pub allowances: Vec<gpuledger_core::allowance::Allowance>,
}

/// [`PricedLines`] of `rated` (the period's lines, then adjustment lines) and what the
/// records show beyond them (`measured`: SLA presence, contract-priced GPU-seconds). With
/// `whole` (issuing), a period that splits a billing period of a contract with a commitment,
/// an SLA or included hours is refused; a preview of part of one (`whole` false) judges the
/// whole billing periods it holds only (included hours: each billing period so far).
pub fn priced_lines(
    period: Period,
    rated: Vec<core_invoice::RatedLine>,
    contracts: &[ContractRegistered],
    measured: &core_invoice::Measurement,
    currency: &str,
    taxes: &TaxTable,
    whole: bool,
) -> Result<PricedLines, StoreError> {
    let tax = |region: &str| taxes.for_region(region);
    let (adjustments, usage): (Vec<_>, Vec<_>) =
        rated.into_iter().partition(|r| r.adjustment_for.is_some());
    let mut lines = core_invoice::lines_v2(usage, &tax);
    let contract =
        core_invoice::contract_lines(contracts, period, currency, &lines, measured, &tax, whole)
            .map_err(|e| StoreError::ContractPeriodSplit(e.to_string()))?;
    lines.extend(contract.lines);
    lines.extend(core_invoice::lines_v2(adjustments, &tax));
    let totals = core_invoice::apply_tax(&mut lines, currency);
    Ok(PricedLines {
        lines,
        totals,
        commitments: contract.commitments,
        availability: contract.availability,
        allowances: contract.allowances,
    })
}

/// An invoice already issued to a tenant, as its row holds it.
pub(crate) struct Issued {
    pub(crate) period: Period,
    pub(crate) checkpoint_size: u64,
}

/// The tenant's invoices whose `invoice_issued` entry is below log size `size`.
pub(crate) fn issued_for(
    conn: &mut DbConn,
    tenant: &str,
    size: u64,
) -> Result<Vec<(String, Issued)>, StoreError> {
    let rows: Vec<(String, i64, i64, i64)> = invoices::table
        .filter(invoices::tenant.eq(tenant))
        .filter(invoices::entry_idx.lt(size.min(i64::MAX as u64) as i64))
        .select((
            invoices::number,
            invoices::period_from,
            invoices::period_to,
            invoices::checkpoint_size,
        ))
        .load(conn)?;
    rows.into_iter()
        .map(|(n, f, t, s)| {
            let ts = |x: i64| {
                Timestamp::from_unix(x)
                    .ok_or_else(|| StoreError::Corrupt(format!("invoice {n} period")))
            };
            Ok((
                n.clone(),
                Issued {
                    period: Period {
                        from: ts(f)?,
                        to: ts(t)?,
                    },
                    checkpoint_size: s as u64,
                },
            ))
        })
        .collect()
}

fn unpriced_error(list: &[rating::Unpriced], what: &str) -> StoreError {
    let items: Vec<String> = list
        .iter()
        .map(|u| {
            format!(
                "{} for {} {} {} ({} of quantity {})",
                u.what,
                u.region,
                u.gpu_model.as_deref().unwrap_or("energy"),
                u.class.map_or("", |c| c.as_str()),
                u.records,
                u.quantity
            )
        })
        .collect();
    StoreError::Refused(format!(
        "{what} has unpriced usage; set the missing prices first: {}",
        items.join("; ")
    ))
}

/// The SHA-256 (hex) of an invoice's RFC 8785 JSON, which is also what is stored and served.
pub fn invoice_json(invoice: &Invoice) -> Result<(String, String), StoreError> {
    let value = InvoiceDoc::V2(invoice.clone()).to_value();
    let bytes =
        canonical::to_vec(&value).map_err(|e| StoreError::Corrupt(format!("invoice json: {e}")))?;
    let hash = hex::encode(Sha256::digest(&bytes));
    Ok((String::from_utf8(bytes).expect("JSON is UTF-8"), hash))
}

/// The contract billing periods due for an invoice at `now` (docs/RATING.md, "Scheduled
/// issuance"): of every contract logged so far, each billing period (clipped to its term) that
/// has closed (`core::admission::period_closes_at`, with `close_seconds` or the policy's
/// skew), that charges something ([`gpuledger_core::contract::charges`]: a fee anchored in it,
/// or a commitment) and that no invoice of the contract's tenant overlaps; of a billing period
/// an earlier invoice holds part of (an interim invoice), each uninvoiced rest that bills a fee
/// anchored in it. By tenant, then period.
pub fn due_contract_periods(
    conn: &mut DbConn,
    now: Timestamp,
    close_seconds: Option<u64>,
) -> Result<Vec<(String, Period)>, StoreError> {
    let size = read::head(conn)?.0;
    let policy = read::policy(conn, size)?;
    let mut due = BTreeSet::new();
    let mut invoiced: std::collections::HashMap<String, Vec<Period>> = Default::default();
    let kinds = [Kind::ContractRegistered, Kind::ContractAmended];
    let contracts = gpuledger_core::contract::Contracts::of(read::bodies_of(conn, &kinds, size)?);
    for c in contracts.into_vec() {
        if !invoiced.contains_key(&c.tenant) {
            let periods = issued_for(conn, &c.tenant, size)?
                .into_iter()
                .map(|(_, i)| i.period)
                .collect();
            invoiced.insert(c.tenant.clone(), periods);
        }
        let taken = &invoiced[&c.tenant];
        for span in gpuledger_core::contract::billing_periods(&c) {
            let period = Period {
                from: span.from,
                to: span.to,
            };
            if admission::period_closes_at(span.to, &policy, close_seconds) > now {
                break;
            }
            let gaps = period.uncovered(taken);
            if gaps == [period] {
                if gpuledger_core::contract::charges_in(&c, &span) {
                    due.insert((c.tenant.clone(), period));
                }
                continue;
            }
            // Partly invoiced (an interim invoice of the period so far, issued by hand): the
            // rest is due where it bills a fee of its own (an arrears fee, anchored at the
            // period's end). A contract judged over whole periods is never split, so it has
            // no such rest.
            for gap in gaps {
                let rest = gpuledger_core::contract::charges(&c, gap.from, gap.to);
                if !rest.fees.is_empty() && rest.split.is_none() {
                    due.insert((c.tenant.clone(), gap));
                }
            }
        }
    }
    Ok(due.into_iter().collect())
}

/// The scope of a new invoice of `tenant` for `period` at log size `size`: refused when an
/// earlier invoice covers part of the period.
fn new_scope(
    conn: &mut DbConn,
    tenant: &str,
    period: Period,
    size: u64,
) -> Result<InvoiceScope, StoreError> {
    let previous = issued_for(conn, tenant, size)?;
    if let Some((n, _)) = previous.iter().find(|(_, i)| i.period.overlaps(&period)) {
        return Err(StoreError::AlreadyExists(format!(
            "invoice {n} of {tenant} already covers part of [{}, {})",
            period.from, period.to
        )));
    }
    Ok(InvoiceScope::new(
        period,
        previous.iter().map(|(_, i)| (i.period, i.checkpoint_size)),
    )
    .excluding(excluded_below(conn, tenant, size)?))
}

/// The tenant's exclusions below log size `size` as an [`InvoiceScope`] takes them: entry →
/// reason.
fn excluded_below(
    conn: &mut DbConn,
    tenant: &str,
    size: u64,
) -> Result<Vec<(u64, String)>, StoreError> {
    Ok(read::exclusions(conn, tenant, size)?
        .into_iter()
        .map(|(entry, (_, reason))| (entry, reason))
        .collect())
}

/// The tenant's records below log size `size` (ascending) that an invoice of `scope` is fed
/// besides those starting in its period ([`feed_period`]): a superset of every other record
/// whose placement can change its lines.
///
/// [`InvoiceScope::place`] puts a record (index `i`, start `t`) in
/// - `Period` when `t` is in the period: [`feed_period`] feeds these;
/// - `Late(p)` when `t` is in an earlier invoiced period `p` and `i ≥ since`: every record
///   logged at `since..size` is looked at (the `(tenant, idx)` range) and the rule itself keeps
///   the late ones;
/// - `Invoiced(p)` when `t` is in `p` and `i < since`: such a record only continues the count
///   of a graduated series in `p` (`Rater::add_invoiced_usage`), which makes lines only for
///   late records of `p` and does nothing at all when no volume tiers are logged
///   (`tiered` false). So these are read, by the start range of `p` below `since`, only for the
///   periods that have a late record, and only when tiers exist. Left out, they would add a
///   count of zero billed seconds: no line, no unpriced usage;
/// - `Outside` otherwise: it adds nothing, and is never read except as part of the ranges above.
///
/// The core rule then places every record read, so it stays the one decision.
fn selection(
    conn: &mut DbConn,
    tenant: &str,
    scope: &InvoiceScope,
    size: u64,
    tiered: bool,
) -> Result<Vec<Selected>, StoreError> {
    let mut idxs = Vec::new();
    if scope.earlier.is_empty() {
        return Ok(idxs);
    }
    let mut late_periods = BTreeSet::new();
    for (entry, start) in usage::logged_in(conn, tenant, scope.since..size)? {
        if scope.period.contains(start) {
            continue;
        }
        match scope.place(entry.idx, start) {
            Placement::Late(p) => {
                idxs.push(entry);
                late_periods.insert(p);
            }
            // A late record excluded from rating is listed as excluded.
            Placement::Excluded => idxs.push(entry),
            _ => {}
        }
    }
    if tiered {
        for p in late_periods {
            idxs.extend(usage::starting_in(conn, tenant, p.from, p.to, scope.since)?);
        }
    }
    idxs.sort_unstable();
    idxs.dedup();
    Ok(idxs)
}

/// Feeds `rating` the tenant's records below log size `size` whose intervals start in its
/// scope's period, noting each in `watch`: each usage rollup bucket of the period's hours
/// ([`rollups::buckets_at`]) that [`InvoiceRating::add_bucket`] rates whole, and the records
/// of the other buckets one by one (the partial hours at the period's ends, a bucket holding
/// an excluded record, a price change, the end of an SLA's or an included entry's billing
/// period, ...). When the rollups cannot say what they held at `size`, every record of the
/// period one by one. Either way the lines are the same: `add_bucket` rates a bucket whole only
/// where that is exactly what its records would make.
fn feed_period(
    conn: &mut DbConn,
    tenant: &str,
    book: &PriceBook,
    size: u64,
    rating: &mut InvoiceRating,
    watch: &mut Watch,
) -> Result<(), StoreError> {
    let period = rating.scope().period;
    let first_hour = gpuledger_core::usage::Window::Hour.start_of(period.from);
    let Some(buckets) = rollups::buckets_at(conn, tenant, first_hour, period.to, size)? else {
        let idxs = usage::starting_in(conn, tenant, period.from, period.to, size)?;
        return feed_records(conn, tenant, book, &idxs, rating, watch, None);
    };
    let mut by_record = BTreeSet::new();
    for (key, sums) in buckets {
        if rating.add_bucket(book, &key, &sums) {
            watch.saw_bucket(&key, sums.last_end);
        } else {
            by_record.insert(key);
        }
    }
    // The records of the buckets not rated whole, by runs of consecutive hours.
    let hours: BTreeSet<i64> = by_record.iter().map(|k| k.hour).collect();
    let mut runs: Vec<(i64, i64)> = Vec::new();
    for h in hours {
        match runs.last_mut() {
            Some((_, to)) if *to == h => *to = h + 3600,
            _ => runs.push((h, h + 3600)),
        }
    }
    for (a, b) in runs {
        let from = Timestamp::from_unix(a).map_or(period.from, |t| t.max(period.from));
        let to = Timestamp::from_unix(b).map_or(period.to, |t| t.min(period.to));
        let idxs = usage::starting_in(conn, tenant, from, to, size)?;
        feed_records(conn, tenant, book, &idxs, rating, watch, Some(&by_record))?;
    }
    Ok(())
}

/// Feeds `rating` the records at `idxs` (of `only` those buckets, if given), noting in `watch`
/// those it places.
fn feed_records(
    conn: &mut DbConn,
    tenant: &str,
    book: &PriceBook,
    idxs: &[Selected],
    rating: &mut InvoiceRating,
    watch: &mut Watch,
    only: Option<&BTreeSet<gpuledger_core::usage::RollupKey>>,
) -> Result<(), StoreError> {
    usage::for_each_of(conn, Some(tenant), idxs, &mut |idx, _, _, body| {
        if let Some(only) = only {
            match gpuledger_core::usage::rollup_of(body) {
                Some((key, _)) if only.contains(&key) => {}
                _ => return,
            }
        }
        if rating.add(book, idx, body) != Placement::Outside {
            watch.saw(body);
        }
    })
}

/// The bodies of the entries at `idxs` below log size `size`.
fn bodies_at(conn: &mut DbConn, idxs: &[u64], size: u64) -> Result<Vec<Body>, StoreError> {
    let mut out = Vec::new();
    for chunk in idxs.chunks(1_000) {
        let wanted: Vec<i64> = chunk
            .iter()
            .filter(|i| **i < size)
            .map(|i| *i as i64)
            .collect();
        let rows: Vec<(i64, Vec<u8>)> = entries::table
            .filter(entries::idx.eq_any(wanted))
            .select((entries::idx, entries::leaf))
            .load(conn)?;
        for (i, leaf) in rows {
            out.push(usage::parse_body(i, &leaf)?);
        }
    }
    Ok(out)
}

/// A rating of `scope` measuring `measurement`, told the bodies of its excluded records.
fn start_rating(
    conn: &mut DbConn,
    scope: InvoiceScope,
    measurement: core_invoice::Measurement,
    size: u64,
) -> Result<InvoiceRating, StoreError> {
    let excluded: Vec<u64> = scope.excluded.keys().copied().collect();
    let bodies = bodies_at(conn, &excluded, size)?;
    Ok(InvoiceRating::new(scope)
        .measuring(measurement)
        .excluded_bodies(&bodies))
}

/// What a computed rating depends on besides the records it read: a price, plan or lease logged
/// later changes it only if it matters to a record it rated (see [`Draft::changed`]).
#[derive(Debug, Default)]
struct Watch {
    /// The latest end of a rated record's interval. A price, region parameter, volume tier or
    /// plan that takes effect at or after it prices nothing the rating holds: rates are looked
    /// up at instants before a record's end, and tiers and plans at a period's start, which is
    /// at or before a record's start.
    horizon: Option<Timestamp>,
    /// The leases the rated usage records name (a lease's class decides its price).
    leases: BTreeSet<String>,
}

impl Watch {
    fn saw(&mut self, body: &Body) {
        let end = match body {
            Body::GpuUsage(u) => {
                if let Some(l) = &u.lease {
                    self.leases.insert(l.clone());
                }
                u.end
            }
            Body::Energy(e) => e.end,
            _ => return,
        };
        self.horizon = self.horizon.max(Some(end));
    }

    /// Notes a rollup bucket rated whole, whose records end by `last_end`.
    fn saw_bucket(&mut self, key: &gpuledger_core::usage::RollupKey, last_end: Timestamp) {
        if let Some(l) = key.lease() {
            self.leases.insert(l.to_owned());
        }
        self.horizon = self.horizon.max(Some(last_end));
    }

    /// Whether a pricing entry logged after the rating can change it.
    fn affected_by(&self, tenant: &str, body: &Body) -> bool {
        let before = |t: Timestamp| self.horizon.is_some_and(|h| t < h);
        match body {
            Body::RateCard(r) => before(r.effective_from),
            Body::SpotPrice(p) => before(p.effective_from),
            Body::RegionParams(r) => before(r.effective_from),
            Body::VolumeTiers(v) => before(v.effective_from),
            Body::TenantPlan(p) => p.tenant == tenant && before(p.effective_from),
            Body::LeaseRegistered(l) => self.leases.contains(&l.lease),
            _ => false,
        }
    }
}

/// Rates the tenant's records below log size `size` where `scope` places them
/// ([`InvoiceRating`], the rule the verifier recomputes by), with the prices of the log as of
/// `size`; refused when any of them is unpriced.
fn rate(
    conn: &mut DbConn,
    tenant: &str,
    scope: InvoiceScope,
    measurement: core_invoice::Measurement,
    size: u64,
) -> Result<(Rated, Watch), StoreError> {
    let book = pricing::price_book(conn, size)?;
    let idxs = selection(conn, tenant, &scope, size, book.has_tiers())?;
    let mut rating = start_rating(conn, scope, measurement, size)?;
    let mut watch = Watch::default();
    feed_period(conn, tenant, &book, size, &mut rating, &mut watch)?;
    feed_records(conn, tenant, &book, &idxs, &mut rating, &mut watch, None)?;
    let rated = rating.finish();
    if let Some((p, unpriced)) = rated.unpriced.first() {
        let what = if p.is_some() {
            "a late record of an earlier period"
        } else {
            "the period"
        };
        return Err(unpriced_error(unpriced, what));
    }
    Ok((rated, watch))
}

/// Rates `tenant`'s usage and energy records whose intervals start in `period`, with the prices
/// of the log as of size `size` (and the plan and volume tiers in force at the period's start):
/// the invoice preview, rated as an invoice of the period with no earlier invoice would be
/// ([`InvoiceRating`], fed by [`feed_period`]: the rollups' whole buckets, the other records
/// one by one), the records of the period excluded from rating left out; the usage records
/// rated count toward `measurement` (SLA presence, included hours), and those it finds
/// contract-priced are not rated by the rate card. Reads the period's rollups and records and
/// the tenant's exclusions, nothing else of the tenant's history.
pub fn preview(
    conn: &mut DbConn,
    tenant: &str,
    period: Period,
    size: u64,
    measurement: core_invoice::Measurement,
) -> Result<Rated, StoreError> {
    let book: PriceBook = pricing::price_book(conn, size)?;
    let scope = InvoiceScope::new(period, []).excluding(excluded_below(conn, tenant, size)?);
    let mut rating = start_rating(conn, scope, measurement, size)?;
    feed_period(
        conn,
        tenant,
        &book,
        size,
        &mut rating,
        &mut Watch::default(),
    )?;
    Ok(rating.finish())
}

/// The preview of `tenant`'s invoice for `period` at log size `size` ([`preview_period`]).
pub struct PeriodPreview {
    /// The tenant's contracts at `size`.
    pub contracts: Vec<ContractRegistered>,
    /// Per currency (in order) that has lines: the lines, totals, commitments, availability
    /// and allowances, as an invoice would have them (a partial billing period judged so far).
    pub currencies: Vec<(String, PricedLines)>,
    /// Usage no price was in force for.
    pub unpriced: Vec<rating::Unpriced>,
    /// The period's records excluded from rating.
    pub excluded: Vec<core_invoice::ExcludedRecord>,
}

/// What an invoice of `tenant` for `period` would hold at log size `size` (`GET
/// /v1/invoices/preview`, and the usage alerts): the records starting in the period rated
/// ([`preview`]), then each currency's contract lines ([`priced_lines`], `whole` false), taxed
/// by `taxes`. A currency whose lines all have zero quantity is left out.
pub fn preview_period(
    conn: &mut DbConn,
    tenant: &str,
    period: Period,
    size: u64,
    taxes: &TaxTable,
) -> Result<PeriodPreview, StoreError> {
    let contracts = read::contracts(conn, tenant, size)?;
    let measurement = read::measurement(conn, tenant, &contracts, period, size)?;
    let mut rated = preview(conn, tenant, period, size, measurement)?;
    let measurement = std::mem::take(&mut rated.measurement);
    let excluded = std::mem::take(&mut rated.excluded);
    let (mut by_currency, unpriced) = rated.period_lines();
    for c in &contracts {
        by_currency.entry(c.currency.clone()).or_default();
    }
    let mut currencies = Vec::new();
    for (currency, lines) in by_currency {
        let rated = lines
            .into_iter()
            .map(|line| core_invoice::RatedLine {
                line,
                adjustment_for: None,
            })
            .collect();
        let p = priced_lines(
            period,
            rated,
            &contracts,
            &measurement,
            &currency,
            taxes,
            false,
        )?;
        if !p.lines.is_empty() {
            currencies.push((currency, p));
        }
    }
    Ok(PeriodPreview {
        contracts,
        currencies,
        unpriced,
        excluded,
    })
}

/// An invoice computed outside the head lock, at log size `size`: its lines per currency, and
/// what they depend on. [`issue`] issues it under the head lock if nothing relevant was logged
/// since.
pub(crate) struct Draft {
    tenant: String,
    period: Period,
    size: u64,
    scope: InvoiceScope,
    /// Per currency (in order): the period's lines, the contract lines, then the adjustment
    /// lines, taxed, with their totals and the contracts' commitments.
    lines: Vec<(String, PricedLines)>,
    /// The records excluded from rating that the invoices list (each currency's alike).
    excluded: Vec<core_invoice::ExcludedRecord>,
    /// The bill-to block (the tenant's account: display name and billing address).
    bill_to: BillTo,
    /// The issuer, payment terms and taxes of the server's configuration.
    settings: std::sync::Arc<InvoiceSettings>,
    watch: Watch,
    /// With a witness quorum: the cosigned checkpoint of `size` the invoice is issued against.
    witnessed: Option<Witnessed>,
}

/// Computes the invoices (one per currency) of `tenant` for `period` at the log's current size,
/// on a read connection (no lock); refused as [`issue`] would be at that size. With
/// `witnessed` (a checkpoint that reached the witness quorum), at that checkpoint's size.
pub(crate) fn draft(
    conn: &mut DbConn,
    tenant: &str,
    period: Period,
    witnessed: Option<Witnessed>,
    settings: std::sync::Arc<InvoiceSettings>,
) -> Result<Draft, StoreError> {
    let size = match &witnessed {
        Some(w) => w.size,
        None => read::head(conn)?.0,
    };
    let scope = new_scope(conn, tenant, period, size)?;
    let contracts = read::contracts(conn, tenant, size)?;
    let measurement = read::measurement(conn, tenant, &contracts, period, size)?;
    let (
        Rated {
            mut lines,
            mut adjustments,
            excluded,
            measurement,
            ..
        },
        watch,
    ) = rate(conn, tenant, scope.clone(), measurement, size)?;
    let mut currencies: Vec<String> = lines
        .keys()
        .chain(adjustments.keys())
        .chain(contracts.iter().map(|c| &c.currency))
        .cloned()
        .collect();
    currencies.sort();
    currencies.dedup();
    let mut priced = Vec::new();
    for c in currencies {
        let mut l = lines.remove(&c).unwrap_or_default();
        l.extend(adjustments.remove(&c).unwrap_or_default());
        let p = priced_lines(
            period,
            l,
            &contracts,
            &measurement,
            &c,
            &settings.taxes,
            true,
        )?;
        // Only zero-quantity lines (left out) and no contract line: nothing to invoice in
        // this currency.
        if !p.lines.is_empty() {
            priced.push((c, p));
        }
    }
    if priced.is_empty() {
        return Err(StoreError::Refused(format!(
            "{tenant} has no usage and no contract charges in [{}, {}) and no late records to \
             adjust; nothing to invoice",
            period.from, period.to
        )));
    }
    let bill_to = super::access::bill_to(conn, tenant)?;
    Ok(Draft {
        tenant: tenant.to_owned(),
        period,
        size,
        scope,
        lines: priced,
        excluded,
        bill_to,
        settings,
        watch,
        witnessed,
    })
}

impl Draft {
    /// Whether an entry at `self.size..size` changes what the invoice says, read under the head
    /// lock at log size `size`. If not, rating at `size` gives exactly the draft's lines:
    /// - records: a usage or energy record of the tenant logged since is placed by the scope;
    ///   anything but `Outside` (it would be a line of the period, or a late record) is a
    ///   change. Other tenants' records are never rated.
    /// - the scope: an `invoice_issued` entry of the tenant logged since changes the earlier
    ///   periods and `since` (and may cover the period);
    /// - prices: a pricing entry logged since that can price a rated record
    ///   ([`Watch::affected_by`]).
    fn changed(&self, conn: &mut DbConn, size: u64) -> Result<bool, StoreError> {
        let Some(logged) = read::tenant_entries_since(conn, &self.tenant, self.size, size)? else {
            return Ok(false);
        };
        for (idx, kind, start) in logged {
            // Another invoice changes the scope; an exclusion, what is rated; a contract or
            // an amendment, the contract lines.
            if kind == Kind::InvoiceIssued.as_str()
                || kind == Kind::RecordExcluded.as_str()
                || kind == Kind::ContractRegistered.as_str()
                || kind == Kind::ContractAmended.as_str()
            {
                return Ok(true);
            }
            if let Some(start) = start.and_then(Timestamp::from_unix) {
                if self.scope.place(idx, start) != Placement::Outside {
                    return Ok(true);
                }
            }
        }
        Ok(
            read::bodies_between(conn, &pricing::PRICING_KINDS, self.size, size)?
                .iter()
                .any(|(_, b)| self.watch.affected_by(&self.tenant, b)),
        )
    }
}

/// Runs between computing an invoice or a certificate and submitting it, in the caller's
/// thread (`attempt` from 1). Tests (built with the `test-clock` feature) set it with
/// [`set_issue_hook`] to log something in between; otherwise it does nothing.
pub(crate) fn before_issue(attempt: u32) {
    #[cfg(feature = "test-clock")]
    {
        // Taken out while it runs, so that it may issue (or set another hook) itself.
        let (hook, generation) = ISSUE_HOOK.with(|h| {
            let mut h = h.borrow_mut();
            (h.0.take(), h.1)
        });
        if let Some(mut f) = hook {
            f(attempt);
            ISSUE_HOOK.with(|h| {
                let mut h = h.borrow_mut();
                if h.1 == generation {
                    h.0 = Some(f);
                }
            });
        }
    }
    #[cfg(not(feature = "test-clock"))]
    let _ = attempt;
}

/// A hook run between computing and issuing ([`before_issue`]), and how often one was set.
#[cfg(feature = "test-clock")]
type IssueHook = (Option<Box<dyn FnMut(u32)>>, u64);

#[cfg(feature = "test-clock")]
thread_local! {
    static ISSUE_HOOK: std::cell::RefCell<IssueHook> = const { std::cell::RefCell::new((None, 0)) };
}

/// Sets (or, with `None`, clears) what runs in this thread between computing an invoice or a
/// certificate and submitting it for issue, with the attempt number (from 1). Tests only.
#[cfg(feature = "test-clock")]
pub fn set_issue_hook(f: Option<Box<dyn FnMut(u32)>>) {
    ISSUE_HOOK.with(|h| {
        let mut h = h.borrow_mut();
        h.0 = f;
        h.1 += 1;
    });
}

/// Issues a [`draft`] under the head lock (one invoice per currency, numbered gaplessly):
/// `None`, writing nothing, when an entry logged since the draft's size changes it.
///
/// A draft at a witnessed checkpoint is issued against that checkpoint: records logged since
/// are late for the next invoice. Only another invoice of the tenant logged since changes it
/// (its scope, and the overlap check, were read below the checkpoint), or an exclusion of the
/// tenant's (which the invoice at the checkpoint would not apply); then `None`, and the caller
/// waits for a newer cosigned checkpoint.
pub(crate) fn issue(
    conn: &mut DbConn,
    log: &super::write::Signer,
    draft: &Draft,
    now: Timestamp,
) -> Result<Option<Vec<Invoice>>, StoreError> {
    conn.transaction(|conn| {
        let mut app = Appender::lock(conn, now)?;
        // Stamped under the lock: never behind the log (`core::clock::stamp`).
        let now = app.received_at;
        let Some(size) = issue_size(conn, log, draft, app.next_index(), now)? else {
            return Ok(None);
        };
        let root = gpuledger_core::merkle::tree_hash(size, &super::read::DbHashReader::new(conn))?;
        // Numbers are gapless per issuer (this log): the count of invoices, read under the
        // head lock, in the transaction that inserts the next ones.
        let count: i64 = invoices::table.count().get_result(conn)?;
        let mut out = documents(draft, log.origin(), now, (size, root), count as usize)?;
        // What the tenant's prepaid lots pay of each (one currency each, so one invoice's
        // draws leave the others' lots as they are), by the rule verifiers recompute.
        let lots = super::prepaid::book(conn, Some(&draft.tenant), app.next_index())?;
        for invoice in &mut out {
            invoice.prepaid = lots.draws(
                &invoice.tenant,
                &invoice.currency,
                invoice.total,
                invoice.checkpoint_size,
                invoice.issued_at,
            );
            invoice.amount_due = gpuledger_core::prepaid::amount_due(
                invoice.total,
                &invoice.prepaid,
                &invoice.currency,
            );
        }
        // The tenant's available balance before these draws, for its `low_balance` alerts.
        let before = lots.positions(&draft.tenant, now);
        let thresholds = match super::access::low_balance(conn, &draft.tenant) {
            Err(StoreError::NotFound(_)) => Default::default(),
            other => other?,
        };
        for invoice in &out {
            let index = record_invoice(conn, &mut app, log, invoice)?;
            if let Some(below) = thresholds.get(&invoice.currency) {
                alert_low_balance(conn, invoice, index, &before, *below, now)?;
            }
        }
        app.finish(conn)?;
        Ok(Some(out))
    })
}

/// The log size the draft's invoices are issued at, or `None` when the log changed the draft
/// since it was computed: with a witness quorum, the witnessed checkpoint's size (unless an
/// invoice of the tenant was issued since); without, the head (unless an entry logged since
/// changes the draft), with a checkpoint of it signed now.
fn issue_size(
    conn: &mut DbConn,
    log: &super::write::Signer,
    draft: &Draft,
    head: u64,
    now: Timestamp,
) -> Result<Option<u64>, StoreError> {
    match &draft.witnessed {
        Some(w) => {
            // Another invoice of the tenant since the checkpoint changes the scope; an
            // exclusion since, what the admin meant to leave out (an invoice at the checkpoint
            // would rate the record): either waits for a newer cosigned checkpoint.
            let since = read::tenant_entries_since(conn, &draft.tenant, w.size, head)?;
            let changed_since = since.is_some_and(|logged| {
                logged.iter().any(|(_, kind, _)| {
                    kind == Kind::InvoiceIssued.as_str() || kind == Kind::RecordExcluded.as_str()
                })
            });
            Ok((!changed_since).then_some(w.size))
        }
        None => {
            if draft.changed(conn, head)? {
                return Ok(None);
            }
            checkpoint_locked(conn, log, head, now)?;
            Ok(Some(head))
        }
    }
}

/// The invoices of a draft (one per currency), numbered on from `count`, issued at `now`
/// against the tree `(size, root)` of the log `origin`.
fn documents(
    draft: &Draft,
    origin: &str,
    now: Timestamp,
    (size, root): (u64, gpuledger_core::merkle::Hash),
    count: usize,
) -> Result<Vec<Invoice>, StoreError> {
    let s = &draft.settings;
    let mut issuer = s.issuer.clone();
    if issuer.name.is_empty() {
        issuer.name = origin.to_owned();
    }
    let due_at = core_invoice::due_at(now, s.payment_terms_days).ok_or_else(|| {
        StoreError::Refused(format!(
            "payment terms of {} days run past year 9999",
            s.payment_terms_days
        ))
    })?;
    let mut out = Vec::with_capacity(draft.lines.len());
    for (i, (currency, p)) in draft.lines.iter().enumerate() {
        let (lines, totals) = (&p.lines, &p.totals);
        let invoice = Invoice {
            format: INVOICE_FORMAT_V2.to_owned(),
            number: format!("INV-{:06}", count + i + 1),
            tenant: draft.tenant.clone(),
            period: draft.period,
            currency: currency.clone(),
            issued_at: now,
            log_origin: origin.to_owned(),
            checkpoint_size: size,
            checkpoint_root: gpuledger_core::merkle::encode_hash(&root),
            issuer: issuer.clone(),
            bill_to: draft.bill_to.clone(),
            payment_terms_days: s.payment_terms_days,
            due_at,
            lines: lines.clone(),
            net_total: totals.net,
            tax_total: totals.tax,
            total: totals.gross,
            excluded: draft.excluded.clone(),
            commitments: p.commitments.clone(),
            availability: p.availability.clone(),
            allowances: p.allowances.clone(),
            prepaid: Vec::new(),
            amount_due: None,
        };
        assert!(
            invoice.is_consistent(),
            "tax, gross and totals are the sums of the lines"
        );
        out.push(invoice);
    }
    Ok(out)
}

/// Enqueues `balance.low` (in the invoice's transaction) when the invoice's prepaid draws take
/// its tenant's available balance in its currency from at or above `below` to under it
/// (`core::prepaid::crossed_below`; `before`: the tenant's positions before the draws).
fn alert_low_balance(
    conn: &mut DbConn,
    invoice: &Invoice,
    index: u64,
    before: &[gpuledger_core::prepaid::Position],
    below: Decimal,
    now: Timestamp,
) -> Result<(), StoreError> {
    let c = &invoice.currency;
    let was = before
        .iter()
        .find(|p| &p.currency == c)
        .map_or(Decimal::ZERO, |p| p.available);
    let drawn: Decimal = invoice.prepaid.iter().map(|d| d.amount).sum();
    let is = gpuledger_core::rating::pad_amount(was - drawn, c);
    if !gpuledger_core::prepaid::crossed_below(was, is, below) {
        return Ok(());
    }
    let mut data = serde_json::Map::new();
    data.insert("currency".into(), c.clone().into());
    data.insert("available".into(), is.to_string().into());
    data.insert("below".into(), below.to_string().into());
    data.insert("invoice".into(), invoice.number.clone().into());
    super::webhooks::enqueue(
        conn,
        &super::webhooks::Event {
            kind: super::webhooks::EventType::BalanceLow,
            tenant: Some(invoice.tenant.clone()),
            log_index: Some(index),
            dedupe: format!("balance.low:{}", invoice.number),
            data,
        },
        now,
    )
}

/// Appends an issued invoice's `invoice_issued` entry (with its SHA-256) and keeps its JSON;
/// returns the entry's index.
fn record_invoice(
    conn: &mut DbConn,
    app: &mut Appender,
    log: &LogSigner,
    invoice: &Invoice,
) -> Result<u64, StoreError> {
    let (json, hash) = invoice_json(invoice)?;
    let body = Body::InvoiceIssued(InvoiceIssued {
        number: invoice.number.clone(),
        tenant: invoice.tenant.clone(),
        period_from: invoice.period.from,
        period_to: invoice.period.to,
        currency: invoice.currency.clone(),
        total: invoice.total,
        checkpoint_size: invoice.checkpoint_size,
        invoice_sha256: hash,
    });
    let idx = push_ledger_entry(conn, app, log, &body)?;
    diesel::insert_into(invoices::table)
        .values((
            invoices::number.eq(&invoice.number),
            invoices::tenant.eq(&invoice.tenant),
            invoices::currency.eq(&invoice.currency),
            invoices::period_from.eq(invoice.period.from.unix()),
            invoices::period_to.eq(invoice.period.to.unix()),
            invoices::checkpoint_size.eq(invoice.checkpoint_size as i64),
            invoices::entry_idx.eq(idx as i64),
            invoices::json.eq(&json),
        ))
        .execute(conn)?;
    Ok(idx)
}

/// Records a payment or credit note against an invoice of the same tenant and currency.
/// A credit note may not take an invoice's credited sum above its total. A payment above the
/// invoice's open balance (total − paid − credited) is refused with
/// [`StoreError::Overpayment`] unless `excess_credit`: then the excess becomes the tenant's
/// credit ([`Balance::credit`]). The `payment` entry is the same either way.
pub(crate) fn settle(
    conn: &mut DbConn,
    log: &LogSigner,
    body: &Body,
    excess_credit: bool,
    now: Timestamp,
) -> Result<u64, StoreError> {
    let s = match body {
        Body::Payment(s) | Body::CreditNote(s) => s,
        _ => return Err(StoreError::Refused("not a payment or credit note".into())),
    };
    conn.transaction(|conn| {
        let mut app = Appender::lock(conn, now)?;
        // Stamped under the lock: never behind the log (`core::clock::stamp`).
        let now = app.received_at;
        // Read under the head lock: no other settlement can change it before this commits.
        // An invoice unknown, or another tenant's, reads as not found (as over the API).
        let account = account(conn, &s.invoice, now)?;
        if account.tenant != s.tenant {
            return Err(StoreError::NotFound(format!(
                "invoice {} of {}",
                s.invoice, s.tenant
            )));
        }
        // The settlement rules, as verify-log rechecks them (core::admission::Settlements).
        let mut rules = admission::Settlements::of(
            &s.invoice,
            admission::IssuedInvoice {
                tenant: account.tenant.clone(),
                currency: account.currency.clone(),
                total: account.total,
                credited: account.credited,
            },
        );
        if s.external_reference.is_some() {
            // The tenant's earlier settlements of this kind, for the reference's uniqueness.
            for (i, earlier) in tenant_settlements(conn, &s.tenant, body.kind())? {
                rules.reference(i, &earlier);
            }
        }
        rules.check(body).map_err(|r| match r.reason {
            // Sent again: the conflict names the entry that carries the reference.
            Reason::ReferenceUsed => StoreError::AlreadyExists(r.message),
            _ => StoreError::Rejected(r),
        })?;
        if matches!(body, Body::Payment(_)) && s.amount > account.balance_due && !excess_credit {
            return Err(StoreError::Overpayment {
                invoice: s.invoice.clone(),
                amount: s.amount,
                open: account.balance_due,
                currency: s.currency.clone(),
            });
        }
        let idx = push_ledger_entry(conn, &mut app, log, body)?;
        app.finish(conn)?;
        Ok(idx)
    })
}

/// The `kind` settlements (payments or credit notes) of `tenant`, in log order.
fn tenant_settlements(
    conn: &mut DbConn,
    tenant: &str,
    kind: Kind,
) -> Result<Vec<(u64, Body)>, StoreError> {
    let rows: Vec<(i64, Vec<u8>)> = entries::table
        .filter(entries::kind.eq(kind.as_str()))
        .filter(entries::tenant.eq(tenant))
        .order(entries::idx.asc())
        .select((entries::idx, entries::leaf))
        .load(conn)?;
    rows.into_iter()
        .map(|(i, bytes)| Ok((i as u64, decode_leaf(i, &bytes)?.1)))
        .collect()
}

fn body_at(conn: &mut DbConn, idx: i64) -> Result<Body, StoreError> {
    let bytes: Vec<u8> = entries::table.find(idx).select(entries::leaf).first(conn)?;
    Ok(decode_leaf(idx, &bytes)?.1)
}

/// The time an entry was logged and its body, from its leaf bytes.
fn decode_leaf(idx: i64, bytes: &[u8]) -> Result<(Timestamp, Body), StoreError> {
    let leaf =
        Leaf::from_bytes(bytes).map_err(|e| StoreError::Corrupt(format!("entry {idx}: {e}")))?;
    let kind = Kind::parse(&leaf.envelope.kind)
        .ok_or_else(|| StoreError::Corrupt(format!("entry {idx}: kind")))?;
    let body = Body::from_value(kind, &leaf.envelope.body)
        .map_err(|r| StoreError::Corrupt(format!("entry {idx}: {r}")))?;
    Ok((leaf.received_at, body))
}

/// A tenant's position in one currency, derived from the log's invoice, payment and credit-note
/// entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Balance {
    /// Σ invoice totals (gross).
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub invoiced: Decimal,
    /// Σ what the tenant's prepaid lots paid of its invoices (docs/RATING.md, "Prepaid
    /// balances").
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub prepaid: Decimal,
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub paid: Decimal,
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub credited: Decimal,
    /// invoiced − prepaid − paid − credited: what the tenant owes (negative: in credit).
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub due: Decimal,
    /// The tenant's credit: what was paid (prepaid and credited) above invoices' totals, accepted
    /// explicitly as credit (`POST /v1/payments?excess=credit`), summed over its invoices.
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub credit: Decimal,
}

/// Balances per currency, and credited sums per invoice.
#[derive(Debug, Default)]
pub struct Balances {
    pub by_currency: BTreeMap<String, Balance>,
    pub credited_by_invoice: BTreeMap<String, Decimal>,
}

/// The tenant's balances, from its `invoice_issued`, `payment` and `credit_note` entries.
pub fn balances(conn: &mut DbConn, tenant: &str) -> Result<Balances, StoreError> {
    let kinds = [
        Kind::InvoiceIssued.as_str(),
        Kind::Payment.as_str(),
        Kind::CreditNote.as_str(),
    ];
    let mut idxs: Vec<i64> = entries::table
        .filter(read::tenant_ledger_entries(tenant))
        .filter(entries::kind.eq_any(kinds))
        .select(entries::idx)
        .load(conn)?;
    idxs.sort_unstable();
    let mut out = Balances::default();
    // Per invoice: (currency, total, prepaid + paid + credited).
    let mut per_invoice: BTreeMap<String, (String, Decimal, Decimal)> = BTreeMap::new();
    let lots = super::prepaid::book(conn, Some(tenant), u64::MAX)?;
    for idx in idxs {
        match body_at(conn, idx)? {
            Body::InvoiceIssued(i) => {
                out.by_currency
                    .entry(i.currency.clone())
                    .or_default()
                    .invoiced += i.total;
                let drawn = lots.drawn_by(tenant, &i.number);
                out.by_currency
                    .entry(i.currency.clone())
                    .or_default()
                    .prepaid += drawn;
                let e = per_invoice.entry(i.number).or_default();
                (e.0, e.1) = (i.currency, i.total);
                e.2 += drawn;
            }
            Body::Payment(p) => {
                out.by_currency.entry(p.currency).or_default().paid += p.amount;
                per_invoice.entry(p.invoice).or_default().2 += p.amount;
            }
            Body::CreditNote(c) => {
                out.by_currency.entry(c.currency).or_default().credited += c.amount;
                *out.credited_by_invoice
                    .entry(c.invoice.clone())
                    .or_default() += c.amount;
                per_invoice.entry(c.invoice).or_default().2 += c.amount;
            }
            _ => {}
        }
    }
    for (currency, total, settled) in per_invoice.into_values() {
        if settled > total {
            out.by_currency.entry(currency).or_default().credit += settled - total;
        }
    }
    // Every figure with at least the currency's minor unit's digits (`0.00`, not `0`), as the
    // invoices and their accounts write amounts.
    for (c, b) in out.by_currency.iter_mut() {
        b.due = b.invoiced - b.prepaid - b.paid - b.credited;
        let digits = gpuledger_core::rating::minor_units(c);
        for d in [
            &mut b.invoiced,
            &mut b.prepaid,
            &mut b.paid,
            &mut b.credited,
            &mut b.due,
            &mut b.credit,
        ] {
            // Padded, never rounded: an amount with more digits keeps them all.
            if d.scale() < digits {
                d.rescale(digits);
            }
        }
    }
    Ok(out)
}

/// Where an invoice stands: `open` (something is due), `paid`, or `overpaid` (the excess is
/// the tenant's credit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AccountStatus {
    Open,
    Paid,
    Overpaid,
}

/// A payment or credit note recorded against an invoice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SettlementView {
    /// The log index of its `payment` or `credit_note` entry.
    pub index: u64,
    /// `payment` or `credit_note`.
    pub kind: String,
    /// A credit note's number, `CN-<index>` (`GET /v1/credit-notes/{number}`); payments have
    /// none.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "CN-197")]
    pub number: Option<String>,
    /// When the ledger recorded it.
    #[schema(value_type = String, example = "2026-11-30T12:00:00Z")]
    pub date: Timestamp,
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub amount: Decimal,
    pub note: String,
}

/// Payments and balance of one invoice, from the log: the invoice document is immutable, so
/// what changes is shown here (and in the PDF's "Payments and balance" block).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct InvoiceAccount {
    pub number: String,
    pub tenant: String,
    pub currency: String,
    /// The invoice's total (gross), as its `invoice_issued` entry records it.
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub total: Decimal,
    /// What the tenant's prepaid lots paid of it when it was issued (the invoice's `prepaid`
    /// draws, docs/RATING.md "Prepaid balances").
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub prepaid: Decimal,
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub paid: Decimal,
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub credited: Decimal,
    /// max(0, total − prepaid − paid − credited).
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub balance_due: Decimal,
    /// max(0, prepaid + paid + credited − total): what became the tenant's credit.
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub excess: Decimal,
    pub status: AccountStatus,
    /// The time this view was computed at.
    #[schema(value_type = String, example = "2026-11-30T12:00:00Z")]
    pub as_of: Timestamp,
    /// Payments and credit notes, oldest first.
    pub settlements: Vec<SettlementView>,
}

/// The payments and balance of invoice `number` as of `now` (`NotFound` for an unknown
/// number).
pub fn account(
    conn: &mut DbConn,
    number: &str,
    now: Timestamp,
) -> Result<InvoiceAccount, StoreError> {
    let row: Option<(String, i64)> = invoices::table
        .find(number)
        .select((invoices::tenant, invoices::entry_idx))
        .first(conn)
        .optional()?;
    let (tenant, idx) = row.ok_or_else(|| StoreError::NotFound(format!("invoice {number}")))?;
    let Body::InvoiceIssued(inv) = body_at(conn, idx)? else {
        return Err(StoreError::Corrupt(format!(
            "entry {idx} is not invoice {number}"
        )));
    };
    let mut settled = settlements(conn, Some(&tenant))?;
    let mine = settled.remove(number).unwrap_or_default();
    let prepaid = super::prepaid::book(conn, Some(&tenant), u64::MAX)?.drawn_by(&tenant, number);
    Ok(account_of(&inv, tenant, mine, prepaid, now))
}

/// The payment and credit-note entries of `tenant` (or of every tenant), by the invoice they
/// settle, oldest first: one read of their leaves, however many invoices are asked about.
fn settlements(
    conn: &mut DbConn,
    tenant: Option<&str>,
) -> Result<HashMap<String, Vec<SettlementView>>, StoreError> {
    let kinds = [Kind::Payment.as_str(), Kind::CreditNote.as_str()];
    let mut q = entries::table
        .filter(entries::kind.eq_any(kinds))
        .select((entries::idx, entries::leaf))
        .into_boxed();
    if let Some(t) = tenant {
        q = q.filter(read::tenant_ledger_entries(t));
    }
    let mut rows: Vec<(i64, Vec<u8>)> = q.load(conn)?;
    rows.sort_unstable_by_key(|(i, _)| *i);
    let mut by_invoice: HashMap<String, Vec<SettlementView>> = HashMap::new();
    for (i, bytes) in rows {
        let (date, body) = decode_leaf(i, &bytes)?;
        let (kind, s) = match body {
            Body::Payment(s) => ("payment", s),
            Body::CreditNote(s) => ("credit_note", s),
            _ => continue,
        };
        by_invoice
            .entry(s.invoice)
            .or_default()
            .push(SettlementView {
                index: i as u64,
                kind: kind.to_owned(),
                number: (kind == "credit_note")
                    .then(|| gpuledger_core::invoice::credit_note_number(i as u64)),
                date,
                amount: s.amount,
                note: s.note,
            });
    }
    Ok(by_invoice)
}

/// The account of invoice `inv` (owned by `tenant`) with its `settlements` and what its
/// tenant's prepaid lots paid of it, as of `now`.
fn account_of(
    inv: &InvoiceIssued,
    tenant: String,
    settlements: Vec<SettlementView>,
    prepaid: Decimal,
    now: Timestamp,
) -> InvoiceAccount {
    let zero = gpuledger_core::rating::round_amount(Decimal::ZERO, &inv.currency);
    let prepaid = gpuledger_core::rating::pad_amount(prepaid, &inv.currency);
    let (mut paid, mut credited) = (zero, zero);
    for s in &settlements {
        match s.kind.as_str() {
            "payment" => paid += s.amount,
            _ => credited += s.amount,
        }
    }
    let open = inv.total - prepaid - paid - credited;
    let status = match open.cmp(&Decimal::ZERO) {
        std::cmp::Ordering::Greater => AccountStatus::Open,
        std::cmp::Ordering::Equal => AccountStatus::Paid,
        std::cmp::Ordering::Less => AccountStatus::Overpaid,
    };
    InvoiceAccount {
        number: inv.number.clone(),
        tenant,
        currency: inv.currency.clone(),
        total: inv.total,
        prepaid,
        paid,
        credited,
        balance_due: open.max(Decimal::ZERO) + zero,
        excess: (-open).max(Decimal::ZERO) + zero,
        status,
        as_of: now,
        settlements,
    }
}

/// A listed invoice, with its payments and balance as of now.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct InvoiceSummary {
    pub number: String,
    pub tenant: String,
    pub currency: String,
    pub period_from: String,
    pub period_to: String,
    pub entry_index: u64,
    /// The invoice's total (gross).
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub total: Decimal,
    /// What the tenant's prepaid lots paid of it.
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub prepaid: Decimal,
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub paid: Decimal,
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub credited: Decimal,
    /// max(0, total − prepaid − paid − credited).
    #[schema(value_type = gpuledger_core::decimal::DecimalString)]
    pub balance_due: Decimal,
    pub status: AccountStatus,
}

/// Invoices, of one tenant or all, oldest first, each with its payments and balance: three
/// reads (the invoices, their `invoice_issued` leaves, the settlement leaves), not a read per
/// invoice.
pub fn list(conn: &mut DbConn, tenant: Option<&str>) -> Result<Vec<InvoiceSummary>, StoreError> {
    list_page(conn, tenant, (None, None), None, usize::MAX)
}

/// One page of [`list`], in issue order (the `invoice_issued` entry's index): at most `limit`
/// invoices whose entry index is above `after` and whose period overlaps `[from, to)` (either
/// bound may be open).
pub fn list_page(
    conn: &mut DbConn,
    tenant: Option<&str>,
    (from, to): (Option<Timestamp>, Option<Timestamp>),
    after: Option<u64>,
    limit: usize,
) -> Result<Vec<InvoiceSummary>, StoreError> {
    let mut q = invoices::table
        .select((
            invoices::number,
            invoices::tenant,
            invoices::currency,
            invoices::period_from,
            invoices::period_to,
            invoices::entry_idx,
        ))
        .order(invoices::entry_idx.asc())
        .limit(i64::try_from(limit).unwrap_or(i64::MAX))
        .into_boxed();
    if let Some(t) = tenant {
        q = q.filter(invoices::tenant.eq(t));
    }
    if let Some(a) = after {
        q = q.filter(invoices::entry_idx.gt(a as i64));
    }
    if let Some(f) = from {
        q = q.filter(invoices::period_to.gt(f.unix()));
    }
    if let Some(t) = to {
        q = q.filter(invoices::period_from.lt(t.unix()));
    }
    let rows: Vec<(String, String, String, i64, i64, i64)> = q.load(conn)?;
    let mut issued = issued_entries(conn, tenant)?;
    let mut settled = settlements(conn, tenant)?;
    let lots = super::prepaid::book(conn, tenant, u64::MAX)?;
    let ts = |x: i64| {
        Timestamp::from_unix(x)
            .map(|t| t.to_string())
            .unwrap_or_default()
    };
    let now = Timestamp::now();
    rows.into_iter()
        .map(|(number, tenant, currency, f, t, i)| {
            let inv = issued
                .remove(&i)
                .ok_or_else(|| StoreError::Corrupt(format!("entry {i} is not invoice {number}")))?;
            let a = account_of(
                &inv,
                tenant.clone(),
                settled.remove(&number).unwrap_or_default(),
                lots.drawn_by(&tenant, &number),
                now,
            );
            Ok(InvoiceSummary {
                number,
                tenant,
                currency,
                period_from: ts(f),
                period_to: ts(t),
                entry_index: i as u64,
                total: a.total,
                prepaid: a.prepaid,
                paid: a.paid,
                credited: a.credited,
                balance_due: a.balance_due,
                status: a.status,
            })
        })
        .collect()
}

/// The `invoice_issued` entries of `tenant` (or of every tenant) by log index, in one read.
fn issued_entries(
    conn: &mut DbConn,
    tenant: Option<&str>,
) -> Result<HashMap<i64, InvoiceIssued>, StoreError> {
    let mut q = entries::table
        .filter(entries::kind.eq(Kind::InvoiceIssued.as_str()))
        .select((entries::idx, entries::leaf))
        .into_boxed();
    if let Some(t) = tenant {
        q = q.filter(entries::tenant.eq(t));
    }
    let rows: Vec<(i64, Vec<u8>)> = q.load(conn)?;
    let mut out = HashMap::with_capacity(rows.len());
    for (i, bytes) in rows {
        if let (_, Body::InvoiceIssued(inv)) = decode_leaf(i, &bytes)? {
            out.insert(i, inv);
        }
    }
    Ok(out)
}

/// The numbers of the invoices of `tenant` (or of every tenant) whose period overlaps
/// `period`, oldest first.
pub fn overlapping(
    conn: &mut DbConn,
    tenant: Option<&str>,
    period: Period,
) -> Result<Vec<String>, StoreError> {
    let mut q = invoices::table
        .filter(invoices::period_from.lt(period.to.unix()))
        .filter(invoices::period_to.gt(period.from.unix()))
        .select(invoices::number)
        .order(invoices::number.asc())
        .into_boxed();
    if let Some(t) = tenant {
        q = q.filter(invoices::tenant.eq(t));
    }
    Ok(q.load(conn)?)
}

/// The `credit_note` entry at log index `index`: when the ledger recorded it and its body, and
/// the stored JSON of the invoice it credits. `None` when the entry there is not a credit note
/// (or there is none).
pub fn credit_note(
    conn: &mut DbConn,
    index: u64,
) -> Result<Option<(Timestamp, Settlement, String)>, StoreError> {
    let Ok(idx) = i64::try_from(index) else {
        return Ok(None);
    };
    let row: Option<(String, Vec<u8>)> = entries::table
        .find(idx)
        .select((entries::kind, entries::leaf))
        .first(conn)
        .optional()?;
    let Some((kind, bytes)) = row.filter(|(k, _)| k == Kind::CreditNote.as_str()) else {
        return Ok(None);
    };
    let (recorded_at, body) = decode_leaf(idx, &bytes)?;
    let Body::CreditNote(note) = body else {
        return Err(StoreError::Corrupt(format!("entry {idx} is not a {kind}")));
    };
    // Settling checks that the invoice exists: a credit note without one is corrupt.
    let (_, json) = get(conn, &note.invoice)?.ok_or_else(|| {
        StoreError::Corrupt(format!(
            "entry {idx} credits {}, which is not stored",
            note.invoice
        ))
    })?;
    Ok(Some((recorded_at, note, json)))
}

/// An invoice's tenant and stored JSON.
pub fn get(conn: &mut DbConn, number: &str) -> Result<Option<(String, String)>, StoreError> {
    Ok(invoices::table
        .find(number)
        .select((invoices::tenant, invoices::json))
        .first(conn)
        .optional()?)
}

/// Writes the evidence bundle of an issued invoice (docs/PROTOCOL.md §14): the key entries,
/// every pricing entry and the tenant's earlier `invoice_issued` entries below the invoice's
/// checkpoint, then the records it rated: those starting in its period, and those of earlier
/// invoiced periods logged since the last of them (its adjustment lines), with, when volume
/// tiers are logged, the earlier records those adjustments continue counting from.
///
/// In version 2, the format before issue #15 (an inclusion proof per entry); see
/// [`write_invoice_bundle_as`].
pub fn write_invoice_bundle(
    conn: &mut DbConn,
    invoice: &impl core_invoice::InvoiceHeader,
    sink: &mut super::bundle::Sink,
) -> Result<(), StoreError> {
    write_invoice_bundle_as(conn, invoice, gpuledger_core::bundle::Format::V2, sink)
}

/// Writes the evidence bundle of an issued invoice (see [`write_invoice_bundle`]) in `format`.
pub fn write_invoice_bundle_as(
    conn: &mut DbConn,
    invoice: &impl core_invoice::InvoiceHeader,
    format: gpuledger_core::bundle::Format,
    sink: &mut super::bundle::Sink,
) -> Result<(), StoreError> {
    use super::schema::checkpoints;
    use gpuledger_core::bundle::{BundleSubject, Header};
    let size = invoice.checkpoint_size();
    let note: String = checkpoints::table
        .find(size as i64)
        .select(checkpoints::note)
        .first(conn)
        .optional()?
        .ok_or_else(|| StoreError::Corrupt(format!("no checkpoint of size {size} is stored")))?;
    // With every cosignature gathered for it, so a verifier can ask for a witness quorum.
    let note = with_cosignatures(conn, size, note)?;
    let scope = InvoiceScope::new(
        invoice.period(),
        // The invoices logged below the checkpoint: those its draft read.
        issued_for(conn, invoice.tenant(), size)?
            .into_iter()
            .map(|(_, i)| (i.period, i.checkpoint_size)),
    )
    .excluding(excluded_below(conn, invoice.tenant(), size)?);
    let tiered: i64 = entries::table
        .filter(entries::kind.eq(Kind::VolumeTiers.as_str()))
        .filter(entries::idx.lt(size as i64))
        .count()
        .get_result(conn)?;
    let header = Header::new(
        invoice.log_origin(),
        &note,
        BundleSubject::Invoice(invoice.number().to_owned()),
    );
    let mut w = super::bundle::Writer::start(format, header, size, sink)?;
    let tenant = invoice.tenant();
    super::bundle::Context::new(conn, tenant, size, true)?.write(conn, &mut w)?;
    w.entries(
        conn,
        &[Kind::GpuUsage, Kind::Energy],
        Some(tenant),
        &mut |idx, b| record_start(b).is_some_and(|start| scope.in_bundle(idx, start, tiered > 0)),
    )?;
    w.finish(conn)
}
