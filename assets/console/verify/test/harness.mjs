// The small test harness of the console verifier's Node tests (run.mjs, contracts.mjs): named
// tests that run in order, their tally, and two assertions.

/** How many tests passed, and the names of those that failed. */
export const results = { passed: 0, failures: [] };

/** Runs `fn` as the test `name`, printing `ok` or `FAIL` with the first lines of the error. */
export async function test(name, fn) {
  try {
    await fn();
    results.passed++;
    console.log(`ok   ${name}`);
  } catch (e) {
    results.failures.push(name);
    console.log(`FAIL ${name}\n     ${e && e.stack ? e.stack.split('\n').slice(0, 3).join('\n     ') : e}`);
  }
}

export function assert(cond, message) {
  if (!cond) throw new Error(message);
}

/** `actual` and `expected` have the same JSON. */
export function eq(actual, expected, what) {
  const a = JSON.stringify(actual);
  const b = JSON.stringify(expected);
  if (a !== b) throw new Error(`${what}: expected ${b}, got ${a}`);
}
