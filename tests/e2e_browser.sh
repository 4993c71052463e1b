#!/usr/bin/env bash
# Real-browser tests (tests/browser/*.test.mjs): Debian's chromium, driven by playwright-core,
# against `facecast serve` started by each test file. Usage (CTest):
#   bash tests/e2e_browser.sh FACECAST_BINARY BUILD_DIR
# Installs playwright-core from the lockfile when node_modules lacks it (no browser download:
# the tests launch /usr/bin/chromium), then runs the files one after another (2-core machine).
set -euo pipefail
bin=${1:?usage: e2e_browser.sh FACECAST_BINARY BUILD_DIR}
bin=$(realpath "$bin")
cd "$(dirname "$0")/browser"

for tool in node npm ffmpeg "${CHROMIUM_BIN:-/usr/bin/chromium}"; do
  command -v "$tool" >/dev/null || { echo "e2e_browser: $tool is missing (scripts/deps.sh installs it)" >&2; exit 1; }
done
if [ ! -d node_modules/playwright-core ]; then
  if [ -f package-lock.json ]; then
    npm ci --no-audit --no-fund
  else
    npm install --no-audit --no-fund
  fi
fi

FACECAST_BIN="$bin" node --test --test-concurrency=1 --test-timeout=240000 ./*.test.mjs
