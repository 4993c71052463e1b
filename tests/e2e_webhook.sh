#!/usr/bin/env bash
# Webhooks: signed, retried, attempts in the task (tests/api/webhook_test.py).
# usage: e2e_webhook.sh FACECAST_BINARY BUILD_DIR
exec python3 "$(dirname "$0")/api/webhook_test.py" "$1"
