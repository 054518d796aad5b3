"""`POST /runs/{id}/actions?wait=N`: propose and await the outcome in one request, held
exactly as `GET /actions/{id}?wait=N` holds it (a real worker settles the action)."""

import pytest
from django.test import override_settings

from core.models import AuditEvent
from runs.models import Action

from ..conftest import problem
from .scenarios import key, target


def _propose(w, run_id, k, t, wait, tool="update_ticket"):
    return w.agent.client().post(
        f"/api/v1/runs/{run_id}/actions?wait={wait}",
        {"tool": tool, "target": t, "desired_state": {"status": "closed"}},
        format="json",
        HTTP_IDEMPOTENCY_KEY=k,
    )


@pytest.mark.worker
def test_a_proposal_that_waits_answers_with_its_outcome_and_a_retry_is_a_hit(w):
    run, k, t = w.start_run(), key(), target()
    first = _propose(w, run["id"], k, t, 10)
    assert first.status_code == 201, first.content
    body = first.json()
    assert (body["state"], body["replayed"]) == ("succeeded", False)
    assert [a["outcome"] for a in body["attempts"]] == ["applied"]
    assert "Retry-After" not in first
    again = _propose(w, run["id"], k, t, 10)
    assert again.status_code == 200
    assert (again.json()["id"], again.json()["state"]) == (body["id"], "succeeded")
    assert again.json()["replayed"] is True
    assert w.downstream.mutations(t) == 1


@pytest.mark.worker
def test_a_proposal_waiting_for_an_approval_answers_at_once(w):
    run = w.start_run()
    response = _propose(w, run["id"], key(), target(), 30, tool="close_ticket")
    assert response.status_code == 201
    assert response.json()["state"] == "awaiting_approval"  # not held: a person decides


@pytest.mark.parametrize("wait", ["x", "31", "-1", "nan", "1_0"])
def test_a_bad_wait_is_a_400_naming_it_and_writes_nothing(world, wait):
    world.tool("update_ticket")
    run, k = world.start_run(), key()
    before = AuditEvent.objects.filter(tenant=world.tenant).count()  # other tests write too
    response = _propose(world, run["id"], k, target(), wait)
    assert response.status_code == 400
    assert "wait" in problem(response)["errors"]
    assert not Action.objects.filter(idempotency_key=k).exists()
    assert AuditEvent.objects.filter(tenant=world.tenant).count() == before


@override_settings(WAIT_MAX_PER_PRINCIPAL=0)
def test_over_the_cap_of_waits_the_proposal_answers_at_once_with_retry_after(world):
    world.tool("update_ticket")  # no worker: the action stays queued
    run = world.start_run()
    response = _propose(world, run["id"], key(), target(), 5)
    assert response.status_code == 201
    assert response.json()["state"] == "queued"
    assert response["Retry-After"] == "1"


@pytest.mark.worker
def test_every_proposal_that_waits_gives_its_wait_back(w):
    """A proposal listens for its action before writing it; whatever the proposal turns out
    to be (new and settled, a ledger hit, held for an approval, an unknown tool), the slot
    it took under the caps is given back, so the caps never fill up with the departed."""
    from runs.waits import waiters

    run, k, t = w.start_run(), key(), target()
    assert _propose(w, run["id"], k, t, 10).json()["state"] == "succeeded"
    assert _propose(w, run["id"], k, t, 10).status_code == 200  # a hit
    assert _propose(w, run["id"], key(), target(), 10, tool="close_ticket").status_code == 201
    assert _propose(w, run["id"], key(), target(), 10, tool="no_such_tool").status_code == 400
    assert (waiters.total, dict(waiters.per_principal), dict(waiters.events)) == (0, {}, {})


def _xmins(action_id) -> tuple[str, str]:
    """The transaction that last wrote the action's row, and the one that proposed it (its
    first audit event, a row never written again)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT xmin::text FROM runs_action WHERE id = %s", [action_id])
        (action,) = cursor.fetchone()
        cursor.execute(
            "SELECT xmin::text FROM core_auditevent WHERE object_type = 'action' "
            "AND object_id = %s ORDER BY at, id LIMIT 1",
            [str(action_id)],
        )
        (proposed,) = cursor.fetchone()
    return action, proposed


def test_a_proposal_that_waits_is_on_disk_before_its_answer(world):
    """A waiting proposal commits without waiting for the disk: a later commit that waits
    flushes it too. Either a worker's lease (always committed that way, before any call),
    or, answered still queued, a write of its own row again. So whatever the answer, the
    row was written again after the proposal, by a commit that waited for the disk."""
    world.tool("update_ticket")
    run = world.start_run()
    for _ in range(5):
        response = _propose(world, run["id"], key(), target(), 0.01)
        assert response.status_code == 201
        written, proposed = _xmins(response.json()["id"])
        assert written != proposed, response.json()["state"]
