"""Serving the MCP SDK's ASGI app from Django's sync request threads, cheaply.

gunicorn's gthread workers (and `make run`) serve Takeover over WSGI; the official MCP SDK
is an ASGI app. Rather than a second server, each web process keeps ONE event loop in a
daemon thread, with the SDK's session manager entered once (its task group and lifespan
live as long as the process). A request to `/mcp`:

1. is authenticated by the Django view, in its own thread (401 before any MCP message);
2. hands the ASGI app the scope and the body it already read, on the process's loop;
3. blocks its own thread on a queue, and **runs whatever Django work the SDK's handlers
   ask for in that very thread** (`in_request_thread`): the request's own database
   connection, its transaction rules and its cleanup, no thread pool, no sync_to_async
   hop, no new connection per call. The handlers are thin coroutines that await that
   work; the loop only parses, validates and frames JSON-RPC.
4. returns the response the ASGI app sent (JSON mode: one body).

So a call costs one hop onto the loop and one back, whatever it does in the database,
and a bounded wait for an action's outcome sleeps in the request's thread as
`GET /actions/{id}?wait=` does (runs/waits.py), not on the loop.
"""

import asyncio
import contextvars
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from core.perprocess import PerProcess

_request: contextvars.ContextVar["BridgedRequest | None"] = contextvars.ContextVar(
    "takeover_mcp_request", default=None
)


@dataclass
class BridgedRequest:
    """One HTTP request in flight through the bridge: what the handlers may read about it
    (`info`: the principal and the rest, set by the view), and the queue its thread serves."""

    info: Any
    work: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)


def current() -> "BridgedRequest":
    request = _request.get()
    if request is None:
        raise RuntimeError("not inside a bridged /mcp request")
    return request


async def in_request_thread(fn: Callable, *args, **kwargs):
    """Run `fn` in the Django thread that serves the current request, and await its result."""
    request = current()
    loop = asyncio.get_running_loop()
    future = loop.create_future()
    request.work.put((fn, args, kwargs, future))
    return await future


def _settle(future: asyncio.Future, value, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)


class Bridge:
    """The process's loop thread and the ASGI app it serves (built by `make_app()`, which
    returns `(asgi_app, lifespan)`: the app, and an async context manager to hold open)."""

    def __init__(self, make_app: Callable[[], tuple[Callable, Any]]) -> None:
        self.make_app = make_app
        self.running = PerProcess(self._start)

    def _start(self) -> tuple[asyncio.AbstractEventLoop, Callable]:
        ready = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()
        app, lifespan = self.make_app()

        async def hold() -> None:
            try:
                async with lifespan:
                    ready.set()
                    await asyncio.Event().wait()  # for the life of the process
            except BaseException as exc:  # pragma: no cover - reported below
                failure.append(exc)
                ready.set()
                raise

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(hold())

        threading.Thread(target=run, name="takeover-mcp-loop", daemon=True).start()
        ready.wait(10)
        if failure:
            raise RuntimeError("the MCP server did not start") from failure[0]
        return loop, app

    def handle(self, scope: dict, body: bytes, info: Any) -> tuple[int, list, bytes]:
        """Serve one request through the ASGI app; Django work runs in this thread."""
        loop, app = self.running.get()
        request = BridgedRequest(info)
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
                await app(scope, receive, send)
            finally:
                done.set()

        concurrent = asyncio.run_coroutine_threadsafe(serve(), loop)
        concurrent.add_done_callback(lambda _: request.work.put(None))
        while (item := request.work.get()) is not None:
            fn, args, kwargs, future = item
            try:
                value, error = fn(*args, **kwargs), None
            except BaseException as exc:  # handed to the awaiting coroutine
                value, error = None, exc
            loop.call_soon_threadsafe(_settle, future, value, error)
        concurrent.result()
        return status[0], headers, b"".join(chunks)
