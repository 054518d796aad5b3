"""Runs and replay (`runs/replay.py`, docs/design.md "Runs and replay"): the replay table
through the API, resolve feeds replay, force replay and four eyes, captured inputs, and one
unsettled replay per run."""

import hashlib
import threading
import uuid

import pytest
from django.core.files.storage import default_storage
from django.db import connections

from core.models import AuditEvent
from runs.engine import dispatch
from runs.models import Run
from tests.builders import agent_of, make_needs_human, operator_actor, start_run

from ..conftest import problem
from .scenarios import finish, replay


@pytest.fixture
def w(world):
    world.tool("send_email", prefix="email")
    world.tool("update_crm")
    return world


def test_a_succeeded_run_is_not_replayed(w):
    run = w.start_run()
    finish(w, run, "success", [])
    response = replay(w.agent, run)
    assert response.status_code == 409
    assert problem(response)["type"] == "/problems/replay-refused"
    assert problem(response)["detail"] == (
        "This run already succeeded; its side effects happened. Replay refused."
    )


def test_an_unsettled_run_is_not_replayed_even_by_force(w):
    run = w.start_run()
    for persona, body in [(w.agent, {}), (w.admin, {"force": True, "reason": "try"})]:
        response = replay(persona, run, **body)
        assert response.status_code == 409
        assert problem(response)["detail"] == (
            "This run has not settled yet; wait until it finishes."
        )


@pytest.mark.parametrize("status", ["error", "cancelled"])
def test_a_run_that_called_no_tool_is_replayed(w, status):
    run = w.start_run(config={"ticket": 42}, session_id="s-1")
    finish(w, run, status, [], error_message="model timeout")
    response = replay(w.agent, run)
    assert response.status_code == 201
    new = response.json()
    assert new["status"] == "pending"
    assert new["replay_of"] == run["id"]
    assert new["config"] == {"ticket": 42}
    assert new["session_id"] != "s-1"
    assert new["id"] != run["id"]
    # History is not rewritten.
    original = w.agent.client().get(f"/api/v1/runs/{run['id']}").json()
    assert original["status"] == status and original["tools_executed"] == []


def test_a_run_that_called_tools_is_refused_naming_them(w):
    run = w.start_run()
    finish(w, run, "error", ["update_crm", "send_email"])
    response = replay(w.oncall, run)
    assert response.status_code == 409
    assert problem(response)["detail"] == (
        "Before failing, this run called send_email, update_crm. A replay may repeat them. "
        "An admin can force it with a reason."
    )


def test_tools_the_gateway_saw_count_even_when_the_runtime_says_none(w, downstream):
    run = w.start_run()
    action = w.propose(
        run["id"],
        f"k-{uuid.uuid4().hex}",
        tool="update_crm",
        target="c:1",
        desired_state={"stage": "won"},
    ).json()
    dispatch.action_dispatch(action["id"])  # the real dispatch, in this process
    finish(w, run, "error", [])
    assert w.agent.client().get(f"/api/v1/runs/{run['id']}").json()["tools_executed"] == [
        "update_crm"
    ]
    response = replay(w.agent, run)
    assert response.status_code == 409
    assert "this run called update_crm." in problem(response)["detail"]


def test_a_run_whose_tool_calls_are_unknown_is_refused(w):
    run = w.start_run()
    finish(w, run, "error", None)
    assert w.agent.client().get(f"/api/v1/runs/{run['id']}").json()["tools_executed"] is None
    response = replay(w.agent, run)
    assert response.status_code == 409
    assert problem(response)["detail"] == (
        "Whether this run called any tool before failing could not be established; a replay "
        "may repeat side effects. An admin can force it with a reason."
    )


def test_force_is_admin_only_needs_a_reason_and_is_audited(w):
    run = w.start_run()
    finish(w, run, "error", ["send_email"])
    assert replay(w.oncall, run, force=True, reason="x").status_code == 403
    assert replay(w.agent, run, force=True, reason="x").status_code == 403
    no_reason = replay(w.admin, run, force=True, reason="  ")
    assert no_reason.status_code == 400
    assert "reason" in problem(no_reason)["errors"]
    assert Run.objects.filter(replay_of_id=run["id"]).count() == 0

    forced = replay(w.admin, run, force=True, reason="customer confirmed nothing arrived")
    assert forced.status_code == 201
    event = AuditEvent.objects.get(verb="force_replay", object_id=run["id"])
    assert event.actor == {"kind": "operator", "name": w.admin.username}
    assert event.reason == "customer confirmed nothing arrived"
    assert event.after["tools_at_risk"] == ["send_email"]
    history = w.admin.client().get("/api/v1/replays").json()["results"]
    assert history[0] == {
        **history[0],
        "original_run": run["id"],
        "new_run": forced.json()["id"],
        "actor": {"kind": "operator", "name": w.admin.username},
        "forced": True,
        "reason": "customer confirmed nothing arrived",
        "tools_at_risk": ["send_email"],
    }


def test_input_file_is_copied_and_a_missing_one_is_410_even_with_force(w):
    content = b"order_id,amount\n1001,25.00\n"
    response = w.agent.client().post(
        "/api/v1/runs",
        {"trigger": "webhook", "config": '{"source": "shop"}', "input_file": _upload(content)},
        format="multipart",
    )
    assert response.status_code == 201, response.content
    run = response.json()
    assert run["input_file"] == {
        "name": "orders.csv",
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
    }
    assert run["config"] == {"source": "shop"}
    stored = Run.objects.get(pk=run["id"]).input_file
    assert default_storage.open(stored.name).read() == content  # a copy, not a pointer
    finish(w, run, "error", [])

    default_storage.delete(stored.name)
    for persona, body in [(w.agent, {}), (w.admin, {"force": True, "reason": "r"})]:
        gone = replay(persona, run, **body)
        assert gone.status_code == 410
        assert problem(gone)["type"] == "/problems/input-gone"


def test_replay_carries_the_same_input_file(w):
    response = w.agent.client().post(
        "/api/v1/runs", {"trigger": "api", "input_file": _upload(b"abc")}, format="multipart"
    )
    run = response.json()
    finish(w, run, "error", [])
    new = replay(w.agent, run).json()
    assert new["input_file"] == run["input_file"]


def _upload(content):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile("orders.csv", content, content_type="text/csv")


def test_concurrent_force_replays_create_exactly_one(w):
    run = w.start_run()
    finish(w, run, "error", ["send_email"])
    barrier = threading.Barrier(20)
    answers = []

    def force():
        barrier.wait()
        try:
            answers.append(replay(w.admin, run, force=True, reason="customer asked"))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=force) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(a.status_code for a in answers)
    assert codes == [201] + [409] * 19, codes
    winner = next(a.json() for a in answers if a.status_code == 201)
    for loser in (a for a in answers if a.status_code == 409):
        body = problem(loser)
        assert body["type"] == "/problems/replay-refused"
        assert body["unsettled_replay"] == winner["id"]
    assert Run.objects.filter(replay_of_id=run["id"]).count() == 1
    assert AuditEvent.objects.filter(verb="force_replay", object_id=run["id"]).count() == 1


def test_a_second_replay_waits_until_the_first_settles(w):
    run = w.start_run()
    finish(w, run, "error", [])
    first = replay(w.agent, run)
    assert first.status_code == 201
    for persona, body in [(w.agent, {}), (w.admin, {"force": True, "reason": "again"})]:
        again = replay(persona, run, **body)
        assert again.status_code == 409
        assert first.json()["id"] in problem(again)["detail"]
    # The replay is claimed and fails cleanly; now the original may be replayed again.
    claimed = w.agent.client().post("/api/v1/runs/claim")
    assert claimed.json()["id"] == first.json()["id"]
    finish(w, claimed.json(), "error", [])
    assert replay(w.agent, run).status_code == 201


@pytest.mark.parametrize("who", ["agent", "approver", "oncall"])
def test_the_replay_history_is_admin_only(w, who):
    assert getattr(w, who).client().get("/api/v1/replays").status_code == 403
    assert w.admin.client().get("/api/v1/replays").status_code == 200


def test_resolving_the_only_call_as_failed_makes_the_replay_safe(world):
    from runs import runtime

    run = start_run(world)
    action = make_needs_human(world, run=run)
    runtime.run_finish(run, status="error", tools_called=["update_ticket"], actor=agent_of(world))
    admin = world.admin.client()
    refused = admin.post(f"/api/v1/runs/{run.pk}/replay", {}, format="json")
    assert refused.status_code == 409
    assert problem(refused)["type"] == "/problems/replay-refused"
    verdict = admin.get(f"/api/v1/runs/{run.pk}").json()["replay_verdict"]
    assert verdict["allowed"] is False and verdict["tools_at_risk"] == ["update_ticket"]

    resolved = world.oncall.client().post(
        f"/api/v1/actions/{action.pk}/resolve",
        {"outcome": "failed", "reason": "ticket still open: never applied"},
        format="json",
    )
    assert resolved.status_code == 200
    verdict = admin.get(f"/api/v1/runs/{run.pk}").json()["replay_verdict"]
    assert verdict["allowed"] is True
    assert verdict["tools_at_risk"] == [] and verdict["not_applied"] == ["update_ticket"]
    assert "resolved every call of update_ticket" in verdict["message"]
    replay = admin.post(f"/api/v1/runs/{run.pk}/replay", {}, format="json")
    assert replay.status_code == 201, replay.content


def test_a_call_resolved_as_succeeded_stays_at_risk(world):
    from runs import decisions, runtime

    run = start_run(world)
    first = make_needs_human(world, run=run)
    second = make_needs_human(world, run=run)
    runtime.run_finish(run, status="error", tools_called=None, actor=agent_of(world))
    oncall = operator_actor(world.oncall)
    decisions.action_resolve(first, outcome="failed", reason="not applied", actor=oncall)
    decisions.action_resolve(second, outcome="succeeded", reason="applied", actor=oncall)
    verdict = world.admin.client().get(f"/api/v1/runs/{run.pk}").json()["replay_verdict"]
    assert verdict["allowed"] is False
    assert verdict["tools_at_risk"] == ["update_ticket"] and verdict["not_applied"] == []


def test_four_eyes_force_replay_through_the_api(world):
    from runs.models import Run
    from tests.builders import add_operator, make_failed_run_with_tools

    admin = world.admin.client()
    assert admin.get("/api/v1/settings").json() == {
        "four_eyes_force_replay": False,
        "approval_sla_seconds": 0,
        "unknown_alert_seconds": 900,  # the notification thresholds' defaults
        "approval_expiry_warning_seconds": 3600,
    }
    assert (
        world.oncall.client()
        .post("/api/v1/settings", {"four_eyes_force_replay": True}, format="json")
        .status_code
        == 403
    )
    bad = admin.post("/api/v1/settings", {"four_eyes_force_replay": "yes"}, format="json")
    assert bad.status_code == 400 and "four_eyes_force_replay" in problem(bad)["errors"]
    on = admin.post("/api/v1/settings", {"four_eyes_force_replay": True}, format="json")
    assert on.json() == {
        "four_eyes_force_replay": True,
        "approval_sla_seconds": 0,
        "unknown_alert_seconds": 900,
        "approval_expiry_warning_seconds": 3600,
    }

    run = make_failed_run_with_tools(world)
    asked = admin.post(
        f"/api/v1/runs/{run.pk}/replay", {"force": True, "reason": "guarded"}, format="json"
    )
    assert asked.status_code == 202, asked.content
    request_id = asked.json()["id"]
    assert asked.json()["state"] == "pending" and asked.json()["tools_at_risk"] == ["update_ticket"]
    again = admin.post(
        f"/api/v1/runs/{run.pk}/replay", {"force": True, "reason": "again"}, format="json"
    )
    assert again.status_code == 409 and "already waits" in problem(again)["detail"]
    own = admin.post(f"/api/v1/force-replay-requests/{request_id}/confirm")
    assert own.status_code == 409 and "different admin" in problem(own)["detail"]
    assert not Run.objects.filter(replay_of=run).exists()

    second = add_operator(world, "admin2", "admin").client()
    pending = second.get("/api/v1/force-replay-requests?state=pending").json()["results"]
    assert [r["id"] for r in pending] == [request_id]
    confirmed = second.post(f"/api/v1/force-replay-requests/{request_id}/confirm")
    assert confirmed.status_code == 201, confirmed.content
    assert confirmed.json()["replay_of"] == str(run.pk)
    assert (
        AuditEvent.objects.filter(verb="force_replay.confirm", object_id=str(run.pk)).count() == 1
    )
    # The confirmed replay has not settled: not even a new request for a second admin.
    again = admin.post(
        f"/api/v1/runs/{run.pk}/replay", {"force": True, "reason": "once more"}, format="json"
    )
    assert again.status_code == 409
    assert problem(again)["unsettled_replay"] == confirmed.json()["id"]
    assert (
        AuditEvent.objects.filter(verb="force_replay.request", object_id=str(run.pk)).count() == 1
    )
    done = second.post(f"/api/v1/force-replay-requests/{request_id}/reject")
    assert done.status_code == 409
