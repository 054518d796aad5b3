"""A bench's past (bench/history.py) for real: effects through the whole path, their rows
copied, and the copies are a past a deployment could have had: every unique index and
foreign key holds (the copy commits, and the deferred keys are checked then), each copied
action points at its own copied run and ledger entry, nothing copied is open, and the
tables are analyzed. Then effects still go through on top of it."""

import psycopg
import pytest
from django.db import connection

from bench import history
from bench.management.commands.bench import admin_conninfo, in_own_database, recreate_database


@pytest.fixture
def scratch(live_db):
    """A database of the test's own on the same server, dropped after."""
    names = []

    def make(suffix):
        names.append(f"{connection.settings_dict['NAME']}_{suffix}")
        return names[-1]

    yield make
    with psycopg.connect(admin_conninfo("postgres"), autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_bench_steps_runs_on_a_past_that_keeps_every_rule(scratch, capfd):
    """`manage.py bench_steps --history` for real, in its own migrated database: 100 effects
    to warm up, their rows copied, then effects measured on top (the command refuses any
    answer but `201 succeeded`)."""
    name = scratch("historytest")
    done = in_own_database(
        "bench_steps", "historytest", ["--effects=10", "--batches=1", "--history=500"]
    )
    assert done.returncode == 0
    assert "the warm-up's rows copied 4 times" in capfd.readouterr().out

    with psycopg.connect(admin_conninfo(name)) as conn:

        def one(sql):
            return conn.execute(sql).fetchone()[0]

        # 100 warm-up effects and 4 copies of each, 20 to warm up again, 10 measured.
        assert one("SELECT count(*) FROM runs_action") == 100 * 5 + 20 + 10
        assert one("SELECT count(*) FROM ledger_ledgerentry") == 530
        # Each action and its ledger entry point at each other, copies included.
        assert (
            one(
                "SELECT count(*) FROM runs_action a JOIN ledger_ledgerentry e"
                " ON e.id = a.ledger_entry_id AND e.action_id = a.id"
            )
            == 530
        )
        # The copies are a past: settled, in runs that are over, one run copied 4 times.
        copied = "FROM runs_action WHERE idempotency_key LIKE '%~%'"
        assert one(f"SELECT count(*) {copied}") == 400
        assert one(f"SELECT array_agg(DISTINCT state) {copied}") == ["succeeded"]
        assert one(
            "SELECT array_agg(DISTINCT r.status) FROM runs_run r"
            f" WHERE r.id IN (SELECT run_id {copied})"
        ) == ["success"]
        assert one(f"SELECT count(DISTINCT run_id) {copied}") == 4
        assert one("SELECT count(*) FROM runs_attempt") == 530
        # Every copied table analyzed.
        never = conn.execute(
            "SELECT relname FROM pg_stat_user_tables WHERE relname = ANY(%s)"
            " AND last_analyze IS NULL",
            [[table for table, _ in history.TAKEOVER]],
        ).fetchall()
        assert never == []


def test_dbos_tables_are_copied_with_their_workflow_ids(scratch):
    """history.dbos on tables shaped like DBOS's system tables (the anchor's own, with the
    optional `bench` extra, are checked by `make bench`): every table with a workflow_uuid,
    the parent first, so the foreign key holds."""
    url = recreate_database(scratch("dbostest"))
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA fake")
        conn.execute(
            "CREATE TABLE fake.workflow_status (workflow_uuid text PRIMARY KEY, status text)"
        )
        conn.execute(
            "CREATE TABLE fake.operation_outputs (workflow_uuid text REFERENCES"
            " fake.workflow_status, function_id int, output text,"
            " PRIMARY KEY (workflow_uuid, function_id))"
        )
        conn.execute("INSERT INTO fake.workflow_status VALUES ('a', 'SUCCESS'), ('b', 'SUCCESS')")
        conn.execute("INSERT INTO fake.operation_outputs VALUES ('a', 0, 'x'), ('b', 0, 'y')")

        assert history.dbos(conn, 10, schema="fake") == 4

        ids = {r[0] for r in conn.execute("SELECT workflow_uuid FROM fake.workflow_status")}
        assert ids == {"a", "b"} | {f"{w}~{g}" for w in "ab" for g in range(1, 5)}
        outputs = conn.execute(
            "SELECT workflow_uuid, output FROM fake.operation_outputs WHERE workflow_uuid"
            " LIKE 'a~%'"
        ).fetchall()
        assert sorted(outputs) == [(f"a~{g}", "x") for g in range(1, 5)]
        analyzed = conn.execute(
            "SELECT count(*) FROM pg_stat_user_tables WHERE schemaname = 'fake'"
            " AND last_analyze IS NOT NULL"
        ).fetchone()[0]
        assert analyzed == 2
