"""`takeover_client.testing`: one agent test, written once, run against a live server (real
worker, real downstream) and against the in-memory fake, gives the same outcomes; and every
answer the fake gave is an answer the API's schema documents, so the fake cannot drift."""

import pytest
import yaml
from django.core.management import call_command
from takeover_client import (
    Blocked,
    Conflict,
    Failed,
    IdempotencyConflict,
    RunNotRunning,
    Takeover,
    ValidationError,
)
from takeover_client.testing import FakeTakeover

from ..api.test_schema import Conformance
from .conftest import event, ticket

pytestmark = pytest.mark.worker


def agent_scenarios(client: Takeover, people, event_id: str) -> list:
    """What an agent's test would check, every outcome written down as it is seen."""
    applied, stale, refused, closed, denied_target = (ticket() for _ in range(5))
    seen = []
    with client.start_run("webhook", {"ticket": applied}, event_id=event_id) as run:
        first = run.propose("update_ticket", applied, {"status": "open"}).wait(20)
        seen.append(("applied", first.state, first.action.resolution, first.replayed))
        again = run.propose("update_ticket", applied, {"status": "open"})
        seen.append(("same key", again.replayed, again.content_changed, again.action_id))
        seen[-1] = (*seen[-1][:3], again.action_id == first.action_id)
        with pytest.raises(IdempotencyConflict):
            run.propose(
                "update_ticket", stale, {"status": "x"}, key=run.key("update_ticket", applied)
            )
        seen.append(("other intent, same key", "422"))
        with pytest.raises(Conflict) as conflict:
            run.propose("update_ticket", stale, {"status": "x"}, expected_version=7).wait(20)
        seen.append(("stale version", conflict.value.state, conflict.value.reason))
        people.reject_next("update_ticket", refused)
        with pytest.raises(Failed) as failed:
            run.propose("update_ticket", refused, {"status": "x"}).wait(20)
        seen.append(("tool refuses", failed.value.state, failed.value.reason))
        with pytest.raises(ValidationError) as unknown:
            run.propose("no_such_tool", applied, {})
        seen.append(("unknown tool", sorted(unknown.value.errors)))

        waiting = run.propose("close_ticket", closed, {"status": "closed"})
        seen.append(("needs approval", waiting.state, bool(waiting.action.approval_request_id)))
        people.grant(waiting.action.approval_request_id)
        seen.append(("granted", waiting.wait(20).state))
        refused_approval = run.propose("close_ticket", denied_target, {"status": "closed"})
        people.deny(refused_approval.action.approval_request_id)
        with pytest.raises(Blocked) as blocked:
            refused_approval.wait(20)
        seen.append(("denied", blocked.value.reason))
    finished = client.run(run.id).data
    seen.append(("finished", finished.status, finished.tools_executed))
    with pytest.raises(RunNotRunning):
        run.propose("update_ticket", ticket(), {"status": "open"})
    seen.append(("after finish", "409"))
    seen.append(("nothing to claim", client.claim()))
    return seen


EXPECTED = [
    ("applied", "succeeded", "applied", False),
    ("same key", True, False, True),
    ("other intent, same key", "422"),
    ("stale version", "failed", "version_conflict"),
    ("tool refuses", "failed", "rejected"),
    ("unknown tool", ["tool"]),
    ("needs approval", "awaiting_approval", True),
    ("granted", "succeeded"),
    ("denied", "approval_denied"),
    ("finished", "success", ["close_ticket", "update_ticket"]),
    ("after finish", "409"),
    ("nothing to claim", None),
]


class LivePeople:
    """The approver and the failing tool, on the live server and the demo downstream."""

    def __init__(self, world):
        self.world = world

    def grant(self, request_id):
        path = f"/api/v1/approval-requests/{request_id}/grant"
        assert self.world.approver.client().post(path, {}, format="json").status_code == 201

    def deny(self, request_id):
        path = f"/api/v1/approval-requests/{request_id}/deny"
        body = {"reason": "not this one"}
        assert self.world.approver.client().post(path, body, format="json").status_code == 200

    def reject_next(self, tool, target):
        self.world.downstream.fault("reject", prefix="tickets", target=target)


class FakePeople:
    def __init__(self, fake):
        self.fake = fake

    def grant(self, request_id):
        self.fake.grant(request_id)

    def deny(self, request_id):
        self.fake.deny(request_id, "not this one")

    def reject_next(self, tool, target):
        self.fake.script(tool, "rejected", target=target)


@pytest.fixture(scope="module")
def conformance(tmp_path_factory):
    path = tmp_path_factory.mktemp("schema") / "openapi.yaml"
    call_command("spectacular", "--file", str(path))
    return Conformance(yaml.safe_load(path.read_text()))


class Answer:
    """An httpx answer, as `Conformance.check` reads a Django one."""

    def __init__(self, response):
        self.status_code = response.status_code
        self.content = response.content
        self.json = response.json
        self.headers = response.headers

    def __getitem__(self, name):
        return self.headers[name]


def test_an_agent_test_gives_the_same_outcomes_on_the_fake_and_a_live_server(
    world, worker, live_server, conformance
):
    world.tool("update_ticket")
    world.tool("close_ticket", requires_approval=True)
    with Takeover(live_server.url, world.agent.token) as client:
        live = agent_scenarios(client, LivePeople(world), event())

    fake = FakeTakeover()
    fake.tool("update_ticket")
    fake.tool("close_ticket", requires_approval=True)
    answered = []
    handle = fake.handle

    def recording(request):
        response = handle(request)
        response.read()
        answered.append((request.method, request.url.path, response))
        return response

    fake.transport.handler = recording
    with fake.client() as client:
        faked = agent_scenarios(client, FakePeople(fake), event())

    assert faked == live == EXPECTED
    assert [e["target"] for e in fake.effects("close_ticket")] == [
        r["target"] for r in fake.approval_requests("granted")
    ]
    for method, path, response in answered:
        conformance.check(method, path, Answer(response))
    assert len(answered) >= 15  # every endpoint the scenarios used, problems included


def test_the_fixture_is_a_fresh_fake_and_duplicate_deliveries_apply_once(takeover_fake):
    takeover_fake.tool("send_email", identity_fields=["campaign"])
    for body in ("Hello", "Hello again"):  # a regenerated body: the same e-mail
        with (
            takeover_fake.client() as client,
            client.start_run("webhook", {}, event_id="evt_1") as run,
        ):
            outcome = run.propose(
                "send_email", "a@example.com", {"campaign": "c1", "body": body}
            ).wait(1)
    assert outcome.replayed and outcome.content_changed
    assert len(takeover_fake.effects("send_email")) == 1
