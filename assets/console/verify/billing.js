// A contract's billing periods (docs/RATING.md, "Billing periods"; crates/core/src/contract.rs
// `billing_periods`): its term cut at every boundary of its billing period, the first and last
// clipped to the term. Calendar boundaries are 00:00:00 UTC on the first day of a month
// (`month`), of January, April, July and October (`quarter`), of January (`year`);
// anniversary boundaries are `term_from` plus k × 1, 3 or 12 months, the day clamped to the
// last day of a shorter month, the time of day kept, every boundary counted from the first
// (31 January, then 28 or 29 February, then 31 March). All instants are seconds since the
// epoch, within the protocol's range (§2.2: 2000-01-01T00:00:00Z to 9999-12-31T23:59:59Z).
//
// Used by admission.js for a `contract_amended` entry's `price_in_invoiced_period` rule (the
// billing period the change begins in, §6.7).

/** `MIN_UNIX` (time.rs): 2000-01-01T00:00:00Z, the earliest timestamp. */
export const MIN_UNIX = 946684800;
/** `MAX_UNIX` (time.rs): 9999-12-31T23:59:59Z, the latest timestamp. */
export const MAX_UNIX = 253402300799;
/** The months of each billing period (record/contract.rs `BillingPeriod::months`). */
export const PERIOD_MONTHS = { month: 1, quarter: 3, year: 12 };

const leap = (y) => (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;
const DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
/** The days of month `m` (1 to 12) of year `y`. */
const monthLength = (y, m) => (m === 2 && leap(y) ? 29 : DAYS_IN_MONTH[m - 1]);

/** A timestamp in range, or null (time.rs `Timestamp::from_unix`). */
const inRange = (s) => (s >= MIN_UNIX && s <= MAX_UNIX ? s : null);

/** The UTC calendar date and time of day of `t` (seconds). */
function civil(t) {
  const d = new Date(t * 1000);
  return { y: d.getUTCFullYear(), m: d.getUTCMonth() + 1, d: d.getUTCDate(), tod: ((t % 86400) + 86400) % 86400 };
}

/** Seconds since the epoch of 00:00:00 UTC on `y`-`m`-`d` (y ≥ 100). */
const midnight = (y, m, d) => Date.UTC(y, m - 1, d) / 1000;

/**
 * `t` moved by `months` calendar months, the day clamped to the last day of a shorter month,
 * the time of day kept (contract.rs `add_months`); null past year 9999.
 */
export function addMonths(t, months) {
  const at = civil(t);
  const index = at.y * 12 + at.m - 1 + months;
  const y = Math.floor(index / 12);
  const m = (index % 12) + 1;
  if (y > 9999) return null;
  return inRange(midnight(y, m, Math.min(at.d, monthLength(y, m))) + at.tod);
}

/**
 * The first calendar boundary at or before `t` for periods of `months` months: 00:00 UTC on the
 * first day of a month whose index from January is a multiple of `months` (contract.rs
 * `calendar_start`).
 */
export function calendarStart(t, months) {
  const at = civil(t);
  return inRange(midnight(at.y, Math.floor((at.m - 1) / months) * months + 1, 1));
}

/**
 * The billing periods of a term [`from`, `to`) (seconds) cut by `period` (`month`, `quarter`,
 * `year`) with `anchor` (`calendar`, `anniversary`), in order: [{from, to, fullFrom, fullTo}],
 * `from`/`to` the period clipped to the term, `fullFrom`/`fullTo` the whole period as the
 * calendar or the anniversary cuts it. A boundary past year 9999 ends the last period at the
 * term's end. An unknown period or anchor has none.
 */
export function billingPeriods(from, to, period, anchor) {
  const months = PERIOD_MONTHS[period];
  if (!months || (anchor !== 'calendar' && anchor !== 'anniversary')) return [];
  const first = anchor === 'calendar' ? calendarStart(from, months) : from;
  if (first === null) return [];
  const out = [];
  let fullFrom = first;
  for (let k = 1; ; k++) {
    const fullTo = addMonths(first, k * months) ?? Math.max(to, Math.min(fullFrom + 1, MAX_UNIX));
    const f = Math.max(fullFrom, from);
    const t = Math.min(fullTo, to);
    if (f < t) out.push({ from: f, to: t, fullFrom, fullTo });
    if (fullTo >= to) break;
    fullFrom = fullTo;
  }
  return out;
}
