"""The demo downstream: a small authoritative system that speaks the Takeover tool protocol.

Built on the tool authors' helper, ``takeover_client.tool`` (the protocol's routes, the strict
check of each call) and ``takeover_client.verifier`` (signatures); the HTTP server is the
standard library's, because fault injection needs the socket itself (an RST, a closed port).
Importable without Django configured, so that tests can run it as a subprocess
(``python -m demo.downstream --port 0``) and ``make run`` can start it beside the web process
(``manage.py demo_downstream``).

Three systems live on one port, under path prefixes; a Takeover tool's ``base_url`` names
one. Between them they offer every kind of tool the protocol's optional capabilities describe
(README, "The tool protocol"):

``/tickets`` (``unsafe``, no lookup)
    Records ``{"state": {...}, "version": int}`` per target. Applying an effect merges
    ``desired_state`` into the state (creating the ticket if needed) and adds 1 to the version.
    It does **not** deduplicate on ``Idempotency-Key``: it counts keys, so tests can prove that
    Takeover sent an effect once, rather than letting the downstream hide a second send.
    ``GET /tickets/effects/{key}`` answers 501: it keeps no record of keys.
``/email`` (``idempotent``, ``lookup: true``)
    The target is the recipient address. Applying an effect appends an e-mail
    (``desired_state``, typically ``{"subject", "body"}``) to that recipient's outbox; the
    recipient's state is the latest e-mail's fields and its version the number of e-mails.
    The outbox applies one ``Idempotency-Key`` at most once: a repeat of a key it applied is
    answered with the first result (200, that ``{"state", "version"}``) and appends nothing
    (counted in ``deduplicated``), whatever its body says and even if the version moved on.
    ``GET /email/effects/{key}`` (key URL-decoded) answers 200 ``{"applied": true, "state",
    "version", "target"}`` with that first result, or 404 when it never applied the key.
    Keys are remembered per prefix, not per tenant: one demo outbox serves every tenant of a
    test session, whose keys are distinct anyway.
``/search`` (``read_only``)
    The ticket search: ``POST /search/effects`` answers 200 ``{"state": {"matches": [ids],
    "count": n}, "version": 0}``, the tickets whose state has every field of
    ``desired_state`` (the target only labels the search). It changes nothing (counted in
    ``searches``). ``GET /search/state/{target}`` answers 200 ``{"state": {}, "version": 0}``.

Both answer the tool protocol (docs/design.md, "The tool protocol"):

- ``POST {prefix}/effects`` with headers ``Idempotency-Key`` and ``X-Takeover-Action`` and the
  body ``{"action_id", "tenant", "principal", "tool", "target", "desired_state",
  "expected_version"}``. When ``expected_version`` is not null and differs from the current
  version (a missing record has version 0), the answer is 409 ``{"error": "version_conflict",
  "version": current}`` and nothing changes. Otherwise 200 ``{"state", "version"}``. Anything
  malformed is a 400 and changes nothing; validation is strict on purpose, to catch a
  dispatcher's bugs: all seven fields, both headers, and ``X-Takeover-Action`` equal to
  ``action_id``.
- ``GET {prefix}/state/{target}`` (target URL-decoded): 200 ``{"state", "version"}`` or 404
  ``{"error": "not_found"}``. It never changes a record (it is only counted in the stats).

Signed calls (``takeover_client.signing``). Every tool call's ``Takeover-Signature`` is
checked against the secrets given to ``POST /_control/secrets`` and counted in the stats
(``signatures``: ``valid``, ``missing``, ``invalid``). Refusing is off by default; with
``--require-signature`` or ``POST /_control/require-signature {"require": true}``, a call that
is unsigned, tampered, signed with an unknown secret or older than 5 minutes is answered 401
``{"error": "signature_refused", "detail": ...}``, changes nothing, is counted in ``refused``
and logged on one line (even with ``--quiet``)::

    refused an unsigned call: POST /tickets/effects (no Takeover-Signature)

The signature covers the raw path as received (``/email/effects/%2E%2E``), so a key or target
reaches the check exactly as Takeover sent it. The ``_control`` endpoints are never signed
(this is a demo).

Fault injection, for tests and the demo. ``POST /_control/faults`` pushes a rule
``{"mode", "times" (default 1), "target", "prefix", "seconds"}``; each effect request that a
rule matches (same prefix and target, when the rule names them) consumes one of its ``times``,
oldest rule first. The modes:

``drop_after_commit``
    Apply the effect, then close the connection without a byte of response, with an RST
    (``SO_LINGER`` 0). httpx raises ``ReadError`` (or ``RemoteProtocolError``).
``error_after_commit``
    Apply the effect, then answer 500.
``slow_after_commit``
    Apply the effect, then sleep ``seconds`` (default 30) before answering 200, so that a
    client with a shorter timeout sees ``ReadTimeout``.
``reject``
    Answer 422 without applying anything.
``error_before_commit``
    Answer 503 without applying anything. (To Takeover this is still *unknown*: a 503 does
    not prove that nothing happened, which is exactly what makes it a good test.)
``error_on_read``
    Not an effect fault: a matching ``GET {prefix}/state/{target}`` answers 503, so that
    reconciliation's read can be made to fail a given number of ``times``.
``refuse``
    Immediate, not queued: close the listening socket for ``seconds`` (default 1.5), so that
    new connections get ECONNREFUSED (httpx ``ConnectError``), then listen again on the same
    port. The control request gets its 200 after the socket is closed, so a request made after
    that answer is refused. Idle keep-alive connections are closed at the same time, so that a
    pooled client cannot slip a request through; requests already being handled finish.

The ``*_after_commit`` modes run the normal apply step first, which may itself answer 409
(nothing changes) or, in the outbox, be a deduplicated repeat (nothing changes either); the
fault then replaces whatever the answer would have been. Faults never touch lookups.

The rest of the control API (all JSON, all at the root of the port):

- ``GET /_control/faults`` lists the pending rules; ``DELETE /_control/faults`` clears them.
- ``GET /_control/stats``: ``effects_received`` (POST /effects requests seen per
  ``Idempotency-Key``, malformed ones included, ``""`` for none), ``mutations`` (applied, per
  prefix and target) and ``total_mutations``, ``external_writes`` (a total) and
  ``external_writes_by_target``, ``state_reads`` (a total) and ``state_reads_by_target``,
  ``faults_fired`` (per mode), ``deduplicated`` (repeats the outbox answered with the first
  result, per key), ``lookups`` (per prefix and key), ``searches`` (per target),
  ``signatures`` (tool calls per verdict), ``refused``, ``require_signature`` and ``secrets``
  (how many are held).
- ``GET /_control/records``: every record (e-mail recipients with their outbox).
- ``GET /_control/requests``: the last 1000 effect requests, with headers, body, outcome and
  the signature's verdict.
- ``POST /_control/external-write`` ``{"prefix", "target", "state"}``: another actor changes a
  record (tickets: merge; email: one more e-mail); version + 1. Not one of our mutations.
  (``prefix`` is ``tickets`` or ``email`` here and in ``seed``: the search holds no records.)
- ``POST /_control/seed`` ``{"prefix", "target", "state", "version" (default 1)}``: set a
  record directly (an e-mail recipient gets an empty outbox: the seeded version counts e-mails
  that the demo never saw).
- ``POST /_control/reset``: forget records, remembered keys, stats, rules and the request log
  (not the secrets, nor whether signatures are required: those are configuration).
- ``POST /_control/secrets`` ``{"secret"}``: accept calls signed with this secret too (any
  tool, any prefix: Takeover gives each registered tool its own); answers how many it holds.
- ``POST /_control/require-signature`` ``{"require": true|false}``: switch refusing on or off.

Known quirks:

- ``refuse`` reopens the port with ``SO_REUSEADDR``; if another process takes the port during
  the window (unlikely, but possible with an ephemeral port from ``--port 0``), the server keeps
  retrying and logs it. Control requests cannot reach a refusing server: wait it out.
- A request that arrives on a keep-alive connection in the instant ``refuse`` closes it may be
  cut off after it was sent, as with a real crash.
- It needs the standard library and ``takeover_client`` (``pip install ./client``):
  ``python -m demo.downstream --port 0``, or the file itself, ``python demo/downstream.py``.
- One log line per request goes to stderr; a parent that pipes stderr must read it (or pass
  ``--quiet``), or the server blocks once the pipe is full.
"""

from __future__ import annotations

import argparse
import contextlib
import select
import signal
import socket
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from socketserver import TCPServer
from typing import Any

if __package__ in (None, ""):  # run as a script (`python demo/downstream.py`): the repo on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from demo.downstream_http import Handler
from demo.downstream_store import RELISTEN_LOG_AFTER_SECONDS, Store, make_tools


class DemoDownstreamServer(ThreadingHTTPServer):
    """A thread per connection, plus a ``refuse`` switch that closes and reopens the port.

    ``serve_until_stopped()`` replaces ``serve_forever()``: the listening socket is closed and
    reopened by the serving thread itself, so it is never closed under a ``select()`` that is
    waiting on it.
    """

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 8100,
        *,
        quiet: bool = False,
        require_signature: bool = False,
    ) -> None:
        super().__init__((host, port), Handler)
        self.store = Store(require_signature=require_signature)
        self.tools = make_tools(self.store)
        self.quiet = quiet
        self.stopping = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._refuse_lock = threading.Lock()
        self._refuse_requests: list[tuple[float, threading.Event]] = []
        self._handlers_lock = threading.Lock()
        self._handlers: set[Handler] = set()

    def server_bind(self) -> None:
        # HTTPServer.server_bind() would call socket.getfqdn(), a possible DNS lookup.
        TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    @property
    def url(self) -> str:
        host = self.server_name
        return (
            f"http://[{host}]:{self.server_port}"
            if ":" in host
            else f"http://{host}:{self.server_port}"
        )

    def log(self, line: str, *, always: bool = False) -> None:
        if always or not self.quiet:
            sys.stderr.write(f"{time.strftime('%H:%M:%S')} demo-downstream {line}\n")
            sys.stderr.flush()

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):  # reset, broken pipe, timeout: the client's business
            self.log(f"connection from {client_address[0]}: {exc.__class__.__name__}")
        else:
            super().handle_error(request, client_address)

    # Connections, so that `refuse` can close the idle keep-alive ones.

    def track(self, handler: Handler) -> None:
        with self._handlers_lock:
            self._handlers.add(handler)

    def untrack(self, handler: Handler) -> None:
        with self._handlers_lock:
            self._handlers.discard(handler)

    def _close_idle_connections(self) -> None:
        with self._handlers_lock:
            idle = [h for h in self._handlers if not h.busy]
        for handler in idle:
            with contextlib.suppress(OSError):
                handler.connection.shutdown(socket.SHUT_RDWR)

    # The serving loop.

    def serve_until_stopped(self) -> None:
        while not self.stopping.is_set():
            seconds, waiters = self._take_refuse_requests()
            if waiters:
                self._refuse_for(seconds, waiters)
                continue
            readable, _, _ = select.select([self.socket, self._wake_r], [], [], 0.5)
            if self._wake_r in readable:
                self._drain_wake()
            if self.socket in readable and not self.stopping.is_set():
                self._handle_request_noblock()

    def stop(self) -> None:
        """Ask ``serve_until_stopped()`` to return; safe from any thread or a signal handler."""
        self.stopping.set()
        self._wake()

    def refuse_connections(self, seconds: float) -> bool:
        """Close the listening socket for ``seconds``; return once it is closed."""
        done = threading.Event()
        with self._refuse_lock:
            self._refuse_requests.append((seconds, done))
        self._wake()
        return done.wait(5)

    def server_close(self) -> None:
        super().server_close()
        self._wake_r.close()
        self._wake_w.close()

    def _refuse_for(self, seconds: float, waiters: list[threading.Event]) -> None:
        deadline = time.monotonic() + seconds
        self.socket.close()
        self._close_idle_connections()
        self.log(f"refusing connections for {seconds:g}s")
        while True:
            for waiter in waiters:
                waiter.set()
            more, waiters = self._take_refuse_requests()
            if waiters:
                deadline = max(deadline, time.monotonic() + more)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.stopping.is_set():
                break
            select.select([self._wake_r], [], [], remaining)
            self._drain_wake()
        if not self.stopping.is_set():
            self._listen_again()

    def _listen_again(self) -> None:
        first_try = time.monotonic()
        logged = False
        while not self.stopping.is_set():
            self.socket = socket.socket(self.address_family, self.socket_type)
            try:
                self.server_bind()
                self.server_activate()
            except OSError as exc:
                self.socket.close()
                if not logged and time.monotonic() - first_try > RELISTEN_LOG_AFTER_SECONDS:
                    self.log(f"cannot listen on {self.url} again yet: {exc}; retrying")
                    logged = True
                self.stopping.wait(0.05)
                continue
            self.log(f"listening again on {self.url}")
            return

    def _take_refuse_requests(self) -> tuple[float, list[threading.Event]]:
        with self._refuse_lock:
            requests, self._refuse_requests = self._refuse_requests, []
        return max((s for s, _ in requests), default=0.0), [done for _, done in requests]

    def _wake(self) -> None:
        # OSError: the buffer is full (already awake) or the socket closed (already stopped).
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(512):
                pass
        except OSError:
            pass


def serve(
    host: str = "127.0.0.1",
    port: int = 8100,
    *,
    quiet: bool = False,
    require_signature: bool = False,
) -> None:
    """Run the demo downstream until SIGTERM or SIGINT.

    Prints ``demo downstream listening on http://HOST:PORT`` to stdout once the port is open;
    with ``port=0`` the line carries the port the system chose.
    """
    server = DemoDownstreamServer(host, port, quiet=quiet, require_signature=require_signature)
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, lambda *_: server.stop())
    try:
        print(f"demo downstream listening on {server.url}", flush=True)
        server.serve_until_stopped()
    finally:
        server.server_close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        server.log("stopped")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m demo.downstream",
        description="Demo downstream speaking the Takeover tool protocol, with fault injection.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=8100, help="port to bind; 0 picks a free one (default 8100)"
    )
    parser.add_argument("--quiet", action="store_true", help="no per-request log lines")
    parser.add_argument(
        "--require-signature",
        action="store_true",
        help="refuse tool calls without a valid Takeover-Signature (POST /_control/secrets)",
    )
    args = parser.parse_args(argv)
    serve(args.host, args.port, quiet=args.quiet, require_signature=args.require_signature)


if __name__ == "__main__":
    main()
