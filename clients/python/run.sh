#!/usr/bin/env bash
# Generates a Python client from openapi/openapi.json with openapi-python-client (pinned), starts
# the release service on a fresh SQLite file and runs scenario.py through the client, unmodified.
# Needs python3 with venv and pip, and the PyPI registry; otherwise it says it skipped and exits 0.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "SKIPPED: the generated Python client test needs python3 with venv and pip"
  exit 0
fi
VENV=clients/python/.venv
if [ ! -x "$VENV/bin/openapi-python-client" ]; then
  python3 -m venv "$VENV"
  if ! "$VENV/bin/pip" install -q 'openapi-python-client==0.29.1'; then
    echo "SKIPPED: cannot install openapi-python-client from PyPI"
    exit 0
  fi
fi
WORK=$(mktemp -d)
trap 'kill "${PID:-}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
(cd "$WORK" && "$ROOT/$VENV/bin/openapi-python-client" generate --path "$ROOT/openapi/openapi.json" >/dev/null)
"$VENV/bin/pip" install -q "$WORK"/privacy-ledger-client
cargo build --release --quiet
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"${CARGO_TARGET_DIR:-target}"/release/privacy-ledger serve --database-url "sqlite://$WORK/ledger.db" --listen "127.0.0.1:$PORT" >"$WORK/out" 2>"$WORK/err" &
PID=$!
for _ in $(seq 100); do grep -q listening "$WORK/out" 2>/dev/null && break; sleep 0.1; done
TOKEN=$(grep -o 'pl_[0-9a-f]*' "$WORK/out" | head -1)
"$VENV/bin/python" clients/python/scenario.py "http://127.0.0.1:$PORT" "$TOKEN"
