#!/usr/bin/env bash
# The demo's "Try, in another terminal" commands, run as printed, in order, against the demo
# they were printed by (issue #23: every demo command works when first tried). The demo starts
# on a fresh SQLite log; after its agents have sent records for a few seconds, each printed
# command runs in one bash session (`set -euo pipefail`), with `cargo run -q --release --`
# replaced by the debug build of the same binary. Then the artefacts are checked: an invoice
# was issued and its PDF is a PDF, the certificate and the invoice verify offline (PASS), and
# the proofs answered with hashes. Run from anywhere: .ci/demo_commands.sh
set -euo pipefail
cd "$(dirname "$0")/.."

work="$(mktemp -d)"
pid=""
cleanup() {
  if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

cargo build --locked -q --bin gpuledger
bin="${CARGO_TARGET_DIR:-$PWD/target}/debug/gpuledger"
"$bin" demo --fresh --dir "$work/demo" --listen 127.0.0.1:0 >"$work/demo.log" 2>&1 &
pid=$!
for _ in $(seq 1 120); do
  grep -qs '^Ctrl-C stops' "$work/demo.log" && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/demo.log"; echo "demo commands: the demo did not start"; exit 1; }
  sleep 0.5
done
grep -q '^Ctrl-C stops' "$work/demo.log" || { cat "$work/demo.log"; echo "demo commands: no command list"; exit 1; }

# The printed commands: the indented lines after "Try, in another terminal:", except the
# /docs address (a page to open, not a command).
sed -n '/^Try, in another terminal:/,/^Ctrl-C stops/p' "$work/demo.log" \
  | grep -E '^  ' | grep -vE '^  https?://' \
  | sed "s#cargo run -q --release -- #$bin #" >"$work/commands.sh"
echo "demo commands: $(wc -l <"$work/commands.sh") commands"
# Records for a few seconds, so that the period from the start until now has usage.
sleep 15
(
  cd "$work"
  # Each command's output on lines of its own (curl prints JSON without a final newline).
  { echo 'set -euo pipefail'; awk '{print; print "echo"}' commands.sh; } >run.sh
  bash -x run.sh >run.log 2>&1
) || { cat "$work/run.log"; echo "demo commands: a command failed (above)"; exit 1; }

fail() { cat "$work/run.log"; echo "demo commands: $*"; exit 1; }
n="$(sed 's/.*"number":"\([^"]*\)".*/\1/' "$work/invoice.json")"
[[ "$n" == INV-* ]] || fail "no invoice was issued: $(cat "$work/invoice.json")"
[[ "$(head -c 5 "$work/$n.pdf")" == "%PDF-" ]] || fail "$n.pdf is not a PDF"
[[ "$(grep -c '^PASS: ' "$work/run.log")" -ge 2 ]] || fail "the invoice and the certificate did not both verify"
grep -q '"hashes"' "$work/run.log" || fail "the proofs did not answer"
grep -q 'FAIL' "$work/run.log" && fail "a check failed"
echo "demo commands: PASS ($n issued, its PDF, the proofs, the certificate and the invoice verified offline)"
