import io
import logging
import re
import time

from django.conf import settings
from django.db import InterfaceError, OperationalError

from . import metrics, otel
from .audit import client_request_id_var, new_request_id
from .logs import log_context
from .problems import internal_error, problem_json, unavailable

access_log = logging.getLogger("takeover.access")
TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$")


def trace_id_of(traceparent: str) -> str:
    """The trace id of a valid W3C `traceparent` header, else ""."""
    match = TRACEPARENT.match(traceparent.strip().lower())
    if not match or not int(match.group(1), 16) or traceparent.startswith("ff"):
        return ""
    return match.group(1)


def _who(request) -> tuple[str, str]:
    """(tenant, actor) of an answered request, as far as it was established."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return "", ""
    tenant = getattr(user, "tenant", None)
    if tenant is not None:  # an API Caller
        return tenant.slug, f"{user.kind}:{user.name}"
    session = getattr(request, "session", None)
    return (session.get("tenant", "") if session else ""), f"operator:{user.get_username()}"


class RequestIdMiddleware:
    """Tag the request (and every audit event it writes) with an id; echo it back. Log one
    access line per request with it, and count the request for /metrics.

    Also refuses oversized API bodies before anything reads them (413)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        # Our own id, always: a client's X-Request-ID is not unique and not ours to trust.
        # It is kept beside ours (audit `client_request_id`) when it is printable and short.
        incoming = request.headers.get("X-Request-ID", "")
        client_id = incoming if 0 < len(incoming) <= 64 and incoming.isprintable() else ""
        # With tracing on, the request id is the trace id (core/otel.py); without, the
        # caller's W3C trace id still carries on to the tool's traceparent. A traceparent's
        # trace id is format-checked (32 hex digits, not all zero) and is the point of trace
        # propagation, so it is kept; a free-form X-Request-ID never becomes our id.
        request_id = (
            otel.current_trace_id()
            or trace_id_of(request.headers.get("traceparent", ""))
            or new_request_id()
        )
        request.request_id = request_id
        request.client_request_id = client_id
        started = time.monotonic()
        client_token = client_request_id_var.set(client_id)
        try:
            # Authentication adds the tenant and actor to this context (api/auth.py).
            with log_context(request_id=request_id, tenant="", actor="", run_id="", action_id=""):
                if bad_query := self._nul_in_query(request):
                    response = bad_query
                elif request.path.startswith("/api/") and (too_big := self._too_big(request)):
                    response = too_big
                else:
                    response = self.get_response(request)
                self._log(request, response, time.monotonic() - started)
        finally:
            client_request_id_var.reset(client_token)
        response["X-Request-ID"] = request_id
        return response

    def _log(self, request, response, seconds: float) -> None:
        match = getattr(request, "resolver_match", None)
        route = ("/" + match.route) if match is not None else "unmatched"
        metrics.record_request(request.method, route, response.status_code, seconds)
        tenant, actor = _who(request)
        with log_context(tenant=tenant, actor=actor):
            access_log.info(
                "%s %s %s %.1f ms",
                request.method,
                request.path,
                response.status_code,
                seconds * 1000,
                extra={
                    "method": request.method,
                    "path": request.path,
                    "status": response.status_code,
                    "duration_ms": round(seconds * 1000, 1),
                },
            )

    def _nul_in_query(self, request):
        """A NUL in a query parameter would reach PostgreSQL as a filter (which refuses it:
        a 500); it is a 400 naming the parameter instead, on the API and the console."""
        for name, values in request.GET.lists():
            if "\x00" in name or any("\x00" in v for v in values):
                shown = name.replace("\x00", "\\u0000") or "query"
                return problem_json(
                    "validation-error",
                    "Invalid request",
                    400,
                    "A query parameter contains a NUL character.",
                    errors={shown: ["Must not contain a NUL character (%00)."]},
                )
        return None

    def _too_big(self, request):
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        multipart = request.content_type == "multipart/form-data"
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE + (
            settings.MAX_INPUT_FILE_BYTES if multipart else 0
        )
        if length > limit:
            return problem_json(
                "payload-too-large",
                "Payload too large",
                413,
                f"The request body is {length} bytes; the limit is {limit}.",
            )
        return None


class DatabaseUnavailableMiddleware:
    """Transient database trouble outside DRF views: 503 with Retry-After, never a 500."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if isinstance(exception, OperationalError | InterfaceError):
            return problem_json(**unavailable())
        if request.path.startswith("/api/"):
            return problem_json(**internal_error(exception))
        return None


class ChunkedBodyMiddleware:
    """A chunked request body is read like any other, never taken as empty (docs/design.md,
    "The API's conventions").

    Django sizes the body by Content-Length, which a chunked request does not send, so it
    would read zero bytes: a grant's ttl_seconds silently became the default. When the
    server has de-chunked the body and says where it ends (`wsgi.input_terminated`, which
    gunicorn sets), we read it, within the same limits as any body, and give Django a
    Content-Length. A server that cannot say where it ends gets a 411 problem.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        coding = request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
        if "chunked" in coding and not request.META.get("CONTENT_LENGTH"):
            if not request.META.get("wsgi.input_terminated"):
                return problem_json(
                    "validation-error",
                    "Length required",
                    411,
                    "This server cannot read a chunked body here; send Content-Length.",
                )
            multipart = request.content_type == "multipart/form-data"
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE + (
                settings.MAX_INPUT_FILE_BYTES if multipart else 0
            )
            body = request.META["wsgi.input"].read(limit + 1)
            if len(body) > limit:
                return problem_json(
                    "payload-too-large",
                    "Payload too large",
                    413,
                    f"The request body is over the limit of {limit} bytes.",
                )
            request._stream = io.BytesIO(body)
            request.META["CONTENT_LENGTH"] = str(len(body))
        return self.get_response(request)
