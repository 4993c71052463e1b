#!/usr/bin/env bash
# Bulk videos over HTTP (/v1/videos): jobs, shards joined exactly, uploads, idempotency, request
# ids, callbacks, ranges, paging, deletes, retention, keys and rate limits (tests/api/videos_test.py).
# usage: e2e_videos.sh FACECAST_BINARY BUILD_DIR
exec python3 "$(dirname "$0")/api/videos_test.py" "$1"
