"""A whole stack in child processes, driven over real HTTP: for `make bench`, `make soak` and
the tests that load the engine (tests/runs/test_queue_at_scale.py).

`Stack` runs what the README's "Scaling out" section deploys, on one database: gunicorn
(2 workers × 8 threads), N Celery workers (threads pool), beat, and the demo downstream as
the tool, each a child of the project's process supervisor (takeover/supervisor.py), so
that they die with the process that drives them however it dies. `Agent` is an HTTP client
of the API. CPU seconds per process come from /proc. The fault mix, the driver that
proposes under it and the invariants checked afterwards are the soak's (bench/soak.py).

Nothing here imports Django at module level except through the functions that need it, so
that the tests can use it with the test database.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import httpx

from takeover.supervisor import Child, Supervisor, proc_stat

ROOT = Path(__file__).resolve().parent.parent


def start_downstream(supervisor: Supervisor, name: str, *, env: dict) -> tuple[Child, str]:
    """The demo downstream (demo/downstream.py) on a free port under `supervisor`, and the
    URL it says it listens on; stopped again if it says nothing within 30 s."""
    heard, said = threading.Event(), []

    def line(text: str) -> None:
        if not heard.is_set() and "listening on" in text:
            said.append(text.strip().rsplit(" ", 1)[-1])
            heard.set()

    argv = [sys.executable, str(ROOT / "demo/downstream.py"), "--port", "0", "--quiet"]
    child = supervisor.start(name, argv, env=env, on_line=line)
    if not heard.wait(30):
        supervisor.stop([child])
        raise RuntimeError("the demo downstream did not start")
    return child, said[0]


def xmax(url: str) -> int:
    """The server's next transaction id: write transactions are counted as its difference
    (a read assigns none)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")
        return int(row.fetchone()[0])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Stack:
    database_url: str
    work_dir: Path
    workers: int = 2
    worker_threads: int = 8
    web_workers: int = 2
    web_threads: int = 8
    env_extra: dict = field(default_factory=dict)
    beat: bool = True

    def __post_init__(self):
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, Child] = {}
        self.supervisor = Supervisor(grace=20)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "DATABASE_URL": self.database_url,
            "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "takeover.settings"),
            "PYTHONUNBUFFERED": "1",
            # No access line per request, no line per dispatch: they would be measured too.
            "LOG_LEVEL": os.environ.get("LOG_LEVEL", "WARNING"),
            **self.env_extra,
        }
        if not self.env.get("CELERY_BROKER_URL"):
            self.env["CELERY_BROKER_DIR"] = str(self.work_dir / "broker")
        # Every process of this stack on one named queue (the default derives it per database).
        self.queue = self.env.setdefault("CELERY_QUEUE", "takeover-loadgen")
        if not self.env.get("SECRET_KEY"):
            # The web processes refuse a generated key with DEBUG off (takeover/wsgi.py):
            # hand them this process's key explicitly, as `make run` does.
            from django.conf import settings

            self.env["SECRET_KEY"] = settings.SECRET_KEY
        self.downstream_url = ""

    # --- processes ------------------------------------------------------------------------

    def _proc(self, name: str, argv: list[str]) -> Child:
        self.procs[name] = self.supervisor.start(
            name, argv, env=self.env, log_path=self.work_dir / f"{name}.log"
        )
        return self.procs[name]

    def start(self) -> Stack:
        py = sys.executable
        self.procs["downstream"], self.downstream_url = start_downstream(
            self.supervisor, "downstream", env=self.env
        )
        self._proc(
            "web",
            [
                py,
                "-m",
                "gunicorn",
                *("-c", "python:takeover.gunicorn_conf"),
                "takeover.wsgi",
                "-k",
                "gthread",
                "-w",
                str(self.web_workers),
                "--threads",
                str(self.web_threads),
                "-b",
                f"127.0.0.1:{self.port}",
                "--no-control-socket",
                "--log-level",
                "warning",
            ],
        )
        for i in range(self.workers):
            self.start_worker(i)
        if self.beat:
            self._proc(
                "beat",
                [
                    py,
                    "-m",
                    "celery",
                    "-A",
                    "takeover",
                    "beat",
                    "--loglevel",
                    "WARNING",
                    "-s",
                    str(self.work_dir / "beat-schedule"),
                ],
            )
        self.wait_ready()
        return self

    def start_worker(self, i: int) -> Child:
        return self._proc(
            f"worker{i}",
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "takeover",
                "worker",
                "-P",
                "threads",
                "-c",
                str(self.worker_threads),
                "--loglevel",
                "WARNING",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "-n",
                f"load{i}-{uuid.uuid4().hex[:6]}@%h",
            ],
        )

    def log(self, name: str) -> str:
        path = self.work_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while True:
            dead = [p.name for p in self.procs.values() if not p.running()]
            if dead:
                raise RuntimeError(f"{dead} died at start:\n" + self.log(dead[0])[-3000:])
            try:
                if httpx.get(f"{self.url}/api/v1/me", timeout=2).status_code == 401:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the web tier did not come up:\n" + self.log("web"))
            time.sleep(0.2)

    def kill_worker(self, i: int) -> None:
        self.supervisor.kill(self.procs[f"worker{i}"])

    def kill_web_process(self, rng) -> None:
        """SIGKILL one of gunicorn's worker processes, mid-request perhaps; its master starts
        another."""
        import signal

        if processes := children_of(self.procs["web"].pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(rng.choice(processes), signal.SIGKILL)

    def stop(self) -> None:
        self.supervisor.stop(list(self.procs.values()))
        self.supervisor.close()

    def pids(self) -> list[int]:
        """Every live process of the stack (gunicorn's forked workers included)."""
        return [pid for child in self.procs.values() if child.running() for pid in child.pids()]

    # --- the broker -----------------------------------------------------------------------

    def broker_depth(self) -> int:
        """Messages waiting in the broker (the filesystem transport's queue directory, or
        the queue's message count on RabbitMQ/Redis)."""
        if not self.env.get("CELERY_BROKER_URL"):
            folder = Path(self.env["CELERY_BROKER_DIR"]) / "queue"
            return sum(1 for name in os.listdir(folder) if name.endswith(".msg"))
        from kombu import Connection

        with Connection(self.env["CELERY_BROKER_URL"]) as conn:
            channel = conn.channel()
            try:
                return channel.queue_declare(self.queue, passive=True).message_count
            finally:
                channel.close()


def tenant_stack(
    label: str,
    *,
    workers: int,
    timeout_seconds: float = 10,
    say=print,
    prefix: str = "tickets",
    effect: str = "unsafe",
    lookup: bool = False,
):
    """A fresh tenant with one agent, and a started `Stack` on the current database whose
    demo downstream is that tenant's `update_ticket` tool (on `prefix`, declared `effect`
    and `lookup`): what `make bench` and `make soak` run against. Returns (tenant, agent
    token, stack); the caller stops the stack."""
    import tempfile

    from django.db import connection

    from bench.management.commands.bench_queue import database_url
    from core.audit import SYSTEM
    from core.services import principal_create, tenant_create, tool_create

    tenant = tenant_create(slug=f"{label}-{uuid.uuid4().hex[:6]}", actor=SYSTEM)
    _principal, token = principal_create(tenant=tenant, name=f"{label}-agent", actor=SYSTEM)
    work_dir = Path(tempfile.mkdtemp(prefix=f"takeover-{label}-"))
    stack = Stack(
        database_url(connection.settings_dict, connection.settings_dict["NAME"]),
        work_dir,
        workers=workers,
    )
    say(f"-- starting the stack (logs in {work_dir})")
    stack.start()
    try:
        tool_create(
            tenant=tenant,
            name="update_ticket",
            base_url=f"{stack.downstream_url}/{prefix}",
            timeout_seconds=timeout_seconds,
            effect=effect,
            lookup=lookup,
            actor=SYSTEM,
        )
    except BaseException:
        stack.stop()
        raise
    return tenant, token, stack


class DepthWatch:
    """Samples the broker's depth in the background; `.max` is the highest seen."""

    def __init__(self, stack: Stack, every: float = 0.25):
        self.stack, self.every, self.max, self.samples = stack, every, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)

    def _run(self):
        while not self._stop.is_set():
            with contextlib.suppress(OSError, Exception):
                self.max = max(self.max, self.stack.broker_depth())
                self.samples += 1
            self._stop.wait(self.every)


# --- CPU from /proc ---------------------------------------------------------------------------

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids, *, reaped: bool = False) -> float:
    """The processes' CPU (utime + stime); with `reaped`, also that of the children they
    have reaped (cutime + cstime): a PostgreSQL backend that exits takes its CPU with it
    from its own /proc entry, and the postmaster inherits it when it reaps it."""
    total = 0
    for pid in pids:
        if fields := proc_stat(pid):
            total += int(fields[11]) + int(fields[12])
            if reaped:
                total += int(fields[13]) + int(fields[14])
    return total / TICKS


def server_cpu_seconds(postmaster: int) -> float:
    """A PostgreSQL server's CPU: the postmaster, its live children, and the children it
    has reaped (a backend that ends meanwhile still counts)."""
    return cpu_seconds([postmaster], reaped=True) + cpu_seconds(children_of(postmaster))


def children_of(parent: int) -> list[int]:
    return [
        int(n)
        for n in os.listdir("/proc")
        if n.isdigit() and (f := proc_stat(int(n))) and int(f[1]) == parent
    ]


# --- the API client ---------------------------------------------------------------------------


class Answer:
    """The little of an HTTP response the load generator reads."""

    def __init__(self, status: int, headers, body: bytes):
        self.status_code, self.headers, self.content = status, headers, body

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")

    def json(self):
        return json.loads(self.content)

    def raise_for_status(self) -> None:
        if self.status_code >= 400:
            request = httpx.Request("GET", "http://load")
            raise httpx.HTTPStatusError(
                f"HTTP {self.status_code}: {self.text[:300]}",
                request=request,
                response=httpx.Response(self.status_code, request=request),
            )


class LeanClient:
    """Keep-alive HTTP/1.1 with the standard library: the load generator shares the same two
    cores as the stack it measures, so it must cost as little as it can (~0.5 ms of CPU a
    request, against ~2 ms for httpx). Transport errors surface as httpx's, so callers
    handle one family."""

    def __init__(self, url: str, headers: dict):
        parts = urlsplit(url)
        self.host, self.port, self.prefix = parts.hostname, parts.port, parts.path.rstrip("/")
        self.headers = headers
        self.conn: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body=None, headers=None, params=None) -> Answer:
        if params:
            path += "?" + urlencode(params)
        data = json.dumps(body).encode() if body is not None else None
        all_headers = {**self.headers, **(headers or {})}
        if data is not None:
            all_headers["Content-Type"] = "application/json"
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=90)
            try:
                self.conn.request(method, self.prefix + path, body=data, headers=all_headers)
                response = self.conn.getresponse()
                payload = response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                self.conn.close()
                self.conn = None
                # A keep-alive connection the server had closed: reconnect once (these are
                # the load generator's own requests; every one of them is safe to repeat).
                if attempt == 2:
                    raise httpx.ReadError(str(exc)) from exc
                continue
            except OSError as exc:
                self.conn.close()
                self.conn = None
                raise httpx.ConnectError(str(exc)) from exc
            if response.getheader("Connection", "").lower() == "close":
                self.conn.close()
                self.conn = None
            return Answer(response.status, response.headers, payload)
        raise AssertionError("unreachable")

    def get(self, path, params=None) -> Answer:
        return self.request("GET", path, params=params)

    def post(self, path, json=None, headers=None) -> Answer:
        return self.request("POST", path, body=json, headers=headers)


class Agent:
    """A runtime speaking HTTP API v1 (one keep-alive connection per thread)."""

    def __init__(self, url: str, token: str, tenant: str = ""):
        self.url, self.token, self.tenant = url, token, tenant
        self._local = threading.local()

    @property
    def http(self) -> httpx.Client:
        """An httpx client, for the tests' ad-hoc calls."""
        if (client := getattr(self._local, "client", None)) is None:
            client = self._local.client = httpx.Client(
                base_url=f"{self.url}/api/v1",
                headers={"Authorization": f"Bearer {self.token}"},
                timeout=60,
            )
        return client

    @property
    def lean(self) -> LeanClient:
        if (client := getattr(self._local, "lean", None)) is None:
            client = self._local.lean = LeanClient(
                f"{self.url}/api/v1", {"Authorization": f"Bearer {self.token}"}
            )
        return client

    def start_run(self) -> str:
        response = self.lean.post("/runs", json={"trigger": "api", "config": {"bench": True}})
        response.raise_for_status()
        return response.json()["id"]

    def finish(self, run_id: str) -> None:
        self.lean.post(
            f"/runs/{run_id}/finish", json={"status": "success", "tools_called": None}
        ).raise_for_status()

    def propose(self, run_id: str, key: str, wait: float = 0, **body) -> Answer:
        """`wait`: the server holds the answer up to that many seconds for the outcome."""
        path = f"/runs/{run_id}/actions" + (f"?wait={wait:g}" if wait else "")
        return self.lean.post(path, json=body, headers={"Idempotency-Key": key})

    def wait(self, action_id: str, until=None, timeout: float = 120) -> dict:
        """Long-poll until the action leaves the in-progress states (or is in `until`)."""
        done = until or {"succeeded", "failed", "needs_human", "blocked", "awaiting_approval"}
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, min(30.0, deadline - time.monotonic()))
            response = self.lean.get(f"/actions/{action_id}", params={"wait": f"{left:.1f}"})
            if response.status_code == 503:
                time.sleep(float(response.headers.get("Retry-After", 1)))
                continue
            response.raise_for_status()
            action = response.json()
            if action["state"] in done or time.monotonic() >= deadline:
                return action
            if response.headers.get("Retry-After"):  # not held: over the cap of waits
                time.sleep(float(response.headers["Retry-After"]))


def percentile(values, q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def median(values) -> float:
    return statistics.median(values) if values else float("nan")


def in_threads(count: int, fn, *args) -> list:
    """Run fn(i, *args) in `count` threads; return their results; re-raise the first error.
    The threads are daemons, so that an interrupt (Ctrl-C) ends the load at once instead of
    after every client has finished its share."""
    results, errors = [None] * count, []

    def run(i):
        try:
            results[i] = fn(i, *args)
        except BaseException as exc:  # reported to the caller
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results
