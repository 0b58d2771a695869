// Tests of the console verifier's contract_registered and contract_amended rules (§5.19, §5.21
// and §6.7, contracts and contract amendments) and of its billing periods (billing.js, as
// crates/core/src/contract.rs `billing_periods`), run with Node ≥ 20 and no npm packages, and
// without the `gpuledger` binary:
//
//     node assets/console/verify/test/contracts.mjs
//
// The body checks are run through leaf.js's checkEnvelope (an envelope with a signature of the
// right length that is never verified: checkEnvelope checks forms, bundle.js verifies), the
// admission rules through admission.js's Admission (apply the context, then check an entry at
// its index), as run.mjs does for nodes and leases. A whole bundle needs the log key's entries
// signed; run.mjs's bundle tests do that and compare with `gpuledger verify`.
// Exit status 0 when every test passed, 1 otherwise.

import { checkEnvelope, KINDS, LEDGER_KINDS, MAX_CONTRACT_FEES, MAX_CONTRACT_TERM_SECONDS, MAX_EXCLUSION_REASON_BYTES, MAX_INCLUDED_MODELS, MAX_SLA_STEPS, ROLE_KINDS } from '../leaf.js';
import { Admission } from '../admission.js';
import { addMonths, billingPeriods, calendarStart, MAX_UNIX } from '../billing.js';
import { results, test, assert, eq } from './harness.mjs';



/** The field a message starts with (`body.fees[1].amount`), or ''. */
const fieldOf = (message) => /^body\.[A-Za-z0-9_.[\]]+/.exec(message)?.[0].replace(/\.$/, '') ?? '';

/**
 * The verdict of checkEnvelope on a contract_registered body (or one of `kind`): 'PASS',
 * `<code> <field>` when the message starts with a reason code and a field, else the whole
 * message (a form error of the shape, reported as plain `leaf_invalid`).
 */
async function bodyVerdict(body, kind = 'contract_registered') {
  const env = { v: 3, kind, signer: 'ledger', key_id: '0123456789abcdef', seq: 1, body, sig: `${'A'.repeat(86)}==` };
  try {
    await checkEnvelope(env, 'gpuledger.test/contracts');
    return 'PASS';
  } catch (e) {
    const m = /^([a-z_]+): (.*)$/s.exec(e.message);
    return m && fieldOf(m[2]) ? `${m[1]} ${fieldOf(m[2])}` : e.message;
  }
}

/** The spec's example body. */
const C = {
  billing_anchor: 'calendar',
  billing_period: 'month',
  commitment: '5000',
  contract: 'C-acme-2027',
  currency: 'CNY',
  fees: [
    { amount: '120000', category: 'compute', name: 'Bare-metal 8×H100 node, monthly', timing: 'advance' },
    { amount: '800', category: 'support', name: 'Rack setup', timing: 'once' },
  ],
  region: 'cn-east',
  tenant: 'acme',
  term_from: '2027-01-15T00:00:00Z',
  term_to: '2028-01-15T00:00:00Z',
};
const without = (o, k) => Object.fromEntries(Object.entries(o).filter(([m]) => m !== k));
/** C with fee `i` changed. */
const feeWith = (i, changes) => ({ ...C, fees: C.fees.map((f, k) => (k === i ? { ...f, ...changes } : f)) });
const fees = (n) => Array.from({ length: n }, (_, k) => ({ amount: '1', category: 'other', name: `fee ${k}`, timing: 'arrears' }));
/** The §2.2 spelling of `seconds` since the epoch. */
const iso = (seconds) => new Date(seconds * 1000).toISOString().replace('.000Z', 'Z');
const at = (s) => Date.parse(s) / 1000;

await test('contract_registered is a ledger kind', async () => {
  assert(KINDS.has('contract_registered'), 'a kind');
  assert(LEDGER_KINDS.has('contract_registered'), 'signed by the log key only (bundle.js keyFor)');
  eq(MAX_CONTRACT_FEES, 16, 'MAX_CONTRACT_FEES');
  eq(MAX_CONTRACT_TERM_SECONDS, 3660 * 86400, 'MAX_CONTRACT_TERM_SECONDS');
  eq(MAX_SLA_STEPS, 8, 'MAX_SLA_STEPS');
});

await test('contract_registered bodies that pass (§5.19)', async () => {
  const from = at(C.term_from);
  for (const [what, body] of [
    ["the spec's example", C],
    ['fees only', without(C, 'commitment')],
    ['a commitment only', without(C, 'fees')],
    ['16 fees', { ...C, fees: fees(16) }],
    ['every timing and category', { ...C, fees: [['advance', 'compute'], ['arrears', 'networking'], ['once', 'storage'], ['advance', 'support'], ['arrears', 'other']].map(([timing, category], k) => ({ amount: '1', category, name: `f${k}`, timing })) }],
    ['quarterly, anniversary', { ...C, billing_period: 'quarter', billing_anchor: 'anniversary' }],
    ['yearly', { ...C, billing_period: 'year' }],
    ['a term of one second', { ...C, term_to: iso(from + 1) }],
    ['a term of 3660 days', { ...C, term_to: iso(from + MAX_CONTRACT_TERM_SECONDS) }],
    ['amounts of 10^12', { ...feeWith(0, { amount: '1000000000000' }), commitment: '1000000000000.0000' }],
    ['amounts of 0.0001', { ...feeWith(0, { amount: '0.0001' }), commitment: '0.0001' }],
    ['a name of 100 bytes', feeWith(0, { name: 'a'.repeat(100) })],
    ['a name of 100 bytes in 50 two-byte characters', feeWith(0, { name: '×'.repeat(50) })],
    ['a name in Chinese', feeWith(0, { name: '裸金属 8×H100 节点，包月' })],
    ['a name with inner spaces and a zero-width joiner', feeWith(0, { name: 'GPU  node \u200d emoji 👩\u200d💻' })],
    ['a name with a leading space', feeWith(0, { name: ' Rack setup' })],
  ]) eq(await bodyVerdict(body), 'PASS', what);
});

await test('contract_registered bodies refused with the code and field of the spec (§5.19)', async () => {
  const from = at(C.term_from);
  for (const [what, body, want] of [
    // The term.
    ['term_to = term_from', { ...C, term_to: C.term_from }, 'invalid_field body.term_to'],
    ['term_to before term_from', { ...C, term_to: '2027-01-14T23:59:59Z' }, 'invalid_field body.term_to'],
    ['a term of 3660 days and a second', { ...C, term_to: iso(from + MAX_CONTRACT_TERM_SECONDS + 1) }, 'quantity_out_of_range body.term_to'],
    // The enums.
    ['billing_period week', { ...C, billing_period: 'week' }, 'invalid_field body.billing_period'],
    ['billing_period Month', { ...C, billing_period: 'Month' }, 'invalid_field body.billing_period'],
    ['billing_anchor start', { ...C, billing_anchor: 'start' }, 'invalid_field body.billing_anchor'],
    // The fees.
    ['an empty fees array', { ...C, fees: [] }, 'invalid_field body.fees'],
    ['an empty fees array without a commitment', without({ ...C, fees: [] }, 'commitment'), 'invalid_field body.fees'],
    ['17 fees', { ...C, fees: fees(17) }, 'quantity_out_of_range body.fees'],
    ['a bad timing', feeWith(1, { timing: 'monthly' }), 'invalid_field body.fees[1].timing'],
    ['a bad category', feeWith(1, { category: 'Compute' }), 'invalid_field body.fees[1].category'],
    ['a zero amount', feeWith(1, { amount: '0' }), 'quantity_out_of_range body.fees[1].amount'],
    ['a zero amount with decimals', feeWith(1, { amount: '0.0000' }), 'quantity_out_of_range body.fees[1].amount'],
    ['an amount above 10^12', feeWith(1, { amount: '1000000000000.0001' }), 'quantity_out_of_range body.fees[1].amount'],
    ['an amount of 10^13', feeWith(0, { amount: '10000000000000' }), 'quantity_out_of_range body.fees[0].amount'],
    ['an empty name', feeWith(0, { name: '' }), 'invalid_field body.fees[0].name'],
    ['a name of spaces', feeWith(0, { name: ' \u3000\u00a0 ' }), 'invalid_field body.fees[0].name'],
    ['a name of 101 bytes', feeWith(0, { name: 'a'.repeat(101) }), 'invalid_field body.fees[0].name'],
    ['a name of 101 bytes in 51 characters', feeWith(0, { name: `${'×'.repeat(50)}a` }), 'invalid_field body.fees[0].name'],
    ['a name with a newline', feeWith(0, { name: 'Rack\nsetup' }), 'invalid_field body.fees[0].name'],
    ['a name with a right-to-left override', feeWith(0, { name: 'Rack \u202esetup' }), 'invalid_field body.fees[0].name'],
    ['a name with a zero-width space', feeWith(0, { name: 'Rack\u200bsetup' }), 'invalid_field body.fees[0].name'],
    ['a name with a byte-order mark', feeWith(0, { name: '\ufeffRack setup' }), 'invalid_field body.fees[0].name'],
    ['a name with a tag character', feeWith(0, { name: 'Rack setup\u{e0041}' }), 'invalid_field body.fees[0].name'],
    ['a name with a Hangul filler', feeWith(0, { name: 'Rack\u3164setup' }), 'invalid_field body.fees[0].name'],
    // The commitment, and at least one of the two.
    ['a zero commitment', { ...C, commitment: '0' }, 'quantity_out_of_range body.commitment'],
    ['a commitment above 10^12', { ...C, commitment: '1000000000000.0001' }, 'quantity_out_of_range body.commitment'],
    ['neither fees nor a commitment', without(without(C, 'fees'), 'commitment'), 'invalid_field body.fees'],
  ]) eq(await bodyVerdict(body), want, what);
  // Form errors (plain leaf_invalid): the message names what is wrong.
  for (const [what, body, want] of [
    ['an unknown member', { ...C, discount: '10' }, /^body has an unknown member discount$/],
    ['an unknown member of a fee', feeWith(1, { unit: 'month' }), /^body\.fees\[1\] has an unknown member unit$/],
    ['a fee without its category', { ...C, fees: [without(C.fees[0], 'category')] }, /^body\.fees\[0\] has no member category$/],
    ['no term_to', without(C, 'term_to'), /^body has no member term_to$/],
    ['no billing_anchor', without(C, 'billing_anchor'), /^body has no member billing_anchor$/],
    ['fees null', { ...C, fees: null }, /^body\.fees is not an array$/],
    ['fees an object', { ...C, fees: C.fees[0] }, /^body\.fees is not an array$/],
    ['a fee not an object', { ...C, fees: ['Rack setup'] }, /^body\.fees\[0\] is not an object$/],
    ['commitment null', { ...C, commitment: null }, /^body\.commitment is not a string$/],
    ['a number amount', feeWith(0, { amount: 800 }), /^body\.fees\[0\]\.amount is not a string$/],
    ['an amount with 5 decimals', feeWith(0, { amount: '1.00000' }), /^body\.fees\[0\]\.amount is not an amount/],
    ['an amount with a leading zero', feeWith(0, { amount: '0800' }), /^body\.fees\[0\]\.amount is not an amount/],
    ['a negative commitment', { ...C, commitment: '-1' }, /^body\.commitment is not an amount/],
    ['a lower-case currency', { ...C, currency: 'cny' }, /^body\.currency is not an ISO 4217 code$/],
    ['a bad contract id', { ...C, contract: '-C1' }, /^body\.contract is not an identifier$/],
    ['the reserved tenant id', { ...C, tenant: 'ledger' }, /^body\.tenant "ledger" is reserved/],
    ['a region that is no id', { ...C, region: 'cn east' }, /^body\.region is not an identifier$/],
    ['term_from not a timestamp', { ...C, term_from: '2027-01-15' }, /^body\.term_from is not a timestamp$/],
    ['term_to not a timestamp', { ...C, term_to: '2027-02-30T00:00:00Z' }, /^body\.term_to is not a timestamp$/],
  ]) {
    const got = await bodyVerdict(body);
    assert(want.test(got), `${what}: ${got}`);
  }
});

/** The spec's example with an SLA: a monthly fee renting lease-acme, credited below 99.9 and 99 %. */
const S = {
  billing_anchor: 'calendar',
  billing_period: 'month',
  contract: 'C-acme-sla',
  currency: 'CNY',
  fees: [{ amount: '3000', category: 'compute', lease: 'lease-acme', name: '2 × H100 on node-1, monthly', timing: 'advance' }],
  region: 'west',
  sla: { credits: [{ below: '99.9', percent: '10' }, { below: '99', percent: '25' }], target: '99.9' },
  tenant: 'acme',
  term_from: '2027-01-01T00:00:00Z',
  term_to: '2027-04-01T00:00:00Z',
};
/** S with its SLA's members changed. */
const slaWith = (changes) => ({ ...S, sla: { ...S.sla, ...changes } });
/** S with these credit steps ([below, percent] pairs). */
const steps = (...pairs) => slaWith({ credits: pairs.map(([below, percent]) => ({ below, percent })) });

await test('contract_registered bodies with leases and an SLA that pass (§5.19)', async () => {
  for (const [what, body] of [
    ["the spec's SLA example", S],
    ['a lease on a fee, no SLA', without(S, 'sla')],
    ['a lease on an arrears fee', { ...S, fees: [{ ...S.fees[0], timing: 'arrears' }] }],
    ['the same lease on two fees, another fee without one', { ...S, fees: [S.fees[0], { ...S.fees[0], name: 'Support' }, { amount: '800', category: 'support', name: 'Rack setup', timing: 'once' }] }],
    ['two leases', { ...S, fees: [S.fees[0], { ...S.fees[0], lease: 'lease-acme-2' }] }],
    ['with a commitment', { ...S, commitment: '1000' }],
    ['one step at the target', steps(['99.9', '10'])],
    ['one step below the target', steps(['99', '5'])],
    ['a target and steps with 4 decimals and trailing zeros', { ...S, sla: { target: '99.9900', credits: [{ below: '99.99', percent: '0.0001' }, { below: '0.0001', percent: '100.0000' }] } }],
    ['a target of 0.0001', { ...S, sla: { target: '0.0001', credits: [{ below: '0.0001', percent: '100' }] } }],
    ['a target of 99.9999', slaWith({ target: '99.9999' })],
    [`${MAX_SLA_STEPS} steps`, steps(...Array.from({ length: MAX_SLA_STEPS }, (_, k) => [String(99 - k), String(k + 1)]))],
    ['a credit of 100 %', steps(['99', '50'], ['90', '100'])],
  ]) eq(await bodyVerdict(body), 'PASS', what);
});

await test('contract_registered leases and SLAs refused with the code and field of the spec (§5.19)', async () => {
  for (const [what, body, want] of [
    // A fee's lease: not on a one-off fee; after the fee's other members.
    ['a lease on a once fee', { ...S, fees: [S.fees[0], { amount: '800', category: 'support', lease: 'lease-acme', name: 'Rack setup', timing: 'once' }] }, 'invalid_field body.fees[1].lease'],
    ['a lease on a once fee with a bad category', { ...S, fees: [{ ...S.fees[0], category: 'gpu', timing: 'once' }] }, 'invalid_field body.fees[0].category'],
    // The target.
    ['a target of 100', slaWith({ target: '100' }), 'quantity_out_of_range body.sla.target'],
    ['a target of 100.0000', slaWith({ target: '100.0000' }), 'quantity_out_of_range body.sla.target'],
    ['a target above 100', slaWith({ target: '100.5' }), 'quantity_out_of_range body.sla.target'],
    ['a target of 0', slaWith({ target: '0' }), 'quantity_out_of_range body.sla.target'],
    ['a target of 0.0', slaWith({ target: '0.0' }), 'quantity_out_of_range body.sla.target'],
    ['a target above 10^12', slaWith({ target: '1000000000000.0001' }), 'quantity_out_of_range body.sla.target'],
    ['a target of 100 and no steps: the target first', slaWith({ target: '100', credits: [] }), 'quantity_out_of_range body.sla.target'],
    // How many steps.
    ['no steps', steps(), 'invalid_field body.sla.credits'],
    [`${MAX_SLA_STEPS + 1} steps`, steps(...Array.from({ length: MAX_SLA_STEPS + 1 }, (_, k) => [String(99 - k), String(k + 1)])), 'invalid_field body.sla.credits'],
    // A step's percentages.
    ['a below of 0', steps(['0', '10']), 'quantity_out_of_range body.sla.credits[0].below'],
    ['a below above 100', steps(['100.0001', '10']), 'quantity_out_of_range body.sla.credits[0].below'],
    ['a percent of 0', steps(['99', '0']), 'quantity_out_of_range body.sla.credits[0].percent'],
    ['a percent above 100', steps(['99', '101']), 'quantity_out_of_range body.sla.credits[0].percent'],
    ['a percent above 100 in the second step', steps(['99', '10'], ['98', '100.0001']), 'quantity_out_of_range body.sla.credits[1].percent'],
    ['a below of 0 and a percent of 0: below first', steps(['0', '0']), 'quantity_out_of_range body.sla.credits[0].below'],
    // The schedule's order.
    ['the first below above the target', steps(['99.9001', '10']), 'invalid_field body.sla.credits[0].below'],
    ['a below equal to the step before', steps(['99.9', '10'], ['99.9', '20']), 'invalid_field body.sla.credits[1].below'],
    ['a below above the step before', steps(['99', '10'], ['99.5', '20']), 'invalid_field body.sla.credits[1].below'],
    ['a percent equal to the step before', steps(['99.9', '10'], ['99', '10']), 'invalid_field body.sla.credits[1].percent'],
    ['a percent below the step before', steps(['99.9', '10'], ['99', '5']), 'invalid_field body.sla.credits[1].percent'],
    ['the third step out of order', steps(['99.9', '10'], ['99', '25'], ['98', '20']), 'invalid_field body.sla.credits[2].percent'],
    ['a below out of order and a percent of 0: the range first', steps(['99', '10'], ['99.5', '0']), 'quantity_out_of_range body.sla.credits[1].percent'],
    ['a below and a percent out of order: below first', steps(['99', '10'], ['99.5', '5']), 'invalid_field body.sla.credits[1].below'],
    ['a bad step after a bad earlier one: the earlier first', steps(['99.95', '10'], ['0', '20']), 'invalid_field body.sla.credits[0].below'],
    // An SLA needs a fee that names a lease: last of all.
    ['an SLA without a leased fee', { ...S, fees: [without(S.fees[0], 'lease')] }, 'invalid_field body.sla'],
    ['an SLA with a commitment only', without({ ...S, commitment: '1000' }, 'fees'), 'invalid_field body.sla'],
    ['an SLA with neither fees nor a commitment: the presence rule first', without(S, 'fees'), 'invalid_field body.fees'],
    ['an SLA without a leased fee and a bad target: the target first', { ...slaWith({ target: '100' }), fees: [without(S.fees[0], 'lease')] }, 'quantity_out_of_range body.sla.target'],
    ['a bad SLA and a zero commitment: the commitment first', { ...slaWith({ target: '0' }), commitment: '0' }, 'quantity_out_of_range body.commitment'],
  ]) eq(await bodyVerdict(body), want, what);
  // Form errors (plain leaf_invalid): the message names what is wrong.
  for (const [what, body, want] of [
    ['a bad lease id', { ...S, fees: [{ ...S.fees[0], lease: 'lease acme' }] }, /^body\.fees\[0\]\.lease is not an identifier$/],
    ['the reserved lease id', { ...S, fees: [{ ...S.fees[0], lease: 'ledger' }] }, /^body\.fees\[0\]\.lease "ledger" is reserved/],
    ['a bad lease id on a once fee: the id first', { ...S, fees: [{ ...S.fees[0], lease: '', timing: 'once' }] }, /^body\.fees\[0\]\.lease is not an identifier$/],
    ['lease null', { ...S, fees: [{ ...S.fees[0], lease: null }] }, /^body\.fees\[0\]\.lease is not a string$/],
    ['sla null', { ...S, sla: null }, /^body\.sla is not an object$/],
    ['sla an array', { ...S, sla: [S.sla] }, /^body\.sla is not an object$/],
    ['an sla without credits', { ...S, sla: without(S.sla, 'credits') }, /^body\.sla has no member credits$/],
    ['an sla without a target', { ...S, sla: without(S.sla, 'target') }, /^body\.sla has no member target$/],
    ['an unknown member of the sla', slaWith({ window: 'month' }), /^body\.sla has an unknown member window$/],
    ['a number target', slaWith({ target: 99.9 }), /^body\.sla\.target is not a string$/],
    ['credits an object', slaWith({ credits: S.sla.credits[0] }), /^body\.sla\.credits is not an array$/],
    ['a step not an object', slaWith({ credits: ['99'] }), /^body\.sla\.credits\[0\] is not an object$/],
    ['a step without its percent', slaWith({ credits: [{ below: '99' }] }), /^body\.sla\.credits\[0\] has no member percent$/],
    ['an unknown member of a step', slaWith({ credits: [{ below: '99', percent: '10', unit: '%' }] }), /^body\.sla\.credits\[0\] has an unknown member unit$/],
    ['a number percent', steps(['99', 10]), /^body\.sla\.credits\[0\]\.percent is not a string$/],
    ['a target with 5 decimals', slaWith({ target: '99.99999' }), /^body\.sla\.target is not an amount/],
    ['a target with a percent sign', slaWith({ target: '99.9%' }), /^body\.sla\.target is not an amount/],
    ['a below with a leading zero', steps(['099', '10']), /^body\.sla\.credits\[0\]\.below is not an amount/],
    ['a negative percent', steps(['99', '-10']), /^body\.sla\.credits\[0\]\.percent is not an amount/],
    // The shape comes first, all of it: a bad SLA shape before a bad fee amount.
    ['a bad amount and an sla without credits: the shape first', { ...S, fees: [{ ...S.fees[0], amount: '0' }], sla: without(S.sla, 'credits') }, /^body\.sla has no member credits$/],
  ]) {
    const got = await bodyVerdict(body);
    assert(want.test(got), `${what}: ${got}`);
  }
});

/** The spec's third example: 2000 H100 GPU-hours a month included in the fee of lease-acme, 9.50 per GPU-hour above. */
const I = {
  billing_anchor: 'calendar',
  billing_period: 'month',
  contract: 'C-acme-inc',
  currency: 'CNY',
  fees: [{ amount: '20000', category: 'compute', included: [{ gpu_hours: '2000', gpu_model: 'H100', overage_rate: '9.50' }], lease: 'lease-acme', name: '2 × H100 on node-1, monthly', timing: 'advance' }],
  region: 'west',
  tenant: 'acme',
  term_from: '2027-01-01T00:00:00Z',
  term_to: '2027-04-01T00:00:00Z',
};
/** An entry of a fee's `included`. */
const inc = (gpu_model = 'H100', gpu_hours = '2000', overage_rate = '9.50') => ({ gpu_model, gpu_hours, overage_rate });
/** I with its fee's included set to `entries` and the fee's other members changed (undefined: removed). */
const includedWith = (entries, changes = {}) => {
  const fee = { ...I.fees[0], included: entries, ...changes };
  for (const [k, v] of Object.entries(changes)) if (v === undefined) delete fee[k];
  return { ...I, fees: [fee] };
};
/** I with these fees after its own. */
const withFees = (...more) => ({ ...I, fees: [I.fees[0], ...more] });
const eight = Array.from({ length: MAX_INCLUDED_MODELS }, (_, k) => inc(`M${k}`));

await test('contract_registered bodies with included GPU-hours that pass (§5.19)', async () => {
  eq(MAX_INCLUDED_MODELS, 8, 'MAX_INCLUDED_MODELS');
  for (const [what, body] of [
    ["the spec's example", I],
    ['0 hours included, a rate of 0', includedWith([inc('H100', '0', '0')])],
    ['amounts with 4 decimals and trailing zeros', includedWith([inc('H100', '0.0000', '9.5000')])],
    ['amounts of 10^12', includedWith([inc('H100', '1000000000000', '1000000000000.0000')])],
    [`${MAX_INCLUDED_MODELS} models`, includedWith(eight)],
    ['a MIG instance model', includedWith([inc('A100/1g.10gb')])],
    ['on an arrears fee', includedWith([inc()], { timing: 'arrears' })],
    ['the same model on another lease', withFees({ ...I.fees[0], lease: 'lease-2', name: 'Second node' })],
    ['the same lease on another fee, another model', withFees({ ...I.fees[0], name: 'Support', included: [inc('A100')] })],
    ['with a commitment', { ...I, commitment: '1000' }],
    ['with an SLA', { ...I, sla: S.sla }],
  ]) eq(await bodyVerdict(body), 'PASS', what);
});

await test('contract_registered included GPU-hours refused with the code and field of the spec (§5.19)', async () => {
  for (const [what, body, want] of [
    // Only on a fee that names a lease (after the lease's own rules).
    ['on a fee without a lease', includedWith([inc()], { lease: undefined }), 'invalid_field body.fees[0].included'],
    ['on a once fee without a lease', includedWith([inc()], { lease: undefined, timing: 'once' }), 'invalid_field body.fees[0].included'],
    ['on a once fee with a lease: the lease first', includedWith([inc()], { timing: 'once' }), 'invalid_field body.fees[0].lease'],
    // 1 to 8 entries.
    ['no entries', includedWith([]), 'invalid_field body.fees[0].included'],
    [`${MAX_INCLUDED_MODELS + 1} entries`, includedWith([...eight, inc('M8')]), 'invalid_field body.fees[0].included'],
    // The amounts' range.
    ['gpu_hours above 10^12', includedWith([inc('H100', '1000000000000.0001')]), 'quantity_out_of_range body.fees[0].included[0].gpu_hours'],
    ['overage_rate above 10^12', includedWith([inc('H100', '1', '10000000000000')]), 'quantity_out_of_range body.fees[0].included[0].overage_rate'],
    // A lease and model at most once in the contract: the second occurrence is named.
    ['a model twice in one fee', includedWith([inc(), inc('H100', '1')]), 'invalid_field body.fees[0].included[1].gpu_model'],
    ['a model twice, another between', includedWith([inc(), inc('A100'), inc()]), 'invalid_field body.fees[0].included[2].gpu_model'],
    ['a model twice across fees of the lease', withFees({ ...I.fees[0], name: 'Support', included: [inc('A100'), inc()] }), 'invalid_field body.fees[1].included[1].gpu_model'],
    // The order: the fee's other members first; needs-a-lease, then the count, then entry by
    // entry gpu_model, gpu_hours, overage_rate and the at-most-once rule; fee by fee.
    ['a bad category and a bad entry: the category first', includedWith([inc('H100', '1000000000000.0001')], { category: 'gpu' }), 'invalid_field body.fees[0].category'],
    ['a zero amount and a bad entry: the amount first', includedWith([inc('H100', '1000000000000.0001')], { amount: '0' }), 'quantity_out_of_range body.fees[0].amount'],
    ['no lease and 9 entries: the lease rule first', includedWith([...eight, inc('M8')], { lease: undefined }), 'invalid_field body.fees[0].included'],
    ['9 entries, the first bad: the count first', includedWith([inc('H100', '1000000000000.0001'), ...eight]), 'invalid_field body.fees[0].included'],
    ['a bad rate before a bad later hours', includedWith([inc('H100', '1', '1000000000000.0001'), inc('A100', '1000000000000.0001')]), 'quantity_out_of_range body.fees[0].included[0].overage_rate'],
    ['bad hours and a bad rate: the hours first', includedWith([inc('H100', '1000000000000.0001', '1000000000000.0001')]), 'quantity_out_of_range body.fees[0].included[0].gpu_hours'],
    ['a repeat with a bad rate: the rate first', includedWith([inc(), inc('H100', '1', '1000000000000.0001')]), 'quantity_out_of_range body.fees[0].included[1].overage_rate'],
    ["fee 0's included before fee 1's name", { ...I, fees: [{ ...I.fees[0], included: [] }, { amount: '1', category: 'other', name: '', timing: 'arrears' }] }, 'invalid_field body.fees[0].included'],
    ["fee 1's amount before its repeated model", withFees({ ...I.fees[0], amount: '0', name: 'Support' }), 'quantity_out_of_range body.fees[1].amount'],
    ['a bad included and a zero commitment: the fees first', { ...includedWith([]), commitment: '0' }, 'invalid_field body.fees[0].included'],
    ['a bad included and a bad SLA: the fees first', { ...includedWith([]), sla: { target: '100', credits: [] } }, 'invalid_field body.fees[0].included'],
  ]) eq(await bodyVerdict(body), want, what);
  // Form errors (plain leaf_invalid): the message names what is wrong.
  for (const [what, body, want] of [
    ['a model that is no id', includedWith([inc('H 100')]), /^body\.fees\[0\]\.included\[0\]\.gpu_model is not an identifier$/],
    ['the reserved model id', includedWith([inc('ledger')]), /^body\.fees\[0\]\.included\[0\]\.gpu_model "ledger" is reserved/],
    ['negative hours', includedWith([inc('H100', '-1')]), /^body\.fees\[0\]\.included\[0\]\.gpu_hours is not an amount/],
    ['hours with 5 decimals', includedWith([inc('H100', '1.00001')]), /^body\.fees\[0\]\.included\[0\]\.gpu_hours is not an amount/],
    ['a rate with a leading zero', includedWith([inc('H100', '1', '09.50')]), /^body\.fees\[0\]\.included\[0\]\.overage_rate is not an amount/],
    ['a bad model and bad hours: the model first', includedWith([inc('H 100', '-1')]), /^body\.fees\[0\]\.included\[0\]\.gpu_model is not an identifier$/],
    ['included null', includedWith(null), /^body\.fees\[0\]\.included is not an array$/],
    ['included an object', includedWith(inc()), /^body\.fees\[0\]\.included is not an array$/],
    ['an entry not an object', includedWith(['H100']), /^body\.fees\[0\]\.included\[0\] is not an object$/],
    ['an entry without its rate', includedWith([{ gpu_model: 'H100', gpu_hours: '1' }]), /^body\.fees\[0\]\.included\[0\] has no member overage_rate$/],
    ['an unknown member of an entry', includedWith([{ ...inc(), unit: 'GPU-h' }]), /^body\.fees\[0\]\.included\[0\] has an unknown member unit$/],
    ['number hours', includedWith([{ ...inc(), gpu_hours: 2000 }]), /^body\.fees\[0\]\.included\[0\]\.gpu_hours is not a string$/],
    ['a null rate', includedWith([{ ...inc(), overage_rate: null }]), /^body\.fees\[0\]\.included\[0\]\.overage_rate is not a string$/],
    // The shape comes first, all of it: a bad entry shape of fee 1 before a bad amount of fee 0.
    ['a bad amount and a bad later entry shape: the shape first', { ...I, fees: [{ ...I.fees[0], amount: '0' }, { ...I.fees[0], included: [null] }] }, /^body\.fees\[1\]\.included\[0\] is not an object$/],
  ]) {
    const got = await bodyVerdict(body);
    assert(want.test(got), `${what}: ${got}`);
  }
});

/**
 * The context: tenants acme (1) and beta (2); an invoice of acme for January 2027 (3, issued
 * 2027-02-01T00:10Z); a log policy with a skew of 3600 s (4); acme's contract C1 for
 * [2027-03-01, 2027-06-01) (5); beta's invoice for January to March (6).
 */
function context() {
  const a = new Admission();
  a.apply(1, { kind: 'tenant_registered', body: { tenant: 'acme' } });
  a.apply(2, { kind: 'tenant_registered', body: { tenant: 'beta' } });
  a.apply(3, { kind: 'invoice_issued', body: { number: 'INV-000001', tenant: 'acme', period_from: '2027-01-01T00:00:00Z', period_to: '2027-02-01T00:00:00Z', currency: 'CNY', total: '100.00', checkpoint_size: 3, invoice_sha256: '0'.repeat(64) } });
  a.apply(4, { kind: 'log_policy', body: { max_record_age_seconds: 35 * 86400, max_future_skew_seconds: 3600 } });
  a.apply(5, { kind: 'contract_registered', body: { ...C, contract: 'C1', term_from: '2027-03-01T00:00:00Z', term_to: '2027-06-01T00:00:00Z' } });
  a.apply(6, { kind: 'invoice_issued', body: { number: 'INV-000002', tenant: 'beta', period_from: '2027-01-01T00:00:00Z', period_to: '2027-04-01T00:00:00Z', currency: 'CNY', total: '1.00', checkpoint_size: 5, invoice_sha256: '0'.repeat(64) } });
  return a;
}

/** A contract of `tenant` for [from, to) with id `contract`. */
const contract = (contract, tenant, from, to) => ({ ...C, contract, tenant, term_from: from, term_to: to });

/** `reason field` of Admission.check on the entry at `index`, received at `received`, or 'PASS'. */
function admit(a, body, index, received = '2027-02-01T00:00:00Z') {
  try {
    a.check(index, { kind: 'contract_registered', body }, received);
    return 'PASS';
  } catch (e) {
    assert(e.item === `entry ${index}`, `the item: ${e.item}`);
    const field = fieldOf(e.message);
    return field ? `${e.reason} ${field}` : e.reason;
  }
}

await test('contract admission: the tenant registered earlier (unknown_tenant)', async () => {
  const a = context();
  eq(admit(a, contract('C2', 'acme', '2027-06-01T00:00:00Z', '2027-09-01T00:00:00Z'), 10), 'PASS', "acme's second contract");
  eq(admit(a, contract('C2', 'zeta', '2027-06-01T00:00:00Z', '2027-09-01T00:00:00Z'), 10), 'unknown_tenant', 'an unregistered tenant');
  eq(admit(a, contract('C2', 'beta', '2027-06-01T00:00:00Z', '2027-09-01T00:00:00Z'), 2), 'unknown_tenant', "at the tenant's own index");
  eq(admit(a, contract('C2', 'beta', '2027-06-01T00:00:00Z', '2027-09-01T00:00:00Z'), 3), 'PASS', 'just after it');
});

await test('contract admission: a contract id registered once (already_registered, body.contract)', async () => {
  const a = context();
  eq(admit(a, contract('C1', 'acme', '2027-06-01T00:00:00Z', '2027-09-01T00:00:00Z'), 10), 'already_registered body.contract', "C1 again, acme's, after C1's term");
  eq(admit(a, contract('C1', 'beta', '2027-06-01T00:00:00Z', '2027-09-01T00:00:00Z'), 10), 'already_registered body.contract', 'C1 again, for another tenant');
  eq(admit(a, contract('C1', 'acme', '2027-06-01T00:00:00Z', '2027-09-01T00:00:00Z'), 5), 'PASS', "at C1's own index");
  // An entry the ledger refused never enters the log; were one applied, the first registration stays.
  a.apply(11, { kind: 'contract_registered', body: contract('C1', 'acme', '2028-01-01T00:00:00Z', '2028-02-01T00:00:00Z') });
  eq(admit(a, contract('C3', 'acme', '2028-01-01T00:00:00Z', '2028-02-01T00:00:00Z'), 12), 'PASS', 'the first registration of an id is the one kept');
  eq(a.contracts.get('C1'), 5, "C1's entry");
});

await test('contract admission: term_from not in the past beyond the policy skew (price_in_past, body.term_from)', async () => {
  const a = context();
  const body = (from) => contract('C2', 'acme', from, '2027-09-01T00:00:00Z');
  // From 4 on, the policy's skew is 3600 s; before it, the default 300 s.
  eq(admit(a, body('2027-06-01T00:00:00Z'), 10, '2027-06-01T01:00:00Z'), 'PASS', '3600 s before the clock');
  eq(admit(a, body('2027-06-01T00:00:00Z'), 10, '2027-06-01T01:00:01Z'), 'price_in_past body.term_from', '3601 s before the clock');
  eq(admit(a, body('2027-06-01T00:00:00Z'), 4, '2027-06-01T00:05:00Z'), 'PASS', '300 s under the default policy');
  eq(admit(a, body('2027-06-01T00:00:00Z'), 4, '2027-06-01T00:05:01Z'), 'price_in_past body.term_from', '301 s under the default policy');
  eq(admit(a, body('2027-06-01T00:00:00Z'), 10, '2026-06-01T00:00:00Z'), 'PASS', 'a term a year ahead');
});

await test('contract admission: term_from not before the end of an invoiced period of its tenant (price_in_invoiced_period, body.term_from)', async () => {
  const a = context();
  const received = '2027-02-01T00:12:00Z';
  const body = (tenant, from) => contract('C2', tenant, from, '2027-02-15T00:00:00Z');
  eq(admit(a, body('acme', '2027-02-01T00:00:00Z'), 10, received), 'PASS', "at the invoice's period_to");
  eq(admit(a, body('acme', '2027-01-31T23:59:59Z'), 10, received), 'price_in_invoiced_period body.term_from', 'a second before it');
  eq(admit(a, body('acme', '2027-01-31T23:30:00Z'), 3, '2027-01-31T23:00:00Z'), 'PASS', "at the invoice's own index");
  eq(admit(a, body('beta', '2027-01-31T23:30:00Z'), 10, received), 'price_in_invoiced_period body.term_from', "inside beta's invoiced period");
  // Before the invoiced period's start is refused too (term_from ≥ every period_to); that
  // needs a log whose clock was before the period's end, as a unit test may have it.
  eq(admit(a, body('acme', '2026-12-15T00:00:00Z'), 10, '2026-12-15T00:00:00Z'), 'price_in_invoiced_period body.term_from', "before the invoiced period's start");
  // Another tenant's invoice is not the contract's: acme after January, inside beta's period.
  eq(admit(a, contract('C2', 'acme', '2027-02-01T00:00:00Z', '2027-03-01T00:00:00Z'), 10, received), 'PASS', "beta's invoice does not hold acme back");
});

await test('contract admission: no overlap with an earlier contract of its tenant, half-open (contract_overlap, body.term_from)', async () => {
  const a = context();
  const acme = (from, to) => contract('C2', 'acme', from, to);
  for (const [what, body, index, want] of [
    ['adjacent after C1', acme('2027-06-01T00:00:00Z', '2027-09-01T00:00:00Z'), 10, 'PASS'],
    ['adjacent before C1', acme('2027-02-01T00:00:00Z', '2027-03-01T00:00:00Z'), 10, 'PASS'],
    ['one second into the end of C1', acme('2027-05-31T23:59:59Z', '2027-09-01T00:00:00Z'), 10, 'contract_overlap body.term_from'],
    ['one second into the start of C1', acme('2027-02-01T00:00:00Z', '2027-03-01T00:00:01Z'), 10, 'contract_overlap body.term_from'],
    ["C1's term", acme('2027-03-01T00:00:00Z', '2027-06-01T00:00:00Z'), 10, 'contract_overlap body.term_from'],
    ['inside C1', acme('2027-04-01T00:00:00Z', '2027-05-01T00:00:00Z'), 10, 'contract_overlap body.term_from'],
    ['around C1', acme('2027-02-01T00:00:00Z', '2027-07-01T00:00:00Z'), 10, 'contract_overlap body.term_from'],
    ["C1's term for another tenant", contract('C2', 'beta', '2027-04-01T00:00:00Z', '2027-06-01T00:00:00Z'), 10, 'PASS'],
    ["C1's term at C1's own index", acme('2027-03-01T00:00:00Z', '2027-06-01T00:00:00Z'), 5, 'PASS'],
  ]) eq(admit(a, body, index), want, what);
  // A second contract, then one between the two: adjacent to both passes, any overlap not.
  a.apply(12, { kind: 'contract_registered', body: acme('2027-09-01T00:00:00Z', '2028-09-01T00:00:00Z') });
  eq(admit(a, contract('C3', 'acme', '2027-06-01T00:00:00Z', '2027-09-01T00:00:00Z'), 13), 'PASS', 'between C1 and C2, adjacent to both');
  eq(admit(a, contract('C3', 'acme', '2027-06-01T00:00:00Z', '2027-09-01T00:00:01Z'), 13), 'contract_overlap body.term_from', 'into C2');
  eq(admit(a, contract('C3', 'acme', '2027-06-01T00:00:00Z', '2027-09-01T00:00:01Z'), 12), 'PASS', "into C2 at C2's own index");
});

await test("contract admission: the rules in the spec's order", async () => {
  const a = context();
  // Each body breaks every rule from one on; the first is named.
  const past = '2027-08-01T00:00:00Z';
  eq(admit(a, contract('C1', 'zeta', '2027-01-15T00:00:00Z', '2027-04-01T00:00:00Z'), 10, past), 'unknown_tenant', 'unknown_tenant first');
  eq(admit(a, contract('C1', 'acme', '2027-01-15T00:00:00Z', '2027-04-01T00:00:00Z'), 10, past), 'already_registered body.contract', 'then already_registered');
  eq(admit(a, contract('C2', 'acme', '2027-01-15T00:00:00Z', '2027-04-01T00:00:00Z'), 10, past), 'price_in_past body.term_from', 'then price_in_past');
  eq(admit(a, contract('C2', 'acme', '2027-01-15T00:00:00Z', '2027-04-01T00:00:00Z'), 10, '2027-01-15T00:00:00Z'), 'price_in_invoiced_period body.term_from', 'then price_in_invoiced_period');
  eq(admit(a, contract('C2', 'acme', '2027-02-15T00:00:00Z', '2027-04-01T00:00:00Z'), 10, '2027-02-15T00:00:00Z'), 'contract_overlap body.term_from', 'then contract_overlap');
});

/**
 * The context of the lease rules: context() and acme's lease L-acme (7), beta's lease L-beta
 * (8); L-late, acme's, is registered at 20.
 */
function leaseContext() {
  const a = context();
  const lease = (lease, tenant) => ({ class: 'reserved', from: '2027-06-01T00:00:00Z', lease, nodes: [{ gpus: [0, 1], node: 'n1' }], tenant });
  a.apply(7, { kind: 'lease_registered', body: lease('L-acme', 'acme') });
  a.apply(8, { kind: 'lease_registered', body: lease('L-beta', 'beta') });
  a.apply(20, { kind: 'lease_registered', body: lease('L-late', 'acme') });
  return a;
}

/** A contract C2 of `tenant` from 2027-06-01 whose fees rent `leases` (null: a fee without one), with an SLA. */
const leased = (tenant, ...leases) => ({
  ...contract('C2', tenant, '2027-06-01T00:00:00Z', '2027-09-01T00:00:00Z'),
  fees: leases.map((lease, k) => ({ amount: '3000', category: 'compute', name: `node ${k}`, timing: 'advance', ...(lease === null ? {} : { lease }) })),
  sla: S.sla,
});

await test("contract admission: each fee's lease registered earlier (unknown_lease) to the contract's tenant (lease_tenant_mismatch), body.fees[i].lease", async () => {
  const a = leaseContext();
  eq(admit(a, leased('acme', 'L-acme'), 10), 'PASS', "acme's lease");
  eq(admit(a, leased('acme', null, 'L-acme', 'L-acme'), 10), 'PASS', "acme's lease on two fees, one fee without a lease");
  eq(admit(a, leased('beta', 'L-beta'), 10), 'PASS', "beta's lease");
  eq(admit(a, leased('acme', 'L-none'), 10), 'unknown_lease body.fees[0].lease', 'an unregistered lease');
  eq(admit(a, leased('acme', 'L-beta'), 10), 'lease_tenant_mismatch body.fees[0].lease', "beta's lease on acme's contract");
  eq(admit(a, leased('acme', 'L-late'), 10), 'unknown_lease body.fees[0].lease', 'a lease registered after the contract');
  eq(admit(a, leased('acme', 'L-late'), 20), 'unknown_lease body.fees[0].lease', "at the lease's own index");
  eq(admit(a, leased('acme', 'L-late'), 21), 'PASS', 'just after it');
  eq(admit(a, leased('acme', 'L-acme'), 7), 'unknown_lease body.fees[0].lease', "at L-acme's own index");
  // Fee by fee: the first bad fee is named.
  eq(admit(a, leased('acme', 'L-acme', null, 'L-beta', 'L-none'), 10), 'lease_tenant_mismatch body.fees[2].lease', 'the third fee first');
  eq(admit(a, leased('acme', 'L-acme', 'L-none', 'L-beta'), 10), 'unknown_lease body.fees[1].lease', 'the second fee first');
  // A contract whose fees rent no lease needs none.
  eq(admit(a, without(leased('acme', null), 'sla'), 10), 'PASS', 'no lease');
});

await test("contract admission: the fees' leases after the tenant, before the contract rules", async () => {
  const a = leaseContext();
  const past = '2027-08-01T00:00:00Z';
  eq(admit(a, leased('zeta', 'L-none'), 10), 'unknown_tenant', 'unknown_tenant first');
  eq(admit(a, { ...leased('acme', 'L-none'), contract: 'C1' }, 10, past), 'unknown_lease body.fees[0].lease', 'then the leases, before already_registered');
  eq(admit(a, { ...leased('acme', 'L-beta'), contract: 'C1' }, 10, past), 'lease_tenant_mismatch body.fees[0].lease', 'then the leases, before already_registered');
  eq(admit(a, { ...leased('acme', 'L-acme'), contract: 'C1' }, 10, past), 'already_registered body.contract', 'then already_registered');
  eq(admit(a, leased('acme', 'L-acme'), 10, past), 'price_in_past body.term_from', 'then price_in_past');
  eq(admit(a, { ...leased('acme', 'L-none'), term_from: '2027-04-01T00:00:00Z' }, 10), 'unknown_lease body.fees[0].lease', 'before contract_overlap');
  eq(admit(a, { ...leased('acme', 'L-acme'), term_from: '2027-04-01T00:00:00Z' }, 10), 'contract_overlap body.term_from', 'contract_overlap once the leases are good');
});

// ---------------------------------------------------------------- billing periods (billing.js)

/** The billing periods of a term as §2.2 strings: [from, to, full_from, full_to] each. */
const spans = (from, to, period, anchor) =>
  billingPeriods(at(from), at(to), period, anchor).map((s) => [iso(s.from), iso(s.to), iso(s.fullFrom), iso(s.fullTo)]);

await test('billing periods: calendar months clip the first and last to the term (contract.rs calendar_months_clip_the_first_and_last_to_the_term)', async () => {
  const s = spans('2027-01-15T12:00:00Z', '2027-03-10T00:00:00Z', 'month', 'calendar');
  eq(s, [
    ['2027-01-15T12:00:00Z', '2027-02-01T00:00:00Z', '2027-01-01T00:00:00Z', '2027-02-01T00:00:00Z'],
    ['2027-02-01T00:00:00Z', '2027-03-01T00:00:00Z', '2027-02-01T00:00:00Z', '2027-03-01T00:00:00Z'],
    ['2027-03-01T00:00:00Z', '2027-03-10T00:00:00Z', '2027-03-01T00:00:00Z', '2027-04-01T00:00:00Z'],
  ], 'three months');
  // A term on boundaries: whole periods, and no empty one after the end.
  eq(spans('2027-01-01T00:00:00Z', '2027-03-01T00:00:00Z', 'month', 'calendar').map((x) => x[0]), ['2027-01-01T00:00:00Z', '2027-02-01T00:00:00Z'], 'whole months');
  // One second.
  eq(spans('2027-05-31T23:59:59Z', '2027-06-01T00:00:00Z', 'month', 'calendar'), [['2027-05-31T23:59:59Z', '2027-06-01T00:00:00Z', '2027-05-01T00:00:00Z', '2027-06-01T00:00:00Z']], 'a second');
});

await test('billing periods: anniversaries keep the day and clamp it to short months; quarters and years (contract.rs anniversaries_keep_the_day_and_clamp_it_to_short_months)', async () => {
  eq(spans('2028-01-31T08:00:00Z', '2028-05-31T08:00:00Z', 'month', 'anniversary').map((x) => x[0]),
    ['2028-01-31T08:00:00Z', '2028-02-29T08:00:00Z', '2028-03-31T08:00:00Z', '2028-04-30T08:00:00Z'], 'from 31 January 2028, a leap year');
  // Each boundary counted from the first: back to the 31st after February.
  eq(spans('2027-01-31T08:00:00Z', '2027-04-30T08:00:00Z', 'month', 'anniversary').map((x) => [x[0], x[3]]),
    [['2027-01-31T08:00:00Z', '2027-02-28T08:00:00Z'], ['2027-02-28T08:00:00Z', '2027-03-31T08:00:00Z'], ['2027-03-31T08:00:00Z', '2027-04-30T08:00:00Z']], 'from 31 January 2027');
  const q = spans('2027-11-05T00:00:00Z', '2028-11-05T00:00:00Z', 'quarter', 'calendar');
  eq(q[0][2], '2027-10-01T00:00:00Z', 'the first quarter starts in October');
  eq(q[1][0], '2028-01-01T00:00:00Z', 'the second in January');
  eq(q[q.length - 1][3], '2029-01-01T00:00:00Z', 'the last ends in January 2029');
  eq(q.map((x) => x[0]), ['2027-11-05T00:00:00Z', '2028-01-01T00:00:00Z', '2028-04-01T00:00:00Z', '2028-07-01T00:00:00Z', '2028-10-01T00:00:00Z'], 'quarters');
  eq(spans('2027-06-01T00:00:00Z', '2029-06-01T00:00:00Z', 'year', 'calendar').length, 3, 'three calendar years');
  eq(spans('2027-08-31T00:00:00Z', '2028-09-01T00:00:00Z', 'quarter', 'anniversary').map((x) => x[0]),
    ['2027-08-31T00:00:00Z', '2027-11-30T00:00:00Z', '2028-02-29T00:00:00Z', '2028-05-31T00:00:00Z', '2028-08-31T00:00:00Z'], 'anniversary quarters from the 31st');
  eq(spans('2028-02-29T12:00:00Z', '2032-03-01T00:00:00Z', 'year', 'anniversary').map((x) => x[0]),
    ['2028-02-29T12:00:00Z', '2029-02-28T12:00:00Z', '2030-02-28T12:00:00Z', '2031-02-28T12:00:00Z', '2032-02-29T12:00:00Z'], 'anniversary years from 29 February');
});

await test('billing periods: the helpers, and a boundary past year 9999 ends the last period at the term', async () => {
  eq(iso(addMonths(at('2027-01-31T08:00:00Z'), 1)), '2027-02-28T08:00:00Z', 'clamped');
  eq(iso(addMonths(at('2027-01-31T08:00:00Z'), 13)), '2028-02-29T08:00:00Z', 'leap');
  eq(iso(addMonths(at('2027-12-15T00:00:00Z'), 1)), '2028-01-15T00:00:00Z', 'over the year');
  eq(addMonths(at('9999-12-01T00:00:00Z'), 1), null, 'past 9999');
  eq(iso(calendarStart(at('2027-05-17T13:00:00Z'), 1)), '2027-05-01T00:00:00Z', 'month');
  eq(iso(calendarStart(at('2027-05-17T13:00:00Z'), 3)), '2027-04-01T00:00:00Z', 'quarter');
  eq(iso(calendarStart(at('2027-12-31T23:59:59Z'), 3)), '2027-10-01T00:00:00Z', 'the last quarter');
  eq(iso(calendarStart(at('2027-05-17T13:00:00Z'), 12)), '2027-01-01T00:00:00Z', 'year');
  eq(spans('9999-11-15T00:00:00Z', iso(MAX_UNIX), 'month', 'calendar'), [
    ['9999-11-15T00:00:00Z', '9999-12-01T00:00:00Z', '9999-11-01T00:00:00Z', '9999-12-01T00:00:00Z'],
    ['9999-12-01T00:00:00Z', '9999-12-31T23:59:59Z', '9999-12-01T00:00:00Z', '9999-12-31T23:59:59Z'],
  ], 'the last period of time');
  eq(billingPeriods(at('2027-01-01T00:00:00Z'), at('2028-01-01T00:00:00Z'), 'week', 'calendar'), [], 'an unknown period');
  eq(billingPeriods(at('2027-01-01T00:00:00Z'), at('2028-01-01T00:00:00Z'), 'month', 'start'), [], 'an unknown anchor');
  // A term of 3660 days, monthly: every period in order, each whole period's end the next one's start.
  const long = billingPeriods(at('2027-01-31T00:00:00Z'), at('2027-01-31T00:00:00Z') + MAX_CONTRACT_TERM_SECONDS, 'month', 'anniversary');
  eq(long.length, 121, 'the periods of 3660 days');
  assert(long.every((x, k) => k === 0 || (x.fullFrom === long[k - 1].fullTo && x.from === long[k - 1].to)), 'contiguous');
});

// ---------------------------------------------------------------- contract_amended (§5.21)

/** The spec's example amendment. */
const A = { contract: 'C-acme-2027', reason: 'Ended early by mutual agreement', tenant: 'acme', term_to: '2027-07-01T00:00:00Z' };

await test('contract_amended is a ledger kind', async () => {
  assert(KINDS.has('contract_amended'), 'a kind');
  assert(LEDGER_KINDS.has('contract_amended'), 'signed by the log key only (bundle.js keyFor)');
  for (const [role, kinds] of Object.entries(ROLE_KINDS)) assert(!kinds.has('contract_amended'), `not a ${role} kind`);
  eq(MAX_EXCLUSION_REASON_BYTES, 500, 'a reason of at most 500 bytes');
});

await test('contract_amended bodies that pass (§5.21)', async () => {
  for (const [what, body] of [
    ["the spec's example", A],
    ['a reason of one byte', { ...A, reason: 'x' }],
    ['a reason of 500 bytes', { ...A, reason: 'x'.repeat(500) }],
    ['a reason of 500 bytes of Chinese', { ...A, reason: `${'\u4e2d'.repeat(166)}xx` }],
    ['a reason in Chinese with inner spaces', { ...A, reason: '双方协商  提前终止\u3000(工单 #42)' }],
    ['a trailing zero-width space (not White_Space)', { ...A, reason: 'Ended early\u200b' }],
    ['the first instant', { ...A, term_to: '2000-01-01T00:00:00Z' }],
    ['the last instant', { ...A, term_to: '9999-12-31T23:59:59Z' }],
    ['a leap day', { ...A, term_to: '2028-02-29T00:00:00Z' }],
  ]) eq(await bodyVerdict(body, 'contract_amended'), 'PASS', what);
});

await test('contract_amended bodies refused with the code and field of the spec (§5.21)', async () => {
  for (const [what, body, want] of [
    ['an empty reason', { ...A, reason: '' }, 'invalid_field body.reason'],
    ['a reason of 501 bytes', { ...A, reason: 'x'.repeat(501) }, 'invalid_field body.reason'],
    ['a reason of 501 bytes in two-byte characters', { ...A, reason: `${'\u00e9'.repeat(250)}x` }, 'invalid_field body.reason'],
    ['a reason of 501 bytes of Chinese', { ...A, reason: '\u4e2d'.repeat(167) }, 'invalid_field body.reason'],
    ['a reason with a leading space', { ...A, reason: ' Ended early' }, 'invalid_field body.reason'],
    ['a reason with a trailing space', { ...A, reason: 'Ended early ' }, 'invalid_field body.reason'],
    ['a reason with a trailing ideographic space', { ...A, reason: 'Ended early\u3000' }, 'invalid_field body.reason'],
    ['a reason with a leading no-break space', { ...A, reason: '\u00a0Ended early' }, 'invalid_field body.reason'],
    ['a reason of a space', { ...A, reason: ' ' }, 'invalid_field body.reason'],
    ['a reason with a line feed', { ...A, reason: 'Ended\nearly' }, 'invalid_field body.reason'],
    ['a reason with a tab', { ...A, reason: 'Ended\tearly' }, 'invalid_field body.reason'],
    ['a reason with DEL', { ...A, reason: 'Ended early\u007f' }, 'invalid_field body.reason'],
    ['a reason with U+0085', { ...A, reason: 'Ended\u0085early' }, 'invalid_field body.reason'],
  ]) eq(await bodyVerdict(body, 'contract_amended'), want, what);
  // Form errors (plain leaf_invalid): the message names what is wrong.
  for (const [what, body, want] of [
    ['no tenant', without(A, 'tenant'), /^body has no member tenant$/],
    ['no contract', without(A, 'contract'), /^body has no member contract$/],
    ['no term_to', without(A, 'term_to'), /^body has no member term_to$/],
    ['no reason', without(A, 'reason'), /^body has no member reason$/],
    ['a term_from', { ...A, term_from: '2027-01-01T00:00:00Z' }, /^body has an unknown member term_from$/],
    ['fees', { ...A, fees: [] }, /^body has an unknown member fees$/],
    ['a null reason', { ...A, reason: null }, /^body\.reason is not a string$/],
    ['a number reason', { ...A, reason: 42 }, /^body\.reason is not a string$/],
    ['a number term_to', { ...A, term_to: 1814400000 }, /^body\.term_to is not a string$/],
    ['a null contract', { ...A, contract: null }, /^body\.contract is not a string$/],
    ['a tenant that is no id', { ...A, tenant: 'a b' }, /^body\.tenant is not an identifier$/],
    ['the reserved tenant', { ...A, tenant: 'ledger' }, /^body\.tenant "ledger" is reserved/],
    ['a contract that is no id', { ...A, contract: '-C1' }, /^body\.contract is not an identifier$/],
    ['the reserved contract id', { ...A, contract: 'ledger' }, /^body\.contract "ledger" is reserved/],
    ['term_to a date', { ...A, term_to: '2027-07-01' }, /^body\.term_to is not a timestamp$/],
    ['term_to 29 February 2027', { ...A, term_to: '2027-02-29T00:00:00Z' }, /^body\.term_to is not a timestamp$/],
    ['term_to before 2000', { ...A, term_to: '1999-12-31T23:59:59Z' }, /^body\.term_to is not a timestamp$/],
    ['term_to with a fraction', { ...A, term_to: '2027-07-01T00:00:00.000Z' }, /^body\.term_to is not a timestamp$/],
    // The order: the whole shape, then tenant, contract, term_to, reason.
    ['the shape first: a null reason and a bad tenant', { ...A, tenant: 'a b', reason: null }, /^body\.reason is not a string$/],
    ['tenant before contract', { ...A, tenant: 'a b', contract: '-C1' }, /^body\.tenant is not an identifier$/],
    ['contract before term_to', { ...A, contract: '-C1', term_to: '2027-07-01' }, /^body\.contract is not an identifier$/],
    ['term_to before reason', { ...A, term_to: '2027-07-01', reason: '' }, /^body\.term_to is not a timestamp$/],
  ]) {
    const got = await bodyVerdict(body, 'contract_amended');
    assert(want.test(got), `${what}: ${got}`);
  }
});

/** An amendment of `tenant`'s contract `contract` ending its term at `to`. */
const amendment = (contract, tenant, to, reason = A.reason) => ({ contract, reason, tenant, term_to: to });

/** `reason field` of Admission.check on the contract_amended entry at `index`, received at `received`, or 'PASS'. */
function admitAmendment(a, body, index, received = '2027-02-01T00:00:00Z') {
  try {
    a.check(index, { kind: 'contract_amended', body }, received);
    return 'PASS';
  } catch (e) {
    assert(e.item === `entry ${index}`, `the item: ${e.item}`);
    const field = fieldOf(e.message);
    return field ? `${e.reason} ${field}` : e.reason;
  }
}

/** An invoice of `tenant` for [from, to) (an invoice_issued entry). */
const invoice = (number, tenant, from, to) => ({ kind: 'invoice_issued', body: { number, tenant, period_from: from, period_to: to, currency: 'CNY', total: '1.00', checkpoint_size: 1, invoice_sha256: '0'.repeat(64) } });

// context(): tenants acme (1) and beta (2), acme invoiced for January 2027 (3), a skew of 3600 s
// (4), acme's C1 for [2027-03-01, 2027-06-01) in calendar months (5), beta invoiced for January
// to March (6).

await test('amendment admission: the tenant registered earlier (unknown_tenant), then its contract (unknown_contract, body.contract)', async () => {
  const a = context();
  eq(admitAmendment(a, amendment('C1', 'acme', '2027-05-01T00:00:00Z'), 10), 'PASS', 'C1 ended early');
  eq(admitAmendment(a, amendment('C1', 'acme', '2027-07-01T00:00:00Z'), 10), 'PASS', 'C1 extended');
  eq(admitAmendment(a, amendment('C1', 'zeta', '2027-05-01T00:00:00Z'), 10), 'unknown_tenant', 'an unregistered tenant');
  eq(admitAmendment(a, amendment('C9', 'zeta', '2027-05-01T00:00:00Z'), 10), 'unknown_tenant', 'an unregistered tenant and an unknown contract: the tenant first');
  eq(admitAmendment(a, amendment('C1', 'beta', '2027-05-01T00:00:00Z'), 2), 'unknown_tenant', "at the tenant's own index");
  eq(admitAmendment(a, amendment('C9', 'acme', '2027-05-01T00:00:00Z'), 10), 'unknown_contract body.contract', 'a contract never registered');
  eq(admitAmendment(a, amendment('C1', 'beta', '2027-05-01T00:00:00Z'), 10), 'unknown_contract body.contract', "acme's C1 named by beta");
  eq(admitAmendment(a, amendment('C1', 'acme', '2027-05-01T00:00:00Z'), 5), 'unknown_contract body.contract', "at C1's own index");
  eq(admitAmendment(a, amendment('C1', 'acme', '2027-05-01T00:00:00Z'), 6), 'PASS', 'just after it');
  // A contract registered later is unknown before its index.
  a.apply(20, { kind: 'contract_registered', body: contract('C2', 'beta', '2027-06-01T00:00:00Z', '2027-09-01T00:00:00Z') });
  eq(admitAmendment(a, amendment('C2', 'beta', '2027-08-01T00:00:00Z'), 10), 'unknown_contract body.contract', 'before its registration');
  eq(admitAmendment(a, amendment('C2', 'beta', '2027-08-01T00:00:00Z'), 21), 'PASS', 'after it');
});

await test('amendment admission: term_to after the start (invalid_field), within 3660 days of it (quantity_out_of_range), not the current end (invalid_field), body.term_to', async () => {
  const a = context();
  const from = at('2027-03-01T00:00:00Z');
  for (const [what, to, want] of [
    ['the term_from', '2027-03-01T00:00:00Z', 'invalid_field body.term_to'],
    ['before the term_from', '2027-02-15T00:00:00Z', 'invalid_field body.term_to'],
    ['a second after the term_from', '2027-03-01T00:00:01Z', 'PASS'],
    ['3660 days after the term_from', iso(from + MAX_CONTRACT_TERM_SECONDS), 'PASS'],
    ['3660 days and a second', iso(from + MAX_CONTRACT_TERM_SECONDS + 1), 'quantity_out_of_range body.term_to'],
    ['the current end', '2027-06-01T00:00:00Z', 'invalid_field body.term_to'],
    ['a second before it', '2027-05-31T23:59:59Z', 'PASS'],
    ['a second after it', '2027-06-01T00:00:01Z', 'PASS'],
  ]) eq(admitAmendment(a, amendment('C1', 'acme', to), 10), want, what);
  // The current end is the latest amendment's, as of the entry's index.
  a.apply(7, { kind: 'contract_amended', body: amendment('C1', 'acme', '2027-05-15T00:00:00Z') });
  eq(admitAmendment(a, amendment('C1', 'acme', '2027-05-15T00:00:00Z'), 10), 'invalid_field body.term_to', 'the amended end again');
  eq(admitAmendment(a, amendment('C1', 'acme', '2027-06-01T00:00:00Z'), 10), 'PASS', 'back to the registered end');
  eq(admitAmendment(a, amendment('C1', 'acme', '2027-05-15T00:00:00Z'), 7), 'PASS', "the amended end at the amendment's own index");
  eq(admitAmendment(a, amendment('C1', 'acme', '2027-06-01T00:00:00Z'), 7), 'invalid_field body.term_to', 'the registered end before the amendment');
  a.apply(8, { kind: 'contract_amended', body: amendment('C1', 'acme', '2027-08-01T00:00:00Z') });
  eq(admitAmendment(a, amendment('C1', 'acme', '2027-08-01T00:00:00Z'), 10), 'invalid_field body.term_to', 'the latest amendment wins');
  eq(admitAmendment(a, amendment('C1', 'acme', '2027-05-15T00:00:00Z'), 10), 'PASS', 'an earlier amendment is not the current end');
  // The 3660 days count from the term's start, whatever the amendments.
  eq(admitAmendment(a, amendment('C1', 'acme', iso(from + MAX_CONTRACT_TERM_SECONDS + 1)), 10), 'quantity_out_of_range body.term_to', 'too long after amendments');
});

await test('amendment admission: the change begins no earlier than the ledger clock less the skew (price_in_past, body.term_to)', async () => {
  const a = context();
  const end = (to, received, index = 10) => admitAmendment(a, amendment('C1', 'acme', to), index, received);
  // Ending early: m is the new end.
  eq(end('2027-04-09T23:00:00Z', '2027-04-10T00:00:00Z'), 'PASS', 'an end 3600 s before the clock');
  eq(end('2027-04-09T22:59:59Z', '2027-04-10T00:00:00Z'), 'price_in_past body.term_to', 'an end 3601 s before the clock');
  eq(end('2027-05-01T00:00:00Z', '2027-04-10T00:00:00Z'), 'PASS', 'an end ahead');
  // Extending: m is the current end.
  eq(end('2027-07-01T00:00:00Z', '2027-06-01T01:00:00Z'), 'PASS', 'a term that ended 3600 s ago extended');
  eq(end('2027-07-01T00:00:00Z', '2027-06-01T01:00:01Z'), 'price_in_past body.term_to', 'a term that ended 3601 s ago extended');
  eq(end('2027-05-31T00:00:00Z', '2027-06-01T01:00:00Z'), 'price_in_past body.term_to', 'an ended term shortened');
  // The policy in force at the entry's index: a skew of 0 from entry 20 on.
  a.apply(20, { kind: 'log_policy', body: { max_record_age_seconds: 35 * 86400, max_future_skew_seconds: 0 } });
  eq(end('2027-04-10T00:00:00Z', '2027-04-10T00:00:00Z', 21), 'PASS', 'at the clock, no skew');
  eq(end('2027-04-09T23:59:59Z', '2027-04-10T00:00:00Z', 21), 'price_in_past body.term_to', 'a second before it, no skew');
  eq(end('2027-04-09T23:59:59Z', '2027-04-10T00:00:00Z', 20), 'PASS', "the old policy at the new one's index");
});

await test('amendment admission: no invoice of the tenant holds the billing period the change begins in (price_in_invoiced_period, body.term_to)', async () => {
  const a = context();
  const end = (to, index = 20, received = '2027-02-01T00:00:00Z') => admitAmendment(a, amendment('C1', 'acme', to), index, received);
  // Another tenant's invoice is not the contract's: beta's January to March.
  eq(end('2027-03-20T00:00:00Z'), 'PASS', "beta's invoice does not hold acme back");
  a.apply(7, invoice('INV-000003', 'acme', '2027-03-01T00:00:00Z', '2027-04-01T00:00:00Z'));
  for (const [what, to, want] of [
    ['an end inside the invoiced March', '2027-03-20T00:00:00Z', 'price_in_invoiced_period body.term_to'],
    ['an end a second into March', '2027-03-01T00:00:01Z', 'price_in_invoiced_period body.term_to'],
    ['an end on 1 April, the end of the invoiced period', '2027-04-01T00:00:00Z', 'PASS'],
    ['an end inside April', '2027-04-15T00:00:00Z', 'PASS'],
    ['an extension', '2027-07-01T00:00:00Z', 'PASS'],
  ]) eq(end(to), want, what);
  eq(end('2027-03-20T00:00:00Z', 7), 'PASS', "the invoice at the amendment's own index is not earlier");
  // Invoiced to 10 April (part of April, a contract without a commitment): the April fee is on
  // that invoice, so any end in April is refused, also after the 10th; May is not.
  a.apply(8, invoice('INV-000004', 'acme', '2027-04-01T00:00:00Z', '2027-04-10T00:00:00Z'));
  for (const [what, to, want] of [
    ['an end before the 10th', '2027-04-05T00:00:00Z', 'price_in_invoiced_period body.term_to'],
    ['an end after the 10th, in the same month', '2027-04-20T00:00:00Z', 'price_in_invoiced_period body.term_to'],
    ['an end on 1 May', '2027-05-01T00:00:00Z', 'PASS'],
    ['an end inside May', '2027-05-20T00:00:00Z', 'PASS'],
  ]) eq(end(to), want, what);
  // Invoiced to its end, 1 June, a boundary: extending changes no invoiced period.
  a.apply(9, invoice('INV-000005', 'acme', '2027-04-10T00:00:00Z', '2027-06-01T00:00:00Z'));
  eq(end('2027-07-01T00:00:00Z'), 'PASS', 'a term ending on a boundary, invoiced to it, extended');
  eq(end('2027-05-20T00:00:00Z'), 'price_in_invoiced_period body.term_to', 'that term shortened');
});

await test('amendment admission: a term ending inside a period lengthens that period when extended; the term as amended so far', async () => {
  const a = context();
  // C1 ended early on 15 May (7), invoiced to that end (8): its last period [1 May, 15 May) is invoiced.
  a.apply(7, { kind: 'contract_amended', body: amendment('C1', 'acme', '2027-05-15T00:00:00Z') });
  a.apply(8, invoice('INV-000003', 'acme', '2027-03-01T00:00:00Z', '2027-05-15T00:00:00Z'));
  eq(admitAmendment(a, amendment('C1', 'acme', '2027-06-15T00:00:00Z'), 10), 'price_in_invoiced_period body.term_to', 'extending lengthens the invoiced May');
  eq(admitAmendment(a, amendment('C1', 'acme', '2027-05-20T00:00:00Z'), 10), 'price_in_invoiced_period body.term_to', 'even within May');
  // Invoiced only to 1 May: May is not invoiced, it may be lengthened.
  const b = context();
  b.apply(7, { kind: 'contract_amended', body: amendment('C1', 'acme', '2027-05-15T00:00:00Z') });
  b.apply(8, invoice('INV-000003', 'acme', '2027-03-01T00:00:00Z', '2027-05-01T00:00:00Z'));
  eq(admitAmendment(b, amendment('C1', 'acme', '2027-06-15T00:00:00Z'), 10), 'PASS', 'May not invoiced: extended');
  eq(admitAmendment(b, amendment('C1', 'acme', '2027-05-10T00:00:00Z'), 10), 'PASS', 'May not invoiced: shortened again');
  eq(admitAmendment(b, amendment('C1', 'acme', '2027-04-30T00:00:00Z'), 10), 'price_in_invoiced_period body.term_to', 'an end in the invoiced April');
  // Anniversary periods: from 31 January at 08:00, cut on the 28th of February, the 31st of March, the 30th of April.
  const c = context();
  c.apply(7, { kind: 'tenant_registered', body: { tenant: 'gamma' } });
  c.apply(8, { kind: 'contract_registered', body: { ...contract('C2', 'gamma', '2027-01-31T08:00:00Z', '2027-12-31T08:00:00Z'), billing_anchor: 'anniversary' } });
  c.apply(9, invoice('INV-000003', 'gamma', '2027-01-31T08:00:00Z', '2027-03-31T08:00:00Z'));
  const gamma = (to) => admitAmendment(c, amendment('C2', 'gamma', to), 20, '2027-01-31T08:00:00Z');
  eq(gamma('2027-04-15T00:00:00Z'), 'PASS', 'an end in the period from 31 March 08:00, invoiced to its start');
  eq(gamma('2027-03-31T08:00:00Z'), 'PASS', 'an end on that boundary');
  eq(gamma('2027-03-31T07:59:59Z'), 'price_in_invoiced_period body.term_to', 'a second before it: the period from 28 February');
  c.apply(10, invoice('INV-000004', 'gamma', '2027-03-31T08:00:00Z', '2027-03-31T08:00:01Z'));
  eq(gamma('2027-04-30T08:00:00Z'), 'PASS', 'an end on the next boundary');
  eq(gamma('2027-04-30T07:59:59Z'), 'price_in_invoiced_period body.term_to', 'a second of the period invoiced');
});

await test('amendment admission: an extension overlaps no other contract of the tenant, half-open (contract_overlap, body.term_to)', async () => {
  const a = context();
  a.apply(7, { kind: 'contract_registered', body: contract('C2', 'acme', '2027-07-01T00:00:00Z', '2028-01-01T00:00:00Z') });
  a.apply(8, { kind: 'contract_registered', body: contract('C3', 'beta', '2027-06-01T00:00:00Z', '2027-07-01T00:00:00Z') });
  for (const [what, to, index, want] of [
    ['up to C2', '2027-07-01T00:00:00Z', 10, 'PASS'],
    ['a second into C2', '2027-07-01T00:00:01Z', 10, 'contract_overlap body.term_to'],
    ['around C2', '2028-06-01T00:00:00Z', 10, 'contract_overlap body.term_to'],
    ['into C2 before its registration', '2027-08-01T00:00:00Z', 7, 'PASS'],
    ['shortened: no overlap to check', '2027-04-01T00:00:00Z', 10, 'PASS'],
  ]) eq(admitAmendment(a, amendment('C1', 'acme', to), index), want, what);
  // beta's C3 lies in the gap: another tenant's term is its own.
  eq(admitAmendment(a, amendment('C3', 'beta', '2027-08-01T00:00:00Z'), 10), 'PASS', "beta's C3 extended over acme's C2's time");
  // C2 extended to 2028 then C1 shortened: a contract of acme may then fill the gap.
  a.apply(11, { kind: 'contract_amended', body: amendment('C1', 'acme', '2027-05-01T00:00:00Z') });
  eq(admitAmendment(a, amendment('C1', 'acme', '2027-07-01T00:00:00Z'), 12), 'PASS', 'C1 extended back to C2');
  eq(admitAmendment(a, amendment('C1', 'acme', '2027-07-01T00:00:01Z'), 12), 'contract_overlap body.term_to', 'and one second over');
});

await test('contract admission: terms compared as amended by the amendments before the entry (contract_overlap, body.term_from)', async () => {
  const a = context();
  a.apply(7, { kind: 'contract_amended', body: amendment('C1', 'acme', '2027-05-15T00:00:00Z') });
  eq(admit(a, contract('C2', 'acme', '2027-05-15T00:00:00Z', '2027-09-01T00:00:00Z'), 10), 'PASS', 'from the amended end');
  eq(admit(a, contract('C2', 'acme', '2027-05-14T23:59:59Z', '2027-09-01T00:00:00Z'), 10), 'contract_overlap body.term_from', 'a second before it');
  eq(admit(a, contract('C2', 'acme', '2027-05-15T00:00:00Z', '2027-09-01T00:00:00Z'), 7), 'contract_overlap body.term_from', "at the amendment's own index: the registered term");
  a.apply(8, { kind: 'contract_amended', body: amendment('C1', 'acme', '2027-07-01T00:00:00Z') });
  eq(admit(a, contract('C2', 'acme', '2027-06-15T00:00:00Z', '2027-09-01T00:00:00Z'), 10), 'contract_overlap body.term_from', 'into the extended term');
  eq(admit(a, contract('C2', 'acme', '2027-07-01T00:00:00Z', '2027-09-01T00:00:00Z'), 10), 'PASS', 'after the extended term');
  eq(admit(a, contract('C2', 'acme', '2027-06-15T00:00:00Z', '2027-09-01T00:00:00Z'), 8), 'PASS', 'before the extension');
  // An amendment naming C1 under another tenant (never admitted) moves nothing (contract.rs `Contracts::apply`).
  a.apply(9, { kind: 'contract_amended', body: amendment('C1', 'beta', '2027-03-15T00:00:00Z') });
  eq(admit(a, contract('C2', 'acme', '2027-06-15T00:00:00Z', '2027-09-01T00:00:00Z'), 10), 'contract_overlap body.term_from', "beta's stray amendment of C1");
  // Nor does one before the contract's registration (an unknown contract then).
  a.apply(11, { kind: 'contract_amended', body: amendment('C9', 'acme', '2027-12-01T00:00:00Z') });
  a.apply(12, { kind: 'contract_registered', body: contract('C9', 'acme', '2027-07-01T00:00:00Z', '2027-09-01T00:00:00Z') });
  eq(admit(a, contract('C10', 'acme', '2027-10-01T00:00:00Z', '2027-11-01T00:00:00Z'), 13), 'PASS', 'an amendment before a registration is no amendment of it');
  eq(admit(a, contract('C10', 'acme', '2027-08-01T00:00:00Z', '2027-11-01T00:00:00Z'), 13), 'contract_overlap body.term_from', "C9's registered term");
});

await test("amendment admission: the rules in the spec's order", async () => {
  const a = context();
  a.apply(7, invoice('INV-000003', 'acme', '2027-03-01T00:00:00Z', '2027-04-01T00:00:00Z'));
  a.apply(8, { kind: 'contract_registered', body: contract('C2', 'acme', '2027-06-15T00:00:00Z', '2027-09-01T00:00:00Z') });
  const late = '2040-01-01T00:00:00Z';
  const from = at('2027-03-01T00:00:00Z');
  // Each body breaks every rule from one on; the first is named.
  eq(admitAmendment(a, amendment('C9', 'zeta', '2027-02-15T00:00:00Z'), 10, late), 'unknown_tenant', 'unknown_tenant first');
  eq(admitAmendment(a, amendment('C9', 'acme', '2027-02-15T00:00:00Z'), 10, late), 'unknown_contract body.contract', 'then unknown_contract');
  eq(admitAmendment(a, amendment('C1', 'acme', '2027-02-15T00:00:00Z'), 10, late), 'invalid_field body.term_to', 'then the start');
  eq(admitAmendment(a, amendment('C1', 'acme', iso(from + MAX_CONTRACT_TERM_SECONDS + 1)), 10, late), 'quantity_out_of_range body.term_to', 'then the length');
  eq(admitAmendment(a, amendment('C1', 'acme', '2027-06-01T00:00:00Z'), 10, late), 'invalid_field body.term_to', 'then the current end');
  eq(admitAmendment(a, amendment('C1', 'acme', '2027-03-20T00:00:00Z'), 10, late), 'price_in_past body.term_to', 'then the past');
  eq(admitAmendment(a, amendment('C1', 'acme', '2027-03-20T00:00:00Z'), 10), 'price_in_invoiced_period body.term_to', 'then an invoiced period');
  // An extension into C2 starting inside the invoiced period: invoiced first.
  a.apply(9, { kind: 'contract_amended', body: amendment('C1', 'acme', '2027-03-20T00:00:00Z') });
  eq(admitAmendment(a, amendment('C1', 'acme', '2027-07-01T00:00:00Z'), 10), 'price_in_invoiced_period body.term_to', 'invoiced before contract_overlap');
  eq(admitAmendment(a, amendment('C1', 'acme', '2027-07-01T00:00:00Z'), 9), 'contract_overlap body.term_to', 'contract_overlap last (at the amendment of C1: its end on a boundary)');
});

console.log(`\n${results.passed} passed, ${results.failures.length} failed`);
if (results.failures.length) {
  for (const f of results.failures) console.log(`FAIL ${f}`);
  process.exit(1);
}
