// Tests of the console verifier's contract_registered rules (§5.19 and §6.7, contracts), run
// with Node ≥ 20 and no npm packages, and without the `gpuledger` binary:
//
//     node assets/console/verify/test/contracts.mjs
//
// The body checks are run through leaf.js's checkEnvelope (an envelope with a signature of the
// right length that is never verified: checkEnvelope checks forms, bundle.js verifies), the
// admission rules through admission.js's Admission (apply the context, then check an entry at
// its index), as run.mjs does for nodes and leases. A whole bundle needs the log key's entries
// signed; run.mjs's bundle tests do that and compare with `gpuledger verify`.
// Exit status 0 when every test passed, 1 otherwise.

import { checkEnvelope, KINDS, LEDGER_KINDS, MAX_CONTRACT_FEES, MAX_CONTRACT_TERM_SECONDS, MAX_INCLUDED_MODELS, MAX_SLA_STEPS } from '../leaf.js';
import { Admission } from '../admission.js';
import { results, test, assert, eq } from './harness.mjs';



/** The field a message starts with (`body.fees[1].amount`), or ''. */
const fieldOf = (message) => /^body\.[A-Za-z0-9_.[\]]+/.exec(message)?.[0].replace(/\.$/, '') ?? '';

/**
 * The verdict of checkEnvelope on a contract_registered body: 'PASS', `<code> <field>` when the
 * message starts with a reason code and a field, else the whole message (a form error of the
 * shape, reported as plain `leaf_invalid`).
 */
async function bodyVerdict(body) {
  const env = { v: 3, kind: 'contract_registered', signer: 'ledger', key_id: '0123456789abcdef', seq: 1, body, sig: `${'A'.repeat(86)}==` };
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

console.log(`\n${results.passed} passed, ${results.failures.length} failed`);
if (results.failures.length) {
  for (const f of results.failures) console.log(`FAIL ${f}`);
  process.exit(1);
}
