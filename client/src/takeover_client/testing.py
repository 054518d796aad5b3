"""Test an agent without a server: an in-memory fake of Takeover's agent side.

    from takeover_client.testing import FakeTakeover

    def test_the_agent_closes_the_ticket_once():
        fake = FakeTakeover()
        fake.tool("update_ticket")
        fake.tool("close_ticket", requires_approval=True)
        with fake.client() as client:           # a real `Takeover`, on the fake
            my_agent(client, event_id="evt_1")   # proposes, waits, finishes its run
            [request] = fake.approval_requests()
            fake.grant(request["id"])            # the test is the approver
            my_agent(client, event_id="evt_1")   # a duplicate delivery: a ledger hit
        assert fake.effects("close_ticket") == [...]   # applied once

With pytest the fixture `takeover_fake` is a fresh `FakeTakeover` per test (this module is
a pytest plugin, registered when the package is installed).

What the fake does, as the server does (its own tests run the same agent scenarios against
a live server and against the fake, and check every answer of the fake against the API's
schema, so it cannot drift unnoticed):

- runs: start (JSON; no input file), read, heartbeat, finish with `tools_called`
  (`tools_executed` is the union with what was dispatched), claim of a replay that the test
  made with `fake.replay(run_id)`; proposing on a run that is not running is a 409;
- proposals: the `Idempotency-Key` header required (400), an unknown tool a 400 naming
  `tool`, the ledger's rules (same key and intent: the same action, `replayed`, and
  `content_changed` when non-identity fields differ; same key, other intent: 422
  `idempotency-conflict`, nothing created), the intent fingerprint over principal, tool,
  target, the tool's identity fields and expected_version;
- approvals: a tool with `requires_approval` waits (`awaiting_approval`, with an approval
  request) until the test calls `grant()` or `deny()`; `pre_approve()` makes a one-shot
  approval to pass as `approval_id` (checked against the exact intent, consumed once);
- outcomes: each tool applies to an in-memory record per target (fields merged, version + 1;
  a stale `expected_version` fails `version_conflict`), unless the test scripted another
  outcome with `script(tool, outcome, target=..., times=...)`: `rejected`, `not_sent`,
  `version_conflict`, `reconciled` (applied, the answer lost, proven by a read) or
  `needs_human` (the answer lost, the read differs).

What it does not do: operators' endpoints (501), waiting (an action settles when proposed
or granted, so `wait()` returns at once), leases, workers, egress, MCP.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx

from ._fake import (
    OUTCOMES,
    URL,
    FakeTool,
    Problem,
    Script,
    canonical,
    utc_now,
)
from .aio import AsyncTakeover
from .client import Takeover


class FakeTakeover:
    """The agent side of Takeover's API v1, in memory (module docstring). `client()` and
    `async_client()` are the package's real clients, speaking HTTP to it through httpx's
    MockTransport; the other methods are the test's hands (the approver, the tool owner)."""

    def __init__(self, *, tenant: str = "test", principal: str = "agent") -> None:
        self.tenant = tenant
        self.principal = principal
        self.token = f"fake-{uuid.uuid4().hex}"
        self.tools: dict[str, FakeTool] = {}
        self.runs: dict[str, dict[str, Any]] = {}
        self.actions: dict[str, dict[str, Any]] = {}
        self.requests: dict[str, dict[str, Any]] = {}
        self.approvals: dict[str, dict[str, Any]] = {}
        self.ledger: dict[str, tuple[str, str]] = {}  # key -> (fingerprint, action id)
        self.scripts: dict[str, list[Script]] = {}
        self.transport = httpx.MockTransport(self.handle)

    # --- the test's hands -------------------------------------------------------------

    def tool(
        self,
        name: str,
        *,
        requires_approval: bool = False,
        identity_fields: list[str] | None = None,
        effect: str = "unsafe",
    ) -> FakeTool:
        """Register a tool (as an admin would with POST /api/v1/tools)."""
        self.tools[name] = FakeTool(name, requires_approval, list(identity_fields or []), effect)
        return self.tools[name]

    def client(self, **options: Any) -> Takeover:
        return Takeover(URL, self.token, transport=self.transport, **options)

    def async_client(self, **options: Any) -> AsyncTakeover:
        return AsyncTakeover(URL, self.token, transport=self.transport, **options)

    def script(self, tool: str, outcome: str, *, target: str | None = None, times: int = 1):
        """The next `times` dispatches of `tool` (on `target`, if given) end in `outcome`."""
        if outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}")
        self.scripts.setdefault(tool, []).append(Script(outcome, times, target))

    def approval_requests(self, state: str = "pending") -> list[dict[str, Any]]:
        return [copy.deepcopy(r) for r in self.requests.values() if r["state"] == state]

    def grant(self, request_or_action_id: str, *, ttl_seconds: float = 3600) -> dict[str, Any]:
        """Grant a pending approval request (by its id or its action's): the action is
        dispatched. Returns the approval."""
        request = self._request(request_or_action_id)
        request.update(state="granted", decided_at=utc_now(), decided_by=self._tester())
        approval = self._approval(request, consumed_by=request["action"])
        action = self.actions[request["action"]]
        action["approval_id"] = approval["id"]
        self._dispatch(action)
        return copy.deepcopy(approval)

    def deny(self, request_or_action_id: str, reason: str = "denied in a test") -> None:
        request = self._request(request_or_action_id)
        request.update(state="denied", decided_at=utc_now(), decided_by=self._tester())
        request["reason"] = reason
        self._move(self.actions[request["action"]], "blocked", block_reason="approval_denied")

    def pre_approve(
        self, tool: str, target: str, desired_state: dict, expected_version: int | None = None
    ) -> str:
        """A one-shot approval of this exact intent (POST /approvals); pass its id as
        `approval_id`."""
        binding = {
            "principal": self.principal,
            "tool": tool,
            "target": target,
            "desired_state": desired_state,
            "expected_version": expected_version,
        }
        return self._approval(binding, consumed_by=None)["id"]

    def replay(self, run_id: str) -> str:
        """A replay of a run, pending for the agent to claim (`client.claim()`)."""
        original = self.runs[run_id]
        replay = self._new_run(original["trigger"], original["config"], status="pending")
        replay["replay_of"] = run_id
        return replay["id"]

    def state(self, tool: str, target: str) -> dict[str, Any] | None:
        """The tool's record of `target`: {"state", "version"}, or None."""
        return copy.deepcopy(self.tools[tool].records.get(target))

    def effects(self, tool: str) -> list[dict[str, Any]]:
        """Every effect the tool applied: {"key", "target", "desired_state"}, in order."""
        return copy.deepcopy(self.tools[tool].effects)

    # --- HTTP ---------------------------------------------------------------------------

    ROUTES = [
        ("GET", r"/me", "me"),
        ("POST", r"/runs", "start"),
        ("POST", r"/runs/claim", "claim"),
        ("GET", r"/runs/(?P<id>[^/]+)", "run"),
        ("POST", r"/runs/(?P<id>[^/]+)/heartbeat", "heartbeat"),
        ("POST", r"/runs/(?P<id>[^/]+)/finish", "finish"),
        ("POST", r"/runs/(?P<id>[^/]+)/actions", "propose"),
        ("GET", r"/actions/(?P<id>[^/]+)", "action_get"),
        ("GET", r"/tools/(?P<name>[^/]+)", "tool_resource"),
    ]

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return self._problem(Problem(401, "unauthenticated", "Invalid or missing token."))
        path = request.url.path.removeprefix("/api/v1")
        for method, pattern, name in self.ROUTES:
            match = re.fullmatch(pattern, path)
            if match and request.method == method:
                try:
                    status, body = getattr(self, f"_{name}")(request, **match.groupdict())
                except Problem as exc:
                    return self._problem(exc)
                if status == 204:
                    return httpx.Response(204)
                return httpx.Response(status, json=body)
        detail = f"{request.method} {path} is not part of the fake (agent side only)."
        return self._problem(Problem(501, "not-implemented", detail))

    @staticmethod
    def _problem(exc: Problem) -> httpx.Response:
        return httpx.Response(
            exc.body["status"],
            json=exc.body,
            headers={"Content-Type": "application/problem+json"},
        )

    @staticmethod
    def _json(request: httpx.Request) -> dict[str, Any]:
        try:
            body = json.loads(request.content or b"{}")
        except ValueError:
            raise Problem(400, "validation-error", "The body is not JSON.") from None
        if not isinstance(body, dict):
            raise Problem(400, "validation-error", "The body must be a JSON object.")
        return body

    # --- the endpoints ----------------------------------------------------------------

    def _me(self, request):
        body = {"kind": "principal", "name": self.principal, "tenant": self.tenant, "roles": []}
        return 200, body

    def _start(self, request):
        body = self._json(request)
        if not request.headers.get("content-type", "").startswith("application/json"):
            raise Problem(400, "validation-error", "The fake takes JSON runs only (no file).")
        trigger = body.get("trigger")
        triggers = {"workflow", "schedule", "chat", "webhook", "api", "mcp"}
        if trigger not in triggers:
            raise Problem(
                400, "validation-error", "Invalid input.", {"trigger": ["Not a valid choice."]}
            )
        config = body.get("config") or {}
        run = self._new_run(trigger, config, session_id=body.get("session_id"))
        return 201, self._run_detail(run)

    def _claim(self, request):
        for run in self.runs.values():
            if run["status"] == "pending":
                run.update(status="running", started_at=utc_now(), attempts=run["attempts"] + 1)
                return 200, self._run_detail(run)
        return 204, None

    def _run(self, request, id):
        return 200, self._run_detail(self._get_run(id))

    def _heartbeat(self, request, id):
        run = self._running(id)
        run["heartbeat_at"] = utc_now()
        return 200, self._run_out(run)

    def _finish(self, request, id):
        run = self._running(id)
        body = self._json(request)
        if body.get("status") not in {"success", "error", "cancelled"}:
            raise Problem(
                400, "validation-error", "Invalid input.", {"status": ["Not a valid choice."]}
            )
        called = body.get("tools_called", [])
        recorded = {
            a["tool"]
            for a in self.actions.values()
            if a["run"] == id and (a["state"] not in {"awaiting_approval", "blocked", "queued"})
        }
        executed = None if called is None and not recorded else sorted(set(called or []) | recorded)
        run.update(
            status=body["status"],
            error_message=body.get("error_message") or "",
            tools_executed=executed,
            finished_at=utc_now(),
        )
        return 200, self._run_detail(run)

    def _propose(self, request, id):
        key = request.headers.get("Idempotency-Key")
        if not key:
            raise Problem(400, "idempotency-key-missing", "The Idempotency-Key header is missing.")
        body = self._json(request)
        missing = [f for f in ("tool", "target", "desired_state") if f not in body]
        if missing:
            errors = {f: ["This field is required."] for f in missing}
            raise Problem(400, "validation-error", "Invalid input.", errors)
        run = self._get_run(id)
        tool = self.tools.get(body["tool"])
        if tool is None:
            errors = {"tool": [f"No tool named {body['tool']!r} in this tenant."]}
            raise Problem(400, "validation-error", "Unknown tool.", errors)
        if run["status"] != "running":
            raise Problem(
                409,
                "run-not-running",
                f"This run is {run['status']}; only a running run may propose.",
            )
        desired, version = body["desired_state"], body.get("expected_version")
        fields = tool.identity_fields or sorted(desired)
        identity = {k: desired[k] for k in fields if k in desired}
        intent = [self.principal, tool.name, body["target"], identity, version]
        fingerprint = hashlib.sha256(canonical(intent).encode()).hexdigest()
        if key in self.ledger:
            known, action_id = self.ledger[key]
            if known != fingerprint:
                raise Problem(
                    422,
                    "idempotency-conflict",
                    "This Idempotency-Key was already used for a different intent (principal, "
                    "tool, target, identity fields or expected_version differ). Nothing was "
                    "created or dispatched.",
                )
            action = self.actions[action_id]
            changed = canonical(action["desired_state"]) != canonical(desired)
            return 200, {**self._action(action), "replayed": True, "content_changed": changed}
        action = self._new_action(run, tool, key, body)
        self.ledger[key] = (fingerprint, action["id"])
        answer = self._action(action)  # as proposed, before the dispatch below
        approval_id = body.get("approval_id")
        if approval_id is not None:
            problem = self._approval_problem(approval_id, action)
            if problem:
                self._move(action, "blocked", block_reason=problem)
                answer = self._action(action)
            else:
                self._dispatch(action)
        elif tool.requires_approval:
            self._open_request(action)
            answer = self._action(action)
        else:
            self._dispatch(action)
        return 201, answer

    def _action_get(self, request, id):
        action = self.actions.get(id)
        if action is None:
            raise Problem(404, "not-found", "Not found.")
        return 200, self._action(action)

    @staticmethod
    def _action(action):
        return {**copy.deepcopy(action), "replayed": False, "content_changed": False}

    def _tool_resource(self, request, name):
        tool = self.tools.get(name)
        if tool is None:
            raise Problem(404, "not-found", "Not found.")
        return 200, {
            "id": str(uuid.uuid5(uuid.NAMESPACE_URL, name)),
            "name": name,
            "effect": tool.effect,
            "lookup": False,
            "declared_by": None,
            "declared_at": None,
            "requires_approval": tool.requires_approval,
            "identity_fields": tool.identity_fields,
            "timeout_seconds": 10.0,
            "created_at": utc_now(),
            "kind": "http",
        }

    # --- the engine -------------------------------------------------------------------

    def _new_run(self, trigger, config, *, status="running", session_id=None):
        now = utc_now()
        run = {
            "id": str(uuid.uuid4()),
            "tenant": self.tenant,
            "principal": self.principal,
            "trigger": trigger,
            "config": copy.deepcopy(config),
            "input_file": None,
            "session_id": session_id or uuid.uuid4().hex,
            "status": status,
            "attempts": 1 if status == "running" else 0,
            "error_message": "",
            "replay_of": None,
            "tools_executed": None,
            "created_at": now,
            "started_at": now if status == "running" else None,
            "finished_at": None,
            "heartbeat_at": None,
        }
        self.runs[run["id"]] = run
        return run

    def _get_run(self, run_id):
        run = self.runs.get(run_id)
        if run is None:
            raise Problem(404, "not-found", "Not found.")
        return run

    def _running(self, run_id):
        run = self._get_run(run_id)
        if run["status"] != "running":
            raise Problem(409, "run-not-running", f"This run is {run['status']}.")
        return run

    def _run_out(self, run):
        return copy.deepcopy(run)

    def _run_detail(self, run):
        actions = [a for a in self.actions.values() if a["run"] == run["id"]]
        summary_fields = (
            "id",
            "tool",
            "target",
            "state",
            "idempotency_key",
            "block_reason",
            "failure_reason",
            "resolution",
            "created_at",
        )
        return {
            **copy.deepcopy(run),
            "actions": [{f: a[f] for f in summary_fields} for a in actions],
            "replay_verdict": {
                "allowed": False,
                "forceable": False,
                "gone": False,
                "message": "Replays are made by the test: FakeTakeover.replay(run_id).",
                "tools_at_risk": None,
                "not_applied": [],
                "safe_tools": [],
            },
        }

    def _new_action(self, run, tool, key, body):
        now = utc_now()
        action = {
            "id": str(uuid.uuid4()),
            "run": run["id"],
            "tenant": self.tenant,
            "principal": self.principal,
            "tool": tool.name,
            "target": body["target"],
            "desired_state": copy.deepcopy(body["desired_state"]),
            "expected_version": body.get("expected_version"),
            "idempotency_key": key,
            "effect": tool.effect,
            "state": "queued",
            "block_reason": None,
            "failure_reason": None,
            "resolution": None,
            "resolution_reason": None,
            "approval_id": body.get("approval_id"),
            "approval_request_id": None,
            "attempts": [],
            "reconciliations": [],
            "claimed_by": None,
            "origin": "api",
            "client": None,
            "created_at": now,
            "updated_at": now,
        }
        self.actions[action["id"]] = action
        return action

    def _move(self, action, state, **fields):
        action.update(state=state, updated_at=utc_now(), **fields)

    def _open_request(self, action):
        request = {
            "id": str(uuid.uuid4()),
            "action": action["id"],
            "tenant": self.tenant,
            "state": "pending",
            "principal": action["principal"],
            "tool": action["tool"],
            "target": action["target"],
            "desired_state": copy.deepcopy(action["desired_state"]),
            "expected_version": action["expected_version"],
            "reason": "",
            "created_at": utc_now(),
            "expires_at": None,
            "decided_by": None,
            "decided_at": None,
        }
        self.requests[request["id"]] = request
        self._move(action, "awaiting_approval", approval_request_id=request["id"])

    def _request(self, request_or_action_id):
        request = self.requests.get(request_or_action_id) or next(
            (r for r in self.requests.values() if r["action"] == request_or_action_id), None
        )
        if request is None or request["state"] != "pending":
            raise ValueError(f"no pending approval request {request_or_action_id!r}")
        return request

    def _tester(self):
        return {"kind": "operator", "name": "test"}

    def _approval(self, binding, *, consumed_by):
        approval = {
            "id": str(uuid.uuid4()),
            "state": "consumed" if consumed_by else "granted",
            **{k: copy.deepcopy(binding[k]) for k in self._binding_fields()},
            "consumed_by_action": consumed_by,
        }
        self.approvals[approval["id"]] = approval
        return approval

    @staticmethod
    def _binding_fields():
        return ("principal", "tool", "target", "desired_state", "expected_version")

    def _approval_problem(self, approval_id, action):
        approval = self.approvals.get(str(approval_id))
        if approval is None:
            return "approval_not_found"
        if approval["state"] == "consumed":
            return "approval_consumed"
        if any(canonical(approval[f]) != canonical(action[f]) for f in self._binding_fields()):
            return "approval_mismatch"
        approval.update(state="consumed", consumed_by_action=action["id"])
        return None

    def _scripted(self, action) -> str:
        for script in self.scripts.get(action["tool"], []):
            if script.target in (None, action["target"]) and script.times > 0:
                script.times -= 1
                return script.outcome
        return "applied"

    def _dispatch(self, action):
        """Send it to the tool, at once: the outcome a real worker would reach."""
        tool = self.tools[action["tool"]]
        outcome = self._scripted(action)
        record = tool.records.get(action["target"])
        version = record["version"] if record else 0
        expected = action["expected_version"]
        if outcome == "applied" and expected is not None and expected != version:
            outcome = "version_conflict"
        attempt = {
            "number": 1,
            "started_at": utc_now(),
            "finished_at": utc_now(),
            "outcome": {
                "applied": "applied",
                "rejected": "rejected",
                "not_sent": "not_sent",
                "version_conflict": "version_conflict",
            }.get(outcome, "unknown"),
            "http_status": {"applied": 200, "rejected": 422, "version_conflict": 409}.get(outcome),
            "detail": "",
            "kind": "send",
            "declaration": None,
        }
        action["attempts"].append(attempt)
        if outcome in {"rejected", "not_sent", "version_conflict"}:
            self._move(action, "failed", failure_reason=outcome)
            return
        if outcome == "needs_human":
            # The answer was lost and the read shows something else: nothing proven.
            current = copy.deepcopy(record) if record else None
            diff = [
                {"field": k, "desired": v, "actual": (current or {}).get("state", {}).get(k)}
                for k, v in action["desired_state"].items()
            ]
            self._reconciled(action, current, "mismatch" if current else "missing", diff)
            self._move(action, "needs_human")
            return
        record = tool.records.setdefault(action["target"], {"state": {}, "version": 0})
        record["state"].update(copy.deepcopy(action["desired_state"]))
        record["version"] += 1
        tool.effects.append(
            {
                "key": action["idempotency_key"],
                "target": action["target"],
                "desired_state": copy.deepcopy(action["desired_state"]),
            }
        )
        if outcome == "reconciled":
            self._reconciled(action, copy.deepcopy(record), "match", [])
        resolution = "reconciled" if outcome == "reconciled" else "applied"
        self._move(action, "succeeded", resolution=resolution)

    def _reconciled(self, action, authoritative, verdict, diff):
        action["reconciliations"].append(
            {
                "at": utc_now(),
                "authoritative": authoritative,
                "verdict": verdict,
                "diff": diff,
                "expected_version": action["expected_version"],
                "actual_version": authoritative["version"] if authoritative else None,
                "detail": "",
                "actor": None,
                "kind": "state",
                "declaration": None,
            }
        )


try:
    import pytest
except ImportError:  # pragma: no cover - the plugin needs pytest; the fake does not
    pass
else:

    @pytest.fixture
    def takeover_fake() -> Iterator[FakeTakeover]:
        """A fresh in-memory Takeover (`FakeTakeover`) for one test."""
        yield FakeTakeover()
