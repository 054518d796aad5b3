"""Takeover is an MCP server (docs/mcp.md): the official SDK as the client, against the live
server, a real worker and the demo downstream."""

import uuid

import anyio

from runs.models import Action

from ..builders import claimed_as_proposed
from .conftest import mcp_client, run


def test_list_and_call_an_http_tool_through_mcp(world, worker, mcp_url):
    world.tool("update_ticket", "tickets")
    world.tool("search_tickets", "search", effect="read_only")
    target = f"T-{uuid.uuid4().hex[:8]}"

    async def go():
        async with mcp_client(mcp_url, world.agent.token) as client:
            listed = await client.list_tools()
            # Marked with a field of its own: the demo downstream is shared with other tests,
            # whose closed tickets would otherwise fill the answer past what an attempt keeps.
            closed = {"status": "closed", "batch": target}
            result = await client.call_tool(
                "update_ticket", {"target": target, "desired_state": closed}
            )
            again = await client.call_tool(
                "update_ticket", {"target": target, "desired_state": closed}
            )
            search = await client.call_tool(
                "search_tickets", {"target": "this batch", "desired_state": {"batch": target}}
            )
            return listed, result, again, search

    listed, result, again, search = run(go)
    tools = {t.name: t for t in listed.tools}
    assert set(tools) == {"update_ticket", "search_tickets"}
    assert tools["search_tickets"].annotations.read_only_hint is True
    assert tools["update_ticket"].annotations.destructive_hint is True
    assert tools["update_ticket"].input_schema["required"] == ["target", "desired_state"]
    assert result.is_error is False, result
    assert result.structured_content["state"] == "succeeded"
    assert again.structured_content["replayed"] is True
    assert again.structured_content["action_id"] == result.structured_content["action_id"]
    action = Action.objects.get(pk=result.structured_content["action_id"])
    assert action.origin == "mcp" and action.client == "pytest-agent"
    assert action.run.trigger == "mcp"
    assert claimed_as_proposed(action.pk)  # its own call dispatched it, as a proposal that waits
    # A read passes through: succeeded in the call, the tool's answer handed back.
    assert search.is_error is False, search
    assert search.structured_content["state"] == "succeeded"
    assert target in search.structured_content["answer"]["state"]["matches"]
    read = Action.objects.get(pk=search.structured_content["action_id"])
    assert read.ledger_entry_id is None and read.run_id == action.run_id


def test_one_apply_per_key_however_often_the_call_is_re_issued(world, worker, mcp_url):
    world.tool("update_ticket", "tickets")
    target = f"T-{uuid.uuid4().hex[:8]}"
    key = f"evt-{uuid.uuid4().hex}"
    answers = []

    async def one(meta):
        async with mcp_client(mcp_url, world.agent.token) as client:
            while True:  # past the per-principal cap of waits, "in progress": ask again
                answer = await client.call_tool(
                    "update_ticket",
                    {"target": target, "desired_state": {"status": "closed"}},
                    meta=meta,
                )
                answers.append(answer)
                if answer.structured_content["state"] not in ("queued", "dispatching"):
                    return
                await anyio.sleep(0.2)

    async def go():
        async with anyio.create_task_group() as tg:
            for _ in range(4):  # concurrent re-issues, with the key and without one
                tg.start_soon(one, {"io.takeover/idempotency-key": key})
                tg.start_soon(one, None)

    run(go)
    keyed = {
        a.structured_content["action_id"]
        for a in answers
        if a.structured_content["idempotency_key"] == key
    }
    derived = {a.structured_content["action_id"] for a in answers} - keyed
    assert len(keyed) == 1 and len(derived) == 1  # one action per key, whoever won the race
    assert [a.structured_content["replayed"] for a in answers].count(False) == 2
    for action in Action.objects.filter(pk__in=keyed | derived):
        assert action.attempts.count() == 1, action  # sent once
    final = [a for a in answers if a.structured_content["state"] not in ("queued", "dispatching")]
    assert len(final) == 8 and all(a.structured_content["state"] == "succeeded" for a in final)


def test_a_named_run_and_a_finished_one(world, worker, mcp_url):
    world.tool("update_ticket", "tickets")
    run_id = world.start_run()["id"]
    args = {"target": f"T-{uuid.uuid4().hex[:8]}", "desired_state": {"s": 1}}

    async def call():
        async with mcp_client(mcp_url, world.agent.token) as client:
            return await client.call_tool("update_ticket", args, meta={"io.takeover/run": run_id})

    first = run(call)
    assert Action.objects.get(pk=first.structured_content["action_id"]).run_id == uuid.UUID(run_id)
    world.agent.client().post(
        f"/api/v1/runs/{run_id}/finish", {"status": "success", "tools_called": []}, format="json"
    )
    args["target"] += "-2"
    finished = run(call)
    assert finished.is_error and "only a running run may propose" in finished.content[0].text


def test_a_lost_answer_is_reconciled_while_the_call_waits(world, worker, mcp_url):
    """The call dispatches its own effect (claimed, so written unwatched); the answer is
    lost and the call's own round of reads fails, so it waits for a worker's next round:
    its wait marks the action, and the reconciled settle wakes it within the call's wait
    (runs.waits)."""
    world.tool("update_ticket", "tickets")
    target = f"T-{uuid.uuid4().hex[:8]}"
    world.downstream.fault("drop_after_commit", target=target)
    world.downstream.fault("error_on_read", target=target, times=3)

    async def go():
        async with mcp_client(mcp_url, world.agent.token) as client:
            return await client.call_tool(
                "update_ticket", {"target": target, "desired_state": {"status": "closed"}}
            )

    result = run(go)
    content = result.structured_content
    assert (content["state"], content["resolution"]) == ("succeeded", "reconciled"), content
    action = Action.objects.get(pk=content["action_id"])
    assert claimed_as_proposed(action.pk) and action.watched
    assert [a.outcome for a in action.attempts.all()] == ["unknown"]  # never sent twice
    verdicts = list(action.reconciliations.order_by("at").values_list("verdict", flat=True))
    assert verdicts[0] == "read_failed" and verdicts[-1] != "read_failed", verdicts
    assert world.downstream.mutations(target) == 1
