"""Dispatch (`runs/engine/dispatch.py`) end to end: HTTP API → real Celery worker → demo
downstream, whose own counters judge: the one safe retry of a request that never left, a
request that never leaves, a stale expected_version."""

import time

import pytest

from ..scenarios import key, target

pytestmark = pytest.mark.worker


def test_connection_refused_before_send_gets_one_safe_retry(w):
    run = w.start_run()
    t, k = target(), key()
    # Refused for 2.5 s: the first attempt (picked up well within that) cannot connect; the
    # retry comes SAFE_RETRY_DELAY_SECONDS (3 s in tests) later, after the window.
    w.downstream.fault("refuse", seconds=2.5)
    response = w.propose(
        run["id"], k, tool="update_ticket", target=t, desired_state={"status": "open"}
    )
    action = w.wait_action(response.json()["id"])
    assert action["state"] == "succeeded"
    assert [a["outcome"] for a in action["attempts"]] == ["not_sent", "applied"]
    assert w.downstream.mutations(t) == 1


def test_a_request_that_never_leaves_fails_not_sent_after_exactly_one_retry(w):
    w.tool("nowhere", base_url="http://127.0.0.1:9/tickets")  # nothing listens on port 9
    run = w.start_run()
    response = w.propose(
        run["id"], key(), tool="nowhere", target=target(), desired_state={"status": "open"}
    )
    action = w.wait_action(response.json()["id"])
    assert action["state"] == "failed"
    assert action["failure_reason"] == "not_sent"
    assert [a["outcome"] for a in action["attempts"]] == ["not_sent", "not_sent"]


def test_stale_expected_version_fails_with_version_conflict(w):
    run = w.start_run()
    t = target()
    w.downstream.seed(t, {"status": "open"}, version=5)
    response = w.propose(
        run["id"],
        key(),
        tool="update_ticket",
        target=t,
        desired_state={"status": "refunded"},
        expected_version=4,
    )
    action = w.wait_action(response.json()["id"])
    assert action["state"] == "failed"
    assert action["failure_reason"] == "version_conflict"
    assert w.downstream.mutations(t) == 0


def test_a_worker_starved_until_its_lease_runs_out_sends_nothing(world):
    """The sweeper writes a lease off when it runs out; a call started that late could land
    after reconciliation decided. A worker that finds its lease nearly gone sends nothing and
    leaves the action to the sweeper, as if it had been lost."""
    from datetime import timedelta

    from django.utils import timezone

    from runs.engine.dispatch import dispatch_leased
    from runs.engine.leases import action_lease, expire_leases
    from runs.models import Action

    world.tool("update_ticket")
    run = world.start_run()
    t, k = target(), key()
    response = world.propose(
        run["id"], k, tool="update_ticket", target=t, desired_state={"status": "open"}
    )
    action, attempt = action_lease(response.json()["id"])
    action.lease_expires_at = timezone.now() + timedelta(seconds=0.5)
    Action.objects.filter(pk=action.pk).update(lease_expires_at=action.lease_expires_at)

    dispatch_leased(action, attempt)
    assert Action.objects.get(pk=action.pk).state == "dispatching"
    assert world.downstream.received(k) == 0

    time.sleep(0.6)
    assert expire_leases() == [action.pk]
    assert Action.objects.get(pk=action.pk).state == "unknown"
