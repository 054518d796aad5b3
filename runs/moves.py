"""The guarded moves: every change of an action's state, a run's status or a force replay
request's state is one function here (the tables are `runs/states.py`), written with its
audit event and its ledger mirror in the same transaction. The hottest moves have
one-statement twins (the batch lease, the settle of a dispatch) under the same rules.

The rest of `runs/` decides whether to move; this module only moves, and refuses a move its
table does not allow. Checked at import: every move of the action table, and every move a
tool's declaration allows, lands on a legal move of the ledger's.
"""

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from psycopg.types.json import Jsonb

from core import rows
from core.audit import (
    Actor,
    Verb,
    audit,
    audit_many,
    client_request_id_var,
    request_id_var,
    verb_for_state,
)
from core.ids import NEW_ID_SQL, new_id
from core.models import Principal, Tenant, Tool
from ledger.models import LedgerStatus
from ledger.services import ledger_set_status, ledger_set_status_many
from ledger.states import LEDGER

from . import alerts
from .models import Action, ForceReplayRequest, Run
from .states import (
    ACTION,
    ACTION_RESENDS,
    DECLARED_MOVES,
    FORCE_REQUEST,
    IN_PROGRESS,
    RUN,
    ActionState,
    AttemptKind,
    RunStatus,
    check_declared_move,
    check_move,
)
from .waits import ANNOUNCED, CHANNEL, notify_settled
from .wakeup import QUEUED, notify_work, queued_note, wake_workers

LEDGER_STATUS_FOR = {
    ActionState.AWAITING_APPROVAL: LedgerStatus.RESERVED,
    ActionState.QUEUED: LedgerStatus.RESERVED,
    ActionState.DISPATCHING: LedgerStatus.IN_FLIGHT,
    ActionState.SUCCEEDED: LedgerStatus.APPLIED,
    ActionState.FAILED: LedgerStatus.FAILED,
    ActionState.UNKNOWN: LedgerStatus.UNKNOWN,
    ActionState.NEEDS_HUMAN: LedgerStatus.UNKNOWN,
    ActionState.BLOCKED: LedgerStatus.VOID,
}


def _check_ledger_mirror():
    """Every move of the action table lands on a legal move of the ledger's (or none)."""
    for source, targets in ACTION.table.items():
        for target in targets:
            a, b = LEDGER_STATUS_FOR[source], LEDGER_STATUS_FOR[target]
            assert a == b or LEDGER.can(a, b), f"action {source}->{target}: ledger {a}->{b}"


_check_ledger_mirror()


def enqueue_dispatch(*, notified: bool = False, action_id=None) -> None:
    """Wake a worker once the surrounding transaction commits (never inside it).

    The committed `queued` row is the unit of work. Listening workers hear the notification
    at commit (`runs.wakeup`; it names `action_id` when given, so a worker leases that row by
    its key). With listening off, the message only says "there is work" and is deduplicated,
    so a burst of 10,000 proposals sends a handful of messages, not 10,000; `robust`: with
    the broker down the request still succeeds and the error is logged; the next sweep
    drains the row.
    """
    if not notified:
        notify_work(queued_note(action_id) if action_id else QUEUED)
    if not settings.WORKER_LISTEN:
        transaction.on_commit(wake_workers_notified, robust=True)


def wake_workers_notified() -> None:
    """The broker's wake-up of a proposal that already told the listening workers."""
    wake_workers(notify=False)


def action_move(
    action: Action,
    to: str,
    *,
    actor: Actor,
    reason: str = "",
    declared: str | None = None,
    note: dict | None = None,
    **fields,
) -> bool:
    """Move `action` from the state it was read in to `to`, if nobody moved it first.

    A conditional UPDATE checked by row count: the loser of a race gets False and changes
    nothing. Writes the audit event and mirrors the ledger in the same transaction, and
    tells `?wait` listeners (a watched action's) when it leaves the in-progress states.

    `declared`: the tool's effect declaration, for a move that only a declaration allows
    (`states.DECLARED_MOVES`: a resend); `note`: more for the audit event's `after`.
    """
    source = action.state
    if declared is None:
        check_move(source, to)
    else:
        check_declared_move(source, to, effect=declared)
    now = timezone.now()
    updated = Action.objects.filter(pk=action.pk, state=source).update(
        state=to, updated_at=now, **fields
    )
    if updated != 1:
        return False
    action.state = to
    action.updated_at = now
    for name, value in fields.items():
        setattr(action, name, value)
    audit(
        actor=actor,
        verb=verb_for_state("action", to),
        obj=action,
        before={"state": source},
        after=_after(to, fields) | (note or {}),
        reason=reason,
    )
    if action.ledger_entry_id is not None:  # a read_only tool's action has no ledger entry
        ledger_set_status(
            action.ledger_entry_id, LEDGER_STATUS_FOR[to], source=LEDGER_STATUS_FOR[source]
        )
    if to not in IN_PROGRESS:
        notify_settled([action.pk])
    if to == ActionState.NEEDS_HUMAN:
        alerts.notify_needs_human(action, why=reason)  # in this transaction, like the audit
    return True


# Settling a dispatch is the hottest write there is (once per effect), so it is one statement:
# close the attempt, move the action if it is still dispatching, mirror the ledger, write the
# audit event and tell `?wait` listeners, all or nothing. The rules stay where they were:
# `check_move` below, and the conditional `state = 'dispatching'` (the sweeper may have
# written the worker off meanwhile; then nothing here happens and the caller takes the slow
# path). Profiled: 4-5 ms of ORM compilation per settle before, one round trip now.
SETTLE_SQL = f"""
WITH attempt AS (
    UPDATE runs_attempt
    SET finished_at = %(now)s, outcome = %(outcome)s, http_status = %(http_status)s,
        detail = %(detail)s
    WHERE id = %(attempt)s AND finished_at IS NULL
    RETURNING id
), moved AS (
    UPDATE runs_action
    SET state = %(to)s, updated_at = %(now)s, lease_expires_at = NULL,
        next_reconcile_at = %(next_reconcile_at)s, resolution = %(resolution)s,
        failure_reason = %(failure_reason)s
    WHERE id = %(action)s AND state = 'dispatching' AND EXISTS (SELECT 1 FROM attempt)
    RETURNING id, tenant_id, ledger_entry_id, watched
), ledger AS (
    UPDATE ledger_ledgerentry SET status = %(ledger_status)s, updated_at = %(now)s
    WHERE id = (SELECT ledger_entry_id FROM moved)
    RETURNING id
), audited AS (
    INSERT INTO core_auditevent
        (id, tenant_id, at, actor_kind, actor_name, verb, object_type, object_id,
         before, after, reason, request_id, client_request_id)
    SELECT %(audit_id)s, tenant_id, %(now)s, %(actor_kind)s, %(actor_name)s, %(verb)s,
           'action', id::text, %(before)s, %(after)s, %(reason)s, %(request_id)s,
           %(client_request_id)s
    FROM moved
    RETURNING id
), notified AS (
    SELECT pg_notify(%(channel)s, id::text) FROM moved WHERE %(notify)s AND {ANNOUNCED}
)
SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM attempt),
       (SELECT count(*) FROM ledger), (SELECT count(*) FROM audited),
       (SELECT count(*) FROM notified)
"""  # noqa: S608 -- ANNOUNCED is a constant, not input
# The same, committed without waiting for the WAL flush: `set_config(..., true)` lasts for
# the statement's own transaction only, so nothing is left to reset on the connection.
SETTLE_SQL_UNFLUSHED = SETTLE_SQL.rstrip() + ", set_config('synchronous_commit', 'off', true)\n"


# queued → dispatching for the picked rows, in ONE statement: the move (its lease from the
# tool's timeout, as `lease_for`), the ledger's in_flight, the first attempt and the audit
# event, returning each row with its tool, principal and tenant. Their time is never before
# the proposal's (`now` is taken before the statement picks; a proposal may commit in
# between), so the audit log reads in order. A picked action that presents
# an approval is left unmoved (`moved` skips it): the caller locks it again and consumes
# the approval (runs.engine.leases).
LEASE_QUEUED = """
WITH picked AS ({pick}),
moved AS (
    UPDATE runs_action a
    SET state = %(to)s, updated_at = greatest(%(now)s, a.updated_at),
        lease_expires_at = %(now)s + make_interval(
            secs => t.timeout_seconds * %(attempts)s + %(extra)s)
    FROM picked, core_tool t
    WHERE a.id = picked.id AND t.id = a.tool_id AND a.state = %(state)s
      AND a.approval_id IS NULL
    RETURNING {action}
),
ledger AS (
    UPDATE ledger_ledgerentry e SET status = %(ledger_to)s, updated_at = %(now)s
    FROM moved m WHERE e.id = m.ledger_entry_id
),
attempts AS (
    INSERT INTO runs_attempt (action_id, number, started_at, outcome, detail, kind)
    SELECT m.id, 1, m.updated_at, '', '', %(kind)s FROM moved m
    RETURNING id, action_id
),
audited AS (
    INSERT INTO core_auditevent
        (id, tenant_id, at, actor_kind, actor_name, verb, object_type, object_id,
         before, after, reason, request_id, client_request_id)
    SELECT {new_id}, m.tenant_id, m.updated_at, %(actor_kind)s, %(actor_name)s,
           %(verb)s, 'action', m.id::text, %(before)s, %(after)s, '',
           coalesce(nullif(m.request_id, ''), %(request_id)s), %(client_request_id)s
    FROM moved m
)
SELECT p.id, x.id, m.*, {tool}, {principal}, {tenant}
FROM picked p
LEFT JOIN moved m ON m.id = p.id
LEFT JOIN attempts x ON x.action_id = m.id
LEFT JOIN core_tool t ON t.id = m.tool_id
LEFT JOIN core_principal pr ON pr.id = m.principal_id
LEFT JOIN core_tenant tn ON tn.id = m.tenant_id
"""


# What a leased row carries, with the aliases the lease statement gives each table.
LEASED = [(Action, "a"), (Tool, "t"), (Principal, "pr"), (Tenant, "tn")]


# LEASE_QUEUED around each `pick`, written once per pick (every effect leases once). The
# picks are the few statement shapes runs.engine.leases writes.
_LEASE_QUEUED_FOR: dict[str, str] = {}


def actions_lease_dispatch(
    pick: str, params: dict, *, actor: Actor, now, timeouts: int, extra_seconds: float
) -> list[tuple]:
    """queued → dispatching for the rows the SELECT `pick` locks (FOR UPDATE SKIP LOCKED,
    with `params`), in ONE statement, which is its own transaction: each lease lasts
    `timeouts` times its tool's timeout plus `extra_seconds`. Rows of (picked id, attempt id
    or None when it presents an approval and was not moved, then the columns of each of
    LEASED's models in turn)."""
    check_move(ActionState.QUEUED, ActionState.DISPATCHING)
    if (sql := _LEASE_QUEUED_FOR.get(pick)) is None:
        action, tool, principal, tenant = (rows.columns(m, alias) for m, alias in LEASED)
        sql = _LEASE_QUEUED_FOR[pick] = LEASE_QUEUED.format(
            pick=pick,
            action=action,
            tool=tool,
            principal=principal,
            tenant=tenant,
            new_id=NEW_ID_SQL,
        )
    params = {
        **params,
        "now": now,
        "to": ActionState.DISPATCHING,
        "attempts": timeouts,
        "extra": extra_seconds,
        "ledger_to": LEDGER_STATUS_FOR[ActionState.DISPATCHING],
        "kind": AttemptKind.SEND,
        "actor_kind": actor.kind,
        "actor_name": actor.name,
        "verb": verb_for_state("action", ActionState.DISPATCHING),
        "before": rows.jsonb({"state": ActionState.QUEUED}),
        "after": rows.jsonb({"state": ActionState.DISPATCHING}),
        "request_id": request_id_var.get(),
        "client_request_id": client_request_id_var.get(),
    }
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def action_settle_dispatch(
    action: Action,
    attempt,
    *,
    to: str,
    outcome: str,
    http_status: int | None,
    detail: str,
    actor: Actor,
    reason: str,
    read_lease=None,
    unflushed: bool = False,
    **fields,
) -> bool:
    """dispatching → `to`, with the attempt closed, in one statement (and in memory: `action`
    and `attempt` are as written). False when the action is no longer dispatching (or its
    attempt was already closed by the sweeper): nothing was written, and the caller records
    the late answer its own way. `unflushed`: its commit does not wait for the WAL to reach
    the disk (a read's settle only).

    An unknown outcome is due a read at once; `read_lease` (a timedelta): the caller reads
    it itself, so the read is leased to it in this statement (`next_reconcile_at` pushed
    past the reads, as `leases.lease_unknown` would) and no other worker reads it too."""
    check_move(ActionState.DISPATCHING, to)
    LEDGER.check(LEDGER_STATUS_FOR[ActionState.DISPATCHING], LEDGER_STATUS_FOR[to])
    now = timezone.now()
    next_reconcile_at = None
    if to == ActionState.UNKNOWN:
        next_reconcile_at = now if read_lease is None else now + read_lease
    with connection.cursor() as cursor:
        cursor.execute(
            SETTLE_SQL_UNFLUSHED if unflushed else SETTLE_SQL,
            {
                "now": now,
                "attempt": attempt.pk,
                "outcome": outcome,
                "http_status": http_status,
                "detail": detail,
                "to": to,
                "action": action.pk,
                "next_reconcile_at": next_reconcile_at,
                "resolution": fields.get("resolution", ""),
                "failure_reason": fields.get("failure_reason", ""),
                "ledger_status": LEDGER_STATUS_FOR[to],
                "audit_id": new_id(),
                "actor_kind": actor.kind,
                "actor_name": actor.name,
                "verb": verb_for_state("action", to),
                "before": rows.jsonb({"state": ActionState.DISPATCHING}),
                "after": rows.jsonb(_after(to, fields)),
                "reason": reason,
                "request_id": request_id_var.get(),
                "client_request_id": client_request_id_var.get(),
                "channel": CHANNEL,
                "notify": to not in IN_PROGRESS,
            },
        )
        moved, *_ = cursor.fetchone()
    if moved != 1:
        return False
    action.state, action.updated_at = to, now
    action.lease_expires_at, action.next_reconcile_at = None, next_reconcile_at
    for name, value in fields.items():
        setattr(action, name, value)
    attempt.finished_at, attempt.outcome = now, outcome
    attempt.http_status, attempt.detail = http_status, detail
    return True


# unknown → settled on a read that proves the outcome (the authoritative state matches, or
# the tool reports it applied the key), in ONE statement: the read recorded, the move, the
# ledger mirrored, the audit event written and `?wait` listeners told, all or nothing. The
# rules stay where they were: `check_move` below and the conditional `state = 'unknown'`
# (a person may have resolved it meanwhile: then nothing here happens and the caller
# records the read its own way). Times are never before the action's last move, so the
# audit log reads in order.
RECONCILED_SQL = f"""
WITH moved AS (
    UPDATE runs_action a
    SET state = %(to)s, updated_at = greatest(%(now)s, a.updated_at),
        resolution = %(resolution)s, next_reconcile_at = NULL
    WHERE a.id = %(action)s AND a.state = %(source)s
    RETURNING a.id, a.tenant_id, a.ledger_entry_id, a.expected_version, a.updated_at, a.watched
), recorded AS (
    INSERT INTO runs_reconciliation
        (action_id, at, authoritative, verdict, diff, expected_version, actual_version,
         detail, actor, kind, declaration)
    SELECT id, updated_at, %(authoritative)s, %(verdict)s, %(diff)s, expected_version,
           %(actual_version)s, %(detail)s, %(actor)s, %(kind)s, %(declaration)s
    FROM moved
    RETURNING id
), ledger AS (
    UPDATE ledger_ledgerentry e SET status = %(ledger_status)s, updated_at = m.updated_at
    FROM moved m WHERE e.id = m.ledger_entry_id AND %(ledger_moves)s
    RETURNING e.id
), audited AS (
    INSERT INTO core_auditevent
        (id, tenant_id, at, actor_kind, actor_name, verb, object_type, object_id,
         before, after, reason, request_id, client_request_id)
    SELECT %(audit_id)s, tenant_id, updated_at, %(actor_kind)s, %(actor_name)s, %(verb)s,
           'action', id::text, %(before)s, %(after)s, %(reason)s, %(request_id)s,
           %(client_request_id)s
    FROM moved
    RETURNING id
), notified AS (
    SELECT pg_notify(%(channel)s, id::text) FROM moved WHERE {ANNOUNCED}
)
SELECT m.updated_at, (SELECT count(*) FROM recorded), (SELECT count(*) FROM ledger),
       (SELECT count(*) FROM audited), (SELECT count(*) FROM notified)
FROM moved m
"""  # noqa: S608 -- ANNOUNCED is a constant, not input


def action_settle_reconciled(
    action: Action,
    *,
    to: str,
    read: dict,
    actor: Actor,
    reason: str,
    resolution: str,
) -> bool:
    """unknown → `to` (succeeded, with its `resolution`) with the read that proved it
    recorded, in one statement. `read`: the Reconciliation's own fields (`authoritative`,
    `verdict`, `diff`, `actual_version`, `detail`, `kind`, `declaration`). False when the
    action is no longer unknown: nothing was written."""
    source = ActionState.UNKNOWN
    check_move(source, to)
    assert to not in IN_PROGRESS and to != ActionState.NEEDS_HUMAN, "alerts go through action_move"
    ledger_from, ledger_to = LEDGER_STATUS_FOR[source], LEDGER_STATUS_FOR[to]
    if ledger_from != ledger_to:
        LEDGER.check(ledger_from, ledger_to)
    with connection.cursor() as cursor:
        cursor.execute(
            RECONCILED_SQL,
            {
                "now": timezone.now(),
                "to": to,
                "source": source,
                "action": action.pk,
                "resolution": resolution,
                "authoritative": _jsonb(read.get("authoritative")),
                "verdict": read["verdict"],
                "diff": Jsonb(read.get("diff", [])),
                "actual_version": read.get("actual_version"),
                "detail": read.get("detail", ""),
                "actor": rows.jsonb(actor.as_dict()),
                "kind": read["kind"],
                "declaration": _jsonb(read.get("declaration")),
                "ledger_status": ledger_to,
                "ledger_moves": ledger_from != ledger_to,
                "audit_id": new_id(),
                "actor_kind": actor.kind,
                "actor_name": actor.name,
                "verb": verb_for_state("action", to),
                "before": rows.jsonb({"state": source}),
                "after": rows.jsonb(_after(to, {"resolution": resolution})),
                "reason": reason,
                "request_id": request_id_var.get(),
                "client_request_id": client_request_id_var.get(),
                "channel": CHANNEL,
            },
        )
        row = cursor.fetchone()
    if row is None:
        return False
    action.state, action.updated_at, action.next_reconcile_at = to, row[0], None
    action.resolution = resolution
    return True


def _jsonb(value):
    """What a tool answered, as jsonb, written by psycopg's own `json.dumps` as before: a NaN
    in it stays an error, where orjson (`rows.jsonb`) would quietly write null."""
    return None if value is None else Jsonb(value)


def _after(to: str, fields: dict) -> dict:
    after = {"state": to}
    for name in ("block_reason", "failure_reason", "resolution", "resolved_on_read_id"):
        if fields.get(name):
            after[name.removesuffix("_id")] = fields[name]
    return after


def actions_move_batch(
    actions: list[Action], to: str, *, actor: Actor, reason: str = "", **fields
) -> list[Action]:
    """`action_move` for many actions in one UPDATE, one audit INSERT and one ledger UPDATE
    (the batch claim). Every action must have been read in the same state; returns the
    ones actually moved (the others were moved by someone else first). Each audit event
    carries the id of the request that proposed its action: the claim acts for it."""
    if not actions:
        return []
    source = actions[0].state
    assert all(a.state == source for a in actions), "one source state per batch"
    check_move(source, to)
    now = timezone.now()
    ids = [a.pk for a in actions]
    updated = Action.objects.filter(pk__in=ids, state=source).update(
        state=to, updated_at=now, **fields
    )
    moved_ids = set(ids)
    if updated != len(ids):  # someone moved some first; ours carry our timestamp
        moved_ids = set(
            Action.objects.filter(pk__in=ids, state=to, updated_at=now).values_list("pk", flat=True)
        )
    moved = [a for a in actions if a.pk in moved_ids]
    for action in moved:
        action.state, action.updated_at = to, now
        for name, value in fields.items():
            setattr(action, name, value)
    audit_many(
        [
            {
                "actor": actor,
                "verb": verb_for_state("action", to),
                "obj": a,
                "before": {"state": source},
                "after": _after(to, fields),
                "reason": reason,
                "request_id": a.request_id or None,
            }
            for a in moved
        ]
    )
    ledger_set_status_many(
        [a.ledger_entry_id for a in moved if a.ledger_entry_id is not None],
        LEDGER_STATUS_FOR[to],
        source=LEDGER_STATUS_FOR[source],
    )
    if to not in IN_PROGRESS:
        notify_settled([a.pk for a in moved])
    return moved


# The verb of each move of a run (pending → running is a runtime claiming a replay).
RUN_VERBS = {
    RunStatus.RUNNING: Verb.RUN_CLAIM,
    RunStatus.SUCCESS: Verb.RUN_SUCCESS,
    RunStatus.ERROR: Verb.RUN_ERROR,
    RunStatus.CANCELLED: Verb.RUN_CANCELLED,
}


def run_move(
    run: Run, to: str, *, actor: Actor, reason: str = "", after=None, where=None, **fields
) -> bool:
    """Move `run` from the status it was read in to `to`, if nobody moved it first: the
    run's one guarded move (the table is `runs.states.RUN`). A conditional UPDATE checked by
    row count (`where` adds conditions, such as the reaper's stale heartbeat), with its
    audit event in the same transaction. The loser of a race gets False and writes nothing.
    """
    source = run.status
    RUN.check(source, to)
    updated = Run.objects.filter(pk=run.pk, status=source, **(where or {})).update(
        status=to, **fields
    )
    if updated != 1:
        return False
    run.status = to
    for name, value in fields.items():
        setattr(run, name, value)
    audit(
        actor=actor,
        verb=RUN_VERBS[to],
        obj=run,
        before={"status": source},
        after={"status": to, **(after or {})},
        reason=reason,
    )
    return True


def force_request_close(request: ForceReplayRequest, to: str, *, actor: Actor, **fields):
    """pending → `to` (confirmed or rejected) on a request locked by `_lock_pending_force`:
    the request's one guarded move (the table is `runs.states.FORCE_REQUEST`). The caller
    audits the decision in the same transaction."""
    FORCE_REQUEST.check(request.state, to)
    request.state = to
    request.decided_by = actor.as_dict()
    request.decided_at = timezone.now()
    for name, value in fields.items():
        setattr(request, name, value)
    request.save(update_fields=["state", "decided_by", "decided_at", *fields])
    return request


def _check_declared_moves():
    """Every declared move lands on a legal move of the ledger's, like the table's."""
    for (source, target), effects in DECLARED_MOVES.items():
        a, b = LEDGER_STATUS_FOR[source], LEDGER_STATUS_FOR[target]
        assert a == b or LEDGER.can(a, b), f"action {source}->{target}: ledger {a}->{b}"
        assert effects == set(ACTION_RESENDS), "say why each declaration allows the move"


_check_declared_moves()
