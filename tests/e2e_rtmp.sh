#!/usr/bin/env bash
# The RTMP push transport against Debian's nginx-rtmp, started by the test itself without root
# (tests/api/rtmp_test.py). usage: e2e_rtmp.sh FACECAST_BINARY BUILD_DIR
exec python3 "$(dirname "$0")/api/rtmp_test.py" "$1"
