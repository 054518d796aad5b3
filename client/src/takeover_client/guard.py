"""`guard`: turn an agent framework's tool function into "propose through Takeover, wait".

    @guard("update_ticket", target_from="ticket_id")
    def update_ticket(ticket_id: str, status: str) -> dict:
        '''Set a ticket's status.'''
        return {"status": status}          # the desired state; Takeover applies it

The decorated function keeps its name, signature and docstring (frameworks build the
model's tool schema from them). Its body no longer performs the effect: it returns the
`desired_state` (or None, meaning "every argument but the target"). The guard then proposes
that state on the current run (`with run:` / `async with run:`, or `run=`) under a key from
stable intent (`key_from`, default `run.key(tool, target)`: the trigger's event id, the tool,
the normalized target), waits for the outcome, and returns a small dict for the model:

    {"ok": true, "state": "succeeded", "replayed": false, "message": "Done.", ...}

A settled failure is *information for the model*, not a crash of the agent loop: `ok` is
false and `message` says what happened and that retrying will not help. Pass
`raise_on_failure=True` to get the typed exceptions (`Blocked`, `Failed`, `Conflict`,
`NeedsHuman`, `Pending`) instead. `Unavailable` and API errors always raise.

**Approvals pause, they do not block.** With `on_approval`, a proposal that comes back
`awaiting_approval` is handed to it as an *approval request* (`approval_request()`: the
request's id, the console link, the exact intent, the key), and no thread waits on it. The
framework adapters pass their own pause: LangGraph's `interrupt()` (takeover_client.langchain)
stops the graph there, and when the graph is resumed, maybe hours later and in another
process, the tool runs again, proposes again with the *same key* (and the `approval_id` the
resume value carries, if any) and so finds its own action, now approved and applied exactly
once. Without `on_approval` the guard waits up to `timeout` as before.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from . import _core
from .errors import Blocked, Conflict, Failed, NeedsHuman, OutcomeError, Pending

ArgPick = str | Callable[[dict[str, Any]], Any]

MESSAGES = {
    "succeeded": "Done.",
    "replayed": "Already done earlier under the same key (a ledger hit); nothing was sent again.",
    Blocked: "Not done, and it will not be: the approval was refused or is not valid "
    "({reason}). Do not retry; ask a person for a new approval.",
    Conflict: "Not done: the record changed since it was read (version conflict). Re-read it "
    "and decide again.",
    Failed: "Not done: the tool refused it ({reason}). Do not retry the same request.",
    NeedsHuman: "Outcome uncertain: it may or may not have been applied. A person will check "
    "it in the Takeover console. Do not retry.",
    Pending: "Not finished yet ({state}); Takeover will complete it (an approval may be "
    "pending). Do not retry.",
}


def _pick(spec: ArgPick | None, arguments: dict[str, Any], what: str) -> Any:
    if spec is None:
        return None
    if callable(spec):
        return spec(arguments)
    if spec not in arguments:
        raise TypeError(f"{what}: the tool has no argument {spec!r}")
    return arguments[spec]


def approval_request(outcome: Any, run: Any, key: str) -> dict[str, Any]:
    """What a person must decide, as plain JSON (a checkpoint can keep it): the approval
    request's id, where to decide it, and the exact intent an approval will be bound to."""
    action = outcome.action
    return {
        "type": "takeover.approval",
        "approval_request_id": action.approval_request_id,
        "action_id": action.id,
        "run": run.id,
        "console_url": f"{run.client.url}/actions/{action.id}/",
        "intent": {
            "principal": action.principal,
            "tool": action.tool,
            "target": action.target,
            "desired_state": action.desired_state,
            "expected_version": action.expected_version,
        },
        "idempotency_key": key,
        "message": f"{action.tool} on {action.target!r} waits for a person's approval in "
        "Takeover; the agent resumes once it is decided.",
    }


def result(outcome: Any, run: Any = None) -> dict[str, Any]:
    """The model's view of a succeeded outcome. A ledger hit on this run's own action that
    waited for an approval is the tool resumed after the decision: for the model, done now,
    not "done earlier"."""
    action = outcome.action
    resumed = run is not None and action.run == run.id and action.approval_request_id
    earlier = outcome.replayed and not resumed
    return {
        "ok": True,
        "state": action.state,
        "action_id": action.id,
        "replayed": outcome.replayed,
        "content_changed": outcome.content_changed,
        "resolution": action.resolution,
        "message": MESSAGES["replayed" if earlier else "succeeded"],
    }


def failure(exc: OutcomeError) -> dict[str, Any]:
    template = next(
        m for cls, m in MESSAGES.items() if isinstance(cls, type) and isinstance(exc, cls)
    )
    reason = getattr(exc, "reason", None)
    return {
        "ok": False,
        "state": exc.state,
        "action_id": exc.action_id,
        "reason": reason,
        "message": template.format(reason=reason, state=exc.state),
    }


def _approval_id(answer: Any) -> str | None:
    if isinstance(answer, dict):
        return answer.get("approval_id")
    return getattr(answer, "approval_id", None)


class Guard:
    """`guard(tool, target_from=..., ...)`, the decorator (module docstring).

    `target_from`, `key_from`, `expected_version_from` and `approval_id_from` are an
    argument's name or a function of the bound arguments (a dict). `run` is a Run/AsyncRun or
    a function returning one (default: the current run). `on_approval(request)` pauses
    instead of waiting for an approval."""

    def __init__(
        self,
        tool: str,
        *,
        target_from: ArgPick,
        key_from: ArgPick | None = None,
        expected_version_from: ArgPick | None = None,
        approval_id_from: ArgPick | None = None,
        timeout: float = 60.0,
        run: Any = None,
        raise_on_failure: bool = False,
        on_approval: Callable[[dict[str, Any]], Any] | None = None,
    ) -> None:
        self.tool = tool
        self.target_from = target_from
        self.key_from = key_from
        self.expected_version_from = expected_version_from
        self.approval_id_from = approval_id_from
        self.timeout = timeout
        self.run = run
        self.raise_on_failure = raise_on_failure
        self.on_approval = on_approval

    def resolve_run(self) -> Any:
        found = self.run() if callable(self.run) else self.run
        found = found or _core.current_run()
        if found is None:
            raise RuntimeError(
                f"guarded tool {self.tool!r} called outside a Takeover run: call it inside "
                "`with run:` (or `async with run:`), or pass guard(..., run=...)"
            )
        return found

    def proposal(self, fn: Callable, arguments: dict[str, Any], desired: Any) -> dict[str, Any]:
        """The `propose` keyword arguments for one call with these (bound) arguments."""
        target = _pick(self.target_from, arguments, "target_from")
        if desired is None:
            # Every argument but those that name the target, key, version or approval.
            specs = (self.target_from, self.key_from, self.expected_version_from)
            used = {s for s in (*specs, self.approval_id_from) if isinstance(s, str)}
            desired = {k: v for k, v in arguments.items() if k not in used}
        if not isinstance(desired, dict):
            raise TypeError(f"{fn.__name__} must return the desired state as a dict (or None)")
        return {
            "target": str(target),
            "desired_state": desired,
            "key": _pick(self.key_from, arguments, "key_from"),
            "expected_version": _pick(
                self.expected_version_from, arguments, "expected_version_from"
            ),
            "approval_id": _pick(self.approval_id_from, arguments, "approval_id_from"),
        }

    def key(self, run: Any, proposal: dict[str, Any]) -> str:
        return proposal["key"] or run.key(self.tool, proposal["target"])

    def __call__(self, fn: Callable) -> Callable:
        sig = inspect.signature(fn)

        def bound(args, kwargs) -> dict[str, Any]:
            arguments = sig.bind(*args, **kwargs)
            arguments.apply_defaults()
            return dict(arguments.arguments)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args, **kwargs):
                proposal = self.proposal(fn, bound(args, kwargs), await fn(*args, **kwargs))
                the_run = self.resolve_run()
                outcome = await the_run.propose(self.tool, **proposal)
                while outcome.state == "awaiting_approval" and self.on_approval is not None:
                    answer = self.on_approval(
                        approval_request(outcome, the_run, self.key(the_run, proposal))
                    )
                    if inspect.isawaitable(answer):
                        answer = await answer
                    again = {**proposal, "approval_id": _approval_id(answer)}
                    outcome = await the_run.propose(self.tool, **again)
                try:
                    return result(await outcome.wait(self.timeout), the_run)
                except OutcomeError as exc:
                    if self.raise_on_failure:
                        raise
                    return failure(exc)

            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            proposal = self.proposal(fn, bound(args, kwargs), fn(*args, **kwargs))
            the_run = self.resolve_run()
            if inspect.iscoroutinefunction(the_run.propose):
                raise RuntimeError(
                    f"guarded tool {self.tool!r} is synchronous but the run is an AsyncRun: "
                    "make the tool function `async def`"
                )
            outcome = the_run.propose(self.tool, **proposal)
            while outcome.state == "awaiting_approval" and self.on_approval is not None:
                # LangGraph's interrupt() raises here the first time (the graph pauses); on
                # resume it returns the resume value, and the same key finds the same action.
                answer = self.on_approval(
                    approval_request(outcome, the_run, self.key(the_run, proposal))
                )
                again = {**proposal, "approval_id": _approval_id(answer)}
                outcome = the_run.propose(self.tool, **again)
            try:
                return result(outcome.wait(self.timeout), the_run)
            except OutcomeError as exc:
                if self.raise_on_failure:
                    raise
                return failure(exc)

        return wrapper


# `guard(...)` reads as the decorator it is; the class is what it builds.
guard = Guard
