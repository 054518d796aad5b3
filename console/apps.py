from django.apps import AppConfig
from django.core import checks


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "The operator console"

    def ready(self):
        from notifications import links

        from .links import subject_path

        checks.register(check_sso)
        links.register(subject_path)  # the notifications' links are the console's pages


def check_sso(app_configs=None, **kwargs):
    """Single sign-on that is half configured, or a group mapping with a typo, stops the
    process at start-up (manage.py migrate, check), not at someone's first sign-in."""
    from django.conf import settings

    from .sso import group_roles

    errors = []
    try:
        group_roles()
    except ValueError as exc:
        errors.append(checks.Error(str(exc), id="takeover.E003"))
    if settings.SSO_ENABLED:
        missing = [name for name in SSO_REQUIRED if not getattr(settings, name, "")]
        if missing:
            errors.append(
                checks.Error(
                    "Single sign-on is on (OIDC_RP_CLIENT_ID) but not configured: "
                    + ", ".join(missing),
                    hint="The endpoints are in the provider's /.well-known/openid-configuration.",
                    id="takeover.E004",
                )
            )
    return errors


SSO_REQUIRED = [
    "OIDC_RP_CLIENT_SECRET",
    "OIDC_OP_ISSUER",
    "OIDC_OP_AUTHORIZATION_ENDPOINT",
    "OIDC_OP_TOKEN_ENDPOINT",
    "OIDC_OP_USER_ENDPOINT",
    "OIDC_OP_JWKS_ENDPOINT",
    "OIDC_GROUP_ROLES",
]
