import io

from django.conf import settings
from django.db import InterfaceError, OperationalError

from .api.problems import internal_error, problem_json, unavailable
from .audit import client_request_id_var, new_request_id, request_id_var


class RequestIdMiddleware:
    """Tag the request (and every audit event it writes) with an id; echo it back.

    Also refuses oversized API bodies before anything reads them (413)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        # Our own id, always: a client's X-Request-ID is not unique and not ours to trust.
        # It is kept beside ours (audit `client_request_id`) when it is printable and short.
        incoming = request.headers.get("X-Request-ID", "")
        client_id = incoming if 0 < len(incoming) <= 64 and incoming.isprintable() else ""
        request_id = new_request_id()
        request.request_id = request_id
        request.client_request_id = client_id
        token = request_id_var.set(request_id)
        client_token = client_request_id_var.set(client_id)
        try:
            if bad_query := self._nul_in_query(request):
                response = bad_query
            elif request.path.startswith("/api/") and (too_big := self._too_big(request)):
                response = too_big
            else:
                response = self.get_response(request)
        finally:
            request_id_var.reset(token)
            client_request_id_var.reset(client_token)
        response["X-Request-ID"] = request_id
        return response

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
    """A chunked request body is read like any other (SPEC §7), never taken as empty.

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
