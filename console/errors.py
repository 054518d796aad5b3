"""Error handlers: problem+json under /api/ (and for a 400 anywhere), plain pages elsewhere
for 403/404/500; DB trouble is 503."""

import sys

from django.core.exceptions import DisallowedHost
from django.db import InterfaceError, OperationalError
from django.http import HttpResponseNotFound, HttpResponseServerError
from django.views import defaults

from core.api.problems import internal_error, problem_json, unavailable


def not_found(request, exception=None):
    if request.path.startswith("/api/"):
        return problem_json("not-found", "Not found", 404, "No such object or endpoint.")
    return HttpResponseNotFound("<h1>Not found</h1>")


def server_error(request):
    exc = sys.exc_info()[1]
    if isinstance(exc, OperationalError | InterfaceError):
        return problem_json(**unavailable())
    details = internal_error(exc)
    if request.path.startswith("/api/"):
        return problem_json(**details)
    return HttpResponseServerError(
        f"<h1>Something went wrong</h1><p>Error id {details['error_id']}.</p>"
    )


def bad_request(request, exception=None):
    """Django's 400s (a Host header not in ALLOWED_HOSTS, a malformed request): problem+json
    on every path, since the client may not even be a browser."""
    if isinstance(exception, DisallowedHost):
        detail = "The Host header names a host this server does not answer for."
        errors = {"Host": ["Not in ALLOWED_HOSTS."]}
    else:
        detail, errors = "The request could not be understood.", None
    return problem_json("validation-error", "Bad request", 400, detail, errors=errors)


def permission_denied(request, exception=None):
    if request.path.startswith("/api/"):
        return problem_json(
            "permission-denied", "Permission denied", 403, str(exception or "") or "Forbidden."
        )
    return defaults.permission_denied(request, exception)
