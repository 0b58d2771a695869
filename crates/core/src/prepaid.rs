//! Prepaid balances (docs/RATING.md, "Prepaid balances"; docs/PROTOCOL.md §5.20): a tenant's
//! `prepayment` entries are lots, and every invoice issued to it draws on them, in one order,
//! at issue. Nothing about a draw is typed by anyone: it follows from the log, so the ledger
//! (issuing), `verify-log` (the reference rule), `gpuledger verify --invoice` (the invoice's
//! `prepaid` list) and the balance of any log size all come from [`PrepaidBook`].
//!
//! The rule, for an invoice of tenant T in currency C with total G, issued at the instant I
//! (its `issued_at`, the `received_at` of its `invoice_issued` entry) at checkpoint size S:
//! - it may draw on a lot of T in C logged below S (index < S) that has not expired when it is
//!   issued (no `expires_at`, or I < `expires_at`), as the lot stands after the draws of T's
//!   invoices logged before it;
//! - lots are drawn in this order: grants before purchases, then earliest `expires_at` first
//!   (a lot without one last), then in log order;
//! - each lot gives min(what is left of it, what is left to pay), starting from
//!   max(G, 0), until nothing is left to pay or no lot may give more.

use crate::rating::pad_amount;
use crate::record::{Body, InvoiceIssued, Prepayment, PrepaymentSource};
use crate::rejection::{Reason, Rejection};
use crate::time::Timestamp;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// What one invoice drew from one lot: a line of the invoice's `prepaid` list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PrepaidDraw {
    /// The lot's `reference`.
    pub prepayment: String,
    pub source: PrepaymentSource,
    /// With at least the currency's minor-unit digits.
    #[serde(with = "crate::decimal::money_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub amount: Decimal,
}

/// What is left to pay of an invoice totalling `total` after its `draws`, padded to the
/// currency's minor unit; `None` when it drew nothing (the invoice then has no `amount_due`).
pub fn amount_due(total: Decimal, draws: &[PrepaidDraw], currency: &str) -> Option<Decimal> {
    (!draws.is_empty()).then(|| {
        let drawn: Decimal = draws.iter().map(|d| d.amount).sum();
        pad_amount(total - drawn, currency)
    })
}

/// Whether draws that took the tenant's available balance from `before` to `after` cross below
/// the `below` threshold (a `balance.low` event): it was at or above it and is under it now.
/// Once per crossing: below it already, further draws do not cross again until a top-up
/// lifts the balance back to it.
pub fn crossed_below(before: Decimal, after: Decimal, below: Decimal) -> bool {
    before >= below && after < below
}

/// A lot and what the invoices drew from it so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lot {
    /// The index of its `prepayment` entry.
    pub index: u64,
    /// When the ledger logged it (the entry's `received_at`).
    pub logged_at: Timestamp,
    pub prepayment: Prepayment,
    /// (invoice number, amount), in log order.
    pub draws: Vec<(String, Decimal)>,
}

impl Lot {
    /// What the invoices drew from it.
    pub fn drawn(&self) -> Decimal {
        self.draws.iter().map(|(_, a)| *a).sum()
    }

    /// What is left of it (forfeit once it has expired).
    pub fn remaining(&self) -> Decimal {
        self.prepayment.amount - self.drawn()
    }

    /// Whether it has expired at `at`: its `expires_at` is at or before `at`.
    pub fn expired_at(&self, at: Timestamp) -> bool {
        self.prepayment.expires_at.is_some_and(|e| e <= at)
    }

    /// Whether an invoice issued at `issued_at` at checkpoint size `size` may draw on it (its
    /// currency and tenant aside): the lot is below the checkpoint and has not expired.
    fn pays(&self, size: u64, issued_at: Timestamp) -> bool {
        self.index < size && !self.expired_at(issued_at)
    }

    /// The drawing order: grants first, earliest expiry first (none last), log order.
    fn order(&self) -> (PrepaymentSource, bool, Option<Timestamp>, u64) {
        let p = &self.prepayment;
        (p.source, p.expires_at.is_none(), p.expires_at, self.index)
    }
}

/// A tenant's position in one currency as of an instant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Position {
    pub currency: String,
    /// Σ amount of the purchased lots.
    #[serde(with = "crate::decimal::money_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub purchased: Decimal,
    /// Σ amount of the granted lots.
    #[serde(with = "crate::decimal::money_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub granted: Decimal,
    /// Σ what invoices drew.
    #[serde(with = "crate::decimal::money_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub drawn: Decimal,
    /// Σ what was left of the lots that have expired.
    #[serde(with = "crate::decimal::money_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub expired: Decimal,
    /// purchased + granted − drawn − expired: what the next invoices may still draw.
    #[serde(with = "crate::decimal::money_str")]
    #[cfg_attr(feature = "openapi", schema(value_type = crate::decimal::DecimalString))]
    pub available: Decimal,
}

/// The lots of a log and what its invoices drew, rebuilt from its `prepayment` and
/// `invoice_issued` entries in index order.
#[derive(Debug, Clone, Default)]
pub struct PrepaidBook {
    lots: Vec<Lot>,
    /// (tenant, reference) → position in `lots`.
    references: HashMap<(String, String), usize>,
}

impl PrepaidBook {
    /// The rules of a `prepayment` entry received at `received_at` (§6.7, prepayments): its
    /// reference is new for its tenant (`reference_used`), and it has not expired already
    /// (`invalid_field` at `body.expires_at`). Other kinds pass.
    pub fn check(&self, body: &Body, received_at: Timestamp) -> Result<(), Rejection> {
        let Body::Prepayment(p) = body else {
            return Ok(());
        };
        if let Some(&at) = self
            .references
            .get(&(p.tenant.clone(), p.reference.clone()))
        {
            return Err(Rejection::field(
                Reason::ReferenceUsed,
                "body.reference",
                format!(
                    "a prepayment of {} already carries {:?} (entry {})",
                    p.tenant, p.reference, self.lots[at].index
                ),
            ));
        }
        if let Some(e) = p.expires_at.filter(|e| *e <= received_at) {
            return Err(Rejection::field(
                Reason::InvalidField,
                "body.expires_at",
                format!("{e} is not after the entry's time {received_at}"),
            ));
        }
        Ok(())
    }

    /// Takes in the entry at `index`, received at `received_at`, in increasing index order: a
    /// `prepayment` is a new lot; an `invoice_issued` draws on the lots
    /// ([`PrepaidBook::draws`], issued at `received_at`).
    pub fn apply(&mut self, index: u64, received_at: Timestamp, body: &Body) {
        match body {
            Body::Prepayment(p) => self.add_lot(index, received_at, p),
            Body::InvoiceIssued(i) => self.draw(i, received_at),
            _ => {}
        }
    }

    /// A new lot, unless its tenant's reference is taken (a log the rules refuse).
    fn add_lot(&mut self, index: u64, logged_at: Timestamp, p: &Prepayment) {
        let key = (p.tenant.clone(), p.reference.clone());
        if !self.references.contains_key(&key) {
            self.references.insert(key, self.lots.len());
            self.lots.push(Lot {
                index,
                logged_at,
                prepayment: p.clone(),
                draws: Vec::new(),
            });
        }
    }

    /// Records what the invoice issued at `issued_at` draws.
    fn draw(&mut self, i: &InvoiceIssued, issued_at: Timestamp) {
        let size = i.checkpoint_size;
        for d in self.draws(&i.tenant, &i.currency, i.total, size, issued_at) {
            if let Some(&at) = self.references.get(&(i.tenant.clone(), d.prepayment)) {
                self.lots[at].draws.push((i.number.clone(), d.amount));
            }
        }
    }

    /// What an invoice of `tenant` in `currency` totalling `total`, issued at `issued_at` at
    /// checkpoint size `size`, draws from the lots as they stand (the rule in the module's
    /// doc), in drawing order; empty when it draws nothing.
    pub fn draws(
        &self,
        tenant: &str,
        currency: &str,
        total: Decimal,
        size: u64,
        issued_at: Timestamp,
    ) -> Vec<PrepaidDraw> {
        let mut open: Vec<&Lot> = self
            .lots
            .iter()
            .filter(|l| {
                l.prepayment.tenant == tenant
                    && l.prepayment.currency == currency
                    && l.pays(size, issued_at)
                    && l.remaining() > Decimal::ZERO
            })
            .collect();
        open.sort_by_key(|l| l.order());
        let mut left = total.max(Decimal::ZERO);
        let mut out = Vec::new();
        for lot in open {
            if left <= Decimal::ZERO {
                break;
            }
            let take = lot.remaining().min(left);
            left -= take;
            out.push(PrepaidDraw {
                prepayment: lot.prepayment.reference.clone(),
                source: lot.prepayment.source,
                amount: pad_amount(take, currency),
            });
        }
        out
    }

    /// The lots of `tenant`, in log order.
    pub fn lots<'a>(&'a self, tenant: &'a str) -> impl Iterator<Item = &'a Lot> + 'a {
        self.lots
            .iter()
            .filter(move |l| l.prepayment.tenant == tenant)
    }

    /// Every lot, in log order.
    pub fn all_lots(&self) -> impl Iterator<Item = &Lot> {
        self.lots.iter()
    }

    /// The lot of `tenant` carrying `reference`.
    pub fn lot(&self, tenant: &str, reference: &str) -> Option<&Lot> {
        self.references
            .get(&(tenant.to_owned(), reference.to_owned()))
            .map(|&at| &self.lots[at])
    }

    /// What the invoice `number` of `tenant` drew, by lot reference.
    pub fn drawn_by(&self, tenant: &str, number: &str) -> Decimal {
        self.lots(tenant)
            .flat_map(|l| l.draws.iter())
            .filter(|(n, _)| n == number)
            .map(|(_, a)| *a)
            .sum()
    }

    /// The tenant's position per currency at `at` (a lot that expired at or before `at`
    /// counts its remainder as `expired`), amounts padded to the currency's minor unit.
    pub fn positions(&self, tenant: &str, at: Timestamp) -> Vec<Position> {
        let mut by: BTreeMap<&str, Position> = BTreeMap::new();
        for lot in self.lots(tenant) {
            let p = &lot.prepayment;
            let pos = by.entry(&p.currency).or_insert_with(|| Position {
                currency: p.currency.clone(),
                ..Position::default()
            });
            match p.source {
                PrepaymentSource::Grant => pos.granted += p.amount,
                PrepaymentSource::Purchase => pos.purchased += p.amount,
            }
            pos.drawn += lot.drawn();
            if lot.expired_at(at) {
                pos.expired += lot.remaining();
            }
        }
        by.into_values()
            .map(|mut p| {
                p.available = p.purchased + p.granted - p.drawn - p.expired;
                for d in [
                    &mut p.purchased,
                    &mut p.granted,
                    &mut p.drawn,
                    &mut p.expired,
                    &mut p.available,
                ] {
                    *d = pad_amount(*d, &p.currency);
                }
                p
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_unix(1_800_000_000 + s).unwrap()
    }

    fn lot(reference: &str, source: PrepaymentSource, amount: i64, expires: Option<i64>) -> Body {
        Body::Prepayment(Prepayment {
            tenant: "acme".into(),
            reference: reference.into(),
            source,
            currency: "CNY".into(),
            amount: Decimal::new(amount, 2),
            expires_at: expires.map(t),
        })
    }

    fn invoice(number: &str, total: i64, size: u64, to: i64) -> Body {
        Body::InvoiceIssued(InvoiceIssued {
            number: number.into(),
            tenant: "acme".into(),
            period_from: t(to - 3_600),
            period_to: t(to),
            currency: "CNY".into(),
            total: Decimal::new(total, 2),
            checkpoint_size: size,
            invoice_sha256: "00".repeat(32),
        })
    }

    fn drawn(book: &PrepaidBook, total: i64, size: u64, at: i64) -> Vec<(String, i64)> {
        book.draws("acme", "CNY", Decimal::new(total, 2), size, t(at))
            .into_iter()
            .map(|d| {
                (
                    d.prepayment,
                    (d.amount * Decimal::ONE_HUNDRED).try_into().unwrap(),
                )
            })
            .collect()
    }

    /// Grants before purchases, earliest expiry first (none last), then log order; each lot
    /// gives what it has until the invoice is paid.
    #[test]
    fn lots_are_drawn_in_the_stated_order() {
        use PrepaymentSource::*;
        let mut book = PrepaidBook::default();
        book.apply(1, t(0), &lot("p-late", Purchase, 10_000, None));
        book.apply(2, t(0), &lot("p-soon", Purchase, 5_000, Some(100_000)));
        book.apply(3, t(0), &lot("g-never", Grant, 2_000, None));
        book.apply(4, t(0), &lot("g-soon", Grant, 1_000, Some(50_000)));
        assert_eq!(
            drawn(&book, 12_345, 10, 0),
            [
                ("g-soon".to_owned(), 1_000),
                ("g-never".to_owned(), 2_000),
                ("p-soon".to_owned(), 5_000),
                ("p-late".to_owned(), 4_345),
            ]
        );
        book.apply(10, t(0), &invoice("INV-000001", 12_345, 10, 0));
        assert_eq!(
            book.lot("acme", "p-late").unwrap().remaining(),
            Decimal::new(5_655, 2)
        );
        // The next invoice finds only what is left; a negative total draws nothing.
        assert_eq!(drawn(&book, 99_999, 11, 1), [("p-late".to_owned(), 5_655)]);
        assert!(drawn(&book, -500, 11, 1).is_empty());
        assert_eq!(book.drawn_by("acme", "INV-000001"), Decimal::new(12_345, 2));
    }

    /// A lot pays an invoice issued before it expires, and only one issued at a checkpoint that
    /// holds it; the balance counts it expired from the same instant.
    #[test]
    fn expiry_and_checkpoint_bound_what_a_lot_pays() {
        let mut book = PrepaidBook::default();
        book.apply(
            5,
            t(0),
            &lot("p", PrepaymentSource::Purchase, 1_000, Some(3_600)),
        );
        assert_eq!(
            drawn(&book, 500, 6, 3_599).len(),
            1,
            "issued a second before"
        );
        assert!(
            drawn(&book, 500, 6, 3_600).is_empty(),
            "issued as it expires"
        );
        assert!(
            drawn(&book, 500, 5, 0).is_empty(),
            "checkpoint below the lot"
        );
        // An earlier invoice's draws are replayed at its own issue time.
        let mut late = book.clone();
        late.apply(6, t(3_600), &invoice("INV-000001", 500, 6, 0));
        assert!(late.lot("acme", "p").unwrap().draws.is_empty());
        book.apply(6, t(3_599), &invoice("INV-000001", 500, 6, 0));
        assert_eq!(
            book.lot("acme", "p").unwrap().remaining(),
            Decimal::new(500, 2)
        );
        let at = |s| book.positions("acme", t(s))[0].clone();
        assert_eq!(at(3_599).available, Decimal::new(500, 2));
        assert_eq!(
            (at(3_600).expired, at(3_600).available),
            (Decimal::new(500, 2), Decimal::ZERO)
        );
        assert_eq!(at(0).available.to_string(), "5.00");
    }

    /// A crossing is from at or above the threshold to under it.
    #[test]
    fn crossing_below_a_threshold() {
        let d = |c| Decimal::new(c, 2);
        assert!(crossed_below(d(1_000), d(999), d(1_000)));
        assert!(!crossed_below(d(999), d(500), d(1_000)), "below already");
        assert!(
            !crossed_below(d(2_000), d(1_000), d(1_000)),
            "at it, not under"
        );
    }

    /// A reference is a tenant's once; a lot cannot be logged already expired.
    #[test]
    fn references_are_unique_and_lots_live() {
        let mut book = PrepaidBook::default();
        let first = lot("bank-1", PrepaymentSource::Purchase, 100, None);
        assert!(book.check(&first, t(0)).is_ok());
        book.apply(1, t(0), &first);
        let again = lot("bank-1", PrepaymentSource::Grant, 5, None);
        assert_eq!(
            book.check(&again, t(0)).unwrap_err().reason,
            Reason::ReferenceUsed
        );
        let dead = lot("bank-2", PrepaymentSource::Purchase, 100, Some(0));
        let r = book.check(&dead, t(0)).unwrap_err();
        assert_eq!(
            (r.reason, r.field.as_deref()),
            (Reason::InvalidField, Some("body.expires_at"))
        );
        assert!(book.check(&dead, t(-1)).is_ok());
    }
}
