"""Guarded function tools for the OpenAI Agents SDK (`pip install takeover-client[openai-agents]`).

    from takeover_client.openai_agents import guarded_function_tool

    @guarded_function_tool("update_ticket", target_from="ticket_id")
    async def update_ticket(ticket_id: str, status: str) -> dict:
        '''Set the status of a support ticket.'''
        return {"status": status}

Equivalent to stacking `@function_tool` on `@guard(...)`. Call the agent inside
`async with run:` (an `AsyncRun`) for an `async def` tool, or `with run:` for a plain one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents import function_tool

from .guard import guard


def guarded_function_tool(tool: str, **guard_options: Any) -> Callable[[Callable], Any]:
    def decorate(fn: Callable) -> Any:
        return function_tool(guard(tool, **guard_options)(fn))

    return decorate
