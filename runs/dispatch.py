"""Dispatch over the tool protocol, and reconciliation of unknown outcomes (docs/design.md,
"The tool protocol", "Reconciliation").

The database is the queue. A woken worker drains (`drain`): it claims due rows in batches
and works them on a thread pool. The order of a dispatch, each step its own transaction:
1. claim (a batch at once): queued → dispatching, approval consumed, lease set, attempt 1
   opened, audited. Committed before any byte goes out (invariant 1). No row lock outlives
   this step.
2. the HTTP call, outside any transaction.
3. settle: the attempt is closed with its classification and the action moves, together.
So a happy-path effect costs three write transactions (propose, its share of a claim,
settle). A killed worker's claims come back through their leases (`expire_leases`), as
unknowns to reconcile, never as queued.

httpx tells the two failure families apart: ConnectError/ConnectTimeout are raised before
the request is written (refused, DNS, TLS handshake), anything later — ReadTimeout,
RemoteProtocolError, ReadError, WriteError — means the request may have been received.
A fresh connection per attempt keeps that true: a pooled keep-alive connection that the
server closed could fail mid-write and look like "never sent".
"""

import contextlib
import logging
import os
import threading
import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import quote

import httpx
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from approvals.services import approval_consume
from core import metrics, notifications, otel, rows
from core.audit import DISPATCHER, RECONCILER, SWEEPER, Actor, Verb, audit, request_id_var
from core.errors import StateConflict
from core.logs import log_context, traceparent
from core.models import Role

from .models import Action, Attempt, Reconciliation
from .services import (
    action_move,
    action_resend_start,
    action_settle_dispatch,
    actions_move_batch,
    lease_for,
)
from .states import (
    RESEND_EFFECTS,
    RESOLVABLE,
    ActionState,
    AttemptKind,
    AttemptOutcome,
    FailureReason,
    ReadKind,
    Resolution,
    Verdict,
)
from .wakeup import wake_workers, wakeup_taken

logger = logging.getLogger(__name__)

# --- the HTTP side --------------------------------------------------------------------


@dataclass
class CallResult:
    outcome: str  # AttemptOutcome
    http_status: int | None = None
    detail: str = ""


_http: httpx.Client | None = None
_http_pid: int | None = None


def _client() -> httpx.Client:
    # The egress policy (core/egress.py): only allowed destinations, checked on
    # the resolved address at connect time; a refusal is a ConnectError, so "not sent".
    # trust_env=False: no proxy from the environment may sit between us and the tool.
    # No keep-alive: every attempt opens a fresh connection, so that ConnectError still
    # proves "never sent" (a pooled connection the server closed could fail mid-write).
    # Everything else (TLS context, certificate store) is built once, here.
    from core.egress import egress_client

    return egress_client(limits=httpx.Limits(max_connections=None, max_keepalive_connections=0))


def http_client() -> httpx.Client:
    """One client per process (building one costs 10-50 ms of CPU for its TLS context)."""
    global _http, _http_pid
    if _http is None or _http_pid != os.getpid():
        _http, _http_pid = _client(), os.getpid()
    return _http


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
        response = http_client().post(url, json=body, headers=headers, timeout=tool.timeout_seconds)
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
            response = http_client().get(url, timeout=tool.timeout_seconds)
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
    """docs/design.md, "Reconciliation": compare every desired field, then the version."""
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


# --- claiming (the database is the queue) --------------------------------------------------

# The oldest due rows of every tenant, interleaved: each tenant's first row, then each
# tenant's second, ... so that one tenant's burst of 10,000 cannot starve another's single
# action. Each LATERAL probe reads the partial index of exactly this predicate
# (`action_queued` / `action_reconcile_due`); SKIP LOCKED lets any number of workers claim at
# once, none waiting and none taking a row twice. Quirk: every tenant is probed, which is
# cheap for hundreds of tenants; at many thousands, keep a table of tenants with work.
FAIR_LEASE = """
SELECT picked.id FROM core_tenant t
CROSS JOIN LATERAL (
    SELECT a.id, a.{order} AS due FROM runs_action a
    WHERE a.tenant_id = t.id AND a.state = %(state)s {due}
    ORDER BY a.{order}
    LIMIT %(limit)s
    FOR UPDATE OF a SKIP LOCKED
) picked
ORDER BY row_number() OVER (PARTITION BY t.id ORDER BY picked.due), picked.due
LIMIT %(limit)s
"""
LEASE_BY_ID = """
SELECT a.id FROM runs_action a
WHERE a.id = ANY(%(only)s) AND a.state = %(state)s {due}
FOR UPDATE SKIP LOCKED
"""


def _lock_due(state: str, limit: int, only=None, now=None) -> list:
    """Lock up to `limit` due rows in `state` (inside the caller's transaction)."""
    due, order = "", "created_at"
    if state == ActionState.UNKNOWN:
        due, order = "AND a.next_reconcile_at <= %(now)s", "next_reconcile_at"
    params = {"state": state, "limit": limit, "now": now}
    if only is not None:
        sql = LEASE_BY_ID.format(due=due)
        params["only"] = [uuid.UUID(str(i)) for i in only]
    else:
        sql = FAIR_LEASE.format(order=order, due=due)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]


def lease_queued(limit: int, *, only=None, actor: Actor = DISPATCHER) -> list[tuple]:
    """queued → dispatching for up to `limit` actions, in ONE transaction: their approvals
    consumed, leases set, first attempts opened, audited. (A runtime claims a run and an
    operator claims an action; a worker leases.) Committed before any byte goes out
    (invariant 1). An action whose approval is no longer valid is blocked instead, never
    dispatched. Returns [(action, attempt)], oldest first.
    """
    with transaction.atomic():
        ids = _lock_due(ActionState.QUEUED, limit, only)
        if not ids:
            return []
        actions = sorted(
            Action.objects.select_related("tool", "principal", "tenant").filter(pk__in=ids),
            key=lambda a: (a.created_at, str(a.pk)),
        )
        ready, blocked = [], defaultdict(list)
        for action in actions:
            if action.approval_id is not None:
                reason = approval_consume(
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
                    blocked[reason].append(action)
                    continue
            ready.append(action)
        for reason, group in blocked.items():
            actions_move_batch(group, ActionState.BLOCKED, actor=actor, block_reason=reason)
        now = timezone.now()
        by_lease = defaultdict(list)
        for action in ready:
            by_lease[lease_for(action.tool)].append(action)
        moved = []
        for lease, group in by_lease.items():
            moved += actions_move_batch(
                group, ActionState.DISPATCHING, actor=actor, lease_expires_at=now + lease
            )
        # Rows are locked by us, so every ready action moved; sorted back to oldest first.
        moved.sort(key=lambda a: (a.created_at, str(a.pk)))
        attempts = rows.insert_many(
            Attempt, [Attempt(action=a, number=1, started_at=now) for a in moved]
        )
    return list(zip(moved, attempts, strict=True))


def action_lease(action_id, *, actor: Actor = DISPATCHER) -> tuple[Action, Attempt] | None:
    """Lease one queued action by id (an operator tool, and the tests); None if it is not
    queued or another worker holds it."""
    claimed = lease_queued(1, only=[action_id], actor=actor)
    return claimed[0] if claimed else None


# --- dispatch ---------------------------------------------------------------------------


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


def _settle(
    action: Action, attempt: Attempt, result: CallResult, *, actor: Actor, table=SETTLE
) -> None:
    """Close the attempt and settle the action together (the third and last write of a
    happy-path effect: propose, claim, settle)."""
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
        **fields,
    ):
        if target == ActionState.UNKNOWN:
            wake_workers()  # its reconciliation is due now
        return
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


def dispatch_leased(action: Action, attempt: Attempt, *, actor: Actor = DISPATCHER) -> None:
    """Call the tool for a leased action and settle it; at most once past the boundary."""
    claimed_at = attempt.started_at
    with action_log_context(action, "takeover.dispatch"):
        not_sent = 0
        while True:
            result = call_tool(action)
            if result.outcome != AttemptOutcome.NOT_SENT or not_sent >= settings.SAFE_RETRY_LIMIT:
                break
            # The one safe retry (invariant 3): provably never left, so sending again is safe.
            _close_attempt(attempt, result)
            not_sent += 1
            time.sleep(settings.SAFE_RETRY_DELAY_SECONDS)
            attempt = _retry_attempt(action, attempt.number + 1)
            if attempt is None:
                return
        _settle(action, attempt, result, actor=actor)
        metrics.record_dispatch(action.tool.name, (timezone.now() - claimed_at).total_seconds())
        logger.info(
            "action %s (%s → %s): %s%s",
            action.pk,
            action.tool.name,
            action.target,
            result.outcome,
            f" HTTP {result.http_status}" if result.http_status else "",
            extra={"tool": action.tool.name, "outcome": result.outcome},
        )


def action_dispatch(action_id, *, actor: Actor = DISPATCHER) -> Action | None:
    """Claim and dispatch one queued action, in this thread (operator tools and tests)."""
    claimed = action_lease(action_id, actor=actor)
    if claimed is None:
        return None
    dispatch_leased(*claimed, actor=actor)
    return Action.objects.get(pk=action_id)


# --- reconciliation -----------------------------------------------------------------------


def _backoff(failures: int) -> timedelta:
    return timedelta(
        seconds=min(5 * 2 ** max(failures - 1, 0), settings.RECONCILE_BACKOFF_MAX_SECONDS)
    )


def lease_unknown(limit: int, *, only=None) -> list:
    """Lease up to `limit` due unknowns for reading: `next_reconcile_at` is pushed past the
    longest the reads can take, in the claim's own transaction, so no second worker reads
    the same action meanwhile (invariant 6). Returns their ids."""
    now = timezone.now()
    with transaction.atomic():
        ids = _lock_due(ActionState.UNKNOWN, limit, only, now=now)
        if not ids:
            return []
        with connection.cursor() as cursor:
            cursor.execute(
                # A lookup tool is also asked once for its own record of the key.
                "UPDATE runs_action a SET next_reconcile_at = %s + make_interval("
                "secs => %s + t.timeout_seconds * (%s + t.lookup::int)) FROM core_tool t "
                "WHERE a.id = ANY(%s) AND t.id = a.tool_id",
                [
                    now,
                    settings.RECONCILE_LEASE_GRACE_SECONDS
                    + settings.RECONCILE_READ_INTERVAL_SECONDS * settings.RECONCILE_READ_ATTEMPTS,
                    settings.RECONCILE_READ_ATTEMPTS,
                    ids,
                ],
            )
    return ids


def action_reconcile(action_id, *, actor: Actor = RECONCILER, manual: bool = False) -> Action:
    """Read the authoritative state and judge an unknown action by it (invariant 5).

    Automatic runs lease the action first (`lease_unknown`), so two workers never
    read it at once. An operator's re-check (`manual`) always reads, and may also re-read
    a needs_human action, which records what it saw but leaves the decision to the person;
    it needs the on-call role, and only an unknown or needs_human action can be re-checked
    (StateConflict otherwise).
    """
    if manual:
        actor.require(Role.ONCALL)
        state = Action.objects.filter(pk=action_id).values_list("state", flat=True).first()
        if state not in RESOLVABLE:
            raise StateConflict(
                "Only an unknown or needs-human action can be re-checked; this one is "
                f"{ActionState(state).label.lower() if state else 'gone'}."
            )
    if not manual and not lease_unknown(1, only=[action_id]):
        return Action.objects.get(pk=action_id)
    return reconcile_leased(action_id, actor=actor, manual=manual)


def reconcile_leased(action_id, *, actor: Actor = RECONCILER, manual: bool = False) -> Action:
    action = Action.objects.select_related("tool", "tenant", "principal").get(pk=action_id)
    with action_log_context(action, "takeover.reconcile"):
        return _reconcile_declared(action, actor=actor, manual=manual)


# --- what the tool declares (issue 13) -------------------------------------------------------


@dataclass
class Lookup:
    verdict: str  # LOOKUP_APPLIED, LOOKUP_NOT_FOUND or LOOKUP_FAILED
    state: dict | None = None
    version: int | None = None
    http_status: int | None = None
    detail: str = ""


def lookup_effect(action: Action) -> Lookup:
    """Ask a `lookup: true` tool whether it applied this action's key:
    `GET {base_url}/effects/{key}` (the key URL-quoted). One request, side-effect free.

    200 with `{"applied": true}` → applied (`state` and `version` kept when well-formed);
    404 → the tool never received the key; anything else (another status, a 200 that does
    not say `"applied": true`, a timeout, a reset) → it could not tell, and reconciliation
    falls back to reading the state.
    """
    tool = action.tool
    key = action.idempotency_key
    url = f"{tool.base_url.rstrip('/')}/effects/{quote(key, safe='')}"
    try:
        response = http_client().get(url, timeout=tool.timeout_seconds)
    except httpx.HTTPError as exc:
        return Lookup(Verdict.LOOKUP_FAILED, detail=f"lookup: {type(exc).__name__}: {exc}"[:300])
    status = response.status_code
    if status == 404:
        return Lookup(
            Verdict.LOOKUP_NOT_FOUND,
            http_status=status,
            detail=f"the tool reports it never received key {key}",
        )
    if status != 200:
        return Lookup(
            Verdict.LOOKUP_FAILED,
            http_status=status,
            detail=f"lookup answered HTTP {status}: the tool could not tell",
        )
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if not isinstance(payload, dict) or payload.get("applied") is not True:
        return Lookup(
            Verdict.LOOKUP_FAILED,
            http_status=status,
            detail='lookup answered 200 without "applied": true: the tool could not tell',
        )
    state, version = payload.get("state"), payload.get("version")
    well_formed = isinstance(state, dict) and isinstance(version, int)
    return Lookup(
        Verdict.LOOKUP_APPLIED,
        state=state if well_formed else None,
        version=version if well_formed else None,
        http_status=status,
        detail=f"the tool reports it applied key {key}",
    )


def _resend_allowed(action: Action) -> bool:
    """An unknown action whose tool's declaration allows a resend, with some left."""
    if action.state != ActionState.UNKNOWN or action.tool.effect not in RESEND_EFFECTS:
        return False
    done = Attempt.objects.filter(action_id=action.pk, kind=AttemptKind.RESEND).count()
    return done < settings.IDEMPOTENT_RESEND_LIMIT


def _resend_due_at(action: Action):
    """After the latest attempt ended: the backoff doubles with each resend."""
    attempts = list(Attempt.objects.filter(action_id=action.pk).order_by("number"))
    resends = sum(1 for a in attempts if a.kind == AttemptKind.RESEND)
    last = attempts[-1] if attempts else None
    ended = (last.finished_at or last.started_at) if last else timezone.now()
    return ended + timedelta(seconds=settings.IDEMPOTENT_RESEND_DELAY_SECONDS * 2**resends)


def _reconcile_declared(action: Action, *, actor: Actor, manual: bool = False) -> Action:
    """Reconcile an unknown outcome using what the tool declares, in this order:

    1. `lookup: true`: ask the tool. "Applied" settles it succeeded (reconciled), with no
       field heuristics; "never received" and "could not tell" are recorded and shown.
    2. `idempotent` (or `read_only`), resends left, automatic run: send it again, same key,
       after the backoff (a new attempt; see `_resend`). Not on an operator's re-check: a
       person reads, never sends.
    3. Otherwise, as for every tool: read the authoritative state and judge the diff.
    """
    found = None
    if action.tool.lookup:
        found = lookup_effect(action)
        action = _record_lookup(action, found, actor=actor)
        if found.verdict == Verdict.LOOKUP_APPLIED or action.state not in {
            ActionState.UNKNOWN,
            ActionState.NEEDS_HUMAN,
        }:
            return action
    if not manual and _resend_allowed(action):
        due = _resend_due_at(action)
        if due > timezone.now():
            # Claimed again at `due`, like any read: the database is the queue.
            Action.objects.filter(pk=action.pk, state=ActionState.UNKNOWN).update(
                next_reconcile_at=due
            )
            return Action.objects.get(pk=action.pk)
        return _resend(action, actor=DISPATCHER)
    return _reconcile(action, actor=actor, lookup=found, resend_pending=_resend_allowed(action))


def _record_lookup(action: Action, found: Lookup, *, actor: Actor) -> Action:
    declaration = action.tool.declaration
    metrics.record_reconcile(action.tool.name, found.verdict)
    logger.info(
        "action %s (%s → %s) lookup: %s",
        action.pk,
        action.tool.name,
        action.target,
        found.verdict,
    )
    with transaction.atomic():
        locked = Action.objects.select_for_update(no_key=True).get(pk=action.pk)
        locked.tool = action.tool
        Reconciliation.objects.create(
            action=locked,
            at=timezone.now(),
            kind=ReadKind.LOOKUP,
            authoritative=None
            if found.state is None
            else {"state": found.state, "version": found.version},
            verdict=found.verdict,
            diff=[],
            expected_version=locked.expected_version,
            actual_version=found.version,
            detail=found.detail,
            actor=actor.as_dict(),
            declaration=declaration,
        )
        if found.verdict != Verdict.LOOKUP_APPLIED:
            return locked  # the state read (or a resend) comes next, and says the rest
        if locked.state == ActionState.UNKNOWN:
            action_move(
                locked,
                ActionState.SUCCEEDED,
                actor=actor,
                reason=f"the tool reports it applied key {locked.idempotency_key} "
                "(lookup; declared lookup: true)",
                resolution=Resolution.RECONCILED,
                next_reconcile_at=None,
            )
        else:  # a person's re-check of needs_human (or a resend in flight): recorded only
            audit(
                actor=actor,
                verb=Verb.ACTION_RECHECK,
                obj=locked,
                before={"state": locked.state},
                after={"state": locked.state, "verdict": found.verdict},
            )
        locked.refresh_from_db()
    return locked


def _resend(action: Action, *, actor: Actor) -> Action:
    """Send an unknown action again: a new attempt, the same Idempotency-Key, claimed from
    `unknown` into `dispatching` under a lease (so a worker lost mid-call is swept back to
    unknown, like any dispatch), audited with the declaration that allowed it."""
    attempt = action_resend_start(action, actor=actor)
    if attempt is None:
        return Action.objects.get(pk=action.pk)
    result = call_tool(action)
    _settle(action, attempt, result, actor=actor, table=RESEND_SETTLE)
    logger.info(
        "action %s (%s → %s): resend %d: %s%s",
        action.pk,
        action.tool.name,
        action.target,
        attempt.number,
        result.outcome,
        f" HTTP {result.http_status}" if result.http_status else "",
        extra={"tool": action.tool.name, "outcome": result.outcome},
    )
    return Action.objects.get(pk=action.pk)


def _reconcile(
    action: Action, *, actor: Actor, lookup: Lookup | None = None, resend_pending: bool = False
) -> Action:
    """`resend_pending`: an operator's re-check of an action whose tool will be sent it
    again: what the read proves is recorded, but an unproven outcome stays unknown for the
    resend rather than going to a person now."""
    action_id = action.pk
    read = read_authoritative(action)
    verdict, diff = judge(action, read)
    metrics.record_reconcile(action.tool.name, verdict)
    logger.info(
        "action %s (%s → %s) reconciled: %s", action_id, action.tool.name, action.target, verdict
    )
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
        if action.state != ActionState.UNKNOWN:
            audit(
                actor=actor,
                verb=Verb.ACTION_RECHECK,
                obj=action,
                before={"state": action.state},
                after={"state": action.state, "verdict": verdict},
            )
            return action
        if verdict == Verdict.MATCH:
            action_move(
                action,
                ActionState.SUCCEEDED,
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
                verb=Verb.ACTION_RECONCILE_FAILED,
                obj=action,
                before={"state": ActionState.UNKNOWN},
                after={"state": ActionState.UNKNOWN, "reconcile_failures": failures},
                reason=read.detail,
            )
        elif resend_pending:
            Action.objects.filter(pk=action.pk).update(next_reconcile_at=_resend_due_at(action))
        else:
            why = {
                Verdict.MISMATCH: "authoritative state differs: "
                + ", ".join(d["field"] for d in diff),
                Verdict.MOVED_ON: "state matches, but other writes happened since; "
                "cannot prove this action applied it",
                Verdict.MISSING: "the target does not exist",
            }[verdict]
            if lookup is not None and lookup.verdict == Verdict.LOOKUP_NOT_FOUND:
                why += f"; {lookup.detail}"
            action_move(
                action, ActionState.NEEDS_HUMAN, actor=actor, reason=why, next_reconcile_at=None
            )
        action.refresh_from_db()
    return action


# --- the sweeper --------------------------------------------------------------------------


def expire_leases(*, actor: Actor = SWEEPER, limit: int = 500) -> list:
    """dispatching past its lease → unknown (worker killed, machine lost), to reconcile."""
    now = timezone.now()
    moved = []
    ids = Action.objects.filter(
        state=ActionState.DISPATCHING, lease_expires_at__lt=now
    ).values_list("pk", flat=True)[:limit]
    for action_id in ids:
        with transaction.atomic():
            action = (
                Action.objects.select_for_update(no_key=True, skip_locked=True)
                .filter(pk=action_id, state=ActionState.DISPATCHING, lease_expires_at__lt=now)
                .first()
            )
            if action is None:
                continue
            request_id_var.set(action.request_id or "")
            Attempt.objects.filter(action=action, finished_at__isnull=True).update(
                finished_at=now,
                outcome=AttemptOutcome.UNKNOWN,
                detail="dispatch lease expired with no answer recorded (worker lost?)",
            )
            action_move(
                action,
                ActionState.UNKNOWN,
                actor=actor,
                reason="dispatch lease expired: the worker died or hung; the call may have "
                "reached the tool",
                lease_expires_at=None,
                next_reconcile_at=now,
            )
            moved.append(action.pk)
    metrics.record_lease_expiry(len(moved))
    return moved


# --- the drain: how a woken worker works ------------------------------------------------------


class DispatchPool:
    """Per worker process: `DISPATCH_CONCURRENCY` threads for tool calls and reads, and as
    many permits. A drainer claims only as many rows as it holds permits, so a claimed
    action's call starts at once: its lease never runs down while it waits in a queue."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.permits = threading.Semaphore(size)
        self.executor = ThreadPoolExecutor(size, thread_name_prefix="dispatch")

    def acquire(self, want: int, timeout: float, linger: float = 0.0) -> int:
        """Block for one permit, then take up to `want`. Under load permits come back one
        at a time; waiting up to `linger` for more lets one claim transaction carry several
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


def drain(*, max_seconds: float | None = None) -> int:
    """Claim and work due rows until none are left (or time is up); returns how many.

    Dispatches, reconciliation reads and notification deliveries run on the process's pool;
    this loop only claims.
    When a claim comes back full there may be more work than this process can take, so one
    more wake-up goes out (deduplicated) for a peer. Out of time with work left, it hands
    over to a fresh wake-up rather than holding a worker slot for ever.
    """
    wakeup_taken()
    pool = dispatch_pool()
    batch = settings.CLAIM_BATCH_SIZE
    deadline = time.monotonic() + (max_seconds or settings.DRAIN_MAX_SECONDS)
    worked = 0
    while time.monotonic() < deadline:
        held = pool.acquire(batch, timeout=1.0, linger=settings.CLAIM_LINGER_SECONDS)
        if not held:
            continue
        try:
            claimed = lease_queued(held)
            due = lease_unknown(held - len(claimed)) if len(claimed) < held else []
            # Notification deliveries take what the engine's own work left of the permits.
            sends = notifications.claim_deliveries(held - len(claimed) - len(due))
        except BaseException:
            pool.release(held)
            raise
        pool.release(held - len(claimed) - len(due) - len(sends))
        for action, attempt in claimed:
            pool.submit(dispatch_leased, action, attempt)
        for action_id in due:
            pool.submit(reconcile_leased, action_id)
        for delivery_id in sends:
            pool.submit(notifications.deliver_claimed, delivery_id)
        got = len(claimed) + len(due) + len(sends)
        worked += got
        if not got:
            return worked
        if got == batch:
            wake_workers()
    wake_workers(force=True)
    return worked
