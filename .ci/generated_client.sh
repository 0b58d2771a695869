#!/usr/bin/env bash
# A Python client generated from schemas/openapi.json by openapi-python-client (issue #16
# item 1) runs a short scenario (.ci/client_scenario.py) against a live server: the demo (a
# fresh SQLite log with tenants, prices and records arriving) on a free port, with disposable
# admin, auditor and tenant tokens. Fails when the generator fails, when it warns about a part
# of the document it had to leave out other than GPULEDGER_CLIENT_ALLOWED_WARNINGS (default: the
# JSON Lines bundle downloads, a content type it does not generate code for), or when the
# scenario fails.
# Needs `openapi-python-client` 0.29.1, pinned below (pip install openapi-python-client==0.29.1).
# Run from anywhere: .ci/generated_client.sh
set -euo pipefail
cd "$(dirname "$0")/.."

work="$(mktemp -d)"
pid=""
cleanup() {
  if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# The scenario imports the generated names (models titled in the document, api modules per
# tag), which a generator release may spell differently: the pinned version only.
pinned="0.29.1"
version="$(openapi-python-client --version | awk '{print $NF}')"
echo "generated client: openapi-python-client $version"
[[ "$version" == "$pinned" ]] || { echo "generated client: needs openapi-python-client==$pinned (pip install openapi-python-client==$pinned)"; exit 1; }
openapi-python-client generate --path schemas/openapi.json --meta setup \
  --output-path "$work/client" >"$work/generate.log" 2>&1 || { cat "$work/generate.log"; echo "generated client: generation FAILED"; exit 1; }
# Each warning starts with a line "WARNING parsing METHOD /path ..." or "Unable to ...", and
# runs to the next one; a warning is allowed when its text matches the allowed pattern.
allowed="${GPULEDGER_CLIENT_ALLOWED_WARNINGS:-application/x-ndjson}"
python3 - "$work/generate.log" "$allowed" <<'PY' || { cat "$work/generate.log"; echo "generated client: the generator left parts of the document out (above); fix the document"; exit 1; }
import re, sys
text = open(sys.argv[1]).read()
chunks = re.split(r"(?m)^(?=WARNING |Unable to )", text)[1:]
bad = [c for c in chunks if not re.search(sys.argv[2], c)]
for c in bad:
    print("generated client: not allowed:", c.strip().splitlines()[0])
sys.exit(1 if bad else 0)
PY
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --disable-pip-version-check "$work/client"

cargo build --locked -q --bin gpuledger
bin="${CARGO_TARGET_DIR:-$PWD/target}/debug/gpuledger"
"$bin" demo --fresh --dir "$work/demo" --listen 127.0.0.1:0 >"$work/demo.log" 2>&1 &
pid=$!
base=""
for _ in $(seq 1 120); do
  base="$(sed -n 's/^listening on \(http:\/\/[0-9.:]*\).*/\1/p' "$work/demo.log" | head -n 1)"
  [[ -n "$base" ]] && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/demo.log"; echo "generated client: the demo did not start"; exit 1; }
  sleep 0.5
done
[[ -n "$base" ]] || { cat "$work/demo.log"; echo "generated client: the demo did not start"; exit 1; }
# The demo has registered its tenants, signers, leases and prices before it listens; the
# scenario waits for its agents' first records.
db="sqlite://$work/demo/ledger.db"
token() { "$bin" token create --database-url "$db" --label generated-client --expires 1h "$@" 2>/dev/null; }

GPULEDGER_URL="$base" \
GPULEDGER_ADMIN_TOKEN="$(token --role admin)" \
GPULEDGER_AUDITOR_TOKEN="$(token --role auditor)" \
GPULEDGER_TENANT_TOKEN="$(token --role tenant --tenant acme-ai)" \
  "$work/venv/bin/python" .ci/client_scenario.py || { echo "generated client: FAILED; the demo's log follows"; tail -n 30 "$work/demo.log"; exit 1; }
echo "generated client: PASS"
