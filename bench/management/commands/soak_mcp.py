"""``manage.py soak_mcp`` (``make soak-mcp``): the cut-stream soak of MCP through Takeover.

In a database of its own (``<your database>_soak_mcp``, created afresh), the stack of ``make
bench`` and the demo MCP server; Takeover registers the server's ``update_ticket`` (unsafe,
read tool ``get_ticket``), and the server is told to commit and then cut the stream on
EVERY call. ``--calls`` calls (default 1,000) from ``--clients`` MCP clients (default 8, the
official SDK), each re-issued with the same arguments until it gets an answer. Then it
prints the upstream's effects and duplicates and Takeover's account of every action, and
exits 1 unless: exactly one effect per call, no duplicate, no action sent twice, every
action succeeded by reconciliation (a matching read) or handed to a person, none guessed.
(bench/mcp.py)
"""

import logging
import sys
import tempfile
from pathlib import Path

from django.db import connection

from bench import mcp
from bench.loadgen import Stack
from bench.own_database import InOwnDatabase

from .bench import in_own_database
from .bench_queue import database_url


def mcp_stack(label: str, *, env: dict, say) -> tuple:
    """A fresh tenant and agent, a started stack and the demo MCP server: (tenant, token,
    stack, upstream /mcp URL). The caller stops the stack. The MCP clients' libraries log
    warnings only (a line per request otherwise)."""
    from core.audit import SYSTEM
    from core.services import principal_create, tenant_create

    for name in ("httpx", "httpx2", "mcp"):
        logging.getLogger(name).setLevel(logging.WARNING)
    tenant = tenant_create(slug=mcp.new_label(label), actor=SYSTEM)
    _principal, token = principal_create(tenant=tenant, name=f"{label}-agent", actor=SYSTEM)
    work_dir = Path(tempfile.mkdtemp(prefix=f"takeover-{label}-"))
    s = connection.settings_dict
    stack = Stack(database_url(s, s["NAME"]), work_dir, workers=2, web_threads=16, env_extra=env)
    say(f"-- starting the stack and the demo MCP server (logs in {work_dir})")
    stack.start()
    try:
        upstream = mcp.start_demo_mcp(stack)
    except BaseException:
        stack.stop()
        raise
    return tenant, token, stack, upstream


def register(tenant, name, upstream_url, upstream_tool, target_argument, **options):
    from core.audit import SYSTEM
    from runs.mcp_tools import register_listed

    return register_listed(
        tenant=tenant,
        name=name,
        base_url=upstream_url,
        mcp={"tool": upstream_tool, "target_argument": target_argument, "read_tool": "get_ticket"},
        actor=SYSTEM,
        **options,
    )


class Command(InOwnDatabase):
    help = "MCP cut-stream soak: N calls, each cut after commit; prints effects and settlement."
    knobs = {"calls": 1000, "clients": 8, "settle": 300.0, "client_cut": 0.05}
    helps = {
        "client_cut": "the first try of each call drops its connection after this many seconds "
        "(0: never)"
    }

    def outer(self, argv, **opts):
        self.stdout.write("-- soak database: migrating")
        sys.exit(in_own_database("soak_mcp", "soak_mcp", argv).returncode)

    def inner(self, **opts):
        import time

        from runs.models import Action

        out = self.stdout.write
        env = {
            # Answer "in progress" after 2 s, so that slow reconciliations are re-issued too.
            "MCP_CALL_WAIT_SECONDS": "2",
            "WAIT_MAX_PER_PRINCIPAL": "16",
            "WAIT_MAX_PER_PROCESS": "16",
        }
        tenant, token, stack, upstream = mcp_stack("soak-mcp", env=env, say=out)
        try:
            register(tenant, "update_ticket", upstream, "update_ticket", "ticket_id")
            mcp.fault(upstream, {"mode": "cut_after_commit", "count": -1})
            out(
                f"-- {opts['calls']} calls from {opts['clients']} MCP clients; the upstream "
                "commits and then cuts the stream on every one; each client drops its own "
                f"first try after {opts['client_cut']} s"
            )
            result = mcp.soak(
                f"{stack.url}/mcp",
                token,
                count=opts["calls"],
                clients=opts["clients"],
                cut_after=opts["client_cut"],
                say=out,
            )
            deadline = time.monotonic() + opts["settle"]
            in_progress = ("queued", "dispatching", "unknown")
            while (
                Action.objects.filter(tenant=tenant, state__in=in_progress).exists()
                and time.monotonic() < deadline
            ):
                time.sleep(1)
            stats = mcp.stats_of(upstream)
        finally:
            stack.stop()
        table = mcp.soak_accounting(tenant, stats)
        by_state = table["by_state"]
        settled = by_state.get("succeeded", 0) + by_state.get("needs_human", 0)
        reconciled = table["by_resolution"].get("reconciled", 0)
        checks = {
            "upstream effects": (table["upstream effects"], opts["calls"]),
            "upstream keys applied twice": (table["upstream duplicates"], 0),
            "actions": (table["actions"], opts["calls"]),
            "actions sent more than once": (table["actions sent more than once"], 0),
            "succeeded without a matching read": (table["succeeded without a matching read"], 0),
            "succeeded (reconciled) + handed to a person": (settled, opts["calls"]),
        }
        out("")
        out(
            f"{result.calls} calls answered in {result.elapsed:.0f} s: {result.issued} "
            f"tools/call requests ({result.issued - result.calls} re-issues: "
            f"{result.in_progress} 'in progress', {result.no_answer} without an answer)"
        )
        out(f"  answers: {result.final}")
        out(f"  upstream: {stats}")
        out(f"  actions: {by_state}; succeeded by {table['by_resolution']}")
        out(f"  reconciled through the read tool: {reconciled}")
        width = max(map(len, checks))
        broken = False
        for label, (value, wanted) in checks.items():
            ok = value == wanted
            broken |= not ok
            out(f"  {label:<{width}}  {value:>6}  (want {wanted})  {'ok' if ok else 'BROKEN'}")
        if broken:
            sys.exit(1)
