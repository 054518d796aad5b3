from django.apps import AppConfig
from django.db.backends.signals import connection_created


def _session_settings(sender, connection, **kwargs):
    """Per-session settings, sent as SET once a connection opens: a startup `options`
    parameter would be refused by PgBouncer."""
    from django.conf import settings

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = %s", [f"{settings.DATABASE_LOCK_TIMEOUT_MS}ms"])


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Tenants, identities, tools and audit"

    def ready(self):
        from .api import schema  # noqa: F401 -- registers the OpenAPI auth extensions

        connection_created.connect(_session_settings, dispatch_uid="takeover-session-settings")
