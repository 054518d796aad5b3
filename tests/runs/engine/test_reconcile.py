"""Reconciliation of an unknown outcome (`runs/engine/reconcile.py`) end to end, by what the
tool declares: the state read and judged; a lookup of the key; a resend to an idempotent
tool under the same key, bounded, and never to an unsafe one. Real HTTP, a real Celery worker,
real PostgreSQL; the demo downstream and a billing adapter this project did not write
(`tests/runs/scenarios.py`) judge by their own counters."""

import itertools
import time
import uuid

import pytest

from core.models import AuditEvent, Tool
from runs.models import Action, Attempt, Reconciliation

from ...builders import SETUP
from ..scenarios import (
    billing_tool,
    key,
    propose_and_wait,
    reads,
    resend_events,
    target,
    unknown_out_of_reach,
)

pytestmark = pytest.mark.worker


def test_commit_then_dropped_connection_is_unknown_then_reconciled(w):
    run = w.start_run()
    t, k = target(), key()
    w.downstream.fault("drop_after_commit", target=t)
    response = w.propose(
        run["id"],
        k,
        tool="update_ticket",
        target=t,
        desired_state={"status": "refunded"},
        expected_version=0,
    )
    action = w.wait_action(response.json()["id"])
    assert action["state"] == "succeeded"
    assert action["resolution"] == "reconciled"
    assert [a["outcome"] for a in action["attempts"]] == ["unknown"]
    assert action["reconciliations"][-1]["verdict"] == "match"
    assert action["reconciliations"][-1]["actual_version"] == 1
    assert w.downstream.mutations(t) == 1
    assert w.downstream.received(k) == 1


def test_commit_then_another_actor_changed_the_record_needs_a_human(w):
    run = w.start_run()
    t, k = target(), key()
    w.downstream.seed(t, {"status": "open", "owner": "ann"}, version=3)
    # The tool commits and answers 500; the first round of reads fails, which holds the
    # window open for another actor to edit the ticket before we manage to look.
    w.downstream.fault("error_after_commit", target=t)
    w.downstream.fault("error_on_read", target=t, times=3)
    response = w.propose(
        run["id"],
        k,
        tool="update_ticket",
        target=t,
        desired_state={"status": "refunded"},
        expected_version=3,
    )
    action_id = response.json()["id"]
    deadline = time.monotonic() + 20
    while not Reconciliation.objects.filter(action_id=action_id, verdict="read_failed").exists():
        assert time.monotonic() < deadline, "the first reconciliation never ran"
        time.sleep(0.1)
    assert w.agent.client().get(f"/api/v1/actions/{action_id}").json()["state"] == "unknown"
    w.downstream.external_write(t, {"status": "reopened"})
    action = w.wait_action(action_id, until={"needs_human", "succeeded"}, timeout=40)
    assert action["state"] == "needs_human"
    diff = action["reconciliations"][-1]["diff"]
    assert diff == [{"field": "status", "desired": "refunded", "actual": "reopened"}]
    assert action["reconciliations"][-1]["expected_version"] == 3
    assert action["reconciliations"][-1]["actual_version"] == 5
    assert len(action["attempts"]) == 1
    assert w.downstream.mutations(t) == 1
    assert w.downstream.received(k) == 1


# --- lookup ----------------------------------------------------------------------------------


def test_commit_then_drop_on_a_lookup_tool_settles_by_lookup_with_one_mutation(w):
    run = w.start_run()
    t = target("alice") + "@example.com"
    w.downstream.fault("drop_after_commit", prefix="email", target=t)
    action = propose_and_wait(w, run, "send_email", t, {"subject": "Renewal", "body": "Hi"})

    assert action["state"] == "succeeded"
    assert action["resolution"] == "reconciled"
    assert [a["outcome"] for a in action["attempts"]] == ["unknown"]  # never sent again
    assert reads(action) == [("lookup", "lookup_applied")]
    lookup = action["reconciliations"][0]
    assert lookup["authoritative"] == {"state": {"subject": "Renewal", "body": "Hi"}, "version": 1}
    assert lookup["declaration"]["effect"] == "idempotent"
    assert lookup["declaration"]["lookup"] is True
    assert lookup["detail"] == f"the tool reports it applied key {action['idempotency_key']}"
    assert w.downstream.mutations(t, prefix="email") == 1
    assert w.downstream.received(action["idempotency_key"]) == 1
    # No field heuristics: the state was never read.
    assert w.downstream.stats()["state_reads_by_target"]["email"].get(t, 0) == 0
    # No person: the reconciler settled it, and says why.
    settled = AuditEvent.objects.get(
        object_type="action", object_id=action["id"], verb="action.succeeded"
    )
    assert settled.actor == {"kind": "system", "name": "reconciler"}
    assert "lookup" in settled.reason


def test_the_independent_adapter_is_settled_by_its_own_lookup_too(w, billing_server):
    billing = billing_server(dedupe=True, lookup=True)
    billing_tool(w, billing, effect="unsafe", lookup=True)  # lookup alone, no dedupe claim
    billing.faults.append("apply_then_drop")
    run = w.start_run()
    # A key with characters that must be quoted in a URL path.
    k = f"inv/{uuid.uuid4().hex[:6]}?#%20x"
    action = propose_and_wait(w, run, "charge", "cust 7/b", {"amount": 1200}, k=k)

    assert action["state"] == "succeeded", action
    assert action["resolution"] == "reconciled"
    assert reads(action) == [("lookup", "lookup_applied")]
    assert billing.applied == 1 and billing.posts == [k]
    assert billing.state_reads == 0
    from urllib.parse import quote

    assert billing.lookups == [f"/billing/effects/{quote(k, safe='')}"]


def test_never_received_is_shown_and_an_unsafe_tool_still_goes_to_a_person(w, billing_server):
    billing = billing_server(dedupe=False, lookup=True)
    billing_tool(w, billing, effect="unsafe", lookup=True)
    billing.faults.append("503")  # nothing applied; "never received" is then the truth
    run = w.start_run()
    action = propose_and_wait(w, run, "charge", target("cust"), {"amount": 5})

    assert action["state"] == "needs_human"
    assert reads(action) == [("lookup", "lookup_not_found"), ("state", "missing")]
    assert action["reconciliations"][0]["detail"] == (
        f"the tool reports it never received key {action['idempotency_key']}"
    )
    assert len(billing.posts) == 1  # unsafe: never re-sent past the boundary
    moved = AuditEvent.objects.get(
        object_type="action", object_id=action["id"], verb="action.needs_human"
    )
    assert "never received key" in moved.reason


def test_a_lookup_that_cannot_tell_falls_back_to_the_state_read(w):
    # The ticket system keeps no record of keys: its lookup answers 501.
    Tool.objects.filter(tenant=w.tenant, name="update_ticket").update(lookup=True)
    run = w.start_run()
    t = target()
    w.downstream.fault("error_after_commit", prefix="tickets", target=t)
    action = propose_and_wait(w, run, "update_ticket", t, {"status": "open"})

    assert action["state"] == "succeeded"
    assert action["resolution"] == "reconciled"
    assert reads(action) == [("lookup", "lookup_failed"), ("state", "match")]
    assert "501" in action["reconciliations"][0]["detail"]
    assert [a["outcome"] for a in action["attempts"]] == ["unknown"]
    assert w.downstream.mutations(t) == 1


# --- resends to idempotent tools ----------------------------------------------------------


def test_commit_then_500_on_an_idempotent_tool_is_resent_with_the_same_key(w):
    # The demo outbox deduplicates; declared idempotent *without* lookup, so Takeover's only
    # way to find out is to ask again.
    Tool.objects.filter(tenant=w.tenant, name="send_email").update(lookup=False)
    run = w.start_run()
    t = target("bob") + "@example.com"
    w.downstream.fault("error_after_commit", prefix="email", target=t)
    action = propose_and_wait(w, run, "send_email", t, {"subject": "Hello"})

    assert action["state"] == "succeeded"
    assert action["resolution"] == "applied"
    assert [(a["number"], a["kind"], a["outcome"]) for a in action["attempts"]] == [
        (1, "send", "unknown"),
        (2, "resend", "applied"),
    ]
    assert action["attempts"][1]["declaration"]["effect"] == "idempotent"
    assert action["reconciliations"] == []  # no state read, no lookup: the resend decided
    # The tool saw two requests under one key, and applied one.
    assert w.downstream.received(action["idempotency_key"]) == 2
    assert w.downstream.mutations(t, prefix="email") == 1
    assert w.downstream.stats()["deduplicated"][action["idempotency_key"]] == 1
    (event,) = resend_events(action["id"])
    assert event.before == {"state": "unknown"}
    assert event.after["attempt"] == 2
    assert event.after["idempotency_key"] == action["idempotency_key"]
    assert event.after["declaration"]["effect"] == "idempotent"
    assert "declared idempotent" in event.reason
    # The backoff: the resend started at least IDEMPOTENT_RESEND_DELAY_SECONDS after.
    first, second = Attempt.objects.filter(action_id=action["id"]).order_by("number")
    assert (second.started_at - first.finished_at).total_seconds() >= 0.5


def test_the_independent_adapter_is_resent_and_applies_once(w, billing_server):
    billing = billing_server(dedupe=True, lookup=False)
    billing_tool(w, billing, effect="idempotent")
    billing.faults.append("apply_then_500")
    run = w.start_run()
    action = propose_and_wait(w, run, "charge", target("cust"), {"amount": 30})

    assert action["state"] == "succeeded"
    assert [a["kind"] for a in action["attempts"]] == ["send", "resend"]
    assert len(billing.posts) == 2 and len(set(billing.posts)) == 1
    assert billing.applied == 1


def test_idempotent_with_lookup_asks_first_and_resends_only_what_was_never_received(w):
    run = w.start_run()
    t = target("carol") + "@example.com"
    w.downstream.fault("error_before_commit", prefix="email", target=t)  # 503, nothing applied
    action = propose_and_wait(w, run, "send_email", t, {"subject": "Hi"})

    assert action["state"] == "succeeded"
    assert [(a["kind"], a["outcome"]) for a in action["attempts"]] == [
        ("send", "unknown"),
        ("resend", "applied"),
    ]
    # Asked before resending (at the unknown, and again when the backoff was over).
    assert reads(action)[0] == ("lookup", "lookup_not_found")
    assert set(reads(action)) == {("lookup", "lookup_not_found")}
    assert w.downstream.mutations(t, prefix="email") == 1
    assert w.downstream.received(action["idempotency_key"]) == 2


def test_resends_are_bounded_and_what_stays_unproven_goes_to_a_person(w, billing_server):
    billing = billing_server(dedupe=True, lookup=False)
    billing_tool(w, billing, effect="idempotent")
    billing.faults += ["503", "503", "503"]
    run = w.start_run()
    action = propose_and_wait(w, run, "charge", target("cust"), {"amount": 1}, timeout=60)

    assert action["state"] == "needs_human"
    assert [(a["number"], a["kind"], a["outcome"]) for a in action["attempts"]] == [
        (1, "send", "unknown"),
        (2, "resend", "unknown"),
        (3, "resend", "unknown"),  # IDEMPOTENT_RESEND_LIMIT = 2
    ]
    assert len(billing.posts) == 3 and billing.applied == 0
    assert reads(action) == [("state", "missing")]  # then the usual read, and a person
    attempts = list(Attempt.objects.filter(action_id=action["id"]).order_by("number"))
    gaps = [(b.started_at - a.finished_at).total_seconds() for a, b in itertools.pairwise(attempts)]
    assert gaps[0] >= 0.5 and gaps[1] >= 1.0  # the backoff doubles


def test_the_same_fault_on_an_unsafe_tool_is_never_resent(w, billing_server):
    # The demo's ticket system (unsafe): reconciled, as before tools declared anything ...
    run = w.start_run()
    t = target()
    w.downstream.fault("error_after_commit", prefix="tickets", target=t)
    reconciled = propose_and_wait(w, run, "update_ticket", t, {"status": "open"})
    assert reconciled["state"] == "succeeded" and reconciled["resolution"] == "reconciled"
    assert [a["kind"] for a in reconciled["attempts"]] == ["send"]
    assert reads(reconciled) == [("state", "match")]
    assert w.downstream.received(reconciled["idempotency_key"]) == 1
    # ... or needs_human, never resent, even when the tool deduplicates (it did not say so).
    billing = billing_server(dedupe=True, lookup=False)
    billing_tool(w, billing, effect="unsafe")
    billing.faults.append("503")
    human = propose_and_wait(w, run, "charge", target("cust"), {"amount": 9})
    assert human["state"] == "needs_human"
    assert [a["kind"] for a in human["attempts"]] == ["send"]
    assert len(billing.posts) == 1
    assert resend_events(human["id"]) == []


def test_a_tool_that_lies_is_resent_and_the_audit_names_the_declaration(w, billing_server):
    """Declared idempotent, applies twice. Not Takeover's fault, but visible: the resend's
    audit event holds the declaration that allowed it, and who made it."""
    billing = billing_server(dedupe=False, lookup=False)
    billing_tool(w, billing, effect="unsafe")
    declared = w.admin.client().post(
        "/api/v1/tools/charge/declaration",
        {"effect": "idempotent", "reason": "the vendor's docs say charges dedupe on the key"},
        format="json",
    )
    assert declared.status_code == 200, declared.content
    billing.faults.append("apply_then_500")
    run = w.start_run()
    action = propose_and_wait(w, run, "charge", target("cust"), {"amount": 70})

    assert action["state"] == "succeeded"
    assert billing.applied == 2  # the lie
    (event,) = resend_events(action["id"])
    admin = {"kind": "operator", "name": w.admin.username}
    assert event.after["declaration"]["effect"] == "idempotent"
    assert event.after["declaration"]["declared_by"] == admin
    assert f"declared by operator:{w.admin.username}" in event.reason
    assert action["attempts"][1]["declaration"]["declared_by"] == admin
    # ... and the declaration itself is on record, with its reason.
    change = AuditEvent.objects.get(object_type="tool", verb="tool.declare", tenant=w.tenant)
    assert change.before == {"effect": "unsafe", "lookup": False}
    assert change.after == {"effect": "idempotent", "lookup": False}
    assert change.reason == "the vendor's docs say charges dedupe on the key"


def test_a_resend_is_refused_once_the_tool_is_declared_unsafe(w, billing_server):
    """The claim re-reads the declaration under a lock: a change made after a worker decided
    to resend, but before its claim, wins."""
    from runs.engine.reconcile import action_resend_start

    billing, tool, action_id = unknown_out_of_reach(w, billing_server)
    stale = Action.objects.select_related("tool").get(pk=action_id)
    stale.tool.effect = "idempotent"  # what a worker believed a moment ago
    assert action_resend_start(stale, actor=SETUP) is None
    assert Action.objects.get(pk=action_id).state == "unknown"
    Tool.objects.filter(pk=tool.pk).update(effect="idempotent")
    attempt = action_resend_start(stale, actor=SETUP)
    assert attempt is not None and attempt.kind == "resend" and attempt.number == 2
    assert attempt.declaration["effect"] == "idempotent"
    assert Action.objects.get(pk=action_id).state == "dispatching"
    assert len(billing.posts) == 1  # claimed, not sent: the call is the caller's next step
