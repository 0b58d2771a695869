#!/usr/bin/env bash
# Runs the README's walk-through as written (issue #23): every ```sh block of README.md, in
# order, in one bash session under `set -euo pipefail`, in a temporary directory, so against a
# fresh SQLite log and a live `gpuledger serve`; then checks what it produced: an invoice was
# issued, its PDF is a PDF, its payment was recorded, the certificate verified with both
# offline verifiers, and `verify-log` said PASS.
#
# What is changed in the commands, and only this:
#   - `./target/release/` becomes the debug build directory, `${CARGO_TARGET_DIR:-target}/debug/`
#     (built here first, the same three binaries);
#   - `localhost:8080` and `127.0.0.1:8080` become a free port on 127.0.0.1, so that a server
#     already on 8080 neither breaks the run nor receives its requests, and the session has
#     GPULEDGER_LISTEN=127.0.0.1:<that port>, so that `serve` with no flags (127.0.0.1:8080 by
#     default) listens there;
#   - `verifiers/python/` becomes the checkout's path (the session runs in the temporary
#     directory, the README at the repository's root);
#   - in the blocks marked `<!-- readme-test: postgres -->`, the database name `gpuledger` becomes a
#     fresh one of a unique name (created by the block's own `createdb`, dropped at the end).
#     Those blocks run when PostgreSQL answers at 127.0.0.1:5432 (user postgres); otherwise they
#     are skipped with a line saying so, and with GPULEDGER_REQUIRE_POSTGRES=1 that fails.
# A block marked `<!-- readme-test: skip (why) -->` on the line before it (blank lines between
# allowed) is not run; the README says why next to each, and each is safe to skip:
#   - `cargo build --release` lines: this script builds the same binaries (debug) and runs them;
#   - the demo and the test commands: they serve until stopped or are CI's own steps
#     (.ci/demo_commands.sh runs the demo's commands);
#   - `pip install`: .ci/run installs the Python verifier's packages; this script checks they
#     import and stops with a message if not;
#   - `serve` on PostgreSQL: the same `serve` as the one run, on another database, and it would
#     serve until stopped;
#   - the webhook endpoint: it needs a receiver at a public https address (the ledger refuses
#     others with 422 forbidden_target), which CI has not; tests/webhooks.rs covers deliveries;
#   - the witness commands: a separate service; the demo and its printed commands cover them.
# The session runs in a process group of its own (setsid) under a time limit; on exit, whatever
# it started (the server in the background, an agent) is stopped with SIGTERM (then SIGKILL),
# and the temporary directory and the PostgreSQL database are removed.
# Run from anywhere: .ci/readme.sh   (GPULEDGER_README_KEEP=1 keeps the directory, for reading)
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
t0=$(date +%s)
require_pg="${GPULEDGER_REQUIRE_POSTGRES:-0}"
keep="${GPULEDGER_README_KEEP:-0}"
# The session must not inherit settings that would point the commands elsewhere.
while read -r v; do unset "$v"; done < <(compgen -e | grep '^GPULEDGER_' || true)

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/target}"
case "$CARGO_TARGET_DIR" in /*) ;; *) CARGO_TARGET_DIR="$repo/$CARGO_TARGET_DIR" ;; esac
cargo build --locked -q -p gpuledger -p gpuledger-agent -p gpuledger-verify --bin gpuledger --bin gpuledger-agent --bin gpuledger-verify
bin="$CARGO_TARGET_DIR/debug"

python3 -c 'import nacl, cryptography, rfc8785' 2>/dev/null || {
  echo "readme: the Python verifier's packages are missing: pip install -r verifiers/python/requirements.txt"
  exit 1
}

work="$(mktemp -d)"
pgid=""
pgdb=""
cleanup() {
  local rc=$?
  if [[ -n "$pgid" ]]; then
    kill -TERM -- "-$pgid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 -- "-$pgid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$pgid" 2>/dev/null || true
  fi
  if [[ -n "$pgdb" ]]; then dropdb -h 127.0.0.1 -U postgres --if-exists "$pgdb" 2>/dev/null || true; fi
  if [[ "$keep" == 1 ]]; then echo "readme: kept $work"; else rm -rf "$work"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
run_pg=0
if psql -h 127.0.0.1 -U postgres -d postgres -Atqc 'select 1' >/dev/null 2>&1; then
  run_pg=1
  pgdb="gpuledger_readme_$$_$(date +%s)"
elif [[ "$require_pg" == 1 ]]; then
  echo "readme: PostgreSQL does not answer at 127.0.0.1:5432 and GPULEDGER_REQUIRE_POSTGRES=1"
  exit 1
else
  echo "readme: *** SKIPPED the PostgreSQL blocks *** (no PostgreSQL at 127.0.0.1:5432)"
fi

# The blocks, from "A log of your own" on (the walk-through; the blocks before it, in the quick
# start and "Three binaries", are all marked skip too), each with a line naming it.
awk -v bin="$bin" -v port="$port" -v repo="$repo" -v pgdb="$pgdb" -v run_pg="$run_pg" '
  function subst(l) {
    gsub(/\.\/target\/release\//, bin "/", l)
    gsub(/localhost:8080/, "127.0.0.1:" port, l)
    gsub(/127\.0\.0\.1:8080/, "127.0.0.1:" port, l)
    gsub(/verifiers\/python\//, repo "/verifiers/python/", l)
    if (mode == "postgres") {
      gsub(/127\.0\.0\.1:5432\/gpuledger/, "127.0.0.1:5432/" pgdb, l)
      sub(/createdb -h 127\.0\.0\.1 -U postgres gpuledger$/, "createdb -h 127.0.0.1 -U postgres " pgdb, l)
    }
    return l
  }
  /^<!-- readme-test: skip/     { mark = "skip"; next }
  /^<!-- readme-test: postgres/ { mark = "postgres"; next }
  /^```sh$/ {
    inblock = 1; mode = mark; mark = ""; n++
    if (mode == "postgres" && run_pg != 1) mode = "skip"
    print "echo \"### README block " n " (line " NR ")" (mode == "skip" ? ": skipped" : "") "\" >&2"
    next
  }
  /^```/ && inblock { inblock = 0; next }
  inblock { if (mode != "skip") print subst($0); else print "# skipped: " $0; next }
  /^[^<[:space:]]/ { mark = "" }   # a marker applies to the next block only
' README.md >"$work/walkthrough.sh"

# Every 8080 was replaced: a port the README adds later must not go to another server.
if grep -v '^# skipped' "$work/walkthrough.sh" | grep -q '8080'; then
  grep -n 8080 "$work/walkthrough.sh" | grep -v '# skipped'
  echo "readme: a command uses port 8080 in a form this script does not replace"; exit 1
fi
echo "readme: $(grep -c '^echo "### README block' "$work/walkthrough.sh") blocks, $(grep -c ': skipped" >&2$' "$work/walkthrough.sh") skipped; port $port"

set +e
(
  cd "$work"
  { echo 'set -euo pipefail'; cat walkthrough.sh; } >run.sh
  # Outputs interleaved with the commands (-x), each command's trace on a line of its own.
  GPULEDGER_LISTEN="127.0.0.1:$port" PS4='
+ ' setsid timeout -k 10 240 bash -x run.sh >run.log 2>&1 &
  echo $! >session.pid
  wait $!
)
rc=$?
set -e
pgid="$(cat "$work/session.pid")"

fail() { cat "$work/run.log"; echo; echo "readme: FAIL: $*"; exit 1; }
[[ $rc -eq 0 ]] || fail "the walk-through stopped (exit $rc) at the last command above"

# A problem document (application/problem+json) in any answer means a command was refused.
if grep -qE '"status": ?[45][0-9][0-9]' "$work/run.log"; then
  fail "an answer was an error: $(grep -oE '.{0,80}"status": ?[45][0-9][0-9].{0,120}' "$work/run.log" | head -3)"
fi
n="$(sed -n 's/.*"number":"\(INV-[0-9]*\)".*/\1/p' "$work/invoice.json")"
[[ "$n" == INV-* ]] || fail "no invoice was issued: $(cat "$work/invoice.json")"
[[ "$(head -c 5 "$work/$n.pdf")" == "%PDF-" ]] || fail "$n.pdf is not a PDF"
total="$(sed 's/.*"total":"\([^"]*\)".*/\1/' "$work/invoice.json")"
[[ "$total" =~ ^[0-9]+\.[0-9]{2}$ && "$total" != "0.00" ]] || fail "the invoice's total is not a positive amount: $total"
token="$(sed -n 's/^admin token: *//p' "$work/init.txt")"
account="$(curl -fsS -H "Authorization: Bearer $token" "http://127.0.0.1:$port/v1/invoices/$n/account")" \
  || fail "could not read $n's account"
grep -q "\"paid\":\"$total\"" <<<"$account" || fail "$n's account has no payment of $total: $account"
grep -q '"balance_due":"0.00"' <<<"$account" || fail "$n is not paid: $account"
grep -q '^FAIL' "$work/run.log" && fail "a check said FAIL"
passes="$(grep -c '^PASS' "$work/run.log" || true)"
# verify-log twice, the certificate (both verifiers), the consistency proof twice, the invoice
# and its bundle (Python).
[[ "$passes" -ge 8 ]] || fail "expected 8 PASS lines, found $passes"
echo "readme: PASS ($n of $total CNY issued, its PDF, its payment; verify-log, the certificate with both verifiers, consistency, the invoice: $passes PASS; $(( $(date +%s) - t0 )) s)"
