"""Raw records of runs, actions, attempts, reads and replays, view-only (see core.admin)."""

from django.contrib import admin

from core.admin import ReadOnlyAdmin

from .models import Action, Attempt, Reconciliation, Replay, Run


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ("id", "tenant", "principal", "trigger", "status", "created_at", "replay_of")
    list_filter = ("status", "trigger", "tenant")
    search_fields = ("id", "session_id")
    ordering = ("-created_at",)
    show_full_result_count = False


class AttemptInline(admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class ReconciliationInline(AttemptInline):
    model = Reconciliation


@admin.register(Action)
class ActionAdmin(ReadOnlyAdmin):
    list_display = ("id", "tenant", "tool", "target", "state", "created_at", "claimed_by")
    list_filter = ("state", "tenant")
    search_fields = ("id", "target", "idempotency_key")
    ordering = ("-created_at",)
    inlines = (AttemptInline, ReconciliationInline)
    show_full_result_count = False


@admin.register(Replay)
class ReplayAdmin(ReadOnlyAdmin):
    list_display = ("at", "tenant", "original_run", "new_run", "forced", "reason")
    list_filter = ("forced", "tenant")
    ordering = ("-at",)
