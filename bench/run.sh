#!/usr/bin/env bash
# Benchmark privacy-ledger against dp_accounting 0.6.0 + gdpnum 0.1.2.
#
#   bash bench/run.sh [compare.py options...]
#   e.g. bash bench/run.sh --repeats 5 --json bench/results.json
#
# Creates bench/.venv (if absent) with the pinned Python tools from PyPI, builds
# the release binary with cargo, then runs bench/compare.py with the arguments
# given here. Environment:
#   PYTHON=python3.11   base interpreter for the venv (default: python3)
#   BENCH_SKIP_BUILD=1  do not run cargo (use the binary already built)
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$BENCH_DIR")"
VENV="$BENCH_DIR/.venv"
PY="${PYTHON:-python3}"
REQS=(dp-accounting==0.6.0 gdpnum==0.1.2)

# 1. Python side: a venv with the pinned packages.
if [ ! -x "$VENV/bin/python" ]; then
  echo "==> creating $VENV with $PY" >&2
  "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" - <<'EOF' 2>/dev/null
import sys
from importlib import metadata
want = {'dp-accounting': '0.6.0', 'gdpnum': '0.1.2'}
sys.exit(0 if all(metadata.version(k) == v for k, v in want.items()) else 1)
EOF
then
  echo "==> installing ${REQS[*]} into $VENV" >&2
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    "${REQS[@]}"
fi

# 2. Our side: the release binary.
if [ "${BENCH_SKIP_BUILD:-0}" != "1" ]; then
  echo "==> cargo build --release" >&2
  (cd "$ROOT" && cargo build --release --quiet --bin privacy-ledger)
fi

# 3. The comparison.
cd "$ROOT"
exec "$VENV/bin/python" "$BENCH_DIR/compare.py" \
  --binary "$ROOT/target/release/privacy-ledger" "$@"
