"""The console's notification pages (admin): the tenant's channels and thresholds, and the
delivery log. Self-contained (views, forms, templates) and calling the `notifications` app's
services, which audit every change.

A new signing secret is shown once, in the answer to the POST that made it (a 200, not a
redirect), like a new API token: a flash message would store it in the session.
"""

from django import forms
from django.contrib import messages
from django.db import transaction
from django.db.models import Count
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse

from core.errors import DomainError, ValidationFailed
from core.models import Role
from notifications.delivery import SIGNATURE_TOLERANCE_SECONDS
from notifications.kinds import KINDS
from notifications.models import (
    ChannelKind,
    DeliveryState,
    NotificationChannel,
    NotificationDelivery,
)
from notifications.services import (
    channel_create,
    channel_rotate_secret,
    channel_update,
    delivery_retry,
    email_recipients,
    notification_test,
)
from runs.wakeup import wake_workers

from . import selectors
from .web import decision, live_poll, operator_required, query_with

KIND_CHOICES = [(k.name, k.label) for k in KINDS.values()]
MAX_MINUTES = 30 * 24 * 60


class ChannelForm(forms.Form):
    name = forms.CharField(label="Name", max_length=100, strip=True)
    kind = forms.ChoiceField(label="Kind", choices=ChannelKind.choices)
    url = forms.CharField(label="URL", max_length=500, required=False, strip=True)
    events = forms.MultipleChoiceField(
        label="Send", choices=KIND_CHOICES, error_messages={"required": "Choose at least one."}
    )


def _see_other(url: str) -> HttpResponseRedirect:
    response = HttpResponseRedirect(url)
    response.status_code = 303
    return response


def _wake() -> None:
    """A worker sends it now rather than at the next sweep (the rows are committed: this
    view runs in autocommit, so on_commit runs at once; `robust`: a broker outage only
    delays it to the sweep)."""
    transaction.on_commit(wake_workers, robust=True)


def _minutes(seconds: int) -> int:
    return seconds // 60


def _page(request, *, form=None, new_secret=None, status=200):
    tenant = request.scope.tenant
    channels = list(NotificationChannel.objects.filter(tenant=tenant).order_by("name"))
    counts = {}
    for row in (
        NotificationDelivery.objects.filter(tenant=tenant)
        .values("channel_id", "state")
        .annotate(n=Count("pk"))
        .order_by()
    ):
        counts.setdefault(row["channel_id"], {})[row["state"]] = row["n"]
    for channel in channels:
        channel.counts = counts.get(channel.pk, {})
        channel.event_labels = [KINDS[e].label for e in channel.events if e in KINDS]
        if channel.kind == ChannelKind.EMAIL:
            # Who it reaches today: members whose role and preferences ask for one of its kinds.
            channel.recipients = sorted(
                {a for kind in channel.events for a in email_recipients(tenant, kind)}
            )
    return render(
        request,
        "console/notifications.html",
        {
            "section": "notifications",
            "channels": channels,
            "form": form or ChannelForm(initial={"kind": ChannelKind.WEBHOOK}),
            "kinds": list(KINDS.values()),
            "channel_kinds": ChannelKind.choices,
            "new_secret": new_secret,
            "unknown_minutes": _minutes(tenant.unknown_alert_seconds),
            "expiry_minutes": _minutes(tenant.approval_expiry_warning_seconds),
            "sla_minutes": _minutes(tenant.approval_sla_seconds),
            "tolerance": SIGNATURE_TOLERANCE_SECONDS,
        },
        status=status,
    )


@operator_required(Role.ADMIN)
def notifications(request):
    return _page(request)


@decision(None, Role.ADMIN, back=lambda _: reverse("console:notifications"), refused="Not added")
def channel_create_view(request):
    scope = request.scope
    form = ChannelForm(request.POST)
    if not form.is_valid():
        return _page(request, form=form, status=422)
    data = form.cleaned_data
    try:
        channel, secret = channel_create(
            tenant=scope.tenant,
            name=data["name"],
            kind=data["kind"],
            url=data["url"],
            events=data["events"],
            actor=scope.actor,
        )
    except ValidationFailed as exc:
        for name, errors in exc.extra.get("errors", {}).items():
            for error in errors:
                form.add_error(name if name in form.fields else None, error)
        return _page(request, form=form, status=422)
    except DomainError as exc:
        form.add_error(None, exc.detail)
        return _page(request, form=form, status=422)
    if not secret:
        messages.success(
            request,
            f"E-mail channel {channel.name!r} added. Operators choose what they get by "
            "e-mail in their preferences.",
        )
        return _see_other(reverse("console:notifications"))
    return _page(request, new_secret={"channel": channel, "secret": secret, "verb": "added"})


def _of_tenant(model, what: str):
    """The scoped getter `decision` takes: a `model` row of the current tenant by pk, else a
    404 ("No such `what`.")."""

    def get(scope, pk):
        found = model.objects.filter(pk=pk, tenant=scope.tenant).first()
        if found is None:
            raise Http404(f"No such {what}.")
        return found

    return get


_channel_for = _of_tenant(NotificationChannel, "channel")


@decision(
    _channel_for, Role.ADMIN, back=lambda _: reverse("console:notifications"), refused="Not saved"
)
def channel_update_view(request, channel):
    change = request.POST.get("change", "")
    try:
        if change == "events":
            channel_update(
                channel, actor=request.scope.actor, events=request.POST.getlist("events")
            )
            messages.success(request, f"{channel.name}: notifications saved.")
        elif change in {"enable", "disable"}:
            channel_update(channel, actor=request.scope.actor, enabled=change == "enable")
            messages.success(
                request,
                f"{channel.name} is {'on' if change == 'enable' else 'off'}."
                + ("" if change == "enable" else " Pending deliveries to it are given up."),
            )
        else:
            raise Http404("No such change.")
    except ValidationFailed as exc:
        said = [e for errors in exc.extra.get("errors", {}).values() for e in errors]
        messages.error(request, f"Not saved: {' '.join(said) or exc.detail}")
    return _see_other(reverse("console:notifications") + f"#channel-{channel.pk}")


@decision(
    _channel_for, Role.ADMIN, back=lambda _: reverse("console:notifications"), refused="Not rotated"
)
def channel_rotate_view(request, channel):
    try:
        secret = channel_rotate_secret(channel, actor=request.scope.actor)
    except DomainError as exc:
        messages.error(request, exc.detail)
        return _see_other(reverse("console:notifications"))
    return _page(request, new_secret={"channel": channel, "secret": secret, "verb": "rotated"})


@decision(
    _channel_for, Role.ADMIN, back=lambda _: reverse("console:notifications"), refused="Not sent"
)
def channel_test_view(request, channel):
    try:
        created = notification_test(channel, actor=request.scope.actor, email=request.user.email)
    except DomainError as exc:
        messages.error(request, f"Not sent: {exc.detail}")
        return _see_other(reverse("console:notifications"))
    _wake()
    messages.info(
        request,
        f"Test notification queued for {channel.name} ({created} "
        f"deliver{'y' if created == 1 else 'ies'}). Its progress is below.",
    )
    return _see_other(reverse("console:deliveries") + f"?channel={channel.pk}")


# --- the delivery log ------------------------------------------------------------------------


def _deliveries(request):
    tenant = request.scope.tenant
    qs = NotificationDelivery.objects.filter(tenant=tenant).select_related("event", "channel")
    state = request.GET.get("state", "")
    if state in DeliveryState.values:
        qs = qs.filter(state=state)
    channel = request.GET.get("channel", "")
    channels = list(NotificationChannel.objects.filter(tenant=tenant).order_by("name"))
    if channel and channel in {str(c.pk) for c in channels}:
        qs = qs.filter(channel_id=channel)
    else:
        channel = ""
    rows, next_cursor = selectors.keyset(
        qs.prefetch_related("attempt_log"),
        selectors.parse_cursor(request.GET.get("after")),
        descending=True,
    )
    for d in rows:
        d.kind_label = KINDS[d.event.kind].label if d.event.kind in KINDS else "Test"
    signature = selectors.signature(
        [(d.pk, d.state, d.attempts, d.next_attempt_at) for d in rows], next_cursor
    )
    return rows, next_cursor, state, channel, channels, signature


@operator_required(Role.ADMIN)
def deliveries(request):
    rows, next_cursor, state, channel, channels, signature = _deliveries(request)
    context = {
        "section": "notifications",
        "rows": rows,
        "state": state,
        "channel": channel,
        "channels": channels,
        "states": DeliveryState.choices,
        "signature": signature,
        "paged": bool(request.GET.get("after")),
        "next_query": query_with(request, after=next_cursor) if next_cursor else "",
        "first_query": query_with(request, after=None),
        "refresh_query": query_with(request, refresh="1", v=signature),
    }
    if poll := live_poll(
        request, "refresh", signature, "console/deliveries.html#delivery-log", context
    ):
        return poll
    return render(request, "console/deliveries.html", context)


_delivery_for = _of_tenant(NotificationDelivery, "delivery")


@decision(
    _delivery_for,
    Role.ADMIN,
    back=lambda _: reverse("console:deliveries"),
    refused="Not sent again",
)
def delivery_retry_view(request, delivery):
    try:
        delivery_retry(delivery, actor=request.scope.actor)
    except DomainError as exc:
        messages.error(request, f"Not sent again: {exc.detail}")
    else:
        _wake()
        messages.success(request, "Sent again: it is due now, with a fresh set of attempts.")
    return _see_other(reverse("console:deliveries"))
