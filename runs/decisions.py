"""A person's decisions on actions and approval requests: grant or deny a request (and the
sweeper's expiry of one nobody decided), resolve an outcome Takeover could not prove,
acknowledge a blocked action, claim and release an action, and re-check one (read its
authoritative state now). Each requires its role. The API, the console, bulk decisions and
the commands call these; the moves themselves are `runs.moves`."""

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from approvals.models import ApprovalRequest, RequestState
from approvals.services import (
    approval_grant,
    approval_request_close,
    approval_request_lock_pending,
)
from core.audit import Actor, Verb, audit
from core.errors import StaleRead, StateConflict, reason_required
from core.models import Role

from .engine.reconcile import reconcile_leased
from .models import Action
from .moves import action_move, enqueue_dispatch
from .states import RESOLVABLE, ActionState, BlockReason, Resolution


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


def action_recheck(action_id, *, actor: Actor) -> Action:
    """An on-call person re-checks an action: the authoritative state is read now, whatever
    its schedule, and judged (invariant 5). It may also re-read a needs_human action, which
    records what it saw but leaves the decision to the person; a person reads, never sends
    (no resend). Only an unknown or needs_human action can be re-checked (StateConflict
    otherwise)."""
    actor.require(Role.ONCALL)
    state = Action.objects.filter(pk=action_id).values_list("state", flat=True).first()
    if state not in RESOLVABLE:
        raise StateConflict(
            "Only an unknown or needs-human action can be re-checked; this one is "
            f"{ActionState(state).label.lower() if state else 'gone'}."
        )
    return reconcile_leased(action_id, actor=actor, manual=True)
