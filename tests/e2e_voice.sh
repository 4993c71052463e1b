#!/usr/bin/env bash
# Voices from TTS services against fakes of their wire protocols (tests/api/voice_test.py).
# usage: e2e_voice.sh FACECAST_BINARY BUILD_DIR
exec python3 "$(dirname "$0")/api/voice_test.py" "$1"
