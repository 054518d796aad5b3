"""Bad input gets a clear problem+json naming the field, and loses nothing."""

import uuid

import pytest

from core.models import AuditEvent
from ledger.models import LedgerEntry
from runs.models import Action, Run

from ..conftest import problem


@pytest.fixture
def w(world):
    world.tool("update_ticket")
    world.tool("close_ticket", requires_approval=True)
    world.run = world.start_run()
    return world


def counts(w):
    return (
        Action.objects.filter(tenant=w.tenant).count(),
        LedgerEntry.objects.filter(tenant=w.tenant).count(),
        AuditEvent.objects.filter(tenant=w.tenant).count(),
        Run.objects.filter(tenant=w.tenant).count(),
    )


GOOD = {"tool": "update_ticket", "target": "ticket:1", "desired_state": {"status": "x"}}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**GOOD, "tool": "no_such_tool"}, "tool"),
        ({**GOOD, "desired_state": ["not", "an", "object"]}, "desired_state"),
        ({**GOOD, "desired_state": "status=x"}, "desired_state"),
        ({**GOOD, "expected_version": "3"}, "expected_version"),
        ({**GOOD, "expected_version": 3.5}, "expected_version"),
        ({**GOOD, "expected_version": True}, "expected_version"),
        ({**GOOD, "approval_id": "not-a-uuid"}, "approval_id"),
        ({k: v for k, v in GOOD.items() if k != "target"}, "target"),
        ({k: v for k, v in GOOD.items() if k != "desired_state"}, "desired_state"),
    ],
)
def test_bad_proposal_is_a_400_naming_the_field_and_writes_nothing(w, body, field):
    before = counts(w)
    response = w.propose(w.run["id"], f"k-{uuid.uuid4().hex}", **body)
    assert response.status_code == 400
    body = problem(response)
    assert body["type"] == "/problems/validation-error"
    assert body["status"] == 400 and body["title"] and body["detail"]
    assert field in body["errors"]
    assert counts(w) == before


def test_missing_idempotency_key_is_a_400(w):
    before = counts(w)
    response = w.agent.client().post(f"/api/v1/runs/{w.run['id']}/actions", GOOD, format="json")
    assert response.status_code == 400
    assert problem(response)["type"] == "/problems/idempotency-key-missing"
    assert "Idempotency-Key" in problem(response)["errors"]
    assert counts(w) == before


@pytest.mark.parametrize("key", ["", "has space", "x" * 256, "naïve"])
def test_malformed_idempotency_key_is_a_400(w, key):
    response = w.propose(w.run["id"], key, **GOOD)
    assert response.status_code == 400
    assert "Idempotency-Key" in problem(response)["errors"]


def test_quoted_idempotency_key_reaches_the_ledger_bare(w):
    response = w.propose(w.run["id"], '"evt-1:update_ticket:ticket-1"', **GOOD)
    assert response.status_code == 201
    assert response.json()["idempotency_key"] == "evt-1:update_ticket:ticket-1"


def test_malformed_json_is_a_400(w):
    before = counts(w)
    response = w.agent.client().post(
        f"/api/v1/runs/{w.run['id']}/actions",
        data='{"tool": "update_ticket", ',
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="k-1",
    )
    assert response.status_code == 400
    assert problem(response)["type"] == "/problems/validation-error"
    assert "body" in problem(response)["errors"]
    assert counts(w) == before


def test_body_that_is_not_an_object_is_a_400(w):
    response = w.agent.client().post(
        f"/api/v1/runs/{w.run['id']}/actions",
        data="[1, 2]",
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="k-1",
    )
    assert response.status_code == 400
    assert "body" in problem(response)["errors"]


def test_oversized_body_is_a_413(w, settings):
    before = counts(w)
    huge = {**GOOD, "desired_state": {"blob": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10)}}
    response = w.propose(w.run["id"], "k-big", **huge)
    assert response.status_code == 413
    assert problem(response)["type"] == "/problems/payload-too-large"
    assert counts(w) == before


def test_no_token_is_a_401_and_a_bad_token_too(w):
    from rest_framework.test import APIClient

    response = APIClient().post("/api/v1/runs", {"trigger": "api"}, format="json")
    assert response.status_code == 401
    assert problem(response)["type"] == "/problems/unauthenticated"
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Bearer tko_nope")
    assert bad.get("/api/v1/me").status_code == 401


def test_wrong_role_is_a_403(w):
    # An approver may not resolve, an on-call may not grant, nobody but an admin audits.
    action = w.propose(
        w.run["id"],
        "k-close",
        tool="close_ticket",
        target="t:1",
        desired_state={"status": "closed"},
    ).json()
    request_id = action["approval_request_id"]
    cases = [
        (
            w.approver,
            f"/api/v1/actions/{action['id']}/resolve",
            {"outcome": "failed", "reason": "x"},
        ),
        (w.oncall, f"/api/v1/approval-requests/{request_id}/grant", {}),
        (w.oncall, "/api/v1/tools", {"name": "t", "base_url": "http://127.0.0.1:1"}),
        (w.agent, f"/api/v1/approval-requests/{request_id}/grant", {}),
    ]
    for persona, url, body in cases:
        response = persona.client().post(url, body, format="json")
        assert response.status_code == 403, (persona.username, url, response.content)
        assert problem(response)["type"] == "/problems/permission-denied"
    assert w.approver.client().get("/api/v1/audit").status_code == 403
    assert w.oncall.client().get("/api/v1/ledger").status_code == 403
    # and the action is still waiting, untouched
    assert (
        w.admin.client().get(f"/api/v1/actions/{action['id']}").json()["state"]
        == "awaiting_approval"
    )


def test_another_tenants_objects_are_404(w):
    action = w.propose(
        w.run["id"], "k-404", tool="close_ticket", target="t:1", desired_state={"status": "closed"}
    ).json()
    outsider = w.outsider.client()
    for url in [
        f"/api/v1/actions/{action['id']}",
        f"/api/v1/runs/{w.run['id']}",
    ]:
        response = outsider.get(url)
        assert response.status_code == 404
        assert problem(response)["type"] == "/problems/not-found"
    grant = outsider.post(f"/api/v1/approval-requests/{action['approval_request_id']}/grant")
    assert grant.status_code == 404
    # another tenant's agent cannot see the run or propose on it either
    assert w.other_agent.client().get(f"/api/v1/runs/{w.run['id']}").status_code == 404
    assert w.propose(w.run["id"], "k-x", client=w.other_agent.client(), **GOOD).status_code == 404


def test_operator_in_a_tenant_they_do_not_belong_to_is_403(w):
    response = w.admin.client(tenant=w.other_tenant.slug).get("/api/v1/queue")
    assert response.status_code == 403
    response = w.admin.client(tenant="no-such-tenant").get("/api/v1/queue")
    assert response.status_code == 403


def test_an_approval_id_this_tenant_cannot_see_is_blocked_not_found(w):
    response = w.propose(w.run["id"], "k-nf", approval_id=str(uuid.uuid4()), **GOOD)
    assert response.status_code == 201
    assert response.json()["state"] == "blocked"
    assert response.json()["block_reason"] == "approval_not_found"


def test_proposing_on_a_finished_run_is_a_409(w):
    finish = w.agent.client().post(
        f"/api/v1/runs/{w.run['id']}/finish",
        {"status": "success", "tools_called": []},
        format="json",
    )
    assert finish.status_code == 200
    response = w.propose(w.run["id"], "k-late", **GOOD)
    assert response.status_code == 409
    assert problem(response)["type"] == "/problems/run-not-running"


def test_me_says_who_is_calling(w):
    assert w.agent.client().get("/api/v1/me").json() == {
        "kind": "principal",
        "name": "agent",
        "tenant": w.tenant.slug,
        "roles": [],
    }
    me = w.admin.client().get("/api/v1/me").json()
    assert me["kind"] == "operator" and me["tenant"] == w.tenant.slug
    assert set(me["roles"]) == {"admin", "approver", "oncall"}


def test_schema_is_served(w):
    response = w.agent.client().get("/api/v1/schema/")
    assert response.status_code == 200
    assert b"/api/v1/runs/{id}/actions" in response.content


def test_api_docs_are_served_from_our_own_static_files(w):
    import re

    from rest_framework.test import APIClient

    page = APIClient().get("/api/v1/docs/").content.decode()
    sources = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert any("swagger-ui" in s for s in sources)
    assert [s for s in sources if s.startswith(("http:", "https:", "//"))] == []
