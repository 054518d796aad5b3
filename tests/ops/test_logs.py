"""One request id from the HTTP request to the tool call: in the web's access line, the
worker's dispatch line, the audit events, and the traceparent the tool receives."""

import io
import json
import logging
import time
import uuid

import pytest

from core.logs import ContextFilter, JsonFormatter
from core.models import AuditEvent


@pytest.fixture
def json_log():
    """The access log as LOG_FORMAT=json writes it (same formatter, same filter)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        JsonFormatter(
            "%(asctime)s %(levelname)s %(name)s %(message)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
        )
    )
    handler.addFilter(ContextFilter())
    logger = logging.getLogger("takeover.access")
    logger.addHandler(handler)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        logger.removeHandler(handler)


@pytest.mark.worker
def test_one_request_id_from_the_web_line_to_the_worker_line_and_the_audit(world, worker, json_log):
    world.tool("update_ticket")
    run = world.start_run()
    key = target = f"rid-{uuid.uuid4().hex[:8]}"
    response = world.propose(
        run["id"], key, tool="update_ticket", target=target, desired_state={"s": "open"}
    )
    assert response.status_code == 201
    rid = response["X-Request-ID"]
    action = response.json()
    assert world.wait_action(action["id"])["state"] == "succeeded"

    # The web: one JSON object, with the request id, tenant and principal.
    lines = [
        line
        for line in json_log()
        if line["message"].startswith(f"POST /api/v1/runs/{run['id']}/actions")
    ]
    assert len(lines) == 1
    web = lines[0]
    assert web["request_id"] == rid
    assert web["tenant"] == world.tenant.slug
    assert web["actor"] == "principal:agent"
    assert web["status"] == 201 and web["level"] == "INFO" and web["logger"] == "takeover.access"

    # The worker: its dispatch line is a JSON object carrying the proposal's id (not the
    # Celery task's), the tenant, the run and the action.
    wanted = f"action {action['id']} (update_ticket → {target}): applied HTTP 200"
    deadline = time.monotonic() + 10
    while True:  # the line is written just after the settle commits
        records = [json.loads(line) for line in worker.log().splitlines() if line.startswith("{")]
        dispatched = [r for r in records if r["message"] == wanted]
        if dispatched or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert len(dispatched) == 1, worker.log()[-3000:]
    line = dispatched[0]
    assert line["request_id"] == rid
    assert line["tenant"] == world.tenant.slug
    assert line["run_id"] == run["id"] and line["action_id"] == action["id"]
    assert line["logger"] == "runs.dispatch" and line["outcome"] == "applied"
    # The tool call itself (httpx's line) is logged under the same id.
    calls = [r for r in records if r.get("action_id") == action["id"] and r["logger"] == "httpx"]
    assert calls and all(c["request_id"] == rid for c in calls)

    # The audit: the proposal and every move the dispatcher made, under the same id.
    events = AuditEvent.objects.filter(object_id=action["id"]).order_by("at")
    verbs = {
        (e.actor_kind, e.after.get("state") if e.after else None): e.request_id for e in events
    }
    assert verbs[("principal", "queued")] == rid
    assert verbs[("system", "dispatching")] == rid
    assert verbs[("system", "succeeded")] == rid

    # The tool got a W3C traceparent whose trace id is the request id.
    [sent] = [
        r
        for r in world.downstream.control("GET", "requests")["requests"]
        if r["idempotency_key"] == key
    ]
    version, trace_id, span_id, flags = sent["traceparent"].split("-")
    assert (version, trace_id, len(span_id), flags) == ("00", rid, 16, "01")


def test_a_callers_traceparent_carries_on_as_the_request_id(world):
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    response = world.agent.client().get(
        "/api/v1/me", HTTP_TRACEPARENT=f"00-{trace_id}-00f067aa0ba902b7-01"
    )
    assert response["X-Request-ID"] == trace_id
    # Malformed or all-zero: a fresh id instead.
    for bad in ["00-zz-00f067aa0ba902b7-01", f"00-{'0' * 32}-00f067aa0ba902b7-01"]:
        other = world.agent.client().get("/api/v1/me", HTTP_TRACEPARENT=bad)
        assert len(other["X-Request-ID"]) == 32 and other["X-Request-ID"] != trace_id
