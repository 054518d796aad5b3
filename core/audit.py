"""Actors and the audit trail.

Every service that changes state takes a keyword-only `actor` and calls `audit()` inside
its own transaction (docs/design.md, invariant 8).
"""

import contextvars
import uuid
from dataclasses import dataclass, field

from django.db import models
from django.utils import timezone

from . import rows
from .errors import PermissionDenied
from .logs import request_id_var
from .models import AuditEvent, Role

__all__ = [
    "SYSTEM",
    "Actor",
    "Verb",
    "audit",
    "client_request_id_var",
    "new_request_id",
    "request_id_var",
]

# The X-Request-ID a client sent, if any: stored beside our own id, never instead of it.
client_request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar(
    "client_request_id", default=""
)


class Verb(models.TextChoices):
    """Every audit verb Takeover writes, declared once, with what it means to a person (the
    label: the console's timeline and audit filter show it). `audit()` refuses any other."""

    ACTION_PROPOSE = "action.propose", "Proposed"
    ACTION_QUEUED = "action.queued", "Queued for dispatch"
    ACTION_DISPATCHING = "action.dispatching", "Claimed for dispatch"
    ACTION_SUCCEEDED = "action.succeeded", "Succeeded"
    ACTION_FAILED = "action.failed", "Failed"
    ACTION_UNKNOWN = "action.unknown", "Outcome unknown"
    ACTION_NEEDS_HUMAN = "action.needs_human", "Handed to a person"
    ACTION_BLOCKED = "action.blocked", "Blocked"
    ACTION_CLAIM = "action.claim", "Claimed by an operator"
    ACTION_CLAIM_TAKE_OVER = "action.claim_take_over", "Claim taken over"
    ACTION_RELEASE = "action.release", "Claim released"
    ACTION_ACKNOWLEDGE = "action.acknowledge", "Blocked action acknowledged"
    ACTION_RECHECK = "action.recheck", "Re-checked by hand"
    ACTION_RECONCILE_FAILED = "action.reconcile_failed", "Reconciliation read failed"
    APPROVAL_GRANT = "approval.grant", "Approval granted"
    APPROVAL_CONSUME = "approval.consume", "Approval consumed"
    APPROVAL_REVOKE = "approval.revoke", "Approval revoked"
    APPROVAL_REQUEST_OPEN = "approval_request.open", "Approval requested"
    APPROVAL_REQUEST_GRANT = "approval_request.grant", "Approval request granted"
    APPROVAL_REQUEST_DENY = "approval_request.deny", "Approval request denied"
    APPROVAL_REQUEST_EXPIRE = "approval_request.expire", "Approval request expired"
    LEDGER_RESERVE = "ledger.reserve", "Idempotency key reserved"
    LEDGER_REVOKE = "ledger.revoke", "Ledger entry revoked"
    IDEMPOTENCY_CONFLICT = "idempotency.conflict", "Idempotency key reused for another intent"
    RUN_START = "run.start", "Run started"
    RUN_CLAIM = "run.claim", "Run claimed by a runtime"
    RUN_SUCCESS = "run.success", "Run succeeded"
    RUN_ERROR = "run.error", "Run ended in error"
    RUN_CANCELLED = "run.cancelled", "Run cancelled"
    RUN_REPLAY = "run.replay", "Replay created"
    FORCE_REPLAY = "force_replay", "Replay forced"
    FORCE_REPLAY_REQUEST = "force_replay.request", "Force replay asked for (four eyes)"
    FORCE_REPLAY_CONFIRM = "force_replay.confirm", "Force replay confirmed by a second admin"
    FORCE_REPLAY_REJECT = "force_replay.reject", "Force replay rejected"
    TENANT_CREATE = "tenant.create", "Tenant created"
    TENANT_SETTINGS = "tenant.settings", "Tenant settings changed"
    PRINCIPAL_CREATE = "principal.create", "Principal created"
    OPERATOR_GRANT_ROLE = "operator.grant_role", "Operator given a role"
    OPERATOR_LOCKED_OUT = "operator.locked_out", "Sign-in locked after failed attempts"
    OPERATOR_REVOKE_ROLE = "operator.revoke_role", "Operator's role taken away"
    OPERATOR_SSO_SIGN_IN = "operator.sso_sign_in", "Signed in through the identity provider"
    OPERATOR_BREAK_GLASS = "operator.break_glass", "Emergency password sign-in allowed or ended"
    TOOL_CREATE = "tool.create", "Tool registered"
    TOOL_UPDATE = "tool.update", "Tool changed"
    TOOL_DECLARE = "tool.declare", "Tool's declarations (effect, lookup) changed"
    TOOL_ROTATE_SECRET = "tool.rotate_secret", "Tool's signing secret rotated"
    TOKEN_ISSUE = "token.issue", "API token issued"
    TOKEN_REVOKE = "token.revoke", "API token revoked"
    TOKEN_ROTATE = "token.rotate", "API token rotated"
    AUDIT_ARCHIVE = "audit.archive", "Archived"
    BULK_APPLY = "bulk.apply", "Bulk decision confirmed (each item is audited too)"
    NOTIFICATION_CHANNEL_CREATE = "notification.channel_create", "Notification channel added"
    NOTIFICATION_CHANNEL_UPDATE = "notification.channel_update", "Notification channel changed"
    NOTIFICATION_SECRET_ROTATE = "notification.secret_rotate", "Webhook signing secret rotated"
    NOTIFICATION_TEST = "notification.test", "Test notification sent"
    NOTIFICATION_DELIVERED = "notification.delivered", "Notification delivered"
    NOTIFICATION_FAILED = "notification.failed", "Notification given up"
    NOTIFICATION_RETRY = "notification.retry", "Notification sent again"

    @classmethod
    def families(cls) -> list[str]:
        """The prefixes the audit filters accept ("action." = every action verb)."""
        return sorted({v.split(".")[0] + "." for v in cls.values if "." in v})


# The declared verbs, as a set: `Verb.values` builds a fresh list on every access, and
# every audit event is checked against it (profiled: a twentieth of a read's CPU through /mcp).
VERBS = frozenset(Verb.values)


def verb_for_state(kind: str, state: str) -> str:
    """The verb of a move into `state` ("action" + "succeeded" → "action.succeeded")."""
    return Verb(f"{kind}.{state}").value


@dataclass(frozen=True)
class Actor:
    kind: str  # "operator" | "principal" | "system"
    name: str
    # The roles an operator holds in the tenant they act in (core.access.Viewer.actor_for),
    # for the services' own role checks. Never stored, never compared: an actor is who.
    roles: frozenset = field(default=frozenset(), compare=False, repr=False)

    def as_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name}

    def has_role(self, role: str) -> bool:
        """The system acts for the platform itself (sweeps, set-up commands); an admin
        holds every role."""
        return self.kind == "system" or role in self.roles or Role.ADMIN in self.roles

    def require(self, role: str) -> None:
        """A service's own role check: whoever calls it (API, console, a command) the rule
        holds. A 403 `permission-denied` naming the role."""
        if not self.has_role(role):
            raise PermissionDenied(f"This needs the {role} role.")


SYSTEM = Actor("system", "takeover")
SWEEPER = Actor("system", "sweeper")
DISPATCHER = Actor("system", "dispatcher")
RECONCILER = Actor("system", "reconciler")


def new_request_id() -> str:
    return uuid.uuid4().hex


def audit(*, actor: Actor, verb: str, obj, **options) -> AuditEvent:
    """Write one audit event (in the caller's transaction): `audit_fields`' arguments."""
    return AuditEvent.objects.create(**audit_fields(actor=actor, verb=verb, obj=obj, **options))


def audit_many(events: list[dict]) -> None:
    """Write several audit events in one INSERT (a batch claim moves many actions at once).
    Each dict holds `audit()`'s keyword arguments."""
    rows.insert_many(AuditEvent, [rows.new(AuditEvent, **audit_fields(**e)) for e in events])


def audit_fields(
    *,
    actor: Actor,
    verb: str,
    obj,
    tenant=None,
    before=None,
    after=None,
    reason: str = "",
    object_type: str | None = None,
    request_id: str | None = None,
) -> dict:
    if verb not in VERBS:
        raise ValueError(f"Unknown audit verb {verb!r}: declare it in core.audit.Verb.")
    return dict(
        tenant_id=tenant.pk if tenant is not None else getattr(obj, "tenant_id", None),
        at=timezone.now(),
        actor_kind=actor.kind,
        actor_name=actor.name,
        verb=verb,
        object_type=object_type or obj._meta.model_name,
        object_id=str(obj.pk),
        before=before,
        after=after,
        reason=reason or "",
        # The worker acts for the request that proposed the action: same id, one trail.
        request_id=request_id if request_id is not None else request_id_var.get(),
        client_request_id=client_request_id_var.get(),
    )


# --- the one way out of the audit log ------------------------------------------------------

ARCHIVE_VERB = Verb.AUDIT_ARCHIVE
AUDIT_TRIGGER = "core.AuditEvent:audit_append_only"


class AuditDeletionRefused(Exception):
    pass


def audit_events_delete_archived(event_ids, *, using: str, actor: Actor, record: dict, tenant=None):
    """Delete audit events that an archive has written out. The only code path that may.

    Guarded: it must run inside a transaction on `using` (so that the deletion commits or
    rolls back with the rest of the archive), it refuses the archive's own records (verb
    `audit.archive`: the log keeps them for good), it first writes its own `audit.archive`
    event with `record` (what was archived, where, with which checksums), and it deletes
    exactly `event_ids` or nothing (a count that differs rolls everything back).

    The append-only trigger stays installed: this function lifts it for one DELETE
    statement in this transaction only (django-pgtrigger's `ignore`, a transaction-local
    setting), so every other UPDATE or DELETE, here or anywhere, is still refused. In
    production the application's own database role has no DELETE on the table at all;
    `using` names the connection (the owner's) that does (README, "Retention").
    """
    import pgtrigger
    from django.db import connections

    connection = connections[using]
    if not connection.in_atomic_block:
        raise AuditDeletionRefused("audit events are deleted only inside an archive transaction")
    ids = list(dict.fromkeys(str(i) for i in event_ids))
    protected = AuditEvent.objects.using(using).filter(pk__in=ids, verb=ARCHIVE_VERB).count()
    if protected:
        raise AuditDeletionRefused(f"{protected} archive records are kept for good")
    event = AuditEvent.objects.using(using).create(
        tenant=tenant,  # a pass over one tenant shows in that tenant's audit log
        at=timezone.now(),
        actor_kind=actor.kind,
        actor_name=actor.name,
        verb=ARCHIVE_VERB,
        object_type="archive",
        object_id=record.get("archive_id", ""),
        after=record,
        reason=record.get("reason", ""),
        request_id=request_id_var.get(),
    )
    with pgtrigger.ignore(AUDIT_TRIGGER, databases=[using]):
        deleted, _ = AuditEvent.objects.using(using).filter(pk__in=ids).delete()
    if deleted != len(ids):
        raise AuditDeletionRefused(f"deleted {deleted} audit events, expected {len(ids)}")
    return event
