"""The tool protocol (docs/design.md, "The tool protocol", "Reconciliation"): POST an effect
and classify the answer, GET the authoritative state and judge it against the desired one,
and ask a `lookup: true` tool for its record of a key. HTTP only: nothing here writes.

httpx tells the two failure families apart: ConnectError/ConnectTimeout are raised before
the request is written (refused, DNS, TLS handshake), anything later — ReadTimeout,
RemoteProtocolError, ReadError, WriteError — means the request may have been received.
A fresh connection per attempt keeps that true: a pooled keep-alive connection that the
server closed could fail mid-write and look like "never sent".

Every request is signed (`Takeover-Signature`, `takeover_client.signing`) with the tool's
signing secret(s), over the method, the raw path as sent, a timestamp, the body's digest,
the action and its key, so that a tool can refuse whatever did not come through Takeover.
A key or target becomes one path segment exactly as meant: every reserved character is
percent-encoded, and a segment of dots only (`.`, `..`) entirely, so that no URL library
removes it as a dot segment and reads another resource.
"""

import functools
import json
import time

import httpx
from django.conf import settings
from takeover_client import signing

from core import egress, metrics
from core.logs import traceparent

from ..models import Action
from ..states import AttemptOutcome, Verdict
from . import mcp
from .answers import CallResult, Lookup, Read, lookup_applied


def tool_url(tool, *segments: str) -> httpx.URL:
    """`{base_url}/a/b`, each segment exactly as meant (`signing.segment`)."""
    path = "/".join(signing.segment(s) for s in segments)
    return _url(f"{tool.base_url.rstrip('/')}/{path}")


@functools.lru_cache(maxsize=1024)
def _url(text: str) -> httpx.URL:
    """An httpx.URL is never changed once made (its `copy_with` makes another), so one per
    text serves every call: an effect's URL is the same for every call to its tool."""
    return httpx.URL(text)


def send(action: Action, method: str, url: httpx.URL, body: dict | None = None):
    """One signed request to `action`'s tool: its action id and key as headers, the
    signature over exactly the bytes and the path that go on the wire. On a fresh
    connection, egress-checked on the resolved address at connect time, with no proxy, no
    redirect and no cookie (`core.egress.tool_request`)."""
    tool = action.tool
    content = b"" if body is None else json.dumps(body, separators=(",", ":")).encode()
    headers = {
        signing.ACTION_HEADER: str(action.pk),
        signing.KEY_HEADER: action.idempotency_key,
        "traceparent": traceparent(),
        signing.SIGNATURE_HEADER: signing.sign(
            tool.signing_secrets(),
            method=method,
            path=url.raw_path.decode("ascii"),
            body=content,
            action_id=str(action.pk),
            key=action.idempotency_key,
        ),
    }
    if body is not None:
        headers["Content-Type"] = "application/json"
    return egress.tool_request(
        method, url, headers=headers, content=content or None, timeout=tool.timeout_seconds
    )


def call_tool(action: Action) -> CallResult:
    tool = action.tool
    body = {
        "action_id": str(action.pk),
        "tenant": action.tenant.slug,
        "principal": action.principal.name,
        "tool": tool.name,
        "target": action.target,
        "desired_state": action.desired_state,
        "expected_version": action.expected_version,
    }
    started = time.monotonic()
    if tool.kind == "mcp":  # an MCP server's tool: tools/call (runs/engine/mcp.py)
        result = mcp.call_tool(action)
    else:
        result = _post_effect(action, body)
    metrics.record_tool_call(tool.name, result.outcome, time.monotonic() - started)
    return result


def _post_effect(action: Action, body: dict) -> CallResult:
    try:
        response = send(action, "POST", tool_url(action.tool, "effects"), body)
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        return CallResult(AttemptOutcome.NOT_SENT, detail=f"not sent: {type(exc).__name__}: {exc}")
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        return CallResult(AttemptOutcome.NOT_SENT, detail=f"not sent: bad tool URL: {exc}")
    except httpx.TimeoutException as exc:
        return CallResult(AttemptOutcome.UNKNOWN, detail=f"sent, then {type(exc).__name__}")
    except httpx.HTTPError as exc:
        return CallResult(
            AttemptOutcome.UNKNOWN, detail=f"sent, then {type(exc).__name__}: {exc}"[:500]
        )
    status = response.status_code
    snippet = response.text[:300]
    if 200 <= status < 300:
        return CallResult(AttemptOutcome.APPLIED, status, snippet)
    if status == 409:
        return CallResult(AttemptOutcome.VERSION_CONFLICT, status, snippet)
    if 400 <= status < 500:
        return CallResult(AttemptOutcome.REJECTED, status, snippet)
    return CallResult(AttemptOutcome.UNKNOWN, status, snippet)


def read_authoritative(action: Action) -> Read:
    """GET the authoritative state: side-effect free, 3 attempts 200 ms apart."""
    if action.tool.kind == "mcp":  # the declared read tool (runs/engine/mcp.py)
        return mcp.read_authoritative(action)
    url = tool_url(action.tool, "state", action.target)
    detail = ""
    for attempt in range(settings.RECONCILE_READ_ATTEMPTS):
        if attempt:
            time.sleep(settings.RECONCILE_READ_INTERVAL_SECONDS)
        try:
            response = send(action, "GET", url)
        except httpx.HTTPError as exc:
            detail = f"{type(exc).__name__}: {exc}"[:300]
            continue
        if response.status_code == 404:
            return Read(Verdict.MISSING, detail="the target does not exist (404)")
        if response.status_code != 200:
            detail = f"HTTP {response.status_code}"
            continue
        try:
            payload = response.json()
            state, version = payload["state"], payload["version"]
            if not isinstance(state, dict) or not isinstance(version, int):
                raise TypeError("state must be an object and version an integer")
        except (ValueError, KeyError, TypeError) as exc:
            detail = f"unreadable state: {exc}"[:300]
            continue
        return Read(state=state, version=version)
    return Read(Verdict.READ_FAILED, detail=detail)


def judge(action: Action, read: Read) -> tuple[str, list[dict]]:
    """docs/design.md, "Reconciliation": compare every desired field, then the version."""
    if read.verdict:
        return read.verdict, []
    diff = [
        {"field": name, "desired": wanted, "actual": read.state.get(name)}
        for name, wanted in action.desired_state.items()
        if name not in read.state or read.state[name] != wanted
    ]
    if diff:
        return Verdict.MISMATCH, diff
    if action.expected_version is None or read.version == action.expected_version + 1:
        return Verdict.MATCH, []
    return Verdict.MOVED_ON, []


def lookup_effect(action: Action) -> Lookup:
    """Ask a `lookup: true` tool whether it applied this action's key:
    `GET {base_url}/effects/{key}` (the key one path segment). One request, side-effect
    free.

    200 with `{"applied": true}` → applied (`state` and `version` kept when well-formed);
    404 → the tool never received the key; anything else (another status, a 200 that does
    not say `"applied": true`, a timeout, a reset) → it could not tell, and reconciliation
    falls back to reading the state.
    """
    if action.tool.kind == "mcp":  # the declared lookup tool (runs/engine/mcp.py)
        return mcp.lookup_effect(action)
    key = action.idempotency_key
    try:
        response = send(action, "GET", tool_url(action.tool, "effects", key))
    except httpx.HTTPError as exc:
        return Lookup(Verdict.LOOKUP_FAILED, detail=f"lookup: {type(exc).__name__}: {exc}"[:300])
    status = response.status_code
    if status == 404:
        return Lookup(
            Verdict.LOOKUP_NOT_FOUND,
            http_status=status,
            detail=f"the tool reports it never received key {key}",
        )
    if status != 200:
        return Lookup(
            Verdict.LOOKUP_FAILED,
            http_status=status,
            detail=f"lookup answered HTTP {status}: the tool could not tell",
        )
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if not isinstance(payload, dict) or payload.get("applied") is not True:
        return Lookup(
            Verdict.LOOKUP_FAILED,
            http_status=status,
            detail='lookup answered 200 without "applied": true: the tool could not tell',
        )
    return lookup_applied(
        payload, http_status=status, detail=f"the tool reports it applied key {key}"
    )
