"""Bulk decisions (runs/bulk.py) through the API and the console's plain forms: who may do
what, what is refused before anything is done, and that a plan acts on nothing outside the
caller's tenant."""

import re
import uuid

from django.contrib.auth import get_user_model
from django.test import Client

from runs.models import Action
from tests.builders import make_needs_human, make_world
from tests.conftest import problem


def console(persona):
    client = Client()
    client.force_login(get_user_model().objects.get(username=persona.username))
    return client


def wills(html: str) -> list[str]:
    return re.findall(r'data-will="([^"]+)"', html)


def test_another_tenants_items_and_a_missing_role_are_planned_as_nothing_and_stay_so(
    live_db, downstream
):
    world = make_world(downstream)
    action = make_needs_human(world)
    body = {"operation": "resolve:failed", "reason": "no", "id": [action.pk]}
    for persona, why in [
        (world.outsider, "Not found (or not in your tenants)."),
        (world.approver, "This needs the oncall role."),
    ]:
        client = console(persona)
        page = client.post("/bulk/", body).content.decode()
        assert wills(page) == ["skip"] and why in page
        if persona is world.outsider:
            assert world.tenant.slug not in page
        sig = re.search(r'name="signature" value="([^"]+)"', page).group(1)
        done = client.post(
            "/bulk/confirm/",
            {
                "operation": "resolve",
                "outcome": "failed",
                "reason": "no",
                "id": [action.pk],
                "signature": sig,
            },
        )
        assert done.status_code == 303
        assert Action.objects.get(pk=action.pk).state == "needs_human"


def test_the_api_plans_only_within_the_callers_tenant_and_refuses_bad_input(live_db, downstream):
    world = make_world(downstream)
    action = make_needs_human(world)
    outsider = world.outsider.client()
    plan = outsider.post(
        "/api/v1/bulk/preview",
        {"operation": "recheck", "ids": [str(action.pk)]},
        format="json",
    ).json()
    assert [i["will"] for i in plan["items"]] == ["skip"]
    oncall = world.oncall.client()
    too_many = [str(uuid.uuid4()) for _ in range(51)]
    for body, field in [
        ({"operation": "recheck", "ids": []}, "ids"),
        ({"operation": "recheck", "ids": too_many}, "ids"),
        ({"operation": "resolve", "outcome": "failed", "ids": [str(action.pk)]}, "reason"),
        ({"operation": "resolve", "reason": "x", "ids": [str(action.pk)]}, "outcome"),
        ({"operation": "replay", "force": True, "ids": [str(action.pk)]}, "reason"),
        ({"operation": "delete", "ids": [str(action.pk)]}, "operation"),
    ]:
        response = oncall.post("/api/v1/bulk/preview", body, format="json")
        assert response.status_code == 400, (body, response.content)
        assert field in problem(response)["errors"], (body, problem(response))
    stale = oncall.post(
        "/api/v1/bulk/apply",
        {"operation": "recheck", "ids": [str(action.pk)], "signature": "old"},
        format="json",
    )
    assert stale.status_code == 409
    assert problem(stale)["plan"]["items"][0]["will"] == "recheck"  # the plan to look at now
    assert (
        action.reconciliations.count() == Action.objects.get(pk=action.pk).reconciliations.count()
    )
