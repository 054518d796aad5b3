"""Set-up services: tenants, principals, operators, tools. Each audited."""

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from .audit import Actor, Verb, audit
from .egress import validate_base_url
from .errors import PermissionDenied, StateConflict, ValidationFailed
from .models import (
    ApiToken,
    Membership,
    Principal,
    Role,
    Tenant,
    Tool,
    ToolEffect,
    new_signing_secret,
)


def tenant_create(*, slug: str, name: str = "", actor: Actor) -> Tenant:
    with transaction.atomic():
        if Tenant.objects.filter(slug=slug).exists():
            raise StateConflict(f"Tenant {slug!r} already exists.")
        tenant = Tenant.objects.create(slug=slug, name=name or slug)
        audit(actor=actor, verb=Verb.TENANT_CREATE, obj=tenant, tenant=tenant, after={"slug": slug})
    return tenant


def principal_create(*, tenant: Tenant, name: str, actor: Actor) -> tuple[Principal, str]:
    """Create an agent identity and its first token; the raw token is returned only here."""
    actor.require(Role.ADMIN)
    with transaction.atomic():
        if Principal.objects.filter(tenant=tenant, name=name).exists():
            raise StateConflict(f"Principal {name!r} already exists in {tenant.slug}.")
        principal = Principal.objects.create(tenant=tenant, name=name)
        _token, raw = _issue(actor, principal=principal)
        audit(actor=actor, verb=Verb.PRINCIPAL_CREATE, obj=principal, after={"name": name})
    return principal, raw


def operator_create(
    *, tenant: Tenant, username: str, role: str, password: str | None = None, actor: Actor
):
    """Create (or extend) an operator: a membership in `tenant` with `role`, and a new
    API token. An existing user keeps their other memberships."""
    actor.require(Role.ADMIN)
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
        operator_grant_role(user, tenant, role, actor=actor, facts={"username": username})
        _token, raw = _issue(actor, user=user)
    return user, raw


def operator_grant_role(
    user, tenant: Tenant, role: str, *, actor: Actor, facts: dict, before=None
) -> Membership:
    """Give `user` `role` in `tenant` (a membership, new or changed), audited with `facts`
    and the role, in the caller's transaction."""
    membership, _ = Membership.objects.update_or_create(
        user=user, tenant=tenant, defaults={"role": role}
    )
    after = {**facts, "role": role}
    audit(actor=actor, verb=Verb.OPERATOR_GRANT_ROLE, obj=membership, before=before, after=after)
    return membership


def operator_revoke_role(membership: Membership, *, actor: Actor, facts: dict, reason: str) -> None:
    """Take `membership` (a user's role in a tenant) away, audited with `facts`, in the
    caller's transaction."""
    before = {"role": membership.role}
    verb = Verb.OPERATOR_REVOKE_ROLE
    audit(actor=actor, verb=verb, obj=membership, before=before, after=facts, reason=reason)
    membership.delete()


def tool_create(
    *,
    tenant: Tenant,
    name: str,
    base_url: str,
    effect: str = ToolEffect.UNSAFE,
    lookup: bool = False,
    requires_approval: bool = False,
    identity_fields=(),
    timeout_seconds: float = 10,
    actor: Actor,
) -> Tool:
    """Register a tool; its base_url must pass the egress policy (core/egress.py) or nothing is
    written (a 400 naming base_url)."""
    actor.require(Role.ADMIN)
    effect = effect or ToolEffect.UNSAFE
    _check_declaration(effect, lookup, requires_approval)
    validate_base_url(base_url)
    facts = {
        "lookup": lookup,
        "identity_fields": list(identity_fields),
        "timeout_seconds": timeout_seconds,
    }
    return tool_insert(
        tenant=tenant,
        name=name,
        base_url=base_url,
        effect=effect,
        lookup=lookup,
        requires_approval=requires_approval,
        identity_fields=identity_fields,
        timeout_seconds=timeout_seconds,
        actor=actor,
        facts=facts,
    )


def tool_insert(
    *, tenant: Tenant, name: str, identity_fields=(), actor: Actor, facts: dict, **fields
) -> Tool:
    """Write a new tool, checked by the caller (`tool_create`, `runs.mcp_tools`): a name the
    tenant already uses is refused, the declaration is stamped with `actor`, and the audit
    row records the tool's name, base URL, effect and approval rule, and `facts`, in the same
    transaction."""
    with transaction.atomic():
        if Tool.objects.filter(tenant=tenant, name=name).exists():
            raise StateConflict(f"Tool {name!r} already exists in {tenant.slug}.")
        tool = Tool.objects.create(
            tenant=tenant,
            name=name,
            declared_by=actor.as_dict(),
            declared_at=timezone.now(),
            identity_fields=list(identity_fields),
            **fields,
        )
        facts = {
            "name": name,
            "base_url": tool.base_url,
            "effect": tool.effect,
            "requires_approval": tool.requires_approval,
            **facts,
        }
        audit(actor=actor, verb=Verb.TOOL_CREATE, obj=tool, after=facts)
    return tool


def _token_facts(token: ApiToken) -> dict:
    return {
        "label": token.label,
        "name": token.name,
        "owner": token.owner,
        "expires_at": token.expires_at.isoformat() if token.expires_at else None,
    }


def check_token_issue(*, actor: Actor, principal=None, user=None) -> str | None:
    """May `actor` receive a new secret for this owner? None, or the refusal in words.

    A person's credentials are theirs alone: an operator's token is issued to that operator
    (API, console, CLI), or on the command line by someone with shell access (the system
    actor), never to another operator, admins included. Otherwise one admin could act as
    another and defeat four eyes. A principal is an agent, not a person: its admins issue
    its tokens."""
    if actor.kind == "system":
        return None
    if principal is not None:
        if actor.has_role(Role.ADMIN):
            return None
        return "A principal's tokens are issued by an admin."
    if actor.kind == "operator" and actor.name == user.get_username():
        return None
    return (
        f"A person's credentials are theirs alone: only {user.get_username()} can issue a "
        "token for themselves (or someone with shell access, with `manage.py token create`). "
        "An admin may list, expire and revoke their tokens."
    )


def _issue(actor: Actor, *, principal=None, user=None, **fields) -> tuple[ApiToken, str]:
    """Every path that mints a secret goes through here, so the rule above holds for each."""
    if refusal := check_token_issue(actor=actor, principal=principal, user=user):
        raise PermissionDenied(refusal)
    return ApiToken.issue(principal=principal, user=user, **fields)


def token_issue(
    *, tenant: Tenant, actor: Actor, principal=None, user=None, name: str = "", expires_at=None
) -> tuple[ApiToken, str]:
    """A new API token for a principal or an operator; the raw token is returned only here."""
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationFailed("Already expired.", {"expires_at": ["Must be in the future."]})
    with transaction.atomic():
        token, raw = _issue(actor, principal=principal, user=user, name=name, expires_at=expires_at)
        audit(
            actor=actor, verb=Verb.TOKEN_ISSUE, obj=token, tenant=tenant, after=_token_facts(token)
        )
    return token, raw


def token_revoke(token: ApiToken, *, tenant: Tenant, actor: Actor, reason: str = "") -> ApiToken:
    """Refuse the token from now on. The next request that presents it gets a 401."""
    with transaction.atomic():
        now = timezone.now()
        if (
            ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=now)
            != 1
        ):
            raise StateConflict("This token is already revoked.")
        token.refresh_from_db()
        audit(
            actor=actor,
            verb=Verb.TOKEN_REVOKE,
            obj=token,
            tenant=tenant,
            before={"state": "active"},
            after={**_token_facts(token), "state": "revoked"},
            reason=reason,
        )
    return token


UNCHANGED = object()


def token_rotate(
    token: ApiToken,
    *,
    tenant: Tenant,
    actor: Actor,
    expires_at=UNCHANGED,
    overlap_seconds: float = 0,
    reason: str = "",
) -> tuple[ApiToken | None, str | None]:
    """Replace a token by a new one for the same owner and purpose.

    The old token is revoked at once, or, with `overlap_seconds`, expires that much later,
    so that a fleet can switch without a failed request. The new one keeps the old one's
    lifetime (a 90-day token is replaced by a 90-day token) unless `expires_at` is given.
    A token can be rotated once: the second of two racing rotations is a conflict.

    Rotating another person's token (`check_token_issue` refuses `actor` their secret)
    revokes it at once and returns `(None, None)`: no successor, so that its owner issues
    their own, and nobody else ever holds it.
    """
    if check_token_issue(actor=actor, principal=token.principal, user=token.user):
        reason = reason or f"Rotated by {actor.name}, who may not hold this person's secret."
        return token_revoke(token, tenant=tenant, actor=actor, reason=reason), None
    now = timezone.now()
    with transaction.atomic():
        old = ApiToken.objects.select_for_update(no_key=True).get(pk=token.pk)
        if old.state_at(now) != "active":
            raise StateConflict(
                f"Only an active token can be rotated; this one is {old.state_at(now)}."
            )
        if ApiToken.objects.filter(rotated_from=old).exists():
            raise StateConflict("This token was already rotated.")
        if expires_at is UNCHANGED:
            expires_at = now + (old.expires_at - old.created_at) if old.expires_at else None
        new, raw = _issue(
            actor,
            principal=old.principal,
            user=old.user,
            name=old.name,
            expires_at=expires_at,
            rotated_from=old,
        )
        if overlap_seconds > 0:
            until = now + timedelta(seconds=overlap_seconds)
            old.expires_at = min(old.expires_at, until) if old.expires_at else until
            old.save(update_fields=["expires_at"])
        else:
            old.revoked_at = now
            old.save(update_fields=["revoked_at"])
        audit(
            actor=actor,
            verb=Verb.TOKEN_ROTATE,
            obj=old,
            tenant=tenant,
            before=_token_facts(old) | {"id": str(old.pk)},
            after=_token_facts(new)
            | {
                "id": str(new.pk),
                "old_expires_at": old.expires_at.isoformat() if old.expires_at else None,
            },
            reason=reason,
        )
    return new, raw


def operator_manageable(tenant: Tenant, user, admin_user=None) -> bool:
    """May an admin of `tenant` (`admin_user`; None: the command line) manage the tokens of
    the operator `user`? The rule of `tokens_manageable`, for one person."""
    if not Membership.objects.filter(user=user, tenant=tenant).exists():
        return False
    if admin_user is None:
        return True
    admin_of = Membership.objects.filter(user=admin_user, role=Role.ADMIN).values("tenant")
    return not Membership.objects.filter(user=user).exclude(tenant__in=admin_of).exists()


def tokens_manageable(tenant: Tenant, admin_user=None, *, own: bool = False):
    """The tokens an admin of `tenant` may see and change: those of its principals, and
    those of operators who belong to it and to no tenant where `admin_user` is not admin
    (an admin of one tenant must not lock a person out of another). Without `admin_user`
    (the command line, a platform operator): every operator of the tenant. With `own`:
    only `admin_user`'s own tokens (what an operator who is not an admin may manage)."""
    tokens = ApiToken.objects.select_related("principal", "user")
    if own:
        return tokens.filter(user=admin_user)
    members = Membership.objects.filter(tenant=tenant).values("user")
    operators = Q(user__in=members)
    if admin_user is not None:
        admin_of = Membership.objects.filter(user=admin_user, role=Role.ADMIN).values("tenant")
        elsewhere = Membership.objects.exclude(tenant__in=admin_of).values("user")
        operators &= ~Q(user__in=elsewhere) | Q(user=admin_user)
    return tokens.filter(Q(principal__tenant=tenant) | operators)


def tool_rotate_secret(
    tool: Tool, *, actor: Actor, overlap_seconds: float = 0, reason: str = ""
) -> Tool:
    """A new signing secret for `tool`, returned on the tool (`tool.signing_secret`) to be
    shown once. With `overlap_seconds`, requests are signed with the previous secret too
    until then, so that the tool can switch without refusing a call; without, the old one
    stops at once. Admin only, audited (never the secrets themselves)."""
    actor.require(Role.ADMIN)
    if not 0 <= overlap_seconds <= 7 * 24 * 3600:
        raise ValidationFailed(
            "Overlap out of range.", {"overlap_seconds": ["Between 0 and 7 days."]}
        )
    now = timezone.now()
    with transaction.atomic():
        tool = Tool.objects.select_for_update(no_key=True).get(pk=tool.pk)
        until = now + timedelta(seconds=overlap_seconds) if overlap_seconds else None
        tool.previous_signing_secret = tool.signing_secret if until else ""
        tool.previous_secret_expires_at = until
        tool.signing_secret = new_signing_secret()
        tool.signing_secret_created_at = now
        tool.save(
            update_fields=[
                "previous_signing_secret",
                "previous_secret_expires_at",
                "signing_secret",
                "signing_secret_created_at",
            ]
        )
        audit(
            actor=actor,
            verb=Verb.TOOL_ROTATE_SECRET,
            obj=tool,
            after={
                "secret_created_at": now.isoformat(),
                "previous_expires_at": until.isoformat() if until else None,
            },
            reason=reason,
        )
    return tool


def _check_declaration(effect: str, lookup: bool, requires_approval: bool) -> None:
    if effect not in ToolEffect.values:
        raise ValidationFailed(
            "Unknown effect.", {"effect": [f"One of {', '.join(ToolEffect.values)}."]}
        )
    if not isinstance(lookup, bool):
        raise ValidationFailed("lookup must be true or false.", {"lookup": ["A boolean."]})
    # A read has no side effect, so there is nothing to approve: the two settings together
    # would say two different things, and the engine would have to pick one silently.
    if effect == ToolEffect.READ_ONLY and requires_approval:
        raise ValidationFailed(
            "A read_only tool needs no approval.",
            {"requires_approval": ["Must be false for a read_only tool (it has no side effect)."]},
        )


# Declarations (`effect`, `lookup`) are not among them: they change only through
# `tool_declare`, an admin's act with a reason.
TOOL_EDITABLE = {"base_url", "requires_approval", "identity_fields", "timeout_seconds"}


def tool_update(tool: Tool, *, actor: Actor, reason: str = "", **changes) -> Tool:
    """Change a tool's settings. Actions already proposed keep the intent they were given;
    a changed base_url applies to dispatches from now on."""
    actor.require(Role.ADMIN)
    if unknown := set(changes) - TOOL_EDITABLE:
        raise ValidationFailed("Not editable.", {name: ["Cannot be changed."] for name in unknown})
    if changes.get("requires_approval") and tool.effect == ToolEffect.READ_ONLY:
        _check_declaration(tool.effect, tool.lookup, True)
    if "base_url" in changes:
        validate_base_url(changes["base_url"])
    return _settings_change(tool, changes, actor=actor, verb=Verb.TOOL_UPDATE, reason=reason)


def _settings_change(obj, changes: dict, *, actor: Actor, verb: str, **audited):
    """Set `changes` on `obj`'s row, locked, and audit the values before and after, in one
    transaction; the fresh row."""
    with transaction.atomic():
        obj = type(obj).objects.select_for_update(no_key=True).get(pk=obj.pk)
        before = {name: getattr(obj, name) for name in changes}
        for name, value in changes.items():
            setattr(obj, name, value)
        obj.save(update_fields=list(changes))
        audit(actor=actor, verb=verb, obj=obj, before=before, after=changes, **audited)
    return obj


def tool_declare(
    tool: Tool, *, actor: Actor, reason: str, effect: str | None = None, lookup: bool | None = None
) -> Tool:
    """Change what a tool declares it is (`effect`, `lookup`): the owner's claims, which the
    engine relies on from the next decision on (a resend, a lookup, a replay verdict).

    Admin-only (checked here, whoever calls) and never silent: a reason is required and
    the audit event holds the declaration before and after. Actions
    in flight are not re-judged; each later decision records the declaration it relied on.
    Changing nothing is refused, so the log holds only real changes.
    """
    actor.require(Role.ADMIN)
    if not reason.strip():
        raise ValidationFailed("A reason is required.", {"reason": ["Say why the claim changed."]})
    with transaction.atomic():
        tool = Tool.objects.select_for_update(no_key=True).get(pk=tool.pk)
        before = {"effect": tool.effect, "lookup": tool.lookup}
        after = {
            "effect": tool.effect if effect is None else effect,
            "lookup": tool.lookup if lookup is None else lookup,
        }
        _check_declaration(after["effect"], after["lookup"], tool.requires_approval)
        if after == before:
            raise StateConflict(
                f"{tool.name} already declares effect={before['effect']}, "
                f"lookup={str(before['lookup']).lower()}."
            )
        tool.effect, tool.lookup = after["effect"], after["lookup"]
        tool.declared_by, tool.declared_at = actor.as_dict(), timezone.now()
        tool.save(update_fields=["effect", "lookup", "declared_by", "declared_at"])
        audit(
            actor=actor,
            verb=Verb.TOOL_DECLARE,
            obj=tool,
            before=before,
            after=after,
            reason=reason.strip(),
        )
    return tool


TENANT_SETTINGS = {
    "four_eyes_force_replay",
    "approval_sla_seconds",
    "unknown_alert_seconds",
    "approval_expiry_warning_seconds",
}


def tenant_settings_update(tenant: Tenant, *, actor: Actor, **changes) -> Tenant:
    """Change a tenant's settings (admin). Audited with before and after."""
    actor.require(Role.ADMIN)
    if unknown := set(changes) - TENANT_SETTINGS:
        raise ValidationFailed("Not a setting.", {name: ["Unknown setting."] for name in unknown})
    return _settings_change(tenant, changes, actor=actor, verb=Verb.TENANT_SETTINGS, tenant=tenant)


def operator_set_time_zone(user, *, time_zone: str) -> str:
    """An operator's own display preference: the time zone the console shows times in.
    Not a change to anything the product governs, so not audited."""
    import zoneinfo

    from .models import OperatorPreference

    if time_zone not in zoneinfo.available_timezones():
        raise ValidationFailed("Unknown time zone.", {"time_zone": ["Pick one from the list."]})
    OperatorPreference.objects.update_or_create(user=user, defaults={"time_zone": time_zone})
    return time_zone
