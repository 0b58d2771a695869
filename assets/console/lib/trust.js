// What the in-browser checks trust: the log's verifier key (fetched from `GET /v1/log`, or one
// the user pasted), witness keys and a quorum; and the verifier module, loaded only when a
// check runs (assets/console/verify/index.js).

import { h, t, tOr, replace } from "./dom.js";
import { getJson } from "./api.js";

const TRUST_KEY = "gpuledger.console.trust";

/** The saved trust settings: `{logKey, witnesses: [vkey], quorum}` (pasted by the user). */
export function savedTrust() {
  try {
    const v = JSON.parse(localStorage.getItem(TRUST_KEY) || "null");
    return v && typeof v === "object" ? v : { logKey: "", witnesses: [], quorum: 0 };
  } catch {
    return { logKey: "", witnesses: [], quorum: 0 };
  }
}

function saveTrust(v) {
  localStorage.setItem(TRUST_KEY, JSON.stringify(v));
}

/**
 * A signed-note verifier key `<name>+<key id>+<base64 key>` split into its parts, or null:
 * the name holds no `+` or white space, the key id is 8 lower-case hex digits, and the rest
 * is base64, which may itself hold `+` (so the text is split at its first two `+` only).
 */
export function parseKeyText(vkey) {
  const m = /^([^+\s]+)\+([0-9a-f]{8})\+([A-Za-z0-9+/]+={0,2})$/.exec(String(vkey ?? "").trim());
  return m && m[3].length % 4 === 0 ? { name: m[1], keyId: m[2], key: m[3] } : null;
}

/** The key id of a signed-note verifier key `<name>+<hex id>+<base64>`, or null. */
export function keyId(vkey) {
  return parseKeyText(vkey)?.keyId ?? null;
}

/**
 * What a check uses: `{logKey, source: "pasted"|"server", witnesses, quorum}`. A pasted key
 * wins over the server's; a pasted key that is not a verifier key is an error, never a silent
 * fall back to the server's key.
 */
export async function trustForChecks() {
  const saved = savedTrust();
  const witnesses = saved.witnesses || [];
  const quorum = saved.quorum || 0;
  if (saved.logKey) {
    if (!keyId(saved.logKey)) throw new Error(t("trust_bad_saved_key"));
    return { logKey: saved.logKey.trim(), source: "pasted", witnesses, quorum };
  }
  const log = await getJson("/v1/log");
  return { logKey: log.verifier_key, source: "server", witnesses, quorum };
}

let verifier = null;

/** The verifier module, imported on first use; a clear error when it is not installed. */
export async function loadVerifier() {
  if (!verifier) {
    verifier = import("../verify/index.js").catch((e) => {
      verifier = null;
      throw new Error(`verifier module unavailable: ${e.message}`);
    });
  }
  return verifier;
}

/** The panel that shows the key in use and lets the user paste the ones they trust. */
export function trustPanel() {
  const saved = savedTrust();
  const status = h("p", { class: "muted", "aria-live": "polite" });
  const serverKey = h("code", { class: "vkey" }, "…");
  getJson("/v1/log")
    .then((log) => replace(serverKey, `${log.verifier_key} (${t("trust_key_id")}: ${keyId(log.verifier_key) ?? "?"})`))
    .catch(() => replace(serverKey, t("error_generic")));
  const keyInput = h("textarea", { id: "trust-log-key", rows: 2, spellcheck: "false", placeholder: t("trust_paste_placeholder") });
  keyInput.value = saved.logKey || "";
  if (saved.logKey && !keyId(saved.logKey)) replace(status, t("trust_bad_saved_key"));
  const witnessInput = h("textarea", { id: "trust-witnesses", rows: 3, spellcheck: "false", placeholder: t("trust_witnesses_placeholder") });
  witnessInput.value = (saved.witnesses || []).join("\n");
  const quorumInput = h("input", { id: "trust-quorum", type: "number", min: 0, step: 1, value: saved.quorum || 0 });
  const form = h(
    "form",
    {
      class: "trust",
      onsubmit: (ev) => {
        ev.preventDefault();
        const logKey = keyInput.value.trim();
        if (logKey && !keyId(logKey)) {
          replace(status, t("trust_bad_key"));
          return;
        }
        const witnesses = witnessInput.value.split("\n").map((s) => s.trim()).filter(Boolean);
        const quorum = Math.max(0, Math.min(witnesses.length, Number(quorumInput.value) || 0));
        saveTrust({ logKey, witnesses, quorum });
        replace(status, t("trust_saved"));
      },
    },
    h("h3", {}, t("trust_title")),
    h("p", {}, t("trust_explain")),
    h("p", {}, h("strong", {}, t("trust_server_key")), " ", serverKey),
    h("label", { for: "trust-log-key" }, t("trust_paste_label")),
    keyInput,
    h("label", { for: "trust-witnesses" }, t("trust_witnesses_label")),
    witnessInput,
    h("label", { for: "trust-quorum" }, t("trust_quorum_label")),
    quorumInput,
    h("div", { class: "actions" }, h("button", { type: "submit" }, t("save"))),
    status,
  );
  return h("details", { class: "card" }, h("summary", {}, t("trust_summary")), form);
}

/**
 * What a PASS says about witnesses (`summary.witnesses` of the verifier, the shape of
 * `gpuledger verify --json`): none required, so only the log operator vouches that the
 * checkpoint is on the history everybody else sees, and how to require witnesses
 * (`where`: "trust" for the trust settings on the page, "offline" for the offline page's
 * fields); or which witnesses cosigned. `data-witnesses` is "operator_alone" or "cosigned".
 */
export function witnessNote(w, where = "trust") {
  if (!w) return null;
  if (w.operator_alone) {
    return h(
      "p",
      { class: "caveat", dataset: { witnesses: "operator_alone" } },
      t("verdict_operator_alone"),
      " ",
      t(where === "offline" ? "verdict_require_witnesses_offline" : "verdict_require_witnesses"),
    );
  }
  const names = (w.cosigned_by || []).map((c) => c.name);
  return h(
    "p",
    { class: "muted", dataset: { witnesses: "cosigned", cosignedBy: names.join(" ") } },
    t("verdict_cosigned", { found: w.found, required: w.required, names: names.join(", ") }),
  );
}

/**
 * Shows a verifier result `{ok, steps, failure}` in `el`: PASS, or FAIL with the failing item
 * and reason (`data-result`, `data-reason` for tests and scripts), then the steps. A PASS says
 * who vouches for the checkpoint's history (`witnessNote`; `witnessHint` is its `where`).
 */
export function showResult(el, result, { source, evidence = false, servedCode = true, witnessHint = "trust" } = {}) {
  const ok = !!result.ok;
  const f = result.failure || {};
  replace(
    el,
    h(
      "div",
      { class: `verdict ${ok ? "pass" : "fail"}`, role: "status", dataset: { result: ok ? "PASS" : "FAIL" } },
      h("strong", {}, ok ? t("verdict_pass") : t("verdict_fail")),
      ok ? null : h("p", {}, h("span", {}, t("failure_reason")), " ", h("code", { dataset: { reason: f.reason || "" } }, f.reason || "?")),
      ok || !f.item ? null : h("p", {}, h("span", {}, t("failure_item")), " ", h("code", {}, String(f.item))),
      ok || !f.message ? null : h("p", { class: "message" }, String(f.message)),
      ok ? witnessNote(result.summary?.witnesses, witnessHint) : null,
      source === "server" ? h("p", { class: "muted" }, t("trust_server_caveat")) : null,
      evidence ? h("p", { class: "muted", dataset: { notChecked: "" } }, t("verify_not_checked")) : null,
      servedCode ? h("p", { class: "muted" }, t("verify_code_caveat")) : null,
    ),
    result.steps && result.steps.length
      ? h(
          "ol",
          { class: "steps" },
          result.steps.map((s) =>
            h(
              "li",
              { class: s.ok ? "ok" : "bad" },
              h("span", { class: "mark", "aria-hidden": "true" }, s.ok ? "✓" : "✗"),
              " ",
              h("span", {}, s.ok ? t("step_ok") : t("step_failed")),
              " ",
              tOr(`stepname_${String(s.name).replace(/ /g, "_")}`, s.name),
              s.detail ? h("span", { class: "muted" }, ` — ${s.detail}`) : null,
            ),
          ),
        )
      : null,
  );
}
