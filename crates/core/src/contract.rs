//! Contracts (docs/RATING.md, "Contracts"; docs/PROTOCOL.md §5.19): what a
//! `contract_registered` entry charges an invoice, and the rules that admit one.
//!
//! One function each, used by the ledger to issue and preview and by `gpuledger verify
//! --invoice` and `verify-log` to recheck:
//! - [`billing_periods`]: the term cut at the billing period's boundaries;
//! - [`charges`]: the fees and the commitment an invoice period bills;
//! - [`Contracts`]: the contracts of a log with their amendments applied;
//! - [`ContractBook`]: a contract names a registered tenant, is registered once, neither starts
//!   in the past nor inside an invoiced period, and overlaps no other contract of its tenant;
//!   an amendment changes only a term's future, never an invoiced period.

use crate::limits::MAX_CONTRACT_TERM_SECONDS;
use crate::rating::round_amount;
use crate::record::{
    BillingAnchor, Body, ContractAmended, ContractFee, ContractRegistered, FeeTiming, LogPolicy,
};
use crate::rejection::{Reason, Rejection};
use crate::time::Timestamp;
use rust_decimal::Decimal;
use std::collections::HashMap;
use time::{Date, Month, OffsetDateTime, Time};

/// One billing period of a contract: the period as the calendar or the anniversary cuts it
/// (`full_from`, `full_to`), clipped to the term (`from`, `to`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BillingSpan {
    pub from: Timestamp,
    pub to: Timestamp,
    pub full_from: Timestamp,
    pub full_to: Timestamp,
}

impl BillingSpan {
    /// The share of the whole period the span holds, exact: used seconds ÷ full seconds.
    pub fn share(&self) -> Decimal {
        Decimal::from(self.from.seconds_until(self.to))
            / Decimal::from(self.full_from.seconds_until(self.full_to))
    }

    /// `amount` × used seconds ÷ full seconds, rounded half-even once to the currency's
    /// minor unit (the one rounding rule, docs/RATING.md).
    pub fn prorate(&self, amount: Decimal, currency: &str) -> Decimal {
        let used = Decimal::from(self.from.seconds_until(self.to));
        let full = Decimal::from(self.full_from.seconds_until(self.full_to));
        round_amount(amount * used / full, currency)
    }
}

/// `t` moved by `months` calendar months, the day clamped to the last day of a shorter month,
/// the time of day kept. `None` past year 9999.
fn add_months(t: Timestamp, months: u32) -> Option<Timestamp> {
    let at = OffsetDateTime::from_unix_timestamp(t.unix()).ok()?;
    let index = at.year() * 12 + i32::from(u8::from(at.month())) - 1 + months as i32;
    let (year, month) = (index.div_euclid(12), index.rem_euclid(12) as u8 + 1);
    let month = Month::try_from(month).ok()?;
    let day = at.day().min(month.length(year));
    let date = Date::from_calendar_date(year, month, day).ok()?;
    Timestamp::from_unix(date.with_time(at.time()).assume_utc().unix_timestamp())
}

/// The first calendar boundary at or before `t` for periods of `months` months: 00:00 UTC on
/// the first day of a month whose index from January is a multiple of `months`.
fn calendar_start(t: Timestamp, months: u32) -> Option<Timestamp> {
    let at = OffsetDateTime::from_unix_timestamp(t.unix()).ok()?;
    let m0 = (u32::from(u8::from(at.month())) - 1) / months * months + 1;
    let date = Date::from_calendar_date(at.year(), Month::try_from(m0 as u8).ok()?, 1).ok()?;
    Timestamp::from_unix(date.with_time(Time::MIDNIGHT).assume_utc().unix_timestamp())
}

/// The contract's billing periods, in order: the term cut at every boundary of its billing
/// period (calendar or anniversary), the first and last clipped to the term.
pub fn billing_periods(c: &ContractRegistered) -> Vec<BillingSpan> {
    let months = c.billing_period.months();
    // Every boundary is counted from the first one (a calendar boundary, or the term's start
    // for anniversaries), so a 31st stays the 31st after February.
    let first = match c.billing_anchor {
        BillingAnchor::Calendar => match calendar_start(c.term_from, months) {
            Some(s) => s,
            None => return Vec::new(),
        },
        BillingAnchor::Anniversary => c.term_from,
    };
    let step = |k: u32| add_months(first, k * months);
    let mut out = Vec::new();
    let mut full_from = first;
    for k in 1.. {
        // A boundary past year 9999 ends the last period at the term's end.
        let full_to = step(k).unwrap_or(c.term_to.max(full_from.plus(1)));
        let (from, to) = (full_from.max(c.term_from), full_to.min(c.term_to));
        if from < to {
            out.push(BillingSpan {
                from,
                to,
                full_from,
                full_to,
            });
        }
        if full_to >= c.term_to {
            break;
        }
        full_from = full_to;
    }
    out
}

/// One fee an invoice period bills: the fee, the span it is for, and its amount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeeCharge {
    /// The fee's place in the contract's `fees`.
    pub fee: usize,
    /// The billing period (a `once` fee: the term), as the invoice line's `service_period`.
    pub from: Timestamp,
    pub to: Timestamp,
    /// The share of the period billed, exact (1 for a `once` fee).
    pub share: Decimal,
    /// The fee's amount for the span, rounded once.
    pub net: Decimal,
}

/// What one contract charges an invoice period `[from, to)`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Charges {
    /// The fees whose anchor instant the period contains, in order of billing period, then of
    /// the contract's fees (`once` fees first, at the term's start).
    pub fees: Vec<FeeCharge>,
    /// The commitment of the billing periods wholly inside the period, each prorated and
    /// rounded once; `None` when the contract has no commitment or no such period.
    pub committed: Option<Decimal>,
    /// A billing period that the invoice period holds part of but not all (only for a
    /// contract with a commitment, an SLA or included hours, [`judged_whole`]): an invoice
    /// that would split it cannot be issued.
    pub split: Option<BillingSpan>,
}

/// The fees and commitment of contract `c` that an invoice of `[from, to)` in its currency
/// bills (docs/RATING.md, "Contracts"): a fee of a billing period when the period contains
/// its anchor (`advance`: the span's start; `arrears`: its end minus one second; `once`: the
/// term's start), the commitment of each billing period the invoice period wholly contains.
pub fn charges(c: &ContractRegistered, from: Timestamp, to: Timestamp) -> Charges {
    let contains = |t: Timestamp| from <= t && t < to;
    let mut out = Charges::default();
    let fees: &[ContractFee] = c.fees();
    for (i, f) in fees.iter().enumerate() {
        if f.timing == FeeTiming::Once && contains(c.term_from) {
            out.fees.push(FeeCharge {
                fee: i,
                from: c.term_from,
                to: c.term_to,
                share: Decimal::ONE,
                net: round_amount(f.amount, &c.currency),
            });
        }
    }
    if to <= c.term_from || c.term_to <= from {
        return out;
    }
    for span in billing_periods(c) {
        if span.to <= from || to <= span.from {
            continue;
        }
        for (i, f) in fees.iter().enumerate() {
            let anchor = match f.timing {
                FeeTiming::Advance => span.from,
                FeeTiming::Arrears => span.to.plus(-1),
                FeeTiming::Once => continue,
            };
            if contains(anchor) {
                out.fees.push(FeeCharge {
                    fee: i,
                    from: span.from,
                    to: span.to,
                    share: span.share(),
                    net: span.prorate(f.amount, &c.currency),
                });
            }
        }
        let whole = from <= span.from && span.to <= to;
        if let Some(commitment) = c.commitment.filter(|_| whole) {
            let part = span.prorate(commitment, &c.currency);
            out.committed = Some(out.committed.unwrap_or_default() + part);
        }
        // A commitment, an SLA and included hours are judged over whole billing periods only.
        if !whole && judged_whole(c) && out.split.is_none() {
            out.split = Some(span);
        }
    }
    out
}

/// Whether an invoice must hold each billing period of `c` whole: `c` has a commitment, an
/// SLA or included GPU-hours, which are judged per billing period.
pub fn judged_whole(c: &ContractRegistered) -> bool {
    c.commitment.is_some() || c.sla.is_some() || c.fees().iter().any(|f| f.included.is_some())
}

/// Whether the billing period `span` of contract `c` charges anything on its own invoice: a
/// periodic fee (anchored inside every billing period), a commitment, or a `once` fee (in the
/// period that starts the term). What [`charges`] of the span would find non-empty, without
/// cutting the term again.
pub fn charges_in(c: &ContractRegistered, span: &BillingSpan) -> bool {
    c.commitment.is_some()
        || c.fees()
            .iter()
            .any(|f| f.timing != FeeTiming::Once || span.from == c.term_from)
}

/// A log's contracts as amended (docs/PROTOCOL.md §5.21): each `contract_registered` entry
/// with the term of its latest `contract_amended` entry, folded in log order. What every
/// reader of contracts rates with (the ledger, `gpuledger verify --invoice`, the scheduled
/// run, the contract list), so an invoice is recomputed with the terms its log held.
#[derive(Debug, Clone, Default)]
pub struct Contracts {
    /// The contracts in order of registration.
    list: Vec<ContractRegistered>,
    /// The entry that registered each of `list`.
    registered_at: Vec<u64>,
    /// Contract id → its place in `list`.
    at: HashMap<String, usize>,
}

impl Contracts {
    /// The contracts of `entries` (index and body, in log order; other kinds are ignored).
    pub fn of(entries: impl IntoIterator<Item = (u64, Body)>) -> Contracts {
        let mut out = Contracts::default();
        for (index, body) in entries {
            out.apply(index, &body);
        }
        out
    }

    /// Takes in an entry at `index`: a contract is listed, an amendment of a listed contract
    /// of the same tenant moves its term's end. Anything else is ignored (an admitted log has
    /// no amendment of an unknown contract: [`ContractBook::check`]).
    pub fn apply(&mut self, index: u64, body: &Body) {
        match body {
            Body::ContractRegistered(c) if !self.at.contains_key(&c.contract) => {
                self.at.insert(c.contract.clone(), self.list.len());
                self.list.push(c.clone());
                self.registered_at.push(index);
            }
            Body::ContractAmended(a) => {
                if let Some(&i) = self.at.get(&a.contract) {
                    if self.list[i].tenant == a.tenant {
                        self.list[i].term_to = a.term_to;
                    }
                }
            }
            _ => {}
        }
    }

    /// The contract `id` as amended, with the entry that registered it.
    pub fn get(&self, id: &str) -> Option<(u64, &ContractRegistered)> {
        self.at
            .get(id)
            .map(|&i| (self.registered_at[i], &self.list[i]))
    }

    /// The contracts as amended, in log order.
    pub fn all(&self) -> &[ContractRegistered] {
        &self.list
    }

    /// The contracts as amended, with the entries that registered them, in log order.
    pub fn entries(self) -> Vec<(u64, ContractRegistered)> {
        self.registered_at.into_iter().zip(self.list).collect()
    }

    /// The contracts as amended, in log order.
    pub fn into_vec(self) -> Vec<ContractRegistered> {
        self.list
    }
}

/// The admission rules of `contract_registered` and `contract_amended` entries
/// (docs/PROTOCOL.md §6.7, contracts), over the contracts, amendments and invoiced periods of
/// the entries before them. The tenant's registration is
/// [`crate::admission::check_parties`]'s.
#[derive(Debug, Clone, Default)]
pub struct ContractBook {
    /// The contracts as amended so far.
    contracts: Contracts,
    /// Tenant → the latest `period_to` of its invoices.
    invoiced_to: HashMap<String, Timestamp>,
}

impl ContractBook {
    /// Takes in an entry at `index` (contracts, amendments and invoices; any other kind is
    /// ignored).
    pub fn apply(&mut self, index: u64, body: &Body) {
        match body {
            Body::ContractRegistered(_) | Body::ContractAmended(_) => {
                self.contracts.apply(index, body)
            }
            Body::InvoiceIssued(i) => self.invoiced(&i.tenant, i.period_to),
            _ => {}
        }
    }

    /// Takes in an invoice of `tenant` for a period ending at `to`.
    pub fn invoiced(&mut self, tenant: &str, to: Timestamp) {
        let at = self.invoiced_to.entry(tenant.to_owned()).or_insert(to);
        *at = (*at).max(to);
    }

    /// The term of a contract of `tenant` other than `except` that overlaps `[from, to)`.
    fn overlapping(
        &self,
        tenant: &str,
        except: &str,
        from: Timestamp,
        to: Timestamp,
    ) -> Option<(Timestamp, Timestamp)> {
        self.contracts
            .all()
            .iter()
            .filter(|c| c.tenant == tenant && c.contract != except)
            .map(|c| (c.term_from, c.term_to))
            .find(|(f, t)| from < *t && *f < to)
    }

    /// The rules for `body` arriving at `now` under `policy` (other kinds pass): for a
    /// contract, in order: registered once (`already_registered`), not starting before `now`
    /// minus the policy's skew (`price_in_past`) nor inside an invoiced period of its tenant
    /// (`price_in_invoiced_period`), overlapping no other contract of its tenant
    /// (`contract_overlap`); for an amendment, [`ContractBook::check_amendment`]'s.
    pub fn check(&self, body: &Body, now: Timestamp, policy: &LogPolicy) -> Result<(), Rejection> {
        let c = match body {
            Body::ContractRegistered(c) => c,
            Body::ContractAmended(a) => return self.check_amendment(a, now, policy),
            _ => return Ok(()),
        };
        if let Some((at, _)) = self.contracts.get(&c.contract) {
            return Err(Rejection::field(
                Reason::AlreadyRegistered,
                "body.contract",
                format!("contract {} is already registered (entry {at})", c.contract),
            ));
        }
        let earliest = now.plus(-(policy.max_future_skew_seconds as i64));
        if c.term_from < earliest {
            return Err(Rejection::field(
                Reason::PriceInPast,
                "body.term_from",
                format!(
                    "the term starts at {}, before {earliest} (the ledger clock {now} less the \
                     policy's {} s): a contract never charges the past",
                    c.term_from, policy.max_future_skew_seconds
                ),
            ));
        }
        if let Some(to) = self
            .invoiced_to
            .get(&c.tenant)
            .filter(|to| c.term_from < **to)
        {
            return Err(Rejection::field(
                Reason::PriceInInvoicedPeriod,
                "body.term_from",
                format!(
                    "the term starts at {}, inside a period of {} invoiced up to {to}",
                    c.term_from, c.tenant
                ),
            ));
        }
        if let Some((f, t)) = self.overlapping(&c.tenant, &c.contract, c.term_from, c.term_to) {
            return Err(Rejection::field(
                Reason::ContractOverlap,
                "body.term_from",
                format!(
                    "the term [{}, {}) overlaps {}'s contract of [{f}, {t})",
                    c.term_from, c.term_to, c.tenant
                ),
            ));
        }
        Ok(())
    }

    /// The rules of a `contract_amended` entry (docs/PROTOCOL.md §6.7), in order, with `m` the
    /// earlier of the term's current end and its new one (where the change begins):
    /// 1. an earlier contract `contract` of `tenant` (`unknown_contract`, `body.contract`);
    /// 2. the new end after the term's start (`invalid_field`), the term no longer than the
    ///    limit (`quantity_out_of_range`), and not the current end (`invalid_field`), all
    ///    `body.term_to`;
    /// 3. `m` not before `now` minus the policy's skew (`price_in_past`): the past is never
    ///    amended;
    /// 4. the billing period `m` falls in (the term's end itself when `m` is a boundary)
    ///    starts at or after the end of every invoiced period of the tenant
    ///    (`price_in_invoiced_period`): no invoiced line changes;
    /// 5. an extension overlaps no other contract of the tenant (`contract_overlap`).
    pub fn check_amendment(
        &self,
        a: &ContractAmended,
        now: Timestamp,
        policy: &LogPolicy,
    ) -> Result<(), Rejection> {
        let Some((_, c)) = self
            .contracts
            .get(&a.contract)
            .filter(|(_, c)| c.tenant == a.tenant)
        else {
            return Err(Rejection::field(
                Reason::UnknownContract,
                "body.contract",
                format!("{} has no contract {}", a.tenant, a.contract),
            ));
        };
        let invalid =
            |reason, message: String| Err(Rejection::field(reason, "body.term_to", message));
        if a.term_to <= c.term_from {
            return invalid(
                Reason::InvalidField,
                format!("must be after the term's start, {}", c.term_from),
            );
        }
        if c.term_from.seconds_until(a.term_to) > MAX_CONTRACT_TERM_SECONDS {
            return invalid(
                Reason::QuantityOutOfRange,
                format!(
                    "the term would be longer than {} days",
                    MAX_CONTRACT_TERM_SECONDS / 86_400
                ),
            );
        }
        if a.term_to == c.term_to {
            return invalid(
                Reason::InvalidField,
                format!("the term already ends at {}", c.term_to),
            );
        }
        let m = a.term_to.min(c.term_to);
        let earliest = now.plus(-(policy.max_future_skew_seconds as i64));
        if m < earliest {
            return invalid(
                Reason::PriceInPast,
                format!(
                    "the amendment changes the term from {m}, before {earliest} (the ledger \
                     clock {now} less the policy's {} s): the past is never amended",
                    policy.max_future_skew_seconds
                ),
            );
        }
        let changed_from = billing_periods(c)
            .into_iter()
            .find(|s| s.from <= m && m < s.full_to)
            .map_or(m, |s| s.from);
        if let Some(to) = self
            .invoiced_to
            .get(&a.tenant)
            .filter(|to| changed_from < **to)
        {
            return invalid(
                Reason::PriceInInvoicedPeriod,
                format!(
                    "the amendment changes the billing period from {changed_from}, inside a \
                     period of {} invoiced up to {to}",
                    a.tenant
                ),
            );
        }
        if let Some((f, t)) = self
            .overlapping(&a.tenant, &a.contract, c.term_to, a.term_to)
            .filter(|_| a.term_to > c.term_to)
        {
            return invalid(
                Reason::ContractOverlap,
                format!(
                    "the term extended to {} overlaps {}'s contract of [{f}, {t})",
                    a.term_to, a.tenant
                ),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{BillingPeriod, FeeCategory};

    fn t(s: &str) -> Timestamp {
        Timestamp::parse(s).unwrap()
    }

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    fn contract(
        from: &str,
        to: &str,
        period: BillingPeriod,
        anchor: BillingAnchor,
    ) -> ContractRegistered {
        ContractRegistered {
            tenant: "acme".into(),
            contract: "C-1".into(),
            currency: "CNY".into(),
            region: "cn-east".into(),
            term_from: t(from),
            term_to: t(to),
            billing_period: period,
            billing_anchor: anchor,
            fees: Some(vec![
                ContractFee {
                    name: "Bare metal".into(),
                    amount: d("3100"),
                    timing: FeeTiming::Advance,
                    category: FeeCategory::Compute,
                    lease: None,
                    included: None,
                },
                ContractFee {
                    name: "Public IPs".into(),
                    amount: d("10"),
                    timing: FeeTiming::Arrears,
                    category: FeeCategory::Networking,
                    lease: None,
                    included: None,
                },
                ContractFee {
                    name: "Setup".into(),
                    amount: d("500"),
                    timing: FeeTiming::Once,
                    category: FeeCategory::Support,
                    lease: None,
                    included: None,
                },
            ]),
            commitment: Some(d("1000")),
            sla: None,
        }
    }

    fn spans(c: &ContractRegistered) -> Vec<(String, String, String, String)> {
        billing_periods(c)
            .iter()
            .map(|s| {
                (
                    s.from.to_string(),
                    s.to.to_string(),
                    s.full_from.to_string(),
                    s.full_to.to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn calendar_months_clip_the_first_and_last_to_the_term() {
        let c = contract(
            "2027-01-15T12:00:00Z",
            "2027-03-10T00:00:00Z",
            BillingPeriod::Month,
            BillingAnchor::Calendar,
        );
        let s = spans(&c);
        assert_eq!(s.len(), 3);
        assert_eq!(
            s[0],
            (
                "2027-01-15T12:00:00Z".into(),
                "2027-02-01T00:00:00Z".into(),
                "2027-01-01T00:00:00Z".into(),
                "2027-02-01T00:00:00Z".into()
            )
        );
        assert_eq!(s[1].0, "2027-02-01T00:00:00Z");
        assert_eq!(s[1].1, "2027-03-01T00:00:00Z");
        assert_eq!(
            (s[2].1.as_str(), s[2].3.as_str()),
            ("2027-03-10T00:00:00Z", "2027-04-01T00:00:00Z")
        );
    }

    #[test]
    fn anniversaries_keep_the_day_and_clamp_it_to_short_months() {
        let c = contract(
            "2028-01-31T08:00:00Z",
            "2028-05-31T08:00:00Z",
            BillingPeriod::Month,
            BillingAnchor::Anniversary,
        );
        let starts: Vec<String> = spans(&c).into_iter().map(|s| s.0).collect();
        assert_eq!(
            starts,
            [
                "2028-01-31T08:00:00Z",
                "2028-02-29T08:00:00Z",
                "2028-03-31T08:00:00Z",
                "2028-04-30T08:00:00Z"
            ]
        );
        let q = contract(
            "2027-11-05T00:00:00Z",
            "2028-11-05T00:00:00Z",
            BillingPeriod::Quarter,
            BillingAnchor::Calendar,
        );
        let s = spans(&q);
        assert_eq!(s[0].2, "2027-10-01T00:00:00Z");
        assert_eq!(s[1].0, "2028-01-01T00:00:00Z");
        assert_eq!(s.last().unwrap().3, "2029-01-01T00:00:00Z");
        let y = contract(
            "2027-06-01T00:00:00Z",
            "2029-06-01T00:00:00Z",
            BillingPeriod::Year,
            BillingAnchor::Calendar,
        );
        assert_eq!(spans(&y).len(), 3);
    }

    #[test]
    fn fees_are_prorated_by_the_second_and_billed_at_their_anchor() {
        // January 2027 has 31 days; the term starts on the 15th at noon: 16.5 days used.
        let c = contract(
            "2027-01-15T12:00:00Z",
            "2027-03-10T00:00:00Z",
            BillingPeriod::Month,
            BillingAnchor::Calendar,
        );
        let jan = charges(&c, t("2027-01-01T00:00:00Z"), t("2027-02-01T00:00:00Z"));
        // Setup (once), the January rent in advance (3100 × 16.5 / 31 = 1650), the January IPs
        // in arrears (10 × 16.5 / 31 = 5.3225… → 5.32).
        let nets: Vec<(usize, Decimal)> = jan.fees.iter().map(|f| (f.fee, f.net)).collect();
        assert_eq!(nets, [(2, d("500")), (0, d("1650.00")), (1, d("5.32"))]);
        // 1000 × 16.5 / 31 = 532.258… → 532.26
        assert_eq!(jan.committed, Some(d("532.26")));
        assert_eq!(jan.split, None);
        // March: 9 of 31 days: rent 900, IPs 2.903… → 2.90.
        let mar = charges(&c, t("2027-03-01T00:00:00Z"), t("2027-04-01T00:00:00Z"));
        let nets: Vec<Decimal> = mar.fees.iter().map(|f| f.net).collect();
        assert_eq!(nets, [d("900.00"), d("2.90")]);
        // A quarter's invoice pools its months' commitments.
        let q = charges(&c, t("2027-01-01T00:00:00Z"), t("2027-04-01T00:00:00Z"));
        assert_eq!(q.fees.len(), 7);
        assert_eq!(q.committed, Some(d("532.26") + d("1000.00") + d("290.32")));
    }

    #[test]
    fn charges_in_says_what_charges_finds() {
        let mut c = contract(
            "2027-01-15T12:00:00Z",
            "2027-06-01T00:00:00Z",
            BillingPeriod::Month,
            BillingAnchor::Calendar,
        );
        let once_only = |c: &mut ContractRegistered| {
            c.commitment = None;
            c.fees
                .as_mut()
                .unwrap()
                .retain(|f| f.timing == FeeTiming::Once);
        };
        for variant in 0..2 {
            if variant == 1 {
                once_only(&mut c);
            }
            for span in billing_periods(&c) {
                let ch = charges(&c, span.from, span.to);
                assert_eq!(
                    charges_in(&c, &span),
                    !ch.fees.is_empty() || ch.committed.is_some(),
                    "variant {variant}, span from {}",
                    span.from
                );
            }
        }
        // With a setup fee only, the first billing period alone charges anything.
        let charged: Vec<bool> = billing_periods(&c)
            .iter()
            .map(|s| charges_in(&c, s))
            .collect();
        assert_eq!(charged, [true, false, false, false, false]);
    }

    #[test]
    fn an_invoice_that_splits_a_committed_period_is_named() {
        let c = contract(
            "2027-01-01T00:00:00Z",
            "2028-01-01T00:00:00Z",
            BillingPeriod::Month,
            BillingAnchor::Calendar,
        );
        let mid = charges(&c, t("2027-01-01T00:00:00Z"), t("2027-01-16T00:00:00Z"));
        assert_eq!(mid.split.map(|s| s.to), Some(t("2027-02-01T00:00:00Z")));
        assert_eq!(mid.committed, None);
        // The advance fee of January is still billed there (its anchor is inside).
        assert_eq!(mid.fees.len(), 2);
        let mut no_commitment = c.clone();
        no_commitment.commitment = None;
        let ok = charges(
            &no_commitment,
            t("2027-01-01T00:00:00Z"),
            t("2027-01-16T00:00:00Z"),
        );
        assert_eq!(ok.split, None);
        // Outside the term: nothing.
        let after = charges(&c, t("2028-01-01T00:00:00Z"), t("2028-02-01T00:00:00Z"));
        assert_eq!(after, Charges::default());
    }

    #[test]
    fn contracts_are_admitted_once_forward_and_without_overlap() {
        let policy = LogPolicy::default();
        let now = t("2027-01-01T00:00:00Z");
        let c = contract(
            "2027-01-01T00:00:00Z",
            "2027-07-01T00:00:00Z",
            BillingPeriod::Month,
            BillingAnchor::Calendar,
        );
        let mut book = ContractBook::default();
        book.check(&Body::ContractRegistered(c.clone()), now, &policy)
            .unwrap();
        book.apply(5, &Body::ContractRegistered(c.clone()));
        let code = |b: &ContractBook, c: &ContractRegistered, now| {
            b.check(&Body::ContractRegistered(c.clone()), now, &policy)
                .err()
                .map(|r| (r.reason.code(), r.field.unwrap_or_default()))
        };
        assert_eq!(
            code(&book, &c, now),
            Some(("already_registered", "body.contract".into()))
        );
        let mut next = c.clone();
        next.contract = "C-2".into();
        next.term_from = t("2027-06-30T00:00:00Z");
        next.term_to = t("2027-12-31T00:00:00Z");
        assert_eq!(
            code(&book, &next, now),
            Some(("contract_overlap", "body.term_from".into()))
        );
        next.term_from = t("2027-07-01T00:00:00Z");
        assert_eq!(
            code(&book, &next, now),
            None,
            "adjacent terms do not overlap"
        );
        let late = t("2027-07-01T00:05:01Z");
        assert_eq!(
            code(&book, &next, late),
            Some(("price_in_past", "body.term_from".into()))
        );
        book.invoiced("acme", t("2027-07-02T00:00:00Z"));
        assert_eq!(
            code(&book, &next, now),
            Some(("price_in_invoiced_period", "body.term_from".into()))
        );
        let mut other = next.clone();
        other.tenant = "beta".into();
        other.term_from = t("2027-01-01T00:00:00Z");
        assert_eq!(
            code(&book, &other, now),
            None,
            "another tenant's terms are its own"
        );
    }

    fn amend(c: &ContractRegistered, to: &str) -> Body {
        Body::ContractAmended(ContractAmended {
            tenant: c.tenant.clone(),
            contract: c.contract.clone(),
            term_to: t(to),
            reason: "Ended early by mutual agreement".into(),
        })
    }

    #[test]
    fn an_amendment_moves_the_terms_end_for_every_reader_after_it() {
        let c = contract(
            "2027-01-01T00:00:00Z",
            "2028-01-01T00:00:00Z",
            BillingPeriod::Month,
            BillingAnchor::Calendar,
        );
        let mut other = c.clone();
        other.tenant = "beta".into();
        // An amendment naming the contract under another tenant changes nothing.
        let mut stray = amend(&c, "2027-02-01T00:00:00Z");
        if let Body::ContractAmended(a) = &mut stray {
            a.tenant = "beta".into();
        }
        let log = vec![
            (3, Body::ContractRegistered(c.clone())),
            (7, amend(&c, "2027-06-15T00:00:00Z")),
            (8, stray),
            (9, amend(&c, "2027-03-20T12:00:00Z")),
        ];
        let all = Contracts::of(log.clone());
        let (at, now) = all.get("C-1").unwrap();
        assert_eq!((at, now.term_to), (3, t("2027-03-20T12:00:00Z")));
        // As of entry 8 (the first amendment only).
        let early = Contracts::of(log.iter().take(2).cloned());
        assert_eq!(early.all()[0].term_to, t("2027-06-15T00:00:00Z"));
        // The last billing period is cut at the new end and prorated by the second:
        // March 2027 has 31 days; 19.5 of them are used: 3100 × 19.5 / 31 = 1950.
        let amended = all.into_vec().remove(0);
        let spans = billing_periods(&amended);
        assert_eq!(spans.len(), 3);
        let mar = charges(
            &amended,
            t("2027-03-01T00:00:00Z"),
            t("2027-04-01T00:00:00Z"),
        );
        let nets: Vec<Decimal> = mar.fees.iter().map(|f| f.net).collect();
        // Rent 1950.00, IPs 10 × 19.5 / 31 = 6.290… → 6.29; commitment 629.03.
        assert_eq!(nets, [d("1950.00"), d("6.29")]);
        assert_eq!(mar.committed, Some(d("629.03")));
        let apr = charges(
            &amended,
            t("2027-04-01T00:00:00Z"),
            t("2027-05-01T00:00:00Z"),
        );
        assert_eq!(apr, Charges::default());
    }

    #[test]
    fn amendments_change_only_the_uninvoiced_future() {
        let policy = LogPolicy::default();
        let now = t("2027-02-10T00:00:00Z");
        let c = contract(
            "2027-01-15T12:00:00Z",
            "2027-12-15T12:00:00Z",
            BillingPeriod::Month,
            BillingAnchor::Calendar,
        );
        let mut book = ContractBook::default();
        book.apply(4, &Body::ContractRegistered(c.clone()));
        let code = |b: &ContractBook, body: &Body, now| {
            b.check(body, now, &policy)
                .err()
                .map(|r| (r.reason.code(), r.field.unwrap_or_default()))
        };
        let term = |r: &'static str| Some((r, "body.term_to".to_string()));
        // Ending in March, extending to 2028: both fine today.
        assert_eq!(code(&book, &amend(&c, "2027-03-20T00:00:00Z"), now), None);
        assert_eq!(code(&book, &amend(&c, "2028-06-01T00:00:00Z"), now), None);
        // Not a change, before the start, too long.
        assert_eq!(
            code(&book, &amend(&c, "2027-12-15T12:00:00Z"), now),
            term("invalid_field")
        );
        assert_eq!(
            code(&book, &amend(&c, "2027-01-15T12:00:00Z"), now),
            term("invalid_field")
        );
        assert_eq!(
            code(&book, &amend(&c, "2037-03-01T00:00:00Z"), now),
            term("quantity_out_of_range")
        );
        // Ending before the ledger clock (less the skew) amends the past.
        assert_eq!(
            code(&book, &amend(&c, "2027-02-09T23:54:59Z"), now),
            term("price_in_past")
        );
        // Another tenant's, or an unknown, contract.
        let mut stray = amend(&c, "2027-03-20T00:00:00Z");
        if let Body::ContractAmended(a) = &mut stray {
            a.tenant = "beta".into();
        }
        assert_eq!(
            code(&book, &stray, now),
            Some(("unknown_contract", "body.contract".into()))
        );
        // Invoiced up to 1 March (at an earlier clock, so the past rule stays out of the way):
        // an end inside February is refused; one on 1 March or inside March changes nothing
        // invoiced.
        book.invoiced("acme", t("2027-03-01T00:00:00Z"));
        let early = t("2027-01-20T00:00:00Z");
        assert_eq!(
            code(&book, &amend(&c, "2027-02-20T00:00:00Z"), early),
            term("price_in_invoiced_period")
        );
        assert_eq!(code(&book, &amend(&c, "2027-03-01T00:00:00Z"), early), None);
        assert_eq!(code(&book, &amend(&c, "2027-03-02T00:00:00Z"), early), None);
        // A non-committed contract invoiced to mid-March: March's advance rent is on that
        // invoice, so an end anywhere in March (after the 15th too) is refused, April is not.
        book.invoiced("acme", t("2027-03-15T00:00:00Z"));
        assert_eq!(
            code(&book, &amend(&c, "2027-03-20T00:00:00Z"), early),
            term("price_in_invoiced_period")
        );
        assert_eq!(code(&book, &amend(&c, "2027-04-02T00:00:00Z"), early), None);
        // Shortened to mid-June, then the tenant's next contract from July: extending the
        // first past 1 July overlaps it; to 1 July exactly does not.
        book.apply(9, &amend(&c, "2027-06-15T00:00:00Z"));
        let mut next = c.clone();
        next.contract = "C-2".into();
        next.term_from = t("2027-07-01T00:00:00Z");
        next.term_to = t("2028-01-01T00:00:00Z");
        assert_eq!(
            code(&book, &Body::ContractRegistered(next.clone()), early),
            None
        );
        book.apply(10, &Body::ContractRegistered(next));
        assert_eq!(
            code(&book, &amend(&c, "2027-07-02T00:00:00Z"), early),
            term("contract_overlap")
        );
        assert_eq!(code(&book, &amend(&c, "2027-07-01T00:00:00Z"), early), None);
        // The shortened term no longer overlaps a contract from 20 June.
        let mut gap = c.clone();
        gap.contract = "C-3".into();
        gap.term_from = t("2027-06-15T00:00:00Z");
        gap.term_to = t("2027-07-01T00:00:00Z");
        assert_eq!(code(&book, &Body::ContractRegistered(gap), early), None);
    }
}
