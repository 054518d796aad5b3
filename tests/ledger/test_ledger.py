"""The effect ledger: keys per tenant, revocation and generations."""

import pytest

from core.models import AuditEvent
from ledger.models import LedgerEntry

from ..builders import make_world
from ..conftest import problem

GOOD = {"tool": "update_ticket", "target": "ticket:1", "desired_state": {"status": "x"}}


@pytest.fixture
def w(world):
    world.tool("update_ticket")
    world.run = world.start_run()
    return world


def test_keys_are_scoped_per_tenant(w, downstream):
    other = make_world(downstream)
    other.tool("update_ticket")
    other_run = other.start_run()
    mine = w.propose(w.run["id"], "shared-key", **GOOD)
    theirs = other.propose(
        other_run["id"],
        "shared-key",
        tool="update_ticket",
        target="zzz",
        desired_state={"status": "y"},
    )
    assert mine.status_code == 201 and theirs.status_code == 201
    assert mine.json()["id"] != theirs.json()["id"]


def test_a_key_whose_effect_may_still_happen_cannot_be_revoked(w):
    w.tool("close_ticket", requires_approval=True)
    waiting = w.propose(
        w.run["id"],
        "evt-8:close",
        tool="close_ticket",
        target="t:8",
        desired_state={"status": "closed"},
    ).json()
    assert waiting["state"] == "awaiting_approval"
    entry = LedgerEntry.objects.get(tenant=w.tenant, key="evt-8:close")
    response = w.admin.client().post(
        f"/api/v1/ledger/{entry.pk}/revoke", {"reason": "undo"}, format="json"
    )
    assert response.status_code == 409
    assert problem(response)["type"] == "/problems/state-conflict"
    entry.refresh_from_db()
    assert entry.revoked_at is None


def test_revoked_key_can_be_used_again_as_a_new_generation(w, worker):
    key = "evt-9:update_ticket:ticket-1"
    first = w.propose(w.run["id"], key, **GOOD).json()
    assert w.wait_action(first["id"])["state"] == "succeeded"
    entry = LedgerEntry.objects.get(tenant=w.tenant, key=key)
    assert entry.status == "applied"
    admin = w.admin.client()
    listed = admin.get(f"/api/v1/ledger?key={key}").json()["results"]
    assert [e["id"] for e in listed] == [str(entry.pk)]
    assert listed[0]["action"] == first["id"]

    no_reason = admin.post(f"/api/v1/ledger/{entry.pk}/revoke", {"reason": ""}, format="json")
    assert no_reason.status_code == 400
    revoked = admin.post(
        f"/api/v1/ledger/{entry.pk}/revoke",
        {"reason": "refund reversed by finance"},
        format="json",
    )
    assert revoked.status_code == 200
    assert revoked.json()["revoked"] is True
    assert revoked.json()["revoked_by"] == {"kind": "operator", "name": w.admin.username}

    again = w.propose(w.run["id"], key, **GOOD)
    assert again.status_code == 201
    assert again.json()["id"] != first["id"]
    generations = admin.get(f"/api/v1/ledger?key={key}").json()["results"]
    assert [(e["generation"], e["revoked"]) for e in generations] == [(2, False), (1, True)]
    # Each reservation is audited with the generation the statement counted.
    reserved = AuditEvent.objects.filter(tenant=w.tenant, verb="ledger.reserve").order_by("at")
    assert [(e.after["generation"], e.after["action_id"]) for e in reserved] == [
        (1, first["id"]),
        (2, again.json()["id"]),
    ]
    assert w.wait_action(again.json()["id"])["state"] == "succeeded"
    assert w.downstream.mutations("ticket:1") >= 2  # a new generation is a new effect


def test_ledger_is_admin_only(w):
    assert w.oncall.client().get("/api/v1/ledger").status_code == 403
    assert w.approver.client().get("/api/v1/ledger").status_code == 403
