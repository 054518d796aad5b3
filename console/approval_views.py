"""Approvals: the inbox, the target's state now, grant and deny."""

from django.contrib import messages
from django.shortcuts import render
from django.utils import timezone

from approvals.selectors import approval_request_for
from core.models import Role
from runs import decisions

from . import selectors as sel
from .forms import (
    DenyForm,
    GrantForm,
)
from .web import approvals_url, decision, go, live_poll, next_or, operator_required

# --- approvals -----------------------------------------------------------------------------


@operator_required(Role.APPROVER)
def approvals(request):
    scope = request.scope
    pending, decided = sel.approvals_inbox(scope.tenant)
    sig = sel.pending_signature(pending)
    context = {
        "section": "approvals",
        "pending": pending,
        "decided": decided,
        "signature": sig,
        "grant_form": GrantForm(),
        "deny_form": DenyForm(),
    }
    if poll := live_poll(request, "poll", sig, "console/approvals.html#approvals-live", context):
        return poll
    return render(request, "console/approvals.html", context)


@operator_required()
def approval_target_state(request, pk):
    """The target's authoritative state now, against the request's desired state. A read
    through the tool protocol (side-effect free, bounded like a reconciliation read), not
    stored: it informs a decision, it proves nothing about an effect."""
    scope = request.scope
    req = approval_request_for(scope, pk)
    scope.require_role(Role.APPROVER, req.tenant_id)
    context = {"section": "approvals", "req": req, "now_state": sel.target_state_now(req)}
    if request.htmx:
        return render(request, "console/approvals.html#target-state", context)
    return render(request, "console/approval_state.html", context)


@decision(approval_request_for, Role.APPROVER, back=approvals_url, refused="Not granted")
def approval_grant(request, req):
    form = GrantForm(request.POST)
    back = next_or(request, approvals_url(req))
    if not form.is_valid():
        messages.error(request, "Choose how long the approval stays valid.")
        return go(request, back)
    approval = decisions.approval_request_grant(
        req, ttl_seconds=form.cleaned_data["ttl_seconds"], actor=request.actor
    )
    messages.success(
        request,
        f"Granted {req.tool.name} on {req.target} until "
        f"{timezone.localtime(approval.expires_at):%Y-%m-%d %H:%M} "
        f"{timezone.get_current_timezone_name()}. The action is queued for dispatch.",
    )
    return go(request, back)


@decision(approval_request_for, Role.APPROVER, back=approvals_url, refused="Not denied")
def approval_deny(request, req):
    form = DenyForm(request.POST)
    back = next_or(request, approvals_url(req))
    if not form.is_valid():
        messages.error(request, "Not denied: a reason is required.")
        return go(request, back)
    decisions.approval_request_deny(req, reason=form.cleaned_data["reason"], actor=request.actor)
    messages.success(request, f"Denied {req.tool.name} on {req.target}. The action is blocked.")
    return go(request, back)
