// The console's DOM builder, message tables and locale formatting.
//
// Every visible string is either a message from the tables (`t(key)`, a `Msg`: the node that
// shows it is marked `data-i18n`) or data from the API (numbers, ids, dates: marked
// `data-raw`). tests/console.rs checks in Chinese mode that every visible text node is inside
// one of the two and that no English message shows where the Chinese table differs.

import en from "../i18n/en.js";
import zhCN from "../i18n/zh-CN.js";

/** The message tables by locale; both have the same keys (tests/console.rs checks). */
export const TABLES = { en, "zh-CN": zhCN };
/** The locales, in the order the switch lists them. */
export const LOCALES = ["en", "zh-CN"];
const LANG_KEY = "gpuledger.console.lang";

let locale = pickLocale();

function pickLocale() {
  const saved = localStorage.getItem(LANG_KEY);
  if (saved && TABLES[saved]) return saved;
  const nav = (navigator.language || "en").toLowerCase();
  return nav.startsWith("zh") ? "zh-CN" : "en";
}

/** The current locale (`en` or `zh-CN`). */
export function currentLocale() {
  return locale;
}

/** Switches the locale, remembers it, and sets `<html lang>`. */
export function setLocale(l) {
  if (!TABLES[l]) return;
  locale = l;
  localStorage.setItem(LANG_KEY, l);
  document.documentElement.lang = l;
}

/** A translated message: a key and its parameters, rendered in the current locale. */
export class Msg {
  constructor(key, params) {
    this.key = key;
    this.params = params || {};
  }
  toString() {
    const table = TABLES[locale];
    let s = table[this.key];
    if (s === undefined) {
      console.error(`missing message ${this.key} in ${locale}`);
      s = TABLES.en[this.key] ?? this.key;
    }
    return s.replace(/\{(\w+)\}/g, (_, name) =>
      this.params[name] === undefined ? `{${name}}` : String(this.params[name]),
    );
  }
}

/** The message `key` with `params` (`{name}` in the table is replaced by `params.name`). */
export function t(key, params) {
  return new Msg(key, params);
}

/**
 * Builds an element. `attrs`: `class`, `on<event>` handlers, `dataset`, booleans (true sets
 * an empty attribute), anything else as an attribute (a `Msg` is translated). Children: nodes,
 * `Msg`s (shown translated, marked `data-i18n`), strings and numbers (data, marked
 * `data-raw`), arrays of those; `null`, `undefined` and `false` are skipped.
 */
export function h(tag, attrs, ...children) {
  const svg = SVG_TAGS.has(tag);
  const el = svg
    ? document.createElementNS("http://www.w3.org/2000/svg", tag)
    : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") {
      el.addEventListener(k.slice(2).toLowerCase(), v);
    } else if (k === "dataset") {
      for (const [dk, dv] of Object.entries(v)) el.dataset[dk] = String(dv);
    } else if (k === "value" && !svg) {
      el.value = String(v);
    } else {
      el.setAttribute(k, v === true ? "" : String(v));
    }
  }
  append(el, children);
  return el;
}

const SVG_TAGS = new Set(["svg", "g", "rect", "line", "text", "title", "path", "desc"]);

/** Appends children as [`h`] does. */
export function append(el, children) {
  const flat = children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false);
  const sole = flat.length === 1;
  for (const c of flat) {
    if (c instanceof Node) {
      el.appendChild(c);
    } else if (c instanceof Msg) {
      if (sole) {
        el.dataset.i18n = c.key;
        el.appendChild(document.createTextNode(String(c)));
      } else {
        el.appendChild(h("span", { dataset: { i18n: c.key } }, c));
      }
    } else {
      const text = String(c);
      if (sole) {
        el.dataset.raw = "";
        el.appendChild(document.createTextNode(text));
      } else {
        el.appendChild(h("span", { "data-raw": true }, text));
      }
    }
  }
  return el;
}

/** Replaces the children of `el`. */
export function replace(el, ...children) {
  el.replaceChildren();
  delete el.dataset.i18n;
  delete el.dataset.raw;
  return append(el, children);
}

// ---------------------------------------------------------------------------------------------
// Formatting (Intl, per locale). Amounts and quantities arrive as exact decimal strings and are
// formatted from the string (Intl formats a decimal string exactly), never through a float.
// ---------------------------------------------------------------------------------------------

/** A decimal string (or number) formatted for the locale, with at most `max` decimals. */
export function fmtNumber(value, max = 6) {
  if (value === null || value === undefined || value === "") return "—";
  return new Intl.NumberFormat(locale, { maximumFractionDigits: max }).format(value);
}

/** An amount in `currency` (ISO 4217), formatted for the locale from its exact string. */
export function fmtMoney(value, currency) {
  if (value === null || value === undefined || value === "") return "—";
  try {
    return new Intl.NumberFormat(locale, {
      style: "currency",
      currency,
      maximumFractionDigits: 20,
    }).format(value);
  } catch {
    return `${fmtNumber(value, 20)} ${currency}`;
  }
}

/** A protocol timestamp (`YYYY-MM-DDTHH:MM:SSZ`) as a date and time in UTC. */
export function fmtDateTime(ts) {
  if (!ts) return "—";
  const d = new Date(ts);
  if (Number.isNaN(d.getTime())) return String(ts);
  return new Intl.DateTimeFormat(locale, {
    dateStyle: "medium",
    timeStyle: "short",
    timeZone: "UTC",
  }).format(d) + " UTC";
}

/** A protocol timestamp as a date (UTC). */
export function fmtDate(ts) {
  if (!ts) return "—";
  const d = new Date(ts);
  if (Number.isNaN(d.getTime())) return String(ts);
  return new Intl.DateTimeFormat(locale, { dateStyle: "medium", timeZone: "UTC" }).format(d);
}

/** A number in the locale's compact notation (axis labels on a phone: 1.2K, 1.2万). */
export function fmtCompact(value) {
  return new Intl.NumberFormat(locale, { notation: "compact", maximumFractionDigits: 1 }).format(value);
}

/**
 * The label of a time bucket starting at `ts` for a window of `hour`, `day` or `month`;
 * `short`, for a phone's chart: numeric (12/1, 12/1 14h, 12/26).
 */
export function fmtBucket(ts, window, { short = false } = {}) {
  const d = new Date(ts);
  if (Number.isNaN(d.getTime())) return String(ts);
  const opts = short
    ? window === "hour"
      ? { month: "numeric", day: "numeric", hour: "2-digit", hourCycle: "h23", timeZone: "UTC" }
      : window === "month"
        ? { year: "2-digit", month: "numeric", timeZone: "UTC" }
        : { month: "numeric", day: "numeric", timeZone: "UTC" }
    : window === "hour"
      ? { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", timeZone: "UTC" }
      : window === "month"
        ? { year: "numeric", month: "short", timeZone: "UTC" }
        : { month: "short", day: "numeric", timeZone: "UTC" };
  return new Intl.DateTimeFormat(locale, opts).format(d);
}

/** Whether a protocol timestamp is 00:00:00 UTC. */
const atMidnight = (ts) => typeof ts === "string" && ts.endsWith("T00:00:00Z");

/**
 * A period [from, to): dates when both ends are whole days (UTC), otherwise dates with their
 * times, so that a period of a few hours does not read "Dec 1, 2026 – Dec 1, 2026".
 */
export function fmtPeriod(from, to) {
  if (atMidnight(from) && atMidnight(to)) return `${fmtDate(from)} – ${fmtDate(to)}`;
  // One "UTC", at the end: "Nov 1, 2026, 9:00 PM – Dec 1, 2026, 9:00 PM UTC".
  return `${fmtDateTime(from).replace(/ UTC$/, "")} – ${fmtDateTime(to)}`;
}

// ---------------------------------------------------------------------------------------------
// Exact decimals (BigInt): sums and unit changes of the API's decimal strings.
// ---------------------------------------------------------------------------------------------

/** Parses a decimal string into `{n: BigInt, scale}` (value = n / 10^scale). */
export function dec(s) {
  const m = /^(-?)(\d+)(?:\.(\d+))?$/.exec(String(s ?? "0").trim());
  if (!m) throw new Error(`not a decimal: ${s}`);
  const frac = m[3] || "";
  return { n: BigInt(m[1] + m[2] + frac), scale: frac.length };
}

function rescale(a, scale) {
  return a.n * 10n ** BigInt(scale - a.scale);
}

/** The exact sum of decimal strings, as a decimal string. */
export function decSum(values) {
  const parsed = values.map(dec);
  const scale = Math.max(0, ...parsed.map((p) => p.scale));
  const n = parsed.reduce((acc, p) => acc + rescale(p, scale), 0n);
  return decString(n, scale);
}

function decString(n, scale) {
  const neg = n < 0n;
  let s = (neg ? -n : n).toString().padStart(scale + 1, "0");
  if (scale > 0) s = `${s.slice(0, -scale)}.${s.slice(-scale)}`.replace(/\.?0+$/, "");
  return (neg && s !== "0" ? "-" : "") + s;
}

/** `value / divisor` rounded half-even to `places` decimals, as a decimal string. */
export function decDiv(value, divisor, places) {
  const a = dec(value);
  // n / 10^scale / divisor, scaled by 10^places: (n * 10^places) / (divisor * 10^scale).
  const num = a.n * 10n ** BigInt(places);
  const den = BigInt(divisor) * 10n ** BigInt(a.scale);
  let q = num / den;
  const r = num % den;
  const twice = 2n * (r < 0n ? -r : r);
  if (twice > den || (twice === den && q % 2n !== 0n)) q += num < 0n ? -1n : 1n;
  return decString(q, places);
}

/** GPU-seconds as GPU-hours (4 decimals, half-even). */
export function gpuHours(gpuSeconds) {
  return decDiv(gpuSeconds, 3600, 4);
}

/** The message `key` when the tables have it, else `fallback` as data (for wire values such as
 * statuses or kinds that a newer server may add). */
export function tOr(key, fallback) {
  return Object.prototype.hasOwnProperty.call(TABLES.en, key) ? new Msg(key) : String(fallback);
}
