"""Tenancy, identities, tools and the append-only audit log.

Everything else belongs to exactly one Tenant. `approvals`, `ledger` and `runs` depend on
this app; it depends on none of them.
"""

import hashlib
import secrets
import uuid

import pgtrigger
from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from .ids import new_id


class Tenant(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    slug = models.SlugField(max_length=63, unique=True)
    name = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Four-eyes force replay: a force replay asked by one admin waits until a different
    # admin confirms (or rejects) it. Off by default; admins switch it, audited.
    four_eyes_force_replay = models.BooleanField(default=False)
    # Approval SLA: pending requests older than this are highlighted for approvers and
    # escalated through the notifications, once each (0: off).
    approval_sla_seconds = models.PositiveIntegerField(default=0)
    # Notifications (the notifications app): an action unknown for longer than this is
    # announced once (0: never); a pending approval request is announced once when it has
    # less than this left before it expires (0: never).
    unknown_alert_seconds = models.PositiveIntegerField(default=15 * 60)
    approval_expiry_warning_seconds = models.PositiveIntegerField(default=60 * 60)

    def __str__(self):
        return self.slug


class Principal(models.Model):
    """An agent identity. Authenticates with ApiTokens."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="principals")
    name = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="principal_name_per_tenant")
        ]

    def __str__(self):
        return f"{self.tenant.slug}/{self.name}"


class Role(models.TextChoices):
    APPROVER = "approver"
    ONCALL = "oncall"
    ADMIN = "admin"


class Membership(models.Model):
    """An operator's role in one tenant. `admin` implies `approver` and `oncall`."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="one_membership_per_tenant"),
            models.CheckConstraint(condition=Q(role__in=Role.values), name="membership_role_valid"),
        ]

    @property
    def roles(self) -> list[str]:
        if self.role == Role.ADMIN:
            return [Role.ADMIN, Role.APPROVER, Role.ONCALL]
        return [self.role]

    def has_role(self, role: str) -> bool:
        return role in self.roles


TOKEN_PREFIX = "tko_"


def hash_token(raw: str) -> str:
    # Tokens carry 256 bits of randomness, so a fast unsalted hash is enough and lets us
    # find the row by its hash in one indexed lookup.
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiToken(models.Model):
    """A bearer token for a principal or an operator. Only its hash is stored."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    key_hash = models.CharField(max_length=64, unique=True)
    label = models.CharField(max_length=12)  # the first characters, to tell tokens apart
    principal = models.ForeignKey(
        Principal, null=True, blank=True, on_delete=models.CASCADE, related_name="tokens"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="api_tokens",
    )
    name = models.CharField(max_length=100, blank=True)  # what it is for, e.g. "ci-deploy"
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Refused from this instant on; null: never expires.
    expires_at = models.DateTimeField(null=True, blank=True)
    # Written at most once a minute per token (LAST_USED_RESOLUTION), not on every request.
    last_used_at = models.DateTimeField(null=True, blank=True)
    # The token this one replaced by rotation.
    rotated_from = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="rotated_to"
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(principal__isnull=False, user__isnull=True)
                | Q(principal__isnull=True, user__isnull=False),
                name="token_has_exactly_one_owner",
            )
        ]

    @classmethod
    def issue(cls, *, principal=None, user=None, name="", expires_at=None, rotated_from=None):
        raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(
            key_hash=hash_token(raw),
            label=raw[:10],
            principal=principal,
            user=user,
            name=name,
            expires_at=expires_at,
            rotated_from=rotated_from,
        )
        return token, raw

    @property
    def owner(self) -> dict:
        if self.principal_id:
            return {"kind": "principal", "name": self.principal.name}
        return {"kind": "operator", "name": self.user.get_username()}

    def state_at(self, now) -> str:
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"


SIGNING_SECRET_PREFIX = "tks_"


def new_signing_secret() -> str:
    return SIGNING_SECRET_PREFIX + secrets.token_urlsafe(32)


class ToolEffect(models.TextChoices):
    READ_ONLY = "read_only"
    IDEMPOTENT = "idempotent"
    UNSAFE = "unsafe"


class ToolKind(models.TextChoices):
    HTTP = "http"  # speaks the tool protocol (docs/design.md, "The tool protocol")
    MCP = "mcp"  # an MCP server's tool (docs/mcp.md, "MCP servers as tools")


class Tool(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="tools")
    name = models.CharField(max_length=100)
    # For an MCP tool, the MCP server's Streamable HTTP endpoint.
    base_url = models.URLField(max_length=500)
    kind = models.CharField(max_length=8, choices=ToolKind.choices, default=ToolKind.HTTP)
    # An MCP tool's upstream: {"tool", "target_argument", "read_tool", "read_arguments",
    # "lookup_tool", "lookup_arguments", "input_schema", "annotations", "suggested"}
    # (runs/mcp_tools.py checks and explains each). Null for an HTTP tool.
    mcp = models.JSONField(null=True, blank=True)
    # What the tool's owner declares it is (README, "The tool protocol", optional
    # capabilities). Claims, not facts: the engine relies on them (resends, lookups, replay
    # verdicts), so changing one is an admin's audited act (`core.services.tool_declare`),
    # and each decision that relied on one keeps a copy of it (`Tool.declaration`).
    effect = models.CharField(max_length=16, choices=ToolEffect.choices, default=ToolEffect.UNSAFE)
    lookup = models.BooleanField(default=False)  # answers GET {base_url}/effects/{key}
    declared_by = models.JSONField(null=True, blank=True)  # the actor of the last declaration
    declared_at = models.DateTimeField(null=True, blank=True)
    requires_approval = models.BooleanField(default=False)
    # Keys of desired_state that identify the effect; empty means all of them.
    identity_fields = models.JSONField(default=list, blank=True)
    timeout_seconds = models.FloatField(default=10)
    created_at = models.DateTimeField(auto_now_add=True)
    # Signs every request Takeover sends the tool (takeover_client.signing; README "Signed
    # tool calls"), so that the tool can refuse anything that did not come through Takeover.
    # Kept readable because signing needs it (an HMAC key cannot be stored hashed); shown to
    # a person once, when generated. While a rotation's overlap lasts, requests are signed
    # with the previous secret too.
    signing_secret = models.CharField(max_length=100, default=new_signing_secret)
    previous_signing_secret = models.CharField(max_length=100, blank=True, default="")
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True)
    signing_secret_created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="tool_name_per_tenant"),
            models.CheckConstraint(
                condition=Q(effect__in=ToolEffect.values), name="tool_effect_valid"
            ),
            models.CheckConstraint(
                condition=Q(timeout_seconds__gt=0, timeout_seconds__lte=300),
                name="tool_timeout_range",
            ),
        ]

    def __str__(self):
        return self.name

    def signing_secrets(self, now=None) -> list[str]:
        """The secrets a request is signed with now: the current one, and the previous one
        while its overlap lasts."""
        now = now or timezone.now()
        secrets_ = [self.signing_secret]
        expires = self.previous_secret_expires_at
        if self.previous_signing_secret and expires is not None and expires > now:
            secrets_.append(self.previous_signing_secret)
        return secrets_

    @property
    def declaration(self) -> dict:
        """The declaration in force, as recorded on every decision that relies on it."""
        return {
            "effect": self.effect,
            "lookup": self.lookup,
            "declared_by": self.declared_by,
            "declared_at": self.declared_at.isoformat() if self.declared_at else None,
        }


class AuditEvent(models.Model):
    """One state change: who, what, before/after, why. Append-only, enforced by triggers."""

    id = models.UUIDField(primary_key=True, default=new_id, editable=False)
    # audit_tenant_at (tenant, at) indexes it: four events are written per effect
    tenant = models.ForeignKey(
        Tenant, null=True, on_delete=models.PROTECT, related_name="audit_events", db_index=False
    )
    at = models.DateTimeField(db_index=True)
    actor_kind = models.CharField(max_length=16)
    actor_name = models.CharField(max_length=150)
    verb = models.CharField(max_length=64)
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=64)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    reason = models.TextField(blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    # What the client sent as X-Request-ID, kept for correlation; never our own id.
    # A database default too: the engine writes some audit rows in raw SQL (runs/moves.py,
    # runs/propose.py).
    client_request_id = models.CharField(max_length=64, blank=True, default="", db_default="")

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "-at"], name="audit_tenant_at"),
            # The audit log filtered by one object (`?object=<id>`, the console's filter, an
            # action's history): an id names no type, so the index leads with the tenant and
            # the id, in the page's order. It is the only one by object: the audit log is the
            # most written table (four rows per effect), and every index is written per row.
            models.Index(
                fields=["tenant", "object_id", "-at", "-id"], name="audit_tenant_object_at"
            ),
        ]
        triggers = [
            pgtrigger.Protect(
                name="audit_append_only", operation=pgtrigger.Update | pgtrigger.Delete
            ),
            # Protect() covers rows only; TRUNCATE needs its own statement-level trigger.
            pgtrigger.Trigger(
                name="audit_no_truncate",
                operation=pgtrigger.Truncate,
                level=pgtrigger.Statement,
                when=pgtrigger.Before,
                func="RAISE EXCEPTION 'audit events are append-only: TRUNCATE refused';",
            ),
        ]

    @property
    def actor(self) -> dict:
        return {"kind": self.actor_kind, "name": self.actor_name}


class OperatorPreference(models.Model):
    """One operator's console preferences (not per tenant): the time zone times are shown in."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="preference"
    )
    time_zone = models.CharField(max_length=64, default="UTC")
    # The notification kinds this operator wants by e-mail (the notifications app), in the
    # tenants where an admin set up an e-mail channel for them and their role gets them.
    email_events = models.JSONField(default=list, blank=True)
