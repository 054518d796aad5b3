"""Domain errors raised by services; the API turns them into problem+json, the console into
a message (or, for PermissionDenied, its 403 page)."""

from django.core import exceptions as django_exceptions


class DomainError(Exception):
    slug = "state-conflict"
    status = 409
    title = "Conflict"

    def __init__(self, detail: str, **extra):
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class StateConflict(DomainError):
    pass


class IllegalTransition(StateConflict):
    pass


class StaleRead(StateConflict):
    """A decision based on a read of the authoritative state that is too old, or not the
    latest one. Answered like any state conflict (409 `state-conflict`)."""


class IdempotencyConflict(DomainError):
    slug = "idempotency-conflict"
    status = 422
    title = "Idempotency key reused for a different intent"


class RunNotRunning(DomainError):
    slug = "run-not-running"
    status = 409
    title = "Run is not running"


class ReplayRefused(DomainError):
    slug = "replay-refused"
    status = 409
    title = "Replay refused"


class InputGone(DomainError):
    slug = "input-gone"
    status = 410
    title = "Input file no longer stored"


class ValidationFailed(DomainError):
    slug = "validation-error"
    status = 400
    title = "Invalid request"

    def __init__(self, detail: str, errors: dict | None = None):
        super().__init__(detail, errors=errors or {})


class PermissionDenied(DomainError, django_exceptions.PermissionDenied):
    """A role the actor lacks: a 403 `permission-denied` on the API, the 403 page in the
    console (it is also Django's PermissionDenied)."""

    slug = "permission-denied"
    status = 403
    title = "Permission denied"


def reason_required(reason: str, field: str = "reason") -> str:
    """A decision that needs a person's words: the reason, stripped, or a 400 naming the
    field."""
    reason = (reason or "").strip()
    if not reason:
        raise ValidationFailed("A reason is required.", {field: ["Say why."]})
    return reason
