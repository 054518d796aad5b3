"""Raw approvals and approval requests, view-only (see core.admin)."""

from django.contrib import admin

from core.admin import ReadOnlyAdmin

from .models import Approval, ApprovalRequest


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    list_display = ("id", "tenant", "tool", "target", "state", "expires_at", "consumed_by_action")
    list_filter = ("state", "tenant")
    search_fields = ("id", "target")
    ordering = ("-granted_at",)


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(ReadOnlyAdmin):
    list_display = ("id", "tenant", "tool", "target", "state", "created_at", "decided_at")
    list_filter = ("state", "tenant")
    search_fields = ("id", "target", "action_id")
    ordering = ("-created_at",)
