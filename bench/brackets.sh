#!/usr/bin/env bash
# Certified brackets side by side with prv_accountant: builds privacy-ledger, installs
# prv-accountant 0.2.0 into bench/.venv (once), and runs bench/brackets.py with any arguments given
# (e.g. --baseline path/to/an/upper-only/build).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x bench/.venv/bin/python ]; then
  python3 -m venv bench/.venv
fi
if ! bench/.venv/bin/python -c 'import importlib.metadata as m; assert m.version("prv-accountant") == "0.2.0"' 2>/dev/null; then
  bench/.venv/bin/pip install -q prv-accountant==0.2.0
fi
cargo build --release
exec bench/.venv/bin/python bench/brackets.py --python bench/.venv/bin/python "$@"
