"""404/500 handlers: problem+json under /api/, plain pages elsewhere; DB trouble is 503."""

import logging
import sys

from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import HttpResponseNotFound, HttpResponseServerError
from django.template.loader import render_to_string

from core.api.problems import internal_error, problem_json, unavailable

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
