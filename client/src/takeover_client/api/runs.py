"""The operations of Takeover's HTTP API v1 on runs, typed.

Generated from the OpenAPI schema by client/generate.py: do not edit by hand."""

from __future__ import annotations

from typing import Any, Literal

from .. import models
from .._model import UNSET


class RunsOperations:
    """`client.api.<operation>` for runs: `Api` and `AsyncApi` inherit these."""

    def actions_propose(
        self,
        id: str,
        *,
        idempotency_key: str,
        tool: str,
        target: str,
        desired_state: dict[str, Any],
        expected_version: int | None = UNSET,
        approval_id: str | None = UNSET,
        reason: str | None = UNSET,
    ) -> models.ActionOut:
        """POST /api/v1/runs/{id}/actions"""
        return self._call(
            "POST",
            "/runs/{id}/actions",
            {"id": id},
            query={},
            headers={"Idempotency-Key": idempotency_key},
            body={
                "tool": tool,
                "target": target,
                "desired_state": desired_state,
                "expected_version": expected_version,
                "approval_id": approval_id,
                "reason": reason,
            },
            returns={201: models.ActionOut, 200: models.ActionOut},
        )

    def force_replay_requests_confirm(self, id: str) -> models.RunDetailOut:
        """POST /api/v1/force-replay-requests/{id}/confirm: A second admin confirms: 201 with the
        new run. 409 for the requester themselves."""
        return self._call(
            "POST",
            "/force-replay-requests/{id}/confirm",
            {"id": id},
            query={},
            headers={},
            body=None,
            returns={201: models.RunDetailOut},
        )

    def force_replay_requests_list(
        self,
        *,
        cursor: str = UNSET,
        state: list[Literal["pending", "confirmed", "rejected"]] = UNSET,
    ) -> models.ForceReplayRequestPage:
        """GET /api/v1/force-replay-requests: Four-eyes force replays, newest first;
        `?state=pending` for those waiting. Admin."""
        return self._call(
            "GET",
            "/force-replay-requests",
            {},
            query={"cursor": cursor, "state": state},
            headers={},
            body=None,
            returns={200: models.ForceReplayRequestPage},
        )

    def force_replay_requests_reject(
        self, id: str, *, reason: str | None = UNSET
    ) -> models.ForceReplayRequestOut:
        """POST /api/v1/force-replay-requests/{id}/reject"""
        return self._call(
            "POST",
            "/force-replay-requests/{id}/reject",
            {"id": id},
            query={},
            headers={},
            body={"reason": reason},
            returns={200: models.ForceReplayRequestOut},
        )

    def me(self) -> models.MeOut:
        """GET /api/v1/me"""
        return self._call(
            "GET",
            "/me",
            {},
            query={},
            headers={},
            body=None,
            returns={200: models.MeOut},
        )

    def replays_list(self, *, cursor: str = UNSET) -> models.ReplayPage:
        """GET /api/v1/replays"""
        return self._call(
            "GET",
            "/replays",
            {},
            query={"cursor": cursor},
            headers={},
            body=None,
            returns={200: models.ReplayPage},
        )

    def runs_claim(self) -> models.RunDetailOut | None:
        """POST /api/v1/runs/claim"""
        return self._call(
            "POST",
            "/runs/claim",
            {},
            query={},
            headers={},
            body=None,
            returns={200: models.RunDetailOut, 204: None},
        )

    def runs_finish(
        self,
        id: str,
        *,
        status: models.RunFinishInStatusEnum,
        error_message: str | None = UNSET,
        tools_called: list[str] | None = UNSET,
    ) -> models.RunDetailOut:
        """POST /api/v1/runs/{id}/finish"""
        return self._call(
            "POST",
            "/runs/{id}/finish",
            {"id": id},
            query={},
            headers={},
            body={"status": status, "error_message": error_message, "tools_called": tools_called},
            returns={200: models.RunDetailOut},
        )

    def runs_heartbeat(self, id: str) -> models.RunOut:
        """POST /api/v1/runs/{id}/heartbeat"""
        return self._call(
            "POST",
            "/runs/{id}/heartbeat",
            {"id": id},
            query={},
            headers={},
            body=None,
            returns={200: models.RunOut},
        )

    def runs_list(
        self,
        *,
        cursor: str = UNSET,
        status: list[Literal["pending", "running", "success", "error", "cancelled"]] = UNSET,
    ) -> models.RunPage:
        """GET /api/v1/runs"""
        return self._call(
            "GET",
            "/runs",
            {},
            query={"cursor": cursor, "status": status},
            headers={},
            body=None,
            returns={200: models.RunPage},
        )

    def runs_replay(
        self, id: str, *, force: bool | None = UNSET, reason: str | None = UNSET
    ) -> models.RunDetailOut | models.ForceReplayRequestOut:
        """POST /api/v1/runs/{id}/replay"""
        return self._call(
            "POST",
            "/runs/{id}/replay",
            {"id": id},
            query={},
            headers={},
            body={"force": force, "reason": reason},
            returns={201: models.RunDetailOut, 202: models.ForceReplayRequestOut},
        )

    def runs_retrieve(self, id: str) -> models.RunDetailOut:
        """GET /api/v1/runs/{id}"""
        return self._call(
            "GET",
            "/runs/{id}",
            {"id": id},
            query={},
            headers={},
            body=None,
            returns={200: models.RunDetailOut},
        )

    def runs_start(
        self,
        *,
        trigger: models.TriggerEnum,
        config: dict[str, Any] | None = UNSET,
        session_id: str | None = UNSET,
        input_file: bytes | tuple[str, bytes] = UNSET,
    ) -> models.RunDetailOut:
        """POST /api/v1/runs"""
        return self._call(
            "POST",
            "/runs",
            {},
            query={},
            headers={},
            body={"trigger": trigger, "config": config, "session_id": session_id},
            files={"input_file": input_file},
            returns={201: models.RunDetailOut},
        )

    def settings_retrieve(self) -> models.TenantSettingsOut:
        """GET /api/v1/settings: The tenant's settings (admin): `four_eyes_force_replay`,
        `approval_sla_seconds`, and the notification thresholds. A POST changes the fields it
        names."""
        return self._call(
            "GET",
            "/settings",
            {},
            query={},
            headers={},
            body=None,
            returns={200: models.TenantSettingsOut},
        )

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
        return self._call(
            "POST",
            "/settings",
            {},
            query={},
            headers={},
            body={
                "four_eyes_force_replay": four_eyes_force_replay,
                "approval_sla_seconds": approval_sla_seconds,
                "unknown_alert_seconds": unknown_alert_seconds,
                "approval_expiry_warning_seconds": approval_expiry_warning_seconds,
            },
            returns={200: models.TenantSettingsOut},
        )
