"""``manage.py bench_mcp`` (part of ``make bench``): what Takeover's /mcp adds to a read-only
MCP call.

In a database of its own (``<your database>_bench_mcp``), the stack of ``make bench`` and the
demo MCP server. The server's read-only ``search_tickets`` is called ``--calls`` times
(default 500) by each of ``--clients`` (default 4) official-SDK clients, one call after
another per client, directly on the demo MCP server and through Takeover's /mcp (where it is
registered as an MCP tool and declared ``read_only``, so the call is recorded as an action
and passes through in the web request's own thread), the two ways taking turns
(``--rounds``, default 5, each going first in every other round). Prints p50 and p99 of
each and what Takeover adds (the aim: p99 added ≤ 15 ms), and the CPU each call costs every
process either way: with more clients than CPUs, latency follows it. (bench/mcp.py)

``--profile DIR`` (needs py-spy) runs one more round through Takeover, left out of the
figures, with py-spy on every process and pg_stat_statements when the server loads it
(bench/profile.py), and prints where each process spent its CPU.
"""

import os
import sys

from bench import mcp, phases
from bench.own_database import InOwnDatabase
from bench.profile import OPTION_HELP, Profile, py_spy

from .bench import in_own_database
from .soak_mcp import mcp_stack, register

LABELS = {"mcp": "the upstream (demo MCP)", "web": "Takeover's web"}


class Command(InOwnDatabase):
    help = "Overhead of a read-only MCP call through Takeover against the upstream directly."
    knobs = {"calls": 500, "clients": 4, "rounds": 5, "profile": ""}
    helps = {
        "rounds": "turns the two ways take (the calls are shared among them)",
        "profile": OPTION_HELP,
    }

    def outer(self, argv, **opts):
        self.stdout.write("-- MCP overhead: a database of its own, migrating")
        sys.exit(in_own_database("bench_mcp", "bench_mcp", argv).returncode)

    def inner(self, **opts):
        from core.audit import SYSTEM
        from core.services import tool_declare

        out = self.stdout.write
        if opts["profile"]:
            py_spy()  # missing: say so before anything starts
        tenant, token, stack, upstream = mcp_stack("bench-mcp", env={}, say=out)
        try:
            tool = register(tenant, "search_tickets", upstream, "search_tickets", "status")
            tool_declare(tool, actor=SYSTEM, reason="a search changes nothing", effect="read_only")
            args = {"status": "open"}
            n, c, rounds = opts["calls"], opts["clients"], max(1, opts["rounds"])
            per = max(1, n // rounds)
            out(
                f"-- {c} clients × {per * rounds} calls each way, read-only search_tickets, "
                f"in {rounds} alternating rounds"
            )
            postmaster = phases.postmaster_pid()
            ways = {"directly": (upstream, None), "through": (f"{stack.url}/mcp", token)}
            latencies = {way: [] for way in ways}
            spent = {way: {} for way in ways}  # CPU seconds, by process
            profile = Profile(stack, opts["profile"]) if opts["profile"] else None
            # Each side warmed up first (a web process imports its URLs and starts the MCP
            # SDK on its first call): the CPU counted is the steady state's.
            for url, bearer in ways.values():
                mcp.timed_calls(url, bearer, "search_tickets", args, clients=c, calls=0)
            # The two ways take turns, each going first in every other round: a machine
            # whose speed drifts through the run slows both alike.
            for r in range(rounds):
                for way in list(ways)[:: -1 if r % 2 else 1]:
                    url, bearer = ways[way]
                    meter = phases.Meter(stack, postmaster)
                    latencies[way] += mcp.timed_calls(
                        url, bearer, "search_tickets", args, clients=c, calls=per
                    )
                    for part, seconds in meter.read()["cpu"].items():
                        spent[way][part] = spent[way].get(part, 0) + seconds
            if profile is not None:  # a round of its own, left out of the figures
                url, bearer = ways["through"]
                with profile:
                    mcp.timed_calls(url, bearer, "search_tickets", args, clients=c, calls=per)
            direct, through = (mcp.summary(latencies[way]) for way in ways)
            calls = rounds * c * (per + 10)  # each round's warm-up calls count for CPU
        finally:
            stack.stop()
        out("")
        out(f"read-only MCP call, {c} concurrent clients, {direct['n']} calls each way (ms)")
        out(f"  {'':<22}{'p50':>8}{'p99':>8}{'mean':>8}")
        for label, row in (("upstream directly", direct), ("through Takeover", through)):
            out(f"  {label:<22}{row['p50']:>8.1f}{row['p99']:>8.1f}{row['mean']:>8.1f}")
        added = {k: through[k] - direct[k] for k in ("p50", "p99", "mean")}
        row = f"{added['p50']:>8.1f}{added['p99']:>8.1f}{added['mean']:>8.1f}"
        out(f"  {'added by Takeover':<22}{row}")
        out(f"  aim: p99 added ≤ 15 ms: {'met' if added['p99'] <= 15 else 'NOT met'}")
        out(
            "  CPU per call, by process (ms; the machine has "
            f"{os.cpu_count()} CPUs for all of them)"
        )
        out(f"  {'':<24}{'directly':>10}{'through':>10}")
        parts = sorted(set().union(*spent.values()), key=lambda k: (k == "all of the above", k))
        for part in parts:  # the workers, beat and the HTTP demo tool idle, near enough
            a, b = (cpu.get(part, 0) / calls * 1000 for cpu in spent.values())
            out(f"  {LABELS.get(part, part):<24}{a:>10.2f}{b:>10.2f}")
        # A call's CPU is spent one process after another, so its latency is at least what it
        # costs them all; with more clients than CPUs each call also waits its turn, and the
        # latency is about clients ÷ CPUs × that.
        share = max(1.0, c / (os.cpu_count() or 1))
        a, b = (cpu["all of the above"] / calls * 1000 * share for cpu in spent.values())
        out(
            f"  bound by CPU, {c} clients on {os.cpu_count()} CPUs: latency ≈ {share:g} × all "
            f"of it = {a:.1f} ms directly, {b:.1f} ms through"
        )
        out(f"  load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        if profile is not None:
            out(f"\n-- where the CPU went, one more round through ({opts['profile']})")
            for line in profile.summary(c * (per + 10), "call"):
                out(line)
