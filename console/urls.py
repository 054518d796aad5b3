"""The console's pages. Every mutation is a POST to a URL of its own."""

from django.contrib.auth import views as auth_views
from django.urls import include, path

from . import (
    action_views,
    approval_views,
    audit_views,
    bulk,
    notifications,
    replay_views,
    run_views,
    settings_views,
    signin,
    sso,
    tokens,
    tools,
    views,
)

app_name = "console"


action_urls = [
    path("", action_views.action_detail, name="action"),
    path("recheck/", action_views.action_recheck, name="action_recheck"),
    path("claim/", action_views.action_claim, name="action_claim"),
    path("release/", action_views.action_release, name="action_release"),
    path("resolve/", action_views.action_resolve, name="action_resolve"),
    path("acknowledge/", action_views.action_acknowledge, name="action_acknowledge"),
]
force_request_urls = [
    path("", replay_views.force_review, name="force_review"),
    path("confirm/", replay_views.force_request_decide, {"decision": "confirm"}, "force_confirm"),
    path("reject/", replay_views.force_request_decide, {"decision": "reject"}, "force_reject"),
]
channel_urls = [
    path("", notifications.channel_update_view, name="channel_update"),
    path("rotate/", notifications.channel_rotate_view, name="channel_rotate"),
    path("test/", notifications.channel_test_view, name="channel_test"),
]

urlpatterns = [
    # One object's page and the POSTs that act on it, under its URL.
    path("actions/<uuid:pk>/", include(action_urls)),
    path("force-replays/<uuid:pk>/", include(force_request_urls)),
    path("notifications/channels/<uuid:pk>/", include(channel_urls)),
    path("", views.queue, name="queue"),
    path("login/", signin.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("sso/start/", sso.start, name="sso_start"),
    path("sso/callback/", sso.callback, name="sso_callback"),
    path("tenant/", views.switch_tenant, name="switch_tenant"),
    path("search/", views.search, name="search"),
    path("nav-counts/", views.nav_counts, name="nav_counts"),
    path("preferences/", views.preferences, name="preferences"),
    path("actions/", views.actions_list, name="actions"),
    path("actions.csv", views.actions_csv, name="actions_csv"),
    path("conflicts/", views.conflicts, name="conflicts"),
    path("approvals/", approval_views.approvals, name="approvals"),
    path("approvals/<uuid:pk>/state/", approval_views.approval_target_state, name="approval_state"),
    path("approvals/<uuid:pk>/grant/", approval_views.approval_grant, name="approval_grant"),
    path("approvals/<uuid:pk>/deny/", approval_views.approval_deny, name="approval_deny"),
    path("runs/", run_views.runs, name="runs"),
    path("runs/<uuid:pk>/", run_views.run_detail, name="run"),
    path("runs/<uuid:pk>/replay/", replay_views.run_replay, name="run_replay"),
    path("runs/<uuid:pk>/force-replay/", replay_views.run_force_replay, name="run_force_replay"),
    path("replays/", replay_views.replays, name="replays"),
    path("replays.csv", replay_views.replays_csv, name="replays_csv"),
    path("force-replays/", replay_views.force_inbox, name="force_inbox"),
    path("settings/", settings_views.tenant_settings, name="tenant_settings"),
    path("tools/", tools.tools, name="tools"),
    path("tools/<uuid:pk>/confirm/", tools.confirm_suggestion, name="tool_confirm"),
    path("audit/", audit_views.audit, name="audit"),
    path("audit.csv", audit_views.audit_csv, name="audit_csv"),
    path("bulk/", bulk.bulk_preview, name="bulk_preview"),
    path("bulk/confirm/", bulk.bulk_confirm, name="bulk_confirm"),
    path("bulk/done/", bulk.bulk_done, name="bulk_done"),
    path("notifications/", notifications.notifications, name="notifications"),
    path("notifications/channels/", notifications.channel_create_view, name="channel_create"),
    path("notifications/settings/", settings_views.settings_save, name="notification_settings"),
    path("notifications/deliveries/", notifications.deliveries, name="deliveries"),
    path(
        "notifications/deliveries/<int:pk>/retry/",
        notifications.delivery_retry_view,
        name="delivery_retry",
    ),
    path("tokens/", tokens.tokens, name="tokens"),
    path("tokens/issue/", tokens.token_issue_view, name="token_issue"),
    path("tokens/<uuid:pk>/revoke/", tokens.token_revoke_view, name="token_revoke"),
    path("tokens/<uuid:pk>/rotate/", tokens.token_rotate_view, name="token_rotate"),
]
