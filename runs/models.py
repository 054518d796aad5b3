"""Runs and the side effects they propose.

An Action carries its whole intent (tenant, principal, tool, target, desired_state,
expected_version) and is the outbox row the dispatcher works from: the broker only wakes
workers, the `state` column says what must be done.
"""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

from core.models import ToolEffect

from .states import (
    OPEN_FOR_HUMANS,  # the open queue also excludes acknowledged blocked actions
    UNSETTLED,
    ActionState,
    AttemptKind,
    AttemptOutcome,
    BlockReason,
    FailureReason,
    ForceRequestState,
    ReadKind,
    Resolution,
    RunStatus,
    Trigger,
    Verdict,
)


def _choices_check(field: str, choices, name: str, nullable: bool = False):
    condition = Q(**{f"{field}__in": choices.values})
    if nullable:
        condition |= Q(**{f"{field}__isnull": True})
    return models.CheckConstraint(condition=condition, name=name)


def input_upload_to(run, filename):
    return f"runs/{run.tenant_id}/{uuid.uuid4().hex}/{filename}"


class Run(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # run_recent (tenant, created_at) indexes it
    tenant = models.ForeignKey(
        "core.Tenant", on_delete=models.PROTECT, related_name="runs", db_index=False
    )
    principal = models.ForeignKey("core.Principal", on_delete=models.PROTECT, related_name="runs")
    trigger = models.CharField(max_length=16, choices=Trigger.choices)
    config = models.JSONField(default=dict, blank=True)
    input_file = models.FileField(upload_to=input_upload_to, max_length=500, blank=True)
    input_name = models.CharField(max_length=255, blank=True)
    input_size = models.BigIntegerField(null=True, blank=True)
    input_sha256 = models.CharField(max_length=64, blank=True)
    session_id = models.CharField(max_length=255)
    status = models.CharField(max_length=16, choices=RunStatus.choices)
    attempts = models.PositiveIntegerField(default=0)
    error_message = models.TextField(blank=True)
    replay_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="replays"
    )
    # What the runtime said at finish: a list of tool names, or null ("could not check").
    tools_reported = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            _choices_check("status", RunStatus, "run_status_valid"),
            _choices_check("trigger", Trigger, "run_trigger_valid"),
        ]
        indexes = [
            models.Index(fields=["tenant", "-created_at"], name="run_recent"),
            models.Index(
                fields=["principal", "created_at"],
                condition=Q(status="pending"),
                name="run_pending_claim",
            ),
            models.Index(
                fields=["heartbeat_at"], condition=Q(status="running"), name="run_running"
            ),
        ]


class Action(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Foreign keys that lead a composite index below get no index of their own: each index
    # is written again on every move of the action.
    tenant = models.ForeignKey(
        "core.Tenant", on_delete=models.PROTECT, related_name="actions", db_index=False
    )
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="actions", db_index=False)
    principal = models.ForeignKey(
        "core.Principal", on_delete=models.PROTECT, related_name="actions"
    )
    tool = models.ForeignKey("core.Tool", on_delete=models.PROTECT, related_name="actions")
    target = models.CharField(max_length=500)
    desired_state = models.JSONField()
    expected_version = models.BigIntegerField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)
    # Null only for a read_only tool's action: a read takes no ledger key space.
    ledger_entry = models.OneToOneField(
        "ledger.LedgerEntry", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # The tool's effect declaration when the action was proposed: what decided whether it
    # needed approval and a ledger key. (Later decisions record the declaration they used.)
    effect = models.CharField(max_length=16, choices=ToolEffect.choices, default=ToolEffect.UNSAFE)
    state = models.CharField(max_length=20, choices=ActionState.choices)
    block_reason = models.CharField(max_length=32, choices=BlockReason.choices, blank=True)
    failure_reason = models.CharField(max_length=32, choices=FailureReason.choices, blank=True)
    resolution = models.CharField(max_length=32, choices=Resolution.choices, blank=True)
    resolution_reason = models.TextField(blank=True)
    # The approval_id the runtime presented (kept even when it named nothing we know).
    approval_id = models.UUIDField(null=True, blank=True)
    approval_request = models.OneToOneField(
        "approvals.ApprovalRequest",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # Outbox bookkeeping.
    enqueued_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    reconcile_failures = models.PositiveIntegerField(default=0)
    next_reconcile_at = models.DateTimeField(null=True, blank=True)
    # Console claim, so two on-call people do not work the same action.
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="claimed_actions",
        db_index=False,  # action_claimed_by, of the claimed rows only
    )
    claimed_at = models.DateTimeField(null=True, blank=True)
    # The id of the request that proposed it: the worker that dispatches it logs and audits
    # under the same id, so one proposal can be followed from HTTP to the tool call.
    request_id = models.CharField(max_length=64, blank=True, default="")
    # The agent's own words for why it proposes this (shown to approvers; not part of the
    # intent fingerprint, so a reworded reason is the same effect).
    reason = models.TextField(blank=True, default="")
    # Where the proposal came from: `api`, `mcp` (Takeover's /mcp, gateway/) or `cli`, and
    # for MCP the client's own name (runs/origin.py). Shown in the console and the CLI.
    origin = models.CharField(max_length=8, default="api", db_default="api")
    client = models.CharField(max_length=200, blank=True, default="", db_default="")
    # A blocked action is final; an on-call person acknowledging it takes it out of the
    # open queue (it stays findable from its run, the audit log and search).
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.JSONField(null=True, blank=True)
    acknowledge_note = models.TextField(blank=True, default="")
    # Whether its settle is announced to the `?wait` listeners (runs.waits): true but for an
    # action its proposer claimed for itself (runs.claim), who waits for it in its own
    # thread; anyone else who waits for such an action marks it first (`runs.waits.watch`).
    # NULL reads as true: it is what the previous release's inserts write (they build the
    # row with jsonb_populate_record, which knows no default), so the column may be null.
    watched = models.BooleanField(null=True, default=True, db_default=True)
    # The read of the authoritative state an operator's resolve was decided on.
    resolved_on_read = models.ForeignKey(
        "Reconciliation",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,  # action_resolved_on_read, of the resolved rows only
    )

    class Meta:
        constraints = [
            _choices_check("state", ActionState, "action_state_valid"),
            models.CheckConstraint(
                condition=Q(state="blocked", block_reason__in=BlockReason.values)
                | (~Q(state="blocked") & Q(block_reason="")),
                name="action_blocked_has_reason",
            ),
            models.CheckConstraint(
                condition=Q(state="dispatching", lease_expires_at__isnull=False)
                | ~Q(state="dispatching"),
                name="action_dispatching_has_lease",
            ),
            models.CheckConstraint(
                condition=Q(failure_reason="") | Q(state="failed"),
                name="action_failure_reason_only_when_failed",
            ),
            models.CheckConstraint(
                condition=Q(acknowledged_at__isnull=True) | Q(state="blocked"),
                name="action_acknowledged_only_when_blocked",
            ),
            models.CheckConstraint(
                condition=Q(ledger_entry__isnull=False) | Q(effect=ToolEffect.READ_ONLY),
                name="action_ledger_unless_read_only",
            ),
        ]
        indexes = [
            # The open queue: what needs a person, oldest first (README, "The console, for people").
            models.Index(
                fields=["tenant", "created_at", "id"],
                include=["state", "tool"],  # counts per state and tool filters, index-only
                condition=Q(state__in=OPEN_FOR_HUMANS, acknowledged_at__isnull=True),
                name="action_open_queue",
            ),
            # The queue filtered by state and tool: a page, and each capped count, read a
            # range of matching entries (through action_open_queue a filter that matches few
            # rows walks every open action of the tenant).
            models.Index(
                fields=["tenant", "state", "tool", "created_at", "id"],
                condition=Q(state__in=OPEN_FOR_HUMANS, acknowledged_at__isnull=True),
                name="action_open_by_state",
            ),
            # The queue (docs: the database is the queue): each index is exactly one claim's
            # predicate, so a claim reads a few index entries at any table size.
            models.Index(
                fields=["tenant", "created_at"],
                condition=Q(state="queued"),
                name="action_queued",
            ),
            models.Index(
                fields=["tenant", "next_reconcile_at"],
                condition=Q(state="unknown"),
                name="action_reconcile_due",
            ),
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(state="dispatching"),
                name="action_leased",
            ),
            models.Index(fields=["run", "created_at"], name="action_by_run"),
            # Not settled yet: the /metrics gauges count it per tenant and state, and take the
            # oldest, from this small index alone (blocked, terminal and ever-growing, is out).
            models.Index(
                fields=["state", "tenant", "created_at"],
                condition=Q(state__in=UNSETTLED),
                name="action_unsettled",
            ),
            # Search by target. (No (tenant, created_at) index for "All actions": the planner
            # would prefer it to action_open_queue for the queue; All actions sorts a
            # tenant's rows found through the tenant_id index instead.)
            models.Index(fields=["tenant", "target"], name="action_by_target"),
            # The rows that point at a user or a read, for deleting either: a few among
            # millions, so only those are indexed (every other row's three versions per
            # effect write no entry here).
            models.Index(
                fields=["claimed_by"],
                condition=Q(claimed_by__isnull=False),
                name="action_claimed_by",
            ),
            models.Index(
                fields=["resolved_on_read"],
                condition=Q(resolved_on_read__isnull=False),
                name="action_resolved_on_read",
            ),
        ]

    def __str__(self):
        return f"{self.tool.name} → {self.target}"


class Attempt(models.Model):
    """One HTTP dispatch, committed when it starts and again when it ends."""

    # (action, number) is unique, which indexes it
    action = models.ForeignKey(
        Action, on_delete=models.PROTECT, related_name="attempts", db_index=False
    )
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=20, choices=AttemptOutcome.choices, blank=True)
    http_status = models.PositiveIntegerField(null=True, blank=True)
    detail = models.TextField(blank=True)
    kind = models.CharField(
        max_length=16, choices=AttemptKind.choices, default=AttemptKind.SEND, db_default="send"
    )
    # For a resend: the tool's declaration that allowed it (`Tool.declaration`), as it was.
    declaration = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["number"]
        constraints = [
            models.UniqueConstraint(fields=["action", "number"], name="attempt_number_unique")
        ]


class Reconciliation(models.Model):
    """One read of the authoritative state and what it proved."""

    action = models.ForeignKey(Action, on_delete=models.PROTECT, related_name="reconciliations")
    at = models.DateTimeField()
    authoritative = models.JSONField(null=True, blank=True)
    verdict = models.CharField(max_length=16, choices=Verdict.choices)
    diff = models.JSONField(default=list)
    expected_version = models.BigIntegerField(null=True, blank=True)
    actual_version = models.BigIntegerField(null=True, blank=True)
    detail = models.TextField(blank=True)
    actor = models.JSONField(null=True, blank=True)
    kind = models.CharField(
        max_length=8, choices=ReadKind.choices, default=ReadKind.STATE, db_default="state"
    )
    # For a lookup: the declaration that made Takeover ask the tool (and believe it).
    declaration = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["at", "id"]


class IdempotencyConflict(models.Model):
    """A proposal refused with 422 idempotency-conflict: the key was already used for a
    different intent. Kept so that a runtime deriving its keys badly is visible, not silent:
    the attempted intent, beside the action that holds the key."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, related_name="+")
    principal = models.ForeignKey("core.Principal", on_delete=models.PROTECT, related_name="+")
    key = models.CharField(max_length=255)
    existing_action = models.ForeignKey(
        Action, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    attempted = models.JSONField()  # tool, target, desired_state, expected_version, run
    request_id = models.CharField(max_length=64, blank=True, default="")
    at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["tenant", "-at"], name="conflict_recent")]


class ForceReplayRequest(models.Model):
    """Four-eyes force replay: one admin asks, a different admin confirms or rejects.

    At most one waits per run (a partial unique index), so two admins asking at once get
    one request and a 409."""

    State = ForceRequestState

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="force_requests")
    requested_by = models.JSONField()
    reason = models.TextField()
    tools_at_risk = models.JSONField(null=True, blank=True)
    state = models.CharField(
        max_length=16, choices=ForceRequestState.choices, default=ForceRequestState.PENDING
    )
    decided_by = models.JSONField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.TextField(blank=True, default="")
    new_run = models.OneToOneField(
        Run, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run"], condition=Q(state="pending"), name="one_pending_force_per_run"
            ),
            _choices_check("state", ForceRequestState, "force_request_state_valid"),
            models.CheckConstraint(condition=~Q(reason=""), name="force_request_has_reason"),
        ]
        indexes = [models.Index(fields=["tenant", "-created_at"], name="force_request_recent")]


class Replay(models.Model):
    """One replay decision: who asked, whether forced, why, and what was at risk."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, related_name="+")
    original_run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="replay_records")
    new_run = models.OneToOneField(Run, on_delete=models.PROTECT, related_name="replay_record")
    actor = models.JSONField()
    forced = models.BooleanField(default=False)
    reason = models.TextField(blank=True)
    tools_at_risk = models.JSONField(null=True, blank=True)
    # The tools the verdict called safe to repeat, each with the declaration that made it so.
    safe_tools = models.JSONField(default=list, blank=True)
    at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["tenant", "-at"], name="replay_recent")]
        constraints = [
            models.CheckConstraint(
                condition=Q(forced=False) | ~Q(reason=""), name="forced_replay_has_reason"
            )
        ]


class Wakeup(models.Model):
    """One row: when the pending wake-up message was sent, or null if none is pending.
    See `runs.wakeup`."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    pending_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="wakeup_single_row")]
