"""A settle tells the `?wait` listeners only of a watched action (runs.waits): every action is
watched but one its proposer claimed for itself, which a waiter marks before it waits. Real
commits, a real LISTEN connection and concurrent connections; no worker (nothing here is
queued)."""

import select
import threading
import time
from datetime import timedelta

import psycopg
from django.db import connection, transaction

from core.audit import DISPATCHER
from runs.models import Action
from runs.moves import action_settle_dispatch
from runs.waits import CHANNEL, watch
from runs.wakeup import listen_conninfo

from .. import builders
from .scenarios import key, target


def _claimed(world) -> Action:
    """An effect its proposer claimed, still `dispatching` (no call is made)."""
    return builders.propose_claimed(world, timedelta(minutes=5))


def _settle(action: Action) -> bool:
    """The hot settle (one statement, as a dispatch settles): dispatching → succeeded."""
    return action_settle_dispatch(
        action,
        action.claimed_attempt,
        to="succeeded",
        outcome="applied",
        http_status=200,
        detail="",
        actor=DISPATCHER,
        reason="test",
        resolution="applied",
    )


def _heard_until(conn, wanted: str, timeout: float = 10.0) -> list[str]:
    """The payloads heard on `conn` up to and including `wanted` (notifications come in
    commit order, so whatever was sent before `wanted` has been heard by then)."""
    heard: list[str] = []
    deadline = time.monotonic() + timeout
    while wanted not in heard:
        left = deadline - time.monotonic()
        assert left > 0, f"never heard {wanted}; heard {heard}"
        select.select([conn.fileno()], [], [], left)
        heard += [n.payload for n in conn.notifies(timeout=0)]
    return heard


def test_a_claimed_action_settles_unheard_and_a_marked_one_is_announced(world):
    listening = psycopg.connect(listen_conninfo(), autocommit=True)
    try:
        listening.execute(f"LISTEN {CHANNEL}")
        unwatched, legacy, marked = _claimed(world), _claimed(world), _claimed(world)
        assert Action.objects.get(pk=unwatched.pk).watched is False
        # What the previous release's insert writes (it knows no such column): announced.
        Action.objects.filter(pk=legacy.pk).update(watched=None)
        assert watch(marked.pk) == "dispatching"
        assert Action.objects.get(pk=marked.pk).watched
        assert _settle(unwatched) and _settle(legacy) and _settle(marked)
        heard = _heard_until(listening, str(marked.pk))
    finally:
        listening.close()
    assert str(unwatched.pk) not in heard
    assert str(legacy.pk) in heard


def test_every_other_action_is_written_watched(world):
    world.tool("update_ticket")
    response = world.agent.client().post(
        f"/api/v1/runs/{world.start_run()['id']}/actions",
        {"tool": "update_ticket", "target": target(), "desired_state": {"status": "x"}},
        format="json",
        HTTP_IDEMPOTENCY_KEY=key(),
    )
    assert response.status_code == 201
    assert Action.objects.get(pk=response.json()["id"]).watched  # queued: announced


def test_a_mark_writes_once(world):
    """Marked again (every wait marks), the row is not written again."""
    action = _claimed(world)

    def version():
        with connection.cursor() as cursor:
            cursor.execute("SELECT xmin::text FROM runs_action WHERE id = %s", [action.pk])
            return cursor.fetchone()[0]

    before = version()
    assert watch(action.pk) == "dispatching"
    first = version()
    assert first != before
    assert watch(action.pk) == "dispatching"
    assert version() == first
    assert watch("00000000-0000-0000-0000-000000000000") is None


def test_a_wait_for_a_claimed_action_is_woken_by_its_settle(world):
    """Another client waits for an effect its proposer is still dispatching (a retry after a
    lost answer does): its wait marks the action, and the settle, which would otherwise
    announce nothing, wakes it at once."""
    action = _claimed(world)
    answer = {}

    def wait():
        try:
            response = world.agent.client().get(f"/api/v1/actions/{action.pk}?wait=25")
            answer["at"], answer["response"] = time.monotonic(), response
        finally:
            connection.close()

    waiter = threading.Thread(target=wait)
    waiter.start()
    deadline = time.monotonic() + 10
    while not Action.objects.get(pk=action.pk).watched:  # the waiter's mark
        assert time.monotonic() < deadline, "the wait never marked the action"
        time.sleep(0.05)
    assert _settle(action)
    settled_at = time.monotonic()
    waiter.join(30)
    response = answer["response"]
    assert response.status_code == 200 and response.json()["state"] == "succeeded"
    assert answer["at"] - settled_at < 5, "the wait was not woken: it ran out its 25 s"


def test_a_mark_waits_for_a_settle_in_flight_and_returns_its_outcome(world):
    """The mark and the settle are ordered by the row lock: a mark made while a settle holds
    the row (uncommitted, so it announced nothing) returns the settled state once that
    commits, and the waiter does not wait at all."""
    action = _claimed(world)
    settled, release, marked = threading.Event(), threading.Event(), {}

    def settle_and_hold():
        try:
            with transaction.atomic():
                assert _settle(action)
                settled.set()
                release.wait(30)
        finally:
            connection.close()

    def mark():
        try:
            marked["state"] = watch(action.pk)
        finally:
            connection.close()

    settler = threading.Thread(target=settle_and_hold)
    settler.start()
    assert settled.wait(10)
    marker = threading.Thread(target=mark)
    marker.start()
    marker.join(0.5)
    blocked = marker.is_alive()
    release.set()
    settler.join(10)
    marker.join(10)
    assert blocked, "the mark did not wait for the settle holding the row"
    assert marked["state"] == "succeeded"
