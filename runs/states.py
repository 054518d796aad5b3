"""The statuses of runs and actions, declared once as transition tables (core.states.Machine;
docs/design.md, "The action lifecycle", "Other state machines"), and the words of the
lifecycle: failure reasons, resolutions, attempt outcomes, reconciliation verdicts and what
each verdict means to a person. Every move goes through one guarded function in
`runs/moves.py` (`action_move`, `run_move`, `force_request_close`).

Nothing leads from dispatching, unknown or needs_human back to queued: past the dispatch
boundary an action is never re-sent automatically (invariant 2). That property is checked
below when the module is imported, so a careless edit of the table fails loudly.
"""

from django.db import models

from approvals.states import BLOCK_REASON_MEANING, BlockReason
from core.errors import IllegalTransition
from core.states import Machine

__all__ = ["BLOCK_REASON_MEANING", "BlockReason"]  # declared by approvals, used here too


class ActionState(models.TextChoices):
    AWAITING_APPROVAL = "awaiting_approval"
    QUEUED = "queued"
    DISPATCHING = "dispatching"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNKNOWN = "unknown"
    NEEDS_HUMAN = "needs_human"
    BLOCKED = "blocked"


TRANSITIONS: dict[str, set[str]] = {
    ActionState.AWAITING_APPROVAL: {ActionState.QUEUED, ActionState.BLOCKED},
    ActionState.QUEUED: {ActionState.DISPATCHING, ActionState.BLOCKED},
    ActionState.DISPATCHING: {ActionState.SUCCEEDED, ActionState.FAILED, ActionState.UNKNOWN},
    # A late, definitive answer may still settle an action the sweeper declared unknown.
    ActionState.UNKNOWN: {ActionState.SUCCEEDED, ActionState.FAILED, ActionState.NEEDS_HUMAN},
    ActionState.NEEDS_HUMAN: {ActionState.SUCCEEDED, ActionState.FAILED},
    ActionState.SUCCEEDED: set(),
    ActionState.FAILED: set(),
    ActionState.BLOCKED: set(),
}

ACTION = Machine("An action", ActionState, TRANSITIONS)

# Moves that only a tool's declaration allows, each named by the declarations that allow
# it. One: an `unknown` action is sent again (a new attempt, the same Idempotency-Key) to a
# tool that declares it applies a key at most once. Never to queued: a resend is
# claimed from `unknown` like a reconciliation read, not put back in the queue, and an
# `unsafe` tool is never re-sent past the boundary (invariant 2). Moved only by
# `runs.moves.action_move(..., declared=effect)`, from `action_resend_start`.
DECLARED_MOVES: dict[tuple[str, str], set[str]] = {
    (ActionState.UNKNOWN, ActionState.DISPATCHING): {"idempotent", "read_only"},
}
RESEND_EFFECTS = DECLARED_MOVES[(ActionState.UNKNOWN, ActionState.DISPATCHING)]

# Why each declaration that allows a resend makes it harmless, in the audit event's words.
ACTION_RESENDS = {
    "idempotent": "it declares that it applies one Idempotency-Key at most once and answers "
    "a repeat with the first result",
    "read_only": "it declares it has no side effect",
}

TERMINAL = set(ACTION.terminal)
PAST_BOUNDARY = {ActionState.DISPATCHING, ActionState.UNKNOWN, ActionState.NEEDS_HUMAN}
# What a person may re-check (re-read) and resolve: an outcome Takeover could not prove.
RESOLVABLE = {ActionState.UNKNOWN, ActionState.NEEDS_HUMAN}
OPEN_FOR_HUMANS = [
    ActionState.UNKNOWN,
    ActionState.NEEDS_HUMAN,
    ActionState.BLOCKED,
    ActionState.AWAITING_APPROVAL,
]
IN_PROGRESS = {
    ActionState.QUEUED,
    ActionState.DISPATCHING,
    ActionState.UNKNOWN,
}  # what `?wait=` waits through
# Not settled yet (every non-terminal state), in a fixed order: the metrics gauges.
UNSETTLED = [
    ActionState.AWAITING_APPROVAL,
    ActionState.QUEUED,
    ActionState.DISPATCHING,
    ActionState.UNKNOWN,
    ActionState.NEEDS_HUMAN,
]

# The states of an action whose call reached the tool, or may have: what a run called, for
# tools_executed and the replay verdict (`runs.replay`).
GATEWAY_CALLED = [
    ActionState.DISPATCHING,
    ActionState.SUCCEEDED,
    ActionState.FAILED,
    ActionState.UNKNOWN,
    ActionState.NEEDS_HUMAN,
]


def _check_table():
    assert set(TRANSITIONS) == set(ActionState.values), "every state needs a row"
    assert set(UNSETTLED) == set(ActionState.values) - TERMINAL
    for source in PAST_BOUNDARY:
        assert ActionState.QUEUED not in TRANSITIONS[source], (
            f"{source} must never go back to queued"
        )
    for (source, target), effects in DECLARED_MOVES.items():
        assert target != ActionState.QUEUED, "a declaration never puts an action back in the queue"
        assert target not in TRANSITIONS[source], "a declared move is not an ordinary one"
        assert "unsafe" not in effects, "an unsafe tool is never re-sent past the boundary"


_check_table()


def check_move(source: str, target: str) -> None:
    ACTION.check(source, target)


def check_declared_move(source: str, target: str, *, effect: str) -> None:
    """A move of `DECLARED_MOVES`, allowed only by the declarations it names."""
    if effect not in DECLARED_MOVES.get((source, target), ()):
        raise IllegalTransition(
            f"An action cannot move from {source} to {target} for a tool declared {effect}."
        )


class FailureReason(models.TextChoices):
    VERSION_CONFLICT = "version_conflict"
    REJECTED = "rejected"
    NOT_SENT = "not_sent"


class Resolution(models.TextChoices):
    APPLIED = "applied"
    RECONCILED = "reconciled"
    RESOLVED_BY_OPERATOR = "resolved_by_operator"


class AttemptOutcome(models.TextChoices):
    APPLIED = "applied"
    VERSION_CONFLICT = "version_conflict"
    REJECTED = "rejected"
    NOT_SENT = "not_sent"
    UNKNOWN = "unknown"


class AttemptKind(models.TextChoices):
    SEND = "send"  # the first dispatch
    SAFE_RETRY = "safe_retry"  # invariant 3: the previous attempt provably never left
    RESEND = "resend"  # an unknown outcome sent again, allowed by the tool's declaration


class Verdict(models.TextChoices):
    MATCH = "match"
    MISMATCH = "mismatch"
    MOVED_ON = "moved_on"
    READ_FAILED = "read_failed"
    MISSING = "missing"
    # The tool's own answer to "did you apply key K?" (`lookup: true` tools).
    LOOKUP_APPLIED = "lookup_applied"
    LOOKUP_NOT_FOUND = "lookup_not_found"  # it never received the key
    LOOKUP_FAILED = "lookup_failed"  # anything else: it could not tell


class ReadKind(models.TextChoices):
    STATE = "state"  # GET {base_url}/state/{target}
    LOOKUP = "lookup"  # GET {base_url}/effects/{key}


# What each verdict of a reconciliation read means to a person, declared once: the console's
# timeline and messages, and the reason a needs_human move is audited with.
VERDICT_MEANING = {
    Verdict.MATCH: "matches the desired state",
    Verdict.MISMATCH: "differs from the desired state",
    Verdict.MOVED_ON: "matches, but the version moved on",
    Verdict.MISSING: "target does not exist",
    Verdict.READ_FAILED: "read failed",
    Verdict.LOOKUP_APPLIED: "the tool reports it applied the key",
    Verdict.LOOKUP_NOT_FOUND: "the tool reports it never received the key",
    Verdict.LOOKUP_FAILED: "the tool's lookup could not tell",
}
assert set(VERDICT_MEANING) == set(Verdict), "every verdict needs a meaning"


class RunStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    SUCCESS = "success"
    ERROR = "error"
    CANCELLED = "cancelled"


R = RunStatus
# A replay is created pending and claimed by a runtime; a run started through the API is
# created running. Settled runs never move again (a replay is a new run).
RUN = Machine(
    "A run",
    RunStatus,
    {
        R.PENDING: {R.RUNNING},
        R.RUNNING: {R.SUCCESS, R.ERROR, R.CANCELLED},
        R.SUCCESS: set(),
        R.ERROR: set(),
        R.CANCELLED: set(),
    },
)
SETTLED_RUN = set(RUN.terminal)


class ForceRequestState(models.TextChoices):
    PENDING = "pending"
    CONFIRMED = "confirmed"
    REJECTED = "rejected"


F = ForceRequestState
FORCE_REQUEST = Machine(
    "A force replay request",
    ForceRequestState,
    {F.PENDING: {F.CONFIRMED, F.REJECTED}, F.CONFIRMED: set(), F.REJECTED: set()},
)


class Trigger(models.TextChoices):
    WORKFLOW = "workflow"
    SCHEDULE = "schedule"
    CHAT = "chat"
    WEBHOOK = "webhook"
    API = "api"
    MCP = "mcp"  # a run Takeover keeps for an MCP client (gateway/calls.py)
