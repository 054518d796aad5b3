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
        "nav_counts": NavCounts(current, oncall=getattr(request, "nav_oncall", None)),
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

    def __init__(self, scope, *, oncall=None):
        self.scope = scope
        # The on-call count when the page already holds it (the queue, unfiltered, of the
        # current tenant): its per-state counts are the same query, split by state.
        self.known_oncall = oncall

    @cached_property
    def _counts(self) -> tuple[int, int]:
        if self.scope is None:
            return 0, 0
        from django.utils import timezone

        from approvals.models import ApprovalRequest, RequestState
        from core import compiled
        from runs.selectors import open_queue

        from . import counts
        from .selectors import QUEUE_STATES

        def build(tenant_id, now):
            return counts.counts_sql(
                [
                    ApprovalRequest.objects.filter(
                        tenant_id=tenant_id, state=RequestState.PENDING, expires_at__gt=now
                    ),
                    # The queue's own query: the open-queue partial index covers it.
                    open_queue([tenant_id], states=QUEUE_STATES),
                ]
            )

        # Compiled once (`core.compiled`): every page and every poll of every page asks.
        found, values = compiled.statement(
            ("nav-counts", counts.COUNT_CAP),
            build,
            tenant_id=self.scope.tenant.pk,
            now=timezone.now(),
        )
        (row,) = found.fetch(values)
        capped = counts.capped(["approvals", "oncall"], row)
        return capped["approvals"], capped["oncall"]

    @property
    def approvals(self) -> int:
        return self._counts[0] if self.scope and self.scope.is_approver else 0

    @property
    def oncall(self) -> int:
        if not (self.scope and self.scope.is_oncall):
            return 0
        return self._counts[1] if self.known_oncall is None else self.known_oncall

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
