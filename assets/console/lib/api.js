// The console's only way to the server: the public /v1 API with the user's bearer token.

const SESSION_KEY = "gpuledger.console.session";

/** An answer that was not 2xx: its status and its problem+json body (when it has one). */
export class ApiError extends Error {
  constructor(status, problem) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || null;
  }
}

/** The signed-in session, `{token, role, tenant}`, from sessionStorage (or null). */
export function session() {
  try {
    return JSON.parse(sessionStorage.getItem(SESSION_KEY) || "null");
  } catch {
    return null;
  }
}

/** Keeps the session in sessionStorage (gone when the tab closes). */
export function saveSession(s) {
  sessionStorage.setItem(SESSION_KEY, JSON.stringify(s));
}

/** Forgets the session. */
export function clearSession() {
  sessionStorage.removeItem(SESSION_KEY);
}

async function request(method, path, { token, body, accept } = {}) {
  const headers = {};
  const tok = token ?? session()?.token;
  if (tok) headers.Authorization = `Bearer ${tok}`;
  if (accept) headers.Accept = accept;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: "no-store",
    credentials: "omit",
  });
  if (!res.ok) {
    let problem = null;
    try {
      problem = await res.json();
    } catch {
      /* not JSON */
    }
    throw new ApiError(res.status, problem);
  }
  return res;
}

/** GET `path` as JSON. */
export async function getJson(path, opts) {
  return (await request("GET", path, opts)).json();
}

/** GET `path` as text. */
export async function getText(path, opts) {
  return (await request("GET", path, opts)).text();
}

/** GET `path` as a Blob. */
export async function getBlob(path, opts) {
  return (await request("GET", path, opts)).blob();
}

/** POST `body` as JSON to `path`; the answer as JSON (or null when it has none). */
export async function postJson(path, body, opts) {
  const res = await request("POST", path, { ...opts, body });
  const text = await res.text();
  return text ? JSON.parse(text) : null;
}

/** PUT `body` as JSON to `path`; the answer as JSON (or null when it has none). */
export async function putJson(path, body, opts) {
  const res = await request("PUT", path, { ...opts, body });
  const text = await res.text();
  return text ? JSON.parse(text) : null;
}

/** DELETE `path`. */
export async function del(path, opts) {
  await request("DELETE", path, opts);
}

/** Saves what `path` answers as a file named `filename` (a `blob:` link the page clicks). */
export async function download(path, filename) {
  const blob = await getBlob(path);
  const url = URL.createObjectURL(blob);
  const a = document.createElement("a");
  a.href = url;
  a.download = filename;
  a.hidden = true;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

/**
 * `GET /v1/prepayments` (docs/PROTOCOL.md §5.20, docs/RATING.md "Prepaid balances"): a
 * tenant's prepaid lots, what each invoice drew from them, and its position per currency,
 * `{log_size, as_of, positions: [{currency, purchased, granted, drawn, expired, available}],
 * prepayments: [{index, reference, source, currency, amount, expires_at?, logged_at, drawn,
 * remaining, expired, draws: [{invoice, amount}]}]}`. A tenant token reads its own; an admin
 * (or auditor) names the `tenant` (absent: every tenant's). `size`: as of that log size
 * (absent: the head). null where the server has no such view (404).
 */
export async function getPrepayments({ tenant, size, token } = {}) {
  const params = new URLSearchParams();
  if (tenant) params.set("tenant", tenant);
  if (size !== undefined && size !== null) params.set("size", String(size));
  const q = params.toString() ? `?${params}` : "";
  try {
    return await getJson(`/v1/prepayments${q}`, { token });
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return null;
    throw e;
  }
}

/**
 * Which role a token has, through the public API alone: `GET /v1/witnesses` is for admins and
 * auditors (a tenant token gets 403); `GET /v1/tokens` is for admins; a tenant's own id is in
 * its `GET /v1/balance` answer. A token the server does not know is a 401 (thrown).
 */
export async function discoverRole(token) {
  try {
    await getJson("/v1/witnesses", { token });
  } catch (e) {
    if (e instanceof ApiError && e.status === 403) {
      const b = await getJson("/v1/balance", { token });
      return { role: "tenant", tenant: b.tenant };
    }
    throw e;
  }
  try {
    await getJson("/v1/tokens", { token });
    return { role: "admin", tenant: null };
  } catch (e) {
    if (e instanceof ApiError && e.status === 403) return { role: "auditor", tenant: null };
    throw e;
  }
}

/** Runs `fn` over `items` with at most `limit` at a time; the results in order. */
export async function mapLimited(items, limit, fn) {
  const out = new Array(items.length);
  let next = 0;
  async function worker() {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i], i);
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}
