"""Raw ledger entries, view-only (see core.admin); revoke through the API or a service."""

from django.contrib import admin

from core.admin import ReadOnlyAdmin

from .models import LedgerEntry


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ("key", "generation", "tenant", "tool", "status", "created_at", "revoked_at")
    list_filter = ("status", "tenant")
    search_fields = ("key", "action_id")
    ordering = ("-created_at",)
    show_full_result_count = False
