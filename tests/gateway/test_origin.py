"""Where a proposal came from (docs/mcp.md): API, MCP (with the client's name) or the CLI,
in the API resource, the audit event, the console and the CLI."""

import uuid

from click.testing import CliRunner
from takeover_client.cli import main

from core.models import AuditEvent
from runs.models import Action

from .conftest import mcp_client, run


def test_origin_is_recorded_and_shown(world, worker, mcp_url, live_server, client):
    world.tool("update_ticket", "tickets")
    target = f"O-{uuid.uuid4().hex[:8]}"

    async def go():
        async with mcp_client(mcp_url, world.agent.token) as c:
            return await c.call_tool("update_ticket", {"target": target, "desired_state": {"a": 1}})

    via_mcp = run(go).structured_content["action_id"]
    run_id = world.start_run()["id"]
    via_api = world.propose(
        run_id, "k-api", tool="update_ticket", target=target + "a", desired_state={"a": 1}
    ).json()["id"]
    via_cli = (
        world.agent.client()
        .post(
            f"/api/v1/runs/{run_id}/actions",
            {"tool": "update_ticket", "target": target + "c", "desired_state": {"a": 1}},
            format="json",
            HTTP_IDEMPOTENCY_KEY="k-cli",
            HTTP_USER_AGENT="takeover-cli/1",
        )
        .json()["id"]
    )
    origins = {
        pk: (a.origin, a.client)
        for pk, a in ((p, Action.objects.get(pk=p)) for p in (via_mcp, via_api, via_cli))
    }
    assert origins == {
        via_mcp: ("mcp", "pytest-agent"),
        via_api: ("api", ""),
        via_cli: ("cli", "takeover-cli/1"),
    }
    proposed = AuditEvent.objects.get(object_id=via_mcp, verb="action.propose")
    assert proposed.after["origin"] == "mcp" and proposed.after["client"] == "pytest-agent"
    resource = world.oncall.client().get(f"/api/v1/actions/{via_mcp}").json()
    assert resource["origin"] == "mcp" and resource["client"] == "pytest-agent"

    shown = CliRunner().invoke(
        main,
        ["show", via_mcp],
        env={"TAKEOVER_URL": live_server.url, "TAKEOVER_TOKEN": world.oncall.token},
        catch_exceptions=False,
    )
    assert "from     MCP (client pytest-agent)" in shown.output, shown.output

    from ..builders import user

    client.force_login(user(world.oncall))
    page = client.get(f"/actions/{via_mcp}/").content.decode()
    assert 'id="origin">MCP' in page and "pytest-agent" in page
