"""The operations of Takeover's HTTP API v1 on runs, typed.

Generated from the OpenAPI schema by client/generate.py: do not edit by hand."""

from __future__ import annotations

from typing import Any, Literal

from .. import models
from .._api import operation
from .._model import UNSET


class RunsOperations:
    """`client.api.<operation>` for runs: `Api` and `AsyncApi` inherit these."""

    @operation("POST", "/actions/{id}/acknowledge", returns={200: models.ActionOut})
    def actions_acknowledge(self, id: str, *, note: str | None = UNSET) -> models.ActionOut:
        """POST /api/v1/actions/{id}/acknowledge: Acknowledge a blocked action (on-call): it
        leaves the queue, stays findable. 409 `state-conflict` unless it is blocked and not
        yet acknowledged."""

    @operation(
        "POST",
        "/runs/{id}/actions",
        headers=("idempotency_key",),
        query=("wait",),
        wire={"idempotency_key": "Idempotency-Key"},
        returns={201: models.ActionOut, 200: models.ActionOut},
    )
    def actions_propose(
        self,
        id: str,
        *,
        idempotency_key: str,
        tool: str,
        target: str,
        desired_state: dict[str, Any],
        wait: float = UNSET,
        expected_version: int | None = UNSET,
        approval_id: str | None = UNSET,
        reason: str | None = UNSET,
    ) -> models.ActionOut:
        """POST /api/v1/runs/{id}/actions"""

    @operation("POST", "/actions/{id}/reconcile", returns={200: models.ActionOut})
    def actions_reconcile(self, id: str) -> models.ActionOut:
        """POST /api/v1/actions/{id}/reconcile"""

    @operation("POST", "/actions/{id}/resolve", returns={200: models.ActionOut})
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

    @operation("GET", "/actions/{id}", returns={200: models.ActionOut})
    def actions_retrieve(self, id: str, *, wait: float = UNSET) -> models.ActionOut:
        """GET /api/v1/actions/{id}"""

    @operation("POST", "/bulk/apply", returns={200: models.BulkResultOut})
    def bulk_apply(self) -> models.BulkResultOut:
        """POST /api/v1/bulk/apply: Do what the preview with this `signature` said. 409
        `state-conflict` (with the new `plan`) when the plan is not that one any more: nothing
        was done. Each decision is audited by its own service, and the batch as `bulk.apply`."""

    @operation("POST", "/bulk/preview", returns={200: models.BulkPlanOut})
    def bulk_preview(self) -> models.BulkPlanOut:
        """POST /api/v1/bulk/preview: What resolving or re-checking these actions, or replaying
        these runs, would do, item by item, without doing any of it. Items the caller cannot
        see, or may not act on, are in the plan with `will: skip` and the reason."""

    @operation("POST", "/force-replay-requests/{id}/confirm", returns={201: models.RunDetailOut})
    def force_replay_requests_confirm(self, id: str) -> models.RunDetailOut:
        """POST /api/v1/force-replay-requests/{id}/confirm: A second admin confirms: 201 with the
        new run. 409 for the requester themselves."""

    @operation("GET", "/force-replay-requests", returns={200: models.ForceReplayRequestPage})
    def force_replay_requests_list(
        self,
        *,
        cursor: str = UNSET,
        state: list[Literal["pending", "confirmed", "rejected"]] = UNSET,
    ) -> models.ForceReplayRequestPage:
        """GET /api/v1/force-replay-requests: Four-eyes force replays, newest first;
        `?state=pending` for those waiting. Admin."""

    @operation(
        "POST", "/force-replay-requests/{id}/reject", returns={200: models.ForceReplayRequestOut}
    )
    def force_replay_requests_reject(
        self, id: str, *, reason: str | None = UNSET
    ) -> models.ForceReplayRequestOut:
        """POST /api/v1/force-replay-requests/{id}/reject"""

    @operation("GET", "/idempotency-conflicts", returns={200: models.IdempotencyConflictPage})
    def idempotency_conflicts_list(self, *, cursor: str = UNSET) -> models.IdempotencyConflictPage:
        """GET /api/v1/idempotency-conflicts: Every proposal refused with 422
        idempotency-conflict, newest first (operators)."""

    @operation("GET", "/me", returns={200: models.MeOut})
    def me(self) -> models.MeOut:
        """GET /api/v1/me"""

    @operation("GET", "/queue", returns={200: models.ActionPage})
    def queue_list(
        self,
        *,
        cursor: str = UNSET,
        order: Literal["oldest"] = UNSET,
        state: list[Literal["unknown", "needs_human", "blocked", "awaiting_approval"]] = UNSET,
        tool: list[str] = UNSET,
    ) -> models.ActionPage:
        """GET /api/v1/queue"""

    @operation("GET", "/replays", returns={200: models.ReplayPage})
    def replays_list(self, *, cursor: str = UNSET) -> models.ReplayPage:
        """GET /api/v1/replays"""

    @operation("POST", "/runs/claim", returns={200: models.RunDetailOut, 204: None})
    def runs_claim(self) -> models.RunDetailOut | None:
        """POST /api/v1/runs/claim"""

    @operation("POST", "/runs/{id}/finish", returns={200: models.RunDetailOut})
    def runs_finish(
        self,
        id: str,
        *,
        status: models.RunFinishInStatusEnum,
        error_message: str | None = UNSET,
        tools_called: list[str] | None = UNSET,
    ) -> models.RunDetailOut:
        """POST /api/v1/runs/{id}/finish"""

    @operation("POST", "/runs/{id}/heartbeat", returns={200: models.RunOut})
    def runs_heartbeat(self, id: str) -> models.RunOut:
        """POST /api/v1/runs/{id}/heartbeat"""

    @operation("GET", "/runs", returns={200: models.RunPage})
    def runs_list(
        self,
        *,
        cursor: str = UNSET,
        status: list[Literal["pending", "running", "success", "error", "cancelled"]] = UNSET,
    ) -> models.RunPage:
        """GET /api/v1/runs"""

    @operation(
        "POST",
        "/runs/{id}/replay",
        returns={201: models.RunDetailOut, 202: models.ForceReplayRequestOut},
    )
    def runs_replay(
        self, id: str, *, force: bool | None = UNSET, reason: str | None = UNSET
    ) -> models.RunDetailOut | models.ForceReplayRequestOut:
        """POST /api/v1/runs/{id}/replay"""

    @operation("GET", "/runs/{id}", returns={200: models.RunDetailOut})
    def runs_retrieve(self, id: str) -> models.RunDetailOut:
        """GET /api/v1/runs/{id}"""

    @operation("POST", "/runs", files=("input_file",), returns={201: models.RunDetailOut})
    def runs_start(
        self,
        *,
        trigger: models.TriggerEnum,
        config: dict[str, Any] | None = UNSET,
        session_id: str | None = UNSET,
        input_file: bytes | tuple[str, bytes] = UNSET,
    ) -> models.RunDetailOut:
        """POST /api/v1/runs"""

    @operation("GET", "/settings", returns={200: models.TenantSettingsOut})
    def settings_retrieve(self) -> models.TenantSettingsOut:
        """GET /api/v1/settings: The tenant's settings (admin): `four_eyes_force_replay`,
        `approval_sla_seconds`, and the notification thresholds. A POST changes the fields it
        names."""

    @operation("POST", "/settings", returns={200: models.TenantSettingsOut})
    def settings_update(
        self,
        *,
        four_eyes_force_replay: bool | None = UNSET,
        approval_sla_seconds: int | None = UNSET,
        unknown_alert_seconds: int | None = UNSET,
        approval_expiry_warning_seconds: int | None = UNSET,
    ) -> models.TenantSettingsOut:
        """POST /api/v1/settings: The tenant's settings (admin): `four_eyes_force_replay`,
        `approval_sla_seconds`, and the notification thresholds. A POST changes the fields it
        names."""
