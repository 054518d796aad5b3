"""A whole stack in child processes, driven over real HTTP: for `make bench`, `make soak` and
the chaos test.

`Stack` runs what the README's "Scaling out" section deploys, on one database: gunicorn
(2 workers × 8 threads), N Celery workers (threads pool), beat, and the demo downstream as
the tool. `Agent` is an HTTP client of the API. `Meter` reads what a run cost: write
transactions (xids assigned) and WAL bytes from PostgreSQL, CPU seconds per process from
/proc. `invariants()` checks the database and the tool's own counts afterwards.

Nothing here imports Django at module level except through the functions that need it, so
that the chaos test can use it with the test database.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Proc:
    name: str
    argv: list[str]
    env: dict
    log_path: Path
    process: subprocess.Popen | None = None

    def start(self) -> Proc:
        self.process = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=open(self.log_path, "a"),  # noqa: SIM115 -- the child owns it
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, sig) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait(10)

    def stop(self, grace: float = 15) -> None:
        self.signal(signal.SIGTERM)
        if self.process is None:
            return
        try:
            self.process.wait(grace)
        except subprocess.TimeoutExpired:
            self.kill()


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
        self.procs: dict[str, Proc] = {}
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

    def _proc(self, name: str, argv: list[str]) -> Proc:
        proc = Proc(name, argv, self.env, self.work_dir / f"{name}.log")
        self.procs[name] = proc
        return proc.start()

    def start(self) -> Stack:
        py = sys.executable
        ds = subprocess.Popen(
            [py, str(ROOT / "demo/downstream.py"), "--port", "0", "--quiet"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        line = ds.stdout.readline()
        if "listening on" not in line:
            ds.kill()
            raise RuntimeError(f"demo downstream did not start: {line!r}")
        self.downstream_url = line.strip().rsplit(" ", 1)[-1]
        self.procs["downstream"] = Proc("downstream", [], self.env, self.work_dir / "ds.log", ds)
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

    def start_worker(self, i: int) -> Proc:
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

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while True:
            dead = [p.name for p in self.procs.values() if not p.alive()]
            if dead:
                raise RuntimeError(f"{dead} died at start:\n" + self.procs[dead[0]].log()[-3000:])
            try:
                if httpx.get(f"{self.url}/api/v1/me", timeout=2).status_code == 401:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the web tier did not come up:\n" + self.procs["web"].log())
            time.sleep(0.2)

    def kill_worker(self, i: int) -> None:
        self.procs[f"worker{i}"].kill()

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.signal(signal.SIGTERM)
        for proc in self.procs.values():
            if proc.process is None:
                continue
            try:
                proc.process.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()

    def pids(self) -> list[int]:
        """Every live process of the stack (gunicorn's forked workers included)."""
        groups = {p.process.pid for p in self.procs.values() if p.alive()}
        return [pid for pid, pgid in _process_groups() if pgid in groups]

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

    from core.audit import SYSTEM
    from core.services import principal_create, tenant_create, tool_create
    from takeover.management.commands.bench_queue import database_url

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


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may hold spaces: the fields after it start at the last ')'.
    return raw[raw.rindex(")") + 2 :].split()


def _process_groups() -> list[tuple[int, int]]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and (fields := _stat(int(name))):
            out.append((int(name), int(fields[2])))  # pid, pgrp
    return out


def cpu_seconds(pids) -> float:
    total = 0
    for pid in pids:
        if fields := _stat(pid):
            total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / TICKS


def children_of(parent: int) -> list[int]:
    return [
        int(n)
        for n in os.listdir("/proc")
        if n.isdigit() and (f := _stat(int(n))) and int(f[1]) == parent
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

    def propose(self, run_id: str, key: str, **body) -> Answer:
        return self.lean.post(
            f"/runs/{run_id}/actions", json=body, headers={"Idempotency-Key": key}
        )

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
    """Run fn(i, *args) in `count` threads; return their results; re-raise the first error."""
    results, errors = [None] * count, []

    def run(i):
        try:
            results[i] = fn(i, *args)
        except BaseException as exc:  # reported to the caller
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


# --- the fault mix and the invariants ---------------------------------------------------------

# (name, share, fault rules). Everything else goes through cleanly. Each action has a target
# of its own, so a rule fires for exactly that action.
FAULT_MIX = [
    # applied, then the connection is reset: unknown → reconciled (match)
    ("drop_after_commit", 0.05, [{"mode": "drop_after_commit"}]),
    # applied, then 500: unknown → reconciled
    ("error_after_commit", 0.05, [{"mode": "error_after_commit"}]),
    # applied, answered after the tool's timeout: unknown → reconciled
    ("slow_after_commit", 0.02, [{"mode": "slow_after_commit", "seconds": 3}]),
    # not applied, 503: unknown → the target does not exist → needs_human
    ("error_before_commit", 0.03, [{"mode": "error_before_commit"}]),
    # 422: failed, rejected
    ("reject", 0.03, [{"mode": "reject"}]),
    # applied, 500, and the first reconciliation's three reads fail: unknown, retried later
    (
        "read_fails",
        0.02,
        [{"mode": "error_after_commit"}, {"mode": "error_on_read", "times": 3}],
    ),
]


def pick_fault(rng) -> tuple[str, list] | None:
    roll = rng.random()
    for name, share, rules in FAULT_MIX:
        if roll < share:
            return name, rules
        roll -= share
    return None


@dataclass
class LoadResult:
    proposed: int = 0
    statuses: dict = field(default_factory=dict)
    latencies: list = field(default_factory=list)
    kills: int = 0
    refusals: int = 0
    db_restarts: int = 0
    max_depth: int = 0
    open_after: int = 0
    settle_seconds: float = 0.0
    elapsed: float = 0.0


def drive(
    stack: Stack,
    agent: Agent,
    *,
    count: int,
    tool: str,
    threads: int = 4,
    faults: bool = True,
    kill_every: float | None = None,
    refuse_every: float | None = None,
    restart_db=None,
    kill_while_settling: bool = False,
    settle_timeout: float = 600,
    seed: int = 7,
    say=print,
    tool_prefix: str = "tickets",
) -> LoadResult:
    """Propose `count` actions (each on a target of its own) from `threads` runtimes, with
    the fault mix, SIGKILLing a worker every `kill_every` seconds (it restarts at once, like
    a pod), and once calling `restart_db` halfway; then wait until nothing is in progress
    (the killing stops when the proposals end, unless `kill_while_settling`). A 503 is
    retried with the same key after Retry-After, as a runtime should."""
    import random
    from collections import Counter

    from django.db import InterfaceError, OperationalError, connection

    from runs.models import Action
    from runs.states import IN_PROGRESS

    rng = random.Random(seed)
    plan = [pick_fault(rng) if faults else None for _ in range(count)]
    result = LoadResult()
    statuses = Counter()
    stop = threading.Event()
    prefix = uuid.uuid4().hex[:8]
    control = f"{stack.downstream_url}/_control/faults"
    half = threading.Event()

    proposing = threading.Event()
    proposing.set()

    def chaos():
        next_kill = time.monotonic() + (kill_every or 1e9)
        next_refuse = time.monotonic() + (refuse_every or 1e9)
        while not stop.wait(0.2):
            now = time.monotonic()
            if now >= next_kill and (proposing.is_set() or kill_while_settling):
                i = rng.randrange(stack.workers)
                stack.kill_worker(i)
                stack.start_worker(i)
                result.kills += 1
                next_kill = now + kill_every
            if now >= next_refuse:
                with contextlib.suppress(httpx.HTTPError):
                    httpx.post(control, json={"mode": "refuse", "seconds": 1.0}, timeout=5)
                    result.refusals += 1
                next_refuse = now + refuse_every
            if restart_db is not None and half.is_set() and not result.db_restarts:
                say("-- restarting PostgreSQL")
                restart_db()
                result.db_restarts += 1

    def propose_share(t: int) -> None:
        run_id = retrying(agent.start_run)
        for i in range(t, count, threads):
            if i >= count // 2:
                half.set()
            target = f"soak-{prefix}-{i}"
            for rule in (plan[i] or (None, []))[1]:
                body = {**rule, "target": target, "prefix": tool_prefix}
                retrying(
                    lambda body=body: httpx.post(control, json=body, timeout=10).raise_for_status()
                )
            key = f"soak-{prefix}-{i}"
            while True:
                started = time.monotonic()
                try:
                    response = agent.propose(
                        run_id,
                        key,
                        tool=tool,
                        target=target,
                        desired_state={"status": "done", "n": i},
                    )
                except httpx.TransportError:
                    statuses["connection error"] += 1
                    time.sleep(0.5)
                    continue
                result.latencies.append(time.monotonic() - started)
                statuses[response.status_code] += 1
                if response.status_code == 503:
                    time.sleep(float(response.headers.get("Retry-After", 1)))
                    continue
                break
            if response.status_code not in (200, 201):
                raise RuntimeError(f"propose answered {response.status_code}: {response.text}")
            result.proposed += 1
            if result.proposed % 1000 == 0:
                say(f"   {result.proposed} proposed")

    started = time.monotonic()
    chaos_thread = threading.Thread(target=chaos, daemon=True)
    with DepthWatch(stack) as depth:
        chaos_thread.start()
        try:
            in_threads(threads, propose_share)
            proposing.clear()
            settle_start = time.monotonic()
            deadline = settle_start + settle_timeout
            while True:
                try:
                    open_now = Action.objects.filter(
                        tenant__slug=agent.tenant, state__in=IN_PROGRESS
                    ).count()
                except (OperationalError, InterfaceError):  # the database restarted
                    connection.close()
                    time.sleep(1)
                    continue
                if not open_now or time.monotonic() > deadline:
                    break
                time.sleep(1)
            result.open_after = open_now
            result.settle_seconds = time.monotonic() - settle_start
        finally:
            stop.set()
            chaos_thread.join(30)
        result.max_depth = depth.max
    result.elapsed = time.monotonic() - started
    result.statuses = dict(statuses)
    return result


def retrying(fn, attempts: int = 60):
    """Call fn through a database restart: 503s and refused connections are retried."""
    for attempt in range(attempts):
        try:
            return fn()
        except (httpx.TransportError, httpx.HTTPStatusError) as exc:
            status = getattr(getattr(exc, "response", None), "status_code", 503)
            if status != 503 or attempt == attempts - 1:
                raise
            time.sleep(0.5)
    return None


def invariants(tenant, downstream_stats: dict) -> dict:
    """The soak's table, from the database and the tool's own counters."""
    from collections import Counter, defaultdict

    from django.db.models import Min

    from core.models import AuditEvent
    from runs.models import Action, Attempt
    from runs.states import IN_PROGRESS

    actions = dict(Action.objects.filter(tenant=tenant).values_list("pk", "state"))
    keys = dict(Action.objects.filter(tenant=tenant).values_list("idempotency_key", "target"))
    received = downstream_stats["effects_received"]
    mutations = Counter()
    for prefix_counts in downstream_stats["mutations"].values():
        mutations.update(prefix_counts)
    # Every action of a soak has a target of its own: more than one mutation is a duplicate.
    duplicates = sum(1 for key, target in keys.items() if mutations.get(target, 0) > 1)
    over_received = sum(1 for key in keys if received.get(key, 0) > 1)
    # A resend that the tool's declaration allowed (issue 13) is not a re-dispatch: it says
    # so on the attempt, with the declaration. Anything else after an unknown attempt is.
    after_unknown = (
        Attempt.objects.filter(action__tenant=tenant, outcome="unknown")
        .values("action_id")
        .annotate(first=Min("number"))
    )
    first_unknown = {row["action_id"]: row["first"] for row in after_unknown}
    later = Attempt.objects.filter(action_id__in=first_unknown).values_list(
        "action_id", "number", "kind", "declaration"
    )
    redispatch = len(
        {
            action_id
            for action_id, number, kind, declared in later
            if number > first_unknown[action_id]
            and not (kind == "resend" and (declared or {}).get("effect") in RESENDABLE)
        }
    )
    resends = Attempt.objects.filter(action__tenant=tenant, kind="resend").count()
    stuck = sum(1 for state in actions.values() if state in IN_PROGRESS)
    # The figure issue 13 is about: of the actions whose outcome was ever unknown, how many
    # needed a person (still needs_human: the soak has no operators).
    unknowns = set(first_unknown)
    needed_person = sum(1 for pk in unknowns if actions.get(pk) == "needs_human")
    by_lookup = (
        Action.objects.filter(
            pk__in=unknowns, state="succeeded", reconciliations__verdict="lookup_applied"
        )
        .distinct()
        .count()
    )

    # Every transition audited: per action, the audit events chain from the proposal's state
    # to the current one with no gap (each `before` is the previous `after`).
    chains = defaultdict(list)
    events = (
        AuditEvent.objects.filter(tenant=tenant, object_type="action")
        .order_by("at", "id")
        .values_list("object_id", "verb", "before", "after")
    )
    for object_id, verb, before, after in events.iterator(chunk_size=5000):
        if verb == "action.propose" or verb.removeprefix("action.") in STATES:
            chains[object_id].append((verb, before, after))
    gaps = 0
    for pk, state in actions.items():
        chain = chains.get(str(pk), [])
        if not chain or chain[0][0] != "action.propose":
            gaps += 1
            continue
        current = chain[0][2]["state"]
        for _verb, before, after in chain[1:]:
            if (before or {}).get("state") != current:
                gaps += 1
                break
            current = after["state"]
        else:
            gaps += current != state
    return {
        "actions": len(actions),
        "states": dict(Counter(actions.values())),
        "duplicate effects (a target mutated twice)": duplicates,
        "keys received more than once": over_received,
        "re-dispatch after unknown": redispatch,
        "declared resends": resends,
        "stuck (queued, dispatching, unknown)": stuck,
        "audit gaps": gaps,
        "unknown outcomes": len(unknowns),
        "unknowns that needed a person": needed_person,
        "unknowns settled by lookup": by_lookup,
    }


RESENDABLE = {"idempotent", "read_only"}


STATES = {
    "awaiting_approval",
    "queued",
    "dispatching",
    "succeeded",
    "failed",
    "unknown",
    "needs_human",
    "blocked",
}
