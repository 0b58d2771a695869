//! Prepaid balances as the database holds them (docs/RATING.md, "Prepaid balances"): a
//! tenant's `prepayment` entries and its `invoice_issued` entries, folded by
//! `core::prepaid::PrepaidBook`, the rule's one place. Nothing here is stored apart from the
//! log: every figure is recomputed from those entries.

use super::conn::DbConn;
use super::error::StoreError;
use super::schema::entries;
use diesel::prelude::*;
use gpuledger_core::prepaid::PrepaidBook;
use gpuledger_core::record::Kind;
use gpuledger_core::time::Timestamp;

/// The prepaid lots of `tenant` (or of every tenant) logged below `size`, with what the
/// invoices logged below `size` drew from them. A tenant without lots costs one read of an
/// index: its invoices are read only when it has lots.
pub fn book(conn: &mut DbConn, tenant: Option<&str>, size: u64) -> Result<PrepaidBook, StoreError> {
    let size = size.min(i64::MAX as u64) as i64;
    let lots = |conn: &mut DbConn| {
        let mut q = entries::table
            .filter(entries::kind.eq(Kind::Prepayment.as_str()))
            .filter(entries::idx.lt(size))
            .select(entries::idx)
            .into_boxed();
        if let Some(t) = tenant {
            q = q.filter(entries::tenant.eq(t));
        }
        q.first::<i64>(conn).optional()
    };
    let mut book = PrepaidBook::default();
    if lots(conn)?.is_none() {
        return Ok(book);
    }
    let kinds = [Kind::Prepayment.as_str(), Kind::InvoiceIssued.as_str()];
    let mut q = entries::table
        .filter(entries::kind.eq_any(kinds))
        .filter(entries::idx.lt(size))
        .select((entries::idx, entries::received_at, entries::leaf))
        .into_boxed();
    if let Some(t) = tenant {
        q = q.filter(super::read::tenant_ledger_entries(t));
    }
    let mut rows = q.load::<(i64, i64, Vec<u8>)>(conn)?;
    rows.sort_unstable_by_key(|(i, _, _)| *i);
    for (i, at, leaf) in rows {
        let at = Timestamp::from_unix(at)
            .ok_or_else(|| StoreError::Corrupt(format!("entry {i}: received_at {at}")))?;
        book.apply(i as u64, at, &super::usage::parse_body(i, &leaf)?);
    }
    Ok(book)
}
