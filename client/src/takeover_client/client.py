"""The synchronous client: `Takeover`, `Run`, `Outcome`."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import httpx

from . import _core
from ._model import UNSET
from .api import Api
from .errors import ApiError, RunNotRunning, TakeoverError
from .keys import idempotency_key
from .models import ActionOut, MeOut, RunDetailOut

logger = logging.getLogger("takeover_client")

DEFAULT_TIMEOUT = 10.0
DEFAULT_RETRY_FOR = 30.0
DEFAULT_HEARTBEAT_EVERY = 60.0


class Takeover:
    """Takeover's HTTP API v1, for an agent runtime (principal token) or an operator.

        client = Takeover("http://127.0.0.1:8000", token)
        with client.start_run("webhook", {"event_id": "evt_1"}) as run:
            run.propose("update_ticket", "T-1", {"status": "open"}).wait(30)
        client.api.queue_list(state="unknown")     # every operation of the API, typed

    `url` is where Takeover is served (not `.../api/v1`: that is a ValueError saying so).
    `retry_for` is how long one call keeps retrying what is safe to retry (a 503 with
    `Retry-After`, a connection that failed before the request was sent, a GET) before
    raising `Unavailable`; each retry logs a WARNING on the `takeover_client` logger and
    calls `on_retry(RetryEvent)` when given. `tenant` names the tenant for an operator in
    several.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        tenant: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry_for: float = DEFAULT_RETRY_FOR,
        heartbeat_every: float = DEFAULT_HEARTBEAT_EVERY,
        transport: httpx.BaseTransport | None = None,
        on_retry: Callable[[_core.RetryEvent], Any] | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        if tenant:
            headers["X-Takeover-Tenant"] = tenant
        self.url = _core.base_url(url)
        self.retry_for = retry_for
        self.heartbeat_every = heartbeat_every
        self.on_retry = on_retry
        self.api = Api(self)
        self._http = httpx.Client(
            base_url=self.url + _core.API_PREFIX,
            headers=headers,
            timeout=timeout,
            transport=transport,
            trust_env=False,
        )

    # plumbing

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Takeover:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        retry_for: float | None = None,
        timeout: float | None = None,
        with_response: bool = False,
        **kwargs: Any,
    ) -> Any:
        """One API call: the parsed JSON (None for a 204), or an `ApiError`. Retries only
        what is safe (see the class docstring); `Unavailable` when the budget runs out."""
        clock = _core.RetryClock(self.retry_for if retry_for is None else retry_for)
        if timeout is not None:
            kwargs["timeout"] = timeout
        while True:
            hint = None
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                if not _core.is_safe_to_retry(exc, method):
                    raise _core.unavailable(method, path, type(exc).__name__, None) from exc
                last = type(exc).__name__
            else:
                if response.status_code != 503:
                    data = _core.parse(response)
                    return (data, response) if with_response else data
                hint = _core.retry_after(response)
                if hint is None:  # a 503 without Retry-After is not an invitation
                    return _core.parse(response)
                last = f"503, Retry-After {hint:g}"
            delay = clock.next_delay(hint)
            if delay is None:
                raise _core.unavailable(method, path, last, hint)
            elapsed = time.monotonic() - clock.started
            event = _core.RetryEvent(method, path, last, delay, clock.attempt, elapsed)
            _core.note_retry(event, self.on_retry, self.url + _core.API_PREFIX)
            time.sleep(delay)

    # the agent runtime

    def start_run(
        self,
        trigger: str,
        config: dict | None = None,
        input_file: str | Path | IO[bytes] | None = None,
        *,
        session_id: str | None = None,
        event_id: str | None = None,
    ) -> Run:
        """Record a run before it does anything. `config` is the whole input (without it
        there is no replay). `event_id`, the trigger's id, is stored as `config["event_id"]`
        so that a replay of this run derives the same idempotency keys. (A multipart start,
        with `input_file`, is not retried on a 503: the file may be a one-shot stream.)"""
        config = dict(config or {})
        if event_id is not None:
            config["event_id"] = event_id
        data = self.api.runs_start(
            trigger=trigger,
            config=config,
            session_id=session_id or UNSET,
            input_file=_core.input_file(input_file),
        )
        return Run(self, data)

    def claim(self) -> Run | None:
        """Take the oldest replayed run waiting for this principal, or None."""
        data = self.api.runs_claim()
        return Run(self, data) if data else None

    def run(self, run_id: str) -> Run:
        """A run by id, e.g. to resume an agent paused on an approval in another process."""
        return Run(self, self.api.runs_retrieve(run_id))

    def outcome(self, action_id: str) -> Outcome:
        return Outcome(self, self.api.actions_retrieve(action_id))

    def me(self) -> MeOut:
        """Who this token is: `kind` (principal or operator), `name`, `tenant`, `roles`."""
        return self.api.me()


class Run:
    """A run as the server recorded it (`data`, a `RunDetailOut`).

    As a context manager (`with run:`) it is the current run, sends heartbeats in the
    background and finishes the run: `success` when the block ends normally, `error` with
    the exception when it raises (`cancelled` for KeyboardInterrupt), with `tools_called`.
    `with run.attach():` is the same without finishing: for an agent that may pause (an
    approval it will be resumed on, maybe in another process) and finishes the run itself.
    """

    def __init__(self, client: Takeover, data: RunDetailOut) -> None:
        self.client = client
        self.data = data
        self._proposals: list[Outcome] = []
        self._extra_tools: set[str] = set()
        self._finished = False
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._tokens: list[Any] = []
        self._finish_on_exit: list[bool] = []

    def __repr__(self) -> str:
        return f"<Run {self.id} {self.status}>"

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

    def propose(
        self,
        tool: str,
        target: str,
        desired_state: dict,
        *,
        key: str | None = None,
        expected_version: int | None = None,
        approval_id: str | None = None,
        reason: str | None = None,
    ) -> Outcome:
        """Propose one side effect. `key` defaults to `self.key(tool, target)`. Answers at
        once with an `Outcome` (new, or `replayed` from the ledger); `.wait()` for the
        result. A 422 `IdempotencyConflict` means this key was used for another intent."""
        key = key or self.key(tool, target)
        outcome = Outcome(self.client, None, tool=tool)
        self._proposals.append(outcome)  # a call whose answer is lost still counts
        try:
            answer = self.client.api.actions_propose(
                self.id,
                idempotency_key=key,
                tool=tool,
                target=target,
                desired_state=desired_state,
                expected_version=expected_version,
                approval_id=approval_id if approval_id is not None else UNSET,
                reason=reason if reason is not None else UNSET,
            )
        except ApiError:
            # Refused (400, 404, 409, 422): nothing was created, so nothing was called.
            self._proposals.remove(outcome)
            raise
        outcome._update(answer)
        return outcome

    def record_tool_call(self, tool: str) -> None:
        """Report a tool this run called outside Takeover (sent in `tools_called`)."""
        self._extra_tools.add(tool)

    @property
    def tools_called(self) -> list[str]:
        seen = [(o.tool, o.state) for o in self._proposals]
        return sorted(set(_core.tools_called(seen)) | self._extra_tools)

    def heartbeat(self) -> None:
        self.client.api.runs_heartbeat(self.id)

    def finish(
        self,
        status: str = "success",
        error_message: str = "",
        *,
        tools_called: list[str] | _core.Default | None = _core.DEFAULT,
    ) -> RunDetailOut:
        """Finish the run. `tools_called` defaults to what this object proposed; pass None
        when the runtime cannot tell what it called."""
        self._stop_heartbeats()
        if isinstance(tools_called, _core.Default):
            tools_called = self.tools_called
        self.data = self.client.api.runs_finish(
            self.id, status=status, error_message=error_message, tools_called=tools_called
        )
        self._finished = True
        return self.data

    def refresh(self) -> Run:
        self.data = self.client.api.runs_retrieve(self.id)
        return self

    # heartbeats and the context managers

    def start_heartbeats(self, every: float | None = None) -> None:
        every = every or self.client.heartbeat_every
        if self._beat is not None:
            return
        self._stop.clear()
        self._beat = threading.Thread(
            target=self._beat_loop,
            args=(every,),
            name=f"takeover-heartbeat-{self.id[:8]}",
            daemon=True,
        )
        self._beat.start()

    def _beat_loop(self, every: float) -> None:
        while not self._stop.wait(every):
            try:
                self.client.request("POST", f"/runs/{self.id}/heartbeat", json={}, retry_for=0)
            except RunNotRunning:
                return
            except TakeoverError as exc:  # a missed beat is harmless for hours; keep going
                logger.warning("heartbeat of run %s failed: %s", self.id, exc)

    def _stop_heartbeats(self) -> None:
        self._stop.set()
        if self._beat is not None and self._beat is not threading.current_thread():
            self._beat.join(timeout=5)
        self._beat = None

    def attach(self) -> Run:
        """`with run.attach():` the current run, with heartbeats, left running at the end."""
        self._finish_on_exit.append(False)
        return self

    def __enter__(self) -> Run:
        if len(self._finish_on_exit) == len(self._tokens):
            self._finish_on_exit.append(True)
        self._tokens.append(_core.current_run_var.set(self))
        self.start_heartbeats()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        _core.current_run_var.reset(self._tokens.pop())
        finish = self._finish_on_exit.pop()
        self._stop_heartbeats()
        if self._finished or not finish:
            return
        if exc is None:
            status, message = "success", ""
        elif isinstance(exc, KeyboardInterrupt):
            status, message = "cancelled", "Interrupted."
        else:
            status, message = "error", f"{type(exc).__name__}: {exc}"[:10000]
        try:
            self.finish(status, message)
        except RunNotRunning:
            pass  # finished elsewhere (reaped, or by an operator): nothing to add
        except TakeoverError:
            if exc is None:
                raise
            logger.exception("could not finish run %s as %s", self.id, status)


class Outcome:
    """A proposed action: `action` (an `ActionOut`) is the latest view of it, `action_id`
    its id; `replayed`/`content_changed` come from the proposal's answer. `wait()` returns
    this outcome once it succeeded."""

    def __init__(self, client: Takeover, action: ActionOut | None, *, tool: str = "") -> None:
        self.client = client
        self.action: ActionOut = action  # type: ignore[assignment] -- None until answered
        self._tool = tool
        self.replayed = bool(action and action.replayed)
        self.content_changed = bool(action and action.content_changed)

    def __repr__(self) -> str:
        return f"<Outcome {self.action_id} {self.state}{' replayed' if self.replayed else ''}>"

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

    def refresh(self) -> Outcome:
        self._update(self.client.api.actions_retrieve(self.action_id), proposal=False)
        return self

    def wait(self, timeout: float = 60.0, *, poll_approval: float = 2.0) -> Outcome:
        """Wait until the action settles; return self when it `succeeded`.

        Raises `Blocked`, `Failed` (`Conflict` for a version conflict), `NeedsHuman`; or
        `Pending` when `timeout` passes first (still queued, dispatching, unknown or awaiting
        approval); or `Unavailable` when Takeover kept answering 503 (honouring
        `Retry-After`) or could not be reached until the timeout.

        The server may answer a `?wait=` early (it caps concurrent waits per principal), so
        this loops, re-asking with the time that is left; an approval is polled every
        `poll_approval` seconds, since the server does not hold requests for it. An agent
        that should not hold a thread for an approval pauses instead (the LangGraph and
        OpenAI Agents guards do): `timeout=0` answers at once.
        """
        deadline = time.monotonic() + timeout
        backoff = 0.1
        while not self.settled:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _core.pending(self.action, timeout)
            if self.state == "awaiting_approval":
                time.sleep(min(poll_approval, remaining))
                self.refresh()
                continue
            hold = round(min(_core.MAX_WAIT_PER_REQUEST, remaining), 1)
            asked = time.monotonic()
            before = self.state
            data, response = self.client.request(
                "GET",
                f"/actions/{self.action_id}",
                params={"wait": f"{hold:g}"},
                timeout=hold + 15,
                retry_for=max(remaining, 0.0),
                with_response=True,
            )
            self._update(ActionOut.from_dict(data), proposal=False)
            pause = _core.wait_pause(self.state, before, asked, hold, response, backoff)
            if pause:
                time.sleep(min(pause, max(deadline - time.monotonic(), 0)))
                backoff = min(backoff * 2, 2.0)
            else:
                backoff = 0.1
        _core.check_settled(self.action)
        return self
