"""The API's resources of approvals, typed: one dataclass each.

Generated from the OpenAPI schema by client/generate.py: do not edit by hand."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .._model import Model

if TYPE_CHECKING:  # annotations only: `Model` resolves them by name
    from .common import ActorOut, ApprovalRequestStateEnum, ApprovalStateEnum, LedgerStatusEnum


@dataclass(frozen=True, kw_only=True)
class ApprovalOut(Model):
    """The `ApprovalOut` schema."""

    principal: str
    tool: str
    target: str
    desired_state: dict[str, Any]
    expected_version: int | None
    id: str
    state: ApprovalStateEnum
    tenant: str
    expires_at: datetime
    granted_by: ActorOut
    granted_at: datetime
    consumed_by_action: str | None
    consumed_at: datetime | None
    request: str | None
    """The approval request it answered."""
    revoked_at: datetime | None
    revoke_reason: str | None


@dataclass(frozen=True, kw_only=True)
class ApprovalPage(Model):
    """The `ApprovalPage` schema."""

    results: list[ApprovalOut]
    next: str | None
    """Pass as `cursor` for the next page; null at the end."""


@dataclass(frozen=True, kw_only=True)
class ApprovalRequestOut(Model):
    """The `ApprovalRequestOut` schema."""

    principal: str
    tool: str
    target: str
    desired_state: dict[str, Any]
    expected_version: int | None
    id: str
    action: str
    state: ApprovalRequestStateEnum
    tenant: str
    created_at: datetime
    expires_at: datetime | None
    decided_by: ActorOut | None
    decided_at: datetime | None
    reason: str | None


@dataclass(frozen=True, kw_only=True)
class ApprovalRequestPage(Model):
    """The `ApprovalRequestPage` schema."""

    results: list[ApprovalRequestOut]
    next: str | None
    """Pass as `cursor` for the next page; null at the end."""


@dataclass(frozen=True, kw_only=True)
class LedgerEntryOut(Model):
    """The `LedgerEntryOut` schema."""

    id: str
    tenant: str
    key: str
    generation: int
    tool: str
    action: str | None
    status: LedgerStatusEnum
    fingerprint: str
    created_at: datetime
    updated_at: datetime
    revoked: bool
    revoked_at: datetime | None
    revoked_reason: str | None
    revoked_by: ActorOut | None


@dataclass(frozen=True, kw_only=True)
class LedgerEntryPage(Model):
    """The `LedgerEntryPage` schema."""

    results: list[LedgerEntryOut]
    next: str | None
    """Pass as `cursor` for the next page; null at the end."""
