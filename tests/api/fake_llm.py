"""A fake OpenAI-compatible LLM for the chat tests: POST /v1/chat/completions answered the way
the real API answers (Server-Sent Events of chat.completion.chunk objects, "data: [DONE]"),
with behaviours picked by a keyword in the last user message:

  (none)     three sentences, in pieces of 4 characters, 10 ms apart, then [DONE]
  SLOW       the first piece after 1.5 s
  ENDLESS    a sentence every 100 ms until the client goes; records when it went
  DENIED     401 with OpenAI's {"error": {...}} body
  GARBAGE    an event that is not JSON
  CUT        two sentences, then the connection closes without [DONE]
  HUGE       200 KB without a full stop
  MIDERROR   one sentence, then an {"error": ...} event
  WHOLE      a non-streamed chat.completion (application/json)
  CHINESE    two Chinese sentences, a character at a time

Every request is recorded (path, headers, body) in FakeLLM.requests."""
import http.server
import json
import select
import socket
import time

import fakehttp

ANSWER = "Hello there! I am a fake model. This is the third sentence."


def chunk(text=None, finish=None, role=None):
    delta = {}
    if role:
        delta["role"] = role
    if text is not None:
        delta["content"] = text
    return {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": "fake",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


class FakeLLM:
    def __init__(self):
        self.requests = []
        self.disconnects = []  # time.monotonic() when an ENDLESS client went away
        fake = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def send_event(self, obj):
                data = obj if isinstance(obj, str) else json.dumps(obj)
                self.wfile.write(f"data: {data}\n\n".encode())
                self.wfile.flush()

            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(n) or b"{}")
                fake.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                msgs = body.get("messages") or [{}]
                last = msgs[-1].get("content", "")
                if self.path != "/v1/chat/completions":
                    return self.answer(404, {"error": {"message": "no such route", "type": "invalid_request_error"}})
                if "DENIED" in last:
                    return self.answer(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}})
                if "WHOLE" in last:
                    return self.answer(200, {"id": "x", "object": "chat.completion", "model": "fake",
                                             "choices": [{"index": 0, "message": {"role": "assistant", "content": "One whole answer. Not streamed."}, "finish_reason": "stop"}]})
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    self.stream(last)
                except (BrokenPipeError, ConnectionResetError):
                    fake.disconnects.append(time.monotonic())
                self.close_connection = True

            def stream(self, last):
                self.send_event(chunk("", role="assistant"))
                if "SLOW" in last:
                    time.sleep(1.5)
                if "ENDLESS" in last:
                    i = 0
                    while True:
                        self.send_event(chunk(f"Sentence number {i} goes on. "))
                        i += 1
                        # waits 100 ms, but sees the client close its end the moment it does
                        r, _, _ = select.select([self.connection], [], [], 0.1)
                        if r and not self.connection.recv(1, socket.MSG_PEEK):
                            fake.disconnects.append(time.monotonic())
                            return
                if "GARBAGE" in last:
                    self.send_event(chunk("Fine so far. "))
                    self.send_event("{not json")
                    time.sleep(0.5)
                    return
                if "CUT" in last:
                    self.send_event(chunk("First part is here. Second part too. Third"))
                    return
                if "HUGE" in last:
                    piece = "word " * 200
                    for _ in range(200):
                        self.send_event(chunk(piece))
                    self.send_event(chunk(None, finish="stop"))
                    self.send_event("[DONE]")
                    return
                if "CHINESE" in last:
                    for ch in "你好！今天天气很好。":
                        self.send_event(chunk(ch))
                    self.send_event(chunk(None, finish="stop"))
                    self.send_event("[DONE]")
                    return
                if "MIDERROR" in last:
                    self.send_event(chunk("Only this sentence. "))
                    self.send_event({"error": {"message": "The server had an error while processing your request.", "type": "server_error"}})
                    return
                for i in range(0, len(ANSWER), 4):
                    self.send_event(chunk(ANSWER[i:i + 4]))
                    time.sleep(0.01)
                self.send_event(chunk(None, finish="stop"))
                self.send_event("[DONE]")

            def answer(self, status, obj):
                fakehttp.answer(self, status, obj)

        self.httpd, self.port = fakehttp.serve(H)
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def close(self):
        self.httpd.shutdown()
