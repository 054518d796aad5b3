"""Approvals: the inbox, the target's state now, grant and deny."""

from django.contrib import messages
from django.shortcuts import render
from django.utils import timezone
from django_htmx.http import reswap, retarget

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


def request_refused(request, req, text):
    """A refused grant or deny, next to its buttons: on the approvals page the row as it is
    now, with the refusal in place of the buttons (the request is no longer decidable);
    on the action page, the action's controls."""
    if request.POST.get("next", "") != approvals_url(req):
        from .action_views import controls_refused

        return controls_refused(request, req.action, text)
    req = approval_request_for(request.scope, req.pk)
    who = req.decided_by or {}
    if req.state != "pending":
        text += f" It was {req.state} by {who.get('kind', '')}:{who.get('name', '')}."
    rows = [r for r in sel.approvals_inbox(req.tenant)[0] if r.pk == req.pk]
    r = rows[0] if rows else req
    if not rows:  # decided: the row as it was asked, without its decision controls
        r.desired_rows, r.waiting, r.action = [], False, None
    context = {"r": r, "refusal": text, "grant_form": GrantForm(), "deny_form": DenyForm()}
    response = render(request, "console/approvals.html#request-row", context)
    return reswap(retarget(response, f"#request-{req.pk}"), "outerHTML")


def _approver_decision(refused: str):
    """A decision on a pending approval request (grant, deny): an approver's, in place."""
    return decision(
        approval_request_for,
        Role.APPROVER,
        back=approvals_url,
        refused=refused,
        inline=request_refused,
    )


def _back(request, req, error: str = ""):
    """Back to where the decision was made, saying `error` when the form was refused."""
    if error:
        messages.error(request, error)
    return go(request, next_or(request, approvals_url(req)))


@_approver_decision("Not granted")
def approval_grant(request, req):
    form = GrantForm(request.POST)
    if not form.is_valid():
        return _back(request, req, "Choose how long the approval stays valid.")
    approval = decisions.approval_request_grant(
        req, ttl_seconds=form.cleaned_data["ttl_seconds"], actor=request.actor
    )
    messages.success(
        request,
        f"Granted {req.tool.name} on {req.target} until "
        f"{timezone.localtime(approval.expires_at):%Y-%m-%d %H:%M} "
        f"{timezone.get_current_timezone_name()}. The action is queued for dispatch.",
    )
    return _back(request, req)


@_approver_decision("Not denied")
def approval_deny(request, req):
    form = DenyForm(request.POST)
    if not form.is_valid():
        return _back(request, req, "Not denied: a reason is required.")
    decisions.approval_request_deny(req, reason=form.cleaned_data["reason"], actor=request.actor)
    messages.success(request, f"Denied {req.tool.name} on {req.target}. The action is blocked.")
    return _back(request, req)
