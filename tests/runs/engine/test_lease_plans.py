"""The lease's statement keeps its partial index in every plan PostgreSQL may choose: the
application's connection prepares a statement it runs five times, and a prepared statement
may end on one generic plan, with every parameter unknown."""

import re
import uuid

import pytest
from django.db import connection, connections

from runs.engine import leases
from runs.states import ActionState
from tests.builders import propose, start_run, target_name, tool


def generic_plan(sql: str) -> str:
    names = {}
    sql = re.sub(r"%\((\w+)\)s", lambda m: f"${names.setdefault(m[1], len(names) + 1)}", sql)
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")  # a tiny table: make the index matter
        try:
            cursor.execute("EXPLAIN (GENERIC_PLAN) " + sql)
            return "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("RESET enable_seqscan")


def partial_indexes() -> set[str]:
    """The indexes of actions that hold only some rows (a WHERE on the state)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'runs_action' "
            "AND indexdef LIKE '% WHERE %'"
        )
        return {name for (name,) in cursor.fetchall()}


@pytest.mark.django_db
@pytest.mark.parametrize("state", [ActionState.QUEUED, ActionState.UNKNOWN])
def test_a_generic_plan_of_the_lease_still_reads_a_partial_index(state):
    # With the state bound as a parameter, no partial index's predicate can be proven, and
    # the generic plan reads an index of every action the tenant ever had.
    if connection.pg_version < 160000:
        pytest.skip("EXPLAIN (GENERIC_PLAN) needs PostgreSQL 16")
    sql, _params = leases._due(state, 10, now=None)
    plan = generic_plan(sql)
    [used] = re.findall(r"Index Scan using (\w+) on runs_action", plan)
    assert used in partial_indexes(), plan


@pytest.mark.parametrize("lease", [leases.lease_queued, leases.lease_unknown])
def test_the_lease_of_the_ids_a_worker_heard_is_planned_once_not_on_every_call(world, lease):
    # A worker leases the actions it heard of by their ids. Were the statement's generic
    # plan estimated much dearer than a custom one, PostgreSQL would plan it again on every
    # call: 1.6 ms of planning per effect against 0.7 of execution, in `make bench`. What
    # decides it is the statistics of a table that has run a while: nearly every action
    # settled, few in the state leased.
    queued = propose(world, start_run(world), tool(world), target_name(), {"status": "open"})
    with connections["owner"].cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO runs_action
            SELECT r.* FROM runs_action t, generate_series(1, 2000) g, jsonb_populate_record(
                t, jsonb_build_object('id', gen_random_uuid(), 'state', 'succeeded',
                    'ledger_entry_id', NULL, 'effect', 'read_only',
                    'idempotency_key', t.idempotency_key || g)
            ) r
            WHERE t.id = %s
            """,
            [queued.pk],
        )
        cursor.execute("ANALYZE runs_action")
    try:
        connection.close()  # a new session: nothing prepared yet
        for _ in range(12):  # prepared at the 5th call (psycopg), a generic plan from the 6th
            assert lease(1, only=[uuid.uuid4()]) == []
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                "WHERE statement LIKE '%%WITH picked AS%%= ANY(%%'"
            )
            [(generic, custom)] = cursor.fetchall()
        assert generic > 0 and custom <= 5, (generic, custom)
    finally:  # the copies only stood for a past: they have no history for the invariants
        with connections["owner"].cursor() as cursor:
            cursor.execute(
                "DELETE FROM runs_action WHERE run_id = %s AND id <> %s",
                [queued.run_id, queued.pk],
            )
