from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from . import views

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
    path("actions/<uuid:pk>", views.action_detail, name="action"),
    path("actions/<uuid:pk>/reconcile", views.action_reconcile, name="action-reconcile"),
    path("actions/<uuid:pk>/resolve", views.action_resolve, name="action-resolve"),
    path("queue", views.queue, name="queue"),
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
    path("principals", views.principals, name="principals"),
]
