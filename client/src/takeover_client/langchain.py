"""Guarded tools for LangChain and LangGraph (`pip install takeover-client[langchain]`).

    from takeover_client.langchain import guarded_tool

    @guarded_tool("update_ticket", target_from="ticket_id")
    def update_ticket(ticket_id: str, status: str) -> dict:
        '''Set the status of a support ticket.'''
        return {"status": status}

Equivalent to stacking `@tool` (langchain_core.tools) on `@guard(...)`; the result is a
regular `BaseTool`, so it works in LangGraph's `ToolNode` and `create_react_agent`.

**Approvals pause the graph** (`pause_for_approval=True`, the default): a proposal that
needs a person calls LangGraph's `interrupt()` with the approval request (its id, the
console link, the exact intent and the key; see `takeover_client.guard.approval_request`),
so the graph stops and is checkpointed, and nothing waits. Resume it once the approval is
decided, in any process that has the checkpointer and the run:

    snapshot = graph.get_state(config)           # snapshot.interrupts[0].value: the request
    run = client.run(request["run"])             # the same Takeover run, still running
    with run.attach():
        graph.invoke(Command(resume={}), config)  # or {"approval_id": ...}
    run.finish()                                  # when the graph is done

On resume the tool runs again from its start and proposes with the same key: Takeover
answers with the same action, approved and applied once (or blocked, if it was denied).
Run the graph inside `with run.attach():` (not `with run:`), so that a pause does not finish
the run; a run paused longer than the server's `RUN_STALE_AFTER` (6 hours) is reaped, and
the resumed tool's proposal is then refused (409 `run-not-running`). `interrupt()` needs a
checkpointer, as LangGraph says; `pause_for_approval=False` waits instead (`timeout`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.tools import tool as lc_tool

from .guard import guard


def _interrupt(request: dict[str, Any]) -> Any:
    from langgraph.types import interrupt

    return interrupt(request)


def guarded_tool(
    tool: str, *, pause_for_approval: bool = True, **guard_options: Any
) -> Callable[[Callable], Any]:
    if pause_for_approval:
        guard_options.setdefault("on_approval", _interrupt)

    def decorate(fn: Callable) -> Any:
        return lc_tool(guard(tool, **guard_options)(fn))

    return decorate
