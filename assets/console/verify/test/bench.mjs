// A benchmark of the in-browser verifier on a large certificate bundle, under Node (the
// same code the console runs; Node's WebCrypto is OpenSSL, Chromium's BoringSSL):
//
//     node assets/console/verify/test/bench.mjs generate RECORDS KEEP_EVERY DIR
//     node assets/console/verify/test/bench.mjs verify DIR
//
// `generate` writes DIR/bundle.v3.ndjson, DIR/certificate.json and DIR/verifier_key.txt: a log
// of RECORDS signed gpu_usage records (plus six context entries) under the test log key of
// tests/fixtures/certificate, and a certificate with its version-3 bundle holding every
// KEEP_EVERY-th record (so the multi-proof has nodes). `verify` streams the bundle from disk
// (fs.openAsBlob) through verifyCertificate and prints the verdict, the time, and the peak
// resident and heap memory sampled every 50 ms.

import fs from 'node:fs';
import path from 'node:path';
import nodeCrypto from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { canonicalize, b64decode, b64encode, concat, utf8 } from '../jcs.js';
import { signedMessage } from '../certificate.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const fixtures = path.resolve(here, '../../../../tests/fixtures/certificate');
const [, , mode, ...args] = process.argv;

const sha = (...parts) => nodeCrypto.createHash('sha256').update(Buffer.concat(parts.map((p) => Buffer.from(p)))).digest();
const leafHash = (bytes) => sha([0], bytes);
const nodeHash = (l, r) => sha([1], l, r);
const split = (n) => {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
};

function privateKey(seed) {
  const der = Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), Buffer.from(seed)]);
  return nodeCrypto.createPrivateKey({ key: der, format: 'der', type: 'pkcs8' });
}
const rawPublic = (key) => new Uint8Array(nodeCrypto.createPublicKey(key).export({ format: 'der', type: 'spki' }).subarray(12));
const sign = (key, msg) => new Uint8Array(nodeCrypto.sign(null, Buffer.from(msg), key));

function generate(records, keep, dir) {
  const origin = 'test.gpuledger/log';
  const logKey = privateKey(b64decode(fs.readFileSync(path.join(fixtures, 'log_key.seed.b64'), 'utf8').trim()));
  const logPub = rawPublic(logKey);
  const vkey = fs.readFileSync(path.join(fixtures, 'verifier_key.txt'), 'utf8').trim();
  const nodeKey = privateKey(nodeCrypto.randomBytes(32));
  const nodePub = rawPublic(nodeKey);
  const keyId = (pub) => sha(pub).subarray(0, 8).toString('hex');
  // The context arrives first; each record two seconds after it ends (the log's time policy).
  const received = '2026-01-01T00:00:00Z';
  const hashes = [];
  const kept = [];
  let prev = new Uint8Array(32);
  let ledgerSeq = 0;
  const entry = (kind, signer, key, kid, seq, body, receivedAt = received) => {
    const env = { body, key_id: kid, kind, seq, signer, v: 3 };
    const msg = concat(utf8(`gpuledger/v3/${kind}\n${origin}\n`), utf8(canonicalize(env)));
    env.sig = b64encode(sign(key, msg));
    const index = hashes.length;
    const leaf = canonicalize({ envelope: env, index, prev: b64encode(prev), received_at: receivedAt, v: 3 });
    const h = leafHash(utf8(leaf));
    hashes.push(h);
    prev = h;
    return { index, leaf, kind, hash: h };
  };
  const ledger = (kind, body) => entry(kind, 'ledger', logKey, keyId(logPub), ++ledgerSeq, body);
  const context = [
    ledger('log_policy', { max_future_skew_seconds: 300, max_record_age_seconds: 3024000 }),
    ledger('node_registered', { gpus: Array.from({ length: 8 }, (_, i) => ({ index: i, model: 'H100', uuid: `GPU-bench-${i}` })), max_watts_per_gpu: '1000', node: 'node-1', region: 'west' }),
    ledger('signer_key_registered', { key_id: keyId(nodePub), nodes: ['node-1'], public_key: b64encode(nodePub), regions: ['west'], role: 'node', signer: 'node-1' }),
    ledger('tenant_registered', { tenant: 'acme' }),
    // Usage is billed only under a lease that covers it (§5.8, §6.7 leases): all 8 GPUs of node-1.
    ledger('lease_registered', { class: 'on_demand', from: '2026-01-01T00:00:00Z', lease: 'L-bench', nodes: [{ gpus: [0, 1, 2, 3, 4, 5, 6, 7], node: 'node-1' }], tenant: 'acme' }),
    ledger('region_params', { carbon_g_per_kwh: '550', currency: 'CNY', effective_from: '2026-01-01T00:00:00Z', electricity_price_per_kwh: '0.28', pue: '1.08', region: 'west' }),
  ];
  const t0 = Date.parse('2026-01-02T00:00:00Z') / 1000;
  const iso = (s) => new Date(s * 1000).toISOString().replace('.000Z', 'Z');
  for (let k = 0; k < records; k++) {
    const start = t0 + k * 60;
    const e = entry('gpu_usage', 'node-1', nodeKey, keyId(nodePub), k + 1, {
      end: iso(start + 60), gpu_count: '8', gpu_model: 'H100', gpu_seconds: '480', lease: 'L-bench', node: 'node-1', region: 'west', start: iso(start), tenant: 'acme',
    }, iso(start + 62));
    if (k % keep === 0) kept.push(e);
  }
  const n = hashes.length;
  const inBundle = new Set([...context, ...kept].map((e) => e.index));
  const memo = new Map();
  const mth = (lo, hi) => {
    if (hi - lo === 1) return hashes[lo];
    const key = `${lo}:${hi}`;
    if (memo.has(key)) return memo.get(key);
    const k = split(hi - lo);
    const h = nodeHash(mth(lo, lo + k), mth(lo + k, hi));
    if (hi - lo > 1024) memo.set(key, h);
    return h;
  };
  const sorted = [...inBundle].sort((a, b) => a - b);
  let cursor = 0;
  const nodes = [];
  const walk = (lo, hi) => {
    while (cursor < sorted.length && sorted[cursor] < lo) cursor++;
    const any = cursor < sorted.length && sorted[cursor] < hi;
    if (!any) return nodes.push(mth(lo, hi));
    if (hi - lo === 1) return;
    const k = split(hi - lo);
    walk(lo, lo + k);
    walk(lo + k, hi);
  };
  walk(0, n);
  const rootHash = mth(0, n);
  const body = `${origin}\n${n}\n${b64encode(rootHash)}\n`;
  const noteSig = concat(Uint8Array.from([0xf7, 0x5d, 0x56, 0x58]), sign(logKey, utf8(body)));
  const note = `${body}\n\u2014 ${origin} ${b64encode(noteSig)}\n`;
  // The certificate: the kept records' sums and commitment.
  const frontier = [];
  for (const e of kept) {
    const item = Buffer.alloc(40);
    item.writeBigUInt64BE(BigInt(e.index));
    Buffer.from(e.hash).copy(item, 8);
    let h = leafHash(item);
    let size = 1;
    while (frontier.length && frontier.at(-1).size === size) {
      h = nodeHash(frontier.pop().hash, h);
      size *= 2;
    }
    frontier.push({ hash: h, size });
  }
  let commitment = frontier.at(-1).hash;
  for (let k = frontier.length - 2; k >= 0; k--) commitment = nodeHash(frontier[k].hash, commitment);
  const count = kept.length;
  const kwh = '0';
  const cert = {
    checkpoint: note, energy: [], entries: { commitment: b64encode(commitment), count },
    gpu: [{ gpu_model: 'H100', gpu_seconds: String(480 * count), records: count, region: 'west' }],
    id: 'CERT-000001', issued_at: '2026-12-01T00:00:00Z', log_origin: origin,
    period_from: '2026-01-01T00:00:00Z', period_to: '2027-01-01T00:00:00Z', scope: {}, tenant: 'acme',
    totals: { carbon_kg: '0', gpu_seconds: String(480 * count), kwh, kwh_with_pue: '0', kwh_without_region_params: '0', records: count },
    v: 1,
  };
  cert.sig = b64encode(sign(logKey, signedMessage(cert)));
  fs.mkdirSync(dir, { recursive: true });
  const fd = fs.openSync(path.join(dir, 'bundle.v3.ndjson'), 'w');
  const write = (s) => fs.writeSync(fd, `${s}\n`);
  write(canonicalize({ checkpoint: note, format: 'gpuledger-bundle/v3', log_origin: origin, subject: { certificate: 'CERT-000001' }, type: 'header' }));
  for (const e of [...context, ...kept]) write(`{"index":${e.index},"leaf":${e.leaf},"type":"entry"}`);
  for (let k = 0; k < nodes.length; k += 4096) write(canonicalize({ hashes: nodes.slice(k, k + 4096).map((h) => b64encode(h)), type: 'nodes' }));
  write(`{"entries":${context.length + kept.length},"nodes":${nodes.length},"type":"end"}`);
  fs.closeSync(fd);
  fs.writeFileSync(path.join(dir, 'certificate.json'), canonicalize(cert));
  fs.writeFileSync(path.join(dir, 'verifier_key.txt'), `${vkey}\n`);
  const size = fs.statSync(path.join(dir, 'bundle.v3.ndjson')).size;
  console.log(`log of ${n} entries; bundle of ${context.length + kept.length} entries and ${nodes.length} nodes, ${(size / 1e6).toFixed(1)} MB`);
}

async function verifyDir(dir) {
  const { verifyCertificate } = await import('../index.js');
  const file = path.join(dir, 'bundle.v3.ndjson');
  const bundle = await fs.openAsBlob(file);
  let peakRss = 0;
  let peakHeap = 0;
  const sample = () => {
    const m = process.memoryUsage();
    peakRss = Math.max(peakRss, m.rss);
    peakHeap = Math.max(peakHeap, m.heapUsed + m.arrayBuffers);
  };
  const timer = setInterval(sample, 50);
  const t = performance.now();
  const r = await verifyCertificate({
    certificateText: fs.readFileSync(path.join(dir, 'certificate.json'), 'utf8'),
    bundle,
    logKey: fs.readFileSync(path.join(dir, 'verifier_key.txt'), 'utf8'),
  });
  const secs = (performance.now() - t) / 1000;
  sample();
  clearInterval(timer);
  const mb = (x) => (x / 1048576).toFixed(0);
  console.log(r.ok ? `PASS ${r.summary.entries} entries, ${r.summary.multiproof_nodes} nodes` : `FAIL ${JSON.stringify(r.failure)}`);
  console.log(`bundle ${(bundle.size / 1e6).toFixed(1)} MB verified in ${secs.toFixed(1)} s (${(bundle.size / 1e6 / secs).toFixed(1)} MB/s); peak RSS ${mb(peakRss)} MiB, peak JS heap + buffers ${mb(peakHeap)} MiB`);
  if (!r.ok) process.exit(1);
}

if (mode === 'generate') generate(Number(args[0] ?? 170000), Number(args[1] ?? 1), args[2] ?? 'target/console-bench');
else if (mode === 'verify') await verifyDir(args[0] ?? 'target/console-bench');
else {
  console.error('usage: bench.mjs generate RECORDS KEEP_EVERY DIR | verify DIR');
  process.exit(2);
}
