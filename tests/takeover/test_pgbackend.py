"""The application's connection: a health check with no round trip, server-side binding
with prepared statements, and a connection the server dropped replaced before it is used."""

import datetime
import time

import pytest
from django.db import connections


@pytest.fixture
def own_connection(live_db):
    """A connection of the application's role outside the test's transaction."""
    conn = connections.create_connection("default")
    conn.ensure_connection()
    yield conn
    conn.close()


@pytest.fixture
def owner():
    """A fresh connection as the owner, who sees every session (a test earlier in the run
    may have restarted the server under the shared one)."""
    conn = connections.create_connection("owner")
    yield conn
    conn.close()


def last_statement_of(owner, pid: int) -> str:
    with owner.cursor() as cursor:
        cursor.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", [pid])
        return cursor.fetchone()[0]


def test_an_idle_healthy_connection_is_checked_without_a_statement(own_connection, owner):
    with own_connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid() AS marker")
        pid = cursor.fetchone()[0]
    own_connection.health_check_done = False
    own_connection.close_if_health_check_failed()
    assert own_connection.connection is not None
    assert "marker" in last_statement_of(owner, pid), "the check sent a statement"


def test_a_connection_the_server_closed_is_replaced_before_the_next_query(own_connection, owner):
    with own_connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    with owner.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the server's FATAL notice reaches the socket
        with owner.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
            if cursor.fetchone()[0] == 0:
                break
        time.sleep(0.05)
    own_connection.health_check_done = False
    own_connection.close_if_health_check_failed()
    assert own_connection.connection is None, "a dead connection was kept"
    with own_connection.cursor() as cursor:  # reconnects on use
        cursor.execute("SELECT pg_backend_pid()")
        assert cursor.fetchone()[0] != pid


def test_the_hot_statements_are_prepared_on_the_server(own_connection):
    for _ in range(6):
        with own_connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM runs_action WHERE id = %s", [None])
    with own_connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
            ["%FROM runs_action WHERE id = $1%"],
        )
        assert cursor.fetchone()[0] == 1


TIMESTAMPS = [
    "2026-12-03 09:30:00.123456+00",
    "2026-12-03 10:30:00.5+01",  # another offset: the same instant in UTC
    "1999-12-31 23:59:59.999999-08",
    "0001-01-01 00:00:00+00",
    "9999-12-31 23:59:59.999999+00",
    "2024-02-29 12:00:00+05:45",
]


def test_timestamps_are_read_by_psycopg_c_loader_as_djangos_would_read_them(own_connection):
    from django.db.backends.postgresql.psycopg_any import register_tzloader

    from takeover.pgbackend.base import PSYCOPG_LOADER, TIMESTAMPTZ, UTCTimestamptzLoader

    select = "SELECT " + ", ".join(["%s::timestamptz"] * len(TIMESTAMPS)) + ", NULL::timestamptz"
    with own_connection.cursor() as cursor:
        cursor.execute(select, TIMESTAMPS)
        ours = cursor.fetchone()
        loader = cursor.cursor._tx.get_loader(TIMESTAMPTZ, 0)
    with own_connection.cursor() as cursor:
        register_tzloader(datetime.UTC, cursor.cursor)  # Django's own, on this cursor
        cursor.execute(select, TIMESTAMPS)
        djangos = cursor.fetchone()
    assert ours == djangos and ours[-1] is None
    assert all(value.tzinfo is datetime.UTC for value in ours[:-1])
    assert isinstance(loader, UTCTimestamptzLoader)
    assert type(loader.load.__self__) is PSYCOPG_LOADER  # the C one where psycopg has it


def test_a_named_cursor_reads_timestamps_the_same(own_connection):
    """Django's named (server-side) cursors go through the same check of the loader."""
    own_connection.set_autocommit(False)
    try:
        with own_connection.chunked_cursor() as cursor:
            assert cursor.cursor.name, "not a named cursor"
            cursor.execute("SELECT %s::timestamptz", [TIMESTAMPS[1]])
            (value,) = cursor.fetchone()
    finally:
        own_connection.rollback()
        own_connection.set_autocommit(True)
    assert value == datetime.datetime(2026, 12, 3, 9, 30, 0, 500000, tzinfo=datetime.UTC)
    assert value.tzinfo is datetime.UTC
