"""An agent's plain proposals and reads are served without DRF's per-request machinery and
without the console's middleware (api/views/fast.py, takeover/middleware.py): the same
answers as the DRF view gives, and everything else still through DRF and the console's
chain."""

from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from ..conftest import problem

DRF = {"HTTP_ACCEPT": "application/json, */*"}  # not served by the fast path


def _action(world, key="k-fast"):
    world.tool("update_ticket")
    run = world.start_run()
    response = world.propose(
        run["id"], key, tool="update_ticket", target="t", desired_state={"note": "café \u2028"}
    )
    assert response.status_code == 201, response.content
    return run, response.json()


def test_the_fast_answers_are_the_drf_views_answers(world):
    run, action = _action(world)
    client = world.agent.client()
    fast = client.get(f"/api/v1/actions/{action['id']}")
    slow = client.get(f"/api/v1/actions/{action['id']}", **DRF)
    assert fast.status_code == slow.status_code == 200
    assert fast.content == slow.content
    assert b"\\u2028" in fast.content  # escaped, as DRF's renderer does
    for name in ("Content-Type", "Allow"):
        assert fast[name] == slow[name]
    body = {"tool": "update_ticket", "target": "t", "desired_state": {"note": "café \u2028"}}
    path = f"/api/v1/runs/{run['id']}/actions"
    fast = client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY="k-fast")
    slow = client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY="k-fast", **DRF)
    assert fast.status_code == slow.status_code == 200
    assert fast.content == slow.content and fast.json()["replayed"]
    # A proposal's ?wait= on either path; one that waits for a person is answered at once,
    # so no worker of the session can settle it between the two answers.
    world.tool("close_ticket", requires_approval=True)
    held = {**body, "tool": "close_ticket"}
    assert client.post(path, held, format="json", HTTP_IDEMPOTENCY_KEY="k-held").status_code == 201
    fast = client.post(f"{path}?wait=5", held, format="json", HTTP_IDEMPOTENCY_KEY="k-held")
    slow = client.post(f"{path}?wait=5", held, format="json", HTTP_IDEMPOTENCY_KEY="k-held", **DRF)
    assert fast.status_code == slow.status_code == 200
    assert fast.content == slow.content and fast.json()["state"] == "awaiting_approval"
    bad = {"tool": 5}
    fast = client.post(path, bad, format="json", HTTP_IDEMPOTENCY_KEY="k-bad")
    slow = client.post(path, bad, format="json", HTTP_IDEMPOTENCY_KEY="k-bad", **DRF)
    assert fast.status_code == slow.status_code == 400
    assert fast.content == slow.content and "tool" in problem(fast)["errors"]


def test_a_bearer_request_skips_the_consoles_middleware_but_keeps_the_headers(world):
    _run, action = _action(world)
    response = world.agent.client().get(f"/api/v1/actions/{action['id']}")
    assert response.status_code == 200
    assert "Set-Cookie" not in response and "Vary" not in response
    assert "frame-ancestors 'none'" in response["Content-Security-Policy"]
    assert response["X-Content-Type-Options"] == "nosniff"
    assert len(response["X-Request-ID"]) == 32
    assert int(response["Content-Length"]) == len(response.content)


def test_what_the_fast_path_does_not_take_is_drfs(world):
    run, action = _action(world)
    client = world.agent.client()
    refused = client.get(f"/api/v1/actions/{action['id']}", HTTP_ACCEPT="text/html")
    assert refused.status_code == 406
    assert problem(refused)["status"] == 406
    unknown = client.post(f"/api/v1/runs/{run['id']}/actions", "x", content_type="text/plain")
    assert unknown.status_code == 415


def test_an_operators_console_session_still_reads_the_api(world):
    _run, action = _action(world)
    client = Client(enforce_csrf_checks=True)
    client.force_login(get_user_model().objects.get(username=world.oncall.username))
    read = client.get(f"/api/v1/actions/{action['id']}")
    assert read.status_code == 200 and read.json()["id"] == action["id"]
    # The session's CSRF check still guards its writes.
    refused = client.post(
        f"/api/v1/actions/{action['id']}/acknowledge", {}, content_type="application/json"
    )
    assert refused.status_code == 403


def test_a_ledger_hit_is_one_statement_the_tokens_lookup_and_the_proposals(world):
    """`fast` reads the token and the proposal's run, tool and key together
    (runs.selectors.token_propose_lookup): a ledger hit writes nothing and reads once."""
    world.tool("update_ticket")
    run = world.start_run()
    body = {"tool": "update_ticket", "target": "t", "desired_state": {"note": "done"}}
    path = f"/api/v1/runs/{run['id']}/actions"
    client = world.agent.client()
    # Proposed and awaited in one request: dispatched by it and settled.
    action = client.post(f"{path}?wait=10", body, format="json", HTTP_IDEMPOTENCY_KEY="k-hit")
    assert action.status_code == 201 and action.json()["state"] == "succeeded", action.content
    with CaptureQueriesContext(connection) as queries:
        hit = client.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY="k-hit")
    assert hit.status_code == 200 and hit.json()["id"] == action.json()["id"], hit.content
    assert hit.json()["replayed"] is True
    (only,) = queries.captured_queries
    assert "core_apitoken" in only["sql"] and "ledger_ledgerentry" in only["sql"]
    # The tool named with spaces around it: the same tool once validated, read as early.
    spaced = {**body, "tool": " update_ticket "}
    with CaptureQueriesContext(connection) as queries:
        again = client.post(path, spaced, format="json", HTTP_IDEMPOTENCY_KEY="k-hit")
    assert again.status_code == 200 and again.json()["id"] == action.json()["id"], again.content
    assert len(queries.captured_queries) == 1


def test_a_bad_token_is_a_401_whatever_the_body(world):
    """The body and the key are peeked at before authentication only to read beside the
    token; what is wrong with them still answers after it."""
    run, _ = _action(world)
    path = f"/api/v1/runs/{run['id']}/actions"
    stranger = Client(HTTP_AUTHORIZATION="Bearer not-a-token")
    for body, headers in [
        ({"tool": "update_ticket", "target": "t", "desired_state": {}}, {"k": "k-1"}),
        ({"tool": "a\x00b", "target": "t", "desired_state": {}}, {"k": "k-2"}),
        ({"tool": "update_ticket"}, {"k": "\x01"}),
        ([1, 2], {"k": "k-3"}),
    ]:
        response = stranger.post(
            path, body, content_type="application/json", HTTP_IDEMPOTENCY_KEY=headers["k"]
        )
        assert response.status_code == 401, (body, response.content)
    # Another tenant's agent, naming this run: its run is not found, whatever it holds.
    other = world.other_agent.client()
    body = {"tool": "update_ticket", "target": "t", "desired_state": {}}
    response = other.post(path, body, format="json", HTTP_IDEMPOTENCY_KEY="k-fast")
    assert response.status_code == 404, response.content
