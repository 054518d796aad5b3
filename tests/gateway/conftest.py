"""The official MCP SDK, unmodified, as the client of Takeover's /mcp over real HTTP."""

import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation

ROOT = Path(__file__).resolve().parents[2]


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


class DemoMCP:
    def __init__(self, process, url):
        self.process = process
        self.url = url
        self.base = url.rsplit("/mcp", 1)[0]

    def control(self, name, body=None):
        if body is None:
            return httpx.get(f"{self.base}/_control/{name}", timeout=10).json()
        return httpx.post(f"{self.base}/_control/{name}", json=body, timeout=10).json()


def start_demo_mcp() -> DemoMCP:
    process = subprocess.Popen(
        [sys.executable, "-m", "demo.mcp_server", "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = process.stdout.readline()
    if "listening on" not in line:
        process.kill()
        raise RuntimeError(f"demo MCP server did not start: {line!r}")
    return DemoMCP(process, line.strip().rsplit(" ", 1)[-1])


@pytest.fixture(scope="session")
def demo_mcp():
    server = start_demo_mcp()
    yield server
    server.process.terminate()
    server.process.wait(10)


def register_mcp_tool(world, demo, name, upstream, **options):
    """As an admin would: the upstream listed, its hints kept as a suggestion."""
    from runs.engine.mcp import listing_for
    from runs.mcp_tools import mcp_tool_register

    from ..builders import SETUP

    config = {
        "tool": upstream,
        "target_argument": options.pop("target_argument", "ticket_id"),
        "read_tool": options.pop("read_tool", "get_ticket"),
        **options.pop("mcp", {}),
    }
    options.setdefault("timeout_seconds", 2)
    return mcp_tool_register(
        tenant=world.tenant,
        name=name,
        base_url=demo.url,
        config=config,
        listing=listing_for(demo.url, upstream),
        actor=SETUP,
        **options,
    )
