// Tests of the console verifier's prepayment rules (§5.20 and §6.7, prepayments), run with
// Node ≥ 20 and no npm packages, and without the `gpuledger` binary:
//
//     node assets/console/verify/test/prepaid.mjs
//
// As contracts.mjs: the body checks through leaf.js's checkEnvelope (an envelope with a
// signature of the right length that is never verified), the admission rules through
// admission.js's Admission (apply the context, then check an entry at its index).
// Exit status 0 when every test passed, 1 otherwise.

import { checkEnvelope, KINDS, LEDGER_KINDS, ROLE_KINDS, MAX_EXTERNAL_REFERENCE_BYTES, minorUnits } from '../leaf.js';
import { Admission } from '../admission.js';
import { results, test, assert, eq } from './harness.mjs';

/** The field a message starts with (`body.amount`), or ''. */
const fieldOf = (message) => /^body\.[A-Za-z0-9_.[\]]+/.exec(message)?.[0].replace(/\.$/, '') ?? '';

/**
 * The verdict of checkEnvelope on a prepayment body: 'PASS', `<code> <field>` when the message
 * starts with a reason code and a field, else the whole message (a form error of the shape,
 * reported as plain `leaf_invalid`).
 */
async function bodyVerdict(body) {
  const env = { v: 3, kind: 'prepayment', signer: 'ledger', key_id: '0123456789abcdef', seq: 1, body, sig: `${'A'.repeat(86)}==` };
  try {
    await checkEnvelope(env, 'gpuledger.test/prepaid');
    return 'PASS';
  } catch (e) {
    const m = /^([a-z_]+): (.*)$/s.exec(e.message);
    return m && fieldOf(m[2]) ? `${m[1]} ${fieldOf(m[2])}` : e.message;
  }
}

/** The spec's example body. */
const P = {
  amount: '5000.00',
  currency: 'CNY',
  expires_at: '2028-01-01T00:00:00Z',
  reference: 'TOPUP-2027-0042',
  source: 'purchase',
  tenant: 'acme',
};
const without = (o, k) => Object.fromEntries(Object.entries(o).filter(([m]) => m !== k));

await test('prepayment is a ledger kind', async () => {
  assert(KINDS.has('prepayment'), 'a kind');
  assert(LEDGER_KINDS.has('prepayment'), 'signed by the log key only (bundle.js keyFor)');
  for (const [role, kinds] of Object.entries(ROLE_KINDS)) assert(!kinds.has('prepayment'), `not a ${role} kind`);
  eq(MAX_EXTERNAL_REFERENCE_BYTES, 128, 'MAX_EXTERNAL_REFERENCE_BYTES');
  eq(['CNY', 'USD', 'EUR', 'JPY', 'KRW', 'VND', 'CLP', 'ISK', 'UGX', 'BHD', 'KWD', 'OMR', 'JOD', 'TND', 'IQD', 'LYD'].map(minorUnits),
    [2, 2, 2, 0, 0, 0, 0, 0, 0, 3, 3, 3, 3, 3, 3, 3], 'minor units (rating.rs minor_units)');
});

await test('prepayment bodies that pass (§5.20)', async () => {
  for (const [what, body] of [
    ["the spec's example", P],
    ['a grant', { ...P, source: 'grant' }],
    ['no expires_at', without(P, 'expires_at')],
    ['a whole amount', { ...P, amount: '5000' }],
    ['one decimal place', { ...P, amount: '5000.5' }],
    ['an amount of 0.01', { ...P, amount: '0.01' }],
    ['an amount of 10^12', { ...P, amount: '1000000000000' }],
    ['an amount of 10^12.00', { ...P, amount: '1000000000000.00' }],
    ['JPY without decimals', { ...P, currency: 'JPY', amount: '500000' }],
    ['KWD with 3 decimals', { ...P, currency: 'KWD', amount: '12.345' }],
    ['BHD with 2 decimals', { ...P, currency: 'BHD', amount: '12.34' }],
    ['a reference of 128 bytes', { ...P, reference: 'R'.repeat(128) }],
    ['a reference of 128 bytes in 64 two-byte characters', { ...P, reference: '×'.repeat(64) }],
    ['a reference in Chinese with inner spaces', { ...P, reference: '充值 2027 第42号' }],
    ['a reference with a pipe', { ...P, reference: 'bank|0042' }],
    // Rust's str::trim takes no U+FEFF, and it is no control character: record.rs passes it.
    ['a reference ending in a byte-order mark', { ...P, reference: 'TOPUP-1\ufeff' }],
  ]) eq(await bodyVerdict(body), 'PASS', what);
});

await test('prepayment bodies refused with the code and field of the spec (§5.20)', async () => {
  for (const [what, body, want] of [
    // The reference (as payment.external_reference).
    ['an empty reference', { ...P, reference: '' }, 'invalid_field body.reference'],
    ['a reference of 129 bytes', { ...P, reference: 'R'.repeat(129) }, 'invalid_field body.reference'],
    ['a reference of 129 bytes in 65 characters', { ...P, reference: `${'×'.repeat(64)}R` }, 'invalid_field body.reference'],
    ['a reference with a leading space', { ...P, reference: ' TOPUP-1' }, 'invalid_field body.reference'],
    ['a reference with a trailing space', { ...P, reference: 'TOPUP-1 ' }, 'invalid_field body.reference'],
    ['a reference with a trailing ideographic space', { ...P, reference: 'TOPUP-1\u3000' }, 'invalid_field body.reference'],
    ['a reference of a space', { ...P, reference: ' ' }, 'invalid_field body.reference'],
    ['a reference with a newline', { ...P, reference: 'TOPUP\n1' }, 'invalid_field body.reference'],
    ['a reference with a tab', { ...P, reference: 'TOPUP\t1' }, 'invalid_field body.reference'],
    ['a reference with a C1 control', { ...P, reference: 'TOPUP\u00851' }, 'invalid_field body.reference'],
    // The source.
    ['source refund', { ...P, source: 'refund' }, 'invalid_field body.source'],
    ['source Purchase', { ...P, source: 'Purchase' }, 'invalid_field body.source'],
    ['an empty source', { ...P, source: '' }, 'invalid_field body.source'],
    // The amount.
    ['a zero amount', { ...P, amount: '0' }, 'quantity_out_of_range body.amount'],
    ['a zero amount with decimals', { ...P, amount: '0.00' }, 'quantity_out_of_range body.amount'],
    ['an amount above 10^12', { ...P, amount: '1000000000000.01' }, 'quantity_out_of_range body.amount'],
    ['an amount of 10^13', { ...P, amount: '10000000000000' }, 'quantity_out_of_range body.amount'],
    ['3 decimals in CNY', { ...P, amount: '5000.001' }, 'invalid_field body.amount'],
    ['3 decimals in CNY, trailing zeros', { ...P, amount: '5000.000' }, 'invalid_field body.amount'],
    ['4 decimals in USD', { ...P, currency: 'USD', amount: '1.0000' }, 'invalid_field body.amount'],
    ['decimals in JPY', { ...P, currency: 'JPY', amount: '500000.0' }, 'invalid_field body.amount'],
    ['4 decimals in KWD', { ...P, currency: 'KWD', amount: '12.3450' }, 'invalid_field body.amount'],
  ]) eq(await bodyVerdict(body), want, what);
  // Form errors (plain leaf_invalid): the message names what is wrong.
  for (const [what, body, want] of [
    ['an unknown member', { ...P, note: 'welcome credit' }, /^body has an unknown member note$/],
    ['no tenant', without(P, 'tenant'), /^body has no member tenant$/],
    ['no reference', without(P, 'reference'), /^body has no member reference$/],
    ['no source', without(P, 'source'), /^body has no member source$/],
    ['no currency', without(P, 'currency'), /^body has no member currency$/],
    ['no amount', without(P, 'amount'), /^body has no member amount$/],
    ['expires_at null', { ...P, expires_at: null }, /^body\.expires_at is not a string$/],
    ['a number amount', { ...P, amount: 5000 }, /^body\.amount is not a string$/],
    ['a number reference', { ...P, reference: 42 }, /^body\.reference is not a string$/],
    ['the reserved tenant id', { ...P, tenant: 'ledger' }, /^body\.tenant "ledger" is reserved/],
    ['a tenant that is no id', { ...P, tenant: 'acme corp' }, /^body\.tenant is not an identifier$/],
    ['a lower-case currency', { ...P, currency: 'cny' }, /^body\.currency is not an ISO 4217 code$/],
    ['a four-letter currency', { ...P, currency: 'CNYY' }, /^body\.currency is not an ISO 4217 code$/],
    ['an amount with 5 decimals', { ...P, amount: '1.00000' }, /^body\.amount is not an amount/],
    ['an amount with a leading zero', { ...P, amount: '05000' }, /^body\.amount is not an amount/],
    ['a negative amount', { ...P, amount: '-5000.00' }, /^body\.amount is not an amount/],
    ['an amount with an exponent', { ...P, amount: '5e3' }, /^body\.amount is not an amount/],
    ['expires_at not a timestamp', { ...P, expires_at: '2028-01-01' }, /^body\.expires_at is not a timestamp$/],
    ['expires_at on 30 February', { ...P, expires_at: '2028-02-30T00:00:00Z' }, /^body\.expires_at is not a timestamp$/],
  ]) {
    const got = await bodyVerdict(body);
    assert(want.test(got), `${what}: ${got}`);
  }
});

await test("prepayment body checks in the spec's order", async () => {
  // Each body breaks every field from one on; the first is named.
  const bad = { tenant: 'ledger', reference: ' x', source: 'gift', currency: 'cny', amount: '0.001', expires_at: 'soon' };
  const steps = [
    ['tenant', /^body\.tenant "ledger" is reserved/],
    ['reference', /^invalid_field body\.reference$/],
    ['source', /^invalid_field body\.source$/],
    ['currency', /^body\.currency is not an ISO 4217 code$/],
    ['amount', /^invalid_field body\.amount$/],
    ['expires_at', /^body\.expires_at is not a timestamp$/],
  ];
  let body = { ...bad };
  for (const [k, want] of steps) {
    const got = await bodyVerdict(body);
    assert(want.test(got), `${k} first: ${got}`);
    body = { ...body, [k]: P[k] };
  }
  eq(await bodyVerdict(body), 'PASS', 'every field fixed');
  // A zero amount in a currency without decimals is out of range, not a decimal-place error.
  eq(await bodyVerdict({ ...P, currency: 'JPY', amount: '0.00' }), 'quantity_out_of_range body.amount', 'zero before the minor unit');
});

/**
 * The context: tenants acme (1) and beta (2); acme's prepayment TOPUP-1 (3), received
 * 2027-01-03T10:00Z; beta's grant WELCOME (4).
 */
function context() {
  const a = new Admission();
  a.apply(1, { kind: 'tenant_registered', body: { tenant: 'acme' } });
  a.apply(2, { kind: 'tenant_registered', body: { tenant: 'beta' } });
  a.apply(3, { kind: 'prepayment', body: { ...P, reference: 'TOPUP-1' } });
  a.apply(4, { kind: 'prepayment', body: { ...without(P, 'expires_at'), tenant: 'beta', reference: 'WELCOME', source: 'grant', amount: '200.00' } });
  return a;
}

/** A prepayment of `tenant` carrying `reference`, with `changes`. */
const prepayment = (tenant, reference, changes = {}) => ({ ...P, tenant, reference, ...changes });

/** `reason field` of Admission.check on the entry at `index`, received at `received`, or 'PASS'. */
function admit(a, body, index, received = '2027-02-01T00:00:00Z') {
  try {
    a.check(index, { kind: 'prepayment', body }, received);
    return 'PASS';
  } catch (e) {
    assert(e.item === `entry ${index}`, `the item: ${e.item}`);
    const field = fieldOf(e.message);
    return field ? `${e.reason} ${field}` : e.reason;
  }
}

await test('prepayment admission: the tenant registered earlier (unknown_tenant)', async () => {
  const a = context();
  eq(admit(a, prepayment('acme', 'TOPUP-2'), 10), 'PASS', "acme's second top-up");
  eq(admit(a, prepayment('zeta', 'TOPUP-2'), 10), 'unknown_tenant', 'an unregistered tenant');
  eq(admit(a, prepayment('beta', 'TOPUP-2'), 2), 'unknown_tenant', "at the tenant's own index");
  eq(admit(a, prepayment('beta', 'TOPUP-2'), 1), 'unknown_tenant', "before the tenant's registration");
  eq(admit(a, prepayment('beta', 'TOPUP-2'), 3), 'PASS', 'just after it');
});

await test('prepayment admission: a reference carried by one prepayment of its tenant (reference_used, body.reference)', async () => {
  const a = context();
  eq(admit(a, prepayment('acme', 'TOPUP-1'), 10), 'reference_used body.reference', "TOPUP-1 again, acme's");
  eq(admit(a, prepayment('acme', 'TOPUP-1', { source: 'grant', amount: '1.00', currency: 'USD' }), 10), 'reference_used body.reference', 'TOPUP-1 again, another source, amount and currency');
  eq(admit(a, without(prepayment('acme', 'TOPUP-1'), 'expires_at'), 10), 'reference_used body.reference', 'TOPUP-1 again, without expiry');
  eq(admit(a, prepayment('acme', 'TOPUP-1'), 3), 'PASS', "at TOPUP-1's own index");
  eq(admit(a, prepayment('acme', 'TOPUP-1'), 2), 'PASS', 'before TOPUP-1');
  eq(admit(a, prepayment('beta', 'TOPUP-1'), 10), 'PASS', "a second tenant's same reference");
  eq(admit(a, prepayment('acme', 'WELCOME'), 10), 'PASS', "beta's reference for acme");
  eq(admit(a, prepayment('beta', 'WELCOME'), 10), 'reference_used body.reference', "beta's WELCOME again");
  // References compare exactly: another case or an inner difference is another reference.
  eq(admit(a, prepayment('acme', 'topup-1'), 10), 'PASS', 'another case');
  eq(admit(a, prepayment('acme', 'TOPUP-1.'), 10), 'PASS', 'a longer reference');
  // A payment's external_reference is not a prepayment's reference.
  a.apply(11, { kind: 'payment', body: { tenant: 'acme', invoice: 'INV-000001', currency: 'CNY', amount: '1.00', external_reference: 'BANK-9' } });
  eq(admit(a, prepayment('acme', 'BANK-9'), 12), 'PASS', "a payment's external reference");
  // An entry the ledger refused never enters the log; were one applied, the first stays.
  a.apply(13, { kind: 'prepayment', body: prepayment('acme', 'TOPUP-1', { amount: '9.00' }) });
  eq(a.prepayments.get('acme|TOPUP-1'), 3, "TOPUP-1's entry");
  a.apply(14, { kind: 'prepayment', body: prepayment('acme', 'TOPUP-3') });
  eq(admit(a, prepayment('acme', 'TOPUP-3'), 15), 'reference_used body.reference', 'a later lot');
  eq(admit(a, prepayment('acme', 'TOPUP-3'), 14), 'PASS', "at the later lot's own index");
});

await test('prepayment admission: not expired when it is logged (invalid_field, body.expires_at)', async () => {
  const a = context();
  const received = '2027-02-01T00:00:00Z';
  for (const [what, expires, want] of [
    ['a year after received_at', '2028-02-01T00:00:00Z', 'PASS'],
    ['one second after received_at', '2027-02-01T00:00:01Z', 'PASS'],
    ['at received_at', received, 'invalid_field body.expires_at'],
    ['one second before received_at', '2027-01-31T23:59:59Z', 'invalid_field body.expires_at'],
    ['a year before received_at', '2026-02-01T00:00:00Z', 'invalid_field body.expires_at'],
  ]) eq(admit(a, prepayment('acme', 'TOPUP-2', { expires_at: expires }), 10, received), want, what);
  eq(admit(a, without(prepayment('acme', 'TOPUP-2'), 'expires_at'), 10, '2099-01-01T00:00:00Z'), 'PASS', 'no expires_at: never expires');
  // The lot's own received_at is the clock, not the log policy's skew: no tolerance.
  a.apply(5, { kind: 'log_policy', body: { max_record_age_seconds: 35 * 86400, max_future_skew_seconds: 3600 } });
  eq(admit(a, prepayment('acme', 'TOPUP-2', { expires_at: received }), 10, received), 'invalid_field body.expires_at', 'no skew under a policy');
  // Only the entry's own received_at counts: a lot logged at 10:00 may expire at 10:00:01.
  eq(admit(a, prepayment('acme', 'TOPUP-2', { expires_at: '2027-01-03T10:00:01Z' }), 10, '2027-01-03T10:00:00Z'), 'PASS', 'a second after an earlier clock');
});

await test("prepayment admission: the rules in the spec's order", async () => {
  const a = context();
  const late = '2028-06-01T00:00:00Z';
  // Each body breaks every rule from one on; the first is named.
  eq(admit(a, prepayment('zeta', 'TOPUP-1'), 10, late), 'unknown_tenant', 'unknown_tenant first');
  eq(admit(a, prepayment('acme', 'TOPUP-1'), 10, late), 'reference_used body.reference', 'then reference_used');
  eq(admit(a, prepayment('acme', 'TOPUP-2'), 10, late), 'invalid_field body.expires_at', 'then expires_at');
  eq(admit(a, prepayment('acme', 'TOPUP-2'), 10), 'PASS', 'then nothing');
});

await test('other kinds pass the prepayment rules', async () => {
  const a = context();
  // A payment carrying a lot's reference as its external reference, and a registration.
  a.apply(5, { kind: 'invoice_issued', body: { number: 'INV-000001', tenant: 'acme', period_from: '2027-01-01T00:00:00Z', period_to: '2027-02-01T00:00:00Z', currency: 'CNY', total: '100.00', checkpoint_size: 5, invoice_sha256: '0'.repeat(64) } });
  a.check(10, { kind: 'payment', body: { tenant: 'acme', invoice: 'INV-000001', currency: 'CNY', amount: '100.00', external_reference: 'TOPUP-1' } }, '2027-02-02T00:00:00Z');
  a.check(10, { kind: 'tenant_registered', body: { tenant: 'gamma' } }, '2027-02-02T00:00:00Z');
});

console.log(`\n${results.passed} passed, ${results.failures.length} failed`);
if (results.failures.length) {
  for (const f of results.failures) console.log(`FAIL ${f}`);
  process.exit(1);
}
