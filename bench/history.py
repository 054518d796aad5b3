"""A past for a bench's database: its warm-up's rows copied until the tables hold what a
deployment that has run a while holds, then `VACUUM (ANALYZE)`, as autovacuum leaves a table
in steady state. pgbench measures TPC-B the same way (`pgbench -i` loads, then vacuums).

Without it the measured phase runs on tables that grow from nothing, planned with no
statistics or with statistics taken at a few hundred rows, and PostgreSQL's plans for the
hot statements change during the run. Seen with pg_stat_statements and auto_explain in
`bench_steps`: with statistics taken at a hundred rows (as an autoanalyze early in a run
takes them), the settle read runs_attempt and the ledger by id with sequential scans (119
buffers where 44 do) once they held thousands; with no statistics, the
proposal's lookup walked the whole (tenant, key) index for its key (29 buffers at 3,000
rows, growing with the table, where 8 do).

Copy g of a row gets ids of its own (`md5(id || '~' || g)`), and its keys, targets and
workflow ids end in `~g`, so every unique index holds and a copied action points at its
copied run and ledger entry. The copies are of settled work (the warm-up's effects are), so
the partial indexes of open work stay as small as in steady state.
"""

from __future__ import annotations

import math
import time


def _id(column: str) -> str:
    return f"md5((t).{column}::text || '~' || g)::uuid"


def _suffixed(column: str) -> str:
    return f"(t).{column} || '~' || g"


# The tables an effect writes, parents first: (table, {column: its value in copy g}); the
# columns not named keep the row's values.
TAKEOVER = (
    (
        "runs_run",  # a past run is over
        {
            "id": _id("id"),
            "status": "CASE WHEN (t).status IN ('pending', 'running') THEN 'success'"
            " ELSE (t).status END",
            "finished_at": "coalesce((t).finished_at, (t).created_at)",
        },
    ),
    (
        "ledger_ledgerentry",
        {"id": _id("id"), "action_id": _id("action_id"), "key": _suffixed("key")},
    ),
    (
        "runs_action",
        {
            "id": _id("id"),
            "run_id": _id("run_id"),
            "ledger_entry_id": _id("ledger_entry_id"),
            "idempotency_key": _suffixed("idempotency_key"),
            "target": _suffixed("target"),
        },
    ),
    (
        "runs_attempt",
        {
            "id": "nextval(pg_get_serial_sequence('runs_attempt', 'id'))",
            "action_id": _id("action_id"),
        },
    ),
    ("core_auditevent", {"id": "gen_random_uuid()", "object_id": _suffixed("object_id")}),
)


def copy_rows(cursor, table: str, columns: dict[str, str], copies: int) -> None:
    """`copies` copies of every row of `table`, with `columns` replaced."""
    replaced = ", ".join(f"'{column}', {value}" for column, value in columns.items())
    cursor.execute(
        f"""
        INSERT INTO {table}
        SELECT r.*
        FROM (SELECT t FROM {table} t) AS s(t), generate_series(1, %s) AS g,
            jsonb_populate_record(t, jsonb_build_object({replaced})) AS r
        """,  # noqa: S608 -- table and columns are constants of this module
        # (in FROM, the function runs once a row; `(f(t)).*` would run it once a column)
        [copies],
    )


def copies_for(cursor, table: str, rows: int) -> int:
    """How many copies of `table`'s rows make it hold about `rows` rows."""
    cursor.execute(f"SELECT count(*) FROM {table}")  # noqa: S608 -- a constant
    have = cursor.fetchone()[0]
    return max(0, math.ceil(rows / have) - 1) if have else 0


def takeover(connection, actions: int, say) -> int:
    """Copy the effects in Takeover's tables until runs_action holds about `actions`, in one
    transaction, then VACUUM (ANALYZE) as the tables' owner (the application's role may
    not: PostgreSQL skips a table it may not vacuum, with a warning); `say` is told how it
    went. The number of copies."""
    from django.db import connections, transaction

    started = time.monotonic()
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        copies = copies_for(cursor, "runs_action", actions)
        for table, columns in TAKEOVER:
            copy_rows(cursor, table, columns, copies)
    with connections["owner"].cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE)")
    say(
        f"-- a past: the warm-up's rows copied {copies} times, then VACUUM (ANALYZE), in"
        f" {time.monotonic() - started:.0f} s"
    )
    return copies


def dbos(conn, workflows: int, schema: str = "dbos") -> int:
    """The same for DBOS's system tables (psycopg connection `conn`, autocommit): every
    table of `schema` with a workflow_uuid column, workflow_status first."""
    with conn.transaction(), conn.cursor() as cursor:
        cursor.execute(
            """
            SELECT table_name FROM information_schema.columns
            WHERE table_schema = %s AND column_name = 'workflow_uuid'
            ORDER BY table_name <> 'workflow_status', table_name
            """,
            [schema],
        )
        tables = [f'"{schema}"."{name}"' for (name,) in cursor.fetchall()]
        copies = copies_for(cursor, tables[0], workflows)
        for table in tables:
            copy_rows(cursor, table, {"workflow_uuid": _suffixed("workflow_uuid")}, copies)
    conn.execute("VACUUM (ANALYZE)")
    return copies
