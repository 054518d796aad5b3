"""Guarded function tools for the OpenAI Agents SDK (`pip install takeover-client[openai-agents]`).

    from takeover_client.openai_agents import guarded_function_tool

    @guarded_function_tool("update_ticket", target_from="ticket_id")
    async def update_ticket(ticket_id: str, status: str) -> dict:
        '''Set the status of a support ticket.'''
        return {"status": status}

Equivalent to stacking `@function_tool` on `@guard(...)`. Call the agent inside
`async with run:` (an `AsyncRun`) for an `async def` tool, or `with run:` for a plain one.

**Approvals use the SDK's own flow** (`pause_for_approval=True`, the default). For a tool
that Takeover says `requires_approval`, the tool's `needs_approval` proposes the call first,
so the approval request exists in Takeover, and interrupts the run: `result.interruptions`
holds the call, and `result.to_state()` is a state you can store (`to_string()`) while a
person decides; nothing waits. Later, in any process:

    state = await RunState.from_string(agent, saved)
    run = await client.run(run_id)                    # the same Takeover run
    async with run.attach():
        undecided = await apply_decisions(state)      # approve/reject by Takeover's decision
        if not undecided:
            result = await Runner.run(agent, state)   # the tool runs: same key, same action
    await run.finish()

`approval_requests(result.interruptions)` gives, per interruption, what a person must decide
(the request's id, the console link, the exact intent). A denied approval rejects the call
in the SDK with Takeover's words; an approved one lets the tool run, which proposes again
under the same key and finds its own action, applied exactly once. Use `async with
run.attach()` (not `async with run:`), so that pausing does not finish the run.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable
from typing import Any

from agents import function_tool

from .errors import Blocked
from .guard import MESSAGES, Guard, approval_request, guard

# The SDK's tool name → (the guard, the tool function): to find a paused call's action.
GUARDED: dict[str, tuple[Guard, Callable]] = {}


async def _propose(the_run: Any, g: Guard, fn: Callable, arguments: dict[str, Any]):
    desired = fn(**arguments)
    if inspect.isawaitable(desired):
        desired = await desired
    proposal = g.proposal(fn, arguments, desired)
    key = g.key(the_run, proposal)
    if inspect.iscoroutinefunction(the_run.propose):
        return await the_run.propose(g.tool, **proposal), key
    return await asyncio.to_thread(the_run.propose, g.tool, **proposal), key


async def _requires_approval(the_run: Any, tool: str) -> bool:
    cache = the_run.client.__dict__.setdefault("_requires_approval", {})
    if tool not in cache:
        found = the_run.client.api.tools_retrieve(tool)
        cache[tool] = (await found if inspect.isawaitable(found) else found).requires_approval
    return cache[tool]


def guarded_function_tool(
    tool: str, *, pause_for_approval: bool = True, **guard_options: Any
) -> Callable[[Callable], Any]:
    def decorate(fn: Callable) -> Any:
        g = guard(tool, **guard_options)
        if not pause_for_approval:
            return function_tool(g(fn))

        async def needs_approval(context: Any, arguments: dict[str, Any], call_id: str) -> bool:
            the_run = g.resolve_run()
            if not await _requires_approval(the_run, tool):
                return False
            outcome, _ = await _propose(the_run, g, fn, arguments)
            return outcome.state == "awaiting_approval"

        made = function_tool(g(fn), needs_approval=needs_approval)
        GUARDED[made.name] = (g, fn)
        return made

    return decorate


async def _paused(item: Any, run: Any = None):
    g, fn = GUARDED[item.name]
    the_run = run or g.resolve_run()
    outcome, key = await _propose(the_run, g, fn, json.loads(item.arguments or "{}"))
    return the_run, outcome, key


async def approval_requests(interruptions: list[Any], run: Any = None) -> list[dict[str, Any]]:
    """What a person must decide for each paused call of a guarded tool (others skipped):
    the approval request's id, the console link, the exact intent. Proposing again under
    the same key finds the existing action; nothing new is created."""
    found = []
    for item in interruptions:
        if getattr(item, "name", None) in GUARDED:
            the_run, outcome, key = await _paused(item, run)
            if outcome.state == "awaiting_approval":
                found.append(approval_request(outcome, the_run, key))
    return found


async def apply_decisions(state: Any, run: Any = None) -> list[dict[str, Any]]:
    """Approve or reject, in the SDK's `state`, each paused call of a guarded tool as a person
    decided it in Takeover; return the approval requests still undecided (empty: resume)."""
    undecided = []
    for item in state.get_interruptions():
        if getattr(item, "name", None) not in GUARDED:
            continue
        the_run, outcome, key = await _paused(item, run)
        if outcome.state == "awaiting_approval":
            undecided.append(approval_request(outcome, the_run, key))
        elif outcome.state == "blocked":
            reason = outcome.action.block_reason
            state.reject(item, rejection_message=MESSAGES[Blocked].format(reason=reason))
        else:
            state.approve(item)
    return undecided
