"""The demo's MCP server: tickets and an outbox, served as MCP tools (docs/mcp.md, "MCP
servers as tools"), for Takeover to register as `kind: "mcp"` tools.

Built on the official MCP SDK (low-level `Server`, Streamable HTTP, stateless, JSON
responses) and served by uvicorn. Importable without Django. Run it as
``python -m demo.mcp_server --port 0``: it prints ``demo MCP server listening on <url>``.

Tools (annotations in brackets, which Takeover imports as *suggested* declarations):

``update_ticket(ticket_id, status, note?)`` [destructive]
    Merges ``status`` (and ``note``) into the ticket and adds 1 to its version. It does not
    deduplicate on the key Takeover sends in ``_meta["io.takeover/idempotency-key"]``: it
    counts them, so the soak can prove each was applied once.
``get_ticket(ticket_id)`` [read-only]
    ``{"state": {...}, "version": n}``, or ``{"state": null}`` for a ticket that does not
    exist: Takeover's declared read tool.
``send_email(to, subject, body)`` [idempotent]
    Appends to the recipient's outbox, at most once per key (a repeat answers the first
    result).
``find_effect(key)`` [read-only]
    ``{"applied": true, "state", "version"}`` for a key it applied, ``{"applied": false}``
    otherwise: Takeover's declared lookup tool.
``search_tickets(status)`` [read-only]
    The ids of the tickets with that status.

Fault injection, for the soak and the tests: ``POST /_control/fault`` with ``{"mode":
"cut_after_commit", "count": n}`` (``count`` -1: every call) makes the next n effects commit
and then cut the stream: the HTTP response starts, a few bytes go out, and the connection
is dropped. ``GET /_control/stats`` answers the counts (effects, keys, duplicates, cut
streams); ``POST /_control/reset`` forgets everything.
"""

import argparse
import contextlib
import contextvars
import json
import socket
import sys
import threading
from typing import Any

import mcp_types as types
import uvicorn
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

KEY_META = "io.takeover/idempotency-key"


class Store:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.tickets: dict[str, dict] = {}
        self.outbox: dict[str, list[dict]] = {}
        self.applied: dict[str, dict] = {}  # key → the first result
        self.key_counts: dict[str, int] = {}
        self.effects = 0
        self.reads = 0
        self.cut = 0
        self.cut_left = 0

    def update_ticket(self, ticket_id: str, changes: dict, key: str | None) -> dict:
        with self.lock:
            ticket = self.tickets.setdefault(ticket_id, {"state": {}, "version": 0})
            ticket["state"].update(changes)
            ticket["version"] += 1
            self.effects += 1
            result = {"state": dict(ticket["state"]), "version": ticket["version"]}
            if key:
                self.key_counts[key] = self.key_counts.get(key, 0) + 1
                self.applied.setdefault(key, {**result, "target": ticket_id})
            return result

    def send_email(self, to: str, mail: dict, key: str | None) -> dict:
        with self.lock:
            if key and key in self.applied:
                return {k: v for k, v in self.applied[key].items() if k != "target"}
            box = self.outbox.setdefault(to, [])
            box.append(mail)
            self.effects += 1
            result = {"state": dict(mail), "version": len(box)}
            if key:
                self.key_counts[key] = self.key_counts.get(key, 0) + 1
                self.applied[key] = {**result, "target": to}
            return result

    def take_cut(self) -> bool:
        with self.lock:
            if self.cut_left == 0:
                return False
            if self.cut_left > 0:
                self.cut_left -= 1
            self.cut += 1
            return True

    def stats(self) -> dict:
        with self.lock:
            return {
                "effects": self.effects,
                "keys": len(self.key_counts),
                "duplicates": sum(n - 1 for n in self.key_counts.values() if n > 1),
                "cut_streams": self.cut,
                "reads": self.reads,
                "tickets": len(self.tickets),
            }


store = Store()
_cut_this_request: contextvars.ContextVar[list | None] = contextvars.ContextVar("cut", default=None)

S = {"type": "string", "minLength": 1}


# The behaviour hints (MCP tool annotations) of this server's three kinds of tool.
READS = {"read_only_hint": True}
OVERWRITES = {"read_only_hint": False, "destructive_hint": True, "idempotent_hint": False}
ONCE_PER_KEY = {"read_only_hint": False, "destructive_hint": False, "idempotent_hint": True}


def _tool(name, description, properties, required, hints, *, closed=False) -> types.Tool:
    """A tool of this server: its arguments (`closed`: no others) and its behaviour hints."""
    schema = {"type": "object", "properties": properties, "required": required}
    if closed:
        schema["additionalProperties"] = False
    return types.Tool(
        name=name,
        description=description,
        input_schema=schema,
        annotations=types.ToolAnnotations(**hints),
    )


TOOLS = [
    _tool(
        "update_ticket",
        "Set a ticket's status (and a note).",
        {"ticket_id": S, "status": S, "note": {"type": "string"}},
        ["ticket_id", "status"],
        OVERWRITES,
        closed=True,
    ),
    _tool(
        "get_ticket",
        "Read a ticket: its state and version.",
        {"ticket_id": S},
        ["ticket_id"],
        READS,
    ),
    _tool(
        "send_email",
        "Send an e-mail (at most once per idempotency key).",
        {"to": S, "subject": S, "body": {"type": "string"}},
        ["to", "subject"],
        ONCE_PER_KEY,
        closed=True,
    ),
    _tool(
        "find_effect",
        "Whether an idempotency key was applied, and with what result.",
        {"key": S},
        ["key"],
        READS,
    ),
    _tool(
        "search_tickets",
        "The ids of the tickets with a status.",
        {"status": S},
        ["status"],
        READS,
    ),
]


def _result(structured: dict, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=json.dumps(structured))],
        structured_content=structured,
        is_error=error,
    )


async def on_list_tools(ctx, params):
    return types.ListToolsResult(tools=TOOLS)


async def on_call_tool(ctx, params):
    args: dict[str, Any] = params.arguments or {}
    meta = (ctx.params or {}).get("_meta") or {}
    key = meta.get(KEY_META) if isinstance(meta, dict) else None
    name = params.name
    if name == "update_ticket":
        changes = {k: v for k, v in args.items() if k != "ticket_id"}
        result = store.update_ticket(str(args.get("ticket_id")), changes, key)
    elif name == "send_email":
        mail = {k: v for k, v in args.items() if k != "to"}
        result = store.send_email(str(args.get("to")), mail, key)
    elif name == "get_ticket":
        with store.lock:
            store.reads += 1
            ticket = store.tickets.get(str(args.get("ticket_id")))
            return _result(
                {"state": dict(ticket["state"]), "version": ticket["version"]}
                if ticket
                else {"state": None}
            )
    elif name == "find_effect":
        with store.lock:
            store.reads += 1
            found = store.applied.get(str(args.get("key")))
            return _result({"applied": True, **found} if found else {"applied": False})
    elif name == "search_tickets":
        with store.lock:
            store.reads += 1
            ids = sorted(
                t
                for t, v in store.tickets.items()
                if v["state"].get("status") == args.get("status")
            )
        return _result({"matches": ids, "count": len(ids)})
    else:
        return _result({"error": f"unknown tool {name}"}, error=True)
    holder = _cut_this_request.get()
    if holder is not None and store.take_cut():
        holder.append(True)  # committed; now the answer is lost on the way
    return _result(result)


def build_app():
    server = Server("takeover-demo-tickets", on_list_tools=on_list_tools, on_call_tool=on_call_tool)
    server.middleware = []
    manager = StreamableHTTPSessionManager(app=server, json_response=True, stateless=True)

    async def control(scope, receive, send, name: str) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if name == "fault":
            spec = json.loads(body or b"{}")
            with store.lock:
                store.cut_left = int(spec.get("count", -1)) if spec.get("mode") else 0
            answer = {"cut_left": store.cut_left}
        elif name == "reset":
            store.reset()
            answer = {"reset": True}
        else:
            answer = store.stats()
        payload = json.dumps(answer).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": payload})

    async def app(scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            message = await receive()
            async with manager.run():
                await send({"type": "lifespan.startup.complete"})
                message = await receive()
            if message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
            return
        path = scope.get("path", "")
        if path.startswith("/_control/"):
            await control(scope, receive, send, path.rsplit("/", 1)[-1])
            return
        holder: list = []
        _cut_this_request.set(holder)

        async def guarded_send(message) -> None:
            if holder and message["type"] == "http.response.start":
                # Commit-then-cut: the response begins, a few bytes go out, then the
                # connection drops without the rest.
                headers = [(b"content-type", b"application/json"), (b"content-length", b"4096")]
                await send({"type": "http.response.start", "status": 200, "headers": headers})
                await send(
                    {"type": "http.response.body", "body": b'{"jsonrpc":', "more_body": True}
                )
                raise ConnectionAbortedError("demo fault: stream cut after commit")
            await send(message)

        with contextlib.suppress(ConnectionAbortedError):
            await manager.handle_request(scope, receive, guarded_send)

    return app


def serve(host: str = "127.0.0.1", port: int = 0, *, quiet: bool = True) -> None:
    # IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY only on the connections of a
    # socket that says it is TCP. Without it a kept-alive connection waits ~40 ms for each
    # response's body (Nagle against the client's delayed ACK).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    url = f"http://{host}:{sock.getsockname()[1]}/mcp"
    config = uvicorn.Config(
        build_app(),
        log_level="warning" if quiet else "info",
        access_log=not quiet,
        lifespan="on",
        timeout_keep_alive=5,
    )
    server = uvicorn.Server(config)
    print(f"demo MCP server listening on {url}", flush=True)
    server.run(sockets=[sock])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8200)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    try:
        serve(args.host, args.port, quiet=not args.verbose)
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
