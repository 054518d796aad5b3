"""The lease's statement keeps its partial index in every plan PostgreSQL may choose: the
application's connection prepares a statement it runs five times, and a prepared statement
may end on one generic plan, with every parameter unknown."""

import re

import pytest
from django.db import connection

from runs.engine import leases
from runs.states import ActionState


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
