//! Issuing invoices, settling them, and balances. An invoice is computed at a log size S (a
//! checkpoint of S is signed in the same transaction), rated with the prices of the log as of S,
//! recorded as an `invoice_issued` entry holding its SHA-256, and kept as rendered JSON for
//! download. Records that arrive after a period was invoiced become adjustment lines of the
//! tenant's next invoice, naming the period they belong to; in a graduated (volume-tiered)
//! series they continue the period's count after the GPU-seconds already invoiced.

use super::conn::DbConn;
use super::error::StoreError;
use super::schema::{entries, invoices};
use super::write::{checkpoint_locked, push_ledger_entry, Appender};
use super::{pricing, usage};
use crate::core::canonical;
use crate::core::checkpoint::LogSigner;
use crate::core::invoice::{record_start, Invoice, InvoiceRating, InvoiceScope, Period, Rated};
use crate::core::leaf::Leaf;
use crate::core::rating;
use crate::core::record::{Body, InvoiceIssued, Kind};
use crate::core::time::Timestamp;
use diesel::prelude::*;
use rust_decimal::Decimal;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// An invoice already issued to a tenant, as its row holds it.
struct Issued {
    period: Period,
    checkpoint_size: u64,
}

fn issued_for(conn: &mut DbConn, tenant: &str) -> Result<Vec<(String, Issued)>, StoreError> {
    let rows: Vec<(String, i64, i64, i64)> = invoices::table
        .filter(invoices::tenant.eq(tenant))
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
    let value = serde_json::to_value(invoice)
        .map_err(|e| StoreError::Corrupt(format!("invoice json: {e}")))?;
    let bytes =
        canonical::to_vec(&value).map_err(|e| StoreError::Corrupt(format!("invoice json: {e}")))?;
    let hash = hex::encode(Sha256::digest(&bytes));
    Ok((String::from_utf8(bytes).expect("JSON is UTF-8"), hash))
}

/// The scope of a new invoice of `tenant` for `period`: refused when an earlier invoice covers
/// part of the period.
fn new_scope(conn: &mut DbConn, tenant: &str, period: Period) -> Result<InvoiceScope, StoreError> {
    let previous = issued_for(conn, tenant)?;
    if let Some((n, _)) = previous.iter().find(|(_, i)| i.period.overlaps(&period)) {
        return Err(StoreError::AlreadyExists(format!(
            "invoice {n} of {tenant} already covers part of [{}, {})",
            period.from, period.to
        )));
    }
    Ok(InvoiceScope::new(
        period,
        previous.iter().map(|(_, i)| (i.period, i.checkpoint_size)),
    ))
}

/// Rates the tenant's records below log size `size` where `scope` places them
/// ([`InvoiceRating`], the rule the verifier recomputes by), with the prices of the log as of
/// `size`; refused when any of them is unpriced.
fn rate(
    conn: &mut DbConn,
    tenant: &str,
    scope: InvoiceScope,
    size: u64,
) -> Result<Rated, StoreError> {
    let book = pricing::price_book(conn, size)?;
    let mut rating = InvoiceRating::new(scope);
    usage::for_each_usage_in(conn, Some(tenant), 0..size, &mut |idx, body| {
        rating.add(&book, idx, body);
    })?;
    let rated = rating.finish();
    if let Some((p, unpriced)) = rated.unpriced.first() {
        let what = if p.is_some() {
            "a late record of an earlier period"
        } else {
            "the period"
        };
        return Err(unpriced_error(unpriced, what));
    }
    Ok(rated)
}

/// Issues the invoices (one per currency) of `tenant` for `[from, to)`; see the module docs.
pub(crate) fn issue(
    conn: &mut DbConn,
    log: &LogSigner,
    tenant: &str,
    period: Period,
    now: Timestamp,
) -> Result<Vec<Invoice>, StoreError> {
    conn.transaction(|conn| {
        let mut app = Appender::lock(conn, now)?;
        let size = app.next_index();
        let scope = new_scope(conn, tenant, period)?;
        let Rated {
            mut lines,
            mut adjustments,
            ..
        } = rate(conn, tenant, scope, size)?;
        let mut currencies: Vec<String> = lines.keys().chain(adjustments.keys()).cloned().collect();
        currencies.sort();
        currencies.dedup();
        if currencies.is_empty() {
            return Err(StoreError::Refused(format!(
                "{tenant} has no usage in [{}, {}) and no late records to adjust; nothing to invoice",
                period.from, period.to
            )));
        }
        checkpoint_locked(conn, log, size, now)?;
        let root = crate::core::merkle::tree_hash(size, &super::read::DbHashReader::new(conn))?;
        let count: i64 = invoices::table.count().get_result(conn)?;
        let mut out = Vec::new();
        for (i, currency) in currencies.into_iter().enumerate() {
            let mut l = lines.remove(&currency).unwrap_or_default();
            l.extend(adjustments.remove(&currency).unwrap_or_default());
            let total: Decimal = l.iter().map(|l| l.amount).sum();
            let invoice = Invoice {
                number: format!("INV-{:06}", count as usize + i + 1),
                tenant: tenant.to_owned(),
                period,
                currency,
                issued_at: now,
                log_origin: log.origin().to_owned(),
                checkpoint_size: size,
                checkpoint_root: crate::core::merkle::encode_hash(&root),
                lines: l,
                total,
            };
            assert_eq!(invoice.total, invoice.sum_of_lines(), "total equals the sum of its lines");
            record_invoice(conn, &mut app, log, &invoice)?;
            out.push(invoice);
        }
        app.finish(conn)?;
        Ok(out)
    })
}

/// Appends an issued invoice's `invoice_issued` entry (with its SHA-256) and keeps its JSON.
fn record_invoice(
    conn: &mut DbConn,
    app: &mut Appender,
    log: &LogSigner,
    invoice: &Invoice,
) -> Result<(), StoreError> {
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
    Ok(())
}

/// Records a payment or credit note against an invoice of the same tenant and currency.
/// A credit note may not take an invoice's credited sum above its total.
pub(crate) fn settle(
    conn: &mut DbConn,
    log: &LogSigner,
    body: &Body,
    now: Timestamp,
) -> Result<u64, StoreError> {
    let s = match body {
        Body::Payment(s) | Body::CreditNote(s) => s,
        _ => return Err(StoreError::Refused("not a payment or credit note".into())),
    };
    conn.transaction(|conn| {
        let mut app = Appender::lock(conn, now)?;
        let row: Option<(String, String)> = invoices::table
            .find(&s.invoice)
            .select((invoices::tenant, invoices::currency))
            .first(conn)
            .optional()?;
        match row {
            Some((t, _)) if t != s.tenant => {
                return Err(StoreError::NotFound(format!(
                    "invoice {} of {}",
                    s.invoice, s.tenant
                )))
            }
            None => return Err(StoreError::NotFound(format!("invoice {}", s.invoice))),
            Some((_, c)) if c != s.currency => {
                return Err(StoreError::Refused(format!(
                    "invoice {} is in {c}, not {}",
                    s.invoice, s.currency
                )))
            }
            Some(_) => {}
        }
        if let Body::CreditNote(_) = body {
            let b = balances(conn, &s.tenant)?;
            let inv = invoice_entry(conn, &s.invoice)?;
            let credited = b
                .credited_by_invoice
                .get(&s.invoice)
                .copied()
                .unwrap_or_default();
            if credited + s.amount > inv.total {
                return Err(StoreError::Refused(format!(
                    "credit notes on {} would total {}, above its total {}",
                    s.invoice,
                    credited + s.amount,
                    inv.total
                )));
            }
        }
        let idx = push_ledger_entry(conn, &mut app, log, body)?;
        app.finish(conn)?;
        Ok(idx)
    })
}

fn invoice_entry(conn: &mut DbConn, number: &str) -> Result<InvoiceIssued, StoreError> {
    let idx: i64 = invoices::table
        .find(number)
        .select(invoices::entry_idx)
        .first(conn)?;
    match body_at(conn, idx)? {
        Body::InvoiceIssued(i) => Ok(i),
        _ => Err(StoreError::Corrupt(format!(
            "entry {idx} is not invoice {number}"
        ))),
    }
}

fn body_at(conn: &mut DbConn, idx: i64) -> Result<Body, StoreError> {
    let bytes: Vec<u8> = entries::table.find(idx).select(entries::leaf).first(conn)?;
    let leaf =
        Leaf::from_bytes(&bytes).map_err(|e| StoreError::Corrupt(format!("entry {idx}: {e}")))?;
    let kind = Kind::parse(&leaf.envelope.kind)
        .ok_or_else(|| StoreError::Corrupt(format!("entry {idx}: kind")))?;
    Body::from_value(kind, &leaf.envelope.body)
        .map_err(|r| StoreError::Corrupt(format!("entry {idx}: {r}")))
}

/// A tenant's position in one currency, derived from the log's invoice, payment and credit-note
/// entries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Balance {
    #[schema(value_type = String)]
    pub invoiced: Decimal,
    #[schema(value_type = String)]
    pub paid: Decimal,
    #[schema(value_type = String)]
    pub credited: Decimal,
    /// invoiced − paid − credited: what the tenant owes (negative: in credit).
    #[schema(value_type = String)]
    pub due: Decimal,
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
    let idxs: Vec<i64> = entries::table
        .filter(entries::tenant.eq(tenant))
        .filter(entries::kind.eq_any(kinds))
        .order(entries::idx.asc())
        .select(entries::idx)
        .load(conn)?;
    let mut out = Balances::default();
    for idx in idxs {
        match body_at(conn, idx)? {
            Body::InvoiceIssued(i) => {
                out.by_currency.entry(i.currency).or_default().invoiced += i.total
            }
            Body::Payment(p) => out.by_currency.entry(p.currency).or_default().paid += p.amount,
            Body::CreditNote(c) => {
                out.by_currency.entry(c.currency).or_default().credited += c.amount;
                *out.credited_by_invoice.entry(c.invoice).or_default() += c.amount;
            }
            _ => {}
        }
    }
    for b in out.by_currency.values_mut() {
        b.due = b.invoiced - b.paid - b.credited;
    }
    Ok(out)
}

/// A listed invoice.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct InvoiceSummary {
    pub number: String,
    pub tenant: String,
    pub currency: String,
    pub period_from: String,
    pub period_to: String,
    pub entry_index: u64,
}

/// Invoices, of one tenant or all, oldest first.
pub fn list(conn: &mut DbConn, tenant: Option<&str>) -> Result<Vec<InvoiceSummary>, StoreError> {
    let mut q = invoices::table
        .select((
            invoices::number,
            invoices::tenant,
            invoices::currency,
            invoices::period_from,
            invoices::period_to,
            invoices::entry_idx,
        ))
        .order(invoices::number.asc())
        .into_boxed();
    if let Some(t) = tenant {
        q = q.filter(invoices::tenant.eq(t));
    }
    let rows: Vec<(String, String, String, i64, i64, i64)> = q.load(conn)?;
    let ts = |x: i64| {
        Timestamp::from_unix(x)
            .map(|t| t.to_string())
            .unwrap_or_default()
    };
    Ok(rows
        .into_iter()
        .map(|(number, tenant, currency, f, t, i)| InvoiceSummary {
            number,
            tenant,
            currency,
            period_from: ts(f),
            period_to: ts(t),
            entry_index: i as u64,
        })
        .collect())
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
pub fn write_invoice_bundle(
    conn: &mut DbConn,
    invoice: &Invoice,
    sink: &mut super::bundle::Sink,
) -> Result<(), StoreError> {
    use super::bundle::write_entries;
    use super::schema::checkpoints;
    use crate::core::bundle::{self, BundleSubject, Header};
    let size = invoice.checkpoint_size;
    let note: String = checkpoints::table
        .find(size as i64)
        .select(checkpoints::note)
        .first(conn)
        .optional()?
        .ok_or_else(|| StoreError::Corrupt(format!("no checkpoint of size {size} is stored")))?;
    let scope = InvoiceScope::new(
        invoice.period,
        issued_for(conn, &invoice.tenant)?
            .into_iter()
            .filter(|(_, i)| i.checkpoint_size < size)
            .map(|(_, i)| (i.period, i.checkpoint_size)),
    );
    let tiered: i64 = entries::table
        .filter(entries::kind.eq(Kind::VolumeTiers.as_str()))
        .filter(entries::idx.lt(size as i64))
        .count()
        .get_result(conn)?;
    let header = Header::new(
        &invoice.log_origin,
        &note,
        BundleSubject::Invoice(invoice.number.clone()),
    );
    sink(bundle::header_line(&header))?;
    let tenant = invoice.tenant.as_str();
    let mut n = super::bundle::Context::new(conn, tenant, size, true)?.write(conn, size, sink)?;
    n += write_entries(
        conn,
        &[Kind::GpuUsage, Kind::Energy],
        Some(tenant),
        size,
        &mut |idx, b| record_start(b).is_some_and(|start| scope.in_bundle(idx, start, tiered > 0)),
        sink,
    )?;
    sink(bundle::end_line(n))
}
