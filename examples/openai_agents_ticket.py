"""An OpenAI Agents SDK agent whose ticket changes go through Takeover.

    TAKEOVER_URL=http://127.0.0.1:8000 TAKEOVER_TOKEN=... \
        python examples/openai_agents_ticket.py --event evt_1 --ticket T-1001

The model is the SDK's own `ScriptedModel`: it calls the tool once, then answers.
No API key, no network but Takeover (tracing is disabled). Prints one JSON line per
delivery of the message: the tool's result as the model saw it, the agent's final answer and
the run id. With `--deliveries 2` the second delivery's tool call is a ledger hit.

Approvals use the SDK's own approval flow instead of holding a thread. `--tool close_ticket`
(a tool that requires approval in Takeover) interrupts the run: the SDK's run state is saved
to `--state-dir/<run>.json`, the line printed is `{"run", "paused": <the approval request>}`,
and the process exits. Once a person has decided (console, `takeover grant`, the API):

    python examples/openai_agents_ticket.py --resume RUN --state-dir var/agent-states

loads the state, approves or rejects the call as the person decided in Takeover, and resumes
the run: the tool proposes again with the same key and finds its own action, applied once.
"""

import asyncio
import json
import os
from pathlib import Path

import ticket_args
from agents import Agent, Runner, set_tracing_disabled
from agents.items import ToolCallOutputItem
from agents.run_state import RunState
from agents.testing import ScriptedModel, assistant_message, function_call
from takeover_client import AsyncTakeover
from takeover_client.openai_agents import (
    apply_decisions,
    approval_requests,
    guarded_function_tool,
)


@guarded_function_tool("update_ticket", target_from="ticket_id")
async def update_ticket(ticket_id: str, status: str) -> dict:
    """Set the status of a support ticket.

    Args:
        ticket_id: The ticket, e.g. T-1001.
        status: The new status: open, pending or solved.
    """
    return {"status": status}  # the desired state: Takeover applies it, exactly once


@guarded_function_tool("close_ticket", target_from="ticket_id")
async def close_ticket(ticket_id: str) -> dict:
    """Close a support ticket for good (a person approves it first).

    Args:
        ticket_id: The ticket, e.g. T-1001.
    """
    return {"status": "closed"}


def make_agent(script: list) -> Agent:
    return Agent(
        name="support",
        instructions="Solve the ticket the customer writes about.",
        model=ScriptedModel(script),
        tools=[update_ticket, close_ticket],
    )


def answer(ticket: str) -> list:
    return [assistant_message(f"Ticket {ticket} is done.")]


async def settle(run, result, state_dir: Path) -> dict:
    """Interrupted for an approval: save the SDK's state, leave the run running. Done:
    finish the run."""
    if result.interruptions:
        [request, *_] = await approval_requests(result.interruptions)
        state_dir.mkdir(parents=True, exist_ok=True)
        (state_dir / f"{run.id}.json").write_text(result.to_state().to_string())
        return {"run": run.id, "paused": request}
    await run.finish()
    outputs = [item.output for item in result.new_items if isinstance(item, ToolCallOutputItem)]
    return {"run": run.id, "tool_results": outputs, "final": result.final_output}


async def handle(client: AsyncTakeover, event: str, ticket: str, tool: str, state_dir) -> dict:
    """One delivery of the chat message: a run, the agent."""
    args = {"ticket_id": ticket}
    if tool == "update_ticket":
        args["status"] = "solved"
    agent = make_agent([[function_call(tool, args, call_id="call_1")], *[answer(ticket)]])
    config = {"ticket": ticket, "message": "It works now, thanks!"}
    run = await client.start_run("chat", config, event_id=event)
    # attach(), not `async with run:`: a pause must leave the run running for the resume.
    async with run.attach():
        result = await Runner.run(agent, f"Ticket {ticket}: {config['message']}")
        return await settle(run, result, state_dir)


async def resume(client: AsyncTakeover, run_id: str, state_dir: Path) -> dict:
    """Resume a paused run as the person decided: approve or reject, then run on."""
    run = await client.run(run_id)
    agent = make_agent([answer(run.config["ticket"])])
    state = await RunState.from_string(agent, (state_dir / f"{run.id}.json").read_text())
    async with run.attach():
        undecided = await apply_decisions(state)
        if undecided:
            return {"run": run.id, "paused": undecided[0]}  # nobody decided yet: stay paused
        result = await Runner.run(agent, state)
        return await settle(run, result, state_dir)


async def main() -> None:
    parser = ticket_args.parser(resume_help="resume the run paused in this run")
    parser.add_argument("--state-dir", type=Path, default=Path("var/agent-states"))
    args = parser.parse_args()
    set_tracing_disabled(True)
    async with AsyncTakeover(os.environ["TAKEOVER_URL"], os.environ["TAKEOVER_TOKEN"]) as client:
        if args.resume:
            print(json.dumps(await resume(client, args.resume, args.state_dir)), flush=True)
            return
        for _ in range(args.deliveries):
            result = await handle(client, args.event, args.ticket, args.tool, args.state_dir)
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
