#!/usr/bin/env bash
# Voice chat: speech into /ws/audio heard, transcribed and answered; /api/asr
# (tests/api/listen_test.py). usage: e2e_listen.sh FACECAST_BINARY BUILD_DIR
exec python3 "$(dirname "$0")/api/listen_test.py" "$1"
