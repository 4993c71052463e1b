#!/usr/bin/env bash
# `facecast bench serve` with Wav2Lip on the accelerator machine (see shared/REFERENCE.md
# "Machines": no GStreamer, espeak-ng or OpenCV data there, so they travel in a bundle).
# The packing uses the workspace's shared/bench/bundle-for-accelerator.sh (beside this checkout,
# not in it). The bundle records this checkout's path (SRCDIR): the test programs have data
# paths compiled in, so the device recreates that path as a link to its copy.
#   here:  scripts/serve-device.sh pack   builds build-cuda/ (CUDA on) and packs facecast, the
#          GPU test programs (test_wav2lip, test_w2l_composite), their non-system libraries,
#          the GStreamer plugins of the benchmark's pipelines, the Haar cascade, espeak-ng's
#          English data and the default portrait into build-serve-dev/ (git-ignored)
#   there: run tool, carry ["build-serve-dev"], then in one command any of
#          `bash build-serve-dev/serve-device.sh test`   the GPU tests (logs under $OUT)
#          `[SIZE=WxH] [CKPT=random] bash build-serve-dev/serve-device.sh run [SESSIONS]
#          [SOLO_SESSIONS|""] [X264_PRESET]`: makes a full-size checkpoint (once;
#          tools/make_bench_wav2lip.py, or random weights everywhere), then bench serve
#          with cross-session batching and, given SOLO_SESSIONS, with each session batching
#          alone (--solo); JSON, Markdown and SVG under $OUT. DEV=cuda:0,cuda:1 for two GPUs;
#          EXTRA="..." adds bench serve options (e.g. --opus-complexity 1); TAG names the files.
#          X=/tmp/other with a bundle dir of another build (e.g. build-serve-old/) runs that one
#          beside it on the same machine (A/B: machines of this kind differ by up to a third).
#          `[SIZE=WxH] [SECONDS_EACH=10] bash build-serve-dev/serve-device.sh serve256 [SESSIONS]
#          [X264_PRESET]`: the same bench serve (cross-session batching) with the wav2lip256
#          network (256×256 crops, fp16 on the GPU): makes a full-width random checkpoint in
#          LiveTalking's layout first when there is none (tools/bench_wav2lip256.py make; torch
#          on the GPU machine; about a minute), kept in build-serve-ckpt/ (git-ignored, not
#          carried, so a warm machine keeps it across calls and repacks), then SESSIONS (default
#          32,64,128,192) at 512×512 for SECONDS_EACH s each; serve256_<SIZE>_<PRESET>.{json,md,
#          svg} and the checkpoint maker's log under $OUT. DEV, EXTRA and TAG as for run.
#          Fits one 10-minute call: the make is given 200 s, the bench 330 s.
#          `[JOBS=32] [SECONDS_EACH=60] [SLOTS="16 32"] bash build-serve-dev/serve-device.sh bulk`:
#          `facecast bench bulk` with Wav2Lip on the GPU (tools/make_bench_wav2lip.py's
#          checkpoint), JOBS videos of SECONDS_EACH s on each slot count; JSON under $OUT.
#          `bash build-serve-dev/serve-device.sh startup`: the GPU tests twice (an empty cuDNN
#          algorithm cache, then the one it filled) and `facecast bench startup` on the CPU
#          default and with Wav2Lip on the GPU, plus the server's own start-up line; under $OUT.
#          `[BATCHES=1,16,...] [TORCH=""] [PROBE=""] [TIMING=1,16] [AB=W2L_CUDA_TAIL] bash
#          build-serve-dev/serve-device.sh kernel`:
#          facecast's own kernels against cuDNN's (parity at full width, bench model fp16
#          both ways: AB=1 and AB=0, AB the switch, default W2L_CUDA_OWN, i.e. all of them;
#          AB_VALUES="simple persist1 0" other values),
#          PyTorch compiled on the same 96 checkpoint (TORCH="" skips it) and
#          bench/cudnn_convt_probe.cu's transposed convolutions layer by layer (PROBE="" skips
#          it); TIMING: each op's time (eager) at those batches for each AB value
#          (timing_<value>.txt); under $OUT.
#          `[WAYS="default W2L_CUDA_CONVT=1 ..."] [BATCHES=...] [ROUNDS=2] [TIMING=256] [TEST=""]
#          bash build-serve-dev/serve-device.sh kernels`: the own kernels' forms side by side
#          (full-width parity under each way, bench model in turns, per-op times; see the mode).
#          `[BATCHES=1,16] [MODEL_BATCHES=1,16,...] bash build-serve-dev/serve-device.sh profile`:
#          ncu's list of the kernels of one fp16 pass at each batch size and their durations
#          (CSV under $OUT); MODEL_BATCHES: `bench model` fp16 at those sizes first, no profiler.
#          `[ROUNDS=2] [BATCHES=...] [TORCH=1] [V256=1] [STARTUP=1] bash build-serve-dev/serve-device.sh
#          features`: the face-feature cache's parity test, and `bench model` with and without
#          the small-batch retiming from empty caches (see the mode below).
#          `[PRESETS="ultrafast superfast"] [MODEL=wav2lip] [SECONDS_EACH=12] bash
#          build-serve-dev/serve-device.sh still`: `facecast bench still` (the live encoder's
#          two ways on a talking photo: CPU, bits, mouth PSNR) on that machine; still.jsonl.
#          `[FREES="6000 2500 1200 600"] [LATE_FREES="64"] [SESSIONS=192] bash
#          build-serve-dev/serve-device.sh oom`: the GPU made to run out of memory for real: for
#          each FREE (MiB), a PyTorch process takes all of the card's memory but FREE, before
#          bench serve starts (FREES) or LATE_DELAY (10) s after it took the GPU (LATE_FREES,
#          measured over LATE_SECONDS, 30), beside SESSIONS talking sessions; reports batches
#          halved after out-of-memory errors, the batch limit, frames per second, failed
#          productions, sessions still open, the exit status and the commonest log lines.
set -u
X=${X:-/tmp/fcserve}
BUNDLE=$(cd "$(dirname "$0")" && pwd)/b.tar.xz
unpack() { # the bundle under $X; the test programs' compiled-in data paths made to resolve
  SUM=$(sha256sum <"$BUNDLE" | cut -c1-64)
  [ -x $X/facecast ] && [ "$(cat $X/BUNDLE_SUM 2>/dev/null)" = "$SUM" ] && return 0 # a warm machine
  ROOT=$PWD
  rm -rf $X && mkdir -p $X && tar xJf "$BUNDLE" -C $X && echo "$SUM" >$X/BUNDLE_SUM || return 1
  SRC=$(cat $X/SRCDIR)
  [ -e "$SRC" ] || { mkdir -p "$(dirname "$SRC")" && ln -s "$ROOT" "$SRC"; }
  [ -e "$SRC/build-cuda" ] || ln -s $X "$SRC/build-cuda" # FC_BINARY of the tests
  # The device machine has neither; a machine's own data is never replaced (the bundle holds
  # only English: run here by mistake, replacing would take every other voice away)
  mkdir -p /usr/share/opencv4/haarcascades /usr/lib/x86_64-linux-gnu
  for f in $X/share/haar/*.xml; do
    [ -e "/usr/share/opencv4/haarcascades/${f##*/}" ] || cp "$f" /usr/share/opencv4/haarcascades/
  done
  [ -d /usr/lib/x86_64-linux-gnu/espeak-ng-data ] || cp -r $X/share/espeak-ng-data /usr/lib/x86_64-linux-gnu/
}
env_up() {
  export LD_LIBRARY_PATH=$X/lib:/usr/local/cuda/lib64 GST_PLUGIN_SYSTEM_PATH=$X/gst
  export GST_REGISTRY=/tmp/gstreg.bin GST_PLUGIN_SCANNER=/nonexistent
  export FACECAST_DATA_DIR=$X/share/data # the default portrait
}
wait_ready() { # until the server on port $1 answers /healthz (60 s at most)
  python3 -c "
import sys, time, urllib.request
for i in range(600):
    try: urllib.request.urlopen('http://127.0.0.1:%s/healthz' % sys.argv[1], timeout=1); break
    except Exception: time.sleep(0.1)" "$1"
}
case "${1:-}" in
pack)
  cd "$(dirname "$0")/.."
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXE_LINKER_FLAGS=-Wl,--as-needed >/dev/null &&
    make -C build-cuda -j"$(nproc)" facecast test_wav2lip test_w2l_composite >/dev/null || exit 1
  B=build-serve-dev/b
  rm -rf "$B"
  # the bundle script's plugin set, and the AAC encoder and parser of bulk videos' join
  PLUGINS="coreelements app videoconvertscale videorate audioconvert audioresample audiorate x264
    isomp4 opus rtp videoparsersbad flv rtmp2 videotestsrc audiotestsrc audioparsers voaacenc" \
    bash ../shared/bench/bundle-for-accelerator.sh build-cuda/facecast "$B" >/dev/null || exit 1
  cp build-cuda/test_wav2lip build-cuda/test_w2l_composite "$B/"
  /usr/local/cuda/bin/nvcc -O3 -arch=sm_90 -o "$B/cudnn_convt_probe" bench/cudnn_convt_probe.cu \
    bench/convt_subpixel.cu -lcudnn || exit 1
  for l in $(ldd build-cuda/test_wav2lip | awk '/=> \//{print $3}' | grep -E "dnnl|OpenCL|gomp"); do cp -L "$l" "$B/lib/"; done
  pwd >"$B/SRCDIR" # the test programs' compiled-in data paths point below it
  mkdir -p "$B/share/espeak-ng-data" "$B/share/haar"
  E=/usr/lib/x86_64-linux-gnu/espeak-ng-data
  cp -r $E/phon* $E/intonations $E/en_dict $E/lang $E/voices "$B/share/espeak-ng-data/" 2>/dev/null
  cp /usr/share/opencv4/haarcascades/haarcascade_frontalface_default.xml "$B/share/haar/"
  cp /usr/lib/python3/dist-packages/skimage/data/astronaut.png "$B/share/"
  mkdir -p "$B/share/data/avatars" && cp "$B/share/astronaut.png" "$B/share/data/avatars/default.png"
  tar cJf build-serve-dev/b.tar.xz -C "$B" . && rm -rf "$B" && cp "$0" build-serve-dev/
  ls -la build-serve-dev ;;
test)
  unpack || exit 1; env_up; OUT=${OUT:-/tmp}
  nvidia-smi -L
  (cd $X && ./test_w2l_composite 2>&1 | tee "$OUT/test_composite.log")
  (cd $X && ./test_wav2lip 2>&1 | grep -v "broken copy\|does not look like" | tee "$OUT/test_wav2lip.log") | grep -E "^ok|FAIL|cuda" ;;
oom)
  OUT=${OUT:-/tmp}
  unpack || exit 1; env_up
  CK=/tmp/bench-$(sha256sum <tools/make_bench_wav2lip.py | cut -c1-12).pth
  [ -s $CK ] || timeout 100 python3 tools/make_bench_wav2lip.py $CK 2>&1 | tail -2
  nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader
  hog() { # takes all of the card's memory but $1 MiB, and holds it
    rm -f /tmp/hog.ready
    python3 - "$1" <<'PY' &
import sys, time, torch
free = int(sys.argv[1]) << 20
blocks = []
while True:
    f, t = torch.cuda.mem_get_info()
    take = min(f - free, 1 << 30)
    if take < (32 << 20):
        break
    blocks.append(torch.empty(take, dtype=torch.uint8, device="cuda"))
f, t = torch.cuda.mem_get_info()
print(f"hog: holds {sum(b.numel() for b in blocks) >> 20} MiB; {f >> 20} MiB free of {t >> 20}", flush=True)
open("/tmp/hog.ready", "w").close()
time.sleep(3600)
PY
    HOG=$!
    for i in $(seq 120); do [ -e /tmp/hog.ready ] && break; sleep 0.5; done
  }
  report() {
    echo "$1: exit $2; $(grep -o '"final_fps":[^,]*,\|"oom_retries":[^,]*,\|"batch_limit":[^,]*,\|"mean_batch":[^,]*,\|"sessions_alive":[^,]*,\|"production_failures":[^,]*,\|"gpu_mem_peak_mb":[^,]*,' "$3.json" | tr -d '\n')"
    grep -v "Message\|plugin loader\|^$" "$3.err" | sed 's/session [0-9]*/session N/' | sort | uniq -c | sort -rn | head -5
  }
  BENCH="$X/facecast bench serve --model wav2lip --checkpoint $CK --device cuda --avatar $X/share/astronaut.png --preset ultrafast --sessions ${SESSIONS:-192} --json"
  for FREE in ${FREES:-6000 2500 1200 600}; do # memory short before the server starts
    hog $FREE
    timeout 240 $BENCH --seconds 8 >"$OUT/oom_$FREE.json" 2>"$OUT/oom_$FREE.err"
    RC=$?
    kill $HOG; wait $HOG 2>/dev/null
    report "FREE $FREE MiB before the start" $RC "$OUT/oom_$FREE"
  done
  for FREE in ${LATE_FREES:-}; do # memory taken while the server runs
    timeout 240 $BENCH --seconds ${LATE_SECONDS:-30} >"$OUT/late_$FREE.json" 2>"$OUT/late_$FREE.err" &
    BP=$!
    for i in $(seq 240); do nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -q . && break; sleep 0.5; done
    sleep ${LATE_DELAY:-10}
    hog $FREE
    wait $BP
    RC=$?
    kill $HOG; wait $HOG 2>/dev/null
    report "FREE $FREE MiB taken while running" $RC "$OUT/late_$FREE"
  done ;;
run)
  unpack || exit 1; env_up; OUT=${OUT:-/tmp}
  date -u; grep -m1 "model name" /proc/cpuinfo; nproc
  # CKPT=random: random weights everywhere (the mouth becomes noise, which costs the encoder
  # far more than a real one); default: tools/make_bench_wav2lip.py (a face comes out)
  if [ "${CKPT:-bench}" = random ]; then
    CK=/tmp/full/ckpt_zip.pth
    [ -s $CK ] || timeout 100 python3 tools/gen_wav2lip_golden.py --width 1 --batch 1 --out /tmp/full >"$OUT/gen.log" 2>&1
  else
    CK=/tmp/bench-$(sha256sum <tools/make_bench_wav2lip.py | cut -c1-12).pth # remade when the tool changes
    [ -s $CK ] || timeout 100 python3 tools/make_bench_wav2lip.py $CK 2>&1 | tail -2
  fi
  F=$X/facecast AV=$X/share/astronaut.png S=${SIZE:-512x512}
  P=${4:-superfast} TAG=${TAG:-${S}_${4:-superfast}}
  timeout 300 $F bench serve --model wav2lip --checkpoint $CK --device ${DEV:-cuda} --avatar $AV --preset $P \
    --size $S --sessions "${2:-16,32,64,96,128}" --seconds 6 --out "$OUT/serve_cross_$TAG" ${EXTRA:-} 2>&1 | tail -9
  [ -n "${3:-}" ] && timeout 200 $F bench serve --model wav2lip --checkpoint $CK --device ${DEV:-cuda} --avatar $AV \
    --preset $P --size $S --sessions "$3" --seconds 6 --solo --out "$OUT/serve_solo_$TAG" ${EXTRA:-} 2>&1 | tail -7
  date -u ;;
serve256)
  unpack || exit 1; env_up; OUT=${OUT:-/tmp}
  date -u; grep -m1 "model name" /proc/cpuinfo; nproc; nvidia-smi -L
  # remade when the network's definition or the maker changes; beside the carried bundle, not
  # in it (carrying build-serve-dev again replaces that folder on the device)
  CKD=$PWD/build-serve-ckpt
  CK=$CKD/wav2lip256-$(cat tools/bench_wav2lip256.py tools/wav2lip_ref.py | sha256sum | cut -c1-12).pth
  if [ ! -s "$CK" ]; then
    mkdir -p "$CKD" && rm -f "$CKD"/wav2lip256-*.pth
    PYTHONUNBUFFERED=1 timeout 200 python3 tools/bench_wav2lip256.py make "$CK.tmp" >"$OUT/serve256_make.log" 2>&1 &&
      mv "$CK.tmp" "$CK" || { tail -5 "$OUT/serve256_make.log"; rm -f "$CK.tmp"; exit 1; }
    tail -1 "$OUT/serve256_make.log"
  fi
  F=$X/facecast AV=$X/share/astronaut.png S=${SIZE:-512x512}
  P=${3:-superfast} TAG=${TAG:-${S}_${3:-superfast}}
  timeout 330 $F bench serve --model wav2lip --checkpoint "$CK" --device ${DEV:-cuda} --avatar $AV --preset $P \
    --size $S --sessions "${2:-32,64,128,192}" --seconds ${SECONDS_EACH:-10} --out "$OUT/serve256_$TAG" ${EXTRA:-} 2>&1 | tail -9
  rc=${PIPESTATUS[0]}
  date -u
  exit $rc ;;
bulk)
  unpack || exit 1; env_up; OUT=${OUT:-/tmp}
  date -u; grep -m1 "model name" /proc/cpuinfo; nproc; nvidia-smi -L
  CK=/tmp/bench-$(sha256sum <tools/make_bench_wav2lip.py | cut -c1-12).pth
  [ -s $CK ] || timeout 100 python3 tools/make_bench_wav2lip.py $CK 2>&1 | tail -2
  F=$X/facecast AV=$X/share/astronaut.png
  # JOBS jobs of SECONDS_EACH s on each SLOTS count (default 16 and 32), Wav2Lip on the GPU
  for K in ${SLOTS:-16 32}; do
    timeout ${LIMIT:-240} $F bench bulk --model wav2lip --checkpoint $CK --device ${DEV:-cuda} --avatar $AV \
      --jobs ${JOBS:-32} --seconds ${SECONDS_EACH:-60} --slots $K ${EXTRA:-} --json \
      >"$OUT/bulk_${TAG:-w2l}_$K.json" 2>"$OUT/bulk_${TAG:-w2l}_$K.err"
    echo "slots $K: exit $? $(cat "$OUT/bulk_${TAG:-w2l}_$K.json")"; tail -3 "$OUT/bulk_${TAG:-w2l}_$K.err"
  done
  date -u ;;
startup)
  # `facecast bench startup`: the server's cold starts, CPU default and Wav2Lip on the GPU
  # (tools/make_bench_wav2lip.py's checkpoint), the GPU tests run twice before it (an empty
  # cuDNN algorithm cache, then the cache the first run filled: both must pass); under $OUT.
  unpack || exit 1; env_up; OUT=${OUT:-/tmp}
  date -u; nvidia-smi -L
  CK=/tmp/bench-$(sha256sum <tools/make_bench_wav2lip.py | cut -c1-12).pth
  [ -s $CK ] || timeout 100 python3 tools/make_bench_wav2lip.py $CK 2>&1 | tail -2
  rm -rf /tmp/algos
  for pass in search cached; do
    (cd $X && FACECAST_CACHE_DIR=/tmp/algos timeout ${TEST_S:-150} ./test_wav2lip >"$OUT/test_wav2lip_$pass.log" 2>&1)
    echo "test_wav2lip ($pass): exit $? $(grep -c '^ok' "$OUT/test_wav2lip_$pass.log") ok, $(grep -c '^FAIL' "$OUT/test_wav2lip_$pass.log") FAIL"
  done
  ls -la /tmp/algos; head -3 /tmp/algos/*.algos; wc -l /tmp/algos/*.algos
  AV=$X/share/astronaut.png
  timeout 60 $X/facecast bench startup --runs 3 --avatar $AV >"$OUT/startup_cpu.txt" 2>&1
  cat "$OUT/startup_cpu.txt"
  timeout 240 $X/facecast bench startup --runs 3 --avatar $AV --model wav2lip --checkpoint $CK \
    --device ${DEV:-cuda} >"$OUT/startup_cuda.txt" 2>&1
  cat "$OUT/startup_cuda.txt"
  # where a start goes: the server's own line, with an empty cache and then with it
  rm -rf /tmp/algos-fresh
  for pass in empty filled; do
    FACECAST_CACHE_DIR=/tmp/algos-fresh timeout 60 $X/facecast serve --port 18555 --avatar $AV \
      --model wav2lip --checkpoint $CK --device ${DEV:-cuda} >"$OUT/serve_$pass.log" 2>&1 &
    SP=$!
    wait_ready 18555
    echo "$pass: $(grep 'ready in' "$OUT/serve_$pass.log")"; kill $SP; wait $SP 2>/dev/null
  done ;;
kernel)
  # facecast's own first-layer kernel against cuDNN's convolution (W2L_CUDA_OWN=0) on the
  # full-width 96 network: parity (test_wav2lip with W2L_FULL_DIR) and `bench model` fp16 both
  # ways, then PyTorch (torch.compile + CUDA graphs) on the same checkpoint; under $OUT.
  unpack || exit 1; env_up; OUT=${OUT:-/tmp}
  date -u; nvidia-smi -L
  [ -s /tmp/full/ckpt_zip.pth ] || timeout 200 python3 tools/gen_wav2lip_golden.py --width 1 --batch 16 --out /tmp/full >"$OUT/gen.log" 2>&1
  (cd $X && W2L_FULL_DIR=/tmp/full timeout 200 ./test_wav2lip >"$OUT/test_full.log" 2>&1)
  echo "test_wav2lip: exit $?"; grep -E "full width|FAIL|test_cuda" "$OUT/test_full.log"
  for own in ${AB_VALUES:-1 0}; do
    env ${AB:-W2L_CUDA_OWN}=$own timeout 150 $X/facecast bench model --checkpoint /tmp/full/ckpt_zip.pth \
      --device cuda --dtype fp16 --batches ${BATCHES:-1,16,128,256,512} --seconds 0.6 --json >"$OUT/fc_own$own.jsonl"
    echo "own=$own"; cat "$OUT/fc_own$own.jsonl"
  done
  [ -n "${TORCH-1}" ] && W2L_REF_SIZE=96 timeout 240 python3 tools/bench_wav2lip256.py bench \
    --checkpoint /tmp/full/ckpt_zip.pth --batches 1,16,512 --dtypes fp16 --compile >"$OUT/torch.jsonl" 2>"$OUT/torch.err"
  cat "$OUT/torch.jsonl"; tail -3 "$OUT/torch.err"
  # each op's time (eager, CUDA events) at TIMING's batch sizes, the default kernels
  [ -n "${TIMING:-}" ] && for own in ${AB_VALUES:-1 0}; do
    env ${AB:-W2L_CUDA_OWN}=$own W2L_CUDA_TIMING=1 timeout 120 $X/facecast bench model --checkpoint \
      /tmp/full/ckpt_zip.pth --device cuda --dtype fp16 --batches "$TIMING" --seconds 0.2 \
      >/dev/null 2>"$OUT/timing_$own.txt"
  done
  # the transposed convolutions alone: cuDNN's ways and ours, layer by layer (PROBE="" skips)
  [ -n "${PROBE-1}" ] && timeout 200 $X/cudnn_convt_probe 1 16 64 256 512 >"$OUT/probe.txt" 2>&1
  [ -n "${PROBE-1}" ] && grep -v res3x3 "$OUT/probe.txt" | sed 's/| B4.*| C/| C/' ;;
profile)
  # ncu's kernel list of one resident fp16 pass at each of BATCHES (default 1,16): every
  # kernel's duration, run one at a time (--clock-control none), on the full-width 96
  # network; CSV under $OUT. The sum against the graph replay's time is the launch gaps' share.
  unpack || exit 1; env_up; OUT=${OUT:-/tmp}
  [ -s /tmp/full/ckpt_zip.pth ] || timeout 200 python3 tools/gen_wav2lip_golden.py --width 1 --batch 16 --out /tmp/full >"$OUT/gen.log" 2>&1
  [ -n "${MODEL_BATCHES:-}" ] && timeout 120 $X/facecast bench model --checkpoint /tmp/full/ckpt_zip.pth \
    --device cuda --dtype fp16 --batches "$MODEL_BATCHES" --seconds 0.6 --json | tee "$OUT/model.jsonl"
  for b in $(echo "${BATCHES:-1,16}" | tr , ' '); do
    W2L_CUDA_PROFILE=1 timeout 200 ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum \
      --csv $X/facecast bench model --checkpoint /tmp/full/ckpt_zip.pth --device cuda --dtype fp16 --batches $b \
      --seconds 0.2 >"$OUT/ncu_b$b.csv" 2>&1
    echo "batch $b: $(grep -c gpu__time "$OUT/ncu_b$b.csv") kernels; $(grep '"bench":"model"' "$OUT/ncu_b$b.csv" | head -1)"
  done ;;
still)
  # the live encoder's two ways on a talking photo (bench still): x264 for every picture
  # against x264 key frames + fc_h264_still, at each of PRESETS (default ultrafast superfast);
  # MODEL=wav2lip makes the pictures with Wav2Lip on the GPU (tools/make_bench_wav2lip.py's
  # checkpoint) instead of the default lip-sync; JSON lines in $OUT/still.jsonl
  unpack || exit 1; env_up; OUT=${OUT:-/tmp}
  date -u; grep -m1 "model name" /proc/cpuinfo
  M=""
  if [ "${MODEL:-}" = wav2lip ]; then
    CK=/tmp/bench-$(sha256sum <tools/make_bench_wav2lip.py | cut -c1-12).pth
    [ -s $CK ] || timeout 100 python3 tools/make_bench_wav2lip.py $CK 2>&1 | tail -2
    M="--model wav2lip --checkpoint $CK --device cuda"
  fi
  for P in ${PRESETS:-ultrafast superfast}; do
    timeout 120 $X/facecast bench still --avatar $X/share/astronaut.png --preset $P \
      --seconds ${SECONDS_EACH:-12} --runs 3 $M --json | tee -a "$OUT/still.jsonl"
  done ;;
kernels)
  # facecast's own kernels' forms side by side on the full-width 96 network, in one call:
  # the GPU tests (W2L_FULL_DIR; TEST="" skips them) under the first way, then test_cuda_full
  # alone (FC_TEST_ONLY) under each other way: its own-vs-cuDNN parity at full width; then
  # `bench model` fp16 at BATCHES for each way, the ways taking turns for ROUNDS rounds
  # (default 2), and each op's time at TIMING (default 256) for each way; last, one line a way
  # and batch: the best ms per batch of the rounds. WAYS as for search (default "default
  # W2L_CUDA_CONVT=1 W2L_CUDA_CONVT=1+W2L_CUDA_CONVT_FORM=1 W2L_CUDA_TAIL_FORM=2"). Under
  # $OUT: test_<way>.log, model.jsonl, timing_<way>.txt.
  unpack || exit 1; env_up; OUT=${OUT:-/tmp}
  date -u; nvidia-smi -L
  [ -s /tmp/full/ckpt_zip.pth ] || timeout 200 python3 tools/gen_wav2lip_golden.py --width 1 --batch 16 --out /tmp/full >"$OUT/gen.log" 2>&1
  WAYS=${WAYS:-default W2L_CUDA_CONVT=1 W2L_CUDA_CONVT=1+W2L_CUDA_CONVT_FORM=1 W2L_CUDA_TAIL_FORM=2}
  first=1
  for w in $WAYS; do
    [ -z "${TEST-1}" ] && break
    tag=$(echo "$w" | tr -c 'A-Za-z0-9\n' _)
    only=test_cuda_full; [ $first = 1 ] && only=; first=0
    (cd $X && env $(echo "$w" | tr + ' ' | sed 's/^default$//') W2L_FULL_DIR=/tmp/full FC_TEST_ONLY=$only \
      timeout 200 ./test_wav2lip >"$OUT/test_$tag.log" 2>&1)
    echo "$w: test_wav2lip ${only:-(all)} exit $?"; grep -E "^FAIL|check failed|form|kernel vs|own kernels" "$OUT/test_$tag.log"
  done
  for round in $(seq ${ROUNDS:-2}); do
    for w in $WAYS; do
      env $(echo "$w" | tr + ' ' | sed 's/^default$//') timeout 100 $X/facecast bench model \
        --checkpoint /tmp/full/ckpt_zip.pth --device cuda --dtype fp16 \
        --batches ${BATCHES:-1,16,128,256,512} --seconds 0.6 --json | sed "s|^{|{\"way\":\"$w\",|"
    done
  done >"$OUT/model.jsonl"
  for w in $WAYS; do
    tag=$(echo "$w" | tr -c 'A-Za-z0-9\n' _)
    env $(echo "$w" | tr + ' ' | sed 's/^default$//') W2L_CUDA_TIMING=1 timeout 100 $X/facecast bench model \
      --checkpoint /tmp/full/ckpt_zip.pth --device cuda --dtype fp16 --batches ${TIMING:-256} \
      --seconds 0.2 >/dev/null 2>"$OUT/timing_$tag.txt"
    echo "$w:"; grep -E "ours|total" "$OUT/timing_$tag.txt"
  done
  python3 - "$OUT/model.jsonl" <<'PY'
import json, sys
best = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "batch" not in r: continue
    k = (r["way"], r["batch"])
    best[k] = min(best.get(k, 1e9), r["ms_per_batch"])
for (w, b), ms in sorted(best.items(), key=lambda x: (x[0][1], x[0][0])):
    print("%-48s batch %4d %8.4f ms %9.1f frames/s" % (w, b, ms, b * 1000.0 / ms))
PY
  ;;
search)
  # cuDNN's algorithm search from an empty cache, each of WAYS (default "default
  # W2L_CUDA_SEARCH_UPTO=0"): a way is "default" or environment settings joined by '+', e.g.
  # W2L_CUDA_FIND=plain+W2L_CUDA_SEARCH_UPTO=0 (cudnnFind* and every batch size timed, the
  # search before 2026-12-02) or W2L_CUDA_DENSE=0. Each way: a server's start from an
  # empty cache (its own line: the search's seconds by batch size), then `bench model` fp16 at
  # BATCHES with that way's settings and cache, twice, the ways taking turns; then the GPU
  # tests from an empty cache (TEST="" skips them).
  unpack || exit 1; env_up; OUT=${OUT:-/tmp}
  date -u; nvidia-smi -L
  CK=/tmp/bench-$(sha256sum <tools/make_bench_wav2lip.py | cut -c1-12).pth
  [ -s $CK ] || timeout 100 python3 tools/make_bench_wav2lip.py $CK 2>&1 | tail -2
  AV=$X/share/astronaut.png
  WAYS=${WAYS:-default W2L_CUDA_SEARCH_UPTO=0}
  for w in $WAYS; do
    tag=$(echo "$w" | tr -c 'A-Za-z0-9\n' _); rm -rf /tmp/algos-$tag
    env $(echo "$w" | tr + ' ' | sed 's/^default$//') FACECAST_CACHE_DIR=/tmp/algos-$tag timeout 60 \
      $X/facecast serve --port 18555 --avatar $AV --model wav2lip --checkpoint $CK \
      --device ${DEV:-cuda} >"$OUT/serve_$tag.log" 2>&1 &
    SP=$!
    wait_ready 18555
    echo "$w: $(grep 'ready in' "$OUT/serve_$tag.log")"; kill $SP; wait $SP 2>/dev/null
  done
  for round in 1 2; do
    for w in $WAYS; do
      tag=$(echo "$w" | tr -c 'A-Za-z0-9\n' _); echo "$w (round $round):"
      env $(echo "$w" | tr + ' ' | sed 's/^default$//') FACECAST_CACHE_DIR=/tmp/algos-$tag timeout 100 \
        $X/facecast bench model --checkpoint $CK --device cuda --dtype fp16 \
        --batches ${BATCHES:-1,16,32,64,128} --seconds 0.6 --json
    done
  done | tee "$OUT/model.jsonl"
  # the default's cold starts as `bench startup` measures them (the first from an empty cache)
  [ -n "${STARTUP:-}" ] && timeout 120 $X/facecast bench startup \
    --runs 3 --avatar $AV --model wav2lip --checkpoint $CK --device ${DEV:-cuda} 2>&1 | tee "$OUT/startup.txt" | tail -9
  [ -n "${TEST-1}" ] && rm -rf /tmp/algos && (cd $X && FACECAST_CACHE_DIR=/tmp/algos timeout ${TEST_S:-150} ./test_wav2lip >"$OUT/test_wav2lip.log" 2>&1)
  [ -n "${TEST-1}" ] && echo "test_wav2lip: exit $? $(grep -c '^ok' "$OUT/test_wav2lip.log") ok, $(grep -c '^FAIL' "$OUT/test_wav2lip.log") FAIL"
  true ;;
features)
  # The face-feature cache and the small-batch retiming (issue 18), each against its reference
  # in one call: test_w2l_composite (the cache's parity with a model that computes every
  # frame), then ROUNDS (2) rounds of `bench model` fp16 on make_bench_wav2lip's checkpoint at
  # BATCHES, the default and W2L_CUDA_RETIME=0 (cuDNN's own picks) taking turns, each from an empty algorithm
  # cache (its own search: the retiming is about which algorithms a search picks); the
  # `composite` and `kept` columns are the cache off and on. TORCH=1: then `bench model`
  # (the default) and PyTorch (torch.compile + CUDA graphs) on one full-width checkpoint
  # (tools/gen_wav2lip_golden.py's, as the kernel mode) at TORCH_BATCHES. V256=1: then the same bench
  # (default only) on a wav2lip256 checkpoint (tools/bench_wav2lip256.py make, ~1 min, kept in
  # /tmp) at V256_BATCHES; STARTUP=1: `bench startup --runs 3` with Wav2Lip on the GPU.
  unpack || exit 1; env_up; OUT=${OUT:-/tmp}
  date -u; nvidia-smi -L
  if [ -n "${TEST-1}" ]; then
    (cd $X && timeout 200 ./test_w2l_composite >"$OUT/test_composite.log" 2>&1)
    echo "test_w2l_composite: exit $? $(grep -c '^ok' "$OUT/test_composite.log") ok, $(grep -c '^FAIL' "$OUT/test_composite.log") FAIL"
    grep -E "features:|kept features|FAIL" "$OUT/test_composite.log" | sort | uniq -c | sort -rn | head -12
  fi
  CK=/tmp/bench-$(sha256sum <tools/make_bench_wav2lip.py | cut -c1-12).pth
  [ -s $CK ] || timeout 100 python3 tools/make_bench_wav2lip.py $CK 2>&1 | tail -2
  for round in $(seq ${ROUNDS:-2}); do
    for w in default W2L_CUDA_RETIME=0; do
      rm -rf /tmp/algos-f; echo "$w (round $round):"
      env $(echo "$w" | sed 's/^default$//') FACECAST_CACHE_DIR=/tmp/algos-f timeout 150 \
        $X/facecast bench model --checkpoint $CK --device cuda --dtype fp16 \
        --batches ${BATCHES:-1,16,32,128,512} --seconds 0.4 --json
    done
  done | tee "$OUT/model.jsonl" | python3 -c "
import json, sys
for l in sys.stdin:
    if not l.startswith('{'): print(l.strip()); continue
    j = json.loads(l)
    if 'batch' in j: print('%5d model %.4f ms (%.0f/s) composite %.4f (%.0f/s) kept %s' % (j['batch'], j['ms_per_batch'], j['frames_per_s'], j['composite_ms_per_batch'], j['composite_frames_per_s'], '%.4f (%.0f/s)' % (j['kept_ms_per_batch'], j['kept_frames_per_s']) if j['kept_ms_per_batch'] else '-'))"
  if [ -n "${TORCH:-}" ]; then
    [ -s /tmp/full/ckpt_zip.pth ] || timeout 200 python3 tools/gen_wav2lip_golden.py --width 1 --batch 16 --out /tmp/full >"$OUT/gen.log" 2>&1
    FACECAST_CACHE_DIR=/tmp/algos-t timeout 150 $X/facecast bench model --checkpoint /tmp/full/ckpt_zip.pth \
      --device cuda --dtype fp16 --batches ${TORCH_BATCHES:-1,16,512} --seconds 0.6 --json | tee "$OUT/fc_full.jsonl"
    W2L_REF_SIZE=96 timeout 240 python3 tools/bench_wav2lip256.py bench --checkpoint /tmp/full/ckpt_zip.pth \
      --batches ${TORCH_BATCHES:-1,16,512} --dtypes fp16 --compile >"$OUT/torch.jsonl" 2>"$OUT/torch.err"
    cat "$OUT/torch.jsonl"; tail -3 "$OUT/torch.err"
  fi
  if [ -n "${V256:-}" ]; then
    C256=/tmp/w256.pth
    [ -s $C256 ] || PYTHONUNBUFFERED=1 timeout 200 python3 tools/bench_wav2lip256.py make $C256 >"$OUT/make256.log" 2>&1
    timeout 150 $X/facecast bench model --checkpoint $C256 --device cuda --dtype fp16 \
      --batches ${V256_BATCHES:-1,16,256} --seconds 0.4 --json | tee "$OUT/model256.jsonl"
  fi
  [ -n "${STARTUP:-}" ] && timeout 150 $X/facecast bench startup --runs 3 --avatar $X/share/astronaut.png \
    --model wav2lip --checkpoint $CK --device cuda 2>&1 | tee "$OUT/startup.txt" | tail -9
  true ;;
*) echo "usage: $0 pack|test|run|serve256|oom|bulk|startup|kernel|profile|still|search|features" >&2; exit 2 ;;
esac
