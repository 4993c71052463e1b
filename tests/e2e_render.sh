#!/usr/bin/env bash
# End-to-end: `facecast render` from text and from WAV, checked with ffprobe (H.264 + AAC,
# 25 fps, video duration = audio duration ± 1 frame), and every kind of bad input: a one-line
# message naming the problem, exit code 2, no output file left behind.
# usage: e2e_render.sh FACECAST_BINARY BUILD_DIR
set -u
bin=$1
tmp=$(mktemp -d /tmp/fc_e2e_XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# probe FILE: prints "vcodec fps vdur acodec adur nframes"
probe() {
  local v a
  v=$(ffprobe -v error -select_streams v:0 -show_entries stream=codec_name,avg_frame_rate,duration,nb_frames -of csv=p=0 "$1")
  a=$(ffprobe -v error -select_streams a:0 -show_entries stream=codec_name,duration -of csv=p=0 "$1")
  echo "$v,$a"
}

check_mp4() { # file expected_seconds
  local info; info=$(probe "$1")
  IFS=, read -r vc fps vdur nfr ac adur <<<"$info"
  [ "$vc" = h264 ] || fail "$1: video codec '$vc'"
  [ "$fps" = 25/1 ] || fail "$1: frame rate '$fps'"
  [ "$ac" = aac ] || fail "$1: audio codec '$ac'"
  awk -v v="$vdur" -v a="$adur" 'BEGIN { d = v - a; if (d < 0) d = -d; exit !(d <= 0.04) }' ||
    fail "$1: video $vdur s vs audio $adur s"
  awk -v v="$vdur" -v e="$2" 'BEGIN { d = v - e; if (d < 0) d = -d; exit !(d <= 0.04) }' ||
    fail "$1: duration $vdur s, expected $2 s"
  echo "ok: $1: $info"
}

# 1. Text on the default avatar.
"$bin" render --text "Testing one two three." -o "$tmp/text.mp4" --quiet || fail "text render exit $?"
[ -s "$tmp/text.mp4" ] && { frames=$(ffprobe -v error -select_streams v:0 -count_frames -show_entries stream=nb_read_frames -of csv=p=0 "$tmp/text.mp4"); check_mp4 "$tmp/text.mp4" "$(awk -v f="$frames" 'BEGIN{print f/25}')"; }
[ -e "$tmp/text.mp4.part" ] && fail "partial file left after success"

# 2. A 1.5 s stereo 48 kHz WAV (made by ffmpeg) at 320x240, full framing, another avatar file.
ffmpeg -v error -f lavfi -i "sine=frequency=220:duration=1.5:sample_rate=48000" -ac 2 "$tmp/in.wav"
cp "$(dirname "$0")/../data/avatars/default.png" "$tmp/me.png" 2>/dev/null ||
  cp /usr/lib/python3/dist-packages/skimage/data/astronaut.png "$tmp/me.png"
ffmpeg -v error -i "$tmp/me.png" "$tmp/me.jpg"
"$bin" render --audio "$tmp/in.wav" --avatar "$tmp/me.jpg" --size 320x240 --framing full \
  -o "$tmp/wav.mp4" --quiet || fail "wav render exit $?"
[ -s "$tmp/wav.mp4" ] && check_mp4 "$tmp/wav.mp4" 1.52
dims=$(ffprobe -v error -select_streams v:0 -show_entries stream=width,height -of csv=p=0 "$tmp/wav.mp4")
[ "$dims" = "320,240" ] || fail "size: $dims"

# 3. Bad input: exit code 2, one line on stderr mentioning the problem, no output file.
bad() { # name expected-word args...
  local name=$1 word=$2; shift 2
  local out="$tmp/bad.mp4"
  "$bin" render "$@" -o "$out" --quiet 2>"$tmp/err.txt"
  local rc=$?
  local lines; lines=$(wc -l <"$tmp/err.txt")
  [ $rc -eq 2 ] || fail "$name: exit $rc, expected 2"
  [ "$lines" -eq 1 ] || fail "$name: $lines lines on stderr"
  grep -qi -- "$word" "$tmp/err.txt" || fail "$name: message '$(cat "$tmp/err.txt")' lacks '$word'"
  [ -e "$out" ] || [ -e "$out.part" ] && fail "$name: output file left behind"
  echo "ok: $name: $(cat "$tmp/err.txt")"
}
printf 'RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00' >"$tmp/trunc.wav"
echo "not audio at all" >"$tmp/text.wav"
head -c 3000 /dev/urandom >"$tmp/noise.png"
head -c 100 "$tmp/me.png" >"$tmp/cut.png"
printf 'RIFF\x24\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x55\x00\x01\x00\x80\x3e\x00\x00\x00\x7d\x00\x00\x02\x00\x10\x00data\x00\x00\x00\x00' >"$tmp/mp3.wav"
bad "missing audio" "$tmp/nope.wav" --audio "$tmp/nope.wav"
bad "truncated wav" "trunc.wav" --audio "$tmp/trunc.wav"
bad "text as wav" "not a RIFF" --audio "$tmp/text.wav"
bad "unsupported wav encoding" "unsupported" --audio "$tmp/mp3.wav"
bad "empty text" "empty text" --text ""
bad "blank text" "empty text" --text "   "
bad "unknown voice" "voice" --text "hi" --voice klingon-xx
bad "missing avatar" "nope.png" --text "hi" --avatar "$tmp/nope.png"
bad "random bytes as avatar" "noise.png" --text "hi" --avatar "$tmp/noise.png"
bad "truncated png" "cut.png" --text "hi" --avatar "$tmp/cut.png"
bad "no face" "no face" --text "hi" --avatar "$(dirname "$0")/data/noface.png"
bad "both inputs" "exactly one" --text "hi" --audio "$tmp/in.wav"
bad "no input" "exactly one"
bad "bad size" "size" --text "hi" --size 33x33
bad "unknown option" "unknown" --text "hi" --frobnicate
bad "unknown model" "model" --text "hi" --model nosuch
"$bin" render --text "hi" -o /nonexistent-dir/out.mp4 --quiet 2>"$tmp/err.txt"
rc=$?
[ $rc -eq 2 ] && grep -q "/nonexistent-dir/out.mp4" "$tmp/err.txt" && echo "ok: unwritable output: $(cat "$tmp/err.txt")" ||
  fail "unwritable output: exit $rc, '$(cat "$tmp/err.txt")'"
# A failure must not clobber an earlier good file.
cp "$tmp/wav.mp4" "$tmp/keep.mp4"
"$bin" render --audio "$tmp/trunc.wav" -o "$tmp/keep.mp4" --quiet 2>/dev/null
cmp -s "$tmp/wav.mp4" "$tmp/keep.mp4" || fail "a failed render changed the existing output"

# 4. The wav2lip backend end to end, on the small width-16 test network (random weights: the
#    mouth is nonsense, the pipeline is real): mel windows, 96x96 crops, oneDNN, paste-back.
ck="$(dirname "$0")/data/wav2lip/ckpt_zip.pth"
"$bin" render --text "One two three." --model wav2lip --checkpoint "$ck" -o "$tmp/w2l.mp4" --quiet ||
  fail "wav2lip render exit $?"
[ -s "$tmp/w2l.mp4" ] && { frames=$(ffprobe -v error -select_streams v:0 -count_frames -show_entries stream=nb_read_frames -of csv=p=0 "$tmp/w2l.mp4"); check_mp4 "$tmp/w2l.mp4" "$(awk -v f="$frames" 'BEGIN{print f/25}')"; }
# The same with wav2lip256 (LiveTalking's 256x256 network; a width-64 test network): the file
# decides the crop size, so the same command line renders it.
ck256="$(dirname "$0")/data/wav2lip256/ckpt_zip.pth"
"$bin" render --text "One two three." --model wav2lip --checkpoint "$ck256" -o "$tmp/w2l256.mp4" --quiet ||
  fail "wav2lip256 render exit $?"
[ -s "$tmp/w2l256.mp4" ] && { frames=$(ffprobe -v error -select_streams v:0 -count_frames -show_entries stream=nb_read_frames -of csv=p=0 "$tmp/w2l256.mp4"); check_mp4 "$tmp/w2l256.mp4" "$(awk -v f="$frames" 'BEGIN{print f/25}')"; }
cmp -s "$tmp/w2l.mp4" "$tmp/w2l256.mp4" && fail "wav2lip256 rendered the same bytes as the 96 model"
bad "wav2lip without checkpoint" "checkpoint" --text "hi" --model wav2lip
bad "wav2lip with a foreign checkpoint" "wav2lip\|missing" --text "hi" --model wav2lip \
  --checkpoint "$(dirname "$0")/data/ckpt/flat_sd.pth"
bad "wav2lip with a text file as checkpoint" "notes.txt\|checkpoint" --text "hi" --model wav2lip \
  --checkpoint "$tmp/text.wav"

if [ $fails -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all render end-to-end checks passed"
