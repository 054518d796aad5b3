"""The API's resources of actions, typed: one dataclass each.

Generated from the OpenAPI schema by client/generate.py: do not edit by hand."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._model import Model

if TYPE_CHECKING:  # annotations only: `Model` resolves them by name
    from .common import (
        ActionOut,
        BulkItemOut,
        BulkPlanOutOperationEnum,
        BulkResultItemOut,
        IdempotencyConflictOut,
        ResolveOutcomeEnum,
    )


@dataclass(frozen=True, kw_only=True)
class ActionPage(Model):
    """The `ActionPage` schema."""

    results: list[ActionOut]
    next: str | None
    """Pass as `cursor` for the next page; null at the end."""


@dataclass(frozen=True, kw_only=True)
class BulkPlanOut(Model):
    """The `BulkPlanOut` schema."""

    operation: BulkPlanOutOperationEnum
    outcome: ResolveOutcomeEnum | None
    reason: str
    force: bool
    signature: str
    """Pass it to /bulk/apply to confirm exactly this plan."""
    items: list[BulkItemOut]


@dataclass(frozen=True, kw_only=True)
class BulkResultOut(Model):
    """The `BulkResultOut` schema."""

    plan: BulkPlanOut
    results: list[BulkResultItemOut]


@dataclass(frozen=True, kw_only=True)
class IdempotencyConflictPage(Model):
    """The `IdempotencyConflictPage` schema."""

    results: list[IdempotencyConflictOut]
    next: str | None
    """Pass as `cursor` for the next page; null at the end."""
