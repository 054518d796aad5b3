"""A person's decisions on actions and approval requests: grant or deny a request (and the
sweeper's expiry of one nobody decided), resolve an outcome Takeover could not prove,
acknowledge a blocked action, claim and release an action, and re-check one (read its
authoritative state now).

Each decision is a pair: `check_<verb>` is pure (the role, the state, the reason, the claim,
the freshness of the read) and answers a `Refusal` in words, or None; `<verb>` calls it
(again, under the row lock) and then moves. The API, the console, bulk previews and the
commands ask the check and never re-derive a rule, so every door refuses the same request
with the same words. The moves themselves are `runs.moves`.

What a claim means: an operator who claims an open action holds it, and nobody else
resolves it, through any door, unless they take it over (`take_over`: the console's
"resolve anyway" box, the API's `"take_over": true`). Re-checking reads, never decides, so a
claim does not stop it.
"""

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from approvals.models import ApprovalRequest, RequestState
from approvals.services import (
    approval_grant,
    approval_request_close,
    approval_request_lock_pending,
    approval_request_undecidable,
)
from core.audit import Actor, Verb, audit
from core.errors import (
    Refusal,
    StaleRead,
    StateConflict,
    ValidationFailed,
    missing_reason,
    missing_role,
    refuse,
)
from core.models import Role

from .engine.reconcile import reconcile_leased
from .models import Action
from .moves import action_move, enqueue_dispatch
from .states import OPEN_FOR_HUMANS, RESOLVABLE, ActionState, BlockReason, Resolution

OUTCOMES = (ActionState.SUCCEEDED, ActionState.FAILED)


# --- the rules, each once ------------------------------------------------------------------


def is_resolvable(action) -> bool:
    """An outcome Takeover could not prove: what a person may re-check and resolve."""
    return action.state in RESOLVABLE


def is_claimable(action) -> bool:
    """An open action a person works on; a blocked one is final (only acknowledged)."""
    return action.state in OPEN_FOR_HUMANS and action.state != ActionState.BLOCKED


def is_acknowledgeable(action) -> bool:
    return action.state == ActionState.BLOCKED and not action.acknowledged_at


def read_age(read, now=None) -> float | None:
    """How old a read of the authoritative state is, in seconds (None: no read)."""
    if read is None:
        return None
    return ((now or timezone.now()) - read.at).total_seconds()


def read_is_stale(read, now=None) -> bool:
    """Too old to decide on: a resolve asks for a re-check first."""
    age = read_age(read, now)
    return age is not None and age > settings.RESOLVE_READ_MAX_AGE_SECONDS


def claim_holder(action) -> str | None:
    """Who holds the claim on an action (a username), or None."""
    return action.claimed_by.get_username() if action.claimed_by_id else None


def held_by_other(action, actor: Actor) -> str | None:
    """The holder of a claim on `action` when it is somebody other than `actor`."""
    holder = claim_holder(action)
    if holder is None or (actor.kind == "operator" and actor.name == holder):
        return None
    return holder


# --- the checks ----------------------------------------------------------------------------


def check_grant(request: ApprovalRequest, action, *, actor: Actor) -> Refusal | None:
    if refusal := missing_role(actor, Role.APPROVER):
        return refusal
    if words := approval_request_undecidable(request):
        return Refusal(words)
    if action.state != ActionState.AWAITING_APPROVAL:
        return Refusal(f"The action is no longer waiting for approval; it is {action.state}.")
    return None


def check_deny(request: ApprovalRequest, *, reason: str, actor: Actor) -> Refusal | None:
    if refusal := missing_role(actor, Role.APPROVER):
        return refusal
    if refusal := missing_reason(reason):
        return refusal
    if words := approval_request_undecidable(request):
        return Refusal(words)
    return None


def check_recheck(action, *, actor: Actor) -> Refusal | None:
    if refusal := missing_role(actor, Role.ONCALL):
        return refusal
    if not is_resolvable(action):
        return Refusal(
            f"Only an unknown or needs_human action can be re-checked; this one is {action.state}."
        )
    return None


def check_resolvable(action) -> Refusal | None:
    """Is the action still one a person resolves (whoever asks, however)?"""
    if not is_resolvable(action):
        return Refusal(
            f"Only an unknown or needs_human action can be resolved; this one is {action.state}."
        )
    return None


def check_resolve(
    action,
    *,
    outcome: str,
    reason: str,
    actor: Actor,
    latest_read=None,
    based_on_read=None,
    take_over: bool = False,
    now=None,
) -> Refusal | None:
    """May `actor` settle this action as `outcome` now, on `latest_read` (the latest read of
    the authoritative state, None when it was never read)?"""
    if refusal := missing_role(actor, Role.ONCALL):
        return refusal
    if outcome not in OUTCOMES:
        return Refusal(
            "The outcome must be succeeded or failed.", ValidationFailed, field="outcome"
        )
    if refusal := missing_reason(reason):
        return refusal
    if refusal := check_resolvable(action):
        return refusal
    if (holder := held_by_other(action, actor)) and not take_over:
        return Refusal(
            f"Claimed by {holder}: only they resolve it, unless it is taken over.",
            field="take_over",
        )
    if latest_read is not None:
        if based_on_read is not None and str(based_on_read) != str(latest_read.pk):
            return Refusal(
                "A newer read of the authoritative state arrived "
                f"({latest_read.at:%H:%M:%S} UTC, {latest_read.verdict}); look at it, then "
                "decide.",
                StaleRead,
            )
        if read_is_stale(latest_read, now):
            limit = settings.RESOLVE_READ_MAX_AGE_SECONDS
            return Refusal(
                f"The latest read of the authoritative state is "
                f"{read_age(latest_read, now):.0f} s old (the limit is {limit:.0f} s). "
                "Re-check now, then decide on what it shows.",
                StaleRead,
            )
    return None


def check_acknowledge(action, *, actor: Actor) -> Refusal | None:
    if refusal := missing_role(actor, Role.ONCALL):
        return refusal
    if action.state != ActionState.BLOCKED:
        return Refusal(f"Only a blocked action can be acknowledged; this one is {action.state}.")
    if action.acknowledged_at:
        who = action.acknowledged_by or {}
        return Refusal(
            f"{who.get('kind', '')}:{who.get('name', '')} already acknowledged this action."
        )
    return None


def check_claim(action, *, actor: Actor, take_over: bool = False) -> Refusal | None:
    if refusal := missing_role(actor, Role.ONCALL):
        return refusal
    if not is_claimable(action):
        return Refusal("Only an action in the queue can be claimed.")
    if (holder := held_by_other(action, actor)) and not take_over:
        return Refusal(f"{holder} claimed this action first.")
    return None


def check_release(action, *, actor: Actor) -> Refusal | None:
    return missing_role(actor, Role.ONCALL)


# --- the verbs -----------------------------------------------------------------------------


def approval_request_grant(request: ApprovalRequest, *, ttl_seconds: float, actor: Actor):
    """Grant a pending request: a one-shot approval for its exact binding, and the waiting
    action moves to the queue holding it (consumed later, at claim). Approvers only."""
    refuse(missing_role(actor, Role.APPROVER))
    with transaction.atomic():
        request = approval_request_lock_pending(request.pk)
        action = Action.objects.select_for_update(no_key=True).get(pk=request.action_id)
        refuse(check_grant(request, action, actor=actor))
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
        enqueue_dispatch(action_id=action.pk)
    return approval


def approval_request_deny(
    request: ApprovalRequest, *, reason: str, actor: Actor
) -> ApprovalRequest:
    """Deny a pending request, with a reason: its action is blocked, never sent. Approvers
    only."""
    refuse(missing_role(actor, Role.APPROVER))
    refuse(missing_reason(reason))
    reason = reason.strip()
    with transaction.atomic():
        request = approval_request_lock_pending(request.pk)
        refuse(check_deny(request, reason=reason, actor=actor))
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


def latest_read(action):
    """The latest read of the authoritative state of `action` (None: never read)."""
    return action.reconciliations.order_by("-at", "-id").first()


def action_resolve(
    action: Action,
    *,
    outcome: str,
    reason: str,
    actor: Actor,
    based_on_read=None,
    take_over: bool = False,
) -> Action:
    """An on-call person settles an outcome Takeover could not prove (`check_resolve`).

    Fresh decisions: the decision is recorded with the read of the authoritative state it was
    based on (the latest one). It is refused (StaleRead, a 409) when that read is older than
    RESOLVE_READ_MAX_AGE_SECONDS, or when `based_on_read` (the read the operator was looking
    at) is not the latest one any more. An action never read at all (the tool's state could
    not even be asked for yet) may be resolved: there is nothing fresher to ask for. An
    action another operator claimed is theirs to resolve, unless `take_over`.
    """
    with transaction.atomic():
        action = (
            Action.objects.select_for_update(no_key=True, of=("self",))
            .select_related("claimed_by")
            .get(pk=action.pk)
        )
        read = latest_read(action)
        refuse(
            check_resolve(
                action,
                outcome=outcome,
                reason=reason,
                actor=actor,
                latest_read=read,
                based_on_read=based_on_read,
                take_over=take_over,
            )
        )
        reason = reason.strip()
        action_move(
            action,
            outcome,
            actor=actor,
            reason=reason,
            resolution=Resolution.RESOLVED_BY_OPERATOR,
            resolution_reason=reason,
            next_reconcile_at=None,
            resolved_on_read_id=read.pk if read else None,
        )
    return action


def action_acknowledge(action: Action, *, note: str = "", actor: Actor) -> Action:
    """An on-call person acknowledges a blocked action: it is final (never dispatched), and
    once acknowledged it leaves the open queue and its counts. Nothing else changes: the
    state stays `blocked`, and the action stays findable (run, audit log, search).

    A conditional UPDATE, so two people acknowledging at once write one audit event; the
    loser gets the check's refusal naming who was first.
    """
    refuse(missing_role(actor, Role.ONCALL))
    now = timezone.now()
    with transaction.atomic():
        updated = Action.objects.filter(
            pk=action.pk, state=ActionState.BLOCKED, acknowledged_at__isnull=True
        ).update(acknowledged_at=now, acknowledged_by=actor.as_dict(), acknowledge_note=note)
        if updated != 1:
            refuse(check_acknowledge(Action.objects.get(pk=action.pk), actor=actor))
        action = Action.objects.get(pk=action.pk)
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
    """Take an open action so that a second on-call sees who has it (`check_claim`).
    Returns (action, won).

    `take_over_from` (a user id) takes the claim from its holder (gone home, say), only if
    that user still holds it, so two people taking over at once do not both win.
    """
    action = Action.objects.select_related("claimed_by").get(pk=action.pk)
    refuse(check_claim(action, actor=actor, take_over=take_over_from is not None))
    with transaction.atomic():
        now = timezone.now()
        holder = Action.objects.filter(pk=action.pk, state__in=OPEN_FOR_HUMANS).exclude(
            state=ActionState.BLOCKED
        )
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
                verb=Verb.ACTION_CLAIM if take_over_from is None else Verb.ACTION_CLAIM_TAKE_OVER,
                obj=action,
                before=before,
                after={"claimed_by": user.get_username()},
            )
    return action, won or action.claimed_by_id == user.pk


def action_release_claim(action: Action, *, user, actor: Actor) -> Action:
    refuse(check_release(action, actor=actor))
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
    """An on-call person re-checks an action (`check_recheck`): the authoritative state is
    read now, whatever its schedule, and judged (invariant 5). It may also re-read a
    needs_human action, which records what it saw but leaves the decision to the person; a
    person reads, never sends (no resend)."""
    refuse(missing_role(actor, Role.ONCALL))
    action = Action.objects.only("pk", "state").filter(pk=action_id).first()
    if action is None:
        raise StateConflict("This action is gone.")
    refuse(check_recheck(action, actor=actor))
    return reconcile_leased(action_id, actor=actor, manual=True)
