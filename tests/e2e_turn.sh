#!/usr/bin/env bash
# WebRTC behind firewalls: --ice-ports, --ice-tcp, --turn/$TURN_SECRET against Debian's coturn
# (run as this user on free ports, configs in temporary folders), /api/ice-servers and WHEP's
# Link headers (tests/api/ice_test.py); then the page in headless Chromium forced to relayed
# candidates only, through coturn, and with UDP candidates taken out, over ICE-TCP
# (tests/browser/firewall.mjs).
# usage: e2e_turn.sh FACECAST_BINARY BUILD_DIR
set -euo pipefail
bin=$(realpath "${1:?usage: e2e_turn.sh FACECAST_BINARY BUILD_DIR}")
here=$(cd "$(dirname "$0")" && pwd)
command -v turnserver >/dev/null || { echo "e2e_turn: coturn's turnserver is missing (scripts/deps.sh installs it)" >&2; exit 1; }
python3 "$here/api/ice_test.py" "$bin"
cd "$here/browser"
if [ ! -d node_modules/playwright-core ]; then npm ci --no-audit --no-fund; fi
FACECAST_BIN="$bin" node --test --test-timeout=120000 firewall.mjs
