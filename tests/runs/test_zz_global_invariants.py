"""Checked last, over everything the suite did to the shared demo downstream and database:
no effect was ever received twice, and nothing was dispatched after an unknown outcome,
except a resend that the tool's declaration allowed (issue 13), which says so."""

from collections import Counter

from django.db.models import Max, Min, Q

from core.models import AuditEvent
from runs.models import Action, Attempt


def test_no_effect_reached_the_downstream_twice(live_db, downstream):
    """Each key arrives at most once per live ledger entry holding it (keys are per tenant,
    and a revoked key may start a new generation), plus once per declared resend."""
    received = downstream.stats()["effects_received"]
    assert received, "the suite sent nothing?"
    holders = Counter(
        Attempt.objects.filter(
            Q(number=1) | Q(kind="resend"), action__idempotency_key__in=received
        ).values_list("action__idempotency_key", flat=True)
    )
    assert {k: n for k, n in received.items() if n > holders[k]} == {}


def test_no_attempt_after_an_unknown_one(live_db):
    """Invariant 2. The one exception is a resend of a tool declared idempotent (or
    read_only), and every such attempt carries the declaration that allowed it."""
    firsts = (
        Attempt.objects.filter(outcome="unknown")
        .values("action_id")
        .annotate(first_unknown=Min("number"), last=Max("number"))
    )
    assert firsts, "the suite produced no unknown outcome?"
    after = [
        (a.action_id, a.number, a.kind, (a.declaration or {}).get("effect"))
        for f in firsts
        if f["last"] > f["first_unknown"]
        for a in Attempt.objects.filter(action_id=f["action_id"], number__gt=f["first_unknown"])
    ]
    assert [a for a in after if a[2] != "resend" or a[3] not in {"idempotent", "read_only"}] == []
    unexplained = Attempt.objects.filter(kind="resend").exclude(
        declaration__effect__in=["idempotent", "read_only"]
    )
    assert not unexplained.exists()


def test_every_action_has_the_audit_event_that_put_it_in_its_state(live_db):
    actions = dict(Action.objects.values_list("pk", "state"))
    assert len(set(actions.values())) >= 5, "the suite should leave actions in many states"
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
    missing = [
        (str(pk), state) for pk, state in actions.items() if (str(pk), state) not in put_there
    ]
    assert missing == []
