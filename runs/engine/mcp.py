"""The tool protocol for an MCP server's tool (`Tool.kind == "mcp"`, runs/mcp_tools.py;
docs/mcp.md, "MCP servers as tools"): apply is `tools/call` with the key in `_meta`, the
authoritative state comes from the declared read tool, and an effect lookup from the
declared lookup tool. The same classification as an HTTP tool's (`protocol.py`), in MCP's
words:

- the request provably never left (connection refused, DNS, TLS, the egress policy) →
  `not_sent`;
- a result without `isError` → `applied`;
- a JSON-RPC error that says the call was refused before any work (invalid params, unknown
  method or tool, an unsupported protocol version), or an HTTP 4xx → `rejected`;
- anything after sending that is not an answer — a cut stream, a timeout, a reset, an
  unreadable body, a 5xx, an internal error, **or an `isError` result** (a tool may have
  done half its work before failing) → `unknown`, reconciled through the read tool, and
  never re-sent unless the tool is declared `idempotent`.

Spoken as MCP 2026-07-28 over Streamable HTTP (one JSON-RPC request per POST, the envelope
in `_meta`, no session), through the same egress-checked transport as every other tool
call (keep-alive-free for anything with a side effect), and signed the same way
(`Takeover-Signature` over the POST), so an MCP server can refuse a call that did not come
through Takeover.
"""

import functools
import json
import threading
import time
import uuid

import httpx
from django.conf import settings
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    METHOD_NOT_FOUND,
    PROTOCOL_VERSION_META_KEY,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from mcp_types import INVALID_PARAMS as MCP_INVALID_PARAMS
from takeover_client import signing

from core import egress
from core.logs import traceparent
from core.models import ToolEffect

from ..states import AttemptOutcome, Verdict
from .answers import CallResult, Lookup, Read, lookup_applied

PROTOCOL_VERSION = "2026-07-28"
KEY_META = "io.takeover/idempotency-key"
ACTION_META = "io.takeover/action"
REFUSED_BEFORE_WORK = {MCP_INVALID_PARAMS, METHOD_NOT_FOUND, UNSUPPORTED_PROTOCOL_VERSION, -32600}


# The whole answer of the last apply in this thread, by action id, for whoever dispatched it
# in-line and wants more than the 300 characters an attempt keeps (the MCP gateway passes a
# read-only tool's result through: gateway/calls.py). Taken once; never shared across threads.
_answers = threading.local()


def take_answer(action_id) -> dict | None:
    answers = getattr(_answers, "by_action", None) or {}
    return answers.pop(str(action_id), None)


class Unreadable(Exception):
    """The answer could not be read as one JSON-RPC response."""


def fill(template, *, target: str, key: str = ""):
    """Arguments from a mapping: the strings "{target}" and "{key}" replaced, at any depth."""
    if isinstance(template, str):
        return template.replace("{target}", target).replace("{key}", key)
    if isinstance(template, dict):
        return {k: fill(v, target=target, key=key) for k, v in template.items()}
    if isinstance(template, list):
        return [fill(v, target=target, key=key) for v in template]
    return template


def split_arguments(tool, arguments: dict) -> tuple[str, dict]:
    """An MCP tool's call arguments → (target, desired_state); ValueError naming the
    argument when the target is missing or not a string."""
    name = tool.mcp["target_argument"]
    target = arguments.get(name)
    if not isinstance(target, str) or not target or len(target) > 500:
        raise ValueError(f"argument {name!r} (the target) must be a string of 1 to 500 characters")
    return target, {k: v for k, v in arguments.items() if k != name}


def apply_arguments(tool, target: str, desired_state: dict) -> dict:
    return {**desired_state, tool.mcp["target_argument"]: target}


def _envelope(extra: dict | None = None) -> dict:
    return {
        PROTOCOL_VERSION_META_KEY: PROTOCOL_VERSION,
        CLIENT_CAPABILITIES_META_KEY: {},
        CLIENT_INFO_META_KEY: {"name": "takeover", "version": "1"},
        **(extra or {}),
    }


@functools.lru_cache(maxsize=1024)
def _url(url: str) -> httpx.URL:
    return httpx.URL(url)


def rpc(
    url: str, method: str, params: dict, *, timeout: float, action=None, reuse: bool = False
) -> httpx.Response:
    """POST one JSON-RPC request straight to the engine's egress-checked transport
    (`core.egress.tool_request`: keep-alive-free unless `reuse`; httpx errors propagate:
    the caller classifies them)."""
    body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex[:12], "method": method, "params": params}
    content = json.dumps(body, separators=(",", ":")).encode()
    target = _url(url)
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": PROTOCOL_VERSION,
        "Mcp-Method": method,
        "traceparent": traceparent(),
    }
    if "name" in params:
        headers["Mcp-Name"] = params["name"]
    if action is not None:
        headers[signing.ACTION_HEADER] = str(action.pk)
        headers[signing.KEY_HEADER] = action.idempotency_key
        headers[signing.SIGNATURE_HEADER] = signing.sign(
            action.tool.signing_secrets(),
            method="POST",
            path=target.raw_path.decode("ascii"),
            body=content,
            action_id=str(action.pk),
            key=action.idempotency_key,
        )
    return egress.tool_request(
        "POST", target, headers=headers, content=content, timeout=timeout, reuse=reuse
    )


def answer(response: httpx.Response) -> dict:
    """The JSON-RPC response in an HTTP answer (JSON, or the last message of an SSE
    stream); Unreadable when there is none."""
    kind = response.headers.get("content-type", "")
    text = response.text
    if kind.startswith("text/event-stream"):
        found = None
        for block in text.replace("\r\n", "\n").split("\n\n"):
            data = "\n".join(
                line[5:].lstrip() for line in block.split("\n") if line.startswith("data:")
            )
            if not data:
                continue
            try:
                message = json.loads(data)
            except ValueError:
                continue
            if isinstance(message, dict) and ("result" in message or "error" in message):
                found = message
        if found is None:
            raise Unreadable("the event stream ended without a response")
        return found
    try:
        message = json.loads(text)
    except ValueError as exc:
        raise Unreadable(f"not JSON: {text[:120]!r}") from exc
    if not isinstance(message, dict) or ("result" not in message and "error" not in message):
        raise Unreadable("not a JSON-RPC response")
    return message


def _result_text(result: dict) -> str:
    if result.get("structuredContent") is not None:
        return json.dumps(result["structuredContent"], separators=(",", ":"))
    texts = [c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict)]
    return " ".join(t for t in texts if t)


def _tools_call(action, params: dict, *, reuse: bool) -> httpx.Response:
    tool = action.tool
    timeout = tool.timeout_seconds
    return rpc(tool.base_url, "tools/call", params, timeout=timeout, action=action, reuse=reuse)


def call_tool(action) -> CallResult:
    """Apply: `tools/call` of the upstream tool, the key in `_meta`."""
    tool = action.tool
    params = {
        "name": tool.mcp["tool"],
        "arguments": apply_arguments(tool, action.target, action.desired_state),
        "_meta": _envelope({KEY_META: action.idempotency_key, ACTION_META: str(action.pk)}),
    }
    try:
        response = _tools_call(action, params, reuse=tool.effect == ToolEffect.READ_ONLY)
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        return CallResult(AttemptOutcome.NOT_SENT, detail=f"not sent: {type(exc).__name__}: {exc}")
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        return CallResult(AttemptOutcome.NOT_SENT, detail=f"not sent: bad MCP URL: {exc}")
    except httpx.HTTPError as exc:
        return CallResult(
            AttemptOutcome.UNKNOWN, detail=f"sent, then {type(exc).__name__}: {exc}"[:500]
        )
    status = response.status_code
    try:
        message = answer(response)
    except (Unreadable, httpx.HTTPError) as exc:
        if 400 <= status < 500:
            return CallResult(AttemptOutcome.REJECTED, status, response.text[:300])
        return CallResult(AttemptOutcome.UNKNOWN, status, f"sent, then {exc}"[:300])
    if "error" in message:
        error = message["error"] if isinstance(message["error"], dict) else {}
        detail = f"MCP error {error.get('code')}: {error.get('message')}"[:300]
        if error.get("code") in REFUSED_BEFORE_WORK or 400 <= status < 500:
            return CallResult(AttemptOutcome.REJECTED, status, detail)
        return CallResult(AttemptOutcome.UNKNOWN, status, detail)
    result = message["result"] if isinstance(message["result"], dict) else {}
    if result.get("isError"):
        return CallResult(
            AttemptOutcome.UNKNOWN,
            status,
            f"the tool answered isError: {_result_text(result)}"[:300],
        )
    _answers.by_action = {str(action.pk): result}  # only the latest: nothing accumulates
    return CallResult(AttemptOutcome.APPLIED, status, _result_text(result)[:300])


def _call_read(action, tool_name: str, arguments: dict) -> dict:
    """One side-effect-free tools/call; its structured result (Unreadable, httpx errors)."""
    params = {"name": tool_name, "arguments": arguments, "_meta": _envelope()}
    message = answer(_tools_call(action, params, reuse=True))
    if "error" in message:
        raise Unreadable(f"MCP error: {message['error']}"[:300])
    result = message["result"] if isinstance(message["result"], dict) else {}
    if result.get("isError"):
        raise Unreadable(f"{tool_name} answered isError: {_result_text(result)}"[:300])
    content = result.get("structuredContent")
    if content is None:  # a server that only answers text: JSON in the first text block
        try:
            content = json.loads(_result_text(result))
        except ValueError as exc:
            raise Unreadable(f"{tool_name} gave no structured result") from exc
    if not isinstance(content, dict):
        raise Unreadable(f"{tool_name} gave a structured result that is not an object")
    return content


def read_authoritative(action) -> Read:
    """The declared read tool, 3 attempts 200 ms apart, as for an HTTP tool."""
    config = action.tool.mcp
    arguments = fill(config["read_arguments"], target=action.target)
    detail = ""
    for attempt in range(settings.RECONCILE_READ_ATTEMPTS):
        if attempt:
            time.sleep(settings.RECONCILE_READ_INTERVAL_SECONDS)
        try:
            content = _call_read(action, config["read_tool"], arguments)
        except (Unreadable, httpx.HTTPError) as exc:
            detail = f"{type(exc).__name__}: {exc}"[:300]
            continue
        if content.get("found") is False or ("state" in content and content["state"] is None):
            return Read(Verdict.MISSING, detail=f"{config['read_tool']}: the target does not exist")
        if "state" in content:
            state, version = content.get("state"), content.get("version")
        else:
            state = {k: v for k, v in content.items() if k != "version"}
            version = content.get("version")
        if not isinstance(state, dict) or not isinstance(version, int) or isinstance(version, bool):
            detail = "unreadable state: state must be an object and version an integer"
            continue
        return Read(state=state, version=version)
    return Read(Verdict.READ_FAILED, detail=detail)


def lookup_effect(action) -> Lookup:
    """The declared lookup tool: did the upstream apply this key?"""
    config = action.tool.mcp
    key = action.idempotency_key
    if not config.get("lookup_tool"):
        return Lookup(Verdict.LOOKUP_FAILED, detail="no lookup tool declared")
    arguments = fill(config["lookup_arguments"], target=action.target, key=key)
    try:
        content = _call_read(action, config["lookup_tool"], arguments)
    except (Unreadable, httpx.HTTPError) as exc:
        return Lookup(Verdict.LOOKUP_FAILED, detail=f"lookup: {exc}"[:300])
    if content.get("applied") is False:
        return Lookup(
            Verdict.LOOKUP_NOT_FOUND, detail=f"the MCP server reports it never received key {key}"
        )
    if content.get("applied") is not True:
        return Lookup(Verdict.LOOKUP_FAILED, detail="lookup: the MCP server could not tell")
    return lookup_applied(content, detail=f"the MCP server reports it applied key {key}")


def list_tools(url: str, *, timeout: float = 10) -> list[dict]:
    """The upstream's tools (for registration: schemas and annotations). Raises ValueError
    in words when the server cannot be listed."""
    tools, cursor = [], None
    for _ in range(20):
        params = {"_meta": _envelope()}
        if cursor:
            params["cursor"] = cursor
        try:
            message = answer(rpc(url, "tools/list", params, timeout=timeout))
        except (Unreadable, httpx.HTTPError) as exc:
            raise ValueError(f"could not list the MCP server's tools: {exc}") from exc
        if "error" in message:
            raise ValueError(f"the MCP server refused tools/list: {message['error']}")
        result = message.get("result") or {}
        tools.extend(t for t in result.get("tools") or [] if isinstance(t, dict))
        cursor = result.get("nextCursor")
        if not cursor:
            break
    return tools


def listing_for(url: str, tool_name: str, *, timeout: float = 10) -> dict:
    """The upstream's `tools/list` entry for one tool (for `mcp_tool_register`); ValueError
    in words when the server cannot be listed or has no such tool."""
    for entry in list_tools(url, timeout=timeout):
        if entry.get("name") == tool_name:
            return entry
    raise ValueError(f"the MCP server at {url} lists no tool named {tool_name!r}")
