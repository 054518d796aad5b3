"""Bad input at /mcp: each gets the MCP error or the tool error a client expects,
in words, nothing is written or applied, and never a 500."""

import json
import uuid

import httpx
from mcp.shared.exceptions import MCPError

from runs.models import Action, Run

from .conftest import mcp_client, run

MODERN = "2026-07-28"


def post(url, token, body, **headers):
    return httpx.post(
        url,
        content=body if isinstance(body, bytes) else json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **headers,
        },
        timeout=30,
    )


def envelope(method, params=None):
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": method,
        "params": {
            **(params or {}),
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
                **((params or {}).get("_meta") or {}),
            },
        },
    }


def modern_headers(method, name=None):
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if name:
        headers["Mcp-Name"] = name
    return headers


def written(world) -> tuple[int, int]:
    return (
        Action.objects.filter(tenant=world.tenant).count(),
        Run.objects.filter(tenant=world.tenant).count(),
    )


def test_401_before_any_mcp_message(world, mcp_url):
    for headers in (
        {},
        {"Authorization": "Bearer tko_nonsense"},
        {"Authorization": f"Basic {world.agent.token}"},
        {"Authorization": f"Bearer {world.admin.token}"},  # an operator is not an agent
    ):
        response = httpx.post(mcp_url, content=b"{not json", headers=headers, timeout=10)
        assert response.status_code == 401, response.text
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert response.json()["type"] == "/problems/unauthenticated"


def test_malformed_json_rpc_is_a_json_rpc_error(world, mcp_url):
    before = written(world)
    for body in (b"{not json", b"[]", b'{"jsonrpc": "2.0"}', b'"text"', b"\xff\xfe"):
        response = post(mcp_url, world.agent.token, body, **modern_headers("tools/call"))
        assert response.status_code < 500, (body, response.status_code, response.text)
        assert "error" in response.json(), response.text
    # A legacy request (no protocol header) with garbage: an error, never a 500.
    response = post(mcp_url, world.agent.token, b"{not json")
    assert 400 <= response.status_code < 500 and "error" in response.json()
    assert written(world) == before


def test_unknown_tool_bad_key_bad_run_and_bad_arguments(world, worker, mcp_url):
    world.tool("update_ticket", "tickets")
    before = written(world)
    args = {"target": "T-1", "desired_state": {"status": "open"}}

    def call(name, arguments, meta=None):
        response = post(
            mcp_url,
            world.agent.token,
            envelope("tools/call", {"name": name, "arguments": arguments, "_meta": meta or {}}),
            **modern_headers("tools/call", name),
        )
        assert response.status_code < 500, response.text
        return response.json()

    unknown = call("no_such_tool", args)
    assert unknown["error"]["code"] == -32602
    assert "Unknown tool 'no_such_tool'" in unknown["error"]["message"]
    for key in ("", "a b", "x" * 256, 42, "é"):
        bad = call("update_ticket", args, {"io.takeover/idempotency-key": key})
        assert bad["error"]["code"] == -32602, (key, bad)
        assert "idempotency-key" in bad["error"]["message"]
    bad_run = call("update_ticket", args, {"io.takeover/run": "not-a-uuid"})
    assert "io.takeover/run" in bad_run["error"]["message"]
    other_run = call("update_ticket", args, {"io.takeover/run": str(uuid.uuid4())})
    assert "no run" in other_run["error"]["message"]
    for arguments, words in (
        ({"target": "T-1"}, "'desired_state' is a required property"),
        ({"target": 7, "desired_state": {}}, "target: 7 is not of type 'string'"),
        ({**args, "expected_version": "3"}, "expected_version"),
        ({**args, "surprise": 1}, "Additional properties"),
        ({"target": "T-\u0000", "desired_state": {}}, "NUL"),
        ({**args, "expected_version": 2**70}, "64-bit"),
    ):
        result = call("update_ticket", arguments)["result"]
        assert result["isError"] is True, (arguments, result)
        assert words in result["content"][0]["text"], (words, result)
        assert "Nothing was applied" in result["content"][0]["text"]
    assert written(world) == before


def test_a_key_used_for_another_intent_is_a_tool_error(world, worker, mcp_url):
    world.tool("update_ticket", "tickets")
    key = f"evt-{uuid.uuid4().hex}"
    target = f"T-{uuid.uuid4().hex[:8]}"

    async def go():
        async with mcp_client(mcp_url, world.agent.token) as c:
            meta = {"io.takeover/idempotency-key": key}
            first = await c.call_tool(
                "update_ticket", {"target": target, "desired_state": {"s": 1}}, meta=meta
            )
            other = await c.call_tool(
                "update_ticket", {"target": target + "x", "desired_state": {"s": 1}}, meta=meta
            )
            try:
                await c.call_tool("nope", {})
            except MCPError as exc:
                return first, other, exc
            raise AssertionError("an unknown tool must be an MCP error")

    first, other, unknown = run(go)
    assert first.structured_content["idempotency_key"] == key
    assert other.is_error and "already used for a different call" in other.content[0].text
    assert Action.objects.filter(tenant=world.tenant).count() == 1
    assert "Unknown tool" in str(unknown)
