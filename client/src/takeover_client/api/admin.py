"""The operations of Takeover's HTTP API v1 on admin, typed.

Generated from the OpenAPI schema by client/generate.py: do not edit by hand."""

from __future__ import annotations

from typing import Any, Literal

from .. import models
from .._api import operation
from .._model import UNSET


class AdminOperations:
    """`client.api.<operation>` for admin: `Api` and `AsyncApi` inherit these."""

    @operation("POST", "/approval-requests/{id}/deny", returns={200: models.ApprovalRequestOut})
    def approval_requests_deny(self, id: str, *, reason: str) -> models.ApprovalRequestOut:
        """POST /api/v1/approval-requests/{id}/deny"""

    @operation("POST", "/approval-requests/{id}/grant", returns={201: models.ApprovalOut})
    def approval_requests_grant(
        self, id: str, *, ttl_seconds: float | None = UNSET
    ) -> models.ApprovalOut:
        """POST /api/v1/approval-requests/{id}/grant"""

    @operation("GET", "/approval-requests", returns={200: models.ApprovalRequestPage})
    def approval_requests_list(
        self,
        *,
        cursor: str = UNSET,
        state: list[Literal["pending", "granted", "denied", "expired"]] = UNSET,
    ) -> models.ApprovalRequestPage:
        """GET /api/v1/approval-requests"""

    @operation("POST", "/approvals", returns={201: models.ApprovalOut})
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

    @operation("GET", "/approvals", returns={200: models.ApprovalPage})
    def approvals_list(self, *, cursor: str = UNSET) -> models.ApprovalPage:
        """GET /api/v1/approvals"""

    @operation("GET", "/approvals/{id}", returns={200: models.ApprovalOut})
    def approvals_retrieve(self, id: str) -> models.ApprovalOut:
        """GET /api/v1/approvals/{id}"""

    @operation("POST", "/approvals/{id}/revoke", returns={200: models.ApprovalOut})
    def approvals_revoke(self, id: str, *, reason: str) -> models.ApprovalOut:
        """POST /api/v1/approvals/{id}/revoke"""

    @operation("GET", "/audit", returns={200: models.AuditEventPage})
    def audit_list(
        self, *, actor: str = UNSET, cursor: str = UNSET, object: str = UNSET, verb: str = UNSET
    ) -> models.AuditEventPage:
        """GET /api/v1/audit"""

    @operation("GET", "/ledger", returns={200: models.LedgerEntryPage})
    def ledger_list(
        self, *, cursor: str = UNSET, key: str = UNSET, tool: str = UNSET
    ) -> models.LedgerEntryPage:
        """GET /api/v1/ledger"""

    @operation("POST", "/ledger/{id}/revoke", returns={200: models.LedgerEntryOut})
    def ledger_revoke(self, id: str, *, reason: str) -> models.LedgerEntryOut:
        """POST /api/v1/ledger/{id}/revoke"""

    @operation("POST", "/principals", returns={201: models.PrincipalCreatedOut})
    def principals_create(self, *, name: str) -> models.PrincipalCreatedOut:
        """POST /api/v1/principals"""

    @operation("POST", "/tokens", returns={201: models.TokenCreatedOut})
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

    @operation("GET", "/tokens", returns={200: models.TokenPage})
    def tokens_list(
        self, *, cursor: str = UNSET, state: Literal["active", "expired", "revoked"] = UNSET
    ) -> models.TokenPage:
        """GET /api/v1/tokens: Tokens. Any operator lists and issues their own (no owner in the
        body); an admin lists the tenant's and issues a principal's. Nobody receives another
        operator's secret."""

    @operation("POST", "/tokens/{id}/revoke", returns={200: models.TokenOut})
    def tokens_revoke(self, id: str, *, reason: str | None = UNSET) -> models.TokenOut:
        """POST /api/v1/tokens/{id}/revoke"""

    @operation(
        "POST", "/tokens/{id}/rotate", returns={201: models.TokenCreatedOut, 200: models.TokenOut}
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

    @operation("POST", "/tools", returns={201: models.ToolCreatedOut})
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

    @operation("POST", "/tools/{name}/declaration", returns={200: models.ToolOut})
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

    @operation("GET", "/tools", returns={200: models.ToolPage})
    def tools_list(self, *, cursor: str = UNSET) -> models.ToolPage:
        """GET /api/v1/tools"""

    @operation("GET", "/tools/{name}", returns={200: models.ToolOut})
    def tools_retrieve(self, name: str) -> models.ToolOut:
        """GET /api/v1/tools/{name}: One tool, by name, with its declarations (`effect`,
        `lookup`) and who made them; to a principal without its `base_url`, as in the list."""

    @operation("POST", "/tools/{name}/rotate-secret", returns={201: models.ToolCreatedOut})
    def tools_rotate_secret(
        self, name: str, *, overlap_seconds: float | None = UNSET, reason: str | None = UNSET
    ) -> models.ToolCreatedOut:
        """POST /api/v1/tools/{name}/rotate-secret: A new signing secret for the tool (admin,
        audited as `tool.rotate_secret`). With `overlap_seconds`, requests carry a signature
        with the old secret too until then, so the tool can switch without refusing a call."""
