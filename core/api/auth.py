"""Who is calling: a principal (agent runtime) or an operator, always within one tenant.

`request.user` becomes a `Caller`. Operators with several memberships name the tenant in
`X-Takeover-Tenant`; a tenant they are not a member of, existing or not, is a 403 (so the
answer never says whether it exists).
"""

from dataclasses import dataclass, field

from django.db import connection
from django.utils.functional import cached_property
from rest_framework import authentication, exceptions

from core.audit import Actor
from core.errors import ValidationFailed
from core.models import ApiToken, Membership, Principal, Tenant, hash_token
from core.rows import columns, instance, width

TENANT_HEADER = "X-Takeover-Tenant"


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
WHERE k.key_hash = %s AND k.revoked_at IS NULL
"""  # noqa: S608 -- built from model metadata only


def token_lookup(key_hash: str) -> ApiToken | None:
    """The live token with this hash, its principal and tenant loaded (an operator's user
    is loaded on first use)."""
    with connection.cursor() as cursor:
        cursor.execute(TOKEN_LOOKUP, [key_hash])
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
        token = token_lookup(hash_token(raw.strip()))
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked token.")
        if token.principal is not None:
            caller = Caller("principal", token.principal.tenant, principal=token.principal)
        else:
            if not token.user.is_active:
                # The same words as an unknown token: nothing tells a caller that this one
                # exists, or whose it was.
                raise exceptions.AuthenticationFailed("Invalid or revoked token.")
            caller = operator_caller(token.user, request.headers.get(TENANT_HEADER))
        return caller, token

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
        return operator_caller(user, slug), None
