#!/usr/bin/env bash
# Opacus 1.6 (with torch) against the real service, called by .ci/run: installs the client,
# opacus and pytest into clients/python/.venv-opacus, runs mypy --strict on the integration, its
# tests and its example, starts the release service on a fresh SQLite file, and runs the tests and
# examples/opacus_logistic_regression.py against it.
# PyPI's torch for Linux x86_64 brings the CUDA libraries: measured 2026-11-28, `pip install
# 'opacus==1.6.*'` into a fresh venv took 101 s and 5.5 GB here. Without python3 >= 3.10, PyPI,
# or 8 GB of free disk it says SKIPPED (with the reason) and exits 0; any failure fails it.
# PRIVACY_LEDGER_BIN: a service binary to use instead of building one.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
. clients/python/lib.sh
pick_python
if [ -z "$PY" ]; then
  echo "SKIPPED: the Opacus integration's tests need python3 >= 3.10 with venv and pip"
  exit 0
fi
VENV=clients/python/.venv-opacus
if [ ! -x "$VENV/bin/mypy" ] || ! "$VENV/bin/python" -c 'import opacus, torch' >/dev/null 2>&1; then
  FREE_KB=$(df -Pk "$ROOT/clients/python" | awk 'NR == 2 {print $4}')
  if [ "${FREE_KB:-0}" -lt $((8 * 1024 * 1024)) ]; then
    echo "SKIPPED: the Opacus integration's tests need 8 GB of free disk for torch (have $((FREE_KB / 1024)) MB)"
    exit 0
  fi
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  START=$(date +%s)
  if ! "$VENV/bin/pip" install -q 'opacus==1.6.*' 'mypy==1.13.0' 'pytest==8.3.3'; then
    echo "SKIPPED: cannot install opacus and torch from PyPI"
    rm -rf "$VENV"
    exit 0
  fi
  echo "installed opacus and torch in $(( $(date +%s) - START )) s ($(du -sh "$VENV" | cut -f1))"
fi
"$VENV/bin/pip" install -q --force-reinstall --no-deps ./clients/python
"$VENV/bin/pip" install -q ./clients/python
echo "mypy --strict: the Opacus integration, its tests and its example"
(cd clients/python && "$ROOT/$VENV/bin/mypy" --strict src tests_integrations examples/opacus_logistic_regression.py)

start_service
echo "pytest: Opacus training charged chunk by chunk"
(cd "$WORK" && "$ROOT/$VENV/bin/python" -m pytest -q -rs -p no:cacheprovider -W ignore::UserWarning "$ROOT/clients/python/tests_integrations")
echo "examples/opacus_logistic_regression.py"
OUT=$(cd "$WORK" && "$ROOT/$VENV/bin/python" -W ignore::UserWarning "$ROOT/clients/python/examples/opacus_logistic_regression.py")
echo "$OUT"
# The example's budget fits only part of its steps: it must have stopped at a refusal.
echo "$OUT" | grep -q "^stopped before step" || { echo "the example did not stop at the gate" >&2; exit 1; }
