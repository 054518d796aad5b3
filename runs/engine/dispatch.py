"""Dispatch over the tool protocol (docs/design.md, "The tool protocol"): call a leased
action's tool and settle it.

The order of a dispatch, each step its own transaction:
1. lease (a batch at once, `leases.lease_queued`): queued → dispatching, approval consumed,
   lease set, attempt 1 opened, audited. Committed before any byte goes out (invariant 1).
   No row lock outlives this step.
2. the HTTP call, outside any transaction (`protocol.call_tool`).
3. settle: the attempt is closed with its classification and the action moves, together.
So a happy-path effect costs three write transactions (propose, its share of a lease,
settle), or two when its proposer claimed it in the proposal's own statement and dispatches
it itself (runs/claim.py: a request that waits for the outcome). A killed worker's leased
rows come back when their leases run out (`leases.expire_leases`), as unknowns to
reconcile, never as queued.
"""

import contextlib
import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core import metrics, otel
from core.audit import DISPATCHER, Actor
from core.logs import log_context

from ..models import Action, Attempt
from ..moves import action_move, action_settle_dispatch
from ..states import ActionState, AttemptKind, AttemptOutcome, FailureReason, Resolution
from ..wakeup import wake_workers
from .leases import action_lease, lease_for
from .protocol import CallResult, call_tool

logger = logging.getLogger(__name__)


def _close_attempt(attempt: Attempt, result: CallResult) -> bool:
    """Record how the attempt ended. False if the sweeper already wrote it off."""
    updated = Attempt.objects.filter(pk=attempt.pk, finished_at__isnull=True).update(
        finished_at=timezone.now(),
        outcome=result.outcome,
        http_status=result.http_status,
        detail=result.detail,
    )
    if updated != 1:
        # Answered after the lease expired: keep the real answer, say it came late.
        Attempt.objects.filter(pk=attempt.pk).update(
            outcome=result.outcome,
            http_status=result.http_status,
            detail=f"{result.detail} (answered after the dispatch lease expired)",
        )
    return updated == 1


def _retry_attempt(action: Action, number: int) -> Attempt | None:
    """Open the safe retry, only while the action is still ours and dispatching."""
    with transaction.atomic():
        current = Action.objects.select_for_update(no_key=True).get(pk=action.pk)
        if current.state != ActionState.DISPATCHING:
            return None
        return Attempt.objects.create(
            action=action, number=number, started_at=timezone.now(), kind=AttemptKind.SAFE_RETRY
        )


SETTLE = {
    AttemptOutcome.APPLIED: (ActionState.SUCCEEDED, {"resolution": Resolution.APPLIED}),
    AttemptOutcome.VERSION_CONFLICT: (
        ActionState.FAILED,
        {"failure_reason": FailureReason.VERSION_CONFLICT},
    ),
    AttemptOutcome.REJECTED: (ActionState.FAILED, {"failure_reason": FailureReason.REJECTED}),
    AttemptOutcome.NOT_SENT: (ActionState.FAILED, {"failure_reason": FailureReason.NOT_SENT}),
    AttemptOutcome.UNKNOWN: (ActionState.UNKNOWN, {}),
}


# A resend follows an unknown outcome: its own "never sent" proves nothing about the earlier
# attempt, so it leaves the action unknown (for the next resend, or a person), never failed.
RESEND_SETTLE = {**SETTLE, AttemptOutcome.NOT_SENT: (ActionState.UNKNOWN, {})}


def settle(
    action: Action,
    attempt: Attempt,
    result: CallResult,
    *,
    actor: Actor,
    table=SETTLE,
    read_lease: timedelta | None = None,
    unflushed: bool = False,
) -> str | None:
    """Close the attempt and settle the action together (the third and last write of a
    happy-path effect: propose, lease, settle). Returns the state it settled in (None: the
    sweeper had written the worker off). An action gone unknown wakes the workers for its
    read, unless the caller reads it itself: then `read_lease` is how long the read is
    leased to it, in the same statement. `unflushed`: a read's settle, committed without
    waiting for the WAL flush (`moves.action_settle_dispatch`)."""
    target, fields = table[result.outcome]
    why = (
        f"the tool answered HTTP {result.http_status}"
        if result.outcome == AttemptOutcome.APPLIED
        else result.detail[:500]
    )
    if action_settle_dispatch(
        action,
        attempt,
        to=target,
        outcome=result.outcome,
        http_status=result.http_status,
        detail=result.detail,
        actor=actor,
        reason=why,
        read_lease=read_lease,
        unflushed=unflushed,
        **fields,
    ):
        if target == ActionState.UNKNOWN and read_lease is None:
            wake_workers()  # its reconciliation is due now
        return target
    # The sweeper wrote the worker off (lease expired) before the answer came.
    with transaction.atomic():
        _close_attempt(attempt, result)
        current = Action.objects.filter(pk=action.pk).values_list("state", flat=True).first()
        if current == ActionState.UNKNOWN and target in {ActionState.SUCCEEDED, ActionState.FAILED}:
            # ... but the tool did answer, definitively.
            action.state = ActionState.UNKNOWN
            action_move(
                action,
                target,
                actor=actor,
                reason="definitive answer from the tool after the dispatch lease expired",
                next_reconcile_at=None,
                **fields,
            )


@contextlib.contextmanager
def action_log_context(action: Action, span: str):
    """Log (and audit) the work on an action under the id of the request that proposed it,
    with its tenant, run and id (core/logs.py), and trace it in that request's trace
    (core/otel.py), so one proposal can be followed from the HTTP request to the tool call."""
    values = {"action_id": action.pk, "run_id": action.run_id, "tenant": action.tenant.slug}
    with (
        log_context(**values, request_id=action.request_id or ""),
        otel.span_in_request_trace(
            span, action.request_id, action_id=action.pk, tool=action.tool.name
        ),
    ):
        yield


def lease_running_out(action: Action) -> bool:
    """Too little of the lease is left to start a call: less than half the grace."""
    if action.lease_expires_at is None:
        return False
    margin = timedelta(seconds=settings.DISPATCH_LEASE_GRACE_SECONDS / 2)
    return timezone.now() >= action.lease_expires_at - margin


def fits_in(tool, seconds: float) -> bool:
    """Whether a dispatch to `tool` ends within `seconds` however it goes: every attempt
    taking the tool's whole timeout, and the safe retries' delays between them."""
    retries = settings.SAFE_RETRY_LIMIT
    worst = tool.timeout_seconds * (retries + 1) + settings.SAFE_RETRY_DELAY_SECONDS * retries
    return worst <= seconds


def claim_for(tool, seconds: float) -> dict:
    """`action_propose`'s arguments for a proposer that waits `seconds` for the outcome: it
    claims its proposal and dispatches it itself (runs/claim.py) when that wait covers the
    whole dispatch (`fits_in`) and DISPATCH_IN_REQUEST allows it; none otherwise."""
    if settings.DISPATCH_IN_REQUEST and fits_in(tool, seconds):
        return {"claimer": DISPATCHER, "lease": lease_for(tool)}
    return {}


def dispatch_leased(
    action: Action,
    attempt: Attempt,
    *,
    actor: Actor = DISPATCHER,
    read_lease: timedelta | None = None,
    unflushed: bool = False,
) -> str | None:
    """Call the tool for a leased action and settle it; at most once past the boundary.
    Returns the state it settled in, if it did (`settle`; `read_lease`: the caller reads an
    unknown outcome itself, at once; `unflushed` for a read only)."""
    leased_at = attempt.started_at
    with action_log_context(action, "takeover.dispatch"):
        not_sent = 0
        while True:
            if lease_running_out(action):
                # A starved worker: the sweeper is about to write this lease off and hand
                # the action to reconciliation. Sending now could land after that decision,
                # so send nothing; to the sweeper it is a worker that was lost.
                logger.warning(
                    "action %s: dispatch lease runs out before the call could start; not sent",
                    action.pk,
                )
                return None
            result = call_tool(action)
            if result.outcome != AttemptOutcome.NOT_SENT or not_sent >= settings.SAFE_RETRY_LIMIT:
                break
            # The one safe retry (invariant 3): provably never left, so sending again is safe.
            _close_attempt(attempt, result)
            not_sent += 1
            time.sleep(settings.SAFE_RETRY_DELAY_SECONDS)
            attempt = _retry_attempt(action, attempt.number + 1)
            if attempt is None:
                return None
        settled = settle(
            action, attempt, result, actor=actor, read_lease=read_lease, unflushed=unflushed
        )
        metrics.record_dispatch(action.tool.name, (timezone.now() - leased_at).total_seconds())
        logger.info(
            "action %s (%s → %s): %s%s",
            action.pk,
            action.tool.name,
            action.target,
            result.outcome,
            f" HTTP {result.http_status}" if result.http_status else "",
            extra={"tool": action.tool.name, "outcome": result.outcome},
        )
    return settled


def action_dispatch(action_id, *, actor: Actor = DISPATCHER) -> Action | None:
    """Lease and dispatch one queued action, in this thread (operator tools and tests)."""
    leased = action_lease(action_id, actor=actor)
    if leased is None:
        return None
    dispatch_leased(*leased, actor=actor)
    return Action.objects.get(pk=action_id)
