//! Usage alerts (docs/WEBHOOKS.md, `spend.threshold` and `commitment.reached`): the
//! thresholds of a tenant's account ([`crate::access::UsageAlerts`]) that its usage so far has
//! crossed, found from the same preview `GET /v1/invoices/preview` shows
//! ([`crate::invoices::preview_period`]), as webhook events named by their crossing, so each
//! is enqueued once however often the run finds it ([`crate::webhooks::enqueue`]'s dedupe).
//!
//! - **Spend**: per currency, the preview total (gross) of the calendar month (UTC) so far;
//!   each threshold at or below it has been crossed this month.
//! - **Commitment**: per contract with a commitment, the billing period (clipped to the term)
//!   the run's clock is in: *drawn* so far (`core::invoice::drawn`, as the period's invoice
//!   will count it) against its commitment (prorated as on the invoice); each percentage of the
//!   commitment at or below it has been reached.

use crate::access::{self, UsageAlerts};
use crate::conn::DbConn;
use crate::error::StoreError;
use crate::invoices::{preview_period, InvoiceSettings};
use crate::read;
use crate::webhooks::{Event, EventType};
use gpuledger_core::contract::billing_periods;
use gpuledger_core::invoice::{drawn, Period};
use gpuledger_core::record::ContractRegistered;
use gpuledger_core::time::Timestamp;
use gpuledger_core::usage::Window;
use rust_decimal::Decimal;
use serde_json::{json, Map, Value};

/// The calendar month (UTC) that holds `now`, up to `now`, and the month's end.
pub fn month_so_far(now: Timestamp) -> Option<(Period, Timestamp)> {
    let from = Window::Month.start_of(now);
    // 32 days after the first of a month is inside the next one.
    let end = Window::Month.start_of(from.plus(32 * 86_400));
    (from <= now && now < end).then_some((Period { from, to: now }, end))
}

fn data(pairs: Vec<(&str, Value)>) -> Map<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// The spend events of `tenant` at `now` (log size `size`): each threshold of `alerts.spend`
/// that the calendar month's preview total so far, in its currency, has reached.
fn spend_crossings(
    conn: &mut DbConn,
    tenant: &str,
    alerts: &UsageAlerts,
    now: Timestamp,
    size: u64,
    settings: &InvoiceSettings,
) -> Result<Vec<Event>, StoreError> {
    let Some((month, end)) = month_so_far(now).filter(|_| !alerts.spend.is_empty()) else {
        return Ok(Vec::new());
    };
    let preview = preview_period(conn, tenant, month, size, &settings.taxes)?;
    let mut out = Vec::new();
    for (currency, p) in &preview.currencies {
        let spent = p.totals.gross;
        for threshold in alerts.spend.get(currency).into_iter().flatten() {
            if spent < *threshold {
                break;
            }
            out.push(Event {
                kind: EventType::SpendThreshold,
                tenant: Some(tenant.to_owned()),
                log_index: None,
                dedupe: format!("spend:{tenant}:{currency}:{}:{threshold}", month.from),
                data: data(vec![
                    ("currency", json!(currency)),
                    (
                        "month",
                        json!({"from": month.from.to_string(), "to": end.to_string()}),
                    ),
                    ("threshold", json!(threshold.to_string())),
                    ("spend", json!(spent.to_string())),
                    ("as_of", json!(now.to_string())),
                    ("log_size", json!(size)),
                ]),
            });
        }
    }
    Ok(out)
}

/// The commitment events of contract `c` at `now` (log size `size`): each of `percents` of the
/// commitment of the billing period holding `now` that its draw-down so far has reached.
fn commitment_crossings(
    conn: &mut DbConn,
    c: &ContractRegistered,
    percents: &[Decimal],
    now: Timestamp,
    size: u64,
    settings: &InvoiceSettings,
) -> Result<Vec<Event>, StoreError> {
    let Some(commitment) = c.commitment else {
        return Ok(Vec::new());
    };
    let Some(span) = billing_periods(c)
        .into_iter()
        .find(|s| s.from <= now && now < s.to)
    else {
        return Ok(Vec::new());
    };
    let so_far = Period {
        from: span.from,
        to: now,
    };
    let preview = preview_period(conn, &c.tenant, so_far, size, &settings.taxes)?;
    let lines = preview
        .currencies
        .iter()
        .filter(|(currency, _)| *currency == c.currency)
        .flat_map(|(_, p)| &p.lines);
    let drawn = drawn(lines, &c.currency);
    let committed = span.prorate(commitment, &c.currency);
    let mut out = Vec::new();
    for p in percents {
        if drawn < committed * *p / Decimal::ONE_HUNDRED {
            break;
        }
        out.push(Event {
            kind: EventType::CommitmentReached,
            tenant: Some(c.tenant.clone()),
            log_index: None,
            dedupe: format!("commitment:{}:{}:{}", c.contract, span.from, p.normalize()),
            data: data(vec![
                ("contract", json!(c.contract)),
                (
                    "period",
                    json!({"from": span.from.to_string(), "to": span.to.to_string()}),
                ),
                ("currency", json!(c.currency)),
                ("percent", json!(p.normalize().to_string())),
                ("committed", json!(committed.to_string())),
                ("drawn", json!(drawn.to_string())),
                ("as_of", json!(now.to_string())),
                ("log_size", json!(size)),
            ]),
        });
    }
    Ok(out)
}

/// Every usage alert crossed at `now`, at the log's current size, for every tenant account:
/// its spend thresholds, and the commitment percentages of its contracts with a commitment.
/// The caller enqueues them (each once: the dedupe names the crossing).
pub fn crossings(
    conn: &mut DbConn,
    now: Timestamp,
    settings: &InvoiceSettings,
) -> Result<Vec<Event>, StoreError> {
    let size = read::head(conn)?.0;
    let mut out = Vec::new();
    for (tenant, alerts) in access::all_usage_alerts(conn)? {
        out.extend(spend_crossings(
            conn, &tenant, &alerts, now, size, settings,
        )?);
        let percents = alerts.commitment_percents();
        for c in read::contracts(conn, &tenant, size)? {
            out.extend(commitment_crossings(
                conn, &c, &percents, now, size, settings,
            )?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_month_so_far_runs_from_its_first_to_now_and_ends_at_the_next() {
        let t = |s: &str| Timestamp::parse(s).unwrap();
        for (now, from, end) in [
            (
                "2026-12-07T22:39:23Z",
                "2026-12-01T00:00:00Z",
                "2027-01-01T00:00:00Z",
            ),
            (
                "2028-02-29T23:59:59Z",
                "2028-02-01T00:00:00Z",
                "2028-03-01T00:00:00Z",
            ),
            (
                "2027-01-01T00:00:00Z",
                "2027-01-01T00:00:00Z",
                "2027-02-01T00:00:00Z",
            ),
        ] {
            let (p, e) = month_so_far(t(now)).unwrap();
            assert_eq!((p.from, p.to, e), (t(from), t(now), t(end)), "{now}");
        }
    }
}
