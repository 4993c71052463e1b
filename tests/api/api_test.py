#!/usr/bin/env python3
"""HTTP API of `facecast serve`, including bad input: every failure is a 4xx/5xx with a JSON
{"code": -1, "msg": ...} body and the server keeps serving. Sessions are created from a
browser-like SDP offer (no browser: the peer never connects, which the server tolerates for
30 s). usage: api_test.py FACECAST_BINARY"""
import base64
import http.client
import json
import os
import re
import socket
import struct
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import wave
import math

BIN = sys.argv[1]
FAILS = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)


DATA_DIR = tempfile.mkdtemp(prefix="fc_api_data_")  # avatar packs made by the tests
ASTRONAUT = "/usr/lib/python3/dist-packages/skimage/data/astronaut.png"


def start_server(*extra):
    env = dict(os.environ, FACECAST_DATA_DIR=DATA_DIR)
    p = subprocess.Popen([BIN, "serve", "--host", "127.0.0.1", "--port", "0", "--quiet", *extra],
                         stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 30
    while time.time() < deadline:
        line = p.stderr.readline()
        m = re.search(r"serving on http://[^:]+:(\d+)/", line)
        if m:
            # Keep showing what the server says (sanitizer reports, warnings) from here on.
            threading.Thread(target=lambda: [sys.stderr.write("server: " + l) for l in p.stderr],
                             daemon=True).start()
            return p, int(m.group(1))
        if not line and p.poll() is not None:
            break
    p.kill()
    raise SystemExit("server did not start")


def free_port():
    """A loopback TCP port free now (another process may take it before the caller binds it)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def stop(proc, timeout=15):
    """SIGTERM, then the exit status (or "hung", after SIGKILL, when it does not exit)."""
    proc.terminate()
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return "hung"


class Client:
    def __init__(self, port):
        self.port = port

    def req(self, method, path, body=None, ctype="application/json", headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        h = dict(headers or {})
        if body is not None:
            if isinstance(body, (dict, list)):
                body = json.dumps(body)
            if isinstance(body, str):
                body = body.encode()
            if ctype:
                h["Content-Type"] = ctype
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        js = None
        if r.getheader("Content-Type", "").startswith("application/json"):
            try:
                js = json.loads(data)
            except ValueError:
                js = "unparseable"
        return r.status, js, data, r

    def post(self, path, obj, **kw):
        return self.req("POST", path, obj, **kw)


def is_error(st, js, code):
    return st == code and isinstance(js, dict) and js.get("code") == -1 and isinstance(js.get("msg"), str) and js["msg"]


FINGERPRINT = ":".join(["AB"] * 32)


def offer_sdp(video="H264/90000", fmtp="level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f",
              audio=True):
    lines = ["v=0", "o=- 4611731400430051336 2 IN IP4 127.0.0.1", "s=-", "t=0 0",
             "a=group:BUNDLE 0" + (" 1" if audio else ""), "a=msid-semantic: WMS"]
    def media(kind, mid, pt, rtpmap, fm):
        return [f"m={kind} 9 UDP/TLS/RTP/SAVPF {pt}", "c=IN IP4 0.0.0.0", "a=rtcp:9 IN IP4 0.0.0.0",
                "a=ice-ufrag:fcTe", "a=ice-pwd:facecastfacecastfacecast", "a=ice-options:trickle",
                f"a=fingerprint:sha-256 {FINGERPRINT}", "a=setup:actpass", f"a=mid:{mid}", "a=recvonly",
                "a=rtcp-mux", f"a=rtpmap:{pt} {rtpmap}"] + ([f"a=fmtp:{pt} {fm}"] if fm else []) + \
               ([f"a=rtcp-fb:{pt} nack pli"] if kind == "video" else [])
    lines += media("video", 0, 102, video, fmtp)
    if audio:
        lines += media("audio", 1, 111, "opus/48000/2", "minptime=10;useinbandfec=1")
    return "\r\n".join(lines) + "\r\n"


def wav_bytes(seconds=1.0, rate=16000, freq=300.0, corrupt=False):
    fd, path = tempfile.mkstemp(suffix=".wav")
    os.close(fd)
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        n = int(seconds * rate)
        w.writeframes(b"".join(struct.pack("<h", int(12000 * math.sin(2 * math.pi * freq * i / rate))) for i in range(n)))
    data = open(path, "rb").read()
    os.remove(path)
    return data[:60] if corrupt else data


def multipart(fields):
    b = "----facecastBoundary7MA4YWxk"
    out = b""
    for name, (fname, value) in fields.items():
        out += f"--{b}\r\n".encode()
        if fname:
            out += f'Content-Disposition: form-data; name="{name}"; filename="{fname}"\r\nContent-Type: audio/wav\r\n\r\n'.encode()
        else:
            out += f'Content-Disposition: form-data; name="{name}"\r\n\r\n'.encode()
        out += value + b"\r\n"
    out += f"--{b}--\r\n".encode()
    return out, f"multipart/form-data; boundary={b}"


def raw_request(port, head):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(head.encode())
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        m = re.search(rb"Content-Length: *(\d+)", data, re.I)
        if m:
            want = data.index(b"\r\n\r\n") + 4 + int(m.group(1))
            while len(data) < want:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
    except socket.timeout:
        pass
    s.close()
    status = int(data.split(b" ")[1]) if data.startswith(b"HTTP/") else 0
    body = data.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in data else b""
    return status, body


def ws_connect(port, path):
    """A minimal RFC 6455 client: enough to send binary frames and see a close."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    resp = b""
    while b"\r\n\r\n" not in resp:
        resp += s.recv(4096)
    head, rest = resp.split(b"\r\n\r\n", 1)
    return s, int(head.split(b" ")[1]), rest


def ws_send_binary(s, payload):
    mask = os.urandom(4)
    n = len(payload)
    hdr = bytes([0x82]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n))
    s.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))


def ws_read_frame(s, rest=b""):
    data = rest
    s.settimeout(5)
    try:
        while len(data) < 2:
            data += s.recv(4096)
        n = data[1] & 0x7F
        off = 2
        if n == 126:
            while len(data) < 4:
                data += s.recv(4096)
            n = struct.unpack(">H", data[2:4])[0]
            off = 4
        while len(data) < off + n:
            data += s.recv(4096)
        return data[0] & 0x0F, data[off:off + n]
    except (socket.timeout, ConnectionError):
        return None, b""


def grey_png(w=64, h=48):
    import zlib
    raw = b"".join(b"\x00" + bytes([128]) * (w * 3) for _ in range(h))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def wait_for(pred, timeout=20, every=0.05):
    """pred()'s first truthy value within timeout seconds, else None."""
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(every)
    return None


def wait_task(c, tid, timeout=120):
    deadline = time.time() + timeout
    seen = set()
    while time.time() < deadline:
        st, js, _, _ = c.req("GET", "/api/avatar/task/" + tid)
        if st != 200:
            return st, js, seen
        seen.add(js["data"]["status"])
        if js["data"]["status"] in ("completed", "failed", "canceled"):
            return st, js, seen
        time.sleep(0.2)
    return 0, None, seen


def avatar_tasks(c):
    """The avatar studio over HTTP (LiveTalking's task shapes)."""
    st, js, _, _ = c.post("/api/avatar/task", {"avatar_id": "astro", "image_path": ASTRONAUT})
    check(st == 200 and js["code"] == 0 and js["data"]["status"] == "pending", "avatar task accepted")
    tid = js["data"]["task_id"] if st == 200 else ""
    st, js, seen = wait_task(c, tid)
    d = js["data"] if js else {}
    check(st == 200 and d.get("status") == "completed" and d.get("progress") == 100 and
          d.get("result", {}).get("frames") == 1, "avatar task completes (%s)" % d)
    st, js, _, _ = c.req("GET", "/api/avatar/tasks")
    check(st == 200 and any(t["task_id"] == tid for t in js["data"]["tasks"]), "task list (LiveTalking's data.tasks)")
    st, js, _, _ = c.req("GET", "/api/avatars")
    check(st == 200 and any(a["avatar_id"] == "astro" and a["frames"] == 1 for a in js["data"]), "avatar list")
    check(os.path.exists(os.path.join(DATA_DIR, "avatars", "astro.fcpack")), "pack written")
    # an upload the gate refuses: reasons, no pack
    body, ctype = multipart({"avatar_id": (None, b"grey"), "file": ("grey.png", grey_png())})
    st, js, _, _ = c.req("POST", "/api/avatar/task", body, ctype=ctype)
    check(st == 200, "avatar upload accepted")
    st, js, _ = wait_task(c, js["data"]["task_id"]) if st == 200 else (0, None, None)
    d = js["data"] if js else {}
    check(d.get("status") == "failed" and any(r["key"] == "no_face" for r in d.get("reasons", [])),
          "refused upload names its reason (%s)" % d.get("reasons"))
    check(not os.path.exists(os.path.join(DATA_DIR, "avatars", "grey.fcpack")), "refused: no pack")
    # bad requests
    st, js, _, _ = c.post("/api/avatar/task", {"image_path": ASTRONAUT})
    check(is_error(st, js, 400), "avatar task without avatar_id: 400")
    st, js, _, _ = c.post("/api/avatar/task", {"avatar_id": "../x", "image_path": ASTRONAUT})
    check(is_error(st, js, 400), "bad avatar_id: 400")
    st, js, _, _ = c.post("/api/avatar/task", {"avatar_id": "x", "video_path": "/no/such.mp4"})
    check(is_error(st, js, 403), "video_path outside the media folders: 403")
    st, js, _, _ = c.post("/api/avatar/task", {"avatar_id": "x", "video_path": os.path.dirname(ASTRONAUT) + "/no-such.mp4"})
    check(is_error(st, js, 404), "missing video_path in a media folder: 404")
    st, js, _, _ = c.post("/api/avatar/task", {"avatar_id": "x", "image_path": ASTRONAUT, "img_size": 100})
    check(is_error(st, js, 400), "bad img_size: 400")
    st, js, _, _ = c.post("/api/avatar/task", {"avatar_id": "x", "image_path": 5})
    check(is_error(st, js, 400), "image_path not a string: 400")
    st, js, _, _ = c.post("/api/avatar/task", {"avatar_id": "y", "image_path": ASTRONAUT, "task_id": tid})
    check(is_error(st, js, 409), "duplicate task_id: 409")
    st, js, _, _ = c.post("/api/avatar/task", {"avatar_id": "x", "video_path": ASTRONAUT, "clips": 3})
    check(is_error(st, js, 400), "clips not a list: 400")
    st, js, _, _ = c.post("/api/avatar/task", {"avatar_id": "x", "video_path": ASTRONAUT,
                                               "clips": [{"name": "wave", "video_path": os.path.dirname(ASTRONAUT) + "/no.mp4"}]})
    check(is_error(st, js, 404), "clip file missing: 404")
    st, js, _, _ = c.post("/api/avatar/task", {"avatar_id": "x", "video_path": ASTRONAUT, "clips": [{"name": 1}]})
    check(is_error(st, js, 400), "clip without name/video_path: 400")
    st, js, _, _ = c.post("/api/avatar/task", "{nope")
    check(is_error(st, js, 400), "avatar task malformed JSON: 400")
    st, js, _, _ = c.req("GET", "/api/avatar/task/nosuch")
    check(is_error(st, js, 404), "unknown task: 404")
    st, js, _, _ = c.req("PUT", "/api/avatar/task/" + tid, {"x": 1})
    check(is_error(st, js, 405), "task PUT: 405")
    # a session on the new avatar, beside sessions on the server's own
    st, js, _, _ = c.post("/offer", {"sdp": offer_sdp(), "type": "offer", "avatar": "astro"})
    check(st == 200 and js.get("type") == "answer", "offer on an avatar made by a task")
    if st == 200:
        st2, js2, _, _ = c.post("/human", {"sessionid": js["sessionid"], "text": "I am the new avatar.", "type": "echo"})
        check(st2 == 200, "the new avatar speaks")
        st2, _, _, _ = c.req("DELETE", "/session/" + js["sessionid"])
        check(st2 == 200, "session on the new avatar closed")
    st, js, _, _ = c.post("/offer", {"sdp": offer_sdp(), "type": "offer", "avatar": "nosuch"})
    check(is_error(st, js, 404) and "nosuch" in js["msg"], "offer on an unknown avatar: 404")
    st, js, _, _ = c.post("/offer", {"sdp": offer_sdp(), "type": "offer", "avatar": "../etc"})
    check(is_error(st, js, 404), "offer on a path as avatar: 404")
    st, js, _, _ = c.req("DELETE", "/api/avatar/task/" + tid)
    check(st == 200 and js["data"]["status"] == "deleted", "finished task forgotten")
    st, js, _, _ = c.req("GET", "/api/avatar/task/" + tid)
    check(is_error(st, js, 404), "forgotten task: 404")
    st, js, _, _ = c.req("DELETE", "/api/avatar/task/nosuch")
    check(is_error(st, js, 404), "DELETE unknown task: 404")


def renders(c):
    """Bulk renders through the server's scheduler (one live session is open meanwhile)."""
    # seven times a sentence of ~96 frames: more than one piece of speech synthesis (400 bytes)
    st, js, _, _ = c.post("/api/render", {"text": "Hello there. This file was rendered in bulk, beside a live session. " * 7})
    check(st == 200 and js["code"] == 0 and js["data"]["status"] == "pending", f"POST /api/render: {st} {js}")
    rid = js["data"]["task_id"] if st == 200 else "x"
    t0, info = time.time(), {}
    while time.time() - t0 < 90:
        st, js, _, _ = c.req("GET", f"/api/render/{rid}")
        info = js.get("data", {}) if isinstance(js, dict) else {}
        if info.get("status") in ("completed", "failed", "canceled"):
            break
        time.sleep(0.3)
    check(info.get("status") == "completed" and info.get("progress") == 100 and info.get("frames", 0) > 600,
          f"render completed, every piece of the text spoken: {info}")
    st, _, body, r = c.req("GET", info.get("url", "/api/render/x/file"))
    check(st == 200 and r.getheader("Content-Type") == "video/mp4" and body[4:8] == b"ftyp", f"render file: {st}, {len(body)} bytes")
    if st == 200 and shutil.which("ffprobe"):
        with tempfile.NamedTemporaryFile(suffix=".mp4") as f:
            f.write(body)
            f.flush()
            out = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "stream=codec_name,nb_frames",
                                  "-of", "csv=p=0", f.name], capture_output=True, text=True).stdout
        check("h264" in out and "aac" in out and str(info.get("frames")) in out, f"render file: H.264 + AAC, every frame: {out.split()}")
    st, js, _, _ = c.req("GET", f"/api/render/{rid}/file/x")
    check(is_error(st, js, 404), "render: bad sub-path 404")
    st, js, _, _ = c.req("PUT", f"/api/render/{rid}", {"a": 1})
    check(is_error(st, js, 405), "render: PUT 405")
    for body, code, what in ((b"{nope", 400, "malformed JSON"), ({}, 400, "no text"), ({"text": 5}, 400, "text not a string"),
                             ({"text": "hi", "avatar": "nosuch"}, 404, "unknown avatar"),
                             ({"text": "hi", "avatar": "../x"}, 400, "bad avatar id"),
                             ({"text": " \n\t "}, 400, "blank text"),
                             ({"text": "x" * 20001}, 413, "text too long")):
        st, js, _, _ = c.post("/api/render", body)
        check(is_error(st, js, code), f"render with {what}: {code} ({st})")
    st, js, _, _ = c.req("GET", "/api/render/nosuch")
    check(is_error(st, js, 404), "unknown render: 404")
    # cancel: a long text, deleted at once (pending or running)
    st, js, _, _ = c.post("/api/render", {"text": "This one is long. " * 60, "task_id": "long-one"})
    check(st == 200 and js["data"]["task_id"] == "long-one", "render with a task_id")
    st, js, _, _ = c.post("/api/render", {"text": "again", "task_id": "long-one"})
    check(is_error(st, js, 409), "render: duplicate task_id 409")
    # the server's own avatar by its name; a client's id in the automatic ids' form is skipped
    st, js, _, _ = c.post("/api/render", {"text": "Hi.", "avatar": "default", "task_id": "render-2"})
    check(st == 200 and js["data"]["task_id"] == "render-2", f"render with avatar 'default': {st} {js}")
    st, js, _, _ = c.post("/api/render", {"text": "Hi."})
    auto = js["data"]["task_id"] if st == 200 else ""
    check(st == 200 and auto.startswith("render-") and auto != "render-2", f"automatic render id skips taken ones: {st} {js}")
    for tid in ("render-2", auto):
        c.req("DELETE", f"/api/render/{tid}")
    c.req("DELETE", "/api/render/long-one")
    t0 = time.time()
    while time.time() - t0 < 30:
        st, js, _, _ = c.req("GET", "/api/render/long-one")
        if js["data"]["status"] in ("canceled", "failed", "completed"):
            break
        time.sleep(0.2)
    check(js["data"]["status"] == "canceled", f"render canceled: {js['data']}")
    st, js, _, _ = c.req("GET", "/api/render/long-one/file")
    check(is_error(st, js, 409), "canceled render has no file: 409")
    st, js, _, _ = c.req("DELETE", f"/api/render/{rid}")
    check(st == 200 and js["data"]["status"] == "deleted", "DELETE finished render")
    st, js, _, _ = c.req("GET", f"/api/render/{rid}/file")
    check(is_error(st, js, 404), "deleted render: 404")


def test_bench_startup():
    """bench startup on the CPU: cold starts of the real server, timed; a failing start is reported with its log."""
    for args in (["--runs", "0"], ["--port", "1"], ["--timeout", "x"], ["--text", 'a"b']):
        r = subprocess.run([BIN, "bench", "startup"] + args, capture_output=True, text=True, timeout=30)
        check(r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith("facecast: error:"),
              f"bench startup {args[0]} bad: one line, exit 2 ({r.returncode}: {r.stderr[:80]!r})")
    r = subprocess.run([BIN, "bench", "startup", "--runs", "2", "--json", "--max-sessions", "3"],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, f"bench startup exit {r.returncode}: {r.stderr.strip()[-300:]}")
    try:
        js = json.loads(r.stdout)
    except ValueError:
        check(False, f"bench startup --json: {r.stdout[:200]!r}")
        return
    check(js.get("runs") == 2 and len(js.get("each", [])) == 2 and js.get("serve_args") == ["--max-sessions", "3"],
          f"bench startup: two runs and the serve options: {js}")
    for run in [js["empty_cache"], js["median"]] + js["each"]:
        check(0 < run["ready_ms"] < run["first_frame_from_start_ms"] and run["first_frame_ms"] > 0
              and run["first_speaking_frame_ms"] > 0 and run["rss_peak_mib"] > 1,
              f"bench startup: ready, first frame and speaking measured in order: {run}")
        check(abs(run["first_frame_from_start_ms"] - run["ready_ms"] - run["first_frame_ms"]) < 50,
              f"bench startup: the session asked for right after ready: {run}")
    # a start that fails: the server's own error shown, exit 1
    r = subprocess.run([BIN, "bench", "startup", "--runs", "1", "--model", "wav2lip", "--checkpoint", "/nonexistent.pth"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "before it was ready" in r.stderr and "nonexistent.pth" in r.stderr,
          f"bench startup of a server that cannot start: {r.returncode} {r.stderr[-300:]!r}")
    kept = re.search(r"log \((/[^)]*)/serve\.log\)", r.stderr)
    check(kept is not None and os.path.isdir(kept.group(1)), "bench startup: the failed run's folder is kept")
    if kept:
        shutil.rmtree(kept.group(1), ignore_errors=True)


def test_bench_serve():
    """bench serve end to end on the CPU: two talking sessions, the report files and their fields."""
    for args in (["--seconds", "10abc"], ["--talking", "2"], ["--bogus"], ["--sessions", ",".join(["1"] * 65)]):
        r = subprocess.run([BIN, "bench", "serve"] + args, capture_output=True, text=True, timeout=30)
        check(r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith("facecast: error:"),
              f"bench serve {args[0]} bad: one line, exit 2 ({r.returncode}: {r.stderr[:80]!r})")
    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, "b")
        r = subprocess.run([BIN, "bench", "serve", "--sessions", "2", "--seconds", "2", "--preset", "ultrafast",
                            "--opus-complexity", "2", "--out", prefix], capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, f"bench serve exit {r.returncode}: {r.stderr.strip()[-200:]}")
        check("CPU by thread:" in r.stdout and "v:src" in r.stdout, "bench serve: CPU by thread names the video encoder")
        try:
            js = json.load(open(prefix + ".json"))
            md = open(prefix + ".md").read()
            svg = open(prefix + ".svg").read()
        except (OSError, ValueError) as e:
            check(False, f"bench serve report files: {e}")
            return
        pt = js["points"][0] if js.get("points") else {}
        check(pt.get("sessions") == 2 and pt.get("final_fps", 0) > 20, f"bench serve: 2 sessions at ~25 fps: {pt}")
        check(pt.get("gpu_util_pct") == -1 and pt.get("gpu_mem_peak_mb") == 0, "bench serve on the CPU: no GPU readings")
        check(50 < pt.get("kbps", 0) < 1600, f"bench serve: encoded kbit/s per session plausible: {pt.get('kbps')}")
        check(0 < pt.get("encode_delay_ms", 0) < 40 and 0 <= pt.get("encode_late_pct", -1) <= 100,
              f"bench serve: encoder delay after the push measured: {pt}")
        check("Opus complexity 2" in md and "x264 ultrafast" in md and "| 2 |" in md, "bench serve: Markdown table")
        check(js.get("cpu", "").endswith(f" x {os.cpu_count()}") and md.startswith(js.get("cpu", "?") + ";"),
              f"bench serve: the report names the CPU: {js.get('cpu')}")
        check(svg.startswith("<svg") and "polyline" in svg, "bench serve: SVG plot")


def metrics_format_errors(text):
    """Prometheus text format: a family's samples follow its TYPE line, all together."""
    errors, typed, done, current = [], {}, set(), None
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            if name in typed:
                errors.append("TYPE twice: " + name)
            typed[name] = kind
            if current:
                done.add(current)
            current = name
            continue
        if not line or line.startswith("#"):
            continue
        name = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0)
        fam = name
        for suffix in ("_bucket", "_sum", "_count"):
            base = name[: -len(suffix)]
            if name.endswith(suffix) and typed.get(base) == "histogram":
                fam = base
        if fam not in typed:
            errors.append("no TYPE: " + name)
        elif fam != current or fam in done:
            errors.append("apart from its family: " + name)
    return errors


def main():
    test_bench_serve()
    test_bench_startup()
    r = subprocess.run([BIN, "serve", "--port", "0", "--preset", "bogus"], capture_output=True, text=True, timeout=30)
    check(r.returncode == 2 and r.stderr.count("\n") == 1 and "bogus" in r.stderr, "serve --preset bogus: one line, exit 2")
    for bad in ("0", "11", "five"):
        r = subprocess.run([BIN, "serve", "--port", "0", "--opus-complexity", bad], capture_output=True, text=True, timeout=30)
        check(r.returncode == 2 and r.stderr.count("\n") == 1 and "opus-complexity" in r.stderr,
              f"serve --opus-complexity {bad}: one line, exit 2")
    proc, port = start_server("--max-sessions", "3", "--media-dir", os.path.dirname(ASTRONAUT))
    c = Client(port)
    try:
        st, js, _, _ = c.req("GET", "/healthz")
        check(st == 200 and js["code"] == 0 and js["data"]["sessions"] == 0, "healthz")
        check(js["data"]["width"] == 512 and js["data"]["mouth"]["w"] > 20, "healthz reports frame and mouth box")
        check(js["data"].get("tts") == "espeak" and js["data"].get("asr") == "pocketsphinx" and js["data"].get("chat") is False,
              f"healthz names the voice, the ears and whether chat is on ({js['data']})")
        st, _, body, r = c.req("GET", "/")
        check(st == 200 and b"<html" in body.lower() and r.getheader("Content-Type").startswith("text/html"), "web page at /")
        st, js, _, _ = c.req("GET", "/no-such-file.js")
        check(is_error(st, js, 404), "unknown path: 404 JSON")
        st, _ = raw_request(port, "GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n")
        check(st in (400, 404), "path traversal refused (%d)" % st)

        # Bad /offer input.
        st, js, _, _ = c.post("/offer", "{not json", ctype="application/json")
        check(is_error(st, js, 400), "malformed JSON: 400")
        st, js, _, _ = c.post("/offer", {"sdp": "x", "type": "offer"}, ctype="text/plain")
        check(is_error(st, js, 415), "wrong content type: 415")
        st, js, _, _ = c.post("/offer", [1, 2])
        check(is_error(st, js, 400), "JSON array: 400")
        st, js, _, _ = c.post("/offer", {"type": "offer"})
        check(is_error(st, js, 400) and "sdp" in js["msg"], "missing sdp: 400")
        st, js, _, _ = c.post("/offer", {"sdp": offer_sdp(), "type": "answer"})
        check(is_error(st, js, 400), "type answer: 400")
        st, js, _, _ = c.post("/offer", {"sdp": "this is not SDP at all", "type": "offer"})
        check(is_error(st, js, 400), "garbage SDP: 400 (%s)" % (js or {}).get("msg"))
        st, js, _, _ = c.post("/offer", {"sdp": offer_sdp(video="VP8/90000", fmtp=None), "type": "offer"})
        check(is_error(st, js, 400), "offer without H.264: 400 (%s)" % (js or {}).get("msg"))
        st, js, _, _ = c.post("/offer", {"sdp": offer_sdp(), "type": "offer", "avatar": "nobody"})
        check(is_error(st, js, 404), "unknown avatar: 404")
        st, js, _, _ = c.req("GET", "/healthz")
        check(js["data"]["sessions"] == 0, "failed offers leave no session behind")

        # A session.
        st, js, _, _ = c.post("/offer", {"sdp": offer_sdp(), "type": "offer"})
        check(st == 200 and js.get("type") == "answer" and "m=video" in js.get("sdp", "") and
              isinstance(js.get("sessionid"), str), "offer → answer (%d)" % st)
        sid = js.get("sessionid") if isinstance(js, dict) else None
        check(sid is not None and "a=candidate" in js.get("sdp", ""), "answer carries ICE candidates")

        st, js, _, _ = c.post("/human", {"sessionid": "nope", "text": "hi", "type": "echo"})
        check(is_error(st, js, 404), "unknown session: 404")
        st, js, _, _ = c.post("/human", {"sessionid": 12345, "text": "hi", "type": "echo"})
        check(is_error(st, js, 404), "unknown numeric session: 404")
        st, js, _, _ = c.post("/human", {"text": "hi"})
        check(is_error(st, js, 400), "missing sessionid: 400")
        st, js, _, _ = c.post("/human", {"sessionid": sid, "text": "   ", "type": "echo"})
        check(is_error(st, js, 400), "empty text: 400")
        st, js, _, _ = c.post("/human", {"sessionid": sid, "text": 42, "type": "echo"})
        check(is_error(st, js, 400), "text not a string: 400")
        st, js, _, _ = c.post("/human", {"sessionid": sid, "text": "hi", "type": "echo", "interrupt": {"x": 1}})
        check(is_error(st, js, 400) and "interrupt" in js["msg"], "interrupt not a boolean: 400")
        st, js, _, _ = c.post("/human", {"sessionid": sid, "text": "hello", "type": "chat"})
        check(is_error(st, js, 501) and "not configured" in js["msg"], "chat: not configured (501)")
        st, js, _, _ = c.post("/human", {"sessionid": sid, "text": "你好", "type": "echo", "tts": {"voice": "zh-CN-YunxiaNeural", "emotion": "happy"}})
        check(st == 200, "LiveTalking's tts.voice (an Edge voice name): 200, spoken in its language")
        st, js, _, _ = c.post("/human", {"sessionid": sid, "text": "hi", "type": "echo", "tts": 5})
        check(is_error(st, js, 400) and "tts" in js["msg"], "tts not an object: 400")
        st, js, _, _ = c.post("/human", {"sessionid": sid, "text": "hi", "type": "echo", "tts": {"voice": 7}})
        check(is_error(st, js, 400) and "tts" in js["msg"], "tts.voice not a string: 400")
        st, js, _, _ = c.post("/human", {"sessionid": sid, "text": "hello", "type": "echo", "voice": "xx-nope"})
        check(is_error(st, js, 400), "unknown voice: 400")
        st, js, _, _ = c.post("/human", {"sessionid": sid, "text": "Hello there, this is a test of speaking.", "type": "echo"})
        check(st == 200 and js["code"] == 0, "human echo")
        st, js, _, _ = c.post("/is_speaking", {"sessionid": sid})
        check(st == 200 and js["data"] is True, "is_speaking true while speaking")
        st, js, _, _ = c.post("/interrupt_talk", {"sessionid": sid})
        check(st == 200 and js["code"] == 0, "interrupt_talk")
        time.sleep(0.3)
        st, js, _, _ = c.post("/is_speaking", {"sessionid": sid})
        check(st == 200 and js["data"] is False, "is_speaking false after interrupt")
        # action clips: the photo avatar has none
        st, js, _, _ = c.post("/set_audiotype", {"sessionid": sid, "audiotype": "wave"})
        check(is_error(st, js, 404) and "wave" in js["msg"], "set_audiotype unknown clip: 404")
        st, js, _, _ = c.post("/set_audiotype", {"sessionid": sid, "audiotype": 1})
        check(is_error(st, js, 404), "set_audiotype clip number past the clips: 404")
        st, js, _, _ = c.post("/set_audiotype", {"sessionid": sid, "audiotype": 0})
        check(st == 200 and js["code"] == 0, "set_audiotype 0 (stop)")
        st, js, _, _ = c.post("/set_audiotype", {"sessionid": sid, "audiotype": [1]})
        check(is_error(st, js, 400), "set_audiotype bad type: 400")
        st, js, _, _ = c.post("/set_audiotype", {"sessionid": "nope", "audiotype": 0})
        check(is_error(st, js, 404), "set_audiotype unknown session: 404")

        # Uploads.
        body, ct = multipart({"sessionid": (None, sid.encode()), "file": ("a.wav", wav_bytes(corrupt=True))})
        st, js, _, _ = c.req("POST", "/humanaudio", body, ctype=ct)
        check(is_error(st, js, 400), "corrupt WAV upload: 400 (%s)" % (js or {}).get("msg"))
        body, ct = multipart({"sessionid": (None, sid.encode())})
        st, js, _, _ = c.req("POST", "/humanaudio", body, ctype=ct)
        check(is_error(st, js, 400), "upload without file: 400")
        st, js, _, _ = c.req("POST", "/humanaudio", b"--x\r\n", ctype="multipart/form-data; boundary=x")
        check(is_error(st, js, 400), "malformed multipart: 400")
        st, js, _, _ = c.req("POST", "/humanaudio", b"abc", ctype="application/octet-stream")
        check(is_error(st, js, 415), "upload with wrong content type: 415")
        st, body413 = raw_request(port, "POST /humanaudio HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=x\r\n"
                                        "Content-Length: 400000000\r\n\r\n")
        check(st == 413 and json.loads(body413 or b"{}").get("code") == -1, "oversized upload: 413 before the body is read")
        st, _ = raw_request(port, "POST /human HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                  "Transfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n0\r\n\r\n")
        check(st == 411, "chunked body without length: 411 (%d)" % st)
        # any audio GStreamer decodes: MP3, M4A (its index at the end), WebM/Opus as a browser's
        # MediaRecorder makes it; what is not audio is a 400 that says so
        src = os.path.join(DATA_DIR, "up.wav")
        open(src, "wb").write(wav_bytes(0.8, 44100))
        for ext, args in [("mp3", ["-c:a", "libmp3lame"]), ("m4a", ["-c:a", "aac"]), ("webm", ["-c:a", "libopus"])]:
            out = os.path.join(DATA_DIR, "up." + ext)
            subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", src, *args, out], check=True)
            body, ct = multipart({"sessionid": (None, sid.encode()), "file": ("up." + ext, open(out, "rb").read())})
            st, js, _, _ = c.req("POST", "/humanaudio", body, ctype=ct)
            check(st == 200 and js["code"] == 0, f"{ext} upload: decoded and spoken ({st} {js})")
        body, ct = multipart({"sessionid": (None, sid.encode()), "file": ("x.mp3", b"ID3" + os.urandom(3000))})
        st, js, _, _ = c.req("POST", "/humanaudio", body, ctype=ct)
        check(is_error(st, js, 400) and "decode" in js["msg"], f"an upload that is not audio: 400 ({(js or {}).get('msg')})")
        c.post("/interrupt_talk", {"sessionid": sid})

        # Recording.
        st, js, _, _ = c.post("/record", {"sessionid": sid, "type": "end_record"})
        check(is_error(st, js, 409), "end_record when not recording: 409")
        st, js, _, _ = c.post("/record", {"sessionid": sid, "type": "pause"})
        check(is_error(st, js, 400), "bad record type: 400")
        st, js, _, _ = c.post("/record", {"sessionid": sid, "type": "start_record"})
        check(st == 200 and js["code"] == 0, "start_record")
        st, js, _, _ = c.post("/record", {"sessionid": sid, "type": "start_record"})
        check(is_error(st, js, 409), "start_record twice: 409")
        body, ct = multipart({"sessionid": (None, sid.encode()), "file": ("tone.wav", wav_bytes(0.6, 44100))})
        st, js, _, _ = c.req("POST", "/humanaudio", body, ctype=ct)
        check(st == 200 and js["code"] == 0, "WAV upload (44.1 kHz)")
        time.sleep(1.2)
        st, js, _, _ = c.post("/record", {"sessionid": sid, "type": "end_record"})
        check(st == 200 and js["data"]["url"] == f"/record/{sid}", "end_record → url")
        st, _, mp4, r = c.req("GET", f"/record/{sid}")
        check(st == 200 and r.getheader("Content-Type") == "video/mp4" and mp4[4:8] == b"ftyp", "recording download")
        fd, path = tempfile.mkstemp(suffix=".mp4")
        os.write(fd, mp4)
        os.close(fd)
        pr = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "stream=codec_name,duration", "-of", "csv=p=0", path],
                            capture_output=True, text=True)
        os.remove(path)
        check("h264" in pr.stdout and "aac" in pr.stdout, "recording has H.264 + AAC (%s)" % pr.stdout.strip().replace("\n", " "))
        st, js, _, _ = c.req("GET", "/record/nope")
        check(is_error(st, js, 404), "unknown recording: 404")

        # SSE.
        st, js, _, _ = c.req("GET", "/sse?sessionid=nope")
        check(is_error(st, js, 404), "SSE unknown session: 404")
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(f"GET /sse?sessionid={sid} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        got = b""
        t0 = time.time()
        c.post("/human", {"sessionid": sid, "text": "One two.", "type": "echo"})
        while time.time() - t0 < 8 and b'"type":"end"' not in got:
            try:
                got += s.recv(4096)
            except socket.timeout:
                break
        s.close()
        check(b"text/event-stream" in got and b'"type":"start"' in got and b'"type":"end"' in got, "SSE start and end events")

        # WebSocket microphone audio.
        ws, st, rest = ws_connect(port, "/ws/audio?sessionid=nope")
        op, payload = ws_read_frame(ws, rest) if st == 101 else (None, b"")
        check(st == 101 and op == 8, "WS unknown session: closed with a reason (%r)" % payload[2:])
        ws.close()
        ws, st, rest = ws_connect(port, f"/ws/audio?sessionid={sid}")
        check(st == 101, "WS audio upgrade")
        tone = b"".join(struct.pack("<h", int(9000 * math.sin(2 * math.pi * 220 * i / 16000))) for i in range(320))
        for _ in range(40):
            ws_send_binary(ws, tone)
        time.sleep(0.2)
        st2, js2, _, _ = c.post("/is_speaking", {"sessionid": sid})
        check(st2 == 200, "server alive after WS audio")
        ws.close()

        # WHEP and limits.
        st, _, body, r = c.req("POST", "/whep", offer_sdp(), ctype="application/sdp")
        loc = r.getheader("Location") or ""
        check(st == 201 and loc.startswith("/whep/") and body.startswith(b"v=0"), "WHEP: 201 + Location + SDP")
        st, js, _, _ = c.req("POST", "/whep", "v=0 garbage", ctype="application/sdp")
        check(is_error(st, js, 400), "WHEP garbage SDP: 400")
        st, js, _, _ = c.post("/offer", {"sdp": offer_sdp(), "type": "offer"})
        check(st == 200, "third session")
        st, js, _, _ = c.post("/offer", {"sdp": offer_sdp(), "type": "offer"})
        check(is_error(st, js, 503), "past --max-sessions: 503")
        st, js, _, _ = c.req("DELETE", loc)
        check(st == 200, "WHEP DELETE")
        st, js, _, _ = c.req("DELETE", loc)
        check(is_error(st, js, 404), "WHEP DELETE again: 404")
        def totals():
            _, _, b, _ = c.req("GET", "/metrics")
            return {k: int(v) for k, v in re.findall(
                r'^(facecast_(?:infer_frames|dropped_frames|pictures_late)_total) (\d+)$', b.decode(), re.M)}
        before = totals()
        st, js, _, _ = c.req("DELETE", f"/session/{sid}")
        check(st == 200, "DELETE /session")
        after = totals()
        check(len(before) == 3 and before["facecast_infer_frames_total"] > 0
              and all(after.get(k, -1) >= v for k, v in before.items()),
              "metrics: totals keep a closed session's counts (%s -> %s)" % (before, after))
        st, js, _, _ = c.post("/is_speaking", {"sessionid": sid})
        check(is_error(st, js, 404), "deleted session is gone")
        st, js, _, _ = c.req("GET", "/healthz")
        check(js["data"]["sessions"] == 1, "one session left (%s)" % js["data"]["sessions"])
        st, _, body, _ = c.req("GET", "/metrics")
        text = body.decode()
        check(st == 200 and "facecast_sessions 1" in text and "facecast_frame_lateness_ms_bucket" in text, "metrics")
        check(re.search(r'facecast_session_keyframes_total\{session="[^"]+"\} \d+', text) is not None
              and re.search(r'facecast_session_encoder_delay_ms\{session="[^"]+"\} [\d.]+', text) is not None
              and re.search(r'^facecast_pictures_late_total \d+$', text, re.M) is not None,
              "metrics: the sessions' encoders (delay, late pictures, key frames)")
        m = re.search(r'facecast_sched_frames_total\{device="0"\} (\d+)', text)
        check(m is not None and int(m.group(1)) > 0, "metrics: the device scheduler ran the sessions' frames")
        bad = metrics_format_errors(text)
        check(not bad, "metrics: each family together, after its TYPE line (%s)" % bad[:3])
        st, js, _, _ = c.req("PUT", "/human", {"x": 1})
        check(st in (404, 405) and js["code"] == -1, "wrong method: 4xx JSON")
        avatar_tasks(c)
        renders(c)
        check(proc.poll() is None, "server still running")
    finally:
        rc = stop(proc)
    check(rc == 0, "server exits cleanly on SIGTERM (rc %s)" % rc)
    # two compute devices (two CPU backends here): sessions are spread over them
    proc, port = start_server("--device", "cpu,cpu", "--max-sessions", "4")
    c = Client(port)
    sids = []
    for _ in range(2):
        st, js, _, _ = c.post("/offer", {"sdp": offer_sdp(), "type": "offer"})
        if st == 200:
            sids.append(js["sessionid"])
    for sid in sids:
        c.post("/human", {"sessionid": sid, "text": "Two devices share the sessions.", "type": "echo"})
    time.sleep(1.5)
    st, _, body, _ = c.req("GET", "/metrics")
    text = body.decode()
    per = [int(m) for m in re.findall(r'facecast_sched_live_clients\{device="(?:0|1)"\} (\d+)', text)]
    frames = [int(m) for m in re.findall(r'facecast_sched_frames_total\{device="(?:0|1)"\} (\d+)', text)]
    check(len(sids) == 2 and per == [1, 1] and len(frames) == 2 and min(frames) > 0,
          "two devices: one session each, both ran frames (%s, %s)" % (per, frames))
    st, js, _, _ = c.req("GET", "/healthz")
    check(st == 200, "two-device server healthy")
    proc.terminate()
    check(proc.wait(15) == 0, "two-device server exits cleanly")
    # the neural backend behind serve (the small test networks, on the CPU): the 96 model
    # (width 16) and wav2lip256 (width 64; 256x256 crops)
    for sub in ("wav2lip", "wav2lip256"):
        ckpt = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", sub, "ckpt_zip.pth")
        proc, port = start_server("--model", "wav2lip", "--checkpoint", ckpt, "--device", "cpu")
        c = Client(port)
        st, js, _, _ = c.post("/offer", {"sdp": offer_sdp(), "type": "offer"})
        if st == 200:
            c.post("/human", {"sessionid": js["sessionid"], "text": "Wav2Lip speaks.", "type": "echo"})
        time.sleep(1.5)
        st, _, body, _ = c.req("GET", "/metrics")
        m = re.search(r'facecast_sched_frames_total\{device="0"\} (\d+)', body.decode())
        st2, js2, _, _ = c.req("GET", "/healthz")
        check(m is not None and int(m.group(1)) > 0 and js2["data"]["model"] == "wav2lip",
              "serve --model wav2lip --checkpoint %s: frames made (%s)" % (sub, m.group(1) if m else None))
        proc.terminate()
        check(proc.wait(15) == 0, "wav2lip server (%s) exits cleanly" % sub)
    r = subprocess.run([BIN, "serve", "--port", "0", "--model", "wav2lip", "--checkpoint", "/no/such.pth"],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 2 and r.stderr.count("\n") == 1, "serve with a missing checkpoint: one line, exit 2")
    r = subprocess.run([BIN, "serve", "--port", "0", "--device", "cpu,,cpu"], capture_output=True, text=True, timeout=30)
    check(r.returncode == 2 and "--device" in r.stderr, "serve --device with an empty name: exit 2")
    # a server whose avatar is the pack made above
    if os.path.exists(os.path.join(DATA_DIR, "avatars", "astro.fcpack")):
        proc, port = start_server("--avatar", "astro")
        c = Client(port)
        st, js, _, _ = c.req("GET", "/healthz")
        check(st == 200 and js["data"]["width"] == 512, "serve --avatar PACK_ID")
        st, js, _, _ = c.post("/offer", {"sdp": offer_sdp(), "type": "offer", "avatar": "other"})
        check(is_error(st, js, 404) and "other" in js["msg"], "offer with an unknown avatar: 404 names it")
        proc.terminate()
        check(proc.wait(15) == 0, "pack server exits cleanly")
    shutil.rmtree(DATA_DIR, ignore_errors=True)
    print(f"{len(FAILS)} failed" if FAILS else "all API checks passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
