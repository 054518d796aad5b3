"""The client's tests speak real HTTP to pytest-django's `live_server` (a threaded WSGI
server on the test database), with a real Celery worker and the real demo downstream."""

import uuid

import pytest
from takeover_client import Takeover


@pytest.fixture
def w(world, worker):
    world.tool("update_ticket")
    world.tool("close_ticket", requires_approval=True)
    world.tool("send_email", prefix="email", identity_fields=["campaign"])
    return world


@pytest.fixture
def agent(w, live_server):
    with Takeover(live_server.url, w.agent.token, retry_for=10) as client:
        yield client


@pytest.fixture
def operator(w, live_server):
    def make(persona="admin"):
        return Takeover(live_server.url, getattr(w, persona).token)

    return make


def ticket() -> str:
    return f"T-{uuid.uuid4().hex[:10]}"


def event() -> str:
    return f"evt_{uuid.uuid4().hex[:10]}"
