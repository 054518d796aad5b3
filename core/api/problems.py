"""RFC 9457 problem+json for every API error, and the 503/500 rules (docs/design.md, "The
API's conventions")."""

import logging
import uuid

from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404, JsonResponse
from rest_framework import exceptions
from rest_framework.response import Response

from core.errors import DomainError

logger = logging.getLogger("takeover.errors")

CONTENT_TYPE = "application/problem+json"
RETRY_AFTER_SECONDS = "2"


def problem_body(slug: str, title: str, status: int, detail: str, **extra) -> dict:
    body = {"type": f"/problems/{slug}", "title": title, "status": status, "detail": detail}
    body.update({k: v for k, v in extra.items() if v is not None})
    return _printable(body)


def _printable(value):
    """Messages may echo the client's input ("\ud800" is not a valid choice): a lone
    surrogate cannot be encoded as UTF-8, so it is written out as its escape, and the 400
    stays a 400 instead of failing to render."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_printable(k): _printable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_printable(v) for v in value]
    return value


def problem(slug, title, status, detail, headers=None, **extra) -> Response:
    return Response(
        problem_body(slug, title, status, detail, **extra),
        status=status,
        content_type=CONTENT_TYPE,
        headers=headers,
    )


def problem_json(slug, title, status, detail, headers=None, **extra) -> JsonResponse:
    """The same, outside DRF (middleware, handler404/500)."""
    response = JsonResponse(
        problem_body(slug, title, status, detail, **extra), status=status, content_type=CONTENT_TYPE
    )
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _field_errors(data) -> dict:
    if isinstance(data, dict):
        return {k: _flatten(v) for k, v in data.items()}
    return {"non_field_errors": _flatten(data)}


def _flatten(value) -> list[str]:
    if isinstance(value, list):
        out = []
        for item in value:
            out.extend(_flatten(item))
        return out
    if isinstance(value, dict):
        return [f"{k}: {m}" for k, v in value.items() for m in _flatten(v)]
    return [str(value)]


def unavailable(detail="The database is temporarily unavailable; retry shortly."):
    return dict(
        slug="temporarily-unavailable",
        title="Temporarily unavailable",
        status=503,
        detail=detail,
        headers={"Retry-After": RETRY_AFTER_SECONDS},
    )


def internal_error(exc) -> dict:
    error_id = uuid.uuid4().hex
    logger.error("error_id=%s unhandled %s", error_id, type(exc).__name__, exc_info=exc)
    return dict(
        slug="internal-error",
        title="Internal error",
        status=500,
        detail=f"Something went wrong on our side. Quote error id {error_id}.",
        error_id=error_id,
    )


def exception_handler(exc, context):
    if isinstance(exc, DomainError):
        return problem(exc.slug, exc.title, exc.status, exc.detail, **exc.extra)
    if isinstance(exc, exceptions.ParseError):
        return problem(
            "validation-error",
            "Invalid request",
            400,
            "The request body could not be parsed.",
            errors={"body": [str(exc.detail)]},
        )
    if isinstance(exc, exceptions.ValidationError):
        return problem(
            "validation-error",
            "Invalid request",
            400,
            "Some fields are invalid.",
            errors=_field_errors(exc.detail),
        )
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        return problem(
            "unauthenticated",
            "Unauthenticated",
            401,
            str(exc.detail),
            headers={"WWW-Authenticate": 'Bearer realm="takeover"'},
        )
    if isinstance(exc, exceptions.PermissionDenied):
        return problem("permission-denied", "Permission denied", 403, str(exc.detail))
    if isinstance(exc, exceptions.NotFound | Http404):
        return problem("not-found", "Not found", 404, "No such object.")
    if isinstance(exc, RequestDataTooBig):
        return problem("payload-too-large", "Payload too large", 413, str(exc))
    if isinstance(exc, exceptions.UnsupportedMediaType):
        return problem("validation-error", "Unsupported media type", 415, str(exc.detail))
    if isinstance(exc, exceptions.MethodNotAllowed):
        return problem("validation-error", "Method not allowed", 405, str(exc.detail))
    if isinstance(exc, exceptions.APIException):
        return problem("validation-error", "Request refused", exc.status_code, str(exc.detail))
    if isinstance(exc, OperationalError | InterfaceError):
        return problem(**unavailable())
    if isinstance(exc, DatabaseError):
        return problem(**internal_error(exc))
    return problem(**internal_error(exc))
