#!/usr/bin/env bash
# The WHIP push transport (--transport rtcpush) against a WHIP endpoint the test starts itself
# (tests/api/whip_receiver.py: webrtcbin answering and decoding), without root
# (tests/api/whip_test.py). usage: e2e_whip.sh FACECAST_BINARY BUILD_DIR
exec python3 "$(dirname "$0")/api/whip_test.py" "$1"
