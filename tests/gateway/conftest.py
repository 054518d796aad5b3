"""The official MCP SDK, unmodified, as the client of Takeover's /mcp over real HTTP."""

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation


def mcp_client(url: str, token: str | None, **options) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60, read=60))
    options.setdefault("client_info", Implementation(name="pytest-agent", version="1"))
    return Client(streamable_http_client(url, http_client=http), **options)


def run(fn, *args):
    return anyio.run(fn, *args)


@pytest.fixture
def mcp_url(live_server):
    return f"{live_server.url}/mcp"
