"""What starts a server stops it: the one-off entry points (manage.py, the test run) stop the
embedded PostgreSQL they started and leave alone one that was running; `make run`'s
children die with its launcher however it dies, and a new `make run` stops what an earlier
one left behind."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from django.db import connections

from bench.management.commands.bench_queue import database_url as url_for
from takeover import embedded_db
from takeover.supervisor import Leftovers, cmdline, descendants, proc_stat
from tests.conftest import ROOT, free_port

pytestmark = pytest.mark.slow


def gone(pid: int, was: str) -> bool:
    """The process is no more (or its number now belongs to another command line)."""
    fields = proc_stat(pid)
    return fields is None or fields[0] == "Z" or cmdline(pid) != was


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def postgres_under(var_dir: Path) -> list[int]:
    """Every process whose command line runs a server on `var_dir`'s data directory."""
    pgdata = str(var_dir / "pgdata")
    return [
        int(name)
        for name in os.listdir("/proc")
        if name.isdigit() and pgdata in cmdline(int(name)) and "postgres" in cmdline(int(name))
    ]


# --- the embedded PostgreSQL: one-off commands and the test run ------------------------------


@pytest.fixture
def fresh_var_dir():
    """A checkout's var/ as a fresh clone has it: nothing in it. Under var/, not pytest's
    tmp_path: as root, the server runs as an unprivileged user that cannot enter pytest's
    private temporary directories."""
    var_dir = ROOT / "var" / f"test-fresh-{uuid.uuid4().hex[:8]}"
    var_dir.mkdir(parents=True)
    yield var_dir
    embedded_db.stop(var_dir)
    shutil.rmtree(var_dir, ignore_errors=True)


def one_off(var_dir: Path, *argv: str, settings="takeover.settings") -> subprocess.CompletedProcess:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", embedded_db.URL_VARIABLE, embedded_db.OWNER_URL_VARIABLE}
    }
    env.update(TAKEOVER_VAR_DIR=str(var_dir), DJANGO_SETTINGS_MODULE=settings)
    return subprocess.run(
        [sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


def test_one_off_commands_and_the_test_run_stop_the_server_they_started(fresh_var_dir):
    # A manage.py command on a fresh clone starts the embedded server (initdb and all) …
    done = one_off(fresh_var_dir, "manage.py", "check")
    assert done.returncode == 0, done.stderr
    assert (fresh_var_dir / "pgdata" / "PG_VERSION").exists()
    # … and stops it when it ends.
    assert not embedded_db.running(fresh_var_dir)
    assert postgres_under(fresh_var_dir) == []

    # A test run (what `make test` runs after its two manage.py commands): the test settings
    # start the server, pytest-django creates and migrates the test database, a test runs.
    done = one_off(
        fresh_var_dir,
        *("-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts="),
        "tests/takeover/test_logs.py::test_a_callers_traceparent_carries_on_as_the_request_id",
        settings="tests.settings",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 passed" in done.stdout
    assert not embedded_db.running(fresh_var_dir)
    assert postgres_under(fresh_var_dir) == []


def test_a_one_off_command_leaves_alone_a_server_it_did_not_start(fresh_var_dir):
    # Started by a service (web, worker, beat and `make run` do not stop it at their exit).
    started = one_off(
        fresh_var_dir, "-c", "from takeover.embedded_db import prepare; print(prepare())"
    )
    assert started.stdout.strip() == "True", started.stderr
    assert embedded_db.running(fresh_var_dir)
    done = one_off(fresh_var_dir, "manage.py", "check")
    assert done.returncode == 0, done.stderr
    assert embedded_db.running(fresh_var_dir)  # still there for whoever started it


# --- make run ----------------------------------------------------------------------------------


@pytest.fixture
def stack_env(live_db, tmp_path):
    """What `make run` needs, on a database of its own on the test server (the launcher
    migrates it and seeds the demo), its own var/, broker and ports."""
    owner = connections["owner"].settings_dict
    name = f"test_launcher_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url_for(owner, "postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TAKEOVER_EMBEDDED")},
        "DATABASE_URL": url_for(owner, name),
        "DJANGO_SETTINGS_MODULE": "takeover.settings",
        "TAKEOVER_VAR_DIR": str(tmp_path / "var"),
        "CELERY_BROKER_DIR": str(tmp_path / "var" / "broker"),
        "CELERY_QUEUE": f"launcher-{name}",
        "PORT": str(free_port()),
        "DOWNSTREAM_PORT": str(free_port()),
        "MCP_DEMO_PORT": str(free_port()),
        "WORKER_METRICS_PORT": str(free_port()),
        "PYTHONUNBUFFERED": "1",
    }
    yield env
    with psycopg.connect(url_for(owner, "postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Launch:
    """`python -m takeover.launcher` (what `make run` runs), in a session of its own so that
    the test's signals reach only what the test means."""

    def __init__(self, env, log: Path):
        self.log_path = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "takeover.launcher"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=open(log, "w"),  # noqa: SIM115 -- the child owns it
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_running(self) -> None:
        wait_until(
            lambda: "Takeover is running" in self.output() or self.process.poll() is not None,
            240,
            "make run did not come up",
        )
        assert "Takeover is running" in self.output(), self.output()[-3000:]
        # The agent is the last child, started after the banner.
        wait_until(lambda: "agent" in self.state()["groups"].values(), 30, "no agent")

    def state(self) -> dict:
        return json.loads((Path(self.env_var_dir) / "run" / "launcher.json").read_text())

    def tree(self) -> dict[int, str]:
        """Every process below the launcher (its children, gunicorn's workers, the
        watchdog), with its command line."""
        return {pid: cmdline(pid) for pid in descendants(self.process.pid)}

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(60)


def test_make_run_children_die_with_a_killed_launcher_and_a_new_run_stops_leftovers(
    stack_env, tmp_path
):
    var_dir = Path(stack_env["TAKEOVER_VAR_DIR"])
    first = Launch(stack_env, tmp_path / "first.log")
    first.env_var_dir = var_dir
    launches = [first]
    try:
        first.wait_running()
        tree = first.tree()
        state = first.state()
        names = set(state["groups"].values())
        assert names == {"downstream", "mcp", "web", "worker", "beat", "agent"}
        assert state["watchdog"] in tree
        assert len(tree) >= 8  # five children, gunicorn's two workers, the watchdog

        # Even the watchdog dies with it (the OOM killer may take both): the children live
        # on as orphans, holding their ports.
        os.kill(state["watchdog"], signal.SIGKILL)
        os.kill(first.process.pid, signal.SIGKILL)
        first.process.wait(10)
        time.sleep(2)
        orphans = {pid: line for pid, line in tree.items() if not gone(pid, line)}
        # (A child that writes to its closed output pipe may end by itself, at any moment;
        # gunicorn's master and workers, quiet, live on.)
        left = Leftovers.read(var_dir / "run" / "launcher.json")
        assert "web" in {name for name, _pids in left.groups.values()}, orphans
        assert len(orphans) >= 3, orphans

        # A new `make run` finds them through the state file, says so and stops them.
        second = Launch(stack_env, tmp_path / "second.log")
        second.env_var_dir = var_dir
        launches.append(second)
        second.wait_running()
        said = second.output()
        assert "an earlier `make run` left these running; stopping them" in said
        assert "web (pid " in said
        assert all(gone(pid, line) for pid, line in orphans.items()), orphans

        # A third one refuses to start beside it, naming it.
        third = subprocess.run(
            [sys.executable, "-m", "takeover.launcher"],
            cwd=ROOT,
            env=stack_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert third.returncode != 0
        assert f"already running in this checkout (launcher pid {second.process.pid})" in (
            third.stdout + third.stderr
        )

        # kill -9 of the launcher: its watchdog stops every child, and then leaves too.
        tree = second.tree()
        assert len(tree) >= 8
        os.kill(second.process.pid, signal.SIGKILL)
        second.process.wait(10)
        wait_until(
            lambda: all(gone(pid, line) for pid, line in tree.items()),
            60,
            f"left running: {[line for pid, line in tree.items() if not gone(pid, line)]}",
        )
    finally:
        for launch in launches:
            launch.stop()
        leftovers = Leftovers.read(var_dir / "run" / "launcher.json")
        if leftovers is not None:
            leftovers.stop(5)
