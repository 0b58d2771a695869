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

  /** The canonical spelling: no trailing fraction zeros, no leading zeros (`-` if negative). */
  toString() {
    let c = this.coef;
    let s = this.scale;
    while (s > 0 && c % 10n === 0n) {
      c /= 10n;
      s--;
    }
    return new Dec(c, s).toScaled();
  }

  // ---- Signed arithmetic and the rounding rules of invoices (invoice.js). Amounts can be
  // negative there (an SLA credit's net), and a value keeps its scale as rust_decimal does
  // (`148.00` stays `148.00`): `toScaled` writes it so, `toString` canonically.

  /** Parses a plain decimal with an optional leading `-`; null when it is not one. */
  static parseSigned(s) {
    if (typeof s !== 'string') return null;
    const negative = s.startsWith('-');
    const d = Dec.parse(negative ? s.slice(1) : s);
    return d && negative ? d.neg() : d;
  }

  /**
   * `num` ÷ `den` rounded to `places` fraction digits, exactly (BigInt): `half_even` (ties to
   * the even digit, rust_decimal's MidpointNearestEven) or `to_zero` (truncated, ToZero). The
   * result has exactly `places` digits of scale.
   */
  static quotient(num, den, places, mode = 'half_even') {
    let n = num.coef * 10n ** BigInt(den.scale + places);
    let d = den.coef * 10n ** BigInt(num.scale);
    if (d === 0n) throw new RangeError('division by zero');
    if (d < 0n) {
      n = -n;
      d = -d;
    }
    let q = n / d;
    const r = n - q * d;
    if (mode === 'half_even' && r !== 0n) {
      const twice = 2n * (r < 0n ? -r : r);
      if (twice > d || (twice === d && q % 2n !== 0n)) q += n < 0n ? -1n : 1n;
    }
    return new Dec(q, places);
  }

  /** This rounded to `places` digits (`half_even` or `to_zero`), with exactly that scale. */
  round(places, mode = 'half_even') {
    return Dec.quotient(this, Dec.int(1), places, mode);
  }

  /** This with at least `places` fraction digits, never rounded (rating.rs `pad_amount`). */
  pad(places) {
    return this.scale >= places ? this : new Dec(this.#at(places), places);
  }

  sub(o) {
    return this.add(o.neg());
  }

  neg() {
    return new Dec(-this.coef, this.scale);
  }

  isZero() {
    return this.coef === 0n;
  }

  /** The smaller of this and `o` (this when equal, as `Ord::min` keeps the first). */
  min(o) {
    return o.cmp(this) < 0 ? o : this;
  }

  /** The larger of this and `o` (`o` when equal, as `Ord::max` keeps the second). */
  max(o) {
    return o.cmp(this) >= 0 ? o : this;
  }

  /** The spelling with exactly this value's scale (rust_decimal's Display: `148.00`, `-0.5`). */
  toScaled() {
    const negative = this.coef < 0n;
    const digits = (negative ? -this.coef : this.coef).toString().padStart(this.scale + 1, '0');
    const s = this.scale;
    const text = s === 0 ? digits : `${digits.slice(0, -s)}.${digits.slice(-s)}`;
    return negative ? `-${text}` : text;
  }
}
