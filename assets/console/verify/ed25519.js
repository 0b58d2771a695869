// Ed25519 as docs/PROTOCOL.md §3 specifies it, on top of WebCrypto.
//
// WebCrypto's Ed25519 (`crypto.subtle.verify`, BoringSSL in Chromium, OpenSSL in Node) does
// the cofactorless check of §3.3 step 3 (the encoding of [S]B − [k]A equals R byte for byte)
// and refuses S ≥ L. It does not refuse the keys §3.1 refuses (non-canonical, small-order and
// mixed-order keys) nor a small-order R (§3.3 step 2). Those two checks are made here, with
// no secret data involved: §3.1's key checks by decoding the point and multiplying it by the
// cofactor 8 and by the group order L (plain BigInt arithmetic on public values, RFC 8032
// §5.1.3 and §5.1.4), and step 2 by comparing R with the eight canonical encodings of the
// small-order points (a non-canonical R never passes step 3 anyway). Signing is never done
// here, and the verification equation itself is WebCrypto's.

import { b64decode, bytesEqual, hex } from './jcs.js';

const P = 2n ** 255n - 19n;
/** The prime order of the base point. */
export const L = 2n ** 252n + 27742317777372353535851937790883648493n;
const mod = (a) => {
  const r = a % P;
  return r < 0n ? r + P : r;
};
const pow = (b, e) => {
  let r = 1n;
  b = mod(b);
  while (e > 0n) {
    if (e & 1n) r = (r * b) % P;
    b = (b * b) % P;
    e >>= 1n;
  }
  return r;
};
const inv = (a) => pow(a, P - 2n);
const D = mod(-121665n * inv(121666n));
const SQRT_M1 = pow(2n, (P - 1n) / 4n);

/** Little-endian bytes to BigInt. */
function leInt(bytes) {
  let r = 0n;
  for (let k = bytes.length - 1; k >= 0; k--) r = (r << 8n) | BigInt(bytes[k]);
  return r;
}

/** RFC 8032 §5.1.3 decoding in extended coordinates; null when it fails (y ≥ p included). */
function decodePoint(bytes) {
  if (bytes.length !== 32) return null;
  const copy = Uint8Array.from(bytes);
  const sign = copy[31] >> 7;
  copy[31] &= 0x7f;
  const y = leInt(copy);
  if (y >= P) return null;
  const y2 = (y * y) % P;
  const u = mod(y2 - 1n);
  const v = mod(D * y2 + 1n);
  const v3 = (v * v * v) % P;
  let x = (u * v3 * pow(u * v3 * v3 * v, (P - 5n) / 8n)) % P;
  const vx2 = (v * x * x) % P;
  if (vx2 !== u) {
    if (vx2 === mod(-u)) x = (x * SQRT_M1) % P;
    else return null;
  }
  if (x === 0n && sign === 1) return null;
  if (Number(x & 1n) !== sign) x = P - x;
  return { X: x, Y: y, Z: 1n, T: (x * y) % P };
}

/** RFC 8032 §5.1.4 point addition (extended coordinates, a = −1). */
function add(p, q) {
  const a = mod((p.Y - p.X) * (q.Y - q.X));
  const b = mod((p.Y + p.X) * (q.Y + q.X));
  const c = mod(2n * D * p.T * q.T);
  const d = mod(2n * p.Z * q.Z);
  const e = b - a;
  const f = d - c;
  const g = d + c;
  const h = b + a;
  return { X: mod(e * f), Y: mod(g * h), T: mod(e * h), Z: mod(f * g) };
}

const IDENTITY = { X: 0n, Y: 1n, Z: 1n, T: 0n };

function mul(point, scalar) {
  let r = IDENTITY;
  let q = point;
  while (scalar > 0n) {
    if (scalar & 1n) r = add(r, q);
    q = add(q, q);
    scalar >>= 1n;
  }
  return r;
}

const isIdentity = (p) => mod(p.X) === 0n && mod(p.Y - p.Z) === 0n;

/** RFC 8032 §5.1.2 encoding. */
function encodePoint(p) {
  const zi = inv(p.Z);
  const x = mod(p.X * zi);
  let y = mod(p.Y * zi);
  const out = new Uint8Array(32);
  for (let k = 0; k < 32; k++) {
    out[k] = Number(y & 0xffn);
    y >>= 8n;
  }
  if (x & 1n) out[31] |= 0x80;
  return out;
}

/**
 * Why a 32-byte public key is not valid by §3.1, or null when it is: decodes, canonical, not
 * of small order, torsion-free.
 */
export function keyProblem(bytes) {
  if (!(bytes instanceof Uint8Array) || bytes.length !== 32) return 'not 32 bytes';
  const a = decodePoint(bytes);
  if (!a) return 'not the encoding of a curve point';
  if (!bytesEqual(encodePoint(a), bytes)) return 'not canonically encoded';
  if (isIdentity(mul(a, 8n))) return 'a point of small order';
  if (!isIdentity(mul(a, L))) return 'not torsion-free (mixed order)';
  return null;
}

/** The canonical encodings of the eight points of order 1, 2, 4 and 8. */
export const SMALL_ORDER_ENCODINGS = [
  '0100000000000000000000000000000000000000000000000000000000000000',
  'ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f',
  '0000000000000000000000000000000000000000000000000000000000000000',
  '0000000000000000000000000000000000000000000000000000000000000080',
  '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05',
  '26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85',
  'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a',
  'c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa',
];
const SMALL_ORDER = new Set(SMALL_ORDER_ENCODINGS);

/** For the tests: whether `bytes` decodes to a point P with [8]P the identity. */
export function isSmallOrderPoint(bytes) {
  const p = decodePoint(bytes);
  return p !== null && isIdentity(mul(p, 8n));
}

/** A public key checked by §3.1 and imported into WebCrypto. */
export class PublicKey {
  constructor(bytes, cryptoKey) {
    this.bytes = bytes;
    this.cryptoKey = cryptoKey;
  }

  /**
   * Checks and imports 32 bytes; throws Error naming the §3.1 check that fails.
   * @param {Uint8Array} bytes
   */
  static async fromBytes(bytes) {
    const problem = keyProblem(bytes);
    if (problem) throw new Error(`the public key is ${problem}`);
    const key = await crypto.subtle.importKey('raw', bytes, { name: 'Ed25519' }, false, ['verify']);
    return new PublicKey(bytes, key);
  }

  /** Base64 of 32 bytes (§2.4), checked and imported. */
  static async fromBase64(s) {
    const bytes = b64decode(s);
    if (!bytes || bytes.length !== 32) throw new Error('the public key is not base64 of 32 bytes');
    return PublicKey.fromBytes(bytes);
  }

  /**
   * §3.3: whether the 64-byte `sig` verifies strictly over `message`: S < L, R not of small
   * order, and WebCrypto's cofactorless equation.
   */
  async verify(message, sig) {
    if (!(sig instanceof Uint8Array) || sig.length !== 64) return false;
    if (leInt(sig.subarray(32)) >= L) return false;
    if (SMALL_ORDER.has(hex(sig.subarray(0, 32)))) return false;
    try {
      return await crypto.subtle.verify({ name: 'Ed25519' }, this.cryptoKey, sig, message);
    } catch {
      return false;
    }
  }
}
