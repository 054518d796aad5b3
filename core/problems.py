"""RFC 9457 problem+json, and the 503/500 rules (docs/design.md, "The API's conventions"):
the bodies every door answers with when it cannot answer otherwise (the middleware's 503
and 500, handler404/500, /readyz). The API's own exception handler is `api/problems.py`."""

import logging
import uuid

from django.http import JsonResponse

logger = logging.getLogger("takeover.errors")

CONTENT_TYPE = "application/problem+json"
RETRY_AFTER_SECONDS = "2"


def problem_body(slug: str, title: str, status: int, detail: str, **extra) -> dict:
    body = {"type": f"/problems/{slug}", "title": title, "status": status, "detail": detail}
    body.update({k: v for k, v in extra.items() if v is not None})
    return _printable(body)


def _printable(value):
    """Messages may echo the client's input ("\\ud800" is not a valid choice): a lone
    surrogate cannot be encoded as UTF-8, so it is written out as its escape, and the 400
    stays a 400 instead of failing to render."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_printable(k): _printable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_printable(v) for v in value]
    return value


def problem_json(slug, title, status, detail, headers=None, **extra) -> JsonResponse:
    """The same, outside DRF (middleware, handler404/500)."""
    response = JsonResponse(
        problem_body(slug, title, status, detail, **extra), status=status, content_type=CONTENT_TYPE
    )
    for name, value in (headers or {}).items():
        response[name] = value
    return response


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
