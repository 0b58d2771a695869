// Admin pages: tenants, the fleet (registered nodes and their GPUs; register a node, add
// capacity to one), signers (register from a pasted key, rotate, revoke), tokens, prices in
// force, ingest rate and rejections (the Prometheus text of /metrics), witness status.

import { h, t, tOr, replace, fmtNumber, fmtMoney, fmtDateTime, fmtPeriod, decSum } from "../lib/dom.js";
import { getJson, getText, postJson, putJson, del, getPrepayments, ApiError } from "../lib/api.js";
import { table, inputValue, toTimestamp, prepaidPositions, prepaidLots } from "./tenant.js";

/** Seconds between the two /metrics samples the ingest rate is computed from. */
export const RATE_SAMPLE_SECONDS = 5;

function problemText(e) {
  return e instanceof ApiError && e.problem ? `${e.status} ${e.problem.detail || e.problem.title || ""}` : e.message;
}

/**
 * An API error as people read it: the problem's status and title, its detail, its type's slug
 * (`urn:gpuledger:problem:<slug>`) and each of its `errors` (field: message), all data from the
 * server (marked `data-problem` with the slug for tests).
 */
export function problemView(e) {
  if (!(e instanceof ApiError) || !e.problem) return h("span", { class: "error" }, t("error_with", { message: e.message }));
  const p = e.problem;
  const slug = String(p.type || "").replace(/^urn:gpuledger:problem:/, "");
  return h(
    "div",
    { class: "problem error", role: "alert", dataset: { problem: slug, status: e.status } },
    h("strong", {}, t("api_refused")),
    " ",
    `${e.status} ${p.title || ""}`,
    slug ? [" ", h("code", {}, slug)] : null,
    p.detail ? h("p", {}, String(p.detail)) : null,
    Array.isArray(p.errors) && p.errors.length
      ? h("ul", {}, p.errors.map((x) => h("li", {}, h("code", {}, String(x.field ?? "")), `: ${x.message ?? ""}`, x.reason ? ` (${x.reason})` : "")))
      : null,
  );
}

function field(id, label, input) {
  input.id = id;
  input.name = id;
  return h("div", { class: "field" }, h("label", { for: id }, label), input);
}

/** A form that posts, shows the outcome in its status line, and then calls `done`. */
function actionForm(title, fields, submitLabel, act) {
  const status = h("p", { role: "status", "aria-live": "polite" });
  const button = h("button", { type: "submit" }, submitLabel);
  const form = h(
    "form",
    {
      class: "card filters",
      onsubmit: async (ev) => {
        ev.preventDefault();
        button.disabled = true;
        replace(status);
        try {
          const msg = await act();
          replace(status, msg || t("done"));
        } catch (e) {
          replace(status, problemView(e));
        } finally {
          button.disabled = false;
        }
      },
    },
    h("h2", { class: "wide" }, title),
    fields,
    h("div", { class: "actions" }, button),
    status,
  );
  return form;
}

const list = (s) => s.split(",").map((x) => x.trim()).filter(Boolean);

/** `#/tenants`. */
export async function tenantsPage(main) {
  const tenants = await getJson("/v1/tenants");
  const id = h("input", { required: true, autocomplete: "off" });
  const name = h("input", { required: true, autocomplete: "off" });
  replace(
    main,
    h("h1", {}, t("tenants_title")),
    actionForm(t("create_tenant"), [field("tenant-id", t("tenant_id"), id), field("tenant-name", t("tenant_name"), name)], t("create"), async () => {
      await postJson("/v1/tenants", { id: id.value.trim(), name: name.value.trim() });
      setTimeout(() => tenantsPage(main), 0);
      return t("created");
    }),
    h(
      "section",
      { class: "card" },
      table([t("tenant_id"), t("tenant_name"), t("created_at")], tenants.map((x) => [x.id, x.name, fmtDateTime(x.created_at)]), { id: "tenants" }),
    ),
  );
}

/**
 * A MIG layout token's value (after `mig=`): `SLICES:PROFILE*COUNT[,PROFILE*COUNT…]`, e.g.
 * `7:1g.10gb*3,3g.40gb*1` → `{slices: 7, instances: [{profile: "1g.10gb", count: 3},
 * {profile: "3g.40gb", count: 1}]}`, the instances by profile name (byte order, as the server
 * wants them). `null` when the token is not of that shape; the profiles' names, the counts'
 * bounds and whether the instances fit the slices are the server's to check.
 */
export function parseMigToken(value) {
  const m = /^(\d+):(.+)$/.exec(String(value).trim());
  if (!m) return null;
  const instances = [];
  for (const item of m[2].split(/\s*,\s*/)) {
    const x = /^([^\s*:,=]+)\*(\d+)$/.exec(item);
    if (!x) return null;
    instances.push({ profile: x[1], count: Number(x[2]) });
  }
  if (!instances.length) return null;
  instances.sort((a, b) => (a.profile < b.profile ? -1 : a.profile > b.profile ? 1 : 0));
  return { slices: Number(m[1]), instances };
}

/** A GPU's MIG layout back in the token form `parseMigToken` reads: `7:1g.10gb*7`. */
export function migToken(mig) {
  return `${mig.slices}:${(mig.instances || []).map((i) => `${i.profile}*${i.count}`).join(",")}`;
}

/**
 * The GPUs of a node from pasted lines, one GPU a line: `index uuid model`, separated by
 * whitespace or commas (`nvidia-smi --query-gpu=index,uuid --format=csv,noheader` with the
 * model id appended), and for a GPU partitioned into MIG instances a fourth token
 * `mig=SLICES:PROFILE*COUNT[,PROFILE*COUNT…]` (e.g. `9 GPU-abc H100-SXM-80G
 * mig=7:1g.10gb*3,3g.40gb*1`; `parseMigToken`). Empty lines and `#` comments are skipped; a
 * line of another shape throws (naming it). No GPU at all throws too, unless `allowEmpty` (a
 * node update may list none): then it is `[]`. Order, distinct UUIDs, the number of GPUs and
 * the layouts' rules are the server's to check.
 */
export function parseGpuLines(text, { allowEmpty = false } = {}) {
  const gpus = [];
  String(text)
    .split(/\r?\n/)
    .forEach((raw, i) => {
      const line = raw.trim();
      if (!line || line.startsWith("#")) return;
      const bad = () => new Error(String(t("gpu_line_bad", { line: i + 1, text: line })));
      // The layout token runs to the end of the line (its profiles are comma-separated).
      const at = /(^|[\s,])mig=/i.exec(line);
      const head = at ? line.slice(0, at.index) : line;
      const parts = head.split(/[\s,]+/).filter(Boolean);
      if (parts.length !== 3 || !/^\d+$/.test(parts[0])) throw bad();
      const gpu = { index: Number(parts[0]), uuid: parts[1], model: parts[2] };
      if (at) {
        const mig = parseMigToken(line.slice(at.index + at[0].length).replace(/,\s*$/, ""));
        if (!mig) throw bad();
        gpu.mig = mig;
      }
      gpus.push(gpu);
    });
  if (!gpus.length && !allowEmpty) throw new Error(String(t("gpu_lines_empty")));
  return gpus;
}

/** The GPU lines of an update (`POST /v1/node-updates`): as `parseGpuLines`, none allowed. */
export function parseUpdateGpuLines(text) {
  return parseGpuLines(text, { allowEmpty: true });
}

/**
 * A node's GPUs by model, in the order the models first appear, its partitioned GPUs of a
 * model counted apart from its whole ones: `6 × H100-SXM-80G, 2 × H100-SXM-80G (MIG), 2 × L4`.
 */
export function gpuSummary(gpus) {
  const by = new Map();
  for (const g of gpus || []) {
    const key = g.mig ? `${g.model} (MIG)` : g.model;
    by.set(key, (by.get(key) || 0) + 1);
  }
  return [...by.entries()].map(([model, n]) => `${n} × ${model}`).join(", ");
}

/** A MIG layout in words: `7 × 1g.10gb` or `3 × 1g.10gb, 1 × 3g.40gb`. */
export function migLayout(mig) {
  return (mig?.instances || []).map((i) => `${i.count} × ${i.profile}`).join(", ");
}

/**
 * A GPU's model cell: its model, and for a partitioned GPU its layout (`H100-SXM-80G · MIG 7 ×
 * 1g.10gb`), marked `data-mig` with the layout as `parseMigToken` reads it (`7:1g.10gb*7`).
 */
function gpuModelCell(g) {
  if (!g.mig) return g.model;
  return h("span", { dataset: { mig: migToken(g.mig) } }, `${g.model} · MIG ${migLayout(g.mig)}`);
}

/** What lease `l` covers of node `node`, in words: whole GPUs, shares of GPUs, counts. */
export function leaseCovers(l, node) {
  return (l.nodes || [])
    .filter((item) => item.node === node)
    .map((item) =>
      item.gpus
        ? item.share
          ? t("lease_covers_share", { share: item.share, gpus: item.gpus.join(", ") })
          : t("lease_covers_gpus", { gpus: item.gpus.join(", ") })
        : t("lease_covers_count", { count: item.count, model: item.gpu_model }),
    )
    .join("; ");
}

/** The leases on node `n`: id, tenant, class, term and what each covers of it. */
function nodeLeases(n) {
  const leases = n.leases || [];
  if (!leases.length) return "—";
  return h(
    "ul",
    { dataset: { leases: leases.length } },
    ...leases.map((l) =>
      h(
        "li",
        {},
        h("code", {}, l.lease),
        ` · ${l.tenant} · ${l.class} · ${l.from} – ${l.to || t("lease_open_ended")} · ${leaseCovers(l, n.node)}`,
      ),
    ),
  );
}

/** The `node_updated` entries of node `n`, by index (`Updated by entries 12, 15`), or nothing. */
function nodeUpdates(n) {
  const indexes = (n.updates || []).map((u) => u.index);
  if (!indexes.length) return null;
  return h("p", { class: "muted", dataset: { updates: indexes.join(",") } }, t("node_updated_by", { entries: indexes.join(", ") }));
}

/**
 * The registered nodes (`GET /v1/nodes`, each as its entries made it: its GPUs now and its
 * power limit now), each with its GPUs behind a disclosure and, under them, the entries that
 * updated it.
 */
function nodesTable(nodes) {
  return table(
    [t("node"), t("region"), t("hub"), t("gpus"), t("node_leases"), t("max_watts_per_gpu"), t("index")],
    nodes.map((n) => [
      h("code", {}, n.node),
      n.region,
      n.hub || "—",
      [
        h(
          "details",
          { dataset: { node: n.node, gpus: (n.gpus || []).length } },
          h("summary", {}, gpuSummary(n.gpus)),
          table(
            [t("gpu_index"), t("gpu_uuid"), t("gpu_model")],
            (n.gpus || []).map((g) => [fmtNumber(g.index), h("code", {}, g.uuid), gpuModelCell(g)]),
            { numeric: [0] },
          ),
        ),
        nodeUpdates(n),
      ],
      nodeLeases(n),
      fmtNumber(n.max_watts_per_gpu),
      fmtNumber(n.index),
    ]),
    { id: "nodes", numeric: [5, 6] },
  );
}

/** `#/fleet` for auditors: the registered nodes, read-only. */
export async function fleetListPage(main) {
  const { nodes } = await getJson("/v1/nodes");
  replace(main, h("h1", {}, t("fleet_title")), h("p", { class: "muted" }, t("fleet_explain")), h("section", { class: "card" }, nodesTable(nodes)));
}

/** The field that takes GPU lines: a textarea with its hint (`id`-hint), wide. */
function gpuLinesField(id, label, textarea, hint) {
  textarea.setAttribute("aria-describedby", `${id}-hint`);
  const f = field(id, label, textarea);
  f.classList.add("wide");
  f.append(h("div", { id: `${id}-hint`, class: "muted" }, hint));
  return f;
}

/**
 * `#/fleet`: the registered nodes and their GPUs; register a node (`POST /v1/nodes`) and add
 * capacity to one (`POST /v1/node-updates`: GPUs, replaced boards, a higher power limit).
 */
export async function fleetPage(main) {
  const { nodes } = await getJson("/v1/nodes");
  const node = h("input", { required: true, autocomplete: "off", spellcheck: "false" });
  const region = h("input", { required: true, autocomplete: "off", spellcheck: "false" });
  const hub = h("input", { autocomplete: "off", spellcheck: "false" });
  const watts = h("input", { required: true, inputmode: "decimal", autocomplete: "off", pattern: "[0-9]+(\\.[0-9]+)?" });
  const gpus = h("textarea", {
    required: true,
    rows: 6,
    spellcheck: "false",
    autocomplete: "off",
    placeholder: "0 GPU-5f1c2a9e-… H100-SXM-80G",
  });
  const gpuField = gpuLinesField("node-gpus", t("gpu_lines"), gpus, [
    h("p", {}, t("gpu_lines_run")),
    h("pre", { class: "note" }, "nvidia-smi --query-gpu=index,uuid,name --format=csv,noheader"),
    h("p", {}, t("gpu_lines_hint")),
    h("pre", { class: "note" }, "0 GPU-5f1c2a9e-… H100-SXM-80G\n1 GPU-0b7d41c3-… H100-SXM-80G"),
    h("p", {}, t("gpu_lines_mig_hint")),
    h("pre", { class: "note" }, "2 GPU-7a3e90d2-… H100-SXM-80G mig=7:1g.10gb*3,3g.40gb*1"),
  ]);

  const updNode = h("input", { required: true, autocomplete: "off", spellcheck: "false", list: "upd-node-list" });
  const updNodeList = h("datalist", { id: "upd-node-list" }, nodes.map((n) => h("option", { value: n.node })));
  const updWatts = h("input", { inputmode: "decimal", autocomplete: "off", pattern: "[0-9]+(\\.[0-9]+)?" });
  const updGpus = h("textarea", {
    rows: 4,
    spellcheck: "false",
    autocomplete: "off",
    placeholder: "8 GPU-9c1e0b7a-… H100-SXM-80G",
  });
  const updGpuField = gpuLinesField("upd-gpus", t("update_gpu_lines"), updGpus, [
    h("p", {}, t("update_gpu_lines_hint")),
    h("pre", { class: "note" }, "3 GPU-2e8b51f0-… H100-SXM-80G\n8 GPU-9c1e0b7a-… H100-SXM-80G"),
  ]);
  const updNodeField = field("upd-node", t("node_id"), updNode);
  updNodeField.append(updNodeList);

  const reload = () => setTimeout(() => fleetPage(main), 0);
  replace(
    main,
    h("h1", {}, t("fleet_title")),
    h("p", { class: "muted" }, t("fleet_explain")),
    actionForm(
      t("register_node"),
      [
        field("node-id", t("node_id"), node),
        field("node-region", t("region"), region),
        field("node-hub", t("hub_optional"), hub),
        field("node-watts", t("max_watts_per_gpu_input"), watts),
        gpuField,
      ],
      t("register"),
      async () => {
        const body = { node: node.value.trim(), region: region.value.trim(), gpus: parseGpuLines(gpus.value), max_watts_per_gpu: watts.value.trim() };
        if (hub.value.trim()) body.hub = hub.value.trim();
        const ans = await postJson("/v1/nodes", body);
        reload();
        return h("span", { dataset: { registeredNode: body.node } }, t("node_registered_ok", { node: body.node, index: ans?.index ?? "?" }));
      },
    ),
    actionForm(
      t("update_node"),
      [updNodeField, field("upd-watts", t("update_watts_optional"), updWatts), updGpuField],
      t("update"),
      async () => {
        // Absent members are omitted: the server says when there is nothing to update.
        const body = { node: updNode.value.trim() };
        const added = parseUpdateGpuLines(updGpus.value);
        if (added.length) body.gpus = added;
        if (updWatts.value.trim()) body.max_watts_per_gpu = updWatts.value.trim();
        const ans = await postJson("/v1/node-updates", body);
        reload();
        return h("span", { dataset: { updatedNode: body.node } }, t("node_updated_ok", { node: body.node, index: ans?.index ?? "?" }));
      },
    ),
    h("section", { class: "card" }, nodesTable(nodes)),
  );
}

/** `#/signers`: every key with its scope; register, add a key (rotate), revoke. */
export async function signersPage(main) {
  const keys = await getJson("/v1/signers");
  const sid = h("input", { required: true, autocomplete: "off" });
  const role = h("select", {}, h("option", { value: "node" }, t("signer_role_node")), h("option", { value: "market" }, t("signer_role_market")));
  const pub = h("textarea", { required: true, rows: 2, spellcheck: "false" });
  const nodes = h("input", { autocomplete: "off" });
  const regions = h("input", { required: true, autocomplete: "off" });
  const rotId = h("input", { required: true, autocomplete: "off" });
  const rotPub = h("textarea", { required: true, rows: 2, spellcheck: "false" });
  const reload = () => setTimeout(() => signersPage(main), 0);
  const rows = keys.map((k) => [
    k.signer,
    tOr(`signer_role_${k.role}`, k.role),
    h("code", {}, k.key_id),
    (k.regions || []).join(", "),
    (k.nodes || []).join(", ") || "—",
    fmtNumber(k.registered_index),
    k.revoked_index !== null && k.revoked_index !== undefined
      ? h("span", { class: "badge ev-revoked" }, t("revoked_at_index", { index: k.revoked_index }))
      : h(
          "button",
          {
            type: "button",
            class: "danger",
            dataset: { revoke: k.key_id },
            onclick: async (ev) => {
              if (!confirm(String(t("confirm_revoke", { key: k.key_id, signer: k.signer })))) return;
              ev.target.disabled = true;
              try {
                await postJson(`/v1/signers/${encodeURIComponent(k.signer)}/keys/${encodeURIComponent(k.key_id)}/revoke`, {});
                reload();
              } catch (e) {
                ev.target.disabled = false;
                alert(String(t("error_with", { message: problemText(e) })));
              }
            },
          },
          t("revoke"),
        ),
  ]);
  replace(
    main,
    h("h1", {}, t("signers_title")),
    actionForm(
      t("register_signer"),
      [
        field("signer-id", t("signer"), sid),
        field("signer-role", t("role"), role),
        field("signer-key", t("public_key_pasted"), pub),
        field("signer-nodes", t("nodes_comma"), nodes),
        field("signer-regions", t("regions_comma"), regions),
      ],
      t("register"),
      async () => {
        const body = { id: sid.value.trim(), role: role.value, public_key: pub.value.trim(), regions: list(regions.value) };
        if (role.value === "node") body.nodes = list(nodes.value);
        await postJson("/v1/signers", body);
        reload();
        return t("created");
      },
    ),
    actionForm(t("rotate_key"), [field("rotate-id", t("signer"), rotId), field("rotate-key", t("public_key_pasted"), rotPub)], t("add_key"), async () => {
      await postJson(`/v1/signers/${encodeURIComponent(rotId.value.trim())}/keys`, { public_key: rotPub.value.trim() });
      reload();
      return t("created");
    }),
    h(
      "section",
      { class: "card" },
      table([t("signer"), t("role"), t("key_id"), t("regions"), t("nodes"), t("registered_index"), t("state")], rows, { id: "signers" }),
    ),
  );
}

/** `#/tokens`: list, create (the secret shown once), revoke. */
export async function tokensPage(main) {
  const tokens = await getJson("/v1/tokens");
  const role = h("select", {}, ["tenant", "auditor", "admin"].map((r) => h("option", { value: r }, t(`role_${r}`))));
  const tenant = h("input", { autocomplete: "off" });
  const label = h("input", { required: true, autocomplete: "off" });
  const expires = h("input", { type: "date" });
  const secretBox = h("div", { "aria-live": "polite" });
  const reload = () => setTimeout(() => tokensPage(main), 0);
  const rows = tokens.map((k) => [
    h("code", {}, k.id),
    t(`role_${k.role}`),
    k.tenant || "—",
    k.label,
    fmtDateTime(k.created_at),
    k.expires_at ? fmtDateTime(k.expires_at) : "—",
    k.revoked_at
      ? h("span", { class: "badge ev-revoked" }, t("revoked"))
      : h(
          "button",
          {
            type: "button",
            class: "danger",
            dataset: { revokeToken: k.id },
            onclick: async (ev) => {
              if (!confirm(String(t("confirm_revoke_token", { id: k.id })))) return;
              ev.target.disabled = true;
              try {
                await del(`/v1/tokens/${encodeURIComponent(k.id)}`);
                reload();
              } catch (e) {
                ev.target.disabled = false;
                alert(String(t("error_with", { message: problemText(e) })));
              }
            },
          },
          t("revoke"),
        ),
  ]);
  const form = actionForm(
    t("create_token"),
    [field("token-role", t("role"), role), field("token-tenant", t("tenant_for_tenant_tokens"), tenant), field("token-label", t("label"), label), field("token-expires", t("expires_optional"), expires)],
    t("create"),
    async () => {
      const body = { role: role.value, label: label.value.trim() };
      if (role.value === "tenant") body.tenant = tenant.value.trim();
      if (expires.value) body.expires_at = `${expires.value}T00:00:00Z`;
      const made = await postJson("/v1/tokens", body);
      replace(secretBox, h("div", { class: "card secret" }, h("p", {}, t("token_secret_once")), h("code", { class: "vkey", id: "new-token" }, made.token)));
      return t("created");
    },
  );
  replace(
    main,
    h("h1", {}, t("tokens_title")),
    form,
    secretBox,
    h("section", { class: "card" }, h("button", { type: "button", class: "secondary", onclick: reload }, t("refresh")), table([t("token_id"), t("role"), t("tenant"), t("label"), t("created_at"), t("expires_at"), t("state")], rows, { id: "tokens" })),
  );
}

/** The entries of `kind` in force now: the latest `effective_from` ≤ now per `key(body)`. */
function inForce(entries, kind, key) {
  const now = new Date().toISOString().replace(/\.\d+Z$/, "Z");
  const best = new Map();
  for (const e of entries) {
    if (e.kind !== kind || !(e.body.effective_from <= now)) continue;
    const k = key(e.body);
    const cur = best.get(k);
    if (!cur || cur.body.effective_from <= e.body.effective_from) best.set(k, e);
  }
  return [...best.values()].sort((a, b) => key(a.body).localeCompare(key(b.body)));
}

/** `#/prices`: rate cards, region parameters and spot prices in force; plans and tiers. */
export async function pricesPage(main) {
  const entries = await getJson("/v1/prices");
  const cards = inForce(entries, "rate_card", (b) => `${b.region}/${b.gpu_model}/${b.lease_class}`);
  const params = inForce(entries, "region_params", (b) => b.region);
  const spots = inForce(entries, "spot_price", (b) => `${b.region}/${b.gpu_model}`);
  const others = entries.filter((e) => ["volume_tiers", "tenant_plan"].includes(e.kind));
  replace(
    main,
    h("h1", {}, t("prices_title")),
    h(
      "section",
      { class: "card" },
      h("h2", {}, t("rate_cards_in_force")),
      table(
        [t("region"), t("gpu_model"), t("lease_class"), t("price_per_gpu_hour"), t("effective_from"), t("index")],
        cards.map((e) => [e.body.region, e.body.gpu_model, tOr(`class_${e.body.lease_class}`, e.body.lease_class), fmtMoney(e.body.price_per_gpu_hour, e.body.currency), fmtDateTime(e.body.effective_from), fmtNumber(e.index)]),
        { id: "rate-cards", numeric: [3, 5] },
      ),
    ),
    h(
      "section",
      { class: "card" },
      h("h2", {}, t("region_params_in_force")),
      table(
        [t("region"), t("electricity_price"), t("pue"), t("carbon_intensity"), t("effective_from")],
        params.map((e) => [e.body.region, fmtMoney(e.body.electricity_price_per_kwh, e.body.currency), fmtNumber(e.body.pue), fmtNumber(e.body.carbon_g_per_kwh), fmtDateTime(e.body.effective_from)]),
        { numeric: [1, 2, 3] },
      ),
    ),
    h(
      "section",
      { class: "card" },
      h("h2", {}, t("spot_in_force")),
      table(
        [t("region"), t("gpu_model"), t("price_per_gpu_hour"), t("effective_from")],
        spots.map((e) => [e.body.region, e.body.gpu_model, fmtMoney(e.body.price_per_gpu_hour, e.body.currency), fmtDateTime(e.body.effective_from)]),
        { numeric: [2] },
      ),
    ),
    h(
      "section",
      { class: "card" },
      h("h2", {}, t("plans_and_tiers")),
      table(
        [t("index"), t("kind"), t("body")],
        others.map((e) => [fmtNumber(e.index), tOr(`kind_${e.kind}`, e.kind), h("pre", { class: "json" }, JSON.stringify(e.body, null, 2))]),
        { numeric: [0] },
      ),
    ),
  );
}

/**
 * Parses Prometheus text: the samples of `name` as `[{labels, value}]` (labels unescaped).
 */
export function samples(text, name) {
  const out = [];
  const re = new RegExp(`^${name}(?:\\{(.*)\\})?\\s+(\\S+)`);
  for (const line of text.split("\n")) {
    const m = re.exec(line);
    if (!m) continue;
    const labels = {};
    for (const l of (m[1] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2].replace(/\\(.)/g, "$1");
    out.push({ labels, value: Number(m[2]) });
  }
  return out;
}

function recordCounts(text) {
  const by = { accepted: 0, duplicate: 0, rejected: 0, reasons: new Map() };
  for (const s of samples(text, "gpuledger_records_total")) {
    const o = s.labels.outcome;
    if (o in by) by[o] += s.value;
    if (o === "rejected") by.reasons.set(s.labels.reason || "?", (by.reasons.get(s.labels.reason || "?") || 0) + s.value);
  }
  return by;
}

/** `#/ingest`: records per second (two samples of /metrics) and rejections by reason. */
export async function ingestPage(main, _arg, _query, alive) {
  const first = recordCounts(await getText("/metrics"));
  const rate = h("p", { id: "ingest-rate", "aria-live": "polite" }, t("measuring", { s: RATE_SAMPLE_SECONDS }));
  const reasons = [...first.reasons.entries()].sort((a, b) => b[1] - a[1]);
  replace(
    main,
    h("h1", {}, t("ingest_title")),
    h("p", { class: "muted" }, t("ingest_explain")),
    h(
      "section",
      { class: "card" },
      rate,
      h(
        "dl",
        { class: "facts" },
        h("dt", {}, t("accepted_total")),
        h("dd", {}, fmtNumber(first.accepted)),
        h("dt", {}, t("duplicate_total")),
        h("dd", {}, fmtNumber(first.duplicate)),
        h("dt", {}, t("rejected_total")),
        h("dd", {}, fmtNumber(first.rejected)),
      ),
    ),
    h("section", { class: "card" }, h("h2", {}, t("rejections_by_reason")), table([t("reason"), t("count")], reasons.map(([r, n]) => [h("code", {}, r), fmtNumber(n)]), { id: "rejections", numeric: [1] })),
  );
  const started = performance.now();
  await new Promise((r) => setTimeout(r, RATE_SAMPLE_SECONDS * 1000));
  if (alive && !alive()) return;
  const second = recordCounts(await getText("/metrics"));
  const secs = (performance.now() - started) / 1000;
  const perSec = (second.accepted - first.accepted) / secs;
  replace(rate, t("ingest_rate", { rate: fmtNumber(perSec, 1), s: fmtNumber(secs, 1) }));
}

/** `#/witnesses`: each configured witness, its cosigned size, lag and last error. */
export async function witnessesPage(main) {
  const w = await getJson("/v1/witnesses");
  replace(
    main,
    h("h1", {}, t("witnesses_title")),
    h("p", {}, t("witness_quorum", { quorum: w.quorum })),
    h(
      "section",
      { class: "card" },
      table(
        [t("witness"), t("url"), t("cosigned_size"), t("lag_entries"), t("last_cosigned_at"), t("last_error")],
        (w.witnesses || []).map((x) => [
          x.name,
          h("code", {}, x.url),
          x.cosigned_size === null || x.cosigned_size === undefined ? "—" : fmtNumber(x.cosigned_size),
          fmtNumber(x.lag_entries),
          x.last_cosigned_at ? fmtDateTime(x.last_cosigned_at) : "—",
          x.last_error ? h("span", { class: "error" }, `${x.last_error.reason}: ${x.last_error.message}`) : "—",
        ]),
        { id: "witnesses", numeric: [2, 3] },
      ),
    ),
  );
}

/** The last whole calendar month (UTC) as `datetime-local` values: the usual invoice period. */
function lastMonth(now = new Date()) {
  const start = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - 1, 1));
  const end = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
  return [inputValue(start), inputValue(end)];
}

/** What an invoice list row says its tenant's prepaid lots paid of it (an amount), or null. */
export function invoicePrepaid(i) {
  const p = i?.prepaid;
  if (p === undefined || p === null || p === "") return null;
  // The invoice's own shape lists the draws; a list row has their sum.
  return Array.isArray(p) ? (p.length ? decSum(p.map((d) => d.amount)) : null) : String(p);
}

/** Whether an amount (a decimal string) is other than zero. */
const nonZero = (a) => a !== null && /[1-9]/.test(a);

/**
 * A tenant's low-balance thresholds (`{CNY: "1000.00"}`) as people read them, each marked
 * `data-alert-currency` with its threshold as `data-threshold`; "none" when there is none.
 */
function alertsView(lowBalance) {
  const items = Object.entries(lowBalance || {});
  if (!items.length) return h("span", { dataset: { alerts: "" } }, t("billing_alerts_none"));
  return h(
    "span",
    { dataset: { alerts: items.map(([c]) => c).join(",") } },
    items.map(([c, a], n) => [n ? ", " : null, h("span", { dataset: { alertCurrency: c, threshold: a } }, fmtMoney(a, c))]),
  );
}

/**
 * A tenant's usage alerts (`spend` per currency, `commitment_percent`; set with
 * `PUT /v1/tenants/{id}/alerts`), or null when it has none beyond the default 100 %.
 */
function usageAlertsView(alerts) {
  const spend = Object.entries(alerts?.spend || {});
  const percents = alerts?.commitment_percent || [];
  if (!spend.length && !percents.length) return null;
  return h(
    "p",
    { id: "billing-usage-alerts", dataset: { spend: spend.map(([c]) => c).join(","), commitment: percents.join(",") } },
    h("span", { class: "muted" }, t("billing_usage_alerts")),
    " ",
    spend.map(([c, amounts], n) => [n ? "; " : null, amounts.map((a) => fmtMoney(a, c)).join(", ")]),
    percents.length ? [spend.length ? "; " : null, t("billing_commitment_alerts", { percents: percents.map((p) => `${p} %`).join(", ") })] : null,
  );
}

/**
 * `#/billing`: issue a tenant's invoices for a period (`POST /v1/invoices`), record a payment
 * (`POST /v1/payments`, optionally `excess=credit`) or grant a credit note
 * (`POST /v1/credit-notes`) against an invoice, record a tenant's top-up or grant
 * (`POST /v1/prepayments`), set its low-balance alert in a currency (`GET`, then `PUT
 * /v1/tenants/{id}/alerts` with the merged thresholds), the chosen tenant's prepaid balance,
 * and the invoices with their balances. The API's refusals (problem+json) are shown as they
 * come: status, title, detail, field errors.
 */
export async function billingPage(main) {
  const tenants = await getJson("/v1/tenants");
  let invoices = await getJson("/v1/invoices");
  let byNumber = new Map();
  const tenantSelect = () => h("select", { required: true }, tenants.map((x) => h("option", { value: x.id }, x.id)));
  const selects = [];
  const fillOptions = (sel) => {
    const keep = sel.value;
    replace(
      sel,
      invoices.length
        ? invoices
            .slice()
            .reverse()
            .map((i) => h("option", { value: i.number, selected: i.number === keep }, `${i.number} · ${i.tenant} · ${i.currency} ${i.total} (${i.status})`))
        : h("option", { value: "" }, t("empty")),
    );
  };
  const invoiceSelect = () => {
    const sel = h("select", { required: true });
    selects.push(sel);
    return sel;
  };
  const listBox = h("div", {});
  const drawList = () => {
    // The prepaid column only where a tenant's lots paid something.
    const prepaid = invoices.some((i) => nonZero(invoicePrepaid(i)));
    const headers = [t("invoice_number"), t("tenant"), t("period"), t("status"), t("total")];
    if (prepaid) headers.push(t("billing_prepaid_column"));
    headers.push(t("paid"), t("credited"), t("balance_due"));
    replace(
      listBox,
      table(
        headers,
        invoices
          .slice()
          .reverse()
          .map((i) => [
            i.number,
            i.tenant,
            fmtPeriod(i.period_from, i.period_to),
            h("span", { class: `badge status-${i.status}` }, tOr(`status_${i.status}`, i.status)),
            fmtMoney(i.total, i.currency),
            prepaid ? fmtMoney(invoicePrepaid(i) ?? "0", i.currency) : null,
            fmtMoney(i.paid, i.currency),
            fmtMoney(i.credited, i.currency),
            fmtMoney(i.balance_due, i.currency),
          ].filter((c) => c !== null)),
        { id: "billing-invoices", numeric: prepaid ? [4, 5, 6, 7, 8] : [4, 5, 6, 7] },
      ),
    );
  };
  const show = () => {
    byNumber = new Map(invoices.map((i) => [i.number, i]));
    selects.forEach(fillOptions);
    drawList();
  };
  // After an action: the invoices again, the forms left as they are.
  const reload = async () => {
    invoices = await getJson("/v1/invoices");
    show();
  };

  const [f0, t0] = lastMonth();
  const issueTenant = tenantSelect();
  const issueFrom = h("input", { type: "datetime-local", step: 3600, value: f0, required: true });
  const issueTo = h("input", { type: "datetime-local", step: 3600, value: t0, required: true });
  const issue = actionForm(
    t("billing_issue_title"),
    [field("issue-tenant", t("tenant"), issueTenant), field("issue-from", t("from_utc"), issueFrom), field("issue-to", t("to_exclusive_utc"), issueTo)],
    t("billing_issue"),
    async () => {
      const issued = await postJson("/v1/invoices", { tenant: issueTenant.value, from: toTimestamp(issueFrom.value), to: toTimestamp(issueTo.value) });
      await reload();
      const numbers = (issued || []).map((i) => i.number).join(", ");
      return h("span", { dataset: { issuedInvoices: numbers } }, t("billing_issued", { numbers }));
    },
  );

  const settlementForm = (kind) => {
    const inv = invoiceSelect();
    const amount = h("input", { required: true, inputmode: "decimal", autocomplete: "off", pattern: "[0-9]+(\\.[0-9]+)?" });
    const note = h("input", { autocomplete: "off" });
    const excess = h("input", { type: "checkbox" });
    const fields = [
      field(`${kind}-invoice`, t("invoice_number"), inv),
      field(`${kind}-amount`, t("billing_amount"), amount),
      field(`${kind}-note`, t(kind === "payment" ? "billing_payment_note" : "billing_credit_note_reason"), note),
    ];
    if (kind === "payment") {
      excess.id = "payment-excess";
      fields.push(h("div", { class: "field check" }, excess, h("label", { for: "payment-excess" }, t("billing_excess_credit"))));
    }
    return actionForm(
      t(kind === "payment" ? "billing_payment_title" : "billing_credit_title"),
      fields,
      t(kind === "payment" ? "billing_record_payment" : "billing_grant_credit"),
      async () => {
        const i = byNumber.get(inv.value);
        if (!i) throw new Error(String(t("billing_pick_invoice")));
        const body = { tenant: i.tenant, invoice: i.number, currency: i.currency, amount: amount.value.trim() };
        if (note.value.trim()) body.note = note.value.trim();
        const path = kind === "payment" ? `/v1/payments${excess.checked ? "?excess=credit" : ""}` : "/v1/credit-notes";
        const ans = await postJson(path, body);
        await reload();
        return h(
          "span",
          { dataset: { recorded: kind } },
          t(kind === "payment" ? "billing_payment_recorded" : "billing_credit_recorded", { invoice: i.number, amount: fmtMoney(body.amount, i.currency) }),
          ans && ans.index !== undefined ? ` (#${ans.index})` : "",
        );
      },
    );
  };

  const payment = settlementForm("payment");
  const credit = settlementForm("credit");

  // Prepaid balances: both forms name the same tenant, whose balance and alerts show below them.
  const prepaidBox = h("section", { class: "card", id: "billing-prepaid", "aria-live": "polite" });
  let prepaidSeq = 0;
  const alertsPath = (id) => `/v1/tenants/${encodeURIComponent(id)}/alerts`;
  const showPrepaid = async (tenant) => {
    if (!tenant) return replace(prepaidBox);
    const seq = ++prepaidSeq;
    const [data, alerts] = await Promise.all([
      getPrepayments({ tenant }).catch((error) => ({ error })),
      // A server without alerts (404) shows none; any other failure says so.
      getJson(alertsPath(tenant)).catch((error) => (error instanceof ApiError && error.status === 404 ? null : { error })),
    ]);
    if (seq !== prepaidSeq) return;
    const positions = prepaidPositions(data?.positions);
    replace(
      prepaidBox,
      h("h2", {}, t("billing_prepaid_title", { tenant })),
      data?.error
        ? h("p", { class: "error" }, t("error_with", { message: problemText(data.error) }))
        : positions || h("p", { class: "muted", dataset: { prepaidNone: tenant } }, t("billing_prepaid_none")),
      alerts?.error
        ? h("p", { class: "error" }, t("error_with", { message: problemText(alerts.error) }))
        : alerts
          ? [
              h("p", { id: "billing-alerts" }, h("span", { class: "muted" }, t("billing_alerts_current")), " ", alertsView(alerts.low_balance)),
              usageAlertsView(alerts),
            ]
          : null,
      data?.as_of ? h("p", { class: "muted" }, t("prepaid_as_of", { at: fmtDateTime(data.as_of), size: fmtNumber(data.log_size) })) : null,
      data && !data.error ? prepaidLots(data.prepayments, { links: false }) : null,
      h("p", { class: "muted" }, t("billing_prepaid_explain")),
    );
  };

  const topupTenant = tenantSelect();
  const topupReference = h("input", { required: true, autocomplete: "off", spellcheck: "false", maxlength: 128 });
  const topupSource = h(
    "select",
    { required: true },
    ["purchase", "grant"].map((s) => h("option", { value: s }, t(`prepaid_source_${s}`))),
  );
  const currencyInput = () =>
    h("input", { required: true, value: "CNY", autocomplete: "off", spellcheck: "false", maxlength: 3, pattern: "[A-Za-z]{3}", size: 4 });
  const topupCurrency = currencyInput();
  const topupAmount = h("input", { required: true, inputmode: "decimal", autocomplete: "off", pattern: "[0-9]+(\\.[0-9]+)?" });
  const topupExpires = h("input", { type: "datetime-local" });
  const topup = actionForm(
    t("billing_topup_title"),
    [
      field("topup-tenant", t("tenant"), topupTenant),
      field("topup-reference", t("billing_topup_reference"), topupReference),
      field("topup-source", t("prepaid_source"), topupSource),
      field("topup-currency", t("currency"), topupCurrency),
      field("topup-amount", t("amount"), topupAmount),
      field("topup-expires", t("billing_topup_expires"), topupExpires),
    ],
    t("billing_record_topup"),
    async () => {
      const body = {
        tenant: topupTenant.value,
        reference: topupReference.value.trim(),
        source: topupSource.value,
        currency: topupCurrency.value.trim().toUpperCase(),
        amount: topupAmount.value.trim(),
      };
      if (topupExpires.value) {
        const at = toTimestamp(topupExpires.value);
        if (!at) throw new Error(String(t("billing_topup_expires_bad")));
        body.expires_at = at;
      }
      const ans = await postJson("/v1/prepayments", body);
      await Promise.all([reload(), showPrepaid(body.tenant)]);
      return h(
        "span",
        { dataset: { recorded: "prepayment", reference: body.reference } },
        t(body.source === "grant" ? "billing_grant_recorded" : "billing_topup_recorded", {
          amount: fmtMoney(body.amount, body.currency),
          tenant: body.tenant,
          reference: body.reference,
        }),
        ans && ans.index !== undefined ? ` (#${ans.index})` : "",
      );
    },
  );

  // End a contract early or extend it (`POST /v1/contract-amendments`, PROTOCOL §5.21): the
  // ledger refuses a change that would reach into the past or an invoiced billing period.
  const amendTenant = tenantSelect();
  const amendContract = h("input", { required: true, autocomplete: "off", spellcheck: "false", maxlength: 64 });
  const amendTo = h("input", { type: "datetime-local", required: true });
  const amendReason = h("input", { required: true, autocomplete: "off", maxlength: 500 });
  const amend = actionForm(
    t("billing_amend_title"),
    [
      field("amend-tenant", t("tenant"), amendTenant),
      field("amend-contract", t("contract"), amendContract),
      field("amend-to", t("billing_amend_to"), amendTo),
      field("amend-reason", t("billing_amend_reason"), amendReason),
    ],
    t("billing_amend_submit"),
    async () => {
      const at = toTimestamp(amendTo.value);
      if (!at) throw new Error(String(t("billing_amend_to_bad")));
      const body = {
        tenant: amendTenant.value,
        contract: amendContract.value.trim(),
        term_to: at,
        reason: amendReason.value.trim(),
      };
      const ans = await postJson("/v1/contract-amendments", body);
      return h(
        "span",
        { dataset: { recorded: "amendment", contract: body.contract, termTo: body.term_to } },
        t("billing_amend_recorded", { contract: body.contract, tenant: body.tenant, at: fmtDateTime(body.term_to) }),
        ans && ans.index !== undefined ? ` (#${ans.index})` : "",
      );
    },
  );

  const alertTenant = tenantSelect();
  const alertCurrency = currencyInput();
  const alertThreshold = h("input", { inputmode: "decimal", autocomplete: "off", pattern: "[0-9]+(\\.[0-9]+)?", "aria-describedby": "alert-threshold-hint" });
  const alert = actionForm(
    t("billing_alert_title"),
    [
      field("alert-tenant", t("tenant"), alertTenant),
      field("alert-currency", t("currency"), alertCurrency),
      field("alert-threshold", t("billing_alert_threshold"), alertThreshold),
      h("p", { id: "alert-threshold-hint", class: "muted" }, t("billing_alert_threshold_hint")),
    ],
    t("billing_save_alert"),
    async () => {
      const tenant = alertTenant.value;
      const currency = alertCurrency.value.trim().toUpperCase();
      const amount = alertThreshold.value.trim();
      // The PUT replaces every threshold: the others are kept as they are now.
      const now = await getJson(alertsPath(tenant));
      const low = { ...(now?.low_balance || {}) };
      if (amount) low[currency] = amount;
      else delete low[currency];
      // Its spend and commitment alerts too (the PUT replaces them all).
      const saved = await putJson(alertsPath(tenant), { ...(now || {}), low_balance: low });
      await showPrepaid(tenant);
      return h(
        "span",
        { dataset: { recorded: "alerts", tenant } },
        t("billing_alerts_saved", { tenant }),
        " ",
        alertsView(saved?.low_balance ?? low),
      );
    },
  );

  // One tenant for both forms and the balance shown.
  const pickTenant = (from, to) =>
    from.addEventListener("change", () => {
      to.value = from.value;
      showPrepaid(from.value);
    });
  pickTenant(topupTenant, alertTenant);
  pickTenant(alertTenant, topupTenant);

  show();
  await showPrepaid(topupTenant.value);
  replace(
    main,
    h("h1", {}, t("billing_title")),
    issue,
    payment,
    credit,
    topup,
    alert,
    amend,
    prepaidBox,
    h("section", { class: "card" }, h("h2", {}, t("invoices_list")), listBox),
  );
}
