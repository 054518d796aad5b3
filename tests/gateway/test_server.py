"""Takeover is an MCP server (docs/mcp.md): the official SDK as the client, against the live
server, a real worker and the demo downstream."""

import uuid

from runs.models import Action

from .conftest import mcp_client, run


def test_list_and_call_an_http_tool_through_mcp(world, worker, mcp_url):
    world.tool("update_ticket", "tickets")
    world.tool("search_tickets", "search", effect="read_only")
    target = f"T-{uuid.uuid4().hex[:8]}"

    async def go():
        async with mcp_client(mcp_url, world.agent.token) as client:
            listed = await client.list_tools()
            result = await client.call_tool(
                "update_ticket", {"target": target, "desired_state": {"status": "closed"}}
            )
            again = await client.call_tool(
                "update_ticket", {"target": target, "desired_state": {"status": "closed"}}
            )
            return listed, result, again

    listed, result, again = run(go)
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
