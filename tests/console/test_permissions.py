"""The permission matrix over every console URL.

anonymous → the sign-in page; a member without the role → 403 (and the page they may see
shows no button for it); a member of another tenant → 404 for an object, their own tenant's
data for a list. Refused POSTs change nothing.
"""

from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from approvals.models import ApprovalRequest
from core.models import Role
from notifications.models import NotificationChannel, NotificationDelivery
from notifications.services import channel_create
from runs.models import Action, Replay, Run
from tests.builders import SETUP, make_world
from tests.console.conftest import (
    make_awaiting,
    make_failed_run_with_tools,
    make_needs_human,
)


@dataclass
class Scene:
    world: object
    needs: Action
    awaiting: Action
    run: Run
    channel: object = None


@pytest.fixture(scope="module")
def scene(django_db_setup, django_db_blocker, downstream):
    with django_db_blocker.unblock():
        world = make_world(downstream)
        channel, _ = channel_create(
            tenant=world.tenant,
            name="pager",
            kind="webhook",
            url="http://127.0.0.1:9/hook",
            events=["replay.forced"],
            actor=SETUP,
        )
        return Scene(
            world=world,
            needs=make_needs_human(world),
            awaiting=make_awaiting(world),
            run=make_failed_run_with_tools(world),
            channel=channel,
        )


def client_for(scene, who):
    client = Client()
    if who != "anonymous":
        persona = getattr(scene.world, who)
        client.force_login(get_user_model().objects.get(username=persona.username))
    return client


ROLES_OF = {
    "approver": {Role.APPROVER},
    "oncall": {Role.ONCALL},
    "admin": {Role.ADMIN, Role.APPROVER, Role.ONCALL},
}
WHO = ["anonymous", "approver", "oncall", "admin", "outsider"]

# name: (method, url from the scene, role needed or None, is it one object of tenant A?)
URLS = {
    "queue": ("get", lambda s: "/", None, False),
    "approvals": ("get", lambda s: "/approvals/", Role.APPROVER, False),
    "runs": ("get", lambda s: "/runs/", None, False),
    "replays": ("get", lambda s: "/replays/", Role.ADMIN, False),
    "replays_csv": ("get", lambda s: "/replays.csv", Role.ADMIN, False),
    "audit": ("get", lambda s: "/audit/", Role.ADMIN, False),
    "audit_csv": ("get", lambda s: "/audit.csv", Role.ADMIN, False),
    "action": ("get", lambda s: f"/actions/{s.needs.pk}/", None, True),
    "run": ("get", lambda s: f"/runs/{s.run.pk}/", None, True),
    "recheck": ("post", lambda s: f"/actions/{s.needs.pk}/recheck/", Role.ONCALL, True),
    "claim": ("post", lambda s: f"/actions/{s.needs.pk}/claim/", Role.ONCALL, True),
    "release": ("post", lambda s: f"/actions/{s.needs.pk}/release/", Role.ONCALL, True),
    "resolve": ("post", lambda s: f"/actions/{s.needs.pk}/resolve/", Role.ONCALL, True),
    "grant": (
        "post",
        lambda s: f"/approvals/{s.awaiting.approval_request_id}/grant/",
        Role.APPROVER,
        True,
    ),
    "deny": (
        "post",
        lambda s: f"/approvals/{s.awaiting.approval_request_id}/deny/",
        Role.APPROVER,
        True,
    ),
    "replay": ("post", lambda s: f"/runs/{s.run.pk}/replay/", None, True),
    "force_replay": ("post", lambda s: f"/runs/{s.run.pk}/force-replay/", Role.ADMIN, True),
    "actions": ("get", lambda s: "/actions/", None, False),
    "actions_csv": ("get", lambda s: "/actions.csv", None, False),
    "search": ("get", lambda s: "/search/", None, False),
    "acknowledge": ("post", lambda s: f"/actions/{s.needs.pk}/acknowledge/", Role.ONCALL, True),
    "approval_state": (
        "get",
        lambda s: f"/approvals/{s.awaiting.approval_request_id}/state/",
        Role.APPROVER,
        True,
    ),
    "notifications": ("get", lambda s: "/notifications/", Role.ADMIN, False),
    "deliveries": ("get", lambda s: "/notifications/deliveries/", Role.ADMIN, False),
    "channel_update": (
        "post",
        lambda s: f"/notifications/channels/{s.channel.pk}/",
        Role.ADMIN,
        True,
    ),
    "channel_rotate": (
        "post",
        lambda s: f"/notifications/channels/{s.channel.pk}/rotate/",
        Role.ADMIN,
        True,
    ),
    "channel_test": (
        "post",
        lambda s: f"/notifications/channels/{s.channel.pk}/test/",
        Role.ADMIN,
        True,
    ),
}
POST_BODIES = {
    "resolve": {"outcome": "succeeded", "reason": "checked by hand"},
    "grant": {"ttl_seconds": "3600"},
    "deny": {"reason": "no"},
    "force_replay": {"reason": "because", "confirm": "x"},
    "channel_update": {"change": "disable"},
}


def expected_status(who, method, role, is_object):
    if who == "anonymous":
        return 302
    if who == "outsider":
        if is_object:
            return 404
        return 200  # their own tenant's list (the outsider is an admin of tenant B)
    if role is None or role in ROLES_OF[who]:
        return 200 if method == "get" else None  # allowed POSTs are exercised elsewhere
    return 403


CASES = [
    (name, who)
    for name, (method, _, role, is_object) in URLS.items()
    for who in WHO
    if expected_status(who, method, role, is_object) is not None
]


def snapshot(scene):
    """Everything a refused POST must leave alone."""
    needs = Action.objects.get(pk=scene.needs.pk)
    return (
        needs.state,
        needs.claimed_by_id,
        Action.objects.get(pk=scene.awaiting.pk).state,
        ApprovalRequest.objects.get(pk=scene.awaiting.approval_request_id).state,
        Replay.objects.filter(original_run=scene.run).count(),
        needs.reconciliations.count(),
        NotificationChannel.objects.filter(pk=scene.channel.pk).values_list("secret", "enabled")[0],
        NotificationDelivery.objects.filter(channel=scene.channel).count(),
    )


@pytest.mark.parametrize(("name", "who"), CASES, ids=[f"{n}-{w}" for n, w in CASES])
def test_permission_matrix(live_db, scene, name, who):
    method, url_of, role, is_object = URLS[name]
    url = url_of(scene)
    client = client_for(scene, who)
    before = snapshot(scene)
    if method == "get":
        response = client.get(url)
    else:
        response = client.post(url, POST_BODIES.get(name, {}))
    expected = expected_status(who, method, role, is_object)
    assert response.status_code == expected, (url, who)
    if who == "anonymous":
        assert response["Location"].startswith("/login/?next=")
    if method == "post":
        assert snapshot(scene) == before, f"a refused {name} changed something"
    if who == "outsider" and response.status_code == 200 and not response.streaming:
        body = response.content.decode()
        assert scene.world.tenant.slug not in body
        assert str(scene.needs.pk) not in body


def test_htmx_request_of_anonymous_is_sent_to_sign_in_with_a_full_redirect(live_db, scene):
    page = f"http://testserver/actions/{scene.needs.pk}/"
    response = Client().get(
        f"/actions/{scene.needs.pk}/?live=1&v=x", HTTP_HX_REQUEST="true", HTTP_HX_CURRENT_URL=page
    )
    assert response.status_code == 200
    assert response["HX-Redirect"] == f"/login/?next=%2Factions%2F{scene.needs.pk}%2F"


def test_queue_filter_naming_another_tenant_is_a_404(live_db, scene):
    client = client_for(scene, "oncall")
    assert client.get(f"/?tenant={scene.world.other_tenant.slug}").status_code == 404
    assert client.get("/?tenant=no-such-tenant").status_code == 404


def test_switching_to_a_tenant_one_is_not_a_member_of_is_a_404(live_db, scene):
    client = client_for(scene, "oncall")
    response = client.post("/tenant/", {"tenant": scene.world.other_tenant.slug})
    assert response.status_code == 404


def test_wrong_role_sees_no_button(live_db, scene):
    approver = client_for(scene, "approver").get(f"/actions/{scene.needs.pk}/").content.decode()
    for label in ("Resolve as succeeded", "Resolve as failed", "Re-check now", ">Claim<"):
        assert label not in approver
    assert "On-call works this action" in approver

    oncall = client_for(scene, "oncall").get(f"/actions/{scene.awaiting.pk}/").content.decode()
    assert ">Grant<" not in oncall and ">Deny<" not in oncall
    assert "An approver decides this one" in oncall

    for who in ("approver", "oncall"):
        page = client_for(scene, who).get(f"/runs/{scene.run.pk}/").content.decode()
        assert "Force replay" not in page
        assert "Only an admin can force a replay" in page

    nav_oncall = client_for(scene, "oncall").get("/").content.decode()
    assert 'href="/approvals/"' not in nav_oncall
    assert 'href="/audit/"' not in nav_oncall and 'href="/replays/"' not in nav_oncall
    nav_approver = client_for(scene, "approver").get("/").content.decode()
    assert 'href="/approvals/"' in nav_approver and 'href="/audit/"' not in nav_approver


def test_right_role_sees_the_buttons(live_db, scene):
    oncall = client_for(scene, "oncall").get(f"/actions/{scene.needs.pk}/").content.decode()
    for label in ("Resolve as succeeded", "Resolve as failed", "Re-check now", ">Claim<"):
        assert label in oncall
    approver = client_for(scene, "approver").get(f"/actions/{scene.awaiting.pk}/").content.decode()
    assert ">Grant<" in approver and ">Deny<" in approver
    admin = client_for(scene, "admin")
    assert "Force replay" in admin.get(f"/runs/{scene.run.pk}/").content.decode()
    nav = admin.get("/").content.decode()
    for href in ('href="/approvals/"', 'href="/audit/"', 'href="/replays/"', 'href="/runs/"'):
        assert href in nav


def test_every_page_names_the_operator_and_the_tenant(live_db, scene):
    client = client_for(scene, "admin")
    for name, (method, url_of, _, _) in URLS.items():
        if method != "get" or name.endswith("_csv"):
            continue
        body = client.get(url_of(scene)).content.decode()
        assert scene.world.admin.username in body, name
        assert scene.world.tenant.slug in body, name
