"""Domain errors raised by services; the API turns them into problem+json, the console into
a message (or, for PermissionDenied, its 403 page)."""

from django.core import exceptions as django_exceptions


class DomainError(Exception):
    """An error a service raises on purpose: its problem type (`slug`), HTTP status and title
    are given where the class is declared, `class X(DomainError, slug=…, status=…, title=…)`."""

    slug = "state-conflict"
    status = 409
    title = "Conflict"

    def __init_subclass__(cls, *, slug=None, status=None, title=None, **kwargs):
        super().__init_subclass__(**kwargs)
        for name, value in (("slug", slug), ("status", status), ("title", title)):
            if value is not None:
                setattr(cls, name, value)

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


class IdempotencyConflict(
    DomainError,
    slug="idempotency-conflict",
    status=422,
    title="Idempotency key reused for a different intent",
):
    pass


class RunNotRunning(DomainError, slug="run-not-running", status=409, title="Run is not running"):
    pass


class ReplayRefused(DomainError, slug="replay-refused", status=409, title="Replay refused"):
    pass


class InputGone(DomainError, slug="input-gone", status=410, title="Input file no longer stored"):
    pass


class ValidationFailed(DomainError, slug="validation-error", status=400, title="Invalid request"):
    def __init__(self, detail: str, errors: dict | None = None):
        super().__init__(detail, errors=errors or {})


class PermissionDenied(
    DomainError,
    django_exceptions.PermissionDenied,
    slug="permission-denied",
    status=403,
    title="Permission denied",
):
    """A role the actor lacks: a 403 `permission-denied` on the API, the 403 page in the
    console (it is also Django's PermissionDenied)."""


def reason_required(reason: str, field: str = "reason") -> str:
    """A decision that needs a person's words: the reason, stripped, or a 400 naming the
    field."""
    reason = (reason or "").strip()
    if not reason:
        raise ValidationFailed("A reason is required.", {field: ["Say why."]})
    return reason


class Refusal:
    """What a `check_<verb>` answers when the decision may not be made: the words a person
    reads (the API's problem detail, the console's message, a bulk item's `why` are these
    same words), and the error its verb raises with them. A check answers None otherwise."""

    __slots__ = ("error", "extra", "field", "words")

    def __init__(self, words: str, error: type = StateConflict, *, field: str = "", **extra):
        self.words = words
        self.error = error
        self.field = field  # the input it is about (a 400 names it; a form shows it there)
        self.extra = extra

    def __str__(self) -> str:
        return self.words

    def __repr__(self) -> str:
        return f"Refusal({self.words!r}, {self.error.__name__})"

    def exception(self) -> DomainError:
        if issubclass(self.error, ValidationFailed):
            return ValidationFailed(self.words, {self.field: [self.extra.get("hint", self.words)]})
        return self.error(self.words, **self.extra)


def refuse(refusal: "Refusal | None") -> None:
    """The verb's side of a check: raise what the check refused, or carry on."""
    if refusal is not None:
        raise refusal.exception()


def missing_reason(reason: str, field: str = "reason") -> "Refusal | None":
    """The reason rule as a check: a decision that needs a person's words."""
    if not (reason or "").strip():
        return Refusal("A reason is required.", ValidationFailed, field=field, hint="Say why.")
    return None


def missing_role(actor, role: str) -> "Refusal | None":
    """The role rule as a check, in the words of `Actor.require`."""
    if not actor.has_role(role):
        return Refusal(f"This needs the {role} role.", PermissionDenied)
    return None
