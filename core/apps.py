from django.apps import AppConfig
from django.core import checks
from django.db.backends.signals import connection_created
from django.db.models.signals import post_migrate


def _session_settings(sender, connection, **kwargs):
    """Per-session settings, sent as SET once a connection opens: a startup `options`
    parameter would be refused by PgBouncer."""
    from django.conf import settings

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config(%s, %s, false)",
                ["lock_timeout", f"{settings.DATABASE_LOCK_TIMEOUT_MS}ms"],
            )


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Tenants, identities, tools and audit"

    def ready(self):
        from .dbroles import check_app_role, grant_app_role

        checks.register(check_egress_allowlist)
        checks.register(check_secret_key, checks.Tags.security, deploy=True)
        checks.register(check_app_role, checks.Tags.security, deploy=True)
        # After every migrate, once (sent per app; we listen to core's), when all tables exist.
        post_migrate.connect(grant_app_role, sender=self, dispatch_uid="takeover.grant_app_role")
        connection_created.connect(_session_settings, dispatch_uid="takeover-session-settings")


def check_egress_allowlist(app_configs=None, **kwargs):
    """A bad TOOL_URL_ALLOWLIST entry stops the process at start-up, not at the first call."""
    from django.core.exceptions import ImproperlyConfigured

    from .egress import allowlist

    try:
        allowlist()
    except ImproperlyConfigured as exc:
        return [checks.Error(str(exc), id="takeover.E001")]
    return []


def check_secret_key(app_configs=None, **kwargs):
    from django.conf import settings

    if getattr(settings, "SECRET_KEY_GENERATED", False):
        return [
            checks.Error(
                "SECRET_KEY is not set: this process generated one into its var/ directory.",
                hint="Set SECRET_KEY in the environment, the same for every process.",
                id="takeover.E002",
            )
        ]
    return []
