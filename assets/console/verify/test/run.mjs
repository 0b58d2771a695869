// Tests of the console's in-browser verifier, run with Node ≥ 20 and no npm packages:
//
//     node assets/console/verify/test/run.mjs
//
// They run the verifier on the committed artefacts in tests/fixtures/certificate/ (written by
// tests/certificates.rs) and on tampered copies made here, expecting PASS on the originals and
// FAIL with the reason `gpuledger verify` gives on each copy; and on the vectors in
// tests/vectors/ (leaf hashes, signed messages, the tree's proofs, the checkpoint, the
// adversarial Ed25519 cases, the witness cosignature vectors).
//
// With GPULEDGER_BIN set to the `gpuledger` binary (tests/console_verify.rs sets it), every
// certificate, bundle, checkpoint and consistency case is also run through
// `gpuledger verify --json`, and its verdict and reason (and, for certificates and bundles,
// the failing item) must equal the browser verifier's.
// Exit status 0 when every test passed, 1 otherwise.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import * as verify from '../index.js';
import { b64decode, b64encode, canonicalize, concat, hex, parseStrict, utf8, fromUtf8 } from '../jcs.js';
import { PublicKey, keyProblem, isSmallOrderPoint, SMALL_ORDER_ENCODINGS } from '../ed25519.js';
import { leafHash, verifyInclusion, verifyConsistency, nodeHash, splitPoint } from '../merkle.js';
import { checkEnvelope } from '../leaf.js';
import { envelopeKeyId, parseVerifierKey, ALG_COSIGNATURE_V1, validCosignatures } from '../note.js';
import { signedMessage } from '../certificate.js';
import { Dec } from '../decimal.js';
import { Admission } from '../admission.js';
import { results, test, assert, eq } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../../../..');
const fixtures = path.join(root, 'tests/fixtures/certificate');
const vectors = path.join(root, 'tests/vectors');
const read = (p) => fs.readFileSync(p, 'utf8');
const readBytes = (p) => new Uint8Array(fs.readFileSync(p));
const bin = process.env.GPULEDGER_BIN || null;
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'console-verify-'));

let binaryChecks = 0;
/** The last report of `gpuledger verify`. */
let lastReport = null;
/** Where both verifiers failed for the same reason: the items each named. */
const itemsCompared = [];

/** The browser verifier's failing item must be the one `gpuledger verify` names. */
function compareItems(r, what) {
  if (!r.ok && lastReport && lastReport.result !== 'PASS') {
    itemsCompared.push({ what, ours: r.failure.item, theirs: lastReport.item });
    eq(r.failure.item, lastReport.item, `the failing item (gpuledger verify: ${lastReport.message})`);
  }
}


/** The verdict of a result: 'PASS' or the reason. */
const verdict = (r) => (r.ok ? 'PASS' : r.failure.reason);

function expectVerdict(r, expected, item) {
  if (verdict(r) !== expected) {
    throw new Error(`expected ${expected}, got ${verdict(r)}${r.ok ? '' : ` (${r.failure.item}: ${r.failure.message})`}`);
  }
  if (item !== undefined) eq(r.failure.item, item, 'failure item');
  // Every answer has display steps; a failed one ends in its failed step.
  assert(Array.isArray(r.steps) && r.steps.every((s) => typeof s.name === 'string' && typeof s.ok === 'boolean'), 'steps');
  if (!r.ok) assert(r.steps.length && !r.steps.at(-1).ok && r.steps.slice(0, -1).every((s) => s.ok), 'the last step, only, failed');
  // Every PASS says who vouches for the checkpoint's history (summary.witnesses, the shape of
  // `gpuledger verify --json`): the operator alone when no witness was required.
  if (r.ok) {
    const w = r.summary && r.summary.witnesses;
    assert(w && typeof w === 'object', `a PASS without summary.witnesses: ${JSON.stringify(r.summary)}`);
    if (w.required === 0) eq(w, { required: 0, found: null, operator_alone: true }, 'summary.witnesses without witnesses');
    else {
      assert(w.operator_alone === undefined && w.found >= w.required && Array.isArray(w.cosigned_by), `summary.witnesses with witnesses: ${JSON.stringify(w)}`);
      eq(w.cosigned_by.length, w.found, 'one cosigned_by per witness found');
    }
  }
}

/** Witness verdicts compared: how many PASSes agreed with `gpuledger verify` on summary.witnesses. */
let witnessChecks = 0;

/**
 * Where both verifiers passed, the browser's summary.witnesses must say what the last
 * `gpuledger verify --json` report says: operator alone (and its message the caveat), or the
 * same quorum and the same witnesses.
 */
function sameWitnesses(r) {
  if (!bin || !r.ok || !lastReport || lastReport.result !== 'PASS') return;
  const ours = r.summary.witnesses;
  const theirs = lastReport.summary && lastReport.summary.witnesses;
  assert(theirs, `gpuledger verify's PASS has no summary.witnesses: ${JSON.stringify(lastReport.summary)}`);
  eq(ours.operator_alone === true, theirs.operator_alone === true, 'summary.witnesses.operator_alone (gpuledger verify)');
  eq(ours.required, theirs.required, 'summary.witnesses.required (gpuledger verify)');
  eq(ours.found, theirs.found, 'summary.witnesses.found (gpuledger verify)');
  eq((ours.cosigned_by || []).map((c) => [c.name, c.key_id, c.timestamp]), (theirs.cosigned_by || []).map((c) => [c.name, c.key_id, c.timestamp]), 'summary.witnesses.cosigned_by (gpuledger verify)');
  eq(lastReport.message.endsWith(`; ${verify.OPERATOR_ALONE}`), ours.operator_alone === true, `the operator-alone caveat in gpuledger verify's message: ${lastReport.message}`);
  witnessChecks++;
}

/** Runs `gpuledger verify` (when GPULEDGER_BIN is set) and returns 'PASS' or its reason. */
function binaryVerdict(args) {
  let out;
  try {
    out = execFileSync(bin, ['verify', ...args, '--json'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (e) {
    if (e.status !== 1) throw new Error(`gpuledger verify exited ${e.status}: ${e.stderr}`);
    out = e.stdout;
  }
  const report = JSON.parse(out.trim().split('\n').pop());
  lastReport = report;
  binaryChecks++;
  return report.result === 'PASS' ? 'PASS' : report.reason;
}

let fileNo = 0;
function writeTmp(name, content) {
  const p = path.join(tmp, `${fileNo++}-${name}`);
  fs.writeFileSync(p, content);
  return p;
}

// ---------------------------------------------------------------- fixtures and tampering

const logKey = read(path.join(fixtures, 'verifier_key.txt')).trim();
const certText = read(path.join(fixtures, 'certificate.json'));
const bundleV3 = read(path.join(fixtures, 'bundle.v3.ndjson'));
const bundleV2 = read(path.join(fixtures, 'bundle.ndjson'));
const BUNDLES = { v3: bundleV3, v2: bundleV2 };

const linesOf = (text) => text.split('\n').slice(0, -1);
const joinLines = (lines) => `${lines.join('\n')}\n`;

/** The bundle's lines parsed, with each entry's leaf as an object (both formats). */
function parsed(text) {
  return linesOf(text).map((l) => {
    const o = parseStrict(l);
    if (o.type === 'entry' && typeof o.leaf === 'string') o.leafObject = parseStrict(fromUtf8(b64decode(o.leaf)));
    else if (o.type === 'entry') o.leafObject = o.leaf;
    return o;
  });
}

/** Writes a parsed line back in its format (v3 canonical; v2 keeps its proof, re-encodes the leaf). */
function unparse(o, v3) {
  const copy = Object.assign(Object.create(null), o);
  const leafObject = copy.leafObject;
  delete copy.leafObject;
  if (copy.type === 'entry') copy.leaf = v3 ? leafObject : b64encode(utf8(canonicalize(leafObject)));
  return v3 ? canonicalize(copy) : JSON.stringify(copy);
}

/** A copy of a bundle with `edit(lines)` applied to its parsed lines. */
function tamper(format, edit) {
  const v3 = format === 'v3';
  const lines = parsed(BUNDLES[format]);
  const out = edit(lines) ?? lines;
  return joinLines(out.map((o) => (typeof o === 'string' ? o : unparse(o, v3))));
}

const entryLines = (lines) => lines.filter((o) => o.type === 'entry');
const records = (lines) => entryLines(lines).filter((o) => ['gpu_usage', 'energy'].includes(o.leafObject.envelope.kind));
const lastRecord = (lines) => records(lines).at(-1);
const firstUsage = (lines) => records(lines).find((o) => o.leafObject.envelope.kind === 'gpu_usage');
const endCount = (lines) => lines.find((o) => o.type === 'end');

/** Flips one base64 character of `s` at position `at` (from the start), keeping it base64. */
function flipB64(s, at = 10) {
  const c = s[at] === 'A' ? 'B' : 'A';
  return s.slice(0, at) + c + s.slice(at + 1);
}

/** The certificate's log key, from the fixture's seed, to re-sign tampered certificates. */
async function fixtureSigningKey() {
  const seed = b64decode(read(path.join(fixtures, 'log_key.seed.b64')).trim());
  const pkcs8 = concat(Uint8Array.from([0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20]), seed);
  return crypto.subtle.importKey('pkcs8', pkcs8, { name: 'Ed25519' }, false, ['sign']);
}

/** The certificate with `edit` applied; re-signed with the log key when `resign`. */
async function certificateWith(edit, resign) {
  const c = parseStrict(certText);
  edit(c);
  if (resign) {
    const sig = await crypto.subtle.sign({ name: 'Ed25519' }, await fixtureSigningKey(), signedMessage(c));
    c.sig = b64encode(new Uint8Array(sig));
  }
  return canonicalize(c);
}

/** Checks a certificate both ways (and with the binary) and expects `expected`. */
async function certificateCase(certificateText, bundle, expected, { key = logKey, item } = {}) {
  const r = await verify.verifyCertificate({ certificateText, bundle: new Blob([bundle]), logKey: key });
  expectVerdict(r, expected, item);
  if (bin) {
    const theirs = binaryVerdict(['--certificate', writeTmp('cert.json', certificateText), '--bundle', writeTmp('bundle.ndjson', bundle), '--log-key', key]);
    eq(theirs, expected, 'gpuledger verify');
    compareItems(r, 'certificate');
    sameWitnesses(r);
  }
  return r;
}

async function bundleCase(bundle, expected, { key = logKey, item } = {}) {
  const r = await verify.verifyBundle({ bundle, logKey: key });
  expectVerdict(r, expected, item);
  if (bin) {
    eq(binaryVerdict(['--bundle', writeTmp('bundle.ndjson', bundle), '--log-key', key]), expected, 'gpuledger verify');
    compareItems(r, 'bundle');
    sameWitnesses(r);
  }
  return r;
}

// ---------------------------------------------------------------- the originals

for (const format of ['v3', 'v2']) {
  await test(`${format}: the committed certificate and bundle PASS`, async () => {
    let calls = 0;
    let last = null;
    const r = await verify.verifyCertificate({
      certificateText: certText,
      bundle: new Blob([BUNDLES[format]]),
      logKey,
      onProgress: (done, total) => {
        calls++;
        last = [done, total];
      },
    });
    expectVerdict(r, 'PASS');
    const cert = parseStrict(certText);
    eq(r.summary.totals, Object.assign({}, cert.totals), 'totals');
    eq(r.summary.bundle_format, `gpuledger-bundle/${format}`, 'format');
    assert(calls >= 1, 'onProgress was called');
    const bytes = utf8(BUNDLES[format]).length;
    eq(last, [bytes, bytes], 'progress at the end');
    assert(r.steps.every((s) => s.ok), 'every step passed');
    if (bin) {
      const theirs = binaryVerdict(['--certificate', path.join(fixtures, 'certificate.json'), '--bundle', writeTmp('b', BUNDLES[format]), '--log-key', logKey]);
      eq(theirs, 'PASS', 'gpuledger verify');
      sameWitnesses(r);
    }
  });
  await test(`${format}: the committed bundle alone PASSes, from a string and from a ReadableStream`, async () => {
    await bundleCase(BUNDLES[format], 'PASS');
    const stream = new Blob([BUNDLES[format]]).stream();
    expectVerdict(await verify.verifyBundle({ bundle: stream, logKey }), 'PASS');
    expectVerdict(await verify.verifyBundle({ bundle: utf8(BUNDLES[format]), logKey }), 'PASS');
  });
}

await test('the committed invoice bundles (v3, v2) PASS as bundles alone', async () => {
  for (const name of ['invoice_bundle.v3.ndjson', 'invoice_bundle.ndjson']) {
    const r = await bundleCase(read(path.join(fixtures, name)), 'PASS');
    eq(r.summary.records > 0, true, 'records');
  }
});

// ---------------------------------------------------------------- tampered bundles

const CASES = [
  ['a signed field of a record leaf changed', 'both', (l) => {
    // Half the GPUs for the same interval: a record that fits its node and lease (§6.7) and its
    // own sums (gpu_seconds halved too), so only the signature speaks.
    const b = firstUsage(l).leafObject.envelope.body;
    b.gpu_count = Dec.parse(b.gpu_count).mul(Dec.parse('0.5')).toString();
    b.gpu_seconds = Dec.parse(b.gpu_seconds).mul(Dec.parse('0.5')).toString();
  }, 'entry_signature'],
  ['a record leaf\'s received_at changed (not signed; only the tree notices)', 'both', (l) => {
    const e = lastRecord(l);
    e.leafObject.received_at = e.leafObject.received_at.replace(/:(\d)(\d)Z$/, (_, a, b) => `:${a}${(Number(b) + 1) % 10}Z`);
  }, 'inclusion_proof'],
  ['a record\'s tenant changed', 'both', (l) => { firstUsage(l).leafObject.envelope.body.tenant = 'beta'; }, 'wrong_tenant'],
  ['a node line hash changed', 'v3', (l) => { const n = l.find((o) => o.type === 'nodes'); n.hashes[1] = flipB64(n.hashes[1]); }, 'inclusion_proof'],
  ['an entry\'s inclusion proof changed', 'v2', (l) => { const e = lastRecord(l); e.proof[0] = flipB64(e.proof[0]); }, 'inclusion_proof'],
  ['the checkpoint signature in the header changed', 'both', (l) => {
    const h = l[0];
    const lines = h.checkpoint.split('\n');
    const sig = lines[lines.length - 2];
    lines[lines.length - 2] = sig.slice(0, -10) + flipB64(sig.slice(-10), 2);
    h.checkpoint = lines.join('\n');
  }, 'checkpoint_signature'],
  ['the end line dropped', 'both', (l) => l.filter((o) => o.type !== 'end'), 'truncated'],
  ['the end line counting one entry less', 'both', (l) => { endCount(l).entries -= 1; }, 'truncated'],
  ['two context lines swapped', 'both', (l) => { const t = l[1]; l[1] = l[2]; l[2] = t; }, 'order'],
  ['a context line moved after the first record', 'both', (l) => { const r = records(l)[0]; const c = l[l.indexOf(r) - 1]; l.splice(l.indexOf(c), 1); l.splice(l.indexOf(r) + 1, 0, c); }, 'order'],
  ['a record dropped (end count fixed)', 'v3', (l) => { const r = lastRecord(l); endCount(l).entries -= 1; return l.filter((o) => o !== r); }, 'inclusion_proof'],
  ['a record dropped (end count fixed)', 'v2', (l) => { const r = lastRecord(l); endCount(l).entries -= 1; return l.filter((o) => o !== r); }, 'entries_mismatch'],
  ['an extra node (end count fixed)', 'v3', (l) => { const n = l.find((o) => o.type === 'nodes'); n.hashes.push(n.hashes[0]); endCount(l).nodes += 1; }, 'inclusion_proof'],
  ['a node missing (end count fixed)', 'v3', (l) => { const n = l.find((o) => o.type === 'nodes'); n.hashes.pop(); endCount(l).nodes -= 1; }, 'inclusion_proof'],
  ['the header subject names another certificate', 'both', (l) => { l[0].subject = { certificate: 'CERT-000002' }; }, 'checkpoint_mismatch'],
  ['the header log_origin changed', 'both', (l) => { l[0].log_origin = 'other.example/log'; }, 'checkpoint_mismatch'],
  ['a line after the end line', 'both', (l) => [...l, l.find((o) => o.type === 'end')], 'malformed'],
  ['an unknown bundle format', 'both', (l) => { l[0].format = 'gpuledger-bundle/v1'; }, 'malformed'],
  ['a record\'s index beyond the checkpoint', 'both', (l) => { const r = lastRecord(l); r.index = 1000; r.leafObject.index = 1000; }, 'not_in_checkpoint'],
  ['a leaf whose index differs from the line\'s', 'both', (l) => { lastRecord(l).leafObject.index += 1; }, 'leaf_invalid'],
  ['a record whose prev is not the entry before', 'both', (l) => { const r = records(l)[1]; r.leafObject.prev = records(l)[0].leafObject.prev; }, 'leaf_invalid'],
  ['gpu_seconds that is not gpu_count × duration', 'both', (l) => { firstUsage(l).leafObject.envelope.body.gpu_seconds = '1'; }, 'leaf_invalid'],
  ['a record signed under an unregistered key id', 'both', (l) => { firstUsage(l).leafObject.envelope.key_id = '0000000000000000'; }, 'unknown_key'],
  ['a record of a node outside its key\'s scope', 'both', (l) => { firstUsage(l).leafObject.envelope.body.node = 'node-9'; }, 'node_not_allowed'],
  ['a ledger entry under another key id', 'both', (l) => { entryLines(l)[0].leafObject.envelope.key_id = '0000000000000000'; }, 'key_not_allowed'],
  ['a ledger entry signed by another signer', 'both', (l) => { entryLines(l)[0].leafObject.envelope.signer = 'node-1'; }, 'key_not_allowed'],
  ['the registered key of the records\' signer changed', 'both', (l) => {
    const reg = entryLines(l).find((o) => o.leafObject.envelope.kind === 'signer_key_registered');
    reg.leafObject.envelope.body.public_key = 'iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w=';
  }, 'leaf_invalid'],
];

// In v2 each entry's own inclusion proof is checked before its envelope (§15 step 4), so any
// change to a leaf's bytes is `inclusion_proof` there, whatever else it breaks.
const LEAF_EDITS = new Set([
  'a signed field of a record leaf changed', "a record's tenant changed", 'a record whose prev is not the entry before',
  'gpu_seconds that is not gpu_count × duration', 'a record signed under an unregistered key id',
  "a record of a node outside its key's scope", 'a ledger entry signed by another signer', 'a ledger entry under another key id',
  "the registered key of the records' signer changed",
]);
for (const [name, formats, edit, expectedV3] of CASES) {
  for (const format of formats === 'both' ? ['v3', 'v2'] : [formats]) {
    const expected = format === 'v2' && LEAF_EDITS.has(name) ? 'inclusion_proof' : expectedV3;
    await test(`${format}: ${name} → ${expected}`, async () => {
      await certificateCase(certText, tamper(format, edit), expected);
    });
  }
}

await test('v3: a line that is not canonical JSON → malformed', async () => {
  const lines = linesOf(bundleV3);
  lines[1] = lines[1].replace('{"index":', '{ "index":');
  await certificateCase(certText, joinLines(lines), 'malformed');
});

await test('v3: a leaf that is not canonical JSON in a line framed as one → malformed, named by its entry as gpuledger verify names it', async () => {
  const lines = linesOf(bundleV3);
  const at = lines.findIndex((l) => l.includes('"type":"entry"') && l.includes('"kind":"gpu_usage"'));
  const index = JSON.parse(lines[at]).index;
  lines[at] = lines[at].replace('{"envelope":{', '{"envelope": {');
  await certificateCase(certText, joinLines(lines), 'malformed', { item: `entry ${index}` });
});

await test('v2: a line with a repeated member name → malformed', async () => {
  const lines = linesOf(bundleV2);
  lines[1] = lines[1].replace('{"index":', '{"type":"entry","index":');
  await certificateCase(certText, joinLines(lines), 'malformed');
});

await test('v2: a leaf with a repeated member name → leaf_invalid', async () => {
  const lines = parsed(bundleV2);
  const r = lastRecord(lines);
  const text = canonicalize(r.leafObject).replace('{"envelope":', '{"v":3,"envelope":');
  const raw = Object.assign(Object.create(null), r);
  delete raw.leafObject;
  raw.leaf = b64encode(utf8(text));
  lines[lines.indexOf(r)] = JSON.stringify(raw);
  await certificateCase(certText, joinLines(lines.map((o) => (typeof o === 'string' ? o : unparse(o, false)))), 'leaf_invalid');
});

await test('an empty bundle → truncated', async () => {
  await certificateCase(certText, '', 'truncated');
});

await test('a bundle that is not UTF-8 → malformed', async () => {
  const r = await verify.verifyBundle({ bundle: new Blob([Uint8Array.from([0xff, 0xfe, 0x0a])]), logKey });
  expectVerdict(r, 'malformed');
});

// ---------------------------------------------------------------- a log-key holder's rewrites (§6.7)

// What only whoever holds the log key can do: change a leaf, then sign a new checkpoint over
// the tree that holds it and a new certificate over that checkpoint. Signatures, proofs and
// sums all hold; the admission rules of §6.7 must still refuse the entry.

/** Signs a checkpoint note `origin / size / root` with the fixture's log key (§9). */
async function signCheckpoint(origin, size, root) {
  const { noteKeyId } = await import('../note.js');
  const vk = await parseVerifierKey(logKey);
  const body = `${origin}\n${size}\n${b64encode(root)}\n`;
  const sig = new Uint8Array(await crypto.subtle.sign({ name: 'Ed25519' }, await fixtureSigningKey(), utf8(body)));
  const id = await noteKeyId(vk.name, 1, vk.key.bytes);
  const idBytes = Uint8Array.from([id >>> 24, (id >>> 16) & 0xff, (id >>> 8) & 0xff, id & 0xff]);
  return `${body}\n\u2014 ${vk.name} ${b64encode(concat(idBytes, sig))}\n`;
}

/**
 * A v3 bundle with `edit` applied to its parsed lines, sealed again as the log-key holder
 * would: the root recomputed from its leaves and multi-proof, a new checkpoint signed over it
 * in the header, and the certificate's checkpoint and covered-entries commitment re-signed.
 * Returns {bundle, certificate}.
 */
async function resealed(edit, text = bundleV3) {
  const { multiProofRoot, Frontier } = await import('../merkle.js');
  const lines = parsed(text);
  await edit(lines);
  // The hash chain mended where the bundle holds the entry before (§7).
  const byIndex = new Map(entryLines(lines).map((o) => [o.index, o]));
  for (const i of [...byIndex.keys()].sort((a, b) => a - b)) {
    const before = byIndex.get(i - 1);
    if (before) byIndex.get(i).leafObject.prev = b64encode(await leafHash(utf8(canonicalize(before.leafObject))));
  }
  const leaves = [];
  for (const o of entryLines(lines)) leaves.push({ index: o.index, hash: await leafHash(utf8(canonicalize(o.leafObject))), record: records(lines).includes(o) });
  const sorted = [...leaves].sort((a, b) => a.index - b.index);
  const nodes = lines.filter((o) => o.type === 'nodes').flatMap((o) => o.hashes.map((h) => b64decode(h)));
  let k = 0;
  let n = 0;
  const old = lines[0].checkpoint.split('\n');
  const size = Number(old[1]);
  const root = await multiProofRoot(size, { peek: () => (k < sorted.length ? sorted[k].index : Infinity), take: () => sorted[k++].hash }, async () => (n < nodes.length ? nodes[n++] : null));
  const note = await signCheckpoint(old[0], size, root);
  lines[0].checkpoint = note;
  const commitment = new Frontier();
  for (const l of leaves.filter((x) => x.record)) {
    const item = new Uint8Array(40);
    new DataView(item.buffer).setBigUint64(0, BigInt(l.index));
    item.set(l.hash, 8);
    await commitment.push(await leafHash(item));
  }
  const commitmentB64 = b64encode(await commitment.root());
  const certificate = await certificateWith((c) => {
    c.checkpoint = note;
    c.entries.commitment = commitmentB64;
  }, true);
  return { bundle: joinLines(lines.map((o) => unparse(o, true))), certificate };
}

/** Re-signs a ledger entry's envelope with the log key (as a log-key holder can). */
async function resignLedgerEntry(o) {
  const env = o.leafObject.envelope;
  const unsigned = Object.assign(Object.create(null), env);
  delete unsigned.sig;
  const message = utf8(`gpuledger/v3/${env.kind}\n${(await parseVerifierKey(logKey)).name}\n${canonicalize(unsigned)}`);
  env.sig = b64encode(new Uint8Array(await crypto.subtle.sign({ name: 'Ed25519' }, await fixtureSigningKey(), message)));
}

/** A sample signer's key (crates/core/src/sample.rs `key`): seed SHA-256("gpuledger sample key <label>"). */
async function sampleSigningKey(label) {
  const seed = new Uint8Array(await crypto.subtle.digest('SHA-256', utf8(`gpuledger sample key ${label}`)));
  const pkcs8 = concat(Uint8Array.from([0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20]), seed);
  return crypto.subtle.importKey('pkcs8', pkcs8, { name: 'Ed25519' }, false, ['sign']);
}

/** Re-signs a record's envelope with its signer's sample key (as that node's key holder can). */
async function resignRecord(o) {
  const env = o.leafObject.envelope;
  const unsigned = Object.assign(Object.create(null), env);
  delete unsigned.sig;
  const message = utf8(`gpuledger/v3/${env.kind}\n${(await parseVerifierKey(logKey)).name}\n${canonicalize(unsigned)}`);
  env.sig = b64encode(new Uint8Array(await crypto.subtle.sign({ name: 'Ed25519' }, await sampleSigningKey(env.signer), message)));
}

/** The bundle's entry line of `kind` (the first, or the one `pick` chooses). */
const entryOf = (l, kind, pick = () => true) => entryLines(l).find((o) => o.leafObject.envelope.kind === kind && pick(o));

const plusSeconds = (t, secs) => new Date(Date.parse(t) + secs * 1000).toISOString().replace(/\.000Z$/, 'Z');

await test('a re-signed checkpoint and certificate over unchanged leaves still PASS (the sealing is sound)', async () => {
  const { bundle, certificate } = await resealed(() => {});
  await certificateCase(certificate, bundle, 'PASS');
});

for (const [name, edit, expected] of [
  ["a record's received_at moved 40 days after its start", (l) => {
    const e = lastRecord(l);
    e.leafObject.received_at = plusSeconds(e.leafObject.envelope.body.start, 40 * 86400);
  }, 'too_old'],
  ["a record's received_at moved before the entry before it, within its own time rules", (l) => {
    const rs = records(l);
    const e = rs[rs.length - 1];
    const before = entryLines(l).filter((o) => o.index < e.index).sort((a, b) => b.index - a.index)[0];
    e.leafObject.received_at = plusSeconds(before.leafObject.received_at, -1);
  }, 'received_at_decreased'],
  ["a record's received_at moved to before its end, past the skew (earlier entries' no later)", (l) => {
    const e = lastRecord(l);
    const t = plusSeconds(e.leafObject.envelope.body.end, -3600);
    e.leafObject.received_at = t;
    // Receive times never decrease (§7): the entries before it are received no later.
    for (const o of entryLines(l)) if (o.index < e.index && o.leafObject.received_at > t) o.leafObject.received_at = t;
  }, 'in_future'],
  ["a record moved into the stream and the second half-hour of an earlier one (re-signed by its node)", async (l) => {
    // The fixture's first two node-1 usage records: 8 GPUs for 00:00-01:00, then 2 GPUs for
    // 01:00-02:00. The second, under the first one's lease (or none, as the first) and half an
    // hour earlier, claims 00:30-01:00 of the first one's stream again (§6.4a).
    const usage = records(l).filter((o) => o.leafObject.envelope.kind === 'gpu_usage' && o.leafObject.envelope.signer === 'node-1');
    const [first, later] = usage;
    const b = later.leafObject.envelope.body;
    const length = (Date.parse(b.end) - Date.parse(b.start)) / 1000;
    if ('lease' in first.leafObject.envelope.body) b.lease = first.leafObject.envelope.body.lease;
    else delete b.lease;
    b.start = plusSeconds(first.leafObject.envelope.body.start, 1800);
    b.end = plusSeconds(b.start, length);
    await resignRecord(later);
  }, 'overlapping_interval'],
  ['the log policy in force cut to one day (re-signed)', async (l) => {
    const p = entryOf(l, 'log_policy');
    p.leafObject.envelope.body.max_record_age_seconds = 86400;
    await resignLedgerEntry(p);
  }, 'too_old'],
  ['the log policy in force out of its bounds (re-signed)', async (l) => {
    const p = entryOf(l, 'log_policy');
    p.leafObject.envelope.body.max_record_age_seconds = 60;
    await resignLedgerEntry(p);
  }, 'leaf_invalid'],
  ['a log policy with a member more (re-signed)', async (l) => {
    const p = entryOf(l, 'log_policy');
    p.leafObject.envelope.body.max_record_age_days = 35;
    await resignLedgerEntry(p);
  }, 'leaf_invalid'],
  ['a lease registration of an unknown class (re-signed)', async (l) => {
    const t = entryOf(l, 'lease_registered');
    t.leafObject.envelope.body.class = 'preemptible';
    await resignLedgerEntry(t);
  }, 'leaf_invalid'],
  ['the tenant registration renamed (re-signed)', async (l) => {
    const t = entryOf(l, 'tenant_registered');
    t.leafObject.envelope.body.tenant = 'acme2';
    await resignLedgerEntry(t);
  }, 'unknown_tenant'],
  ['a lease registered twice (re-signed)', async (l) => {
    const t = entryOf(l, 'lease_registered', (o) => o.leafObject.envelope.body.lease === 'l1');
    t.leafObject.envelope.body.lease = 'lease-acme';
    await resignLedgerEntry(t);
  }, 'already_registered'],
  ["a record's lease renamed in its registration (re-signed)", async (l) => {
    const t = entryOf(l, 'lease_registered', (o) => o.leafObject.envelope.body.lease === 'l1');
    t.leafObject.envelope.body.lease = 'l2';
    await resignLedgerEntry(t);
  }, 'unknown_lease'],
]) {
  await test(`v3, checkpoint and certificate re-signed: ${name} → ${expected}`, async () => {
    const { bundle, certificate } = await resealed(edit);
    const r = await certificateCase(certificate, bundle, expected);
    await bundleCase(bundle, expected);
    return r;
  });
}

for (const [name, edit] of [
  ['a rate card for the spot class', (b) => { b.lease_class = 'spot'; }],
  ['a rate card price that is not a canonical decimal', (b) => { b.price_per_gpu_hour = `${b.price_per_gpu_hour}0`; }],
  ['a rate card with a member more', (b) => { b.note = 'x'; }],
  ['a rate card in a currency that is not ISO 4217', (b) => { b.currency = 'cny'; }],
]) {
  await test(`v3 invoice bundle, checkpoint re-signed: ${name} → leaf_invalid`, async () => {
    const text = read(path.join(fixtures, 'invoice_bundle.v3.ndjson'));
    const { bundle } = await resealed(async (l) => {
      const card = entryOf(l, 'rate_card');
      edit(card.leafObject.envelope.body);
      await resignLedgerEntry(card);
    }, text);
    await bundleCase(bundle, 'leaf_invalid');
  });
}

await test('v3, re-signed: region parameters with a PUE below 1 → leaf_invalid', async () => {
  const { bundle, certificate } = await resealed(async (l) => {
    const r = entryOf(l, 'region_params');
    r.leafObject.envelope.body.pue = '0.9';
    await resignLedgerEntry(r);
  });
  await certificateCase(certificate, bundle, 'leaf_invalid');
});

const asVolumeTiers = (tiers) => (card) => {
  const b = card.leafObject.envelope.body;
  card.leafObject.envelope.kind = 'volume_tiers';
  card.leafObject.envelope.body = { plan: 'standard', region: b.region, gpu_model: b.gpu_model, lease_class: 'on_demand', currency: b.currency, tiers, effective_from: b.effective_from };
};
for (const [name, tiers, expected] of [
  ['well-formed volume tiers', [{ up_to_gpu_hours: '100', price_per_gpu_hour: '2' }, { price_per_gpu_hour: '1.5' }], 'PASS'],
  ['volume tiers whose bounds do not increase', [{ up_to_gpu_hours: '100', price_per_gpu_hour: '2' }, { up_to_gpu_hours: '100', price_per_gpu_hour: '1.8' }, { price_per_gpu_hour: '1.5' }], 'leaf_invalid'],
  ['volume tiers whose last tier has a bound', [{ up_to_gpu_hours: '100', price_per_gpu_hour: '2' }], 'leaf_invalid'],
  ['volume tiers with no tier', [], 'leaf_invalid'],
]) {
  await test(`v3 invoice bundle, re-signed: a rate card turned into ${name} → ${expected}`, async () => {
    const text = read(path.join(fixtures, 'invoice_bundle.v3.ndjson'));
    const { bundle } = await resealed(async (l) => {
      const card = entryOf(l, 'rate_card');
      asVolumeTiers(tiers)(card);
      await resignLedgerEntry(card);
    }, text);
    await bundleCase(bundle, expected);
  });
}

await test('v3, re-signed: a tenant registered under the reserved id "ledger" → leaf_invalid', async () => {
  const { bundle, certificate } = await resealed(async (l) => {
    const t = entryOf(l, 'tenant_registered');
    t.leafObject.envelope.body.tenant = 'ledger';
    await resignLedgerEntry(t);
  });
  await certificateCase(certificate, bundle, 'leaf_invalid');
});

await test('v3 invoice bundle, checkpoint re-signed: a rate card that does not move its series forward → price_not_forward', async () => {
  const text = read(path.join(fixtures, 'invoice_bundle.v3.ndjson'));
  const { bundle } = await resealed(async (l) => {
    const cards = entryLines(l).filter((o) => o.leafObject.envelope.kind === 'rate_card');
    const [a, b] = cards.map((o) => o.leafObject.envelope.body);
    for (const k of ['region', 'gpu_model', 'lease_class']) b[k] = a[k];
    await resignLedgerEntry(cards[1]);
  }, text);
  await bundleCase(bundle, 'price_not_forward');
});

await test('v3 invoice bundle, checkpoint re-signed: a rate card taking effect 6 h before it was logged → price_in_past', async () => {
  const text = read(path.join(fixtures, 'invoice_bundle.v3.ndjson'));
  const { bundle } = await resealed(async (l) => {
    const card = entryLines(l).find((o) => o.leafObject.envelope.kind === 'rate_card');
    const logged = Date.parse(card.leafObject.received_at);
    card.leafObject.envelope.body.effective_from = new Date(logged - 6 * 3600e3).toISOString().replace('.000Z', 'Z');
    await resignLedgerEntry(card);
  }, text);
  await bundleCase(bundle, 'price_in_past');
});

// ---------------------------------------------------------------- tampered certificates

await test('the certificate\'s totals changed (not re-signed) → certificate_signature', async () => {
  const c = await certificateWith((c) => { c.totals.gpu_seconds = '36301'; }, false);
  await certificateCase(c, bundleV3, 'certificate_signature', { item: 'certificate' });
});

for (const [what, edit, expected, item] of [
  ['totals.gpu_seconds', (c) => { c.totals.gpu_seconds = '36301'; }, 'claim_mismatch', 'totals.gpu_seconds'],
  ['a gpu line', (c) => { c.gpu[0].gpu_seconds = '301'; }, 'claim_mismatch', 'gpu[0].gpu_seconds'],
  ['an energy line\'s carbon', (c) => { c.energy[0].carbon_kg = '7.4251'; }, 'claim_mismatch', 'energy[0].carbon_kg'],
  ['a gpu line dropped', (c) => { c.gpu.pop(); }, 'claim_mismatch', 'gpu (length)'],
  ['entries.count', (c) => { c.entries.count += 1; }, 'entries_mismatch', 'entries.count'],
  ['entries.commitment', (c) => { c.entries.commitment = flipB64(c.entries.commitment); }, 'entries_mismatch', 'entries.commitment'],
  ['the period (a record falls outside)', (c) => { c.period_to = new Date(Date.parse(c.period_from) + 1800e3).toISOString().replace('.000Z', 'Z'); }, 'outside_period', undefined],
  ['the scope (another region)', (c) => { c.scope = { region: 'east' }; }, 'outside_scope', undefined],
  ['the tenant', (c) => { c.tenant = 'beta'; }, 'wrong_tenant', undefined],
  ['the checkpoint', (c) => { c.checkpoint = read(path.join(fixtures, 'older_checkpoint.txt')); }, 'checkpoint_mismatch', 'certificate'],
]) {
  await test(`the certificate's ${what} changed and re-signed → ${expected}`, async () => {
    for (const format of ['v3', 'v2']) {
      await certificateCase(await certificateWith(edit, true), BUNDLES[format], expected, { item });
    }
  });
}

await test('claims compare as numbers, member by member, in sorted order (§15 step 7)', async () => {
  const { firstDifference } = await import('../certificate.js');
  eq(firstDifference('', { totals: { kwh: '12.50' } }, { totals: { kwh: '12.5' } }), null, 'equal as numbers');
  eq(firstDifference('', { gpu: [{ b: '1', a: '2' }] }, { gpu: [{ b: '2', a: '3' }] }), 'gpu[0].a', 'first member by name');
  eq(firstDifference('', { energy: [], gpu: [] }, { energy: [{}], gpu: [{}] }), 'energy (length)', 'lengths');
  eq(firstDifference('', { e: [{ pue: '1' }] }, { e: [{}] }), 'e[0].pue', 'a member missing');
});

await test('a certificate that is not JSON → malformed', async () => {
  await certificateCase('{"v":1,', bundleV3, 'malformed');
});

await test('the wrong log key → checkpoint_signature (both formats), naming the keys', async () => {
  const other = read(path.join(vectors, 'cosignature/log.vkey')).trim();
  for (const format of ['v3', 'v2']) {
    const r = await certificateCase(certText, BUNDLES[format], 'checkpoint_signature', { key: other });
    assert(r.failure.message.includes('test.gpuledger/log'), r.failure.message);
  }
  // The same origin, another key: the key id differs.
  const vk = await parseVerifierKey(logKey);
  const otherKey = b64decode(JSON.parse(read(path.join(vectors, 'keys.json'))).node?.public_key ?? 'iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w=');
  const { noteKeyId } = await import('../note.js');
  const id = (await noteKeyId(vk.name, 1, otherKey)).toString(16).padStart(8, '0');
  const sameName = `${vk.name}+${id}+${b64encode(concat(Uint8Array.from([1]), otherKey))}`;
  await certificateCase(certText, bundleV3, 'checkpoint_signature', { key: sameName });
});

await test('a verifier key that is not one → malformed (item log key)', async () => {
  const r = await verify.verifyCertificate({ certificateText: certText, bundle: bundleV3, logKey: 'not a key' });
  expectVerdict(r, 'malformed', 'log key');
  const badId = logKey.replace(/\+[0-9a-f]{8}\+/, '+00000000+');
  expectVerdict(await verify.verifyCheckpoint({ noteText: read(path.join(fixtures, 'older_checkpoint.txt')), logKey: badId }), 'malformed', 'log key');
});

// ---------------------------------------------------------------- checkpoints and consistency

const older = read(path.join(fixtures, 'older_checkpoint.txt'));
const oldNote = read(path.join(fixtures, 'consistency/old.txt'));
const newNote = read(path.join(fixtures, 'consistency/new.txt'));
const proof = JSON.parse(read(path.join(fixtures, 'consistency/proof.json')));

async function checkpointCase(note, expected, key = logKey) {
  const r = await verify.verifyCheckpoint({ noteText: note, logKey: key });
  expectVerdict(r, expected);
  if (bin) {
    eq(binaryVerdict(['--checkpoint', writeTmp('cp.txt', note), '--log-key', key]), expected, 'gpuledger verify');
    sameWitnesses(r);
  }
  return r;
}

async function consistencyCase(o, n, p, expected) {
  const r = await verify.verifyConsistency({ oldNote: o, newNote: n, proof: p, logKey });
  expectVerdict(r, expected);
  if (bin) {
    const args = ['consistency', '--old', writeTmp('old.txt', o), '--new', writeTmp('new.txt', n), '--proof', writeTmp('proof.json', JSON.stringify(p)), '--log-key', logKey];
    eq(binaryVerdict(args), expected, 'gpuledger verify consistency');
    sameWitnesses(r);
  }
  return r;
}

await test('checkpoints: the committed ones PASS; a changed signature, size or root → checkpoint_signature', async () => {
  for (const note of [older, oldNote, newNote, parseStrict(certText).checkpoint]) await checkpointCase(note, 'PASS');
  const lines = older.split('\n');
  await checkpointCase(older.replace(lines[4], lines[4].slice(0, -8) + flipB64(lines[4].slice(-8), 1)), 'checkpoint_signature');
  await checkpointCase(older.replace(`\n${lines[1]}\n`, `\n${Number(lines[1]) + 1}\n`), 'checkpoint_signature');
  await checkpointCase(older.replace(lines[2], flipB64(lines[2])), 'checkpoint_signature');
  await checkpointCase(older.replace('\n\n', '\n'), 'checkpoint_signature');
  await checkpointCase(older, 'checkpoint_signature', read(path.join(vectors, 'cosignature/log.vkey')).trim());
});

await test('consistency: the committed proof PASSes; tampered → consistency_proof, order, malformed', async () => {
  await consistencyCase(oldNote, newNote, proof, 'PASS');
  await consistencyCase(oldNote, newNote, { hashes: proof }, 'PASS');
  await consistencyCase(older, older, [], 'PASS');
  const bad = [...proof];
  bad[1] = flipB64(bad[1]);
  await consistencyCase(oldNote, newNote, bad, 'consistency_proof');
  await consistencyCase(oldNote, newNote, proof.slice(0, -1), 'consistency_proof');
  await consistencyCase(older, newNote, proof, 'consistency_proof');
  await consistencyCase(newNote, oldNote, proof, 'order');
  await consistencyCase(oldNote, newNote, ['not base64'], 'malformed');
  const r = await verify.verifyConsistency({ oldNote, newNote: newNote.replace('\n\n', '\n'), proof, logKey });
  expectVerdict(r, 'checkpoint_signature', 'new checkpoint');
});

// ---------------------------------------------------------------- witness cosignatures (tests/vectors/cosignature)

const cos = (f) => read(path.join(vectors, 'cosignature', f));
const cosLogKey = cos('log.vkey').trim();
const witness = cos('witness.vkey').trim();

await test('cosignature vectors: key id, signed message, and the cosigned checkpoint PASSes with quorum 1', async () => {
  const w = await parseVerifierKey(witness, ALG_COSIGNATURE_V1);
  eq(w.keyId.toString(16).padStart(8, '0'), JSON.parse(cos('witness.json')).key_id, 'witness key id');
  const found = await validCosignatures(cos('cosigned.note'), [w]);
  eq(found.length, 1, 'cosignatures found');
  eq(String(found[0].timestamp), cos('timestamp.txt').trim(), 'timestamp');
  const body = cos('checkpoint.note').split('\n\n')[0] + '\n';
  eq(hex(utf8(`cosignature/v1\ntime ${found[0].timestamp}\n${body}`)), hex(readBytes(path.join(vectors, 'cosignature/signed_message.bin'))), 'signed message');
  eq(cos('cosigned.note'), cos('checkpoint.note') + cos('signature_line.txt'), 'the cosigned note is the note plus the line');
  const r = await verify.verifyCheckpoint({ noteText: cos('cosigned.note'), logKey: cosLogKey, witnesses: [witness], quorum: 1 });
  expectVerdict(r, 'PASS');
  assert(r.steps.some((s) => s.name === 'witness cosignatures' && s.ok), 'a witness step');
  eq(r.summary.witnesses, { required: 1, found: 1, cosigned_by: [{ name: w.name, key_id: JSON.parse(cos('witness.json')).key_id, timestamp: Number(cos('timestamp.txt').trim()) }] }, 'summary.witnesses');
  if (bin) {
    eq(binaryVerdict(['--checkpoint', path.join(vectors, 'cosignature/cosigned.note'), '--log-key', cosLogKey, '--witness', witness, '--quorum', '1']), 'PASS', 'gpuledger verify');
    sameWitnesses(r);
  }
  // The same note with no witness asked: PASS, the operator alone vouching, as gpuledger verify says.
  const alone = await verify.verifyCheckpoint({ noteText: cos('cosigned.note'), logKey: cosLogKey });
  expectVerdict(alone, 'PASS');
  eq(alone.summary.witnesses.operator_alone, true, 'operator_alone without witnesses');
  if (bin) {
    eq(binaryVerdict(['--checkpoint', path.join(vectors, 'cosignature/cosigned.note'), '--log-key', cosLogKey]), 'PASS', 'gpuledger verify');
    sameWitnesses(alone);
  }
});

await test('cosignature vectors: no cosignature, a changed one, or another witness → witness_quorum', async () => {
  const plain = await verify.verifyCheckpoint({ noteText: cos('checkpoint.note'), logKey: cosLogKey, witnesses: [witness] });
  expectVerdict(plain, 'witness_quorum', 'checkpoint');
  const line = cos('signature_line.txt');
  const changed = cos('checkpoint.note') + line.slice(0, -20) + flipB64(line.slice(-20, -1), 3) + '\n';
  expectVerdict(await verify.verifyCheckpoint({ noteText: changed, logKey: cosLogKey, witnesses: [witness] }), 'witness_quorum');
  // A line of the same name with another timestamp: the signature covers the time.
  const raw = b64decode(line.trim().split(' ').pop());
  raw[11] ^= 1;
  const retimed = `${cos('checkpoint.note')}\u2014 witness.gpuledger.example/w1 ${b64encode(raw)}\n`;
  expectVerdict(await verify.verifyCheckpoint({ noteText: retimed, logKey: cosLogKey, witnesses: [witness] }), 'witness_quorum');
  // The log signature still verifies with the cosignature line present and no witnesses asked.
  expectVerdict(await verify.verifyCheckpoint({ noteText: cos('cosigned.note'), logKey: cosLogKey }), 'PASS');
  if (bin) eq(binaryVerdict(['--checkpoint', path.join(vectors, 'cosignature/checkpoint.note'), '--log-key', cosLogKey, '--witness', witness]), 'witness_quorum', 'gpuledger verify');
});

await test('cosignature vectors: a quorum above the witnesses given → malformed (usage)', async () => {
  const r = await verify.verifyCheckpoint({ noteText: cos('cosigned.note'), logKey: cosLogKey, witnesses: [witness, witness], quorum: 2 });
  expectVerdict(r, 'malformed', 'quorum');
});

await test('cosignature vectors: the add-checkpoint proof from 6 to 11 is a consistency proof; witnessed new checkpoint', async () => {
  const body = cos('add_checkpoint.body');
  const [head] = body.split('\n\n');
  const hashes = head.split('\n').slice(1);
  eq(head.split('\n')[0], 'old 6', 'old size line');
  const r = await verify.verifyConsistency({ oldNote: cos('old_checkpoint.note'), newNote: cos('cosigned.note'), proof: hashes, logKey: cosLogKey, witnesses: [witness], quorum: 1 });
  expectVerdict(r, 'PASS');
  eq(r.summary.witnesses.cosigned_by.map((c) => c.name), ['witness.gpuledger.example/w1'], 'the witness that cosigned the new checkpoint');
  if (bin) {
    const args = ['consistency', '--old', path.join(vectors, 'cosignature/old_checkpoint.note'), '--new', path.join(vectors, 'cosignature/cosigned.note'), '--proof', writeTmp('proof.json', JSON.stringify(hashes)), '--log-key', cosLogKey];
    eq(binaryVerdict([...args, '--witness', witness, '--quorum', '1']), 'PASS', 'gpuledger verify consistency --witness');
    sameWitnesses(r);
    const alone = await verify.verifyConsistency({ oldNote: cos('old_checkpoint.note'), newNote: cos('cosigned.note'), proof: hashes, logKey: cosLogKey });
    eq(binaryVerdict(args), 'PASS', 'gpuledger verify consistency');
    sameWitnesses(alone);
  }
  const w = await verify.verifyConsistency({ oldNote: cos('old_checkpoint.note'), newNote: cos('checkpoint.note'), proof: hashes, logKey: cosLogKey, witnesses: [witness] });
  expectVerdict(w, 'witness_quorum', 'new checkpoint');
});

await test('a certificate whose checkpoint the vector witness cosigned: PASS with the quorum, witness_quorum without', async () => {
  // Cosign the fixture's checkpoint with the vector witness (seed 32 × 0x04, witness.json).
  const w = JSON.parse(cos('witness.json'));
  const seed = Uint8Array.from(w.seed_hex.match(/../g), (x) => parseInt(x, 16));
  const pkcs8 = concat(Uint8Array.from([0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20]), seed);
  const wkey = await crypto.subtle.importKey('pkcs8', pkcs8, { name: 'Ed25519' }, false, ['sign']);
  const note = parseStrict(certText).checkpoint;
  const body = note.split('\n\n')[0] + '\n';
  const time = 1796126400n;
  const sig = new Uint8Array(await crypto.subtle.sign({ name: 'Ed25519' }, wkey, utf8(`cosignature/v1\ntime ${time}\n${body}`)));
  const prefix = new Uint8Array(12);
  prefix.set(Uint8Array.from(w.key_id.match(/../g), (x) => parseInt(x, 16)));
  new DataView(prefix.buffer).setBigUint64(4, time);
  const cosigned = `${note}\u2014 ${w.name} ${b64encode(concat(prefix, sig))}\n`;
  const cert = await certificateWith((c) => { c.checkpoint = cosigned; }, true);
  const bundle = tamper('v3', (l) => { l[0].checkpoint = cosigned; });
  const withQuorum = await verify.verifyCertificate({ certificateText: cert, bundle, logKey, witnesses: [witness], quorum: 1 });
  expectVerdict(withQuorum, 'PASS');
  // The bundle alone, from a stream, with the witness rule.
  expectVerdict(await verify.verifyBundle({ bundle: new Blob([bundle]).stream(), logKey, witnesses: [witness] }), 'PASS');
  // The original (not cosigned) fails the rule; so does a cosigned bundle asked for 2 of 2.
  const plain = await verify.verifyCertificate({ certificateText: certText, bundle: bundleV3, logKey, witnesses: [witness] });
  expectVerdict(plain, 'witness_quorum', 'checkpoint');
  expectVerdict(await verify.verifyBundle({ bundle: bundleV3, logKey, witnesses: [witness] }), 'witness_quorum');
  if (bin) {
    const c = writeTmp('cert.json', cert);
    const b = writeTmp('bundle.ndjson', bundle);
    eq(binaryVerdict(['--certificate', c, '--bundle', b, '--log-key', logKey, '--witness', witness, '--quorum', '1']), 'PASS', 'gpuledger verify');
    sameWitnesses(withQuorum);
    eq(binaryVerdict(['--bundle', b, '--log-key', logKey, '--witness', witness]), 'PASS', 'gpuledger verify (bundle)');
    sameWitnesses(await verify.verifyBundle({ bundle, logKey, witnesses: [witness] }));
    eq(binaryVerdict(['--certificate', path.join(fixtures, 'certificate.json'), '--bundle', writeTmp('b.ndjson', bundleV3), '--log-key', logKey, '--witness', witness]), 'witness_quorum', 'gpuledger verify (not cosigned)');
  }
});

// ---------------------------------------------------------------- protocol vectors (tests/vectors)

const keys = JSON.parse(read(path.join(vectors, 'keys.json')));
const vkeyOfVectors = Object.values(keys).find((k) => k.verifier_key)?.verifier_key;

await test('vectors: key ids (§3.2, §9) and the verifier key', async () => {
  for (const k of Object.values(keys)) {
    const pk = b64decode(k.public_key);
    eq(await envelopeKeyId(pk), k.key_id, `key id of ${k.signer}`);
    eq(keyProblem(pk), null, `key ${k.signer} is valid`);
  }
  const vk = await parseVerifierKey(vkeyOfVectors);
  eq(vk.name, 'gpuledger.example/vectors', 'name');
  eq(vk.keyId.toString(16).padStart(8, '0'), '8fc7e056', 'note key id');
});

await test('vectors: signed messages, leaf hashes and the small-order R signature', async () => {
  for (const kind of ['gpu_usage', 'energy', 'spot_price']) {
    const env = parseStrict(read(path.join(vectors, `${kind}.envelope.json`)));
    const e = await checkEnvelope(env, 'gpuledger.example/vectors');
    eq(hex(e.message), hex(readBytes(path.join(vectors, `${kind}.message.bin`))), `${kind} message`);
    eq(canonicalize(parseStrict(read(path.join(vectors, `${kind}.body.json`)))), read(path.join(vectors, `${kind}.body.json`)), `${kind} body is canonical`);
    const leafBytes = readBytes(path.join(vectors, `${kind}.leaf.json`));
    eq(hex(await leafHash(leafBytes)), read(path.join(vectors, `${kind}.leaf_hash.hex`)).trim(), `${kind} leaf hash`);
    const signer = Object.values(keys).find((k) => k.key_id === env.key_id);
    const key = await PublicKey.fromBase64(signer.public_key);
    assert(await key.verify(e.message, e.sig), `${kind} signature verifies`);
    assert(!(await key.verify(e.message.subarray(1), e.sig)), `${kind} signature over other bytes`);
  }
  const nodeKey = await PublicKey.fromBase64(keys.node?.public_key ?? 'iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w=');
  const sig = b64decode(read(path.join(vectors, 'gpu_usage.small_order_r.sig.b64')).trim());
  assert(!(await nodeKey.verify(readBytes(path.join(vectors, 'gpu_usage.message.bin')), sig)), 'the small-order R signature is refused');
});

await test('vectors: the tree, its inclusion and consistency proofs (RFC 9162), the checkpoint', async () => {
  const tree = JSON.parse(read(path.join(vectors, 'tree.json')));
  const leaves = read(path.join(vectors, 'log.jsonl')).split('\n').filter(Boolean);
  const hashes = [];
  for (const l of leaves) hashes.push(await leafHash(utf8(l)));
  eq(hashes.map(b64encode), tree.leaf_hashes, 'leaf hashes');
  const mth = async (lo, hi) => (hi - lo === 1 ? hashes[lo] : nodeHash(await mth(lo, lo + splitPoint(hi - lo)), await mth(lo + splitPoint(hi - lo), hi)));
  eq(b64encode(await mth(0, hashes.length)), tree.root, 'root');
  for (const p of tree.inclusion) {
    const ok = await verifyInclusion(p.leaf_index, p.tree_size, b64decode(p.leaf_hash), p.proof.map(b64decode), b64decode(p.root));
    assert(ok, `inclusion of ${p.leaf_index} in ${p.tree_size}`);
    if (p.proof.length) {
      const bad = p.proof.map(b64decode);
      bad[0] = bad[0].slice().reverse();
      assert(!(await verifyInclusion(p.leaf_index, p.tree_size, b64decode(p.leaf_hash), bad, b64decode(p.root))), 'a bad inclusion proof');
    }
    assert(!(await verifyInclusion(p.leaf_index + 1, p.tree_size, b64decode(p.leaf_hash), p.proof.map(b64decode), b64decode(p.root))), 'another index');
  }
  for (const c of tree.consistency) {
    const ok = await verifyConsistency(c.old_size, c.new_size, b64decode(c.old_root), b64decode(c.new_root), c.proof.map(b64decode));
    assert(ok, `consistency ${c.old_size} → ${c.new_size}`);
    if (c.proof.length) {
      assert(!(await verifyConsistency(c.old_size, c.new_size, b64decode(c.new_root), b64decode(c.new_root), c.proof.map(b64decode))), 'another old root');
    }
  }
  const r = await verify.verifyCheckpoint({ noteText: read(path.join(vectors, 'checkpoint.txt')), logKey: vkeyOfVectors });
  expectVerdict(r, 'PASS');
  eq(r.summary.root, tree.root, 'checkpoint root');
  eq(r.summary.size, tree.size, 'checkpoint size');
});

await test('vectors: the vector log as a v3 bundle (empty multi-proof) PASSes; a changed leaf fails', async () => {
  const leaves = read(path.join(vectors, 'log.jsonl')).split('\n').filter(Boolean);
  const note = read(path.join(vectors, 'checkpoint.txt'));
  const header = canonicalize({ checkpoint: note, format: 'gpuledger-bundle/v3', log_origin: 'gpuledger.example/vectors', subject: { certificate: 'CERT-000000' }, type: 'header' });
  const entry = (l) => `{"index":${parseStrict(l).index},"leaf":${l},"type":"entry"}`;
  const isRecord = (l) => ['gpu_usage', 'energy'].includes(parseStrict(l).envelope.kind);
  const body = [...leaves.filter((l) => !isRecord(l)), ...leaves.filter(isRecord)].map(entry);
  const bundle = joinLines([header, ...body, `{"entries":${leaves.length},"nodes":0,"type":"end"}`]);
  const r = await verify.verifyBundle({ bundle, logKey: vkeyOfVectors });
  expectVerdict(r, 'PASS');
  eq(r.summary.records, 3, 'records');
  if (bin) eq(binaryVerdict(['--bundle', writeTmp('vectors.ndjson', bundle), '--log-key', vkeyOfVectors]), 'PASS', 'gpuledger verify');
  const changed = bundle.replace('"gpu_count":"8"', '"gpu_count":"8","gpu_countx":"1"');
  expectVerdict(await verify.verifyBundle({ bundle: changed, logKey: vkeyOfVectors }), 'leaf_invalid');
});

await test('vectors: the adversarial Ed25519 cases (§3.1, §3.3) get the protocol\'s verdicts', async () => {
  const { cases } = JSON.parse(read(path.join(vectors, 'ed25519/cases.json')));
  const fromHex = (h) => Uint8Array.from(h.match(/../g) ?? [], (x) => parseInt(x, 16));
  assert(cases.length >= 10, 'cases');
  for (const c of cases) {
    const kb = b64decode(c.public_key);
    const valid = keyProblem(kb) === null;
    eq(valid, c.key_valid, `${c.name}: key_valid`);
    let accepted = false;
    if (valid) accepted = await (await PublicKey.fromBytes(kb)).verify(fromHex(c.message), b64decode(c.signature));
    eq(accepted ? 'accept' : 'refuse', c.verdict, `${c.name}: verdict`);
  }
  eq(SMALL_ORDER_ENCODINGS.length, 8, 'eight small-order points');
  for (const h of SMALL_ORDER_ENCODINGS) assert(isSmallOrderPoint(fromHex(h)), `${h} is of small order`);
});

// ---------------------------------------------------------------- JCS and decimals

await test('jcs: canonical form, repeated names, big numbers, surrogates', async () => {
  eq(canonicalize(parseStrict('{"b":1,"a":[true,null,"\\u00e9\\n\\u001f"]}')), '{"a":[true,null,"é\\n\\u001f"],"b":1}', 'canonical');
  eq(canonicalize(parseStrict('{"\\u20ac":1,"\\ud83d\\ude00":2,"z":3}')), '{"z":3,"€":1,"😀":2}', 'UTF-16 order');
  for (const bad of ['{"a":1,"a":2}', '{"a":1,"\\u0061":2}', '{"x":{"a":1,"a":1}}', '9007199254740992', '1.0', '1e3', '-1', '"\\ud800"', '{"a":1} x', '01']) {
    let threw = false;
    try {
      parseStrict(bad);
    } catch {
      threw = true;
    }
    assert(threw, `refuses ${bad}`);
  }
  eq(parseStrict('9007199254740991'), 9007199254740991, 'the largest integer');
  eq(b64decode('AB=='), null, 'non-canonical padding bits');
  eq(b64decode('AA=='), Uint8Array.from([0]), 'canonical');
});

await test('timestamps (§2.2): real dates in range only', async () => {
  const { timestampSeconds } = await import('../leaf.js');
  eq(timestampSeconds('2000-01-01T00:00:00Z'), 946684800, 'the first');
  eq(timestampSeconds('9999-12-31T23:59:59Z'), 253402300799, 'the last');
  eq(timestampSeconds('2026-11-28T01:00:00Z'), Date.UTC(2026, 10, 28, 1) / 1000, 'a date');
  eq(timestampSeconds('2000-02-29T12:00:00Z'), Date.UTC(2000, 1, 29, 12) / 1000, 'a leap day');
  for (const bad of ['1999-12-31T23:59:59Z', '2100-02-29T00:00:00Z', '2026-02-30T00:00:00Z', '2026-04-31T00:00:00Z', '2026-01-01T24:00:00Z',
    '2026-01-01T00:00:60Z', '2026-13-01T00:00:00Z', '2026-01-01T00:00:00', '2026-01-01 00:00:00Z', '2026-01-01T00:00:00.5Z']) {
    eq(timestampSeconds(bad), null, bad);
  }
});

await test('an envelope over 8192 canonical bytes → leaf_invalid (too_large), counted in UTF-8 bytes', async () => {
  const env = parseStrict(read(path.join(vectors, 'gpu_usage.envelope.json')));
  const revoke = { body: { key_id: '0000000000000000', reason: '\u00e9'.repeat(3000), signer: 'x' }, key_id: env.key_id, kind: 'signer_key_revoked', seq: 1, sig: env.sig, signer: 'ledger', v: 3 };
  revoke.body.reason = '\u00e9'.repeat(3000);
  let refused = null;
  try {
    await checkEnvelope(revoke, 'gpuledger.example/vectors');
  } catch (e) {
    refused = e.message;
  }
  assert(refused === null, `3000 two-byte characters fit: ${refused}`);
  revoke.body.reason = '\u00e9'.repeat(4100);
  try {
    await checkEnvelope(revoke, 'gpuledger.example/vectors');
  } catch (e) {
    refused = e.message;
  }
  assert(refused && refused.startsWith('too_large'), `4100 two-byte characters (8200 bytes) do not: ${refused}`);
});

await test('admission: a settlement names an invoice issued to its tenant, in its currency; credits stay within its total (§5.10)', async () => {
  const a = new Admission();
  a.apply(1, { kind: 'invoice_issued', body: { number: 'INV-000001', tenant: 't1', currency: 'CNY', total: '100.00', period_from: '2026-11-01T00:00:00Z', period_to: '2026-11-02T00:00:00Z' } });
  const verdictOf = (kind, invoice, tenant, currency, amount) => {
    try {
      a.checkSettlement(kind, { tenant, invoice, currency, amount, note: '' }, 'entry 9');
      return 'PASS';
    } catch (e) {
      return e.reason;
    }
  };
  eq(verdictOf('payment', 'INV-000001', 't1', 'CNY', '150.00'), 'PASS', 'a payment above the total (the excess is credit)');
  eq(verdictOf('payment', 'INV-000002', 't1', 'CNY', '1'), 'unknown_invoice', 'an unknown invoice');
  eq(verdictOf('credit_note', 'INV-000001', 't2', 'CNY', '1'), 'unknown_invoice', "another tenant's invoice");
  eq(verdictOf('payment', 'INV-000001', 't1', 'USD', '1'), 'currency_mismatch', 'another currency');
  eq(verdictOf('credit_note', 'INV-000001', 't1', 'CNY', '100.00'), 'PASS', 'a credit of the whole total');
  eq(verdictOf('credit_note', 'INV-000001', 't1', 'CNY', '100.01'), 'credit_above_total', 'a credit above the total');
  a.apply(2, { kind: 'credit_note', body: { tenant: 't1', invoice: 'INV-000001', currency: 'CNY', amount: '60.00', note: '' } });
  eq(verdictOf('credit_note', 'INV-000001', 't1', 'CNY', '40.00'), 'PASS', 'credits adding up to the total');
  eq(verdictOf('credit_note', 'INV-000001', 't1', 'CNY', '40.01'), 'credit_above_total', 'credits adding up past the total');
});

// ---------------------------------------------------------------- the fleet (crates/core/src/fleet.rs)
//
// Independent of the committed fixtures: bodies and Admission driven directly, and small logs
// built and signed here (WebCrypto Ed25519), verified as version-3 bundles of every entry.

/** n1: 8 H100 and one L40S, 700 W each: 9 × 700 W × 3600 s × 1.05 / 3,600,000 = 6.615 kWh an hour. */
const N1 = {
  node: 'n1', region: 'r1', max_watts_per_gpu: '700',
  gpus: [...Array.from({ length: 8 }, (_, i) => ({ index: i, uuid: `GPU-n1-${i}`, model: 'H100' })), { index: 8, uuid: 'GPU-n1-8', model: 'L40S' }],
};
/** The lease `L` of tenant t over all of n1's GPUs, open-ended from 2026-11-01 (§5.8). */
const LEASE_L = { class: 'on_demand', from: '2026-11-01T00:00:00Z', lease: 'L', nodes: [{ gpus: N1.gpus.map((g) => g.index), node: 'n1' }], tenant: 't' };
/** Usage of `count` GPUs for `seconds` from 2026-11-05T00:00:00Z (or `from` seconds later), under lease L unless `lease` says otherwise (null: none). */
const usageBody = (count, { model = 'H100', node = 'n1', region = 'r1', seconds = 3600, tenant = 't', lease = 'L', from = 0 } = {}) => ({
  tenant, region, node, gpu_model: model, gpu_count: count,
  ...(lease === null ? {} : { lease }),
  start: new Date(Date.parse('2026-11-05T00:00:00Z') + from * 1000).toISOString().replace('.000Z', 'Z'),
  end: new Date(Date.parse('2026-11-05T00:00:00Z') + (from + seconds) * 1000).toISOString().replace('.000Z', 'Z'),
  gpu_seconds: Dec.parse(count).mul(Dec.int(seconds)).toString(),
});
const energyBody = (kwh, { node = 'n1', region = 'r1', seconds = 3600 } = {}) => ({
  region, node, kwh, start: '2026-11-05T00:00:00Z',
  end: new Date(Date.parse('2026-11-05T00:00:00Z') + seconds * 1000).toISOString().replace('.000Z', 'Z'),
});

/** The field at the head of a fleet failure's message (Rust's Rejection field: `body.kwh`, `body.gpus[0].uuid`), or ''. */
const fieldOf = (message) => /^body\.[A-Za-z0-9_.[\]]+/.exec(message)?.[0].replace(/\.$/, '') ?? '';

/** The LeafError message of checkEnvelope on a node_registered body, or 'PASS'. */
async function nodeBodyVerdict(body) {
  const env = { v: 3, kind: 'node_registered', signer: 'ledger', key_id: '0123456789abcdef', seq: 1, body, sig: `${'A'.repeat(86)}==` };
  try {
    await checkEnvelope(env, 'gpuledger.test/fleet');
    return 'PASS';
  } catch (e) {
    return e.message;
  }
}

await test('fleet: a node_registered body is checked as record.rs checks it', async () => {
  const gpus = (n, changes = {}) => Array.from({ length: n }, (_, i) => Object.assign({ index: i, uuid: `GPU-${i}`, model: 'H100' }, changes[i] ?? {}));
  const without = (o, k) => Object.fromEntries(Object.entries(o).filter(([m]) => m !== k));
  const verdictOf = (changes) => nodeBodyVerdict(Object.assign({}, N1, changes));
  eq(await verdictOf({}), 'PASS', 'n1');
  eq(await verdictOf({ hub: 'hub-1' }), 'PASS', 'with a hub');
  eq(await verdictOf({ gpus: gpus(64) }), 'PASS', '64 GPUs');
  eq(await verdictOf({ gpus: gpus(1, { 0: { index: 4294967295 } }) }), 'PASS', 'the highest u32 index');
  eq(await verdictOf({ gpus: gpus(2, { 0: { index: 4 }, 1: { index: 7 } }) }), 'PASS', 'indexes with gaps');
  eq(await verdictOf({ gpus: gpus(2, { 1: { uuid: `!${'~'.repeat(127)}` } }) }), 'PASS', '128 visible characters');
  eq(await verdictOf({ max_watts_per_gpu: '5000' }), 'PASS', '5000 W');
  eq(await verdictOf({ max_watts_per_gpu: '0.000000001' }), 'PASS', 'a nanowatt');
  const refused = [
    ['no gpus', without(N1, 'gpus'), /has no member gpus/],
    ['an unknown member', { ...N1, rack: 'r7' }, /unknown member rack/],
    ['a null hub', { ...N1, hub: null }, /body\.hub is not an identifier/],
    ['gpus not an array', { ...N1, gpus: { index: 0 } }, /body\.gpus is not an array/],
    ['a GPU that is a string', { ...N1, gpus: ['GPU-0'] }, /body\.gpus\[0\] is not an object/],
    ['a GPU member unknown', { ...N1, gpus: gpus(2, { 1: { serial: 'x' } }) }, /body\.gpus\[1\] has an unknown member serial/],
    ['a GPU member missing', { ...N1, gpus: [{ index: 0, uuid: 'GPU-0' }] }, /body\.gpus\[0\] has no member model/],
    ['a negative index', { ...N1, gpus: gpus(1, { 0: { index: -1 } }) }, /body\.gpus\[0\]\.index is not an integer/],
    ['an index above u32', { ...N1, gpus: gpus(1, { 0: { index: 4294967296 } }) }, /body\.gpus\[0\]\.index is not an integer/],
    ['an index as a string', { ...N1, gpus: gpus(1, { 0: { index: '0' } }) }, /body\.gpus\[0\]\.index is not an integer/],
    ['a uuid that is a number', { ...N1, gpus: gpus(1, { 0: { uuid: 7 } }) }, /body\.gpus\[0\]\.uuid is not a string/],
    ['the shape before the identifiers', { ...N1, node: '-bad', gpus: gpus(2, { 1: { serial: 'x' } }) }, /unknown member serial/],
    ['a bad node id', { ...N1, node: '-bad' }, /body\.node is not an identifier/],
    ['the reserved id', { ...N1, node: 'ledger' }, /reserved/],
    ['a bad region', { ...N1, region: '' }, /body\.region is not an identifier/],
    ['no GPUs', { ...N1, gpus: [] }, /^quantity_out_of_range: body\.gpus/],
    ['65 GPUs', { ...N1, gpus: gpus(65) }, /^quantity_out_of_range: body\.gpus/],
    ['a repeated index', { ...N1, gpus: gpus(3, { 2: { index: 1 } }) }, /body\.gpus\[2\]\.index: GPUs are listed by strictly increasing index/],
    ['a decreasing index', { ...N1, gpus: gpus(2, { 1: { index: 0 } }) }, /body\.gpus\[1\]\.index/],
    ['an empty uuid', { ...N1, gpus: gpus(2, { 1: { uuid: '' } }) }, /body\.gpus\[1\]\.uuid must be 1 to 128 visible ASCII/],
    ['a uuid with a space', { ...N1, gpus: gpus(2, { 1: { uuid: 'GPU 1' } }) }, /body\.gpus\[1\]\.uuid must be/],
    ['a uuid not ASCII', { ...N1, gpus: gpus(2, { 1: { uuid: 'GPU-\u00e9' } }) }, /body\.gpus\[1\]\.uuid must be/],
    ['a uuid of 129 characters', { ...N1, gpus: gpus(2, { 1: { uuid: 'x'.repeat(129) } }) }, /body\.gpus\[1\]\.uuid must be/],
    ['a repeated uuid', { ...N1, gpus: gpus(3, { 2: { uuid: 'GPU-0' } }) }, /body\.gpus\[2\]\.uuid GPU-0 is listed twice/],
    ['a model that is no identifier', { ...N1, gpus: gpus(2, { 1: { model: 'H100 SXM' } }) }, /body\.gpus\[1\]\.model is not an identifier/],
    ['GPU by GPU: the uuid of GPU 1 before the index of GPU 2', { ...N1, gpus: gpus(3, { 1: { uuid: '' }, 2: { index: 0 } }) }, /body\.gpus\[1\]\.uuid/],
    ['0 W', { ...N1, max_watts_per_gpu: '0' }, /^quantity_out_of_range: body\.max_watts_per_gpu must be above 0/],
    ['above 5000 W', { ...N1, max_watts_per_gpu: '5000.000000001' }, /^quantity_out_of_range: body\.max_watts_per_gpu/],
    ['negative watts', { ...N1, max_watts_per_gpu: '-700' }, /body\.max_watts_per_gpu is not a canonical decimal/],
    ['watts not canonical', { ...N1, max_watts_per_gpu: '700.0' }, /body\.max_watts_per_gpu is not a canonical decimal/],
    ['watts as a number', { ...N1, max_watts_per_gpu: 700 }, /body\.max_watts_per_gpu is not a string/],
    ['the GPU count before the watts', { ...N1, gpus: [], max_watts_per_gpu: '0' }, /body\.gpus/],
  ];
  for (const [what, body, want] of refused) {
    const got = await nodeBodyVerdict(body);
    assert(want.test(got), `${what}: ${got}`);
  }
});

await test('fleet: Admission refuses what does not fit the node, with the reasons of fleet.rs', async () => {
  const a = new Admission();
  a.apply(3, { kind: 'node_registered', body: N1 });
  a.apply(4, { kind: 'lease_registered', body: LEASE_L });
  const verdictOf = (kind, body, index = 10) => {
    try {
      a.checkFleet(index, kind, body, `entry ${index}`);
      return 'PASS';
    } catch (e) {
      return e.reason;
    }
  };
  eq(verdictOf('gpu_usage', usageBody('8')), 'PASS', 'all 8 H100s');
  eq(verdictOf('gpu_usage', usageBody('1', { model: 'L40S' })), 'PASS', 'the L40S');
  eq(verdictOf('gpu_usage', usageBody('0.5', { model: 'L40S' })), 'PASS', 'half a GPU');
  eq(verdictOf('gpu_usage', usageBody('8.000001')), 'over_capacity', 'a millionth of a GPU more');
  eq(verdictOf('gpu_usage', usageBody('1024', { seconds: 60 })), 'over_capacity', '1,024 GPUs on an 8-GPU node');
  eq(verdictOf('gpu_usage', usageBody('2', { model: 'L40S' })), 'over_capacity', 'capacity counts the model only');
  eq(verdictOf('gpu_usage', usageBody('1', { model: 'NO-PRICE' })), 'unknown_gpu_model', 'a model the node lacks');
  eq(verdictOf('gpu_usage', usageBody('1', { region: 'east' })), 'wrong_region', "another region than the node's (fleet.rs in_region)");
  eq(verdictOf('gpu_usage', usageBody('1', { node: 'n9' })), 'unknown_node', 'an unregistered node');
  eq(verdictOf('gpu_usage', usageBody('1'), 3), 'unknown_node', 'a node registered at the record\'s index');
  eq(verdictOf('gpu_usage', usageBody('1'), 5), 'PASS', 'a node (and its lease) registered just before');
  eq(verdictOf('energy', energyBody('6.615')), 'PASS', 'energy at the bound');
  eq(verdictOf('energy', energyBody('6.615001')), 'energy_over_bound', 'a millionth of a kWh above it');
  eq(verdictOf('energy', energyBody('0.0128625', { seconds: 7 })), 'PASS', '7 s at the bound');
  eq(verdictOf('energy', energyBody('0.012862501', { seconds: 7 })), 'energy_over_bound', '7 s above it');
  eq(verdictOf('energy', energyBody('1', { region: 'east' })), 'wrong_region', "energy in another region than the node's");
  eq(verdictOf('energy', energyBody('1', { node: 'n9' })), 'unknown_node', 'energy of an unregistered node');
  let message = '';
  try {
    a.checkFleet(10, 'energy', energyBody('6.615001'), 'entry 10');
  } catch (e) {
    message = e.message;
  }
  assert(message.includes('(+5 %): 6.615 kWh'), `the bound in the message: ${message}`);
  // A bound that is no finite decimal (1 GPU of 1 W for 1 s: 1.05 / 3,600,000 kWh), compared exactly.
  a.apply(5, { kind: 'node_registered', body: { node: 'n2', region: 'r1', max_watts_per_gpu: '1', gpus: [{ index: 0, uuid: 'u', model: 'H100' }] } });
  eq(verdictOf('energy', energyBody('0.000000291', { node: 'n2', seconds: 1 })), 'PASS', '0.000000291 kWh in 1 s');
  eq(verdictOf('energy', energyBody('0.000000292', { node: 'n2', seconds: 1 })), 'energy_over_bound', '0.000000292 kWh in 1 s');
  // Registrations: once; keys name registered nodes only.
  eq(verdictOf('node_registered', N1), 'already_registered', 'n1 again');
  eq(verdictOf('node_registered', N1, 3), 'PASS', 'n1 at its own index');
  eq(verdictOf('node_registered', { ...N1, node: 'n3' }), 'PASS', 'another node');
  const key = { signer: 'node-a', role: 'node', key_id: '0123456789abcdef', public_key: '', nodes: ['n1', 'n2'], regions: ['r1'] };
  eq(verdictOf('signer_key_registered', key), 'PASS', 'a key for n1 and n2');
  eq(verdictOf('signer_key_registered', key, 5), 'unknown_node', 'a key before n2 was registered');
  eq(verdictOf('signer_key_registered', { ...key, nodes: ['n1', 'n3'] }), 'unknown_node', 'a key for an unregistered node');
  eq(verdictOf('signer_key_registered', { signer: 'market-a', role: 'market', key_id: '0123456789abcdef', public_key: '', regions: ['r1'] }), 'PASS', 'a market key');
  // The first registration counts.
  a.apply(7, { kind: 'node_registered', body: { ...N1, gpus: [{ index: 0, uuid: 'x', model: 'A100' }], max_watts_per_gpu: '5000' } });
  eq(a.nodes.get('n1').at, 3, 'the first registration is kept');
  eq(verdictOf('gpu_usage', usageBody('1', { model: 'A100' })), 'unknown_gpu_model', 'the second registration does not count');
});

await test('fleet: check() applies the fleet after the parties and before the time rules', async () => {
  const a = new Admission();
  a.apply(1, { kind: 'tenant_registered', body: { tenant: 't' } });
  a.apply(3, { kind: 'node_registered', body: N1 });
  a.apply(4, { kind: 'lease_registered', body: LEASE_L });
  const verdictOf = (body, receivedAt) => {
    try {
      a.check(10, { kind: 'gpu_usage', body }, receivedAt);
      return 'PASS';
    } catch (e) {
      return e.reason;
    }
  };
  const inTime = '2026-11-05T01:00:02Z';
  const late = '2026-12-10T00:00:01Z'; // 35 days and a second after the start
  eq(verdictOf(usageBody('8'), inTime), 'PASS', 'in time, within capacity');
  eq(verdictOf(usageBody('9', { model: 'A100', tenant: 't2' }), inTime), 'unknown_tenant', 'the parties first');
  eq(verdictOf(usageBody('9'), late), 'over_capacity', 'the fleet before time');
  eq(verdictOf(usageBody('8'), late), 'too_old', 'then time');
  // The lease rules are fleet rules: after the parties, before time.
  eq(verdictOf(usageBody('1', { lease: 'X' }), inTime), 'unknown_lease', 'an unregistered lease: the parties');
  eq(verdictOf(usageBody('1', { lease: null }), late), 'lease_not_on_node', 'no lease: the fleet before time');
  eq(verdictOf(usageBody('9', { lease: null }), inTime), 'over_capacity', "no lease, but the node's bound first");
  eq(verdictOf(usageBody('1', { lease: null, tenant: 't2' }), inTime), 'unknown_tenant', 'no lease, but the parties first');
});

/** An Ed25519 key from a one-byte seed, with its raw public key (WebCrypto, as the fixtures' key). */
async function seededKey(byte) {
  const pkcs8 = concat(Uint8Array.from([0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20]), new Uint8Array(32).fill(byte));
  const key = await crypto.subtle.importKey('pkcs8', pkcs8, { name: 'Ed25519' }, true, ['sign']);
  const jwk = await crypto.subtle.exportKey('jwk', key);
  const pub = b64decode(jwk.x.replace(/-/g, '+').replace(/_/g, '/').padEnd(44, '='));
  return { key, pub, keyId: await envelopeKeyId(pub) };
}

/**
 * A log signed here and its version-3 bundle of every entry (no multi-proof nodes needed):
 * `build(ledger, node)` appends entries; returns {bundle, logKey, indexOf}.
 */
async function fleetLog(build) {
  const origin = 'gpuledger.test/fleet';
  const log = await seededKey(0x61);
  const nodeKey = await seededKey(0x62);
  const leaves = [];
  let prev = new Uint8Array(32);
  const seqs = new Map();
  const received = { at: Date.parse('2026-10-01T00:00:00Z') / 1000 };
  const iso = (s) => new Date(s * 1000).toISOString().replace('.000Z', 'Z');
  const append = async (kind, signer, k, body, receivedAt) => {
    const seq = (seqs.get(signer) ?? 0) + 1;
    seqs.set(signer, seq);
    const env = { body, key_id: k.keyId, kind, seq, signer, v: 3 };
    const message = utf8(`gpuledger/v3/${kind}\n${origin}\n${canonicalize(env)}`);
    env.sig = b64encode(new Uint8Array(await crypto.subtle.sign({ name: 'Ed25519' }, k.key, message)));
    const leaf = canonicalize({ envelope: env, index: leaves.length, prev: b64encode(prev), received_at: receivedAt, v: 3 });
    prev = await leafHash(utf8(leaf));
    leaves.push({ leaf, kind, hash: prev });
    return leaves.length - 1;
  };
  const ledger = (kind, body) => append(kind, 'ledger', log, body, iso(received.at));
  const node = (kind, body) => {
    received.at = Math.max(received.at, timestampOf(body.end) + 2);
    return append(kind, 'node-a', nodeKey, body, iso(received.at));
  };
  const timestampOf = (t) => Date.parse(t) / 1000;
  await ledger('log_policy', { max_future_skew_seconds: 300, max_record_age_seconds: 3024000 });
  await ledger('tenant_registered', { tenant: 't' });
  await build({ ledger, node, nodeKey });
  const mth = async (lo, hi) => (hi - lo === 1 ? leaves[lo].hash : nodeHash(await mth(lo, lo + splitPoint(hi - lo)), await mth(lo + splitPoint(hi - lo), hi)));
  const root = await mth(0, leaves.length);
  const noteBody = `${origin}\n${leaves.length}\n${b64encode(root)}\n`;
  const noteKey = (await crypto.subtle.digest('SHA-256', concat(utf8(`${origin}\n`), Uint8Array.of(1), log.pub))).slice(0, 4);
  const noteSig = new Uint8Array(await crypto.subtle.sign({ name: 'Ed25519' }, log.key, utf8(noteBody)));
  const note = `${noteBody}\n\u2014 ${origin} ${b64encode(concat(new Uint8Array(noteKey), noteSig))}\n`;
  const header = canonicalize({ checkpoint: note, format: 'gpuledger-bundle/v3', log_origin: origin, subject: { invoice: 'INV-000009' }, type: 'header' });
  const isRecord = (l) => l.kind === 'gpu_usage' || l.kind === 'energy';
  const ordered = [...leaves.map((l, i) => ({ ...l, i })).filter((l) => !isRecord(l)), ...leaves.map((l, i) => ({ ...l, i })).filter(isRecord)];
  const body = ordered.map((l) => `{"index":${l.i},"leaf":${l.leaf},"type":"entry"}`);
  const bundle = joinLines([header, ...body, `{"entries":${leaves.length},"nodes":0,"type":"end"}`]);
  const logKeyText = `${origin}+${hex(new Uint8Array(noteKey))}+${b64encode(concat(Uint8Array.of(1), log.pub))}`;
  return { bundle, logKey: logKeyText };
}

/**
 * A node key for n1 (regions r1 and r2, wider than n1's region), `lease` (LEASE_L unless given;
 * null: none) and the entries `more` appends: 0 log_policy, 1 tenant_registered t,
 * 2 node_registered n1 (`nodeBody`, N1 unless given), 3 node-a's key, 4 the lease, then `more`'s.
 */
const fleetCase = (more, { register = true, keyNodes = ['n1'], lease = LEASE_L, nodeBody = N1 } = {}) => fleetLog(async ({ ledger, node, nodeKey }) => {
  if (register) await ledger('node_registered', nodeBody);
  const keyIndex = await ledger('signer_key_registered', { key_id: nodeKey.keyId, nodes: keyNodes, public_key: b64encode(nodeKey.pub), regions: ['r1', 'r2'], role: 'node', signer: 'node-a' });
  if (lease) await ledger('lease_registered', lease);
  await more({ ledger, node, keyIndex });
});

await test('fleet: bundles signed here: node registrations are context, and the fleet rules hold in them', async () => {
  const verdictOf = async (c) => {
    const r = await verify.verifyBundle({ bundle: c.bundle, logKey: c.logKey });
    if (bin) eq(binaryVerdict(['--bundle', writeTmp('fleet.ndjson', c.bundle), '--log-key', c.logKey]), verdict(r), 'gpuledger verify');
    return r.ok ? 'PASS' : `${r.failure.reason} (${r.failure.item})`;
  };
  // 0 log_policy, 1 tenant_registered, 2 node_registered n1, 3 node-a's key, 4 lease L, then the records
  const good = await fleetCase(async ({ node }) => {
    await node('gpu_usage', usageBody('8'));
    await node('gpu_usage', usageBody('1', { model: 'L40S' }));
    await node('energy', { ...energyBody('6.615'), tenant: 't' });
  });
  const r = await verify.verifyBundle({ bundle: good.bundle, logKey: good.logKey });
  expectVerdict(r, 'PASS');
  eq(r.summary.records, 3, 'records');
  eq(await verdictOf(await fleetCase(async ({ node }) => { await node('gpu_usage', usageBody('8.000001')); })), 'over_capacity (entry 5)', '8.000001 GPUs');
  eq(await verdictOf(await fleetCase(async ({ node }) => { await node('gpu_usage', usageBody('1', { model: 'A100' })); })), 'unknown_gpu_model (entry 5)', 'a model n1 lacks');
  eq(await verdictOf(await fleetCase(async ({ node }) => { await node('gpu_usage', usageBody('1', { region: 'r2' })); })), 'wrong_region (entry 5)', "a region the key has, not the node's: wrong_region");
  eq(await verdictOf(await fleetCase(async ({ node }) => { await node('energy', energyBody('6.615001')); })), 'energy_over_bound (entry 5)', 'energy above the bound');
  eq(await verdictOf(await fleetCase(async () => {}, { register: false })), 'unknown_node (entry 2)', 'a key for an unregistered node');
  eq(await verdictOf(await fleetCase(async () => {}, { keyNodes: ['n1', 'n2'] })), 'unknown_node (entry 3)', 'a key naming an unregistered node too');
  eq(await verdictOf(await fleetCase(async ({ ledger }) => { await ledger('node_registered', { ...N1, region: 'r2' }); })), 'already_registered (entry 5)', 'n1 registered twice');
  eq(await verdictOf(await fleetCase(async ({ ledger }) => { await ledger('node_registered', { ...N1, node: 'n2', gpus: [] }); })), 'leaf_invalid (entry 5)', 'a node without GPUs');
});

await test("fleet: a tenant's energy is billed only under its leases of the node, for what they cover", async () => {
  const a = new Admission();
  a.apply(3, { kind: 'node_registered', body: N1 });
  // u: GPU 0 whole for 2 h and a quarter of GPUs 1 and 2 for 1 h: 1.5 GPUs, then 1.
  a.apply(4, { kind: 'lease_registered', body: { class: 'on_demand', from: '2026-11-05T00:00:00Z', to: '2026-11-05T02:00:00Z', lease: 'U1', nodes: [{ gpus: [0], node: 'n1' }], tenant: 'u' } });
  a.apply(5, { kind: 'lease_registered', body: { class: 'on_demand', from: '2026-11-05T00:00:00Z', to: '2026-11-05T01:00:00Z', lease: 'U2', nodes: [{ gpus: [1, 2], node: 'n1', share: '0.25' }], tenant: 'u' } });
  // v: any 2 H100s of n1.
  a.apply(6, { kind: 'lease_registered', body: { class: 'on_demand', from: '2026-11-01T00:00:00Z', lease: 'V', nodes: [{ count: '2', gpu_model: 'H100', node: 'n1' }], tenant: 'v' } });
  const verdictOf = (tenant, kwh, { from = 0, seconds = 3600, index = 10 } = {}) => {
    const body = { ...energyBody(kwh, { seconds }), ...(tenant === null ? {} : { tenant }) };
    body.start = new Date(Date.parse('2026-11-05T00:00:00Z') + from * 1000).toISOString().replace('.000Z', 'Z');
    body.end = new Date(Date.parse('2026-11-05T00:00:00Z') + (from + seconds) * 1000).toISOString().replace('.000Z', 'Z');
    try {
      a.checkFleet(index, 'energy', body, `entry ${index}`);
      return 'PASS';
    } catch (e) {
      return `${e.reason}${fieldOf(e.message) ? ` ${fieldOf(e.message)}` : ''}`;
    }
  };
  // 1.5 × 700 W × 3600 s + 5 % = 1.1025 kWh
  eq(verdictOf('u', '1.1025'), 'PASS', "u at its leases' bound");
  eq(verdictOf('u', '1.102500001'), 'energy_over_bound body.kwh', 'a billionth above it');
  eq(verdictOf('u', '6.615'), 'energy_over_bound body.kwh', "the node's whole draw billed to u");
  eq(verdictOf('u', '0.735', { from: 1800 }), 'PASS', 'across the end of U2 only U1 counts: 0.735 kWh');
  eq(verdictOf('u', '0.735000001', { from: 1800 }), 'energy_over_bound body.kwh', 'above U1 alone');
  eq(verdictOf('u', '0.1', { from: 5400 }), 'outside_lease_term body.start', 'past U1 too');
  eq(verdictOf('v', '1.47'), 'PASS', "v's 2 counted H100s");
  eq(verdictOf('v', '1.470000001'), 'energy_over_bound body.kwh', 'above them');
  eq(verdictOf('w', '0.001'), 'lease_not_on_node body.tenant', 'a tenant with no lease on n1');
  eq(verdictOf('v', '0.001', { index: 6 }), 'lease_not_on_node body.tenant', 'a lease registered at the record\'s index');
  eq(verdictOf(null, '6.615'), 'PASS', "no tenant: the node's bound");
  eq(verdictOf(null, '6.615001'), 'energy_over_bound body.kwh', 'above it');
  // Signed here, checked by the console and the binary alike: t leases only GPU 0 of n1.
  const one = { ...LEASE_L, nodes: [{ gpus: [0], node: 'n1' }] };
  const bundleVerdict = async (c) => {
    const r = await verify.verifyBundle({ bundle: c.bundle, logKey: c.logKey });
    if (bin) eq(binaryVerdict(['--bundle', writeTmp('energy.ndjson', c.bundle), '--log-key', c.logKey]), verdict(r), 'gpuledger verify');
    return r.ok ? 'PASS' : `${r.failure.reason} (${r.failure.item})`;
  };
  eq(await bundleVerdict(await fleetCase(async ({ node }) => { await node('energy', { ...energyBody('0.735'), tenant: 't' }); }, { lease: one })), 'PASS', "t's one GPU at the bound");
  eq(await bundleVerdict(await fleetCase(async ({ node }) => { await node('energy', { ...energyBody('0.735000001'), tenant: 't' }); }, { lease: one })), 'energy_over_bound (entry 5)', "t's one GPU above it");
});

// ---------------------------------------------------------------- leases (§5.8; §6.7, leases; crates/core/src/fleet.rs)

/** The LeafError message of checkEnvelope on a lease_registered body, or 'PASS'. */
async function leaseBodyVerdict(body) {
  const env = { v: 3, kind: 'lease_registered', signer: 'ledger', key_id: '0123456789abcdef', seq: 1, body, sig: `${'A'.repeat(86)}==` };
  try {
    await checkEnvelope(env, 'gpuledger.test/fleet');
    return 'PASS';
  } catch (e) {
    return e.message;
  }
}

await test('leases: a lease_registered body is checked as record.rs checks it (LeaseRegistered::check, lease_nodes)', async () => {
  // §5.8's example.
  const example = { class: 'on_demand', from: '2026-11-01T00:00:00Z', lease: 'L-acme-1', nodes: [{ gpus: [0, 1, 2, 3], node: 'n1' }, { gpus: [6], node: 'n1', share: '0.5' }, { count: '4', gpu_model: 'H100-SXM-80G', node: 'n2' }], tenant: 'acme', to: '2027-11-01T00:00:00Z' };
  const withItems = (...nodes) => ({ ...example, nodes });
  const without = (o, k) => Object.fromEntries(Object.entries(o).filter(([m]) => m !== k));
  const items = (n) => Array.from({ length: n }, (_, i) => ({ gpus: [0], node: `n${i}` }));
  const accepted = [
    ['the example of §5.8', example],
    ['open-ended', without(example, 'to')],
    ['a term of one second', { ...example, to: '2026-11-01T00:00:01Z' }],
    ['64 items', withItems(...items(64))],
    ['64 GPUs of a node', withItems({ gpus: Array.from({ length: 64 }, (_, i) => i), node: 'n1' })],
    ['the highest u32 index', withItems({ gpus: [4294967295], node: 'n1' })],
    ['a share just above 0', withItems({ gpus: [0], node: 'n1', share: '0.000000001' })],
    ['a share just below 1', withItems({ gpus: [0], node: 'n1', share: '0.999999999' })],
    ['a count of 64', withItems({ count: '64', gpu_model: 'H100', node: 'n1' })],
    ['a count of 512 (64 GPUs × 8 MIG instances)', withItems({ count: '512', gpu_model: 'H100/1g.10gb', node: 'n1' })],
    ['a count above 64', withItems({ count: '64.000000001', gpu_model: 'H100/1g.10gb', node: 'n1' })],
    ['a fractional count', withItems({ count: '0.5', gpu_model: 'H100', node: 'n1' })],
    ['the same GPU index on two nodes', withItems({ gpus: [0], node: 'n1' }, { gpus: [0], node: 'n2' })],
    ['GPUs of a node in two items', withItems({ gpus: [0, 1], node: 'n1' }, { gpus: [2], node: 'n1', share: '0.5' })],
    ['the same model counted on two nodes', withItems({ count: '1', gpu_model: 'H100', node: 'n1' }, { count: '1', gpu_model: 'H100', node: 'n2' })],
    ['GPUs and a count of one node', withItems({ gpus: [0], node: 'n1' }, { count: '1', gpu_model: 'H100', node: 'n1' })],
    ['two models counted on one node', withItems({ count: '1', gpu_model: 'H100', node: 'n1' }, { count: '1', gpu_model: 'L40S', node: 'n1' })],
    ['every class', { ...example, class: 'spot' }],
  ];
  for (const [what, body] of accepted) eq(await leaseBodyVerdict(body), 'PASS', what);
  const refused = [
    ['no from', without(example, 'from'), /has no member from/],
    ['no nodes', without(example, 'nodes'), /has no member nodes/],
    ['a member more', { ...example, region: 'r1' }, /unknown member region/],
    ['a null to', { ...example, to: null }, /body\.to is not a string/],
    ['nodes not an array', { ...example, nodes: { node: 'n1' } }, /body\.nodes is not an array/],
    ['an item that is a string', withItems('n1'), /body\.nodes\[0\] is not an object/],
    ['an item member more', withItems({ gpus: [0], node: 'n1', mig: '1g.10gb' }), /body\.nodes\[0\] has an unknown member mig/],
    ['an item without a node', withItems({ gpus: [0] }), /body\.nodes\[0\] has no member node/],
    ['gpus not an array', withItems({ gpus: 0, node: 'n1' }), /body\.nodes\[0\]\.gpus is not an array/],
    ['a GPU index as a string', withItems({ gpus: ['0'], node: 'n1' }), /body\.nodes\[0\]\.gpus\[0\] is not an integer/],
    ['a negative GPU index', withItems({ gpus: [-1], node: 'n1' }), /body\.nodes\[0\]\.gpus\[0\] is not an integer/],
    ['a GPU index above u32', withItems({ gpus: [4294967296], node: 'n1' }), /body\.nodes\[0\]\.gpus\[0\] is not an integer/],
    ['a count as a number', withItems({ count: 4, gpu_model: 'H100', node: 'n1' }), /body\.nodes\[0\]\.count is not a string/],
    ['an unknown class', { ...example, class: 'preemptible' }, /body\.class must be/],
    ['the reserved id as the lease', { ...example, lease: 'ledger' }, /reserved/],
    ['from not a timestamp', { ...example, from: '2026-11-01' }, /body\.from is not a timestamp/],
    ['to not a timestamp', { ...example, to: '2027-02-30T00:00:00Z' }, /body\.to is not a timestamp/],
    ['to equal to from', { ...example, to: example.from }, /^empty_interval: body\.to/],
    ['to before from', { ...example, to: '2026-10-31T23:59:59Z' }, /^empty_interval: body\.to/],
    ['no item', withItems(), /^invalid_field: body\.nodes/],
    ['65 items', withItems(...items(65)), /^quantity_out_of_range: body\.nodes/],
    ['a node that is no identifier', withItems({ gpus: [0], node: 'n 1' }), /body\.nodes\[0\]\.node is not an identifier/],
    ['the reserved id as a node', withItems({ gpus: [0], node: 'ledger' }), /reserved/],
    ['no GPU', withItems({ gpus: [], node: 'n1' }), /^quantity_out_of_range: body\.nodes\[0\]\.gpus/],
    ['65 GPUs', withItems({ gpus: Array.from({ length: 65 }, (_, i) => i), node: 'n1' }), /^quantity_out_of_range: body\.nodes\[0\]\.gpus/],
    ['a GPU listed twice in an item', withItems({ gpus: [1, 1], node: 'n1' }), /^invalid_field: body\.nodes\[0\]\.gpus: GPUs are listed by strictly increasing/],
    ['GPUs decreasing', withItems({ gpus: [2, 1], node: 'n1' }), /^invalid_field: body\.nodes\[0\]\.gpus: GPUs are listed by strictly increasing/],
    ['a GPU of a node in two items', withItems({ gpus: [0, 1], node: 'n1' }, { gpus: [1], node: 'n1', share: '0.5' }), /^invalid_field: body\.nodes\[1\]\.gpus: GPU 1 of n1 is listed twice/],
    ['a model of a node counted twice', withItems({ count: '1', gpu_model: 'H100', node: 'n1' }, { count: '2', gpu_model: 'H100', node: 'n1' }), /^invalid_field: body\.nodes\[1\]\.gpu_model/],
    ['a share of 0', withItems({ gpus: [0], node: 'n1', share: '0' }), /^quantity_out_of_range: body\.nodes\[0\]\.share/],
    ['a share of 1 (a whole GPU has none)', withItems({ gpus: [0], node: 'n1', share: '1' }), /^quantity_out_of_range: body\.nodes\[0\]\.share/],
    ['a share above 1', withItems({ gpus: [0], node: 'n1', share: '1.5' }), /^quantity_out_of_range: body\.nodes\[0\]\.share/],
    ['a share not canonical', withItems({ gpus: [0], node: 'n1', share: '0.50' }), /body\.nodes\[0\]\.share is not a canonical decimal/],
    ['a count of 0', withItems({ count: '0', gpu_model: 'H100', node: 'n1' }), /^quantity_out_of_range: body\.nodes\[0\]\.count must be above 0/],
    ['a count above 512 (64 GPUs × 8 MIG instances)', withItems({ count: '512.000000001', gpu_model: 'H100', node: 'n1' }), /^quantity_out_of_range: body\.nodes\[0\]\.count/],
    ['a negative count', withItems({ count: '-1', gpu_model: 'H100', node: 'n1' }), /body\.nodes\[0\]\.count is not a canonical decimal/],
    ['a model that is no identifier', withItems({ count: '1', gpu_model: 'H100 SXM', node: 'n1' }), /body\.nodes\[0\]\.gpu_model is not an identifier/],
    ['both forms', withItems({ count: '1', gpu_model: 'H100', gpus: [0], node: 'n1' }), /^invalid_field: body\.nodes\[0\] covers either/],
    ['neither form', withItems({ node: 'n1' }), /^invalid_field: body\.nodes\[0\] covers either/],
    ['a share without gpus', withItems({ node: 'n1', share: '0.5' }), /^invalid_field: body\.nodes\[0\] covers either/],
    ['a share with a count', withItems({ count: '1', gpu_model: 'H100', node: 'n1', share: '0.5' }), /^invalid_field: body\.nodes\[0\] covers either/],
    ['a model without a count', withItems({ gpu_model: 'H100', node: 'n1' }), /^invalid_field: body\.nodes\[0\] covers either/],
    ['a count without a model', withItems({ count: '1', node: 'n1' }), /^invalid_field: body\.nodes\[0\] covers either/],
    ['gpus with a count', withItems({ count: '1', gpus: [0], node: 'n1' }), /^invalid_field: body\.nodes\[0\] covers either/],
  ];
  for (const [what, body, want] of refused) {
    const got = await leaseBodyVerdict(body);
    assert(want.test(got), `${what}: ${got}`);
  }
});

/** Seconds after 2026-11-05T00:00:00Z as a timestamp (fleet.rs's `t`). */
const at = (s) => new Date(Date.parse('2026-11-05T00:00:00Z') + s * 1000).toISOString().replace('.000Z', 'Z');
/** Lease `id` of tenant t over `nodes` for [from, to) (seconds after 2026-11-05; to null: open-ended). */
const leaseOf = (id, from, to, nodes) => ({ class: 'on_demand', from: at(from), lease: id, nodes, tenant: 't', ...(to === null ? {} : { to: at(to) }) });
/** Whole GPUs (or a share of each) of a node. */
const gpusItem = (node, gpus, share) => ({ gpus, node, ...(share ? { share } : {}) });
/** Up to `count` GPUs of `model` of a node. */
const countItem = (node, model, count) => ({ count, gpu_model: model, node });
/** Usage under `lease` (null: none) of `count` GPUs of `model` on `node` for [from, to). */
const usageUnder = (lease, node, model, count, from, to) => usageBody(count, { lease, node, model, from, seconds: to - from });
const N2 = { ...N1, node: 'n2', gpus: N1.gpus.map((g) => ({ ...g, uuid: g.uuid.replace('n1', 'n2') })) };

/** The verdict of Admission.checkFleet at `index` (and the failure's message). */
const fleetVerdict = (a, kind, body, index = 10) => {
  try {
    a.checkFleet(index, kind, body, `entry ${index}`);
    return ['PASS', ''];
  } catch (e) {
    if (!e.reason) throw e;
    return [e.reason, e.message];
  }
};

await test('leases: Admission binds usage to leases and never overbooks (fleet.rs leases_bind_usage_to_gpus_and_never_overbook)', async () => {
  const a = new Admission();
  a.apply(1, { kind: 'node_registered', body: N1 });
  a.apply(2, { kind: 'node_registered', body: N2 });
  // GPUs 0-3 of n1, open-ended.
  a.apply(4, { kind: 'lease_registered', body: leaseOf('L', 0, null, [gpusItem('n1', [0, 1, 2, 3])]) });
  // Half of GPUs 4 and 5 of n1 (MIG or fractional slices), for 2 h.
  a.apply(5, { kind: 'lease_registered', body: leaseOf('S', 0, 7200, [gpusItem('n1', [4, 5], '0.5')]) });
  // Any 4 H100s of n2 for [1 h, 3 h).
  a.apply(6, { kind: 'lease_registered', body: leaseOf('P', 3600, 10800, [countItem('n2', 'H100', '4')]) });
  // [name, body, reason, the failing field (Rust's Rejection field, at the head of the message)]
  for (const [name, body, want, field] of [
    ["the lease's 4 GPUs", usageUnder('L', 'n1', 'H100', '4', 0, 3600), 'PASS'],
    ['one GPU more than the lease', usageUnder('L', 'n1', 'H100', '4.000001', 0, 3600), 'over_capacity', 'body.gpu_count'],
    ['no lease', usageUnder(null, 'n1', 'H100', '1', 0, 3600), 'lease_not_on_node', 'body.lease'],
    ['a model the lease lacks on the node', usageUnder('L', 'n1', 'L40S', '1', 0, 3600), 'lease_not_on_node', 'body.lease'],
    ['another node', usageUnder('L', 'n2', 'H100', '1', 0, 3600), 'lease_not_on_node', 'body.lease'],
    ['two half GPUs make one', usageUnder('S', 'n1', 'H100', '1', 0, 3600), 'PASS'],
    ['more than the halves', usageUnder('S', 'n1', 'H100', '1.5', 0, 3600), 'over_capacity', 'body.gpu_count'],
    ["after the slices' term", usageUnder('S', 'n1', 'H100', '1', 7000, 7201), 'outside_lease_term', 'body.end'],
    ['any 4 of n2', usageUnder('P', 'n2', 'H100', '4', 3600, 7200), 'PASS'],
    ["up to the term's end", usageUnder('P', 'n2', 'H100', '4', 7200, 10800), 'PASS'],
    ['before the term', usageUnder('P', 'n2', 'H100', '1', 3599, 4000), 'outside_lease_term', 'body.start'],
    ['past the term', usageUnder('P', 'n2', 'H100', '1', 10000, 10801), 'outside_lease_term', 'body.end'],
    // The node's own bound comes first: 1,024 GPUs on a 9-GPU node.
    ['1,024 GPUs', usageUnder('L', 'n1', 'H100', '1024', 0, 60), 'over_capacity', 'body.gpu_count is 1024, but node n1 has 8'],
  ]) {
    const [got, message] = fleetVerdict(a, 'gpu_usage', body);
    eq(got, want, name);
    if (field) assert(message.startsWith(field), `${name}: the message names ${field}: ${message}`);
  }
  // Over the lease, not the node: the message says what the lease covers, exactly.
  assert(fleetVerdict(a, 'gpu_usage', usageUnder('S', 'n1', 'H100', '1.5', 0, 3600))[1].includes('S covers 1 H100 GPUs of node n1'), 'the lease in the message');
  const register = (l) => fleetVerdict(a, 'lease_registered', l);
  for (const [name, body, want, field] of [
    ['the free GPUs 6 and 7', leaseOf('F', 0, null, [gpusItem('n1', [6, 7])]), 'PASS'],
    ['a GPU leased whole already', leaseOf('F', 0, null, [gpusItem('n1', [3])]), 'lease_overbooked', 'body.nodes'],
    ['the other half of a sliced GPU', leaseOf('F', 0, null, [gpusItem('n1', [4], '0.5')]), 'PASS'],
    ['more than the other half', leaseOf('F', 0, null, [gpusItem('n1', [4], '0.500001')]), 'lease_overbooked', 'body.nodes'],
    ["more than half, from the slices' end", leaseOf('F', 7200, null, [gpusItem('n1', [4], '0.6')]), 'PASS'],
    ['more than half, a second before it', leaseOf('F', 7199, null, [gpusItem('n1', [4], '0.6')]), 'lease_overbooked', 'body.nodes'],
    // n1's H100s: 4 (L) + 2 × 0.5 (S) leased; 3 more fill it, 4 overbook it until S ends.
    ['exactly full by count', leaseOf('F', 0, null, [countItem('n1', 'H100', '3')]), 'PASS'],
    ['one GPU more by count', leaseOf('F', 0, null, [countItem('n1', 'H100', '4')]), 'lease_overbooked', 'body.nodes'],
    ['one more, once the slices end', leaseOf('F', 7200, null, [countItem('n1', 'H100', '4')]), 'PASS'],
    // n2: P holds 4 of 8 during [1 h, 3 h).
    ['5 ending where P starts', leaseOf('F', 0, 3600, [countItem('n2', 'H100', '5')]), 'PASS'],
    ['5 overlapping P by a second', leaseOf('F', 0, 3601, [countItem('n2', 'H100', '5')]), 'lease_overbooked', 'body.nodes'],
    ['5 starting inside P', leaseOf('F', 10799, null, [countItem('n2', 'H100', '5')]), 'lease_overbooked', 'body.nodes'],
    ['5 starting where P ends', leaseOf('F', 10800, null, [countItem('n2', 'H100', '5')]), 'PASS'],
    ['9 of an 8-H100 node on its own', leaseOf('F', 20000, null, [countItem('n2', 'H100', '9')]), 'lease_overbooked', 'body.nodes'],
    ['a GPU the node lacks', leaseOf('F', 0, null, [gpusItem('n1', [9])]), 'unknown_gpu', 'body.nodes[0].gpus'],
    ['a model the node lacks', leaseOf('F', 0, null, [countItem('n1', 'A100', '1')]), 'unknown_gpu_model', 'body.nodes[0].gpu_model'],
    ['an unregistered node', leaseOf('F', 0, null, [countItem('n9', 'H100', '1')]), 'unknown_node', 'body.nodes[0].node'],
    // Beyond the Rust test: P starts inside an open-ended term from before it; items of one
    // lease add up; the item rules apply item by item, before any overbooking.
    ['5 open-ended from before P', leaseOf('F', 0, null, [countItem('n2', 'H100', '5')]), 'lease_overbooked', 'body.nodes'],
    ["GPUs and a count of one lease over n2's 8", leaseOf('F', 20000, null, [gpusItem('n2', [0, 1, 2, 3]), countItem('n2', 'H100', '5')]), 'lease_overbooked', 'body.nodes'],
    ["the L40S of n1 by index and by count", leaseOf('F', 0, null, [gpusItem('n1', [8], '0.5'), countItem('n1', 'L40S', '0.5')]), 'PASS'],
    ['the L40S of n1, a billionth more', leaseOf('F', 0, null, [gpusItem('n1', [8], '0.5'), countItem('n1', 'L40S', '0.500000001')]), 'lease_overbooked', 'body.nodes'],
    ['a second item on an unregistered node', leaseOf('F', 0, null, [gpusItem('n1', [6]), gpusItem('n9', [0])]), 'unknown_node', 'body.nodes[1].node'],
    ['an overbooking item before an unknown GPU', leaseOf('F', 0, null, [gpusItem('n1', [0]), gpusItem('n2', [9])]), 'unknown_gpu', 'body.nodes[1].gpus'],
    // Item by item (fleet.rs), not rule by rule: item 0's GPU before item 1's node.
    ["an unknown GPU before another item's unregistered node", leaseOf('F', 0, null, [gpusItem('n1', [9]), gpusItem('n9', [0])]), 'unknown_gpu', 'body.nodes[0].gpus'],
    ["an unknown model before another item's unknown GPU", leaseOf('F', 0, null, [countItem('n2', 'A100', '1'), gpusItem('n1', [9])]), 'unknown_gpu_model', 'body.nodes[0].gpu_model'],
    ['n1 overbooked, n2 not', leaseOf('F', 0, null, [countItem('n2', 'H100', '1'), gpusItem('n1', [0])]), 'lease_overbooked', 'body.nodes'],
    // A lease is not counted against itself (registered twice is the parties' already_registered).
    ['L again', leaseOf('L', 0, null, [gpusItem('n1', [0, 1, 2, 3])]), 'PASS'],
  ]) {
    const [got, message] = register(body);
    eq(got, want, name);
    if (field) assert(message.startsWith(field), `${name}: the message names ${field}: ${message}`);
  }
  // A lease registered after the record does not count for it: left to the parties rule (unknown_lease).
  eq(fleetVerdict(a, 'gpu_usage', usageUnder('P', 'n2', 'H100', '1', 3600, 4000), 6)[0], 'PASS', 'P at the record\'s index');
  // Nor does it count against a lease registered before it.
  eq(register(leaseOf('F', 3600, null, [countItem('n2', 'H100', '8')]))[0], 'lease_overbooked', 'P counts at 10');
  eq(fleetVerdict(a, 'lease_registered', leaseOf('F', 3600, null, [countItem('n2', 'H100', '8')]), 6)[0], 'PASS', 'P does not count at 6');
});

await test('leases: overbooking is evaluated where terms start and end, half-open, with exact shares', async () => {
  const a = new Admission();
  a.apply(2, { kind: 'node_registered', body: N2 });
  // 6 of n2's H100s during [0, 1 h) and again during [2 h, 3 h).
  a.apply(3, { kind: 'lease_registered', body: leaseOf('A', 0, 3600, [countItem('n2', 'H100', '6')]) });
  a.apply(4, { kind: 'lease_registered', body: leaseOf('B', 7200, 10800, [countItem('n2', 'H100', '6')]) });
  // GPU 0 of n2: 0.34 during [0, 100 s), 0.56 during [50 s, 200 s).
  a.apply(5, { kind: 'lease_registered', body: leaseOf('G1', 0, 100, [gpusItem('n2', [0], '0.34')]) });
  a.apply(6, { kind: 'lease_registered', body: leaseOf('G2', 50, 200, [gpusItem('n2', [0], '0.56')]) });
  // G1 and G2 lease 0.9 of an H100 during [50 s, 100 s): 6.9 of n2's 8 there.
  for (const [name, body, want] of [
    ['1.1 open-ended beside all of them', leaseOf('F', 0, null, [countItem('n2', 'H100', '1.1')]), 'PASS'],
    ['1.1 + a billionth', leaseOf('F', 0, null, [countItem('n2', 'H100', '1.100000001')]), 'lease_overbooked'],
    ['2 from where G1 and G2 end', leaseOf('F', 200, null, [countItem('n2', 'H100', '2')]), 'PASS'],
    ['2 from a second before G2 ends', leaseOf('F', 199, null, [countItem('n2', 'H100', '2')]), 'lease_overbooked'],
    ['8 between A and B', leaseOf('F', 3600, 7200, [countItem('n2', 'H100', '8')]), 'PASS'],
    ['3 from a second before A ends', leaseOf('F', 3599, 7200, [countItem('n2', 'H100', '3')]), 'lease_overbooked'],
    ['3 to a second after B starts', leaseOf('F', 3600, 7201, [countItem('n2', 'H100', '3')]), 'lease_overbooked'],
    ['3 over both, open-ended', leaseOf('F', 3600, null, [countItem('n2', 'H100', '3')]), 'lease_overbooked'],
    // 0.34 + 0.56 + 0.1 is 1 exactly (in binary floating point it is above 1).
    ['the rest of GPU 0 while both slices hold it', leaseOf('F', 50, 100, [gpusItem('n2', [0], '0.1')]), 'PASS'],
    ['the rest of GPU 0, and a billionth more', leaseOf('F', 50, 100, [gpusItem('n2', [0], '0.100000001')]), 'lease_overbooked'],
    ["the rest of GPU 0 over both slices' terms", leaseOf('F', 0, 300, [gpusItem('n2', [0], '0.1')]), 'PASS'],
    ["0.44 of GPU 0 from G1's end", leaseOf('F', 100, 300, [gpusItem('n2', [0], '0.44')]), 'PASS'],
    ["0.44 of GPU 0 from a second before G1's end", leaseOf('F', 99, 300, [gpusItem('n2', [0], '0.44')]), 'lease_overbooked'],
    ['0.66 of GPU 0 until G2 starts', leaseOf('F', 0, 50, [gpusItem('n2', [0], '0.66')]), 'PASS'],
    ['0.66 of GPU 0 until a second after G2 starts', leaseOf('F', 0, 51, [gpusItem('n2', [0], '0.66')]), 'lease_overbooked'],
  ]) {
    eq(fleetVerdict(a, 'lease_registered', body)[0], want, name);
  }
  assert(0.34 + 0.56 + 0.1 > 1, 'the floating-point sum is above 1');
  const [, message] = fleetVerdict(a, 'lease_registered', leaseOf('F', 0, null, [countItem('n2', 'H100', '3')]));
  eq(message, 'body.nodes would lease 9.34 H100 GPUs of node n2 at 2026-11-05T00:00:00Z, which has 8, counting its other leases', 'the message');
});

await test('leases: bundles signed here: lease registrations are context, and the lease rules hold in them', async () => {
  const verdictOf = async (c) => {
    const r = await verify.verifyBundle({ bundle: c.bundle, logKey: c.logKey });
    if (bin) {
      eq(binaryVerdict(['--bundle', writeTmp('lease.ndjson', c.bundle), '--log-key', c.logKey]), verdict(r), 'gpuledger verify');
      compareItems(r, 'lease bundle');
    }
    return r.ok ? 'PASS' : `${r.failure.reason} (${r.failure.item})`;
  };
  const usage = (count, opts) => async ({ node }) => { await node('gpu_usage', usageBody(count, opts)); };
  const lease = (nodes, more = {}) => ({ ...LEASE_L, nodes, ...more });
  // 0 log_policy, 1 tenant_registered t, 2 node_registered n1, 3 node-a's key, 4 the lease, then more
  for (const [name, c, want] of [
    ['usage under a lease of all of n1', await fleetCase(usage('8')), 'PASS'],
    ['usage without a lease', await fleetCase(usage('1', { lease: null })), 'lease_not_on_node (entry 5)'],
    ['usage under an unregistered lease', await fleetCase(usage('1', { lease: 'X' })), 'unknown_lease (entry 5)'],
    ['usage without a lease in a log without any', await fleetCase(usage('1', { lease: null }), { lease: null }), 'lease_not_on_node (entry 4)'],
    ['usage above the node, under a lease', await fleetCase(usage('9')), 'over_capacity (entry 5)'],
    ['usage above the lease, within the node', await fleetCase(usage('4.500001'), { lease: lease([gpusItem('n1', [0, 1, 2, 3]), gpusItem('n1', [4], '0.5')]) }), 'over_capacity (entry 5)'],
    ['usage of the lease, exactly', await fleetCase(usage('4.5'), { lease: lease([gpusItem('n1', [0, 1, 2, 3]), gpusItem('n1', [4], '0.5')]) }), 'PASS'],
    ['usage of a model the lease lacks', await fleetCase(usage('1', { model: 'L40S' }), { lease: lease([countItem('n1', 'H100', '8')]) }), 'lease_not_on_node (entry 5)'],
    ['usage before the term', await fleetCase(usage('1'), { lease: { ...LEASE_L, from: '2026-11-05T00:00:01Z' } }), 'outside_lease_term (entry 5)'],
    ['usage after the term', await fleetCase(usage('1'), { lease: { ...LEASE_L, to: '2026-11-05T00:59:59Z' } }), 'outside_lease_term (entry 5)'],
    ['usage up to the term\'s end', await fleetCase(usage('1'), { lease: { ...LEASE_L, to: '2026-11-05T01:00:00Z' } }), 'PASS'],
    ['a lease of a GPU n1 lacks', await fleetCase(async () => {}, { lease: lease([gpusItem('n1', [0, 9])]) }), 'unknown_gpu (entry 4)'],
    ['a lease of a model n1 lacks', await fleetCase(async () => {}, { lease: lease([countItem('n1', 'A100', '1')]) }), 'unknown_gpu_model (entry 4)'],
    ['a lease of an unregistered node', await fleetCase(async () => {}, { lease: lease([countItem('n9', 'H100', '1')]) }), 'unknown_node (entry 4)'],
    ['a lease of more H100s than n1 has', await fleetCase(async () => {}, { lease: lease([countItem('n1', 'H100', '8.5')]) }), 'lease_overbooked (entry 4)'],
    ["a lease's unknown GPU before another item's unregistered node", await fleetCase(async () => {}, { lease: lease([gpusItem('n1', [9]), gpusItem('n9', [0])]) }), 'unknown_gpu (entry 4)'],
    ['a lease whose whole GPU is a share (leaf_invalid)', await fleetCase(async () => {}, { lease: lease([gpusItem('n1', [0], '1')]) }), 'leaf_invalid (entry 4)'],
    ['a lease whose term ends where it starts', await fleetCase(async () => {}, { lease: { ...LEASE_L, to: LEASE_L.from } }), 'leaf_invalid (entry 4)'],
    ['a second lease overbooking the first', await fleetCase(async ({ ledger }) => { await ledger('lease_registered', { ...LEASE_L, lease: 'L2', nodes: [gpusItem('n1', [8], '0.5')] }); }), 'lease_overbooked (entry 5)'],
    ['a second lease from where the first ends', await fleetCase(async ({ ledger, node }) => {
      await ledger('lease_registered', { ...LEASE_L, lease: 'L2', from: '2026-11-05T01:00:00Z' });
      await node('gpu_usage', usageBody('8', { lease: 'L', seconds: 3600 }));
      await node('gpu_usage', usageBody('8', { lease: 'L2', from: 3600, seconds: 3600 }));
    }, { lease: { ...LEASE_L, to: '2026-11-05T01:00:00Z' } }), 'PASS'],
    ['usage under the second lease before its term', await fleetCase(async ({ ledger, node }) => {
      await ledger('lease_registered', { ...LEASE_L, lease: 'L2', from: '2026-11-05T01:00:00Z' });
      await node('gpu_usage', usageBody('8', { lease: 'L2', from: 3599, seconds: 60 }));
    }, { lease: { ...LEASE_L, to: '2026-11-05T01:00:00Z' } }), 'outside_lease_term (entry 6)'],
    ['a lease registered twice', await fleetCase(async ({ ledger }) => { await ledger('lease_registered', { ...LEASE_L, nodes: [gpusItem('n1', [0])] }); }), 'already_registered (entry 5)'],
    ["usage under another tenant's lease that does not cover it: the parties first", await fleetCase(async ({ ledger, node }) => {
      await ledger('tenant_registered', { tenant: 't2' });
      await ledger('lease_registered', { ...LEASE_L, lease: 'M', tenant: 't2', nodes: [gpusItem('n1', [0])], from: '2026-12-01T00:00:00Z' });
      await node('gpu_usage', usageBody('1', { lease: 'M', model: 'L40S' }));
    }, { lease: { ...LEASE_L, nodes: [gpusItem('n1', [1, 2, 3, 4, 5, 6, 7, 8])] } }), 'lease_tenant_mismatch (entry 7)'],
  ]) {
    eq(await verdictOf(c), want, name);
  }
});

// ---------------------------------------------------------------- node updates, MIG and regions (§5.16, §5.18; §6.7, fleet; crates/core/src/fleet.rs, fleet/inventory.rs)
//
// A ledger-written node_updated entry adds capacity to a registered node: GPUs under new
// indexes, a replaced board (an index the node has, same model and partition, a new UUID), a
// higher power limit. Every fleet question is answered as of the entry's index: a bundle's
// context may hold an update later than a record, and the record is judged by the node as it
// was. A GPU partitioned into MIG instances is units of `<model>/<profile>`, not of its model.

/** The LeafError message of checkEnvelope on a `kind` body, or 'PASS'. */
async function bodyVerdict(kind, body) {
  const env = { v: 3, kind, signer: 'ledger', key_id: '0123456789abcdef', seq: 1, body, sig: `${'A'.repeat(86)}==` };
  try {
    await checkEnvelope(env, 'gpuledger.test/fleet');
    return 'PASS';
  } catch (e) {
    return e.message;
  }
}

/** A MIG partition of `slices` slices: [[profile, count], …]. */
const mig = (slices, ...instances) => ({ instances: instances.map(([profile, count]) => ({ count, profile })), slices });

/**
 * m1 (region r1, 700 W a GPU): GPU 0 an H100 in 3 × 1g.10gb + 2 × 2g.20gb of 7 slices; GPU 1
 * an H100 in 7 × 1g.10gb; GPUs 2 and 3 whole H100s; GPU 4 an H100 in 2 × 1g.10gb + 1 × 2g.20gb
 * of 7 slices (a node's partitioned GPUs of one model have the same slices). Units: H100 2,
 * H100/1g.10gb 12, H100/2g.20gb 3. A 1g.10gb instance is 120 of 840 units of a GPU, a 2g.20gb 240.
 */
const M1 = {
  node: 'm1', region: 'r1', max_watts_per_gpu: '700',
  gpus: [
    { index: 0, uuid: 'GPU-m1-0', model: 'H100', mig: mig(7, ['1g.10gb', 3], ['2g.20gb', 2]) },
    { index: 1, uuid: 'GPU-m1-1', model: 'H100', mig: mig(7, ['1g.10gb', 7]) },
    { index: 2, uuid: 'GPU-m1-2', model: 'H100' },
    { index: 3, uuid: 'GPU-m1-3', model: 'H100' },
    { index: 4, uuid: 'GPU-m1-4', model: 'H100', mig: mig(7, ['1g.10gb', 2], ['2g.20gb', 1]) },
  ],
};

await test('node updates: node_registered with MIG partitions, and node_updated, are checked as record.rs checks them', async () => {
  const gpus = (n, from = 0, prefix = 'GPU-') => Array.from({ length: n }, (_, i) => ({ index: from + i, uuid: `${prefix}${from + i}`, model: 'H100' }));
  const withGpu = (g) => ({ ...N1, gpus: [{ index: 0, uuid: 'GPU-0', model: 'H100', ...g }] });
  // node_registered: the mig member.
  for (const [what, body] of [
    ['m1', M1],
    ['7 × 1g.10gb of 7', withGpu({ mig: mig(7, ['1g.10gb', 7]) })],
    ['one 7g.80gb', withGpu({ mig: mig(7, ['7g.80gb', 1]) })],
    ['8 slices, 8 profiles', withGpu({ mig: mig(8, ...['1g.1gb', '1g.2gb', '1g.3gb', '1g.4gb', '1g.5gb', '1g.6gb', '1g.7gb', '1g.8gb'].map((p) => [p, 1])) })],
    ['a profile of 9999 GB', withGpu({ mig: mig(1, ['1g.9999gb', 1]) })],
    ['two H100s partitioned alike, other profiles', { ...N1, gpus: [{ index: 0, uuid: 'GPU-0', model: 'H100', mig: mig(7, ['1g.10gb', 7]) }, { index: 1, uuid: 'GPU-1', model: 'H100', mig: mig(7, ['3g.40gb', 2]) }] }],
    ['a whole H100 beside a partitioned one', { ...N1, gpus: [{ index: 0, uuid: 'GPU-0', model: 'H100', mig: mig(7, ['1g.10gb', 7]) }, { index: 1, uuid: 'GPU-1', model: 'H100' }] }],
    ['other slices on another model', { ...N1, gpus: [{ index: 0, uuid: 'GPU-0', model: 'H100', mig: mig(7, ['1g.10gb', 7]) }, { index: 1, uuid: 'GPU-1', model: 'A30', mig: mig(4, ['1g.6gb', 4]) }] }],
    ['fewer instances than slices', withGpu({ mig: mig(7, ['3g.40gb', 1]) })],
    ['profiles by byte order (10gb before 5gb)', withGpu({ mig: mig(7, ['1g.10gb', 1], ['1g.5gb', 1]) })],
  ]) eq(await nodeBodyVerdict(body), 'PASS', what);
  const long = 'M'.repeat(121);
  for (const [what, body, want] of [
    ['a null mig', withGpu({ mig: null }), /body\.gpus\[0\]\.mig is not an object/],
    ['a mig member unknown', withGpu({ mig: { ...mig(7, ['1g.10gb', 1]), memory: 80 } }), /body\.gpus\[0\]\.mig has an unknown member memory/],
    ['a mig without instances', withGpu({ mig: { slices: 7 } }), /body\.gpus\[0\]\.mig has no member instances/],
    ['slices as a string', withGpu({ mig: { instances: [], slices: '7' } }), /body\.gpus\[0\]\.mig\.slices is not an integer/],
    ['a count as a string', withGpu({ mig: mig(7, ['1g.10gb', '1']) }), /body\.gpus\[0\]\.mig\.instances\[0\]\.count is not an integer/],
    ['an instance member unknown', withGpu({ mig: { instances: [{ count: 1, profile: '1g.10gb', uuid: 'MIG-0' }], slices: 7 } }), /instances\[0\] has an unknown member uuid/],
    ['0 slices', withGpu({ mig: mig(0, ['1g.10gb', 1]) }), /^invalid_field: body\.gpus\[0\]\.mig\.slices/],
    ['9 slices', withGpu({ mig: mig(9, ['1g.10gb', 1]) }), /^invalid_field: body\.gpus\[0\]\.mig\.slices/],
    ['no instances', withGpu({ mig: mig(7) }), /^invalid_field: body\.gpus\[0\]\.mig\.instances/],
    ['9 profiles', withGpu({ mig: mig(8, ...Array.from({ length: 9 }, (_, k) => [`1g.${k + 1}gb`, 1])) }), /^invalid_field: body\.gpus\[0\]\.mig\.instances/],
    ['a profile that is no profile', withGpu({ mig: mig(7, ['1g10gb', 1]) }), /^invalid_field: body\.gpus\[0\]\.mig\.instances\[0\]\.profile is not a MIG profile/],
    ['a profile of 0 slices', withGpu({ mig: mig(7, ['0g.10gb', 1]) }), /instances\[0\]\.profile is not a MIG profile/],
    ['a profile of 9 slices', withGpu({ mig: mig(8, ['9g.10gb', 1]) }), /instances\[0\]\.profile is not a MIG profile/],
    ['a profile of two digits', withGpu({ mig: mig(8, ['10g.10gb', 1]) }), /instances\[0\]\.profile is not a MIG profile/],
    ['a profile of 0 GB', withGpu({ mig: mig(7, ['1g.0gb', 1]) }), /instances\[0\]\.profile is not a MIG profile/],
    ['a GB with a leading zero', withGpu({ mig: mig(7, ['1g.05gb', 1]) }), /instances\[0\]\.profile is not a MIG profile/],
    ['a GB of 5 digits', withGpu({ mig: mig(7, ['1g.10000gb', 1]) }), /instances\[0\]\.profile is not a MIG profile/],
    ['a profile upper-case', withGpu({ mig: mig(7, ['1G.10GB', 1]) }), /instances\[0\]\.profile is not a MIG profile/],
    ['a profile of more slices than the GPU', withGpu({ mig: mig(4, ['7g.80gb', 1]) }), /instances\[0\]\.profile is not a MIG profile .* at most the GPU's 4 slices/],
    ['a profile twice', withGpu({ mig: mig(7, ['1g.10gb', 1], ['1g.10gb', 1]) }), /^invalid_field: body\.gpus\[0\]\.mig\.instances\[1\]\.profile: profiles are listed once each/],
    ['profiles decreasing', withGpu({ mig: mig(7, ['2g.20gb', 1], ['1g.10gb', 1]) }), /instances\[1\]\.profile: profiles are listed once each, by increasing name/],
    ['a count of 0', withGpu({ mig: mig(7, ['1g.10gb', 0]) }), /^invalid_field: body\.gpus\[0\]\.mig\.instances\[0\]\.count/],
    ['a count of 9', withGpu({ mig: mig(8, ['1g.10gb', 9]) }), /^invalid_field: body\.gpus\[0\]\.mig\.instances\[0\]\.count/],
    ['<model>/<profile> no identifier (129 characters)', { ...N1, gpus: [{ index: 0, uuid: 'GPU-0', model: long, mig: mig(7, ['1g.10gb', 1]) }] }, /body\.gpus\[0\]\.mig\.instances\[0\]\.profile is not an identifier/],
    ['more slices than the GPU has', withGpu({ mig: mig(7, ['1g.10gb', 4], ['2g.20gb', 2]) }), /^invalid_field: body\.gpus\[0\]\.mig\.instances take 8 compute slices of the GPU's 7/],
    ['instance by instance: the order before the count', withGpu({ mig: mig(7, ['2g.20gb', 0], ['1g.10gb', 1]) }), /instances\[0\]\.count/],
    ['GPU by GPU: the partition of GPU 0 before the uuid of GPU 1', { ...N1, gpus: [{ index: 0, uuid: 'GPU-0', model: 'H100', mig: mig(7) }, { index: 1, uuid: '', model: 'H100' }] }, /body\.gpus\[0\]\.mig\.instances/],
    ['two H100s of other slices (mig_slices_differ)', { ...N1, gpus: [{ index: 0, uuid: 'GPU-0', model: 'H100', mig: mig(7, ['1g.10gb', 7]) }, { index: 1, uuid: 'GPU-1', model: 'H100', mig: mig(4, ['1g.10gb', 4]) }] },
      /^invalid_field: body\.gpus\[1\]\.mig\.slices: GPU 1 of model H100 has 4 slices, GPU 0 of the node 7: a node's partitioned GPUs of one model have the same slices$/],
    ['the first partitioned GPU of the model differs, past whole ones and other models', { ...N1, gpus: [{ index: 0, uuid: 'GPU-0', model: 'H100' }, { index: 1, uuid: 'GPU-1', model: 'A30', mig: mig(4, ['1g.6gb', 4]) }, { index: 2, uuid: 'GPU-2', model: 'H100', mig: mig(7, ['7g.80gb', 1]) }, { index: 5, uuid: 'GPU-5', model: 'H100', mig: mig(8, ['1g.10gb', 1]) }] },
      /^invalid_field: body\.gpus\[3\]\.mig\.slices: GPU 5 of model H100 has 8 slices, GPU 2 of the node 7/],
    ["GPU by GPU: GPU 1's own partition before its slices", { ...N1, gpus: [{ index: 0, uuid: 'GPU-0', model: 'H100', mig: mig(7, ['1g.10gb', 7]) }, { index: 1, uuid: 'GPU-1', model: 'H100', mig: mig(4, ['1g.10gb', 5]) }] }, /^invalid_field: body\.gpus\[1\]\.mig\.instances take/],
    ["GPU by GPU: GPU 1's slices before GPU 2's uuid", { ...N1, gpus: [{ index: 0, uuid: 'GPU-0', model: 'H100', mig: mig(7, ['1g.10gb', 7]) }, { index: 1, uuid: 'GPU-1', model: 'H100', mig: mig(4, ['1g.10gb', 4]) }, { index: 2, uuid: 'GPU-0', model: 'H100' }] }, /^invalid_field: body\.gpus\[1\]\.mig\.slices/],
  ]) {
    const got = await nodeBodyVerdict(body);
    assert(want.test(got), `node_registered, ${what}: ${got}`);
  }
  eq(await nodeBodyVerdict({ ...N1, gpus: [{ index: 0, uuid: 'GPU-0', model: 'M'.repeat(120), mig: mig(7, ['1g.10gb', 1]) }] }), 'PASS', '<model>/<profile> of 128 characters');
  // node_updated: a ledger kind, its own members.
  const U = { node: 'n1', gpus: [{ index: 9, uuid: 'GPU-n1-9', model: 'H100' }], max_watts_per_gpu: '1000' };
  const without = (o, k) => Object.fromEntries(Object.entries(o).filter(([m]) => m !== k));
  for (const [what, body] of [
    ['GPUs and watts', U],
    ['GPUs only', without(U, 'max_watts_per_gpu')],
    ['watts only', without(U, 'gpus')],
    ['a partitioned GPU', { node: 'n1', gpus: [{ index: 9, uuid: 'GPU-n1-9', model: 'H100', mig: mig(7, ['1g.10gb', 7]) }] }],
    ['two partitioned alike', { node: 'n1', gpus: [{ index: 9, uuid: 'GPU-n1-9', model: 'H100', mig: mig(7, ['1g.10gb', 7]) }, { index: 10, uuid: 'GPU-n1-10', model: 'H100', mig: mig(7, ['7g.80gb', 1]) }] }],
    ['64 GPUs', { node: 'n1', gpus: gpus(64, 100) }],
    ['5000 W', { node: 'n1', max_watts_per_gpu: '5000' }],
  ]) eq(await bodyVerdict('node_updated', body), 'PASS', `node_updated, ${what}`);
  for (const [what, body, want] of [
    ['neither gpus nor watts', { node: 'n1' }, /^invalid_field: body\.gpus: an update adds GPUs, raises max_watts_per_gpu, or both/],
    ['no node', without(U, 'node'), /has no member node/],
    ['an unknown member', { ...U, region: 'r2' }, /unknown member region/],
    ['null gpus', { ...U, gpus: null }, /body\.gpus is not an array/],
    ['null watts', { ...U, max_watts_per_gpu: null }, /body\.max_watts_per_gpu is not a string/],
    ['a bad node id', { ...U, node: '-n1' }, /body\.node is not an identifier/],
    ['the reserved id', { ...U, node: 'ledger' }, /reserved/],
    ['no GPUs', { ...U, gpus: [] }, /^quantity_out_of_range: body\.gpus/],
    ['65 GPUs', { ...U, gpus: gpus(65, 100) }, /^quantity_out_of_range: body\.gpus/],
    ['a repeated index', { ...U, gpus: [...gpus(2, 9), { index: 10, uuid: 'x', model: 'H100' }] }, /body\.gpus\[2\]\.index: GPUs are listed by strictly increasing index/],
    ['a uuid twice', { ...U, gpus: [{ index: 9, uuid: 'x', model: 'H100' }, { index: 10, uuid: 'x', model: 'H100' }] }, /body\.gpus\[1\]\.uuid x is listed twice/],
    ['a bad partition', { ...U, gpus: [{ index: 9, uuid: 'x', model: 'H100', mig: mig(7, ['8g.80gb', 1]) }] }, /body\.gpus\[0\]\.mig\.instances\[0\]\.profile/],
    ['two H100s of other slices', { ...U, gpus: [{ index: 9, uuid: 'x', model: 'H100', mig: mig(7, ['1g.10gb', 7]) }, { index: 10, uuid: 'y', model: 'H100', mig: mig(2, ['1g.10gb', 2]) }] }, /^invalid_field: body\.gpus\[1\]\.mig\.slices/],
    ['0 W', { ...U, max_watts_per_gpu: '0' }, /^quantity_out_of_range: body\.max_watts_per_gpu must be above 0/],
    ['above 5000 W', { ...U, max_watts_per_gpu: '5000.000000001' }, /^quantity_out_of_range: body\.max_watts_per_gpu/],
    ['watts not canonical', { ...U, max_watts_per_gpu: '1000.0' }, /body\.max_watts_per_gpu is not a canonical decimal/],
    ['the GPUs before the watts', { ...U, gpus: [], max_watts_per_gpu: '0' }, /body\.gpus/],
  ]) {
    const got = await bodyVerdict('node_updated', body);
    assert(want.test(got), `node_updated, ${what}: ${got}`);
  }
  // A ledger kind: in LEDGER_KINDS, so only the log key signs it (bundle.js keyFor).
  const { LEDGER_KINDS, KINDS } = await import('../leaf.js');
  assert(LEDGER_KINDS.has('node_updated') && KINDS.has('node_updated'), 'node_updated is a ledger kind');
});

await test('node updates: Admission judges every entry by the node as of its index (fleet/inventory.rs NodeAt)', async () => {
  const a = new Admission();
  a.apply(1, { kind: 'node_registered', body: N1 });
  a.apply(4, { kind: 'lease_registered', body: LEASE_L });
  // 20: GPU 9 (an H100) and an A100 at 10 added, 1000 W; 22: a lease over them.
  a.apply(20, { kind: 'node_updated', body: { node: 'n1', gpus: [{ index: 9, uuid: 'GPU-n1-9', model: 'H100' }, { index: 10, uuid: 'GPU-n1-10', model: 'A100' }], max_watts_per_gpu: '1000' } });
  a.apply(22, { kind: 'lease_registered', body: { ...LEASE_L, lease: 'L9', nodes: [{ gpus: [9, 10], node: 'n1' }] } });
  const v = (kind, body, index) => {
    const [reason, message] = fleetVerdict(a, kind, body, index);
    return reason === 'PASS' ? 'PASS' : `${reason} ${fieldOf(message)}`;
  };
  // Usage on the added GPUs: after the update under a lease over them; before it, the node had neither.
  eq(v('gpu_usage', usageBody('2', { lease: 'L9', model: 'H100' }), 30), 'over_capacity body.gpu_count', 'L9 covers one H100');
  eq(v('gpu_usage', usageBody('1', { lease: 'L9', model: 'H100' }), 30), 'PASS', 'the added H100 under L9');
  eq(v('gpu_usage', usageBody('1', { lease: 'L9', model: 'A100' }), 30), 'PASS', 'the added A100 under L9');
  eq(v('gpu_usage', usageBody('9', { lease: 'L9' }), 30), 'over_capacity body.gpu_count', '9 H100s: the node has them, L9 covers 1');
  eq(v('gpu_usage', usageBody('1', { model: 'A100' }), 15), 'unknown_gpu_model body.gpu_model', 'an A100 before the update that adds it');
  eq(v('gpu_usage', usageBody('9'), 15), 'over_capacity body.gpu_count', '9 H100s before the update: the node had 8');
  eq(v('gpu_usage', usageBody('9'), 20), 'over_capacity body.gpu_count', "9 H100s at the update's own index");
  eq(v('gpu_usage', usageBody('1', { model: 'A100' }), 21), 'lease_not_on_node body.lease', 'an A100 just after it: L covers none');
  // Leases: GPUs the node has at the lease's index.
  eq(v('lease_registered', { ...LEASE_L, lease: 'F', nodes: [{ gpus: [10], node: 'n1' }] }, 15), 'unknown_gpu body.nodes[0].gpus', 'a lease of GPU 10 before it was added');
  eq(v('lease_registered', { ...LEASE_L, lease: 'F', nodes: [{ count: '1', gpu_model: 'A100', node: 'n1' }] }, 15), 'unknown_gpu_model body.nodes[0].gpu_model', 'a count of A100s before one was added');
  eq(v('lease_registered', { ...LEASE_L, lease: 'F', nodes: [{ count: '1', gpu_model: 'A100', node: 'n1' }] }, 21), 'PASS', 'after (L9 not yet registered)');
  eq(v('lease_registered', { ...LEASE_L, lease: 'F', nodes: [{ count: '1', gpu_model: 'A100', node: 'n1' }] }, 30), 'lease_overbooked body.nodes', 'after L9 holds it');
  // Energy: GPUs and watts as of the record's index. 9 × 700 W an hour + 5 %: 6.615 kWh; 11 × 1000 W: 11.55 kWh.
  eq(v('energy', energyBody('6.615'), 15), 'PASS', "the node's bound before the update");
  eq(v('energy', energyBody('6.615001'), 15), 'energy_over_bound body.kwh', 'above it, though the context holds the update');
  eq(v('energy', energyBody('6.615001'), 20), 'energy_over_bound body.kwh', "above it at the update's own index");
  eq(v('energy', energyBody('11.55'), 21), 'PASS', '11 GPUs at 1000 W after it');
  eq(v('energy', energyBody('11.550000001'), 21), 'energy_over_bound body.kwh', 'a billionth above that');
  // A tenant's energy: its leases' GPUs × the watts in force. t's L: 9 GPUs; at 30 also L9: 11.
  eq(v('energy', { ...energyBody('6.615'), tenant: 't' }, 15), 'PASS', "t's 9 GPUs at 700 W");
  eq(v('energy', { ...energyBody('9.45'), tenant: 't' }, 21), 'PASS', "t's 9 GPUs at 1000 W (L9 not yet registered)");
  eq(v('energy', { ...energyBody('9.450000001'), tenant: 't' }, 21), 'energy_over_bound body.kwh', 'above them');
  eq(v('energy', { ...energyBody('6.615000001'), tenant: 't' }, 15), 'energy_over_bound body.kwh', 'above 700 W before the update');
  eq(v('energy', { ...energyBody('11.55'), tenant: 't' }, 30), 'PASS', "t's 11 GPUs at 1000 W");
  // node_updated, at 30 (n1: GPUs 0-10, 1000 W) and at 15 (GPUs 0-8, 700 W).
  const upd = (gpus, watts) => ({ node: 'n1', ...(gpus ? { gpus } : {}), ...(watts ? { max_watts_per_gpu: watts } : {}) });
  const h = (index, uuid, model = 'H100', more = {}) => ({ index, uuid, model, ...more });
  const many = (n, from) => Array.from({ length: n }, (_, k) => h(from + k, `GPU-new-${from + k}`));
  for (const [name, body, index, want] of [
    ['a replaced board', upd([h(3, 'GPU-n1-3b')]), 30, 'PASS'],
    ['a replaced board and a new GPU', upd([h(3, 'GPU-n1-3b'), h(11, 'GPU-n1-11')]), 30, 'PASS'],
    ['a replaced board of another model', upd([h(3, 'GPU-n1-3b', 'A100')]), 30, 'invalid_field body.gpus[0].model'],
    ['a replaced board partitioned', upd([h(3, 'GPU-n1-3b', 'H100', { mig: mig(7, ['1g.10gb', 7]) })]), 30, 'invalid_field body.gpus[0].model'],
    ['the added A100 replaced by an H100', upd([h(10, 'GPU-n1-10b')]), 30, 'invalid_field body.gpus[0].model'],
    ['index 10 as an H100 before the A100 was added there', upd([h(10, 'GPU-x')]), 15, 'PASS'],
    ["a GPU's own UUID again", upd([h(3, 'GPU-n1-3')]), 30, 'invalid_field body.gpus[0].uuid'],
    ["another GPU's UUID at a new index", upd([h(11, 'GPU-n1-0')]), 30, 'invalid_field body.gpus[0].uuid'],
    ['the UUID an update listed', upd([h(11, 'GPU-n1-9')]), 30, 'invalid_field body.gpus[0].uuid'],
    ['the UUID a later update lists, before it', upd([h(11, 'GPU-n1-9')]), 15, 'PASS'],
    ['GPU by GPU: a model change before a later UUID', upd([h(3, 'GPU-n1-3b', 'A100'), h(11, 'GPU-n1-0')]), 30, 'invalid_field body.gpus[0].model'],
    ['the UUID before the model', upd([h(3, 'GPU-n1-0', 'A100')]), 30, 'invalid_field body.gpus[0].uuid'],
    ['53 new GPUs: 64', upd(many(53, 11)), 30, 'PASS'],
    ['54 new GPUs: 65', upd(many(54, 11)), 30, 'quantity_out_of_range body.gpus'],
    ['54 new GPUs before the update: 63', upd(many(54, 11)), 15, 'PASS'],
    ['55 new GPUs before the update: 64', upd(many(55, 11)), 15, 'PASS'],
    ['56 new GPUs before the update: 65', upd(many(56, 11)), 15, 'quantity_out_of_range body.gpus'],
    ['replaced boards do not count', upd([...N1.gpus.map((g) => h(g.index, `${g.uuid}b`, g.model)), ...many(55, 11)]), 15, 'PASS'],
    ['the GPU count before the watts', upd(many(56, 11), '700'), 15, 'quantity_out_of_range body.gpus'],
    ['watts rising', upd(null, '1000.000000001'), 30, 'PASS'],
    ['watts unchanged', upd(null, '1000'), 30, 'invalid_field body.max_watts_per_gpu'],
    ['watts falling', upd(null, '999'), 30, 'invalid_field body.max_watts_per_gpu'],
    ['800 W before the update to 1000', upd(null, '800'), 15, 'PASS'],
    ['700 W before it', upd(null, '700'), 15, 'invalid_field body.max_watts_per_gpu'],
    ['an unregistered node', { ...upd(null, '800'), node: 'n9' }, 30, 'unknown_node body.node'],
    ["at the node's own index", upd(null, '800'), 1, 'unknown_node body.node'],
  ]) {
    eq(v('node_updated', body, index), want, name);
  }
  // Replaced boards keep their index's "added at": a replacement after a record changes nothing for it.
  a.apply(40, { kind: 'node_updated', body: upd([h(3, 'GPU-n1-3b')]) });
  eq(v('node_updated', upd([h(12, 'GPU-n1-3')]), 50), 'invalid_field body.gpus[0].uuid', 'the UUID of a replaced board');
  eq(v('gpu_usage', usageBody('8'), 15), 'PASS', 'GPU 3 counts before and after its replacement');
  eq(v('gpu_usage', usageBody('8'), 50), 'PASS', 'after');
  eq(a.nodes.get('n1').asOf(50).gpu(3).uuid, 'GPU-n1-3b', 'the latest UUID');
  eq(a.nodes.get('n1').asOf(50).gpus.length, 11, '11 GPUs');
  eq(a.nodes.get('n1').asOf(20).gpus.length, 9, '9 GPUs as of the update');
  eq(N1.gpus[3].uuid, 'GPU-n1-3', 'the registration body is not changed');
});

await test('MIG: capacity, coverage, overbooking and the energy bound count instances (fleet.rs units_of, lease_covers, lease_units_on)', async () => {
  const a = new Admission();
  a.apply(1, { kind: 'node_registered', body: M1 });
  // t: all of m1 (P), open-ended; u: GPU 0 only (G0); w: 3 of the 1g.10gb instances (C).
  a.apply(2, { kind: 'lease_registered', body: leaseOf('ALL', 0, 3600, [gpusItem('m1', [0, 1, 2, 3, 4])]) });
  a.apply(3, { kind: 'lease_registered', body: leaseOf('G0', 3600, null, [gpusItem('m1', [0])]) });
  a.apply(4, { kind: 'lease_registered', body: { ...leaseOf('C', 3600, null, [countItem('m1', 'H100/1g.10gb', '3')]), tenant: 'w' } });
  a.apply(5, { kind: 'lease_registered', body: { ...leaseOf('H', 3600, null, [gpusItem('m1', [1], '0.5')]), tenant: 'h' } });
  const v = (kind, body, index = 10) => {
    const [reason, message] = fleetVerdict(a, kind, body, index);
    return reason === 'PASS' ? 'PASS' : `${reason} ${fieldOf(message)}`;
  };
  const use = (lease, model, count, from = 0, to = 3600) => usageUnder(lease, 'm1', model, count, from, to).valueOf();
  const on = (b) => ({ ...b, node: 'm1' });
  // The node's units (before any lease rule).
  eq(v('gpu_usage', on(use('ALL', 'H100/1g.10gb', '12'))), 'PASS', 'all 12 1g.10gb instances');
  eq(v('gpu_usage', on(use('ALL', 'H100/1g.10gb', '12.000001'))), 'over_capacity body.gpu_count', 'one more than the instances');
  eq(v('gpu_usage', on(use('ALL', 'H100/1g.10gb', '13'))), 'over_capacity body.gpu_count', 'a 13th instance');
  eq(v('gpu_usage', on(use('ALL', 'H100/2g.20gb', '3'))), 'PASS', '3 2g.20gb instances');
  eq(v('gpu_usage', on(use('ALL', 'H100/2g.20gb', '4'))), 'over_capacity body.gpu_count', 'a 4th');
  eq(v('gpu_usage', on(use('ALL', 'H100', '2'))), 'PASS', 'the 2 whole H100s');
  eq(v('gpu_usage', on(use('ALL', 'H100', '3'))), 'over_capacity body.gpu_count', 'a partitioned GPU is no H100 unit');
  eq(v('gpu_usage', on(use('ALL', 'H100/3g.40gb', '1'))), 'unknown_gpu_model body.gpu_model', 'a profile the node lacks');
  eq(v('gpu_usage', on(use('ALL', 'H100/1g.10gb/x', '1'))), 'unknown_gpu_model body.gpu_model', 'no such model');
  // A lease listing a partitioned GPU covers its instances; its share, that share of each.
  eq(v('gpu_usage', on(use('G0', 'H100/1g.10gb', '3', 3600, 7200))), 'PASS', "GPU 0's 3 1g.10gb instances");
  eq(v('gpu_usage', on(use('G0', 'H100/1g.10gb', '4', 3600, 7200))), 'over_capacity body.gpu_count', 'a 4th under G0');
  eq(v('gpu_usage', on(use('G0', 'H100/2g.20gb', '2', 3600, 7200))), 'PASS', "GPU 0's 2 2g.20gb instances");
  eq(v('gpu_usage', on(use('G0', 'H100', '1', 3600, 7200))), 'lease_not_on_node body.lease', 'G0 covers no whole H100');
  assert(fleetVerdict(a, 'gpu_usage', on(use('G0', 'H100/1g.10gb', '4', 3600, 7200)))[1].includes('G0 covers 3 H100/1g.10gb GPUs of node m1'), 'what G0 covers, in the message');
  // Leases over instances: overbooking counts them. During [1 h, …): G0 holds GPU 0 (3 + 2), C 3 of
  // the 1g.10gb, H half of GPU 1 (3.5 of them): 12 − 3 − 3 − 3.5 = 2.5 1g.10gb left, 1 2g.20gb.
  const reg = (body) => v('lease_registered', body);
  for (const [name, body, want] of [
    ['the 2.5 1g.10gb left', leaseOf('F', 3600, null, [countItem('m1', 'H100/1g.10gb', '2.5')]), 'PASS'],
    ['2.5 and a billionth', leaseOf('F', 3600, null, [countItem('m1', 'H100/1g.10gb', '2.500000001')]), 'lease_overbooked body.nodes'],
    ['the other half of GPU 1 (3.5 instances)', leaseOf('F', 3600, null, [gpusItem('m1', [1], '0.5')]), 'lease_overbooked body.nodes'],
    ['GPU 4 whole (2 of the 1g.10gb, 1 2g.20gb)', leaseOf('F', 3600, null, [gpusItem('m1', [4])]), 'PASS'],
    ['GPU 4 and one 1g.10gb more', leaseOf('F', 3600, null, [gpusItem('m1', [4]), countItem('m1', 'H100/1g.10gb', '1')]), 'lease_overbooked body.nodes'],
    ['the last 2g.20gb', leaseOf('F', 3600, null, [countItem('m1', 'H100/2g.20gb', '1')]), 'PASS'],
    ['two 2g.20gb', leaseOf('F', 3600, null, [countItem('m1', 'H100/2g.20gb', '2')]), 'lease_overbooked body.nodes'],
    ['GPU 0 again (per GPU)', leaseOf('F', 3600, null, [gpusItem('m1', [0], '0.1')]), 'lease_overbooked body.nodes'],
    ['the 2 whole H100s', leaseOf('F', 3600, null, [countItem('m1', 'H100', '2')]), 'PASS'],
    ['3 whole H100s', leaseOf('F', 3600, null, [countItem('m1', 'H100', '3')]), 'lease_overbooked body.nodes'],
    ['a profile the node lacks', leaseOf('F', 3600, null, [countItem('m1', 'H100/3g.40gb', '1')]), 'unknown_gpu_model body.nodes[0].gpu_model'],
    ['all 12 before the others start', leaseOf('F', 0, 3600, [countItem('m1', 'H100/1g.10gb', '12')]), 'lease_overbooked body.nodes'],
  ]) eq(reg(body), want, name);
  eq(fleetVerdict(a, 'lease_registered', leaseOf('F', 3600, null, [countItem('m1', 'H100/1g.10gb', '3')]))[1],
    'body.nodes would lease 12.5 H100/1g.10gb GPUs of node m1 at 2026-11-05T01:00:00Z, which has 12, counting its other leases', 'the overbooking message');
  // The energy bound in 840ths of a GPU (700 W a GPU, an hour, + 5 %: 0.735 kWh a GPU).
  const energy = (tenant, kwh, from = 3600, seconds = 3600) => ({ ...energyBody(kwh, { node: 'm1', seconds }), ...(tenant ? { tenant } : {}), start: at(from), end: at(from + seconds) });
  eq(v('energy', energy(null, '3.675')), 'PASS', "the node's 5 GPUs, partitioned or not");
  eq(v('energy', energy(null, '3.675000001')), 'energy_over_bound body.kwh', 'above them');
  eq(v('energy', energy('t', '0.735')), 'PASS', "t's GPU 0, whole");
  eq(v('energy', energy('t', '0.735000001')), 'energy_over_bound body.kwh', 'above it');
  // w: 3 × a 1g.10gb on m1 (120/840, one share on the node): 0.315 kWh.
  eq(v('energy', energy('w', '0.315')), 'PASS', "w's 3 instances");
  eq(v('energy', energy('w', '0.315000001')), 'energy_over_bound body.kwh', 'above them');
  // h: half of GPU 1: 420/840.
  eq(v('energy', energy('h', '0.3675')), 'PASS', "h's half GPU");
  eq(v('energy', energy('h', '0.367500001')), 'energy_over_bound body.kwh', 'above it');
  // 1/7 of a GPU: m2's only GPU in 7 × 1g.10gb; x leases 2 of them for 1 s: 2/7 × 700 W × 1 s × 1.05 = 210 J.
  a.apply(6, { kind: 'node_registered', body: { node: 'm2', region: 'r1', max_watts_per_gpu: '700', gpus: [{ index: 0, uuid: 'GPU-m2-0', model: 'H100', mig: mig(7, ['1g.10gb', 7]) }] } });
  a.apply(7, { kind: 'lease_registered', body: { ...leaseOf('X', 0, null, [countItem('m2', 'H100/1g.10gb', '2')]), tenant: 'x' } });
  eq(v('energy', { ...energy('x', '0.000058333', 0, 1), node: 'm2' }), 'PASS', '210 J: 0.0000583 kWh and a third');
  eq(v('energy', { ...energy('x', '0.000058334', 0, 1), node: 'm2' }), 'energy_over_bound body.kwh', 'a billionth of a kWh above it');
  eq(v('gpu_usage', { ...use('X', 'H100/1g.10gb', '2'), node: 'm2', tenant: 't' }), 'PASS', 'the fleet rules leave the tenant to the parties');
  eq(v('gpu_usage', { ...use('X', 'H100/1g.10gb', '2.5'), node: 'm2' }), 'over_capacity body.gpu_count', '2.5 of the 2 X covers');
  // node_updated: a new partitioned GPU takes the slices of the node's partitioned GPUs of its
  // model (fleet.rs check_node_update, mig_slices_differ), as of the update's index. m3: a whole
  // H100 at 8, GPU 1 an H100 in 4 slices added at 9.
  a.apply(8, { kind: 'node_registered', body: { node: 'm3', region: 'r1', max_watts_per_gpu: '700', gpus: [{ index: 0, uuid: 'GPU-m3-0', model: 'H100' }] } });
  a.apply(9, { kind: 'node_updated', body: { node: 'm3', gpus: [{ index: 1, uuid: 'GPU-m3-1', model: 'H100', mig: mig(4, ['1g.10gb', 4]) }] } });
  const g = (index, uuid, model, more = {}) => ({ index, uuid, model, ...more });
  for (const [name, node, gpus, index, want] of [
    ['m1: a new H100 of 4 slices (its partitioned H100s have 7)', 'm1', [g(5, 'GPU-m1-5', 'H100', { mig: mig(4, ['1g.10gb', 4]) })], 10, 'invalid_field body.gpus[0].mig.slices'],
    ['m1: a new H100 of 7 slices, other profiles', 'm1', [g(5, 'GPU-m1-5', 'H100', { mig: mig(7, ['3g.40gb', 2]) })], 10, 'PASS'],
    ['m1: a new whole H100', 'm1', [g(5, 'GPU-m1-5', 'H100')], 10, 'PASS'],
    ['m1: a new A100 of 4 slices (another model)', 'm1', [g(5, 'GPU-m1-5', 'A100', { mig: mig(4, ['1g.10gb', 4]) })], 10, 'PASS'],
    ['m1: the second new GPU differs', 'm1', [g(5, 'GPU-m1-5', 'H100', { mig: mig(7, ['1g.10gb', 7]) }), g(6, 'GPU-m1-6', 'H100', { mig: mig(8, ['1g.10gb', 8]) })], 10, 'invalid_field body.gpus[1].mig.slices'],
    ['m1: the UUID before the slices', 'm1', [g(5, 'GPU-m1-0', 'H100', { mig: mig(4, ['1g.10gb', 4]) })], 10, 'invalid_field body.gpus[0].uuid'],
    ['m1: a replaced board of other slices: the replacement rule', 'm1', [g(4, 'GPU-m1-4b', 'H100', { mig: mig(4, ['1g.10gb', 2], ['2g.20gb', 1]) })], 10, 'invalid_field body.gpus[0].model'],
    ['m1: the slices before the GPU count', 'm1', [g(5, 'GPU-m1-5', 'H100', { mig: mig(4, ['1g.10gb', 4]) }), ...Array.from({ length: 60 }, (_, k) => g(6 + k, `GPU-m1-${6 + k}`, 'H100'))], 10, 'invalid_field body.gpus[0].mig.slices'],
    ['m3: an H100 of 7 slices before GPU 1 was added', 'm3', [g(2, 'GPU-m3-2', 'H100', { mig: mig(7, ['1g.10gb', 7]) })], 9, 'PASS'],
    ['m3: after it', 'm3', [g(2, 'GPU-m3-2', 'H100', { mig: mig(7, ['1g.10gb', 7]) })], 10, 'invalid_field body.gpus[0].mig.slices'],
    ['m3: of 4 slices after it', 'm3', [g(2, 'GPU-m3-2', 'H100', { mig: mig(4, ['4g.40gb', 1]) })], 10, 'PASS'],
  ]) eq(v('node_updated', { node, gpus }, index), want, name);
  const [, message] = fleetVerdict(a, 'node_updated', { node: 'm3', gpus: [g(2, 'GPU-m3-2', 'H100', { mig: mig(7, ['1g.10gb', 7]) })] }, 10);
  eq(message, "body.gpus[0].mig.slices: GPU 2 of model H100 has 7 slices, GPU 1 of the node 4: a node's partitioned GPUs of one model have the same slices", 'the message');
});

await test('regions: usage and energy name their node\'s region (wrong_region, right after unknown_node)', async () => {
  const a = new Admission();
  a.apply(3, { kind: 'node_registered', body: N1 });
  a.apply(4, { kind: 'lease_registered', body: LEASE_L });
  const v = (kind, body) => {
    const [reason, message] = fleetVerdict(a, kind, body);
    return reason === 'PASS' ? 'PASS' : `${reason} ${fieldOf(message)}`;
  };
  eq(v('gpu_usage', usageBody('1')), 'PASS', "usage in n1's region");
  eq(v('gpu_usage', usageBody('1', { region: 'r2' })), 'wrong_region body.region', 'usage in another');
  eq(v('gpu_usage', usageBody('1', { region: 'r2', node: 'n9' })), 'unknown_node body.node', 'an unregistered node first');
  eq(v('gpu_usage', usageBody('1', { region: 'r2', model: 'A100' })), 'wrong_region body.region', 'before the GPU model');
  eq(v('gpu_usage', usageBody('9', { region: 'r2' })), 'wrong_region body.region', 'before the capacity');
  eq(v('gpu_usage', usageBody('1', { region: 'r2', lease: null })), 'wrong_region body.region', 'before the lease');
  eq(v('energy', energyBody('1')), 'PASS', "energy in n1's region");
  eq(v('energy', energyBody('1', { region: 'r2' })), 'wrong_region body.region', 'energy in another');
  eq(v('energy', energyBody('7', { region: 'r2' })), 'wrong_region body.region', 'before the energy bound');
  eq(v('energy', { ...energyBody('1', { region: 'r2' }), tenant: 'nobody' }), 'wrong_region body.region', "before the tenant's leases");
  eq(v('energy', energyBody('1', { region: 'r1', node: 'n9' })), 'unknown_node body.node', 'energy of an unregistered node');
  const [, message] = fleetVerdict(a, 'gpu_usage', usageBody('1', { region: 'r2' }));
  eq(message, 'body.region is r2, but node n1 is registered in r1', 'the message');
  // In check(): the parties first, the time rules after.
  a.apply(1, { kind: 'tenant_registered', body: { tenant: 't' } });
  const checked = (body, receivedAt) => {
    try {
      a.check(10, { kind: 'gpu_usage', body }, receivedAt);
      return 'PASS';
    } catch (e) {
      return e.reason;
    }
  };
  eq(checked(usageBody('1', { region: 'r2', tenant: 't2' }), '2026-11-05T01:00:02Z'), 'unknown_tenant', 'the parties first');
  eq(checked(usageBody('1', { region: 'r2' }), '2026-12-10T00:00:01Z'), 'wrong_region', 'then the fleet, before time');
});

await test('node updates, MIG and regions: bundles signed here, judged alike by the console and gpuledger verify', async () => {
  const verdictOf = async (c) => {
    const r = await verify.verifyBundle({ bundle: c.bundle, logKey: c.logKey });
    if (bin) {
      eq(binaryVerdict(['--bundle', writeTmp('node-update.ndjson', c.bundle), '--log-key', c.logKey]), verdict(r), `gpuledger verify (${lastReport?.message})`);
      compareItems(r, 'node update bundle');
    }
    return r.ok ? 'PASS' : `${r.failure.reason} (${r.failure.item})`;
  };
  const update = (body) => ({ node: 'n1', ...body });
  const gpu = (index, uuid, model = 'H100') => ({ index, uuid, model });
  const L9 = { ...LEASE_L, lease: 'L9', nodes: [gpusItem('n1', [9])] };
  const many = (n) => Array.from({ length: n }, (_, k) => gpu(9 + k, `GPU-n1-${9 + k}`));
  // 0 log_policy, 1 tenant_registered t, 2 node_registered n1, 3 node-a's key, 4 lease L (GPUs 0-8), then:
  for (const [name, more, want, opts] of [
    ['usage on a GPU an update added, under a lease over it', async ({ ledger, node }) => {
      await ledger('node_updated', update({ gpus: [gpu(9, 'GPU-n1-9')] }));
      await ledger('lease_registered', L9);
      await node('gpu_usage', usageBody('1', { lease: 'L9' }));
      await node('gpu_usage', usageBody('8', { lease: 'L' }));
    }, 'PASS'],
    ['a lease over the added GPU before the update', async ({ ledger }) => {
      await ledger('lease_registered', L9);
      await ledger('node_updated', update({ gpus: [gpu(9, 'GPU-n1-9')] }));
    }, 'unknown_gpu (entry 5)'],
    ['usage of 9 H100s logged before the update that adds the 9th (the context holds it)', async ({ ledger, node }) => {
      await node('gpu_usage', usageBody('9'));
      await ledger('node_updated', update({ gpus: [gpu(9, 'GPU-n1-9')] }));
    }, 'over_capacity (entry 5)'],
    ['usage of an A100 logged before the update that adds one', async ({ ledger, node }) => {
      await node('gpu_usage', usageBody('1', { model: 'A100' }));
      await ledger('node_updated', update({ gpus: [gpu(9, 'GPU-n1-9', 'A100')] }));
    }, 'unknown_gpu_model (entry 5)'],
    ['energy at the new bound after the update (10 GPUs × 1000 W: 10.5 kWh)', async ({ ledger, node }) => {
      await ledger('node_updated', update({ gpus: [gpu(9, 'GPU-n1-9')], max_watts_per_gpu: '1000' }));
      await node('energy', energyBody('10.5'));
    }, 'PASS'],
    ['energy above the new bound', async ({ ledger, node }) => {
      await ledger('node_updated', update({ gpus: [gpu(9, 'GPU-n1-9')], max_watts_per_gpu: '1000' }));
      await node('energy', energyBody('10.500000001'));
    }, 'energy_over_bound (entry 6)'],
    ['energy within 1000 W logged before the update to 1000 W (700 W in force)', async ({ ledger, node }) => {
      await node('energy', energyBody('9.45'));
      await ledger('node_updated', update({ max_watts_per_gpu: '1000' }));
    }, 'energy_over_bound (entry 5)'],
    ["a tenant's energy at 700 W logged before the update", async ({ ledger, node }) => {
      await node('energy', { ...energyBody('6.615'), tenant: 't' });
      await ledger('node_updated', update({ max_watts_per_gpu: '1000' }));
    }, 'PASS'],
    ["a tenant's energy at 1000 W logged after it", async ({ ledger, node }) => {
      await ledger('node_updated', update({ max_watts_per_gpu: '1000' }));
      await node('energy', { ...energyBody('9.45'), tenant: 't' });
    }, 'PASS'],
    ['a replaced board (a new UUID, same model), then usage of all 8', async ({ ledger, node }) => {
      await ledger('node_updated', update({ gpus: [gpu(3, 'GPU-n1-3-new')] }));
      await node('gpu_usage', usageBody('8'));
    }, 'PASS'],
    ['a replaced board of another model', async ({ ledger }) => { await ledger('node_updated', update({ gpus: [gpu(3, 'GPU-n1-3-new', 'A100')] })); }, 'invalid_field (entry 5)'],
    ['a replaced board partitioned', async ({ ledger }) => { await ledger('node_updated', update({ gpus: [{ ...gpu(3, 'GPU-n1-3-new'), mig: mig(7, ['1g.10gb', 7]) }] })); }, 'invalid_field (entry 5)'],
    ["a new GPU under another GPU's UUID", async ({ ledger }) => { await ledger('node_updated', update({ gpus: [gpu(9, 'GPU-n1-0')] })); }, 'invalid_field (entry 5)'],
    ['a new GPU under the UUID of a replaced board', async ({ ledger }) => {
      await ledger('node_updated', update({ gpus: [gpu(3, 'GPU-n1-3-new')] }));
      await ledger('node_updated', update({ gpus: [gpu(9, 'GPU-n1-3')] }));
    }, 'invalid_field (entry 6)'],
    ['55 GPUs added: 64', async ({ ledger }) => { await ledger('node_updated', update({ gpus: many(55) })); }, 'PASS'],
    ['56 GPUs added: 65', async ({ ledger }) => { await ledger('node_updated', update({ gpus: many(56) })); }, 'quantity_out_of_range (entry 5)'],
    ['watts rising', async ({ ledger }) => { await ledger('node_updated', update({ max_watts_per_gpu: '700.000000001' })); }, 'PASS'],
    ['watts unchanged', async ({ ledger }) => { await ledger('node_updated', update({ max_watts_per_gpu: '700' })); }, 'invalid_field (entry 5)'],
    ['watts falling', async ({ ledger }) => { await ledger('node_updated', update({ max_watts_per_gpu: '699' })); }, 'invalid_field (entry 5)'],
    ['watts raised twice, the second not above the first', async ({ ledger }) => {
      await ledger('node_updated', update({ max_watts_per_gpu: '800' }));
      await ledger('node_updated', update({ max_watts_per_gpu: '750' }));
    }, 'invalid_field (entry 6)'],
    ['an update of an unregistered node', async ({ ledger }) => { await ledger('node_updated', { node: 'n9', max_watts_per_gpu: '800' }); }, 'unknown_node (entry 5)'],
    ['an update with neither GPUs nor watts', async ({ ledger }) => { await ledger('node_updated', { node: 'n1' }); }, 'leaf_invalid (entry 5)'],
    ['usage in another region than the node\'s (the key has it)', async ({ node }) => { await node('gpu_usage', usageBody('1', { region: 'r2' })); }, 'wrong_region (entry 5)'],
    ['energy in another region than the node\'s', async ({ node }) => { await node('energy', energyBody('1', { region: 'r2' })); }, 'wrong_region (entry 5)'],
    ['MIG: 12 1g.10gb instances under a lease of every GPU', async ({ node }) => { await node('gpu_usage', { ...usageBody('12', { model: 'H100/1g.10gb' }) }); }, 'PASS', { nodeBody: { ...M1, node: 'n1' }, lease: { ...LEASE_L, nodes: [gpusItem('n1', [0, 1, 2, 3, 4])] } }],
    ['MIG: a 13th instance', async ({ node }) => { await node('gpu_usage', { ...usageBody('13', { model: 'H100/1g.10gb' }) }); }, 'over_capacity (entry 5)', { nodeBody: { ...M1, node: 'n1' }, lease: { ...LEASE_L, nodes: [gpusItem('n1', [0, 1, 2, 3, 4])] } }],
    ['MIG: 3 instances under a lease of GPU 0', async ({ node }) => { await node('gpu_usage', { ...usageBody('3', { model: 'H100/1g.10gb' }) }); }, 'PASS', { nodeBody: { ...M1, node: 'n1' }, lease: { ...LEASE_L, nodes: [gpusItem('n1', [0])] } }],
    ['MIG: a 4th under it', async ({ node }) => { await node('gpu_usage', { ...usageBody('4', { model: 'H100/1g.10gb' }) }); }, 'over_capacity (entry 5)', { nodeBody: { ...M1, node: 'n1' }, lease: { ...LEASE_L, nodes: [gpusItem('n1', [0])] } }],
    ['MIG: a count lease of the instances GPU 0 leaves', async ({ ledger }) => { await ledger('lease_registered', { ...LEASE_L, lease: 'L2', nodes: [countItem('n1', 'H100/1g.10gb', '9')] }); }, 'PASS', { nodeBody: { ...M1, node: 'n1' }, lease: { ...LEASE_L, nodes: [gpusItem('n1', [0])] } }],
    ['MIG: one instance more (overbooking counts instances)', async ({ ledger }) => { await ledger('lease_registered', { ...LEASE_L, lease: 'L2', nodes: [countItem('n1', 'H100/1g.10gb', '10')] }); }, 'lease_overbooked (entry 5)', { nodeBody: { ...M1, node: 'n1' }, lease: { ...LEASE_L, nodes: [gpusItem('n1', [0])] } }],
    ["MIG: a tenant's energy under a count lease of 3 instances (3 × 120/840 × 700 W)", async ({ node }) => { await node('energy', { ...energyBody('0.315'), tenant: 't' }); }, 'PASS', { nodeBody: { ...M1, node: 'n1' }, lease: { ...LEASE_L, nodes: [countItem('n1', 'H100/1g.10gb', '3')] } }],
    ['MIG: a billionth above it', async ({ node }) => { await node('energy', { ...energyBody('0.315000001'), tenant: 't' }); }, 'energy_over_bound (entry 5)', { nodeBody: { ...M1, node: 'n1' }, lease: { ...LEASE_L, nodes: [countItem('n1', 'H100/1g.10gb', '3')] } }],
    ['MIG: a GPU added partitioned, then usage of its instances', async ({ ledger, node }) => {
      await ledger('node_updated', update({ gpus: [{ ...gpu(9, 'GPU-n1-9'), mig: mig(7, ['3g.40gb', 2]) }] }));
      await ledger('lease_registered', L9);
      await node('gpu_usage', usageBody('2', { lease: 'L9', model: 'H100/3g.40gb' }));
    }, 'PASS'],
    ['MIG: a GPU added in the slices of the partitioned H100s', async ({ ledger }) => { await ledger('node_updated', update({ gpus: [{ ...gpu(9, 'GPU-n1-9'), mig: mig(7, ['3g.40gb', 2]) }] })); }, 'PASS', { nodeBody: { ...M1, node: 'n1' }, lease: { ...LEASE_L, nodes: [gpusItem('n1', [0])] } }],
    ['MIG: a GPU added in other slices than the partitioned H100s', async ({ ledger }) => { await ledger('node_updated', update({ gpus: [{ ...gpu(9, 'GPU-n1-9'), mig: mig(4, ['1g.10gb', 4]) }] })); }, 'invalid_field (entry 5)', { nodeBody: { ...M1, node: 'n1' }, lease: { ...LEASE_L, nodes: [gpusItem('n1', [0])] } }],
    ['MIG: an update listing two H100s of other slices', async ({ ledger }) => { await ledger('node_updated', update({ gpus: [{ ...gpu(9, 'GPU-n1-9'), mig: mig(7, ['3g.40gb', 2]) }, { ...gpu(10, 'GPU-n1-10'), mig: mig(4, ['1g.10gb', 4]) }] })); }, 'leaf_invalid (entry 5)'],
  ]) {
    eq(await verdictOf(await fleetCase(more, opts ?? {})), want, name);
  }
});

// ---------------------------------------------------------------- disputes (§5.17; §6.7, disputes; crates/core/src/dispute.rs)
//
// A ledger-written record_excluded entry takes one record of a tenant out of rating. In a
// bundle it is context, read before the records: the console rechecks its tenant
// (`unknown_tenant`) and that no earlier exclusion names its entry (`already_excluded`); not
// `unknown_record` nor `record_invoiced`, which need the record (verify-log's).

/** The reason of the exclusions below. */
const EXCLUSION_REASON = 'meter fault on n1, confirmed by the operator';

/** The LeafError message of checkEnvelope on a record_excluded body, or 'PASS'. */
async function exclusionBodyVerdict(body) {
  const env = { v: 3, kind: 'record_excluded', signer: 'ledger', key_id: '0123456789abcdef', seq: 1, body, sig: `${'A'.repeat(86)}==` };
  try {
    await checkEnvelope(env, 'gpuledger.test/fleet');
    return 'PASS';
  } catch (e) {
    return e.message;
  }
}

await test('disputes: a record_excluded body is checked as record.rs checks it', async () => {
  const base = { entry: 5, reason: EXCLUSION_REASON, tenant: 't' };
  const without = (k) => Object.fromEntries(Object.entries(base).filter(([m]) => m !== k));
  for (const [what, body] of [
    ['an exclusion', base],
    ['entry 0', { ...base, entry: 0 }],
    ['entry 2^53 − 1', { ...base, entry: Number.MAX_SAFE_INTEGER }],
    ['a reason of 500 bytes', { ...base, reason: 'x'.repeat(500) }],
    ['a reason of 250 two-byte characters', { ...base, reason: '\u00e9'.repeat(250) }],
    ['a reason of 500 bytes of Chinese', { ...base, reason: `${'\u4e2d'.repeat(166)}xx` }],
    ['white space inside', { ...base, reason: 'meter  fault\u3000\u8ba1\u91cf\u6545\u969c (ticket #42)' }],
    ['a trailing zero-width space (not White_Space)', { ...base, reason: 'meter fault\u200b' }],
    ["a trailing U+FEFF (JS's trim removes it, Rust's does not)", { ...base, reason: 'meter fault\ufeff' }],
  ]) {
    eq(await exclusionBodyVerdict(body), 'PASS', what);
  }
  const refused = [
    ['no tenant', without('tenant'), /has no member tenant/],
    ['no entry', without('entry'), /has no member entry/],
    ['no reason', without('reason'), /has no member reason/],
    ['an extra member', { ...base, invoice: 'INV-000001' }, /unknown member invoice/],
    ['a null reason', { ...base, reason: null }, /body\.reason is not a string/],
    ['a null entry', { ...base, entry: null }, /body\.entry is not an integer/],
    ['a null tenant', { ...base, tenant: null }, /body\.tenant is not a string/],
    ['entry as a string', { ...base, entry: '5' }, /body\.entry is not an integer/],
    ['entry true', { ...base, entry: true }, /body\.entry is not an integer/],
    ['entry 5.5', { ...base, entry: 5.5 }, /body\.entry is not an integer/],
    ['entry −1', { ...base, entry: -1 }, /body\.entry is not an integer/],
    ['entry 2^53', { ...base, entry: 2 ** 53 }, /body\.entry is not an integer/],
    ['a reason that is a number', { ...base, reason: 7 }, /body\.reason is not a string/],
    ['an empty reason', { ...base, reason: '' }, /^invalid_field: body\.reason/],
    ['a reason of 501 bytes', { ...base, reason: 'x'.repeat(501) }, /^invalid_field: body\.reason/],
    ['a reason of 501 bytes, two-byte characters', { ...base, reason: `${'\u00e9'.repeat(250)}x` }, /^invalid_field: body\.reason/],
    ['a reason of 501 bytes of Chinese', { ...base, reason: '\u4e2d'.repeat(167) }, /^invalid_field: body\.reason/],
    ['a bell', { ...base, reason: 'meter\u0007fault' }, /^invalid_field: body\.reason/],
    ['a line feed inside', { ...base, reason: 'meter\nfault' }, /^invalid_field: body\.reason/],
    ['DEL', { ...base, reason: 'meter fault\u007f' }, /^invalid_field: body\.reason/],
    ['U+0085', { ...base, reason: 'meter\u0085fault' }, /^invalid_field: body\.reason/],
    ['U+009F', { ...base, reason: 'meter\u009ffault' }, /^invalid_field: body\.reason/],
    ['a trailing space', { ...base, reason: 'meter fault ' }, /^invalid_field: body\.reason/],
    ['a leading space', { ...base, reason: ' meter fault' }, /^invalid_field: body\.reason/],
    ['a trailing ideographic space', { ...base, reason: 'meter fault\u3000' }, /^invalid_field: body\.reason/],
    ['a leading no-break space', { ...base, reason: '\u00a0meter fault' }, /^invalid_field: body\.reason/],
    ['a space alone', { ...base, reason: ' ' }, /^invalid_field: body\.reason/],
    ['a tenant with a space', { ...base, tenant: 'a b' }, /body\.tenant is not an identifier/],
    ['an empty tenant', { ...base, tenant: '' }, /body\.tenant is not an identifier/],
    ['the reserved tenant', { ...base, tenant: 'ledger' }, /body\.tenant "ledger" is reserved/],
    ['the shape first: a string entry before a bad tenant', { tenant: 'a b', entry: '5', reason: '' }, /body\.entry is not an integer/],
    ['tenant before reason', { tenant: 'a b', entry: 5, reason: '' }, /body\.tenant is not an identifier/],
  ];
  for (const [what, body, want] of refused) {
    const got = await exclusionBodyVerdict(body);
    assert(want.test(got), `${what}: ${got}`);
  }
});

await test('disputes: Admission refuses a second exclusion of an entry and an unknown tenant', async () => {
  const a = new Admission();
  a.apply(1, { kind: 'tenant_registered', body: { tenant: 't' } });
  a.apply(2, { kind: 'tenant_registered', body: { tenant: 'u' } });
  const exclusion = (entry, tenant = 't') => ({ kind: 'record_excluded', body: { entry, reason: EXCLUSION_REASON, tenant } });
  const verdictOf = (index, e) => {
    try {
      a.check(index, e, '2026-11-06T00:00:00Z');
      return 'PASS';
    } catch (err) {
      return `${err.reason}: ${err.message}`;
    }
  };
  eq(verdictOf(10, exclusion(5)), 'PASS', 'a first exclusion of entry 5');
  a.apply(10, exclusion(5));
  eq(verdictOf(10, exclusion(5)), 'PASS', 'the exclusion at its own index is not earlier');
  eq(verdictOf(11, exclusion(5)), 'already_excluded: body.entry: entry 5 is already excluded (entry 10)', 'entry 5 again');
  eq(verdictOf(11, exclusion(5, 'u')), 'already_excluded: body.entry: entry 5 is already excluded (entry 10)', "entry 5 again, by another tenant's exclusion");
  eq(verdictOf(11, exclusion(6)), 'PASS', 'entry 6');
  eq(verdictOf(11, exclusion(5, 'v')).split(':')[0], 'unknown_tenant', 'an unregistered tenant: the parties first');
  eq(verdictOf(1, exclusion(6)).split(':')[0], 'unknown_tenant', 'a tenant registered at the exclusion\'s index');
  // The first exclusion of an entry counts.
  a.apply(12, exclusion(5));
  eq(verdictOf(13, exclusion(5)), 'already_excluded: body.entry: entry 5 is already excluded (entry 10)', 'the first exclusion is named');
});

await test('disputes: bundles signed here: exclusions are context, rechecked as far as a bundle shows', async () => {
  const verdictOf = async (c) => {
    const r = await verify.verifyBundle({ bundle: c.bundle, logKey: c.logKey });
    if (bin) {
      eq(binaryVerdict(['--bundle', writeTmp('disputes.ndjson', c.bundle), '--log-key', c.logKey]), verdict(r), 'gpuledger verify');
      compareItems(r, 'disputes bundle');
    }
    return r.ok ? 'PASS' : `${r.failure.reason} (${r.failure.item})`;
  };
  const exclude = (entry, more = {}) => ({ entry, reason: EXCLUSION_REASON, tenant: 't', ...more });
  // 0 log_policy, 1 tenant_registered t, 2 node_registered n1, 3 node-a's key, 4 the lease,
  // 5 and 6 usage of t, then `more`'s
  const twoRecords = (more) => fleetCase(async ({ ledger, node }) => {
    await node('gpu_usage', usageBody('8'));
    await node('gpu_usage', usageBody('8', { from: 3600 }));
    await more({ ledger, node });
  });
  for (const [name, c, want] of [
    ['an exclusion', await twoRecords(async ({ ledger }) => { await ledger('record_excluded', exclude(5)); }), 'PASS'],
    ['exclusions of two records', await twoRecords(async ({ ledger }) => {
      await ledger('record_excluded', exclude(6));
      await ledger('record_excluded', exclude(5, { reason: 'duplicate of entry 6' }));
    }), 'PASS'],
    ['an entry excluded twice', await twoRecords(async ({ ledger }) => {
      await ledger('record_excluded', exclude(5));
      await ledger('record_excluded', exclude(5, { reason: 'excluded again' }));
    }), 'already_excluded (entry 8)'],
    ["an entry excluded twice, the second by another tenant's exclusion", await twoRecords(async ({ ledger }) => {
      await ledger('record_excluded', exclude(5));
      await ledger('tenant_registered', { tenant: 'u' });
      await ledger('record_excluded', exclude(5, { tenant: 'u' }));
    }), 'already_excluded (entry 9)'],
    ['an unknown tenant', await twoRecords(async ({ ledger }) => { await ledger('record_excluded', exclude(5, { tenant: 'v' })); }), 'unknown_tenant (entry 7)'],
    ['a tenant registered after its exclusion', await twoRecords(async ({ ledger }) => {
      await ledger('record_excluded', exclude(5, { tenant: 'v' }));
      await ledger('tenant_registered', { tenant: 'v' });
    }), 'unknown_tenant (entry 7)'],
    ['an entry excluded twice, the second of an unknown tenant: the parties first', await twoRecords(async ({ ledger }) => {
      await ledger('record_excluded', exclude(5));
      await ledger('record_excluded', exclude(5, { tenant: 'v' }));
    }), 'unknown_tenant (entry 8)'],
    // What a bundle cannot show: verify-log refuses these (unknown_record, record_invoiced).
    ['an exclusion of a lease, and of no entry at all (unknown_record: not from a bundle)', await twoRecords(async ({ ledger }) => {
      await ledger('record_excluded', exclude(4));
      await ledger('record_excluded', exclude(99));
    }), 'PASS'],
    ['an exclusion of an invoiced record (record_invoiced: not from a bundle)', await twoRecords(async ({ ledger }) => {
      await ledger('invoice_issued', { checkpoint_size: 7, currency: 'CNY', invoice_sha256: 'cd'.repeat(32), number: 'INV-000001', period_from: '2026-11-01T00:00:00Z', period_to: '2026-11-05T01:00:00Z', tenant: 't', total: '148.00' });
      await ledger('record_excluded', exclude(5));
    }), 'PASS'],
    ['a reason of 500 bytes', await twoRecords(async ({ ledger }) => { await ledger('record_excluded', exclude(5, { reason: 'x'.repeat(500) })); }), 'PASS'],
    ['a reason of 501 bytes', await twoRecords(async ({ ledger }) => { await ledger('record_excluded', exclude(5, { reason: 'x'.repeat(501) })); }), 'leaf_invalid (entry 7)'],
    ['an empty reason', await twoRecords(async ({ ledger }) => { await ledger('record_excluded', exclude(5, { reason: '' })); }), 'leaf_invalid (entry 7)'],
    ['a reason with a trailing space', await twoRecords(async ({ ledger }) => { await ledger('record_excluded', exclude(5, { reason: 'meter fault ' })); }), 'leaf_invalid (entry 7)'],
    ['a reason with a control character', await twoRecords(async ({ ledger }) => { await ledger('record_excluded', exclude(5, { reason: 'meter\u0007fault' })); }), 'leaf_invalid (entry 7)'],
    ['a null reason', await twoRecords(async ({ ledger }) => { await ledger('record_excluded', exclude(5, { reason: null })); }), 'leaf_invalid (entry 7)'],
    ['an extra member', await twoRecords(async ({ ledger }) => { await ledger('record_excluded', exclude(5, { invoice: 'INV-000001' })); }), 'leaf_invalid (entry 7)'],
    ['entry as a string', await twoRecords(async ({ ledger }) => { await ledger('record_excluded', exclude('5')); }), 'leaf_invalid (entry 7)'],
    ['a tenant that is not an id', await twoRecords(async ({ ledger }) => { await ledger('record_excluded', exclude(5, { tenant: 'a b' })); }), 'leaf_invalid (entry 7)'],
  ]) {
    eq(await verdictOf(c), want, name);
  }
});

// ---------------------------------------------------------------- contract amendments (§5.21)
//
// A ledger-written contract_amended entry moves a contract's end. In a bundle it is context,
// with the tenant's contracts and invoices: the console rechecks every amendment rule among
// them, and the contract rules with the terms as amended.

await test('contract amendments: bundles signed here: amendments are context, and the terms compared are the amended ones', async () => {
  const verdictOf = async (c) => {
    const r = await verify.verifyBundle({ bundle: c.bundle, logKey: c.logKey });
    if (bin) {
      eq(binaryVerdict(['--bundle', writeTmp('amendments.ndjson', c.bundle), '--log-key', c.logKey]), verdict(r), 'gpuledger verify');
      compareItems(r, 'amendments bundle');
    }
    return r.ok ? 'PASS' : `${r.failure.reason} (${r.failure.item})`;
  };
  // Every ledger entry is received at 2026-10-01T00:00:00Z.
  const contract = (contract, from, to) => ({
    billing_anchor: 'calendar', billing_period: 'month', contract, currency: 'CNY',
    fees: [{ amount: '3000', category: 'compute', name: 'Bare metal, monthly', timing: 'advance' }],
    region: 'r1', tenant: 't', term_from: from, term_to: to,
  });
  const amend = (contract, to, more = {}) => ({ contract, reason: 'Ended early by mutual agreement', tenant: 't', term_to: to, ...more });
  // 0 log_policy, 1 tenant_registered t, 2 C1 for November and December 2026, then `more`'s
  const withC1 = (more) => fleetLog(async ({ ledger }) => {
    await ledger('contract_registered', contract('C1', '2026-11-01T00:00:00Z', '2027-01-01T00:00:00Z'));
    await more({ ledger });
  });
  for (const [name, c, want] of [
    ['C1 ended early, C2 from its new end', await withC1(async ({ ledger }) => {
      await ledger('contract_amended', amend('C1', '2026-12-01T00:00:00Z'));
      await ledger('contract_registered', contract('C2', '2026-12-01T00:00:00Z', '2027-02-01T00:00:00Z'));
    }), 'PASS'],
    ['C2 from the end C1 would have had', await withC1(async ({ ledger }) => {
      await ledger('contract_registered', contract('C2', '2026-12-01T00:00:00Z', '2027-02-01T00:00:00Z'));
    }), 'contract_overlap (entry 3)'],
    ['C1 extended, then amended back', await withC1(async ({ ledger }) => {
      await ledger('contract_amended', amend('C1', '2027-03-01T00:00:00Z'));
      await ledger('contract_amended', amend('C1', '2027-01-01T00:00:00Z', { reason: 'Extension withdrawn' }));
      await ledger('contract_registered', contract('C2', '2027-01-01T00:00:00Z', '2027-02-01T00:00:00Z'));
    }), 'PASS'],
    ['C2 inside the extended term', await withC1(async ({ ledger }) => {
      await ledger('contract_amended', amend('C1', '2027-03-01T00:00:00Z'));
      await ledger('contract_registered', contract('C2', '2027-02-01T00:00:00Z', '2027-04-01T00:00:00Z'));
    }), 'contract_overlap (entry 4)'],
    ['C1 extended into C2', await withC1(async ({ ledger }) => {
      await ledger('contract_registered', contract('C2', '2027-01-01T00:00:00Z', '2027-02-01T00:00:00Z'));
      await ledger('contract_amended', amend('C1', '2027-01-01T00:00:01Z'));
    }), 'contract_overlap (entry 4)'],
    ['an unknown contract', await withC1(async ({ ledger }) => { await ledger('contract_amended', amend('C9', '2026-12-01T00:00:00Z')); }), 'unknown_contract (entry 3)'],
    ['an amendment before its contract', await fleetLog(async ({ ledger }) => {
      await ledger('contract_amended', amend('C1', '2026-12-01T00:00:00Z'));
      await ledger('contract_registered', contract('C1', '2026-11-01T00:00:00Z', '2027-01-01T00:00:00Z'));
    }), 'unknown_contract (entry 2)'],
    ['an unregistered tenant', await withC1(async ({ ledger }) => { await ledger('contract_amended', amend('C1', '2026-12-01T00:00:00Z', { tenant: 'u' })); }), 'unknown_tenant (entry 3)'],
    ['the current end', await withC1(async ({ ledger }) => { await ledger('contract_amended', amend('C1', '2027-01-01T00:00:00Z')); }), 'invalid_field (entry 3)'],
    ['an end at the start', await withC1(async ({ ledger }) => { await ledger('contract_amended', amend('C1', '2026-11-01T00:00:00Z')); }), 'invalid_field (entry 3)'],
    ['a term of 3660 days', await withC1(async ({ ledger }) => { await ledger('contract_amended', amend('C1', '2036-11-08T00:00:00Z')); }), 'PASS'],
    ['a term of 3660 days and a second', await withC1(async ({ ledger }) => { await ledger('contract_amended', amend('C1', '2036-11-08T00:00:01Z')); }), 'quantity_out_of_range (entry 3)'],
    ['a reason with a trailing space', await withC1(async ({ ledger }) => { await ledger('contract_amended', amend('C1', '2026-12-01T00:00:00Z', { reason: 'Ended early ' })); }), 'leaf_invalid (entry 3)'],
    ['a term_from', await withC1(async ({ ledger }) => { await ledger('contract_amended', amend('C1', '2026-12-01T00:00:00Z', { term_from: '2026-11-15T00:00:00Z' })); }), 'leaf_invalid (entry 3)'],
  ]) {
    eq(await verdictOf(c), want, name);
  }
});

await test('decimals: exact sums and products, numeric comparison', async () => {
  eq(Dec.parse('12.5').mul(Dec.parse('1.08')).toString(), '13.5', 'kwh × pue');
  eq(Dec.parse('13.5').mul(Dec.parse('550')).shift(3).toString(), '7.425', 'carbon');
  eq(Dec.parse('0.1').add(Dec.parse('0.2')).toString(), '0.3', 'no floating point');
  eq(Dec.parse('1.50').cmp(Dec.parse('1.5')), 0, 'equal as numbers');
  eq(Dec.parseCanonical('1.50'), null, 'not canonical');
  eq(Dec.parse('123456789012345678901234567890.123456789').mul(Dec.parse('1.000000001')).toString(), '123456789135802467913580246791.358024679123456789', 'beyond 28 digits, exact');
});

// ---------------------------------------------------------------- the shipped files run in a browser

await test('the shipped modules use relative imports and no Node-only API', async () => {
  const dir = path.resolve(here, '..');
  for (const f of fs.readdirSync(dir).filter((f) => f.endsWith('.js'))) {
    const src = read(path.join(dir, f));
    for (const m of src.matchAll(/^import .* from '([^']+)';$/gm)) assert(m[1].startsWith('./'), `${f} imports ${m[1]}`);
    for (const nodeOnly of [/\brequire\(/, /\bprocess\./, /\bBuffer\b/, /from 'node:/, /\bfs\./, /__dirname/]) {
      assert(!nodeOnly.test(src), `${f} uses ${nodeOnly}`);
    }
  }
});

// ---------------------------------------------------------------- the console's trust settings (lib/trust.js)

/** A Storage-like map for Node (the console keeps its settings in Web Storage). */
function memoryStorage() {
  const m = new Map();
  return { getItem: (k) => (m.has(k) ? m.get(k) : null), setItem: (k, v) => m.set(k, String(v)), removeItem: (k) => m.delete(k) };
}

await test("the console parses verifier keys whose base64 holds '+', and refuses a malformed pasted key", async () => {
  globalThis.localStorage ??= memoryStorage();
  globalThis.sessionStorage ??= memoryStorage();
  if (globalThis.navigator === undefined) globalThis.navigator = { language: 'en' };
  const trust = await import('../../lib/trust.js');
  assert(logKey.split('+').length > 3, "the fixture key's base64 holds a '+'");
  eq(trust.keyId(logKey), 'f75d5658', 'key id of the fixture key');
  eq(trust.parseKeyText(logKey), { name: 'test.gpuledger/log', keyId: 'f75d5658', key: logKey.split('+').slice(2).join('+') }, 'parts');
  for (const bad of ['', 'name', 'a+b+c', 'na me+f75d5658+AAAA', '+f75d5658+AAAA', 'n+F75D5658+AAAA', 'n+f75d5658+', 'n+f75d5658+AAA', 'n+f75d5658+AA AA']) {
    eq(trust.keyId(bad), null, `key id of ${JSON.stringify(bad)}`);
  }
  // A pasted key that is not one is an error, never a silent fall back to the server's key.
  localStorage.setItem('gpuledger.console.trust', JSON.stringify({ logKey: 'test.gpuledger/log+f75d565+AAAA', witnesses: [], quorum: 0 }));
  let threw = null;
  try {
    await trust.trustForChecks();
  } catch (e) {
    threw = e;
  }
  assert(threw && /not a verifier key/.test(threw.message), `trustForChecks with a malformed pasted key: ${threw}`);
  localStorage.setItem('gpuledger.console.trust', JSON.stringify({ logKey, witnesses: [], quorum: 0 }));
  eq((await trust.trustForChecks()).source, 'pasted', 'a good pasted key is used');
  localStorage.removeItem('gpuledger.console.trust');
});

// ---------------------------------------------------------------- the same in Chromium

const { findChromium, runInBrowser } = await import('./browser.mjs');
const chromium = findChromium();
if (chromium) {
  await test(`in Chromium (${chromium}): PASS on the originals, the right reason on tampered copies`, async () => {
    const r = await runInBrowser(chromium);
    assert(r.ok, r.message);
  });
} else {
  console.log('skip in Chromium: no chromium on PATH (set CHROMIUM to its path to run the browser check)');
}

if (itemsCompared.length) {
  const differ = itemsCompared.filter((x) => x.ours !== x.theirs);
  console.log(`items: ${itemsCompared.length - differ.length} of ${itemsCompared.length} failing items named as gpuledger verify names them`);
  for (const d of differ) console.log(`  item differs (${d.what}): ours ${JSON.stringify(d.ours)}, gpuledger verify ${JSON.stringify(d.theirs)}`);
}
fs.rmSync(tmp, { recursive: true, force: true });
console.log(`\n${results.passed} passed, ${results.failures.length} failed${bin ? `; ${binaryChecks} verdicts compared with ${bin} (${witnessChecks} PASSes with the same summary.witnesses)` : '; GPULEDGER_BIN not set: verdicts not compared with gpuledger verify'}`);
if (results.failures.length) {
  console.log(`failed:\n  ${results.failures.join('\n  ')}`);
  process.exit(1);
}
