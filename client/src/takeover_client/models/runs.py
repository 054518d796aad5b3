"""The API's resources of runs, typed: one dataclass each.

Generated from the OpenAPI schema by client/generate.py: do not edit by hand."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .._model import Model

if TYPE_CHECKING:  # annotations only: `Model` resolves them by name
    from .common import (
        ActionSummaryOut,
        ActorOut,
        ForceReplayRequestOutStateEnum,
        InputFileOut,
        MeOutKindEnum,
        ReplayOut,
        ReplayVerdictOut,
        RolesEnum,
        RunStatusEnum,
        TriggerEnum,
    )


@dataclass(frozen=True, kw_only=True)
class ForceReplayRequestOut(Model):
    """The `ForceReplayRequestOut` schema."""

    id: str
    run: str
    state: ForceReplayRequestOutStateEnum
    requested_by: ActorOut
    reason: str
    tools_at_risk: list[str] | None
    decided_by: ActorOut | None
    decided_at: datetime | None
    decision_reason: str | None
    new_run: str | None
    created_at: datetime


@dataclass(frozen=True, kw_only=True)
class ForceReplayRequestPage(Model):
    """The `ForceReplayRequestPage` schema."""

    results: list[ForceReplayRequestOut]
    next: str | None
    """Pass as `cursor` for the next page; null at the end."""


@dataclass(frozen=True, kw_only=True)
class MeOut(Model):
    """The `MeOut` schema."""

    kind: MeOutKindEnum
    name: str
    tenant: str
    roles: list[RolesEnum]


@dataclass(frozen=True, kw_only=True)
class ReplayPage(Model):
    """The `ReplayPage` schema."""

    results: list[ReplayOut]
    next: str | None
    """Pass as `cursor` for the next page; null at the end."""


@dataclass(frozen=True, kw_only=True)
class RunDetailOut(Model):
    """The `RunDetailOut` schema."""

    id: str
    tenant: str
    principal: str
    trigger: TriggerEnum
    config: dict[str, Any]
    input_file: InputFileOut | None
    session_id: str
    status: RunStatusEnum
    attempts: int
    error_message: str
    replay_of: str | None
    tools_executed: list[str] | None
    """[] verified no tool called; a list of tools called; null unknown."""
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    heartbeat_at: datetime | None
    actions: list[ActionSummaryOut]
    replay_verdict: ReplayVerdictOut
    """What a replay without force would answer."""


@dataclass(frozen=True, kw_only=True)
class RunOut(Model):
    """The `RunOut` schema."""

    id: str
    tenant: str
    principal: str
    trigger: TriggerEnum
    config: dict[str, Any]
    input_file: InputFileOut | None
    session_id: str
    status: RunStatusEnum
    attempts: int
    error_message: str
    replay_of: str | None
    tools_executed: list[str] | None
    """[] verified no tool called; a list of tools called; null unknown."""
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    heartbeat_at: datetime | None


@dataclass(frozen=True, kw_only=True)
class RunPage(Model):
    """The `RunPage` schema."""

    results: list[RunOut]
    next: str | None
    """Pass as `cursor` for the next page; null at the end."""


@dataclass(frozen=True, kw_only=True)
class TenantSettingsOut(Model):
    """The `TenantSettingsOut` schema."""

    four_eyes_force_replay: bool
    approval_sla_seconds: int
    """0: no SLA."""
    unknown_alert_seconds: int
    """0: unknown actions are not notified."""
    approval_expiry_warning_seconds: int
    """0: expiring requests are not notified."""
