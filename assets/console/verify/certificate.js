// Compute-usage certificates (docs/PROTOCOL.md §13) checked with their bundle (§15 steps 3,
// 5, 6 and 7): the certificate's own signature under its own tag (§13.4), its checkpoint and
// subject against the bundle's header, each record covered (§13.1), the covered-entries
// commitment (§13.3) and the lines and totals recomputed exactly (§13.2).

import { canonicalize, concat, parseStrict, utf8, b64decode, b64encode } from './jcs.js';
import { Dec } from './decimal.js';
import { Frontier, leafHash } from './merkle.js';
import { Failure } from './result.js';

/** The certificate signature's tag (§13.4). */
export const CERTIFICATE_TAG = 'gpuledger-certificate/v1';

const MEMBERS = ['v', 'id', 'tenant', 'period_from', 'period_to', 'scope', 'issued_at', 'log_origin',
  'checkpoint', 'entries', 'gpu', 'energy', 'totals', 'sig'];
const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

/** Parses certificate JSON text; throws Failure `malformed` (item `certificate`). */
export function parseCertificate(text) {
  const malformed = (m) => new Failure('malformed', 'certificate', m);
  let c;
  try {
    c = parseStrict(text.replace(/^\uFEFF/, '').trim());
  } catch (e) {
    throw malformed(`not JSON: ${e.message}`);
  }
  if (!isObject(c)) throw malformed('not a JSON object');
  for (const k of MEMBERS) if (!(k in c)) throw malformed(`no member ${k}`);
  for (const k of Object.keys(c)) if (!MEMBERS.includes(k)) throw malformed(`unknown member ${k}`);
  if (c.v !== 1) throw malformed('v is not 1');
  for (const k of ['id', 'tenant', 'period_from', 'period_to', 'issued_at', 'log_origin', 'checkpoint', 'sig']) {
    if (typeof c[k] !== 'string') throw malformed(`${k} is not a string`);
  }
  if (!isObject(c.scope) || !isObject(c.entries) || !isObject(c.totals)) throw malformed('scope, entries and totals are objects');
  if (!Array.isArray(c.gpu) || !Array.isArray(c.energy)) throw malformed('gpu and energy are arrays');
  if (![...c.gpu, ...c.energy].every(isObject)) throw malformed('gpu and energy lines are objects');
  if (!Number.isSafeInteger(c.entries.count) || typeof c.entries.commitment !== 'string') {
    throw malformed('entries is {count, commitment}');
  }
  const scope = c.scope;
  for (const k of Object.keys(scope)) if (!['lease', 'nodes', 'region'].includes(k)) throw malformed(`unknown scope member ${k}`);
  if ('nodes' in scope && !(Array.isArray(scope.nodes) && scope.nodes.every((n) => typeof n === 'string'))) {
    throw malformed('scope.nodes is a list of ids');
  }
  return c;
}

/** §13.4: the signed message of a parsed certificate. */
export function signedMessage(cert) {
  const unsigned = Object.assign(Object.create(null), cert);
  delete unsigned.sig;
  return concat(utf8(`${CERTIFICATE_TAG}\n`), utf8(canonicalize(unsigned)));
}

/** Verifies the certificate's signature with the log key (§15 step 3); throws Failure. */
export async function checkCertificateSignature(cert, logKey) {
  const sig = b64decode(cert.sig);
  if (!sig || sig.length !== 64 || !(await logKey.key.verify(signedMessage(cert), sig))) {
    throw new Failure('certificate_signature', 'certificate', 'the signature does not verify with the log key');
  }
}

/**
 * The first member where two claim objects differ, named as `gpu[0].gpu_seconds`,
 * `totals.kwh`, `energy (length)`; decimals compare as numbers. null when equal.
 */
export function firstDifference(path, a, b) {
  const join = (k) => (path ? `${path}.${k}` : k);
  if (isObject(a) && isObject(b)) {
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
    for (const k of keys) {
      if (!(k in a) || !(k in b)) return join(k);
      const d = firstDifference(join(k), a[k], b[k]);
      if (d) return d;
    }
    return null;
  }
  if (Array.isArray(a) && Array.isArray(b)) {
    for (let k = 0; k < Math.min(a.length, b.length); k++) {
      const d = firstDifference(`${path}[${k}]`, a[k], b[k]);
      if (d) return d;
    }
    return a.length !== b.length ? `${path} (length)` : null;
  }
  if (typeof a === 'string' && typeof b === 'string') {
    const x = Dec.parse(a);
    const y = Dec.parse(b);
    const same = x && y ? x.cmp(y) === 0 : a === b;
    return same ? null : path;
  }
  return a === b ? null : path;
}

/**
 * The certificate as a bundle subject (bundle.js): checks the header against it (§15 step 3)
 * and recomputes its claims from the records as they pass (steps 5–7).
 */
export class CertificateCheck {
  constructor(cert) {
    this.cert = cert;
    this.tenant = cert.tenant;
    /** region → [{effective_from, pue, carbon}] from the context's region_params. */
    this.params = new Map();
    this.gpu = new Map();
    this.energy = new Map();
    this.commitment = new Frontier();
    this.count = 0;
    this.lastIndex = -1;
  }

  /** §15 step 3 after the signature: the checkpoint, origin and subject are the bundle's. */
  checkHeader(header, anchor) {
    const mismatch = (m) => new Failure('checkpoint_mismatch', 'certificate', m);
    if (this.cert.checkpoint !== anchor.note) throw mismatch("its checkpoint is not the bundle's");
    if (this.cert.log_origin !== anchor.origin) throw mismatch("its log_origin is not the checkpoint's origin");
    if (header.subject.certificate !== this.cert.id) throw mismatch('the bundle is not for this certificate');
  }

  async context(index, e) {
    if (e.kind !== 'region_params') return;
    const b = e.body;
    const list = this.params.get(b.region) ?? [];
    list.push({ from: b.effective_from, pue: b.pue, carbon: b.carbon_g_per_kwh });
    this.params.set(b.region, list);
  }

  async record(index, hash, e) {
    const c = this.cert;
    const b = e.body;
    const item = `entry ${index}`;
    if (b.tenant !== c.tenant) throw new Failure('wrong_tenant', item, `the record is not ${c.tenant}'s`);
    if (!(c.period_from <= b.start && b.start < c.period_to)) {
      throw new Failure('outside_period', item, `the record starts at ${b.start}, outside the period`);
    }
    const s = c.scope;
    const inScope =
      (!('lease' in s) || (e.kind === 'gpu_usage' && b.lease === s.lease)) &&
      (!('nodes' in s) || s.nodes.includes(b.node)) &&
      (!('region' in s) || b.region === s.region);
    if (!inScope) throw new Failure('outside_scope', item, "the record is outside the certificate's scope");
    if (index <= this.lastIndex) throw new Failure('order', item, 'records must increase');
    this.lastIndex = index;
    const itemBytes = new Uint8Array(40);
    new DataView(itemBytes.buffer).setBigUint64(0, BigInt(index));
    itemBytes.set(hash, 8);
    await this.commitment.push(leafHash(itemBytes));
    this.count++;
    if (e.kind === 'gpu_usage') {
      const key = JSON.stringify([b.region, b.gpu_model]);
      const line = this.gpu.get(key) ?? { region: b.region, gpu_model: b.gpu_model, sum: Dec.zero(), records: 0 };
      line.sum = line.sum.add(Dec.parse(b.gpu_seconds));
      line.records++;
      this.gpu.set(key, line);
    } else {
      // The parameters in force: the latest effective_from not after the record's start.
      let p = null;
      for (const x of this.params.get(b.region) ?? []) if (x.from <= b.start && (!p || x.from > p.from)) p = x;
      const key = JSON.stringify([b.region, p ? [p.pue, p.carbon] : null]);
      const line = this.energy.get(key) ?? { region: b.region, params: p, sum: Dec.zero(), records: 0 };
      line.sum = line.sum.add(Dec.parse(b.kwh));
      line.records++;
      this.energy.set(key, line);
    }
  }

  /** The claims recomputed from the records (§13.2, §13.3), in the certificate's shape. */
  async computed() {
    const byteOrder = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
    const gpu = [...this.gpu.values()].sort((x, y) => byteOrder(x.region, y.region) || byteOrder(x.gpu_model, y.gpu_model));
    const energy = [...this.energy.values()].sort((x, y) => {
      if (x.region !== y.region) return byteOrder(x.region, y.region);
      if (!x.params || !y.params) return (x.params ? 1 : 0) - (y.params ? 1 : 0);
      return Dec.parse(x.params.pue).cmp(Dec.parse(y.params.pue)) || Dec.parse(x.params.carbon).cmp(Dec.parse(y.params.carbon));
    });
    const totals = { gpu: Dec.zero(), kwh: Dec.zero(), withPue: Dec.zero(), carbon: Dec.zero(), without: Dec.zero() };
    const gpuLines = gpu.map((l) => {
      totals.gpu = totals.gpu.add(l.sum);
      return { gpu_model: l.gpu_model, gpu_seconds: l.sum.toString(), records: l.records, region: l.region };
    });
    const energyLines = energy.map((l) => {
      totals.kwh = totals.kwh.add(l.sum);
      const line = { kwh: l.sum.toString(), records: l.records, region: l.region };
      if (!l.params) {
        totals.without = totals.without.add(l.sum);
        return line;
      }
      const withPue = l.sum.mul(Dec.parse(l.params.pue));
      const carbonKg = withPue.mul(Dec.parse(l.params.carbon)).shift(3);
      totals.withPue = totals.withPue.add(withPue);
      totals.carbon = totals.carbon.add(carbonKg);
      return Object.assign(line, {
        carbon_g_per_kwh: l.params.carbon,
        carbon_kg: carbonKg.toString(),
        kwh_with_pue: withPue.toString(),
        pue: l.params.pue,
      });
    });
    return {
      entries: { commitment: b64encode(await this.commitment.root()), count: this.count },
      gpu: gpuLines,
      energy: energyLines,
      totals: {
        carbon_kg: totals.carbon.toString(),
        gpu_seconds: totals.gpu.toString(),
        kwh: totals.kwh.toString(),
        kwh_with_pue: totals.withPue.toString(),
        kwh_without_region_params: totals.without.toString(),
        records: this.count,
      },
    };
  }

  /** §15 steps 6 and 7: the recomputed claims equal the certificate's; throws Failure. */
  async finish() {
    const computed = await this.computed();
    const c = this.cert;
    if (c.entries.count !== computed.entries.count) {
      throw new Failure('entries_mismatch', 'entries.count', `the certificate claims ${c.entries.count} entries, the bundle's records are ${computed.entries.count}`);
    }
    if (c.entries.commitment !== computed.entries.commitment) {
      throw new Failure('entries_mismatch', 'entries.commitment', `the commitment to the bundle's records is ${computed.entries.commitment}`);
    }
    const claimed = { energy: c.energy, gpu: c.gpu, totals: c.totals };
    const mine = { energy: computed.energy, gpu: computed.gpu, totals: computed.totals };
    const d = firstDifference('', claimed, mine);
    if (d) throw new Failure('claim_mismatch', d, "the certificate's claim differs from the value recomputed from the bundle");
    return computed;
  }
}
