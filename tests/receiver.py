"""A webhook receiver on localhost for the notification tests: a real HTTP server that
verifies each request the way the README tells receivers to (its own code, not Takeover's),
records it, and answers with the next scripted status (200 once the script runs out).

A request whose signature or timestamp does not verify is answered 401 and recorded with
`verified = False`, so a delivery recorded as delivered proves the receiver accepted it.
"""

import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOLERANCE = 300


@dataclass
class Received:
    at: float
    path: str
    headers: dict
    body: bytes
    verified: bool
    status: int

    @property
    def json(self) -> dict:
        return json.loads(self.body)


@dataclass
class Receiver:
    secret: str = ""
    script: list = field(default_factory=list)  # statuses to answer, in order
    received: list = field(default_factory=list)
    url: str = ""

    def verify(self, headers: dict, body: bytes) -> bool:
        timestamp = headers.get("x-takeover-timestamp", "")
        signature = headers.get("x-takeover-signature", "")
        if not timestamp.isdigit() or abs(time.time() - int(timestamp)) > TOLERANCE:
            return False
        mac = hmac.new(self.secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
        return any(
            hmac.compare_digest("v1=" + mac.hexdigest(), s.strip()) for s in signature.split(",")
        )

    def wait_for(self, count: int, timeout: float = 20.0, **match) -> list[Received]:
        deadline = time.monotonic() + timeout
        while True:
            got = [r for r in list(self.received) if _matches(r, match)]
            if len(got) >= count or time.monotonic() > deadline:
                assert len(got) >= count, f"received {len(got)} of {count}: {self.received}"
                return got
            time.sleep(0.1)


def _matches(received: Received, match: dict) -> bool:
    if not match:
        return True
    try:
        body = received.json
    except ValueError:
        return False
    return all(body.get(k) == v for k, v in match.items())


def start_receiver(secret: str = "", script=()) -> tuple[Receiver, ThreadingHTTPServer]:
    receiver = Receiver(secret=secret, script=list(script))
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            verified = receiver.verify(headers, body) if receiver.secret else True
            with lock:
                status = receiver.script.pop(0) if receiver.script else 200
            if not verified:
                status = 401
            receiver.received.append(
                Received(time.time(), self.path, headers, body, verified, status)
            )
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"ok" if status < 300 else b"no")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/takeover"
    return receiver, server
