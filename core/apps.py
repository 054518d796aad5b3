from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Tenants, identities, tools and audit"

    def ready(self):
        from .api import schema  # noqa: F401 -- registers the OpenAPI auth extensions
