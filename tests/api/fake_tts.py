"""Fake TTS services for the voice tests, each speaking its real wire protocol (as the
services' own code and docs define it), on one port:

  POST /v1/audio/speech     OpenAI: JSON in, raw s16le 24 kHz out (response_format "pcm")
  POST /tts                 GPT-SoVITS api_v2: JSON in, a WAV header with zero sizes at
                            32 kHz, then s16le (streaming_mode)
  POST /inference_*         CosyVoice's FastAPI server: multipart form in, raw s16le 24 kHz
  POST /v1/tts              fish-speech: JSON in, raw s16le 44.1 kHz (its streaming drops the
                            WAV header)
  GET  /edge/v1 (WebSocket) Microsoft Edge read-aloud: Sec-MS-GEC checked, speech.config and
                            ssml text frames in; turn.start, response, binary MP3 frames
                            (2-byte header length, headers, audio), audio.metadata, turn.end

The audio is a 180 Hz tone shaped into syllables (4 a second), 0.06 s per character of text,
sent in 100 ms pieces faster than real time. Behaviours by a keyword in the text:

  FAIL500   HTTP 500 with an error body in the service's shape (not edge: its upgrade checks
            the token, and a wrong one is answered 403)
  GARBAGE   an answer that is not audio (a WAV header of 8-bit audio; edge: a bad frame)
  CUT       half the audio, then the connection is dropped
  STALL     nothing for 4 s (a timeout)
  ENDLESS   audio at real-time pace until the client goes; records when it went

Every request is recorded (path, headers, body or form fields; edge: query and frames; and
"done", when its audio was all sent) in FakeTTS.requests."""
import hashlib
import http.server
import json
import math
import os
import re
import select
import socket
import struct
import subprocess
import tempfile
import time

import fakehttp
import wsproto

EDGE_TOKEN = "6A5AA1D4EAFF4E9FB37E23D68491D6F4"


def tone(seconds, rate):
    n = int(seconds * rate)
    out = bytearray()
    for i in range(n):
        t = i / rate
        env = max(0.0, math.sin(math.pi * 4 * t)) ** 0.5  # four syllables a second
        out += struct.pack("<h", int(12000 * env * math.sin(2 * math.pi * 180 * t)))
    return bytes(out)


def wav_header(rate, bits=16):
    return (b"RIFF" + struct.pack("<I", 36) + b"WAVEfmt " +
            struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * bits // 8, bits // 8, bits) + b"data" + struct.pack("<I", 0))


def edge_gec(unix):
    ticks = (int(unix) + 11644473600) // 300 * 300 * 10000000
    return hashlib.sha256(f"{ticks}{EDGE_TOKEN}".encode()).hexdigest().upper()



class FakeTTS:
    def __init__(self):
        self.requests = []
        self.disconnects = []
        self.audio_seconds = 0.0  # audio sent in all
        self.mp3 = self.make_mp3()
        fake = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(n)
                path = self.path.split("?")[0]
                if path.startswith("/inference_"):
                    body = {k: (v.decode() if k != "prompt_wav" else v) for k, v in
                            fakehttp.multipart_fields(raw, self.headers.get("Content-Type")).items()}
                    text = body.get("tts_text", "")
                else:
                    try:
                        body = json.loads(raw or b"{}")
                    except ValueError:
                        body = {}
                    text = body.get("input") or body.get("text") or ""
                rec = {"path": path, "headers": dict(self.headers), "body": body}
                fake.requests.append(rec)
                kinds = {"/v1/audio/speech": (24000, False, {"error": {"message": "TTS overloaded", "type": "server_error"}}),
                         "/tts": (32000, True, {"message": "tts failed", "Exception": "TTS overloaded"}),
                         "/v1/tts": (44100, False, {"statusCode": 500, "message": "TTS overloaded", "error": "Internal Server Error"})}
                if path.startswith("/inference_"):
                    rate, header, err = 24000, False, None
                elif path in kinds:
                    rate, header, err = kinds[path]
                else:
                    return self.answer(404, b'{"detail":"Not Found"}')
                if "FAIL500" in text:
                    return self.answer(500, json.dumps(err).encode() if err else b"Internal Server Error")
                self.send_response(200)
                self.send_header("Content-Type", "audio/wav" if header else "application/octet-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    self.stream(text, rate, header)
                    self.wfile.write(b"0\r\n\r\n")
                    rec["done"] = time.monotonic()
                except (BrokenPipeError, ConnectionResetError):
                    fake.disconnects.append(time.monotonic())
                self.close_connection = True

            def chunk(self, data):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def gone(self, wait):
                r, _, _ = select.select([self.connection], [], [], wait)
                return bool(r) and not self.connection.recv(1, socket.MSG_PEEK)

            def stream(self, text, rate, header):
                if "GARBAGE" in text:
                    self.chunk(wav_header(rate, bits=8) + b"\x80" * 1000)
                    return
                if "STALL" in text:
                    time.sleep(4)
                if header:
                    self.chunk(wav_header(rate))
                if "ENDLESS" in text:
                    piece = tone(0.1, rate)
                    while True:
                        self.chunk(piece)
                        fake.audio_seconds += 0.1
                        if self.gone(0.1):
                            fake.disconnects.append(time.monotonic())
                            raise BrokenPipeError
                pcm = tone(0.06 * len(text), rate)
                step = rate // 10 * 2
                pieces = [pcm[i:i + step] for i in range(0, len(pcm), step)]
                if "CUT" in text:
                    for p in pieces[:len(pieces) // 2]:
                        self.chunk(p)
                    fake.audio_seconds += 0.1 * (len(pieces) // 2)
                    self.connection.shutdown(socket.SHUT_RDWR)
                    raise BrokenPipeError
                for i, p in enumerate(pieces):
                    # odd sizes: a sample cut in two between pieces
                    if i % 3 == 1 and len(p) > 3:
                        self.chunk(p[:3])
                        p = p[3:]
                    self.chunk(p)
                    time.sleep(0.02)
                fake.audio_seconds += len(pcm) / 2 / rate

            def answer(self, status, obj):
                fakehttp.answer(self, status, obj)

            # ---- Edge: a WebSocket ----
            def do_GET(self):
                path, _, query = self.path.partition("?")
                q = dict(kv.split("=", 1) for kv in query.split("&") if "=" in kv)
                rec = {"path": path, "headers": dict(self.headers), "query": q, "frames": []}
                fake.requests.append(rec)
                if path != "/edge/v1" or self.headers.get("Upgrade", "").lower() != "websocket":
                    return self.answer(404, b"{}")
                now = time.time()
                if (q.get("TrustedClientToken") != EDGE_TOKEN or not re.fullmatch(r"[0-9a-f]{32}", q.get("ConnectionId", ""))
                        or q.get("Sec-MS-GEC") not in (edge_gec(now), edge_gec(now - 300))
                        or not q.get("Sec-MS-GEC-Version")):
                    return self.answer(403, b"{}")
                wsproto.accept(self)
                try:
                    self.edge(rec)
                except (BrokenPipeError, ConnectionResetError, OSError):
                    fake.disconnects.append(time.monotonic())

            def ws_recv(self):
                return wsproto.recv(self.rfile)

            def ws_send(self, op, data):
                wsproto.send(self.wfile, op, data)

            def text_frame(self, path, body):
                self.ws_send(1, (f"X-RequestId:{'0' * 32}\r\nContent-Type:application/json; charset=utf-8\r\n"
                                 f"Path:{path}\r\n\r\n{body}").encode())

            def edge(self, rec):
                while len(rec["frames"]) < 2:
                    op, data = self.ws_recv()
                    if op == 8:
                        return
                    rec["frames"].append(data.decode())
                ssml = rec["frames"][1]
                text = re.sub(r"<[^>]+>", "", ssml.split("\r\n\r\n", 1)[-1])
                rec["text"] = text
                self.text_frame("turn.start", '{"context":{"serviceTag":"x"}}')
                self.text_frame("response", '{"context":{"serviceTag":"x"},"audio":{"type":"inline"}}')
                if "GARBAGE" in text:
                    self.ws_send(2, b"\x00\x05junk!")
                    time.sleep(1)
                    return
                if "STALL" in text:
                    time.sleep(4)
                hdr = (f"X-RequestId:{'0' * 32}\r\nContent-Type:audio/mpeg\r\nX-StreamId:1\r\nPath:audio\r\n").encode()
                mp3 = fake.mp3
                # ~170 ms of audio a frame, 3× faster than real time (as the service sends it)
                pieces = [mp3[i:i + 1000] for i in range(0, len(mp3), 1000)]
                if "CUT" in text:
                    pieces = pieces[:len(pieces) // 2]
                for p in pieces:
                    self.ws_send(2, struct.pack(">H", len(hdr)) + hdr + p)
                    time.sleep(0.06)
                if "CUT" in text:
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                fake.audio_seconds += 2.0
                rec["done"] = time.monotonic()
                self.text_frame("audio.metadata", '{"Metadata":[{"Type":"WordBoundary","Data":{"Offset":1000000,'
                                '"Duration":2000000,"text":{"Text":"x","Length":1,"BoundaryType":"WordBoundary"}}}]}')
                self.ws_send(2, struct.pack(">H", len(b"Path:audio\r\n")) + b"Path:audio\r\n")  # the empty end
                self.text_frame("turn.end", "{}")
                time.sleep(0.5)  # the client closes

        self.httpd, self.port = fakehttp.serve(H)
        self.url = f"http://127.0.0.1:{self.port}"
        self.edge_url = f"ws://127.0.0.1:{self.port}/edge/v1?TrustedClientToken={EDGE_TOKEN}"

    @staticmethod
    def make_mp3():
        """2 s of the tone as Edge sends it: MP3, 24 kHz mono, 48 kbit/s (made with ffmpeg)."""
        d = tempfile.mkdtemp(prefix="fc_fake_tts_")
        wav, mp3 = os.path.join(d, "t.wav"), os.path.join(d, "t.mp3")
        with open(wav, "wb") as f:
            pcm = tone(2.0, 24000)
            f.write(b"RIFF" + struct.pack("<I", 36 + len(pcm)) + wav_header(24000)[8:40] + struct.pack("<I", len(pcm)) + pcm)
        subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", wav, "-ac", "1", "-ar", "24000", "-b:a", "48k",
                        "-f", "mp3", mp3], check=True)
        data = open(mp3, "rb").read()
        os.remove(wav)
        os.remove(mp3)
        os.rmdir(d)
        return data

    def close(self):
        self.httpd.shutdown()
