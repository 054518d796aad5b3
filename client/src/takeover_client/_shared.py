"""The half of `Takeover`/`Run`/`Outcome` that does no I/O, which `AsyncTakeover`/`AsyncRun`/
`AsyncOutcome` share: the sync and async classes only send, sleep and heartbeat their own way.
The retry loop and the wait loop are written here once, as steps the caller drives."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from . import _core
from ._model import UNSET
from .errors import RunNotRunning, TakeoverError
from .keys import idempotency_key
from .models import ActionOut, RunDetailOut

logger = logging.getLogger("takeover_client")

DEFAULT_TIMEOUT = 10.0
DEFAULT_RETRY_FOR = 30.0
DEFAULT_HEARTBEAT_EVERY = 60.0


class ClientBase:
    """The connection's settings; `_http` is an `httpx.Client` or an `httpx.AsyncClient`."""

    _http_class: type
    _api_class: type

    def __init__(
        self,
        url: str,
        token: str,
        *,
        tenant: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry_for: float = DEFAULT_RETRY_FOR,
        heartbeat_every: float = DEFAULT_HEARTBEAT_EVERY,
        transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None,
        on_retry: Callable[[_core.RetryEvent], Any] | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        if tenant:
            headers["X-Takeover-Tenant"] = tenant
        self.url = _core.base_url(url)
        self.retry_for = retry_for
        self.heartbeat_every = heartbeat_every
        self.on_retry = on_retry
        self.api = self._api_class(self)
        self._http = self._http_class(
            base_url=self.url + _core.API_PREFIX,
            headers=headers,
            timeout=timeout,
            transport=transport,
            trust_env=False,
        )


class Call:
    """One API call's tries: the caller sends `kwargs`, then says what happened (`failed`
    or `final`) and sleeps `pause()` before the next try. Retries only what is safe (see
    `Takeover`); `Unavailable` when the budget runs out."""

    def __init__(self, client: ClientBase, method: str, path: str, options: dict) -> None:
        """`options`: `request`'s keywords (retry_for, timeout, with_response) and httpx's."""
        kwargs = dict(options)
        retry_for = kwargs.pop("retry_for", None)
        self.clock = _core.RetryClock(client.retry_for if retry_for is None else retry_for)
        self.with_response = kwargs.pop("with_response", False)
        if kwargs.get("timeout") is None:
            kwargs.pop("timeout", None)
        self.client, self.method, self.path, self.kwargs = client, method, path, kwargs
        self.last, self.hint = "", None

    def failed(self, exc: httpx.TransportError) -> None:
        """A try that raised: retried only if the request surely was not sent, or a GET."""
        if not _core.is_safe_to_retry(exc, self.method):
            raise _core.unavailable(self.method, self.path, type(exc).__name__, None) from exc
        self.last, self.hint = type(exc).__name__, None

    def final(self, response: httpx.Response) -> bool:
        """Whether `response` is the answer: anything but a 503 with Retry-After."""
        if response.status_code != 503:
            return True
        self.hint = _core.retry_after(response)
        if self.hint is None:  # a 503 without Retry-After is not an invitation
            return True
        self.last = f"503, Retry-After {self.hint:g}"
        return False

    def answer(self, response: httpx.Response) -> Any:
        data = _core.parse(response)
        return (data, response) if self.with_response else data

    def pause(self) -> float:
        """Seconds until the next try, said to the log and `on_retry`; or `Unavailable`."""
        delay = self.clock.next_delay(self.hint)
        if delay is None:
            raise _core.unavailable(self.method, self.path, self.last, self.hint)
        clock = self.clock
        elapsed = time.monotonic() - clock.started
        event = _core.RetryEvent(self.method, self.path, self.last, delay, clock.attempt, elapsed)
        _core.note_retry(event, self.client.on_retry, self.client.url + _core.API_PREFIX)
        return delay


def start_arguments(trigger, config, input_file, session_id, event_id) -> dict[str, Any]:
    """`runs_start`'s arguments for `start_run`: `event_id` kept in the config."""
    config = dict(config or {})
    if event_id is not None:
        config["event_id"] = event_id
    return {
        "trigger": trigger,
        "config": config,
        "session_id": session_id or UNSET,
        "input_file": _core.input_file(input_file),
    }


class RunBase:
    """A run as the server recorded it (`data`) and what this object proposed through it."""

    def __init__(self, client: Any, data: RunDetailOut) -> None:
        self.client = client
        self.data = data
        self._proposals: list[Any] = []
        self._extra_tools: set[str] = set()
        self._finished = False
        self._beat: Any = None
        self._tokens: list[Any] = []
        self._finish_on_exit: list[bool] = []

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id} {self.status}>"

    @property
    def id(self) -> str:
        return self.data.id

    @property
    def status(self) -> str:
        return self.data.status

    @property
    def config(self) -> dict:
        return self.data.config or {}

    @property
    def event_id(self) -> str | None:
        """The trigger's id, as given to `start_run(event_id=...)` (kept in the config, so a
        claimed replay has it too)."""
        return self.config.get("event_id")

    @property
    def replay_of(self) -> str | None:
        return self.data.replay_of

    def key(self, tool: str, target: str) -> str:
        """The idempotency key of `tool` on `target` for this run's trigger."""
        if not self.event_id:
            raise ValueError("this run has no event_id: start it with start_run(event_id=...)")
        return idempotency_key(self.event_id, tool, target)

    def _proposal(
        self,
        outcome: Any,
        tool,
        target,
        desired_state,
        key,
        expected_version,
        approval_id,
        reason,
        wait: float = 0,
    ) -> dict:
        """Count `outcome` as proposed (a call whose answer is lost still counts) and give
        `actions_propose`'s arguments; the caller forgets it if the proposal is refused.
        `wait`: how long the server may hold the answer for the outcome, kept within 30 s
        and a few seconds short of the client's read timeout (what is left, `wait()` waits)."""
        arguments = {
            "idempotency_key": key or self.key(tool, target),
            "tool": tool,
            "target": target,
            "desired_state": desired_state,
            "expected_version": expected_version,
            "approval_id": UNSET if approval_id is None else approval_id,
            "reason": UNSET if reason is None else reason,
        }
        read_timeout = self.client._http.timeout.read
        hold = min(wait, _core.MAX_WAIT_PER_REQUEST, (read_timeout or 60.0) - 2.0)
        if hold >= 0.1:
            arguments["wait"] = round(hold, 1)
        self._proposals.append(outcome)
        return arguments

    def record_tool_call(self, tool: str) -> None:
        """Report a tool this run called outside Takeover (sent in `tools_called`)."""
        self._extra_tools.add(tool)

    @property
    def tools_called(self) -> list[str]:
        seen = [(o.tool, o.state) for o in self._proposals]
        return sorted(set(_core.tools_called(seen)) | self._extra_tools)

    def _finish_arguments(self, status, error_message, tools_called) -> dict[str, Any]:
        if isinstance(tools_called, _core.Default):
            tools_called = self.tools_called
        return {"status": status, "error_message": error_message, "tools_called": tools_called}

    def attach(self):
        """`with run.attach():` the current run, with heartbeats, left running at the end."""
        self._finish_on_exit.append(False)
        return self

    def _enter(self) -> None:
        if len(self._finish_on_exit) == len(self._tokens):
            self._finish_on_exit.append(True)
        self._tokens.append(_core.current_run_var.set(self))

    def _leave(self) -> bool:
        """Leave the block; whether it is the one that finishes the run."""
        _core.current_run_var.reset(self._tokens.pop())
        return self._finish_on_exit.pop() and not self._finished

    def _not_finished(self, error: TakeoverError, exc: BaseException | None, status: str):
        """Finishing at the end of the block failed with `error`."""
        if isinstance(error, RunNotRunning):
            return  # finished elsewhere (reaped, or by an operator): nothing to add
        if exc is None:
            raise error
        logger.exception("could not finish run %s as %s", self.id, status)


def exit_status(exc: BaseException | None, cancelled: tuple[type, ...], note: str):
    """The status and message a run finishes with at the end of its block."""
    if exc is None:
        return "success", ""
    if isinstance(exc, cancelled):
        return "cancelled", note
    return "error", f"{type(exc).__name__}: {exc}"[:10000]


class OutcomeBase:
    """A proposed action: `action` (an `ActionOut`) is the latest view of it, `action_id`
    its id; `replayed`/`content_changed` come from the proposal's answer."""

    def __init__(self, client: Any, action: ActionOut | None, *, tool: str = "") -> None:
        self.client = client
        self.action: ActionOut = action  # type: ignore[assignment] -- None until answered
        self._tool = tool
        self.replayed = bool(action and action.replayed)
        self.content_changed = bool(action and action.content_changed)

    def __repr__(self) -> str:
        flag = " replayed" if self.replayed else ""
        return f"<{type(self).__name__} {self.action_id} {self.state}{flag}>"

    def _update(self, action: ActionOut, *, proposal: bool = True) -> None:
        self.action = action
        if proposal:
            self.replayed = action.replayed
            self.content_changed = action.content_changed

    @property
    def action_id(self) -> str:
        return self.action.id

    id = action_id  # the same, by the action's own name

    @property
    def state(self) -> str | None:
        return self.action.state if self.action is not None else None

    @property
    def tool(self) -> str:
        return self.action.tool if self.action is not None else self._tool

    @property
    def settled(self) -> bool:
        return self.state in _core.SETTLED

    def _waiting(self, timeout: float, poll_approval: float) -> Iterator[Any]:
        """`wait`'s loop as steps: it yields a number (sleep that long) or the arguments of
        a `client.request` (send back its answer), and ends when the action settled."""
        deadline = time.monotonic() + timeout
        backoff = 0.1
        while not self.settled:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _core.pending(self.action, timeout)
            if self.state == "awaiting_approval":
                yield min(poll_approval, remaining)
                data = yield {"method": "GET", "path": f"/actions/{self.action_id}"}
                self._update(ActionOut.from_dict(data), proposal=False)
                continue
            hold = round(min(_core.MAX_WAIT_PER_REQUEST, remaining), 1)
            asked = time.monotonic()
            before = self.state
            data, response = yield {
                "method": "GET",
                "path": f"/actions/{self.action_id}",
                "params": {"wait": f"{hold:g}"},
                "timeout": hold + 15,
                "retry_for": max(remaining, 0.0),
                "with_response": True,
            }
            self._update(ActionOut.from_dict(data), proposal=False)
            pause = _core.wait_pause(self.state, before, asked, hold, response, backoff)
            if pause:
                yield min(pause, max(deadline - time.monotonic(), 0))
                backoff = min(backoff * 2, 2.0)
            else:
                backoff = 0.1
        _core.check_settled(self.action)
