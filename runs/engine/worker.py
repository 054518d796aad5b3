"""How a woken worker works: `drain` leases due rows in batches and works them on the
process's thread pool (`DispatchPool`): dispatches, reconciliation reads and notification
deliveries. The Celery tasks `runs.drain` and `runs.sweep` call it (`runs/tasks.py`)."""

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import connection

from notifications.delivery import deliver_leased, lease_deliveries

from ..states import ActionState
from ..wakeup import wake_workers, wakeup_taken
from .dispatch import dispatch_leased
from .leases import lease_queued, lease_unknown, read_lease_for
from .reconcile import reconcile_loaded

logger = logging.getLogger(__name__)


class DispatchPool:
    """Per worker process: `DISPATCH_CONCURRENCY` threads for tool calls and reads, and as
    many permits. A drainer leases only as many rows as it holds permits, so a leased
    action's call starts at once: its lease never runs down while it waits in a queue."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.permits = threading.Semaphore(size)
        self.executor = ThreadPoolExecutor(size, thread_name_prefix="dispatch")

    def acquire(self, want: int, timeout: float, linger: float = 0.0) -> int:
        """Block for one permit, then take up to `want`. Under load permits come back one
        at a time; waiting up to `linger` for more lets one lease transaction carry several
        rows instead of one each (measured: ~1 write transaction per effect saved)."""
        if not self.permits.acquire(timeout=timeout):
            return 0
        held = 1
        deadline = time.monotonic() + linger
        while held < want:
            if self.permits.acquire(blocking=False):
                held += 1
            elif held >= want // 2 or (left := deadline - time.monotonic()) <= 0:
                break
            elif self.permits.acquire(timeout=left):
                held += 1
        return held

    def release(self, count: int) -> None:
        for _ in range(count):
            self.permits.release()

    def submit(self, fn, *args) -> None:
        self.executor.submit(self._run, fn, *args)

    def _run(self, fn, *args) -> None:
        try:
            fn(*args)
        except Exception:
            # A dispatch cut short (database gone, say) leaves its action `dispatching`
            # under a lease; the sweeper moves it to unknown and it is reconciled. Never
            # retried here: we cannot know whether the request left.
            logger.exception("dispatch job %s failed", getattr(fn, "__name__", fn))
            if connection.connection is not None:
                connection.close()  # a broken connection must not poison the next job
        finally:
            self.permits.release()

    def shutdown(self) -> None:
        self.executor.shutdown(wait=True)


_pool: DispatchPool | None = None
_pool_lock = threading.Lock()


def dispatch_pool() -> DispatchPool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = DispatchPool(settings.DISPATCH_CONCURRENCY)
        return _pool


def dispatch_then_read(action, attempt) -> None:
    """A pool job: dispatch a leased action, and when its answer was lost (unknown), read it
    at once in this thread: its reconciliation is due now, and waking every worker to race
    for it costs more than the read. The settle that records the unknown also leases its
    read to this thread (as `lease_unknown` would), so no peer reads it meanwhile; if this
    thread dies, the read is due again when that lease runs out."""
    lease = read_lease_for(action.tool)
    if dispatch_leased(action, attempt, read_lease=lease) == ActionState.UNKNOWN:
        reconcile_loaded(action)


def drain(
    *,
    max_seconds: float | None = None,
    take_wakeup: bool = True,
    queued_only: bool = False,
    only: list | None = None,
) -> int:
    """Lease and work due rows until none are left (or time is up); returns how many.

    Dispatches, reconciliation reads and notification deliveries run on the process's pool;
    this loop only leases.
    When a lease comes back full there may be more work than this process can take, so one
    more wake-up goes out (deduplicated) for a peer. Out of time with work left, it hands
    over to a fresh wake-up rather than holding a worker slot for ever.

    `take_wakeup=False` is the listening drainer's (`runs.engine.listen`): it leaves the
    broker's flag alone, and stops at the first claim that comes back short of what it could
    take, since anything newer sends it a notification of its own. `queued_only` (it heard
    only of new queued actions): it leases those and nothing else, since unknowns due and
    deliveries send their own wake-ups. `only`: the keys of the queued actions it heard of;
    it leases those (any a peer took first are skipped) and stops.
    """
    if take_wakeup:
        wakeup_taken()
    pool = dispatch_pool()
    batch = settings.CLAIM_BATCH_SIZE
    deadline = time.monotonic() + (max_seconds or settings.DRAIN_MAX_SECONDS)
    worked = 0
    named = list(only) if only is not None else None
    while time.monotonic() < deadline:
        if named is not None:
            if not named:
                return worked
            held = pool.acquire(min(batch, len(named)), timeout=1.0)
            take, named = named[:held], named[held:]
        else:
            held = pool.acquire(batch, timeout=1.0, linger=settings.CLAIM_LINGER_SECONDS)
        if not held:
            continue
        try:
            leased = lease_queued(held, only=take) if named is not None else lease_queued(held)
            due, sends = [], []
            if not queued_only and len(leased) < held:
                due = lease_unknown(held - len(leased))
                # Notification deliveries take what the engine's own work left of the permits.
                sends = lease_deliveries(held - len(leased) - len(due))
        except BaseException:
            pool.release(held)
            raise
        pool.release(held - len(leased) - len(due) - len(sends))
        for action, attempt in leased:
            pool.submit(dispatch_then_read, action, attempt)
        for action in due:
            pool.submit(reconcile_loaded, action)
        for delivery_id in sends:
            pool.submit(deliver_leased, delivery_id)
        got = len(leased) + len(due) + len(sends)
        worked += got
        if named is not None:
            continue
        if not got or (not take_wakeup and got < held):
            return worked
        if got == batch:
            wake_workers()
    wake_workers(force=True)
    return worked
