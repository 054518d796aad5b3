"""The DBOS anchor of `make bench`: DBOS Transact (the optional `bench` extra,
`pip install -e '.[bench]'`), one workflow with one step, in process, no HTTP hop, driven
like Takeover's effects phase: `--clients` synchronous threads, each starting a workflow under
an id of its own (the key), awaiting its result, then starting the next. Then the same ids
again (DBOS's dedup pass: the recorded result, nothing re-run), like Takeover's ledger hits.

Run by bench/management/commands/bench.py in a child process (DBOS is a process-wide
singleton) with the URL of a fresh database on the same server:

    python -m bench.dbos_anchor --url postgresql://... --effects 2000 --clients 4

It prints one line `ANCHOR_JSON {...}`: effects/s, write transactions per effect (xids
assigned on the server during the phase), latency p50/p99, CPU per effect (this process and,
with `--postmaster`, PostgreSQL's). The step is a local function that never fails (applies
the effect to a dict): the anchor gets no tool hop at all, Takeover's tool is an HTTP server.
"""

import argparse
import json
import os
import sys
import threading
import time
import uuid

from bench.loadgen import cpu_seconds, in_threads, percentile, server_cpu_seconds, xmax


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--effects", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--postmaster", type=int, default=0)
    parser.add_argument("--history", type=int, default=0)
    opts = parser.parse_args(argv)

    import logging

    from dbos import DBOS, DBOSConfig, SetWorkflowID

    logging.getLogger("dbos").setLevel(logging.WARNING)
    url = opts.url
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    config: DBOSConfig = {
        "name": "takeover-anchor",
        "system_database_url": url,
        "run_admin_server": False,
        "log_level": "WARNING",
    }
    DBOS(config=config)

    applied: dict[str, dict] = {}
    lock = threading.Lock()

    @DBOS.step()
    def apply_effect(target: str, desired: dict) -> dict:
        with lock:
            record = applied.setdefault(target, {"version": 0})
            record.update(desired)
            record["version"] += 1
            return dict(record)

    @DBOS.workflow()
    def effect(target: str, desired: dict) -> dict:
        return apply_effect(target, desired)

    DBOS.launch()

    def cpu() -> float:
        server = server_cpu_seconds(opts.postmaster) if opts.postmaster else 0.0
        return cpu_seconds([os.getpid()]) + server

    def drive(count: int, prefix: str) -> list[float]:
        latencies: list[list[float]] = [[] for _ in range(opts.clients)]

        def share(t):
            for i in range(t, count, opts.clients):
                started = time.monotonic()
                with SetWorkflowID(f"{prefix}-{i}"):
                    handle = DBOS.start_workflow(effect, f"ticket:{prefix}-{i}", {"status": "done"})
                handle.get_result()
                latencies[t].append(time.monotonic() - started)

        in_threads(opts.clients, share)
        return [x for lat in latencies for x in lat]

    drive(200, f"warm-{uuid.uuid4().hex[:6]}")
    if opts.history:  # a past, as Takeover's phase has one (bench/history.py)
        import psycopg

        from bench import history

        with psycopg.connect(opts.url, autocommit=True) as conn:
            copies = history.dbos(conn, opts.history)
        print(f"-- a past: the warm-up's workflows copied {copies} times", flush=True)
        drive(40, f"rewarm-{uuid.uuid4().hex[:6]}")
    prefix = f"anchor-{uuid.uuid4().hex[:6]}"
    x0, c0, t0 = xmax(opts.url), cpu(), time.monotonic()
    latencies = drive(opts.effects, prefix)
    elapsed = time.monotonic() - t0
    c1, x1 = cpu(), xmax(opts.url)
    if len(applied) != opts.effects + 200 + (40 if opts.history else 0):
        raise SystemExit(f"the anchor applied {len(applied)} effects")
    t0 = time.monotonic()
    drive(opts.effects, prefix)  # the dedup pass: the same workflow ids again
    dedup = opts.effects / (time.monotonic() - t0)
    if any(r["version"] != 1 for r in applied.values()):
        raise SystemExit("the dedup pass applied an effect twice")
    n = opts.effects
    print(
        "ANCHOR_JSON "
        + json.dumps(
            {
                "effects_per_second": n / elapsed,
                "dedup_per_second": dedup,
                "xids_per_effect": (x1 - x0 - 1) / n,
                "p50_ms": percentile(latencies, 0.5) * 1000,
                "p99_ms": percentile(latencies, 0.99) * 1000,
                "cpu_ms": (c1 - c0) / n * 1000,
            }
        )
    )
    sys.stdout.flush()
    DBOS.destroy()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
