"""A person's decisions (`runs/decisions.py`) through the API: acknowledge a blocked action,
resolve on a fresh read, re-check (a person reads, never sends), grant a waiting request, and
a request nobody decided expires and fails closed. Real services, real downstream over HTTP.
"""

import pytest

from core.models import AuditEvent, Tool
from runs.models import Action
from tests.builders import make_awaiting, make_needs_human, operator_actor

from ..conftest import problem
from .scenarios import key, reads, target, unknown_out_of_reach


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


@pytest.mark.worker
def test_approval_requiring_tool_waits_for_a_grant(w):
    run = w.start_run()
    t = target()
    response = w.propose(
        run["id"], key(), tool="close_ticket", target=t, desired_state={"status": "closed"}
    )
    assert response.status_code == 201
    action = response.json()
    assert action["state"] == "awaiting_approval"
    pending = w.approver.client().get("/api/v1/approval-requests?state=pending").json()["results"]
    request = next(r for r in pending if r["action"] == action["id"])
    assert request["target"] == t and request["tool"] == "close_ticket"
    assert w.downstream.mutations(t) == 0
    granted = w.approver.client().post(
        f"/api/v1/approval-requests/{request['id']}/grant", {"ttl_seconds": 300}, format="json"
    )
    assert granted.status_code == 201
    assert granted.json()["granted_by"] == {"kind": "operator", "name": w.approver.username}
    done = w.wait_action(action["id"])
    assert done["state"] == "succeeded"
    assert w.downstream.mutations(t) == 1
    # A decided request cannot be granted again.
    again = w.approver.client().post(f"/api/v1/approval-requests/{request['id']}/grant")
    assert again.status_code == 409


@pytest.mark.worker
def test_a_person_rechecking_reads_but_never_sends(w, billing_server):
    billing, tool, action_id = unknown_out_of_reach(w, billing_server)
    Tool.objects.filter(pk=tool.pk).update(effect="idempotent")
    response = w.oncall.client().post(f"/api/v1/actions/{action_id}/reconcile", {})
    assert response.status_code == 200
    action = response.json()
    assert len(billing.posts) == 1  # the first send only
    assert reads(action)[-1] == ("state", "missing")
    # The resend is still due, so the person's read leaves it unknown for it.
    assert action["state"] == "unknown"
