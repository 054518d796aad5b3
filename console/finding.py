"""Finding work: one search box over ids, keys and targets, and every action under filters.
Scoped like every read of the console (`console.selectors`): the operator's tenants only."""

from dataclasses import dataclass

from django.db.models import Q
from django.utils import timezone

from core.access import Viewer
from runs.models import Action, Run

from .selectors import AGES

# --- find anything: search and all actions ---------------------------------------------------

SEARCH_LIMIT = 50


@dataclass
class SearchResult:
    query: str
    kind: str  # what the query was taken for: "id", "id prefix", "key or target", ""
    actions: list
    runs: list

    @property
    def total(self) -> int:
        return len(self.actions) + len(self.runs)

    @property
    def only_link(self) -> str | None:
        """The deep link when exactly one thing matched."""
        from django.urls import reverse

        if len(self.actions) + len(self.runs) != 1:
            return None
        if self.actions:
            return reverse("console:action", args=[self.actions[0].pk])
        return reverse("console:run", args=[self.runs[0].pk])


HEX = set("0123456789abcdef")


def search(scope: Viewer, query: str) -> SearchResult:
    """One box for an action id, a run id (full, or the 8-character prefix the console
    shows), an idempotency key (every generation of it) or a target (exact), across the
    operator's tenants. Each lookup uses an index: the primary keys (a prefix becomes a
    key range), the ledger's (tenant, key) and action_by_target."""
    import uuid

    from ledger.models import LedgerEntry

    q = query.strip()
    tenants = scope.tenant_ids
    actions = Action.objects.filter(tenant_id__in=tenants).select_related("tool", "tenant")
    runs = Run.objects.filter(tenant_id__in=tenants).select_related("principal", "tenant")
    if not q or "\x00" in q:
        return SearchResult(q, "", [], [])
    compact = q.lower().replace("-", "")
    if len(compact) == 32 and set(compact) <= HEX:
        pk = uuid.UUID(compact)
        found_actions = list(actions.filter(pk=pk))
        found_runs = list(runs.filter(pk=pk))
        if found_actions or found_runs:
            return SearchResult(q, "id", found_actions, found_runs)
    elif 4 <= len(compact) < 32 and set(compact) <= HEX and "-" not in q[:8]:
        low = uuid.UUID(compact.ljust(32, "0"))
        high = uuid.UUID(compact.ljust(32, "f"))
        found_actions = list(actions.filter(pk__gte=low, pk__lte=high)[:SEARCH_LIMIT])
        found_runs = list(runs.filter(pk__gte=low, pk__lte=high)[:SEARCH_LIMIT])
        if found_actions or found_runs:
            return SearchResult(q, "id prefix", found_actions, found_runs)
    by_key = LedgerEntry.objects.filter(tenant_id__in=tenants, key=q).values("action_id")
    found = actions.filter(Q(pk__in=by_key) | Q(target=q)).order_by("-created_at", "-pk")
    return SearchResult(q, "key or target", list(found[:SEARCH_LIMIT]), [])


@dataclass
class ActionFilters:
    tenant_ids: list
    state: str = ""
    tool_ids: list | None = None
    principal: str = ""
    age: str = ""  # a key of AGES: older than


def all_actions(filters: ActionFilters):
    """Every action, whatever its state, under the filters (newest first via `keyset`)."""
    qs = Action.objects.filter(tenant_id__in=filters.tenant_ids).select_related(
        "tool", "principal", "tenant", "run"
    )
    if filters.state:
        qs = qs.filter(state=filters.state)
    if filters.tool_ids is not None:
        qs = qs.filter(tool_id__in=filters.tool_ids)
    if filters.principal:
        qs = qs.filter(principal__name=filters.principal)
    if older := AGES.get(filters.age):
        qs = qs.filter(created_at__lte=timezone.now() - older)
    return qs


def principal_names(tenant_ids) -> list[str]:
    from core.models import Principal

    return sorted(
        set(Principal.objects.filter(tenant_id__in=tenant_ids).values_list("name", flat=True))
    )
