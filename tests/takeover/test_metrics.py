"""/metrics: protected, the series present, gauges counted from the database, worker series
served by the worker itself."""

import time

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
