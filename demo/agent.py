"""The demo agent: what a real agent runtime does, through ``takeover_client`` and nothing else.

    python -m demo.agent --url http://127.0.0.1:8000 --token-file var/demo-agent.token

No Django, no database: the ``takeover_client`` package (``client/``), the living example of
it, with the principal's bearer token: ``start_run``/``claim``, ``run.propose`` with keys from
``idempotency_key``, ``outcome.wait`` and its typed outcomes, heartbeats, ``run.finish``. The
only other thing it talks to is the demo downstream's ``/_control`` API, and only to play
*the rest of the world*: a network that drops a response, a tool that times out after
committing, a colleague who edits the ticket at the same moment. A real runtime has no such
lever; the demo needs it so that a newcomer sees, within a minute, every state of the
lifecycle (docs/design.md, "The action lifecycle") in the console.

About every 3 seconds it either claims a replayed run (``POST /runs/claim``) or starts a new
one, whose ``config`` is the whole input: the trigger event, from which the plan of side
effects is derived deterministically (a ``random.Random`` seeded with the event id). Only
generated text (an e-mail's subject and body, a resolution note) is random each time. The
first nine runs are a fixed tour (``OPENING``) through every outcome; after that the
scenarios and faults are drawn at random.

Scenarios (``config["scenario"]``):

``ticket_triage`` (webhook ``ticket.created``)
    ``update_ticket`` sets status, priority and assignee, then ``search_tickets`` (declared
    ``read_only``: no key needed, no approval, never at risk in a replay) looks for the other
    open tickets.
``escalation`` (webhook ``customer.escalated``)
    ``update_ticket`` on 2–4 tickets of one customer.
``resolve`` (chat)
    ``update_ticket`` to ``solved``, then ``close_ticket``, which requires approval: the action
    waits in the approvals page. Sometimes the chat message carries an approval id (an old,
    already consumed one, or one that does not exist): the action is ``blocked``.
``guarded_update`` (workflow ``sla.breach``)
    Reads the ticket from the system of record and proposes with ``expected_version``; when a
    colleague edits the ticket in between, the tool answers 409 → ``version_conflict``.
``campaign`` (schedule)
    ``send_email`` to 4–8 recipients. The outbox is declared ``idempotent`` with ``lookup``:
    an e-mail whose answer was lost is settled by asking the outbox about its key, and one the
    outbox never received is sent again with the same key. The campaign id comes from the
    schedule's slot (the trigger), never from the clock at send time. Some campaign runs die
    part-way (an error with ``tools_called: ["send_email"]``, or ``null``, or no finish at
    all); since every e-mail went through Takeover under a stable key to a tool that applies
    a key once, the replay needs no force (unless the runtime could not say what it called),
    and shows the ledger at work: the recipients already sent come back ``replayed: true``,
    ``content_changed: true`` (the text was regenerated), and only the rest are sent.
    Sometimes the scheduler fires the same slot twice: every e-mail comes back replayed.
``weekly_report`` (api)
    Fails before calling any tool (``tools_called: []``): a replay needs no force.

Idempotency-Keys come from stable intent, never from generated text or the clock:
``f"{event_id}:{tool}:{normalized target}"``. So a retry after a lost response, a duplicate
delivery of the trigger, or a replay of the whole run proposes the *same* keys, and Takeover
answers with the existing action instead of a second effect.

Faults (fresh runs only; replays run clean): before about a third of the proposals the agent
asks the downstream for one of ``drop_after_commit`` / ``error_after_commit`` /
``slow_after_commit`` (→ unknown → reconciled to succeeded; for an e-mail, settled by the
outbox's lookup), ``reject`` (→ failed), ``refuse`` for half a second (→ not sent, then the
one safe retry), ``error_before_commit`` (nothing applied → for a ticket, needs_human with a
diff, or ``missing``; for an e-mail, the lookup says "never received" and the e-mail is sent
again, attempt 2, same key), or ``slow_after_commit`` plus an external write while the tool is
still answering (→ needs_human with a diff).

Bounded on purpose: at most a handful of actions are left waiting for a person (approvals,
needs_human, blocked) at any time; past that the agent picks faults that settle by
themselves. The client retries what is safe (a 503 with Retry-After, a refused connection);
when Takeover stays unavailable the agent backs off and carries on. SIGTERM or SIGINT: the current
run is finished as ``cancelled`` and the agent exits 0. An invalid token exits 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import signal
import sys
import threading
import time
import uuid
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from takeover_client import (
    ApiError,
    IdempotencyConflict,
    OutcomeError,
    Pending,
    Run,
    RunNotRunning,
    Takeover,
    Unauthenticated,
    Unavailable,
    idempotency_key,
)

IN_PROGRESS = {"queued", "dispatching", "unknown"}
TERMINAL = {"succeeded", "failed", "blocked"}
WAIT_SECONDS = 5  # per outcome.wait(); short, so that SIGTERM is honoured quickly
SETTLE_SECONDS = 25  # how long a run waits for one action before moving on

# How many actions the agent leaves for a person at any one time.
MAX_AWAITING_APPROVAL = 4
MAX_NEEDS_HUMAN = 5
MAX_BLOCKED_PER_10_MIN = 3

TICKETS = [f"T-{n}" for n in range(1001, 1041)]
CUSTOMERS = ["acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "tyrell"]
ASSIGNEES = ["ana", "bo", "chen", "dara", "eli"]
PEOPLE = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy"]
PEOPLE += ["mallory", "niaj", "olivia", "peggy", "rupert", "sybil", "trent", "victor", "walter"]
DOMAINS = ["example.com", "example.org", "example.net"]


class Stopped(Exception):
    """SIGTERM arrived; unwind and finish the current run as cancelled."""


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def short(identifier: str) -> str:
    return identifier[:8]


# --- the rest of the world ------------------------------------------------------------


class World:
    """The demo downstream's control API: the rest of the world, for the demo's sake."""

    def __init__(self, url: str) -> None:
        self.client = httpx.Client(base_url=url.rstrip("/"), timeout=5, trust_env=False)

    def _call(self, method: str, path: str, body: dict | None = None) -> Any:
        try:
            response = self.client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            log(f"demo downstream unreachable ({type(exc).__name__}); no fault this time")
            return None
        if response.status_code >= 400 and response.status_code != 404:
            log(f"demo downstream said {response.status_code} to {method} {path}")
            return None
        return response

    def fault(
        self, mode: str, prefix: str | None = None, target: str | None = None, **extra
    ) -> bool:
        body = {"mode": mode, **extra}
        if prefix is not None:  # `refuse` closes the whole port: no prefix, no target
            body.update(prefix=prefix, target=target)
        return self._call("POST", "/_control/faults", body) is not None

    def try_around_takeover(self) -> None:
        """Once, at start: call the ticket tool directly, as an agent routing around
        approvals and the ledger would. The tool verifies Takeover's signature and refuses."""
        body = {"action_id": "none", "tenant": "demo", "principal": "demo-agent"}
        try:
            response = self.client.post(
                "/tickets/effects", json=body, headers={"Idempotency-Key": "around-takeover"}
            )
        except httpx.HTTPError as exc:
            log(f"direct call to the tool failed ({type(exc).__name__})")
            return
        verdict = "refused" if response.status_code == 401 else "NOT refused"
        log(
            f"tried the ticket tool directly, around Takeover: {verdict} "
            f"({response.status_code} {response.text[:120]})"
        )

    def clear_faults(self) -> None:
        self._call("DELETE", "/_control/faults")

    def seed_tickets(self) -> None:
        """The ticket system has tickets before the agent arrives (only the missing ones are
        seeded: the downstream may have outlived an agent restart)."""
        for ticket in TICKETS:
            if self.read("tickets", ticket) is None:
                state = {"status": "new", "priority": "normal", "assignee": "unassigned"}
                body = {"prefix": "tickets", "target": ticket, "state": state}
                if self._call("POST", "/_control/seed", body) is None:
                    return

    def external_write(self, prefix: str, target: str, state: dict) -> bool:
        body = {"prefix": prefix, "target": target, "state": state}
        return self._call("POST", "/_control/external-write", body) is not None

    def read(self, prefix: str, target: str) -> tuple[dict, int] | None:
        """What the system holds, as the rest of the world sees it (the control API: the
        tool's own endpoints answer only calls signed by Takeover)."""
        response = self._call("GET", "/_control/records")
        record = (response.json().get(prefix) or {}).get(target) if response else None
        if record is None:
            return None
        return record["state"], record["version"]

    def mutations(self, prefix: str, target: str) -> int | None:
        response = self._call("GET", "/_control/stats")
        if response is None:
            return None
        return response.json()["mutations"].get(prefix, {}).get(target, 0)


# --- plans ---------------------------------------------------------------------------------


@dataclass
class Step:
    tool: str
    target: str
    key: str
    stable: dict  # the part of desired_state derived from the trigger
    generate: Any = None  # () -> dict: freshly generated fields (text), merged on each call
    expected_version_from_read: bool = False
    approval_id: str | None = None
    prefix: str = "tickets"

    def desired_state(self) -> dict:
        return {**self.stable, **(self.generate() if self.generate else {})}


def key_for(event_id: str, tool: str, target: str) -> str:
    """Stable intent: the trigger's id, the tool and the normalized target. Never the clock,
    never generated text."""
    return idempotency_key(event_id, tool, target)


def resolution_note() -> dict:
    return {
        "resolution_note": random.choice(
            [
                "Customer confirmed the fix; closing.",
                "Resolved after the config change; customer happy.",
                "Fixed in the latest release, confirmed by the customer.",
                "Workaround accepted by the customer; closing the ticket.",
            ]
        )
    }


def email_text(campaign: dict, recipient: str) -> dict:
    """What the model writes this time: different on every call, like a real one."""
    name = recipient.split("@", 1)[0].capitalize()
    subject = random.choice(
        [
            f"{name}, your renewal is coming up",
            f"A quick note about your renewal, {name}",
            f"{name}: don't lose your plan",
            f"Renewal reminder for {name}",
        ]
    )
    body = " ".join(
        [
            random.choice([f"Hi {name},", f"Hello {name},", f"Dear {name},"]),
            random.choice(
                [
                    "your subscription renews at the end of the month.",
                    "your plan is up for renewal soon.",
                    "we wanted to remind you that your renewal date is near.",
                ]
            ),
            random.choice(
                [
                    "Reply to this e-mail if anything should change.",
                    "Nothing to do if you are happy with it.",
                    f"Use code {random.randint(100, 999)} for a loyalty discount.",
                ]
            ),
        ]
    )
    return {"subject": subject, "body": body}


def plan(config: dict) -> list[Step]:
    """The side effects a run's input calls for. Deterministic in everything but text, so a
    replay proposes the same intents under the same keys."""
    scenario = config.get("scenario")
    event = config.get("event", {})
    rng = random.Random(event.get("id") or config.get("campaign", {}).get("id"))
    if scenario == "ticket_triage":
        ticket = event["ticket"]
        return [
            Step(
                "update_ticket",
                ticket,
                key_for(event["id"], "update_ticket", ticket),
                {
                    "status": "open",
                    "priority": rng.choice(["low", "normal", "high"]),
                    "assignee": rng.choice(ASSIGNEES),
                },
            ),
            # A read: declared read_only, so no approval and no ledger key (sent anyway).
            Step(
                "search_tickets",
                "open",
                key_for(event["id"], "search_tickets", "open"),
                {"status": "open"},
                prefix="search",
            ),
        ]
    if scenario == "escalation":
        return [
            Step(
                "update_ticket",
                ticket,
                key_for(event["id"], "update_ticket", ticket),
                {"priority": "urgent", "assignee": "tier2"},
            )
            for ticket in event["tickets"]
        ]
    if scenario == "resolve":
        ticket = event["ticket"]
        return [
            Step(
                "update_ticket",
                ticket,
                key_for(event["id"], "update_ticket", ticket),
                {"status": "solved"},
            ),
            Step(
                "close_ticket",
                ticket,
                key_for(event["id"], "close_ticket", ticket),
                {"status": "closed"},
                generate=resolution_note,
                approval_id=event.get("approval_id"),
            ),
        ]
    if scenario == "guarded_update":
        ticket = event["ticket"]
        return [
            Step(
                "update_ticket",
                ticket,
                key_for(event["id"], "update_ticket", ticket),
                {"status": "escalated", "priority": "urgent"},
                expected_version_from_read=True,
            )
        ]
    if scenario == "campaign":
        campaign = config["campaign"]
        return [
            Step(
                "send_email",
                recipient,
                key_for(campaign["id"], "send_email", recipient),
                {"campaign": campaign["id"]},
                generate=lambda r=recipient: email_text(campaign, r),
                prefix="email",
            )
            for recipient in config["recipients"]
        ]
    if scenario == "weekly_report":
        ticket = event["ticket"]
        return [
            Step(
                "update_ticket",
                ticket,
                key_for(event["id"], "update_ticket", ticket),
                {"status": "open", "label": "weekly-report"},
            )
        ]
    return []


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def event_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


# --- the agent ---------------------------------------------------------------------------


@dataclass
class Script:
    """What a fresh run would otherwise draw at random; the opening tour fixes it."""

    faults: list[str | None] | None = None  # per step; None: drawn at random
    crash_after: int | None = None  # steps done before the run dies
    crash: str | None = None  # "error" | "unknown" | "silent"
    retry_first: bool = False  # "lose" the first response and retry with the same key
    bogus_approval: bool = False  # the chat message carries an approval id
    double_fire: bool = False  # the scheduler delivers the last campaign's slot again


# The first runs after a start cover every state of the lifecycle, so that a newcomer sees
# them all within a minute; after the tour, choices are random (and bounded).
OPENING = [
    ("ticket_triage", Script(faults=[None], retry_first=True)),  # succeeded; retry → replayed
    ("resolve", Script(faults=[None, None])),  # close_ticket waits for an approver
    # unknown → reconciled to succeeded; a 503 that applied nothing → needs_human with a diff
    ("escalation", Script(faults=["drop_after_commit", "error_before_commit", None, None])),
    ("guarded_update", Script(faults=["external_write_first"])),  # version_conflict
    # dies part-way; the first e-mail's answer is lost (settled by the outbox's lookup), the
    # second never arrived (the lookup says so; sent again, attempt 2, same key)
    (
        "campaign",
        Script(
            faults=["drop_after_commit", "error_before_commit"] + [None] * 6,
            crash_after=2,
            crash="error",
        ),
    ),
    ("campaign", Script(faults=[None] * 8, double_fire=True)),  # the same slot: ledger hits
    ("resolve", Script(faults=[None, None], bogus_approval=True)),  # blocked
    ("ticket_triage", Script(faults=["slow_then_external"])),  # in-flight edit → needs_human
    ("weekly_report", Script()),  # fails before any tool: replayable without force
]

# Faults that leave a rule pending in the downstream until an effect request consumes it.
RULES = {"drop_after_commit", "error_after_commit", "slow_after_commit", "reject"}
RULES |= {"error_before_commit", "slow_then_external"}

NOTES = {
    "drop_after_commit": "the tool applied it, then the connection dropped",
    "error_after_commit": "the tool applied it, then answered 500",
    "slow_after_commit": "the tool applied it, then answered too late",
    "reject": "the tool rejected it",
    "refuse": "the tool refused connections for 0.5 s",
    "error_before_commit": "the tool answered 503 and applied nothing",
    "slow_then_external": "the tool applied it and answered too late; meanwhile the "
    "customer changed the ticket",
    "external_write_first": "a colleague edited the ticket after the agent read it",
}


@dataclass
class RunState:
    run: Run
    replay: bool
    script: Script = field(default_factory=Script)
    proposed: list[dict] = field(default_factory=list)  # final views of this run's actions

    @property
    def id(self) -> str:
        return self.run.id

    def tools_called(self) -> list[str]:
        # The tools whose effects went through the gateway (blocked and still-waiting ones
        # were not called); a ledger hit counts, conservatively.
        return sorted(
            {a["tool"] for a in self.proposed if a["state"] not in {"blocked", "awaiting_approval"}}
        )


class Agent:
    def __init__(self, client: Takeover, world: World, stop: threading.Event) -> None:
        self.client = client
        self.world = world
        self.stop = stop
        self.tracked: dict[str, dict] = {}  # id → last view, for actions left to a person
        self.blocked_at: deque[float] = deque()
        self.consumed_approvals: deque[str] = deque(maxlen=5)
        self.last_campaign: dict | None = None
        self.last_refresh = 0.0
        self.runs = 0
        self.outcomes: Counter[str] = Counter()

    # the main loop

    def loop(self) -> None:
        log("demo agent started: one run every few seconds; replays are claimed as they come")
        self.world.seed_tickets()
        backoff = 1.0
        while not self.stop.is_set():
            try:
                self.refresh_tracked()
                run = self.client.claim()
                if run is not None:
                    log(
                        f"run {short(run.id)} claimed: a replay of {short(run.replay_of)} "
                        f"({run.config.get('scenario')}, attempt {run.data.attempts})"
                    )
                    self.execute(RunState(run, replay=True))
                else:
                    self.start_new()
                backoff = 1.0
                self.stop.wait(random.uniform(2, 4))
            except Unavailable as exc:
                log(f"Takeover unavailable ({exc}); backing off {backoff:.0f} s")
                self.stop.wait(backoff)
                backoff = min(backoff * 2, 30)
            except Stopped:
                break

    def start_new(self) -> None:
        scenario, script = OPENING[self.runs] if self.runs < len(OPENING) else (None, Script())
        trigger, config = self.new_config(scenario, script)
        try:
            run = self.client.start_run(trigger, config)
        except ApiError as exc:
            log(f"could not start a run: {exc}")
            return
        self.runs += 1
        log(f"run {short(run.id)} started: {trigger} {config['scenario']}")
        self.execute(RunState(run, replay=False, script=script))
        if self.runs % 25 == 0:
            summary = ", ".join(f"{k} {v}" for k, v in self.outcomes.most_common())
            log(f"{self.runs} runs so far; actions: {summary}")

    def new_config(self, scenario: str | None, script: Script) -> tuple[str, dict]:
        awaiting, _ = self.open_counts()
        weights = {
            "ticket_triage": 30,
            "escalation": 15,
            "resolve": 15 if awaiting < MAX_AWAITING_APPROVAL else 0,
            "guarded_update": 15,
            "campaign": 15,
            "weekly_report": 5,
        }
        scenario = scenario or random.choices(list(weights), list(weights.values()))[0]
        if scenario == "ticket_triage":
            event = {
                "id": event_id("evt"),
                "type": "ticket.created",
                "ticket": random.choice(TICKETS),
                "customer": random.choice(CUSTOMERS),
            }
            return "webhook", {"scenario": scenario, "event": event}
        if scenario == "escalation":
            event = {
                "id": event_id("evt"),
                "type": "customer.escalated",
                "customer": random.choice(CUSTOMERS),
                "tickets": random.sample(TICKETS, random.randint(2, 4)),
            }
            return "webhook", {"scenario": scenario, "event": event}
        if scenario == "resolve":
            event = {
                "id": event_id("msg"),
                "type": "chat.message",
                "ticket": random.choice(TICKETS),
                "text": "The customer confirms the fix works. Please close the ticket.",
            }
            if script.bogus_approval or (
                script.faults is None and random.random() < 0.2 and self.may_block()
            ):
                # The operator pasted an approval id in the chat: an old one (consumed, for
                # another intent) or a mistyped one. Either way Takeover blocks the close.
                reused = self.consumed_approvals[-1] if self.consumed_approvals else None
                event["approval_id"] = reused or str(uuid.uuid4())
            return "chat", {"scenario": scenario, "event": event}
        if scenario == "guarded_update":
            event = {"id": event_id("wf"), "type": "sla.breach", "ticket": random.choice(TICKETS)}
            return "workflow", {"scenario": scenario, "event": event}
        if scenario == "campaign":
            if self.last_campaign is not None and (
                script.double_fire or (script.faults is None and random.random() < 0.05)
            ):
                # The scheduler delivered the same slot twice (at-least-once delivery).
                config, self.last_campaign = self.last_campaign, None
                return "schedule", config
            slot = datetime.now(UTC).replace(microsecond=0)
            # The time bucket comes from the trigger (the slot the schedule fired for); a
            # second firing for the same slot yields the same campaign id, hence the same keys.
            campaign_id = f"cmp_renewal_{slot:%Y%m%dT%H%M%S}"
            rng = random.Random(campaign_id)
            recipients = sorted(
                {f"{rng.choice(PEOPLE)}@{rng.choice(DOMAINS)}" for _ in range(rng.randint(4, 8))}
            )
            config = {
                "scenario": scenario,
                "campaign": {
                    "id": campaign_id,
                    "name": "renewal-reminder",
                    "scheduled_for": slot.isoformat(),
                },
                "recipients": recipients,
            }
            self.last_campaign = config
            return "schedule", config
        event = {"id": event_id("req"), "type": "weekly.report", "ticket": random.choice(TICKETS)}
        return "api", {"scenario": scenario, "event": event}

    # one run

    def execute(self, state: RunState) -> None:
        steps = plan(state.run.config)
        scenario = state.run.config.get("scenario")
        try:
            if scenario == "weekly_report" and not state.replay:
                self.finish(
                    state,
                    "error",
                    "The LLM provider answered 529 (overloaded) before any tool was called.",
                    tools_called=[],
                )
                return
            crash_after = state.script.crash_after
            if state.replay or crash_after is not None or state.script.faults is not None:
                pass
            elif scenario == "campaign" and random.random() < 0.35:
                crash_after = random.randint(1, max(1, len(steps) - 1))
            elif steps and random.random() < 0.03:
                crash_after = random.randint(0, len(steps) - 1)
            for index, step in enumerate(steps):
                if crash_after is not None and index == crash_after:
                    self.crash(state, index, len(steps))
                    return
                self.do_step(state, step, index)
                self.check_stop()
                state.run.heartbeat()
            failed = [a for a in state.proposed if a["state"] == "failed"]
            if failed:
                first = failed[0]
                self.finish(
                    state,
                    "error",
                    f"{first['tool']} on {first['target']} failed ({first['failure_reason']}).",
                    tools_called=state.tools_called(),
                )
            else:
                self.finish(state, "success", "", tools_called=state.tools_called())
        except RunGone as exc:
            log(f"run {short(state.id)}: {exc}")
        except Stopped:
            self.finish(
                state,
                "cancelled",
                "The agent was stopped (SIGTERM).",
                tools_called=state.tools_called(),
                unstoppable=True,
            )
            raise

    def crash(self, state: RunState, done: int, total: int) -> None:
        how = state.script.crash or random.choices(["error", "unknown", "silent"], [6, 2, 2])[0]
        what = f"after {done} of {total} side effects"
        if how == "error":
            self.finish(
                state, "error", f"Worker OOM-killed {what}.", tools_called=state.tools_called()
            )
        elif how == "unknown":
            # The runtime lost its own session: it cannot say which tools it called.
            self.finish(
                state, "error", f"Session store lost {what}; tool calls unknown.", tools_called=None
            )
        else:
            log(
                f"run {short(state.id)} crashed {what} without a word (no finish): it stays "
                "running until the stale-run reaper gives up on it"
            )

    def check_stop(self) -> None:
        if self.stop.is_set():
            raise Stopped

    def finish(self, state, status, message, *, tools_called, unstoppable=False) -> None:
        # The demo reports tools_called itself (it knows which proposals it made), rather
        # than `with run:`, because some of its runs "crash" on purpose without finishing.
        try:
            data = state.run.finish(status, message, tools_called=tools_called)
        except Unavailable:
            return
        except ApiError as exc:
            if exc.status != 409:  # 409: already finished, e.g. reaped
                log(f"run {short(state.id)}: finish answered {exc}")
            return
        extra = f": {message}" if message else ""
        executed = data.tools_executed
        log(f"run {short(state.id)} finished {status}{extra} (tools_executed {executed})")

    # one proposal

    def do_step(self, state: RunState, step: Step, index: int) -> None:
        expected_version = None
        if step.expected_version_from_read:
            # A real agent reads the record it is about to change from the system of record.
            read = self.world.read(step.prefix, step.target)
            expected_version = read[1] if read else 0
        script = state.script
        if state.replay:
            fault = None
        elif script.faults is not None:
            fault = script.faults[index] if index < len(script.faults) else None
        else:
            fault = self.choose_fault(step)
        note = NOTES.get(fault, "")
        before = self.inject(step, fault)
        first = self.propose(state, step, expected_version)
        if first is not None and not first["replayed"] and fault == "slow_then_external":
            self.interfere_while_in_flight(step, before, first["desired_state"])
        retried = None
        if script.faults is None:
            lose = random.random() < 0.1 and step.prefix != "search"
        else:
            lose = script.retry_first and index == 0
        if first is not None and not first["replayed"] and lose:
            # The response "got lost" and the runtime retries with the same key.
            retried = self.propose(state, step, expected_version)
        final = self.settle(first) if first is not None else None
        if fault in RULES:
            # A ledger hit, a block or a wait for approval dispatches nothing: a rule left
            # pending would fire on some later, unrelated action.
            self.world.clear_faults()
        if final is None:
            return
        state.proposed.append(final)
        self.report(step, final, first=first, retried=retried, fault=fault, note=note)

    def inject(self, step: Step, fault: str | None) -> int | None:
        """Set the world up for `fault`; for the in-flight interference, return the target's
        mutation count before the proposal."""
        if fault == "external_write_first":
            self.world.external_write(step.prefix, step.target, {"note": "edited by a colleague"})
        elif fault == "slow_then_external":
            self.world.fault("slow_after_commit", step.prefix, step.target, seconds=6)
            return self.world.mutations(step.prefix, step.target)
        elif fault == "refuse":
            # Immediate: the port closes now and reopens in half a second.
            self.world.fault("refuse", seconds=0.5)
        elif fault == "slow_after_commit":
            self.world.fault(fault, step.prefix, step.target, seconds=6)
        elif fault:
            self.world.fault(fault, step.prefix, step.target)
        return None

    def propose(self, state, step, expected_version) -> dict | None:
        self.check_stop()
        # Safe to repeat on a lost answer: same key, same intent, so at worst the repeat is
        # answered from the ledger (the client itself only retries what cannot double-send).
        try:
            outcome = state.run.propose(
                step.tool,
                step.target,
                step.desired_state(),
                key=step.key,
                expected_version=expected_version,
                approval_id=step.approval_id,
            )
        except RunNotRunning as exc:
            raise RunGone("the run is no longer running (finished or reaped elsewhere)") from exc
        except IdempotencyConflict:
            log(
                f"  {step.tool} {step.target}: 422 idempotency-conflict for key {step.key}: "
                "the same key was used for a different intent (the world moved since); "
                "nothing created"
            )
            return None
        except ApiError as exc:
            log(f"  {step.tool} {step.target}: {exc}")
            return None
        return {
            **outcome.action.to_dict(),
            "replayed": outcome.replayed,
            "content_changed": outcome.content_changed,
        }

    def interfere_while_in_flight(self, step: Step, before: int, desired: dict) -> None:
        """The tool committed and is slow to answer; the customer changes the ticket now, so
        that one of the fields this action set no longer holds what it set."""
        field_name = next(iter(desired))
        other = {"status": "reopened", "priority": "low", "assignee": "frank"}.get(
            field_name, "edited"
        )
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline and not self.stop.is_set():
            count = self.world.mutations(step.prefix, step.target)
            if count is not None and count > before:
                self.world.external_write(
                    step.prefix, step.target, {field_name: other, "note": "customer replied"}
                )
                return
            time.sleep(0.1)

    def settle(self, action: dict) -> dict:
        """Wait for the outcome in short slices (so that SIGTERM is honoured quickly). The
        typed outcomes (Blocked, Failed, NeedsHuman) are all states the demo wants to show,
        so it reads the action from them rather than treating them as errors."""
        outcome = self.client.outcome(action["id"]) if action["state"] in IN_PROGRESS else None
        deadline = time.monotonic() + SETTLE_SECONDS
        while outcome is not None and time.monotonic() < deadline:
            self.check_stop()
            try:
                return outcome.wait(WAIT_SECONDS).action.to_dict()
            except Pending as exc:
                if exc.state == "awaiting_approval":
                    return exc.action.to_dict()  # a person decides; tracked below
            except OutcomeError as exc:
                return exc.action.to_dict()
        return outcome.action.to_dict() if outcome is not None else action

    def report(self, step, action, *, first, retried, fault, note) -> None:
        state = action["state"]
        self.outcomes[state] += 1
        head = f"  {step.tool} {step.target}:"
        if first["replayed"]:
            changed = ", content_changed: true" if first["content_changed"] else ""
            log(
                f"{head} key {step.key} is already in the ledger → replayed: true{changed}; "
                f"nothing sent again (the action is {state})"
            )
            return
        parts = [head, state]
        if action.get("resolution"):
            parts.append(f"({action['resolution']})")
        for name in ("failure_reason", "block_reason"):
            if action.get(name):
                parts.append(f"({action[name]})")
        attempts = action.get("attempts", [])
        resends = [a for a in attempts if a.get("kind") == "resend"]
        if resends:
            parts.append(
                f"after {len(attempts)} attempts (resent with the same key: the tool is "
                f"declared {resends[-1]['declaration']['effect']})"
            )
        elif len(attempts) > 1:
            parts.append(f"after {len(attempts)} attempts")
        lookups = [r for r in action.get("reconciliations") or [] if r.get("kind") == "lookup"]
        if lookups and lookups[-1]["verdict"] == "lookup_applied":
            parts.append("— settled by the tool's lookup: it reports it applied the key")
        elif lookups and lookups[0]["verdict"] == "lookup_not_found":
            parts.append("— the tool's lookup said it never received the key")
        if fault:
            parts.append(f"[world: {note or fault.replace('_', ' ')}]")
        if state == "needs_human":
            last = (action.get("reconciliations") or [{}])[-1]
            diff = ", ".join(
                f"{d['field']}: wanted {d['desired']!r}, found {d['actual']!r}"
                for d in last.get("diff") or []
            )
            parts.append(f"— verdict {last.get('verdict')}{': ' + diff if diff else ''}")
        if state == "awaiting_approval":
            request = short(action["approval_request_id"] or "")
            parts.append(f"— approve or deny it in the console (request {request})")
        log(" ".join(parts))
        if retried is not None:
            changed = ", content_changed: true" if retried["content_changed"] else ""
            log(
                f"{head} its response was 'lost'; the retry with the same key got "
                f"replayed: {str(retried['replayed']).lower()}{changed}"
            )
        if state in {"awaiting_approval", "needs_human", "unknown"}:
            self.tracked[action["id"]] = action
        if state == "blocked":
            self.blocked_at.append(time.monotonic())

    # faults, bounded

    def choose_fault(self, step: Step) -> str | None:
        """About a third of the proposals meet a fault; the ones that need a person only
        while fewer than MAX_NEEDS_HUMAN are waiting."""
        if step.tool in {"close_ticket", "search_tickets"}:
            return None
        if step.expected_version_from_read:
            return "external_write_first" if random.random() < 0.45 else None
        if random.random() > 0.35:
            return None
        settles = ["drop_after_commit", "error_after_commit", "slow_after_commit", "reject"]
        settles.append("refuse")
        _, needs_human = self.open_counts()
        if step.tool == "update_ticket" and needs_human < MAX_NEEDS_HUMAN:
            return random.choice([*settles, "error_before_commit", "slow_then_external"])
        if step.tool == "send_email":
            # The outbox never needs a person for these: its lookup tells "applied" from
            # "never received", and what it never received is sent again with the same key.
            return random.choice([*settles, "error_before_commit"])
        return random.choice(settles)

    def may_block(self) -> bool:
        cutoff = time.monotonic() - 600
        while self.blocked_at and self.blocked_at[0] < cutoff:
            self.blocked_at.popleft()
        return len(self.blocked_at) < MAX_BLOCKED_PER_10_MIN

    def open_counts(self) -> tuple[int, int]:
        states = Counter(a["state"] for a in self.tracked.values())
        return states["awaiting_approval"], states["needs_human"] + states["unknown"]

    def refresh_tracked(self) -> None:
        """Re-read the actions left to a person: a grant, a deny or a resolution frees a slot."""
        if time.monotonic() - self.last_refresh < 15 or not self.tracked:
            return
        self.last_refresh = time.monotonic()
        for action_id, old in list(self.tracked.items()):
            try:
                new = self.client.outcome(action_id).action.to_dict()
            except ApiError as exc:
                if exc.status == 404:
                    self.tracked.pop(action_id)
                continue
            if new["state"] != old["state"]:
                how = new.get("resolution") or new.get("block_reason") or new.get("failure_reason")
                log(
                    f"  {new['tool']} {new['target']} ({short(action_id)}): "
                    f"{old['state']} → {new['state']}{f' ({how})' if how else ''}"
                )
                if (
                    new["tool"] == "close_ticket"
                    and new.get("approval_id")
                    and new["state"] in {"succeeded", "failed", "dispatching", "unknown"}
                ):
                    self.consumed_approvals.append(new["approval_id"])
            if new["state"] in TERMINAL:
                self.tracked.pop(action_id)
            else:
                self.tracked[action_id] = new


class RunGone(Exception):
    pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m demo.agent",
        description="A demo agent runtime on takeover_client (Takeover's HTTP API v1).",
    )
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="Takeover's base URL")
    parser.add_argument(
        "--token-file",
        type=Path,
        default=Path("var/demo-agent.token"),
        help="a file holding the principal's API token",
    )
    parser.add_argument(
        "--downstream",
        default=f"http://127.0.0.1:{os.environ.get('DOWNSTREAM_PORT', '8100')}",
        help="the demo downstream, whose control API plays the rest of the world",
    )
    args = parser.parse_args(argv)
    try:
        token = args.token_file.read_text().strip()
    except OSError as exc:
        sys.exit(f"demo agent: cannot read the token file: {exc}")
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    # The client's retries (a 503 with Retry-After, a refused connection) are worth seeing.
    retries = logging.StreamHandler(sys.stdout)
    retries.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    logging.getLogger("takeover_client").addHandler(retries)
    logging.getLogger("takeover_client").setLevel(logging.INFO)
    # A minute of retries rides out a restart of the web process or a database blip without
    # losing the run in hand.
    client = Takeover(args.url, token, retry_for=60, timeout=WAIT_SECONDS + 25)
    world = World(args.downstream)
    world.try_around_takeover()
    agent = Agent(client, world, stop)
    try:
        agent.loop()
    except Unauthenticated as exc:
        log(f"demo agent: the API refused the token (401): {exc.detail}")
        sys.exit(2)
    finally:
        client.close()
    log("demo agent stopped")


if __name__ == "__main__":
    main()
