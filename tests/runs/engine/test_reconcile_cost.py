"""What an unknown outcome costs in database round trips when the dispatching thread reads
it at once (`worker.dispatch_then_read`): the settle that records the unknown and leases its
read, then the settle that records the read and moves the action, one statement each. The
tool is the demo downstream over real HTTP, which applies the effect and drops the answer;
every query of the job runs in this thread, so every one is counted."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runs.engine.leases import lease_queued
from runs.engine.worker import dispatch_then_read
from runs.models import Action, Reconciliation

from ...builders import propose, start_run, target_name, tool


def test_an_unknown_read_at_once_costs_two_round_trips(world):
    t, target = tool(world), target_name()
    world.downstream.fault("drop_after_commit", prefix="tickets", target=target)
    action = propose(world, start_run(world), t, target, {"status": "closed"}, None)
    leased = lease_queued(1, only=[action.pk])
    if not leased:
        pytest.skip("a running worker took the action first")
    with CaptureQueriesContext(connection) as queries:
        dispatch_then_read(*leased[0])
    done = Action.objects.get(pk=action.pk)
    assert (done.state, done.resolution) == ("succeeded", "reconciled")
    assert [r.verdict for r in Reconciliation.objects.filter(action=done)] == ["match"]
    assert world.downstream.mutations(target) == 1
    assert len(queries) <= 2, [q["sql"][:120] for q in queries]
