"""Each operator sees times in the time zone they chose: a middleware activates it
for the request; Django's date filters and form fields then convert on their own.

The choice lives in `core.OperatorPreference` and is copied into the session when the
operator signs in (and when they change it), so a page costs no query for it.
"""

import zoneinfo

from django.utils import timezone

SESSION_KEY = "time_zone"


class OperatorTimeZoneMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        session = getattr(request, "session", None)
        name = session.get(SESSION_KEY) if session is not None else None
        try:
            timezone.activate(zoneinfo.ZoneInfo(name or "UTC"))
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            timezone.deactivate()
        try:
            return self.get_response(request)
        finally:
            timezone.deactivate()


def zone_choices() -> list[tuple[str, str]]:
    names = sorted(zoneinfo.available_timezones() - {"localtime", "Factory"})
    return [("UTC", "UTC")] + [(n, n) for n in names if n != "UTC"]


def remember_on_sign_in(request, user) -> None:
    from core.models import OperatorPreference

    name = OperatorPreference.objects.filter(user=user).values_list("time_zone", flat=True).first()
    request.session[SESSION_KEY] = name or "UTC"
