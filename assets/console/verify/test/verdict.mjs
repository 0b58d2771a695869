// The console verifier's verdict on one bundle file, as `gpuledger verify --json` gives it:
//   node verdict.mjs BUNDLE_FILE VERIFIER_KEY_FILE
// prints {"result":"PASS"} or {"result":"FAIL","reason":…,"item":…,"message":…}. Used by
// tests/trust.rs so that every admission rule is judged by the browser's code too.
import fs from 'node:fs';
import * as verify from '../index.js';

const [bundleFile, keyFile] = process.argv.slice(2);
if (!bundleFile || !keyFile) {
  process.stderr.write('usage: node verdict.mjs BUNDLE_FILE VERIFIER_KEY_FILE\n');
  process.exit(2);
}
const r = await verify.verifyBundle({
  bundle: fs.readFileSync(bundleFile, 'utf8'),
  logKey: fs.readFileSync(keyFile, 'utf8').trim(),
});
const out = r.ok
  ? { result: 'PASS' }
  : { result: 'FAIL', reason: r.failure.reason, item: r.failure.item, message: r.failure.message };
process.stdout.write(JSON.stringify(out) + '\n');
process.exit(r.ok ? 0 : 1);
