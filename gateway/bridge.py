"""Serving the MCP SDK's ASGI app from Django's sync request threads, with no thread hop.

gunicorn's gthread workers (and `make run`) serve Takeover over WSGI; the official MCP SDK
is an ASGI app. Rather than a second server, or a loop in a thread of its own that every
call would hop onto and back from, the request's own thread drives an event loop.

An *engine* is one event loop with the SDK's app built for it and its session manager
entered on it (its lifespan and task group held open by a task of that loop for the life of
the process). An engine serves one request at a time, in whichever thread takes it: each
web process keeps the idle ones and makes another only when all are busy, so it makes as
many as it serves requests at once (gunicorn's `--threads`), whether its server keeps its
threads (gthread) or starts one per request (the test server). A request to `/mcp`:

1. is authenticated by the Django view, in its own thread (401 before any MCP message);
2. takes an idle engine and runs the ASGI app on it, in this thread, with the scope and the
   body the view already read;
3. when an SDK handler asks for Django work (`in_request_thread`), the handler's coroutine
   waits on a future and stops the loop; the thread, with no loop running in it any more,
   runs the work itself — the request's own database connection, its transaction rules and
   its cleanup, no thread pool, no sync_to_async hop — then settles the future and runs the
   loop again. The handlers are thin coroutines; the loop only parses, validates and frames
   JSON-RPC, between two pieces of Django work, in the same thread;
4. returns the response the ASGI app sent (JSON mode: one body), and the engine to the idle.

So a call crosses no thread, whatever it does in the database, and a bounded wait for an
action's outcome sleeps in the request's thread as `GET /actions/{id}?wait=` does
(runs/waits.py). The app is the SDK's own (`StreamableHTTPSessionManager`), unmodified: one
instance per engine, since a session manager runs on the one loop it was entered on.
"""

import asyncio
import contextvars
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.perprocess import PerProcess

_request: contextvars.ContextVar["BridgedRequest | None"] = contextvars.ContextVar(
    "takeover_mcp_request", default=None
)


@dataclass
class BridgedRequest:
    """One HTTP request in flight through the bridge: what the handlers may read about it
    (`info`: the principal and the rest, set by the view), the loop serving it, and the
    Django work a handler waits for (`work`: the function, its arguments, the future)."""

    info: Any
    loop: asyncio.AbstractEventLoop
    work: tuple | None = None


def current() -> "BridgedRequest":
    request = _request.get()
    if request is None:
        raise RuntimeError("not inside a bridged /mcp request")
    return request


async def in_request_thread(fn: Callable, *args, **kwargs):
    """Run `fn` in the Django thread that serves the current request (the one driving this
    loop, once the loop has stopped), and await its result."""
    request = current()
    future = request.loop.create_future()
    request.work = (fn, args, kwargs, future)
    request.loop.stop()
    return await future


class Engine:
    """One event loop and the ASGI app entered on it (`make_app()` returns `(asgi_app,
    lifespan)`: the app, and an async context manager held open for the engine's life)."""

    def __init__(self, make_app: Callable[[], tuple[Callable, Any]]) -> None:
        self.loop = asyncio.new_event_loop()
        self.app, lifespan = make_app()
        entered = self.loop.create_future()

        async def hold() -> None:
            async with lifespan:
                entered.set_result(None)
                await asyncio.Event().wait()  # for the life of the process

        self.broken = False
        self.held = self.loop.create_task(hold())
        self.loop.run_until_complete(
            asyncio.wait([self.held, entered], return_when=asyncio.FIRST_COMPLETED)
        )
        if self.held.done():
            raise RuntimeError("the MCP server did not start") from self.held.exception()

    def serve(self, scope: dict, body: bytes, info: Any) -> tuple[int, list, bytes]:
        """Serve one request through the ASGI app; Django work runs in this thread."""
        loop = self.loop
        request = BridgedRequest(info, loop)
        status = [500]
        headers: list = []
        chunks: list[bytes] = []

        async def serve() -> None:
            _request.set(request)
            done = asyncio.Event()
            sent_body = [False]

            async def receive() -> dict:
                if not sent_body[0]:
                    sent_body[0] = True
                    return {"type": "http.request", "body": body, "more_body": False}
                await done.wait()  # a disconnect is only ever the end of the response
                return {"type": "http.disconnect"}

            async def send(message: dict) -> None:
                if message["type"] == "http.response.start":
                    status[0] = message["status"]
                    headers.extend(message.get("headers") or [])
                elif message["type"] == "http.response.body":
                    chunks.append(message.get("body", b""))
                    if not message.get("more_body"):
                        done.set()

            try:
                await self.app(scope, receive, send)
            finally:
                done.set()

        task = loop.create_task(serve())
        task.add_done_callback(lambda _: loop.stop())
        try:
            while not task.done():
                loop.run_forever()  # until a handler asks for Django work, or the app is done
                if request.work is not None:
                    fn, args, kwargs, future = request.work
                    request.work = None
                    _settle(future, fn, args, kwargs)
        finally:
            self.broken = not task.done()  # left mid-request: never served again
        task.result()
        return status[0], headers, b"".join(chunks)


def _settle(future: asyncio.Future, fn: Callable, args: tuple, kwargs: dict) -> None:
    try:
        value = fn(*args, **kwargs)
    except BaseException as exc:  # handed to the awaiting coroutine
        if not future.cancelled():
            future.set_exception(exc)
        return
    if not future.cancelled():
        future.set_result(value)


class Engines:
    """A process's idle engines: taken by a request, given back when it is served."""

    def __init__(self, make_app: Callable[[], tuple[Callable, Any]]) -> None:
        self.make_app = make_app
        self.lock = threading.Lock()
        self.idle: list[Engine] = []

    def take(self) -> Engine:
        with self.lock:
            if self.idle:
                return self.idle.pop()
        return Engine(self.make_app)

    def give(self, engine: Engine) -> None:
        with self.lock:
            self.idle.append(engine)


class Bridge:
    """The ASGI app built by `make_app()`, served from the request's own thread."""

    def __init__(self, make_app: Callable[[], tuple[Callable, Any]]) -> None:
        self.engines = PerProcess(lambda: Engines(make_app))

    def handle(self, scope: dict, body: bytes, info: Any) -> tuple[int, list, bytes]:
        """Serve one request through the ASGI app; Django work runs in this thread."""
        engines = self.engines.get()
        engine = engines.take()
        try:
            return engine.serve(scope, body, info)
        finally:
            if not engine.broken:
                engines.give(engine)
