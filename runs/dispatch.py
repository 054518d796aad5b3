"""Dispatch over the tool protocol (SPEC §6), and reconciliation of unknown outcomes.

The order of a dispatch, each step its own transaction:
1. claim: queued → dispatching, approval consumed, lease set, attempt 1 opened. Committed
   before any byte goes out (invariant 1). No row lock outlives this step.
2. the HTTP call, outside any transaction.
3. the attempt is closed with its classification; then the action settles.

httpx tells the two failure families apart: ConnectError/ConnectTimeout are raised before
the request is written (refused, DNS, TLS handshake), anything later — ReadTimeout,
RemoteProtocolError, ReadError, WriteError — means the request may have been received.
A fresh connection per attempt keeps that true: a pooled keep-alive connection that the
server closed could fail mid-write and look like "never sent".
"""

import contextlib
import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import quote

import httpx
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from approvals import services as approvals
from core import metrics
from core.audit import DISPATCHER, RECONCILER, SWEEPER, Actor, audit
from core.logs import log_context, traceparent

from .models import Action, Attempt, Reconciliation
from .services import action_move, enqueue_reconcile, lease_for
from .states import ActionState as S
from .states import AttemptOutcome, FailureReason, Resolution, Verdict

logger = logging.getLogger(__name__)

# --- the HTTP side --------------------------------------------------------------------


@dataclass
class CallResult:
    outcome: str  # AttemptOutcome
    http_status: int | None = None
    detail: str = ""


def _client(timeout: float) -> httpx.Client:
    # trust_env=False: no proxy from the environment may sit between us and the tool.
    return httpx.Client(timeout=httpx.Timeout(timeout), trust_env=False, follow_redirects=False)


def call_tool(action: Action) -> CallResult:
    tool = action.tool
    body = {
        "action_id": str(action.pk),
        "tenant": action.tenant.slug,
        "principal": action.principal.name,
        "tool": tool.name,
        "target": action.target,
        "desired_state": action.desired_state,
        "expected_version": action.expected_version,
    }
    headers = {
        "Idempotency-Key": action.idempotency_key,
        "X-Takeover-Action": str(action.pk),
        "traceparent": traceparent(),
    }
    started = time.monotonic()
    result = _post_effect(tool, body, headers)
    metrics.record_tool_call(tool.name, result.outcome, time.monotonic() - started)
    return result


def _post_effect(tool, body: dict, headers: dict) -> CallResult:
    url = tool.base_url.rstrip("/") + "/effects"
    try:
        with _client(tool.timeout_seconds) as client:
            response = client.post(url, json=body, headers=headers)
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        return CallResult(AttemptOutcome.NOT_SENT, detail=f"not sent: {type(exc).__name__}: {exc}")
    except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
        return CallResult(AttemptOutcome.NOT_SENT, detail=f"not sent: bad tool URL: {exc}")
    except httpx.TimeoutException as exc:
        return CallResult(AttemptOutcome.UNKNOWN, detail=f"sent, then {type(exc).__name__}")
    except httpx.HTTPError as exc:
        return CallResult(
            AttemptOutcome.UNKNOWN, detail=f"sent, then {type(exc).__name__}: {exc}"[:500]
        )
    status = response.status_code
    snippet = response.text[:300]
    if 200 <= status < 300:
        return CallResult(AttemptOutcome.APPLIED, status, snippet)
    if status == 409:
        return CallResult(AttemptOutcome.VERSION_CONFLICT, status, snippet)
    if 400 <= status < 500:
        return CallResult(AttemptOutcome.REJECTED, status, snippet)
    return CallResult(AttemptOutcome.UNKNOWN, status, snippet)


@dataclass
class Read:
    verdict: str | None = None  # MISSING or READ_FAILED; None when state was read
    state: dict = field(default_factory=dict)
    version: int | None = None
    detail: str = ""


def read_authoritative(action: Action) -> Read:
    """GET the authoritative state: side-effect free, 3 attempts 200 ms apart."""
    tool = action.tool
    url = f"{tool.base_url.rstrip('/')}/state/{quote(action.target, safe='')}"
    detail = ""
    for attempt in range(settings.RECONCILE_READ_ATTEMPTS):
        if attempt:
            time.sleep(settings.RECONCILE_READ_INTERVAL_SECONDS)
        try:
            with _client(tool.timeout_seconds) as client:
                response = client.get(url)
        except httpx.HTTPError as exc:
            detail = f"{type(exc).__name__}: {exc}"[:300]
            continue
        if response.status_code == 404:
            return Read(Verdict.MISSING, detail="the target does not exist (404)")
        if response.status_code != 200:
            detail = f"HTTP {response.status_code}"
            continue
        try:
            payload = response.json()
            state, version = payload["state"], payload["version"]
            if not isinstance(state, dict) or not isinstance(version, int):
                raise TypeError("state must be an object and version an integer")
        except (ValueError, KeyError, TypeError) as exc:
            detail = f"unreadable state: {exc}"[:300]
            continue
        return Read(state=state, version=version)
    return Read(Verdict.READ_FAILED, detail=detail)


def judge(action: Action, read: Read) -> tuple[str, list[dict]]:
    """SPEC §3.5: compare every desired field, then the version."""
    if read.verdict:
        return read.verdict, []
    diff = [
        {"field": name, "desired": wanted, "actual": read.state.get(name)}
        for name, wanted in action.desired_state.items()
        if name not in read.state or read.state[name] != wanted
    ]
    if diff:
        return Verdict.MISMATCH, diff
    if action.expected_version is None or read.version == action.expected_version + 1:
        return Verdict.MATCH, []
    return Verdict.MOVED_ON, []


# --- dispatch ---------------------------------------------------------------------------


def _open_attempt(action: Action, number: int) -> Attempt:
    return Attempt.objects.create(action=action, number=number, started_at=timezone.now())


def action_claim(action_id, *, actor: Actor = DISPATCHER) -> tuple[Action, Attempt] | None:
    """queued → dispatching (approval consumed, lease set, first attempt opened), or
    queued → blocked when its approval is no longer valid. None if someone else has it."""
    with transaction.atomic():
        action = (
            Action.objects.select_related("tool", "principal", "tenant")
            .filter(pk=action_id, state=S.QUEUED)
            .first()
        )
        if action is None:
            return None
        if action.approval_id is not None:
            reason = approvals.approval_consume(
                action.approval_id,
                action_id=action.pk,
                actor=actor,
                principal=action.principal,
                tool=action.tool,
                target=action.target,
                desired_state=action.desired_state,
                expected_version=action.expected_version,
            )
            if reason is not None:
                # Only mark it blocked if we are the one who moved it; either way no dispatch.
                action_move(action, S.BLOCKED, actor=actor, block_reason=reason)
                return None
        lease = timezone.now() + lease_for(action.tool)
        if not action_move(action, S.DISPATCHING, actor=actor, lease_expires_at=lease):
            # Another worker claimed it first; roll back our approval consumption with us.
            transaction.set_rollback(True)
            return None
        attempt = _open_attempt(action, 1)
    return action, attempt


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
        if current.state != S.DISPATCHING:
            return None
        return _open_attempt(action, number)


SETTLE = {
    AttemptOutcome.APPLIED: (S.SUCCEEDED, {"resolution": Resolution.APPLIED}),
    AttemptOutcome.VERSION_CONFLICT: (S.FAILED, {"failure_reason": FailureReason.VERSION_CONFLICT}),
    AttemptOutcome.REJECTED: (S.FAILED, {"failure_reason": FailureReason.REJECTED}),
    AttemptOutcome.NOT_SENT: (S.FAILED, {"failure_reason": FailureReason.NOT_SENT}),
    AttemptOutcome.UNKNOWN: (S.UNKNOWN, {}),
}


def _settle(action: Action, result: CallResult, *, actor: Actor) -> None:
    target, fields = SETTLE[result.outcome]
    with transaction.atomic():
        action = Action.objects.select_for_update(no_key=True).get(pk=action.pk)
        if action.state == S.DISPATCHING:
            extra = {"lease_expires_at": None}
            if target == S.UNKNOWN:
                extra["next_reconcile_at"] = timezone.now()
            why = (
                f"the tool answered HTTP {result.http_status}"
                if result.outcome == AttemptOutcome.APPLIED
                else result.detail[:500]
            )
            action_move(action, target, actor=actor, reason=why, **fields, **extra)
            if target == S.UNKNOWN:
                enqueue_reconcile(action.pk)
        elif action.state == S.UNKNOWN and target in {S.SUCCEEDED, S.FAILED}:
            # The sweeper wrote the worker off, but the tool did answer, definitively.
            action_move(
                action,
                target,
                actor=actor,
                reason="definitive answer from the tool after the dispatch lease expired",
                next_reconcile_at=None,
                **fields,
            )


@contextlib.contextmanager
def action_log_context(action_id, *, request_id: bool = True):
    """Log (and audit) the work on an action under the id of the request that proposed it,
    with its tenant and run, so one proposal can be followed from HTTP to the tool call."""
    row = (
        Action.objects.filter(pk=action_id).values("request_id", "run_id", "tenant__slug").first()
    ) or {}
    values = {"action_id": action_id, "run_id": row.get("run_id")}
    values["tenant"] = row.get("tenant__slug")
    if request_id and row.get("request_id"):
        values["request_id"] = row["request_id"]
    with log_context(**values):
        yield


def action_dispatch(action_id, *, actor: Actor = DISPATCHER) -> Action | None:
    """Claim and dispatch one queued action; at most once past the boundary."""
    with action_log_context(action_id):
        return _dispatch(action_id, actor=actor)


def _dispatch(action_id, *, actor: Actor) -> Action | None:
    claimed = action_claim(action_id, actor=actor)
    if claimed is None:
        return None
    claimed_at = time.monotonic()
    action, attempt = claimed
    not_sent = 0
    while True:
        result = call_tool(action)
        _close_attempt(attempt, result)
        if result.outcome != AttemptOutcome.NOT_SENT or not_sent >= settings.SAFE_RETRY_LIMIT:
            break
        # The one safe retry (invariant 3): provably never left, so sending again is safe.
        not_sent += 1
        time.sleep(settings.SAFE_RETRY_DELAY_SECONDS)
        attempt = _retry_attempt(action, attempt.number + 1)
        if attempt is None:
            return Action.objects.get(pk=action.pk)
    _settle(action, result, actor=actor)
    seconds = time.monotonic() - claimed_at
    metrics.record_dispatch(action.tool.name, seconds)
    settled = Action.objects.get(pk=action.pk)
    logger.info(
        "dispatched %s to %s: %s → %s in %.3f s",
        action.pk,
        action.tool.name,
        result.outcome,
        settled.state,
        seconds,
        extra={"tool": action.tool.name, "outcome": result.outcome, "state": settled.state},
    )
    return settled


# --- reconciliation -----------------------------------------------------------------------


RECONCILE_LEASE = timedelta(seconds=30)


def _backoff(failures: int) -> timedelta:
    return timedelta(
        seconds=min(5 * 2 ** max(failures - 1, 0), settings.RECONCILE_BACKOFF_MAX_SECONDS)
    )


def action_reconcile(action_id, *, actor: Actor = RECONCILER, manual: bool = False) -> Action:
    """Read the authoritative state and judge an unknown action by it (SPEC §3.5).

    Automatic runs lease the action first (`next_reconcile_at` pushed ahead by a
    conditional UPDATE), so a sweep and a direct enqueue do not both read. An operator's
    re-check (`manual`) always reads, and may also re-read a needs_human action, which
    records what it saw but leaves the decision to the person. An automatic read is logged
    under the proposal's request id; an operator's under the operator's request.
    """
    with action_log_context(action_id, request_id=not manual):
        return _reconcile(action_id, actor=actor, manual=manual)


def _reconcile(action_id, *, actor: Actor, manual: bool) -> Action:
    now = timezone.now()
    if not manual:
        timeout = (
            Action.objects.filter(pk=action_id).values_list("tool__timeout_seconds", flat=True)
        ).first() or 0
        # Long enough for every read to time out, so no second reconciler starts meanwhile.
        lease = RECONCILE_LEASE + timedelta(seconds=timeout * settings.RECONCILE_READ_ATTEMPTS)
        taken = Action.objects.filter(
            pk=action_id, state=S.UNKNOWN, next_reconcile_at__lte=now
        ).update(next_reconcile_at=now + lease)
        if taken != 1:
            return Action.objects.get(pk=action_id)
    action = Action.objects.select_related("tool", "tenant", "principal").get(pk=action_id)
    read = read_authoritative(action)
    verdict, diff = judge(action, read)
    metrics.record_reconcile(action.tool.name, verdict)
    logger.info("reconciled %s (%s): %s", action.pk, action.tool.name, verdict)
    with transaction.atomic():
        action = Action.objects.select_for_update(no_key=True).get(pk=action_id)
        Reconciliation.objects.create(
            action=action,
            at=timezone.now(),
            authoritative=None if read.verdict else {"state": read.state, "version": read.version},
            verdict=verdict,
            diff=diff,
            expected_version=action.expected_version,
            actual_version=read.version,
            detail=read.detail,
            actor=actor.as_dict(),
        )
        if action.state != S.UNKNOWN:
            audit(
                actor=actor,
                verb="action.recheck",
                obj=action,
                before={"state": action.state},
                after={"state": action.state, "verdict": verdict},
            )
            return action
        if verdict == Verdict.MATCH:
            action_move(
                action,
                S.SUCCEEDED,
                actor=actor,
                reason="authoritative state matches the desired state and version",
                resolution=Resolution.RECONCILED,
                next_reconcile_at=None,
            )
        elif verdict == Verdict.READ_FAILED:
            failures = action.reconcile_failures + 1
            Action.objects.filter(pk=action.pk).update(
                reconcile_failures=failures, next_reconcile_at=timezone.now() + _backoff(failures)
            )
            audit(
                actor=actor,
                verb="action.reconcile_failed",
                obj=action,
                before={"state": S.UNKNOWN},
                after={"state": S.UNKNOWN, "reconcile_failures": failures},
                reason=read.detail,
            )
        else:
            why = {
                Verdict.MISMATCH: "authoritative state differs: "
                + ", ".join(d["field"] for d in diff),
                Verdict.MOVED_ON: "state matches, but other writes happened since; "
                "cannot prove this action applied it",
                Verdict.MISSING: "the target does not exist",
            }[verdict]
            action_move(action, S.NEEDS_HUMAN, actor=actor, reason=why, next_reconcile_at=None)
        action.refresh_from_db()
    return action


# --- the sweeper --------------------------------------------------------------------------


def expire_leases(*, actor: Actor = SWEEPER, limit: int = 500) -> list:
    """dispatching past its lease → unknown (worker killed, machine lost), to reconcile."""
    now = timezone.now()
    moved = []
    ids = Action.objects.filter(state=S.DISPATCHING, lease_expires_at__lt=now).values_list(
        "pk", flat=True
    )[:limit]
    for action_id in ids:
        with transaction.atomic():
            action = (
                Action.objects.select_for_update(no_key=True, skip_locked=True)
                .filter(pk=action_id, state=S.DISPATCHING, lease_expires_at__lt=now)
                .first()
            )
            if action is None:
                continue
            Attempt.objects.filter(action=action, finished_at__isnull=True).update(
                finished_at=now,
                outcome=AttemptOutcome.UNKNOWN,
                detail="dispatch lease expired with no answer recorded (worker lost?)",
            )
            action_move(
                action,
                S.UNKNOWN,
                actor=actor,
                reason="dispatch lease expired: the worker died or hung; the call may have "
                "reached the tool",
                lease_expires_at=None,
                next_reconcile_at=now,
            )
            enqueue_reconcile(action.pk)
            moved.append(action.pk)
    metrics.record_lease_expiry(len(moved))
    return moved


def requeue_lost(*, limit: int = 500) -> list:
    """queued and not claimed for a while (message lost) → enqueued again. Claiming is a
    conditional UPDATE, so a duplicate message dispatches nothing twice."""
    from .tasks import dispatch_action

    now = timezone.now()
    cutoff = now - timedelta(seconds=settings.QUEUED_REENQUEUE_AFTER_SECONDS)
    ids = list(
        Action.objects.filter(state=S.QUEUED, enqueued_at__lt=cutoff).values_list("pk", flat=True)[
            :limit
        ]
    )
    if ids:
        Action.objects.filter(pk__in=ids, state=S.QUEUED).update(enqueued_at=now)
        for action_id in ids:
            dispatch_action.delay(str(action_id))
    return ids


def reconcile_due(*, limit: int = 500) -> list:
    from .tasks import reconcile_action

    ids = list(
        Action.objects.filter(state=S.UNKNOWN, next_reconcile_at__lte=timezone.now()).values_list(
            "pk", flat=True
        )[:limit]
    )
    for action_id in ids:
        reconcile_action.delay(str(action_id))
    return ids
