#!/usr/bin/env python3
"""Voices from TTS services (--tts openai|edge|gpt-sovits|cosyvoice|fish) against fakes that
speak each service's wire protocol (tests/api/fake_tts.py): each provider's request is what the
service expects, its audio is lip-synced as it arrives (speech start comes before the service
has finished), per-request and per-session voice settings reach it, every way a service can
fail falls back to espeak-ng with an SSE `tts` event while the server keeps serving, interrupt
closes the service's connection, the key is never logged, and a chat's answer is spoken by the
service. usage: voice_test.py FACECAST_BINARY"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
import api_test  # noqa: E402
from api_test import Client, check, is_error, offer_sdp, stop, wav_bytes  # noqa: E402
from chat_test import Events, session, start  # noqa: E402
from fake_llm import FakeLLM  # noqa: E402
from fake_tts import FakeTTS  # noqa: E402

BIN = sys.argv[1]
SECRET = "tts-key-0123456789-never-logged"


def infer_frames(c):
    st, _, raw, _ = c.req("GET", "/metrics")
    m = re.search(rb"^facecast_infer_frames_total (\d+)", raw or b"", re.M)
    return int(m.group(1)) if m else -1


def speech(ev, kind):
    return [d for n, d, _ in ev.items if n == "speech" and d["type"] == kind]


def tts_events(ev):
    return [d for n, d, _ in ev.items if n == "tts"]


def quiet(c, sid, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        if c.post("/is_speaking", {"sessionid": sid})[1].get("data") is False:
            return True
        time.sleep(0.05)
    return False


def open_session(port):
    c = Client(port)
    sid = session(c)
    ev = Events(port, sid)
    time.sleep(0.3)
    return c, sid, ev


def provider_round(fake, name, args, expect_path, check_request):
    """One provider: /human echo of two sentences goes to the service sentence by sentence,
    the avatar speaks (start before the service finished, end after), frames are lip-synced."""
    srv, port, log = start({"TTS_API_KEY": SECRET}, "--tts", name, *args)
    try:
        c, sid, ev = open_session(port)
        hz = c.req("GET", "/healthz")[1]["data"]
        check(hz.get("tts") == {"fishtts": "fish"}.get(name, name), f"{name}: /healthz names the voice ({hz.get('tts')})")
        n_req = len(fake.requests)
        before = infer_frames(c)
        t0 = time.monotonic()
        st, js, _, _ = c.post("/human", {"sessionid": sid, "text": "Hello there, this is a test. How are you today?"})
        check(st == 200 and time.monotonic() - t0 < 0.5, f"{name}: /human answers at once ({st})")
        started = ev.wait(lambda: speech(ev, "start"), 10)
        ended = ev.wait(lambda: speech(ev, "end"), 20)
        reqs = [r for r in fake.requests[n_req:] if r["path"] == expect_path]
        check(len(reqs) == 2, f"{name}: one request per sentence to {expect_path} ({len(reqs)})")
        check(bool(started) and bool(ended) and started[0]["id"] == ended[0]["id"],
              f"{name}: SSE speech start and end of one utterance ({started}, {ended})")
        t_start = [t for n, d, t in ev.items if n == "speech" and d["type"] == "start"]
        if reqs and t_start:  # lip-synced as it arrives: speaking before the service has finished
            ahead = (reqs[0].get("done", 0) - t_start[0]) * 1000
            check(ahead > 0, f"{name}: speech starts {ahead:.0f} ms before the service sent its last audio")
        check(quiet(c, sid), f"{name}: the avatar goes quiet after")
        frames = infer_frames(c) - before
        # two sentences of 0.06 s per character (Edge: 2 s each): frames at 25 fps, lip-synced
        want = 2 * 2.0 * 25 if name == "edge" else (28 + 19) * 0.06 * 25
        check(abs(frames - want) <= 12, f"{name}: {frames} lip-synced frames for {want:.0f} frames of audio")
        check(not tts_events(ev), f"{name}: no fallback ({tts_events(ev)})")
        if reqs:
            check_request(reqs[0], reqs[1])
        ev.close()
    finally:
        code = stop(srv)
    check(code == 0, f"{name}: the server stops cleanly ({code})")
    check(SECRET not in "".join(log), f"{name}: the key is not in the log")
    canonical = {"fishtts": "fish", "edgetts": "edge"}.get(name, name)
    check(f"tts: {canonical} at " in "".join(log), f"{name}: the log names the TTS service")


def failures(c, sid, ev, provider, cases):
    for word, status, why in cases:
        k = len(tts_events(ev))
        n_start = len(speech(ev, "start"))
        st, _, _, _ = c.post("/human", {"sessionid": sid, "text": f"{word} right here."})
        e = ev.wait(lambda: tts_events(ev)[k:], 15)
        d = e[0] if e else {}
        check(st == 200 and d.get("status") == status and why in (d.get("error") or "") and d.get("provider") == provider
              and d.get("text") == f"{word} right here." and f"{provider} TTS at " in (d.get("error") or ""),
              f"{provider} {word}: SSE tts {status} ({d})")
        check(ev.wait(lambda: len(speech(ev, "start")) > n_start, 10) is not None, f"{provider} {word}: the avatar still speaks")
        check(quiet(c, sid), f"{provider} {word}: and goes quiet after")
        check(c.req("GET", "/healthz")[0] == 200, f"{provider} {word}: the server keeps serving")


def main():
    fake = FakeTTS()
    media = tempfile.mkdtemp(prefix="fc_voice_media_")
    ref = os.path.join(media, "ref.wav")
    with open(ref, "wb") as f:
        f.write(wav_bytes(1.0, 16000))

    # ---- each provider's wire protocol ----
    def openai_req(a, b):
        ba = a["body"]
        check(ba.get("response_format") == "pcm" and ba.get("model") == "tts-1" and ba.get("voice") == "alloy"
              and ba.get("input") == "Hello there, this is a test.", f"openai: the request ({ba})")
        check(a["headers"].get("Authorization") == "Bearer " + SECRET, "openai: the key as a bearer token")
        check(b["body"].get("input") == "How are you today?", "openai: the second sentence")
    provider_round(fake, "openai", ["--tts-url", fake.url + "/v1/"], "/v1/audio/speech", openai_req)

    def sovits_req(a, b):
        ba = a["body"]
        check(ba.get("ref_audio_path") == "/srv/voices/me.wav" and ba.get("prompt_text") == "I am the reference."
              and ba.get("text_lang") == "zh" and ba.get("prompt_lang") == "zh" and ba.get("media_type") == "wav"
              and ba.get("streaming_mode") is True and ba.get("text") == "Hello there, this is a test.",
              f"gpt-sovits: api_v2's fields ({ba})")
    provider_round(fake, "gpt-sovits", ["--tts-url", fake.url, "--tts-ref-audio", "/srv/voices/me.wav",
                                        "--tts-ref-text", "I am the reference.", "--tts-lang", "zh"], "/tts", sovits_req)

    def cosy_req(a, b):
        ba = a["body"]
        check(ba.get("tts_text") == "Hello there, this is a test." and ba.get("prompt_text") == "Reference words."
              and ba.get("prompt_wav") == open(ref, "rb").read(), "cosyvoice: zero-shot form with the reference WAV uploaded")
    provider_round(fake, "cosyvoice", ["--tts-url", fake.url, "--tts-ref-audio", ref, "--tts-ref-text",
                                       "Reference words."], "/inference_zero_shot", cosy_req)

    def cosy_sft(a, b):
        check(a["body"].get("spk_id") == "中文女" and "prompt_wav" not in a["body"],
              f"cosyvoice: without a reference, a built-in speaker ({a['body'].get('spk_id')})")
    provider_round(fake, "cosyvoice", ["--tts-url", fake.url], "/inference_sft", cosy_sft)

    def fish_req(a, b):
        ba = a["body"]
        check(ba.get("reference_id") == "my-voice" and ba.get("format") == "wav" and ba.get("streaming") is True
              and "references" not in ba, f"fish: a reference id, streamed WAV ({ba})")
        check(a["headers"].get("Authorization") == "Bearer " + SECRET, "fish: the key as a bearer token")
    provider_round(fake, "fishtts", ["--tts-url", fake.url, "--tts-ref-audio", "my-voice"], "/v1/tts", fish_req)

    def edge_req(a, b):
        h = a["headers"]
        check(a["frames"] and "Path:speech.config" in a["frames"][0] and "audio-24khz-48kbitrate-mono-mp3" in a["frames"][0],
              "edge: speech.config asks for MP3 24 kHz")
        check(len(a["frames"]) > 1 and "Path:ssml" in a["frames"][1]
              and "Microsoft Server Speech Text to Speech Voice (zh-CN, YunxiaNeural)" in a["frames"][1]
              and a.get("text") == "Hello there, this is a test.", f"edge: the SSML ({a.get('text')})")
        check(h.get("Origin", "").startswith("chrome-extension://") and re.fullmatch(r"muid=[0-9A-F]{32};", h.get("Cookie", "")),
              "edge: the extension's Origin and a muid cookie")
        check(a["query"].get("Sec-MS-GEC-Version") == "1-143.0.3650.75", "edge: Sec-MS-GEC (checked by the fake) and its version")
    provider_round(fake, "edge", ["--tts-url", fake.edge_url], "/edge/v1", edge_req)

    # ---- per-request and per-session settings, failures, interrupt (openai) ----
    srv, port, log = start({}, "--tts", "cosyvoice", "--tts-url", fake.url, "--media-dir", media)
    c = Client(port)
    try:
        st, js, _, _ = c.post("/offer", {"sdp": offer_sdp(), "type": "offer", "refaudio": ref, "reftext": "Mine."})
        check(st == 200, f"/offer with refaudio under --media-dir ({st} {js})")
        sid = js.get("sessionid")
        n = len(fake.requests)
        c.post("/human", {"sessionid": sid, "text": "Cloned."})
        ev = Events(port, sid)
        ok = Events.wait(ev, lambda: [r for r in fake.requests[n:] if r["path"] == "/inference_zero_shot"], 10)
        check(bool(ok) and ok[0]["body"].get("prompt_text") == "Mine." and ok[0]["body"].get("prompt_wav") == open(ref, "rb").read(),
              "the session's refaudio/reftext reach the service")
        st, js, _, _ = c.post("/offer", {"sdp": offer_sdp(), "type": "offer", "refaudio": "/etc/passwd"})
        check(is_error(st, js, 403), f"refaudio outside --media-dir: 403 ({st})")
        st, js, _, _ = c.post("/human", {"sessionid": sid, "text": "x", "tts": {"ref_file": "/etc/hostname"}})
        check(is_error(st, js, 403), f"tts.ref_file outside --media-dir: 403 ({st})")
        st, js, _, _ = c.post("/human", {"sessionid": sid, "text": "x", "tts": {"emotion": 5}})
        check(is_error(st, js, 400), "tts.emotion not a string: 400")
        ev.close()
    finally:
        stop(srv)

    llm = FakeLLM()
    srv, port, log = start({"TTS_API_KEY": SECRET, "OPENAI_BASE_URL": llm.url}, "--tts", "openai",
                           "--tts-url", fake.url + "/v1", "--tts-timeout", "1", "--tts-voice", "shimmer")
    try:
        c, sid, ev = open_session(port)
        n = len(fake.requests)
        c.post("/human", {"sessionid": sid, "text": "Short one.", "tts": {"voice": "nova", "emotion": "cheerful"}})
        got = ev.wait(lambda: [r for r in fake.requests[n:]], 10)
        b = got[0]["body"] if got else {}
        check(b.get("voice") == "nova" and "cheerful" in (b.get("instructions") or ""),
              f"LiveTalking's tts.voice and tts.emotion reach the service ({b})")
        quiet(c, sid)
        st, js, _, _ = c.post("/human", {"sessionid": sid, "text": "Go. " * 300})
        check(is_error(st, js, 429) and "at most 200" in js["msg"],
              f"300 sentences at once: 429, the queue is bounded ({st} {(js or {}).get('msg')})")
        n = len(fake.requests)
        c.post("/human", {"sessionid": sid, "text": "Default voice."})
        got = ev.wait(lambda: [r for r in fake.requests[n:]], 10)
        check(got and got[0]["body"].get("voice") == "shimmer", "--tts-voice is the default")
        quiet(c, sid)

        # Every way a service fails: espeak speaks instead (before any audio) or the sentence
        # stops where it got to (after some), an SSE tts event says so, the server goes on.
        # (A chunked body cut short is not among them: libsoup reads it as the end, so that
        # sentence just stops; the edge round below has a connection dropped mid-sentence.)
        failures(c, sid, ev, "openai", [("FAIL500", "fallback", "HTTP 500: TTS overloaded"),
                                        ("GARBAGE", "fallback", "8 bits"),
                                        ("STALL", "fallback", "timed out")])
        text = "".join(log)
        check("openai TTS failed, espeak-ng speaks instead" in text and "TTS overloaded" in text,
              "the log says the service failed and espeak spoke")

        # Interrupt while the service still streams: its connection closes at once, speech ends.
        n_disc = len(fake.disconnects)
        c.post("/human", {"sessionid": sid, "text": "ENDLESS talk."})
        ev.wait(lambda: fake.audio_seconds > 0 and speech(ev, "start"), 10)
        time.sleep(0.5)
        t0 = time.monotonic()
        st, _, _, _ = c.post("/interrupt_talk", {"sessionid": sid})
        ok = ev.wait(lambda: len(fake.disconnects) > n_disc, 5)
        took = (fake.disconnects[-1] - t0) * 1000 if ok else None
        check(st == 200 and ok and took < 500, f"interrupt closes the TTS connection ({took and round(took)} ms)")
        check(quiet(c, sid, 5), "the avatar stops speaking")
        k = len(tts_events(ev))
        time.sleep(0.3)
        check(len(tts_events(ev)) == k, "a cancelled request is no failure (no tts event)")

        # A chat's answer is spoken by the service, sentence by sentence.
        n = len(fake.requests)
        st, js, _, _ = c.post("/human", {"sessionid": sid, "text": "Hi", "type": "chat"})
        end = ev.turn_end(js["data"]["turn"]) if st == 200 else None
        got = ev.wait(lambda: len([r for r in fake.requests[n:] if r["path"] == "/v1/audio/speech"]) >= 3, 15)
        said = [r["body"]["input"] for r in fake.requests[n:] if r["path"] == "/v1/audio/speech"]
        check(end and end[0]["status"] == "done" and said == ["Hello there!", "I am a fake model.", "This is the third sentence."],
              f"chat: each sentence to the service ({said})")
        check(quiet(c, sid), "chat: spoken, then quiet")
        ev.close()
    finally:
        code = stop(srv)
    check(code == 0, f"the server stops cleanly ({code})")
    check(SECRET not in "".join(log), "the key is not in the log")

    # Edge's failures: a frame that is not audio, the connection dropped mid-sentence (the
    # sentence stops there), silence past the timeout.
    srv, port, log = start({}, "--tts", "edge", "--tts-url", fake.edge_url, "--tts-timeout", "1")
    try:
        c, sid, ev = open_session(port)
        failures(c, sid, ev, "edge", [("GARBAGE", "fallback", "not audio"), ("CUT", "partial", "closed"),
                                      ("STALL", "fallback", "nothing for 1 s")])
        ev.close()
    finally:
        stop(srv)

    # A service that cannot be reached: espeak speaks; an unknown provider is refused at start.
    srv, port, log = start({}, "--tts", "edge", "--tts-url", "ws://127.0.0.1:9/edge/v1", "--tts-timeout", "2")
    try:
        c, sid, ev = open_session(port)
        c.post("/human", {"sessionid": sid, "text": "Nobody home."})
        e = ev.wait(lambda: tts_events(ev), 10)
        check(e and e[0]["status"] == "fallback" and "edge TTS at ws://127.0.0.1:9" in e[0]["error"],
              f"unreachable edge: fallback ({e})")
        check(ev.wait(lambda: speech(ev, "start"), 10) is not None, "unreachable edge: espeak speaks")
        ev.close()
    finally:
        stop(srv)
    for args, what in [(["--tts", "klingon"], "unknown TTS provider"), (["--tts", "openai", "--tts-url", "ftp://x"], "http://"),
                       (["--tts-rate", "12"], "--tts-rate"), (["--tts-voice", "klingon-xx"], "--tts-voice klingon-xx")]:
        p = subprocess.run([BIN, "serve", "--port", "0", *args], capture_output=True, text=True, timeout=30)
        last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
        check(p.returncode == 2 and what in last, f"{' '.join(args)}: one line, exit 2 ({p.returncode}: {last})")
    fake.close()
    llm.close()
    shutil.rmtree(media, ignore_errors=True)
    print(f"{len(api_test.FAILS)} failed" if api_test.FAILS else "all voice checks passed")
    sys.exit(1 if api_test.FAILS else 0)


if __name__ == "__main__":
    main()
