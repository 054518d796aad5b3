"""What a runtime does to its run (`runs/runtime.py`): claiming a pending replay, each once,
and the reaper of the runs whose runtime went quiet."""

import threading
from datetime import timedelta

import pytest
import time_machine
from django.db import connections
from django.utils import timezone

from core.models import AuditEvent
from runs.models import Run
from runs.runtime import runs_reap_stale

from ..builders import SETUP
from .scenarios import finish, replay


@pytest.fixture
def w(world):
    return world  # a runtime's own moves: no tool is called


def test_claim_takes_the_oldest_pending_replay_once(w):
    runs = []
    for _ in range(3):
        run = w.start_run()
        finish(w, run, "error", [])
        runs.append(replay(w.agent, run).json())
    results = []
    barrier = threading.Barrier(5)

    def claim():
        barrier.wait(5)
        results.append(w.agent.client().post("/api/v1/runs/claim"))
        connections.close_all()

    threads = [threading.Thread(target=claim) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    claimed = [r.json()["id"] for r in results if r.status_code == 200]
    assert sorted(claimed) == sorted(r["id"] for r in runs)
    assert sum(r.status_code == 204 for r in results) == 2
    for run_id in claimed:
        assert w.agent.client().get(f"/api/v1/runs/{run_id}").json()["status"] == "running"


def test_stale_runs_are_reaped_once_even_by_two_reapers(w):
    run = w.start_run()
    fresh = w.start_run()
    with time_machine.travel(timezone.now() + timedelta(hours=6, minutes=1)):
        w.agent.client().post(f"/api/v1/runs/{fresh['id']}/heartbeat")
        counts = []
        barrier = threading.Barrier(2)

        def reap():
            barrier.wait(5)
            counts.append(runs_reap_stale(actor=SETUP))
            connections.close_all()

        threads = [threading.Thread(target=reap) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    reaped = Run.objects.get(pk=run["id"])
    assert reaped.status == "error"
    assert reaped.error_message == "No completion record within 6 hours; actual outcome unknown."
    assert AuditEvent.objects.filter(object_id=run["id"], verb="run.error").count() == 1
    assert Run.objects.get(pk=fresh["id"]).status == "running"
    assert sum(counts) >= 1
    assert w.agent.client().get(f"/api/v1/runs/{run['id']}").json()["tools_executed"] is None
