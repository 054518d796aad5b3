"""Every API error as RFC 9457 problem+json (docs/design.md, "The API's conventions"): a
domain refusal with its slug and words, DRF's own refusals, and the 503/500 rules of
`core/problems.py`."""

from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response

from core.errors import DomainError
from core.problems import CONTENT_TYPE, internal_error, problem_body, unavailable


def problem(slug, title, status, detail, headers=None, **extra) -> Response:
    return Response(
        problem_body(slug, title, status, detail, **extra),
        status=status,
        content_type=CONTENT_TYPE,
        headers=headers,
    )


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
