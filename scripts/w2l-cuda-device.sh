#!/usr/bin/env bash
# Wav2Lip "cuda" backend on the accelerator machine (see shared/REFERENCE.md "Machines").
#   here:  scripts/w2l-cuda-device.sh pack   builds build-cuda/ (CUDA on, --as-needed) and packs
#          the facecast binary, test_wav2lip and their non-system libraries into
#          build-cuda-dev/b.tar.xz (~17 MB; git-ignored), with this script beside it
#   there: run tool, carry ["build-cuda-dev"], command `bash build-cuda-dev/w2l-cuda-device.sh run`
#          (unpacks to <the source dir it was packed from>/build-cuda — the test binaries carry
#          that path for their data — linking that dir to the copied tree; runs the
#          width-16 tests, generates the full-width golden set, checks it on cuda fp32/fp16 and
#          times batch 1/16/128; logs under $OUT)
#   there: `bash build-cuda-dev/w2l-cuda-device.sh bench` (after run): bench model for fp16, bf16
#          and fp32 over the issue's batch sizes (JSON under $OUT), each op's time at batch 16 and
#          256 (W2L_CUDA_TIMING) and an ncu kernel list of one resident fp16 pass at batch 256;
#          then, with WAV2LIP_DIR naming a git-ignored copy of the public Wav2Lip models/ folder,
#          the PyTorch anchors of shared/bench in the same call (eager; torch.compile + graphs)
#   there: run tool, carry ["build-cuda-dev"], command `bash build-cuda-dev/w2l-cuda-device.sh v256`
#          (wav2lip256, LiveTalking's 256x256 network; unpacks like run when run has not been
#          called on this machine; ~6 min): makes a full-width random wav2lip256 checkpoint in
#          LiveTalking's layout (tools/bench_wav2lip256.py make), runs the 256 cases of
#          test_wav2lip and test_w2l_composite on cuda, checks `facecast wav2lip infer` against
#          PyTorch on CUDA (fp32 <= 1e-3, fp16 <= 2e-2; exit status 1 on a failure), then times
#          side by side at batch 1/16/256: `facecast bench model` (fp16, fp32) and PyTorch eager
#          and torch.compile (reduce-overhead) on the same file. Logs and JSON lines under $OUT:
#          v256_test.log, v256_parity.jsonl, v256_fc_{fp16,fp32}.jsonl; then, in a second call to
#          the warm machine (one call would pass the 10-minute limit), `... v256 torch`: PyTorch
#          eager and torch.compile on the same checkpoint, v256_torch_{eager,compile}.jsonl
set -u
# Unpacks build-cuda-dev/b.tar.xz to <the source dir it was packed from>/build-cuda (the test
# binaries carry that path for their data), linking that dir to this tree; sets SRC.
unpack() {
  ROOT=$PWD
  mkdir -p build-cuda-dev/x && tar xJf build-cuda-dev/b.tar.xz -C build-cuda-dev/x
  SRC=$(cat build-cuda-dev/x/SRCDIR)
  [ -e "$SRC" ] || { mkdir -p "$(dirname "$SRC")" && ln -s "$ROOT" "$SRC"; }
  rm -rf "$SRC/build-cuda" && mv build-cuda-dev/x "$SRC/build-cuda"
}
case "${1:-}" in
pack)
  cd "$(dirname "$0")/.."
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXE_LINKER_FLAGS=-Wl,--as-needed >/dev/null &&
    make -C build-cuda -j"$(nproc)" test_wav2lip test_w2l_composite facecast >/dev/null || exit 1
  t=$(mktemp -d)
  PLUGINS=coreelements bash shared/bench/bundle-for-accelerator.sh build-cuda/facecast "$t/b" >/dev/null 2>&1 ||
    bash ../shared/bench/bundle-for-accelerator.sh build-cuda/facecast "$t/b" >/dev/null || exit 1
  cp build-cuda/test_wav2lip build-cuda/test_w2l_composite "$t/b/"
  # test_w2l_composite's photo cases need the default avatar (git-ignored data/, from scripts/deps.sh)
  [ -f data/avatars/default.png ] && mkdir -p "$t/b/data/avatars" && cp data/avatars/default.png "$t/b/data/avatars/"
  for l in $(ldd build-cuda/test_wav2lip | awk '/=> \//{print $3}' | grep -E "dnnl|OpenCL|gomp"); do cp -L "$l" "$t/b/lib/"; done
  pwd >"$t/b/SRCDIR" # the binaries' compiled-in paths point below it
  mkdir -p build-cuda-dev && tar cJf build-cuda-dev/b.tar.xz -C "$t/b" . && cp "$0" build-cuda-dev/
  rm -rf "$t"; ls -la build-cuda-dev ;;
run)
  unpack
  export LD_LIBRARY_PATH=$SRC/build-cuda/lib:/usr/local/cuda/lib64
  B=$SRC/build-cuda F=$SRC/build-cuda/facecast OUT=${OUT:-/tmp}
  nvidia-smi -L
  (PYTHONUNBUFFERED=1 timeout 300 python3 tools/gen_wav2lip_golden.py --width 1 --batch 16 --out /tmp/full >"$OUT/gen.log" 2>&1) &
  (cd $B && ./test_wav2lip 2>&1 | grep -v "broken copy\|does not look like" | tee "$OUT/test.log")
  wait
  (cd $B && W2L_FULL_DIR=/tmp/full ./test_wav2lip 2>&1 | grep -E "full|FAIL" | tee "$OUT/test_full.log")
  for dt in fp32 fp16; do
    $F wav2lip infer --checkpoint /tmp/full/ckpt_zip.pth --mel /tmp/full/mel.npy --faces /tmp/full/faces.npy --out /tmp/o_$dt.npy --device cuda --dtype $dt --repeat 5
    python3 -c "import numpy as np; d=np.abs(np.load('/tmp/o_$dt.npy')-np.load('/tmp/full/out.npy')); print('cli full width $dt max', d.max(), 'mean', d.mean())"
  done
  python3 -c "import numpy as np; [np.save('/tmp/%s128.npy'%k, np.concatenate([np.load('/tmp/full/%s.npy'%k)]*8)) for k in ('mel','faces')]"
  for dt in fp16 fp32; do for b in 1 16 128; do
    $F wav2lip infer --checkpoint /tmp/full/ckpt_zip.pth --mel /tmp/mel128.npy --faces /tmp/faces128.npy --out /tmp/o128.npy --device cuda --dtype $dt --max-batch $b --repeat 5
  done; done ;;
bench)
  SRC=$(readlink -f "$(cat "$(dirname "$0")"/../build-cuda/SRCDIR 2>/dev/null || echo /nonexistent)")
  [ -x "$SRC/build-cuda/facecast" ] || { echo "run '$0 run' first" >&2; exit 2; }
  export LD_LIBRARY_PATH=$SRC/build-cuda/lib:/usr/local/cuda/lib64
  F=$SRC/build-cuda/facecast OUT=${OUT:-/tmp} CK=/tmp/full/ckpt_zip.pth
  for dt in fp16 bf16 fp32; do
    timeout 200 $F bench model --checkpoint $CK --device cuda --dtype $dt --seconds 0.6 --json >"$OUT/fc_$dt.jsonl"
    cat "$OUT/fc_$dt.jsonl"
  done
  [ -z "${SKIP_PROFILE:-}" ] && W2L_CUDA_TIMING=1 timeout 120 $F bench model --checkpoint $CK --device cuda --dtype fp16 --batches 16,256 --seconds 0.2 2>"$OUT/timing_fp16.txt" >/dev/null
  [ -z "${SKIP_PROFILE:-}" ] && cat "$OUT/timing_fp16.txt"
  [ -z "${SKIP_PROFILE:-}" ] && W2L_CUDA_PROFILE=1 timeout 200 ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv \
    $F bench model --checkpoint $CK --device cuda --dtype fp16 --batches 256 --seconds 0.05 >"$OUT/ncu_fp16_256.csv" 2>&1
  [ -z "${SKIP_PROFILE:-}" ] && grep -c gpu__time "$OUT/ncu_fp16_256.csv"
  B=$(ls -d shared/bench ../shared/bench ref/bench 2>/dev/null | head -1)
  if [ -n "${WAV2LIP_DIR:-}" ] && [ -n "$B" ]; then
    (cd "$B" && timeout 150 python3 wav2lip_torch_bench.py >"$OUT/torch_eager.jsonl" 2>"$OUT/torch_eager.err"
     timeout 200 python3 wav2lip_torch_compile_bench.py reduce-overhead 1,16,512 >"$OUT/torch_compile.jsonl" 2>"$OUT/torch_compile.err")
    grep '"float16"' "$OUT/torch_eager.jsonl" | grep -v '"channels_last": false'; cat "$OUT/torch_compile.jsonl"
  fi ;;
v256)
  if [ -f build-cuda-dev/b.tar.xz ] && ! [ -x "$(cat build-cuda/SRCDIR 2>/dev/null)/build-cuda/facecast" ]; then unpack; fi
  SRC=$(readlink -f "$(cat build-cuda/SRCDIR 2>/dev/null || echo /nonexistent)")
  [ -x "$SRC/build-cuda/facecast" ] || { echo "no build-cuda here: carry build-cuda-dev (from '$0 pack')" >&2; exit 2; }
  export LD_LIBRARY_PATH=$SRC/build-cuda/lib:/usr/local/cuda/lib64
  B=$SRC/build-cuda F=$SRC/build-cuda/facecast OUT=${OUT:-.} T=$(mktemp -d)
  export FACECAST_DATA_DIR=$B/data
  # kept in the build folder between calls to a warm machine: "v256 torch" times PyTorch on it
  CK=$B/wav2lip256.pth
  nvidia-smi -L
  if [ "${2:-}" = torch ]; then
    [ -f "$CK" ] || { echo "no $CK: run v256 first on this machine" >&2; exit 2; }
    timeout 150 python3 tools/bench_wav2lip256.py bench --checkpoint "$CK" --batches 1,16,256 --dtypes fp16,fp32 | tee "$OUT/v256_torch_eager.jsonl"
    timeout 300 python3 tools/bench_wav2lip256.py bench --checkpoint "$CK" --batches 1,16,256 --dtypes fp16,fp32 --compile 2>"$OUT/v256_torch_compile.err" | grep compile | tee "$OUT/v256_torch_compile.jsonl"
    exit 0
  fi
  [ -f "$CK" ] || PYTHONUNBUFFERED=1 timeout 240 python3 tools/bench_wav2lip256.py make "$CK" || exit 1
  (cd "$B" && timeout 180 ./test_wav2lip 2>&1 | grep -E "256|FAIL|passed|failed"
   timeout 120 ./test_w2l_composite 2>&1 | grep -E "256|FAIL|passed|failed") | tee "$OUT/v256_test.log"
  timeout 120 python3 tools/bench_wav2lip256.py parity --checkpoint "$CK" --facecast "$F" --dir "$T" | tee "$OUT/v256_parity.jsonl"
  rc=${PIPESTATUS[0]}
  for dt in fp16 fp32; do
    timeout 100 "$F" bench model --checkpoint "$CK" --device cuda --dtype $dt --batches 1,16,256 --seconds 0.6 --json | tee "$OUT/v256_fc_$dt.jsonl"
  done
  rm -rf "$T"
  exit "$rc" ;;
*) echo "usage: $0 pack|run|bench|v256" >&2; exit 2 ;;
esac
