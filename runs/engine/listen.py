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

This is a shortcut, not a second queue: the broker's wake-up flag is left alone
(`drain(take_wakeup=False)`), so the broker path works exactly as before and covers what
a listener can miss (reconnecting, or not running). On reconnect the drainer drains once,
for whatever was proposed meanwhile.
"""

import functools
import logging
import threading

from django.db import close_old_connections, connection

from ..wakeup import QUEUED, WORK_CHANNEL, listen

logger = logging.getLogger(__name__)


class WorkListener:
    def __init__(self) -> None:
        self.heard = threading.Event()
        self.lock = threading.Lock()
        self.everything = True  # heard of something other than new queued actions
        self.unnamed = False  # heard of new queued actions without their keys
        self.named: list[str] = []  # the keys of new queued actions heard
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
        # On each connection, drain once: whatever was proposed while we were away.
        connected = functools.partial(self._hear, "")
        listen(WORK_CHANNEL, self.stopping, heard=self._hear, connected=connected, what="work")

    def _hear(self, payload: str) -> None:
        kind, _, action_id = payload.partition(" ")
        with self.lock:
            if kind != QUEUED:
                self.everything = True
            elif action_id:
                self.named.append(action_id)
            else:
                self.unnamed = True
            self.heard.set()

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
