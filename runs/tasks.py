"""Celery tasks: thin. A message is only a wake-up; the work is in the database.

`runs.drain` claims and works due rows until none are left (`runs.engine.worker.drain`).
`runs.sweep` (beat, every SWEEP_INTERVAL_SECONDS) moves expired leases on, expires approval
requests, reaps stale runs, emits the time-based notifications (`runs.alerts`), and then
drains too (actions, reads and notification deliveries), whatever the wake-up flag says:
that is what bounds the cost of a lost wake-up or a killed worker to one sweep interval.
`runs.archive` (beat, every ARCHIVE_EVERY when it is set) is the retention archive.
"""

import logging

from celery import shared_task
from celery.signals import worker_ready, worker_shutting_down
from django.conf import settings

from core.audit import SWEEPER, request_id_var
from core.metrics import record_sweep

from . import alerts, decisions, retention, runtime
from .engine import leases, listen, worker
from .wakeup import wake_workers

logger = logging.getLogger(__name__)


@shared_task(name="runs.drain", bind=True)
def drain(self):
    request_id_var.set(self.request.id or "")
    worker.drain()


@shared_task(name="runs.sweep", bind=True)
def sweep(self):
    request_id_var.set(self.request.id or "")
    expired = leases.expire_leases()
    requests = decisions.approval_requests_expire(actor=SWEEPER)
    reaped = runtime.runs_reap_stale(actor=SWEEPER)
    alerted = alerts.alerts_sweep()
    if expired or requests or reaped or alerted:
        logger.info(
            "sweep: %d leases expired, %d requests expired, %d stale runs reaped, "
            "%d notifications due",
            len(expired),
            requests,
            reaped,
            alerted,
        )
    record_sweep()  # the alert on a dead beat or sweep watches this (README, "Metrics")
    request_id_var.set(self.request.id or "")
    worker.drain()


@shared_task(name="runs.archive", bind=True)
def archive(self):
    """ARCHIVE_EVERY, on beat: the retention archive (runs/retention.py)."""
    request_id_var.set(self.request.id or "")
    try:
        retention.archive_scheduled()
    except retention.ArchiveBusy:
        logger.info("archive: another archive is running; this one is skipped")


@worker_ready.connect
def _drain_on_start(**kwargs):
    # A worker that (re)starts, like a pod after a crash, looks for work at once rather
    # than at the next sweep; and listens for new work from then on (runs.engine.listen).
    if settings.WORKER_LISTEN:
        listen.listener.start()
    try:
        wake_workers(force=True)
    except Exception:
        logger.exception("could not send the start-up wake-up; the sweep will drain")


@worker_shutting_down.connect
def _finish_calls(**kwargs):
    # Let calls in flight finish and settle (each is bounded by its tool's timeout);
    # a worker killed instead leaves them to the lease path.
    listen.listener.stop()
    if worker._pool is not None:
        worker._pool.shutdown()
