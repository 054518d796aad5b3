"""What a run of the demo agent does (`demo.agent`): the steps of each scenario, keyed by
its trigger, and the scripts and notes that tell the story."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from takeover_client import (
    Run,
    idempotency_key,
)

from .world import ASSIGNEES

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

    @classmethod
    def keyed(cls, trigger: str, tool: str, target: str, stable: dict, **options) -> Step:
        """A step under its stable key (`key_for`): the same on every delivery and replay."""
        return cls(tool, target, key_for(trigger, tool, target), stable, **options)

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

    def step(tool: str, target: str, stable: dict, **options) -> Step:
        return Step.keyed(event["id"], tool, target, stable, **options)

    if scenario == "ticket_triage":
        ticket = event["ticket"]
        return [
            step(
                "update_ticket",
                ticket,
                {
                    "status": "open",
                    "priority": rng.choice(["low", "normal", "high"]),
                    "assignee": rng.choice(ASSIGNEES),
                },
            ),
            # A read: declared read_only, so no approval and no ledger key (sent anyway).
            step("search_tickets", "open", {"status": "open"}, prefix="search"),
        ]
    if scenario == "escalation":
        return [
            step("update_ticket", ticket, {"priority": "urgent", "assignee": "tier2"})
            for ticket in event["tickets"]
        ]
    if scenario == "resolve":
        ticket = event["ticket"]
        return [
            step("update_ticket", ticket, {"status": "solved"}),
            step(
                "close_ticket",
                ticket,
                {"status": "closed"},
                generate=resolution_note,
                approval_id=event.get("approval_id"),
            ),
        ]
    if scenario == "guarded_update":
        ticket = event["ticket"]
        return [
            step(
                "update_ticket",
                ticket,
                {"status": "escalated", "priority": "urgent"},
                expected_version_from_read=True,
            )
        ]
    if scenario == "campaign":
        campaign = config["campaign"]
        return [
            Step.keyed(
                campaign["id"],
                "send_email",
                recipient,
                {"campaign": campaign["id"]},
                generate=lambda r=recipient: email_text(campaign, r),
                prefix="email",
            )
            for recipient in config["recipients"]
        ]
    if scenario == "weekly_report":
        ticket = event["ticket"]
        return [step("update_ticket", ticket, {"status": "open", "label": "weekly-report"})]
    return []


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def event_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def new_event(prefix: str, kind: str, **fields) -> dict:
    """A trigger's event as its source sends it: a fresh id (`prefix_…`), a type, the rest."""
    return {"id": event_id(prefix), "type": kind, **fields}


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
