// Exact decimals for the protocol's quantities (docs/PROTOCOL.md §2.1, §13.2): a value is a
// BigInt coefficient and a scale (number of fraction digits). Nothing is ever rounded; the
// certificate's products (kwh × pue × carbon ÷ 1000) are exact here at any length.

/** The canonical decimal spelling of §2.1 (with its 9-digit fraction limit). */
export const CANONICAL = /^(0|[1-9][0-9]*)(\.[0-9]{0,8}[1-9])?$/;
/** `MAX_DECIMAL_LEN` (§2.1). */
export const MAX_DECIMAL_LEN = 40;
/** The certificate's spelling: canonical, without the fraction and length limits (§13.2). */
const CERTIFICATE_CANONICAL = /^(0|[1-9][0-9]*)(\.[0-9]*[1-9])?$/;
/** Any plain non-negative decimal, for comparing values as numbers. */
const PLAIN = /^[0-9]+(\.[0-9]+)?$/;

/** An exact decimal. */
export class Dec {
  constructor(coef, scale) {
    this.coef = coef;
    this.scale = scale;
  }

  /** Parses a plain non-negative decimal; null when it is not one. */
  static parse(s) {
    if (typeof s !== 'string' || !PLAIN.test(s)) return null;
    const [i, f = ''] = s.split('.');
    return new Dec(BigInt(i + f), f.length);
  }

  /** Parses a canonical protocol decimal (§2.1); null otherwise. */
  static parseCanonical(s) {
    if (typeof s !== 'string' || s.length > MAX_DECIMAL_LEN || !CANONICAL.test(s)) return null;
    return Dec.parse(s);
  }

  /** Whether `s` is spelled as a certificate's decimals are (§13.2). */
  static isCertificateSpelling(s) {
    return typeof s === 'string' && CERTIFICATE_CANONICAL.test(s);
  }

  static zero() {
    return new Dec(0n, 0);
  }

  static int(n) {
    return new Dec(BigInt(n), 0);
  }

  #at(scale) {
    return this.coef * 10n ** BigInt(scale - this.scale);
  }

  add(o) {
    const s = Math.max(this.scale, o.scale);
    return new Dec(this.#at(s) + o.#at(s), s);
  }

  mul(o) {
    return new Dec(this.coef * o.coef, this.scale + o.scale);
  }

  /** This divided by 10^k (exact). */
  shift(k) {
    return new Dec(this.coef, this.scale + k);
  }

  cmp(o) {
    const s = Math.max(this.scale, o.scale);
    const a = this.#at(s);
    const b = o.#at(s);
    return a < b ? -1 : a > b ? 1 : 0;
  }

  /** The canonical spelling: no trailing fraction zeros, no leading zeros. */
  toString() {
    let c = this.coef;
    let s = this.scale;
    while (s > 0 && c % 10n === 0n) {
      c /= 10n;
      s--;
    }
    const digits = c.toString().padStart(s + 1, '0');
    return s === 0 ? digits : `${digits.slice(0, -s)}.${digits.slice(-s)}`;
  }
}
