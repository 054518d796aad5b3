"""Every operation of Takeover's HTTP API v1, typed: `client.api.<operation>`.

Generated from the OpenAPI schema by client/generate.py: do not edit by hand."""

from .._api import AsyncBase, SyncBase
from .admin import AdminOperations
from .runs import RunsOperations

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


class Api(RunsOperations, AdminOperations, SyncBase):
    """Every operation of the schema, synchronous; results are `models` dataclasses."""


class AsyncApi(RunsOperations, AdminOperations, AsyncBase):
    """Every operation of the schema, each returning an awaitable of the same `models`
    dataclass (`await client.api.<operation>(...)`)."""
