#!/usr/bin/env bash
# The Python client, tested against the real service (called by .ci/run):
#  1. installs clients/python (the package, with its test tools and dp-accounting) into a venv
#     and runs mypy --strict on its code, its tests and its examples;
#  2. starts the release service on a fresh SQLite file and runs the package's tests against it
#     (PRIVACY_LEDGER_URL / PRIVACY_LEDGER_TOKEN), then examples/quickstart.py — the README's first
#     Python block — unmodified;
#  3. generates a client from openapi/openapi.json with openapi-python-client (pinned) and runs
#     scenario.py through it: the spec is precise enough for a typed client.
# Needs python3 (≥ 3.10) with venv and pip, and the PyPI registry; otherwise it says SKIPPED and
# exits 0. Any failure of mypy, a test or an example fails it. PRIVACY_LEDGER_BIN: a service
# binary to use instead of building one.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
PY=python3
for v in python3.13 python3.12 python3.11 python3.10 python3; do
  if command -v "$v" >/dev/null 2>&1 && "$v" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 10))' >/dev/null 2>&1; then
    PY=$v
    break
  fi
done
if ! "$PY" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 10))' >/dev/null 2>&1; then
  echo "SKIPPED: the Python client's tests need python3 >= 3.10 with venv and pip"
  exit 0
fi
VENV=clients/python/.venv
if [ ! -x "$VENV/bin/openapi-python-client" ] || [ ! -x "$VENV/bin/mypy" ]; then
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  if ! "$VENV/bin/pip" install -q 'openapi-python-client==0.29.1' 'mypy==1.13.0' 'pytest==8.3.3' \
      'dp-accounting==0.6.0'; then
    echo "SKIPPED: cannot install the test tools from PyPI"
    exit 0
  fi
fi
# The package itself, as a user installs it (not editable: what pip builds is what is tested).
"$VENV/bin/pip" install -q --force-reinstall --no-deps ./clients/python
"$VENV/bin/pip" install -q ./clients/python
echo "mypy --strict: the package, its tests and its examples (the Opacus ones: integrations.sh)"
(cd clients/python && "$ROOT/$VENV/bin/mypy" --strict src tests examples/quickstart.py examples/dp_accounting_run.py)

WORK=$(mktemp -d)
trap 'kill "${PID:-}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
if [ -n "${PRIVACY_LEDGER_BIN:-}" ]; then
  BIN=$PRIVACY_LEDGER_BIN
else
  cargo build --release --quiet
  BIN="${CARGO_TARGET_DIR:-target}"/release/privacy-ledger
fi
PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$BIN" serve --database-url "sqlite://$WORK/ledger.db" --listen "127.0.0.1:$PORT" >"$WORK/out" 2>"$WORK/err" &
PID=$!
for _ in $(seq 100); do grep -q listening "$WORK/out" 2>/dev/null && break; sleep 0.1; done
TOKEN=$(grep -o 'pl_[0-9a-f]*' "$WORK/out" | head -1)
if [ -z "$TOKEN" ]; then
  echo "the service did not start:" >&2
  cat "$WORK/out" "$WORK/err" >&2
  exit 1
fi
export PRIVACY_LEDGER_URL="http://127.0.0.1:$PORT" PRIVACY_LEDGER_TOKEN="$TOKEN"

echo "pytest: the client against the service"
# Run from outside the source tree, so the installed package is the one imported.
(cd "$WORK" && "$ROOT/$VENV/bin/python" -m pytest -q -rs -p no:cacheprovider "$ROOT/clients/python/tests")
echo "the README's first Python block (examples/quickstart.py, which mypy checked), unmodified"
"$VENV/bin/python" - "$WORK/readme_block.py" <<'PYEOF'
import re, sys
block = re.search(r"```python\n(.*?)```", open("README.md").read(), re.S)
assert block, "README.md has no ```python block"
open(sys.argv[1], "w").write(block.group(1))
PYEOF
if ! cmp -s "$WORK/readme_block.py" clients/python/examples/quickstart.py; then
  echo "README.md's first Python block differs from clients/python/examples/quickstart.py:" >&2
  diff "$WORK/readme_block.py" clients/python/examples/quickstart.py >&2 || true
  exit 1
fi
(cd "$WORK" && "$ROOT/$VENV/bin/python" readme_block.py)
echo "examples/dp_accounting_run.py: a run declared from a dp_accounting DpEvent"
(cd "$WORK" && "$ROOT/$VENV/bin/python" "$ROOT/clients/python/examples/dp_accounting_run.py")

echo "a client generated from openapi/openapi.json runs the README scenario"
(cd "$WORK" && "$ROOT/$VENV/bin/openapi-python-client" generate --path "$ROOT/openapi/openapi.json" >/dev/null)
"$VENV/bin/pip" install -q "$WORK"/privacy-ledger-client
"$VENV/bin/python" clients/python/scenario.py "$PRIVACY_LEDGER_URL" "$TOKEN"
