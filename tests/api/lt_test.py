#!/usr/bin/env python3
"""A LiveTalking user's server, unchanged: its config.yaml (every key it has) and its flag
names, a .env of secrets, its SSE events (unnamed `data:` with status and text), its admin API
(config, sessions, and facecast's stop), its avatar task shapes (multipart with its fields,
data.tasks, model_type, times, notifyurl posts), CORS with preflight on every route, and the
data folder as a setting. Bad settings fail with one line and exit 2.
usage: lt_test.py FACECAST_BINARY"""
import http.server
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import api_test  # noqa: E402
import chat_test  # noqa: E402
from api_test import Client, check, is_error, multipart, offer_sdp, stop  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
SECRET = "sk-lt-secret-0123456789-never-logged"
ASTRONAUT = "/usr/lib/python3/dist-packages/skimage/data/astronaut.png"

# LiveTalking's config.yaml, key for key (its values, but a local STUN server and the built-in
# avatar).
CONFIG = """\
# -------- Audio ----------
l: 10
m: 8
r: 10
# -------- Avatar Model ----------
model: wav2lip                 # musetalk / wav2lip / ultralight
avatar_id: default
batch_size: 16
customvideo_config: ''
# -------- TTS ----------
tts: edgetts
REF_FILE: ''
REF_TEXT: ''
TTS_SERVER: ''
# -------- Transport ----------
transport: webrtc
stun: 'stun:127.0.0.1:3478'
push_url: ''
max_session: 5
listenport: 0
"""


def serve(cwd, args, expect_start=True):
    """facecast serve run from cwd (where LiveTalking's files are); args as given (the port
    too). With expect_start False: (exit status, stderr) of a start that must fail."""
    if expect_start:
        return chat_test.start({}, *args, cwd=cwd, any_port=False)
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "LLM_MODEL")}
    p = subprocess.run([BIN, "serve", "--host", "127.0.0.1", "--quiet", *args], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=30)
    return p.returncode, p.stderr


class RawSSE:
    """GET /sse, the bytes as they come."""

    def __init__(self, port, sid):
        self.buf = b""
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.s.sendall(f"GET /sse?sessionid={sid} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        while True:
            try:
                d = self.s.recv(65536)
            except OSError:
                return
            if not d:
                return
            self.buf += d

    def body(self):
        """The event stream as an EventSource's parser gets it (chunked framing removed)."""
        rest, out = self.buf.split(b"\r\n\r\n", 1)[-1], b""
        while True:
            m = re.match(rb"([0-9a-fA-F]+)\r\n", rest)
            if not m or len(rest) < m.end() + int(m.group(1), 16) + 2:
                return out
            n = int(m.group(1), 16)
            out += rest[m.end():m.end() + n]
            rest = rest[m.end() + n + 2:]

    def unnamed(self):
        """The events without an event: line (what es.onmessage receives), parsed."""
        body = self.body()
        out = []
        for block in re.split(rb"\n\n", body):
            lines = [l for l in block.split(b"\n") if l]
            if lines and all(l.startswith(b"data: ") for l in lines):
                try:
                    out.append(json.loads(b"".join(l[6:] for l in lines)))
                except ValueError:
                    out.append({"unparseable": block})
        return out


class Notified(http.server.BaseHTTPRequestHandler):
    got = []

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        Notified.got.append((self.headers.get("Content-Type"), json.loads(body), dict(self.headers)))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


wait = api_test.wait_for


def bad_settings(tmp):
    """Each bad setting: exit 2, one line naming it, nothing served."""
    cases = [
        ("unknown key", "listenport: 0\nfoo_bar: 1\n", [], "unknown option 'foo_bar'"),
        ("malformed YAML", "listenport: 0\nmodel: [wav2lip\n", [], "YAML"),
        ("a mapping value", "listenport: {a: 1}\n", [], "not a mapping"),
        ("fps other than 25", "listenport: 0\n", ["--fps", "30"], "25 fps"),
        ("custom action videos", "listenport: 0\ncustomvideo_config: data/custom.json\n", [], "custom action"),
        ("a model facecast lacks", "listenport: 0\nmodel: musetalk\n", [], "musetalk"),
        ("bad .env", "listenport: 0\n", ["--env-file", "bad.env"], "bad.env:2"),
        ("missing --config", None, ["-c", "nope.yaml"], "nope.yaml"),
    ]
    with open(os.path.join(tmp, "bad.env"), "w") as f:
        f.write("GOOD=1\nthis line is not a setting\n")
    for what, text, args, want in cases:
        if text is not None:
            with open(os.path.join(tmp, "bad.yaml"), "w") as f:
                f.write(text)
        rc, err = serve(tmp, (["--config", "bad.yaml"] if text is not None else []) + args, expect_start=False)
        lines = [l for l in err.splitlines() if l.strip()]
        check(rc == 2 and lines and want in lines[-1] and lines[-1].startswith("facecast: error:"),
              f"{what}: exit 2 and one line saying so ({rc}: {lines[-1:] if lines else err!r})")


def main():
    tmp = tempfile.mkdtemp(prefix="fc_lt_")
    data = os.path.join(tmp, "mydata")
    os.makedirs(os.path.join(data, "avatars"))
    os.makedirs(os.path.join(tmp, "models"))
    # LiveTalking keeps its model at models/wav2lip.pth: a small Wav2Lip of facecast's fixtures
    fixture = os.path.join(os.path.dirname(__file__), "..", "data", "ckpt", "flat_sd.pth")
    w2l = os.path.join(os.path.dirname(__file__), "..", "data", "wav2lip")
    ck = [os.path.join(w2l, f) for f in sorted(os.listdir(w2l)) if f.endswith(".pth")] if os.path.isdir(w2l) else []
    shutil.copy(ck[0] if ck else fixture, os.path.join(tmp, "models", "wav2lip.pth"))
    with open(os.path.join(tmp, "config.yaml"), "w") as f:
        f.write(CONFIG)
    with open(os.path.join(tmp, ".env"), "w") as f:
        f.write(f"# secrets\nexport OPENAI_API_KEY='{SECRET}'\nLLM_MODEL=fake-model # a comment\n")
    notify = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Notified)
    threading.Thread(target=notify.serve_forever, daemon=True).start()

    bad_settings(tmp)

    # LiveTalking's start command: python app.py -c config.yaml --tts ... (its flag names; its
    # GPT-SoVITS server refuses, so espeak-ng speaks)
    srv, port, log = serve(tmp, ["-c", "config.yaml", "--max_session", "3", "--tts", "gpt-sovits",
                                 "--TTS_SERVER", "http://127.0.0.1:9", "--REF_TEXT", "reference words",
                                 "--REF_FILE", "ref.wav", "-l", "10", "--data-dir", data,
                                 "--push_url", "rtmp://127.0.0.1/live/secretkey"])
    c = Client(port)
    try:
        text = "".join(log)
        check("models/wav2lip.pth" in text, "--model wav2lip without a checkpoint takes models/wav2lip.pth")
        check(".env set OPENAI_API_KEY, LLM_MODEL" in text, "the .env file is read (its names said)")
        check("no effect" in text, "the options without effect say so")
        check("with webrtc it is ignored" in text, "a push URL with webrtc is said to be ignored, not refused")

        st, js, _, _ = c.req("GET", "/api/admin/config")
        cfg = js["data"]["config"] if st == 200 and js.get("code") == 0 else {}
        check(cfg.get("max_session") == 3 and cfg.get("listenport") == port and cfg.get("model") == "wav2lip" and
              cfg.get("fps") == 25 and cfg.get("avatar_id") == "default" and cfg.get("tts") == "gpt-sovits" and
              cfg.get("REF_FILE") == "ref.wav" and cfg.get("REF_TEXT") == "reference words" and
              cfg.get("TTS_SERVER") == "http://127.0.0.1:9" and cfg.get("transport") == "webrtc" and
              cfg.get("stun") == "stun://127.0.0.1:3478" and cfg.get("push_url") == "rtmp://127.0.0.1/live/..." and
              cfg.get("customopt") == [] and cfg.get("modelfile") == "models/wav2lip.pth",
              f"GET /api/admin/config: LiveTalking's keys, the flags over the file ({cfg})")
        check(cfg.get("llm_key") is True and cfg.get("llm_model") == "fake-model" and cfg.get("data_dir") == data,
              "facecast's own settings beside them (secrets as set/unset, the data folder)")
        check(SECRET not in json.dumps(js) and SECRET not in "".join(log), "the .env secret is never shown or logged")
        check("secretkey" not in json.dumps(js) and "secretkey" not in "".join(log), "nor a push URL's stream name")

        # a session as LiveTalking's dashboard makes it; its SSE as LiveTalking documents it
        st, js, _, _ = c.post("/offer", {"sdp": offer_sdp(), "type": "offer"})
        check(st == 200 and js.get("sessionid"), "/offer")
        sid = js.get("sessionid", "")
        ev = RawSSE(port, sid)
        time.sleep(0.3)
        st, js, _, _ = c.post("/human", {"sessionid": sid, "text": "Hello there.", "type": "echo"})
        check(st == 200 and js.get("code") == 0, "/human echo")
        got = wait(lambda: [e for e in ev.unnamed() if e.get("status") == "end"], 30)
        evs = ev.unnamed()
        starts = [e for e in evs if e.get("status") == "start"]
        check(bool(got) and starts and starts[0].get("text") == "Hello there." and got[0].get("text") == "Hello there.",
              f"SSE: unnamed data: events {{status: start|end, text}} ({evs})")
        check(starts and starts[0].get("sessionid") == sid and starts[0].get("event") == "speech" and
              isinstance(starts[0].get("id"), int), "facecast's fields kept in them (sessionid, event, id)")
        check(b"event: speech" not in ev.body(), "no named speech events (es.onmessage sees them all)")

        st, js, _, _ = c.req("GET", "/api/admin/sessions")
        ss = js["data"]["sessions"] if st == 200 else []
        me = [s for s in ss if s.get("sessionid") == sid]
        check(len(ss) == 1 and me and set(me[0]) >= {"sessionid", "speaking", "recording", "model", "avatar_id",
                                                      "REF_FILE", "transport", "batch_size", "customopt"} and
              me[0]["speaking"] is False and me[0]["recording"] is False and me[0]["transport"] == "webrtc" and
              me[0]["model"] == "wav2lip", f"GET /api/admin/sessions: LiveTalking's fields ({ss})")
        st, js, _, _ = c.req("DELETE", "/api/admin/sessions/" + sid)
        check(st == 200 and js["data"] == {"sessionid": sid, "closed": True}, "DELETE /api/admin/sessions/{id} stops it")
        st, js, _, _ = c.post("/is_speaking", {"sessionid": sid})
        check(is_error(st, js, 404), "the stopped session is gone")
        st, js, _, _ = c.req("DELETE", "/api/admin/sessions/" + sid)
        check(is_error(st, js, 404), "stopping an unknown session: 404")
        st, js, _, _ = c.post("/offer", {"sdp": offer_sdp(), "type": "offer"})
        sid2 = js.get("sessionid", "")
        st, js, _, _ = c.post(f"/api/admin/sessions/{sid2}/stop", {})
        check(st == 200 and js["data"]["closed"] is True, "POST /api/admin/sessions/{id}/stop")
        st, js, _, _ = c.req("GET", "/api/admin/sessions")
        check(st == 200 and js["data"]["sessions"] == [], "no sessions left")

        # CORS: a page on another origin, its preflight and its answers
        st, _, raw, r = c.req("OPTIONS", "/offer", headers={"Origin": "http://page.example",
                                                            "Access-Control-Request-Method": "POST",
                                                            "Access-Control-Request-Headers": "content-type"})
        check(st == 204 and r.getheader("Access-Control-Allow-Origin") == "*" and
              "POST" in (r.getheader("Access-Control-Allow-Methods") or "") and
              r.getheader("Access-Control-Allow-Headers") == "content-type", "preflight OPTIONS /offer: 204 with CORS")
        for path in ("/whep", "/api/admin/config", "/api/avatar/task", "/human"):
            st, _, _, r = c.req("OPTIONS", path, headers={"Origin": "http://page.example",
                                                          "Access-Control-Request-Method": "POST"})
            check(st == 204 and r.getheader("Access-Control-Allow-Origin") == "*", f"preflight OPTIONS {path}")
        st, _, _, r = c.req("GET", "/healthz", headers={"Origin": "http://page.example"})
        check(st == 200 and r.getheader("Access-Control-Allow-Origin") == "*" and
              "Location" in (r.getheader("Access-Control-Expose-Headers") or ""), "a GET from another origin: CORS headers")
        st, js, _, r = c.post("/human", {"sessionid": "nope", "text": "x"}, headers={"Origin": "http://page.example"})
        check(is_error(st, js, 404) and r.getheader("Access-Control-Allow-Origin") == "*", "errors carry CORS too")

        # avatar tasks as avatar.html sends them (its multipart fields), notifications included
        png = open(ASTRONAUT, "rb").read()
        n0 = len(Notified.got)
        body, ctype = multipart({"model": (None, b"wav2lip"), "avatar_id": (None, b"lt_astro"),
                                 "video_file": ("astronaut.png", png), "img_size": (None, b"256"),
                                 "bbox_shift": (None, b"0"), "pads": (None, b"0 10 0 0"),
                                 "face_det_batch_size": (None, b"4"),
                                 "notifyurl": (None, f"http://127.0.0.1:{notify.server_port}/hook".encode())})
        t0 = time.time()
        st, js, _, _ = c.req("POST", "/api/avatar/task", body, ctype=ctype)
        check(st == 200 and js.get("code") == 0 and js["data"].get("task_id"), f"POST /api/avatar/task (avatar.html's form) ({js})")
        tid = js["data"]["task_id"] if st == 200 else ""
        st, js, seen = api_test.wait_task(c, tid)
        d = js["data"] if js else {}
        check(d.get("status") == "completed" and d.get("model_type") == "wav2lip" and d.get("error_msg") == "" and
              abs(d.get("start_time", 0) - t0) < 5 and d.get("end_time") and d["end_time"] >= d["start_time"] and
              d.get("duration", -1) >= 0, f"the task in LiveTalking's shape ({d})")
        st, js, _, _ = c.req("GET", "/api/avatar/tasks")
        ts = js["data"]["tasks"] if st == 200 else []
        check(ts and ts[0]["task_id"] == tid, "GET /api/avatar/tasks: data.tasks, newest first")
        got = wait(lambda: [g for g in Notified.got[n0:] if g[1]["status"] == "completed"], 10)
        states = [g[1]["status"] for g in Notified.got[n0:]]
        check(got and states == ["pending", "running", "completed"] and Notified.got[-1][0] == "application/json" and
              Notified.got[-1][1]["task_id"] == tid, f"notifyurl gets the task at each status ({states})")
        hs = [g[2] for g in Notified.got[n0:]]
        check([h.get("X-Facecast-Event") for h in hs] == ["task.pending", "task.running", "task.completed"] and
              all(h.get("X-Facecast-Delivery") and h.get("X-Facecast-Timestamp") for h in hs) and
              len({h.get("X-Facecast-Delivery") for h in hs}) == 3 and
              not any("X-Facecast-Signature" in h for h in hs),
              "the posts say their event, delivery id and time; without a secret they are unsigned")
        ok200 = lambda: [a for a in api_test.wait_task(c, tid)[1]["data"].get("notify_attempts", [])
                         if a.get("status") == 200]
        at = wait(lambda: len(ok200()) >= 3, 5) and ok200()
        check(len(at) == 3 and [a["event"] for a in at] == ["task.pending", "task.running", "task.completed"],
              f"the task's notify_attempts: one 200 per status ({at})")
        body, ctype = multipart({"model": (None, b"sadtalker"), "avatar_id": (None, b"x"), "video_file": ("a.png", png)})
        st, js, _, _ = c.req("POST", "/api/avatar/task", body, ctype=ctype)
        check(is_error(st, js, 400) and "model" in js["msg"], "an unknown model: 400")
        st, js, _, _ = c.post("/api/avatar/task", {"avatar_id": "y", "image_path": "/x.png", "notifyurl": "file:///etc/passwd"})
        check(is_error(st, js, 400) and "notifyurl" in js["msg"], "a notifyurl that is not http(s): 400")
        check(os.path.exists(os.path.join(data, "avatars", "lt_astro.fcpack")), "the pack is in --data-dir")
    finally:
        check(stop(srv) == 0, "the server stops cleanly")

    # An allowlist, and API keys: a refusal still carries CORS
    keys = os.path.join(tmp, "keys")
    out = subprocess.run([BIN, "keys", "add", "alice", "--file", keys], capture_output=True, text=True)
    key = out.stdout.strip().split()[-1]
    srv, port, log = serve(tmp, ["--port", "0", "--cors-origins", "https://good.example, http://also.example:8080",
                                 "--api-keys", keys])
    c = Client(port)
    try:
        st, _, _, r = c.req("GET", "/healthz", headers={"Origin": "https://good.example"})
        check(r.getheader("Access-Control-Allow-Origin") == "https://good.example" and r.getheader("Vary") == "Origin",
              "a listed origin is echoed (with Vary: Origin)")
        st, _, _, r = c.req("GET", "/healthz", headers={"Origin": "https://evil.example"})
        check(st == 200 and r.getheader("Access-Control-Allow-Origin") is None, "an unlisted origin gets no CORS headers")
        st, _, _, r = c.req("OPTIONS", "/offer", headers={"Origin": "http://also.example:8080",
                                                          "Access-Control-Request-Method": "POST",
                                                          "Access-Control-Request-Headers": "authorization, content-type"})
        check(st == 204 and r.getheader("Access-Control-Allow-Origin") == "http://also.example:8080" and
              r.getheader("Access-Control-Allow-Headers") == "authorization, content-type",
              "preflight needs no key (browsers send none)")
        st, js, _, r = c.req("GET", "/api/admin/sessions", headers={"Origin": "https://good.example"})
        check(is_error(st, js, 401) and r.getheader("Access-Control-Allow-Origin") == "https://good.example",
              "without a key: 401 with CORS headers")
        st, js, _, _ = c.req("GET", "/api/admin/config", headers={"Authorization": "Bearer " + key})
        check(st == 200 and js["data"]["config"]["api_keys"] is True and key not in json.dumps(js),
              "with a key: the config, the key not in it")
    finally:
        stop(srv)
    notify.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(api_test.FAILS)} failed" if api_test.FAILS else "all passed")
    sys.exit(1 if api_test.FAILS else 0)


if __name__ == "__main__":
    main()
