"""Where the web's CPU for one effect goes, step by step (`manage.py bench_steps`).

An effect as `make bench` proposes it (`POST /runs/{id}/actions?wait=30`: proposed, claimed,
dispatched to the tool and settled in the one request) goes through Django's WSGI handler in
this process, on one thread, against the demo downstream. Each step is timed with the
thread's CPU clock (`time.thread_time`) around the function that does it, patched in place
for the measurement and put back after. Without gunicorn, other clients or a profiler, the
figures hold still enough to compare two versions of the code (tens of µs show), which
`make bench`'s figures on a shared 2-core machine do not. With `history` (`bench_steps
--history`, 20,000 by default), the measured effects run on a past of that many actions, as
`make bench`'s do (bench/history.py).

A step is a function looked up through a module's globals at call time: (label, module,
attribute). A label indented by two spaces is part of the step above it; the others add up,
with "the rest" (Django's handler, the middleware, the view's own glue), to the whole
request.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import json
import os
import statistics
import sys
import time
import uuid
from collections import Counter

STEPS = (
    ("authentication", "api.auth", "BearerTokenAuthentication.authenticate"),
    ("  its lookup, the token's and the proposal's", "runs.selectors", "token_propose_lookup"),
    ("validation", "api.views.action", "valid"),
    ("the proposal, written claimed", "api.views.action", "action_propose"),
    ("  its one statement", "runs.propose", "insert_claimed"),
    ("the dispatch", "api.views.action", "dispatch_leased"),
    ("  the tool call", "runs.engine.dispatch", "call_tool"),
    ("  the settle", "runs.engine.dispatch", "settle"),
    ("the answer rendered", "api.views.fast", "render"),
)


@contextlib.contextmanager
def timed_steps(steps=STEPS):
    """Each step's function wrapped to add its thread CPU seconds to the Counter yielded."""
    spent: Counter = Counter()
    undo = []
    try:
        for label, module_name, path in steps:
            owner = importlib.import_module(module_name)
            *outer, name = path.split(".")
            for part in outer:
                owner = getattr(owner, part)
            original = owner.__dict__[name]
            undo.append((owner, name, original))
            setattr(owner, name, _timer(original, label, spent))
        yield spent
    finally:
        for owner, name, original in reversed(undo):
            setattr(owner, name, original)


def _timer(function, label: str, spent: Counter):
    @functools.wraps(function)
    def timed(*args, **kwargs):
        started = time.thread_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent[label] += time.thread_time() - started

    return timed


class InProcess:
    """A tenant whose `update_ticket` tool is a demo downstream of its own, an agent token,
    a run, and `propose()`: one effect through Django's WSGI handler in this thread."""

    def __init__(self, downstream_url: str):
        from django.core.handlers.wsgi import WSGIHandler

        from core.audit import SYSTEM
        from core.services import principal_create, tenant_create, tool_create

        tenant = tenant_create(slug=f"steps-{uuid.uuid4().hex[:6]}", actor=SYSTEM)
        _principal, self.token = principal_create(tenant=tenant, name="steps", actor=SYSTEM)
        tool_create(
            tenant=tenant,
            name="update_ticket",
            base_url=f"{downstream_url}/tickets",
            timeout_seconds=10,
            effect="unsafe",
            lookup=False,
            actor=SYSTEM,
        )
        self.app = WSGIHandler()
        status, run = self.call("POST", "/api/v1/runs", {"trigger": "api", "config": {}})
        assert status.startswith("201"), (status, run)
        self.run_id = run["id"]

    def call(self, method: str, path: str, body: dict, key: str | None = None):
        data = json.dumps(body).encode()
        route, _, query = path.partition("?")
        environ = {
            "REQUEST_METHOD": method,
            "PATH_INFO": route,
            "QUERY_STRING": query,
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "HTTP_HOST": "127.0.0.1:8000",
            "HTTP_AUTHORIZATION": f"Bearer {self.token}",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(data)),
            "wsgi.input": io.BytesIO(data),
            "wsgi.errors": sys.stderr,
            "wsgi.url_scheme": "http",
            "wsgi.version": (1, 0),
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
        }
        if key is not None:
            environ["HTTP_IDEMPOTENCY_KEY"] = key
        status = []
        out = b"".join(self.app(environ, lambda line, headers, exc=None: status.append(line)))
        return status[0], json.loads(out)

    def propose(self, target: str) -> None:
        status, action = self.call(
            "POST",
            f"/api/v1/runs/{self.run_id}/actions?wait=30",
            {"tool": "update_ticket", "target": target, "desired_state": {"status": "done"}},
            key=uuid.uuid4().hex,
        )
        if not status.startswith("201") or action["state"] != "succeeded":
            raise RuntimeError(f"an effect answered {status} {action}")


def measure(effects: int, batches: int, history: int = 0, say=print) -> list[tuple[str, float]]:
    """`batches` batches of `effects` effects after 100 to warm up (and, with `history`, a
    past of that many actions: bench/history.py); each step's median over the batches, in
    ms per effect, then the rest, the whole request and this connection's PostgreSQL backend
    (when the server is on this machine)."""
    from django.db import connection

    from bench import history as past
    from bench import loadgen, phases
    from takeover.supervisor import Supervisor

    supervisor = Supervisor(grace=10)
    downstream, url = loadgen.start_downstream(supervisor, "steps-downstream", env=dict(os.environ))
    try:
        here = InProcess(url)
        backend = _local_backend(connection)
        for i in range(100):
            here.propose(f"warm-{i}")
        if history:
            past.takeover(connection, history, say)
            for i in range(20):
                here.propose(f"rewarm-{i}")
        per_batch: list[dict] = []
        with timed_steps() as spent:
            for b in range(batches):
                spent.clear()
                pg0 = loadgen.cpu_seconds([backend]) if backend else 0.0
                wal0 = phases.wal_position()
                started = time.thread_time()
                for i in range(effects):
                    here.propose(f"t{b}-{i}-{uuid.uuid4().hex[:6]}")
                whole = time.thread_time() - started
                figures = {label: spent[label] for label, _, _ in STEPS}
                top = sum(v for k, v in figures.items() if not k.startswith("  "))
                figures |= {"the rest": whole - top, "the whole request": whole}
                if backend:
                    pg = loadgen.cpu_seconds([backend]) - pg0
                    figures["PostgreSQL (this connection's backend)"] = pg
                per_batch.append({k: v / effects * 1000 for k, v in figures.items()})
                wal = phases.wal_since(wal0) / effects
                say(
                    f"-- batch {b + 1} of {batches}: {1000 * whole / effects:.3f} ms per effect,"
                    f" {wal / 1024:.1f} KB of WAL per effect (the whole server's)"
                )
    finally:
        supervisor.stop([downstream])
    return [(label, statistics.median(b[label] for b in per_batch)) for label in per_batch[0]]


def _local_backend(connection) -> int | None:
    """This connection's PostgreSQL backend, when it is a child of a server on this machine
    (`phases.postmaster_pid`); None otherwise."""
    from bench import phases
    from takeover.supervisor import proc_stat

    postmaster = phases.postmaster_pid()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    fields = proc_stat(pid) if postmaster else None
    return pid if fields and int(fields[1]) == postmaster else None
