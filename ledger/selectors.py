"""Reads of the effect ledger, scoped to a viewer (core.access.Viewer). Another tenant's
entry is a 404."""

from django.http import Http404

from .models import LedgerEntry


def ledger_entries_of(viewer, *, key: str = "", tool: str = ""):
    qs = LedgerEntry.objects.select_related("tenant").filter(tenant_id__in=viewer.tenant_ids)
    if key:
        qs = qs.filter(key=key)
    if tool:
        qs = qs.filter(tool=tool)
    return qs


def ledger_entry_for(viewer, pk) -> LedgerEntry:
    found = ledger_entries_of(viewer).filter(pk=pk).first()
    if found is None:
        raise Http404("No such ledger entry.")
    return found
