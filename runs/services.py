"""State changes of runs and actions: one function per change, each audited in its own
transaction. Views, API views, tasks and commands call these; none changes state itself.

The dispatch path (claim → HTTP → settle) and reconciliation live in `runs/dispatch.py`.
"""

import dataclasses
import hashlib
import json
import uuid
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from psycopg.types.json import Jsonb

from approvals.models import Approval, ApprovalRequest, RequestState
from approvals.services import (
    approval_grant,
    approval_problem,
    approval_request_close,
    approval_request_lock_pending,
    approval_request_open,
)
from core import rows
from core.audit import (
    Actor,
    Verb,
    audit,
    audit_fields,
    audit_many,
    client_request_id_var,
    request_id_var,
    verb_for_state,
)
from core.canonical import canonical_json, fingerprint
from core.errors import (
    IdempotencyConflict,
    InputGone,
    ReplayRefused,
    RunNotRunning,
    StaleRead,
    StateConflict,
    reason_required,
)
from core.models import AuditEvent, Role, ToolEffect
from ledger.models import LedgerStatus
from ledger.services import (
    RESERVE,
    ledger_hold_live,
    ledger_live_entry,
    ledger_reserve,
    ledger_reserve_audit,
    ledger_reserve_statement,
    ledger_set_status,
    ledger_set_status_many,
)
from ledger.states import LEDGER

from . import alerts
from .models import (
    Action,
    Attempt,
    ForceReplayRequest,
    ForceRequestState,
    Replay,
    Run,
)
from .notify import CHANNEL, notify_settled
from .selectors import replay_verdict
from .states import (
    ACTION,
    DECLARED_MOVES,
    FORCE_REQUEST,
    IN_PROGRESS,
    RESOLVABLE,
    RUN,
    ActionState,
    AttemptKind,
    BlockReason,
    Resolution,
    RunStatus,
    check_declared_move,
    check_move,
)
from .wakeup import wake_workers

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


def enqueue_dispatch() -> None:
    """Wake a worker once the surrounding transaction commits (never inside it).

    The committed `queued` row is the unit of work; the message only says "there is work"
    and is deduplicated (`runs.wakeup`), so a burst of 10,000 proposals sends a handful of
    messages, not 10,000. `robust`: with the broker down the request still succeeds and the
    error is logged; the next sweep drains the row.
    """
    transaction.on_commit(wake_workers, robust=True)


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
    tells `?wait` listeners when the action leaves the in-progress states.

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
SETTLE_SQL = """
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
    RETURNING id, tenant_id, ledger_entry_id
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
    SELECT pg_notify(%(channel)s, id::text) FROM moved WHERE %(notify)s
)
SELECT (SELECT count(*) FROM moved), (SELECT count(*) FROM attempt),
       (SELECT count(*) FROM ledger), (SELECT count(*) FROM audited),
       (SELECT count(*) FROM notified)
"""


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
    **fields,
) -> bool:
    """dispatching → `to`, with the attempt closed, in one statement. False when the action
    is no longer dispatching (or its attempt was already closed by the sweeper): nothing
    was written, and the caller records the late answer its own way."""
    check_move(ActionState.DISPATCHING, to)
    LEDGER.check(LEDGER_STATUS_FOR[ActionState.DISPATCHING], LEDGER_STATUS_FOR[to])
    now = timezone.now()
    next_reconcile_at = now if to == ActionState.UNKNOWN else None
    with connection.cursor() as cursor:
        cursor.execute(
            SETTLE_SQL,
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
                "audit_id": uuid.uuid4(),
                "actor_kind": actor.kind,
                "actor_name": actor.name,
                "verb": verb_for_state("action", to),
                "before": Jsonb({"state": ActionState.DISPATCHING}),
                "after": Jsonb(_after(to, fields)),
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
    return True


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


# --- runs -----------------------------------------------------------------------------

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


# --- actions ---------------------------------------------------------------------------


def intent_fingerprint(*, principal, tool, target, desired_state, expected_version) -> str:
    fields = tool.identity_fields or sorted(desired_state)
    identity = {k: desired_state[k] for k in fields if k in desired_state}
    return fingerprint(
        {
            "principal": principal.name,
            "tool": tool.name,
            "target": target,
            "identity": identity,
            "expected_version": expected_version,
        }
    )


def action_propose(**kwargs) -> tuple[Action, bool, bool]:
    """`_action_propose`, and a refused proposal (422 idempotency-conflict) recorded: every
    conflict is kept and listed for operators, with both intents side by side."""
    try:
        return _action_propose(**kwargs)
    except IdempotencyConflict:
        idempotency_conflict_record(
            run=kwargs["run"],
            tool=kwargs["tool"],
            target=kwargs["target"],
            desired_state=kwargs["desired_state"],
            expected_version=kwargs["expected_version"],
            key=kwargs["idempotency_key"],
            actor=kwargs["actor"],
        )
        raise


def idempotency_conflict_record(
    *, run, tool, target, desired_state, expected_version, key, actor: Actor
):
    """Record one refused proposal and audit it, in its own transaction (the proposal's
    own work, if any, was rolled back by the refusal)."""
    from .models import IdempotencyConflict as Conflict

    entry = ledger_live_entry(run.tenant, key)
    with transaction.atomic():
        conflict = Conflict.objects.create(
            tenant=run.tenant,
            principal=run.principal,
            key=key,
            existing_action_id=entry.action_id if entry else None,
            attempted={
                "run": str(run.pk),
                "tool": tool.name,
                "target": target,
                "desired_state": desired_state,
                "expected_version": expected_version,
            },
            request_id=request_id_var.get(),
            at=timezone.now(),
        )
        audit(
            actor=actor,
            verb=Verb.IDEMPOTENCY_CONFLICT,
            obj=conflict,
            tenant=run.tenant,
            after={"key": key, "existing_action": str(conflict.existing_action_id)},
        )
    return conflict


def _action_propose(
    *,
    run: Run,
    tool,
    target: str,
    desired_state: dict,
    expected_version: int | None,
    idempotency_key: str,
    approval_id=None,
    reason: str = "",
    actor: Actor,
    known=None,
) -> tuple[Action, bool, bool]:
    """Record a proposed side effect under its idempotency key.

    `reason` is the agent's own words, kept for approvers; it is not part of the intent
    fingerprint, and a ledger hit keeps the first proposal's reason.

    Returns (action, created, content_changed). A ledger hit with the same intent returns
    the existing action and dispatches nothing; a different intent raises
    IdempotencyConflict and creates nothing. `known` is what `selectors.propose_lookup`
    already read for this key (the API passes it, so that a hit costs one read); without
    it the live entry is read here.
    """
    if run.status != RunStatus.RUNNING:
        raise RunNotRunning(f"This run is {run.status}; only a running run may propose.")
    principal = run.principal
    tenant = run.tenant
    intent = {
        "principal": principal,
        "tool": tool,
        "target": target,
        "desired_state": desired_state,
        "expected_version": expected_version,
    }
    intent_fp = intent_fingerprint(**intent)
    if tool.effect == ToolEffect.READ_ONLY:
        return (
            _read_action_create(
                run=run,
                fingerprint=intent_fp,
                key=idempotency_key,
                approval_id=approval_id,
                reason=reason,
                actor=actor,
                **intent,
            ),
            True,
            False,
        )
    if known is not None and known.action is not None:
        return _ledger_hit(known.fingerprint, known.action, intent_fp, desired_state)
    if known is None and (entry := ledger_live_entry(tenant, idempotency_key)) is not None:
        return _ledger_hit(entry.fingerprint, _action_of(entry), intent_fp, desired_state)
    action_id = uuid.uuid4()
    if approval_id is None and not tool.requires_approval:
        action = _propose_queued(
            action_id,
            run=run,
            key=idempotency_key,
            fingerprint=intent_fp,
            reason=reason,
            actor=actor,
            **intent,
        )
        if action is None:
            return _winners_hit(tenant, idempotency_key, intent_fp, desired_state)
        return action, True, False
    with transaction.atomic():
        entry = ledger_reserve(
            tenant=tenant,
            key=idempotency_key,
            fingerprint=intent_fp,
            tool=tool.name,
            action_id=action_id,
            actor=actor,
            audit_later=True,
        )
        if entry is None:
            return _winners_hit(tenant, idempotency_key, intent_fp, desired_state)
        action = _create_action(
            action_id,
            run=run,
            entry=entry,
            approval_id=approval_id,
            reason=reason,
            actor=actor,
            **intent,
        )
    return action, True, False


PROPOSE_QUEUED = f"""
WITH entry AS ({RESERVE.strip()}),
action AS (
    INSERT INTO runs_action
    SELECT r.* FROM entry, jsonb_populate_record(NULL::runs_action, %(action_row)s) r
),
events AS (
    INSERT INTO core_auditevent
    SELECT r.* FROM entry, jsonb_populate_record(
        NULL::core_auditevent,
        -- the generation is the statement's to count (past revoked entries of the key)
        jsonb_set(%(reserved_row)s, '{{after,generation}}', to_jsonb(entry.generation))
    ) r
    UNION ALL
    SELECT r.* FROM entry, jsonb_populate_record(NULL::core_auditevent, %(proposed_row)s) r
)
SELECT generation FROM entry
"""  # noqa: S608 -- RESERVE is a constant, not input


def _propose_queued(
    action_id, *, run, key, fingerprint, reason, actor: Actor, **binding
) -> Action | None:
    """The common proposal, one that goes straight to the queue (no approval presented, none
    required), written in ONE statement in autocommit: the key's ledger reservation, the
    action and both audit events, instead of a transaction of five round trips. The same
    rows as `_create_action` writes; the statement is the transaction, so it is all or
    nothing. None when the key is already live (the reservation inserted nothing, and so
    did the rest of the statement)."""
    entry, params = ledger_reserve_statement(
        tenant=run.tenant,
        key=key,
        fingerprint=fingerprint,
        tool=binding["tool"].name,
        action_id=action_id,
    )
    action = _new_action(
        action_id,
        run=run,
        key=entry.key,
        fingerprint=entry.fingerprint,
        entry=entry,
        state=ActionState.QUEUED,
        approval_id=None,
        reason=reason,
        **binding,
    )
    reserved, proposed = _proposal_events(entry, action, actor=actor)
    params["action_row"] = rows.record(action)
    params["reserved_row"], params["proposed_row"] = rows.record(reserved), rows.record(proposed)
    with connection.cursor() as cursor:
        cursor.execute(PROPOSE_QUEUED, params)
        row = cursor.fetchone()
    if row is None:
        return None
    entry.generation = row[0]
    for obj in (entry, action):
        obj._state.adding, obj._state.db = False, connection.alias
    action.ledger_entry = entry
    enqueue_dispatch()
    return action


def _read_action_create(
    *,
    run,
    principal,
    tool,
    target,
    desired_state,
    expected_version,
    fingerprint,
    key: str | None,
    approval_id,
    reason: str,
    actor: Actor,
) -> Action:
    """A read_only tool's action (issue 13): no approval and no ledger key space.

    A read has no side effect, so there is nothing to approve and nothing to apply at most
    once: no ledger entry is reserved, the key (when the runtime sends one) neither collides
    with a side effect's key nor makes a repeat a ledger hit (each proposal is a new read),
    and without one the action is keyed `read:<action id>`, which the tool receives as its
    Idempotency-Key. An `approval_id` the runtime presents anyway is still checked, and
    consumed at claim, as for any action.
    """
    binding = {
        "principal": principal,
        "tool": tool,
        "target": target,
        "desired_state": desired_state,
        "expected_version": expected_version,
    }
    action_id = uuid.uuid4()
    state, block_reason = ActionState.QUEUED, ""
    if approval_id is not None:
        approval = Approval.objects.filter(pk=approval_id, tenant=run.tenant).first()
        if problem := approval_problem(approval, **binding):
            state, block_reason = ActionState.BLOCKED, problem
    with transaction.atomic():
        action = _new_action(
            action_id,
            run=run,
            key=key or f"read:{action_id}",
            fingerprint=fingerprint,
            entry=None,
            state=state,
            block_reason=block_reason,
            approval_id=approval_id,
            reason=reason,
            **binding,
        )
        action.save(force_insert=True)
        audit(
            actor=actor,
            verb=Verb.ACTION_PROPOSE,
            obj=action,
            reason=reason,
            after={
                "state": state,
                "block_reason": block_reason or None,
                "idempotency_key": action.idempotency_key,
                "approval_id": str(approval_id) if approval_id else None,
                "effect": ToolEffect.READ_ONLY,
                "ledger": None,
                "declaration": tool.declaration,
            },
        )
        if state == ActionState.QUEUED:
            enqueue_dispatch()
    return action


def _action_of(entry) -> Action:
    return Action.objects.select_related("tool", "principal").get(pk=entry.action_id)


def _winners_hit(tenant, key: str, intent_fp: str, desired_state: dict):
    """Lost the race for a new key: the winner's entry is committed and live now."""
    winner = ledger_live_entry(tenant, key)
    return _ledger_hit(winner.fingerprint, _action_of(winner), intent_fp, desired_state)


def _ledger_hit(fingerprint, existing: Action, intent_fp: str, desired_state: dict):
    if fingerprint != intent_fp:
        raise IdempotencyConflict(
            "This Idempotency-Key was already used for a different intent "
            "(principal, tool, target, identity fields or expected_version differ). "
            "Nothing was created or dispatched."
        )
    changed = canonical_json(existing.desired_state) != canonical_json(desired_state)
    return existing, False, changed


def _new_action(
    action_id,
    *,
    run,
    key,
    fingerprint,
    entry,
    state,
    approval_id,
    reason,
    principal,
    tool,
    target,
    desired_state,
    expected_version,
    block_reason="",
) -> Action:
    """The proposal's action, unsaved (`entry`: its ledger entry; None for a read)."""
    return Action(
        id=action_id,
        tenant=run.tenant,
        run=run,
        idempotency_key=key,
        fingerprint=fingerprint,
        ledger_entry=entry,
        effect=tool.effect,
        state=state,
        block_reason=block_reason,
        approval_id=approval_id,
        enqueued_at=timezone.now() if state == ActionState.QUEUED else None,
        request_id=request_id_var.get(),
        reason=reason,
        principal=principal,
        tool=tool,
        target=target,
        desired_state=desired_state,
        expected_version=expected_version,
    )


def _proposal_events(entry, action: Action, *, actor: Actor) -> list[AuditEvent]:
    """The ledger's reservation and the proposal, audited (unsaved)."""
    return [
        AuditEvent(**audit_fields(**ledger_reserve_audit(entry, actor=actor))),
        AuditEvent(
            **audit_fields(
                actor=actor,
                verb=Verb.ACTION_PROPOSE,
                obj=action,
                reason=action.reason,
                after={
                    "state": action.state,
                    "block_reason": action.block_reason or None,
                    "idempotency_key": entry.key,
                    "approval_id": str(action.approval_id) if action.approval_id else None,
                },
            )
        ),
    ]


def _create_action(
    action_id,
    *,
    run,
    entry,
    principal,
    tool,
    target,
    desired_state,
    expected_version,
    approval_id,
    reason="",
    actor: Actor,
) -> Action:
    """A proposal that presents an approval or needs one, inside the caller's transaction
    (the common one, straight to the queue, is `_propose_queued`)."""
    binding = {
        "principal": principal,
        "tool": tool,
        "target": target,
        "desired_state": desired_state,
        "expected_version": expected_version,
    }
    state, block_reason = ActionState.QUEUED, ""
    if approval_id is not None:
        approval = Approval.objects.filter(pk=approval_id, tenant=run.tenant).first()
        if problem := approval_problem(approval, **binding):
            state, block_reason = ActionState.BLOCKED, problem
    elif tool.requires_approval:
        state = ActionState.AWAITING_APPROVAL
    action = _new_action(
        action_id,
        run=run,
        key=entry.key,
        fingerprint=entry.fingerprint,
        entry=entry,
        state=state,
        block_reason=block_reason,
        approval_id=approval_id,
        reason=reason,
        **binding,
    )
    action.save(force_insert=True)
    if state == ActionState.AWAITING_APPROVAL:
        request = approval_request_open(
            tenant=run.tenant, action_id=action.id, actor=actor, **binding
        )
        action.approval_request = request
        action.save(update_fields=["approval_request"])
        alerts.notify_approval_requested(request, action)
    # The ledger's reservation and the proposal, audited in one INSERT.
    rows.insert_many(AuditEvent, _proposal_events(entry, action, actor=actor))
    if state == ActionState.BLOCKED:
        ledger_set_status(entry.pk, LedgerStatus.VOID, source=LedgerStatus.RESERVED)
    if state == ActionState.QUEUED:
        enqueue_dispatch()
    return action


def approval_request_grant(request: ApprovalRequest, *, ttl_seconds: float, actor: Actor):
    """Grant a pending request: a one-shot approval for its exact binding, and the waiting
    action moves to the queue holding it (consumed later, at claim). Approvers only."""
    actor.require(Role.APPROVER)
    with transaction.atomic():
        request = approval_request_lock_pending(request.pk)
        action = Action.objects.select_for_update(no_key=True).get(pk=request.action_id)
        if action.state != ActionState.AWAITING_APPROVAL:
            raise StateConflict(
                f"The action is no longer waiting for approval; it is {action.state}."
            )
        approval_request_close(request, state=RequestState.GRANTED, actor=actor)
        approval = approval_grant(
            tenant=request.tenant,
            principal=request.principal,
            tool=request.tool,
            target=request.target,
            desired_state=request.desired_state,
            expected_version=request.expected_version,
            ttl_seconds=ttl_seconds,
            actor=actor,
            request=request,
        )
        action_move(
            action,
            ActionState.QUEUED,
            actor=actor,
            approval_id=approval.pk,
            enqueued_at=timezone.now(),
        )
        enqueue_dispatch()
    return approval


def approval_request_deny(
    request: ApprovalRequest, *, reason: str, actor: Actor
) -> ApprovalRequest:
    """Deny a pending request, with a reason: its action is blocked, never sent. Approvers
    only."""
    actor.require(Role.APPROVER)
    reason = reason_required(reason)
    with transaction.atomic():
        request = approval_request_lock_pending(request.pk)
        action = Action.objects.select_for_update(no_key=True).get(pk=request.action_id)
        approval_request_close(request, state=RequestState.DENIED, actor=actor, reason=reason)
        if action.state == ActionState.AWAITING_APPROVAL:
            action_move(
                action,
                ActionState.BLOCKED,
                actor=actor,
                reason=reason,
                block_reason=BlockReason.APPROVAL_DENIED,
            )
    return request


def approval_requests_expire(*, actor: Actor, limit: int = 200) -> int:
    """Expire pending requests past their TTL; their actions are blocked, never sent."""
    due = ApprovalRequest.objects.filter(
        state=RequestState.PENDING, expires_at__lte=timezone.now()
    ).values_list("pk", flat=True)[:limit]
    count = 0
    for request_id in due:
        with transaction.atomic():
            request = (
                ApprovalRequest.objects.select_for_update(no_key=True, skip_locked=True)
                .filter(pk=request_id, state=RequestState.PENDING)
                .first()
            )
            if request is None:
                continue
            approval_request_close(request, state=RequestState.EXPIRED, actor=actor)
            action = Action.objects.select_for_update(no_key=True).get(pk=request.action_id)
            if action.state == ActionState.AWAITING_APPROVAL:
                action_move(
                    action,
                    ActionState.BLOCKED,
                    actor=actor,
                    block_reason=BlockReason.APPROVAL_EXPIRED,
                    reason="No decision before the approval request expired.",
                )
            count += 1
    return count


def action_resolve(
    action: Action, *, outcome: str, reason: str, actor: Actor, based_on_read=None
) -> Action:
    """An on-call person settles an outcome Takeover could not prove.

    Fresh decisions: the decision is recorded with the read of the authoritative state it was
    based on (the latest one). It is refused (StaleRead, a 409) when that read is older than
    RESOLVE_READ_MAX_AGE_SECONDS, or when `based_on_read` (the read the operator was looking
    at) is not the latest one any more. An action never read at all (the tool's state could
    not even be asked for yet) may be resolved: there is nothing fresher to ask for.
    """
    actor.require(Role.ONCALL)
    reason = reason_required(reason)
    if outcome not in {ActionState.SUCCEEDED, ActionState.FAILED}:
        raise StateConflict("outcome must be succeeded or failed.")
    with transaction.atomic():
        action = Action.objects.select_for_update(no_key=True).get(pk=action.pk)
        if action.state not in RESOLVABLE:
            raise StateConflict(
                "Only an unknown or needs_human action can be resolved; "
                f"this one is {action.state}."
            )
        latest = action.reconciliations.order_by("-at", "-id").first()
        if latest is not None:
            if based_on_read is not None and str(based_on_read) != str(latest.pk):
                raise StaleRead(
                    "A newer read of the authoritative state arrived "
                    f"({latest.at:%H:%M:%S} UTC, {latest.verdict}); look at it, then decide."
                )
            age = (timezone.now() - latest.at).total_seconds()
            limit = settings.RESOLVE_READ_MAX_AGE_SECONDS
            if age > limit:
                raise StaleRead(
                    f"The latest read of the authoritative state is {age:.0f} s old (the limit "
                    f"is {limit:.0f} s). Re-check now, then decide on what it shows."
                )
        action_move(
            action,
            outcome,
            actor=actor,
            reason=reason,
            resolution=Resolution.RESOLVED_BY_OPERATOR,
            resolution_reason=reason,
            next_reconcile_at=None,
            resolved_on_read_id=latest.pk if latest else None,
        )
    return action


def action_acknowledge(action: Action, *, note: str = "", actor: Actor) -> Action:
    """An on-call person acknowledges a blocked action: it is final (never dispatched), and
    once acknowledged it leaves the open queue and its counts. Nothing else changes: the
    state stays `blocked`, and the action stays findable (run, audit log, search).

    A conditional UPDATE, so two people acknowledging at once write one audit event; the
    loser gets a StateConflict naming who was first.
    """
    actor.require(Role.ONCALL)
    now = timezone.now()
    with transaction.atomic():
        updated = Action.objects.filter(
            pk=action.pk, state=ActionState.BLOCKED, acknowledged_at__isnull=True
        ).update(acknowledged_at=now, acknowledged_by=actor.as_dict(), acknowledge_note=note)
        action = Action.objects.get(pk=action.pk)
        if updated != 1:
            if action.state != ActionState.BLOCKED:
                raise StateConflict(
                    f"Only a blocked action can be acknowledged; this one is {action.state}."
                )
            who = action.acknowledged_by or {}
            raise StateConflict(
                f"{who.get('kind', '')}:{who.get('name', '')} already acknowledged this action."
            )
        audit(
            actor=actor,
            verb=Verb.ACTION_ACKNOWLEDGE,
            obj=action,
            before={"state": ActionState.BLOCKED, "acknowledged": False},
            after={"state": ActionState.BLOCKED, "acknowledged": True},
            reason=note,
        )
    return action


def action_claim_for_operator(
    action: Action, *, user, actor: Actor, take_over_from=None
) -> tuple[Action, bool]:
    """Take an open action so that a second on-call sees who has it. Returns (action, won).

    `take_over_from` (a user id) takes the claim from its holder (gone home, say), only if
    that user still holds it, so two people taking over at once do not both win.
    """
    actor.require(Role.ONCALL)
    with transaction.atomic():
        now = timezone.now()
        holder = Action.objects.filter(pk=action.pk)
        if take_over_from is None:
            holder = holder.filter(claimed_by__isnull=True)
        else:
            holder = holder.filter(claimed_by_id=take_over_from)
        won = holder.update(claimed_by=user, claimed_at=now) == 1
        action = Action.objects.select_related("claimed_by").get(pk=action.pk)
        if won:
            from django.contrib.auth import get_user_model

            before = None
            if take_over_from is not None:
                before = {
                    "claimed_by": get_user_model()
                    .objects.filter(pk=take_over_from)
                    .values_list("username", flat=True)
                    .first()
                }
            audit(
                actor=actor,
                verb=Verb.ACTION_CLAIM if take_over_from is None else "action.claim_take_over",
                obj=action,
                before=before,
                after={"claimed_by": user.get_username()},
            )
    return action, won or action.claimed_by_id == user.pk


def action_release_claim(action: Action, *, user, actor: Actor) -> Action:
    actor.require(Role.ONCALL)
    with transaction.atomic():
        if Action.objects.filter(pk=action.pk, claimed_by=user).update(
            claimed_by=None, claimed_at=None
        ):
            audit(
                actor=actor,
                verb=Verb.ACTION_RELEASE,
                obj=action,
                before={"claimed_by": user.get_username()},
            )
    return Action.objects.get(pk=action.pk)


def lease_for(tool) -> timedelta:
    """Worst case for one dispatch: every attempt times out, plus retry delays, plus grace."""
    attempts = settings.SAFE_RETRY_LIMIT + 1
    seconds = (
        tool.timeout_seconds * attempts
        + settings.SAFE_RETRY_DELAY_SECONDS * settings.SAFE_RETRY_LIMIT
        + settings.DISPATCH_LEASE_GRACE_SECONDS
    )
    return timedelta(seconds=seconds)


def resend_lease_for(tool) -> timedelta:
    """A resend is one attempt (no safe retry inside it), plus grace."""
    return timedelta(seconds=tool.timeout_seconds + settings.DISPATCH_LEASE_GRACE_SECONDS)


LOCK_DECLARATION = """
SELECT effect, lookup, declared_by, declared_at FROM core_tool WHERE id = %s FOR SHARE
"""


def action_resend_start(action: Action, *, actor: Actor):
    """unknown → dispatching again, as a new attempt of the same action under the same
    Idempotency-Key, when the tool's declaration allows it (`states.DECLARED_MOVES`: an
    `idempotent` tool applies a key at most once; a `read_only` one has no effect to apply).
    Returns the new attempt, opened and committed before the call (invariant 1), or None
    when the action is no longer unknown, the declaration no longer allows it, or an admin
    revoked its ledger entry (the effect was undone: its key must not fire again).

    The declaration is read under FOR SHARE in this transaction, so an admin's change
    (`tool_declare` locks the row) is either seen here or waits for this claim: the copy
    kept on the attempt and in the audit event is the one that allowed the resend.
    """
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(LOCK_DECLARATION, [action.tool_id])
            effect, lookup, declared_by, declared_at = cursor.fetchone()
        if isinstance(declared_by, str):  # jsonb comes back as text to raw cursors
            declared_by = json.loads(declared_by)
        declaration = {
            "effect": effect,
            "lookup": lookup,
            "declared_by": declared_by,
            "declared_at": declared_at.isoformat() if declared_at else None,
        }
        if not ACTION_RESENDS.get(effect):
            return None  # re-declared unsafe since the decision to resend: never re-sent
        if action.ledger_entry_id is not None and not ledger_hold_live(action.ledger_entry_id):
            return None
        last = Attempt.objects.filter(action_id=action.pk).order_by("-number").first()
        number = (last.number if last else 0) + 1
        now = timezone.now()
        who = declared_by or {}
        moved = action_move(
            action,
            ActionState.DISPATCHING,
            actor=actor,
            reason=f"resent with the same Idempotency-Key: {action.tool.name} is declared "
            f"{effect} ({ACTION_RESENDS[effect]}; declared by "
            f"{who.get('kind', '?')}:{who.get('name', '?')})",
            declared=effect,
            note={
                "attempt": number,
                "kind": AttemptKind.RESEND,
                "idempotency_key": action.idempotency_key,
                "declaration": declaration,
            },
            lease_expires_at=now + resend_lease_for(action.tool),
            next_reconcile_at=None,
        )
        if not moved:
            return None  # settled, resolved or resent by someone else meanwhile
        return Attempt.objects.create(
            action_id=action.pk,
            number=number,
            started_at=now,
            kind=AttemptKind.RESEND,
            declaration=declaration,
        )


# Why each declaration that allows a resend makes it harmless, in the audit event's words.
ACTION_RESENDS = {
    "idempotent": "it declares that it applies one Idempotency-Key at most once and answers "
    "a repeat with the first result",
    "read_only": "it declares it has no side effect",
}


def _check_declared_moves():
    """Every declared move lands on a legal move of the ledger's, like the table's."""
    for (source, target), effects in DECLARED_MOVES.items():
        a, b = LEDGER_STATUS_FOR[source], LEDGER_STATUS_FOR[target]
        assert a == b or LEDGER.can(a, b), f"action {source}->{target}: ledger {a}->{b}"
        assert effects == set(ACTION_RESENDS), "say why each declaration allows the move"


_check_declared_moves()


# --- claiming, reaping and replaying runs ------------------------------------------------


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


def _refuse_second_unsettled_replay(run: Run) -> None:
    """A run has at most one unsettled replay (pending or running), forced or not
    (docs/design.md, "Runs and replay"). The caller holds the lock on `run`, which serializes
    replays of it; under READ COMMITTED this read then sees a replay that a concurrent
    request just committed."""
    waiting = (
        Run.objects.filter(replay_of=run, status__in=[RunStatus.PENDING, RunStatus.RUNNING])
        .values_list("pk", "status")
        .first()
    )
    if waiting is not None:
        raise ReplayRefused(
            f"This run already has a replay that has not settled: run {waiting[0]} is "
            f"{waiting[1]}. Wait until it finishes.",
            unsettled_replay=str(waiting[0]),
        )


def run_replay(run: Run, *, force: bool, reason: str, actor: Actor) -> Run:
    """Create a new pending run with the same input; history is never rewritten.

    The run's principal and any operator may ask; `force` is an admin's alone and needs a
    reason (a 403 and a 400 otherwise), whoever calls this.
    """
    if force:
        actor.require(Role.ADMIN)
        reason = reason_required(reason)
    with transaction.atomic():
        # The lock on the original run serializes replays of it, so exactly one of many
        # concurrent requests creates one.
        run = Run.objects.select_for_update(no_key=True).get(pk=run.pk)
        verdict = replay_verdict(run)
        if verdict.gone:
            raise InputGone(verdict.message)
        _refuse_second_unsettled_replay(run)
        if not verdict.allowed and not (force and verdict.forceable):
            raise ReplayRefused(
                verdict.message,
                tools_at_risk=verdict.tools_at_risk,
                **({"safe_tools": verdict.safe_tools} if verdict.safe_tools else {}),
            )
        now = timezone.now()
        new_run = Run.objects.create(
            tenant=run.tenant,
            principal=run.principal,
            trigger=run.trigger,
            config=run.config,
            input_file=run.input_file.name,
            input_name=run.input_name,
            input_size=run.input_size,
            input_sha256=run.input_sha256,
            session_id=uuid.uuid4().hex,
            status=RunStatus.PENDING,
            replay_of=run,
        )
        Replay.objects.create(
            tenant=run.tenant,
            original_run=run,
            new_run=new_run,
            actor=actor.as_dict(),
            forced=force,
            reason=reason,
            tools_at_risk=verdict.tools_at_risk,
            safe_tools=verdict.safe_tools,
            at=now,
        )
        after = {"status": RunStatus.PENDING, "replay_of": str(run.pk), "forced": force}
        if verdict.safe_tools:  # the declarations this decision relied on, as they were
            after["safe_tools"] = verdict.safe_tools
        audit(actor=actor, verb=Verb.RUN_REPLAY, obj=new_run, after=after, reason=reason)
        if force:
            audit(
                actor=actor,
                verb=Verb.FORCE_REPLAY,
                obj=run,
                after={"new_run": str(new_run.pk), "tools_at_risk": verdict.tools_at_risk},
                reason=reason,
            )
            alerts.notify_force_replay(
                run, new_run, actor=actor, reason=reason, tools_at_risk=verdict.tools_at_risk
            )
    return new_run


# --- four-eyes force replay --------------------------------------------------------------


def run_force_replay(run: Run, *, reason: str, actor: Actor):
    """An admin forces a replay. Returns (new_run, None), or (None, request) when the
    tenant requires four eyes: the request then waits, visibly, until a different admin
    confirms or rejects it. Admins only, with a reason.

    A replay the rule allows without force needs no second admin (nothing is at risk).
    """
    from django.db import IntegrityError

    actor.require(Role.ADMIN)
    reason = reason_required(reason)

    run = Run.objects.select_related("tenant").get(pk=run.pk)
    if not run.tenant.four_eyes_force_replay:
        return run_replay(run, force=True, reason=reason, actor=actor), None
    with transaction.atomic():
        run = Run.objects.select_for_update(no_key=True).get(pk=run.pk)
        verdict = replay_verdict(run)
        if verdict.gone:
            raise InputGone(verdict.message)
        # Not even a request for a second admin while a replay of this run still waits.
        _refuse_second_unsettled_replay(run)
        if verdict.allowed:
            return run_replay(run, force=True, reason=reason, actor=actor), None
        if not verdict.forceable:
            raise ReplayRefused(verdict.message, tools_at_risk=verdict.tools_at_risk)
        waiting = ForceReplayRequest.objects.filter(run=run, state=ForceRequestState.PENDING)
        if first := waiting.first():
            who = first.requested_by
            raise ReplayRefused(
                f"A force replay of this run already waits for a second admin (asked by "
                f"{who['kind']}:{who['name']}).",
                tools_at_risk=verdict.tools_at_risk,
            )
        try:
            with transaction.atomic():
                request = ForceReplayRequest.objects.create(
                    tenant=run.tenant,
                    run=run,
                    requested_by=actor.as_dict(),
                    reason=reason,
                    tools_at_risk=verdict.tools_at_risk,
                )
        except IntegrityError as exc:  # a racing admin's request won
            raise ReplayRefused(
                "A force replay of this run already waits for a second admin.",
                tools_at_risk=verdict.tools_at_risk,
            ) from exc
        audit(
            actor=actor,
            verb=Verb.FORCE_REPLAY_REQUEST,
            obj=run,
            after={"request": str(request.pk), "tools_at_risk": verdict.tools_at_risk},
            reason=reason,
        )
    return None, request


def _lock_pending_force(request: ForceReplayRequest) -> ForceReplayRequest:
    request = (
        ForceReplayRequest.objects.select_for_update(no_key=True)
        .select_related("run", "tenant")
        .get(pk=request.pk)
    )
    if request.state != ForceRequestState.PENDING:
        who = request.decided_by or {}
        raise StateConflict(
            f"This force replay request is already {request.state} "
            f"(by {who.get('kind', '')}:{who.get('name', '')})."
        )
    return request


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


def force_replay_confirm(request: ForceReplayRequest, *, actor: Actor) -> Run:
    """A second admin confirms: the replay is created now, forced, in the requester's name
    and with their reason; the confirmation is audited in the confirmer's. The requester
    cannot confirm their own request."""
    actor.require(Role.ADMIN)
    with transaction.atomic():
        request = _lock_pending_force(request)
        requester = Actor(**request.requested_by)
        if requester == actor:
            raise StateConflict(
                "You asked for this force replay; a different admin must confirm it (four eyes)."
            )
        # In the requester's name, as the admin they were when they asked; the confirmer
        # holds the role now (checked above).
        as_requester = dataclasses.replace(requester, roles=frozenset({Role.ADMIN}))
        new_run = run_replay(request.run, force=True, reason=request.reason, actor=as_requester)
        force_request_close(request, ForceRequestState.CONFIRMED, actor=actor, new_run=new_run)
        audit(
            actor=actor,
            verb=Verb.FORCE_REPLAY_CONFIRM,
            obj=request.run,
            before={"request": "pending"},
            after={
                "request": str(request.pk),
                "new_run": str(new_run.pk),
                "requested_by": request.requested_by,
            },
            reason=request.reason,
        )
    return new_run


def force_replay_reject(request: ForceReplayRequest, *, reason: str, actor: Actor):
    """A different admin rejects the request, or its requester withdraws it. Nothing is
    replayed."""
    actor.require(Role.ADMIN)
    with transaction.atomic():
        request = _lock_pending_force(request)
        force_request_close(
            request, ForceRequestState.REJECTED, actor=actor, decision_reason=reason
        )
        audit(
            actor=actor,
            verb=Verb.FORCE_REPLAY_REJECT,
            obj=request.run,
            before={"request": "pending"},
            after={"request": str(request.pk)},
            reason=reason,
        )
    return request


def force_request_dict(request: ForceReplayRequest) -> dict:
    return {
        "id": str(request.pk),
        "run": str(request.run_id),
        "state": request.state,
        "requested_by": request.requested_by,
        "reason": request.reason,
        "tools_at_risk": request.tools_at_risk,
        "decided_by": request.decided_by,
        "decided_at": request.decided_at.isoformat() if request.decided_at else None,
        "decision_reason": request.decision_reason or None,
        "new_run": str(request.new_run_id) if request.new_run_id else None,
        "created_at": request.created_at.isoformat(),
    }


def replay_record(run_or_record) -> dict:
    """The replay history row for GET /replays."""
    record = getattr(run_or_record, "replay_record", run_or_record)
    return {
        "id": str(record.pk),
        "original_run": str(record.original_run_id),
        "new_run": str(record.new_run_id),
        "actor": record.actor,
        "forced": record.forced,
        "reason": record.reason,
        "tools_at_risk": record.tools_at_risk,
        "safe_tools": record.safe_tools,
        "at": record.at.isoformat(),
    }
