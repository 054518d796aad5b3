"""Approval services. Each runs in (or opens) one transaction and audits its change.

The consume step is a conditional UPDATE checked by row count, so twenty actions racing
for one approval produce exactly one consumer (docs/design.md, invariant 7).
"""

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from core.audit import Actor, Verb, audit
from core.canonical import canonical_json
from core.errors import StateConflict
from core.models import Role

from .models import Approval, ApprovalRequest
from .states import APPROVAL, REQUEST, ApprovalState, BlockReason, RequestState


def _same_binding(obj, *, principal, tool, target, desired_state, expected_version) -> bool:
    return (
        obj.principal_id == principal.pk
        and obj.tool_id == tool.pk
        and obj.target == target
        and canonical_json(obj.desired_state) == canonical_json(desired_state)
        and obj.expected_version == expected_version
    )


def approval_grant(
    *,
    tenant,
    principal,
    tool,
    target: str,
    desired_state: dict,
    expected_version: int | None,
    ttl_seconds: float,
    actor: Actor,
    request: ApprovalRequest | None = None,
) -> Approval:
    """A one-shot approval for exactly this intent, valid for `ttl_seconds`. Approvers only."""
    actor.require(Role.APPROVER)
    with transaction.atomic():
        now = timezone.now()
        approval = Approval.objects.create(
            tenant=tenant,
            principal=principal,
            tool=tool,
            target=target,
            desired_state=desired_state,
            expected_version=expected_version,
            expires_at=now + timedelta(seconds=ttl_seconds),
            granted_at=now,
            granted_by=actor.as_dict(),
            request=request,
        )
        audit(
            actor=actor,
            verb=Verb.APPROVAL_GRANT,
            obj=approval,
            after={
                "state": ApprovalState.GRANTED,
                "expires_at": approval.expires_at.isoformat(),
                "binding": approval.binding(),
                "request": str(request.pk) if request else None,
            },
        )
    return approval


def approval_problem(approval: Approval | None, **binding) -> str | None:
    """Why this approval cannot authorize this intent right now, or None if it can."""
    if approval is None:
        return BlockReason.APPROVAL_NOT_FOUND
    if not _same_binding(approval, **binding):
        return BlockReason.APPROVAL_MISMATCH
    state = approval.effective_state
    return {
        ApprovalState.CONSUMED: BlockReason.APPROVAL_CONSUMED,
        ApprovalState.REVOKED: BlockReason.APPROVAL_REVOKED,
        ApprovalState.EXPIRED: BlockReason.APPROVAL_EXPIRED,
    }.get(state)


def approval_consume(approval_id, *, action_id, actor: Actor, **binding) -> str | None:
    """Consume the approval for `action_id`; returns None on success, else the block reason.

    Must run inside the claim's transaction, so that a claim that fails later rolls the
    consumption back with it.
    """
    APPROVAL.check(ApprovalState.GRANTED, ApprovalState.CONSUMED)
    now = timezone.now()
    updated = Approval.objects.filter(
        pk=approval_id, state=ApprovalState.GRANTED, expires_at__gt=now
    ).update(state=ApprovalState.CONSUMED, consumed_by_action=action_id, consumed_at=now)
    approval = Approval.objects.filter(pk=approval_id).first()
    if updated != 1:
        # Lost the race, or it expired or was revoked while the action sat in the queue.
        return approval_problem(approval, **binding) or BlockReason.APPROVAL_CONSUMED
    if not _same_binding(approval, **binding):  # the binding is immutable; belt and braces
        raise StateConflict("Approval binding changed under a queued action.")
    audit(
        actor=actor,
        verb=Verb.APPROVAL_CONSUME,
        obj=approval,
        before={"state": ApprovalState.GRANTED},
        after={"state": ApprovalState.CONSUMED, "consumed_by_action": str(action_id)},
    )
    return None


def approval_revoke(approval: Approval, *, actor: Actor, reason: str) -> Approval:
    """Withdraw a granted approval before it is used. Approvers only."""
    actor.require(Role.APPROVER)
    APPROVAL.check(ApprovalState.GRANTED, ApprovalState.REVOKED)
    with transaction.atomic():
        now = timezone.now()
        updated = Approval.objects.filter(
            pk=approval.pk, state=ApprovalState.GRANTED, expires_at__gt=now
        ).update(
            state=ApprovalState.REVOKED,
            revoked_at=now,
            revoked_by=actor.as_dict(),
            revoke_reason=reason,
        )
        approval.refresh_from_db()
        if updated != 1:
            raise StateConflict(
                f"Only a granted approval can be revoked; this one is {approval.effective_state}."
            )
        audit(
            actor=actor,
            verb=Verb.APPROVAL_REVOKE,
            obj=approval,
            before={"state": ApprovalState.GRANTED},
            after={"state": ApprovalState.REVOKED},
            reason=reason,
        )
    return approval


def approval_request_open(*, tenant, action_id, actor: Actor, **binding) -> ApprovalRequest:
    """Ask for an approval of the intent `binding` (principal, tool, target, desired_state,
    expected_version) for the action `action_id`."""
    from django.conf import settings

    now = timezone.now()
    request = ApprovalRequest.objects.create(
        tenant=tenant,
        action_id=action_id,
        created_at=now,
        expires_at=now + timedelta(seconds=settings.APPROVAL_REQUEST_TTL_SECONDS),
        **binding,
    )
    audit(
        actor=actor,
        verb=Verb.APPROVAL_REQUEST_OPEN,
        obj=request,
        after={"state": RequestState.PENDING},
    )
    return request


def approval_request_undecidable(request: ApprovalRequest, now=None) -> str | None:
    """Why nobody may decide this request any more (already decided, or expired), or None."""
    if request.state != RequestState.PENDING:
        return f"This approval request is already {request.state}."
    if request.expires_at <= (now or timezone.now()):
        return "This approval request has expired."
    return None


def approval_request_lock_pending(request_id) -> ApprovalRequest:
    """Lock a pending request for a decision; refuse one already decided or expired."""
    request = ApprovalRequest.objects.select_for_update(no_key=True).get(pk=request_id)
    if words := approval_request_undecidable(request):
        raise StateConflict(words)
    return request


_DECISION_VERBS = {
    RequestState.GRANTED: Verb.APPROVAL_REQUEST_GRANT,
    RequestState.DENIED: Verb.APPROVAL_REQUEST_DENY,
    RequestState.EXPIRED: Verb.APPROVAL_REQUEST_EXPIRE,
}


def approval_request_close(request: ApprovalRequest, *, state: str, actor: Actor, reason: str = ""):
    """Record the decision on a request locked by `approval_request_lock_pending`."""
    before = request.state
    REQUEST.check(before, state)
    request.state = state
    request.decided_by = actor.as_dict()
    request.decided_at = timezone.now()
    request.reason = reason
    request.save(update_fields=["state", "decided_by", "decided_at", "reason"])
    audit(
        actor=actor,
        verb=_DECISION_VERBS[state],
        obj=request,
        before={"state": before},
        after={"state": state},
        reason=reason,
    )
    return request
