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


def _result(outcome: Any) -> dict[str, Any]:
    action = outcome.action
    return {
        "ok": True,
        "state": action["state"],
        "action_id": action["id"],
        "replayed": outcome.replayed,
        "content_changed": outcome.content_changed,
        "resolution": action.get("resolution"),
        "message": MESSAGES["replayed" if outcome.replayed else "succeeded"],
    }


def _failure(exc: OutcomeError) -> dict[str, Any]:
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


def guard(
    tool: str,
    *,
    target_from: ArgPick,
    key_from: ArgPick | None = None,
    expected_version_from: ArgPick | None = None,
    approval_id_from: ArgPick | None = None,
    timeout: float = 60.0,
    run: Any = None,
    raise_on_failure: bool = False,
) -> Callable[[Callable], Callable]:
    """See the module docstring. `target_from`, `key_from`, `expected_version_from` and
    `approval_id_from` are an argument's name or a function of the bound arguments (a dict).
    `run` is a Run/AsyncRun or a function returning one (default: the current run)."""

    def resolve_run() -> Any:
        found = run() if callable(run) else run
        found = found or _core.current_run()
        if found is None:
            raise RuntimeError(
                f"guarded tool {tool!r} called outside a Takeover run: call it inside "
                "`with run:` (or `async with run:`), or pass guard(..., run=...)"
            )
        return found

    def prepare(fn: Callable, sig: inspect.Signature, args, kwargs, desired) -> dict[str, Any]:
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        target = _pick(target_from, arguments, "target_from")
        if desired is None:
            # Every argument but those that name the target, key, version or approval.
            used = {
                spec
                for spec in (target_from, key_from, expected_version_from, approval_id_from)
                if isinstance(spec, str)
            }
            desired = {k: v for k, v in arguments.items() if k not in used}
        if not isinstance(desired, dict):
            raise TypeError(f"{fn.__name__} must return the desired state as a dict (or None)")
        return {
            "target": str(target),
            "desired_state": desired,
            "key": _pick(key_from, arguments, "key_from"),
            "expected_version": _pick(expected_version_from, arguments, "expected_version_from"),
            "approval_id": _pick(approval_id_from, arguments, "approval_id_from"),
        }

    def decorate(fn: Callable) -> Callable:
        sig = inspect.signature(fn)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args, **kwargs):
                proposal = prepare(fn, sig, args, kwargs, await fn(*args, **kwargs))
                the_run = resolve_run()
                outcome = await the_run.propose(tool, **proposal)
                try:
                    return _result(await outcome.wait(timeout))
                except OutcomeError as exc:
                    if raise_on_failure:
                        raise
                    return _failure(exc)

            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            proposal = prepare(fn, sig, args, kwargs, fn(*args, **kwargs))
            the_run = resolve_run()
            if inspect.iscoroutinefunction(the_run.propose):
                raise RuntimeError(
                    f"guarded tool {tool!r} is synchronous but the run is an AsyncRun: "
                    "make the tool function `async def`"
                )
            outcome = the_run.propose(tool, **proposal)
            try:
                return _result(outcome.wait(timeout))
            except OutcomeError as exc:
                if raise_on_failure:
                    raise
                return _failure(exc)

        return wrapper

    return decorate
