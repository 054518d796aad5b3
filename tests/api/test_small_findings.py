"""The review's smaller findings, each through the API."""

import pytest
from django.contrib.auth import get_user_model

from core.models import AuditEvent

from ..conftest import problem


def test_null_means_not_given_for_optional_fields(world):
    run = world.start_run(session_id=None, config=None)
    assert run["config"] == {} and run["session_id"]
    response = world.agent.client().post(
        f"/api/v1/runs/{run['id']}/finish",
        {"status": "error", "error_message": None, "tools_called": None},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["error_message"] == ""
    assert response.json()["tools_executed"] is None  # null keeps its meaning there


@pytest.mark.parametrize("wait", ["1_0", "nan", "inf", " 5", "1e5", "-1", "31", "0x1", "01"])
def test_wait_takes_a_json_number_of_seconds_only(world, wait):
    world.tool("update_ticket")
    run = world.start_run()
    action = world.propose(
        run["id"], "k-wait", tool="update_ticket", target="t", desired_state={"s": 1}
    ).json()
    response = world.agent.client().get(f"/api/v1/actions/{action['id']}", {"wait": wait})
    assert response.status_code == 400
    assert "wait" in problem(response)["errors"]


def test_a_client_request_id_is_kept_apart_from_ours(world):
    response = world.agent.client().post(
        "/api/v1/runs", {"trigger": "api"}, format="json", HTTP_X_REQUEST_ID="client-chosen-1"
    )
    assert response.status_code == 201
    ours = response["X-Request-ID"]
    assert ours != "client-chosen-1" and len(ours) == 32
    event = AuditEvent.objects.get(object_id=response.json()["id"], verb="run.start")
    assert event.request_id == ours
    assert event.client_request_id == "client-chosen-1"
    listed = world.admin.client().get("/api/v1/audit", {"object": response.json()["id"]})
    assert listed.json()["results"][0]["client_request_id"] == "client-chosen-1"


def test_a_disabled_operators_token_gets_the_generic_answer(world):
    User = get_user_model()
    User.objects.filter(username=world.oncall.username).update(is_active=False)
    disabled = world.oncall.client().get("/api/v1/me")
    world.oncall.token = "tko_" + "x" * 40
    unknown = world.oncall.client().get("/api/v1/me")
    assert disabled.status_code == unknown.status_code == 401
    assert problem(disabled)["detail"] == problem(unknown)["detail"]


def test_principals_do_not_see_where_tools_live(world):
    world.tool("update_ticket")
    agent_view = world.agent.client().get("/api/v1/tools").json()["results"]
    assert agent_view and all("base_url" not in t for t in agent_view)
    admin_view = world.admin.client().get("/api/v1/tools").json()["results"]
    assert admin_view[0]["base_url"] == world.downstream.base("tickets")
