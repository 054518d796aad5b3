"""`make run`: the whole stack on one machine, for a newcomer.

``python -m takeover.launcher`` migrates the database, seeds the demo data
(``demo.setup``), then runs these as child processes, each line of their output
prefixed with the child's name:

=============  ============================================================================
web            gunicorn on 127.0.0.1:$PORT (default 8000), 2 workers × 8 threads
worker         a Celery worker (threads pool, concurrency 8): dispatch and reconciliation
beat           Celery beat: the periodic sweep (lost messages, expired leases, stale runs)
downstream     the demo tool server on 127.0.0.1:$DOWNSTREAM_PORT (default 8100)
agent          the demo agent (``demo.agent``), speaking only HTTP API v1
=============  ============================================================================

Engines: PostgreSQL from ``DATABASE_URL``, else the embedded server under ``./var/pgdata``
(started by the settings themselves); Celery's broker from ``CELERY_BROKER_URL``, else the
filesystem transport under ``./var/broker``. Nothing here depends on which.

Ctrl-C or SIGTERM stops the agent first (so it can finish its run), then the others:
SIGTERM to each child's process group, SIGKILL after a grace period; then the embedded
PostgreSQL, if it was the embedded one; exit 0. A child that dies on its own is reported
loudly and brings the whole stack down with exit 1: a demo that silently lost its worker
would teach the wrong lesson.

Quirks:
- Routine chatter is filtered out of the console: beat's "Sending due task", the worker's
  "received"/"succeeded" line per task and its httpx line per tool call (the agent reports
  every outcome instead), the web's access line per request,
  kombu's "No hostname was supplied". ``VERBOSE=1`` shows everything, plus gunicorn's
  access log and one line per request of the demo downstream.
- gunicorn runs with ``--no-control-socket``: its default shared ``~/.gunicorn`` socket
  would let one stack's shutdown remove another's.
- Every child shares ``PROMETHEUS_MULTIPROC_DIR=./var/prometheus`` (emptied at start), so
  the web's /metrics also shows the worker's series on this one machine. /metrics answers
  only once ``METRICS_TOKEN`` (or ``METRICS_ALLOW_FROM``) is set.
- The embedded PostgreSQL is stopped on exit even if another process (a test run in the
  same checkout, say) still uses it; it starts again on that process's next connection.
"""

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GRACE_SECONDS = 10
AGENT_GRACE_SECONDS = 8
READY_TIMEOUT_SECONDS = 90

# What every message and every tool call prints; the agent tells the story instead.
NOISE = re.compile(
    r"Sending due task"
    r"|Task runs\.\w+\[[0-9a-f-]+\] (received|succeeded in)"
    r"|HTTP Request: (GET|POST) "
    r"|takeover\.access"
    r"|No hostname was supplied\. Reverting to default"
)

COLORS = {"web": 34, "worker": 32, "beat": 36, "downstream": 35, "agent": 33}


class Output:
    """Line-atomic writes to our stdout, shared by the reader threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        self.width = max(len(n) for n in COLORS)

    def line(self, name: str, text: str) -> None:
        label = f"{name:<{self.width}} |"
        if self.color:
            label = f"\033[{COLORS.get(name, 0)}m{label}\033[0m"
        with self.lock:
            sys.stdout.write(f"{label} {text}\n")
            sys.stdout.flush()

    def say(self, text: str) -> None:
        with self.lock:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()


@dataclass
class Child:
    name: str
    argv: list[str]
    process: subprocess.Popen | None = None
    reader: threading.Thread | None = field(default=None, repr=False)

    def start(self, out: Output, env: dict, *, verbose: bool) -> None:
        # A session of its own: the terminal's Ctrl-C reaches only us, and we stop the
        # children in order; killpg() then also reaches gunicorn's forked workers.
        self.process = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            bufsize=1,
            text=True,
            errors="replace",
        )
        self.reader = threading.Thread(
            target=self._pump, args=(out, verbose), name=f"pump-{self.name}", daemon=True
        )
        self.reader.start()

    def _pump(self, out: Output, verbose: bool) -> None:
        # Must read to the end, or a chatty child blocks on a full pipe.
        for raw in self.process.stdout:
            text = raw.rstrip("\n")
            if text and (verbose or not NOISE.search(text)):
                out.line(self.name, text)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, signum: int) -> None:
        """Signal the child's whole process group (gunicorn's workers included)."""
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signum)


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class Launcher:
    def __init__(self) -> None:
        self.out = Output()
        self.port = int(os.environ.get("PORT", 8000))
        self.downstream_port = int(os.environ.get("DOWNSTREAM_PORT", 8100))
        self.verbose = os.environ.get("VERBOSE", "") not in ("", "0")
        self.embedded = not os.environ.get("DATABASE_URL")
        self.children: list[Child] = []
        self.stopping = threading.Event()
        self.var_dir: Path | None = None

    # --- set-up -------------------------------------------------------------------------

    def prepare(self):
        for port, name in ((self.port, "PORT"), (self.downstream_port, "DOWNSTREAM_PORT")):
            if not port_free(port):
                raise SystemExit(
                    f"Port {port} on 127.0.0.1 is taken ({name}). Stop whatever listens there, "
                    f"or choose another: {name}=... make run"
                )
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "takeover.settings")
        self.out.say(
            "Takeover: starting the database "
            + ("(embedded PostgreSQL under var/pgdata)…" if self.embedded else "(DATABASE_URL)…")
        )
        import django

        from takeover.embedded_db import prepare

        prepare()  # the embedded PostgreSQL, when DATABASE_URL is unset; children inherit its URL
        django.setup()
        from django.conf import settings
        from django.core.management import call_command
        from django.db import connections

        from demo.setup import demo_setup

        self.var_dir = Path(settings.VAR_DIR)
        self.out.say("Takeover: applying migrations…")
        call_command("migrate", interactive=False, verbosity=0)
        seeded = demo_setup(
            downstream_url=f"http://127.0.0.1:{self.downstream_port}", var_dir=self.var_dir
        )
        if seeded.created:
            self.out.say("Takeover: demo data created: " + ", ".join(seeded.created))
        broker = settings.CELERY_BROKER_URL
        connections.close_all()  # the children open their own; we keep none idle
        return seeded, broker

    def child_env(self) -> dict:
        from django.conf import settings

        env = dict(os.environ)
        # The demo's key, generated once into var/secret_key, handed to the children
        # explicitly: the web application refuses to invent one with DEBUG off.
        env.setdefault("SECRET_KEY", settings.SECRET_KEY)
        env["PYTHONUNBUFFERED"] = "1"  # line by line through the pipes
        env.setdefault("DJANGO_SETTINGS_MODULE", "takeover.settings")
        env.setdefault("PROMETHEUS_MULTIPROC_DIR", str(self.metrics_dir()))
        return env

    def metrics_dir(self) -> Path:
        """Emptied once per start: series of processes that are gone must not add up."""
        if not hasattr(self, "_metrics_dir"):
            self._metrics_dir = self.var_dir / "prometheus"
            shutil.rmtree(self._metrics_dir, ignore_errors=True)
            self._metrics_dir.mkdir(parents=True)
        return self._metrics_dir

    def children_for(self, broker: str) -> list[Child]:
        # Options as strings for legibility; paths (which may hold spaces) as list items.
        web = "-m gunicorn -c python:takeover.gunicorn_conf takeover.wsgi"
        web += f" -b 127.0.0.1:{self.port} -k gthread --threads 8 -w 2"
        web += " --no-control-socket"  # gunicorn 27 shares ~/.gunicorn/gunicorn.ctl otherwise
        web += f" --graceful-timeout {GRACE_SECONDS - 2}"
        if self.verbose:
            web += " --access-logfile -"
        worker = "-m celery -A takeover worker -P threads -c 8 --loglevel INFO"
        worker += f" -n takeover-{os.getpid()}@%h"
        if broker.startswith("filesystem://"):
            # The filesystem transport has no fanout: nothing to mingle or gossip with.
            worker += " --without-gossip --without-mingle --without-heartbeat"
        beat = "-m celery -A takeover beat --loglevel INFO -s"
        downstream = f"--port {self.downstream_port}" + ("" if self.verbose else " --quiet")
        py = sys.executable
        return [
            Child("downstream", [py, str(ROOT / "demo/downstream.py"), *downstream.split()]),
            Child("web", [py, *web.split()]),
            Child("worker", [py, *worker.split()]),
            Child("beat", [py, *beat.split(), str(self.var_dir / "celerybeat-schedule")]),
        ]

    def agent(self, token_file: Path) -> Child:
        argv = f"-m demo.agent --url http://127.0.0.1:{self.port}"
        argv += f" --downstream http://127.0.0.1:{self.downstream_port} --token-file"
        return Child("agent", [sys.executable, *argv.split(), str(token_file)])

    # --- running ------------------------------------------------------------------------

    def on_signal(self, signum, _frame) -> None:
        if not self.stopping.is_set():
            self.out.say(f"\nTakeover: {signal.Signals(signum).name} received, stopping…")
        self.stopping.set()

    def wait_ready(self) -> bool:
        """Until web and downstream accept connections; False if we were stopped or a
        child died first."""
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.stopping.is_set() or self.dead_child():
                return False
            if port_open(self.port) and port_open(self.downstream_port):
                return True
            time.sleep(0.2)
        return False

    def dead_child(self) -> Child | None:
        for child in self.children:
            if child.process is not None and not child.running():
                return child
        return None

    def banner(self, seeded) -> None:
        from django.conf import settings

        url = f"http://127.0.0.1:{self.port}"
        root = Path.cwd()

        def rel(path: Path) -> str:
            try:
                return str(path.relative_to(root))
            except ValueError:
                return str(path)

        width = max(len(login.username) for login in seeded.logins)
        lines = [
            "",
            "=" * 72,
            f"  Takeover is running: {url}/",
            "",
            f"  Console sign-in (tenant {seeded.tenant!r}):",
        ]
        for login in seeded.logins:
            password = login.password or "(changed since the demo set it; not shown)"
            lines.append(f"    {login.username:<{width}}  password {password:<16} ({login.role})")
        lines += [
            "",
            f"  API docs:     {url}/api/v1/docs/",
            f"  Agent token:  {rel(seeded.agent_token_file)}  (principal demo-agent)",
            f"  Operator API tokens: {rel(self.var_dir)}/demo-<username>.token, e.g.",
            f'    curl -H "Authorization: Bearer $(cat {rel(seeded.logins[1].token_file)})" '
            f"{url}/api/v1/queue",
            f"  Demo downstream: http://127.0.0.1:{self.downstream_port}/_control/stats",
            "",
            f"  Tools may only be reached at: {settings.TOOL_URL_ALLOWLIST}",
            "    (TOOL_URL_ALLOWLIST; e.g. TOOL_URL_ALLOWLIST='localhost,127.0.0.0/8,::1,"
            "*.tools.example.com,10.20.0.0/16' make run)",
            "",
            "  The demo agent starts a run every few seconds. Ctrl-C stops everything.",
            "=" * 72,
            "",
        ]
        self.out.say("\n".join(lines))

    def run(self) -> int:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self.on_signal)
        try:
            seeded, broker = self.prepare()
            if self.stopping.is_set():
                return 0
            env = self.child_env()
            for child in self.children_for(broker):
                self.children.append(child)
                child.start(self.out, env, verbose=self.verbose)
            ready = self.wait_ready()
            if ready:
                self.banner(seeded)
                agent = self.agent(seeded.agent_token_file)
                self.children.append(agent)
                agent.start(self.out, env, verbose=self.verbose)
            elif not self.stopping.is_set() and not self.dead_child():
                self.out.say(
                    f"Takeover: nothing answers on port {self.port} and {self.downstream_port} "
                    f"after {READY_TIMEOUT_SECONDS}s; stopping everything."
                )
                return 1
            dead = None
            while not self.stopping.is_set() and dead is None:
                dead = self.dead_child()
                self.stopping.wait(0.5)
            if dead is not None:
                code = dead.process.returncode
                self.out.say(
                    "\n" + "!" * 72 + f"\n  Takeover: {dead.name} exited unexpectedly "
                    f"(exit code {code}); stopping everything.\n" + "!" * 72
                )
                return 1
            return 0
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        self.stopping.set()
        agents = [c for c in self.children if c.name == "agent"]
        others = [c for c in self.children if c.name != "agent"]
        self._stop(agents, AGENT_GRACE_SECONDS)
        self._stop(others, GRACE_SECONDS)
        for child in self.children:
            if child.reader is not None:
                child.reader.join(2)
        if self.embedded and self.var_dir is not None:
            from takeover.embedded_db import stop

            self.out.say("Takeover: stopping the embedded PostgreSQL…")
            try:
                stop(self.var_dir)
            except Exception as exc:  # shutting down anyway; say what is left behind
                self.out.say(f"Takeover: could not stop the embedded PostgreSQL: {exc}")
        self.out.say("Takeover: stopped.")

    def _stop(self, children: list[Child], grace: float) -> None:
        for child in children:
            child.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for child in children:
            if child.process is None:
                continue
            try:
                child.process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                self.out.say(f"Takeover: {child.name} did not stop within {grace:g}s; killing it.")
                child.signal(signal.SIGKILL)
                child.process.wait(5)
            # The leader may be gone while a forked grandchild lingers in its group.
            child.signal(signal.SIGKILL)


def main() -> None:
    sys.exit(Launcher().run())


if __name__ == "__main__":
    main()
