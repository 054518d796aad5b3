"""Celery tasks: thin. Load by id, call a service. The database is the outbox; a lost or
duplicated message costs at most a sweep interval, never a second dispatch."""

import logging

from celery import shared_task

from core.audit import SWEEPER, request_id_var

from . import dispatch, services

logger = logging.getLogger(__name__)


@shared_task(name="runs.dispatch_action", bind=True)
def dispatch_action(self, action_id: str):
    # A fallback: the dispatcher logs and audits under the id of the proposing request.
    request_id_var.set(self.request.id or "")
    dispatch.action_dispatch(action_id)


@shared_task(name="runs.reconcile_action", bind=True)
def reconcile_action(self, action_id: str):
    request_id_var.set(self.request.id or "")
    dispatch.action_reconcile(action_id)


@shared_task(name="runs.sweep", bind=True)
def sweep(self):
    request_id_var.set(self.request.id or "")
    expired = dispatch.expire_leases()
    requeued = dispatch.requeue_lost()
    due = dispatch.reconcile_due()
    requests = services.approval_requests_expire(actor=SWEEPER)
    reaped = services.runs_reap_stale(actor=SWEEPER)
    if expired or requeued or due or requests or reaped:
        logger.info(
            "sweep: %d leases expired, %d requeued, %d reconciles due, %d requests expired, "
            "%d stale runs reaped",
            len(expired),
            len(requeued),
            len(due),
            requests,
            reaped,
        )
