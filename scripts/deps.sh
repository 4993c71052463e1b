#!/usr/bin/env bash
# Installs what facecast needs on Debian 12, idempotently: only missing packages are installed,
# and apt-get update runs only when something is missing. Then puts the default avatar in place
# (the public-domain astronaut photograph from python3-skimage; never committed).
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(
  build-essential cmake pkg-config
  libglib2.0-dev libsoxr-dev libespeak-ng-dev espeak-ng-data libyuv-dev libpng-dev libjpeg-dev zlib1g-dev
  libfftw3-dev libx264-dev libdnnl-dev opencv-data libdlib-data python-matplotlib-data
  libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev libgstreamer-plugins-bad1.0-dev
  gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad
  gstreamer1.0-plugins-ugly gstreamer1.0-libav gstreamer1.0-nice
  libsoup-3.0-dev libjson-glib-dev libyaml-dev libpocketsphinx-dev pocketsphinx-en-us
  python3-skimage python3-numpy python3-scipy ffmpeg chromium
  glib-networking openssl iproute2 clang libclang-rt-14-dev
  nginx libnginx-mod-rtmp
  coturn redis-server
  python3-gi gir1.2-gstreamer-1.0 gir1.2-gst-plugins-base-1.0 gir1.2-gst-plugins-bad-1.0
  libpango1.0-dev libcairo2-dev fonts-dejavu-core
)
# nginx with its RTMP module is the RTMP server of tests/e2e_rtmp.sh, which starts its own as
# an ordinary user; Debian's package also sets up the system's nginx service on port 80, which
# facecast does not use (`systemctl disable --now nginx` where it is not wanted).
# redis-server is the Redis of tests/test_redis.c, which starts its own on a free port in a
# temporary folder (Debian's package also sets up a system service on 6379, unused by the tests).
# Pango/Cairo and a font draw the captions burned into bulk videos (src/bulk/frame.c).
# PyGObject with GStreamer's introspection data is the WHIP endpoint of tests/e2e_whip.sh
# (webrtcbin answering and decoding, driven from the system's /usr/bin/python3).
# Node.js 20 (for the browser tests' playwright-core) comes with the machine; Debian's nodejs
# is 18, too old, so it is installed only where there is no node at all.
command -v node >/dev/null 2>&1 || pkgs+=(nodejs npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

astro=/usr/lib/python3/dist-packages/skimage/data/astronaut.png
mkdir -p data/avatars
[ -f data/avatars/default.png ] || cp "$astro" data/avatars/default.png

# The browser tests' npm packages (playwright-core only; it drives Debian's chromium and never
# downloads a browser). Installed from the lockfile, once.
if [ ! -d tests/browser/node_modules/playwright-core ]; then
  (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)
fi
