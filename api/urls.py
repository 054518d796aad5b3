from django.urls import path, register_converter
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from . import views


class ToolName:
    """A tool's name as registration allows it (`ToolIn.name`): anything else in the path,
    a NUL included, is no tool (a 404), and never reaches the database."""

    regex = r"[A-Za-z0-9_.-]{1,100}"

    def to_python(self, value):
        return value

    def to_url(self, value):
        return value


register_converter(ToolName, "tool")

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api:schema"), name="docs"),
    path("me", views.me, name="me"),
    path("runs", views.runs, name="runs"),
    path("runs/claim", views.run_claim, name="run-claim"),
    path("runs/<uuid:pk>", views.run_detail, name="run"),
    path("runs/<uuid:pk>/heartbeat", views.run_heartbeat, name="run-heartbeat"),
    path("runs/<uuid:pk>/finish", views.run_finish, name="run-finish"),
    path("runs/<uuid:pk>/actions", views.propose, name="run-actions"),
    path("runs/<uuid:pk>/replay", views.run_replay, name="run-replay"),
    path("replays", views.replays, name="replays"),
    path("force-replay-requests", views.force_replay_requests, name="force-requests"),
    path(
        "force-replay-requests/<uuid:pk>/confirm",
        views.force_replay_confirm,
        name="force-request-confirm",
    ),
    path(
        "force-replay-requests/<uuid:pk>/reject",
        views.force_replay_reject,
        name="force-request-reject",
    ),
    path("settings", views.tenant_settings, name="settings"),
    path("actions/<uuid:pk>", views.action_detail, name="action"),
    path("actions/<uuid:pk>/reconcile", views.action_reconcile, name="action-reconcile"),
    path("actions/<uuid:pk>/resolve", views.action_resolve, name="action-resolve"),
    path("actions/<uuid:pk>/acknowledge", views.action_acknowledge, name="action-acknowledge"),
    path("queue", views.queue, name="queue"),
    path("bulk/preview", views.bulk_preview, name="bulk-preview"),
    path("bulk/apply", views.bulk_apply, name="bulk-apply"),
    path("idempotency-conflicts", views.idempotency_conflicts, name="idempotency-conflicts"),
    path("approval-requests", views.approval_requests, name="approval-requests"),
    path("approval-requests/<uuid:pk>/grant", views.approval_request_grant, name="request-grant"),
    path("approval-requests/<uuid:pk>/deny", views.approval_request_deny, name="request-deny"),
    path("approvals", views.approvals_collection, name="approvals"),
    path("approvals/<uuid:pk>", views.approval_detail, name="approval"),
    path("approvals/<uuid:pk>/revoke", views.approval_revoke, name="approval-revoke"),
    path("ledger", views.ledger, name="ledger"),
    path("ledger/<uuid:pk>/revoke", views.ledger_revoke_view, name="ledger-revoke"),
    path("audit", views.audit, name="audit"),
    path("tools", views.tools, name="tools"),
    path("tools/<tool:name>", views.tool_detail, name="tool"),
    path("tools/<tool:name>/declaration", views.tool_declaration, name="tool-declaration"),
    path(
        "tools/<tool:name>/rotate-secret", views.tool_rotate_secret_view, name="tool-rotate-secret"
    ),
    path("principals", views.principals, name="principals"),
    path("tokens", views.tokens, name="tokens"),
    path("tokens/<uuid:pk>/revoke", views.token_revoke_view, name="token-revoke"),
    path("tokens/<uuid:pk>/rotate", views.token_rotate_view, name="token-rotate"),
]
