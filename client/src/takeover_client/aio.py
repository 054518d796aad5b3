"""The asynchronous client: `AsyncTakeover`, `AsyncRun`, `AsyncOutcome`. Same protocol,
same rules as `takeover_client.client`; heartbeats run as an asyncio task."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import httpx

from . import _core
from ._model import UNSET
from .api import AsyncApi
from .client import DEFAULT_HEARTBEAT_EVERY, DEFAULT_RETRY_FOR, DEFAULT_TIMEOUT
from .errors import ApiError, RunNotRunning, TakeoverError
from .keys import idempotency_key
from .models import ActionOut, MeOut, RunDetailOut

logger = logging.getLogger("takeover_client")


class AsyncTakeover:
    """`Takeover`, with `await`. Use as `async with AsyncTakeover(url, token) as client:`;
    `client.api` is every operation, `await client.api.queue_list(...)`."""

    def __init__(
        self,
        url: str,
        token: str,
        *,
        tenant: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry_for: float = DEFAULT_RETRY_FOR,
        heartbeat_every: float = DEFAULT_HEARTBEAT_EVERY,
        transport: httpx.AsyncBaseTransport | None = None,
        on_retry: Callable[[_core.RetryEvent], Any] | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        if tenant:
            headers["X-Takeover-Tenant"] = tenant
        self.url = _core.base_url(url)
        self.retry_for = retry_for
        self.heartbeat_every = heartbeat_every
        self.on_retry = on_retry
        self.api = AsyncApi(self)
        self._http = httpx.AsyncClient(
            base_url=self.url + _core.API_PREFIX,
            headers=headers,
            timeout=timeout,
            transport=transport,
            trust_env=False,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncTakeover:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        retry_for: float | None = None,
        timeout: float | None = None,
        with_response: bool = False,
        **kwargs: Any,
    ) -> Any:
        clock = _core.RetryClock(self.retry_for if retry_for is None else retry_for)
        if timeout is not None:
            kwargs["timeout"] = timeout
        while True:
            hint = None
            try:
                response = await self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                if not _core.is_safe_to_retry(exc, method):
                    raise _core.unavailable(method, path, type(exc).__name__, None) from exc
                last = type(exc).__name__
            else:
                if response.status_code != 503:
                    data = _core.parse(response)
                    return (data, response) if with_response else data
                hint = _core.retry_after(response)
                if hint is None:
                    return _core.parse(response)
                last = f"503, Retry-After {hint:g}"
            delay = clock.next_delay(hint)
            if delay is None:
                raise _core.unavailable(method, path, last, hint)
            elapsed = time.monotonic() - clock.started
            event = _core.RetryEvent(method, path, last, delay, clock.attempt, elapsed)
            _core.note_retry(event, self.on_retry, self.url + _core.API_PREFIX)
            await asyncio.sleep(delay)

    async def start_run(
        self,
        trigger: str,
        config: dict | None = None,
        input_file: str | Path | IO[bytes] | None = None,
        *,
        session_id: str | None = None,
        event_id: str | None = None,
    ) -> AsyncRun:
        config = dict(config or {})
        if event_id is not None:
            config["event_id"] = event_id
        data = await self.api.runs_start(
            trigger=trigger,
            config=config,
            session_id=session_id or UNSET,
            input_file=_core.input_file(input_file),
        )
        return AsyncRun(self, data)

    async def claim(self) -> AsyncRun | None:
        data = await self.api.runs_claim()
        return AsyncRun(self, data) if data else None

    async def run(self, run_id: str) -> AsyncRun:
        return AsyncRun(self, await self.api.runs_retrieve(run_id))

    async def outcome(self, action_id: str) -> AsyncOutcome:
        return AsyncOutcome(self, await self.api.actions_retrieve(action_id))

    async def me(self) -> MeOut:
        return await self.api.me()


class AsyncRun:
    """`Run`, with `await`; `async with run:` heartbeats and finishes it, `async with
    run.attach():` heartbeats and leaves it running (an agent that may pause)."""

    def __init__(self, client: AsyncTakeover, data: RunDetailOut) -> None:
        self.client = client
        self.data = data
        self._proposals: list[AsyncOutcome] = []
        self._extra_tools: set[str] = set()
        self._finished = False
        self._beat: asyncio.Task | None = None
        self._tokens: list[Any] = []
        self._finish_on_exit: list[bool] = []

    def __repr__(self) -> str:
        return f"<AsyncRun {self.id} {self.status}>"

    id = property(lambda self: self.data.id)
    status = property(lambda self: self.data.status)
    config = property(lambda self: self.data.config or {})
    event_id = property(lambda self: self.config.get("event_id"))
    replay_of = property(lambda self: self.data.replay_of)

    def key(self, tool: str, target: str) -> str:
        if not self.event_id:
            raise ValueError("this run has no event_id: start it with start_run(event_id=...)")
        return idempotency_key(self.event_id, tool, target)

    async def propose(
        self,
        tool: str,
        target: str,
        desired_state: dict,
        *,
        key: str | None = None,
        expected_version: int | None = None,
        approval_id: str | None = None,
        reason: str | None = None,
    ) -> AsyncOutcome:
        key = key or self.key(tool, target)
        outcome = AsyncOutcome(self.client, None, tool=tool)
        self._proposals.append(outcome)
        try:
            answer = await self.client.api.actions_propose(
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
        self._extra_tools.add(tool)

    @property
    def tools_called(self) -> list[str]:
        seen = [(o.tool, o.state) for o in self._proposals]
        return sorted(set(_core.tools_called(seen)) | self._extra_tools)

    async def heartbeat(self) -> None:
        await self.client.api.runs_heartbeat(self.id)

    async def finish(
        self,
        status: str = "success",
        error_message: str = "",
        *,
        tools_called: list[str] | _core.Default | None = _core.DEFAULT,
    ) -> RunDetailOut:
        await self._stop_heartbeats()
        if isinstance(tools_called, _core.Default):
            tools_called = self.tools_called
        self.data = await self.client.api.runs_finish(
            self.id, status=status, error_message=error_message, tools_called=tools_called
        )
        self._finished = True
        return self.data

    async def refresh(self) -> AsyncRun:
        self.data = await self.client.api.runs_retrieve(self.id)
        return self

    def start_heartbeats(self, every: float | None = None) -> None:
        if self._beat is None:
            self._beat = asyncio.create_task(self._beat_loop(every or self.client.heartbeat_every))

    async def _beat_loop(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            try:
                await self.client.request(
                    "POST", f"/runs/{self.id}/heartbeat", json={}, retry_for=0
                )
            except RunNotRunning:
                return
            except TakeoverError as exc:
                logger.warning("heartbeat of run %s failed: %s", self.id, exc)

    async def _stop_heartbeats(self) -> None:
        if self._beat is not None:
            self._beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beat
            self._beat = None

    def attach(self) -> AsyncRun:
        self._finish_on_exit.append(False)
        return self

    async def __aenter__(self) -> AsyncRun:
        if len(self._finish_on_exit) == len(self._tokens):
            self._finish_on_exit.append(True)
        self._tokens.append(_core.current_run_var.set(self))
        self.start_heartbeats()
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        _core.current_run_var.reset(self._tokens.pop())
        finish = self._finish_on_exit.pop()
        await self._stop_heartbeats()
        if self._finished or not finish:
            return
        if exc is None:
            status, message = "success", ""
        elif isinstance(exc, KeyboardInterrupt | asyncio.CancelledError):
            status, message = "cancelled", "Cancelled."
        else:
            status, message = "error", f"{type(exc).__name__}: {exc}"[:10000]
        try:
            await self.finish(status, message)
        except RunNotRunning:
            pass
        except TakeoverError:
            if exc is None:
                raise
            logger.exception("could not finish run %s as %s", self.id, status)


class AsyncOutcome:
    """`Outcome`, with `await outcome.wait(timeout)`."""

    def __init__(self, client: AsyncTakeover, action: ActionOut | None, *, tool: str = "") -> None:
        self.client = client
        self.action: ActionOut = action  # type: ignore[assignment] -- None until answered
        self._tool = tool
        self.replayed = bool(action and action.replayed)
        self.content_changed = bool(action and action.content_changed)

    def __repr__(self) -> str:
        flag = " replayed" if self.replayed else ""
        return f"<AsyncOutcome {self.action_id} {self.state}{flag}>"

    def _update(self, action: ActionOut, *, proposal: bool = True) -> None:
        self.action = action
        if proposal:
            self.replayed = action.replayed
            self.content_changed = action.content_changed

    action_id = property(lambda self: self.action.id)
    id = action_id
    state = property(lambda self: self.action.state if self.action is not None else None)
    tool = property(lambda self: self.action.tool if self.action is not None else self._tool)
    settled = property(lambda self: self.state in _core.SETTLED)

    async def refresh(self) -> AsyncOutcome:
        self._update(await self.client.api.actions_retrieve(self.action_id), proposal=False)
        return self

    async def wait(self, timeout: float = 60.0, *, poll_approval: float = 2.0) -> AsyncOutcome:
        """See `Outcome.wait`."""
        deadline = time.monotonic() + timeout
        backoff = 0.1
        while not self.settled:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _core.pending(self.action, timeout)
            if self.state == "awaiting_approval":
                await asyncio.sleep(min(poll_approval, remaining))
                await self.refresh()
                continue
            hold = round(min(_core.MAX_WAIT_PER_REQUEST, remaining), 1)
            asked = time.monotonic()
            before = self.state
            data, response = await self.client.request(
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
                await asyncio.sleep(min(pause, max(deadline - time.monotonic(), 0)))
                backoff = min(backoff * 2, 2.0)
            else:
                backoff = 0.1
        _core.check_settled(self.action)
        return self
