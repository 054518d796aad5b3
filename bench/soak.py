"""The soak's load: proposals under the fault mix while workers are killed, and the invariants
checked afterwards (`make soak`, bench/management/commands/soak.py; the engine tests in
tests/runs/test_queue_at_scale.py run a smaller one).

`drive()` proposes, each action on a target of its own, from several runtime threads of an
`Agent`, arming the demo downstream's faults before each proposal that draws one, SIGKILLing
a worker of the `Stack` every so often (restarted at once, like a pod) and optionally
restarting PostgreSQL halfway; then it waits until nothing is in progress. `invariants()`
reads the database and the tool's own counters: duplicates, re-dispatch after unknown,
stuck actions, audit gaps.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from dataclasses import dataclass, field

import httpx

from .loadgen import Agent, DepthWatch, Stack, in_threads

# (name, share, fault rules). Everything else goes through cleanly. Each action has a target
# of its own, so a rule fires for exactly that action.
FAULT_MIX = [
    # applied, then the connection is reset: unknown → reconciled (match)
    ("drop_after_commit", 0.05, [{"mode": "drop_after_commit"}]),
    # applied, then 500: unknown → reconciled
    ("error_after_commit", 0.05, [{"mode": "error_after_commit"}]),
    # applied, answered after the tool's timeout: unknown → reconciled
    ("slow_after_commit", 0.02, [{"mode": "slow_after_commit", "seconds": 3}]),
    # not applied, 503: unknown → the target does not exist → needs_human
    ("error_before_commit", 0.03, [{"mode": "error_before_commit"}]),
    # 422: failed, rejected
    ("reject", 0.03, [{"mode": "reject"}]),
    # applied, 500, and the first reconciliation's three reads fail: unknown, retried later
    (
        "read_fails",
        0.02,
        [{"mode": "error_after_commit"}, {"mode": "error_on_read", "times": 3}],
    ),
]


def pick_fault(rng) -> tuple[str, list] | None:
    roll = rng.random()
    for name, share, rules in FAULT_MIX:
        if roll < share:
            return name, rules
        roll -= share
    return None


@dataclass
class LoadResult:
    proposed: int = 0
    statuses: dict = field(default_factory=dict)
    latencies: list = field(default_factory=list)
    kills: int = 0
    refusals: int = 0
    db_restarts: int = 0
    max_depth: int = 0
    open_after: int = 0
    settle_seconds: float = 0.0
    elapsed: float = 0.0


def drive(
    stack: Stack,
    agent: Agent,
    *,
    count: int,
    tool: str,
    threads: int = 4,
    faults: bool = True,
    kill_every: float | None = None,
    kill: str = "worker",
    wait: float = 0,
    refuse_every: float | None = None,
    restart_db=None,
    kill_while_settling: bool = False,
    settle_timeout: float = 600,
    seed: int = 7,
    say=print,
    tool_prefix: str = "tickets",
) -> LoadResult:
    """Propose `count` actions (each on a target of its own) from `threads` runtimes, with
    the fault mix, SIGKILLing a worker every `kill_every` seconds (it restarts at once, like
    a pod; `kill="web"`: one of gunicorn's processes, which its master replaces), and once
    calling `restart_db` halfway; each proposal waits up to `wait` seconds for its outcome
    (long enough for the whole dispatch, its own request dispatches it); then wait until
    nothing is in progress (the killing stops when the proposals end, unless
    `kill_while_settling`). A 503 is
    retried with the same key after Retry-After, as a runtime should."""
    import random
    from collections import Counter

    from django.db import InterfaceError, OperationalError, connection

    from runs.models import Action
    from runs.states import IN_PROGRESS

    rng = random.Random(seed)
    plan = [pick_fault(rng) if faults else None for _ in range(count)]
    result = LoadResult()
    statuses = Counter()
    stop = threading.Event()
    prefix = uuid.uuid4().hex[:8]
    control = f"{stack.downstream_url}/_control/faults"
    half = threading.Event()

    proposing = threading.Event()
    proposing.set()

    def chaos():
        next_kill = time.monotonic() + (kill_every or 1e9)
        next_refuse = time.monotonic() + (refuse_every or 1e9)
        while not stop.wait(0.2):
            now = time.monotonic()
            if now >= next_kill and (proposing.is_set() or kill_while_settling):
                if kill == "web":
                    stack.kill_web_process(rng)
                else:
                    i = rng.randrange(stack.workers)
                    stack.kill_worker(i)
                    stack.start_worker(i)
                result.kills += 1
                next_kill = now + kill_every
            if now >= next_refuse:
                with contextlib.suppress(httpx.HTTPError):
                    httpx.post(control, json={"mode": "refuse", "seconds": 1.0}, timeout=5)
                    result.refusals += 1
                next_refuse = now + refuse_every
            if restart_db is not None and half.is_set() and not result.db_restarts:
                say("-- restarting PostgreSQL")
                restart_db()
                result.db_restarts += 1

    def propose_share(t: int) -> None:
        run_id = retrying(agent.start_run)
        for i in range(t, count, threads):
            if i >= count // 2:
                half.set()
            target = f"soak-{prefix}-{i}"
            for rule in (plan[i] or (None, []))[1]:
                body = {**rule, "target": target, "prefix": tool_prefix}
                retrying(
                    lambda body=body: httpx.post(control, json=body, timeout=10).raise_for_status()
                )
            key = f"soak-{prefix}-{i}"
            while True:
                started = time.monotonic()
                try:
                    response = agent.propose(
                        run_id,
                        key,
                        wait=wait,
                        tool=tool,
                        target=target,
                        desired_state={"status": "done", "n": i},
                    )
                except httpx.TransportError:
                    statuses["connection error"] += 1
                    time.sleep(0.5)
                    continue
                result.latencies.append(time.monotonic() - started)
                statuses[response.status_code] += 1
                if response.status_code == 503:
                    time.sleep(float(response.headers.get("Retry-After", 1)))
                    continue
                break
            if response.status_code not in (200, 201):
                raise RuntimeError(f"propose answered {response.status_code}: {response.text}")
            result.proposed += 1
            if result.proposed % 1000 == 0:
                say(f"   {result.proposed} proposed")

    started = time.monotonic()
    chaos_thread = threading.Thread(target=chaos, daemon=True)
    with DepthWatch(stack) as depth:
        chaos_thread.start()
        try:
            in_threads(threads, propose_share)
            proposing.clear()
            settle_start = time.monotonic()
            deadline = settle_start + settle_timeout
            while True:
                try:
                    open_now = Action.objects.filter(
                        tenant__slug=agent.tenant, state__in=IN_PROGRESS
                    ).count()
                except (OperationalError, InterfaceError):  # the database restarted
                    connection.close()
                    time.sleep(1)
                    continue
                if not open_now or time.monotonic() > deadline:
                    break
                time.sleep(1)
            result.open_after = open_now
            result.settle_seconds = time.monotonic() - settle_start
        finally:
            stop.set()
            chaos_thread.join(30)
        result.max_depth = depth.max
    result.elapsed = time.monotonic() - started
    result.statuses = dict(statuses)
    return result


def retrying(fn, attempts: int = 60):
    """Call fn through a database restart: 503s and refused connections are retried."""
    for attempt in range(attempts):
        try:
            return fn()
        except (httpx.TransportError, httpx.HTTPStatusError) as exc:
            status = getattr(getattr(exc, "response", None), "status_code", 503)
            if status != 503 or attempt == attempts - 1:
                raise
            time.sleep(0.5)
    return None


def invariants(tenant, downstream_stats: dict) -> dict:
    """The soak's table, from the database and the tool's own counters."""
    from collections import Counter, defaultdict

    from django.db.models import Min

    from core.models import AuditEvent
    from runs.models import Action, Attempt
    from runs.states import IN_PROGRESS, ActionState

    actions = dict(Action.objects.filter(tenant=tenant).values_list("pk", "state"))
    keys = dict(Action.objects.filter(tenant=tenant).values_list("idempotency_key", "target"))
    received = downstream_stats["effects_received"]
    mutations = Counter()
    for prefix_counts in downstream_stats["mutations"].values():
        mutations.update(prefix_counts)
    # Every action of a soak has a target of its own: more than one mutation is a duplicate.
    duplicates = sum(1 for key, target in keys.items() if mutations.get(target, 0) > 1)
    over_received = sum(1 for key in keys if received.get(key, 0) > 1)
    # A resend that the tool's declaration allowed is not a re-dispatch: it says
    # so on the attempt, with the declaration. Anything else after an unknown attempt is.
    after_unknown = (
        Attempt.objects.filter(action__tenant=tenant, outcome="unknown")
        .values("action_id")
        .annotate(first=Min("number"))
    )
    first_unknown = {row["action_id"]: row["first"] for row in after_unknown}
    later = Attempt.objects.filter(action_id__in=first_unknown).values_list(
        "action_id", "number", "kind", "declaration"
    )
    redispatch = len(
        {
            action_id
            for action_id, number, kind, declared in later
            if number > first_unknown[action_id]
            and not (kind == "resend" and (declared or {}).get("effect") in RESENDABLE)
        }
    )
    resends = Attempt.objects.filter(action__tenant=tenant, kind="resend").count()
    stuck = sum(1 for state in actions.values() if state in IN_PROGRESS)
    # The figure the declarations are about: of the actions whose outcome was ever unknown, how many
    # needed a person (still needs_human: the soak has no operators).
    unknowns = set(first_unknown)
    needed_person = sum(1 for pk in unknowns if actions.get(pk) == "needs_human")
    by_lookup = (
        Action.objects.filter(
            pk__in=unknowns, state="succeeded", reconciliations__verdict="lookup_applied"
        )
        .distinct()
        .count()
    )

    # Every transition audited: per action, the audit events chain from the proposal's state
    # to the current one with no gap (each `before` is the previous `after`).
    chains = defaultdict(list)
    events = (
        AuditEvent.objects.filter(tenant=tenant, object_type="action")
        .order_by("at", "id")
        .values_list("object_id", "verb", "before", "after")
    )
    for object_id, verb, before, after in events.iterator(chunk_size=5000):
        if verb == "action.propose" or verb.removeprefix("action.") in ActionState.values:
            chains[object_id].append((verb, before, after))
    gaps = 0
    for pk, state in actions.items():
        chain = chains.get(str(pk), [])
        if not chain or chain[0][0] != "action.propose":
            gaps += 1
            continue
        current = chain[0][2]["state"]
        for _verb, before, after in chain[1:]:
            if (before or {}).get("state") != current:
                gaps += 1
                break
            current = after["state"]
        else:
            gaps += current != state
    return {
        "actions": len(actions),
        "states": dict(Counter(actions.values())),
        "duplicate effects (a target mutated twice)": duplicates,
        "keys received more than once": over_received,
        "re-dispatch after unknown": redispatch,
        "declared resends": resends,
        "stuck (queued, dispatching, unknown)": stuck,
        "audit gaps": gaps,
        "unknown outcomes": len(unknowns),
        "unknowns that needed a person": needed_person,
        "unknowns settled by lookup": by_lookup,
    }


RESENDABLE = {"idempotent", "read_only"}
