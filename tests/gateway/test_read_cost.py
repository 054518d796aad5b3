"""What a read-only call through /mcp costs in database round trips: the token, the tool
with the kept run, the read proposed and claimed in one statement, and its settle (the two
writes committed without waiting for the WAL flush, nothing left set on the connection).
The upstream is the demo MCP server over real HTTP; the request goes through Django's whole
stack in this thread, so every query it makes is counted."""

import json

from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from core.services import tool_declare

from ..builders import SETUP
from .conftest import register_mcp_tool

MODERN = "2026-07-28"


def call(client, token, i):
    body = {
        "jsonrpc": "2.0",
        "id": i,
        "method": "tools/call",
        "params": {
            "name": "find_tickets",
            "arguments": {"status": "nobody-has-this"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "cost-agent", "version": "1"},
            },
        },
    }
    response = client.post(
        "/mcp",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        HTTP_ACCEPT="application/json, text/event-stream",
        HTTP_MCP_PROTOCOL_VERSION=MODERN,
        HTTP_MCP_METHOD="tools/call",
        HTTP_MCP_NAME="find_tickets",
    )
    assert response.status_code == 200, response.content
    result = response.json()["result"]
    assert result["isError"] is False, result
    return result


def test_a_read_only_call_costs_four_round_trips(world, demo_mcp):
    search = register_mcp_tool(
        world, demo_mcp, "find_tickets", "search_tickets", target_argument="status"
    )
    tool_declare(search, actor=SETUP, reason="a search changes nothing", effect="read_only")
    client = Client()
    call(client, world.agent.token, 1)  # the first call starts the client's run
    before = commit_mode()
    with CaptureQueriesContext(connection) as queries:
        result = call(client, world.agent.token, 2)
    assert result["structuredContent"]["state"] == "succeeded"
    assert result["structuredContent"]["answer"] == {"matches": [], "count": 0}
    sqls = [q["sql"] for q in queries.captured_queries]
    assert len(sqls) == 4, queries.captured_queries
    unflushed = "set_config('synchronous_commit', 'off', true)"
    # The claim and the settle, each for its own transaction only.
    assert [unflushed in sql for sql in sqls] == [False, False, True, True], sqls
    assert commit_mode() == before  # what comes next on this connection waits for the flush


def commit_mode() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return cursor.fetchone()[0]
