#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install, build, and serve real-time talking
# sessions on the default avatar: open http://localhost:8010/, press Connect, type a sentence.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
exec ./build/facecast serve --port "${PORT:-8010}"
