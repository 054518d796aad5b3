"""The database is the queue (`core.queue`): a worker leases due rows with `FOR UPDATE
SKIP LOCKED` (queued actions to dispatch, unknown ones due a read), and the sweeper takes back the
leases of a worker that died (`expire_leases`: dispatching → unknown, to reconcile, never
queued again). A lease lasts as long as the worst case may take (`lease_for`)."""

import uuid
from collections import defaultdict
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from approvals.services import approval_consume
from core import metrics, queue, rows
from core.audit import (
    DISPATCHER,
    SWEEPER,
    Actor,
    request_id_var,
)

from ..models import Action, Attempt
from ..moves import LEASED, action_move, actions_lease_dispatch, actions_move_batch
from ..states import ActionState, AttemptOutcome


def lease_for(tool) -> timedelta:
    """Worst case for one dispatch: every attempt times out, plus retry delays, plus grace."""
    attempts = settings.SAFE_RETRY_LIMIT + 1
    seconds = (
        tool.timeout_seconds * attempts
        + settings.SAFE_RETRY_DELAY_SECONDS * settings.SAFE_RETRY_LIMIT
        + settings.DISPATCH_LEASE_GRACE_SECONDS
    )
    return timedelta(seconds=seconds)


def _read_lease_terms() -> dict:
    """A read lease lasts `extra` seconds plus the tool's timeout times `reads` (plus one
    for a lookup tool): the worst case for one unknown's reads, where every state read
    times out, with the pauses between them and grace; a lookup tool is also asked once for
    its own record of the key."""
    return {
        "extra": settings.RECONCILE_LEASE_GRACE_SECONDS
        + settings.RECONCILE_READ_INTERVAL_SECONDS * settings.RECONCILE_READ_ATTEMPTS,
        "reads": settings.RECONCILE_READ_ATTEMPTS,
    }


def read_lease_for(tool) -> timedelta:
    """How long one unknown's reads are leased (`_read_lease_terms`; `lease_unknown` applies
    the same terms in SQL to each row it leases)."""
    terms = _read_lease_terms()
    reads = terms["reads"] + int(tool.lookup)
    return timedelta(seconds=terms["extra"] + tool.timeout_seconds * reads)


def resend_lease_for(tool) -> timedelta:
    """A resend is one attempt (no safe retry inside it), plus grace."""
    return timedelta(seconds=tool.timeout_seconds + settings.DISPATCH_LEASE_GRACE_SECONDS)


# The oldest due rows of every tenant, interleaved: each tenant's first row, then each
# tenant's second, ... so that one tenant's burst of 10,000 cannot starve another's single
# action. Each LATERAL probe reads the partial index of exactly this predicate
# (`action_queued` / `action_reconcile_due`); SKIP LOCKED lets any number of workers lease at
# once, none waiting and none taking a row twice. The state is a constant in the statement,
# not a parameter, so that a prepared statement's generic plan can still prove the partial
# index's predicate (core/plans.py says why). Quirk: every tenant is probed, which is cheap
# for hundreds of tenants; at many thousands, keep a table of tenants with work.
FAIR_LEASE = """
SELECT picked.id FROM core_tenant t
CROSS JOIN LATERAL (
    SELECT a.id, a.{order} AS due FROM runs_action a
    WHERE a.tenant_id = t.id AND a.state = '{state}' {due}
    ORDER BY a.{order}
    LIMIT %(limit)s
    FOR UPDATE OF a SKIP LOCKED
) picked
ORDER BY row_number() OVER (PARTITION BY t.id ORDER BY picked.due), picked.due
LIMIT %(limit)s
"""
# The ids a worker heard of. The state is a constant here too: bound as a parameter, it
# made the generic plan of the whole lease statement look ten times dearer than a custom
# one on a table of mostly settled actions (estimated cost 251 against 21), so PostgreSQL
# planned it again on every call: 1.6 ms of planning against 0.7 of execution, per effect
# of `make bench`'s two-request phase (pg_stat_statements: as many plans as calls).
LEASE_BY_ID = """
SELECT a.id FROM runs_action a
WHERE a.id = ANY(%(only)s) AND a.state = '{state}' {due}
FOR UPDATE SKIP LOCKED
"""


def _due(state: str, limit: int, only=None, now=None) -> tuple[str, dict]:
    """The statement that locks up to `limit` due rows in `state`, and its parameters."""
    due, order = "", "created_at"
    if state == ActionState.UNKNOWN:
        due, order = "AND a.next_reconcile_at <= %(now)s", "next_reconcile_at"
    params = {"state": state, "limit": limit, "now": now}
    constant = ActionState(state).value  # in the statement's text, not a parameter
    if only is not None:
        sql = LEASE_BY_ID.format(due=due, state=constant)
        params["only"] = [uuid.UUID(str(i)) for i in only]
    else:
        sql = FAIR_LEASE.format(order=order, due=due, state=constant)
    return sql, params


def lease_queued(limit: int, *, only=None, actor: Actor = DISPATCHER) -> list[tuple]:
    """queued → dispatching for up to `limit` actions, in ONE statement (those presenting an
    approval in one transaction after it): approvals consumed, leases set, first attempts
    opened, audited. (A runtime claims a run and an
    operator claims an action; a worker leases.) Committed before any byte goes out
    (invariant 1). An action whose approval is no longer valid is blocked instead, never
    dispatched. Returns [(action, attempt)], oldest first.
    """
    pick, params = _due(ActionState.QUEUED, limit, only)
    now = timezone.now()
    found = actions_lease_dispatch(
        pick,
        params,
        actor=actor,
        now=now,
        timeouts=settings.SAFE_RETRY_LIMIT + 1,
        extra_seconds=settings.SAFE_RETRY_DELAY_SECONDS * settings.SAFE_RETRY_LIMIT
        + settings.DISPATCH_LEASE_GRACE_SECONDS,
    )
    leased = [_leased(row) for row in found if row[1] is not None]
    if approvals := [row[0] for row in found if row[1] is None]:
        with transaction.atomic():  # locked again (still queued, nobody else holds them)
            approvals = queue.lock_due(*_due(ActionState.QUEUED, len(approvals), approvals))
            leased += _lease_presenting_approvals(approvals, actor=actor)
    leased.sort(key=lambda pair: (pair[0].created_at, str(pair[0].pk)))
    return leased


def _leased(row) -> tuple[Action, Attempt]:
    """An (action, attempt) pair from a row of `actions_lease_dispatch`."""
    attempt_id, action = row[1], _loaded(row[2:])
    attempt = rows.new(
        Attempt, id=attempt_id, action=action, number=1, started_at=action.updated_at
    )
    attempt._state.adding, attempt._state.db = False, connection.alias
    return action, attempt


def _loaded(values) -> Action:
    """An action with its tool, principal and tenant, from the columns of LEASED's models."""
    parts = []
    for model, _alias in LEASED:
        width = rows.width(model)
        parts.append(rows.instance(model, values[:width]))
        values = values[width:]
    action, action.tool, action.principal, action.tenant = parts
    return action


def _lease_presenting_approvals(ids, *, actor: Actor) -> list[tuple]:
    """The picked (and locked) queued actions that present an approval: each approval is
    consumed, or the action blocked, before its lease."""
    actions = sorted(
        Action.objects.select_related("tool", "principal", "tenant").filter(pk__in=ids),
        key=lambda a: (a.created_at, str(a.pk)),
    )
    ready, blocked = [], defaultdict(list)
    for action in actions:
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
    attempts = rows.insert_many(
        Attempt, [rows.new(Attempt, action=a, number=1, started_at=now) for a in moved]
    )
    return list(zip(moved, attempts, strict=True))


def action_lease(action_id, *, actor: Actor = DISPATCHER) -> tuple[Action, Attempt] | None:
    """Lease one queued action by id (an operator tool, and the tests); None if it is not
    queued or another worker holds it."""
    leased = lease_queued(1, only=[action_id], actor=actor)
    return leased[0] if leased else None


# Due unknowns leased for reading in ONE statement, which is its own transaction: the rows
# `pick` locks (FOR UPDATE SKIP LOCKED) get `next_reconcile_at` pushed past the longest their
# reads may take (`read_lease_for`, per row's tool), and come back whole with their tool,
# principal and tenant, so the reader starts at once.
LEASE_UNKNOWN = """
WITH picked AS ({pick}),
held AS (
    UPDATE runs_action a
    SET next_reconcile_at = %(now)s + make_interval(
        secs => %(extra)s + t.timeout_seconds * (%(reads)s + t.lookup::int))
    FROM picked, core_tool t
    WHERE a.id = picked.id AND t.id = a.tool_id
    RETURNING {action}
)
SELECT m.*, {tool}, {principal}, {tenant}
FROM held m
JOIN core_tool t ON t.id = m.tool_id
JOIN core_principal pr ON pr.id = m.principal_id
JOIN core_tenant tn ON tn.id = m.tenant_id
"""


def lease_unknown(limit: int, *, only=None) -> list[Action]:
    """Lease up to `limit` due unknowns for reading: `next_reconcile_at` is pushed past the
    longest the reads can take, in the lease's own statement, so no second worker reads
    the same action meanwhile (invariant 6). Returns them, each with its tool, principal and
    tenant."""
    now = timezone.now()
    pick, params = _due(ActionState.UNKNOWN, limit, only, now=now)
    action, tool, principal, tenant = (rows.columns(model, alias) for model, alias in LEASED)
    sql = LEASE_UNKNOWN.format(
        pick=pick, action=action, tool=tool, principal=principal, tenant=tenant
    )
    params |= _read_lease_terms()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [_loaded(row) for row in cursor.fetchall()]


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
