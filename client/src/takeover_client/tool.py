"""Write a tool that speaks Takeover's tool protocol as a few functions.

    from takeover_client.tool import Tool, VersionConflict, Rejected

    tool = Tool(secrets=[os.environ["TAKEOVER_SIGNING_SECRET"]])

    @tool.apply
    def apply(effect):                   # POST /effects
        ticket = tickets.get(effect.target)
        if effect.expected_version is not None and effect.expected_version != ticket.version:
            raise VersionConflict(ticket.version)                          # 409
        ticket = tickets.update(effect.target, effect.desired_state, key=effect.key)
        return {"state": ticket.fields, "version": ticket.version}         # 200

    @tool.state
    def state(target):                   # GET /state/{target}; None is a 404
        ticket = tickets.get(target)
        return ticket and {"state": ticket.fields, "version": ticket.version}

    @tool.lookup                         # optional: GET /effects/{key} (declare lookup: true)
    def lookup(key):
        ticket = tickets.applied_with(key)
        return ticket and {"state": ticket.fields, "version": ticket.version}

    app = tool.wsgi()                    # gunicorn module:app  (or tool.asgi() for uvicorn)

Register it with the URL it is served at as `base_url` (`POST /api/v1/tools`, or the console),
and keep the signing secret Takeover shows once at registration in `secrets`.

What the helper does for you:

- Routes the protocol: ``POST /effects``, ``GET /state/{target}``, ``GET /effects/{key}``
  (relative to where the app is mounted); the target and key reach your function decoded
  and exactly as meant (``..`` stays ``..``, ``a%2Fb`` is ``a/b``).
- Checks every apply strictly, as Takeover sends it: the seven body fields, the
  ``Idempotency-Key`` and ``X-Takeover-Action`` headers, the header equal to ``action_id``.
  A malformed call is a 400 and your function never runs.
- Verifies the ``Takeover-Signature`` of every call (``takeover_client.verifier``) when
  ``secrets`` is given: unsigned, tampered or late calls are a 401 and your functions never
  run. Without ``secrets`` nothing is verified (a tool on a trusted network, or tests).
- Turns answers into the protocol's: a dict is the 200 body; ``VersionConflict(version)`` a
  409 (Takeover settles ``failed``/``version_conflict``); ``Rejected(detail)`` a 422
  (``failed``/``rejected``); ``None`` from ``state``/``lookup`` a 404; any other exception a
  500, which Takeover treats as *unknown* and reconciles by reading ``state``. A lookup
  without a registered function answers 501.
- Return a ``Response`` to answer anything else exactly.

Everything else (your storage, deduplicating on ``effect.key`` for an ``idempotent`` tool) is
yours. `Tool.handle(method, path, headers, body)` is the framework-free core: give it the
decoded path relative to the tool and get a `Response`, to mount the tool in any server.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import signing
from .verifier import AsgiVerifier, BodyError, Secrets, Verifier, WsgiVerifier, read_wsgi_body

logger = logging.getLogger("takeover_client.tool")

EFFECT_STRING_FIELDS = ("action_id", "tenant", "principal", "tool", "target")
EFFECT_FIELDS = (*EFFECT_STRING_FIELDS, "desired_state", "expected_version")
MAX_BODY_BYTES = 4 << 20


class BadRequest(Exception):
    """The call is malformed; answered 400 with this message as its ``detail``."""


class VersionConflict(Exception):
    """Raise from ``apply``: the record is not at ``expected_version`` (answered 409)."""

    def __init__(self, version: int | None = None, detail: str = "version conflict") -> None:
        super().__init__(detail)
        self.version = version


class Rejected(Exception):
    """Raise from ``apply``: the system refuses this change; nothing was applied (422)."""


@dataclass
class Response:
    """An answer: a JSON object, its status and any extra headers."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    def json_bytes(self) -> bytes:
        return json.dumps(self.body).encode()


@dataclass(frozen=True)
class Effect:
    """One apply call, checked. ``key`` is the Idempotency-Key, bare."""

    action_id: str
    tenant: str
    principal: str
    tool: str
    target: str
    desired_state: dict[str, Any]
    expected_version: int | None
    key: str
    notes: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json_object(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BadRequest("body must be a JSON object")
    return value


def parse_effect(
    body: bytes, headers: Mapping[str, str], notes: dict[str, Any] | None = None
) -> Effect:
    """An apply call as the protocol defines it, strictly: BadRequest names what is wrong."""
    lowered = {k.lower(): v for k, v in headers.items()}
    key = lowered.get(signing.KEY_HEADER.lower())
    action_header = lowered.get(signing.ACTION_HEADER.lower())
    payload = parse_json_object(body)
    if not key:
        raise BadRequest(f"missing {signing.KEY_HEADER} header")
    missing = [name for name in EFFECT_FIELDS if name not in payload]
    if missing:
        raise BadRequest(f"missing fields: {', '.join(missing)}")
    for name in EFFECT_STRING_FIELDS:
        if not isinstance(payload[name], str) or not payload[name]:
            raise BadRequest(f"{name} must be a non-empty string")
    if not isinstance(payload["desired_state"], dict):
        raise BadRequest("desired_state must be an object")
    expected = payload["expected_version"]
    if expected is not None and not _is_int(expected):
        raise BadRequest("expected_version must be an integer or null")
    if not action_header:
        raise BadRequest(f"missing {signing.ACTION_HEADER} header")
    if action_header != payload["action_id"]:
        raise BadRequest(f"{signing.ACTION_HEADER} header does not match action_id")
    fields = {name: payload[name] for name in EFFECT_FIELDS}
    return Effect(key=key, notes={} if notes is None else notes, **fields)


def _state_body(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"the {what} function must return a dict (or None), not {value!r}")
    return value


class Tool:
    """A tool server: register ``apply``, ``state`` and optionally ``lookup`` (module
    docstring), then serve ``tool.wsgi()`` or ``tool.asgi()`` or call ``tool.handle``."""

    def __init__(
        self,
        *,
        secrets: Secrets | None = None,
        tolerance: int = signing.TOLERANCE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.verifier = (
            Verifier(secrets, tolerance=tolerance, clock=clock) if secrets is not None else None
        )
        self._apply: Callable[[Effect], Any] | None = None
        self._state: Callable[[str], Any] | None = None
        self._lookup: Callable[[str], Any] | None = None

    # registration

    def apply(self, fn: Callable[[Effect], Any]) -> Callable[[Effect], Any]:
        self._apply = fn
        return fn

    def state(self, fn: Callable[[str], Any]) -> Callable[[str], Any]:
        self._state = fn
        return fn

    def lookup(self, fn: Callable[[str], Any]) -> Callable[[str], Any]:
        self._lookup = fn
        return fn

    # the protocol, framework-free

    def handle(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes = b"",
        *,
        notes: dict[str, Any] | None = None,
    ) -> Response:
        """Answer one call. `path` is decoded and relative to the tool (``/state/a/b``);
        the signature, if any, is checked by the caller (``wsgi()``/``asgi()`` do).
        `notes` is handed to ``apply`` as ``effect.notes``, for the server's own use."""
        method = method.upper()
        try:
            if path == "/effects":
                self._allow(method, "POST")
                return self._call_apply(parse_effect(body, headers, notes))
            if path.startswith("/effects/") and len(path) > len("/effects/"):
                self._allow(method, "GET")
                return self._call_read(self._lookup, path[len("/effects/") :], lookup=True)
            if path.startswith("/state/") and len(path) > len("/state/"):
                self._allow(method, "GET")
                return self._call_read(self._state, path[len("/state/") :], lookup=False)
        except BadRequest as exc:
            return Response(400, {"error": "bad_request", "detail": str(exc)})
        except _MethodNotAllowed as exc:
            return Response(405, {"error": "method_not_allowed"}, {"Allow": exc.allowed})
        return Response(404, {"error": "not_found"})

    def _call_apply(self, effect: Effect) -> Response:
        if self._apply is None:
            return Response(501, {"error": "not_implemented", "detail": "no apply function"})
        try:
            result = self._apply(effect)
        except VersionConflict as exc:
            return Response(409, {"error": "version_conflict", "version": exc.version})
        except Rejected as exc:
            return Response(422, {"error": "rejected", "detail": str(exc) or "rejected"})
        if isinstance(result, Response):
            return result
        return Response(200, _state_body(result if result is not None else {}, "apply"))

    def _call_read(self, fn: Callable[[str], Any] | None, name: str, *, lookup: bool) -> Response:
        if fn is None:
            detail = "no record of keys is kept here" if lookup else "no state function"
            return Response(501, {"error": "not_implemented", "detail": detail})
        result = fn(name)
        if isinstance(result, Response):
            return result
        if result is None:
            detail = "never received this key" if lookup else "no such target"
            return Response(404, {"error": "not_found", "detail": detail})
        body = _state_body(result, "lookup" if lookup else "state")
        return Response(200, {"applied": True, **body} if lookup else body)

    @staticmethod
    def _allow(method: str, allowed: str) -> None:
        if method != allowed:
            raise _MethodNotAllowed(allowed)

    # servers

    def wsgi(self) -> Callable:
        """A WSGI application (signature verified first when ``secrets`` was given)."""

        def app(environ: dict, start_response: Callable):
            try:
                body = read_wsgi_body(environ, MAX_BODY_BYTES)
            except BodyError as exc:
                error = "payload_too_large" if exc.status == 413 else "bad_request"
                response = Response(exc.status, {"error": error, "detail": str(exc)})
            else:
                path = environ.get("PATH_INFO", "").encode("latin-1").decode("utf-8", "replace")
                headers = {
                    key[5:].replace("_", "-").title(): value
                    for key, value in environ.items()
                    if key.startswith("HTTP_")
                }
                response = self._safely(environ.get("REQUEST_METHOD", "GET"), path, headers, body)
            data = response.json_bytes()
            start_response(
                f"{response.status} {_reason(response.status)}",
                [
                    ("Content-Type", "application/json"),
                    ("Content-Length", str(len(data))),
                    *response.headers.items(),
                ],
            )
            return [data]

        return WsgiVerifier(app, self.verifier) if self.verifier else app

    def asgi(self) -> Callable:
        """An ASGI application (signature verified first when ``secrets`` was given)."""

        async def app(scope: dict, receive: Callable, send: Callable) -> None:
            if scope["type"] == "lifespan":
                while True:
                    message = await receive()
                    if message["type"] == "lifespan.startup":
                        await send({"type": "lifespan.startup.complete"})
                    elif message["type"] == "lifespan.shutdown":
                        await send({"type": "lifespan.shutdown.complete"})
                        return
            if scope["type"] != "http":
                return
            chunks, size, more = [], 0, True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                chunks.append(message.get("body", b""))
                size += len(chunks[-1])
                if size > MAX_BODY_BYTES:
                    detail = f"The body is over {MAX_BODY_BYTES} bytes."
                    await _send_asgi(
                        send, Response(413, {"error": "payload_too_large", "detail": detail})
                    )
                    return
                more = message.get("more_body", False)
            path, root = scope.get("path", ""), scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root) :]
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            # Sync functions (a database call) run in the loop's thread here; a busy tool
            # runs the WSGI app under a threaded server, or wraps its own calls.
            response = self._safely(scope["method"], path, headers, b"".join(chunks))
            await _send_asgi(send, response)

        return AsgiVerifier(app, self.verifier) if self.verifier else app

    def _safely(self, method: str, path: str, headers: Mapping[str, str], body: bytes):
        try:
            return self.handle(method, path, headers, body)
        except Exception:
            # Takeover reads a 500 as "unknown": it reconciles by reading the state, so the
            # truth is found whatever happened before the error.
            logger.exception("the tool failed on %s %s", method, path)
            return Response(500, {"error": "internal_error"})


async def _send_asgi(send: Callable, response: Response) -> None:
    data = response.json_bytes()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(data)).encode()),
        *((k.encode(), v.encode()) for k, v in response.headers.items()),
    ]
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


class _MethodNotAllowed(Exception):
    def __init__(self, allowed: str) -> None:
        super().__init__(allowed)
        self.allowed = allowed


def _reason(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


__all__ = [
    "BadRequest",
    "Effect",
    "Rejected",
    "Response",
    "Tool",
    "VersionConflict",
]
