"""Issue 12's decisions through the API: acknowledge a blocked action, resolve feeds replay,
and the agent's optional `reason` on propose. Real services, real downstream over HTTP."""

import uuid

from core.models import AuditEvent
from runs.models import Action
from tests.builders import (
    agent_of,
    make_awaiting,
    make_needs_human,
    operator_actor,
    start_run,
)

from ..conftest import problem


def _blocked(world):
    from runs import decisions

    action = make_awaiting(world)
    decisions.approval_request_deny(
        action.approval_request, reason="no", actor=operator_actor(world.approver)
    )
    return Action.objects.get(pk=action.pk)


def test_acknowledged_blocked_action_leaves_the_queue_and_stays_findable(world):
    action = _blocked(world)
    oncall = world.oncall.client()
    queue = oncall.get("/api/v1/queue?state=blocked").json()["results"]
    assert [a["id"] for a in queue] == [str(action.pk)]

    # wrong role first: an approver cannot acknowledge
    url = f"/api/v1/actions/{action.pk}/acknowledge"
    assert world.approver.client().post(url).status_code == 403
    response = oncall.post(
        f"/api/v1/actions/{action.pk}/acknowledge", {"note": "agent told"}, format="json"
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["state"] == "blocked" and body["acknowledged_at"]
    assert body["acknowledged_by"] == {"kind": "operator", "name": world.oncall.username}
    assert body["acknowledge_note"] == "agent told"
    assert oncall.get("/api/v1/queue?state=blocked").json()["results"] == []
    assert oncall.get(f"/api/v1/actions/{action.pk}").json()["acknowledged_at"]
    event = AuditEvent.objects.get(object_id=str(action.pk), verb="action.acknowledge")
    assert event.reason == "agent told" and event.actor_name == world.oncall.username

    again = oncall.post(f"/api/v1/actions/{action.pk}/acknowledge")
    assert again.status_code == 409
    assert problem(again)["type"] == "/problems/state-conflict"
    events = AuditEvent.objects.filter(verb="action.acknowledge", object_id=str(action.pk))
    assert events.count() == 1


def test_only_a_blocked_action_can_be_acknowledged(world):
    action = make_needs_human(world)
    response = world.oncall.client().post(f"/api/v1/actions/{action.pk}/acknowledge")
    assert response.status_code == 409
    assert "Only a blocked action" in problem(response)["detail"]
    assert Action.objects.get(pk=action.pk).acknowledged_at is None


def test_bad_acknowledge_note_is_a_400_naming_the_field(world):
    action = _blocked(world)
    response = world.oncall.client().post(
        f"/api/v1/actions/{action.pk}/acknowledge", {"note": 5}, format="json"
    )
    assert response.status_code == 400
    assert "note" in problem(response)["errors"]
    assert Action.objects.get(pk=action.pk).acknowledged_at is None


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


def test_propose_keeps_the_agents_reason_outside_the_fingerprint(world):
    world.tool("update_ticket")
    run = world.start_run()
    key = f"k-{uuid.uuid4().hex}"
    body = {"tool": "update_ticket", "target": "T-1", "desired_state": {"status": "closed"}}
    first = world.propose(run["id"], key, reason="Customer asked to close it", **body)
    assert first.status_code == 201, first.content
    assert first.json()["reason"] == "Customer asked to close it"
    again = world.propose(run["id"], key, reason="Reworded", **body)
    assert again.status_code == 200 and again.json()["replayed"] is True
    assert again.json()["reason"] == "Customer asked to close it"
    assert (
        world.propose(run["id"], f"k-{uuid.uuid4().hex}", reason=None, **body).json()["reason"]
        is None
    )
    bad = world.propose(run["id"], f"k-{uuid.uuid4().hex}", reason=["x"], **body)
    assert bad.status_code == 400 and "reason" in problem(bad)["errors"]
    schema = world.admin.client().get("/api/v1/schema/?format=json").json()
    propose_in = schema["components"]["schemas"]["ActionProposeInRequest"]["properties"]
    assert "reason" in propose_in


def test_resolve_on_a_stale_read_is_refused_and_the_read_is_recorded(world, settings):
    import time

    from runs import decisions

    action = make_needs_human(world)
    oncall = world.oncall.client()
    url = f"/api/v1/actions/{action.pk}/resolve"
    settings.RESOLVE_READ_MAX_AGE_SECONDS = 0.5
    time.sleep(0.6)
    stale = oncall.post(url, {"outcome": "failed", "reason": "still open"}, format="json")
    assert stale.status_code == 409
    assert "Re-check now" in problem(stale)["detail"]
    assert Action.objects.get(pk=action.pk).state == "needs_human"

    settings.RESOLVE_READ_MAX_AGE_SECONDS = 60
    old_read = action.reconciliations.order_by("at").last()
    decisions.action_recheck(action.pk, actor=operator_actor(world.oncall))
    fresh = action.reconciliations.order_by("at", "id").last()
    assert fresh.pk != old_read.pk
    behind = oncall.post(
        url, {"outcome": "failed", "reason": "x", "based_on_read": old_read.pk}, format="json"
    )
    assert behind.status_code == 409 and "newer read" in problem(behind)["detail"]
    bad = oncall.post(
        url, {"outcome": "failed", "reason": "x", "based_on_read": "7"}, format="json"
    )
    assert bad.status_code == 400 and "based_on_read" in problem(bad)["errors"]

    done = oncall.post(
        url, {"outcome": "failed", "reason": "still open", "based_on_read": fresh.pk}, format="json"
    )
    assert done.status_code == 200, done.content
    assert done.json()["resolved_on_read"] == fresh.pk
    event = AuditEvent.objects.get(object_id=str(action.pk), verb="action.failed")
    assert event.after["resolved_on_read"] == fresh.pk


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


def test_every_idempotency_conflict_is_recorded_with_both_intents(world):
    world.tool("update_ticket")
    run = world.start_run()
    key = f"k-{uuid.uuid4().hex}"
    first = world.propose(
        run["id"], key, tool="update_ticket", target="T-1", desired_state={"status": "closed"}
    )
    assert first.status_code == 201
    clash = world.propose(
        run["id"], key, tool="update_ticket", target="T-2", desired_state={"status": "closed"}
    )
    assert clash.status_code == 422
    assert problem(clash)["type"] == "/problems/idempotency-conflict"
    listed = world.oncall.client().get("/api/v1/idempotency-conflicts").json()["results"]
    assert len(listed) == 1
    assert listed[0]["key"] == key and listed[0]["existing_action"] == first.json()["id"]
    assert listed[0]["attempted"]["target"] == "T-2"
    assert AuditEvent.objects.filter(verb="idempotency.conflict", tenant=world.tenant).count() == 1
    assert Action.objects.filter(tenant=world.tenant).count() == 1  # nothing else written
    outsider = world.outsider.client().get("/api/v1/idempotency-conflicts").json()["results"]
    assert outsider == []


def test_approval_sla_is_a_tenant_setting_and_an_expiring_request_fails_closed(world):
    from runs import decisions
    from runs.models import Action

    admin = world.admin.client()
    bad = admin.post("/api/v1/settings", {"approval_sla_seconds": -1}, format="json")
    assert bad.status_code == 400 and "approval_sla_seconds" in problem(bad)["errors"]
    ok = admin.post("/api/v1/settings", {"approval_sla_seconds": 900}, format="json")
    assert ok.json()["approval_sla_seconds"] == 900
    assert AuditEvent.objects.filter(verb="tenant.settings", tenant=world.tenant).exists()

    action = make_awaiting(world)
    request = action.approval_request
    type(request).objects.filter(pk=request.pk).update(expires_at=request.created_at)
    decisions.approval_requests_expire(actor=operator_actor(world.admin))
    blocked = Action.objects.get(pk=action.pk)
    assert (blocked.state, blocked.block_reason) == ("blocked", "approval_expired")
    seen = world.agent.client().get(f"/api/v1/actions/{action.pk}").json()
    assert seen["block_reason"] == "approval_expired"
