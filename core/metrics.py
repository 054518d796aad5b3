"""Prometheus metrics recorded by the process that sees the event, and their helpers.

Every counter and histogram lives here, and the engine records with one-line calls
(`record_tool_call`, `record_dispatch`, `record_reconcile`, `record_lease_expiry`). The
gauges (open actions, backlog, oldest ages, pending approval requests) are not here: they
are counted from the database when /metrics is scraped (console/metrics.py), so they are
right whichever process changed the state.

How the series reach Prometheus (web and workers are separate processes, often on separate
machines), each exactly once:

- web: `GET /metrics` on every web process serves the web tier's series (requests) plus the
  database gauges. gunicorn runs several processes; the project's gunicorn configuration
  (takeover/gunicorn_conf.py) gives each master a private multiprocess directory, so each
  scrape sums every process of that master, restarted ones included: no counter goes
  backwards. The per-process collectors (CPU, memory, GC) are left out there: they would
  describe whichever process answered.
- workers: the dispatch, tool-call, attempt, reconcile, lease and sweep series are recorded
  where the work is done, in the Celery worker (a proposal that waits is dispatched by its
  own web request, and its dispatch and tool-call series are the web tier's: sum both). A
  worker started with `WORKER_METRICS_PORT` serves them itself (`/metrics`, the same token
  or allowlist as the web), with its process's CPU and memory; scrape every worker as its
  own target. Workers run the threads pool, one process each; the exporter reads this
  process's registry whatever the environment says, so a worker never shows another
  process's series.
- The worker's series without labels (lease expiries, the last successful sweep) are
  created by the worker only (`worker_series()`), not when this module is imported: in the
  web's multiprocess mode a series exists as soon as it is created, and every web process
  would export the worker's series as zeros.

Label sets are small on purpose: tool names (not tenants) on the histograms, route
patterns (not paths) on the web series.
"""

import functools
import ipaddress
import logging
import os
import threading
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client import multiprocess as _multiprocess
from prometheus_client.exposition import ThreadingWSGIServer

logger = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

TOOL_CALL_SECONDS = Histogram(
    "takeover_tool_call_seconds",
    "Time of one HTTP call to a tool (POST /effects), by tool.",
    ["tool"],
    buckets=LATENCY_BUCKETS,
)
DISPATCH_SECONDS = Histogram(
    "takeover_dispatch_seconds",
    "Time from claiming an action to settling its dispatch (retries included), by tool.",
    ["tool"],
    buckets=LATENCY_BUCKETS,
)
ATTEMPTS = Counter(
    "takeover_attempts",
    "Dispatch attempts by tool and outcome (applied, version_conflict, rejected, not_sent, "
    "unknown).",
    ["tool", "outcome"],
)
RECONCILE_VERDICTS = Counter(
    "takeover_reconcile_verdicts",
    "Reads of authoritative state by tool and verdict (match, mismatch, moved_on, missing, "
    "read_failed).",
    ["tool", "verdict"],
)


@functools.cache
def _lease_expiries() -> Counter:
    return Counter(
        "takeover_lease_expiries",
        "Dispatch leases that expired (worker lost or hung): the action became unknown.",
    )


@functools.cache
def _sweep_last_success() -> Gauge:
    return Gauge(
        "takeover_sweep_last_success_timestamp_seconds",
        "Unix time at which this worker last finished a periodic sweep (expired leases, "
        "approval requests, stale runs, time-based notifications); 0 until its first. The "
        "newest across workers says whether beat and the sweep are alive.",
    )


def worker_series() -> None:
    """Create the worker's series that have no labels, so that they are exported (at 0)
    from the worker's start. Called by the worker only."""
    _lease_expiries()
    _sweep_last_success()


HTTP_REQUESTS = Counter(
    "takeover_http_requests",
    "Web requests answered, by method, route pattern and status.",
    ["method", "route", "status"],
)
HTTP_SECONDS = Histogram(
    "takeover_http_request_seconds",
    "Web request time, by method and route pattern.",
    ["method", "route"],
    buckets=LATENCY_BUCKETS,
)


def record_tool_call(tool: str, outcome: str, seconds: float) -> None:
    TOOL_CALL_SECONDS.labels(tool).observe(seconds)
    ATTEMPTS.labels(tool, outcome).inc()


def record_dispatch(tool: str, seconds: float) -> None:
    DISPATCH_SECONDS.labels(tool).observe(seconds)


def record_reconcile(tool: str, verdict: str) -> None:
    RECONCILE_VERDICTS.labels(tool, verdict).inc()


def record_lease_expiry(count: int = 1) -> None:
    if count:
        _lease_expiries().inc(count)


def record_sweep() -> None:
    _sweep_last_success().set_to_current_time()


def record_request(method: str, route: str, status: int, seconds: float) -> None:
    HTTP_REQUESTS.labels(method, route, str(status)).inc()
    HTTP_SECONDS.labels(method, route).observe(seconds)


# --- exposition ---------------------------------------------------------------------------


def web_metrics() -> bytes:
    """The web tier's series: every process's of this gunicorn master (multiprocess mode,
    set up by takeover/gunicorn_conf.py), or this process's own elsewhere (runserver, the
    tests)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        _multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)
    return generate_latest(REGISTRY)


def scrape_allowed(authorization: str, remote_addr: str) -> bool:
    """A bearer token equal to METRICS_TOKEN, or a client address in METRICS_ALLOW_FROM.
    With neither configured, nobody may scrape."""
    import hmac

    from django.conf import settings

    token = settings.METRICS_TOKEN
    scheme, _, given = authorization.partition(" ")
    # Compared as bytes: compare_digest refuses a non-ASCII str (a TypeError, a 500 before
    # any login), and a header is whatever bytes the client sent.
    given = given.strip().encode("utf-8", "surrogateescape")
    if token and scheme.lower() == "bearer" and hmac.compare_digest(given, token.encode()):
        return True
    try:
        address = ipaddress.ip_address(remote_addr)
    except ValueError:
        return False
    return any(
        address in ipaddress.ip_network(net.strip(), strict=False)
        for net in settings.METRICS_ALLOW_FROM
    )


def _worker_app(environ, start_response):
    if environ.get("PATH_INFO") != "/metrics":
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]
    if not scrape_allowed(environ.get("HTTP_AUTHORIZATION", ""), environ.get("REMOTE_ADDR", "")):
        start_response(
            "401 Unauthorized",
            [("Content-Type", "text/plain"), ("WWW-Authenticate", 'Bearer realm="metrics"')],
        )
        return [b"unauthorized\n"]
    start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
    return [generate_latest(REGISTRY)]


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):
        pass


def start_worker_exporter(port: int, addr: str = "127.0.0.1"):
    """Serve this worker's series on addr:port in a daemon thread; returns the server.

    A port already taken is logged, not fatal: a worker that cannot export still works."""
    worker_series()
    try:
        server = make_server(addr, port, _worker_app, ThreadingWSGIServer, _QuietHandler)
    except OSError as exc:
        logger.error("worker metrics: cannot listen on %s:%d: %s", addr, port, exc)
        return None
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    logger.info("worker metrics on http://%s:%d/metrics", addr, server.server_port)
    return server
