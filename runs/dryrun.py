"""What a replay of a run will do, key by key, before anyone replays it (docs/design.md,
"Runs and replay"): a dry run.

A replay is a new run with the same input. A runtime that derives its idempotency keys from
the trigger (README, "Idempotency keys") proposes the same intents under the same keys, and
each key meets the effect ledger again: a key with a live entry is a ledger hit, and the
replay gets the recorded outcome back (a success, a failure, a call still open); a key
whose entry was revoked, or that never reached the ledger, is sent again. A tool the
runtime reported but Takeover never saw was called with no key anyone knows: at risk.

`replay_dry_run` is pure (the run's actions, the live ledger statuses of their keys, what
the runtime reported); `dry_run_for` loads them. Nothing here writes.
"""

from dataclasses import dataclass, field

from .states import ActionState

# What a ledger hit hands back, by the state of the action that owns the key.
HANDS_BACK = {
    ActionState.SUCCEEDED: "success",
    ActionState.FAILED: "failure",
    ActionState.BLOCKED: "blocked",
}
SUCCESS_HOW = {
    "applied": "the tool applied it",
    "reconciled": "proven by a read of the target",
    "resolved_by_operator": "an operator resolved it as succeeded",
}
FAILURE_HOW = {
    "version_conflict": "the tool answered 409, version conflict",
    "rejected": "the tool rejected the call",
    "not_sent": "it was never sent",
}


@dataclass(frozen=True)
class KeyOutcome:
    key: str
    tool: str
    target: str
    action_id: str
    # success | failure | blocked | open (a ledger hit on a call still open) | resend | read
    outcome: str
    words: str


@dataclass
class DryRun:
    keys: list[KeyOutcome] = field(default_factory=list)
    # Tools the runtime reported that Takeover never saw: called with no key we know.
    outside: list[str] = field(default_factory=list)

    def count(self, outcome: str) -> int:
        return sum(1 for k in self.keys if k.outcome == outcome)

    @property
    def at_risk(self) -> list[str]:
        """Tools whose effect a replay may repeat: keys sent again, calls outside Takeover."""
        sent = {k.tool for k in self.keys if k.outcome == "resend"}
        return sorted(sent | set(self.outside))

    @property
    def only_failures(self) -> bool:
        """Every key only hands back a recorded failure (or a block): the replay ends as the
        run did, and cannot fix it."""
        effects = [k for k in self.keys if k.outcome != "read"]
        return (
            bool(effects)
            and not self.outside
            and all(k.outcome in {"failure", "blocked"} for k in effects)
        )

    @property
    def summary(self) -> str:
        if not self.keys and not self.outside:
            return "This run proposed no side effect: a replay starts from nothing."
        if self.only_failures:
            return (
                f"Every key of this run ({len(self.keys)}) hands back its recorded failure "
                "from the ledger: a replay with the same keys fails again the same way, and "
                "sends nothing. It cannot fix this run."
            )
        parts = []
        for outcome, one, many in [
            ("success", "hands back a recorded success", "hand back a recorded success"),
            ("failure", "hands back a recorded failure", "hand back a recorded failure"),
            ("blocked", "hands back a block", "hand back a block"),
            ("open", "waits on a call still open", "wait on a call still open"),
            ("resend", "would be sent again", "would be sent again"),
            ("read", "is a read, read again", "are reads, read again"),
        ]:
            if n := self.count(outcome):
                parts.append(f"{n} {'key' if n == 1 else 'keys'} {one if n == 1 else many}")
        if self.outside:
            parts.append(f"{', '.join(self.outside)} was called outside Takeover, with no key")
        return "With the same keys: " + "; ".join(parts) + "."


def _words(action, ledger_status) -> tuple[str, str]:
    if action.tool.effect == "read_only":
        return "read", "A read: read again, nothing changes."
    if ledger_status is None:
        return "resend", (
            "No live ledger entry for this key (revoked, or never reserved): it would be sent "
            "again."
        )
    outcome = HANDS_BACK.get(action.state, "open")
    if outcome == "success":
        how = SUCCESS_HOW.get(action.resolution, action.resolution or "succeeded")
        return outcome, f"The ledger hands back the recorded success ({how}). Not sent again."
    if outcome == "failure":
        how = FAILURE_HOW.get(action.failure_reason, "")
        if action.resolution == "resolved_by_operator":
            how = "an operator resolved it as failed"
        return outcome, (
            f"The ledger hands back the recorded failure ({how or 'failed'}). Not sent again; "
            "the replay gets the same failure."
        )
    if outcome == "blocked":
        return outcome, (
            f"The ledger hands back the blocked action ({action.block_reason or 'blocked'}). "
            "Never sent."
        )
    return "open", (
        f"The ledger hands back the same action, still {action.get_state_display().lower()}: "
        "the replay waits on its outcome. Not sent again."
    )


def replay_dry_run(actions, live_keys: dict[str, str], tools_reported) -> DryRun:
    """`actions`: the run's actions (tool selected), oldest first; `live_keys`: key →
    status of its live ledger entry; `tools_reported`: the runtime's report (None: none)."""
    dry = DryRun()
    seen_tools = set()
    for a in actions:
        seen_tools.add(a.tool.name)
        outcome, words = _words(a, live_keys.get(a.idempotency_key))
        dry.keys.append(
            KeyOutcome(
                key=a.idempotency_key,
                tool=a.tool.name,
                target=a.target,
                action_id=str(a.pk),
                outcome=outcome,
                words=words,
            )
        )
    dry.outside = sorted(set(tools_reported or []) - seen_tools)
    return dry


def dry_run_for(run, actions=None) -> DryRun:
    from ledger.models import LedgerEntry

    if actions is None:
        actions = list(run.actions.select_related("tool").order_by("created_at", "pk"))
    keys = [a.idempotency_key for a in actions]
    live = dict(
        LedgerEntry.objects.filter(
            tenant_id=run.tenant_id, key__in=keys, revoked_at__isnull=True
        ).values_list("key", "status")
    )
    return replay_dry_run(actions, live, run.tools_reported)
