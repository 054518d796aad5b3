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

Workers that listen (`runs.engine.listen`, on unless `WORKER_LISTEN=0`) hear of new work
without the broker: every proposal also sends `NOTIFY takeover_work` in its transaction
(heard at commit, so never before the row can be read), every other wake-up sends it too,
and a thread of each worker process that hears it drains at once. That path leaves the flag
alone. With listening on, a new queued action sends no broker wake-up at all (its
notification names it): a listener that was away drains everything when it is back, a worker
that starts drains at once, and the sweep drains whatever the flag says, so a wake-up no
listener heard costs at most one sweep interval, as a lost broker message does. Listening off
(`WORKER_LISTEN=0`, for web and workers alike: PgBouncer in transaction mode), every wake-up
goes through the broker as above.
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
WORK_CHANNEL = "takeover_work"


QUEUED = "queued"  # the payload of a notification about new queued actions only


def queued_note(action_id) -> str:
    """The payload that names one new queued action: a listening worker leases it by its key
    instead of searching the queue (`runs.engine.listen`)."""
    return f"{QUEUED} {action_id}"


def notify_work(kind: str = "") -> None:
    """Tell the listening workers (runs.engine.listen) there is work: `QUEUED` when it is
    only new queued actions, "" for any kind (unknowns due, deliveries). Inside a
    transaction it is heard when that commits, and costs no transaction of its own (a
    NOTIFY takes an xid): a proposal sends it in its own transaction."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [WORK_CHANNEL, kind])


def listen_conninfo(application_name: str = "") -> str:
    """A session-level connection for LISTEN: DATABASE_LISTEN_URL, or the database's own."""
    import os

    from psycopg.conninfo import make_conninfo

    named = {"application_name": application_name} if application_name else {}
    if url := os.environ.get("DATABASE_LISTEN_URL"):
        return make_conninfo(url, **named)
    params = connection.get_connection_params()
    keep = {"dbname", "user", "password", "host", "port", "sslmode", "sslrootcert"}
    return make_conninfo(**{k: v for k, v in params.items() if k in keep and v}, **named)


def listen(
    channel: str,
    stopping,
    *,
    heard,
    connected,
    what: str,
    lost=None,
    tick=None,
    application_name: str = "",
) -> None:
    """LISTEN on `channel` until `stopping` is set, on a connection of its own that is
    opened again whenever it is lost (a listener must outlive database restarts):
    `connected(conn)` each time LISTEN is in place (what was sent before was not heard),
    `heard(payload)` for each notification, `tick(conn)` at least once a second between
    them, `lost()` when the connection is. `application_name` names the session, so that
    peers can find it in `pg_stat_activity`."""
    import psycopg

    backoff = 0.5
    while not stopping.is_set():
        try:
            with psycopg.connect(listen_conninfo(application_name), autocommit=True) as conn:
                conn.execute(f"LISTEN {channel}")
                connected(conn)
                backoff = 0.5
                while not stopping.is_set():
                    # A short timeout only so that `stop()` is heard within a second.
                    for note in conn.notifies(timeout=1.0 if tick is None else 0.25):
                        heard(note.payload)
                    if tick is not None:
                        tick(conn)
        except Exception:
            if stopping.is_set():
                break
            logger.warning("%s listener lost its connection; reconnecting", what, exc_info=True)
            if lost is not None:
                lost()
            stopping.wait(backoff)
            backoff = min(backoff * 2, 10)


def wake_workers(*, force: bool = False, notify: bool = True) -> bool:
    """Send one wake-up unless one is already pending (always, with `force`); and, unless
    the caller already did (`notify=False`), tell the listening workers.

    Runs in autocommit (it is called from `on_commit`): the flag must never be set inside a
    transaction that could still roll back, or a drainer could clear it too early.
    """
    if notify:
        notify_work()
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
