#!/usr/bin/env bash
# The module layering and file sizes (tests/layers_test.py). usage: e2e_layers.sh BIN BUILD_DIR
exec python3 "$(dirname "$0")/layers_test.py" "$(dirname "$0")/.."
