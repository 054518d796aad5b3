"""Runs and replay (docs/design.md): the replay table through the API, force replay, the
reaper, captured inputs."""

import hashlib
import threading
import uuid
from datetime import timedelta

import pytest
import time_machine
from django.core.files.storage import default_storage
from django.db import connections
from django.utils import timezone

from core.models import AuditEvent
from runs.engine import dispatch
from runs.models import Run
from runs.runtime import runs_reap_stale

from ..builders import SETUP
from ..conftest import problem


@pytest.fixture
def w(world):
    world.tool("send_email", prefix="email")
    world.tool("update_crm")
    return world


def finish(w, run, status="error", tools_called=None, **extra):
    body = {"status": status, "tools_called": tools_called, **extra}
    response = w.agent.client().post(f"/api/v1/runs/{run['id']}/finish", body, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def replay(persona, run, tenant=None, **body):
    return persona.client(tenant).post(f"/api/v1/runs/{run['id']}/replay", body, format="json")


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


def test_claim_takes_the_oldest_pending_replay_once(w):
    runs = []
    for _ in range(3):
        run = w.start_run()
        finish(w, run, "error", [])
        runs.append(replay(w.agent, run).json())
    results = []
    barrier = threading.Barrier(5)

    def claim():
        barrier.wait(5)
        results.append(w.agent.client().post("/api/v1/runs/claim"))
        connections.close_all()

    threads = [threading.Thread(target=claim) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    claimed = [r.json()["id"] for r in results if r.status_code == 200]
    assert sorted(claimed) == sorted(r["id"] for r in runs)
    assert sum(r.status_code == 204 for r in results) == 2
    for run_id in claimed:
        assert w.agent.client().get(f"/api/v1/runs/{run_id}").json()["status"] == "running"


def test_stale_runs_are_reaped_once_even_by_two_reapers(w):
    run = w.start_run()
    fresh = w.start_run()
    with time_machine.travel(timezone.now() + timedelta(hours=6, minutes=1)):
        w.agent.client().post(f"/api/v1/runs/{fresh['id']}/heartbeat")
        counts = []
        barrier = threading.Barrier(2)

        def reap():
            barrier.wait(5)
            counts.append(runs_reap_stale(actor=SETUP))
            connections.close_all()

        threads = [threading.Thread(target=reap) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    reaped = Run.objects.get(pk=run["id"])
    assert reaped.status == "error"
    assert reaped.error_message == "No completion record within 6 hours; actual outcome unknown."
    assert AuditEvent.objects.filter(object_id=run["id"], verb="run.error").count() == 1
    assert Run.objects.get(pk=fresh["id"]).status == "running"
    assert sum(counts) >= 1
    assert w.agent.client().get(f"/api/v1/runs/{run['id']}").json()["tools_executed"] is None


# --- one unsettled replay per run; the history is admin's -------------------------------------


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
