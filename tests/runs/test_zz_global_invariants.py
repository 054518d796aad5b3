"""Checked last, over everything the suite did to the shared demo downstream and database:
no effect was ever received twice, and nothing was dispatched after an unknown outcome."""

from collections import Counter

from django.db.models import Max, Min, Q

from core.models import AuditEvent
from runs.models import Action, Attempt


def test_no_effect_reached_the_downstream_twice(live_db, downstream):
    """Each key arrives at most once per live ledger entry holding it (keys are per tenant,
    and a revoked key may start a new generation)."""
    received = downstream.stats()["effects_received"]
    assert received, "the suite sent nothing?"
    holders = Counter(
        Attempt.objects.filter(number=1, action__idempotency_key__in=received).values_list(
            "action__idempotency_key", flat=True
        )
    )
    assert {k: n for k, n in received.items() if n > holders[k]} == {}


def test_no_attempt_after_an_unknown_one(live_db):
    firsts = (
        Attempt.objects.filter(outcome="unknown")
        .values("action_id")
        .annotate(first_unknown=Min("number"), last=Max("number"))
    )
    assert firsts, "the suite produced no unknown outcome?"
    assert [f for f in firsts if f["last"] > f["first_unknown"]] == []


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
