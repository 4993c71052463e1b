#!/usr/bin/env bash
# Every test on a fresh Debian 12 machine: install, then build and run the CTest suite under
# AddressSanitizer + UndefinedBehaviorSanitizer, the threaded suites under ThreadSanitizer,
# every fuzzer for a few seconds, and the optimised build's whole suite, whose CTest summary
# closes the output. Tests start what they need themselves (the server, headless
# Chromium).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# The browser suite runs once, in the optimised build: it checks frame rates, which a
# sanitized server on 2 cores cannot be held to (the API suite covers the same server code
# under the sanitizers).
scripts/build.sh build-asan -DFC_SANITIZE=ON
(cd build-asan && ctest --output-on-failure -j2 -E e2e_browser) ||
  { echo "sanitizer build: tests failed"; exit 1; }

# The threaded suites under ThreadSanitizer: the scheduler, streams and renders, bulk video
# shards rendered on several threads (test_bulk_video), live outputs
# (WebRTC, the RTMP push with its server: test_rtmp, e2e_rtmp, and the WHIP push with its endpoint: e2e_whip), a running server's sessions, listener and tasks (the hardening test), its bulk video jobs (the job store, the render slots and the API: test_vstore, e2e_videos; on Redis with workers: test_vstore_redis, e2e_redisq) and its conversations
# voices and ears (the chat, voice and listen tests), and the fleet's registry thread beside its
# main loop (e2e_fleet). GLib's locks are made visible to it (src/core/tsan_glib.h, src/core/tsan.h). The libraries are not built with
# it, so their own memory accesses are not judged (ignore_noninstrumented_modules); GLib's
# slice allocator is bypassed so that memory it recycles is seen as freed and allocated.
scripts/build.sh build-tsan -DFC_TSAN=ON
(cd build-tsan &&
  G_SLICE=always-malloc \
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ignore_noninstrumented_modules=1 suppressions=$PWD/../tests/tsan.supp" \
  ctest --output-on-failure -j2 -R '^(test_sched|test_sync|test_mp4|test_live|test_rtmp|test_lipsync|test_bulk_video|test_vstore|test_vstore_redis|e2e_hardening|e2e_videos|e2e_redisq|e2e_chat|e2e_voice|e2e_listen|e2e_rtmp|e2e_whip|e2e_fleet)$') ||
  { echo "ThreadSanitizer build: tests failed"; exit 1; }

# Every parser under libFuzzer for a few seconds from its kept corpus (scripts/fuzz.sh; the
# long runs are recorded in docs/RELIABILITY.md).
scripts/fuzz.sh 8 || { echo "fuzzing: a target crashed"; exit 1; }

scripts/build.sh build
cd build && ctest --output-on-failure -j2
