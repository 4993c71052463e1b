#!/usr/bin/env python3
"""Bulk videos scaled out over Redis (issue 17): a real redis-server started here (appendonly,
every write fsync'd), one API node (`facecast serve --redis URL`, which renders nothing) and two
workers (`facecast worker --redis URL --render-slots 1`) on one shared folder.

  1. a job of several shards completes, rendered by both workers, with exactly one video file;
  2. one worker is killed (SIGKILL) while it holds an item: the other takes the item over
     (after the claim time, --claim-idle 6) and the job completes with exactly one video file;
  -. a second API node answers for the first one's jobs; a job it took, deleted on the first
     while a worker renders it, is canceled there, the worker's render stops (its touch says
     so) and its remaining work leaves Redis;
  3. the same Idempotency-Key and body, sent at once from four clients to two API nodes, make
     one job; the key with another body is refused (409);
  4. Redis is killed (SIGKILL) while jobs render and started again on the same port and folder:
     no job is lost, all complete.
usage: redisq_test.py FACECAST_BINARY"""
import http.client
import json
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

BIN = sys.argv[1]
FAILS = []
TMP = tempfile.mkdtemp(prefix="fc_redisq_")
SHARED = os.path.join(TMP, "shared")
REDIS_DIR = os.path.join(TMP, "redis")
CLAIM_S = 6  # --claim-idle: a quiet item is taken over after this
PROCS = []
LOG = []  # every line the facecast nodes wrote


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILS.append(what)
    return cond


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ---- Redis ---------------------------------------------------------------------------------

def resp_read(f):
    line = f.readline()
    if not line:
        raise ConnectionError("redis closed the connection")
    t, rest = line[:1], line[1:-2]
    if t == b"+":
        return rest.decode()
    if t == b"-":
        raise RuntimeError(rest.decode())
    if t == b":":
        return int(rest)
    if t == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)[:-2]
        return data.decode(errors="replace")
    if t == b"*":
        n = int(rest)
        return None if n < 0 else [resp_read(f) for _ in range(n)]
    raise RuntimeError("bad RESP line %r" % line)


def redis_cmd(port, *args):
    """One command on a fresh connection: its reply (RuntimeError for an error reply)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        s.sendall(out)
        return resp_read(s.makefile("rb"))


def start_redis(port):
    os.makedirs(REDIS_DIR, exist_ok=True)
    log = open(os.path.join(REDIS_DIR, "redis.log"), "a")
    p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                          "--save", "", "--appendonly", "yes", "--appendfsync", "always",
                          "--dir", REDIS_DIR, "--daemonize", "no"],
                         stdout=log, stderr=subprocess.STDOUT)
    PROCS.append(p)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            if redis_cmd(port, "PING") == "PONG":
                return p
        except (OSError, ConnectionError, RuntimeError):  # not listening, or LOADING
            pass
        time.sleep(0.05)
    raise SystemExit("redis-server did not start (see %s/redis.log)" % REDIS_DIR)


# ---- facecast nodes ------------------------------------------------------------------------

def start_node(cmd, *extra):
    """`facecast serve|worker ...`: the process and its HTTP port (read from its log line)."""
    p = subprocess.Popen([BIN, cmd, "--host", "127.0.0.1", "--port", "0", "--quiet",
                          "--shared-dir", SHARED, *extra],
                         stderr=subprocess.PIPE, text=True)
    PROCS.append(p)
    deadline = time.time() + 60
    while time.time() < deadline:
        line = p.stderr.readline()
        m = re.search(r" on http://[^:]+:(\d+)/", line)
        if m:
            tag = "%s %d: " % (cmd, p.pid)

            def relay():
                for l in p.stderr:
                    LOG.append(tag + l)
                    sys.stderr.write(tag + l)
            threading.Thread(target=relay, daemon=True).start()
            return p, int(m.group(1))
        if not line and p.poll() is not None:
            break
    p.kill()
    raise SystemExit("facecast %s did not start" % cmd)


def stop(p, timeout=20):
    if p.poll() is not None:
        return p.returncode
    p.terminate()
    try:
        return p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        return "hung"


def req(port, method, path, body=None, headers=None, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = dict(headers or {})
    if body is not None:
        body = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    try:
        return r.status, json.loads(data)
    except ValueError:
        return r.status, data


SENTENCES = [
    "The quarterly report shows steady growth across every region we serve.",
    "Our team shipped three major features and fixed more than forty bugs.",
    "Customer satisfaction rose again, and support response times fell by half.",
    "Next quarter we will focus on reliability, speed and a simpler onboarding.",
    "Thank you all for the hard work that made these results possible.",
    "Please send your questions to the usual address before Friday.",
]


def script(words_seed, n):
    """n sentences (every job's text differs by its seed, so bodies differ)."""
    return " ".join("%s %s" % (words_seed, SENTENCES[i % len(SENTENCES)]) for i in range(n))


def submit(api, body, headers=None, tries=60):
    """POST /v1/videos, retried while the store cannot be reached (5xx): (status, answer)."""
    for _ in range(tries):
        st, ans = req(api, "POST", "/v1/videos", body, headers)
        if st < 500:
            return st, ans
        time.sleep(0.5)
    return st, ans


def job(api, jid):
    for _ in range(20):
        try:
            st, ans = req(api, "GET", "/v1/videos/" + jid)
        except OSError:
            st, ans = 0, None
        if st == 200:
            return ans["data"]
        if st == 404:
            return None
        time.sleep(0.5)
    return None


def wait_done(api, ids, timeout):
    """Polls until every job is finished: {id: its last data}."""
    last = {}
    deadline = time.time() + timeout
    while time.time() < deadline:
        for jid in ids:
            d = job(api, jid)
            if d is not None:
                last[jid] = d
        if all(last.get(j, {}).get("status") in ("completed", "failed", "canceled") for j in ids):
            break
        time.sleep(0.5)
    return last


def metric(port, series):
    """A series' value on a node's /metrics (0 when absent)."""
    st, text = req(port, "GET", "/metrics")
    text = text.decode() if isinstance(text, bytes) else ""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0


def one_output(jid, what):
    """The job's folder holds exactly one video file, complete, and no half-written one."""
    d = os.path.join(SHARED, jid)
    files = sorted(os.listdir(d)) if os.path.isdir(d) else []
    mp4 = [f for f in files if f.endswith(".mp4")]
    partial = [f for f in files if ".part" in f or ".tmp" in f or f.startswith(".")]
    check(mp4 == ["video.mp4"] and not partial,
          "%s: exactly one video file in the job's folder (%s)" % (what, files))
    size = os.path.getsize(os.path.join(d, "video.mp4")) if mp4 else 0
    with open(os.path.join(d, "video.mp4"), "rb") if mp4 else open(os.devnull, "rb") as f:
        head = f.read(12)
    check(size > 1000 and head[4:8] == b"ftyp", "%s: an MP4 of %d bytes" % (what, size))


def consumers_pending(rport):
    """The consumer group's pending items: {consumer: count}."""
    rep = redis_cmd(rport, "XPENDING", "facecast:vwork", "render")
    return {c: int(n) for c, n in (rep[3] or [])} if rep and rep[0] else {}


def is_of(consumer, proc):
    """Whether a consumer name is proc's (the store names a process's consumer HOST-PID)."""
    return consumer == "%s-%d" % (socket.gethostname(), proc.pid)


def main():
    if not shutil.which("redis-server"):
        print("FAIL redis-server not found: install Debian's redis-server package "
              "(scripts/deps.sh installs it)")
        return 1
    os.makedirs(SHARED)
    for args, what in ((["worker"], "--redis URL is required"),
                       (["worker", "--redis", "redis://127.0.0.1:1", "--claim-idle", "2"],
                        "--claim-idle '2': expected 5..3600"),
                       (["worker", "--redis", "redis://127.0.0.1:1", "--render-slots", "0"],
                        "--render-slots must be 1 or more"),
                       (["worker", "--redis", "http://x"], "the scheme must be redis://")):
        r = subprocess.run([BIN] + args, capture_output=True, text=True, timeout=30)
        check(r.returncode == 2 and what in r.stderr,
              "%s: exit 2, %r (%s: %s)" % (" ".join(args), what, r.returncode, r.stderr.strip()[-160:]))
    rport = free_port()
    redis = start_redis(rport)
    url = "redis://127.0.0.1:%d" % rport
    claim = ("--claim-idle", str(CLAIM_S))
    api_p, api = start_node("serve", "--redis", url, "--rate-limit", "0")
    w1, w1port = start_node("worker", "--redis", url, "--render-slots", "1", *claim)
    w2, w2port = start_node("worker", "--redis", url, "--render-slots", "1", *claim)

    # worker nodes answer /healthz and /metrics only
    st, _ = req(w1port, "GET", "/healthz")
    check(st == 200, "worker: GET /healthz 200")
    st, _ = req(w1port, "POST", "/v1/videos", {"script": "Hi."})
    check(st == 404, "worker: no /v1/videos (%s)" % st)
    st, _ = req(w1port, "POST", "/offer", {"sdp": "x", "type": "offer"})
    check(st == 404, "worker: no live sessions (%s)" % st)

    # 1. a multi-shard job, rendered by both workers
    st, ans = submit(api, {"script": script("First.", 12)})
    check(st in (200, 201, 202) and ans.get("data", {}).get("status") == "pending",
          "submit: %s %s" % (st, ans))
    j1 = ans["data"]["id"]
    d = wait_done(api, [j1], 240).get(j1, {})
    check(d.get("status") == "completed", "job 1 completed (%s)" % d.get("status"))
    check(d.get("shards", 0) >= 3 and d.get("shards_done") == d.get("shards"),
          "job 1: %s shards, all done" % d.get("shards"))
    check(d.get("frames", 0) > 0 and abs(d["frames"] - d["seconds"] * 25) < 1,
          "job 1: %s frames, %s s" % (d.get("frames"), d.get("seconds")))
    one_output(j1, "job 1")
    st, body = req(api, "GET", "/v1/videos/%s/file" % j1)
    check(st == 200 and isinstance(body, bytes) and
          len(body) == os.path.getsize(os.path.join(SHARED, j1, "video.mp4")),
          "job 1: the file through the API node")
    # the workers rendered it, not the API node (it has no render slots with --redis)
    names = []
    for c in redis_cmd(rport, "XINFO", "CONSUMERS", "facecast:vwork", "render") or []:
        names.append(dict(zip(c[0::2], c[1::2])).get("name"))
    check(any(is_of(n, w1) for n in names) and any(is_of(n, w2) for n in names) and
          all(is_of(n, w1) or is_of(n, w2) for n in names),
          "both workers took items, and nobody else (%s)" % names)
    done = sum(metric(p, 'facecast_video_jobs_total{status="completed"}') for p in (w1port, w2port))
    check(done == 1, "the workers' /metrics count the completed job (%s)" % done)

    # 2. kill -9 a worker that holds an item: the other finishes the job (720p: shards that
    # take seconds, so the runner's keeper touches the items being rendered)
    st, ans = submit(api, {"script": script("Second.", 18), "size": "1280x720"})
    j2 = ans["data"]["id"]
    victim = None
    deadline = time.time() + 120
    while time.time() < deadline and victim is None:
        pend = consumers_pending(rport)
        for p in (w1, w2):
            if any(is_of(c, p) for c in pend):
                victim = p
                break
        time.sleep(0.05)
    check(victim is not None, "job 2: a worker holds an item")
    if victim is None:
        return finish(api_p, w1, w2, redis)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    t_kill = time.time()
    held = [c for c in consumers_pending(rport) if is_of(c, victim)]
    check(bool(held), "job 2: the killed worker's item is pending in Redis (%s)" % held)
    survivor = w2 if victim is w1 else w1
    d = wait_done(api, [j2], 300).get(j2, {})
    check(d.get("status") == "completed", "job 2 completed on the other worker (%s, %.0f s after "
          "the kill)" % (d.get("status"), time.time() - t_kill))
    check(time.time() - t_kill >= CLAIM_S - 1, "job 2: the item was taken over after the claim time")
    one_output(j2, "job 2")
    check(not consumers_pending(rport), "nothing left pending in Redis")
    touched = [l for l in LOG if "touch" in l or "no longer wanted" in l]
    check(not touched, "no render was stopped by its own touches (%s)" % touched[:2])

    # a fresh second worker for what follows
    w3, _ = start_node("worker", "--redis", url, "--render-slots", "1", *claim)

    # a second API node answers for the jobs the first took; a job canceled there while a
    # worker renders it stops on that worker (its touch says so) and its items are dropped
    api2_p, api2 = start_node("serve", "--redis", url, "--rate-limit", "0")
    st, ans = req(api2, "GET", "/v1/videos/" + j1)
    check(st == 200 and ans["data"]["status"] == "completed", "another API node reads job 1")
    st, ans = submit(api2, {"script": script("Cancel me.", 24), "size": "1280x720"})
    jc = ans["data"]["id"]
    deadline = time.time() + 60
    while time.time() < deadline and (job(api, jc) or {}).get("shards_done", 0) < 1:
        time.sleep(0.1)
    st, ans = req(api, "DELETE", "/v1/videos/" + jc)
    check(st == 200, "DELETE on the first API node of a job the second took (%s)" % st)
    t_cancel = time.time()
    deadline = time.time() + 30
    while time.time() < deadline and (consumers_pending(rport) or
                                      redis_cmd(rport, "XLEN", "facecast:vwork")):
        time.sleep(0.2)
    d = job(api2, jc) or {}
    check(d.get("status") == "canceled" and d.get("shards_done", 99) < d.get("shards", 0),
          "canceled mid-job: %s, %s of %s shards" % (d.get("status"), d.get("shards_done"),
                                                      d.get("shards")))
    check(time.time() - t_cancel < 10 and not redis_cmd(rport, "XLEN", "facecast:vwork"),
          "its work left Redis within %.1f s (rendering stopped, the rest dropped)"
          % (time.time() - t_cancel))

    # 3. the same key and body at once from four clients, two on each API node: one job;
    # another body: 409
    body = {"script": script("Third.", 4)}
    key = {"Idempotency-Key": "order-42"}
    answers = []
    ts = [threading.Thread(target=lambda port=port: answers.append(submit(port, body, key)))
          for port in (api, api2, api, api2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    ids = {a[1].get("data", {}).get("id") for a in answers}
    check(len(answers) == 4 and all(a[0] in (200, 201, 202) for a in answers) and len(ids) == 1,
          "duplicate submissions: one job (%s)" % [(a[0], a[1].get("data", {}).get("id")) for a in answers])
    st, ans = submit(api, {"script": script("Other.", 4)}, key)
    check(st == 409, "same key, another body: 409 (%s)" % st)
    st, ans = req(api, "GET", "/v1/videos?limit=100")
    listed = [x["id"] for x in ans.get("data", {}).get("videos", ans.get("data", {}).get("items", []))] \
        if isinstance(ans, dict) else []
    j3 = ids.pop()
    check(listed.count(j3) == 1, "the list holds that job once")
    stop(api2_p)

    # 4. Redis killed mid-run and started again: nothing lost
    more = []
    for i in range(3):
        st, ans = submit(api, {"script": script("Fourth %d." % i, 6)})
        more.append(ans["data"]["id"])
    deadline = time.time() + 60
    while time.time() < deadline and not consumers_pending(rport):
        time.sleep(0.05)
    redis.send_signal(signal.SIGKILL)
    redis.wait()
    time.sleep(2)
    st, _ = req(api, "GET", "/v1/videos/" + more[0])
    check(st == 503, "Redis down: the API node answers 503 (%s), and keeps running" % st)
    redis = start_redis(rport)
    st, ans = submit(api, {"script": script("Fifth.", 3)})
    check(st in (200, 201, 202), "a submission after the restart (%s)" % st)
    more.append(ans["data"]["id"])
    last = wait_done(api, [j3] + more, 420)
    for jid in [j3] + more:
        check(last.get(jid, {}).get("status") == "completed",
              "after the restart: %s %s" % (jid, last.get(jid, {}).get("status")))
        one_output(jid, jid)
    return finish(api_p, survivor, w3, redis)


def finish(*procs):
    for p in procs:
        if p.poll() is None:
            st = stop(p)
            if p.args[0] == BIN:
                check(st == 0, "%s exits cleanly on SIGTERM (%s)" % (p.args[1], st))
    print("%d failure(s)" % len(FAILS))
    return 1 if FAILS else 0


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        for p in PROCS:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(TMP, ignore_errors=True)
    sys.exit(rc)
