"""Shared fixtures: real PostgreSQL, a real demo downstream over HTTP, real Celery workers,
and one set of personas per test in a fresh tenant.

Database access: tests that talk to workers or to the downstream use `live_db`: committed
data in the session's test database, no per-test flush (the audit table refuses TRUNCATE by
design). Isolation comes from a fresh tenant (and fresh targets) per test instead.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from django.db import connection, connections
from django.db.models.signals import post_save

from . import invariants
from .builders import SETUP, World, make_world  # noqa: F401 -- SETUP: tests import it from here

ROOT = Path(__file__).resolve().parent.parent


# --- database ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def django_db_setup(
    request, django_test_environment, django_db_modify_db_settings, django_db_blocker
):
    """The test database, created and migrated by the owner role ("owner" in DATABASES);
    the application's connection ("default") mirrors it under its own role, which owns
    nothing (core/dbroles.py). pytest-django alone would only set up "default", a mirror.
    Under pytest-xdist, `django_db_modify_db_settings` gives each process its own database
    (test_takeover_gw0, ...)."""
    from django.test.utils import setup_databases, teardown_databases

    with django_db_blocker.unblock():
        db_cfg = setup_databases(
            verbosity=request.config.option.verbose,
            interactive=False,
            aliases={"default", "owner"},
        )
    yield
    with django_db_blocker.unblock():
        # Any session left on the test database (a killed worker's, the wait listener's)
        # would keep it from dropping: end them, as the owner, on a fresh connection (a
        # test may have restarted the server under the old one).
        connections.close_all()
        with connections["owner"].cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        connections.close_all()
        try:
            teardown_databases(db_cfg, verbosity=request.config.option.verbose)
        except Exception as exc:  # as pytest-django's own fixture: a warning, not an error
            request.node.warn(pytest.PytestWarning(f"Could not drop the test database: {exc!r}"))


@pytest.fixture
def transactional_db(django_db_setup, django_db_blocker):
    """Autocommit access to the test database, visible to worker processes.

    Replaces pytest-django's fixture of this name, which flushes every table with TRUNCATE
    after each test: the append-only audit log refuses that by design. No flush here;
    isolation comes from a fresh tenant per test. `live_server` asks for this fixture, and
    asking for it is also what makes pytest-django create the test database at all.
    """
    from django.db import connection

    assert connection.settings_dict["NAME"].startswith("test_"), "not the test database!"
    with django_db_blocker.unblock():
        yield


@pytest.fixture(scope="session", autouse=True)
def _stop_wait_listener(django_db_setup):
    """API tests that wait start this process's LISTEN connection; it must be gone before
    the test database is dropped (torn down before `django_db_setup`)."""
    yield
    from runs.waits import waiters

    waiters.stop()


@pytest.fixture
def live_db(transactional_db):
    """The name the tests use for `transactional_db` (committed data, no flush)."""
    return None


def database_url() -> str:
    """The test database's URL, for worker processes."""
    s = connection.settings_dict
    assert s["NAME"].startswith("test_"), "workers must never run on the real database"
    host = s.get("HOST") or ""
    auth = quote(s.get("USER") or "")
    if s.get("PASSWORD"):
        auth += ":" + quote(s["PASSWORD"])
    if host.startswith("/"):
        return f"postgresql://{auth}@/{s['NAME']}?host={quote(host)}" + (
            f"&port={s['PORT']}" if s.get("PORT") else ""
        )
    port = f":{s['PORT']}" if s.get("PORT") else ""
    return f"postgresql://{auth}@{host}{port}/{s['NAME']}"


# --- the demo downstream ---------------------------------------------------------------


class Downstream:
    def __init__(self, process, url):
        self.process = process
        self.url = url

    def base(self, prefix="tickets") -> str:
        return f"{self.url}/{prefix}"

    def control(self, method, path, body=None):
        response = httpx.request(method, f"{self.url}/_control/{path}", json=body, timeout=10)
        response.raise_for_status()
        return response.json()

    def fault(self, mode, **rule):
        return self.control("POST", "faults", {"mode": mode, **rule})

    def stats(self) -> dict:
        return self.control("GET", "stats")

    def mutations(self, target, prefix="tickets") -> int:
        return self.stats()["mutations"].get(prefix, {}).get(target, 0)

    def received(self, key) -> int:
        return self.stats()["effects_received"].get(key, 0)

    def seed(self, target, state, version=1, prefix="tickets"):
        return self.control(
            "POST", "seed", {"prefix": prefix, "target": target, "state": state, "version": version}
        )

    def external_write(self, target, state, prefix="tickets"):
        return self.control(
            "POST", "external-write", {"prefix": prefix, "target": target, "state": state}
        )

    def read(self, target, prefix="tickets"):
        """GET the tool's state endpoint directly: a tool call like any other (refused by a
        downstream that requires Takeover's signature)."""
        return httpx.get(f"{self.url}/{prefix}/state/{quote(target, safe='')}", timeout=5)

    def record(self, target, prefix="tickets") -> dict | None:
        """What the system holds for `target` (`{"state", "version"}`), through the control
        API, as the rest of the world sees it."""
        return self.control("GET", "records").get(prefix, {}).get(target)


def start_downstream(host="127.0.0.1", *args, stderr=subprocess.DEVNULL) -> Downstream:
    """`args`: more options (`--require-signature`); `stderr`: where its log goes."""
    process = subprocess.Popen(
        [
            *(sys.executable, str(ROOT / "demo/downstream.py")),
            *("--host", host, "--port", "0", "--quiet", *args),
        ],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
    )
    line = process.stdout.readline()
    if "listening on" not in line:
        process.kill()
        raise RuntimeError(f"demo downstream did not start: {line!r}")
    return Downstream(process, line.strip().rsplit(" ", 1)[-1])


@pytest.fixture(scope="session")
def downstream(django_db_setup, django_db_blocker):
    """The demo downstream, shared by the run. Its teardown, at the end of the run, checks
    the global invariants over everything the suite did (tests/invariants.py): a breach
    fails the run as an error at teardown, naming each breach."""
    from core.models import Tool

    ds = start_downstream("127.0.0.1", "--require-signature")
    # As a tool's owner would, the downstream is given each tool's signing secret when the
    # tool is registered (or its secret rotated): it refuses every call that does not carry
    # Takeover's signature, so every test that reaches it proves its calls are signed.
    post_save.connect(_hand_over_secrets(ds), sender=Tool, weak=False, dispatch_uid="tests.secrets")
    yield ds
    post_save.disconnect(sender=Tool, dispatch_uid="tests.secrets")
    try:
        with django_db_blocker.unblock():
            found = invariants.breaches(ds)
    finally:
        ds.process.terminate()
        ds.process.wait(10)
    assert found == [], "global invariants broken:\n" + "\n".join(found)


def _hand_over_secrets(ds):
    def hand_over(sender, instance, **kwargs):
        if instance.base_url.startswith(ds.url + "/"):
            for secret in instance.signing_secrets():
                ds.control("POST", "secrets", {"secret": secret})

    return hand_over


# --- Celery workers ------------------------------------------------------------------------


class Worker:
    def __init__(self, process, log_path, restart=None, metrics_port=None):
        self.process = process
        self.log_path = log_path
        self._restart = restart
        self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics" if metrics_port else None

    def restart(self):
        """Start a fresh worker process in place of this (dead or killed) one."""
        self.stop()
        fresh = self._restart()
        self.process, self.log_path = fresh.process, fresh.log_path
        self.metrics_url = fresh.metrics_url

    def kill(self):
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self):
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        return Path(self.log_path).read_text(errors="replace")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


STARTED_WORKERS: list = []  # every worker process this session started


def start_worker(tmp_path_factory, *, beat=True, env=None) -> Worker:
    """A real `celery worker` process on the test database and the test broker."""
    log_dir = tmp_path_factory.mktemp("worker")
    log_path = log_dir / "worker.log"
    cmd = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "takeover",
        "worker",
        "-P",
        "threads",
        "-c",
        "8",
        "--loglevel",
        "INFO",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-n",
        f"test-{uuid.uuid4().hex[:8]}@%h",
    ]
    if beat:
        cmd += ["-B", "-s", str(log_dir / "beat-schedule")]
    metrics_port = free_port()
    process = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env={
            **os.environ,
            "DATABASE_URL": database_url(),
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "WORKER_METRICS_PORT": str(metrics_port),
            # As in production: one JSON object per log line (tests/takeover/test_logs.py reads
            # them).
            "LOG_FORMAT": "json",
            **(env or {}),
        },
        stdout=open(log_path, "w"),  # noqa: SIM115 -- the child process owns it
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    worker = Worker(
        process,
        log_path,
        restart=lambda: start_worker(tmp_path_factory, beat=beat, env=env),
        metrics_port=metrics_port,
    )
    STARTED_WORKERS.append(worker)
    deadline = time.monotonic() + 60
    while "ready." not in worker.log():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("Celery worker did not start:\n" + worker.log()[-3000:])
        time.sleep(0.2)
    return worker


@pytest.fixture(scope="session")
def worker(django_db_setup, django_db_blocker, tmp_path_factory):
    with django_db_blocker.unblock():
        w = start_worker(tmp_path_factory)
    yield w
    w.stop()
    connections["owner"].close()  # a test may have restarted the server under it
    with django_db_blocker.unblock(), connections["owner"].cursor() as cursor:
        # A SIGKILLed worker's sessions linger until the server notices; end them so that
        # the test database can be dropped (as the owner: the app's role may not).
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    connection.close()  # ours was among them; the next query reconnects


@pytest.fixture
def world(live_db, downstream) -> World:
    return make_world(downstream)


def problem(response) -> dict:
    assert response["Content-Type"].startswith("application/problem+json"), response.content
    return json.loads(response.content)
