"""The queue's rows as the page shows them: every cell worked out once in Python, and the
rows' markup written here, not by the template engine.

Rendering was most of the page's time: per row, three date filters, a URL reversed, the
state's label, and a dozen attribute lookups on model instances that the template engine
tries as dictionary keys first. `present` makes each row a dict of the strings it prints.
Even then, fifty rows of two dozen variables and three `{% if %}` each through the engine
cost more than the page's SQL, so `html` writes them with one `str.format` per row, every
value escaped exactly as the template's autoescape would (tests/console/test_queue_rows.py
holds the template's row next to it and compares the two).
"""

from functools import cache
from html import escape

from django.urls import reverse
from django.utils import timezone
from django.utils.safestring import SafeString

from runs.states import ActionState

from .templatetags.console_format import age_label

# The columns the page reads: the other columns (the intent's JSON among them) are neither
# fetched nor decoded. The joined rows' names come as plain values (NAMES), not as the
# tool, tenant, principal and claim holder built as model instances, three per row.
FIELDS = (
    "pk",
    "state",
    "created_at",
    "updated_at",
    "target",
    "block_reason",
    "reconcile_failures",
    "claimed_by_id",
)
NAMES = {
    "tool_name": "tool__name",
    "tenant_slug": "tenant__slug",
    "principal_name": "principal__name",
    "claimed_by_name": "claimed_by__username",
}


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
                "tool": a.tool_name,
                "target": a.target,
                "why": a.why,
                "principal": a.principal_name,
                "tenant": a.tenant_slug,
                "claimed_by": a.claimed_by_name or "",
                "at": at.isoformat(),
                "at_title": at.strftime("%Y-%m-%d %H:%M:%S"),
                "age": age_label(a.created_at, now),
                "url": path.format(pk),
            }
        )
    return rows


# One row, as the page's `<tbody>` had it in a `{% for %}`: the same bytes, indentation
# and the blank line a hidden column leaves included. `{pick}` and `{tenant_cell}` are the
# page's columns (on-call's checkbox, the tenant when several are shown), `{claim}` the row's.
ROW = (
    '\n      <tr id="row-{pk}" data-action="{pk}" data-state="{state}">'
    "\n        {pick}"
    '\n        <td class="col-age nowrap"><time datetime="{at}" title="{at_title} {tz}" '
    'data-age-from="{at}">{age}</time></td>'
    '\n        <td class="col-state"><span class="pill pill-{state}">{state_label}</span></td>'
    "\n        <td><code>{tool}</code></td>"
    '\n        <td class="col-target"><a id="open-{pk}" href="{url}" data-shortcut-row>'
    "{target}</a></td>"
    '\n        <td class="col-why">{why}</td>'
    "\n        <td>{principal}</td>"
    "\n        {tenant_cell}"
    "\n        <td>{claim}</td>"
    "\n      </tr>\n    "
)
PICK = (
    '<td class="col-pick"><input type="checkbox" name="id" value="{pk}" form="bulk-form" '
    'id="pick-{pk}" aria-label="Select {tool} on {target}"></td>'
)
CLAIMED = '<span class="claim">{}</span>'
UNCLAIMED = '<span class="muted">—</span>'


@cache
def _row_format(oncall: bool, multi_tenant: bool) -> str:
    return ROW.replace("{pick}", PICK if oncall else "").replace(
        "{tenant_cell}", "<td>{tenant}</td>" if multi_tenant else ""
    )


def html(rows, *, oncall: bool, multi_tenant: bool, tz_name: str) -> SafeString:
    """The rows' `<tr>`s. Every value is escaped (`html.escape`, quotes included: the
    bytes Django's `escape` and autoescape give), each once although some print twice."""
    form = _row_format(oncall, multi_tenant)
    tz = escape(tz_name)
    out = []
    for row in rows:
        cells = {key: escape(value) for key, value in row.items()}
        claimed = cells["claimed_by"]
        out.append(
            form.format_map(
                cells | {"tz": tz, "claim": CLAIMED.format(claimed) if claimed else UNCLAIMED}
            )
        )
    return SafeString("".join(out))
