"""MCP servers as tools (docs/mcp.md): apply is tools/call with the key in _meta; a
cut stream is unknown, reconciled through the declared read tool, never re-sent; the
upstream's hints are suggestions an admin confirms."""

import uuid

from core.models import AuditEvent
from core.services import tool_declare
from runs.models import Action

from ..builders import SETUP
from .conftest import mcp_client, register_mcp_tool, run


def test_hints_are_suggestions_and_the_upstream_schema_is_listed(world, demo_mcp, mcp_url):
    tickets = register_mcp_tool(world, demo_mcp, "ticket_status", "update_ticket")
    mail = register_mcp_tool(
        world,
        demo_mcp,
        "mail",
        "send_email",
        target_argument="to",
        mcp={"lookup_tool": "find_effect"},
    )
    assert tickets.effect == "unsafe" and tickets.mcp["suggested"] is None
    assert mail.effect == "unsafe" and mail.mcp["suggested"] == "idempotent"  # not applied
    assert mail.lookup is True
    tool_declare(mail, actor=SETUP, reason="the outbox dedups by key", effect="idempotent")

    async def go():
        async with mcp_client(mcp_url, world.agent.token) as c:
            return await c.list_tools()

    tools = {t.name: t for t in run(go).tools}
    assert tools["ticket_status"].input_schema["required"] == ["ticket_id", "status"]
    assert tools["ticket_status"].annotations.destructive_hint is True
    assert tools["mail"].annotations.idempotent_hint is True


def test_a_cut_stream_is_reconciled_and_never_sent_twice(world, worker, demo_mcp, mcp_url):
    register_mcp_tool(world, demo_mcp, "ticket_status", "update_ticket")
    ticket = f"M-{uuid.uuid4().hex[:8]}"
    args = {"ticket_id": ticket, "status": "closed", "note": "done"}
    before = demo_mcp.control("stats")
    demo_mcp.control("fault", {"mode": "cut_after_commit", "count": 1})

    async def go():
        async with mcp_client(mcp_url, world.agent.token) as c:
            first = await c.call_tool("ticket_status", args)
            again = await c.call_tool("ticket_status", args)
            return first, again

    first, again = run(go)
    after = demo_mcp.control("stats")
    assert after["cut_streams"] == before["cut_streams"] + 1
    assert after["effects"] == before["effects"] + 1  # applied once, never re-sent
    assert after["duplicates"] == before["duplicates"]
    assert first.structured_content["state"] == "succeeded", first
    assert first.structured_content["resolution"] == "reconciled"
    assert again.structured_content["replayed"] is True
    action = Action.objects.get(pk=first.structured_content["action_id"])
    assert action.target == ticket and action.desired_state == {"status": "closed", "note": "done"}
    assert [a.outcome for a in action.attempts.all()] == ["unknown"]
    assert action.reconciliations.get().verdict == "match"


def test_a_read_only_mcp_tool_passes_through(world, worker, demo_mcp, mcp_url):
    search = register_mcp_tool(
        world, demo_mcp, "find_tickets", "search_tickets", target_argument="status"
    )
    tool_declare(search, actor=SETUP, reason="a search changes nothing", effect="read_only")

    async def go():
        async with mcp_client(mcp_url, world.agent.token) as c:
            return await c.call_tool("find_tickets", {"status": "nobody-has-this"})

    result = run(go)
    assert result.is_error is False
    assert result.structured_content["answer"] == {"matches": [], "count": 0}
    assert result.structured_content["idempotency_key"].startswith("read:")
    # What a read records: the action (no ledger entry, no approval), its one attempt, and
    # the audit events of each state it went through, proposed by the agent and dispatched
    # by the engine, under the request that proposed it.
    action = Action.objects.get(pk=result.structured_content["action_id"])
    assert action.state == "succeeded" and action.resolution == "applied"
    assert action.ledger_entry_id is None and action.approval_id is None
    assert action.effect == "read_only" and action.lease_expires_at is None
    assert action.origin == "mcp" and action.client == "pytest-agent"
    assert action.run.trigger == "mcp" and action.target == "nobody-has-this"
    assert [(a.number, a.outcome, a.http_status) for a in action.attempts.all()] == [
        (1, "applied", 200)
    ]
    events = AuditEvent.objects.filter(object_type="action", object_id=str(action.pk))
    trail = [
        (e.verb, e.actor_name, (e.before or {}).get("state"), e.after["state"])
        for e in events.order_by("at")
    ]
    assert trail == [
        ("action.propose", world.principal.name, None, "queued"),
        ("action.dispatching", "dispatcher", "queued", "dispatching"),
        ("action.succeeded", "dispatcher", "dispatching", "succeeded"),
    ]
    assert len({e.request_id for e in events}) == 1 and action.request_id


def test_register_over_the_api_and_confirm_the_suggestion(world, demo_mcp):
    admin = world.admin.client()
    body = {
        "name": "outbox",
        "base_url": demo_mcp.url,
        "kind": "mcp",
        "mcp": {"tool": "send_email", "target_argument": "to", "read_tool": "get_ticket"},
    }
    created = admin.post("/api/v1/tools", body, format="json")
    assert created.status_code == 201, created.content
    tool = created.json()
    assert tool["kind"] == "mcp" and tool["effect"] == "unsafe"
    assert tool["mcp"]["suggested_effect"] == "idempotent"
    assert tool["mcp"]["annotations"]["idempotentHint"] is True
    confirmed = admin.post(
        "/api/v1/tools/outbox/declaration",
        {"effect": "idempotent", "reason": "confirming the server's hint"},
        format="json",
    )
    assert confirmed.status_code == 200 and confirmed.json()["effect"] == "idempotent"
    # Listed to the agent without where it lives, beside an HTTP tool.
    seen = world.agent.client().get("/api/v1/tools/outbox").json()
    assert seen["kind"] == "mcp" and "mcp" not in seen and "base_url" not in seen
    world.tool("update_ticket")
    listed = world.agent.client().get("/api/v1/tools")
    assert listed.status_code == 200, listed.content
    assert sorted(t["kind"] for t in listed.json()["results"]) == ["http", "mcp"]
    for bad, field in (
        ({**body, "name": "x1", "mcp": {**body["mcp"], "tool": "no_such"}}, "mcp.tool"),
        ({**body, "name": "x2", "mcp": {"tool": "send_email"}}, "mcp.target_argument"),
        ({**body, "name": "x3", "kind": "http"}, "mcp"),
        ({**body, "name": "x4", "mcp": None}, "mcp"),
        ({**body, "name": "x5", "effect": "read_only"}, "effect"),
        ({**body, "name": "x6", "mcp": {**body["mcp"], "surprise": 1}}, "mcp.surprise"),
    ):
        response = admin.post("/api/v1/tools", bad, format="json")
        assert response.status_code == 400, (bad, response.content)
        assert field in response.json()["errors"], (field, response.json())
    assert world.tenant.tools.count() == 2


def test_the_console_shows_the_suggestion_and_an_admin_confirms_it(world, demo_mcp, client):
    from ..builders import user

    mail = register_mcp_tool(world, demo_mcp, "mail", "send_email", target_argument="to")
    client.force_login(user(world.approver))
    page = client.get("/tools/").content.decode()
    assert "The server's hints suggest <strong>idempotent</strong>" in page
    assert "An admin can confirm it." in page
    refused = client.post(f"/tools/{mail.pk}/confirm/")
    assert refused.status_code == 403
    mail.refresh_from_db()
    assert mail.effect == "unsafe"
    client.force_login(user(world.admin))
    assert "Confirm idempotent" in client.get("/tools/").content.decode()
    done = client.post(f"/tools/{mail.pk}/confirm/")
    assert done.status_code == 303
    mail.refresh_from_db()
    assert mail.effect == "idempotent" and mail.declared_by["name"] == world.admin.username


def test_make_run_registers_one_mcp_tool(live_db, tmp_path):
    from core.models import Tool
    from demo.setup import MCP_TOOL, TENANT, demo_setup

    url = "http://127.0.0.1:8200/mcp"
    first = demo_setup(downstream_url="http://127.0.0.1:8100", var_dir=tmp_path, mcp_url=url)
    again = demo_setup(
        downstream_url="http://127.0.0.1:8100",
        var_dir=tmp_path,
        mcp_url=url.replace("8200", "8201"),
    )
    tool = Tool.objects.get(tenant__slug=TENANT, name=MCP_TOOL)
    assert f"tool {MCP_TOOL} (MCP)" in first.created or tool.kind == "mcp"
    assert f"tool {MCP_TOOL} (MCP)" not in again.created
    assert tool.kind == "mcp" and tool.effect == "unsafe"
    assert tool.base_url.endswith(":8201/mcp")  # follows MCP_DEMO_PORT
    assert tool.mcp["tool"] == "update_ticket" and tool.mcp["read_tool"] == "get_ticket"
    assert tool.mcp["annotations"]["destructiveHint"] is True and tool.mcp["suggested"] is None
