"""The API's resources of setup, typed: one dataclass each.

Generated from the OpenAPI schema by client/generate.py: do not edit by hand."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from .._model import Model

if TYPE_CHECKING:  # annotations only: `Model` resolves them by name
    from .common import ActorOut, AuditEventOut, EffectEnum, TokenStateEnum


@dataclass(frozen=True, kw_only=True)
class AuditEventPage(Model):
    """The `AuditEventPage` schema."""

    results: list[AuditEventOut]
    next: str | None
    """Pass as `cursor` for the next page; null at the end."""


@dataclass(frozen=True, kw_only=True)
class PrincipalCreatedOut(Model):
    """The `PrincipalCreatedOut` schema."""

    id: str
    name: str
    tenant: str
    token: str
    """Shown once; only its hash is stored."""


@dataclass(frozen=True, kw_only=True)
class TokenCreatedOut(Model):
    """The `TokenCreatedOut` schema."""

    id: str
    label: str
    """The first characters, to tell tokens apart."""
    name: str
    owner: ActorOut
    state: TokenStateEnum
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    """Written at most once a minute."""
    revoked_at: datetime | None
    rotated_from: str | None
    token: str
    """Shown once; only its hash is stored."""


@dataclass(frozen=True, kw_only=True)
class TokenOut(Model):
    """The `TokenOut` schema."""

    id: str
    label: str
    """The first characters, to tell tokens apart."""
    name: str
    owner: ActorOut
    state: TokenStateEnum
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    """Written at most once a minute."""
    revoked_at: datetime | None
    rotated_from: str | None


@dataclass(frozen=True, kw_only=True)
class TokenPage(Model):
    """The `TokenPage` schema."""

    results: list[TokenOut]
    next: str | None
    """Pass as `cursor` for the next page; null at the end."""


@dataclass(frozen=True, kw_only=True)
class ToolCreatedOut(Model):
    """The `ToolCreatedOut` schema."""

    id: str
    name: str
    base_url: str | None = None
    effect: EffectEnum
    """`read_only`: no side effect (no approval, no ledger key, never at risk in a replay);
    `idempotent`: applies an Idempotency-Key at most once and answers a repeat with the first
    result (an unknown outcome is re-sent with the same key); `unsafe`: neither (the default)."""
    lookup: bool
    """Answers GET {base_url}/effects/{key}: 200 `{applied: true, state, version}` or 404;
    reconciliation asks it first."""
    declared_by: ActorOut | None
    """Who made the declaration in force."""
    declared_at: datetime | None
    requires_approval: bool
    identity_fields: list[str]
    timeout_seconds: float
    created_at: datetime
    signing_secret_created_at: datetime | None = None
    previous_secret_expires_at: datetime | None = None
    """While set and in the future, requests are signed with the previous secret too."""
    signing_secret: str
    """The secret every request to this tool is signed with (`Takeover-Signature`): shown this
    once."""


@dataclass(frozen=True, kw_only=True)
class ToolOut(Model):
    """The `ToolOut` schema."""

    id: str
    name: str
    base_url: str | None = None
    effect: EffectEnum
    """`read_only`: no side effect (no approval, no ledger key, never at risk in a replay);
    `idempotent`: applies an Idempotency-Key at most once and answers a repeat with the first
    result (an unknown outcome is re-sent with the same key); `unsafe`: neither (the default)."""
    lookup: bool
    """Answers GET {base_url}/effects/{key}: 200 `{applied: true, state, version}` or 404;
    reconciliation asks it first."""
    declared_by: ActorOut | None
    """Who made the declaration in force."""
    declared_at: datetime | None
    requires_approval: bool
    identity_fields: list[str]
    timeout_seconds: float
    created_at: datetime
    signing_secret_created_at: datetime | None = None
    previous_secret_expires_at: datetime | None = None
    """While set and in the future, requests are signed with the previous secret too."""


@dataclass(frozen=True, kw_only=True)
class ToolPage(Model):
    """The `ToolPage` schema."""

    results: list[ToolOut]
    next: str | None
    """Pass as `cursor` for the next page; null at the end."""
