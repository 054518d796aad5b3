"""One-shot approvals bound to an exact intent, and the requests that ask for them.

`approvals` knows nothing of runs: an approval names the action that consumed it and a
request names the action waiting on it by id only.
"""

import uuid

from django.db import models
from django.db.models import Q
from django.utils import timezone

from .states import ApprovalState, RequestState

__all__ = ["Approval", "ApprovalRequest", "ApprovalState", "RequestState"]


class Binding(models.Model):
    """The exact intent an approval (or a request for one) is bound to."""

    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, related_name="+")
    principal = models.ForeignKey("core.Principal", on_delete=models.PROTECT, related_name="+")
    tool = models.ForeignKey("core.Tool", on_delete=models.PROTECT, related_name="+")
    target = models.CharField(max_length=500)
    desired_state = models.JSONField()
    expected_version = models.BigIntegerField(null=True, blank=True)

    class Meta:
        abstract = True

    def binding(self) -> dict:
        return {
            "principal": self.principal.name,
            "tool": self.tool.name,
            "target": self.target,
            "desired_state": self.desired_state,
            "expected_version": self.expected_version,
        }


class Approval(Binding):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    state = models.CharField(
        max_length=16, choices=ApprovalState.choices, default=ApprovalState.GRANTED
    )
    expires_at = models.DateTimeField()
    granted_by = models.JSONField()
    granted_at = models.DateTimeField(default=timezone.now)
    consumed_by_action = models.UUIDField(null=True, blank=True, unique=True)
    consumed_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.JSONField(null=True, blank=True)
    revoke_reason = models.TextField(blank=True)
    request = models.OneToOneField(
        "approvals.ApprovalRequest",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="approval",
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=["granted", "consumed", "revoked"]),
                name="approval_stored_state_valid",
            ),
            models.CheckConstraint(
                condition=(
                    Q(state="consumed", consumed_by_action__isnull=False, consumed_at__isnull=False)
                    | (~Q(state="consumed") & Q(consumed_by_action__isnull=True))
                ),
                name="approval_consumed_names_its_action",
            ),
        ]
        indexes = [models.Index(fields=["tenant", "-granted_at"], name="approval_recent")]

    @property
    def effective_state(self) -> str:
        if self.state == ApprovalState.GRANTED and self.expires_at <= timezone.now():
            return ApprovalState.EXPIRED
        return self.state


class ApprovalRequest(Binding):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    action_id = models.UUIDField(unique=True)
    state = models.CharField(
        max_length=16, choices=RequestState.choices, default=RequestState.PENDING
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    decided_by = models.JSONField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=RequestState.values), name="approval_request_state_valid"
            ),
            models.CheckConstraint(
                condition=Q(state="pending") | Q(decided_at__isnull=False),
                name="approval_request_decided_has_time",
            ),
        ]
        indexes = [
            models.Index(
                fields=["tenant", "created_at"],
                condition=Q(state="pending"),
                name="approval_request_pending",
            )
        ]
