"""Transient database trouble is a 503 with Retry-After, never a 500 (docs/design.md, "The
API's conventions")."""

from contextlib import contextmanager

import pytest
from django.db import connection


@contextmanager
def database_down():
    """Point this process's connection at a socket where no server listens."""
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(HOST="/nonexistent-takeover-socket", PORT="")
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


@pytest.mark.parametrize("path", ["/api/v1/me", "/api/v1/queue"])
def test_api_answers_503_with_retry_after_when_the_database_is_down(world, path):
    client = world.admin.client()
    with database_down():
        response = client.get(path)
    assert response.status_code == 503
    assert response["Retry-After"]
    assert response["Content-Type"].startswith("application/problem+json")
    assert response.json()["type"] == "/problems/temporarily-unavailable"
    assert client.get(path).status_code == 200  # and it recovers by itself


def test_a_proposal_during_an_outage_is_a_503_and_writes_nothing(world):
    world.tool("update_ticket")
    run = world.start_run()
    with database_down():
        response = world.propose(
            run["id"], "k-outage", tool="update_ticket", target="t", desired_state={"a": 1}
        )
    assert response.status_code == 503
    retry = world.propose(
        run["id"], "k-outage", tool="update_ticket", target="t", desired_state={"a": 1}
    )
    assert retry.status_code == 201  # the key was not taken by the failed attempt


def test_console_page_answers_503_when_the_database_is_down(world):
    from django.test import Client

    client = Client(raise_request_exception=False)
    assert client.login(username=world.oncall.username, password="correct horse")
    with database_down():
        response = client.get("/")
    assert response.status_code == 503
    assert response["Retry-After"]
