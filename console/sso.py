"""Console sign-in with the company's identity provider: OpenID Connect, through
mozilla-django-oidc (authorization code flow with PKCE and a nonce).

On when `OIDC_RP_CLIENT_ID` is set (takeover/settings.py, README "Single sign-on"):

- **Who**: an operator account belongs to the provider's subject (`iss` + `sub`, never
  the e-mail or user name, which a provider may hand to someone else), created at the first
  sign-in (`SsoIdentity`). Its user name is the provider's `preferred_username` (else the
  e-mail, else the subject), made unique if another account already has it.
- **Roles per tenant come from the provider's groups**: `OIDC_GROUP_ROLES` maps a group to
  a tenant and a role (`takeover-oncall=acme:oncall, takeover-admins=acme:admin`). At every
  sign-in the account's memberships become exactly what its groups map to: a role gained is
  granted, a role lost is taken away, each audited. An operator has one role per tenant
  (the membership's rule): of several, the strongest (admin, then on-call, then approver).
  Someone whose groups map to nothing is refused with a page that says so, and is not
  signed in.
- **Audit**: every sign-in writes `operator.sso_sign_in` in each of the operator's tenants,
  naming the provider's issuer and subject and the groups it sent.
- **Passwords are off** while single sign-on is on (`PasswordBackend`), except for the
  break-glass admin set from the command line (`manage.py break_glass`), for the day the
  provider is down. API tokens are not affected.

Checks beyond the library's: the ID token's `iss` is the configured issuer and its `aud`
names this client; the userinfo's `sub` is the ID token's (OpenID Connect Core 5.3.2).
"""

import hashlib
from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import SuspiciousOperation
from django.db import transaction
from django.http import Http404
from django.shortcuts import render
from django.utils import timezone
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)

from core.access import operator_by_pk
from core.audit import Actor, Verb, audit
from core.models import Membership, Role, Tenant
from core.services import operator_grant_role, operator_revoke_role

from .models import BreakGlass, SsoIdentity
from .timezones import remember_on_sign_in

# What grants and takes away roles at sign-in: the provider's groups, through the mapping.
SSO = Actor("system", "sso")
STRENGTH = [Role.ADMIN, Role.ONCALL, Role.APPROVER]


def enabled() -> bool:
    return bool(settings.SSO_ENABLED)


def context(request) -> dict:
    """Template context: whether the sign-in page offers the provider, and its name."""
    return {"sso": {"enabled": enabled(), "provider": settings.SSO_PROVIDER_NAME}}


# --- the mapping ------------------------------------------------------------------------------


def group_roles() -> dict[str, list[tuple[str, str]]]:
    """OIDC_GROUP_ROLES parsed: group → [(tenant slug, role)]. Entries are separated by
    commas or whitespace; each is `group=tenant:role`. A malformed entry is a system check
    error (console/apps.py), so a typo stops the release step, not someone's sign-in."""
    mapping: dict[str, list[tuple[str, str]]] = {}
    for entry in settings.OIDC_GROUP_ROLES.replace(",", " ").split():
        group, _, target = entry.rpartition("=")
        slug, _, role = target.partition(":")
        if not group or not slug or role not in Role.values:
            raise ValueError(
                f"OIDC_GROUP_ROLES: {entry!r} is not group=tenant:role with a role among "
                f"{', '.join(Role.values)}"
            )
        mapping.setdefault(group, []).append((slug, role))
    return mapping


def roles_for(groups) -> dict[str, str]:
    """tenant slug → the strongest role the groups map to there."""
    found: dict[str, list[str]] = {}
    mapping = group_roles()
    for group in groups:
        for slug, role in mapping.get(group, []):
            found.setdefault(slug, []).append(role)
    return {slug: min(roles, key=STRENGTH.index) for slug, roles in found.items()}


# --- signing in -------------------------------------------------------------------------------


@dataclass
class Refusal:
    """Why a person the provider signed in is not let in, for the refusal page."""

    who: str
    groups: list[str] = field(default_factory=list)


def _username(claims: dict, issuer: str) -> str:
    wanted = (claims.get("preferred_username") or claims.get("email") or claims["sub"]).strip()[
        :120
    ]
    taken = get_user_model().objects.filter(username=wanted).exists()
    if not taken:
        return wanted
    tag = hashlib.sha256(f"{issuer} {claims['sub']}".encode()).hexdigest()[:6]
    return f"{wanted}-{tag}"


@transaction.atomic
def sso_sign_in(*, issuer: str, claims: dict, groups: list[str], roles: dict[str, str]):
    """The account of the provider's subject, created on first sign-in, with its memberships
    made exactly what `roles` says (tenant slug → role); every change and the sign-in itself
    audited. Tenants named by the mapping that do not exist are skipped."""
    subject = claims["sub"]
    identity = (
        SsoIdentity.objects.select_for_update()
        .select_related("user")
        .filter(issuer=issuer, subject=subject)
        .first()
    )
    if identity is None:
        user = get_user_model().objects.create(username=_username(claims, issuer))
        user.set_unusable_password()
        user.save(update_fields=["password"])
        identity = SsoIdentity.objects.create(user=user, issuer=issuer, subject=subject)
    user = identity.user
    if claims.get("email") and claims["email"] != user.email:
        user.email = claims["email"]
        user.save(update_fields=["email"])
    tenants = {t.slug: t for t in Tenant.objects.filter(slug__in=roles)}
    held = {m.tenant_id: m for m in Membership.objects.filter(user=user).select_related("tenant")}
    facts = {"issuer": issuer, "subject": subject, "username": user.username, "groups": groups}
    for slug, role in roles.items():
        tenant = tenants.get(slug)
        if tenant is None:
            continue
        membership = held.pop(tenant.pk, None)
        if membership is None or membership.role != role:
            before = {"role": membership.role} if membership else None
            operator_grant_role(user, tenant, role, actor=SSO, facts=facts, before=before)
        audit(
            actor=Actor("operator", user.username),
            verb=Verb.OPERATOR_SSO_SIGN_IN,
            obj=user,
            object_type="user",
            tenant=tenant,
            after={**facts, "role": role},
        )
    for membership in held.values():  # no longer in a group that maps there
        why = "the identity provider's groups no longer map to a role here"
        operator_revoke_role(membership, actor=SSO, facts=facts, reason=why)
    identity.last_sign_in_at = timezone.now()
    identity.save(update_fields=["last_sign_in_at"])
    return user


class SsoBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend, matching accounts by subject and setting roles from
    groups. A refusal is left on the request for the callback view to explain."""

    def get_user(self, user_id):
        return operator_by_pk(user_id)  # as the library's, without the ORM's compilation

    def verify_claims(self, claims) -> bool:
        return bool(claims.get("sub"))

    def get_or_create_user(self, access_token, id_token, payload):
        issuer = settings.OIDC_OP_ISSUER
        if issuer and payload.get("iss") != issuer:
            raise SuspiciousOperation("the ID token was issued by another provider")
        audience = payload.get("aud")
        if settings.OIDC_RP_CLIENT_ID not in (
            audience if isinstance(audience, list) else [audience]
        ):
            raise SuspiciousOperation("the ID token is meant for another client")
        claims = self.get_userinfo(access_token, id_token, payload)
        if claims.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("the userinfo answer is about someone else")
        claims = {**payload, **claims}
        groups = claims.get(settings.OIDC_GROUPS_CLAIM) or []
        groups = [groups] if isinstance(groups, str) else [str(g) for g in groups]
        roles = roles_for(groups)
        if not roles:
            who = claims.get("preferred_username") or claims.get("email") or claims["sub"]
            self.request.sso_refusal = Refusal(who=who, groups=groups)
            return None
        return sso_sign_in(
            issuer=issuer or payload.get("iss", ""), claims=claims, groups=groups, roles=roles
        )


class PasswordBackend(ModelBackend):
    """Django's password check, off while single sign-on is on, except for the break-glass
    admin (`manage.py break_glass`)."""

    def get_user(self, user_id):
        # As Django's, without the ORM's compilation (every console request asks).
        user = operator_by_pk(user_id)
        return user if user is not None and self.user_can_authenticate(user) else None

    def user_can_authenticate(self, user) -> bool:
        if not super().user_can_authenticate(user):
            return False
        return not enabled() or BreakGlass.objects.filter(user=user).exists()


# --- the views --------------------------------------------------------------------------------


class _Start(OIDCAuthenticationRequestView):
    pass


class _Callback(OIDCAuthenticationCallbackView):
    @property
    def success_url(self) -> str:
        if next_url := self.request.session.get("oidc_login_next"):
            return next_url
        from .signin import LoginView  # its landing rule: approvers land on Approvals

        view = LoginView()
        view.request = self.request
        return view.get_default_redirect_url()

    def login_success(self):
        response = super().login_success()
        remember_on_sign_in(self.request, self.user)
        return response

    def login_failure(self):
        refusal = getattr(self.request, "sso_refusal", None)
        return render(
            self.request,
            "console/sso_refused.html",
            {"refusal": refusal, "provider": settings.SSO_PROVIDER_NAME},
            status=403,
        )


def start(request):
    """GET /sso/start/?next=…: off to the provider."""
    if not enabled():
        raise Http404("Single sign-on is not configured.")
    return _Start.as_view()(request)


def callback(request):
    """GET /sso/callback/?code=…&state=…: back from the provider."""
    if not enabled():
        raise Http404("Single sign-on is not configured.")
    return _Callback.as_view()(request)
