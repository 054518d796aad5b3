"""A worker process killed with SIGKILL while its tool call is in flight."""

import time
import uuid

import pytest

from runs.models import Action, Attempt

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
