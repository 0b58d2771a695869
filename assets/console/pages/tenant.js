// Tenant pages: usage charts, invoices (with downloads), certificates (issue, list, download,
// check in the browser).

import { h, t, tOr, replace, append, fmtNumber, fmtMoney, fmtDate, fmtDateTime, fmtBucket, decSum, gpuHours } from "../lib/dom.js";
import { getJson, getText, getBlob, postJson, download, mapLimited, ApiError } from "../lib/api.js";
import { stackedBars, legend, shareBar } from "../lib/chart.js";
import { trustForChecks, loadVerifier, showResult, trustPanel } from "../lib/trust.js";

const DAY = 86_400_000;
/** Most buckets one chart draws (a longer period asks for a coarser window). */
export const MAX_BUCKETS = 1000;

function utcMidnight(d) {
  return new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate()));
}

/** `YYYY-MM-DD` of a Date (UTC). */
export function isoDay(d) {
  return d.toISOString().slice(0, 10);
}

/** A `YYYY-MM-DD` date as the protocol's timestamp of its 00:00 UTC. */
export function dayStart(s) {
  return `${s}T00:00:00Z`;
}

/** The period presets of the picker: name → [from, to) as `YYYY-MM-DD`. */
function presets() {
  const today = utcMidnight(new Date());
  const tomorrow = new Date(today.getTime() + DAY);
  const monthStart = new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), 1));
  const lastMonthStart = new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth() - 1, 1));
  return {
    last_1d: [isoDay(today), isoDay(tomorrow)],
    last_7d: [isoDay(new Date(tomorrow.getTime() - 7 * DAY)), isoDay(tomorrow)],
    last_30d: [isoDay(new Date(tomorrow.getTime() - 30 * DAY)), isoDay(tomorrow)],
    this_month: [isoDay(monthStart), isoDay(tomorrow)],
    last_month: [isoDay(lastMonthStart), isoDay(monthStart)],
  };
}

/** Every bucket start in [from, to) for `window`, as protocol timestamps. */
function bucketsOf(from, to, window) {
  const out = [];
  let d = new Date(from);
  const end = new Date(to);
  if (window === "month") d = new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1));
  while (d < end && out.length < MAX_BUCKETS) {
    out.push(d.toISOString().replace(".000Z", "Z"));
    d =
      window === "hour"
        ? new Date(d.getTime() + 3_600_000)
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

/** `#/usage?from&to&window&metric&by`: GPU-hours or kWh by region or GPU model over time. */
export async function usagePage(main, _arg, query) {
  const p = presets();
  const from = query.get("from") || p.last_30d[0];
  const to = query.get("to") || p.last_30d[1];
  const window = ["hour", "day", "month"].includes(query.get("window")) ? query.get("window") : "day";
  const metric = query.get("metric") === "kwh" ? "kwh" : "gpu";
  const by = query.get("by") === "gpu_model" ? "gpu_model" : "region";
  const fromInput = h("input", { id: "from", name: "from", type: "date", value: from, required: true });
  const toInput = h("input", { id: "to", name: "to", type: "date", value: to, required: true });
  const current = Object.keys(p).find((k) => p[k][0] === from && p[k][1] === to) || "";
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
    h("div", { class: "field" }, h("label", { for: "from" }, t("from")), fromInput),
    h("div", { class: "field" }, h("label", { for: "to" }, t("to_exclusive")), toInput),
    h("div", { class: "field" }, h("label", { for: "window" }, t("bucket")), select("window", window, [["hour", t("window_hour")], ["day", t("window_day")], ["month", t("window_month")]])),
    h("div", { class: "field" }, h("label", { for: "metric" }, t("metric")), select("metric", metric, [["gpu", t("metric_gpu_hours")], ["kwh", t("metric_kwh")]])),
    h("div", { class: "field" }, h("label", { for: "by" }, t("group_by")), select("by", by, [["region", t("region")], ["gpu_model", t("gpu_model")]])),
    h("div", { class: "actions" }, h("button", { type: "submit" }, t("show"))),
  );
  const results = h("div", { "aria-live": "polite" }, h("p", { class: "muted" }, t("loading")));
  replace(main, h("h1", {}, t("usage_title")), form, results);

  const [f, tt] = [dayStart(from), dayStart(to)];
  const base = `from=${encodeURIComponent(f)}&to=${encodeURIComponent(tt)}`;
  const [usage, byLease, prices] = await Promise.all([
    getJson(`/v1/usage?${base}&group_by=region,gpu_model&window=${window}`),
    getJson(`/v1/usage?${base}&group_by=lease`),
    getJson("/v1/prices"),
  ]);
  const buckets = bucketsOf(f, tt, window).map((k) => ({ key: k, label: fmtBucket(k, window) }));
  const value = (r) => (metric === "gpu" ? gpuHours(r.gpu_seconds) : r.kwh);
  const seriesMap = new Map();
  for (const r of usage.rows) {
    const name = r[by] || "—";
    if (!seriesMap.has(name)) seriesMap.set(name, {});
    const vals = seriesMap.get(name);
    const v = value(r);
    vals[r.window_start] = vals[r.window_start] ? decSum([vals[r.window_start], v]) : v;
  }
  const series = [...seriesMap.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([name, values]) => ({ name, values }));
  const unit = metric === "gpu" ? t("unit_gpu_hours") : t("unit_kwh");
  const chartTitle = String(t(metric === "gpu" ? "chart_gpu_title" : "chart_kwh_title", { by: String(t(by)) }));
  // Totals per region and GPU model, exact.
  const totals = new Map();
  for (const r of usage.rows) {
    const key = `${r.region || "—"}\u0000${r.gpu_model || "—"}`;
    const acc = totals.get(key) || { region: r.region || "—", gpu_model: r.gpu_model || "—", gpu: [], kwh: [], records: 0 };
    acc.gpu.push(r.gpu_seconds);
    acc.kwh.push(r.kwh);
    acc.records += (r.usage_records || 0) + (r.energy_records || 0);
    totals.set(key, acc);
  }
  const classOf = new Map(
    prices.filter((e) => e.kind === "lease_registered").map((e) => [e.body.lease, e.body.class]),
  );
  const byClass = new Map();
  for (const r of byLease.rows) {
    if (!r.lease) continue;
    const cls = classOf.get(r.lease) || "unknown";
    byClass.set(cls, decSum([byClass.get(cls) || "0", gpuHours(r.gpu_seconds)]));
  }
  const classes = [...byClass.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([name, value]) => ({ name, value }));
  const classesLabelled = classes.map((c) => ({ name: String(tOr(`class_${c.name}`, c.name)), value: c.value }));

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
        [t("region"), t("gpu_model"), t("metric_gpu_hours"), t("metric_kwh"), t("records")],
        [...totals.values()].map((a) => [a.region, a.gpu_model, fmtNumber(gpuHours(decSum(a.gpu)), 4), fmtNumber(decSum(a.kwh), 6), fmtNumber(a.records)]),
        { numeric: [2, 3, 4], id: "usage-totals" },
      ),
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
  const [found, balance] = await Promise.all([getJson("/v1/invoices"), getJson("/v1/balance")]);
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
  if (has("balance_due")) headers.push(t("balance_due"));
  headers.push(t("downloads"));
  const rows = list.map((i) => {
    const r = [
      h("a", { href: `#/invoices/${encodeURIComponent(i.number)}`, dataset: { invoice: i.number } }, i.number),
      `${fmtDate(i.period_from)} – ${fmtDate(i.period_to)}`,
      i.currency,
    ];
    if (has("status")) r.push(statusCell(i.status));
    if (has("total")) r.push(fmtMoney(i.total, i.currency));
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
  const item = (l) => (l.kind ? tOr(`line_${l.kind}`, l.kind) : l.description ?? "—");
  const common = (l) => [item(l), l.region ?? "—", l.gpu_model ?? "—", l.class ? tOr(`class_${l.class}`, l.class) : "—", fmtNumber(l.quantity, 6), unitLabel(l.unit), money(l.unit_price)];
  const lineHeaders = [t("line_kind"), t("region"), t("gpu_model"), t("lease_class"), t("quantity"), t("unit"), t("unit_price")].concat(
    v2 ? [t("net"), t("tax"), t("gross")] : [t("amount")],
  );
  const lineRows = lines.map((l) => common(l).concat(v2 ? [money(l.net), money(l.tax), money(l.gross)] : [money(l.amount)]));
  const account = acct || inv.account || inv;
  const facts = [
    [t("tenant"), inv.tenant],
    [t("period"), `${fmtDate(inv.period?.from ?? inv.period_from)} – ${fmtDate(inv.period?.to ?? inv.period_to)}`],
    [t("issued_at"), fmtDateTime(inv.issued_at)],
    [t("currency"), cur],
    [t("bill_to"), inv.bill_to ? [inv.bill_to.name, ...(inv.bill_to.address || [])].join(", ") : null],
    [t("issuer"), inv.issuer ? inv.issuer.name : null],
    [t("due_at"), inv.due_at ? fmtDate(inv.due_at) : null],
    [t("checkpoint"), inv.checkpoint_size !== undefined ? `${inv.log_origin ?? ""} #${inv.checkpoint_size}` : null],
    [t("net_total"), inv.net_total !== undefined ? money(inv.net_total) : null],
    [t("tax_total"), inv.tax_total !== undefined ? money(inv.tax_total) : null],
    [t("total"), inv.total !== undefined ? money(inv.total) : null],
    [t("paid"), account.paid !== undefined ? money(account.paid) : null],
    [t("balance_due"), account.balance_due !== undefined ? money(account.balance_due) : null],
    [t("status"), account.status ? statusCell(account.status) : null],
  ].filter(([, v]) => v !== null && v !== undefined);
  replace(
    main,
    h("p", {}, h("a", { href: "#/invoices" }, t("back_to_invoices"))),
    h("h1", { id: "invoice-title", dataset: { invoice: inv.number } }, t("invoice_title", { number: inv.number })),
    h("section", { class: "card" }, h("dl", { class: "facts" }, facts.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])), invoiceDownloads(inv.number)),
    h(
      "section",
      { class: "card" },
      h("h2", {}, t("lines")),
      table(lineHeaders, lineRows, { numeric: v2 ? [4, 6, 7, 8, 9] : [4, 6, 7], id: "invoice-lines" }),
    ),
  );
}

/** `#/certificates` (issue, list) and `#/certificates/<id>` (one, with its claims). */
export async function certificatesPage(main, id) {
  if (id) return certificatePage(main, id);
  const p = presets();
  const fromInput = h("input", { id: "cert-from", type: "date", value: p.last_30d[0], required: true });
  const toInput = h("input", { id: "cert-to", type: "date", value: p.last_1d[0], required: true });
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
          const cert = await postJson("/v1/certificates", { from: dayStart(fromInput.value), to: dayStart(toInput.value) });
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
    h("div", { class: "field" }, h("label", { for: "cert-from" }, t("from")), fromInput),
    h("div", { class: "field" }, h("label", { for: "cert-to" }, t("to_exclusive")), toInput),
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
          `${fmtDate(c.period_from)} – ${fmtDate(c.period_to)}`,
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

function checkButton(id, out) {
  return h(
    "button",
    {
      type: "button",
      dataset: { check: id },
      onclick: async (ev) => {
        ev.target.disabled = true;
        try {
          await checkCertificate(id, out);
        } finally {
          ev.target.disabled = false;
        }
      },
    },
    t("check_in_browser"),
  );
}

/** Fetches a certificate and its bundle and checks them here, with the verifier module. */
export async function checkCertificate(id, out) {
  const bar = h("progress", { max: 1, value: 0, "aria-label": t("progress") });
  replace(out, h("p", { class: "muted" }, t("checking")), bar);
  try {
    const enc = encodeURIComponent(id);
    const [certificateText, bundle, trust, v] = await Promise.all([
      getText(`/v1/certificates/${enc}`),
      getBlob(`/v1/certificates/${enc}/bundle`),
      trustForChecks(),
      loadVerifier(),
    ]);
    const result = await v.verifyCertificate({
      certificateText,
      bundle,
      logKey: trust.logKey,
      witnesses: trust.witnesses,
      quorum: trust.quorum,
      onProgress: (done, total) => {
        bar.max = total || 1;
        bar.value = done;
      },
    });
    showResult(out, result, { source: trust.source, evidence: true });
  } catch (e) {
    replace(out, h("p", { class: "error", role: "alert" }, t("error_with", { message: e.message })));
  }
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
          [t("period"), `${fmtDate(c.period_from)} – ${fmtDate(c.period_to)}`],
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
  append(main);
}
