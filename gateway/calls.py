"""What `/mcp` does, in Django's terms (docs/mcp.md). Plain synchronous
functions: the SDK's handlers (`gateway/server.py`) run them in the request's own thread
(`gateway/bridge.py`).

`tools/call` is a proposal (runs/propose.py) and a bounded wait for its outcome:

- the key is `_meta["io.takeover/idempotency-key"]`, else derived from the call (the run,
  the tool and a digest of the canonical arguments, the agent's `reason` left out), so a
  call re-issued after a cut stream is a ledger hit, never a second effect;
- the run is `_meta["io.takeover/run"]`, else the one Takeover keeps for this principal and
  MCP client (trigger `mcp`, session `mcp:<client name>`), so replay works as for any run;
- a tool that needs an approval answers `input_required` (2026-07-28: a URL elicitation of
  the approval in the console, and a sealed single-use `requestState`), or on older
  protocol versions a result that says `awaiting_approval` with the link.
"""

import hashlib
import json
import re
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta

import jsonschema
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from mcp_types import INVALID_PARAMS

from core import rows
from core.audit import DISPATCHER, Actor
from core.canonical import canonical_json
from core.errors import IdempotencyConflict, RunNotRunning
from core.jsonsafe import problem_in
from core.models import Tool, ToolEffect, ToolKind
from runs import origin, selectors
from runs.engine.dispatch import claim_for, dispatch_leased
from runs.engine.leases import lease_for
from runs.engine.mcp import split_arguments, take_answer
from runs.models import Run
from runs.propose import action_propose, read_claimed
from runs.runtime import run_start
from runs.states import IN_PROGRESS, ActionState, RunStatus, Trigger
from runs.waits import WaitRefused, waiters, watch

KEY_META = "io.takeover/idempotency-key"
RUN_META = "io.takeover/run"
IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")

# An HTTP tool's arguments (docs/mcp.md).
HTTP_SCHEMA = {
    "type": "object",
    "properties": {
        "target": {
            "type": "string",
            "minLength": 1,
            "maxLength": 500,
            "description": "What the effect is applied to (a ticket id, an address, ...).",
        },
        "desired_state": {
            "type": "object",
            "description": "The fields the target should have once the effect is applied.",
        },
        "expected_version": {
            "type": ["integer", "null"],
            "description": "Apply only if the target is still at this version (optional).",
        },
        "reason": {
            "type": "string",
            "maxLength": 5000,
            "description": "Why, in your own words: shown to a person who approves it.",
        },
    },
    "required": ["target", "desired_state"],
    "additionalProperties": False,
}


class CallRefused(Exception):
    """A request the protocol refuses (an MCP error, not a tool result): `code`, words."""

    def __init__(self, message: str, code: int = INVALID_PARAMS):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class Caller:
    """Who is calling /mcp, as the view authenticated them."""

    principal: object
    client: str  # the MCP client's name, or what its User-Agent says
    console: str  # the console's origin, for approval links

    @property
    def actor(self) -> Actor:
        return Actor("principal", self.principal.name)


# --- tools/list ---------------------------------------------------------------------------


def annotations_for(tool: Tool) -> dict:
    if tool.effect == ToolEffect.READ_ONLY:
        return {"readOnlyHint": True}
    if tool.effect == ToolEffect.IDEMPOTENT:
        return {"readOnlyHint": False, "idempotentHint": True, "destructiveHint": False}
    return {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": False}


def description_for(tool: Tool) -> str:
    words = {
        ToolEffect.READ_ONLY: "reads, changes nothing",
        ToolEffect.IDEMPOTENT: "applied at most once per key",
        ToolEffect.UNSAFE: "applied at most once per key; an unknown outcome goes to a person",
    }[tool.effect]
    approval = "; needs a person's approval" if tool.requires_approval else ""
    upstream = f" (MCP tool {tool.mcp['tool']})" if tool.kind == ToolKind.MCP else ""
    return f"{tool.name}{upstream} through Takeover: {words}{approval}."


def input_schema_for(tool: Tool) -> dict:
    if tool.kind == ToolKind.MCP:
        return (tool.mcp or {}).get("input_schema") or {"type": "object"}
    return HTTP_SCHEMA


def list_tools(caller: Caller) -> list[dict]:
    tools = Tool.objects.filter(tenant_id=caller.principal.tenant_id).order_by("name")
    return [
        {
            "name": tool.name,
            "description": description_for(tool),
            "inputSchema": input_schema_for(tool),
            "annotations": annotations_for(tool),
        }
        for tool in tools
    ]


# --- tools/call: the intent ---------------------------------------------------------------


_validators: dict[str, object] = {}


def validator_for(schema: dict):
    """A validator per schema, built (and the schema checked) once per process: building
    one costs far more than validating with it. An upstream schema that is not a valid
    JSON Schema checks nothing here (the upstream still checks its own arguments)."""
    key = canonical_json(schema)
    validator = _validators.get(key)
    if validator is None:
        cls = jsonschema.validators.validator_for(schema)
        try:
            cls.check_schema(schema)
        except jsonschema.SchemaError:
            schema = {}
        validator = cls(schema)
        if len(_validators) > 1000:
            _validators.clear()
        _validators[key] = validator
    return validator


def _intent(tool: Tool, arguments: dict) -> dict:
    """The proposal's `target`, `desired_state`, `expected_version` and `reason` from the
    arguments, or ValueError in words a model can act on."""
    error = jsonschema.exceptions.best_match(
        validator_for(input_schema_for(tool)).iter_errors(arguments)
    )
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "arguments"
        raise ValueError(f"{where}: {error.message}")
    if (why := problem_in(arguments)) is not None:
        raise ValueError(f"arguments: {why}")
    if tool.kind == ToolKind.MCP:
        target, desired = split_arguments(tool, arguments)
        return {"target": target, "desired_state": desired, "expected_version": None, "reason": ""}
    version = arguments.get("expected_version")
    if version is not None and not -(2**63) <= version < 2**63:
        raise ValueError("expected_version: outside 64-bit integers")
    return {
        "target": arguments["target"],
        "desired_state": arguments["desired_state"],
        "expected_version": version,
        "reason": (arguments.get("reason") or "").strip(),
    }


def derived_key(run_id, tool: Tool, arguments: dict) -> str:
    """The key of a call that names none: the run, the tool and a digest of the canonical
    arguments (the agent's words, `reason`, left out: a reworded reason is the same effect)."""
    intent = {k: v for k, v in arguments.items() if not (k == "reason" and tool.kind == "http")}
    digest = hashlib.sha256(canonical_json(intent).encode()).hexdigest()[:32]
    return f"mcp:{run_id}:{tool.name}:{digest}"


def session_of(caller: Caller) -> str:
    return f"mcp:{caller.client or 'unnamed'}"[:255]


# The tool a call names and, unless the call names its own run, the run Takeover keeps for
# the caller: one read (the two ORM queries cost more in compilation than in the database).
TOOL_AND_RUN = f"""
SELECT {rows.columns(Tool, "t")}, {rows.columns(Run, "r")}
FROM core_tool t
LEFT JOIN LATERAL (
    SELECT * FROM runs_run
    WHERE %(want_run)s AND principal_id = %(principal)s AND trigger = %(trigger)s
      AND session_id = %(session)s AND status = %(running)s
    ORDER BY created_at DESC
    LIMIT 1
) r ON true
WHERE t.tenant_id = %(tenant)s AND t.name = %(name)s
"""  # noqa: S608 -- column names from the models, no input


def tool_and_kept_run(
    caller: Caller, name: str, *, want_run: bool
) -> tuple[Tool | None, Run | None]:
    """The tenant's tool called `name` (None: no such tool) and, when `want_run`, the newest
    running run Takeover keeps for this principal and MCP client (None: none yet)."""
    principal = caller.principal
    with connection.cursor() as cursor:
        cursor.execute(
            TOOL_AND_RUN,
            {
                "want_run": want_run,
                "principal": principal.pk,
                "trigger": Trigger.MCP,
                "session": session_of(caller),
                "running": RunStatus.RUNNING,
                "tenant": principal.tenant_id,
                "name": name,
            },
        )
        row = cursor.fetchone()
    if row is None:
        return None, None
    width = rows.width(Tool)
    tool = rows.instance(Tool, row[:width])
    run = rows.instance(Run, row[width:]) if row[width] is not None else None
    return tool, run


def _newest_running(principal, session: str):
    return (
        Run.objects.filter(
            principal=principal, trigger=Trigger.MCP, session_id=session, status=RunStatus.RUNNING
        )
        .order_by("-created_at")
        .first()
    )


def kept_run(caller: Caller, running: Run | None = None) -> Run:
    """The run Takeover keeps for this principal and MCP client: the newest running one
    (`running`, when the caller read it already), or a new one (trigger `mcp`). Kept alive
    by its calls (a heartbeat at most once a minute), so that the stale-run reaper leaves
    it alone while the client works."""
    session = session_of(caller)
    principal = caller.principal
    if running is None:
        running = _newest_running(principal, session)
    run = running
    if run is not None:
        run.principal, run.tenant = principal, principal.tenant
        _keep_alive(run)
        return run
    with transaction.atomic():
        # One creator per (principal, client) across processes: a transaction-level lock.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                [f"mcp-run:{principal.pk}:{session}"],
            )
        run = _newest_running(principal, session)  # again, now that we hold the lock
        if run is None:
            run = run_start(
                principal=principal,
                trigger=Trigger.MCP,
                config={"mcp_client": caller.client},
                session_id=session,
                actor=caller.actor,
            )
        run.principal = principal
    _keep_alive(run)
    return run


def _keep_alive(run: Run) -> None:
    now = timezone.now()
    if run.heartbeat_at is None or run.heartbeat_at < now - timedelta(minutes=1):
        Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING).update(heartbeat_at=now)


def named_run(caller: Caller, value) -> Run:
    try:
        pk = uuid.UUID(str(value))
    except ValueError as exc:
        raise CallRefused(f"_meta[{RUN_META!r}] must be a run id (a UUID).") from exc
    run = (
        Run.objects.select_related("tenant", "principal")
        .filter(pk=pk, principal=caller.principal)
        .first()
    )
    if run is None:
        raise CallRefused(f"_meta[{RUN_META!r}]: no run {pk} of this principal.")
    return run


def meta_key(meta: dict) -> str | None:
    if KEY_META not in meta or meta[KEY_META] is None:
        return None
    key = meta[KEY_META]
    if not isinstance(key, str) or not IDEMPOTENCY_KEY.fullmatch(key):
        raise CallRefused(
            f"_meta[{KEY_META!r}] must be 1 to 255 visible ASCII characters "
            "(a stable key from the triggering event, not from generated text)."
        )
    return key


# --- tools/call: the outcome --------------------------------------------------------------


@dataclass
class Outcome:
    """What a call ended in: a result for the model (`result`), or an approval to wait for
    (`awaiting`: the action's id and the console link)."""

    result: dict | None = None
    awaiting: dict | None = None


def wait_for(caller: Caller, action_id, seconds: float):
    """The action's view once it leaves the in-progress states, or after `seconds`
    (runs/waits.py: no poll loop; over the per-principal cap, at once)."""
    principal_id = caller.principal.pk
    view = selectors.action_view(action_id, principal_id=principal_id)
    if seconds <= 0 or view[0].state not in IN_PROGRESS:
        return view
    key = ("principal", principal_id)
    try:
        event = waiters.register(action_id, key)
    except WaitRefused:
        return view
    try:
        deadline = time.monotonic() + seconds
        # Marked, its settle is announced; read again only if it moved since the first read.
        if watch(action_id) != view[0].state:
            view = selectors.action_view(action_id, principal_id=principal_id)
        while view[0].state in IN_PROGRESS:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not event.wait(remaining):
                break
            event.clear()
            view = selectors.action_view(action_id, principal_id=principal_id)
    finally:
        waiters.unregister(action_id, key, event)
    return view


def approval_link(caller: Caller, action_id) -> str:
    return f"{caller.console.rstrip('/')}/actions/{action_id}/"


WORDS = {
    ActionState.SUCCEEDED: "Done: the effect is applied (once).",
    ActionState.UNKNOWN: (
        "The outcome is unknown: the tool may or may not have applied it. Takeover is "
        "reconciling it against the authoritative state, and a person will resolve it if it "
        "cannot be proven. Do not retry with another key; call again with the same "
        "arguments to learn the outcome."
    ),
    ActionState.NEEDS_HUMAN: (
        "The outcome could not be proven; a person will resolve it. Do not retry with another "
        "key or with other words: that could apply it twice."
    ),
}
FAILURES = {
    "version_conflict": (
        "The tool refused: the target changed since expected_version. Read its current "
        "state and decide again."
    ),
    "rejected": "The tool rejected this call; nothing was applied. Do not repeat it unchanged.",
    "not_sent": (
        "The tool could not be reached; nothing was applied. Call again later with the same "
        "arguments."
    ),
}


def _parsed(text: str):
    """A tool's answer as JSON when it is JSON (an HTTP tool's `{"state", "version"}`)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def result_for(resource: dict, *, replayed: bool, changed: bool) -> dict:
    """A CallToolResult (as a dict) from the action's resource."""
    state = resource["state"]
    attempts = resource.get("attempts") or []
    answer = next(
        (a.get("detail") for a in reversed(attempts) if a.get("outcome") == "applied"), None
    )
    structured = {
        "action_id": resource["id"],
        "state": state,
        "replayed": replayed,
        "content_changed": changed,
        "idempotency_key": resource["idempotency_key"],
        "block_reason": resource.get("block_reason"),
        "failure_reason": resource.get("failure_reason"),
        "resolution": resource.get("resolution"),
    }
    if answer:
        structured["answer"] = _parsed(answer)
    if state in WORDS:
        text = WORDS[state]
    elif state == ActionState.FAILED:
        text = FAILURES.get(resource.get("failure_reason") or "", "The call failed.")
    elif state == ActionState.BLOCKED:
        reason = resource.get("block_reason")
        text = f"Blocked ({reason}): nothing was applied and nothing will be. " + (
            "An approver denied it; do not ask again unchanged."
            if reason == "approval_denied"
            else "The approval it needed is no longer valid; a new call needs a new one."
        )
    elif state == ActionState.AWAITING_APPROVAL:
        text = "Waiting for a person's approval; nothing is applied before it."
    else:
        text = (
            f"Still in progress ({state}). Call this tool again with the same arguments (and "
            "the same key, if you gave one) to get the outcome: it will not be applied twice."
        )
    if replayed:
        text += " (This call was already made with this key: no new effect.)"
    if answer and state == ActionState.SUCCEEDED:
        text += f" The tool answered: {answer}"
    return {
        "content": [{"type": "text", "text": text}],
        "structuredContent": structured,
        "isError": state
        in (ActionState.FAILED, ActionState.BLOCKED, ActionState.UNKNOWN, ActionState.NEEDS_HUMAN),
    }


def _passed_through(action, upstream: dict | None) -> dict:
    """A read that succeeded in this thread: its result without reading the action back."""
    resource = {
        "id": str(action.pk),
        "state": action.state,
        "idempotency_key": action.idempotency_key,
        "block_reason": None,
        "failure_reason": None,
        "resolution": action.resolution or None,
        "attempts": [],
    }
    result = result_for(resource, replayed=False, changed=False)
    if upstream is not None:
        result["content"] = upstream.get("content") or result["content"]
        if upstream.get("structuredContent") is not None:
            result["structuredContent"]["answer"] = upstream["structuredContent"]
    else:  # an HTTP tool: its answer as the attempt kept it
        detail = action.attempts.values_list("detail", flat=True).order_by("-number").first()
        if detail:
            result["structuredContent"]["answer"] = _parsed(detail)
    return result


def tool_error(text: str) -> dict:
    return {"content": [{"type": "text", "text": text}], "isError": True}


def call_tool(caller: Caller, name: str, arguments: dict | None, meta: dict) -> Outcome:
    """Propose the call as an action, and wait (bounded) for its outcome."""
    named = meta.get(RUN_META)
    tool, running = tool_and_kept_run(caller, name, want_run=not named)
    if tool is None:
        raise CallRefused(f"Unknown tool {name!r}: tools/list names this tenant's tools.")
    key = meta_key(meta)
    arguments = arguments if arguments is not None else {}
    try:
        intent = _intent(tool, arguments)
    except ValueError as exc:
        return Outcome(tool_error(f"Invalid arguments for {name}: {exc}. Nothing was applied."))
    run = named_run(caller, named) if named else kept_run(caller, running)
    proposal = {"run": run, "tool": tool, "actor": caller.actor, **intent}
    if tool.effect == ToolEffect.READ_ONLY:
        return _read(caller, key, proposal)
    if key is None:
        key = derived_key(run.pk, tool, arguments)
    wait = settings.MCP_CALL_WAIT_SECONDS
    deadline = time.monotonic() + wait
    # Waiting at least as long as the whole dispatch can take, the call is its own worker
    # (runs/claim.py), as `POST /runs/{id}/actions?wait=` is.
    claim = claim_for(tool, wait)
    try:
        with origin.proposing_from(origin.MCP, caller.client):
            action, created, changed = action_propose(idempotency_key=key, **claim, **proposal)
    except IdempotencyConflict:
        return Outcome(
            tool_error(
                f"The key {key!r} was already used for a different call (another tool, target "
                "or intent). Nothing was created or applied. Use the key of this call's own "
                "triggering event."
            )
        )
    except RunNotRunning as exc:
        return Outcome(tool_error(f"{exc} Start a new run, or leave out {RUN_META!r}."))
    if action.state == ActionState.AWAITING_APPROVAL:
        return Outcome(
            awaiting={"action": str(action.pk), "link": approval_link(caller, action.pk)}
        )
    if created and action.state == ActionState.DISPATCHING:  # claimed: dispatch it here
        dispatch_leased(action, action.claimed_attempt)
    left = max(0.0, deadline - time.monotonic())
    _, resource = wait_for(caller, action.pk, left)
    return Outcome(result_for(resource, replayed=not created, changed=changed))


def _read(caller, key: str | None, proposal: dict) -> Outcome:
    """A read_only tool's call passes through: recorded as an action (no ledger key, no
    approval), proposed and claimed at once (`runs.propose.read_claimed`), dispatched here,
    in this request's thread, by the engine's own dispatch and settle, and its whole answer
    handed back. No worker is woken for it and none can take it.

    Its two writes (the claim and the settle) are committed without waiting for the WAL to
    reach the disk (`synchronous_commit = off` within each statement's own transaction,
    nothing left set on the connection): a crash may lose the record of a read from its
    last fraction of a second; a read changed nothing, and every side effect's records keep
    waiting for the flush as always."""
    try:
        with origin.proposing_from(origin.MCP, caller.client):
            action, attempt = read_claimed(
                key=key,
                claimer=DISPATCHER,
                lease=lease_for(proposal["tool"]),
                unflushed=True,
                **proposal,
            )
    except RunNotRunning as exc:
        return Outcome(tool_error(f"{exc} Start a new run, or leave out {RUN_META!r}."))
    dispatch_leased(action, attempt, unflushed=True)
    upstream = take_answer(action.pk)
    if action.state == ActionState.SUCCEEDED:
        return Outcome(_passed_through(action, upstream))
    _, resource = wait_for(caller, action.pk, settings.MCP_CALL_WAIT_SECONDS)
    return Outcome(result_for(resource, replayed=False, changed=False))
