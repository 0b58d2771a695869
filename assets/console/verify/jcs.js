// JSON as the gpuledger protocol uses it (docs/PROTOCOL.md §2.5, §2.6): a strict parser that
// refuses repeated member names at any depth and every number but a plain integer up to
// 2^53 − 1, and the RFC 8785 (JCS) canonical form of what it returns. Plus the byte helpers
// (UTF-8, standard base64 with canonical padding bits, hex) the other modules share.
//
// The parser returns plain values: objects are null-prototype objects (so a member named
// `__proto__` is an ordinary member), arrays are arrays, strings are strings, integers are
// numbers. It never accepts what `JSON.parse` would read differently from a careful reader
// (repeated names, lone surrogates, big numbers), so the canonical form of what it returns is
// the one reading of the text.

/** The largest integer every JSON implementation carries exactly (§2.5). */
export const MAX_SAFE_INTEGER = 9007199254740991;

/** Nesting deeper than this is refused; the protocol's objects are a few levels deep. */
export const MAX_DEPTH = 64;

/** A parse failure: the protocol's `malformed`. */
export class JsonError extends Error {
  constructor(message) {
    super(message);
    this.name = 'JsonError';
  }
}

const WS = new Set([0x20, 0x09, 0x0a, 0x0d]);

/**
 * Parses one JSON text strictly (RFC 8259 grammar; §2.6 rules). Throws JsonError.
 * @param {string} text
 */
export function parseStrict(text) {
  let i = 0;
  const n = text.length;
  const fail = (m) => {
    throw new JsonError(`${m} at offset ${i}`);
  };
  const skip = () => {
    while (i < n && WS.has(text.charCodeAt(i))) i++;
  };
  const value = (depth) => {
    if (depth > MAX_DEPTH) fail('nesting too deep');
    skip();
    if (i >= n) fail('unexpected end of JSON');
    const c = text[i];
    if (c === '{') {
      i++;
      const obj = Object.create(null);
      const seen = new Set();
      skip();
      if (text[i] === '}') {
        i++;
        return obj;
      }
      for (;;) {
        skip();
        if (text[i] !== '"') fail('expected a member name');
        const name = string();
        if (seen.has(name)) fail(`repeated member name ${JSON.stringify(name)}`);
        seen.add(name);
        skip();
        if (text[i] !== ':') fail('expected ":"');
        i++;
        obj[name] = value(depth + 1);
        skip();
        if (text[i] === ',') {
          i++;
          continue;
        }
        if (text[i] === '}') {
          i++;
          return obj;
        }
        fail('expected "," or "}"');
      }
    }
    if (c === '[') {
      i++;
      const arr = [];
      skip();
      if (text[i] === ']') {
        i++;
        return arr;
      }
      for (;;) {
        arr.push(value(depth + 1));
        skip();
        if (text[i] === ',') {
          i++;
          continue;
        }
        if (text[i] === ']') {
          i++;
          return arr;
        }
        fail('expected "," or "]"');
      }
    }
    if (c === '"') return string();
    if (text.startsWith('true', i)) {
      i += 4;
      return true;
    }
    if (text.startsWith('false', i)) {
      i += 5;
      return false;
    }
    if (text.startsWith('null', i)) {
      i += 4;
      return null;
    }
    const m = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;
    m.lastIndex = i;
    const found = m.exec(text);
    if (!found || found[0] === '-' || found[0] === '') fail('unexpected character');
    const spelled = found[0];
    if (!/^(?:0|[1-9][0-9]*)$/.test(spelled)) {
      fail(`the number ${spelled} is not a plain non-negative integer`);
    }
    const v = Number(spelled);
    if (v > MAX_SAFE_INTEGER) fail(`the integer ${spelled} is above 2^53 − 1`);
    i += spelled.length;
    return v;
  };
  const string = () => {
    i++; // the opening quote
    let out = '';
    let start = i;
    for (;;) {
      if (i >= n) fail('unterminated string');
      const code = text.charCodeAt(i);
      if (code === 0x22) {
        out += text.slice(start, i);
        i++;
        break;
      }
      if (code < 0x20) fail('a control character inside a string');
      if (code >= 0xd800 && code <= 0xdfff) {
        // Literal surrogates come from the decoder as pairs; a lone one cannot.
        const next = text.charCodeAt(i + 1);
        if (code > 0xdbff || !(next >= 0xdc00 && next <= 0xdfff)) fail('a lone surrogate');
        i += 2;
        continue;
      }
      if (code !== 0x5c) {
        i++;
        continue;
      }
      out += text.slice(start, i);
      const e = text[i + 1];
      i += 2;
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          const hex4 = () => {
            const h = text.slice(i, i + 4);
            if (!/^[0-9a-fA-F]{4}$/.test(h)) fail('a bad \\u escape');
            i += 4;
            return parseInt(h, 16);
          };
          const u = hex4();
          if (u >= 0xd800 && u <= 0xdbff) {
            if (text[i] !== '\\' || text[i + 1] !== 'u') fail('a lone surrogate escape');
            i += 2;
            const lo = hex4();
            if (!(lo >= 0xdc00 && lo <= 0xdfff)) fail('a lone surrogate escape');
            out += String.fromCharCode(u, lo);
          } else if (u >= 0xdc00 && u <= 0xdfff) {
            fail('a lone surrogate escape');
          } else {
            out += String.fromCharCode(u);
          }
          break;
        }
        default:
          fail('a bad escape');
      }
      start = i;
    }
    return out;
  };
  const v = value(0);
  skip();
  if (i !== n) fail('text after the JSON value');
  return v;
}

/**
 * The RFC 8785 canonical text of a value the parser returned (or one built from strings,
 * safe integers, booleans, null, arrays and objects). Throws on anything else.
 */
export function canonicalize(v) {
  if (v === null || v === true || v === false) return String(v);
  if (typeof v === 'string') return JSON.stringify(v); // JCS escapes strings as ES does
  if (typeof v === 'number') {
    if (!Number.isSafeInteger(v) || v < 0) throw new JsonError('only non-negative integers');
    return String(v);
  }
  if (Array.isArray(v)) return `[${v.map(canonicalize).join(',')}]`;
  if (typeof v === 'object') {
    // Default sort compares UTF-16 code units, which is what RFC 8785 §3.2.3 asks.
    const keys = Object.keys(v).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalize(v[k])}`).join(',')}}`;
  }
  throw new JsonError(`cannot canonicalise a ${typeof v}`);
}

const encoder = new TextEncoder();
const strictDecoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** UTF-8 bytes of a string. */
export function utf8(s) {
  return encoder.encode(s);
}

/** The string of UTF-8 bytes; throws JsonError on invalid UTF-8. */
export function fromUtf8(bytes) {
  try {
    return strictDecoder.decode(bytes);
  } catch {
    throw new JsonError('not UTF-8');
  }
}

/** Concatenates byte arrays. */
export function concat(...parts) {
  let len = 0;
  for (const p of parts) len += p.length;
  const out = new Uint8Array(len);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
const B64_INDEX = new Int16Array(128).fill(-1);
for (let k = 0; k < 64; k++) B64_INDEX[B64.charCodeAt(k)] = k;

/**
 * Decodes standard base64 with padding, canonical (RFC 4648 §3.5: unused bits zero), no
 * whitespace (§2.4). Returns null when `s` is not exactly that.
 */
export function b64decode(s) {
  if (typeof s !== 'string' || s.length % 4 !== 0) return null;
  let pad = 0;
  if (s.endsWith('==')) pad = 2;
  else if (s.endsWith('=')) pad = 1;
  const len = (s.length / 4) * 3 - pad;
  const out = new Uint8Array(len);
  let o = 0;
  for (let k = 0; k < s.length; k += 4) {
    const last = k + 4 === s.length;
    const q = [0, 0, 0, 0];
    for (let j = 0; j < 4; j++) {
      const c = s.charCodeAt(k + j);
      if (last && j >= 4 - pad) {
        if (c !== 0x3d) return null;
        continue;
      }
      const d = c < 128 ? B64_INDEX[c] : -1;
      if (d < 0) return null;
      q[j] = d;
    }
    const triple = (q[0] << 18) | (q[1] << 12) | (q[2] << 6) | q[3];
    if (last && pad === 2 && (triple & 0xffff) !== 0) return null;
    if (last && pad === 1 && (triple & 0xff) !== 0) return null;
    out[o++] = (triple >> 16) & 0xff;
    if (o < len) out[o++] = (triple >> 8) & 0xff;
    if (o < len) out[o++] = triple & 0xff;
  }
  return out;
}

/** Standard base64 with padding. */
export function b64encode(bytes) {
  let out = '';
  for (let k = 0; k < bytes.length; k += 3) {
    const a = bytes[k];
    const b = k + 1 < bytes.length ? bytes[k + 1] : 0;
    const c = k + 2 < bytes.length ? bytes[k + 2] : 0;
    const t = (a << 16) | (b << 8) | c;
    out += B64[(t >> 18) & 63] + B64[(t >> 12) & 63];
    out += k + 1 < bytes.length ? B64[(t >> 6) & 63] : '=';
    out += k + 2 < bytes.length ? B64[t & 63] : '=';
  }
  return out;
}

/** Lower-case hex. */
export function hex(bytes) {
  let out = '';
  for (const b of bytes) out += b.toString(16).padStart(2, '0');
  return out;
}

/** Whether two byte arrays are equal. */
export function bytesEqual(a, b) {
  if (a.length !== b.length) return false;
  for (let k = 0; k < a.length; k++) if (a[k] !== b[k]) return false;
  return true;
}

/** SHA-256 with WebCrypto. */
export async function sha256(bytes) {
  return new Uint8Array(await crypto.subtle.digest('SHA-256', bytes));
}
