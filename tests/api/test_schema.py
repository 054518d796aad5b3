"""The OpenAPI schema describes what API v1 really answers.

- `spectacular --validate --fail-on-warn` passes;
- real answers, success and problem alike, are documented for their operation (status and
  content type) and validate against the documented schema;
- a client generated from the schema (openapi-python-client) round-trips a real action
  against a running server.
"""

import re
import subprocess
import sys
import uuid
from pathlib import Path

import jsonschema
import pytest
import yaml
from django.core.management import call_command

from ..conftest import ROOT


@pytest.fixture(scope="module")
def schema_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("schema") / "openapi.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(path))
    return path


@pytest.fixture(scope="module")
def document(schema_file):
    return yaml.safe_load(schema_file.read_text())


def json_schema(node):
    """OpenAPI 3.0's `nullable` as JSON Schema's null type."""
    if isinstance(node, list):
        return [json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    node = {k: json_schema(v) for k, v in node.items()}
    if node.pop("nullable", False):
        if "type" in node:
            node["type"] = [node["type"], "null"]
            if "enum" in node:
                node["enum"] = [*node["enum"], None]
        else:
            node = {"anyOf": [node, {"type": "null"}]}
    return node


class Conformance:
    def __init__(self, document):
        self.document = document
        self.components = json_schema(document["components"])
        self.templates = [
            (re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", t) + "$"), t)
            for t in sorted(document["paths"], key=lambda t: t.count("{"))  # literal first
        ]
        self.seen = set()

    def operation(self, method, path):
        path = path.split("?", 1)[0]
        for pattern, template in self.templates:
            if pattern.match(path):
                return template, self.document["paths"][template][method.lower()]
        raise AssertionError(f"{path} is not in the schema")

    def check(self, method, path, response):
        template, op = self.operation(method, path)
        status = str(response.status_code)
        assert status in op["responses"], (
            f"{method} {template} answered {status}, documented: {sorted(op['responses'])}"
        )
        self.seen.add((op["operationId"], status))
        documented = op["responses"][status].get("content")
        if response.status_code == 204:
            assert not documented and not response.content
            return response
        content_type = response["Content-Type"].split(";")[0]
        assert content_type in documented, (method, template, status, content_type)
        schema = {**documented[content_type]["schema"], "components": self.components}
        jsonschema.validate(response.json(), json_schema(schema))
        return response


@pytest.fixture
def api(document, world):
    conformance = Conformance(document)

    class Checked:
        def __init__(self, persona):
            self.client = persona.client()

        def __getattr__(self, method):
            def call(path, body=None, **headers):
                kwargs = {"format": "json"} if body is not None else {}
                send = getattr(self.client, method)
                response = send(path, body, **kwargs, **headers)
                return conformance.check(method.upper(), path, response)

            return call

    Checked.conformance = conformance
    return Checked


def test_schema_validates_without_warnings(schema_file, document):
    ops = [op for item in document["paths"].values() for op in item.values()]
    # The API's 27 core operations, plus tokens (4), acknowledge, idempotency conflicts,
    # four-eyes force replay requests (3), the tenant's settings (2), one tool, its
    # declaration and its signing secret's rotation (3), and bulk preview and apply (2).
    assert len(ops) == 43
    assert all(op["operationId"] for op in ops)
    for op in ops:
        for status, response in op["responses"].items():
            if status.startswith(("4", "5")):
                assert list(response["content"]) == ["application/problem+json"], op
    claim = document["paths"]["/api/v1/runs/claim"]["post"]["responses"]
    assert "204" in claim and "content" not in claim["204"]
    assert document["paths"]["/api/v1/runs"]["get"]["responses"].keys() >= {"200"}
    assert "201" not in document["paths"]["/api/v1/runs"]["get"]["responses"]


@pytest.mark.worker
def test_real_answers_conform_to_the_schema(api, world, worker):
    world.tool("update_ticket")
    world.tool("close_ticket", requires_approval=True)
    agent, oncall, approver, admin = (
        api(world.agent),
        api(world.oncall),
        api(world.approver),
        api(world.admin),
    )
    assert agent.post("/api/v1/runs/claim", {}).status_code == 204
    agent.get("/api/v1/me")
    run = agent.post("/api/v1/runs", {"trigger": "api", "config": {"a": 1}}).json()
    target = f"T-{uuid.uuid4().hex[:8]}"
    path = f"/api/v1/runs/{run['id']}/actions"
    body = {"tool": "update_ticket", "target": target, "desired_state": {"status": "open"}}
    action = agent.post(path, body, HTTP_IDEMPOTENCY_KEY=f"{target}:1").json()
    agent.post(path, body, HTTP_IDEMPOTENCY_KEY=f"{target}:1")  # 200, replayed
    agent.post(path, {**body, "desired_state": {"status": "x"}}, HTTP_IDEMPOTENCY_KEY=f"{target}:1")
    agent.post(path, body)  # 400 idempotency-key-missing
    agent.post(path, {**body, "tool": 7}, HTTP_IDEMPOTENCY_KEY="k")  # 400 validation-error
    agent.get(f"/api/v1/actions/{action['id']}?wait=10")
    agent.get(f"/api/v1/actions/{action['id']}?wait=x")
    agent.get(f"/api/v1/actions/{uuid.uuid4()}")
    world.downstream.seed(target + "-b", {"status": "new"})
    world.downstream.fault("error_before_commit", prefix="tickets", target=target + "-b")
    human = agent.post(
        path, {**body, "target": target + "-b"}, HTTP_IDEMPOTENCY_KEY=f"{target}:2"
    ).json()
    close = agent.post(
        path, {**body, "tool": "close_ticket"}, HTTP_IDEMPOTENCY_KEY=f"{target}:3"
    ).json()
    agent.get(f"/api/v1/runs/{run['id']}")
    agent.get("/api/v1/runs?status=running")
    agent.get("/api/v1/runs?cursor=%%%")
    agent.get("/api/v1/tools")
    agent.post(f"/api/v1/runs/{run['id']}/heartbeat", {})
    oncall.get("/api/v1/queue?state=needs_human,unknown")
    oncall.get("/api/v1/queue?state=nope")
    world.wait_action(human["id"])
    oncall.post(f"/api/v1/actions/{human['id']}/reconcile", {})
    bulk = {"operation": "resolve", "outcome": "failed", "reason": "bulk", "ids": [human["id"]]}
    plan = oncall.post("/api/v1/bulk/preview", bulk).json()
    oncall.post("/api/v1/bulk/preview", {**bulk, "ids": []})  # 400
    oncall.post("/api/v1/bulk/apply", {**bulk, "signature": "not-the-preview"})  # 409
    assert plan["items"][0]["will"] == "resolve_failed"
    oncall.post("/api/v1/bulk/preview", {"operation": "recheck", "ids": [human["id"]]})
    oncall.post(f"/api/v1/actions/{human['id']}/resolve", {"outcome": "failed", "reason": "no"})
    oncall.post(f"/api/v1/actions/{human['id']}/resolve", {"outcome": "failed", "reason": "no"})
    requests = approver.get("/api/v1/approval-requests?state=pending").json()["results"]
    request_id = next(r["id"] for r in requests if r["action"] == close["id"])
    approver.post(f"/api/v1/approval-requests/{request_id}/deny", {"reason": "not now"})
    approver.post(f"/api/v1/approval-requests/{request_id}/grant", {})
    approval = approver.post(
        "/api/v1/approvals",
        {"principal": "agent", "tool": "close_ticket", "target": target, "desired_state": {}},
    ).json()
    approver.get("/api/v1/approvals")
    approver.get(f"/api/v1/approvals/{approval['id']}")
    approver.post(f"/api/v1/approvals/{approval['id']}/revoke", {"reason": "changed my mind"})
    agent.post(
        f"/api/v1/runs/{run['id']}/finish", {"status": "error", "tools_called": ["update_ticket"]}
    )
    agent.post(path, body, HTTP_IDEMPOTENCY_KEY=f"{target}:9")  # 409 run-not-running
    agent.post(f"/api/v1/runs/{run['id']}/replay", {})  # 409 replay-refused
    agent.post(f"/api/v1/runs/{run['id']}/replay", {"force": True, "reason": "x"})  # 403
    admin.post(f"/api/v1/runs/{run['id']}/replay", {"force": True, "reason": "ops"})
    admin.get("/api/v1/replays")
    admin.get("/api/v1/settings")
    replay = {"operation": "replay", "ids": [run["id"]], "force": True, "reason": "again"}
    plan = admin.post("/api/v1/bulk/preview", replay).json()
    admin.post("/api/v1/bulk/apply", {**replay, "signature": plan["signature"]})
    entries = admin.get(f"/api/v1/ledger?key={target}:1").json()["results"]
    admin.post(f"/api/v1/ledger/{entries[0]['id']}/revoke", {"reason": "undone by hand"})
    admin.get("/api/v1/audit?verb=action.&actor=principal:agent")
    admin.post(
        "/api/v1/tools", {"name": f"t{uuid.uuid4().hex[:6]}", "base_url": "http://127.0.0.1:1"}
    )
    admin.post("/api/v1/tools", {"name": "update_ticket", "base_url": "http://127.0.0.1:1"})
    admin.post("/api/v1/principals", {"name": f"p{uuid.uuid4().hex[:6]}"})
    api(world.outsider).get(f"/api/v1/runs/{run['id']}")
    anonymous = api(world.agent)
    anonymous.client.credentials()
    anonymous.get("/api/v1/me")

    statuses = {status for _, status in api.conformance.seen}
    assert statuses >= {"200", "201", "204", "400", "401", "403", "404", "409", "422"}


@pytest.mark.worker
def test_declarations_lookups_and_resends_conform_to_the_schema(api, world, worker):
    """The declarations' fields and endpoints: tools with declarations, an action settled by the
    tool's lookup, one resent (attempt 2), a read without a key, and the replay verdict and
    refusal that name safe tools."""
    world.tool("update_ticket")
    world.tool("send_email", prefix="email", effect="idempotent", lookup=True)
    world.tool("search_tickets", prefix="search", effect="read_only")
    agent, oncall, admin = api(world.agent), api(world.oncall), api(world.admin)
    agent.get("/api/v1/tools/send_email")
    agent.get("/api/v1/tools/nope")  # 404
    declare = "/api/v1/tools/update_ticket/declaration"
    oncall.post(declare, {"lookup": True, "reason": "x"})  # 403
    admin.post(declare, {"reason": "x"})  # 400: nothing named
    admin.post(declare, {"lookup": True, "reason": "it keeps a record of keys"})
    admin.post(declare, {"lookup": True, "reason": "again"})  # 409: no change
    admin.post(declare, {"lookup": False, "reason": "it does not, after all"})

    run = agent.post("/api/v1/runs", {"trigger": "api"}).json()
    path = f"/api/v1/runs/{run['id']}/actions"
    ids = []
    for fault in ("drop_after_commit", "error_before_commit"):
        t = f"{uuid.uuid4().hex[:8]}@example.com"
        world.downstream.fault(fault, prefix="email", target=t)
        body = {"tool": "send_email", "target": t, "desired_state": {"subject": "Hi"}}
        ids.append(agent.post(path, body, HTTP_IDEMPOTENCY_KEY=f"{t}:mail").json()["id"])
    read = {"tool": "search_tickets", "target": "open", "desired_state": {"status": "open"}}
    ids.append(agent.post(path, read).json()["id"])  # no key: a read
    ticket = {"tool": "update_ticket", "target": f"T-{uuid.uuid4().hex[:6]}", "desired_state": {}}
    ids.append(agent.post(path, ticket, HTTP_IDEMPOTENCY_KEY=f"{ticket['target']}:t").json()["id"])
    for action_id in ids:
        world.wait_action(action_id, timeout=40)
        agent.get(f"/api/v1/actions/{action_id}")
    lookup, resent = (world.agent.client().get(f"/api/v1/actions/{i}").json() for i in ids[:2])
    assert lookup["reconciliations"][0]["verdict"] == "lookup_applied"
    assert [a["kind"] for a in resent["attempts"]] == ["send", "resend"]
    agent.post(
        f"/api/v1/runs/{run['id']}/finish",
        {"status": "error", "tools_called": ["send_email", "search_tickets", "update_ticket"]},
    )
    agent.get(f"/api/v1/runs/{run['id']}")
    refused = agent.post(f"/api/v1/runs/{run['id']}/replay", {})
    assert refused.status_code == 409 and refused.json()["safe_tools"]
    admin.post(f"/api/v1/runs/{run['id']}/replay", {"force": True, "reason": "tickets by key"})
    admin.get("/api/v1/replays")
    admin.get("/api/v1/tools")


@pytest.mark.worker
def test_a_generated_client_round_trips_a_real_action(
    schema_file, world, worker, live_server, tmp_path
):
    world.tool("update_ticket")
    bin_dir = Path(sys.executable).parent
    subprocess.run(
        [
            str(bin_dir / "openapi-python-client"),
            "generate",
            "--path",
            str(schema_file),
            "--meta",
            "none",
            "--output-path",
            str(tmp_path / "takeover_api"),
        ],
        check=True,
        cwd=tmp_path,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
    )
    sys.path.insert(0, str(tmp_path))
    try:
        from takeover_api import AuthenticatedClient
        from takeover_api.api.actions import actions_retrieve
        from takeover_api.api.runs import actions_propose, runs_claim, runs_retrieve, runs_start
        from takeover_api.models import ActionProposeInRequest, RunStartInRequest
        from takeover_api.models.action_out import ActionOut
        from takeover_api.models.action_state_enum import ActionStateEnum
        from takeover_api.models.run_detail_out import RunDetailOut
    finally:
        sys.path.remove(str(tmp_path))

    client = AuthenticatedClient(base_url=live_server.url, token=world.agent.token)
    run = runs_start.sync(client=client, body=RunStartInRequest.from_dict({"trigger": "api"}))
    assert isinstance(run, RunDetailOut), run
    assert runs_claim.sync_detailed(client=client).status_code == 204
    target = f"T-{uuid.uuid4().hex[:8]}"
    proposal = ActionProposeInRequest.from_dict(
        {"tool": "update_ticket", "target": target, "desired_state": {"status": "open"}}
    )
    action = actions_propose.sync(
        run.id, client=client, body=proposal, idempotency_key=f"gen:{target}"
    )
    assert isinstance(action, ActionOut) and action.replayed is False
    for _ in range(10):
        action = actions_retrieve.sync(action.id, client=client, wait=5)
        if action.state not in {ActionStateEnum.QUEUED, ActionStateEnum.DISPATCHING}:
            break
    assert action.state == ActionStateEnum.SUCCEEDED
    assert action.desired_state.to_dict() == {"status": "open"}
    again = actions_propose.sync(
        run.id, client=client, body=proposal, idempotency_key=f"gen:{target}"
    )
    assert again.replayed is True and again.id == action.id
    detail = runs_retrieve.sync(run.id, client=client)
    assert [a.id for a in detail.actions] == [action.id]
    assert world.downstream.mutations(target) == 1
    assert ROOT  # the generated package lives in tmp_path only
