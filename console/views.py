"""The operator console (SPEC §8): server-rendered pages, HTMX for the live parts.

Shape of every view: a scope check at the top (signed in, member of a tenant, the role the
page needs), a getter that 404s across tenants, a service call for any change (never a state
write here), and then a page, a partial of that page for an HTMX request, or a redirect.

- Mutations are POST only, CSRF-checked (the token rides in `hx-headers` on <body> for HTMX
  and in a hidden field for plain forms), and answer an HTMX request with `HX-Location`, a
  plain one with a 303 redirect. Every page works without JavaScript.
- Roles are checked against the membership of the *object's* tenant (admin implies the
  other two), and the templates show a button only to someone the view would let through.
- Live regions poll with a signature of what they show; an unchanged region gets a 204 and
  the browser leaves the DOM — focus, selection, scroll — alone.
"""

import csv
import json
from functools import wraps

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect, HttpResponseLocation

from core.errors import DomainError, StateConflict
from core.models import Role
from runs import dispatch, services
from runs.models import Replay
from runs.states import OPEN_FOR_HUMANS, ActionState

from . import selectors as sel
from .forms import (
    AuditFilterForm,
    DenyForm,
    ForceReplayForm,
    GrantForm,
    QueueFilterForm,
    ResolveForm,
    RunFilterForm,
)

# --- scope and roles -----------------------------------------------------------------------


def operator_required(role: str | None = None):
    """Signed in (else the sign-in page), member of a tenant (else 403), and — for pages of
    the current tenant — holding `role` there (else 403). Sets `request.scope`."""

    def decorator(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if not request.user.is_authenticated:
                if request.htmx:
                    # Back to the page the browser shows, not to the poll that found out.
                    here = request.htmx.current_url_abs_path or reverse("console:queue")
                    return HttpResponseClientRedirect(
                        reverse("console:login") + "?" + urlencode({"next": here})
                    )
                return redirect_to_login(request.get_full_path())
            scope = sel.scope_for(request.user, request.session)
            if scope is None:
                raise PermissionDenied("You are not a member of any tenant.")
            request.scope = scope
            if role and not scope.has_role(role):
                raise PermissionDenied(f"This page needs the {role} role in {scope.tenant.slug}.")
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def require_role(scope: sel.Scope, tenant_id, role: str) -> None:
    """After the getter (so another tenant's object stays a 404), the role in its tenant."""
    if not scope.has_role(role, tenant_id):
        membership = scope.membership_for(tenant_id)
        raise PermissionDenied(f"This needs the {role} role in {membership.tenant.slug}.")


def _go(request, url: str):
    """After a POST: HTMX navigates with HX-Location, a plain form follows a 303."""
    if request.htmx:
        return HttpResponseLocation(url)
    response = HttpResponseRedirect(url)
    response.status_code = 303  # See Other: the browser follows with a GET
    return response


def _next_or(request, fallback: str) -> str:
    target = request.POST.get("next") or request.GET.get("next")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return fallback


def _query(request, **changes) -> str:
    """The current query string with some parameters changed (None drops one)."""
    params = request.GET.copy()
    for name in ("refresh", "v", "live", "c", "poll"):
        params.pop(name, None)
    for name, value in changes.items():
        params.pop(name, None)
        if value is not None:
            params[name] = value
    return params.urlencode()


# --- sign-in and tenant --------------------------------------------------------------------


@require_POST
@operator_required()
def switch_tenant(request):
    slug = request.POST.get("tenant", "")
    tenant = request.scope.tenant_by_slug(slug)
    if tenant is None:
        raise Http404("No such tenant.")
    request.session["tenant"] = tenant.slug
    messages.info(request, f"Now working in {tenant.slug}.")
    return _go(request, _next_or(request, reverse("console:queue")))


# --- the queue -----------------------------------------------------------------------------


@operator_required()
def queue(request):
    scope = request.scope
    slug = request.GET.get("tenant") or scope.tenant.slug
    if slug == "*":
        tenant_ids = scope.tenant_ids
    else:
        tenant = scope.tenant_by_slug(slug)
        if tenant is None:
            raise Http404("No such tenant.")
        tenant_ids = [tenant.pk]
    tools = sel.queue_tools(scope, tenant_ids)
    form = QueueFilterForm(
        {
            "tenant": slug,
            "tool": request.GET.get("tool", ""),
            "state": request.GET.get("state", ""),
            "age": request.GET.get("age", ""),
        },
        tenants=[m.tenant for m in scope.memberships],
        tools=tools,
        current_slug=scope.tenant.slug,
    )
    form.is_valid()
    tool_name = form.cleaned_data.get("tool") or ""
    filters = sel.QueueFilters(
        tenant_ids=tenant_ids,
        state=form.cleaned_data.get("state") or "",
        tool_ids=dict(tools).get(tool_name, []) if tool_name else None,
        age=form.cleaned_data.get("age") or "",
    )
    cursor = sel.parse_cursor(request.GET.get("after"))
    page = sel.queue_page(filters, cursor)
    if request.htmx and request.GET.get("refresh") and request.GET.get("v") == page.signature:
        return HttpResponse(status=204)
    context = {
        "section": "queue",
        "form": form,
        "page": page,
        "filters": filters,
        "multi_tenant": len(tenant_ids) > 1,
        "paged": cursor is not None,
        "next_query": _query(request, after=page.next_cursor) if page.next_cursor else "",
        "first_query": _query(request, after=None),
        "refresh_query": _query(request, refresh="1", v=page.signature),
        "count_links": [
            (state, label, n, _query(request, state=state, after=None))
            for state, label, n in page.counts_list
        ],
        "matching": page.counts[filters.state] if filters.state else page.total,
        "all_states_query": _query(request, state=None, after=None),
    }
    if request.htmx and (request.GET.get("refresh") or request.htmx.target == "queue-region"):
        return render(request, "console/queue.html#queue-live", {**context, "oob": True})
    return render(request, "console/queue.html", context)


# --- one action ----------------------------------------------------------------------------


def _action_context(request, action, **extra) -> dict:
    scope = request.scope
    attempts, reads, events = sel.action_history(action)
    diff = sel.action_diff(action, reads)
    # What the queue row says about this action, from the history loaded anyway.
    action.last_verdict = reads[-1].verdict if reads else None
    action.last_diff = reads[-1].diff if reads else None
    action.last_http_status = attempts[-1].http_status if attempts else None
    oncall = scope.has_role(Role.ONCALL, action.tenant_id)
    approver = scope.has_role(Role.APPROVER, action.tenant_id)
    claimed_by_me = action.claimed_by_id == request.user.pk
    claimed_by_other = action.claimed_by_id is not None and not claimed_by_me
    pending_request = (
        action.approval_request
        if action.approval_request_id
        and action.approval_request.state == "pending"
        and action.state == ActionState.AWAITING_APPROVAL
        else None
    )
    live_signature = sel.signature(
        action.state,
        action.updated_at.isoformat(),
        action.claimed_by_id,
        [(a.number, a.outcome, a.finished_at) for a in attempts],
        len(reads),
        len(events),
    )
    controls_signature = sel.signature(action.state, action.claimed_by_id)
    context = {
        "section": "queue",
        "action": action,
        "timeline": sel.action_timeline(attempts, reads, events),
        "diff": diff,
        "attempts": attempts,
        "desired_json": sel.pretty_json(action.desired_state),
        "desired_rows": [(k, sel.compact_json(v)) for k, v in action.desired_state.items()],
        "can_oncall": oncall,
        "can_approve": approver,
        "resolvable": action.state in {ActionState.UNKNOWN, ActionState.NEEDS_HUMAN},
        "claimable": action.state in OPEN_FOR_HUMANS,
        "claimed_by_me": claimed_by_me,
        "claimed_by_other": claimed_by_other,
        "pending_request": pending_request,
        "terminal": sel.is_terminal(action),
        "live_signature": live_signature,
        "controls_signature": controls_signature,
        "age": sel.age_label(action.created_at),
        "request_age": sel.age_label(pending_request.created_at) if pending_request else "",
        "resolve_form": ResolveForm(),
        "grant_form": GrantForm(),
        "deny_form": DenyForm(),
        "reason_label": sel.queue_reason(action) if action.state in OPEN_FOR_HUMANS else "",
    }
    context.update(extra)
    return context


@operator_required()
def action_detail(request, pk):
    action = sel.get_action_for(request.scope, pk)
    context = _action_context(request, action)
    if request.htmx and request.GET.get("live"):
        if request.GET.get("v") == context["live_signature"]:
            return HttpResponse(status=204)
        context["oob"] = True
        context["controls_oob"] = request.GET.get("c") != context["controls_signature"]
        return render(request, "console/action.html#action-live", context)
    return render(request, "console/action.html", context)


def _action_url(action) -> str:
    return reverse("console:action", args=[action.pk])


@require_POST
@operator_required()
def action_recheck(request, pk):
    scope = request.scope
    action = sel.get_action_for(scope, pk)
    require_role(scope, action.tenant_id, Role.ONCALL)
    if action.state not in {ActionState.UNKNOWN, ActionState.NEEDS_HUMAN}:
        messages.error(
            request,
            f"Only an unknown or needs-human action can be re-checked; this one is "
            f"{action.get_state_display().lower()}.",
        )
        return _go(request, _action_url(action))
    action = dispatch.action_reconcile(action.pk, actor=scope.actor, manual=True)
    read = action.reconciliations.order_by("-at", "-id").first()
    verdict = sel.VERDICT_LABELS.get(read.verdict, read.verdict) if read else "no read"
    messages.success(
        request,
        f"Re-checked the authoritative state: {verdict}. "
        f"The action is {action.get_state_display().lower()}.",
    )
    return _go(request, _action_url(action))


@require_POST
@operator_required()
def action_claim(request, pk):
    scope = request.scope
    action = sel.get_action_for(scope, pk)
    require_role(scope, action.tenant_id, Role.ONCALL)
    if action.state not in OPEN_FOR_HUMANS:
        messages.error(request, "Only an action in the queue can be claimed.")
        return _go(request, _action_url(action))
    take_over = request.POST.get("take_over_from", "")
    # A user id (a 32-bit key): anything else, however many digits, means "no takeover".
    take_over = (
        int(take_over)
        if take_over.isascii() and take_over.isdigit() and len(take_over) < 10
        else None
    )
    holder = action.claimed_by.get_username() if action.claimed_by_id else None
    action, won = services.action_claim_for_operator(
        action, user=request.user, actor=scope.actor, take_over_from=take_over
    )
    if won and take_over:
        messages.success(request, f"You took this action over from {holder}.")
    elif won:
        messages.success(request, "You have claimed this action. Others see that you hold it.")
    else:
        messages.error(request, f"{action.claimed_by.get_username()} claimed this action first.")
    return _go(request, _action_url(action))


@require_POST
@operator_required()
def action_release(request, pk):
    scope = request.scope
    action = sel.get_action_for(scope, pk)
    require_role(scope, action.tenant_id, Role.ONCALL)
    services.action_release_claim(action, user=request.user, actor=scope.actor)
    messages.info(request, "Claim released.")
    return _go(request, _action_url(action))


@require_POST
@operator_required()
def action_resolve(request, pk):
    scope = request.scope
    action = sel.get_action_for(scope, pk)
    require_role(scope, action.tenant_id, Role.ONCALL)
    form = ResolveForm(request.POST)
    held_by_other = action.claimed_by_id not in (None, request.user.pk)
    if form.is_valid() and held_by_other and not form.cleaned_data["override_claim"]:
        form.add_error(
            "override_claim",
            f"{action.claimed_by.get_username()} has claimed this action. Tick the box to "
            "resolve it anyway.",
        )
    if not form.is_valid():
        context = _action_context(request, action, resolve_form=form)
        if request.htmx:
            return render(request, "console/action.html#resolve-form", context, status=422)
        return render(request, "console/action.html", context, status=400)
    outcome = form.cleaned_data["outcome"]
    try:
        services.action_resolve(
            action, outcome=outcome, reason=form.cleaned_data["reason"], actor=scope.actor
        )
    except StateConflict as exc:
        messages.error(request, exc.detail)
    else:
        messages.success(request, f"Resolved as {outcome}. The reason is in the audit log.")
    return _go(request, _action_url(action))


# --- approvals -----------------------------------------------------------------------------


@operator_required(Role.APPROVER)
def approvals(request):
    scope = request.scope
    pending, decided = sel.approvals_inbox(scope.tenant)
    sig = sel.pending_signature(pending)
    if request.htmx and request.GET.get("poll") and request.GET.get("v") == sig:
        return HttpResponse(status=204)
    context = {
        "section": "approvals",
        "pending": pending,
        "decided": decided,
        "signature": sig,
        "grant_form": GrantForm(),
        "deny_form": DenyForm(),
    }
    if request.htmx and request.GET.get("poll"):
        return render(request, "console/approvals.html#approvals-live", {**context, "oob": True})
    return render(request, "console/approvals.html", context)


@require_POST
@operator_required()
def approval_grant(request, pk):
    scope = request.scope
    req = sel.get_request_for(scope, pk)
    require_role(scope, req.tenant_id, Role.APPROVER)
    form = GrantForm(request.POST)
    back = _next_or(request, reverse("console:approvals"))
    if not form.is_valid():
        messages.error(request, "Choose how long the approval stays valid.")
        return _go(request, back)
    try:
        approval = services.approval_request_grant(
            req, ttl_seconds=form.cleaned_data["ttl_seconds"], actor=scope.actor
        )
    except StateConflict as exc:
        messages.error(request, f"Not granted: {exc.detail}")
    else:
        messages.success(
            request,
            f"Granted {req.tool.name} on {req.target} until "
            f"{approval.expires_at:%Y-%m-%d %H:%M} UTC. The action is queued for dispatch.",
        )
    return _go(request, back)


@require_POST
@operator_required()
def approval_deny(request, pk):
    scope = request.scope
    req = sel.get_request_for(scope, pk)
    require_role(scope, req.tenant_id, Role.APPROVER)
    form = DenyForm(request.POST)
    back = _next_or(request, reverse("console:approvals"))
    if not form.is_valid():
        messages.error(request, "Not denied: a reason is required.")
        return _go(request, back)
    try:
        services.approval_request_deny(req, reason=form.cleaned_data["reason"], actor=scope.actor)
    except StateConflict as exc:
        messages.error(request, f"Not denied: {exc.detail}")
    else:
        messages.success(request, f"Denied {req.tool.name} on {req.target}. The action is blocked.")
    return _go(request, back)


# --- runs and replays ----------------------------------------------------------------------


@operator_required()
def runs(request):
    scope = request.scope
    form = RunFilterForm(request.GET)
    form.is_valid()
    status = form.cleaned_data.get("status") or ""
    rows, next_cursor = sel.runs_page(
        scope.tenant, sel.parse_cursor(request.GET.get("after")), status=status
    )
    return render(
        request,
        "console/runs.html",
        {
            "section": "runs",
            "form": form,
            "rows": rows,
            "paged": bool(request.GET.get("after")),
            "next_query": _query(request, after=next_cursor) if next_cursor else "",
            "first_query": _query(request, after=None),
        },
    )


def _run_context(request, run, **extra) -> dict:
    detail = sel.run_detail(run)
    context = {
        "section": "runs",
        "run": run,
        "detail": detail,
        "verdict": detail.verdict,
        "config_json": sel.pretty_json(run.config),
        "is_admin": request.scope.has_role(Role.ADMIN, run.tenant_id),
        "force_form": ForceReplayForm(run=run),
        "short_id": str(run.pk)[:8],
    }
    context.update(extra)
    return context


@operator_required()
def run_detail(request, pk):
    run = sel.get_run_for(request.scope, pk)
    return render(request, "console/run.html", _run_context(request, run))


def _run_url(run) -> str:
    return reverse("console:run", args=[run.pk])


@require_POST
@operator_required()
def run_replay(request, pk):
    scope = request.scope
    run = sel.get_run_for(scope, pk)
    try:
        new_run = services.run_replay(run, force=False, reason="", actor=scope.actor)
    except DomainError as exc:
        messages.error(request, f"Not replayed: {exc.detail}")
        return _go(request, _run_url(run))
    messages.success(request, f"Replay created: run {str(new_run.pk)[:8]}, pending for a runtime.")
    return _go(request, _run_url(new_run))


@require_POST
@operator_required()
def run_force_replay(request, pk):
    scope = request.scope
    run = sel.get_run_for(scope, pk)
    require_role(scope, run.tenant_id, Role.ADMIN)
    form = ForceReplayForm(request.POST, run=run)
    if not form.is_valid():
        context = _run_context(request, run, force_form=form)
        if request.htmx:
            return render(request, "console/run.html#force-form", context, status=422)
        return render(request, "console/run.html", context, status=400)
    try:
        new_run = services.run_replay(
            run, force=True, reason=form.cleaned_data["reason"], actor=scope.actor
        )
    except DomainError as exc:
        messages.error(request, f"Not replayed: {exc.detail}")
        return _go(request, _run_url(run))
    messages.success(
        request,
        f"Forced replay created: run {str(new_run.pk)[:8]}. The reason and the tools at risk "
        "are in the replay history.",
    )
    return _go(request, _run_url(new_run))


@operator_required(Role.ADMIN)
def replays(request):
    rows, next_cursor = sel.replays_page(
        request.scope.tenant, sel.parse_cursor(request.GET.get("after"))
    )
    return render(
        request,
        "console/replays.html",
        {
            "section": "replays",
            "rows": rows,
            "paged": bool(request.GET.get("after")),
            "next_query": _query(request, after=next_cursor) if next_cursor else "",
            "first_query": _query(request, after=None),
        },
    )


@operator_required(Role.ADMIN)
def replays_csv(request):
    qs = Replay.objects.filter(tenant=request.scope.tenant).order_by("-at", "-pk")
    rows = (
        [
            r.at.isoformat(),
            (r.actor or {}).get("kind", ""),
            (r.actor or {}).get("name", ""),
            "yes" if r.forced else "no",
            r.reason,
            "" if r.tools_at_risk is None else " ".join(r.tools_at_risk),
            "unknown" if r.tools_at_risk is None else "",
            str(r.original_run_id),
            str(r.new_run_id),
        ]
        for r in qs.iterator(chunk_size=1000)
    )
    header = [
        "at",
        "actor_kind",
        "actor_name",
        "forced",
        "reason",
        "tools_at_risk",
        "tools_at_risk_unknown",
        "original_run",
        "new_run",
    ]
    return _csv_response(f"replays-{request.scope.tenant.slug}.csv", header, rows)


# --- audit ---------------------------------------------------------------------------------


@operator_required(Role.ADMIN)
def audit(request):
    form = AuditFilterForm(request.GET)
    qs = sel.audit_queryset(request.scope.tenant, **form.filters())
    rows, next_cursor = sel.keyset(
        qs, sel.parse_cursor(request.GET.get("after")), field_name="at", descending=True
    )
    for event in rows:
        event.change = _change_text(event)
    return render(
        request,
        "console/audit.html",
        {
            "section": "audit",
            "form": form,
            "rows": rows,
            "verbs": sel.AUDIT_VERBS,
            "paged": bool(request.GET.get("after")),
            "next_query": _query(request, after=next_cursor) if next_cursor else "",
            "first_query": _query(request, after=None),
            "csv_query": _query(request, after=None),
        },
    )


def _change_text(event) -> str:
    before = (event.before or {}).get("state") or (event.before or {}).get("status")
    after = (event.after or {}).get("state") or (event.after or {}).get("status")
    if before and after:
        return f"{before} → {after}"
    if event.after:
        return sel.compact_json(event.after)
    return ""


@operator_required(Role.ADMIN)
def audit_csv(request):
    form = AuditFilterForm(request.GET)
    qs = sel.audit_queryset(request.scope.tenant, **form.filters()).order_by("-at", "-pk")
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
    return _csv_response(f"audit-{request.scope.tenant.slug}.csv", header, rows)


class _Echo:
    def write(self, value):
        return value


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value) -> str:
    # Reasons and names are free text, some of it written by agents: a cell that a
    # spreadsheet would run as a formula gets a leading apostrophe (OWASP's CSV advice).
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_START) else text


def _csv_response(filename, header, rows):
    writer = csv.writer(_Echo())

    def stream():
        yield writer.writerow(header)
        for row in rows:
            yield writer.writerow([_cell(v) for v in row])

    response = StreamingHttpResponse(stream(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
