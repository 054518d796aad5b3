"""Reads of the core: the audit log under one set of filter rules, for the API and the
console alike."""

from .models import AuditEvent


def audit_events(tenant, *, actor: str = "", verb: str = "", obj: str = "", since=None, until=None):
    """A tenant's audit log under the filters.

    - verb: exact (`action.succeeded`), or a family when it ends with `.` or `*`
      (`action.`, `action*`);
    - actor: `kind:name` (`operator:alice`) or a bare name;
    - obj: an object id, as stored;
    - since / until: an aware datetime, inclusive.
    """
    qs = AuditEvent.objects.filter(tenant=tenant)
    if verb:
        if verb.endswith("*"):
            qs = qs.filter(verb__startswith=verb[:-1])
        elif verb.endswith("."):
            qs = qs.filter(verb__startswith=verb)
        else:
            qs = qs.filter(verb=verb)
    if actor:
        kind, sep, name = actor.partition(":")
        qs = qs.filter(actor_kind=kind, actor_name=name) if sep else qs.filter(actor_name=actor)
    if obj:
        qs = qs.filter(object_id=obj)
    if since:
        qs = qs.filter(at__gte=since)
    if until:
        qs = qs.filter(at__lte=until)
    return qs
