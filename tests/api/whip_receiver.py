#!/usr/bin/python3
"""A WHIP endpoint (RFC 9725) for tests/api/whip_test.py, made of real parts: GStreamer's
webrtcbin answers each POSTed offer, receives the stream and decodes it (decodebin: avdec_h264,
opusdec), counting the pictures decoded and the audio's samples and loudness. Run it with the
system's python3 (python3-gi, gir1.2-gst-plugins-bad-1.0).

  POST any path      the offer (Content-Type and Authorization recorded): 201, Location
                     /resource/N and the answer; 500 while refusing
  DELETE /resource/N recorded; the resource's pipeline stops
  GET /stats         JSON: {"posts": [...], "resources": {N: {...}}, "deletes": [N, ...]}
  GET /refuse?on=1   refuse (500) every POST from now on; on=0 to accept again

usage: whip_receiver.py PORT"""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstWebRTC", "1.0")
gi.require_version("GstSdp", "1.0")
from gi.repository import Gst, GstSdp, GstWebRTC  # noqa: E402

Gst.init(None)
# Looked up once here: PyGObject fills enum classes lazily, and the first lookup from a
# streaming thread (pad-added) once raised AttributeError under ThreadSanitizer's slowness.
PAD_SRC = Gst.PadDirection.SRC
# The same for the methods the streaming threads call (Caps.get_structure, Caps.from_string,
# Structure.get_name/get_value): one call each here fills them in (a CI run under TSan saw
# AttributeError for both Caps methods from decodebin's pad-added).
_warm = Gst.Caps.from_string("audio/x-raw,format=S16LE,channels=1,rate=48000")
_warm.get_structure(0).get_name()
_warm.get_structure(0).get_value("rate")
del _warm
LOCK = threading.Lock()
STATE = {"posts": [], "resources": {}, "deletes": [], "refuse": False, "next": 1}
PIPES = {}


class Resource:
    def __init__(self, rid, path):
        self.rid, self.path = rid, path
        self.stats = {"path": path, "frames": 0, "samples": 0, "peak": 0, "first": None, "last": None,
                      "width": 0, "height": 0, "video_caps": "", "audio_caps": ""}
        self.pipe = Gst.Pipeline.new(f"whip{rid}")
        self.webrtc = Gst.ElementFactory.make("webrtcbin", "recv")
        self.webrtc.set_property("bundle-policy", GstWebRTC.WebRTCBundlePolicy.MAX_BUNDLE)
        self.pipe.add(self.webrtc)
        self.gathered = threading.Event()
        self.webrtc.connect("notify::ice-gathering-state", self.on_gathering)
        self.webrtc.connect("pad-added", self.on_pad)
        self.pipe.set_state(Gst.State.PLAYING)

    def on_gathering(self, w, _):
        if w.get_property("ice-gathering-state") == GstWebRTC.WebRTCICEGatheringState.COMPLETE:
            self.gathered.set()

    def on_pad(self, _, pad):
        if pad.direction != PAD_SRC:
            return
        dec = Gst.ElementFactory.make("decodebin")
        dec.connect("pad-added", self.on_decoded)
        self.pipe.add(dec)
        dec.sync_state_with_parent()
        pad.link(dec.get_static_pad("sink"))

    def on_decoded(self, _, pad):
        caps = pad.get_current_caps() or pad.query_caps(None)
        name = caps.get_structure(0).get_name()
        conv = Gst.ElementFactory.make("audioconvert" if name.startswith("audio") else "identity")
        sink = Gst.ElementFactory.make("fakesink")
        sink.set_property("sync", False)
        sink.set_property("signal-handoffs", True)
        if name.startswith("audio"):
            filt = Gst.ElementFactory.make("capsfilter")
            filt.set_property("caps", Gst.Caps.from_string("audio/x-raw,format=S16LE,channels=1"))
            sink.connect("handoff", self.on_audio)
            chain = [conv, filt, sink]
        else:
            sink.connect("handoff", self.on_video)
            chain = [conv, sink]
        for e in chain:
            self.pipe.add(e)
        for a, b in zip(chain, chain[1:]):
            a.link(b)
        for e in chain:
            e.sync_state_with_parent()
        pad.link(conv.get_static_pad("sink"))

    def on_video(self, sink, buf, pad):
        now = time.time()
        s = pad.get_current_caps().get_structure(0)
        with LOCK:
            st = self.stats
            st["frames"] += 1
            st["first"] = st["first"] or now
            st["last"] = now
            st["width"], st["height"] = s.get_value("width"), s.get_value("height")

    def on_audio(self, sink, buf, pad):
        ok, info = buf.map(Gst.MapFlags.READ)
        if not ok:
            return
        data = memoryview(info.data).cast("h")
        peak = max((abs(x) for x in data[::4]), default=0)
        n = len(data)
        buf.unmap(info)
        with LOCK:
            self.stats["samples"] += n
            self.stats["peak"] = max(self.stats["peak"], peak)

    def answer(self, offer_text):
        ok, sdp = GstSdp.SDPMessage.new_from_text(offer_text)
        if ok != GstSdp.SDPResult.OK:
            raise ValueError("offer does not parse")
        offer = GstWebRTC.WebRTCSessionDescription.new(GstWebRTC.WebRTCSDPType.OFFER, sdp)
        p = Gst.Promise.new()
        self.webrtc.emit("set-remote-description", offer, p)
        p.wait()
        p = Gst.Promise.new()
        self.webrtc.emit("create-answer", None, p)
        p.wait()
        reply = p.get_reply()
        ans = reply.get_value("answer") if reply else None
        if not ans:
            raise ValueError(f"no answer: {reply.to_string() if reply else None}")
        p = Gst.Promise.new()
        self.webrtc.emit("set-local-description", ans, p)
        p.wait()
        self.gathered.wait(5)
        return self.webrtc.get_property("local-description").sdp.as_text()

    def stop(self):
        self.pipe.set_state(Gst.State.NULL)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def reply(self, code, body=b"", ctype="text/plain", headers=()):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/stats":
            with LOCK:
                body = json.dumps(STATE).encode()
            self.reply(200, body, "application/json")
        elif self.path.startswith("/refuse?on="):
            STATE["refuse"] = self.path.endswith("=1")
            self.reply(200)
        else:
            self.reply(404)

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        offer = self.rfile.read(n).decode("utf-8", "replace")
        with LOCK:
            STATE["posts"].append({"path": self.path, "ctype": self.headers.get("Content-Type"),
                                   "auth": self.headers.get("Authorization"),
                                   "has_h264": "H264/90000" in offer and "packetization-mode=1" in offer,
                                   "has_opus": "opus/48000" in offer.lower(),
                                   "sendonly": offer.count("a=sendonly") == 2})
            refuse = STATE["refuse"]
            rid = str(STATE["next"])  # POSTs run concurrently: numbered here
            STATE["next"] += 1
        if refuse:
            self.reply(500, b"refused for the test")
            return
        try:
            r = Resource(rid, self.path)
            answer = r.answer(offer)
        except Exception as e:  # noqa: BLE001 - the test reads it
            self.reply(400, str(e).encode())
            return
        with LOCK:
            STATE["resources"][rid] = r.stats
            PIPES[rid] = r
        self.reply(201, answer.encode(), "application/sdp", [("Location", f"/resource/{rid}")])

    def do_DELETE(self):
        rid = self.path.rsplit("/", 1)[-1]
        with LOCK:
            r = PIPES.pop(rid, None)
            STATE["deletes"].append(rid)
        if r:
            threading.Thread(target=r.stop, daemon=True).start()
        self.reply(200 if r else 404)


def main():
    srv = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    srv.daemon_threads = True
    print("ready", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
