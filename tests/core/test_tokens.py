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

from core.errors import PermissionDenied
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
    # The on-call belongs to this tenant only: this tenant's admin sees and revokes theirs.
    own = world.oncall.client().post("/api/v1/tokens", {"name": "laptop"}, format="json").json()
    listed = world.admin.client().get("/api/v1/tokens").json()["results"]
    assert own["id"] in [t["id"] for t in listed]
    # Someone who is also a member of tenant B cannot be locked out by A's admin.
    operator_create(
        tenant=world.other_tenant,
        username=world.approver.username,
        role=Role.APPROVER,
        actor=SETUP,
    )
    approver_tokens = ApiToken.objects.filter(user__username=world.approver.username)
    for token in approver_tokens:
        url = f"/api/v1/tokens/{token.pk}/revoke"
        assert world.admin.client().post(url, {}, format="json").status_code == 404
    assert (
        world.admin.client()
        .post(f"/api/v1/tokens/{own['id']}/revoke", {}, format="json")
        .json()["state"]
        == "revoked"
    )


@pytest.mark.parametrize(
    "body, field",
    [
        ({"principal": "agent", "operator": "x"}, "principal"),
        ({"principal": "nobody"}, "principal"),
        ({"operator": "nobody"}, "operator"),
        ({"principal": "agent", "expires_in_seconds": 5}, "expires_in_seconds"),
        ({"principal": "agent", "expires_in_seconds": "soon"}, "expires_in_seconds"),
        ({"principal": "agent", "name": 7}, "name"),
    ],
)
def test_bad_token_requests_name_the_field(world, body, field):
    response = world.admin.client().post("/api/v1/tokens", body, format="json")
    assert response.status_code == 400
    assert field in problem(response)["errors"]


def test_tokens_are_scoped_to_their_owner_and_tenant(world):
    assert world.agent.client().get("/api/v1/tokens").status_code == 403
    token = issue(world, principal="agent")
    # An on-call sees only their own tokens, and cannot touch a principal's.
    oncall = world.oncall.client()
    mine = [t["owner"]["name"] for t in oncall.get("/api/v1/tokens").json()["results"]]
    assert set(mine) == {world.oncall.username}
    assert oncall.post(f"/api/v1/tokens/{token['id']}/revoke").status_code == 404
    refused = oncall.post("/api/v1/tokens", {"principal": "agent"}, format="json")
    assert refused.status_code == 403
    outsider = world.outsider.client()
    assert token["id"] not in [t["id"] for t in outsider.get("/api/v1/tokens").json()["results"]]
    assert outsider.post(f"/api/v1/tokens/{token['id']}/revoke").status_code == 404
    assert me(token["token"]) == 200


# --- a person's credentials are theirs alone -------------------------------------------------


def test_every_operator_issues_rotates_and_revokes_their_own_token(world):
    oncall = world.oncall.client()
    issued = oncall.post("/api/v1/tokens", {"name": "cli"}, format="json")
    assert issued.status_code == 201, issued.content
    token = issued.json()
    assert token["owner"] == {"kind": "operator", "name": world.oncall.username}
    assert bearer(token["token"]).get("/api/v1/me").json()["name"] == world.oncall.username
    rotated = oncall.post(f"/api/v1/tokens/{token['id']}/rotate", {}, format="json")
    assert rotated.status_code == 201 and me(rotated.json()["token"]) == 200
    assert me(token["token"]) == 401
    # Naming oneself is the same as naming no one.
    named = oncall.post("/api/v1/tokens", {"operator": world.oncall.username}, format="json")
    assert named.status_code == 201
    revoked = oncall.post(f"/api/v1/tokens/{named.json()['id']}/revoke", {}, format="json")
    assert revoked.json()["state"] == "revoked"


def test_an_admin_never_receives_another_operators_secret(world):
    from tests.builders import add_operator

    other_admin = add_operator(world, "admin2", "admin")
    admin = world.admin.client()
    for who in (other_admin.username, world.oncall.username):
        refused = admin.post("/api/v1/tokens", {"operator": who, "name": "x"}, format="json")
        assert refused.status_code == 403, refused.content
        assert "theirs alone" in problem(refused)["detail"]
        assert "token" not in refused.json()
    assert not ApiToken.objects.filter(user__username=other_admin.username, name="x").exists()

    # Rotating another person's token revokes it and hands over no successor.
    theirs = ApiToken.objects.get(user__username=other_admin.username)
    rotated = admin.post(f"/api/v1/tokens/{theirs.pk}/rotate", {}, format="json")
    assert rotated.status_code == 200, rotated.content
    assert rotated.json()["state"] == "revoked" and "token" not in rotated.json()
    assert not ApiToken.objects.filter(rotated_from=theirs).exists()
    assert me(other_admin.token) == 401
    event = AuditEvent.objects.get(verb="token.revoke", object_id=str(theirs.pk))
    assert event.actor_name == world.admin.username

    # The service holds the rule for every caller (a command run as an operator, a future
    # endpoint): it refuses, whoever asks on another's behalf.
    from core.services import token_issue
    from tests.builders import operator_actor, user

    with pytest.raises(PermissionDenied):
        token_issue(tenant=world.tenant, actor=operator_actor(world.admin), user=user(world.oncall))
    with pytest.raises(PermissionDenied):
        operator_create(
            tenant=world.tenant,
            username=world.oncall.username,
            role=Role.ONCALL,
            actor=operator_actor(world.admin),
        )


def test_four_eyes_cannot_be_defeated_with_another_admins_token(world):
    """The review's exploit: admin X asks for a force replay, then tries to obtain admin Y's
    credentials to confirm it. Every path is refused, and X's own confirmation stays a 409."""
    from runs.models import Run
    from tests.builders import add_operator, make_failed_run_with_tools

    second = add_operator(world, "admin2", "admin")
    x = world.admin.client()
    x.post("/api/v1/settings", {"four_eyes_force_replay": True}, format="json")
    run = make_failed_run_with_tools(world)
    asked = x.post(f"/api/v1/runs/{run.pk}/replay", {"force": True, "reason": "r"}, format="json")
    request_id = asked.json()["id"]
    assert x.post(f"/api/v1/force-replay-requests/{request_id}/confirm").status_code == 409

    stolen = x.post("/api/v1/tokens", {"operator": second.username, "name": "x"}, format="json")
    assert stolen.status_code == 403 and "token" not in stolen.json()
    theirs = ApiToken.objects.get(user__username=second.username)
    rotated = x.post(f"/api/v1/tokens/{theirs.pk}/rotate", {}, format="json")
    assert "token" not in rotated.json()
    console = console_as(world.admin)
    choices = console.get("/tokens/").content.decode()
    assert f"operator:{second.username}" not in choices
    forged = console.post("/tokens/issue/", {"owner": f"operator:{second.username}"})
    assert forged.status_code == 422 and b"new-token-value" not in forged.content

    assert not Run.objects.filter(replay_of=run).exists()
    # The second admin, with a token they issued themselves, can still confirm.
    fresh = bearer(issue_own(second))
    assert fresh.post(f"/api/v1/force-replay-requests/{request_id}/confirm").status_code == 201


def issue_own(persona) -> str:
    """`persona` signs in with their password and issues themselves a token in the console."""
    from tests.builders import PASSWORD

    client = Client()
    assert client.login(username=persona.username, password=PASSWORD)
    return shown_token(client.post("/tokens/issue/", {"owner": f"operator:{persona.username}"}))


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


def test_console_token_page_shows_each_operator_their_own(world):
    page = console_as(world.oncall).get("/tokens/").content.decode()
    assert "yourself" in page and "principal:agent" not in page
    token = issue(world, principal="agent")
    assert token["id"] not in page
    refused = console_as(world.oncall).post(f"/tokens/{token['id']}/revoke/")
    assert refused.status_code == 404
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
