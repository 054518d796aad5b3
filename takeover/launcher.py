"""`make run`: the whole stack on one machine, for a newcomer.

``python -m takeover.launcher`` migrates the database, seeds the demo data
(``demo.setup``), then runs these as child processes, each line of their output
prefixed with the child's name:

=============  ============================================================================
web            gunicorn on 127.0.0.1:$PORT (default 8000), 2 workers × 8 threads
worker         a Celery worker (threads pool, concurrency 8): dispatch and reconciliation
beat           Celery beat: the periodic sweep (lost messages, expired leases, stale runs)
downstream     the demo tool server on 127.0.0.1:$DOWNSTREAM_PORT (default 8100)
mcp            the demo MCP server (tickets, outbox) on 127.0.0.1:$MCP_DEMO_PORT (default 8200)
agent          the demo agent (``demo.agent``), speaking only HTTP API v1
=============  ============================================================================

Engines: PostgreSQL from ``DATABASE_URL``, else the embedded server under ``./var/pgdata``
(started by the settings themselves); Celery's broker from ``CELERY_BROKER_URL``, else the
filesystem transport under ``./var/broker``. Nothing here depends on which.

Ctrl-C or SIGTERM stops the agent first (so it can finish its run), then the others:
SIGTERM to each child's process group, SIGKILL after a grace period; then the embedded
PostgreSQL, if this launcher started it and nothing else uses it; exit 0. A child that dies
on its own is reported loudly and brings the whole stack down with exit 1: a demo that
silently lost its worker would teach the wrong lesson.

The children die with the launcher however it dies: they are started by the project's one
process supervisor (takeover/supervisor.py), whose watchdog stops them, and the embedded
PostgreSQL the launcher started, when the launcher is killed (SIGKILL, the OOM killer, a
terminal closed mid-shutdown). `var/run/launcher.json` names the launcher and its children:
a new `make run` refuses to start beside a running one, and stops what an earlier one left
behind if even its watchdog died. A port that is still taken is answered with the process
that holds it.

Quirks:
- Routine chatter is filtered out of the console: beat's "Sending due task", the worker's
  "received"/"succeeded" line per task and its httpx line per tool call (the agent reports
  every outcome instead), the web's access line per request,
  kombu's "No hostname was supplied". ``VERBOSE=1`` shows everything, plus gunicorn's
  access log and one line per request of the demo downstream.
- gunicorn runs with ``--no-control-socket``: its default shared ``~/.gunicorn`` socket
  would let one stack's shutdown remove another's.
- The web's /metrics shows the web's series (gunicorn's processes added up by the project's
  gunicorn configuration); the worker serves its own on ``WORKER_METRICS_PORT`` (default
  here 9808). Both answer only once ``METRICS_TOKEN`` (or ``METRICS_ALLOW_FROM``) is set.
"""

import os
import re
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from takeover.supervisor import Child, Leftovers, Supervisor, listener

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

WORKER_METRICS_PORT = 9808

COLORS = {"web": 34, "worker": 32, "beat": 36, "downstream": 35, "mcp": 35, "agent": 33}


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
        self.mcp_port = int(os.environ.get("MCP_DEMO_PORT", 8200))
        self.verbose = os.environ.get("VERBOSE", "") not in ("", "0")
        self.embedded = not os.environ.get("DATABASE_URL")
        self.children: list[Child] = []
        self.stopping = threading.Event()
        from takeover.embedded_db import var_dir

        self.var_dir = var_dir()
        self.state_file = self.var_dir / "run" / "launcher.json"
        self.supervisor = Supervisor(state_file=self.state_file, grace=GRACE_SECONDS)
        self.started_database = False

    # --- set-up -------------------------------------------------------------------------

    def clear_the_way(self) -> None:
        """Refuse to start beside a running `make run` of this checkout; stop what an
        earlier one left behind; name whoever holds our ports."""
        earlier = Leftovers.read(self.state_file)
        if earlier is not None and earlier.owner is not None:
            raise SystemExit(
                f"Takeover is already running in this checkout (launcher pid {earlier.owner}). "
                f"Stop it first (Ctrl-C in its terminal, or: kill {earlier.owner})."
            )
        if earlier is not None and earlier.groups:
            self.out.say(
                "Takeover: an earlier `make run` left these running; stopping them: "
                + earlier.describe()
            )
            earlier.stop(GRACE_SECONDS)
        if earlier is not None and earlier.embedded_var_dir is not None:
            from takeover.embedded_db import stop_if_unused

            # It started the database and is gone: ours to stop (we start it afresh, so
            # that stopping it is ours again).
            stop_if_unused(earlier.embedded_var_dir)
        self.state_file.unlink(missing_ok=True)
        for port, name in (
            (self.port, "PORT"),
            (self.downstream_port, "DOWNSTREAM_PORT"),
            (self.mcp_port, "MCP_DEMO_PORT"),
        ):
            if not port_free(port):
                holder = listener(port)
                raise SystemExit(
                    f"Port {port} on 127.0.0.1 is taken ({name})"
                    + (f" by {holder}" if holder else "")
                    + f". Stop it, or choose another port: {name}=... make run"
                )

    def prepare(self):
        self.clear_the_way()
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "takeover.settings")
        self.out.say(
            "Takeover: starting the database "
            + ("(embedded PostgreSQL under var/pgdata)…" if self.embedded else "(DATABASE_URL)…")
        )
        import django

        from takeover.embedded_db import prepare

        # The embedded PostgreSQL, when DATABASE_URL is unset; children inherit its URL.
        self.started_database = prepare()
        if self.started_database:
            self.supervisor.stop_embedded_postgres_on_death(self.var_dir)
        django.setup()
        from django.conf import settings
        from django.core.management import call_command
        from django.db import connections

        from demo.setup import demo_setup

        self.out.say("Takeover: applying migrations…")
        call_command("migrate", interactive=False, verbosity=0)
        seeded = demo_setup(
            downstream_url=f"http://127.0.0.1:{self.downstream_port}",
            var_dir=self.var_dir,
            mcp_url=f"http://127.0.0.1:{self.mcp_port}/mcp",
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
        # The worker's series on a port of its own (the web's /metrics shows the web's only).
        env.setdefault("WORKER_METRICS_PORT", str(WORKER_METRICS_PORT))
        # Links in notifications point at the console this launcher serves (PORT), unless
        # CONSOLE_URL says otherwise (a proxy in front).
        env.setdefault("CONSOLE_URL", f"http://127.0.0.1:{self.port}")
        return env

    def children_for(self, broker: str) -> list[tuple[str, list[str]]]:
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
        # The demo tools verify Takeover's signature, as a real tool should: an agent calling
        # one directly, around approvals and the ledger, is refused (`hand_over_secrets`).
        downstream = f"--port {self.downstream_port} --require-signature"
        downstream += "" if self.verbose else " --quiet"
        py = sys.executable
        return [
            ("downstream", [py, str(ROOT / "demo/downstream.py"), *downstream.split()]),
            ("mcp", [py, "-m", "demo.mcp_server", "--port", str(self.mcp_port)]),
            ("web", [py, *web.split()]),
            ("worker", [py, *worker.split()]),
            ("beat", [py, *beat.split(), str(self.var_dir / "celerybeat-schedule")]),
        ]

    def agent(self, token_file: Path) -> tuple[str, list[str]]:
        argv = f"-m demo.agent --url http://127.0.0.1:{self.port}"
        argv += f" --downstream http://127.0.0.1:{self.downstream_port} --token-file"
        return "agent", [sys.executable, *argv.split(), str(token_file)]

    def start(self, name: str, argv: list[str], env: dict) -> None:
        def line(text: str) -> None:
            # Everything is read (a chatty child would block on a full pipe); noise is not shown.
            if text and (self.verbose or not NOISE.search(text)):
                self.out.line(name, text)

        self.children.append(self.supervisor.start(name, argv, env=env, on_line=line))

    # --- running ------------------------------------------------------------------------

    def on_signal(self, signum, _frame) -> None:
        if not self.stopping.is_set():
            self.out.say(f"\nTakeover: {signal.Signals(signum).name} received, stopping…")
        self.stopping.set()

    def hand_over_secrets(self, secrets: list[str]) -> bool:
        """Give the demo downstream the signing secrets of the tools registered at it: a
        real tool's owner would configure them from the registration's answer."""
        import httpx

        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while not port_open(self.downstream_port):
            if self.stopping.is_set() or self.dead_child() or time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        url = f"http://127.0.0.1:{self.downstream_port}/_control/secrets"
        with httpx.Client(timeout=5, trust_env=False) as client:
            for secret in secrets:
                client.post(url, json={"secret": secret}).raise_for_status()
        return True

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
            f"  MCP (any MCP client, with the agent token as Bearer): {url}/mcp",
            f"    the demo MCP server behind tool ticket_status: http://127.0.0.1:{self.mcp_port}/mcp",
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
            children = self.children_for(broker)
            # The downstream first, with its tools' secrets handed over, before any worker
            # can dispatch to it (a refused call would fail the action as rejected).
            self.start(*children[0], env)
            if not self.hand_over_secrets(seeded.tool_secrets):
                return 1
            for name, argv in children[1:]:
                self.start(name, argv, env)
            ready = self.wait_ready()
            if ready:
                self.banner(seeded)
                self.start(*self.agent(seeded.agent_token_file), env)
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
        say = self.say
        self.supervisor.stop(agents, AGENT_GRACE_SECONDS, say=say)
        self.supervisor.stop(others, GRACE_SECONDS, say=say)
        if self.started_database:
            from takeover.embedded_db import stop_if_unused

            self.out.say("Takeover: stopping the embedded PostgreSQL…")
            try:
                if not stop_if_unused(self.var_dir):
                    say("the embedded PostgreSQL is left running: another process uses it.")
            except Exception as exc:  # shutting down anyway; say what is left behind
                say(f"could not stop the embedded PostgreSQL: {exc}")
        self.supervisor.close()
        self.out.say("Takeover: stopped.")

    def say(self, text: str) -> None:
        self.out.say(f"Takeover: {text}")


def main() -> None:
    sys.exit(Launcher().run())


if __name__ == "__main__":
    main()
