"""A proposal under its idempotency key (docs/design.md, "The effect ledger"). Three ways in:

- a `read_only` tool's action takes no ledger key space and needs no approval
  (`_read_action_create`);
- the common one, straight to the queue, is ONE statement: the key's reservation, the
  action and both audit events (`_propose_queued`);
- one that presents an approval or needs one is a transaction (`_create_action`).

All three build the action with `_new_action`. A key already live is a ledger hit (the same
intent: the existing action, nothing sent) or an idempotency conflict (a different intent:
refused, and recorded for operators).
"""

import functools
import uuid
from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from approvals.models import Approval
from approvals.services import approval_problem, approval_request_open
from core import rows
from core.audit import Actor, Verb, audit, audit_fields, request_id_var
from core.canonical import canonical_json, fingerprint
from core.errors import IdempotencyConflict, RunNotRunning
from core.models import AuditEvent, ToolEffect
from ledger.models import LedgerStatus
from ledger.services import (
    RESERVE,
    ledger_live_entry,
    ledger_reserve,
    ledger_reserve_audit,
    ledger_reserve_execute,
    ledger_reserve_statement,
    ledger_set_status,
)

from . import alerts, origin
from .claim import claimed, insert_claimed
from .models import Action, Attempt, Run
from .moves import enqueue_dispatch
from .states import ActionState, RunStatus
from .wakeup import queued_note


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


def _intent(run, tool, target: str, desired_state: dict, expected_version) -> dict:
    """What a proposal asks for, as its run's principal: the fields an approval binds and
    the fingerprint covers."""
    return {
        "principal": run.principal,
        "tool": tool,
        "target": target,
        "desired_state": desired_state,
        "expected_version": expected_version,
    }


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
    action_id=None,
    unflushed: bool = False,
    claimer: Actor | None = None,
    lease: timedelta | None = None,
) -> tuple[Action, bool, bool]:
    """Record a proposed side effect under its idempotency key.

    `reason` is the agent's own words, kept for approvers; it is not part of the intent
    fingerprint, and a ledger hit keeps the first proposal's reason.

    Returns (action, created, content_changed). A ledger hit with the same intent returns
    the existing action and dispatches nothing; a different intent raises
    IdempotencyConflict and creates nothing. `known` is what `selectors.propose_lookup`
    already read for this key (the API passes it, so that a hit costs one read); without
    it the live entry is read here. (A read that its caller dispatches itself, the MCP
    gateway's pass-through, is `read_claimed`.) `action_id`: the new action's id, chosen by
    the caller (one that waits for it listens before it exists); a new one by default.
    `unflushed`: a proposal straight to the queue commits without waiting for the disk
    (`_propose_queued`); its caller flushes before it answers with the action still
    queued (`action_flush`).
    `claimer`: a proposal straight to the queue is leased to `claimer` for `lease` in its own
    statement instead, for its caller to dispatch at once (runs/claim.py); the new action
    comes back `dispatching`, with its attempt 1 as `action.claimed_attempt`.
    """
    if run.status != RunStatus.RUNNING:
        raise RunNotRunning(f"This run is {run.status}; only a running run may propose.")
    tenant = run.tenant
    intent = _intent(run, tool, target, desired_state, expected_version)
    intent_fp = intent_fingerprint(**intent)
    if tool.effect == ToolEffect.READ_ONLY:
        write = _read_action_create  # a read holds no key: always a new action
    else:
        if known is not None and known.action is not None:
            return _ledger_hit(known.fingerprint, known.action, intent_fp, desired_state)
        if known is None and (entry := ledger_live_entry(tenant, idempotency_key)) is not None:
            return _ledger_hit(entry.fingerprint, _action_of(entry), intent_fp, desired_state)
        # Straight to the queue in one statement, or, presenting or needing an approval, in a
        # transaction; either writes nothing and answers None when the key is live already.
        queued = approval_id is None and not tool.requires_approval
        write = _create_action
        if queued and claimer is not None:
            write = functools.partial(_propose_claimed, claimer=claimer, lease=lease)
        elif queued:
            write = functools.partial(_propose_queued, unflushed=unflushed)
    action = write(
        action_id or uuid.uuid4(),
        run=run,
        key=idempotency_key,
        fingerprint=intent_fp,
        approval_id=approval_id,
        reason=reason,
        actor=actor,
        **intent,
    )
    if action is None:
        return _winners_hit(tenant, idempotency_key, intent_fp, desired_state)
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
SELECT generation, pg_notify('takeover_work', %(work_note)s) FROM entry
"""  # noqa: S608 -- RESERVE is a constant, not input
# Its commit does not wait for the WAL to reach the disk (`_propose_queued`'s `unflushed`).
PROPOSE_QUEUED_UNFLUSHED = (
    PROPOSE_QUEUED.rstrip().rpartition(" FROM entry")[0]
    + ", set_config('synchronous_commit', 'off', true) FROM entry\n"
)


def _keyed_proposal(
    action_id, *, run, key, fingerprint, approval_id, reason, actor: Actor, status=None, **binding
):
    """What a one-statement proposal under a key writes, unsaved: the ledger entry (in
    `status`, `reserved` by default) with the reservation's parameters, the action, and the
    reservation's and the proposal's audit events."""
    entry, params = ledger_reserve_statement(
        tenant=run.tenant,
        key=key,
        fingerprint=fingerprint,
        tool=binding["tool"].name,
        action_id=action_id,
    )
    if status is not None:
        entry.status = params["status"] = status
    action = _new_action(
        action_id, run=run, approval_id=approval_id, reason=reason, entry=entry, **binding
    )
    return entry, params, action, _proposal_events(entry, action, actor=actor)


def _propose_queued(action_id, *, unflushed: bool = False, **proposal) -> Action | None:
    """The common proposal, one that goes straight to the queue (no approval presented, none
    required), written in ONE statement in autocommit: the key's ledger reservation, the
    action and both audit events, instead of a transaction of five round trips. The same
    rows as `_create_action` writes; the statement is the transaction, so it is all or
    nothing. None when the key is already live (the reservation inserted nothing, and so
    did the rest of the statement).

    `unflushed`: the statement's commit does not wait for the WAL to reach the disk. For a
    proposer that tells nobody of the action before a later commit that does wait: the
    worker's lease (committed, and flushed, before any call; flushing it flushes this
    commit, written before it), or `action_flush`. A crash in between loses a proposal
    that nobody was told of and nothing acted on; its retry proposes it again."""
    entry, params, action, (reserved, proposed) = _keyed_proposal(action_id, **proposal)
    params["action_row"] = rows.record(action)
    params["reserved_row"], params["proposed_row"] = rows.record(reserved), rows.record(proposed)
    params["work_note"] = queued_note(action_id)
    sql = PROPOSE_QUEUED_UNFLUSHED if unflushed else PROPOSE_QUEUED
    if ledger_reserve_execute(entry, sql, params) is None:
        return None
    action._state.adding, action._state.db = False, connection.alias
    enqueue_dispatch(notified=True)  # the statement's pg_notify told the listening workers
    return action


def _propose_claimed(action_id, *, claimer: Actor, lease: timedelta, **proposal) -> Action | None:
    """The common proposal (`_propose_queued`'s), leased at once to `claimer`, who
    dispatches it: one statement (runs/claim.py) with the ledger entry `in_flight`. None when
    the key is already live."""
    _entry, reserve, action, (reserved, proposed) = _keyed_proposal(
        action_id, status=LedgerStatus.IN_FLIGHT, **proposal
    )
    event, attempt = claimed(action, claimer=claimer, lease=lease)
    events = {"reserved": reserved, "proposed": proposed, "claimed": event}
    if insert_claimed(action, attempt, events, reserve=reserve) is None:
        return None
    action.claimed_attempt = attempt
    return action


def action_flush(action_id) -> None:
    """Make sure an `unflushed` proposal has reached the disk before anyone is told of it: a
    write of its own row (its timestamp set to itself) committed the usual way, which waits
    for the WAL up to its own commit, written after the proposal's. Waits behind a lease
    that holds the row, and then writes nothing: that lease's commit was flushed."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_action SET updated_at = updated_at WHERE id = %s AND state = 'queued'",
            [action_id],
        )


def _read_action_create(
    action_id,
    *,
    run,
    fingerprint,
    key: str | None,
    approval_id,
    reason: str,
    actor: Actor,
    **binding,
) -> Action:
    """A read_only tool's action: no approval and no ledger key space.

    A read has no side effect, so there is nothing to approve and nothing to apply at most
    once: no ledger entry is reserved, the key (when the runtime sends one) neither collides
    with a side effect's key nor makes a repeat a ledger hit (each proposal is a new read),
    and without one the action is keyed `read:<action id>`, which the tool receives as its
    Idempotency-Key. An `approval_id` the runtime presents anyway is still checked, and
    consumed at claim, as for any action.
    """
    with transaction.atomic():
        action = _new_action(
            action_id,
            run=run,
            approval_id=approval_id,
            reason=reason,
            key=key or f"read:{action_id}",
            fingerprint=fingerprint,
            **binding,
        )
        action.save(force_insert=True)
        audit(**_proposal_audit(action, actor=actor))
        if action.state == ActionState.QUEUED:
            enqueue_dispatch(action_id=action.pk)
    return action


def _presented(run, approval_id, binding: dict) -> tuple[str, str]:
    """Where a proposal presenting `approval_id` (or none) starts: queued, or blocked with
    the reason the approval does not fit this intent. A read checks it as a side effect does."""
    if approval_id is not None:
        approval = Approval.objects.filter(pk=approval_id, tenant=run.tenant).first()
        if problem := approval_problem(approval, **binding):
            return ActionState.BLOCKED, problem
    return ActionState.QUEUED, ""


def read_claimed(
    *,
    run,
    tool,
    target: str,
    desired_state: dict,
    expected_version: int | None,
    key: str | None,
    reason: str,
    actor: Actor,
    claimer: Actor,
    lease,
    unflushed: bool = False,
) -> tuple[Action, Attempt]:
    """A read_only tool's action that its proposer dispatches itself, in its own thread (the
    MCP gateway's pass-through): proposed and claimed at once, in ONE statement instead of
    a proposal and a lease (two transactions, eleven round trips).

    The same rows, in the same order, as `_read_action_create` followed by `lease_queued`
    would write: the action (no ledger entry, no approval; keyed `read:<action id>` when the
    caller sends no key), the `action.propose` event (queued, by `actor`), the move to
    `dispatching` (by `claimer`, the lease `lease` long) and attempt 1. No worker ever sees
    it queued, so none is woken and none can take it; should the caller die, the lease runs
    out and the sweeper hands it to reconciliation, as for any dispatch.

    `unflushed`: the statement's own commit does not wait for the WAL to reach the disk
    (`synchronous_commit = off` for its transaction only: nothing is left set on the
    connection): a crash may lose the record of a read from its last fraction of a second;
    a read changed nothing."""
    if run.status != RunStatus.RUNNING:
        raise RunNotRunning(f"This run is {run.status}; only a running run may propose.")
    assert tool.effect == ToolEffect.READ_ONLY, "only a read is claimed by this path"
    binding = _intent(run, tool, target, desired_state, expected_version)
    action_id = uuid.uuid4()
    action = _new_action(
        action_id,
        run=run,
        key=key or f"read:{action_id}",
        fingerprint=intent_fingerprint(**binding),
        approval_id=None,
        reason=reason,
        **binding,
    )
    # Proposed as queued; the claim moves it to dispatching.
    proposed = rows.new(AuditEvent, **audit_fields(**_proposal_audit(action, actor=actor)))
    event, attempt = claimed(action, claimer=claimer, lease=lease)
    insert_claimed(action, attempt, {"proposed": proposed, "claimed": event}, unflushed=unflushed)
    return action, attempt


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
    approval_id,
    reason,
    entry=None,
    key=None,
    fingerprint=None,
    needs_approval=False,
    **binding,
) -> Action:
    """The proposal's action, unsaved, in the state it starts in (`_presented`; awaiting an
    approval when it presents none and `needs_approval`). `entry`: its ledger entry, whose
    key and fingerprint it takes; a read has none and gives its own.

    The action holds its entry's key, not the entry: Django would cache each on the other
    (a one-to-one's back-reference), and every proposal would leave that cycle for the
    cyclic collector, whose pauses, every few seconds under load, stop every request of the
    web process (tests/takeover/test_collector.py). The same goes for the claimed attempt
    (runs/claim.py), which holds its action's key."""
    state, block_reason = _presented(run, approval_id, binding)
    if approval_id is None and needs_approval:
        state = ActionState.AWAITING_APPROVAL
    if entry is not None:
        key, fingerprint = entry.key, entry.fingerprint
    return rows.new(
        Action,
        **origin.action_fields(),
        id=action_id,
        tenant=run.tenant,
        run=run,
        idempotency_key=key,
        fingerprint=fingerprint,
        ledger_entry_id=entry and entry.pk,  # the key only: see _new_action's docstring
        effect=binding["tool"].effect,
        state=state,
        block_reason=block_reason,
        approval_id=approval_id,
        enqueued_at=timezone.now() if state == ActionState.QUEUED else None,
        request_id=request_id_var.get(),
        reason=reason,
        **binding,
    )


def _proposal_events(entry, action: Action, *, actor: Actor) -> list[AuditEvent]:
    """The ledger's reservation and the proposal, audited (unsaved)."""
    return [
        rows.new(AuditEvent, **audit_fields(**ledger_reserve_audit(entry, actor=actor))),
        rows.new(AuditEvent, **audit_fields(**_proposal_audit(action, actor=actor))),
    ]


def _proposal_audit(action: Action, *, actor: Actor) -> dict:
    """The `action.propose` event, as `audit()`'s arguments: the state the action starts in
    and what it presented. A read says so: no ledger entry, and the declaration it passed
    through under."""
    after = {
        "state": action.state,
        "block_reason": action.block_reason or None,
        "idempotency_key": action.idempotency_key,
        "approval_id": str(action.approval_id) if action.approval_id else None,
    }
    if action.effect == ToolEffect.READ_ONLY:
        after |= {"effect": action.effect, "ledger": None, "declaration": action.tool.declaration}
    return {
        "actor": actor,
        "verb": Verb.ACTION_PROPOSE,
        "obj": action,
        "reason": action.reason,
        "after": {**after, **origin.as_dict()},
    }


def _create_action(
    action_id, *, run, key, fingerprint, approval_id, reason="", actor: Actor, **binding
) -> Action | None:
    """A proposal that presents an approval or needs one, in one transaction: the key's
    reservation (None when the key is live already, and nothing written), the action, its
    approval request when it waits for one, and their audit events (the common proposal,
    straight to the queue, is `_propose_queued`)."""
    with transaction.atomic():
        entry = ledger_reserve(
            tenant=run.tenant,
            key=key,
            fingerprint=fingerprint,
            tool=binding["tool"].name,
            action_id=action_id,
            actor=actor,
            audit_later=True,
        )
        if entry is None:
            return None
        action = _new_action(
            action_id,
            run=run,
            approval_id=approval_id,
            reason=reason,
            entry=entry,
            needs_approval=binding["tool"].requires_approval,
            **binding,
        )
        state = action.state
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
            enqueue_dispatch(action_id=action.pk)
    return action
