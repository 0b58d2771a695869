//! Prices read from the log: rate cards, region parameters, lease classes, spot prices, volume
//! tiers and tenant plans, all as entries, so every amount can be recomputed from the log alone.

use super::conn::DbConn;
use super::error::StoreError;
use crate::core::rating::{PriceBook, Rater};
use crate::core::record::{Body, Kind};
use crate::core::time::Timestamp;

/// The kinds that carry prices or billing classes.
pub const PRICING_KINDS: [Kind; 6] = [
    Kind::RateCard,
    Kind::RegionParams,
    Kind::LeaseRegistered,
    Kind::SpotPrice,
    Kind::VolumeTiers,
    Kind::TenantPlan,
];

/// Every pricing entry below log size `size`, in log order, as (index, body).
pub fn pricing_entries(conn: &mut DbConn, size: u64) -> Result<Vec<(u64, Body)>, StoreError> {
    super::read::bodies_of(conn, &PRICING_KINDS, size)
}

/// The price book of the log as of size `size`.
pub fn price_book(conn: &mut DbConn, size: u64) -> Result<PriceBook, StoreError> {
    let mut book = PriceBook::default();
    for (_, body) in pricing_entries(conn, size)? {
        book.add_entry(&body);
    }
    Ok(book)
}

/// Rates a tenant's usage and energy records whose intervals start in `[from, to)`, with the
/// prices of the log as of size `size` (and the plan and volume tiers in force at `from`).
pub fn rate_period(
    conn: &mut DbConn,
    tenant: &str,
    from: Timestamp,
    to: Timestamp,
    size: u64,
) -> Result<Rater, StoreError> {
    // The tenant-month's records through the start index (`store::invoices::preview`), not
    // the tenant's whole history.
    super::invoices::preview(
        conn,
        tenant,
        crate::core::invoice::Period { from, to },
        size,
    )
}
