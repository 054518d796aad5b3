"""A LangGraph agent (StateGraph + ToolNode) whose ticket update goes through Takeover.

    TAKEOVER_URL=http://127.0.0.1:8000 TAKEOVER_TOKEN=... \
        python examples/langgraph_ticket.py --event evt_1 --ticket T-1001

The chat model is LangChain's `GenericFakeChatModel` with a script: one tool call, then an
answer. No API key, no network but Takeover. Prints one JSON line: the tool's result as the
model saw it, the final answer and the run id.
"""

import argparse
import json
import os

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from takeover_client import Takeover
from takeover_client.langchain import guarded_tool


@guarded_tool("update_ticket", target_from="ticket_id")
def update_ticket(ticket_id: str, status: str) -> dict:
    """Set the status of a support ticket (open, pending or solved)."""
    return {"status": status}  # the desired state: Takeover applies it, exactly once


class ScriptedChatModel(GenericFakeChatModel):
    """A fake chat model that accepts tools (the script already knows what to call)."""

    def bind_tools(self, tools, **kwargs):
        return self


def build_graph(model):
    def call_model(state: MessagesState):
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode([update_ticket]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--event", required=True, help="the trigger's event id")
    parser.add_argument("--ticket", required=True)
    args = parser.parse_args()
    call = {
        "name": "update_ticket",
        "args": {"ticket_id": args.ticket, "status": "solved"},
        "id": "call_1",
        "type": "tool_call",
    }
    model = ScriptedChatModel(
        messages=iter(
            [AIMessage(content="", tool_calls=[call]), AIMessage(f"Ticket {args.ticket} solved.")]
        )
    ).bind_tools([update_ticket])
    app = build_graph(model)
    with Takeover(os.environ["TAKEOVER_URL"], os.environ["TAKEOVER_TOKEN"]) as client:
        config = {"ticket": args.ticket, "message": "It works now, thanks!"}
        with client.start_run("chat", config, event_id=args.event) as run:
            state = app.invoke({"messages": [HumanMessage(config["message"])]})
    outputs = [json.loads(m.content) for m in state["messages"] if isinstance(m, ToolMessage)]
    print(
        json.dumps({"run": run.id, "tool_results": outputs, "final": state["messages"][-1].content})
    )


if __name__ == "__main__":
    main()
