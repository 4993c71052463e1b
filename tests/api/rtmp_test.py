#!/usr/bin/env python3
"""The RTMP push transport end to end: `facecast serve --transport rtmp --push-url ...` against
a real RTMP server, Debian's nginx with its RTMP module, started here without root (one
process, everything in a temporary folder, a free port above 1024). Session "0" speaks (tone
bursts through /humanaudio, a sentence through /human); the stream nginx recorded must be
H.264 + AAC at 25 fps, both starting together, as long as the time it was pushed, and in sync
(the mouth opens within a frame of each burst heard in the recording's own audio). Then nginx
is killed mid-stream: the server stays up and session "0" keeps answering; nginx comes back
and the push reconnects by itself (a second recording, readable). usage: rtmp_test.py FACECAST"""
import array
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
import api_test  # noqa: E402
from api_test import FAILS, check, free_port, multipart, offer_sdp  # noqa: E402

BIN = sys.argv[1]
RTMP_MODULE = "/usr/lib/nginx/modules/ngx_rtmp_module.so"  # Debian's libnginx-mod-rtmp
# /usr/sbin is not on an ordinary user's PATH
NGINX = shutil.which("nginx", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
RATE = 16000
BURSTS = [0.52, 1.36, 2.24, 3.12]  # s into the uploaded audio; 0.3 s of 300 Hz each


def wait_port(port, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


class Nginx:
    """nginx with only an rtmp{} block, in the foreground as one process (no master, no
    workers to change user), its pid file, logs and recordings in dir."""

    def __init__(self, dir, port):
        self.dir, self.port, self.proc = dir, port, None
        with open(os.path.join(dir, "nginx.conf"), "w") as f:
            f.write(f"""load_module {RTMP_MODULE};
daemon off;
master_process off;
pid {dir}/nginx.pid;
error_log {dir}/error.log info;
events {{ worker_connections 64; }}
rtmp {{
  access_log {dir}/access.log;
  server {{
    listen 127.0.0.1:{port};
    application live {{
      live on;
      record all;
      record_path {dir}/rec;
      record_unique on;
    }}
  }}
}}
""")
        os.makedirs(os.path.join(dir, "rec"), exist_ok=True)

    def start(self):
        self.proc = subprocess.Popen([NGINX, "-p", self.dir, "-c", os.path.join(self.dir, "nginx.conf"),
                                      "-e", os.path.join(self.dir, "error.log")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if not wait_port(self.port):
            err = self.proc.stderr.read() if self.proc.poll() is not None else ""
            raise SystemExit(f"nginx did not start on port {self.port}: {err}")

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()  # a crash: no goodbye to the publisher
            self.proc.wait()

    def recordings(self):
        d = os.path.join(self.dir, "rec")
        return sorted((os.path.join(d, f) for f in os.listdir(d) if f.endswith(".flv")), key=os.path.getmtime)


def http(port, method, path, body=None, ctype="application/json", key=None):
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", ctype)
    if key:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def health(port):
    return http(port, "GET", "/healthz")[1]["data"]


def wait_push(port, pred, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        p = health(port).get("push", {})
        if pred(p):
            return p
        time.sleep(0.1)
    return health(port).get("push", {})


def bursts_wav():
    pcm = array.array("h", bytes(2 * int(4.0 * RATE)))
    for b in BURSTS:
        a, ln = int(b * RATE), int(0.3 * RATE)
        for i in range(ln):
            env = min(1.0, i / 40.0, (ln - i) / 40.0)
            pcm[a + i] = int(0.5 * env * math.sin(2 * math.pi * 300.0 * i / RATE) * 32767)
    if sys.byteorder != "little":
        pcm.byteswap()
    data = pcm.tobytes()
    hdr = (b"RIFF" + (36 + len(data)).to_bytes(4, "little") + b"WAVEfmt " + (16).to_bytes(4, "little")
           + (1).to_bytes(2, "little") + (1).to_bytes(2, "little") + RATE.to_bytes(4, "little")
           + (RATE * 2).to_bytes(4, "little") + (2).to_bytes(2, "little") + (16).to_bytes(2, "little")
           + b"data" + len(data).to_bytes(4, "little"))
    return hdr + data


def probe(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-count_packets", "-show_entries",
                          "stream=codec_type,codec_name,r_frame_rate,start_time,sample_rate,nb_read_packets"
                          ":format=duration", "-of", "json", path], capture_output=True, text=True)
    return json.loads(out.stdout or "{}")


def check_sync(path, mouth, w, h, vstart, astart):
    """Mouth onsets (video) against burst onsets in the recording's own decoded audio."""
    v = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-f", "rawvideo", "-pix_fmt", "gray", "-"],
                       capture_output=True).stdout
    x0, y0, mw, mh = mouth["x"], mouth["y"], mouth["w"], mouth["h"]
    regions = []  # each frame's mouth box, row after row
    for f in range(len(v) // (w * h)):
        base = f * w * h
        regions.append(b"".join(v[base + (y0 + y) * w + x0: base + (y0 + y) * w + x0 + mw] for y in range(mh)))
    a = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-f", "s16le", "-ac", "1", "-ar", str(RATE), "-"],
                       capture_output=True).stdout
    pcm = array.array("h", a[: len(a) // 2 * 2])
    if sys.byteorder != "little":
        pcm.byteswap()
    # Audio onsets: the first loud sample after at least 100 ms of quiet.
    aon, last = [], -10 ** 9
    for i, x in enumerate(pcm):
        if abs(x) > 3277:
            if i - last > RATE // 10:
                aon.append(astart + i / RATE)
            last = i
    aon = aon[:len(BURSTS)]
    check(len(aon) == len(BURSTS), f"the recording's audio has the {len(BURSTS)} bursts ({len(aon)} found)")
    if not aon or not regions:
        return
    # The rest picture: a frame well before the first burst.
    # Only the bursts' part: the sentence spoken after them moves the mouth more, and a peak
    # of its own would move the threshold.
    ref = regions[max(0, int((aon[0] - vstart) * 25) - 10)]
    end = min(len(regions), int((aon[-1] + 0.4 - vstart) * 25))
    diff = [sum(abs(p - q) for p, q in zip(r, ref)) / len(ref) for r in regions[:end]]
    peak = max(diff)
    check(peak > 10, f"the mouth moves in the recording (peak change {peak:.1f})")
    von = [i for i in range(1, len(diff)) if diff[i] > peak / 3 and diff[i - 1] <= peak / 3]
    for k, t in enumerate(aon):
        near = min(von, key=lambda i: abs(vstart + i / 25 - t)) if von else None  # its mouth onset
        dt = (vstart + near / 25 - t) if near is not None else 9
        check(abs(dt) <= 0.04 + 1e-6, f"burst {k} heard at {t:.3f} s: the mouth opens within a frame "
              f"(frame {near}, {dt * 1000:+.0f} ms)")


def start_server(*args):
    """facecast serve on a free port; (process, port, its log lines so far and to come)."""
    srv = subprocess.Popen([BIN, "serve", "--host", "127.0.0.1", "--port", "0", "--quiet", *args],
                           stderr=subprocess.PIPE, text=True)
    log, port = [], None
    deadline = time.time() + 30
    while time.time() < deadline and port is None:
        line = srv.stderr.readline()
        log.append(line)
        m = re.search(r"serving on http://[^:]+:(\d+)/", line)
        if m:
            port = int(m.group(1))
        elif not line and srv.poll() is not None:
            break
    if port is None:
        srv.kill()
        raise SystemExit("server did not start: " + "".join(log))
    threading.Thread(target=lambda: [log.append(l) or sys.stderr.write("server: " + l) for l in srv.stderr],
                     daemon=True).start()
    return srv, port, log


def cli_and_keys(tmp):
    """Bad flags are refused at start; with API keys, any key may act on session "0" and no
    request without one (its id is no secret)."""
    for args, what in ((["--transport", "rtmp"], "rtmp without --push-url"),
                       (["--transport", "srt", "--push-url", "rtmp://h/a/b"], "an unknown transport"),
                       (["--transport", "rtmp", "--push-url", "rtmp://h/live"], "a URL without a stream")):
        r = subprocess.run([BIN, "serve", "--port", "0", *args], capture_output=True, text=True, timeout=30)
        check(r.returncode == 2 and r.stderr.startswith("facecast: error: ") and r.stderr.count("\n") == 1,
              f"serve refuses {what}: {r.stderr.strip()}")
    kf = os.path.join(tmp, "keys")
    alice = subprocess.run([BIN, "keys", "add", "alice", "--file", kf], capture_output=True, text=True).stdout.strip()
    bob = subprocess.run([BIN, "keys", "add", "bob", "--file", kf], capture_output=True, text=True).stdout.strip()
    srv, port, _ = start_server("--api-keys", kf, "--transport", "rtmp",
                                "--push-url", f"rtmp://127.0.0.1:{free_port()}/live/test")
    try:
        for name, key in (("alice", alice), ("bob", bob)):
            st, js = http(port, "POST", "/human", {"sessionid": "0", "text": "Hi.", "type": "echo"}, key=key)
            check(st == 200 and js["code"] == 0, f"with keys, {name}'s key acts on session \"0\"")
        st, _ = http(port, "GET", "/sse?sessionid=0")
        check(st == 404, f"with keys, no request without one reaches session \"0\" ({st})")
        st, _ = http(port, "DELETE", "/session/0", key=alice)
        check(st == 409, "DELETE /session/0 is refused (the push session lives as long as the server)")
        # WebRTC viewers beside it
        st, js = http(port, "POST", "/offer", {"sdp": offer_sdp(), "type": "offer"}, key=bob)
        sid = js.get("sessionid") if st == 200 and isinstance(js, dict) else None
        check(sid and sid != "0" and "a=sendonly" in js.get("sdp", "") and health(port)["sessions"] == 2,
              "/offer still opens a WebRTC session beside session \"0\"")
        if sid:
            st, _ = http(port, "DELETE", f"/session/{sid}", key=bob)
            check(st == 200 and health(port)["sessions"] == 1, "and closes it, session \"0\" staying")
    finally:
        srv.terminate()
        srv.wait(20)


def main():
    for tool in ("ffprobe", "ffmpeg"):
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is missing: run scripts/deps.sh")
    if not NGINX:
        raise SystemExit("nginx is missing: run scripts/deps.sh")
    if not os.path.exists(RTMP_MODULE):
        raise SystemExit(f"{RTMP_MODULE} is missing (libnginx-mod-rtmp): run scripts/deps.sh")
    t_start = time.time()
    tmp = tempfile.mkdtemp(prefix="fc_rtmp_")
    nginx = Nginx(tmp, free_port())
    srv = None
    try:
        cli_and_keys(tmp)
        # The server first, with nginx not there yet: it must come up anyway and keep trying.
        url = f"rtmp://127.0.0.1:{nginx.port}/live/test"
        srv, port, log = start_server("--transport", "rtmp", "--push-url", url)
        hz = health(port)
        check(hz.get("transport") == "rtmp" and hz.get("sessions") == 1, "session \"0\" exists at start")
        p = wait_push(port, lambda p: p.get("failures", 0) >= 1, 5)
        check(p.get("state") == "retrying" and p.get("error"), f"no server yet: the push retries ({p.get('error')!r})")
        st, js = http(port, "POST", "/human", {"sessionid": "0", "text": "Hello.", "type": "echo"})
        check(st == 200 and js["code"] == 0, "session \"0\" talks while its server is absent")

        nginx.start()
        p = wait_push(port, lambda p: p.get("state") == "connected", 10)
        check(p.get("state") == "connected" and p.get("connects") == 1, "the push connects once nginx is up")
        dropped0 = p.get("frames_dropped", 0)  # those while there was no server
        t_conn = time.time()
        time.sleep(1.0)  # rest frames before the bursts (the mouth's reference)
        body, ct = multipart({"sessionid": (None, b"0"), "file": ("bursts.wav", bursts_wav())})
        st, js = http(port, "POST", "/humanaudio", body, ctype=ct)
        check(st == 200 and js["code"] == 0, "POST /humanaudio to session \"0\"")
        time.sleep(4.6)
        st, js = http(port, "POST", "/human", {"sessionid": "0", "text": "This goes out over RTMP.", "type": "echo"})
        check(st == 200 and js["code"] == 0, "POST /human to session \"0\"")
        # A server that stops reading (SIGSTOP) holds up nothing of the session's.
        n0 = health(port)["push"]["frames_pushed"]
        os.kill(nginx.proc.pid, signal.SIGSTOP)
        time.sleep(1.0)
        st, js = http(port, "POST", "/is_speaking", {"sessionid": "0"})
        n1 = health(port)["push"]["frames_pushed"]
        os.kill(nginx.proc.pid, signal.SIGCONT)
        check(st == 200 and js["data"] is True and 15 <= n1 - n0 <= 35,
              f"a stalled server holds nothing up: session \"0\" speaks on, {n1 - n0} frames in 1 s")
        time.sleep(1.0)
        before = health(port)["push"]
        t_kill = time.time()
        nginx.kill()  # mid-stream, the sentence still being spoken

        recs = nginx.recordings()
        check(len(recs) == 1, f"nginx recorded one stream ({len(recs)})")
        if recs:
            info = probe(recs[0])
            streams = {s["codec_type"]: s for s in info.get("streams", [])}
            v, a = streams.get("video", {}), streams.get("audio", {})
            check(v.get("codec_name") == "h264", f"video is H.264 ({v.get('codec_name')})")
            check(a.get("codec_name") == "aac", f"audio is AAC ({a.get('codec_name')})")
            check(v.get("r_frame_rate") == "25/1", f"25 fps ({v.get('r_frame_rate')})")
            vs, as_ = float(v.get("start_time", 99)), float(a.get("start_time", -99))
            check(abs(vs - as_) <= 0.04, f"audio and video start together ({(as_ - vs) * 1000:+.0f} ms)")
            dur = float(info.get("format", {}).get("duration", 0))
            frames = int(v.get("nb_read_packets", 0))
            pushed = t_kill - t_conn
            print(f"     recorded {dur:.2f} s, {frames} pictures; pushed for {pushed:.2f} s")
            check(abs(dur - pushed) <= 1.0, f"the recording is as long as the push ({dur:.2f} s vs {pushed:.2f} s)")
            check(abs(frames / 25 - dur) <= 0.2, "a picture every 40 ms (none missing)")
            hz = health(port)
            check_sync(recs[0], hz["mouth"], hz["width"], hz["height"], vs, as_)
        lost = before["frames_dropped"] - dropped0
        check(lost <= 2, f"no frames dropped while connected ({lost})")

        # nginx is gone: the server carries on.
        p = wait_push(port, lambda p: p.get("state") != "connected", 5)
        check(p.get("state") in ("retrying", "connecting") and p.get("failures", 0) >= 2,
              f"the push notices the loss ({p.get('state')}: {p.get('error')!r})")
        check(srv.poll() is None, "the server is still running")
        st, js = http(port, "POST", "/human", {"sessionid": "0", "text": "Still here.", "type": "echo"})
        check(st == 200 and js["code"] == 0, "session \"0\" still answers /human")
        st, js = http(port, "POST", "/interrupt_talk", {"sessionid": "0"})
        check(st == 200 and js["code"] == 0, "and /interrupt_talk")
        n0 = health(port)["push"]["frames_pushed"]
        time.sleep(1.0)
        n1 = health(port)["push"]["frames_pushed"]
        check(15 <= n1 - n0 <= 35, f"frames keep coming at 25 fps without a server ({n1 - n0} in 1 s)")
        m = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        check(re.search(r'^facecast_push_connected\{session="0"\} 0$', m, re.M) is not None and
              re.search(r'^facecast_push_failures_total\{session="0"\} [1-9]', m, re.M) is not None,
              "/metrics: the push is down and has failed")

        nginx.start()
        p = wait_push(port, lambda p: p.get("state") == "connected", 12)
        check(p.get("state") == "connected" and p.get("connects") == 2, "the push reconnects by itself")
        http(port, "POST", "/human", {"sessionid": "0", "text": "And back again.", "type": "echo"})
        time.sleep(3.0)
        code = srv.send_signal(signal.SIGTERM) or srv.wait(20)
        check(code == 0, "the server stops cleanly")
        srv = None
        time.sleep(0.3)
        recs = nginx.recordings()
        check(len(recs) == 2, f"a second recording after the reconnection ({len(recs)})")
        if len(recs) == 2:
            info = probe(recs[1])
            kinds = sorted((s["codec_type"], s["codec_name"]) for s in info.get("streams", []))
            dur = float(info.get("format", {}).get("duration", 0))
            check(kinds == [("audio", "aac"), ("video", "h264")] and dur > 2.0,
                  f"the second stream is readable: {kinds}, {dur:.2f} s")
        lines = [l for l in log if 'push "0" to rtmp://' in l]
        check(3 <= len(lines) <= 5, f"the push logs its changes, not each retry ({len(lines)} lines)")
        print(f"     took {time.time() - t_start:.1f} s")
    finally:
        if srv and srv.poll() is None:
            srv.kill()
        nginx.kill()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(api_test.DATA_DIR, ignore_errors=True)  # made on import, unused here
    if FAILS:
        print(f"{len(FAILS)} failed")
        sys.exit(1)
    print("all passed")


if __name__ == "__main__":
    main()
