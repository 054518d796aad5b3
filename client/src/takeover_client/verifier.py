"""Refuse any call that Takeover did not sign: a WSGI and an ASGI middleware for tool authors.

    from takeover_client.verifier import WsgiVerifier, AsgiVerifier

    app = WsgiVerifier(app, secrets=[os.environ["TAKEOVER_SIGNING_SECRET"]])  # Flask, Django…
    app = AsgiVerifier(app, secrets=[os.environ["TAKEOVER_SIGNING_SECRET"]])  # Starlette…

Every request the wrapped application sees carries a valid ``Takeover-Signature``
(``takeover_client.signing``), made less than 5 minutes ago with one of ``secrets``. Anything
else is answered ``401`` with a JSON body that says why, ``{"error": "signature_refused",
"detail": "..."}``, one WARNING line is logged on the ``takeover_client.verifier`` logger
(``refused an unsigned call: POST /effects (no Takeover-Signature)``), and the application
never runs. The body is read once to check its digest and handed on intact.

``secrets`` is a string, a list (hold the old and the new secret while a rotation's overlap
lasts: a request signed with either passes), or a function returning the current list (read
per request, so secrets can change without a restart).

Which path is verified. The signature covers the path *as sent on the wire* (``/effects/a%2Fb``,
not ``/effects/a/b``), so the middlewares verify the raw path:

- ASGI: ``scope["raw_path"]`` (anything after a ``?`` dropped: some servers leave the query in);
  without it, the canonical encoding of ``root_path + path`` (below).
- WSGI: ``RAW_URI`` (gunicorn) or ``REQUEST_URI`` (uWSGI, mod_wsgi) when the server provides
  them. Otherwise, quirk: WSGI only has ``SCRIPT_NAME + PATH_INFO``, already percent-decoded,
  and the middleware re-encodes each segment the way Takeover does
  (``takeover_client.signing.segment``). That reproduces every path Takeover sends *except* one
  whose key or target holds a ``/``: decoded, ``%2F`` has become a separator, the re-encoded
  path differs and the call is refused. Serve a tool whose keys or targets may contain ``/``
  with a server that passes the raw URI (gunicorn does; ``wsgiref`` does not).
"""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from . import signing

logger = logging.getLogger("takeover_client.verifier")

MAX_BODY_BYTES = 4 << 20  # a tool call's body is an intent, far below this
Secrets = str | Iterable[str] | Callable[[], Iterable[str]]


@dataclass(frozen=True)
class Refusal:
    """Why a request was refused: `kind` for the log ("an unsigned call"), `detail` for the
    caller, `verdict` for counting: "missing" (no signature) or "invalid"."""

    kind: str
    detail: str
    verdict: str = "invalid"

    def line(self, method: str, path: str) -> str:
        return f"refused {self.kind}: {method} {path} ({self.detail})"

    def body(self) -> bytes:
        return json.dumps({"error": "signature_refused", "detail": self.detail}).encode()


class Verifier:
    """`signing.verify` with a set of secrets and a clock; `refusal()` says why not, or None."""

    def __init__(
        self,
        secrets: Secrets,
        *,
        tolerance: int = signing.TOLERANCE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._secrets = secrets
        self.tolerance = tolerance
        self.clock = clock

    def secrets(self) -> list[str]:
        found = self._secrets() if callable(self._secrets) else self._secrets
        if isinstance(found, str):
            found = [found]
        return [s for s in found if s]

    def refusal(
        self, *, method: str, path: str, body: bytes, headers: Mapping[str, str]
    ) -> Refusal | None:
        lowered = {k.lower(): v for k, v in headers.items()}
        if not lowered.get(signing.SIGNATURE_HEADER.lower()):
            return Refusal("an unsigned call", f"no {signing.SIGNATURE_HEADER}", "missing")
        secrets = self.secrets()
        if not secrets:
            return Refusal("a signed call", "this tool holds no signing secret to check it with")
        try:
            signing.verify(
                secrets,
                method=method,
                path=path,
                body=body,
                headers=lowered,
                now=self.clock(),
                tolerance=self.tolerance,
            )
        except signing.SignatureError as exc:
            return Refusal("a call whose signature does not verify", str(exc))
        return None


def _verifier(secrets: Secrets | Verifier, tolerance: int, clock: Callable[[], float]) -> Verifier:
    if isinstance(secrets, Verifier):
        return secrets
    return Verifier(secrets, tolerance=tolerance, clock=clock)


def canonical_path(decoded: str) -> str:
    """A decoded path, encoded segment by segment as Takeover encodes it."""
    return "/".join(signing.segment(part) for part in decoded.split("/"))


def wsgi_raw_path(environ: Mapping[str, Any]) -> str:
    """The request's path as it was on the wire (see the module docstring for the quirk)."""
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if raw:
        if not raw.startswith("/"):  # absolute-form: http://host/path
            raw = urlsplit(raw).path or "/"
        return raw.split("?", 1)[0]
    # PEP 3333: the decoded bytes, carried in a latin-1 str.
    decoded = (environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")).encode("latin-1")
    return canonical_path(decoded.decode("utf-8", "replace"))


def wsgi_headers(environ: Mapping[str, Any]) -> dict[str, str]:
    """The three headers a signature covers, from a WSGI environ."""
    names = (signing.SIGNATURE_HEADER, signing.ACTION_HEADER, signing.KEY_HEADER)
    found = {}
    for name in names:
        value = environ.get("HTTP_" + name.upper().replace("-", "_"))
        if value is not None:
            found[name] = value
    return found


class BodyError(ValueError):
    """The body cannot be read: `status` (400 or 413) and why."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status


def _json_wsgi(start_response, status: str, body: bytes, extra=()) -> list[bytes]:
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    start_response(status, [*headers, *extra])
    return [body]


class _Middleware:
    """What both middlewares hold: the wrapped app, the verifier and the body limit."""

    def __init__(
        self,
        app: Callable,
        secrets: Secrets | Verifier,
        *,
        tolerance: int = signing.TOLERANCE_SECONDS,
        clock: Callable[[], float] = time.time,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self.app = app
        self.verifier = _verifier(secrets, tolerance, clock)
        self.max_body_bytes = max_body_bytes


class WsgiVerifier(_Middleware):
    """WSGI middleware: the wrapped app only sees calls Takeover signed (module docstring)."""

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        try:
            body = read_wsgi_body(environ, self.max_body_bytes)
        except BodyError as exc:
            error = "payload_too_large" if exc.status == 413 else "bad_request"
            return _json_wsgi(
                start_response,
                "413 Content Too Large" if exc.status == 413 else "400 Bad Request",
                json.dumps({"error": error, "detail": str(exc)}).encode(),
            )
        method = environ.get("REQUEST_METHOD", "GET").upper()
        path = wsgi_raw_path(environ)
        refusal = self.verifier.refusal(
            method=method, path=path, body=body, headers=wsgi_headers(environ)
        )
        if refusal is not None:
            logger.warning("%s", refusal.line(method, path))
            return _json_wsgi(
                start_response,
                "401 Unauthorized",
                refusal.body(),
                [("WWW-Authenticate", signing.SIGNATURE_HEADER)],
            )
        return self.app(environ, start_response)


def read_wsgi_body(environ: dict, limit: int) -> bytes:
    """Read the whole body and put it back as `wsgi.input`, so the app reads it again.
    BodyError when it is larger than `limit` (413) or its length is not a number (400)."""
    stream = environ.get("wsgi.input")
    length = environ.get("CONTENT_LENGTH") or ""
    if stream is None:
        body = b""
    elif length.strip():
        if not length.strip().isdigit():
            raise BodyError(400, f"Content-Length is not a number: {length!r}.")
        size = int(length)
        if size > limit:
            raise BodyError(413, f"The body is {size} bytes; at most {limit} are accepted.")
        body = stream.read(size) if size > 0 else b""
    elif "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower():
        # Servers that accept a chunked body (gunicorn) give it as a stream that ends.
        body = stream.read(limit + 1)
        if len(body) > limit:
            raise BodyError(413, f"The body is over {limit} bytes; at most {limit} are accepted.")
    else:
        body = b""
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    return body


class AsgiVerifier(_Middleware):
    """ASGI middleware: the wrapped app only sees calls Takeover signed (module docstring).
    Lifespan and websocket scopes pass through untouched."""

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client left; there is nobody to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                detail = f"The body is over {self.max_body_bytes} bytes."
                body = json.dumps({"error": "payload_too_large", "detail": detail}).encode()
                await _send_json(send, 413, body)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        method = scope.get("method", "GET").upper()
        path = asgi_raw_path(scope)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        refusal = self.verifier.refusal(method=method, path=path, body=body, headers=headers)
        if refusal is not None:
            logger.warning("%s", refusal.line(method, path))
            await _send_json(
                send,
                401,
                refusal.body(),
                [(b"www-authenticate", signing.SIGNATURE_HEADER.encode())],
            )
            return
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def asgi_raw_path(scope: Mapping[str, Any]) -> str:
    raw = scope.get("raw_path")
    if raw:
        return bytes(raw).decode("latin-1").split("?", 1)[0]
    root, path = scope.get("root_path", ""), scope.get("path", "")
    return canonical_path(path if path.startswith(root) else root + path)


async def _send_json(send: Callable, status: int, body: bytes, extra=()) -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
