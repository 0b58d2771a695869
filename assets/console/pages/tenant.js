// Tenant pages: usage charts, invoices (with downloads, contracts and the prepaid balance),
// certificates (issue, list, download, check in the browser).

import { h, t, tOr, replace, currentLocale, fmtNumber, fmtMoney, fmtDate, fmtDateTime, fmtBucket, fmtPeriod, decSum, gpuHours } from "../lib/dom.js";
import { getJson, getText, getBlob, postJson, download, mapLimited, getPrepayments, ApiError } from "../lib/api.js";
import { stackedBars, legend, shareBar } from "../lib/chart.js";
import { trustForChecks, loadVerifier, showResult, trustPanel } from "../lib/trust.js";

const HOUR = 3_600_000;
const DAY = 86_400_000;
/** Most buckets one chart draws (a longer period asks for a coarser window). */
export const MAX_BUCKETS = 1000;

function utcMidnight(d) {
  return new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate()));
}

/** The current time rounded down to the whole hour (UTC). */
export function lastWholeHour(now = new Date()) {
  return new Date(Math.floor(now.getTime() / HOUR) * HOUR);
}

/**
 * How long after its end the ledger waits before it certifies a period, by default: the log
 * policy's max_future_skew_seconds (docs/CONFIGURATION.md, `invoice_close_seconds`).
 */
export const CLOSE_MARGIN_MS = 300 * 1000;

/**
 * The last whole hour (UTC) that ended at least `CLOSE_MARGIN_MS` ago: where the default
 * periods end, so a certificate of the default period is not refused as not yet closed.
 */
export function lastClosedHour(now = new Date()) {
  return lastWholeHour(new Date(now.getTime() - CLOSE_MARGIN_MS));
}

/** A Date as the value of a `datetime-local` input, in UTC (`YYYY-MM-DDTHH:MM`). */
export function inputValue(d) {
  return d.toISOString().slice(0, 16);
}

/**
 * What a period input or URL holds (`YYYY-MM-DD`, `YYYY-MM-DDTHH:MM`, with seconds, with or
 * without `Z`), read as UTC, as the protocol's timestamp; null when it is none of these.
 */
export function toTimestamp(v) {
  const s = String(v ?? "").trim().replace(/Z$/, "");
  if (/^\d{4}-\d{2}-\d{2}$/.test(s)) return `${s}T00:00:00Z`;
  if (/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}$/.test(s)) return `${s}:00Z`;
  if (/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$/.test(s)) return `${s}Z`;
  return null;
}

/**
 * The period presets of both period pickers (usage and certificates), as `datetime-local`
 * values [from, to): each ends at the last whole hour that has closed (`lastClosedHour`), so it
 * is a period the ledger certifies, and the default ("last 30 days") is the same on both pages.
 */
export function presets(now = new Date()) {
  const end = lastClosedHour(now);
  const today = utcMidnight(end);
  const monthStart = new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), 1));
  const lastMonthStart = new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth() - 1, 1));
  const back = (ms) => inputValue(new Date(end.getTime() - ms));
  return {
    last_1d: [back(DAY), inputValue(end)],
    last_7d: [back(7 * DAY), inputValue(end)],
    last_30d: [back(30 * DAY), inputValue(end)],
    // In the first hour of a month "this month" is that hour, not an empty period.
    this_month: [inputValue(monthStart), inputValue(end > monthStart ? end : new Date(end.getTime() + HOUR))],
    last_month: [inputValue(lastMonthStart), inputValue(monthStart)],
  };
}

/** The start of the `window` (hour, day, month; UTC) that holds `d`, as the API counts them. */
function windowStart(d, window) {
  if (window === "hour") return new Date(Math.floor(d.getTime() / HOUR) * HOUR);
  if (window === "month") return new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1));
  return utcMidnight(d);
}

/** Every bucket start for `window` of the period [from, to), as protocol timestamps. */
function bucketsOf(from, to, window) {
  const out = [];
  let d = windowStart(new Date(from), window);
  const end = new Date(to);
  while (d < end && out.length < MAX_BUCKETS) {
    out.push(d.toISOString().replace(".000Z", "Z"));
    d =
      window === "hour"
        ? new Date(d.getTime() + HOUR)
        : window === "month"
          ? new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1))
          : new Date(d.getTime() + DAY);
  }
  return out;
}

function select(id, value, options) {
  return h(
    "select",
    { id, name: id },
    options.map(([v, label]) => h("option", { value: v, selected: v === value }, label)),
  );
}

/**
 * The usage API's rows (grouped by region, node, GPU model and lease) merged so that GPU time
 * and energy of the same place are one row. Energy records name no GPU model or lease, so the
 * API answers them in rows of their own (GPU model ""): a node's energy goes to the GPU model
 * that node ran in the period when it ran exactly one (bare-metal nodes do), and stays "—"
 * otherwise. Returns rows {window_start, region, gpu_model, gpu_seconds, kwh, records,
 * classes: Map(class → GPU-seconds)}, one per (window, region, GPU model).
 */
export function mergeUsage(rows, classOf) {
  const models = new Map();
  for (const r of rows) {
    if (!r.gpu_model) continue;
    const k = `${r.region}\u0000${r.node}`;
    if (!models.has(k)) models.set(k, new Set());
    models.get(k).add(r.gpu_model);
  }
  const out = new Map();
  for (const r of rows) {
    let model = r.gpu_model || "";
    if (!model) {
      const m = models.get(`${r.region}\u0000${r.node}`);
      if (m && m.size === 1) model = [...m][0];
    }
    const key = `${r.window_start ?? ""}\u0000${r.region}\u0000${model}`;
    const acc = out.get(key) || { window_start: r.window_start, region: r.region || "—", gpu_model: model || "—", gpu: [], kwh: [], records: 0, classes: new Map() };
    acc.gpu.push(r.gpu_seconds);
    acc.kwh.push(r.kwh);
    acc.records += (r.usage_records || 0) + (r.energy_records || 0);
    if (r.lease && r.usage_records) {
      const cls = classOf.get(r.lease) || "unknown";
      acc.classes.set(cls, decSum([acc.classes.get(cls) || "0", r.gpu_seconds]));
    }
    out.set(key, acc);
  }
  return [...out.values()].map((a) => ({ ...a, gpu_seconds: decSum(a.gpu), kwh: decSum(a.kwh) }));
}

/** `#/usage?from&to&window&metric&by`: GPU-hours or kWh by region or GPU model over time. */
export async function usagePage(main, _arg, query) {
  const p = presets();
  const from = toTimestamp(query.get("from")) ? query.get("from") : p.last_30d[0];
  const to = toTimestamp(query.get("to")) ? query.get("to") : p.last_30d[1];
  const window = ["hour", "day", "month"].includes(query.get("window")) ? query.get("window") : "day";
  const metric = query.get("metric") === "kwh" ? "kwh" : "gpu";
  const by = query.get("by") === "gpu_model" ? "gpu_model" : "region";
  const fromInput = h("input", { id: "from", name: "from", type: "datetime-local", step: 3600, value: inputValue(new Date(toTimestamp(from))), required: true });
  const toInput = h("input", { id: "to", name: "to", type: "datetime-local", step: 3600, value: inputValue(new Date(toTimestamp(to))), required: true });
  const current = Object.keys(p).find((k) => p[k][0] === fromInput.value && p[k][1] === toInput.value) || "";
  const preset = select("preset", current, [["", t("preset_custom")], ...Object.keys(p).map((k) => [k, t(`preset_${k}`)])]);
  preset.addEventListener("change", () => {
    const v = p[preset.value];
    if (v) [fromInput.value, toInput.value] = v;
  });
  const form = h(
    "form",
    {
      class: "card filters",
      onsubmit: (ev) => {
        ev.preventDefault();
        const q = new URLSearchParams(new FormData(form));
        q.delete("preset");
        location.hash = `#/usage?${q}`;
      },
    },
    h("div", { class: "field" }, h("label", { for: "preset" }, t("period")), preset),
    h("div", { class: "field" }, h("label", { for: "from" }, t("from_utc")), fromInput),
    h("div", { class: "field" }, h("label", { for: "to" }, t("to_exclusive_utc")), toInput),
    h("div", { class: "field" }, h("label", { for: "window" }, t("bucket")), select("window", window, [["hour", t("window_hour")], ["day", t("window_day")], ["month", t("window_month")]])),
    h("div", { class: "field" }, h("label", { for: "metric" }, t("metric")), select("metric", metric, [["gpu", t("metric_gpu_hours")], ["kwh", t("metric_kwh")]])),
    h("div", { class: "field" }, h("label", { for: "by" }, t("group_by")), select("by", by, [["region", t("region")], ["gpu_model", t("gpu_model")]])),
    h("div", { class: "actions" }, h("button", { type: "submit" }, t("show"))),
  );
  const estimate = h("section", { class: "card", id: "estimate", "aria-live": "polite" }, h("h2", {}, t("estimate_title")), h("p", { class: "muted" }, t("loading")));
  const results = h("div", { "aria-live": "polite" }, h("p", { class: "muted" }, t("loading")));
  replace(main, h("h1", {}, t("usage_title")), estimate, form, results);
  periodToDate(estimate).catch((e) => replace(estimate, h("h2", {}, t("estimate_title")), h("p", { class: "error" }, t("error_with", { message: e.message }))));

  const [f, tt] = [toTimestamp(from), toTimestamp(to)];
  const base = `from=${encodeURIComponent(f)}&to=${encodeURIComponent(tt)}`;
  const [usage, prices] = await Promise.all([
    getJson(`/v1/usage?${base}&group_by=region,node,gpu_model,lease&window=${window}`),
    getJson("/v1/prices"),
  ]);
  const classOf = new Map(
    prices.filter((e) => e.kind === "lease_registered").map((e) => [e.body.lease, e.body.class]),
  );
  const rows = mergeUsage(usage.rows, classOf);
  const buckets = bucketsOf(f, tt, window).map((k) => ({ key: k, label: fmtBucket(k, window), short: fmtBucket(k, window, { short: true }) }));
  const value = (r) => (metric === "gpu" ? gpuHours(r.gpu_seconds) : r.kwh);
  const seriesMap = new Map();
  for (const r of rows) {
    if (Number(value(r)) === 0) continue;
    const name = r[by] || "—";
    if (!seriesMap.has(name)) seriesMap.set(name, {});
    const vals = seriesMap.get(name);
    const v = value(r);
    vals[r.window_start] = vals[r.window_start] ? decSum([vals[r.window_start], v]) : v;
  }
  const series = [...seriesMap.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([name, values]) => ({ name, values }));
  const unit = metric === "gpu" ? t("unit_gpu_hours") : t("unit_kwh");
  const chartTitle = String(t(metric === "gpu" ? "chart_gpu_title" : "chart_kwh_title", { by: String(t(by)) }));
  // Totals per region and GPU model over the period, exact: GPU-hours (by lease class) and kWh.
  const totals = new Map();
  for (const r of rows) {
    const key = `${r.region}\u0000${r.gpu_model}`;
    const acc = totals.get(key) || { region: r.region, gpu_model: r.gpu_model, gpu: [], kwh: [], records: 0, classes: new Map() };
    acc.gpu.push(r.gpu_seconds);
    acc.kwh.push(r.kwh);
    acc.records += r.records;
    for (const [c, v] of r.classes) acc.classes.set(c, decSum([acc.classes.get(c) || "0", v]));
    totals.set(key, acc);
  }
  const byClass = new Map();
  for (const r of rows) for (const [c, v] of r.classes) byClass.set(c, decSum([byClass.get(c) || "0", v]));
  const classes = [...byClass.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([name, v]) => ({ name, value: gpuHours(v) }));
  const classesLabelled = classes.map((c) => ({ name: String(tOr(`class_${c.name}`, c.name)), value: c.value }));
  const classCell = (m) =>
    m.size
      ? h(
          "span",
          { class: "classes" },
          [...m.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([c, v], i) => [i ? " · " : null, tOr(`class_${c}`, c), " ", fmtNumber(gpuHours(v), 4)]),
        )
      : "—";

  replace(
    results,
    h(
      "section",
      { class: "card", "aria-labelledby": "chart-title" },
      h("h2", { id: "chart-title" }, chartTitle),
      series.length
        ? [stackedBars({ buckets, series, title: chartTitle, unit: String(unit) }), legend(series.map((s) => s.name))]
        : h("p", { class: "muted", id: "no-usage" }, t("no_usage")),
    ),
    h(
      "section",
      { class: "card" },
      h("h2", {}, t("totals_title")),
      table(
        [t("region"), t("gpu_model"), t("metric_gpu_hours"), t("by_lease_class"), t("metric_kwh"), t("records")],
        [...totals.values()]
          .sort((a, b) => a.region.localeCompare(b.region) || a.gpu_model.localeCompare(b.gpu_model))
          .map((a) => [a.region, a.gpu_model, fmtNumber(gpuHours(decSum(a.gpu)), 4), classCell(a.classes), fmtNumber(decSum(a.kwh), 6), fmtNumber(a.records)]),
        { numeric: [2, 4, 5], id: "usage-totals" },
      ),
      h("p", { class: "muted" }, t("energy_attribution")),
    ),
    h(
      "section",
      { class: "card" },
      h("h2", {}, t("lease_classes_title")),
      classes.length
        ? [
            shareBar(classesLabelled, String(t("lease_classes_title"))),
            legend(classesLabelled.map((c) => c.name)),
            table(
              [t("lease_class"), t("metric_gpu_hours")],
              classes.map((c) => [tOr(`class_${c.name}`, c.name), fmtNumber(c.value, 4)]),
              { numeric: [1], id: "lease-classes" },
            ),
          ]
        : h("p", { class: "muted" }, t("no_usage")),
    ),
  );
}

/**
 * The open period: from the end of the tenant's latest invoice, or the start of this month
 * when that is later (or there is none), to the next whole hour (so it holds the usage so far).
 */
export function openPeriod(invoices, now = new Date()) {
  const monthStart = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
  let from = monthStart;
  for (const i of invoices) {
    const end = new Date(i.period_to);
    if (!Number.isNaN(end.getTime()) && end > from && end <= now) from = end;
  }
  const to = new Date(lastWholeHour(now).getTime() + HOUR);
  return [from.toISOString().replace(".000Z", "Z"), to.toISOString().replace(".000Z", "Z")];
}

/** The period-to-date estimate: `GET /v1/invoices/preview` for the open period, per currency. */
async function periodToDate(box) {
  const invoices = await getJson("/v1/invoices");
  const [from, to] = openPeriod(invoices);
  const preview = await getJson(`/v1/invoices/preview?from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}`);
  const cur = preview.currencies || [];
  replace(
    box,
    h("h2", {}, t("estimate_title")),
    cur.length
      ? h(
          "ul",
          { class: "estimate", id: "estimate-totals" },
          cur.map((c) =>
            h(
              "li",
              {},
              h("strong", { dataset: { estimate: c.total, currency: c.currency } }, fmtMoney(c.total, c.currency)),
              " ",
              h("span", { class: "muted" }, t("estimate_net_tax", { net: fmtMoney(c.net_total, c.currency), tax: fmtMoney(c.tax_total, c.currency) })),
              // A preview that draws on the prepaid balance says what would be left to pay.
              c.amount_due !== undefined && c.amount_due !== null
                ? [" ", h("span", { class: "muted", dataset: { estimateDue: c.amount_due } }, t("estimate_amount_due", { due: fmtMoney(c.amount_due, c.currency) }))]
                : null,
            ),
          ),
        )
      : h("p", { class: "muted", id: "no-estimate" }, t("estimate_none")),
    h("p", {}, t("estimate_period"), " ", h("span", { dataset: { estimatePeriod: `${from}/${to}` } }, fmtPeriod(from, to))),
    (preview.unpriced || []).length ? h("p", { class: "error" }, t("estimate_unpriced", { n: preview.unpriced.length })) : null,
    (preview.excluded || []).length ? h("p", { class: "muted", id: "estimate-excluded" }, t("estimate_excluded", { n: preview.excluded.length })) : null,
    h("p", { class: "muted" }, t("estimate_caveat")),
  );
}

/**
 * A table: `headers` (messages), `rows` (cells: strings, numbers, messages or nodes).
 * `numeric`: indexes of right-aligned columns.
 */
export function table(headers, rows, { numeric = [], id, caption } = {}) {
  return h(
    "div",
    { class: "table-wrap", tabindex: 0, role: caption ? "region" : null, "aria-label": caption || null },
    h(
      "table",
      { id },
      caption ? h("caption", {}, caption) : null,
      h("thead", {}, h("tr", {}, headers.map((c, i) => h("th", { scope: "col", class: numeric.includes(i) ? "num" : null }, c)))),
      h(
        "tbody",
        {},
        rows.length
          ? rows.map((r) => h("tr", {}, r.map((c, i) => h("td", { class: numeric.includes(i) ? "num" : null }, c))))
          : h("tr", {}, h("td", { colspan: headers.length, class: "muted" }, t("empty"))),
      ),
    ),
  );
}

function downloadButton(path, filename, kind, label) {
  const status = h("span", { class: "muted", "aria-live": "polite" });
  return h(
    "span",
    { class: "dl" },
    h(
      "button",
      {
        type: "button",
        class: "secondary",
        dataset: { download: kind },
        onclick: async (ev) => {
          ev.target.disabled = true;
          replace(status);
          try {
            await download(path, filename);
          } catch (e) {
            replace(status, t("error_with", { message: e.message }));
          } finally {
            ev.target.disabled = false;
          }
        },
      },
      label,
    ),
    status,
  );
}

function invoiceDownloads(number) {
  const n = encodeURIComponent(number);
  return h(
    "div",
    { class: "actions" },
    downloadButton(`/v1/invoices/${n}/pdf`, `${number}.pdf`, "pdf", t("download_pdf")),
    downloadButton(`/v1/invoices/${n}/csv`, `${number}.csv`, "csv", t("download_csv")),
    downloadButton(`/v1/invoices/${n}/json`, `${number}.json`, "json", t("download_json")),
    downloadButton(`/v1/invoices/${n}/bundle`, `${number}.bundle.jsonl`, "bundle", t("download_bundle")),
  );
}

/** An invoice's status as a message (both invoice shapes: `status` when present). */
function statusCell(s) {
  return s ? h("span", { class: `badge status-${s}` }, tOr(`status_${s}`, s)) : "—";
}

/** Most invoices the list shows with their accounts (the newest). */
export const MAX_ACCOUNTS = 200;

/** `GET /v1/invoices/{number}/account`, or null where the server has no such view. */
async function invoiceAccount(number) {
  try {
    return await getJson(`/v1/invoices/${encodeURIComponent(number)}/account`);
  } catch (e) {
    if (e instanceof ApiError && (e.status === 404 || e.status === 400)) return null;
    throw e;
  }
}

/** A unit of the wire (`GPU-h`, `kWh`, `GPU-s`) for people. */
function unitLabel(u) {
  return { "GPU-h": t("unit_gpu_hours"), kWh: t("unit_kwh"), "GPU-s": t("unit_gpu_seconds") }[u] ?? (u || "—");
}

/** `#/invoices` (list and balances) and `#/invoices/<number>` (one invoice). */
export async function invoicesPage(main, number) {
  if (number) return invoicePage(main, number);
  replace(main, h("h1", {}, t("invoices_title")), h("p", { class: "muted" }, t("loading")));
  const [found, balance, contracts, prepaid] = await Promise.all([
    getJson("/v1/invoices"),
    getJson("/v1/balance"),
    getJson("/v1/contracts").catch(() => ({ contracts: [] })),
    // The prepaid balance is a card of its own: its failure leaves the rest of the page.
    getPrepayments().catch((error) => ({ error })),
  ]);
  const balances = Object.entries(balance.currencies || {});
  // Each invoice's account (total, paid, balance due, status) where the server has the view.
  const recent = found.slice(-MAX_ACCOUNTS);
  const accounts = await mapLimited(recent, 4, (i) => invoiceAccount(i.number));
  const list = recent.map((i, n) => ({ ...i, ...(accounts[n] || {}) }));
  // Columns the newer invoice shape adds to the list, shown when any row has them.
  const has = (k) => list.some((i) => i[k] !== undefined && i[k] !== null);
  const headers = [t("invoice_number"), t("period"), t("currency")];
  if (has("status")) headers.push(t("status"));
  if (has("total")) headers.push(t("total"));
  if (has("amount_due")) headers.push(t("amount_due"));
  if (has("balance_due")) headers.push(t("balance_due"));
  headers.push(t("downloads"));
  const rows = list.map((i) => {
    const r = [
      h("a", { href: `#/invoices/${encodeURIComponent(i.number)}`, dataset: { invoice: i.number } }, i.number),
      fmtPeriod(i.period_from, i.period_to),
      i.currency,
    ];
    if (has("status")) r.push(statusCell(i.status));
    if (has("total")) r.push(fmtMoney(i.total, i.currency));
    if (has("amount_due")) r.push(i.amount_due === undefined || i.amount_due === null ? "—" : fmtMoney(i.amount_due, i.currency));
    if (has("balance_due")) r.push(fmtMoney(i.balance_due, i.currency));
    r.push(invoiceDownloads(i.number));
    return r;
  });
  replace(
    main,
    h("h1", {}, t("invoices_title")),
    h(
      "section",
      { class: "card" },
      h("h2", {}, t("balance_title")),
      table(
        [t("currency"), t("invoiced"), t("paid"), t("credited"), t("balance_due")],
        balances.map(([c, b]) => [c, fmtMoney(b.invoiced, c), fmtMoney(b.paid, c), fmtMoney(b.credited, c), fmtMoney(b.due, c)]),
        { numeric: [1, 2, 3, 4], id: "balances" },
      ),
    ),
    prepaidCard(prepaid),
    contractsCard(contracts.contracts),
    h("section", { class: "card" }, h("h2", {}, t("invoices_list")), table(headers, rows, { id: "invoices" })),
  );
}

/** One invoice: header, lines (either shape), totals, account, downloads. */
async function invoicePage(main, number) {
  const [inv, acct] = await Promise.all([getJson(`/v1/invoices/${encodeURIComponent(number)}`), invoiceAccount(number)]);
  const cur = inv.currency;
  const money = (v) => (v === undefined || v === null ? "—" : fmtMoney(v, cur));
  const lines = inv.lines || [];
  // Version 2 lines have net, tax and gross; version 1 lines an amount. Both are shown from
  // their structured members (the v2 `description` is the PDF's English text).
  const v2 = lines.some((l) => l.net !== undefined);
  // A contract's fee is named by the contract (its description), as are its SLA credit and
  // true-up (what they are for); other lines by their kind.
  // An SLA credit's description starts with its own English label ("SLA credit 10 %: …"),
  // which the translated label replaces.
  // Included GPU-hours and overage lines are named by their model and lease.
  const item = (l) =>
    l.kind === "fee" || l.kind === "sla_credit" || l.kind === "true_up"
      ? `${tOr(`line_${l.kind}`, l.kind)}: ${l.kind === "sla_credit" ? String(l.description).replace(/^SLA credit /, "") : l.description}`
      : l.kind === "included" || l.kind === "overage"
        ? `${tOr(`line_${l.kind}`, l.kind)}: ${l.contract ?? ""}${l.adjustment_for ? ` (${t("late_records")})` : ""}`
      : l.kind
        ? tOr(`line_${l.kind}`, l.kind)
        : (l.description ?? "—");
  const common = (l) => [item(l), l.region ?? "—", l.gpu_model ?? "—", l.class ? tOr(`class_${l.class}`, l.class) : "—", fmtNumber(l.quantity, 6), unitLabel(l.unit), money(l.unit_price)];
  const lineHeaders = [t("line_kind"), t("region"), t("gpu_model"), t("lease_class"), t("quantity"), t("unit"), t("unit_price")].concat(
    v2 ? [t("net"), t("tax"), t("gross")] : [t("amount")],
  );
  const lineRows = lines.map((l) => common(l).concat(v2 ? [money(l.net), money(l.tax), money(l.gross)] : [money(l.amount)]));
  const account = acct || inv.account || inv;
  const prepaidDraws = Array.isArray(inv.prepaid) ? inv.prepaid : [];
  const facts = [
    [t("tenant"), inv.tenant],
    [t("period"), fmtPeriod(inv.period?.from ?? inv.period_from, inv.period?.to ?? inv.period_to)],
    [t("issued_at"), fmtDateTime(inv.issued_at)],
    [t("currency"), cur],
    [t("bill_to"), inv.bill_to ? [inv.bill_to.name, ...(inv.bill_to.address || [])].join(", ") : null],
    [t("issuer"), inv.issuer ? inv.issuer.name : null],
    [t("due_at"), inv.due_at ? fmtDate(inv.due_at) : null],
    [t("checkpoint"), inv.checkpoint_size !== undefined ? `${inv.log_origin ?? ""} #${inv.checkpoint_size}` : null],
    [t("net_total"), inv.net_total !== undefined ? money(inv.net_total) : null],
    [t("tax_total"), inv.tax_total !== undefined ? money(inv.tax_total) : null],
    [t("total"), inv.total !== undefined ? money(inv.total) : null],
    // What the invoice drew from the tenant's prepaid lots, and what was left to pay.
    [t("prepaid_applied"), prepaidDraws.length ? money(decSum(prepaidDraws.map((d) => d.amount))) : null],
    [t("amount_due"), inv.amount_due !== undefined && inv.amount_due !== null ? money(inv.amount_due) : null],
    [t("paid"), account.paid !== undefined ? money(account.paid) : null],
    [t("balance_due"), account.balance_due !== undefined ? money(account.balance_due) : null],
    [t("status"), account.status ? statusCell(account.status) : null],
  ].filter(([, v]) => v !== null && v !== undefined);
  const checkOut = h("div", { class: "check-result", id: "invoice-check", "aria-live": "polite" });
  replace(
    main,
    h("p", {}, h("a", { href: "#/invoices" }, t("back_to_invoices"))),
    h("h1", { id: "invoice-title", dataset: { invoice: inv.number } }, t("invoice_title", { number: inv.number })),
    h(
      "section",
      { class: "card" },
      h("dl", { class: "facts" }, facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
      invoiceDownloads(inv.number),
      h("div", { class: "actions" }, invoiceCheckButton(inv.number, checkOut)),
      checkOut,
    ),
    h(
      "section",
      { class: "card" },
      h("h2", {}, t("lines")),
      table(lineHeaders, lineRows, { numeric: v2 ? [4, 6, 7, 8, 9] : [4, 6, 7], id: "invoice-lines" }),
    ),
    commitmentsCard(inv.commitments, money),
    availabilityCard(inv.availability),
    allowancesCard(inv.allowances),
    invoicePrepaidCard(prepaidDraws, money),
    excludedCard(inv.excluded),
  );
}

/** A contract's commitment on an invoice (`commitments`: committed, drawn, true-up), or null. */
function commitmentsCard(commitments, money) {
  if (!commitments || !commitments.length) return null;
  return h(
    "section",
    { class: "card" },
    h("h2", {}, t("commitments_title")),
    table(
      [t("contract"), t("committed"), t("drawn"), t("true_up")],
      commitments.map((c) => [c.contract, money(c.committed), money(c.drawn), money(c.true_up)]),
      { numeric: [1, 2, 3], id: "invoice-commitments" },
    ),
  );
}

/**
 * A percentage of the wire (`99.9`: 99.9 %, at most 4 decimals) formatted for the locale from
 * its exact string: the point moved two places left (`0.999`, still exact), then Intl's
 * percent style (as fmtNumber, Intl formats a decimal string exactly).
 */
function fmtPercent(v) {
  if (v === undefined || v === null || v === "") return "—";
  const m = /^([0-9]+)(?:\.([0-9]+))?$/.exec(String(v));
  if (!m) return String(v);
  const whole = m[1].padStart(3, "0");
  const fraction = `${whole.slice(0, -2)}.${whole.slice(-2)}${m[2] ?? ""}`;
  return new Intl.NumberFormat(currentLocale(), { style: "percent", maximumFractionDigits: 4 }).format(fraction);
}

/**
 * The availability an invoice's SLAs judged (its `availability`: per contract, billing period
 * and lease, what the usage records show present of what was leased, the target, and the
 * credit step that applies, if any), or null.
 */
function availabilityCard(availability) {
  if (!Array.isArray(availability) || !availability.length) return null;
  return h(
    "section",
    { class: "card" },
    h("h2", {}, t("availability_title")),
    h("p", { class: "muted" }, t("availability_explain")),
    table(
      [t("contract"), t("lease"), t("period"), t("availability"), t("sla_target"), t("sla_credit_percent")],
      availability.map((a) => [
        a.contract,
        a.lease,
        fmtPeriod(a.period?.from, a.period?.to),
        h("span", { dataset: { availability: a.availability, met: a.credit_percent === undefined || a.credit_percent === null } }, fmtPercent(a.availability)),
        fmtPercent(a.target),
        fmtPercent(a.credit_percent),
      ]),
      { numeric: [3, 4, 5], id: "invoice-availability" },
    ),
  );
}

/**
 * The included GPU-hours an invoice judged (its `allowances`: per contract, billing period,
 * lease and GPU model, what was included, used and above), in GPU-hours, or null.
 */
function allowancesCard(allowances) {
  if (!Array.isArray(allowances) || !allowances.length) return null;
  const hours = (s) => fmtNumber(decDiv3600(s), 6);
  return h(
    "section",
    { class: "card" },
    h("h2", {}, t("allowances_title")),
    h("p", { class: "muted" }, t("allowances_explain")),
    table(
      [t("contract"), t("lease"), t("gpu_model"), t("period"), t("included_hours"), t("used_hours"), t("overage_hours")],
      allowances.map((a) => [
        a.contract,
        a.lease,
        a.gpu_model,
        fmtPeriod(a.period?.from, a.period?.to),
        hours(a.included_gpu_seconds),
        hours(a.used_gpu_seconds),
        h("span", { dataset: { overage: a.overage_gpu_seconds } }, hours(a.overage_gpu_seconds)),
      ]),
      { numeric: [4, 5, 6], id: "invoice-allowances" },
    ),
  );
}

/**
 * GPU-seconds (an exact decimal string) in GPU-hours for display, to 6 decimals, half-even as
 * the invoice's quantities (BigInt arithmetic on the decimal string; no floating point).
 */
function decDiv3600(v) {
  const m = /^([0-9]+)(?:\.([0-9]+))?$/.exec(String(v ?? ""));
  if (!m) return String(v ?? "—");
  const frac = m[2] ?? "";
  const scaled = BigInt(m[1] + frac); // v × 10^frac.length
  const den = 3600n * 10n ** BigInt(frac.length);
  const num = scaled * 10n ** 6n; // result × 10^6 before rounding
  let q = num / den;
  const r = num % den;
  if (r * 2n > den || (r * 2n === den && q % 2n === 1n)) q += 1n;
  const digits = q.toString().padStart(7, "0");
  const out = `${digits.slice(0, -6)}.${digits.slice(-6)}`.replace(/\.?0+$/, "");
  return out === "" ? "0" : out;
}

/** What an invoice drew from the tenant's prepaid lots (its `prepaid` list, in drawing order), or null. */
function invoicePrepaidCard(draws, money) {
  if (!draws.length) return null;
  return h(
    "section",
    { class: "card" },
    h("h2", {}, t("invoice_prepaid_title")),
    table(
      [t("prepaid_reference"), t("prepaid_source"), t("amount")],
      draws.map((d) => [d.prepayment, tOr(`prepaid_source_${d.source}`, d.source), money(d.amount)]),
      { numeric: [2], id: "invoice-prepaid" },
    ),
  );
}

/**
 * The prepaid positions of a tenant (`GET /v1/prepayments` `positions`), one per currency:
 * what the next invoices may still draw, prominently (marked `data-prepaid-available`), with
 * what was purchased, granted, drawn and expired; null when there is none.
 */
export function prepaidPositions(positions) {
  if (!Array.isArray(positions) || !positions.length) return null;
  return h(
    "ul",
    { class: "estimate", id: "prepaid-positions" },
    positions.map((p) =>
      h(
        "li",
        { dataset: { currency: p.currency } },
        h("strong", { dataset: { prepaidAvailable: p.available, currency: p.currency } }, fmtMoney(p.available, p.currency)),
        " ",
        h("span", { class: "muted" }, t("prepaid_available")),
        h(
          "p",
          { class: "muted" },
          t("prepaid_position", {
            purchased: fmtMoney(p.purchased, p.currency),
            granted: fmtMoney(p.granted, p.currency),
            drawn: fmtMoney(p.drawn, p.currency),
            expired: fmtMoney(p.expired, p.currency),
          }),
        ),
      ),
    ),
  );
}

/**
 * The prepaid lots of a tenant (`GET /v1/prepayments` `prepayments`): each top-up or grant with
 * its expiry, what is left of it and every invoice that drew on it (linked to the tenant's
 * invoice page unless `links` is false); null when there is none.
 */
export function prepaidLots(lots, { links = true } = {}) {
  if (!Array.isArray(lots) || !lots.length) return null;
  const invoiceRef = (n) =>
    links ? h("a", { href: `#/invoices/${encodeURIComponent(n)}`, dataset: { prepaidDraw: n } }, n) : h("code", { dataset: { prepaidDraw: n } }, n);
  const draws = (lot) =>
    (lot.draws || []).length
      ? h(
          "ul",
          { class: "draws" },
          lot.draws.map((d) => h("li", {}, invoiceRef(d.invoice), " ", fmtMoney(d.amount, lot.currency))),
        )
      : "—";
  const expires = (lot) => [
    lot.expires_at ? fmtDateTime(lot.expires_at) : t("prepaid_never"),
    lot.expired ? [" ", h("span", { class: "badge lot-expired", dataset: { expired: lot.reference } }, t("prepaid_expired_badge"))] : null,
  ];
  return table(
    [t("prepaid_reference"), t("prepaid_source"), t("prepaid_logged"), t("amount"), t("prepaid_expires"), t("prepaid_drawn"), t("prepaid_remaining"), t("prepaid_draws")],
    lots.map((l) => [
      l.reference,
      tOr(`prepaid_source_${l.source}`, l.source),
      fmtDate(l.logged_at),
      fmtMoney(l.amount, l.currency),
      h("span", {}, expires(l)),
      fmtMoney(l.drawn, l.currency),
      fmtMoney(l.remaining, l.currency),
      draws(l),
    ]),
    { numeric: [3, 5, 6], id: "prepaid-lots", caption: t("prepaid_lots") },
  );
}

/**
 * The tenant's prepaid balance (`GET /v1/prepayments`, lib/api.js `getPrepayments`): per
 * currency what the next invoices may still draw, prominently, with what was purchased,
 * granted, drawn and expired; then each lot (top-up or grant) with its expiry, what is left of
 * it and every invoice that drew on it. `data` null (no such view on the server) or without
 * positions and lots: nothing; `{error}`: the error, in the card.
 */
export function prepaidCard(data) {
  if (!data) return null;
  const title = h("h2", {}, t("prepaid_title"));
  if (data.error) {
    return h("section", { class: "card", id: "prepaid" }, title, h("p", { class: "error" }, t("error_with", { message: data.error.message })));
  }
  const positions = Array.isArray(data.positions) ? data.positions : [];
  const lots = Array.isArray(data.prepayments) ? data.prepayments : [];
  if (!positions.length && !lots.length) return null;
  return h(
    "section",
    { class: "card", id: "prepaid" },
    title,
    prepaidPositions(positions),
    data.as_of ? h("p", { class: "muted" }, t("prepaid_as_of", { at: fmtDateTime(data.as_of), size: fmtNumber(data.log_size) })) : null,
    prepaidLots(lots),
    h("p", { class: "muted" }, t("prepaid_explain")),
  );
}

/**
 * A contract's term as the API lists it (`term_to` already amended), with each of its
 * amendments (`amendments: [{index, term_to, reason}]`, docs/PROTOCOL.md §5.21), in log order,
 * below it: "Amended: ends <date> — <reason> (entry N)", each marked `data-amendment` (its
 * entry) and `data-amended-to`.
 */
function contractTerm(c) {
  const period = fmtPeriod(c.term_from, c.term_to);
  const amendments = Array.isArray(c.amendments) ? c.amendments : [];
  if (!amendments.length) return period;
  const ends = (ts) => (typeof ts === "string" && ts.endsWith("T00:00:00Z") ? fmtDate(ts) : fmtDateTime(ts));
  return h(
    "span",
    {},
    h("span", { dataset: { term: c.term_to } }, period),
    h(
      "ul",
      { class: "draws amendments" },
      amendments.map((a) =>
        h(
          "li",
          { class: "muted", dataset: { amendment: a.index, amendedTo: a.term_to } },
          t("contract_amendment", { date: ends(a.term_to), reason: a.reason, index: a.index }),
        ),
      ),
    ),
  );
}

/**
 * The tenant's contracts (`GET /v1/contracts`): term (as amended, with its amendments),
 * billing, fees (with the lease each rents, if any), commitment and SLA (its target and credit
 * steps), or null.
 */
function contractsCard(contracts) {
  if (!contracts || !contracts.length) return null;
  const fee = (f, cur) =>
    `${f.name}: ${fmtMoney(f.amount, cur)} (${tOr(`timing_${f.timing}`, f.timing)}${f.lease ? `, ${t("fee_lease", { lease: f.lease })}` : ""})`;
  const sla = (s) =>
    s
      ? h(
          "span",
          { dataset: { slaTarget: s.target } },
          t("sla_target_is", { target: fmtPercent(s.target) }),
          (s.credits || []).map((step) => ["; ", t("sla_step", { below: fmtPercent(step.below), percent: fmtPercent(step.percent) })]),
        )
      : "—";
  return h(
    "section",
    { class: "card" },
    h("h2", {}, t("contracts_title")),
    table(
      [t("contract"), t("term"), t("billing"), t("fees"), t("commitment"), t("sla")],
      contracts.map((c) => [
        c.contract,
        contractTerm(c),
        `${tOr(`billing_${c.billing_period}`, c.billing_period)}, ${tOr(`anchor_${c.billing_anchor}`, c.billing_anchor)}`,
        (c.fees || []).map((f) => fee(f, c.currency)).join("; ") || "—",
        c.commitment ? fmtMoney(c.commitment, c.currency) : "—",
        sla(c.sla),
      ]),
      { id: "contracts" },
    ),
  );
}

/** The records a dispute excluded from rating (an invoice's or a preview's `excluded`), or null. */
function excludedCard(excluded) {
  if (!excluded || !excluded.length) return null;
  return h(
    "section",
    { class: "card" },
    h("h2", {}, t("excluded_title")),
    h("p", { class: "muted" }, t("excluded_explain")),
    table(
      [t("excluded_entry"), t("excluded_reason")],
      excluded.map((x) => [String(x.entry), x.reason]),
      { numeric: [0], id: "invoice-excluded" },
    ),
  );
}

/** `#/certificates` (issue, list) and `#/certificates/<id>` (one, with its claims). */
export async function certificatesPage(main, id) {
  if (id) return certificatePage(main, id);
  const p = presets();
  // The same default period as the usage page: the last 30 days, ending at the last whole hour.
  const fromInput = h("input", { id: "cert-from", type: "datetime-local", step: 3600, value: p.last_30d[0], required: true });
  const toInput = h("input", { id: "cert-to", type: "datetime-local", step: 3600, value: p.last_30d[1], required: true });
  const status = h("p", { role: "status", "aria-live": "polite" });
  const listBox = h("div", {}, h("p", { class: "muted" }, t("loading")));
  const issueButton = h("button", { type: "submit", id: "issue-certificate" }, t("issue_certificate"));
  const form = h(
    "form",
    {
      class: "card filters",
      onsubmit: async (ev) => {
        ev.preventDefault();
        issueButton.disabled = true;
        replace(status, t("issuing"));
        try {
          const cert = await postJson("/v1/certificates", { from: toTimestamp(fromInput.value), to: toTimestamp(toInput.value) });
          replace(status, h("span", { dataset: { issued: cert.id } }, t("certificate_issued", { id: cert.id })));
          await fillList();
        } catch (e) {
          replace(status, t("error_with", { message: e instanceof ApiError && e.problem ? e.problem.detail || e.message : e.message }));
        } finally {
          issueButton.disabled = false;
        }
      },
    },
    h("h2", { class: "wide" }, t("issue_title")),
    h("div", { class: "field" }, h("label", { for: "cert-from" }, t("from_utc")), fromInput),
    h("div", { class: "field" }, h("label", { for: "cert-to" }, t("to_exclusive_utc")), toInput),
    h("div", { class: "actions" }, issueButton),
    status,
  );
  async function fillList() {
    const list = await getJson("/v1/certificates");
    const rows = list
      .slice()
      .reverse()
      .map((c) => {
        const out = h("div", { class: "check-result", id: `check-${c.id}`, "aria-live": "polite" });
        return [
          h("a", { href: `#/certificates/${encodeURIComponent(c.id)}` }, c.id),
          fmtPeriod(c.period_from, c.period_to),
          fmtNumber(c.checkpoint_size),
          h(
            "div",
            { class: "actions" },
            downloadButton(`/v1/certificates/${encodeURIComponent(c.id)}`, `${c.id}.json`, "certificate", t("download_certificate")),
            downloadButton(`/v1/certificates/${encodeURIComponent(c.id)}/bundle`, `${c.id}.bundle.jsonl`, "bundle", t("download_bundle")),
            checkButton(c.id, out),
            out,
          ),
        ];
      });
    replace(listBox, table([t("certificate_id"), t("period"), t("checkpoint_size"), t("actions")], rows, { id: "certificates", numeric: [2] }));
  }
  replace(main, h("h1", {}, t("certificates_title")), form, h("section", { class: "card" }, h("h2", {}, t("certificates_list")), listBox), trustPanel());
  await fillList();
}

/** A button that runs `check` once at a time (disabled while it runs). */
function runButton(attrs, check) {
  return h(
    "button",
    {
      type: "button",
      ...attrs,
      onclick: async (ev) => {
        ev.target.disabled = true;
        try {
          await check();
        } finally {
          ev.target.disabled = false;
        }
      },
    },
    t("check_in_browser"),
  );
}

function checkButton(id, out) {
  return runButton({ dataset: { check: id } }, () => checkCertificate(id, out));
}

/** The button that recomputes invoice `number` from its bundle here, into `out`. */
function invoiceCheckButton(number, out) {
  return runButton({ id: "invoice-check-button" }, () => checkInvoice(number, out));
}

/**
 * Fetches a document (`path`) and its evidence bundle (`path`/bundle) and checks them here with
 * the verifier module into `out`: `verify(v, text, args)` runs the check of the document's kind.
 * `evidence`: whether the verdict says that invoice amounts were not checked.
 */
async function checkFetched(out, path, verify, evidence) {
  const bar = h("progress", { max: 1, value: 0, "aria-label": t("progress") });
  replace(out, h("p", { class: "muted" }, t("checking")), bar);
  try {
    const [text, bundle, trust, v] = await Promise.all([
      getText(path),
      getBlob(`${path}/bundle`),
      trustForChecks(),
      loadVerifier(),
    ]);
    const result = await verify(v, text, {
      bundle,
      logKey: trust.logKey,
      witnesses: trust.witnesses,
      quorum: trust.quorum,
      onProgress: (done, total) => {
        bar.max = total || 1;
        bar.value = done;
      },
    });
    showResult(out, result, { source: trust.source, evidence });
  } catch (e) {
    replace(out, h("p", { class: "error", role: "alert" }, t("error_with", { message: e.message })));
  }
}

/**
 * Fetches an invoice (the document as issued) and its evidence bundle and recomputes every line,
 * total, commitment, availability and prepaid draw here (verify/invoice.js).
 */
export async function checkInvoice(number, out) {
  const path = `/v1/invoices/${encodeURIComponent(number)}`;
  await checkFetched(out, path, (v, invoiceText, args) => v.verifyInvoice({ ...args, invoiceText }), false);
}

/** Fetches a certificate and its bundle and checks them here, with the verifier module. */
export async function checkCertificate(id, out) {
  const path = `/v1/certificates/${encodeURIComponent(id)}`;
  await checkFetched(out, path, (v, certificateText, args) => v.verifyCertificate({ ...args, certificateText }), true);
}

async function certificatePage(main, id) {
  const c = await getJson(`/v1/certificates/${encodeURIComponent(id)}`);
  const out = h("div", { class: "check-result", id: `check-${c.id}`, "aria-live": "polite" });
  const totals = c.totals || {};
  replace(
    main,
    h("p", {}, h("a", { href: "#/certificates" }, t("back_to_certificates"))),
    h("h1", {}, t("certificate_title", { id: c.id })),
    h(
      "section",
      { class: "card" },
      h(
        "dl",
        { class: "facts" },
        [
          [t("tenant"), c.tenant],
          [t("period"), fmtPeriod(c.period_from, c.period_to)],
          [t("issued_at"), fmtDateTime(c.issued_at)],
          [t("records"), fmtNumber(totals.records)],
          [t("metric_gpu_hours"), totals.gpu_seconds !== undefined ? fmtNumber(gpuHours(totals.gpu_seconds), 4) : "—"],
          [t("metric_kwh"), fmtNumber(totals.kwh)],
          [t("kwh_with_pue"), fmtNumber(totals.kwh_with_pue)],
          [t("carbon_kg"), fmtNumber(totals.carbon_kg)],
        ].map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
      ),
      h(
        "div",
        { class: "actions" },
        downloadButton(`/v1/certificates/${encodeURIComponent(c.id)}`, `${c.id}.json`, "certificate", t("download_certificate")),
        downloadButton(`/v1/certificates/${encodeURIComponent(c.id)}/bundle`, `${c.id}.bundle.jsonl`, "bundle", t("download_bundle")),
        checkButton(c.id, out),
      ),
      out,
    ),
    h(
      "section",
      { class: "card" },
      h("h2", {}, t("gpu_claims")),
      table(
        [t("region"), t("gpu_model"), t("metric_gpu_hours"), t("records")],
        (c.gpu || []).map((g) => [g.region, g.gpu_model, fmtNumber(gpuHours(g.gpu_seconds), 4), fmtNumber(g.records)]),
        { numeric: [2, 3] },
      ),
      h("h2", {}, t("energy_claims")),
      table(
        [t("region"), t("metric_kwh"), t("pue"), t("records")],
        (c.energy || []).map((e) => [e.region, fmtNumber(e.kwh), e.pue ? fmtNumber(e.pue) : "—", fmtNumber(e.records)]),
        { numeric: [1, 2, 3] },
      ),
    ),
    trustPanel(),
  );
}
