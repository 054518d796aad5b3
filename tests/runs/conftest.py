"""Fixtures of the engine's scenarios: a world with a worker and a tool of each kind, and a
billing server this project did not write (`tests/runs/scenarios.py`)."""

import threading
from http.server import ThreadingHTTPServer

import pytest

from .scenarios import Billing, billing_handler


@pytest.fixture
def w(world, worker):
    """A world with a worker and a tool of each kind: the demo's tickets (`unsafe`, no
    lookup), one that needs an approval, the outbox (`idempotent`, with lookup) and the ticket
    search (`read_only`). A test file may bring its own `w`."""
    world.tool("update_ticket")
    world.tool("close_ticket", requires_approval=True)
    world.tool("send_email", prefix="email", effect="idempotent", lookup=True)
    world.tool("search_tickets", prefix="search", effect="read_only")
    return world


@pytest.fixture
def billing_server():
    servers = []

    def start(**options):
        billing = Billing(**options)
        server = ThreadingHTTPServer(("127.0.0.1", 0), billing_handler(billing))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        billing.url = f"http://127.0.0.1:{server.server_address[1]}/billing"
        servers.append(server)
        return billing

    yield start
    for server in servers:
        server.shutdown()
