"""MCP through Takeover, from outside (docs/mcp.md): the cut-stream soak (`make soak-mcp`,
`manage.py soak_mcp`) and the overhead of a read-only call (`make bench`, `manage.py
bench_mcp`). Both start the stack of `make bench` (gunicorn serving /mcp through its bridge,
Celery workers, beat) and the demo MCP server, and drive them with the official MCP SDK as
an unmodified client.

The soak: N calls (default 1,000) of an MCP tool of the demo MCP server registered in
Takeover (`update_ticket`, unsafe, read tool `get_ticket`), where EVERY call commits and
then cuts the stream. Each client re-issues its call, with the same arguments, until it gets
an answer that is not "in progress" (a cut or timed-out connection to Takeover counts as
no answer). Then: the upstream's own count of effects and of keys applied more than once,
and Takeover's account of each action (succeeded by reconciliation, handed to a person, or
anything else, which would be a failure of the invariant).

The overhead: the same read-only MCP tool (`search_tickets`) called directly on the demo
MCP server and through Takeover's /mcp (registered, declared `read_only`), by 4 concurrent
clients each making its calls one after another; p50 and p99 of each, and the difference.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field

import anyio
import httpx
import httpx2

from .loadgen import Stack, in_threads


def start_demo_mcp(stack: Stack) -> str:
    """The demo MCP server as a child of the stack's supervisor; its /mcp URL."""
    import sys

    found: list[str] = []
    ready = threading.Event()

    def line(text: str) -> None:
        if not ready.is_set() and "listening on" in text:
            found.append(text.strip().rsplit(" ", 1)[-1])
            ready.set()

    stack.procs["mcp"] = stack.supervisor.start(
        "mcp", [sys.executable, "-m", "demo.mcp_server", "--port", "0"], env=stack.env, on_line=line
    )
    if not ready.wait(30):
        raise RuntimeError("the demo MCP server did not start")
    return found[0]


def client(url: str, token: str | None, name: str = "bench-agent"):
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp_types import Implementation

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=30))
    return Client(
        streamable_http_client(url, http_client=http),
        client_info=Implementation(name=name, version="1"),
        mode="2026-07-28",
        cache=None,
    )


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


# --- the soak ---------------------------------------------------------------------------------


@dataclass
class SoakResult:
    calls: int = 0
    issued: int = 0  # tools/call requests sent, re-issues included
    no_answer: int = 0  # a cut or timed-out connection to Takeover
    in_progress: int = 0  # answered "still in progress": asked again
    final: dict = field(default_factory=dict)  # the state each call's last answer gave
    elapsed: float = 0.0


def soak(
    url: str, token: str, *, count: int, clients: int, cut_after: float = 0, say=print
) -> SoakResult:
    result = SoakResult()
    lock = threading.Lock()
    next_index = iter(range(count))

    def take() -> int | None:
        with lock:
            return next(next_index, None)

    async def one_client(n: int) -> None:
        async with client(url, token, name=f"soak-{n}") as c:
            while (i := take()) is not None:
                args = {"ticket_id": f"S-{i}", "status": f"closed-{i}", "note": "soak"}
                first = True
                while True:
                    with lock:
                        result.issued += 1
                    try:
                        # The first try of every call gives up after `cut_after` seconds and
                        # drops its connection: this side's stream is cut too, and the call
                        # must be re-issued to learn its outcome.
                        with anyio.fail_after(cut_after if first and cut_after else 30):
                            answer = await c.call_tool("update_ticket", args)
                    except (TimeoutError, httpx2.HTTPError, OSError):
                        first = False
                        with lock:
                            result.no_answer += 1
                        continue
                    state = (answer.structured_content or {}).get("state")
                    if state in ("queued", "dispatching", "unknown"):
                        with lock:
                            result.in_progress += 1
                        await anyio.sleep(0.2)
                        continue
                    with lock:
                        result.calls += 1
                        result.final[state] = result.final.get(state, 0) + 1
                    break
                if result.calls % 100 == 0:
                    say(f"   {result.calls} calls answered")

    started = time.monotonic()

    async def all_clients() -> None:
        async with anyio.create_task_group() as tg:
            for n in range(clients):
                tg.start_soon(one_client, n)

    anyio.run(all_clients)
    result.elapsed = time.monotonic() - started
    return result


def soak_accounting(tenant, stats: dict) -> dict:
    """Takeover's side: each action's end, how it got there, and whether anything guessed."""
    from django.db.models import Count

    from runs.models import Action, Attempt

    actions = Action.objects.filter(tenant=tenant)
    by_state = dict(actions.values_list("state").annotate(n=Count("id")))
    by_resolution = dict(
        actions.filter(state="succeeded").values_list("resolution").annotate(n=Count("id"))
    )
    # "None guessed": a succeeded action whose only attempt was cut must have a matching
    # read of the authoritative state behind it.
    reconciled_without_match = (
        actions.filter(state="succeeded", resolution="reconciled")
        .exclude(reconciliations__verdict__in=["match", "lookup_applied"])
        .count()
    )
    attempts = Attempt.objects.filter(action__tenant=tenant)
    sent_twice = attempts.values("action").annotate(n=Count("id")).filter(n__gt=1).count()
    return {
        "actions": actions.count(),
        "by_state": by_state,
        "by_resolution": by_resolution,
        "succeeded without a matching read": reconciled_without_match,
        "actions sent more than once": sent_twice,
        "upstream effects": stats["effects"],
        "upstream keys": stats["keys"],
        "upstream duplicates": stats["duplicates"],
        "upstream cut streams": stats["cut_streams"],
    }


# --- the overhead ------------------------------------------------------------------------------


def timed_calls(url: str, token: str | None, tool: str, args: dict, *, clients: int, calls: int):
    """`clients` threads, each with its own client and event loop, each making `calls`
    calls one after another; every call's latency in seconds (after 10 warm-up calls each)."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        async def go() -> None:
            async with client(url, token, name=f"bench-{n}") as c:
                for i in range(calls + 10):
                    started = time.perf_counter()
                    answer = await c.call_tool(tool, args)
                    took = time.perf_counter() - started
                    if answer.is_error:
                        with lock:
                            errors.append(str(answer.content)[:200])
                    elif i >= 10:
                        with lock:
                            latencies.append(took)

        anyio.run(go)

    in_threads(clients, worker)
    if errors:
        raise RuntimeError(f"{len(errors)} calls failed, e.g. {errors[0]}")
    return latencies


def summary(latencies: list[float]) -> dict:
    return {
        "n": len(latencies),
        "p50": percentile(latencies, 50) * 1000,
        "p99": percentile(latencies, 99) * 1000,
        "mean": statistics.fmean(latencies) * 1000,
    }


def stats_of(upstream_url: str) -> dict:
    base = upstream_url.rsplit("/mcp", 1)[0]
    return httpx.get(f"{base}/_control/stats", timeout=30).json()


def fault(upstream_url: str, spec: dict) -> None:
    base = upstream_url.rsplit("/mcp", 1)[0]
    httpx.post(f"{base}/_control/fault", json=spec, timeout=30).raise_for_status()


def new_label(label: str) -> str:
    return f"{label}-{uuid.uuid4().hex[:6]}"
