"""Run by test_otel.py in a process of its own (the instrumentations are global): tracing on
with an in-memory exporter, one proposal through the API, its dispatch in this process;
print the spans and what the tool received as JSON."""

import json
import os
import sys
import uuid

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

import httpx  # noqa: E402
from django.db import transaction  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from rest_framework.test import APIClient  # noqa: E402

from core import otel  # noqa: E402
from core.audit import Actor  # noqa: E402
from core.services import principal_create, tenant_create, tool_create  # noqa: E402
from runs.engine import dispatch, leases  # noqa: E402


def main(downstream: str):
    exporter = InMemorySpanExporter()
    # Before the first request builds the middleware chain and the first call builds the
    # HTTP client: the instrumentations patch both.
    assert otel.setup("takeover-test", exporter=exporter)
    actor = Actor("system", "otel-test")
    tenant = tenant_create(slug=f"otel-{uuid.uuid4().hex[:8]}", actor=actor)
    _principal, token = principal_create(tenant=tenant, name="agent", actor=actor)
    tool = tool_create(tenant=tenant, name="t", base_url=f"{downstream}/tickets", actor=actor)
    for secret in tool.signing_secrets():  # as the tool's owner would: it refuses unsigned calls
        httpx.post(f"{downstream}/_control/secrets", json={"secret": secret}, timeout=10)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    run = client.post("/api/v1/runs", {"trigger": "api"}, format="json").json()
    # Proposed and leased in one transaction, so that the suite's shared workers (on the
    # same database) never see it queued; dispatched here, in this process's trace.
    key = f"otel-{uuid.uuid4().hex[:8]}"
    with transaction.atomic():
        response = client.post(
            f"/api/v1/runs/{run['id']}/actions",
            {"tool": "t", "target": key, "desired_state": {"s": 1}},
            format="json",
            HTTP_IDEMPOTENCY_KEY=key,
        )
        assert response.status_code == 201, response.content
        leased = leases.action_lease(response.json()["id"])
    assert leased is not None, "the proposal was not queued"
    dispatch.dispatch_leased(*leased)
    sent = [
        r
        for r in httpx.get(f"{downstream}/_control/requests", timeout=10).json()["requests"]
        if r["idempotency_key"] == key
    ]
    print(
        json.dumps(
            {
                "request_id": response["X-Request-ID"],
                "traceparent": sent[0]["traceparent"],
                "spans": [
                    {
                        "name": s.name,
                        "trace_id": format(s.context.trace_id, "032x"),
                        "kind": s.kind.name,
                    }
                    for s in exporter.get_finished_spans()
                ],
            }
        )
    )


main(sys.argv[1])
