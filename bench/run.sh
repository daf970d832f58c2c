#!/usr/bin/env bash
# Side-by-side benchmark: builds privacy-ledger and the in-process timer (bench/speed.rs), makes
# bench/.venv with Python 3.13 holding dp-accounting 0.6.0, gdpnum 0.1.2 and opake-accounting
# 0.16.1 (once), and runs bench/compare.py with any arguments given.
set -euo pipefail
cd "$(dirname "$0")/.."

PY313="$HOME/.pyenv/versions/3.13.0/bin/python"
if [ ! -x "$PY313" ]; then
  PY313="$(command -v python3.13 || true)"
fi
if [ -z "$PY313" ] || ! "$PY313" -c 'import sys; assert sys.version_info[:2] == (3, 13)' 2>/dev/null; then
  echo "bench/run.sh: Python 3.13 is needed (opake-accounting 0.16.1 supports 3.11-3.13; the" >&2
  echo "benchmark pins 3.13): install ~/.pyenv/versions/3.13.0 or put python3.13 on PATH" >&2
  exit 1
fi
# A venv made with another Python (an older run of this script) is made again.
if [ -x bench/.venv/bin/python ] &&
   ! bench/.venv/bin/python -c 'import sys; assert sys.version_info[:2] == (3, 13)' 2>/dev/null; then
  echo "bench/.venv is not Python 3.13: making it again"
  rm -rf bench/.venv
fi
if [ ! -x bench/.venv/bin/python ]; then
  "$PY313" -m venv bench/.venv
fi
# (Re)install when a pinned version is not there, so a failed install is retried.
if ! bench/.venv/bin/python -c '
import importlib.metadata as m
pins = {"dp-accounting": "0.6.0", "gdpnum": "0.1.2", "opake-accounting": "0.16.1"}
assert all(m.version(p) == v for p, v in pins.items())' 2>/dev/null; then
  bench/.venv/bin/pip install -q dp-accounting==0.6.0 gdpnum==0.1.2 opake-accounting==0.16.1
fi
cargo build --release --bin privacy-ledger --example speed
exec bench/.venv/bin/python bench/compare.py --python bench/.venv/bin/python "$@"
