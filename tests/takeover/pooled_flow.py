"""Run by test_pgbouncer.py in a process whose DATABASE_URL points at PgBouncer: the real
services and the API through the pooler, then print what the server saw as JSON."""

import json
import os
import uuid

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

from django.db import connection, transaction  # noqa: E402
from rest_framework.test import APIClient  # noqa: E402

from core.audit import Actor  # noqa: E402
from core.services import principal_create, tenant_create, tool_create  # noqa: E402


def main():
    actor = Actor("system", "pgbouncer-test")
    tenant = tenant_create(slug=f"pool-{uuid.uuid4().hex[:8]}", actor=actor)
    _principal, token = principal_create(tenant=tenant, name="agent", actor=actor)
    tool_create(
        tenant=tenant,
        name="t",
        base_url="http://127.0.0.1:9/x",
        requires_approval=True,
        actor=actor,
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    run = client.post("/api/v1/runs", {"trigger": "api"}, format="json").json()
    statuses = []
    # More than psycopg's prepare threshold (5) of the same statements: prepared statements
    # would break under transaction pooling if they were not switched off.
    for i in range(8):
        response = client.post(
            f"/api/v1/runs/{run['id']}/actions",
            {"tool": "t", "target": f"x{i}", "desired_state": {"i": i}},
            format="json",
            HTTP_IDEMPOTENCY_KEY=f"k{i}",
        )
        statuses.append(response.status_code)
        statuses.append(client.get(f"/api/v1/actions/{response.json()['id']}").status_code)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SHOW lock_timeout")
        lock_timeout = cursor.fetchone()[0]
        cursor.execute("SELECT inet_server_port() IS NULL")  # a Unix socket behind the pooler
    print(json.dumps({"statuses": statuses, "lock_timeout": lock_timeout}))


main()
