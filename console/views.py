"""The operator console (README, "The console, for people"): server-rendered pages, HTMX
for the live parts.

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

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse, HttpResponseRedirect, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect, HttpResponseLocation

from approvals.selectors import approval_request_for
from core.access import console_viewer
from core.errors import DomainError, StaleRead, refuse
from core.models import Role
from core.selectors import audit_events
from core.services import tenant_settings_update
from runs import decisions, replay
from runs.models import ForceReplayRequest, ForceRequestState, Replay
from runs.selectors import action_for, force_request_for, run_for
from runs.states import OPEN_FOR_HUMANS, VERDICT_MEANING, ActionState

from . import selectors as sel
from .forms import (
    ActionFilterForm,
    AuditFilterForm,
    DenyForm,
    ForceReplayForm,
    GrantForm,
    QueueFilterForm,
    ResolveForm,
    RunFilterForm,
)
from .templatetags.console_format import age_label, compact_json, pretty_json

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
            scope = console_viewer(request.user, request.session)
            if scope is None:
                raise PermissionDenied("You are not a member of any tenant.")
            request.scope = scope
            if role and not scope.has_role(role):
                raise PermissionDenied(f"This page needs the {role} role in {scope.tenant.slug}.")
            return view(request, *args, **kwargs)

        return wrapped

    return decorator


def _go(request, url: str):
    """After a POST: HTMX navigates with HX-Location, a plain form follows a 303."""
    if request.htmx:
        return HttpResponseLocation(url)
    response = HttpResponseRedirect(url)
    response.status_code = 303  # See Other: the browser follows with a GET
    return response


def decision(get, role: str | None = None, *, back, refused: str = "Not done"):
    """The console's decisions, in one shape (every POST that changes something goes
    through it): POST only; signed in (`operator_required`); the object through its scoped
    getter, so another tenant's is a 404; the role in the object's tenant, else 403. The view
    gets the object and `request.actor` (who acts, with their roles there), validates its
    form and calls one service. A refusal by the service (a DomainError: a state conflict, a
    missing reason, a role) becomes an error message in words, nothing changed, and the
    browser goes `back(obj)`: HX-Location for htmx, a 303 otherwise (`_go`)."""

    def decorator(view):
        @require_POST
        @operator_required()
        @wraps(view)
        def wrapped(request, pk, *args, **kwargs):
            obj = get(request.scope, pk)
            if role:
                request.scope.require_role(role, obj.tenant_id)
            request.actor = request.scope.actor_for(obj.tenant_id)
            try:
                return view(request, obj, *args, **kwargs)
            except DomainError as exc:
                messages.error(request, f"{refused}: {exc.detail}")
                return _go(request, _next_or(request, back(obj)))

        return wrapped

    return decorator


def _action_url(action) -> str:
    return reverse("console:action", args=[action.pk])


def _run_url(run) -> str:
    return reverse("console:run", args=[run.pk])


def _approvals_url(req) -> str:
    return reverse("console:approvals")


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


def _remember_form(request, key: str, form) -> None:
    """Post/Redirect/Get for a plain form with errors: what was typed and what was wrong
    are kept in the session for the page the browser is sent back to (a reload of that page
    is a harmless GET, not a 405 on the POST URL)."""
    data = {k: v for k, v in form.data.items() if k != "csrfmiddlewaretoken"}
    errors = {name: [str(e) for e in errs] for name, errs in form.errors.items()}
    request.session[f"form:{key}"] = {"data": data, "errors": errors}


def _recall_form(request, key: str, make):
    """The form remembered by `_remember_form`, bound and with its errors; or None."""
    saved = request.session.pop(f"form:{key}", None)
    if not saved:
        return None
    form = make(saved["data"])
    form.is_valid()
    for name, messages_ in saved["errors"].items():
        if name not in form.errors:
            for message in messages_:
                form.add_error(None if name == "__all__" else name, message)
    return form


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


@operator_required()
def preferences(request):
    """The operator's own preferences: the time zone the console shows times in."""
    from core.services import operator_set_time_zone

    from .timezones import SESSION_KEY, zone_choices

    if request.method == "POST" and request.POST.get("form") == "email":
        return _email_preferences(request)
    if request.method == "POST":
        try:
            name = operator_set_time_zone(request.user, time_zone=request.POST.get("time_zone", ""))
        except DomainError as exc:
            messages.error(request, f"Not saved: {exc.detail}")
        else:
            request.session[SESSION_KEY] = name
            messages.success(request, f"Times are now shown in {name}.")
        return _go(request, reverse("console:preferences"))
    from core.models import OperatorPreference
    from notifications.kinds import kinds_for_roles

    preference = OperatorPreference.objects.filter(user=request.user).first()
    roles = {r for m in request.scope.memberships for r in m.roles}
    return render(
        request,
        "console/preferences.html",
        {
            "section": "preferences",
            "zones": zone_choices(),
            "current": timezone.get_current_timezone_name(),
            "email_kinds": kinds_for_roles(roles),
            "email_events": preference.email_events if preference else [],
        },
    )


def _email_preferences(request):
    """The operator's own e-mail notifications: the address, and which kinds."""
    from notifications.services import operator_set_email_events

    try:
        events = operator_set_email_events(
            request.user, email=request.POST.get("email", ""), events=request.POST.getlist("events")
        )
    except DomainError as exc:
        messages.error(request, f"Not saved: {exc.detail}")
    else:
        messages.success(
            request,
            f"You get {len(events)} kind{'s' if len(events) != 1 else ''} of notification by "
            "e-mail, where an admin has set up an e-mail channel for them."
            if events
            else "You get no notifications by e-mail.",
        )
    return _go(request, reverse("console:preferences") + "#email-h")


@operator_required()
def nav_counts(request):
    """The navigation's counts, out of band (polled by every page while it is visible)."""
    return render(request, "console/_nav_counts.html", {"oob": True})


# --- find anything ---------------------------------------------------------------------------


@operator_required()
def search(request):
    """One box: an action or run id (or its 8-character prefix), an idempotency key, a
    target. Exactly one match goes straight to it; otherwise a list."""
    result = sel.search(request.scope, request.GET.get("q", "")[:300])
    if result.only_link and not request.GET.get("list"):
        return HttpResponseRedirect(result.only_link)
    return render(request, "console/search.html", {"section": "search", "result": result})


def _action_filters(request):
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
    form = ActionFilterForm(
        {k: request.GET.get(k, "") for k in ("state", "tool", "principal", "age")}
        | {"tenant": slug},
        tenants=[m.tenant for m in scope.memberships],
        tools=tools,
        principals=sel.principal_names(tenant_ids),
        current_slug=scope.tenant.slug,
    )
    form.is_valid()
    data = form.cleaned_data
    filters = sel.ActionFilters(
        tenant_ids=tenant_ids,
        state=data.get("state") or "",
        tool_ids=dict(tools).get(data["tool"], []) if data.get("tool") else None,
        principal=data.get("principal") or "",
        age=data.get("age") or "",
    )
    return form, filters


@operator_required()
def actions_list(request):
    form, filters = _action_filters(request)
    rows, next_cursor = sel.keyset(
        sel.all_actions(filters), sel.parse_cursor(request.GET.get("after")), descending=True
    )
    return render(
        request,
        "console/actions.html",
        {
            "section": "actions",
            "form": form,
            "rows": rows,
            "multi_tenant": len(filters.tenant_ids) > 1,
            "paged": bool(request.GET.get("after")),
            "next_query": _query(request, after=next_cursor) if next_cursor else "",
            "first_query": _query(request, after=None),
            "csv_query": _query(request, after=None),
        },
    )


@operator_required()
def conflicts(request):
    """Idempotency conflicts: a runtime deriving its keys badly shows up here."""
    rows, next_cursor = sel.conflicts_page(
        [request.scope.tenant.pk], sel.parse_cursor(request.GET.get("after"))
    )
    return render(
        request,
        "console/conflicts.html",
        {
            "section": "actions",
            "rows": rows,
            "paged": bool(request.GET.get("after")),
            "next_query": _query(request, after=next_cursor) if next_cursor else "",
            "first_query": _query(request, after=None),
        },
    )


@operator_required()
def actions_csv(request):
    _, filters = _action_filters(request)
    qs = sel.all_actions(filters).order_by("-created_at", "-pk")
    header = [
        "created_at",
        "id",
        "tenant",
        "run",
        "principal",
        "tool",
        "target",
        "state",
        "block_reason",
        "failure_reason",
        "resolution",
        "idempotency_key",
        "acknowledged_at",
    ]
    rows = (
        [
            a.created_at.isoformat(),
            str(a.pk),
            a.tenant.slug,
            str(a.run_id),
            a.principal.name,
            a.tool.name,
            a.target,
            a.state,
            a.block_reason,
            a.failure_reason,
            a.resolution,
            a.idempotency_key,
            a.acknowledged_at.isoformat() if a.acknowledged_at else "",
        ]
        for a in qs.iterator(chunk_size=1000)
    )
    return _csv_response(f"actions-{request.scope.tenant.slug}.csv", header, rows)


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
    change_text, change_at = _controls_change(action, claimed_by_me)
    latest_read = reads[-1] if reads else None
    read_age = decisions.read_age(latest_read)
    # The tool's own answer about the key, while it is the latest word (no attempt since).
    lookup = next((r for r in reversed(reads) if r.kind == "lookup"), None)
    if lookup and attempts and attempts[-1].started_at > lookup.at:
        lookup = None
    resolvable = decisions.is_resolvable(action)
    context = {
        "section": "queue",
        "action": action,
        "latest_read": latest_read,
        "read_max_age": int(settings.RESOLVE_READ_MAX_AGE_SECONDS),
        "read_is_stale": decisions.read_is_stale(latest_read),
        # Opening the page re-reads in the background when the last read is not fresh.
        "auto_reread": oncall
        and resolvable
        and (read_age is None or read_age > settings.CONSOLE_REREAD_AFTER_SECONDS),
        "timeline": sel.action_timeline(attempts, reads, events),
        "lookup": lookup,
        "effect_meaning": sel.EFFECT_MEANINGS.get(action.tool.effect, ""),
        "resends": sum(1 for a in attempts if a.kind == "resend"),
        "diff": diff,
        "attempts": attempts,
        "desired_json": pretty_json(action.desired_state),
        "desired_rows": [(k, compact_json(v)) for k, v in action.desired_state.items()],
        "can_oncall": oncall,
        "can_approve": approver,
        "resolvable": resolvable,
        # A blocked action is final: nothing to claim, only to acknowledge.
        "claimable": decisions.is_claimable(action),
        "acknowledgeable": decisions.is_acknowledgeable(action),
        "claimed_by_me": claimed_by_me,
        "claimed_by_other": claimed_by_other,
        "pending_request": pending_request,
        "terminal": sel.is_terminal(action),
        "live_signature": live_signature,
        "controls_signature": controls_signature,
        "change_text": change_text,
        "change_at": change_at,
        "age": age_label(action.created_at),
        "request_age": age_label(pending_request.created_at) if pending_request else "",
        "resolve_form": ResolveForm(),
        "grant_form": GrantForm(),
        "deny_form": DenyForm(),
        # Said once: a blocked action's reason is in its block_reason line already.
        "reason_label": sel.queue_reason(action) if decisions.is_claimable(action) else "",
    }
    if context["terminal"] or action.acknowledged_at:
        # After a decision the page is not a dead end: the next thing this person can work.
        context["next_item"] = sel.next_open_action(scope, action)
    context.update(extra)
    return context


def _controls_change(action, claimed_by_me) -> tuple[str, object]:
    """What a live update of the controls would tell an operator whose half-typed form it
    does not replace (console.js shows it as a notice, with the age)."""
    if action.state not in OPEN_FOR_HUMANS:
        return f"This action is now {action.get_state_display().lower()}", action.updated_at
    if action.claimed_by_id and not claimed_by_me:
        return f"{action.claimed_by.get_username()} claimed this", action.claimed_at
    if claimed_by_me:
        return "You claimed this (in another window)", action.claimed_at
    return "The claim on this action was released", action.updated_at


@operator_required()
def action_detail(request, pk):
    action = action_for(request.scope, pk)
    extra = {}
    if not request.htmx and (form := _recall_form(request, f"resolve:{pk}", ResolveForm)):
        extra["resolve_form"] = form
    context = _action_context(request, action, **extra)
    if request.htmx and request.GET.get("live"):
        if request.GET.get("v") == context["live_signature"]:
            return HttpResponse(status=204)
        context["oob"] = True
        context["controls_oob"] = request.GET.get("c") != context["controls_signature"]
        return render(request, "console/action.html#action-live", context)
    return render(request, "console/action.html", context)


@decision(action_for, Role.ONCALL, back=_action_url, refused="Not re-checked")
def action_recheck(request, action):
    action = decisions.action_recheck(action.pk, actor=request.actor)
    if request.htmx and request.POST.get("background"):
        # The page's own re-read on opening: the live region shows the new read.
        return HttpResponse(status=204)
    read = action.reconciliations.order_by("-at", "-id").first()
    verdict = VERDICT_MEANING.get(read.verdict, read.verdict) if read else "no read"
    text = (
        f"Re-checked the authoritative state: {verdict}. "
        f"The action is {action.get_state_display().lower()}."
    )
    # Green only for success: a read that failed is a warning, not good news.
    if read is None or read.verdict == "read_failed":
        messages.warning(request, text)
    else:
        messages.success(request, text)
    return _go(request, _action_url(action))


@decision(action_for, Role.ONCALL, back=_action_url, refused="Not claimed")
def action_claim(request, action):
    take_over = request.POST.get("take_over_from", "")
    # A user id (a 32-bit key): anything else, however many digits, means "no takeover".
    take_over = (
        int(take_over)
        if take_over.isascii() and take_over.isdigit() and len(take_over) < 10
        else None
    )
    holder = action.claimed_by.get_username() if action.claimed_by_id else None
    action, won = decisions.action_claim_for_operator(
        action, user=request.user, actor=request.actor, take_over_from=take_over
    )
    if won and take_over:
        messages.success(request, f"You took this action over from {holder}.")
    elif won:
        messages.success(request, "You have claimed this action. Others see that you hold it.")
    else:
        messages.error(request, f"{action.claimed_by.get_username()} claimed this action first.")
    return _go(request, _action_url(action))


@decision(action_for, Role.ONCALL, back=_action_url, refused="Not released")
def action_release(request, action):
    decisions.action_release_claim(action, user=request.user, actor=request.actor)
    messages.info(request, "Claim released.")
    return _go(request, _action_url(action))


def _resolve_form_again(request, action, form):
    """The resolve form with its errors, the typed reason kept: the partial for htmx, else
    Post/Redirect/Get with the form remembered."""
    if request.htmx:
        context = _action_context(request, action, resolve_form=form)
        return render(request, "console/action.html#resolve-form", context, status=422)
    _remember_form(request, f"resolve:{action.pk}", form)
    return _go(request, _action_url(action) + "#resolve-form")


@decision(action_for, Role.ONCALL, back=_action_url, refused="Not resolved")
def action_resolve(request, action):
    form = ResolveForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        refusal = decisions.check_resolve(
            action,
            outcome=data["outcome"],
            reason=data["reason"],
            actor=request.actor,
            latest_read=decisions.latest_read(action),
            based_on_read=data["based_on_read"],
            take_over=data["override_claim"],
        )
        if refusal is not None and refusal.field == "take_over":
            form.add_error("override_claim", f"{refusal} Tick the box to resolve it anyway.")
        elif refusal is not None and issubclass(refusal.error, StaleRead):
            form.add_error(None, str(refusal))
        else:
            refuse(refusal)
    if not form.is_valid():
        return _resolve_form_again(request, action, form)
    outcome = form.cleaned_data["outcome"]
    try:
        decisions.action_resolve(
            action,
            outcome=outcome,
            reason=form.cleaned_data["reason"],
            actor=request.actor,
            based_on_read=form.cleaned_data["based_on_read"],
            take_over=form.cleaned_data["override_claim"],
        )
    except StaleRead as exc:
        # Asks for a fresh read first; the typed reason stays in the form.
        form.add_error(None, exc.detail)
        return _resolve_form_again(request, action, form)
    messages.success(request, f"Resolved as {outcome}. The reason is in the audit log.")
    return _go(request, _action_url(action))


@decision(action_for, Role.ONCALL, back=_action_url, refused="Not acknowledged")
def action_acknowledge(request, action):
    note = request.POST.get("note", "").strip()[:2000]
    decisions.action_acknowledge(action, note=note, actor=request.actor)
    messages.success(
        request,
        "Acknowledged. It has left the queue; it stays findable from its run and the audit log.",
    )
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


@decision(approval_request_for, Role.APPROVER, back=_approvals_url, refused="Not granted")
def approval_grant(request, req):
    form = GrantForm(request.POST)
    back = _next_or(request, _approvals_url(req))
    if not form.is_valid():
        messages.error(request, "Choose how long the approval stays valid.")
        return _go(request, back)
    approval = decisions.approval_request_grant(
        req, ttl_seconds=form.cleaned_data["ttl_seconds"], actor=request.actor
    )
    messages.success(
        request,
        f"Granted {req.tool.name} on {req.target} until "
        f"{timezone.localtime(approval.expires_at):%Y-%m-%d %H:%M} "
        f"{timezone.get_current_timezone_name()}. The action is queued for dispatch.",
    )
    return _go(request, back)


@decision(approval_request_for, Role.APPROVER, back=_approvals_url, refused="Not denied")
def approval_deny(request, req):
    form = DenyForm(request.POST)
    back = _next_or(request, _approvals_url(req))
    if not form.is_valid():
        messages.error(request, "Not denied: a reason is required.")
        return _go(request, back)
    decisions.approval_request_deny(req, reason=form.cleaned_data["reason"], actor=request.actor)
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
    waiting_force = run.force_requests.filter(state=ForceRequestState.PENDING).first()
    verdict = detail.verdict
    # What the page shows, for its live poll (204 when unchanged), and the replay panel's own
    # part: the panel holds the force form, so it is only replaced when its verdict changed.
    replay_signature = sel.signature(
        verdict.as_dict(), waiting_force.pk if waiting_force else None, run.status
    )
    live_signature = sel.signature(
        run.status,
        run.finished_at,
        run.heartbeat_at,
        run.attempts,
        run.error_message,
        [(a.pk, a.state) for a in detail.actions],
        detail.tools_executed,
        [(r.new_run_id, r.new_run.status) for r in detail.replayed_by],
        run.replay_of.status if run.replay_of_id else None,
        replay_signature,
    )
    context = {
        "section": "runs",
        "run": run,
        "detail": detail,
        "verdict": verdict,
        "config_json": pretty_json(run.config),
        # Who may force a replay: the one rule, for this person in the run's tenant.
        "is_admin": replay.may_force_replay(request.scope.actor_for(run.tenant_id)) is None,
        "force_form": ForceReplayForm(run=run),
        "waiting_force": waiting_force,
        "four_eyes": run.tenant.four_eyes_force_replay,
        "short_id": str(run.pk)[:8],
        "run_settled": run.status not in {"pending", "running"},
        "live_signature": live_signature,
        "replay_signature": replay_signature,
        "replay_change_text": "The replay verdict of this run changed",
        # When what the verdict rests on last changed: the run's end, or one of its actions.
        "replay_change_at": max(
            [run.finished_at or run.created_at, *(a.updated_at for a in detail.actions)]
        ),
    }
    context.update(extra)
    return context


@operator_required()
def run_detail(request, pk):
    run = run_for(request.scope, pk)
    if request.htmx and request.GET.get("live"):
        context = _run_context(request, run)
        if request.GET.get("v") == context["live_signature"]:
            return HttpResponse(status=204)
        context["oob"] = True
        context["replay_oob"] = request.GET.get("c") != context["replay_signature"]
        return render(request, "console/run.html#run-live", context)
    extra = {}
    if form := _recall_form(request, f"force:{pk}", lambda data: ForceReplayForm(data, run=run)):
        extra["force_form"] = form
    return render(request, "console/run.html", _run_context(request, run, **extra))


@decision(run_for, back=_run_url, refused="Not replayed")
def run_replay(request, run):
    new_run = replay.run_replay(run, force=False, reason="", actor=request.actor)
    messages.success(request, f"Replay created: run {str(new_run.pk)[:8]}, pending for a runtime.")
    return _go(request, _run_url(new_run))


@decision(run_for, Role.ADMIN, back=_run_url, refused="Not replayed")
def run_force_replay(request, run):
    form = ForceReplayForm(request.POST, run=run)
    if not form.is_valid():
        if request.htmx:
            context = _run_context(request, run, force_form=form)
            return render(request, "console/run.html#force-form", context, status=422)
        _remember_form(request, f"force:{run.pk}", form)
        return _go(request, _run_url(run) + "#force-form")
    new_run, waiting = replay.run_force_replay(
        run, reason=form.cleaned_data["reason"], actor=request.actor
    )
    if waiting is not None:
        messages.info(
            request,
            "Four eyes: your force replay waits until a different admin confirms it. "
            "Nothing has been replayed yet.",
        )
        return _go(request, _run_url(run))
    messages.success(
        request,
        f"Forced replay created: run {str(new_run.pk)[:8]}. The reason and the tools at risk "
        "are in the replay history.",
    )
    return _go(request, _run_url(new_run))


@decision(force_request_for, Role.ADMIN, back=lambda req: _run_url(req.run))
def force_request_decide(request, req, decision):
    if decision == "confirm":
        new_run = replay.force_replay_confirm(req, actor=request.actor)
        messages.success(
            request,
            f"Confirmed. Forced replay created: run {str(new_run.pk)[:8]}, pending for a runtime.",
        )
        return _go(request, _run_url(new_run))
    replay.force_replay_reject(
        req, reason=request.POST.get("reason", "").strip()[:2000], actor=request.actor
    )
    messages.info(request, "Rejected. Nothing was replayed.")
    return _go(request, _run_url(req.run))


@require_POST
@operator_required(Role.ADMIN)
def tenant_settings(request):
    enabled = request.POST.get("four_eyes_force_replay") == "on"
    minutes = request.POST.get("approval_sla_minutes", "").strip() or "0"
    # isascii: "²" is a digit to str.isdigit() but not to int(); and int() refuses more than
    # 4,300 digits. Either would be a 500.
    plain = minutes.isascii() and minutes.isdigit() and len(minutes) <= 6
    if not plain or int(minutes) > 30 * 24 * 60:
        messages.error(request, "Not saved: the approval SLA is a whole number of minutes.")
        return _go(request, reverse("console:replays"))
    tenant_settings_update(
        request.scope.tenant,
        actor=request.scope.actor,
        four_eyes_force_replay=enabled,
        approval_sla_seconds=int(minutes) * 60,
    )
    four_eyes = (
        "Four-eyes force replay is on: a second admin must confirm each force replay."
        if enabled
        else "Four-eyes force replay is off: an admin's force replay happens at once."
    )
    sla = f"Approval SLA: {int(minutes)} min." if int(minutes) else "No approval SLA."
    messages.success(request, f"{four_eyes} {sla}")
    return _go(request, reverse("console:replays"))


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
            "waiting": ForceReplayRequest.objects.filter(
                tenant=request.scope.tenant, state=ForceRequestState.PENDING
            ).order_by("created_at"),
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


def _audit_form(request) -> AuditFilterForm:
    return AuditFilterForm(
        request.GET, actors=sel.audit_actors(request.scope.tenant), verbs=sel.AUDIT_VERBS
    )


@operator_required(Role.ADMIN)
def audit(request):
    form = _audit_form(request)
    qs = audit_events(request.scope.tenant, **form.filters())
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
