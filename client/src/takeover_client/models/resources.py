"""The API's resources (what operations answer), typed: one dataclass each.

Generated from the OpenAPI schema by client/generate.py: do not edit by hand."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from .._model import Model, Page

if TYPE_CHECKING:  # annotations only: `Model` resolves them by name
    from . import common


class ActionOut(Model):
    """The `ActionOut` schema."""

    id: str
    run: str
    tenant: str
    principal: str
    tool: str
    target: str
    desired_state: dict[str, Any]
    expected_version: int | None
    idempotency_key: str
    effect: common.EffectEnum
    """The tool's effect declaration when this was proposed: a `read_only` tool's action needs no
    approval and holds no ledger key."""
    state: common.ActionStateEnum
    block_reason: common.BlockReasonEnum | None
    failure_reason: common.FailureReasonEnum | None
    resolution: common.ResolutionEnum | None
    resolution_reason: str | None
    approval_id: str | None
    approval_request_id: str | None
    replayed: bool
    """True when answered from the ledger (same key)."""
    content_changed: bool
    """On a ledger hit: non-identity fields of desired_state differ."""
    attempts: list[common.AttemptOut]
    reconciliations: list[common.ReconciliationOut]
    claimed_by: str | None
    """The on-call holding it in the console."""
    origin: common.ActionOriginEnum
    """Where it was proposed: the API, Takeover's /mcp, or the takeover CLI."""
    client: str | None
    """The MCP client's name (or the CLI's), when it said one."""
    created_at: datetime
    updated_at: datetime


class ActionPage(Page):
    """The `ActionPage` schema."""

    results: list[ActionOut]


class ApprovalOut(Model):
    """The `ApprovalOut` schema."""

    principal: str
    tool: str
    target: str
    desired_state: dict[str, Any]
    expected_version: int | None
    id: str
    state: common.ApprovalStateEnum
    tenant: str
    expires_at: datetime
    granted_by: common.ActorOut
    granted_at: datetime
    consumed_by_action: str | None
    consumed_at: datetime | None
    request: str | None
    """The approval request it answered."""
    revoked_at: datetime | None
    revoke_reason: str | None


class ApprovalPage(Page):
    """The `ApprovalPage` schema."""

    results: list[ApprovalOut]


class ApprovalRequestOut(Model):
    """The `ApprovalRequestOut` schema."""

    principal: str
    tool: str
    target: str
    desired_state: dict[str, Any]
    expected_version: int | None
    id: str
    action: str
    state: common.ApprovalRequestStateEnum
    tenant: str
    created_at: datetime
    expires_at: datetime | None
    decided_by: common.ActorOut | None
    decided_at: datetime | None
    reason: str | None


class ApprovalRequestPage(Page):
    """The `ApprovalRequestPage` schema."""

    results: list[ApprovalRequestOut]


class AuditEventPage(Page):
    """The `AuditEventPage` schema."""

    results: list[common.AuditEventOut]


class BulkPlanOut(Model):
    """The `BulkPlanOut` schema."""

    operation: common.BulkPlanOutOperationEnum
    outcome: common.ResolveOutcomeEnum | None
    reason: str
    force: bool
    signature: str
    """Pass it to /bulk/apply to confirm exactly this plan."""
    items: list[common.BulkItemOut]


class BulkResultOut(Model):
    """The `BulkResultOut` schema."""

    plan: BulkPlanOut
    results: list[common.BulkResultItemOut]


class ForceReplayRequestOut(Model):
    """The `ForceReplayRequestOut` schema."""

    id: str
    run: str
    state: common.ForceReplayRequestOutStateEnum
    requested_by: common.ActorOut
    reason: str
    tools_at_risk: list[str] | None
    decided_by: common.ActorOut | None
    decided_at: datetime | None
    decision_reason: str | None
    new_run: str | None
    created_at: datetime


class ForceReplayRequestPage(Page):
    """The `ForceReplayRequestPage` schema."""

    results: list[ForceReplayRequestOut]


class IdempotencyConflictPage(Page):
    """The `IdempotencyConflictPage` schema."""

    results: list[common.IdempotencyConflictOut]


class LedgerEntryOut(Model):
    """The `LedgerEntryOut` schema."""

    id: str
    tenant: str
    key: str
    generation: int
    tool: str
    action: str | None
    status: common.LedgerStatusEnum
    fingerprint: str
    created_at: datetime
    updated_at: datetime
    revoked: bool
    revoked_at: datetime | None
    revoked_reason: str | None
    revoked_by: common.ActorOut | None


class LedgerEntryPage(Page):
    """The `LedgerEntryPage` schema."""

    results: list[LedgerEntryOut]


class MeOut(Model):
    """The `MeOut` schema."""

    kind: common.MeOutKindEnum
    name: str
    tenant: str
    roles: list[common.RolesEnum]


class PrincipalCreatedOut(Model):
    """The `PrincipalCreatedOut` schema."""

    id: str
    name: str
    tenant: str
    token: str
    """Shown once; only its hash is stored."""


class ReplayPage(Page):
    """The `ReplayPage` schema."""

    results: list[common.ReplayOut]


class RunOut(Model):
    """The `RunOut` schema."""

    id: str
    tenant: str
    principal: str
    trigger: common.TriggerEnum
    config: dict[str, Any]
    input_file: common.InputFileOut | None
    session_id: str
    status: common.RunStatusEnum
    attempts: int
    error_message: str
    replay_of: str | None
    tools_executed: list[str] | None
    """[] verified no tool called; a list of tools called; null unknown."""
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    heartbeat_at: datetime | None


class RunPage(Page):
    """The `RunPage` schema."""

    results: list[RunOut]


class TenantSettingsOut(Model):
    """The `TenantSettingsOut` schema."""

    four_eyes_force_replay: bool
    approval_sla_seconds: int
    """0: no SLA."""
    unknown_alert_seconds: int
    """0: unknown actions are not notified."""
    approval_expiry_warning_seconds: int
    """0: expiring requests are not notified."""


class TokenOut(Model):
    """The `TokenOut` schema."""

    id: str
    label: str
    """The first characters, to tell tokens apart."""
    name: str
    owner: common.ActorOut
    state: common.TokenStateEnum
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    """Written at most once a minute."""
    revoked_at: datetime | None
    rotated_from: str | None


class TokenPage(Page):
    """The `TokenPage` schema."""

    results: list[TokenOut]


class ToolOut(Model):
    """The `ToolOut` schema."""

    id: str
    name: str
    base_url: str | None = None
    effect: common.EffectEnum
    """`read_only`: no side effect (no approval, no ledger key, never at risk in a replay);
    `idempotent`: applies an Idempotency-Key at most once and answers a repeat with the first
    result (an unknown outcome is re-sent with the same key); `unsafe`: neither (the default)."""
    lookup: bool
    """Answers GET {base_url}/effects/{key}: 200 `{applied: true, state, version}` or 404;
    reconciliation asks it first."""
    declared_by: common.ActorOut | None
    """Who made the declaration in force."""
    declared_at: datetime | None
    requires_approval: bool
    identity_fields: list[str]
    timeout_seconds: float
    created_at: datetime
    signing_secret_created_at: datetime | None = None
    previous_secret_expires_at: datetime | None = None
    """While set and in the future, requests are signed with the previous secret too."""
    kind: common.ToolKindEnum
    """`http`: the tool protocol at base_url; `mcp`: an MCP server's tool."""
    mcp: common.ToolMcpOut | None = None
    """An MCP tool's upstream (operators only)."""


class ToolPage(Page):
    """The `ToolPage` schema."""

    results: list[ToolOut]


class RunDetailOut(RunOut):
    """The `RunDetailOut` schema."""

    actions: list[common.ActionSummaryOut]
    replay_verdict: common.ReplayVerdictOut
    """What a replay without force would answer."""


class TokenCreatedOut(TokenOut):
    """The `TokenCreatedOut` schema."""

    token: str
    """Shown once; only its hash is stored."""


class ToolCreatedOut(ToolOut):
    """The `ToolCreatedOut` schema."""

    signing_secret: str
    """The secret every request to this tool is signed with (`Takeover-Signature`): shown this
    once."""
