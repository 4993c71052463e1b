#!/usr/bin/env bash
# Fuzzes every parser with libFuzzer (clang; ASan + UBSan): WAV, PNG/JPEG, torch checkpoints
# (zip and legacy pickle), safetensors, .npy, the Wav2Lip loader (both networks), its cuDNN
# algorithm cache file, the face cache's records, LiveTalking's
# coords.pkl and frame names, avatar packs, Haar cascades, dlib's shape model, JSON bodies,
# SDP offers, settings files (YAML, .env), Redis replies (RESP2/RESP3), the fleet's node records,
# webhook receivers' Retry-After,
# bulk video requests and plans, bulk shards' H.264 streams, and, through a server in the fuzzer's own process,
# the HTTP routes' bodies, multipart uploads and WebSocket audio (tests/fuzz/README.md).
#
# usage: scripts/fuzz.sh [SECONDS] [TARGET...]     (default: 60 s each, every target)
# Seeds come from tests/fuzz/corpus/TARGET (never written); what the fuzzer finds goes to
# build-fuzz/fuzz-work/TARGET. A crash leaves build-fuzz/fuzz-crash/TARGET-crash-* and a log in
# build-fuzz/fuzz-logs/TARGET.log; the script then exits 1. Prints executions per target.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
all=(checkpoint safetensors npy w2l algocache facecache ltcoords ltframes wav image pack haar landmarks json sdp llm voice asr config resp webhook videospec h264au h264still fleet http multipart ws)
targets=("$@")
((${#targets[@]})) || targets=("${all[@]}")

dir=build-fuzz
CC=clang cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFC_FUZZ=ON >/dev/null
cmake --build "$dir" -j"$(nproc)" >/dev/null
mkdir -p "$dir/fuzz-logs" "$dir/fuzz-crash"

max_len() {
  case $1 in
    pack) echo 65536 ;;
    w2l) echo 131072 ;; # whole networks of two channels a layer: mostly key names
    checkpoint | safetensors | npy) echo 20000 ;;
    haar | http | multipart | ws | image) echo 16384 ;;
    *) echo 4096 ;;
  esac
}

failed=0
printf '%-12s %12s %9s  %s\n' target executions "exec/s" result
for t in "${targets[@]}"; do
  bin="$dir/fuzz_$t"
  [ -x "$bin" ] || { echo "fuzz: no target '$t' (one of: ${all[*]})"; exit 2; }
  work="$dir/fuzz-work/$t"
  mkdir -p "$work"
  leaks=1
  case $t in http | multipart | ws) leaks=0 ;; esac # a whole server: GStreamer keeps caches
  log="$dir/fuzz-logs/$t.log"
  rc=0
  ASAN_OPTIONS="detect_leaks=$leaks:abort_on_error=1:allocator_may_return_null=1" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
  FACECAST_DATA_DIR="$PWD/$dir/fuzz-data" \
    "$bin" "$work" "tests/fuzz/corpus/$t" -max_total_time="$secs" -max_len="$(max_len "$t")" \
    -rss_limit_mb=4096 -timeout=60 -print_final_stats=1 -artifact_prefix="$dir/fuzz-crash/$t-" \
    >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  if ((rc)); then
    failed=1
    printf '%-12s %12s %9s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "FAILED (rc $rc, see $log)"
    grep -m5 -E "ERROR|SUMMARY|Trap|deadly" "$log" | sed 's/^/    /' || true
  else
    printf '%-12s %12s %9s  %s\n' "$t" "${execs:-?}" "${rate:-?}" "0 crashes"
  fi
done
exit $failed
