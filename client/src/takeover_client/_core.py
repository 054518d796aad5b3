"""What the sync and async clients share: the retry rule, problem parsing, outcomes."""

from __future__ import annotations

import contextvars
import email.utils
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

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
from .models import ActionOut

logger = logging.getLogger("takeover_client")

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


def base_url(url: str) -> str:
    """Takeover's origin (and any path it is served under), without a trailing slash.
    A URL that already names the API is refused with the right one: the client adds
    `/api/v1` itself, and `.../api/v1/api/v1/...` would only ever answer a bare 404."""
    url = url.rstrip("/")
    path = urlsplit(url).path
    if path == API_PREFIX or path.endswith(API_PREFIX) or f"{API_PREFIX}/" in path:
        origin = url[: url.index(API_PREFIX)] or url
        raise ValueError(
            f"{url!r} already contains {API_PREFIX}: give Takeover's base URL, "
            f"{origin!r}; the client adds {API_PREFIX} itself."
        )
    return url


@dataclass(frozen=True)
class RetryEvent:
    """One retry about to happen: what failed, how long until the next try, how many tries
    so far and how long this call has been trying. Given to `on_retry`."""

    method: str
    path: str
    reason: str
    delay: float
    attempt: int
    elapsed: float


def note_retry(event: RetryEvent, on_retry: Callable[[RetryEvent], Any] | None, url: str) -> None:
    """Say that a call is being retried: a WARNING line, and the caller's callback."""
    logger.warning(
        "%s %s%s: %s; retry %d in %.1f s (trying for %.0f s so far)",
        event.method,
        url,
        event.path,
        event.reason,
        event.attempt,
        event.delay,
        event.elapsed,
    )
    if on_retry is not None:
        on_retry(event)


def input_file(value: Any) -> Any:
    """`start_run`'s `input_file` as the API call takes it: (name, bytes), or UNSET."""
    from pathlib import Path

    from ._model import UNSET

    if value is None:
        return UNSET
    if isinstance(value, str | Path):
        return (Path(value).name, Path(value).read_bytes())
    return (Path(getattr(value, "name", "input")).name, value.read())


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
        self.started = time.monotonic()
        self.deadline = self.started + budget
        self.backoff = 0.5
        self.attempt = 0

    def next_delay(self, hint: float | None) -> float | None:
        """Seconds to sleep before the next try, or None when the budget is spent."""
        remaining = self.deadline - time.monotonic()
        self.attempt += 1
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
    if not isinstance(body, dict) or "type" not in body:
        # Not Takeover's problem+json: a proxy, another server, or the wrong base URL.
        detail = f"{response.request.method} {response.request.url} answered " + (
            f"{response.status_code} {response.reason_phrase}, which is not Takeover's API "
            "(no problem+json): is the base URL the one Takeover is served at?"
        )
        body = {"title": response.reason_phrase, "detail": detail}
    raise api_error(response.status_code, body)


def unavailable(method: str, path: str, last: str, hint: float | None) -> Unavailable:
    return Unavailable(f"{method} {path}: Takeover unavailable ({last})", retry_after=hint)


def check_settled(action: ActionOut) -> None:
    """Raise the typed error of a settled action that did not succeed."""
    state = action.state
    label = f"{action.tool} on {action.target!r} (action {action.id})"
    if state == "blocked":
        raise Blocked(f"{label} is blocked: {action.block_reason}", action)
    if state == "failed":
        reason = action.failure_reason
        cls = Conflict if reason == "version_conflict" else Failed
        raise cls(f"{label} failed: {reason}", action)
    if state == "needs_human":
        raise NeedsHuman(
            f"{label} needs a person: its outcome could not be proven "
            "(see the diff, and the console)",
            action,
        )


def pending(action: ActionOut, timeout: float) -> Pending:
    return Pending(f"action {action.id} is still {action.state} after {timeout:g} s", action)


def tools_called(proposed: list[tuple[str, str | None]]) -> list[str]:
    """`tools_called` for finish: every tool proposed through this run, except those known
    not to have been called (blocked, or still waiting for an approval: if approved later,
    the gateway records the call itself). Conservative: a proposal whose answer was lost
    counts as a call."""
    return sorted(
        {tool for tool, state in proposed if state not in {"blocked", "awaiting_approval"}}
    )
