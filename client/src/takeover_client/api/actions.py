"""The operations of Takeover's HTTP API v1 on actions, typed.

Generated from the OpenAPI schema by client/generate.py: do not edit by hand."""

from __future__ import annotations

from typing import Literal

from .. import models
from .._model import UNSET


class ActionsOperations:
    """`client.api.<operation>` for actions: `Api` and `AsyncApi` inherit these."""

    def actions_acknowledge(self, id: str, *, note: str | None = UNSET) -> models.ActionOut:
        """POST /api/v1/actions/{id}/acknowledge: Acknowledge a blocked action (on-call): it
        leaves the queue, stays findable. 409 `state-conflict` unless it is blocked and not
        yet acknowledged."""
        return self._call(
            "POST",
            "/actions/{id}/acknowledge",
            {"id": id},
            query={},
            headers={},
            body={"note": note},
            returns={200: models.ActionOut},
        )

    def actions_reconcile(self, id: str) -> models.ActionOut:
        """POST /api/v1/actions/{id}/reconcile"""
        return self._call(
            "POST",
            "/actions/{id}/reconcile",
            {"id": id},
            query={},
            headers={},
            body=None,
            returns={200: models.ActionOut},
        )

    def actions_resolve(
        self,
        id: str,
        *,
        outcome: models.ResolveOutcomeEnum,
        reason: str,
        based_on_read: int | None = UNSET,
        take_over: bool | None = UNSET,
    ) -> models.ActionOut:
        """POST /api/v1/actions/{id}/resolve"""
        return self._call(
            "POST",
            "/actions/{id}/resolve",
            {"id": id},
            query={},
            headers={},
            body={
                "outcome": outcome,
                "reason": reason,
                "based_on_read": based_on_read,
                "take_over": take_over,
            },
            returns={200: models.ActionOut},
        )

    def actions_retrieve(self, id: str, *, wait: float = UNSET) -> models.ActionOut:
        """GET /api/v1/actions/{id}"""
        return self._call(
            "GET",
            "/actions/{id}",
            {"id": id},
            query={"wait": wait},
            headers={},
            body=None,
            returns={200: models.ActionOut},
        )

    def bulk_apply(self) -> models.BulkResultOut:
        """POST /api/v1/bulk/apply: Do what the preview with this `signature` said. 409
        `state-conflict` (with the new `plan`) when the plan is not that one any more: nothing
        was done. Each decision is audited by its own service, and the batch as `bulk.apply`."""
        return self._call(
            "POST",
            "/bulk/apply",
            {},
            query={},
            headers={},
            body=None,
            returns={200: models.BulkResultOut},
        )

    def bulk_preview(self) -> models.BulkPlanOut:
        """POST /api/v1/bulk/preview: What resolving or re-checking these actions, or replaying
        these runs, would do, item by item, without doing any of it. Items the caller cannot
        see, or may not act on, are in the plan with `will: skip` and the reason."""
        return self._call(
            "POST",
            "/bulk/preview",
            {},
            query={},
            headers={},
            body=None,
            returns={200: models.BulkPlanOut},
        )

    def idempotency_conflicts_list(self, *, cursor: str = UNSET) -> models.IdempotencyConflictPage:
        """GET /api/v1/idempotency-conflicts: Every proposal refused with 422
        idempotency-conflict, newest first (operators)."""
        return self._call(
            "GET",
            "/idempotency-conflicts",
            {},
            query={"cursor": cursor},
            headers={},
            body=None,
            returns={200: models.IdempotencyConflictPage},
        )

    def queue_list(
        self,
        *,
        cursor: str = UNSET,
        order: Literal["oldest"] = UNSET,
        state: list[Literal["unknown", "needs_human", "blocked", "awaiting_approval"]] = UNSET,
        tool: list[str] = UNSET,
    ) -> models.ActionPage:
        """GET /api/v1/queue"""
        return self._call(
            "GET",
            "/queue",
            {},
            query={"cursor": cursor, "order": order, "state": state, "tool": tool},
            headers={},
            body=None,
            returns={200: models.ActionPage},
        )
