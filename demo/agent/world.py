"""The demo agent's world (`demo.agent`): its constants, the tickets, customers and people
it works on, and the rest of the world that writes to the tools too."""

from __future__ import annotations

import time
from typing import Any

import httpx

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
