// Invoices (docs/RATING.md, docs/PROTOCOL.md §11 and §15) checked with their evidence bundle:
// the invoice recomputed from the bundle exactly as the Rust verifier does
// (crates/core/src/invoice.rs `InvoiceCheck`: `start`, its `Subject` impl, `finish`), then
// compared member by member; the first difference is `claim_mismatch` with the member's path
// (`lines[2].net`, `total`, `availability`, ...), as `gpuledger verify --invoice` names it.
//
// The rules recomputed: the usage lines (rating.js: rate cards, spot prices, region parameters,
// volume tiers, late records as adjustment lines, exclusions), the contract lines
// (contract_lines.js: fees, included GPU-hours and overage, SLA credits and the invoice's
// `availability`, commitments and true-ups), the tax, gross and totals (`apply_tax`, at the
// rates the invoice declares), the due date, and the prepaid draws (prepaid.js). Version 1
// documents (no `format` member, crates/core/src/invoice/v1.rs) are recomputed by their own
// rules: the usage lines in GPU-seconds and measured kWh with an `amount` each, no tax, no
// contract lines, `total` = Σ amount.

import { parseStrict } from './jcs.js';
import { Dec } from './decimal.js';
import { MIN_UNIX, MAX_UNIX } from './billing.js';
import { Failure } from './result.js';
import {
  PriceBook, InvoiceScope, InvoiceRating, usageOf, energyOf, unixOf, stampOf, roundAmount, byteOrder,
} from './rating.js';
import {
  Contracts, Metering, Presence, Measurement, contractLines, blankLine, gpuHours,
} from './contract_lines.js';
import { PrepaidBook, amountDue } from './prepaid.js';

/** invoice.rs `INVOICE_FORMAT_V2`. */
export const INVOICE_FORMAT_V2 = 'gpuledger-invoice/v2';
/** invoice.rs `BILLED_KWH_DECIMALS`. */
export const BILLED_KWH_DECIMALS = 6;

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

// ---------------------------------------------------------------- reading the document

const TIMESTAMP = /^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})Z$/;
const MONEY = /^-?[0-9]+(\.[0-9]+)?$/;
const LINE_KINDS = ['gpu', 'energy', 'fee', 'true_up', 'sla_credit', 'included', 'overage'];
const UNITS = ['GPU-h', 'kWh', 'period'];
const CLASSES = ['on_demand', 'reserved', 'spot'];
const CATEGORIES = ['compute', 'networking', 'storage', 'support', 'other'];
const TIMINGS = ['advance', 'arrears', 'once'];
const SOURCES = ['grant', 'purchase'];

/** A timestamp as time.rs reads it: the fixed form, a real date, 2000 to 9999. */
function isTimestamp(v) {
  if (typeof v !== 'string' || !TIMESTAMP.test(v)) return false;
  const s = unixOf(v);
  return Number.isFinite(s) && stampOf(s) === v && s >= MIN_UNIX && s <= MAX_UNIX;
}

/**
 * The member types of invoice.rs's serde structs; each reader returns the value as Rust writes
 * it back (the claimed side of the comparison) or throws a message.
 */
const read = {
  string: (v) => (typeof v === 'string' ? v : fail('is not a string')),
  u64: (v) => (Number.isSafeInteger(v) && v >= 0 ? v : fail('is not an unsigned integer')),
  u32: (v) => (Number.isSafeInteger(v) && v >= 0 && v <= 0xffffffff ? v : fail('is not a u32')),
  timestamp: (v) => (isTimestamp(v) ? v : fail('is not a timestamp YYYY-MM-DDTHH:MM:SSZ')),
  // `decimal_str`: canonical (core::decimal::parse_canonical).
  decimal: (v) => (Dec.parseCanonical(v) ? v : fail('is not a canonical decimal')),
  // `money_str`: digits, point and sign, read keeping their scale and written back so.
  money: (v) => (typeof v === 'string' && MONEY.test(v) ? Dec.parseSigned(v).toScaled() : fail('is not an amount')),
  period: (v) => {
    const p = struct({ from: ['timestamp'], to: ['timestamp'] }, false)(v);
    return { from: p.from, to: p.to };
  },
  // rust_decimal's own serde (version 1 documents): any plain decimal, written back canonical.
  plain: (v) => (typeof v === 'string' && MONEY.test(v) ? Dec.parseSigned(v).toString() : fail('is not a decimal')),
  plainAmount: (v) => (typeof v === 'string' && MONEY.test(v) ? Dec.parseSigned(v).toScaled() : fail('is not a decimal')),
  strings: (v) => (Array.isArray(v) && v.every((s) => typeof s === 'string') ? v : fail('is not a list of strings')),
};
const oneOf = (names) => (v) => (names.includes(v) ? v : fail(`is not one of ${names.join(', ')}`));
const listOf = (r) => (v) => (Array.isArray(v) ? v.map((x, i) => at(`[${i}]`, () => r(x))) : fail('is not a list'));

function fail(message) {
  throw new Error(message);
}

/** Runs `fn`, naming `where` in the message of what it throws. */
function at(where, fn) {
  try {
    return fn();
  } catch (e) {
    throw new Error(`${where}${/^[[.]/.test(e.message) ? '' : ' '}${e.message}`);
  }
}

/**
 * A struct reader: `members` maps a name to [type, mode, default]; mode `required` (the
 * default), `option` (absent or null: left out), `default` (absent: the default, or left out
 * without one; null is read as a value, and refused), `skip_empty` (a list left out when
 * empty). `deny`: unknown members refused (`deny_unknown_fields`).
 */
function struct(members, deny = true) {
  return (v) => {
    if (!isObject(v)) fail('is not an object');
    const out = {};
    for (const [name, [type, mode = 'required', dflt]] of Object.entries(members)) {
      const r = typeof type === 'function' ? type : read[type];
      const present = name in v;
      if (!present || (mode === 'option' && v[name] === null)) {
        if (mode === 'required') fail(`has no member ${name}`);
        if (mode === 'default' && dflt !== undefined) out[name] = dflt;
        continue;
      }
      const value = at(`.${name}`, () => r(v[name]));
      if (mode === 'skip_empty' && value.length === 0) continue;
      out[name] = value;
    }
    if (deny) for (const k of Object.keys(v)) if (!(k in members)) fail(`has an unknown member ${k}`);
    return out;
  };
}

const LINE = struct({
  kind: [oneOf(LINE_KINDS)],
  description: ['string'],
  region: ['string'],
  gpu_model: ['string', 'option'],
  class: [oneOf(CLASSES), 'option'],
  plan: ['string', 'option'],
  tier: ['u32', 'option'],
  quantity: ['decimal'],
  unit: [oneOf(UNITS)],
  gpu_seconds: ['decimal', 'option'],
  measured_kwh: ['decimal', 'option'],
  pue: ['decimal', 'option'],
  unit_price: ['decimal'],
  net: ['money'],
  tax_name: ['string', 'option'],
  tax_rate: ['decimal'],
  tax: ['money'],
  gross: ['money'],
  records: ['u64'],
  adjustment_for: ['period', 'option'],
  contract: ['string', 'option'],
  category: [oneOf(CATEGORIES), 'option'],
  timing: [oneOf(TIMINGS), 'option'],
  service_period: ['period', 'option'],
});

const INVOICE = struct({
  format: ['string'],
  number: ['string'],
  tenant: ['string'],
  period: ['period'],
  currency: ['string'],
  issued_at: ['timestamp'],
  log_origin: ['string'],
  checkpoint_size: ['u64'],
  checkpoint_root: ['string'],
  issuer: [struct({ name: ['string'], address: ['strings', 'default', []], tax_id: ['string', 'option'], email: ['string', 'option'] })],
  bill_to: [struct({ tenant: ['string'], name: ['string'], address: ['strings', 'default', []] })],
  payment_terms_days: ['u32'],
  due_at: ['timestamp'],
  lines: [listOf(LINE)],
  net_total: ['money'],
  tax_total: ['money'],
  total: ['money'],
  excluded: [listOf(struct({ entry: ['u64'], reason: ['string'] })), 'skip_empty'],
  commitments: [listOf(struct({ contract: ['string'], committed: ['money'], drawn: ['money'], true_up: ['money'] })), 'skip_empty'],
  availability: [listOf(struct({
    contract: ['string'], lease: ['string'], period: ['period'], leased_gpu_seconds: ['decimal'], present_gpu_seconds: ['decimal'],
    availability: ['decimal'], target: ['decimal'], credit_percent: ['decimal', 'option'],
  })), 'skip_empty'],
  allowances: [listOf(struct({
    contract: ['string'], lease: ['string'], gpu_model: ['string'], period: ['period'],
    included_gpu_seconds: ['decimal'], used_gpu_seconds: ['decimal'], overage_gpu_seconds: ['decimal'],
  })), 'skip_empty'],
  prepaid: [listOf(struct({ prepayment: ['string'], source: [oneOf(SOURCES)], amount: ['money'] })), 'skip_empty'],
  amount_due: ['money', 'default'],
});

/** invoice/v1.rs `from_value`: a version 1 line; kind and unit `gpu`/`GPU-s` or `energy`/`kWh`. */
const LINE_V1 = (v) => {
  const l = struct({
    kind: ['string'], region: ['string'], gpu_model: ['string', 'option'], class: [oneOf(CLASSES), 'option'],
    quantity: ['plain'], unit: ['string'], unit_price: ['plain'], pue: ['plain', 'option'], amount: ['plainAmount'],
    records: ['u64'], adjustment_for: ['period', 'option'],
  }, false)(v);
  if (!((l.kind === 'gpu' && l.unit === 'GPU-s') || (l.kind === 'energy' && l.unit === 'kWh'))) {
    fail(`has an unknown line kind ${JSON.stringify(l.kind)} / unit ${JSON.stringify(l.unit)}`);
  }
  return l;
};

/** invoice/v1.rs `InvoiceV1` as read (unknown members ignored, as its serde does). */
const INVOICE_V1 = struct({
  number: ['string'], tenant: ['string'], period: ['period'], currency: ['string'], issued_at: ['timestamp'],
  log_origin: ['string'], checkpoint_size: ['u64'], checkpoint_root: ['string'], lines: [listOf(LINE_V1)], total: ['plainAmount'],
}, false);

/**
 * Reads an invoice document (invoice.rs `from_json`, as crates/verifier's `invoice_document`:
 * the document, or the one element of an array of one) into the value Rust writes back of it.
 * Throws Failure `malformed` (item `invoice`).
 */
export function parseInvoice(text) {
  const malformed = (m) => new Failure('malformed', 'invoice', m);
  let v;
  try {
    v = parseStrict(String(text).replace(/^\uFEFF/, '').trim());
  } catch (e) {
    throw malformed(`not JSON: ${e.message}`);
  }
  if (Array.isArray(v) && v.length === 1) v = v[0];
  if (!isObject(v)) throw malformed('not a JSON object');
  if ('format' in v && v.format !== INVOICE_FORMAT_V2) {
    throw malformed(`unknown invoice format ${JSON.stringify(v.format)}; this verifier reads ${INVOICE_FORMAT_V2} and version 1`);
  }
  try {
    return 'format' in v ? INVOICE(v) : INVOICE_V1(v);
  } catch (e) {
    throw malformed(`the document${/^[[.]/.test(e.message) ? '' : ' '}${e.message}`);
  }
}

// ---------------------------------------------------------------- lines, tax and totals

/** `class_label` in lower case. */
const CLASS_WORDS = { on_demand: 'on-demand', reserved: 'reserved', spot: 'spot' };

/** invoice.rs `describe`: "GPU compute, H100, west, on-demand", "Electricity, west, PUE 1.08". */
export function describe(key) {
  if (key.type === 'energy') return `Electricity, ${key.region}, PUE ${key.pue}`;
  const tier = key.tier ? `, volume tier ${key.tier.tier} of plan ${key.tier.plan}` : '';
  return `GPU compute, ${key.gpuModel}, ${key.region}, ${CLASS_WORDS[key.cls]}${tier}`;
}

/** invoice.rs `billed_kwh`: measured kWh × PUE, half-even to 6 places. */
export const billedKwh = (kwh, pue) => kwh.mul(pue).round(BILLED_KWH_DECIMALS);

/** invoice.rs `line_v2`: a rated line in its priced unit, untaxed. */
function lineV2({ line: l, adjustmentFor }) {
  const k = l.key;
  const out = Object.assign(blankLine(k.type, describe(k), k.region, k.type === 'gpu' ? 'GPU-h' : 'kWh'), {
    net: l.amount,
    records: l.records,
  });
  if (adjustmentFor) out.adjustment_for = adjustmentFor;
  if (k.type === 'gpu') {
    return Object.assign(out, {
      gpu_model: k.gpuModel, class: k.cls, ...(k.tier ? { plan: k.tier.plan, tier: k.tier.tier } : {}),
      quantity: gpuHours(l.quantity), gpu_seconds: l.quantity, unit_price: k.price,
    });
  }
  return Object.assign(out, { quantity: billedKwh(l.quantity, k.pue), measured_kwh: l.quantity, pue: k.pue, unit_price: k.price });
}

/** invoice.rs `lines_v2`: the rated lines with a measured quantity, in order. */
export const linesV2 = (rated) => rated.filter((r) => !r.line.quantity.isZero()).map(lineV2);

/** invoice/v1.rs `legacy_lines`: every rated line (zero quantities kept) as a version 1 line. */
export function legacyLines(rated) {
  return rated.map(({ line: l, adjustmentFor }) => {
    const k = l.key;
    const o = k.type === 'gpu'
      ? { kind: 'gpu', region: k.region, gpu_model: k.gpuModel, class: k.cls, quantity: l.quantity.toString(), unit: 'GPU-s', unit_price: k.price.toString() }
      : { kind: 'energy', region: k.region, quantity: l.quantity.toString(), unit: 'kWh', unit_price: k.price.toString(), pue: k.pue.toString() };
    Object.assign(o, { amount: l.amount.toScaled(), records: l.records });
    if (adjustmentFor) o.adjustment_for = periodJson(adjustmentFor);
    return o;
  });
}

/**
 * invoice.rs `apply_tax`: each line's tax = round_half_even(net × tax_rate), gross = net + tax;
 * the totals their exact sums (with the minor unit's digits, also with no lines).
 */
export function applyTax(lines, currency) {
  const zero = roundAmount(Dec.zero(), currency);
  const t = { net: zero, tax: zero, gross: zero };
  for (const l of lines) {
    l.tax = roundAmount(l.net.mul(l.tax_rate), currency);
    l.gross = roundAmount(l.net.add(l.tax), currency);
    t.net = t.net.add(l.net);
    t.tax = t.tax.add(l.tax);
    t.gross = t.gross.add(l.gross);
  }
  return t;
}

/** invoice.rs `due_at`: `issued_at` + `days` whole days, null past the timestamp range. */
export function dueAt(issuedAt, days) {
  const s = unixOf(issuedAt) + days * 86400;
  return s <= MAX_UNIX ? stampOf(s) : null;
}

const periodJson = (p) => ({ from: stampOf(p.from), to: stampOf(p.to) });

/** A recomputed line as Rust serialises an `InvoiceLine` (absent options left out). */
function lineJson(l) {
  const o = { kind: l.kind, description: l.description, region: l.region };
  const put = (name, value) => {
    if (value !== undefined && value !== null) o[name] = value;
  };
  put('gpu_model', l.gpu_model);
  put('class', l.class);
  put('plan', l.plan);
  put('tier', l.tier);
  o.quantity = l.quantity.toString();
  o.unit = l.unit;
  put('gpu_seconds', l.gpu_seconds?.toString());
  put('measured_kwh', l.measured_kwh?.toString());
  put('pue', l.pue?.toString());
  o.unit_price = l.unit_price.toString();
  o.net = l.net.toScaled();
  put('tax_name', l.tax_name);
  o.tax_rate = l.tax_rate.toString();
  o.tax = l.tax.toScaled();
  o.gross = l.gross.toScaled();
  o.records = l.records;
  put('adjustment_for', l.adjustment_for && periodJson(l.adjustment_for));
  put('contract', l.contract);
  put('category', l.category);
  put('timing', l.timing);
  put('service_period', l.service_period && periodJson(l.service_period));
  return o;
}

const availabilityJson = (a) => {
  const o = {
    contract: a.contract, lease: a.lease, period: periodJson(a.period),
    leased_gpu_seconds: a.leased.toString(), present_gpu_seconds: a.present.toString(),
    availability: a.availability.toString(), target: a.target.toString(),
  };
  if (a.creditPercent !== null) o.credit_percent = a.creditPercent.toString();
  return o;
};

const allowanceJson = (a) => ({
  contract: a.contract, lease: a.lease, gpu_model: a.gpuModel, period: periodJson(a.period),
  included_gpu_seconds: a.included.toString(), used_gpu_seconds: a.used.toString(), overage_gpu_seconds: a.overage.toString(),
});

// ---------------------------------------------------------------- the comparison

/** Equality of JSON values (serde_json `Value`'s: members in any order). */
export function sameJson(a, b) {
  if (Array.isArray(a) || Array.isArray(b)) {
    return Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.every((x, i) => sameJson(x, b[i]));
  }
  if (isObject(a) && isObject(b)) {
    const ka = Object.keys(a);
    return ka.length === Object.keys(b).length && ka.every((k) => k in b && sameJson(a[k], b[k]));
  }
  return a === b;
}

const sortedKeys = (x, y) => [...new Set([...Object.keys(x), ...Object.keys(y)])].sort(byteOrder);
const memberDiffers = (x, y, k) => (k in x) !== (k in y) || !sameJson(x[k], y[k]);

/**
 * invoice.rs `first_difference`: at the first position i where the lines differ,
 * `lines[i].member` (the first differing member by name) or `lines[i]`; else the first of the
 * totals, due date and prepaid members that differs, else the first other member by name.
 */
export function firstDifference(a, b) {
  if (sameJson(a, b)) return null;
  const la = Array.isArray(a.lines) ? a.lines : [];
  const lb = Array.isArray(b.lines) ? b.lines : [];
  for (let i = 0; i < Math.max(la.length, lb.length); i++) {
    const [x, y] = [la[i], lb[i]];
    if (x !== undefined && y !== undefined && sameJson(x, y)) continue;
    if (!isObject(x) || !isObject(y)) return `lines[${i}]`;
    const k = sortedKeys(x, y).find((m) => memberDiffers(x, y, m));
    return k === undefined ? `lines[${i}]` : `lines[${i}].${k}`;
  }
  const order = ['net_total', 'tax_total', 'total', 'due_at', 'prepaid', 'amount_due'];
  return order.find((k) => memberDiffers(a, b, k)) ?? sortedKeys(a, b).find((k) => memberDiffers(a, b, k)) ?? 'invoice';
}

// ---------------------------------------------------------------- the check

/** The members an invoice keeps as issued (`..inv.clone()` in `InvoiceCheck::finish`). */
const KEPT = ['number', 'tenant', 'period', 'currency', 'issued_at', 'log_origin', 'checkpoint_size', 'checkpoint_root',
  'issuer', 'bill_to', 'payment_terms_days'];
/** The members a version 1 invoice keeps (`..self.clone()` in `InvoiceV1::recomputed`). */
const KEPT_V1 = ['number', 'tenant', 'period', 'currency', 'issued_at', 'log_origin', 'checkpoint_size', 'checkpoint_root'];

/**
 * The invoice as a bundle subject (bundle.js), invoice.rs `InvoiceCheck`: the context's prices,
 * leases, contracts, exclusions, prepaid lots and earlier invoices of the tenant are taken in,
 * the records rated as they pass, and `finish` recomputes the document and compares.
 */
export class InvoiceCheck {
  /** @param {object} invoice a document read by `parseInvoice` */
  constructor(invoice) {
    this.invoice = invoice;
    this.tenant = invoice.tenant;
    this.period = { from: unixOf(invoice.period.from), to: unixOf(invoice.period.to) };
    this.book = new PriceBook();
    this.earlier = [];
    this.excluded = new Map();
    this.contracts = new Contracts();
    this.leases = new Map();
    this.prepaid = new PrepaidBook();
    this.rating = null;
  }

  /** `InvoiceCheck::start`: the bundle is the invoice's (subject, checkpoint size and root). */
  checkHeader(header, anchor) {
    const mismatch = (m) => new Failure('checkpoint_mismatch', 'invoice', m);
    const inv = this.invoice;
    if (header.subject.invoice !== inv.number) throw mismatch('the bundle is not for this invoice');
    if (inv.checkpoint_size !== anchor.size || inv.checkpoint_root !== anchor.rootB64 || inv.log_origin !== anchor.origin) {
      throw mismatch("its checkpoint is not the bundle's");
    }
  }

  /** `InvoiceCheck::start_rating`: the scope is known once the context has been read. */
  startRating() {
    const contracts = this.contracts.all();
    const presence = new Presence(contracts, this.period, (l) => this.leases.get(l) ?? null);
    const scope = new InvoiceScope(this.period, this.earlier, this.excluded);
    return new InvoiceRating(scope, new Measurement(presence, new Metering(contracts, this.period)));
  }

  /** `Subject::context` (bundle.js passes the entry's `received_at` third). */
  async context(index, e, receivedAt) {
    const b = e.body;
    const own = b.tenant === this.tenant;
    switch (e.kind) {
      case 'invoice_issued':
        if (own && b.number !== this.invoice.number) {
          this.prepaid.apply(index, receivedAt, e.kind, b);
          this.earlier.push({ period: { from: unixOf(b.period_from), to: unixOf(b.period_to) }, size: b.checkpoint_size });
        }
        break;
      case 'record_excluded':
        if (own && !this.excluded.has(b.entry)) this.excluded.set(b.entry, b.reason);
        break;
      case 'contract_registered':
      case 'contract_amended':
        if (own) this.contracts.apply(e.kind, b);
        break;
      case 'prepayment':
        if (own) this.prepaid.apply(index, receivedAt, e.kind, b);
        break;
      case 'lease_registered':
        if (own) this.leases.set(b.lease, b);
        this.book.addEntry(e.kind, b);
        break;
      default:
        this.book.addEntry(e.kind, b);
    }
  }

  /** `Subject::record`: the tenant's, and in the invoice's period or an invoiced one. */
  async record(index, hash, e) {
    const b = e.body;
    if (b.tenant !== this.tenant) throw new Failure('wrong_tenant', `entry ${index}`, `the record is not ${this.tenant}'s`);
    this.rating ??= this.startRating();
    const rec = e.kind === 'gpu_usage' ? usageOf(b) : energyOf(b);
    if (this.rating.add(this.book, index, e.kind, rec).kind === 'outside') {
      throw new Failure('outside_period', `entry ${index}`, "the record is in neither the invoice's period nor an invoiced one");
    }
  }

  /**
   * `InvoiceCheck::finish`: the invoice recomputed must equal the invoice; `claim_mismatch`
   * names the first member that differs. Returns the recomputed document.
   */
  async finish() {
    const claimMismatch = (item, m) => new Failure('claim_mismatch', item, m);
    const inv = this.invoice;
    const c = inv.currency;
    const rated = (this.rating ?? this.startRating()).finish();
    if (rated.unpriced.length > 0) {
      throw claimMismatch('invoice', "the bundle's prices leave some of the period's usage unpriced");
    }
    if (!('format' in inv)) return this.finishV1(rated);
    const lines = linesV2(rated.lines.get(c) ?? []);
    let contract;
    try {
      contract = contractLines(this.contracts.all(), this.period, c, lines, rated.measurement);
    } catch (e) {
      if (!e.split) throw e;
      const { contract: id, span } = e.split;
      throw claimMismatch('period', `the period splits the billing period [${stampOf(span.from)}, ${stampOf(span.to)}) of contract ${id}, which has a commitment or an SLA: invoice whole billing periods`);
    }
    lines.push(...contract.lines, ...linesV2(rated.adjustments.get(c) ?? []));
    // The rates are the issuer's declaration; the log proves usage and net prices. A rate is a
    // fraction from 0 to 1: a crafted rate is named, not computed.
    for (let i = 0; i < Math.min(lines.length, inv.lines.length); i++) {
      const rate = Dec.parse(inv.lines[i].tax_rate);
      if (rate.cmp(Dec.int(1)) > 0) throw claimMismatch(`lines[${i}].tax_rate`, 'a tax rate is a fraction from 0 to 1');
      lines[i].tax_name = inv.lines[i].tax_name;
      lines[i].tax_rate = rate;
    }
    const t = applyTax(lines, c);
    const draws = this.prepaid.draws(inv.tenant, c, t.gross, inv.checkpoint_size, unixOf(inv.issued_at));
    const due = dueAt(inv.issued_at, inv.payment_terms_days);
    if (due === null) throw claimMismatch('due_at', 'the payment terms run past year 9999');
    const computed = { format: INVOICE_FORMAT_V2 };
    for (const k of KEPT) computed[k] = inv[k];
    Object.assign(computed, {
      due_at: due,
      lines: lines.map(lineJson),
      net_total: t.net.toScaled(),
      tax_total: t.tax.toScaled(),
      total: t.gross.toScaled(),
    });
    const lists = {
      excluded: rated.excluded,
      commitments: contract.commitments.map((m) => ({ contract: m.contract, committed: m.committed.toScaled(), drawn: m.drawn.toScaled(), true_up: m.true_up.toScaled() })),
      availability: contract.availability.map(availabilityJson),
      allowances: contract.allowances.map(allowanceJson),
      prepaid: draws.map((d) => ({ prepayment: d.prepayment, source: d.source, amount: d.amount.toScaled() })),
    };
    for (const [k, v] of Object.entries(lists)) if (v.length) computed[k] = v;
    const due2 = amountDue(t.gross, draws, c);
    if (due2 !== null) computed.amount_due = due2.toScaled();
    return this.compared(computed);
  }

  /** `InvoiceV1::recomputed`: the period's lines, then the adjustments; total = Σ amount. */
  finishV1(rated) {
    const c = this.invoice.currency;
    const lines = legacyLines([...(rated.lines.get(c) ?? []), ...(rated.adjustments.get(c) ?? [])]);
    const computed = {};
    for (const k of KEPT_V1) computed[k] = this.invoice[k];
    computed.lines = lines;
    computed.total = lines.reduce((t, l) => t.add(Dec.parseSigned(l.amount)), Dec.zero()).toScaled();
    return this.compared(computed);
  }

  /** The recomputed document, or `claim_mismatch` at the first member that differs. */
  compared(computed) {
    const item = firstDifference(this.invoice, computed);
    if (item) throw new Failure('claim_mismatch', item, 'the invoice differs from what the bundle recomputes');
    return computed;
  }
}
