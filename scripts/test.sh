#!/usr/bin/env bash
# Every test on a fresh Debian 12 machine: install, then build and run the CTest suite twice —
# under AddressSanitizer + UndefinedBehaviorSanitizer, then the optimised build, whose CTest
# summary closes the output.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

scripts/build.sh build-asan -DFC_SANITIZE=ON
(cd build-asan && ctest --output-on-failure -j2) || { echo "sanitizer build: tests failed"; exit 1; }

scripts/build.sh build
cd build && ctest --output-on-failure -j2
