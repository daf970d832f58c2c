#!/usr/bin/env bash
# The dashboard's end-to-end test in Debian's headless Chromium (tests/browser.rs). Installs
# chromium and chromium-driver with apt when they are missing and this runs as root; where no
# browser can be had it says SKIPPED and succeeds. UPDATE_SCREENSHOTS=1 rewrites docs/screenshots.
set -uo pipefail
cd "$(dirname "$0")/.."
have() { command -v chromedriver >/dev/null 2>&1 && [ -x /usr/bin/chromium ]; }
if ! have && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing chromium and chromium-driver (apt)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; }
fi
if ! have; then
  echo "SKIPPED: the browser test needs /usr/bin/chromium and chromedriver (Debian: apt-get install chromium chromium-driver)"
  exit 0
fi
set -e
cargo test --release --test browser -- --ignored
