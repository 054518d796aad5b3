"""A proposal under its idempotency key (`runs/propose.py`), through the API: the agent's
reason, idempotency conflicts, simultaneous proposals of one key, a presented approval
checked at the door, and reads, which need no key and take no key space."""

import time
import uuid

import pytest

from core.models import AuditEvent
from ledger.models import LedgerEntry
from runs.models import Action
from tests.builders import race

from ..conftest import problem
from .scenarios import grant, key, target


def test_propose_keeps_the_agents_reason_outside_the_fingerprint(world):
    world.tool("update_ticket")
    run = world.start_run()
    key = f"k-{uuid.uuid4().hex}"
    body = {"tool": "update_ticket", "target": "T-1", "desired_state": {"status": "closed"}}
    first = world.propose(run["id"], key, reason="Customer asked to close it", **body)
    assert first.status_code == 201, first.content
    assert first.json()["reason"] == "Customer asked to close it"
    again = world.propose(run["id"], key, reason="Reworded", **body)
    assert again.status_code == 200 and again.json()["replayed"] is True
    assert again.json()["reason"] == "Customer asked to close it"
    assert (
        world.propose(run["id"], f"k-{uuid.uuid4().hex}", reason=None, **body).json()["reason"]
        is None
    )
    bad = world.propose(run["id"], f"k-{uuid.uuid4().hex}", reason=["x"], **body)
    assert bad.status_code == 400 and "reason" in problem(bad)["errors"]
    schema = world.admin.client().get("/api/v1/schema/?format=json").json()
    propose_in = schema["components"]["schemas"]["ActionProposeInRequest"]["properties"]
    assert "reason" in propose_in


def test_every_idempotency_conflict_is_recorded_with_both_intents(world):
    world.tool("update_ticket")
    run = world.start_run()
    key = f"k-{uuid.uuid4().hex}"
    first = world.propose(
        run["id"], key, tool="update_ticket", target="T-1", desired_state={"status": "closed"}
    )
    assert first.status_code == 201
    clash = world.propose(
        run["id"], key, tool="update_ticket", target="T-2", desired_state={"status": "closed"}
    )
    assert clash.status_code == 422
    assert problem(clash)["type"] == "/problems/idempotency-conflict"
    listed = world.oncall.client().get("/api/v1/idempotency-conflicts").json()["results"]
    assert len(listed) == 1
    assert listed[0]["key"] == key and listed[0]["existing_action"] == first.json()["id"]
    assert listed[0]["attempted"]["target"] == "T-2"
    assert AuditEvent.objects.filter(verb="idempotency.conflict", tenant=world.tenant).count() == 1
    assert Action.objects.filter(tenant=world.tenant).count() == 1  # nothing else written
    outsider = world.outsider.client().get("/api/v1/idempotency-conflicts").json()["results"]
    assert outsider == []


@pytest.mark.worker
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


def test_racing_proposals_of_a_new_key_never_answer_500_and_make_one_action(world):
    """8 concurrent proposals of one new key, 60 rounds, each on its own connection: the
    losers of the race get the winner's action (200, replayed), never a 500 (the one
    statement's INSERT could fail on the key's other unique index, the generation's)."""
    world.tool("update_ticket")
    run = world.start_run()
    body = {"tool": "update_ticket", "target": "t", "desired_state": {"status": "x"}}
    for round_ in range(60):
        key = f"race-{round_}-{uuid.uuid4().hex[:8]}"
        responses = race(8, lambda i, key=key: world.propose(run["id"], key, **body))
        codes = sorted(r.status_code for r in responses)
        assert codes == [200] * 7 + [201], (round_, [r.content[:200] for r in responses])
        assert len({r.json()["id"] for r in responses}) == 1
        assert Action.objects.filter(tenant=world.tenant, idempotency_key=key).count() == 1


def test_two_proposals_that_both_pass_the_conflict_check_still_make_one_action(world):
    """The race made likely: a trigger (the test's own, as the owner) holds every ledger
    INSERT *before* PostgreSQL checks for a conflicting key, on a lock the test holds until
    both proposals wait there, then lets both go at once, so that both pass that check
    before either row exists. The second must still end as a ledger hit on the first, not
    as a unique violation on the key's other index (a 500)."""
    import threading

    from django.db import connections

    world.tool("update_ticket")
    run = world.start_run()
    body = {"tool": "update_ticket", "target": "t", "desired_state": {"status": "x"}}
    owner = connections["owner"]
    with owner.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION test_hold() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN PERFORM pg_advisory_xact_lock_shared(4242); RETURN NEW; END $$;"
            "CREATE TRIGGER test_hold BEFORE INSERT ON ledger_ledgerentry "
            "FOR EACH ROW EXECUTE FUNCTION test_hold()"
        )
    try:
        for round_ in range(5):
            key = f"held-{round_}-{uuid.uuid4().hex[:8]}"
            with owner.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_lock(4242)")
            results = []
            threads = [
                threading.Thread(
                    target=lambda: results.append(world.propose(run["id"], key, **body))
                )
                for _ in range(2)
            ]
            for t in threads:
                t.start()
            with owner.cursor() as cursor:
                for _ in range(200):  # both wait on the lock: release them together
                    cursor.execute(
                        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                        "AND objid = 4242 AND NOT granted"
                    )
                    if cursor.fetchone()[0] == 2:
                        break
                    time.sleep(0.02)
                cursor.execute("SELECT pg_advisory_unlock(4242)")
            for t in threads:
                t.join(30)
            connections.close_all()
            codes = sorted(r.status_code for r in results)
            assert codes == [200, 201], [r.content[:300] for r in results]
            assert len({r.json()["id"] for r in results}) == 1
    finally:
        with owner.cursor() as cursor:
            cursor.execute(
                "DROP TRIGGER test_hold ON ledger_ledgerentry; DROP FUNCTION test_hold()"
            )


@pytest.mark.worker
def test_valid_approval_succeeds_with_one_mutation(w):
    run = w.start_run()
    t, k, desired = target(), key(), {"status": "refunded"}
    approval = grant(w, target=t, desired_state=desired)
    response = w.propose(
        run["id"], k, tool="update_ticket", target=t, desired_state=desired, approval_id=approval
    )
    assert response.status_code == 201
    action = w.wait_action(response.json()["id"])
    assert action["state"] == "succeeded"
    assert action["resolution"] == "applied"
    assert [a["outcome"] for a in action["attempts"]] == ["applied"]
    assert w.downstream.mutations(t) == 1
    approval_now = w.approver.client().get(f"/api/v1/approvals/{approval}").json()
    assert approval_now["state"] == "consumed"
    assert approval_now["consumed_by_action"] == action["id"]

    # The same key and intent again: a ledger hit, nothing dispatched.
    again = w.propose(
        run["id"], k, tool="update_ticket", target=t, desired_state=desired, approval_id=approval
    )
    assert again.status_code == 200
    assert again.json()["replayed"] is True
    assert again.json()["id"] == action["id"]
    assert again.json()["content_changed"] is False

    # The same key with a changed intent: 422, nothing created or dispatched.
    conflict = w.propose(
        run["id"], k, tool="update_ticket", target=t, desired_state={"status": "closed"}
    )
    assert conflict.status_code == 422
    assert conflict.json()["type"] == "/problems/idempotency-conflict"

    # A consumed approval reused under a new key is blocked.
    reuse = w.propose(
        run["id"],
        key("reuse"),
        tool="update_ticket",
        target=t,
        desired_state=desired,
        approval_id=approval,
    )
    assert reuse.status_code == 201
    assert reuse.json()["state"] == "blocked"
    assert reuse.json()["block_reason"] == "approval_consumed"
    assert w.downstream.mutations(t) == 1
    assert w.downstream.received(k) == 1


@pytest.mark.worker
@pytest.mark.parametrize("field", ["principal", "target"])
def test_approval_for_another_principal_or_target_is_a_mismatch(w, field):
    run = w.start_run()
    t, desired = target(), {"status": "refunded"}
    if field == "principal":
        from core.services import principal_create

        from ..builders import SETUP

        principal_create(tenant=w.tenant, name="someone-else", actor=SETUP)
        approval = grant(w, target=t, desired_state=desired, principal="someone-else")
    else:
        approval = grant(w, target=target(), desired_state=desired)
    response = w.propose(
        run["id"],
        key(),
        tool="update_ticket",
        target=t,
        desired_state=desired,
        approval_id=approval,
    )
    assert response.status_code == 201
    assert response.json()["state"] == "blocked"
    assert response.json()["block_reason"] == "approval_mismatch"
    assert w.downstream.mutations(t) == 0


@pytest.mark.worker
def test_expired_approval_is_blocked(w):
    run = w.start_run()
    t, desired = target(), {"status": "refunded"}
    approval = grant(w, target=t, desired_state=desired, ttl=1)
    time.sleep(1.2)
    response = w.propose(
        run["id"],
        key(),
        tool="update_ticket",
        target=t,
        desired_state=desired,
        approval_id=approval,
    )
    assert response.json()["state"] == "blocked"
    assert response.json()["block_reason"] == "approval_expired"
    assert w.downstream.mutations(t) == 0


@pytest.mark.worker
def test_read_only_needs_no_key_no_approval_and_takes_no_ledger_key_space(w):
    run = w.start_run()
    w.downstream.seed(target("T"), {"status": "open"})
    response = w.agent.client().post(
        f"/api/v1/runs/{run['id']}/actions",
        {"tool": "search_tickets", "target": "open", "desired_state": {"status": "open"}},
        format="json",
    )  # no Idempotency-Key header
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["effect"] == "read_only"
    assert body["idempotency_key"] == f"read:{body['id']}"
    done = w.wait_action(body["id"])
    assert done["state"] == "succeeded"
    assert '"matches"' in done["attempts"][0]["detail"]
    assert Action.objects.get(pk=body["id"]).ledger_entry_id is None

    # A key shared with a side effect neither collides nor makes the read a ledger hit.
    shared = key("shared")
    first = w.propose(
        run["id"], shared, tool="search_tickets", target="open", desired_state={"x": 1}
    )
    again = w.propose(
        run["id"], shared, tool="search_tickets", target="open", desired_state={"x": 1}
    )
    write = w.propose(
        run["id"], shared, tool="update_ticket", target=target(), desired_state={"s": 1}
    )
    assert (first.status_code, again.status_code, write.status_code) == (201, 201, 201)
    assert first.json()["id"] != again.json()["id"]
    assert LedgerEntry.objects.filter(tenant=w.tenant, key=shared).count() == 1  # the write's

    # A side-effecting tool still needs its key.
    missing = w.agent.client().post(
        f"/api/v1/runs/{run['id']}/actions",
        {"tool": "update_ticket", "target": "x", "desired_state": {"s": 1}},
        format="json",
    )
    assert problem(missing)["type"] == "/problems/idempotency-key-missing"
