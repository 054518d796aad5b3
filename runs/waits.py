"""`GET /actions/{id}?wait=N` without a poll loop: PostgreSQL LISTEN/NOTIFY.

Writer side: every move of a *watched* action out of the in-progress states (`queued`,
`dispatching`, `unknown`) notifies, inside the transaction that makes it (`notify_settled()`,
or the settling statement itself). PostgreSQL delivers a NOTIFY only when that transaction
commits, so a waiter never hears of a state it cannot yet read, and a rolled-back move says
nothing.

Watched: every action is (NULL, what the previous release's inserts write, reads as true),
but one its proposer claimed for itself (runs.claim: a proposal that waits for its own
dispatch, an MCP call). That proposer waits in its own thread, so its settle tells nobody
unless someone else waits too. A NOTIFY is not free: PostgreSQL signals every listening
backend (the workers' too, whatever their channel), and every web process's listener thread
takes the GIL to read it. Measured on a 2-core machine with two web processes and two
workers listening: about 0.3 ms of CPU per NOTIFY, against about 11 ms for a whole effect.

Anyone else who waits for such an action marks it first (`watch`): an UPDATE of its row, so
it is ordered against the settle's UPDATE by the row lock. A settle that takes the row after
the mark sees it (PostgreSQL re-reads a row that changed under an UPDATE) and notifies; a
settle that took it before has committed when the mark's UPDATE returns, and the state the
mark returns is the settled one. Only an action past the queue is ever marked (a claimed
one never is queued), so no worker's `SKIP LOCKED` lease steps around a waiter's lock.

Reader side: each web process runs one daemon thread holding one dedicated connection that
LISTENs on the channel and fans each notification out to the requests waiting on that
action (a dict of `threading.Event`s). A waiting request therefore costs an idle thread and
no database work while it waits (a mark the first time), instead of a query every 100 ms.

Caps, so that one principal's waits cannot take the web tier from everyone else: at most
`WAIT_MAX_PER_PRINCIPAL` concurrent waits per principal and `WAIT_MAX_PER_PROCESS` in all,
per web process; a wait beyond either cap answers at once with the current state (the
client asks again; the SDK does). The caps are per process on purpose: no shared counter to
keep right when a process dies.

Known quirks:
- A notification sent while the listener is reconnecting is lost; on reconnect every
  current waiter is woken to re-read, so the cost is one read, never a missed settle.
- LISTEN needs a session-level connection: behind PgBouncer in transaction mode, point
  `DATABASE_LISTEN_URL` at PostgreSQL itself (or a session-mode pool).
- During a rolling upgrade, a wait served by the previous release does not mark: for an
  action its proposer claimed it may sleep its whole wait and answer the state it finds
  then (in progress, at worst; the client asks again).
"""

import threading
from collections import defaultdict

from django.conf import settings
from django.db import connection

from core.perprocess import PerProcess

from .wakeup import listen

CHANNEL = "takeover_action_settled"
# Whose settle notifies, in SQL over a row of runs_action: a watched action's (NULL reads as
# watched). Every statement that notifies a settle filters by it.
ANNOUNCED = "watched IS NOT FALSE"
NOTIFY_SETTLED = f"""
SELECT pg_notify(%s, id::text) FROM runs_action WHERE id = ANY(%s::uuid[]) AND {ANNOUNCED}
"""  # noqa: S608 -- ANNOUNCED is a constant, not input


def notify_settled(action_ids) -> None:
    """Tell waiters these actions left the in-progress states (delivered at commit): the
    watched ones, read after the caller's move (which holds their rows until it commits)."""
    ids = [str(i) for i in action_ids]
    if not ids:
        return
    with connection.cursor() as cursor:
        cursor.execute(NOTIFY_SETTLED, [CHANNEL, ids])


# The mark, written only if missing, and the state: the marked row's, or the watched row's as
# the statement sees it (no row when a peer's mark landed between the two: then read again).
WATCH = f"""
WITH marked AS (
    UPDATE runs_action SET watched = true WHERE id = %(id)s AND NOT ({ANNOUNCED})
    RETURNING state
)
SELECT state FROM marked
UNION ALL
SELECT state FROM runs_action WHERE id = %(id)s AND {ANNOUNCED}
"""  # noqa: S608 -- ANNOUNCED is a constant, not input
STATE = "SELECT state FROM runs_action WHERE id = %(id)s"


def watch(action_id) -> str | None:
    """Mark the action watched, so that its settle notifies, and return its state as of the
    mark (None if there is no such action). Call it after registering the waiter's event and
    before deciding to wait: a state it returns in progress will be announced when it moves.
    Writes only the first time, committed the usual way (the mark outlives a restart)."""
    with connection.cursor() as cursor:
        cursor.execute(WATCH, {"id": action_id})
        row = cursor.fetchone()
        if row is None:
            cursor.execute(STATE, {"id": action_id})
            row = cursor.fetchone()
    return None if row is None else row[0]


class WaitRefused(Exception):
    """Over a cap: answer at once with the current state."""


class Waiters:
    """The per-process registry of waiting requests, and the listener that wakes them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: dict[str, set[threading.Event]] = defaultdict(set)
        self.per_principal: dict[object, int] = defaultdict(int)
        self.total = 0
        self.listener = PerProcess(self._start_listener)
        self.stopping = threading.Event()

    # --- waiting --------------------------------------------------------------------

    def register(self, action_id, principal_key) -> threading.Event:
        self.listener.get()
        event = threading.Event()
        with self.lock:
            if (
                self.total >= settings.WAIT_MAX_PER_PROCESS
                or self.per_principal.get(principal_key, 0) >= settings.WAIT_MAX_PER_PRINCIPAL
            ):
                raise WaitRefused()
            self.total += 1
            self.per_principal[principal_key] += 1
            self.events[str(action_id)].add(event)
        return event

    def unregister(self, action_id, principal_key, event: threading.Event) -> None:
        with self.lock:
            self.total -= 1
            self.per_principal[principal_key] -= 1
            if not self.per_principal[principal_key]:
                del self.per_principal[principal_key]
            waiting = self.events.get(str(action_id))
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self.events[str(action_id)]

    def wake(self, action_id: str) -> None:
        with self.lock:
            for event in self.events.get(action_id, ()):
                event.set()

    def wake_all(self) -> None:
        with self.lock:
            for waiting in self.events.values():
                for event in waiting:
                    event.set()

    # --- listening ------------------------------------------------------------------

    def _start_listener(self) -> threading.Thread:
        ready = threading.Event()
        listener = threading.Thread(
            target=self._listen, args=(ready,), name="takeover-listen", daemon=True
        )
        listener.start()
        # Do not let the first waiter miss a settle that lands before LISTEN is in place.
        ready.wait(5)
        return listener

    def _listen(self, ready: threading.Event) -> None:
        def connected(conn=None) -> None:
            ready.set()
            self.wake_all()  # whatever settled while we were away: re-read

        listen(
            CHANNEL,
            self.stopping,
            heard=self.wake,
            connected=connected,
            lost=connected,
            what="wait",
        )

    def stop(self) -> None:
        """End the listener and close its connection (before a test database is dropped)."""
        self.stopping.set()
        if (listener := self.listener.made_here()) is not None:
            listener.join(5)
        self.listener.forget()
        self.stopping.clear()


waiters = Waiters()
