"""One rule, one place: each person-facing decision is refused by its `check_*`
(`runs/decisions.py`, `runs/replay.py`), so the API, the console and a bulk preview refuse
the same request with the same words. One test per decision; each asks every door that
offers it."""

from django.contrib.auth import get_user_model
from django.test import Client
from django.utils.html import escape

from core.models import Role, Tenant
from runs import decisions, replay
from runs.models import Action
from tests.builders import (
    add_operator,
    make_awaiting,
    make_failed_run_with_tools,
    make_needs_human,
    operator_actor,
)

from ..conftest import problem


def signed_in(persona) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.get(username=persona.username))
    return client


def api_refusal(persona, url, body=None) -> str:
    response = persona.client().post(url, body or {}, format="json")
    assert response.status_code in {403, 409}, response.content
    return problem(response)["detail"]


def console_says(persona, url, body=None) -> str:
    response = signed_in(persona).post(url, body or {}, follow=True)
    assert response.status_code == 200
    return response.content.decode()


def bulk_why(persona, **body) -> str:
    plan = persona.client().post("/api/v1/bulk/preview", body, format="json").json()
    [item] = plan["items"]
    assert item["will"] == "skip", item
    return item["why"]


def test_resolve_a_settled_action(live_db, downstream):
    world = make_world_with_needs_human(downstream)
    world.oncall.client().post(
        f"/api/v1/actions/{world.action.pk}/resolve",
        {"outcome": "failed", "reason": "checked"},
        format="json",
    )
    words = str(
        decisions.check_resolve(
            Action.objects.get(pk=world.action.pk),
            outcome="succeeded",
            reason="again",
            actor=operator_actor(world.oncall),
        )
    )
    assert "can be resolved" in words
    body = {"outcome": "succeeded", "reason": "again"}
    url = f"/actions/{world.action.pk}/resolve"
    assert api_refusal(world.oncall, f"/api/v1{url}", body) == words
    assert escape(words) in console_says(world.oncall, f"{url}/", body)
    assert bulk_why(world.oncall, operation="resolve", ids=[str(world.action.pk)], **body) == words


def test_resolve_an_action_someone_else_claimed(live_db, downstream):
    world = make_world_with_needs_human(downstream)
    holder = add_operator(world, "holder", Role.ONCALL)
    signed_in(holder).post(f"/actions/{world.action.pk}/claim/")
    words = f"Claimed by {holder.username}: only they resolve it, unless it is taken over."
    body = {"outcome": "succeeded", "reason": "looks done"}
    url = f"/actions/{world.action.pk}/resolve"
    assert api_refusal(world.oncall, f"/api/v1{url}", body) == words
    assert escape(words) in console_says(world.oncall, f"{url}/", body)
    assert bulk_why(world.oncall, operation="resolve", ids=[str(world.action.pk)], **body) == words
    assert Action.objects.get(pk=world.action.pk).state == "needs_human"
    # The holder resolves it; anyone else takes it over, on the API with `take_over`.
    taken = world.oncall.client().post(f"/api/v1{url}", {**body, "take_over": True}, format="json")
    assert taken.status_code == 200 and taken.json()["state"] == "succeeded"


def test_recheck_a_settled_action(live_db, downstream):
    world = make_world_with_needs_human(downstream)
    world.oncall.client().post(
        f"/api/v1/actions/{world.action.pk}/resolve",
        {"outcome": "succeeded", "reason": "checked"},
        format="json",
    )
    words = "Only an unknown or needs_human action can be re-checked; this one is succeeded."
    assert api_refusal(world.oncall, f"/api/v1/actions/{world.action.pk}/reconcile") == words
    assert escape(words) in console_says(world.oncall, f"/actions/{world.action.pk}/recheck/")
    assert bulk_why(world.oncall, operation="recheck", ids=[str(world.action.pk)]) == words


def test_replay_a_run_that_called_a_tool(live_db, downstream):
    from tests.builders import make_world

    world = make_world(downstream)
    run = make_failed_run_with_tools(world)
    words = replay.replay_verdict(run).message
    assert "update_ticket" in words
    assert api_refusal(world.admin, f"/api/v1/runs/{run.pk}/replay") == words
    assert escape(words) in console_says(world.admin, f"/runs/{run.pk}/replay/")
    assert bulk_why(world.admin, operation="replay", ids=[str(run.pk)]) == words


def test_force_a_replay_twice_under_four_eyes(live_db, downstream):
    from tests.builders import make_world

    world = make_world(downstream)
    Tenant.objects.filter(pk=world.tenant.pk).update(four_eyes_force_replay=True)
    run = make_failed_run_with_tools(world)
    body = {"force": True, "reason": "guarded"}
    asked = world.admin.client().post(f"/api/v1/runs/{run.pk}/replay", body, format="json")
    assert asked.status_code == 202
    words = (
        "A force replay of this run already waits for a second admin (asked by "
        f"operator:{world.admin.username})."
    )
    assert api_refusal(world.admin, f"/api/v1/runs/{run.pk}/replay", body) == words
    page = console_says(
        world.admin, f"/runs/{run.pk}/force-replay/", {"reason": "guarded", "confirm": str(run.pk)}
    )
    assert escape(words) in page
    assert bulk_why(world.admin, operation="replay", ids=[str(run.pk)], **body) == words
    # Who may force: an on-call may not, in the same words at every door.
    words = "This needs the admin role."
    assert str(replay.may_force_replay(operator_actor(world.oncall))) == words
    assert bulk_why(world.oncall, operation="replay", ids=[str(run.pk)], **body) == words
    # Four eyes: the requester cannot confirm their own request.
    [request] = run.force_requests.all()
    words = str(replay.check_force_confirm(request, actor=operator_actor(world.admin)))
    assert "different admin" in words
    url = f"/force-replay-requests/{request.pk}/confirm"
    assert api_refusal(world.admin, f"/api/v1{url}") == words
    assert escape(words) in console_says(world.admin, f"/force-replays/{request.pk}/confirm/")


def test_acknowledge_an_action_that_is_not_blocked(live_db, downstream):
    world = make_world_with_needs_human(downstream)
    words = "Only a blocked action can be acknowledged; this one is needs_human."
    url = f"/actions/{world.action.pk}/acknowledge"
    assert api_refusal(world.oncall, f"/api/v1{url}") == words
    assert escape(words) in console_says(world.oncall, f"{url}/")


def test_grant_and_deny_a_request_already_decided(live_db, downstream):
    from tests.builders import make_world

    world = make_world(downstream)
    action = make_awaiting(world)
    request = action.approval_request
    decisions.approval_request_deny(request, reason="no", actor=operator_actor(world.approver))
    words = "This approval request is already denied."
    for verb, body in [("grant", {"ttl_seconds": 3600}), ("deny", {"reason": "no"})]:
        assert (
            api_refusal(world.approver, f"/api/v1/approval-requests/{request.pk}/{verb}", body)
            == words
        )
        page = console_says(world.approver, f"/approvals/{request.pk}/{verb}/", body)
        assert escape(words) in page


def test_claim_an_action_that_is_settled(live_db, downstream):
    world = make_world_with_needs_human(downstream)
    world.oncall.client().post(
        f"/api/v1/actions/{world.action.pk}/resolve",
        {"outcome": "succeeded", "reason": "checked"},
        format="json",
    )
    action = Action.objects.get(pk=world.action.pk)
    words = str(decisions.check_claim(action, actor=operator_actor(world.oncall)))
    assert words == "Only an action in the queue can be claimed."
    assert escape(words) in console_says(world.oncall, f"/actions/{action.pk}/claim/")


def make_world_with_needs_human(downstream):
    from tests.builders import make_world

    world = make_world(downstream)
    world.action = make_needs_human(world)
    return world
