"""The replay verdict by the tools' declarations (`runs/replay.py`): reads, and idempotent
calls that went through Takeover, are safe to repeat; an unsafe tool, an idempotent one the
gateway never saw, or a runtime that could not tell, are not. Real HTTP, a real worker."""

import pytest

from core.models import AuditEvent

from ..conftest import problem
from .scenarios import propose_and_wait, target

pytestmark = pytest.mark.worker


def finish(w, run, tools_called, status="error"):
    response = w.agent.client().post(
        f"/api/v1/runs/{run['id']}/finish",
        {"status": status, "tools_called": tools_called, "error_message": "model timeout"},
        format="json",
    )
    assert response.status_code == 200, response.content
    return response.json()


def replay(persona, run, **body):
    return persona.client().post(f"/api/v1/runs/{run['id']}/replay", body, format="json")


def test_a_run_that_only_read_replays_without_force(w):
    run = w.start_run()
    read = propose_and_wait(w, run, "search_tickets", "open", {"status": "open"})
    assert read["state"] == "succeeded"
    finished = finish(w, run, ["search_tickets"])
    assert finished["tools_executed"] == ["search_tickets"]  # it was called: the record says so
    verdict = w.agent.client().get(f"/api/v1/runs/{run['id']}").json()["replay_verdict"]
    assert verdict["allowed"] is True
    assert [s["tool"] for s in verdict["safe_tools"]] == ["search_tickets"]
    assert "declared read_only" in verdict["message"]
    assert replay(w.agent, run).status_code == 201


def test_a_run_that_called_idempotent_tools_replays_without_force(w):
    run = w.start_run()
    for _ in range(2):
        t = target("dave") + "@example.com"
        assert propose_and_wait(w, run, "send_email", t, {"s": 1})["state"] == "succeeded"
    propose_and_wait(w, run, "search_tickets", "open", {"status": "open"})
    finish(w, run, ["send_email", "search_tickets"])
    response = replay(w.agent, run)
    assert response.status_code == 201, response.content
    record = w.admin.client().get("/api/v1/replays").json()["results"][0]
    assert record["forced"] is False and record["tools_at_risk"] == []
    assert {s["tool"]: s["effect"] for s in record["safe_tools"]} == {
        "send_email": "idempotent",
        "search_tickets": "read_only",
    }
    event = AuditEvent.objects.get(verb="run.replay", object_id=response.json()["id"])
    assert {s["tool"] for s in event.after["safe_tools"]} == {"send_email", "search_tickets"}


def test_one_unsafe_tool_among_safe_ones_is_the_only_one_named(w):
    run = w.start_run()
    propose_and_wait(w, run, "send_email", target("erin") + "@example.com", {"s": 1})
    propose_and_wait(w, run, "search_tickets", "open", {"status": "open"})
    propose_and_wait(w, run, "update_ticket", target(), {"status": "open"})
    finish(w, run, ["search_tickets", "send_email", "update_ticket"])
    response = replay(w.agent, run)
    assert response.status_code == 409
    body = problem(response)
    assert body["detail"].startswith(
        "Before failing, this run called update_ticket. A replay may repeat them. "
        "An admin can force it with a reason. (Safe to repeat by declaration: "
    )
    assert "search_tickets is declared read_only: it has no side effect" in body["detail"]
    assert "send_email is declared idempotent" in body["detail"]
    assert body["tools_at_risk"] == ["update_ticket"]
    assert [s["tool"] for s in body["safe_tools"]] == ["search_tickets", "send_email"]


def test_an_idempotent_tool_the_gateway_never_saw_stays_at_risk(w):
    """Its calls carried no key Takeover knows of, so its dedupe protects nothing."""
    run = w.start_run()
    finish(w, run, ["send_email", "search_tickets"])
    response = replay(w.agent, run)
    assert response.status_code == 409
    detail = problem(response)["detail"]
    assert detail.startswith("Before failing, this run called send_email. A replay may")
    assert "search_tickets is declared read_only" in detail


def test_all_safe_but_the_runtime_could_not_tell_still_needs_force(w):
    run = w.start_run()
    propose_and_wait(w, run, "search_tickets", "open", {"status": "open"})
    finish(w, run, None)
    response = replay(w.agent, run)
    assert response.status_code == 409
    assert (
        "whether it called any other tool could not be established" in (problem(response)["detail"])
    )
    assert replay(w.admin, run, force=True, reason="reads only").status_code == 201


def test_all_unsafe_keeps_the_exact_sentence(w):
    run = w.start_run()
    propose_and_wait(w, run, "update_ticket", target(), {"status": "open"})
    finish(w, run, ["update_ticket"])
    assert problem(replay(w.agent, run))["detail"] == (
        "Before failing, this run called update_ticket. A replay may repeat them. "
        "An admin can force it with a reason."
    )


def test_the_verdict_follows_the_declaration_in_force(w):
    """A replay sends now, so the declaration that counts is today's: re-declaring the
    outbox unsafe (say, it was caught lying) puts it back at risk."""
    run = w.start_run()
    propose_and_wait(w, run, "send_email", target("f") + "@example.com", {"s": 1})
    finish(w, run, ["send_email"])
    assert w.agent.client().get(f"/api/v1/runs/{run['id']}").json()["replay_verdict"]["allowed"]
    w.admin.client().post(
        "/api/v1/tools/send_email/declaration",
        {"effect": "unsafe", "reason": "it sent duplicates last week"},
        format="json",
    )
    assert problem(replay(w.agent, run))["detail"] == (
        "Before failing, this run called send_email. A replay may repeat them. "
        "An admin can force it with a reason."
    )
