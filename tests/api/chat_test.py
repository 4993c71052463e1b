#!/usr/bin/env python3
"""Chat (/human type=chat) against a fake OpenAI-compatible LLM that speaks the real wire
protocol (tests/api/fake_llm.py): sentences are spoken as they arrive, history is kept, the
configuration comes from the ecosystem's environment variables and the key is never logged,
interrupting closes the LLM's connection at once, and every way a provider can fail ends the
turn with an SSE error while the server keeps serving. usage: chat_test.py FACECAST_BINARY"""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import api_test  # noqa: E402  (its helpers; BIN is argv[1] there too)
from api_test import Client, check, is_error, offer_sdp, stop  # noqa: E402
from fake_llm import ANSWER, FakeLLM  # noqa: E402

BIN = sys.argv[1]
SECRET = "sk-test-0123456789-never-logged"


def start(env_extra, *args, cwd=None, any_port=True):
    """The server with its stderr kept (to look for the key in it); any_port=False leaves the
    port to args (or a config file)."""
    env = dict(os.environ, FACECAST_DATA_DIR=api_test.DATA_DIR, **env_extra)
    for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "LLM_MODEL"):
        if k not in env_extra:
            env.pop(k, None)
    port = ["--port", "0"] if any_port else []
    p = subprocess.Popen([os.path.abspath(BIN), "serve", "--host", "127.0.0.1", *port, "--quiet", *args],
                         stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    log = []
    deadline = time.time() + 30
    while time.time() < deadline:
        line = p.stderr.readline()
        log.append(line)
        m = re.search(r"serving on http://[^:]+:(\d+)/", line)
        if m:
            def pump():
                for l in p.stderr:
                    log.append(l)
                    sys.stderr.write("server: " + l)
            threading.Thread(target=pump, daemon=True).start()
            return p, int(m.group(1)), log
        if not line and p.poll() is not None:
            break
    p.kill()
    raise SystemExit("server did not start: " + "".join(log))


class Events:
    """GET /sse of a session, read on a thread into a list of (event name, data)."""

    def __init__(self, port, sid):
        self.items = []
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.s.sendall(f"GET /sse?sessionid={sid} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        threading.Thread(target=self.read, daemon=True).start()

    def read(self):
        buf = b""
        while True:
            try:
                d = self.s.recv(65536)
            except OSError:
                return
            if not d:
                return
            buf += d
            while True:
                # named events (chat, listen, tts) and LiveTalking's unnamed ones (speech:
                # their data names the kind in "event")
                m = re.search(rb"(?:event: (\w+)\r?\n)?data: ([^\r\n]*)\r?\n\r?\n", buf)
                if not m:
                    break
                buf = buf[m.end():]
                try:
                    d = json.loads(m.group(2))
                except ValueError:
                    d = {"unparseable": m.group(2)}
                name = m.group(1).decode() if m.group(1) else (d.get("event") or "message")
                self.items.append((name, d, time.monotonic()))

    def chat(self, turn):
        return [d for n, d, _ in self.items if n == "chat" and d.get("turn") == turn]

    def wait(self, pred, timeout=15):
        return api_test.wait_for(pred, timeout, 0.02)

    def turn_end(self, turn, timeout=15):
        return self.wait(lambda: [d for d in self.chat(turn) if d["status"] in ("done", "error", "cancelled")], timeout)

    def close(self):
        self.s.close()


def session(c):
    st, js, _, _ = c.post("/offer", {"sdp": offer_sdp(), "type": "offer"})
    assert st == 200, (st, js)
    return js["sessionid"]


def chat(c, sid, text, **kw):
    return c.post("/human", dict({"sessionid": sid, "text": text, "type": "chat"}, **kw))


def main():
    llm = FakeLLM()
    srv, port, log = start({"OPENAI_BASE_URL": llm.url, "OPENAI_API_KEY": SECRET, "LLM_MODEL": "fake-model"},
                           "--llm-system", "Be brief.")
    c = Client(port)
    try:
        sid = session(c)
        ev = Events(port, sid)
        time.sleep(0.3)

        # A turn: three sentences in order, the avatar speaks, the timeline is reported.
        st, js, _, _ = chat(c, sid, "Hi")
        check(st == 200 and js.get("data", {}).get("turn") == 1, f"chat answers at once with its turn ({st} {js})")
        end = ev.turn_end(1)
        items = ev.chat(1)
        sent = [d["text"] for d in items if d["status"] == "sentence"]
        check(sent == ["Hello there!", "I am a fake model.", "This is the third sentence."], f"sentences in order ({sent})")
        check(items and items[0]["status"] == "start" and items[0].get("text") == "Hi", "a start event with the user's text")
        check(end and end[0]["status"] == "done" and end[0]["error"] is None and end[0]["sentences"] == 3,
              f"the turn is done ({end})")
        check(end and 0 < end[0]["llm_first_token_ms"] <= end[0]["first_sentence_ms"] <= end[0]["llm_done_ms"],
              "timeline: first token ≤ first sentence ≤ done")
        spoke = ev.wait(lambda: [d for n, d, _ in ev.items if n == "speech" and d["type"] == "start"], 10)
        check(bool(spoke), "the avatar starts speaking (SSE speech start)")
        st, js, _, _ = c.post("/is_speaking", {"sessionid": sid})
        check(st == 200 and js.get("data") is True, "is_speaking during the answer")
        sp = ev.wait(lambda: [d for d in ev.chat(1) if d["status"] == "speaking"], 10)
        tl = sp[0].get("timeline", {}) if sp else {}
        order = [tl.get(k) for k in ("llm_first_token_ms", "first_sentence_ms", "first_audio_ms", "first_frame_ms")]
        check(sp and sp[0]["voice"] is False and tl.get("asr_ms", 0) is None and None not in order
              and order == sorted(order) and order[0] > 0,
              f"SSE chat 'speaking': the turn's timeline, in order ({tl})")
        _, _, raw, _ = c.req("GET", "/metrics")
        m = re.search(rb'facecast_turn_seconds_count\{stage="first_frame"\} (\d+)', raw or b"")
        check(m and int(m.group(1)) >= 1, "/metrics: the turn histograms count it")
        r = llm.requests[-1]
        b = r["body"]
        check(b.get("model") == "fake-model" and b.get("stream") is True, f"model from LLM_MODEL, streamed ({b.get('model')})")
        check(r["headers"].get("Authorization") == "Bearer " + SECRET, "the key from OPENAI_API_KEY as a bearer token")
        check(b["messages"][0] == {"role": "system", "content": "Be brief."} and b["messages"][-1] == {"role": "user", "content": "Hi"},
              "system prompt from --llm-system, then the user's text")

        # The next turn carries the history.
        st, js, _, _ = chat(c, sid, "And again?")
        ev.turn_end(2)
        msgs = llm.requests[-1]["body"]["messages"]
        check([m["role"] for m in msgs] == ["system", "user", "assistant", "user"] and msgs[2]["content"] == ANSWER,
              f"history: the previous exchange is sent ({[m['role'] for m in msgs]})")

        # Interrupting a turn while the LLM still writes: its connection closes at once, no
        # sentence of it comes after, the speech ends.
        n_disc = len(llm.disconnects)
        chat(c, sid, "ENDLESS please", interrupt=True)
        ev.wait(lambda: len([d for d in ev.chat(3) if d["status"] == "sentence"]) >= 2)
        t0 = time.monotonic()
        st, js, _, _ = c.post("/interrupt_talk", {"sessionid": sid})
        check(st == 200, "interrupt_talk: 200")
        ok = ev.wait(lambda: len(llm.disconnects) > n_disc, 5)
        took = (llm.disconnects[-1] - t0) * 1000 if ok else None
        check(ok and took < 1000, f"the LLM's connection is closed on interrupt ({took and round(took)} ms)")
        end = ev.turn_end(3)
        check(end and end[0]["status"] == "cancelled", f"SSE: the turn is cancelled ({end})")
        n_after = len(ev.chat(3))
        time.sleep(0.5)
        check(len(ev.chat(3)) == n_after, "nothing of the cancelled turn comes after")
        quiet = ev.wait(lambda: c.post("/is_speaking", {"sessionid": sid})[1].get("data") is False, 5)
        check(bool(quiet), "the avatar stops speaking")

        # A new turn with interrupt: true replaces a running one.
        n_disc = len(llm.disconnects)
        chat(c, sid, "ENDLESS again")
        ev.wait(lambda: [d for d in ev.chat(4) if d["status"] == "sentence"])
        st, js, _, _ = chat(c, sid, "Hi", interrupt=True)
        check(st == 200 and js["data"]["turn"] == 5, "a new turn while one runs")
        check(ev.wait(lambda: len(llm.disconnects) > n_disc, 5) is not None, "the old turn's connection is closed")
        end5 = ev.turn_end(5)
        check(ev.turn_end(4, 1) and ev.turn_end(4)[0]["status"] == "cancelled" and end5 and end5[0]["status"] == "done",
              "the old turn is cancelled, the new one done")

        # Cancelled before the first token.
        n_disc = len(llm.disconnects)
        chat(c, sid, "SLOW")
        time.sleep(0.3)
        c.post("/interrupt_talk", {"sessionid": sid})
        end = ev.turn_end(6)
        check(end and end[0]["status"] == "cancelled", "a turn cancelled before its first token")

        # Chinese: split at the full-width marks, spoken (by the Mandarin voice: test_tts).
        st, js, _, _ = chat(c, sid, "CHINESE")
        end = ev.turn_end(js["data"]["turn"])
        zh = [d["text"] for d in ev.chat(js["data"]["turn"]) if d["status"] == "sentence"]
        check(zh == ["你好！", "今天天气很好。"] and end and end[0]["status"] == "done", f"Chinese sentences ({zh})")

        # What a provider can do wrong: each ends the turn with an error event, the server goes on.
        for word, sentences, expect in [("DENIED", 0, "Incorrect API key"), ("GARBAGE", 1, "does not parse"),
                                        ("CUT", 2, "ended before"), ("MIDERROR", 1, "had an error"),
                                        ("WHOLE", 2, None), ("HUGE", None, None)]:
            st, js, _, _ = chat(c, sid, word)
            turn = js["data"]["turn"] if st == 200 else None
            end = ev.turn_end(turn, 20) if turn else None
            d = end[0] if end else {}
            n = len([x for x in ev.chat(turn) if x["status"] == "sentence"]) if turn else -1
            if expect:
                check(d.get("status") == "error" and expect in (d.get("error") or "") and n == sentences,
                      f"{word}: an error event ({d.get('error')}), {n} sentences spoken")
            else:
                check(d.get("status") == "done" and (sentences is None or n == sentences), f"{word}: done ({n} sentences)")
            st, _, _, _ = c.req("GET", "/healthz")
            check(st == 200, f"{word}: the server keeps serving")
        huge = [x["text"] for x in ev.chat(turn) if x["status"] == "sentence"]
        check(huge and max(len(x) for x in huge) <= 300 and sum(len(x) for x in huge) <= 16 * 1024,
              f"HUGE: cut into sentences of ≤ 300 bytes, 16 KiB in all ({len(huge)} sentences)")

        # Bad requests.
        st, js, _, _ = chat(c, sid, "x" * 9000)
        check(is_error(st, js, 413), "chat text over 8 KiB: 413")
        st, js, _, _ = chat(c, "nope", "Hi")
        check(is_error(st, js, 404), "chat on an unknown session: 404")

        # Closing the session during a turn closes the LLM's connection.
        n_disc = len(llm.disconnects)
        chat(c, sid, "ENDLESS")
        ev.wait(lambda: llm.requests and "ENDLESS" in llm.requests[-1]["body"]["messages"][-1]["content"])
        time.sleep(0.3)
        st, _, _, _ = c.req("DELETE", f"/session/{sid}")
        check(st == 200 and ev.wait(lambda: len(llm.disconnects) > n_disc, 5) is not None,
              "closing the session closes the LLM's connection")
        ev.close()
    finally:
        code = stop(srv)
    check(code == 0, f"the server stops cleanly ({code})")
    text = "".join(log)
    check(SECRET not in text, "the API key appears nowhere in the log")
    check("chat: LLM at " + llm.url in text, "the log says which LLM is used")

    # An LLM that cannot be reached.
    srv, port, log = start({}, "--llm-url", "http://127.0.0.1:9/v1", "--llm-timeout", "3")
    c = Client(port)
    try:
        sid = session(c)
        ev = Events(port, sid)
        time.sleep(0.2)
        st, js, _, _ = chat(c, sid, "Hi")
        end = ev.turn_end(1, 10)
        check(st == 200 and end and end[0]["status"] == "error" and "127.0.0.1" in end[0]["error"],
              f"unreachable LLM: an error event ({end and end[0]['error']})")
        st, js, _, _ = c.post("/human", {"sessionid": sid, "text": "Still here.", "type": "echo"})
        check(st == 200, "echo still works")
        ev.close()
    finally:
        stop(srv)

    # Refused at start: a URL that is not http(s).
    p = subprocess.run([BIN, "serve", "--port", "0", "--llm-url", "ftp://example.com/v1"],
                       capture_output=True, text=True, timeout=30)
    last = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    check(p.returncode == 2 and "error" in last and "http://" in last,
          f"--llm-url ftp://…: one line, exit 2 ({p.returncode}: {p.stderr.strip()})")
    llm.close()
    print(f"{len(api_test.FAILS)} failed" if api_test.FAILS else "all chat checks passed")
    sys.exit(1 if api_test.FAILS else 0)


if __name__ == "__main__":
    main()
