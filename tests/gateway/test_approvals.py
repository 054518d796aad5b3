"""Approvals over MCP (docs/mcp.md): `input_required` with a URL elicitation and a sealed,
single-use requestState on 2026-07-28; `awaiting_approval` and a repeat on older versions.
Nothing is applied before the grant."""

import time
import uuid

import anyio
import mcp_types as types
import time_machine
from mcp.shared.exceptions import MCPError

from runs.models import Action

from .conftest import mcp_client, run


def grant(world, action_id):
    action = Action.objects.get(pk=action_id)
    assert action.state == "awaiting_approval" and action.attempts.count() == 0
    response = world.approver.client().post(
        f"/api/v1/approval-requests/{action.approval_request_id}/grant",
        {"ttl_seconds": 300},
        format="json",
    )
    assert response.status_code == 201, response.content


def action_id_of(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def test_approval_round_trip_with_input_required(world, worker, mcp_url):
    world.tool("refund", "tickets", requires_approval=True)
    target = f"R-{uuid.uuid4().hex[:8]}"
    seen = []

    async def on_elicit(context, params):
        seen.append(params)
        # A person opens the link and grants: nothing was applied before this.
        await anyio.to_thread.run_sync(grant, world, action_id_of(params.url))
        return types.ElicitResult(action="accept")

    async def go():
        async with mcp_client(mcp_url, world.agent.token, elicitation_callback=on_elicit) as c:
            assert c.protocol_version == "2026-07-28"
            return await c.call_tool(
                "refund", {"target": target, "desired_state": {"refunded": True}}
            )

    result = run(go)
    assert len(seen) == 1 and seen[0].mode == "url"
    assert f"/actions/{result.structured_content['action_id']}/" in seen[0].url
    assert result.is_error is False, result
    assert result.structured_content["state"] == "succeeded"
    action = Action.objects.get(pk=result.structured_content["action_id"])
    assert action.approval_id is not None and action.attempts.count() == 1


def test_older_protocol_gets_awaiting_approval_and_the_repeat_gets_the_outcome(
    world, worker, mcp_url
):
    world.tool("refund", "tickets", requires_approval=True)
    target = f"R-{uuid.uuid4().hex[:8]}"
    args = {"target": target, "desired_state": {"refunded": True}}

    async def call():
        async with mcp_client(mcp_url, world.agent.token, mode="legacy") as c:
            assert c.protocol_version != "2026-07-28"
            return await c.call_tool("refund", args)

    first = run(call)
    assert first.is_error is False
    assert first.structured_content["state"] == "awaiting_approval"
    assert "/actions/" in first.structured_content["approval_url"]
    action_id = first.structured_content["action_id"]
    assert Action.objects.get(pk=action_id).attempts.count() == 0
    grant(world, action_id)
    second = run(call)
    assert second.structured_content["action_id"] == action_id
    assert second.structured_content["state"] == "succeeded"
    assert second.structured_content["replayed"] is True


def _first_round(world, mcp_url, args, token=None):
    async def go():
        async with mcp_client(mcp_url, token or world.agent.token) as c:
            return await c.session.call_tool("refund", args, allow_input_required=True)

    first = run(go)
    assert isinstance(first, types.InputRequiredResult), first
    return first


def _retry(mcp_url, token, args, state):
    """The retry's result, or the MCPError it got (returned: raised inside the client's
    task group it would come out wrapped in an exception group)."""

    async def go():
        async with mcp_client(mcp_url, token) as c:
            try:
                return await c.session.call_tool(
                    "refund", args, request_state=state, allow_input_required=True
                )
            except MCPError as exc:
                return exc

    return run(go)


def refused(outcome, words):
    assert isinstance(outcome, MCPError), outcome
    assert words in str(outcome), outcome


def test_request_state_is_single_use_and_sealed(world, worker, mcp_url, settings):
    settings.MCP_CALL_WAIT_SECONDS = 0.5
    world.tool("refund", "tickets", requires_approval=True)
    args = {"target": f"R-{uuid.uuid4().hex[:8]}", "desired_state": {"refunded": True}}
    first = _first_round(world, mcp_url, args)
    state = first.request_state
    assert state and "refunded" not in state  # sealed, not readable

    # Still pending: a fresh state comes back; the one used is spent.
    again = _retry(mcp_url, world.agent.token, args, state)
    assert isinstance(again, types.InputRequiredResult) and again.request_state != state
    refused(_retry(mcp_url, world.agent.token, args, state), "already used")
    # Forged, tampered, or bound to other arguments: the SDK's boundary refuses.
    for bad, other_args in (
        ("v1.Zm9yZ2Vk", args),
        (again.request_state[:-4] + "AAAA", args),
        (again.request_state, {**args, "desired_state": {"refunded": False}}),
    ):
        refused(_retry(mcp_url, world.agent.token, other_args, bad), "Invalid or expired")
    # Another principal of the same tenant cannot use it.
    from core.services import principal_create

    from ..builders import SETUP

    _, other_token = principal_create(tenant=world.tenant, name="other-bot", actor=SETUP)
    refused(_retry(mcp_url, other_token, args, again.request_state), "Invalid or expired")
    # Expired: the seal's TTL has passed.
    with time_machine.travel(time.time() + 3600, tick=True):
        expired = _retry(mcp_url, world.agent.token, args, again.request_state)
    refused(expired, "Invalid or expired")
    action = Action.objects.get(target=args["target"], tenant=world.tenant)
    assert action.state == "awaiting_approval" and action.attempts.count() == 0
