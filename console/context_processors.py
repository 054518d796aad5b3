from functools import cached_property


def scope(request):
    """The signed-in operator's scope (current tenant, roles, memberships) for every page,
    and the navigation's counts for their roles.

    Set by the console views' `operator_required`; None on the sign-in page and on error
    pages raised before it ran.
    """
    from django.utils import timezone

    current = getattr(request, "scope", None)
    return {
        "scope": current,
        "nav_counts": NavCounts(current),
        "tz_name": timezone.get_current_timezone_name(),
    }


class NavCounts:
    """What waits for this operator in the current tenant, per role: pending approval
    requests for an approver, what the on-call queue holds (unknown, needs_human, blocked not
    yet acknowledged) for an on-call person, force
    replays waiting for a second admin for an admin.

    Lazy, and one query for both: only a template that shows a count pays for it, so the
    live partials (queue rows, action state) cost nothing more.
    """

    def __init__(self, scope):
        self.scope = scope

    @cached_property
    def _counts(self) -> tuple[int, int]:
        if self.scope is None:
            return 0, 0
        from django.utils import timezone

        from approvals.models import ApprovalRequest, RequestState
        from runs.selectors import open_queue

        from .counts import capped_counts
        from .selectors import QUEUE_STATES

        tenant = self.scope.tenant
        counts = capped_counts(
            {
                "approvals": ApprovalRequest.objects.filter(
                    tenant=tenant, state=RequestState.PENDING, expires_at__gt=timezone.now()
                ),
                # The queue's own query: the open-queue partial index covers it.
                "oncall": open_queue([tenant.pk], states=QUEUE_STATES),
            }
        )
        return counts["approvals"], counts["oncall"]

    @property
    def approvals(self) -> int:
        return self._counts[0] if self.scope and self.scope.is_approver else 0

    @property
    def oncall(self) -> int:
        return self._counts[1] if self.scope and self.scope.is_oncall else 0

    @cached_property
    def force(self) -> int:
        """Force replays waiting for a second admin that this admin may confirm (not their
        own request): four eyes that reach the second pair."""
        if self.scope is None or not self.scope.is_admin:
            return 0
        from runs.models import ForceReplayRequest, ForceRequestState

        me = {"kind": "operator", "name": self.scope.user.get_username()}
        return (
            ForceReplayRequest.objects.filter(
                tenant=self.scope.tenant, state=ForceRequestState.PENDING
            )
            .exclude(requested_by__contains=me)
            .count()
        )

    @property
    def title(self) -> int:
        return self.approvals + self.oncall + self.force
