"""What a platform team points its probes and its Prometheus at: /healthz, /readyz, /metrics.

Answered by a middleware placed first, before host validation, HTTPS redirects, sessions
and the access log: a load balancer's probe or a scraper addresses the process by an IP or
a service name that is not in ALLOWED_HOSTS, and probes every few seconds are noise in the
access log. None of the three answers leaks a version, a setting's value or an exception
text.

- /healthz: liveness. The process answers; nothing else is checked.
- /readyz: 503 problem+json naming the failing part(s) in `checks` only when this process
  cannot serve: the database does not answer, a migration is missing, or the connection
  is unusable as configured (a transaction pooler that would break prepared statements:
  the answer names `DATABASE_POOLER=transaction`). A broker that does not answer is
  `degraded`, still 200: the database is the queue, and a lost wake-up costs one sweep
  interval, so a broker blip must not take every web process out of the load balancer.
- /metrics: Prometheus text format, for a bearer token equal to METRICS_TOKEN or a client
  in METRICS_ALLOW_FROM (core/metrics.py); 401 otherwise, 404 when neither is configured.
"""

import logging
import secrets
import time

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Count, Min, Q
from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from approvals.models import ApprovalRequest, RequestState
from core.metrics import scrape_allowed, web_metrics
from core.models import Tenant
from core.problems import problem_json
from runs.models import Action
from runs.states import UNSETTLED, ActionState

logger = logging.getLogger(__name__)

OPEN_STATES = [str(s) for s in UNSETTLED]
BROKER_TIMEOUT_SECONDS = 3
DEGRADED = "degraded"
NOT_CHECKED = "not checked"

# Once true for this process, true for good: the code and the configuration are fixed.
_migrations_applied = False
_connection_usable = False


def _check_database() -> None:
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute("SELECT 1")


def _check_migrations() -> None:
    global _migrations_applied
    if _migrations_applied:
        return
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
    if executor.migration_plan(executor.loader.graph.leaf_nodes()):
        raise RuntimeError("unapplied migrations")
    _migrations_applied = True


class PreparedStatementsLeak(Exception):
    pass


def _check_connection() -> None:
    """Are prepared statements safe on this connection? The application's connection
    prepares its hot statements (psycopg's `prepare_threshold`, takeover/settings.py);
    behind a pooler in transaction mode that does not carry them (PgBouncer before 1.21, or
    without `max_prepared_statements`), consecutive transactions land on other server
    connections, and requests fail with "prepared statement … does not exist" or "already
    exists".

    The probe, on two fresh connections configured like the application's: the first
    prepares a marked statement and goes idle, the second looks for it on *its* server
    session. Directly connected (or through a session pool), two live connections never
    share a server session, so the second sees nothing. A transaction pooler hands the
    second client the server connection the first just released (PgBouncer reuses the most
    recent one), where the statement sits under psycopg's own name: that is the leak,
    cleaned up on the spot. A pooler that manages prepared statements renames them, which
    is fine. Under load the second client may get another server connection and see
    nothing: a missed detection, never a false alarm."""
    global _connection_usable
    if _connection_usable:
        return
    import psycopg
    from psycopg import sql

    params = connections[DEFAULT_DB_ALIAS].get_connection_params()
    if params.get("prepare_threshold") is None:  # nothing is prepared: any pooler carries it
        _connection_usable = True
        return
    marker = f"takeover readiness probe {secrets.token_hex(8)}"
    with psycopg.connect(**params, autocommit=True) as first:
        first.execute(f"SELECT 1 /* {marker} */", prepare=True)
        with psycopg.connect(**params, autocommit=True) as second, second.transaction():
            names = [
                name
                for (name,) in second.execute(
                    "SELECT name FROM pg_prepared_statements WHERE statement LIKE %s",
                    [f"%{marker}%"],
                )
                if name.startswith("_pg3_")
            ]
            for name in names:
                second.execute(sql.SQL("DEALLOCATE {}").format(sql.Identifier(name)))
    if names:
        raise PreparedStatementsLeak("two client connections share a server session")
    _connection_usable = True


def _check_broker() -> None:
    from takeover.celery import app

    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT_SECONDS)


# name → (check, what a failure means, whether a failure only degrades the service)
CHECKS = {
    "database": (_check_database, "the database does not answer", False),
    "migrations": (_check_migrations, "migrations are not applied", False),
    "connection": (
        _check_connection,
        "the database connection goes through a transaction pooler (PgBouncer in "
        "transaction mode) that does not keep prepared statements: set "
        "DATABASE_POOLER=transaction",
        False,
    ),
    "broker": (_check_broker, DEGRADED, True),
}
DEGRADED_DETAIL = {
    "broker": "The broker does not accept a connection: wake-ups are lost, and queued work "
    "waits for the periodic sweep."
}


def readiness() -> dict[str, str]:
    """Each check's result: "ok", what failed, or "degraded". Without a database, the
    checks that need one are "not checked"."""
    results = {}
    for name, (check, failure, _degrades) in CHECKS.items():
        if name in ("migrations", "connection") and results["database"] != "ok":
            results[name] = NOT_CHECKED
            continue
        try:
            check()
        except Exception as exc:
            logger.warning("readiness check %s failed: %s: %s", name, type(exc).__name__, exc)
            results[name] = failure
        else:
            results[name] = "ok"
    if results["database"] != "ok":
        connections[DEFAULT_DB_ALIAS].close()  # the next probe starts afresh
    return results


def failing(checks: dict[str, str]) -> list[str]:
    """The checks that make this process unready (a degraded part does not)."""
    return [
        name
        for name, result in checks.items()
        if result not in ("ok", NOT_CHECKED) and not CHECKS[name][2]
    ]


def readyz(request):
    checks = readiness()
    down = failing(checks)
    if not down:
        degraded = [name for name, result in checks.items() if result == DEGRADED]
        body = {"status": DEGRADED if degraded else "ready", "checks": checks}
        if degraded:
            body["detail"] = " ".join(DEGRADED_DETAIL[name] for name in degraded)
        return JsonResponse(body)
    return problem_json(
        "temporarily-unavailable",
        "Not ready",
        503,
        "Not ready: " + "; ".join(checks[name] for name in down) + ".",
        headers={"Retry-After": "5"},
        failing=down,
        checks=checks,
    )


def healthz(request):
    return JsonResponse({"status": "ok"})


# --- /metrics -----------------------------------------------------------------------------


class DatabaseGauges:
    """Gauges counted at scrape time: grouped counts over partial indexes that hold only
    unsettled rows (`action_unsettled`, `action_leased`, `approval_request_pending`), so a
    scrape costs the same with a hundred million settled actions as with none."""

    def collect(self):
        now = timezone.now()
        tenants = dict(Tenant.objects.order_by("slug").values_list("pk", "slug"))
        rows = (
            Action.objects.filter(state__in=OPEN_STATES)  # the action_unsettled index
            .values_list("tenant_id", "state")
            .annotate(n=Count("id"), oldest=Min("created_at"))
            .order_by()
        )
        counts, oldest = {}, {}
        for tenant_id, state, n, first in rows:
            counts[tenants.get(tenant_id), state] = n
            if state not in oldest or first < oldest[state]:
                oldest[state] = first

        open_actions = GaugeMetricFamily(
            "takeover_open_actions",
            "Actions not settled yet, by tenant and state.",
            labels=["tenant", "state"],
        )
        for slug in tenants.values():
            for state in OPEN_STATES:
                open_actions.add_metric([slug, state], counts.get((slug, state), 0))
        yield open_actions

        age = GaugeMetricFamily(
            "takeover_oldest_open_action_age_seconds",
            "Age of the oldest action in each open state (0 when there is none).",
            labels=["state"],
        )
        for state in OPEN_STATES:
            first = oldest.get(state)
            age.add_metric([state], (now - first).total_seconds() if first else 0)
        yield age

        backlog = sum(n for (_slug, state), n in counts.items() if state == ActionState.QUEUED)
        yield GaugeMetricFamily(
            "takeover_queue_backlog",
            "Actions queued and not claimed by a worker yet.",
            value=backlog,
        )
        overdue = Action.objects.filter(
            Q(state=ActionState.DISPATCHING) & Q(lease_expires_at__lt=now)
        ).count()
        yield GaugeMetricFamily(
            "takeover_dispatch_leases_overdue",
            "Actions dispatching past their lease, not yet declared unknown by the sweeper.",
            value=overdue,
        )

        pending = {
            tenants.get(tenant_id): (n, first)
            for tenant_id, n, first in ApprovalRequest.objects.filter(state=RequestState.PENDING)
            .values_list("tenant_id")
            .annotate(n=Count("id"), first=Min("created_at"))
            .order_by()
        }
        requests = GaugeMetricFamily(
            "takeover_approval_requests_pending",
            "Approval requests waiting for a decision, by tenant.",
            labels=["tenant"],
        )
        for slug in tenants.values():
            requests.add_metric([slug], pending.get(slug, (0, None))[0])
        yield requests
        firsts = [first for _n, first in pending.values()]
        yield GaugeMetricFamily(
            "takeover_approval_request_oldest_age_seconds",
            "Age of the oldest pending approval request (0 when there is none).",
            value=(now - min(firsts)).total_seconds() if firsts else 0,
        )


def metrics_view(request):
    from django.conf import settings

    if not settings.METRICS_TOKEN and not settings.METRICS_ALLOW_FROM:
        return problem_json("not-found", "Not found", 404, "Metrics are not enabled.")
    if not scrape_allowed(
        request.headers.get("Authorization", ""), request.META.get("REMOTE_ADDR", "")
    ):
        response = problem_json(
            "unauthenticated", "Unauthenticated", 401, "A metrics token is required."
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    started = time.monotonic()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseGauges())
    body = generate_latest(registry) + web_metrics()
    body += (
        "# HELP takeover_scrape_seconds Time spent computing this scrape.\n"
        "# TYPE takeover_scrape_seconds gauge\n"
        f"takeover_scrape_seconds {time.monotonic() - started:.6f}\n"
    ).encode()
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


ROUTES = {"/healthz": healthz, "/readyz": readyz, "/metrics": metrics_view}


class OpsMiddleware:
    """Answers ROUTES (GET and HEAD only) before anything else runs."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        view = ROUTES.get(request.path_info)
        if view is None:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            response = problem_json("validation-error", "Method not allowed", 405, "Use GET.")
            response["Allow"] = "GET, HEAD"
            return response
        return view(request)
