"""Who is calling: a principal (agent runtime) or an operator, always within one tenant.

`request.user` becomes a `core.access.Viewer`, the one type the API and the console share.
Operators with several memberships name the tenant in `X-Takeover-Tenant`; a tenant they are
not a member of, existing or not, is a 403 (so the answer never says whether it exists).
"""

from datetime import timedelta

from django.db.models import Q
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from core.access import TENANT_HEADER, operator_viewer, principal_viewer, token_lookup
from core.models import ApiToken, hash_token

LAST_USED_RESOLUTION = timedelta(minutes=1)
INVALID_TOKEN = "Invalid, expired or revoked token."


class BearerTokenAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request, lookup=None):
        """`lookup`: the token's lookup, `core.access.token_lookup` by default; a hot view
        may read what it needs beside it in the same statement (api/views/fast.py)."""
        header = request.headers.get("Authorization", "")
        if not header:
            return None
        scheme, _, raw = header.partition(" ")
        if scheme.lower() != "bearer" or not raw.strip():
            raise exceptions.AuthenticationFailed("Use 'Authorization: Bearer <token>'.")
        now = timezone.now()
        token = (lookup or token_lookup)(hash_token(raw.strip()), now)
        # A disabled operator's token gets the same words as an unknown one: nothing tells
        # a caller that this one exists, or whose it was.
        if token is None or (token.user_id is not None and not token.user.is_active):
            raise exceptions.AuthenticationFailed(INVALID_TOKEN)
        if token.last_used_at is None or token.last_used_at < now - LAST_USED_RESOLUTION:
            # Conditional, so a burst of requests writes once; never inside the request's
            # own transaction, so a rolled-back request still counts as a use.
            ApiToken.objects.filter(pk=token.pk).filter(
                Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
            ).update(last_used_at=now)
        if token.principal is not None:
            caller = principal_viewer(token.principal)
        else:
            caller = operator_viewer(token.user, request.headers.get(TENANT_HEADER))
        return caller.into_log_context(), token

    def authenticate_header(self, request):
        return 'Bearer realm="takeover"'


class ConsoleSessionAuthentication(authentication.SessionAuthentication):
    """Operators signed in to the console may call the API with their session (and CSRF)."""

    def authenticate(self, request):
        result = super().authenticate(request)
        if result is None:
            return None
        user, _ = result
        slug = request.headers.get(TENANT_HEADER) or request._request.session.get("tenant")
        return operator_viewer(user, slug).into_log_context(), None


# --- their OpenAPI descriptions (drf-spectacular registers these when this module loads,
# which DRF does to authenticate anything, the schema included) ---------------------------


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "api.auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A principal's or operator's API token. Operators in several "
            "tenants add `X-Takeover-Tenant: <slug>`.",
        }


class ConsoleSessionScheme(OpenApiAuthenticationExtension):
    target_class = "api.auth.ConsoleSessionAuthentication"
    name = "consoleSession"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "cookie", "name": "sessionid"}
