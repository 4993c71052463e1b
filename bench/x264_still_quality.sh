#!/bin/bash
# Live x264 rate control on a talking photo: the capped constant quality that moving avatars get
# (CRF 23, 1500 kbit/s VBV) against constant quantizers, with the live output's other settings
# (ultrafast unless PRESET is set, zerolatency, one thread, key frame every 2 s, no trellis,
# constrained baseline). For each: bits, encoder user time, Y-PSNR whole and in the moving
# box. Needs build/facecast, gst-launch-1.0 and cc.
#
#   bash bench/x264_still_quality.sh [AVATAR_IMAGE]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${PRESET:-ultrafast}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -o "$tmp/psnr" bench/psnr_i420.c -lm
avatar=()
[ $# -ge 1 ] && avatar=(--avatar "$1")
build/facecast render "${avatar[@]}" -o "$tmp/clip.mp4" --text "Hello there. This is a longer \
piece of speech, so that the mouth moves for a good while and the encoder settings can be \
compared on a real talking head rendered by the engine itself. One two three four five six." >/dev/null 2>&1
gst-launch-1.0 -q filesrc location="$tmp/clip.mp4" ! qtdemux ! h264parse ! avdec_h264 ! \
  videoconvert ! video/x-raw,format=I420 ! filesink location="$tmp/src.i420"
read -r w h < <(gst-launch-1.0 -v filesrc location="$tmp/clip.mp4" ! qtdemux ! h264parse ! \
  avdec_h264 ! fakesink 2>&1 | grep -o 'width=(int)[0-9]*, height=(int)[0-9]*' | head -1 |
  sed 's/[^0-9 ]//g; s/  */ /g')
frames=$(( $(stat -c %s "$tmp/src.i420") / (w * h * 3 / 2) ))
echo "source: ${w}x${h}, $frames frames, x264 $preset"
run() { # tag, x264enc properties...
  local tag=$1 f=$tmp/enc; shift
  TIMEFORMAT=%U
  local user
  user=$( { time gst-launch-1.0 -q filesrc location="$tmp/src.i420" blocksize=$((w * h * 3 / 2)) ! \
    rawvideoparse width="$w" height="$h" format=i420 framerate=25/1 ! \
    x264enc speed-preset="$preset" tune=zerolatency threads=1 key-int-max=50 trellis=false "$@" ! \
    video/x-h264,profile=constrained-baseline,stream-format=byte-stream ! h264parse ! filesink location="$f.h264" \
    ; } 2>&1 )
  gst-launch-1.0 -q filesrc location="$f.h264" ! h264parse ! avdec_h264 ! videoconvert ! \
    video/x-raw,format=I420 ! filesink location="$f.i420"
  local kbps=$(( $(stat -c %s "$f.h264") * 8 * 25 / frames / 1000 ))
  printf '%-26s %5d kbit/s  run %ss user  %s\n' "$tag" "$kbps" "$user" \
    "$("$tmp/psnr" "$w" "$h" "$tmp/src.i420" "$f.i420")"
  rm -f "$f.i420" "$f.h264"
}
run "CRF 23, VBV 1500 kbit/s" pass=qual quantizer=23 bitrate=1500
for qp in 18 20 22 23; do run "QP $qp" pass=quant quantizer=$qp; done
