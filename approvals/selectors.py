"""Reads of approvals and approval requests, scoped to a viewer (core.access.Viewer): the
API and the console both find them here. Another tenant's object is a 404."""

from django.http import Http404

from .models import Approval, ApprovalRequest

APPROVALS = Approval.objects.select_related("tenant", "principal", "tool")
REQUESTS = ApprovalRequest.objects.select_related("tenant", "principal", "tool")


def approvals_of(viewer):
    return APPROVALS.filter(tenant_id__in=viewer.tenant_ids)


def _one(rows, pk, what: str):
    """The row with this id among those the viewer may see; a 404 otherwise."""
    found = rows.filter(pk=pk).first()
    if found is None:
        raise Http404(f"No such {what}.")
    return found


def approval_for(viewer, pk) -> Approval:
    return _one(approvals_of(viewer), pk, "approval")


def approval_requests_of(viewer):
    return REQUESTS.filter(tenant_id__in=viewer.tenant_ids)


def approval_request_for(viewer, pk) -> ApprovalRequest:
    return _one(approval_requests_of(viewer), pk, "approval request")
