#!/usr/bin/env bash
# Side-by-side benchmark: builds privacy-ledger, installs dp-accounting 0.6.0 and gdpnum 0.1.2 into
# bench/.venv (once), and runs bench/compare.py with any arguments given.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x bench/.venv/bin/python ]; then
  python3 -m venv bench/.venv
fi
# (Re)install when the pinned versions are not both there, so a failed install is retried.
if ! bench/.venv/bin/python -c 'import importlib.metadata as m; assert m.version("dp-accounting") == "0.6.0" and m.version("gdpnum") == "0.1.2"' 2>/dev/null; then
  bench/.venv/bin/pip install -q dp-accounting==0.6.0 gdpnum==0.1.2
fi
cargo build --release
exec bench/.venv/bin/python bench/compare.py --python bench/.venv/bin/python "$@"
