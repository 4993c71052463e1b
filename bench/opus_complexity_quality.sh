#!/bin/bash
# Live Opus settings (48 kbit/s, 40 ms frames, 16 kHz mono; audio type restricted-lowdelay,
# i.e. CELT only, as the live outputs) at several complexities on the engine's own speech:
# segmental SNR of the decoded sound against the input (20 ms segments above a level floor)
# and the encoder's user time. A waveform measure, not a listening test. AUDIO_TYPE=voice (SILK
# and hybrid, the live default before 2026-12-02) or generic compares the other modes.
# Needs build/facecast, gst-launch-1.0 and python3.
#
#   [AUDIO_TYPE=voice|generic|restricted-lowdelay] [BITRATE=32000] bash bench/opus_complexity_quality.sh [COMPLEXITY...]
#   (default: 1 2 3 5 10)
set -euo pipefail
cd "$(dirname "$0")/.."
levels=("$@")
[ ${#levels[@]} -gt 0 ] || levels=(1 2 3 5 10)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# espeak-ng through the engine (its MP4's AAC track at 16 kHz: the input every level gets).
build/facecast render -o "$tmp/clip.mp4" --text "Hello there. This is a longer piece of speech, \
so that the voice carries on for a good while and the encoder settings can be compared on the \
engine's own voice. One two three four five six seven eight nine ten." >/dev/null 2>&1
gst-launch-1.0 -q filesrc location="$tmp/clip.mp4" ! qtdemux ! aacparse ! avdec_aac ! \
  audioconvert ! audioresample ! audio/x-raw,rate=16000,channels=1,format=S16LE ! wavenc ! \
  filesink location="$tmp/in.wav"
for c in "${levels[@]}"; do
  TIMEFORMAT=%U
  user=$( { time gst-launch-1.0 -q filesrc location="$tmp/in.wav" ! wavparse ! \
    opusenc bitrate="${BITRATE:-48000}" complexity="$c" frame-size=40 audio-type="${AUDIO_TYPE:-restricted-lowdelay}" ! oggmux ! \
    filesink location="$tmp/c$c.ogg"; } 2>&1 )
  gst-launch-1.0 -q filesrc location="$tmp/c$c.ogg" ! oggdemux ! opusdec ! audioconvert ! \
    audioresample ! audio/x-raw,rate=16000,channels=1,format=S16LE ! wavenc ! \
    filesink location="$tmp/c$c.wav"
  printf '%s complexity %2s  run %ss user  ' "${AUDIO_TYPE:-restricted-lowdelay}" "$c" "$user"
  python3 - "$tmp/in.wav" "$tmp/c$c.wav" <<'PY'
import math, struct, sys, wave
def samples(path):
    w = wave.open(path)
    n = w.getnframes()
    return struct.unpack("<%dh" % n, w.readframes(n))
a, b = samples(sys.argv[1]), samples(sys.argv[2])
n = min(len(a), len(b))
seg, floor = 320, 100.0 ** 2  # 20 ms at 16 kHz; segments quieter than RMS 100 are skipped
vals = []
for k in range(0, n - seg, seg):
    sig = sum(a[i] * a[i] for i in range(k, k + seg))
    if sig < seg * floor:
        continue
    err = sum((a[i] - b[i]) ** 2 for i in range(k, k + seg))
    vals.append(10 * math.log10(sig / max(err, 1)))
print("segmental SNR %.2f dB over %d segments" % (sum(vals) / len(vals), len(vals)))
PY
done
