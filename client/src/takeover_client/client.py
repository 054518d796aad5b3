"""The synchronous client: `Takeover`, `Run`, `Outcome`."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path
from typing import IO, Any

import httpx

from . import _core, _shared
from ._shared import DEFAULT_HEARTBEAT_EVERY, DEFAULT_RETRY_FOR, DEFAULT_TIMEOUT
from .api import Api
from .errors import ApiError, RunNotRunning, TakeoverError
from .models import MeOut, RunDetailOut

logger = logging.getLogger("takeover_client")

__all__ = [
    "DEFAULT_HEARTBEAT_EVERY",
    "DEFAULT_RETRY_FOR",
    "DEFAULT_TIMEOUT",
    "Outcome",
    "Run",
    "Takeover",
]


class Takeover(_shared.ClientBase):
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

    _http_class = httpx.Client
    _api_class = Api

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
        options = {"retry_for": retry_for, "timeout": timeout, "with_response": with_response}
        call = _shared.Call(self, method, path, {**kwargs, **options})
        while True:
            try:
                response = self._http.request(method, path, **call.kwargs)
            except httpx.TransportError as exc:
                call.failed(exc)
            else:
                if call.final(response):
                    return call.answer(response)
            time.sleep(call.pause())

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
        arguments = _shared.start_arguments(trigger, config, input_file, session_id, event_id)
        return Run(self, self.api.runs_start(**arguments))

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


class Run(_shared.RunBase):
    """A run as the server recorded it (`data`, a `RunDetailOut`).

    As a context manager (`with run:`) it is the current run, sends heartbeats in the
    background and finishes the run: `success` when the block ends normally, `error` with
    the exception when it raises (`cancelled` for KeyboardInterrupt), with `tools_called`.
    `with run.attach():` is the same without finishing: for an agent that may pause (an
    approval it will be resumed on, maybe in another process) and finishes the run itself.
    """

    def __init__(self, client: Takeover, data: RunDetailOut) -> None:
        super().__init__(client, data)
        self._stop = threading.Event()

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
        wait: float = 0,
    ) -> Outcome:
        """Propose one side effect. `key` defaults to `self.key(tool, target)`. Answers at
        once with an `Outcome` (new, or `replayed` from the ledger); `.wait()` for the
        result. A 422 `IdempotencyConflict` means this key was used for another intent.
        `wait=N` lets the server hold the answer up to N seconds (at most 30, and within the
        client's timeout) until the action settles: a quick outcome then comes with the
        proposal, one request instead of two, and `.wait()` answers without asking again."""
        outcome = Outcome(self.client, None, tool=tool)
        arguments = self._proposal(
            outcome, tool, target, desired_state, key, expected_version, approval_id, reason, wait
        )
        try:
            answer = self.client.api.actions_propose(self.id, **arguments)
        except ApiError:
            # Refused (400, 404, 409, 422): nothing was created, so nothing was called.
            self._proposals.remove(outcome)
            raise
        outcome._update(answer)
        return outcome

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
        arguments = self._finish_arguments(status, error_message, tools_called)
        self.data = self.client.api.runs_finish(self.id, **arguments)
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

    def __enter__(self) -> Run:
        self._enter()
        self.start_heartbeats()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        finish = self._leave()
        self._stop_heartbeats()
        if not finish:
            return
        status, message = _shared.exit_status(exc, (KeyboardInterrupt,), "Interrupted.")
        try:
            self.finish(status, message)
        except TakeoverError as error:
            self._not_finished(error, exc, status)


class Outcome(_shared.OutcomeBase):
    """A proposed action: `action` (an `ActionOut`) is the latest view of it, `action_id`
    its id; `replayed`/`content_changed` come from the proposal's answer. `wait()` returns
    this outcome once it succeeded."""

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
        steps, answer = self._waiting(timeout, poll_approval), None
        with contextlib.suppress(StopIteration):  # the action settled
            while True:
                step, answer = steps.send(answer), None
                if isinstance(step, dict):
                    answer = self.client.request(**step)
                else:
                    time.sleep(step)
        return self
