#!/usr/bin/env python3
"""`facecast serve` under hostile and long-running traffic: no leaked connections, no crash on
deep JSON, every input capped before it is buffered, server paths only under --media-dir,
sessions that belong to whoever made them (API keys), connection handling (backlog, timeouts,
per-client cap, running out of descriptors), TLS, and the small ones. Each check failed on the
build before the hardening (issue 13). usage: hardening_test.py FACECAST_BINARY"""
import http.client
import json
import os
import re
import resource
import signal
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import api_test as A  # noqa: E402  (helpers: start_server, Client, offer_sdp, multipart, ...)
from api_test import check  # noqa: E402

BIN = sys.argv[1]
ASTRO_DIR = os.path.dirname(A.ASTRONAUT)


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        m = re.search(r"VmRSS:\s+(\d+) kB", f.read())
    return int(m.group(1)) / 1024 if m else 0


def settle_fds(pid, want, timeout=5.0):
    t0 = time.time()
    while time.time() - t0 < timeout:
        n = fds(pid)
        if n <= want:
            return n
        time.sleep(0.1)
    return fds(pid)


def raw(port, data, timeout=5.0, tls=None):
    """Sends raw bytes, returns (status or None, body bytes, whole answer). A large request is
    sent from a thread while this one reads: a server that answers without reading the body
    and closes leaves the sender blocked on a full window, and the reset that the close sends
    would otherwise reach the client before it ever read the answer (seen once under TSan)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if tls:
        s = tls.wrap_socket(s, server_hostname="localhost")
    got = b""

    def send():
        try:
            s.sendall(data)
        except (OSError, ValueError):  # reset, closed under it: the answer is what counts
            pass

    sender = None
    try:
        if len(data) > 65536 and not tls:
            sender = threading.Thread(target=send, daemon=True)
            sender.start()
        else:
            s.sendall(data)
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
            if b"\r\n\r\n" in got:
                head, _, body = got.partition(b"\r\n\r\n")
                m = re.search(rb"Content-Length: (\d+)", head, re.I)
                if m and len(body) >= int(m.group(1)):
                    break
    except (socket.timeout, ConnectionResetError, BrokenPipeError):
        pass
    finally:
        if sender:
            try:
                s.shutdown(socket.SHUT_RDWR)  # unblocks the sender
            except OSError:
                pass
            sender.join(timeout)
        s.close()
    m = re.match(rb"HTTP/1\.1 (\d+)", got)
    return (int(m.group(1)) if m else None), got.partition(b"\r\n\r\n")[2], got


def spawn(*args, env=None, preexec_fn=None, scheme="http"):
    """`facecast serve` on 127.0.0.1, any port: (process, port or None, its log lines so far and
    from then on, read by a thread)."""
    e = dict(os.environ, FACECAST_DATA_DIR=A.DATA_DIR)
    e.update(env or {})
    p = subprocess.Popen([BIN, "serve", "--host", "127.0.0.1", "--port", "0", "--quiet", *args],
                         stderr=subprocess.PIPE, text=True, env=e, preexec_fn=preexec_fn)
    log, port, t0 = [], None, time.time()
    while time.time() - t0 < 30 and port is None:
        line = p.stderr.readline()
        log.append(line)
        m = re.search(scheme + r"://[^:]+:(\d+)/", line)
        port = int(m.group(1)) if m and "serving on" in line else None
        if not line and p.poll() is not None:
            break
    # what the server says from here on is kept, and shown (sanitizer reports, warnings)
    threading.Thread(target=lambda: [log.append(l) or sys.stderr.write("server: " + l) for l in p.stderr],
                     daemon=True).start()
    return p, port, log


def json_err(body):
    try:
        js = json.loads(body)
        return js.get("code") == -1 and isinstance(js.get("msg"), str)
    except ValueError:
        return False


def connections(port, pid):
    """1. Thousands of short requests of every shape leave no descriptor behind."""
    for _ in range(20):  # warm up whatever the first requests allocate for good
        A.Client(port).req("GET", "/healthz")
    time.sleep(0.5)
    base = fds(pid)
    n = 0
    for _ in range(1000):  # a new connection per request, closed by the client
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/healthz")
        c.getresponse().read()
        c.close()
        n += 1
    for _ in range(250):  # keep-alive: four requests a connection, then the client closes
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        for _ in range(4):
            c.request("GET", "/healthz")
            c.getresponse().read()
            n += 1
        c.close()
    for _ in range(500):  # Connection: close
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/healthz", headers={"Connection": "close"})
        c.getresponse().read()
        c.close()
        n += 1
    for i in range(300):  # connect and go; half a request and go; reset
        s = socket.create_connection(("127.0.0.1", port))
        if i % 3 == 1:
            s.sendall(b"GET /heal")
        if i % 3 == 2:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    for _ in range(50):  # bodies refused before they are read
        raw(port, b"POST /human HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 9000000\r\n\r\n" + b"x" * 1000)
    after = settle_fds(pid, base)
    check(after <= base, f"{n} requests + 350 broken connections: descriptors back to {base} ({after})")
    ss = subprocess.run(["ss", "-tan", "state", "close-wait", f"( sport = :{port} )"],
                        capture_output=True, text=True).stdout
    check(ss.count("\n") <= 1, "no connection left in CLOSE-WAIT")


def deep_json(c, port, sid):
    """2. Deeply nested JSON is refused before json-glib recurses."""
    deep = "[" * 75000
    for path in ("/offer", "/human", "/interrupt_talk", "/is_speaking", "/set_audiotype", "/record",
                 "/api/render", "/api/avatar/task"):
        st, js, _, _ = c.req("POST", path, deep)
        check(A.is_error(st, js, 400) and "deep" in js["msg"], f"75,000 '[' to {path}: 400 ({st})")
    # brackets hidden in a comment or a single-quoted string (json-glib takes both) still count
    for body, what in (("{/*" + "]" * 120000 + "*/\"b\":" + "[" * 120000, "a comment"),
                       ("{'a':'" + "]" * 120000 + "','b':" + "[" * 120000, "single quotes"),
                       ("]" * 10 + "[" * 40, "closing brackets first")):
        st, js, _, _ = c.req("POST", "/human", body)
        check(A.is_error(st, js, 400), f"deep nesting behind {what}: 400 ({st})")
    st, js, _, _ = c.post("/human", {"sessionid": sid, "text": "x", "extra": [[[[1]]]]})
    check(st in (200, 400, 413) and js and js["code"] in (0, -1), "shallow nesting still parses")
    st, js, _, _ = c.req("GET", "/healthz")
    check(st == 200, "server alive after deep JSON")


def caps(c, port, pid, sid):
    """3. Every input has a cap enforced before it is buffered; errors never echo input."""
    r0 = rss_mb(pid)
    st, body, _ = raw(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n\r\n" +
                      b"y" * 65536)
    check(st == 413 and json_err(body), f"GET with a 1 GiB body: 413 at once ({st})")
    st, body, _ = raw(port, b"GET /index.html HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                            b"4\r\nabcd\r\n0\r\n\r\n")
    check(st == 413 and json_err(body), f"GET of a page with a chunked body: 413 ({st})")
    # a request libsoup refuses by itself (a NUL in its path): its body is not read either
    st, body, _ = raw(port, b"POST /%00 HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999999\r\n\r\n" +
                      b"z" * 1000000)
    check(st == 400 and json_err(body), f"POST /%00 with a huge body: 400 JSON at once ({st})")
    # a form whose last part runs into its closing boundary: libsoup's own parser made it a part
    # of (gsize)-2 bytes (found by tests/fuzz/fuzz_multipart.c)
    form = (b"--XyZ\r\nContent-Disposition: form-data; name=\"avatar_id\"\r\n\r\n97\r\n--XyZ\r\n"
            b"Content-Disposition: form-data; name=\"file\"; filename=\"f.png\"\r\n\r\n--XyZ--\r\n")
    st, js, _, _ = c.req("POST", "/api/avatar/task", form, ctype="multipart/form-data; boundary=XyZ")
    check(A.is_error(st, js, 400), f"a form cut at its closing boundary: 400 ({st})")
    big = json.dumps({"avatar_id": "a", "image_path": "/" + "p" * 300000})
    st, js, data, _ = c.req("POST", "/api/avatar/task", big)
    check(A.is_error(st, js, 413) and len(data) < 1000,
          f"avatar task JSON over 256 KiB: 413, short answer ({st}, {len(data)} bytes)")
    mid = json.dumps({"avatar_id": "a", "image_path": "/" + "p" * 200000})
    st, js, data, _ = c.req("POST", "/api/avatar/task", mid)
    check(st >= 400 and len(data) < 1000, f"a 200 KB path is not echoed back ({len(data)} bytes)")
    st, js, data, _ = c.post("/offer", {"sdp": "v=0\r\n" + "a=x\r\n" * 40000, "type": "offer"})
    check(st >= 400 and len(data) < 1000, f"a 200 KB SDP's error is short ({len(data)} bytes)")
    # a WebSocket message of 64 KiB fragments without end: closed past 1 MiB
    ws, st, rest = A.ws_connect(port, f"/ws/audio?sessionid={sid}")
    check(st == 101, "WS upgrade")
    frag = b"\x00" * 65536
    closed = False
    try:
        for i in range(64):  # 4 MiB offered
            op = 0x02 if i == 0 else 0x00  # binary, then continuations; FIN never set
            hdr = bytes([op, 0x80 | 127]) + struct.pack(">Q", len(frag)) + b"\x00\x00\x00\x00"
            ws.sendall(hdr + frag)
    except (BrokenPipeError, ConnectionResetError):
        closed = True
    if not closed:
        ws.settimeout(3)
        try:
            closed = ws.recv(4096) == b""
        except (ConnectionResetError, socket.timeout):
            closed = True
    ws.close()
    check(closed, "WS message growing past 1 MiB: connection closed")
    time.sleep(0.3)
    check(rss_mb(pid) - r0 < 40, f"memory after the caps: +{rss_mb(pid) - r0:.0f} MB")
    st, js, _, _ = c.req("GET", "/healthz")
    check(st == 200, "server alive after the caps")


def server_paths(port_open, data_dir):
    """4. Server paths only under --media-dir; ids never replaced by accident; no FIFO hang."""
    c = A.Client(port_open)
    for p in ("/etc/passwd", "/etc/no-such-file", A.ASTRONAUT):
        st, js, _, _ = c.post("/api/avatar/task", {"avatar_id": "p1", "image_path": p})
        check(A.is_error(st, js, 403), f"no --media-dir: {p} refused, 403 ({st})")
    media = tempfile.mkdtemp(prefix="fc_media_")
    fifo = os.path.join(media, "pipe.png")
    os.mkfifo(fifo)
    os.symlink("/etc/passwd", os.path.join(media, "link.png"))
    os.symlink(A.ASTRONAUT, os.path.join(media, "astro.png"))  # resolves outside: refused too
    import shutil
    shutil.copy(A.ASTRONAUT, os.path.join(media, "face.png"))
    proc, port = A.start_server("--media-dir", media)
    c = A.Client(port)
    try:
        st, js, _, _ = c.post("/api/avatar/task", {"avatar_id": "p2", "image_path": "/etc/passwd"})
        check(A.is_error(st, js, 403), "outside the media folder: 403")
        st, js, _, _ = c.post("/api/avatar/task", {"avatar_id": "p2", "image_path": media + "/../../etc/passwd"})
        check(A.is_error(st, js, 403), "dot-dot out of the media folder: 403")
        st, js, _, _ = c.post("/api/avatar/task", {"avatar_id": "p2", "image_path": media + "/link.png"})
        check(A.is_error(st, js, 403), "symlink out of the media folder: 403")
        t0 = time.time()
        st, js, _, _ = c.post("/api/avatar/task", {"avatar_id": "p2", "image_path": fifo})
        check(A.is_error(st, js, 400) and time.time() - t0 < 5, f"a FIFO: 400 at once ({st})")
        st, js, _, _ = c.post("/api/avatar/task", {"avatar_id": "default", "image_path": media + "/face.png"})
        check(A.is_error(st, js, 409), "'default' cannot be replaced: 409")
        st, js, _, _ = c.post("/api/avatar/task", {"avatar_id": "mine", "image_path": media + "/face.png"})
        check(st == 200, "a file in the media folder: accepted")
        st2, js2, _ = A.wait_task(c, js["data"]["task_id"]) if st == 200 else (0, None, None)
        check(js2 and js2["data"]["status"] == "completed", "its avatar made")
        pack = os.path.join(data_dir, "avatars", "mine.fcpack")
        mtime = os.path.getmtime(pack) if os.path.exists(pack) else 0
        st, js, _, _ = c.post("/api/avatar/task", {"avatar_id": "mine", "image_path": media + "/face.png"})
        check(A.is_error(st, js, 409) and "overwrite" in js["msg"], "same id again: 409 (names overwrite)")
        body, ctype = A.multipart({"avatar_id": (None, b"mine"), "file": ("f.png", open(media + "/face.png", "rb").read())})
        st, js, _, _ = c.req("POST", "/api/avatar/task", body, ctype=ctype)
        check(A.is_error(st, js, 409), "same id by upload: 409")
        check(os.path.getmtime(pack) == mtime, "the pack was not touched")
        st, js, _, _ = c.post("/api/avatar/task", {"avatar_id": "mine", "image_path": media + "/face.png",
                                                   "overwrite": True})
        check(st == 200, "overwrite: true replaces it")
        if st == 200:
            A.wait_task(c, js["data"]["task_id"])
        # the task ids made from a long avatar id stay distinct (the fuzzer found the main loop
        # spinning on a truncated id that was taken)
        ids = []
        for k in range(3):  # 63-character ids that differ only at their end
            st, js, _, _ = c.post("/api/avatar/task", {"avatar_id": "L" * 62 + str(k),
                                                       "image_path": media + "/face.png"})
            ids.append(js["data"]["task_id"] if st == 200 else (st, js))
        check(None not in ids and len(set(ids)) == 3 and all(len(i) < 64 for i in ids),
              f"tasks of a 63-character avatar id: distinct task ids ({ids})")
        for i in ids:
            if i:
                A.wait_task(c, i)
        # SIGTERM while a task is queued behind a running one: the server still exits
        c.post("/api/avatar/task", {"avatar_id": "t1", "image_path": media + "/face.png"})
        c.post("/api/avatar/task", {"avatar_id": "t2", "image_path": media + "/face.png"})
    finally:
        rc = A.stop(proc, 30)
    check(rc == 0, f"SIGTERM with tasks in flight: exits ({rc})")
    shutil.rmtree(media, ignore_errors=True)


def keys_and_sessions():
    """5. Sessions belong to whoever made them; API keys on control routes."""
    d = tempfile.mkdtemp(prefix="fc_keys_")
    kf = os.path.join(d, "keys")
    r1 = subprocess.run([BIN, "keys", "add", "alice", "--file", kf], capture_output=True, text=True)
    r2 = subprocess.run([BIN, "keys", "add", "bob", "--file", kf], capture_output=True, text=True)
    alice, bob = r1.stdout.strip(), r2.stdout.strip()
    text = open(kf).read() if os.path.exists(kf) else ""
    check(r1.returncode == 0 and re.fullmatch(r"fck_[A-Za-z0-9_-]{43}", alice) is not None,
          "keys add prints a key")
    check(alice not in text and re.search(r"^alice [0-9a-f]{64}$", text, re.M) is not None,
          "the keys file holds a hash, not the key")
    check(oct(os.stat(kf).st_mode & 0o777) == "0o600", "keys file is private (0600)")
    r = subprocess.run([BIN, "keys", "add", "alice", "--file", kf], capture_output=True, text=True)
    check(r.returncode == 2 and r.stderr.count("\n") == 1, "a second 'alice': one line, exit 2")
    r = subprocess.run([BIN, "keys", "list", "--file", kf], capture_output=True, text=True)
    check(r.stdout.split() == ["alice", "bob"], "keys list")
    proc, port = A.start_server("--api-keys", kf, "--max-sessions", "4")
    c = A.Client(port)
    try:
        A_ = {"Authorization": "Bearer " + alice}
        B_ = {"Authorization": "Bearer " + bob}
        st, js, _, r = c.req("POST", "/offer", {"sdp": A.offer_sdp(), "type": "offer"})
        check(A.is_error(st, js, 401) and r.getheader("WWW-Authenticate", "").startswith("Bearer"),
              "no key: 401 JSON with WWW-Authenticate")
        st, js, _, _ = c.req("POST", "/offer", {"sdp": A.offer_sdp(), "type": "offer"},
                             headers={"Authorization": "Bearer fck_wrong"})
        check(A.is_error(st, js, 401), "wrong key: 401")
        st, js, _, _ = c.req("GET", "/metrics")
        check(A.is_error(st, js, 401), "/metrics needs a key")
        for path in ("/api/avatar/tasks", "/api/avatars", "/api/avatar/task/x", "/api/render/x"):
            st, js, _, _ = c.req("GET", path)
            check(A.is_error(st, js, 401), f"GET {path} needs a key ({st})")
        st, js, _, _ = c.req("GET", "/healthz")
        check(st == 200, "/healthz stays open")
        st, _, body, _ = c.req("GET", "/")
        check(st == 200 and b"<html" in body.lower(), "the page stays open")
        st, js, _, _ = c.req("POST", "/offer", {"sdp": A.offer_sdp(), "type": "offer"}, headers=A_)
        sid = js.get("sessionid", "") if st == 200 else ""
        check(st == 200 and re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", sid),
              f"alice's offer: a random UUID session id ({sid})")
        st, js, _, _ = c.req("POST", "/human", {"sessionid": sid, "text": "Mine.", "type": "echo"}, headers=B_)
        check(A.is_error(st, js, 404), "bob cannot speak through alice's session (404)")
        st, js, _, _ = c.req("DELETE", "/session/" + sid, headers=B_)
        check(A.is_error(st, js, 404), "bob cannot delete it")
        st, js, _, _ = c.req("POST", "/record", {"sessionid": sid, "type": "start_record"}, headers=B_)
        check(A.is_error(st, js, 404), "bob cannot record it")
        st, js, _, _ = c.req("POST", "/human", {"sessionid": sid, "text": "Mine.", "type": "echo"}, headers=A_)
        check(st == 200, "alice can")
        st, js, _, _ = c.req("GET", "/sse?sessionid=" + sid, headers={"Authorization": "Bearer " + bob})
        check(A.is_error(st, js, 404), "bob's key on alice's event stream: 404")
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(f"GET /sse?sessionid={sid} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        head = s.recv(4096)
        s.close()
        check(b"200 OK" in head and b"text/event-stream" in head, "an EventSource with the id alone works")
        st, _, body, _ = c.req("GET", "/metrics", headers=A_)
        check(st == 200 and sid not in body.decode() and "facecast_session_frames_total{session=\"1\"}" in body.decode(),
              "/metrics names sessions by serial, never by id")
        st, js, _, _ = c.req("POST", "/api/render", {"text": "Alice's file."}, headers=A_)
        rid = js["data"]["task_id"] if st == 200 else "x"
        st, js, _, _ = c.req("GET", "/api/render/" + rid, headers=B_)
        check(A.is_error(st, js, 404), "bob cannot see alice's render")
        st, js, _, _ = c.req("DELETE", "/api/render/" + rid, headers=A_)
        st, js, _, _ = c.req("DELETE", "/session/" + sid, headers=A_)
        check(st == 200, "alice deletes her session")
    finally:
        proc.terminate()
        proc.wait(15)
    # an open server says so; ids are random and unlisted in /metrics there too
    p, _, log = spawn()
    p.terminate()
    p.wait(15)
    check("no API keys" in "".join(log), "an open server says so at start-up")
    r = subprocess.run([BIN, "serve", "--port", "0", "--api-keys", "/no/such/keys"], capture_output=True, text=True)
    check(r.returncode == 2 and "keys" in r.stderr, "serve with a missing keys file: exit 2")
    # the same from a config file (YAML: the long options as keys); the command line wins
    cfg = os.path.join(d, "facecast.yaml")
    with open(cfg, "w") as f:
        f.write(f"api_keys: {kf}\nmax_sessions: 1\nmetrics_session_ids: false\n")
    proc, port = A.start_server("--config", cfg, "--max-sessions", "2")
    c = A.Client(port)
    st, js, _, _ = c.req("POST", "/offer", {"sdp": A.offer_sdp(), "type": "offer"})
    check(A.is_error(st, js, 401), "config api_keys: a key is needed")
    st, js, _, _ = c.req("GET", "/healthz")
    check(st == 200 and js["data"]["max_sessions"] == 2, "the command line overrides the config file")
    proc.terminate()
    proc.wait(15)
    with open(cfg, "w") as f:
        f.write("api_keys: [\n")
    r = subprocess.run([BIN, "serve", "--port", "0", "--config", cfg], capture_output=True, text=True)
    check(r.returncode == 2 and r.stderr.count("\n") == 1 and "facecast.yaml:" in r.stderr,
          "a malformed config file: one line naming it, exit 2")
    import shutil
    shutil.rmtree(d, ignore_errors=True)


def connection_handling():
    """6. Backlog, header/idle timeouts, per-client cap, recovery from running out of fds."""
    web = tempfile.mkdtemp(prefix="fc_web_")
    with open(os.path.join(web, "big.js"), "wb") as f:
        f.write(b"/* big */" + b" " * (64 << 20))
    proc, port = A.start_server("--header-timeout", "2", "--idle-timeout", "4", "--body-timeout", "2",
                                "--write-timeout", "2", "--web", web)
    pid = proc.pid
    try:
        results = []

        def one():
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=20)
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                got = b""
                while True:
                    b = s.recv(4096)
                    if not b:
                        break
                    got += b
                s.close()
                results.append(got.startswith(b"HTTP/1.1 200"))
            except OSError:
                results.append(False)
        ts = [threading.Thread(target=one) for _ in range(200)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        check(results.count(True) == 200, f"200 concurrent requests: all answered ({results.count(True)})")
        # the listen queue itself (ss shows a listening socket's backlog as Send-Q): libsoup's
        # was GLib's default of 10, which resets clients when the loop is busy
        ss = subprocess.run(["ss", "-ltnH", f"( sport = :{port} )"], capture_output=True, text=True).stdout.split()
        backlog = int(ss[2]) if len(ss) > 2 else 0
        somax = int(open("/proc/sys/net/core/somaxconn").read())
        check(backlog >= min(1024, somax), f"listen backlog {backlog} (somaxconn {somax})")
        # slowloris: a header line every second never finishes the headers
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        t0 = time.time()
        closed_at = None
        try:
            s.sendall(b"GET /healthz HTTP/1.1\r\n")
            for i in range(12):
                s.sendall(b"X-a%d: b\r\n" % i)
                time.sleep(0.5)
        except (BrokenPipeError, ConnectionResetError):
            closed_at = time.time() - t0
        if closed_at is None:
            try:
                s.settimeout(5)
                s.recv(100)
                closed_at = time.time() - t0
            except (socket.timeout, ConnectionResetError):
                closed_at = time.time() - t0
        s.close()
        check(closed_at is not None and closed_at < 5, f"slow headers: closed after the header timeout ({closed_at:.1f} s)")
        # a new connection that sends nothing is idle (a browser's preconnect), not slow
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        t0 = time.time()
        try:
            s.recv(10)
        except OSError:
            pass
        took = time.time() - t0
        s.close()
        check(3 < took < 7, f"a silent new connection: closed after the idle timeout, not the header one ({took:.1f} s)")
        # a client that stops reading a response
        # (the socket's own receive buffer: with a 4 KB one, what the server had queued before
        # its shutdown drained at the pace of TCP's window probes, ~40 s for 3 MiB)
        s = socket.create_connection(("127.0.0.1", port), timeout=15)
        s.sendall(b"GET /big.js HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(5)
        got, t0 = 0, time.time()
        try:
            while True:
                b = s.recv(1 << 20)
                if not b:
                    break
                got += len(b)
        except OSError:
            pass
        s.close()
        check(got < (64 << 20), f"a response nobody reads: cut after the write timeout ({got >> 20} of 64 MiB)")
        # a body that stops coming
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"POST /human HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\":")
        t0 = time.time()
        try:
            s.recv(100)
        except OSError:
            pass
        check(time.time() - t0 < 5, f"stalled body: closed after the body timeout ({time.time() - t0:.1f} s)")
        s.close()
        # an idle kept-alive connection is closed
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("GET", "/healthz")
        c.getresponse().read()
        t0 = time.time()
        c.sock.settimeout(8)
        try:
            gone = c.sock.recv(10) == b""
        except OSError:
            gone = True
        check(gone and 2 < time.time() - t0 < 6, f"idle keep-alive closed after the idle timeout ({time.time() - t0:.1f} s)")
        c.close()
        st, body, _ = raw(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        check(st == 200, "server answers after the timeouts")
        _, body, _ = raw(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        m = re.search(rb'facecast_http_closed_total\{reason="header_timeout"\} (\d+)', body)
        check(m is not None and int(m.group(1)) >= 1, "metrics count the timeouts")
        m = re.search(rb'facecast_http_closed_total\{reason="write_timeout"\} (\d+)', body)
        check(m is not None and int(m.group(1)) >= 1, "metrics count write timeouts")
    finally:
        proc.terminate()
        proc.wait(15)
        import shutil
        shutil.rmtree(web, ignore_errors=True)
    # per-client cap
    proc, port = A.start_server("--max-conns-per-client", "5")
    try:
        socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
        time.sleep(0.3)
        try:  # http.client: a body shorter than its Content-Length raises
            c6 = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c6.request("GET", "/healthz")
            r6 = c6.getresponse()
            st, body = r6.status, r6.read()
        except (OSError, http.client.HTTPException) as e:
            st, body = str(e), b""
        check(st == 429 and json_err(body), f"a 6th connection from one address: 429 JSON ({st})")
        for s in socks:
            s.close()
        time.sleep(0.5)
        st, _, _ = raw(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        check(st == 200, "after they close: served again")
    finally:
        proc.terminate()
        proc.wait(15)
    # out of file descriptors: told 503, and served again once connections close
    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (80, 80))
    p, port, _ = spawn("--max-conns-per-client", "0", preexec_fn=low_limit)
    socks, refused = [], 0
    for i in range(120):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            socks.append(s)
        except OSError:
            refused += 1
    time.sleep(0.5)
    st, body, _ = raw(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", timeout=3)
    check(st == 503 and json_err(body), f"out of descriptors: a new client is told 503 ({st})")
    for s in socks:
        s.close()
    time.sleep(1.5)
    ok = 0
    for _ in range(20):
        st, _, _ = raw(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        ok += st == 200
    check(ok == 20, f"descriptors back: the listener serves again ({ok}/20)")
    p.terminate()
    check(p.wait(15) == 0, "that server exits cleanly")


def small_ones(port, sid, pid, log):
    """7. Types, empty bodies, bad lengths, exit codes, leftovers, limits that say what they are."""
    c = A.Client(port)
    for body, what in (({"sessionid": sid, "text": "x", "type": 7}, "type 7"),
                       ({"sessionid": sid, "text": "x", "voice": 12}, "voice 12")):
        st, js, _, _ = c.post("/human", body)
        check(A.is_error(st, js, 400), f"/human {what}: 400 ({st})")
    st, js, _, _ = c.post("/offer", {"sdp": A.offer_sdp(), "type": "offer", "avatar": 5})
    check(A.is_error(st, js, 400), f"/offer avatar 5: 400 ({st})")
    st, js, _, _ = c.req("POST", "/human", "   \n ")
    check(A.is_error(st, js, 400), "a whitespace body: 400")
    time.sleep(0.3)
    check("CRITICAL" not in "".join(log), "no GLib CRITICAL in the log")
    for cl in (b"-1", b"1e30", b"12abc", b"1, 1"):
        st, body, _ = raw(port, b"POST /human HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                b"Content-Length: " + cl + b"\r\n\r\n{}", timeout=5)
        check(st is not None and 400 <= st < 500, f"Content-Length: {cl.decode()}: a 4xx answer ({st})")
    text = "Hello there, this is long. " * 9000
    st, js, _, _ = c.post("/human", {"sessionid": sid, "text": text, "type": "echo"})
    check(A.is_error(st, js, 413) and "8192" in js["msg"], f"a 243 KB text: 413 naming the limit ({js and js['msg']})")
    body, ct = A.multipart({"sessionid": (None, sid.encode()), "file": ("long.wav", A.wav_bytes(130.0))})
    st, js, _, _ = c.req("POST", "/humanaudio", body, ctype=ct)
    check(A.is_error(st, js, 429) and "at most 120 s" in js["msg"] and re.search(r"13\d\.\d s of speech", js["msg"]) is not None,
          f"130 s of speech over the 120 s queue: 429 saying both ({js and js['msg']})")
    # speech requests waiting for a worker are bounded per session
    c.post("/interrupt_talk", {"sessionid": sid})
    statuses = []

    def speak():
        st, _, _, _ = A.Client(port).post("/human", {"sessionid": sid, "text": "A sentence to say. " * 40,
                                                     "type": "echo", "interrupt": True})
        statuses.append(st)
    ts = [threading.Thread(target=speak) for _ in range(24)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    check(len(statuses) == 24 and statuses.count(429) >= 1 and all(x in (200, 429) for x in statuses),
          f"24 speech requests at once on one session: some wait, the rest 429 ({sorted(set(statuses))})")
    c.post("/interrupt_talk", {"sessionid": sid})
    d = tempfile.mkdtemp(prefix="fc_small_")
    bad = os.path.join(d, "bad.png")
    open(bad, "w").write("not an image")
    r = subprocess.run([BIN, "avatar", "create", "--from", bad, "--id", "bad"], capture_output=True, text=True,
                       env=dict(os.environ, FACECAST_DATA_DIR=d))
    check(r.returncode == 2 and r.stderr.count("\n") == 1, f"avatar create from junk: one line, exit 2 ({r.returncode})")
    out = os.path.join(d, "o.mp4")
    open(out + ".part", "w").write("left by a killed render")
    r = subprocess.run([BIN, "render", "--text", "Hi.", "-o", out, "--quiet"], capture_output=True, text=True)
    check(r.returncode == 0 and os.path.getsize(out) > 1000 and not os.path.exists(out + ".part"),
          "render over a leftover OUT.part: replaced, none left")
    os.makedirs(os.path.join(d, "avatars"), exist_ok=True)
    stale = os.path.join(d, "avatars", "x.fcpack.tmp.AbCdEf")
    open(stale, "w").write("left by a killed avatar create")
    p, _, log = spawn(env={"FACECAST_DATA_DIR": d})
    p.terminate()
    p.wait(15)
    said = "".join(log)
    check(not os.path.exists(stale) and "leftovers" in said, "serve sweeps a killed run's pack temp file")
    # a killed render's .part: kill -9 mid-render, the next render to that path cleans it
    long_text = "This sentence is long enough to render for a while. " * 40
    rp = subprocess.Popen([BIN, "render", "--text", long_text, "-o", out, "--quiet"])
    t0 = time.time()
    while time.time() - t0 < 20 and not os.path.exists(out + ".part"):
        time.sleep(0.05)
    time.sleep(0.5)
    rp.send_signal(signal.SIGKILL)
    rp.wait()
    left = os.path.exists(out + ".part")
    r = subprocess.run([BIN, "render", "--text", "Again.", "-o", out, "--quiet"], capture_output=True, text=True)
    check(left and r.returncode == 0 and not os.path.exists(out + ".part"),
          "kill -9 during render leaves OUT.part; the next render takes it over")
    import shutil
    shutil.rmtree(d, ignore_errors=True)


def tls():
    """8. HTTPS with --tls-cert/--tls-key."""
    d = tempfile.mkdtemp(prefix="fc_tls_")
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                       capture_output=True)
    check(r.returncode == 0, "test certificate made")
    # Under the sanitizers: LeakSanitizer's own tracer crashes at exit once GnuTLS has run its
    # handshake threads (glib-networking), so leaks are not checked in this one process.
    p, port, _ = spawn("--tls-cert", cert, "--tls-key", key, "--header-timeout", "3", scheme="https",
                       env={"ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "").replace("detect_leaks=1", "detect_leaks=0")})
    check(port is not None, "serve --tls-cert: serving on https://")
    if port:
        ctx = ssl.create_default_context(cafile=cert)
        c = http.client.HTTPSConnection("localhost", port, context=ctx, timeout=10)
        c.request("GET", "/healthz")
        r = c.getresponse()
        js = json.loads(r.read())
        check(r.status == 200 and js["code"] == 0, "GET /healthz over HTTPS (certificate verified)")
        c.request("POST", "/offer", body=json.dumps({"sdp": A.offer_sdp(), "type": "offer"}),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        js = json.loads(r.read())
        check(r.status == 200 and js.get("type") == "answer", "an offer over HTTPS (keep-alive)")
        c.close()
        t0 = time.time()
        st, _, got = raw(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", timeout=8)
        check(st is None and time.time() - t0 < 6, "plain HTTP to the HTTPS port: dropped, not hung")
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", port))
            s.close()
        ok = True
        try:
            c = http.client.HTTPSConnection("localhost", port, context=ctx, timeout=10)
            c.request("GET", "/healthz")
            ok = c.getresponse().status == 200
        except OSError:
            ok = False
        check(ok, "HTTPS still served after broken handshakes")
    r = subprocess.run([BIN, "serve", "--port", "0", "--tls-cert", cert], capture_output=True, text=True)
    check(r.returncode == 2 and r.stderr.count("\n") == 1, "--tls-cert without --tls-key: one line, exit 2")
    p.terminate()
    check(p.wait(15) == 0, "TLS server exits cleanly")
    import shutil
    shutil.rmtree(d, ignore_errors=True)


def stop_under_traffic():
    """SIGTERM while clients keep sending requests to every kind of route: the server stops with
    exit 0 (requests that arrive while it goes get 503; one reaching the avatar task table after
    it was freed crashed the server)."""
    for attempt in range(3):
        p, port, log = spawn("--max-sessions", "4")
        stop = threading.Event()
        paths = [("GET", "/api/avatar/task/nope"), ("GET", "/api/avatar/tasks"), ("GET", "/api/render/nope"),
                 ("POST", "/offer"), ("POST", "/human"), ("GET", "/metrics"), ("GET", "/healthz")]

        def client(k):
            i = 0
            while not stop.is_set():
                m, path = paths[(k + i) % len(paths)]
                i += 1
                body = json.dumps({"sdp": A.offer_sdp(), "type": "offer"} if path == "/offer"
                                  else {"sessionid": "x", "text": "hi"}) if m == "POST" else None
                try:
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                    c.request(m, path, body=body, headers={"Content-Type": "application/json"} if body else {})
                    c.getresponse().read()
                    c.close()
                except (OSError, http.client.HTTPException):
                    pass
        ts = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(6)]
        for t in ts:
            t.start()
        time.sleep(1.0 + 0.5 * attempt)
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = "hung"
        stop.set()
        for t in ts:
            t.join(10)
        check(rc == 0, f"SIGTERM under traffic, try {attempt + 1}: exits cleanly ({rc})")


SECTIONS = ("connections", "deep_json", "caps", "small_ones", "server_paths", "keys_and_sessions",
            "connection_handling", "tls", "stop_under_traffic")


def main():
    """HARDENING_SECTIONS=a,b runs only those (e.g. to show which fail on an older build)."""
    only = [x for x in os.environ.get("HARDENING_SECTIONS", "").split(",") if x]
    want = lambda name: not only or name in only  # noqa: E731
    proc, port, log = spawn("--max-sessions", "3")
    c = A.Client(port)
    try:
        if want("connections"):
            connections(port, proc.pid)
        st, js, _, _ = c.post("/offer", {"sdp": A.offer_sdp(), "type": "offer"})
        sid = js.get("sessionid", "") if st == 200 else ""
        check(st == 200, "a session")
        if want("deep_json"):
            deep_json(c, port, sid)
        if want("caps"):
            caps(c, port, proc.pid, sid)
        if want("small_ones"):
            small_ones(port, sid, proc.pid, log)
        if want("server_paths"):
            server_paths(port, A.DATA_DIR)
        check(proc.poll() is None, "server still running")
    finally:
        rc = A.stop(proc)
    check(rc == 0, f"server exits cleanly ({rc})")
    for name, fn in (("keys_and_sessions", keys_and_sessions), ("connection_handling", connection_handling),
                     ("tls", tls), ("stop_under_traffic", stop_under_traffic)):
        if want(name):
            fn()
    import shutil
    shutil.rmtree(A.DATA_DIR, ignore_errors=True)
    print(f"{len(A.FAILS)} failed" if A.FAILS else "all hardening checks passed")
    return 1 if A.FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
