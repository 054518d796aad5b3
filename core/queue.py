"""The database is the queue (docs/design.md, "The database is the queue"): how a worker
leases due rows, for the action engine (`runs.engine.leases`) and the notifications'
outbox (`notifications.delivery`) alike.

A lease is one transaction: lock the due rows with `FOR UPDATE SKIP LOCKED` (any number of
workers lease at once, none waits, none takes a row twice), then hold them: push each row's
due time past the longest its work may take, or move it to a state nobody else leases. The
work runs after commit, with no lock held; a worker that dies leaves its rows due again
when their lease runs out.
"""

from collections.abc import Callable

from django.db import connection, transaction


def lock_due(sql: str, params) -> list:
    """The ids that `sql` (a SELECT of ids, FOR UPDATE SKIP LOCKED) locks, in the caller's
    transaction."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]


def lease(sql: str, params, *, hold: Callable[[list], object]) -> list:
    """Lock the due rows `sql` selects and `hold(ids)` them, in one transaction. Returns the
    ids (none: nothing was due, or other workers hold it all)."""
    with transaction.atomic():
        ids = lock_due(sql, params)
        if ids:
            hold(ids)
    return ids
