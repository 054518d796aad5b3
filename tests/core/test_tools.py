"""Tools say what they are: a declaration is an admin's, with a reason, audited and shown on
the tool, and a read_only tool cannot require an approval."""

import pytest

from core.models import AuditEvent, Tool

from ..conftest import problem


@pytest.fixture
def w(world):
    world.tool("update_ticket")
    return world


def test_a_read_only_tool_cannot_require_approval(w):
    response = w.admin.client().post(
        "/api/v1/tools",
        {
            "name": "lookup_customer",
            "base_url": w.downstream.base("search"),
            "effect": "read_only",
            "requires_approval": True,
        },
        format="json",
    )
    assert response.status_code == 400
    assert "requires_approval" in problem(response)["errors"]
    tool = Tool.objects.get(tenant=w.tenant, name="update_ticket")
    Tool.objects.filter(pk=tool.pk).update(requires_approval=True)
    refused = w.admin.client().post(
        "/api/v1/tools/update_ticket/declaration",
        {"effect": "read_only", "reason": "it only reads"},
        format="json",
    )
    assert refused.status_code == 400
    assert "requires_approval" in problem(refused)["errors"]


def test_declarations_are_admin_only_audited_and_shown_on_the_tool(w):
    url = "/api/v1/tools/update_ticket/declaration"
    change = {"effect": "idempotent", "lookup": True, "reason": "the vendor dedupes"}
    for persona in (w.oncall, w.approver, w.agent):
        assert persona.client().post(url, change, format="json").status_code == 403
    assert w.outsider.client().post(url, change, format="json").status_code == 404
    no_reason = w.admin.client().post(url, {"effect": "idempotent"}, format="json")
    assert no_reason.status_code == 400 and "reason" in problem(no_reason)["errors"]
    nothing = w.admin.client().post(url, {"reason": "x"}, format="json")
    assert nothing.status_code == 400
    assert Tool.objects.get(tenant=w.tenant, name="update_ticket").effect == "unsafe"

    done = w.admin.client().post(url, change, format="json")
    assert done.status_code == 200
    tool = done.json()
    assert (tool["effect"], tool["lookup"]) == ("idempotent", True)
    assert tool["declared_by"] == {"kind": "operator", "name": w.admin.username}
    assert tool["declared_at"]
    seen_by_agent = w.agent.client().get("/api/v1/tools/update_ticket").json()
    assert seen_by_agent["lookup"] is True and "base_url" not in seen_by_agent
    same = w.admin.client().post(url, change, format="json")
    assert same.status_code == 409  # nothing would change: nothing is logged
    events = AuditEvent.objects.filter(tenant=w.tenant, verb="tool.declare")
    assert [(e.before, e.after, e.reason) for e in events] == [
        (
            {"effect": "unsafe", "lookup": False},
            {"effect": "idempotent", "lookup": True},
            "the vendor dedupes",
        )
    ]
    # Registration takes the declarations too, and says who made them.
    created = (
        w.admin.client()
        .post(
            "/api/v1/tools",
            {
                "name": "notify",
                "base_url": w.downstream.base("email"),
                "effect": "idempotent",
                "lookup": True,
            },
            format="json",
        )
        .json()
    )
    assert (created["effect"], created["lookup"]) == ("idempotent", True)
    assert created["declared_by"] == {"kind": "operator", "name": w.admin.username}
