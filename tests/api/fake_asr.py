"""Fake speech recognition services for the voice chat tests, each speaking its real wire
protocol, on one port:

  POST /v1/audio/transcriptions   OpenAI (and faster-whisper / whisper.cpp servers copying
                                  it): multipart file + model (+ language) in, {"text"} out
  GET  /funasr (WebSocket)        the FunASR runtime: a JSON start message, binary PCM16 16 kHz,
                                  {"is_speaking": false}; answered {"mode": "offline", "text",
                                  "wav_name", "is_final": false} (the C++ offline server's shape:
                                  is_final false even on the final result)

What they answer is FakeASR.reply; FakeASR.fail = an HTTP status makes the OpenAI route fail
with OpenAI's error body (the FunASR route then closes without an answer). Every request is
recorded in FakeASR.requests (OpenAI: fields, the WAV; FunASR: the start message, audio
bytes, frames)."""
import http.server
import json

import fakehttp
import wsproto



class FakeASR:
    def __init__(self):
        self.requests = []
        self.reply = "What time is it?"
        self.fail = None
        fake = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def answer(self, status, obj):
                fakehttp.answer(self, status, obj)

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                f = fakehttp.multipart_fields(raw, self.headers.get("Content-Type"))
                fake.requests.append({"path": self.path, "headers": dict(self.headers), "fields": f})
                if self.path != "/v1/audio/transcriptions":
                    return self.answer(404, {"detail": "Not Found"})
                if fake.fail:
                    return self.answer(fake.fail, {"error": {"message": "Transcription overloaded", "type": "server_error"}})
                self.answer(200, {"text": fake.reply})

            def do_GET(self):
                rec = {"path": self.path, "headers": dict(self.headers), "start": None, "audio": 0, "frames": 0}
                fake.requests.append(rec)
                if self.path != "/funasr" or self.headers.get("Upgrade", "").lower() != "websocket":
                    return self.answer(404, {})
                offered = self.headers.get("Sec-WebSocket-Protocol", "")
                wsproto.accept(self, "binary" if "binary" in offered else None)
                try:
                    while True:
                        op, data = wsproto.recv(self.rfile)
                        if op == 8:
                            return
                        if op == 2:
                            rec["audio"] += len(data)
                            rec["frames"] += 1
                            continue
                        msg = json.loads(data)
                        if msg.get("is_speaking") is True:
                            rec["start"] = msg
                        elif msg.get("is_speaking") is False:
                            if fake.fail:
                                return
                            wsproto.send(self.wfile, 1, json.dumps(
                                {"mode": "offline", "text": fake.reply, "wav_name": rec["start"]["wav_name"],
                                 "is_final": False}).encode())
                except (ConnectionResetError, BrokenPipeError, OSError):
                    return

        self.httpd, self.port = fakehttp.serve(H)
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.funasr_url = f"ws://127.0.0.1:{self.port}/funasr"

    def close(self):
        self.httpd.shutdown()
