#!/usr/bin/env bash
# The HTTP API of `facecast serve`, bad input included (tests/api/api_test.py).
# usage: e2e_api.sh FACECAST_BINARY BUILD_DIR
exec python3 "$(dirname "$0")/api/api_test.py" "$1"
