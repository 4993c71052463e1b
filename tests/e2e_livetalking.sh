#!/usr/bin/env bash
# A LiveTalking user's settings, events, admin and avatar APIs and CORS (tests/api/lt_test.py).
# usage: e2e_livetalking.sh FACECAST_BINARY BUILD_DIR
exec python3 "$(dirname "$0")/api/lt_test.py" "$1"
