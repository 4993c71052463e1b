#!/usr/bin/env bash
# The main job on a fresh Debian 12 machine: install, build, and render the demo sentence on the
# default avatar to out/demo.mp4.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
mkdir -p out
./build/facecast render --text "Hello! I am facecast, a talking head that runs in real time." \
  -o out/demo.mp4
