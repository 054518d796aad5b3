"""Races with real concurrent connections: threads, each with its own database connection,
hitting the API at once; and a worker killed mid-call."""

import threading
import uuid

import pytest
from django.db import connections

from runs.models import Action

pytestmark = pytest.mark.worker


def race(n, fn):
    """Run fn(i) in n threads released together; each thread uses its own DB connection."""
    barrier = threading.Barrier(n)
    results = [None] * n
    errors = []

    def body(i):
        try:
            barrier.wait(10)
            results[i] = fn(i)
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return results


@pytest.fixture
def w(world, worker):
    world.tool("update_ticket")
    return world


def test_twenty_simultaneous_proposals_of_one_key_make_one_action_and_one_mutation(w):
    run = w.start_run()
    target, key = f"ticket:{uuid.uuid4().hex[:8]}", f"evt-{uuid.uuid4().hex}"
    body = {"tool": "update_ticket", "target": target, "desired_state": {"status": "refunded"}}
    responses = race(20, lambda i: w.propose(run["id"], key, **body))
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] * 19 + [201]
    ids = {r.json()["id"] for r in responses}
    assert len(ids) == 1
    assert sum(r.json()["replayed"] for r in responses) == 19
    assert Action.objects.filter(tenant=w.tenant, idempotency_key=key).count() == 1
    action = w.wait_action(ids.pop())
    assert action["state"] == "succeeded"
    assert w.downstream.mutations(target) == 1
    assert w.downstream.received(key) == 1
