from django.conf import settings
from django.db import InterfaceError, OperationalError

from .api.problems import internal_error, problem_json, unavailable
from .audit import new_request_id, request_id_var


class RequestIdMiddleware:
    """Tag the request (and every audit event it writes) with an id; echo it back.

    Also refuses oversized API bodies before anything reads them (413)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        incoming = request.headers.get("X-Request-ID", "")
        request_id = (
            incoming if 0 < len(incoming) <= 64 and incoming.isprintable() else new_request_id()
        )
        request.request_id = request_id
        token = request_id_var.set(request_id)
        try:
            if request.path.startswith("/api/") and (too_big := self._too_big(request)):
                response = too_big
            else:
                response = self.get_response(request)
        finally:
            request_id_var.reset(token)
        response["X-Request-ID"] = request_id
        return response

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
