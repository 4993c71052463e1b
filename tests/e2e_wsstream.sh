#!/usr/bin/env bash
# WS /ws/stream, the WebSocket media stream (tests/api/wsstream_test.py).
# usage: e2e_wsstream.sh FACECAST_BINARY BUILD_DIR
exec python3 "$(dirname "$0")/api/wsstream_test.py" "$1"
