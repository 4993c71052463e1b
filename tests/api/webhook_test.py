"""Webhooks (src/jobs/webhook.h) through avatar tasks' notifyurl: a receiver that answers 500
twice then 200 (retried, growing gaps), 429 with Retry-After (waited for), 400 and a redirect
(final, not followed),
one that never answers (timed out, retried; shutdown does not wait for it) and one nobody
listens to, the failures in /metrics, the headers, the
signature checked with the secret as a receiver would, and every attempt in the task's
notify_attempts. The back-off is shortened through $FACECAST_WEBHOOK_BACKOFF_MS (300 ms base)
and the timeout through $FACECAST_WEBHOOK_TIMEOUT_S (1 s); the schedule itself is
tests/test_webhook.c's.
usage: webhook_test.py FACECAST_BINARY"""
import hashlib
import hmac
import http.server
import json
import os
import re
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import api_test  # noqa: E402
import chat_test  # noqa: E402
from api_test import Client, check, multipart, stop  # noqa: E402

SECRET = "whsec-test-7f3a9c-never-logged"
BASE = 0.3  # s, FACECAST_WEBHOOK_BACKOFF_MS


class Receiver(http.server.BaseHTTPRequestHandler):
    got = []  # (path, time, headers, body bytes, signature ok)
    lock = threading.Lock()

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(n)
        t = time.time()
        sig = self.headers.get("X-Facecast-Signature", "")
        ts = self.headers.get("X-Facecast-Timestamp", "")
        # what a receiver does: recompute over "TIMESTAMP.BODY", compare in constant time,
        # refuse old timestamps
        parts = dict(p.split("=", 1) for p in sig.split(",") if "=" in p)
        want = hmac.new(SECRET.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
        ok = parts.get("t") == ts and hmac.compare_digest(parts.get("v1", ""), want) and abs(time.time() - int(ts or 0)) < 300
        did = self.headers.get("X-Facecast-Delivery", "")
        with Receiver.lock:
            Receiver.got.append((self.path, t, dict(self.headers), body, ok))
            tries = sum(1 for g in Receiver.got if g[2].get("X-Facecast-Delivery") == did)
        if self.path == "/hang":
            time.sleep(3)
            return
        if self.path == "/flaky":
            code, extra = (500, {}) if tries <= 2 else (200, {})
        elif self.path == "/limited":
            code, extra = (429, {"Retry-After": "1"}) if tries == 1 else (204, {})
        elif self.path == "/bad":
            code, extra = 400, {}
        elif self.path == "/moved":
            code, extra = 307, {"Location": "/flaky"}
        else:
            code, extra = 200, {}
        self.send_response(code)
        for k, v in extra.items():
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


def posts(path, event=None):
    with Receiver.lock:
        return [g for g in Receiver.got if g[0] == path and (event is None or g[2].get("X-Facecast-Event") == event)]


wait = api_test.wait_for


def submit(c, path, port):
    """An avatar task whose upload is no image: it runs and fails at once (pending, running,
    failed: three deliveries)."""
    body, ctype = multipart({"avatar_id": (None, ("wh" + path.strip("/")).encode()),
                             "video_file": ("x.png", b"not an image"),
                             "notifyurl": (None, f"http://127.0.0.1:{port}{path}".encode())})
    st, js, _, _ = c.req("POST", "/api/avatar/task", body, ctype=ctype)
    check(st == 200 and js.get("code") == 0, f"task for {path} accepted ({st} {js})")
    return js["data"]["task_id"] if st == 200 else ""


def task(c, tid):
    st, js, _, _ = c.req("GET", "/api/avatar/task/" + tid)
    return js["data"] if st == 200 else {}


def main():
    recv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    recv.daemon_threads = True
    threading.Thread(target=recv.serve_forever, daemon=True).start()
    rport = recv.server_port
    tmp = tempfile.mkdtemp(prefix="fc_wh_")
    sf = os.path.join(tmp, "secret")
    with open(sf, "w") as f:
        f.write(SECRET + "\n")
    srv, port, log = chat_test.start({"FACECAST_WEBHOOK_BACKOFF_MS": str(int(BASE * 1000)),
                                      "FACECAST_WEBHOOK_TIMEOUT_S": "1"}, "--webhook-secret-file", sf)
    c = Client(port)
    t_start = time.time()
    try:
        # 500, 500, 200: three attempts per delivery, the second gap about twice the first
        tid = submit(c, "/flaky", rport)
        got = wait(lambda: len(posts("/flaky", "task.failed")) >= 3 and posts("/flaky", "task.failed"), 8)
        times = [g[1] for g in got or []]
        gaps = [b - a for a, b in zip(times, times[1:])]
        check(len(times) == 3 and gaps[0] >= BASE * 0.9 and gaps[1] >= 2 * BASE * 0.9 and gaps[1] > gaps[0],
              f"500, 500, 200: retried after growing gaps ({[round(g, 2) for g in gaps]})")
        g = got[0] if got else (None, 0, {}, b"{}", False)
        h = g[2]
        check(h.get("Content-Type") == "application/json" and h.get("X-Facecast-Event") == "task.failed" and
              len(h.get("X-Facecast-Delivery", "")) == 36 and h.get("X-Facecast-Timestamp", "").isdigit(),
              f"the headers: Content-Type, X-Facecast-Event, -Delivery, -Timestamp ({h})")
        check(got and len({x[2].get("X-Facecast-Delivery") for x in got}) == 1, "a delivery keeps its id on retries")
        ids = {x[2].get("X-Facecast-Delivery") for x in posts("/flaky")}
        check(len(ids) == 3, f"each status change is a delivery of its own ({len(ids)})")
        check(json.loads(g[3]).get("task_id") == tid and json.loads(g[3]).get("status") == "failed",
              "the body is the task's JSON")
        check(all(x[4] for x in Receiver.got), "every POST's X-Facecast-Signature verifies with the secret")
        time.sleep(0.2)
        at = task(c, tid).get("notify_attempts", [])
        st = [a.get("status") for a in at]
        check(len(at) == 9 and st.count(500) == 6 and st.count(200) == 3 and
              all(isinstance(a.get("at"), float) and isinstance(a.get("ms"), int) and a.get("event") for a in at),
              f"the task's notify_attempts: every attempt, its time, status and duration ({at})")

        # 429 with Retry-After: 1 s, honoured over the 300 ms back-off
        submit(c, "/limited", rport)
        got = wait(lambda: len(posts("/limited", "task.pending")) >= 2 and posts("/limited", "task.pending"), 6)
        gap = got[1][1] - got[0][1] if got and len(got) >= 2 else 0
        check(0.9 <= gap < 2.5, f"429 with Retry-After: 1: the retry waits a second ({gap:.2f} s)")

        # 400: final
        tid = submit(c, "/bad", rport)
        wait(lambda: len(posts("/bad")) >= 3, 5)
        time.sleep(3 * BASE)
        check(len(posts("/bad")) == 3, f"400 is not retried (one POST per status, {len(posts('/bad'))})")
        at = task(c, tid).get("notify_attempts", [])
        check(len(at) == 3 and all(a.get("status") == 400 for a in at), f"... and shows as 400 in the task ({at})")

        # a redirect: final, not followed
        n = len(posts("/flaky"))
        submit(c, "/moved", rport)
        wait(lambda: len(posts("/moved")) >= 3, 5)
        time.sleep(3 * BASE)
        check(len(posts("/moved")) == 3 and len(posts("/flaky")) == n,
              f"a redirect is final and not followed ({len(posts('/moved'))}, {len(posts('/flaky')) - n})")

        # /metrics: the deliveries that ended without a 2xx (400 and the redirect, three each;
        # the 500s and the 429 were retried into a 2xx), none dropped
        def metric(name):
            _, _, b, _ = c.req("GET", "/metrics")
            m = re.search(r"^%s (\d+)$" % name, b.decode(), re.M)
            return int(m.group(1)) if m else None
        check(wait(lambda: metric("facecast_webhook_failures_total") == 6, 5) and
              metric("facecast_webhook_dropped_total") == 0,
              f"metrics: facecast_webhook_failures_total 6 ({metric('facecast_webhook_failures_total')}), "
              f"facecast_webhook_dropped_total 0 ({metric('facecast_webhook_dropped_total')})")

        # nobody listening: refused, retried in back-off (still queued when the server stops)
        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            closed = sk.getsockname()[1]
        submit(c, "/unreachable", closed)

        # never answers: timed out after 1 s, retried
        tid = submit(c, "/hang", rport)
        wait(lambda: len(posts("/hang", "task.pending")) >= 2, 6)
        check(len(posts("/hang", "task.pending")) >= 2, "a receiver that never answers: timed out and retried")
        at = task(c, tid).get("notify_attempts", [])
        check(at and "error" in at[0] and "status" not in at[0] and 800 <= at[0].get("ms", 0) < 3000,
              f"... the attempt shows its error and the ~1 s it took ({at[:1]})")
        text = "".join(log)
        check(SECRET not in text, "the secret is never logged")
        check("not retried" in text, "a final failure is logged")
    finally:
        t0 = time.time()
        rc = stop(srv)
        took = time.time() - t0
    check(rc == 0 and took < 8, f"shutdown with a receiver hanging and one unreachable: exit {rc} in {took:.1f} s")
    recv.shutdown()
    print(f"webhook test took {time.time() - t_start:.1f} s")
    if api_test.FAILS:
        print(f"{len(api_test.FAILS)} failed")
        sys.exit(1)
    print("all passed")


main()
