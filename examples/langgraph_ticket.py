"""A LangGraph agent (StateGraph + ToolNode) whose ticket changes go through Takeover.

    TAKEOVER_URL=http://127.0.0.1:8000 TAKEOVER_TOKEN=... \
        python examples/langgraph_ticket.py --event evt_1 --ticket T-1001

The chat model is LangChain's `GenericFakeChatModel` with a script: one tool call, then an
answer. No API key, no network but Takeover. Prints one JSON line per delivery of the
message: the tool's result as the model saw it, the final answer and the run id. With
`--deliveries 2` the second delivery's tool call is a ledger hit.

Approvals pause the graph instead of holding a thread. `--tool close_ticket` (a tool that
requires approval) stops at LangGraph's `interrupt()`: the graph is checkpointed in
`--checkpoints` (SQLite), the line printed is `{"run", "paused": <the approval request>}`,
and the process exits. Once a person has decided (console, `takeover grant`, the API):

    python examples/langgraph_ticket.py --resume RUN --checkpoints var/graph.sqlite

resumes the graph where it stopped, in this or any other process: the tool proposes again
with the same key, finds its own action (approved, applied exactly once) and the agent ends.
"""

import contextlib
import json
import os

import ticket_args
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command
from takeover_client import Takeover
from takeover_client.langchain import guarded_tool


@guarded_tool("update_ticket", target_from="ticket_id")
def update_ticket(ticket_id: str, status: str) -> dict:
    """Set the status of a support ticket (open, pending or solved)."""
    return {"status": status}  # the desired state: Takeover applies it, exactly once


@guarded_tool("close_ticket", target_from="ticket_id")
def close_ticket(ticket_id: str) -> dict:
    """Close a support ticket for good (a person approves it first)."""
    return {"status": "closed"}


class ScriptedChatModel(GenericFakeChatModel):
    """A fake chat model that accepts tools (the script already knows what to call)."""

    def bind_tools(self, tools, **kwargs):
        return self


def build_graph(script, checkpointer):
    model = ScriptedChatModel(messages=iter(script))

    def call_model(state: MessagesState):
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode([update_ticket, close_ticket]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=checkpointer)


def answer(ticket: str) -> AIMessage:
    return AIMessage(f"Ticket {ticket} done.")


def settle(run, state) -> dict:
    """Paused on an approval: leave the run running and say what waits. Done: finish it."""
    if state.get("__interrupt__"):
        return {"run": run.id, "paused": state["__interrupt__"][0].value}
    run.finish()
    outputs = [json.loads(m.content) for m in state["messages"] if isinstance(m, ToolMessage)]
    return {"run": run.id, "tool_results": outputs, "final": state["messages"][-1].content}


def handle(client: Takeover, event: str, ticket: str, tool: str, checkpointer) -> dict:
    """One delivery of the chat message: a run, the graph (its thread is the run)."""
    args = {"ticket_id": ticket}
    if tool == "update_ticket":
        args["status"] = "solved"
    call = {"name": tool, "args": args, "id": "call_1", "type": "tool_call"}
    app = build_graph([AIMessage(content="", tool_calls=[call]), answer(ticket)], checkpointer)
    config = {"ticket": ticket, "message": "It works now, thanks!"}
    run = client.start_run("chat", config, event_id=event)
    # attach(), not `with run:`: a pause must leave the run running for the resume.
    with run.attach():
        state = app.invoke(
            {"messages": [HumanMessage(config["message"])]},
            {"configurable": {"thread_id": run.id}},
        )
    return settle(run, state)


def resume(client: Takeover, run_id: str, checkpointer) -> dict:
    """Resume a paused graph: the tool runs again and finds its own, decided, action."""
    run = client.run(run_id)
    app = build_graph([answer(run.config["ticket"])], checkpointer)
    with run.attach():
        state = app.invoke(Command(resume={}), {"configurable": {"thread_id": run.id}})
    return settle(run, state)


def main() -> None:
    parser = ticket_args.parser(resume_help="resume the graph paused in this run")
    parser.add_argument("--checkpoints", help="a SQLite file for the graph's checkpoints")
    args = parser.parse_args()
    with Takeover(os.environ["TAKEOVER_URL"], os.environ["TAKEOVER_TOKEN"]) as client:
        if args.checkpoints:
            saver = SqliteSaver.from_conn_string(args.checkpoints)
        else:
            saver = contextlib.nullcontext(InMemorySaver())
        with saver as checkpointer:
            if args.resume:
                print(json.dumps(resume(client, args.resume, checkpointer)), flush=True)
                return
            for _ in range(args.deliveries):
                result = handle(client, args.event, args.ticket, args.tool, checkpointer)
                print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
