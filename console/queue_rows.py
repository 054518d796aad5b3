"""The queue's rows as the page shows them: every cell worked out once in Python.

Rendering was most of the page's time: per row, three date filters, a URL reversed, the
state's label, and a dozen attribute lookups on model instances that the template engine
tries as dictionary keys first. A row here is a dict of the strings the template prints.
"""

from django.urls import reverse
from django.utils import timezone

from runs.states import ActionState

from .templatetags.console_format import age_label

# The columns the page reads, with the joined rows' names: the other columns (the intent's
# JSON among them) are neither fetched nor decoded.
FIELDS = (
    "state",
    "created_at",
    "updated_at",
    "target",
    "block_reason",
    "reconcile_failures",
    "tool__name",
    "tenant__slug",
    "principal__name",
    "claimed_by__username",
)

LABELS = {state: ActionState(state).label.lower() for state in ActionState.values}


def _action_path():
    """console:action's path with a slot for the id: reversed once, not once per row."""
    marker = "00000000-0000-0000-0000-000000000000"
    return reverse("console:action", args=[marker]).replace(marker, "{}")


def present(actions) -> list[dict]:
    """Each action (with `why` set) as the queue's cells, times in the operator's zone."""
    path, now, zone = _action_path(), timezone.now(), timezone.get_current_timezone()
    rows = []
    for a in actions:
        at = a.created_at.astimezone(zone)
        pk = str(a.pk)
        rows.append(
            {
                "pk": pk,
                "state": a.state,
                "state_label": LABELS.get(a.state, a.state),
                "tool": a.tool.name,
                "target": a.target,
                "why": a.why,
                "principal": a.principal.name,
                "tenant": a.tenant.slug,
                "claimed_by": a.claimed_by.get_username() if a.claimed_by_id else "",
                "at": at.isoformat(),
                "at_title": at.strftime("%Y-%m-%d %H:%M:%S"),
                "age": age_label(a.created_at, now),
                "url": path.format(pk),
            }
        )
    return rows
