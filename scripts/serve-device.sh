#!/usr/bin/env bash
# `facecast bench serve` with Wav2Lip on the accelerator machine (see shared/REFERENCE.md
# "Machines": no GStreamer, espeak-ng or OpenCV data there, so they travel in a bundle).
#   here:  scripts/serve-device.sh pack   builds build-cuda/ (CUDA on) and packs facecast, its
#          non-system libraries, the GStreamer plugins of the benchmark's pipelines, the Haar
#          cascade, espeak-ng's English data and the default portrait into build-serve-dev/
#          (git-ignored)
#   there: run tool, carry ["build-serve-dev"], command `bash build-serve-dev/serve-device.sh run
#          [SESSIONS] [SOLO_SESSIONS|""] [X264_PRESET]`: generates a full-size random-weight checkpoint, then runs
#          bench serve with cross-session batching and with each session batching alone
#          (--solo); JSON, Markdown and SVG under $OUT
set -u
case "${1:-}" in
pack)
  cd "$(dirname "$0")/.."
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXE_LINKER_FLAGS=-Wl,--as-needed >/dev/null &&
    make -C build-cuda -j"$(nproc)" facecast >/dev/null || exit 1
  B=build-serve-dev/b
  bash ../shared/bench/bundle-for-accelerator.sh build-cuda/facecast "$B" >/dev/null || exit 1
  mkdir -p "$B/share/espeak-ng-data" "$B/share/haar"
  E=/usr/lib/x86_64-linux-gnu/espeak-ng-data
  cp -r $E/phon* $E/intonations $E/en_dict $E/lang $E/voices "$B/share/espeak-ng-data/" 2>/dev/null
  cp /usr/share/opencv4/haarcascades/haarcascade_frontalface_default.xml "$B/share/haar/"
  cp /usr/lib/python3/dist-packages/skimage/data/astronaut.png "$B/share/"
  tar cJf build-serve-dev/b.tar.xz -C "$B" . && rm -rf "$B" && cp "$0" build-serve-dev/
  ls -la build-serve-dev ;;
run)
  OUT=${OUT:-/tmp}
  X=/tmp/fcserve && rm -rf $X && mkdir -p $X && tar xJf build-serve-dev/b.tar.xz -C $X
  mkdir -p /usr/share/opencv4/haarcascades /usr/lib/x86_64-linux-gnu
  cp $X/share/haar/*.xml /usr/share/opencv4/haarcascades/
  rm -rf /usr/lib/x86_64-linux-gnu/espeak-ng-data && cp -r $X/share/espeak-ng-data /usr/lib/x86_64-linux-gnu/
  export LD_LIBRARY_PATH=$X/lib:/usr/local/cuda/lib64 GST_PLUGIN_SYSTEM_PATH=$X/gst
  export GST_REGISTRY=/tmp/gstreg.bin GST_PLUGIN_SCANNER=/nonexistent
  nvidia-smi -L; date -u
  timeout 100 python3 tools/gen_wav2lip_golden.py --width 1 --batch 1 --out /tmp/full >"$OUT/gen.log" 2>&1
  F=$X/facecast CK=/tmp/full/ckpt_zip.pth AV=$X/share/astronaut.png
  (nvidia-smi dmon -s um -d 1 >"$OUT/dmon.log" 2>&1 &)
  P=${4:-superfast}
  timeout 260 $F bench serve --model wav2lip --checkpoint $CK --device ${DEV:-cuda} --avatar $AV --preset $P \
    --sessions "${2:-16,32,64,96,128}" --seconds 6 --out "$OUT/serve_cross_$P" 2>&1 | tail -9
  [ -n "${3:-}" ] && timeout 170 $F bench serve --model wav2lip --checkpoint $CK --device cuda --avatar $AV \
    --preset $P --sessions "$3" --seconds 6 --solo --out "$OUT/serve_solo_$P" 2>&1 | tail -7
  pkill nvidia-smi; date -u ;;
*) echo "usage: $0 pack|run" >&2; exit 2 ;;
esac
