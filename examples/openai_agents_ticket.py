"""An OpenAI Agents SDK agent whose ticket update goes through Takeover.

    TAKEOVER_URL=http://127.0.0.1:8000 TAKEOVER_TOKEN=... \
        python examples/openai_agents_ticket.py --event evt_1 --ticket T-1001

The model is the SDK's own `ScriptedModel`: it calls `update_ticket` once, then answers.
No API key, no network but Takeover (tracing is disabled). Prints one JSON line per
delivery of the message: the tool's result as the model saw it, the agent's final answer and
the run id. With `--deliveries 2` the second delivery's tool call is a ledger hit.
"""

import argparse
import asyncio
import json
import os

from agents import Agent, Runner, set_tracing_disabled
from agents.items import ToolCallOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call
from takeover_client import AsyncTakeover
from takeover_client.openai_agents import guarded_function_tool


@guarded_function_tool("update_ticket", target_from="ticket_id")
async def update_ticket(ticket_id: str, status: str) -> dict:
    """Set the status of a support ticket.

    Args:
        ticket_id: The ticket, e.g. T-1001.
        status: The new status: open, pending or solved.
    """
    return {"status": status}  # the desired state: Takeover applies it, exactly once


async def handle(client: AsyncTakeover, event: str, ticket: str) -> dict:
    """One delivery of the chat message: a run, the agent, the run finished by `async with`."""
    model = ScriptedModel(
        [
            [
                function_call(
                    "update_ticket", {"ticket_id": ticket, "status": "solved"}, call_id="call_1"
                )
            ],
            [assistant_message(f"Ticket {ticket} is solved.")],
        ]
    )
    agent = Agent(
        name="support",
        instructions="Solve the ticket the customer writes about.",
        model=model,
        tools=[update_ticket],
    )
    config = {"ticket": ticket, "message": "It works now, thanks!"}
    run = await client.start_run("chat", config, event_id=event)
    async with run:
        result = await Runner.run(agent, f"Ticket {ticket}: {config['message']}")
    outputs = [item.output for item in result.new_items if isinstance(item, ToolCallOutputItem)]
    return {"run": run.id, "tool_results": outputs, "final": result.final_output}


async def main() -> None:
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
    set_tracing_disabled(True)
    async with AsyncTakeover(os.environ["TAKEOVER_URL"], os.environ["TAKEOVER_TOKEN"]) as client:
        for _ in range(args.deliveries):
            print(json.dumps(await handle(client, args.event, args.ticket)), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
