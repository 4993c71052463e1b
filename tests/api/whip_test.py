#!/usr/bin/env python3
"""The WHIP push transport end to end: `facecast serve --transport rtcpush --push-url URL
--max-sessions 2` against a WHIP endpoint started here (whip_receiver.py: GStreamer's webrtcbin
answering, decoding H.264 and Opus, counting what it decoded). The endpoint refuses first (500):
the server comes up anyway, keeps serving and retries; then it accepts: session "0" publishes to
URL and session "1" to URL + "1", with Content-Type application/sdp and the Bearer token from
$WHIP_TOKEN; the receiver decodes pictures at 25 fps and the sound of a sentence /human makes
session "0" speak. The receiver is killed mid-stream: the server notices, stays up and
reconnects when it is back. On the server's stop the resources are DELETEd.
usage: whip_test.py FACECAST"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
import api_test  # noqa: E402
from api_test import FAILS, check, offer_sdp  # noqa: E402
from rtmp_test import free_port, health, http, start_server, wait_port  # noqa: E402

BIN = sys.argv[1]
# The system's python3 has PyGObject (a pyenv's on PATH may not).
PY = "/usr/bin/python3"
RECEIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "whip_receiver.py")
TOKEN = "t0ken-for-the-test"


class Receiver:
    def __init__(self, port):
        self.port, self.proc = port, None

    def start(self):
        self.proc = subprocess.Popen([PY, RECEIVER, str(self.port)], stdout=subprocess.PIPE,
                                     stderr=sys.stderr, text=True)
        if self.proc.stdout.readline().strip() != "ready" or not wait_port(self.port):
            raise SystemExit("the WHIP receiver did not start (python3-gi, gir1.2-gst-plugins-bad-1.0: "
                             "run scripts/deps.sh)")

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()  # a crash: no goodbye to the publisher
            self.proc.wait()

    def get(self, path):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
            return r.read()

    def stats(self):
        return json.loads(self.get("/stats"))


def pushes(port):
    return health(port).get("pushes") or []


def wait_pushes(port, pred, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        p = pushes(port)
        if p and pred(p):
            return p
        time.sleep(0.1)
    return pushes(port)


def resource_of(st, stream):
    """The newest resource whose POST named this stream."""
    rs = [(int(k), v) for k, v in st["resources"].items() if v["path"].endswith("stream=" + stream)]
    return max(rs, key=lambda r: r[0]) if rs else (None, None)


def cli():
    for args, what in ((["--transport", "rtcpush"], "rtcpush without --push-url"),
                       (["--transport", "rtcpush", "--push-url", "rtmp://h/live/s"], "an RTMP URL for WHIP"),
                       (["--transport", "rtcpush", "--push-url", "http://"], "a URL without a host")):
        r = subprocess.run([BIN, "serve", "--port", "0", *args], capture_output=True, text=True, timeout=30)
        last = (r.stderr.strip().splitlines() or [""])[-1]
        check(r.returncode == 2 and last.startswith("facecast: error: "),
              f"serve refuses {what}: {r.stderr.strip()}")


def config_file(tmp):
    """LiveTalking's config keys just work: transport: rtcpush, push_url:, max_session:."""
    cfg = os.path.join(tmp, "config.yaml")
    with open(cfg, "w") as f:
        f.write(f"transport: rtcpush\npush_url: http://127.0.0.1:{free_port()}/rtc/v1/whip/?app=live&stream=s\n"
                "max_session: 3\n")
    srv, port, _ = start_server("--config", cfg)
    try:
        hz = health(port)
        ids = [p and p.get("sessionid") for p in hz.get("pushes", [])]
        check(hz.get("transport") == "rtcpush" and hz.get("sessions") == 3 and ids == ["0", "1", "2"],
              f"a LiveTalking config.yaml (transport: rtcpush, push_url, max_session: 3) makes {ids}")
    finally:
        srv.terminate()
        srv.wait(30)


def main():
    if not os.path.exists(PY):
        raise SystemExit(f"{PY} is missing")
    t_start = time.time()
    cli()
    tmp = tempfile.mkdtemp(prefix="fc_whip_")
    config_file(tmp)
    rx = Receiver(free_port())
    rx.start()
    srv = None
    try:
        rx.get("/refuse?on=1")
        url = f"http://127.0.0.1:{rx.port}/rtc/v1/whip/?app=live&stream=livestream"
        os.environ["WHIP_TOKEN"] = TOKEN
        srv, port, log = start_server("--transport", "rtcpush", "--push-url", url, "--max-sessions", "2")
        hz = health(port)
        check(hz.get("transport") == "rtcpush" and hz.get("sessions") == 2 and len(hz.get("pushes", [])) == 2,
              "sessions \"0\" and \"1\" exist at start, each with its push")
        p = wait_pushes(port, lambda p: all(x["failures"] >= 1 for x in p), 8)
        check(all(x["state"] == "retrying" and "500" in x["error"] for x in p),
              f"the endpoint refuses: both retry ({[x['error'] for x in p]})")
        st, js = http(port, "POST", "/human", {"sessionid": "0", "text": "Hello.", "type": "echo"})
        check(st == 200 and js["code"] == 0, "session \"0\" talks while its endpoint refuses")
        st, js = http(port, "POST", "/offer", {"sdp": offer_sdp(), "type": "offer"})
        check(st == 503, f"/offer: every place is a push session's ({st})")
        st, _ = http(port, "DELETE", "/session/1")
        check(st == 409, "DELETE /session/1 is refused (the push sessions live as long as the server)")
        st, js = http(port, "GET", "/api/admin/sessions")
        rows = (js.get("data") or {}).get("sessions") if isinstance(js, dict) else None
        check(isinstance(rows, list) and sorted(r.get("transport") for r in rows) == ["rtcpush", "rtcpush"],
              f"the admin API shows transport rtcpush ({rows and [r.get('transport') for r in rows]})")
        refused = len(rx.stats()["posts"])
        time.sleep(1.5)
        retried = len(rx.stats()["posts"])
        check(retried - refused <= 4, f"retries back off ({retried - refused} POSTs in 1.5 s)")

        rx.get("/refuse?on=0")
        p = wait_pushes(port, lambda p: all(x["state"] == "connected" for x in p), 15)
        check(all(x["state"] == "connected" and x["connects"] == 1 for x in p),
              f"both publish once the endpoint accepts ({[x['state'] for x in p]})")
        st = rx.stats()
        posts = st["posts"]
        check(all(x["ctype"] == "application/sdp" for x in posts), "every POST is application/sdp")
        check(all(x["auth"] == "Bearer " + TOKEN for x in posts), "every POST has the Bearer token")
        check(all(x["has_h264"] and x["has_opus"] and x["sendonly"] for x in posts),
              "the offer is H.264 (packetization-mode 1) and Opus, both sendonly")
        r0, r1 = resource_of(st, "livestream")[0], resource_of(st, "livestream1")[0]
        check(r0 is not None and r1 is not None, "session \"0\" POSTs to URL, session \"1\" to URL + \"1\"")
        check(not any(TOKEN in line for line in log), "the token is never logged")

        time.sleep(1.0)
        st, js = http(port, "POST", "/human",
                      {"sessionid": "0", "text": "This goes out over WHIP to the media server.", "type": "echo"})
        check(st == 200 and js["code"] == 0, "POST /human to session \"0\"")
        a, d0 = rx.stats()["resources"][str(r0)], pushes(port)[0]["frames_dropped"]
        time.sleep(2.0)
        b, d1 = rx.stats()["resources"][str(r0)], pushes(port)[0]["frames_dropped"]
        fps = (b["frames"] - a["frames"]) / 2.0
        print(f"     session 0: {b['frames']} pictures decoded ({b['width']}x{b['height']}), {fps:.1f} fps; "
              f"{b['samples']} samples, peak {b['peak']}")
        check(b["frames"] >= 50, f"the receiver decodes the pictures ({b['frames']})")
        check(22 <= fps <= 28, f"at 25 fps ({fps:.1f})")
        check(d1 - d0 <= 2, f"no frames dropped while connected ({d1 - d0})")
        check(b["width"] == hz["width"] and b["height"] == hz["height"], "at the avatar's size")
        check(b["samples"] >= 48000 and b["peak"] > 3000,
              f"and the speech's sound ({b['samples']} samples, peak {b['peak']})")
        s1 = rx.stats()["resources"][str(r1)]
        # at rest, a still avatar's picture is sent once in five frames; its sound every frame
        check(s1["frames"] >= 10 and s1["samples"] >= 16000,
              f"session \"1\" is received too ({s1['frames']} pictures, {s1['samples']} samples)")

        rx.kill()  # mid-stream
        p = wait_pushes(port, lambda p: p[0]["state"] != "connected", 10)
        check(p[0]["state"] in ("retrying", "connecting") and p[0]["failures"] >= 2,
              f"the push notices the endpoint gone ({p[0]['state']}: {p[0]['error']!r})")
        check(srv.poll() is None, "the server is still running")
        st, js = http(port, "POST", "/human", {"sessionid": "0", "text": "Still here.", "type": "echo"})
        check(st == 200 and js["code"] == 0, "session \"0\" still answers /human")
        m = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        check(re.search(r'^facecast_push_connected\{session="0"\} 0$', m, re.M) is not None and
              re.search(r'^facecast_push_failures_total\{session="1"\} [1-9]', m, re.M) is not None,
              "/metrics: per session, the push is down and has failed")

        rx.start()
        p = wait_pushes(port, lambda p: p[0]["state"] == "connected", 35)
        check(p[0]["state"] == "connected" and p[0]["connects"] == 2, "the push reconnects by itself")
        http(port, "POST", "/human", {"sessionid": "0", "text": "And back again over WHIP.", "type": "echo"})
        time.sleep(2.0)
        st = rx.stats()
        rid, res = resource_of(st, "livestream")
        check(res is not None and res["frames"] >= 30 and res["peak"] > 3000,
              f"and the new stream is decoded ({res and res['frames']} pictures, peak {res and res['peak']})")
        live = [k for k in st["resources"] if k not in st["deletes"]]

        code = srv.send_signal(signal.SIGTERM) or srv.wait(30)
        check(code == 0, "the server stops cleanly")
        srv = None
        st = rx.stats()
        check(live and all(k in st["deletes"] for k in live),
              f"on stop, a DELETE reaches each live resource's Location ({live} vs {st['deletes']})")
        lines = [l for l in log if re.search(r'push "[01]" to http', l)]
        check(4 <= len(lines) <= 12, f"the pushes log their changes, not each retry ({len(lines)} lines)")
        print(f"     took {time.time() - t_start:.1f} s")
    finally:
        if srv and srv.poll() is None:
            srv.kill()
        rx.kill()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(api_test.DATA_DIR, ignore_errors=True)  # made on import, unused here
    if FAILS:
        print(f"{len(FAILS)} failed")
        sys.exit(1)
    print("all passed")


if __name__ == "__main__":
    main()
