"""What the fake services' HTTP handlers share: multipart form fields and JSON answers."""
import http.server
import json
import re
import threading


def multipart_fields(body, ctype):
    """name -> bytes of a multipart/form-data body."""
    m = re.search(r'boundary="?([^";]+)"?', ctype or "")
    out = {}
    if not m:
        return out
    for part in body.split(b"--" + m.group(1).encode()):
        if b"\r\n\r\n" not in part:
            continue
        head, data = part.split(b"\r\n\r\n", 1)
        n = re.search(rb'name="([^"]+)"', head)
        if n:
            out[n.group(1).decode()] = data[:-2] if data.endswith(b"\r\n") else data
    return out


def answer(handler, status, obj):
    """A JSON answer (obj: JSON-able, or bytes sent as they are) with its length."""
    data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def serve(handler_class):
    """A threading server on 127.0.0.1 (any port), serving on a daemon thread: (httpd, port)."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_class)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, httpd.server_address[1]
