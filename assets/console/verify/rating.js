// Rating: usage and energy records into exactly priced lines (docs/RATING.md), mirroring
// crates/core/src/rating.rs (`PriceBook`, `rate_usage`, `graduate`, `Rater`) and the placement
// of an invoice's records, crates/core/src/invoice.rs (`InvoiceScope`, `InvoiceRating`).
//
// Every quantity and price is an exact decimal (decimal.js, BigInt); a line's amount is its
// exact value rounded half-even once, to the currency's minor unit. Instants are seconds since
// the epoch (the bodies' timestamps were checked by leaf.js). Records are added one by one, as
// the Rust verifier does (`InvoiceRating::add`; the rollup buckets are the ledger's shortcut
// to the same lines).

import { Dec } from './decimal.js';
import { minorUnits } from './leaf.js';

/** Seconds since the epoch of a protocol timestamp (`YYYY-MM-DDTHH:MM:SSZ`). */
export const unixOf = (ts) => Date.parse(ts) / 1000;
/** The protocol timestamp of `s` seconds since the epoch. */
export const stampOf = (s) => new Date(s * 1000).toISOString().replace('.000Z', 'Z');

/** Rust's byte-wise `str` order (UTF-8 byte order is code point order). */
export function byteOrder(a, b) {
  if (a === b) return 0;
  const x = [...a];
  const y = [...b];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = x[i].codePointAt(0) - y[i].codePointAt(0);
    if (d) return d < 0 ? -1 : 1;
  }
  return x.length - y.length < 0 ? -1 : x.length === y.length ? 0 : 1;
}

/** Lexicographic order of lists compared by `cmp` pairs: [[a, b, cmp], ...]. */
export function chain(...pairs) {
  for (const [a, b, cmp] of pairs) {
    const d = cmp(a, b);
    if (d) return d;
  }
  return 0;
}
export const numOrder = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
export const decOrder = (a, b) => a.cmp(b);

/** `LeaseClass`'s derived order: on_demand < reserved < spot. */
const CLASS_ORDER = { on_demand: 0, reserved: 1, spot: 2 };
export const classOrder = (a, b) => numOrder(CLASS_ORDER[a], CLASS_ORDER[b]);

/** rating.rs `round_amount`: half-even to the currency's minor unit, exactly that many digits. */
export const roundAmount = (d, currency) => d.round(minorUnits(currency));
/** rating.rs `pad_amount`: at least the currency's minor digits, never rounded. */
export const padAmount = (d, currency) => d.pad(minorUnits(currency));

const SECONDS_PER_HOUR = Dec.int(3600);

/** rating.rs `insert_sorted`: after every point with the same or an earlier instant. */
function insertSorted(list, item) {
  let pos = list.length;
  while (pos > 0 && list[pos - 1].at > item.at) pos--;
  list.splice(pos, 0, item);
}

/** rating.rs `in_force`: the point in force at `t` (or null) and the next change (or null). */
export function inForce(list, t) {
  let pos = 0;
  while (pos < list.length && list[pos].at <= t) pos++;
  return { point: pos > 0 ? list[pos - 1] : null, next: pos < list.length ? list[pos].at : null };
}

const keyOf = (...parts) => JSON.stringify(parts);

/** Every price the rating needs, as read from the log (rating.rs `PriceBook`). */
export class PriceBook {
  constructor() {
    this.rateCards = new Map();
    this.spot = new Map();
    this.regions = new Map();
    this.leases = new Map();
    this.plans = new Map();
    this.tiers = new Map();
  }

  /** `PriceBook::add_entry`: what a pricing entry says; other kinds are ignored. */
  addEntry(kind, b) {
    const push = (map, key, item) => {
      if (!map.has(key)) map.set(key, []);
      insertSorted(map.get(key), item);
    };
    const at = b.effective_from === undefined ? null : unixOf(b.effective_from);
    if (kind === 'rate_card') {
      push(this.rateCards, keyOf(b.region, b.gpu_model, b.lease_class), { at, currency: b.currency, price: Dec.parse(b.price_per_gpu_hour) });
    } else if (kind === 'spot_price') {
      push(this.spot, keyOf(b.region, b.gpu_model), { at, currency: b.currency, price: Dec.parse(b.price_per_gpu_hour) });
    } else if (kind === 'region_params') {
      push(this.regions, b.region, {
        at,
        currency: b.currency,
        price: Dec.parse(b.electricity_price_per_kwh),
        pue: Dec.parse(b.pue),
      });
    } else if (kind === 'lease_registered') {
      this.leases.set(b.lease, b.class);
    } else if (kind === 'volume_tiers') {
      const tiers = b.tiers.map((t) => ({
        upTo: t.up_to_gpu_hours === undefined ? null : Dec.parse(t.up_to_gpu_hours),
        price: Dec.parse(t.price_per_gpu_hour),
      }));
      push(this.tiers, keyOf(b.plan, b.region, b.gpu_model, b.lease_class), { at, currency: b.currency, tiers });
    } else if (kind === 'tenant_plan') {
      push(this.plans, b.tenant, { at, plan: b.plan });
    }
  }

  /** `PriceBook::has_tiers`. */
  hasTiers() {
    return this.tiers.size > 0;
  }

  /** `PriceBook::tiers_for`: the plan and schedule in force at the period's start, or null. */
  tiersFor(tenant, region, model, cls, periodFrom) {
    if (cls === 'spot' || !this.hasTiers()) return null;
    const plan = inForce(this.plans.get(tenant) ?? [], periodFrom).point;
    if (!plan) return null;
    const schedule = inForce(this.tiers.get(keyOf(plan.plan, region, model, cls)) ?? [], periodFrom).point;
    return schedule ? { plan: plan.plan, schedule } : null;
  }

  /** `PriceBook::class_of`: no lease or an unknown one is on-demand. */
  classOf(lease) {
    return (lease !== undefined && this.leases.get(lease)) || 'on_demand';
  }

  /** `PriceBook::region_at`. */
  regionAt(region, t) {
    return inForce(this.regions.get(region) ?? [], t).point;
  }

  /** `PriceBook::series`: spot prices for spot, else the class's rate cards. */
  series(region, model, cls) {
    const v = cls === 'spot' ? this.spot.get(keyOf(region, model)) : this.rateCards.get(keyOf(region, model, cls));
    return v ?? [];
  }

  /** `PriceBook::rate_usage`: a usage record split at every price change inside it. */
  rateUsage(u) {
    const cls = this.classOf(u.lease);
    const series = this.series(u.region, u.gpuModel, cls);
    const out = [];
    for (let t = u.start; t < u.end; ) {
      const { point, next } = inForce(series, t);
      const end = next !== null && next < u.end ? next : u.end;
      out.push({ cls, gpuSeconds: u.gpuCount.mul(Dec.int(end - t)), price: point ? { currency: point.currency, price: point.price } : null });
      t = end;
    }
    return out;
  }
}

/**
 * rating.rs `graduate`: the GPU-seconds between `from` and `to` of a graduated count split over
 * the tiers, [[tier index from 0, GPU-seconds]]; the last tier is open.
 */
export function graduate(tiers, from, to) {
  const out = [];
  let low = Dec.zero();
  for (let i = 0; i < tiers.length; i++) {
    const high = tiers[i].upTo !== null && i + 1 < tiers.length ? tiers[i].upTo.mul(SECONDS_PER_HOUR) : null;
    const a = from.max(low);
    const b = high === null ? to : to.min(high);
    if (b.cmp(a) > 0) out.push([i, b.sub(a)]);
    if (high !== null && high.cmp(to) < 0) low = high;
    else break;
  }
  return out;
}

/** `LineKey`'s derived order: GPU lines before energy lines, then field by field. */
export function lineKeyOrder(a, b) {
  if (a.type !== b.type) return a.type === 'gpu' ? -1 : 1;
  if (a.type === 'energy') {
    return chain([a.region, b.region, byteOrder], [a.price, b.price, decOrder], [a.pue, b.pue, decOrder]);
  }
  const tierOrder = (x, y) => (x === null || y === null ? (x === null ? 0 : 1) - (y === null ? 0 : 1) : chain([x.plan, y.plan, byteOrder], [x.tier, y.tier, numOrder]));
  return chain(
    [a.region, b.region, byteOrder],
    [a.gpuModel, b.gpuModel, byteOrder],
    [a.cls, b.cls, classOrder],
    [a.tier, b.tier, tierOrder],
    [a.price, b.price, decOrder],
  );
}

/** A line key's identity (prices by value, as `Decimal`'s `Eq`). */
const lineKeyId = (k) =>
  k.type === 'gpu'
    ? keyOf('gpu', k.region, k.gpuModel, k.cls, k.tier && [k.tier.plan, k.tier.tier], k.price.toString())
    : keyOf('energy', k.region, k.price.toString(), k.pue.toString());

/** Accumulates a tenant's records of one period into lines per currency (rating.rs `Rater`). */
export class Rater {
  constructor(periodFrom) {
    this.periodFrom = periodFrom;
    this.lines = new Map();
    this.unpriced = new Map();
    this.tiered = new Map();
  }

  /** `Rater::tiered_volume`: the graduated count of the record's series, or null. */
  tieredVolume(book, u) {
    if (!book.hasTiers()) return null;
    const cls = book.classOf(u.lease);
    const t = book.tiersFor(u.tenant, u.region, u.gpuModel, cls, this.periodFrom);
    if (!t) return null;
    const key = keyOf(t.schedule.currency, t.plan, u.region, u.gpuModel, cls);
    if (!this.tiered.has(key)) {
      this.tiered.set(key, {
        currency: t.schedule.currency, plan: t.plan, region: u.region, gpuModel: u.gpuModel, cls,
        tiers: t.schedule.tiers, invoiced: Dec.zero(), gpuSeconds: Dec.zero(), records: 0,
      });
    }
    return this.tiered.get(key);
  }

  /** `Rater::add_invoiced_usage`: counts toward a graduated series, billed nowhere. */
  addInvoicedUsage(book, u) {
    const v = this.tieredVolume(book, u);
    if (v) v.invoiced = v.invoiced.add(u.gpuSeconds);
  }

  /** `Rater::add_usage`. */
  addUsage(book, u) {
    const v = this.tieredVolume(book, u);
    if (v) {
      v.gpuSeconds = v.gpuSeconds.add(u.gpuSeconds);
      v.records++;
      return;
    }
    for (const p of book.rateUsage(u)) this.addPiece(u, p.cls, p.price, p.gpuSeconds, 1);
  }

  #addLine(currency, key, quantity, numerator, records) {
    const id = keyOf(currency, lineKeyId(key));
    const l = this.lines.get(id) ?? { currency, key, quantity: Dec.zero(), numerator: Dec.zero(), records: 0 };
    l.quantity = l.quantity.add(quantity);
    l.numerator = l.numerator.add(numerator);
    l.records += records;
    this.lines.set(id, l);
  }

  #addUnpriced(what, region, quantity, records) {
    const u = this.unpriced.get(keyOf(what, region)) ?? { what, region, quantity: Dec.zero(), records: 0 };
    u.quantity = u.quantity.add(quantity);
    u.records += records;
    this.unpriced.set(keyOf(what, region), u);
  }

  /** `Rater::add_piece`: usage at a price, or unpriced. */
  addPiece(u, cls, price, gpuSeconds, records) {
    if (!price) {
      this.#addUnpriced(cls === 'spot' ? 'no spot price in force' : 'no rate card in force', u.region, gpuSeconds, records);
      return;
    }
    const key = { type: 'gpu', region: u.region, gpuModel: u.gpuModel, cls, tier: null, price: price.price };
    this.#addLine(price.currency, key, gpuSeconds, gpuSeconds.mul(price.price), records);
  }

  /** `Rater::add_energy`: kWh × PUE × the electricity price in force at the record's start. */
  addEnergy(book, e) {
    const r = book.regionAt(e.region, e.start);
    if (!r) {
      this.#addUnpriced('no region parameters in force', e.region, e.kwh, 1);
      return;
    }
    const key = { type: 'energy', region: e.region, price: r.price, pue: r.pue };
    this.#addLine(r.currency, key, e.kwh, e.kwh.mul(r.pue).mul(r.price), 1);
  }

  /**
   * `Rater::finish`: the lines per currency, in `(currency, LineKey)` order, each rounded once
   * ({key, currency, quantity, amount, records}), and the unpriced usage.
   */
  finish() {
    for (const v of this.tiered.values()) {
      for (const [i, quantity] of graduate(v.tiers, v.invoiced, v.invoiced.add(v.gpuSeconds))) {
        const price = v.tiers[i].price;
        const key = { type: 'gpu', region: v.region, gpuModel: v.gpuModel, cls: v.cls, tier: { plan: v.plan, tier: i + 1 }, price };
        // Every record of the series makes up the volume that reaches each tier.
        this.#addLine(v.currency, key, quantity, quantity.mul(price), v.records);
      }
    }
    this.tiered.clear();
    const sorted = [...this.lines.values()].sort((a, b) => byteOrder(a.currency, b.currency) || lineKeyOrder(a.key, b.key));
    const byCurrency = new Map();
    for (const l of sorted) {
      const exact = l.key.type === 'gpu' ? Dec.quotient(l.numerator, SECONDS_PER_HOUR, minorUnits(l.currency)) : roundAmount(l.numerator, l.currency);
      if (!byCurrency.has(l.currency)) byCurrency.set(l.currency, []);
      byCurrency.get(l.currency).push({ key: l.key, currency: l.currency, quantity: l.quantity, amount: exact, records: l.records });
    }
    return { lines: byCurrency, unpriced: [...this.unpriced.values()] };
  }
}

/**
 * invoice.rs `InvoiceScope`: which of a tenant's records an invoice of `period` rates, and how
 * (docs/RATING.md, "Late records"). `earlier`: [{period, size}] of the tenant's earlier
 * invoices; `excluded`: entry → reason.
 */
export class InvoiceScope {
  constructor(period, earlier, excluded) {
    this.period = period;
    this.earlier = earlier.map((e) => e.period);
    this.since = earlier.reduce((m, e) => Math.max(m, e.size), 0);
    this.excluded = excluded;
  }

  /** `InvoiceScope::place`: {kind: period|late|invoiced|excluded|outside, period?}. */
  place(index, start) {
    const contains = (p) => p.from <= start && start < p.to;
    let placement;
    if (contains(this.period)) placement = { kind: 'period' };
    else {
      const p = this.earlier.find(contains);
      if (!p) placement = { kind: 'outside' };
      else placement = { kind: index >= this.since ? 'late' : 'invoiced', period: p };
    }
    if (!this.excluded.has(index)) return placement;
    return placement.kind === 'period' || placement.kind === 'late' ? { kind: 'excluded' } : { kind: 'outside' };
  }
}

/** Periods' derived order: by start, then end. */
export const periodOrder = (a, b) => numOrder(a.from, b.from) || numOrder(a.to, b.to);
const periodId = (p) => `${p.from}/${p.to}`;

/**
 * invoice.rs `InvoiceRating`: the period's records and each earlier period's late records,
 * placed by an InvoiceScope; `measurement` (contract_lines.js `Measurement`) takes the
 * contract-priced records and the SLAs' presence.
 */
export class InvoiceRating {
  constructor(scope, measurement) {
    this.scope = scope;
    this.measurement = measurement;
    this.main = new Rater(scope.period.from);
    this.late = new Map();
    this.excluded = [];
  }

  /** `InvoiceRating::add`: rates the record where the scope places it; returns the placement. */
  add(book, index, kind, rec) {
    const placement = this.scope.place(index, rec.start);
    if (placement.kind === 'outside') return placement;
    if (placement.kind === 'excluded') {
      this.excluded.push({ entry: index, reason: this.scope.excluded.get(index) });
      return placement;
    }
    let rater = this.main;
    if (placement.kind !== 'period') {
      const id = periodId(placement.period);
      if (!this.late.has(id)) this.late.set(id, { period: placement.period, rater: new Rater(placement.period.from) });
      rater = this.late.get(id).rater;
    }
    if (placement.kind === 'invoiced') {
      // A contract-priced record counts toward no volume tier.
      if (kind === 'gpu_usage' && !this.measurement.metering.prices(rec)) rater.addInvoicedUsage(book, rec);
    } else if (kind === 'gpu_usage') {
      if (!this.measurement.add(rec, placement.kind === 'late' ? placement.period : null)) rater.addUsage(book, rec);
    } else {
      rater.addEnergy(book, rec);
    }
    return placement;
  }

  /**
   * `InvoiceRating::finish`: {lines, adjustments} (currency → [{line, adjustmentFor}]),
   * whether the period's own usage is partly unpriced, the excluded records by entry, and the
   * measurement.
   */
  finish() {
    const main = this.main.finish();
    const lines = new Map([...main.lines].map(([c, l]) => [c, l.map((line) => ({ line, adjustmentFor: null }))]));
    const adjustments = new Map();
    for (const { period, rater } of [...this.late.values()].sort((a, b) => periodOrder(a.period, b.period))) {
      for (const [c, l] of rater.finish().lines) {
        if (!adjustments.has(c)) adjustments.set(c, []);
        adjustments.get(c).push(...l.map((line) => ({ line, adjustmentFor: period })));
      }
    }
    const excluded = [...this.excluded].sort((a, b) => a.entry - b.entry).filter((x, i, a) => i === 0 || a[i - 1].entry !== x.entry);
    return { lines, adjustments, unpriced: main.unpriced, excluded, measurement: this.measurement };
  }
}

/** A usage record's body with its numbers parsed (what rating reads of it). */
export function usageOf(b) {
  return {
    tenant: b.tenant,
    region: b.region,
    gpuModel: b.gpu_model,
    lease: b.lease,
    start: unixOf(b.start),
    end: unixOf(b.end),
    gpuCount: Dec.parse(b.gpu_count),
    gpuSeconds: Dec.parse(b.gpu_seconds),
  };
}

/** An energy record's body with its numbers parsed. */
export function energyOf(b) {
  return { tenant: b.tenant, region: b.region, start: unixOf(b.start), kwh: Dec.parse(b.kwh) };
}
