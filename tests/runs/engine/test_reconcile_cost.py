"""What an unknown outcome costs in database round trips. Read at once by the thread that
dispatched it (`worker.dispatch_then_read`): the settle that records the unknown and leases
its read, then the settle that records the read and moves the action, one statement each.
Found due by a worker (`reconcile.action_reconcile`): its lease, then the same settle. The
tool is the demo downstream over real HTTP, which applies the effect and drops the answer;
every query runs in this thread, so every one is counted."""

from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from runs.engine.dispatch import dispatch_leased
from runs.engine.leases import lease_queued
from runs.engine.reconcile import action_reconcile
from runs.engine.worker import dispatch_then_read
from runs.models import Action, Reconciliation

from ...builders import propose, start_run, target_name, tool


def test_an_unknown_read_at_once_costs_two_round_trips(world):
    t, target = tool(world), target_name()
    world.downstream.fault("drop_after_commit", prefix="tickets", target=target)
    run = start_run(world)
    with transaction.atomic():  # leased before any running worker can see it queued
        action = propose(world, run, t, target, {"status": "closed"}, None)
        leased = lease_queued(1, only=[action.pk])
    with CaptureQueriesContext(connection) as queries:
        dispatch_then_read(*leased[0])
    done = Action.objects.get(pk=action.pk)
    assert (done.state, done.resolution) == ("succeeded", "reconciled")
    assert [r.verdict for r in Reconciliation.objects.filter(action=done)] == ["match"]
    assert world.downstream.mutations(target) == 1
    assert len(queries) <= 2, [q["sql"][:120] for q in queries]


def test_an_unknown_due_costs_its_lease_and_its_settle(world):
    """An unknown a worker finds due (a sweep, a read again after a failure): the lease
    returns the action whole, and the matching read settles it, one statement each."""
    t, target = tool(world), target_name()
    world.downstream.fault("drop_after_commit", prefix="tickets", target=target)
    run = start_run(world)
    # One transaction, so that no running worker sees the action queued or unknown first.
    with transaction.atomic():
        action = propose(world, run, t, target, {"status": "closed"}, None)
        assert dispatch_leased(*lease_queued(1, only=[action.pk])[0]) == "unknown"
        with CaptureQueriesContext(connection) as queries:
            done = action_reconcile(action.pk)
    assert (done.state, done.resolution) == ("succeeded", "reconciled")
    assert Action.objects.get(pk=action.pk).state == "succeeded"
    assert len(queries) <= 2, [q["sql"][:120] for q in queries]
