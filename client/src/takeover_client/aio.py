"""The asynchronous client: `AsyncTakeover`, `AsyncRun`, `AsyncOutcome`. Same protocol,
same rules as `takeover_client.client`; heartbeats run as an asyncio task."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import IO, Any

import httpx

from . import _core, _shared
from .api import AsyncApi
from .errors import ApiError, RunNotRunning, TakeoverError
from .models import MeOut, RunDetailOut

logger = logging.getLogger("takeover_client")


class AsyncTakeover(_shared.ClientBase):
    """`Takeover`, with `await`. Use as `async with AsyncTakeover(url, token) as client:`;
    `client.api` is every operation, `await client.api.queue_list(...)`."""

    _http_class = httpx.AsyncClient
    _api_class = AsyncApi

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncTakeover:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def request(self, method: str, path: str, **options: Any) -> Any:
        """`Takeover.request`, awaited (the same options)."""
        call = _shared.Call(self, method, path, options)
        while True:
            try:
                response = await self._http.request(method, path, **call.kwargs)
            except httpx.TransportError as exc:
                call.failed(exc)
            else:
                if call.final(response):
                    return call.answer(response)
            await asyncio.sleep(call.pause())

    async def start_run(
        self,
        trigger: str,
        config: dict | None = None,
        input_file: str | Path | IO[bytes] | None = None,
        *,
        session_id: str | None = None,
        event_id: str | None = None,
    ) -> AsyncRun:
        arguments = _shared.start_arguments(trigger, config, input_file, session_id, event_id)
        return AsyncRun(self, await self.api.runs_start(**arguments))

    async def claim(self) -> AsyncRun | None:
        data = await self.api.runs_claim()
        return AsyncRun(self, data) if data else None

    async def run(self, run_id: str) -> AsyncRun:
        return AsyncRun(self, await self.api.runs_retrieve(run_id))

    async def outcome(self, action_id: str) -> AsyncOutcome:
        return AsyncOutcome(self, await self.api.actions_retrieve(action_id))

    async def me(self) -> MeOut:
        return await self.api.me()


class AsyncRun(_shared.RunBase):
    """`Run`, with `await`; `async with run:` heartbeats and finishes it, `async with
    run.attach():` heartbeats and leaves it running (an agent that may pause)."""

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
        wait: float = 0,
    ) -> AsyncOutcome:
        outcome = AsyncOutcome(self.client, None, tool=tool)
        arguments = self._proposal(
            outcome, tool, target, desired_state, key, expected_version, approval_id, reason, wait
        )
        try:
            answer = await self.client.api.actions_propose(self.id, **arguments)
        except ApiError:
            self._proposals.remove(outcome)  # refused: nothing was created, nor called
            raise
        outcome._update(answer)
        return outcome

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
        arguments = self._finish_arguments(status, error_message, tools_called)
        self.data = await self.client.api.runs_finish(self.id, **arguments)
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

    async def __aenter__(self) -> AsyncRun:
        self._enter()
        self.start_heartbeats()
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        finish = self._leave()
        await self._stop_heartbeats()
        if not finish:
            return
        cancelled = (KeyboardInterrupt, asyncio.CancelledError)
        status, message = _shared.exit_status(exc, cancelled, "Cancelled.")
        try:
            await self.finish(status, message)
        except TakeoverError as error:
            self._not_finished(error, exc, status)


class AsyncOutcome(_shared.OutcomeBase):
    """`Outcome`, with `await outcome.wait(timeout)`."""

    async def refresh(self) -> AsyncOutcome:
        self._update(await self.client.api.actions_retrieve(self.action_id), proposal=False)
        return self

    async def wait(self, timeout: float = 60.0, *, poll_approval: float = 2.0) -> AsyncOutcome:
        """See `Outcome.wait`."""
        steps, answer = self._waiting(timeout, poll_approval), None
        with contextlib.suppress(StopIteration):  # the action settled
            while True:
                step, answer = steps.send(answer), None
                if isinstance(step, dict):
                    answer = await self.client.request(**step)
                else:
                    await asyncio.sleep(step)
        return self
