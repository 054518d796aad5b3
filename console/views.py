"""Finding work: the queue, search, all actions, conflicts, the operator's preferences."""

from django.contrib import messages
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from core.errors import DomainError

from . import finding, queue_rows
from . import selectors as sel
from .counts import as_one_count
from .forms import (
    ActionFilterForm,
    QueueFilterForm,
)
from .web import csv_response, go, list_page, live_poll, next_or, operator_required, query_with

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
    return go(request, next_or(request, reverse("console:queue")))


# --- the queue -----------------------------------------------------------------------------


def _tenants_asked(request):
    """`?tenant=`: a slug of the operator's (404 otherwise), or `*` for all of them; the
    current tenant when absent. The slug and the ids of the tenants it names."""
    scope = request.scope
    slug = request.GET.get("tenant") or scope.tenant.slug
    if slug == "*":
        return slug, scope.tenant_ids
    tenant = scope.tenant_by_slug(slug)
    if tenant is None:
        raise Http404("No such tenant.")
    return slug, [tenant.pk]


@operator_required()
def queue(request):
    scope = request.scope
    slug, tenant_ids = _tenants_asked(request)
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
    multi_tenant = len(tenant_ids) > 1
    if tenant_ids == [scope.tenant.pk] and filters.tool_ids is None and not filters.age:
        # The navigation's on-call count is this page's total over the on-call states (the
        # same rows, counted by state): not counted a second time.
        request.nav_oncall = as_one_count(page.counts[state] for state in sel.QUEUE_STATES)

    def rows_html():  # called by the template, so a refresh answered 204 never writes rows
        return queue_rows.html(
            page.rows,
            oncall=scope.is_oncall,
            multi_tenant=multi_tenant,
            tz_name=timezone.get_current_timezone_name(),
        )

    context = {
        "section": "queue",
        "form": form,
        "page": page,
        "filters": filters,
        "multi_tenant": multi_tenant,
        "oncall": scope.is_oncall,
        "rows_html": rows_html,
        "paged": cursor is not None,
        "next_query": query_with(request, after=page.next_cursor) if page.next_cursor else "",
        "first_query": query_with(request, after=None),
        "refresh_query": query_with(request, refresh="1", v=page.signature),
        "count_links": [
            (state, label, n, query_with(request, state=state, after=None))
            for state, label, n in page.counts_list
        ],
        "matching": page.counts[filters.state] if filters.state else page.total,
        "all_states_query": query_with(request, state=None, after=None),
    }
    if poll := live_poll(
        request, "refresh", page.signature, "console/queue.html#queue-live", context
    ):
        return poll
    if request.htmx and request.htmx.target == "queue-region":
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
        return go(request, reverse("console:preferences"))
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
    return go(request, reverse("console:preferences") + "#email-h")


@operator_required()
def nav_counts(request):
    """The navigation's counts, out of band (polled by every page while it is visible)."""
    return render(request, "console/_nav_counts.html", {"oob": True})


# --- find anything ---------------------------------------------------------------------------


@operator_required()
def search(request):
    """One box: an action or run id (or its 8-character prefix), an idempotency key, a
    target. Exactly one match goes straight to it; otherwise a list."""
    result = finding.search(request.scope, request.GET.get("q", "")[:300])
    if result.only_link and not request.GET.get("list"):
        return HttpResponseRedirect(result.only_link)
    return render(request, "console/search.html", {"section": "search", "result": result})


def _action_filters(request):
    scope = request.scope
    slug, tenant_ids = _tenants_asked(request)
    tools = sel.queue_tools(scope, tenant_ids)
    form = ActionFilterForm(
        {k: request.GET.get(k, "") for k in ("state", "tool", "principal", "age")}
        | {"tenant": slug},
        tenants=[m.tenant for m in scope.memberships],
        tools=tools,
        principals=finding.principal_names(tenant_ids),
        current_slug=scope.tenant.slug,
    )
    form.is_valid()
    data = form.cleaned_data
    filters = finding.ActionFilters(
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
    page = sel.keyset(
        finding.all_actions(filters), sel.parse_cursor(request.GET.get("after")), descending=True
    )
    return list_page(
        request,
        "console/actions.html",
        page,
        section="actions",
        form=form,
        multi_tenant=len(filters.tenant_ids) > 1,
        csv_query=query_with(request, after=None),
    )


@operator_required()
def conflicts(request):
    """Idempotency conflicts: a runtime deriving its keys badly shows up here."""
    page = sel.conflicts_page([request.scope.tenant.pk], sel.parse_cursor(request.GET.get("after")))
    return list_page(
        request,
        "console/conflicts.html",
        page,
        section="actions",
    )


@operator_required()
def actions_csv(request):
    _, filters = _action_filters(request)
    qs = finding.all_actions(filters).order_by("-created_at", "-pk")
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
    return csv_response(f"actions-{request.scope.tenant.slug}.csv", header, rows)
