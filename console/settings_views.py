"""The tenant's settings, on one page (admin): four-eyes force replay, the approval SLA,
and when unknown actions and expiring requests are announced."""

from django.contrib import messages
from django.shortcuts import render
from django.urls import reverse

from core.models import Role
from core.services import tenant_settings_update

from .web import decision, go, operator_required

MAX_MINUTES = 30 * 24 * 60
MINUTE_FIELDS = [
    ("approval_sla_minutes", "approval_sla_seconds"),
    ("unknown_alert_minutes", "unknown_alert_seconds"),
    ("approval_expiry_warning_minutes", "approval_expiry_warning_seconds"),
]


@operator_required(Role.ADMIN)
def settings_page(request):
    tenant = request.scope.tenant
    minutes = {field: getattr(tenant, name) // 60 for field, name in MINUTE_FIELDS}
    return render(request, "console/settings.html", {"section": "settings", **minutes})


def _minutes(raw: str) -> int | None:
    raw = (raw or "").strip() or "0"
    # isascii: "²" is a digit to str.isdigit() but not to int(); and int() refuses more than
    # 4,300 digits. Either would be a 500.
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 6) or int(raw) > MAX_MINUTES:
        return None
    return int(raw)


@decision(None, Role.ADMIN, back=lambda _: reverse("console:tenant_settings"), refused="Not saved")
def settings_save(request):
    tenant = request.scope.tenant
    values = {}
    for field, name in MINUTE_FIELDS:
        if field not in request.POST:
            continue  # a form that does not show it leaves it as it is
        minutes = _minutes(request.POST.get(field))
        if minutes is None:
            messages.error(request, "Not saved: give whole numbers of minutes (0: off).")
            return go(request, reverse("console:tenant_settings"))
        values[name] = minutes * 60
    if "four_eyes_form" in request.POST or "approval_sla_minutes" in request.POST:
        values["four_eyes_force_replay"] = request.POST.get("four_eyes_force_replay") == "on"
    tenant_settings_update(tenant, actor=request.actor, **values)
    tenant.refresh_from_db()
    said = [
        "Four-eyes force replay is on: a second admin must confirm each force replay."
        if tenant.four_eyes_force_replay
        else "Four-eyes force replay is off: an admin's force replay happens at once.",
        f"Approval SLA: {tenant.approval_sla_seconds // 60} min."
        if tenant.approval_sla_seconds
        else "No approval SLA.",
        f"Unknown actions are announced after {tenant.unknown_alert_seconds // 60} min."
        if tenant.unknown_alert_seconds
        else "Unknown actions are not announced.",
        f"Expiring requests are announced {tenant.approval_expiry_warning_seconds // 60} min "
        "before they expire."
        if tenant.approval_expiry_warning_seconds
        else "Expiring requests are not announced.",
    ]
    messages.success(request, " ".join(said))
    return go(request, reverse("console:tenant_settings"))


def tenant_settings(request):
    """GET: the page; POST: save (through `decision`)."""
    if request.method == "POST":
        return settings_save(request)
    return settings_page(request)
