#!/usr/bin/env python3
"""Monitoring as shipped: Debian's prometheus, started here with deploy/prometheus/prometheus.yml
(its target, interval and key file filled in), scrapes a `facecast serve` that has API keys,
while a session speaks; its series are queried back through Prometheus' HTTP API. Then the
Grafana dashboard (deploy/grafana/facecast.json): it parses as a dashboard, every query names
only series facecast exports (read from the live /metrics; the bulk video job series of issue 17
from the list below until this build exports them) and Prometheus itself accepts every query;
those whose series are exported here return data. The alerts (deploy/prometheus/alerts.yml) load
and evaluate in that Prometheus, and fire as tests/prometheus/alerts_test.yml says (promtool).
Everything started is stopped by its process, and dies with this test.
usage: prom_test.py FACECAST_BINARY"""
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import api_test as A  # noqa: E402  (helpers: Client, offer_sdp, stop, check)
from api_test import check  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "deploy", "prometheus", "prometheus.yml")
ALERTS = os.path.join(ROOT, "deploy", "prometheus", "alerts.yml")
ALERTS_TEST = os.path.join(ROOT, "tests", "prometheus", "alerts_test.yml")
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "facecast.json")
GENERATOR = os.path.join(ROOT, "tools", "gen_dashboard.py")

# The bulk video job series (issue 17's plan), exported by the /v1/videos job store. Until this
# build's /metrics has them, the dashboard's queries on them are checked against this list (and
# must parse); once exported, the live /metrics is what they are checked against.
PLANNED = {
    "facecast_video_jobs": "gauge",  # {status="pending|processing"}
    "facecast_video_items_queued": "gauge",
    "facecast_video_jobs_total": "counter",  # {status="completed|failed|canceled"}
    "facecast_video_wait_seconds": "histogram",
    "facecast_video_render_seconds": "histogram",
    "facecast_video_x_realtime": "gauge",
    "facecast_video_seconds_total": "counter",
    "facecast_webhook_failures_total": "counter",
    "facecast_webhook_dropped_total": "counter",
}
# The fleet's series (issue 17: live sessions across nodes, registered in Redis), exported only by
# a node in a fleet; checked against this list where the server is not in one (as here).
FLEET = {
    "facecast_fleet_redis_up": "gauge",
    "facecast_fleet_redis_errors_total": "counter",
    "facecast_fleet_nodes": "gauge",
    "facecast_fleet_free_places": "gauge",
    "facecast_fleet_proxied_total": "counter",  # {kind="offer|session"}
    "facecast_fleet_redirects_total": "counter",
    "facecast_fleet_proxy_failures_total": "counter",
    "facecast_fleet_unroutable_total": "counter",
}
# What the dashboard must show at least (the live-session figures), beside PLANNED.
REQUIRED = {"facecast_sessions", "facecast_frame_lateness_ms_bucket", "facecast_sched_mean_batch",
            "facecast_sched_batches_total", "facecast_turn_seconds_bucket",
            "facecast_final_frames_total", "facecast_late_frames_total", "facecast_sessions_speaking",
            "facecast_session_speaking", "facecast_session_late_frames_total",
            "facecast_session_duration_seconds_bucket", "process_cpu_seconds_total",
            "process_resident_memory_bytes", "process_open_fds"}

# Prometheus' own series about each target, which a dashboard may show beside facecast's.
PROMETHEUS_OWN = {"up": "gauge", "scrape_duration_seconds": "gauge", "scrape_samples_scraped": "gauge"}
# promtool's lint of /metrics: names from before this test, kept for the dashboards that use
# them. Any other complaint (a new series) fails.
KNOWN_LINT = {"facecast_frame_lateness_ms metric names should not contain abbreviated units",
              "facecast_sched_batch_ms_p95 metric names should not contain abbreviated units",
              "facecast_session_encoder_delay_ms metric names should not contain abbreviated units"}
# Grafana's variables, as a query would be sent once they are filled in.
GRAFANA_VARS = {"$__rate_interval": "5s", "$__interval": "1s", "$__range": "1m", "$instance": ".*",
                "${instance}": ".*"}
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
                "and", "or", "unless", "atan2", "Inf", "NaN", "inf", "nan"}


def metric_names(expr):
    """The series names a PromQL expression selects (not its functions, labels or keywords)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", "", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)  # ranges and subqueries
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    names = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][\w:]*)\s*(\()?", e):
        if not m.group(2) and m.group(1) not in PROMQL_WORDS:
            names.add(m.group(1))
    return names


def die_with_parent():
    """In the child: SIGTERM when this test dies (killed by CTest's timeout, say), so that no
    prometheus or server outlives it."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def fill(expr):
    for k in sorted(GRAFANA_VARS, key=len, reverse=True):
        expr = expr.replace(k, GRAFANA_VARS[k])
    return expr


def families(text):
    """{family: type} from the TYPE lines of Prometheus' text format."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^# TYPE (\S+) (\S+)$", text, re.M)}


def sampled(text):
    """The series names with at least one sample (a family may be declared with none yet)."""
    return {m.group(1) for m in re.finditer(r"^([a-zA-Z_:][\w:]*)[{ ]", text, re.M)}


def bulk_job(c, auth, prom):
    """A /v1/videos job (issue 17) seen through Prometheus: the job series count it. Until this
    build has the route (404 here), the dashboard's bulk series are checked by name only."""
    st, js, _, _ = c.post("/v1/videos", {"script": "One short video for the metrics."}, headers=auth)
    if st == 404:
        print("ok   no /v1/videos in this build: the bulk job series are checked by name (PLANNED)")
        return
    data = (js.get("data") if isinstance(js, dict) else None) or {}
    check(st in (200, 201, 202) and data.get("id"), "POST /v1/videos: a job (%d %s)" % (st, js))
    if not data.get("id"):
        return
    # Watched through Prometheus, not by polling the API (its requests are rate limited).
    deadline = time.time() + 90
    while time.time() < deadline and not prom.values('sum(facecast_video_jobs_total{job="facecast"}) >= 1'):
        time.sleep(0.5)
    st, js, _, _ = c.req("GET", "/v1/videos/" + data["id"], headers=auth)
    status = ((js.get("data") if isinstance(js, dict) else None) or {}).get("status")
    check(status == "completed", "the video job completed (%s %s)" % (st, js))
    want = {"completed": 'facecast_video_jobs_total{job="facecast",status="completed"} >= 1',
            "video seconds": 'facecast_video_seconds_total{job="facecast"} > 0',
            "render time observed": 'facecast_video_render_seconds_count{job="facecast"} >= 1',
            "wait time observed": 'facecast_video_wait_seconds_count{job="facecast"} >= 1'}
    deadline, got = time.time() + 10, set()
    while time.time() < deadline and len(got) < len(want):
        got |= {w for w, e in want.items() if prom.values(e)}
        time.sleep(0.5)
    for w, e in want.items():
        check(w in got, "Prometheus: the job's %s (%s)" % (w, e))


def known(name, fams):
    if name in fams:
        return True
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and fams.get(name[: -len(suffix)]) == "histogram":
            return True
    return False


class Prom:
    """Debian's prometheus as an ordinary process: storage in a temporary folder, listening on
    loopback only."""

    def __init__(self, config, folder):
        self.folder = folder
        self.proc = None
        for _ in range(3):  # the free port may be taken between looking and binding
            self.port = A.free_port()
            self.log = open(os.path.join(folder, "prometheus.log"), "w")
            self.proc = subprocess.Popen(
                ["prometheus", "--config.file=" + config,
                 "--storage.tsdb.path=" + os.path.join(folder, "tsdb"),
                 "--web.listen-address=127.0.0.1:%d" % self.port, "--log.level=warn"],
                stdout=self.log, stderr=subprocess.STDOUT, cwd=folder, preexec_fn=die_with_parent)
            deadline = time.time() + 20
            while time.time() < deadline and self.proc.poll() is None:
                try:
                    with urllib.request.urlopen("http://127.0.0.1:%d/-/ready" % self.port, timeout=2) as r:
                        if r.status == 200:
                            return
                except (OSError, urllib.error.URLError):
                    time.sleep(0.2)
            self.stop()
        raise SystemExit("prometheus did not start:\n" + open(self.log.name).read()[-2000:])

    def api(self, path, **params):
        url = "http://127.0.0.1:%d/api/v1/%s?%s" % (self.port, path, urllib.parse.urlencode(params))
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:  # a bad query: 400 with {"status": "error", ...}
            return json.loads(e.read())

    def query(self, expr):
        return self.api("query", query=expr)

    def values(self, expr):
        """{labels as a sorted tuple: float} of an instant query; None when it failed."""
        js = self.query(expr)
        if js.get("status") != "success":
            return None
        return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in js["data"]["result"]}

    def stop(self):
        if self.proc and self.proc.poll() is None:
            A.stop(self.proc)
        self.log.close()


def scrape_config(key_file, target):
    """The shipped configuration with this test's target, 1 s intervals, Prometheus' key
    uncommented and pointed at key_file, and a second job scraping without a key."""
    text = open(CONFIG).read()
    subs = [("scrape_interval: 5s", "scrape_interval: 1s"), ("scrape_timeout: 4s", "scrape_timeout: 1s"),
            ("evaluation_interval: 15s", "evaluation_interval: 1s"),
            ('"localhost:8010"', '"%s"' % target), ("#authorization:", "authorization:"),
            ("#  credentials_file: /etc/prometheus/facecast.key", "  credentials_file: " + key_file)]
    for old, new in subs:
        check(text.count(old) == 1, "the shipped scrape config has %r once" % old)
        text = text.replace(old, new)
    return text + ('  - job_name: facecast_nokey\n    static_configs:\n      - targets: ["%s"]\n' % target)


def dashboard_static(dash):
    """The dashboard as Grafana imports it: (expressions by panel title, the variable queries)."""
    check(isinstance(dash, dict) and dash.get("title") and dash.get("uid") and
          isinstance(dash.get("schemaVersion"), int) and isinstance(dash.get("panels"), list),
          "dashboard: title, uid, schemaVersion, panels")
    tmpl = dash.get("templating", {}).get("list", [])
    ds = [v for v in tmpl if v.get("type") == "datasource"]
    check(len(ds) == 1 and ds[0].get("query") == "prometheus" and ds[0].get("name") == "datasource",
          "dashboard: a Prometheus data source variable")
    var_queries = []
    for v in tmpl:
        if v.get("type") == "query":
            q = v.get("query")
            q = q.get("query") if isinstance(q, dict) else q
            check(v.get("datasource", {}).get("uid") == "${datasource}", "variable %s: on ${datasource}" % v.get("name"))
            var_queries.append(q)
    exprs, ids, boxes = {}, set(), []
    for p in dash.get("panels", []):
        pid, gp = p.get("id"), p.get("gridPos", {})
        check(isinstance(pid, int) and pid not in ids, "panel %r: unique id" % p.get("title"))
        ids.add(pid)
        check(all(isinstance(gp.get(k), int) for k in "xywh") and gp["x"] + gp["w"] <= 24,
              "panel %r: gridPos inside the 24 columns" % p.get("title"))
        for b in boxes:  # panels must not overlap (Grafana would push them about)
            if gp["x"] < b[0] + b[2] and b[0] < gp["x"] + gp["w"] and gp["y"] < b[1] + b[3] and b[1] < gp["y"] + gp["h"]:
                check(False, "panel %r overlaps another" % p.get("title"))
        boxes.append((gp["x"], gp["y"], gp["w"], gp["h"]))
        if p.get("type") == "row":
            continue
        targets = p.get("targets", [])
        check(p.get("datasource", {}).get("uid") == "${datasource}" and targets and
              all(t.get("datasource", {}).get("uid") == "${datasource}" and t.get("expr") for t in targets) and
              len({t.get("refId") for t in targets}) == len(targets),
              "panel %r: queries on ${datasource}, each with an expr and its own refId" % p.get("title"))
        exprs[p.get("title")] = [t.get("expr", "") for t in targets]
    return exprs, var_queries


def main():
    check(metric_names('histogram_quantile(0.95, sum by (le) (rate(a_bucket{x="y"}[5m]))) / on(i) b * 1e3')
          == {"a_bucket", "b"}, "metric_names finds series names only")
    for tool in ("prometheus", "promtool"):
        if not shutil.which(tool):
            raise SystemExit(tool + " not found: Debian's package 'prometheus' (scripts/deps.sh installs it)")
    r = subprocess.run(["promtool", "check", "config", CONFIG], capture_output=True, text=True)
    check(r.returncode == 0 and "alerts.yml" in r.stdout,
          "promtool accepts deploy/prometheus/prometheus.yml and its alerts " + r.stderr.strip()[-300:])
    r = subprocess.run(["promtool", "test", "rules", ALERTS_TEST], capture_output=True, text=True)
    ok = r.returncode == 0 and "SUCCESS" in r.stdout
    check(ok, "the alerts fire on made-up series as tests/prometheus/alerts_test.yml says " +
          ("" if ok else (r.stdout + r.stderr)[-1500:]))
    r = subprocess.run([sys.executable, GENERATOR, "--check"], capture_output=True, text=True)
    check(r.returncode == 0, "the dashboard is what tools/gen_dashboard.py writes " + r.stderr.strip())
    with open(DASHBOARD) as f:
        dash = json.load(f)
    exprs, var_queries = dashboard_static(dash)
    names = set()
    for e in [e for es in exprs.values() for e in es]:
        names |= metric_names(e)
    check(REQUIRED <= names, "the dashboard shows %s" % sorted(REQUIRED - names or REQUIRED))
    for what, listed in (("bulk video job", PLANNED), ("fleet", FLEET)):
        missing = sorted(f for f in listed if not any(n == f or n.startswith(f + "_") for n in names))
        check(not missing, "the dashboard shows every %s series %s" % (what, missing or ""))

    tmp = tempfile.mkdtemp(prefix="fc_prom_")
    data = os.path.join(tmp, "data")
    os.mkdir(data)
    proc = prom = None
    try:
        keys = os.path.join(tmp, "keys")
        r = subprocess.run([BIN, "keys", "add", "prometheus", "--file", keys], capture_output=True, text=True)
        key = r.stdout.strip()
        check(r.returncode == 0 and key.startswith("fck_"), "a key for Prometheus")
        key_file = os.path.join(tmp, "facecast.key")
        with open(key_file, "w") as f:
            f.write(key + "\n")  # Prometheus trims the line's end
        os.chmod(key_file, 0o600)

        env = dict(os.environ, FACECAST_DATA_DIR=data)
        started = time.time()
        proc = subprocess.Popen([BIN, "serve", "--host", "127.0.0.1", "--port", "0", "--quiet",
                                 "--api-keys", keys], stderr=subprocess.PIPE, text=True, env=env,
                                preexec_fn=die_with_parent)
        port, deadline = None, time.time() + 30
        while port is None and time.time() < deadline:
            line = proc.stderr.readline()
            m = re.search(r"serving on http://[^:]+:(\d+)/", line)
            if m:
                port = int(m.group(1))
            elif not line and proc.poll() is not None:
                break
        if port is None:
            raise SystemExit("facecast serve did not start")
        # what the server says from here on (sanitizer reports) is shown, and never fills the pipe
        threading.Thread(target=lambda: [sys.stderr.write("server: " + l) for l in proc.stderr],
                         daemon=True).start()
        c = A.Client(port)
        auth = {"Authorization": "Bearer " + key}
        st, _, _, _ = c.req("GET", "/metrics")
        check(st == 401, "/metrics without the key: 401")

        config = os.path.join(tmp, "prometheus.yml")
        shutil.copy(ALERTS, tmp)  # rule_files are found beside the config
        with open(config, "w") as f:
            f.write(scrape_config(key_file, "127.0.0.1:%d" % port))
        r = subprocess.run(["promtool", "check", "config", config], capture_output=True, text=True)
        check(r.returncode == 0, "promtool accepts the test's config " + r.stderr[-300:])
        prom = Prom(config, tmp)

        st, js, _, _ = c.post("/offer", {"sdp": A.offer_sdp(), "type": "offer"}, headers=auth)
        sid = js.get("sessionid") if st == 200 and isinstance(js, dict) else None
        check(sid is not None, "a session opened (%d)" % st)
        st, js, _, _ = c.post("/human", {"sessionid": sid, "type": "echo", "text":
                                         "Prometheus is scraping this session while it speaks, one "
                                         "frame after another, for a few seconds more."}, headers=auth)
        check(st == 200 and js.get("code") == 0, "the session speaks")

        # Until Prometheus has several scrapes of frames being made and sent.
        want = {"several scrapes": 'count_over_time(up{job="facecast"}[1m]) >= 4',
                "frames sent": 'rate(facecast_final_frames_total{job="facecast"}[5s]) > 0',
                "lip-sync frames": 'increase(facecast_infer_frames_total{job="facecast"}[1m]) > 0'}
        got, deadline = {}, time.time() + 25
        while time.time() < deadline and len(got) < len(want):
            for what, expr in want.items():
                if what not in got and prom.values(expr):
                    got[what] = time.time()
            time.sleep(0.5)
        for what, expr in want.items():
            check(what in got, "Prometheus: %s (%s)" % (what, expr))

        v = prom.values('up{job="facecast"}')
        check(v is not None and list(v.values()) == [1.0], "up{job=\"facecast\"} == 1 (with the key): %s" % v)
        v = prom.values('up{job="facecast_nokey"}')
        check(v is not None and list(v.values()) == [0.0], "up{job=\"facecast_nokey\"} == 0 (no key): %s" % v)
        tg = prom.api("targets").get("data", {}).get("activeTargets", [])
        err = [t.get("lastError", "") for t in tg if t.get("labels", {}).get("job") == "facecast_nokey"]
        check(err and "401" in err[0], "the keyless scrape's error names the 401: %s" % err)
        v = prom.values('facecast_sessions{job="facecast"}')
        check(v is not None and list(v.values()) == [1.0], "facecast_sessions == 1: %s" % v)
        v = prom.values('facecast_session_frames_total{job="facecast"}')
        check(v is not None and len(v) == 1 and list(v.values())[0] > 25 and
              dict(list(v)[0]).get("session") == "1", "facecast_session_frames_total{session=\"1\"} > 25: %s" % v)
        v = prom.values('facecast_frame_lateness_ms_count{job="facecast"}')
        check(v is not None and len(v) == 1 and list(v.values())[0] > 25, "frame lateness histogram counts frames: %s" % v)
        v = prom.values('max_over_time(facecast_session_speaking{job="facecast"}[1m])')
        check(v is not None and list(v.values()) == [1.0], "facecast_session_speaking was 1: %s" % v)
        v = prom.values('facecast_session_infer_frames_total{job="facecast"}')
        check(v is not None and len(v) == 1 and list(v.values())[0] > 25, "facecast_session_infer_frames_total > 25: %s" % v)
        v = prom.values('facecast_session_age_seconds{job="facecast"}')
        check(v is not None and len(v) == 1 and 2 < list(v.values())[0] < 60, "facecast_session_age_seconds: %s" % v)
        # the start-up alone (the avatar loaded, espeak) takes tenths of a second; a session on
        # this backend can take under a 10 ms tick a second, so a rise is not asked for, only a
        # rate within the machine's cores
        v = prom.values('process_cpu_seconds_total{job="facecast"}')
        check(v is not None and len(v) == 1 and 0.02 < list(v.values())[0] < 600,
              "process_cpu_seconds_total counts the server's CPU: %s" % v)
        v = prom.values('rate(process_cpu_seconds_total{job="facecast"}[1m])')
        check(v is not None and len(v) == 1 and 0 <= list(v.values())[0] < (os.cpu_count() or 1) + 0.5,
              "rate(process_cpu_seconds_total) within the machine's cores: %s" % v)
        v = prom.values('process_resident_memory_bytes{job="facecast"}')
        check(v is not None and len(v) == 1 and 10e6 < list(v.values())[0] < 8e9, "process_resident_memory_bytes: %s" % v)
        v = prom.values('process_start_time_seconds{job="facecast"}')
        check(v is not None and len(v) == 1 and abs(list(v.values())[0] - started) < 30,
              "process_start_time_seconds is when the server started: %s" % v)
        v = prom.values('process_open_fds{job="facecast"} < process_max_fds{job="facecast"}')
        check(v is not None and len(v) == 1 and list(v.values())[0] > 3, "process_open_fds below process_max_fds: %s" % v)
        v = prom.values('scrape_samples_scraped{job="facecast"}')
        check(v is not None and len(v) == 1 and list(v.values())[0] > 100, "a scrape has over 100 samples: %s" % v)

        # The dashboard against what this server exports and what Prometheus accepts.
        st, _, body, _ = c.req("GET", "/metrics", headers=auth)
        live = families(body.decode())
        with_samples = sampled(body.decode())
        check(st == 200 and "facecast_sessions" in live, "/metrics with the key: %d families" % len(live))
        live.update(PROMETHEUS_OWN)
        allowed = dict(PLANNED, **FLEET, **live)
        r = subprocess.run(["promtool", "check", "metrics"], input=body.decode(), capture_output=True, text=True)
        lint = {l.strip() for l in (r.stdout + r.stderr).splitlines() if l.strip()} - KNOWN_LINT
        check(not lint, "promtool check metrics: nothing new to complain about %s" % sorted(lint))
        for q in var_queries:
            m = re.fullmatch(r"label_values\((\w+),\s*instance\)", q or "")
            check(m is not None and m.group(1) in live and prom.values(m.group(1)),
                  "variable query %r: a live series with an instance label" % q)
        # The alerts as the running Prometheus loaded them (every rule evaluated without error),
        # on exported series only.
        deadline, rules = time.time() + 10, []
        while time.time() < deadline:
            groups = prom.api("rules").get("data", {}).get("groups", [])
            rules = [r for g in groups for r in g.get("rules", [])]
            if rules and all(r.get("lastEvaluation", "").startswith("0001") is False for r in rules):
                break
            time.sleep(0.5)
        check(len(rules) >= 5 and all(r.get("type") == "alerting" and r.get("health") == "ok" for r in rules),
              "alerts loaded and evaluated: %s" % [(r.get("name"), r.get("health"), r.get("lastError")) for r in rules])
        for r in rules:
            unknown = sorted(n for n in metric_names(r.get("query", "")) if not known(n, allowed))
            check(not unknown, "alert %s: %s exported" % (r.get("name"), unknown or "all series"))
        for title, es in exprs.items():
            for e in es:
                unknown = sorted(n for n in metric_names(e) if not known(n, allowed))
                check(not unknown, "%s: %s exported (%s)" % (title, "all series" if not unknown else unknown, e))
                js = prom.query(fill(e))
                check(js.get("status") == "success", "%s: Prometheus accepts %s %s" % (title, fill(e), js.get("error", "")))
                if all(n in with_samples or n in PROMETHEUS_OWN for n in metric_names(e)) and js.get("status") == "success":
                    check(len(js["data"]["result"]) > 0, "%s: data for %s" % (title, fill(e)))
        # Silence, then the session's close, straight from /metrics.
        st, _, _, _ = c.post("/interrupt_talk", {"sessionid": sid}, headers=auth)
        deadline, text = time.time() + 10, ""
        while time.time() < deadline and not re.search(r"^facecast_sessions_speaking 0$", text, re.M):
            text = c.req("GET", "/metrics", headers=auth)[2].decode()
            time.sleep(0.2)
        check(re.search(r'^facecast_session_speaking\{session="1"\} 0$', text, re.M) is not None,
              "interrupted: facecast_session_speaking 0")
        st, _, _, _ = c.req("DELETE", "/session/" + sid, headers=auth)
        check(st == 200, "session closed")
        text = c.req("GET", "/metrics", headers=auth)[2].decode()
        m = re.search(r"^facecast_session_duration_seconds_sum (\S+)$", text, re.M)
        check(re.search(r'^facecast_session_duration_seconds_bucket\{le="\+Inf"\} 1$', text, re.M) and
              re.search(r"^facecast_session_duration_seconds_count 1$", text, re.M) and m and
              2 < float(m.group(1)) < 60 and "facecast_session_speaking{" not in text,
              "closed: one lifetime in facecast_session_duration_seconds, no per-session series")

        # A bulk video job, and then the dashboard's bulk panels have data too.
        bulk_job(c, auth, prom)
        with_samples = sampled(c.req("GET", "/metrics", headers=auth)[2].decode())
        for title, es in exprs.items():
            for e in es:
                names = metric_names(e)
                if any(n.startswith("facecast_video_") for n in names) and all(n in with_samples for n in names):
                    js = prom.query(fill(e))
                    check(js.get("status") == "success" and len(js["data"]["result"]) > 0,
                          "%s: data for %s after a job" % (title, fill(e)))
    finally:
        if prom:
            if A.FAILS:
                sys.stderr.write("prometheus log:\n" + open(prom.log.name).read()[-3000:])
            prom.stop()
        if proc:
            check(A.stop(proc) == 0, "facecast serve exits cleanly")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(A.DATA_DIR, ignore_errors=True)
    print("%d failed" % len(A.FAILS) if A.FAILS else "all passed", flush=True)
    sys.exit(1 if A.FAILS else 0)


if __name__ == "__main__":
    main()
