"""What can go wrong, typed.

Two families:

- `ApiError` and its subclasses: the API refused a request (a problem+json answer). The
  problem's `type` slug decides the class, so `except IdempotencyConflict` reads like the
  protocol.
- `OutcomeError` and its subclasses: the request was fine, the *effect* did not happen (or
  cannot be proven). Raised by `Outcome.wait()`; each carries the action as the server last
  showed it.

`Unavailable` belongs to neither: Takeover (or the network in front of it) could not answer
within the time the caller allowed. Nothing is known about the effect from it alone; the
same call may be repeated later (proposals are keyed, so a repeat is safe).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .models import ActionOut, DiffOut


class TakeoverError(Exception):
    """Base class of everything this package raises on purpose."""


# --- the API said no ---------------------------------------------------------------------


class ApiError(TakeoverError):
    """A problem+json answer (RFC 9457). `problem` is its body."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.problem = problem
        self.type: str = problem.get("type", "")
        self.slug: str = self.type.rsplit("/", 1)[-1]
        self.detail: str = problem.get("detail") or problem.get("title") or f"HTTP {status}"
        self.errors: dict[str, Any] = problem.get("errors") or {}
        message = f"{status} {self.slug or 'error'}: {self.detail}"
        if fields := field_errors(self.errors):
            message += " (" + "; ".join(f"{f}: {m}" for f, m in fields) + ")"
        super().__init__(message)


def field_errors(errors: Any, prefix: str = "") -> list[tuple[str, str]]:
    """[(field, message)] from a problem's `errors`, nested fields dotted (`config.a`)."""
    if isinstance(errors, dict):
        found = []
        for name, value in errors.items():
            found += field_errors(value, f"{prefix}.{name}" if prefix else str(name))
        return found
    if isinstance(errors, list) and all(isinstance(e, str) for e in errors):
        return [(prefix or "request", " ".join(errors))]
    if isinstance(errors, list):
        return [f for i, e in enumerate(errors) for f in field_errors(e, f"{prefix}[{i}]")]
    return [(prefix or "request", str(errors))]


class ValidationError(ApiError):
    """400 `validation-error` / `idempotency-key-missing`: `errors` names the fields."""


class Unauthenticated(ApiError):
    """401: the token is missing, wrong or revoked."""


class PermissionDenied(ApiError):
    """403: the caller may not do this (wrong role, principal vs operator, other tenant)."""


class NotFound(ApiError):
    """404: no such object *for this caller* (another tenant's object is a 404 too)."""


class StateConflict(ApiError):
    """409 `state-conflict`: the object is not in a state that allows this."""


class RunNotRunning(StateConflict):
    """409 `run-not-running`: proposing on (or heartbeating) a run that has finished."""


class ReplayRefused(ApiError):
    """409 `replay-refused`: the replay rule said no (the detail says why)."""


class InputGone(ApiError):
    """410 `input-gone`: the run's input file is no longer stored."""


class PayloadTooLarge(ApiError):
    """413 `payload-too-large`."""


class IdempotencyConflict(ApiError):
    """422 `idempotency-conflict`: this key was used for a *different* intent. Nothing was
    created. The key derivation is wrong (or the world moved): do not retry with it."""


PROBLEM_CLASSES: dict[str, type[ApiError]] = {
    "validation-error": ValidationError,
    "idempotency-key-missing": ValidationError,
    "unauthenticated": Unauthenticated,
    "permission-denied": PermissionDenied,
    "not-found": NotFound,
    "state-conflict": StateConflict,
    "run-not-running": RunNotRunning,
    "replay-refused": ReplayRefused,
    "input-gone": InputGone,
    "payload-too-large": PayloadTooLarge,
    "idempotency-conflict": IdempotencyConflict,
}
STATUS_CLASSES: dict[int, type[ApiError]] = {
    400: ValidationError,
    401: Unauthenticated,
    403: PermissionDenied,
    404: NotFound,
    409: StateConflict,
    410: InputGone,
    413: PayloadTooLarge,
    422: IdempotencyConflict,
}


def api_error(status: int, problem: dict[str, Any]) -> ApiError:
    slug = str(problem.get("type", "")).rsplit("/", 1)[-1]
    cls = PROBLEM_CLASSES.get(slug) or STATUS_CLASSES.get(status) or ApiError
    return cls(status, problem)


class Unavailable(TakeoverError):
    """Takeover could not be reached, or kept answering 503, for longer than allowed.

    `retry_after` is the server's last `Retry-After` in seconds (None after a connection
    failure). Says nothing about any effect: repeat the call later."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


# --- the effect did not (provably) happen -------------------------------------------------


class OutcomeError(TakeoverError):
    """The action settled (or stayed) somewhere other than `succeeded`. `action` is the
    server's view of it; `state` its state."""

    def __init__(self, message: str, action: ActionOut) -> None:
        super().__init__(message)
        self.action = action
        self.state: str = action.state
        self.action_id: str = action.id


class Blocked(OutcomeError):
    """Never dispatched and never will be: the approval was denied, expired, revoked,
    consumed, mismatching or not found (`reason`). Ask for a new approval; do not retry the
    same key expecting a different answer."""

    @property
    def reason(self) -> str | None:
        return self.action.block_reason


class Failed(OutcomeError):
    """The tool answered and refused (`rejected`), or the request provably never left
    (`not_sent`). Nothing was applied. `reason` is the failure reason."""

    @property
    def reason(self) -> str | None:
        return self.action.failure_reason


class Conflict(Failed):
    """A `Failed` whose reason is `version_conflict`: the tool answered 409 because the
    record moved past `expected_version`. Re-read the record, decide again, and propose the
    new decision under a new key (the old key stays bound to the old intent)."""


class NeedsHuman(OutcomeError):
    """The outcome could not be proven either way (the authoritative state differs, moved
    on, or the target is missing). A person resolves it in the console; `diff` is the last
    reconciliation's field-by-field difference. Never re-propose it under a new key: it may
    have been applied."""

    @property
    def diff(self) -> list[DiffOut]:
        recs = self.action.reconciliations or []
        return list(recs[-1].diff or []) if recs else []


class Pending(OutcomeError, TimeoutError):
    """`wait()` ran out of time while the action was still `queued`, `dispatching`,
    `unknown` or `awaiting_approval`. Not a failure: wait again later (same outcome)."""
