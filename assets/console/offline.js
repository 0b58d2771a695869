// The offline check: the console's verifier on files and a key the user supplies, with no
// request to any server. Every path here is relative, so the page works the same from a copy
// of assets/console/ served on the user's own computer (docs/CONSOLE.md, "Checking without
// trusting the server") as from /console/offline.html.

import { h, t, replace, currentLocale, setLocale, LOCALES } from "./lib/dom.js";
import { showResult } from "./lib/trust.js";
import { verifyBundle, verifyCertificate, verifyInvoice } from "./verify/index.js";

function render() {
  setLocale(currentLocale());
  const main = document.getElementById("main");
  const lang = h(
    "select",
    { id: "lang", "aria-label": t("language") },
    LOCALES.map((l) => h("option", { value: l, selected: l === currentLocale() }, t(`lang_${l}`))),
  );
  lang.addEventListener("change", () => {
    setLocale(lang.value);
    render();
  });
  const cert = h("input", { id: "offline-certificate", type: "file", accept: ".json,application/json" });
  const invoice = h("input", { id: "offline-invoice", type: "file", accept: ".json,application/json" });
  const bundle = h("input", { id: "offline-bundle", type: "file", required: true });
  const key = h("textarea", { id: "offline-key", rows: 2, spellcheck: "false", required: true, placeholder: t("trust_paste_placeholder") });
  const witnesses = h("textarea", { id: "offline-witnesses", rows: 2, spellcheck: "false", placeholder: t("trust_witnesses_placeholder") });
  const quorum = h("input", { id: "offline-quorum", type: "number", min: 0, step: 1, value: 0 });
  const progress = h("progress", { id: "offline-progress", max: 1, value: 0, "aria-label": t("progress") });
  const out = h("div", { id: "offline-result", class: "check-result", "aria-live": "polite" });
  const form = h(
    "form",
    {
      class: "card",
      onsubmit: async (ev) => {
        ev.preventDefault();
        replace(out, h("p", { class: "muted" }, t("checking")));
        const w = witnesses.value.split("\n").map((s) => s.trim()).filter(Boolean);
        const args = {
          bundle: bundle.files[0],
          logKey: key.value.trim(),
          witnesses: w,
          quorum: Math.max(0, Math.min(w.length, Number(quorum.value) || 0)),
          onProgress: (done, total) => {
            progress.max = total || 1;
            progress.value = done;
          },
        };
        try {
          if (cert.files[0] && invoice.files[0]) throw new Error(t("offline_one_document"));
          let r;
          if (invoice.files[0]) r = await verifyInvoice({ ...args, invoiceText: await invoice.files[0].text() });
          else if (cert.files[0]) r = await verifyCertificate({ ...args, certificateText: await cert.files[0].text() });
          else r = await verifyBundle(args);
          const evidence = !invoice.files[0];
          showResult(out, r, { source: "pasted", evidence, servedCode: false, witnessHint: "offline" });
        } catch (e) {
          replace(out, h("p", { class: "error", role: "alert" }, t("error_with", { message: e.message })));
        }
      },
    },
    h("label", { for: "offline-certificate" }, t("offline_certificate")),
    cert,
    h("label", { for: "offline-invoice" }, t("offline_invoice")),
    invoice,
    h("label", { for: "offline-bundle" }, t("offline_bundle")),
    bundle,
    h("label", { for: "offline-key" }, t("trust_paste_label_offline")),
    key,
    h("label", { for: "offline-witnesses" }, t("trust_witnesses_label")),
    witnesses,
    h("label", { for: "offline-quorum" }, t("trust_quorum_label")),
    quorum,
    h("div", { class: "actions" }, h("button", { type: "submit", id: "offline-check" }, t("check_in_browser"))),
    progress,
    out,
  );
  replace(
    main,
    h("div", { class: "actions" }, lang),
    h("h1", {}, t("offline_title")),
    h("p", {}, t("offline_explain")),
    form,
  );
  main.dataset.ready = "offline";
}

render();
