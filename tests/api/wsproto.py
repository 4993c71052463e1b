"""RFC 6455 for the fake services' servers (stdlib only): the upgrade answer and frames, used
from inside an http.server handler (self.rfile / self.wfile after the 101)."""
import base64
import hashlib
import struct


def accept(handler, protocol=None):
    """Answers the upgrade request handler holds with 101 (echoing a subprotocol if given)."""
    key = handler.headers["Sec-WebSocket-Key"]
    acc = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
    handler.send_response(101)
    handler.send_header("Upgrade", "websocket")
    handler.send_header("Connection", "Upgrade")
    handler.send_header("Sec-WebSocket-Accept", acc)
    if protocol:
        handler.send_header("Sec-WebSocket-Protocol", protocol)
    handler.end_headers()
    handler.wfile.flush()
    handler.close_connection = True


def recv(rfile):
    """(opcode, payload) of the next frame (client frames are masked); ConnectionResetError at
    the end of the stream."""
    h = rfile.read(2)
    if len(h) < 2:
        raise ConnectionResetError
    n = h[1] & 0x7F
    if n == 126:
        n = struct.unpack(">H", rfile.read(2))[0]
    elif n == 127:
        n = struct.unpack(">Q", rfile.read(8))[0]
    mask = rfile.read(4) if h[1] & 0x80 else b"\0\0\0\0"
    data = bytes(b ^ mask[i % 4] for i, b in enumerate(rfile.read(n)))
    return h[0] & 0x0F, data


def send(wfile, op, data):
    """An unmasked frame (server to client): op 1 text, 2 binary, 8 close."""
    n = len(data)
    if n < 126:
        hdr = bytes([0x80 | op, n])
    elif n < 65536:
        hdr = bytes([0x80 | op, 126]) + struct.pack(">H", n)
    else:
        hdr = bytes([0x80 | op, 127]) + struct.pack(">Q", n)
    wfile.write(hdr + data)
    wfile.flush()
