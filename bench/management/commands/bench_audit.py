"""``manage.py bench_audit`` (``make bench``): the audit log filtered by one object at scale.

In a database of its own (``<your database>_audit`` on the same server, created and migrated
on the first run, kept for the next), one tenant with ``--events`` audit events (1,000,000 by
default) about 200,000 objects (actions and runs, five events each), spread over 30 days,
written by one set-based ``INSERT … SELECT generate_series`` (a load, not a history). Then
the median server time of:
- the API, ``GET /api/v1/audit?object=<id>`` as an admin operator;
- the console's audit page filtered by that object (``/audit/?object=<id>``);
each through the whole middleware stack (Django's test client), 5 warm-up requests, then
``--runs`` timed ones over different objects; and the plan of the API's query.
"""

import statistics
import time

from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

from bench.own_database import InOwnDatabase
from core.models import AuditEvent, Membership, Role, Tenant
from core.selectors import audit_events

from .bench_queue import filled_tenant, in_kept_database

BENCH_ADMIN = "bench-audit-admin"
OBJECTS_PER_EVENT = 5

LOAD = """
INSERT INTO core_auditevent (id, tenant_id, at, actor_kind, actor_name, verb, object_type,
    object_id, before, after, reason, request_id, client_request_id)
SELECT gen_random_uuid(), %(tenant)s,
    now() - interval '30 days' + (g * interval '30 days') / %(n)s,
    'principal', 'bench-agent',
    (ARRAY['action.propose', 'action.claim', 'action.dispatch', 'action.succeeded',
           'ledger.applied'])[1 + g %% 5],
    CASE WHEN (g / 5) %% 10 = 0 THEN 'run' ELSE 'action' END,
    md5('object-' || (g / 5))::uuid::text,
    jsonb_build_object('state', 'queued'), jsonb_build_object('state', 'dispatching'),
    '', md5('request-' || g), ''
FROM generate_series(0, %(n)s - 1) AS g
"""


class Command(InOwnDatabase):
    help = "Time the audit log filtered by one object, with 1,000,000 events in one tenant."
    knobs = {"events": 1_000_000, "runs": 50}

    def outer(self, argv, **opts):
        in_kept_database("bench_audit", "audit", argv, say=self.stdout.write)

    def inner(self, *, events, runs, **opts):
        return self.bench(events, runs)

    def bench(self, n_events: int, n_runs: int):
        User = get_user_model()
        user, _ = User.objects.get_or_create(username=BENCH_ADMIN)
        tenant = self.tenant(n_events, user)
        client = Client()
        client.force_login(user)
        headers = {"HTTP_X_TAKEOVER_TENANT": tenant.slug}
        n_objects = n_events // OBJECTS_PER_EVENT
        objects = [self.object_id(n_objects * i // (n_runs + 5)) for i in range(n_runs + 5)]

        def timed(path_for):
            samples = []
            for i, obj in enumerate(objects):
                started = time.perf_counter()
                response = client.get(path_for(obj), **headers)
                elapsed = (time.perf_counter() - started) * 1000
                assert response.status_code == 200, (response.status_code, response.content[:300])
                if i >= 5:
                    samples.append(elapsed)
            return samples

        def api(obj):
            return f"/api/v1/audit?object={obj}"

        def console(obj):
            return f"/audit/?tenant={tenant.slug}&object={obj}"

        small = self.small_tenant(user)

        def console_small(obj):
            return f"/audit/?tenant={small.slug}&object={obj}"

        check = client.get(api(objects[0]), **headers).json()["results"]
        assert len(check) == OBJECTS_PER_EVENT, len(check)
        results = [
            (f"API GET /api/v1/audit?object=<id>, {n_events:,} events", timed(api)),
            ("console audit page filtered by one object", timed(console)),
            ("  baseline: the same console page, a tenant with no events", timed(console_small)),
        ]
        plan = self.plan(tenant, objects[-1])
        self.stdout.write(f"\nAudit log by one object, median of {n_runs} (after 5 warm-up):")
        for label, samples in results:
            median = statistics.median(samples)
            low, high = min(samples), max(samples)
            self.stdout.write(
                f"  {label:<58} median {median:7.2f} ms   range {low:.2f}–{high:.2f} ms"
            )
        verdict = all(statistics.median(s) < 20 for _, s in results[:2])
        self.stdout.write(f"Target < 20 ms: {'met' if verdict else 'NOT met'}")
        self.stdout.write("Plan of the API's query:\n" + plan)

    @staticmethod
    def object_id(n: int) -> str:
        with connection.cursor() as cursor:
            cursor.execute("SELECT md5('object-' || %s)::uuid::text", [n])
            return cursor.fetchone()[0]

    def tenant(self, n_events: int, user) -> Tenant:
        def fill(tenant):
            with connection.cursor() as cursor:
                cursor.execute(LOAD, {"tenant": tenant.pk, "n": n_events})

        def analyze():
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE core_auditevent")

        slug, what = f"bench-audit-{n_events}", f"{n_events:,} audit events"
        return filled_tenant(
            slug, user, Role.ADMIN, what, fill, say=self.stdout.write, then=analyze
        )

    def small_tenant(self, user) -> Tenant:
        tenant, created = Tenant.objects.get_or_create(slug="bench-audit-empty", name="empty")
        if created:
            Membership.objects.create(user=user, tenant=tenant, role=Role.ADMIN)
        return tenant

    def plan(self, tenant, obj) -> str:
        from core.pagination import keyset_page

        captured = []
        with connection.execute_wrapper(
            lambda execute, sql, params, many, context: (
                captured.append((sql, params)) or execute(sql, params, many, context)
            )
        ):
            keyset_page(audit_events(tenant, obj=obj), None, field="at")
        sql, params = next((s, p) for s, p in captured if "core_auditevent" in s)
        with connection.cursor() as cursor:
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
            return "\n".join("  " + row[0] for row in cursor.fetchall())


_ = AuditEvent  # the table the load writes
