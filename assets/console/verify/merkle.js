// RFC 6962 Merkle tree hashing with SHA-256 (docs/PROTOCOL.md §8), the proof checks of
// RFC 9162 §2.1.3.2 (inclusion) and §2.1.4.2 (consistency), the streaming recomputation of a
// version-3 bundle's multi-proof (§14.2), and the incremental tree of a certificate's
// covered-entries commitment (§13.3). All hashing is WebCrypto's SHA-256.
//
// Indexes and sizes are JavaScript numbers (the protocol keeps them at most 2^53 − 1, §2.5),
// halved with Math.floor rather than bit shifts, which would cut them to 32 bits.

import { concat, sha256, bytesEqual } from './jcs.js';

const LEAF = new Uint8Array([0x00]);
const NODE = new Uint8Array([0x01]);

/** SHA-256 of the empty string: the root of the empty tree. */
export async function emptyRoot() {
  return sha256(new Uint8Array(0));
}

/** RFC 6962 leaf hash: SHA-256(0x00 ‖ data). */
export async function leafHash(data) {
  return sha256(concat(LEAF, data));
}

/** RFC 6962 node hash: SHA-256(0x01 ‖ left ‖ right). */
export async function nodeHash(left, right) {
  return sha256(concat(NODE, left, right));
}

/** The largest power of two strictly below n (n ≥ 2). */
export function splitPoint(n) {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

const isPowerOfTwo = (x) => {
  while (x > 1 && x % 2 === 0) x /= 2;
  return x === 1;
};
const half = (x) => Math.floor(x / 2);
const odd = (x) => x % 2 === 1;

/**
 * RFC 9162 §2.1.3.2: whether `proof` (array of 32-byte hashes) proves the leaf hash `hash` at
 * `index` in the tree of `size` with root `root`.
 */
export async function verifyInclusion(index, size, hash, proof, root) {
  if (!(index < size)) return false;
  let fn = index;
  let sn = size - 1;
  let r = hash;
  for (const p of proof) {
    if (sn === 0) return false;
    if (odd(fn) || fn === sn) {
      r = await nodeHash(p, r);
      if (!odd(fn)) {
        while (!odd(fn) && fn !== 0) {
          fn = half(fn);
          sn = half(sn);
        }
      }
    } else {
      r = await nodeHash(r, p);
    }
    fn = half(fn);
    sn = half(sn);
  }
  return sn === 0 && bytesEqual(r, root);
}

/**
 * RFC 9162 §2.1.4.2: whether `proof` proves that the tree of `size2` with root `root2`
 * extends the tree of `size1` with root `root1` (0 ≤ size1 ≤ size2). For size1 = 0 the proof
 * must be empty; for size1 = size2 it must be empty and the roots equal.
 */
export async function verifyConsistency(size1, size2, root1, root2, proof) {
  if (size1 > size2) return false;
  if (size1 === 0) return proof.length === 0;
  if (size1 === size2) return proof.length === 0 && bytesEqual(root1, root2);
  if (proof.length === 0) return false;
  let path = proof;
  // An exact power of two: the old root is the first node of the path.
  if (isPowerOfTwo(size1)) path = [root1, ...proof];
  let fn = size1 - 1;
  let sn = size2 - 1;
  while (odd(fn)) {
    fn = half(fn);
    sn = half(sn);
  }
  let fr = path[0];
  let sr = path[0];
  for (const c of path.slice(1)) {
    if (sn === 0) return false;
    if (odd(fn) || fn === sn) {
      fr = await nodeHash(c, fr);
      sr = await nodeHash(c, sr);
      if (!odd(fn)) {
        while (!odd(fn) && fn !== 0) {
          fn = half(fn);
          sn = half(sn);
        }
      }
    } else {
      sr = await nodeHash(sr, c);
    }
    fn = half(fn);
    sn = half(sn);
  }
  return sn === 0 && bytesEqual(fr, root1) && bytesEqual(sr, root2);
}

/** A multi-proof that does not fit the bundle's entries (§14.2). */
export class MultiProofError extends Error {
  constructor(message) {
    super(message);
    this.name = 'MultiProofError';
  }
}

/**
 * A bound on hashes in flight: WebCrypto's digest is asynchronous, and awaiting each one in
 * turn would make a tree of n leaves cost n round trips to the crypto thread. Trees are
 * therefore built from promises, and at most `limit` combinations are pending at once.
 */
class InFlight {
  constructor(limit) {
    this.limit = limit;
    this.queue = [];
  }

  /** Tracks `p`; waits for the oldest when over the limit. */
  async add(p) {
    this.queue.push(p);
    while (this.queue.length > this.limit) await this.queue.shift();
  }
}

/** Hashes pending at once while a tree is built (see InFlight). */
export const MAX_HASHES_IN_FLIGHT = 1024;

const combine = (left, right) => Promise.all([left, right]).then(([l, r]) => nodeHash(l, r));

/**
 * The root of the tree of `size` from the bundle's entries and the multi-proof's nodes
 * (§14.2, ROOT). `leaves` gives the entries in increasing index order (all below `size`):
 * `peek()` is the next index (Infinity when none is left) and `take()` its leaf hash.
 * `nextNode()` resolves to the next node hash, or null when the node lines are over (the
 * proof is then short: MultiProofError). The caller checks that no node is left over.
 */
export async function multiProofRoot(size, leaves, nextNode) {
  if (size === 0) {
    if (leaves.peek() !== Infinity) throw new MultiProofError('entries in an empty tree');
    return emptyRoot();
  }
  const inFlight = new InFlight(MAX_HASHES_IN_FLIGHT);
  // Each call answers {h: Promise of the subtree's hash}; the wrapper keeps `await` from
  // waiting for the hash itself, so the walk runs ahead of the hashing.
  const root = async (lo, hi) => {
    // In order: every index below `lo` has been taken when [lo, hi) is visited, so
    // S ∩ [lo, hi) is non-empty exactly when the next index is below `hi`.
    if (!(leaves.peek() < hi)) {
      const h = await nextNode();
      if (h === null) throw new MultiProofError('the node list ended before the tree was complete');
      return { h };
    }
    if (hi - lo === 1) return { h: leaves.take() };
    const k = splitPoint(hi - lo);
    const left = await root(lo, lo + k);
    const right = await root(lo + k, hi);
    const h = combine(left.h, right.h);
    await inFlight.add(h);
    return { h };
  };
  const r = await root(0, size);
  if (leaves.peek() !== Infinity) throw new MultiProofError('an entry is not in the tree');
  return r.h;
}

/**
 * An RFC 6962 tree built by appending leaf hashes (or promises of them) one at a time,
 * keeping only the frontier (one hash per set bit of the count): for the covered-entries
 * commitment (§13.3).
 */
export class Frontier {
  constructor() {
    this.count = 0;
    /** Complete subtrees, largest first: {hash: Promise<Uint8Array>, size}. */
    this.stack = [];
    this.inFlight = new InFlight(MAX_HASHES_IN_FLIGHT);
  }

  /** Appends one leaf hash. */
  async push(leaf) {
    let h = Promise.resolve(leaf);
    let size = 1;
    while (this.stack.length && this.stack[this.stack.length - 1].size === size) {
      h = combine(this.stack.pop().hash, h);
      await this.inFlight.add(h);
      size *= 2;
    }
    this.stack.push({ hash: h, size });
    this.count++;
  }

  /** MTH of the leaves appended so far. */
  async root() {
    if (this.stack.length === 0) return emptyRoot();
    let h = this.stack[this.stack.length - 1].hash;
    for (let k = this.stack.length - 2; k >= 0; k--) h = combine(this.stack[k].hash, h);
    return h;
  }
}
