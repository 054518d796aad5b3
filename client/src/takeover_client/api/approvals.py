"""The operations of Takeover's HTTP API v1 on approvals, typed.

Generated from the OpenAPI schema by client/generate.py: do not edit by hand."""

from __future__ import annotations

from typing import Any, Literal

from .. import models
from .._model import UNSET


class ApprovalsOperations:
    """`client.api.<operation>` for approvals: `Api` and `AsyncApi` inherit these."""

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
