// The verifier in a real browser: serves the repository's verifier modules and fixtures on
// 127.0.0.1, opens a page in headless Chromium that runs the verifier on them (PASS on the
// committed certificate with both bundle formats, a checkpoint, a consistency proof and a
// witnessed checkpoint; FAIL with the right reason on tampered copies) and posts the verdicts
// back. Run by run.mjs when Chromium is installed (`chromium`, or the path in CHROMIUM);
// alone: `node assets/console/verify/test/browser.mjs`; `... browser.mjs bench DIR` verifies the
// large bundle that bench.mjs generated in DIR in Chromium and prints time and peak JS heap.
// Exit status 0 when every verdict is
// the expected one, 1 otherwise, 3 when no Chromium is found.

import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { spawn, execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../../../..');
/** How long the browser may take, start to verdicts. */
const TIMEOUT_MS = Number(process.env.BROWSER_TIMEOUT_MS || 90_000);

export function findChromium() {
  if (process.env.CHROMIUM) return process.env.CHROMIUM;
  for (const name of ['chromium', 'chromium-browser', 'google-chrome']) {
    try {
      return execFileSync('which', [name], { encoding: 'utf8' }).trim();
    } catch {
      // not this one
    }
  }
  return null;
}

// The page's script: runs in the browser, imports the shipped module by a relative URL.
const PAGE_SCRIPT = `
import * as v from '/assets/console/verify/index.js';
const get = async (p) => (await fetch(p)).text();
const blob = async (p) => (await fetch(p)).blob();
const f = '/tests/fixtures/certificate/';
const results = {};
try {
  const logKey = await get(f + 'verifier_key.txt');
  const cert = await get(f + 'certificate.json');
  const v3 = await get(f + 'bundle.v3.ndjson');
  const verdict = (r) => (r.ok ? 'PASS' : r.failure.reason);
  results.ed25519 = crypto.subtle && (await crypto.subtle.generateKey({ name: 'Ed25519' }, false, ['sign'])) ? 'yes' : 'no';
  results.v3 = verdict(await v.verifyCertificate({ certificateText: cert, bundle: await blob(f + 'bundle.v3.ndjson'), logKey }));
  results.v2 = verdict(await v.verifyCertificate({ certificateText: cert, bundle: await blob(f + 'bundle.ndjson'), logKey }));
  const lines = v3.split('\\n');
  const n = lines.findIndex((l) => l.startsWith('{"hashes":'));
  lines[n] = lines[n].replace(/^\\{"hashes":\\["(.)/, (m, ch) => '{"hashes":["' + (ch === 'A' ? 'B' : 'A'));
  results.tampered_node = verdict(await v.verifyCertificate({ certificateText: cert, bundle: new Blob([lines.join('\\n')]), logKey }));
  results.dropped_end = verdict(await v.verifyBundle({ bundle: new Blob([v3.split('\\n').filter((l) => !l.includes('"type":"end"')).join('\\n')]), logKey }));
  let progressed = 0;
  results.stream = verdict(await v.verifyBundle({ bundle: (await blob(f + 'bundle.v3.ndjson')).stream(), logKey, onProgress: (d) => { progressed = d; } }));
  results.progress = progressed > 0 ? 'yes' : 'no';
  results.checkpoint = verdict(await v.verifyCheckpoint({ noteText: await get(f + 'older_checkpoint.txt'), logKey }));
  results.consistency = verdict(await v.verifyConsistency({ oldNote: await get(f + 'consistency/old.txt'), newNote: await get(f + 'consistency/new.txt'), proof: JSON.parse(await get(f + 'consistency/proof.json')), logKey }));
  const c = '/tests/vectors/cosignature/';
  const witness = (await get(c + 'witness.vkey')).trim();
  const cosLog = (await get(c + 'log.vkey')).trim();
  results.cosigned = verdict(await v.verifyCheckpoint({ noteText: await get(c + 'cosigned.note'), logKey: cosLog, witnesses: [witness], quorum: 1 }));
  results.uncosigned = verdict(await v.verifyCheckpoint({ noteText: await get(c + 'checkpoint.note'), logKey: cosLog, witnesses: [witness], quorum: 1 }));
  results.wrong_key = verdict(await v.verifyCertificate({ certificateText: cert, bundle: v3, logKey: cosLog }));
} catch (e) {
  results.error = String(e && e.stack || e);
}
await fetch('/result', { method: 'POST', body: JSON.stringify(results) });
`;

const EXPECTED = {
  ed25519: 'yes',
  v3: 'PASS',
  v2: 'PASS',
  tampered_node: 'inclusion_proof',
  dropped_end: 'truncated',
  stream: 'PASS',
  progress: 'yes',
  checkpoint: 'PASS',
  consistency: 'PASS',
  cosigned: 'PASS',
  uncosigned: 'witness_quorum',
  wrong_key: 'checkpoint_signature',
};

const TYPES = { '.js': 'text/javascript', '.mjs': 'text/javascript', '.html': 'text/html' };

/** Runs the page in Chromium; resolves to {ok, results, message}. */
export async function runInBrowser(chromium) {
  const results = await runPage(chromium, PAGE_SCRIPT, null);
  const wrong = Object.entries(EXPECTED).filter(([k, v]) => results[k] !== v);
  const ok = !results.error && wrong.length === 0;
  const message = results.error
    ? results.error
    : wrong.map(([k, v]) => `${k}: expected ${v}, got ${results[k]}`).join('; ') || `${Object.keys(EXPECTED).length} verdicts as expected`;
  return { ok, results, message };
}

// The benchmark page: verifies /bench/ (bench.mjs's DIR) and reports time and JS heap.
const BENCH_SCRIPT = `
import * as v from '/assets/console/verify/index.js';
const results = {};
try {
  const get = async (p) => (await fetch(p)).text();
  const bundle = await (await fetch('/bench/bundle.v3.ndjson')).blob();
  let peak = 0;
  const sample = () => { if (performance.memory) peak = Math.max(peak, performance.memory.usedJSHeapSize); };
  const timer = setInterval(sample, 50);
  const t = performance.now();
  const r = await v.verifyCertificate({ certificateText: await get('/bench/certificate.json'), bundle, logKey: await get('/bench/verifier_key.txt') });
  results.seconds = (performance.now() - t) / 1000;
  sample();
  clearInterval(timer);
  results.verdict = r.ok ? 'PASS' : r.failure.reason + ' ' + r.failure.item + ' ' + r.failure.message;
  results.bytes = bundle.size;
  results.entries = r.ok ? r.summary.entries : null;
  results.peak_js_heap_mib = Math.round(peak / 1048576);
} catch (e) {
  results.error = String(e && e.stack || e);
}
await fetch('/result', { method: 'POST', body: JSON.stringify(results) });
`;

/** Serves the page running `script` (and `benchDir` under /bench/), returns what it posts. */
async function runPage(chromium, script, benchDir) {
  let resolveResult;
  const result = new Promise((r) => {
    resolveResult = r;
  });
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://127.0.0.1');
    if (req.method === 'POST' && url.pathname === '/result') {
      let body = '';
      req.on('data', (d) => {
        body += d;
      });
      req.on('end', () => {
        res.end('ok');
        resolveResult(JSON.parse(body));
      });
      return;
    }
    if (url.pathname === '/') {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end(`<!doctype html><meta charset="utf-8"><title>verifier</title><script type="module" src="/page.js"></script>`);
      return;
    }
    if (url.pathname === '/page.js') {
      res.writeHead(200, { 'content-type': 'text/javascript' });
      res.end(script);
      return;
    }
    if (benchDir && url.pathname.startsWith('/bench/')) {
      const name = path.basename(url.pathname);
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      fs.createReadStream(path.join(benchDir, name)).pipe(res);
      return;
    }
    const allowed = ['/assets/console/verify/', '/tests/fixtures/certificate/', '/tests/vectors/cosignature/'];
    const file = path.normalize(path.join(root, decodeURIComponent(url.pathname)));
    if (!allowed.some((a) => url.pathname.startsWith(a)) || !file.startsWith(root) || !fs.existsSync(file)) {
      res.writeHead(404);
      res.end();
      return;
    }
    res.writeHead(200, { 'content-type': TYPES[path.extname(file)] ?? 'application/octet-stream' });
    res.end(fs.readFileSync(file));
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const port = server.address().port;
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'console-verify-chromium-'));
  const browser = spawn(chromium, [
    '--headless=new', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-dev-shm-usage',
    `--user-data-dir=${profile}`, `http://127.0.0.1:${port}/`,
  ], { stdio: 'ignore', detached: true });
  const exited = new Promise((r) => browser.on('exit', r));
  let timer;
  const timeout = new Promise((r) => {
    timer = setTimeout(() => r({ error: `no verdicts from the browser within ${TIMEOUT_MS / 1000} s` }), TIMEOUT_MS);
  });
  const results = await Promise.race([result, timeout]);
  clearTimeout(timer);
  // Chromium's helper processes are in its process group (detached above): end them all.
  try {
    process.kill(-browser.pid, 'SIGKILL');
  } catch {
    browser.kill('SIGKILL');
  }
  await exited;
  server.close();
  fs.rmSync(profile, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
  return results;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const chromium = findChromium();
  if (!chromium) {
    console.log('no Chromium found (set CHROMIUM)');
    process.exit(3);
  }
  if (process.argv[2] === 'bench') {
    console.log(JSON.stringify(await runPage(chromium, BENCH_SCRIPT, path.resolve(process.argv[3]))));
    process.exit(0);
  }
  const r = await runInBrowser(chromium);
  console.log(JSON.stringify(r.results, null, 1));
  console.log(r.ok ? `ok: ${r.message}` : `FAIL: ${r.message}`);
  process.exit(r.ok ? 0 : 1);
}
