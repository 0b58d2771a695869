// Evidence bundles (docs/PROTOCOL.md §14) read once, front to back, as a stream, and checked
// as §15 steps 1, 2 and 4 say (with the limits stated in index.js's module docs).
//
// Memory: the context entries (the key registry, region parameters, their leaf hashes for the
// hash chain), and per record 40 bytes, its index and leaf hash (§14.2), in typed arrays. The
// multi-proof's nodes are consumed as their lines arrive and never kept. A version-2 bundle's
// records are proven one by one and keep the same 40 bytes (for the hash chain and the
// certificate's commitment, which the subject computes as the records pass).

import { b64decode, b64encode, bytesEqual, canonicalize, fromUtf8, parseStrict, utf8 } from './jcs.js';
import { leafHash, multiProofRoot, MultiProofError, verifyInclusion } from './merkle.js';
import { verifyCheckpointNote } from './note.js';
import { Failure } from './result.js';
import { Admission } from './admission.js';
import { checkEnvelope, GENESIS_PREV, isRecordKind, LeafError, LEDGER_KINDS, leafFromObject, parseLeaf, ROLE_KINDS } from './leaf.js';

/** The header `format` of version 2: an inclusion proof per entry (§14.1). */
export const BUNDLE_FORMAT_V2 = 'gpuledger-bundle/v2';
/** The header `format` of version 3: canonical lines, one multi-proof (§14.2). */
export const BUNDLE_FORMAT_V3 = 'gpuledger-bundle/v3';
/** `MAX_NODES_PER_LINE` (§14.2). */
export const MAX_NODES_PER_LINE = 4096;
/** The longest line read: a header with many cosignatures, a node line of 4096 hashes. */
export const MAX_LINE_BYTES = 1 << 20;
/** Lines parsed and prepared (leaf hash, v2 inclusion proof) ahead of the sequential checks. */
export const PREFETCH_LINES = 256;
/** Signatures verified ahead of the sequential checks, at most. */
export const SIGNATURE_WINDOW = 256;

const isObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * The lines of a bundle (a Blob, a string, a Uint8Array/ArrayBuffer or a ReadableStream of
 * bytes), each decoded as strict UTF-8 and without its LF: an async iterator of
 * {no (1-based), text}. A last line without LF is a line; `onProgress(bytesDone, bytesTotal)`
 * is called per chunk read (total null when unknown).
 */
export async function* bundleLines(input, onProgress) {
  let stream;
  let total = null;
  if (typeof input === 'string') input = new Blob([input]);
  if (input instanceof ArrayBuffer || ArrayBuffer.isView(input)) input = new Blob([input]);
  if (typeof Blob !== 'undefined' && input instanceof Blob) {
    total = input.size;
    stream = input.stream();
  } else if (input && typeof input.getReader === 'function') {
    stream = input;
  } else {
    throw new Failure('malformed', 'bundle', 'the bundle is not a Blob, string, byte array or ReadableStream');
  }
  const reader = stream.getReader();
  let pending = [];
  let pendingLen = 0;
  let no = 0;
  let done = 0;
  const decode = (parts, len) => {
    const bytes = new Uint8Array(len);
    let at = 0;
    for (const p of parts) {
      bytes.set(p, at);
      at += p.length;
    }
    try {
      return fromUtf8(bytes);
    } catch {
      throw new Failure('malformed', `line ${no}`, 'the line is not UTF-8');
    }
  };
  try {
    for (;;) {
      const { value, done: end } = await reader.read();
      if (end) break;
      let start = 0;
      for (;;) {
        const nl = value.indexOf(0x0a, start);
        const piece = value.subarray(start, nl < 0 ? value.length : nl);
        if (pendingLen + piece.length > MAX_LINE_BYTES) {
          throw new Failure('malformed', `line ${no + 1}`, `a line is longer than ${MAX_LINE_BYTES} bytes`);
        }
        if (nl < 0) {
          if (piece.length) {
            pending.push(piece.slice());
            pendingLen += piece.length;
          }
          break;
        }
        pending.push(piece);
        pendingLen += piece.length;
        no++;
        const text = decode(pending, pendingLen);
        pending = [];
        pendingLen = 0;
        yield { no, text };
        start = nl + 1;
      }
      done += value.length;
      if (onProgress) onProgress(done, total);
    }
    if (pendingLen > 0) {
      no++;
      yield { no, text: decode(pending, pendingLen) };
    }
  } finally {
    reader.releaseLock?.();
  }
}

/**
 * Reads ahead of the consumer: `start(line)` is called for up to `depth` lines before they are
 * taken, so their asynchronous work (WebCrypto digests) runs at once. A read failure becomes
 * an item {no, error} in its place.
 */
async function* prefetch(lines, depth, start) {
  const queue = [];
  let no = 0;
  try {
    for await (const l of lines) {
      no = l.no;
      queue.push(start(l));
      if (queue.length >= depth) yield queue.shift();
    }
  } catch (e) {
    queue.push({ no: no + 1, error: e });
  }
  while (queue.length) yield queue.shift();
}

/** Whether `text` is exactly the canonical form of `value`. */
const isCanonical = (value, text) => {
  try {
    return canonicalize(value) === text;
  } catch {
    return false;
  }
};

/**
 * Reads the header line and verifies its checkpoint (§15 steps 1–2). `logKey` is a parsed
 * verifier key. Returns {header, anchor: {origin, size, root, note}, v3}.
 */
export async function readHeader(line, logKey) {
  const malformed = (m) => new Failure('malformed', 'line 1', m);
  let h;
  try {
    h = parseStrict(line);
  } catch (e) {
    throw malformed(`the first line is not a bundle header: ${e.message}`);
  }
  const names = ['checkpoint', 'format', 'log_origin', 'subject', 'type'];
  if (!isObject(h) || h.type !== 'header') throw malformed('the first line is not a bundle header');
  for (const k of names) if (!(k in h)) throw malformed(`the header has no ${k}`);
  for (const k of Object.keys(h)) if (!names.includes(k)) throw malformed(`the header has an unknown member ${k}`);
  if (typeof h.format !== 'string' || typeof h.log_origin !== 'string' || typeof h.checkpoint !== 'string') {
    throw malformed('format, log_origin and checkpoint are strings');
  }
  const s = h.subject;
  const subjectKeys = isObject(s) ? Object.keys(s) : [];
  if (subjectKeys.length !== 1 || !['certificate', 'invoice'].includes(subjectKeys[0]) || typeof s[subjectKeys[0]] !== 'string') {
    throw malformed('subject is {"certificate": id} or {"invoice": number}');
  }
  if (h.format !== BUNDLE_FORMAT_V2 && h.format !== BUNDLE_FORMAT_V3) {
    throw malformed(`unknown bundle format ${JSON.stringify(h.format)}`);
  }
  const v3 = h.format === BUNDLE_FORMAT_V3;
  if (v3 && !isCanonical(h, line)) throw malformed('a version-3 line must be canonical JSON (RFC 8785)');
  const anchor = await verifyCheckpointNote(h.checkpoint, logKey, 'checkpoint');
  if (anchor.origin !== h.log_origin) {
    throw new Failure('checkpoint_mismatch', 'header', "log_origin is not the checkpoint's origin");
  }
  return { header: h, anchor, v3 };
}

/** A growable list of (index, leaf hash) pairs: 40 bytes each (§14.2). */
class LeafList {
  constructor() {
    this.count = 0;
    this.indexes = new Float64Array(1024);
    this.hashes = new Uint8Array(1024 * 32);
  }

  push(index, hash) {
    if (this.count === this.indexes.length) {
      const ix = new Float64Array(this.count * 2);
      ix.set(this.indexes);
      const hs = new Uint8Array(this.count * 64);
      hs.set(this.hashes);
      this.indexes = ix;
      this.hashes = hs;
    }
    this.indexes[this.count] = index;
    this.hashes.set(hash, this.count * 32);
    this.count++;
  }

  hash(k) {
    return this.hashes.subarray(k * 32, k * 32 + 32);
  }
}

/**
 * The key registry rebuilt from the context (§6.1, §6.2, §15 step 4): which key may sign
 * which entry at which index, and within which scope.
 */
class Registry {
  constructor(logKey, logKeyId) {
    this.logKey = logKey;
    this.logKeyId = logKeyId;
    /** key id → {signer, role, key: PublicKey, nodes, regions, at, revokedAt} */
    this.keys = new Map();
    /** signer → role */
    this.roles = new Map();
  }

  /** The key that may sign entry `e` at `index`; throws Failure. */
  keyFor(index, e) {
    const item = `entry ${index}`;
    if (LEDGER_KINDS.has(e.kind)) {
      if (e.signer !== 'ledger') throw new Failure('key_not_allowed', item, `a ${e.kind} entry is signed by the ledger, not ${e.signer}`);
      // As admission.rs has it: a ledger kind under any other key is a key not allowed to sign it.
      if (e.keyId !== this.logKeyId) throw new Failure('key_not_allowed', item, `a ${e.kind} entry is signed by the log key ${this.logKeyId} only, not ${e.keyId}`);
      return this.logKey;
    }
    const k = this.keys.get(e.keyId);
    if (!k || k.at >= index) {
      throw new Failure('unknown_key', item, `key ${e.keyId} of ${e.signer} is not registered before entry ${index} in the bundle's context`);
    }
    if (k.signer !== e.signer) throw new Failure('key_not_allowed', item, `key ${e.keyId} is registered to ${k.signer}, not ${e.signer}`);
    // The order of admission.rs's check_key: signer, role, then revocation.
    if (!ROLE_KINDS[k.role]?.has(e.kind)) throw new Failure('key_not_allowed', item, `a ${k.role} key may not sign ${e.kind}`);
    if (k.revokedAt !== undefined && k.revokedAt < index) {
      throw new Failure('key_revoked', item, `key ${e.keyId} was revoked at entry ${k.revokedAt}`);
    }
    if ('node' in e.body && k.nodes && !k.nodes.includes(e.body.node)) {
      throw new Failure('node_not_allowed', item, `node ${e.body.node} is outside key ${e.keyId}'s scope`);
    }
    if ('region' in e.body && !k.regions.includes(e.body.region)) {
      throw new Failure('region_not_allowed', item, `region ${e.body.region} is outside key ${e.keyId}'s scope`);
    }
    return k.key;
  }

  /** A registration or revocation consistent with the ones before it; throws Failure. */
  async checkChange(index, e) {
    const fail = (m) => new Failure('leaf_invalid', `entry ${index}`, m);
    const b = e.body;
    if (e.kind === 'signer_key_registered') {
      if (this.keys.has(b.key_id)) throw fail(`key ${b.key_id} is registered twice`);
      const role = this.roles.get(b.signer);
      if (role !== undefined && role !== b.role) throw fail(`signer ${b.signer} already has the role ${role}`);
    } else if (e.kind === 'signer_key_revoked') {
      const k = this.keys.get(b.key_id);
      if (!k) throw fail(`the revoked key ${b.key_id} is not registered`);
      if (k.signer !== b.signer) throw fail(`the revoked key ${b.key_id} is not ${b.signer}'s`);
      if (k.revokedAt !== undefined) throw fail(`key ${b.key_id} is revoked twice`);
    }
  }

  /** Applies a registration or revocation whose signature verified. */
  async apply(index, e, importKey) {
    const b = e.body;
    if (e.kind === 'signer_key_registered') {
      const key = await importKey(b.public_key);
      this.keys.set(b.key_id, { signer: b.signer, role: b.role, key, nodes: b.nodes, regions: b.regions, at: index });
      this.roles.set(b.signer, b.role);
    } else if (e.kind === 'signer_key_revoked') {
      this.keys.get(b.key_id).revokedAt = index;
    }
  }
}

/**
 * Verifies a bundle (§15 steps 1, 2, 4 and 4a) for `subject` (or none): every line's form and
 * order, the checkpoint, each leaf, the hash chain where the bundle holds the entry before,
 * the key of every entry by position, every signature strictly, and inclusion (per entry in
 * v2, the multi-proof in v3). `makeSubject(header, anchor)` is called once the header is
 * verified (it checks the certificate or invoice against it) and returns
 * {tenant, context(index, entry, receivedAt), record(index, leafHash, entry)} or null.
 * `witnesses(note)`, when given, is the witness step, run on the header's checkpoint first.
 * Returns the summary; throws Failure at the first failure in line order.
 */
export async function checkBundle({ input, logKey, logKeyId, importKey, makeSubject, onProgress, steps, witnesses }) {
  const lines = bundleLines(input, onProgress);
  const first = await lines.next();
  if (witnesses) {
    // §16.6 before §15, as `gpuledger verify` does: on the header's checkpoint, read as far
    // as it can be (an unreadable header has no cosignatures).
    let note = '';
    try {
      const h = first.done ? null : parseStrict(first.value.text);
      if (h && typeof h.checkpoint === 'string') note = h.checkpoint;
    } catch {
      // counted as no cosignatures
    }
    await witnesses(note);
  }
  if (first.done) throw new Failure('truncated', 'line 1', 'the bundle is empty');
  const { header, anchor, v3 } = await steps.step(
    'checkpoint',
    () => readHeader(first.value.text, logKey),
    (r) => `${r.header.format} bundle; checkpoint signed by the log key ${logKey.name}: size ${r.anchor.size}, root ${r.anchor.rootB64}`,
  );
  const subject = makeSubject ? await makeSubject(header, anchor) : null;
  const origin = anchor.origin;
  const registry = new Registry(logKey.key, logKeyId);
  const admission = new Admission();
  const contextHashes = new Map();
  const contextList = new LeafList();
  const records = new LeafList();
  let lastRecord = null;
  // Receive times (§7: they never decrease in index order): the context entries' [index, time]
  // in index order (context comes first), and the last record's.
  const contextTimes = [];
  let lastRecordTime = null;
  const receivedInOrder = (index, t, record) => {
    let lo = 0;
    let hi = contextTimes.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (contextTimes[mid][0] < index) lo = mid + 1;
      else hi = mid;
    }
    let before = lo > 0 ? contextTimes[lo - 1] : null;
    if (lastRecordTime && lastRecordTime[0] < index && (!before || lastRecordTime[0] > before[0])) before = lastRecordTime;
    // Timestamps are fixed-width YYYY-MM-DDTHH:MM:SSZ text: they compare as strings.
    if (before && t < before[1]) {
      throw new Failure('received_at_decreased', `entry ${index}`, `received_at ${t} is before ${before[1]}, the received_at of entry ${before[0]}: the log's receive times never decrease`);
    }
    const after = lo < contextTimes.length && contextTimes[lo][0] > index ? contextTimes[lo] : null;
    if (after && after[1] < t) {
      throw new Failure('received_at_decreased', `entry ${after[0]}`, `received_at ${after[1]} is before ${t}, the received_at of entry ${index}: the log's receive times never decrease`);
    }
    if (record) lastRecordTime = [index, t];
    else contextTimes.splice(lo, 0, [index, t]);
  };
  let inRecords = false;
  let lastIndex = -1;
  let entries = 0;
  let nodes = 0;
  let ended = false;
  let proofStarted = false;
  let proofFailure = null;
  let proofRoot = null;
  let pushedBack = null;
  /** v3: the current node line's hashes, and the next one to use. */
  let nodeBuffer = [];
  let nodePos = 0;
  let nodeLineNo = 0;
  /** v3: the proof runs at the end line; no node line can follow. */
  let atEnd = false;
  /** Record signatures verified ahead: [{index, promise}], in line order. */
  let pendingSigs = [];

  const drain = async (upto = 0) => {
    while (pendingSigs.length > upto) {
      const p = pendingSigs.shift();
      if (!(await p.promise)) {
        throw new Failure('entry_signature', `entry ${p.index}`, 'the signature does not verify (Ed25519)');
      }
    }
  };
  // A failure found at a line comes after any bad signature of the lines before it.
  const failAfterSignatures = async (f) => {
    await drain();
    throw f;
  };

  const parseLine = (no, text) => {
    const malformed = (m) => new Failure('malformed', `line ${no}`, m);
    let raw;
    try {
      raw = parseStrict(text);
    } catch (e) {
      throw malformed(`not a bundle line: ${e.message}`);
    }
    if (!isObject(raw) || typeof raw.type !== 'string') throw malformed('not a bundle line: no type');
    const allowed = {
      header: null,
      end: v3 ? ['type', 'entries', 'nodes'] : ['type', 'entries'],
      nodes: v3 ? ['type', 'hashes'] : undefined,
      entry: v3 ? ['type', 'index', 'leaf'] : ['type', 'index', 'leaf', 'proof'],
    }[raw.type];
    if (allowed === undefined) throw malformed(`unknown line type ${JSON.stringify(raw.type)}`);
    if (allowed === null) return { type: 'header' };
    for (const k of Object.keys(raw)) if (!allowed.includes(k)) throw malformed(`members do not fit a ${raw.type} line`);
    if (v3 && raw.type === 'entry') {
      // As bundle.rs `LineCheck::entry` reads it: the line is {"index":N,"leaf":<leaf>,
      // "type":"entry"} around the leaf's bytes as they are; a leaf that is not canonical is
      // its entry's failure (prepareEntry), named `entry N` as the Rust verifier names it.
      const prefix = `{"index":${raw.index},"leaf":`;
      const suffix = ',"type":"entry"}';
      const framed = Number.isSafeInteger(raw.index) && raw.index >= 0 && text.length > prefix.length + suffix.length
        && text.startsWith(prefix) && text.endsWith(suffix);
      if (!framed) throw malformed('a version-3 line must be canonical JSON (RFC 8785)');
    } else if (v3 && !isCanonical(raw, text)) throw malformed('a version-3 line must be canonical JSON (RFC 8785)');
    if (v3 && raw.type === 'entry') Object.defineProperty(raw, 'text', { value: text });
    return raw;
  };

  /** A node line's hashes (§14.2). */
  const nodeHashes = (no, raw) => {
    const malformed = (m) => new Failure('malformed', `line ${no}`, m);
    if (!Array.isArray(raw.hashes)) throw malformed('a node line needs hashes');
    if (raw.hashes.length < 1 || raw.hashes.length > MAX_NODES_PER_LINE) {
      throw malformed(`a node line holds 1 to ${MAX_NODES_PER_LINE} hashes, not ${raw.hashes.length}`);
    }
    return raw.hashes.map((h) => {
      const b = b64decode(h);
      if (!b || b.length !== 32) throw malformed('node hashes are not base64 of 32 bytes');
      return b;
    });
  };

  /** The next prepared line (see `prepare`), the pushed-back one first; null at the end. */
  const nextLine = async () => {
    if (pushedBack) {
      const l = pushedBack;
      pushedBack = null;
      return l;
    }
    const r = await source.next();
    return r.done ? null : r.value;
  };

  /** v3: the next node for ROOT, reading node lines as they come; null when they stop. */
  const nextNode = async () => {
    while (nodePos === nodeBuffer.length) {
      if (atEnd) return null;
      const l = await nextLine();
      if (!l) return null;
      if (l.error) throw l.error;
      if (l.raw.type !== 'nodes') {
        pushedBack = l;
        return null;
      }
      nodeBuffer = nodeHashes(l.no, l.raw);
      nodePos = 0;
      nodeLineNo = l.no;
      nodes += nodeBuffer.length;
    }
    return nodeBuffer[nodePos++];
  };

  /** v3: recomputes the root from the entries and the node lines from here on. */
  const runProof = async (no) => {
    proofStarted = true;
    // Context and records are two increasing runs; merge them, refusing an index in both.
    let c = 0;
    let r = 0;
    for (let k = 0; k < records.count; k++) {
      if (contextHashes.has(records.indexes[k])) {
        throw new Failure('order', `entry ${records.indexes[k]}`, 'an index appears twice in the bundle');
      }
    }
    const leaves = {
      peek() {
        const a = c < contextList.count ? contextList.indexes[c] : Infinity;
        const b = r < records.count ? records.indexes[r] : Infinity;
        return Math.min(a, b);
      },
      take() {
        const a = c < contextList.count ? contextList.indexes[c] : Infinity;
        const b = r < records.count ? records.indexes[r] : Infinity;
        return a < b ? contextList.hash(c++) : records.hash(r++);
      },
    };
    try {
      proofRoot = await multiProofRoot(anchor.size, leaves, nextNode);
      if (nodePos < nodeBuffer.length) {
        nodeBuffer = [];
        nodePos = 0;
        proofFailure = new Failure('inclusion_proof', `line ${nodeLineNo}`, 'the multi-proof has more nodes than the tree needs');
      }
    } catch (e) {
      if (!(e instanceof MultiProofError)) throw e;
      proofFailure = new Failure('inclusion_proof', 'multi-proof', `the multi-proof does not fit the bundle's entries: ${e.message}`);
      nodeBuffer = [];
      nodePos = 0;
    }
    if (!proofFailure && !bytesEqual(proofRoot, anchor.root)) {
      proofFailure = new Failure('inclusion_proof', 'multi-proof', "the entries and the multi-proof do not lead to the checkpoint's root");
    }
    return no;
  };

  /**
   * One entry line checked alone (§15 step 4 up to the envelope; in v2 its inclusion proof).
   * Runs for several lines at once, ahead of `acceptEntry`; its failure is reported when its
   * line's turn comes.
   */
  const prepareEntry = async (no, raw) => {
    const malformed = (m) => new Failure('malformed', `line ${no}`, m);
    if (!('index' in raw) || !('leaf' in raw)) throw malformed('an entry needs index and leaf');
    const index = raw.index;
    if (!Number.isSafeInteger(index)) throw malformed('index is not an integer');
    const item = `entry ${index}`;
    let leafText;
    if (v3) {
      if (!isObject(raw.leaf)) throw malformed('a version-3 leaf is a JSON object');
      // The line is {"index":N,"leaf":<leaf>,"type":"entry"} (checked by parseLine), so the
      // leaf's text is the line's `leaf` member exactly; whether it is canonical is checked below.
      leafText = raw.text.slice(`{"index":${index},"leaf":`.length, -',"type":"entry"}'.length);
    } else {
      if (!('proof' in raw)) throw malformed('an entry needs index, leaf and proof');
      if (typeof raw.leaf !== 'string') throw malformed('a version-2 leaf is a base64 string');
    }
    if (index >= anchor.size) {
      throw new Failure('not_in_checkpoint', item, `index is not below the checkpoint's size ${anchor.size}`);
    }
    if (v3 && !isCanonical(raw.leaf, leafText)) {
      throw new Failure('malformed', item, 'a version-3 line must be canonical JSON (RFC 8785)');
    }
    let leafBytes;
    if (v3) {
      leafBytes = utf8(leafText);
    } else {
      leafBytes = b64decode(raw.leaf);
      if (!leafBytes) throw new Failure('malformed', item, 'leaf is not base64');
      try {
        leafText = fromUtf8(leafBytes);
      } catch {
        throw new Failure('leaf_invalid', item, 'the leaf bytes are not UTF-8');
      }
    }
    let leaf;
    try {
      leaf = v3 ? leafFromObject(raw.leaf) : parseLeaf(leafText);
    } catch (e) {
      if (e instanceof LeafError) throw new Failure('leaf_invalid', item, e.message);
      throw e;
    }
    if (leaf.index !== index) throw new Failure('leaf_invalid', item, `the leaf says index ${leaf.index}`);
    const hash = await leafHash(leafBytes);
    if (!v3) {
      if (!Array.isArray(raw.proof)) throw new Failure('malformed', item, 'proof is a list of hashes');
      const proof = raw.proof.map((h) => b64decode(h));
      if (proof.some((h) => !h || h.length !== 32)) throw new Failure('malformed', item, 'proof hashes are not base64 of 32 bytes');
      if (!(await verifyInclusion(index, anchor.size, hash, proof, anchor.root))) {
        throw new Failure('inclusion_proof', item, "the inclusion proof does not lead to the checkpoint's root");
      }
    }
    const prev = b64decode(leaf.prev);
    if (!prev || prev.length !== 32) throw new Failure('leaf_invalid', item, 'prev is not base64 of 32 bytes');
    let e;
    try {
      // The leaf text is canonical: the envelope's canonical text is in it, before the rest.
      const rest = `,"index":${leaf.index},"prev":${JSON.stringify(leaf.prev)},"received_at":${JSON.stringify(leaf.received_at)},"v":3}`;
      const envText = leafText.startsWith('{"envelope":') && leafText.endsWith(rest) ? leafText.slice(12, -rest.length) : null;
      e = await checkEnvelope(leaf.envelope, origin, envText);
    } catch (err) {
      if (err instanceof LeafError) throw new Failure('leaf_invalid', item, `envelope invalid: ${err.message}`);
      throw err;
    }
    return { index, item, leaf, hash, e };
  };

  /** The sequential part of step 4 for a prepared entry: place, chain, key, signature, subject. */
  const acceptEntry = async ({ index, item, leaf, hash, e }) => {
    const record = isRecordKind(e.kind);
    if (record) {
      if (!inRecords) lastIndex = -1;
      inRecords = true;
    } else if (inRecords) {
      throw new Failure('order', item, `a ${e.kind} context entry after the records`);
    }
    if (index <= lastIndex) throw new Failure('order', item, 'indexes must increase within each part of the bundle');
    lastIndex = index;
    entries++;
    if (record && subject?.tenant && e.body.tenant !== subject.tenant) {
      throw new Failure('wrong_tenant', item, `the record is not ${subject.tenant}'s`);
    }
    let expected = null;
    if (index === 0) expected = GENESIS_PREV;
    else if (lastRecord && lastRecord.index === index - 1) expected = b64encode(lastRecord.hash);
    else if (contextHashes.has(index - 1)) expected = b64encode(contextHashes.get(index - 1));
    if (expected !== null && expected !== leaf.prev) {
      throw new Failure('leaf_invalid', item, index === 0 ? "the first entry's prev is not 32 zero bytes" : `prev is not the leaf hash of entry ${index - 1}`);
    }
    receivedInOrder(index, leaf.received_at, record);
    if (record) {
      lastRecord = { index, hash };
      records.push(index, hash);
    } else {
      contextHashes.set(index, hash);
      contextList.push(index, hash);
    }
    const key = registry.keyFor(index, e);
    // Parties, time under the policy in force, spot series, prices forward (§6.7).
    admission.check(index, e, leaf.received_at);
    if (!record) {
      await registry.checkChange(index, e);
      // Context changes the registry only once its signature holds.
      if (!(await key.verify(e.message, e.sig))) {
        throw new Failure('entry_signature', item, 'the signature does not verify (Ed25519)');
      }
      await registry.apply(index, e, importKey);
      admission.apply(index, e);
      if (subject) await subject.context(index, e, leaf.received_at);
    } else {
      admission.apply(index, e);
      pendingSigs.push({ index, promise: key.verify(e.message, e.sig) });
      if (pendingSigs.length > SIGNATURE_WINDOW) await drain(SIGNATURE_WINDOW / 2);
      if (subject) await subject.record(index, hash, e);
    }
  };

  /** Parses a line and, for an entry, starts preparing it. Never throws: errors are kept. */
  const prepare = (l) => {
    try {
      const raw = parseLine(l.no, l.text);
      const item = { no: l.no, raw };
      if (raw.type === 'entry') {
        item.prepared = prepareEntry(l.no, raw);
        item.prepared.catch(() => {});
      }
      return item;
    } catch (e) {
      return { no: l.no, error: e };
    }
  };
  const source = prefetch(lines, PREFETCH_LINES, prepare);

  try {
    for (;;) {
      const l = await nextLine();
      if (!l) break;
      if (l.error) throw l.error;
      const raw = l.raw;
      const at = `line ${l.no}`;
      if (ended) throw new Failure('malformed', at, 'a line after the end line');
      if (raw.type === 'header') throw new Failure('order', at, 'a second header');
      if (raw.type === 'end') {
        if (!Number.isSafeInteger(raw.entries)) throw new Failure('malformed', at, 'the end line has no entry count');
        if (v3 && !Number.isSafeInteger(raw.nodes)) throw new Failure('malformed', at, 'the end line has no node count');
        if (raw.entries !== entries) {
          throw new Failure('truncated', at, `the end line counts ${raw.entries} entries, the bundle has ${entries}`);
        }
        if (v3) {
          if (raw.nodes !== nodes) throw new Failure('truncated', at, `the end line counts ${raw.nodes} nodes, the bundle has ${nodes}`);
          if (!proofStarted) {
            atEnd = true;
            await runProof(l.no);
          }
          if (proofFailure) throw proofFailure;
        }
        ended = true;
        continue;
      }
      if (raw.type === 'nodes') {
        const hashes = nodeHashes(l.no, raw);
        if (!proofStarted) {
          nodeBuffer = hashes;
          nodePos = 0;
          nodeLineNo = l.no;
          nodes += hashes.length;
          await runProof(l.no);
        } else {
          nodes += hashes.length;
          proofFailure ??= new Failure('inclusion_proof', at, 'the multi-proof has more nodes than the tree needs');
        }
        continue;
      }
      if (proofStarted) throw new Failure('order', at, 'an entry after the node lines');
      await acceptEntry(await l.prepared);
    }
    if (!ended) throw new Failure('truncated', 'end', 'the bundle has no end line');
    await drain();
  } catch (f) {
    await failAfterSignatures(f);
  }
  return {
    subject,
    summary: {
      log_origin: origin,
      checkpoint_size: anchor.size,
      checkpoint_root: anchor.rootB64,
      entries,
      records: records.count,
      bundle_format: header.format,
      multiproof_nodes: nodes,
    },
  };
}
