from django.urls import include, path, register_converter
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from .views import action, admin, run


class ToolName:
    """A tool's name as registration allows it (`ToolIn.name`): anything else in the path,
    a NUL included, is no tool (a 404), and never reaches the database."""

    regex = r"[A-Za-z0-9_.-]{1,100}"

    def to_python(self, value):
        return value

    def to_url(self, value):
        return value


register_converter(ToolName, "tool")

force_request_urls = [
    path("confirm", run.force_replay_confirm, name="force-request-confirm"),
    path("reject", run.force_replay_reject, name="force-request-reject"),
]
tool_urls = [
    path("declaration", admin.tool_declaration, name="tool-declaration"),
    path("rotate-secret", admin.tool_rotate_secret_view, name="tool-rotate-secret"),
]

urlpatterns = [
    # The POSTs that act on one object, under its URL.
    path("force-replay-requests/<uuid:pk>/", include(force_request_urls)),
    path("tools/<tool:name>/", include(tool_urls)),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api:schema"), name="docs"),
    path("me", run.me, name="me"),
    path("runs", run.runs, name="runs"),
    path("runs/claim", run.run_claim, name="run-claim"),
    path("runs/<uuid:pk>", run.run_detail, name="run"),
    path("runs/<uuid:pk>/heartbeat", run.run_heartbeat, name="run-heartbeat"),
    path("runs/<uuid:pk>/finish", run.run_finish, name="run-finish"),
    path("runs/<uuid:pk>/actions", action.propose, name="run-actions"),
    path("runs/<uuid:pk>/replay", run.run_replay, name="run-replay"),
    path("replays", run.replays, name="replays"),
    path("force-replay-requests", run.force_replay_requests, name="force-requests"),
    path("settings", run.tenant_settings, name="settings"),
    path("actions/<uuid:pk>", action.action_detail, name="action"),
    path("actions/<uuid:pk>/reconcile", action.action_reconcile, name="action-reconcile"),
    path("actions/<uuid:pk>/resolve", action.action_resolve, name="action-resolve"),
    path("actions/<uuid:pk>/acknowledge", action.action_acknowledge, name="action-acknowledge"),
    path("queue", action.queue, name="queue"),
    path("bulk/preview", action.bulk_preview, name="bulk-preview"),
    path("bulk/apply", action.bulk_apply, name="bulk-apply"),
    path("idempotency-conflicts", action.idempotency_conflicts, name="idempotency-conflicts"),
    path("approval-requests", admin.approval_requests, name="approval-requests"),
    path("approval-requests/<uuid:pk>/grant", admin.approval_request_grant, name="request-grant"),
    path("approval-requests/<uuid:pk>/deny", admin.approval_request_deny, name="request-deny"),
    path("approvals", admin.approvals_collection, name="approvals"),
    path("approvals/<uuid:pk>", admin.approval_detail, name="approval"),
    path("approvals/<uuid:pk>/revoke", admin.approval_revoke, name="approval-revoke"),
    path("ledger", admin.ledger, name="ledger"),
    path("ledger/<uuid:pk>/revoke", admin.ledger_revoke_view, name="ledger-revoke"),
    path("audit", admin.audit, name="audit"),
    path("tools", admin.tools, name="tools"),
    path("tools/<tool:name>", admin.tool_detail, name="tool"),
    path("principals", admin.principals, name="principals"),
    path("tokens", admin.tokens, name="tokens"),
    path("tokens/<uuid:pk>/revoke", admin.token_revoke_view, name="token-revoke"),
    path("tokens/<uuid:pk>/rotate", admin.token_rotate_view, name="token-rotate"),
]
