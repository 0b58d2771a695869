// Auditor pages: the log and its checkpoints (consistency checked here), the entry browser,
// signer keys over time, and a drop zone that verifies a bundle file in the browser.

import { h, t, tOr, replace, fmtNumber, fmtDateTime } from "../lib/dom.js";
import { getJson, getText, mapLimited } from "../lib/api.js";
import { trustForChecks, loadVerifier, showResult, trustPanel, keyId, witnessNote } from "../lib/trust.js";
import { table } from "./tenant.js";

/** Checkpoints the history shows (and checks pairwise). */
export const HISTORY_PAGE = 20;
/** Entries per page of the entry browser. */
export const ENTRIES_PAGE = 50;

/** The message key of an entry kind (unknown kinds show their wire name). */
function kindLabel(kind) {
  return KINDS.has(kind) ? t(`kind_${kind}`) : kind;
}

const KINDS = new Set([
  "gpu_usage", "energy", "spot_price", "signer_key_registered", "signer_key_revoked", "rate_card",
  "region_params", "lease_registered", "invoice_issued", "payment", "credit_note",
  "certificate_issued", "volume_tiers", "tenant_plan", "tenant_registered", "log_policy", "node_registered",
  "record_excluded", "node_updated", "contract_registered", "prepayment", "contract_amended",
]);

/** `#/log`: identity, latest checkpoint (its signature checked here), history with consistency. */
export async function logPage(main) {
  replace(main, h("h1", {}, t("log_title")), h("p", { class: "muted" }, t("loading")));
  const [log, note, page] = await Promise.all([
    getJson("/v1/log"),
    getText("/v1/checkpoint"),
    getJson(`/v1/checkpoints?limit=${HISTORY_PAGE}`),
  ]);
  const noteResult = h("div", { class: "check-result", id: "checkpoint-result", "aria-live": "polite" });
  const summary = h("div", { id: "consistency-summary", "aria-live": "polite" });
  const cps = page.checkpoints;
  const cells = cps.map(() => h("span", { class: "muted" }, t("pending")));
  const rows = cps.map((c, i) => [fmtNumber(c.size), h("code", { class: "hash" }, c.root), fmtDateTime(c.signed_at), cells[i]]);
  replace(
    main,
    h("h1", {}, t("log_title")),
    h(
      "section",
      { class: "card" },
      h(
        "dl",
        { class: "facts" },
        h("dt", {}, t("origin")),
        h("dd", {}, h("code", {}, log.origin)),
        h("dt", {}, t("log_size")),
        h("dd", { id: "log-size" }, fmtNumber(log.size)),
        h("dt", {}, t("verifier_key")),
        h("dd", {}, h("code", { class: "vkey" }, log.verifier_key)),
        h("dt", {}, t("trust_key_id")),
        h("dd", {}, h("code", { id: "log-key-id" }, keyId(log.verifier_key) ?? "?")),
      ),
      h("p", { class: "muted" }, t("trust_server_caveat")),
    ),
    h("section", { class: "card" }, h("h2", {}, t("latest_checkpoint")), h("pre", { class: "note" }, note), noteResult),
    h(
      "section",
      { class: "card" },
      h("h2", {}, t("checkpoint_history")),
      h("p", {}, t("consistency_explain")),
      summary,
      table([t("tree_size"), t("root_hash"), t("signed_at"), t("consistency_with_older")], rows, { id: "checkpoints", numeric: [0] }),
    ),
    trustPanel(),
  );
  let trust;
  let v;
  try {
    [trust, v] = await Promise.all([trustForChecks(), loadVerifier()]);
  } catch (e) {
    replace(noteResult, h("p", { class: "error", role: "alert" }, t("error_with", { message: e.message })));
    replace(summary, h("p", { class: "error" }, t("error_with", { message: e.message })));
    return;
  }
  verifyNote(v, trust, note, noteResult);
  // Each checkpoint against the next older one: a consistency proof from the server, checked
  // here (an empty one where the older tree is empty or the same size), with the witnesses the
  // user requires on the newer checkpoint, as `gpuledger verify consistency --witness` does.
  const results = await mapLimited(cps, 4, async (c, i) => {
    const older = cps[i + 1];
    if (!older) return replace(cells[i], t("oldest_shown")), null;
    const trivial = older.size === 0 || older.size === c.size;
    try {
      const proof = trivial ? { hashes: [] } : await getJson(`/v1/proofs/consistency?from=${older.size}&to=${c.size}`);
      const r = await v.verifyConsistency({
        oldNote: older.note,
        newNote: c.note,
        proof: proof.hashes,
        logKey: trust.logKey,
        witnesses: trust.witnesses,
        quorum: trust.quorum,
      });
      const w = r.ok ? r.summary?.witnesses : null;
      const names = (w?.cosigned_by || []).map((x) => x.name).join(", ");
      replace(
        cells[i],
        h(
          "span",
          {
            class: r.ok ? "ok" : "bad",
            dataset: {
              consistency: r.ok ? "PASS" : "FAIL",
              reason: r.failure?.reason || "",
              witnesses: w ? (w.operator_alone ? "operator_alone" : "cosigned") : "",
            },
          },
          r.ok ? (trivial ? t("trivially_consistent") : t("verdict_pass")) : t("verdict_fail"),
          r.ok ? null : ` ${r.failure?.reason || ""}`,
          names ? h("span", { class: "muted" }, ` (${names})`) : null,
        ),
      );
      return r.ok ? w : false;
    } catch (e) {
      replace(cells[i], h("span", { class: "bad", dataset: { consistency: "ERROR" } }, t("error_with", { message: e.message })));
      return false;
    }
  });
  const checked = results.filter((r) => r !== null);
  const ok = checked.every(Boolean);
  replace(
    summary,
    h(
      "div",
      { class: `verdict ${ok ? "pass" : "fail"}`, role: "status", dataset: { result: ok ? "PASS" : "FAIL" } },
      h("strong", {}, ok ? t("verdict_pass") : t("verdict_fail")),
      " ",
      h("span", {}, t("consistency_summary", { n: checked.length })),
      ok ? consistencyWitnesses(checked, trust) : null,
    ),
  );
}

/**
 * What the history's PASS says about witnesses: none required (the operator alone vouches),
 * or the witnesses that cosigned the newer checkpoints (each carried the quorum).
 */
function consistencyWitnesses(checked, trust) {
  if (!trust.witnesses || trust.witnesses.length === 0) return witnessNote({ required: 0, found: null, operator_alone: true });
  if (checked.length === 0) return null;
  const names = [...new Set(checked.flatMap((w) => (w.cosigned_by || []).map((c) => c.name)))];
  return h(
    "p",
    { class: "muted", dataset: { witnesses: "cosigned", cosignedBy: names.join(" ") } },
    t("consistency_cosigned", { required: checked[0]?.required ?? (trust.quorum || 1), names: names.join(", ") }),
  );
}

async function verifyNote(v, trust, note, out) {
  try {
    const r = await v.verifyCheckpoint({ noteText: note, logKey: trust.logKey, witnesses: trust.witnesses, quorum: trust.quorum });
    showResult(out, r, { source: trust.source });
  } catch (e) {
    replace(out, h("p", { class: "error", role: "alert" }, t("error_with", { message: e.message })));
  }
}

/** A one-line summary of an entry's body: its scalar members (data). */
function bodySummary(body) {
  if (!body || typeof body !== "object") return "";
  return Object.entries(body)
    .filter(([, v]) => v !== null && typeof v !== "object")
    .slice(0, 6)
    .map(([k, v]) => `${k}=${v}`)
    .join(" · ");
}

/** `#/entries?start=N`: a page of entries with their bodies decoded. */
export async function entriesPage(main, _arg, query) {
  const log = await getJson("/v1/log");
  const size = log.size;
  const asked = Number.parseInt(query.get("start") ?? "", 10);
  const start = Number.isFinite(asked) && asked >= 0 ? Math.min(asked, Math.max(0, size - 1)) : Math.max(0, size - ENTRIES_PAGE);
  const end = Math.min(size, start + ENTRIES_PAGE);
  const page = await getJson(`/v1/entries?start=${start}&end=${end}`);
  const rows = page.entries.map((e) => {
    const env = e.entry.envelope || {};
    return [
      fmtNumber(e.index),
      fmtDateTime(e.entry.received_at),
      h("span", { dataset: { kind: env.kind } }, kindLabel(env.kind)),
      `${env.signer} #${env.seq}`,
      h(
        "details",
        {},
        h("summary", {}, bodySummary(env.body) || t("show_body")),
        h("pre", { class: "json" }, JSON.stringify(e.entry, null, 2)),
        h("p", {}, h("span", {}, t("leaf_hash")), " ", h("code", { class: "hash" }, e.leaf_hash)),
      ),
    ];
  });
  const nav = h(
    "nav",
    { class: "pager", "aria-label": t("pages") },
    h("a", { href: `#/entries?start=0`, class: "button secondary", "aria-disabled": start === 0 ? "true" : null }, t("first")),
    h("a", { href: `#/entries?start=${Math.max(0, start - ENTRIES_PAGE)}`, class: "button secondary", id: "entries-prev", "aria-disabled": start === 0 ? "true" : null }, t("previous")),
    h("span", { id: "entries-range" }, t("entries_range", { start: fmtNumber(start), end: fmtNumber(Math.max(start, end - 1)), size: fmtNumber(size) })),
    h("a", { href: `#/entries?start=${Math.min(Math.max(0, size - 1), start + ENTRIES_PAGE)}`, class: "button secondary", id: "entries-next", "aria-disabled": end >= size ? "true" : null }, t("next")),
    h("a", { href: `#/entries?start=${Math.max(0, size - ENTRIES_PAGE)}`, class: "button secondary" }, t("newest")),
  );
  const goInput = h("input", { id: "entries-go", type: "number", min: 0, max: Math.max(0, size - 1), value: start });
  replace(
    main,
    h("h1", {}, t("entries_title")),
    h(
      "form",
      { class: "card filters", onsubmit: (ev) => { ev.preventDefault(); location.hash = `#/entries?start=${goInput.value}`; } },
      h("div", { class: "field" }, h("label", { for: "entries-go" }, t("go_to_index")), goInput),
      h("div", { class: "actions" }, h("button", { type: "submit" }, t("show"))),
    ),
    nav,
    h("section", { class: "card" }, table([t("index"), t("received_at"), t("kind"), t("signer_seq"), t("body")], rows, { id: "entries", numeric: [0] })),
  );
}

/** `#/keys`: signer keys over time (registered, rotated, revoked), by log index. */
export async function keysPage(main) {
  const keys = await getJson("/v1/signers");
  const events = [];
  const bySigner = new Map();
  for (const k of [...keys].sort((a, b) => a.registered_index - b.registered_index)) {
    const earlier = bySigner.get(k.signer) || [];
    events.push({ index: k.registered_index, what: earlier.length ? "rotated" : "registered", k });
    if (k.revoked_index !== null && k.revoked_index !== undefined) events.push({ index: k.revoked_index, what: "revoked", k });
    bySigner.set(k.signer, [...earlier, k]);
  }
  events.sort((a, b) => a.index - b.index);
  replace(
    main,
    h("h1", {}, t("keys_title")),
    h("p", {}, t("keys_explain")),
    h(
      "section",
      { class: "card" },
      h("h2", {}, t("keys_timeline")),
      table(
        [t("index"), t("event"), t("signer"), t("role"), t("key_id"), t("regions")],
        events.map((e) => [
          h("a", { href: `#/entries?start=${e.index}` }, fmtNumber(e.index)),
          h("span", { class: `badge ev-${e.what}` }, t(`key_${e.what}`)),
          e.k.signer,
          tOr(`signer_role_${e.k.role}`, e.k.role),
          h("code", {}, e.k.key_id),
          (e.k.regions || []).join(", "),
        ]),
        { id: "key-events", numeric: [0] },
      ),
    ),
  );
}

/** `#/verify`: drop a bundle file (or choose one): verified here, streamed, with progress. */
export async function verifyPage(main) {
  const input = h("input", { id: "bundle-file", type: "file", accept: ".jsonl,.ndjson,.json,application/x-ndjson" });
  const bar = h("progress", { id: "verify-progress", max: 1, value: 0, "aria-label": t("progress") });
  const progressText = h("span", { id: "verify-progress-text", class: "muted" });
  const out = h("div", { id: "verify-result", class: "check-result", "aria-live": "polite" });
  async function run(file) {
    replace(out, h("p", { class: "muted" }, t("checking_file", { name: file.name })));
    bar.value = 0;
    try {
      const [trust, v] = await Promise.all([trustForChecks(), loadVerifier()]);
      const r = await v.verifyBundle({
        bundle: file,
        logKey: trust.logKey,
        witnesses: trust.witnesses,
        quorum: trust.quorum,
        onProgress: (done, total) => {
          bar.max = total || 1;
          bar.value = done;
          replace(progressText, `${fmtNumber(done)} / ${fmtNumber(total)}`);
        },
      });
      showResult(out, r, { source: trust.source, evidence: true });
    } catch (e) {
      replace(out, h("p", { class: "error", role: "alert" }, t("error_with", { message: e.message })));
    }
  }
  input.addEventListener("change", () => input.files[0] && run(input.files[0]));
  const zone = h(
    "div",
    {
      class: "dropzone",
      id: "dropzone",
      ondragover: (ev) => {
        ev.preventDefault();
        zone.classList.add("over");
      },
      ondragleave: () => zone.classList.remove("over"),
      ondrop: (ev) => {
        ev.preventDefault();
        zone.classList.remove("over");
        const f = ev.dataTransfer?.files?.[0];
        if (f) run(f);
      },
    },
    h("p", {}, t("dropzone_text")),
    h("label", { for: "bundle-file" }, t("choose_file")),
    input,
  );
  replace(
    main,
    h("h1", {}, t("verify_title")),
    h("p", {}, t("verify_explain")),
    h("section", { class: "card" }, zone, h("div", { class: "progress" }, bar, progressText), out),
    trustPanel(),
  );
}
