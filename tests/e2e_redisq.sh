#!/usr/bin/env bash
# Bulk videos over Redis: an API node and two workers, a worker killed mid-job, duplicate
# submissions, Redis restarted mid-run (tests/api/redisq_test.py; needs redis-server).
# usage: e2e_redisq.sh FACECAST_BINARY BUILD_DIR
exec python3 "$(dirname "$0")/api/redisq_test.py" "$1"
