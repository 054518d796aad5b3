"""The demo downstream's HTTP handler (`demo/downstream.py`): the tool protocol's routes,
the signature check, the control endpoints and the injected faults, on the socket itself."""

import contextlib
import json
import socket
import struct
import time
from dataclasses import asdict
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from takeover_client.tool import (
    BadRequest,
    Response,
    parse_json_object,
)
from takeover_client.verifier import Verifier

from demo.downstream_store import (
    IDLE_TIMEOUT_SECONDS,
    MAX_BODY_BYTES,
    PREFIXES,
    is_int,
    require_prefix_target,
    require_state,
    validate_fault,
)

# --- HTTP ----------------------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    """One connection; HTTP/1.1 keep-alive, every answer with a Content-Length."""

    protocol_version = "HTTP/1.1"
    server_version = "TakeoverDemoDownstream/1.0"
    # Idle keep-alive connections are dropped after this; it does not limit a slow answer.
    timeout = IDLE_TIMEOUT_SECONDS
    server: ThreadingHTTPServer  # demo.downstream.DemoDownstreamServer: its store and tools

    def setup(self) -> None:
        super().setup()
        self.busy = False
        self.started = time.monotonic()
        self.server.track(self)

    def finish(self) -> None:
        self.server.untrack(self)
        super().finish()

    def handle_one_request(self) -> None:
        self.busy = False
        super().handle_one_request()
        self.busy = False

    def parse_request(self) -> bool:
        # The request line has been read: from here on the connection is not idle, and a
        # `refuse` must not cut it off.
        self.busy = True
        self.started = time.monotonic()
        return super().parse_request()

    # Routing.

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def _dispatch(self, method: str) -> None:
        self.note = ""
        try:
            raw = self._read_body()
        except BadRequest as exc:
            # The unread body would be taken for the next request: close the connection.
            self._send_json(400, {"error": "bad_request", "detail": str(exc)}, close=True)
            return
        path = urlsplit(self.path).path
        parts = path.split("/", 2)  # "", first, rest
        first = parts[1] if len(parts) > 1 else ""
        try:
            if first in PREFIXES:
                relative = "/" + (parts[2] if len(parts) > 2 else "")
                self._tool_call(method, path, first, relative, raw)
            elif first == "_control" and len(parts) == 3 and "/" not in parts[2]:
                self._control(method, parts[2], raw)
            else:
                self._send_json(404, {"error": "not_found"})
        except BadRequest as exc:
            self._send_json(400, {"error": "bad_request", "detail": str(exc)})
        except _MethodNotAllowed as exc:
            self._send_json(
                405, {"error": "method_not_allowed"}, headers={"Allow": ", ".join(exc.allowed)}
            )

    def _allow(self, method: str, *allowed: str) -> None:
        if method not in allowed:
            raise _MethodNotAllowed(allowed)

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raise BadRequest("chunked bodies are not supported; send a Content-Length")
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        try:
            size = int(length)
        except ValueError:
            raise BadRequest("invalid Content-Length") from None
        if not 0 <= size <= MAX_BODY_BYTES:
            raise BadRequest(f"body must be at most {MAX_BODY_BYTES} bytes")
        raw = self.rfile.read(size)
        if len(raw) != size:
            raise ConnectionError("client closed the connection mid-body")
        return raw

    # The tool protocol, spoken by `takeover_client.tool`.

    def _tool_call(self, method: str, raw_path: str, prefix: str, relative: str, raw: bytes):
        """One call of a tool: its signature checked (refused when required), then answered by
        the prefix's `Tool`, faults acted out on the wire."""
        headers = dict(self.headers.items())
        signature = self._check_signature(method, raw_path, raw, headers)
        if signature is None:
            return
        notes: dict[str, Any] = {"signature": signature, "traceparent": headers.get("traceparent")}
        response = self.server.tools[prefix].handle(
            method, unquote(relative), headers, raw, notes=notes
        )
        if relative == "/effects" and method == "POST":
            self._after_effect(prefix, headers, raw, response, notes)
            return
        if fault := response.headers.pop("X-Demo-Fault", None):
            self.note = f" fault={fault}"
        self._send_json(response.status, response.body, headers=response.headers)

    def _check_signature(self, method: str, raw_path: str, raw: bytes, headers) -> str | None:
        """ "valid", "missing" or "invalid"; None when the call was refused (and answered)."""
        store = self.server.store
        refusal = Verifier(store.secrets).refusal(
            method=method, path=raw_path, body=raw, headers=headers
        )
        verdict = "valid" if refusal is None else refusal.verdict
        refused = refusal is not None and store.require_signature
        store.note_signature(verdict, refused=refused)
        if not refused:
            return verdict
        # Always logged, even with --quiet: a direct call to a tool is worth seeing.
        self.server.log(refusal.line(method, raw_path), always=True)
        self.note = " refused"
        self._send_json(
            401, json.loads(refusal.body()), headers={"WWW-Authenticate": "Takeover-Signature"}
        )
        return None

    def _after_effect(self, prefix: str, headers, raw: bytes, response: Response, notes) -> None:
        key = headers.get("Idempotency-Key")
        self.note = f" key={key}"
        if response.status == 400:
            # Malformed: the helper refused it before `apply`; counted and logged all the same.
            try:
                payload = parse_json_object(raw)
            except BadRequest:
                payload = None
            self.server.store.effect(
                prefix,
                key,
                headers.get("X-Takeover-Action"),
                payload,
                response.body.get("detail", "method not allowed"),
                headers.get("traceparent"),
                notes["signature"],
            )
        fault = notes.get("fault")
        if fault is not None:
            self.note += f" fault={fault.mode}"
        if fault is None or fault.mode in ("reject", "error_before_commit"):
            self._send_json(response.status, response.body, headers=response.headers)
        elif fault.mode == "drop_after_commit":
            self._drop_connection()
        elif fault.mode == "error_after_commit":
            self._send_json(500, {"error": "internal_error", "detail": "injected fault"})
        elif fault.mode == "slow_after_commit":
            # Wakes early on shutdown, so SIGTERM is not held up by a sleeping request.
            self.server.stopping.wait(fault.seconds)
            self._send_json(response.status, response.body)
        else:  # pragma: no cover - every mode is handled above
            raise AssertionError(fault.mode)

    # Control.

    def _control(self, method: str, name: str, raw: bytes) -> None:
        store = self.server.store
        if name == "faults":
            self._allow(method, "GET", "POST", "DELETE")
            if method == "GET":
                self._send_json(200, {"faults": store.rules()})
            elif method == "DELETE":
                self._send_json(200, {"cleared": store.clear_rules()})
            else:
                spec = validate_fault(parse_json_object(raw))
                if spec["mode"] == "refuse":
                    self._refuse(spec["seconds"])
                else:
                    rule = store.add_rule(spec)
                    self.note = f" +{rule.mode}x{rule.times}"
                    self._send_json(200, {"fault": asdict(rule)})
        elif name == "stats":
            self._allow(method, "GET")
            self._send_json(200, store.stats())
        elif name == "records":
            self._allow(method, "GET")
            self._send_json(200, store.records())
        elif name == "requests":
            self._allow(method, "GET")
            self._send_json(200, {"requests": store.requests()})
        elif name == "external-write":
            self._allow(method, "POST")
            body = parse_json_object(raw)
            prefix, target = require_prefix_target(body)
            record = store.external_write(prefix, target, require_state(body))
            self._send_json(200, record.as_json())
        elif name == "seed":
            self._allow(method, "POST")
            body = parse_json_object(raw)
            prefix, target = require_prefix_target(body)
            state = require_state(body)
            version = body.get("version", 1)
            if not is_int(version) or version < 1:
                raise BadRequest("version must be an integer >= 1")
            self._send_json(200, store.seed(prefix, target, state, version).as_json())
        elif name == "reset":
            self._allow(method, "POST")
            store.reset()
            self._send_json(200, {"reset": True})
        elif name == "secrets":
            self._allow(method, "POST")
            secret = parse_json_object(raw).get("secret")
            if not isinstance(secret, str) or not secret:
                raise BadRequest("secret must be a non-empty string")
            self._send_json(200, {"secrets": store.add_secret(secret)})
        elif name == "require-signature":
            self._allow(method, "POST")
            require = parse_json_object(raw).get("require")
            if not isinstance(require, bool):
                raise BadRequest("require must be true or false")
            store.require_signature = require
            self.server.log(f"signatures {'required' if require else 'not required'}")
            self._send_json(200, {"require": require})
        else:
            self._send_json(404, {"error": "not_found"})

    def _refuse(self, seconds: float) -> None:
        self.server.store.note_refuse()
        # Only answer once the listening socket is closed: a client that sends its next
        # request after this answer must be refused, not queued in the accept backlog.
        closed = self.server.refuse_connections(seconds)
        self.note = f" refuse {seconds:g}s"
        body = {"fault": {"mode": "refuse", "seconds": seconds}, "refusing": closed}
        # Connection: close, or the client would reuse this connection through the window.
        self._send_json(200, body, close=True)

    # Output.

    def _send_json(
        self,
        status: int,
        body: dict[str, Any],
        *,
        close: bool = False,
        headers: dict[str, str] | None = None,
    ) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            if close:
                self.send_header("Connection", "close")  # also sets close_connection
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            self.wfile.flush()
        except OSError as exc:  # the client gave up, e.g. after its read timeout
            self.close_connection = True
            self._log(f"{status} not delivered ({exc.__class__.__name__})")
            return
        self._log(str(status))

    def _drop_connection(self) -> None:
        """Close without a response; SO_LINGER 0 makes it an RST rather than a FIN."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        # The descriptor is released when finish() closes rfile; shutdown_request() then
        # finds the socket closed, so no FIN goes out before the RST.
        self.connection.close()
        self._log("dropped")

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # The stdlib's own errors (bad request line, unsupported method): JSON like ours.
        self.note = ""
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "Error"
        error = phrase.lower().replace(" ", "_").replace("-", "_")
        # Connection: close, as the stdlib does: after a garbled request, the stream is suspect.
        self._send_json(code, {"error": error, "detail": message or phrase}, close=True)

    def _log(self, result: str) -> None:
        elapsed = (time.monotonic() - self.started) * 1000
        method = getattr(self, "command", None) or "-"
        path = getattr(self, "path", None) or "-"
        note = getattr(self, "note", "")
        self.server.log(f"{method} {path} {result}{note} {elapsed:.0f}ms")

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # _log writes one line per request instead

    def log_message(self, format: str, *args: Any) -> None:
        self.server.log(format % args)


class _MethodNotAllowed(Exception):
    def __init__(self, allowed: tuple[str, ...]) -> None:
        super().__init__(allowed)
        self.allowed = allowed
