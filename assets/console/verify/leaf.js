// Leaves (docs/PROTOCOL.md §7) and the envelope checks that need no registry (§4, and the
// field rules of §5), with the signed message of §4.1.
//
// Every kind's body is checked as `gpuledger verify` checks it (crates/core/src/record.rs):
// every member's presence and form and no other member, identifiers (not the reserved
// `ledger`), timestamps, canonical decimals within their limits, money amounts, currencies,
// text shown to people (a contract fee's name: ids.rs `check_display_text`), amounts within
// their currency's minor unit (a prepayment's: rating.rs `minor_units`), and the rules
// the certificate's sums and the key registry rely on (gpu_seconds = gpu_count × duration,
// interval limits, the key id and §3.1 validity of a registered key). Any failure here is
// `leaf_invalid`.

import { b64decode, canonicalize, parseStrict, utf8 } from './jcs.js';
import { Dec } from './decimal.js';
import { keyProblem } from './ed25519.js';
import { envelopeKeyId } from './note.js';

/** `MAX_ENVELOPE_BYTES` (§4.2). */
export const MAX_ENVELOPE_BYTES = 8192;
/** `MAX_INTERVAL_SECONDS` (§5.1). */
export const MAX_INTERVAL_SECONDS = 86400;
/** `MAX_GPU_COUNT` (§5.1). */
export const MAX_GPU_COUNT = Dec.int(1024);
/** `MAX_KWH_PER_RECORD` (§5.2). */
export const MAX_KWH_PER_RECORD = Dec.int(100000);
/** Bounds of `log_policy.max_record_age_seconds` (§6.7): 1 hour to 365 days. */
export const POLICY_RECORD_AGE_SECONDS = [3600, 365 * 86400];
/** Bounds of `log_policy.max_future_skew_seconds` (§6.7): 0 to 1 hour. */
export const POLICY_FUTURE_SKEW_SECONDS = [0, 3600];
/** Identifiers no body may name (§2.3). */
export const RESERVED_IDS = new Set(['ledger']);
/** `MAX_PRICE_PER_GPU_HOUR` (§5). */
export const MAX_PRICE_PER_GPU_HOUR = Dec.int(1000000);
/** `MAX_MONEY_AMOUNT` (§5). */
export const MAX_MONEY_AMOUNT = Dec.int(1000000000000);
/** `MAX_VOLUME_TIERS` (§5). */
export const MAX_VOLUME_TIERS = 16;
/** `MAX_TIER_BOUND_GPU_HOURS` (§5). */
export const MAX_TIER_BOUND_GPU_HOURS = Dec.int(1000000000);
/** `MAX_NODE_GPUS`: a node_registered or node_updated entry lists 1 to 64 GPUs, and a node has at most 64 after its updates. */
export const MAX_NODE_GPUS = 64;
/** `MAX_MIG_SLICES`: a MIG-partitioned GPU has 1 to 8 compute slices, 1 to 8 profiles, 1 to 8 instances of each. */
export const MAX_MIG_SLICES = 8;
/** `GPU_UNITS`: a GPU in the units shares of differently partitioned GPUs add up in (lcm of 1 to 8). */
export const GPU_UNITS = 840;
/** `MAX_WATTS_PER_GPU`: the highest max_watts_per_gpu a node may declare. */
export const MAX_WATTS_PER_GPU = Dec.int(5000);
/** `MAX_LEASE_NODES`: a lease_registered entry covers 1 to 64 items (§5.8). */
export const MAX_LEASE_NODES = 64;
/** `MAX_EXCLUSION_REASON_BYTES`: a record_excluded or contract_amended entry's reason is 1 to 500 bytes (§5.17, §5.21). */
export const MAX_EXCLUSION_REASON_BYTES = 500;
/** `MAX_CONTRACT_FEES`: a contract_registered entry lists 1 to 16 fees (§5.19). */
export const MAX_CONTRACT_FEES = 16;
/** `MAX_FEE_NAME_BYTES`: a contract fee's name is 1 to 100 bytes of text for people (§5.19). */
export const MAX_FEE_NAME_BYTES = 100;
/** `MAX_CONTRACT_TERM_SECONDS`: a contract's term is at most 3660 days (§5.19). */
export const MAX_CONTRACT_TERM_SECONDS = 316224000;
/** `MAX_SLA_STEPS`: a contract's SLA lists 1 to 8 credit steps (§5.19). */
export const MAX_SLA_STEPS = 8;
/** `MAX_INCLUDED_MODELS`: a contract fee's `included` lists 1 to 8 GPU models (§5.19). */
export const MAX_INCLUDED_MODELS = 8;
/** A contract's billing periods, anchors, and its fees' timings and categories (§5.19). */
export const BILLING_PERIODS = new Set(['month', 'quarter', 'year']);
export const BILLING_ANCHORS = new Set(['calendar', 'anniversary']);
export const FEE_TIMINGS = new Set(['advance', 'arrears', 'once']);
export const FEE_CATEGORIES = new Set(['compute', 'networking', 'storage', 'support', 'other']);
/** `MAX_EXTERNAL_REFERENCE_BYTES`: a settlement's external_reference and a prepayment's reference are 1 to 128 bytes (§5.10, §5.20). */
export const MAX_EXTERNAL_REFERENCE_BYTES = 128;
/** Where a prepayment's money came from (§5.20): grants are drawn before purchases. */
export const PREPAYMENT_SOURCES = new Set(['grant', 'purchase']);
/** Currencies whose minor unit is not 2 digits (docs/RATING.md; rating.rs `minor_units`). */
const MINOR_UNITS = new Map([
  ...['JPY', 'KRW', 'VND', 'CLP', 'ISK', 'UGX'].map((c) => [c, 0]),
  ...['BHD', 'KWD', 'OMR', 'JOD', 'TND', 'IQD', 'LYD'].map((c) => [c, 3]),
]);
/** The digits of a currency's minor unit (rating.rs `minor_units`): 0 or 3 for those listed, else 2. */
export const minorUnits = (currency) => MINOR_UNITS.get(currency) ?? 2;
/** Control characters (Unicode Cc, Rust's `char::is_control`). */
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/u;
/** White space as Rust's `str::trim` removes it (Unicode White_Space; unlike JS's `trim`, not U+FEFF). */
const WHITE_SPACE = /^[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]|[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]$/u;
/** Text that is empty or only white space as Rust's `str::trim` sees it. */
const ONLY_WHITE_SPACE = /^[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$/u;
/**
 * The characters text shown to people may not hold, and why (ids.rs `display_char_refusal`):
 * controls, line and paragraph separators, bidirectional controls, and the invisible format
 * characters that make two strings look alike or hide text. ZWJ and ZWNJ are allowed.
 */
const DISPLAY_REFUSALS = [
  [CONTROL, 'a control character'],
  [/[\u2028\u2029]/u, 'a line or paragraph separator'],
  [/[\u061c\u200e\u200f]/u, 'a bidirectional mark'],
  [/[\u202a-\u202e]/u, 'a bidirectional embedding or override'],
  [/[\u2066-\u2069]/u, 'a bidirectional isolate'],
  [/[\u00ad\u034f\u180e\u200b\u2060-\u2064]/u, 'an invisible format character'],
  [/[\u206a-\u206f]/u, 'a deprecated format character'],
  [/\ufeff/u, 'a byte-order mark (zero-width no-break space)'],
  [/[\ufff9-\ufffb]/u, 'an interlinear annotation character'],
  [/[\u115f\u1160\u3164\uffa0]/u, 'a Hangul filler'],
  [/[\u{e0000}-\u{e007f}]/u, 'a tag character'],
];
/** A GPU's index on its node is a u32. */
export const MAX_GPU_INDEX = 4294967295;
/** A GPU's UUID: 1 to 128 visible ASCII characters. */
const GPU_UUID = /^[\x21-\x7e]{1,128}$/;
/** The lease classes (§5). */
export const LEASE_CLASSES = new Set(['on_demand', 'reserved', 'spot']);
/** `prev` of entry 0: base64 of 32 zero bytes (§7). */
export const GENESIS_PREV = 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=';

/** The ledger kinds (§6.1): signed by the log key, signer `ledger`. */
export const LEDGER_KINDS = new Set([
  'signer_key_registered', 'signer_key_revoked', 'rate_card', 'region_params',
  'lease_registered', 'invoice_issued', 'payment', 'credit_note', 'volume_tiers',
  'tenant_plan', 'certificate_issued', 'tenant_registered', 'log_policy', 'node_registered',
  'record_excluded', 'node_updated', 'contract_registered', 'prepayment', 'contract_amended',
]);
/** What each signer role may sign (§6.1). */
export const ROLE_KINDS = { node: new Set(['gpu_usage', 'energy']), market: new Set(['spot_price']) };
/** Every kind of §5. */
export const KINDS = new Set([...LEDGER_KINDS, 'gpu_usage', 'energy', 'spot_price']);
/** Record kinds: the second part of a bundle (§14). */
export const isRecordKind = (k) => k === 'gpu_usage' || k === 'energy';

const ID = /^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/;
const TIMESTAMP = /^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})Z$/;

/** A MIG profile name `<g>g.<GB>gb` (record.rs `mig_profile_slices`): g 1 to MAX_MIG_SLICES, GB 1 to 9999 without a leading zero. */
const MIG_PROFILE = /^([1-8])g\.[1-9][0-9]{0,3}gb$/;

/** The compute slices of a MIG profile name (record.rs `mig_profile_slices`), or null when it is not one. */
export function migProfileSlices(profile) {
  const m = typeof profile === 'string' ? MIG_PROFILE.exec(profile) : null;
  return m ? Number(m[1]) : null;
}

/** An envelope or leaf that fails a check: the caller reports it as `leaf_invalid`. */
export class LeafError extends Error {}

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

const leap = (y) => (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;
const DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/** Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's days_from_civil). */
function daysFromCivil(y, m, d) {
  const yy = m <= 2 ? y - 1 : y;
  const era = Math.floor(yy / 400);
  const yoe = yy - era * 400;
  const doy = Math.floor((153 * (m + (m > 2 ? -3 : 9)) + 2) / 5) + d - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146097 + doe - 719468;
}

/** Seconds since the epoch of a §2.2 timestamp, or null when it is not one. */
export function timestampSeconds(s) {
  if (typeof s !== 'string') return null;
  const m = TIMESTAMP.exec(s);
  if (!m) return null;
  const y = +m[1];
  const mo = +m[2];
  const d = +m[3];
  const h = +m[4];
  const mi = +m[5];
  const se = +m[6];
  if (mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || se > 59) return null;
  if (d > (mo === 2 && leap(y) ? 29 : DAYS_IN_MONTH[mo - 1])) return null;
  const secs = daysFromCivil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se;
  if (secs < 946684800 || secs > 253402300799) return null;
  return secs;
}

function members(obj, where, required, optional = []) {
  if (!isObject(obj)) throw new LeafError(`${where} is not an object`);
  for (const k of required) if (!(k in obj)) throw new LeafError(`${where} has no member ${k}`);
  const allowed = new Set([...required, ...optional]);
  for (const k of Object.keys(obj)) if (!allowed.has(k)) throw new LeafError(`${where} has an unknown member ${k}`);
}

const check = (ok, m) => {
  if (!ok) throw new LeafError(m);
};
const id = (v, f) => check(typeof v === 'string' && ID.test(v), `${f} is not an identifier`);
/** An identifier a body names (§2.3): not one reserved for the ledger itself. */
const bodyId = (v, f) => {
  id(v, f);
  check(!RESERVED_IDS.has(v), `${f} ${JSON.stringify(v)} is reserved for the ledger itself`);
};
const ts = (v, f) => check(timestampSeconds(v) !== null, `${f} is not a timestamp`);
function dec(v, f) {
  const d = Dec.parseCanonical(v);
  check(d !== null, `${f} is not a canonical decimal`);
  return d;
}
function quantity(v, max, f) {
  const d = dec(v, f);
  check(d.cmp(max) <= 0, `quantity_out_of_range: ${f} is above the limit`);
  return d;
}
const currency = (v, f) => check(typeof v === 'string' && /^[A-Z]{3}$/.test(v), `${f} is not an ISO 4217 code`);
const sha256Hex = (v, f) => check(typeof v === 'string' && /^[0-9a-f]{64}$/.test(v), `${f} must be 64 lower-case hex digits`);
const size = (v, f) => check(Number.isSafeInteger(v) && v >= 0, `${f} is not a size`);
/** A money amount (§5): digits with at most 4 after the point, trailing zeros kept, at most MAX_MONEY_AMOUNT. */
function money(v, f) {
  check(typeof v === 'string' && v.length <= 24 && /^(0|[1-9][0-9]*)(\.[0-9]{1,4})?$/.test(v), `${f} is not an amount (digits, at most 4 after the point)`);
  const d = Dec.parse(v);
  check(d.cmp(MAX_MONEY_AMOUNT) <= 0, `quantity_out_of_range: ${f} is above ${MAX_MONEY_AMOUNT}`);
  return d;
}
function idList(v, f, max) {
  check(Array.isArray(v) && v.length >= 1 && v.length <= max, `${f} must hold 1 to ${max} identifiers`);
  v.forEach((x, k) => bodyId(x, `${f}[${k}]`));
  for (let k = 1; k < v.length; k++) check(v[k - 1] < v[k], `${f} is not strictly increasing`);
}
function interval(b) {
  ts(b.start, 'body.start');
  ts(b.end, 'body.end');
  const secs = timestampSeconds(b.end) - timestampSeconds(b.start);
  check(secs > 0, 'empty_interval: body.end is not after body.start');
  check(secs <= MAX_INTERVAL_SECONDS, 'interval_too_long: body.end − body.start is over 86400 s');
  return secs;
}

/**
 * A lease's items (§5.8, record.rs `lease_nodes`): 1 to MAX_LEASE_NODES, each either GPUs (1 to
 * MAX_NODE_GPUS indexes, strictly increasing, with an optional share above 0 and below 1) or a
 * GPU model (or MIG profile `<model>/<profile>`) with a count above 0 and at most
 * MAX_NODE_GPUS × MAX_MIG_SLICES; no GPU of a node, and no model of a
 * node's counts, listed twice. Their shape is checked already.
 */
function leaseItems(items) {
  check(items.length >= 1, `invalid_field: body.nodes: a lease covers 1 to ${MAX_LEASE_NODES} items`);
  check(items.length <= MAX_LEASE_NODES, `quantity_out_of_range: body.nodes: a lease covers 1 to ${MAX_LEASE_NODES} items`);
  const seen = new Set();
  items.forEach((n, i) => {
    const f = `body.nodes[${i}]`;
    bodyId(n.node, `${f}.node`);
    if ('gpus' in n && !('gpu_model' in n) && !('count' in n)) {
      check(n.gpus.length >= 1 && n.gpus.length <= MAX_NODE_GPUS, `quantity_out_of_range: ${f}.gpus lists 1 to ${MAX_NODE_GPUS} GPUs`);
      for (let k = 1; k < n.gpus.length; k++) {
        check(n.gpus[k] > n.gpus[k - 1], `invalid_field: ${f}.gpus: GPUs are listed by strictly increasing index`);
      }
      for (const g of n.gpus) {
        const key = `${n.node}\u0000gpu\u0000${g}`;
        check(!seen.has(key), `invalid_field: ${f}.gpus: GPU ${g} of ${n.node} is listed twice`);
        seen.add(key);
      }
      if ('share' in n) {
        const share = quantity(n.share, Dec.int(1), `${f}.share`);
        check(share.cmp(Dec.zero()) > 0 && share.cmp(Dec.int(1)) < 0, `quantity_out_of_range: ${f}.share is above 0 and below 1 (whole GPUs have no share)`);
      }
    } else if (!('gpus' in n) && 'gpu_model' in n && 'count' in n && !('share' in n)) {
      bodyId(n.gpu_model, `${f}.gpu_model`);
      // A count of a model may be of MIG instances: up to MAX_NODE_GPUS × MAX_MIG_SLICES.
      const count = quantity(n.count, Dec.int(MAX_NODE_GPUS * MAX_MIG_SLICES), `${f}.count`);
      check(count.cmp(Dec.zero()) > 0, `quantity_out_of_range: ${f}.count must be above 0`);
      const key = `${n.node}\u0000model\u0000${n.gpu_model}`;
      check(!seen.has(key), `invalid_field: ${f}.gpu_model: ${n.gpu_model} of ${n.node} is listed twice`);
      seen.add(key);
    } else {
      throw new LeafError(`invalid_field: ${f} covers either gpus (with an optional share) or a gpu_model with a count`);
    }
  });
}

/** A u32 (serde's part of reading one). */
const isU32 = (v) => Number.isSafeInteger(v) && v >= 0 && v <= MAX_GPU_INDEX;

/**
 * The shape of a node's GPUs as serde reads `Vec<NodeGpu>` (record.rs): an array of exactly
 * {index, uuid, model} and an optional `mig` (never null) of exactly {slices, instances}, each
 * instance exactly {profile, count}; index, slices and count u32s.
 */
function nodeGpusShape(gpus) {
  check(Array.isArray(gpus), 'body.gpus is not an array');
  gpus.forEach((g, i) => {
    const f = `body.gpus[${i}]`;
    members(g, f, ['index', 'uuid', 'model'], ['mig']);
    check(isU32(g.index), `${f}.index is not an integer 0 to ${MAX_GPU_INDEX}`);
    check(typeof g.uuid === 'string', `${f}.uuid is not a string`);
    check(typeof g.model === 'string', `${f}.model is not a string`);
    if ('mig' in g) {
      members(g.mig, `${f}.mig`, ['slices', 'instances']);
      check(isU32(g.mig.slices), `${f}.mig.slices is not an integer 0 to ${MAX_GPU_INDEX}`);
      check(Array.isArray(g.mig.instances), `${f}.mig.instances is not an array`);
      g.mig.instances.forEach((inst, j) => {
        const at = `${f}.mig.instances[${j}]`;
        members(inst, at, ['profile', 'count']);
        check(typeof inst.profile === 'string', `${at}.profile is not a string`);
        check(isU32(inst.count), `${at}.count is not an integer 0 to ${MAX_GPU_INDEX}`);
      });
    }
  });
}

/**
 * The GPUs of a node_registered or node_updated entry (record.rs `node_gpus`): 1 to
 * MAX_NODE_GPUS, by strictly increasing index, UUIDs of visible ASCII and distinct, models
 * identifiers, MIG partitions whole (migLayout), GPU by GPU, each partitioned GPU into the
 * slices of the earlier partitioned GPUs of its model (migSlicesDiffer). Their shape is
 * checked already.
 */
function nodeGpus(gpus) {
  check(gpus.length >= 1 && gpus.length <= MAX_NODE_GPUS, `quantity_out_of_range: body.gpus lists 1 to ${MAX_NODE_GPUS} GPUs`);
  const uuids = new Set();
  gpus.forEach((g, i) => {
    check(i === 0 || g.index > gpus[i - 1].index, `invalid_field: body.gpus[${i}].index: GPUs are listed by strictly increasing index`);
    check(GPU_UUID.test(g.uuid), `invalid_field: body.gpus[${i}].uuid must be 1 to 128 visible ASCII characters`);
    check(!uuids.has(g.uuid), `invalid_field: body.gpus[${i}].uuid ${g.uuid} is listed twice`);
    uuids.add(g.uuid);
    bodyId(g.model, `body.gpus[${i}].model`);
    if ('mig' in g) {
      migLayout(`body.gpus[${i}].mig`, g.model, g.mig);
      const other = gpus.slice(0, i).find((o) => o.model === g.model && 'mig' in o && o.mig.slices !== g.mig.slices);
      if (other) throw new LeafError(`invalid_field: ${migSlicesDiffer(i, g, other)}`);
    }
  });
}

/**
 * The refusal of GPU `i`, partitioned into other slices than `other`, a partitioned GPU of the
 * same model (record.rs `mig_slices_differ`): one MIG profile of a model is one share of a GPU
 * on a node.
 */
export function migSlicesDiffer(i, g, other) {
  return `body.gpus[${i}].mig.slices: GPU ${g.index} of model ${g.model} has ${g.mig?.slices ?? 0} slices, GPU ${other.index} of the node ${other.mig?.slices ?? 0}: a node's partitioned GPUs of one model have the same slices`;
}

/**
 * A MIG partition (record.rs `mig_layout`): 1 to MAX_MIG_SLICES slices; 1 to MAX_MIG_SLICES
 * profiles, instance by instance: a profile `<g>g.<GB>gb` of at most the GPU's slices, by
 * strictly increasing name, a count of 1 to MAX_MIG_SLICES, `<model>/<profile>` an
 * identifier; then the instances together within the slices.
 */
function migLayout(f, model, layout) {
  check(layout.slices >= 1 && layout.slices <= MAX_MIG_SLICES, `invalid_field: ${f}.slices: a GPU has 1 to ${MAX_MIG_SLICES} compute slices`);
  const n = layout.instances.length;
  check(n >= 1 && n <= MAX_MIG_SLICES, `invalid_field: ${f}.instances lists 1 to ${MAX_MIG_SLICES} profiles`);
  let used = 0;
  layout.instances.forEach((inst, j) => {
    const at = `${f}.instances[${j}]`;
    const g = migProfileSlices(inst.profile);
    check(g !== null && g <= layout.slices, `invalid_field: ${at}.profile is not a MIG profile <g>g.<GB>gb of at most the GPU's ${layout.slices} slices`);
    check(j === 0 || inst.profile > layout.instances[j - 1].profile, `invalid_field: ${at}.profile: profiles are listed once each, by increasing name`);
    check(inst.count >= 1 && inst.count <= MAX_MIG_SLICES, `invalid_field: ${at}.count: 1 to ${MAX_MIG_SLICES} instances`);
    bodyId(`${model}/${inst.profile}`, `${at}.profile`);
    used += g * inst.count;
  });
  check(used <= layout.slices, `invalid_field: ${f}.instances take ${used} compute slices of the GPU's ${layout.slices}`);
}

/**
 * Text shown to people (ids.rs `check_display_text`, the rule of a tenant's display name): not
 * empty nor only white space, at most `max` bytes of UTF-8, and no character
 * DISPLAY_REFUSALS refuses (named by its position and code point). `invalid_field`.
 */
function displayText(v, max, f) {
  check(typeof v === 'string', `${f} is not a string`);
  check(!ONLY_WHITE_SPACE.test(v), `invalid_field: ${f} must not be empty or only white space`);
  check(utf8(v).length <= max, `invalid_field: ${f} is longer than ${max} bytes`);
  let i = 0;
  for (const c of v) {
    i++;
    const refused = DISPLAY_REFUSALS.find(([re]) => re.test(c));
    if (refused) {
      const cp = c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0');
      throw new LeafError(`invalid_field: ${f}: character ${i} is U+${cp}, ${refused[1]}, which is not allowed in text shown to people`);
    }
  }
}

/** A contract's amount (a fee or its commitment, §5.19) or a prepayment's (§5.20): an amount (money) above 0. */
function contractAmount(v, f) {
  const d = money(v, f);
  check(d.cmp(Dec.zero()) > 0, `quantity_out_of_range: ${f} must be above 0`);
  return d;
}

/** A percentage of a contract's SLA (record/contract.rs `percent`): an amount above 0 and at most 100. */
function percentage(v, f) {
  const d = contractAmount(v, f);
  check(d.cmp(Dec.int(100)) <= 0, `quantity_out_of_range: ${f} is a percentage, at most 100`);
  return d;
}

/**
 * A contract's SLA (record/contract.rs `sla`), its shape checked already: the target a
 * percentage below 100 (`quantity_out_of_range`); 1 to MAX_SLA_STEPS credit steps
 * (`invalid_field`, body.sla.credits); step by step, its below then its percent percentages,
 * the below at most the target for the first step and strictly below the step before's for
 * the others (`invalid_field`, body.sla.credits[i].below), the percent strictly above the
 * step before's (`invalid_field`, body.sla.credits[i].percent).
 */
function slaTerms(sla) {
  const target = percentage(sla.target, 'body.sla.target');
  check(target.cmp(Dec.int(100)) < 0, 'quantity_out_of_range: body.sla.target must be below 100: no measurement proves every second');
  const n = sla.credits.length;
  check(n >= 1 && n <= MAX_SLA_STEPS, `invalid_field: body.sla.credits lists ${n} steps; 1 to ${MAX_SLA_STEPS} are allowed`);
  let before = null;
  sla.credits.forEach((step, i) => {
    const f = `body.sla.credits[${i}]`;
    const below = percentage(step.below, `${f}.below`);
    const percent = percentage(step.percent, `${f}.percent`);
    if (before === null) {
      check(below.cmp(target) <= 0, `invalid_field: ${f}.below (${step.below}) must be at most the target (${sla.target})`);
    } else {
      check(below.cmp(before.below) < 0, `invalid_field: ${f}.below (${step.below}) must be below the step before it (${before.step.below})`);
      check(percent.cmp(before.percent) > 0, `invalid_field: ${f}.percent (${step.percent}) must be above the step before it (${before.step.percent}): a lower availability credits more`);
    }
    before = { step, below, percent };
  });
}

/**
 * The GPU-hours fee `fee` (at field `f`, its lease checked already) includes
 * (record/contract.rs, §5.19 `fees[i].included`), its shape checked already: only on a fee that
 * names a lease (`invalid_field`, f.included); 1 to MAX_INCLUDED_MODELS entries (`invalid_field`,
 * f.included); then entry by entry its gpu_model (an identifier, as gpu_usage.gpu_model), its
 * gpu_hours and overage_rate (amounts, 0 allowed, at most MAX_MONEY_AMOUNT), and that the pair
 * (the fee's lease, the model) is not in `seen`, the pairs of the contract's entries before it
 * (`invalid_field`, f.included[j].gpu_model), which it joins.
 */
function includedHours(fee, f, seen) {
  check('lease' in fee, `invalid_field: ${f}.included: GPU-hours are included in the fee of a lease: name the fee's lease`);
  const n = fee.included.length;
  check(n >= 1 && n <= MAX_INCLUDED_MODELS, `invalid_field: ${f}.included lists ${n} GPU models; 1 to ${MAX_INCLUDED_MODELS} are allowed`);
  fee.included.forEach((entry, j) => {
    const at = `${f}.included[${j}]`;
    bodyId(entry.gpu_model, `${at}.gpu_model`);
    money(entry.gpu_hours, `${at}.gpu_hours`);
    money(entry.overage_rate, `${at}.overage_rate`);
    // A lease and a model in one string: an id holds no newline.
    const pair = `${fee.lease}\n${entry.gpu_model}`;
    check(!seen.has(pair), `invalid_field: ${at}.gpu_model: ${entry.gpu_model} of lease ${fee.lease} is included twice in the contract: a lease and model are included at most once`);
    seen.add(pair);
  });
}

/**
 * One line of text for people that is a reference or a reason (record.rs `trimmed_text`): 1 to
 * `max` bytes, no control characters, no white space at either end as Rust's `str::trim`
 * sees it. `invalid_field`.
 */
function trimmedText(v, max, f) {
  check(typeof v === 'string', `${f} is not a string`);
  check(v.length > 0 && utf8(v).length <= max && !WHITE_SPACE.test(v) && !CONTROL.test(v),
    `invalid_field: ${f}: 1 to ${max} bytes without control characters or surrounding spaces`);
}

/** The decimal places an amount (money) is written with: `5000.00` has 2, `5000` none. */
const decimalPlaces = (v) => {
  const dot = v.indexOf('.');
  return dot < 0 ? 0 : v.length - dot - 1;
};

/** A node's power limit per GPU (record.rs `watts`): above 0 and at most MAX_WATTS_PER_GPU. */
function watts(v) {
  const w = quantity(v, MAX_WATTS_PER_GPU, 'body.max_watts_per_gpu');
  check(w.cmp(Dec.zero()) > 0, 'quantity_out_of_range: body.max_watts_per_gpu must be above 0');
  return w;
}

/** The body checks this verifier makes (see the module docs). */
async function checkBody(kind, b) {
  switch (kind) {
    case 'gpu_usage': {
      members(b, 'body', ['tenant', 'region', 'node', 'gpu_model', 'gpu_count', 'start', 'end', 'gpu_seconds'], ['lease']);
      bodyId(b.tenant, 'body.tenant');
      if ('lease' in b) bodyId(b.lease, 'body.lease');
      bodyId(b.region, 'body.region');
      bodyId(b.node, 'body.node');
      bodyId(b.gpu_model, 'body.gpu_model');
      const count = dec(b.gpu_count, 'body.gpu_count');
      check(count.cmp(Dec.zero()) > 0 && count.cmp(MAX_GPU_COUNT) <= 0, 'body.gpu_count is out of range');
      const secs = interval(b);
      const gs = dec(b.gpu_seconds, 'body.gpu_seconds');
      check(gs.cmp(count.mul(Dec.int(secs))) === 0, 'gpu_seconds_mismatch: body.gpu_seconds is not gpu_count × (end − start)');
      return;
    }
    case 'energy': {
      members(b, 'body', ['region', 'node', 'start', 'end', 'kwh'], ['tenant']);
      if ('tenant' in b) bodyId(b.tenant, 'body.tenant');
      bodyId(b.region, 'body.region');
      bodyId(b.node, 'body.node');
      interval(b);
      const kwh = dec(b.kwh, 'body.kwh');
      check(kwh.cmp(MAX_KWH_PER_RECORD) <= 0, 'body.kwh is out of range');
      return;
    }
    case 'signer_key_registered': {
      members(b, 'body', ['signer', 'role', 'key_id', 'public_key', 'regions'], ['nodes']);
      bodyId(b.signer, 'body.signer');
      check(b.role === 'node' || b.role === 'market', 'body.role is not node or market');
      const pk = b64decode(b.public_key);
      check(pk !== null && pk.length === 32, 'body.public_key is not base64 of 32 bytes');
      const problem = keyProblem(pk);
      check(problem === null, `body.public_key is not a valid key: ${problem}`);
      check(b.key_id === (await envelopeKeyId(pk)), 'body.key_id is not the key id of body.public_key');
      if (b.role === 'node') {
        check('nodes' in b, 'body.nodes is required for a node key');
        idList(b.nodes, 'body.nodes', 256);
      } else {
        check(!('nodes' in b), 'body.nodes must be absent for a market key');
      }
      idList(b.regions, 'body.regions', 64);
      return;
    }
    case 'signer_key_revoked':
      members(b, 'body', ['signer', 'key_id'], ['reason']);
      bodyId(b.signer, 'body.signer');
      check(typeof b.key_id === 'string' && /^[0-9a-f]{16}$/.test(b.key_id), 'body.key_id is not a key id');
      if ('reason' in b) check(typeof b.reason === 'string', 'body.reason is not a string');
      return;
    case 'region_params':
      members(b, 'body', ['region', 'currency', 'electricity_price_per_kwh', 'pue', 'carbon_g_per_kwh', 'effective_from']);
      bodyId(b.region, 'body.region');
      check(typeof b.currency === 'string' && /^[A-Z]{3}$/.test(b.currency), 'body.currency is not an ISO 4217 code');
      quantity(b.electricity_price_per_kwh, Dec.int(1000), 'body.electricity_price_per_kwh');
      check(quantity(b.pue, Dec.int(5), 'body.pue').cmp(Dec.int(1)) >= 0, 'quantity_out_of_range: body.pue must be at least 1');
      quantity(b.carbon_g_per_kwh, Dec.int(5000), 'body.carbon_g_per_kwh');
      ts(b.effective_from, 'body.effective_from');
      return;
    case 'tenant_registered':
      members(b, 'body', ['tenant']);
      bodyId(b.tenant, 'body.tenant');
      return;
    case 'record_excluded': {
      // §5.17, as record.rs reads it (`RecordExcluded::check`): the shape first (serde's part:
      // the members, strings, `entry` a JSON integer, §2.5), then tenant and reason.
      members(b, 'body', ['tenant', 'entry', 'reason']);
      check(typeof b.tenant === 'string', 'body.tenant is not a string');
      check(Number.isSafeInteger(b.entry) && b.entry >= 0, 'body.entry is not an integer 0 to 2^53 − 1');
      check(typeof b.reason === 'string', 'body.reason is not a string');
      bodyId(b.tenant, 'body.tenant');
      trimmedText(b.reason, MAX_EXCLUSION_REASON_BYTES, 'body.reason');
      return;
    }
    case 'node_registered': {
      // As record.rs reads it: the whole shape first (every GPU exactly {index, uuid, model}
      // and an optional mig {slices, instances: [{profile, count}]}, index, slices and count
      // u32s), then the identifiers, the GPUs (nodeGpus) and max_watts_per_gpu above 0.
      members(b, 'body', ['node', 'region', 'gpus', 'max_watts_per_gpu'], ['hub']);
      nodeGpusShape(b.gpus);
      check(typeof b.max_watts_per_gpu === 'string', 'body.max_watts_per_gpu is not a string');
      bodyId(b.node, 'body.node');
      bodyId(b.region, 'body.region');
      if ('hub' in b) bodyId(b.hub, 'body.hub');
      nodeGpus(b.gpus);
      watts(b.max_watts_per_gpu);
      return;
    }
    case 'node_updated': {
      // As record.rs reads it (`impl Record for NodeUpdated`): the shape (gpus and
      // max_watts_per_gpu optional, never null), the node, the GPUs as node_registered's, the
      // watts, then at least one of the two (`invalid_field`, body.gpus).
      members(b, 'body', ['node'], ['gpus', 'max_watts_per_gpu']);
      if ('gpus' in b) nodeGpusShape(b.gpus);
      if ('max_watts_per_gpu' in b) check(typeof b.max_watts_per_gpu === 'string', 'body.max_watts_per_gpu is not a string');
      check(typeof b.node === 'string', 'body.node is not a string');
      bodyId(b.node, 'body.node');
      if ('gpus' in b) nodeGpus(b.gpus);
      if ('max_watts_per_gpu' in b) watts(b.max_watts_per_gpu);
      check('gpus' in b || 'max_watts_per_gpu' in b, 'invalid_field: body.gpus: an update adds GPUs, raises max_watts_per_gpu, or both');
      return;
    }
    case 'contract_registered': {
      // §5.19, as record/contract.rs reads it: the whole shape first (serde's part: the
      // members, strings, fees an array of exactly {name, amount, timing, category} and an
      // optional lease and included (an array of exactly {gpu_model, gpu_hours, overage_rate}),
      // sla exactly {target, credits: [{below, percent}]}, fees, commitment, sla and a fee's
      // lease and included optional and never null), then the members in the order of the
      // spec's table (a fee's included after its lease: includedHours), then at least one of
      // fees and commitment (`invalid_field`, body.fees), then the SLA (slaTerms), then that an
      // SLA has a fee naming a lease (`invalid_field`, body.sla).
      members(b, 'body', ['tenant', 'contract', 'currency', 'region', 'term_from', 'term_to', 'billing_period', 'billing_anchor'], ['fees', 'commitment', 'sla']);
      for (const k of ['tenant', 'contract', 'currency', 'region', 'term_from', 'term_to', 'billing_period', 'billing_anchor', 'commitment']) {
        if (k in b) check(typeof b[k] === 'string', `body.${k} is not a string`);
      }
      if ('fees' in b) {
        check(Array.isArray(b.fees), 'body.fees is not an array');
        b.fees.forEach((fee, i) => {
          const f = `body.fees[${i}]`;
          members(fee, f, ['name', 'amount', 'timing', 'category'], ['lease', 'included']);
          for (const k of ['name', 'amount', 'timing', 'category', 'lease']) {
            if (k in fee) check(typeof fee[k] === 'string', `${f}.${k} is not a string`);
          }
          if ('included' in fee) {
            check(Array.isArray(fee.included), `${f}.included is not an array`);
            fee.included.forEach((entry, j) => {
              const at = `${f}.included[${j}]`;
              members(entry, at, ['gpu_model', 'gpu_hours', 'overage_rate']);
              for (const k of ['gpu_model', 'gpu_hours', 'overage_rate']) check(typeof entry[k] === 'string', `${at}.${k} is not a string`);
            });
          }
        });
      }
      if ('sla' in b) {
        members(b.sla, 'body.sla', ['target', 'credits']);
        check(typeof b.sla.target === 'string', 'body.sla.target is not a string');
        check(Array.isArray(b.sla.credits), 'body.sla.credits is not an array');
        b.sla.credits.forEach((step, i) => {
          const f = `body.sla.credits[${i}]`;
          members(step, f, ['below', 'percent']);
          for (const k of ['below', 'percent']) check(typeof step[k] === 'string', `${f}.${k} is not a string`);
        });
      }
      bodyId(b.tenant, 'body.tenant');
      bodyId(b.contract, 'body.contract');
      currency(b.currency, 'body.currency');
      bodyId(b.region, 'body.region');
      ts(b.term_from, 'body.term_from');
      ts(b.term_to, 'body.term_to');
      const term = timestampSeconds(b.term_to) - timestampSeconds(b.term_from);
      check(term > 0, `invalid_field: body.term_to (${b.term_to}) is not after body.term_from (${b.term_from})`);
      check(term <= MAX_CONTRACT_TERM_SECONDS, `quantity_out_of_range: body.term_to: a term is at most ${MAX_CONTRACT_TERM_SECONDS} s (3660 days), this one ${term} s`);
      check(BILLING_PERIODS.has(b.billing_period), 'invalid_field: body.billing_period must be month, quarter or year');
      check(BILLING_ANCHORS.has(b.billing_anchor), 'invalid_field: body.billing_anchor must be calendar or anniversary');
      if ('fees' in b) {
        check(b.fees.length >= 1, `invalid_field: body.fees: a contract lists 1 to ${MAX_CONTRACT_FEES} fees (none: leave fees out)`);
        check(b.fees.length <= MAX_CONTRACT_FEES, `quantity_out_of_range: body.fees: a contract lists 1 to ${MAX_CONTRACT_FEES} fees`);
        const seen = new Set(); // (lease, gpu_model) of the included entries checked so far
        b.fees.forEach((fee, i) => {
          const f = `body.fees[${i}]`;
          displayText(fee.name, MAX_FEE_NAME_BYTES, `${f}.name`);
          contractAmount(fee.amount, `${f}.amount`);
          check(FEE_TIMINGS.has(fee.timing), `invalid_field: ${f}.timing must be advance, arrears or once`);
          check(FEE_CATEGORIES.has(fee.category), `invalid_field: ${f}.category must be compute, networking, storage, support or other`);
          if ('lease' in fee) {
            bodyId(fee.lease, `${f}.lease`);
            check(fee.timing !== 'once', `invalid_field: ${f}.lease: a one-off fee rents no lease over a period`);
          }
          if ('included' in fee) includedHours(fee, f, seen);
        });
      }
      if ('commitment' in b) contractAmount(b.commitment, 'body.commitment');
      check('fees' in b || 'commitment' in b, 'invalid_field: body.fees: a contract has fees, a commitment, or both');
      if ('sla' in b) {
        slaTerms(b.sla);
        check((b.fees ?? []).some((fee) => 'lease' in fee), 'invalid_field: body.sla: an SLA credits the fees of leases: name the lease of at least one periodic fee');
      }
      return;
    }
    case 'prepayment': {
      // §5.20, as record/prepayment.rs reads it: the whole shape first (serde's part: exactly
      // these members, strings, expires_at optional and never null), then the members in the
      // order of the spec's table: the tenant, the reference (as payment.external_reference),
      // the source, the currency, the amount (above 0, at most MAX_MONEY_AMOUNT, with at most
      // the currency's minor-unit digits) and expires_at. That it is after the entry's
      // received_at, and its reference new for its tenant, are admission rules (§6.7,
      // prepayments: admission.js).
      members(b, 'body', ['tenant', 'reference', 'source', 'currency', 'amount'], ['expires_at']);
      for (const k of ['tenant', 'reference', 'source', 'currency', 'amount', 'expires_at']) {
        if (k in b) check(typeof b[k] === 'string', `body.${k} is not a string`);
      }
      bodyId(b.tenant, 'body.tenant');
      trimmedText(b.reference, MAX_EXTERNAL_REFERENCE_BYTES, 'body.reference');
      check(PREPAYMENT_SOURCES.has(b.source), 'invalid_field: body.source must be grant or purchase');
      currency(b.currency, 'body.currency');
      contractAmount(b.amount, 'body.amount');
      const places = decimalPlaces(b.amount);
      const minor = minorUnits(b.currency);
      check(places <= minor, `invalid_field: body.amount has ${places} decimal places, more than ${b.currency}'s minor unit (${minor})`);
      if ('expires_at' in b) ts(b.expires_at, 'body.expires_at');
      return;
    }
    case 'contract_amended': {
      // §5.21, as record/contract.rs reads it (`ContractAmended::check`): the whole shape first
      // (serde's part: exactly these members, strings), then the tenant, the contract, term_to
      // and the reason (as record_excluded.reason: 1 to MAX_EXCLUSION_REASON_BYTES bytes
      // without control characters or surrounding spaces, `invalid_field`). The term_to rules
      // that need the contract, and the contract registered earlier for the tenant, are
      // admission rules (§6.7, contract amendments: admission.js).
      members(b, 'body', ['tenant', 'contract', 'term_to', 'reason']);
      for (const k of ['tenant', 'contract', 'term_to', 'reason']) check(typeof b[k] === 'string', `body.${k} is not a string`);
      bodyId(b.tenant, 'body.tenant');
      bodyId(b.contract, 'body.contract');
      ts(b.term_to, 'body.term_to');
      trimmedText(b.reason, MAX_EXCLUSION_REASON_BYTES, 'body.reason');
      return;
    }
    case 'lease_registered': {
      // As record.rs reads it (`LeaseRegistered::check`, `lease_nodes`): the whole shape first
      // (serde's part: members, strings, GPU indexes that are u32s), then the class, the ids,
      // the term [from, to) and the items.
      members(b, 'body', ['lease', 'tenant', 'class', 'from', 'nodes'], ['to']);
      for (const k of ['lease', 'tenant', 'class', 'from', 'to']) {
        if (k in b) check(typeof b[k] === 'string', `body.${k} is not a string`);
      }
      check(Array.isArray(b.nodes), 'body.nodes is not an array');
      b.nodes.forEach((n, i) => {
        const f = `body.nodes[${i}]`;
        members(n, f, ['node'], ['gpus', 'share', 'gpu_model', 'count']);
        for (const k of ['node', 'share', 'gpu_model', 'count']) {
          if (k in n) check(typeof n[k] === 'string', `${f}.${k} is not a string`);
        }
        if ('gpus' in n) {
          check(Array.isArray(n.gpus), `${f}.gpus is not an array`);
          n.gpus.forEach((g, k) => check(Number.isSafeInteger(g) && g >= 0 && g <= MAX_GPU_INDEX, `${f}.gpus[${k}] is not an integer 0 to ${MAX_GPU_INDEX}`));
        }
      });
      check(LEASE_CLASSES.has(b.class), 'body.class must be on_demand, reserved or spot');
      bodyId(b.lease, 'body.lease');
      bodyId(b.tenant, 'body.tenant');
      ts(b.from, 'body.from');
      if ('to' in b) {
        ts(b.to, 'body.to');
        check(timestampSeconds(b.to) > timestampSeconds(b.from), `empty_interval: body.to (${b.to}) is not after body.from (${b.from})`);
      }
      leaseItems(b.nodes);
      return;
    }
    case 'log_policy': {
      // The time rules of §6.7 read these: whole seconds within the policy's bounds.
      members(b, 'body', ['max_record_age_seconds', 'max_future_skew_seconds']);
      const within = (v, [lo, hi], f) =>
        check(Number.isSafeInteger(v) && v >= lo && v <= hi, `quantity_out_of_range: ${f} must be between ${lo} and ${hi}`);
      within(b.max_record_age_seconds, POLICY_RECORD_AGE_SECONDS, 'body.max_record_age_seconds');
      within(b.max_future_skew_seconds, POLICY_FUTURE_SKEW_SECONDS, 'body.max_future_skew_seconds');
      return;
    }
    case 'spot_price':
      members(b, 'body', ['region', 'gpu_model', 'price_per_gpu_hour', 'currency', 'effective_from']);
      bodyId(b.region, 'body.region');
      bodyId(b.gpu_model, 'body.gpu_model');
      quantity(b.price_per_gpu_hour, MAX_PRICE_PER_GPU_HOUR, 'body.price_per_gpu_hour');
      currency(b.currency, 'body.currency');
      ts(b.effective_from, 'body.effective_from');
      return;
    case 'rate_card':
      members(b, 'body', ['region', 'gpu_model', 'lease_class', 'currency', 'price_per_gpu_hour', 'effective_from']);
      check(b.lease_class === 'on_demand' || b.lease_class === 'reserved', 'body.lease_class must be on_demand or reserved');
      bodyId(b.region, 'body.region');
      bodyId(b.gpu_model, 'body.gpu_model');
      currency(b.currency, 'body.currency');
      quantity(b.price_per_gpu_hour, MAX_PRICE_PER_GPU_HOUR, 'body.price_per_gpu_hour');
      ts(b.effective_from, 'body.effective_from');
      return;
    case 'volume_tiers': {
      members(b, 'body', ['plan', 'region', 'gpu_model', 'lease_class', 'currency', 'tiers', 'effective_from']);
      bodyId(b.plan, 'body.plan');
      bodyId(b.region, 'body.region');
      bodyId(b.gpu_model, 'body.gpu_model');
      check(b.lease_class === 'on_demand' || b.lease_class === 'reserved', 'body.lease_class must be on_demand or reserved');
      currency(b.currency, 'body.currency');
      // 1 to MAX_VOLUME_TIERS tiers; bounds strictly increasing; only the last tier open.
      check(Array.isArray(b.tiers) && b.tiers.length >= 1 && b.tiers.length <= MAX_VOLUME_TIERS, `body.tiers must hold 1 to ${MAX_VOLUME_TIERS} tiers`);
      let below = Dec.zero();
      b.tiers.forEach((tier, i) => {
        const f = `body.tiers[${i}]`;
        members(tier, f, ['price_per_gpu_hour'], ['up_to_gpu_hours']);
        const last = i === b.tiers.length - 1;
        if (last) {
          check(!('up_to_gpu_hours' in tier), `${f}.up_to_gpu_hours must be absent: the last tier is open`);
        } else {
          check('up_to_gpu_hours' in tier, `${f}.up_to_gpu_hours is required on every tier but the last`);
          const bound = quantity(tier.up_to_gpu_hours, MAX_TIER_BOUND_GPU_HOURS, `${f}.up_to_gpu_hours`);
          check(bound.cmp(below) > 0, `${f}.up_to_gpu_hours: bounds must increase strictly`);
          below = bound;
        }
        quantity(tier.price_per_gpu_hour, MAX_PRICE_PER_GPU_HOUR, `${f}.price_per_gpu_hour`);
      });
      ts(b.effective_from, 'body.effective_from');
      return;
    }
    case 'tenant_plan':
      members(b, 'body', ['tenant', 'plan', 'effective_from']);
      bodyId(b.tenant, 'body.tenant');
      bodyId(b.plan, 'body.plan');
      ts(b.effective_from, 'body.effective_from');
      return;
    case 'invoice_issued':
      members(b, 'body', ['number', 'tenant', 'period_from', 'period_to', 'currency', 'total', 'checkpoint_size', 'invoice_sha256']);
      sha256Hex(b.invoice_sha256, 'body.invoice_sha256');
      bodyId(b.number, 'body.number');
      bodyId(b.tenant, 'body.tenant');
      ts(b.period_from, 'body.period_from');
      ts(b.period_to, 'body.period_to');
      currency(b.currency, 'body.currency');
      money(b.total, 'body.total');
      size(b.checkpoint_size, 'body.checkpoint_size');
      return;
    case 'certificate_issued':
      members(b, 'body', ['id', 'tenant', 'period_from', 'period_to', 'checkpoint_size', 'certificate_sha256']);
      sha256Hex(b.certificate_sha256, 'body.certificate_sha256');
      check(typeof b.id === 'string' && /^CERT-[0-9]{6,20}$/.test(b.id), 'body.id must be CERT- and six or more digits');
      ts(b.period_from, 'body.period_from');
      ts(b.period_to, 'body.period_to');
      check(timestampSeconds(b.period_from) < timestampSeconds(b.period_to), 'empty_interval: body.period_to must be after period_from');
      bodyId(b.tenant, 'body.tenant');
      size(b.checkpoint_size, 'body.checkpoint_size');
      return;
    case 'payment':
    case 'credit_note': {
      members(b, 'body', ['tenant', 'invoice', 'currency', 'amount'], ['note', 'external_reference']);
      const amount = money(b.amount, 'body.amount');
      check(amount.cmp(Dec.zero()) > 0, 'quantity_out_of_range: body.amount must be above 0');
      if ('note' in b) {
        check(typeof b.note === 'string', 'body.note is not a string');
        check(utf8(b.note).length <= 500 && !/[\u0000-\u001f\u007f-\u009f]/u.test(b.note), 'body.note: at most 500 bytes without control characters');
      }
      if ('external_reference' in b) {
        const r = b.external_reference;
        check(typeof r === 'string', 'body.external_reference is not a string');
        check(r.length > 0 && utf8(r).length <= 128 && r.trim() === r && !/[\u0000-\u001f\u007f-\u009f]/u.test(r),
          'invalid_field: body.external_reference: 1 to 128 bytes without control characters or surrounding spaces');
      }
      bodyId(b.tenant, 'body.tenant');
      bodyId(b.invoice, 'body.invoice');
      currency(b.currency, 'body.currency');
      return;
    }
    default:
      check(isObject(b), 'body is not an object');
  }
}

/**
 * Checks an envelope (§4, the body checks above) and builds its signed message for `origin`
 * (§4.1). `envText`, when given, is the envelope's canonical text (cut from canonical leaf
 * bytes), which saves encoding it again. Returns {kind, signer, keyId, seq, body, sig: Uint8Array, message: Uint8Array}.
 * Throws LeafError.
 */
export async function checkEnvelope(env, origin, envText = null) {
  members(env, 'the envelope', ['v', 'kind', 'signer', 'key_id', 'seq', 'body', 'sig']);
  check(env.v === 3, 'unsupported_version: v is not 3');
  check(typeof env.kind === 'string' && KINDS.has(env.kind), `unknown_kind: ${JSON.stringify(env.kind)}`);
  id(env.signer, 'signer');
  check(typeof env.key_id === 'string' && /^[0-9a-f]{16}$/.test(env.key_id), 'key_id is not a key id');
  check(Number.isSafeInteger(env.seq) && env.seq >= 1, 'seq is not 1 to 2^53 − 1');
  check(isObject(env.body), 'body is not an object');
  await checkBody(env.kind, env.body);
  const sig = b64decode(env.sig);
  check(sig !== null && sig.length === 64, 'sig is not base64 of 64 bytes');
  const text = envText ?? canonicalize(env);
  // A UTF-16 code unit is at most 3 UTF-8 bytes: short texts need no count.
  check(text.length * 3 <= MAX_ENVELOPE_BYTES || utf8(text).length <= MAX_ENVELOPE_BYTES, 'too_large: the canonical envelope is over 8192 bytes');
  // JCS of the envelope without `sig`: its canonical text less the member `,"sig":"<base64>"`
  // (members are sorted: `sig` follows `seq` and precedes `signer`, so it is never first, and
  // nothing after it can hold that text).
  const member = `,"sig":"${env.sig}"`;
  const at = text.lastIndexOf(member);
  check(at > 0, 'the envelope text has no sig member');
  const unsignedText = text.slice(0, at) + text.slice(at + member.length);
  const message = utf8(`gpuledger/v3/${env.kind}\n${origin}\n${unsignedText}`);
  return { kind: env.kind, signer: env.signer, keyId: env.key_id, seq: env.seq, body: env.body, sig, message };
}

/** The members and forms of a leaf (§7), without the canonical-bytes check. */
function checkLeaf(leaf) {
  members(leaf, 'the leaf', ['envelope', 'index', 'prev', 'received_at', 'v']);
  check(leaf.v === 3, 'the leaf is not version 3');
  check(Number.isSafeInteger(leaf.index), 'the leaf index is not an integer');
  check(typeof leaf.prev === 'string', 'prev is not a string');
  ts(leaf.received_at, 'received_at');
  return leaf;
}

/**
 * A leaf already parsed from a version-3 line that was checked canonical, so that the leaf's
 * text in it is canonical too (§14.2). Throws LeafError.
 */
export function leafFromObject(leaf) {
  return checkLeaf(leaf);
}

/**
 * Parses leaf bytes' text (§7): canonical JSON of {envelope, index, prev, received_at, v:2}.
 * Returns the leaf object. Throws LeafError.
 */
export function parseLeaf(text) {
  let leaf;
  try {
    leaf = parseStrict(text);
  } catch (e) {
    throw new LeafError(`the leaf is not JSON: ${e.message}`);
  }
  checkLeaf(leaf);
  check(canonicalize(leaf) === text, 'the leaf bytes are not canonical JSON (RFC 8785)');
  return leaf;
}
