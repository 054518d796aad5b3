"""A LangGraph agent (StateGraph + ToolNode) whose ticket update goes through Takeover.

    TAKEOVER_URL=http://127.0.0.1:8000 TAKEOVER_TOKEN=... \
        python examples/langgraph_ticket.py --event evt_1 --ticket T-1001

The chat model is LangChain's `GenericFakeChatModel` with a script: one tool call, then an
answer. No API key, no network but Takeover. Prints one JSON line per delivery of the
message: the tool's result as the model saw it, the final answer and the run id. With
`--deliveries 2` the second delivery's tool call is a ledger hit.
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


def handle(client: Takeover, event: str, ticket: str) -> dict:
    """One delivery of the chat message: a run, the graph, the run finished by `with`."""
    call = {
        "name": "update_ticket",
        "args": {"ticket_id": ticket, "status": "solved"},
        "id": "call_1",
        "type": "tool_call",
    }
    script = [AIMessage(content="", tool_calls=[call]), AIMessage(f"Ticket {ticket} solved.")]
    app = build_graph(ScriptedChatModel(messages=iter(script)).bind_tools([update_ticket]))
    config = {"ticket": ticket, "message": "It works now, thanks!"}
    with client.start_run("chat", config, event_id=event) as run:
        state = app.invoke({"messages": [HumanMessage(config["message"])]})
    outputs = [json.loads(m.content) for m in state["messages"] if isinstance(m, ToolMessage)]
    return {"run": run.id, "tool_results": outputs, "final": state["messages"][-1].content}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--event", required=True, help="the chat message's id (the trigger)")
    parser.add_argument("--ticket", required=True)
    parser.add_argument(
        "--deliveries",
        type=int,
        default=1,
        help="deliver the same message this many times (at-least-once delivery): every "
        "delivery after the first is answered from Takeover's ledger",
    )
    args = parser.parse_args()
    with Takeover(os.environ["TAKEOVER_URL"], os.environ["TAKEOVER_TOKEN"]) as client:
        for _ in range(args.deliveries):
            print(json.dumps(handle(client, args.event, args.ticket)), flush=True)


if __name__ == "__main__":
    main()
