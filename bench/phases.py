"""The measured phases of `make bench` (bench/management/commands/bench.py), each against a
started `loadgen.Stack` through an `loadgen.Agent`:

- `effects`: synchronous clients. Each client proposes one effect (a key and a target of its
  own), awaits its outcome with `?wait=`, and only then proposes the next: the figure is the
  latency of one effect, end to end, as a runtime that needs the outcome sees it.
- `hits`: the same proposals again (same key, same intent): ledger hits, answered 200
  `replayed` without writing anything.
- `reconcile`: the tool applies every effect, then drops the connection without an answer
  (the demo downstream's `drop_after_commit` rule), so every action goes `unknown` and is
  reconciled by reading the authoritative state. Proposed without awaiting; the figure is
  unknowns reconciled per second.
- `Meter`: write transactions (xids assigned), WAL bytes and CPU seconds per process group
  between its construction and `read()`.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import httpx
from django.db import connection

from takeover.supervisor import process_groups

from . import loadgen


class BenchError(Exception):
    pass


def agents_for(stack, tenant, token, clients: int) -> list:
    """One agent per client: each client is a runtime with an identity of its own, as the
    server caps concurrent waits per principal (WAIT_MAX_PER_PRINCIPAL, per web process)."""
    from core.audit import SYSTEM
    from core.services import principal_create

    agents = [loadgen.Agent(stack.url, token, tenant.slug)]
    for i in range(1, clients):
        _principal, more = principal_create(tenant=tenant, name=f"bench-agent-{i}", actor=SYSTEM)
        agents.append(loadgen.Agent(stack.url, more, tenant.slug))
    return agents


def _propose(agent, run_id, key, target, wait=0):
    return agent.propose(
        run_id, key, wait, tool="update_ticket", target=target, desired_state={"status": "done"}
    )


def effects(agents, count: int, clients: int, one_request: bool = True):
    """`count` new effects from `clients` synchronous clients (propose, await, next), client
    t as `agents[t]`: in one request each (`POST ...?wait=30`, the proposal's answer held
    for its outcome), or, with `one_request=False`, a proposal answered at once and then
    `GET /actions/{id}?wait=`. Returns ([(key, target, action_id, seen at, client)],
    latencies of the proposal's answer, effect latencies)."""
    prefix = uuid.uuid4().hex[:8]

    def share(t):
        agent = agents[t % len(agents)]
        run_id = agent.start_run()
        mine, proposing, whole = [], [], []
        for i in range(t, count, clients):
            key, target = f"bench-{prefix}-{i}", f"ticket:{prefix}-{i}"
            started = time.monotonic()
            response = _propose(agent, run_id, key, target, 30 if one_request else 0)
            proposed = time.monotonic()
            if response.status_code != 201:
                raise BenchError(f"propose: {response.status_code} {response.text}")
            action = response.json()
            if action["state"] != "succeeded":
                action = agent.wait(action["id"])
            if action["state"] != "succeeded":
                raise BenchError(f"{action['id']} ended {action['state']}")
            proposing.append(proposed - started)
            whole.append(time.monotonic() - started)
            mine.append((key, target, action["id"], time.time(), t))
        agent.finish(run_id)
        return mine, proposing, whole

    results = loadgen.in_threads(clients, share)
    return (
        [x for mine, _, _ in results for x in mine],
        [x for _, lat, _ in results for x in lat],
        [x for _, _, lat in results for x in lat],
    )


def handoffs(keys) -> dict[str, list[float]]:
    """The wall time of each hand-off of the effects in `keys` (from `effects`), from the
    rows' own timestamps and the client's clock (one machine, one clock): proposal → claimed
    by a worker (0 when the proposing request claimed it itself), claimed → the tool's
    answer recorded, recorded → the client has the outcome."""
    from runs.models import Attempt

    seen = {action_id: at for _key, _target, action_id, at, _t in keys}
    rows = Attempt.objects.filter(action_id__in=list(seen), number=1).values_list(
        "action_id", "action__enqueued_at", "started_at", "finished_at"
    )
    out = {"proposed → claimed": [], "claimed → answered": [], "answered → client has it": []}
    for action_id, proposed, started, finished in rows:
        out["proposed → claimed"].append((started - proposed).total_seconds())
        out["claimed → answered"].append((finished - started).total_seconds())
        out["answered → client has it"].append(seen[str(action_id)] - finished.timestamp())
    return out


def hits(agents, keys, clients: int, count: int) -> list[float]:
    """`count` of the proposals in `keys` again, from a fresh running run each (a runtime
    retrying after a crash proposes from its new run with the same stable keys), each by the
    client (agent) that proposed it first. Every client repeats an equal share of its own
    (`keys` lists them client by client: a prefix would be the first clients' only)."""

    def share(t):
        agent = agents[t % len(agents)]
        run_id = agent.start_run()
        latencies = []
        mine = [k for k in keys if k[4] == t][: count // clients + (t < count % clients)]
        for key, target, *_ in mine:
            started = time.monotonic()
            response = _propose(agent, run_id, key, target)
            latencies.append(time.monotonic() - started)
            if response.status_code != 200 or not response.json()["replayed"]:
                raise BenchError(f"hit: {response.status_code} {response.text}")
        agent.finish(run_id)
        return latencies

    return [x for lat in loadgen.in_threads(clients, share) for x in lat]


def reconcile(stack, agents, count: int, clients: int, *, timeout: float = 600) -> dict:
    """`count` effects that the tool applies and then drops: every one goes unknown and is
    reconciled. Returns the figures (see the module docstring)."""
    from django.db.models import Count, Max, Min

    from runs.models import Action, Reconciliation
    from runs.states import IN_PROGRESS

    control = f"{stack.downstream_url}/_control/faults"
    httpx.post(
        control, json={"mode": "drop_after_commit", "times": count, "prefix": "tickets"}, timeout=10
    ).raise_for_status()
    prefix = uuid.uuid4().hex[:8]
    run_ids = []

    def share(t):
        agent = agents[t % len(agents)]
        run_id = agent.start_run()
        run_ids.append((agent, run_id))
        for i in range(t, count, clients):
            response = _propose(agent, run_id, f"rec-{prefix}-{i}", f"ticket:rec-{prefix}-{i}")
            if response.status_code != 201:
                raise BenchError(f"propose: {response.status_code} {response.text}")

    t0 = time.monotonic()
    loadgen.in_threads(clients, share)
    proposed = time.monotonic() - t0
    mine = Action.objects.filter(run_id__in=[run_id for _, run_id in run_ids])
    deadline = time.monotonic() + timeout
    while mine.filter(state__in=IN_PROGRESS).exists():
        if time.monotonic() > deadline:
            raise BenchError("reconciliation did not finish in time")
        time.sleep(0.05)
    elapsed = time.monotonic() - t0
    for agent, run_id in run_ids:
        agent.finish(run_id)
    httpx.delete(control, timeout=10)
    reconciled = mine.filter(state="succeeded", resolution="reconciled").count()
    if reconciled != count:
        states = dict(mine.values_list("state").annotate(n=Count("id")))
        raise BenchError(f"{reconciled} of {count} reconciled; states {states}")
    reads = Reconciliation.objects.filter(action__in=mine)
    window = reads.aggregate(first=Min("at"), last=Max("at"))
    span = (window["last"] - window["first"]).total_seconds() if window["first"] else 0
    return {
        "count": count,
        "elapsed": elapsed,
        "proposing": proposed,
        "per_second": count / elapsed,
        "reads_span": span,
    }


def wal_position() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_wal_lsn()")
        return cursor.fetchone()[0]


def wal_since(position: str) -> float:
    """Bytes of WAL the whole server wrote since `position`: every table's rows and index
    entries, and the full page images the first change to a page after a checkpoint adds."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", [position])
        return float(cursor.fetchone()[0])


class Meter:
    """xids, WAL and CPU consumed between construction and `read()`."""

    def __init__(self, stack, postmaster: int | None):
        self.stack = stack
        self.postmaster = postmaster
        self.xid0, self.wal0 = self._xmax(), wal_position()
        self.cpu0 = self._cpu()

    def _xmax(self) -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")
            return cursor.fetchone()[0]

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
            parts["postgresql"] = loadgen.server_cpu_seconds(self.postmaster)
        return parts

    def read(self) -> dict:
        xid1, wal = self._xmax(), wal_since(self.wal0)
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
