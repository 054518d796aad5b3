"""Every operation of Takeover's HTTP API v1, typed: `client.api.<operation>`.

Generated from the OpenAPI schema by client/generate.py: do not edit by hand."""

from __future__ import annotations

from typing import Any, Literal

from . import models
from ._api import AsyncBase, SyncBase
from ._model import UNSET

OPERATIONS = [
    "actions_acknowledge",
    "actions_propose",
    "actions_reconcile",
    "actions_resolve",
    "actions_retrieve",
    "approval_requests_deny",
    "approval_requests_grant",
    "approval_requests_list",
    "approvals_create",
    "approvals_list",
    "approvals_retrieve",
    "approvals_revoke",
    "audit_list",
    "bulk_apply",
    "bulk_preview",
    "force_replay_requests_confirm",
    "force_replay_requests_list",
    "force_replay_requests_reject",
    "idempotency_conflicts_list",
    "ledger_list",
    "ledger_revoke",
    "me",
    "principals_create",
    "queue_list",
    "replays_list",
    "runs_claim",
    "runs_finish",
    "runs_heartbeat",
    "runs_list",
    "runs_replay",
    "runs_retrieve",
    "runs_start",
    "settings_retrieve",
    "settings_update",
    "tokens_create",
    "tokens_list",
    "tokens_revoke",
    "tokens_rotate",
    "tools_create",
    "tools_declare",
    "tools_list",
    "tools_retrieve",
    "tools_rotate_secret",
]


class Api(SyncBase):
    """Every operation of the schema, synchronous; results are `models` dataclasses."""

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
    ) -> models.ActionOut:
        """POST /api/v1/actions/{id}/resolve"""
        return self._call(
            "POST",
            "/actions/{id}/resolve",
            {"id": id},
            query={},
            headers={},
            body={"outcome": outcome, "reason": reason, "based_on_read": based_on_read},
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

    def approval_requests_deny(self, id: str, *, reason: str) -> models.ApprovalRequestOut:
        """POST /api/v1/approval-requests/{id}/deny"""
        return self._call(
            "POST",
            "/approval-requests/{id}/deny",
            {"id": id},
            query={},
            headers={},
            body={"reason": reason},
            returns={200: models.ApprovalRequestOut},
        )

    def approval_requests_grant(
        self, id: str, *, ttl_seconds: float | None = UNSET
    ) -> models.ApprovalOut:
        """POST /api/v1/approval-requests/{id}/grant"""
        return self._call(
            "POST",
            "/approval-requests/{id}/grant",
            {"id": id},
            query={},
            headers={},
            body={"ttl_seconds": ttl_seconds},
            returns={201: models.ApprovalOut},
        )

    def approval_requests_list(
        self,
        *,
        cursor: str = UNSET,
        state: list[Literal["pending", "granted", "denied", "expired"]] = UNSET,
    ) -> models.ApprovalRequestPage:
        """GET /api/v1/approval-requests"""
        return self._call(
            "GET",
            "/approval-requests",
            {},
            query={"cursor": cursor, "state": state},
            headers={},
            body=None,
            returns={200: models.ApprovalRequestPage},
        )

    def approvals_create(
        self,
        *,
        principal: str,
        tool: str,
        target: str,
        desired_state: dict[str, Any],
        expected_version: int | None = UNSET,
        ttl_seconds: float | None = UNSET,
    ) -> models.ApprovalOut:
        """POST /api/v1/approvals"""
        return self._call(
            "POST",
            "/approvals",
            {},
            query={},
            headers={},
            body={
                "principal": principal,
                "tool": tool,
                "target": target,
                "desired_state": desired_state,
                "expected_version": expected_version,
                "ttl_seconds": ttl_seconds,
            },
            returns={201: models.ApprovalOut},
        )

    def approvals_list(self, *, cursor: str = UNSET) -> models.ApprovalPage:
        """GET /api/v1/approvals"""
        return self._call(
            "GET",
            "/approvals",
            {},
            query={"cursor": cursor},
            headers={},
            body=None,
            returns={200: models.ApprovalPage},
        )

    def approvals_retrieve(self, id: str) -> models.ApprovalOut:
        """GET /api/v1/approvals/{id}"""
        return self._call(
            "GET",
            "/approvals/{id}",
            {"id": id},
            query={},
            headers={},
            body=None,
            returns={200: models.ApprovalOut},
        )

    def approvals_revoke(self, id: str, *, reason: str) -> models.ApprovalOut:
        """POST /api/v1/approvals/{id}/revoke"""
        return self._call(
            "POST",
            "/approvals/{id}/revoke",
            {"id": id},
            query={},
            headers={},
            body={"reason": reason},
            returns={200: models.ApprovalOut},
        )

    def audit_list(
        self, *, actor: str = UNSET, cursor: str = UNSET, object: str = UNSET, verb: str = UNSET
    ) -> models.AuditEventPage:
        """GET /api/v1/audit"""
        return self._call(
            "GET",
            "/audit",
            {},
            query={"actor": actor, "cursor": cursor, "object": object, "verb": verb},
            headers={},
            body=None,
            returns={200: models.AuditEventPage},
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

    def ledger_list(
        self, *, cursor: str = UNSET, key: str = UNSET, tool: str = UNSET
    ) -> models.LedgerEntryPage:
        """GET /api/v1/ledger"""
        return self._call(
            "GET",
            "/ledger",
            {},
            query={"cursor": cursor, "key": key, "tool": tool},
            headers={},
            body=None,
            returns={200: models.LedgerEntryPage},
        )

    def ledger_revoke(self, id: str, *, reason: str) -> models.LedgerEntryOut:
        """POST /api/v1/ledger/{id}/revoke"""
        return self._call(
            "POST",
            "/ledger/{id}/revoke",
            {"id": id},
            query={},
            headers={},
            body={"reason": reason},
            returns={200: models.LedgerEntryOut},
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

    def principals_create(self, *, name: str) -> models.PrincipalCreatedOut:
        """POST /api/v1/principals"""
        return self._call(
            "POST",
            "/principals",
            {},
            query={},
            headers={},
            body={"name": name},
            returns={201: models.PrincipalCreatedOut},
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

    def tokens_create(
        self,
        *,
        principal: str | None = UNSET,
        operator: str | None = UNSET,
        name: str | None = UNSET,
        expires_in_seconds: float | None = UNSET,
    ) -> models.TokenCreatedOut:
        """POST /api/v1/tokens: Tokens. Any operator lists and issues their own (no owner in the
        body); an admin lists the tenant's and issues a principal's. Nobody receives another
        operator's secret."""
        return self._call(
            "POST",
            "/tokens",
            {},
            query={},
            headers={},
            body={
                "principal": principal,
                "operator": operator,
                "name": name,
                "expires_in_seconds": expires_in_seconds,
            },
            returns={201: models.TokenCreatedOut},
        )

    def tokens_list(
        self, *, cursor: str = UNSET, state: Literal["active", "expired", "revoked"] = UNSET
    ) -> models.TokenPage:
        """GET /api/v1/tokens: Tokens. Any operator lists and issues their own (no owner in the
        body); an admin lists the tenant's and issues a principal's. Nobody receives another
        operator's secret."""
        return self._call(
            "GET",
            "/tokens",
            {},
            query={"cursor": cursor, "state": state},
            headers={},
            body=None,
            returns={200: models.TokenPage},
        )

    def tokens_revoke(self, id: str, *, reason: str | None = UNSET) -> models.TokenOut:
        """POST /api/v1/tokens/{id}/revoke"""
        return self._call(
            "POST",
            "/tokens/{id}/revoke",
            {"id": id},
            query={},
            headers={},
            body={"reason": reason},
            returns={200: models.TokenOut},
        )

    def tokens_rotate(
        self,
        id: str,
        *,
        expires_in_seconds: float | None = UNSET,
        overlap_seconds: float | None = UNSET,
        reason: str | None = UNSET,
    ) -> models.TokenCreatedOut | models.TokenOut:
        """POST /api/v1/tokens/{id}/rotate: Your own token, or (admin) a principal's: 201 with
        its successor, shown once. (Admin) another operator's token: it is revoked at once and
        there is no successor (200, the revoked token): a person's credentials are theirs
        alone."""
        return self._call(
            "POST",
            "/tokens/{id}/rotate",
            {"id": id},
            query={},
            headers={},
            body={
                "expires_in_seconds": expires_in_seconds,
                "overlap_seconds": overlap_seconds,
                "reason": reason,
            },
            returns={201: models.TokenCreatedOut, 200: models.TokenOut},
        )

    def tools_create(
        self,
        *,
        name: str,
        base_url: str,
        effect: models.EffectEnum | None = UNSET,
        lookup: bool | None = UNSET,
        requires_approval: bool | None = UNSET,
        identity_fields: list[str] | None = UNSET,
        timeout_seconds: float | None = UNSET,
        kind: models.ToolKindEnum | None = UNSET,
        mcp: dict[str, Any] | None = UNSET,
    ) -> models.ToolCreatedOut:
        """POST /api/v1/tools"""
        return self._call(
            "POST",
            "/tools",
            {},
            query={},
            headers={},
            body={
                "name": name,
                "base_url": base_url,
                "effect": effect,
                "lookup": lookup,
                "requires_approval": requires_approval,
                "identity_fields": identity_fields,
                "timeout_seconds": timeout_seconds,
                "kind": kind,
                "mcp": mcp,
            },
            returns={201: models.ToolCreatedOut},
        )

    def tools_declare(
        self,
        name: str,
        *,
        reason: str,
        effect: models.EffectEnum | None = UNSET,
        lookup: bool | None = UNSET,
    ) -> models.ToolOut:
        """POST /api/v1/tools/{name}/declaration: Change what a tool declares it is: `effect`
        and/or `lookup`, with a `reason`. Admin."""
        return self._call(
            "POST",
            "/tools/{name}/declaration",
            {"name": name},
            query={},
            headers={},
            body={"effect": effect, "lookup": lookup, "reason": reason},
            returns={200: models.ToolOut},
        )

    def tools_list(self, *, cursor: str = UNSET) -> models.ToolPage:
        """GET /api/v1/tools"""
        return self._call(
            "GET",
            "/tools",
            {},
            query={"cursor": cursor},
            headers={},
            body=None,
            returns={200: models.ToolPage},
        )

    def tools_retrieve(self, name: str) -> models.ToolOut:
        """GET /api/v1/tools/{name}: One tool, by name, with its declarations (`effect`,
        `lookup`) and who made them; to a principal without its `base_url`, as in the list."""
        return self._call(
            "GET",
            "/tools/{name}",
            {"name": name},
            query={},
            headers={},
            body=None,
            returns={200: models.ToolOut},
        )

    def tools_rotate_secret(
        self, name: str, *, overlap_seconds: float | None = UNSET, reason: str | None = UNSET
    ) -> models.ToolCreatedOut:
        """POST /api/v1/tools/{name}/rotate-secret: A new signing secret for the tool (admin,
        audited as `tool.rotate_secret`). With `overlap_seconds`, requests carry a signature
        with the old secret too until then, so the tool can switch without refusing a call."""
        return self._call(
            "POST",
            "/tools/{name}/rotate-secret",
            {"name": name},
            query={},
            headers={},
            body={"overlap_seconds": overlap_seconds, "reason": reason},
            returns={201: models.ToolCreatedOut},
        )


class AsyncApi(AsyncBase):
    """Every operation of the schema, with `await`; results are `models` dataclasses."""

    async def actions_acknowledge(self, id: str, *, note: str | None = UNSET) -> models.ActionOut:
        """POST /api/v1/actions/{id}/acknowledge: Acknowledge a blocked action (on-call): it
        leaves the queue, stays findable. 409 `state-conflict` unless it is blocked and not
        yet acknowledged."""
        return await self._call(
            "POST",
            "/actions/{id}/acknowledge",
            {"id": id},
            query={},
            headers={},
            body={"note": note},
            returns={200: models.ActionOut},
        )

    async def actions_propose(
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
        return await self._call(
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

    async def actions_reconcile(self, id: str) -> models.ActionOut:
        """POST /api/v1/actions/{id}/reconcile"""
        return await self._call(
            "POST",
            "/actions/{id}/reconcile",
            {"id": id},
            query={},
            headers={},
            body=None,
            returns={200: models.ActionOut},
        )

    async def actions_resolve(
        self,
        id: str,
        *,
        outcome: models.ResolveOutcomeEnum,
        reason: str,
        based_on_read: int | None = UNSET,
    ) -> models.ActionOut:
        """POST /api/v1/actions/{id}/resolve"""
        return await self._call(
            "POST",
            "/actions/{id}/resolve",
            {"id": id},
            query={},
            headers={},
            body={"outcome": outcome, "reason": reason, "based_on_read": based_on_read},
            returns={200: models.ActionOut},
        )

    async def actions_retrieve(self, id: str, *, wait: float = UNSET) -> models.ActionOut:
        """GET /api/v1/actions/{id}"""
        return await self._call(
            "GET",
            "/actions/{id}",
            {"id": id},
            query={"wait": wait},
            headers={},
            body=None,
            returns={200: models.ActionOut},
        )

    async def approval_requests_deny(self, id: str, *, reason: str) -> models.ApprovalRequestOut:
        """POST /api/v1/approval-requests/{id}/deny"""
        return await self._call(
            "POST",
            "/approval-requests/{id}/deny",
            {"id": id},
            query={},
            headers={},
            body={"reason": reason},
            returns={200: models.ApprovalRequestOut},
        )

    async def approval_requests_grant(
        self, id: str, *, ttl_seconds: float | None = UNSET
    ) -> models.ApprovalOut:
        """POST /api/v1/approval-requests/{id}/grant"""
        return await self._call(
            "POST",
            "/approval-requests/{id}/grant",
            {"id": id},
            query={},
            headers={},
            body={"ttl_seconds": ttl_seconds},
            returns={201: models.ApprovalOut},
        )

    async def approval_requests_list(
        self,
        *,
        cursor: str = UNSET,
        state: list[Literal["pending", "granted", "denied", "expired"]] = UNSET,
    ) -> models.ApprovalRequestPage:
        """GET /api/v1/approval-requests"""
        return await self._call(
            "GET",
            "/approval-requests",
            {},
            query={"cursor": cursor, "state": state},
            headers={},
            body=None,
            returns={200: models.ApprovalRequestPage},
        )

    async def approvals_create(
        self,
        *,
        principal: str,
        tool: str,
        target: str,
        desired_state: dict[str, Any],
        expected_version: int | None = UNSET,
        ttl_seconds: float | None = UNSET,
    ) -> models.ApprovalOut:
        """POST /api/v1/approvals"""
        return await self._call(
            "POST",
            "/approvals",
            {},
            query={},
            headers={},
            body={
                "principal": principal,
                "tool": tool,
                "target": target,
                "desired_state": desired_state,
                "expected_version": expected_version,
                "ttl_seconds": ttl_seconds,
            },
            returns={201: models.ApprovalOut},
        )

    async def approvals_list(self, *, cursor: str = UNSET) -> models.ApprovalPage:
        """GET /api/v1/approvals"""
        return await self._call(
            "GET",
            "/approvals",
            {},
            query={"cursor": cursor},
            headers={},
            body=None,
            returns={200: models.ApprovalPage},
        )

    async def approvals_retrieve(self, id: str) -> models.ApprovalOut:
        """GET /api/v1/approvals/{id}"""
        return await self._call(
            "GET",
            "/approvals/{id}",
            {"id": id},
            query={},
            headers={},
            body=None,
            returns={200: models.ApprovalOut},
        )

    async def approvals_revoke(self, id: str, *, reason: str) -> models.ApprovalOut:
        """POST /api/v1/approvals/{id}/revoke"""
        return await self._call(
            "POST",
            "/approvals/{id}/revoke",
            {"id": id},
            query={},
            headers={},
            body={"reason": reason},
            returns={200: models.ApprovalOut},
        )

    async def audit_list(
        self, *, actor: str = UNSET, cursor: str = UNSET, object: str = UNSET, verb: str = UNSET
    ) -> models.AuditEventPage:
        """GET /api/v1/audit"""
        return await self._call(
            "GET",
            "/audit",
            {},
            query={"actor": actor, "cursor": cursor, "object": object, "verb": verb},
            headers={},
            body=None,
            returns={200: models.AuditEventPage},
        )

    async def bulk_apply(self) -> models.BulkResultOut:
        """POST /api/v1/bulk/apply: Do what the preview with this `signature` said. 409
        `state-conflict` (with the new `plan`) when the plan is not that one any more: nothing
        was done. Each decision is audited by its own service, and the batch as `bulk.apply`."""
        return await self._call(
            "POST",
            "/bulk/apply",
            {},
            query={},
            headers={},
            body=None,
            returns={200: models.BulkResultOut},
        )

    async def bulk_preview(self) -> models.BulkPlanOut:
        """POST /api/v1/bulk/preview: What resolving or re-checking these actions, or replaying
        these runs, would do, item by item, without doing any of it. Items the caller cannot
        see, or may not act on, are in the plan with `will: skip` and the reason."""
        return await self._call(
            "POST",
            "/bulk/preview",
            {},
            query={},
            headers={},
            body=None,
            returns={200: models.BulkPlanOut},
        )

    async def force_replay_requests_confirm(self, id: str) -> models.RunDetailOut:
        """POST /api/v1/force-replay-requests/{id}/confirm: A second admin confirms: 201 with the
        new run. 409 for the requester themselves."""
        return await self._call(
            "POST",
            "/force-replay-requests/{id}/confirm",
            {"id": id},
            query={},
            headers={},
            body=None,
            returns={201: models.RunDetailOut},
        )

    async def force_replay_requests_list(
        self,
        *,
        cursor: str = UNSET,
        state: list[Literal["pending", "confirmed", "rejected"]] = UNSET,
    ) -> models.ForceReplayRequestPage:
        """GET /api/v1/force-replay-requests: Four-eyes force replays, newest first;
        `?state=pending` for those waiting. Admin."""
        return await self._call(
            "GET",
            "/force-replay-requests",
            {},
            query={"cursor": cursor, "state": state},
            headers={},
            body=None,
            returns={200: models.ForceReplayRequestPage},
        )

    async def force_replay_requests_reject(
        self, id: str, *, reason: str | None = UNSET
    ) -> models.ForceReplayRequestOut:
        """POST /api/v1/force-replay-requests/{id}/reject"""
        return await self._call(
            "POST",
            "/force-replay-requests/{id}/reject",
            {"id": id},
            query={},
            headers={},
            body={"reason": reason},
            returns={200: models.ForceReplayRequestOut},
        )

    async def idempotency_conflicts_list(
        self, *, cursor: str = UNSET
    ) -> models.IdempotencyConflictPage:
        """GET /api/v1/idempotency-conflicts: Every proposal refused with 422
        idempotency-conflict, newest first (operators)."""
        return await self._call(
            "GET",
            "/idempotency-conflicts",
            {},
            query={"cursor": cursor},
            headers={},
            body=None,
            returns={200: models.IdempotencyConflictPage},
        )

    async def ledger_list(
        self, *, cursor: str = UNSET, key: str = UNSET, tool: str = UNSET
    ) -> models.LedgerEntryPage:
        """GET /api/v1/ledger"""
        return await self._call(
            "GET",
            "/ledger",
            {},
            query={"cursor": cursor, "key": key, "tool": tool},
            headers={},
            body=None,
            returns={200: models.LedgerEntryPage},
        )

    async def ledger_revoke(self, id: str, *, reason: str) -> models.LedgerEntryOut:
        """POST /api/v1/ledger/{id}/revoke"""
        return await self._call(
            "POST",
            "/ledger/{id}/revoke",
            {"id": id},
            query={},
            headers={},
            body={"reason": reason},
            returns={200: models.LedgerEntryOut},
        )

    async def me(self) -> models.MeOut:
        """GET /api/v1/me"""
        return await self._call(
            "GET",
            "/me",
            {},
            query={},
            headers={},
            body=None,
            returns={200: models.MeOut},
        )

    async def principals_create(self, *, name: str) -> models.PrincipalCreatedOut:
        """POST /api/v1/principals"""
        return await self._call(
            "POST",
            "/principals",
            {},
            query={},
            headers={},
            body={"name": name},
            returns={201: models.PrincipalCreatedOut},
        )

    async def queue_list(
        self,
        *,
        cursor: str = UNSET,
        order: Literal["oldest"] = UNSET,
        state: list[Literal["unknown", "needs_human", "blocked", "awaiting_approval"]] = UNSET,
        tool: list[str] = UNSET,
    ) -> models.ActionPage:
        """GET /api/v1/queue"""
        return await self._call(
            "GET",
            "/queue",
            {},
            query={"cursor": cursor, "order": order, "state": state, "tool": tool},
            headers={},
            body=None,
            returns={200: models.ActionPage},
        )

    async def replays_list(self, *, cursor: str = UNSET) -> models.ReplayPage:
        """GET /api/v1/replays"""
        return await self._call(
            "GET",
            "/replays",
            {},
            query={"cursor": cursor},
            headers={},
            body=None,
            returns={200: models.ReplayPage},
        )

    async def runs_claim(self) -> models.RunDetailOut | None:
        """POST /api/v1/runs/claim"""
        return await self._call(
            "POST",
            "/runs/claim",
            {},
            query={},
            headers={},
            body=None,
            returns={200: models.RunDetailOut, 204: None},
        )

    async def runs_finish(
        self,
        id: str,
        *,
        status: models.RunFinishInStatusEnum,
        error_message: str | None = UNSET,
        tools_called: list[str] | None = UNSET,
    ) -> models.RunDetailOut:
        """POST /api/v1/runs/{id}/finish"""
        return await self._call(
            "POST",
            "/runs/{id}/finish",
            {"id": id},
            query={},
            headers={},
            body={"status": status, "error_message": error_message, "tools_called": tools_called},
            returns={200: models.RunDetailOut},
        )

    async def runs_heartbeat(self, id: str) -> models.RunOut:
        """POST /api/v1/runs/{id}/heartbeat"""
        return await self._call(
            "POST",
            "/runs/{id}/heartbeat",
            {"id": id},
            query={},
            headers={},
            body=None,
            returns={200: models.RunOut},
        )

    async def runs_list(
        self,
        *,
        cursor: str = UNSET,
        status: list[Literal["pending", "running", "success", "error", "cancelled"]] = UNSET,
    ) -> models.RunPage:
        """GET /api/v1/runs"""
        return await self._call(
            "GET",
            "/runs",
            {},
            query={"cursor": cursor, "status": status},
            headers={},
            body=None,
            returns={200: models.RunPage},
        )

    async def runs_replay(
        self, id: str, *, force: bool | None = UNSET, reason: str | None = UNSET
    ) -> models.RunDetailOut | models.ForceReplayRequestOut:
        """POST /api/v1/runs/{id}/replay"""
        return await self._call(
            "POST",
            "/runs/{id}/replay",
            {"id": id},
            query={},
            headers={},
            body={"force": force, "reason": reason},
            returns={201: models.RunDetailOut, 202: models.ForceReplayRequestOut},
        )

    async def runs_retrieve(self, id: str) -> models.RunDetailOut:
        """GET /api/v1/runs/{id}"""
        return await self._call(
            "GET",
            "/runs/{id}",
            {"id": id},
            query={},
            headers={},
            body=None,
            returns={200: models.RunDetailOut},
        )

    async def runs_start(
        self,
        *,
        trigger: models.TriggerEnum,
        config: dict[str, Any] | None = UNSET,
        session_id: str | None = UNSET,
        input_file: bytes | tuple[str, bytes] = UNSET,
    ) -> models.RunDetailOut:
        """POST /api/v1/runs"""
        return await self._call(
            "POST",
            "/runs",
            {},
            query={},
            headers={},
            body={"trigger": trigger, "config": config, "session_id": session_id},
            files={"input_file": input_file},
            returns={201: models.RunDetailOut},
        )

    async def settings_retrieve(self) -> models.TenantSettingsOut:
        """GET /api/v1/settings: The tenant's settings (admin): `four_eyes_force_replay`,
        `approval_sla_seconds`, and the notification thresholds. A POST changes the fields it
        names."""
        return await self._call(
            "GET",
            "/settings",
            {},
            query={},
            headers={},
            body=None,
            returns={200: models.TenantSettingsOut},
        )

    async def settings_update(
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
        return await self._call(
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

    async def tokens_create(
        self,
        *,
        principal: str | None = UNSET,
        operator: str | None = UNSET,
        name: str | None = UNSET,
        expires_in_seconds: float | None = UNSET,
    ) -> models.TokenCreatedOut:
        """POST /api/v1/tokens: Tokens. Any operator lists and issues their own (no owner in the
        body); an admin lists the tenant's and issues a principal's. Nobody receives another
        operator's secret."""
        return await self._call(
            "POST",
            "/tokens",
            {},
            query={},
            headers={},
            body={
                "principal": principal,
                "operator": operator,
                "name": name,
                "expires_in_seconds": expires_in_seconds,
            },
            returns={201: models.TokenCreatedOut},
        )

    async def tokens_list(
        self, *, cursor: str = UNSET, state: Literal["active", "expired", "revoked"] = UNSET
    ) -> models.TokenPage:
        """GET /api/v1/tokens: Tokens. Any operator lists and issues their own (no owner in the
        body); an admin lists the tenant's and issues a principal's. Nobody receives another
        operator's secret."""
        return await self._call(
            "GET",
            "/tokens",
            {},
            query={"cursor": cursor, "state": state},
            headers={},
            body=None,
            returns={200: models.TokenPage},
        )

    async def tokens_revoke(self, id: str, *, reason: str | None = UNSET) -> models.TokenOut:
        """POST /api/v1/tokens/{id}/revoke"""
        return await self._call(
            "POST",
            "/tokens/{id}/revoke",
            {"id": id},
            query={},
            headers={},
            body={"reason": reason},
            returns={200: models.TokenOut},
        )

    async def tokens_rotate(
        self,
        id: str,
        *,
        expires_in_seconds: float | None = UNSET,
        overlap_seconds: float | None = UNSET,
        reason: str | None = UNSET,
    ) -> models.TokenCreatedOut | models.TokenOut:
        """POST /api/v1/tokens/{id}/rotate: Your own token, or (admin) a principal's: 201 with
        its successor, shown once. (Admin) another operator's token: it is revoked at once and
        there is no successor (200, the revoked token): a person's credentials are theirs
        alone."""
        return await self._call(
            "POST",
            "/tokens/{id}/rotate",
            {"id": id},
            query={},
            headers={},
            body={
                "expires_in_seconds": expires_in_seconds,
                "overlap_seconds": overlap_seconds,
                "reason": reason,
            },
            returns={201: models.TokenCreatedOut, 200: models.TokenOut},
        )

    async def tools_create(
        self,
        *,
        name: str,
        base_url: str,
        effect: models.EffectEnum | None = UNSET,
        lookup: bool | None = UNSET,
        requires_approval: bool | None = UNSET,
        identity_fields: list[str] | None = UNSET,
        timeout_seconds: float | None = UNSET,
        kind: models.ToolKindEnum | None = UNSET,
        mcp: dict[str, Any] | None = UNSET,
    ) -> models.ToolCreatedOut:
        """POST /api/v1/tools"""
        return await self._call(
            "POST",
            "/tools",
            {},
            query={},
            headers={},
            body={
                "name": name,
                "base_url": base_url,
                "effect": effect,
                "lookup": lookup,
                "requires_approval": requires_approval,
                "identity_fields": identity_fields,
                "timeout_seconds": timeout_seconds,
                "kind": kind,
                "mcp": mcp,
            },
            returns={201: models.ToolCreatedOut},
        )

    async def tools_declare(
        self,
        name: str,
        *,
        reason: str,
        effect: models.EffectEnum | None = UNSET,
        lookup: bool | None = UNSET,
    ) -> models.ToolOut:
        """POST /api/v1/tools/{name}/declaration: Change what a tool declares it is: `effect`
        and/or `lookup`, with a `reason`. Admin."""
        return await self._call(
            "POST",
            "/tools/{name}/declaration",
            {"name": name},
            query={},
            headers={},
            body={"effect": effect, "lookup": lookup, "reason": reason},
            returns={200: models.ToolOut},
        )

    async def tools_list(self, *, cursor: str = UNSET) -> models.ToolPage:
        """GET /api/v1/tools"""
        return await self._call(
            "GET",
            "/tools",
            {},
            query={"cursor": cursor},
            headers={},
            body=None,
            returns={200: models.ToolPage},
        )

    async def tools_retrieve(self, name: str) -> models.ToolOut:
        """GET /api/v1/tools/{name}: One tool, by name, with its declarations (`effect`,
        `lookup`) and who made them; to a principal without its `base_url`, as in the list."""
        return await self._call(
            "GET",
            "/tools/{name}",
            {"name": name},
            query={},
            headers={},
            body=None,
            returns={200: models.ToolOut},
        )

    async def tools_rotate_secret(
        self, name: str, *, overlap_seconds: float | None = UNSET, reason: str | None = UNSET
    ) -> models.ToolCreatedOut:
        """POST /api/v1/tools/{name}/rotate-secret: A new signing secret for the tool (admin,
        audited as `tool.rotate_secret`). With `overlap_seconds`, requests carry a signature
        with the old secret too until then, so the tool can switch without refusing a call."""
        return await self._call(
            "POST",
            "/tools/{name}/rotate-secret",
            {"name": name},
            query={},
            headers={},
            body={"overlap_seconds": overlap_seconds, "reason": reason},
            returns={201: models.ToolCreatedOut},
        )
