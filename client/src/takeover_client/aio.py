"""The asynchronous client: `AsyncTakeover`, `AsyncRun`, `AsyncOutcome`. Same protocol,
same rules as `takeover_client.client`; heartbeats run as an asyncio task."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Any

import httpx

from . import _core
from .client import DEFAULT_HEARTBEAT_EVERY, DEFAULT_RETRY_FOR, DEFAULT_TIMEOUT
from .errors import RunNotRunning, TakeoverError
from .keys import idempotency_key

logger = logging.getLogger("takeover_client")


class AsyncTakeover:
    """`Takeover`, with `await`. Use as `async with AsyncTakeover(url, token) as client:`."""

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
    ) -> None:
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        if tenant:
            headers["X-Takeover-Tenant"] = tenant
        self.url = url.rstrip("/")
        self.retry_for = retry_for
        self.heartbeat_every = heartbeat_every
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
            logger.info("%s %s: %s; retrying in %.1f s", method, path, last, delay)
            await asyncio.sleep(delay)

    async def get(self, path: str, **params: Any) -> Any:
        params = {k: v for k, v in params.items() if v is not None}
        return await self.request("GET", path, params=params)

    async def post(self, path: str, body: dict | None = None, **kwargs: Any) -> Any:
        return await self.request("POST", path, json=body if body is not None else {}, **kwargs)

    async def pages(self, path: str, **params: Any) -> AsyncIterator[dict]:
        cursor = None
        while True:
            page = await self.get(path, cursor=cursor, **params)
            for item in page["results"]:
                yield item
            cursor = page.get("next")
            if not cursor:
                return

    async def me(self) -> dict:
        return await self.get("/me")

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
        body: dict[str, Any] = {"trigger": trigger, "config": config}
        if session_id:
            body["session_id"] = session_id
        if input_file is None:
            data = await self.post("/runs", body)
        else:
            form = {"trigger": trigger, "config": json.dumps(config)}
            if session_id:
                form["session_id"] = session_id
            if isinstance(input_file, str | Path):
                files = {"input_file": (Path(input_file).name, Path(input_file).read_bytes())}
            else:
                name = Path(getattr(input_file, "name", "input")).name
                files = {"input_file": (name, input_file.read())}
            data = await self.request("POST", "/runs", data=form, files=files)
        return AsyncRun(self, data)

    async def claim(self) -> AsyncRun | None:
        data = await self.post("/runs/claim")
        return AsyncRun(self, data) if data else None

    async def run(self, run_id: str) -> AsyncRun:
        return AsyncRun(self, await self.get(f"/runs/{run_id}"))

    async def outcome(self, action_id: str) -> AsyncOutcome:
        return AsyncOutcome(self, await self.get(f"/actions/{action_id}"))


class AsyncRun:
    """`Run`, with `await`; `async with run:` heartbeats and finishes it."""

    def __init__(self, client: AsyncTakeover, data: dict) -> None:
        self.client = client
        self.data = data
        self._proposals: list[AsyncOutcome] = []
        self._extra_tools: set[str] = set()
        self._finished = False
        self._beat: asyncio.Task | None = None
        self._token = None

    def __repr__(self) -> str:
        return f"<AsyncRun {self.id} {self.status}>"

    id = property(lambda self: self.data["id"])
    status = property(lambda self: self.data["status"])
    config = property(lambda self: self.data.get("config") or {})
    event_id = property(lambda self: self.config.get("event_id"))
    replay_of = property(lambda self: self.data.get("replay_of"))

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
        body: dict[str, Any] = {
            "tool": tool,
            "target": target,
            "desired_state": desired_state,
            "expected_version": expected_version,
        }
        if approval_id is not None:
            body["approval_id"] = approval_id
        if reason is not None:
            body["reason"] = reason
        outcome = AsyncOutcome(self.client, {"tool": tool, "target": target, "state": None})
        self._proposals.append(outcome)
        data = await self.client.post(
            f"/runs/{self.id}/actions", body, headers={"Idempotency-Key": key}
        )
        outcome.action = data
        outcome.replayed = bool(data.get("replayed"))
        outcome.content_changed = bool(data.get("content_changed"))
        return outcome

    def record_tool_call(self, tool: str) -> None:
        self._extra_tools.add(tool)

    @property
    def tools_called(self) -> list[str]:
        seen = [(o.tool, o.state) for o in self._proposals]
        return sorted(set(_core.tools_called(seen)) | self._extra_tools)

    async def heartbeat(self) -> None:
        self.data = await self.client.post(f"/runs/{self.id}/heartbeat") or self.data

    async def finish(
        self,
        status: str = "success",
        error_message: str = "",
        *,
        tools_called: list[str] | _core.Default | None = _core.DEFAULT,
    ) -> dict:
        await self._stop_heartbeats()
        if isinstance(tools_called, _core.Default):
            tools_called = self.tools_called
        body = {"status": status, "error_message": error_message, "tools_called": tools_called}
        self.data = await self.client.post(f"/runs/{self.id}/finish", body)
        self._finished = True
        return self.data

    async def refresh(self) -> AsyncRun:
        self.data = await self.client.get(f"/runs/{self.id}")
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
        self._token = _core.current_run_var.set(self)
        self.start_heartbeats()
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        if self._token is not None:
            _core.current_run_var.reset(self._token)
            self._token = None
        await self._stop_heartbeats()
        if self._finished:
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

    def __init__(self, client: AsyncTakeover, action: dict) -> None:
        self.client = client
        self.action = action
        self.replayed = bool(action.get("replayed"))
        self.content_changed = bool(action.get("content_changed"))

    def __repr__(self) -> str:
        return f"<AsyncOutcome {self.id} {self.state}{' replayed' if self.replayed else ''}>"

    id = property(lambda self: self.action["id"])
    state = property(lambda self: self.action.get("state"))
    tool = property(lambda self: self.action["tool"])
    settled = property(lambda self: self.state in _core.SETTLED)

    async def refresh(self) -> AsyncOutcome:
        self.action = await self.client.get(f"/actions/{self.id}")
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
                self.action = await self.client.get(f"/actions/{self.id}")
                continue
            hold = round(min(_core.MAX_WAIT_PER_REQUEST, remaining), 1)
            asked = time.monotonic()
            before = self.state
            self.action, response = await self.client.request(
                "GET",
                f"/actions/{self.id}",
                params={"wait": f"{hold:g}"},
                timeout=hold + 15,
                retry_for=max(remaining, 0.0),
                with_response=True,
            )
            pause = _core.wait_pause(self.state, before, asked, hold, response, backoff)
            if pause:
                await asyncio.sleep(min(pause, max(deadline - time.monotonic(), 0)))
                backoff = min(backoff * 2, 2.0)
            else:
                backoff = 0.1
        _core.check_settled(self.action)
        return self
