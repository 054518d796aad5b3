"""Error handlers: problem+json under /api/ (and for a 400 anywhere), plain pages elsewhere
for 403/404/500; DB trouble is 503."""

import logging
import sys

from django.core.exceptions import DisallowedHost
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import HttpResponseNotFound, HttpResponseServerError
from django.template.loader import render_to_string
from django.views import defaults

from core.problems import internal_error, problem_json, unavailable

logger = logging.getLogger(__name__)


def _scope(request):
    """The operator's scope for the navigation, when it can be had cheaply and safely."""
    from core.access import console_viewer

    scope = getattr(request, "scope", None)
    user = getattr(request, "user", None)
    if scope is None and user is not None and user.is_authenticated:
        scope = console_viewer(user, request.session)
    return scope


def not_found(request, exception=None):
    """A styled page with the navigation, in words; problem+json under /api/."""
    if request.path.startswith("/api/"):
        return problem_json("not-found", "Not found", 404, "No such object or endpoint.")
    try:
        body = render_to_string("404.html", {"scope": _scope(request)}, request=request)
    except DatabaseError:
        body = "<h1>Not found</h1>"
    return HttpResponseNotFound(body)


def server_error(request):
    exc = sys.exc_info()[1]
    if isinstance(exc, OperationalError | InterfaceError):
        return problem_json(**unavailable())
    details = internal_error(exc)
    if request.path.startswith("/api/"):
        return problem_json(**details)
    try:
        # No database work here: the page must render whatever broke.
        body = render_to_string(
            "500.html", {"scope": None, "error_id": details["error_id"], "user": None}
        )
    except Exception:
        logger.exception("the 500 page itself failed")
        body = f"<h1>Something went wrong</h1><p>Error id {details['error_id']}.</p>"
    return HttpResponseServerError(body)


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
