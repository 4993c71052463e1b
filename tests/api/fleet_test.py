#!/usr/bin/env python3
"""Live sessions across machines (serve --redis): three nodes of one session place each
(--max-sessions 1) on a redis-server this test starts. A full node's offer is proxied to a node
with room and answered with that node's SDP; the session lives there, and requests for it
sent to the first node (speech, is_speaking, SSE, DELETE) reach it; with --fleet-redirect a
full node answers 307 instead; all full → 503; a node stopped (SIGTERM) leaves the registry at
once, one killed -9 after its TTL (its sessions then 502); Redis gone → a node still serves its
own sessions and logs the outage once. usage: fleet_test.py FACECAST_BINARY"""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import api_test  # noqa: E402  (its helpers; BIN is argv[1] there too)
from api_test import Client, check, free_port, is_error, multipart, offer_sdp, stop, wav_bytes  # noqa: E402

BIN = sys.argv[1]


def redis_cmd(port, *args):
    """One command to the test's redis-server (RESP by hand): the raw reply."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    out = f"*{len(args)}\r\n".encode()
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out += f"${len(a)}\r\n".encode() + a + b"\r\n"
    s.sendall(out)
    reply = s.recv(65536)
    s.close()
    return reply


def start_redis(tmp):
    exe = shutil.which("redis-server")
    if not exe:
        raise SystemExit("FAIL: redis-server not found: install Debian's redis-server package "
                         "(scripts/deps.sh)")
    port = free_port()
    p = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no", "--dir", tmp], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return p, port
        except OSError:
            time.sleep(0.05)
    p.kill()
    raise SystemExit("FAIL: redis-server did not listen")


class Node:
    """A `facecast serve --redis` node; its log kept for the checks."""

    def __init__(self, redis_port, *extra, port=0):
        env = dict(os.environ, FACECAST_DATA_DIR=api_test.DATA_DIR)
        self.log = []
        self.p = subprocess.Popen([BIN, "serve", "--host", "127.0.0.1", "--port", str(port), "--quiet",
                                   "--max-sessions", "1", "--redis",
                                   f"redis://127.0.0.1:{redis_port}", *extra],
                                  stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.p.stderr.readline()
            self.log.append(line)
            m = re.search(r"serving on http://[^:]+:(\d+)/", line)
            if m:
                self.port = int(m.group(1))
                self.c = Client(self.port)
                threading.Thread(target=self._drain, daemon=True).start()
                return
            if not line and self.p.poll() is not None:
                break
        self.p.kill()
        raise SystemExit("node did not start:\n" + "".join(self.log))

    def _drain(self):
        for line in self.p.stderr:
            self.log.append(line)
            sys.stderr.write(f"node {self.port}: " + line)

    def fleet(self):
        st, js, _, _ = self.c.req("GET", "/api/fleet")
        return js["data"] if st == 200 and js else None

    def sessions(self):
        st, js, _, _ = self.c.req("GET", "/api/admin/sessions")
        return [s["sessionid"] for s in js["data"]["sessions"]] if st == 200 else None


def wait_for(pred, timeout):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    return None


def offer(node):
    return node.c.post("/offer", {"sdp": offer_sdp(), "type": "offer"})


def sse_open(port, sid):
    """GET /sse through a raw socket: the bytes read on a thread into a list."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(f"GET /sse?sessionid={sid} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    got = []

    def read():
        while True:
            try:
                d = s.recv(65536)
            except OSError:
                return
            if not d:
                return
            got.append(d)
    threading.Thread(target=read, daemon=True).start()
    return s, got


def main():
    for args, what in ((["--node-url", "http://x:1"], "--node-url without --redis"),
                       (["--fleet-redirect"], "--fleet-redirect without --redis"),
                       (["--redis", "http://127.0.0.1:6379"], "a --redis URL that is not redis://"),
                       (["--redis", "redis://127.0.0.1:1", "--node-url", "ftp://x/"], "a --node-url that is not http(s)")):
        r = subprocess.run([BIN, "serve", "--port", "0", "--quiet", *args], capture_output=True, text=True, timeout=60)
        check(r.returncode == 2 and "error" in r.stderr, f"refused at start: {what} ({r.returncode}: {r.stderr.strip()[-120:]})")
    tmp = tempfile.mkdtemp(prefix="fc_fleet_")
    redis, rport = start_redis(tmp)
    nodes = []
    try:
        a = Node(rport)
        b = Node(rport)
        cport = free_port()
        c = Node(rport, "--fleet-redirect", "--node-url", f"http://localhost:{cport}/", port=cport)
        nodes += [a, b, c]
        urls = {f"http://127.0.0.1:{a.port}", f"http://127.0.0.1:{b.port}", f"http://localhost:{cport}"}
        seen = wait_for(lambda: all({x["url"] for x in (n.fleet() or {}).get("nodes", [])} == urls
                                    for n in nodes), 10)
        check(seen, "the three nodes see each other in the registry (GET /api/fleet)")
        f = a.fleet()
        check(f and f["redis"] is True and f["node"]["url"] == f"http://127.0.0.1:{a.port}" and
              c.fleet()["node"]["url"] == f"http://localhost:{cport}" and
              all(x["max_sessions"] == 1 and x["free"] == 1 for x in f["nodes"]),
              "each node registered with its URL and its places")

        # --fleet-redirect: C full → 307 to a node with room, the offer not taken
        st, js, _, _ = offer(c)
        check(st == 200 and js.get("type") == "answer", "first offer to C: answered by C")
        sid_c = js.get("sessionid") if js else None
        check(c.sessions() == [sid_c], "C holds its session")
        wait_for(lambda: any(x["free"] == 0 and x["url"].endswith(f":{c.port}")
                             for x in a.fleet()["nodes"]), 5)
        st, js, _, r = offer(c)
        loc = r.getheader("Location") or ""
        check(st == 307 and loc in (f"http://127.0.0.1:{a.port}/offer", f"http://127.0.0.1:{b.port}/offer"),
              f"C full, --fleet-redirect: 307 to a node with room ({st} {loc})")
        check(c.sessions() == [sid_c], "the redirected offer made no session on C")

        # proxied offers: A full → B, and B's answer comes back through A. A node that claims
        # the most room but does not answer (a record put in Redis by the test, its port
        # closed) is tried first and skipped; a mangled record is not routed to at all.
        st, js, _, _ = offer(a)
        sid_a = js.get("sessionid") if js else None
        check(st == 200 and a.sessions() == [sid_a], "first offer to A: the session is on A")
        ghost = "ffffffff00000001"
        redis_cmd(rport, "SET", f"facecast:fleet:node:{ghost}",
                  '{"id":"%s","url":"http://127.0.0.1:%d","max_sessions":100,"sessions":0,"free":100}'
                  % (ghost, free_port()), "PX", "60000")
        redis_cmd(rport, "SET", "facecast:fleet:node:ffffffff00000002", '{"id":"nope", "url": 5}', "PX", "60000")
        redis_cmd(rport, "SADD", "facecast:fleet:nodes", ghost, "ffffffff00000002")
        seen = wait_for(lambda: any(x["id"] == ghost for x in a.fleet()["nodes"]), 5)
        check(seen and not any(x["id"] == "ffffffff00000002" for x in a.fleet()["nodes"]),
              "a node record in Redis is read; a mangled one is ignored")
        st, js, raw, r = offer(a)
        sid_b = js.get("sessionid") if isinstance(js, dict) else None
        check(st == 200 and js.get("type") == "answer" and "v=0" in js.get("sdp", "") and sid_b,
              "A full: the second offer to A is answered (200, an SDP answer), past the node that does not answer")
        check(sid_b and b.sessions() == [sid_b] and a.sessions() == [sid_a],
              "that session lives on B, not on A")
        check(r.getheader("Content-Type", "").startswith("application/json"),
              "the proxied answer keeps its Content-Type")
        redis_cmd(rport, "DEL", f"facecast:fleet:node:{ghost}", "facecast:fleet:node:ffffffff00000002")
        gone = wait_for(lambda: not any(x["id"] == ghost for x in a.fleet()["nodes"]), 5)
        check(gone, "records gone from Redis leave the registry")

        # session requests through A reach B: SSE, speech, is_speaking
        s, got = sse_open(a.port, sid_b)
        time.sleep(0.3)
        st, js, _, _ = a.c.post("/human", {"sessionid": sid_b, "text": "Hello from the other node.",
                                           "type": "echo"})
        check(st == 200 and js and js.get("code") == 0, f"POST /human to A for B's session: 200 ({st} {js})")
        speaking = wait_for(lambda: a.c.post("/is_speaking", {"sessionid": sid_b})[1].get("data") is True, 10)
        check(speaking, "is_speaking through A turns true (B speaks)")
        st, js, _, _ = b.c.post("/is_speaking", {"sessionid": sid_b})
        check(st == 200 and js["data"] is True, "B itself says its session speaks (the text went there)")
        ev = wait_for(lambda: b'"type":"start"' in b"".join(got), 10)
        s.close()
        head = b"".join(got)
        check(ev and b"text/event-stream" in head, "SSE through A carries B's speech events")
        st, js, _, _ = a.c.post("/interrupt_talk", {"sessionid": sid_b})
        check(st == 200, "POST /interrupt_talk through A: 200")
        body, ct = multipart({"file": ("a.wav", wav_bytes(0.5)), "sessionid": (None, sid_b.encode())})
        st, js, _, _ = a.c.req("POST", "/humanaudio", body, ctype=ct)
        check(st == 200 and js.get("code") == 0, f"POST /humanaudio (a form) through A: 200 ({st} {js})")
        st, js, _, _ = a.c.post("/record", {"sessionid": sid_b, "type": "start_record"})
        check(st == 200 and js.get("code") == 0, "start_record through A")
        time.sleep(1.5)
        st, js, _, _ = a.c.post("/record", {"sessionid": sid_b, "type": "end_record"})
        check(st == 200 and js["data"]["url"] == f"/record/{sid_b}", "end_record through A")
        st, _, mp4, r = a.c.req("GET", f"/record/{sid_b}")
        st2, _, direct, _ = b.c.req("GET", f"/record/{sid_b}")
        check(st == 200 and mp4[4:8] == b"ftyp" and mp4 == direct and
              r.getheader("Content-Length") == str(len(mp4)) and r.getheader("Content-Type") == "video/mp4",
              f"GET /record/{{id}} through A: B's MP4, byte for byte ({len(mp4)} bytes)")
        st, _, body, _ = a.c.req("GET", "/metrics")
        m = re.search(rb'facecast_fleet_proxied_total\{kind="session"\} (\d+)', body)
        m2 = re.search(rb'facecast_fleet_proxied_total\{kind="offer"\} (\d+)', body)
        check(m and int(m.group(1)) >= 3 and m2 and int(m2.group(1)) == 1,
              "A's /metrics counts the proxied offer and session requests")

        # unknown sessions stay 404, on every route
        nope = str(uuid.uuid4())
        st, js, _, _ = a.c.post("/human", {"sessionid": nope, "text": "hi", "type": "echo"})
        check(is_error(st, js, 404), "unknown session: 404 (/human)")
        st, js, _, _ = a.c.req("GET", f"/sse?sessionid={nope}")
        check(is_error(st, js, 404), "unknown session: 404 (/sse)")
        st, js, _, _ = a.c.req("DELETE", f"/session/{nope}")
        check(is_error(st, js, 404), "unknown session: 404 (DELETE /session)")

        # every place taken → 503 JSON, on any node
        wait_for(lambda: all(x["free"] == 0 for x in a.fleet()["nodes"]), 5)
        st, js, _, _ = offer(a)
        check(is_error(st, js, 503), f"all nodes full: offer to A → 503 JSON ({st})")
        st, js, _, _ = offer(b)
        check(is_error(st, js, 503), f"all nodes full: offer to B → 503 JSON ({st})")

        # DELETE through A closes B's session; B's place is offered again
        st, js, _, _ = a.c.req("DELETE", f"/session/{sid_b}")
        check(st == 200 and b.sessions() == [], "DELETE /session through A closes B's session")
        st, js, _, _ = a.c.post("/human", {"sessionid": sid_b, "text": "hi", "type": "echo"})
        check(is_error(st, js, 404), "the deleted session: 404 through A")
        wait_for(lambda: any(x["free"] == 1 for x in a.fleet()["nodes"]), 5)
        st, _, body, r = a.c.req("POST", "/whep", offer_sdp(), ctype="application/sdp")
        loc = r.getheader("Location") or ""
        sid_w = loc.rsplit("/", 1)[-1]
        check(st == 201 and loc.startswith("/whep/") and body.startswith(b"v=0") and b.sessions() == [sid_w],
              f"WHEP to full A: B's 201, Location and SDP answer ({st} {loc})")
        st, js, _, _ = a.c.req("DELETE", loc)
        check(st == 200 and b.sessions() == [], "DELETE /whep/{id} through A ends it on B")
        wait_for(lambda: any(x["free"] == 1 for x in a.fleet()["nodes"]), 5)
        st, js, _, _ = offer(a)
        sid_x = js.get("sessionid") if isinstance(js, dict) else None
        st, js, _, _ = a.c.post(f"/api/admin/sessions/{sid_x}/stop", None)
        check(st == 200 and js["data"]["closed"] is True and b.sessions() == [],
              f"POST /api/admin/sessions/{{id}}/stop through A closes B's session ({st})")
        wait_for(lambda: any(x["free"] == 1 for x in a.fleet()["nodes"]), 5)
        st, js, _, _ = offer(a)
        sid_b2 = js.get("sessionid") if isinstance(js, dict) else None
        check(st == 200 and b.sessions() == [sid_b2], "the freed place on B takes A's next offer")

        # SIGTERM: C deregisters at once (well before its 5 s TTL)
        t0 = time.time()
        check(stop(c.p) == 0, "C stops cleanly on SIGTERM")
        gone = wait_for(lambda: not any(x["url"].endswith(f":{c.port}") for x in a.fleet()["nodes"]), 4)
        check(gone and time.time() - t0 < 4, "a stopped node leaves the registry at once")

        # A full again with a fresh session (one whose peer never connects is closed after
        # 30 s, and a slow run must not find A with room where it expects it full)
        a.c.req("DELETE", f"/session/{sid_a}")
        st, js, _, _ = offer(a)
        sid_a = js.get("sessionid") if isinstance(js, dict) else None
        check(st == 200 and a.sessions() == [sid_a], "a new offer to A, which has room again: on A")

        # kill -9: B expires after its TTL; A stops routing there
        b.p.kill()
        b.p.wait()
        gone = wait_for(lambda: not any(x["url"].endswith(f":{b.port}") for x in a.fleet()["nodes"]), 10)
        check(gone, "a node killed -9 leaves the registry after its TTL")
        st, js, _, _ = offer(a)
        check(is_error(st, js, 503), f"A full, B gone: offer → 503 JSON ({st})")
        st, js, _, _ = a.c.post("/human", {"sessionid": sid_b2, "text": "hi", "type": "echo"})
        check(is_error(st, js, 502) and "gone" in js["msg"], f"B's session through A: 502 JSON, the node gone ({st} {js})")

        # Redis down: A serves its own session; routing pauses, logged once
        redis.terminate()
        redis.wait(10)
        wait_for(lambda: a.fleet() and a.fleet()["redis"] is False, 10)
        time.sleep(2.5)  # a few beats without Redis
        st, js, _, _ = a.c.post("/human", {"sessionid": sid_a, "text": "Still here.", "type": "echo"})
        check(st == 200 and js.get("code") == 0, "Redis down: A still serves its own session (/human)")
        st, js, _, _ = a.c.post("/is_speaking", {"sessionid": sid_a})
        check(st == 200, "Redis down: /is_speaking of A's session")
        st, js, _, _ = a.c.post("/human", {"sessionid": nope, "text": "hi", "type": "echo"})
        check(is_error(st, js, 503), f"Redis down: a session not held here → 503 JSON ({st})")
        st, js, _, _ = offer(a)
        check(is_error(st, js, 503), "Redis down, A full: offer → 503 JSON")
        outage = [l for l in a.log if "Redis does not answer" in l]
        check(len(outage) == 1, f"the outage is logged once ({len(outage)} lines)")
        # Redis back (empty, as after a restart without persistence): A registers again
        redis = subprocess.Popen([shutil.which("redis-server"), "--port", str(rport), "--bind", "127.0.0.1",
                                  "--save", "", "--appendonly", "no", "--dir", tmp],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        back = wait_for(lambda: (a.fleet() or {}).get("redis") and
                        [x["url"] for x in a.fleet()["nodes"]] == [f"http://127.0.0.1:{a.port}"], 10)
        check(back, "Redis back: A registers again and sees itself")
        key = redis_cmd(rport, "GET", f"facecast:fleet:session:{sid_a}")
        check(a.fleet()["node"]["id"].encode() in key, f"Redis back: A's session key is written again ({key!r})")
        st, js, _, _ = a.c.post("/human", {"sessionid": nope, "text": "hi", "type": "echo"})
        check(is_error(st, js, 404), "Redis back: an unknown session is 404 again")
        check(len([l for l in a.log if "Redis answers again" in l]) == 1, "the recovery is logged once")
        check(stop(a.p) == 0, "A stops cleanly")
    finally:
        for n in nodes:
            if n.p.poll() is None:
                n.p.kill()
        if redis.poll() is None:
            redis.kill()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(api_test.DATA_DIR, ignore_errors=True)
    print(f"{len(api_test.FAILS)} failed" if api_test.FAILS else "all fleet checks passed")
    sys.exit(1 if api_test.FAILS else 0)


if __name__ == "__main__":
    main()
