"""Takeover's MCP server, on the official SDK's low-level `Server` (docs/mcp.md).

Streamable HTTP, stateless, JSON responses: protocol 2026-07-28 (each request a
self-contained POST, the SDK's single-exchange path) and the handshake-era versions the SDK
still negotiates (its stateless transport). The handlers are thin: they read what the SDK
parsed and validated, run the Django work in the request's own thread
(`bridge.in_request_thread`, `calls`), and shape the answer.

`requestState` is sealed by the SDK's `RequestStateBoundary` (AES-GCM under a key derived
from `MCP_REQUEST_STATE_KEY`, shared by every web process; bound to the method, the tool,
the digest of the arguments, the principal and an expiry), and Takeover makes it single-use
(`calls.use_request_state`). A forged, tampered, expired, cross-principal or
other-arguments state is refused by the boundary with the SDK's one frozen message; a
replayed one by Takeover.
"""

import json
from contextlib import asynccontextmanager

import mcp_types as types
from django.conf import settings
from mcp.server.lowlevel.server import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp_types import CLIENT_INFO_META_KEY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from . import approvals, bridge, calls

NAME = "takeover"


def caller_for(ctx) -> calls.Caller:
    """The authenticated caller, with the client's own name when its request says it."""
    caller: calls.Caller = bridge.current().info
    meta = (ctx.params or {}).get("_meta") or {}
    info = meta.get(CLIENT_INFO_META_KEY) if isinstance(meta, dict) else None
    name = info.get("name") if isinstance(info, dict) else None
    if isinstance(name, str) and name.strip():
        return calls.Caller(caller.principal, name.strip()[:200], caller.console)
    return caller


async def on_list_tools(ctx, params):
    tools = await bridge.in_request_thread(calls.list_tools, bridge.current().info)
    return types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in tools])


async def on_call_tool(ctx, params):
    raw = ctx.params or {}
    meta = raw.get("_meta") if isinstance(raw.get("_meta"), dict) else {}
    caller = caller_for(ctx)
    state = raw.get("requestState")
    try:
        if state is not None:
            try:
                plaintext = json.loads(state)
            except (TypeError, ValueError) as exc:
                raise calls.CallRefused("Invalid or expired requestState") from exc
            outcome = await bridge.in_request_thread(
                approvals.resume, caller, params.name, plaintext
            )
        else:
            outcome = await bridge.in_request_thread(
                calls.call_tool, caller, params.name, params.arguments, meta
            )
    except calls.CallRefused as exc:
        raise MCPError(code=exc.code, message=exc.message) from None
    if outcome.awaiting is None:
        return types.CallToolResult.model_validate(outcome.result)
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return types.CallToolResult.model_validate(approvals.awaiting_result(outcome.awaiting))
    sealed_later = json.dumps(approvals.new_state(outcome.awaiting))  # sealed by the boundary
    if state is not None:  # the client has the link already: wait for the decision again
        return types.InputRequiredResult(request_state=sealed_later)
    link = outcome.awaiting["link"]
    elicit = types.ElicitRequest(
        params=types.ElicitRequestURLParams(
            message=(
                f"{params.name} needs a person's approval before Takeover applies it. "
                f"Open {link} to see the exact intent; an approver grants or denies it there."
            ),
            url=link,
        )
    )
    return types.InputRequiredResult(
        input_requests={"approval": elicit}, request_state=sealed_later
    )


def request_state_principal(ctx) -> str | None:
    request = bridge._request.get()
    return str(request.info.principal.pk) if request is not None else None


def build() -> tuple:
    """The ASGI app and the lifespan the bridge holds open (`bridge.Bridge`)."""
    server = Server(
        NAME,
        version="1",
        instructions=(
            "Takeover applies each tool call at most once, after any approval it needs, and "
            "tells you its outcome; an unknown outcome is resolved by a person. Re-issue a "
            "call with the same arguments (or the same io.takeover/idempotency-key) to learn "
            "its outcome; never invent a new key for the same intent."
        ),
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        # No Mcp-Param-* headers are declared in our schemas: nothing to validate before
        # the handler (which would otherwise list the tools once more per call).
        get_tool_input_schema=lambda name: None,
    )
    security = RequestStateSecurity(
        keys=[settings.MCP_REQUEST_STATE_KEY],
        ttl=settings.MCP_REQUEST_STATE_TTL_SECONDS,
        bind_principal=request_state_principal,
        audience=NAME,
    )
    # Only the boundary: the SDK's OpenTelemetry middleware is dropped (core/otel.py traces
    # the request already, when tracing is on).
    server.middleware = [RequestStateBoundary(security, default_audience=NAME)]
    manager = StreamableHTTPSessionManager(
        app=server, json_response=True, stateless=True, security_settings=None
    )

    @asynccontextmanager
    async def lifespan():
        async with manager.run():
            yield

    return manager.handle_request, lifespan()


gateway = bridge.Bridge(build)
