// An invoice's contract lines (docs/RATING.md, "Contracts", "SLA credits", "Included GPU-hours
// and overage"), mirroring crates/core/src/contract.rs (`charges`, `Contracts`),
// crates/core/src/allowance.rs (`Metering`, `judge`, `late`), crates/core/src/sla.rs
// (`Presence`, `judge`) and crates/core/src/invoice/contract_lines.rs (`contract_lines`,
// `drawn`). Exact decimals throughout (decimal.js); instants in seconds since the epoch.

import { Dec } from './decimal.js';
import { billingPeriods } from './billing.js';
import { minorUnits } from './leaf.js';
import { unixOf, roundAmount, byteOrder, numOrder, periodOrder } from './rating.js';

const ONE = Dec.int(1);
const HUNDRED = Dec.int(100);
const SECONDS_PER_HOUR = Dec.int(3600);
/** contract_lines.rs `PERIOD_SHARE_DECIMALS`. */
export const PERIOD_SHARE_DECIMALS = 6;
/** allowance.rs `ALLOWANCE_DECIMALS`. */
export const ALLOWANCE_DECIMALS = 6;
/** sla.rs `AVAILABILITY_DECIMALS` (truncated). */
export const AVAILABILITY_DECIMALS = 4;
/** invoice.rs `GPU_HOURS_DECIMALS`. */
export const GPU_HOURS_DECIMALS = 6;

/** `num` ÷ `den` rounded half-even once to the currency's minor unit (the one rounding rule). */
const roundQuotient = (num, den, currency) => Dec.quotient(num, den, minorUnits(currency));

/** invoice.rs `gpu_hours`: GPU-seconds in GPU-hours, half-even to 6 places. */
export const gpuHours = (seconds) => Dec.quotient(seconds, SECONDS_PER_HOUR, GPU_HOURS_DECIMALS);

/** A `contract_registered` body with its numbers and instants parsed. */
export function contractOf(b) {
  return {
    tenant: b.tenant,
    contract: b.contract,
    currency: b.currency,
    region: b.region,
    termFrom: unixOf(b.term_from),
    termTo: unixOf(b.term_to),
    billingPeriod: b.billing_period,
    billingAnchor: b.billing_anchor,
    fees: (b.fees ?? []).map((f) => ({
      name: f.name,
      amount: Dec.parse(f.amount),
      timing: f.timing,
      category: f.category,
      lease: f.lease,
      included: (f.included ?? []).map((e) => ({ gpuModel: e.gpu_model, gpuHours: Dec.parse(e.gpu_hours), overageRate: Dec.parse(e.overage_rate) })),
    })),
    commitment: b.commitment === undefined ? null : Dec.parse(b.commitment),
    sla: b.sla
      ? { target: Dec.parse(b.sla.target), credits: b.sla.credits.map((s) => ({ below: Dec.parse(s.below), percent: Dec.parse(s.percent) })) }
      : null,
  };
}

/**
 * contract.rs `Contracts`: the contracts of the entries given in log order, each with the term
 * of its latest `contract_amended` entry of the same tenant.
 */
export class Contracts {
  constructor() {
    this.list = [];
    this.at = new Map();
  }

  /** `Contracts::apply`. */
  apply(kind, b) {
    if (kind === 'contract_registered' && !this.at.has(b.contract)) {
      this.at.set(b.contract, this.list.length);
      this.list.push(contractOf(b));
    } else if (kind === 'contract_amended' && this.at.has(b.contract)) {
      const c = this.list[this.at.get(b.contract)];
      if (c.tenant === b.tenant) c.termTo = unixOf(b.term_to);
    }
  }

  all() {
    return this.list;
  }
}

/** contract.rs `billing_periods` (billing.js): [{from, to, fullFrom, fullTo}]. */
export const spansOf = (c) => billingPeriods(c.termFrom, c.termTo, c.billingPeriod, c.billingAnchor);
/** `BillingSpan::share`: used ÷ full seconds, exact to 28 places (as rust_decimal divides). */
const shareOf = (s, places) => Dec.quotient(Dec.int(s.to - s.from), Dec.int(s.fullTo - s.fullFrom), places);
/** `BillingSpan::prorate`: amount × used ÷ full, rounded half-even once to the minor unit. */
export const prorate = (s, amount, currency) => roundQuotient(amount.mul(Dec.int(s.to - s.from)), Dec.int(s.fullTo - s.fullFrom), currency);
const periodOfSpan = (s) => ({ from: s.from, to: s.to });
const overlaps = (a, b) => a.from < b.to && b.from < a.to;

/** contract.rs `judged_whole`: a commitment, an SLA or included GPU-hours. */
const judgedWhole = (c) => c.commitment !== null || c.sla !== null || c.fees.some((f) => f.included.length > 0);

/**
 * contract.rs `charges`: the fees (`once` first, then per billing period and fee) and the
 * commitment that an invoice of [from, to) bills, and the first billing period it splits.
 * Fee charges: {fee, from, to, share (6 places, half-even), net}.
 */
export function charges(c, from, to) {
  const contains = (t) => from <= t && t < to;
  const out = { fees: [], committed: null, split: null };
  c.fees.forEach((f, i) => {
    if (f.timing === 'once' && contains(c.termFrom)) {
      out.fees.push({ fee: i, from: c.termFrom, to: c.termTo, share: ONE, net: roundAmount(f.amount, c.currency) });
    }
  });
  if (to <= c.termFrom || c.termTo <= from) return out;
  for (const span of spansOf(c)) {
    if (span.to <= from || to <= span.from) continue;
    c.fees.forEach((f, i) => {
      if (f.timing === 'once') return;
      const anchor = f.timing === 'advance' ? span.from : span.to - 1;
      if (contains(anchor)) {
        out.fees.push({ fee: i, from: span.from, to: span.to, share: shareOf(span, PERIOD_SHARE_DECIMALS), net: prorate(span, f.amount, c.currency) });
      }
    });
    const whole = from <= span.from && span.to <= to;
    if (c.commitment !== null && whole) {
      const part = prorate(span, c.commitment, c.currency);
      out.committed = out.committed === null ? part : out.committed.add(part);
    }
    if (!whole && judgedWhole(c) && out.split === null) out.split = span;
  }
  return out;
}

/** sla.rs `span_at`: the place in `spans` (sorted by start, apart) of the one holding `t`. */
function spanAt(spans, t) {
  let i = -1;
  while (i + 1 < spans.length && spans[i + 1].period.from <= t) i++;
  return i >= 0 && t < spans[i].period.to ? i : -1;
}

const entryId = (contract, fee, entry) => JSON.stringify([contract, fee, entry]);

/**
 * allowance.rs `Metering`: the contract-priced GPU-seconds an invoice rates, per included entry:
 * in its own period by watched billing period, and late by the earlier period they belong to.
 */
export class Metering {
  constructor(contracts, period) {
    this.priced = new Map();
    this.own = new Map();
    this.late = new Map();
    for (const c of contracts) {
      let spans = null;
      c.fees.forEach((f, i) => {
        if (f.lease === undefined) return;
        f.included.forEach((e, j) => {
          const id = entryId(c.contract, i, j);
          const key = JSON.stringify([f.lease, e.gpuModel]);
          if (!this.priced.has(key)) this.priced.set(key, []);
          this.priced.get(key).push({ from: c.termFrom, to: c.termTo, entry: { id, contract: c.contract, fee: i, entry: j } });
          spans ??= spansOf(c).map(periodOfSpan).filter((p) => overlaps(p, period));
          this.own.set(id, spans.map((p) => ({ period: p, gpuSeconds: Dec.zero(), records: 0 })));
        });
      });
    }
  }

  /** `Metering::entry`: the included entry pricing the record, or null. */
  entryOf(u) {
    if (u.lease === undefined) return null;
    const terms = this.priced.get(JSON.stringify([u.lease, u.gpuModel])) ?? [];
    return terms.find((t) => t.from <= u.start && u.start < t.to)?.entry ?? null;
  }

  /** `Metering::prices`: whether the record is contract-priced. */
  prices(u) {
    return this.entryOf(u) !== null;
  }

  /** `Metering::add`: counts a contract-priced record (own period, or late of `late`). */
  add(u, late) {
    const e = this.entryOf(u);
    if (!e) return false;
    if (late) {
      if (!this.late.has(e.id)) this.late.set(e.id, { ...e, periods: new Map() });
      const periods = this.late.get(e.id).periods;
      const pid = `${late.from}/${late.to}`;
      const used = periods.get(pid) ?? { period: late, gpuSeconds: Dec.zero(), records: 0 };
      used.gpuSeconds = used.gpuSeconds.add(u.gpuSeconds);
      used.records++;
      periods.set(pid, used);
    } else {
      if (!this.own.has(e.id)) this.own.set(e.id, []);
      const spans = this.own.get(e.id);
      const i = spanAt(spans, u.start);
      if (i >= 0) {
        spans[i].gpuSeconds = spans[i].gpuSeconds.add(u.gpuSeconds);
        spans[i].records++;
      }
    }
    return true;
  }

  /** `Metering::own`: what the entry's records used in the span. */
  ownOf(id, span) {
    const s = (this.own.get(id) ?? []).find((x) => x.period.from === span.from && x.period.to === span.to);
    return s ?? { gpuSeconds: Dec.zero(), records: 0 };
  }
}

/** allowance.rs `allowance_seconds`: GPU-hours × 3600 × used ÷ full, half-even to 6 places. */
export const allowanceSeconds = (hours, s) =>
  Dec.quotient(hours.mul(SECONDS_PER_HOUR).mul(Dec.int(s.to - s.from)), Dec.int(s.fullTo - s.fullFrom), ALLOWANCE_DECIMALS);

/** allowance.rs `judge`: per billing period overlapping `period`, fee with a lease and entry. */
export function judgeAllowances(c, period, metering) {
  const out = [];
  for (const span of spansOf(c)) {
    const p = periodOfSpan(span);
    if (!overlaps(p, period)) continue;
    c.fees.forEach((f, i) => {
      if (f.lease === undefined) return;
      f.included.forEach((e, j) => {
        const used = metering.ownOf(entryId(c.contract, i, j), p);
        const included = allowanceSeconds(e.gpuHours, span);
        const covered = used.gpuSeconds.min(included);
        out.push({
          fee: i, entry: j, covered, records: used.records,
          row: { contract: c.contract, lease: f.lease, gpuModel: e.gpuModel, period: p, included, used: used.gpuSeconds, overage: used.gpuSeconds.sub(covered) },
        });
      });
    });
  }
  return out;
}

/** allowance.rs `late`: [{period, fee, entry, gpuSeconds, records}] by period, fee, entry. */
export function lateAllowances(c, metering) {
  const out = [];
  for (const e of metering.late.values()) {
    if (e.contract !== c.contract) continue;
    for (const u of e.periods.values()) out.push({ period: u.period, fee: e.fee, entry: e.entry, gpuSeconds: u.gpuSeconds, records: u.records });
  }
  return out.sort((a, b) => periodOrder(a.period, b.period) || numOrder(a.fee, b.fee) || numOrder(a.entry, b.entry));
}

/** sla.rs `leased_gpus`: Σ GPUs named × share, or the item's count. */
export function leasedGpus(lease) {
  let total = Dec.zero();
  for (const n of lease.nodes) {
    if (Array.isArray(n.gpus)) total = total.add(Dec.int(n.gpus.length).mul(n.share === undefined ? ONE : Dec.parse(n.share)));
    else if (n.count !== undefined) total = total.add(Dec.parse(n.count));
  }
  return total;
}

/** sla.rs `leased_gpu_seconds`: the lease's GPUs × the seconds of its term inside [from, to). */
export function leasedGpuSeconds(lease, from, to) {
  const start = Math.max(from, unixOf(lease.from));
  const end = lease.to === undefined ? to : Math.min(unixOf(lease.to), to);
  return end <= start ? Dec.zero() : leasedGpus(lease).mul(Dec.int(end - start));
}

/** sla.rs `availability_percent`: 100 × present ÷ leased, at most 100, truncated to 4 places. */
export function availabilityPercent(leased, present) {
  if (leased.cmp(Dec.zero()) <= 0) return null;
  return Dec.quotient(present.mul(HUNDRED), leased, AVAILABILITY_DECIMALS, 'to_zero').min(HUNDRED);
}

/** sla.rs `credit_percent`: the percent of the lowest `below` the availability is under. */
export function creditPercent(sla, availability) {
  const steps = sla.credits.filter((s) => availability.cmp(s.below) < 0);
  return steps.length ? steps[steps.length - 1].percent : null;
}

/** sla.rs `judged_spans`: the billing periods wholly inside `period` (none without an SLA). */
const judgedSpans = (c, period) => (c.sla === null ? [] : spansOf(c).filter((s) => period.from <= s.from && s.to <= period.to));

/** sla.rs `rented_leases`: the leases the fees rent, each once, in fee order. */
const rentedLeases = (c) => [...new Set(c.fees.filter((f) => f.lease !== undefined).map((f) => f.lease))];

/** sla.rs `Presence`: the GPU-seconds present per watched lease and judged billing period. */
export class Presence {
  constructor(contracts, period, leaseOf) {
    this.leases = new Map();
    for (const c of contracts) {
      const spans = judgedSpans(c, period);
      if (spans.length === 0) continue;
      for (const l of rentedLeases(c)) {
        if (!this.leases.has(l)) this.leases.set(l, { reg: leaseOf(l), spans: [] });
        const watched = this.leases.get(l).spans;
        for (const s of spans) {
          if (!watched.some((w) => w.period.from === s.from && w.period.to === s.to)) watched.push({ period: periodOfSpan(s), present: Dec.zero() });
        }
        watched.sort((a, b) => periodOrder(a.period, b.period));
      }
    }
  }

  /** `Presence::add`: gpu_count × the seconds from start to end (or the span's end). */
  add(u) {
    if (u.lease === undefined || !this.leases.has(u.lease)) return;
    const spans = this.leases.get(u.lease).spans;
    const i = spanAt(spans, u.start);
    if (i < 0) return;
    const end = Math.min(u.end, spans[i].period.to);
    spans[i].present = spans[i].present.add(u.gpuCount.mul(Dec.int(end - u.start)));
  }

  /** `Presence::of`: {leased, present} over the span; null when unwatched or unregistered. */
  of(lease, span) {
    const w = this.leases.get(lease);
    const s = w?.spans.find((x) => x.period.from === span.from && x.period.to === span.to);
    if (!s || !w.reg) return null;
    return { leased: leasedGpuSeconds(w.reg, span.from, span.to), present: s.present };
  }
}

/** sla.rs `judge`: [{span, row}] per billing period wholly inside `period` and rented lease. */
export function judgeSla(c, period, presence) {
  const out = [];
  for (const span of judgedSpans(c, period)) {
    const p = periodOfSpan(span);
    for (const lease of rentedLeases(c)) {
      const m = presence.of(lease, p);
      if (!m) continue;
      const availability = availabilityPercent(m.leased, m.present);
      if (availability === null) continue;
      out.push({
        span,
        row: { contract: c.contract, lease, period: p, leased: m.leased, present: m.present, availability, target: c.sla.target, creditPercent: creditPercent(c.sla, availability) },
      });
    }
  }
  return out;
}

/** contract_lines.rs `Measurement`: presence for the SLAs, metering for included hours. */
export class Measurement {
  constructor(presence, metering) {
    this.presence = presence;
    this.metering = metering;
  }

  /** `Measurement::add`: true when contract-priced (the rate card does not rate it). */
  add(u, late) {
    if (!late) this.presence.add(u);
    return this.metering.add(u, late);
  }
}

/** contract_lines.rs `draws_down`: a usage or overage line of the invoice's own period. */
export const drawsDown = (l) => ['gpu', 'energy', 'overage'].includes(l.kind) && !l.adjustment_for;

/** contract_lines.rs `drawn`: Σ net of the lines that draw a commitment down, rounded. */
export const drawn = (lines, currency) => roundAmount(lines.filter(drawsDown).reduce((s, l) => s.add(l.net), Dec.zero()), currency);

/** A line with every member at its default (invoice.rs `InvoiceLine`; tax set by apply_tax). */
export function blankLine(kind, description, region, unit) {
  return {
    kind, description, region, unit,
    quantity: Dec.zero(), unit_price: Dec.zero(), net: Dec.zero(),
    tax_name: undefined, tax_rate: Dec.zero(), tax: Dec.zero(), gross: Dec.zero(), records: 0,
  };
}

/** contract_lines.rs `metered_lines`: included and overage lines, and the allowance rows. */
function meteredLines(c, period, metering) {
  const lines = [];
  const rows = [];
  const line = (kind, fee, entry, gpuSeconds, records) => {
    const f = c.fees[fee];
    const e = f.included[entry];
    const unitPrice = kind === 'overage' ? e.overageRate : Dec.zero();
    return Object.assign(blankLine(kind, '', c.region, 'GPU-h'), {
      gpu_model: e.gpuModel,
      quantity: gpuHours(gpuSeconds),
      gpu_seconds: gpuSeconds,
      unit_price: unitPrice,
      net: roundQuotient(gpuSeconds.mul(unitPrice), SECONDS_PER_HOUR, c.currency),
      records,
      contract: c.contract,
      category: f.category,
    });
  };
  for (const j of judgeAllowances(c, period, metering)) {
    const f = c.fees[j.fee];
    const { gpuModel: model, lease } = j.row;
    if (!j.covered.isZero()) {
      lines.push(Object.assign(line('included', j.fee, j.entry, j.covered, j.records), {
        description: `Included GPU-hours, ${model}, lease ${lease}: ${gpuHours(j.row.used)} of ${gpuHours(j.row.included)} GPU-h (${f.name})`,
        service_period: j.row.period,
      }));
    }
    if (!j.row.overage.isZero()) {
      lines.push(Object.assign(line('overage', j.fee, j.entry, j.row.overage, j.records), {
        description: `Overage above ${gpuHours(j.row.included)} included GPU-h, ${model}, lease ${lease} (${f.name})`,
        service_period: j.row.period,
      }));
    }
    rows.push(j.row);
  }
  for (const l of lateAllowances(c, metering)) {
    const f = c.fees[l.fee];
    lines.push(Object.assign(line('overage', l.fee, l.entry, l.gpuSeconds, l.records), {
      description: `Overage (late records), ${f.included[l.entry].gpuModel}, lease ${f.lease ?? ''} (${f.name})`,
      adjustment_for: l.period,
    }));
  }
  return { lines, rows };
}

/**
 * contract_lines.rs `contract_lines` for an invoice (`whole`): the tenant's contracts in
 * `currency` by term, each one's fee lines, included and overage lines, SLA credits and
 * true-up; the commitments, availability and allowance rows. Throws {split} when the period
 * splits a billing period of a contract with a commitment, an SLA or included hours.
 */
export function contractLines(contracts, period, currency, usage, measured) {
  const ordered = contracts
    .filter((c) => c.currency === currency)
    .sort((a, b) => numOrder(a.termFrom, b.termFrom) || byteOrder(a.contract, b.contract));
  const metered = [];
  for (const c of ordered) {
    const ch = charges(c, period.from, period.to);
    if (ch.split) throw Object.assign(new Error('split'), { split: { contract: c.contract, span: ch.split } });
    metered.push({ ch, ...meteredLines(c, period, measured.metering) });
  }
  const drawnAmount = drawn([...usage, ...metered.flatMap((m) => m.lines)], currency);
  const out = { lines: [], commitments: [], availability: [], allowances: [] };
  ordered.forEach((c, k) => {
    const { ch, lines, rows } = metered[k];
    const line = (kind, description, net) =>
      Object.assign(blankLine(kind, description, c.region, 'period'), { quantity: ONE, unit_price: net, net, contract: c.contract });
    for (const f of ch.fees) {
      const fee = c.fees[f.fee];
      out.lines.push(Object.assign(line('fee', fee.name, f.net), {
        quantity: f.share,
        unit_price: fee.amount,
        category: fee.category,
        timing: fee.timing,
        service_period: { from: f.from, to: f.to },
      }));
    }
    out.lines.push(...lines);
    out.allowances.push(...rows);
    for (const { span, row } of judgeSla(c, period, measured.presence)) {
      if (row.creditPercent !== null) {
        const share = Dec.quotient(row.creditPercent, HUNDRED, 6);
        for (const fee of c.fees.filter((f) => f.lease === row.lease && f.timing !== 'once')) {
          // The fee's amount for the billing period, as its own line has it.
          const base = prorate(span, fee.amount, c.currency);
          const credit = roundAmount(base.mul(share), currency);
          // A credit that rounds to nothing makes no line (as a true-up of 0).
          if (credit.isZero()) continue;
          const description =
            `SLA credit ${row.creditPercent} %: ${fee.name}, lease ${row.lease}, availability ${row.availability} % (target ${row.target} %)`;
          out.lines.push(Object.assign(line('sla_credit', description, credit.neg()), {
            quantity: share,
            unit_price: base,
            category: fee.category,
            service_period: row.period,
          }));
        }
      }
      out.availability.push(row);
    }
    if (ch.committed !== null) {
      const trueUp = roundAmount(ch.committed.sub(drawnAmount).max(Dec.zero()), currency);
      out.commitments.push({ contract: c.contract, committed: ch.committed, drawn: drawnAmount, true_up: trueUp });
      if (!trueUp.isZero()) out.lines.push(line('true_up', `Minimum commitment true-up, contract ${c.contract}`, trueUp));
    }
  });
  return out;
}
