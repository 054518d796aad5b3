"""What the sync and async clients share: the retry rule, problem parsing, outcomes."""

from __future__ import annotations

import contextvars
import email.utils
import time
from typing import Any

import httpx

from .errors import (
    Blocked,
    Conflict,
    Failed,
    NeedsHuman,
    Pending,
    Unavailable,
    api_error,
)

API_PREFIX = "/api/v1"
IN_PROGRESS = frozenset({"queued", "dispatching", "unknown"})
WAITING = IN_PROGRESS | {"awaiting_approval"}
SETTLED = frozenset({"succeeded", "failed", "blocked", "needs_human"})
MAX_WAIT_PER_REQUEST = 30.0  # the server holds ?wait= for at most 30 s

# Set by `with run:` / `async with run:`; read by `guard` when no run is given.
current_run_var: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "takeover_current_run", default=None
)


class Default:
    """The type of DEFAULT: "not given" where None means something (tools_called)."""

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT = Default()


def current_run():
    """The run of the innermost `with run:` block in this context, or None."""
    return current_run_var.get()


def retry_after(response: httpx.Response) -> float | None:
    """Retry-After as seconds (delta-seconds or an HTTP date), or None."""
    value = response.headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def is_safe_to_retry(exc: httpx.TransportError, method: str) -> bool:
    """Connection failures *before the request was sent* are safe for any method: the
    server never saw it. Anything later (a read timeout, a reset) is only safe for a GET."""
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return True
    return method == "GET"


class RetryClock:
    """The time budget of one call: 503 + Retry-After and safe transport failures are
    retried until it runs out, then `Unavailable`."""

    def __init__(self, budget: float) -> None:
        self.deadline = time.monotonic() + budget
        self.backoff = 0.5

    def next_delay(self, hint: float | None) -> float | None:
        """Seconds to sleep before the next try, or None when the budget is spent."""
        remaining = self.deadline - time.monotonic()
        if hint is not None:
            # The server said when; a retry sooner is pointless, later is out of budget.
            return hint if hint <= remaining else None
        delay, self.backoff = min(self.backoff, remaining), min(self.backoff * 2, 5.0)
        return delay if delay > 0.05 else None


def wait_pause(
    state: str | None, before: str | None, asked: float, hold: float, response, backoff: float
) -> float:
    """Seconds to pause before the next `?wait=` of an action still in progress.

    A wait the server refused to hold (over its cap of concurrent waits) is answered at
    once with `Retry-After`: honour it, news or not. An early answer without news and
    without the header (a proxy, a restart) backs off instead of spinning."""
    if state not in IN_PROGRESS:
        return 0.0
    if (hint := retry_after(response)) is not None:
        return hint
    if state == before and time.monotonic() - asked < hold / 2:
        return backoff
    return 0.0


def parse(response: httpx.Response) -> Any:
    """The body of a 2xx answer; an `ApiError` subclass for a problem answer."""
    if response.status_code == 204:
        return None
    if response.is_success:
        return response.json()
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {"title": response.reason_phrase, "detail": response.text[:300]}
    raise api_error(response.status_code, body)


def unavailable(method: str, path: str, last: str, hint: float | None) -> Unavailable:
    return Unavailable(f"{method} {path}: Takeover unavailable ({last})", retry_after=hint)


def check_settled(action: dict[str, Any]) -> None:
    """Raise the typed error of a settled action that did not succeed."""
    state = action.get("state")
    label = f"{action.get('tool')} on {action.get('target')!r} (action {action.get('id')})"
    if state == "blocked":
        raise Blocked(f"{label} is blocked: {action.get('block_reason')}", action)
    if state == "failed":
        reason = action.get("failure_reason")
        cls = Conflict if reason == "version_conflict" else Failed
        raise cls(f"{label} failed: {reason}", action)
    if state == "needs_human":
        raise NeedsHuman(
            f"{label} needs a person: its outcome could not be proven "
            "(see the diff, and the console)",
            action,
        )


def pending(action: dict[str, Any], timeout: float) -> Pending:
    return Pending(
        f"action {action.get('id')} is still {action.get('state')} after {timeout:g} s", action
    )


def tools_called(proposed: list[tuple[str, str | None]]) -> list[str]:
    """`tools_called` for finish: every tool proposed through this run, except those known
    not to have been called (blocked, or still waiting for an approval: if approved later,
    the gateway records the call itself). Conservative: a proposal whose answer was lost
    counts as a call."""
    return sorted(
        {tool for tool, state in proposed if state not in {"blocked", "awaiting_approval"}}
    )
