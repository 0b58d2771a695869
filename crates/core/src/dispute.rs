//! Disputes settled without billing (docs/PROTOCOL.md §5.17, §6.7 disputes): an admin's
//! `record_excluded` entry takes one logged record of a tenant out of rating. The rules are
//! [`check_exclusion`]: the ledger applies it to the facts it reads from its database before it
//! writes the entry, `verify-log` to the facts [`Disputes`] gathers from the log. How invoices
//! leave excluded records out is `invoice::InvoiceScope` (its `excluded` set).

use super::invoice::Period;
use super::record::{Body, RecordExcluded};
use super::rejection::{Reason, Rejection};
use super::time::Timestamp;
use std::collections::HashMap;

/// The record an exclusion names, as the log holds it below the exclusion: a `gpu_usage`
/// record, or an `energy` record with a tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamedRecord<'a> {
    pub tenant: &'a str,
    /// Its interval's start, which places it in an invoice's period.
    pub start: Timestamp,
}

/// One of the tenant's invoices issued before the exclusion (any currency).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IssuedInvoice {
    pub period: Period,
    pub checkpoint_size: u64,
}

/// The exclusion `x` may be logged: no earlier exclusion names its entry (`excluded_at`, the
/// index of one that does: `already_excluded`); the entry is a record of its tenant (`record`:
/// the record at `x.entry` below the exclusion, if it is one; `unknown_record`); and no issued
/// invoice rated it (`invoices`: the tenant's, issued before the exclusion; `record_invoiced`).
/// A record is rated by an invoice when its start lies in an invoiced period of its tenant and
/// an invoice of the tenant was computed after it was logged (`checkpoint_size` above its
/// index): the period's own invoice, or the next one, which rates it as a late record.
pub fn check_exclusion(
    x: &RecordExcluded,
    excluded_at: Option<u64>,
    record: Option<NamedRecord<'_>>,
    invoices: &[IssuedInvoice],
) -> Result<(), Rejection> {
    check_not_excluded(x, excluded_at)?;
    let start = match record {
        Some(r) if r.tenant == x.tenant => r.start,
        _ => {
            return Err(Rejection::field(
                Reason::UnknownRecord,
                "body.entry",
                format!(
                    "entry {} is not a gpu_usage or energy record of {} logged before",
                    x.entry, x.tenant
                ),
            ))
        }
    };
    let period = invoices.iter().find(|i| i.period.contains(start));
    let after = invoices.iter().find(|i| i.checkpoint_size > x.entry);
    if let (Some(p), Some(a)) = (period, after) {
        return Err(Rejection::field(
            Reason::RecordInvoiced,
            "body.entry",
            format!(
                "entry {} starts at {start}, in the period [{}, {}) invoiced to {}, and an invoice computed at log size {} rated it; credit its invoice instead",
                x.entry, p.period.from, p.period.to, x.tenant, a.checkpoint_size
            ),
        ));
    }
    Ok(())
}

/// The part of [`check_exclusion`] that needs no record: no earlier exclusion names the entry.
pub fn check_not_excluded(x: &RecordExcluded, excluded_at: Option<u64>) -> Result<(), Rejection> {
    match excluded_at {
        Some(at) => Err(Rejection::field(
            Reason::AlreadyExcluded,
            "body.entry",
            format!("entry {} is already excluded (entry {at})", x.entry),
        )),
        None => Ok(()),
    }
}

/// What the dispute rules need of the log, gathered entry by entry in index order (the
/// registry's part for `verify-log` and the bundle verifiers).
#[derive(Debug, Clone)]
pub struct Disputes {
    /// Whether every record comes before the entries after it (a whole log). In a bundle the
    /// records follow the context, so only [`check_not_excluded`] applies there and no record
    /// is kept.
    whole_log: bool,
    /// tenant → its records: (index, start), by increasing index. 16 bytes a record.
    records: HashMap<String, Vec<(u64, Timestamp)>>,
    /// Excluded entry → the index of its exclusion.
    excluded: HashMap<u64, u64>,
    /// tenant → its invoices, in log order.
    invoices: HashMap<String, Vec<IssuedInvoice>>,
}

impl Disputes {
    /// For a whole log, entry by entry.
    pub fn whole_log() -> Self {
        Disputes {
            whole_log: true,
            records: HashMap::new(),
            excluded: HashMap::new(),
            invoices: HashMap::new(),
        }
    }

    /// For a bundle, whose records follow its context.
    pub fn bundle() -> Self {
        Disputes {
            whole_log: false,
            ..Disputes::whole_log()
        }
    }

    /// Takes in an admitted entry.
    pub fn apply(&mut self, index: u64, body: &Body) {
        match body {
            Body::GpuUsage(u) if self.whole_log => self.record(&u.tenant, index, u.start),
            Body::Energy(e) if self.whole_log => {
                if let Some(t) = &e.tenant {
                    self.record(t, index, e.start);
                }
            }
            Body::RecordExcluded(x) => {
                self.excluded.entry(x.entry).or_insert(index);
            }
            Body::InvoiceIssued(i) => {
                self.invoices
                    .entry(i.tenant.clone())
                    .or_default()
                    .push(IssuedInvoice {
                        period: Period {
                            from: i.period_from,
                            to: i.period_to,
                        },
                        checkpoint_size: i.checkpoint_size,
                    })
            }
            _ => {}
        }
    }

    /// Keeps a record of `tenant` (its id allocated once, not once a record).
    fn record(&mut self, tenant: &str, index: u64, start: Timestamp) {
        match self.records.get_mut(tenant) {
            Some(rs) => rs.push((index, start)),
            None => {
                self.records.insert(tenant.to_owned(), vec![(index, start)]);
            }
        }
    }

    /// The dispute rules for an entry about to be admitted (after every entry below it was
    /// applied).
    pub fn check(&self, body: &Body) -> Result<(), Rejection> {
        let Body::RecordExcluded(x) = body else {
            return Ok(());
        };
        let excluded_at = self.excluded.get(&x.entry).copied();
        if !self.whole_log {
            return check_not_excluded(x, excluded_at);
        }
        let record = self.records.get(&x.tenant).and_then(|rs| {
            rs.binary_search_by_key(&x.entry, |(i, _)| *i)
                .ok()
                .map(|at| NamedRecord {
                    tenant: &x.tenant,
                    start: rs[at].1,
                })
        });
        let invoices = self.invoices.get(&x.tenant).map_or(&[][..], Vec::as_slice);
        check_exclusion(x, excluded_at, record, invoices)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Energy, GpuUsage, InvoiceIssued};
    use rust_decimal::Decimal;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_unix(1_800_000_000 + s).unwrap()
    }

    fn usage(tenant: &str, start: i64) -> Body {
        Body::GpuUsage(GpuUsage {
            tenant: tenant.into(),
            lease: Some("L".into()),
            region: "west".into(),
            node: "n1".into(),
            gpu_model: "H100".into(),
            gpu_count: Decimal::ONE,
            start: t(start),
            end: t(start + 60),
            gpu_seconds: Decimal::from(60),
        })
    }

    fn exclude(tenant: &str, entry: u64) -> Body {
        Body::RecordExcluded(RecordExcluded {
            tenant: tenant.into(),
            entry,
            reason: "double-counted".into(),
        })
    }

    fn invoice(tenant: &str, from: i64, to: i64, size: u64) -> Body {
        Body::InvoiceIssued(InvoiceIssued {
            number: "INV-000001".into(),
            tenant: tenant.into(),
            period_from: t(from),
            period_to: t(to),
            currency: "CNY".into(),
            total: Decimal::ONE,
            checkpoint_size: size,
            invoice_sha256: "0".repeat(64),
        })
    }

    fn verdict(d: &Disputes, body: &Body) -> Option<Reason> {
        d.check(body).err().map(|r| r.reason)
    }

    /// Each rule refuses with its reason; an exclusion of an invoiced record is refused, of a
    /// late record not yet invoiced accepted, and a bundle checks only what needs no record.
    #[test]
    fn exclusions_name_uninvoiced_records_of_their_tenant_once() {
        let mut d = Disputes::whole_log();
        // 0: acme in hour 0; 1: beta in hour 0; 2: acme's energy in hour 1; 3: unattributed energy.
        d.apply(0, &usage("acme", 0));
        d.apply(1, &usage("beta", 0));
        d.apply(
            2,
            &Body::Energy(Energy {
                tenant: Some("acme".into()),
                region: "west".into(),
                node: "n1".into(),
                start: t(3_600),
                end: t(3_660),
                kwh: Decimal::ONE,
            }),
        );
        d.apply(
            3,
            &Body::Energy(Energy {
                tenant: None,
                region: "west".into(),
                node: "n1".into(),
                start: t(3_600),
                end: t(3_660),
                kwh: Decimal::ONE,
            }),
        );
        assert_eq!(verdict(&d, &exclude("acme", 0)), None);
        assert_eq!(verdict(&d, &exclude("acme", 2)), None, "a tenant's energy");
        assert_eq!(
            verdict(&d, &exclude("acme", 1)),
            Some(Reason::UnknownRecord),
            "another tenant's record"
        );
        assert_eq!(
            verdict(&d, &exclude("acme", 3)),
            Some(Reason::UnknownRecord),
            "energy of no tenant"
        );
        assert_eq!(
            verdict(&d, &exclude("acme", 9)),
            Some(Reason::UnknownRecord),
            "no entry"
        );
        d.apply(4, &exclude("acme", 0));
        assert_eq!(
            verdict(&d, &exclude("acme", 0)),
            Some(Reason::AlreadyExcluded)
        );
        // Hour 0 invoiced at size 6: record 2 (hour 1) is not in its period; then a late
        // record of hour 0 (index 7) is excludable until an invoice computed after it exists.
        d.apply(5, &invoice("acme", 0, 3_600, 6));
        assert_eq!(verdict(&d, &exclude("acme", 2)), None, "outside the period");
        assert_eq!(
            verdict(&d, &exclude("beta", 1)),
            None,
            "beta's own invoices"
        );
        d.apply(7, &usage("acme", 60));
        assert_eq!(
            verdict(&d, &exclude("acme", 7)),
            None,
            "late, not yet invoiced"
        );
        d.apply(8, &invoice("acme", 3_600, 7_200, 9));
        assert_eq!(
            verdict(&d, &exclude("acme", 7)),
            Some(Reason::RecordInvoiced),
            "late, rated by the next invoice"
        );
        assert_eq!(
            verdict(&d, &exclude("acme", 2)),
            Some(Reason::RecordInvoiced)
        );
        // A bundle sees no record before its exclusions: only `already_excluded` applies.
        let mut b = Disputes::bundle();
        assert_eq!(verdict(&b, &exclude("acme", 9)), None);
        b.apply(4, &exclude("acme", 0));
        assert_eq!(
            verdict(&b, &exclude("acme", 0)),
            Some(Reason::AlreadyExcluded)
        );
    }
}
