#!/usr/bin/env bash
# Conversation: /human type=chat against a fake OpenAI-compatible LLM (tests/api/chat_test.py).
# usage: e2e_chat.sh FACECAST_BINARY BUILD_DIR
exec python3 "$(dirname "$0")/api/chat_test.py" "$1"
