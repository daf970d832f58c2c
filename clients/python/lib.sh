# Shared by run.sh and integrations.sh (sourced from the repository's root).

# pick_python: sets PY to the first python3 (3.13 down to 3.10) with venv and pip, else empty.
pick_python() {
  PY=
  for v in python3.13 python3.12 python3.11 python3.10 python3; do
    if command -v "$v" >/dev/null 2>&1 && "$v" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 10))' >/dev/null 2>&1; then
      PY=$v
      return
    fi
  done
}

# start_service: starts the release service (PRIVACY_LEDGER_BIN, else built) on a fresh SQLite
# file in a temporary WORK directory removed on exit, and exports PRIVACY_LEDGER_URL and
# PRIVACY_LEDGER_TOKEN (the admin token its first start prints).
start_service() {
  WORK=$(mktemp -d)
  trap 'kill "${PID:-}" 2>/dev/null || true; rm -rf "$WORK"' EXIT
  local bin
  if [ -n "${PRIVACY_LEDGER_BIN:-}" ]; then
    bin=$PRIVACY_LEDGER_BIN
  else
    cargo build --release --quiet
    bin="${CARGO_TARGET_DIR:-target}"/release/privacy-ledger
  fi
  local port
  port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$bin" serve --database-url "sqlite://$WORK/ledger.db" --listen "127.0.0.1:$port" >"$WORK/out" 2>"$WORK/err" &
  PID=$!
  for _ in $(seq 100); do grep -q listening "$WORK/out" 2>/dev/null && break; sleep 0.1; done
  local token
  token=$(grep -o 'pl_[0-9a-f]*' "$WORK/out" | head -1)
  if [ -z "$token" ]; then
    echo "the service did not start:" >&2
    cat "$WORK/out" "$WORK/err" >&2
    exit 1
  fi
  export PRIVACY_LEDGER_URL="http://127.0.0.1:$port" PRIVACY_LEDGER_TOKEN="$token"
}
