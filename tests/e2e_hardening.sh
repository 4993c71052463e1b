#!/usr/bin/env bash
# `facecast serve` under hostile and long-running traffic (tests/api/hardening_test.py).
# usage: e2e_hardening.sh FACECAST_BINARY BUILD_DIR
exec python3 "$(dirname "$0")/api/hardening_test.py" "$1"
