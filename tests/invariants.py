"""Global invariants, checked once at the end of the test run over everything the suite did
to the shared demo downstream and the test database: no effect was received twice, nothing
was dispatched after an unknown outcome (except a resend that the tool's declaration
allowed, which says so), and every action holds the audit event that put it in its state.
Run by the `downstream` fixture's teardown (tests/conftest.py), so they see the whole run
whatever order the tests ran in, and they run only when the downstream was used.
"""

from collections import Counter

from django.db.models import Max, Min, Q

from core.models import AuditEvent
from runs.models import Action, Attempt


def no_effect_reached_the_downstream_twice(downstream) -> list[str]:
    """Each key arrives at most once per live ledger entry holding it (keys are per tenant,
    and a revoked key may start a new generation), plus once per declared resend."""
    received = downstream.stats()["effects_received"]
    holders = Counter(
        Attempt.objects.filter(
            Q(number=1) | Q(kind="resend"), action__idempotency_key__in=received
        ).values_list("action__idempotency_key", flat=True)
    )
    twice = {k: n for k, n in received.items() if n > holders[k]}
    return [f"key {k!r} reached the downstream {n} times" for k, n in sorted(twice.items())]


RESENDABLE = {"idempotent", "read_only"}


def no_attempt_after_an_unknown_one() -> list[str]:
    """Invariant 2. The one exception is a resend to a tool declared idempotent (or
    read_only), and every such attempt carries the declaration that allowed it."""
    firsts = (
        Attempt.objects.filter(outcome="unknown")
        .values("action_id")
        .annotate(first_unknown=Min("number"), last=Max("number"))
    )
    again = [
        attempt
        for f in firsts
        if f["last"] > f["first_unknown"]
        for attempt in Attempt.objects.filter(
            action_id=f["action_id"], number__gt=f["first_unknown"]
        )
    ]
    unexplained = Attempt.objects.filter(kind="resend").exclude(
        declaration__effect__in=sorted(RESENDABLE)
    )
    return [
        f"action {a.action_id} was attempted again ({a.number}) after its unknown attempt"
        for a in again
        if a.kind != "resend" or (a.declaration or {}).get("effect") not in RESENDABLE
    ] + [
        f"resend {a.action_id}/{a.number} names no declaration that allows it" for a in unexplained
    ]


def every_action_has_the_audit_event_that_put_it_in_its_state() -> list[str]:
    actions = dict(Action.objects.values_list("pk", "state"))
    audited = set(
        AuditEvent.objects.filter(object_type="action")
        .filter(
            Q(verb__in=[f"action.{s}" for s in set(actions.values())]) | Q(verb="action.propose")
        )
        .values_list("object_id", "verb", "after__state")
    )
    put_there = {
        (oid, verb.removeprefix("action.")) for oid, verb, _ in audited if verb != "action.propose"
    }
    put_there |= {(oid, state) for oid, verb, state in audited if verb == "action.propose"}
    return [
        f"action {pk} is {state} with no audit event that put it there"
        for pk, state in actions.items()
        if (str(pk), state) not in put_there
    ]


def breaches(downstream) -> list[str]:
    return (
        no_effect_reached_the_downstream_twice(downstream)
        + no_attempt_after_an_unknown_one()
        + every_action_has_the_audit_event_that_put_it_in_its_state()
    )
