"""Actors and the audit trail.

Every service that changes state takes a keyword-only `actor` and calls `audit()` inside
its own transaction (SPEC §3 invariant 8).
"""

import contextvars
import uuid
from dataclasses import dataclass

from django.utils import timezone

from .models import AuditEvent

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")
# The X-Request-ID a client sent, if any: stored beside our own id, never instead of it.
client_request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar(
    "client_request_id", default=""
)


@dataclass(frozen=True)
class Actor:
    kind: str  # "operator" | "principal" | "system"
    name: str

    def as_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name}


SYSTEM = Actor("system", "takeover")
SWEEPER = Actor("system", "sweeper")
DISPATCHER = Actor("system", "dispatcher")
RECONCILER = Actor("system", "reconciler")


def new_request_id() -> str:
    return uuid.uuid4().hex


def audit(
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
) -> AuditEvent:
    return AuditEvent.objects.create(
        **audit_fields(
            actor=actor,
            verb=verb,
            obj=obj,
            tenant=tenant,
            before=before,
            after=after,
            reason=reason,
            object_type=object_type,
            request_id=request_id,
        )
    )


def audit_many(events: list[dict]) -> None:
    """Write several audit events in one INSERT (a batch claim moves many actions at once).
    Each dict holds `audit()`'s keyword arguments."""
    if events:
        AuditEvent.objects.bulk_create([AuditEvent(**audit_fields(**e)) for e in events])


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
