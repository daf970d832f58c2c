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
. clients/python/lib.sh
pick_python
if [ -z "$PY" ]; then
  echo "SKIPPED: the Python client's tests need python3 >= 3.10 with venv and pip"
  exit 0
fi
VENV=clients/python/.venv
# The venv (gitignored) is kept between runs; it is remade when a tool is missing.
if [ ! -x "$VENV/bin/openapi-python-client" ] || [ ! -x "$VENV/bin/mypy" ] || [ ! -x "$VENV/bin/pytest" ] \
    || ! "$VENV/bin/python" -c 'import setuptools, wheel' 2>/dev/null; then
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  if ! "$VENV/bin/pip" install -q 'setuptools>=61' wheel 'openapi-python-client==0.29.1' 'mypy==1.13.0' \
      'pytest==8.3.3' 'dp-accounting==0.6.0' 'httpx>=0.25,<1'; then
    rm -rf "$VENV"
    echo "SKIPPED: cannot install the test tools from PyPI"
    exit 0
  fi
  rm -f "$VENV/.pyproject"
fi
# The package as a user installs it, with its extras (dev: pytest, mypy; dp-accounting), whenever
# pyproject.toml changed: the registry was just reachable, so a failure here is the package's.
if ! cmp -s clients/python/pyproject.toml "$VENV/.pyproject"; then
  "$VENV/bin/pip" install -q './clients/python[dev,dp-accounting]'
  cp clients/python/pyproject.toml "$VENV/.pyproject"
fi
# Every run: this tree's package, rebuilt (not editable: what pip builds is what is tested;
# no build isolation, so a cached venv needs no registry).
"$VENV/bin/pip" install -q --force-reinstall --no-deps --no-build-isolation ./clients/python
echo "mypy --strict: the package, its tests and its examples (the Opacus ones: integrations.sh)"
(cd clients/python && "$ROOT/$VENV/bin/mypy" --strict src tests examples/quickstart.py \
  $(ls examples/dp_accounting_*.py 2>/dev/null))

start_service

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
"$VENV/bin/python" clients/python/scenario.py "$PRIVACY_LEDGER_URL" "$PRIVACY_LEDGER_TOKEN"
