"""core.ids: row ids that begin with the time they were made (UUID version 7)."""

import time
import uuid

from django.db import connection

from core.ids import NEW_ID_SQL, new_id
from core.models import AuditEvent
from ledger.models import LedgerEntry
from runs.models import Action


def _milliseconds(value) -> int:
    return uuid.UUID(str(value)).int >> 80


def test_an_id_is_version_7_and_begins_with_its_millisecond():
    before = time.time_ns() // 1_000_000
    ids = [new_id() for _ in range(1000)]
    after = time.time_ns() // 1_000_000
    assert {i.version for i in ids} == {7}
    assert {i.variant for i in ids} == {uuid.RFC_4122}
    assert all(before <= _milliseconds(i) <= after for i in ids)
    assert len(set(ids)) == 1000  # 74 random bits: no two alike within a millisecond
    time.sleep(0.002)
    assert new_id() > max(ids)  # a later millisecond sorts after every earlier id


def test_the_sql_form_is_the_same_kind_of_id(live_db):
    before = time.time_ns() // 1_000_000
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {NEW_ID_SQL} FROM generate_series(1, 500)")
        ids = [row[0] for row in cursor.fetchall()]
    after = time.time_ns() // 1_000_000
    assert {i.version for i in ids} == {7}
    assert {i.variant for i in ids} == {uuid.RFC_4122}
    # The server's clock is this machine's; its rounding may add a millisecond.
    assert all(before <= _milliseconds(i) <= after + 1 for i in ids)
    assert len(set(ids)) == 500


def test_an_effect_and_its_audit_trail_get_ids_by_time(world, worker):
    """Through the API and a real worker: the proposal (its ledger entry, its audit rows) and
    the worker's lease and settle (their audit rows, written by hand-written statements) all
    make version 7 ids, in the order they were written. The run and the action, which the
    console shows by their first 8 hex digits, keep random ones."""
    world.tool("update_ticket")
    run = world.start_run()
    proposed = world.propose(
        run["id"],
        f"k-{uuid.uuid4().hex}",
        tool="update_ticket",
        target="T-ids",
        desired_state={"status": "done"},
    )
    assert proposed.status_code == 201, proposed.content
    body = world.wait_action(proposed.json()["id"])
    assert body["state"] == "succeeded", body

    action = Action.objects.get(pk=body["id"])
    entry = LedgerEntry.objects.get(pk=action.ledger_entry_id)
    events = list(
        AuditEvent.objects.filter(object_id__in=[str(action.pk), str(entry.pk)]).order_by("at")
    )
    verbs = [e.verb for e in events]
    assert {"action.propose", "action.dispatching", "action.succeeded"} <= set(verbs), verbs
    assert {uuid.UUID(run["id"]).version, action.pk.version} == {4}
    assert entry.pk.version == 7
    assert {e.id.version for e in events} == {7}
    first, last = events[0], events[-1]
    assert _milliseconds(first.id) <= _milliseconds(last.id)
    assert abs(_milliseconds(entry.pk) - entry.created_at.timestamp() * 1000) < 1000
