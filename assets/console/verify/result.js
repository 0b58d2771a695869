// The shape every verification answers in (the console's contract):
//   {ok: true, steps, summary} or {ok: false, steps, failure: {reason, item, message}}
// where steps are [{name, ok, detail}] for display and `reason` is one of the stable codes of
// docs/PROTOCOL.md §15 and §16.6, the same `gpuledger verify` reports.

/** A failed check; thrown inside the verifier, turned into the answer by `run`. */
export class Failure extends Error {
  /**
   * @param {string} reason the protocol's reason code
   * @param {string} item what it concerns: `entry 17`, `line 3`, `certificate`, `gpu[0].gpu_seconds`
   * @param {string} message for people
   */
  constructor(reason, item, message) {
    super(`${reason}: ${item}: ${message}`);
    this.name = 'Failure';
    this.reason = reason;
    this.item = item;
    this.message = message;
  }
}

/** The steps of one verification, as they pass or fail. */
export class Steps {
  constructor() {
    this.list = [];
  }

  /** Records a step that passed. */
  pass(name, detail = '') {
    this.list.push({ name, ok: true, detail });
  }

  /**
   * Runs `fn` as the step `name`: records it passed, with `detail(result)` (or the result
   * itself when it is a string), or failed with the failure's message, and rethrows.
   */
  async step(name, fn, detail) {
    try {
      const out = await fn();
      this.pass(name, detail ? detail(out) : typeof out === 'string' ? out : '');
      return out;
    } catch (e) {
      const f = asFailure(e);
      this.list.push({ name, ok: false, detail: `${f.reason}: ${f.item}: ${f.message}` });
      throw f;
    }
  }
}

/** Any error as a Failure: an unexpected exception is the input's fault, `malformed`. */
export function asFailure(e) {
  if (e instanceof Failure) return e;
  return new Failure('malformed', 'input', e && e.message ? e.message : String(e));
}

/** The step a failure belongs to, by its reason, for display. */
function stepOf(reason) {
  if (['checkpoint_signature', 'checkpoint_mismatch'].includes(reason)) return 'checkpoint';
  if (['inclusion_proof', 'not_in_checkpoint'].includes(reason)) return 'inclusion';
  if (['entries_mismatch', 'claim_mismatch'].includes(reason)) return 'claims';
  if (['wrong_tenant', 'outside_period', 'outside_scope'].includes(reason)) return 'records covered';
  if (reason === 'witness_quorum') return 'witness cosignatures';
  if (reason === 'consistency_proof') return 'consistency proof';
  return 'entries';
}

/** Runs a verification body `fn(steps)` and answers in the contract's shape. */
export async function run(fn) {
  const steps = new Steps();
  try {
    const summary = await fn(steps);
    return { ok: true, steps: steps.list, summary: summary ?? null };
  } catch (e) {
    const f = asFailure(e);
    const last = steps.list[steps.list.length - 1];
    if (!last || last.ok) steps.list.push({ name: stepOf(f.reason), ok: false, detail: `${f.reason}: ${f.item}: ${f.message}` });
    return { ok: false, steps: steps.list, failure: { reason: f.reason, item: f.item, message: f.message } };
  }
}
