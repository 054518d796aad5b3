"""Set-up services: tenants, principals, operators, tools. Each audited."""

from django.contrib.auth import get_user_model
from django.db import transaction

from .audit import Actor, audit
from .egress import validate_base_url
from .errors import StateConflict, ValidationFailed
from .models import ApiToken, Membership, Principal, Role, Tenant, Tool, ToolEffect


def tenant_create(*, slug: str, name: str = "", actor: Actor) -> Tenant:
    with transaction.atomic():
        if Tenant.objects.filter(slug=slug).exists():
            raise StateConflict(f"Tenant {slug!r} already exists.")
        tenant = Tenant.objects.create(slug=slug, name=name or slug)
        audit(actor=actor, verb="tenant.create", obj=tenant, tenant=tenant, after={"slug": slug})
    return tenant


def principal_create(*, tenant: Tenant, name: str, actor: Actor) -> tuple[Principal, str]:
    """Create an agent identity and its first token; the raw token is returned only here."""
    with transaction.atomic():
        if Principal.objects.filter(tenant=tenant, name=name).exists():
            raise StateConflict(f"Principal {name!r} already exists in {tenant.slug}.")
        principal = Principal.objects.create(tenant=tenant, name=name)
        _token, raw = ApiToken.issue(principal=principal)
        audit(actor=actor, verb="principal.create", obj=principal, after={"name": name})
    return principal, raw


def operator_create(
    *, tenant: Tenant, username: str, role: str, password: str | None = None, actor: Actor
):
    """Create (or extend) an operator: a membership in `tenant` with `role`, and a new
    API token. An existing user keeps their other memberships."""
    if role not in Role.values:
        raise ValidationFailed(
            "Unknown role.", {"role": [f"Choose one of {', '.join(Role.values)}."]}
        )
    User = get_user_model()
    with transaction.atomic():
        user, created = User.objects.get_or_create(username=username)
        if password:
            user.set_password(password)
            user.save(update_fields=["password"])
        elif created:
            user.set_unusable_password()
            user.save(update_fields=["password"])
        membership, _ = Membership.objects.update_or_create(
            user=user, tenant=tenant, defaults={"role": role}
        )
        _token, raw = ApiToken.issue(user=user)
        audit(
            actor=actor,
            verb="operator.grant_role",
            obj=membership,
            tenant=tenant,
            after={"username": username, "role": role},
        )
    return user, raw


def tool_create(
    *,
    tenant: Tenant,
    name: str,
    base_url: str,
    effect: str = ToolEffect.UNSAFE,
    requires_approval: bool = False,
    identity_fields=(),
    timeout_seconds: float = 10,
    actor: Actor,
) -> Tool:
    """Register a tool; its base_url must pass the egress policy (SPEC §6) or nothing is
    written (a 400 naming base_url)."""
    validate_base_url(base_url)
    with transaction.atomic():
        if Tool.objects.filter(tenant=tenant, name=name).exists():
            raise StateConflict(f"Tool {name!r} already exists in {tenant.slug}.")
        tool = Tool.objects.create(
            tenant=tenant,
            name=name,
            base_url=base_url,
            effect=effect or ToolEffect.UNSAFE,
            requires_approval=requires_approval,
            identity_fields=list(identity_fields),
            timeout_seconds=timeout_seconds,
        )
        audit(
            actor=actor,
            verb="tool.create",
            obj=tool,
            after={
                "name": name,
                "base_url": base_url,
                "effect": tool.effect,
                "requires_approval": requires_approval,
                "identity_fields": tool.identity_fields,
                "timeout_seconds": timeout_seconds,
            },
        )
    return tool


def token_issue(*, tenant: Tenant, actor: Actor, principal=None, user=None) -> tuple[ApiToken, str]:
    """A new API token for a principal or an operator; the raw token is returned only here."""
    with transaction.atomic():
        token, raw = ApiToken.issue(principal=principal, user=user)
        audit(
            actor=actor,
            verb="token.issue",
            obj=token,
            tenant=tenant,
            after={"label": token.label, "owner": (principal or user).__str__()},
        )
    return token, raw


TOOL_EDITABLE = {"base_url", "effect", "requires_approval", "identity_fields", "timeout_seconds"}


def tool_update(tool: Tool, *, actor: Actor, reason: str = "", **changes) -> Tool:
    """Change a tool's settings. Actions already proposed keep the intent they were given;
    a changed base_url applies to dispatches from now on."""
    if unknown := set(changes) - TOOL_EDITABLE:
        raise ValidationFailed("Not editable.", {name: ["Cannot be changed."] for name in unknown})
    if "base_url" in changes:
        validate_base_url(changes["base_url"])
    with transaction.atomic():
        tool = Tool.objects.select_for_update(no_key=True).get(pk=tool.pk)
        before = {name: getattr(tool, name) for name in changes}
        for name, value in changes.items():
            setattr(tool, name, value)
        tool.save(update_fields=list(changes))
        audit(
            actor=actor, verb="tool.update", obj=tool, before=before, after=changes, reason=reason
        )
    return tool
