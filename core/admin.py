"""Django admin for raw records. Read-only on purpose: every change of state goes through a
service that audits it (docs/design.md, invariant 8), and the admin would bypass that. The audit log
is append-only in the database as well (triggers refuse UPDATE, DELETE and TRUNCATE)."""

from django.contrib import admin

from .models import ApiToken, AuditEvent, Membership, Principal, Tenant, Tool


class ReadOnlyAdmin(admin.ModelAdmin):
    """View-only: no add, change or delete, for anyone."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Tenant)
class TenantAdmin(ReadOnlyAdmin):
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")


@admin.register(Principal)
class PrincipalAdmin(ReadOnlyAdmin):
    list_display = ("name", "tenant", "created_at")
    list_filter = ("tenant",)
    search_fields = ("name",)


@admin.register(Membership)
class MembershipAdmin(ReadOnlyAdmin):
    list_display = ("user", "tenant", "role", "created_at")
    list_filter = ("role", "tenant")
    search_fields = ("user__username",)


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    list_display = ("label", "principal", "user", "created_at", "revoked_at")
    exclude = ("key_hash",)
    list_filter = ("revoked_at",)


@admin.register(Tool)
class ToolAdmin(ReadOnlyAdmin):
    list_display = ("name", "tenant", "effect", "requires_approval", "base_url", "timeout_seconds")
    list_filter = ("tenant", "effect", "requires_approval")
    search_fields = ("name",)


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("at", "tenant", "actor_kind", "actor_name", "verb", "object_type", "object_id")
    list_filter = ("verb", "actor_kind", "object_type", "tenant")
    search_fields = ("object_id", "actor_name", "verb", "request_id")
    date_hierarchy = "at"
    ordering = ("-at",)
    show_full_result_count = False  # COUNT(*) over a large append-only table is slow
