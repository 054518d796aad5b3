"""One-shot approvals: consumed exactly once, at claim, under real concurrency; refused once
revoked or expired, through the real API and worker (docs/design.md, invariant 7)."""

import uuid
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from approvals.models import Approval, ApprovalState
from approvals.services import approval_consume, approval_revoke
from approvals.states import BlockReason
from core.errors import StateConflict
from tests.builders import SETUP, race

pytestmark = pytest.mark.worker


@pytest.fixture
def w(world, worker):
    world.tool("update_ticket")
    return world


def pre_grant(w, target, desired, ttl_seconds=600):
    response = w.approver.client().post(
        "/api/v1/approvals",
        {
            "principal": "agent",
            "tool": "update_ticket",
            "target": target,
            "desired_state": desired,
            "ttl_seconds": ttl_seconds,
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    return response.json()["id"]


def test_twenty_actions_racing_for_one_approval_exactly_one_consumes_it(w):
    run = w.start_run()
    target, desired = f"ticket:{uuid.uuid4().hex[:8]}", {"status": "refunded"}
    approval = (
        w.approver.client()
        .post(
            "/api/v1/approvals",
            {
                "principal": "agent",
                "tool": "update_ticket",
                "target": target,
                "desired_state": desired,
                "ttl_seconds": 600,
            },
            format="json",
        )
        .json()["id"]
    )
    responses = race(
        20,
        lambda i: w.propose(
            run["id"],
            f"evt-{uuid.uuid4().hex}",
            tool="update_ticket",
            target=target,
            desired_state=desired,
            approval_id=approval,
        ),
    )
    assert all(r.status_code == 201 for r in responses)
    finals = [w.wait_action(r.json()["id"]) for r in responses]
    states = sorted(a["state"] for a in finals)
    assert states == ["blocked"] * 19 + ["succeeded"]
    assert {a["block_reason"] for a in finals if a["state"] == "blocked"} == {"approval_consumed"}
    winner = next(a for a in finals if a["state"] == "succeeded")
    consumed = w.approver.client().get(f"/api/v1/approvals/{approval}").json()
    assert consumed["consumed_by_action"] == winner["id"]
    assert w.downstream.mutations(target) == 1


def test_a_revoked_approval_blocks_the_action_that_names_it(w):
    run = w.start_run()
    target, desired = f"ticket:{uuid.uuid4().hex[:8]}", {"status": "refunded"}
    approval = pre_grant(w, target, desired)
    revoked = w.approver.client().post(
        f"/api/v1/approvals/{approval}/revoke", {"reason": "wrong customer"}, format="json"
    )
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    proposed = w.propose(
        run["id"],
        f"evt-{uuid.uuid4().hex}",
        tool="update_ticket",
        target=target,
        desired_state=desired,
        approval_id=approval,
    )
    body = proposed.json()
    assert (body["state"], body["block_reason"]) == ("blocked", BlockReason.APPROVAL_REVOKED)
    assert w.downstream.mutations(target) == 0


def test_an_approval_is_consumed_once_and_never_after_it_expires_or_is_revoked(w):
    target, desired = f"ticket:{uuid.uuid4().hex[:8]}", {"status": "refunded"}
    approval = Approval.objects.get(pk=pre_grant(w, target, desired, ttl_seconds=60))
    binding = {
        "principal": w.principal,
        "tool": approval.tool,
        "target": target,
        "desired_state": desired,
        "expected_version": None,
    }
    with time_machine.travel(timezone.now() + timedelta(seconds=61)):
        assert approval_consume(approval.pk, action_id=uuid.uuid4(), actor=SETUP, **binding) == (
            BlockReason.APPROVAL_EXPIRED
        )
    first, second = uuid.uuid4(), uuid.uuid4()
    assert approval_consume(approval.pk, action_id=first, actor=SETUP, **binding) is None
    assert approval_consume(approval.pk, action_id=second, actor=SETUP, **binding) == (
        BlockReason.APPROVAL_CONSUMED
    )
    approval.refresh_from_db()
    assert (approval.state, approval.consumed_by_action) == (ApprovalState.CONSUMED, first)
    with pytest.raises(StateConflict):
        approval_revoke(approval, actor=SETUP, reason="too late")
