"""The API's resources (enums, nested objects), typed: one dataclass each.

Generated from the OpenAPI schema by client/generate.py: do not edit by hand."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from .._model import Model

ActionOriginEnum = Literal["api", "mcp", "cli"]

ActionStateEnum = Literal[
    "awaiting_approval",
    "queued",
    "dispatching",
    "succeeded",
    "failed",
    "unknown",
    "needs_human",
    "blocked",
]

ActorOutKindEnum = Literal["operator", "principal", "system"]

ApprovalRequestStateEnum = Literal["pending", "granted", "denied", "expired"]

ApprovalStateEnum = Literal["granted", "consumed", "revoked", "expired"]

AttemptOutKindEnum = Literal["send", "safe_retry", "resend"]

AttemptOutOutcomeEnum = Literal["applied", "version_conflict", "rejected", "not_sent", "unknown"]

BlockReasonEnum = Literal[
    "approval_expired",
    "approval_consumed",
    "approval_mismatch",
    "approval_denied",
    "approval_revoked",
    "approval_not_found",
]

BulkItemKindEnum = Literal["action", "run"]

BulkPlanOutOperationEnum = Literal["resolve", "recheck", "replay"]

BulkRecheckEnum = Literal["recheck"]

BulkReplayEnum = Literal["replay"]

BulkResolveEnum = Literal["resolve"]

EffectEnum = Literal["read_only", "idempotent", "unsafe"]

FailureReasonEnum = Literal["version_conflict", "rejected", "not_sent"]

ForceEnum = Literal[False]

ForceReplayRequestOutStateEnum = Literal["pending", "confirmed", "rejected"]

LedgerStatusEnum = Literal["reserved", "in_flight", "applied", "failed", "unknown", "void"]

MeOutKindEnum = Literal["principal", "operator"]

ReconciliationOutKindEnum = Literal["state", "lookup"]

ResolutionEnum = Literal["applied", "reconciled", "resolved_by_operator"]

ResolveOutcomeEnum = Literal["succeeded", "failed"]

RolesEnum = Literal["approver", "oncall", "admin"]

RunFinishInStatusEnum = Literal["success", "error", "cancelled"]

RunStatusEnum = Literal["pending", "running", "success", "error", "cancelled"]

TokenStateEnum = Literal["active", "revoked", "expired"]

ToolKindEnum = Literal["http", "mcp"]

TriggerEnum = Literal["workflow", "schedule", "chat", "webhook", "api", "mcp"]

VerdictEnum = Literal[
    "match",
    "mismatch",
    "moved_on",
    "read_failed",
    "missing",
    "lookup_applied",
    "lookup_not_found",
    "lookup_failed",
]

WillEnum = Literal[
    "resolve_succeeded",
    "resolve_failed",
    "recheck",
    "replay",
    "force_replay",
    "force_request",
    "skip",
]

DidEnum = Literal[WillEnum, "refused"]


class ActionSummaryOut(Model):
    """The `ActionSummaryOut` schema."""

    id: str
    tool: str
    target: str
    idempotency_key: str
    state: ActionStateEnum
    block_reason: BlockReasonEnum | None
    failure_reason: FailureReasonEnum | None
    resolution: ResolutionEnum | None
    created_at: datetime


class ActorOut(Model):
    """The `ActorOut` schema."""

    kind: ActorOutKindEnum
    name: str


class AttemptOut(Model):
    """The `AttemptOut` schema."""

    number: int
    started_at: datetime
    finished_at: datetime | None
    outcome: AttemptOutOutcomeEnum | None
    http_status: int | None
    detail: str
    kind: AttemptOutKindEnum
    """`send` (the first), `safe_retry` (the previous attempt provably never left), `resend` (an
    unknown outcome sent again with the same Idempotency-Key, because the tool declares
    `idempotent` or `read_only`)."""
    declaration: DeclarationOut | None
    """For a resend: the declaration that allowed it."""


class AuditEventOut(Model):
    """The `AuditEventOut` schema."""

    id: str
    at: datetime
    actor: ActorOut
    verb: str
    object_type: str
    object_id: str
    before: Any
    after: Any
    reason: str
    request_id: str


class AuthoritativeOut(Model):
    """The `AuthoritativeOut` schema."""

    state: dict[str, Any]
    version: int


class BulkItemOut(Model):
    """The `BulkItemOut` schema."""

    id: str
    kind: BulkItemKindEnum
    label: str
    state: str
    """Its state (status, for a run) now."""
    state_label: str
    will: WillEnum
    will_label: str
    why: str
    read_id: int | None
    """resolve: the read of the authoritative state decided on."""
    tools: list[str] | None
    """replay: the tools the run called, which a replay may call again (null: could not be
    established)."""
    keys: list[BulkKeyOut]
    """replay: the fate of each key the run used."""
    hits: int
    """replay: how many of `keys` are ledger hits."""
    sends: int
    """replay: how many of `keys` would be sent again."""


class BulkKeyOut(Model):
    """The `BulkKeyOut` schema."""

    key: str
    tool: str
    target: str
    hit: bool
    """Proposing this key again is a ledger hit: the recorded outcome is returned and nothing is
    sent. False: the key was revoked; it would be a new send."""
    state: str
    """The recorded action's state (a hit)."""
    state_label: str


class DeclarationOut(Model):
    """What a tool declared it is, as it stood when a decision relied on it."""

    effect: EffectEnum
    lookup: bool
    """It answers GET {base_url}/effects/{key}."""
    declared_by: ActorOut | None
    declared_at: datetime | None


class DiffOut(Model):
    """The `DiffOut` schema."""

    field: str
    desired: Any
    actual: Any


class IdempotencyConflictOut(Model):
    """The `IdempotencyConflictOut` schema."""

    id: int
    at: datetime
    principal: str
    key: str
    existing_action: str | None
    attempted: dict[str, Any]
    """The refused intent: tool, target, desired_state, expected_version."""
    request_id: str


class InputFileOut(Model):
    """The `InputFileOut` schema."""

    name: str
    size: int
    sha256: str


class ReconciliationOut(Model):
    """The `ReconciliationOut` schema."""

    at: datetime
    authoritative: AuthoritativeOut | None
    verdict: VerdictEnum
    """A state read: `match`, `mismatch`, `moved_on`, `read_failed`, `missing`. A lookup (`kind:
    lookup`): `lookup_applied` (the tool applied the key: settles the action),
    `lookup_not_found` (the tool reports it never received the key), `lookup_failed` (it could
    not tell; the state is read instead)."""
    diff: list[DiffOut]
    expected_version: int | None
    actual_version: int | None
    detail: str
    actor: ActorOut | None
    kind: ReconciliationOutKindEnum
    """`state`: GET {base_url}/state/{target}; `lookup`: GET {base_url}/effects/{key}."""
    declaration: DeclarationOut | None
    """For a lookup: the declaration that made Takeover ask."""


class ReplayOut(Model):
    """The `ReplayOut` schema."""

    id: str
    original_run: str
    new_run: str
    actor: ActorOut
    forced: bool
    reason: str
    tools_at_risk: list[str] | None
    safe_tools: list[SafeToolOut]
    at: datetime


class ReplayVerdictOut(Model):
    """The `ReplayVerdictOut` schema."""

    allowed: bool
    """A replay without force would be created."""
    forceable: bool
    gone: bool
    """The input file is no longer stored (410)."""
    message: str
    tools_at_risk: list[str] | None
    not_applied: list[str]
    """Called tools an operator resolved as not applied."""
    safe_tools: list[SafeToolOut]
    """Called tools that their declarations make safe to repeat: `read_only`, or `idempotent`
    with every call keyed through Takeover."""


class ToolMcpOut(Model):
    """The `ToolMcpOut` schema."""

    tool: str
    """The upstream tool that applies the effect."""
    target_argument: str
    read_tool: str
    lookup_tool: str | None
    annotations: dict[str, Any]
    """The upstream's hints, as listed."""
    suggested_effect: str | None
    """What the hints suggest (`read_only`, `idempotent`): applied only when an admin confirms it
    (POST /tools/{name}/declaration)."""


class BulkResultItemOut(BulkItemOut):
    """The `BulkResultItemOut` schema."""

    did: DidEnum
    did_label: str
    detail: str
    new_run: str | None


class SafeToolOut(DeclarationOut):
    """What a tool declared it is, as it stood when a decision relied on it."""

    tool: str
    why: str
    """Which declaration makes a repeat harmless, in words."""
