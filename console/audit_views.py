"""The audit log, on screen and as CSV."""

import json
import uuid

from core.models import Role
from core.selectors import audit_events
from runs.models import Run

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


def _run_scope(request, qs):
    """`?run=<id>`: the events of a run and of everything it proposed (its actions and their
    approval requests), the history a person looks for from a run's page. None when the
    parameter is absent; a run of another tenant is simply not found (no events)."""
    raw = request.GET.get("run", "")
    if not raw:
        return qs, None
    run = Run.objects.filter(tenant=request.scope.tenant, pk=raw).first() if _uuid(raw) else None
    if run is None:
        return qs.none(), {"id": raw[:36], "found": False}
    ids = [str(run.pk)]
    for action_id, request_id in run.actions.values_list("pk", "approval_request_id"):
        ids.append(str(action_id))
        if request_id:
            ids.append(str(request_id))
    return qs.filter(object_id__in=ids), {"id": str(run.pk), "found": True, "objects": len(ids)}


def _uuid(raw: str) -> bool:
    try:
        uuid.UUID(raw)
    except ValueError:
        return False
    return True


@operator_required(Role.ADMIN)
def audit(request):
    form = _audit_form(request)
    qs, of_run = _run_scope(request, audit_events(request.scope.tenant, **form.filters()))
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
        of_run=of_run,
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
    qs, _ = _run_scope(request, audit_events(request.scope.tenant, **form.filters()))
    qs = qs.order_by("-at", "-pk")
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
