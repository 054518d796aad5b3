"""404/500 handlers: problem+json under /api/, plain pages elsewhere; DB trouble is 503."""

import sys

from django.db import InterfaceError, OperationalError
from django.http import HttpResponseNotFound, HttpResponseServerError

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
