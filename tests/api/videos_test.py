#!/usr/bin/env python3
"""Bulk videos over HTTP (/v1/videos, issue 17) on a real `facecast serve`: a script job to a
playable MP4 (ffprobe), a multi-shard job whose joined file is exact (every frame once, audio as
long as the video), an uploaded WAV and an audio_url, captions, Idempotency-Key, X-Request-ID
through the answer, the job and its callback (a receiver here), byte ranges, list paging,
DELETE of unfinished and finished jobs, retention, API keys (401, a key sees its own jobs, the
per-key job cap), the rate limit (429 + Retry-After), bad bodies (4xx JSON, the server stays up).
usage: videos_test.py FACECAST_BINARY"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import api_test as A  # noqa: E402  (start_server, stop, Client, is_error, wav_bytes, multipart)
import fakehttp  # noqa: E402
from api_test import check  # noqa: E402

BIN = sys.argv[1]
HIGH = ["--rate-limit", "100000/min"]
SENT = ["The quick brown fox jumps over the lazy dog near the river bank.",
        "A talking head reads this sentence aloud for the test.",
        "Every shard of the script is rendered on its own and joined at the end.",
        "The join must not repeat a frame or leave a gap between the pieces.",
        "Captions come from the timing of each spoken sentence.",
        "Bulk generation should be fast, and it should be exact."]
LONG = " ".join(SENT * 2)  # ~700 characters: three or more shards of at least 200


# ---- a receiver for callbacks, and a file server for audio_url ----------------------------
HOOKS = []
WAV = A.wav_bytes(2.0)


class Receiver(fakehttp.http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        HOOKS.append((dict(self.headers), body))
        fakehttp.answer(self, 200, {"ok": True})

    def do_GET(self):
        data = WAV if self.path == "/speech.wav" else b""
        self.send_response(200 if data else 404)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def wait_job(c, vid, timeout=180, headers=None):
    """Polls until the job is finished; its data (or None)."""
    end = time.time() + timeout
    while time.time() < end:
        st, js, _, _ = c.req("GET", f"/v1/videos/{vid}", headers=headers)
        if st != 200:
            return None
        if js["data"]["status"] in ("completed", "failed", "canceled"):
            return js["data"]
        time.sleep(0.3)
    return None


def probe(path, what):
    r = subprocess.run(["ffprobe", "-v", "error", *what, "-of", "json", path], capture_output=True,
                       text=True)
    return json.loads(r.stdout) if r.returncode == 0 else None


def download(c, path, headers=None):
    st, _, data, r = c.req("GET", path, headers=headers)
    return st, data, r


def save(data, suffix=".mp4"):
    fd, p = tempfile.mkstemp(suffix=suffix)
    os.write(fd, data)
    os.close(fd)
    return p


def script_job(c, hook_port):
    """1. A script job: 201 with id and status, X-Request-ID echoed, completes, plays; its
    callback carries the request id; the attempts show in the job."""
    body = {"script": " ".join(SENT[:2]), "callback_url": f"http://127.0.0.1:{hook_port}/hook"}
    st, js, _, r = c.post("/v1/videos", body, headers={"X-Request-ID": "test.req:1"})
    check(st == 201 and js["code"] == 0 and js["data"]["status"] == "pending" and
          js["data"]["id"].startswith("vid_"), f"POST /v1/videos: 201 pending ({st} {js})")
    check(r.getheader("X-Request-ID") == "test.req:1", "X-Request-ID echoed")
    vid = js["data"]["id"]
    check(r.getheader("Location") == f"/v1/videos/{vid}", "Location names the job")
    d = wait_job(c, vid)
    check(d is not None and d["status"] == "completed", f"the script job completes ({d})")
    if not d or d["status"] != "completed":
        return vid, None
    check(d["progress"] == 100 and d["seconds"] > 1 and d["frames"] == round(d["seconds"] * 25) and
          d["x_realtime"] > 0, "progress 100, seconds, frames, x_realtime")
    check(d["request_id"] == "test.req:1", "the job keeps its request id")
    check(d["created_at"] <= d["started_at"] <= d["finished_at"] < d["expires_at"],
          "timing: created <= started <= finished < expires")
    st, data, _ = download(c, d["url"])
    p = save(data)
    info = probe(p, ["-show_entries", "stream=codec_type,codec_name,nb_frames"])
    kinds = {s["codec_type"]: s for s in (info or {}).get("streams", [])}
    check(st == 200 and "video" in kinds and "audio" in kinds and
          kinds["video"]["codec_name"] == "h264" and int(kinds["video"]["nb_frames"]) == d["frames"],
          f"the MP4 plays: H.264 with {d['frames']} frames, and audio ({info})")
    # the callback (the sender retries; the receiver answers 200 at once)
    end = time.time() + 15
    while time.time() < end and not HOOKS:
        time.sleep(0.2)
    h = HOOKS[0] if HOOKS else ({}, b"{}")
    hb = json.loads(h[1] or b"{}")
    check(hb.get("event") == "video.completed" and hb.get("id") == vid and
          hb.get("request_id") == "test.req:1" and h[0].get("X-Facecast-Event") == "video.completed",
          f"callback: video.completed with the request id ({hb})")
    check(h[0].get("X-Request-ID") == "test.req:1",
          f"callback: the request id as its X-Request-ID header too ({h[0].get('X-Request-ID')})")
    end = time.time() + 10
    attempts = []
    while time.time() < end:
        attempts = c.req("GET", f"/v1/videos/{vid}")[1]["data"]["webhook_attempts"]
        if attempts:
            break
        time.sleep(0.3)
    check(len(attempts) == 1 and attempts[0].get("status") == 200, f"webhook attempts in the job ({attempts})")
    os.remove(p)
    return vid, d


def multi_shard(c):
    """2. A long script in several shards, joined exactly: every frame's time once, 40 ms apart,
    audio as long as the video; captions in order within the video."""
    st, js, _, _ = c.post("/v1/videos", {"script": LONG, "size": "320x240", "background": "#204080"})
    check(st == 201 and js["data"]["shards"] >= 2, f"a long script is cut into shards ({js})")
    vid = js["data"]["id"]
    d = wait_job(c, vid)
    check(d is not None and d["status"] == "completed" and d["shards_done"] == d["shards"],
          f"the sharded job completes ({d and d['status']})")
    if not d or d["status"] != "completed":
        return vid
    st, data, _ = download(c, d["url"])
    p = save(data)
    v = probe(p, ["-select_streams", "v", "-show_entries", "packet=pts_time:stream=width,height"])
    pts = sorted(float(x["pts_time"]) for x in (v or {}).get("packets", []))
    steps = [round(b - a, 3) for a, b in zip(pts, pts[1:])]
    check(len(pts) == d["frames"] and all(s == 0.04 for s in steps) and pts and abs(pts[0]) < 1e-6,
          f"joined video: {len(pts)} frames for {d['frames']}, each 40 ms after the last "
          f"(steps {sorted(set(steps))})")
    st0 = (v or {}).get("streams", [{}])[0]
    check(st0.get("width") == 320 and st0.get("height") == 240, f"size 320x240 ({st0})")
    a = probe(p, ["-select_streams", "a", "-show_entries", "stream=duration"])
    adur = float(a["streams"][0]["duration"]) if a and a.get("streams") else 0
    check(abs(adur - d["seconds"]) <= 0.05, f"audio {adur:.3f} s as long as the video {d['seconds']:.3f} s")
    st, srt, _ = download(c, f"/v1/videos/{vid}/captions.srt")
    st2, vtt, _ = download(c, f"/v1/videos/{vid}/captions.vtt")
    cues = [ln for ln in srt.decode(errors="replace").splitlines() if "-->" in ln]

    def sec(t):
        h, m, s = t.replace(",", ".").split(":")
        return int(h) * 3600 + int(m) * 60 + float(s)
    times = [(sec(x.split(" --> ")[0]), sec(x.split(" --> ")[1])) for x in cues]
    check(st == 200 and len(cues) == len(SENT) * 2 and
          all(a0 < b0 <= a1 for (a0, b0), (a1, _) in zip(times, times[1:])) and
          times and times[-1][1] <= d["seconds"] + 0.05,
          f"SRT: one cue per sentence, in order, within the video ({len(cues)} cues)")
    check(st2 == 200 and vtt.startswith(b"WEBVTT"), "VTT sidecar")
    os.remove(p)
    return vid


def audio_jobs(c, hook_port):
    """3. An uploaded WAV (multipart) and an audio_url: 2 s of audio, 50 frames."""
    body, ctype = A.multipart({"audio": ("speech.wav", WAV), "size": (None, b"256x256")})
    st, js, _, _ = c.req("POST", "/v1/videos", body, ctype=ctype)
    check(st == 201, f"multipart audio upload: 201 ({st} {js})")
    ids = []
    if st == 201:
        d = wait_job(c, js["data"]["id"])
        check(d is not None and d["status"] == "completed" and d["frames"] == 50,
              f"the uploaded audio's job: 2 s = 50 frames ({d and (d['status'], d.get('frames'), d.get('error'))})")
        if d and d["status"] == "completed":
            st, data, _ = download(c, d["url"])
            p = save(data)
            info = probe(p, ["-select_streams", "v", "-show_entries", "stream=width,height"])
            check(info and info["streams"][0]["width"] == 256, f"256x256 ({info})")
            os.remove(p)
            st, js2, _, _ = c.req("GET", f"/v1/videos/{d['id']}/captions.srt")
            check(A.is_error(st, js2, 404), "no captions for an audio job: 404")
        ids.append(js["data"]["id"])
    # a background image uploaded with a script (the form's fields as text parts)
    png = open(A.ASTRONAUT, "rb").read() if os.path.exists(A.ASTRONAUT) else b""
    body, ctype = A.multipart({"background_image": ("bg.png", png), "script": (None, b"Over a picture."),
                               "size": (None, b"480x320"), "captions": (None, b"true")})
    st, js, _, _ = c.req("POST", "/v1/videos", body, ctype=ctype)
    check(st == 201, f"a form with a background image and a script: 201 ({st} {js})")
    if st == 201:
        d = wait_job(c, js["data"]["id"])
        check(d is not None and d["status"] == "completed" and
              d["spec"]["background"]["image"] == f"{d['id']}/background.png" and d["spec"]["captions"],
              f"the background image's job completes ({d and (d['status'], d.get('error'), d.get('spec'))})")
        ids.append(js["data"]["id"])
    body, ctype = A.multipart({"background_image": ("bg.gif", b"GIF89a" + bytes(40)), "script": (None, b"Hi.")})
    st, js, _, _ = c.req("POST", "/v1/videos", body, ctype=ctype)
    check(A.is_error(st, js, 400) and "PNG or JPEG" in js["msg"], f"a GIF background: 400 ({js})")
    st, js, _, _ = c.post("/v1/videos", {"audio_url": f"http://127.0.0.1:{hook_port}/speech.wav"})
    check(st == 201, f"audio_url: 201 ({st} {js})")
    if st == 201:
        d = wait_job(c, js["data"]["id"])
        check(d is not None and d["status"] == "completed" and d["frames"] == 50,
              "the fetched audio's job completes")
        ids.append(js["data"]["id"])
    # a RIFF/WAVE file without a format: the shard fails, the job says why, the callback too
    bad = b"RIFF" + (400).to_bytes(4, "little") + b"WAVE" + b"LIST" + (8).to_bytes(4, "little") + \
        b"garbage!" + bytes(range(256))
    body, ctype = A.multipart({"audio": ("bad.wav", bad),
                               "callback_url": (None, f"http://127.0.0.1:{hook_port}/hook".encode())})
    st, js, _, _ = c.req("POST", "/v1/videos", body, ctype=ctype)
    if st == 201:
        d = wait_job(c, js["data"]["id"])
        check(d is not None and d["status"] == "failed" and d["error"].startswith("shard 1:"),
              f"a broken WAV: the job fails with the shard's error ({d and d.get('error')})")
        end = time.time() + 15
        while time.time() < end and not any(b"video.failed" in h[1] for h in HOOKS):
            time.sleep(0.2)
        hb = [json.loads(h[1]) for h in HOOKS if b"video.failed" in h[1]]
        check(hb and hb[0]["id"] == js["data"]["id"] and hb[0]["error"],
              f"callback: video.failed with the error ({hb})")
    else:
        check(False, f"a broken WAV is taken as a job ({st} {js})")
    st, js, _, _ = c.post("/v1/videos", {"audio_url": f"http://127.0.0.1:{hook_port}/missing.wav"})
    check(A.is_error(st, js, 400) and "audio_url" in js["msg"], f"audio_url answering 404: 400 ({js})")
    return ids


def idempotency(c):
    """4. Same key, same body: the same job (200); another body: 409."""
    body = {"script": "Idempotent request, rendered once."}
    h = {"Idempotency-Key": "order-42"}
    st1, js1, _, _ = c.post("/v1/videos", body, headers=h)
    st2, js2, _, _ = c.post("/v1/videos", body, headers=h)
    check(st1 == 201 and st2 == 200 and js2["data"]["id"] == js1["data"]["id"],
          f"same key and body: the same job, 200 ({st1} {st2})")
    st3, js3, _, _ = c.post("/v1/videos", {"script": "Another body."}, headers=h)
    check(A.is_error(st3, js3, 409) and "different body" in js3["msg"], f"same key, other body: 409 ({js3})")
    return js1["data"]["id"]


def request_ids(c):
    """5. X-Request-ID: a bad one is refused (and a fresh one echoed), none gets one made."""
    st, js, _, r = c.req("GET", "/v1/videos", headers={"X-Request-ID": "bad id with spaces"})
    rid = r.getheader("X-Request-ID") or ""
    check(A.is_error(st, js, 400) and rid.startswith("req_"), f"bad X-Request-ID: 400, a new id ({rid})")
    st, js, _, r = c.req("GET", "/v1/videos", headers={"X-Request-ID": "x" * 96})
    check(st == 400, "X-Request-ID over 95 characters: 400")
    st, js, _, r = c.req("GET", "/v1/videos")
    check(st == 200 and (r.getheader("X-Request-ID") or "").startswith("req_"), "no X-Request-ID: one is made")
    st, js, _, r = c.req("GET", "/v1/videos/vid_000000000000000000000000", headers={"X-Request-ID": "a.b:c-d_e"})
    check(A.is_error(st, js, 404) and r.getheader("X-Request-ID") == "a.b:c-d_e", "404 echoes it too")


def ranges(c, d):
    """6. Byte ranges of the file: 206 with Content-Range, suffixes, 416 past the end."""
    url = d["url"]
    st, full, r = download(c, url)
    n = len(full)
    check(r.getheader("Accept-Ranges") == "bytes", "Accept-Ranges: bytes")
    st, part, r = download(c, url, {"Range": "bytes=0-99"})
    check(st == 206 and part == full[:100] and r.getheader("Content-Range") == f"bytes 0-99/{n}",
          f"Range 0-99: 206 ({st} {r.getheader('Content-Range')})")
    st, part, r = download(c, url, {"Range": "bytes=-10"})
    check(st == 206 and part == full[-10:], "Range -10: the last 10 bytes")
    st, part, r = download(c, url, {"Range": f"bytes={n - 5}-"})
    check(st == 206 and part == full[-5:], "Range N-5-: the rest")
    st, part, r = download(c, url, {"Range": f"bytes={n}-"})
    check(st == 416 and r.getheader("Content-Range") == f"bytes */{n}", f"Range past the end: 416 ({st})")


def paging(c, made):
    """7. The list: newest first, `limit`, `has_more`, `next`; every job once."""
    seen, after, pages = [], None, 0
    while pages < 50:
        st, js, _, _ = c.req("GET", "/v1/videos?limit=2" + (f"&after={after}" if after else ""))
        if st != 200:
            break
        d = js["data"]
        seen += d["videos"]
        pages += 1
        check(len(d["videos"]) <= 2, "a page holds at most `limit`")
        if not d["has_more"]:
            check(d["next"] is None, "the last page has no next")
            break
        after = d["next"]
        check(after == d["videos"][-1]["id"], "next is the page's last id")
    ids = [v["id"] for v in seen]
    check(len(ids) == len(set(ids)) and set(made) <= set(ids), f"paging lists every job once ({len(ids)})")
    created = [v["created_at"] for v in seen]
    check(created == sorted(created, reverse=True), "newest first")
    st, js, _, _ = c.req("GET", "/v1/videos?limit=0")
    check(A.is_error(st, js, 400), "limit=0: 400")
    st, js, _, _ = c.req("GET", "/v1/videos?after=nope")
    check(A.is_error(st, js, 400), "after=nope: 400")


def deletes(c, done_id, shared):
    """8. DELETE: an unfinished job is canceled, a finished one removed with its files."""
    st, js, _, _ = c.post("/v1/videos", {"script": LONG * 3})
    vid = js["data"]["id"]
    st, js, _, _ = c.req("DELETE", f"/v1/videos/{vid}")
    check(st == 200 and js["data"]["status"] == "canceled", f"DELETE of an unfinished job: canceled ({js})")
    time.sleep(1)
    st, js, _, _ = c.req("GET", f"/v1/videos/{vid}")
    check(st == 200 and js["data"]["status"] == "canceled" and js["data"]["error"], "it stays canceled")
    st, js, _, _ = c.req("DELETE", f"/v1/videos/{vid}")
    st2, js2, _, _ = c.req("GET", f"/v1/videos/{vid}")
    check(st == 200 and js["data"]["deleted"] is True and A.is_error(st2, js2, 404),
          "DELETE of a canceled job removes it")
    check(os.path.isdir(os.path.join(shared, done_id)), "a finished job's folder exists")
    st, js, _, _ = c.req("DELETE", f"/v1/videos/{done_id}")
    st2, js2, _, _ = c.req("GET", f"/v1/videos/{done_id}/file")
    check(st == 200 and A.is_error(st2, js2, 404) and not os.path.exists(os.path.join(shared, done_id)),
          "DELETE of a finished job removes it and its files")
    st, js, _, _ = c.req("DELETE", f"/v1/videos/{done_id}")
    check(A.is_error(st, js, 404), "DELETE again: 404")


def bad_bodies(c, port):
    """9. Bad requests: 4xx JSON, and the server keeps serving."""
    cases = [("malformed JSON", b'{"script": "x"', "application/json", 400, "malformed"),
             ("not an object", b'["x"]', "application/json", 400, ""),
             ("no script", b'{"voice": "en"}', "application/json", 400, "script"),
             ("unknown avatar", b'{"script": "Hi.", "avatar": "nobody_here"}', "application/json", 400, "avatar"),
             ("bad size", b'{"script": "Hi.", "size": "12x"}', "application/json", 400, "size"),
             ("odd size", b'{"script": "Hi.", "size": "321x240"}', "application/json", 400, "size"),
             ("bad background", b'{"script": "Hi.", "background": "red"}', "application/json", 400, "background"),
             ("a shared path", b'{"audio": "vid_x/input.wav"}', "application/json", 400, "audio"),
             ("an image path", b'{"script": "Hi.", "background": {"image": "../x.png"}}', "application/json", 400, "background"),
             ("bad callback", b'{"script": "Hi.", "callback_url": "ftp://x"}', "application/json", 400, "callback"),
             ("text/plain", b"hello", "text/plain", 415, "Content-Type")]
    for what, body, ctype, code, word in cases:
        st, js, _, _ = c.req("POST", "/v1/videos", body, ctype=ctype)
        check(A.is_error(st, js, code) and word in js["msg"], f"{what}: {code} ({st} {js and js.get('msg')})")
    body, ctype = A.multipart({"audio": ("x.wav", b"not audio at all" * 10)})
    st, js, _, _ = c.req("POST", "/v1/videos", body, ctype=ctype)
    check(A.is_error(st, js, 400) and "WAV" in js["msg"], f"an upload that is no audio: 400 ({js})")
    body, ctype = A.multipart({"audio": ("a.wav", WAV), "spec": (None, b'{"size": ')})
    st, js, _, _ = c.req("POST", "/v1/videos", body, ctype=ctype)
    check(A.is_error(st, js, 400) and "spec" in js["msg"], f"a form's spec part that is no JSON: 400 ({js})")
    st, js, _, _ = c.req("POST", "/v1/videos", b'{"script": "' + b"a" * 300000 + b'"}')
    check(A.is_error(st, js, 413), f"a JSON body over 256 KiB: 413 ({st})")
    st, body = A.raw_request(port, "POST /v1/videos HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; "
                                   "boundary=b\r\nContent-Length: 90000000\r\n\r\n")
    check(st == 413, f"an upload over the cap is refused before it is read: 413 ({st})")
    st, js, _, _ = c.req("PUT", "/v1/videos", b"{}")
    check(A.is_error(st, js, 405), "PUT: 405")
    st, js, _, _ = c.req("GET", "/v1/videos/../../etc/passwd")
    check(st in (400, 404), "a path for an id: 4xx")
    st, js, _, _ = c.req("GET", "/healthz")
    check(st == 200, "the server still answers")


def metrics(c):
    """10. The job metrics."""
    st, _, data, _ = c.req("GET", "/metrics")
    text = data.decode()
    want = ['facecast_video_jobs{status="pending"}', "facecast_video_items_queued",
            'facecast_video_jobs_total{status="completed"}', "facecast_video_wait_seconds_bucket",
            "facecast_video_render_seconds_count", "facecast_video_x_realtime",
            "facecast_video_seconds_total", "facecast_webhook_failures_total",
            "facecast_webhook_dropped_total"]
    check(all(w in text for w in want), "/metrics has the job families")
    types = [ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE ")]
    check(len(types) == len(set(types)), "each metric family once")
    line = [ln for ln in text.splitlines() if ln.startswith('facecast_video_jobs_total{status="completed"}')]
    check(line and int(line[0].split()[-1]) >= 4, f"completed jobs counted ({line})")


def keys_and_retention(hook_port):
    """11. API keys: 401 without one (request id echoed), a key sees its own jobs, the per-key
    cap of unfinished jobs (429 + Retry-After); retention removes finished jobs and files."""
    d = tempfile.mkdtemp(prefix="fc_vkeys_")
    kf = os.path.join(d, "keys")
    alice = subprocess.run([BIN, "keys", "add", "alice", "--file", kf], capture_output=True, text=True).stdout.strip()
    bob = subprocess.run([BIN, "keys", "add", "bob", "--file", kf], capture_output=True, text=True).stdout.strip()
    shared = os.path.join(d, "shared")
    # a job folder an earlier run left (older than the retention) goes at start; a young one stays
    old_dir, young_dir = os.path.join(shared, "vid_" + "a" * 24), os.path.join(shared, "vid_" + "b" * 24)
    for x in (old_dir, young_dir):
        os.makedirs(x)
        open(os.path.join(x, "video.mp4"), "wb").close()
    os.utime(old_dir, (time.time() - 3600, time.time() - 3600))
    os.utime(young_dir, (time.time() + 600, time.time() + 600))  # young however slow the start
    proc, port = A.start_server("--api-keys", kf, "--video-max-active", "1", "--video-retention", "2",
                                "--shared-dir", shared, *HIGH)
    c = A.Client(port)
    ha, hb = {"Authorization": f"Bearer {alice}"}, {"Authorization": f"Bearer {bob}"}
    try:
        end = time.time() + 5
        while time.time() < end and os.path.exists(old_dir):
            time.sleep(0.1)
        check(not os.path.exists(old_dir) and os.path.isdir(young_dir),
              "an earlier run's job folder older than the retention is removed at start, a young one kept")
        st, js, _, r = c.req("GET", "/v1/videos", headers={"X-Request-ID": "nokey-1"})
        check(A.is_error(st, js, 401) and r.getheader("X-Request-ID") == "nokey-1",
              f"no key: 401 JSON, request id echoed ({st})")
        st, js, _, _ = c.post("/v1/videos", {"script": LONG * 3}, headers=ha)
        check(st == 201, "alice submits")
        long_id = js["data"]["id"] if st == 201 else ""
        st, js, _, r = c.post("/v1/videos", {"script": "One more."}, headers=ha)
        check(A.is_error(st, js, 429) and int(r.getheader("Retry-After") or 0) > 0,
              f"alice's second unfinished job: 429 with Retry-After ({st} {js})")
        st, js, _, _ = c.post("/v1/videos", {"script": "Bob's own video."}, headers=hb)
        check(st == 201, "bob has a cap of his own")
        bob_id = js["data"]["id"] if st == 201 else ""
        st, js, _, _ = c.req("GET", f"/v1/videos/{long_id}", headers=hb)
        check(A.is_error(st, js, 404), "bob does not see alice's job")
        st, js, _, _ = c.req("DELETE", f"/v1/videos/{long_id}", headers=hb)
        check(A.is_error(st, js, 404), "nor delete it")
        st, js, _, _ = c.req("GET", "/v1/videos", headers=hb)
        check(st == 200 and [v["id"] for v in js["data"]["videos"]] == [bob_id], "bob lists only his jobs")
        st, js, _, _ = c.req("DELETE", f"/v1/videos/{long_id}", headers=ha)
        check(st == 200 and js["data"]["status"] == "canceled", "alice cancels hers")
        st, js, _, _ = c.post("/v1/videos", {"script": "Now it fits."}, headers=ha)
        check(st == 201, f"after the cancel alice may submit again ({st} {js})")
        # retention: bob's finished job goes 2 s after it finished, with its folder
        d1 = wait_job(c, bob_id, headers=hb)
        check(d1 is not None and d1["status"] == "completed", "bob's job completes")
        check(os.path.isdir(os.path.join(shared, bob_id)), "its folder is there")
        end = time.time() + 15
        gone = False
        while time.time() < end and not gone:
            st, js, _, _ = c.req("GET", f"/v1/videos/{bob_id}", headers=hb)
            gone = st == 404
            time.sleep(0.5)
        check(gone and not os.path.exists(os.path.join(shared, bob_id)),
              "after --video-retention the job and its files are removed")
    finally:
        check(A.stop(proc) == 0, "the keyed server stops cleanly")
        shutil.rmtree(d, ignore_errors=True)


def rate_limit():
    """12. The token bucket: 3 requests a minute, the 4th is 429 with Retry-After."""
    proc, port = A.start_server("--rate-limit", "3/min", "--render-slots", "0")
    c = A.Client(port)
    try:
        sts = [c.req("GET", "/v1/videos")[0] for _ in range(3)]
        st, js, _, r = c.req("GET", "/v1/videos")
        ra = int(r.getheader("Retry-After") or 0)
        check(sts == [200] * 3 and A.is_error(st, js, 429) and 1 <= ra <= 20,
              f"rate limit: 3 pass, the 4th is 429 with Retry-After {ra} ({sts} {st})")
        st, js, _, _ = c.req("GET", "/healthz")
        check(st == 200, "other routes are not counted")
        st, js, _, _ = c.req("GET", "/v1/videos/vid_000000000000000000000000/file")
        check(A.is_error(st, js, 404), "downloads are not counted (a player seeks in ranges)")
    finally:
        check(A.stop(proc) == 0, "the limited server stops cleanly")


def provider_voice():
    """13. A provider's voice ("openai:alloy") through the server's TTS service (--tts, a fake
    speaking OpenAI's protocol): one request per sentence with that voice, the job completes
    with the fake's audio (0.06 s per character); another provider is refused in the job."""
    from fake_tts import FakeTTS
    fake = FakeTTS()
    proc, port = A.start_server("--tts", "openai", "--tts-url", fake.url + "/v1/", *HIGH)
    c = A.Client(port)
    try:
        text = "Hello from a real voice. This is the second sentence."
        st, js, _, _ = c.post("/v1/videos", {"script": text, "voice": "openai:alloy"})
        job = wait_job(c, js["data"]["id"]) if st in (200, 201) else None
        reqs = [r for r in fake.requests if r["path"] == "/v1/audio/speech"]
        check(job is not None and job["status"] == "completed",
              f"provider voice: the job completes ({st} {job and job.get('error')})")
        check(len(reqs) == 2 and all(r["body"].get("voice") == "alloy" for r in reqs),
              f"provider voice: one request per sentence with voice alloy "
              f"({[r['body'].get('voice') for r in reqs]})")
        want = len(text) * 0.06
        secs = (job or {}).get("seconds", 0)
        check(abs(secs - want) < 1.0, f"provider voice: the video is the service's audio ({secs} s, ~{want:.1f})")
        st, js, _, _ = c.post("/v1/videos", {"script": "Not spoken here.", "voice": "edge:en-US-AriaNeural"})
        job = wait_job(c, js["data"]["id"]) if st in (200, 201) else None
        check(job is not None and job["status"] == "failed" and "edge" in (job.get("error") or ""),
              f"provider voice: another provider fails the job, naming it ({job and job.get('error')})")
    finally:
        check(A.stop(proc) == 0, "the TTS server stops cleanly")
        fake.close()


def main():
    hook_srv, hook_port = fakehttp.serve(Receiver)
    tmp = tempfile.mkdtemp(prefix="fc_videos_")
    shared = os.path.join(tmp, "shared")
    proc, port = A.start_server("--shared-dir", shared, "--render-slots", "2", *HIGH)
    c = A.Client(port)
    made = []
    try:
        vid, d = script_job(c, hook_port)
        made.append(vid)
        made.append(multi_shard(c))
        made += audio_jobs(c, hook_port)
        made.append(idempotency(c))
        request_ids(c)
        if d:
            ranges(c, d)
        paging(c, made)
        deletes(c, vid, shared)
        bad_bodies(c, port)
        metrics(c)
    finally:
        check(A.stop(proc) == 0, "the server stops cleanly")
        hook_srv.shutdown()
    keys_and_retention(hook_port)
    rate_limit()
    provider_voice()
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(A.DATA_DIR, ignore_errors=True)
    if A.FAILS:
        print(f"{len(A.FAILS)} check(s) failed")
        sys.exit(1)
    print("all video API checks passed")


if __name__ == "__main__":
    main()
