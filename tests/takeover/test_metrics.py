"""/metrics: protected, the series present, gauges counted from the database; and, with the
real tiers, every counter adds up across gunicorn's processes and the worker's series are
served by the worker alone."""

import itertools
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

TOKEN = "test-metrics-token"  # tests/settings.py


def scrape(client) -> dict:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    return parse(response.content.decode())


def parse(text: str) -> dict:
    """{(name, frozenset(labels)): value} for every sample."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples, name, **labels) -> float:
    return samples[(name, frozenset(labels.items()))]


def test_metrics_are_refused_without_the_token(live_db, client):
    assert client.get("/metrics").status_code == 401
    wrong = client.get("/metrics", HTTP_AUTHORIZATION="Bearer not-the-token")
    assert wrong.status_code == 401
    assert wrong["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200


def test_metrics_allowlist_admits_a_network_without_a_token(live_db, client, settings):
    settings.METRICS_ALLOW_FROM = ["127.0.0.0/8"]
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="192.0.2.10").status_code == 401


def test_metrics_are_off_unless_configured(live_db, client, settings):
    settings.METRICS_TOKEN = ""
    settings.METRICS_ALLOW_FROM = []
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 404


def test_the_series_are_present(world, client):
    world.agent.client().get("/api/v1/me")  # at least one web request counted
    samples = scrape(client)
    names = {name for name, _labels in samples}
    for expected in [
        "takeover_open_actions",
        "takeover_oldest_open_action_age_seconds",
        "takeover_queue_backlog",
        "takeover_dispatch_leases_overdue",
        "takeover_approval_requests_pending",
        "takeover_approval_request_oldest_age_seconds",
        "takeover_http_requests_total",
        "takeover_http_request_seconds_bucket",
    ]:
        assert expected in names, expected
    slug = world.tenant.slug
    for state in ["awaiting_approval", "queued", "dispatching", "unknown", "needs_human"]:
        assert value(samples, "takeover_open_actions", tenant=slug, state=state) == 0
    assert (
        value(
            samples,
            "takeover_http_requests_total",
            method="GET",
            route="/api/v1/me",
            status="200",
        )
        >= 1
    )


def test_gauges_follow_actions_as_they_open_and_settle(world, client):
    world.tool("close_ticket", requires_approval=True)
    run = world.start_run()
    slug = world.tenant.slug
    before = scrape(client)
    assert value(before, "takeover_open_actions", tenant=slug, state="awaiting_approval") == 0
    assert value(before, "takeover_approval_requests_pending", tenant=slug) == 0

    proposals = [
        world.propose(
            run["id"], f"m-{i}", tool="close_ticket", target=f"t-{i}", desired_state={"s": 1}
        ).json()
        for i in range(2)
    ]
    time.sleep(1.1)
    opened = scrape(client)
    assert value(opened, "takeover_open_actions", tenant=slug, state="awaiting_approval") == 2
    assert value(opened, "takeover_approval_requests_pending", tenant=slug) == 2
    assert value(opened, "takeover_approval_request_oldest_age_seconds") >= 1
    assert value(opened, "takeover_oldest_open_action_age_seconds", state="awaiting_approval") >= 1

    for action in proposals:
        response = world.approver.client().post(
            f"/api/v1/approval-requests/{action['approval_request_id']}/deny",
            {"reason": "not today"},
            format="json",
        )
        assert response.status_code == 200, response.content
    settled = scrape(client)
    assert value(settled, "takeover_open_actions", tenant=slug, state="awaiting_approval") == 0
    assert value(settled, "takeover_approval_requests_pending", tenant=slug) == 0


# --- the real tiers: gunicorn as the README starts it, a Celery worker -----------------------

WORKER_SERIES = {
    "takeover_attempts",
    "takeover_tool_call_seconds",
    "takeover_dispatch_seconds",
    "takeover_reconcile_verdicts",
    "takeover_lease_expiries",
    "takeover_sweep_last_success_timestamp_seconds",
}
# Samples that only ever grow: counters, and a histogram's buckets, count and sum.
GROWING = ("_total", "_bucket", "_count", "_sum")


def scrape_http(url: str) -> dict:
    response = httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    assert response.status_code == 200, response.text
    return parse(response.text)


def families(url: str) -> set[str]:
    """The metric families an exposition declares (with samples or not)."""
    response = httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    return {family.name for family in text_string_to_metric_families(response.text)}


@pytest.mark.slow
@pytest.mark.worker
def test_two_web_processes_under_load_count_every_request_once_and_never_backwards(
    world, web, worker
):
    world.tool("update_ticket")
    agent = {"Authorization": f"Bearer {world.agent.token}"}
    run = httpx.post(f"{web.url}/api/v1/runs", json={"trigger": "api"}, headers=agent, timeout=60)
    assert run.status_code == 201, run.text
    me = ("GET", "/api/v1/me", "200")
    proposed = ("POST", "/api/v1/runs/<uuid:pk>/actions", "201")

    def load(t: int, burst: int) -> None:
        # A connection per request, from four threads at once: both gunicorn processes
        # accept from the same socket, so both serve.
        for i in range(6):
            assert httpx.get(f"{web.url}/api/v1/me", headers=agent, timeout=60).status_code == 200
        key = f"scrape-{burst}-{t}"
        response = httpx.post(
            f"{web.url}/api/v1/runs/{run.json()['id']}/actions",
            json={"tool": "update_ticket", "target": key, "desired_state": {"n": burst}},
            headers={**agent, "Idempotency-Key": key},
            timeout=60,
        )
        assert response.status_code == 201, response.text

    scrapes = [scrape_http(f"{web.url}/metrics")]
    for burst in range(8):
        threads = [threading.Thread(target=load, args=(t, burst)) for t in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        scrapes.append(scrape_http(f"{web.url}/metrics"))

    # No takeover_ counter ever goes backwards from one scrape to the next.
    for before, after in itertools.pairwise(scrapes):
        for (name, labels), was in before.items():
            if name.startswith("takeover_") and name.endswith(GROWING):
                assert after.get((name, labels), 0) >= was, (name, dict(labels), was)

    # Every request counted once, whichever process answered it: 8 bursts of 4 × 6 GETs and
    # 4 proposals.
    def count(samples, method, route, status) -> float:
        labels = {"method": method, "route": route, "status": status}
        return samples.get(("takeover_http_requests_total", frozenset(labels.items())), 0)

    assert count(scrapes[-1], *me) - count(scrapes[0], *me) == 8 * 4 * 6
    assert count(scrapes[-1], *proposed) - count(scrapes[0], *proposed) == 8 * 4
    # … and both processes of the web tier did count: each maps a counter file of its own,
    # in the one private directory the gunicorn configuration made.
    workers = web.worker_pids()
    assert len(workers) == 2
    files = {
        pid: [
            Path(line.split()[-1])
            for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
            if line.endswith(f"counter_{pid}.db")
        ]
        for pid in workers
    }
    assert all(len(mapped) == 1 for mapped in files.values()), files
    assert len({mapped[0].parent for mapped in files.values()}) == 1

    # The worker's series: on the worker's own exporter, not on the web's /metrics.
    assert not families(f"{web.url}/metrics") & WORKER_SERIES
    deadline = time.monotonic() + 30
    while True:
        at_worker = scrape_http(worker.metrics_url)
        applied = sum(
            v
            for (name, labels), v in at_worker.items()
            if name == "takeover_attempts_total" and dict(labels)["outcome"] == "applied"
        )
        if applied >= 8 * 4 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert families(worker.metrics_url) >= WORKER_SERIES
    assert applied >= 8 * 4
    assert not any(name.startswith("takeover_http_") for name, _ in at_worker)
    # The worker runs beat's sweep (every second in the tests): its last success is recent.
    swept = value(at_worker, "takeover_sweep_last_success_timestamp_seconds")
    assert time.time() - 30 < swept <= time.time() + 1
