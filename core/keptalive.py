"""Tool calls (`egress.tool_request`) on the standard library's HTTP/1.1 client instead of
httpx's transport: the same request and answer at about half the CPU (profiled: httpcore's
pool, its tracing and h11's state machine were a sixth of a read-only call through /mcp,
and a sixth of a worker's CPU per effect, against a third of that for `http.client`). A
call with a side effect goes out on a new connection, closed after its answer; a call with
none (`reuse=True`: a read-only MCP tool's call, a read or lookup tool's) on a kept-alive
one.

What a call through here keeps from httpx's transport:

- the egress policy at connect time (`egress.allowed_addresses`: the resolved address is
  checked and connected to; TLS verifies the host name with httpx's own context), and a
  refusal or a failed connect is `httpx.ConnectError` / `ConnectTimeout`: provably not sent;
- anything after the connection is made is an httpx error that means "maybe sent"
  (`WriteError`, `ReadError`, `ReadTimeout`, `RemoteProtocolError`), so callers classify
  exactly as before;
- the answer is an `httpx.Response` (status, headers, body, HTTP version, reason);
- no redirect is followed, no cookie kept, no proxy from the environment used.

A connection is reused for the same origin only, at most one second after its last answer
(as the httpx pool was configured), and never when the peer has closed it or sent anything
unasked meanwhile (the socket is readable). A connection is never re-opened implicitly by
`http.client` (`auto_open = 0`): every connect goes through the policy.

An answer's header block is parsed by `_Response`: a block of plain `Name: value` lines is
read straight into the `HTTPMessage` the standard parser would build (profiled: the email
package's parser was a sixth of a tool call's CPU); any other block goes to that parser.
"""

from __future__ import annotations

import email.parser
import functools
import http.client
import re
import select
import socket
import ssl
import threading
import time

import httpx

from .perprocess import PerProcess

IDLE_SECONDS = 1.0
MAX_IDLE_PER_ORIGIN = 64
DEFAULT_PORTS = {"http": 80, "https": 443}


class _Pool:
    """A process's idle connections, by origin (scheme, host, port)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: dict[tuple, list[tuple[float, http.client.HTTPConnection]]] = {}
        self.tls: ssl.SSLContext | None = None

    def take(self, origin: tuple) -> http.client.HTTPConnection | None:
        now = time.monotonic()
        while True:
            with self.lock:
                stack = self.idle.get(origin)
                if not stack:
                    return None
                since, conn = stack.pop()
            if now - since <= IDLE_SECONDS and not _readable(conn.sock):
                return conn
            conn.close()

    def give(self, origin: tuple, conn: http.client.HTTPConnection) -> None:
        with self.lock:
            stack = self.idle.setdefault(origin, [])
            if len(stack) < MAX_IDLE_PER_ORIGIN:
                stack.append((time.monotonic(), conn))
                return
        conn.close()

    def tls_context(self) -> ssl.SSLContext:
        if self.tls is None:
            self.tls = httpx.create_ssl_context()  # httpx's verification, built once
        return self.tls


_pool = PerProcess(_Pool)


def _readable(sock) -> bool:
    """An idle connection's socket has something to read: the peer closed it (or broke the
    protocol); either way it is not to be reused."""
    if sock is None:
        return True
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


# A header line the email package's parser (policy compat32, as `http.client.parse_headers`
# uses it) reads as `(name, value.lstrip(" \t"))` with nothing else to it: a name of visible
# characters but the colon, then the value on this one line. Anything else (a folded line, a
# line without a colon, a "From " line) is left to that parser.
_PLAIN_HEADER = re.compile(r"([!-9;-~]+):[ \t]*([^\r\n]*)\r?\n")


def _parse_headers(lines: list[bytes]) -> http.client.HTTPMessage:
    """`lines` (`http.client._read_headers`: the block and the blank line that ends it) as
    the `HTTPMessage` `http.client.parse_headers` makes of them."""
    message = http.client.HTTPMessage()
    for raw in lines[:-1]:
        plain = _PLAIN_HEADER.fullmatch(raw.decode("iso-8859-1"))
        if plain is None:
            text = b"".join(lines).decode("iso-8859-1")
            return email.parser.Parser(_class=http.client.HTTPMessage).parsestr(text)
        message._headers.append(plain.groups())
    return message


class _Response(http.client.HTTPResponse):
    """`http.client.HTTPResponse`, its header block parsed by `_parse_headers`."""

    def begin(self):
        # http.client.HTTPResponse.begin (identical in Python 3.11 to 3.13), with the one
        # call to parse_headers replaced; the debug prints left out.
        if self.headers is not None:
            return
        while True:  # until an answer that is not 100 Continue
            version, status, reason = self._read_status()
            if status != http.client.CONTINUE:
                break
            http.client._read_headers(self.fp)
        self.code = self.status = status
        self.reason = reason.strip()
        if version in ("HTTP/1.0", "HTTP/0.9"):
            self.version = 10
        elif version.startswith("HTTP/1."):
            self.version = 11
        else:
            raise http.client.UnknownProtocol(version)
        self.headers = self.msg = _parse_headers(http.client._read_headers(self.fp))
        tr_enc = self.headers.get("transfer-encoding")
        self.chunked = bool(tr_enc and tr_enc.lower() == "chunked")
        if self.chunked:
            self.chunk_left = None
        self.will_close = self._check_close()
        self.length = None
        length = self.headers.get("content-length")
        if length and not self.chunked:
            try:
                self.length = int(length)
            except ValueError:
                self.length = None
            else:
                if self.length < 0:
                    self.length = None
        if (
            status in (http.client.NO_CONTENT, http.client.NOT_MODIFIED)
            or 100 <= status < 200
            or self._method == "HEAD"
        ):
            self.length = 0
        if not self.will_close and not self.chunked and self.length is None:
            self.will_close = True


def _connect(pool: _Pool, scheme: str, host: str, port: int, timeout: float, allowed):
    """A new connection to an address the policy allows (`allowed(host, port)`, raising
    httpx's connect errors)."""
    addresses = allowed(host, port)
    last: Exception | None = None
    for ip in addresses:
        try:
            sock = socket.create_connection((ip, port), timeout=timeout)
        except TimeoutError as exc:
            last = httpx.ConnectTimeout(f"{host}:{port}: {exc}")
            continue
        except OSError as exc:
            last = httpx.ConnectError(f"{host}:{port}: {exc}")
            continue
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if scheme == "https":
                sock = pool.tls_context().wrap_socket(sock, server_hostname=host)
        except TimeoutError as exc:
            sock.close()
            raise httpx.ConnectTimeout(f"{host}:{port}: TLS: {exc}") from exc
        except (OSError, ssl.SSLError) as exc:
            sock.close()
            raise httpx.ConnectError(f"{host}:{port}: TLS: {exc}") from exc
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        conn.response_class = _Response
        conn.sock = sock
        conn.auto_open = 0  # never re-opened behind the policy's back
        return conn
    assert last is not None
    raise last


def request(
    method: str,
    url: httpx.URL,
    *,
    headers: dict,
    content: bytes | None,
    timeout: float,
    allowed,
    reuse: bool,
) -> httpx.Response:
    """One request on a kept-alive (or new) connection to `url`'s origin; its answer read
    whole (httpx errors, as `egress.tool_request`). `allowed(host, port)`: the addresses the
    egress policy allows, or httpx.ConnectError (the policy lives in core.egress, which
    calls this). `reuse` only for a call with no side effect; without it, a new connection,
    closed after its one answer, neither taken from the kept ones nor given back."""
    scheme = url.scheme
    if scheme not in DEFAULT_PORTS:
        raise httpx.UnsupportedProtocol(f"Request URL has an unsupported protocol '{scheme}://'.")
    host = url.raw_host.decode("ascii")
    port = url.port or DEFAULT_PORTS[scheme]
    origin = (scheme, host, port)
    pool = _pool.get()
    if reuse and (kept := pool.take(origin)) is not None:
        try:
            return _exchange(pool, origin, kept, method, url, headers, content, timeout, True)
        except _Stale:
            pass  # the peer closed it as we sent: a call with no side effect goes again
    conn = _connect(pool, scheme, host, port, timeout, allowed)
    return _exchange(
        pool if reuse else None, origin, conn, method, url, headers, content, timeout, False
    )


class _Stale(Exception):
    """A kept-alive connection the peer had closed: nothing was answered on it."""


# What a connection the peer closed while it sat idle gives when it is written or read.
PEER_CLOSED = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


def _exchange(pool, origin, conn, method, url, headers, content, timeout, kept: bool):
    """The request on `conn` and its answer, read whole; the connection is then given back
    to `pool` (closed when there is none). On a `kept` connection, the peer's close before
    any answer is `_Stale` (the keep-alive race: it closed an idle connection as we took
    it); on a new one, as on httpx's transport, it may have been sent."""
    conn.sock.settimeout(timeout)
    try:
        conn.putrequest(
            method, url.raw_path.decode("ascii"), skip_host=True, skip_accept_encoding=True
        )
        conn.putheader("Host", url.netloc.decode("ascii"))
        conn.putheader("Accept-Encoding", "identity")
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.putheader("Content-Length", str(len(content or b"")))
    except ValueError as exc:  # a header http.client refuses to write (CR, LF, not Latin-1)
        conn.close()
        raise httpx.LocalProtocolError(f"not sent: {exc}") from exc
    try:
        conn.endheaders(content)
    except TimeoutError as exc:
        conn.close()
        raise httpx.WriteTimeout(str(exc)) from exc
    except OSError as exc:
        conn.close()
        if kept and isinstance(exc, PEER_CLOSED):
            raise _Stale from exc
        raise httpx.WriteError(str(exc)) from exc
    answer = None
    try:
        answer = conn.getresponse()
        body = answer.read()
    except TimeoutError as exc:
        conn.close()
        raise httpx.ReadTimeout(str(exc) or "timed out") from exc
    except (http.client.HTTPException, OSError) as exc:
        conn.close()
        if kept and answer is None and isinstance(exc, PEER_CLOSED):
            raise _Stale from exc
        if isinstance(exc, http.client.HTTPException):
            raise httpx.RemoteProtocolError(f"{type(exc).__name__}: {exc}") from exc
        raise httpx.ReadError(str(exc)) from exc
    if answer.will_close or pool is None:
        conn.close()
    else:
        pool.give(origin, conn)
    response = httpx.Response(
        answer.status,
        headers=answer.getheaders(),
        content=body,
        extensions={
            "http_version": b"HTTP/1.1" if answer.version == 11 else b"HTTP/1.0",
            "reason_phrase": answer.reason.encode("latin-1", "replace"),
        },
    )
    response.encoding = _encoding_of(response.headers.get("content-type"))
    return response


@functools.lru_cache(maxsize=256)
def _encoding_of(content_type: str | None) -> str:
    """What httpx makes `Response.encoding` of this Content-Type (its charset when Python
    knows it, else UTF-8), worked out by httpx once per distinct header: httpx parses the
    header with the email package for every answer it decodes (profiled: a fortieth of an
    effect's CPU in the web, for the snippet of the answer an attempt keeps)."""
    headers = {} if content_type is None else {"content-type": content_type}
    return httpx.Response(200, headers=headers).encoding
