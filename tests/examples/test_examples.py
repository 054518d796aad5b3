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


def example_env(live_server, token) -> dict:
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
    return env


def run_example(name, live_server, token, *args) -> list[dict]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *args],
        env=example_env(live_server, token),
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

    first, second = run_example(
        example,
        live_server,
        world.agent.token,
        *("--event", event, "--ticket", ticket, "--deliveries", "2"),
    )
    [result] = first["tool_results"]
    result = json.loads(result) if isinstance(result, str) else result
    assert result["ok"] and result["state"] == "succeeded" and result["replayed"] is False
    assert ticket in first["final"]

    [again] = second["tool_results"]
    again = json.loads(again) if isinstance(again, str) else again
    assert again["replayed"] is True and again["action_id"] == result["action_id"]
    assert second["run"] != first["run"]

    assert world.downstream.mutations(ticket) == 1
    assert world.downstream.record(ticket)["state"] == {"status": "solved"}
    runs = world.agent.client().get("/api/v1/runs").json()["results"]
    by_id = {r["id"]: r for r in runs}
    assert by_id[first["run"]]["status"] == "success"
    assert by_id[first["run"]]["tools_executed"] == ["update_ticket"]


PAUSING = {
    "openai_agents_ticket.py": lambda tmp: ("--state-dir", str(tmp)),
    "langgraph_ticket.py": lambda tmp: ("--checkpoints", str(tmp / "graph.sqlite")),
}


@pytest.mark.parametrize("example", EXAMPLES)
def test_an_approval_pauses_the_agent_and_a_later_resume_applies_it_once(
    example, world, worker, live_server, tmp_path
):
    """The agent process stops at the approval (nothing is left waiting: the process is
    gone); the approval is granted by another process, the `takeover` CLI; a third process
    resumes the agent from its saved state, and the effect is applied exactly once."""
    world.tool("close_ticket", requires_approval=True)
    event, ticket = f"evt_{uuid.uuid4().hex[:8]}", f"T-{uuid.uuid4().hex[:8]}"
    state = PAUSING[example](tmp_path)
    token = world.agent.token

    [paused] = run_example(
        example, live_server, token, "--event", event, "--ticket", ticket,
        "--tool", "close_ticket", *state,
    )  # fmt: skip
    request = paused["paused"]
    assert request["type"] == "takeover.approval" and request["run"] == paused["run"]
    assert request["intent"]["tool"] == "close_ticket"
    assert request["intent"]["target"] == ticket
    assert request["intent"]["desired_state"] == {"status": "closed"}
    assert request["console_url"] == f"{live_server.url}/actions/{request['action_id']}/"
    assert world.downstream.mutations(ticket) == 0
    operator = world.approver.client()
    action = operator.get(f"/api/v1/actions/{request['action_id']}").json()
    assert action["state"] == "awaiting_approval"
    assert action["approval_request_id"] == request["approval_request_id"]
    run = operator.get(f"/api/v1/runs/{paused['run']}").json()
    assert run["status"] == "running"  # paused, not finished

    # Resumed before anyone decided: it pauses again, still nothing applied.
    [still] = run_example(example, live_server, token, "--resume", paused["run"], *state)
    assert still["paused"]["approval_request_id"] == request["approval_request_id"]

    granted = subprocess.run(
        [sys.executable, "-m", "takeover_client.cli", "grant", request["approval_request_id"]],
        env={**example_env(live_server, world.approver.token)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert granted.returncode == 0, granted.stderr

    [resumed] = run_example(example, live_server, token, "--resume", paused["run"], *state)
    [result] = resumed["tool_results"]
    result = json.loads(result) if isinstance(result, str) else result
    assert result["ok"] and result["state"] == "succeeded"
    assert result["action_id"] == request["action_id"]
    assert result["message"] == "Done."
    assert ticket in resumed["final"]

    assert world.downstream.mutations(ticket) == 1
    action = operator.get(f"/api/v1/actions/{request['action_id']}").json()
    assert action["state"] == "succeeded" and len(action["attempts"]) == 1
    run = operator.get(f"/api/v1/runs/{paused['run']}").json()
    assert run["status"] == "success" and run["tools_executed"] == ["close_ticket"]
