"""Guarded tools for LangChain and LangGraph (`pip install takeover-client[langchain]`).

    from takeover_client.langchain import guarded_tool

    @guarded_tool("update_ticket", target_from="ticket_id")
    def update_ticket(ticket_id: str, status: str) -> dict:
        '''Set the status of a support ticket.'''
        return {"status": status}

Equivalent to stacking `@tool` (langchain_core.tools) on `@guard(...)`; the result is a
regular `BaseTool`, so it works in LangGraph's `ToolNode` and `create_react_agent`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.tools import tool as lc_tool

from .guard import guard


def guarded_tool(tool: str, **guard_options: Any) -> Callable[[Callable], Any]:
    def decorate(fn: Callable) -> Any:
        return lc_tool(guard(tool, **guard_options)(fn))

    return decorate
