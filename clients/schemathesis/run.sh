#!/usr/bin/env bash
# Schemathesis (stateful, every check, every phase) against the release service on a fresh SQLite
# ledger, as the spec at /openapi.json describes it. Prints schemathesis's report and the number
# of requests the service counted. Not part of .ci/run (about 5 minutes on 2 cores, and some
# refusals no schema can state — an event too large to account, an unsupported mechanism — are
# reported by its positive-data check; `schemathesis.toml` beside this script says which
# operations may answer 422 to schema-valid data, and why); run it after changing the API:
#
#   bash clients/schemathesis/run.sh            # N=100 examples per operation
#   N=25 bash clients/schemathesis/run.sh       # quicker
#
# Needs python3 with venv and PyPI (else it says SKIPPED). DELETE /v1/tokens/{token_id} runs in a
# second pass with only POST /v1/tokens: in the first, a link from GET /v1/tokens could revoke the
# very token the run uses, and every later request would be a 401.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
N=${N:-100}
SEED=${SEED:-20261123}
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "SKIPPED: schemathesis needs python3 with venv and pip"
  exit 0
fi
VENV=clients/schemathesis/.venv
if [ ! -x "$VENV/bin/schemathesis" ]; then
  python3 -m venv "$VENV"
  if ! "$VENV/bin/pip" install -q 'schemathesis==4.32.5'; then
    echo "SKIPPED: cannot install schemathesis from PyPI"
    exit 0
  fi
fi
cargo build --release --quiet || exit 1
WORK=$(mktemp -d)
trap 'kill "${PID:-}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
BASE=http://127.0.0.1:$PORT
"${CARGO_TARGET_DIR:-target}"/release/privacy-ledger serve --database-url "sqlite://$WORK/ledger.db" \
  --listen "127.0.0.1:$PORT" --rate-limit-per-second 1000000 >"$WORK/out" 2>"$WORK/err" &
PID=$!
for _ in $(seq 100); do grep -q listening "$WORK/out" 2>/dev/null && break; sleep 0.1; done
TOKEN=$(grep -o 'pl_[0-9a-f]*' "$WORK/out" | head -1)
counted() {
  curl -s -H "Authorization: Bearer $TOKEN" "$BASE/metrics" \
    | awk '/^privacy_ledger_http_requests_total\{/ {s+=$NF} END {printf "%d\n", s}'
}
COMMON=(--url "$BASE" -H "Authorization: Bearer $TOKEN" --checks all
        --phases examples,coverage,fuzzing,stateful --max-examples "$N" --continue-on-failure
        --seed "$SEED" --generation-database none --request-timeout 70 --no-color
        # One worker: with two, schemathesis's own heavy compositions queue behind each other
        # and the service sheds them with 503 `overloaded` by design (one heavy computation per
        # core but one). Responses may take up to the service's request timeout (60 s).
        --workers 1 --max-response-time 65)
start=$(date +%s)
"$VENV/bin/schemathesis" --config-file clients/schemathesis/schemathesis.toml run "$BASE/openapi.json" "${COMMON[@]}" --exclude-operation-id revoke_token
rc1=$?
"$VENV/bin/schemathesis" --config-file clients/schemathesis/schemathesis.toml run "$BASE/openapi.json" "${COMMON[@]}" \
  --include-operation-id create_token --include-operation-id revoke_token
rc2=$?
echo "schemathesis exit codes: $rc1 $rc2; $(( $(date +%s) - start )) s; the service counted $(counted) requests"
