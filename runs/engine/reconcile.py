"""An unknown outcome, reconciled (docs/design.md, "Reconciliation"), by what the tool
declares, in this order: ask a `lookup: true` tool for its record of the key; resend an
`idempotent` (or `read_only`) tool's action under the same key, after a backoff; otherwise
read the authoritative state and judge the diff. What none of them proves goes to a person
(needs_human). A person's re-check (`runs.decisions.action_recheck`) reads, never sends.
"""

import json
import logging
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from core import metrics
from core.audit import DISPATCHER, RECONCILER, Actor, Verb, audit
from ledger.services import ledger_hold_live

from ..models import Action, Attempt, Reconciliation
from ..moves import action_move, action_settle_reconciled
from ..states import (
    ACTION_RESENDS,
    RESEND_EFFECTS,
    ActionState,
    AttemptKind,
    ReadKind,
    Resolution,
    Verdict,
)
from .dispatch import RESEND_SETTLE, action_log_context, settle
from .leases import lease_unknown, resend_lease_for
from .protocol import Lookup, call_tool, judge, lookup_effect, read_authoritative

logger = logging.getLogger(__name__)


def action_reconcile(action_id, *, actor: Actor = RECONCILER) -> Action:
    """Read the authoritative state and judge an unknown action by it (invariant 5), once it
    is due. The action is leased first (`lease_unknown`), so two workers never read it at
    once. A person's re-check, which always reads, is `runs.decisions.action_recheck`.
    """
    leased = lease_unknown(1, only=[action_id])
    if not leased:
        return Action.objects.get(pk=action_id)
    return reconcile_loaded(leased[0], actor=actor)


def reconcile_leased(action_id, *, actor: Actor = RECONCILER, manual: bool = False) -> Action:
    action = Action.objects.select_related("tool", "tenant", "principal").get(pk=action_id)
    return reconcile_loaded(action, actor=actor, manual=manual)


def reconcile_loaded(action: Action, *, actor: Actor = RECONCILER, manual: bool = False):
    """`reconcile_leased` for an action already in hand as its row stands (with its tool,
    tenant and principal): as `lease_unknown` returns them, or the dispatching thread's own,
    just settled unknown."""
    with action_log_context(action, "takeover.reconcile"):
        return _reconcile_declared(action, actor=actor, manual=manual)


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
            # Leased again at `due`, like any read: the database is the queue.
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
    applied = f"the tool reports it applied key {action.idempotency_key} "
    applied += "(lookup; declared lookup: true)"
    read = {
        "kind": ReadKind.LOOKUP,
        "authoritative": None
        if found.state is None
        else {"state": found.state, "version": found.version},
        "verdict": found.verdict,
        "actual_version": found.version,
        "detail": found.detail,
        "declaration": declaration,
    }
    if found.verdict == Verdict.LOOKUP_APPLIED and _settled_on_read(
        action, read, actor=actor, reason=applied
    ):
        return action
    with transaction.atomic():
        locked = _record_read(action.pk, read, actor=actor)
        locked.tool = action.tool
        if found.verdict != Verdict.LOOKUP_APPLIED:
            return locked  # the state read (or a resend) comes next, and says the rest
        if locked.state == ActionState.UNKNOWN:
            _proven(locked, actor=actor, reason=applied)
        else:  # a person's re-check of needs_human (or a resend in flight): recorded only
            _rechecked(locked, found.verdict, actor=actor)
        locked.refresh_from_db()
    return locked


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


def _resend(action: Action, *, actor: Actor) -> Action:
    """Send an unknown action again: a new attempt, the same Idempotency-Key, leased from
    `unknown` into `dispatching` under a lease (so a worker lost mid-call is swept back to
    unknown, like any dispatch), audited with the declaration that allowed it."""
    attempt = action_resend_start(action, actor=actor)
    if attempt is None:
        return Action.objects.get(pk=action.pk)
    result = call_tool(action)
    settle(action, attempt, result, actor=actor, table=RESEND_SETTLE)
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
    (`tool_declare` locks the row) is either seen here or waits for this lease: the copy
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
    recorded = {
        "kind": ReadKind.STATE,
        "authoritative": None if read.verdict else {"state": read.state, "version": read.version},
        "verdict": verdict,
        "diff": diff,
        "actual_version": read.version,
        "detail": read.detail,
    }
    if verdict == Verdict.MATCH and _settled_on_read(action, recorded, actor=actor, reason=MATCHED):
        return action
    with transaction.atomic():
        action = _record_read(action_id, recorded, actor=actor)
        if action.state != ActionState.UNKNOWN:
            _rechecked(action, verdict, actor=actor)
            return action
        if verdict == Verdict.MATCH:
            _proven(action, actor=actor, reason=MATCHED)
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


MATCHED = "authoritative state matches the desired state and version"


def _settled_on_read(action: Action, read: dict, *, actor: Actor, reason: str) -> bool:
    """An unknown action whose read proves it applied: succeeded (reconciled) with the read
    recorded, in one statement (`moves.action_settle_reconciled`). False, with nothing
    written, when it is no longer unknown (a person resolved it, a re-check of needs_human):
    the caller records the read against the state it finds."""
    if action.state != ActionState.UNKNOWN:
        return False
    return action_settle_reconciled(
        action,
        to=ActionState.SUCCEEDED,
        read=read,
        actor=actor,
        reason=reason,
        resolution=Resolution.RECONCILED,
    )


def _record_read(action_id, read: dict, *, actor: Actor) -> Action:
    """The action, locked, with `read` (the Reconciliation's own fields, as for
    `_settled_on_read`) recorded against it. Inside the caller's transaction."""
    action = Action.objects.select_for_update(no_key=True).get(pk=action_id)
    Reconciliation.objects.create(
        action=action,
        at=timezone.now(),
        expected_version=action.expected_version,
        actor=actor.as_dict(),
        **read,
    )
    return action


def _rechecked(action: Action, verdict: str, *, actor: Actor) -> None:
    """A read of an action that is no longer unknown: recorded, and audited as a re-check
    of the state it is in (nothing moves)."""
    audit(
        actor=actor,
        verb=Verb.ACTION_RECHECK,
        obj=action,
        before={"state": action.state},
        after={"state": action.state, "verdict": verdict},
    )


def _proven(action: Action, *, actor: Actor, reason: str) -> None:
    """unknown → succeeded: a read proved the effect applied (the locked path)."""
    action_move(
        action,
        ActionState.SUCCEEDED,
        actor=actor,
        reason=reason,
        resolution=Resolution.RECONCILED,
        next_reconcile_at=None,
    )


def _backoff(failures: int) -> timedelta:
    return timedelta(
        seconds=min(5 * 2 ** max(failures - 1, 0), settings.RECONCILE_BACKOFF_MAX_SECONDS)
    )
