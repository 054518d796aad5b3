"""Actors and the audit trail.

Every service that changes state takes a keyword-only `actor` and calls `audit()` inside
its own transaction (SPEC §3 invariant 8).
"""

import uuid
from dataclasses import dataclass

from django.utils import timezone

from .logs import request_id_var
from .models import AuditEvent

__all__ = ["SYSTEM", "Actor", "audit", "new_request_id", "request_id_var"]


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
) -> AuditEvent:
    return AuditEvent.objects.create(
        tenant=tenant if tenant is not None else getattr(obj, "tenant", None),
        at=timezone.now(),
        actor_kind=actor.kind,
        actor_name=actor.name,
        verb=verb,
        object_type=object_type or obj._meta.model_name,
        object_id=str(obj.pk),
        before=before,
        after=after,
        reason=reason or "",
        request_id=request_id_var.get(),
    )
