#!/usr/bin/env python3
"""Writes deploy/grafana/facecast.json, the Grafana dashboard of facecast's /metrics, from the
panel list below: a panel is a title, its PromQL queries and a line of help, and the layout
(rows, 24 columns, panels 8 high) follows from their order and widths. Edit here and run
    python3 tools/gen_dashboard.py            # rewrites the JSON
    python3 tools/gen_dashboard.py --check    # exit 1 when the JSON differs (tests/api/prom_test.py)
The JSON is Grafana's classic dashboard model (importable into Grafana 9 and later) with a
Prometheus data source variable, so an import asks for nothing; tests/e2e_prometheus.sh runs
every query through a real Prometheus."""
import json
import os
import sys

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "deploy", "grafana",
                   "facecast.json")
DS = {"type": "prometheus", "uid": "${datasource}"}
I = 'instance=~"$instance"'  # the Node variable  # noqa: E741
RI = "$__rate_interval"
H = 8  # panel height


class Layout:
    """Panels left to right in rows of 24 columns; a row header starts a new line."""

    def __init__(self):
        self.panels, self.x, self.y = [], 0, 0

    def _id(self):
        return len(self.panels) + 1

    def row(self, title):
        if self.x > 0:
            self.x, self.y = 0, self.y + H
        self.panels.append({"type": "row", "id": self._id(), "title": title, "collapsed": False,
                            "panels": [], "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y}})
        self.y += 1

    def panel(self, title, targets, unit="short", w=8, kind="timeseries", desc=""):
        if self.x + w > 24:
            self.x, self.y = 0, self.y + H
        p = {"type": kind, "id": self._id(), "title": title, "description": desc, "datasource": DS,
             "gridPos": {"h": H, "w": w, "x": self.x, "y": self.y},
             "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
             "targets": [dict({"datasource": DS, "refId": chr(65 + i), "expr": e, "legendFormat": legend},
                              **({"instant": True, "range": False} if kind == "stat" else {}))
                         for i, (e, legend) in enumerate(targets)]}
        if kind == "timeseries":
            p["fieldConfig"]["defaults"]["custom"] = {
                "drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never",
                "spanNulls": False, "stacking": {"mode": "none", "group": "A"}}
            p["options"] = {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                            "tooltip": {"mode": "multi", "sort": "none"}}
        else:
            p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                            "colorMode": "value", "graphMode": "area", "justifyMode": "auto",
                            "orientation": "auto", "textMode": "auto"}
        self.panels.append(p)
        self.x += w
        if self.x >= 24:
            self.x, self.y = 0, self.y + H


def q(quantiles, metric, by="le"):
    """histogram_quantile of a histogram's buckets, one query per quantile."""
    return [(f"histogram_quantile({v}, sum by ({by}) (rate({metric}_bucket{{{I}}}[{RI}])))",
             f"p{round(v * 100)}" if by == "le" else "{{stage}} p%d" % round(v * 100)) for v in quantiles]


def rs(metric, by=None):
    """The summed per-second rate of a counter (by the given labels)."""
    return f"sum{' by (' + by + ')' if by else ''} (rate({metric}{{{I}}}[{RI}]))".replace("sum (", "sum(")


L = Layout()
row, panel = L.row, L.panel

row("Live sessions")
panel("Sessions open", [(f'sum(facecast_sessions{{{I}}})', "open"),
                        (f'sum(facecast_sessions_speaking{{{I}}})', "speaking"),
                        (f'sum(facecast_sessions_max{{{I}}})', "places (--max-sessions)")],
      w=6, kind="stat", desc="Sessions open now, those speaking, and the places the servers offer.")
panel("Nodes up", [(f'sum(up{{{I}}})', "up"), (f'count(up{{{I}}})', "scraped")],
      w=4, kind="stat", desc="Targets answering /metrics, of those scraped (a server with --api-keys answers Prometheus only with its key).")
panel("Sessions opened / refused", [(rs("facecast_sessions_created_total"), "opened"),
                                   (rs("facecast_sessions_rejected_total"), "refused (full)")],
      unit="ops", w=7, desc="Sessions opened a second, and /offer refused because every place was taken.")
panel("Sessions by node", [(f'facecast_sessions{{{I}}}', "{{instance}} open"),
                           (f'facecast_sessions_max{{{I}}}', "{{instance}} max")],
      w=7, desc="Open sessions against --max-sessions, per node.")
panel("Frames a second", [(rs("facecast_final_frames_total"), "sent"),
                          (rs("facecast_infer_frames_total"), "lip-sync"),
                          (rs("facecast_idle_frames_total"), "idle (not speaking)")],
      unit="fps", desc="All sessions together: frames sent to outputs, made by lip-sync, sent while silent.")
panel("Late and dropped frames", [(rs("facecast_late_frames_total"), "late (pacer)"),
                                  (rs("facecast_pictures_late_total"), "late out of the encoder"),
                                  (rs("facecast_dropped_frames_total"), "dropped by outputs"),
                                  (rs("facecast_pacer_ticks_skipped_total"), "pacer ticks skipped"),
                                  (rs("facecast_pacer_ticks_busy_total"), "ticks busy"),
                                  (rs("facecast_production_failures_total"), "productions failed")],
      unit="fps", desc="Should stay at zero: frames the pacer made itself or sent late, pictures more than a frame late out of the encoder, frames outputs refused.")
panel("Frame lateness", q((0.5, 0.95, 0.99), "facecast_frame_lateness_ms"), unit="ms",
      desc="Push time minus the frame's deadline (histogram facecast_frame_lateness_ms); 40 ms is one frame at 25 fps.")
panel("Frames sent a second, 10 slowest sessions", [(f'bottomk(10, facecast_session_final_fps{{{I}}})', "{{instance}} #{{session}}")],
      unit="fps", desc="LiveTalking's final fps over the last 100 frames; 25 is on time. The 10 lowest sessions of the chosen nodes.")
panel("Lip-sync frames a second, 10 busiest sessions", [(f'topk(10, facecast_session_infer_fps{{{I}}})', "{{instance}} #{{session}}")],
      unit="fps", desc="LiveTalking's infer fps: frames lip-sync made over the last 100 (0 while a session is silent).")
panel("Encoder delay, 10 slowest sessions", [(f'topk(10, facecast_session_encoder_delay_ms{{{I}}})', "{{instance}} #{{session}}")],
      unit="ms", desc="Mean delay from the pacer's push to the picture leaving the video encoder.")
panel("Frames ready ahead, 10 lowest sessions", [(f'bottomk(10, facecast_session_ready_frames{{{I}}})', "{{instance}} #{{session}}")],
      desc="Frames produced ahead of the pacer: 0 while speaking means lip-sync cannot keep up.")
panel("Late pictures and key frames, 10 worst sessions",
      [(f'topk(10, rate(facecast_session_pictures_late_total{{{I}}}[{RI}]))', "{{instance}} #{{session}} late"),
       (f'topk(10, rate(facecast_session_keyframes_total{{{I}}}[{RI}]))', "{{instance}} #{{session}} key frames")],
      unit="fps", desc="Pictures more than a frame late out of the encoder, and key frames (a burst: a client asked for one after loss).")
panel("Late and dropped frames, 10 worst sessions",
      [(f'topk(10, rate(facecast_session_late_frames_total{{{I}}}[{RI}]))', "{{instance}} #{{session}} late"),
       (f'topk(10, rate(facecast_session_dropped_frames_total{{{I}}}[{RI}]))', "{{instance}} #{{session}} dropped")],
      unit="fps", desc="Ticks a session sent nothing or a frame made late on the spot, and frames its output refused.")
panel("Sessions speaking, and the 10 oldest",
      [(f'sum by (instance) (facecast_session_speaking{{{I}}})', "{{instance}} speaking"),
       (f'topk(10, facecast_session_age_seconds{{{I}}}) / 60', "{{instance}} #{{session}} minutes open")],
      desc="Sessions speaking now on each node; minutes since the 10 oldest sessions opened.")
panel("Session lifetimes", q((0.5, 0.95), "facecast_session_duration_seconds") +
      [(f'sum(rate(facecast_session_duration_seconds_sum{{{I}}}[1h])) / sum(rate(facecast_session_duration_seconds_count{{{I}}}[1h]))', "mean (1 h)")],
      unit="s", desc="How long closed sessions stayed open (histogram facecast_session_duration_seconds).")
panel("Session-hours served", [(f'sum(increase(facecast_session_duration_seconds_sum{{{I}}}[24h])) / 3600', "closed in the last 24 h"),
                               (f'sum(facecast_session_age_seconds{{{I}}}) / 3600', "open sessions so far")],
      unit="h", kind="stat", w=8)
panel("CPU", [(f'rate(process_cpu_seconds_total{{{I}}}[{RI}])', "{{instance}}")], unit="short", w=12,
      desc="CPU cores in use (user and system) by each facecast process.")
panel("Memory", [(f'process_resident_memory_bytes{{{I}}}', "{{instance}} resident"),
                 (f'facecast_heap_bytes{{{I}}}', "{{instance}} heap {{kind}}")], unit="bytes", w=12,
      desc="The kernel's resident size and malloc's heap: in use growing with sessions opened and closed is a leak; resident growing while in use stays flat is fragmentation.")

row("Lip-sync batches (device schedulers)")
panel("Mean batch", [(f'facecast_sched_mean_batch{{{I}}}', "{{instance}} dev {{device}} mean"),
                     (f'facecast_sched_batch_limit{{{I}}}', "{{instance}} dev {{device}} limit"),
                     (rs("facecast_sched_frames_total", "instance, device") + " / " + rs("facecast_sched_batches_total", "instance, device"), "{{instance}} dev {{device}} frames/batch now")],
      desc="Frames per batch: the scheduler's mean, its current limit, and frames over batches in the window.")
panel("Batch time p95", [(f'facecast_sched_batch_ms_p95{{{I}}}', "{{instance}} dev {{device}}")], unit="ms",
      desc="p95 time of recent batches on the device.")
panel("Batches and frames a second", [(rs("facecast_sched_batches_total", "instance, device"), "{{instance}} dev {{device}} batches"),
                                      (rs("facecast_sched_frames_total", "instance, device"), "{{instance}} dev {{device}} frames")],
      unit="ops")
panel("Scheduler queue and placement", [(f'facecast_sched_queued{{{I}}}', "{{instance}} dev {{device}} queued"),
                                        (f'facecast_sched_live_clients{{{I}}}', "{{instance}} dev {{device}} live sessions")], w=12)
panel("Scheduler trouble", [(rs("facecast_sched_late_total", "instance, device"), "{{instance}} dev {{device}} late"),
                            (rs("facecast_sched_rejected_total", "instance, device"), "{{instance}} dev {{device}} rejected"),
                            (rs("facecast_sched_oom_retries_total", "instance, device"), "{{instance}} dev {{device}} OOM retries")],
      unit="ops", w=12, desc="Requests done after their deadline, refused, and batches halved after running out of device memory.")

row("Conversation turns")
panel("Turn latency p50 by stage", q((0.5,), "facecast_turn_seconds", by="le, stage"), unit="s", w=12,
      desc="Seconds from the end of the user's speech (or the request) to each milestone: asr, llm_first_token, first_sentence, first_audio, first_frame.")
panel("Turn latency p95 by stage", q((0.95,), "facecast_turn_seconds", by="le, stage"), unit="s", w=12)

row("HTTP")
panel("Connections", [(f'sum(facecast_http_connections{{{I}}})', "open"),
                      (rs("facecast_http_connections_total"), "accepted /s")], w=6)
panel("Refused connections", [(rs("facecast_http_refused_total", "reason"), "{{reason}}")], unit="ops", w=6)
panel("File descriptors", [(f'process_open_fds{{{I}}}', "{{instance}} open"),
                            (f'process_max_fds{{{I}}}', "{{instance}} limit")], w=6,
      desc="Out of descriptors, new connections are refused (facecast_http_refused_total{reason=\"no_fd\"}).")
panel("Closed by the server", [(rs("facecast_http_closed_total", "reason"), "{{reason}}")], unit="ops", w=6)

row("Bulk video jobs (/v1/videos)")
panel("Jobs waiting and running", [(f'sum(facecast_video_jobs{{{I},status="processing"}})', "processing (every node's slots)"),
                                   (f'max(facecast_video_jobs{{{I},status="pending"}})', "pending"),
                                   (f'max(facecast_video_items_queued{{{I}}})', "work items queued")],
      desc="Jobs rendering on the nodes' slots (summed), and the store's pending jobs and queued work items (shards, joins). With --redis every node reports the one shared store, so those are the largest reading, not a sum.")
panel("Jobs finished a minute", [(rs("facecast_video_jobs_total", "status") + " * 60", "{{status}}")],
      unit="short", desc="Completed, failed and canceled jobs a minute.")
panel("Failed share", [(f'sum(rate(facecast_video_jobs_total{{{I},status="failed"}}[5m])) / sum(rate(facecast_video_jobs_total{{{I}}}[5m]))', "failed / finished")],
      unit="percentunit", kind="stat", desc="Failed jobs among those finished in the last 5 minutes.")
panel("Wait time", q((0.5, 0.95, 0.99), "facecast_video_wait_seconds"), unit="s",
      desc="From submission to the job's first work item being taken (histogram facecast_video_wait_seconds).")
panel("Render time", q((0.5, 0.95, 0.99), "facecast_video_render_seconds"), unit="s",
      desc="From the first work item taken to the job completed (histogram facecast_video_render_seconds).")
panel("× real time", [(rs("facecast_video_seconds_total"), "aggregate (video s / wall s)"),
                      (f'facecast_video_x_realtime{{{I}}}', "{{instance}} last job")],
      unit="x", desc="Aggregate: seconds of video completed per second of wall time; and the last completed job's video seconds over its render seconds.")
panel("Mean render and wait", [(f'sum(rate(facecast_video_render_seconds_sum{{{I}}}[5m])) / sum(rate(facecast_video_render_seconds_count{{{I}}}[5m]))', "render"),
                               (f'sum(rate(facecast_video_wait_seconds_sum{{{I}}}[5m])) / sum(rate(facecast_video_wait_seconds_count{{{I}}}[5m]))', "wait")],
      unit="s")
panel("Webhook failures", [(rs("facecast_webhook_failures_total") + " * 60", "failed attempts"),
                           (rs("facecast_webhook_dropped_total") + " * 60", "given up (dropped)")],
      desc="Webhook delivery attempts that failed, and deliveries given up after their retries, a minute.")
panel("Video seconds completed", [(f'sum(increase(facecast_video_seconds_total{{{I}}}[1h]))', "last hour")],
      unit="s", kind="stat")

row("Fleet (live sessions across nodes)")
panel("Nodes and free places", [(f'max(facecast_fleet_nodes{{{I}}})', "nodes"),
                                (f'max(facecast_fleet_free_places{{{I}}})', "free session places")],
      desc="The fleet as its nodes last read it from the registry (each node reports the whole fleet: the largest reading).")
panel("Registry (Redis)", [(f'min(facecast_fleet_redis_up{{{I}}})', "up (all nodes)"),
                           (rs("facecast_fleet_redis_errors_total"), "errors /s")],
      desc="Whether every node's last registry command answered, and the commands that failed.")
panel("Routed elsewhere", [(rs("facecast_fleet_proxied_total", "kind"), "proxied {{kind}}"),
                           (rs("facecast_fleet_redirects_total"), "offers redirected (307)"),
                           (rs("facecast_fleet_proxy_failures_total"), "proxied, failed"),
                           (rs("facecast_fleet_unroutable_total"), "unroutable")],
      unit="ops", desc="Offers a full node passed on, requests for sessions held by another node, and those that could not be routed.")

dash = {
    "title": "facecast",
    "uid": "facecast",
    "description": "facecast: live sessions (frames, lateness, lip-sync batches, conversation turns) and bulk video jobs. Import with a Prometheus data source scraping facecast's /metrics (deploy/prometheus/prometheus.yml).",
    "tags": ["facecast"],
    "editable": True,
    "graphTooltip": 1,
    "schemaVersion": 38,
    "version": 1,
    "refresh": "10s",
    "time": {"from": "now-1h", "to": "now"},
    "timepicker": {},
    "timezone": "",
    "links": [],
    "annotations": {"list": [{"builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                              "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
                              "name": "Annotations & Alerts", "type": "dashboard"}]},
    "templating": {"list": [
        {"type": "datasource", "name": "datasource", "label": "Data source", "query": "prometheus",
         "current": {}, "hide": 0, "refresh": 1, "regex": "", "options": [], "includeAll": False, "multi": False},
        {"type": "query", "name": "instance", "label": "Node", "datasource": DS,
         "query": {"query": "label_values(facecast_sessions_max, instance)", "refId": "instance"},
         "definition": "label_values(facecast_sessions_max, instance)",
         "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*", "current": {},
         "options": [], "regex": "", "sort": 1, "hide": 0},
    ]},
    "panels": L.panels,
}


def main():
    text = json.dumps(dash, indent=2, ensure_ascii=False) + "\n"
    if sys.argv[1:] == ["--check"]:
        with open(OUT, encoding="utf-8") as f:
            same = f.read() == text
        if not same:
            print("deploy/grafana/facecast.json differs from tools/gen_dashboard.py: run it", file=sys.stderr)
        sys.exit(0 if same else 1)
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main()
