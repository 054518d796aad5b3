"""The synchronous client: `Takeover`, `Run`, `Outcome`."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import httpx

from . import _core
from .errors import RunNotRunning, TakeoverError
from .keys import idempotency_key

logger = logging.getLogger("takeover_client")

DEFAULT_TIMEOUT = 10.0
DEFAULT_RETRY_FOR = 30.0
DEFAULT_HEARTBEAT_EVERY = 60.0


class Takeover:
    """Takeover's HTTP API v1, for an agent runtime (principal token) or an operator.

        client = Takeover("http://127.0.0.1:8000", token)
        with client.start_run("webhook", {"event_id": "evt_1"}) as run:
            run.propose("update_ticket", "T-1", {"status": "open"}).wait(30)

    `retry_for` is how long one call keeps retrying what is safe to retry (a 503 with
    `Retry-After`, a connection that failed before the request was sent, a GET) before
    raising `Unavailable`. `tenant` names the tenant for an operator in several.
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
    ) -> None:
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        if tenant:
            headers["X-Takeover-Tenant"] = tenant
        self.url = url.rstrip("/")
        self.retry_for = retry_for
        self.heartbeat_every = heartbeat_every
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
            logger.info("%s %s: %s; retrying in %.1f s", method, path, last, delay)
            time.sleep(delay)

    def get(self, path: str, **params: Any) -> Any:
        params = {k: v for k, v in params.items() if v is not None}
        return self.request("GET", path, params=params)

    def post(self, path: str, body: dict | None = None, **kwargs: Any) -> Any:
        return self.request("POST", path, json=body if body is not None else {}, **kwargs)

    def pages(self, path: str, *, limit: int | None = None, **params: Any) -> Iterator[dict]:
        """Every item of a list endpoint, following `next` cursors (at most `limit`)."""
        cursor = None
        count = 0
        while True:
            page = self.get(path, cursor=cursor, **params)
            for item in page["results"]:
                yield item
                count += 1
                if limit is not None and count >= limit:
                    return
            cursor = page.get("next")
            if not cursor:
                return

    # the agent runtime

    def me(self) -> dict:
        return self.get("/me")

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
        so that a replay of this run derives the same idempotency keys."""
        config = dict(config or {})
        if event_id is not None:
            config["event_id"] = event_id
        body: dict[str, Any] = {"trigger": trigger, "config": config}
        if session_id:
            body["session_id"] = session_id
        if input_file is None:
            data = self.post("/runs", body)
        else:
            # Multipart is not retried on a 503: the file may be a one-shot stream.
            form = {"trigger": trigger, "config": json.dumps(config)}
            if session_id:
                form["session_id"] = session_id
            if isinstance(input_file, str | Path):
                with open(input_file, "rb") as fh:
                    files = {"input_file": (Path(input_file).name, fh.read())}
            else:
                name = Path(getattr(input_file, "name", "input")).name
                files = {"input_file": (name, input_file.read())}
            data = self.request("POST", "/runs", data=form, files=files)
        return Run(self, data)

    def claim(self) -> Run | None:
        """Take the oldest replayed run waiting for this principal, or None."""
        data = self.post("/runs/claim")
        return Run(self, data) if data else None

    def run(self, run_id: str) -> Run:
        return Run(self, self.get(f"/runs/{run_id}"))

    def outcome(self, action_id: str) -> Outcome:
        return Outcome(self, self.get(f"/actions/{action_id}"))

    # the operator

    def action(self, action_id: str) -> dict:
        return self.get(f"/actions/{action_id}")

    def queue(self, state: str | None = None, tool: str | None = None, **kw: Any) -> Iterator:
        return self.pages("/queue", state=state, tool=tool, **kw)

    def reconcile(self, action_id: str) -> dict:
        return self.post(f"/actions/{action_id}/reconcile")

    def resolve(self, action_id: str, outcome: str, reason: str) -> dict:
        return self.post(f"/actions/{action_id}/resolve", {"outcome": outcome, "reason": reason})

    def approval_requests(self, state: str | None = "pending", **kw: Any) -> Iterator:
        return self.pages("/approval-requests", state=state, **kw)

    def grant(self, request_id: str, ttl_seconds: float | None = None) -> dict:
        body = {} if ttl_seconds is None else {"ttl_seconds": ttl_seconds}
        return self.post(f"/approval-requests/{request_id}/grant", body)

    def deny(self, request_id: str, reason: str) -> dict:
        return self.post(f"/approval-requests/{request_id}/deny", {"reason": reason})

    def runs(self, status: str | None = None, **kw: Any) -> Iterator:
        return self.pages("/runs", status=status, **kw)

    def replay(self, run_id: str, *, force: bool = False, reason: str = "") -> dict:
        return self.post(f"/runs/{run_id}/replay", {"force": force, "reason": reason})

    def ledger(self, key: str | None = None, tool: str | None = None, **kw: Any) -> Iterator:
        return self.pages("/ledger", key=key, tool=tool, **kw)

    def audit(
        self, verb: str | None = None, actor: str | None = None, object: str | None = None, **kw
    ) -> Iterator:
        return self.pages("/audit", verb=verb, actor=actor, object=object, **kw)


class Run:
    """A run as the server recorded it. As a context manager it sends heartbeats in the
    background and finishes the run: `success` when the block ends normally, `error` with
    the exception when it raises (`cancelled` for KeyboardInterrupt), with `tools_called`."""

    def __init__(self, client: Takeover, data: dict) -> None:
        self.client = client
        self.data = data
        self._proposals: list[Outcome] = []
        self._extra_tools: set[str] = set()
        self._finished = False
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._token = None

    def __repr__(self) -> str:
        return f"<Run {self.id} {self.status}>"

    @property
    def id(self) -> str:
        return self.data["id"]

    @property
    def status(self) -> str:
        return self.data["status"]

    @property
    def config(self) -> dict:
        return self.data.get("config") or {}

    @property
    def event_id(self) -> str | None:
        """The trigger's id, as given to `start_run(event_id=...)` (kept in the config, so a
        claimed replay has it too)."""
        return self.config.get("event_id")

    @property
    def replay_of(self) -> str | None:
        return self.data.get("replay_of")

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
        placeholder = Outcome(self.client, {"tool": tool, "target": target, "state": None})
        self._proposals.append(placeholder)  # a call whose answer is lost still counts
        data = self.client.post(f"/runs/{self.id}/actions", body, headers={"Idempotency-Key": key})
        placeholder._update(data)
        placeholder.replayed = bool(data.get("replayed"))
        placeholder.content_changed = bool(data.get("content_changed"))
        return placeholder

    def record_tool_call(self, tool: str) -> None:
        """Report a tool this run called outside Takeover (sent in `tools_called`)."""
        self._extra_tools.add(tool)

    @property
    def tools_called(self) -> list[str]:
        seen = [(o.tool, o.state) for o in self._proposals]
        return sorted(set(_core.tools_called(seen)) | self._extra_tools)

    def heartbeat(self) -> None:
        self.data = self.client.post(f"/runs/{self.id}/heartbeat") or self.data

    def finish(
        self,
        status: str = "success",
        error_message: str = "",
        *,
        tools_called: list[str] | _core.Default | None = _core.DEFAULT,
    ) -> dict:
        """Finish the run. `tools_called` defaults to what this object proposed; pass None
        when the runtime cannot tell what it called."""
        self._stop_heartbeats()
        if isinstance(tools_called, _core.Default):
            tools_called = self.tools_called
        body = {"status": status, "error_message": error_message, "tools_called": tools_called}
        self.data = self.client.post(f"/runs/{self.id}/finish", body)
        self._finished = True
        return self.data

    def refresh(self) -> Run:
        self.data = self.client.get(f"/runs/{self.id}")
        return self

    # heartbeats and the context manager

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
        self._token = _core.current_run_var.set(self)
        self.start_heartbeats()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._token is not None:
            _core.current_run_var.reset(self._token)
            self._token = None
        self._stop_heartbeats()
        if self._finished:
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
    """A proposed action. `replayed`/`content_changed` come from the proposal's answer;
    `action` is the latest view. `wait()` returns this outcome once it succeeded."""

    def __init__(self, client: Takeover, action: dict) -> None:
        self.client = client
        self.action = action
        self.replayed = bool(action.get("replayed"))
        self.content_changed = bool(action.get("content_changed"))

    def __repr__(self) -> str:
        return f"<Outcome {self.id} {self.state}{' replayed' if self.replayed else ''}>"

    def _update(self, action: dict) -> None:
        self.action = action

    @property
    def id(self) -> str:
        return self.action["id"]

    @property
    def state(self) -> str | None:
        return self.action.get("state")

    @property
    def tool(self) -> str:
        return self.action["tool"]

    @property
    def settled(self) -> bool:
        return self.state in _core.SETTLED

    def refresh(self) -> Outcome:
        self._update(self.client.get(f"/actions/{self.id}"))
        return self

    def wait(self, timeout: float = 60.0, *, poll_approval: float = 2.0) -> Outcome:
        """Wait until the action settles; return self when it `succeeded`.

        Raises `Blocked`, `Failed` (`Conflict` for a version conflict), `NeedsHuman`; or
        `Pending` when `timeout` passes first (still queued, dispatching, unknown or awaiting
        approval); or `Unavailable` when Takeover kept answering 503 (honouring
        `Retry-After`) or could not be reached until the timeout.

        The server may answer a `?wait=` early (it caps concurrent waits per principal), so
        this loops, re-asking with the time that is left; an approval is polled every
        `poll_approval` seconds, since the server does not hold requests for it.
        """
        deadline = time.monotonic() + timeout
        backoff = 0.1
        while not self.settled:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _core.pending(self.action, timeout)
            if self.state == "awaiting_approval":
                time.sleep(min(poll_approval, remaining))
                self._update(self.client.get(f"/actions/{self.id}"))
                continue
            hold = round(min(_core.MAX_WAIT_PER_REQUEST, remaining), 1)
            asked = time.monotonic()
            before = self.state
            data, response = self.client.request(
                "GET",
                f"/actions/{self.id}",
                params={"wait": f"{hold:g}"},
                timeout=hold + 15,
                retry_for=max(remaining, 0.0),
                with_response=True,
            )
            self._update(data)
            pause = _core.wait_pause(self.state, before, asked, hold, response, backoff)
            if pause:
                time.sleep(min(pause, max(deadline - time.monotonic(), 0)))
                backoff = min(backoff * 2, 2.0)
            else:
                backoff = 0.1
        _core.check_settled(self.action)
        return self
