"""A proposal that waits long enough for its whole dispatch is dispatched by its own request
(runs/claim.py): proposed already leased, called and settled in the request, no worker in
the test. The same rows as a worker's dispatch, one apply per key, and a request that dies
mid-call leaves a lease that the sweeper hands to reconciliation."""

from datetime import timedelta

import pytest
from django.test import override_settings

from core.audit import DISPATCHER
from core.models import AuditEvent
from ledger.models import LedgerEntry
from runs.engine.leases import expire_leases
from runs.models import Action

from .. import builders
from ..builders import claimed_as_proposed, race
from .scenarios import key, target


def _propose(w, run_id, k, t, wait, tool="update_ticket", state=None):
    return w.agent.client().post(
        f"/api/v1/runs/{run_id}/actions?wait={wait}",
        {"tool": tool, "target": t, "desired_state": state or {"status": "closed"}},
        format="json",
        HTTP_IDEMPOTENCY_KEY=k,
    )


def _trail(action_id) -> list[tuple[str, str, dict]]:
    events = AuditEvent.objects.filter(object_type="action", object_id=str(action_id))
    return [(e.verb, e.actor_name, e.after) for e in events.order_by("at", "id")]


def test_it_is_applied_once_and_recorded_as_a_workers_dispatch_would_be(world):
    world.tool("update_ticket")  # 2 s timeout: at most 7 s with the safe retry (tests wait 3 s)
    run, k, t = world.start_run(), key(), target()
    response = _propose(world, run["id"], k, t, 10)  # no worker runs in this test
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["state"], body["resolution"]) == ("succeeded", "applied")
    assert [a["outcome"] for a in body["attempts"]] == ["applied"]
    assert world.downstream.mutations(t) == 1
    assert claimed_as_proposed(body["id"])
    trail = _trail(body["id"])
    assert [(verb, actor) for verb, actor, _ in trail] == [
        ("action.propose", world.principal.name),
        ("action.dispatching", DISPATCHER.name),
        ("action.succeeded", DISPATCHER.name),
    ]
    assert trail[0][2]["state"] == "queued"  # proposed, then leased: two moves, as always
    entry = LedgerEntry.objects.get(action_id=body["id"])
    assert (entry.key, entry.status, entry.generation) == (k, "applied", 1)
    reserved = AuditEvent.objects.get(object_type="ledgerentry", object_id=str(entry.pk))
    assert (reserved.verb, reserved.after["generation"]) == ("ledger.reserve", 1)
    again = _propose(world, run["id"], k, t, 10)
    assert (again.status_code, again.json()["id"], again.json()["replayed"]) == (
        200,
        body["id"],
        True,
    )
    assert world.downstream.mutations(t) == 1


@pytest.mark.parametrize("fault", [None, "reject"])
def test_its_answer_is_the_action_as_any_later_read_gives_it(world, fault):
    """The answer is built from what the request wrote, not read back: it must be the
    resource that `GET /actions/{id}` reads from the rows."""
    world.tool("update_ticket")
    run, t = world.start_run(), target()
    if fault:
        world.downstream.fault(fault, target=t)
    answer = _propose(world, run["id"], key(), t, 10).json()
    assert claimed_as_proposed(answer["id"])
    assert answer["state"] == ("failed" if fault else "succeeded")
    read = world.agent.client().get(f"/api/v1/actions/{answer['id']}").json()
    assert answer == read


def test_a_wait_shorter_than_the_dispatch_leaves_it_to_the_workers(world):
    world.tool("update_ticket")  # at most 7 s: a 1 s wait cannot hold the whole dispatch
    run, t = world.start_run(), target()
    response = _propose(world, run["id"], key(), t, 1)
    assert response.status_code == 201
    assert not claimed_as_proposed(response.json()["id"])


@override_settings(DISPATCH_IN_REQUEST=False)
def test_switched_off_the_web_never_calls_the_tool(world):
    world.tool("update_ticket", timeout_seconds=0.1)  # 3.2 s at most: it would fit
    run, t = world.start_run(), target()
    response = _propose(world, run["id"], key(), t, 4)
    assert response.status_code == 201
    assert not claimed_as_proposed(response.json()["id"])


def test_an_approval_is_never_skipped(world):
    world.tool("close_ticket", requires_approval=True)
    run, t = world.start_run(), target()
    response = _propose(world, run["id"], key(), t, 10, tool="close_ticket")
    assert response.json()["state"] == "awaiting_approval"
    assert world.downstream.mutations(t) == 0


@pytest.mark.worker
def test_a_lost_answer_is_reconciled_by_a_worker_while_the_request_waits(w):
    run, t = w.start_run(), target()
    w.downstream.fault("drop_after_commit", target=t)
    response = _propose(w, run["id"], key(), t, 10)
    body = response.json()
    assert (body["state"], body["resolution"]) == ("succeeded", "reconciled"), body
    assert claimed_as_proposed(body["id"])
    assert [a["outcome"] for a in body["attempts"]] == ["unknown"]  # never sent twice
    assert w.downstream.mutations(t) == 1


@override_settings(WAIT_MAX_PER_PRINCIPAL=6, WAIT_MAX_PER_PROCESS=12)  # every racer waits
def test_racing_requests_for_one_new_key_apply_it_once(world):
    world.tool("update_ticket")
    run, k, t = world.start_run(), key(), target()
    answers = race(6, lambda i: _propose(world, run["id"], k, t, 10))
    assert sorted(a.status_code for a in answers) == [200] * 5 + [201]
    assert {a.json()["id"] for a in answers} == {answers[0].json()["id"]}
    assert {a.json()["state"] for a in answers} == {"succeeded"}  # the losers waited for it
    assert claimed_as_proposed(answers[0].json()["id"])
    assert world.downstream.mutations(t) == 1
    assert LedgerEntry.objects.filter(key=k).count() == 1


def test_a_key_taken_for_another_intent_writes_nothing(world):
    world.tool("update_ticket")
    run, k, t = world.start_run(), key(), target()
    assert _propose(world, run["id"], k, t, 10).status_code == 201
    before = AuditEvent.objects.filter(tenant=world.tenant).count()
    other = _propose(world, run["id"], k, t, 10, state={"status": "open", "owner": "x"})
    assert other.status_code == 422
    assert Action.objects.filter(idempotency_key=k).count() == 1
    # The refusal is recorded for operators (one event), and nothing else is written.
    assert AuditEvent.objects.filter(tenant=world.tenant).count() == before + 1
    assert world.downstream.mutations(t) == 1


def test_a_request_that_dies_after_its_claim_leaves_a_lease_the_sweeper_writes_off(world):
    """What a web process killed between its claim and its call leaves: an action
    `dispatching` under a lease, its ledger entry in flight. When the lease runs out the
    sweeper makes it unknown, to reconcile, exactly as for a worker lost mid-dispatch."""
    expired = timedelta(seconds=-1)  # already run out: the request died long ago
    action = builders.propose_claimed(world, expired)
    assert LedgerEntry.objects.get(action_id=action.pk).status == "in_flight"
    assert action.pk in expire_leases()
    action.refresh_from_db()
    assert action.state == "unknown" and action.next_reconcile_at is not None
    assert action.attempts.get().outcome == "unknown"
    assert LedgerEntry.objects.get(action_id=action.pk).status == "unknown"
