"""The console's pages. Every mutation is a POST to a URL of its own."""

from django.contrib.auth import views as auth_views
from django.urls import path

from . import signin, views

app_name = "console"

urlpatterns = [
    path("", views.queue, name="queue"),
    path("login/", signin.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("tenant/", views.switch_tenant, name="switch_tenant"),
    path("actions/<uuid:pk>/", views.action_detail, name="action"),
    path("actions/<uuid:pk>/recheck/", views.action_recheck, name="action_recheck"),
    path("actions/<uuid:pk>/claim/", views.action_claim, name="action_claim"),
    path("actions/<uuid:pk>/release/", views.action_release, name="action_release"),
    path("actions/<uuid:pk>/resolve/", views.action_resolve, name="action_resolve"),
    path("approvals/", views.approvals, name="approvals"),
    path("approvals/<uuid:pk>/grant/", views.approval_grant, name="approval_grant"),
    path("approvals/<uuid:pk>/deny/", views.approval_deny, name="approval_deny"),
    path("runs/", views.runs, name="runs"),
    path("runs/<uuid:pk>/", views.run_detail, name="run"),
    path("runs/<uuid:pk>/replay/", views.run_replay, name="run_replay"),
    path("runs/<uuid:pk>/force-replay/", views.run_force_replay, name="run_force_replay"),
    path("replays/", views.replays, name="replays"),
    path("replays.csv", views.replays_csv, name="replays_csv"),
    path("audit/", views.audit, name="audit"),
    path("audit.csv", views.audit_csv, name="audit_csv"),
]
