"""Dispatch (`runs/engine/dispatch.py`) end to end: HTTP API → real Celery worker → demo
downstream, whose own counters judge: the one safe retry of a request that never left, a
request that never leaves, a stale expected_version."""

import pytest

from ..scenarios import key, target

pytestmark = pytest.mark.worker


def test_connection_refused_before_send_gets_one_safe_retry(w):
    run = w.start_run()
    t, k = target(), key()
    # Refused for 2.5 s: the first attempt (picked up well within that) cannot connect; the
    # retry comes SAFE_RETRY_DELAY_SECONDS (3 s in tests) later, after the window.
    w.downstream.fault("refuse", seconds=2.5)
    response = w.propose(
        run["id"], k, tool="update_ticket", target=t, desired_state={"status": "open"}
    )
    action = w.wait_action(response.json()["id"])
    assert action["state"] == "succeeded"
    assert [a["outcome"] for a in action["attempts"]] == ["not_sent", "applied"]
    assert w.downstream.mutations(t) == 1


def test_a_request_that_never_leaves_fails_not_sent_after_exactly_one_retry(w):
    w.tool("nowhere", base_url="http://127.0.0.1:9/tickets")  # nothing listens on port 9
    run = w.start_run()
    response = w.propose(
        run["id"], key(), tool="nowhere", target=target(), desired_state={"status": "open"}
    )
    action = w.wait_action(response.json()["id"])
    assert action["state"] == "failed"
    assert action["failure_reason"] == "not_sent"
    assert [a["outcome"] for a in action["attempts"]] == ["not_sent", "not_sent"]


def test_stale_expected_version_fails_with_version_conflict(w):
    run = w.start_run()
    t = target()
    w.downstream.seed(t, {"status": "open"}, version=5)
    response = w.propose(
        run["id"],
        key(),
        tool="update_ticket",
        target=t,
        desired_state={"status": "refunded"},
        expected_version=4,
    )
    action = w.wait_action(response.json()["id"])
    assert action["state"] == "failed"
    assert action["failure_reason"] == "version_conflict"
    assert w.downstream.mutations(t) == 0
