// The gpuledger console: a hash-routed single page over the public /v1 API.
//
// Routes are per role; a route the role may not see is "not found", exactly like a missing
// page. Every string comes from the message tables (i18n/en.js, i18n/zh-CN.js).

import { h, t, replace, setLocale, currentLocale, LOCALES } from "./lib/dom.js";
import { ApiError, session, saveSession, clearSession, discoverRole } from "./lib/api.js";
import * as tenant from "./pages/tenant.js";
import * as auditor from "./pages/auditor.js";
import * as admin from "./pages/admin.js";

/** Each role's pages: route name → {title message, render(main, arg, query)}. */
const ROUTES = {
  tenant: {
    usage: { nav: "nav_usage", render: tenant.usagePage },
    invoices: { nav: "nav_invoices", render: tenant.invoicesPage },
    certificates: { nav: "nav_certificates", render: tenant.certificatesPage },
    log: { nav: "nav_log", render: auditor.logPage },
  },
  auditor: {
    log: { nav: "nav_log", render: auditor.logPage },
    entries: { nav: "nav_entries", render: auditor.entriesPage },
    fleet: { nav: "nav_fleet", render: admin.fleetListPage },
    keys: { nav: "nav_keys", render: auditor.keysPage },
    verify: { nav: "nav_verify", render: auditor.verifyPage },
  },
  admin: {
    tenants: { nav: "nav_tenants", render: admin.tenantsPage },
    fleet: { nav: "nav_fleet", render: admin.fleetPage },
    signers: { nav: "nav_signers", render: admin.signersPage },
    tokens: { nav: "nav_tokens", render: admin.tokensPage },
    prices: { nav: "nav_prices", render: admin.pricesPage },
    billing: { nav: "nav_billing", render: admin.billingPage },
    ingest: { nav: "nav_ingest", render: admin.ingestPage },
    witnesses: { nav: "nav_witnesses", render: admin.witnessesPage },
    log: { nav: "nav_log", render: auditor.logPage },
    entries: { nav: "nav_entries", render: auditor.entriesPage },
    verify: { nav: "nav_verify", render: auditor.verifyPage },
  },
};

const HOME = { tenant: "usage", auditor: "log", admin: "tenants" };

/** Parses `#/name/arg?query` into `{name, arg, query}`. */
function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, qs] = raw.split("?");
  const [name, ...rest] = path.split("/");
  return {
    name: name || "",
    arg: rest.length ? decodeURIComponent(rest.join("/")) : null,
    query: new URLSearchParams(qs || ""),
  };
}

const header = document.getElementById("top");
const main = document.getElementById("main");
let renderSerial = 0;

function langSwitch() {
  const select = h(
    "select",
    {
      id: "lang",
      onchange: (ev) => {
        setLocale(ev.target.value);
        render();
      },
    },
    LOCALES.map((l) => h("option", { value: l, selected: l === currentLocale() }, t(`lang_${l}`))),
  );
  return h("div", { class: "lang" }, h("label", { for: "lang" }, t("language")), select);
}

function renderHeader(s, active) {
  const pages = s ? ROUTES[s.role] : {};
  replace(
    header,
    h(
      "div",
      { class: "bar" },
      h("a", { class: "brand", href: s ? `#/${HOME[s.role]}` : "#/signin" }, t("app_name")),
      s
        ? h(
            "nav",
            { "aria-label": t("nav_label") },
            h(
              "ul",
              {},
              Object.entries(pages).map(([name, p]) =>
                h(
                  "li",
                  {},
                  h("a", { href: `#/${name}`, "aria-current": name === active ? "page" : null, dataset: { route: name } }, t(p.nav)),
                ),
              ),
            ),
          )
        : null,
      h(
        "div",
        { class: "who" },
        s
          ? [
              h("span", { class: "role", id: "whoami", dataset: { role: s.role } }, t(`role_${s.role}`), s.tenant ? h("span", {}, ` · ${s.tenant}`) : null),
              h("button", { type: "button", id: "signout", onclick: signOut }, t("sign_out")),
            ]
          : null,
        langSwitch(),
      ),
    ),
  );
}

function signOut() {
  clearSession();
  go("#/signin");
}

/** Shows `hash`: the hashchange renders it, or, when it is already the hash, a render here. */
function go(hash) {
  if (location.hash === hash) render();
  else location.hash = hash;
}

function signInPage() {
  const token = h("input", { id: "token", type: "password", autocomplete: "off", spellcheck: "false", required: true });
  const status = h("p", { class: "error", role: "alert", "aria-live": "assertive" });
  const button = h("button", { type: "submit", id: "signin-submit" }, t("sign_in"));
  const form = h(
    "form",
    {
      class: "card signin",
      onsubmit: async (ev) => {
        ev.preventDefault();
        replace(status);
        button.disabled = true;
        try {
          const tok = token.value.trim();
          const who = await discoverRole(tok);
          saveSession({ token: tok, ...who });
          go(`#/${HOME[who.role]}`);
        } catch (e) {
          replace(status, e instanceof ApiError && e.status === 401 ? t("signin_bad_token") : t("error_with", { message: e.message }));
        } finally {
          button.disabled = false;
        }
      },
    },
    h("h1", {}, t("signin_title")),
    h("p", {}, t("signin_explain")),
    h("label", { for: "token" }, t("token_label")),
    token,
    h("p", { class: "muted" }, t("signin_storage")),
    h("div", { class: "actions" }, button),
    status,
  );
  replace(main, form);
  token.focus();
}

/** Renders the page the hash names. */
export async function render() {
  const serial = ++renderSerial;
  delete main.dataset.ready;
  document.documentElement.lang = currentLocale();
  document.title = String(t("app_name"));
  const s = session();
  const { name, arg, query } = parseHash();
  if (!s) {
    renderHeader(null, "signin");
    if (name !== "signin") history.replaceState(null, "", "#/signin");
    signInPage();
    return;
  }
  const pages = ROUTES[s.role];
  if (!name || name === "signin") {
    history.replaceState(null, "", `#/${HOME[s.role]}`);
    return render();
  }
  renderHeader(s, name);
  const page = pages[name];
  main.replaceChildren();
  if (!page) {
    replace(main, notFound());
    return;
  }
  document.title = `${t(page.nav)} · ${t("app_name")}`;
  try {
    await page.render(main, arg, query, () => serial === renderSerial);
  } catch (e) {
    if (serial !== renderSerial) return;
    if (e instanceof ApiError && e.status === 401) {
      clearSession();
      return render();
    }
    replace(main, e instanceof ApiError && e.status === 404 ? notFound() : errorBox(e));
  }
  if (serial === renderSerial) main.dataset.ready = name;
}

/** The "not found" page (also for another tenant's ids: the API answers 404 for them). */
export function notFound() {
  return h("section", { class: "card", id: "not-found", dataset: { notFound: "" } }, h("h1", {}, t("not_found_title")), h("p", {}, t("not_found_explain")));
}

/** A box for an unexpected error. */
export function errorBox(e) {
  return h("section", { class: "card error", role: "alert" }, h("h1", {}, t("error_title")), h("p", {}, String(e.message || e)));
}

window.addEventListener("hashchange", () => render());

// Re-check a stored token's role on load (a token may have been revoked since).
(async () => {
  setLocale(currentLocale());
  const s = session();
  if (s) {
    try {
      saveSession({ token: s.token, ...(await discoverRole(s.token)) });
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) clearSession();
    }
  }
  render();
})();
