"""Domain errors raised by services; the API turns them into problem+json."""


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
