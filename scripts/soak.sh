#!/usr/bin/env bash
# Soak test of `facecast serve` (a command, not part of CI): real WebRTC peers opening and
# closing sessions in turn plus a steady stream of HTTP requests for CHURN_MIN minutes, and one
# session talking and recorded for TALK_MIN minutes; checks that the process's own memory
# (anonymous RSS, and malloc's memory in use) grows < 5 %, flat fds and threads, and the A/V
# offset at the end of the recording (tests/browser/soak.mjs).
# usage: scripts/soak.sh [CHURN_MIN [TALK_MIN]]     (default 30 and 60, TALK_MIN 0: the churn alone,
#        without the talking session; the report goes to
#        build/soak-report.json, the hour's recording to build/soak-talk.mp4)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
export CHURN_MIN=${1:-30} TALK_MIN=${2:-60}
exec node tests/browser/soak.mjs build/facecast
