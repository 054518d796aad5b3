"""The framework examples run as a user would run them: a subprocess with TAKEOVER_URL and
TAKEOVER_TOKEN, against a live server, a real worker and the demo downstream; no network
beyond localhost, no model API key. The same message is delivered twice (two runs for one
trigger event, in one process to pay the frameworks' import time once): the second run's
tool call is a ledger hit, and the ticket was changed once."""

import json
import os
import subprocess
import sys
import uuid

import pytest

from ..conftest import ROOT

pytestmark = pytest.mark.worker

EXAMPLES = ["openai_agents_ticket.py", "langgraph_ticket.py"]


def run_example(name, live_server, token, event, ticket) -> list[dict]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OPENAI", "LANGCHAIN", "LANGSMITH"))
    }
    env.update(
        TAKEOVER_URL=live_server.url,
        TAKEOVER_TOKEN=token,
        # Any attempt to reach the internet fails fast instead of succeeding.
        HTTPS_PROXY="http://127.0.0.1:9",
        HTTP_PROXY="http://127.0.0.1:9",
        NO_PROXY="127.0.0.1,localhost",
    )
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / name),
            *("--event", event, "--ticket", ticket, "--deliveries", "2"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.strip().splitlines()]


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_goes_through_takeover_and_hits_the_ledger_the_second_time(
    example, world, worker, live_server
):
    world.tool("update_ticket")
    event, ticket = f"evt_{uuid.uuid4().hex[:8]}", f"T-{uuid.uuid4().hex[:8]}"

    first, second = run_example(example, live_server, world.agent.token, event, ticket)
    [result] = first["tool_results"]
    result = json.loads(result) if isinstance(result, str) else result
    assert result["ok"] and result["state"] == "succeeded" and result["replayed"] is False
    assert ticket in first["final"]

    [again] = second["tool_results"]
    again = json.loads(again) if isinstance(again, str) else again
    assert again["replayed"] is True and again["action_id"] == result["action_id"]
    assert second["run"] != first["run"]

    assert world.downstream.mutations(ticket) == 1
    assert world.downstream.read(ticket).json()["state"] == {"status": "solved"}
    runs = world.agent.client().get("/api/v1/runs").json()["results"]
    by_id = {r["id"]: r for r in runs}
    assert by_id[first["run"]]["status"] == "success"
    assert by_id[first["run"]]["tools_executed"] == ["update_ticket"]
