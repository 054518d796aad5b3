"""Wake-ups, not messages: the broker never carries the unit of work (docs: the database is
the queue).

Work lives in `runs_action` rows. A worker that is awake drains it: it claims batches with
`FOR UPDATE SKIP LOCKED` until nothing is due (`runs.engine.worker.drain`). A Celery message
(`runs.drain`) only wakes a worker, and at most one is pending at a time: the single row of
`runs_wakeup` says whether one was sent and not yet picked up. So the broker's depth stays in
the order of the number of workers whatever the backlog, and a burst of 10,000 proposals
costs a handful of messages.

The order that makes this safe: a proposer sets the flag *after* its action committed; a
drainer clears the flag *before* it claims. Either the drainer's claim sees the action, or
the proposer sees the flag cleared and sends a new message. A message that is lost (broker
restart, a worker killed with it prefetched) leaves the flag set; the periodic sweep and a
worker's start drain regardless of the flag, so a lost wake-up costs at most one sweep
interval.
"""

import logging

from django.conf import settings
from django.db import connection

logger = logging.getLogger(__name__)

DRAIN_TASK = "runs.drain"
SEND_UNLESS_PENDING = (
    "UPDATE runs_wakeup SET pending_since = now() WHERE id = 1 AND pending_since IS NULL"
)
SEND_ALWAYS = "UPDATE runs_wakeup SET pending_since = now() WHERE id = 1"


def wake_workers(*, force: bool = False) -> bool:
    """Send one wake-up unless one is already pending (always, with `force`).

    Runs in autocommit (it is called from `on_commit`): the flag must never be set inside a
    transaction that could still roll back, or a drainer could clear it too early.
    """
    with connection.cursor() as cursor:
        cursor.execute(SEND_ALWAYS if force else SEND_UNLESS_PENDING)
        if cursor.rowcount != 1:
            return False
    from celery import current_app

    try:
        current_app.send_task(DRAIN_TASK, expires=settings.WAKEUP_EXPIRES_SECONDS)
    except Exception:
        # Nothing is pending after all: let the next proposal try again.
        wakeup_taken()
        raise
    return True


def wakeup_taken() -> None:
    """A drainer is awake: the next new work must send a new wake-up."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_wakeup SET pending_since = NULL WHERE id = 1 AND pending_since IS NOT NULL"
        )
