#!/usr/bin/env python3
"""Voice chat: espeak-ng speech streamed into /ws/audio?mode=echo|chat at a microphone's pace is
heard by the VAD, transcribed (real pocketsphinx; fakes of OpenAI's transcription API and a
FunASR server speaking their protocols, tests/api/fake_asr.py), and becomes a turn: the avatar
says it back (echo) or answers through the LLM (chat, tests/api/fake_llm.py) with the turn's
timeline in order; the user speaking over the avatar stops it (barge-in); LiveTalking's ASR page
protocol is served at /api/asr. usage: listen_test.py FACECAST_BINARY"""
import json
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import wave

sys.path.insert(0, os.path.dirname(__file__))
import api_test  # noqa: E402
from api_test import Client, check, stop, ws_connect, ws_read_frame  # noqa: E402
from chat_test import Events, session, start  # noqa: E402
from fake_asr import FakeASR  # noqa: E402
from fake_llm import FakeLLM  # noqa: E402

BIN = sys.argv[1]
TMP = tempfile.mkdtemp(prefix="fc_listen_")
QUESTION = "what is the weather like today"


def spoken(text, rate=16000):
    """PCM16 of espeak-ng saying text (its US Klatt voice: what pocketsphinx hears best)."""
    path = os.path.join(TMP, "say.wav")
    subprocess.run([BIN, "say", text, "-o", path, "--voice", "en-us+klatt", "--rate", str(rate)], check=True)
    with wave.open(path) as w:
        return w.readframes(w.getnframes())


def ws_send(s, op, payload):
    mask = os.urandom(4)
    n = len(payload)
    hdr = bytes([0x80 | op]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n))
    s.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))


class Mic:
    """A browser's microphone on a WebSocket: 60 ms PCM16 frames at real-time pace."""

    def __init__(self, port, path):
        self.s, self.status, self.rest = ws_connect(port, path)
        self.sent_speech_at = None

    def talk(self, pcm, silence_s=1.2, wait=True):
        lead = b"\0\0" * 9600  # 0.6 s of quiet first: the VAD's noise floor
        data = lead + pcm + b"\0\0" * int(16000 * silence_s)
        self.sent_speech_at = None

        def run():
            t0 = time.monotonic()
            for i, off in enumerate(range(0, len(data), 1920)):
                if off >= len(lead) and self.sent_speech_at is None:
                    self.sent_speech_at = time.monotonic()
                ws_send(self.s, 2, data[off:off + 1920])
                time.sleep(max(0, t0 + (i + 1) * 0.06 - time.monotonic()))
        th = threading.Thread(target=run, daemon=True)
        th.start()
        if wait:
            th.join()
        return th

    def close(self):
        try:
            ws_send(self.s, 8, b"\x03\xe8")
        except OSError:
            pass
        self.s.close()


def listen(ev, status=None):
    return [d for n, d, _ in ev.items if n == "listen" and (status is None or d["status"] == status)]


def infer_frames(c):
    _, _, raw, _ = c.req("GET", "/metrics")
    m = re.search(rb"^facecast_infer_frames_total (\d+)", raw or b"", re.M)
    return int(m.group(1)) if m else -1


def echo_pocketsphinx(question):
    srv, port, log = start({})
    c = Client(port)
    try:
        sid = session(c)
        ev = Events(port, sid)
        time.sleep(0.3)
        mic = Mic(port, f"/ws/audio?sessionid={sid}&mode=echo")
        check(mic.status == 101, "mode=echo: the microphone connects")
        mic.talk(question)
        fin = ev.wait(lambda: listen(ev, "final"), 15)
        text = fin[0]["text"] if fin else ""
        names = [d["status"] for d in listen(ev)]
        check(names[:3] == ["speech", "end", "final"], f"SSE listen: speech, end, final ({names})")
        check("weather" in text, f"pocketsphinx heard the question ({text!r})")
        check(fin and 0 <= fin[0]["asr_ms"] < 1500, f"the transcript {fin and fin[0]['asr_ms']} ms after the end of speech")
        said = ev.wait(lambda: [d for n, d, _ in ev.items if n == "speech" and d["type"] == "start"], 10)
        check(bool(said), "echo: the avatar says what it heard")
        check("asr: pocketsphinx (ready in" in "".join(log), "the log says pocketsphinx was loaded on first use")
        mic.close()
        ev.close()
    finally:
        code = stop(srv)
    check(code == 0, f"the server stops cleanly ({code})")


def chat_pocketsphinx(question, llm):
    srv, port, log = start({"OPENAI_BASE_URL": llm.url})
    c = Client(port)
    try:
        sid = session(c)
        ev = Events(port, sid)
        time.sleep(0.3)
        before = infer_frames(c)
        n_req = len(llm.requests)
        mic = Mic(port, f"/ws/audio?sessionid={sid}&mode=chat")
        mic.talk(question)
        fin = ev.wait(lambda: listen(ev, "final"), 15)
        heard = fin[0]["text"] if fin else None
        start_ev = ev.wait(lambda: [d for n, d, _ in ev.items if n == "chat" and d["status"] == "start"], 10)
        check(start_ev and start_ev[0]["text"] == heard, f"the transcript is the chat turn's text ({heard!r})")
        # The turn's start event goes out before its request reaches the LLM: wait for it.
        asked = ev.wait(lambda: llm.requests[n_req:], 5)
        check(asked and asked[-1]["body"]["messages"][-1]["content"] == heard, "and the LLM is asked it")
        turn = start_ev[0]["turn"] if start_ev else 0
        sp = ev.wait(lambda: [d for d in ev.chat(turn) if d["status"] == "speaking"], 15)
        tl = sp[0]["timeline"] if sp else {}
        keys = ("asr_ms", "llm_first_token_ms", "first_sentence_ms", "first_audio_ms", "first_frame_ms")
        vals = [tl.get(k) for k in keys]
        check(sp and sp[0]["voice"] is True and None not in vals and vals == sorted(vals) and vals[0] >= 0,
              f"the voice turn's timeline from the end of speech, in order ({tl})")
        end = ev.turn_end(turn, 15)
        check(end and end[0]["status"] == "done", "the turn is done")
        ev.wait(lambda: c.post("/is_speaking", {"sessionid": sid})[1].get("data") is False, 15)
        moved = infer_frames(c) - before
        check(moved >= 50, f"the answer is lip-synced ({moved} frames)")

        # Barge-in: the avatar talks on (an endless answer); the user speaks over it.
        n_disc = len(llm.disconnects)
        st, js, _, _ = c.post("/human", {"sessionid": sid, "text": "ENDLESS", "type": "chat"})
        t_endless = js["data"]["turn"]
        ev.wait(lambda: c.post("/is_speaking", {"sessionid": sid})[1].get("data") is True, 10)
        k = len(listen(ev, "barge-in"))
        th = mic.talk(spoken("stop please"), wait=False)
        b = ev.wait(lambda: listen(ev, "barge-in")[k:], 10)
        t_b = time.monotonic()
        check(b and b[0]["turn"] == t_endless, f"barge-in: the talking turn is cut ({b})")
        if mic.sent_speech_at and b:
            print(f"     (barge-in event {1000 * (t_b - mic.sent_speech_at) + 60:.0f} ms after the first sound, "
                  "captured 60 ms before its chunk was sent)")
        end = ev.turn_end(t_endless, 5)
        check(end and end[0]["status"] == "cancelled", "barge-in: the turn is cancelled")
        check(ev.wait(lambda: len(llm.disconnects) > n_disc, 5) is not None, "barge-in: the LLM's connection closes")
        th.join()
        mic.close()
        ev.close()
    finally:
        code = stop(srv)
    check(code == 0, f"the server stops cleanly ({code})")


def remote_asr(fake, args, name, check_request):
    srv, port, log = start({"ASR_API_KEY": "asr-secret-never-logged"}, *args)
    c = Client(port)
    try:
        sid = session(c)
        ev = Events(port, sid)
        time.sleep(0.3)
        n = len(fake.requests)
        mic = Mic(port, f"/ws/audio?sessionid={sid}&mode=echo")
        mic.talk(spoken("hello there"))
        fin = ev.wait(lambda: listen(ev, "final"), 15)
        check(fin and fin[0]["text"] == fake.reply, f"{name}: the service's transcript ({fin})")
        reqs = fake.requests[n:]
        check(len(reqs) == 1, f"{name}: one request for the segment ({len(reqs)})")
        if reqs:
            check_request(reqs[0])
        said = ev.wait(lambda: [d for n_, d, _ in ev.items if n_ == "speech" and d["type"] == "start"], 10)
        check(bool(said), f"{name}: the avatar says it")
        fake.fail = 500
        mic.talk(spoken("hello again"))
        err = ev.wait(lambda: listen(ev, "error"), 15)
        check(err and f"{name} ASR at" in err[0]["error"], f"{name}: a failing service is an SSE listen error ({err})")
        fake.fail = None
        check(c.req("GET", "/healthz")[0] == 200, f"{name}: the server keeps serving")
        mic.close()
        ev.close()
    finally:
        stop(srv)
    check("asr-secret-never-logged" not in "".join(log), f"{name}: the key is not in the log")


def api_asr(question):
    """LiveTalking's ASR page protocol (FunASR's) at /api/asr."""
    srv, port, log = start({})
    try:
        s, status, rest = ws_connect(port, "/api/asr")
        check(status == 101, "/api/asr: the WebSocket opens")
        ws_send(s, 1, json.dumps({"chunk_size": [5, 10, 5], "wav_name": "h5", "is_speaking": True,
                                  "chunk_interval": 10, "itn": False, "mode": "2pass"}).encode())
        data = b"\0\0" * 9600 + question + b"\0\0" * 19200
        t0 = time.monotonic()
        for i, off in enumerate(range(0, len(data), 1920)):
            ws_send(s, 2, data[off:off + 1920])
            time.sleep(max(0, t0 + (i + 1) * 0.06 - time.monotonic()))
        op, msg = ws_read_frame(s, rest)
        r = json.loads(msg) if op == 1 else {}
        check(r.get("mode") == "2pass-offline" and "weather" in r.get("text", "") and r.get("is_final") is False
              and r.get("wav_name") == "h5", f"a segment the VAD ended: a 2pass-offline result ({r})")
        ws_send(s, 1, json.dumps({"chunk_size": [5, 10, 5], "wav_name": "h5", "is_speaking": False,
                                  "chunk_interval": 10, "mode": "2pass"}).encode())
        op, msg = ws_read_frame(s)
        r = json.loads(msg) if op == 1 else {}
        check(r.get("is_final") is True and r.get("text") == "", f"the end: a final result, nothing left ({r})")
        # file mode: a WAV file's bytes (22.05 kHz, its header) sent at once, then the end
        path = os.path.join(TMP, "file.wav")
        subprocess.run([BIN, "say", QUESTION, "-o", path, "--voice", "en-us+klatt", "--rate", "22050"], check=True)
        ws_send(s, 1, json.dumps({"wav_name": "file", "is_speaking": True, "mode": "offline",
                                  "wav_format": "wav", "chunk_size": [5, 10, 5]}).encode())
        raw = open(path, "rb").read()
        for off in range(0, len(raw), 960):
            ws_send(s, 2, raw[off:off + 960])
        ws_send(s, 1, b'{"is_speaking": false}')
        op, msg = ws_read_frame(s)
        r = json.loads(msg) if op == 1 else {}
        check(r.get("mode") == "offline" and r.get("is_final") is True and "weather" in r.get("text", ""),
              f"file mode (a 22.05 kHz WAV): the whole file transcribed ({r})")
        ws_send(s, 1, b"{not json")
        op, msg = ws_read_frame(s)
        check(op == 1 and "error" in json.loads(msg), "a message that is not JSON: an error result, the socket stays")
        s.close()
        # closed connections give their slot back (a reference cycle once kept them: the 257th
        # connection from one address was refused, found by fuzzing)
        for _ in range(300):
            s2, status, _ = ws_connect(port, "/api/asr")
            ws_send(s2, 8, b"\x03\xe8")
            s2.close()
        time.sleep(0.5)
        s2, status, _ = ws_connect(port, "/api/asr")
        check(status == 101, f"after 300 connections opened and closed, another opens ({status})")
        s2.close()
    finally:
        stop(srv)


def main():
    question = spoken(QUESTION)
    echo_pocketsphinx(question)
    llm = FakeLLM()
    chat_pocketsphinx(question, llm)
    api_asr(question)

    fake = FakeASR()

    def openai_req(r):
        f = r["fields"]
        wav = f.get("file", b"")
        ok = wav[:4] == b"RIFF" and struct.unpack("<I", wav[24:28])[0] == 16000
        secs = (len(wav) - 44) / 32000
        check(ok and 0.5 < secs < 3 and f.get("model") == b"whisper-1" and f.get("response_format") == b"json"
              and f.get("language") == b"en", f"openai: a 16 kHz WAV of the segment ({secs:.2f} s), model, language")
        check(r["headers"].get("Authorization") == "Bearer asr-secret-never-logged", "openai: the key from ASR_API_KEY")
    remote_asr(fake, ["--asr", "openai", "--asr-url", fake.url, "--asr-lang", "en"], "openai", openai_req)

    def funasr_req(r):
        st = r["start"] or {}
        check(st.get("mode") == "offline" and st.get("audio_fs") == 16000 and st.get("wav_format") == "pcm"
              and st.get("is_speaking") is True and r["frames"] > 5 and r["audio"] % 2 == 0
              and 0.5 < r["audio"] / 32000 < 3, f"funasr: its start message, then PCM16 ({r['audio'] / 32000:.2f} s)")
        check(r["headers"].get("Sec-WebSocket-Protocol") == "binary", "funasr: the 'binary' subprotocol offered")
    remote_asr(fake, ["--asr", "funasr", "--asr-url", fake.funasr_url], "funasr", funasr_req)

    # Refusals: what the microphone route and the server refuse, each with its reason.
    srv, port, log = start({}, "--asr", "none")
    c = Client(port)
    try:
        sid = session(c)
        for q, why in [("mode=karaoke", "mode must be"), ("mode=chat", "needs an LLM"), ("mode=echo", "--asr none")]:
            s, status, rest = ws_connect(port, f"/ws/audio?sessionid={sid}&{q}")
            op, msg = ws_read_frame(s, rest)
            check(op == 8 and why.encode() in msg, f"/ws/audio?{q}: closed with its reason ({msg[2:]!r})")
            s.close()
        s, status, rest = ws_connect(port, "/api/asr")
        op, msg = ws_read_frame(s, rest)
        check(op == 8 and b"--asr none" in msg, "/api/asr with --asr none: closed with the reason")
        s.close()
    finally:
        stop(srv)
    for args, what in [(["--asr", "klingon"], "unknown ASR provider"), (["--asr", "funasr", "--asr-url", "http://x"], "ws://"),
                       (["--barge-in", "sometimes"], "--barge-in")]:
        p = subprocess.run([BIN, "serve", "--port", "0", *args], capture_output=True, text=True, timeout=30)
        last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
        check(p.returncode == 2 and what in last, f"{' '.join(args)}: one line, exit 2 ({p.returncode}: {last})")
    # facecast bench chat runs (one turn of each kind; the figures go to docs/BENCHMARKS.md)
    p = subprocess.run([BIN, "bench", "chat", "--turns", "1", "--json"], capture_output=True, text=True, timeout=120)
    try:
        r = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        r = {}
    keys = ["typed_first_frame_ms", "typed_after_sentence_ms", "voice_first_frame_ms", "voice_asr_ms", "barge_in_ms",
            "instant_first_frame_ms", "instant_asr_ms", "interrupt_sse_ms", "interrupt_llm_closed_ms"]
    check(p.returncode == 0 and r.get("failed") == 0 and all(r.get(k, {}).get("p50", -1) >= 0 for k in keys),
          f"bench chat --turns 1: every figure measured ({p.returncode}: {p.stdout.strip()[-300:]} {p.stderr.strip()[-300:]})")
    fake.close()
    llm.close()
    print(f"{len(api_test.FAILS)} failed" if api_test.FAILS else "all listen checks passed")
    sys.exit(1 if api_test.FAILS else 0)


if __name__ == "__main__":
    main()
