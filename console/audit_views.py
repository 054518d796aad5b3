"""The audit log, on screen and as CSV."""

import json

from core.models import Role
from core.selectors import audit_events

from . import selectors as sel
from .forms import (
    AuditFilterForm,
)
from .templatetags.console_format import compact_json
from .web import csv_response, list_page, operator_required, query_with

# --- audit ---------------------------------------------------------------------------------


def _audit_form(request) -> AuditFilterForm:
    return AuditFilterForm(
        request.GET, actors=sel.audit_actors(request.scope.tenant), verbs=sel.AUDIT_VERBS
    )


@operator_required(Role.ADMIN)
def audit(request):
    form = _audit_form(request)
    qs = audit_events(request.scope.tenant, **form.filters())
    page = sel.keyset(
        qs, sel.parse_cursor(request.GET.get("after")), field_name="at", descending=True
    )
    for event in page[0]:
        event.change = _change_text(event)
    return list_page(
        request,
        "console/audit.html",
        page,
        section="audit",
        form=form,
        verbs=sel.AUDIT_VERBS,
        csv_query=query_with(request, after=None),
    )


def _change_text(event) -> str:
    before = (event.before or {}).get("state") or (event.before or {}).get("status")
    after = (event.after or {}).get("state") or (event.after or {}).get("status")
    if before and after:
        return f"{before} → {after}"
    if event.after:
        return compact_json(event.after)
    return ""


@operator_required(Role.ADMIN)
def audit_csv(request):
    form = _audit_form(request)
    qs = audit_events(request.scope.tenant, **form.filters()).order_by("-at", "-pk")
    header = [
        "at",
        "actor_kind",
        "actor_name",
        "verb",
        "object_type",
        "object_id",
        "before",
        "after",
        "reason",
        "request_id",
    ]
    rows = (
        [
            e.at.isoformat(),
            e.actor_kind,
            e.actor_name,
            e.verb,
            e.object_type,
            e.object_id,
            "" if e.before is None else json.dumps(e.before, sort_keys=True),
            "" if e.after is None else json.dumps(e.after, sort_keys=True),
            e.reason,
            e.request_id,
        ]
        for e in qs.iterator(chunk_size=2000)
    )
    return csv_response(f"audit-{request.scope.tenant.slug}.csv", header, rows)
