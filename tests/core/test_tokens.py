"""Token lifecycle: issue, list, revoke, rotate, expire; through the API, the console and
the command line. Every change audited; a revoked or expired token is a 401 at once."""

import io
import re
from datetime import timedelta

import pytest
import time_machine
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from core.models import ApiToken, AuditEvent, Role
from core.services import operator_create
from tests.builders import SETUP
from tests.conftest import problem


def bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def me(raw: str) -> int:
    return bearer(raw).get("/api/v1/me").status_code


def issue(world, **body):
    response = world.admin.client().post("/api/v1/tokens", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


# --- API ------------------------------------------------------------------------------------


def test_admin_issues_a_token_for_a_principal_shown_once(world):
    token = issue(world, principal="agent", name="ci-deploy")
    assert token["token"].startswith("tko_")
    assert token["owner"] == {"kind": "principal", "name": "agent"}
    assert token["state"] == "active" and token["expires_at"] is None
    assert me(token["token"]) == 200

    listed = world.admin.client().get("/api/v1/tokens").json()["results"]
    mine = next(t for t in listed if t["id"] == token["id"])
    assert "token" not in mine  # never shown again
    assert mine["last_used_at"] is not None  # the call above
    assert AuditEvent.objects.filter(verb="token.issue", object_id=token["id"]).count() == 1


def test_revoked_token_is_refused_at_once(world):
    token = issue(world, principal="agent")
    assert me(token["token"]) == 200
    response = world.admin.client().post(
        f"/api/v1/tokens/{token['id']}/revoke", {"reason": "leaked in a log"}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["state"] == "revoked"
    assert me(token["token"]) == 401
    event = AuditEvent.objects.get(verb="token.revoke", object_id=token["id"])
    assert event.reason == "leaked in a log" and event.actor_name == world.admin.username
    again = world.admin.client().post(f"/api/v1/tokens/{token['id']}/revoke", {}, format="json")
    assert again.status_code == 409


def test_rotation_replaces_the_token_and_refuses_the_old_one(world):
    old = issue(world, principal="agent", expires_in_seconds=90 * 86400)
    response = world.admin.client().post(f"/api/v1/tokens/{old['id']}/rotate", {}, format="json")
    assert response.status_code == 201, response.content
    new = response.json()
    assert new["rotated_from"] == old["id"] and new["token"] != old["token"]
    # Same lifetime as the one it replaces.
    lifetime = timezone.datetime.fromisoformat(new["expires_at"]) - timezone.now()
    assert timedelta(days=89) < lifetime <= timedelta(days=90)
    assert me(old["token"]) == 401
    assert me(new["token"]) == 200
    assert AuditEvent.objects.filter(verb="token.rotate", object_id=old["id"]).count() == 1
    twice = world.admin.client().post(f"/api/v1/tokens/{old['id']}/rotate", {}, format="json")
    assert twice.status_code == 409


def test_rotation_with_overlap_keeps_the_old_token_until_then(world):
    old = issue(world, principal="agent")
    new = (
        world.admin.client()
        .post(f"/api/v1/tokens/{old['id']}/rotate", {"overlap_seconds": 3600}, format="json")
        .json()
    )
    assert me(old["token"]) == 200 and me(new["token"]) == 200
    with time_machine.travel(timezone.now() + timedelta(seconds=3601)):
        assert me(old["token"]) == 401
        assert me(new["token"]) == 200


def test_expired_token_is_refused(world):
    token = issue(world, principal="agent", expires_in_seconds=120)
    assert me(token["token"]) == 200
    with time_machine.travel(timezone.now() + timedelta(seconds=121)):
        response = bearer(token["token"]).get("/api/v1/me")
        assert response.status_code == 401
        assert problem(response)["type"] == "/problems/unauthenticated"
        listed = world.admin.client().get("/api/v1/tokens?state=expired").json()["results"]
        assert token["id"] in [t["id"] for t in listed]


def test_operator_tokens_are_managed_only_by_an_admin_of_all_their_tenants(world):
    # The on-call belongs to this tenant only: this tenant's admin manages their tokens.
    own = issue(world, operator=world.oncall.username)
    assert me(own["token"]) == 200
    # Someone who is also a member of tenant B cannot be locked out by A's admin.
    operator_create(
        tenant=world.other_tenant,
        username=world.approver.username,
        role=Role.APPROVER,
        actor=SETUP,
    )
    response = world.admin.client().post(
        "/api/v1/tokens", {"operator": world.approver.username}, format="json"
    )
    assert response.status_code == 400
    assert "operator" in problem(response)["errors"]
    approver_tokens = ApiToken.objects.filter(user__username=world.approver.username)
    for token in approver_tokens:
        url = f"/api/v1/tokens/{token.pk}/revoke"
        assert world.admin.client().post(url, {}, format="json").status_code == 404


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "principal"),
        ({"principal": "agent", "operator": "x"}, "principal"),
        ({"principal": "nobody"}, "principal"),
        ({"principal": "agent", "expires_in_seconds": 5}, "expires_in_seconds"),
        ({"principal": "agent", "expires_in_seconds": "soon"}, "expires_in_seconds"),
        ({"principal": "agent", "name": 7}, "name"),
    ],
)
def test_bad_token_requests_name_the_field(world, body, field):
    response = world.admin.client().post("/api/v1/tokens", body, format="json")
    assert response.status_code == 400
    assert field in problem(response)["errors"]


def test_tokens_are_admin_only_and_tenant_scoped(world):
    assert world.oncall.client().get("/api/v1/tokens").status_code == 403
    assert world.agent.client().get("/api/v1/tokens").status_code == 403
    token = issue(world, principal="agent")
    outsider = world.outsider.client()
    assert token["id"] not in [t["id"] for t in outsider.get("/api/v1/tokens").json()["results"]]
    assert outsider.post(f"/api/v1/tokens/{token['id']}/revoke").status_code == 404
    assert me(token["token"]) == 200


# --- console --------------------------------------------------------------------------------


def console_as(persona) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.get(username=persona.username))
    return client


def shown_token(response) -> str:
    match = re.search(r'id="new-token-value"[^>]*value="(tko_[^"]+)"', response.content.decode())
    assert match, response.content.decode()[:2000]
    return match.group(1)


def test_console_issues_revokes_and_rotates(world):
    console = console_as(world.admin)
    page = console.get("/tokens/")
    assert page.status_code == 200
    assert b"Issue a token" in page.content

    issued = console.post(
        "/tokens/issue/", {"owner": "principal:agent", "name": "from-console", "lifetime": "30"}
    )
    assert issued.status_code == 200
    raw = shown_token(issued)
    assert me(raw) == 200
    token = ApiToken.objects.get(name="from-console", principal=world.principal)
    assert timedelta(days=29) < token.expires_at - timezone.now() <= timedelta(days=30)
    assert raw not in console.get("/tokens/").content.decode()  # shown once

    rotated = console.post(f"/tokens/{token.pk}/rotate/", {"overlap": "0"})
    assert rotated.status_code == 200
    new_raw = shown_token(rotated)
    assert me(raw) == 401 and me(new_raw) == 200

    new = ApiToken.objects.get(rotated_from=token)
    revoked = console.post(f"/tokens/{new.pk}/revoke/", {"reason": "done with it"})
    assert revoked.status_code == 303
    assert me(new_raw) == 401
    verbs = AuditEvent.objects.filter(object_id__in=[str(token.pk), str(new.pk)]).values_list(
        "verb", "actor_name"
    )
    assert set(verbs) == {
        ("token.issue", world.admin.username),
        ("token.rotate", world.admin.username),
        ("token.revoke", world.admin.username),
    }


def test_console_expired_token_reads_expired_and_is_refused(world):
    console = console_as(world.admin)
    raw = shown_token(
        console.post("/tokens/issue/", {"owner": "principal:agent", "lifetime": "30"})
    )
    with time_machine.travel(timezone.now() + timedelta(days=31)):
        assert me(raw) == 401
        console = console_as(world.admin)  # the session itself has expired by then
        page = console.get("/tokens/?state=all").content.decode()
        assert "pill-token-expired" in page


def test_console_token_page_is_admin_only(world):
    assert console_as(world.oncall).get("/tokens/").status_code == 403
    token = issue(world, principal="agent")
    response = console_as(world.outsider).post(f"/tokens/{token['id']}/revoke/")
    assert response.status_code == 404
    assert me(token["token"]) == 200


# --- command line ---------------------------------------------------------------------------


def test_command_line_lifecycle(world):
    out, err = io.StringIO(), io.StringIO()
    slug = world.tenant.slug
    call_command(
        "token",
        "create",
        "--tenant",
        slug,
        "--principal",
        "agent",
        "--expires-in",
        "90d",
        stdout=out,
        stderr=err,
    )
    raw = out.getvalue().strip().splitlines()[-1]
    assert me(raw) == 200
    token = ApiToken.objects.get(label=raw[:10])

    out = io.StringIO()
    call_command("token", "list", "--tenant", slug, stdout=out)
    assert str(token.pk) in out.getvalue() and "principal:agent" in out.getvalue()

    out = io.StringIO()
    call_command("token", "rotate", "--tenant", slug, str(token.pk), stdout=out, stderr=err)
    new_raw = out.getvalue().strip().splitlines()[-1]
    assert me(raw) == 401 and me(new_raw) == 200

    new = ApiToken.objects.get(rotated_from=token)
    call_command(
        "token", "revoke", "--tenant", slug, str(new.pk), "--reason", "x", stdout=io.StringIO()
    )
    assert me(new_raw) == 401
    assert AuditEvent.objects.filter(verb="token.revoke", object_id=str(new.pk)).get().actor_kind
