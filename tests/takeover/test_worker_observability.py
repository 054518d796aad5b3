"""What the worker shows of its work: one request id from the HTTP request to the worker's
JSON log line, the audit events and the tool's traceparent; and the worker's own metrics.

These tests start a worker of their own and stop it when the module ends. The suite's
session-wide worker, started this early, would keep draining the test database while later
tests run stacks of their own on it (tests/runs/engine/test_queue_at_scale.py)."""

import json
import os
import signal
import time
import uuid

import httpx
import pytest

from core.models import AuditEvent
from tests.conftest import STARTED_WORKERS, start_worker
from tests.takeover.test_metrics import TOKEN, parse, value

pytestmark = pytest.mark.worker


@pytest.fixture(scope="module")
def own_worker(django_db_setup, django_db_blocker, tmp_path_factory):
    """Ours alone: any worker started earlier (the suite's shared one) is paused with
    SIGSTOP meanwhile, so that the work and its series land here, and resumed after."""
    paused = [w for w in STARTED_WORKERS if w.process.poll() is None]
    for w in paused:
        os.killpg(w.process.pid, signal.SIGSTOP)
    try:
        with django_db_blocker.unblock():
            worker = start_worker(tmp_path_factory)
        yield worker
        worker.stop()
    finally:
        for w in paused:
            os.killpg(w.process.pid, signal.SIGCONT)


def test_one_request_id_from_the_web_line_to_the_worker_line_and_the_audit(
    world, own_worker, json_log
):
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
        records = [
            json.loads(line) for line in own_worker.log().splitlines() if line.startswith("{")
        ]
        dispatched = [r for r in records if r["message"] == wanted]
        if dispatched or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert len(dispatched) == 1, own_worker.log()[-3000:]
    line = dispatched[0]
    assert line["request_id"] == rid
    assert line["tenant"] == world.tenant.slug
    assert line["run_id"] == run["id"] and line["action_id"] == action["id"]
    assert line["logger"] == "runs.engine.dispatch" and line["outcome"] == "applied"
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


def test_worker_serves_tool_call_dispatch_and_reconcile_series(world, own_worker, downstream):
    world.tool("update_ticket")
    run = world.start_run()
    applied = world.propose(
        run["id"], "wm-1", tool="update_ticket", target="wm-t1", desired_state={"status": "open"}
    ).json()
    assert world.wait_action(applied["id"])["state"] == "succeeded"
    # Applied, then the answer lost: unknown, then reconciled by a read that matches.
    downstream.fault("drop_after_commit", target="wm-t2")
    lost = world.propose(
        run["id"], "wm-2", tool="update_ticket", target="wm-t2", desired_state={"status": "x"}
    ).json()
    assert world.wait_action(lost["id"])["resolution"] == "reconciled"

    assert httpx.get(own_worker.metrics_url, timeout=5).status_code == 401
    response = httpx.get(
        own_worker.metrics_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5
    )
    assert response.status_code == 200
    samples = parse(response.text)
    assert value(samples, "takeover_attempts_total", tool="update_ticket", outcome="applied") >= 1
    assert value(samples, "takeover_attempts_total", tool="update_ticket", outcome="unknown") >= 1
    assert value(samples, "takeover_tool_call_seconds_count", tool="update_ticket") >= 2
    assert value(samples, "takeover_dispatch_seconds_count", tool="update_ticket") >= 2
    assert (
        value(samples, "takeover_reconcile_verdicts_total", tool="update_ticket", verdict="match")
        >= 1
    )
    assert ("takeover_lease_expiries_total", frozenset()) in samples
