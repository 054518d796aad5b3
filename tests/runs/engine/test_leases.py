"""Leases (`runs/engine/leases.py`): a worker killed with SIGKILL while its tool call is in
flight, and a resend whose worker was lost, come back through their leases as unknowns to
reconcile, never as queued."""

import time
import uuid

import pytest

from core.models import Tool
from runs.models import Action, Attempt

from ...builders import SETUP
from ..scenarios import unknown_out_of_reach

pytestmark = pytest.mark.worker


def test_worker_killed_mid_call_is_unknown_after_the_lease_then_reconciled(world, worker):
    world.tool("update_ticket")
    run = world.start_run()
    target, key = f"ticket:{uuid.uuid4().hex[:8]}", f"evt-{uuid.uuid4().hex}"
    # The tool commits, then takes far longer than the worker will live.
    world.downstream.fault("slow_after_commit", target=target, seconds=20)
    response = world.propose(
        run["id"],
        key,
        tool="update_ticket",
        target=target,
        desired_state={"status": "refunded"},
        expected_version=0,
    )
    action_id = response.json()["id"]
    deadline = time.monotonic() + 20
    while world.downstream.mutations(target) == 0:
        assert time.monotonic() < deadline, "the call never reached the tool"
        time.sleep(0.05)
    assert Action.objects.get(pk=action_id).state == "dispatching"

    worker.kill()  # SIGKILL the whole worker (and its embedded beat) mid-call
    action = Action.objects.get(pk=action_id)
    assert action.state == "dispatching"  # nothing moved it: the worker is simply gone
    assert Attempt.objects.get(action_id=action_id).finished_at is None

    worker.restart()  # a new worker and beat; the sweeper finds the expired lease
    final = world.wait_action(action_id, until={"succeeded", "needs_human", "failed"}, timeout=60)
    assert final["state"] == "succeeded"
    assert final["resolution"] == "reconciled"
    assert len(final["attempts"]) == 1
    assert final["attempts"][0]["outcome"] == "unknown"
    assert final["reconciliations"][-1]["verdict"] == "match"
    assert world.downstream.received(key) == 1
    assert world.downstream.mutations(target) == 1


def test_a_resend_whose_worker_was_lost_comes_back_through_its_lease(w, billing_server):
    """A resend is a dispatch: claimed under a lease, so a worker lost mid-call is swept back
    to unknown (its attempt closed as unknown), and the next resend is the next attempt."""
    from datetime import timedelta

    from django.utils import timezone

    from runs.engine.reconcile import action_resend_start

    billing, tool, action_id = unknown_out_of_reach(w, billing_server)
    Tool.objects.filter(pk=tool.pk).update(effect="idempotent")
    claimed = action_resend_start(
        Action.objects.select_related("tool").get(pk=action_id), actor=SETUP
    )
    assert claimed.number == 2
    # The worker holding it dies before the call: its lease runs out; the worker's sweeper
    # (beat, every second in the tests) takes it from here.
    Action.objects.filter(pk=action_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    action = w.wait_action(action_id, until={"succeeded", "needs_human", "failed"}, timeout=40)
    assert action["state"] == "succeeded"
    assert [(a["number"], a["kind"], a["outcome"]) for a in action["attempts"]] == [
        (1, "send", "unknown"),
        (2, "resend", "unknown"),  # never sent: "dispatch lease expired"
        (3, "resend", "applied"),
    ]
    assert "lease expired" in action["attempts"][1]["detail"]
    assert len(billing.posts) == 2  # the first send and attempt 3
