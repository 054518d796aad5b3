"""``manage.py soak`` (``make soak``): the fault-injection soak, at scale.

In a database of its own (``<your database>_soak``, created afresh), the stack of ``make
bench`` runs ``--actions`` proposals (default 10,000) from 4 runtime threads, each on a target
of its own, with the fault mix of ``bench.soak.FAULT_MIX`` (commit then drop the
connection, commit then 500, answer after the timeout, 503 before committing, reject, and
reads that fail), while a worker is SIGKILLed every ``--kill-every`` seconds (default 10) and
restarted at once, like a pod. Then it waits until nothing is in progress (``--settle``
seconds at most) and prints the invariant table:

- duplicate effects: a target the tool mutated more than once (each action has its own);
- re-dispatch after unknown: an attempt after an attempt whose outcome was unknown;
- stuck: actions still queued, dispatching or unknown after the settle window;
- audit gaps: an action whose audit trail does not chain from its proposal to its state;
- 5xx: answers of 500 and above other than 503 (a 503 is the API's transient answer);
- the broker's highest depth;
- of the actions whose outcome was ever unknown, how many the tool's lookup settled and how
  many needed a person (left needs_human): the figure that tool declarations move.

`--prefix email` points the tool at the demo outbox (which deduplicates keys and answers
lookups) instead of the ticket system; `--effect` and `--lookup` declare it. A
resend that the declaration allowed is counted apart, not as a re-dispatch after unknown.

It exits 1 if any invariant is broken.
"""

import sys

from bench import loadgen, soak
from bench.own_database import InOwnDatabase

from .bench import in_own_database


class Command(InOwnDatabase):
    help = "Fault-injection soak with killed workers; prints the invariant table."
    knobs = {
        "actions": 10_000,
        "kill_every": 10.0,
        "wait": 0.0,
        "refuse_every": 0.0,
        "workers": 2,
        "settle": 900.0,
    }
    # The tool's declarations. The demo's ticket system is unsafe and answers no lookups;
    # its outbox (`--prefix email`) deduplicates keys and answers lookups.
    choices = {
        "prefix": ["tickets", "email"],
        "effect": ["unsafe", "idempotent", "read_only"],
        "kill": ["worker", "web"],
    }
    switches = ("no_faults", "lookup")
    helps = {
        "refuse_every": "0: never",
        "wait": "seconds each proposal waits for its outcome (0: answered at once); 5 or more "
        "and its own request dispatches it",
        "kill": "what is SIGKILLed every --kill-every seconds: a Celery worker, or one of "
        "gunicorn's processes",
    }

    def outer(self, argv, **opts):
        sys.exit(in_own_database("soak", "soak", argv, say=self.stdout.write).returncode)

    def inner(self, **opts):
        import logging

        import httpx

        logging.getLogger("httpx").setLevel(logging.WARNING)
        out = self.stdout.write
        tenant, token, stack = loadgen.tenant_stack(
            "soak",
            workers=opts["workers"],
            timeout_seconds=2,
            say=out,
            prefix=opts["prefix"],
            effect=opts["effect"],
            lookup=opts["lookup"],
        )
        try:
            agent = loadgen.Agent(stack.url, token, tenant.slug)
            out(
                f"-- {opts['actions']} actions, a {opts['kill']} process SIGKILLed every "
                f"{opts['kill_every']} s"
                + (", no faults" if opts["no_faults"] else ", with the fault mix")
                + (f", each waiting up to {opts['wait']:g} s" if opts["wait"] else "")
            )
            result = soak.drive(
                stack,
                agent,
                count=opts["actions"],
                tool="update_ticket",
                faults=not opts["no_faults"],
                kill_every=opts["kill_every"] or None,
                kill=opts["kill"],
                wait=opts["wait"],
                refuse_every=opts["refuse_every"] or None,
                settle_timeout=opts["settle"],
                say=out,
                tool_prefix=opts["prefix"],
            )
            stats = httpx.get(f"{stack.downstream_url}/_control/stats", timeout=60).json()
        finally:
            stack.stop()
        table = soak.invariants(tenant, stats)
        server_errors = sum(
            n for code, n in result.statuses.items() if isinstance(code, int) and code >= 500
        )
        unavailable = result.statuses.get(503, 0)
        broken = {
            "duplicate effects (a target mutated twice)": table[
                "duplicate effects (a target mutated twice)"
            ],
            "re-dispatch after unknown": table["re-dispatch after unknown"],
            "stuck (queued, dispatching, unknown)": table["stuck (queued, dispatching, unknown)"],
            "audit gaps": table["audit gaps"],
            "5xx other than 503": server_errors - unavailable,
        }
        out("")
        out(
            f"{result.proposed} actions proposed in {result.elapsed - result.settle_seconds:.0f}"
            f" s; settled {result.settle_seconds:.0f} s later; {result.kills} {opts['kill']}"
            " processes killed"
        )
        out(
            f"  the tool: /{opts['prefix']}, declared effect={opts['effect']}, "
            f"lookup={str(opts['lookup']).lower()}"
        )
        out(f"  final states: {table['states']}")
        out(f"  tool: {sum(stats['faults_fired'].values())} faults fired {stats['faults_fired']}")
        out(f"  answers: {result.statuses}")
        width = max(map(len, broken))
        for label, value in broken.items():
            out(f"  {label:<{width}}  {value:>6}  {'ok' if value == 0 else 'BROKEN'}")
        out(f"  {'503 (transient, retried)':<{width}}  {unavailable:>6}")
        out(f"  {'broker depth, highest':<{width}}  {result.max_depth:>6}")
        received = table["keys received more than once"]
        out(f"  {'keys received more than once':<{width}}  {received:>6}")
        out(f"  {'declared resends':<{width}}  {table['declared resends']:>6}")
        unknowns, person = table["unknown outcomes"], table["unknowns that needed a person"]
        share = f"{person / unknowns:.1%}" if unknowns else "-"
        out(f"  {'unknown outcomes':<{width}}  {unknowns:>6}")
        out(
            f"  {'  settled by the tool' + chr(39) + 's lookup':<{width}}  "
            f"{table['unknowns settled by lookup']:>6}"
        )
        out(f"  {'  needed a person (needs_human)':<{width}}  {person:>6}  {share}")
        if any(broken.values()):
            sys.exit(1)
