// The admission rules of docs/PROTOCOL.md §6.7 that need more than the key registry, checked
// at each entry's position against the state the bundle's own context records, in the order
// and with the reason codes of `gpuledger verify` (crates/core/src/admission.rs,
// `Registry::admit`): parties (tenants and leases registered before the records that name
// them), the fleet (crates/core/src/fleet.rs `check_fleet`: nodes registered once and before
// the keys and records that name them, updated only to add capacity; a record in its node's
// region, of a GPU model or MIG profile the node has, for at most its units of it and the
// energy its GPUs draw; leases over GPUs the nodes have, never overbooking a node, and usage
// only under a lease that covers its node, model and interval, for at most what it covers;
// every question about a node answered as of the entry's index, crates/core/src/fleet/
// inventory.rs), time (the log policy in force at the
// entry's index), the spot series, no stream claiming a second twice (§6.4a), prices that
// only move forward, settlements (§5.10), disputes (§6.7, disputes: a record excluded at
// most once) and contracts (§6.7, contracts: the leases its fees rent registered earlier to
// its tenant, registered once, a term that starts neither in the past nor before the end of
// an invoiced period of its tenant, and overlaps no earlier contract of its tenant, every term
// as amended by the amendments before the entry; contract amendments, §6.7: a contract of its
// tenant registered earlier, a new end after the start, within 3660 days and not the current
// one, changing neither the past nor a billing period an invoice of its tenant holds, and an
// extension overlapping no other contract of its tenant) and
// prepayments (§6.7, prepayments: a reference carried by one prepayment of its tenant, a lot
// not expired when it is logged). Key validity and scope are bundle.js's Registry.

import { Failure } from './result.js';
import { GPU_UNITS, MAX_CONTRACT_TERM_SECONDS, MAX_NODE_GPUS, migProfileSlices, migSlicesDiffer, timestampSeconds } from './leaf.js';
import { Dec } from './decimal.js';
import { billingPeriods } from './billing.js';

/** `DEFAULT_MAX_RECORD_AGE_SECONDS` (§6.7): a record may start at most 35 days before it arrives. */
export const DEFAULT_MAX_RECORD_AGE_SECONDS = 35 * 86400;
/** `DEFAULT_MAX_FUTURE_SKEW_SECONDS` (§6.7). */
export const DEFAULT_MAX_FUTURE_SKEW_SECONDS = 300;
/** `MAX_SPOT_SCHEDULE_AHEAD_SECONDS` (§6.7): a spot price is scheduled at most 7 days ahead. */
export const MAX_SPOT_SCHEDULE_AHEAD_SECONDS = 7 * 86400;
/** `ENERGY_BOUND_MARGIN_PERCENT`: an energy record may exceed its node's GPUs × max_watts_per_gpu × seconds by 5 %. */
export const ENERGY_BOUND_MARGIN_PERCENT = 5;
/** Watt-seconds in a kWh. */
const WATT_SECONDS_PER_KWH = 3600000;
/** The watts × seconds × units side of the energy bound and the kWh side, scaled alike: kWh × 3,600,000 × 100 × GPU_UNITS. */
const ENERGY_SCALE = WATT_SECONDS_PER_KWH * 100 * GPU_UNITS;
/** Every kind of price entry: none takes effect in the past or inside an invoiced period. */
const PRICE_KINDS = new Set(['spot_price', 'rate_card', 'region_params', 'volume_tiers', 'tenant_plan']);

/** The tenant an entry's body names, for the parties rule, or undefined. */
function tenantOf(kind, b) {
  switch (kind) {
    case 'gpu_usage':
    case 'lease_registered':
    case 'tenant_plan':
    case 'invoice_issued':
    case 'payment':
    case 'credit_note':
    case 'certificate_issued':
    case 'record_excluded':
    case 'contract_registered':
    case 'prepayment':
    case 'contract_amended':
      return b.tenant;
    case 'energy':
      return 'tenant' in b ? b.tenant : undefined;
    default:
      return undefined;
  }
}

/** The price series a ledger-written pricing entry belongs to, and when it takes effect. */
function seriesOf(kind, b) {
  switch (kind) {
    case 'rate_card':
      return [`rate_card|${b.region}|${b.gpu_model}|${b.lease_class}`, b.effective_from];
    case 'region_params':
      return [`region_params|${b.region}`, b.effective_from];
    case 'volume_tiers':
      return [`volume_tiers|${b.plan}|${b.region}|${b.gpu_model}|${b.lease_class}`, b.effective_from];
    case 'tenant_plan':
      return [`tenant_plan|${b.tenant}`, b.effective_from];
    default:
      return null;
  }
}

/** The measurement stream of a gpu_usage or energy record (§6.4a), or null. */
function streamOf(kind, b) {
  if (kind === 'gpu_usage') return `gpu_usage|${b.node}|${b.tenant}|${'lease' in b ? b.lease : ''}|${b.gpu_model}`;
  if (kind === 'energy') return `energy|${b.node}|${'tenant' in b ? b.tenant : ''}`;
  return null;
}

/** The position of the first element of the ascending array `a` that is not below `x`. */
function lowerBound(a, x) {
  let lo = 0;
  let hi = a.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (a[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** `d` ÷ `n` (a positive integer) to `places` decimal places, rounded half up: for messages only. */
function quotientText(d, n, places = 6) {
  const num = d.coef * 10n ** BigInt(places);
  const den = BigInt(n) * 10n ** BigInt(d.scale);
  return new Dec((2n * num + den) / (2n * den), places).toString();
}

/** The §2.2 spelling of `seconds` since the epoch, for messages. */
const isoOf = (seconds) => new Date(seconds * 1000).toISOString().replace('.000Z', 'Z');

/** Byte order of ASCII identifiers (Rust's `str` order). */
const byBytes = (a, b) => (a < b ? -1 : a > b ? 1 : 0);

/**
 * How many units of GPU model `model` one GPU is (record.rs `NodeGpu::units_of`): unpartitioned,
 * 1 when it is of that model; partitioned, the count of the profile's instances when `model` is
 * `<its model>/<profile>`; otherwise 0.
 */
export function unitsOf(gpu, model) {
  if (!('mig' in gpu)) return gpu.model === model ? 1 : 0;
  if (!model.startsWith(`${gpu.model}/`)) return 0;
  const profile = model.slice(gpu.model.length + 1);
  const inst = gpu.mig.instances.find((i) => i.profile === profile);
  return inst ? inst.count : 0;
}

/**
 * What one unit of `model` on a GPU is, in GPU_UNITS of a GPU (record.rs `NodeGpu::unit_share`):
 * the whole GPU unpartitioned, an instance's slices of the GPU's slices partitioned; 0 when the
 * GPU has no unit of `model`. 840 is a multiple of every slice count: exact.
 */
export function unitShare(gpu, model) {
  if (unitsOf(gpu, model) === 0) return 0;
  if (!('mig' in gpu)) return GPU_UNITS;
  return (GPU_UNITS / gpu.mig.slices) * (migProfileSlices(model.slice(gpu.model.length + 1)) ?? 0);
}

/** The models a GPU's units are (record.rs `NodeGpu::unit_models`): its own, or one per MIG profile. */
export const unitModels = (gpu) => ('mig' in gpu ? gpu.mig.instances.map((i) => `${gpu.model}/${i.profile}`) : [gpu.model]);

/** Whether two MIG partitions (or their absence) are the same (record.rs `MigLayout`'s `==`). */
function sameMig(a, b) {
  if (a === undefined || b === undefined) return a === b;
  return a.slices === b.slices && a.instances.length === b.instances.length
    && a.instances.every((x, k) => x.profile === b.instances[k].profile && x.count === b.instances[k].count);
}

/**
 * A node as the log holds it (fleet/inventory.rs `Node`): its registration and what its
 * node_updated entries added, each GPU, UUID and power limit with the index of the entry that
 * brought it. A bundle's context may hold updates after a record: every answer is as of an
 * index (`asOf(index)`), never the final state.
 */
export class FleetNode {
  constructor(body, at) {
    /** The node_registered body. */
    this.body = body;
    /** The index of its node_registered entry. */
    this.at = at;
    /** [{gpu, at}] by increasing GPU index: index, model and partition never change; the UUID is the latest listed. */
    this.gpus = body.gpus.map((g) => ({ gpu: { ...g }, at }));
    /** [{uuid, at}]: every UUID the node's entries listed. */
    this.uuids = body.gpus.map((g) => ({ uuid: g.uuid, at }));
    /** [{watts: Dec, at}], increasing. */
    this.watts = [{ watts: Dec.parse(body.max_watts_per_gpu), at }];
  }

  /** Takes in the node_updated body at `at` (once admitted), as `Node::apply`. */
  apply(u, at) {
    for (const g of Array.isArray(u.gpus) ? u.gpus : []) {
      this.uuids.push({ uuid: g.uuid, at });
      const k = this.gpus.findIndex((h) => h.gpu.index >= g.index);
      if (k >= 0 && this.gpus[k].gpu.index === g.index) this.gpus[k].gpu = { ...this.gpus[k].gpu, uuid: g.uuid };
      else this.gpus.splice(k < 0 ? this.gpus.length : k, 0, { gpu: { ...g }, at });
    }
    if ('max_watts_per_gpu' in u) this.watts.push({ watts: Dec.parse(u.max_watts_per_gpu), at });
  }

  /** The index of the latest entry before `index` that listed `uuid` for the node, or undefined. */
  uuidListed(uuid, index) {
    for (let k = this.uuids.length - 1; k >= 0; k--) {
      if (this.uuids[k].uuid === uuid && this.uuids[k].at < index) return this.uuids[k].at;
    }
    return undefined;
  }

  /** The node as the entries before `index` made it. */
  asOf(index) {
    return new NodeAt(this, index);
  }
}

/** A node as of a log index (fleet/inventory.rs `NodeAt`): the GPUs and power limit the entries before it gave it. */
export class NodeAt {
  constructor(node, index) {
    this.node = node;
    this.index = index;
    this.name = node.body.node;
    this.region = node.body.region;
    /** Its GPUs, by increasing index. */
    this.gpus = node.gpus.filter((h) => h.at < index).map((h) => h.gpu);
  }

  /** Its GPU at `index` (as nvidia-smi numbers it), or undefined. */
  gpu(index) {
    return this.gpus.find((g) => g.index === index);
  }

  /** How many units of `model` it has: unpartitioned GPUs of that model, or MIG instances of `<model>/<profile>`. */
  unitsOf(model) {
    return this.gpus.reduce((n, g) => n + unitsOf(g, model), 0);
  }

  /** Its power limit per GPU: the latest set before its index. */
  maxWatts() {
    for (let k = this.node.watts.length - 1; k >= 0; k--) {
      if (this.node.watts[k].at < this.index) return this.node.watts[k].watts;
    }
    return Dec.parse(this.node.body.max_watts_per_gpu);
  }
}

/** A lease item's share of each GPU it lists: 1 when it has none (§5.8). */
const shareOf = (item) => ('share' in item ? Dec.parse(item.share) : Dec.int(1));

/**
 * How many units of `model` (whole GPUs, or MIG instances of `<model>/<profile>`) lease body
 * `lease` covers on `node` (a NodeAt; fleet.rs `lease_covers`): for each item listing GPUs, its
 * share × the units of `model` of each listed GPU the node has, plus the counts of that model;
 * exact.
 */
export function leaseCovers(lease, node, model) {
  let sum = Dec.zero();
  for (const item of lease.nodes) {
    if (item.node !== node.name) continue;
    if (Array.isArray(item.gpus)) {
      let units = 0;
      for (const i of item.gpus) {
        const g = node.gpu(i);
        if (g) units += unitsOf(g, model);
      }
      sum = sum.add(Dec.int(units).mul(shareOf(item)));
    } else if (item.gpu_model === model) {
      sum = sum.add(Dec.parse(item.count));
    }
  }
  return sum;
}

/**
 * How much of `node` (a NodeAt) `lease` covers, every model, in GPU_UNITS of a GPU (fleet.rs
 * `lease_units_on`): each listed GPU the node has × the item's share × GPU_UNITS, and each
 * count of a model × the largest unit of it among the node's GPUs (`unitShare`).
 */
export function leaseUnitsOn(lease, node) {
  let sum = Dec.zero();
  for (const item of lease.nodes) {
    if (item.node !== node.name) continue;
    if (Array.isArray(item.gpus)) {
      const listed = item.gpus.filter((i) => node.gpu(i)).length;
      sum = sum.add(Dec.int(listed).mul(shareOf(item)).mul(Dec.int(GPU_UNITS)));
    } else if ('gpu_model' in item && 'count' in item) {
      const unit = node.gpus.reduce((m, g) => Math.max(m, unitShare(g, item.gpu_model)), 0);
      sum = sum.add(Dec.parse(item.count).mul(Dec.int(unit)));
    }
  }
  return sum;
}

/**
 * The end of contract `c` (a contract of `Admission.contractTerms`) as amended by its
 * amendments before `index` (contract.rs `Contracts`: the latest in log order), in seconds.
 */
function termToAt(c, index) {
  let latest = null;
  for (const a of c.amendments) if (a.at < index && (latest === null || a.at > latest.at)) latest = a;
  return latest === null ? c.to : latest.to;
}

/** Whether two leases' terms ({from, to}: seconds, to null when open-ended) share an instant. */
const termsOverlap = (a, b) => (a.to === null || b.from < a.to) && (b.to === null || a.from < b.to);

/**
 * fleet.rs `check_not_overbooked`: whether `lease` ({body, from, to}), with the node's `others`
 * whose terms overlap its own, leases at no instant of its term more of `node` (a NodeAt) than
 * it has: of each GPU at most all of it, of each model at most its units (a listed GPU's share
 * of each of its units, a partitioned GPU's instances included, plus the counts). The load changes only where a
 * term starts or ends: it is evaluated at the lease's `from` and at every other lease's `from`
 * or `to` strictly inside its term. Decimals exact; throws `lease_overbooked`.
 */
function checkNotOverbooked(lease, node, others, item) {
  const within = (t) => t > lease.from && (lease.to === null || t < lease.to);
  const instants = [lease.from];
  for (const o of others) {
    if (within(o.from)) instants.push(o.from);
    if (o.to !== null && within(o.to)) instants.push(o.to);
  }
  const one = Dec.int(1);
  for (const t of [...new Set(instants)].sort((a, b) => a - b)) {
    const active = [...others.filter((o) => o.from <= t && (o.to === null || t < o.to)), lease];
    const perGpu = new Map();
    const perModel = new Map();
    const add = (m, k, d) => m.set(k, (m.get(k) ?? Dec.zero()).add(d));
    for (const l of active) {
      for (const it of l.body.nodes) {
        if (it.node !== node.name) continue;
        if ('gpu_model' in it && 'count' in it) add(perModel, it.gpu_model, Dec.parse(it.count));
        for (const g of Array.isArray(it.gpus) ? it.gpus : []) {
          const share = shareOf(it);
          add(perGpu, g, share);
          const gpu = node.gpu(g);
          if (gpu) {
            for (const model of unitModels(gpu)) add(perModel, model, share.mul(Dec.int(unitsOf(gpu, model))));
          }
        }
      }
    }
    for (const g of [...perGpu.keys()].sort((a, b) => a - b)) {
      const load = perGpu.get(g);
      if (load.cmp(one) > 0) {
        throw new Failure('lease_overbooked', item, `body.nodes would lease ${load} of GPU ${g} of node ${node.name} at ${isoOf(t)}, counting its other leases`);
      }
    }
    for (const model of [...perModel.keys()].sort(byBytes)) {
      const load = perModel.get(model);
      const has = node.unitsOf(model);
      if (load.cmp(Dec.int(has)) > 0) {
        throw new Failure('lease_overbooked', item, `body.nodes would lease ${load} ${model} GPUs of node ${node.name} at ${isoOf(t)}, which has ${has}, counting its other leases`);
      }
    }
  }
}

/** Seconds of a timestamp the envelope checks may not have looked at; a bad one is leaf_invalid. */
function secondsOf(v, item, field) {
  const s = timestampSeconds(v);
  if (s === null) throw new Failure('leaf_invalid', item, `${field} is not a timestamp`);
  return s;
}

/**
 * Tenants, leases, log policies, spot prices, invoiced periods and price series, as the
 * bundle's context records them, by index.
 */
export class Admission {
  constructor() {
    /** tenant → index of its tenant_registered */
    this.tenants = new Map();
    /** lease → {tenant, at, body, from, to}: its first lease_registered entry, its term in
     *  seconds (to null when open-ended) */
    this.leases = new Map();
    /** node → the ids of the leases naming it */
    this.leasesByNode = new Map();
    /** [{at, maxAge, skew}] in index order */
    this.policies = [];
    /** "region|gpu_model|effective_from" → index */
    this.spotInstants = new Map();
    /** [{at, from, to}] (seconds) */
    this.invoiced = [];
    /** series → {at (seconds), text, index} */
    this.latest = new Map();
    /** stream → {starts: [seconds], ends: [{end, index}]}, ordered by start (§6.4a) */
    this.intervals = new Map();
    /** invoice number → {tenant, currency, total: Dec, credited: Dec} (§5.10) */
    this.accounts = new Map();
    /** `tenant|kind|external_reference` → index of the settlement that carries it. */
    this.references = new Map();
    /** node → FleetNode: its first node_registered entry ({body, at}) and its updates */
    this.nodes = new Map();
    /** excluded entry → index of the first record_excluded entry naming it (§6.7, disputes) */
    this.exclusions = new Map();
    /** contract → index of its first contract_registered entry (§6.7, contracts) */
    this.contracts = new Map();
    /** tenant → [{contract, tenant, at, body, from, to, amendments: [{at, to}]}]: its
     *  contracts' terms [from, to) as registered, in seconds, and the ends their
     *  contract_amended entries set, in log order (termToAt: the term as of an index) */
    this.contractsByTenant = new Map();
    /** contract → the same object as in contractsByTenant, for its first registration */
    this.contractTerms = new Map();
    /** `tenant|reference` → index of the first prepayment of the tenant carrying the reference
     *  (§6.7, prepayments; a tenant id holds no `|`) */
    this.prepayments = new Map();
  }

  /** The policy in force at `index`: the latest log_policy entry before it, or the defaults. */
  policyAt(index) {
    for (let k = this.policies.length - 1; k >= 0; k--) {
      if (this.policies[k].at < index) return this.policies[k];
    }
    return { maxAge: DEFAULT_MAX_RECORD_AGE_SECONDS, skew: DEFAULT_MAX_FUTURE_SKEW_SECONDS };
  }

  /**
   * Every rule of §6.7 beyond the key and its scope, for entry `e` ({kind, body}) at `index`,
   * received at `receivedAt`; throws Failure with `gpuledger verify`'s reason.
   */
  check(index, e, receivedAt) {
    const item = `entry ${index}`;
    const b = e.body;
    this.checkParties(index, e.kind, b, item);
    this.checkFleet(index, e.kind, b, item);
    this.checkTime(index, e.kind, b, receivedAt, item);
    this.checkPriceHistory(index, e.kind, b, item);
    this.checkContractTerm(index, e.kind, b, item);
    this.checkAmendment(index, e.kind, b, receivedAt, item);
    this.checkPrepayment(index, e.kind, b, receivedAt, item);
    this.checkOverlap(e.kind, b, item);
    this.checkForward(e.kind, b, item);
    this.checkSettlement(e.kind, b, item);
    this.checkDispute(index, e.kind, b, item);
  }

  /**
   * §6.7, disputes (crates/core/src/dispute.rs), after the settlements: a record_excluded entry
   * names an entry that no earlier record_excluded entry names (`already_excluded`, of any
   * tenant). Its tenant is registered: checkParties.
   *
   * Not checked here: `unknown_record` (the entry is an earlier gpu_usage, or energy with a
   * tenant, of the entry's tenant) and `record_invoiced` (no invoice of the tenant rated it).
   * Both need the record, and a bundle holds its records after its context (§14): at a
   * record_excluded entry of the context the record has not been read. `gpuledger verify-log`
   * (and the ledger) check them.
   */
  checkDispute(index, kind, b, item) {
    if (kind !== 'record_excluded') return;
    const at = this.exclusions.get(b.entry);
    if (at !== undefined && at < index) throw new Failure('already_excluded', item, `body.entry: entry ${b.entry} is already excluded (entry ${at})`);
  }

  /**
   * §5.10: a payment or credit note names an invoice issued earlier to its tenant, in its
   * currency, and credit notes never total more than the invoice (crates/core/src/admission.rs,
   * `Settlements`). Bundles the service writes hold no settlements; a bundle that does is checked.
   */
  checkSettlement(kind, b, item) {
    if (kind !== 'payment' && kind !== 'credit_note') return;
    const a = this.accounts.get(b.invoice);
    if (!a || a.tenant !== b.tenant) throw new Failure('unknown_invoice', item, `${b.invoice} is not an invoice issued to ${b.tenant}`);
    if (a.currency !== b.currency) throw new Failure('currency_mismatch', item, `invoice ${b.invoice} is in ${a.currency}, not ${b.currency}`);
    if ('external_reference' in b) {
      const at = this.references.get(`${b.tenant}|${kind}|${b.external_reference}`);
      if (at !== undefined) throw new Failure('reference_used', item, `${kind} of ${b.tenant} already carries ${JSON.stringify(b.external_reference)} (entry ${at})`);
    }
    if (kind === 'credit_note') {
      const after = a.credited.add(Dec.parse(b.amount));
      if (after.cmp(a.total) > 0) throw new Failure('credit_above_total', item, `credit notes on ${b.invoice} would total ${after}, above its total ${a.total}`);
    }
  }

  /**
   * §6.4a: a record's [start, end) intersects no earlier interval of its stream. The intervals
   * of one stream never overlap each other, so the one starting last before `end` is the only
   * candidate (crates/core/src/admission.rs, `Intervals::check`).
   */
  checkOverlap(kind, b, item) {
    const stream = streamOf(kind, b);
    const held = stream === null ? undefined : this.intervals.get(stream);
    if (!held) return;
    const start = secondsOf(b.start, item, 'body.start');
    const end = secondsOf(b.end, item, 'body.end');
    const i = lowerBound(held.starts, end) - 1;
    if (i >= 0 && held.ends[i].end > start) {
      throw new Failure('overlapping_interval', item, `[${b.start}, ${b.end}) overlaps the interval of entry ${held.ends[i].index} for the same ${kind} stream`);
    }
  }

  checkParties(index, kind, b, item) {
    const tenant = tenantOf(kind, b);
    if (tenant !== undefined) {
      const at = this.tenants.get(tenant);
      if (at === undefined || at >= index) throw new Failure('unknown_tenant', item, `${tenant} is not a registered tenant`);
    }
    if (kind === 'gpu_usage' && 'lease' in b) {
      const l = this.leases.get(b.lease);
      if (!l || l.at >= index) throw new Failure('unknown_lease', item, `${b.lease} is not a registered lease`);
      if (l.tenant !== b.tenant) throw new Failure('lease_tenant_mismatch', item, `${b.lease} is not a lease of tenant ${b.tenant}`);
    } else if (kind === 'lease_registered') {
      const l = this.leases.get(b.lease);
      if (l && l.at < index) throw new Failure('already_registered', item, `${b.lease} is already registered (entry ${l.at})`);
    } else if (kind === 'contract_registered') {
      // The leases its fees rent (an SLA is measured on them), fee by fee: registered earlier,
      // the contract tenant's (admission.rs `check_parties`).
      (Array.isArray(b.fees) ? b.fees : []).forEach((fee, i) => {
        if (!('lease' in fee)) return;
        const l = this.leases.get(fee.lease);
        if (!l || l.at >= index) throw new Failure('unknown_lease', item, `body.fees[${i}].lease ${fee.lease} is not a registered lease`);
        if (l.tenant !== b.tenant) throw new Failure('lease_tenant_mismatch', item, `body.fees[${i}].lease ${fee.lease} is not a lease of tenant ${b.tenant}`);
      });
      // Among the entries a bundle holds: its context carries the tenant's own contracts.
      // (admission.rs checks this with the contract rules, `ContractBook::check`, after the
      // parties and the fleet, which have no other rule for a contract: the same order.)
      const at = this.contracts.get(b.contract);
      if (at !== undefined && at < index) throw new Failure('already_registered', item, `body.contract ${b.contract} is already registered (entry ${at})`);
    } else if (kind === 'tenant_registered') {
      const at = this.tenants.get(b.tenant);
      if (at !== undefined && at < index) throw new Failure('already_registered', item, `${b.tenant} is already registered (entry ${at})`);
    }
  }

  /**
   * The fleet rules (crates/core/src/fleet.rs `check_fleet`), every node as of `index` (the
   * entries before it; NodeAt): a node is registered once, and updated only to add capacity
   * (checkNodeUpdate); a node key names nodes registered before it; a record names a node
   * registered before it (`unknown_node`), in its region (`wrong_region`), a GPU model or MIG
   * profile the node has (`unknown_gpu_model`), at most as many units of it as the node has
   * (`over_capacity`), and at most the kWh the node's GPUs draw in its interval (GPUs × the
   * power limit in force × seconds, + ENERGY_BOUND_MARGIN_PERCENT, in GPU_UNITS, compared
   * exactly: `energy_over_bound`). Then the lease rules (§6.7, leases): a lease names
   * registered nodes, GPUs and models they have, and overbooks none of them; usage names a
   * lease that covers its node's model, within its term, for at most what it covers.
   */
  checkFleet(index, kind, b, item) {
    const registered = (node) => {
      const n = this.nodes.get(node);
      return n && n.at < index ? n.asOf(index) : null;
    };
    if (kind === 'node_registered') {
      const n = this.nodes.get(b.node);
      if (n && n.at < index) throw new Failure('already_registered', item, `body.node ${b.node} is already registered (entry ${n.at})`);
      return;
    }
    if (kind === 'node_updated') {
      const node = registered(b.node);
      if (!node) throw new Failure('unknown_node', item, `body.node ${b.node} is not a registered node`);
      this.checkNodeUpdate(index, b, node, item);
      return;
    }
    if (kind === 'signer_key_registered') {
      for (const node of Array.isArray(b.nodes) ? b.nodes : []) {
        if (!registered(node)) throw new Failure('unknown_node', item, `body.nodes ${node}, a node of the key, is not a registered node`);
      }
      return;
    }
    if (kind === 'lease_registered') {
      this.checkLease(index, b, item, registered);
      return;
    }
    if (kind !== 'gpu_usage' && kind !== 'energy') return;
    const node = registered(b.node);
    if (!node) throw new Failure('unknown_node', item, `body.node ${b.node} is not a registered node`);
    if (node.region !== b.region) {
      throw new Failure('wrong_region', item, `body.region is ${b.region}, but node ${b.node} is registered in ${node.region}`);
    }
    if (kind === 'gpu_usage') {
      const has = node.unitsOf(b.gpu_model);
      if (has === 0) throw new Failure('unknown_gpu_model', item, `body.gpu_model: node ${b.node} has no ${b.gpu_model} GPU`);
      if (Dec.parse(b.gpu_count).cmp(Dec.int(has)) > 0) {
        throw new Failure('over_capacity', item, `body.gpu_count is ${b.gpu_count}, but node ${b.node} has ${has} ${b.gpu_model} GPUs`);
      }
      this.checkUsageLease(index, b, node, item);
      return;
    }
    // kwh ≤ units × watts × seconds × (100 + margin) / 100 / 3,600,000 / GPU_UNITS, both sides
    // multiplied by 100 × 3,600,000 × GPU_UNITS: no division, nothing rounded (fleet.rs
    // `within_energy_bound`). Units (GPU_UNITS of a GPU): the node's GPUs, or for a tenant's
    // energy what the tenant's leases of the node cover (energyLeaseCover).
    const seconds = secondsOf(b.end, item, 'body.end') - secondsOf(b.start, item, 'body.start');
    const count = node.gpus.length;
    let units = Dec.int(count * GPU_UNITS);
    let whose = `node ${b.node}'s ${count} GPUs`;
    if ('tenant' in b) {
      units = this.energyLeaseCover(index, b, node, item);
      whose = `the ${quotientText(units, GPU_UNITS)} GPUs ${b.tenant} leases of node ${b.node}`;
    }
    const watts = node.maxWatts();
    const allowed = units.mul(Dec.int(seconds * (100 + ENERGY_BOUND_MARGIN_PERCENT))).mul(watts);
    if (Dec.parse(b.kwh).mul(Dec.int(ENERGY_SCALE)).cmp(allowed) > 0) {
      throw new Failure('energy_over_bound', item, `body.kwh is ${b.kwh} kWh, above what ${whose} × ${watts} W draw in ${seconds} s (+${ENERGY_BOUND_MARGIN_PERCENT} %): ${quotientText(allowed, ENERGY_SCALE, 9)} kWh`);
    }
  }

  /**
   * fleet.rs `check_node_update`: an update adds capacity only. GPU by GPU, in order: a UUID no
   * entry of the node listed before (`invalid_field`, body.gpus[i].uuid); at an index the node
   * has (a replaced board) the same model and partition (`invalid_field`, body.gpus[i].model),
   * at one it lacks a new GPU, partitioned, if at all, into the slices of the node's partitioned
   * GPUs of its model (`invalid_field`, body.gpus[i].mig.slices); then the node at most MAX_NODE_GPUS GPUs (`quantity_out_of_range`,
   * body.gpus); then a power limit strictly above the node's (`invalid_field`,
   * body.max_watts_per_gpu). `node` is the node as of `index`.
   */
  checkNodeUpdate(index, b, node, item) {
    let added = 0;
    (Array.isArray(b.gpus) ? b.gpus : []).forEach((g, i) => {
      const at = node.node.uuidListed(g.uuid, index);
      if (at !== undefined) {
        throw new Failure('invalid_field', item, `body.gpus[${i}].uuid ${g.uuid} was listed for node ${node.name} already (entry ${at})`);
      }
      const had = node.gpu(g.index);
      if (!had) {
        const other = 'mig' in g ? node.gpus.find((o) => o.model === g.model && 'mig' in o && o.mig.slices !== g.mig.slices) : undefined;
        if (other) throw new Failure('invalid_field', item, migSlicesDiffer(i, g, other));
        added++;
      } else if (had.model !== g.model || !sameMig(had.mig, g.mig)) {
        throw new Failure('invalid_field', item, `body.gpus[${i}].model GPU ${g.index} of node ${node.name} is a ${had.model}${'mig' in had ? ' partitioned into MIG instances' : ''}: a replaced board keeps its model and partition (add a new board under a new index)`);
      }
    });
    const total = node.gpus.length + added;
    if (total > MAX_NODE_GPUS) {
      throw new Failure('quantity_out_of_range', item, `body.gpus would give node ${node.name} ${total} GPUs; a node has at most ${MAX_NODE_GPUS}`);
    }
    if ('max_watts_per_gpu' in b) {
      const had = node.maxWatts();
      if (Dec.parse(b.max_watts_per_gpu).cmp(had) <= 0) {
        throw new Failure('invalid_field', item, `body.max_watts_per_gpu is ${b.max_watts_per_gpu} W, not above node ${node.name}'s ${had} W: a power limit only rises (a node that draws less is registered anew)`);
      }
    }
  }

  /**
   * What of `node` (a NodeAt) a tenant's energy record may draw for, in GPU_UNITS of a GPU
   * (fleet.rs `energy_lease_cover`): what the tenant's leases naming the node, registered
   * before it, whose terms hold its whole interval cover of the node, every model
   * (leaseUnitsOn). None name the node: `lease_not_on_node`; none holds the interval:
   * `outside_lease_term`.
   */
  energyLeaseCover(index, b, node, item) {
    const mine = (this.leasesByNode.get(b.node) ?? [])
      .map((id) => this.leases.get(id))
      .filter((l) => l.at < index && l.tenant === b.tenant);
    if (mine.length === 0) {
      throw new Failure('lease_not_on_node', item, `body.tenant: ${b.tenant} has no lease on node ${b.node}: its energy is billed only under a lease of the node`);
    }
    const start = secondsOf(b.start, item, 'body.start');
    const end = secondsOf(b.end, item, 'body.end');
    const holding = mine.filter((l) => start >= l.from && (l.to === null || end <= l.to));
    if (holding.length === 0) {
      throw new Failure('outside_lease_term', item, `body.start: [${b.start}, ${b.end}) is not within the term of any lease of ${b.tenant} on node ${b.node}`);
    }
    let sum = Dec.zero();
    for (const l of holding) sum = sum.add(leaseUnitsOn(l.body, node));
    return sum;
  }

  /**
   * The lease rules of a usage record on `node` (a NodeAt; fleet.rs `check_usage_lease`): it
   * names a lease (registered earlier, to its tenant: checkParties) that covers the node's units
   * of its model, for its whole interval, and at least `gpu_count` of them.
   */
  checkUsageLease(index, b, node, item) {
    if (!('lease' in b)) {
      throw new Failure('lease_not_on_node', item, `body.lease is absent: usage on node ${b.node} is billed under a lease that covers it`);
    }
    // An unregistered lease, or another tenant's, is checkParties' refusal.
    const l = this.leases.get(b.lease);
    if (!l || l.at >= index) return;
    const covered = leaseCovers(l.body, node, b.gpu_model);
    if (covered.cmp(Dec.zero()) === 0) {
      throw new Failure('lease_not_on_node', item, `body.lease: ${b.lease} covers no ${b.gpu_model} GPU of node ${b.node}`);
    }
    const start = secondsOf(b.start, item, 'body.start');
    const end = secondsOf(b.end, item, 'body.end');
    if (start < l.from || (l.to !== null && end > l.to)) {
      const field = start < l.from ? 'body.start' : 'body.end';
      throw new Failure('outside_lease_term', item, `${field}: [${b.start}, ${b.end}) is not within the term of ${b.lease}, [${l.body.from}, ${l.to === null ? 'open-ended' : l.body.to})`);
    }
    if (Dec.parse(b.gpu_count).cmp(covered) > 0) {
      throw new Failure('over_capacity', item, `body.gpu_count is ${b.gpu_count}, but ${b.lease} covers ${covered} ${b.gpu_model} GPUs of node ${b.node}`);
    }
  }

  /**
   * A lease registration (fleet.rs `check_fleet`, LeaseRegistered), each node as of `index`:
   * item by item, its node registered (`unknown_node`), its GPU indexes the node's
   * (`unknown_gpu`), its counted model (or MIG profile) one the node has
   * (`unknown_gpu_model`); then, node by node in byte order, no overbooking counting the
   * node's earlier leases whose terms overlap its own (`lease_overbooked`).
   */
  checkLease(index, b, item, registered) {
    b.nodes.forEach((it, i) => {
      const n = registered(it.node);
      if (!n) throw new Failure('unknown_node', item, `body.nodes[${i}].node: ${it.node} is not a registered node`);
      for (const g of Array.isArray(it.gpus) ? it.gpus : []) {
        if (!n.gpu(g)) throw new Failure('unknown_gpu', item, `body.nodes[${i}].gpus: node ${it.node} has no GPU ${g}`);
      }
      if ('gpu_model' in it && n.unitsOf(it.gpu_model) === 0) {
        throw new Failure('unknown_gpu_model', item, `body.nodes[${i}].gpu_model: node ${it.node} has no ${it.gpu_model} GPU`);
      }
    });
    const lease = {
      body: b,
      from: secondsOf(b.from, item, 'body.from'),
      to: 'to' in b ? secondsOf(b.to, item, 'body.to') : null,
    };
    for (const name of [...new Set(b.nodes.map((it) => it.node))].sort(byBytes)) {
      const others = (this.leasesByNode.get(name) ?? [])
        .map((id) => this.leases.get(id))
        .filter((o) => o.at < index && o.body.lease !== b.lease && termsOverlap(o, lease));
      checkNotOverbooked(lease, registered(name), others, item);
    }
  }

  checkTime(index, kind, b, receivedAt, item) {
    const now = secondsOf(receivedAt, item, 'received_at');
    const { maxAge, skew } = this.policyAt(index);
    if (kind === 'invoice_issued' || kind === 'certificate_issued') {
      const ends = secondsOf(b.period_to, item, 'body.period_to') - now;
      if (ends > 0) throw new Failure('in_future', item, `the period ends ${ends} s after the ledger's clock (${receivedAt}): it had not ended when it was issued`);
      return;
    }
    if (kind === 'contract_registered') {
      // A contract never re-prices the past: its term starts as a price takes effect.
      const ahead = secondsOf(b.term_from, item, 'body.term_from') - now;
      if (-ahead > skew) {
        throw new Failure('price_in_past', item, `body.term_from (${b.term_from}) is ${-ahead} s before the ledger's clock (${receivedAt}); a contract's term may start at most ${skew} s in the past`);
      }
      return;
    }
    if (PRICE_KINDS.has(kind)) {
      // No price of any kind takes effect in the past beyond the skew; a spot price, signed by
      // a market signer, is also scheduled at most 7 days ahead.
      const ahead = secondsOf(b.effective_from, item, 'body.effective_from') - now;
      if (kind === 'spot_price' && ahead > MAX_SPOT_SCHEDULE_AHEAD_SECONDS) {
        throw new Failure('in_future', item, `effective_from is ${ahead} s after the ledger's clock; prices may be scheduled at most ${MAX_SPOT_SCHEDULE_AHEAD_SECONDS} s ahead`);
      }
      if (-ahead > skew) {
        throw new Failure('price_in_past', item, `effective_from (${b.effective_from}) is ${-ahead} s before the ledger's clock (${receivedAt}); a ${kind} may take effect at most ${skew} s in the past`);
      }
      return;
    }
    if (kind !== 'gpu_usage' && kind !== 'energy') return;
    const age = now - secondsOf(b.start, item, 'body.start');
    if (age > maxAge) {
      throw new Failure('too_old', item, `start (${b.start}) is ${age} s before the ledger's clock (${receivedAt}); the log's policy allows ${maxAge} s`);
    }
    const ahead = secondsOf(b.end, item, 'body.end') - now;
    if (ahead > skew) {
      throw new Failure('in_future', item, `end (${b.end}) is ${ahead} s after the ledger's clock (${receivedAt}); the log's policy allows ${skew} s`);
    }
  }

  /** A spot price not at the instant of an earlier one of its series; no price of any kind
   *  inside an invoiced period (a tenant plan: one of its own tenant's); no contract's term
   *  starting before the end of an invoiced period of its tenant. */
  checkPriceHistory(index, kind, b, item) {
    if (kind === 'contract_registered') {
      // Not in an invoiced period of its tenant, nor before one: term_from ≥ every earlier
      // invoice's period_to.
      const from = secondsOf(b.term_from, item, 'body.term_from');
      const hit = this.invoiced.find((p) => p.at < index && p.tenant === b.tenant && from < p.to);
      if (hit) {
        throw new Failure('price_in_invoiced_period', item, `body.term_from (${b.term_from}) is before ${isoOf(hit.to)}, the end of the period invoiced to ${b.tenant} at entry ${hit.at}`);
      }
      return;
    }
    if (!PRICE_KINDS.has(kind)) return;
    if (kind === 'spot_price') {
      const at = this.spotInstants.get(`${b.region}|${b.gpu_model}|${b.effective_from}`);
      if (at !== undefined && at < index) {
        throw new Failure('price_conflict', item, `a spot price for ${b.region} ${b.gpu_model} already takes effect at ${b.effective_from} (entry ${at})`);
      }
    }
    const from = secondsOf(b.effective_from, item, 'body.effective_from');
    const only = kind === 'tenant_plan' ? b.tenant : undefined;
    const hit = this.invoiced.find((p) => p.at < index && p.from <= from && from < p.to
      && (only === undefined || p.tenant === only));
    if (hit) {
      throw new Failure('price_in_invoiced_period', item, `effective_from (${b.effective_from}) is inside the period invoiced at entry ${hit.at}`);
    }
  }

  /**
   * §6.7, contracts: a contract's term [term_from, term_to) overlaps the term of no earlier
   * contract_registered entry of its tenant (`contract_overlap`, body.term_from); half-open, so
   * one ending at T and the next starting at T do not overlap. A tenant has at most one contract
   * in force at any instant. The terms compared are as amended by the contract_amended entries
   * before `index` (contract.rs `ContractBook::overlapping`).
   */
  checkContractTerm(index, kind, b, item) {
    if (kind !== 'contract_registered') return;
    const from = secondsOf(b.term_from, item, 'body.term_from');
    const to = secondsOf(b.term_to, item, 'body.term_to');
    const hit = this.overlapping(index, b.tenant, b.contract, from, to);
    if (hit) {
      throw new Failure('contract_overlap', item, `body.term_from: [${b.term_from}, ${b.term_to}) overlaps the term of ${b.tenant}'s contract ${hit.c.contract}, [${isoOf(hit.c.from)}, ${isoOf(hit.to)}) (entry ${hit.c.at})`);
    }
  }

  /**
   * The first contract of `tenant` registered before `index`, other than `except`, whose term
   * as amended before `index` overlaps [from, to) (half-open), as {c, to} (`to` its amended
   * end), or undefined.
   */
  overlapping(index, tenant, except, from, to) {
    for (const c of this.contractsByTenant.get(tenant) ?? []) {
      if (c.at >= index || c.contract === except) continue;
      const end = termToAt(c, index);
      if (from < end && c.from < to) return { c, to: end };
    }
    return undefined;
  }

  /**
   * §6.7, contract amendments (crates/core/src/contract.rs `ContractBook::check_amendment`),
   * after the party rules (its tenant registered earlier: checkParties), with C the contract as
   * amended by the entries before `index` and m the earlier of C's current end and the new one
   * (where the change begins), in this order:
   * 1. a contract_registered entry before it registers `contract` for `tenant`
   *    (`unknown_contract`, body.contract);
   * 2. term_to after C's term_from (`invalid_field`), term_to − term_from at most 3660 days
   *    (`quantity_out_of_range`), term_to not C's current end (`invalid_field`), all
   *    body.term_to;
   * 3. m not before the entry's received_at less the policy's skew (`price_in_past`,
   *    body.term_to): the past is never amended;
   * 4. the billing period of C that m falls in (the first whose clipped start is at most m and
   *    whose whole period ends after m; m itself when there is none) starts at or after the
   *    period_to of every invoice of the tenant before it (`price_in_invoiced_period`,
   *    body.term_to): no invoiced line changes;
   * 5. when term_to is later than C's end, [C's end, term_to) overlaps the term (as amended) of
   *    no other contract of the tenant (`contract_overlap`, body.term_to).
   * An invoice bundle's context carries the tenant's contracts, amendments and invoices (§14),
   * so all are rechecked among them.
   */
  checkAmendment(index, kind, b, receivedAt, item) {
    if (kind !== 'contract_amended') return;
    const c = this.contractTerms.get(b.contract);
    if (!c || c.at >= index || c.tenant !== b.tenant) {
      throw new Failure('unknown_contract', item, `body.contract: ${b.tenant} has no contract ${b.contract}`);
    }
    const to = secondsOf(b.term_to, item, 'body.term_to');
    const current = termToAt(c, index);
    if (to <= c.from) {
      throw new Failure('invalid_field', item, `body.term_to (${b.term_to}) must be after the term's start, ${isoOf(c.from)}`);
    }
    if (to - c.from > MAX_CONTRACT_TERM_SECONDS) {
      throw new Failure('quantity_out_of_range', item, `body.term_to (${b.term_to}): the term would be longer than ${MAX_CONTRACT_TERM_SECONDS / 86400} days`);
    }
    if (to === current) {
      throw new Failure('invalid_field', item, `body.term_to: the term already ends at ${isoOf(current)}`);
    }
    const m = Math.min(to, current);
    const { skew } = this.policyAt(index);
    const now = secondsOf(receivedAt, item, 'received_at');
    if (m < now - skew) {
      throw new Failure('price_in_past', item, `body.term_to: the amendment changes the term from ${isoOf(m)}, more than ${skew} s before the ledger's clock (${receivedAt}): the past is never amended`);
    }
    const span = billingPeriods(c.from, current, c.body.billing_period, c.body.billing_anchor).find((s) => s.from <= m && m < s.fullTo);
    const changedFrom = span ? span.from : m;
    let hit;
    for (const p of this.invoiced) {
      if (p.at < index && p.tenant === b.tenant && (!hit || p.to > hit.to)) hit = p;
    }
    if (hit && changedFrom < hit.to) {
      throw new Failure('price_in_invoiced_period', item, `body.term_to: the amendment changes the billing period from ${isoOf(changedFrom)}, inside a period of ${b.tenant} invoiced up to ${isoOf(hit.to)} (entry ${hit.at})`);
    }
    if (to > current) {
      const other = this.overlapping(index, b.tenant, b.contract, current, to);
      if (other) {
        throw new Failure('contract_overlap', item, `body.term_to: the term extended to ${b.term_to} overlaps ${b.tenant}'s contract ${other.c.contract}, [${isoOf(other.c.from)}, ${isoOf(other.to)}) (entry ${other.c.at})`);
      }
    }
  }

  /**
   * §6.7, prepayments (crates/core/src/prepaid.rs `PrepaidBook::check`), after the party rules
   * (its tenant registered earlier: checkParties), in this order: no earlier prepayment of its
   * tenant carries its reference (`reference_used`, body.reference), so a top-up sent twice is
   * recorded once; and its expires_at, if any, is after the entry's received_at
   * (`invalid_field`, body.expires_at): a lot is not logged expired. An invoice bundle's
   * context carries the tenant's own prepayments (§14), so both are rechecked among them. What
   * invoices draw from the lots is no admission rule (docs/RATING.md, "Prepaid balances"): the
   * invoice's recomputation, `gpuledger verify --invoice`.
   */
  checkPrepayment(index, kind, b, receivedAt, item) {
    if (kind !== 'prepayment') return;
    const at = this.prepayments.get(`${b.tenant}|${b.reference}`);
    if (at !== undefined && at < index) {
      throw new Failure('reference_used', item, `body.reference: a prepayment of ${b.tenant} already carries ${JSON.stringify(b.reference)} (entry ${at})`);
    }
    if ('expires_at' in b) {
      const expires = secondsOf(b.expires_at, item, 'body.expires_at');
      if (expires <= secondsOf(receivedAt, item, 'received_at')) {
        throw new Failure('invalid_field', item, `body.expires_at (${b.expires_at}) is not after the entry's time (${receivedAt}): a lot is not logged expired`);
      }
    }
  }

  checkForward(kind, b, item) {
    const s = seriesOf(kind, b);
    if (!s) return;
    const at = secondsOf(s[1], item, 'body.effective_from');
    const latest = this.latest.get(s[0]);
    if (latest && at <= latest.at) {
      throw new Failure('price_not_forward', item, `effective_from (${s[1]}) is not after ${latest.text}, when the ${kind} series already takes effect (entry ${latest.index}); prices change only forward`);
    }
  }

  /** Takes in the entry at `index` once it was admitted (in increasing index order). */
  apply(index, e) {
    const b = e.body;
    const stream = streamOf(e.kind, b);
    if (stream !== null) {
      let held = this.intervals.get(stream);
      if (!held) {
        held = { starts: [], ends: [] };
        this.intervals.set(stream, held);
      }
      const start = timestampSeconds(b.start);
      const at = lowerBound(held.starts, start);
      held.starts.splice(at, 0, start);
      held.ends.splice(at, 0, { end: timestampSeconds(b.end), index });
    }
    switch (e.kind) {
      case 'tenant_registered':
        if (!this.tenants.has(b.tenant)) this.tenants.set(b.tenant, index);
        break;
      case 'node_registered':
        if (!this.nodes.has(b.node)) this.nodes.set(b.node, new FleetNode(b, index));
        break;
      case 'node_updated':
        this.nodes.get(b.node)?.apply(b, index);
        break;
      case 'lease_registered':
        if (!this.leases.has(b.lease)) {
          this.leases.set(b.lease, { tenant: b.tenant, at: index, body: b, from: timestampSeconds(b.from), to: 'to' in b ? timestampSeconds(b.to) : null });
          for (const node of new Set(b.nodes.map((it) => it.node))) {
            if (!this.leasesByNode.has(node)) this.leasesByNode.set(node, []);
            this.leasesByNode.get(node).push(b.lease);
          }
        }
        break;
      case 'log_policy':
        this.policies.push({ at: index, maxAge: Number(b.max_record_age_seconds), skew: Number(b.max_future_skew_seconds) });
        break;
      case 'spot_price': {
        const k = `${b.region}|${b.gpu_model}|${b.effective_from}`;
        if (!this.spotInstants.has(k)) this.spotInstants.set(k, index);
        break;
      }
      case 'payment':
      case 'credit_note': {
        const ref = `${b.tenant}|${e.kind}|${b.external_reference}`;
        if ('external_reference' in b && !this.references.has(ref)) this.references.set(ref, index);
        const a = this.accounts.get(b.invoice);
        if (a && e.kind === 'credit_note') a.credited = a.credited.add(Dec.parse(b.amount));
        break;
      }
      case 'record_excluded':
        if (!this.exclusions.has(b.entry)) this.exclusions.set(b.entry, index);
        break;
      case 'contract_registered':
        if (!this.contracts.has(b.contract)) {
          const c = { contract: b.contract, tenant: b.tenant, at: index, body: b, from: timestampSeconds(b.term_from), to: timestampSeconds(b.term_to), amendments: [] };
          this.contracts.set(b.contract, index);
          this.contractTerms.set(b.contract, c);
          if (!this.contractsByTenant.has(b.tenant)) this.contractsByTenant.set(b.tenant, []);
          this.contractsByTenant.get(b.tenant).push(c);
        }
        break;
      case 'contract_amended': {
        // An amendment of a listed contract of the same tenant, after its registration, moves
        // its end (contract.rs `Contracts::apply`); anything else is ignored (never admitted).
        const c = this.contractTerms.get(b.contract);
        if (c && c.tenant === b.tenant && c.at < index) c.amendments.push({ at: index, to: timestampSeconds(b.term_to) });
        break;
      }
      case 'prepayment': {
        const ref = `${b.tenant}|${b.reference}`;
        if (!this.prepayments.has(ref)) this.prepayments.set(ref, index);
        break;
      }
      case 'invoice_issued':
        if (!this.accounts.has(b.number)) this.accounts.set(b.number, { tenant: b.tenant, currency: b.currency, total: Dec.parse(b.total), credited: Dec.zero() });
        this.invoiced.push({ at: index, tenant: b.tenant, from: timestampSeconds(b.period_from), to: timestampSeconds(b.period_to) });
        break;
      default:
    }
    const s = seriesOf(e.kind, b);
    if (s) {
      const at = timestampSeconds(s[1]);
      const latest = this.latest.get(s[0]);
      if (!latest || at > latest.at) this.latest.set(s[0], { at, text: s[1], index });
    }
  }
}
