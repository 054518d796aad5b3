"""Who is looking: one `Viewer` for the three kinds of caller, and the role rules.

- an agent **principal** (API, bearer token): sees its own runs and actions only;
- an **operator on the API** (bearer token or console session): one tenant at a time, the one
  named in `X-Takeover-Tenant` (or their only one);
- an **operator in the console**: every tenant they are a member of, one of them current
  (switched in the header), so that the queue and search span their tenants.

The getters in each app's `selectors.py` take a Viewer and filter by `tenant_ids` (and, for a
principal, by the principal): another tenant's object is a 404, never a 403 that would
confirm it exists. Roles are checked against the membership of the *object's* tenant, so an
operator who approves in one tenant and is on call in another has exactly the rights of each.
The services check roles again on the `Actor` they are given (`Actor.require`), so that a
rule holds whoever calls them: the API, the console, a command or a future SDK endpoint.
"""

from dataclasses import dataclass, field

from django.db import connection
from django.utils.functional import cached_property

from .audit import Actor
from .errors import PermissionDenied, ValidationFailed
from .logs import actor_var, tenant_var
from .models import ApiToken, Membership, Principal, Role, Tenant
from .rows import columns, instance, related, width

TENANT_HEADER = "X-Takeover-Tenant"


@dataclass
class Viewer:
    kind: str  # "principal" | "operator"
    tenant: object  # the current tenant
    principal: object = None
    user: object = None
    # The operator's memberships (with .tenant), ordered by tenant slug: all of them in the
    # console; on the API only the one the request names.
    memberships: list = field(default_factory=list)

    # What Django and DRF ask of `request.user`.
    is_authenticated = True
    is_anonymous = False

    @property
    def name(self) -> str:
        return self.principal.name if self.principal else self.user.get_username()

    @property
    def is_principal(self) -> bool:
        return self.kind == "principal"

    @property
    def tenant_ids(self) -> list:
        if self.is_principal:
            return [self.tenant.pk]
        return [m.tenant_id for m in self.memberships]

    @property
    def current(self) -> Membership | None:
        return self.membership_for(self.tenant.pk)

    def membership_for(self, tenant_id) -> Membership | None:
        return next((m for m in self.memberships if m.tenant_id == tenant_id), None)

    def tenant_by_slug(self, slug: str):
        match = next((m for m in self.memberships if m.tenant.slug == slug), None)
        return match.tenant if match else None

    def roles_in(self, tenant_id=None) -> list[str]:
        membership = self.membership_for(self.tenant.pk if tenant_id is None else tenant_id)
        return list(membership.roles) if membership else []

    @property
    def roles(self) -> list[str]:
        return self.roles_in()

    def has_role(self, role: str, tenant_id=None) -> bool:
        membership = self.membership_for(self.tenant.pk if tenant_id is None else tenant_id)
        return membership is not None and membership.has_role(role)

    def require_role(self, role: str, tenant_id=None) -> None:
        """After the getter (so that another tenant's object stays a 404): the role in the
        object's tenant, or a 403 saying which role is missing where."""
        if not self.has_role(role, tenant_id):
            tenant_id = self.tenant.pk if tenant_id is None else tenant_id
            membership = self.membership_for(tenant_id)
            where = membership.tenant.slug if membership else self.tenant.slug
            raise PermissionDenied(f"This needs the {role} role in {where}.")

    @property
    def is_approver(self) -> bool:
        return self.has_role(Role.APPROVER)

    @property
    def is_oncall(self) -> bool:
        return self.has_role(Role.ONCALL)

    @property
    def is_admin(self) -> bool:
        return self.has_role(Role.ADMIN)

    def actor_for(self, tenant_id=None) -> Actor:
        """Who acts, with the roles they hold in `tenant_id` (the object's tenant), for the
        services' own role checks and for the audit trail."""
        return Actor(self.kind, self.name, roles=frozenset(self.roles_in(tenant_id)))

    @cached_property
    def actor(self) -> Actor:
        return self.actor_for()

    def into_log_context(self) -> "Viewer":
        # Reset by the request middleware when the request ends.
        tenant_var.set(self.tenant.slug)
        actor_var.set(f"{self.kind}:{self.name}")
        return self


def principal_viewer(principal) -> Viewer:
    return Viewer("principal", principal.tenant, principal=principal)


def operator_viewer(user, tenant_slug: str | None) -> Viewer:
    """An operator on the API: the tenant named by `X-Takeover-Tenant`, or their only one.
    A tenant they are not a member of, existing or not, is a 403 (the answer never says
    whether it exists)."""
    memberships = list(Membership.objects.filter(user=user).select_related("tenant"))
    if tenant_slug:
        match = next((m for m in memberships if m.tenant.slug == tenant_slug), None)
        if match is None:
            raise PermissionDenied(f"You are not a member of tenant {tenant_slug!r}.")
    elif len(memberships) == 1:
        match = memberships[0]
    elif not memberships:
        raise PermissionDenied("You are not a member of any tenant.")
    else:
        raise ValidationFailed(
            f"You are a member of several tenants; name one in the {TENANT_HEADER} header.",
            {TENANT_HEADER: ["Required when you belong to several tenants."]},
        )
    return Viewer("operator", match.tenant, user=user, memberships=[match])


def console_viewer(user, session) -> Viewer | None:
    """An operator in the console: all their memberships, the current tenant from
    `session["tenant"]` (the key the API's session authentication reads too), falling back
    to the first membership, remembered. None when the user belongs to no tenant."""
    memberships = operator_memberships(user.pk)
    if not memberships:
        return None
    slug = session.get("tenant")
    current = next((m for m in memberships if m.tenant.slug == slug), None)
    if current is None:
        current = memberships[0]
        session["tenant"] = current.tenant.slug
    return Viewer("operator", current.tenant, user=user, memberships=memberships)


# Every console request starts here: one hand-written statement, like the token lookup below
# (the ORM's select_related query cost ~0.7 ms of Python, its round trip ~0.1 ms).
MEMBERSHIPS = f"""
SELECT {columns(Membership, "m")}, {columns(Tenant, "t")}
FROM core_membership m JOIN core_tenant t ON t.id = m.tenant_id
WHERE m.user_id = %s
ORDER BY t.slug
"""  # noqa: S608 -- built from model metadata only


def operator_memberships(user_id) -> list[Membership]:
    """The operator's memberships, each with its tenant, ordered by the tenant's slug."""
    with connection.cursor() as cursor:
        cursor.execute(MEMBERSHIPS, [user_id])
        rows = cursor.fetchall()
    n = width(Membership)
    memberships = []
    for row in rows:
        membership = instance(Membership, row[:n])
        related(membership, tenant=instance(Tenant, row[n:]))
        memberships.append(membership)
    return memberships


def operator_by_pk(user_id):
    """The operator (Django's user) with this primary key, or None: what the sign-in
    backends' `get_user` reads on every console request, as one hand-written statement."""
    from django.contrib.auth import get_user_model

    model = get_user_model()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns(model, 'u')} FROM {model._meta.db_table} u "  # noqa: S608
            f"WHERE u.{model._meta.pk.column} = %s",
            [user_id],
        )
        row = cursor.fetchone()
    return instance(model, row) if row is not None else None


# Every API request starts here, so it is one hand-written statement: the ORM's compilation
# of this select_related query cost more CPU than all the rest of a ledger hit. In parts, so
# that a hot endpoint can read what it needs in the same statement (runs.selectors).
TOKEN_COLUMNS = f"{columns(ApiToken, 'k')}, {columns(Principal, 'p')}, {columns(Tenant, 't')}"
TOKEN_FROM = """core_apitoken k
LEFT JOIN core_principal p ON p.id = k.principal_id
LEFT JOIN core_tenant t ON t.id = p.tenant_id"""
TOKEN_WHERE = (
    "k.key_hash = %(key_hash)s AND k.revoked_at IS NULL "
    "AND (k.expires_at IS NULL OR k.expires_at > %(now)s)"
)
TOKEN_LOOKUP = f"SELECT {TOKEN_COLUMNS} FROM {TOKEN_FROM} WHERE {TOKEN_WHERE}"  # noqa: S608
TOKEN_WIDTH = width(ApiToken) + width(Principal) + width(Tenant)


def token_lookup(key_hash: str, now) -> ApiToken | None:
    """The live token (neither revoked nor expired at `now`) with this hash, its principal
    and tenant loaded (an operator's user is loaded on first use)."""
    with connection.cursor() as cursor:
        cursor.execute(TOKEN_LOOKUP, {"key_hash": key_hash, "now": now})
        row = cursor.fetchone()
    return None if row is None else token_of(row)


def token_of(row) -> ApiToken:
    """The token, with its principal and tenant, from TOKEN_COLUMNS' values (the first
    TOKEN_WIDTH of `row`)."""
    nk, np_ = width(ApiToken), width(Principal)
    token = instance(ApiToken, row[:nk])
    principal = None
    if row[nk] is not None:
        principal = instance(Principal, row[nk : nk + np_])
        related(principal, tenant=instance(Tenant, row[nk + np_ : TOKEN_WIDTH]))
    related(token, principal=principal)
    return token
