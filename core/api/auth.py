"""Who is calling: a principal (agent runtime) or an operator, always within one tenant.

`request.user` becomes a `Caller`. Operators with several memberships name the tenant in
`X-Takeover-Tenant`; a tenant they are not a member of, existing or not, is a 403 (so the
answer never says whether it exists).
"""

from dataclasses import dataclass, field
from datetime import timedelta

from django.db import connection
from django.db.models import Q
from django.utils import timezone
from django.utils.functional import cached_property
from rest_framework import authentication, exceptions

from core.audit import Actor
from core.errors import ValidationFailed
from core.logs import actor_var, tenant_var
from core.models import ApiToken, Membership, Principal, Tenant, hash_token
from core.rows import columns, instance, width

TENANT_HEADER = "X-Takeover-Tenant"
LAST_USED_RESOLUTION = timedelta(minutes=1)
INVALID_TOKEN = "Invalid, expired or revoked token."


@dataclass
class Caller:
    kind: str  # "principal" | "operator"
    tenant: Tenant
    principal: Principal | None = None
    user: object = None
    roles: list[str] = field(default_factory=list)

    is_authenticated = True
    is_anonymous = False

    @property
    def name(self) -> str:
        return self.principal.name if self.principal else self.user.get_username()

    @cached_property
    def actor(self) -> Actor:
        return Actor(self.kind, self.name)

    @property
    def is_principal(self) -> bool:
        return self.kind == "principal"

    def has_role(self, role: str) -> bool:
        return self.kind == "operator" and role in self.roles

    def into_log_context(self) -> "Caller":
        # Reset by the request middleware when the request ends.
        tenant_var.set(self.tenant.slug)
        actor_var.set(f"{self.kind}:{self.name}")
        return self


class TenantHeaderRequired(exceptions.APIException):
    status_code = 400


def operator_caller(user, tenant_slug: str | None) -> Caller:
    memberships = list(Membership.objects.filter(user=user).select_related("tenant"))
    if tenant_slug:
        match = next((m for m in memberships if m.tenant.slug == tenant_slug), None)
        if match is None:
            raise exceptions.PermissionDenied(f"You are not a member of tenant {tenant_slug!r}.")
    elif len(memberships) == 1:
        match = memberships[0]
    elif not memberships:
        raise exceptions.PermissionDenied("You are not a member of any tenant.")
    else:
        raise ValidationFailed(
            f"You are a member of several tenants; name one in the {TENANT_HEADER} header.",
            {TENANT_HEADER: ["Required when you belong to several tenants."]},
        )
    return Caller("operator", match.tenant, user=user, roles=match.roles)


# Every API request starts here, so it is one hand-written statement: the ORM's compilation
# of this select_related query cost more CPU than all the rest of a ledger hit.
TOKEN_LOOKUP = f"""
SELECT {columns(ApiToken, "k")}, {columns(Principal, "p")}, {columns(Tenant, "t")}
FROM core_apitoken k
LEFT JOIN core_principal p ON p.id = k.principal_id
LEFT JOIN core_tenant t ON t.id = p.tenant_id
WHERE k.key_hash = %s AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > %s)
"""  # noqa: S608 -- built from model metadata only


def token_lookup(key_hash: str, now) -> ApiToken | None:
    """The live token (neither revoked nor expired at `now`) with this hash, its principal
    and tenant loaded (an operator's user is loaded on first use)."""
    with connection.cursor() as cursor:
        cursor.execute(TOKEN_LOOKUP, [key_hash, now])
        row = cursor.fetchone()
    if row is None:
        return None
    nk, np_ = width(ApiToken), width(Principal)
    token = instance(ApiToken, row[:nk])
    if row[nk] is not None:
        principal = instance(Principal, row[nk : nk + np_])
        principal.tenant = instance(Tenant, row[nk + np_ :])
        token.principal = principal
    else:
        token.principal = None
    return token


class BearerTokenAuthentication(authentication.BaseAuthentication):
    def authenticate(self, request):
        header = request.headers.get("Authorization", "")
        if not header:
            return None
        scheme, _, raw = header.partition(" ")
        if scheme.lower() != "bearer" or not raw.strip():
            raise exceptions.AuthenticationFailed("Use 'Authorization: Bearer <token>'.")
        now = timezone.now()
        token = token_lookup(hash_token(raw.strip()), now)
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
            caller = Caller("principal", token.principal.tenant, principal=token.principal)
        else:
            caller = operator_caller(token.user, request.headers.get(TENANT_HEADER))
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
        return operator_caller(user, slug).into_log_context(), None
