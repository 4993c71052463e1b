#!/usr/bin/env python3
"""WebRTC reachability options of `facecast serve` without a browser: --ice-ports keeps every
host candidate of the SDP answer in the range (and a full range answers 503), --ice-tcp off
leaves out TCP candidates, GET /api/ice-servers and WHEP's Link headers describe --stun/--turn
(time-limited TURN credentials with $TURN_SECRET, coturn's REST scheme), bad values exit 2;
and against Debian's coturn (run here as this user on a free port, with a config in a temporary
folder) the server's own ICE agent allocates a relay candidate with a static TURN user, with
time-limited credentials, and over turns:// (TLS), but not with a wrong password.
usage: ice_test.py FACECAST_BINARY  (tests/browser/firewall.mjs connects a browser by TURN
and by ICE-TCP)"""
import base64
import errno
import hashlib
import hmac
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import api_test  # noqa: E402  (its helpers; BIN is argv[1] there too)
from api_test import Client, check, is_error, offer_sdp, stop  # noqa: E402

BIN = sys.argv[1]
TMP = tempfile.mkdtemp(prefix="fc_ice_")
SECRET = "turn-shared-secret-for-tests"


def start(*args, env=None):
    """facecast serve with these options (and environment additions)."""
    saved = dict(os.environ)
    os.environ.update(env or {})
    try:
        return api_test.start_server(*args)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def done(srv):
    """Stops a server: it must exit 0 (under ASan: no leak, no error)."""
    st = stop(srv)
    check(st == 0, f"the server exits 0 on SIGTERM ({st})")


def refused(args, env=None, what=""):
    """serve with args must exit 2 at once with a one-line error naming the problem."""
    p = subprocess.run([BIN, "serve", "--port", "0", *args], capture_output=True, text=True,
                       timeout=30, env=dict(os.environ, **(env or {})))
    ok = p.returncode == 2 and re.search(what, p.stderr) is not None
    check(ok, f"serve {' '.join(args)} refused (exit {p.returncode}: {p.stderr.strip()[:120]})")


def free_port(kind=socket.SOCK_STREAM):
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def free_range(n):
    """n consecutive ports free for both UDP and TCP (at the time of asking).

    Probes on every address first (what the server binds is each interface's address);
    where a sandbox refuses the wildcard, loopback. The bases tried are ports the kernel
    hands out itself (its ephemeral range is the one a sandbox is sure to allow), then a
    fixed sweep. The errors seen are named if nothing is free."""
    seen = {}

    def try_range(addr, base):
        socks = []
        try:
            for p in range(base, base + n):
                for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
                    s = socket.socket(socket.AF_INET, kind)
                    socks.append(s)
                    s.bind((addr, p))
            return True
        except OSError as e:
            seen[(addr, e.errno)] = seen.get((addr, e.errno), 0) + 1
            return False
        finally:
            for s in socks:
                s.close()

    bases = [free_port(socket.SOCK_DGRAM) for _ in range(40)]
    bases = [b for b in bases if b + n <= 65535] + list(range(42000, 60000, 97))
    for addr in ("0.0.0.0", "127.0.0.1"):
        for base in bases:
            if try_range(addr, base):
                return base, base + n - 1
    raise SystemExit("no free port range; bind errors (address, errno): count: " +
                     ", ".join(f"{a} {errno.errorcode.get(e, e)}: {c}" for (a, e), c in seen.items()))


def answer(c, whep=False):
    if whep:
        st, _, data, r = c.req("POST", "/whep", offer_sdp(), ctype="application/sdp")
        return st, data.decode(errors="replace"), r
    st, js, data, r = c.post("/offer", {"sdp": offer_sdp(), "type": "offer"})
    return st, (js or {}).get("sdp", "") if st == 200 else data.decode(errors="replace"), r


def candidates(sdp):
    """(transport, address, port, type, tcptype) of every a=candidate line."""
    out = []
    for line in sdp.split("\r\n"):
        m = re.match(r"a=candidate:\S+ \d+ (\w+) \d+ (\S+) (\d+) typ (\w+)(.*)", line)
        if m:
            tt = re.search(r"tcptype (\w+)", m.group(5))
            out.append((m.group(1).upper(), m.group(2), int(m.group(3)), m.group(4),
                        tt.group(1) if tt else None))
    return out


# ---- coturn ----------------------------------------------------------------------------------

def coturn(name, port, auth, tls=None):
    """Debian's turnserver on 127.0.0.1:port as this user, its files in a folder of its own.
    auth: ("user", "USER:PASS") or ("secret", SECRET). tls: (cert, key) for turns:// on the port
    (then TCP/TLS only). Returns the process once it accepts TCP connections."""
    d = os.path.join(TMP, name)
    os.makedirs(d)
    conf = [
        "listening-ip=127.0.0.1", "relay-ip=127.0.0.1", "realm=facecast.test", "fingerprint",
        "no-cli", "no-dtls", "no-multicast-peers",
        # every peer is on this machine: loopback peers must be allowed (never in production)
        "allow-loopback-peers",
        f"log-file={d}/turn.log", "simple-log", "verbose", "no-stdout-log",
        f"pidfile={d}/turn.pid", f"userdb={d}/turndb",
    ]
    if tls:
        conf += [f"tls-listening-port={port}", f"cert={tls[0]}", f"pkey={tls[1]}", "no-udp",
                 "no-tcp", "listening-port=%d" % free_port()]
    else:
        conf += [f"listening-port={port}", "no-tls"]
    if auth[0] == "user":
        conf += ["lt-cred-mech", f"user={auth[1]}"]
    else:
        conf += ["use-auth-secret", f"static-auth-secret={auth[1]}"]
    with open(os.path.join(d, "turnserver.conf"), "w") as f:
        f.write("\n".join(conf) + "\n")
    p = subprocess.Popen(["turnserver", "-c", os.path.join(d, "turnserver.conf")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return p
        except OSError:
            if p.poll() is not None:
                break
            time.sleep(0.1)
    log = open(os.path.join(d, "turn.log")).read() if os.path.exists(os.path.join(d, "turn.log")) else ""
    p.kill()
    raise SystemExit(f"turnserver ({name}) did not start:\n{log[-2000:]}")


def relayed(turn_url, env=None, extra=()):
    """A session's answer from a server using turn_url: whether it has a relay candidate, the
    status, and the seconds it took."""
    srv, port = start("--turn", turn_url, "--ice-tcp", "off", *extra, env=env)
    try:
        t = time.time()
        st, sdp, _ = answer(Client(port))
        return st == 200 and any(c[3] == "relay" for c in candidates(sdp)), st, time.time() - t
    finally:
        done(srv)


# ---- the checks --------------------------------------------------------------------------------

def check_options():
    refused(["--ice-ports", "100-200"], what="--ice-ports '100-200'")
    refused(["--ice-ports", "50010-50000"], what="MIN <= MAX")
    refused(["--ice-ports", "50000"], what="MIN-MAX")
    refused(["--ice-ports", "50000-70000"], what="65535")
    refused(["--ice-tcp", "maybe"], what="on or off")
    refused(["--turn", "turn://127.0.0.1:3478"], what="USER:PASS")
    refused(["--turn", "http://u:p@127.0.0.1:3478"], what="turn://")
    refused(["--turn", "turn://u:p@127.0.0.1"], what="turn://")
    refused(["--turn", "turn://u:p@127.0.0.1:3478"], env={"TURN_SECRET": SECRET},
            what="TURN_SECRET")
    refused([], env={"TURN_SECRET": SECRET}, what="--turn is not")
    refused(["--stun", "http://127.0.0.1:3478"], what="stun://")  # (LiveTalking's stun:HOST:PORT is taken)


def check_ports():
    lo, hi = free_range(16)
    srv, port = start("--ice-ports", f"{lo}-{hi}")
    c = Client(port)
    try:
        seen = []
        for _ in range(2):
            st, sdp, _ = answer(c)
            cs = candidates(sdp)
            check(st == 200 and cs, f"--ice-ports {lo}-{hi}: the answer has candidates ({len(cs)})")
            host = [x for x in cs if x[3] == "host" and x[4] != "active"]
            seen += host
            check(host and all(lo <= x[2] <= hi for x in host),
                  "every host candidate (UDP, passive TCP) is in the range: " +
                  " ".join(f"{x[0]}/{x[2]}" for x in host))
            check(any(x[0] == "TCP" and x[4] == "passive" for x in host),
                  "ICE-TCP is on by default: passive TCP candidates")
            # active TCP candidates accept nothing: they connect out (RFC 6544 port 9)
            check(all(x[2] == 9 for x in cs if x[4] == "active"), "active TCP candidates say port 9")
        by_addr = {}
        for x in seen:
            by_addr.setdefault((x[0], x[1]), []).append(x[2])
        check(all(len(set(v)) == len(v) for v in by_addr.values()),
              "two sessions never share a port on one address: " + str(by_addr))
    finally:
        done(srv)

    srv, port = start("--ice-ports", f"{lo}-{lo}", "--ice-tcp", "off")
    c = Client(port)
    try:
        st, sdp, _ = answer(c)
        cs = candidates(sdp)
        check(st == 200 and cs and all(x[0] == "UDP" and x[2] == lo for x in cs),
              f"--ice-ports {lo}-{lo} --ice-tcp off: only UDP candidates, on port {lo}: {cs}")
        t = time.time()
        st, js, _, _ = c.post("/offer", {"sdp": offer_sdp(), "type": "offer"})
        check(is_error(st, js, 503) and "--ice-ports" in js["msg"],
              f"the range used up: 503 naming --ice-ports ({st} {js}, {time.time() - t:.1f} s)")
    finally:
        done(srv)


def check_ice_servers():
    srv, port = start()
    c = Client(port)
    try:
        st, js, _, r = c.req("GET", "/api/ice-servers")
        check(st == 200 and js == {"iceServers": []}, f"no --stun/--turn: no ICE servers ({st} {js})")
        st, js, _, _ = c.req("POST", "/api/ice-servers", {})
        check(st == 405 and js and js.get("code") == -1, f"POST /api/ice-servers: 405 ({st})")
        st, _, r = answer(c, whep=True)
        check(st == 201 and not r.getheader("Link"), "WHEP without ICE servers: no Link header")
    finally:
        done(srv)

    srv, port = start("--stun", "stun://127.0.0.1:3478", "--turn", "turn://fc:pass%3Aword@127.0.0.1:3478")
    c = Client(port)
    try:
        st, js, _, r = c.req("GET", "/api/ice-servers")
        want = {"iceServers": [
            {"urls": ["stun:127.0.0.1:3478"]},
            {"urls": ["turn:127.0.0.1:3478?transport=udp"], "username": "fc", "credential": "pass:word"},
            {"urls": ["turn:127.0.0.1:3478?transport=tcp"], "username": "fc", "credential": "pass:word"}]}
        check(st == 200 and js == want, f"GET /api/ice-servers: STUN, TURN over UDP and TCP ({js})")
        check(r.getheader("Cache-Control") == "no-store", "the credentials are not cached")
        for method in ("POST", "OPTIONS"):
            if method == "POST":
                st, _, r = answer(c, whep=True)
            else:
                st, _, _, r = c.req("OPTIONS", "/whep")
            links = [v for k, v in r.getheaders() if k.lower() == "link"]
            check(st == (201 if method == "POST" else 204) and len(links) == 3 and
                  links[0] == '<stun:127.0.0.1:3478>; rel="ice-server"' and
                  links[1] == '<turn:127.0.0.1:3478?transport=udp>; rel="ice-server"; '
                              'username="fc"; credential="pass:word"; credential-type="password"',
                  f"{method} /whep: Link headers (RFC 9725) ({st} {links})")
    finally:
        done(srv)

    srv, port = start("--turn", "turns://127.0.0.1:5349", env={"TURN_SECRET": SECRET})
    c = Client(port)
    try:
        st, js, _, _ = c.req("GET", "/api/ice-servers")
        s = (js or {}).get("iceServers", [{}])
        user = s[0].get("username", "") if len(s) == 1 else ""
        expiry = int(user.split(":")[0]) if re.fullmatch(r"\d+:facecast", user) else 0
        mac = base64.b64encode(hmac.new(SECRET.encode(), user.encode(), hashlib.sha1).digest()).decode()
        check(st == 200 and len(s) == 1 and s[0].get("urls") == ["turns:127.0.0.1:5349"] and
              abs(expiry - time.time() - 86400) < 60 and s[0].get("credential") == mac,
              f"$TURN_SECRET: turns only, EXPIRY:facecast, base64(HMAC-SHA1(secret, name)) ({js})")
        check(SECRET not in str(js), "the secret itself is not handed out")
    finally:
        done(srv)


def check_coturn():
    if not shutil.which("turnserver"):
        check(False, "coturn's turnserver is installed (scripts/deps.sh)")
        return
    p_user, p_secret = free_port(), free_port()
    t_user = coturn("static", p_user, ("user", "fc:turnpass"))
    t_secret = coturn("secret", p_secret, ("secret", SECRET))
    try:
        # libnice's UDP host sockets are bound to their interface's address and reach a TURN
        # server on 127.0.0.1 only over TCP; `turn://` tries both (a real TURN server is not on
        # loopback), so a relay candidate shows that the allocation went through.
        ok, st, _ = relayed(f"turn://fc:turnpass@127.0.0.1:{p_user}")
        check(ok, f"static TURN user: coturn allocated a relay candidate ({st})")
        ok, st, _ = relayed(f"turn://fc:wrong@127.0.0.1:{p_user}")
        check(st == 200 and not ok, "a wrong TURN password: no relay candidate")
        ok, st, _ = relayed(f"turn://127.0.0.1:{p_secret}", env={"TURN_SECRET": SECRET})
        check(ok, f"$TURN_SECRET: coturn accepted the time-limited credentials ({st})")
        ok, st, _ = relayed(f"turn://127.0.0.1:{p_secret}", env={"TURN_SECRET": "not-" + SECRET})
        check(st == 200 and not ok, "a different secret: no relay candidate")
    finally:
        for t in (t_user, t_secret):
            t.terminate()
            t.wait(5)
    if not shutil.which("openssl"):
        return
    cert, key = os.path.join(TMP, "cert.pem"), os.path.join(TMP, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1"],
                   check=True, capture_output=True)
    p_tls = free_port()
    t_tls = coturn("tls", p_tls, ("user", "fc:turnpass"), tls=(cert, key))
    try:
        # libnice cannot speak TLS to a TURN server (facecast says so at start): turns:// is
        # for browsers only, and the server's agent must not wait on it.
        ok, st, secs = relayed(f"turns://fc:turnpass@127.0.0.1:{p_tls}")
        check(st == 200 and not ok and secs < 1.5,
              f"turns://: the server's own agent does not try it ({st}, answered in {secs:.1f} s)")
    finally:
        t_tls.terminate()
        t_tls.wait(5)


def main():
    t0 = time.time()
    try:
        check_options()
        check_ports()
        check_ice_servers()
        check_coturn()
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
        shutil.rmtree(api_test.DATA_DIR, ignore_errors=True)
    print(f"{time.time() - t0:.0f} s; " +
          (f"{len(api_test.FAILS)} failed" if api_test.FAILS else "all ICE checks passed"))
    sys.exit(1 if api_test.FAILS else 0)


if __name__ == "__main__":
    main()
