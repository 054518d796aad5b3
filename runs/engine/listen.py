"""A worker that listens: new work reaches a worker process without the broker's round trip.

Each Celery worker process (started from `runs.tasks` when the worker is ready, unless
`WORKER_LISTEN` is off) runs two daemon threads:
- the listener holds one session-level connection that `LISTEN`s on `takeover_work`
  (`runs.wakeup.notify_work`, sent inside every proposal's transaction, so heard only once
  the row is committed) and sets an event for each notification;
- the drainer waits on that event and drains (`worker.drain`) at once: it claims with
  `FOR UPDATE SKIP LOCKED` like any drainer, so two processes hearing the same notification
  never claim the same row. Told only of new queued actions, it leases only those: by
  their keys when each notification named its action (`queued <id>`) and they fit in the
  process's pool, a probe of the primary key instead of a search of the queue; otherwise
  the queue's oldest first, tenants interleaved. Unknowns due and deliveries wake it with
  a payload of their own (`wake_workers`).

Every listening process hears every notification, but a named action is leased by one of
them only: its *share*. Each listener's session is named (`application_name`) so that the
listeners find each other in `pg_stat_activity`, every `MEMBERS_SECONDS`; sorted, the
names give each process its place, and an action belongs to the place its key falls on
(the key modulo the number of listeners). So a proposal costs one lease statement, not one
per worker process (measured: the losers' leases were a third of the database's CPU per
effect with two workers). A key that is not this process's share is kept for
`PEER_GRACE_SECONDS`, then looked at once more: if it is still queued (its owner died, or
the two processes disagreed on the members while one came or went), this process leases
it. Sharing only saves work: two processes leasing the same key still dispatch it once
(`FOR UPDATE SKIP LOCKED`, and the lease moves it out of `queued`).

This is a shortcut, not a second queue: the broker's wake-up flag is left alone
(`drain(take_wakeup=False)`), so the broker path works exactly as before and covers what
a listener can miss (reconnecting, or not running). On reconnect the drainer drains once,
for whatever was proposed meanwhile.
"""

import logging
import threading
import time
import uuid

from django.db import close_old_connections, connection

from ..wakeup import QUEUED, WORK_CHANNEL, listen

logger = logging.getLogger(__name__)

NAME_PREFIX = "takeover-work-listener "
MEMBERS_SECONDS = 2.0  # how often a listener looks for its peers
PEER_GRACE_SECONDS = 0.5  # how long a peer's key waits before this process looks again
MEMBERS = (
    "SELECT application_name FROM pg_stat_activity "
    "WHERE datname = current_database() AND application_name LIKE %s"
)
STILL_QUEUED = "SELECT id::text FROM runs_action WHERE id = ANY(%s::uuid[]) AND state = 'queued'"


class Share:
    """This process's place among the listening processes: which named actions it leases."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.names = [name]  # the listeners found, sorted (this one among them)
        self.looked = 0.0

    def look(self, conn) -> None:
        """Find the listeners of this database in `pg_stat_activity` (this one among them)."""
        rows = conn.execute(MEMBERS, [NAME_PREFIX + "%"]).fetchall()
        names = sorted(name for (name,) in rows)
        if self.name not in names:  # not visible to itself (yet): take everything
            names = [self.name]
        self.names = names
        self.looked = time.monotonic()

    def due(self) -> bool:
        return time.monotonic() - self.looked >= MEMBERS_SECONDS

    def owner(self, action_id: str) -> str:
        """The name of the listener whose share the key is: the key modulo the number of
        listeners, as a place in their sorted names (this one's, for a key that is not a
        UUID: the lease will judge it)."""
        try:
            return self.names[uuid.UUID(action_id).int % len(self.names)]
        except ValueError:
            return self.name

    def owns(self, action_id: str) -> bool:
        return self.owner(action_id) == self.name


class WorkListener:
    def __init__(self) -> None:
        self.heard = threading.Event()
        self.lock = threading.Lock()
        self.everything = True  # heard of something other than new queued actions
        self.unnamed = False  # heard of new queued actions without their keys
        self.named: list[str] = []  # the keys of new queued actions heard
        self.peers: list[tuple[float, str]] = []  # (heard at, key) of peers' keys
        self.share = Share(NAME_PREFIX + uuid.uuid4().hex[:16])
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        if self.threads:
            return
        for name, target in (("listen", self._listen), ("drain", self._drain)):
            thread = threading.Thread(target=target, name=f"takeover-work-{name}", daemon=True)
            thread.start()
            self.threads.append(thread)

    def stop(self) -> None:
        self.stopping.set()
        self.heard.set()
        for thread in self.threads:
            thread.join(5)
        self.threads = []

    def _listen(self) -> None:
        listen(
            WORK_CHANNEL,
            self.stopping,
            heard=self._hear,
            connected=self._connected,
            tick=self._tick,
            application_name=self.share.name,
            what="work",
        )

    def _connected(self, conn) -> None:
        # On each connection, drain once: whatever was proposed while we were away.
        self.share.look(conn)
        self._hear("")

    def _tick(self, conn) -> None:
        if self.share.due():
            self.share.look(conn)
        with self.lock:
            if self.peers and time.monotonic() - self.peers[0][0] >= PEER_GRACE_SECONDS:
                self.heard.set()

    def _hear(self, payload: str) -> None:
        kind, _, action_id = payload.partition(" ")
        with self.lock:
            if kind != QUEUED:
                self.everything = True
            elif not action_id:
                self.unnamed = True
            elif self.share.owns(action_id):
                self.named.append(action_id)
            else:
                self.peers.append((time.monotonic(), action_id))
                return  # a peer's: looked at again after the grace
            self.heard.set()

    def _peers_left(self) -> list[str]:
        """The peers' keys past their grace that are still queued: their owner did not
        lease them."""
        with self.lock:
            cutoff = time.monotonic() - PEER_GRACE_SECONDS
            due = [key for heard, key in self.peers if heard <= cutoff]
            self.peers = [(heard, key) for heard, key in self.peers if heard > cutoff]
        if not due:
            return []
        with connection.cursor() as cursor:
            cursor.execute(STILL_QUEUED, [due])
            return [key for (key,) in cursor.fetchall()]

    def _drain(self) -> None:
        from .worker import dispatch_pool, drain

        while not self.stopping.is_set():
            self.heard.wait()
            if self.stopping.is_set():
                break
            with self.lock:
                self.heard.clear()
                everything, unnamed, named = self.everything, self.unnamed, self.named
                self.everything, self.unnamed, self.named = False, False, []
            try:
                close_old_connections()
                named += self._peers_left()
                if not (everything or unnamed or named):
                    continue
                if everything or unnamed or len(named) > dispatch_pool().size:
                    # A backlog: the queue's own order keeps one tenant's burst from
                    # starving another's action.
                    drain(take_wakeup=False, queued_only=not everything)
                else:
                    drain(take_wakeup=False, queued_only=True, only=named)
            except Exception:
                logger.exception("listening drain failed; the broker path and the sweep remain")
                if connection.connection is not None:
                    connection.close()
                self.stopping.wait(0.5)


listener = WorkListener()
