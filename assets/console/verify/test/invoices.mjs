// Tests of the console verifier's invoice check (invoice.js), run with Node ≥ 20 and no npm
// packages, and without the `gpuledger` binary:
//
//     node assets/console/verify/test/invoices.mjs
//
// They verify the invoices the Rust ledger made, in tests/fixtures/{allowances, amendment,
// contract, golden-jan, golden-mar, prepaid, sla}/ (each an invoice, its evidence bundle and
// the log's verifier key), expecting PASS; then tampered copies, expecting FAIL with the
// reason and item `gpuledger verify --invoice` gives (crates/core/src/invoice.rs
// `InvoiceCheck::finish` and `first_difference` name them), and the same usage as version 1
// documents (crates/core/src/invoice/v1.rs). The rating rules are also checked on the worked
// examples of crates/core/src/rating.rs's tests, and InvoiceCheck on its own (context and
// records fed as bundle.js feeds them) on late records, energy, exclusions and price changes.
//
// With GPULEDGER_BIN set to the `gpuledger` binary, every case is also run through
// `gpuledger verify --invoice --json`, and its verdict and item must equal this verifier's.
// Exit status 0 when every test passed, 1 otherwise.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import * as verify from '../index.js';
import { parseStrict } from '../jcs.js';
import { Dec } from '../decimal.js';
import { PriceBook, Rater, graduate, usageOf, energyOf, roundAmount } from '../rating.js';
import { applyTax, firstDifference, parseInvoice, InvoiceCheck } from '../invoice.js';
import { results, test, assert, eq } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../../../..');
const FIXTURES = ['allowances', 'amendment', 'contract', 'golden-jan', 'golden-mar', 'prepaid', 'sla'];
const read = (name, file) => fs.readFileSync(path.join(root, 'tests/fixtures', name, file), 'utf8');
const fixture = (name) => ({
  invoice: parseStrict(read(name, 'invoice.json')),
  bundle: read(name, 'bundle.ndjson'),
  logKey: read(name, 'verifier_key.txt').trim(),
});

const bin = process.env.GPULEDGER_BIN || null;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'gpuledger-invoices-'));
let fileNo = 0;
let binaryChecks = 0;
const writeTmp = (name, content) => {
  const p = path.join(tmp, `${fileNo++}-${name}`);
  fs.writeFileSync(p, content);
  return p;
};

/** `gpuledger verify --invoice --json`'s verdict: 'PASS' or `reason item`. */
function binaryVerdict(invoiceText, bundle, logKey) {
  let out;
  const args = ['verify', '--invoice', writeTmp('invoice.json', invoiceText), '--bundle', writeTmp('bundle.ndjson', bundle), '--log-key', logKey, '--json'];
  try {
    out = execFileSync(bin, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    if (e.status !== 1) throw new Error(`gpuledger verify exited ${e.status}: ${e.stderr}`);
    out = e.stdout;
  }
  const report = JSON.parse(out.trim().split('\n').pop());
  binaryChecks++;
  return report.result === 'PASS' ? 'PASS' : `${report.reason} ${report.item}`;
}

/** Verifies `invoice` (an object or text) with `bundle`; expects 'PASS' or `reason item`. */
async function expect(invoice, bundle, logKey, want) {
  const text = typeof invoice === 'string' ? invoice : JSON.stringify(invoice);
  const r = await verify.verifyInvoice({ invoiceText: text, bundle, logKey });
  const got = r.ok ? 'PASS' : `${r.failure.reason} ${r.failure.item}`;
  if (got !== want) throw new Error(`expected ${want}, got ${got}${r.ok ? '' : `: ${r.failure.message}`}`);
  assert(Array.isArray(r.steps) && r.steps.length > 0, 'steps');
  if (!r.ok) assert(!r.steps.at(-1).ok && r.steps.slice(0, -1).every((s) => s.ok), 'the last step, only, failed');
  if (r.ok) assert(r.summary.witnesses && r.summary.invoice === [JSON.parse(text)].flat()[0].number, 'summary');
  if (bin) eq(binaryVerdict(text, bundle, logKey), want, 'gpuledger verify --invoice');
  return r;
}

/** A deep copy of `o` with `edit` applied (edit may return a replacement). */
const edited = (o, edit) => {
  const copy = structuredClone(o);
  return edit(copy) ?? copy;
};

/** Money arithmetic for the tests' consistent edits (2 minor digits). */
const money = (s) => Dec.parseSigned(s);
const plus = (a, b) => money(a).add(money(b)).toScaled();

/** Sets line `i`'s net to `net` and keeps its gross, the totals and amount_due consistent (tax 0). */
function setNet(inv, i, net) {
  const delta = money(net).sub(money(inv.lines[i].net)).toScaled();
  inv.lines[i].net = net;
  inv.lines[i].gross = plus(inv.lines[i].gross, delta);
  for (const k of ['net_total', 'total']) inv[k] = plus(inv[k], delta);
  if ('amount_due' in inv) inv.amount_due = plus(inv.amount_due, delta);
}

// ---------------------------------------------------------------- the Rust-made invoices

for (const name of FIXTURES) {
  await test(`${name}: the Rust-made invoice passes with its bundle`, async () => {
    const f = fixture(name);
    const r = await expect(f.invoice, f.bundle, f.logKey, 'PASS');
    eq([r.summary.total, r.summary.currency, r.summary.format], [f.invoice.total, f.invoice.currency, 'gpuledger-invoice/v2'], 'summary');
    // As served by POST /v1/invoices: an array of one invoice.
    await expect([f.invoice], f.bundle, f.logKey, 'PASS');
  });
}

/** [fixture, what, edit, expected] — the items are those InvoiceCheck::finish names. */
const CASES = [
  // Usage lines.
  ['prepaid', "a usage line's net alone", (i) => { i.lines[0].net = '1849.00'; }, 'claim_mismatch lines[0].net'],
  ['prepaid', "a usage line's net with its gross, the totals and amount_due kept consistent",
    (i) => setNet(i, 0, '1849.00'), 'claim_mismatch lines[0].gross'],
  ['sla', "a usage line's GPU-seconds", (i) => { i.lines[0].gpu_seconds = '5346001'; }, 'claim_mismatch lines[0].gpu_seconds'],
  ['sla', "a usage line's quantity", (i) => { i.lines[0].quantity = '1485.000001'; }, 'claim_mismatch lines[0].quantity'],
  ['sla', "a usage line's record count", (i) => { i.lines[0].records = 31; }, 'claim_mismatch lines[0].records'],
  ['sla', "a usage line's unit price", (i) => { i.lines[0].unit_price = '18.6'; }, 'claim_mismatch lines[0].unit_price'],
  ['sla', "a usage line's class", (i) => { i.lines[0].class = 'reserved'; }, 'claim_mismatch lines[0].class'],
  ['sla', "a usage line's description", (i) => { i.lines[0].description = 'GPU compute'; }, 'claim_mismatch lines[0].description'],
  ['sla', 'a usage line without its gpu_model', (i) => { delete i.lines[0].gpu_model; }, 'claim_mismatch lines[0].gpu_model'],
  // Fee lines.
  ['contract', "a fee line's quantity", (i) => { i.lines[2].quantity = '0.532259'; }, 'claim_mismatch lines[2].quantity'],
  ['contract', "a fee line's net, totals kept consistent", (i) => setNet(i, 2, '1651.00'), 'claim_mismatch lines[2].gross'],
  ['contract', "a fee line's timing", (i) => { i.lines[3].timing = 'advance'; }, 'claim_mismatch lines[3].timing'],
  ['contract', "a fee line's service period", (i) => { i.lines[2].service_period.from = '2027-01-01T00:00:00Z'; }, 'claim_mismatch lines[2].service_period'],
  ['contract', "a fee line's category", (i) => { i.lines[1].category = 'other'; }, 'claim_mismatch lines[1].category'],
  ['contract', "a once fee's unit price", (i) => { i.lines[1].unit_price = '400'; }, 'claim_mismatch lines[1].unit_price'],
  ['amendment', 'a fee prorated over the term before its amendment', (i) => { i.lines[1].quantity = '1'; }, 'claim_mismatch lines[1].quantity'],
  // SLA credits and availability.
  ['sla', "an SLA credit's net, totals kept consistent", (i) => setNet(i, 2, '-290.00'), 'claim_mismatch lines[2].gross'],
  ['sla', "an SLA credit's share", (i) => { i.lines[2].quantity = '0.25'; }, 'claim_mismatch lines[2].quantity'],
  ['golden-jan', "an SLA credit's description", (i) => { i.lines[3].description = i.lines[3].description.replace('99.6212', '99.7'); }, 'claim_mismatch lines[3].description'],
  ['sla', 'the availability', (i) => { i.availability[0].availability = '99.8983'; }, 'claim_mismatch availability'],
  ['sla', 'the present GPU-seconds', (i) => { i.availability[0].present_gpu_seconds = '5356800'; }, 'claim_mismatch availability'],
  ['golden-mar', 'a credit step where none applies', (i) => { i.availability[0].credit_percent = '10'; }, 'claim_mismatch availability'],
  ['sla', 'no availability', (i) => { delete i.availability; }, 'claim_mismatch availability'],
  // Included GPU-hours and overage.
  ['golden-jan', "an included line's GPU-seconds", (i) => { i.lines[1].gpu_seconds = '1916129.032259'; }, 'claim_mismatch lines[1].gpu_seconds'],
  ['golden-jan', "an overage line's net, totals kept consistent", (i) => setNet(i, 2, '2439.06'), 'claim_mismatch lines[2].gross'],
  ['allowances', "a late overage line's period", (i) => { i.lines[2].adjustment_for.from = '2026-12-01T00:00:00Z'; }, 'claim_mismatch lines[2].adjustment_for'],
  ['allowances', 'the used GPU-seconds of an allowance', (i) => { i.allowances[0].used_gpu_seconds = '864001'; }, 'claim_mismatch allowances'],
  // Commitments.
  ['contract', "a commitment's drawn", (i) => { i.commitments[0].drawn = '184.00'; }, 'claim_mismatch commitments'],
  ['amendment', "a commitment's committed", (i) => { i.commitments[0].committed = '3100.00'; }, 'claim_mismatch commitments'],
  ['contract', 'no commitments', (i) => { delete i.commitments; }, 'claim_mismatch commitments'],
  ['contract', "a true-up's net, totals kept consistent", (i) => setNet(i, 4, '300.00'), 'claim_mismatch lines[4].gross'],
  // Prepaid lots.
  ['prepaid', 'the prepaid draws', (i) => { i.prepaid[1].amount = '999.00'; i.amount_due = '786.00'; }, 'claim_mismatch prepaid'],
  ['prepaid', 'the drawing order', (i) => { i.prepaid.reverse(); }, 'claim_mismatch prepaid'],
  ['prepaid', 'amount_due alone', (i) => { i.amount_due = '784.00'; }, 'claim_mismatch amount_due'],
  ['prepaid', 'no prepaid draws', (i) => { delete i.prepaid; delete i.amount_due; }, 'claim_mismatch prepaid'],
  ['golden-jan', 'a draw on an expired lot', (i) => { i.issued_at = '2027-02-16T01:00:00Z'; i.due_at = '2027-03-18T01:00:00Z'; }, 'claim_mismatch prepaid'],
  // Lines removed and added.
  ['sla', 'the SLA credit line removed, totals kept consistent', (i) => { setNet(i, 2, '0.00'); i.lines.pop(); }, 'claim_mismatch lines[2]'],
  // The first member by name that differs: the fee's `category`, which the GPU line lacks.
  ['contract', 'the first line removed', (i) => { i.lines.shift(); }, 'claim_mismatch lines[0].category'],
  ['contract', 'a fee line added, totals kept consistent', (i) => {
    i.lines.push(structuredClone(i.lines[1]));
    for (const k of ['net_total', 'total']) i[k] = plus(i[k], '500.00');
  }, 'claim_mismatch lines[5]'],
  // Tax, totals and terms.
  ['contract', 'a tax rate above 1', (i) => { i.lines[3].tax_rate = '1.5'; }, 'claim_mismatch lines[3].tax_rate'],
  ['contract', 'a tax that is not net × rate', (i) => { i.lines[0].tax = '0.01'; i.lines[0].gross = '185.01'; i.tax_total = '0.01'; i.total = '2687.59'; }, 'claim_mismatch lines[0].gross'],
  ['contract', 'the total alone', (i) => { i.total = '2687.59'; }, 'claim_mismatch total'],
  ['contract', 'the net total alone', (i) => { i.net_total = '2687.5'; }, 'claim_mismatch net_total'],
  ['contract', 'the tax total alone', (i) => { i.tax_total = '0'; }, 'claim_mismatch tax_total'],
  ['contract', 'the due date', (i) => { i.due_at = '2027-03-30T01:00:00Z'; }, 'claim_mismatch due_at'],
  ['contract', 'an exclusion that the bundle does not hold', (i) => { i.excluded = [{ entry: 12, reason: 'disputed' }]; }, 'claim_mismatch excluded'],
  // The document and the bundle.
  ['contract', 'another number', (i) => { i.number = 'INV-000009'; }, 'checkpoint_mismatch invoice'],
  ['contract', 'another checkpoint root', (i) => { i.checkpoint_root = i.checkpoint_root.replace(/^./, (c) => (c === 'A' ? 'B' : 'A')); }, 'checkpoint_mismatch invoice'],
  ['contract', 'another checkpoint size', (i) => { i.checkpoint_size = 12; }, 'checkpoint_mismatch invoice'],
  ['contract', 'a period that splits a billing period of a contract with a commitment', (i) => { i.period.to = '2027-02-15T00:00:00Z'; }, 'claim_mismatch period'],
  ['contract', 'a period that leaves a record out', (i) => { i.period.to = '2027-01-02T00:00:00Z'; }, 'outside_period entry 7'],
  ['contract', 'an unknown member', (i) => { i.note = 'x'; }, 'malformed invoice'],
  ['contract', 'a quantity that is not a canonical decimal', (i) => { i.lines[0].quantity = '10.0'; }, 'malformed invoice'],
  // Without `format` a document is read as version 1, whose lines are in GPU-s or kWh.
  ['contract', 'a version 2 document without its format', (i) => { delete i.format; }, 'malformed invoice'],
  ['contract', 'another format', (i) => { i.format = 'gpuledger-invoice/v3'; }, 'malformed invoice'],
];

for (const [name, what, edit, want] of CASES) {
  await test(`${name}: ${what} → ${want}`, async () => {
    const f = fixture(name);
    await expect(edited(f.invoice, edit), f.bundle, f.logKey, want);
  });
}

await test('contract: tax at the rates the invoice declares (6 %) passes', async () => {
  const f = fixture('contract');
  const inv = edited(f.invoice, (i) => {
    let tax = Dec.zero();
    for (const l of i.lines) {
      l.tax_rate = '0.06';
      l.tax_name = 'VAT';
      l.tax = roundAmount(money(l.net).mul(Dec.parse('0.06')), 'CNY').toScaled();
      l.gross = plus(l.net, l.tax);
      tax = tax.add(money(l.tax));
    }
    i.tax_total = tax.toScaled();
    i.total = plus(i.net_total, i.tax_total);
  });
  eq([inv.tax_total, inv.total], ['161.26', '2848.84'], 'worked by hand: 11.10 + 30.00 + 99.00 + 0.32 + 20.84');
  await expect(inv, f.bundle, f.logKey, 'PASS');
});

await test('golden-jan: a tampered bundle record fails at its signature', async () => {
  const f = fixture('golden-jan');
  const lines = f.bundle.split('\n');
  const k = lines.findIndex((l) => l.includes('"kind":"gpu_usage"'));
  const index = parseStrict(lines[k]).index;
  // One GPU of the two, for the same interval: a valid body, signed by nobody.
  lines[k] = lines[k].replace('"gpu_count":"2"', '"gpu_count":"1"').replace('"gpu_seconds":"86400"', '"gpu_seconds":"43200"');
  assert(lines[k].includes('"gpu_seconds":"43200"'), 'the record was altered');
  await expect(f.invoice, lines.join('\n'), f.logKey, `entry_signature entry ${index}`);
});

await test('prepaid: a bundle for another invoice', async () => {
  const f = fixture('prepaid');
  await expect(fixture('contract').invoice, f.bundle, f.logKey, 'checkpoint_mismatch invoice');
});

// ---------------------------------------------------------------- the rules, unit by unit

const usage = (region, lease, count, start, end) => usageOf({
  tenant: 'acme', region, gpu_model: 'H100', node: 'n1', start, end, gpu_count: count,
  gpu_seconds: Dec.parse(count).mul(Dec.int((Date.parse(end) - Date.parse(start)) / 1000)).toString(),
  ...(lease ? { lease } : {}),
});
const card = (region, price, at = '2026-11-01T00:00:00Z', cls = 'on_demand') =>
  ['rate_card', { region, gpu_model: 'H100', lease_class: cls, currency: 'CNY', price_per_gpu_hour: price, effective_from: at }];
const spot = (at, price) => ['spot_price', { region: 'west', gpu_model: 'H100', currency: 'CNY', price_per_gpu_hour: price, effective_from: at }];

await test('rating: the golden scenario of rating.rs to the last digit', async () => {
  const book = new PriceBook();
  for (const [kind, b] of [
    card('west', '18.5'), card('east', '24'),
    ['lease_registered', { lease: 'spot-1', class: 'spot' }],
    spot('2026-11-10T00:00:00Z', '9'), spot('2026-11-10T00:15:00Z', '7.2'), spot('2026-11-10T00:40:00Z', '11.35'), spot('2026-11-10T00:50:00Z', '8'),
    ['region_params', { region: 'west', currency: 'CNY', electricity_price_per_kwh: '0.28', pue: '1.08', carbon_g_per_kwh: '530', effective_from: '2026-11-01T00:00:00Z' }],
  ]) book.addEntry(kind, b);
  const r = new Rater(Date.parse('2026-11-01T00:00:00Z') / 1000);
  r.addUsage(book, usage('west', null, '8', '2026-11-10T00:00:00Z', '2026-11-10T01:00:00Z'));
  r.addUsage(book, usage('east', null, '0.5', '2026-11-10T00:00:00Z', '2026-11-10T00:10:00Z'));
  r.addUsage(book, usage('west', 'spot-1', '2', '2026-11-10T00:05:00Z', '2026-11-10T00:55:00Z'));
  r.addEnergy(book, energyOf({ tenant: 'acme', region: 'west', start: '2026-11-10T00:00:00Z', kwh: '12.5' }));
  r.addEnergy(book, energyOf({ tenant: 'acme', region: 'east', start: '2026-11-10T00:00:00Z', kwh: '1' }));
  const { lines, unpriced } = r.finish();
  eq(lines.get('CNY').map((l) => l.amount.toScaled()), ['2.00', '148.00', '6.00', '1.33', '3.00', '3.78', '3.78'], 'amounts in key order');
  eq(unpriced.map((u) => [u.what, u.quantity.toString()]), [['no region parameters in force', '1']], 'unpriced');
});

await test('rating: no price is unpriced, never zero; a price change splits on-demand too', async () => {
  const r = new Rater(0);
  r.addUsage(new PriceBook(), usage('west', null, '1', '2026-11-10T00:00:00Z', '2026-11-10T00:00:10Z'));
  const out = r.finish();
  eq([out.lines.size, out.unpriced[0].what, out.unpriced[0].quantity.toString()], [0, 'no rate card in force', '10'], 'unpriced');
  const book = new PriceBook();
  book.addEntry(...card('west', '36', '2026-11-10T00:00:30Z'));
  const pieces = book.rateUsage(usage('west', null, '1', '2026-11-10T00:00:00Z', '2026-11-10T00:01:00Z'));
  eq(pieces.map((p) => [p.gpuSeconds.toString(), p.price && p.price.price.toString()]), [['30', null], ['30', '36']], 'pieces');
});

await test('rating: graduate splits exactly at each bound', async () => {
  const t = [['10', '3'], ['25', '2'], [null, '1']].map(([b, p]) => ({ upTo: b && Dec.parse(b), price: Dec.parse(p) }));
  const g = (from, to, tiers = t) => graduate(tiers, Dec.parse(from), Dec.parse(to)).map(([i, q]) => [i, q.toString()]);
  eq(g('0', '91600'), [[0, '36000'], [1, '54000'], [2, '1600']], '0..91600');
  eq(g('40000', '50000'), [[1, '10000']], 'inside one tier');
  eq(g('89999.75', '90000.5'), [[1, '0.25'], [2, '0.5']], 'across a bound');
  eq(g('36000', '36000'), [], 'nothing');
  eq(g('90000', '1000000000'), [[2, '999910000']], 'the open tier');
  eq(g('5', '7', t.slice(2)), [[0, '2']], 'one open tier');
});

await test('rating: graduated tiers to the last digit, and a late record continues the count', async () => {
  const book = new PriceBook();
  for (const [kind, b] of [
    card('west', '18.5'), card('east', '24'),
    ['volume_tiers', { plan: 'volume', region: 'west', gpu_model: 'H100', lease_class: 'on_demand', currency: 'CNY', effective_from: '2026-11-01T00:00:00Z',
      tiers: [{ up_to_gpu_hours: '10', price_per_gpu_hour: '20.5' }, { up_to_gpu_hours: '25', price_per_gpu_hour: '17.25' }, { price_per_gpu_hour: '13.333' }] }],
    ['tenant_plan', { tenant: 'acme', plan: 'volume', effective_from: '2026-11-01T00:00:00Z' }],
    ['lease_registered', { lease: 'spot-1', class: 'spot' }],
    spot('2026-11-01T00:00:00Z', '9'),
  ]) book.addEntry(kind, b);
  const from = Date.parse('2026-11-01T00:00:00Z') / 1000;
  const r = new Rater(from);
  r.addUsage(book, usage('west', null, '2.5', '2026-11-10T02:00:00Z', '2026-11-10T09:46:40Z'));
  r.addUsage(book, usage('west', null, '3', '2026-11-10T00:00:00Z', '2026-11-10T02:00:00Z'));
  r.addUsage(book, usage('east', null, '1', '2026-11-10T00:00:00Z', '2026-11-10T01:00:00Z'));
  r.addUsage(book, usage('west', 'spot-1', '2', '2026-11-10T00:00:00Z', '2026-11-10T00:30:00Z'));
  const cny = r.finish().lines.get('CNY');
  eq(cny.map((l) => [l.quantity.toString(), l.amount.toScaled(), l.key.tier ? l.key.tier.tier : null]),
    [['3600', '24.00', null], ['36000', '205.00', 1], ['54000', '258.75', 2], ['1600', '5.93', 3], ['3600', '9.00', null]], 'lines');
  eq([cny[1].records, cny[1].key.tier.plan], [2, 'volume'], 'tier 1');
  const late = new Rater(from);
  late.addInvoicedUsage(book, usage('west', null, '3', '2026-11-10T00:00:00Z', '2026-11-10T02:00:00Z'));
  late.addInvoicedUsage(book, usage('east', null, '3', '2026-11-10T00:00:00Z', '2026-11-10T02:00:00Z'));
  late.addUsage(book, usage('west', null, '1', '2026-11-11T00:00:00Z', '2026-11-11T05:00:00Z'));
  eq(late.finish().lines.get('CNY').map((l) => l.amount.toScaled()), ['82.00', '17.25'], 'the count continues');
});

await test('rounding is half-even per currency; tax per line, totals exact sums (invoice.rs)', async () => {
  eq([['2.345', 'CNY'], ['2.355', 'CNY'], ['1234.5', 'JPY'], ['1.0005', 'KWD'], ['-0.125', 'CNY']].map(([d, c]) => roundAmount(Dec.parseSigned(d), c).toScaled()),
    ['2.34', '2.36', '1234', '1.000', '-0.12'], 'round_amount');
  const line = (net, rate) => ({ net: Dec.parseSigned(net), tax_rate: Dec.parse(rate) });
  const lines = [line('0.25', '0.06'), line('0.75', '0.06'), line('10.00', '0')];
  const t = applyTax(lines, 'CNY');
  eq(lines.map((l) => [l.tax.toScaled(), l.gross.toScaled()]), [['0.02', '0.27'], ['0.04', '0.79'], ['0.00', '10.00']], 'lines');
  eq([t.net.toScaled(), t.tax.toScaled(), t.gross.toScaled()], ['11.00', '0.06', '11.06'], 'totals');
  eq(applyTax([], 'JPY').gross.toScaled(), '0', 'no lines, JPY');
  eq(applyTax([], 'CNY').gross.toScaled(), '0.00', 'no lines, CNY');
});

await test('first_difference names the field (invoice.rs)', async () => {
  const a = { lines: [{ net: '1.00', tax: '0.06' }], total: '1.06' };
  eq(firstDifference(a, { lines: [{ net: '1.00', tax: '0.07' }], total: '1.06' }), 'lines[0].tax', 'a line member');
  eq(firstDifference(a, { ...a, total: '1.07' }), 'total', 'a total');
  eq(firstDifference(a, a), null, 'equal');
  eq(firstDifference(a, { ...a, lines: [] }), 'lines[0]', 'a line missing');
  eq(firstDifference({ ...a, zeta: 1, amount_due: '1' }, { ...a, zeta: 2, amount_due: '2' }), 'amount_due', 'the computed members first');
});

await test('parseInvoice reads what Rust writes back: empty lists and null options left out, amounts kept', async () => {
  const f = fixture('contract');
  const inv = parseInvoice(JSON.stringify(edited(f.invoice, (i) => { i.excluded = []; i.lines[0].contract = null; })));
  assert(!('excluded' in inv) && !('contract' in inv.lines[0]), 'left out');
  eq(inv.lines[0].net, '185.00', 'the amount keeps its scale');
  for (const [what, edit] of [
    ['amount_due null', (i) => { i.amount_due = null; }],
    ['an amount with a plus', (i) => { i.total = '+1.00'; }],
    ['a negative quantity', (i) => { i.lines[0].quantity = '-1'; }],
    ['a timestamp with milliseconds', (i) => { i.due_at = '2027-03-31T01:00:00.000Z'; }],
    ['an unknown line member', (i) => { i.lines[0].note = 'x'; }],
    ['another format', (i) => { i.format = 'gpuledger-invoice/v3'; }],
  ]) {
    let failure = null;
    try {
      parseInvoice(JSON.stringify(edited(f.invoice, edit)));
    } catch (e) {
      failure = e;
    }
    eq(failure && [failure.reason, failure.item], ['malformed', 'invoice'], what);
  }
});

/** A version 1 document (invoice/v1.rs) of a fixture's usage lines: GPU-seconds, an amount each. */
function versionOne(name) {
  const v2 = fixture(name).invoice;
  const keep = ['number', 'tenant', 'period', 'currency', 'issued_at', 'log_origin', 'checkpoint_size', 'checkpoint_root'];
  const lines = v2.lines.filter((l) => l.kind === 'gpu').map((l) => ({
    kind: 'gpu', region: l.region, gpu_model: l.gpu_model, class: l.class, quantity: l.gpu_seconds, unit: 'GPU-s',
    unit_price: l.unit_price, amount: l.net, records: l.records,
  }));
  const total = lines.reduce((t, l) => t.add(money(l.amount)), Dec.zero()).toScaled();
  return { ...Object.fromEntries(keep.map((k) => [k, v2[k]])), lines, total };
}

for (const [what, edit, want] of [
  ['passes (usage lines only: no contract lines, no prepaid draws)', () => {}, 'PASS'],
  ['with a quantity spelt with a trailing zero (read as a number)', (i) => { i.lines[0].quantity += '.0'; }, 'PASS'],
  ['with a member the version 1 reader ignores', (i) => { i.note = 'x'; }, 'PASS'],
  ["with a line's amount changed", (i) => { i.lines[0].amount = '27472.51'; }, 'claim_mismatch lines[0].amount'],
  ['with its total without the minor digits', (i) => { i.total = '27472.5'; }, 'claim_mismatch total'],
  ['with a line in GPU-hours', (i) => { i.lines[0].unit = 'GPU-h'; }, 'malformed invoice'],
  ['with a line added', (i) => { i.lines.push({ ...i.lines[0] }); }, 'claim_mismatch lines[1]'],
]) {
  await test(`sla as a version 1 document ${what} → ${want}`, async () => {
    const f = fixture('sla');
    const r = await expect(edited(versionOne('sla'), edit), f.bundle, f.logKey, want);
    if (r.ok) eq([r.summary.format, r.summary.total, 'net_total' in r.summary], ['gpuledger-invoice/v1', '27472.50', false], 'summary');
  });
}

// ---------------------------------------------------------------- InvoiceCheck on its own

// A February invoice after a January one (checkpoint size 10), fed to InvoiceCheck as
// bundle.js would (context, then records) without a bundle: an invoiced record, a late one,
// the period's usage and energy, an excluded record. Worked by hand from docs/RATING.md.
const FEB = {
  format: 'gpuledger-invoice/v2', number: 'INV-000002', tenant: 'acme',
  period: { from: '2027-02-01T00:00:00Z', to: '2027-03-01T00:00:00Z' }, currency: 'CNY',
  issued_at: '2027-03-01T01:00:00Z', log_origin: 'test/log', checkpoint_size: 20, checkpoint_root: 'x',
  issuer: { address: [], name: 'test/log' }, bill_to: { address: [], name: 'acme', tenant: 'acme' },
  payment_terms_days: 30, due_at: '2027-03-31T01:00:00Z',
  lines: [
    { kind: 'gpu', description: 'GPU compute, H100, west, on-demand', region: 'west', gpu_model: 'H100', class: 'on_demand', quantity: '2', unit: 'GPU-h',
      gpu_seconds: '7200', unit_price: '18.5', net: '37.00', tax_rate: '0', tax: '0.00', gross: '37.00', records: 1 },
    // 12.5 kWh × PUE 1.08 = 13.5 billed kWh at 0.28: 3.78.
    { kind: 'energy', description: 'Electricity, west, PUE 1.08', region: 'west', quantity: '13.5', unit: 'kWh', measured_kwh: '12.5', pue: '1.08',
      unit_price: '0.28', net: '3.78', tax_rate: '0', tax: '0.00', gross: '3.78', records: 1 },
    { kind: 'gpu', description: 'GPU compute, H100, west, on-demand', region: 'west', gpu_model: 'H100', class: 'on_demand', quantity: '1', unit: 'GPU-h',
      gpu_seconds: '3600', unit_price: '18.5', net: '18.50', tax_rate: '0', tax: '0.00', gross: '18.50', records: 1,
      adjustment_for: { from: '2027-01-01T00:00:00Z', to: '2027-02-01T00:00:00Z' } },
  ],
  net_total: '59.28', tax_total: '0.00', total: '59.28',
  excluded: [{ entry: 13, reason: 'disputed' }],
};
const CONTEXT = [
  [1, 'rate_card', { region: 'west', gpu_model: 'H100', lease_class: 'on_demand', currency: 'CNY', price_per_gpu_hour: '18.5', effective_from: '2027-01-01T00:00:00Z' }],
  [2, 'region_params', { region: 'west', currency: 'CNY', electricity_price_per_kwh: '0.28', pue: '1.08', carbon_g_per_kwh: '530', effective_from: '2027-01-01T00:00:00Z' }],
  [9, 'invoice_issued', { number: 'INV-000001', tenant: 'acme', period_from: '2027-01-01T00:00:00Z', period_to: '2027-02-01T00:00:00Z', currency: 'CNY', total: '0.00', checkpoint_size: 10, invoice_sha256: '0'.repeat(64) }],
  [15, 'record_excluded', { tenant: 'acme', entry: 13, reason: 'disputed' }],
  [16, 'record_excluded', { tenant: 'acme', entry: 13, reason: 'twice' }],
];
const gpu = (start, end, count) => ({
  tenant: 'acme', region: 'west', gpu_model: 'H100', node: 'n1', start, end, gpu_count: count,
  gpu_seconds: String(Number(count) * ((Date.parse(end) - Date.parse(start)) / 1000)),
});
const RECORDS = [
  [5, 'gpu_usage', gpu('2027-01-10T00:00:00Z', '2027-01-10T02:00:00Z', '1')],
  [11, 'gpu_usage', gpu('2027-01-20T00:00:00Z', '2027-01-20T01:00:00Z', '1')],
  [12, 'gpu_usage', gpu('2027-02-02T00:00:00Z', '2027-02-02T01:00:00Z', '2')],
  [13, 'gpu_usage', gpu('2027-02-03T00:00:00Z', '2027-02-03T01:00:00Z', '4')],
  [14, 'energy', { tenant: 'acme', region: 'west', node: 'n1', start: '2027-02-02T00:00:00Z', end: '2027-02-02T01:00:00Z', kwh: '12.5' }],
];

/** Runs InvoiceCheck on `invoice` with the context and records given: 'PASS' or `reason item`. */
async function checked(invoice, records = RECORDS, context = CONTEXT) {
  try {
    const check = new InvoiceCheck(parseInvoice(JSON.stringify(invoice)));
    for (const [i, kind, body] of context) await check.context(i, { kind, body }, '2027-02-01T01:00:00Z');
    for (const [i, kind, body] of records) await check.record(i, new Uint8Array(32), { kind, body });
    await check.finish();
    return 'PASS';
  } catch (e) {
    return `${e.reason} ${e.item}`;
  }
}

await test('InvoiceCheck: late records as adjustment lines, energy, exclusions, worked by hand', async () => {
  eq(await checked(FEB), 'PASS', 'the invoice');
  eq(await checked(edited(FEB, (i) => { i.lines[2].adjustment_for.to = '2027-01-31T00:00:00Z'; })), 'claim_mismatch lines[2].adjustment_for', 'the adjustment period');
  eq(await checked(edited(FEB, (i) => { i.lines[1].quantity = '12.5'; })), 'claim_mismatch lines[1].quantity', 'billed kWh');
  eq(await checked(edited(FEB, (i) => { i.lines[1].pue = '1.1'; })), 'claim_mismatch lines[1].pue', 'the PUE');
  eq(await checked(edited(FEB, (i) => { delete i.excluded; })), 'claim_mismatch excluded', 'the exclusion, first reason kept');
  eq(await checked(edited(FEB, (i) => { i.excluded[0].reason = 'twice'; })), 'claim_mismatch excluded', 'the first reason');
  // The invoiced record (entry 5) becomes late when the earlier invoice was computed below it.
  const context = CONTEXT.map(([i, k, b]) => (k === 'invoice_issued' ? [i, k, { ...b, checkpoint_size: 5 }] : [i, k, b]));
  eq(await checked(FEB, RECORDS, context), 'claim_mismatch lines[2].gpu_seconds', 'two late records');
  // A record in no period the invoice covers.
  eq(await checked(FEB, [[17, 'gpu_usage', gpu('2026-12-10T00:00:00Z', '2026-12-10T01:00:00Z', '1')]]), 'outside_period entry 17', 'December');
  eq(await checked(FEB, [[17, 'gpu_usage', { ...gpu('2027-02-10T00:00:00Z', '2027-02-10T01:00:00Z', '1'), tenant: 'other' }]]), 'wrong_tenant entry 17', "another tenant's");
  // Usage without a price in force in the period fails the invoice; energy without region parameters too.
  eq(await checked(FEB, RECORDS, CONTEXT.filter(([, k]) => k !== 'region_params')), 'claim_mismatch invoice', 'unpriced');
});

await test('InvoiceCheck: a rate change inside a record splits it; a spot lease uses spot prices', async () => {
  const context = [
    ...CONTEXT,
    [3, 'rate_card', { region: 'west', gpu_model: 'H100', lease_class: 'on_demand', currency: 'CNY', price_per_gpu_hour: '20', effective_from: '2027-02-02T00:30:00Z' }],
    [4, 'lease_registered', { lease: 'spot-1', tenant: 'acme', class: 'spot', from: '2027-01-01T00:00:00Z', nodes: [{ node: 'n1', gpu_model: 'H100', count: '1' }] }],
    [6, 'spot_price', { region: 'west', gpu_model: 'H100', currency: 'CNY', price_per_gpu_hour: '9.99', effective_from: '2027-02-01T00:00:00Z' }],
  ];
  const records = [
    ...RECORDS,
    [18, 'gpu_usage', { ...gpu('2027-02-04T00:00:00Z', '2027-02-04T00:10:00Z', '1'), lease: 'spot-1' }],
  ];
  const line = (cls, seconds, hours, price, net) => ({
    kind: 'gpu', description: `GPU compute, H100, west, ${cls === 'spot' ? 'spot' : 'on-demand'}`, region: 'west', gpu_model: 'H100', class: cls,
    quantity: hours, unit: 'GPU-h', gpu_seconds: seconds, unit_price: price, net, tax_rate: '0', tax: '0.00', gross: net, records: 1,
  });
  const inv = edited(FEB, (i) => {
    // Record 12 (2 GPUs, 00:00–01:00): 3600 GPU-s at 18.5 = 18.50, then 3600 at 20 = 20.00;
    // spot: 600 GPU-s at 9.99 = 1.665 → 1.66 (half-even); 0.166667 GPU-h.
    i.lines.splice(0, 1, line('on_demand', '3600', '1', '18.5', '18.50'), line('on_demand', '3600', '1', '20', '20.00'), line('spot', '600', '0.166667', '9.99', '1.66'));
    i.net_total = i.total = '62.44';
  });
  eq(await checked(inv, records, context), 'PASS', 'split and spot');
});

fs.rmSync(tmp, { recursive: true, force: true });
console.log(`\n${results.passed} passed, ${results.failures.length} failed${bin ? `; ${binaryChecks} verdicts compared with ${bin}` : '; GPULEDGER_BIN not set: verdicts not compared with gpuledger verify'}`);
if (results.failures.length) {
  console.log(`failed:\n  ${results.failures.join('\n  ')}`);
  process.exit(1);
}
