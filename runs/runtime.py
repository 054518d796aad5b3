"""What a runtime does to its run: start it (its input file copied into our storage),
heartbeat, finish it with its own account of what it called, and claim a pending replay;
and the reaper, which ends a run whose runtime went quiet (`runs_reap_stale`). Each status
change is `moves.run_move`."""

import hashlib
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.audit import Actor, Verb, audit
from core.errors import RunNotRunning, StateConflict

from .models import Run
from .moves import run_move
from .states import RunStatus


def run_start(
    *,
    principal,
    trigger: str,
    config: dict,
    session_id: str | None = None,
    input_file=None,
    actor: Actor,
) -> Run:
    """Record a run as it starts, copying its input file into our storage."""
    now = timezone.now()
    run = Run(
        tenant=principal.tenant,
        principal=principal,
        trigger=trigger,
        config=config,
        session_id=session_id or uuid.uuid4().hex,
        status=RunStatus.RUNNING,
        attempts=1,
        started_at=now,
        heartbeat_at=now,
    )
    try:
        with transaction.atomic():
            if input_file is not None:
                _store_input(run, input_file)
            run.save()
            audit(
                actor=actor,
                verb=Verb.RUN_START,
                obj=run,
                after={"status": run.status, "trigger": trigger, "input_sha256": run.input_sha256},
            )
    except BaseException:
        # The copy is written before the row (the row records its size and digest); if the
        # row does not commit, the copy must not outlive it.
        if run.input_file:
            run.input_file.storage.delete(run.input_file.name)
        raise
    return run


def _store_input(run: Run, upload) -> None:
    digest = hashlib.sha256()
    size = 0
    for chunk in upload.chunks():
        digest.update(chunk)
        size += len(chunk)
    upload.seek(0)
    run.input_name = upload.name[:255]
    run.input_size = size
    run.input_sha256 = digest.hexdigest()
    # A copy, not a pointer: the bytes are written into our own storage now.
    run.input_file.save(upload.name, upload, save=False)


def _lock_running_run(run_id, principal) -> Run:
    run = Run.objects.select_for_update(no_key=True).get(pk=run_id, principal=principal)
    if run.status != RunStatus.RUNNING:
        raise RunNotRunning(f"This run is {run.status}, not running.")
    return run


def run_heartbeat(run: Run, *, actor: Actor) -> Run:
    now = timezone.now()
    updated = Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING).update(heartbeat_at=now)
    run.refresh_from_db()
    if updated != 1:
        raise RunNotRunning(f"This run is {run.status}, not running.")
    return run


def run_finish(
    run: Run, *, status: str, error_message: str = "", tools_called, actor: Actor
) -> Run:
    """The runtime's own account of how the run ended and which tools it called.

    `tools_called` is a list, or None when the runtime could not check its own session.
    """
    if status not in {RunStatus.SUCCESS, RunStatus.ERROR, RunStatus.CANCELLED}:
        raise StateConflict(f"A run cannot finish as {status}.")
    reported = sorted(set(tools_called)) if tools_called is not None else None
    now = timezone.now()
    with transaction.atomic():
        run = _lock_running_run(run.pk, run.principal)
        run_move(
            run,
            status,
            actor=actor,
            reason=error_message,
            after={"tools_called": reported},
            error_message=error_message,
            tools_reported=reported,
            finished_at=now,
            heartbeat_at=now,
        )
    return run


def run_claim(*, principal, actor: Actor) -> Run | None:
    """Atomically take the oldest pending run (a replay) of this principal, or None.

    SKIP LOCKED lets several runtimes claim at once without waiting on each other; the
    status condition in the UPDATE makes a double claim impossible even without it.
    """
    with transaction.atomic():
        run = (
            Run.objects.select_for_update(skip_locked=True)
            .filter(principal=principal, status=RunStatus.PENDING)
            .order_by("created_at", "pk")
            .first()
        )
        if run is None:
            return None
        now = timezone.now()
        run_move(
            run,
            RunStatus.RUNNING,
            actor=actor,
            after={"attempts": run.attempts + 1},
            started_at=now,
            heartbeat_at=now,
            attempts=run.attempts + 1,
        )
    return run


def stale_message() -> str:
    hours = settings.RUN_STALE_AFTER / 3600
    return f"No completion record within {hours:g} hours; actual outcome unknown."


def runs_reap_stale(*, actor: Actor, limit: int = 500) -> int:
    """running with no heartbeat or finish for RUN_STALE_AFTER → error.

    The UPDATE is conditional on status = running (and the heartbeat still old), so any
    number of reapers may run at once: each run is reaped, and audited, exactly once.
    """
    now = timezone.now()
    cutoff = now - timedelta(seconds=settings.RUN_STALE_AFTER)
    stale = list(
        Run.objects.filter(status=RunStatus.RUNNING, heartbeat_at__lt=cutoff).values_list(
            "pk", "tenant_id"
        )[:limit]
    )
    reaped = 0
    message = stale_message()
    for run_id, tenant_id in stale:
        run = Run(pk=run_id, tenant_id=tenant_id, status=RunStatus.RUNNING)
        with transaction.atomic():
            reaped += run_move(
                run,
                RunStatus.ERROR,
                actor=actor,
                reason=message,
                where={"heartbeat_at__lt": cutoff},
                error_message=message,
                finished_at=now,
            )
    return reaped
